"""LLM judges (``gen judge``) with scripted LLMs: strict score parsing, reformat validity, what the
context judge may see, model families and the cross-family rule, and the statistics (balanced
accuracy, repair rate, pairwise accuracy, kappa) on hand-computed cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED, read_jsonl
from judge_runs import FIX, judge_run

from gen.contextbench import JUDGE_TEMPLATE as TEMPLATE
from gen.contextbench import load as load_scenarios
from gen.contextbench.scoring import metrics, signals
from gen.engine.panel import candidate_families, pairwise_agreement
from gen.errors import ConfigError
from gen.generators.judge.context import JUDGE_SEES, WITHHELD, judge_view
from gen.generators.judge.meta import aligned, pairwise
from gen.generators.judge.scores import (
    as_action,
    judgment,
    parse_reformat,
    parse_score,
    parse_score_lenient,
)
from gen.generators.judge.validity import flags
from gen.llm import LlamaCppConfig, OpenAIConfig, scripted_llm
from gen.llm.family import family_from_gguf, family_from_served, family_of_name
from gen.schemas.judge import ContextJudgeRecord, ContextJudgment, Judgment, MetaRecord
from gen.schemas.scenarios import RECORD_FIELDS, Gold, ScenarioRecord
from gen.stats import (
    agreement,
    balanced_accuracy,
    bootstrap_ci,
    cohen_kappa,
    confusion,
    mean_interval,
)
from gen.templates import Prompts

# --------------------------------------------------------------------------- the <score> tag


@pytest.mark.parametrize(
    ("reply", "score", "problem"),
    [
        ("<score>2</score>", 2, None),
        ("<score>0</score>", 0, None),
        ("<score> 1 </score>", 1, None),
        ("<score>\n2\n</score>", 2, None),
        ("I think it helps. <score>2</score>", 2, None),
        ("<score>1</score><score>1</score>", None, "several_score_tags"),
        ("<score>1</score> then <score>2</score>", None, "several_score_tags"),
        ("2", None, "no_score_tag"),
        ("", None, "no_score_tag"),
        ("<score>2", None, "no_score_tag"),
        ("<Score>2</Score>", None, "no_score_tag"),
        ("<score>2.0</score>", None, "not_a_score"),
        ("<score>3</score>", None, "not_a_score"),
        ("<score>**2**</score>", None, "not_a_score"),
        ("<score></score>", None, "not_a_score"),
        ("<score>1 or 2</score>", None, "not_a_score"),
    ],
    ids=[
        "2",
        "0",
        "spaces",
        "newlines",
        "text_around",
        "two_equal_tags",
        "two_tags",
        "bare",
        "empty",
        "unclosed",
        "capitals",
        "decimal",
        "out_of_scale",
        "markdown",
        "empty_tag",
        "two_values",
    ],
)
def test_parse_score_is_strict(reply: str, score: int | None, problem: str | None) -> None:
    assert parse_score(reply) == (score, problem)
    j = judgment(reply, lenient=False)
    assert j.followed is (score is not None) and j.problem == problem and j.raw == reply
    assert j.normalised == {None: None, 0: 0.0, 1: 0.5, 2: 1.0}[score]


@pytest.mark.parametrize(
    ("reply", "score", "problem"),
    [
        ("<score>2</score>", 2, None),
        (
            "<think>The reference is a search; the prediction is too.</think>\n<score>2</score>",
            2,
            None,
        ),
        (
            "The user wants soap, and so does the reference.\n</think>\n\n<score>1</score>",
            1,
            None,
        ),  # R1: no opening tag
        ("<think>Let me weigh the options. First, the reference", None, "unfinished_think"),
        ("<think>a</think>2", 2, None),  # a bare number: float("2")
        ("<score>2.0</score>", 2, None),
        ("<score>1</score><score>2</score>", 1, None),  # the first
        ("<score>2", 2, None),  # an unclosed tag: the text after it
        ("2</score>", 2, None),
        ("<score>3</score>", None, "not_a_score"),
        ("<score>**2**</score>", None, "not_a_score"),
        ("Very relevant.", None, "no_score_tag"),
        ("", None, "no_score_tag"),
        ("I think it helps. <score>2</score>", 2, None),
    ],
    ids=[
        "plain",
        "think",
        "think_unopened",
        "unfinished",
        "bare_after_think",
        "decimal",
        "first_of_two",
        "unclosed",
        "unopened",
        "out_of_scale",
        "markdown",
        "words",
        "empty",
        "text_around",
    ],
)
def test_parse_score_lenient_reads_as_wagibench_does(
    reply: str, score: int | None, problem: str | None
) -> None:
    assert parse_score_lenient(reply) == (score, problem)
    j = judgment(reply)
    assert j.followed is (score is not None) and j.problem == problem and j.raw == reply


@pytest.mark.skipif(
    not (SHARED / "data" / "wagibench" / "maestro_ob2.py").is_file(),
    reason="WAGIBench's maestro_ob2.py (../shared/data/wagibench) is absent",
)
def test_the_lenient_parse_agrees_with_wagibench_on_reasoning_replies() -> None:
    """Their post_process_llm_outputs (think, then score) and float(), taken out of their file with
    ast and run, on every reasoning-style reply of the fixture set: the same score, or both none."""
    import ast
    import re as re_module

    path = SHARED / "data" / "wagibench" / "maestro_ob2.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == "post_process_llm_outputs"
    ]
    scope: dict[str, Any] = {"re": re_module}
    exec(compile(ast.Module(body=fn, type_ignores=[]), str(path), "exec"), scope)
    post = scope["post_process_llm_outputs"]
    replies = read_jsonl(FIX / "reasoning_replies.jsonl")
    for r in replies:
        _, answer = post(r["reply"], "think")  # their judge: (cot, response)
        try:
            theirs = float(post(answer, "score")[0])
            theirs_score = int(theirs) if theirs in (0.0, 1.0, 2.0) else None
        except ValueError:
            theirs_score = None
        ours, _ = parse_score_lenient(r["reply"])
        if (
            "</think>" in r["reply"]
        ):  # their reading needs the closing tag; without one they read nothing
            assert ours == theirs_score, r


# --------------------------------------------------------------------------- the reformat


@pytest.mark.parametrize(
    ("reply", "action", "problem"),
    [
        (
            '<answer>{"type": "shop", "content": "soap"}</answer>',
            {"type": "shop", "content": "soap"},
            None,
        ),
        (
            'Sure!\n<answer>\n```json\n{"type": "find_directions", "to": "the '
            'pharmacy"}\n```\n</answer>',
            {"type": "find_directions", "to": "the pharmacy"},
            None,
        ),
        ('{"type": "shop", "content": "soap"}', None, "no_answer_tag"),
        (
            '<answer>{"type": "shop", "content": "a"}</answer><answer>{"type": "shop", "content": '
            '"b"}</answer>',
            None,
            "several_answer_tags",
        ),
        ("<answer>shop for soap</answer>", None, "not_json"),
        ('<answer>{"type": "shop", "content": NaN}</answer>', None, "not_json"),
        ('<answer>["shop", "soap"]</answer>', None, "not_an_object"),
        ('<answer>{"type": "buy", "content": "soap"}</answer>', None, "unknown_type"),
        (
            '<answer>{"type": "search", "source": "world", "query": "x"}</answer>',
            None,
            "invalid_fields",
        ),
        (
            '<answer>{"type": "search", "source": ["world"], "query_item": "x", "query": '
            '"y"}</answer>',
            None,
            "invalid_fields",
        ),
        (
            '<answer>{"type": "shop", "content": "soap", "price": 3}</answer>',
            None,
            "invalid_fields",
        ),
    ],
    ids=[
        "clean",
        "fenced",
        "no_tag",
        "two_tags",
        "prose",
        "nan",
        "list",
        "unknown_type",
        "missing_field",
        "list_source",
        "extra_field",
    ],
)
def test_a_reformat_is_valid_only_as_one_of_the_ten_actions(
    reply: str, action: dict | None, problem: str | None
) -> None:
    got, why, detail = parse_reformat(reply)
    assert (got, why) == (action, problem)
    assert (detail is not None) == (
        problem in ("not_json", "not_an_object", "unknown_type", "invalid_fields")
    )


def test_structured_predictions_skip_the_reformat_only_when_valid() -> None:
    assert (
        as_action({"type": "translate", "modality": "audio", "src_language": "German"}) is not None
    )
    assert (
        as_action({"type": "search", "source": ["world"], "query_item": "x", "query": "y"}) is None
    )  # WAGIBench's lists
    assert as_action({"type": "shop"}) is None


# ---------------------------------------------------------------------- what the context judge sees


def sentinel(name: str) -> str:
    """A value that contains no other sentinel (``[[turn_3_repair_prompt]]`` is not inside
    ``[[…_deictic]]``)."""
    return f"[[{name}]]"


def sentinel_scenario() -> ScenarioRecord:
    """Every field a distinct sentinel (enums too: built without validation)."""
    values: dict[str, Any] = {f: sentinel(f) for f in RECORD_FIELDS if f != "gold"}
    values["gold"] = Gold(
        current_answers=[sentinel("current_a"), sentinel("current_b")],
        prior_answers=[sentinel("prior")],
        clarify_indicators=[sentinel("clarify")],
        abstain_indicators=[sentinel("abstain")],
    )
    return ScenarioRecord.model_construct(**values)


@pytest.mark.parametrize(("turn", "style"), [(2, "named"), (3, "named"), (3, "deictic")])
def test_the_judge_prompt_holds_what_the_spec_allows_and_nothing_privileged(
    turn: int, style: str
) -> None:
    s = sentinel_scenario()
    messages = Prompts().render(
        TEMPLATE, **judge_view(s, turn, style), response=sentinel("response")
    )
    text = "\n".join(m["content"] for m in messages)
    assert {"target_context", "change_type", "notes"} <= set(WITHHELD)  # the spec's three
    assert set(WITHHELD) | set(JUDGE_SEES) == set(RECORD_FIELDS) and not set(WITHHELD) & set(
        JUDGE_SEES
    )
    required = [
        sentinel(f)
        for f in (
            "response",
            "turn_1_user",
            "turn_2_user",
            "context_image",
            "turn_1_image",
            "turn_2_image",
            "current_a",
            "current_b",
            "prior",
            "clarify",
            "abstain",
        )
    ]
    sent = {"named": "turn_3_repair_prompt", "deictic": "turn_3_repair_prompt_deictic"}[style]
    if turn == 3:
        required.append(sentinel(sent))
    for value in required:
        assert value in text, value
    withheld = [sentinel(f) for f in WITHHELD if not (turn == 3 and f == sent)]
    assert len(withheld) >= 11
    for value in withheld:
        assert value not in text, value


def test_the_deictic_repair_falls_back_to_the_named_one() -> None:
    s = load_scenarios(FIX / "scenarios.jsonl")["sc-02"]
    assert s.turn_3_repair_prompt_deictic is None
    assert judge_view(s, 3, "deictic")["repair"] == s.turn_3_repair_prompt
    assert judge_view(s, 2, "deictic")["repair"] is None


def test_signals_are_word_boundary_hits_of_the_four_lists() -> None:
    lists = {
        "current_answers": ["hammer", "flat face"],
        "prior_answers": ["screwdriver", "tip"],
        "clarify_indicators": ["which one"],
        "abstain_indicators": ["cannot see"],
    }
    got = signals("Which one? The Hammer's flat face, not the tips; I cannot see it.", lists)
    assert got == {
        "current": ["hammer", "flat face"],
        "prior": [],
        "clarify": ["which one"],
        "abstain": ["cannot see"],
    }


# --------------------------------------------------------------------------- families


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("gpt-4o-mini", "openai"),
        ("o1-preview", "openai"),
        ("claude-3-5-sonnet", "anthropic"),
        ("gemini-1.5-pro", "google"),
        ("gemma-2-9b-it", "google"),
        ("meta-llama/Llama-3.1-8B-Instruct", "meta"),
        ("llama3", "meta"),
        ("Qwen2.5-VL-72B-Instruct", "qwen"),
        ("mistral-large", "mistral"),
        ("Mixtral-8x7B", "mistral"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm"),
        ("phi-3-mini", "microsoft"),
        ("phillips-model", None),
        ("my-own-model", None),
    ],
)
def test_family_of_a_model_name(name: str, family: str | None) -> None:
    assert family_of_name(name) == family


def test_family_from_gguf_metadata_then_file_name_then_architecture() -> None:
    smol = {
        "general.architecture": "llama",
        "general.basename": "smollm2",
        "general.name": "Smollm2 135M",
    }
    assert (
        family_from_gguf(smol, "/m/x.gguf")[0] == "smollm"
    )  # not meta, whatever the architecture says
    assert family_from_gguf({"general.architecture": "qwen2"}, "/m/Qwen2.5-7B.Q4.gguf") == (
        "qwen",
        "gguf file name 'Qwen2.5-7B.Q4.gguf'",
    )
    assert family_from_gguf({"general.architecture": "llama"}, "/m/weights.gguf")[0] == "meta"
    assert family_from_gguf({}, "/m/Weights.gguf")[0] == "weights"  # unknown: its own name
    assert family_from_served("gpt-4o") == ("openai", "served model name 'gpt-4o'")
    assert family_from_served("Local-7B")[0] == "local-7b"


def test_a_backend_family_comes_from_its_config_first() -> None:
    from gen.llm import resolve_family

    llm = scripted_llm([])
    assert resolve_family(OpenAIConfig(model="gpt-4o"), llm)[0] == "openai"
    assert resolve_family(OpenAIConfig(model="gpt-4o", family="house"), llm) == (
        "house",
        "llm.family (config)",
    )
    llm.gguf_metadata = {"general.basename": "gemma-2"}  # type: ignore[attr-defined]
    llm.identity["model_path"] = "/m/x.gguf"
    assert resolve_family(LlamaCppConfig(), llm)[0] == "google"
    assert scripted_llm([], family="qwen").family == "qwen" and scripted_llm([]).family is None


def test_candidate_families_from_option_rows_or_names() -> None:
    assert candidate_families("meta", [("gpt-4o", None)]) == {"meta": "candidate_family= (config)"}
    assert candidate_families(None, [("gpt-4o", None), ("x", "qwen"), ("unknown-model", None)]) == {
        "openai": "the candidate's name 'gpt-4o'",
        "qwen": "the rows' candidate family",
    }


def verdict_script(label: str = "current") -> Any:
    def script(messages: list[dict[str, str]], seed: int) -> str:
        return json.dumps({"label": label, "rationale": "It is about the tool in hand."})

    return script


def test_a_judge_of_the_candidates_family_is_refused_unless_allowed(tmp_path: Path) -> None:
    rows = [
        dict(r, candidate="SmolLM2-135M", candidate_family=None)
        for r in read_jsonl(FIX / "responses.jsonl")
    ]
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    opts = {"kind": "context", "input": str(FIX / "scenarios.jsonl"), "responses": str(responses)}
    with pytest.raises(
        ConfigError,
        match=r"judge SmolLM2-135M-Instruct.Q4_1 is of the candidate's model family "
        r"'smollm' .*allow_same_family=true",
    ):
        judge_run(tmp_path, verdict_script(), **opts)
    result, _, _ = judge_run(
        tmp_path, verdict_script(), out="allowed", allow_same_family=True, **opts
    )
    info = result.manifest["judge"]
    assert info["judge_family"] == "smollm" and info["candidate_family"] == ["smollm"]
    assert info["judge_family_resolution"].startswith(
        "same family allowed (allow_same_family=true)"
    )
    other, _, _ = judge_run(tmp_path, verdict_script(), out="other", family="google", **opts)
    assert other.manifest["judge"]["judge_family_resolution"].startswith("cross-family: ")


def test_several_judges_the_first_cross_family_one_scores_and_kappa_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gen.llm

    labels = {"gemini-pro": "current", "gpt-4o": "prior", "smollm2-served": "current"}

    def fake_make_llm(cfg: Any, cache: Any = None) -> Any:
        llm = scripted_llm(verdict_script(labels[cfg.model]))
        llm.set_family(lambda: gen.llm.family.family_from_served(cfg.model))
        return llm

    monkeypatch.setattr(gen.llm, "make_llm", fake_make_llm)
    judges = [{"backend": "openai", "model": m} for m in ("smollm2-served", "gemini-pro", "gpt-4o")]
    opts = {
        "kind": "context",
        "input": str(FIX / "scenarios.jsonl"),
        "responses": str(FIX / "responses.jsonl"),
        "judges": judges,
        "candidate_family": "smollm",
    }
    with pytest.raises(
        ConfigError, match="judge smollm2-served is of the candidate's model family"
    ):
        judge_run(tmp_path, [], **opts)
    result, _, folder = judge_run(tmp_path, [], allow_same_family=True, out="panel", **opts)
    info = result.manifest["judge"]
    assert (
        info["judge_label"] == "gemini-pro" and info["judge_family"] == "google"
    )  # first of another family
    assert [j["family"] for j in info["judges"]] == ["smollm", "google", "openai"]
    agree = {tuple(a["judges"]): a for a in info["summary"]["agreement"]["all_turns"]}
    assert agree[("smollm2-served", "gemini-pro")] == {
        "judges": ["smollm2-served", "gemini-pro"],
        "rows": 5,
        "agreement": 1.0,
        "kappa": 1.0,
    }
    assert agree[("gemini-pro", "gpt-4o")]["agreement"] == 0.0
    assert all(set(r["verdicts"]) == set(labels) for r in read_jsonl(folder / "judge.jsonl"))


@pytest.mark.parametrize(
    ("candidate", "option", "scorer", "how"),
    [
        ("anthropic", "auto", "gemini-pro", "the benchmark maps anthropic to google"),
        ("google", "auto", "gpt-4o", "the benchmark maps google to openai"),
        ("openai", "auto", "gemini-pro", "the benchmark maps openai to google"),
        ("smollm", "auto", "gemini-pro", None),  # no mapping: the first judge of another family
        ("anthropic", "openai", "gpt-4o", "judge_family=openai (config)"),
        (
            "anthropic",
            "gemini",
            "gemini-pro",
            "judge_family=gemini (config)",
        ),  # the benchmark's family names
    ],
)
def test_judge_family_auto_maps_as_the_benchmark_and_a_family_can_be_forced(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    candidate: str,
    option: str,
    scorer: str,
    how: str | None,
) -> None:
    import gen.llm

    def fake_make_llm(cfg: Any, cache: Any = None) -> Any:
        llm = scripted_llm(verdict_script("current"))
        llm.set_family(lambda: gen.llm.family.family_from_served(cfg.model))
        return llm

    monkeypatch.setattr(gen.llm, "make_llm", fake_make_llm)
    # a pool without the candidate's family, ordered so that the first judge of another family is
    # never the mapped one (the mapping has to do the choosing)
    pools = {
        "anthropic": ("gpt-4o", "gemini-pro"),
        "google": ("claude-3-5-sonnet", "gpt-4o"),
        "openai": ("claude-3-5-sonnet", "gemini-pro"),
        "smollm": ("gemini-pro", "gpt-4o"),
    }
    judges = [{"backend": "openai", "model": m} for m in pools[candidate]]
    result, _, _ = judge_run(
        tmp_path,
        [],
        kind="context",
        input=str(FIX / "scenarios.jsonl"),
        responses=str(FIX / "responses.jsonl"),
        judges=judges,
        candidate_family=candidate,
        judge_family=option,
        out=f"{candidate}-{option}",
    )
    info = result.manifest["judge"]
    assert info["judge_label"] == scorer
    if how:
        assert info["judge_family_resolution"].startswith(
            f"{'judge_family=auto: ' if option == 'auto' else ''}{how}"
        )
    else:
        assert info["judge_family_resolution"].startswith("cross-family: ")


def test_a_forced_judge_family_without_such_a_judge_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gen.llm

    def fake_make_llm(cfg: Any, cache: Any = None) -> Any:
        llm = scripted_llm(verdict_script("current"))
        llm.set_family(lambda: gen.llm.family.family_from_served(cfg.model))
        return llm

    monkeypatch.setattr(gen.llm, "make_llm", fake_make_llm)
    with pytest.raises(ConfigError, match="judge_family=claude: no judge of family 'anthropic'"):
        judge_run(
            tmp_path,
            [],
            kind="context",
            input=str(FIX / "scenarios.jsonl"),
            responses=str(FIX / "responses.jsonl"),
            judges=[{"backend": "openai", "model": "gpt-4o"}],
            candidate_family="google",
            judge_family="claude",
        )
    # auto with the mapped family missing: the first judge of another family, and it says why
    result, _, _ = judge_run(
        tmp_path,
        [],
        kind="context",
        input=str(FIX / "scenarios.jsonl"),
        responses=str(FIX / "responses.jsonl"),
        judges=[{"backend": "openai", "model": "qwen-72b"}],
        candidate_family="openai",
        out="fallback",
    )
    assert (
        "maps openai to google, and no judge of it is given"
        in result.manifest["judge"]["judge_family_resolution"]
    )


# --------------------------------------------------------------------------- statistics by hand


def test_cohen_kappa_and_agreement_by_hand() -> None:
    a, b = [1, 1, 0, 0], [1, 0, 0, 0]
    assert agreement(a, b) == 0.75
    assert cohen_kappa(a, b) == pytest.approx(0.5)  # p_o 3/4, p_e (2*1 + 2*3)/16 = 1/2
    # a textbook table: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no -> p_o .7, p_e .5 -> kappa .4
    x = ["y"] * 25 + ["n"] * 25
    y = ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15
    assert cohen_kappa(x, y) == pytest.approx(0.4)
    assert cohen_kappa(["c"] * 4, ["c"] * 4) == 1.0 and cohen_kappa([], []) is None
    assert cohen_kappa(["a", "b"], ["b", "a"]) == pytest.approx(-1.0)
    assert confusion(["a", "a", "b"], ["a", "b", "b"], ["a", "b"]) == [[1, 1], [0, 1]]
    rows = pairwise_agreement({"j1": ["a", "b", None, "a"], "j2": ["a", "a", "b", None]})
    assert rows == [{"judges": ["j1", "j2"], "rows": 2, "agreement": 0.5, "kappa": 0.0}]


def test_balanced_accuracy_by_hand() -> None:
    pairs = [
        ("current", "current"),
        ("current", "current"),
        ("current", "prior"),
        ("prior", "prior"),
        ("prior", "current"),
        ("clarify", "current"),
    ]
    assert balanced_accuracy(pairs, ("current", "prior")) == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert (
        balanced_accuracy([("current", "current")], ("current", "prior")) is None
    )  # no prior: undefined


def rec(
    sid: str, target: str, label: str | None, turn: int = 2, trial: int = 0
) -> ContextJudgeRecord:
    return ContextJudgeRecord(
        scenario_id=sid,
        turn=turn,
        trial=trial,
        condition="baseline",
        candidate="c",
        target_context=target,
        response="r",
        signals={},
        verdicts={
            "j": ContextJudgment(
                label=label,
                rationale="x" if label else None,
                correct=None if label is None else label == target,
            )
        },
    )


def test_context_metrics_balanced_accuracy_and_repair_rate_by_hand() -> None:
    records = [
        rec("c1", "current", "current"),
        rec("c2", "current", "current"),
        rec("c3", "current", "prior"),
        rec("p1", "prior", "prior"),
        rec("p2", "prior", "current"),
        rec("a1", "abstain", "abstain"),
        rec("k1", "clarify", "current"),
        rec("u1", "current", None),  # the judge gave no label: left out, counted
        rec("c3", "current", "current", turn=3),  # miss repaired
        rec("p2", "prior", "current", turn=3),  # miss not repaired
        rec("k1", "clarify", None, turn=3),  # turn 3 unjudged: not in the repair rate
    ]
    m = metrics(records, lambda r: r.verdicts["j"].label, seed=1, resamples=200)
    assert m["balanced_accuracy"] == pytest.approx(round((2 / 3 + 1 / 2) / 2, 4))
    assert m["turn_2"] == {"replies": 8, "judged": 7, "not_followed": 1, "scenarios": 7}
    assert m["per_label"]["current"]["k"] == 2 and m["per_label"]["current"]["n"] == 3
    assert m["per_label"]["abstain"]["rate"] == 1.0 and m["per_label"]["clarify"]["rate"] == 0.0
    assert m["repair"]["turn_2_misses"] == 3 and m["repair"]["with_turn_3"] == 3
    assert m["repair"]["turn_3_not_followed"] == 1 and (m["repair"]["k"], m["repair"]["n"]) == (
        1,
        2,
    )
    lo, hi = m["balanced_accuracy_ci95"]
    assert lo <= m["balanced_accuracy"] <= hi


def test_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0, 0.5, 1.0, 1.0, 0.5, 0.0, 1.0]
    a = bootstrap_ci(values, lambda v: sum(v) / len(v), seed=3, resamples=500)
    assert a == bootstrap_ci(values, lambda v: sum(v) / len(v), seed=3, resamples=500)
    assert a is not None and a[0] <= sum(values) / len(values) <= a[1]
    assert bootstrap_ci([], lambda v: 0.0, seed=1) is None
    assert mean_interval([1.0, 1.0], seed=0, resamples=100) == {
        "n": 2,
        "mean": 1.0,
        "ci95": [1.0, 1.0],
    }


@pytest.mark.parametrize(
    ("judge", "r1", "r2", "ok"),
    [
        (1, 1, 1, True),
        (-1, 1, 1, False),
        (0, 1, 1, False),  # raters agree strictly
        (0, 0, 1, True),
        (1, 0, 1, True),
        (-1, 0, 1, False),  # one rater tied: = and < do not disagree
        (0, 0, 0, True),
        (1, 0, 0, False),  # both tied: only a judge tie is aligned
    ],
)
def test_pairwise_alignment_rules(judge: int, r1: int, r2: int, ok: bool) -> None:
    assert aligned(judge, r1, r2) is ok


def test_pairwise_accuracy_by_hand() -> None:
    rows = [MetaRecord.model_validate(r) for r in read_jsonl(FIX / "ratings.jsonl")]
    p = pairwise(rows)
    # obs1: (a1,a2) kept, judge > aligned, rater 3 ties (no rater tied) not; (a1,a3) kept, both
    # aligned;
    # (a2,a3) raters order oppositely: dropped. obs2: (b1,b2) kept, judge ties (no rater did) not,
    # rater 3 aligned.
    assert (p["pairs"], p["dropped_raters_disagree"], p["kept"]) == (4, 1, 3)
    assert (p["judge_pairwise_accuracy"]["k"], p["judge_pairwise_accuracy"]["n"]) == (2, 3)
    assert (p["human_pairwise_accuracy"]["k"], p["human_pairwise_accuracy"]["n"]) == (2, 3)


def test_a_distractor_flags_when_it_scores_at_least_the_answer() -> None:
    def js(*scores: int | None) -> list[Judgment]:
        return [judgment(f"<score>{s}</score>" if s is not None else "no tag") for s in scores]

    assert flags(js(2, 1, 0), 0) == (False, [])
    assert flags(js(1, 1, 0), 0) == (True, [1])  # a tie flags
    assert flags(js(0, 2, None), 0) == (True, [1])  # an unscored wrong option never flags
    assert flags(js(None, 2, 2), 0) == (None, [])  # the answer unscored: not judged
    assert flags(js(0, 0, 0), 2) == (True, [0, 1])


# ------------------------------------------- an unknown candidate family (the runner raises)


def test_a_candidate_family_gen_does_not_know_is_a_config_error_naming_the_families(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gen.cli import main

    rows = tmp_path / "p.jsonl"
    rows.write_text((FIX / "predictions.jsonl").read_text())
    argv = ["judge", "kind=wagibench", f"input={rows}", f"hydra.run.dir={tmp_path / 'out'}"]
    assert main([*argv, "candidate_family=acme"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "candidate_family" in err and "'acme'" in err
    assert "anthropic" in err and "openai" in err and "qwen" in err
    assert not (tmp_path / "out").exists()
    # the benchmark's names are families too
    from gen.generators.judge import JudgeConfig

    assert JudgeConfig(kind="wagibench", candidate_family="Claude").candidate_family == "anthropic"


def test_a_candidate_of_unknown_family_stops_judge_family_auto_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gen.cli import main

    rows = tmp_path / "p.jsonl"  # no family, and a model name gen cannot place
    rows.write_text(
        "".join(
            json.dumps(dict(json.loads(line), model="house-model-7b")) + "\n"
            for line in (FIX / "predictions.jsonl").read_text().splitlines()
        )
    )
    argv = ["judge", "kind=wagibench", f"input={rows}", f"hydra.run.dir={tmp_path / 'out'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "candidate family unknown" in err
    assert "judge_family=" in err and "anthropic" in err
    assert not (tmp_path / "out").exists()
    # an explicit family (the candidate's, or the judge's) lets it run
    result, _, _ = judge_run(
        tmp_path,
        lambda m, s: "<score>2</score>",
        kind="wagibench",
        input=str(rows),
        candidate_family="openai",
        out="given",
    )
    assert result.manifest["judge"]["candidate_family"] == ["openai"]
    result, _, _ = judge_run(
        tmp_path,
        lambda m, s: "<score>2</score>",
        kind="wagibench",
        input=str(rows),
        judge_family="smollm",
        out="forced",
    )
    assert result.manifest["judge"]["judge_family"] == "smollm"
