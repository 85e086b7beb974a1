"""Human review of generated items in the browser: ``python -m gen review input=<run folder |
bank>``.

``review`` (action ``serve``) starts a local web app on 127.0.0.1 (:mod:`.server`), prints its
address with a per-session token, and serves until Ctrl-C: one item at a time as the candidate
sees it (:mod:`.items`: MCQs, digital bundles, context-tracking scenarios, any other kind's
records field by field), a toggle for the privileged side with the audit's findings and the
nocontext and judge results (:mod:`.results`), a rubric per item kind
(``prompts/review/<kind>.yaml``, the one a record-layout kind ships, or ``rubric=``), accept /
reject / needs-edit and a note, all by keyboard. Every change is appended to
``<folder>/reviews/<reviewer>.jsonl`` (:mod:`.labels`); for a bank, its review area
``<bank>/reviews/`` beside the immutable versions. When the server stops, the run writes one
:class:`ReviewStatusRecord` per item.

``review summary`` reads every reviewer's labels and reports per-reviewer counts, agreement
(Cohen's kappa for two reviewers, Fleiss' for more, per rubric field and for the decision;
:mod:`.agreement`) and the items reviewers disagree on: ``reviews/summary.md`` and
``reviews/summary.json`` in the reviewed folder, one :class:`AgreementRecord` per labelled item
in the run folder.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from gen.agreement import field_agreement
from gen.engine.manifest import atomic_write
from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.errors import InputError, MissingInputError
from gen.formats.labels import (
    REVIEWS,
    SUMMARY_JSON,
    SUMMARY_MD,
    label_file,
    latest,
    read_labels,
)
from gen.generators.review.items import (
    ReviewItem,
    attach_findings,
    find_findings,
    load_items,
    read_findings,
    rubrics_for,
)
from gen.generators.review.results import Results, attach_results, find_results
from gen.paths import inside
from gen.schemas.review import (
    DECISIONS,
    REVIEWER,
    AgreementRecord,
    ReviewLabel,
    ReviewStatusRecord,
    Rubric,
)

NAME = "review"


class ReviewConfig(CommonConfig):
    n: int = Field(0, ge=0)
    """Derived, not set: the items of input= (serve), the labelled items (summary)."""
    action: Literal["serve", "summary"] = "serve"
    """serve (the web app) | summary (agreement report); also the word after ``review``."""
    reviewer: str = Field(
        default_factory=lambda: os.environ.get("USER") or "reviewer",
        json_schema_extra={"hydra": "${oc.env:USER,reviewer}"},
    )
    """Whose labels these are ($USER by default): reviews/<reviewer>.jsonl in the run folder (or
    bank)."""
    rubric: str | None = None
    """A rubric file (YAML/JSON: name, kinds, fields) for the kinds it lists; null: the project's
    rubrics (prompts/review/mcq.yaml after EgoToM's appendix 8, digital.yaml, scenarios.yaml after
    the context benchmark's authoring checklist, record.yaml for any other kind unless it ships
    its own)."""
    port: int | None = Field(None, ge=1, le=65535)
    """serve: the port on 127.0.0.1 (null: a free one). The server never listens elsewhere."""
    findings: str | None = None
    """An audit run folder (or its audit.jsonl) whose findings are shown with the items they name
    (default: the run folder's own audit.jsonl or audit/audit.jsonl, if any; for a bank, the audit
    of every version up to the reviewed one)."""
    nocontext: str | None = None
    """A nocontext run folder (or its nocontext.jsonl): what the blind models answered, per item
    (right in k of n shuffles, per model), on the privileged side (default: the reviewed folder's
    own nocontext.jsonl, when it is a nocontext run)."""
    judge: str | None = None
    """A judge kind=distractor_validity run folder (or its judge.jsonl): each option's score per
    judge, and the flag, on the privileged side (default: the reviewed folder's own judge.jsonl of
    that kind, if any)."""
    version: int | None = Field(None, ge=1)
    """input=<bank folder>: review this version's items (null: the current version). Labels go to
    the bank's reviews/, outside its versions."""

    @model_validator(mode="after")
    def _check(self) -> ReviewConfig:
        if not REVIEWER.match(self.reviewer):
            raise ValueError(
                f"reviewer={self.reviewer!r}: letters, digits, . _ - (at most 64); set "
                "reviewer=NAME"
            )
        if self.num_shards != 1:
            raise ValueError("review runs in one process (num_shards=1)")
        return self


@dataclass
class ReviewPlan:
    folder: Path
    items: list[ReviewItem]
    files: list[Path]
    rubrics: dict[str, Rubric]
    findings: list[Path]
    """The audit files whose findings are shown."""
    results: Results
    """The nocontext and judge runs shown (:mod:`.results`)."""
    labels: dict[str, list[ReviewLabel]]
    labelled: list[str]
    """Item ids some reviewer labelled (summary's record indices)."""


def plan(cfg: ReviewConfig) -> Plan:
    """Read the folder's items, rubrics, findings and labels once: serve has one index per item,
    summary one per labelled item."""
    folder = cfg.input_path()
    assert folder is not None
    items, files = load_items(folder, cfg.version)
    if not items:
        raise InputError(f"input: {', '.join(map(str, files))} holds no items")
    rubrics = rubrics_for(items, cfg.rubric)
    findings = find_findings(folder, cfg.findings, cfg.version)
    for path in findings:
        attach_findings(items, read_findings(path))
    results = find_results(folder, cfg.nocontext, cfg.judge)
    attach_results(items, results)
    labels = read_labels(folder)
    order = {it.item_id: it.index for it in items}
    labelled = sorted(
        {lab.item_id for ls in labels.values() for lab in ls},
        key=lambda i: (order.get(i, len(order)), i),
    )
    data = ReviewPlan(folder, items, files, rubrics, findings, results, labels, labelled)
    if cfg.action == "summary":
        if not labelled:
            raise MissingInputError(
                f"input: {folder}/{REVIEWS} holds no labels yet "
                f"(python -m gen review input={folder} labels items)"
            )
        return Plan(len(labelled), data)
    return Plan(len(items), data)


@generator(
    NAME,
    config=ReviewConfig,
    records=(ReviewStatusRecord, AgreementRecord),
    kind="review",
    plan=plan,
)
def review(cfg: ReviewConfig, ctx: RunContext) -> Iterator[Any]:
    """Review items in a local web page (labels to reviews/<reviewer>.jsonl); summary: agreement."""
    data: ReviewPlan = ctx.plan.data
    for f in data.files + data.findings + data.results.files():
        ctx.record_input(f)
    if cfg.action == "summary":
        yield from summary(data, ctx)
    else:
        yield from serve(cfg, data, ctx)


def serve(cfg: ReviewConfig, data: ReviewPlan, ctx: RunContext) -> Iterator[ReviewStatusRecord]:
    import signal

    from gen.generators.review.server import Server, Session

    if (
        signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ):  # started as a background job of a script:
        signal.signal(
            signal.SIGINT, signal.default_int_handler
        )  # Ctrl-C (SIGINT) must still stop it
    session = Session(data.folder, data.items, cfg.reviewer, data.rubrics)
    server = Server(session, cfg.port).start()
    where = label_file(data.folder, cfg.reviewer)
    shown = [
        f"{sum(bool(getattr(it, k)) for it in data.items)} items with {what} ({path})"
        for k, what, path in (
            ("findings", "audit findings", ", ".join(map(str, data.findings)) or None),
            ("blind", "nocontext answers", data.results.nocontext),
            ("judged", "judge scores", data.results.judge),
        )
        if path is not None
    ]
    ctx.say(
        f"review: {len(data.items)} items of {data.folder} as {cfg.reviewer}; labels go to {where}",
        *(f"review: {line}" for line in shown),
        f"open {server.url}",
        "(Ctrl-C stops the server)",
        always=True,
    )
    server.wait()
    last, changes = latest(read_labels(data.folder).get(cfg.reviewer, []))
    decisions: Counter[str] = Counter()
    for i in ctx.indices():
        it = data.items[i]
        lab = last.get(it.item_id)
        decisions[lab.decision if lab and lab.decision else "undecided"] += 1
        yield ReviewStatusRecord(
            item_id=it.item_id,
            record_id=it.record_id,
            kind=it.kind,
            question_type=it.question_type,
            reviewer=cfg.reviewer,
            decision=lab.decision if lab else None,
            scores=lab.scores if lab else {},
            note=lab.note if lab else "",
            changes=changes.get(it.item_id, 0),
        )
    ctx.extra["review"] = {
        "folder": str(data.folder),
        "reviewer": cfg.reviewer,
        "labels_file": f"{REVIEWS}/{cfg.reviewer}.jsonl",
        "decisions": dict(sorted(decisions.items())),
        "port": server.port,
    }


def summarize(data: ReviewPlan) -> tuple[dict[str, Any], list[AgreementRecord]]:
    """The summary report and one agreement record per labelled item (pure: no files)."""
    by_id = {it.item_id: it for it in data.items}
    last = {r: latest(ls)[0] for r, ls in data.labels.items() if ls}
    reviewers = sorted(last)
    per_reviewer = {}
    for r in reviewers:
        counts: Counter[str] = Counter((lab.decision or "undecided") for lab in last[r].values())
        per_reviewer[r] = {
            "items": len(last[r]),
            "lines": len(data.labels[r]),
            **{d: counts.get(d, 0) for d in (*DECISIONS, "undecided")},
            "unknown_items": sum(i not in by_id for i in last[r]),
        }
    keys = list(
        dict.fromkeys(
            [f.key for rb in data.rubrics.values() for f in rb.fields]
            + sorted({k for labs in last.values() for lab in labs.values() for k in lab.scores})
        )
    )
    records = []
    decision_by_item: dict[str, dict[str, Any]] = {}
    score_by_item: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in keys}
    for item_id in data.labelled:
        it = by_id.get(item_id)
        decisions = {r: last[r][item_id].decision for r in reviewers if item_id in last[r]}
        scores = {r: dict(last[r][item_id].scores) for r in reviewers if item_id in last[r]}
        given = {r: d for r, d in decisions.items() if d is not None}
        if given:
            decision_by_item[item_id] = given
        disagree = ["decision"] if len(set(given.values())) > 1 else []
        for k in keys:
            vals = {r: s[k] for r, s in scores.items() if k in s}
            if vals:
                score_by_item[k][item_id] = vals
            if len(set(vals.values())) > 1:
                disagree.append(k)
        records.append(
            AgreementRecord(
                item_id=item_id,
                record_id=(
                    it.record_id
                    if it
                    else next(
                        (last[r][item_id].record_id for r in reviewers if item_id in last[r]), None
                    )
                ),
                kind=it.kind if it else "unknown",
                decisions=decisions,
                scores=scores,
                disagree=disagree,
                accepted_by=sorted(r for r, d in decisions.items() if d == "accept"),
            )
        )
    agreement = {
        "decision": field_agreement(decision_by_item, reviewers),
        **{k: field_agreement(score_by_item[k], reviewers) for k in keys},
    }
    report = {
        "folder": str(data.folder),
        "reviewers": reviewers,
        "items": len(data.items),
        "labelled_items": len(data.labelled),
        "per_reviewer": per_reviewer,
        "agreement": agreement,
        "method": (
            "Cohen's kappa"
            if len(reviewers) == 2
            else "Fleiss' kappa"
            if len(reviewers) > 2
            else "none (one reviewer)"
        )
        + "; scores and decisions as nominal categories",
        "disagreements": [r.model_dump(mode="json") for r in records if r.disagree],
    }
    return report, records


def markdown(report: dict[str, Any]) -> str:
    def cell(v: Any) -> str:
        return "–" if v is None else str(v).replace("|", "\\|").replace("\n", " ")

    lines = [
        f"# Review summary: {report['folder']}",
        "",
        f"{report['labelled_items']} of {report['items']} items labelled by "
        f"{len(report['reviewers'])} reviewer(s). Agreement: {report['method']}.",
        "",
        "## Per reviewer",
        "",
        "| reviewer | items | accept | reject | needs_edit | undecided | lines |",
        "|---|---|---|---|---|---|---|",
    ]
    for r, c in report["per_reviewer"].items():
        lines.append(
            f"| {cell(r)} | {c['items']} | {c['accept']} | {c['reject']} | {c['needs_edit']} | "
            f"{c['undecided']} | {c['lines']} |"
        )
    lines += [
        "",
        "## Agreement",
        "",
        "| field | items rated by ≥2 | observed | kappa | method |",
        "|---|---|---|---|---|",
    ]
    for k, a in report["agreement"].items():
        lines.append(
            f"| {cell(k)} | {a['items']} | {cell(a['observed'])} | {cell(a['kappa'])} "
            f"| {a['method']} |"
        )
    lines += ["", f"## Disagreements ({len(report['disagreements'])})", ""]
    if report["disagreements"]:
        lines += ["| item | record | on | decisions |", "|---|---|---|---|"]
        for d in report["disagreements"]:
            decisions = ", ".join(f"{r}: {v or '—'}" for r, v in d["decisions"].items())
            lines.append(
                f"| {d['item_id']} | {cell(d['record_id'])} | {', '.join(d['disagree'])} "
                f"| {cell(decisions)} |"
            )
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def summary(data: ReviewPlan, ctx: RunContext) -> Iterator[AgreementRecord]:
    import json

    report, records = summarize(data)
    yield from (records[i] for i in ctx.indices())
    reviews = inside(data.folder, REVIEWS, what="reviews folder")
    atomic_write(
        inside(reviews, SUMMARY_JSON), json.dumps(report, indent=1, ensure_ascii=False) + "\n"
    )
    atomic_write(inside(reviews, SUMMARY_MD), markdown(report))
    ctx.write_json("review_summary.json", report)
    ctx.extra["review"] = {
        "folder": str(data.folder),
        "reviewers": report["reviewers"],
        "agreement": {k: v["kappa"] for k, v in report["agreement"].items()},
        "disagreements": len(report["disagreements"]),
    }
