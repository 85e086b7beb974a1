"""Check 8: what a nocontext run says about answering without the context."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.registry import (
    TELL_OPTIONS,
    CheckResult,
    check,
    finding,
    judged,
    tell_finding,
)
from gen.generators.audit.report import table, tells_table
from gen.generators.audit.stats import Tell, binom_greater, rounded

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    rows = [
        {"model": m, "question type": q, **v}
        for m, mv in s["models"].items()
        for q, v in mv["per_question_type"].items()
    ]
    out = [
        f"{s['items_with_results']} items with results ({s['bank_items_without_results']} bank "
        "items without); "
        f"{s['kept_by_nocontext']} kept by the nocontext run.",
        "",
    ] + table(rows)
    out += table(
        [
            {"model": m, "letters chosen": v["letters_chosen"], "unparsed": v["unparsed"]}
            for m, v in s["models"].items()
        ]
    )
    return out + tells_table(r)


@check(
    "blind",
    order=8,
    title="Blind solvability (nocontext results)",
    finds="models of a nocontext run answering without the context above chance, and the items "
    "they solve",
    uses=("blind_max_correct", *TELL_OPTIONS),
    markdown=_markdown,
)
def blind(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Blind accuracy of the models of a nocontext run per question type against chance, and the
    items they answer without context."""
    key = "blind"
    res = CheckResult(key)
    if data.nocontext is None:
        return CheckResult(key, "skipped", "no nocontext= results given")
    if data.scenarios is not None:
        return CheckResult(
            key, "skipped", "a scenario bank: nocontext runs answer multiple-choice items"
        )
    by_id = {
        item_id: int(k)
        for item_id, k in zip(data.items.ids, data.items.n_options.tolist(), strict=True)
    }
    rows = [r for r in data.nocontext if not by_id or r["item_id"] in by_id]
    missing = len(by_id.keys() - {r["item_id"] for r in data.nocontext}) if by_id else 0
    models = sorted({m for r in rows for m in r.get("correct", {})})
    table: dict[str, Any] = {}
    solved: dict[str, list[str]] = defaultdict(list)
    tells: list[Tell] = []
    for m in models:
        per_q: dict[str, dict[str, Any]] = {}
        letters: Counter[str] = Counter()
        unparsed = 0
        for qtype in sorted({r["question_type"] for r in rows}):
            rs = [r for r in rows if r["question_type"] == qtype and m in r.get("correct", {})]
            if not rs:
                continue
            trials = sum(int(r.get("shuffles", len(r.get("answers", {}).get(m, [])))) for r in rs)
            right = sum(int(r["correct"][m]) for r in rs)
            first = [a for r in rs for a in r.get("answers", {}).get(m, [])[:1]]
            k_first = sum(bool(a.get("correct")) for a in first)
            chance = float(np.mean([_chance(r, m, by_id) for r in rs]))
            per_q[qtype] = {
                "items": len(rs),
                "trials": trials,
                "accuracy": rounded(right / trials, 3) if trials else None,
                "first_shuffle_accuracy": rounded(k_first / len(first), 3) if first else None,
                "chance": rounded(chance, 3),
            }
            if first:
                tells.append(
                    Tell(
                        {"model": m, "question_type": qtype, "tell": "first shuffle, no context"},
                        k_first,
                        len(first),
                        chance,
                        binom_greater(k_first, len(first), chance),
                    )
                )
            for r in rs:
                if int(r["correct"][m]) > cfg.blind_max_correct:
                    solved[r["item_id"]].append(m)
                for a in r.get("answers", {}).get(m, []):
                    if a.get("letter"):
                        letters[str(a["letter"]).lower()] += 1
                    else:
                        unparsed += 1
        table[m] = {
            "per_question_type": per_q,
            "letters_chosen": dict(sorted(letters.items())),
            "unparsed": unparsed,
        }
    judged(tells, cfg)
    for t in tells:
        if t.severity is None:
            continue
        m, qtype = t.labels["model"], t.labels["question_type"]
        res.findings.append(
            tell_finding(
                key,
                "blind_above_chance",
                t,
                f"{m} answers {qtype} items without context, on the first shuffle:",
                items=[],
                fields=[f"nocontext.correct.{m}"],
                numbers={
                    "model": m,
                    "question_type": qtype,
                    "accuracy_all_shuffles": table[m]["per_question_type"][qtype]["accuracy"],
                },
            )
        )
    for r in rows:
        if r["item_id"] in solved:
            ms = solved[r["item_id"]]
            res.findings.append(
                finding(
                    key,
                    "solved_without_context",
                    "warning",
                    f"answered correctly without context in more than {cfg.blind_max_correct} "
                    f"shuffles by {', '.join(ms)}",
                    items=[r["item_id"]],
                    fields=[f"nocontext.correct.{m}" for m in ms],
                    numbers={
                        "correct": {m: int(r["correct"][m]) for m in ms},
                        "shuffles": r.get("shuffles"),
                    },
                )
            )
    res.stats = {
        "items_with_results": len(rows),
        "bank_items_without_results": missing,
        "models": table,
        "max_correct": cfg.blind_max_correct,
        "kept_by_nocontext": sum(bool(r.get("kept")) for r in rows),
        "tells": [t.row() for t in tells],
    }
    return res


def _chance(row: dict[str, Any], model: str, by_id: dict[str, int]) -> float:
    """1 / options of an item: ``n_options``, else the shuffle's order, else the bank's item."""
    answers = row.get("answers", {}).get(model) or [{}]
    k = int(row.get("n_options") or len(answers[0].get("order") or []))
    if not k and row["item_id"] in by_id:
        k = by_id[row["item_id"]]  # the number of options
    return 1 / k if k >= 2 else 0.25
