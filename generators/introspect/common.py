"""What every task family of ``introspect`` shares: an item made by code (:class:`Draft`) or
refused (:class:`Refusal`), the input reader, a clip's visible text, and seeded shuffles."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from gen.engine.runner import derive_seed
from gen.errors import InputError
from gen.formats.mcq import Positions, arrange
from gen.formats.timelines import fmt_time
from gen.intervals import Interval
from gen.readers import iter_jsonl, validated
from gen.schemas.introspect import Line
from gen.text.gates import key
from gen.text.words import content_words

NAME = "introspect"
M = TypeVar("M", bound=BaseModel)


@dataclass
class Draft:
    """One question as code built it (everything of the record but its id)."""

    question_type: str
    question: str
    options: list[str]
    answer: int
    source: str
    group: str
    origins: list[str] | None = None
    visible: dict[str, Any] = field(default_factory=dict)
    privileged: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    """Other record fields (``answers``, ``acceptable``, ``window``, ``shuffle_seed``)."""
    prompt: tuple[str, dict[str, Any]] | None = None
    """The paper's own prompt for the item: a template under prompts/ and its variables (the
    record holds it rendered)."""


@dataclass
class Refusal:
    """An annotation that yields no question, with a typed reason (a reject row)."""

    source: str
    stage: str
    reason: str
    detail: str


Built = Draft | Refusal


def read_lines(path: Path, model: type[M], key: str) -> list[M]:
    """A JSONL of ``model`` rows; a bad line is an InputError ``file:line: field: reason``, and the
    ``key`` field's values are unique."""
    rows: list[M] = []
    seen: dict[str, int] = {}
    for lineno, row in iter_jsonl(path):
        where = f"{path}:{lineno}"
        item = validated(model, row, where)
        value = str(getattr(item, key))
        if value in seen:
            raise InputError(f"{where}: {key}: {value!r} repeats line {seen[value]}")
        seen[value] = lineno
        rows.append(item)
    if not rows:
        raise InputError(
            f"{path}: no rows (one JSON object per line; see the task's schema in "
            "schemas/introspect.py)"
        )
    return rows


def unique_ids(ids: Sequence[str], where: str, what: str) -> None:
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup is not None:
        raise InputError(f"{where}: {what} {dup!r} is given twice")


def names(label: str, text: str) -> bool:
    """``text`` names ``label`` (its words in a row, case and punctuation ignored)."""
    k = key(label)
    return bool(k) and f" {k} " in f" {key(text)} "


def _fold(word: str) -> str:
    """A word's comparison form: a plural's final ``s`` dropped (``novels`` -> ``novel``)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def mentions(label: str, text: str) -> bool:
    """``text`` mentions ``label``: each content word of the label, singular or plural, is a word
    of ``text`` in any order ("a table of new novels" mentions "novels table"; "a guidebook about
    Lisbon" mentions "Lisbon guidebook"). Looser than :func:`names`, so an option the context
    describes in other words still counts as shown."""
    want = {_fold(w) for w in content_words(label)}
    return bool(want) and want <= {_fold(w) for w in content_words(text)}


def clip_text(
    lines: Sequence[Line],
    span: Interval,
    *,
    audio: bool = True,
    relative: bool = True,
    hide: Sequence[str] = (),
) -> str:
    """A clip as the candidate reads it: its lines as ``MMm:SSs | text`` (time from the clip's
    start when ``relative``), speech lines left out when the clip has no audio, and lines naming
    one of ``hide`` left out (every option alike, so no option is the one the clip mentions)."""
    start, stop = span
    out = []
    for x in lines:
        if (
            start <= x.t <= stop
            and (audio or not x.speech)
            and not any(names(h, x.text) for h in hide)
        ):
            out.append(f"{fmt_time(x.t - start if relative else x.t)} | {x.text}")
    return "\n".join(out)


def rng_for(seed: int, *parts: object) -> tuple[random.Random, int]:
    """A seeded generator for one question (and its seed, recorded to replay the shuffle)."""
    s = derive_seed(seed, NAME, *parts)
    return random.Random(s), s


def positions(seed: int) -> Positions:
    """Balanced answer positions for one build's questions, counted per question type and option
    count in build order (the plan builds every question, so shards and resumes agree)."""
    return Positions(derive_seed(seed, NAME, "positions"))


def shuffled(
    options: list[str],
    origins: list[str],
    rng: random.Random,
    places: Positions,
    question_type: str,
) -> tuple[list[str], list[str], int]:
    """The options in a seeded order (the first given is the answer): options, origins, answer.
    The answer's position is the next balanced one of ``question_type``; the others are
    shuffled by ``rng``."""
    order = arrange(len(options), places.take(question_type, len(options)), rng)
    return [options[i] for i in order], [origins[i] for i in order], order.index(0)


def fmt_span(span: Interval) -> str:
    return f"{fmt_time(span[0])}-{fmt_time(span[1])}"
