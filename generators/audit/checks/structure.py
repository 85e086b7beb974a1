"""Check 1: answers among options, distinct non-empty options, unique ids, required fields."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import table
from gen.generators.audit.text import letter, norm
from gen.schemas.audit import Severity

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    rows = [{"question type": t, **v} for t, v in s["per_question_type"].items()]
    out = [f"{s['items']} items, {s['groups']} groups.", ""] + table(rows)
    if s["per_category"]:
        out += table([{"category": k, "items": v} for k, v in s["per_category"].items()])
    return out


@check(
    "structure",
    order=1,
    title="Structure: answers among options, unique options, required fields, counts",
    finds="answers not among the options, duplicate or empty options, duplicate ids, "
    "missing fields",
    markdown=_markdown,
)
def structure(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Every answer is one of its item's options, options are distinct and non-empty, ids are
    unique, required fields are present; counts per question type and category."""
    key = "structure"
    res = CheckResult(key)
    if data.bundles is not None:
        return CheckResult(
            key, "skipped", "a digital run: bundle structure is part of the digital check"
        )
    if data.scenarios is not None:
        return CheckResult(
            key,
            "skipped",
            "a scenario bank: its schema, field presence and ids are the scenarios check's rules",
        )
    if not data.items and not any(b.problems for b in data.banks):
        return CheckResult(key, "skipped", "no items (the input is a run folder without a bank)")
    for b in data.banks:
        for p in b.problems:
            sev: Severity = "error"
            res.findings.append(
                finding(
                    key,
                    "row_problem",
                    sev,
                    f"line {p['line'] + 1}: {p['field']} {p['problem']}",
                    items=[p["item_id"]],
                    fields=[p["field"]],
                    numbers={"line": p["line"] + 1},
                    bank=b.path.name,
                )
            )
    roles_bank = [b.format == "roles_jsonl" for b in data.banks]
    per_type: dict[str, dict[str, Any]] = {}
    categories: Counter[str] = Counter()
    groups: set[str] = set()
    for i, it in enumerate(data.items):  # one pass over the items
        bank = data.bank_name(i)
        # a roles bank reports its answer and required fields as row problems (above)
        roles = bool(roles_bank) and roles_bank[int(data.items.bank[i])]
        if it.options:
            if len(it.options) < 2:
                res.findings.append(
                    finding(
                        key,
                        "too_few_options",
                        "error",
                        "an item with options needs at least two",
                        items=[it.item_id],
                        fields=["options"],
                        bank=bank,
                    )
                )
            if it.answer is None and not roles:
                where = next(iter(it.privileged), "answer")
                res.findings.append(
                    finding(
                        key,
                        "answer_not_in_options",
                        "error",
                        "the correct answer is not among the options",
                        items=[it.item_id],
                        fields=[where],
                        bank=bank,
                    )
                )
            seen: dict[str, int] = {}
            for j, o in enumerate(it.options):
                n = norm(o)
                if not n:
                    res.findings.append(
                        finding(
                            key,
                            "empty_option",
                            "error",
                            f"option {letter(j)} is empty",
                            items=[it.item_id],
                            fields=[f"options[{j}]"],
                            bank=bank,
                        )
                    )
                elif n in seen:
                    res.findings.append(
                        finding(
                            key,
                            "duplicate_options",
                            "error",
                            f"options {letter(seen[n])} and {letter(j)} are the same text",
                            items=[it.item_id],
                            fields=[f"options[{seen[n]}]", f"options[{j}]"],
                            bank=bank,
                        )
                    )
                else:
                    seen[n] = j
            if not it.question.strip() and not roles:
                res.findings.append(
                    finding(
                        key,
                        "empty_question",
                        "error",
                        "the question is empty",
                        items=[it.item_id],
                        fields=["question"],
                        bank=bank,
                    )
                )
        for path, text in it.visible.items():
            if not text.strip():
                res.findings.append(
                    finding(
                        key,
                        "empty_visible",
                        "warning",
                        f"visible field {path} is empty",
                        items=[it.item_id],
                        fields=[path],
                        bank=bank,
                    )
                )
        row = per_type.setdefault(
            it.question_type, {"items": 0, "options": Counter(), "no_answer": 0}
        )
        row["items"] += 1
        row["options"][len(it.options)] += 1
        row["no_answer"] += bool(it.options) and it.answer is None
        if it.category is not None:
            categories[it.category] += 1
        if it.group is not None:
            groups.add(it.group)
    ids = Counter(data.items.ids)
    for item_id, count in sorted(ids.items()):
        if count > 1:
            res.findings.append(
                finding(
                    key,
                    "duplicate_id",
                    "error",
                    f"item id used by {count} items",
                    items=[item_id],
                    fields=["item_id"],
                    numbers={"count": count},
                )
            )
    del ids
    res.stats = {
        "items": len(data.items),
        "banks": {
            b.path.name: {
                "format": b.format,
                "items": len(b.items),
                "row_problems": len(b.problems),
            }
            for b in data.banks
        },
        "per_question_type": {
            t: {
                "items": r["items"],
                "options": dict(sorted(r["options"].items())),
                "no_answer": r["no_answer"],
            }
            for t, r in sorted(per_type.items())
        },
        "per_category": dict(sorted(categories.items())),
        "groups": len(groups),
    }
    return res
