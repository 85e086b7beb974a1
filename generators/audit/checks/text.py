"""Check 13: visibly broken text in a bank's questions and options (the shared text gates)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import cell, table

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData

WARN_ONLY = frozenset({"language"})
"""Gates whose failures are warnings: a language guess on a short option can be wrong; the other
gates name text that is broken on its face."""


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    rows = [
        {"gate": g, "texts": n, "example": cell(s["examples"][g][0]["text"])}
        for g, n in s["by_gate"].items()
    ]
    return [f"{s['checked']} texts checked, {s['failed']} failed a gate.", "", *table(rows)]


@check(
    "text",
    order=13,
    title="Text gates: echoes, truncation, surface form, repetition, language",
    finds="questions and options that fail the shared text gates (prompt echoes, cut-off text, "
    "an action without its verb, degenerate repetition, another language)",
    uses=("language",),
    markdown=_markdown,
)
def text(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """The shared text gates every generator runs on model text (``gen/text/gates.py``) over the
    visible question and options of every item, from any source: options of EgoToM's question types
    must have their form (goal "To <verb> …", belief "C believes that <clause>", action "C <verb>
    …"), every other text is judged as prose. No prompt is known here, so the gates that compare
    with a prompt compare with nothing. One finding per gate, naming the items; language is a
    warning, the rest errors."""
    from gen.text.textaudit import audit_texts, bank_texts

    key = "text"
    if not data.items:
        return CheckResult(key, "skipped", "no items with a question or options")
    report = audit_texts(
        (t for it in data.items for t in bank_texts([it])),
        language=cfg.language,
        workers=data.workers,
    )
    res = CheckResult(key, stats=report.as_dict())
    for gate, n in report.by_gate.items():
        ex = report.examples[gate][0]
        res.findings.append(
            finding(
                key,
                gate,
                "warning" if gate in WARN_ONLY else "error",
                f"{n} text(s) fail the {gate} gate, e.g. {ex['field']} "
                f"of {ex['item_id']}: {ex['text']!r} ({ex['detail']})",
                items=sorted({i for g, i, _ in report.failures if g == gate}),
                fields=sorted({f for g, _, f in report.failures if g == gate}),
                numbers={"texts": n},
            )
        )
    return res
