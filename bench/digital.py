"""The Digital Context Generator's speed against direct llama-cpp-python on the same prompts.

1. toolkit: ``digital`` runs in process on ``--n`` bundles (embedded GGUF, empty cache); every
   call it makes to llama-cpp-python is recorded (messages, schema grammar, seed, sampling).
2. direct:  the recorded calls are replayed straight into ``Llama.create_chat_completion`` —
   the same prompts, grammars and seeds, with none of the toolkit around them.
3. cached:  ``digital`` again into a new folder on the now-filled cache (records must be
   byte-identical).

Reported: seconds per bundle, completion tokens per second of the whole toolkit run (prompt
rendering, instructor, validators, merge, files) and of the direct replay, the overhead, the
cached rerun's speedup, and characters per bundle (the paper's samples average 8.9k). The
persona pool is made by code (sampled facts, a one-line bio) so the figure is the DCG alone.

Run from the repository root:  python bench/digital.py [--n 2] [--seed 0]
Target (issue 3): overhead under 5 %.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OVERHEAD_TARGET = 0.05
PAPER_CHARS = 8900


def write_pool(path: Path, n: int = 12, seed: int = 0) -> Path:
    from gen.generators.personas import sample_facts
    from gen.schemas.personas import PersonaRecord

    rows = [
        PersonaRecord(
            **f.model_dump(),
            bio=f"{f.first_name} works as {f.occupation.lower()} in "
            f"{f.home_city} and enjoys {f.interests[0]}.",
        )
        for f in sample_facts(seed, n)
    ]
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows), encoding="utf-8")
    return path


def run_digital(out: Path, pool: Path, cache: Path, n: int, seed: int):
    """One in-process ``digital`` run; the model is loaded before the clock starts."""
    from gen.engine.runner import RunContext, run_config
    from gen.generators.digital import DigitalConfig

    cfg = DigitalConfig(
        n=n, seed=seed, persona_file=str(pool), cache_dir=str(cache), progress="off"
    )
    ctx = RunContext("digital", cfg, out)
    ctx.llm  # noqa: B018 - load the GGUF outside the timed region
    t0 = time.perf_counter()
    result = run_config("digital", cfg, out, ctx=ctx, quiet=True)
    return result, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench/results/digital.json")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from llama_cpp import Llama

    recorded: list[dict[str, Any]] = []
    original = Llama.create_chat_completion_openai_v1

    def recording(self, *a: Any, **kw: Any) -> Any:
        recorded.append(kw)
        return original(self, *a, **kw)

    Llama.create_chat_completion_openai_v1 = recording  # type: ignore[method-assign]
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        pool = write_pool(tmp / "personas.jsonl")
        first, wall = run_digital(tmp / "first", pool, tmp / "cache", args.n, args.seed)
        Llama.create_chat_completion_openai_v1 = original  # type: ignore[method-assign]
        usage = first.manifest["llm_usage"]

        from gen.llm.llama_cpp import _LLAMAS

        (llama,) = _LLAMAS.values()
        direct_tokens, t0 = 0, time.perf_counter()
        for kw in recorded:
            r = llama.create_chat_completion(**{k: v for k, v in kw.items() if k != "stream"})
            direct_tokens += r["usage"]["completion_tokens"]
        direct_wall = time.perf_counter() - t0

        cached, cached_wall = run_digital(tmp / "second", pool, tmp / "cache", args.n, args.seed)
        identical = all(
            (tmp / "first" / f).read_bytes() == (tmp / "second" / f).read_bytes()
            for f in ("digital.jsonl", "rejects.jsonl", "digital_state.json")
        )
        chars = first.manifest["characters"]
    load1 = os.getloadavg()

    toolkit_tps = usage["completion_tokens"] / wall
    direct_tps = direct_tokens / direct_wall
    overhead = 1 - toolkit_tps / direct_tps
    result = {
        "date": dt.date.today().isoformat(),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": load0,
            "loadavg_after": load1,
        },
        "n": args.n,
        "accepted": first.accepted,
        "rejected": first.rejected,
        "calls": len(recorded),
        "toolkit": {
            "wall_seconds": round(wall, 2),
            "seconds_per_bundle": round(wall / args.n, 1),
            # the toolkit's own time: the run's wall time minus the time inside the model
            "outside_model_seconds": round(wall - usage["generation_seconds"], 2),
            "completion_tokens": usage["completion_tokens"],
            "tokens_per_second": round(toolkit_tps, 2),
        },
        "direct": {
            "wall_seconds": round(direct_wall, 2),
            "completion_tokens": direct_tokens,
            "tokens_per_second": round(direct_tps, 2),
        },
        "overhead": round(overhead, 4),
        "overhead_target": OVERHEAD_TARGET,
        "cached": {
            "wall_seconds": round(cached_wall, 3),
            "speedup": round(wall / cached_wall, 1),
            "byte_identical": identical,
        },
        "characters": chars,
        "paper_chars_per_bundle": PAPER_CHARS,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(
        json.dumps(
            {
                k: result[k]
                for k in ("n", "accepted", "calls", "toolkit", "direct", "overhead", "cached")
            },
            indent=2,
        )
    )
    print(f"mean characters per bundle: {chars.get('mean_chars_per_bundle')} (paper {PAPER_CHARS})")


if __name__ == "__main__":
    main()
