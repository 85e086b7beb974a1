"""The ``scenarios`` generator's parts, without a run: the skeleton and its distribution, and
every rule on planted violations (stage rules, record and bank rules, the one-shot examples, the
prompts each shift type renders). The generator run with a fake writer (regeneration, reject
accounting, the field order, contrast pairs, model checks, the lock and its verify path,
determinism, the benchmark's own validator on gen's output) is tested in test_scenarios_runs.py;
the test settings and the good scenario both use are in tests/scenario_runs.py."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from scenario_runs import GOOD_CAMERA, GOOD_SPEECH, SIT, SK, settings

from gen.contextbench.rules import (
    bank_problems,
    camera_refers_back,
    gold_in_speech,
    load_vocabulary,
    name_match,
    not_deictic,
    object_names_in_camera,
    rule_problems,
    shift_announced,
    text_problem,
)
from gen.errors import ConfigError
from gen.generators.scenarios.skeleton import (
    RELEASED_JOINT,
    Skeleton,
    build_units,
    largest_remainder,
)
from gen.generators.scenarios.stages import (
    Unit,
    assemble,
    check_camera,
    check_situations,
    check_speech,
    example_for,
    example_prompt,
    example_skeleton,
    examples,
    situations_of,
    spec,
)
from gen.schemas.scenarios import CHANGE_TYPES
from gen.templates import Prompts

# --------------------------------------------------------------------------- skeleton


def test_largest_remainder() -> None:
    assert largest_remainder(8, [12, 8, 6, 6, 5, 5, 4, 4]) == [2, 1, 1, 1, 1, 1, 1, 0]
    assert largest_remainder(50, [1, 1, 1]) == [17, 17, 16]
    assert largest_remainder(0, [1, 2]) == [0, 0]
    for total in (1, 7, 49, 50, 333):
        assert sum(largest_remainder(total, [9, 1, 2, 6, 2])) == total


def skeletons(**kw: Any) -> list[Skeleton]:
    return [sk for u in build_units(settings(**kw)) for sk in u]


def test_default_bank_has_the_released_marginals_and_our_joint_split() -> None:
    sks = skeletons()
    assert len(sks) == 50
    assert Counter(s.change_type for s in sks) == {"object_in_hand": 12, "object_state": 8, "sequential_task": 6,
                                                   "location": 6, "object_in_view": 5, "absent_referent": 5,
                                                   "screen_content": 4, "cross_session_reference": 4}
    assert Counter(s.target_context for s in sks) == {"current": 33, "prior": 12, "clarify": 3, "abstain": 2}
    joint = Counter((s.change_type, s.target_context) for s in sks)
    assert joint == {(ct, t): c for ct, row in RELEASED_JOINT.items() for t, c in row.items()}
    assert Counter(s.difficulty_tier for s in sks) == {"easy": 15, "medium": 20, "hard": 15}
    sigs = Counter((s.change_type, s.target_context, s.difficulty_tier, s.activity_domain) for s in sks)
    assert max(sigs.values()) <= 2
    assert [s.scenario_id for s in sks] == [f"sc-{i:02d}" for i in range(1, 51)]
    # ids run through the shift types in the released order
    assert [s.change_type for s in sks] == sorted((s.change_type for s in sks), key=CHANGE_TYPES.index)


def test_other_sizes_scale_by_largest_remainder() -> None:
    eight = skeletons(n=8)
    assert Counter(s.change_type for s in eight) == dict.fromkeys(CHANGE_TYPES, 1)  # one per shift type
    for n in (1, 13, 120):
        sks = skeletons(n=n)
        assert len(sks) == n
        assert {s.scenario_id for s in sks} == {f"sc-{i:02d}" for i in range(1, n + 1)}


def test_distribution_sets_counts_and_is_checked() -> None:
    sks = skeletons(distribution={"location": {"current": 2, "prior": 1}, "absent_referent": {"abstain": 1}})
    assert Counter((s.change_type, s.target_context) for s in sks) == {
        ("location", "current"): 2, ("location", "prior"): 1, ("absent_referent", "abstain"): 1}
    assert settings(distribution={"location": {"current": 2}}).size == 2
    bad = [({"cross_session_reference": {"current": 1}}, "cannot target current"),
           ({"screen_content": {"abstain": 1}}, "cannot target abstain"),
           ({"location": {"clarify": 1}}, "cannot target clarify"),
           ({"teleport": {"current": 1}}, "unknown shift type"),
           ({"location": {"later": 1}}, "unknown target"),
           ({"location": {"current": -1}}, "count >= 0"),
           ({"location": {"current": 0}}, "every count is 0")]
    for dist, message in bad:
        with pytest.raises(ValueError, match=message):
            settings(distribution=dist)
    with pytest.raises(ValueError, match="n=3 but distribution= sums to 2"):
        settings(n=3, distribution={"location": {"current": 2}})


def test_compatibility_rules_hold_in_every_default_scenario() -> None:
    for sk in skeletons(n=200, signature_limit=None):
        if sk.change_type == "cross_session_reference":
            assert sk.target_context == "prior"
        if sk.target_context == "abstain":
            assert sk.change_type == "absent_referent"
        if sk.target_context == "clarify":
            assert sk.change_type in ("object_in_hand", "object_in_view")
            assert sk.referent_complexity == "multi_referent" and sk.difficulty_tier == "hard"
        assert sk.deictic == (sk.target_context == "current" and sk.change_type not in
                              ("absent_referent", "cross_session_reference"))


def test_signature_limit_that_cannot_hold_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="object_in_hand/clarify needs more scenarios at difficulty hard"):
        build_units(settings(distribution={"object_in_hand": {"clarify": 17}}))
    assert len(skeletons(distribution={"object_in_hand": {"clarify": 16}})) == 16
    assert len(skeletons(distribution={"object_in_hand": {"clarify": 17}}, signature_limit=None)) == 17


def test_skeleton_is_seeded() -> None:
    assert skeletons(seed=3) == skeletons(seed=3)
    assert [s.activity_domain for s in skeletons(seed=3)] != [s.activity_domain for s in skeletons(seed=4)]


def test_contrast_units_are_pairs() -> None:
    units = build_units(settings(subset="contrast"))
    assert len(units) == 10
    for a, b in units:
        assert (a.target_context, b.target_context) == ("current", "prior")
        assert a.pair_id == b.pair_id and a.change_type == b.change_type and a.activity_domain == b.activity_domain
        assert a.scenario_id.startswith("adv-") and b.referent_complexity == "distractor_present"
        assert a.change_type not in ("absent_referent", "cross_session_reference")
    assert len({a.pair_id for a, _ in units}) == 10
    shifted = build_units(settings(subset="contrast", n=4, id_start=2))
    assert [(a.scenario_id, b.scenario_id, a.pair_id) for a, b in shifted] == [
        ("adv-02", "adv-03", "pair-01"), ("adv-04", "adv-05", "pair-02")]
    with pytest.raises(ValueError, match="n must be even"):
        settings(subset="contrast", n=3)
    with pytest.raises(ValueError, match="one current and one prior"):
        settings(subset="contrast", distribution={"location": {"current": 2, "prior": 1}})
    with pytest.raises(ValueError, match="need a visible earlier referent"):
        settings(subset="contrast", distribution={"absent_referent": {"current": 1, "prior": 1}})


def test_config_refuses_shards_and_a_verify_without_input() -> None:
    with pytest.raises(ValueError, match="one process"):
        settings(num_shards=2)
    with pytest.raises(ValueError, match="verify needs input="):
        settings(action="verify")


# --------------------------------------------------------------------------- rules, one by one


def test_word_boundaries_as_the_benchmark_matches() -> None:
    speech = {"turn_2_user": "Is the panel ready for this pan?"}
    assert gold_in_speech(speech, ["pan"]) == [("gold_in_speech", "gold item 'pan' appears in turn_2_user")]
    assert gold_in_speech({"turn_2_user": "Is the panel ready?"}, ["pan"]) == []
    assert name_match("pan", "two pans") and not name_match("pan", "glass panes")
    assert name_match("brush", "wire brushes") and not name_match("brush", "brushed steel")


def test_object_names_in_camera_vocabulary_and_own_names() -> None:
    vocab = load_vocabulary()
    assert {"hammer", "screwdriver", "knife", "laptop", "level"} <= set(vocab)
    assert object_names_in_camera({"turn_1_image": "A heavy hammer on a bench."}, []) == [
        ("object_name_in_camera", "object name 'hammer' in turn_1_image")]
    assert object_names_in_camera({"turn_1_image": "A wooden spoon in a sauce."}, ["wooden spoon"]) == [
        ("object_name_in_camera", "object name 'wooden spoon' in turn_1_image")]  # covers 'spoon'
    assert object_names_in_camera({"turn_2_image": "A pale blob of dough."}, ["risen dough"]) == []
    assert object_names_in_camera({"turn_2_image": "A zibber on a bench."}, ["zibber"]) != []


def test_camera_wording_rules() -> None:
    assert camera_refers_back({"turn_2_image": "Now holding a different tool than before."}) != []
    assert camera_refers_back({"turn_2_image": "The tray is no longer on the bench."}) != []
    assert camera_refers_back({"turn_2_image": "Same board on the same trestles, now glossy."}) == []
    assert check_camera(SK, SIT, {"turn_1_image": GOOD_CAMERA["turn_1_image"],
                                  "turn_2_image": GOOD_CAMERA["turn_2_image"] + " Gripped correctly."})[1] == [
        ("camera_evaluates_technique", "turn_2_image: 'correctly'")]


def test_speech_rules() -> None:
    assert shift_announced("I switched to this one, is it okay?") != []
    assert shift_announced("Now I'm using this, how is it?") != []
    assert shift_announced("Is the one from before still good?") == []
    assert not_deictic({"turn_2_user": "Can I add the noodles yet?"}) != []
    assert not_deictic({"turn_2_user": "Is it ready?"}) == []


def test_text_problems() -> None:
    assert text_problem("   ") == "empty_text"
    assert text_problem("turn_1_image") == "empty_text"
    assert text_problem("a grey shape on a bench a grey shape on a bench") == "repetitive_text"
    assert text_problem("A grey shape on a wooden bench.") is None


def test_a_good_scenario_passes_every_stage_rule() -> None:
    assert check_situations(SK, SIT)[1] == []
    assert check_camera(SK, SIT, GOOD_CAMERA)[1] == []
    assert check_speech(SK, SIT, GOOD_SPEECH)[1] == []
    rec = assemble(Unit(0, [SK], sit=SIT, camera=GOOD_CAMERA, speech=GOOD_SPEECH), SK)
    assert rule_problems(rec, categories=situations_of(SK, SIT)["categories"]) == []


@pytest.mark.parametrize(("stage", "change", "rule"), [
    ("situations", {"now": {**SIT["now"], "technique": ["swing from the elbow", "x y z"]}}, "gold_lists_overlap"),
    ("situations", {"now": {**SIT["now"], "state": ["   ", "   "]}}, "three_categories"),
    ("situations", {"now": {**SIT["now"], "name": "string"}}, "empty_text"),
    ("situations", {"earlier": examples()[0]["situations"]["earlier"]}, "example_echo"),
    ("camera", {"turn_1_image": GOOD_CAMERA["turn_1_image"] + " A claw hammer."}, "object_name_in_camera"),
    ("camera", {"turn_2_image": GOOD_CAMERA["turn_2_image"] + " A drill rests nearby."}, "object_name_in_camera"),
    ("camera", {"turn_2_image": GOOD_CAMERA["turn_2_image"] + " It is a different tool than before."},
     "camera_refers_to_turn_1"),
    ("camera", {"turn_2_image": GOOD_CAMERA["turn_1_image"]}, "no_visible_shift"),
    ("camera", {"turn_1_image": examples()[0]["camera"]["turn_1_image"]}, "example_echo"),
    ("speech", {"turn_2_user": "Is this hand plane set right?"}, "gold_in_speech"),
    ("speech", {"turn_1_user": "Do I choke up on the grip here?"}, "gold_in_speech"),
    ("speech", {"turn_3_repair_prompt_deictic": "I mean the hand plane, right now."}, "gold_in_speech"),
    ("speech", {"turn_2_user": "I switched to this, is it right?"}, "shift_announced"),
    ("speech", {"turn_2_user": "Am I pushing right?"}, "speech_not_deictic"),
    ("speech", {"turn_3_repair_prompt": "I mean the one I'm holding now."}, "repair_not_named"),
    ("speech", {"turn_3_repair_prompt": "I mean the hand plane I'm holding now."}, "repair_not_named"),
    ("speech", {"turn_1_user": "what what what what what what what what"}, "text_gates"),  # the shared gate fires first
])
def test_every_stage_rule_catches_its_planted_violation(stage: str, change: dict[str, Any], rule: str) -> None:
    if stage == "situations":
        _, problems = check_situations(SK, {**SIT, **change})
    elif stage == "camera":
        _, problems = check_camera(SK, SIT, {**GOOD_CAMERA, **change})
    else:
        _, problems = check_speech(SK, SIT, {**GOOD_SPEECH, **change})
    assert rule in {r for r, _ in problems}, problems


def good_record(**change: Any) -> dict[str, Any]:
    rec = assemble(Unit(0, [SK], sit=SIT, camera=GOOD_CAMERA, speech=GOOD_SPEECH), SK)
    return {**rec, **change}


@pytest.mark.parametrize(("change", "rule"), [
    ({"change_type": "teleport"}, "schema"),
    ({"scenario_id": "sc-1"}, "schema"),
    ({"subset": "contrast"}, "schema"),  # sc- id in the contrast subset
    ({"gold": {"current_answers": ["a", "b"], "prior_answers": [], "clarify_indicators": [], "abstain_indicators": []}},
     "schema"),
    ({"turn_3_repair_prompt_deictic": None}, "field_presence"),
    ({"context_image": "A grey room seen from the door."}, "field_presence"),
    ({"change_type": "cross_session_reference", "target_context": "prior", "turn_3_repair_prompt_deictic": None},
     "field_presence"),
    ({"target_context": "prior"}, "field_presence"),  # a deictic repair on a prior target
    ({"pair_id": "pair-01"}, "field_presence"),
    ({"target_context": "clarify", "turn_3_repair_prompt_deictic": None}, "indicators_missing"),
])
def test_record_rules(change: dict[str, Any], rule: str) -> None:
    assert rule in {r for r, _ in rule_problems(good_record(**change))}


def test_bank_rules() -> None:
    a = good_record()
    b = good_record(scenario_id="sc-02", turn_2_user="What now with this?",
                    turn_2_image="  " + a["turn_2_image"].upper() + " ")
    assert [r for _, r, _ in bank_problems([a, b])] == ["duplicate_turn_2"]
    c = good_record(scenario_id="sc-01", turn_2_user="What next with this?", turn_2_image="A flat grey stone.")
    assert "duplicate_id" in {r for _, r, _ in bank_problems([a, c])}
    many = [good_record(scenario_id=f"sc-{i:02d}", turn_2_user=f"Is this right {i}?", turn_2_image=f"A box {i}.")
            for i in range(3)]
    assert [r for _, r, _ in bank_problems(many)] == ["signature_limit"]
    assert bank_problems(many, signature_limit=3) == []


def test_our_own_examples_pass_our_rules() -> None:
    """Every one-shot example is a scenario the generator would accept (a prompt that shows a
    broken example teaches the break)."""
    assert len(examples()) == 11
    for ex in examples():
        sk = example_skeleton(ex)
        members = [sk] if sk.subset == "bank" else [sk, replace(sk, scenario_id="adv-01", target_context="prior")]
        u = Unit(0, members, sit=ex["situations"], camera=ex["camera"], speech=ex["speech"], follow=ex.get("follow_up"))
        for m in members:
            rec = assemble(u, m)
            assert rule_problems(rec, categories=situations_of(m, ex["situations"])["categories"]) == [], ex["change_type"]
        assert check_situations(sk, ex["situations"])[1] == [("example_echo", p) for p in
                                                              [f"{r} situation {ex['situations'][r]['name']!r} is the example's"
                                                               for r in ("earlier", "now") if r in ex["situations"]]]


def test_every_shift_type_and_target_renders_every_stage() -> None:
    prompts = Prompts()
    for sk in [*skeletons(), *[s for u in build_units(settings(subset="contrast")) for s in u]]:
        sit = examples()[0]["situations"] if sk.target_context not in ("clarify", "abstain") else example_for(sk)["situations"]
        if sk.change_type == "cross_session_reference":
            sit = {**sit, "meanwhile": "a hall"}
        stages = ["situations", "camera", "speech"] + (["follow_up"] if sk.target_context == "prior" and sk.subset == "contrast" else [])
        for stage in stages:
            s = spec(sk, sit if stage != "situations" else None, turn_1_user="Is this all right?")
            messages = prompts.render(f"scenarios/{stage}.jinja", example=example_prompt(stage, example_for(sk)), s=s)
            assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
            json.loads(messages[2]["content"])
            assert messages[1]["content"][:30] == messages[3]["content"][:30]
    assert {"scenarios/_requests.jinja", "scenarios/_system.jinja"} <= set(prompts.used)


def test_the_speech_prompt_names_what_the_user_must_not_say() -> None:
    sk = SK
    messages = Prompts().render("scenarios/speech.jinja", example=example_prompt("speech", example_for(sk)),
                                s=spec(sk, SIT))
    request = messages[-1]["content"]
    assert "claw hammer; swing from the elbow" in request and "hand plane" in request
    assert "turn_3_repair_prompt_deictic:" in request
    prior = replace(sk, target_context="prior")
    assert "turn_3_repair_prompt_deictic:" not in Prompts().render(
        "scenarios/speech.jinja", example=example_prompt("speech", example_for(prior)), s=spec(prior, SIT))[-1]["content"]
