"""The README's main job, timed as a user runs it: ``/usr/bin/time -v python -m gen digital
+persona_pool=50`` from an empty call cache, in a fresh output folder.

Each run records wall, user and system seconds, peak RSS, the load average before and after, the
run's counts and the manifest's time split (where the wall time went: model generation, prompt
evaluation, embedding, checks, waiting) for the bundles and for the persona pool they drew from.
``--override`` adds options (``--override llm.grammar=first`` for the sampling of gen 0.2.0), so
two ways of running are measured side by side on the same machine.

Run from the repository root, on an otherwise idle machine (target: 8 minutes on two cores):
    python bench/main_job.py [--label L] [--override KEY=VALUE ...] [--workdir /tmp/main_job]
Results are appended to bench/results/main_job.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "main_job.json"
COMMAND = ["digital", "+persona_pool=50"]


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run ``python -m gen <args>`` under ``/usr/bin/time -v``; its exit code and resources."""
    proc = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "gen", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )

    def field(name: str) -> str:
        m = re.search(rf"^\s*{re.escape(name)}: (.+)$", proc.stderr, re.M)
        return m.group(1).strip() if m else ""

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    parts = [float(p) for p in wall.split(":")] if wall else [0.0]
    seconds = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    return {
        "exit_code": proc.returncode,
        "wall_seconds": round(seconds, 1),
        "user_seconds": float(field("User time (seconds)") or 0),
        "system_seconds": float(field("System time (seconds)") or 0),
        "peak_rss_mb": round(int(field("Maximum resident set size (kbytes)") or 0) / 1024, 1),
        "stderr_tail": proc.stderr.splitlines()[-25:] if proc.returncode else [],
    }


def split(folder: Path) -> dict[str, Any]:
    """A run folder's counts, time split and model usage, from its manifest."""
    m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    usage = m.get("llm_usage") or {}
    return {
        "counts": {k: m["counts"].get(k) for k in ("requested", "accepted", "rejected")},
        "rejects_by_reason": m["counts"].get("rejects_by_reason"),
        "time": m.get("time"),
        "llm_calls": usage.get("calls"),
        "completion_tokens": usage.get("completion_tokens"),
        "prompt_tokens_evaluated": usage.get("prompt_tokens_evaluated"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="")
    ap.add_argument("--override", nargs="*", default=[])
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "main_job")
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    a.workdir.mkdir(parents=True)
    cache = a.workdir / "cache"
    env = {**os.environ, "GEN_CACHE_DIR": str(cache), "NO_COLOR": "1"}
    load_before = os.getloadavg()
    args = [*COMMAND, *a.override, "hydra.run.dir=run", "progress=plain"]
    res = timed(args, a.workdir, env)
    row: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "label": a.label,
        "command": "python -m gen " + " ".join([*COMMAND, *a.override]),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "code": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        **res,
    }
    run = a.workdir / "run"
    if res["exit_code"] == 0:
        row["bundles"] = split(run)
        pools = sorted((run / "pools").iterdir()) if (run / "pools").is_dir() else []
        if pools:
            row["pool"] = split(pools[0])
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    old["runs"].append(row)
    RESULTS.write_text(json.dumps(old, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: row[k] for k in ("label", "exit_code", "wall_seconds", "user_seconds")}))


if __name__ == "__main__":
    main()
