"""EgoIntrospect's task families from a maintainer's own annotation files: ``python -m gen
introspect task=<family> input=<annotations.jsonl>``.

One room with a ``task=`` option rather than one room per family: the six families read the same
kinds of annotation (sessions with timed lines, segments, memory items), share the clip and
interval code and write the same record (:class:`~schemas.introspect.IntrospectRecord`, an MCQ
record that ``audit``, ``bank add`` and ``evaluate`` take), and differ only in their construction
rule, which is one module each:

- ``recording`` (:mod:`.recording`): Moment of Recording, the recording test and the photo test;
- ``emotion_intensity`` (:mod:`.intensity`): Emotion Intensity Recognition, within-user relative
comparison;
- ``tool_selection`` (:mod:`.tools`): Tool Selection, normalised tool names, hierarchical
correctness;
- ``proactive_timing`` (:mod:`.timing`): Proactive Timing Judgment, do-not-disturb clips;
- ``memory_assistance`` (:mod:`.assistance`): Memory Assistance Recognition, event and object forms;
- ``memory_lifespan`` (:mod:`.lifespan`): Memory Lifespan Identification, within 24 h or beyond.

Code builds every question (the families need no model), except the event form of Memory
Assistance Recognition, whose wrong options ``candidates kind=generated`` writes in a sub-run
(``candidates/`` in the run folder). An annotation that yields no question is a reject with a
typed reason; the manifest holds the funnel (annotations read, questions built, refused by reason).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.errors import ConfigError, InputError
from gen.generators.introspect import assistance, intensity, lifespan, recording, timing, tools
from gen.generators.introspect.assistance import EventItem
from gen.generators.introspect.common import NAME, Built, Draft, Refusal, read_lines, unique_ids
from gen.readers import iter_jsonl, read_yaml_model
from gen.schemas import Reject
from gen.schemas.candidates import EMOTIONS
from gen.schemas.introspect import (
    EmotionSegment,
    InterruptSession,
    IntrospectRecord,
    MemorySession,
    RecordingSession,
    RequestSegment,
    Span,
    Task,
    ToolUniverse,
)


class IntrospectConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Questions to keep from the start of the built list; null = all."""
    task: Task = "recording"
    """recording | emotion_intensity | tool_selection | proactive_timing | memory_assistance |
    memory_lifespan."""
    k: int = Field(4, ge=2, le=26)
    """Options of the multiple-choice families (photo test, emotion intensity, memory
    assistance)."""
    tools: str | None = None
    """tool_selection: the tool universe (YAML or JSON: tools: [{name, description, aliases}])."""
    pad: float = Field(30.0, ge=0)
    """recording, tool_selection: seconds added before and after the command or request (F.1,
    H.1.1)."""
    negatives_per_positive: int = Field(2, ge=0, le=20)
    """recording: negative windows per positive (the paper has about two: 491 of 744)."""
    photo_window: float = Field(10.0, gt=0)
    """recording: seconds around the photo moment the photo test's wrong objects come from (F.1)."""
    taxonomy: list[str] = Field(default_factory=lambda: list(EMOTIONS))
    """emotion_intensity: the labels a segment's main label must be one of (EgoIntrospect's
    nine)."""
    min_group: int = Field(1, ge=1)
    """emotion_intensity: segments of one participant and emotion needed for a question (G.1: 1,
    a group under k is filled with the participant's other emotions)."""
    max_clip: float = Field(300.0, gt=0)
    """proactive_timing: the longest clip (I.1: 300 s)."""
    min_clip: float = Field(15.0, ge=0)
    """proactive_timing: shorter clips are dropped (I.1: 15 s)."""
    form: Literal["both", "event", "object"] = "both"
    """memory_assistance: both | event | object."""
    stm_min: float = Field(12.0, gt=0)
    """memory_assistance: a short-term memory's cue interval is extended to at least this (K.1: 12
    s)."""
    lto_half: float = Field(15.0, gt=0)
    """memory_assistance: a long-term object memory's clip reaches this far either side of its
    trigger (K.1: 15 s)."""
    max_segment: float = Field(45.0, gt=0)
    """memory_assistance: a longer segment is re-centred and cut to this length (K.1: 45 s)."""
    local_window: float = Field(240.0, gt=0)
    """memory_assistance: seconds around the trigger the sub-clips are placed in (the shown clip;
    K.2: mean 234 s)."""
    min_gap: float = Field(5.0, ge=0)
    """memory_assistance: least seconds between a sub-clip and the segment, another sub-clip or an
    annotated memory."""
    mli_clip: float = Field(15.0, gt=0)
    """memory_lifespan: the clip's length (K.1: 15 s)."""
    event_attempts: int = Field(3, ge=1, le=10)
    """memory_assistance event form: the candidates sub-run's attempts per wrong option."""

    @model_validator(mode="after")
    def _check(self) -> IntrospectConfig:
        if self.task == "tool_selection" and self.tools is None:
            raise ValueError("task=tool_selection needs tools=<the tool universe file>")
        if self.num_shards != 1 and self.task == "memory_assistance":
            raise ValueError(
                "memory_assistance runs in one process (num_shards=1): its event form is one "
                "sub-run"
            )
        return self


# --------------------------------------------------------------------------- input


READERS: dict[str, tuple[type, str]] = {
    "recording": (RecordingSession, "session_id"),
    "emotion_intensity": (EmotionSegment, "segment_id"),
    "tool_selection": (RequestSegment, "request_id"),
    "proactive_timing": (InterruptSession, "session_id"),
    "memory_assistance": (MemorySession, "session_id"),
    "memory_lifespan": (MemorySession, "session_id"),
}
"""Per task: the input line's schema and its id field."""


def read_input(cfg: IntrospectConfig) -> tuple[list[Any], list[Path]]:
    path = cfg.input_path()
    assert path is not None
    if path.is_dir():
        raise InputError(f"input: {path} is a folder; task={cfg.task} reads one JSONL file")
    model, key = READERS[cfg.task]
    rows: list[Any] = read_lines(path, model, key)
    for lineno, row in zip((n for n, _ in iter_jsonl(path)), rows, strict=True):
        where = f"{path}:{lineno}"
        if isinstance(row, RecordingSession):
            unique_ids([c.command_id for c in row.commands], where, "command_id")
        if isinstance(row, MemorySession):
            unique_ids([m.memory_id for m in row.memories], where, "memory_id")
    files = [path]
    return rows, files


def read_tools(cfg: IntrospectConfig) -> ToolUniverse:
    path = Path(cfg.tools or "").expanduser()
    if not path.is_file():
        raise InputError(f"tools: no such file: {path}")
    universe = read_yaml_model(path, ToolUniverse, "tool universe")
    try:
        tools.normaliser(universe)
    except ValueError as e:
        raise InputError(f"{path}: {e}") from None
    return universe


def build(cfg: IntrospectConfig, rows: list[Any]) -> list[Built | EventItem]:
    if cfg.task == "recording":
        return list(recording.build(rows, cfg))
    if cfg.task == "emotion_intensity":
        return list(intensity.build(rows, cfg))
    if cfg.task == "tool_selection":
        return list(tools.build(rows, read_tools(cfg), cfg))
    if cfg.task == "proactive_timing":
        return list(timing.build(rows, cfg))
    if cfg.task == "memory_assistance":
        return assistance.build(rows, cfg)
    return list(lifespan.build(rows, cfg))


def plan(cfg: IntrospectConfig) -> Plan:
    """One index per question built or annotation refused (the first ``n`` when given)."""
    rows, files = read_input(cfg)
    built = build(cfg, rows)
    if not built:
        raise InputError(f"input: {cfg.input}: no annotation of task={cfg.task} in it")
    built = built[: cfg.n] if cfg.n is not None else built
    return Plan(len(built), {"built": built, "files": files, "rows": len(rows)})


# --------------------------------------------------------------------------- the generator


def record(ctx: RunContext, cfg: IntrospectConfig, index: int, d: Draft) -> IntrospectRecord:
    privileged = {k: v for k, v in d.privileged.items() if v is not None}
    return IntrospectRecord(
        item_id=ctx.record_id(index),
        question_type=d.question_type,
        question=d.question,
        options=d.options,
        answer=d.answer,
        origins=d.origins,
        group=d.group,
        visible=d.visible,
        privileged=privileged,
        task=cfg.task,
        source=d.source,
        prompt=None if d.prompt is None else ctx.prompts.render(d.prompt[0], **d.prompt[1]),
        **d.extra,
    )


def events(
    ctx: RunContext, cfg: IntrospectConfig, todo: dict[int, EventItem]
) -> dict[int, IntrospectRecord | Reject]:
    """The event-form questions through a ``candidates kind=generated`` sub-run; each comes back as
    a record (the candidates record's fields, with this family's) or the sub-run's reject."""
    if not todo:
        return {}
    folder = ctx.out_dir / "candidates"
    folder.mkdir(parents=True, exist_ok=True)
    items = folder.parent / "event_items.jsonl"
    items.write_text(
        "".join(e.item.model_dump_json(exclude_none=True) + "\n" for e in todo.values()),
        encoding="utf-8",
    )
    run = ctx.subrun(
        "candidates",
        folder,
        input=str(items),
        input_format="items",
        kind="generated",
        k=cfg.k,
        attempts=cfg.event_attempts,
        progress="off",
    )
    made: dict[str, dict[str, Any]] = {row["source_item"]: row for _, row in run.rows()}
    refused: dict[str, dict[str, Any]] = {}
    for _, row in iter_jsonl(folder / "rejects.jsonl"):
        item_id = row.get("detail", "").split(":", 1)[0].removeprefix("item ").strip()
        refused[item_id] = row
    out: dict[int, IntrospectRecord | Reject] = {}
    for index, e in todo.items():
        got = made.get(e.source)
        if got is None:
            r = refused.get(e.source, {})
            out[index] = Reject(
                record_id=ctx.record_id(index),
                index=index,
                stage=f"candidates.{r.get('stage', 'run')}",
                reason=r.get("reason", "not_written"),
                detail=r.get("detail") or e.source,
                raw=r.get("raw"),
            )
            continue
        out[index] = IntrospectRecord(
            item_id=ctx.record_id(index),
            question_type="memory_assistance_event",
            question=got["question"],
            options=got["options"],
            answer=got["answer"],
            origins=got["origins"],
            group=e.group,
            visible=got["visible"],
            privileged={**got["privileged"], "subtype": e.subtype},
            task=cfg.task,
            source=e.source,
            shuffle_seed=got["shuffle_seed"],
            window=Span(start=e.window[0], end=e.window[1]),
        )
    return out


def funnel(
    built: list[Built | EventItem], outcomes: list[IntrospectRecord | Reject], rows: int
) -> dict[str, Any]:
    kinds = Counter(o.question_type for o in outcomes if isinstance(o, IntrospectRecord))
    return {
        "annotations_read": rows,
        "built": len(built),
        "records": sum(isinstance(o, IntrospectRecord) for o in outcomes),
        "records_by_question_type": dict(sorted(kinds.items())),
        "answers_by_question_type": {
            q: dict(
                sorted(
                    Counter(
                        o.options[o.answer] if len(o.options) == 2 else str(o.answer)
                        for o in outcomes
                        if isinstance(o, IntrospectRecord) and o.question_type == q
                    ).items()
                )
            )
            for q in sorted(kinds)
        },
        "refused_by": dict(
            sorted(
                Counter(f"{o.stage}.{o.reason}" for o in outcomes if isinstance(o, Reject)).items()
            )
        ),
    }


def funnel_lines(f: dict[str, Any], task: str) -> list[str]:
    out: list[str] = []
    out.append(
        f"[{NAME}] task={task}: {f['annotations_read']} annotation lines, {f['built']} questions "
        "or refusals, "
        f"{f['records']} records"
    )
    for q, c in f["records_by_question_type"].items():
        out.append(f"  {q:<32}{c:>6}  answers {f['answers_by_question_type'][q]}")
    for r, c in f["refused_by"].items():
        out.append(f"  refused {r:<40}{c:>6}")
    return out


@generator(NAME, config=IntrospectConfig, records=IntrospectRecord, kind="mcq", plan=plan)
def introspect(cfg: IntrospectConfig, ctx: RunContext) -> Iterator[IntrospectRecord | Reject]:
    """EgoIntrospect's task families (recording, emotion_intensity, tool_selection,
    proactive_timing, memory_assistance, memory_lifespan) from annotation files."""
    data = ctx.plan.data
    for f in data["files"]:
        ctx.record_input(f)
    if cfg.task == "tool_selection":
        ctx.record_input(Path(cfg.tools or "").expanduser())
    built: list[Built | EventItem] = data["built"]
    indices = list(ctx.indices())
    if ctx.cfg.num_shards != 1 and any(isinstance(built[i], EventItem) for i in indices):
        raise ConfigError("memory_assistance's event form needs num_shards=1")
    generated = events(ctx, cfg, {i: b for i in indices if isinstance(b := built[i], EventItem)})
    outcomes: list[IntrospectRecord | Reject] = []
    for i in indices:
        b = built[i]
        if isinstance(b, Draft):
            out: IntrospectRecord | Reject = record(ctx, cfg, i, b)
        elif isinstance(b, Refusal):
            out = Reject(
                record_id=ctx.record_id(i),
                index=i,
                stage=b.stage,
                reason=b.reason,
                detail=f"{b.source}: {b.detail}",
            )
        else:
            out = generated[i]
        outcomes.append(out)
        yield out
    f = funnel([built[i] for i in indices], outcomes, data["rows"])
    ctx.extra[NAME] = {"task": cfg.task, "funnel": f}
    ctx.say(*funnel_lines(f, cfg.task))
