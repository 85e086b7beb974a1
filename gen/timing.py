"""Where a run's time goes: one process-wide clock that the places which take time add to (LLM
calls, waiting for a slot or a rate limit, embedding, the text checks), and the manifest's ``time``
section the runner builds from it (:func:`time_split`).

Seconds are thread-seconds: each thread's timed blocks add up, so with calls in flight at once
the parts can sum to more than the run's wall time. A timed block inside another (a wait for a slot
inside an LLM call) counts in its own part only: the outer part gets its time less the inner's."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

PARTS = ("llm_calls", "waiting", "embedding", "checks")
"""What the clock measures: time in an LLM backend's call (less any wait inside it), waiting for a
call's slot (the admission, the in-process model's lock, a rate limit, a retry's back-off),
computing embeddings (in process or on a server), the text checks (gates, tagging)."""

REPORTED = ("llm_prompt_evaluation", "llm_generation")
"""Parts of ``llm_calls`` a backend reports itself (llama-server's ``timings``), when it does."""


class Clock:
    """Thread-safe sums of seconds by part."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}
        self._local = threading.local()

    def add(self, part: str, seconds: float) -> None:
        with self._lock:
            self._seconds[part] = self._seconds.get(part, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """Time the block into ``part`` (less the blocks timed inside it on this thread)."""
        stack: list[float] = self._local.__dict__.setdefault("stack", [])
        stack.append(0.0)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - t0
            inner = stack.pop()
            if stack:
                stack[-1] += elapsed
            self.add(part, max(0.0, elapsed - inner))

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self._seconds)


CLOCK = Clock()
"""The process's clock (a run reads what it added between its start and end)."""


def time_split(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, object]:
    """The manifest's ``time``: the run's wall seconds, the thread-seconds of each part between two
    snapshots (None for a reported part no backend reported during the run), and
    ``other_seconds``, the wall less the measured parts (never below 0: parts overlap when calls
    run at once)."""
    spent = {p: after.get(p, 0.0) - before.get(p, 0.0) for p in (*PARTS, *REPORTED)}

    def reported(part: str) -> bool:  # by a backend during this run (the clock is the process's)
        return part in after and after[part] != before.get(part)

    measured = sum(spent[p] for p in PARTS)
    return {
        "wall_seconds": round(wall, 3),
        "thread_seconds": {
            **{p: round(spent[p], 3) for p in PARTS},
            **{p: round(spent[p], 3) if reported(p) else None for p in REPORTED},
        },
        "other_seconds": round(max(0.0, wall - measured), 3),
    }


def summary_line(split: dict[str, object]) -> str:
    """One line for the end of a run: where its wall time went."""
    parts = split["thread_seconds"]
    assert isinstance(parts, dict)
    shown = ", ".join(
        f"{p.replace('_', ' ')} {parts[p]:.1f}s" for p in (*PARTS, *REPORTED) if parts[p]
    )
    wall, other = split["wall_seconds"], split["other_seconds"]
    return f"time: wall {wall:.1f}s; {shown or 'nothing measured'}; other {other:.1f}s"
