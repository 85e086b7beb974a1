"""How many calls of one backend are in flight: one budget for a whole command.

Every call a backend makes to its model (a server request, an in-process generation) passes
:meth:`Admission.slot`. The admission belongs to the loaded backend, so every fork of it (a
sub-run's, a stage's) and every thread of every map share it: a run may have hundreds of records
and nested maps under way, and the server still sees at most ``limit`` calls.

On a server (``llm=openai``) the limit adapts (AIMD, as TCP's congestion window and
DataDesigner's per-provider admission): it halves when the server says it is overloaded (HTTP 429
or 503, at most once per round trip) and pauses every call for the server's ``Retry-After``; it
shrinks by a tenth when calls queue on the server (recent latency over twice the long-run one),
and grows by one per ``limit`` calls that went well, up to ``llm.concurrency``. ``llm.rpm`` and
``llm.tpm`` are token buckets: a call waits until a request (and its estimated tokens) fit in the
last minute's budget; the estimate is corrected by the tokens the server reports.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from gen.timing import CLOCK

DECREASE = 0.5
"""The limit's factor after a 429/503."""
QUEUE_DECREASE = 0.9
"""The limit's factor when calls queue on the server."""
QUEUE_RATIO = 2.0
"""Recent latency over the long-run latency that counts as queueing."""
SHORT, LONG = 0.2, 0.02
"""Weights of the recent and the long-run latency averages (exponential)."""
WARMUP = 20
"""Calls before latency may lower the limit (the long-run average needs some)."""


class _Bucket:
    """A token bucket that refills ``per_minute`` tokens a minute; may go into debt."""

    def __init__(self, per_minute: float):
        self.rate = per_minute / 60.0
        self.capacity = float(per_minute)
        self.level = float(per_minute)
        self.at = time.monotonic()

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` fits (0: now); an amount over the capacity waits for a full
        bucket."""
        self._refill(now)
        need = min(amount, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def take(self, amount: float) -> None:
        self.level -= amount

    def give(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


class Admission:
    """The call budget of one backend (see the module's docstring).

    Args:
        limit: the most calls in flight (``llm.concurrency``).
        adaptive: adapt the limit (AIMD) between 1 and ``limit``.
        rpm, tpm: requests and tokens a minute (None: no limit).
    """

    def __init__(
        self,
        limit: int,
        *,
        adaptive: bool = False,
        rpm: float | None = None,
        tpm: float | None = None,
    ):
        self.max = max(1, int(limit))
        self.limit = float(self.max)
        self.adaptive = adaptive
        self._rpm = _Bucket(rpm) if rpm else None
        self._tpm = _Bucket(tpm) if tpm else None
        self._cond = threading.Condition()
        self.in_flight = 0
        self.waiting = 0
        self.paused_until = 0.0
        self.throttles = 0
        self.backoffs = 0
        self._last_cut = 0.0
        self._short = self._long = 0.0
        self._samples = 0
        self._grow = 0.0
        self._t0 = self._at = time.monotonic()
        self._area = 0.0
        self.peak = 0
        self.calls = 0

    # ------------------------------------------------------------------ the slot

    @contextlib.contextmanager
    def slot(self, tokens: int = 0) -> Iterator[None]:
        """Hold one call's place (and ``tokens`` estimated tokens of ``tpm``) while the block runs;
        a block that raises counts as a call that went wrong (no growth, no latency sample)."""
        self.acquire(tokens)
        t0 = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.release(time.monotonic() - t0 if ok else None)

    def acquire(self, tokens: int = 0) -> None:
        with CLOCK.timed("waiting"), self._cond:
            self.waiting += 1
            try:
                while True:
                    now = time.monotonic()
                    wait = max(
                        self.paused_until - now,
                        self._rpm.wait(1, now) if self._rpm else 0.0,
                        self._tpm.wait(tokens, now) if self._tpm else 0.0,
                    )
                    if wait <= 0 and self.in_flight < max(1, int(self.limit)):
                        break
                    self._cond.wait(timeout=wait if wait > 0 else None)
            finally:
                self.waiting -= 1
            if self._rpm:
                self._rpm.take(1)
            if self._tpm:
                self._tpm.take(tokens)
            self._tick(now)
            self.in_flight += 1
            self.calls += 1
            self.peak = max(self.peak, self.in_flight)

    def release(self, seconds: float | None) -> None:
        """End a call: ``seconds`` it took, or None for one that failed."""
        with self._cond:
            self._tick(time.monotonic())
            self.in_flight -= 1
            if seconds is not None and self.adaptive:
                self._sample(seconds)
            self._cond.notify_all()

    def used(self, estimated: int, actual: int) -> None:
        """Correct ``tpm`` by the tokens a call really used (``estimated`` were taken)."""
        if self._tpm and actual >= 0:
            with self._cond:
                if actual < estimated:
                    self._tpm.give(estimated - actual)
                else:
                    self._tpm.take(actual - estimated)
                self._cond.notify_all()

    # ------------------------------------------------------------------ adapting

    def throttled(self, wait: float | None) -> None:
        """The server refused a call as overloaded (429/503): halve the limit (once per round
        trip) and pause every call for its ``Retry-After``."""
        with self._cond:
            now = time.monotonic()
            self.throttles += 1
            if wait:
                self.paused_until = max(self.paused_until, now + wait)
            if self.adaptive:
                self._cut(DECREASE, now)
            self._cond.notify_all()

    def _cut(self, factor: float, now: float) -> None:
        if now - self._last_cut < max(self._short, 0.05):  # one cut per round trip
            return
        self._last_cut = now
        self.limit = max(1.0, self.limit * factor)
        self._grow = 0.0
        self.backoffs += 1

    def _sample(self, seconds: float) -> None:
        self._samples += 1
        if self._samples == 1:
            self._short = self._long = seconds
        else:
            self._short += SHORT * (seconds - self._short)
            self._long += LONG * (seconds - self._long)
        now = time.monotonic()
        if self._samples > WARMUP and self._short > QUEUE_RATIO * self._long:
            self._cut(QUEUE_DECREASE, now)
            return
        if self.limit < self.max:
            self._grow += 1.0 / max(1.0, self.limit)  # one more per limit's worth of good calls
            if self._grow >= 1.0:
                self._grow -= 1.0
                self.limit = min(float(self.max), self.limit + 1.0)

    # ------------------------------------------------------------------ measuring

    def _tick(self, now: float) -> None:
        self._area += self.in_flight * (now - self._at)
        self._at = now

    def stats(self) -> dict[str, Any]:
        """Calls in flight now, their time-weighted mean since the backend was made, the limit."""
        with self._cond:
            now = time.monotonic()
            self._tick(now)
            elapsed = now - self._t0
            return {
                "in_flight": self.in_flight,
                "waiting": self.waiting,
                "limit": int(self.limit),
                "max": self.max,
                "peak": self.peak,
                "calls": self.calls,
                "mean_in_flight": round(self._area / elapsed, 3) if elapsed > 0 else 0.0,
                "throttled": self.throttles,
                "backoffs": self.backoffs,
            }
