"""Memory Recall Prediction items from recall annotations (EgoIntrospect §4.4.1, appendices A.5,
C.5 and J.1): per vivid detail the participant recalled, a 3-minute clip centred on it; the right
answer is the detail, the wrong ones are written from other moments of the same clip (the
``generated`` kind, one context line per option), never from another recalled detail of the clip
(collision avoidance); the options are shuffled apart from their time order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gen.errors import InputError
from gen.readers import first_error, iter_jsonl, validated
from gen.schemas.candidates import CandidateItem, Other, Positive, RecallSession, TimedLine, Window

if TYPE_CHECKING:
    from gen.generators.candidates import CandidatesConfig

RECALL_KEYS = ("session_id", "details")
"""The fields by which a JSONL file is known as recall annotations."""


def read_recall(path: Path) -> list[RecallSession]:
    """A recall-annotation JSONL (:class:`RecallSession` per line); a bad line is an InputError
    ``file:line: field: reason``; session ids and each session's detail ids unique."""
    sessions: list[RecallSession] = []
    seen: dict[str, int] = {}
    for lineno, row in iter_jsonl(path):
        where = f"{path}:{lineno}"
        s = validated(RecallSession, row, where)
        if s.session_id in seen:
            raise InputError(
                f"{where}: session_id: {s.session_id!r} repeats line {seen[s.session_id]}"
            )
        seen[s.session_id] = lineno
        ids = [d.detail_id for d in s.details]
        dup = next((i for i in ids if ids.count(i) > 1), None)
        if dup is not None:
            raise InputError(f"{where}: details: detail_id {dup!r} is given twice")
        events = {e.event_id for e in s.events}
        stray = next(
            (d for d in s.details if d.event_id is not None and d.event_id not in events), None
        )
        if stray is not None:
            raise InputError(
                f"{where}: details: {stray.detail_id!r} names event_id {stray.event_id!r}, "
                "which is not among events"
            )
        sessions.append(s)
    if not sessions:
        raise InputError(
            f"{path}: no sessions (one JSON object per line: session_id, timeline, details…)"
        )
    return sessions


def clip_bounds(t: float, length: float, end: float) -> tuple[float, float]:
    """A ``length``-second clip centred on ``t``, moved (not cut) to stay inside [0, end] when the
    session is long enough."""
    start = max(0.0, t - length / 2)
    stop = start + length
    if stop > end:
        stop = end
        start = max(0.0, stop - length)
    return start, stop


def recall_items(
    sessions: list[RecallSession], cfg: CandidatesConfig
) -> tuple[list[CandidateItem], dict[str, Any]]:
    """One item per vivid detail: the clip's timed lines are its context, the clip's other
    recalled details are its collision set (``others``: never an option), and the question asks
    which detail the user most likely recalls. The lines within ``recall_gap`` seconds of a
    recalled detail of the clip are its moment: hidden from the candidate and never the source of
    a wrong option (the lines the wrong options are based on are hidden too, so no option's moment
    stays in view). A detail whose clip holds no line is skipped and counted."""
    items: list[CandidateItem] = []
    skipped: Counter[str] = Counter()
    details_seen: list[str] = []
    for s in sessions:
        end = max([x.t for x in s.timeline] + [d.time for d in s.details])
        for d in sorted(s.details, key=lambda x: (x.time, x.detail_id)):
            start, stop = clip_bounds(d.time, cfg.clip, end)
            lines = [x for x in s.timeline if start <= x.t <= stop]
            if not lines:
                skipped["no_clip_lines"] += 1
                details_seen.append(
                    f"{s.session_id}/{d.detail_id}: no timeline line in {start:.0f}-{stop:.0f} s"
                )
                continue
            others = [
                o for o in s.details if o.detail_id != d.detail_id and start <= o.time <= stop
            ]
            moments = [d.time, *(o.time for o in others)]
            hide = [
                j
                for j, x in enumerate(lines)
                if any(abs(x.t - m) <= cfg.recall_gap for m in moments)
            ]
            try:
                items.append(
                    CandidateItem(
                        item_id=f"{s.session_id}#{d.detail_id}",
                        task="memory_recall",
                        question=cfg.recall_question,
                        positive=Positive(text=d.text, time=d.time, id=d.detail_id),
                        context=[TimedLine(t=x.t, text=x.text) for x in lines],
                        window=Window(start=start, end=stop),
                        others=[Other(text=o.text, time=o.time, id=o.detail_id) for o in others],
                        hide=hide,
                        group=s.session_id,
                    )
                )
            except ValidationError as e:
                field, msg = first_error(e)
                skipped["unusable_detail"] += 1
                details_seen.append(f"{s.session_id}/{d.detail_id}: {field}: {msg}")
    return items, {
        "sessions": len(sessions),
        "details": sum(len(s.details) for s in sessions),
        "items": len(items),
        "clip_seconds": cfg.clip,
        "skipped": dict(sorted(skipped.items())),
        "skipped_examples": details_seen[:5],
    }
