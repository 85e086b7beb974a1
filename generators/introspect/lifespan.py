"""Memory Lifespan Identification (EgoIntrospect §4.4.2, appendices A.6 and K.1), from
``MemorySession`` lines: will the user need this memory within 24 hours, or beyond?

The label is the participant's: short-term (``within_24h``) when the item was annotated
short-term, or, without that annotation, when its expected use is at most 24 hours away; else
``more_than_24h``. An item whose annotation and expected use disagree is refused. The clip is
``mli_clip`` seconds (15): a longer memory segment is cut to that length around its trigger, a
shorter one extended around its middle; all audio is removed (speech lines left out), since the
participant's in-situ words often state the lifespan. As in K.1 the candidate gets the clip alone
(its lines without speech), not the memory's words: the question asks about what the wearer
captures in it, and the content stays privileged, so no item is refused for its wording. Each record
carries K.1's chain-of-thought prompt rendered for its clip (``prompt``, from
``prompts/introspect/lifespan.jinja``: the scenario guideline, the three steps WHAT, CONTEXT,
REUSABILITY, and a last line ``within_24h`` or ``more_than_24h``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gen.generators.introspect.common import Built, Draft, Refusal, clip_text, fmt_span
from gen.intervals import centred
from gen.schemas.introspect import MemoryItem, MemorySession

if TYPE_CHECKING:
    from gen.generators.introspect import IntrospectConfig

LABELS = ["within_24h", "more_than_24h"]
"""The paper's labels (the privileged ``label``)."""
OPTIONS = ["within 24 hours", "more than 24 hours"]
"""What the candidate reads (the labels' words: an identifier reads as a template echo)."""
PROMPT = "introspect/lifespan.jinja"
"""K.1's chain-of-thought prompt (inputs: ``context``)."""
QUESTION = (
    "Will the user need what they are asking the assistant to help them remember in this clip "
    "within the next 24 hours, or for longer?"
)


def label(m: MemoryItem) -> tuple[str | None, str]:
    """(the label, or None on a conflict; how it was found)."""
    by_use = (
        None
        if m.usage_hours is None
        else ("within_24h" if m.usage_hours <= 24 else "more_than_24h")
    )
    by_note = (
        None
        if m.lifespan is None
        else ("within_24h" if m.lifespan == "short_term" else "more_than_24h")
    )
    if by_use and by_note and by_use != by_note:
        return None, f"lifespan {m.lifespan} but expected use in {m.usage_hours:g} h"
    return (by_note or by_use), ("lifespan" if by_note else "usage_hours")


def build(sessions: list[MemorySession], cfg: IntrospectConfig) -> list[Built]:
    out: list[Built] = []
    for s in sessions:
        for m in s.memories:
            src = f"{s.session_id}/{m.memory_id}"
            truth, how = label(m)
            if truth is None:
                out.append(Refusal(src, "label", "lifespan_conflict", how))
                continue
            seg = (
                (m.start, m.end) if m.start is not None and m.end is not None else (m.time, m.time)
            )
            if seg[1] - seg[0] > cfg.mli_clip:  # around the trigger, inside the segment
                start = min(max(seg[0], m.time - cfg.mli_clip / 2), seg[1] - cfg.mli_clip)
                span = (start, start + cfg.mli_clip)
            else:
                span = centred((seg[0] + seg[1]) / 2, cfg.mli_clip, s.duration)
            text = clip_text(s.timeline, span, audio=False)
            if not text:
                out.append(
                    Refusal(
                        src, "clip", "empty_clip", f"no line without speech in {fmt_span(span)}"
                    )
                )
                continue
            out.append(
                Draft(
                    "memory_lifespan",
                    QUESTION,
                    OPTIONS,
                    LABELS.index(truth),
                    src,
                    s.session_id,
                    visible={"context": text},
                    privileged={
                        "label": truth,
                        "label_from": how,
                        "content": m.content,
                        "lifespan": m.lifespan,
                        "usage_hours": m.usage_hours,
                        "memory_type": m.memory_type,
                        "reason": m.reason,
                    },
                    extra={"window": {"start": span[0], "end": span[1]}},
                    prompt=(PROMPT, {"context": text}),
                )
            )
    return out
