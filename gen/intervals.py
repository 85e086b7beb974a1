"""Time intervals in seconds, pure: clip to a recording, merge, complement, split into clips, and
place non-overlapping windows with a seed. EgoIntrospect's interruptibility gating (appendix
B.2 stage 1, I.1) and its clip constructions (F.1, K.1) are these operations; ``introspect``
and ``recommend`` share them."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval], total: float) -> list[Interval]:
    """Each interval clipped to [0, total] (empty ones dropped), then overlapping or touching ones
    merged, in time order."""
    parts = sorted(
        (max(0.0, s), min(total, e)) for s, e in intervals if min(total, e) > max(0.0, s)
    )
    out: list[Interval] = []
    for s, e in parts:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def complement(merged: Sequence[Interval], total: float) -> list[Interval]:
    """[0, total] minus already merged intervals."""
    out: list[Interval] = []
    at = 0.0
    for s, e in merged:
        if s > at:
            out.append((at, s))
        at = max(at, e)
    if total > at:
        out.append((at, total))
    return out


def split(interval: Interval, longest: float, shortest: float) -> list[Interval]:
    """Consecutive clips of ``longest`` seconds from the interval's start, the last one what is
    left; clips shorter than ``shortest`` dropped."""
    s, e = interval
    out = []
    while s < e:
        stop = min(e, s + longest)
        if stop - s >= shortest:
            out.append((s, stop))
        s = stop
    return out


def overlaps(a: Interval, b: Interval, gap: float = 0.0) -> bool:
    """The two intervals overlap, or come closer than ``gap`` seconds."""
    return a[0] < b[1] + gap and b[0] < a[1] + gap


def centred(at: float, length: float, total: float) -> Interval:
    """A ``length``-second window centred on ``at``, moved (not cut) to stay inside [0, total]
    when the recording is long enough."""
    start = max(0.0, at - length / 2)
    stop = start + length
    if stop > total:
        stop = total
        start = max(0.0, stop - length)
    return start, stop


def place(
    length: float,
    inside: Interval,
    avoid: Sequence[Interval],
    rng: random.Random,
    *,
    gap: float = 0.0,
    step: float = 1.0,
) -> Interval | None:
    """A ``length``-second window inside ``inside`` overlapping none of ``avoid`` (nor closer than
    ``gap``), its start drawn with ``rng`` among the feasible starts on a ``step`` grid; None when
    none fits."""
    lo, hi = inside[0], inside[1] - length
    if hi < lo:
        return None
    n = int((hi - lo) // step) + 1
    starts = [lo + i * step for i in range(n)]
    feasible = [s for s in starts if not any(overlaps((s, s + length), a, gap) for a in avoid)]
    if not feasible:
        return None
    s = rng.choice(feasible)
    return s, s + length
