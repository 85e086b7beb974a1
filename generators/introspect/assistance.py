"""Memory Assistance Recognition (EgoIntrospect §4.4.2, appendices A.6 and K.1), from
``MemorySession`` lines: which of these did the user ask the assistant to help them remember?

Type-aware segments: a short-term memory (STM) is its cue interval, extended to at least
``stm_min`` seconds (12); a long-term event (LTE) is its event interval; a long-term object (LTO)
is ``lto_half`` seconds (15) either side of the trigger; a segment longer than 45 seconds
is re-centred on its midpoint and cut to that length (``max_segment``). In a local window of
``local_window`` seconds around the trigger, ``k-1`` sub-clips of the segment's length are placed
with the seed, apart from the segment, from each other and from every annotated memory of the
session by at least ``min_gap`` seconds; when they do not fit, the sub-clips shrink (3/4, then 1/2
of the length) before the item is refused.

- **object form** (a memory with an ``object`` label): the answer is the object; each wrong
  option is an object seen in one sub-clip (drawn with the seed, distinct labels). Built by code.
- **event form** (the others): the answer is the memory's content; the wrong options are written
  by ``candidates kind=generated`` (a sub-run) from the lines of the sub-clips, each in the
  content's style, as the paper has a model describe each sub-clip in the framing of the answer.
  Code builds the candidate items (:func:`event_item`); the records come back from the sub-run.

The clip is shown without speech (the trigger "help me remember…" and any audio naming the item
would give the answer away); the segment's own lines and those of every other memory are hidden.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gen.gates import key
from gen.generators.introspect.common import Built, Draft, Refusal, positions, rng_for, shuffled
from gen.intervals import Interval, centred, place
from gen.mcq import Positions
from gen.schemas.candidates import CandidateItem, Other, Positive, TimedLine, Window
from gen.schemas.introspect import MemoryItem, MemorySession
from gen.timelines import fmt_time

if TYPE_CHECKING:
    from gen.generators.introspect import IntrospectConfig

QUESTION = "Which of these did the user ask the assistant to help them remember?"


def short_term(m: MemoryItem) -> bool:
    """Short-term: for use within 24 hours (the annotated lifespan, else the expected use time)."""
    if m.lifespan is not None:
        return m.lifespan == "short_term"
    return m.usage_hours is not None and m.usage_hours <= 24


def segment(m: MemoryItem, duration: float, cfg: IntrospectConfig) -> tuple[str, Interval | None]:
    """(sub-type, the memory's clip) by K.1's type-aware rule; no clip for a long-term event
    without its event interval."""
    if short_term(m):
        kind = "STM"
        s, e = (m.start, m.end) if m.start is not None and m.end is not None else (m.time, m.time)
        if e - s < cfg.stm_min:
            s, e = centred((s + e) / 2, cfg.stm_min, duration)
    elif m.object is not None:
        kind = "LTO"
        s, e = m.time - cfg.lto_half, m.time + cfg.lto_half
    else:
        kind = "LTE"
        if m.start is None or m.end is None:
            return kind, None
        s, e = m.start, m.end
    if e - s > cfg.max_segment:
        s, e = centred((s + e) / 2, cfg.max_segment, duration)
    return kind, (max(0.0, s), min(duration, e))


@dataclass
class EventItem:
    """An event-form question handed to ``candidates`` (its item, and the record fields code
    already knows)."""

    item: CandidateItem
    source: str
    group: str
    subtype: str
    window: Interval


def subclips(
    s: MemorySession,
    seg: Interval,
    local: Interval,
    avoid: list[Interval],
    need: int,
    has: Any,
    rng: random.Random,
    cfg: IntrospectConfig,
) -> list[Interval]:
    """``need`` sub-clips in ``local`` away from ``avoid`` and each other, each holding something
    (``has``); shorter ones when they do not fit."""
    length = seg[1] - seg[0]
    for size in (length, length * 0.75, length * 0.5):
        size = max(size, 4.0)
        got: list[Interval] = []
        blocked = list(avoid)
        for _ in range(need * 8):
            if len(got) == need:
                break
            w = place(size, local, blocked, rng, gap=cfg.min_gap)
            if w is None:
                break
            blocked.append(w)
            if has(w):
                got.append(w)
        if len(got) == need:
            return sorted(got)
    return []


def objects_in(s: MemorySession, w: Interval, target: str) -> list[str]:
    """The object labels seen in ``w`` other than the target (compared by key)."""
    return sorted({o.label for o in s.objects if w[0] <= o.time <= w[1] and key(o.label) != target})


def lines_in(s: MemorySession, w: Interval) -> list[int]:
    """The session's lines in ``w`` that are not speech."""
    return [j for j, x in enumerate(s.timeline) if w[0] <= x.t <= w[1] and not x.speech]


def build(sessions: list[MemorySession], cfg: IntrospectConfig) -> list[Built | EventItem]:
    out: list[Built | EventItem] = []
    places = positions(cfg.seed)
    for s in sessions:
        segs = {m.memory_id: segment(m, s.duration, cfg) for m in s.memories}
        annotated = [iv for _, iv in segs.values() if iv is not None]
        for m in s.memories:
            src = f"{s.session_id}/{m.memory_id}"
            kind, seg = segs[m.memory_id]
            if seg is None:
                out.append(
                    Refusal(
                        src,
                        "segment",
                        "no_event_interval",
                        "a long-term event memory without start and end",
                    )
                )
                continue
            form = "object" if m.object is not None else "event"
            if cfg.form not in ("both", form):
                continue
            if form == "object":
                out.append(object_question(s, m, kind, seg, annotated, cfg, places))
            else:
                out.append(event_question(s, m, kind, seg, annotated, cfg))
    return out


def object_question(
    s: MemorySession,
    m: MemoryItem,
    kind: str,
    seg: Interval,
    annotated: list[Interval],
    cfg: IntrospectConfig,
    places: Positions,
) -> Built:
    src = f"{s.session_id}/{m.memory_id}"
    rng, seed = rng_for(cfg.seed, "assistance", s.session_id, m.memory_id)
    local = centred(m.time, cfg.local_window, s.duration)
    need = cfg.k - 1
    target = key(m.object or "")
    subs = subclips(
        s, seg, local, [seg, *annotated], need, lambda w: bool(objects_in(s, w, target)), rng, cfg
    )
    if not subs:
        return Refusal(
            src,
            "subclips",
            "no_room_for_subclips",
            f"{need} sub-clips with an object do not fit around the memory",
        )
    picks: list[str] = []
    for w in subs:
        fresh = [x for x in objects_in(s, w, target) if key(x) not in {key(p) for p in picks}]
        if fresh:
            picks.append(rng.choice(fresh))
    if len(picks) < need:
        return Refusal(
            src,
            "subclips",
            "too_few_objects",
            f"{len(picks)} distinct objects in the sub-clips, need {need}",
        )
    options, origins, answer = shuffled(
        [m.object or "", *picks],
        ["positive", *(f"subclip@{w[0]:g}-{w[1]:g}" for w in subs)],
        rng,
        places,
        "memory_assistance_object",
    )
    return Draft(
        "memory_assistance_object",
        QUESTION,
        options,
        answer,
        src,
        s.session_id,
        origins=origins,
        visible={"context": hide_lines(s, local, [seg, *annotated])},
        privileged={
            "content": m.content,
            "object": m.object,
            "subtype": kind,
            "reason": m.reason,
            "subclips": [list(w) for w in subs],
        },
        extra={"window": {"start": local[0], "end": local[1]}, "shuffle_seed": seed},
    )


def event_question(
    s: MemorySession,
    m: MemoryItem,
    kind: str,
    seg: Interval,
    annotated: list[Interval],
    cfg: IntrospectConfig,
) -> Built | EventItem:
    src = f"{s.session_id}/{m.memory_id}"
    rng, _ = rng_for(cfg.seed, "assistance", s.session_id, m.memory_id)
    local = centred(m.time, cfg.local_window, s.duration)
    need = cfg.k - 1
    subs = subclips(
        s, seg, local, [seg, *annotated], need, lambda w: bool(lines_in(s, w)), rng, cfg
    )
    if not subs:
        return Refusal(
            src,
            "subclips",
            "no_room_for_subclips",
            f"{need} sub-clips with a line do not fit around the memory",
        )
    shown = lines_in(s, local)
    sources = sorted({shown.index(j) for w in subs for j in lines_in(s, w)})
    hide = [
        i
        for i, j in enumerate(shown)
        if any(iv[0] <= s.timeline[j].t <= iv[1] for iv in [seg, *annotated])
    ]
    others = [
        o for o in s.memories if o.memory_id != m.memory_id and local[0] <= o.time <= local[1]
    ]
    return EventItem(
        CandidateItem(
            item_id=src,
            task="memory_assistance_event",
            question=QUESTION,
            positive=Positive(text=m.content, time=m.time, id=m.memory_id),
            context=[TimedLine(t=s.timeline[j].t, text=s.timeline[j].text) for j in shown],
            window=Window(start=local[0], end=local[1]),
            others=[Other(text=o.content, time=o.time, id=o.memory_id) for o in others],
            sources=sources,
            hide=hide,
            group=s.session_id,
        ),
        src,
        s.session_id,
        kind,
        local,
    )


def hide_lines(s: MemorySession, local: Interval, hidden: list[Interval]) -> str:
    """The local window's lines without speech, minus those inside a hidden interval."""
    keep = [
        x
        for x in s.timeline
        if local[0] <= x.t <= local[1]
        and not x.speech
        and not any(h[0] <= x.t <= h[1] for h in hidden)
    ]
    return "\n".join(f"{fmt_time(x.t - local[0])} | {x.text}" for x in keep)
