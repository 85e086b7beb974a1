"""The context bench's text and word-pattern checks, pure: object names and gold tokens in
speech and camera texts (the benchmark's own word-boundary match, plurals, the vocabulary and its
homographs), placeholder and repetitive texts, the word patterns of the authoring rules
(properties, functional labels, evaluations, references back, announced shifts, deixis) and the
three-category rule. :mod:`gen.contextbench.rules` applies them per scenario."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from gen.paths import PROMPTS

VOCABULARY = "scenarios/object_names.txt"

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
