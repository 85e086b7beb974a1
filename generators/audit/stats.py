"""Statistics shared by the checks: exact binomial tests, Wilson intervals (:mod:`gen.stats`),
Holm's correction, the power line, and the severity of a tell from its size and its significance.

A *tell* is a shortcut that beats chance (pick the longest option, the most frequent position,
the option sharing most phrases with the context, a classifier that sees only the options, a
model without the context). Its effect is accuracy minus chance, in points. Severity needs both
the size and the evidence (issue 22): significance alone fails small banks (a 90-item batch
cannot reach a corrected p < 0.002 unless the tell is huge) and large ones (a 1-point tell on
100k items is "significant" and harmless).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gen.schemas.audit import Severity
from gen.stats import rounded, wilson

__all__ = [
    "RULES",
    "Tell",
    "binom_critical",
    "binom_greater",
    "detectable_effect",
    "holm",
    "judge",
    "pvalue",
    "rounded",
    "wilson",
]


def pvalue(x: float) -> float:
    """A p-value for JSON: 3 significant digits (tiny values stay visible)."""
    return float(f"{float(x):.3g}")


def binom_greater(k: int, n: int, p: float) -> float:
    """One-sided exact binomial p-value of ``k`` or more successes in ``n`` trials at rate ``p``."""
    from scipy.stats import binomtest

    return (
        binomtest(int(k), int(n), min(max(p, 1e-12), 1 - 1e-12), alternative="greater").pvalue
        if n
        else 1.0
    )


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: the i-th smallest of m is
    multiplied by (m - i + 1), made monotone, capped at 1. Rejecting where the adjusted p is below
    alpha controls the family-wise error at alpha, like Bonferroni, and rejects at least as much."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def binom_critical(n: int, p0: float, level: float) -> int | None:
    """The fewest successes of ``n`` whose one-sided exact binomial p-value (rate ``p0``) is at most
    ``level``; None when even n of n is not."""
    from scipy.stats import binom

    if not n:
        return None
    k = int(binom.isf(level, n, p0))  # P(X > k) <= level, so P(X >= k + 1) <= level; step back if
    while k > 0 and binom.sf(k - 2, n, p0) <= level:  # rounding left a smaller k that also passes
        k -= 1
    while k <= n and binom.sf(k - 1, n, p0) > level:
        k += 1
    return k if k <= n else None


def detectable_effect(
    n: int, p0: float, level: float, min_effect: float = 0.0, power: float = 0.8
) -> float | None:
    """The smallest true effect (accuracy minus ``p0``, as a fraction) that a bank of ``n`` items
    shows as significant at ``level`` *and* with an observed effect above ``min_effect``, with
    probability ``power``: the count needed is k = max(the critical count at ``level``, the fewest
    successes whose effect exceeds ``min_effect``), and P(X >= k | p) = I_p(k, n - k + 1) reaches
    ``power`` at the ``power`` quantile of Beta(k, n - k + 1). None: no effect can reach it."""
    from scipy.stats import beta

    k = binom_critical(n, p0, level)
    if k is None:
        return None
    k = max(k, math.floor((p0 + min_effect) * n + 1e-9) + 1)
    if k > n:
        return None
    return float(beta.ppf(power, k, n - k + 1)) - p0


RULES = {
    "significant_and_large": (
        "error: significant after Holm's correction and larger than max_effect"
    ),
    "interval_above_max_effect": "warning: the effect's 95 % interval lies above max_effect",
    "uncorrected_and_large": "warning: p below warn_p (uncorrected) and an effect above max_effect",
    "significant_but_small": "info: significant after Holm's correction but not larger than "
    "max_effect",
}
"""The severity rules of a tell, in the order they are tried; a finding names the one that fired."""


@dataclass
class Tell:
    """One tell test: a shortcut (pick the longest option, the most frequent position, a
    classifier's guess…) right on ``k`` of ``n`` items where chance is ``chance``, with its raw
    p-value. :func:`judge` fills in the rest for the whole family of a check's tests."""

    labels: dict[str, Any]
    """What the test is about (``question_type``, ``tell``, ``model``…), first in its table row."""
    k: int
    n: int
    chance: float
    p: float
    test: str = "binomial"
    """``binomial``: a one-sided exact binomial test (the power line applies); else its name."""
    p_holm: float = 1.0
    severity: Severity | None = None
    rule: str | None = None
    why: str = ""
    detectable: float | None = None
    """The power line, in points: the smallest true effect that gives an error with ``power``."""

    @property
    def accuracy(self) -> float:
        return self.k / self.n if self.n else 0.0

    @property
    def effect(self) -> float:
        """Accuracy minus chance, in points."""
        return 100 * (self.accuracy - self.chance)

    @property
    def ci(self) -> tuple[float, float]:
        """The effect's 95 % Wilson interval, in points."""
        lo, hi = wilson(self.k, self.n)
        return (100 * (lo - self.chance), 100 * (hi - self.chance))

    def row(self) -> dict[str, Any]:
        """The test as a table row (audit.json and audit.md carry the same numbers)."""
        lo, hi = self.ci
        return {
            **self.labels,
            "test": self.test,
            "items": self.n,
            "hits": self.k,
            "accuracy": rounded(self.accuracy, 3),
            "chance": rounded(self.chance, 3),
            "effect": rounded(self.effect, 1),
            "effect_ci95": [rounded(lo, 1), rounded(hi, 1)],
            "p": pvalue(self.p),
            "p_holm": pvalue(self.p_holm),
            "detectable_effect": None if self.detectable is None else rounded(self.detectable, 1),
            "severity": self.severity,
            "rule": self.rule,
        }

    def numbers(self) -> dict[str, Any]:
        """The test's numbers for its finding."""
        row = self.row()
        return {
            k: row[k]
            for k in (
                "accuracy",
                "chance",
                "effect",
                "effect_ci95",
                "p",
                "p_holm",
                "detectable_effect",
                "rule",
            )
        } | {"n": self.n}

    def summary(self) -> str:
        """``k/n (a %, chance c %): effect +e points [lo, hi], p=…, Holm p=…``: a finding's
        numbers."""
        lo, hi = self.ci
        return (
            f"{self.k}/{self.n} ({self.accuracy:.0%}, chance {self.chance:.0%}): "
            f"effect {self.effect:+.1f} points "
            f"[95% CI {lo:+.1f}, {hi:+.1f}], p={pvalue(self.p)}, Holm p={pvalue(self.p_holm)}"
        )


def judge(
    tells: list[Tell], *, alpha: float, max_effect: float, warn_p: float, power: float
) -> list[Tell]:
    """Holm's correction over one check's family of tests, then each test's severity (None: no
    finding) by the first rule of :data:`RULES` that holds, and its power line at the strictest
    Holm level alpha/m. ``max_effect`` is in points."""
    for t, q in zip(tells, holm([t.p for t in tells]), strict=True):
        t.p_holm = q
        lo, hi = t.ci
        e = t.effect
        big = e > max_effect + 1e-9  # 12/40 - 25 % is 5 points, not 5.000000000000004
        limit = f"max_effect={max_effect:g} points"
        if q < alpha and big:
            t.severity, t.rule = "error", "significant_and_large"
            t.why = f"Holm p={pvalue(q)} < alpha={alpha} and effect {e:+.1f} > {limit}"
        elif lo > max_effect + 1e-9:
            t.severity, t.rule = "warning", "interval_above_max_effect"
            t.why = f"the effect's 95% interval [{lo:+.1f}, {hi:+.1f}] lies above {limit}"
        elif t.p < warn_p and big:
            t.severity, t.rule = "warning", "uncorrected_and_large"
            t.why = (
                f"p={pvalue(t.p)} < warn_p={warn_p} (uncorrected; Holm p={pvalue(q)}) and "
                f"effect {e:+.1f} > {limit}"
            )
        elif q < alpha:
            t.severity, t.rule = "info", "significant_but_small"
            t.why = f"Holm p={pvalue(q)} < alpha={alpha} but effect {e:+.1f} <= {limit}"
        else:
            t.severity, t.rule, t.why = None, None, ""
        if t.test == "binomial":
            d = detectable_effect(t.n, t.chance, alpha / len(tells), max_effect / 100, power)
            t.detectable = None if d is None else 100 * d
    return tells
