"""Candidate sets around one annotated positive (EgoIntrospect §3 and its task appendices).

Most EgoIntrospect tasks are a candidate set built around one annotated positive. Three ways
to get the wrong options (``kind=``):

- ``generated``: an LLM writes them from the same segment's context, in the positive's style
  (Memory Recall Prediction, Memory Assistance Recognition – event, Request Prediction stage 2);
  on a timed context each is based on one numbered line (its time becomes the option's source
  time, and the line is hidden from what the candidate sees). The positive may then be reworded
  to the distractors' phrasing (``reword_positive``), kept only when its meaning holds (cosine to
  the original ≥ ``reword_min_similarity``).
- ``label_reason``: every other label of a fixed taxonomy (EgoIntrospect's 9 emotions by default)
  paired with a reason the LLM writes for it from the context and the annotated reason
  (EI-label+reason: a 9-way set).
- ``sampled``: negatives drawn without replacement with a fixed seed from the segment's rejected
  alternatives, then the options shuffled by the same seeded generator (Valuable Interaction
  Identification).

Every wrong option is checked before it is kept (each check counted by name; the dominant one is
the reject reason when regeneration cannot fill the set): distinct options, none near the
positive (cosine ≥ ``max_similarity``) or equal to a context line that names it, none near
another annotated item of the window (collision avoidance), lengths within ``length_ratio`` of
each other, no withheld text (Request Prediction's original request) anywhere the candidate
sees. ``rerank=true`` orders a generated pool with :mod:`generators.rerank`'s pure functions
and the same model, drops semantic duplicates and takes the top wrong options. Options are
shuffled by a seeded RNG per item; the key, each option's origin and source time are recorded.

Input: an items JSONL (:class:`schemas.candidates.CandidateItem`), or narration timelines in the
formats of :mod:`gen.timelines` (the ones ``tom`` reads), cut into memory-recall items (:func:`timeline_items`).
"""

from __future__ import annotations

import random
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from gen.errors import InputError, LLMOutputError
from gen.gates import Gates, content_lemmas, final_mark, with_mark
from gen.gates import key as _key
from gen.run import (
    CommonConfig,
    Plan,
    RunContext,
    derive_seed,
    first_error,
    generator,
    iter_jsonl,
    validated,
)
from gen.timelines import (
    Clip,
    InputFormat,
    Line,
    fmt_line,
    fmt_time,
    input_files,
    read_timelines,
    speaker_of,
)
from gen.timelines import detect_format as timeline_format
from generators import rerank as rr
from generators.tom.forms import PLACEHOLDER
from generators.tom.forms import example_strings as _example_strings
from schemas import Reject
from schemas.candidates import (
    EMOTIONS,
    CandidateItem,
    CandidateRecord,
    Negative,
    Other,
    Positive,
    RestyleDraft,
    RewordDraft,
    TimedLine,
    Window,
    plain_draft,
    reasons_draft,
)

NAME = "candidates"
Kind = Literal["generated", "label_reason", "sampled"]
STEPS = ("items in", "input checks", "distractors", "rerank", "records")
"""Funnel steps an item passes in order (``rerank`` passes through when rerank=false)."""


class CandidatesConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Items to build from the start of the input; null = every item."""
    kind: Kind = "generated"
    """generated (LLM-written distractors) | label_reason (one reason per other taxonomy label) | sampled (from the item's negatives)."""
    input_format: Literal["auto", "items", "ego4d", "egotom_csv", "timelines"] = "auto"
    """items: a candidate-items JSONL; ego4d / egotom_csv / timelines: narration timelines (gen.timelines, as tom reads them), cut into memory-recall items (auto: by name and first row)."""
    k: int | None = Field(None, ge=2, le=26)
    """Options per item (null: 4; for label_reason the taxonomy's size, 9)."""
    taxonomy: list[str] = Field(default_factory=lambda: list(EMOTIONS))
    """label_reason: the fixed label set (default EgoIntrospect's 9 emotions); an item's label must be one of them."""
    reword_positive: bool = True
    """Reword the positive to the distractors' phrasing (generated, label_reason); kept only when its meaning holds."""
    reword_min_similarity: float = Field(0.8, gt=0, le=1)
    """Cosine between the reworded and the original positive at or above which the rewording keeps its meaning."""
    max_similarity: float = Field(0.85, gt=0, le=1)
    """A wrong option at or above this cosine to the positive, to another annotated item (collision) or to a kept wrong option is turned away (below the audit's 0.90 answer_close_sim)."""
    length_ratio: float | None = Field(1.4, gt=1)
    """Every two options' lengths within this ratio (EgoToM's 1.4 rule, applied pairwise); null: off."""
    length_unit: Literal["chars", "words"] = "chars"
    """What the length rule measures."""
    cite_sources: bool = True
    """generated on a timed context: code picks a line per wrong option and the LLM rewrites it in the positive's style (the line's time is the option's source time; the line is hidden from the candidate)."""
    source_min_similarity: float | None = Field(0.4, gt=0, le=1)
    """A sourced wrong option below this cosine to its line is not based on it (turned away as ungrounded_source); null: off."""
    attempts: int = Field(3, ge=1, le=10)
    """LLM calls per stage (distractors, rewording) when the output fails code's checks."""
    rerank: bool = False
    """generated: rerank the pool (positive + wrong options) with one checked structured call; semantic duplicates dropped, the top wrong options kept."""
    rerank_spares: int = Field(2, ge=0, le=20)
    """rerank=true: wrong options generated beyond k-1 for the reranker to choose from."""
    rerank_attempts: int = Field(3, ge=1, le=10)
    """rerank=true: calls until the answer is an exact permutation of the pool."""
    draft_tokens: int = Field(320, ge=32)
    """Completion cap of a distractor or reasons call."""
    reword_tokens: int = Field(96, ge=16)
    """Completion cap of the rewording call."""
    rerank_tokens: int = Field(1024, ge=64)
    """Completion cap of the rerank call."""
    window: float = Field(60.0, gt=0)
    """Timelines: seconds of narration around each positive that make its window (its context)."""
    per_clip: int = Field(2, ge=1)
    """Timelines: positives (annotated items) picked per clip; the others in a positive's window are its collision set."""
    spacing: float = Field(15.0, ge=0)
    """Timelines: at least this many seconds between two positives of a clip."""
    min_side_lines: int = Field(2, ge=0)
    """Timelines: a positive needs this many window lines before it and after it."""
    question_template: str = "What did C do at {time}?"
    """Timelines: the question; {time} is the positive's time (MMm:SSs from the clip start)."""
    passes: list[str] = Field(default_factory=lambda: ["narration_pass_1", "narration_pass_2"], min_length=1)
    """Timelines in Ego4D's narration.json: the passes to read."""

    @field_validator("taxonomy")
    @classmethod
    def _labels(cls, v: list[str]) -> list[str]:
        labels = [x.strip() for x in v]
        if len(labels) < 2 or any(not x for x in labels) or len(set(labels)) != len(labels):
            raise ValueError("taxonomy needs at least two distinct, non-empty labels")
        return labels

    @field_validator("question_template")
    @classmethod
    def _template(cls, v: str) -> str:
        try:
            v.format(time="00m:00s")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"question_template may only use {{time}} ({e})") from None
        return v

    @model_validator(mode="after")
    def _kinds(self) -> CandidatesConfig:
        if self.kind == "label_reason" and self.k is not None and self.k > len(self.taxonomy):
            raise ValueError(f"k={self.k} is more than the taxonomy's {len(self.taxonomy)} labels")
        if self.rerank and self.kind != "generated":
            raise ValueError("rerank=true reranks generated pools: it needs kind=generated")
        return self

    @property
    def options(self) -> int:
        """Options per item."""
        if self.k is not None:
            return self.k
        return len(self.taxonomy) if self.kind == "label_reason" else 4


# --------------------------------------------------------------------------- input


@dataclass
class Inputs:
    items: list[CandidateItem]
    files: list[Path]
    fmt: str
    timeline: dict[str, Any] | None = None
    """Timelines: clips read, items cut, and what was skipped by reason (clips: malformed,
    no_eligible_positive; positives: unusable_positive)."""


def plan(cfg: CandidatesConfig) -> Plan:
    """One index per item: every item of the input, or the first ``n``."""
    data = read_input(cfg)
    return Plan(len(data.items) if cfg.n is None else min(cfg.n, len(data.items)), data)


def detect_format(path: Path) -> str:
    """``items`` for a JSONL whose first row has ``item_id``; else a timeline format (:mod:`gen.timelines`)."""
    if path.is_file() and path.suffix.lower() == ".jsonl":
        for _, row in iter_jsonl(path):
            return "timelines" if isinstance(row, dict) and "clip_id" in row and "item_id" not in row else "items"
        raise InputError(f"{path}: empty file (expected candidate items or timelines, one JSON object per line)")
    fmt = timeline_format(path)
    return "timelines" if fmt == "jsonl" else fmt


def read_input(cfg: CandidatesConfig) -> Inputs:
    path = cfg.input_path()
    assert path is not None
    fmt = detect_format(path) if cfg.input_format == "auto" else cfg.input_format
    if fmt == "items":
        if path.is_dir():
            raise InputError(f"input: {path} is a folder; input_format=items reads one JSONL file")
        return Inputs(read_items(path), [path], fmt)
    tfmt: InputFormat = "jsonl" if fmt == "timelines" else fmt  # type: ignore[assignment]
    clips = read_timelines(path, tfmt, tuple(cfg.passes))
    items, summary = timeline_items(clips, cfg)
    if not items:
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(summary["skipped"].items())) or "none"
        raise InputError(f"input: {path}: no memory-recall item could be cut from its {len(clips)} clips "
                         f"(skipped: {skipped})")
    return Inputs(items, input_files(path, tfmt), fmt, summary)


def read_items(path: Path) -> list[CandidateItem]:
    """Candidate items JSONL; a bad line is an InputError ``file:line: field: reason``; item ids unique."""
    items: list[CandidateItem] = []
    seen: dict[str, int] = {}
    for lineno, row in iter_jsonl(path):
        where = f"{path}:{lineno}"
        item = validated(CandidateItem, row, where)
        if item.item_id in seen:
            raise InputError(f"{where}: item_id: {item.item_id!r} repeats line {seen[item.item_id]}")
        seen[item.item_id] = lineno
        ids = [n.id for n in item.negatives]
        dup = next((i for i in ids if ids.count(i) > 1), None)
        if dup is not None:
            raise InputError(f"{where}: negatives: id {dup!r} is given twice")
        items.append(item)
    if not items:
        raise InputError(f"{path}: no items (one JSON object per line: item_id, task, question, positive, context…)")
    return items


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


def timeline_items(clips: list[Clip], cfg: CandidatesConfig) -> tuple[list[CandidateItem], dict[str, Any]]:
    """Memory-recall items from narration timelines. Per clip, up to ``per_clip`` positives are
    picked (seeded, ``spacing`` apart) among the lines about C whose text occurs once in the clip
    (so the question has one answer, and no other item of the clip shows it in its context) and
    that have ``min_side_lines`` window lines on each side. Each positive's window
    is its context; the other positives in it are its collision set (``others``); the window's
    lines about C whose text occurs once and is no annotated item are its ``negatives`` (sampled
    kind) and its ``sources``, the lines a generated wrong option may be based on (the question
    asks what C did: a line about someone else would be an easy wrong option)."""
    items: list[CandidateItem] = []
    skipped: Counter[str] = Counter()
    details: list[str] = []
    half = cfg.window / 2
    for clip in clips:
        if clip.problems:
            skipped["malformed"] += 1
            details.append(clip.problems[0])
            continue
        lines = clip.lines
        keys = [key(ln.text) for ln in lines]

        def window(t: float, lines: list[Any] = lines) -> list[int]:
            return [j for j, ln in enumerate(lines) if t - half <= ln.t <= t + half]

        eligible = []
        for i, ln in enumerate(lines):
            if ln.speaker != "C" or not keys[i].removeprefix("c").strip():
                continue
            w = window(ln.t)
            before = sum(lines[j].t < ln.t for j in w)
            after = sum(lines[j].t > ln.t for j in w)
            if before >= cfg.min_side_lines and after >= cfg.min_side_lines and keys.count(keys[i]) == 1:
                eligible.append(i)
        if not eligible:
            skipped["no_eligible_positive"] += 1
            continue
        rng = random.Random(derive_seed(cfg.seed, NAME, "timeline", clip.clip_id))
        rng.shuffle(eligible)
        picked: list[int] = []
        for i in eligible:
            if len(picked) >= cfg.per_clip:
                break
            if all(abs(lines[i].t - lines[p].t) >= cfg.spacing for p in picked):
                picked.append(i)
        for i in sorted(picked, key=lambda j: (lines[j].t, j)):
            w = window(lines[i].t)
            others = [p for p in picked if p != i and p in w]
            annotated = {keys[p] for p in [i, *others]}
            negatives = [j for j in w if j != i and j not in others and keys[j] not in annotated
                         and lines[j].speaker == "C" and sum(keys[x] == keys[j] for x in w) == 1
                         and keys[j].removeprefix("c").strip()]
            t = lines[i].t
            try:
                items.append(CandidateItem(
                    item_id=f"{clip.clip_id}#L{i + 1}", task="memory_recall",
                    question=cfg.question_template.format(time=fmt_time(t)),
                    positive=Positive(text=narration_text(lines[i].text), time=t, id=f"L{i + 1}"),
                    context=[TimedLine(t=lines[j].t, text=lines[j].text) for j in w],
                    window=Window(start=lines[w[0]].t, end=lines[w[-1]].t),
                    others=[Other(text=narration_text(lines[p].text), time=lines[p].t, id=f"L{p + 1}") for p in others],
                    negatives=[Negative(id=f"L{j + 1}", text=narration_text(lines[j].text), time=lines[j].t)
                               for j in negatives],
                    sources=[w.index(j) for j in negatives],
                    group=clip.clip_id,
                ))
            except ValidationError as e:  # a narration too long for an option, a time out of range
                field, msg = first_error(e)
                skipped["unusable_positive"] += 1
                details.append(f"{clip.source}: line {i + 1}: {field}: {msg}")
    return items, {"clips": len(clips), "items": len(items), "skipped": dict(sorted(skipped.items())),
                   "skipped_examples": details[:5]}


# --------------------------------------------------------------------------- options and checks


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
    choice-only classifier reads (Ego4D's narrations often end bare, a model's rewrites with a period)."""
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


_EMBED_LOCK = threading.Lock()


class Vectors:
    """Unit vectors of texts under the run's embedder, each text encoded once per item."""

    def __init__(self, embedder: Any):
        self.embedder = embedder
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if new:
            with _EMBED_LOCK:
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

    def size(self, text: str) -> int:
        return len(text) if self.cfg.length_unit == "chars" else len(text.split())

    def off_subject(self, text: str) -> bool:
        """The positive is a narration about the camera wearer (``C takes …``) and ``text`` is not:
        who acts is code's to keep, and an option about someone else is eliminated on its face."""
        return self.cfg.kind != "label_reason" and bool(_SUBJECT.match(self.positive.text)) \
            and not _SUBJECT.match(text)


def borrowed_words(text: str, donors: list[str], own: str) -> list[str]:
    """Content words (lemmas) of ``text`` that one of ``donors`` has and ``own`` (what it was written
    from) lacks. A distractor rewritten from its moment that takes the positive's words (``C places
    sticks on pan`` -> ``… on paper``, paper from the positive) is no longer its moment and sits
    closer to the answer: each such option makes the positive the one most like the others, a tell
    (on a 154-record run, 18 % of sourced distractors did, and "pick the option sharing most words
    with the others" was right 35 % of the time, chance 25 %). The camera wearer's tag C is no word."""
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
    and the options kept so far; a failure turns that option away (counted by reason), not the item."""

    def __init__(self, setup: Setup, room: int, count: Callable[[str], None]):
        self.s, self.room, self.count = setup, room, count
        self.items: list[Option] = []
        self.turned: Counter[str] = Counter()
        self.rejected: list[str] = []

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
                return "near_duplicate", f"cosine {float(c.max()):.3f} to {self.items[int(c.argmax())].core!r}"
        if o.line is not None and (borrowed := borrowed_words(o.core, [s.positive.core], narration_text(s.lines[o.line].text))):
            return "borrowed", f"takes {', '.join(borrowed)} from the positive, not from its line"
        if o.line is not None and cfg.source_min_similarity is not None:
            src = narration_text(s.lines[o.line].text)
            c = float(sim(o.core, [src])[0])
            if c < cfg.source_min_similarity:
                return "ungrounded_source", f"cosine {c:.3f} to its line {src!r}"
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
        return (f"{len(self.items)} usable of {need}; turned away: "
                + (", ".join(f"{k}={v}" for k, v in self.turned.most_common()) or "none")
                + (f"; last: {'; '.join(self.rejected[-3:])}" if self.rejected else ""))


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
        return ("near_positive" if 0 in (i, j) else "near_duplicate"), f"cosine {float(sims.max()):.3f}"
    return None


# --------------------------------------------------------------------------- one item


class ItemFailure(Exception):
    def __init__(self, step: str, stage: str, reason: str, detail: str, raw: str | None = None):
        super().__init__(f"{stage}: {reason}: {detail}")
        self.step, self.stage, self.reason, self.detail, self.raw = step, stage, reason, detail, raw


@dataclass
class ItemResult:
    out: CandidateRecord | Reject
    reached: int
    """Funnel steps passed (len(STEPS) = a record)."""
    agreement: dict[str, int] = field(default_factory=dict)


def positive_option(item: CandidateItem, kind: Kind) -> Option:
    p = item.positive
    if kind == "label_reason":
        assert p.label is not None and p.reason is not None
        return Option(option_text(p.label, p.reason), p.reason, "positive", p.time, label=p.label)
    text = p.text if p.text is not None else option_text(p.label, p.reason or "")
    return Option(text, text, "positive", p.time)


def input_problem(item: CandidateItem, cfg: CandidatesConfig) -> tuple[str, str] | None:
    """Item-level problems no regeneration fixes."""
    p = item.positive
    if cfg.kind == "label_reason":
        if p.label is None or p.reason is None:
            return "no_label_reason", "label_reason needs a positive with label and reason"
        if p.label not in cfg.taxonomy:
            return "label_not_in_taxonomy", f"{p.label!r} is not one of {cfg.taxonomy}"
    q = _key(item.question)
    for w in item.withhold:
        if has_phrase(_key(w), q):
            return "withheld_visible", f"the question holds the withheld text {w!r}"
        if isinstance(item.context, str) and has_phrase(_key(w), _key(item.context)):
            return "withheld_visible", f"the context holds the withheld text {w!r}"
    core = p.reason if cfg.kind == "label_reason" else (p.text or p.reason)
    if isinstance(item.context, str) and core and has_phrase(_key(core), _key(item.context)):
        return "positive_in_context", "the free-text context states the positive"
    return None


def prompt_lines(lines: list[TimedLine], numbered: bool) -> list[str]:
    return [f"{i + 1}. {fmt_time(x.t)} | {x.text}" if numbered else f"{fmt_time(x.t)} | {x.text}"
            for i, x in enumerate(lines)]


def _llm(ctx: RunContext, msgs: list[dict[str, str]], schema: Any, seed: int, max_tokens: int,
         stage: str, errors: list[LLMOutputError]) -> Any:
    try:
        return ctx.llm.structured(msgs, schema, seed=seed, max_tokens=max_tokens)
    except LLMOutputError as e:
        ctx.count(f"{stage}.llm_{e.reason}")
        errors.append(e)
        return None


def source_order(s: Setup, seed: int) -> list[int]:
    """The lines a generated option is based on, in the order they are tried: a seeded shuffle of
    the allowed lines, those whose length is within ``length_ratio`` of the positive first."""
    order = list(s.allowed)
    random.Random(seed).shuffle(order)
    size = s.size(s.positive.text)
    fits = [j for j in order if length_problem([size, s.size(narration_text(s.lines[j].text))],
                                               s.cfg.length_ratio) is None]
    return fits + [j for j in order if j not in fits]


def generate(ctx: RunContext, cfg: CandidatesConfig, index: int, item: CandidateItem, s: Setup,
             room: int) -> Pool:
    """Generated wrong options. On a timed context (``cite_sources``) code picks the moments and
    one call each rewrites a moment in the positive's style (at most ``attempts`` x room moments
    tried); otherwise one call writes the missing options from the whole context, ``attempts``
    times at most."""
    pool = Pool(s, room, ctx.count)
    errors: list[LLMOutputError] = []
    pool.llm_errors = errors  # type: ignore[attr-defined]
    if cfg.cite_sources and s.lines:
        for j in source_order(s, ctx.seed(index, "sources"))[:cfg.attempts * room]:
            if pool.full:
                break
            msgs = ctx.prompts.render("candidates/restyle.jinja", positive=s.positive.text,
                                      line=prompt_lines(s.lines, False)[j])
            s.examples |= _example_strings(msgs)
            draft = _llm(ctx, msgs, RestyleDraft, ctx.seed(index, "distractor", j), cfg.draft_tokens, "distractors", errors)
            if draft is not None:
                text = clean(draft.text)
                pool.offer(Option(text, text, "generated", s.lines[j].t, line=j))
        return pool
    for a in range(cfg.attempts):
        if pool.full:
            break
        need = room - len(pool.items)
        msgs = ctx.prompts.render(
            "candidates/generated.jinja", lines=prompt_lines(s.lines, False), question=item.question,
            text=item.context if isinstance(item.context, str) else "", positive=s.positive.text,
            others=s.others, need=need)
        s.examples |= _example_strings(msgs)
        draft = _llm(ctx, msgs, plain_draft(need), ctx.seed(index, "distractors", a), cfg.draft_tokens,
                     "distractors", errors)
        for d in draft.distractors if draft is not None else []:
            text = clean(d)
            pool.offer(Option(text, text, "generated"))
    return pool


def label_reasons(ctx: RunContext, cfg: CandidatesConfig, index: int, item: CandidateItem, s: Setup) -> Pool:
    p = item.positive
    others = [x for x in cfg.taxonomy if x != p.label]
    if cfg.options - 1 < len(others):  # a smaller set: the other labels sampled with the item's seed
        others = sorted(random.Random(ctx.seed(index, "labels")).sample(others, cfg.options - 1), key=cfg.taxonomy.index)
    pool = Pool(s, len(others), ctx.count)
    errors: list[LLMOutputError] = []
    for a in range(cfg.attempts):
        missing = [x for x in others if x not in {o.label for o in pool.items}]
        if not missing:
            break
        msgs = ctx.prompts.render("candidates/label_reason.jinja", lines=prompt_lines(s.lines, False),
                                  text=item.context if isinstance(item.context, str) else "",
                                  label=p.label, reason=p.reason, labels=missing)
        s.examples |= _example_strings(msgs)
        draft = _llm(ctx, msgs, reasons_draft(tuple(missing)), ctx.seed(index, "reasons", a), cfg.draft_tokens,
                     "reasons", errors)
        if draft is None:
            continue
        for j, label in enumerate(missing):
            reason = clean(getattr(draft, f"l{j}"))
            pool.offer(Option(option_text(label, reason), reason, "generated", label=label))
    pool.items.sort(key=lambda o: cfg.taxonomy.index(o.label or ""))
    pool.llm_errors = errors  # type: ignore[attr-defined]
    return pool


def sample(ctx: RunContext, item: CandidateItem, s: Setup, room: int, rng: random.Random) -> Pool:
    """Negatives drawn without replacement in the seeded order, each checked; those sharing an
    id with the positive or an annotated item never enter the draw."""
    pool = Pool(s, room, ctx.count)
    banned = {x for x in [item.positive.id, *(o.id for o in item.others)] if x is not None}
    draw = [n for n in item.negatives if n.id not in banned]
    if len(draw) < len(item.negatives):
        ctx.count("sampled.annotated_id_excluded", len(item.negatives) - len(draw))
    for j in rng.sample(range(len(draw)), len(draw)):
        if pool.full:
            break
        n = draw[j]
        pool.offer(Option(n.text, n.text, f"sampled:{n.id}", n.time))
    pool.llm_errors = []  # type: ignore[attr-defined]
    return pool


def reword(ctx: RunContext, cfg: CandidatesConfig, index: int, s: Setup, chosen: list[Option]) -> tuple[Option, float | None]:
    """The positive reworded to the distractors' phrasing when the rewording keeps its meaning and
    the set still passes every rule; else the original (counted why)."""
    pos = s.positive
    msgs = ctx.prompts.render("candidates/reword.jinja", positive=pos.core, others=[o.core for o in chosen])
    s.examples |= _example_strings(msgs)
    errors: list[LLMOutputError] = []
    for a in range(cfg.attempts):
        draft = _llm(ctx, msgs, RewordDraft, ctx.seed(index, "reword", a), cfg.reword_tokens, "reword", errors)
        if draft is None:
            continue
        core = clean(draft.text)
        why = text_problem(core, s.examples)
        if why is None and _key(core) == _key(pos.core):
            ctx.count("reword.unchanged")
            return pos, 1.0
        if why is None and borrowed_words(core, [o.core for o in chosen], pos.core):
            why = "borrowed"  # pulled toward the distractors: the positive would be the one most like them
        sim = float(s.vectors.sim(core, [pos.core])[0]) if why is None else 0.0
        if why is None and sim < cfg.reword_min_similarity:
            why = "meaning_changed"
        new = Option(surface(option_text(pos.label, core), pos.text), core, "positive", pos.time, label=pos.label)
        if why is None:
            p = set_problem(s, [new, *chosen])
            why = p[0] if p else None
        if why is None:
            ctx.count("reword.accepted")
            return new, round(sim, 4)
        ctx.count(f"reword.{why}")
    ctx.count("reword.kept_original")
    return pos, None


def hidden_lines(s: Setup, item: CandidateItem, options: list[Option]) -> set[int]:
    """Context lines the candidate must not see: lines naming the positive or holding a withheld
    text, the lines options were based on, lines equal to an option, and the lines of the other
    annotated items (each is the answer of its own item: shown here, it would leak across items)."""
    keys = {_key(o.core) for o in options} | {_key(o.text) for o in options} | {_key(o) for o in s.others}
    out = set()
    for j, ln in enumerate(s.lines):
        k = key(ln.text)
        if k in s.named or k in keys or any(has_phrase(_key(w), _key(ln.text)) for w in item.withhold):
            out.add(j)
    return out | {o.line for o in options if o.line is not None}


def setup(ctx: RunContext, cfg: CandidatesConfig, item: CandidateItem, vectors: Vectors) -> Setup:
    pos = positive_option(item, cfg.kind)
    pos = replace(pos, text=surface(pos.text, pos.text))
    lines = item.lines
    pk = _key(pos.core)
    named: set[str] = set()
    if lines:
        lk = [key(x.text) for x in lines]
        sims = vectors.sim(pos.core, [narration_text(x.text) for x in lines])
        named = {k for k, c in zip(lk, sims, strict=True) if k == pk or has_phrase(pk, k) or c >= cfg.max_similarity}
    others = [o.text for o in item.others]
    other_keys = {_key(o) for o in others}
    counts = Counter(key(x.text) for x in lines)
    repeated = near_repeats([narration_text(x.text) for x in lines], vectors, cfg.max_similarity)
    allowed = [j for j, x in enumerate(lines) if key(x.text) not in named and key(x.text) not in other_keys
               and counts[key(x.text)] == 1 and j not in repeated
               and not any(has_phrase(_key(w), _key(x.text)) for w in item.withhold)
               and (item.sources is None or j in item.sources)]
    return Setup(cfg, pos, others, named, list(item.withhold), vectors, set(), lines, allowed)


def near_repeats(texts: list[str], vectors: Vectors, threshold: float) -> set[int]:
    """Lines with another line at or above ``threshold`` cosine: a wrong option based on one would
    stay visible in its near-twin, and a candidate could eliminate it."""
    if len(texts) < 2:
        return set()
    v = vectors(texts)
    sims = v @ v.T
    np.fill_diagonal(sims, -1)
    return {j for j in range(len(texts)) if float(sims[j].max()) >= threshold}


def process(ctx: RunContext, cfg: CandidatesConfig, index: int, item: CandidateItem) -> ItemResult:
    """One item through every step: a record, or a reject naming the step and the reason."""
    k = cfg.options
    record_id = ctx.record_id(index)

    def reject(step: str, stage: str, reason: str, detail: str, raw: str | None = None) -> ItemResult:
        return ItemResult(Reject(record_id=record_id, index=index, stage=stage, reason=reason,
                                 detail=f"item {item.item_id}: {detail}", raw=raw), STEPS.index(step))

    problem = input_problem(item, cfg)
    if problem:
        return reject("input checks", "input", *problem)
    vectors = Vectors(ctx.embedder)
    s = setup(ctx, cfg, item, vectors)
    annotated = positive_option(item, cfg.kind).text
    if s.positive.text != annotated:
        ctx.count("surface.changed")
    if cfg.kind == "generated" and cfg.cite_sources and s.lines and len(s.allowed) < k - 1:
        return reject("input checks", "input", "too_few_sources",
                      f"{len(s.allowed)} context lines a wrong option may be based on, need {k - 1}")
    shuffle_seed = ctx.seed(index, "sample" if cfg.kind == "sampled" else "shuffle")
    rng = random.Random(shuffle_seed)
    room = k - 1 + (cfg.rerank_spares if cfg.rerank else 0)
    if cfg.kind == "generated":
        pool = generate(ctx, cfg, index, item, s, room)
    elif cfg.kind == "label_reason":
        pool = label_reasons(ctx, cfg, index, item, s)
    else:
        pool = sample(ctx, item, s, room, rng)
    need = k - 1
    if len(pool.items) < need:
        errors = pool.llm_errors  # type: ignore[attr-defined]
        fallback = errors[-1].reason if errors else ("too_few_negatives" if cfg.kind == "sampled" else "too_few_distractors")
        return reject("distractors", cfg.kind, pool.reason(fallback), pool.detail(need), errors[-1].raw if errors else None)
    chosen = pool.items[:need]
    rerank_info: dict[str, Any] | None = None
    agreement: dict[str, int] = {}
    if cfg.rerank:
        texts = [s.positive.text, *(o.text for o in pool.items)]
        try:
            draft, calls = rr.call(ctx.llm, ctx.prompts, rr.render_context(item.context), texts,
                                   seed=lambda a: ctx.seed(index, "rerank", a), attempts=cfg.rerank_attempts,
                                   max_tokens=cfg.rerank_tokens, count=ctx.count)
        except rr.RerankFailure as e:
            return reject("rerank", "rerank", e.reason, f"{e.detail} (after {e.attempts} calls)", e.raw)
        res = rr.resolve(draft, len(texts), protect=0, count=ctx.count)
        keep = [i for i in res.kept if i != 0]
        if len(keep) < need:
            return reject("rerank", "rerank", "too_few_after_dedup",
                          f"{len(keep)} wrong options left after removing {len(res.removed)} duplicates, need {need}")
        chosen = [pool.items[i - 1] for i in keep[:need]]
        ctx.count("rerank.ungrounded_used", sum(not res.grounded[i] for i in keep[:need]))
        emb = [(a, b) for a, b in rr.embedding_pairs(ctx.embedder, texts, cfg.max_similarity)]
        agreement = rr.agreement(len(texts), res.groups, emb)
        names = ["positive", *(f"d{j + 1}" for j in range(len(pool.items)))]
        rerank_info = {"pool": names, "order": [names[i] for i in res.order],
                       "removed": [[names[i], names[j]] for i, j in res.removed],
                       "ungrounded": [names[i] for i, g in enumerate(res.grounded) if not g],
                       "reason": draft.reason, "calls": calls,
                       "embedding_duplicates": [[names[a], names[b]] for a, b in emb], "agreement": agreement}
    positive, sim = s.positive, None
    if cfg.reword_positive and cfg.kind != "sampled":
        positive, sim = reword(ctx, cfg, index, s, chosen)
    options = [positive, *chosen]
    order = list(range(len(options)))
    rng.shuffle(order)
    hide = hidden_lines(s, item, [s.positive, *options])
    shown = [options[i] for i in order]
    visible: dict[str, Any] = {"context": "\n".join(fmt_line_of(x) for j, x in enumerate(s.lines) if j not in hide)
                               if s.lines else (item.context if isinstance(item.context, str) else "")}
    privileged: dict[str, Any] = {
        "positive": annotated,
        "option_times": {str(j): o.time for j, o in enumerate(shown) if o.time is not None},
        "sources": {str(j): fmt_line_of(s.lines[o.line]) for j, o in enumerate(shown) if o.line is not None},
    }
    if item.withhold:
        privileged["withheld"] = list(item.withhold)
    rec = CandidateRecord(
        item_id=record_id, question_type=item.task, question=item.question, options=[o.text for o in shown],
        answer=order.index(0), origins=[o.origin for o in shown], group=item.group or item.item_id,
        visible=visible, privileged=privileged, source_item=item.item_id, kind=cfg.kind,
        reworded=positive is not s.positive, reword_similarity=sim,
        window=item.window.model_dump() if item.window else None, others=[o.text for o in item.others],
        shuffle_seed=shuffle_seed, rerank=rerank_info)
    return ItemResult(rec, len(STEPS), agreement)


def fmt_line_of(x: TimedLine) -> str:
    """A context line as the candidate sees it (EgoToM's ``    MMm:SSs | text``)."""
    return fmt_line(Line(x.t, x.text, "?"))


# --------------------------------------------------------------------------- the generator


def funnel_rows(reached: list[int], rerank: bool) -> list[dict[str, Any]]:
    return [{"step": step, "items": sum(r > i for r in reached)} for i, step in enumerate(STEPS)
            if rerank or step != "rerank"]


def print_funnel(rows: list[dict[str, Any]], file: Any = None) -> None:
    out = file or sys.stdout
    print("[candidates] funnel (items that passed each step)", file=out)
    for r in rows:
        print(f"  {r['step']:<16}{r['items']:>6}", file=out)
    out.flush()


def merge_shards(ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]) -> None:
    """``merge``: the funnel and the rerank agreement of all shards (counts add up)."""
    funnels = [m[NAME]["funnel"] for m in manifests]
    agree: Counter[str] = Counter()
    for m in manifests:
        agree.update({k: v for k, v in m[NAME]["rerank_agreement"].items()
                      if k in ("both", "llm_only", "embedding_only", "neither") and isinstance(v, int)})
    first = manifests[0][NAME]
    ctx.extra[NAME] = {**first,
                       "funnel": [{"step": r["step"], "items": sum(f[i]["items"] for f in funnels)}
                                  for i, r in enumerate(funnels[0])],
                       "rerank_agreement": rr.agreement_summary(agree)}


@generator(NAME, config=CandidatesConfig, plan=plan, merge=merge_shards)
def candidates(cfg: CandidatesConfig, ctx: RunContext) -> Iterator[CandidateRecord | Reject]:
    """Candidate sets around an annotated positive: generated, label+reason or sampled wrong options (input=items|timelines)."""
    data: Inputs = ctx.plan.data
    for f in data.files:
        ctx.record_input(f)
    reached: list[int] = []
    agree: Counter[str] = Counter()
    indices = list(ctx.indices())
    step = max(1, cfg.llm.concurrency)
    for start in range(0, len(indices), step):
        for res in ctx.map(lambda i: process(ctx, cfg, i, data.items[i]), indices[start:start + step]):
            reached.append(res.reached)
            agree.update(res.agreement)
            yield res.out
    rows = funnel_rows(reached, cfg.rerank)
    ctx.extra[NAME] = {"funnel": rows, "input_format": data.fmt, "options": cfg.options,
                       "rerank_agreement": rr.agreement_summary(agree), "timeline": data.timeline}
    if cfg.progress != "off":
        print_funnel(rows)
