"""How ``audit`` scales: wall time and peak RSS on synthetic banks of 30k, 100k and 1M items.

The bank (``bench/synthetic_bank.py``) is generated once per format, size and seed (``--seed``), as
a folder of EgoToM CSVs and as one JSONL of tom-like MCQ records, with EgoToM's text lengths and a
few plants that give the checks work.

Each configuration runs ``python -m gen audit`` (every check) in its own process under
``/usr/bin/time -v``: wall time, CPU time (the audit's worker processes included) and the peak RSS
of its largest process; ``peak_rss_all_processes_mb`` is the largest sum over the audit and its
workers (``workers=2``: the text check's process and its pool), sampled every half second, pages
the forked workers share with their parent counted in each (an upper bound);
``peak_pss_all_processes_mb`` the largest sum of their proportional sets (each shared page split
among its sharers: what they use together), sampled every five seconds; ``processes`` each one's
peak resident set and when it was first and last seen.
With embeddings, the embedding cache starts empty (``--warm`` keeps it) and MiniLM runs on one
torch thread (``--embedder-threads``): on the shared 2-core VM two threads only contend.
``--code`` runs another checkout's audit (the commit before, for a before/after row).

Run from the repository root (long: the text gates tag every option; use nice; 1M last):
    nice -n 10 python bench/audit_scale.py [--sizes 30000 100000 1000000] [--formats csv jsonl]
        [--embeddings-sizes 30000 100000] [--no-plain] [--workdir /tmp/audit_scale] [--label L]
        [--code /path/to/checkout]
Results are merged into bench/results/audit_scale.json (one row per format, size, embeddings and
label). Targets: 100k items well under 2 GB peak RSS; 1M items completes with bounded memory.
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
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "audit_scale.json"

from synthetic_bank import bank  # noqa: E402  (bench/ is the script's folder)


def _time_v(stderr: str) -> dict[str, float]:
    def grab(label: str) -> str:
        m = re.search(rf"^\s*{re.escape(label)}: (.+)$", stderr, re.M)
        return m.group(1).strip() if m else ""

    wall = grab("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    parts = [float(x) for x in wall.split(":")] if wall else [0.0]
    seconds = sum(p * 60**k for k, p in enumerate(reversed(parts)))
    return {
        "wall_seconds": round(seconds, 1),
        "peak_rss_mb": round(float(grab("Maximum resident set size (kbytes)") or 0) / 1024, 1),
        "user_seconds": float(grab("User time (seconds)") or 0),
        "system_seconds": float(grab("System time (seconds)") or 0),
    }


def _tree_memory(
    p: subprocess.Popen[str], every: float = 0.5, pss_every: int = 10
) -> dict[str, Any]:
    """Wait for ``p``, sampling the audit's processes (it and its workers; /usr/bin/time reports
    the largest single one) every ``every`` seconds: the largest sum of their resident sets
    (pages a forked worker shares with its parent counted in each: an upper bound), every
    ``pss_every``-th sample the largest sum of their proportional sets (a shared page split among
    its sharers: the memory they use together), and per process its peak resident set and when
    it was first and last seen (seconds from the start), to tell which check's process it was."""
    import psutil

    peak = pss_peak = 0
    seen: dict[int, dict[str, float]] = {}
    start = time.monotonic()
    k = 0
    while p.poll() is None:
        try:
            procs = psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            procs = []
        total = pss = 0
        now = round(time.monotonic() - start, 1)
        for q in procs:  # /usr/bin/time itself is tiny; its child is the audit
            try:
                rss = q.memory_info().rss
                if k % pss_every == 0:
                    pss += q.memory_full_info().pss
            except psutil.Error:
                continue
            total += rss
            row = seen.setdefault(q.pid, {"first_s": now, "peak_rss_mb": 0.0})
            row["last_s"] = now
            row["peak_rss_mb"] = max(row["peak_rss_mb"], round(rss / 2**20, 1))
        peak = max(peak, total)
        pss_peak = max(pss_peak, pss)
        k += 1
        time.sleep(every)
    return {
        "peak_rss_all_processes_mb": round(peak / 2**20, 1),
        "peak_pss_all_processes_mb": round(pss_peak / 2**20, 1),
        "processes": sorted(
            ({"pid": pid, **row} for pid, row in seen.items() if row["peak_rss_mb"] >= 100),
            key=lambda r: r["first_s"],
        ),
    }


def _cpu_model() -> str:
    """The processor's model name: rows from different VMs of one size are not comparable."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_audit(
    path: Path, embeddings: bool, out: Path, cache: Path, code: Path, extra: list[str], cold: bool
) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    if cold:
        shutil.rmtree(cache, ignore_errors=True)
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "gen",
        "audit",
        f"input={path}",
        f"embeddings={str(embeddings).lower()}",
        f"hydra.run.dir={out}",
        f"cache_dir={cache}",
        "progress=off",
        *extra,
    ]
    load = os.getloadavg()[0]
    size = sum(f.stat().st_size for f in (path.rglob("*") if path.is_dir() else [path]))
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        # a 1M-item bank is 4.7 GB, over the default cap of one input (2 GiB)
        "GEN_MAX_INPUT_BYTES": str(max(size + 1, 2**31)),
    }
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=code, env=env)
        memory = _tree_memory(p)
        err.seek(0)
        stderr = err.read()
    row: dict[str, Any] = {
        "exit_code": p.returncode,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        **_time_v(stderr),
        **memory,
    }
    report = out / "audit.json"
    if report.is_file():
        rep = json.loads(report.read_text())
        row["findings"] = rep["summary"]["by_severity"]
        row["check_seconds"] = {
            c["key"]: c["seconds"] for c in rep["checks"] if c["status"] == "ran"
        }
        if rep.get("embedding"):  # texts asked for, and computed (each distinct text once)
            row["embedding"] = rep["embedding"]
        row["findings_by_check"] = {
            c["key"]: sum(c["findings"].values()) for c in rep["checks"] if c["findings"]
        }
    else:
        row["stderr"] = stderr[-2000:]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[30_000, 100_000, 1_000_000])
    ap.add_argument("--formats", nargs="+", default=["csv", "jsonl"], choices=["csv", "jsonl"])
    ap.add_argument(
        "--embeddings-sizes",
        type=int,
        nargs="*",
        default=[30_000, 100_000],
        help="sizes also run with embeddings=true (cold embedding cache)",
    )
    ap.add_argument("--no-plain", action="store_true", help="skip the embeddings=false runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/audit_scale"))
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--label", default="", help="a note stored with each row (e.g. the commit)")
    ap.add_argument(
        "--code",
        type=Path,
        default=ROOT,
        help="the checkout whose audit runs (another commit: before/after)",
    )
    ap.add_argument(
        "--warm", action="store_true", help="keep the embedding cache of the previous run"
    )
    ap.add_argument(
        "--embedder-threads",
        type=int,
        default=1,
        help="torch threads of the embedder (1: on a shared 2-core machine more threads only "
        "contend)",
    )
    args = ap.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"runs": []}
    results.update(
        {
            "machine": f"{platform.node() or 'vm'}: {os.cpu_count()} cores, "
            f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB",
            "python": platform.python_version(),
        }
    )
    for n in sorted(args.sizes):
        for fmt in args.formats:
            path = bank(fmt, n, args.seed, args.workdir)
            if args.generate_only:
                continue
            for emb in ([] if args.no_plain else [False]) + (
                [True] if n in args.embeddings_sizes else []
            ):
                out = args.workdir / "runs" / f"{fmt}_{n}_{'emb' if emb else 'noemb'}"
                row = {
                    "format": "egotom_csv" if fmt == "csv" else "mcq_jsonl",
                    "items": n,
                    "embeddings": emb,
                    "input_mb": round(
                        sum(
                            p.stat().st_size for p in (path.rglob("*") if path.is_dir() else [path])
                        )
                        / 2**20,
                        1,
                    ),
                    "date": dt.date.today().isoformat(),
                    "cpu": _cpu_model(),
                    "label": args.label,
                    "code": subprocess.run(
                        ["git", "rev-parse", "--short", "HEAD"],
                        capture_output=True,
                        text=True,
                        cwd=args.code,
                    ).stdout.strip()
                    or str(args.code),
                    "embedding_cache": ("warm" if args.warm else "cold") if emb else None,
                    **run_audit(
                        path,
                        emb,
                        out,
                        args.workdir / "cache",
                        args.code,
                        [f"embedder.threads={args.embedder_threads}"] if emb else [],
                        cold=not args.warm,
                    ),
                }
                print(json.dumps(row), flush=True)
                results["runs"] = [
                    r
                    for r in results["runs"]
                    if (r["format"], r["items"], r["embeddings"], r.get("label", ""))
                    != (row["format"], n, emb, args.label)
                ] + [row]
                RESULTS.parent.mkdir(parents=True, exist_ok=True)
                RESULTS.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
