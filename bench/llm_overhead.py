"""Overhead of the LLM boundary (gen.llm) over direct llama-cpp-python calls.

The same persona-bio prompts, seeds and sampling settings go through

* direct:  ``llama_cpp.Llama.create_chat_completion`` with the schema as ``json_object``;
* toolkit: ``gen.llm.make_llm(...).structured(...)`` (instructor parsing, cache key hashing,
  SQLite cache writes, OpenAI-typed responses), with a fresh, empty cache each repetition;
* cached:  the toolkit loop again on the now-filled cache (every call a hit);
* replay:  the toolkit against a zero-cost backend that serves the direct path's recorded
  responses, which isolates the toolkit's own time per call from the model's (noisy) time.

Reported: completion tokens per wall second of each path, their ratio and overhead, seconds
per call, and the speedup of the cached rerun over the uncached toolkit loop. Both paths get
one untimed warm-up call; the order of the two paths alternates across repetitions and the
medians are reported.

Run from the repository root:  python bench/llm_overhead.py [--n 12] [--reps 2] [--profile]
Targets (issue): overhead under 5 %, cached rerun at least 100x faster.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OVERHEAD_TARGET = 0.05
SPEEDUP_TARGET = 100.0
SEED = 20240611  # facts seed; call seeds derive from it
MAX_TOKENS = 200  # the persona generator's bio_max_tokens default


def build_prompts(n: int) -> list[tuple[list[dict[str, str]], int]]:
    """``n`` (messages, seed) pairs plus one extra for the warm-up, as the persona
    generator builds them (real facts, real template)."""
    from gen.generators.personas import BIO_PROMPT, PRONOUN, sample_facts
    from gen.templates import Prompts

    prompts = Prompts()
    out = []
    for i, f in enumerate(sample_facts(SEED, n + 1)):
        messages = prompts.render(BIO_PROMPT, p=f, pronoun=PRONOUN[f.gender])
        out.append((messages, SEED * 1000 + i))
    return out


# --------------------------------------------------------------------------- paths


def run_direct(llama: Any, items, schema: dict, cfg) -> dict[str, Any]:
    per_call, tokens, prompt_tokens, texts, responses = [], 0, 0, [], []
    c_loop, t_loop = time.process_time(), time.perf_counter()
    for messages, seed in items:
        t0 = time.perf_counter()
        r = llama.create_chat_completion(
            messages=messages,
            response_format={"type": "json_object", "schema": schema},
            seed=seed,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=MAX_TOKENS,
        )
        per_call.append(time.perf_counter() - t0)
        tokens += r["usage"]["completion_tokens"]
        prompt_tokens += r["usage"]["prompt_tokens"]
        texts.append(r["choices"][0]["message"]["content"])
        responses.append(r)
    wall, cpu = time.perf_counter() - t_loop, time.process_time() - c_loop
    return {
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "completion_tokens": tokens,
        "prompt_tokens": prompt_tokens,
        "calls": len(items),
        "per_call_seconds": per_call,
        "texts": texts,
        "responses": responses,
    }


def run_toolkit(llm: Any, items, schema_cls: type) -> dict[str, Any]:
    from gen.errors import LLMOutputError

    per_call, texts, failures = [], [], []
    c_loop, t_loop = time.process_time(), time.perf_counter()
    for messages, seed in items:
        t0 = time.perf_counter()
        try:
            texts.append(llm.structured(messages, schema_cls, seed=seed, max_tokens=MAX_TOKENS).bio)
        except LLMOutputError as e:  # counted, not fatal: its tokens were still generated
            texts.append(None)
            failures.append(f"{e.reason}: {e.detail}"[:200])
        per_call.append(time.perf_counter() - t0)
    wall, cpu = time.perf_counter() - t_loop, time.process_time() - c_loop
    u = llm.usage
    return {
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "completion_tokens": u.completion_tokens,
        "cached_completion_tokens": u.cached_completion_tokens,
        "prompt_tokens": u.prompt_tokens,
        "calls": len(items),
        "backend_calls": u.calls,
        "cache_hits": u.cache_hits,
        "backend_seconds": u.generation_seconds,
        "outside_backend_seconds": wall - u.generation_seconds,
        "per_call_seconds": per_call,
        "failures": failures,
        "texts": texts,
    }


class _Replay:
    """Stands in for the Llama: serves the direct path's recorded responses (by seed) at
    once, through llama-cpp-python's own OpenAI-type conversion, so only the toolkit's
    work is left to time."""

    def __init__(self, responses: dict[int, dict[str, Any]]):
        self.responses = responses

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        return self.responses[kwargs["seed"]]

    def create_chat_completion_openai_v1(self, **kwargs: Any) -> Any:
        from llama_cpp import Llama

        return Llama.create_chat_completion_openai_v1(self, **kwargs)  # type: ignore[arg-type]


def replay_overhead(
    direct: dict[str, Any],
    items,
    identity: dict[str, Any],
    cfg,
    tmpdir: Path,
    rounds: int,
    profile: bool = False,
) -> dict[str, Any]:
    """Toolkit time per call with a zero-cost backend: instructor request/parse, cache key
    hashing, SQLite write, OpenAI-type conversion. Fresh cache each round (all misses)."""
    import gen.llm as gl
    from gen.schemas.personas import Bio

    fake = _Replay({seed: r for (_, seed), r in zip(items, direct["responses"], strict=True)})
    walls = []
    prof = None
    for k in range(rounds):
        llm = gl.LLM(
            fake.create_chat_completion_openai_v1,
            identity=identity,
            sampling=cfg,
            cache=gl.Cache(tmpdir / f"replay{k}" / "llm.sqlite"),
            lock=True,
            schema_format="json_object",
        )
        if profile and k == rounds - 1:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        walls.append(run_toolkit(llm, items, Bio)["wall_seconds"])
        if prof is not None:
            prof.disable()
    out = {"rounds": rounds, "sec_per_call": [w / len(items) for w in walls]}
    if prof is not None:
        import io
        import pstats

        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(40)
        out["profile"] = buf.getvalue()
    return out


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One loop's result from per-call results (interleaved mode). Sums times and the
    direct path's counts; the toolkit's usage counters are cumulative, so the last wins."""
    out = dict(parts[-1])
    for k in ("wall_seconds", "cpu_seconds", "calls"):
        out[k] = sum(p[k] for p in parts)
    for k in ("per_call_seconds", "texts", "responses", "failures"):
        if k in out:
            out[k] = [x for p in parts for x in p[k]]
    if "backend_seconds" in out:  # toolkit
        out["outside_backend_seconds"] = out["wall_seconds"] - out["backend_seconds"]
    else:
        for k in ("completion_tokens", "prompt_tokens"):
            out[k] = sum(p[k] for p in parts)
    return out


def tps(r: dict[str, Any]) -> float:
    return r["completion_tokens"] / r["wall_seconds"] if r["wall_seconds"] else 0.0


def _bio(text: str | None) -> str | None:
    """The bio inside a direct JSON reply (None if it does not parse)."""
    try:
        return json.loads(text)["bio"] if text is not None else None
    except (ValueError, KeyError, TypeError):
        return None


# --------------------------------------------------------------------------- main


def machine_info() -> dict[str, Any]:
    import llama_cpp

    try:
        import instructor

        instructor_version = instructor.__version__
    except Exception:  # pragma: no cover
        instructor_version = None
    return {
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else None,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": sys.version.split()[0],
        "llama_cpp_python": llama_cpp.__version__,
        "instructor": instructor_version,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "loadavg_at_start": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12, help="prompts per loop (default 12)")
    ap.add_argument(
        "--reps",
        type=int,
        default=2,
        help="repetitions; the path order alternates between them (default 2)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).parent / "results" / "llm_overhead.json",
        help="JSON results file (default bench/results/llm_overhead.json)",
    )
    ap.add_argument(
        "--replay-rounds",
        type=int,
        default=20,
        help="rounds of the zero-cost-backend replay that isolates toolkit time (default 20)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="print a cProfile of one replay round (where the toolkit's time goes)",
    )
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="pair the paths per prompt (direct i, toolkit i; order flipping each "
        "prompt and rep) instead of whole loops; robust to a busy machine",
    )
    ap.add_argument(
        "--shared-model",
        action="store_true",
        help="direct calls use the toolkit's own Llama instance instead of a second one",
    )
    args = ap.parse_args(argv)
    if args.n < 1 or args.reps < 1:
        ap.error("--n and --reps must be >= 1")

    import gen.llm as gl
    from gen.schemas.personas import Bio

    info = machine_info()
    cfg = gl.LlamaCppConfig()
    model_path = gl.embedded_gguf()
    schema = Bio.model_json_schema()
    all_items = build_prompts(args.n)
    warm, items = all_items[-1], all_items[:-1]

    print(
        f"model {model_path.name}, {args.n} prompts x {args.reps} reps, "
        f"{info['nproc']} CPUs, llama-cpp-python {info['llama_cpp_python']}",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="llm_overhead_") as tmp:
        tmpdir = Path(tmp)
        # Load both models (untimed), then warm each path with one call on a spare prompt.
        t0 = time.perf_counter()
        warm_llm = gl.make_llm(cfg, cache=gl.Cache(tmpdir / "warmup.sqlite"))
        toolkit_load = time.perf_counter() - t0
        if args.shared_model:
            from gen.llm.llama_cpp import _LLAMAS

            llama = next(iter(_LLAMAS.values()))
            direct_load = 0.0
        else:
            from llama_cpp import Llama

            t0 = time.perf_counter()
            llama = Llama(model_path=str(model_path), n_ctx=cfg.n_ctx, verbose=False)
            direct_load = time.perf_counter() - t0
        run_direct(llama, [warm], schema, cfg)
        run_toolkit(warm_llm, [warm], Bio)
        print(
            f"loaded + warmed (toolkit make_llm {toolkit_load:.2f}s incl. model sha256, "
            f"direct Llama() {direct_load:.2f}s)",
            flush=True,
        )

        reps = []
        for rep in range(args.reps):
            order = ("direct", "toolkit") if rep % 2 == 0 else ("toolkit", "direct")
            cache = gl.Cache(tmpdir / f"rep{rep}" / "llm.sqlite")
            t0 = time.perf_counter()
            llm = gl.make_llm(cfg, cache=cache)
            res: dict[str, Any] = {"rep": rep, "toolkit_setup_seconds": time.perf_counter() - t0}
            if args.interleave:
                res["order"] = f"per prompt, {order[0]} first on even prompts"
                parts: dict[str, list[dict[str, Any]]] = {"direct": [], "toolkit": []}
                for i, item in enumerate(items):
                    for path in order if i % 2 == 0 else order[::-1]:
                        parts[path].append(
                            run_direct(llama, [item], schema, cfg)
                            if path == "direct"
                            else run_toolkit(llm, [item], Bio)
                        )
                res["direct"], res["toolkit"] = merge(parts["direct"]), merge(parts["toolkit"])
            else:
                res["order"] = list(order)
                for path in order:
                    res[path] = (
                        run_direct(llama, items, schema, cfg)
                        if path == "direct"
                        else run_toolkit(llm, items, Bio)
                    )
            for path in order:
                r = res[path]
                print(
                    f"  rep {rep} {path:8s} {r['wall_seconds']:7.2f}s  "
                    f"{r['completion_tokens']:5d} tok  {tps(r):6.2f} tok/s  "
                    f"(cpu {r['cpu_seconds']:.2f}s)",
                    flush=True,
                )
            # Cached rerun: a new LLM on the same (now full) cache; every call should hit.
            llm = gl.make_llm(cfg, cache=cache)
            res["cached"] = run_toolkit(llm, items, Bio)
            c = res["cached"]
            print(
                f"  rep {rep} cached   {c['wall_seconds']:7.4f}s  hits {c['cache_hits']}/"
                f"{c['backend_calls']}",
                flush=True,
            )
            d, t = res["direct"], res["toolkit"]
            res["tps_direct"] = tps(d)
            res["tps_toolkit"] = tps(t)
            res["ratio"] = res["tps_toolkit"] / res["tps_direct"]
            res["overhead"] = 1.0 - res["ratio"]
            res["cpu_ratio"] = d["cpu_seconds"] / t["cpu_seconds"]  # tokens per CPU second
            res["cached_speedup"] = t["wall_seconds"] / c["wall_seconds"]
            res["same_outputs"] = sum(
                _bio(a) == b for a, b in zip(d["texts"], t["texts"], strict=True)
            )
            res["cached_outputs_match"] = c["texts"] == t["texts"]
            reps.append(res)

        # Zero-cost backend replay of the last direct loop: the toolkit's own time per call.
        replay = replay_overhead(
            reps[-1]["direct"], items, llm.identity, cfg, tmpdir, args.replay_rounds, args.profile
        )
        if "profile" in replay:
            print("\ncProfile of one replay round (toolkit work only):")
            print(replay["profile"])

    med = statistics.median
    summary = {
        "tps_direct": med(r["tps_direct"] for r in reps),
        "tps_toolkit": med(r["tps_toolkit"] for r in reps),
        "ratio_toolkit_over_direct": med(r["ratio"] for r in reps),
        "overhead": med(r["overhead"] for r in reps),
        "ratio_per_rep": [round(r["ratio"], 4) for r in reps],
        "cpu_ratio_toolkit_over_direct": med(r["cpu_ratio"] for r in reps),
        "sec_per_call_direct": med(r["direct"]["wall_seconds"] / args.n for r in reps),
        "sec_per_call_toolkit": med(r["toolkit"]["wall_seconds"] / args.n for r in reps),
        "toolkit_outside_backend_sec_per_call": med(
            r["toolkit"]["outside_backend_seconds"] / args.n for r in reps
        ),
        "toolkit_outside_backend_share": med(
            r["toolkit"]["outside_backend_seconds"] / r["toolkit"]["wall_seconds"] for r in reps
        ),
        "toolkit_wall_seconds": med(r["toolkit"]["wall_seconds"] for r in reps),
        "cached_wall_seconds": med(r["cached"]["wall_seconds"] for r in reps),
        "cached_sec_per_call": med(r["cached"]["wall_seconds"] / args.n for r in reps),
        "cached_speedup": med(r["cached_speedup"] for r in reps),
        "identical_outputs": [f"{r['same_outputs']}/{args.n}" for r in reps],
        "replay_toolkit_sec_per_call": med(replay["sec_per_call"]),
    }
    summary["replay_overhead_estimate"] = (
        summary["replay_toolkit_sec_per_call"] / summary["sec_per_call_direct"]
    )
    summary["overhead_ok"] = summary["overhead"] < OVERHEAD_TARGET
    summary["cached_speedup_ok"] = summary["cached_speedup"] >= SPEEDUP_TARGET

    rows = [
        ("tokens/s direct", f"{summary['tps_direct']:.2f}"),
        ("tokens/s toolkit", f"{summary['tps_toolkit']:.2f}"),
        ("ratio toolkit/direct", f"{summary['ratio_toolkit_over_direct']:.4f}"),
        (
            "overhead (target < 5%)",
            f"{summary['overhead'] * 100:+.2f}%  {'OK' if summary['overhead_ok'] else 'MISS'}",
        ),
        ("per-rep ratios", ", ".join(f"{x:.3f}" for x in summary["ratio_per_rep"])),
        ("tokens/CPU-s ratio toolkit/direct", f"{summary['cpu_ratio_toolkit_over_direct']:.4f}"),
        ("s/call direct", f"{summary['sec_per_call_direct']:.3f}"),
        ("s/call toolkit", f"{summary['sec_per_call_toolkit']:.3f}"),
        (
            "toolkit time outside backend",
            f"{summary['toolkit_outside_backend_sec_per_call'] * 1e3:.2f} ms/call "
            f"({summary['toolkit_outside_backend_share'] * 100:.2f}%)",
        ),
        (
            "toolkit s/call, zero-cost backend",
            f"{summary['replay_toolkit_sec_per_call'] * 1e3:.2f} ms "
            f"(= {summary['replay_overhead_estimate'] * 100:.3f}% of a direct call)",
        ),
        ("s/call cached rerun", f"{summary['cached_sec_per_call'] * 1e3:.2f} ms"),
        (
            "cached speedup (target >= 100x)",
            f"{summary['cached_speedup']:.0f}x  {'OK' if summary['cached_speedup_ok'] else 'MISS'}",
        ),
        ("identical outputs per rep", ", ".join(summary["identical_outputs"])),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\nmedian of {args.reps} reps, {args.n} prompts each")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")

    for r in reps:  # keep the JSON small: outputs only as lengths
        for path in ("direct", "toolkit", "cached"):
            texts = r[path].pop("texts")
            r[path].pop("responses", None)
            r[path]["output_chars"] = [len(x) if x else 0 for x in texts]
    result = {
        "benchmark": "llm_overhead",
        "machine": info,
        "config": {
            "n": args.n,
            "reps": args.reps,
            "interleave": args.interleave,
            "shared_model": args.shared_model,
            "model": model_path.name,
            "n_ctx": cfg.n_ctx,
            "n_threads": cfg.n_threads,
            "temperature": cfg.temperature,
            "top_p": cfg.top_p,
            "max_tokens": MAX_TOKENS,
            "attempts": cfg.attempts,
            "facts_seed": SEED,
            "prompt": "personas/bio.jinja",
            "schema": "schemas.personas.Bio",
        },
        "replay": {k: v for k, v in replay.items() if k != "profile"},
        "load_seconds": {"toolkit_make_llm": toolkit_load, "direct_llama": direct_load},
        "targets": {"overhead_lt": OVERHEAD_TARGET, "cached_speedup_ge": SPEEDUP_TARGET},
        "loadavg_at_end": list(os.getloadavg()),
        "summary": summary,
        "reps": reps,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
