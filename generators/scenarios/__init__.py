"""Context-tracking scenarios in the Wearable Assistant Context Bench's released format.

The benchmark tests whether an assistant resolves "this"/"it" to the current camera frame or
stays anchored to an earlier one. Its 70 scenarios were written by hand; this generator writes
scenario banks of any size in its released ``scenarios.jsonl`` schema and refuses the ones that
break its authoring rules.

**Code owns the skeleton** (:func:`build_units`): shift type (``change_type``), target
(``target_context``), ``activity_domain``, ``referent_complexity``, ``difficulty_tier``,
``time_gap_bucket``, ids (``sc-NN`` / ``adv-NN`` from ``id_start``), ``pair_id``, and which
fields exist (``context_image`` exactly for ``cross_session_reference``, the deictic repair
exactly when the authoring rules allow it). **The LLM writes the words**, in three stages, each a
pydantic schema under the grammar and a one-shot prompt of the project's own
(``prompts/scenarios/``): 1 situations (the referent of each frame with its gold vocabulary by
category: name, technique, state; clarify/abstain indicators), 2 camera descriptions, 3 the user
turns and the repair prompts (3b: a contrast pair's second member). **Code checks every rule it
can** (:data:`RULES`) on every attempt, regenerates a failing stage with a fresh seed up to
``stage_attempts`` times, and otherwise rejects the scenario naming the rule. Two checks need a
model, run through the ``llm=`` boundary on ``models=[…]``: identification (a model names the
thing from each camera description alone; cosine to the gold name under the embedder) and
semantic leakage (the conversation without its camera blocks; a reply that already hits the
target's gold list leaks). Bank-level rules (unique turn-2 texts, the validator's signature
limit, unique ids) are resolved in index order, so records do not depend on scheduling.

Outputs: ``scenarios.jsonl`` (the released layout, gold inline), ``rejects.jsonl`` (reason = the
rule), ``scenario_checks.jsonl`` (per scenario: skeleton, gold categories, every rule's first and
final result, attempts, model answers), ``MANIFEST.lock.json`` in the benchmark's form, and the
funnel in the manifest. ``python -m gen scenarios verify input=<run folder>`` recomputes the
lock's hashes and exits 1 naming any that drifted.

The rule functions are pure and take any scenario dict (ours or the released ones):
:func:`rule_problems` per scenario, :func:`bank_problems` over a list.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

import gen
from gen.errors import ConfigError, GenError, InputError, LLMOutputError
from gen.gates import Gates
from gen.llm import LLMConfig, sha256_file
from gen.paths import PROMPTS
from gen.run import CommonConfig, Plan, RunContext, atomic_write, generator, iter_jsonl
from schemas import Reject
from schemas.scenarios import (
    CHANGE_TYPES,
    DIFFICULTIES,
    GOLD_FIELDS,
    RECORD_FIELDS,
    TARGETS,
    AbstainSituationsDraft,
    CameraDraft,
    ClarifySituationsDraft,
    ContrastCameraDraft,
    CrossSessionCameraDraft,
    CrossSessionSituationsDraft,
    DeicticSpeechDraft,
    FollowUpDraft,
    IdentifyDraft,
    ScenarioChecks,
    ScenarioRecord,
    SituationsDraft,
    SpeechDraft,
)

NAME = "scenarios"
SCHEMA_REVISION = 1
"""The released scenario format's ``SCHEMA_REVISION`` (the one gen writes)."""
LOCK = "MANIFEST.lock.json"
CHECKS_FILE = "scenario_checks.jsonl"
PROMPT_CONDITIONS = "prompt_conditions.json"
VOCABULARY = "scenarios/object_names.txt"
EXAMPLES = "scenarios/examples.json"

# --------------------------------------------------------------------------- the skeleton's tables

RELEASED_JOINT: dict[str, dict[str, int]] = {
    "object_in_hand": {"current": 9, "prior": 1, "clarify": 2},
    "object_state": {"current": 6, "prior": 2},
    "sequential_task": {"current": 5, "prior": 1},
    "location": {"current": 5, "prior": 1},
    "object_in_view": {"current": 4, "clarify": 1},
    "absent_referent": {"prior": 3, "abstain": 2},
    "screen_content": {"current": 4},
    "cross_session_reference": {"prior": 4},
}
"""The default bank of 50: one joint split of shift type x target consistent with both released
marginals (change_type 12/8/6/6/5/5/4/4; current 33, prior 12, clarify 3, abstain 2) and the
compatibility rules below. The released bank publishes only the marginals; this split is gen's."""
CONTRAST_PAIRS: dict[str, int] = {"object_in_hand": 12, "object_state": 8, "sequential_task": 6,
                                  "location": 6, "object_in_view": 5, "screen_content": 4}
"""Contrast pairs are spread over the visible-referent shift types in the bank's proportions
(the released pack holds 20 scenarios = 10 pairs)."""
DEFAULT_SIZE = {"bank": 50, "contrast": 20}
COMPATIBLE: dict[str, tuple[str, ...]] = {
    "object_in_hand": ("current", "prior", "clarify"),
    "object_state": ("current", "prior"),
    "sequential_task": ("current", "prior"),
    "location": ("current", "prior"),
    "object_in_view": ("current", "prior", "clarify"),
    "absent_referent": ("prior", "abstain"),
    "screen_content": ("current", "prior"),
    "cross_session_reference": ("prior",),
}
"""Which targets a shift type can have: a cross-session reference asks about the context image
(prior); abstaining needs an absent referent; clarifying needs several possible referents
(something in the hand or in view)."""
VISIBLE_TYPES = ("object_in_hand", "object_in_view", "object_state", "screen_content",
                 "sequential_task", "location")
"""Authoring rules: the shift types where a deictic repair can resolve the reference (the
deictic repair exists exactly for these with target current)."""
DOMAINS: dict[str, tuple[str, ...]] = {
    "object_in_hand": ("kitchen", "workshop", "garden", "craft", "music", "fitness", "automotive", "cleaning"),
    "object_state": ("kitchen", "garden", "craft", "workshop", "home", "automotive", "cleaning", "laundry"),
    "sequential_task": ("kitchen", "workshop", "craft", "garden", "automotive", "home", "electronics", "fitness"),
    "location": ("home", "garden", "workshop", "kitchen", "office", "garage", "outdoors", "store"),
    "object_in_view": ("kitchen", "workshop", "garden", "craft", "home", "office", "music", "store"),
    "absent_referent": ("garden", "kitchen", "home", "outdoors", "workshop", "store", "office", "pets"),
    "screen_content": ("communication", "work", "navigation", "shopping", "media", "fitness", "finance", "travel"),
    "cross_session_reference": ("kitchen", "home", "workshop", "garage", "office", "garden", "store", "travel"),
}
"""Activity domains per shift type (8 each): with 3 difficulty tiers and the validator's limit of
2 per signature, a (shift type, target) cell holds up to 48 scenarios (16 when its tier is fixed)."""
TIME_GAP_CHOICES: dict[str, tuple[str, ...]] = {
    "object_in_hand": ("seconds",), "object_in_view": ("seconds",),
    "screen_content": ("seconds", "minutes"), "object_state": ("minutes", "hours"),
    "sequential_task": ("minutes", "hours"), "location": ("minutes",),
    "absent_referent": ("seconds", "minutes"), "cross_session_reference": ("minutes", "hours", "next_day"),
}
"""Time between turn 1 and turn 2 per shift type; a seeded choice where several fit."""
DIFFICULTY_SHARE = {"easy": 0.3, "medium": 0.4, "hard": 0.3}
"""The released bank's 15/20/15."""


# --------------------------------------------------------------------------- rules

RULES: list[tuple[str, str, str]] = [
    ("situations", "text_gates", "a name, phrase or indicator fails a shared text gate (gen.gates: echoes, truncation, repetition, language)"),
    ("situations", "empty_text", "a name, phrase or indicator is empty or a placeholder"),
    ("situations", "repetitive_text", "a text repeats a 4-word run (tiny models loop)"),
    ("situations", "example_echo", "a situation copied whole from the one-shot examples"),
    ("situations", "three_categories", "a gold list lacks an object name, a technique or a state item, or has < 3 items"),
    ("situations", "gold_lists_overlap", "the two referents share a name (shared phrases are dropped first, counted)"),
    ("situations", "indicators_missing", "a clarify/abstain target without 3 distinct indicators"),
    ("camera", "text_gates", "a description fails a shared text gate (gen.gates: echoes, truncation, repetition, language)"),
    ("camera", "empty_text", "an empty or placeholder description"),
    ("camera", "repetitive_text", "a description repeats a 4-word run"),
    ("camera", "example_echo", "a description shares an 8-word run with the one-shot examples"),
    ("camera", "object_name_in_camera", "an object name (the vocabulary or the scenario's own gold names) in a camera text"),
    ("camera", "camera_evaluates_technique", "a camera text judges technique (correctly, good grip, should…)"),
    ("camera", "camera_refers_to_turn_1", "a turn-2 camera text refers to the earlier frame or announces the shift"),
    ("camera", "no_visible_shift", "turn_1_image and turn_2_image are the same text"),
    ("camera", "duplicate_turn_2", "a turn_2_image identical to another scenario's"),
    ("camera", "not_identifiable", "a model cannot name the thing from a camera text alone (cosine to the gold name)"),
    ("speech", "text_gates", "a user turn fails a shared text gate (gen.gates: echoes, truncation, repetition, language)"),
    ("speech", "empty_text", "an empty or placeholder user turn"),
    ("speech", "repetitive_text", "a user turn repeats a 4-word run"),
    ("speech", "example_echo", "a user turn shares an 8-word run with the one-shot examples"),
    ("speech", "gold_in_speech", "a current/prior gold item in turn_1_user, turn_2_user or the deictic repair (word boundary)"),
    ("speech", "shift_announced", "turn_2_user announces the change (I switched…, now I'm…, instead)"),
    ("speech", "speech_not_deictic", "a user turn without a deictic or temporal reference (this, it, here, before…)"),
    ("speech", "repair_not_named", "the named repair does not name the intended (and the wrong) referent"),
    ("speech", "duplicate_turn_2", "a turn_2_user identical to another scenario's"),
    ("speech", "semantic_leak", "without the camera blocks a text-only model already hits the target's gold list"),
    ("follow_up", "text_gates", "a user turn fails a shared text gate (gen.gates: echoes, truncation, repetition, language)"),
    ("follow_up", "empty_text", "an empty or placeholder user turn"),
    ("follow_up", "repetitive_text", "a user turn repeats a 4-word run"),
    ("follow_up", "example_echo", "a user turn shares an 8-word run with the one-shot examples"),
    ("follow_up", "gold_in_speech", "a gold item in member B's turn_2_user"),
    ("follow_up", "shift_announced", "member B's turn_2_user announces the change"),
    ("follow_up", "speech_not_deictic", "member B's turn_2_user without a deictic or temporal reference"),
    ("follow_up", "repair_not_named", "member B's named repair does not name both referents"),
    ("follow_up", "duplicate_turn_2", "member B's turn_2_user identical to member A's or another scenario's"),
    ("follow_up", "semantic_leak", "member B leaks through its words"),
    ("record", "schema", "required fields, enum values, id format, gold lists (the validator's check 3)"),
    ("record", "field_presence", "context_image, the deictic repair and pair_id exactly where the rules put them"),
    ("record", "duplicate_id", "a scenario_id already in the bank"),
    ("record", "signature_limit", "more than signature_limit scenarios share (change_type, target, difficulty, domain)"),
]
"""Every rule, by the stage whose output it checks (the funnel's rows, in this order)."""

_DEICTIC = re.compile(r"\b(?:this|that|these|those|it|its|here|there|now|one|ones|then|before|earlier|"
                      r"ago|previously|back)\b", re.I)
_ANNOUNCED = re.compile(
    r"\b(?:I(?:'ve| have)?\s+(?:just\s+)?(?:switched|swapped|changed|moved|picked up|grabbed|went|walked|"
    r"put (?:it|that|this|the \w+) down)|now I(?:'m| am)|instead|(?:a |the )?new (?:one|tool|thing|spot|room|place)|"
    r"(?:a |the )?different (?:one|tool|thing|room|place|screen)|(?:switch|swap)(?:ed)? (?:to|over))\b", re.I)
_REFERS_BACK = re.compile(
    r"\b(?:before|earlier|previous(?:ly)?|prior|formerly|first (?:frame|turn|scene|moment)|turn (?:1|one)|"
    r"no longer|any ?more|used to|instead(?: of)?|switch(?:ed|es|ing)?|swap(?:ped|s|ping)?|"
    r"replac(?:ed|es|ing)|changed (?:from|to)|has changed|(?:than|as) it was|"
    r"different (?:tool|object|one|item|thing|room|place|screen) (?:than|from))\b", re.I)
_EVALUATES = re.compile(
    r"\b(?:correct(?:ly)?|incorrect(?:ly)?|proper(?:ly)?|improper(?:ly)?|right way|wrong(?:ly)?|"
    r"(?:good|bad|poor|great|nice) (?:grip|form|technique|posture|angle|job)|poorly|"
    r"well[- ](?:aligned|positioned|placed|done|held|executed)|perfect(?:ly)?|"
    r"too (?:fast|slow|hard|much|little|tight|loose)|should|needs? to|mistake|nicely|expertly|"
    r"skil(?:l)?ful(?:ly)?|careless(?:ly)?)\b", re.I)
_PLACEHOLDER = re.compile(r"^(?:n/?a|none|null|unknown|string|text|name|tbd|\.\.\.|…|-|x|"
                          r"(?:turn_\d_(?:image|user)|context_image|turn_3_repair_prompt(?:_deictic)?|"
                          r"turn_2_image_b|earlier|now|meanwhile|candidates|hidden_detail))$", re.I)
_WORD = re.compile(r"[\w']+")


def word_match(token: str, text: str) -> bool:
    """The benchmark's own match: ``\\b<token>\\b``, case-insensitive."""
    return bool(re.search(r"\b" + re.escape(token.lower()) + r"\b", text.lower()))


def name_match(name: str, text: str) -> bool:
    """An object name in a text at word boundaries, also as a plural (-es after s, x, z, ch, sh;
    else -s: "pans" but not "panes")."""
    n = name.lower()
    plural = "(?:es)?" if re.search(r"(?:s|x|z|ch|sh)$", n) else "s?"
    return bool(re.search(r"\b" + re.escape(n) + plural + r"\b", text.lower()))


def key(text: str) -> str:
    """Comparison key: case, punctuation and spacing ignored."""
    return " ".join(re.sub(r"[^\w\s']", " ", text.casefold()).split())


def text_problem(text: str) -> str | None:
    """``empty_text`` or ``repetitive_text`` for one model-written text, else None."""
    k = key(text)
    if not k or _PLACEHOLDER.match(k) or _PLACEHOLDER.match(text.strip()):
        return "empty_text"
    words = k.split()
    grams = [tuple(words[i:i + 4]) for i in range(len(words) - 3)]
    if len(grams) != len(set(grams)) or (len(words) >= 8 and len(set(words)) < len(words) / 2):
        return "repetitive_text"
    return None


def shingles(text: str, size: int = 8) -> set[tuple[str, ...]]:
    words = key(text).split()
    return {tuple(words[i:i + size]) for i in range(len(words) - size + 1)}


@lru_cache(maxsize=4)
def load_vocabulary(path: str = str(PROMPTS / VOCABULARY)) -> tuple[str, ...]:
    """The project's object-name vocabulary (one name a line, ``#`` comments), longest first."""
    names = {ln.split("#", 1)[0].strip().lower() for ln in Path(path).read_text(encoding="utf-8").splitlines()}
    return tuple(sorted((n for n in names if n), key=lambda n: (-len(n), n)))


# The pure rule functions. Each returns (rule, detail) pairs; an empty list means it passes.

Problem = tuple[str, str]


def gold_in_speech(speech: dict[str, str | None], tokens: Sequence[str], lists: str = "gold") -> list[Problem]:
    """The validator's check 1: a gold token in a user-speech field (word boundary)."""
    out = []
    for fname, text in speech.items():
        for tok in tokens:
            if text and tok.strip() and word_match(tok, text):
                out.append(("gold_in_speech", f"{lists} item {tok!r} appears in {fname}"))
    return out


def object_names_in_camera(images: dict[str, str | None], names: Sequence[str],
                           vocabulary: Sequence[str] | None = None) -> list[Problem]:
    """An object name in a camera text: the vocabulary (default: the project's list) plus the
    scenario's own gold object names; word boundary, plural allowed."""
    vocab = load_vocabulary() if vocabulary is None else vocabulary
    wanted = list(dict.fromkeys([n.lower().strip() for n in names if n and n.strip()] + list(vocab)))
    out = []
    for fname, text in images.items():
        if not text:
            continue
        hits = [n for n in wanted if name_match(n, text)]
        # a longer name that matched covers its parts ("chef's knife" covers "knife")
        hits = [h for h in hits if not any(h != o and name_match(h, o) for o in hits)]
        out += [("object_name_in_camera", f"object name {h!r} in {fname}") for h in hits]
    return out


def camera_evaluates(images: dict[str, str | None]) -> list[Problem]:
    return [("camera_evaluates_technique", f"{fname}: {m.group(0)!r}")
            for fname, text in images.items() if text for m in [_EVALUATES.search(text)] if m]


def camera_refers_back(turn_2_images: dict[str, str | None]) -> list[Problem]:
    return [("camera_refers_to_turn_1", f"{fname}: {m.group(0)!r}")
            for fname, text in turn_2_images.items() if text for m in [_REFERS_BACK.search(text)] if m]


def shift_announced(turn_2_user: str | None) -> list[Problem]:
    m = _ANNOUNCED.search(turn_2_user or "")
    return [("shift_announced", f"turn_2_user: {m.group(0)!r}")] if m else []


def not_deictic(speech: dict[str, str | None]) -> list[Problem]:
    return [("speech_not_deictic", f"{fname} has no deictic or temporal reference: {text!r}")
            for fname, text in speech.items() if text and not _DEICTIC.search(text)]


def repair_names(repair: str | None, intended: Sequence[str], wrong: Sequence[str]) -> list[Problem]:
    """The named repair names the intended referent (one of ``intended``) and, when ``wrong`` is
    given, the wrong one."""
    text = repair or ""
    out = []
    if intended and not any(name_match(n, text) for n in intended if n.strip()):
        out.append(("repair_not_named", f"turn_3_repair_prompt names none of {list(intended)[:3]}"))
    if wrong and not any(name_match(n, text) for n in wrong if n.strip()):
        out.append(("repair_not_named", f"turn_3_repair_prompt names none of the wrong referent's {list(wrong)[:3]}"))
    return out


def category_problems(categories: dict[str, dict[str, Any]]) -> list[Problem]:
    """The three-category rule on gold vocabulary by category (``{"name", "technique", "state"}``
    per list)."""
    out = []
    for lst, cats in categories.items():
        items = [cats.get("name") or "", *(cats.get("technique") or []), *(cats.get("state") or [])]
        missing = [c for c in ("name", "technique", "state")
                   if not (cats.get(c) if c == "name" else [x for x in cats.get(c) or [] if x.strip()])]
        if missing:
            out.append(("three_categories", f"{lst} has no {' / '.join(missing)} item"))
        elif len({key(x) for x in items if x.strip()}) < 3:
            out.append(("three_categories", f"{lst} has fewer than 3 distinct items"))
    return out


def scenario_names(scenario: dict[str, Any], categories: dict[str, dict[str, Any]] | None) -> dict[str, list[str]]:
    """The object names of each gold list: from the categories when known, else (released
    data) every item of the list."""
    gold = scenario.get("gold") or {}
    out = {}
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
        out.append(("schema", f"scenario_id {sid!r} does not start with {prefix!r} for subset {scenario.get('subset')}"))
    if isinstance(gold, dict):
        need = {"current": "current_answers", "prior": "prior_answers", "clarify": "clarify_indicators",
                "abstain": "abstain_indicators"}.get(target) if target else None
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
        out.append(("field_presence", f"context_image on a {ct} scenario (only recall scenarios have one)"))
    deictic = scenario.get("turn_3_repair_prompt_deictic")
    if deictic_allowed(ct, target) and not deictic:
        out.append(("field_presence", f"no turn_3_repair_prompt_deictic on a visible-referent current {ct} scenario"))
    if not deictic_allowed(ct, target) and deictic:
        out.append(("field_presence", f"turn_3_repair_prompt_deictic on a {target} {ct} scenario (must be null)"))
    for f in ("turn_1_image", "turn_2_image"):
        if not scenario.get(f):
            out.append(("field_presence", f"{f} must be non-null"))
    if scenario.get("subset") == "contrast" and not scenario.get("pair_id"):
        out.append(("field_presence", "a contrast scenario without pair_id"))
    if scenario.get("subset") == "bank" and scenario.get("pair_id"):
        out.append(("field_presence", "a bank scenario with a pair_id"))
    return out


def rule_problems(scenario: dict[str, Any], *, categories: dict[str, dict[str, Any]] | None = None,
                  vocabulary: Sequence[str] | None = None) -> list[Problem]:
    """Every per-scenario rule code can check, on one scenario in the released layout.

    Args:
        scenario: a ``scenarios.jsonl`` row (gen's or the released bank's).
        categories: the gold vocabulary by category (``scenario_checks.jsonl``'s
            ``categories``); without it the three-category rule falls back to the validator's
            ``>= 3 items`` and the repair and camera rules take every gold item as a possible name.
        vocabulary: object names never allowed in a camera text (default: the project's list).

    Returns:
        ``(rule, detail)`` per problem, rules named as in :data:`RULES`.
    """
    s = scenario
    out = schema_problems(s) + presence_problems(s)
    gold = s.get("gold") if isinstance(s.get("gold"), dict) else {}
    target, ct = s.get("target_context"), s.get("change_type")
    texts = {f: s.get(f) for f in ("context_image", "turn_1_image", "turn_2_image", "turn_1_user", "turn_2_user",
                                   "turn_3_repair_prompt", "turn_3_repair_prompt_deictic")}
    for f, t in texts.items():
        if isinstance(t, str):
            why = text_problem(t)
            if why:
                out.append((why, f"{f}: {t[:60]!r}"))
    speech = {f: s.get(f) for f in ("turn_1_user", "turn_2_user", "turn_3_repair_prompt_deictic")}
    out += gold_in_speech(speech, [*(gold.get("current_answers") or []), *(gold.get("prior_answers") or [])])
    names = scenario_names(s, categories)
    images = {f: s.get(f) for f in ("context_image", "turn_1_image", "turn_2_image")}
    own = [n for lst in names.values() for n in lst] if categories else []
    out += object_names_in_camera(images, own, vocabulary)
    out += camera_evaluates(images)
    out += camera_refers_back({"turn_2_image": s.get("turn_2_image")})
    if s.get("turn_1_image") and key(s.get("turn_1_image") or "") == key(s.get("turn_2_image") or ""):
        out.append(("no_visible_shift", "turn_1_image and turn_2_image are the same text"))
    out += shift_announced(s.get("turn_2_user"))
    out += not_deictic({"turn_1_user": s.get("turn_1_user"), "turn_2_user": s.get("turn_2_user")})
    if target in ("current", "prior"):
        intended, other = (("current_answers", "prior_answers") if target == "current"
                           else ("prior_answers", "current_answers"))
        both = s.get("subset") == "contrast" or ct not in ("absent_referent", "cross_session_reference")
        out += repair_names(s.get("turn_3_repair_prompt"), names[intended], names[other] if both else [])
    if categories:
        out += category_problems({k: v for k, v in categories.items() if k in ("current_answers", "prior_answers")})
    for lst in ("current_answers", "prior_answers"):
        items = [x for x in gold.get(lst) or [] if isinstance(x, str)]
        if items and len({key(x) for x in items}) < 3:
            out.append(("three_categories", f"{lst} has fewer than 3 distinct items"))
    shared = {key(x) for x in gold.get("current_answers") or [] if isinstance(x, str)} & \
             {key(x) for x in gold.get("prior_answers") or [] if isinstance(x, str)}
    if shared:
        out.append(("gold_lists_overlap", f"in both lists: {sorted(shared)[:3]}"))
    for lst, t in (("clarify_indicators", "clarify"), ("abstain_indicators", "abstain")):
        if target == t and len({key(x) for x in gold.get(lst) or [] if isinstance(x, str) and x.strip()}) < 3:
            out.append(("indicators_missing", f"{t} target with fewer than 3 distinct {lst}"))
    return out


def signature(s: dict[str, Any]) -> tuple[Any, ...]:
    """The validator's duplication signature."""
    return (s.get("change_type"), s.get("target_context"), s.get("difficulty_tier"), s.get("activity_domain"))


def bank_problems(scenarios: Sequence[dict[str, Any]], *, signature_limit: int | None = 2) -> list[tuple[str, str, str]]:
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
                out.append(("<bank>", "signature_limit", f"signature {sig} appears {count} times (limit {signature_limit})"))
    return out


# --------------------------------------------------------------------------- config


class ScenariosConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Scenarios to generate (contrast: an even number, two per pair); null: 50 (bank) / 20 (contrast), or the sum of distribution=."""
    action: Literal["generate", "verify"] = "generate"
    """generate | verify (python -m gen scenarios verify input=<run folder>: the lock's hashes against the files)."""
    subset: Literal["bank", "contrast"] = "bank"
    """bank: sc-NN scenarios; contrast: adv-NN A/B pairs sharing turn 1, one targeting current and one prior."""
    distribution: dict[str, dict[str, int]] | None = None
    """Counts per shift type and target ({object_in_hand: {current: 3, clarify: 1}, …}); null: the released proportions scaled to n."""
    id_start: int = Field(1, ge=1)
    """Number of the first id (sc-NN/adv-NN): banks made in several runs stay unique."""
    existing: str | None = None
    """Earlier scenarios (a scenarios.jsonl or run folder) this bank joins: their ids, turn-2 texts and signatures count."""
    signature_limit: int | None = Field(2, ge=1)
    """Most scenarios per (change_type, target, difficulty, domain), the validator's check 6 (null: no limit)."""
    stage_attempts: int = Field(3, ge=1, le=10)
    """Generations per stage (fresh seed) when its output breaks a rule."""
    model_checks: Literal["reject", "record", "off"] = "reject"
    """Identification and semantic-leak checks: reject (regenerate, then reject), record only, or off."""
    models: list[LLMConfig] = Field(default_factory=list)
    """Models of the model checks: llm presets ([smollm2]) or dicts ([{backend: openai, model: x}]); [] = llm=."""
    labels: list[str] = Field(default_factory=list)
    """Model names in scenario_checks.jsonl, one per model ([] = GGUF stem or served model name)."""
    identify_min_cosine: float = Field(0.6, ge=0, le=1)
    """Identification passes at this cosine between a model's answer and the gold name (MiniLM: knife/chef's knife 0.79, knife/spoon 0.53)."""
    identify_quorum: Literal["any", "all"] = "any"
    """How many models must identify each camera text (one reader, as the authoring rules' test, or all)."""
    leak_targets: list[Literal["current", "prior", "clarify", "abstain"]] = Field(default_factory=lambda: ["current", "prior"])
    """Targets the semantic-leak check applies to (blind clarify/abstain replies are what missing vision should give)."""
    leak_tokens: int = Field(96, ge=8, le=2048)
    """Reply length cap of the text-only model in the leak check (greedy)."""
    situations_tokens: int = Field(320, ge=32)
    """Completion cap of the situations call."""
    camera_tokens: int = Field(420, ge=32)
    """Completion cap of the camera call."""
    speech_tokens: int = Field(240, ge=32)
    """Completion cap of the speech calls."""
    benchmark_version: str = "0.1"
    """benchmark_version written into MANIFEST.lock.json (the benchmark runner's version the bank is for)."""
    prompt_conditions: str | None = None
    """The benchmark's prompt_conditions.json: copied into the run folder and hashed into the lock (null: none)."""

    @field_validator("models", mode="before")
    @classmethod
    def _named_models(cls, value: Any) -> Any:
        from gen.config import llm_preset

        return [llm_preset(v) if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _check(self) -> ScenariosConfig:
        if self.num_shards != 1:
            raise ValueError("scenarios runs in one process (num_shards=1): the bank-level rules need the whole "
                             "bank; make banks in several runs with id_start= and existing=")
        if self.action == "verify":
            if self.input is None:
                raise ValueError("verify needs input=<a scenarios run folder>")
            return self
        panel = self.models or [self.llm]
        if self.labels and len(self.labels) != len(panel):
            raise ValueError(f"labels: {len(self.labels)} given for {len(panel)} model(s)")
        if self.labels and len(set(self.labels)) != len(self.labels):
            raise ValueError("labels must be distinct")
        if self.distribution is not None:
            check_distribution(self.distribution, self.subset)
            total = sum(c for row in self.distribution.values() for c in row.values())
            if total == 0:
                raise ValueError("distribution: every count is 0")
            if self.n is not None and self.n != total:
                raise ValueError(f"n={self.n} but distribution= sums to {total}; give one of them")
        if self.subset == "contrast" and self.n is not None and self.n % 2:
            raise ValueError(f"subset=contrast makes A/B pairs: n must be even, got {self.n}")
        return self

    @property
    def size(self) -> int:
        if self.distribution is not None:
            return sum(c for row in self.distribution.values() for c in row.values())
        return self.n or DEFAULT_SIZE[self.subset]


def check_distribution(dist: dict[str, dict[str, int]], subset: str) -> None:
    """Shift types and targets exist, counts are >= 0, the targets fit their shift type, and a
    contrast distribution gives as many current as prior (one of each per pair)."""
    for ct, row in dist.items():
        if ct not in CHANGE_TYPES:
            raise ValueError(f"distribution: unknown shift type {ct!r} (choose from {', '.join(CHANGE_TYPES)})")
        if not isinstance(row, dict):
            raise ValueError(f"distribution.{ct}: expected {{target: count}}")
        if subset == "contrast" and ct not in CONTRAST_PAIRS:
            raise ValueError(f"distribution.{ct}: contrast pairs need a visible earlier referent "
                             f"({', '.join(CONTRAST_PAIRS)})")
        for t, c in row.items():
            if t not in TARGETS:
                raise ValueError(f"distribution.{ct}: unknown target {t!r} (choose from {', '.join(TARGETS)})")
            if not isinstance(c, int) or isinstance(c, bool) or c < 0:
                raise ValueError(f"distribution.{ct}.{t}: a count >= 0, got {c!r}")
            if c and t not in COMPATIBLE[ct]:
                raise ValueError(f"distribution.{ct}.{t}: {ct} scenarios cannot target {t} "
                                 f"(possible: {', '.join(COMPATIBLE[ct])})")
        if subset == "contrast":
            if set(k for k, c in row.items() if c) - {"current", "prior"} or row.get("current", 0) != row.get("prior", 0):
                raise ValueError(f"distribution.{ct}: a contrast pair is one current and one prior: "
                                 "give equal current and prior counts and no other target")


# --------------------------------------------------------------------------- skeleton (pure)


@dataclass(frozen=True)
class Skeleton:
    """What code decides about one scenario before the LLM writes a word."""

    scenario_id: str
    subset: str
    pair_id: str | None
    change_type: str
    target_context: str
    activity_domain: str
    referent_complexity: str
    difficulty_tier: str
    time_gap_bucket: str

    @property
    def deictic(self) -> bool:
        return deictic_allowed(self.change_type, self.target_context)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """Integers summing to ``total`` in proportion to ``weights`` (Hamilton's method; ties go to
    the earlier weight)."""
    s = sum(weights)
    if total <= 0 or s <= 0:
        return [0] * len(weights)
    quotas = [total * w / s for w in weights]
    out = [int(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - out[i]), i))
    for i in order[:total - sum(out)]:
        out[i] += 1
    return out


def cell_counts(cfg: ScenariosConfig) -> list[tuple[str, str, int]]:
    """(shift type, target, count) in bank order: distribution= as given, else the released
    proportions scaled to the size by largest remainder. Contrast: pairs per shift type (the
    target column says current; each pair adds its prior member)."""
    if cfg.subset == "contrast":
        if cfg.distribution is not None:
            pairs = [(ct, cfg.distribution.get(ct, {}).get("current", 0)) for ct in CHANGE_TYPES]
        else:
            cts = list(CONTRAST_PAIRS)
            pairs = list(zip(cts, largest_remainder(cfg.size // 2, [CONTRAST_PAIRS[c] for c in cts]), strict=True))
        return [(ct, "current", k) for ct, k in pairs if k]
    if cfg.distribution is not None:
        return [(ct, t, cfg.distribution.get(ct, {}).get(t, 0)) for ct in CHANGE_TYPES for t in TARGETS
                if cfg.distribution.get(ct, {}).get(t, 0)]
    cells = [(ct, t, c) for ct in CHANGE_TYPES for t in TARGETS for c in [RELEASED_JOINT[ct].get(t, 0)] if c]
    counts = largest_remainder(cfg.size, [c for _, _, c in cells])
    return [(ct, t, k) for (ct, t, _), k in zip(cells, counts, strict=True) if k]


def difficulties(cells: list[tuple[str, str, int]], total: int) -> list[list[str]]:
    """Difficulty tiers per cell: clarify and abstain are hard; every other cell takes tiers in
    proportion to what the bank still needs of its 30/40/30 % share (largest remainder, cell by
    cell in bank order), so a cell mixes tiers and the bank lands near 15/20/15 per 50."""
    need = dict(zip(DIFFICULTIES, largest_remainder(total, list(DIFFICULTY_SHARE.values())), strict=True))
    out: list[list[str] | None] = [None] * len(cells)
    for i, (_, t, k) in enumerate(cells):
        if t in ("clarify", "abstain"):
            out[i] = ["hard"] * k
            need["hard"] -= k
    for i, (_, _, k) in enumerate(cells):
        if out[i] is not None:
            continue
        weights = [max(0, need[d]) + 1e-9 for d in DIFFICULTIES]
        split = largest_remainder(k, weights)
        tiers = [d for d, c in zip(DIFFICULTIES, split, strict=True) for _ in range(c)]
        for d in tiers:
            need[d] -= 1
        out[i] = tiers
    return [x or [] for x in out]


def complexity_of(change_type: str, target: str, difficulty: str, subset: str) -> str:
    """referent_complexity: contrast pairs keep the earlier referent in view
    (distractor_present); clarify is multi_referent; absent and cross-session referents are
    absent_referent; a hard object_in_view has a distractor and a hard sequential_task changes
    step and tool at once (compound_shift); the rest single_referent."""
    if subset == "contrast":
        return "distractor_present"
    if target == "clarify":
        return "multi_referent"
    if change_type in ("absent_referent", "cross_session_reference"):
        return "absent_referent"
    if difficulty == "hard" and change_type == "object_in_view":
        return "distractor_present"
    if difficulty == "hard" and change_type == "sequential_task":
        return "compound_shift"
    return "single_referent"


def build_units(cfg: ScenariosConfig, existing: Sequence[dict[str, Any]] = ()) -> list[list[Skeleton]]:
    """The skeleton of every unit (a scenario, or a contrast pair's two members), in id order.

    Domains: per scenario the domain of its shift type's list whose signature (shift type,
    target, difficulty, domain) is least used so far (existing scenarios count), then the least
    used domain of the shift type, then a seeded order; a cell that cannot stay within
    ``signature_limit`` is a ConfigError naming it.
    """
    cells = cell_counts(cfg)
    tiers = difficulties(cells, sum(k for _, _, k in cells))
    rng = random.Random(f"{cfg.seed}/{NAME}/skeleton")
    sigs: Counter[tuple[Any, ...]] = Counter(signature(s) for s in existing)
    per_domain: Counter[tuple[str, str]] = Counter((s.get("change_type"), s.get("activity_domain")) for s in existing)
    contrast = cfg.subset == "contrast"
    units: list[list[Skeleton]] = []
    number = cfg.id_start
    for (ct, target, _), cell_tiers in zip(cells, tiers, strict=True):
        domains = list(DOMAINS[ct])
        rng.shuffle(domains)
        for tier in cell_tiers:
            members = ("current", "prior") if contrast else (target,)

            def load(d: str, tier: str = tier, members: tuple[str, ...] = members, ct: str = ct,
                     order: list[str] = domains) -> tuple[int, int, int]:
                return (max(sigs[(ct, m, tier, d)] for m in members), per_domain[(ct, d)], order.index(d))

            domain = min(domains, key=load)
            if cfg.signature_limit is not None and load(domain)[0] >= cfg.signature_limit:
                raise ConfigError(f"distribution: {ct}/{target} needs more scenarios at difficulty {tier} than "
                                  f"{len(domains)} domains x signature_limit={cfg.signature_limit} allow; "
                                  "lower its count or raise signature_limit (null: no limit)")
            gap = rng.choice(TIME_GAP_CHOICES[ct])
            unit = []
            pair = f"pair-{len(units) + (cfg.id_start + 1) // 2:02d}" if contrast else None
            for m in members:
                prefix = "adv" if contrast else "sc"
                unit.append(Skeleton(f"{prefix}-{number:02d}", cfg.subset, pair, ct, m, domain,
                                     complexity_of(ct, m, tier, cfg.subset), tier, gap))
                sigs[(ct, m, tier, domain)] += 1
                number += 1
            per_domain[(ct, domain)] += 1
            units.append(unit)
    return units


# --------------------------------------------------------------------------- input


def read_scenarios(path: Path) -> list[dict[str, Any]]:
    """Scenarios of a ``scenarios.jsonl`` or a run folder holding one; a row that is not a
    scenario object is an InputError naming file and line."""
    file = path / f"{NAME}.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise InputError(f"{path}: no {NAME}.jsonl there (expected a scenarios run folder or file)")
    rows = []
    for lineno, row in iter_jsonl(file):
        if not isinstance(row, dict) or not isinstance(row.get("scenario_id"), str):
            raise InputError(f"{file}:{lineno}: scenario_id: a scenario object with a string scenario_id is required")
        rows.append(row)
    return rows


SCENARIO_KEYS = ("scenario_id", "change_type", "target_context", "turn_2_user")
"""The fields by which a JSONL file is known as a scenario bank in the released schema (no
roles file needed): ``audit`` and ``bank add`` read such a file as scenarios."""


def is_scenario_bank(path: Path) -> bool:
    """Whether ``path`` is a scenarios run folder (it holds ``scenarios.jsonl``) or a JSONL file
    whose first record carries :data:`SCENARIO_KEYS`. A file whose first line does not parse is
    not one: its usual reader names the fault."""
    if path.is_dir():
        return (path / f"{NAME}.jsonl").is_file()
    if path.suffix != ".jsonl" or not path.is_file():
        return False
    try:
        for _, row in iter_jsonl(path):
            return isinstance(row, dict) and all(k in row for k in SCENARIO_KEYS)
    except GenError:
        return False
    return False


def plan(cfg: ScenariosConfig) -> Plan:
    """generate: one index per unit (scenario, or contrast pair) of the skeleton; verify: one
    index per lock entry checked."""
    if cfg.action == "verify":
        folder = cfg.input_path()
        assert folder is not None
        if not folder.is_dir():
            raise InputError(f"input: {folder} is not a scenarios run folder")
        return Plan(len(LOCK_KEYS), (folder, read_lock(folder)))
    existing: list[dict[str, Any]] = []
    if cfg.existing is not None:
        path = Path(cfg.existing).expanduser()
        if not path.exists():
            raise InputError(f"existing: no such file or folder: {path}")
        existing = read_scenarios(path)
    units = build_units(cfg, existing)
    taken = {s["scenario_id"] for s in existing}
    clash = [sk.scenario_id for u in units for sk in u if sk.scenario_id in taken]
    if clash:
        last = max((int(m.group(1)) for s in taken for m in [re.search(r"-(\d+)$", s)] if m), default=0)
        raise ConfigError(f"id_start={cfg.id_start}: {clash[0]} is already in existing= ({cfg.existing}); "
                          f"use id_start={last + 1}")
    return Plan(len(units), (units, existing))


# --------------------------------------------------------------------------- one-shot examples and specs


@lru_cache(maxsize=4)
def _examples(path: str) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(Path(path).read_text(encoding="utf-8"))["examples"])


def examples() -> tuple[dict[str, Any], ...]:
    """The project's worked scenarios (``prompts/scenarios/examples.json``)."""
    return _examples(str(PROMPTS / EXAMPLES))


def example_for(sk: Skeleton) -> dict[str, Any]:
    """The one-shot example a scenario's prompts show: the contrast pair for contrast, the
    clarify / abstain example for those targets, else the example of its shift type."""
    exs = examples()
    if sk.subset == "contrast":
        return next(e for e in exs if e.get("subset") == "contrast")
    if sk.target_context in ("clarify", "abstain"):
        return next(e for e in exs if e["target_context"] == sk.target_context)
    return next(e for e in exs if e["change_type"] == sk.change_type and not e.get("subset")
                and e["target_context"] in ("current", "prior"))


def example_skeleton(ex: dict[str, Any]) -> Skeleton:
    subset = ex.get("subset", "bank")
    return Skeleton("sc-00" if subset == "bank" else "adv-00", subset, "pair-00" if subset == "contrast" else None,
                    ex["change_type"], ex["target_context"], ex["activity_domain"],
                    complexity_of(ex["change_type"], ex["target_context"], "easy", subset), "easy",
                    ex["time_gap_bucket"])


def situations_of(sk: Skeleton, sit: dict[str, Any]) -> dict[str, Any]:
    """Gold lists and their categories from a situations draft (code decides which list is which)."""
    def items(x: dict[str, Any]) -> list[str]:
        return list(dict.fromkeys(t.strip() for t in [x["name"], *x["technique"], *x["state"]] if t.strip()))

    def cats(x: dict[str, Any]) -> dict[str, Any]:
        return {"name": x["name"].strip(), "technique": [t.strip() for t in x["technique"]],
                "state": [t.strip() for t in x["state"]]}

    gold = {k: [] for k in GOLD_FIELDS}
    categories: dict[str, dict[str, Any]] = {}
    gold["prior_answers"] = items(sit["earlier"])
    categories["prior_answers"] = cats(sit["earlier"])
    if "now" in sit:
        gold["current_answers"] = items(sit["now"])
        categories["current_answers"] = cats(sit["now"])
    if "clarify_indicators" in sit:
        gold["clarify_indicators"] = list(dict.fromkeys(t.strip() for t in sit["clarify_indicators"] if t.strip()))
    if "abstain_indicators" in sit:
        gold["abstain_indicators"] = list(dict.fromkeys(t.strip() for t in sit["abstain_indicators"] if t.strip()))
    return {"gold": gold, "categories": categories}


def referent_names(sit: dict[str, Any]) -> list[str]:
    """The scenario's own object names (never in a camera text)."""
    return [n for n in [sit["earlier"]["name"], sit.get("now", {}).get("name"), *sit.get("candidates", [])] if n]


def spec(sk: Skeleton, sit: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """What the request macros read about a scenario (``prompts/scenarios/_requests.jinja``)."""
    s: dict[str, Any] = {
        "change_type": sk.change_type, "target_context": sk.target_context,
        "activity_domain": sk.activity_domain, "time_gap_bucket": sk.time_gap_bucket,
        "cross": sk.change_type == "cross_session_reference", "clarify": sk.target_context == "clarify",
        "abstain": sk.target_context == "abstain", "absent": sk.change_type == "absent_referent",
        "contrast": sk.subset == "contrast", "deictic": sk.deictic,
        "name_both": sk.subset == "contrast" or sk.change_type not in ("absent_referent", "cross_session_reference"),
    }
    if sit is not None:
        gold = situations_of(sk, sit)["gold"]
        s.update(sit=sit, names=referent_names(sit),
                 forbidden=[*gold["current_answers"], *gold["prior_answers"]])
    s.update(extra)
    return s


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def example_prompt(stage: str, ex: dict[str, Any]) -> dict[str, Any]:
    """A stage's one-shot: the example's own spec and its JSON answer."""
    sk = example_skeleton(ex)
    sit = ex["situations"]
    if stage == "situations":
        return {"s": spec(sk), "answer": dumps(sit)}
    if stage == "camera":
        return {"s": spec(sk, sit), "answer": dumps(ex["camera"])}
    if stage == "speech":
        return {"s": spec(sk, sit), "answer": dumps(ex["speech"])}
    return {"s": spec(sk, sit, turn_1_user=ex["speech"]["turn_1_user"]), "answer": dumps(ex["follow_up"])}


@lru_cache(maxsize=1)
def example_shingles() -> dict[str, frozenset[tuple[str, ...]]]:
    """8-word runs of every example text, per stage (echo check)."""
    out: dict[str, set[tuple[str, ...]]] = {"camera": set(), "speech": set()}
    for ex in examples():
        for t in ex["camera"].values():
            out["camera"] |= shingles(t)
        for part in ("speech", "follow_up"):
            for t in ex.get(part, {}).values():
                out["speech"] |= shingles(t)
    return {k: frozenset(v) for k, v in out.items()}


def echo_problems(stage: str, texts: dict[str, str | None]) -> list[Problem]:
    pool = example_shingles()["camera" if stage == "camera" else "speech"]
    out = []
    for f, t in texts.items():
        if not t:
            continue
        if shingles(t) & pool or any(key(t) == key(x) for ex in examples() for part in ("camera", "speech", "follow_up")
                                     for x in ex.get(part, {}).values()):
            out.append(("example_echo", f"{f} copies the one-shot example: {t[:60]!r}"))
    return out


def situation_echo(sit: dict[str, Any]) -> list[Problem]:
    """A situation copied whole (name and every phrase) from an example."""
    known = set()
    for ex in examples():
        for role in ("earlier", "now"):
            x = ex["situations"].get(role)
            if x:
                known.add((key(x["name"]), tuple(sorted(key(t) for t in x["technique"] + x["state"]))))
    out = []
    for role in ("earlier", "now"):
        x = sit.get(role)
        if x and (key(x["name"]), tuple(sorted(key(t) for t in x["technique"] + x["state"]))) in known:
            out.append(("example_echo", f"{role} situation {x['name']!r} is the example's"))
    return out


# --------------------------------------------------------------------------- traces and stages


class StageFailure(Exception):
    """A stage gave nothing usable after its attempts; carries the reject fields."""

    def __init__(self, stage: str, reason: str, detail: str, raw: str | None = None):
        super().__init__(f"{stage}: {reason}: {detail}")
        self.stage, self.reason, self.detail, self.raw = stage, reason, detail, raw


@dataclass
class Trace:
    """Per unit: every rule's results in evaluation order, and generations per stage."""

    evals: dict[str, list[bool]] = field(default_factory=dict)
    attempts: Counter[str] = field(default_factory=Counter)
    llm_errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, stage: str, evaluated: Sequence[str], problems: Sequence[Problem]) -> None:
        failed = {r for r, _ in problems}
        with self.lock:
            for rule in dict.fromkeys(evaluated):
                self.evals.setdefault(f"{stage}.{rule}", []).append(rule not in failed)

    def next_attempt(self, stage: str) -> int:
        with self.lock:
            a = self.attempts[stage]
            self.attempts[stage] += 1
            return a

    def summary(self) -> dict[str, dict[str, Any]]:
        return {k: {"first": v[0], "final": v[-1], "evaluations": len(v)} for k, v in sorted(self.evals.items())}


@dataclass
class Unit:
    """One unit's state through the stages (a scenario, or a contrast pair)."""

    index: int
    members: list[Skeleton]
    trace: Trace = field(default_factory=Trace)
    sit: dict[str, Any] | None = None
    camera: dict[str, Any] | None = None
    speech: dict[str, Any] | None = None
    follow: dict[str, Any] | None = None
    identification: list[dict[str, Any]] = field(default_factory=list)
    leak: list[dict[str, Any]] = field(default_factory=list)
    failure: StageFailure | None = None

    @property
    def lead(self) -> Skeleton:
        return self.members[0]


class Writer:
    """What the stages share for one run: the context, config, the check panel and the counters."""

    def __init__(self, ctx: RunContext, cfg: ScenariosConfig):
        self.ctx, self.cfg = ctx, cfg
        self._panel: list[tuple[str, Any]] | None = None
        self._lock = threading.Lock()
        self.embed_lock = threading.Lock()
        ctx.prompts.hash(VOCABULARY)
        ctx.prompts.hash(EXAMPLES)

    @property
    def panel(self) -> list[tuple[str, Any]]:
        """The model-check models with their labels (loaded on first use)."""
        with self._lock:
            if self._panel is None:
                from generators.nocontext import model_label, unique_labels

                configs = self.cfg.models or [self.cfg.llm]
                labels = self.cfg.labels or unique_labels([model_label(c) for c in configs])
                self._panel = list(zip(labels, [self.ctx.llm_for(c) for c in configs], strict=True))
            return self._panel

    @property
    def labels(self) -> list[str]:
        """The model-check models' labels, when they were loaded."""
        return [label for label, _ in self._panel] if self._panel is not None else []

    def render(self, stage: str, ex: dict[str, Any], s: dict[str, Any]) -> list[dict[str, str]]:
        return self.ctx.prompts.render(f"scenarios/{stage}.jinja", example=example_prompt(stage, ex), s=s)

    def attempts(self, u: Unit, stage: str, messages: list[dict[str, str]], schema: type[BaseModel],
                 max_tokens: int, check: Callable[[dict[str, Any]], tuple[list[str], list[Problem]]],
                 model_check: Callable[[dict[str, Any], int], list[Problem]] | None, budget: int,
                 tidy: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Up to ``budget`` generations of one stage: each is corrected by ``tidy`` where code
        can, then checked by every code rule of the stage (all recorded), then by its model
        check; the first that passes is the stage's output. Raises :class:`StageFailure` with
        the last attempt's first broken rule."""
        last = StageFailure(stage, "no_attempt", "no attempt left")
        for _ in range(budget):
            a = u.trace.next_attempt(stage)
            try:
                draft = self.ctx.llm.structured(messages, schema, seed=self.ctx.seed(u.index, stage, a),
                                                max_tokens=max_tokens)
            except LLMOutputError as e:
                self.ctx.count(f"{stage}.llm_{e.reason}")
                u.trace.llm_errors[stage] += 1
                last = StageFailure(stage, e.reason, e.detail, e.raw)
                continue
            value = draft.model_dump()
            if tidy is not None:
                value = tidy(value)
            evaluated, problems = check(value)
            u.trace.record(stage, evaluated, problems)
            if not problems and model_check is not None and self.cfg.model_checks != "off":
                problems = model_check(value, a)
                if self.cfg.model_checks == "record":
                    problems = []
            if not problems:
                return value
            for rule in dict.fromkeys(r for r, _ in problems):
                self.ctx.count(f"{stage}.{rule}")
            last = StageFailure(stage, problems[0][0], "; ".join(d for _, d in problems[:4]), draft.model_dump_json())
        raise last


def _hygiene(texts: dict[str, str | None]) -> list[Problem]:
    """Each model-written text through the shared text gates first (a referent's name as a name,
    every other text as prose; the reason is the gate's name), then the benchmark's own
    ``empty_text`` / ``repetitive_text``."""
    gates = Gates()
    out: list[Problem] = []
    for f, t in texts.items():
        if t is None:
            continue
        failure = gates.check(t, "name" if f.endswith(".name") else "prose")
        if failure is not None:
            out.append(("text_gates", f"{failure.gate}: {f}: {t[:60]!r} ({failure.detail})"))
        elif why := text_problem(t):
            out.append((why, f"{f}: {t[:60]!r}"))
    return out


HYGIENE = ("text_gates", "empty_text", "repetitive_text", "example_echo")
"""The text rules every stage evaluates: the shared gates (the detail names the gate), then the
benchmark's own."""


def tidy_situations(sit: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Drop gold phrases that cannot tell the two referents apart: a phrase in both situations'
    lists, a phrase equal to a referent's name (its own, the other's, a clarify candidate), and
    a repeat within one situation. Returns the corrected draft and how many were dropped; the
    rules then run on what is left (a list that loses a category fails three_categories)."""
    out = json.loads(json.dumps(sit))
    roles = [r for r in ("earlier", "now") if r in out]
    names = {key(out[r]["name"]) for r in roles} | {key(c) for c in out.get("candidates", [])}

    def phrases(r: str) -> set[str]:
        return {key(x) for x in out[r]["technique"] + out[r]["state"]}

    shared = phrases("earlier") & phrases("now") if len(roles) == 2 else set()
    dropped = 0
    for r in roles:
        seen: set[str] = set()
        for cat in ("technique", "state"):
            kept = []
            for x in out[r][cat]:
                k = key(x)
                if k in shared or k in names or k in seen:
                    dropped += 1
                    continue
                seen.add(k)
                kept.append(x)
            out[r][cat] = kept
    return out, dropped


def check_situations(sk: Skeleton, sit: dict[str, Any]) -> tuple[list[str], list[Problem]]:
    """Stage 1's rules on a situations draft."""
    texts: dict[str, str | None] = {}
    for role in ("earlier", "now"):
        x = sit.get(role)
        if x:
            texts[f"{role}.name"] = x["name"]
            texts.update({f"{role}.technique[{i}]": t for i, t in enumerate(x["technique"])})
            texts.update({f"{role}.state[{i}]": t for i, t in enumerate(x["state"])})
    for k in ("meanwhile", "hidden_detail"):
        if k in sit:
            texts[k] = sit[k]
    for k in ("candidates", "clarify_indicators", "abstain_indicators"):
        texts.update({f"{k}[{i}]": t for i, t in enumerate(sit.get(k) or [])})
    problems = _hygiene(texts) + situation_echo(sit)
    made = situations_of(sk, sit)
    problems += category_problems(made["categories"])
    gold = made["gold"]
    shared = {key(x) for x in gold["current_answers"]} & {key(x) for x in gold["prior_answers"]}
    candidates = {key(c) for c in sit.get("candidates", [])} & {key(x) for x in gold["prior_answers"]}
    if shared or candidates:
        problems.append(("gold_lists_overlap", f"in both lists: {sorted(shared | candidates)[:3]}"))
    evaluated = [*HYGIENE, "three_categories", "gold_lists_overlap"]
    if sk.target_context in ("clarify", "abstain"):
        evaluated.append("indicators_missing")
        lst = f"{sk.target_context}_indicators"
        if len({key(x) for x in gold[lst]}) < 3:
            problems.append(("indicators_missing", f"fewer than 3 distinct {lst}"))
    return evaluated, problems


def camera_fields(sk: Skeleton) -> tuple[str, ...]:
    if sk.subset == "contrast":
        return ("turn_1_image", "turn_2_image", "turn_2_image_b")
    if sk.change_type == "cross_session_reference":
        return ("context_image", "turn_1_image", "turn_2_image")
    return ("turn_1_image", "turn_2_image")


def camera_schema(sk: Skeleton) -> type[BaseModel]:
    if sk.subset == "contrast":
        return ContrastCameraDraft
    return CrossSessionCameraDraft if sk.change_type == "cross_session_reference" else CameraDraft


def check_camera(sk: Skeleton, sit: dict[str, Any], cam: dict[str, Any],
                 avoid: frozenset[str] = frozenset()) -> tuple[list[str], list[Problem]]:
    """Stage 2's rules on camera descriptions; ``avoid``: turn-2 images already in the bank."""
    images = {f: cam.get(f) for f in camera_fields(sk)}
    turn2 = {f: t for f, t in images.items() if f.startswith("turn_2")}
    problems = _hygiene(images) + echo_problems("camera", images)
    problems += object_names_in_camera(images, referent_names(sit))
    problems += camera_evaluates(images)
    problems += camera_refers_back(turn2)
    for f, t in turn2.items():
        if key(t or "") == key(images["turn_1_image"] or ""):
            problems.append(("no_visible_shift", f"{f} is the same text as turn_1_image"))
    if "turn_2_image_b" in images and key(images["turn_2_image_b"] or "") == key(images["turn_2_image"] or ""):
        problems.append(("duplicate_turn_2", "turn_2_image_b is the same text as turn_2_image"))
    for f, t in turn2.items():
        if (t or "").strip().lower() in avoid:
            problems.append(("duplicate_turn_2", f"{f} is identical to another scenario's turn_2_image"))
    evaluated = [*HYGIENE, "object_name_in_camera", "camera_evaluates_technique", "camera_refers_to_turn_1",
                 "no_visible_shift"]
    if avoid or "turn_2_image_b" in images:  # within the pair now; against the bank in resolve()
        evaluated.append("duplicate_turn_2")
    return evaluated, problems


def speech_schema(sk: Skeleton) -> type[BaseModel]:
    return DeicticSpeechDraft if sk.deictic else SpeechDraft


def repair_targets(sk: Skeleton, sit: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """Names the named repair must hold (intended, wrong), or None where the rule does not apply."""
    if sk.target_context not in ("current", "prior"):
        return None
    earlier, now = [sit["earlier"]["name"]], [sit["now"]["name"]]
    intended, wrong = (now, earlier) if sk.target_context == "current" else (earlier, now)
    both = sk.subset == "contrast" or sk.change_type not in ("absent_referent", "cross_session_reference")
    return intended, wrong if both else []


def check_speech(sk: Skeleton, sit: dict[str, Any], sp: dict[str, Any], avoid: frozenset[str] = frozenset(),
                 stage: str = "speech", other_turn_2: str | None = None) -> tuple[list[str], list[Problem]]:
    """Stage 3's rules (and 3b's for a contrast member B: no turn 1 of its own)."""
    gold = situations_of(sk, sit)["gold"]
    fields = [f for f in ("turn_1_user", "turn_2_user", "turn_3_repair_prompt", "turn_3_repair_prompt_deictic") if f in sp]
    texts = {f: sp[f] for f in fields}
    problems = _hygiene(texts) + echo_problems("speech", texts)
    spoken = {f: sp[f] for f in ("turn_1_user", "turn_2_user", "turn_3_repair_prompt_deictic") if f in sp}
    problems += gold_in_speech(spoken, [*gold["current_answers"], *gold["prior_answers"]])
    evaluated = [*HYGIENE, "gold_in_speech", "shift_announced", "speech_not_deictic"]
    problems += shift_announced(sp.get("turn_2_user"))
    problems += not_deictic({f: sp[f] for f in ("turn_1_user", "turn_2_user") if f in sp})
    names = repair_targets(sk, sit)
    if names is not None:
        evaluated.append("repair_not_named")
        problems += repair_names(sp.get("turn_3_repair_prompt"), *names)
    t2 = (sp.get("turn_2_user") or "").strip().lower()
    if avoid or other_turn_2 is not None:  # within the pair now; against the bank in resolve()
        evaluated.append("duplicate_turn_2")
    if t2 in avoid:
        problems.append(("duplicate_turn_2", "turn_2_user is identical to another scenario's"))
    if other_turn_2 is not None and t2 == other_turn_2.strip().lower():
        problems.append(("duplicate_turn_2", "turn_2_user is the same as the pair's other member"))
    return evaluated, problems


# --------------------------------------------------------------------------- model checks


def identify_frames(sk: Skeleton, sit: dict[str, Any]) -> list[tuple[str, str]]:
    """(camera field, gold name) the identification check applies to: every frame that shows its
    referent. Not: a clarify turn 2 (hidden on purpose), an absent or abstain turn 2 (the
    referent is gone)."""
    frames = []
    if sk.change_type == "cross_session_reference":
        frames += [("context_image", sit["earlier"]["name"]), ("turn_1_image", sit["meanwhile"])]
    else:
        frames.append(("turn_1_image", sit["earlier"]["name"]))
    if sk.target_context in ("current", "prior") and sk.change_type != "absent_referent":
        frames.append(("turn_2_image", sit["now"]["name"]))
        if sk.subset == "contrast":
            frames.append(("turn_2_image_b", sit["now"]["name"]))
    return frames


def identification(w: Writer, u: Unit, cam: dict[str, Any], attempt: int) -> list[Problem]:
    """Each model names the thing from each camera text alone; a frame passes when
    ``identify_quorum`` of the models answer within ``identify_min_cosine`` of the gold name.
    Every answer is recorded on the unit."""
    cfg, ctx = w.cfg, w.ctx
    ex = examples()[0]
    shown = {"description": ex["camera"]["turn_2_image"], "answer": dumps({"name": ex["situations"]["now"]["name"]})}
    jobs = [(f, gold, label, llm) for f, gold in identify_frames(u.lead, u.sit or {}) for label, llm in w.panel]

    def ask(job: tuple[str, str, str, Any]) -> str | None:
        f, _, label, llm = job
        messages = ctx.prompts.render("scenarios/identify.jinja", example=shown, description=cam[f])
        try:
            return llm.structured(messages, IdentifyDraft, seed=ctx.seed(u.index, "identify", f, label, attempt),
                                  max_tokens=48).name
        except LLMOutputError as e:
            ctx.count(f"identify.llm_{e.reason}")
            return None

    answers = ctx.map(ask, jobs)
    texts = [t for (_, gold, _, _), a in zip(jobs, answers, strict=True) for t in (a or "", gold)]
    with w.embed_lock:
        vecs = ctx.embedder.encode(texts) if texts else None
    rows, by_frame = [], {}
    for j, ((f, gold, label, _), a) in enumerate(zip(jobs, answers, strict=True)):
        cos = float(vecs[2 * j] @ vecs[2 * j + 1]) if a and vecs is not None else None
        ok = cos is not None and cos >= cfg.identify_min_cosine
        rows.append({"field": f, "gold": gold, "model": label, "answer": a, "cosine": None if cos is None else round(cos, 4),
                     "pass": ok, "attempt": attempt})
        by_frame.setdefault(f, []).append(ok)
    u.identification += rows
    failed = [f for f, oks in by_frame.items() if not (any(oks) if cfg.identify_quorum == "any" else all(oks))]
    problems = [("not_identifiable", f"{f}: " + "; ".join(f"{r['model']} said {r['answer']!r} (cosine {r['cosine']})"
                                                          for r in rows if r["field"] == f and r["attempt"] == attempt))
                for f in failed]
    u.trace.record("camera", ["not_identifiable"], problems)
    return problems


def gold_list_of(target: str) -> str:
    return {"current": "current_answers", "prior": "prior_answers", "clarify": "clarify_indicators",
            "abstain": "abstain_indicators"}[target]


def semantic_leak(w: Writer, u: Unit, member: Skeleton, turn_1_user: str, turn_2_user: str, stage: str,
                  attempt: int) -> list[Problem]:
    """MMStar-style: the candidate's conversation without its camera blocks, to each model
    (greedy); a turn-2 reply that hits the target's gold list (word boundary) leaks."""
    cfg, ctx = w.cfg, w.ctx
    if member.target_context not in cfg.leak_targets:
        return []
    tokens = situations_of(member, u.sit or {})["gold"][gold_list_of(member.target_context)]

    def ask(job: tuple[str, Any]) -> dict[str, Any]:
        label, llm = job
        row: dict[str, Any] = {"member": member.scenario_id, "model": label, "attempt": attempt}
        try:
            first = ctx.prompts.render("scenarios/leak.jinja", turns=[{"user": turn_1_user, "assistant": None}])
            reply_1 = llm.complete(first, seed=ctx.seed(u.index, stage, "leak", label, attempt, 1),
                                   max_tokens=cfg.leak_tokens, temperature=0.0)
            second = ctx.prompts.render("scenarios/leak.jinja", turns=[{"user": turn_1_user, "assistant": reply_1},
                                                                       {"user": turn_2_user, "assistant": None}])
            reply_2 = llm.complete(second, seed=ctx.seed(u.index, stage, "leak", label, attempt, 2),
                                   max_tokens=cfg.leak_tokens, temperature=0.0)
        except LLMOutputError as e:
            ctx.count(f"leak.llm_{e.reason}")
            return {**row, "error": e.detail, "hits": [], "leak": False}
        hits = [t for t in tokens if t.strip() and word_match(t, reply_2)]
        return {**row, "reply_1": reply_1, "reply_2": reply_2, "hits": hits, "leak": bool(hits)}

    rows = ctx.map(ask, w.panel)
    u.leak += rows
    problems = [("semantic_leak", f"{r['model']} answered without the camera and hit {r['hits'][:3]}")
                for r in rows if r["leak"]]
    u.trace.record(stage, ["semantic_leak"], problems)
    return problems


# --------------------------------------------------------------------------- the stages of one unit


def stage_situations(w: Writer, u: Unit) -> None:
    sk = u.lead
    ex = example_for(sk)
    schema = (ClarifySituationsDraft if sk.target_context == "clarify" else
              AbstainSituationsDraft if sk.target_context == "abstain" else
              CrossSessionSituationsDraft if sk.change_type == "cross_session_reference" else SituationsDraft)
    def tidy(d: dict[str, Any]) -> dict[str, Any]:
        out, dropped = tidy_situations(d)
        if dropped:
            w.ctx.count("situations.phrases_dropped", dropped)
        return out

    u.sit = w.attempts(u, "situations", w.render("situations", ex, spec(sk)), schema, w.cfg.situations_tokens,
                       lambda d: check_situations(sk, d), None, w.cfg.stage_attempts, tidy)


def stage_camera(w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None) -> None:
    sk, sit = u.lead, u.sit or {}
    messages = w.render("camera", example_for(sk), spec(sk, sit))
    u.camera = w.attempts(u, "camera", messages, camera_schema(sk), w.cfg.camera_tokens,
                          lambda d: check_camera(sk, sit, d, avoid),
                          lambda d, a: identification(w, u, d, a), budget or w.cfg.stage_attempts)


def stage_speech(w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None) -> None:
    sk, sit = u.lead, u.sit or {}
    messages = w.render("speech", example_for(sk), spec(sk, sit))
    u.speech = w.attempts(u, "speech", messages, speech_schema(sk), w.cfg.speech_tokens,
                          lambda d: check_speech(sk, sit, d, avoid),
                          lambda d, a: semantic_leak(w, u, sk, d["turn_1_user"], d["turn_2_user"], "speech", a),
                          budget or w.cfg.stage_attempts)


def stage_follow_up(w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None) -> None:
    """Contrast member B: its own turn 2 (targeting prior) after the pair's shared turn 1."""
    a_sk, b_sk = u.members
    sit, speech = u.sit or {}, u.speech or {}
    messages = w.render("follow_up", example_for(b_sk), spec(b_sk, sit, turn_1_user=speech["turn_1_user"]))
    u.follow = w.attempts(u, "follow_up", messages, FollowUpDraft, w.cfg.speech_tokens,
                          lambda d: check_speech(b_sk, sit, d, avoid, "follow_up", speech.get("turn_2_user")),
                          lambda d, a: semantic_leak(w, u, b_sk, speech["turn_1_user"], d["turn_2_user"], "follow_up", a),
                          budget or w.cfg.stage_attempts)


def draft_unit(w: Writer, index: int, members: list[Skeleton]) -> Unit:
    """Stages 1-3 of one unit, on their own (no bank state): camera and speech are independent
    given the situations and run concurrently where the backend allows."""
    u = Unit(index, members)
    try:
        stage_situations(w, u)

        def words() -> None:
            stage_speech(w, u)
            if len(members) == 2:
                stage_follow_up(w, u)

        failures = w.ctx.map(lambda f: _catch(f), [lambda: stage_camera(w, u), words])
        u.failure = next((f for f in failures if f is not None), None)
    except StageFailure as e:
        u.failure = e
    return u


def _catch(fn: Callable[[], None]) -> StageFailure | None:
    try:
        fn()
    except StageFailure as e:
        return e
    return None


# --------------------------------------------------------------------------- assembly


def assemble(u: Unit, sk: Skeleton) -> dict[str, Any]:
    """The record of one member, fields in the released order."""
    sit, cam = u.sit or {}, u.camera or {}
    member_b = sk.subset == "contrast" and sk is u.members[1]
    speech = {**(u.speech or {}), **(u.follow or {})} if member_b else (u.speech or {})
    made = situations_of(sk, sit)
    gold = made["gold"]
    if sk.target_context == "clarify":
        more = f"hidden: {' / '.join(sit['candidates'])}"
    elif sk.target_context == "abstain":
        more = f"never shown: {sit['hidden_detail']}"
    elif sk.change_type == "cross_session_reference":
        more = f"turn 1: {sit['meanwhile']}; turn 2: {sit['now']['name']}"
    else:
        more = f"turn 2: {sit['now']['name']}"
    record = {
        "scenario_id": sk.scenario_id, "subset": sk.subset, "pair_id": sk.pair_id,
        "target_context": sk.target_context, "change_type": sk.change_type,
        "activity_domain": sk.activity_domain, "referent_complexity": sk.referent_complexity,
        "difficulty_tier": sk.difficulty_tier, "time_gap_bucket": sk.time_gap_bucket,
        "context_image": cam.get("context_image") if sk.change_type == "cross_session_reference" else None,
        "turn_1_image": cam["turn_1_image"],
        "turn_1_user": speech["turn_1_user"],
        "turn_2_image": cam["turn_2_image_b"] if member_b else cam["turn_2_image"],
        "turn_2_user": speech["turn_2_user"],
        "turn_3_repair_prompt": speech["turn_3_repair_prompt"],
        "turn_3_repair_prompt_deictic": speech.get("turn_3_repair_prompt_deictic") if sk.deictic else None,
        "notes": f"gen scenarios: {sk.change_type} in {sk.activity_domain}, target {sk.target_context}; "
                 f"{'context image' if sk.change_type == 'cross_session_reference' else 'turn 1'}: "
                 f"{sit['earlier']['name']}; {more}.",
        "gold": gold,
    }
    assert tuple(record) == RECORD_FIELDS
    return record


def categories_of(u: Unit, sk: Skeleton) -> dict[str, dict[str, Any]]:
    return situations_of(sk, u.sit or {})["categories"] if u.sit else {}


# --------------------------------------------------------------------------- the bank, in index order


@dataclass
class BankView:
    """The accepted scenarios so far (``existing=`` first): what the bank-level rules see."""

    rows: list[dict[str, Any]]

    def texts(self, f: str) -> frozenset[str]:
        return frozenset((r.get(f) or "").strip().lower() for r in self.rows if r.get(f))


@dataclass
class Outcome:
    unit: Unit
    items: list[ScenarioRecord | Reject]
    checks: list[ScenarioChecks]


def resolve(w: Writer, u: Unit, bank: BankView) -> Outcome:
    """Bank-level rules for one drafted unit against the scenarios accepted before it (a
    duplicate turn-2 text regenerates its stage with the bank known, up to ``stage_attempts``
    more), then the final check of every record (:func:`rule_problems`, :func:`bank_problems`):
    anything that breaks a rule is rejected, never written."""
    if u.failure is None:
        users, images = bank.texts("turn_2_user"), bank.texts("turn_2_image")

        def dup(stage: str, texts: list[str | None], seen: frozenset[str]) -> bool:
            hit = any((t or "").strip().lower() in seen for t in texts)
            u.trace.record(stage, ["duplicate_turn_2"],
                           [("duplicate_turn_2", "identical to an earlier scenario's")] if hit else [])
            return hit

        try:
            cam = u.camera or {}
            if dup("camera", [cam.get("turn_2_image"), cam.get("turn_2_image_b")], images):
                stage_camera(w, u, images)
            if dup("speech", [(u.speech or {}).get("turn_2_user")], users):
                stage_speech(w, u, users)
                if len(u.members) == 2:
                    stage_follow_up(w, u, users)
            elif len(u.members) == 2 and dup("follow_up", [(u.follow or {}).get("turn_2_user")], users):
                stage_follow_up(w, u, users)
        except StageFailure as e:
            u.failure = e
    records: list[dict[str, Any]] = []
    if u.failure is None:
        records = [assemble(u, sk) for sk in u.members]
        final: list[Problem] = []
        for rec, sk in zip(records, u.members, strict=True):
            final += rule_problems(rec, categories=categories_of(u, sk))
        rec_problems = [(r, d) for r, d in final if r in ("schema", "field_presence")]
        u.trace.record("record", ["schema", "field_presence"], rec_problems)
        trial = bank_problems([*bank.rows, *records], signature_limit=w.cfg.signature_limit)
        mine = {r["scenario_id"] for r in records}
        bank_level = [(rule, d) for sid, rule, d in trial if sid in mine or (rule == "signature_limit" and any(
            str(signature(r)) in d for r in records))]
        u.trace.record("record", ["duplicate_id", "signature_limit"],
                       [(r, d) for r, d in bank_level if r in ("duplicate_id", "signature_limit")])
        problems = final + bank_level
        if problems:
            rule, detail = problems[0]
            u.failure = StageFailure("record", rule, "; ".join(d for _, d in problems[:4]))
            w.ctx.count(f"record.{rule}")
    items: list[ScenarioRecord | Reject] = []
    checks = []
    for j, sk in enumerate(u.members):
        base = {"scenario_id": sk.scenario_id, "index": u.index, "skeleton": sk.as_dict(),
                "categories": categories_of(u, sk), "rules": u.trace.summary(),
                "attempts": dict(sorted(u.trace.attempts.items())), "identification": u.identification,
                "leak": [r for r in u.leak if r["member"] == sk.scenario_id]}
        if u.failure is None:
            items.append(ScenarioRecord.model_validate(records[j]))
            checks.append(ScenarioChecks(status="accepted", **base))
        else:
            f = u.failure
            items.append(Reject(record_id=sk.scenario_id, index=u.index, stage=f.stage, reason=f.reason,
                                detail=f"{sk.scenario_id} ({sk.change_type}/{sk.target_context}): {f.detail}", raw=f.raw))
            checks.append(ScenarioChecks(status="rejected", stage=f.stage, reason=f.reason, **base))
    if u.failure is None:
        bank.rows += records
    return Outcome(u, items, checks)


# --------------------------------------------------------------------------- funnel


def funnel(outcomes: list[Outcome], contrast: bool) -> dict[str, Any]:
    """Per rule: units that reached it, passed it on its first evaluation, and passed it in the
    end; per stage: units, generations, first-try passes; outcomes by reason."""
    rows = []
    for stage, rule, what in RULES:
        k = f"{stage}.{rule}"
        evals = [o.unit.trace.evals[k] for o in outcomes if k in o.unit.trace.evals]
        if not evals and stage == "follow_up" and not contrast:
            continue
        rows.append({"stage": stage, "rule": rule, "checks": what, "reached": len(evals),
                     "first_try": sum(e[0] for e in evals), "final": sum(e[-1] for e in evals)})
    stages = {}
    for stage in ("situations", "camera", "speech", *(("follow_up",) if contrast else ())):
        made = [o.unit.trace.attempts[stage] for o in outcomes if o.unit.trace.attempts[stage]]
        first = 0
        for o in outcomes:
            keys = [k for k in o.unit.trace.evals if k.startswith(f"{stage}.")]
            if o.unit.trace.attempts[stage] and keys and o.unit.trace.attempts[stage] == 1 and \
                    (o.unit.failure is None or o.unit.failure.stage != stage):
                first += 1
        stages[stage] = {"units": len(made), "generations": sum(made), "passed_on_first_generation": first,
                         "llm_errors": sum(o.unit.trace.llm_errors[stage] for o in outcomes)}
    reasons = Counter(f"{o.unit.failure.stage}.{o.unit.failure.reason}" for o in outcomes if o.unit.failure)
    return {"unit": "pair" if contrast else "scenario", "units": len(outcomes),
            "accepted_units": sum(o.unit.failure is None for o in outcomes),
            "rules": rows, "stages": stages, "rejected_by": dict(sorted(reasons.items()))}


def print_funnel(f: dict[str, Any], file: Any = None) -> None:
    out = file or sys.stdout
    print(f"[{NAME}] funnel ({f['units']} {f['unit']}s, {f['accepted_units']} accepted): "
          "reached / passed on first try / passed in the end", file=out)
    for r in f["rules"]:
        if r["reached"]:
            print(f"  {r['stage'] + '.' + r['rule']:<38}{r['reached']:>5}{r['first_try']:>6}{r['final']:>6}", file=out)
    for stage, s in f["stages"].items():
        print(f"  {stage}: {s['generations']} generations for {s['units']} {f['unit']}s, "
              f"{s['passed_on_first_generation']} passed on the first", file=out)
    out.flush()


# --------------------------------------------------------------------------- lock and verify

LOCK_KEYS = ("schema_revision", "scenarios_sha256", "prompt_conditions_sha256", "scenario_checks_sha256",
             "judge_prompt_sha256")
"""What ``verify`` checks, one index each (a lock written before gen had a judge holds null there,
and that entry is not checked)."""


def judge_prompt() -> tuple[str, str]:
    """(version, SHA-256) of the context-tracking judge's prompt (``gen judge kind=context``), as the
    benchmark's lock records them: a bank is judged comparably only under the same judge prompt."""
    from generators.judge.context import JUDGE_PROMPT_VERSION, TEMPLATE

    return JUDGE_PROMPT_VERSION, sha256_file(PROMPTS / TEMPLATE)


def scenarios_bytes(records: Sequence[ScenarioRecord]) -> bytes:
    """``scenarios.jsonl`` exactly as the runner writes it (one ``model_dump_json`` a line)."""
    return "".join(r.model_dump_json() + "\n" for r in records).encode("utf-8")


def make_lock(cfg: ScenariosConfig, records: Sequence[ScenarioRecord], checks_sha: str,
              conditions_sha: str | None) -> dict[str, Any]:
    """MANIFEST.lock.json in the benchmark's form, plus gen's own provenance keys."""
    version, sha = judge_prompt()
    return {
        "benchmark_version": cfg.benchmark_version,
        "schema_revision": SCHEMA_REVISION,
        "judge_prompt_version": version,
        "judge_prompt_sha256": sha,
        "scenarios_sha256": hashlib.sha256(scenarios_bytes(records)).hexdigest(),
        "prompt_conditions_sha256": conditions_sha,
        "scenario_checks_sha256": checks_sha,
        "generator": f"gen {NAME} {gen.__version__}",
        "counts": {cfg.subset: len(records)},
    }


def read_lock(folder: Path) -> dict[str, Any]:
    path = folder / LOCK
    if not path.is_file():
        raise InputError(f"input: {folder} holds no {LOCK} (not a scenarios run folder)")
    try:
        lock = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(lock, dict):
        raise InputError(f"{path}:1: expected a JSON object")
    return lock


def lock_check(folder: Path, lock: dict[str, Any], k: str) -> tuple[Any, Any]:
    """(locked, computed) for one lock entry."""
    if k == "schema_revision":
        return lock.get(k), SCHEMA_REVISION
    if k == "judge_prompt_sha256":
        return lock.get(k), None if lock.get(k) is None else judge_prompt()[1]
    name = {"scenarios_sha256": f"{NAME}.jsonl", "prompt_conditions_sha256": PROMPT_CONDITIONS,
            "scenario_checks_sha256": CHECKS_FILE}[k]
    path = folder / name
    if lock.get(k) is None and k == "prompt_conditions_sha256" and not path.exists():
        return None, None
    return lock.get(k), sha256_file(path) if path.is_file() else f"missing {name}"


class LockCheckRecord(BaseModel):
    """One lock entry that matches (a line of ``verify.jsonl``)."""

    key: str
    value: Any
    status: Literal["ok"] = "ok"


def verify(cfg: ScenariosConfig, ctx: RunContext) -> Iterator[LockCheckRecord | Reject]:
    folder, lock = ctx.plan.data
    ctx.records_name = "verify"
    ctx.record_input(folder / LOCK)
    drift: dict[str, str] = {}
    for i, k in zip(ctx.indices(), LOCK_KEYS, strict=True):
        locked, computed = lock_check(folder, lock, k)
        if locked == computed:
            yield LockCheckRecord(key=k, value=locked)
        else:
            drift[k] = f"{k} mismatch: lockfile={locked!r}, computed={computed!r}"
            yield Reject(record_id=k, index=i, stage="verify", reason="drift", detail=drift[k])
    ctx.extra[NAME] = {"action": "verify", "folder": str(folder), "drift": list(drift.values()),
                       "lock_sha256": sha256_file(folder / LOCK)}
    if drift:
        ctx.fail(f"{len(drift)} lock entr{'y' if len(drift) == 1 else 'ies'} drifted: " + "; ".join(drift))
    if cfg.progress != "off":
        for d in drift.values():
            print(f"[{NAME}] DRIFT {d}")
        print(f"[{NAME}] verify {folder}: {'ok' if not drift else f'{len(drift)} drifted'}; "
              f"{len(LOCK_KEYS)} entries checked")


# --------------------------------------------------------------------------- the generator


def write_jsonl(path: Path, rows: Sequence[BaseModel]) -> str:
    atomic_write(path, "".join(r.model_dump_json() + "\n" for r in rows))
    return sha256_file(path)


@generator(NAME, config=ScenariosConfig, plan=plan)
def scenarios(cfg: ScenariosConfig, ctx: RunContext) -> Iterator[Any]:
    """Context-tracking scenarios in the benchmark's released format, checked rule by rule (or verify a run's lock)."""
    if cfg.action == "verify":
        yield from verify(cfg, ctx)
        return
    units, existing = ctx.plan.data
    contrast = cfg.subset == "contrast"
    if cfg.existing is not None:
        path = Path(cfg.existing).expanduser()
        ctx.record_input(path / f"{NAME}.jsonl" if path.is_dir() else path)
    conditions_sha = None
    if cfg.prompt_conditions is not None:
        src = Path(cfg.prompt_conditions).expanduser()
        if not src.is_file():
            raise InputError(f"prompt_conditions: no such file: {src}")
        try:
            json.loads(src.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise InputError(f"{src}:{e.lineno}: not valid JSON ({e.msg})") from None
        ctx.record_input(src)
        shutil.copyfile(src, ctx.out_dir / PROMPT_CONDITIONS)
        conditions_sha = sha256_file(ctx.out_dir / PROMPT_CONDITIONS)
    w = Writer(ctx, cfg)
    bank = BankView(list(existing))
    outcomes: list[Outcome] = []
    indices = list(ctx.indices())
    step = max(1, cfg.llm.concurrency)
    for start in range(0, len(indices), step):
        batch = indices[start:start + step]
        for u in ctx.map(lambda i: draft_unit(w, i, units[i]), batch):
            out = resolve(w, u, bank)
            outcomes.append(out)
            yield out.items if contrast else out.items[0]
    accepted = [it for o in outcomes for it in o.items if isinstance(it, ScenarioRecord)]
    checks_sha = write_jsonl(ctx.out_dir / CHECKS_FILE, [c for o in outcomes for c in o.checks])
    from generators.judge.context import TEMPLATE as JUDGE_TEMPLATE

    ctx.prompts.hash(JUDGE_TEMPLATE)  # the lock names the judge prompt; the manifest lists it too
    lock = make_lock(cfg, accepted, checks_sha, conditions_sha)
    atomic_write(ctx.out_dir / LOCK, json.dumps(lock, indent=2, ensure_ascii=False) + "\n")
    f = funnel(outcomes, contrast)
    skel = [sk for u in units for sk in u]
    ctx.extra[NAME] = {
        "subset": cfg.subset,
        "skeleton": {"scenarios": len(skel),
                     "change_type": dict(Counter(s.change_type for s in skel)),
                     "target_context": dict(Counter(s.target_context for s in skel)),
                     "difficulty_tier": dict(Counter(s.difficulty_tier for s in skel)),
                     "referent_complexity": dict(Counter(s.referent_complexity for s in skel)),
                     "time_gap_bucket": dict(Counter(s.time_gap_bucket for s in skel))},
        "funnel": f,
        "lock": lock,
        "model_checks": {"mode": cfg.model_checks, "models": w.labels,
                         "identify_min_cosine": cfg.identify_min_cosine, "identify_quorum": cfg.identify_quorum,
                         "leak_targets": cfg.leak_targets},
    }
    if cfg.progress != "off":
        print_funnel(f)

