"""Agreement between reviewers: Cohen's kappa (two), Fleiss' kappa (more), per rubric field.

Scores and decisions are treated as nominal categories (a 4 and a 5 disagree as much as a 1 and
a 5): a rubric's scale is short and its labels name categories, and nominal kappa is what EgoToM
and WAGIBench report. Kappa is ``None`` when it is undefined (fewer than two items rated by two
reviewers, or every rating in one category: chance agreement is 1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any


def cohen_kappa(pairs: Sequence[tuple[Hashable, Hashable]]) -> float | None:
    """Cohen's kappa of two raters over the items both rated: ``(po - pe) / (1 - pe)``."""
    n = len(pairs)
    if n < 2:
        return None
    po = sum(a == b for a, b in pairs) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    pe = sum(first[c] * second[c] for c in first) / (n * n)
    if pe >= 1:
        return None
    return (po - pe) / (1 - pe)


def fleiss_kappa(ratings: Sequence[Sequence[Hashable]]) -> float | None:
    """Fleiss' kappa over items, each given as the ratings it got (at least two each; items
    with fewer are left out). With a varying number of raters per item, an item's agreement is
    the share of agreeing rater pairs among its pairs (Fleiss 1971's P_i with n_i raters)."""
    rated = [r for r in ratings if len(r) >= 2]
    if len(rated) < 2:
        return None
    p_items = []
    totals: Counter[Hashable] = Counter()
    for r in rated:
        counts = Counter(r)
        totals.update(counts)
        k = len(r)
        p_items.append(sum(c * (c - 1) for c in counts.values()) / (k * (k - 1)))
    p_bar = sum(p_items) / len(p_items)
    all_ratings = sum(totals.values())
    pe = sum((c / all_ratings) ** 2 for c in totals.values())
    if pe >= 1:
        return None
    return (p_bar - pe) / (1 - pe)


def field_agreement(
    by_item: dict[str, dict[str, Hashable]], reviewers: list[str]
) -> dict[str, Any]:
    """Agreement on one field. ``by_item``: item id -> reviewer -> value (only given values)."""
    multi = {i: v for i, v in by_item.items() if len(v) >= 2}
    agree = sum(len(set(v.values())) == 1 for v in multi.values())
    out: dict[str, Any] = {
        "items": len(multi),
        "observed": round(agree / len(multi), 4) if multi else None,
    }
    if len(reviewers) == 2:
        a, b = reviewers
        pairs = [(v[a], v[b]) for v in multi.values() if a in v and b in v]
        kappa = cohen_kappa(pairs)
        out["method"] = "cohen"
    else:
        kappa = fleiss_kappa([list(v.values()) for v in multi.values()])
        out["method"] = "fleiss"
    out["kappa"] = None if kappa is None else round(kappa, 4)
    return out
