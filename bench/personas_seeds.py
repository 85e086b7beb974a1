"""Persona pools for many seeds on the embedded model: is a pool of N filled for every seed, and
how often, and how far, do its slots widen (issue 43.6)?

Each seed runs ``python -m gen personas n=N seed=S`` (this checkout, in its own
process, the embedded GGUF, a fresh call cache per bench run so nothing replays from an earlier
one) and reads the run's manifest: exit code, personas made of N, draws, rejects, short slots,
the widened slots (step, from, to, the reject reasons that led there) and wall time. Results are
rewritten after every seed (``"partial": true`` until the last seed is done), with the machine,
its load and the date.

Run from the repository root (about 5 minutes per seed of 50 on an idle core):
    nice -n 10 python bench/personas_seeds.py [--seeds 0 1 2 ...] [--size 50]
        [--workdir /tmp/personas_seeds] [--out bench/results/personas_seeds.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_seed(seed: int, size: int, workdir: Path, cache: Path) -> dict[str, Any]:
    out = workdir / f"seed{seed}-n{size}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "gen",
        "personas",
        f"n={size}",
        f"seed={seed}",
        f"cache_dir={cache}",
        "progress=off",
        f"hydra.run.dir={out}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = round(time.time() - t0, 1)
    row: dict[str, Any] = {"seed": seed, "size": size, "exit_code": proc.returncode}
    row["seconds"] = seconds
    manifest_file = out / "manifest.json"
    if not manifest_file.is_file():
        row["error"] = (proc.stderr.strip().splitlines() or ["no manifest"])[-1]
        return row
    manifest = json.loads(manifest_file.read_text())
    pool = manifest.get("pool", {})
    row.update(
        filled=pool.get("accepted"),
        requested=pool.get("requested"),
        attempted=pool.get("attempted"),
        rejected=pool.get("rejected"),
        short_slots=pool.get("short_slots"),
        widened=pool.get("widened", {}),
        widened_slots=pool.get("widened_slots", []),
        redrawn=manifest.get("validators", {}).get("pool.redrawn", 0),
        nationalities=len(manifest.get("distribution", {}).get("nationality", {})),
        age_bands=manifest.get("distribution", {}).get("age_band"),
        llm_calls=manifest.get("usage", {}).get("calls"),
    )
    if manifest.get("error"):
        row["error"] = manifest["error"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--size", type=int, default=50)
    ap.add_argument("--workdir", default="/tmp/personas_seeds")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "personas_seeds.json"))
    args = ap.parse_args()
    workdir = Path(args.workdir)
    cache = workdir / f"cache-{int(time.time())}"
    cache.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    result: dict[str, Any] = {
        "command": f"python -m gen personas n={args.size} seed=S (S = each seed)",
        "commit": commit,
        "machine": {
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": [round(x, 2) for x in os.getloadavg()],
            "date": dt.datetime.now().isoformat(timespec="seconds"),
        },
        "partial": True,
        "seeds": [],
    }
    out = Path(args.out)
    for seed in args.seeds:
        row = run_seed(seed, args.size, workdir, cache)
        result["seeds"].append(row)
        done = result["seeds"]
        result["summary"] = {
            "seeds_run": len(done),
            "seeds_filled": sum(r.get("filled") == args.size for r in done),
            "widened_slots": sum(len(r.get("widened_slots", [])) for r in done),
            "widened_by_step": {
                step: sum(r.get("widened", {}).get(step, 0) for r in done)
                for step in ("band", "language", "region", "any")
            },
            "seconds": round(sum(r["seconds"] for r in done), 1),
        }
        result["partial"] = len(done) < len(args.seeds)
        result["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
        out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        print(
            f"seed {seed}: {row.get('filled')}/{args.size} exit {row['exit_code']} "
            f"widened {row.get('widened')} {row['seconds']} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
