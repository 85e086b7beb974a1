"""Check 14: the people's labels of the audited run folder (``gen review``) where they disagree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gen.agreement import field_agreement
from gen.formats.labels import REVIEWS, latest, read_labels
from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import cell

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    return [
        f"{s['labelled']} items labelled by {cell(', '.join(s['reviewers']))}; "
        f"{s['disagreements']} with differing decisions; agreement on the decision: "
        f"{s['agreement']['method']} kappa {cell(s['agreement']['kappa'])} "
        f"over {s['agreement']['items']} items "
        f"rated by two or more.",
        "",
    ]


@check(
    "review",
    order=14,
    title="Review: reviewers' disagreement",
    finds="items whose reviewers (gen review) gave different decisions",
    markdown=_markdown,
)
def review(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Reads the labels people gave the audited run folder's items with ``python -m gen review``
    (``reviews/<reviewer>.jsonl``, each reviewer's last label of an item) and lists every item two
    reviewers decided differently (accept, reject, needs edit) as a warning, for a person to settle;
    the statistics give each reviewer's counts and the agreement on the decision (Cohen's kappa for
    two reviewers, Fleiss' for more). Skipped when no input run folder has labels."""
    key = "review"
    folder = next((f for f in data.folders if read_labels(f)), None)
    last = (
        {r: latest(ls)[0] for r, ls in read_labels(folder).items() if ls}
        if folder is not None
        else {}
    )
    if not last:
        return CheckResult(
            key,
            "skipped",
            f"no labels in the input run folder's {REVIEWS}/ (python -m gen review makes them)",
        )
    res = CheckResult(key)
    reviewers = sorted(last)
    by_item: dict[str, dict[str, Any]] = {}
    record: dict[str, str] = {}
    for r in reviewers:
        for item_id, lab in last[r].items():
            record.setdefault(item_id, lab.record_id or item_id)
            if lab.decision is not None:
                by_item.setdefault(item_id, {})[r] = lab.decision
    disagreements = 0
    for item_id, decisions in sorted(by_item.items(), key=lambda kv: record[kv[0]]):
        if len(set(decisions.values())) > 1:
            disagreements += 1
            shown = ", ".join(f"{r}: {d}" for r, d in sorted(decisions.items()))
            res.findings.append(
                finding(
                    key,
                    "review_disagreement",
                    "warning",
                    f"reviewers decided differently ({shown})",
                    items=[record[item_id]],
                    numbers={"item_id": item_id, "decisions": decisions},
                )
            )
    res.stats = {
        "reviewers": reviewers,
        "labelled": len(record),
        "disagreements": disagreements,
        "per_reviewer": {r: len(last[r]) for r in reviewers},
        "agreement": field_agreement(by_item, reviewers),
    }
    return res
