"""Check 16: a context-tracking scenario bank against the Wearable Assistant Context Bench's
authoring rules (the rule functions of :mod:`generators.scenarios.rules`)."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import cell, table
from gen.schemas.audit import Severity

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData

SIGNATURE_LIMIT = 2
"""Scenarios per (change_type, target, difficulty, domain) signature: the benchmark validator's
limit (``validate_scenarios.py``, check 3), as ``gen scenarios`` applies it by default."""
WARNING_RULES = frozenset(
    {
        "camera_evaluates_technique",
        "camera_refers_to_turn_1",
        "camera_functional_label",
        "shift_announced",
        "speech_not_deictic",
        "speech_describes_properties",
        "repair_not_named",
        "repetitive_text",
    }
)
"""Rules that are gen's word patterns for an authoring rule (a list of phrases, not the rule
itself): a hit is for a person to read, so a warning. Every other rule (schema, field presence,
gold tokens in user speech, object names in camera text, duplicate turn-2 texts, the signature
limit, the gold lists' size and overlap, empty texts, object names in user speech) is an error,
as the benchmark's validator or its authoring rules state it."""
SIGNATURE_FIELDS = ["change_type", "target_context", "difficulty_tier", "activity_domain"]


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    out = [
        f"{s['scenarios']} scenarios ({cell(s['subset'])}); targets: {cell(s['target_context'])}; "
        f"{s['with_findings']} with at least one finding, {s['schema_invalid']} outside the "
        "released schema "
        f"(only the schema and field-presence rules are applied to those).",
        "",
    ]
    rows = [
        {
            "rule": k,
            "scenarios": v["scenarios"],
            "findings": v["findings"],
            "severity": v["severity"],
            "rule says": v["says"],
        }
        for k, v in s["rules"].items()
    ]
    return out + table(rows)


def _fields(detail: str, names: tuple[str, ...]) -> list[str]:
    """The record field a rule's detail names first (``object name 'jar' in turn_1_image``)."""
    hits = [(m.start(), n) for n in names for m in [re.search(rf"\b{re.escape(n)}\b", detail)] if m]
    return [min(hits)[1]] if hits else []


@check(
    "scenarios",
    order=16,
    title="Context-tracking scenarios: the benchmark's authoring rules",
    finds="scenarios breaking the context benchmark's authoring rules: gold words in user speech, "
    "object names "
    "in camera text, schema and field presence, duplicate turn-2 texts, signatures over the limit",
    markdown=_markdown,
)
def scenarios(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Every scenario of a bank in the Wearable Assistant Context Bench's released schema (a
    ``scenarios`` run or any JSONL of such records) against the rules ``gen scenarios`` refuses
    scenarios by: per scenario (``rule_problems``) the released schema and which fields exist,
    gold tokens in user speech (word boundary, as the benchmark's validator), object names in
    camera text (the project's vocabulary), a camera text that judges technique or points back to
    turn 1, a turn-2 user line that announces the shift or has no deictic reference, a named
    repair that names neither referent, gold lists under 3 items or shared between current and
    prior, clarify/abstain targets without 3 indicators; over the bank (``bank_problems``)
    duplicate ids, identical turn-2 texts and more than 2 scenarios per signature. Word-pattern
    rules are warnings, the others errors. A record outside the schema gets only the schema and
    field-presence rules (the text rules need its fields' types). For a ``scenarios`` run the
    gold categories of its ``scenario_checks.jsonl`` are used, as the generator used them: each
    list's object name is never allowed in camera text, the named repair must name it, and every
    list needs a name, a technique and a state item."""
    key = "scenarios"
    if data.scenarios is None:
        return CheckResult(key, "skipped", "not a scenario bank")
    from pydantic import ValidationError

    from gen.contextbench.rules import (
        RULES,
        bank_problems,
        presence_problems,
        rule_problems,
        schema_problems,
    )
    from gen.schemas.scenarios import GOLD_FIELDS, RECORD_FIELDS, ScenarioRecord

    says: dict[str, str] = {}
    for _, rule, text in RULES:
        says.setdefault(rule, text)
    names = (
        *(f for f in RECORD_FIELDS if f != "gold"),
        *GOLD_FIELDS,
    )  # "gold item 'x' in turn_2_user" names turn_2_user
    res = CheckResult(key)
    per_rule: dict[str, set[str]] = {}
    counts: Counter[str] = Counter()
    valid: list[dict[str, Any]] = []
    invalid = 0

    def add(rule: str, detail: str, sid: str | None) -> None:
        sev: Severity = "warning" if rule in WARNING_RULES else "error"
        fields = SIGNATURE_FIELDS if rule == "signature_limit" else _fields(detail, names)
        res.findings.append(
            finding(
                key,
                rule,
                sev,
                f"{says.get(rule, rule)}: {detail}",
                items=[sid] if sid else [],
                fields=fields,
            )
        )
        counts[rule] += 1
        if sid:
            per_rule.setdefault(rule, set()).add(sid)

    for s in data.scenarios:
        sid = str(s.get("scenario_id"))
        try:
            ScenarioRecord.model_validate(s)
        except ValidationError:
            invalid += 1
            problems = schema_problems(s) + presence_problems(s)
        else:
            valid.append(s)
            problems = rule_problems(s, categories=data.scenario_categories.get(sid))
        for rule, detail in problems:
            add(rule, detail, sid)
    for sid, rule, detail in bank_problems(valid, signature_limit=SIGNATURE_LIMIT):
        add(rule, detail, None if sid == "<bank>" else sid)
    flagged = {sid for ids in per_rule.values() for sid in ids}
    res.stats = {
        "scenarios": len(data.scenarios),
        "schema_invalid": invalid,
        "with_findings": len(flagged),
        "signature_limit": SIGNATURE_LIMIT,
        "subset": dict(sorted(Counter(str(s.get("subset")) for s in data.scenarios).items())),
        "target_context": dict(
            sorted(Counter(str(s.get("target_context")) for s in data.scenarios).items())
        ),
        "change_type": dict(
            sorted(Counter(str(s.get("change_type")) for s in data.scenarios).items())
        ),
        "rules": {
            rule: {
                "scenarios": len(per_rule.get(rule, ())),
                "findings": n,
                "severity": "warning" if rule in WARNING_RULES else "error",
                "says": says.get(rule, rule),
            }
            for rule, n in sorted(counts.items())
        },
    }
    return res
