"""What a released bank says about itself: its columns, how its answers are made, its filters,
audits, findings, models and reviews, read from the version folder and the bank's review area.
The dataset card (:mod:`~generators.bank.release`) and ``croissant.json``
(:mod:`~generators.bank.croissant`) both say it.

**Privileged columns.** MCQ items carry a visible side (question, options, ``context``) and a
privileged side (the truth's provenance, future narrations, hidden state) that a candidate
must never see. In the data files only ``record`` (the original record, ``privileged``
included) and ``wagibench`` (WAGIBench's layout row: structured goals) hold the privileged
side; the cards and the Croissant field descriptions say so.

**Review summary.** When a version folder holds ``review/summary.json``
(:class:`schemas.bank.ReviewSummary`: ``items_reviewed``, ``by_verdict``, optional
``reviewers`` and ``protocol``: the items ``bank add require_review=k`` admitted), the card and
the Croissant file report it. A version is immutable, so labels given to a bank's items after
release (``python -m gen review input=<bank>``) live beside the versions, in ``<bank>/reviews/``
(the same label files as a run folder's); the card and the Croissant file report those given to
the exported items too (:func:`post_release_review`), with each label file's SHA-256. Without
either, neither mentions a review.
"""

from __future__ import annotations

from typing import Any

from gen import kinds
from gen.banks.store import label, read_json, version_dir
from gen.generators.bank.export import Job
from gen.schemas.bank import ReviewSummary

LISTED_FINDINGS = 20
"""Findings listed per version in a card and in the Croissant limitations; the rest are counted."""

COLUMNS = {
    "item_id": "The bank's content id of the item (how it is made: item_id in MANIFEST.lock.json).",
    "kind": "Item kind: tom, distractors, digital, mcq (an imported MCQ bank), scenarios "
    "(context tracking) or a plugin's kind.",
    "question_type": "Question type (goal, belief, actions; similar, dissimilar; a cue app for "
    "digital bundles).",
    "added_in": "The bank version that added the item.",
    "source": "SHA-256 of the manifest.json of the run the item came from (sources in "
    "MANIFEST.lock.json).",
    "source_format": "How record is read: mcq_record, egotom_csv or digital_bundle.",
    "source_item_id": "The item's id in the run or file it came from.",
    "record": "PRIVILEGED. The original record as canonical JSON, its privileged fields included "
    "(truth "
    "provenance, future narrations, hidden state). Never show it to a candidate.",
}
PRIVILEGED_COLUMNS = ("wagibench", "record")


def answers(kind: str) -> str:
    """How a kind's answers are made (its declared help)."""
    return kinds.require(kind).help


def column_doc(column: str) -> str:
    """What a bank column holds: a common column's meaning, else the one its kind declares."""
    if column in COLUMNS:
        return COLUMNS[column]
    return next((d[column] for k in kinds.bank_kinds() if column in (d := k.column_docs())), "")


# --------------------------------------------------------------------------- what the bank says


POST_RELEASE = (
    "gen review after release (python -m gen review input=<bank>): each reviewer's last label of "
    "an "
    "item; an item's verdict is the decision its reviewers share, disagreed when they differ"
)


def post_release_review(job: Job) -> tuple[ReviewSummary, dict[str, str]] | None:
    """The decisions people gave the exported items after release (``<bank>/reviews/``), as a
    review summary, and ``{label file: SHA-256}`` of the files that hold them; None when no
    exported item has one. A bad label line is an InputError naming ``file:line``."""
    from collections import Counter

    from gen.formats.labels import REVIEWS, label_file, latest, read_labels
    from gen.llm import sha256_file

    ids = {i for df in job.frames.values() for i in df["item_id"].to_list()}
    decisions: dict[str, set[str]] = {}
    reviewers: set[str] = set()
    for reviewer, labels in read_labels(job.root).items():
        for item_id, lab in latest(labels)[0].items():
            if item_id in ids and lab.decision is not None:
                decisions.setdefault(item_id, set()).add(lab.decision)
                reviewers.add(reviewer)
    if not decisions:
        return None
    verdicts = Counter(next(iter(d)) if len(d) == 1 else "disagreed" for d in decisions.values())
    summary = ReviewSummary(
        items_reviewed=len(decisions),
        by_verdict=dict(sorted(verdicts.items())),
        reviewers=len(reviewers),
        protocol=POST_RELEASE,
    )
    return summary, {
        f"{REVIEWS}/{r}.jsonl": sha256_file(label_file(job.root, r)) for r in sorted(reviewers)
    }


def post_release_line(job: Job) -> str | None:
    found = post_release_review(job)
    if found is None:
        return None
    summary, files = found
    hashes = ", ".join(f"`{name}` {sha[:16]}…" for name, sha in files.items())
    return (
        f"After release: {review_line(summary)} "
        f"Labels in the bank's `reviews/` (SHA-256: {hashes})."
    )


def review_line(r: ReviewSummary) -> str:
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(r.by_verdict.items()))
    who = f" by {r.reviewers} reviewer(s)" if r.reviewers is not None else ""
    how = f"; protocol: {r.protocol}" if r.protocol else ""
    return f"{r.items_reviewed} items reviewed{who}: {verdicts}{how}."


def audit_reports(job: Job) -> list[tuple[int, dict[str, Any]]]:
    """``(version, audit.json)`` of every version up to the exported one that holds an audit."""
    out = []
    for v in range(1, job.version + 1):
        path = version_dir(job.root, v) / "audit" / "audit.json"
        if path.is_file():
            out.append((v, read_json(path, "audit")))
    return out


def known_findings(job: Job) -> list[tuple[int, list[dict[str, Any]]]]:
    """The error and warning findings of each version's audit (the batch it added), worst first."""
    rank = {"error": 0, "warning": 1}
    out = []
    for v, report in audit_reports(job):
        found = [f for f in report.get("findings") or [] if f.get("severity") in rank]
        if found:
            out.append((v, sorted(found, key=lambda f: rank[f["severity"]])))
    return out


def finding_line(f: dict[str, Any]) -> str:
    items = f.get("items") or []
    return f"{f.get('severity')} {f.get('check')}/{f.get('kind')}: {f.get('what')}" + (
        f" ({len(items)} item(s))" if items else ""
    )


def model_lines(lock: dict[str, Any]) -> list[str]:
    """Each model that made or screened items, with its hash, once."""
    seen: dict[str, None] = {}
    for s in lock.get("sources") or []:
        for entry in [s, *(s.get("upstream") or [])]:
            llm = entry.get("llm") or {}
            if llm.get("model"):
                seen[
                    f"{entry.get('generator')}: LLM {llm.get('backend')} {llm['model']}"
                    + (f" (sha256 {llm['model_sha256']})" if llm.get("model_sha256") else "")
                ] = None
            emb = entry.get("embedder") or {}
            if emb.get("model"):
                seen[f"{entry.get('generator')}: embedder {emb.get('backend')} {emb['model']}"] = (
                    None
                )
    return list(seen)


def chain(source: dict[str, Any]) -> str:
    """The runs an item went through: upstream generators, then the one whose output was added."""
    names = [u.get("generator") or "?" for u in source.get("upstream") or []]
    return " -> ".join([*names, source.get("generator") or "external file"])


def filter_lines(job: Job) -> list[str]:
    """The filters every released item passed: generator checks, blind filtering, the audit gate,
    duplicate removal."""
    lock = job.lock
    out = []
    for s in lock.get("sources") or []:
        gens = [u.get("generator") for u in s.get("upstream") or []] + [s.get("generator")]
        what = f"{label(s['version'])}: {s.get('items_added')} items from {chain(s)}"
        if s.get("generator"):
            what += (
                f" (run manifest sha256 {s['source']}); each generator's own checks dropped or "
                "regenerated "
                "what failed them (counted in its manifest)"
            )
        else:
            what += f" (record files sha256 {s['source']})"
        if "nocontext" in gens:
            what += (
                "; blind-filtered by nocontext: "
                "items that models answered without the context were removed"
            )
        out.append(what + ".")
    for h in lock.get("history") or []:
        a = h.get("audit") or {}
        sev = a.get("by_severity") or {}
        verdict = "forced past its findings (force=true)" if a.get("forced") else "passed"
        refused = (
            ", ".join(f"{k} {n}" for k, n in sorted((h.get("refused") or {}).items())) or "none"
        )
        out.append(
            f"{h['label']}: the batch's audit {verdict} (fail_on={a.get('fail_on')}; "
            f"{sev.get('error', 0)} errors, {sev.get('warning', 0)} warnings, {sev.get('info', 0)} "
            "info); "
            f"refused as exact or near duplicates of bank or batch items: {refused}."
        )
    return out


def license_url(lic: str) -> str:
    """A license as a URL: an SPDX id becomes its spdx.org page; a URL stays."""
    return lic if "://" in lic else f"https://spdx.org/licenses/{lic}.html"
