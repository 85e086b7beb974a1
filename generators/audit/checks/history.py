"""Check 10: a longitudinal history bank against WAGIBench's rules for it (§2.4, G.3)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import cell
from gen.schemas.audit import Severity

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData

RULES = {
    "self_support": "an observation is its own support",
    "wrong_participant": "a support was recorded by another participant",
    "wrong_environment": "a support was recorded in another environment",
    "later_support": "a support was not recorded strictly before its observation",
    "extra_positive": "more positive supports than the run asked for (or any for a "
    "non-longitudinal observation)",
    "positive_other_script": "a positive ('setup') support of another script",
    "negative_same_script": "a negative support of the observation's own script",
    "repeated_support": "the same recording twice in one bank",
    "too_many_supports": "more supports than the run asked for",
}


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    return [
        f"{s['banks']} history banks ({s['longitudinal']} longitudinal, {s['with_positive']} with "
        "a "
        f"positive); supports per bank: {cell(s['supports_per_bank'])}; shortfalls the run "
        f"recorded: {cell(s['shortfalls']) or 'none'}.",
        "",
    ]


@check(
    "history",
    order=10,
    title="Longitudinal history banks",
    finds="history banks breaking WAGIBench's rules: self-support, another participant or "
    "environment, "
    "a later support, more than one positive",
    markdown=_markdown,
)
def history(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Every bank of a ``history`` run against the rules the history bank is built by: supports are
    other recordings of the same participant in the same environment, recorded strictly earlier,
    each once; a longitudinal observation has at most ``positives`` positive (same-script) supports
    and a non-longitudinal one none; negatives come from other scripts; at most ``supports`` in all
    (the limits are the run's own, from its manifest)."""
    key = "history"
    if data.histories is None:
        return CheckResult(key, "skipped", "not a history run")
    res = CheckResult(key)
    limit_pos = int(data.history_config.get("positives", 1))
    limit_all = int(data.history_config.get("supports", 5))
    kinds: Counter[str] = Counter()
    for rec in data.histories:
        for kind, what, field in problems(rec, limit_pos, limit_all):
            kinds[kind] += 1
            sev: Severity = "warning" if kind == "too_many_supports" else "error"
            res.findings.append(
                finding(
                    key,
                    kind,
                    sev,
                    f"{RULES[kind]}: {what}",
                    items=[f"{rec.get('client_tag')}_{rec.get('scenario')}"],
                    fields=[field],
                )
            )
    sizes = Counter(len(r.get("supports") or []) for r in data.histories)
    res.stats = {
        "banks": len(data.histories),
        "longitudinal": sum(bool(r.get("longitudinal")) for r in data.histories),
        "with_positive": sum(
            any(s.get("history_type") == "setup" for s in r.get("supports") or [])
            for r in data.histories
        ),
        "supports_per_bank": {str(k): v for k, v in sorted(sizes.items())},
        "shortfalls": dict(
            sorted(Counter(s for r in data.histories for s in r.get("shortfalls") or []).items())
        ),
        "findings_by_kind": dict(sorted(kinds.items())),
        "limits": {"positives": limit_pos, "supports": limit_all},
    }
    return res


def problems(rec: dict[str, Any], positives: int, supports: int) -> list[tuple[str, str, str]]:
    """``(rule, what, field)`` for each rule one history record breaks."""
    out: list[tuple[str, str, str]] = []
    sups = rec.get("supports") or []
    me = (rec.get("client_tag"), rec.get("scenario"))
    seen: set[tuple[Any, Any]] = set()
    for j, s in enumerate(sups):
        at = f"supports[{j}]"
        ident = (s.get("client_tag"), s.get("scenario"))
        if ident == me:
            out.append(("self_support", f"{ident[0]} supports itself", at))
        if ident in seen:
            out.append(("repeated_support", f"{ident[0]} appears twice", at))
        seen.add(ident)
        if s.get("participant") != rec.get("participant"):
            out.append(
                (
                    "wrong_participant",
                    f"{s.get('participant')} != {rec.get('participant')}",
                    f"{at}.participant",
                )
            )
        if s.get("environment") != rec.get("environment"):
            out.append(
                (
                    "wrong_environment",
                    f"{s.get('environment')} != {rec.get('environment')}",
                    f"{at}.environment",
                )
            )
        if str(s.get("recorded_at")) >= str(rec.get("recorded_at")):
            out.append(
                (
                    "later_support",
                    f"{s.get('recorded_at')} is not before {rec.get('recorded_at')}",
                    f"{at}.recorded_at",
                )
            )
        same = s.get("script") == rec.get("script")
        if s.get("history_type") == "setup" and not same:
            out.append(
                (
                    "positive_other_script",
                    f"script {s.get('script')!r}, not {rec.get('script')!r}",
                    at,
                )
            )
        if s.get("history_type") == "negative" and same:
            out.append(("negative_same_script", f"script {s.get('script')!r}", at))
    pos = sum(s.get("history_type") == "setup" for s in sups)
    allowed = positives if rec.get("longitudinal") else 0
    if pos > allowed:
        out.append(("extra_positive", f"{pos} positives, at most {allowed}", "supports"))
    if len(sups) > supports:
        out.append(("too_many_supports", f"{len(sups)} supports, at most {supports}", "supports"))
    return out
