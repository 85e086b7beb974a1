"""Check 12: where options carry source times, does their order on screen follow time order?"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from gen.generators.audit.registry import TELL_OPTIONS, CheckResult, check, judged, tell_finding
from gen.generators.audit.report import table, tells_table
from gen.generators.audit.stats import Tell, binom_greater, pvalue, rounded
from gen.schemas.mcq import MCQ

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData

FIELD = "privileged.option_times"
"""Where an item keeps its options' source times: ``{"<option index>": seconds}`` for each option
with one (``candidates`` writes it; see schemas/candidates.py)."""


def option_times(it: MCQ) -> dict[int, float] | None:
    """An item's option index -> source time; None when it has none or they do not parse."""
    text = it.privileged.get(FIELD)
    if not text:
        return None
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    out: dict[int, float] = {}
    for k, v in raw.items():
        if not (isinstance(k, str) and k.isdigit() and int(k) < len(it.options)):
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        out[int(k)] = float(v)
    return out


def kendall(times: dict[int, float]) -> tuple[float, int]:
    """Kendall's tau-a between shown position and time over the pairs whose times differ, and that
    pair count (tau > 0: earlier events shown first)."""
    idx = sorted(times)
    c = d = 0
    for a in range(len(idx)):
        for b in range(a + 1, len(idx)):
            dt = times[idx[b]] - times[idx[a]]
            c, d = (c + 1, d) if dt > 0 else (c, d + 1) if dt < 0 else (c, d)
    pairs = c + d
    return ((c - d) / pairs if pairs else 0.0), pairs


def _markdown(r: CheckResult) -> list[str]:
    rows = [{"question type": t, **v} for t, v in r.stats["per_question_type"].items()]
    return (
        [
            f"{r.stats['timed_items']} items carry option source times ({FIELD}); "
            f"{r.stats['unreadable']} have an unreadable field.",
            "",
        ]
        + table(rows)
        + tells_table(r)
    )


@check(
    "chronology",
    order=12,
    title="Chronological order of options",
    finds="options shown in the time order of their sources, or the answer at the position of its "
    "time rank",
    uses=("min_items_per_test", *TELL_OPTIONS),
    markdown=_markdown,
)
def chronology(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Where options carry source times (``privileged.option_times``), is the shown order correlated
    with time order? Per question type: how often the answer sits at the position of its time rank
    among the timed options (chance 1/m), and a sign test on each item's Kendall tau between
    position and time (options in time order, or in reverse time order, against 50 %), with the mean
    tau's z-test beside it."""
    key = "chronology"
    if not data.mcq:
        return CheckResult(key, "skipped", "no multiple-choice items with a known answer")
    groups: dict[str, list[tuple[str, int, dict[int, float]]]] = defaultdict(
        list
    )  # id, answer, times
    unreadable = 0
    for _, it in data.mcq:
        if FIELD not in it.privileged:
            continue
        times = option_times(it)
        if times is None:
            unreadable += 1
        elif len(times) >= 2:
            assert it.answer is not None
            groups[it.question_type].append((it.item_id, it.answer, times))
    if not groups:
        return CheckResult(
            key, "skipped", f"no item has two or more options with source times ({FIELD})"
        )
    res = CheckResult(key)
    per_type: dict[str, Any] = {}
    tells: list[tuple[Tell, list[str]]] = []
    for qtype, xs in sorted(groups.items()):
        rank_hits, rank_chance = [], []
        asc: list[str] = []
        desc: list[str] = []
        taus, var = [], 0.0
        for item_id, answer, times in xs:
            tau, pairs = kendall(times)
            if pairs:
                taus.append(tau)
                m = len(times)
                var += 2 * (2 * m + 5) / (9 * m * (m - 1))
                (asc if tau > 0 else desc if tau < 0 else []).append(item_id)
            if answer in times and sum(t == times[answer] for t in times.values()) == 1:
                positions = sorted(times)
                by_time = sorted(times, key=lambda j: times[j])
                rank_chance.append(1 / len(times))
                if positions.index(answer) == by_time.index(answer):
                    rank_hits.append(item_id)
        n_sign = len(asc) + len(desc)
        z = sum(taus) / math.sqrt(var) if var else 0.0
        row: dict[str, Any] = {
            "timed items": len(xs),
            "answer timed": len(rank_chance),
            "answer at its time rank": f"{len(rank_hits)}/{len(rank_chance)}",
            "in time order": len(asc),
            "in reverse order": len(desc),
            "kendall_mean": rounded(sum(taus) / len(taus), 3) if taus else None,
            "kendall_z_p": pvalue(math.erfc(abs(z) / math.sqrt(2))) if taus else None,
        }
        if len(xs) >= cfg.min_items_per_test:
            if rank_chance:
                p0 = sum(rank_chance) / len(rank_chance)
                tells.append(
                    (
                        Tell(
                            {"question_type": qtype, "tell": "answer at its time rank"},
                            len(rank_hits),
                            len(rank_chance),
                            p0,
                            binom_greater(len(rank_hits), len(rank_chance), p0),
                        ),
                        rank_hits,
                    )
                )
            if n_sign:
                for name, hit in (
                    ("options in time order", asc),
                    ("options in reverse time order", desc),
                ):
                    tells.append(
                        (
                            Tell(
                                {"question_type": qtype, "tell": name},
                                len(hit),
                                n_sign,
                                0.5,
                                binom_greater(len(hit), n_sign, 0.5),
                            ),
                            hit,
                        )
                    )
        else:
            row["note"] = f"not tested: fewer than {cfg.min_items_per_test} timed items"
        per_type[qtype] = row
    judged([t for t, _ in tells], cfg)
    for t, hit in tells:
        if t.severity is not None:
            qtype = t.labels["question_type"]
            res.findings.append(
                tell_finding(
                    key,
                    "chronology_tell",
                    t,
                    f"{qtype}: '{t.labels['tell']}' holds in",
                    items=hit,
                    fields=["options", FIELD],
                    numbers={"question_type": qtype},
                )
            )
    res.stats = {
        "timed_items": sum(len(x) for x in groups.values()),
        "unreadable": unreadable,
        "per_question_type": per_type,
        "tells": [t.row() for t, _ in tells],
    }
    return res
