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
    camera_functional,
    camera_refers_back,
    gold_in_speech,
    load_vocabulary,
    name_match,
    not_deictic,
    object_names_in_camera,
    object_names_in_speech,
    rule_problems,
    shift_announced,
    speech_properties,
    text_problem,
)
from gen.errors import ConfigError
from gen.generators.scenarios.bank import assemble
from gen.generators.scenarios.examples import (
    example_for,
    example_prompt,
    example_skeleton,
    examples,
    situations_of,
    spec,
)
from gen.generators.scenarios.skeleton import (
    Skeleton,
    build_units,
    largest_remainder,
)
from gen.generators.scenarios.stages import (
    Unit,
    camera_fields,
    check_camera,
    check_situations,
    check_speech,
    situations_schema,
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


# The public release's joint split of shift type x target, from its rows (written out here, not
# read from the code, so the test pins the numbers).
RELEASED_BANK = {
    ("object_in_hand", "current"): 9,
    ("object_in_hand", "prior"): 2,
    ("object_in_hand", "clarify"): 1,
    ("object_state", "current"): 6,
    ("object_state", "prior"): 2,
    ("sequential_task", "current"): 5,
    ("sequential_task", "prior"): 1,
    ("location", "current"): 4,
    ("location", "prior"): 1,
    ("location", "clarify"): 1,
    ("object_in_view", "current"): 4,
    ("object_in_view", "prior"): 1,
    ("absent_referent", "current"): 1,
    ("absent_referent", "prior"): 1,
    ("absent_referent", "clarify"): 1,
    ("absent_referent", "abstain"): 2,
    ("screen_content", "current"): 3,
    ("screen_content", "prior"): 1,
    ("cross_session_reference", "current"): 1,
    ("cross_session_reference", "prior"): 3,
}
RELEASED_CONTRAST = {
    ("object_in_hand", "current"): 4,
    ("object_in_hand", "prior"): 1,
    ("object_in_hand", "clarify"): 1,
    ("object_in_view", "current"): 3,
    ("object_in_view", "clarify"): 1,
    ("object_state", "current"): 2,
    ("object_state", "prior"): 1,
    ("sequential_task", "current"): 2,
    ("sequential_task", "prior"): 1,
    ("location", "current"): 1,
    ("location", "prior"): 1,
    ("screen_content", "current"): 1,
    ("absent_referent", "abstain"): 1,
}


def test_default_bank_is_the_released_joint_split() -> None:
    sks = skeletons()
    assert len(sks) == 50
    assert Counter((s.change_type, s.target_context) for s in sks) == RELEASED_BANK
    assert Counter(s.change_type for s in sks) == {
        "object_in_hand": 12,
        "object_state": 8,
        "sequential_task": 6,
        "location": 6,
        "object_in_view": 5,
        "absent_referent": 5,
        "screen_content": 4,
        "cross_session_reference": 4,
    }
    assert Counter(s.target_context for s in sks) == {
        "current": 33,
        "prior": 12,
        "clarify": 3,
        "abstain": 2,
    }
    assert Counter(s.difficulty_tier for s in sks) == {"easy": 15, "medium": 20, "hard": 15}
    sigs = Counter(
        (s.change_type, s.target_context, s.difficulty_tier, s.activity_domain) for s in sks
    )
    assert max(sigs.values()) <= 2
    assert [s.scenario_id for s in sks] == [f"sc-{i:02d}" for i in range(1, 51)]
    assert all(s.pair_id is None for s in sks)
    # ids run through the shift types in the released order
    assert [s.change_type for s in sks] == sorted(
        (s.change_type for s in sks), key=CHANGE_TYPES.index
    )


def test_default_contrast_is_the_released_joint_split() -> None:
    units = build_units(settings(subset="contrast"))
    sks = [sk for u in units for sk in u]
    assert len(sks) == 20
    assert Counter((s.change_type, s.target_context) for s in sks) == RELEASED_CONTRAST
    assert [s.scenario_id for s in sks] == [f"adv-{i:02d}" for i in range(1, 21)]
    # each prior scenario is paired with a current one of its shift type; the rest stand alone
    pairs = [u for u in units if len(u) == 2]
    assert sorted(a.change_type for a, _ in pairs) == [
        "location",
        "object_in_hand",
        "object_state",
        "sequential_task",
    ]
    assert [p[0].pair_id for p in pairs] == ["pair-01", "pair-02", "pair-03", "pair-04"]
    assert all(s.pair_id is None for u in units if len(u) == 1 for s in u)
    for s in sks:
        visible = s.change_type not in ("absent_referent", "cross_session_reference")
        assert s.distractor == visible
        assert s.referent_complexity == ("distractor_present" if visible else "absent_referent")
    sigs = Counter(
        (s.change_type, s.target_context, s.difficulty_tier, s.activity_domain) for s in sks
    )
    assert max(sigs.values()) <= 2


def test_other_sizes_scale_by_largest_remainder() -> None:
    eight = skeletons(n=8)  # shift types by their totals, then targets within each
    assert Counter(s.change_type for s in eight) == dict(
        zip(CHANGE_TYPES, [2, 1, 1, 1, 1, 1, 1], strict=False)
    )
    assert Counter(s.target_context for s in eight) == {"current": 7, "abstain": 1}
    for n in (1, 13, 120):
        sks = skeletons(n=n)
        assert len(sks) == n
        assert {s.scenario_id for s in sks} == {f"sc-{i:02d}" for i in range(1, n + 1)}
    assert (
        len(skeletons(subset="contrast", n=7)) == 7
    )  # odd sizes are fine: not every unit is a pair


def test_distribution_takes_every_cell_and_is_checked() -> None:
    sks = skeletons(
        distribution={"location": {"current": 2, "prior": 1}, "absent_referent": {"abstain": 1}}
    )
    assert Counter((s.change_type, s.target_context) for s in sks) == {
        ("location", "current"): 2,
        ("location", "prior"): 1,
        ("absent_referent", "abstain"): 1,
    }
    assert settings(distribution={"location": {"current": 2}}).size == 2
    # the authoring rules forbid no cell: every shift type takes every target
    every = {ct: {t: 1 for t in ("current", "prior", "clarify", "abstain")} for ct in CHANGE_TYPES}
    for subset in ("bank", "contrast"):
        got = Counter(
            (s.change_type, s.target_context) for s in skeletons(distribution=every, subset=subset)
        )
        assert got == {
            (ct, t): 1 for ct in CHANGE_TYPES for t in ("current", "prior", "clarify", "abstain")
        }
    bad = [
        ({"teleport": {"current": 1}}, "unknown shift type"),
        ({"location": {"later": 1}}, "unknown target"),
        ({"location": {"current": -1}}, "count >= 0"),
        ({"location": {"current": 0}}, "every count is 0"),
    ]
    for dist, message in bad:
        with pytest.raises(ValueError, match=message):
            settings(distribution=dist)
    with pytest.raises(ValueError, match="n=3 but distribution= sums to 2"):
        settings(n=3, distribution={"location": {"current": 2}})


def test_skeleton_rules_hold_in_every_scenario() -> None:
    every = {ct: {t: 3 for t in ("current", "prior", "clarify", "abstain")} for ct in CHANGE_TYPES}
    for sk in skeletons(distribution=every, signature_limit=None):
        if sk.target_context in ("clarify", "abstain"):
            assert sk.difficulty_tier == "hard"
        if sk.target_context == "clarify" and sk.change_type not in (
            "absent_referent",
            "cross_session_reference",
        ):
            assert sk.referent_complexity == "multi_referent"
        assert sk.deictic == (
            sk.target_context == "current"
            and sk.change_type not in ("absent_referent", "cross_session_reference")
        )


def test_signature_limit_that_cannot_hold_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match="object_in_hand/clarify needs more scenarios at difficulty hard"
    ):
        build_units(settings(distribution={"object_in_hand": {"clarify": 17}}))
    assert len(skeletons(distribution={"object_in_hand": {"clarify": 16}})) == 16
    assert (
        len(skeletons(distribution={"object_in_hand": {"clarify": 17}}, signature_limit=None)) == 17
    )


def test_skeleton_is_seeded() -> None:
    assert skeletons(seed=3) == skeletons(seed=3)
    assert [s.activity_domain for s in skeletons(seed=3)] != [
        s.activity_domain for s in skeletons(seed=4)
    ]


def test_contrast_pairs() -> None:
    units = build_units(
        settings(
            subset="contrast",
            distribution={"location": {"current": 2, "prior": 2}, "object_in_view": {"current": 1}},
        )
    )
    assert [len(u) for u in units] == [2, 2, 1]
    for a, b in units[:2]:
        assert (a.target_context, b.target_context) == ("current", "prior")
        assert (
            a.pair_id == b.pair_id
            and a.change_type == b.change_type
            and a.activity_domain == b.activity_domain
        )
        assert a.scenario_id.startswith("adv-") and b.referent_complexity == "distractor_present"
    shifted = build_units(
        settings(
            subset="contrast",
            n=4,
            id_start=2,
            distribution={"location": {"current": 2, "prior": 2}},
        ),
        existing=[{"scenario_id": "adv-01", "pair_id": "pair-07"}],
    )
    assert [(a.scenario_id, b.scenario_id, a.pair_id) for a, b in shifted] == [
        ("adv-02", "adv-03", "pair-08"),
        ("adv-04", "adv-05", "pair-09"),
    ]
    # an absent or pre-conversation referent is not in view at turn 2: no pair
    alone = build_units(
        settings(subset="contrast", distribution={"absent_referent": {"current": 1, "prior": 1}})
    )
    assert [len(u) for u in alone] == [1, 1] and alone[0][0].pair_id is None


def test_config_refuses_shards_and_a_verify_without_input() -> None:
    with pytest.raises(ValueError, match="one process"):
        settings(num_shards=2)
    with pytest.raises(ValueError, match="verify needs input="):
        settings(action="verify")


# --------------------------------------------------------------------------- rules, one by one


def test_word_boundaries_as_the_benchmark_matches() -> None:
    speech = {"turn_2_user": "Is the panel ready for this pan?"}
    assert gold_in_speech(speech, ["pan"]) == [
        ("gold_in_speech", "gold item 'pan' appears in turn_2_user")
    ]
    assert gold_in_speech({"turn_2_user": "Is the panel ready?"}, ["pan"]) == []
    assert name_match("pan", "two pans") and not name_match("pan", "glass panes")
    assert name_match("brush", "wire brushes") and not name_match("brush", "brushed steel")


def test_object_names_in_camera_vocabulary_and_own_names() -> None:
    vocab = load_vocabulary()
    assert {"hammer", "screwdriver", "knife", "laptop", "level"} <= set(vocab)
    assert object_names_in_camera({"turn_1_image": "A heavy hammer on a bench."}, []) == [
        ("object_name_in_camera", "object name 'hammer' in turn_1_image")
    ]
    assert object_names_in_camera(
        {"turn_1_image": "A wooden spoon in a sauce."}, ["wooden spoon"]
    ) == [("object_name_in_camera", "object name 'wooden spoon' in turn_1_image")]  # covers 'spoon'
    assert object_names_in_camera({"turn_2_image": "A pale blob of dough."}, ["risen dough"]) == []
    assert object_names_in_camera({"turn_2_image": "A zibber on a bench."}, ["zibber"]) != []


def test_camera_wording_rules() -> None:
    assert camera_refers_back({"turn_2_image": "Now holding a different tool than before."}) != []
    assert camera_refers_back({"turn_2_image": "The tray is no longer on the bench."}) != []
    assert (
        camera_refers_back({"turn_2_image": "Same board on the same trestles, now glossy."}) == []
    )
    assert check_camera(
        SK,
        SIT,
        {
            "turn_1_image": GOOD_CAMERA["turn_1_image"],
            "turn_2_image": GOOD_CAMERA["turn_2_image"] + " Gripped correctly.",
        },
    )[1] == [("camera_evaluates_technique", "turn_2_image: 'correctly'")]


def test_speech_rules() -> None:
    assert shift_announced("I switched to this one, is it okay?") != []
    assert shift_announced("Now I'm using this, how is it?") != []
    assert shift_announced("Is the one from before still good?") == []
    assert not_deictic({"turn_2_user": "Can I add the noodles yet?"}) != []
    assert not_deictic({"turn_2_user": "Is it ready?"}) == []


@pytest.mark.parametrize(
    ("fields", "rule"),
    [
        (
            {
                "turn_2_image": GOOD_CAMERA["turn_2_image"]
                + " The cutting tool rests beside the board."
            },
            "camera_functional_label",
        ),
        (
            {"turn_1_image": GOOD_CAMERA["turn_1_image"] + " A fastening device lies by the edge."},
            "camera_functional_label",
        ),
        (
            {"turn_1_image": GOOD_CAMERA["turn_1_image"] + " A kitchen utensil hangs above."},
            "camera_functional_label",
        ),
        (
            {"turn_2_image": GOOD_CAMERA["turn_2_image"] + " A slim tool used for smoothing."},
            "camera_functional_label",
        ),
        ({"turn_2_user": "Is the red one ready?"}, "speech_describes_properties"),
        ({"turn_1_user": "How hard do I swing this wooden thing?"}, "speech_describes_properties"),
        ({"turn_2_user": "Is this big enough to push?"}, "speech_describes_properties"),
        ({"turn_2_user": "Am I pushing this round part right?"}, "speech_describes_properties"),
        ({"turn_1_user": "How hard should I swing the screwdriver here?"}, "object_name_in_speech"),
        ({"turn_1_user": "Should I put the saw down for this?"}, "object_name_in_speech"),
        (
            {"turn_3_repair_prompt_deictic": "I mean this chisel right now."},
            "object_name_in_speech",
        ),
    ],
)
def test_the_authoring_rules_on_look_and_names_refuse_planted_violations(
    fields: dict[str, str], rule: str
) -> None:
    """User turns must not describe how things look or name objects (the vocabulary, not only the
    gold words); camera text must not use functional labels. Each planted break is refused by
    exactly its rule, at its stage and on the record."""
    camera = {**GOOD_CAMERA, **{k: v for k, v in fields.items() if k.endswith("image")}}
    speech = {**GOOD_SPEECH, **{k: v for k, v in fields.items() if not k.endswith("image")}}
    stage = check_camera(SK, SIT, camera)[1] + check_speech(SK, SIT, speech)[1]
    assert {r for r, _ in stage} == {rule}, stage
    rec = assemble(Unit(0, [SK], sit=SIT, camera=camera, speech=speech), SK)
    assert {r for r, _ in rule_problems(rec, categories=situations_of(SK, SIT)["categories"])} == {
        rule
    }


def test_look_and_name_rules_leave_everyday_words_alone() -> None:
    fine = [
        "How long should this take?",
        "Is this level?",
        "What was that thing I saw before?",
        "Is this layer thick enough?",
        "Is this smooth enough to paint over?",
        "Should I phone them about it?",
        "What size was the one sitting here a second ago?",
        "Am I doing this right?",
    ]
    for t in fine:
        assert (
            object_names_in_speech({"turn_2_user": t}, []) == []
            and speech_properties({"turn_2_user": t}) == []
        ), t
    assert object_names_in_speech({"turn_2_user": "Is my phone charged?"}, []) == [
        ("object_name_in_speech", "object name 'phone' in turn_2_user")
    ]
    assert (
        object_names_in_speech({"turn_2_user": "Are these zibbers done?"}, ["zibber"]) != []
    )  # own names, plural
    assert (
        camera_functional(
            {"turn_1_image": "A slim metal tool with a crosshead tip, seated in a fastener."}
        )
        == []
    )
    assert camera_functional({"turn_1_image": "A sliding drawer beside a cutting board."}) == []


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


@pytest.mark.parametrize(
    ("stage", "change", "rule"),
    [
        (
            "situations",
            {"now": {**SIT["now"], "technique": ["swing from the elbow", "x y z"]}},
            "gold_lists_overlap",
        ),
        ("situations", {"now": {**SIT["now"], "state": ["   ", "   "]}}, "three_categories"),
        ("situations", {"now": {**SIT["now"], "name": "string"}}, "empty_text"),
        ("situations", {"earlier": examples()[0]["situations"]["earlier"]}, "example_echo"),
        (
            "camera",
            {"turn_1_image": GOOD_CAMERA["turn_1_image"] + " A claw hammer."},
            "object_name_in_camera",
        ),
        (
            "camera",
            {"turn_2_image": GOOD_CAMERA["turn_2_image"] + " A drill rests nearby."},
            "object_name_in_camera",
        ),
        (
            "camera",
            {"turn_2_image": GOOD_CAMERA["turn_2_image"] + " It is a different tool than before."},
            "camera_refers_to_turn_1",
        ),
        ("camera", {"turn_2_image": GOOD_CAMERA["turn_1_image"]}, "no_visible_shift"),
        ("camera", {"turn_1_image": examples()[0]["camera"]["turn_1_image"]}, "example_echo"),
        ("speech", {"turn_2_user": "Is this hand plane set right?"}, "gold_in_speech"),
        ("speech", {"turn_1_user": "Do I choke up on the grip here?"}, "gold_in_speech"),
        (
            "speech",
            {"turn_3_repair_prompt_deictic": "I mean the hand plane, right now."},
            "gold_in_speech",
        ),
        ("speech", {"turn_2_user": "I switched to this, is it right?"}, "shift_announced"),
        ("speech", {"turn_2_user": "Am I pushing right?"}, "speech_not_deictic"),
        ("speech", {"turn_3_repair_prompt": "I mean the one I'm holding now."}, "repair_not_named"),
        (
            "speech",
            {"turn_3_repair_prompt": "I mean the hand plane I'm holding now."},
            "repair_not_named",
        ),
        (
            "speech",
            {"turn_1_user": "what what what what what what what what"},
            "text_gates",
        ),  # the shared gate fires first
    ],
)
def test_every_stage_rule_catches_its_planted_violation(
    stage: str, change: dict[str, Any], rule: str
) -> None:
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


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"change_type": "teleport"}, "schema"),
        ({"scenario_id": "sc-1"}, "schema"),
        ({"subset": "contrast"}, "schema"),  # sc- id in the contrast subset
        (
            {
                "gold": {
                    "current_answers": ["a", "b"],
                    "prior_answers": [],
                    "clarify_indicators": [],
                    "abstain_indicators": [],
                }
            },
            "schema",
        ),
        ({"turn_3_repair_prompt_deictic": None}, "field_presence"),
        ({"context_image": "A grey room seen from the door."}, "field_presence"),
        (
            {
                "change_type": "cross_session_reference",
                "target_context": "prior",
                "turn_3_repair_prompt_deictic": None,
            },
            "field_presence",
        ),
        ({"target_context": "prior"}, "field_presence"),  # a deictic repair on a prior target
        ({"pair_id": "pair-01"}, "field_presence"),
        ({"target_context": "clarify", "turn_3_repair_prompt_deictic": None}, "indicators_missing"),
    ],
)
def test_record_rules(change: dict[str, Any], rule: str) -> None:
    assert rule in {r for r, _ in rule_problems(good_record(**change))}


def test_bank_rules() -> None:
    a = good_record()
    b = good_record(
        scenario_id="sc-02",
        turn_2_user="What now with this?",
        turn_2_image="  " + a["turn_2_image"].upper() + " ",
    )
    assert [r for _, r, _ in bank_problems([a, b])] == ["duplicate_turn_2"]
    c = good_record(
        scenario_id="sc-01", turn_2_user="What next with this?", turn_2_image="A flat grey stone."
    )
    assert "duplicate_id" in {r for _, r, _ in bank_problems([a, c])}
    many = [
        good_record(
            scenario_id=f"sc-{i:02d}", turn_2_user=f"Is this right {i}?", turn_2_image=f"A box {i}."
        )
        for i in range(3)
    ]
    assert [r for _, r, _ in bank_problems(many)] == ["signature_limit"]
    assert bank_problems(many, signature_limit=3) == []


def test_our_own_examples_pass_our_rules() -> None:
    """Every one-shot example is a scenario the generator would accept (a prompt that shows a
    broken example teaches the break)."""
    assert len(examples()) == 11
    for ex in examples():
        sk = example_skeleton(ex)
        members = (
            [sk]
            if sk.subset == "bank"
            else [sk, replace(sk, scenario_id="adv-01", target_context="prior")]
        )
        u = Unit(
            0,
            members,
            sit=ex["situations"],
            camera=ex["camera"],
            speech=ex["speech"],
            follow=ex.get("follow_up"),
        )
        for m in members:
            rec = assemble(u, m)
            assert (
                rule_problems(rec, categories=situations_of(m, ex["situations"])["categories"])
                == []
            ), ex["change_type"]
        assert check_situations(sk, ex["situations"])[1] == [
            ("example_echo", p)
            for p in [
                f"{r} situation {ex['situations'][r]['name']!r} is the example's"
                for r in ("earlier", "now")
                if r in ex["situations"]
            ]
        ]


def test_every_shift_type_and_target_renders_every_stage() -> None:
    """Every cell of both subsets (the rules forbid none): each stage renders, and the request
    asks for exactly the fields the stage's schema makes the model write."""
    prompts = Prompts()
    every = {ct: {t: 1 for t in ("current", "prior", "clarify", "abstain")} for ct in CHANGE_TYPES}
    units = [
        *build_units(settings(distribution=every)),
        *build_units(settings(distribution=every, subset="contrast")),
    ]
    assert sum(len(u) == 2 for u in units) == 6  # the contrast pairs of the visible shift types
    base = examples()[0]["situations"]
    sit = {
        **base,
        "meanwhile": "a hall",
        "candidates": ["a ladle", "a whisk"],
        "hidden_detail": "the date stamp",
        "clarify_indicators": ["which one"],
        "abstain_indicators": ["I could not see"],
    }
    for u in units:
        sk = u[0]
        asked = set(situations_schema(sk).model_fields)
        want = {"earlier"} | {
            f
            for f, cond in (
                ("meanwhile", sk.change_type == "cross_session_reference"),
                ("candidates", sk.target_context == "clarify"),
                ("clarify_indicators", sk.target_context == "clarify"),
                ("hidden_detail", sk.target_context == "abstain"),
                ("abstain_indicators", sk.target_context == "abstain"),
            )
            if cond
        }
        if sk.target_context != "clarify" and not (
            sk.target_context == "abstain" and sk.change_type == "absent_referent"
        ):
            want.add("now")
        assert asked == want, (sk.change_type, sk.target_context)
        stages = ["situations", "camera", "speech"] + (["follow_up"] if len(u) == 2 else [])
        for stage in stages:
            s = spec(sk, sit if stage != "situations" else None, turn_1_user="Is this all right?")
            messages = prompts.render(
                f"scenarios/{stage}.jinja", example=example_prompt(stage, example_for(sk)), s=s
            )
            assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
            json.loads(messages[2]["content"])
            assert messages[1]["content"][:30] == messages[3]["content"][:30]
            request = messages[3]["content"]
            if stage == "situations":
                for f in asked:
                    assert f"{f} (" in request, (sk.change_type, sk.target_context, f)
                assert ("now (" in request) == ("now" in asked)
            if stage == "camera":
                for f in camera_fields(sk):
                    assert f"\n{f}: " in request, (sk.change_type, sk.target_context, f)
                assert ("turn_2_image_b:" in request) == (len(u) == 2)
                assert ("still visible" in request) == sk.distractor
            if stage == "speech":
                assert "turn_3_repair_prompt:" in request
                assert ("turn_3_repair_prompt_deictic:" in request) == sk.deictic
    assert {"scenarios/_requests.jinja", "scenarios/_system.jinja"} <= set(prompts.used)


def test_the_speech_prompt_names_what_the_user_must_not_say() -> None:
    sk = SK
    messages = Prompts().render(
        "scenarios/speech.jinja", example=example_prompt("speech", example_for(sk)), s=spec(sk, SIT)
    )
    request = messages[-1]["content"]
    assert "claw hammer; swing from the elbow" in request and "hand plane" in request
    assert "turn_3_repair_prompt_deictic:" in request
    prior = replace(sk, target_context="prior")
    assert (
        "turn_3_repair_prompt_deictic:"
        not in Prompts().render(
            "scenarios/speech.jinja",
            example=example_prompt("speech", example_for(prior)),
            s=spec(prior, SIT),
        )[-1]["content"]
    )
