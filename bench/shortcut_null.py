"""Calibration under the null of the audit's choice-only shortcut test (``checks/shortcut.py``).

The check runs ``shortcut_cv`` (a conditional logit over option features, ``shortcut_folds``-fold
cross-validation repeated ``shortcut_repeats`` times; ``correct`` is each item's hit rate averaged
over the repeats) and tests ``k = round(sum(correct))`` with a one-sided exact binomial at
``p0 = mean(1/len(options))``. Cross-validated hits are dependent (every fold's model is trained on
the other folds' answers), so whether that binomial p-value is valid is an empirical question.

Null banks: EgoToM's real option sets (``../shared/data/egotom_paper``, loaded by the audit's own
loader, :func:`gen.kinds.mcq.load_banks`, grouped like the check, :meth:`AuditData.by_type`), each
item's options kept exactly and its answer re-drawn uniformly at random (seeded per draw and bank).
The classifier's features are symmetric in the options (no position feature), so the answer carries
no information the options could predict: the null holds exactly. Per draw and bank, the p-value
the check computes (``shortcut_cv`` + ``binom_greater``, default ``AuditConfig``, ``seed`` = --seed
+ draw), and the same with ``shortcut_repeats=1`` (one split). Banks: every question type with at
least ``shortcut_min_items`` items (the whole type, as the audit tests it), and small banks: seeded
random subsets of 40 and 100 items of one type (--small-type, default actions, 4 options).

Reported per configuration: tests, the share of p < 0.05 and p < 0.01 (95 % Wilson intervals), the
mean and variance of the hit count (the averaged sum, before rounding) against the binomial's
n·p0 and n·p0·(1−p0) (``var_ratio``: the variance of the standardised count, 1 for a binomial;
pooled over banks of different sizes only the standardised moments are given), and the KS statistic
of the p-values against uniform (the binomial p is discrete and one-sided, so even a perfect
binomial count gives a KS distance and a rejection rate below the nominal level; the mid-p, P(X > k)
+ P(X = k)/2, is reported too and is close to uniform for a true binomial).

--perm also prototypes a permutation p-value (answers re-drawn B times, the same CV rerun,
p = (1 + #{perm hits >= observed}) / (B + 1)) and times it per test on the 706-item pooled bank
and on 100 items: naively (``shortcut_cv`` per permutation) and with the features computed once.

Run from the repository root, niced (the machine is shared); ~1.5 s per draw of all banks on an
idle core, the JSON is rewritten every --save-every draws so a stopped run keeps its results:

    nice -n 10 python bench/shortcut_null.py [--draws 400] [--minutes 30] [--seed 0] \
        [--input ../shared/data/egotom_paper] [--small-type actions] [--small-sizes 40 100] \
        [--perm] [--perm-b 99] [--json bench/results/shortcut_null.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def load_types(path: Path) -> dict[str, list[Any]]:
    """The items the shortcut check tests, per question type, read as ``gen audit input=`` reads
    them."""
    from gen.generators.audit.data import AuditData
    from gen.kinds.mcq import load_banks

    banks = load_banks(path)
    data = AuditData(items=[it for b in banks for it in b.items], banks=banks)
    return {q: [it for _, it in xs] for q, xs in data.by_type().items()}


def redraw(items: list[Any], rng: np.random.Generator) -> list[Any]:
    """The same option sets, each answer drawn uniformly among the item's options."""
    return [it.model_copy(update={"answer": int(rng.integers(len(it.options)))}) for it in items]


def midp(k: int, n: int, p0: float) -> float:
    from scipy.stats import binom

    return float(binom.sf(k, n, p0) + 0.5 * binom.pmf(k, n, p0))


def one_test(items: list[Any], cfg: Any, seed: int) -> dict[str, Any]:
    """Exactly the check's statistic and p-value for one bank of one question type."""
    from gen.generators.audit.checks.shortcut import shortcut_cv
    from gen.generators.audit.stats import binom_greater

    n = len(items)
    p0 = float(np.mean([1 / len(it.options) for it in items]))
    out = shortcut_cv(items, cfg, seed)
    hits = float(out["correct"].sum())
    k = int(round(hits))
    return {
        "n": n,
        "p0": p0,
        "hits": hits,
        "k": k,
        "p": float(binom_greater(k, n, p0)),
        "midp": midp(k, n, p0),
    }


def summarise(tests: list[dict[str, Any]]) -> dict[str, Any]:
    from scipy.stats import kstest

    from gen.stats import wilson

    m = len(tests)
    if not m:
        return {"tests": 0}
    p = np.array([t["p"] for t in tests])
    mp = np.array([t["midp"] for t in tests])
    hits = np.array([t["hits"] for t in tests])
    ks = np.array([t["k"] for t in tests], dtype=float)
    n = np.array([t["n"] for t in tests], dtype=float)
    p0 = np.array([t["p0"] for t in tests])
    exp_mean, exp_var = float(np.mean(n * p0)), float(np.mean(n * p0 * (1 - p0)))
    z = (hits - n * p0) / np.sqrt(n * p0 * (1 - p0))  # the hit count in binomial sd from n·p0
    mixed = (
        len(set(n)) > 1 or len(set(p0)) > 1
    )  # pooled banks: only the standardised moments mean something

    def rate(x: np.ndarray, level: float) -> dict[str, Any]:
        c = int((x < level).sum())
        lo, hi = wilson(c, m)
        return {"count": c, "rate": round(c / m, 4), "ci95": [round(lo, 4), round(hi, 4)]}

    return {
        "tests": m,
        "n": sorted({int(x) for x in n}),
        "p0": round(float(p0.mean()), 4),
        "fpr_05": rate(p, 0.05),
        "fpr_01": rate(p, 0.01),
        "midp_fpr_05": rate(mp, 0.05),
        "midp_fpr_01": rate(mp, 0.01),
        "hits_mean": None if mixed else round(float(hits.mean()), 3),
        "binom_mean": None if mixed else round(exp_mean, 3),
        "hits_var": round(float(hits.var(ddof=1)), 3) if m > 1 and not mixed else None,
        "rounded_k_var": round(float(ks.var(ddof=1)), 3) if m > 1 and not mixed else None,
        "binom_var": None if mixed else round(exp_var, 3),
        "z_mean": round(float(z.mean()), 3),
        "z_var": round(float(z.var(ddof=1)), 3) if m > 1 else None,
        "var_ratio": round(float(z.var(ddof=1)), 3) if m > 1 else None,
        "ks_p_vs_uniform": round(float(kstest(p, "uniform").statistic), 4),
        "ks_midp_vs_uniform": round(float(kstest(mp, "uniform").statistic), 4),
        "mean_p": round(float(p.mean()), 4),
    }


def reference_binomial(n: int, p0: float, reps: int, rng: np.random.Generator) -> dict[str, Any]:
    """What a true binomial count gives with the same test (the discreteness floor)."""
    from scipy.stats import binom, kstest

    k = rng.binomial(n, p0, size=reps)
    p = binom.sf(k - 1, n, p0)
    mp = binom.sf(k, n, p0) + 0.5 * binom.pmf(k, n, p0)
    return {
        "n": n,
        "p0": round(p0, 4),
        "reps": reps,
        "fpr_05": round(float((p < 0.05).mean()), 4),
        "fpr_01": round(float((p < 0.01).mean()), 4),
        "exact_size_05": round(_size(n, p0, 0.05), 4),
        "exact_size_01": round(_size(n, p0, 0.01), 4),
        "ks_p_vs_uniform": round(float(kstest(p, "uniform").statistic), 4),
        "ks_midp_vs_uniform": round(float(kstest(mp, "uniform").statistic), 4),
    }


def _size(n: int, p0: float, level: float) -> float:
    """Exact probability under Binomial(n, p0) that the one-sided binomial p-value is below
    level."""
    from scipy.stats import binom

    ks = np.arange(n + 1)
    p = binom.sf(ks - 1, n, p0)
    return float(binom.pmf(ks[p < level], n, p0).sum())


# ---- permutation prototype (bench only) ----


def perm_pvalue(items: list[Any], cfg: Any, seed: int, B: int, naive: bool) -> dict[str, Any]:
    """Permutation p-value of the check's statistic: answers re-drawn B times, same CV, same
    folds."""
    from gen.generators.audit.checks.shortcut import (
        cv_hits,
        folds_for,
        one_blas_thread,
        option_features,
        option_vocab,
        shortcut_cv,
    )

    rng = np.random.default_rng([seed, 7])
    t0 = time.perf_counter()
    if naive:
        observed = float(shortcut_cv(items, cfg, seed)["correct"].sum())
        perms = [
            float(shortcut_cv(redraw(items, rng), cfg, seed)["correct"].sum()) for _ in range(B)
        ]
    else:
        with one_blas_thread():
            F, mask, _ = option_features(items, option_vocab(items))
            folds_list = [
                folds_for(items, cfg.shortcut_folds, (seed, r)) for r in range(cfg.shortcut_repeats)
            ]
            kopt = np.array([len(it.options) for it in items])

            def hits(y: np.ndarray) -> float:
                return float(
                    cv_hits(F, mask, y, folds_list, cfg.shortcut_folds, cfg.shortcut_l2)[1].sum()
                    / len(folds_list)
                )

            observed = hits(np.array([it.answer for it in items]))
            perms = [hits(rng.integers(kopt)) for _ in range(B)]
    secs = time.perf_counter() - t0
    p = (1 + sum(h >= observed - 1e-9 for h in perms)) / (B + 1)
    return {
        "n": len(items),
        "B": B,
        "naive": naive,
        "observed_hits": round(observed, 2),
        "p": round(p, 4),
        "seconds": round(secs, 2),
        "seconds_per_cv": round(secs / (B + 1), 3),
    }


def perm_costs(types: dict[str, list[Any]], cfg: Any, B: int, seed: int) -> dict[str, Any]:
    pooled = [it for xs in types.values() for it in xs]
    rng = np.random.default_rng([seed, 99])
    null_pooled = redraw(pooled, rng)
    small = redraw(
        [types["actions"][i] for i in rng.choice(len(types["actions"]), 100, replace=False)], rng
    )
    out: dict[str, Any] = {}
    for name, items in (("pooled_706", null_pooled), ("actions_100", small)):
        for naive in (False, True):
            b = B if not naive else max(9, B // 10)  # the naive path is timed on fewer permutations
            r = perm_pvalue(items, cfg, seed, b, naive)
            r["seconds_per_test_at_B"] = round(r["seconds_per_cv"] * (B + 1), 1)
            out[f"{name}_{'naive' if naive else 'features_once'}"] = r
            print(f"[perm] {name} naive={naive}: {r}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--input", default=str(ROOT.parent / "shared" / "data" / "egotom_paper"))
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument(
        "--minutes", type=float, default=30.0, help="stop starting draws after this long"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small-type", default="actions")
    ap.add_argument("--small-sizes", type=int, nargs="*", default=[40, 100])
    ap.add_argument(
        "--repeats", type=int, nargs="+", default=[5, 1], help="shortcut_repeats values compared"
    )
    ap.add_argument("--save-every", type=int, default=20)
    ap.add_argument("--perm", action="store_true", help="also time the permutation-test prototype")
    ap.add_argument("--perm-b", type=int, default=99)
    ap.add_argument(
        "--resume",
        action="store_true",
        help="start from the tests already in --json (same banks and seed) and add draws up to "
        "--draws "
        "(--draws equal to its draws: only re-summarise, and with --perm time the prototype)",
    )
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "shortcut_null.json"))
    args = ap.parse_args()

    from gen.generators.audit import AuditConfig

    base = AuditConfig()
    cfgs = {
        r: AuditConfig().model_copy(update={"shortcut_repeats": r}) for r in args.repeats
    }  # also below the bound
    types = load_types(Path(args.input))
    banks: list[tuple[str, str, int | None]] = [
        (f"{q}_all", q, None) for q, xs in types.items() if len(xs) >= base.shortcut_min_items
    ]
    banks += [
        (f"{args.small_type}_{s}", args.small_type, s)
        for s in args.small_sizes
        if s >= base.shortcut_min_items and s <= len(types[args.small_type])
    ]
    tests: dict[str, list[dict[str, Any]]] = {
        f"{b}/repeats{r}": [] for b, *_ in banks for r in args.repeats
    }
    prior_wall = prior_cpu = 0.0
    if args.resume:
        old = json.loads(Path(args.json).read_text())
        sizes = {b: s or len(types[q]) for b, q, s in banks}
        for c, rows in old["raw"].items():
            b = c.split("/")[0]
            p0 = float(
                np.mean([1 / len(it.options) for it in types[old["config"]["banks"][b]["type"]]])
            )
            tests[c] = [
                {"n": sizes[b], "p0": p0, "hits": h, "k": k, "p": pv, "midp": midp(k, sizes[b], p0)}
                for h, k, pv in rows
            ]
        prior_wall, prior_cpu = old["wall_seconds"], old["cpu_seconds"]
        if "permutation_prototype" in old and not args.perm:
            args.perm_kept = old["permutation_prototype"]
    first = len(next(iter(tests.values())))
    started, before = time.perf_counter() - prior_wall, uptime()
    cpu0 = time.process_time() - prior_cpu
    print(f"banks {[(b, s or len(types[q])) for b, q, s in banks]}; {before}", flush=True)

    def save(draws: int, final: bool = False, perm: dict[str, Any] | None = None) -> None:
        rng = np.random.default_rng([args.seed, 12345])
        ref = {}
        for b, q, s in banks:
            n = s or len(types[q])
            ref[b] = reference_binomial(
                n, float(np.mean([1 / len(it.options) for it in types[q]])), 20000, rng
            )
        res = {
            "what": "false-positive rate of the choice-only shortcut test on null banks (EgoToM "
            "options, answers "
            "re-drawn uniformly)",
            "config": {
                "shortcut_folds": base.shortcut_folds,
                "shortcut_repeats_default": base.shortcut_repeats,
                "shortcut_l2": base.shortcut_l2,
                "shortcut_min_items": base.shortcut_min_items,
                "repeats_compared": args.repeats,
                "seed": args.seed,
                "input": args.input,
                "banks": {b: {"type": q, "items": s or len(types[q])} for b, q, s in banks},
            },
            "draws": draws,
            "finished": final,
            "wall_seconds": round(time.perf_counter() - started, 1),
            "cpu_seconds": round(time.process_time() - cpu0, 1),
            "uptime_before": before,
            "uptime_after": uptime(),
            "cpu_count": os.cpu_count(),
            "summary": {c: summarise(ts) for c, ts in tests.items()},
            "summary_all_types_pooled": {
                f"all_types/repeats{r}": summarise(
                    [t for b, *_ in banks if b.endswith("_all") for t in tests[f"{b}/repeats{r}"]]
                )
                for r in args.repeats
            },
            "binomial_reference": ref,
            "raw": {
                c: [[round(t["hits"], 2), t["k"], float(f"{t['p']:.4g}")] for t in ts]
                for c, ts in tests.items()
            },
        }
        if perm is not None:
            res["permutation_prototype"] = perm
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")

    for d in range(first, args.draws):
        if time.perf_counter() - started > args.minutes * 60:
            print(
                f"time budget reached after {d} draws", flush=True
            )  # (of this run, with --resume)
            break
        t0 = time.perf_counter()
        for bi, (b, q, s) in enumerate(banks):
            rng = np.random.default_rng([args.seed, d, bi])
            pool = types[q]
            items = (
                pool
                if s is None
                else [pool[i] for i in sorted(rng.choice(len(pool), s, replace=False))]
            )
            null = redraw(items, rng)
            for r, cfg in cfgs.items():
                tests[f"{b}/repeats{r}"].append(one_test(null, cfg, args.seed + d))
        if d < 3 or (d + 1) % 10 == 0:
            print(
                f"draw {d + 1}: {time.perf_counter() - t0:.2f} s "
                f"(total {time.perf_counter() - started:.0f} s)",
                flush=True,
            )
        if (d + 1) % args.save_every == 0:
            save(d + 1)
    draws = len(next(iter(tests.values())))
    perm = (
        perm_costs(types, base, args.perm_b, args.seed)
        if args.perm
        else getattr(args, "perm_kept", None)
    )
    save(draws, final=True, perm=perm)
    res = json.loads(Path(args.json).read_text())
    print(
        f"\n{'config':<26}{'tests':>6}{'p<.05':>8}{'95% CI':>16}{'p<.01':>8}{'95% CI':>16}"
        f"{'mean':>9}{'n·p0':>9}{'var':>9}{'binvar':>8}{'ratio':>7}{'KS':>7}{'KSmid':>7}"
    )
    for c, s in {**res["summary"], **res["summary_all_types_pooled"]}.items():
        if not s["tests"]:
            continue
        f5, f1 = s["fpr_05"], s["fpr_01"]

        def num(x: Any) -> float:  # a moment of fewer than two tests is None
            return float("nan") if x is None else float(x)

        print(
            f"{c:<26}{s['tests']:>6}{f5['rate']:>8.3f}{str(f5['ci95']):>16}{f1['rate']:>8.3f}{str(f1['ci95']):>16}"
            f"{num(s['hits_mean']):>9.2f}{num(s['binom_mean']):>9.2f}"
            f"{num(s['hits_var']):>9.2f}{num(s['binom_var']):>8.2f}{num(s['var_ratio']):>7.2f}"
            f"{num(s['ks_p_vs_uniform']):>7.3f}{num(s['ks_midp_vs_uniform']):>7.3f}"
        )
    print(
        f"\n{draws} draws, {res['wall_seconds']} s wall, {res['cpu_seconds']} s cpu; "
        f"wrote {args.json}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
