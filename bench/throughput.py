"""Throughput of the same workloads on the in-process model and on llama-server with 1, 2, 4 slots.

Workloads (each a real generator run into a temp folder, empty cache):
* ``digital``: ``--n`` DCG bundles (a code-made persona pool, as in bench/digital.py);
* ``tom``: ``--clips`` clips of the project's own narration fixture (skipped if absent).

Backends: (a) ``llm=smollm2`` (llama-cpp-python in process, one call at a time),
(b) ``llm=llama_server`` with ``parallel`` 1, 2 and 4 (the toolkit keeps that many calls in
flight). Each configuration runs in its own process, so memory is per configuration:
``peak_rss_mb`` is the largest single process (the toolkit or its server, from wait4) and
``peak_tree_rss_mb`` the peak of their sum (sampled from /proc every 0.25 s). Reported: wall
seconds, seconds per bundle/clip and per LLM call, bundles per hour, completion and prompt tokens,
memory, and whether the records equal the one-slot server's.

Run from the repository root:  python bench/throughput.py [--n 4] [--clips 4] [--slots 1 2 4]
[--workloads digital tom] Target (issue 9): llama_server with 4 slots gives at least 1.5x the
bundles per hour of (a). Issue 21 (tom): the same clips with prompt-prefix reuse (saved prefix
states in process, one slot per worker on the server) against the same configurations without it
(``*_before``: ``llm.prefix_states=0``, ``llm.slot_affinity=false``): questions per hour, prompt
tokens evaluated per question, and whether the records are byte-identical.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET = 1.5
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
TOM_FIXTURE = ROOT / "tests" / "fixtures" / "tom"


class TreeRSS(threading.Thread):
    """Samples the summed RSS of a process and its descendants (toolkit + server) from /proc."""

    def __init__(self, pid: int, every: float = 0.25):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak_kb = pid, every, 0
        self._done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._done.wait(self.every):
            parents: dict[int, int] = {}
            rss: dict[int, int] = {}
            for d in Path("/proc").iterdir():
                if d.name.isdigit():
                    try:
                        stat = (d / "stat").read_text()
                        parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
                        rss[int(d.name)] = int((d / "statm").read_text().split()[1]) * PAGE_KB
                    except (OSError, ValueError, IndexError):
                        continue
            tree, frontier = {self.pid}, [self.pid]
            while frontier:
                kids = [p for p, pp in parents.items() if pp in frontier and p not in tree]
                tree.update(kids)
                frontier = kids
            self.peak_kb = max(self.peak_kb, sum(rss.get(p, 0) for p in tree))

    def stop(self) -> None:
        self._done.set()
        self.join()


def one(
    workload: str, llm_args: list[str], n: int, out: Path, cache: Path, pool: Path | None
) -> dict[str, Any]:
    """One configuration in a child process (its own peak RSS), timed from outside."""
    args = [
        sys.executable,
        "-m",
        "gen",
        workload,
        f"n={n}",
        "seed=0",
        "progress=off",
        f"hydra.run.dir={out}",
        *llm_args,
    ]
    if workload == "digital":
        args.append(f"persona_file={pool}")
    else:
        inputs = sorted(TOM_FIXTURE.glob("*.json")) + sorted(TOM_FIXTURE.glob("*.jsonl"))
        args.append(f"input={inputs[0]}")
    env = dict(os.environ, GEN_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1")
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.stderr"
    t0 = time.perf_counter()
    with open(log, "wb") as err:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        tree = TreeRSS(proc.pid)
        # wait4 gives this child's own rusage; its ru_maxrss is the larger of the toolkit's
        # and of the children it reaped (the server), i.e. this configuration's alone.
        _, status, usage_ = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        tree.stop()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": log.read_text(errors="replace")[-1500:], "wall_seconds": wall}
    manifest = json.loads((out / "manifest.json").read_text())
    usage = manifest["llm_usage"]
    records = (out / f"{workload}.jsonl").read_bytes()
    questions = records.count(b"\n")  # tom: one record per question
    return {
        "wall_seconds": round(wall, 1),
        "run_seconds": manifest["wall_seconds"],
        "accepted": manifest["counts"]["accepted"],
        "rejected": manifest["counts"]["rejected"],
        "units": n,
        "seconds_per_unit": round(manifest["wall_seconds"] / n, 1),
        "units_per_hour": round(3600 * n / manifest["wall_seconds"], 2),
        "completion_tokens": usage["completion_tokens"],
        "prompt_tokens": usage["prompt_tokens"],
        "calls": usage["calls"],
        "seconds_per_call": round(manifest["wall_seconds"] / max(1, usage["calls"]), 2),
        "tokens_per_second": round(usage["completion_tokens"] / manifest["wall_seconds"], 2),
        "questions": questions,
        "questions_per_hour": round(3600 * questions / manifest["wall_seconds"], 1),
        "prompt_tokens_evaluated": usage.get("prompt_tokens_evaluated"),
        "prompt_reuse_ratio": usage.get("prompt_reuse_ratio"),
        "prompt_tokens_evaluated_per_question": (
            round(usage["prompt_tokens_evaluated"] / questions)
            if questions and usage.get("prompt_tokens_evaluated") is not None
            else None
        ),
        "peak_rss_mb": round(usage_.ru_maxrss / 1024, 1),
        "peak_tree_rss_mb": round(tree.peak_kb / 1024, 1),
        "records_sha256": hashlib.sha256(records).hexdigest(),
    }


def prompt_limit(tokens: int = 2900) -> dict[str, Any]:
    """The physical limit: prompt tokens per second of the embedded model on one fresh long
    prompt (no reuse), in this process."""
    from llama_cpp import Llama

    from gen.llm.llama_cpp import embedded_gguf

    llama = Llama(model_path=str(embedded_gguf()), n_ctx=4096, verbose=False)
    line = " C picks a cup from the shelf and puts it on the table."
    ids = llama.tokenize(("Narrations:" + line * 300).encode())[:tokens]
    t0 = time.perf_counter()
    llama.eval(ids)
    seconds = time.perf_counter() - t0
    llama.close()
    return {
        "prompt_tokens": len(ids),
        "seconds": round(seconds, 2),
        "prompt_tokens_per_second": round(len(ids) / seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=4, help="DCG bundles per configuration")
    ap.add_argument("--clips", type=int, default=4, help="tom clips per configuration")
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--workloads", nargs="+", default=["digital", "tom"])
    ap.add_argument("--out", default="bench/results/throughput.json")
    args = ap.parse_args()

    from bench.digital import write_pool

    configs = [("in_process", ["llm=smollm2"])] + [
        (f"llama_server_{k}", ["llm=llama_server", f"llm.parallel={k}"]) for k in args.slots
    ]
    # issue 21: prompt-prefix reuse against the same runs without it, side by side
    before = [
        ("in_process_before", ["llm=smollm2", "llm.prefix_states=0"]),
        (
            f"llama_server_{max(args.slots)}_before",
            ["llm=llama_server", f"llm.parallel={max(args.slots)}", "llm.slot_affinity=false"],
        ),
    ]
    results: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": os.getloadavg(),
        },
        "workloads": {},
    }
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        pool = write_pool(tmp / "personas.jsonl")
        for workload in args.workloads:
            if workload == "tom" and not any(TOM_FIXTURE.glob("*")):
                continue
            n = args.n if workload == "digital" else args.clips
            rows = {}
            for name, llm_args in before + configs if workload == "tom" else configs:
                print(f"[{workload}] {name} ...", flush=True)
                rows[name] = one(
                    workload,
                    llm_args,
                    n,
                    tmp / workload / name,
                    tmp / workload / name / "cache",
                    pool,
                )
                shown = (
                    "wall_seconds",
                    "units_per_hour",
                    "calls",
                    "seconds_per_call",
                    "tokens_per_second",
                    "peak_rss_mb",
                    "peak_tree_rss_mb",
                    "error",
                )
                print(f"  {json.dumps({k: rows[name].get(k) for k in shown})}", flush=True)
            base = rows["in_process"].get("units_per_hour")
            for name, r in rows.items():  # the gain of prefix reuse (tom)
                was = rows.get(name + "_before", {}).get("questions_per_hour")
                if was and r.get("questions_per_hour"):
                    r["questions_per_hour_vs_before"] = round(r["questions_per_hour"] / was, 2)
            if "in_process_before" in rows and rows["in_process_before"].get("questions_per_hour"):
                for r in rows.values():
                    if r.get("questions_per_hour"):
                        r["questions_per_hour_vs_in_process_before"] = round(
                            r["questions_per_hour"]
                            / rows["in_process_before"]["questions_per_hour"],
                            2,
                        )
            one_slot = rows.get("llama_server_1", {}).get("records_sha256")
            for r in rows.values():
                if base and r.get("units_per_hour"):
                    r["speedup_vs_in_process"] = round(r["units_per_hour"] / base, 2)
                if one_slot and "records_sha256" in r:
                    r["records_equal_one_slot"] = r["records_sha256"] == one_slot
            for name, r in rows.items():
                was = rows.get(name + "_before", {}).get("records_sha256")
                if was and "records_sha256" in r:
                    r["records_equal_before"] = r["records_sha256"] == was
            results["workloads"][workload] = rows
    if "tom" in results["workloads"]:
        results["physical_limit"] = prompt_limit()
    results["machine"]["loadavg_after"] = os.getloadavg()
    results["target"] = {"speedup": TARGET}
    for workload, rows in results["workloads"].items():
        best = rows.get(f"llama_server_{max(args.slots)}", {}).get("speedup_vs_in_process")
        results["target"][workload] = {"speedup": best, "met": (best or 0) >= TARGET}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results["target"]))


if __name__ == "__main__":
    main()
