"""The two model checks of ``python -m gen scenarios`` on scenarios that pass every code rule.

A tiny writer rarely produces a scenario that reaches the model checks, so this runs them on
the project's 11 worked examples (``prompts/scenarios/examples.json``, every one passes every
code rule; tests/unit/test_scenarios.py checks that): the identification check on each camera
text the generator would check, and the semantic-leak check on each member, with the configured
model (default: the embedded SmolLM2-135M) and embedder. It answers: can this model serve as the
checker, i.e. does it pass scenarios written to the rules?

    python bench/scenarios_checks.py [--out bench/results/scenarios_checks.json] [key=value ...]

Extra ``key=value`` arguments are ScenariosConfig fields (``identify_min_cosine=0.5``); the LLM
is the embedded GGUF in process (``--threads`` for llama.cpp's threads).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from gen.engine.runner import RunContext
    from gen.generators.scenarios import ScenariosConfig
    from gen.generators.scenarios.examples import example_skeleton, examples
    from gen.generators.scenarios.model_checks import identification, semantic_leak
    from gen.generators.scenarios.stages import Unit, Writer
    from gen.llm import LlamaCppConfig

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "scenarios_checks.json"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("options", nargs="*", help="ScenariosConfig fields as key=value")
    args = ap.parse_args()
    options = dict(o.split("=", 1) for o in args.options)
    llm = LlamaCppConfig(n_threads=args.threads, n_threads_batch=args.threads)
    cfg = ScenariosConfig(llm=llm, progress="off", **options)
    ctx = RunContext("scenarios", cfg, Path(tempfile.mkdtemp()))
    w = Writer(ctx, cfg)
    rows, t0 = [], time.perf_counter()
    for i, ex in enumerate(examples()):
        sk = example_skeleton(ex)
        members = (
            [sk]
            if sk.subset == "bank"
            else [sk, replace(sk, scenario_id="adv-01", target_context="prior")]
        )
        u = Unit(
            i,
            members,
            sit=ex["situations"],
            camera=ex["camera"],
            speech=ex["speech"],
            follow=ex.get("follow_up"),
        )
        ident = identification(w, u, ex["camera"], 0)
        leaks = []
        for m in members:
            turn_2 = (
                (ex.get("follow_up") or ex["speech"])["turn_2_user"]
                if m is not members[0]
                else ex["speech"]["turn_2_user"]
            )
            leaks += semantic_leak(w, u, m, ex["speech"]["turn_1_user"], turn_2, "speech", 0)
        rows.append(
            {
                "example": f"{sk.change_type}/{sk.target_context}/{sk.subset}",
                "identification": u.identification,
                "leak": u.leak,
                "not_identifiable": [d for _, d in ident],
                "semantic_leak": [d for _, d in leaks],
            }
        )
        print(
            f"{rows[-1]['example']:<44} identified {sum(r['pass'] for r in u.identification)}/"
            f"{len(u.identification)}  leak {'yes' if leaks else 'no'}",
            flush=True,
        )
    frames = [r for row in rows for r in row["identification"]]
    summary = {
        "examples": len(rows),
        "frames": len(frames),
        "frames_identified": sum(r["pass"] for r in frames),
        "examples_passing_identification": sum(not r["not_identifiable"] for r in rows),
        "members_checked_for_leak": sum(len(r["leak"]) for r in rows),
        "members_leaking": sum(bool(x["leak"]) for r in rows for x in r["leak"]),
        "seconds": round(time.perf_counter() - t0, 1),
        "llm": ctx.llm.describe()["model"],
        "llm_usage": ctx.llm.usage.as_dict(),
        "config": {
            "identify_min_cosine": cfg.identify_min_cosine,
            "leak_targets": cfg.leak_targets,
        },
        "date": dt.date.today().isoformat(),
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "llm_usage"}))
    Path(args.out).write_text(
        json.dumps({"summary": summary, "rows": rows}, indent=1, ensure_ascii=False) + "\n"
    )
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
