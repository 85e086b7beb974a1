"""Scale of ``python -m gen history`` (the longitudinal history bank).

For each size in --sizes (default 25k, 50k, 100k observations) a synthetic observation table is
written (participants with ~50 recordings each over 3 environments and 40 scripts, 15 %
longitudinal), then the whole generator (``gen.engine.runner.run_config``: read and validate the
table, sample every bank, write history.jsonl and WAGIBench's longitudinal_history.json) runs
in a child process of its own, so its wall time and peak RSS are its own.

    python bench/history.py [--sizes 25000 50000 100000] [--out bench/results/history.json]

Target (issue 15): 100k observations within 60 s, memory linear in the table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TIME_TARGET_S = 60
GOALS = [
    {"type": "shop", "content": "hand soap"},
    {"type": "store_memory", "content": "buy bread"},
    {"type": "entertain", "modality": "audio", "content": "calm music"},
]


def write_table(path: Path, n: int, seed: int = 0) -> None:
    r = random.Random(seed)
    people = max(1, n // 50)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            script = f"script{r.randrange(40)}"
            row = {
                "client_tag": f"rec{i:07d}",
                "scenario": script,
                "participant": f"p{r.randrange(people)}",
                "environment": f"env{r.randrange(3)}",
                "script": script,
                "longitudinal": int(script[6:]) < 6,
                "recorded_at": (
                    dt.datetime(2025, 1, 1) + dt.timedelta(minutes=r.randrange(60 * 24 * 365))
                ).isoformat(),
                "world_state": f"A person in room {i % 7} handles object {i % 11}; caption of "
                f"recording {i}.",
                "structured_goal": GOALS[i % 3],
                "context_window": {"start_s": 0.0, "end_s": 20.0},
            }
            f.write(json.dumps(row) + "\n")


CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from gen.engine.runner import run_config
from gen.generators.history import HistoryConfig
t0 = time.perf_counter()
cfg = HistoryConfig(input={table!r}, cache_dir=None, progress="off")
result = run_config("history", cfg, Path({out!r}), quiet=True)
print(json.dumps({{"seconds": time.perf_counter() - t0, "accepted": result.accepted,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "summary": result.manifest["history"]}}))
"""


def one(n: int, tmp: Path) -> dict[str, Any]:
    table = tmp / f"obs{n}.jsonl"
    write_table(table, n)
    code = CHILD.format(root=str(ROOT), table=str(table), out=str(tmp / f"run{n}"))
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "observations": n,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "table_mb": round(table.stat().st_size / 2**20, 1),
        **res,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[25_000, 50_000, 100_000])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "history.json")
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            t0 = time.perf_counter()
            runs.append(one(n, Path(tmp)))
            r = runs[-1]
            print(
                f"{n:>8} observations: {r['seconds']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB "
                f"(load {r['load_before']} -> {r['load_after']}; {time.perf_counter() - t0:.0f} s "
                "with the table)",
                flush=True,
            )
    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} {os.cpu_count()} cores",
        "python": platform.python_version(),
        "target_seconds": TIME_TARGET_S,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
