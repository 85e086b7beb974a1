"""The judges and the candidate runner on the embedded SmolLM2-135M, as candidate and judge at once
(allow_same_family=true): the README's honest figures.

Steps (each a ``python -m gen`` run into ``--out``):

1. ``scenarios``: ``evaluate`` on the 10 example scenarios of ../shared/data/context_bench
   (``--trials``, baseline condition), judge sub-runs and repair turns included;
2. ``mcq``: 20 distractor MCQs (``distractors n=10``: 10 references x 2 bands), then
   ``judge kind=distractor_validity`` on them, ``audit judge=…`` and ``evaluate`` (the candidate
   answering them);
3. ``wagibench``: the WAGIBench judge as a sanity check on the same 20 MCQs: every option of every
   item is a "prediction" against the item's reference goal (``model`` = key, similar or
   dissimilar distractor), so a judge that works scores the keys 1.0 and the dissimilar ones 0.

    python bench/judge.py [--out /tmp/judge_bench] [--trials 5] [--steps scenarios,mcq,wagibench]
                          [--scenarios 10] [--goals 10]

``--scenarios k`` evaluates the first k examples, ``--goals k`` makes 2k MCQs (a quick check of the
bench itself: ``--trials 1 --scenarios 2 --goals 2``).

Writes ``bench/results/judge.json`` (``--results``) with the headline numbers and wall times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT.parent / "shared" / "data" / "context_bench" / "examples.jsonl"
SAME = ["judge=smollm2", "allow_same_family=true"]


def gen(out: Path, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[float, int]:
    """Run ``python -m gen``; stop the bench on an exit code not in ``ok`` (the audit exits 1 on
    findings)."""
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "gen", *args, f"hydra.run.dir={out}", "progress=off"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    print(f"$ gen {' '.join(args)}  -> exit {r.returncode}", flush=True)
    if r.returncode not in ok:
        print(r.stderr[-2000:], file=sys.stderr)
        raise SystemExit(r.returncode)
    return time.perf_counter() - t0, r.returncode


def summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text(encoding="utf-8"))


def wagibench_predictions(distractors: Path, path: Path) -> Path:
    """Every option of every MCQ as a prediction against its item's reference goal."""
    rows = []
    for layout in sorted(distractors.glob("wagibench_mcq_*.json")):
        band = layout.stem.removeprefix("wagibench_mcq_")
        for item in json.loads(layout.read_text(encoding="utf-8")):
            for k, goal in enumerate(item["x"]["mcq_set"]):
                rows.append(
                    {
                        "id": f"{item['meta']['item_id']}/{k}",
                        "prediction": goal,
                        "reference": item["meta"]["structured_goal"],
                        "group": item["meta"]["item_id"],
                        "model": "key" if k == item["y"] else f"{band} distractor",
                    }
                )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/judge_bench"))
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--steps", default="scenarios,mcq,wagibench")
    ap.add_argument(
        "--scenarios", type=int, default=10, help="evaluate the first k example scenarios"
    )
    ap.add_argument(
        "--goals", type=int, default=10, help="distractor MCQs of the first k goals (2 per goal)"
    )
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "judge.json")
    args = ap.parse_args()
    steps = args.steps.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "cores": os.cpu_count(),
        "trials": args.trials,
        "scenarios": args.scenarios,
        "goals": args.goals,
        "load_before": os.getloadavg()[0],
        "steps": {},
    }
    if "scenarios" in steps:
        out = args.out / "scenarios"
        seconds, _ = gen(
            out,
            "evaluate",
            f"input={EXAMPLES}",
            *SAME,
            f"trials={args.trials}",
            f"limit={args.scenarios}",
        )
        s = summary(out)
        res["steps"]["scenarios"] = {
            "seconds": round(seconds, 1),
            "primary_score": s["primary_score"],
            "baseline": s["judges"][s["primary"]]["baseline"],
        }
    distractors = args.out / f"distractors_{args.goals}"  # reused by a rerun with the same --goals
    if "mcq" in steps or "wagibench" in steps:
        if not (distractors / "distractors.jsonl").is_file():
            gen(distractors, "distractors", f"n={args.goals}")
    if "mcq" in steps:
        valid = args.out / "validity"
        v_seconds, _ = gen(valid, "judge", "kind=distractor_validity", f"input={distractors}")
        _, audit_exit = gen(
            args.out / "audit",
            "audit",
            f"input={distractors}",
            f"judge={valid}",
            "checks=[structure,judge]",
            "embeddings=false",
            ok=(0, 1),
        )
        audit = json.loads((args.out / "audit" / "audit.json").read_text(encoding="utf-8"))
        e_seconds, _ = gen(args.out / "mcq_eval", "evaluate", f"input={distractors}")
        v = summary(valid)
        res["steps"]["mcq"] = {
            "validity_seconds": round(v_seconds, 1),
            "validity": v["judges"][v["primary"]],
            "audit_exit": audit_exit,
            "audit_judge_findings": audit["summary"]["checks"]["judge"],
            "evaluate_seconds": round(e_seconds, 1),
            "evaluate": summary(args.out / "mcq_eval"),
        }
    if "wagibench" in steps:
        preds = wagibench_predictions(distractors, args.out / "wagibench_predictions.jsonl")
        out = args.out / "wagibench"
        seconds, _ = gen(out, "judge", "kind=wagibench", f"input={preds}", "variant=[reference]")
        s = summary(out)
        res["steps"]["wagibench"] = {
            "seconds": round(seconds, 1),
            "rows": s["rows"],
            "reference": s["judges"][s["primary"]]["reference"],
        }
    res["load_after"] = os.getloadavg()[0]
    args.results.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
