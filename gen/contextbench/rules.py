"""The Wearable Assistant Context Bench's authoring rules, pure: every rule by the stage whose
output it checks (:data:`RULES`), :func:`rule_problems` per scenario and :func:`bank_problems`
over a list; the text and word-pattern checks they apply are in :mod:`gen.contextbench.wording`
(importable from here too). They take any scenario dict (gen's or the released
ones): the generator, ``audit``'s scenarios check and ``judge`` use the same functions."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from gen.contextbench.wording import (
    SPEECH_HOMOGRAPHS,
    VOCABULARY,
    Problem,
    camera_evaluates,
    camera_functional,
    camera_refers_back,
    category_problems,
    gold_in_speech,
    key,
    load_vocabulary,
    name_match,
    not_deictic,
    object_names_in_camera,
    object_names_in_speech,
    repair_names,
    shift_announced,
    shingles,
    speech_properties,
    text_problem,
    word_match,
)
from gen.schemas.scenarios import ScenarioRecord

__all__ = [
    "Problem",
    "RULES",
    "SPEECH_HOMOGRAPHS",
    "VISIBLE_TYPES",
    "VOCABULARY",
    "bank_problems",
    "camera_evaluates",
    "camera_functional",
    "camera_refers_back",
    "category_problems",
    "deictic_allowed",
    "field_key",
    "gold_in_speech",
    "key",
    "load_vocabulary",
    "name_match",
    "not_deictic",
    "object_names_in_camera",
    "object_names_in_speech",
    "presence_problems",
    "repair_names",
    "rule_problems",
    "scenario_names",
    "schema_problems",
    "shift_announced",
    "shingles",
    "signature",
    "speech_properties",
    "text_problem",
    "word_match",
]

VISIBLE_TYPES = (
    "object_in_hand",
    "object_in_view",
    "object_state",
    "screen_content",
    "sequential_task",
    "location",
)
"""Authoring rules: the shift types where a deictic repair can resolve the reference (the
deictic repair exists exactly for these with target current)."""


# --------------------------------------------------------------------------- rules

RULES: list[tuple[str, str, str]] = [
    (
        "situations",
        "text_gates",
        "a name, phrase or indicator fails a shared text gate (gen.text.gates: echoes, truncation, "
        "repetition, language)",
    ),
    ("situations", "empty_text", "a name, phrase or indicator is empty or a placeholder"),
    ("situations", "repetitive_text", "a text repeats a 4-word run (tiny models loop)"),
    ("situations", "example_echo", "a situation copied whole from the one-shot examples"),
    (
        "situations",
        "three_categories",
        "a gold list lacks an object name, a technique or a state item, or has < 3 items",
    ),
    (
        "situations",
        "gold_lists_overlap",
        "the two referents share a name (shared phrases are dropped first, counted)",
    ),
    ("situations", "indicators_missing", "a clarify/abstain target without 3 distinct indicators"),
    (
        "camera",
        "text_gates",
        "a description fails a shared text gate (gen.text.gates: echoes, truncation, repetition, "
        "language)",
    ),
    ("camera", "empty_text", "an empty or placeholder description"),
    ("camera", "repetitive_text", "a description repeats a 4-word run"),
    ("camera", "example_echo", "a description shares an 8-word run with the one-shot examples"),
    (
        "camera",
        "object_name_in_camera",
        "an object name (the vocabulary or the scenario's own gold names) in a camera text",
    ),
    (
        "camera",
        "camera_functional_label",
        "a camera text calls a thing by what it is for (the cutting tool, a device for…)",
    ),
    (
        "camera",
        "camera_evaluates_technique",
        "a camera text judges technique (correctly, good grip, should…)",
    ),
    (
        "camera",
        "camera_refers_to_turn_1",
        "a turn-2 camera text refers to the earlier frame or announces the shift",
    ),
    ("camera", "no_visible_shift", "turn_1_image and turn_2_image are the same text"),
    ("camera", "duplicate_turn_2", "a turn_2_image identical to another scenario's"),
    (
        "camera",
        "not_identifiable",
        "a model cannot name the thing from a camera text alone (cosine to the gold name)",
    ),
    (
        "speech",
        "text_gates",
        "a user turn fails a shared text gate "
        "(gen.text.gates: echoes, truncation, repetition, language)",
    ),
    ("speech", "empty_text", "an empty or placeholder user turn"),
    ("speech", "repetitive_text", "a user turn repeats a 4-word run"),
    ("speech", "example_echo", "a user turn shares an 8-word run with the one-shot examples"),
    (
        "speech",
        "gold_in_speech",
        "a current/prior gold item in turn_1_user, turn_2_user or the deictic repair (word "
        "boundary)",
    ),
    (
        "speech",
        "object_name_in_speech",
        "an object name (the vocabulary or the scenario's own names) in a user turn or the deictic "
        "repair",
    ),
    (
        "speech",
        "speech_describes_properties",
        "a user turn describes how something looks: a color, shape, material or size word",
    ),
    (
        "speech",
        "shift_announced",
        "turn_2_user announces the change (I switched…, now I'm…, instead)",
    ),
    (
        "speech",
        "speech_not_deictic",
        "a user turn without a deictic or temporal reference (this, it, here, before…)",
    ),
    (
        "speech",
        "repair_not_named",
        "the named repair does not name the intended (and the wrong) referent",
    ),
    ("speech", "duplicate_turn_2", "a turn_2_user identical to another scenario's"),
    (
        "speech",
        "semantic_leak",
        "without the camera blocks a text-only model already hits the target's gold list",
    ),
    (
        "follow_up",
        "text_gates",
        "a user turn fails a shared text gate "
        "(gen.text.gates: echoes, truncation, repetition, language)",
    ),
    ("follow_up", "empty_text", "an empty or placeholder user turn"),
    ("follow_up", "repetitive_text", "a user turn repeats a 4-word run"),
    ("follow_up", "example_echo", "a user turn shares an 8-word run with the one-shot examples"),
    ("follow_up", "gold_in_speech", "a gold item in member B's turn_2_user"),
    ("follow_up", "object_name_in_speech", "an object name in member B's turn_2_user"),
    (
        "follow_up",
        "speech_describes_properties",
        "member B's turn_2_user describes how something looks",
    ),
    ("follow_up", "shift_announced", "member B's turn_2_user announces the change"),
    (
        "follow_up",
        "speech_not_deictic",
        "member B's turn_2_user without a deictic or temporal reference",
    ),
    ("follow_up", "repair_not_named", "member B's named repair does not name both referents"),
    (
        "follow_up",
        "duplicate_turn_2",
        "member B's turn_2_user identical to member A's or another scenario's",
    ),
    ("follow_up", "semantic_leak", "member B leaks through its words"),
    (
        "record",
        "schema",
        "required fields, enum values, id format, gold lists (the validator's check 3)",
    ),
    (
        "record",
        "field_presence",
        "context_image and the deictic repair exactly where the rules put them; pair_id only on "
        "contrast",
    ),
    ("record", "duplicate_id", "a scenario_id already in the bank"),
    (
        "record",
        "signature_limit",
        "more than signature_limit scenarios share (change_type, target, difficulty, domain)",
    ),
]
"""Every rule, by the stage whose output it checks (the funnel's rows, in this order)."""


def scenario_names(
    scenario: dict[str, Any], categories: dict[str, dict[str, Any]] | None
) -> dict[str, list[str]]:
    """The object names of each gold list: from the categories when known, else (released
    data) every item of the list."""
    gold = scenario.get("gold") or {}
    out: dict[str, list[str]] = {}
    for lst in ("current_answers", "prior_answers"):
        if categories and lst in categories:
            out[lst] = [categories[lst]["name"], *categories[lst].get("also", [])]
        else:
            out[lst] = [x for x in gold.get(lst) or [] if isinstance(x, str)]
    return out


def deictic_allowed(change_type: str | None, target: str | None) -> bool:
    """Authoring rules: the deictic repair exists exactly for visible-referent current targets."""
    return target == "current" and change_type in VISIBLE_TYPES


def schema_problems(scenario: dict[str, Any]) -> list[Problem]:
    """Field names, types and enums of the released schema (the validator's check 3 per scenario,
    plus the id format and the field set). Any JSON object is taken: a field of the wrong type is
    a problem, never an exception."""
    out: list[Problem] = []
    try:
        ScenarioRecord.model_validate(scenario)
    except ValidationError as e:
        for err in e.errors()[:5]:
            where = ".".join(str(p) for p in err["loc"]) or "record"
            out.append(("schema", f"{where}: {err['msg']}"))
    target, gold = scenario.get("target_context"), scenario.get("gold")
    target = target if isinstance(target, str) else None
    subset = scenario.get("subset")
    sid = str(scenario.get("scenario_id", ""))
    prefix = {"bank": "sc-", "contrast": "adv-"}.get(subset) if isinstance(subset, str) else None
    if prefix and not sid.startswith(prefix):
        out.append(
            (
                "schema",
                f"scenario_id {sid!r} does not start with {prefix!r} for "
                f"subset {scenario.get('subset')}",
            )
        )
    if isinstance(gold, dict):
        need = (
            {
                "current": "current_answers",
                "prior": "prior_answers",
                "clarify": "clarify_indicators",
                "abstain": "abstain_indicators",
            }.get(target)
            if target
            else None
        )
        if need and not gold.get(need):
            out.append(("schema", f"{target} target but {need} is empty"))
        items = gold.get(need) if need else None
        if target in ("current", "prior") and isinstance(items, list) and 0 < len(items) < 3:
            out.append(("schema", f"{need} has fewer than 3 items"))
    return out


def presence_problems(scenario: dict[str, Any]) -> list[Problem]:
    """Fields that exist exactly where the authoring rules put them."""
    out = []
    ct, target = scenario.get("change_type"), scenario.get("target_context")
    if ct == "cross_session_reference" and not scenario.get("context_image"):
        out.append(("field_presence", "cross_session_reference without context_image"))
    if ct != "cross_session_reference" and scenario.get("context_image"):
        out.append(
            ("field_presence", f"context_image on a {ct} scenario (only recall scenarios have one)")
        )
    deictic = scenario.get("turn_3_repair_prompt_deictic")
    if deictic_allowed(ct, target) and not deictic:
        out.append(
            (
                "field_presence",
                f"no turn_3_repair_prompt_deictic on a visible-referent current {ct} scenario",
            )
        )
    if not deictic_allowed(ct, target) and deictic:
        out.append(
            (
                "field_presence",
                f"turn_3_repair_prompt_deictic on a {target} {ct} scenario (must be null)",
            )
        )
    for f in ("turn_1_image", "turn_2_image"):
        if not scenario.get(f):
            out.append(("field_presence", f"{f} must be non-null"))
    # pair_id is optional on a contrast scenario (schema.md); only contrast pairs have one
    if scenario.get("subset") == "bank" and scenario.get("pair_id"):
        out.append(("field_presence", "a bank scenario with a pair_id"))
    return out


def rule_problems(
    scenario: dict[str, Any],
    *,
    categories: dict[str, dict[str, Any]] | None = None,
    vocabulary: Sequence[str] | None = None,
) -> list[Problem]:
    """Every per-scenario rule code can check, on one scenario in the released layout.

    Args:
        scenario: a ``scenarios.jsonl`` row (gen's or the released bank's).
        categories: the gold vocabulary by category (``scenario_checks.jsonl``'s
            ``categories``); without it the three-category rule falls back to the validator's
            ``>= 3 items`` and the repair and camera rules take every gold item as a possible name.
        vocabulary: object names never allowed in a camera text or in user speech (default: the
            project's list; in speech its everyday homographs only after an article).

    Returns:
        ``(rule, detail)`` per problem, rules named as in :data:`RULES`.
    """
    s = scenario
    out = schema_problems(s) + presence_problems(s)
    raw_gold = s.get("gold")
    gold: dict[str, Any] = raw_gold if isinstance(raw_gold, dict) else {}
    target, ct = s.get("target_context"), s.get("change_type")
    texts = {
        f: s.get(f)
        for f in (
            "context_image",
            "turn_1_image",
            "turn_2_image",
            "turn_1_user",
            "turn_2_user",
            "turn_3_repair_prompt",
            "turn_3_repair_prompt_deictic",
        )
    }
    for f, t in texts.items():
        if isinstance(t, str):
            why = text_problem(t)
            if why:
                out.append((why, f"{f}: {t[:60]!r}"))
    speech = {f: s.get(f) for f in ("turn_1_user", "turn_2_user", "turn_3_repair_prompt_deictic")}
    out += gold_in_speech(
        speech, [*(gold.get("current_answers") or []), *(gold.get("prior_answers") or [])]
    )
    names = scenario_names(s, categories)
    images = {f: s.get(f) for f in ("context_image", "turn_1_image", "turn_2_image")}
    own = [n for lst in names.values() for n in lst] if categories else []
    out += object_names_in_camera(images, own, vocabulary)
    out += camera_functional(images)
    out += camera_evaluates(images)
    out += camera_refers_back({"turn_2_image": s.get("turn_2_image")})
    if s.get("turn_1_image") and key(s.get("turn_1_image") or "") == key(
        s.get("turn_2_image") or ""
    ):
        out.append(("no_visible_shift", "turn_1_image and turn_2_image are the same text"))
    out += object_names_in_speech(speech, own, vocabulary)
    out += speech_properties(speech)
    out += shift_announced(s.get("turn_2_user"))
    out += not_deictic({"turn_1_user": s.get("turn_1_user"), "turn_2_user": s.get("turn_2_user")})
    if target in ("current", "prior"):
        intended, other = (
            ("current_answers", "prior_answers")
            if target == "current"
            else ("prior_answers", "current_answers")
        )
        both = s.get("subset") == "contrast" or ct not in (
            "absent_referent",
            "cross_session_reference",
        )
        out += repair_names(
            s.get("turn_3_repair_prompt"), names[intended], names[other] if both else []
        )
    if categories:
        out += category_problems(
            {k: v for k, v in categories.items() if k in ("current_answers", "prior_answers")}
        )
    for lst in ("current_answers", "prior_answers"):
        items = [x for x in gold.get(lst) or [] if isinstance(x, str)]
        if items and len({key(x) for x in items}) < 3:
            out.append(("three_categories", f"{lst} has fewer than 3 distinct items"))
    shared = {key(x) for x in gold.get("current_answers") or [] if isinstance(x, str)} & {
        key(x) for x in gold.get("prior_answers") or [] if isinstance(x, str)
    }
    if shared:
        out.append(("gold_lists_overlap", f"in both lists: {sorted(shared)[:3]}"))
    for lst, t in (("clarify_indicators", "clarify"), ("abstain_indicators", "abstain")):
        if (
            target == t
            and len({key(x) for x in gold.get(lst) or [] if isinstance(x, str) and x.strip()}) < 3
        ):
            out.append(("indicators_missing", f"{t} target with fewer than 3 distinct {lst}"))
    return out


def field_key(s: dict[str, Any], key: str) -> str | None:
    """A scenario's field as a key to count by: a string or None as it is, any other value (a list
    in a hand-edited bank) as its JSON text, so it counts apart and matches no cell."""
    v = s.get(key)
    return v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


def signature(s: dict[str, Any]) -> tuple[Any, ...]:
    """The validator's duplication signature."""
    return tuple(
        field_key(s, k)
        for k in ("change_type", "target_context", "difficulty_tier", "activity_domain")
    )


def bank_problems(
    scenarios: Sequence[dict[str, Any]], *, signature_limit: int | None = 2
) -> list[tuple[str, str, str]]:
    """Bank-level rules over scenarios in bank order: duplicate ids, identical turn-2 user or
    image texts (the validator's check 6, whitespace and case ignored as there), and signatures
    over ``signature_limit``. Returns ``(scenario_id or "<bank>", rule, detail)``."""
    out = []
    ids: dict[str, int] = {}
    seen: dict[tuple[str, str], str] = {}
    sigs: Counter[tuple[Any, ...]] = Counter()
    for s in scenarios:
        sid = str(s.get("scenario_id"))
        if sid in ids:
            out.append((sid, "duplicate_id", "scenario_id already in the bank"))
        ids[sid] = 1
        for f in ("turn_2_user", "turn_2_image"):
            t = (s.get(f) or "").strip().lower()
            if t and (f, t) in seen:
                out.append((sid, "duplicate_turn_2", f"identical {f} as {seen[(f, t)]}"))
            elif t:
                seen[(f, t)] = sid
        sigs[signature(s)] += 1
    if signature_limit is not None:
        for sig, count in sigs.items():
            if count > signature_limit:
                out.append(
                    (
                        "<bank>",
                        "signature_limit",
                        f"signature {sig} appears {count} times (limit {signature_limit})",
                    )
                )
    return out
