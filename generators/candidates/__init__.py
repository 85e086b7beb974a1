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
  alternatives, then the wrong options shuffled by the same seeded generator (Valuable Interaction
  Identification).

Every wrong option is checked before it is kept (each check counted by name; the dominant one is
the reject reason when regeneration cannot fill the set): distinct options, none near the
positive (cosine ≥ ``max_similarity``) or equal to a context line that names it, none near
another annotated item of the window (collision avoidance), lengths within ``length_ratio`` of
each other, no withheld text (Request Prediction's original request) anywhere the candidate
sees. ``rerank=true`` orders a generated pool with :mod:`generators.rerank`'s pure functions
and the same model, drops semantic duplicates and takes the top wrong options. The answer's
position is balanced over the input's items of each task (:class:`gen.formats.mcq.Positions`), the
wrong options are shuffled by a seeded RNG per item; the key, each option's origin and source
time are recorded.

Input: an items JSONL (:class:`schemas.candidates.CandidateItem`), recall annotations
(:class:`schemas.candidates.RecallSession`: Memory Recall Prediction items, one per vivid detail
in its 3-minute clip, :mod:`.recall`), or narration timelines in the formats of
:mod:`gen.formats.timelines` (the ones ``tom`` reads), cut into temporal-grounding items
(:func:`timeline_items`).

The package: :mod:`.checks` (the options and their checks, pure: no model; also how a narration
reads as an option, :func:`narration_text`, and the comparison :func:`key`), :mod:`.item` (one
item through every step: the wrong options generated, written per label or sampled, the rerank,
the rewording, the hidden lines and the record, :func:`process`); this module holds the config,
the input, the funnel and the generator.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext, derive_seed
from gen.engine.stages import StageConfig, StagesConfig
from gen.errors import InputError
from gen.formats import ranking as rr
from gen.formats.mcq import Positions
from gen.formats.timelines import Clip, InputFormat, fmt_time, input_files, read_timelines
from gen.formats.timelines import detect_format as timeline_format
from gen.generators.candidates.checks import key, narration_text
from gen.generators.candidates.item import STEPS, process
from gen.generators.candidates.recall import RECALL_KEYS, read_recall, recall_items
from gen.readers import first_error, iter_jsonl, validated
from gen.schemas import Reject
from gen.schemas.candidates import (
    EMOTIONS,
    CandidateItem,
    CandidateRecord,
    Negative,
    Other,
    Positive,
    TimedLine,
    Window,
)

NAME = "candidates"
Kind = Literal["generated", "label_reason", "sampled"]


class CandidatesStages(StagesConfig):
    writer: StageConfig = Field(default_factory=StageConfig)
    """The wrong options: distractors, restyled lines or reasons (``stages.writer.llm=…``)."""
    rewording: StageConfig = Field(default_factory=StageConfig)
    """The positive reworded to the distractors' phrasing."""
    rerank: StageConfig = Field(default_factory=StageConfig)
    """rerank=true: the pool's ranking."""


class CandidatesConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Items to build from the start of the input; null = every item."""
    kind: Kind = "generated"
    """generated (LLM-written distractors) | label_reason (one reason per other taxonomy label) |
    sampled (from the item's negatives)."""
    input_format: Literal["auto", "items", "recall", "ego4d", "egotom_csv", "timelines"] = "auto"
    """items: a candidate-items JSONL; recall: recall annotations (Memory Recall Prediction items,
    one per vivid detail); ego4d / egotom_csv / timelines: narration timelines
    (gen.formats.timelines, as
    tom reads them), cut into temporal-grounding items (auto: by name and first row)."""
    k: int | None = Field(None, ge=2, le=26)
    """Options per item (null: 4; for label_reason the taxonomy's size, 9)."""
    taxonomy: list[str] = Field(default_factory=lambda: list(EMOTIONS))
    """label_reason: the fixed label set (default EgoIntrospect's 9 emotions); an item's label must
    be one of them."""
    reword_positive: bool = True
    """Reword the positive to the distractors' phrasing (generated, label_reason); kept only when
    its meaning holds."""
    reword_min_similarity: float = Field(0.8, gt=0, le=1)
    """Cosine between the reworded and the original positive at or above which the rewording keeps
    its meaning."""
    max_similarity: float = Field(0.85, gt=0, le=1)
    """A wrong option at or above this cosine to the positive, to another annotated item (collision)
    or to a kept wrong option is turned away (below the audit's 0.90 answer_close_sim)."""
    length_ratio: float | None = Field(1.4, gt=1)
    """Every two options' lengths within this ratio (EgoToM's 1.4 rule, applied pairwise); null:
    off."""
    length_unit: Literal["chars", "words"] = "chars"
    """What the length rule measures."""
    cite_sources: bool = True
    """generated on a timed context: code picks a line per wrong option and the LLM rewrites it in
    the positive's style (the line's time is the option's source time; the line is hidden from the
    candidate)."""
    source_min_similarity: float | None = Field(0.4, gt=0, le=1)
    """A sourced wrong option below this cosine to its line is not based on it (turned away as
    ungrounded_source); null: off."""
    attempts: int = Field(3, ge=1, le=10)
    """LLM calls per stage (distractors, rewording) when the output fails code's checks."""
    rerank: bool = False
    """generated: rerank the pool (positive + wrong options) with one checked structured call;
    semantic duplicates dropped, the top wrong options kept."""
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
    confirm_similarity: float = Field(0.75, ge=0, le=1)
    """rerank=true: a duplicate the reranker calls is removed only when the embedder puts the two
    options at or above this cosine (as ``rerank``'s); 0 = every call."""
    stages: CandidatesStages = Field(default_factory=CandidatesStages)
    """A model per stage: ``stages.<writer|rewording|rerank>.llm=<preset or fields>``."""
    window: float = Field(60.0, gt=0)
    """Timelines: seconds of narration around each positive that make its window (its context)."""
    per_clip: int = Field(2, ge=1)
    """Timelines: positives (annotated items) picked per clip; the others in a positive's window are
    its collision set."""
    spacing: float | None = Field(None, ge=0)
    """Timelines: at least this many seconds between two positives of a clip; null: far enough apart
    that their windows share no line, so no line one item hides (its answer, its wrong options'
    sources) is shown in another's context."""
    min_side_lines: int = Field(2, ge=0)
    """Timelines: a positive needs this many window lines before it and after it."""
    clip: float = Field(180.0, gt=0)
    """Recall annotations: seconds of the clip centred on each vivid detail (EgoIntrospect J.1: 3
    minutes)."""
    recall_gap: float = Field(8.0, ge=0)
    """Recall annotations: timeline lines this close (seconds) to a recalled detail are its moment:
    hidden, never a wrong option's source."""
    recall_question: str = (
        "Which detail of this moment is the user most likely to recall vividly afterwards?"
    )
    """Recall annotations: the question of every Memory Recall Prediction item."""
    question_template: str = "What did C do at {time}?"
    """Timelines: the question; {time} is the positive's time (MMm:SSs from the clip start)."""
    passes: list[str] = Field(
        default_factory=lambda: ["narration_pass_1", "narration_pass_2"], min_length=1
    )
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
    no_eligible_positive; positives: unusable_positive). Recall annotations: sessions, details,
    items, and details skipped by reason (no_clip_lines, unusable_detail)."""


def plan(cfg: CandidatesConfig) -> Plan:
    """One index per item: every item of the input, or the first ``n``."""
    data = read_input(cfg)
    return Plan(len(data.items) if cfg.n is None else min(cfg.n, len(data.items)), data)


Format = Literal["items", "recall", "timelines", "ego4d", "egotom_csv"]


def detect_format(path: Path) -> Format:
    """``items`` for a JSONL whose first row has ``item_id``, ``recall`` for one whose first row
    has ``session_id`` and ``details``; else a timeline format (:mod:`gen.formats.timelines`)."""
    if path.is_file() and path.suffix.lower() == ".jsonl":
        for _, row in iter_jsonl(path):
            if (
                isinstance(row, dict)
                and all(k in row for k in RECALL_KEYS)
                and "item_id" not in row
            ):
                return "recall"
            return (
                "timelines"
                if isinstance(row, dict) and "clip_id" in row and "item_id" not in row
                else "items"
            )
        raise InputError(
            f"{path}: empty file (expected candidate items or timelines, one JSON object per line)"
        )
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
    if fmt == "recall":
        if path.is_dir():
            raise InputError(f"input: {path} is a folder; input_format=recall reads one JSONL file")
        items, summary = recall_items(read_recall(path), cfg)
        if not items:
            raise InputError(f"input: {path}: no vivid detail has a timeline line in its clip")
        return Inputs(items, [path], fmt, summary)
    tfmt: InputFormat = "jsonl" if fmt == "timelines" else fmt
    clips = read_timelines(path, tfmt, tuple(cfg.passes))
    items, summary = timeline_items(clips, cfg)
    if not items:
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(summary["skipped"].items())) or "none"
        raise InputError(
            f"input: {path}: no temporal-grounding item could be cut from its {len(clips)} clips "
            f"(skipped: {skipped})"
        )
    return Inputs(items, input_files(path, tfmt), fmt, summary)


def read_items(path: Path) -> list[CandidateItem]:
    """Candidate items JSONL; a bad line is an InputError ``file:line: field: reason``; item ids
    unique."""
    items: list[CandidateItem] = []
    seen: dict[str, int] = {}
    for lineno, row in iter_jsonl(path):
        where = f"{path}:{lineno}"
        item = validated(CandidateItem, row, where)
        if item.item_id in seen:
            raise InputError(
                f"{where}: item_id: {item.item_id!r} repeats line {seen[item.item_id]}"
            )
        seen[item.item_id] = lineno
        ids = [n.id for n in item.negatives]
        dup = next((i for i in ids if ids.count(i) > 1), None)
        if dup is not None:
            raise InputError(f"{where}: negatives: id {dup!r} is given twice")
        items.append(item)
    if not items:
        raise InputError(
            f"{path}: no items (one JSON object per line: item_id, task, question, positive, "
            "context…)"
        )
    return items


def timeline_items(
    clips: list[Clip], cfg: CandidatesConfig
) -> tuple[list[CandidateItem], dict[str, Any]]:
    """Temporal-grounding items from narration timelines ("what did C do at T", over a window:
    not EgoIntrospect's Memory Recall Prediction, which asks which detail the user recalls and
    needs recall annotations, ``input_format=recall``). Per clip, up to ``per_clip`` positives are
    picked (seeded; their windows share no line, or ``spacing`` seconds apart) among the lines
    about C whose text occurs once in the clip
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
        wins: dict[int, list[int]] = {}  # an eligible line's window, computed once
        for i, ln in enumerate(lines):
            if ln.speaker != "C" or not keys[i].removeprefix("c").strip():
                continue
            w = wins[i] = window(ln.t)
            before = sum(lines[j].t < ln.t for j in w)
            after = sum(lines[j].t > ln.t for j in w)
            if (
                before >= cfg.min_side_lines
                and after >= cfg.min_side_lines
                and keys.count(keys[i]) == 1
            ):
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
            if cfg.spacing is None:
                apart = all(set(wins[i]).isdisjoint(wins[p]) for p in picked)
            else:
                apart = all(abs(lines[i].t - lines[p].t) >= cfg.spacing for p in picked)
            if apart:
                picked.append(i)
        for i in sorted(picked, key=lambda j: (lines[j].t, j)):
            w = wins[i]
            others = [p for p in picked if p != i and p in w]
            annotated = {keys[p] for p in [i, *others]}
            negatives = [
                j
                for j in w
                if j != i
                and j not in others
                and keys[j] not in annotated
                and lines[j].speaker == "C"
                and sum(keys[x] == keys[j] for x in w) == 1
                and keys[j].removeprefix("c").strip()
            ]
            t = lines[i].t
            try:
                items.append(
                    CandidateItem(
                        item_id=f"{clip.clip_id}#L{i + 1}",
                        task="temporal_grounding",
                        question=cfg.question_template.format(time=fmt_time(t)),
                        positive=Positive(
                            text=narration_text(lines[i].text), time=t, id=f"L{i + 1}"
                        ),
                        context=[TimedLine(t=lines[j].t, text=lines[j].text) for j in w],
                        window=Window(start=lines[w[0]].t, end=lines[w[-1]].t),
                        others=[
                            Other(
                                text=narration_text(lines[p].text), time=lines[p].t, id=f"L{p + 1}"
                            )
                            for p in others
                        ],
                        negatives=[
                            Negative(
                                id=f"L{j + 1}", text=narration_text(lines[j].text), time=lines[j].t
                            )
                            for j in negatives
                        ],
                        sources=[w.index(j) for j in negatives],
                        group=clip.clip_id,
                    )
                )
            except ValidationError as e:  # a narration too long for an option, a time out of range
                field, msg = first_error(e)
                skipped["unusable_positive"] += 1
                details.append(f"{clip.source}: line {i + 1}: {field}: {msg}")
    return items, {
        "clips": len(clips),
        "items": len(items),
        "skipped": dict(sorted(skipped.items())),
        "skipped_examples": details[:5],
    }


# --------------------------------------------------------------------------- the generator


def funnel_rows(reached: list[int], rerank: bool) -> list[dict[str, Any]]:
    return [
        {"step": step, "items": sum(r > i for r in reached)}
        for i, step in enumerate(STEPS)
        if rerank or step != "rerank"
    ]


def funnel_lines(rows: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    out.append("[candidates] funnel (items that passed each step)")
    for r in rows:
        out.append(f"  {r['step']:<16}{r['items']:>6}")
    return out


def merge_shards(
    ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]
) -> None:
    """``merge``: the funnel and the rerank agreement of all shards (counts add up)."""
    funnels = [m[NAME]["funnel"] for m in manifests]
    agree: Counter[str] = Counter()
    for m in manifests:
        agree.update(
            {
                k: v
                for k, v in m[NAME]["rerank_agreement"].items()
                if k in ("both", "llm_only", "embedding_only", "neither") and isinstance(v, int)
            }
        )
    first = manifests[0][NAME]
    ctx.extra[NAME] = {
        **first,
        "funnel": [
            {"step": r["step"], "items": sum(f[i]["items"] for f in funnels)}
            for i, r in enumerate(funnels[0])
        ],
        "rerank_agreement": rr.agreement_summary(agree),
    }


@generator(
    NAME,
    config=CandidatesConfig,
    records=CandidateRecord,
    kind="mcq",
    plan=plan,
    merge=merge_shards,
)
def candidates(cfg: CandidatesConfig, ctx: RunContext) -> Iterator[CandidateRecord | Reject]:
    """Candidate sets around an annotated positive: generated, label+reason or sampled wrong options
    (input=items|timelines)."""
    data: Inputs = ctx.plan.data
    for f in data.files:
        ctx.record_input(f)
    reached: list[int] = []
    agree: Counter[str] = Counter()
    # answer positions over every item of the input: each shard and a resumed run place them alike
    places = Positions(derive_seed(cfg.seed, NAME, "positions"))
    at = [places.take(it.task, cfg.options) for it in data.items]
    for res in ctx.imap(
        lambda i: process(ctx, cfg, i, data.items[i], at[i]), ctx.indices()
    ):  # many at once, in order
        reached.append(res.reached)
        agree.update(res.agreement)
        yield res.out
    rows = funnel_rows(reached, cfg.rerank)
    ctx.extra[NAME] = {
        "funnel": rows,
        "input_format": data.fmt,
        "options": cfg.options,
        "rerank_agreement": rr.agreement_summary(agree),
        "recall" if data.fmt == "recall" else "timeline": data.timeline,
    }
    ctx.say(*funnel_lines(rows))
