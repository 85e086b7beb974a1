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
  Every option is an object the text shows: a wrong option is drawn only among the objects a
  line of its sub-clip mentions (:func:`common.mentions`), and an answer no line of the window
  mentions refuses the item (the text-only form of the paper's "not visually salient"). The
  context is the window without speech and without every line that mentions an option, answer and
  wrong options alike (as the photo test hides them, F.1): a text naming the answer would give
  it away, and hiding only the answer's lines made "the option the context never mentions" right
  on every record. What is left is the moments around each option.
- **event form** (the others): the answer is the memory's content; the wrong options are written
  by ``candidates kind=generated`` (a sub-run) from the lines of the sub-clips, at most one per
  sub-clip (``source_groups``), each in the content's style, as the paper has a model describe
  each sub-clip in the framing of the answer. The candidate sees none of the options' moments:
  the segment's lines and each option's source line are hidden (the sub-run's rule), and so are
  the lines of every other memory. Code builds the candidate items (:func:`event_question`); the
  records come back from the sub-run.

Speech is never shown (the trigger "help me remember…" and any audio naming the item would give
the answer away, K.1).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gen.formats.mcq import Positions
from gen.generators.introspect.common import (
    Built,
    Draft,
    Refusal,
    clip_text,
    mentions,
    positions,
    rng_for,
    shuffled,
)
from gen.intervals import Interval, centred, place
from gen.schemas.candidates import CandidateItem, Other, Positive, TimedLine, Window
from gen.schemas.introspect import MemoryItem, MemorySession
from gen.text.gates import key

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
            if has(w):  # a clip with nothing to offer does not take the room of one that has
                blocked.append(w)
                got.append(w)
        if len(got) == need:
            return sorted(got)
    return []


def objects_in(s: MemorySession, w: Interval, target: str) -> list[str]:
    """The object labels seen in ``w`` other than the target (compared by key) that a line of
    ``w`` without speech mentions: an object the text never describes is not shown to a
    text-only candidate (the paper's curators drop options that are not visually salient)."""
    shown = [s.timeline[j].text for j in lines_in(s, w)]
    return sorted(
        {
            o.label
            for o in s.objects
            if w[0] <= o.time <= w[1]
            and key(o.label) != target
            and any(mentions(o.label, t) for t in shown)
        }
    )


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
    """The object form: every option is an object the window's text mentions (the answer at its
    segment, each wrong option in its sub-clip); the context is the window without speech and
    without every line that mentions an option, so all options are hidden alike."""
    src = f"{s.session_id}/{m.memory_id}"
    rng, seed = rng_for(cfg.seed, "assistance", s.session_id, m.memory_id)
    local = centred(m.time, cfg.local_window, s.duration)
    need = cfg.k - 1
    label = m.object or ""
    target = key(label)
    if not any(mentions(label, s.timeline[j].text) for j in lines_in(s, local)):
        return Refusal(
            src,
            "context",
            "answer_not_shown",
            f"no line of the window without speech mentions {label!r}: the wrong options would be "
            "the only ones shown",
        )
    subs = subclips(
        s, seg, local, [seg, *annotated], need, lambda w: bool(objects_in(s, w, target)), rng, cfg
    )
    if not subs:
        return Refusal(
            src,
            "subclips",
            "no_room_for_subclips",
            f"{need} sub-clips with a shown object do not fit around the memory",
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
            f"{len(picks)} distinct shown objects in the sub-clips, need {need}",
        )
    options, origins, answer = shuffled(
        [label, *picks],
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
        visible={"context": shown_without(s, local, options)},
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
    groups = [[shown.index(j) for j in lines_in(s, w)] for w in subs]  # one option per sub-clip
    sources = sorted({i for g in groups for i in g})
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
            source_groups=groups,
            hide=hide,
            group=s.session_id,
        ),
        src,
        s.session_id,
        kind,
        local,
    )


def shown_without(s: MemorySession, local: Interval, options: list[str]) -> str:
    """The window's lines without speech, minus every line that mentions one of ``options``."""
    lines = [s.timeline[j] for j in lines_in(s, local)]
    kept = [x for x in lines if not any(mentions(o, x.text) for o in options)]
    return clip_text(kept, local, audio=False)
