"""Blind accuracy and throughput of `python -m gen nocontext` on EgoToM's released questions.

Runs the generator in process (same code path as the CLI) once per mode and prints one table:
blind accuracy per question type against chance, removals, unparseable answers, items/s, and
the machine load before and after (`uptime`).

    python bench/nocontext.py --input ../shared/data/egotom_paper --modes generate loglik \
        [--sample 150] [--threads-batch 1] [--out outputs/bench/nocontext] \
        [--json bench/results/nocontext.json]

``--threads-batch`` sets llama.cpp's prompt-processing threads for the embedded model (the
toolkit's config leaves it at llama-cpp-python's default, all cores): on a shared 2-core machine
two threads spinning against other jobs made prompt processing 5-20x slower than one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--input", default=str(ROOT.parent / "shared" / "data" / "egotom_paper"))
    ap.add_argument(
        "--modes", nargs="+", default=["generate", "loglik"], choices=["generate", "loglik"]
    )
    ap.add_argument(
        "--sample", type=int, default=None, help="seeded random subset of items (default: all)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads-batch", type=int, default=None)
    ap.add_argument("--prompt", default="full", choices=["full", "choices_only"])
    ap.add_argument(
        "--out",
        default=str(ROOT / "outputs" / "bench" / "nocontext"),
        help="run folders, one per mode",
    )
    ap.add_argument(
        "--json",
        default=str(ROOT / "bench" / "results" / "nocontext.json"),
        help="the summaries and machine load, for the README",
    )
    ap.add_argument(
        "--cache-dir", default=None, help="LLM cache (default: none, so every call is timed)"
    )
    args = ap.parse_args()

    from gen.engine.runner import run_config
    from gen.generators.nocontext import NocontextConfig
    from gen.llm import LlamaCppConfig

    results = {}
    for mode in args.modes:
        before = uptime()
        out = Path(args.out) / mode
        cfg = NocontextConfig(
            input=args.input,
            mode=mode,
            sample=args.sample,
            seed=args.seed,
            prompt=args.prompt,
            cache_dir=args.cache_dir,
            progress="plain",
            progress_every=60,
            llm=LlamaCppConfig(n_threads_batch=args.threads_batch),
        )
        result = run_config("nocontext", cfg, out)
        summary = result.manifest["nocontext"]
        results[mode] = {
            "uptime_before": before,
            "uptime_after": uptime(),
            "out": str(out),
            "threads_batch": args.threads_batch,
            "sample": args.sample,
            "summary": summary,
        }
        print(
            f"[{mode}] before: {before}\n[{mode}] after:  {results[mode]['uptime_after']}",
            flush=True,
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwrote {args.json} (cpu count {os.cpu_count()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
