"""Progress while a run goes: rich bars on a terminal, periodic plain lines elsewhere (CI)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any


class Progress:
    def __init__(self, name: str, total: int, mode: str, every: float,
                 usage: Callable[[], Any] | None = None):
        if mode == "auto":
            mode = "rich" if sys.stdout.isatty() else "plain"
        self.name, self.total, self.mode, self.every, self._usage = name, total, mode, every, usage
        self._t0 = time.perf_counter()
        self._last = self._t0
        self._bar: Any = None

    def __enter__(self) -> Progress:
        if self.mode == "rich":
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"), TimeRemainingColumn(), transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.name, total=self.total, info="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def _tps(self) -> float:
        usage = self._usage() if self._usage else None
        return usage.tokens_per_second if usage else 0.0

    def update(self, done: int, accepted: int, rejected: int) -> None:
        """``done`` indices of ``total``; ``accepted``/``rejected`` outputs so far."""
        info = f"accepted {accepted} rejected {rejected} {self._tps():.1f} tok/s"
        if self.mode == "rich":
            self._bar.update(self._task, completed=done, info=info)
        elif self.mode == "plain":
            now = time.perf_counter()
            if now - self._last >= self.every or done == self.total:
                self._last = now
                elapsed = now - self._t0
                eta = elapsed / done * (self.total - done) if done else 0.0
                print(f"[{self.name}] {done}/{self.total} {info} eta {eta:.0f}s", flush=True)

    def summary(self, accepted: int, rejected: int, by_reason: Counter[str], wall: float) -> None:
        if self.mode == "off":
            return
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items())) or "none"
        print(f"[{self.name}] done in {wall:.1f}s: {accepted} accepted, {rejected} rejected "
              f"(reasons: {reasons})", flush=True)
