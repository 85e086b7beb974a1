"""A sweep (``gen <generator> -m key=a,b``) runs every job and ends with one line per job.

Each job reports its exit code, its one-line error and its folder by appending one JSON line to
a report file the command makes in a private temporary folder (``GEN_SWEEP_REPORT``: a launcher's
worker processes on this machine inherit it). When every job has run, the command prints a line
per job and exits with the largest exit code of its jobs: 0 only when every job exited 0, else
130 (interrupted) over 2 (bad input) over 1 (findings, or an unexpected failure). A job whose
launcher ran it where the report file is out of reach (another machine) did not report: it is
listed as such and counts as exit 1, since nothing says it succeeded.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV = "GEN_SWEEP_REPORT"
"""The environment variable naming a sweep's report file (set by the command, read by its jobs)."""
NOT_REPORTED = 1
"""The exit code a job that did not report counts as."""


@dataclass(frozen=True)
class JobOutcome:
    """One job of a sweep as it reported itself."""

    num: int
    overrides: list[str]
    code: int
    error: str | None
    folder: str


def report(num: int, overrides: list[str], code: int, error: str | None, folder: Path) -> None:
    """Append this job's outcome to the sweep's report file (one line, one ``write``)."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = (
        json.dumps(
            {
                "num": num,
                "overrides": overrides,
                "code": code,
                "error": error,
                "folder": str(folder),
            },
            ensure_ascii=True,
        )
        + "\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("ascii"))
    finally:
        os.close(fd)


class Sweep:
    """The report file of one sweep: made before Hydra starts the jobs, read and removed after."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="gen-sweep-")
        self.path = os.path.join(self.tmp, "jobs.jsonl")
        self._old = os.environ.get(ENV)
        os.environ[ENV] = self.path

    def outcomes(self) -> list[JobOutcome]:
        """The jobs that reported, by job number (a job that reported twice: its last line)."""
        out: dict[int, JobOutcome] = {}
        try:
            with open(self.path, encoding="ascii") as f:
                for line in f:
                    try:
                        row: dict[str, Any] = json.loads(line)
                        out[int(row["num"])] = JobOutcome(
                            int(row["num"]),
                            list(row["overrides"]),
                            int(row["code"]),
                            row.get("error"),
                            str(row["folder"]),
                        )
                    except (ValueError, KeyError, TypeError):
                        continue  # a line cut short by a killed worker
        except FileNotFoundError:
            pass
        return [out[k] for k in sorted(out)]

    def close(self) -> None:
        if self._old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = self._old
        shutil.rmtree(self.tmp, ignore_errors=True)


def summary(
    outcomes: list[JobOutcome], expected: int, swept: list[str], *, interrupted: bool = False
) -> tuple[list[str], int]:
    """(the lines to print, the command's exit code): one line per job, then the total.

    Args:
        outcomes: the jobs that reported.
        expected: how many jobs the sweep has.
        swept: the swept keys (a job is named by its values of these).
        interrupted: Ctrl-C stopped the sweep (the jobs not run are said so, and the code is 130).
    """
    lines = []
    worst = 0
    seen = {o.num for o in outcomes}
    for o in outcomes:
        shown = [
            x.lstrip("+") for x in o.overrides if x.lstrip("+").split("=", 1)[0] in swept
        ] or o.overrides
        what = "ok" if o.code == 0 else f"exit {o.code}" + (f": {o.error}" if o.error else "")
        lines.append(f"job {o.num} ({' '.join(shown)}): {what} [{o.folder}]")
        worst = max(worst, o.code)
    missing = [k for k in range(expected) if k not in seen]
    if missing:
        if interrupted:
            lines.append(f"jobs not run (interrupted): {', '.join(map(str, missing))}")
            worst = max(worst, 130)
        else:
            lines.append(
                f"jobs that did not report (run elsewhere by the launcher? see their folders' "
                f"manifest.json): {', '.join(map(str, missing))}; counted as exit {NOT_REPORTED}"
            )
            worst = max(worst, NOT_REPORTED)
    failed = sum(o.code != 0 for o in outcomes)
    lines.append(
        f"sweep: {expected} job{'s' if expected != 1 else ''}, {len(outcomes) - failed} "
        f"ok, {failed} with a "
        f"non-zero exit{f', {len(missing)} not reported' if missing else ''}; exit {worst} (the "
        "largest)"
    )
    return lines, worst
