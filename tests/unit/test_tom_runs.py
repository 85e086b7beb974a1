"""The ``tom`` generator's LLM stages with the scripted fake LLM: each stage's prompt and parsing
(analysis, counterfactual goals, beliefs and actions, simplify), transition validation, the text
gates, regeneration with a fresh seed and rejects. Input parsing, clip selection, surface forms and
the filter rules are tested in test_tom.py; every filter in a run and the generator end to end in
test_tom_e2e.py; the scripted LLM, tom's fake embedder and the run helpers are in
tests/tom_runs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import read_jsonl
from tom_runs import (
    GOOD,
    FakeEmbedder,
    Script,
    allowed_range,
    cfg_for,
    make_ctx,
    run_tom,
)

from gen.formats.timelines import Clip
from gen.generators.tom import candidates, read_input
from gen.generators.tom.stages import (
    analysis,
    check_transition,
    counterfactual_beliefs_actions,
    counterfactual_goals,
    numbered,
    simplify,
)
from gen.llm.attempts import AttemptFailure

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
