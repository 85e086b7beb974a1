"""The options of one item and their checks, pure (no model): what a narration reads as an option
(:func:`narration_text`) and the comparison :func:`key`, an option's shown surface
(:func:`surface`, :func:`clean`), the item's vectors (:class:`Vectors`), what one item's checks
compare against (:class:`Setup`), the wrong options gathered and checked one by one
(:class:`Pool`) and the whole set checked at once (:func:`set_problem`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.formats.timelines import speaker_of
from gen.llm.attempts import AttemptFailure
from gen.schemas.candidates import TimedLine
from gen.text.gates import Gates, content_lemmas, final_mark, with_mark
from gen.text.gates import key as _key
from gen.text.statements import PLACEHOLDER

if TYPE_CHECKING:
    from gen.generators.candidates import CandidatesConfig

# --------------------------------------------------------------------------- options and checks


_TAG = re.compile(r"^.{0,2}?#[\s$]*[A-Za-z]+\s*")


def narration_text(text: str) -> str:
    """A narration as an option reads: the tag dropped (``#C C opens …`` -> ``C opens …``),
    trailing dashes and spaces gone."""
    who = speaker_of(text)
    rest = _TAG.sub("", text, count=1).strip().rstrip(" -").strip()
    if who == "C" and not re.match(r"^c\b", rest, re.I):
        rest = f"C {rest}"
    return rest[:1].upper() + rest[1:]


def key(text: str) -> str:
    """Comparison key: narration tags dropped, case, punctuation and spacing ignored."""
    return _key(narration_text(text)) if "#" in text[:4] else _key(text)


@dataclass
class Option:
    text: str
    """As shown: the text, or ``Label: reason``."""
    core: str
    """What similarity is measured on: the text, or the reason."""
    origin: str
    time: float | None = None
    line: int | None = None
    """0-based index of the context line it is based on (generated, sourced)."""
    label: str | None = None


def option_text(label: str | None, reason: str) -> str:
    return f"{label}: {reason}" if label is not None else reason


def surface(text: str, like: str) -> str:
    """``text`` in the surface of ``like`` (the positive): its final mark (a period when it has
    none) and, when it starts in upper case, an upper-case first letter. One surface for an item's
    options: a mark or a case that only the answer has, or only the distractors, is a tell a
    choice-only classifier reads (Ego4D's narrations often end bare, a model's rewrites with a
    period)."""
    out = with_mark(text, final_mark(like) or ".")
    if like[:1].isupper() and out[:1].islower():
        out = out[0].upper() + out[1:]
    return out


def clean(text: str) -> str:
    """A generated option's surface: quotes, a copied ``N.`` number or ``MMm:SSs |`` time and a
    narration tag dropped, whitespace collapsed."""
    text = " ".join(text.split()).strip()
    text = re.sub(r"^\d{1,3}[.)]\s+", "", text)
    text = re.sub(r"^\d{1,3}m:\d{2}s\s*\|\s*", "", text).strip().strip("\"'`").strip()
    if text.startswith("#"):
        text = narration_text(text)
    return text


class Vectors:
    """Unit vectors of texts under the run's embedder, each text encoded once per item."""

    def __init__(self, embedder: Any):
        self.embedder = embedder
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if new:
            vecs = self.embedder.encode(new)
            self.cache.update(zip(new, vecs, strict=True))
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, 1))

    def sim(self, a: str, others: list[str]) -> np.ndarray:
        """Cosine of ``a`` to each of ``others``."""
        if not others:
            return np.zeros(0)
        v = self([a, *others])
        return v[1:] @ v[0]


def text_problem(text: str, examples: set[str]) -> str | None:
    """Why an option's text is unusable: the shared text gates of free prose (echoes of a prompt's
    one-shot answers or template, truncation, repetition, another language; the reason is the
    gate's name), then empty or a placeholder."""
    failure = Gates(examples=examples).check(text, "prose")
    if failure is not None:
        return failure.gate
    core = re.sub(r"^(?:to|c believes that|c)\s+", "", _key(text))
    return "empty_text" if not core or PLACEHOLDER.match(core) else None


def has_phrase(needle: str, hay: str) -> bool:
    """``needle`` on word boundaries in ``hay`` (both :func:`key`-ed)."""
    return bool(needle) and f" {needle} " in f" {hay} "


_SUBJECT = re.compile(r"^C\b")


@dataclass
class Setup:
    """What one item's checks compare against."""

    cfg: CandidatesConfig
    positive: Option
    others: list[str]
    """The window's other annotated items (texts)."""
    named: set[str]
    """Keys of the context lines that name the positive."""
    withhold: list[str]
    vectors: Vectors
    examples: set[str]
    lines: list[TimedLine]
    allowed: list[int]
    """0-based context lines a generated option may be based on."""
    annotated: str = ""
    """The positive's text as annotated, before it took the item's surface."""
    groups: dict[int, int] = field(default_factory=dict)
    """Line -> its source group (the item's ``source_groups``): one option per group."""

    def size(self, text: str) -> int:
        return len(text) if self.cfg.length_unit == "chars" else len(text.split())

    def off_subject(self, text: str) -> bool:
        """The positive is a narration about the camera wearer (``C takes …``) and ``text`` is not:
        who acts is code's to keep, and an option about someone else is eliminated on its face."""
        return (
            self.cfg.kind != "label_reason"
            and bool(_SUBJECT.match(self.positive.text))
            and not _SUBJECT.match(text)
        )


def borrowed_words(text: str, donors: list[str], own: str) -> list[str]:
    """Content words (lemmas) of ``text`` that one of ``donors`` has and ``own`` (what it was
    written from) lacks. A distractor rewritten from its moment that takes the positive's words (``C
    places sticks on pan`` -> ``… on paper``, paper from the positive) is no longer its moment and
    sits closer to the answer: each such option makes the positive the one most like the others, a
    tell (on a 154-record run, 18 % of sourced distractors did, and "pick the option sharing most
    words with the others" was right 35 % of the time, chance 25 %). The camera wearer's tag C is no
    word."""
    theirs = set().union(*(content_lemmas(d) for d in donors)) if donors else set()
    return sorted((content_lemmas(text) & theirs) - content_lemmas(own) - {"c"})


def length_problem(sizes: list[int], ratio: float | None) -> str | None:
    """``length_ratio`` when the longest of ``sizes`` is more than ``ratio`` times the shortest."""
    if ratio is None or len(sizes) < 2:
        return None
    return "length_ratio" if max(sizes) > ratio * max(1, min(sizes)) else None


class Pool:
    """The usable wrong options of one item, gathered across attempts: each is checked against
    the positive, the collision set, the context lines naming the positive, the withheld texts
    and the options kept so far; a failure turns that option away (counted by reason), not the
    item."""

    def __init__(self, setup: Setup, room: int, count: Callable[[str], None]):
        self.s, self.room, self.count = setup, room, count
        self.items: list[Option] = []
        self.turned: Counter[str] = Counter()
        self.rejected: list[str] = []
        self.llm_errors: list[AttemptFailure] = []
        """The model's failed calls while the pool was filled (the last one names a reject)."""

    @property
    def full(self) -> bool:
        return len(self.items) >= self.room

    def problem(self, o: Option) -> tuple[str, str] | None:
        """Why ``o`` cannot join the pool (reason, detail), or None."""
        s, cfg = self.s, self.s.cfg
        k = _key(o.core)
        why = text_problem(o.core, s.examples)
        if why:
            return why, ""
        if s.off_subject(o.text):
            return "subject", "does not start with C as the positive does"
        if any(has_phrase(_key(w), _key(o.text)) for w in s.withhold):
            return "withheld", "holds a withheld text"
        if k == _key(s.positive.core):
            return "same_as_positive", ""
        if k in s.named or _key(o.text) in s.named:
            return "names_positive", "equals a context line that names the positive"
        if k in {_key(x) for x in s.others}:
            return "collision", "equals another annotated item of the window"
        if k in {_key(x.core) for x in self.items}:
            return "duplicate", ""
        g = s.groups.get(o.line) if o.line is not None else None
        if g is not None and any(
            x.line is not None and s.groups.get(x.line) == g for x in self.items
        ):
            return "same_source_group", "another option is based on a line of the same group"
        sizes = [s.size(x.text) for x in (s.positive, *self.items, o)]
        if length_problem(sizes, cfg.length_ratio):
            return "length_ratio", f"{s.size(o.text)} {cfg.length_unit} against {sizes[:-1]}"
        sim = s.vectors.sim
        to_pos = float(sim(o.core, [s.positive.core])[0])
        if to_pos >= cfg.max_similarity:
            return "near_positive", f"cosine {to_pos:.3f} to the positive"
        if s.others:
            c = sim(o.core, s.others)
            if float(c.max()) >= cfg.max_similarity:
                return "collision", f"cosine {float(c.max()):.3f} to {s.others[int(c.argmax())]!r}"
        if self.items:
            c = sim(o.core, [x.core for x in self.items])
            if float(c.max()) >= cfg.max_similarity:
                return (
                    "near_duplicate",
                    f"cosine {float(c.max()):.3f} to {self.items[int(c.argmax())].core!r}",
                )
        src = narration_text(s.lines[o.line].text) if o.line is not None else None
        if src is not None and (borrowed := borrowed_words(o.core, [s.positive.core], src)):
            return "borrowed", f"takes {', '.join(borrowed)} from the positive, not from its line"
        if src is not None and cfg.source_min_similarity is not None:
            to_src = float(sim(o.core, [src])[0])
            if to_src < cfg.source_min_similarity:
                return "ungrounded_source", f"cosine {to_src:.3f} to its line {src!r}"
        return None

    def offer(self, o: Option) -> bool:
        if self.full:
            return False
        shown = surface(o.text, self.s.positive.text)
        if shown != o.text:
            self.count("surface.changed")
            o = replace(o, text=shown)
        p = self.problem(o)
        if p is not None:
            self.count(f"turned_away.{p[0]}")
            self.turned[p[0]] += 1
            self.rejected.append(f"{p[0]}: {o.text!r}{' (' + p[1] + ')' if p[1] else ''}")
            return False
        self.items.append(o)
        return True

    def reason(self, fallback: str) -> str:
        """The item's reject reason when the pool stays short: the check that turned most away."""
        return self.turned.most_common(1)[0][0] if self.turned else fallback

    def detail(self, need: int) -> str:
        return (
            f"{len(self.items)} usable of {need}; turned away: "
            + (", ".join(f"{k}={v}" for k, v in self.turned.most_common()) or "none")
            + (f"; last: {'; '.join(self.rejected[-3:])}" if self.rejected else "")
        )


def set_problem(s: Setup, options: list[Option]) -> tuple[str, str] | None:
    """The whole set (positive first) against every rule; used on a reworded positive."""
    cfg = s.cfg
    keys = [_key(o.core) for o in options]
    if len(set(keys)) != len(keys):
        return "duplicate", "two options are the same text"
    if any(s.off_subject(o.text) for o in options):
        return "subject", "an option does not start with C as the positive does"
    if any(has_phrase(_key(w), _key(o.text)) for w in s.withhold for o in options):
        return "withheld", "an option holds a withheld text"
    if length_problem([s.size(o.text) for o in options], cfg.length_ratio):
        return "length_ratio", f"lengths {[s.size(o.text) for o in options]} {cfg.length_unit}"
    v = s.vectors([o.core for o in options])
    sims = v @ v.T
    np.fill_diagonal(sims, -1)
    if float(sims.max()) >= cfg.max_similarity:
        i, j = np.unravel_index(int(sims.argmax()), sims.shape)
        return (
            "near_positive" if 0 in (i, j) else "near_duplicate"
        ), f"cosine {float(sims.max()):.3f}"
    return None
