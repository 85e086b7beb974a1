"""Structural tells on every generator's own example output (issue 42), before and after.

Each generator that writes items with options runs on its shipped ``examples/`` input at
``seed=0`` with the code of one checkout (``--code``: the commit before issue 42's fixes for the
"before" rows, this checkout for "after"), each example as that checkout ships it. Then this
checkout's ``audit checks=[context_options]`` (check 18, ``embeddings=false``: the per-item tell
does not use the embedder) reads each output, the before outputs included: per run, its items,
the items check 18 sees (options, an answer and a visible context), the structural tells (the
answer the only option the context names, or the only one it does not) and which items.

The LLM-written outputs use the smallest settings the integration tests use (``n``, attempts),
with the embedded SmolLM2-135M and all-MiniLM-L6-v2. ``chain_wagibench`` runs the first three
steps of ``examples/chains/wagibench.yaml`` (recordings, digital, MCQs) with the digital step cut
to ``--chain-digital`` bundles (the full chain's 10 take an hour on the shared VM); it runs only
when named in ``--only``.

Run from the repository root (minutes; use nice):
    git -C /work/main worktree add --detach /tmp/before 4327209
    nice -n 10 python bench/example_tells.py --code /tmp/before --label before
    nice -n 10 python bench/example_tells.py --label after
        [--only tom candidates_items …] [--workdir /tmp/example_tells]
Rows are merged into bench/results/example_tells.json (one per run and label).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "example_tells.json"
EX = "examples"
INTRO = f"{EX}/introspect"


@dataclass
class Spec:
    """One generator run on its example: the arguments after ``python -m gen`` (paths relative to
    the checkout) and the file of its items inside the run folder."""

    name: str
    args: list[str]
    records: str
    audit_input: str = ""
    """The folder the audit reads, inside the run folder ("": the run folder)."""
    llm: bool = False
    extra: list[str] = field(default_factory=list)


SPECS = [
    Spec(
        "tom",
        ["tom", f"input={EX}/tom/timelines.jsonl", "n=2", "attempts=1", "llm.attempts=2"],
        "tom.jsonl",
        llm=True,
    ),
    Spec(
        "introspect_recording",
        ["introspect", "task=recording", f"input={INTRO}/recording.jsonl"],
        "introspect.jsonl",
    ),
    Spec(
        "introspect_emotion_intensity",
        ["introspect", "task=emotion_intensity", f"input={INTRO}/emotions.jsonl"],
        "introspect.jsonl",
    ),
    Spec(
        "introspect_tool_selection",
        [
            "introspect",
            "task=tool_selection",
            f"input={INTRO}/requests.jsonl",
            f"tools={INTRO}/tools.yaml",
        ],
        "introspect.jsonl",
    ),
    Spec(
        "introspect_proactive_timing",
        ["introspect", "task=proactive_timing", f"input={INTRO}/interruptions.jsonl"],
        "introspect.jsonl",
    ),
    Spec(
        "introspect_memory_lifespan",
        ["introspect", "task=memory_lifespan", f"input={INTRO}/memories.jsonl"],
        "introspect.jsonl",
    ),
    Spec(
        "introspect_memory_object",
        ["introspect", "task=memory_assistance", "form=object", f"input={INTRO}/memories.jsonl"],
        "introspect.jsonl",
    ),
    Spec(
        "introspect_memory_event",
        [
            "introspect",
            "task=memory_assistance",
            "form=event",
            f"input={INTRO}/memories.jsonl",
            "llm.attempts=2",
        ],
        "introspect.jsonl",
        llm=True,
    ),
    Spec(
        "candidates_items",
        ["candidates", f"input={EX}/candidates/items.jsonl", "llm.attempts=2"],
        "candidates.jsonl",
        llm=True,
    ),
    Spec(
        "candidates_recall",
        [
            "candidates",
            f"input={EX}/candidates/recall.jsonl",
            "input_format=recall",
            "llm.attempts=2",
        ],
        "candidates.jsonl",
        llm=True,
    ),
    Spec("distractors", ["distractors", f"input={EX}/goals.jsonl", "n=20"], "distractors.jsonl"),
    Spec("rerank", ["rerank", f"input={EX}/rerank/pools.jsonl"], "rerank.jsonl", llm=True),
    Spec(
        "recommend",
        [
            "recommend",
            f"input={EX}/recommend/sessions.jsonl",
            "n=1",
            "attempts=1",
            "draft_tokens=450",
            "rerank_tokens=450",
        ],
        "recommend.jsonl",
        llm=True,
    ),
    Spec(
        "scenarios",
        ["scenarios", "n=2", "attempts=1", "llm.attempts=1"],
        "scenarios.jsonl",
        llm=True,
    ),
    Spec(
        "chain_wagibench",
        ["pipeline", "n=3"],
        "mcqs/distractors.jsonl",
        audit_input="mcqs",
        llm=True,
    ),
]
OPTIONAL = {"chain_wagibench"}
"""Runs only when named in ``--only``."""


def git_head(code: Path) -> str:
    p = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=code
    )
    return p.stdout.strip() or str(code)


def small_chain(code: Path, bundles: int, workdir: Path) -> Path:
    """The checkout's wagibench chain with its digital step cut to ``bundles`` bundles and a
    persona pool of as many (at least 6, the least digital takes)."""
    steps = yaml.safe_load((code / EX / "chains" / "wagibench.yaml").read_text())
    for s in steps["steps"]:
        if s["generator"] == "digital":
            s["options"] |= {"n": bundles, "persona_pool": max(6, bundles)}  # the least it takes
    out = workdir / f"wagibench_{git_head(code)}.yaml"
    out.write_text(yaml.safe_dump(steps))
    return out


def gen(
    code: Path, args: list[str], cache: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(code), "GEN_CACHE_DIR": str(cache), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gen", *args],
        capture_output=True,
        text=True,
        cwd=code,
        env=env,
        timeout=timeout,
    )


def audit(folder: Path, out: Path, cache: Path) -> dict[str, Any]:
    """This checkout's check 18 on ``folder``: status, items seen, structural tells by item."""
    shutil.rmtree(out, ignore_errors=True)
    p = gen(
        ROOT,
        [
            "audit",
            f"input={folder}",
            "checks=[context_options]",
            "embeddings=false",
            "progress=off",
            f"hydra.run.dir={out}",
        ],
        cache,
        1800,
    )
    if not (out / "audit.json").is_file():
        return {"audit_exit": p.returncode, "audit_error": p.stderr.strip().splitlines()[-1:]}
    rep = json.loads((out / "audit.json").read_text())
    c = next(c for c in rep["checks"] if c["key"] == "context_options")
    tells = [
        {"item": item, "kind": f["kind"], "question_type": f["numbers"].get("question_type")}
        for f in rep["findings"]
        if f["check"] == "context_options" and f["kind"].startswith("answer_only_")
        for item in f["items"]
    ]
    stats = c.get("stats") or {}
    return {
        "audit_exit": p.returncode,
        "check": c["status"] if c["status"] == "ran" else f"{c['status']}: {c.get('reason', '')}",
        "items_with_context": stats.get("items", 0),
        "structural_tells": len(tells),
        "tells": tells,
        "items_with_odd_one": sum(
            r.get("items_with_odd_one", 0) for r in (stats.get("per_question_type") or {}).values()
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose generators run")
    ap.add_argument("--label", required=True, help="before | after (the row's key with the run)")
    ap.add_argument("--only", nargs="+", default=None, help="run names (default: all but optional)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/example_tells"))
    ap.add_argument("--chain-digital", type=int, default=2, help="chain_wagibench: digital bundles")
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args()
    code = args.code.resolve()
    work = args.workdir / args.label
    work.mkdir(parents=True, exist_ok=True)
    cache = args.workdir / f"cache_{args.label}"  # the LLM cache of this label's runs only
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"runs": []}
    results.update(
        {
            "machine": f"{platform.node() or 'vm'}: {os.cpu_count()} cores, "
            f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB",
            "python": platform.python_version(),
            "audit_code": git_head(ROOT),
        }
    )
    names = set(args.only) if args.only else {s.name for s in SPECS} - OPTIONAL
    unknown = names - {s.name for s in SPECS}
    if unknown:
        ap.error(f"--only: unknown runs {sorted(unknown)}")
    for spec in (s for s in SPECS if s.name in names):
        out = work / spec.name
        shutil.rmtree(out, ignore_errors=True)
        run_args = list(spec.args)
        if spec.name == "chain_wagibench":
            run_args.append(f"chain={small_chain(code, args.chain_digital, args.workdir)}")
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        p = gen(
            code, [*run_args, "seed=0", "progress=off", f"hydra.run.dir={out}"], cache, args.timeout
        )
        seconds = time.perf_counter() - t0
        records = out / spec.records
        row: dict[str, Any] = {
            "run": spec.name,
            "label": args.label,
            "code": git_head(code),
            "command": "python -m gen " + " ".join(run_args) + " seed=0",
            "date": dt.date.today().isoformat(),
            "llm": spec.llm,
            "exit": p.returncode,
            "seconds": round(seconds, 1),
            "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2),
            "items": sum(1 for x in records.read_text().splitlines() if x.strip())
            if records.is_file()
            else 0,
        }
        if p.returncode not in (0, 1) or not records.is_file():
            row["error"] = p.stderr.strip().splitlines()[-3:]
        if row["items"]:  # the audit refuses an empty bank (exit 2)
            row |= audit(out / spec.audit_input, work / f"audit_{spec.name}", cache)
        print(json.dumps(row), flush=True)
        if RESULTS.is_file():  # another label's run may have written meanwhile
            results["runs"] = json.loads(RESULTS.read_text())["runs"]
        results["runs"] = [
            r for r in results["runs"] if (r["run"], r["label"]) != (spec.name, args.label)
        ] + [row]
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
