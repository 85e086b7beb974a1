"""The ``tom`` generator with the scripted fake LLM: each LLM stage's prompt and parsing
(analysis, counterfactual goals, beliefs and actions, simplify), transition validation, every
filter with planted cases in a run, assembly (seeded shuffles), no leak of the future, the EgoToM
CSV export, the funnel, concurrency, shards, and the generator end to end. Input parsing, clip
selection, surface forms and the filter rules are tested in test_tom.py; the scripted LLM, tom's
fake embedder and the run helpers are in tests/tom_runs.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from concurrency import Jittered
from conftest import merge_and_compare, read_jsonl
from tom_runs import (
    EGOTOM,
    GOOD,
    NARRATION,
    TIMELINES,
    FakeEmbedder,
    Script,
    allowed_range,
    cfg_for,
    make_ctx,
    run_tom,
    stage_of,
)

from gen.generators.tom import candidates, read_input
from gen.generators.tom.stages import (
    analysis,
    check_transition,
    counterfactual_beliefs_actions,
    counterfactual_goals,
    numbered,
    simplify,
)
from gen.llm import OpenAIConfig, scripted_llm
from gen.llm.attempts import AttemptFailure
from gen.mcq import EGOTOM_QUESTION, egotom_columns, load_banks
from gen.runner import run
from gen.schemas.tom import TomQuestion
from gen.timelines import Clip, fmt_line, fmt_time

HEX32 = re.compile(r"^[0-9a-f]{32}$")
TYPES = ("goal", "belief", "actions")

# -------------------------------------------------------------------- 4. stage 2 and the transition


def fixture_clip(i: int = 0) -> Clip:
    return read_input(cfg_for())[i]


def test_analysis_prompt_schema_and_parse(tmp_path: Path) -> None:
    script = Script()
    ctx = make_ctx(tmp_path, script)
    clip = fixture_clip()
    allowed = candidates(clip, ctx.cfg)
    truth = analysis(ctx, ctx.cfg, 0, clip, allowed)
    (call,) = script.calls("analysis")
    req = call.request
    for line in numbered(clip):  # the whole timeline, numbered
        assert line in req
    assert "Summary of the whole video: C makes a vegetable soup and cleans up." in req
    assert allowed_range(req) == (allowed[0] + 1, allowed[-1] + 1)
    schema = ctx.llm.calls[0]["response_format"]["schema"]
    assert schema["properties"]["transition_line"]["enum"] == [i + 1 for i in allowed]
    assert schema["properties"]["future_goal"]["pattern"].endswith("{1,64}$")
    assert call.messages[0]["role"] == "system" and any(
        m["role"] == "assistant" for m in call.messages
    )  # one-shot
    assert truth.index == sum(allowed_range(req)) // 2 - 1
    assert (truth.goal, truth.belief) == (
        "To wash the dishes.",
        "C believes that the soup is ready.",
    )
    assert (
        truth.actions
        == "C turns off the stove, carries the board to the sink, and scrubs the board."
    )


@pytest.mark.parametrize(
    ("line_no", "reason"),
    [
        (0, "transition_unknown"),
        (81, "transition_unknown"),
        (999, "transition_unknown"),
        (1, "transition_first_half"),
        (40, "transition_first_half"),
        (79, "transition_too_late"),
        (80, "transition_too_late"),
    ],
)
def test_transition_validation(line_no: int, reason: str) -> None:
    clip = fixture_clip()  # 80 lines, 300 s
    problem = check_transition(line_no, clip, cfg_for(time_window=None))
    assert problem is not None and problem[0] == reason


def test_transition_validation_window_and_valid_lines() -> None:
    clip = fixture_clip()
    cfg = cfg_for()
    ok = [i + 1 for i in range(80) if check_transition(i + 1, clip, cfg) is None]
    assert ok and all(41 <= n <= 78 and 150 <= clip.lines[n - 1].t <= 270 for n in ok)
    outside = next(n for n in range(41, 79) if clip.lines[n - 1].t > 270)
    assert check_transition(outside, clip, cfg)[0] == "transition_outside_window"  # type: ignore[index]
    assert check_transition(outside, clip, cfg_for(restrict_to_window=False)) is None


def test_invalid_transition_is_regenerated_then_rejected(tmp_path: Path) -> None:
    bad = {
        "transition_line": 3,
        "future_goal": "x y",
        "next_actions": ["a b", "c d", "e f"],
        "belief": "g h",
    }
    script = Script({"analysis": [bad]})
    ctx = make_ctx(tmp_path, script)
    clip = fixture_clip()
    truth = analysis(ctx, ctx.cfg, 0, clip, candidates(clip, ctx.cfg))  # 2nd attempt is good
    assert truth.goal == "To wash the dishes." and ctx.stats["analysis.transition_first_half"] == 1
    calls = script.calls("analysis")
    assert len(calls) == 2 and calls[0].seed != calls[1].seed  # fresh seed per attempt
    script = Script({"analysis": [bad, {**bad, "transition_line": 500}]})
    ctx = make_ctx(tmp_path, script, attempts=2)
    with pytest.raises(AttemptFailure) as e:
        analysis(ctx, ctx.cfg, 0, clip, candidates(clip, ctx.cfg))
    assert (e.value.stage, e.value.reason) == ("analysis", "transition_unknown")
    assert '"transition_line":500' in (e.value.raw or "")


def test_analysis_rejects_an_echoed_example_and_degenerate_text(tmp_path: Path) -> None:
    echo = lambda req: {**GOOD["analysis"](req), "belief": "the old pot is too small for the roots"}  # noqa: E731

    def loop(req):
        return {
            **GOOD["analysis"](req),
            "future_goal": "cook the soup cook the soup cook the soup",
        }

    clip = fixture_clip()
    for out, reason in ((echo, "example_echo"), (loop, "repetition")):
        ctx = make_ctx(tmp_path, Script({"analysis": [out, out]}), attempts=2)
        with pytest.raises(AttemptFailure) as e:
            analysis(ctx, ctx.cfg, 0, clip, candidates(clip, ctx.cfg))
        assert e.value.reason == reason


def test_truncated_or_invalid_llm_output_becomes_a_reject(tmp_path: Path) -> None:
    script = Script({"analysis": [('{"transition_line": 50, "future_goal": "To co', "length")] * 2})
    result, _ = run_tom(tmp_path, script, n=1, attempts=2)
    (rej,) = read_jsonl(tmp_path / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == ("analysis", "truncated") and rej["raw"].startswith(
        '{"transition_line"'
    )
    assert result.accepted == 0


# --------------------------------------------------------------------------- 5. stages 3-5


def past_of(clip: Clip, upto: int) -> list[str]:
    return numbered(clip)[:upto]


def truth_for(clip: Clip, index: int = 60):
    from gen.generators.tom.stages import Truth

    return Truth(
        index,
        "To wash the dishes.",
        "C believes that the soup is ready.",
        "C turns off the stove, carries the board to the sink, and scrubs the board.",
        [],
    )


def test_goals_stage_prompt_and_parse(tmp_path: Path) -> None:
    out = {
        "wrong_goals": ["wash the dishes", "To bake a cake", "to bake a cake."]
    }  # truth copy + duplicate
    clip = fixture_clip()
    ctx = make_ctx(tmp_path, Script({"goals": [out]}), attempts=1)
    with pytest.raises(AttemptFailure) as e:
        counterfactual_goals(ctx, ctx.cfg, 0, past_of(clip, 60), truth_for(clip))
    assert (e.value.stage, e.value.reason) == ("counterfactual_goals", "too_few_wrong_goals")
    assert ctx.stats["counterfactual_goals.same_as_truth.dropped"] == 1
    assert ctx.stats["counterfactual_goals.duplicate.dropped"] == 1
    ctx = make_ctx(tmp_path, Script())
    goals = counterfactual_goals(ctx, ctx.cfg, 0, past_of(clip, 60), truth_for(clip))
    assert goals == ["To bake a cake.", "To set the table.", "To sweep the floor."]
    req = ctx.llm.calls[0]["messages"][-1]["content"]
    assert (
        "C's actual goal: To wash the dishes." in req
        and numbered(clip)[59] in req
        and numbered(clip)[60] not in req
    )


def test_goals_stage_retries_with_a_fresh_seed(tmp_path: Path) -> None:
    script = Script(
        {"goals": [{"wrong_goals": ["wash the dishes", "wash the dishes", "To bake a cake"]}]}
    )
    ctx = make_ctx(tmp_path, script)
    clip = fixture_clip()
    assert len(counterfactual_goals(ctx, ctx.cfg, 0, past_of(clip, 60), truth_for(clip))) == 3
    assert (
        len(script.calls("goals")) == 2
        and ctx.stats["counterfactual_goals.too_few_wrong_goals"] == 1
    )


def test_beliefs_actions_stage_prompt_and_parse(tmp_path: Path) -> None:
    clip = fixture_clip()
    ctx = make_ctx(tmp_path, Script())
    beliefs, actions, whys = counterfactual_beliefs_actions(
        ctx, ctx.cfg, 0, past_of(clip, 60), truth_for(clip)
    )
    assert beliefs == [
        "C believes that the soup needs more salt.",
        "C believes that the carrots are still hard.",
        "C believes that the pot is about to boil over.",
    ]
    assert actions[0] == "C picks the salt, adds salt to the pot, and stirs the pot." and whys == []
    req = ctx.llm.calls[0]["messages"][-1]["content"]
    assert "What C actually believes now: C believes that the soup is ready." in req
    assert (
        "What C actually does next: C turns off the stove" in req
        and "C's goal: To wash the dishes." in req
    )
    # one type short after the last attempt: the other still comes back
    same = GOOD["beliefs_actions"](None)
    same["alternatives"][1]["belief"] = "the soup is ready"  # the truth again
    ctx = make_ctx(tmp_path, Script({"beliefs_actions": [same]}), attempts=1)
    beliefs, actions, whys = counterfactual_beliefs_actions(
        ctx, ctx.cfg, 0, past_of(clip, 60), truth_for(clip)
    )
    assert beliefs is None and actions is not None
    assert whys == [
        "belief: 2 usable of 3; turned away: same_as_truth: 'C believes that the soup is ready.'"
    ]
    assert ctx.stats["counterfactual_beliefs_actions.belief.same_as_truth.dropped"] == 1


def test_usable_alternatives_pool_across_attempts(tmp_path: Path) -> None:
    """A bad alternative costs that alternative, not the question: the next attempt tops the
    pool up (first usable ones first, in order), and near-duplicates of the truth or of a kept
    one are turned away by the embedder before the similarity filter would drop the question."""
    clip = fixture_clip()
    first = GOOD["beliefs_actions"](None)
    first["alternatives"][1]["belief"] = "the soup is ready"  # the truth again
    first["alternatives"][2]["next_actions"] = ["stirs the pot", "stirs the pot", "stirs the pot"]
    second = {
        "alternatives": [
            {
                "belief": "the soup needs more salt",
                "next_actions": ["picks the salt", "adds salt to the pot", "stirs the pot"],
            },
            {
                "belief": "the soup is ready now",
                "next_actions": ["lifts the lid", "smells the soup", "puts the lid back"],
            },
            {
                "belief": "the bowls are dirty",
                "next_actions": ["takes the bowls", "rinses the bowls", "dries the bowls"],
            },
        ]
    }
    emb = FakeEmbedder(
        {
            "C believes that the soup is ready.": [1, 0, 0],
            "C believes that the soup is ready now.": [0.99, 0.141, 0],
        }
    )
    script = Script({"beliefs_actions": [first, second]})
    ctx = make_ctx(tmp_path, script, emb)
    beliefs, actions, whys = counterfactual_beliefs_actions(
        ctx, ctx.cfg, 0, past_of(clip, 60), truth_for(clip)
    )
    assert len(script.calls("beliefs_actions")) == 2 and whys == []
    assert beliefs == [
        "C believes that the soup needs more salt.",
        "C believes that the pot is about to boil over.",
        "C believes that the bowls are dirty.",
    ]
    assert actions == [
        "C picks the salt, adds salt to the pot, and stirs the pot.",
        "C lifts the lid, pokes a carrot, and puts the lid back.",
        "C lifts the lid, smells the soup, and puts the lid back.",
    ]
    stats = ctx.stats
    assert stats["counterfactual_beliefs_actions.belief.same_as_truth.dropped"] == 1
    assert (
        stats["counterfactual_beliefs_actions.belief.duplicate.dropped"] == 1
    )  # attempt 2's salt one
    assert stats["counterfactual_beliefs_actions.belief.near_duplicate.dropped"] == 1
    assert stats["counterfactual_beliefs_actions.actions.repeated_actions.dropped"] == 1


def test_text_gates_turn_away_the_tiny_models_failures(tmp_path: Path) -> None:
    """The issue's options never become choices: each is turned away by its gate (counted per
    stage and gate) and the next attempt tops the pool up."""
    clip = fixture_clip()
    bad_goals = {
        "wrong_goals": [
            "the laundry detergent was used to clean the pot",  # no verb after "To"
            "tie shoes, not with shoes but with shoes",
            "To bake a cake.",
        ]
    }
    ctx = make_ctx(tmp_path, Script({"goals": [bad_goals]}))
    goals = counterfactual_goals(ctx, ctx.cfg, 0, past_of(clip, 60), truth_for(clip))
    assert goals == ["To bake a cake.", "To set the table.", "To sweep the floor."]
    assert ctx.stats["counterfactual_goals.gate.surface_form.dropped"] == 1
    assert ctx.stats["counterfactual_goals.gate.repetition.dropped"] == 1
    bad = GOOD["beliefs_actions"](None)
    bad["alternatives"][0]["next_actions"] = [
        "to choose your own goals and tasks",
        "next_actions_31",
        "stirs the pot",
    ]
    bad["alternatives"][1]["next_actions"] = [
        "lifts the lid",
        "pokes a carrot",
        "picks up the mat in the air, p",
    ]
    bad["alternatives"][2]["belief"] = "the mat on the floor"
    ctx = make_ctx(tmp_path, Script({"beliefs_actions": [bad]}))
    beliefs, actions, whys = counterfactual_beliefs_actions(
        ctx, ctx.cfg, 0, past_of(clip, 60), truth_for(clip)
    )
    assert whys == [] and len(beliefs) == len(actions) == 3
    assert not any("next_actions" in a or ", p." in a or "choose" in a for a in actions)
    assert "C believes that the mat on the floor." not in beliefs
    stats = ctx.stats
    assert stats["counterfactual_beliefs_actions.actions.gate.surface_form.dropped"] == 1
    assert stats["counterfactual_beliefs_actions.actions.gate.truncated_text.dropped"] == 1
    assert stats["counterfactual_beliefs_actions.belief.gate.surface_form.dropped"] == 1


def test_analysis_regenerates_on_a_gate_then_rejects_with_its_name(tmp_path: Path) -> None:
    def capped(req):
        return {
            **GOOD["analysis"](req),
            "future_goal": "wash the dishes and dry them on the rack by the window"[:50] + "x" * 14,
        }

    assert len(capped("one of lines 41 to 78")["future_goal"]) == 64  # the schema's cap: cut there
    clip = fixture_clip()
    ctx = make_ctx(tmp_path, Script({"analysis": [capped]}))
    truth = analysis(ctx, ctx.cfg, 0, clip, candidates(clip, ctx.cfg))
    assert truth.goal == "To wash the dishes." and ctx.stats["analysis.gate.truncated_text"] == 1

    def echo(req):
        return {
            **GOOD["analysis"](req),
            "next_actions": ["next_actions_1", "turns off the stove", "stirs"],
        }

    result, _ = run_tom(tmp_path / "run", Script({"analysis": [echo] * 3}), n=1)
    (rej,) = read_jsonl(tmp_path / "run" / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == ("analysis", "schema_echo") and "next_actions_1" in rej[
        "detail"
    ]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["validators"]["analysis.gate.schema_echo"] == 3
    assert manifest["counts"]["rejects_by_reason"] == {"schema_echo": 1}


def test_simplify_stage(tmp_path: Path) -> None:
    sentences = [
        "C picks the salt, adds salt to the pot, and stirs the pot.",
        "C lifts the lid, pokes a carrot, and puts the lid back.",
        "C lowers the heat, moves the pot, and wipes the stove.",
    ]
    out = {
        "simplified": [
            "picks salt, adds it, and stirs",
            "C lifts the lid, pokes a carrot with a long fork "
            "slowly and carefully, and puts the lid back.",
            "...",
        ]
    }
    lost = {
        "simplified": [
            "C to the toilet.",
            "C lifts the lid and pokes a carrot.",
            "C lowers the heat, moves it, then wipes.",
        ]
    }
    script = Script({"simplify": [out]})
    ctx = make_ctx(tmp_path, script)
    new, changed = simplify(ctx, ctx.cfg, 0, sentences)
    assert new == [
        "C picks salt, adds it, and stirs.",
        sentences[1],
        sentences[2],
    ]  # longer / empty: kept
    assert changed == [True, False, False]
    assert (
        ctx.stats["simplify.longer.kept_original"] == 1
        and ctx.stats["simplify.empty_text.kept_original"] == 1
    )
    req = script.calls("simplify")[0].request
    assert all(f"{i + 1}. {s}" in req for i, s in enumerate(sentences))
    ctx = make_ctx(tmp_path, Script({"simplify": [lost]}))
    new, changed = simplify(ctx, ctx.cfg, 0, sentences)  # fewer than three actions: kept
    assert new == [sentences[0], sentences[1], "C lowers the heat, moves it, then wipes."]
    assert ctx.stats["simplify.lost_actions.kept_original"] == 1
    assert (
        ctx.stats["simplify.gate.surface_form.kept_original"] == 1
    )  # "C to the toilet.": no verb after C
    ctx = make_ctx(tmp_path, Script({"simplify": [("{", "length")] * 2}), attempts=2)
    with pytest.raises(AttemptFailure) as e:
        simplify(ctx, ctx.cfg, 0, sentences)
    assert (e.value.stage, e.value.reason) == ("simplify", "truncated")


# --------------------------------------------------------------------------- 6. filters in a run


def test_keyword_filter_in_a_run(tmp_path: Path) -> None:
    """Two wrong goals hit keywords: the goal question has only one left and is dropped; with
    one hit the two first survivors make the 3-choice question."""
    two = {
        "wrong_goals": [
            "To demonstrate soup for a class.",
            "To set the table.",
            "To train for a cook-off.",
        ]
    }
    one = {"wrong_goals": ["To bake a cake.", "To film a tutorial.", "To set the table."]}
    script = Script({"goals": [two, one]})
    run_tom(tmp_path, script, n=2)
    rejects = read_jsonl(tmp_path / "rejects.jsonl")
    kw = [r for r in rejects if r["stage"] == "filter.keyword"]
    assert (
        len(kw) == 1
        and kw[0]["reason"] == "too_few_wrong_goals"
        and "goal question" in kw[0]["detail"]
    )
    goals = [r for r in read_jsonl(tmp_path / "tom.jsonl") if r["question_type"] == "goal"]
    assert len(goals) == 1
    assert sorted(goals[0]["options"]) == [
        "To bake a cake.",
        "To set the table.",
        "To wash the dishes.",
    ]
    assert goals[0]["privileged"]["dropped_wrong_goals"] == ["To film a tutorial."]


def test_length_and_similarity_filters_in_a_run(tmp_path: Path) -> None:
    """The filters judge the final choices: too-long wrong goals (length), and simplified action
    statements that became near-duplicates of each other (similarity, after the pool)."""
    long_goals = {
        "wrong_goals": [
            "To prepare an elaborate three course dinner",
            "To renovate the entire kitchen",
            "To reorganise every cupboard in the house",
        ]
    }
    a, b = (
        "C picks the salt, adds it to the pot, and stirs the pot.",
        "C picks the salt, adds it to the pot, and stirs again.",
    )
    same = {"simplified": [a, b, "C lowers the heat, moves the pot, and wipes."]}
    emb = FakeEmbedder({a: [1, 0, 0], b: [0.99, 0.141, 0]})
    run_tom(tmp_path, Script({"goals": [long_goals], "simplify": [same]}), emb, n=1, simplify=True)
    rejects = {r["stage"]: r for r in read_jsonl(tmp_path / "rejects.jsonl")}
    assert rejects["filter.length"]["reason"] == "truth_shortest"
    assert rejects["filter.similarity"]["reason"] == "near_duplicate_options"
    assert "actions question" in rejects["filter.similarity"]["detail"]
    assert [r["question_type"] for r in read_jsonl(tmp_path / "tom.jsonl")] == ["belief"]


def test_time_window_filter_both_ways(tmp_path: Path) -> None:
    out = tmp_path / "a"
    script = Script()
    run_tom(out, script, n=1, time_window=[290, 299])
    (rej,) = read_jsonl(out / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == ("filter.time_window", "no_line_in_window")
    assert not script.log  # no LLM call spent on it
    out = tmp_path / "b"
    run_tom(out, Script(), n=1, time_window=[10, 20], restrict_to_window=False)  # the paper's order
    (rej,) = read_jsonl(out / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == ("filter.time_window", "transition_outside_window")
    m = json.loads((out / "manifest.json").read_text())
    assert [r["step"] for r in m["funnel"]["steps"]][2:4] == ["analysis", "time window"]
    assert [r["goal"] for r in m["funnel"]["steps"]][:4] == [1, 1, 1, 0]


# --------------------------------------------------------------------------- 7. end to end


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory) -> SimpleNamespace:
    out = tmp_path_factory.mktemp("tom_run")
    script = Script()
    result, ctx = run_tom(out, script)
    return SimpleNamespace(
        out=out,
        result=result,
        ctx=ctx,
        script=script,
        records=read_jsonl(out / "tom.jsonl"),
        rejects=read_jsonl(out / "rejects.jsonl"),
        manifest=json.loads((out / "manifest.json").read_text()),
        clips=read_input(ctx.cfg),
    )


def test_run_folder_reconciles(fixture_run, check_run_folder) -> None:
    m = check_run_folder(fixture_run.out, "tom", 9, hydra=False, one_per_index=False)
    assert m["counts"]["accepted"] == 12 and m["counts"]["rejected"] == 5
    assert m["counts"]["rejects_by_reason"] == {
        "few_c_lines": 1,
        "malformed_line": 1,
        "too_few_lines": 1,
        "too_short": 1,
        "uncertain": 1,
    }
    assert set(m["prompts"]) >= {
        "tom/analysis.jinja",
        "tom/goals.jinja",
        "tom/beliefs_actions.jinja",
        "tom/simplify.jinja",
        "tom/_oneshot.jinja",
    }
    for name in (
        "egotom_goal_shuffled.csv",
        "egotom_belief_shuffled.csv",
        "egotom_actions_shuffled.csv",
    ):
        assert name in m["outputs"]
    # every clip ends as questions or rejects: nothing silently lost
    indices = {r["index"] for r in fixture_run.rejects}
    by_clip = {r["clip_id"] for r in fixture_run.records}
    assert len(indices) + len(by_clip) == 9 and not indices & {
        i for i, c in enumerate(fixture_run.clips) if c.clip_id in by_clip
    }


def test_records_are_mcq_records(fixture_run) -> None:
    for rec in fixture_run.records:
        q = TomQuestion.model_validate(rec)
        assert (
            HEX32.match(q.item_id)
            and q.group == q.clip_id
            and q.question == EGOTOM_QUESTION[q.question_type]
        )
        assert len(q.options) == (3 if q.question_type == "goal" else 4)
        assert q.options[q.answer] == q.privileged["truth"][q.question_type]
        assert (
            q.origins is not None
            and q.origins[q.answer] == "truth"
            and q.origins.count("truth") == 1
        )
        assert len(set(q.options)) == len(q.options)
        assert q.privileged["source"].startswith(
            f"{NARRATION}: {q.vuid}.narration_pass_"
        )  # provenance
    assert len({r["item_id"] for r in fixture_run.records}) == len(fixture_run.records)
    first = fixture_run.records[0]
    assert first["options"][first["answer"]] == "To wash the dishes."
    assert all(
        o.startswith("C believes that ")
        for r in fixture_run.records
        if r["question_type"] == "belief"
        for o in r["options"]
    )
    assert all(
        re.match(r"^C .+, .+, and .+\.$", o)
        for r in fixture_run.records
        if r["question_type"] == "actions"
        for o in r["options"]
    )


def test_no_future_narration_is_visible(fixture_run) -> None:
    clips = {c.clip_id: c for c in fixture_run.clips}
    for rec in fixture_run.records:
        clip = clips[rec["clip_id"]]
        context = rec["visible"]["context"].split("\n")
        k = len(context)
        assert context == [
            fmt_line(ln) for ln in clip.lines[:k]
        ]  # exactly the past, in EgoToM's form
        assert rec["visible"]["query_time"] == fmt_time(clip.lines[k].t)
        assert rec["query_sec"] == clip.lines[k].t and rec["clip_end_time"] == pytest.approx(
            clip.start_sec + clip.lines[k].t
        )
        future = rec["privileged"]["future"].split("\n")
        assert (
            future == [fmt_line(ln) for ln in clip.lines[k:]]
            and rec["privileged"]["transition"] == future[0]
        )
        visible_text = json.dumps(rec["visible"])
        assert not any(f.strip() in visible_text for f in future)
        assert rec["privileged"]["summary"] not in visible_text
        assert set(rec["visible"]) == {"context", "query_time"}


def test_counterfactual_prompts_never_see_the_future(fixture_run) -> None:
    clips = [c for c in fixture_run.clips if not c.problems]
    by_goal = {}
    for call in fixture_run.script.log:
        if call.stage == "analysis":
            clip = next(
                c
                for c in clips
                if numbered(c)[0] in call.request and numbered(c)[-1] in call.request
            )
            by_goal = {"clip": clip}
            continue
        clip = by_goal["clip"]
        rec = next(r for r in fixture_run.records if r["clip_id"] == clip.clip_id)
        k = len(rec["visible"]["context"].split("\n"))
        text = "\n".join(m["content"] for m in call.messages)
        future = [ln.text for ln in clip.lines[k:]]
        past = numbered(clip)[:k]
        if call.stage in ("goals", "beliefs_actions"):
            assert all(p in call.request for p in past)  # the whole past...
        assert not any(line in text for line in numbered(clip)[k:])  # ...and no future line
        assert not any(fmt_line(ln).strip() in text for ln in clip.lines[k:])
        assert not [
            f for f in future if f in text and not any(f == ln.text for ln in clip.lines[:k])
        ]
    assert {c.stage for c in fixture_run.script.log} == {
        "analysis",
        "goals",
        "beliefs_actions",
        "simplify",
    }


def test_export_csvs_have_egotom_columns_and_load(fixture_run) -> None:
    out = fixture_run.out
    for q in TYPES:
        df = pl.read_csv(out / f"egotom_{q}_shuffled.csv", infer_schema_length=0)
        assert df.columns == egotom_columns(q)
        if EGOTOM.is_dir():  # the real files' header, exactly
            assert (EGOTOM / f"egotom_{q}_shuffled.csv").read_text().splitlines()[0] == ",".join(
                df.columns
            )
        recs = [r for r in fixture_run.records if r["question_type"] == q]
        assert df.height == len(recs) == 4
        for row, rec in zip(df.iter_rows(named=True), recs, strict=True):
            assert (
                row["cuid"] == rec["clip_id"]
                and row["narrations_in_context"] == rec["visible"]["context"]
            )
            assert row[f"gt_{q}"] == rec["options"][rec["answer"]]
            assert [row[c] for c in egotom_columns(q) if "_choice_" in c] == rec["options"]
            assert float(row["clip_end_time"]) == pytest.approx(rec["clip_end_time"])
    banks = load_banks(out)  # a run folder: tom.jsonl first
    assert len(banks) == 1 and banks[0].path.name == "tom.jsonl" and banks[0].format == "jsonl"
    assert len(banks[0].items) == 12
    item = banks[0].items[0]
    assert (
        item.context == fixture_run.records[0]["visible"]["context"]
        and item.group == fixture_run.records[0]["clip_id"]
    )
    assert "privileged.future" in item.privileged
    (csv_bank,) = load_banks(out / "egotom_belief_shuffled.csv")
    assert [i.answer for i in csv_bank.items] == [
        r["answer"] for r in fixture_run.records if r["question_type"] == "belief"
    ]


def test_funnel_in_manifest(fixture_run) -> None:
    f = fixture_run.manifest["funnel"]
    steps = [r["step"] for r in f["steps"]]
    assert steps == [
        "clips in",
        "selected",
        "time window",
        "analysis",
        "counterfactual",
        "simplify",
        "keyword filter",
        "length filter",
        "similarity filter",
    ]
    assert f["steps"][0] == {"step": "clips in", "goal": 9, "belief": 9, "actions": 9}
    assert f["steps"][1]["goal"] == 4 and f["steps"][-1] == {
        "step": "similarity filter",
        "goal": 4,
        "belief": 4,
        "actions": 4,
    }
    assert f["selection"]["excluded_by_reason"] == {
        "few_c_lines": 1,
        "too_few_lines": 1,
        "too_short": 1,
        "uncertain": 1,
    }
    assert f["clips_in_input"] == 9 and f["seconds_per_clip"] >= 0


def test_funnel_counts_each_stage_drop(tmp_path: Path) -> None:
    """Plant one failure per stage on successive clips of a 6-clip JSONL: the funnel falls by
    one at each step and each drop is a reject with its stage."""
    base = json.loads(TIMELINES.read_text().splitlines()[0])
    path = tmp_path / "six.jsonl"
    path.write_text(
        "".join(
            json.dumps({**base, "clip_id": f"c{i}", "summary": f"clip c{i}"}) + "\n"
            for i in range(6)
        )
    )
    bad_goals = {"wrong_goals": ["To demonstrate it.", "To compete.", "To bake."]}
    bad_alts = "not json"
    long_simpl = ('{"simplified": ["C', "length")
    plan = {
        "analysis": [
            {
                "transition_line": 1,
                "future_goal": "a b",
                "next_actions": ["a", "b", "c"],
                "belief": "d e",
            }
        ]
        * 2,
        "goals": [bad_goals] * 2,
        "beliefs_actions": [bad_alts] * 6,
        "simplify": [long_simpl] * 2,
    }
    order = {"analysis": "c0", "goals": "c1", "beliefs_actions": "c2", "simplify": "c3"}
    script = Script(
        plan,
        when=lambda stage, req: (
            f"clip {order[stage]}" in req
            or (stage != "analysis" and current["clip"] == order[stage])
        ),
    )
    current = {"clip": ""}
    orig = script.__call__

    def tracking(messages, seed):
        stage, req = stage_of(messages)
        m = re.search(r"Summary of the whole video: clip (c\d)", req)
        if m:
            current["clip"] = m.group(1)
        return orig(messages, seed)

    ctx = make_ctx(tmp_path, None, None, input=str(path), progress="plain", attempts=2)
    ctx.use(llm=scripted_llm(tracking))
    run("tom", ctx.cfg, tmp_path, ctx=ctx, quiet=True)
    rejects = read_jsonl(tmp_path / "rejects.jsonl")
    stages = sorted(
        (r["detail"].split(":")[0].split(",")[0], r["stage"], r["reason"]) for r in rejects
    )
    assert stages == [
        ("clip c0", "analysis", "transition_first_half"),
        ("clip c1", "filter.keyword", "too_few_wrong_goals"),
        ("clip c2", "counterfactual_beliefs_actions", "invalid_output"),
        ("clip c2", "counterfactual_beliefs_actions", "invalid_output"),
        ("clip c3", "simplify", "truncated"),
    ]
    rows = {
        r["step"]: (r["goal"], r["belief"], r["actions"])
        for r in json.loads((tmp_path / "manifest.json").read_text())["funnel"]["steps"]
    }
    assert rows["clips in"] == rows["selected"] == rows["time window"] == (6, 6, 6)
    assert rows["analysis"] == (5, 5, 5) and rows["counterfactual"] == (5, 4, 4)
    assert rows["simplify"] == (5, 4, 3) and rows["keyword filter"] == (4, 4, 3)
    assert rows["similarity filter"] == (4, 4, 3)
    assert len(read_jsonl(tmp_path / "tom.jsonl")) == 11


def test_funnel_is_printed(tmp_path: Path, capsys) -> None:
    ctx = make_ctx(tmp_path, progress="plain", n=2)
    run("tom", ctx.cfg, tmp_path, ctx=ctx, quiet=True)
    out = capsys.readouterr().out
    assert "[tom] funnel" in out and re.search(r"clips in\s+2\s+2\s+2", out)
    assert re.search(r"similarity filter\s+2\s+2\s+2", out)


def test_concurrent_clips_and_stages_give_the_sequential_bytes(tmp_path: Path) -> None:
    """Issue 9: clips in flight at once (and a clip's two counterfactual stages), answered out
    of order, give records, CSVs and funnel byte-identical to one call at a time."""
    outs = {}
    for k in (1, 4):
        script = Jittered(Script())
        result, _ = run_tom(tmp_path / str(k), script, llm=OpenAIConfig(concurrency=k))
        assert (script.max_in_flight > 1) == (k > 1)
        names = ["tom.jsonl", *(f"egotom_{q}_shuffled.csv" for q in TYPES)]
        outs[k] = (
            [(tmp_path / str(k) / f).read_bytes() for f in names],
            result.manifest["funnel"]["steps"],
        )
    assert outs[1][0][0].count(b"\n") == 12  # 4 selected clips x 3 questions
    assert outs[1] == outs[4]


def test_shards_merge_to_the_whole(tmp_path: Path) -> None:
    """``merge`` of two tom shards of the 9-clip fixture (5 excluded at selection): records,
    rejects and the EgoToM CSVs byte for byte, the funnel added up."""
    run_tom(tmp_path / "whole")
    for k in range(2):
        run_tom(tmp_path / f"s{k}", shard=k, num_shards=2)
    merged = merge_and_compare(
        tmp_path / "whole", [tmp_path / "s0", tmp_path / "s1"], tmp_path / "m"
    )
    assert merged["counts"]["indices_done"] == 9 and merged["funnel"]["steps"][-1]["goal"] == 4


def test_shuffles_are_seeded_and_deterministic(tmp_path: Path) -> None:
    base = json.loads(TIMELINES.read_text().splitlines()[0])
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({**base, "clip_id": f"c{i}"}) + "\n" for i in range(12)))
    outs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 7)):
        run_tom(tmp_path / name, input=str(path), seed=seed)
        outs[name] = (tmp_path / name / "tom.jsonl").read_bytes()
    assert outs["a"] == outs["b"]
    assert outs["a"] != outs["c"]
    recs = [json.loads(x) for x in outs["a"].decode().splitlines()]
    for q in TYPES:
        answers = [r["answer"] for r in recs if r["question_type"] == q]
        assert len(answers) == 12 and len(set(answers)) >= 2  # the truth does not sit in one place
    # the option sets are the same whatever the seed; only their order moves
    recs_c = [json.loads(x) for x in outs["c"].decode().splitlines()]
    assert [sorted(r["options"]) for r in recs] == [sorted(r["options"]) for r in recs_c]


def test_n_extends_and_shards_concatenate(tmp_path: Path) -> None:
    run_tom(tmp_path / "all", n=9)
    run_tom(tmp_path / "s0", shard=0, num_shards=2)
    run_tom(tmp_path / "s1", shard=1, num_shards=2)
    run_tom(tmp_path / "n4", n=4)
    full = (tmp_path / "all" / "tom.jsonl").read_text()
    assert (tmp_path / "s0" / "tom.jsonl").read_text() + (
        tmp_path / "s1" / "tom.jsonl"
    ).read_text() == full
    assert full.startswith((tmp_path / "n4" / "tom.jsonl").read_text())


def test_cli_reports_bad_input_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "narration.json"
    bad.write_text("{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "gen", "tom", f"input={bad}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "narration.json:1: not valid JSON" in proc.stderr and "Traceback" not in proc.stderr
