"""What a run shows on the terminal, written here alone: progress while it goes (rich bars on a
terminal, one updating HTML bar in a Jupyter notebook, periodic plain lines elsewhere, as in CI),
what a generator says (its funnel, a verdict:
:meth:`Progress.say`, reached through ``RunContext.say``), the summary and the files it wrote.
``progress=off`` silences all of it; a quiet run (a sub-run) shows no bar and no summary."""

from __future__ import annotations

import html
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

JUPYTER_EVERY = 0.2
"""Seconds between redraws of a notebook's bar (each one a message to the browser)."""


def in_notebook() -> bool:
    """Running in a Jupyter kernel (a notebook, JupyterLab, VS Code's, Colab's): IPython is
    imported and its shell has a kernel (a terminal IPython has none). Never imports IPython."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    shell = get() if callable(get) else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def bar_html(name: str, done: int, total: int, info: str, eta: float | None) -> str:
    """A notebook's progress line: the run's name, a ``<progress>`` bar, done of total, the
    counts and rate, the time left (every text escaped)."""
    left = f" eta {eta:.0f}s" if eta is not None and done < total else ""
    return (
        f'<div class="gen-progress"><b>{html.escape(name)}</b> '
        f'<progress value="{done}" max="{max(total, 1)}" style="width:40%"></progress> '
        f"{done}/{total} {html.escape(info)}{html.escape(left)}</div>"
    )


class Progress:
    def __init__(
        self,
        name: str,
        total: int,
        mode: str,
        every: float,
        usage: Callable[[], Any] | None = None,
        noun: str = "accepted",
        status: Callable[[], str] | None = None,
    ):
        if mode == "auto":
            mode = "jupyter" if in_notebook() else "rich" if sys.stdout.isatty() else "plain"
        self.name, self.total, self.mode, self.every, self._usage = name, total, mode, every, usage
        self.noun = noun
        """What the records are called (``accepted``; ``findings`` for an audit)."""
        self._status = status
        """The models' state (calls in flight, tokens/s, cost so far: ``RunContext.status``)."""
        self._t0 = time.perf_counter()
        self._last = self._t0
        self._bar: Any = None
        self._display: Any = None
        """The notebook's updating output (``jupyter`` mode): an IPython DisplayHandle."""

    def __enter__(self) -> Progress:
        if self.mode == "jupyter":
            from IPython.display import HTML, display

            self._display = display(
                HTML(bar_html(self.name, 0, self.total, "", None)), display_id=True
            )
        if self.mode == "rich":
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.name, total=self.total, info="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._display = None

    def _rate(self, done: int) -> str:
        """The models' state while an LLM works (calls in flight, tokens per second, cost);
        items per second otherwise."""
        status = self._status() if self._status else ""
        if status:
            return status
        usage = self._usage() if self._usage else None
        if usage is not None and usage.generation_seconds:
            return f"{usage.tokens_per_second:.1f} tok/s"
        elapsed = time.perf_counter() - self._t0
        return f"{done / elapsed:.2f} items/s" if elapsed > 0 else ""

    def _counts(self, accepted: int, rejected: int) -> str:
        if self.noun == "accepted":
            return f"accepted {accepted} rejected {rejected}"
        return f"{self.noun} {accepted}" + (f" rejected {rejected}" if rejected else "")

    def update(self, done: int, accepted: int, rejected: int) -> None:
        """``done`` indices of ``total``; ``accepted``/``rejected`` outputs so far."""
        info = f"{self._counts(accepted, rejected)} {self._rate(done)}"
        if self.mode == "rich":
            self._bar.update(self._task, completed=done, info=info)
        elif self.mode == "jupyter":
            now = time.perf_counter()
            if self._display is not None and (
                now - self._last >= JUPYTER_EVERY or done == self.total
            ):
                from IPython.display import HTML

                self._last = now
                elapsed = now - self._t0
                eta = elapsed / done * (self.total - done) if done else None
                self._display.update(HTML(bar_html(self.name, done, self.total, info, eta)))
        elif self.mode == "plain":
            now = time.perf_counter()
            if now - self._last >= self.every or done == self.total:
                self._last = now
                elapsed = now - self._t0
                eta = elapsed / done * (self.total - done) if done else 0.0
                print(f"[{self.name}] {done}/{self.total} {info} eta {eta:.0f}s", flush=True)

    def say(self, *items: Any, always: bool = False) -> None:
        """Lines of text or rich renderables (a table) from the generator: above the live bar on a
        terminal, as plain lines elsewhere; nothing when progress is off unless ``always`` (what
        the user must read to go on: the review server's address)."""
        if self.mode == "off" and not always:
            return
        for item in items:
            if self._bar is not None:
                self._bar.console.print(item, markup=False, highlight=False)
            elif isinstance(item, str):
                print(item, flush=True)
            else:
                from rich.console import Console

                Console(width=120).print(item)

    def summary(self, accepted: int, rejected: int, by_reason: Counter[str], wall: float) -> None:
        if self.mode == "off":
            return
        if self.noun == "accepted":
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items())) or "none"
            what = f"{accepted} accepted, {rejected} rejected (reasons: {reasons})"
        else:
            what = f"{accepted} {self.noun}" + (f", {rejected} rejected" if rejected else "")
        print(f"[{self.name}] done in {wall:.1f}s: {what}", flush=True)

    def outputs(self, out_dir: Any, files: dict[str, int | None]) -> None:
        """Where the run went: its folder and each file it wrote, with its record count."""
        if self.mode == "off":
            return
        print(f"[{self.name}] run folder: {out_dir}", flush=True)
        for rel, count in files.items():
            print(f"  {rel}" + (f"  ({count} records)" if count is not None else ""), flush=True)
