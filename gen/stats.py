"""Statistics shared by the audit, the judges and the evaluation runner: Wilson intervals, a
seeded bootstrap, Cohen's kappa and raw agreement, balanced accuracy.

Kept small and exact: each function is checked by hand in the unit tests. The audit's own
tell statistics (Holm, the power line, severities) stay in :mod:`generators.audit.stats`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def rounded(x: float, nd: int = 4) -> float:
    return float(round(float(x), nd))


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of the proportion k/n (good coverage near 0 and 1 and for small n,
    unlike the normal approximation); (0, 1) when n is 0."""
    from scipy.stats import binomtest

    if not n:
        return (0.0, 1.0)
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return (float(ci.low), float(ci.high))


def proportion(k: int, n: int) -> dict[str, Any]:
    """``k`` of ``n`` with its rate and 95 % Wilson interval (rate and interval None when n is
    0)."""
    if not n:
        return {"k": k, "n": 0, "rate": None, "ci95": None}
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": rounded(k / n), "ci95": [rounded(lo), rounded(hi)]}


def bootstrap_ci(
    units: Sequence[T],
    statistic: Callable[[list[T]], float | None],
    *,
    seed: int,
    resamples: int = 2000,
    level: float = 0.95,
) -> list[float] | None:
    """Percentile bootstrap interval of ``statistic`` over ``units`` resampled with replacement
    (a unit is what is independent: a row, or all trials of one scenario). Resamples where the
    statistic is undefined (None: a class missing) are skipped; None when fewer than half are
    defined or there are no units. Seeded, so a rerun gives the same interval."""
    if not units:
        return None
    rng = random.Random(seed)
    values = []
    n = len(units)
    for _ in range(resamples):
        v = statistic([units[rng.randrange(n)] for _ in range(n)])
        if v is not None:
            values.append(v)
    if len(values) < resamples / 2:
        return None
    values.sort()
    lo_i = int((1 - level) / 2 * (len(values) - 1) + 0.5)
    hi_i = int((1 + level) / 2 * (len(values) - 1) + 0.5)
    return [rounded(values[lo_i]), rounded(values[hi_i])]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def balanced_accuracy(
    pairs: Sequence[tuple[Hashable, Hashable]], classes: Sequence[Hashable]
) -> float | None:
    """Mean over ``classes`` of the accuracy on the rows whose truth is that class; ``pairs`` are
    (truth, prediction). Rows of other classes are ignored; None when a class has no row (the
    mean would silently become a one-class accuracy)."""
    per = []
    for c in classes:
        rows = [p for t, p in pairs if t == c]
        if not rows:
            return None
        per.append(sum(p == c for p in rows) / len(rows))
    return sum(per) / len(per)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """McNemar's exact test of two paired classifiers: the two-sided binomial p-value of the
    discordant pairs (``only_a`` right where the other is wrong, ``only_b`` the reverse) under
    p = 1/2; 1.0 when there are none."""
    from scipy.stats import binomtest

    if only_a + only_b == 0:
        return 1.0
    return float(binomtest(int(only_a), int(only_a + only_b), 0.5).pvalue)


def agreement(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """Raw agreement: the share of positions where the two raters give the same category."""
    if len(a) != len(b):
        raise ValueError("agreement needs two ratings of the same items")
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a) if a else None


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two raters over the same items: (p_o - p_e) / (1 - p_e), p_e from each
    rater's own category shares. 1.0 when both use one and the same category throughout (p_e = 1,
    complete agreement); None for no items."""
    p_o = agreement(a, b)
    if p_o is None:
        return None
    n = len(a)
    ca, cb = Counter(a), Counter(b)
    p_e = sum(ca[k] * cb[k] for k in ca.keys() | cb.keys()) / (n * n)
    if p_e >= 1.0:
        return 1.0 if p_o >= 1.0 else 0.0
    return (p_o - p_e) / (1 - p_e)


def confusion(
    truth: Sequence[Hashable], predicted: Sequence[Hashable], categories: Sequence[Hashable]
) -> list[list[int]]:
    """Counts ``[i][j]``: rows where the truth is ``categories[i]`` and the prediction
    ``categories[j]``."""
    index = {c: i for i, c in enumerate(categories)}
    out = [[0] * len(categories) for _ in categories]
    for t, p in zip(truth, predicted, strict=True):
        out[index[t]][index[p]] += 1
    return out


def mean_interval(values: Sequence[float], *, seed: int, resamples: int = 2000) -> dict[str, Any]:
    """``n``, ``mean`` and its percentile-bootstrap 95 % interval (``ci95``) over ``values``."""
    m = mean(values)
    return {
        "n": len(values),
        "mean": None if m is None else rounded(m),
        "ci95": bootstrap_ci(list(values), mean, seed=seed, resamples=resamples),
    }
