"""Proactive Timing Judgment (EgoIntrospect §4.3.2, appendices A.4 and I.1), from
``InterruptSession`` lines.

The participant's do-not-disturb intervals are clipped to the recording and merged; their
complement is the interruptible time. Both are cut into clips of at most ``max_clip`` seconds
(300), and clips shorter than ``min_clip`` seconds (15) are dropped. A clip of do-not-disturb
time is labelled False, one of interruptible time True. The candidate sees the participant's
profile and the clip's lines (its transcript included); the do-not-disturb reasons stay with the
annotation, never in the question.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gen.generators.introspect.common import Built, Draft, Refusal, clip_text, fmt_span
from gen.intervals import complement, merge, overlaps, split
from gen.schemas.introspect import InterruptSession

if TYPE_CHECKING:
    from gen.generators.introspect import IntrospectConfig

QUESTION = "Could the assistant proactively interrupt the user with a suggestion during this clip?"


def clips(s: InterruptSession, cfg: IntrospectConfig) -> list[tuple[tuple[float, float], bool]]:
    """(clip, interruptible) in time order."""
    blocked = merge(((f.start, f.end) for f in s.forbidden), s.duration)
    free = complement(blocked, s.duration)
    out = [(c, False) for iv in blocked for c in split(iv, cfg.max_clip, cfg.min_clip)]
    out += [(c, True) for iv in free for c in split(iv, cfg.max_clip, cfg.min_clip)]
    return sorted(out)


def build(sessions: list[InterruptSession], cfg: IntrospectConfig) -> list[Built]:
    out: list[Built] = []
    for s in sessions:
        for n, (span, ok) in enumerate(clips(s, cfg)):
            src = f"{s.session_id}/clip{n + 1}"
            text = clip_text(s.timeline, span)
            if not text:
                out.append(
                    Refusal(
                        src, "clip", "empty_clip", f"no line in {fmt_span(span)} of {s.session_id}"
                    )
                )
                continue
            reasons = [
                f.reason for f in s.forbidden if f.reason and overlaps(span, (f.start, f.end))
            ]
            visible = {"context": text, **({"profile": s.profile} if s.profile else {})}
            out.append(
                Draft(
                    "proactive_timing",
                    QUESTION,
                    ["True", "False"],
                    0 if ok else 1,
                    src,
                    s.session_id,
                    visible=visible,
                    privileged={
                        "interruptible": ok,
                        **({"forbidden_reasons": reasons} if reasons else {}),
                    },
                    extra={"window": {"start": span[0], "end": span[1]}},
                )
            )
    return out
