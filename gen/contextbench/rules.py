"""The Wearable Assistant Context Bench's authoring rules, pure: every rule by the stage whose
output it checks (:data:`RULES`), the text and word-pattern checks, :func:`rule_problems` per
scenario and :func:`bank_problems` over a list. They take any scenario dict (gen's or the released
ones): the generator, ``audit``'s scenarios check and ``judge`` use the same functions."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gen.paths import PROMPTS
from gen.schemas.scenarios import ScenarioRecord

VOCABULARY = "scenarios/object_names.txt"

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
        "a name, phrase or indicator fails a shared text gate (gen.gates: echoes, truncation, "
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
        "a description fails a shared text gate (gen.gates: echoes, truncation, repetition, "
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
        "(gen.gates: echoes, truncation, repetition, language)",
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
        "(gen.gates: echoes, truncation, repetition, language)",
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

_DEICTIC = re.compile(
    r"\b(?:this|that|these|those|it|its|here|there|now|one|ones|then|before|earlier|"
    r"ago|previously|back)\b",
    re.I,
)
_ANNOUNCED = re.compile(
    r"\b(?:I(?:'ve| have)?\s+(?:just\s+)?(?:switched|swapped|changed|moved|picked "
    r"up|grabbed|went|walked|"
    r"put (?:it|that|this|the \w+) down)|now I(?:'m| am)|instead|(?:a |the )?new "
    r"(?:one|tool|thing|spot|room|place)|"
    r"(?:a |the )?different (?:one|tool|thing|room|place|screen)|(?:switch|swap)(?:ed)? "
    r"(?:to|over))\b",
    re.I,
)
_REFERS_BACK = re.compile(
    r"\b(?:before|earlier|previous(?:ly)?|prior|formerly|first (?:frame|turn|scene|moment)|turn "
    r"(?:1|one)|"
    r"no longer|any ?more|used to|instead(?: of)?|switch(?:ed|es|ing)?|swap(?:ped|s|ping)?|"
    r"replac(?:ed|es|ing)|changed (?:from|to)|has changed|(?:than|as) it was|"
    r"different (?:tool|object|one|item|thing|room|place|screen) (?:than|from))\b",
    re.I,
)
_EVALUATES = re.compile(
    r"\b(?:correct(?:ly)?|incorrect(?:ly)?|proper(?:ly)?|improper(?:ly)?|right way|wrong(?:ly)?|"
    r"(?:good|bad|poor|great|nice) (?:grip|form|technique|posture|angle|job)|poorly|"
    r"well[- ](?:aligned|positioned|placed|done|held|executed)|perfect(?:ly)?|"
    r"too (?:fast|slow|hard|much|little|tight|loose)|should|needs? to|mistake|nicely|expertly|"
    r"skil(?:l)?ful(?:ly)?|careless(?:ly)?)\b",
    re.I,
)
_PROPERTIES = re.compile(
    r"\b(?:(?:red|blue|green|yellow|black|white|gr[ae]y|brown|orange|purple|pink)(?:dish)?|beige|turquoise|navy|"
    r"maroon|crimson|violet|golden|silvery|"
    r"round|rounded|square|rectangular|circular|cylindrical|triangular|oval|spherical|conical|hexagonal|"
    r"curved|pointy|tubular|dome-shaped|cone-shaped|[a-z]-shaped|"
    r"wooden|metal|metallic|steel|stainless|plastic|ceramic|rubber|rubbery|leather|cardboard|brass|copper|"
    r"alumini?um|porcelain|silicone|wicker|woolen|woollen|denim|velvet|marble|granite|concrete|bamboo|chrome|"
    r"big|bigger|biggest|large|larger|largest|small|smaller|smallest|tiny|huge|giant|enormous|massive|"
    r"miniature|oversized)\b",
    re.I,
)
"""Words that say how something looks (color, shape, material, size), which user turns must not
use. Left out: words a person says about a state or an amount ("long" in "how long", "thick
enough", "smooth", "flat", "little", "light")."""
_FUNCTIONAL = re.compile(
    r"\b(?:[a-z]+ing|kitchen|garden|power|hand|hair|eating|sewing|writing|cleaning) "
    r"(?:tool|device|implement|utensil|instrument|appliance|gadget|apparatus|contraption|aid|accessory)s?\b"
    r"|\b(?:tool|device|implement|utensil|instrument|appliance|gadget|apparatus)s? "
    r"(?:for|used (?:for|to)|meant (?:for|to)|designed (?:for|to)|that (?:is )?used)\b"
    r"|\b(?:used|meant|designed|made) for (?:[a-z]+ing)\b",
    re.I,
)
"""Functional labels in camera text: a thing called by what it is for ("the cutting tool", "a
fastening device", "a kitchen utensil", "a tool for…", "designed for cutting")."""
SPEECH_HOMOGRAPHS = frozenset(
    {
        "saw",
        "level",
        "plane",
        "club",
        "bat",
        "jack",
        "mouse",
        "monitor",
        "speaker",
        "drill",
        "hammer",
        "mop",
        "vacuum",
        "rake",
        "hoe",
        "shovel",
        "spade",
        "whisk",
        "clamp",
        "hose",
        "comb",
        "wheel",
        "tire",
        "phone",
        "ruler",
        "drum",
        "roller",
        "router",
        "feeder",
        "mixer",
        "sponge",
        "timer",
        "marker",
        "bolt",
        "vice",
        "vise",
        "cable",
        "battery",
        "spoon",
        "pen",
        "pot",
        "pan",
        "bottle",
        "jar",
        "fork",
        "bowl",
        "bucket",
        "scraper",
    }
)
"""Vocabulary words with an everyday sense that is no object ("the thing I saw", "is this level",
"phone them", "whisk it in"): in user speech they count as object names only after an article or
a possessive ("the saw", "my phone"). Every other vocabulary word counts anywhere."""
_NAMED = r"\b(?:the|a|an|my|your|our|their|his|her)\s+"
_PLACEHOLDER = re.compile(
    r"^(?:n/?a|none|null|unknown|string|text|name|tbd|\.\.\.|…|-|x|"
    r"(?:turn_\d_(?:image|user)|context_image|turn_3_repair_prompt(?:_deictic)?|"
    r"turn_2_image_b|earlier|now|meanwhile|candidates|hidden_detail))$",
    re.I,
)
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
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    if len(grams) != len(set(grams)) or (len(words) >= 8 and len(set(words)) < len(words) / 2):
        return "repetitive_text"
    return None


def shingles(text: str, size: int = 8) -> set[tuple[str, ...]]:
    words = key(text).split()
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


@lru_cache(maxsize=4)
def load_vocabulary(path: str = str(PROMPTS / VOCABULARY)) -> tuple[str, ...]:
    """The project's object-name vocabulary (one name a line, ``#`` comments), longest first."""
    names = {
        ln.split("#", 1)[0].strip().lower()
        for ln in Path(path).read_text(encoding="utf-8").splitlines()
    }
    return tuple(sorted((n for n in names if n), key=lambda n: (-len(n), n)))


# The pure rule functions. Each returns (rule, detail) pairs; an empty list means it passes.

Problem = tuple[str, str]


def gold_in_speech(
    speech: dict[str, str | None], tokens: Sequence[str], lists: str = "gold"
) -> list[Problem]:
    """The validator's check 1: a gold token in a user-speech field (word boundary)."""
    out = []
    for fname, text in speech.items():
        for tok in tokens:
            if text and tok.strip() and word_match(tok, text):
                out.append(("gold_in_speech", f"{lists} item {tok!r} appears in {fname}"))
    return out


def object_names_in_camera(
    images: dict[str, str | None], names: Sequence[str], vocabulary: Sequence[str] | None = None
) -> list[Problem]:
    """An object name in a camera text: the vocabulary (default: the project's list) plus the
    scenario's own gold object names; word boundary, plural allowed."""
    vocab = load_vocabulary() if vocabulary is None else vocabulary
    wanted = list(
        dict.fromkeys([n.lower().strip() for n in names if n and n.strip()] + list(vocab))
    )
    out = []
    for fname, text in images.items():
        if not text:
            continue
        hits = [n for n in wanted if name_match(n, text)]
        # a longer name that matched covers its parts ("chef's knife" covers "knife")
        hits = [h for h in hits if not any(h != o and name_match(h, o) for o in hits)]
        out += [("object_name_in_camera", f"object name {h!r} in {fname}") for h in hits]
    return out


def object_names_in_speech(
    speech: dict[str, str | None], names: Sequence[str], vocabulary: Sequence[str] | None = None
) -> list[Problem]:
    """An object name in a user turn or the deictic repair: the scenario's own names anywhere,
    the vocabulary (default: the project's list) anywhere too except :data:`SPEECH_HOMOGRAPHS`,
    which count after an article or a possessive; word boundary, plural allowed."""
    vocab = load_vocabulary() if vocabulary is None else vocabulary
    own = list(dict.fromkeys(n.lower().strip() for n in names if n and n.strip()))
    out = []
    for fname, text in speech.items():
        if not text:
            continue
        hits = [n for n in own if name_match(n, text)]
        for n in vocab:
            if n in own:
                continue
            if n in SPEECH_HOMOGRAPHS:
                plural = "(?:es)?" if re.search(r"(?:s|x|z|ch|sh)$", n) else "s?"
                if re.search(_NAMED + re.escape(n) + plural + r"\b", text, re.I):
                    hits.append(n)
            elif name_match(n, text):
                hits.append(n)
        hits = [h for h in hits if not any(h != o and name_match(h, o) for o in hits)]
        out += [("object_name_in_speech", f"object name {h!r} in {fname}") for h in hits]
    return out


def speech_properties(speech: dict[str, str | None]) -> list[Problem]:
    """A user turn that says how something looks (a color, shape, material or size word)."""
    return [
        ("speech_describes_properties", f"{fname}: {m.group(0)!r}")
        for fname, text in speech.items()
        if text
        for m in [_PROPERTIES.search(text)]
        if m
    ]


def camera_functional(images: dict[str, str | None]) -> list[Problem]:
    """A camera text that calls a thing by what it is for."""
    return [
        ("camera_functional_label", f"{fname}: {m.group(0)!r}")
        for fname, text in images.items()
        if text
        for m in [_FUNCTIONAL.search(text)]
        if m
    ]


def camera_evaluates(images: dict[str, str | None]) -> list[Problem]:
    return [
        ("camera_evaluates_technique", f"{fname}: {m.group(0)!r}")
        for fname, text in images.items()
        if text
        for m in [_EVALUATES.search(text)]
        if m
    ]


def camera_refers_back(turn_2_images: dict[str, str | None]) -> list[Problem]:
    return [
        ("camera_refers_to_turn_1", f"{fname}: {m.group(0)!r}")
        for fname, text in turn_2_images.items()
        if text
        for m in [_REFERS_BACK.search(text)]
        if m
    ]


def shift_announced(turn_2_user: str | None) -> list[Problem]:
    m = _ANNOUNCED.search(turn_2_user or "")
    return [("shift_announced", f"turn_2_user: {m.group(0)!r}")] if m else []


def not_deictic(speech: dict[str, str | None]) -> list[Problem]:
    return [
        ("speech_not_deictic", f"{fname} has no deictic or temporal reference: {text!r}")
        for fname, text in speech.items()
        if text and not _DEICTIC.search(text)
    ]


def repair_names(
    repair: str | None, intended: Sequence[str], wrong: Sequence[str]
) -> list[Problem]:
    """The named repair names the intended referent (one of ``intended``) and, when ``wrong`` is
    given, the wrong one."""
    text = repair or ""
    out = []
    if intended and not any(name_match(n, text) for n in intended if n.strip()):
        out.append(("repair_not_named", f"turn_3_repair_prompt names none of {list(intended)[:3]}"))
    if wrong and not any(name_match(n, text) for n in wrong if n.strip()):
        out.append(
            (
                "repair_not_named",
                f"turn_3_repair_prompt names none of the wrong referent's {list(wrong)[:3]}",
            )
        )
    return out


def category_problems(categories: dict[str, dict[str, Any]]) -> list[Problem]:
    """The three-category rule on gold vocabulary by category (``{"name", "technique", "state"}``
    per list)."""
    out = []
    for lst, cats in categories.items():
        items = [cats.get("name") or "", *(cats.get("technique") or []), *(cats.get("state") or [])]
        missing = [
            c
            for c in ("name", "technique", "state")
            if not (cats.get(c) if c == "name" else [x for x in cats.get(c) or [] if x.strip()])
        ]
        if missing:
            out.append(("three_categories", f"{lst} has no {' / '.join(missing)} item"))
        elif len({key(x) for x in items if x.strip()}) < 3:
            out.append(("three_categories", f"{lst} has fewer than 3 distinct items"))
    return out


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
