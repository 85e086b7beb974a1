"""What ``exclude_same_group`` does to the distractor bands of a goal bank (WAGIBench §3.1).

The paper samples distractors from "the entire set of other reference goals"; gen's default is
that pool (``exclude_same_group=false``), and ``exclude_same_group=true`` drops the reference's own
group (its script's other goals, paraphrases among them). This runs ``distractors`` both ways on a
goal bank (default: examples/goals.jsonl) with the real all-MiniLM-L6-v2 and reports, per band:
the band's similarity thresholds and candidates, the distractors' similarity to the reference,
the share of distractors from the reference's own group and of the same action type, and the
MCQs with at least one same-group distractor.

Run from the repository root (about a minute):  python bench/distractor_pool.py [--goals FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def run_once(goals: Path, out: Path, exclude: bool) -> dict[str, Any]:
    from gen.engine.runner import run_config
    from gen.formats.goals import load_goals
    from gen.generators.distractors import DistractorsConfig

    cfg = DistractorsConfig(input=str(goals), exclude_same_group=exclude, progress="off")
    result = run_config("distractors", cfg, out, quiet=True)
    rows = {r.goal_id: r for r in load_goals(goals).rows}
    by_band: dict[str, dict[str, list[float]]] = {}
    for line in (out / "distractors.jsonl").read_text().splitlines():
        rec = json.loads(line)
        ref = rows[rec["reference_id"]]
        b = by_band.setdefault(
            rec["question_type"],
            {
                k: []
                for k in (
                    "lo",
                    "hi",
                    "candidates",
                    "similarity",
                    "same_group",
                    "same_type",
                    "mcq_with_same_group",
                )
            },
        )
        b["lo"].append(rec["band_similarity"][0])
        b["hi"].append(rec["band_similarity"][1])
        b["candidates"].append(rec["band_candidates"])
        same = [rows[d["goal_id"]].group == ref.group for d in rec["distractors"]]
        b["similarity"] += [d["similarity"] for d in rec["distractors"]]
        b["same_group"] += [float(x) for x in same]
        b["same_type"] += [
            float(
                rows[d["goal_id"]].goal is not None
                and ref.goal is not None
                and rows[d["goal_id"]].goal.type == ref.goal.type
            )
            for d in rec["distractors"]
        ]
        b["mcq_with_same_group"].append(float(any(same)))

    def med(xs: list[float]) -> float:
        return round(float(np.median(xs)), 4)

    bands = {
        name: {
            "mcqs": len(v["lo"]),
            "threshold_low_median": med(v["lo"]),
            "threshold_high_median": med(v["hi"]),
            "candidates_median": med(v["candidates"]),
            "distractor_similarity_mean": round(float(np.mean(v["similarity"])), 4),
            "distractor_similarity_median": med(v["similarity"]),
            "share_distractors_same_group": round(float(np.mean(v["same_group"])), 4),
            "share_distractors_same_type": round(float(np.mean(v["same_type"])), 4),
            "share_mcqs_with_a_same_group_distractor": round(
                float(np.mean(v["mcq_with_same_group"])), 4
            ),
        }
        for name, v in sorted(by_band.items())
    }
    return {
        "exclude_same_group": exclude,
        "accepted": result.accepted,
        "rejected": result.rejected,
        "bands": bands,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--goals", default="examples/goals.jsonl")
    ap.add_argument("--out", default="bench/results/distractor_pool.json")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    goals = Path(args.goals)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run_once(goals, Path(tmp) / f"x{int(e)}", e) for e in (False, True)]
    out = {
        "machine": {
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "date": dt.datetime.now().isoformat(timespec="seconds"),
        },
        "bank": str(goals),
        "embedder": "all-MiniLM-L6-v2",
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    for r in runs:
        print(
            f"exclude_same_group={r['exclude_same_group']}: accepted {r['accepted']}, "
            f"rejected {r['rejected']}"
        )
        for name, b in r["bands"].items():
            print(
                f"  {name}: thresholds {b['threshold_low_median']}..{b['threshold_high_median']}, "
                "candidates "
                f"{b['candidates_median']}, distractor sim {b['distractor_similarity_mean']}, same "
                "group "
                f"{b['share_distractors_same_group']:.1%} of distractors "
                f"/ {b['share_mcqs_with_a_same_group_distractor']:.1%} "
                f"of MCQs, same type {b['share_distractors_same_type']:.1%}"
            )


if __name__ == "__main__":
    main()
