"""The skeleton, pure: what code decides about every scenario before the LLM writes a word
(shift type, target, domain, referent complexity, difficulty, time gap, ids, pairs), from the
released joint split or ``distribution=``, and the tables it draws from."""

from __future__ import annotations

import random
import re
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

BANK_JOINT: dict[str, dict[str, int]] = {
    "object_in_hand": {"current": 9, "prior": 2, "clarify": 1},
    "object_state": {"current": 6, "prior": 2},
    "sequential_task": {"current": 5, "prior": 1},
    "location": {"current": 4, "prior": 1, "clarify": 1},
    "object_in_view": {"current": 4, "prior": 1},
    "absent_referent": {"current": 1, "prior": 1, "clarify": 1, "abstain": 2},
    "screen_content": {"current": 3, "prior": 1},
    "cross_session_reference": {"current": 1, "prior": 3},
}
"""The released bank's joint split of shift type x target (its 50 rows): change_type
12/8/6/6/5/5/4/4, target current 33, prior 12, clarify 3, abstain 2."""
CONTRAST_JOINT: dict[str, dict[str, int]] = {
    "object_in_hand": {"current": 4, "prior": 1, "clarify": 1},
    "object_in_view": {"current": 3, "clarify": 1},
    "object_state": {"current": 2, "prior": 1},
    "sequential_task": {"current": 2, "prior": 1},
    "location": {"current": 1, "prior": 1},
    "screen_content": {"current": 1},
    "absent_referent": {"abstain": 1},
}
"""The released contrast subset's joint split (its 20 rows)."""
DEFAULT_JOINT = {"bank": BANK_JOINT, "contrast": CONTRAST_JOINT}
DEFAULT_SIZE = {"bank": 50, "contrast": 20}
# The authoring rules forbid no (shift type, target) cell: the release itself has an absent
# referent that is current or asks to clarify, a cross-session reference that is current and a
# location that asks to clarify. So distribution= takes any cell, and the prompts write each
# target on each shift type (prompts/scenarios/_requests.jinja).
DOMAINS: dict[str, tuple[str, ...]] = {
    "object_in_hand": (
        "kitchen",
        "workshop",
        "garden",
        "craft",
        "music",
        "fitness",
        "automotive",
        "cleaning",
    ),
    "object_state": (
        "kitchen",
        "garden",
        "craft",
        "workshop",
        "home",
        "automotive",
        "cleaning",
        "laundry",
    ),
    "sequential_task": (
        "kitchen",
        "workshop",
        "craft",
        "garden",
        "automotive",
        "home",
        "electronics",
        "fitness",
    ),
    "location": ("home", "garden", "workshop", "kitchen", "office", "garage", "outdoors", "store"),
    "object_in_view": (
        "kitchen",
        "workshop",
        "garden",
        "craft",
        "home",
        "office",
        "music",
        "store",
    ),
    "absent_referent": (
        "garden",
        "kitchen",
        "home",
        "outdoors",
        "workshop",
        "store",
        "office",
        "pets",
    ),
    "screen_content": (
        "communication",
        "work",
        "navigation",
        "shopping",
        "media",
        "fitness",
        "finance",
        "travel",
    ),
    "cross_session_reference": (
        "kitchen",
        "home",
        "workshop",
        "garage",
        "office",
        "garden",
        "store",
        "travel",
    ),
}
"""Activity domains per shift type (8 each): with 3 difficulty tiers and the validator's limit of
2 per signature, a (shift type, target) cell holds up to 48 scenarios (16 when its tier is
fixed)."""
TIME_GAP_CHOICES: dict[str, tuple[str, ...]] = {
    "object_in_hand": ("seconds",),
    "object_in_view": ("seconds",),
    "screen_content": ("seconds", "minutes"),
    "object_state": ("minutes", "hours"),
    "sequential_task": ("minutes", "hours"),
    "location": ("minutes",),
    "absent_referent": ("seconds", "minutes"),
    "cross_session_reference": ("minutes", "hours", "next_day"),
}
"""Time between turn 1 and turn 2 per shift type; a seeded choice where several fit."""
DIFFICULTY_SHARE = {"easy": 0.3, "medium": 0.4, "hard": 0.3}
"""The released bank's 15/20/15."""


def check_distribution(dist: dict[str, dict[str, int]]) -> None:
    """Shift types and targets exist and counts are integers >= 0 (every cell is allowed)."""
    for ct, row in dist.items():
        if ct not in CHANGE_TYPES:
            raise ValueError(
                f"distribution: unknown shift type {ct!r} (choose from {', '.join(CHANGE_TYPES)})"
            )
        if not isinstance(row, dict):
            raise ValueError(f"distribution.{ct}: expected {{target: count}}")
        for t, c in row.items():
            if t not in TARGETS:
                raise ValueError(
                    f"distribution.{ct}: unknown target {t!r} (choose from {', '.join(TARGETS)})"
                )
            if not isinstance(c, int) or isinstance(c, bool) or c < 0:
                raise ValueError(f"distribution.{ct}.{t}: a count >= 0, got {c!r}")


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

    @property
    def distractor(self) -> bool:
        """A contrast scenario keeps the earlier referent in view at turn 2 (not possible when the
        shift type is that it is gone, or seen only before the conversation)."""
        return self.subset == "contrast" and self.change_type not in (
            "absent_referent",
            "cross_session_reference",
        )

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
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def cell_counts(cfg: ScenariosConfig) -> list[tuple[str, str, int]]:
    """(shift type, target, scenarios) in bank order: distribution= as given, else the subset's
    released joint split scaled to the size by largest remainder, first the shift types by their
    totals, then each shift type's targets (``n=8`` of the bank: one scenario per shift type)."""
    if cfg.distribution is not None:
        return [
            (ct, t, cfg.distribution.get(ct, {}).get(t, 0))
            for ct in CHANGE_TYPES
            for t in TARGETS
            if cfg.distribution.get(ct, {}).get(t, 0)
        ]
    joint = DEFAULT_JOINT[cfg.subset]
    types = [ct for ct in CHANGE_TYPES if ct in joint]
    per_type = largest_remainder(cfg.size, [sum(joint[ct].values()) for ct in types])
    out = []
    for ct, k in zip(types, per_type, strict=True):
        targets = [t for t in TARGETS if joint[ct].get(t)]
        out += [
            (ct, t, c)
            for t, c in zip(
                targets, largest_remainder(k, [joint[ct][t] for t in targets]), strict=True
            )
            if c
        ]
    return out


def unit_cells(
    cells: list[tuple[str, str, int]], contrast: bool
) -> list[tuple[str, tuple[str, ...], int]]:
    """(shift type, the targets of one unit's members, units) in bank order. A contrast subset
    pairs each prior scenario with a current one of its shift type where it can (an A/B pair that
    shares turn 1 and the turn-2 scene, and a ``pair_id``; not where the earlier referent is gone
    or seen only before the conversation); every other scenario is a unit of its own."""
    out: list[tuple[str, tuple[str, ...], int]] = []
    for ct in CHANGE_TYPES:
        row = {t: k for c, t, k in cells if c == ct}
        visible = ct not in ("absent_referent", "cross_session_reference")
        pairs = min(row.get("current", 0), row.get("prior", 0)) if contrast and visible else 0
        if pairs:
            out.append((ct, ("current", "prior"), pairs))
        for t in TARGETS:
            k = row.get(t, 0) - (pairs if t in ("current", "prior") else 0)
            if k:
                out.append((ct, (t,), k))
    return out


def difficulties(units: list[tuple[str, tuple[str, ...], int]], total: int) -> list[list[str]]:
    """Difficulty tiers per unit cell: clarify and abstain are hard; every other cell takes tiers
    in proportion to what the bank still needs of its 30/40/30 % share (largest remainder, cell
    by cell in bank order; a pair takes two of its tier), so a cell mixes tiers and the bank lands
    near 15/20/15 per 50."""
    need = dict(
        zip(DIFFICULTIES, largest_remainder(total, list(DIFFICULTY_SHARE.values())), strict=True)
    )
    out: list[list[str] | None] = [None] * len(units)
    for i, (_, members, k) in enumerate(units):
        if members[0] in ("clarify", "abstain"):
            out[i] = ["hard"] * k
            need["hard"] -= k
    for i, (_, members, k) in enumerate(units):
        if out[i] is not None:
            continue
        weights = [max(0, need[d]) + 1e-9 for d in DIFFICULTIES]
        split = largest_remainder(k, weights)
        tiers = [d for d, c in zip(DIFFICULTIES, split, strict=True) for _ in range(c)]
        for d in tiers:
            need[d] -= len(members)
        out[i] = tiers
    return [x or [] for x in out]


def complexity_of(change_type: str, target: str, difficulty: str, subset: str) -> str:
    """referent_complexity: absent and cross-session referents are absent_referent; a contrast
    scenario keeps the earlier referent in view (distractor_present); clarify is multi_referent;
    a hard object_in_view has a distractor and a hard sequential_task changes step and tool at
    once (compound_shift); the rest single_referent."""
    if change_type in ("absent_referent", "cross_session_reference"):
        return "absent_referent"
    if subset == "contrast":
        return "distractor_present"
    if target == "clarify":
        return "multi_referent"
    if difficulty == "hard" and change_type == "object_in_view":
        return "distractor_present"
    if difficulty == "hard" and change_type == "sequential_task":
        return "compound_shift"
    return "single_referent"


def build_units(
    cfg: ScenariosConfig, existing: Sequence[dict[str, Any]] = ()
) -> list[list[Skeleton]]:
    """The skeleton of every unit (a scenario, or a contrast pair's two members), in id order.

    Domains: per unit the domain of its shift type's list whose signature (shift type, target,
    difficulty, domain) is least used so far (existing scenarios count), then the least used
    domain of the shift type, then a seeded order; a cell that cannot stay within
    ``signature_limit`` is a ConfigError naming it. Pair ids continue after the highest
    ``pair-NN`` of ``existing``.
    """
    cells = cell_counts(cfg)
    units_spec = unit_cells(cells, cfg.subset == "contrast")
    tiers = difficulties(units_spec, sum(k for _, _, k in cells))
    rng = random.Random(f"{cfg.seed}/{NAME}/skeleton")
    sigs: Counter[tuple[Any, ...]] = Counter(signature(s) for s in existing)
    # existing rows are data: a missing field counts under None and matches no cell
    per_domain: Counter[tuple[str | None, str | None]] = Counter(
        (field_key(s, "change_type"), field_key(s, "activity_domain")) for s in existing
    )
    pair_number = max(
        (
            int(m.group(1))
            for s in existing
            for m in [re.fullmatch(r"pair-(\d+)", str(s.get("pair_id") or ""))]
            if m
        ),
        default=0,
    )
    prefix = "adv" if cfg.subset == "contrast" else "sc"
    units: list[list[Skeleton]] = []
    number = cfg.id_start
    for (ct, members, _), cell_tiers in zip(units_spec, tiers, strict=True):
        domains = list(DOMAINS[ct])
        rng.shuffle(domains)
        for tier in cell_tiers:

            def load(
                d: str,
                tier: str = tier,
                members: tuple[str, ...] = members,
                ct: str = ct,
                order: list[str] = domains,
            ) -> tuple[int, int, int]:
                return (
                    max(sigs[(ct, m, tier, d)] for m in members),
                    per_domain[(ct, d)],
                    order.index(d),
                )

            domain = min(domains, key=load)
            if cfg.signature_limit is not None and load(domain)[0] >= cfg.signature_limit:
                raise ConfigError(
                    f"distribution: {ct}/{'+'.join(members)} needs more scenarios at "
                    f"difficulty {tier} "
                    f"than {len(domains)} domains x signature_limit={cfg.signature_limit} allow; "
                    "lower its count or raise signature_limit (null: no limit)"
                )
            gap = rng.choice(TIME_GAP_CHOICES[ct])
            pair = None
            if len(members) == 2:
                pair_number += 1
                pair = f"pair-{pair_number:02d}"
            unit = []
            for m in members:
                unit.append(
                    Skeleton(
                        f"{prefix}-{number:02d}",
                        cfg.subset,
                        pair,
                        ct,
                        m,
                        domain,
                        complexity_of(ct, m, tier, cfg.subset),
                        tier,
                        gap,
                    )
                )
                sigs[(ct, m, tier, domain)] += 1
                number += 1
            per_domain[(ct, domain)] += 1
            units.append(unit)
    return units
