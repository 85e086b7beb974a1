"""The skeleton, pure: what code decides about every scenario before the LLM writes a word
(shift type, target, domain, referent complexity, difficulty, time gap, ids, pairs), from the
released proportions or ``distribution=``, and the tables it draws from."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gen.contextbench.rules import deictic_allowed, field_key, signature
from gen.errors import ConfigError
from gen.schemas.scenarios import CHANGE_TYPES, DIFFICULTIES, TARGETS

NAME = "scenarios"
"""The generator's name (its records are ``scenarios.jsonl``)."""

if TYPE_CHECKING:
    from gen.generators.scenarios import ScenariosConfig

# --------------------------------------------------------------------------- the skeleton's tables

RELEASED_JOINT: dict[str, dict[str, int]] = {
    "object_in_hand": {"current": 9, "prior": 1, "clarify": 2},
    "object_state": {"current": 6, "prior": 2},
    "sequential_task": {"current": 5, "prior": 1},
    "location": {"current": 5, "prior": 1},
    "object_in_view": {"current": 4, "clarify": 1},
    "absent_referent": {"prior": 3, "abstain": 2},
    "screen_content": {"current": 4},
    "cross_session_reference": {"prior": 4},
}
"""The default bank of 50: one joint split of shift type x target consistent with both released
marginals (change_type 12/8/6/6/5/5/4/4; current 33, prior 12, clarify 3, abstain 2) and the
compatibility rules below. The released bank publishes only the marginals; this split is gen's."""
CONTRAST_PAIRS: dict[str, int] = {"object_in_hand": 12, "object_state": 8, "sequential_task": 6,
                                  "location": 6, "object_in_view": 5, "screen_content": 4}
"""Contrast pairs are spread over the visible-referent shift types in the bank's proportions
(the released pack holds 20 scenarios = 10 pairs)."""
DEFAULT_SIZE = {"bank": 50, "contrast": 20}
COMPATIBLE: dict[str, tuple[str, ...]] = {
    "object_in_hand": ("current", "prior", "clarify"),
    "object_state": ("current", "prior"),
    "sequential_task": ("current", "prior"),
    "location": ("current", "prior"),
    "object_in_view": ("current", "prior", "clarify"),
    "absent_referent": ("prior", "abstain"),
    "screen_content": ("current", "prior"),
    "cross_session_reference": ("prior",),
}
"""Which targets a shift type can have: a cross-session reference asks about the context image
(prior); abstaining needs an absent referent; clarifying needs several possible referents
(something in the hand or in view)."""
DOMAINS: dict[str, tuple[str, ...]] = {
    "object_in_hand": ("kitchen", "workshop", "garden", "craft", "music", "fitness", "automotive", "cleaning"),
    "object_state": ("kitchen", "garden", "craft", "workshop", "home", "automotive", "cleaning", "laundry"),
    "sequential_task": ("kitchen", "workshop", "craft", "garden", "automotive", "home", "electronics", "fitness"),
    "location": ("home", "garden", "workshop", "kitchen", "office", "garage", "outdoors", "store"),
    "object_in_view": ("kitchen", "workshop", "garden", "craft", "home", "office", "music", "store"),
    "absent_referent": ("garden", "kitchen", "home", "outdoors", "workshop", "store", "office", "pets"),
    "screen_content": ("communication", "work", "navigation", "shopping", "media", "fitness", "finance", "travel"),
    "cross_session_reference": ("kitchen", "home", "workshop", "garage", "office", "garden", "store", "travel"),
}
"""Activity domains per shift type (8 each): with 3 difficulty tiers and the validator's limit of
2 per signature, a (shift type, target) cell holds up to 48 scenarios (16 when its tier is fixed)."""
TIME_GAP_CHOICES: dict[str, tuple[str, ...]] = {
    "object_in_hand": ("seconds",), "object_in_view": ("seconds",),
    "screen_content": ("seconds", "minutes"), "object_state": ("minutes", "hours"),
    "sequential_task": ("minutes", "hours"), "location": ("minutes",),
    "absent_referent": ("seconds", "minutes"), "cross_session_reference": ("minutes", "hours", "next_day"),
}
"""Time between turn 1 and turn 2 per shift type; a seeded choice where several fit."""
DIFFICULTY_SHARE = {"easy": 0.3, "medium": 0.4, "hard": 0.3}
"""The released bank's 15/20/15."""


def check_distribution(dist: dict[str, dict[str, int]], subset: str) -> None:
    """Shift types and targets exist, counts are >= 0, the targets fit their shift type, and a
    contrast distribution gives as many current as prior (one of each per pair)."""
    for ct, row in dist.items():
        if ct not in CHANGE_TYPES:
            raise ValueError(f"distribution: unknown shift type {ct!r} (choose from {', '.join(CHANGE_TYPES)})")
        if not isinstance(row, dict):
            raise ValueError(f"distribution.{ct}: expected {{target: count}}")
        if subset == "contrast" and ct not in CONTRAST_PAIRS:
            raise ValueError(f"distribution.{ct}: contrast pairs need a visible earlier referent "
                             f"({', '.join(CONTRAST_PAIRS)})")
        for t, c in row.items():
            if t not in TARGETS:
                raise ValueError(f"distribution.{ct}: unknown target {t!r} (choose from {', '.join(TARGETS)})")
            if not isinstance(c, int) or isinstance(c, bool) or c < 0:
                raise ValueError(f"distribution.{ct}.{t}: a count >= 0, got {c!r}")
            if c and t not in COMPATIBLE[ct]:
                raise ValueError(f"distribution.{ct}.{t}: {ct} scenarios cannot target {t} "
                                 f"(possible: {', '.join(COMPATIBLE[ct])})")
        if subset == "contrast":
            if set(k for k, c in row.items() if c) - {"current", "prior"} or row.get("current", 0) != row.get("prior", 0):
                raise ValueError(f"distribution.{ct}: a contrast pair is one current and one prior: "
                                 "give equal current and prior counts and no other target")


# --------------------------------------------------------------------------- skeleton (pure)


@dataclass(frozen=True)
class Skeleton:
    """What code decides about one scenario before the LLM writes a word."""

    scenario_id: str
    subset: str
    pair_id: str | None
    change_type: str
    target_context: str
    activity_domain: str
    referent_complexity: str
    difficulty_tier: str
    time_gap_bucket: str

    @property
    def deictic(self) -> bool:
        return deictic_allowed(self.change_type, self.target_context)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """Integers summing to ``total`` in proportion to ``weights`` (Hamilton's method; ties go to
    the earlier weight)."""
    s = sum(weights)
    if total <= 0 or s <= 0:
        return [0] * len(weights)
    quotas = [total * w / s for w in weights]
    out = [int(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - out[i]), i))
    for i in order[:total - sum(out)]:
        out[i] += 1
    return out


def cell_counts(cfg: ScenariosConfig) -> list[tuple[str, str, int]]:
    """(shift type, target, count) in bank order: distribution= as given, else the released
    proportions scaled to the size by largest remainder. Contrast: pairs per shift type (the
    target column says current; each pair adds its prior member)."""
    if cfg.subset == "contrast":
        if cfg.distribution is not None:
            pairs = [(ct, cfg.distribution.get(ct, {}).get("current", 0)) for ct in CHANGE_TYPES]
        else:
            cts = list(CONTRAST_PAIRS)
            pairs = list(zip(cts, largest_remainder(cfg.size // 2, [CONTRAST_PAIRS[c] for c in cts]), strict=True))
        return [(ct, "current", k) for ct, k in pairs if k]
    if cfg.distribution is not None:
        return [(ct, t, cfg.distribution.get(ct, {}).get(t, 0)) for ct in CHANGE_TYPES for t in TARGETS
                if cfg.distribution.get(ct, {}).get(t, 0)]
    cells = [(ct, t, c) for ct in CHANGE_TYPES for t in TARGETS for c in [RELEASED_JOINT[ct].get(t, 0)] if c]
    counts = largest_remainder(cfg.size, [c for _, _, c in cells])
    return [(ct, t, k) for (ct, t, _), k in zip(cells, counts, strict=True) if k]


def difficulties(cells: list[tuple[str, str, int]], total: int) -> list[list[str]]:
    """Difficulty tiers per cell: clarify and abstain are hard; every other cell takes tiers in
    proportion to what the bank still needs of its 30/40/30 % share (largest remainder, cell by
    cell in bank order), so a cell mixes tiers and the bank lands near 15/20/15 per 50."""
    need = dict(zip(DIFFICULTIES, largest_remainder(total, list(DIFFICULTY_SHARE.values())), strict=True))
    out: list[list[str] | None] = [None] * len(cells)
    for i, (_, t, k) in enumerate(cells):
        if t in ("clarify", "abstain"):
            out[i] = ["hard"] * k
            need["hard"] -= k
    for i, (_, _, k) in enumerate(cells):
        if out[i] is not None:
            continue
        weights = [max(0, need[d]) + 1e-9 for d in DIFFICULTIES]
        split = largest_remainder(k, weights)
        tiers = [d for d, c in zip(DIFFICULTIES, split, strict=True) for _ in range(c)]
        for d in tiers:
            need[d] -= 1
        out[i] = tiers
    return [x or [] for x in out]


def complexity_of(change_type: str, target: str, difficulty: str, subset: str) -> str:
    """referent_complexity: contrast pairs keep the earlier referent in view
    (distractor_present); clarify is multi_referent; absent and cross-session referents are
    absent_referent; a hard object_in_view has a distractor and a hard sequential_task changes
    step and tool at once (compound_shift); the rest single_referent."""
    if subset == "contrast":
        return "distractor_present"
    if target == "clarify":
        return "multi_referent"
    if change_type in ("absent_referent", "cross_session_reference"):
        return "absent_referent"
    if difficulty == "hard" and change_type == "object_in_view":
        return "distractor_present"
    if difficulty == "hard" and change_type == "sequential_task":
        return "compound_shift"
    return "single_referent"


def build_units(cfg: ScenariosConfig, existing: Sequence[dict[str, Any]] = ()) -> list[list[Skeleton]]:
    """The skeleton of every unit (a scenario, or a contrast pair's two members), in id order.

    Domains: per scenario the domain of its shift type's list whose signature (shift type,
    target, difficulty, domain) is least used so far (existing scenarios count), then the least
    used domain of the shift type, then a seeded order; a cell that cannot stay within
    ``signature_limit`` is a ConfigError naming it.
    """
    cells = cell_counts(cfg)
    tiers = difficulties(cells, sum(k for _, _, k in cells))
    rng = random.Random(f"{cfg.seed}/{NAME}/skeleton")
    sigs: Counter[tuple[Any, ...]] = Counter(signature(s) for s in existing)
    # existing rows are data: a missing field counts under None and matches no cell
    per_domain: Counter[tuple[str | None, str | None]] = Counter(
        (field_key(s, "change_type"), field_key(s, "activity_domain")) for s in existing)
    contrast = cfg.subset == "contrast"
    units: list[list[Skeleton]] = []
    number = cfg.id_start
    for (ct, target, _), cell_tiers in zip(cells, tiers, strict=True):
        domains = list(DOMAINS[ct])
        rng.shuffle(domains)
        for tier in cell_tiers:
            members = ("current", "prior") if contrast else (target,)

            def load(d: str, tier: str = tier, members: tuple[str, ...] = members, ct: str = ct,
                     order: list[str] = domains) -> tuple[int, int, int]:
                return (max(sigs[(ct, m, tier, d)] for m in members), per_domain[(ct, d)], order.index(d))

            domain = min(domains, key=load)
            if cfg.signature_limit is not None and load(domain)[0] >= cfg.signature_limit:
                raise ConfigError(f"distribution: {ct}/{target} needs more scenarios at difficulty {tier} than "
                                  f"{len(domains)} domains x signature_limit={cfg.signature_limit} allow; "
                                  "lower its count or raise signature_limit (null: no limit)")
            gap = rng.choice(TIME_GAP_CHOICES[ct])
            unit = []
            pair = f"pair-{len(units) + (cfg.id_start + 1) // 2:02d}" if contrast else None
            for m in members:
                prefix = "adv" if contrast else "sc"
                unit.append(Skeleton(f"{prefix}-{number:02d}", cfg.subset, pair, ct, m, domain,
                                     complexity_of(ct, m, tier, cfg.subset), tier, gap))
                sigs[(ct, m, tier, domain)] += 1
                number += 1
            per_domain[(ct, domain)] += 1
            units.append(unit)
    return units
