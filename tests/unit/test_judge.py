"""LLM judges (``gen judge``) with scripted LLMs: strict score parsing, reformat validity, what the
context judge may see, model families and the cross-family rule, the statistics (balanced
accuracy, repair rate, pairwise accuracy, kappa) on hand-computed cases, each kind through the
runner, and the audit check that reads a distractor-validity run."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED, check_run_folder, read_jsonl

from gen.contextbench import JUDGE_TEMPLATE as TEMPLATE
from gen.contextbench import load as load_scenarios
from gen.contextbench.scoring import metrics, signals
from gen.errors import ConfigError, InputError
from gen.generators.audit import AuditConfig
from gen.generators.judge import JudgeConfig
from gen.generators.judge import plan as judge_plan
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
from gen.generators.judge.wagibench import read_predictions
from gen.llm import LlamaCppConfig, OpenAIConfig, scripted_llm
from gen.llm.family import family_from_gguf, family_from_served, family_of_name
from gen.panel import candidate_families, pairwise_agreement
from gen.paths import PROMPTS
from gen.runner import RunContext, run
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

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "judge"
NAME = "judge"


def judge_run(
    tmp_path: Path, script: Any, *, family: str | None = "smollm", out: str = "run", **options: Any
) -> tuple[Any, RunContext, Path]:
    cfg = JudgeConfig(**{"cache_dir": None, "progress": "off", **options})
    folder = tmp_path / out
    ctx = RunContext(NAME, cfg, folder).use(llm=scripted_llm(script, family=family))
    return run(NAME, cfg, folder, ctx=ctx, quiet=True), ctx, folder


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


# ---------------------------------------------------------------- kind=wagibench through the runner


def wagibench_script(messages: list[dict[str, str]], seed: int) -> str:
    text = messages[-1]["content"]
    if "<answer>" in text:  # the reformat prompt
        if "bike" in text:
            action = (
                '{"type": "search", "source": "world", "query_item": "bike tyre", '
                '"query": "repair"}'
            )
            return f"Here: <answer>{action}</answer>"
        return "<answer>lamp ideas</answer>"
    return "<score>2</score>" if "soap" in text else "Relevant, I would say."


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


def mcq_bank(tmp_path: Path, n: int = 4) -> Path:
    src = (
        (Path(__file__).resolve().parent.parent / "fixtures" / "audit" / "clean.jsonl")
        .read_text()
        .splitlines(True)
    )
    path = tmp_path / "bank" / "mcq.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(src[:n]))
    return path


def validity_script(messages: list[dict[str, str]], seed: int) -> str:
    """Scores the key 2 and everything else 0, except that 'paint' options are good answers too."""
    text = messages[-1]["content"]
    option = text.split("One candidate answer:\n", 1)[1].split("\n")[0]
    return (
        "<score>2</score>"
        if "paint" in option.lower() or "sand" in option.lower()
        else "<score>0</score>"
    )


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
    audit = run("audit", audit_cfg, tmp_path / "audit", quiet=True)
    findings = [f for f in read_jsonl(tmp_path / "audit" / "audit.jsonl") if f["check"] == "judge"]
    assert sorted(f["items"][0] for f in findings) == flagged
    assert all(
        f["severity"] == "warning" and f["kind"] == "distractor_also_answers" for f in findings
    )
    assert audit.exit_code == 0  # warnings do not fail fail_on=error
    strict = run(
        "audit",
        audit_cfg.model_copy(update={"judge_severity": "error"}),
        tmp_path / "audit2",
        quiet=True,
    )
    assert strict.exit_code == (1 if flagged else 0)
    report = json.loads((tmp_path / "audit2" / "audit.json").read_text())
    assert report["judge"] == str(folder)
    # without judge= the check is skipped
    skipped = run(
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
    run("audit", cfg, tmp_path / "audit", quiet=True)
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
        run("audit", cfg, tmp_path / "audit", quiet=True)


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
        return run("bank", cfg, tmp_path / out, ctx=ctx, quiet=True)

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
    result = run(
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
