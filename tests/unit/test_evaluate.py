"""The candidate runner (``gen evaluate``) with scripted LLMs: the turns as the spec builds them,
trials and prompt conditions, the judge sub-runs, the repair prompt only after a turn-2 miss, the
run manifest's fields, the cross-family rule before any candidate call, and MCQ banks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import check_run_folder, read_jsonl

from gen.contextbench import load as load_scenarios
from gen.engine.runner import RunContext, run_config
from gen.errors import ConfigError, InputError
from gen.generators import evaluate as evaluate_module
from gen.generators.evaluate import EvaluateConfig, cell, conversation, is_scenarios
from gen.generators.evaluate import plan as evaluate_plan
from gen.llm import scripted_llm
from gen.templates import Prompts

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "judge"
BANK = FIX / "scenarios.jsonl"
CONDITIONS = FIX / "prompt_conditions.json"
NAME = "evaluate"


class Ctx:
    """What :func:`conversation` uses of a run context."""

    prompts = Prompts()


def test_turns_are_built_as_the_spec_says() -> None:
    bank = load_scenarios(BANK)
    s = bank["sc-02"]  # has a pre-conversation frame
    first = conversation(Ctx(), "SYSTEM", s, [])  # type: ignore[arg-type]
    assert first == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": f"[Camera: {s.context_image}]"},
        {"role": "user", "content": f"[Camera: {s.turn_1_image}]\n{s.turn_1_user}"},
    ]
    second = conversation(Ctx(), "SYSTEM", s, ["R1"])  # type: ignore[arg-type]
    assert second[3:] == [
        {"role": "assistant", "content": "R1"},
        {"role": "user", "content": f"[Camera: {s.turn_2_image}]\n{s.turn_2_user}"},
    ]
    third = conversation(Ctx(), "SYSTEM", s, ["R1", "R2"], "I mean the starter.")  # type: ignore[arg-type]
    assert third[5:] == [
        {"role": "assistant", "content": "R2"},
        {"role": "user", "content": "I mean the starter."},
    ]
    plain = conversation(Ctx(), "SYSTEM", bank["sc-01"], [])  # type: ignore[arg-type]
    assert [m["role"] for m in plain] == [
        "system",
        "user",
    ]  # no pre-conversation frame, no empty block


def test_the_camera_ablation_sends_the_words_only() -> None:
    s = load_scenarios(BANK)["sc-02"]
    blind = conversation(Ctx(), "SYSTEM", s, ["R1", "R2"], "I mean the starter.", camera=False)  # type: ignore[arg-type]
    assert blind == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": s.turn_1_user},
        {"role": "assistant", "content": "R1"},
        {"role": "user", "content": s.turn_2_user},
        {"role": "assistant", "content": "R2"},
        {"role": "user", "content": "I mean the starter."},
    ]


def test_a_no_camera_run_never_shows_a_frame_and_says_so(tmp_path: Path) -> None:
    result, ctx, out = evaluate(tmp_path, trials=1, no_camera=True)
    bank = load_scenarios(BANK)
    frames = [
        t for s in bank.values() for t in (s.context_image, s.turn_1_image, s.turn_2_image) if t
    ]
    candidate = [c["messages"] for c in ctx.llm.calls if not is_judge(c["messages"])]
    assert candidate and not any("[Camera:" in m["content"] for msgs in candidate for m in msgs)
    assert not any(f in m["content"] for msgs in candidate for m in msgs for f in frames)
    # the judge still sees the frames (its ground truth)
    judged = [c["messages"] for c in ctx.llm.calls if is_judge(c["messages"])]
    assert any(f in m["content"] for msgs in judged for m in msgs for f in frames)
    assert result.manifest["evaluate"]["manifest"]["camera_injection"] is False


def test_cells_run_scenario_major_then_condition_then_trial() -> None:
    cfg = EvaluateConfig(
        input="x", judge="smollm2", condition=["baseline", "careful"], trials=3, cache_dir=None
    )
    assert [cell(cfg, i) for i in range(7)] == [
        (0, 0, 0),
        (0, 0, 1),
        (0, 0, 2),
        (0, 1, 0),
        (0, 1, 1),
        (0, 1, 2),
        (1, 0, 0),
    ]


def is_judge(messages: list[dict[str, str]]) -> bool:
    return messages[0]["content"].startswith("You judge which moment")


def script(messages: list[dict[str, str]], seed: int) -> str:
    """Candidate: talks about the tool of turn 1 at turn 2 (anchored), and names what the repair
    names at turn 3. Judge: 'prior' for the anchored replies, else 'current'."""
    if is_judge(messages):
        reply = messages[-1]["content"].split('"""')[1].strip()
        label = "prior" if reply.startswith("ANCHORED") else "current"
        return json.dumps({"label": label, "rationale": "It is about that frame."})
    turn = 1 + sum(m["role"] == "assistant" for m in messages)
    if turn == 3:
        return f"FIXED after: {messages[-1]['content']}"
    return "ANCHORED to the first thing." if turn == 2 else f"Reply {seed % 97}"


def evaluate(tmp_path: Path, **options: Any) -> tuple[Any, RunContext, Path]:
    cfg = EvaluateConfig(
        **{
            "input": str(BANK),
            "judge": "smollm2",
            "allow_same_family": True,
            "prompt_conditions": str(CONDITIONS),
            "cache_dir": None,
            "progress": "off",
            **options,
        }
    )
    out = tmp_path / "run"
    ctx = RunContext(NAME, cfg, out).use(llm=scripted_llm(script, family="smollm"))
    return run_config(NAME, cfg, out, ctx=ctx, quiet=True), ctx, out


def test_a_scenario_run_judges_turn_2_and_repairs_only_the_misses(tmp_path: Path) -> None:
    result, ctx, out = evaluate(
        tmp_path, trials=2, condition=["baseline", "careful"], repair_style="deictic"
    )
    check_run_folder(out, NAME, 4 * 2 * 2, hydra=False)
    trials = read_jsonl(out / "evaluate.jsonl")
    bank = load_scenarios(BANK)
    for t in trials:
        s = bank[t["scenario_id"]]
        assert (
            t["turn_2"]["SmolLM2-135M-Instruct.Q4_1"] == "prior"
        )  # every turn-2 reply is anchored
        assert t["correct_turn_2"] is (s.target_context == "prior")
        if t["correct_turn_2"]:
            assert (
                t["replies"]["turn_3"] is None
                and t["repair_prompt"] is None
                and t["turn_3"] is None
            )
        else:  # the deictic repair where there is one, else the named one
            assert t["repair_prompt"] == (s.turn_3_repair_prompt_deictic or s.turn_3_repair_prompt)
            assert t["replies"]["turn_3"] == f"FIXED after: {t['repair_prompt']}"
            assert t["repaired"] is (s.target_context == "current")
    # the steps are runs of their own: the judge's inputs and folders
    t2 = read_jsonl(out / "responses_turn2.jsonl")
    t3 = read_jsonl(out / "responses_turn3.jsonl")
    assert len(t2) == 16 and len(t3) == sum(not t["correct_turn_2"] for t in trials) == 12
    assert {r["turn"] for r in t3} == {3} and all(r["repair_style"] == "deictic" for r in t3)
    check_run_folder(out / "judge_turn2", "judge", 16, hydra=False)
    check_run_folder(out / "judge_turn3", "judge", 12, hydra=False)
    assert [s["generator"] for s in result.manifest["subruns"]] == ["judge", "judge"]
    # the spec's run manifest
    m = result.manifest["evaluate"]["manifest"]
    for key in (
        "benchmark_version",
        "schema_revision",
        "camera_injection",
        "scenarios_sha256",
        "judge_prompt_version",
        "judge_prompt_sha256",
        "candidate_model",
        "judge_model",
        "judge_family",
        "judge_family_resolution",
        "trials",
        "temperature",
        "ranking_condition",
        "timestamp_utc",
        "runner_git_commit",
        "prompt_conditions_sha256",
    ):
        assert key in m, key
    assert (
        m["camera_injection"] is True
        and m["trials"] == 2
        and m["judge_prompt_version"] == "context-judge-1"
    )
    assert m["judge_family"] == m["candidate_family"] == "smollm"
    assert m["judge_family_resolution"].startswith("same family allowed")
    # the scores: one prior scenario right, the current one wrong -> balanced accuracy 0.5
    score = result.manifest["evaluate"]["primary_score"]
    assert score["balanced_turn_2_accuracy"] == 0.5 and score["condition"] == "baseline"
    judged = result.manifest["evaluate"]["judges"]["SmolLM2-135M-Instruct.Q4_1"]["careful"]
    assert (
        judged["per_label"]["prior"]["rate"] == 1.0
        and judged["per_label"]["current"]["rate"] == 0.0
    )
    assert (judged["repair"]["k"], judged["repair"]["n"]) == (
        2,
        6,
    )  # the current scenario's 2 trials of 6 misses
    # trials are seeded apart, conditions reach the candidate as its system prompt
    systems = {c["messages"][0]["content"] for c in ctx.llm.calls if not is_judge(c["messages"])}
    assert systems == {c["system_prompt"] for c in json.loads(CONDITIONS.read_text())}
    seeds = [c["seed"] for c in ctx.llm.calls if not is_judge(c["messages"])]
    assert len(set(seeds)) == len(seeds)


def test_the_cross_family_rule_stops_the_run_before_any_candidate_call(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is of the candidate's model family 'smollm'"):
        evaluate(tmp_path, allow_same_family=False)


def test_scenario_banks_need_a_judge_and_known_conditions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {"input": str(BANK), "cache_dir": None, "prompt_conditions": str(CONDITIONS)}
    with pytest.raises(ConfigError, match="judge= is required for a scenario bank"):
        evaluate_plan(EvaluateConfig(**base))
    with pytest.raises(
        ConfigError,
        match=r"condition: 'nope' is not in .*prompt_conditions.json \(it has baseline, careful\)",
    ):
        evaluate_plan(EvaluateConfig(**base, judge="smollm2", condition=["nope"]))
    with pytest.raises(ConfigError, match="ranking_condition='baseline' is not among"):
        evaluate_plan(EvaluateConfig(**base, judge="smollm2", condition=["careful"]))
    with pytest.raises(InputError, match="prompt_conditions: no such file"):
        evaluate_plan(
            EvaluateConfig(
                **{**base, "prompt_conditions": str(tmp_path / "none.json")}, judge="smollm2"
            )
        )
    monkeypatch.setattr(evaluate_module, "SHARED_CONDITIONS", tmp_path / "absent.json")
    with pytest.raises(ConfigError, match="prompt_conditions= is required"):
        evaluate_plan(EvaluateConfig(input=str(BANK), cache_dir=None, judge="smollm2"))
    shared = tmp_path / "shared.json"
    shared.write_text(CONDITIONS.read_text())
    monkeypatch.setattr(evaluate_module, "SHARED_CONDITIONS", shared)
    plan = evaluate_plan(
        EvaluateConfig(input=str(BANK), cache_dir=None, judge="smollm2", limit=2, trials=3)
    )
    assert plan.n == 6 and plan.data[2][0] == shared


def test_is_scenarios(tmp_path: Path) -> None:
    assert is_scenarios(BANK) and not is_scenarios(FIX / "predictions.jsonl")
    (tmp_path / "scenarios.jsonl").write_text(BANK.read_text())
    assert is_scenarios(tmp_path) and not is_scenarios(FIX / "prompt_conditions.json")


# --------------------------------------------------------------------------- MCQ banks


def mcq_rows() -> list[dict[str, Any]]:
    return [
        {
            "item_id": f"i{k}",
            "question_type": "goal" if k < 3 else "actions",
            "question": "What next?",
            "options": ["To cook.", "To read.", "To run."],
            "answer": k % 3,
            "visible": {"context": f"C does {k}."},
            "privileged": {},
        }
        for k in range(5)
    ]


def answer_a(messages: list[dict[str, str]], seed: int) -> str:
    return "Answer: a) To cook."


def test_an_mcq_bank_is_asked_with_its_context_and_scored(tmp_path: Path) -> None:
    bank = tmp_path / "mcq.jsonl"
    bank.write_text("".join(json.dumps(r) + "\n" for r in mcq_rows()))
    cfg = EvaluateConfig(input=str(bank), cache_dir=None, progress="off")
    ctx = RunContext(NAME, cfg, tmp_path / "run").use(llm=scripted_llm(answer_a))
    result = run_config(NAME, cfg, tmp_path / "run", ctx=ctx, quiet=True)
    check_run_folder(tmp_path / "run", NAME, 5, hydra=False)
    s = result.manifest["evaluate"]
    assert (s["accuracy"]["k"], s["accuracy"]["n"]) == (2, 5) and s["accuracy"]["chance"] == round(
        1 / 3, 4
    )
    assert s["by_question_type"]["goal"]["k"] == 1 and s["by_question_type"]["actions"]["k"] == 1
    assert (
        "C does 4." in ctx.llm.calls[4]["messages"][-1]["content"]
    )  # the visible context is shown
    assert all(c["temperature"] == 0.0 for c in ctx.llm.calls)


def test_a_wagibench_layout_is_an_mcq_bank(tmp_path: Path) -> None:
    rows = [
        {
            "x": {
                "client_tag": f"rec{k}",
                "context_window": {"start_s": None, "end_s": None},
                "cues": [{"modality": ["vision"], "description": f"cue {k}"}],
                "mcq_set": [
                    {"type": "shop", "content": "soap"},
                    {"type": "find_directions", "to": "a park"},
                ],
            },
            "y": k % 2,
            "meta": {
                "client_tag": f"rec{k}",
                "scenario": {"shortname": "s"},
                "structured_goal": {"type": "shop", "content": "soap"},
            },
        }
        for k in range(2)
    ]
    (tmp_path / "wagibench_mcq_similar.json").write_text(json.dumps(rows))
    cfg = EvaluateConfig(input=str(tmp_path), cache_dir=None, progress="off")
    ctx = RunContext(NAME, cfg, tmp_path / "run").use(llm=scripted_llm(lambda m, s: "Answer: (B)"))
    result = run_config(NAME, cfg, tmp_path / "run", ctx=ctx, quiet=True)
    recs = read_jsonl(tmp_path / "run" / "evaluate.jsonl")
    assert [r["item_id"] for r in recs] == ["s_rec0", "s_rec1"] and [
        r["correct"] for r in recs
    ] == [False, True]
    assert (
        '{"type": "find_directions", "to": "a park"}' in ctx.llm.calls[0]["messages"][-1]["content"]
    )
    assert "cue 0" in ctx.llm.calls[0]["messages"][-1]["content"]
    assert result.manifest["evaluate"]["accuracy"]["k"] == 1
    (tmp_path / "wagibench_mcq_similar.json").write_text(json.dumps([dict(rows[0], y=5)]))
    with pytest.raises(
        InputError, match=r"wagibench_mcq_similar.json:row 1: y: expected the answer's index"
    ):
        evaluate_plan(cfg)


# ------------------------------------------------------------ multi-select (EgoIntrospect H.1.1)


def test_labels_run_past_z_and_read_back() -> None:
    from gen.formats.mcq import label, label_index

    assert [label(k) for k in (0, 25, 26, 27, 33, 51, 52, 701, 702)] == [
        "a",
        "z",
        "aa",
        "ab",
        "ah",
        "az",
        "ba",
        "zz",
        "aaa",
    ]
    assert all(label_index(label(k)) == k for k in range(2000))
    assert label_index("AB") == 27 and label_index("a1") is None and label_index("") is None


@pytest.mark.parametrize(
    ("reply", "chosen"),
    [
        ("Answer: c, ah", [2, 33]),
        ("Answer: (c), **ah**", [2, 33]),
        ("answer: c) tool 03: does job 03, ah) No tool needed", [2, 33]),
        ("I think so.\nAnswer: No tool needed", [33]),
        ("Answer: c and f.", [2, 5]),
        ("Answer:\n- c\n- ab", [2, 27]),
        ("c, c, f", [2, 5]),
        ("Answer: tool 03", [2]),
        ("Answer: a map search and a calculator", None),  # prose, never half-read
        ("Answer: c, zz", None),  # a label beyond the options shown
        ("Answer: c, maybe f", None),
        ("", None),
    ],
)
def test_a_multi_select_reply_is_read_whole_or_not_at_all(
    reply: str, chosen: list[int] | None
) -> None:
    from gen.formats.mcq import parse_labels

    options = [f"tool {k:02d}: does job {k:02d}" for k in range(1, 34)] + ["No tool needed"]
    assert parse_labels(reply, options) == chosen


TOOLS = [f"tool_{k:02d}" for k in range(1, 34)]
"""The paper's universe size (H.1.1: 33 canonical tools)."""
# request -> (required, helpful, the tools the scripted candidate picks)
REQUESTS = {
    "Which bus and what will it cost?": (
        ["tool_03", "tool_30"],
        ["tool_31"],
        ["tool_03", "tool_30", "tool_31"],
    ),  # every required + a helpful: right; recalled; no distractor
    "What is this plant?": (
        ["tool_05"],
        [],
        ["tool_05", "tool_12"],
    ),  # + an irrelevant tool: wrong; recalled; a distractor
    "Is this a good price?": ([], ["tool_20"], ["No tool needed"]),  # none required: right
    "Say hello back.": (
        [],
        [],
        ["tool_33"],
    ),  # needs nothing, picks the 33rd tool: wrong, distractor
    "Read and translate this menu.": (
        ["tool_28", "tool_29"],
        [],
        ["tool_28"],
    ),  # a required tool missing: wrong; not recalled; no distractor
}


def tool_bank(tmp_path: Path) -> Path:
    """An ``introspect task=tool_selection`` run over 33 tools: its records are the bank."""
    import yaml

    from gen.generators.introspect import IntrospectConfig

    universe = tmp_path / "tools.yaml"
    universe.write_text(
        yaml.safe_dump({"tools": [{"name": t, "description": f"does job {t[-2:]}"} for t in TOOLS]})
    )
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        "".join(
            json.dumps(
                {
                    "request_id": f"r{i}",
                    "start": 10,
                    "end": 14,
                    "request": q,
                    "required_tools": req,
                    "helpful_tools": helpful,
                    "context": [{"t": 11, "text": q, "speech": True}],
                }
            )
            + "\n"
            for i, (q, (req, helpful, _)) in enumerate(REQUESTS.items())
        )
    )
    out = tmp_path / "ts"
    icfg = IntrospectConfig(
        task="tool_selection",
        input=str(requests),
        tools=str(universe),
        cache_dir=None,
        progress="off",
    )
    run_config("introspect", icfg, out, quiet=True)
    return out / "introspect.jsonl"


def pick_tools(messages: list[dict[str, str]], seed: int) -> str:
    """The candidate: finds the labels of the tools it wants in the options as the prompt shows
    them (``<label>) <tool in words>: …``), so the rendering and the reading must agree."""
    text = messages[-1]["content"]
    shown = {}
    for line in text.splitlines():
        head, sep, rest = line.partition(") ")
        if sep and head.isalpha() and head.islower():
            shown[rest.split(":")[0]] = head
    request = next(q for q in REQUESTS if q in text)
    return "Answer: " + ", ".join(shown[t.replace("_", " ")] for t in REQUESTS[request][2])


def test_a_tool_selection_bank_of_33_tools_is_scored_by_the_hierarchical_rule(
    tmp_path: Path,
) -> None:
    bank = tool_bank(tmp_path)
    rows = read_jsonl(bank)
    assert len(rows) == 5 and all(len(r["options"]) == 34 for r in rows)
    cfg = EvaluateConfig(input=str(bank), cache_dir=None, progress="off")
    ctx = RunContext(NAME, cfg, tmp_path / "run").use(llm=scripted_llm(pick_tools))
    result = run_config(NAME, cfg, tmp_path / "run", ctx=ctx, quiet=True)
    prompt = ctx.llm.calls[0]["messages"][-1]["content"]
    assert "ag) tool 33: does job 33" in prompt and "ah) No tool needed" in prompt
    recs = {r["item_id"]: r for r in read_jsonl(tmp_path / "run" / "evaluate.jsonl")}
    assert [r["correct"] for r in recs.values()] == [True, False, True, False, False]
    assert next(r for r in recs.values() if r["letter"] == "ag")["required"] == []
    # by hand: strict 2 of 5 (the first and third); required recall 2 of 3 (the three with
    # required tools: the first two hold them all, the last misses tool_29); distractor rate
    # 2 of 5 (tool_12 in the second, tool_33 in the fourth)
    m = result.manifest["evaluate"]["multi_select"]
    assert (m["strict_accuracy"]["k"], m["strict_accuracy"]["n"]) == (2, 5)
    assert (m["required_recall"]["k"], m["required_recall"]["n"]) == (2, 3)
    assert (m["distractor_rate"]["k"], m["distractor_rate"]["n"]) == (2, 5)
    assert m["unparseable"] == 0
    assert result.manifest["evaluate"]["accuracy"]["k"] == 2


def test_a_single_answer_item_of_more_than_26_options_is_asked_and_read(tmp_path: Path) -> None:
    row = {
        "item_id": "big",
        "question_type": "pick",
        "question": "Which one?",
        "options": [f"thing {k}" for k in range(30)],
        "answer": 28,
    }
    bank = tmp_path / "mcq.jsonl"
    bank.write_text(json.dumps(row) + "\n")
    cfg = EvaluateConfig(input=str(bank), cache_dir=None, progress="off")
    ctx = RunContext(NAME, cfg, tmp_path / "run").use(
        llm=scripted_llm(lambda m, s: "Answer: ac) thing 28")
    )
    result = run_config(NAME, cfg, tmp_path / "run", ctx=ctx, quiet=True)
    assert "ad) thing 29" in ctx.llm.calls[0]["messages"][-1]["content"]
    rec = read_jsonl(tmp_path / "run" / "evaluate.jsonl")[0]
    assert rec["letter"] == "ac" and rec["choice"] == 28 and rec["correct"]
    assert result.manifest["evaluate"]["accuracy"]["k"] == 1


def test_the_judge_sub_runs_take_every_judge_option_of_the_run_whole(tmp_path: Path) -> None:
    """evaluate passes its judge options to the judge sub-runs as one object: each option
    :class:`gen.engine.panel.JudgeOptions` declares (a new one too) reaches them with its value."""
    from gen.engine.panel import JudgeOptions
    from gen.engine.runconfig import CommonConfig

    own = [k for k in JudgeOptions.model_fields if k not in CommonConfig.model_fields]
    cfg = EvaluateConfig(input=str(BANK), judge="smollm2", verdict_tokens=77, cache_dir=None)
    options = cfg.judge_options()
    assert list(options) == own and len(own) >= 10
    assert options["judge"] is cfg.judge  # the validated model config, not a dump of it
    result, _, out = evaluate(
        tmp_path,
        trials=1,
        judge_labels=["J"],
        judge_family="smollm",
        judge_temperature=0.3,
        verdict_tokens=77,
        ranking_condition="careful",
        condition=["baseline", "careful"],
        bootstrap=150,
    )
    parent = result.manifest["config"]
    for turn in (2, 3):
        child = json.loads((out / f"judge_turn{turn}" / "manifest.json").read_text())["config"]
        for k in own:
            if k != "candidate_family":  # the family this run resolved for the candidate
                assert child[k] == parent[k], (turn, k)
        assert child["candidate_family"] == "smollm" and child["kind"] == "context"
