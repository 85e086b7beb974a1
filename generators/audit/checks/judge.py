"""Check 11: what a distractor-validity judge run says about the bank's wrong options."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import table
from gen.stats import proportion

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    out = [
        f"Judge {s['judge']}: {s['items_with_results']} items with results "
        f"({s['bank_items_without_results']} bank "
        f"items without, {s['results_not_in_bank']} results for items not in the bank); "
        f"{s['answer_not_scored']} items whose answer the judge did not score.",
        "",
    ]
    return out + table([{"question type": q, **v} for q, v in s["per_question_type"].items()])


@check(
    "judge",
    order=11,
    title="Wrong options a judge rates as good answers (distractor validity)",
    finds="items whose wrong option an LLM judge scored at least as high as the answer, and items "
    "it could not score (judge= run)",
    uses=("judge_severity",),
    markdown=_markdown,
)
def judge(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Reads a ``judge kind=distractor_validity`` run: every option of an item was scored 0 / 1 / 2
    as an answer, alone and without the key, by an LLM judge; an item whose wrong option scored at
    least as high as its answer may have two right answers (WAGIBench's "multiple relevant goals")
    and is a finding of ``judge_severity``; so is, in one finding, every item whose answer the judge
    gave no usable score (those were not screened). Only the run's primary judge's flags count."""
    key = "judge"
    if data.judge is None:
        return CheckResult(key, "skipped", "no judge= run given")
    label = data.judge_primary
    by_id = set(data.items.ids)
    rows = [r for r in data.judge if not by_id or r["item_id"] in by_id]
    res = CheckResult(key)
    per_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        flagged = r["flagged"].get(label) if label else None
        per_type[str(r["question_type"])].append(r)
        if not flagged:
            continue
        options = r["flagged_options"].get(label) or []
        scores = [
            s.get("score") if isinstance(s, dict) else None for s in r["scores"].get(label, [])
        ]
        answer = r["answer"]
        key_score = (
            scores[answer] if isinstance(answer, int) and 0 <= answer < len(scores) else None
        )
        res.findings.append(
            finding(
                key,
                "distractor_also_answers",
                cfg.judge_severity,
                f"judge {label} scored wrong option(s) {options} at least as high as the answer "
                f"(option {answer}): "
                f"the answer scored {key_score}, the options {scores} (0 irrelevant, 1 borderline, "
                "2 a good answer)",
                items=[r["item_id"]],
                fields=[f"options[{i}]" for i in options],
                numbers={
                    "answer": answer,
                    "scores": scores,
                    "flagged_options": options,
                    "judge": label,
                },
            )
        )
    unscored = [r["item_id"] for r in rows if label and r["flagged"].get(label) is None]
    if (
        unscored
    ):  # an item the judge could not score was not screened: say so, never pass it silently
        res.findings.append(
            finding(
                key,
                "not_judged",
                cfg.judge_severity,
                f"judge {label} gave no usable score for the answer of {len(unscored)} "
                f"of {len(rows)} items (it did not "
                "follow the <score> format), so their distractors were not screened",
                items=unscored,
                fields=["answer"],
                numbers={"items": len(unscored), "of": len(rows), "judge": label},
            )
        )
    res.stats = {
        "judge": label,
        "items_with_results": len(rows),
        "bank_items_without_results": len(by_id - {r["item_id"] for r in data.judge})
        if by_id
        else 0,
        "results_not_in_bank": len(data.judge) - len(rows),
        "answer_not_scored": sum(r["flagged"].get(label) is None for r in rows),
        "per_question_type": {
            q: {
                "items": len(rs),
                **{
                    f"flagged_{k}": v
                    for k, v in proportion(
                        sum(bool(r["flagged"].get(label)) for r in rs),
                        sum(r["flagged"].get(label) is not None for r in rs),
                    ).items()
                },
            }
            for q, rs in sorted(per_type.items())
        },
    }
    return res
