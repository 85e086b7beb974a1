"""``gen judge`` through the runner with scripted LLMs: kind=wagibench (scores, reformats,
layouts, variants), kind=context (labels, signals, gates, bad rows), distractor validity with the
audit check and bank add that read its run, ``judge meta``, and the prompts as files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import check_run_folder, read_jsonl
from judge_runs import FIX, NAME, judge_run, mcq_bank, validity_script, wagibench_script

from gen.engine.runner import RunContext, run_config
from gen.errors import InputError
from gen.generators.audit import AuditConfig
from gen.generators.judge import JudgeConfig
from gen.generators.judge import plan as judge_plan
from gen.generators.judge.wagibench import read_predictions
from gen.llm import scripted_llm
from gen.paths import PROMPTS
from gen.stats import cohen_kappa

# ---------------------------------------------------------------- kind=wagibench through the runner


def test_wagibench_rows_are_scored_reformatted_or_counted(tmp_path: Path) -> None:
    result, ctx, folder = judge_run(
        tmp_path,
        wagibench_script,
        kind="wagibench",
        input=str(FIX / "predictions.jsonl"),
        variant=["reference", "contexts_reference"],
    )
    check_run_folder(folder, NAME, 3, hydra=False)
    recs = {r["id"]: r for r in read_jsonl(folder / "judge.jsonl")}
    label = "SmolLM2-135M-Instruct.Q4_1"
    assert recs["p1"]["structured"] and recs["p1"]["reformat"] is None
    assert recs["p1"]["judgments"]["reference"][label]["normalised"] == 1.0
    assert (
        recs["p2"]["reformat"]["action"]["type"] == "search" and recs["p2"]["outcome"] == "judged"
    )
    assert recs["p2"]["judgments"]["contexts_reference"][label] == {
        "score": None,
        "normalised": None,
        "followed": False,
        "problem": "no_score_tag",
        "raw": "Relevant, I would say.",
    }
    assert (
        recs["p3"]["outcome"] == "reformat_invalid"
        and recs["p3"]["reformat"]["problem"] == "not_json"
    )
    s = result.manifest["judge"]["summary"]
    ref = s["judges"][label]["reference"]
    assert ref["mean"]["n"] == 1 and ref["mean"]["mean"] == 1.0
    assert ref["mean_failures_as_zero"] == {
        **ref["mean_failures_as_zero"],
        "n": 3,
        "mean": round(1 / 3, 4),
    }
    assert (ref["not_followed"]["k"], ref["not_followed"]["n"]) == (1, 2)
    assert set(ref["by_action_type"]) == {"shop"} and ref["by_model"]["gpt-4o"]["n"] == 1
    assert s["rows"] == {
        "total": 3,
        "structured": 1,
        "reformatted": 2,
        "reformat_invalid": 1,
        "judged": 2,
        "rejected": 0,
    }
    info = result.manifest["judge"]
    assert (
        info["judge_prompt_version"] == "wagibench-judge-2"
        and len(info["judge_prompt_sha256"]) == 64
    )
    assert {"judge/wagibench.jinja", "judge/reformat.jinja", "judge/_actions.jinja"} <= set(
        result.manifest["prompts"]
    )
    # the contexts variant shows the cues; the reference-only variant does not
    prompts = [
        c["messages"][-1]["content"]
        for c in ctx.llm.calls
        if "<score>" in c["messages"][-1]["content"]
    ]
    assert sum("the soap dispenser is empty" in p for p in prompts) == 1


def test_wagibench_layout_rows_and_references_join_by_id(tmp_path: Path) -> None:
    layout = [
        {
            "x": {
                "client_tag": "rec1",
                "context_window": {"start_s": None, "end_s": None},
                "cues": ["empty soap bottle"],
                "mcq_set": [
                    {"type": "shop", "content": "hand soap"},
                    {"type": "shop", "content": "a kettle"},
                ],
            },
            "y": 0,
            "meta": {
                "client_tag": "rec1",
                "scenario": {"shortname": "soap"},
                "structured_goal": {"type": "shop", "content": "hand soap"},
                "item_id": "i1",
            },
        }
    ]
    (tmp_path / "wagibench_mcq_similar.json").write_text(json.dumps(layout))
    (tmp_path / "p.jsonl").write_text(
        json.dumps({"id": "i1", "prediction": {"type": "shop", "content": "soap"}}) + "\n"
    )
    state = {
        "s": {
            "meta": {"client_tag": "rec1", "scenario": {"shortname": "soap"}},
            "x": {"app_states": {"Notes": {"state": ["buy soap"]}}},
        }
    }
    (tmp_path / "digital_state.json").write_text(json.dumps(state))
    [(_, row)] = read_predictions(
        tmp_path / "p.jsonl", str(tmp_path), str(tmp_path / "digital_state.json")
    )
    assert row.reference is not None and row.reference.type == "shop" and row.group == "soap_rec1"
    assert row.contexts is not None and row.contexts.cues == ["empty soap bottle"]
    assert row.contexts.digital_state == {"Notes": {"state": ["buy soap"]}}
    # a layout row carrying its own prediction
    with_pred = [dict(layout[0], prediction="buy soap")]
    (tmp_path / "layout_preds.json").write_text(json.dumps(with_pred))
    [(where, row)] = read_predictions(tmp_path / "layout_preds.json")
    assert (
        where.endswith("layout_preds.json:row 1")
        and row.id == "i1"
        and row.prediction == "buy soap"
    )
    (tmp_path / "orphan.jsonl").write_text(json.dumps({"id": "zz", "prediction": "x"}) + "\n")
    with pytest.raises(InputError, match=r"orphan.jsonl:1: reference: missing"):
        read_predictions(tmp_path / "orphan.jsonl", str(tmp_path))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"id": "a", "prediction": 7, "reference": {"type": "shop", "content": "x"}},
            r":1: prediction: ",
        ),
        (
            {"id": "a", "prediction": "x", "reference": {"type": "fly", "content": "x"}},
            r":1: reference: ",
        ),
        (
            {"id": "a", "prediction": "x", "reference": {"type": "shop"}},
            r":1: reference.content: Field required",
        ),
        (
            {"prediction": "x", "reference": {"type": "shop", "content": "x"}},
            r":1: id: Field required",
        ),
        ([1, 2], r":1: expected a JSON object, got list"),
    ],
    ids=["number", "unknown_type", "missing_field", "no_id", "not_object"],
)
def test_a_bad_prediction_row_is_named_by_file_line_and_field(
    tmp_path: Path, row: Any, message: str
) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match=rf"^{path}{message}"):
        read_predictions(path)


def test_variants_show_their_inputs_as_text(tmp_path: Path) -> None:
    """§4.3's variants: the default is the paper's best (cues + reference); each shows its contexts
    as text (a cue object by its description, never a Python dict) and the reference only when it
    has it."""
    assert JudgeConfig(kind="wagibench", input="x").variant == ["cues_reference"]
    variants = [
        "cues_reference",
        "reference",
        "cues",
        "socratic",
        "socratic_reference",
        "contexts_reference",
    ]
    row = {
        "id": "a",
        "prediction": {"type": "shop", "content": "hand soap"},
        "reference": {"type": "shop", "content": "soap"},
        "contexts": {
            "cues": [
                {"modality": ["vision"], "description": ["the dispenser is empty"]},
                "it is late",
            ],
            "captions": ["a person presses a soap pump"],
            "digital_state": {
                "datetimings": {"current_datetime": "2025-01-01 10:00"},
                "Notes": {"state": {"notes": [{"title": "buy soap"}]}, "context": True},
            },
        },
    }
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(row) + "\n")
    _, ctx, _ = judge_run(
        tmp_path,
        lambda m, s: "<think>ok</think><score>2</score>",
        kind="wagibench",
        input=str(path),
        variant=variants,
        candidate_family="openai",  # the row names no model: an unknown family stops auto
    )
    prompts = {}
    for c in ctx.llm.calls:
        text = c["messages"][-1]["content"]
        prompts[
            (
                ("cues" if "the dispenser is empty" in text else "")
                + ("captions" if "soap pump" in text else "")
                + ("state" if "Current state of the user's Notes app" in text else "")
                + ("ref" if "A reference action" in text else "")
            )
        ] = text
    assert set(prompts) == {
        "cuesref",
        "ref",
        "cues",
        "captions",
        "captionsref",
        "cuescaptionsstateref",
    }
    for text in prompts.values():
        assert "{'" not in text and "'description'" not in text  # no Python dict reprs
    assert "the dispenser is empty\nit is late" in prompts["cues"]
    assert "Cues:\nthe dispenser is empty" in prompts["cuescaptionsstateref"]
    assert "The current datetime is: 2025-01-01 10:00" in prompts["cuescaptionsstateref"]


def test_contexts_reference_needs_contexts(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps({"id": "a", "prediction": "x", "reference": {"type": "shop", "content": "x"}})
        + "\n"
    )
    with pytest.raises(InputError, match=rf"^{path}:1: contexts: variant contexts_reference needs"):
        judge_run(tmp_path, [], kind="wagibench", input=str(path), variant="contexts_reference")


# ------------------------------------------------------------------ kind=context through the runner


def test_context_judge_labels_signals_and_summary(tmp_path: Path) -> None:
    def script(messages: list[dict[str, str]], seed: int) -> str:
        reply = messages[-1]["content"].split('"""')[1]
        label = (
            "clarify"
            if "Which one" in reply
            else "abstain"
            if "cannot see" in reply
            else "prior"
            if "starter" in reply or "hammer" in reply
            else "current"
        )
        return json.dumps({"label": label, "rationale": "The reply names it."})

    result, ctx, folder = judge_run(
        tmp_path,
        script,
        kind="context",
        input=str(FIX / "scenarios.jsonl"),
        responses=str(FIX / "responses.jsonl"),
    )
    check_run_folder(folder, NAME, 5, hydra=False)
    recs = read_jsonl(folder / "judge.jsonl")
    label = "SmolLM2-135M-Instruct.Q4_1"
    assert [r["verdicts"][label]["label"] for r in recs] == [
        "prior",
        "current",
        "prior",
        "clarify",
        "abstain",
    ]
    assert [r["verdicts"][label]["correct"] for r in recs] == [False, False, True, True, True]
    assert recs[0]["signals"]["current"] == ["hammer", "swing"]
    m = result.manifest["judge"]["summary"]["judges"][label]["gpt-4o / baseline"]
    assert m["balanced_accuracy"] == 0.0 and m["repair"]["k"] == 1 and m["repair"]["n"] == 1
    info = result.manifest["judge"]
    assert info["judge_prompt_version"] == "context-judge-1"
    assert info["judge_prompt_sha256"] == result.manifest["prompts"]["judge/context.jinja"]
    assert info["candidate_model"] == ["gpt-4o"] and info["candidate_family"] == ["openai"]
    assert set(info["withheld_from_judge"]) >= {
        "target_context",
        "change_type",
        "notes",
        "referent_complexity",
    }
    # every judge call was a schema-constrained verdict at temperature 0
    assert all(c["temperature"] == 0.0 and c["response_format"] for c in ctx.llm.calls)


def test_a_verdict_whose_rationale_fails_the_text_gates_is_not_a_label(tmp_path: Path) -> None:
    """The rationale is stored: a cut-off one makes the verdict one that did not follow
    instructions (the gate is the problem), never a label."""

    def script(messages: list[dict[str, str]], seed: int) -> str:
        return json.dumps(
            {"label": "current", "rationale": "The reply names the bowl on the table and the, p"}
        )

    result, _, folder = judge_run(
        tmp_path,
        script,
        kind="context",
        input=str(FIX / "scenarios.jsonl"),
        responses=str(FIX / "responses.jsonl"),
    )
    verdicts = [next(iter(r["verdicts"].values())) for r in read_jsonl(folder / "judge.jsonl")]
    assert all(v["label"] is None and v["problem"] == "truncated_text" for v in verdicts)
    assert (
        sum(v for k, v in result.manifest["validators"].items() if k.endswith(".truncated_text"))
        == 5
    )


def test_a_verdict_outside_the_schema_is_counted_not_guessed(tmp_path: Path) -> None:
    result, _, folder = judge_run(
        tmp_path,
        lambda m, s: "current, because of the hammer",
        kind="context",
        input=str(FIX / "scenarios.jsonl"),
        responses=str(FIX / "responses.jsonl"),
    )
    recs = read_jsonl(folder / "judge.jsonl")
    assert len(recs) == 5 and all(
        r["verdicts"][next(iter(r["verdicts"]))]["label"] is None for r in recs
    )
    assert all(
        r["verdicts"][next(iter(r["verdicts"]))]["problem"] == "invalid_output" for r in recs
    )
    m = next(iter(result.manifest["judge"]["summary"]["judges"].values()))["gpt-4o / baseline"]
    assert m["turn_2"]["not_followed"] == 4 and m["balanced_accuracy"] is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"scenario_id": "sc-99", "turn": 2, "response": "x"},
            r":1: scenario_id: 'sc-99' is not in the scenario bank",
        ),
        ({"scenario_id": "sc-01", "turn": 4, "response": "x"}, r":1: turn: "),
        ({"scenario_id": "sc-01", "turn": 2}, r":1: response: Field required"),
        (
            {"scenario_id": "sc-01", "turn": 2, "response": "x", "extra": 1},
            r":1: extra: Extra inputs are not permitted",
        ),
    ],
    ids=["unknown_scenario", "turn", "no_response", "extra"],
)
def test_a_bad_response_row_is_named(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(row) + "\n")
    cfg = JudgeConfig(
        kind="context", input=str(FIX / "scenarios.jsonl"), responses=str(path), cache_dir=None
    )
    with pytest.raises(InputError, match=rf"^{path}{message}"):
        judge_plan(cfg)


def test_judge_config_errors() -> None:
    with pytest.raises(ValueError, match="kind= is required"):
        JudgeConfig(input="x")
    with pytest.raises(ValueError, match="kind=context needs responses="):
        JudgeConfig(kind="context", input="x")
    with pytest.raises(ValueError, match="give judge= or judges="):
        JudgeConfig(kind="wagibench", input="x", judge="smollm2", judges=["smollm2"])
    with pytest.raises(ValueError, match="judge meta reads its kind"):
        JudgeConfig(action="meta", kind="context", input="x")
    assert JudgeConfig(kind="wagibench", input="x", variant="contexts_reference").variant == [
        "contexts_reference"
    ]


# ---------------------------------------------------------------- distractor validity and the audit


def test_distractor_validity_flags_items_and_the_audit_reports_them(tmp_path: Path) -> None:
    bank = mcq_bank(tmp_path)
    result, _, folder = judge_run(
        tmp_path, validity_script, kind="distractor_validity", input=str(bank), out="v"
    )
    check_run_folder(folder, NAME, 4, hydra=False)
    items = [json.loads(x) for x in bank.read_text().splitlines()]
    recs = {r["item_id"]: r for r in read_jsonl(folder / "judge.jsonl")}
    label = "SmolLM2-135M-Instruct.Q4_1"
    expected = {}
    for it in items:
        score = [2 if "paint" in o.lower() or "sand" in o.lower() else 0 for o in it["options"]]
        expected[it["item_id"]] = any(
            score[k] >= score[it["answer"]] for k in range(len(score)) if k != it["answer"]
        )
    assert {k: r["flagged"][label] for k, r in recs.items()} == expected
    flagged = sorted(k for k, v in expected.items() if v)
    audit_cfg = AuditConfig(
        input=str(bank),
        judge=str(folder),
        cache_dir=None,
        progress="off",
        embeddings=False,
        checks=["structure", "judge"],
    )
    audit = run_config("audit", audit_cfg, tmp_path / "audit", quiet=True)
    findings = [f for f in read_jsonl(tmp_path / "audit" / "audit.jsonl") if f["check"] == "judge"]
    assert sorted(f["items"][0] for f in findings) == flagged
    assert all(
        f["severity"] == "warning" and f["kind"] == "distractor_also_answers" for f in findings
    )
    assert audit.exit_code == 0  # warnings do not fail fail_on=error
    strict = run_config(
        "audit",
        audit_cfg.model_copy(update={"judge_severity": "error"}),
        tmp_path / "audit2",
        quiet=True,
    )
    assert strict.exit_code == (1 if flagged else 0)
    report = json.loads((tmp_path / "audit2" / "audit.json").read_text())
    assert report["judge"] == str(folder)
    # without judge= the check is skipped
    skipped = run_config(
        "audit", audit_cfg.model_copy(update={"judge": None}), tmp_path / "audit3", quiet=True
    )
    assert skipped.exit_code == 0


def test_items_the_judge_could_not_score_are_a_finding_not_a_pass(tmp_path: Path) -> None:
    bank = mcq_bank(tmp_path)
    first = json.loads(bank.read_text().splitlines()[0])

    def script(messages: list[dict[str, str]], seed: int) -> str:  # no tag at all on the first item
        return (
            "A fine answer."
            if any(o in messages[-1]["content"] for o in first["options"])
            else "<score>0</score>"
        )

    _, _, folder = judge_run(tmp_path, script, kind="distractor_validity", input=str(bank), out="v")
    cfg = AuditConfig(
        input=str(bank),
        judge=str(folder),
        cache_dir=None,
        progress="off",
        embeddings=False,
        checks=["judge"],
    )
    run_config("audit", cfg, tmp_path / "audit", quiet=True)
    findings = read_jsonl(tmp_path / "audit" / "audit.jsonl")
    not_judged = [f for f in findings if f["kind"] == "not_judged"]
    assert len(not_judged) == 1 and not_judged[0]["items"] == [first["item_id"]]
    assert not_judged[0]["numbers"] == {"items": 1, "of": 4, "judge": "SmolLM2-135M-Instruct.Q4_1"}


def test_the_audit_refuses_a_run_that_is_not_distractor_validity(tmp_path: Path) -> None:
    _, _, folder = judge_run(
        tmp_path, wagibench_script, kind="wagibench", input=str(FIX / "predictions.jsonl")
    )
    cfg = AuditConfig(
        input=str(mcq_bank(tmp_path)),
        judge=str(folder),
        cache_dir=None,
        progress="off",
        embeddings=False,
        checks=["judge"],
    )
    with pytest.raises(InputError, match="not a judge run of kind distractor_validity"):
        run_config("audit", cfg, tmp_path / "audit", quiet=True)


class WordsEmbedder:
    """Bag of words hashed into 64 dimensions (bank add's near-duplicate search needs an
    embedder)."""

    def encode(self, texts: list[str]) -> Any:
        import numpy as np

        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 64] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def describe(self) -> dict[str, Any]:
        return {"backend": "fake", "model": "words"}


def test_bank_add_gates_on_the_judge_check(tmp_path: Path) -> None:
    from gen.generators.bank import BankConfig

    bank = mcq_bank(tmp_path, 6)
    _, _, folder = judge_run(
        tmp_path, validity_script, kind="distractor_validity", input=str(bank), out="v"
    )
    assert any(r["flagged"][next(iter(r["flagged"]))] for r in read_jsonl(folder / "judge.jsonl"))

    def add(out: str, **audit: Any) -> Any:
        cfg = BankConfig(
            action="add",
            bank=str(tmp_path / "store"),
            input=str(bank.parent),
            cache_dir=None,
            progress="off",
            audit_options={
                "checks": ["structure", "judge"],
                "embeddings": False,
                "judge": str(folder),
                **audit,
            },
        )
        ctx = RunContext("bank", cfg, tmp_path / out).use(embedder=WordsEmbedder())
        return run_config("bank", cfg, tmp_path / out, ctx=ctx, quiet=True)

    refused = add("a1", judge_severity="error")
    assert refused.exit_code == 1 and refused.accepted == 0
    assert all(r["reason"] == "audit_failed" for r in read_jsonl(tmp_path / "a1" / "rejects.jsonl"))
    assert add("a2").exit_code == 0  # as warnings they are listed, not refused


# --------------------------------------------------------------------------- judge meta


def test_meta_on_scores_pairwise_accuracy_and_a_confusion_png(tmp_path: Path) -> None:
    result, _, folder = judge_run(tmp_path, [], action="meta", input=str(FIX / "ratings.jsonl"))
    check_run_folder(folder, NAME, 5, hydra=False)
    s = result.manifest["judge"]["summary"]
    assert s["values"] == "scores" and s["pairwise"]["kept"] == 3
    assert s["pairwise"]["judge_pairwise_accuracy"]["rate"] == round(2 / 3, 4)
    assert (folder / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert s["confusion"]["rater_1"] == [
        [1, 1, 0],
        [0, 1, 0],
        [1, 0, 1],
    ]  # rows 0/0.5/1 (rater 1), columns judge


def test_meta_on_labels_kappa_and_per_label_agreement(tmp_path: Path) -> None:
    rows = [
        ("current", "current", "current"),
        ("current", "current", "prior"),
        ("prior", "prior", "prior"),
        ("prior", "current", "prior"),
        ("clarify", "clarify", "clarify"),
        ("current", "current", "current"),
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "group": "g", "raters": [a, b], "judge": j}) + "\n"
            for i, (a, b, j) in enumerate(rows)
        )
    )
    result, _, _ = judge_run(tmp_path, [], action="meta", input=str(path), plots=False)
    lab = result.manifest["judge"]["summary"]["labels"]
    judge_r1 = [j for _, _, j in rows], [a for a, _, _ in rows]
    assert lab["pairs"]["judge~rater_1"]["kappa"] == round(cohen_kappa(*judge_r1), 4)
    assert lab["pairs"]["judge~rater_1"]["agreement"] == round(5 / 6, 4)
    assert lab["pairs"]["rater_1~rater_2"]["agreement"] == round(5 / 6, 4)
    assert (
        lab["per_label"]["current"]["rater_1"]["k"],
        lab["per_label"]["current"]["rater_1"]["n"],
    ) == (2, 3)


def test_meta_reports_the_snap_mcq_and_sbert_baselines(tmp_path: Path) -> None:
    """Appendix H's baselines beside the judge: Snap-MCQ (1 when the option nearest the prediction
    is the reference) and SBERT similarity (the cosine, ties within 0.1), scored pairwise like
    it."""
    from fakes import FakeEmbedder

    soap, kettle, lamp = (
        {"type": "shop", "content": c} for c in ("hand soap", "a kettle", "a desk lamp")
    )
    rows = [  # obs1: the raters rank a > b > c; obs2: d > e
        {"id": "a", "group": "obs1", "raters": [1.0, 1.0], "judge": 1.0, "prediction": soap},
        {
            "id": "b",
            "group": "obs1",
            "raters": [0.5, 0.5],
            "judge": 1.0,
            "prediction": {"type": "shop", "content": "hand soap refill"},
        },
        {"id": "c", "group": "obs1", "raters": [0.0, 0.0], "judge": 0.0, "prediction": kettle},
        {"id": "d", "group": "obs2", "raters": [1.0, 1.0], "judge": 0.0, "prediction": soap},
        {"id": "e", "group": "obs2", "raters": [0.0, 0.0], "judge": 1.0, "prediction": lamp},
    ]
    for r in rows:
        r |= {"reference": soap, "options": [kettle, soap, lamp]}
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = JudgeConfig(action="meta", input=str(path), plots=False, cache_dir=None, progress="off")
    result = run_config(
        NAME,
        cfg,
        tmp_path / "m",
        ctx=RunContext(NAME, cfg, tmp_path / "m").use(embedder=FakeEmbedder()),
        quiet=True,
    )
    recs = {r["id"]: r for r in read_jsonl(tmp_path / "m" / "judge.jsonl")}
    assert [recs[i]["snap_mcq"] for i in "abcde"] == [
        1.0,
        1.0,
        0.0,
        1.0,
        0.0,
    ]  # a refill is nearest the soap
    assert (
        recs["a"]["sbert"] == pytest.approx(1.0) and recs["c"]["sbert"] < recs["b"]["sbert"] < 1.0
    )
    s = result.manifest["judge"]["summary"]
    assert s["pairwise"]["judge_pairwise_accuracy"]["rate"] == round(
        2 / 4, 4
    )  # a~b tie wrong, d<e wrong
    b = s["baselines"]
    assert b["snap_mcq"]["judge_pairwise_accuracy"]["rate"] == round(3 / 4, 4)  # a~b tied: wrong
    assert b["sbert_similarity"]["tie_within"] == 0.1 and b["rows_with_options"] == 5
    sims = [recs[i]["sbert"] for i in "abcde"]
    expect = sum(
        abs(x - y) > 0.1 and x > y
        for x, y in ((sims[0], sims[1]), (sims[0], sims[2]), (sims[1], sims[2]), (sims[3], sims[4]))
    )
    assert b["sbert_similarity"]["judge_pairwise_accuracy"]["rate"] == round(expect / 4, 4)


def test_meta_takes_judge_values_from_a_judge_run(tmp_path: Path) -> None:
    _, _, folder = judge_run(
        tmp_path, wagibench_script, kind="wagibench", input=str(FIX / "predictions.jsonl"), out="j"
    )
    path = tmp_path / "r.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": i, "group": "g", "raters": [r, r]}) + "\n"
            for i, r in (("p1", 1.0), ("p2", 0.5), ("p3", 0.0))
        )
    )
    result, _, out = judge_run(
        tmp_path, [], action="meta", input=str(path), judge_run=str(folder), out="m"
    )
    assert [r["judge"] for r in read_jsonl(out / "judge.jsonl")] == [1.0, None, None]
    assert result.manifest["judge"]["judge_prompt_version"] == "wagibench-judge-2"
    path.write_text(json.dumps({"id": "p1", "group": "g", "raters": [1.0, 0.5]}) + "\n")
    with pytest.raises(InputError, match=r":1: judge: missing"):
        judge_run(tmp_path, [], action="meta", input=str(path), out="m2")
    path.write_text(
        json.dumps({"id": "p1", "group": "g", "raters": [1.0, "current"], "judge": 1.0}) + "\n"
    )
    with pytest.raises(InputError, match=r":1: raters: numbers and labels mixed"):
        judge_run(tmp_path, [], action="meta", input=str(path), out="m3")


def test_the_judge_prompts_are_files_with_their_inputs_named() -> None:
    for name in ("wagibench", "reformat", "context", "distractor_validity"):
        text = (PROMPTS / "judge" / f"{name}.jinja").read_text()
        assert text.startswith("{#-") and "inputs:" in text.split("#}")[0]


# ------------------------------------------------------- the reformat budget (WAGIBench: 1,024)

ANSWER = '{"type": "search", "source": "world", "query_item": "bike tyre", "query": "repair"}'
THINKING = "<think>" + "The user looks at a flat tyre and wants to know how to fix it. " * 48
REASONING = f"{THINKING}</think>\n<answer>{ANSWER}</answer>"
"""A reasoning reformatter's reply of about 800 tokens (4 characters a token, as the fake counts
them): the thinking, then the answer."""
CUT_IN_ANSWER = (REASONING.index(ANSWER) + 20) // 4
"""A budget that ends inside the answer, after the reasoning closed."""


def budgeted_run(tmp_path: Path, reformat: str, **options: Any) -> tuple[Any, Path]:
    """A judge run whose scripted backend stops a reply at its max_tokens (4 characters a token),
    saying ``finish_reason=length`` as a server does."""

    def script(messages: list[dict[str, str]], seed: int) -> tuple[str, str]:
        text = (
            reformat
            if "<answer>" in messages[-1]["content"]
            else "<think>It fits the reference.</think> <score>2</score>"
        )
        cap = 4 * llm.calls[-1]["max_tokens"]
        return (text[:cap], "length") if len(text) > cap else (text, "stop")

    llm = scripted_llm(script, family="smollm")
    rows = tmp_path / "p.jsonl"
    rows.write_text(
        json.dumps(
            {
                "id": "p1",
                "prediction": "The user probably wants to search how to fix a flat bike tyre.",
                "reference": {
                    "type": "search",
                    "source": "world",
                    "query_item": "bike tyre",
                    "query": "how to fix a flat",
                },
                "model": "gpt-4o",
            }
        )
        + "\n"
    )
    cfg = JudgeConfig(
        kind="wagibench",
        input=str(rows),
        variant=["reference"],
        cache_dir=None,
        progress="off",
        **options,
    )
    folder = tmp_path / "run"
    ctx = RunContext(NAME, cfg, folder).use(llm=llm)
    return run_config(NAME, cfg, folder, ctx=ctx, quiet=True), folder


def test_a_reasoning_reformat_of_800_tokens_fits_the_default_budget_and_is_scored(
    tmp_path: Path,
) -> None:
    assert 700 < len(REASONING) / 4 < 900
    result, folder = budgeted_run(tmp_path, REASONING)
    rec = read_jsonl(folder / "judge.jsonl")[0]
    assert rec["outcome"] == "judged" and rec["reformat"]["action"]["query_item"] == "bike tyre"
    assert rec["judgments"]["reference"]["SmolLM2-135M-Instruct.Q4_1"]["score"] == 2
    assert result.manifest["config"]["reformat_tokens"] == 1024


@pytest.mark.parametrize(
    ("reply", "options", "reason"),
    [
        (REASONING, {"reformat_tokens": 500}, "truncated"),  # cut mid-<think> at the budget
        (REASONING, {"reformat_tokens": CUT_IN_ANSWER}, "truncated"),  # cut inside the answer
        (THINKING, {}, "unfinished_think"),  # stopped without closing its reasoning
    ],
    ids=["cut-in-think", "cut-in-answer", "unclosed-think"],
)
def test_a_reformat_cut_at_its_budget_is_a_typed_reject_never_a_score(
    tmp_path: Path, reply: str, options: dict[str, Any], reason: str
) -> None:
    result, folder = budgeted_run(tmp_path, reply, **options)
    assert read_jsonl(folder / "judge.jsonl") == []
    (reject,) = read_jsonl(folder / "rejects.jsonl")
    assert (reject["stage"], reject["reason"]) == ("reformat", reason)
    rows = result.manifest["judge"]["summary"]["rows"]
    assert (rows["rejected"], rows["judged"], rows["reformat_invalid"]) == (1, 0, 0)


def test_a_score_reply_cut_at_its_budget_is_a_reject(tmp_path: Path) -> None:
    result, folder = budgeted_run(tmp_path, REASONING, judge_tokens=4)
    (reject,) = read_jsonl(folder / "rejects.jsonl")
    assert (reject["stage"], reject["reason"]) == ("judge", "truncated")
