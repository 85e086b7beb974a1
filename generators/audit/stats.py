"""Statistics shared by the checks: exact binomial tests and intervals, rounding for JSON."""

from __future__ import annotations


def rounded(x: float, nd: int = 4) -> float:
    return float(round(float(x), nd))


def pvalue(x: float) -> float:
    """A p-value for JSON: 3 significant digits (tiny values stay visible)."""
    return float(f"{float(x):.3g}")


def binom_greater(k: int, n: int, p: float) -> float:
    """One-sided exact binomial p-value of ``k`` or more successes in ``n`` trials at rate ``p``."""
    from scipy.stats import binomtest

    return binomtest(int(k), int(n), min(max(p, 1e-12), 1 - 1e-12), alternative="greater").pvalue if n else 1.0


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a proportion, rounded to 4 decimals."""
    from scipy.stats import binomtest

    if not n:
        return (0.0, 1.0)
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level)
    return (rounded(ci.low), rounded(ci.high))
