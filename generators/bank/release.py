"""What a released bank says about itself, and the data exports that carry it.

* :func:`dataset_card`: the README.md of a ``parquet`` or ``hf`` export (counts, releases,
  provenance, the last audit, every version's known audit findings, the review summary when
  there is one, license and citation, columns with the privileged ones named);
* :func:`croissant`: ``croissant.json``, MLCommons Croissant 1.1 JSON-LD (files with SHA-256,
  one record set per kind with typed fields, license, citation) with the Responsible AI
  extension (how the data was made: generators, models and their hashes, prompt hashes,
  filters, audits, review) and a PROV-O account of the source runs (``prov:wasGeneratedBy``);
* the writers of ``format=parquet``, ``croissant`` and ``hf``.

Everything is read from the version folder (its lock, ``audit/`` of each version up to it,
``review/summary.json``) and from the bank's review area (``<bank>/reviews/``, the labels people
gave items after release): the same version and the same labels give the same bytes.

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

import html
import shutil
from pathlib import Path
from typing import Any

import yaml

from gen.banks.identity import KINDS, MCQ_KINDS
from gen.banks.store import LOCK, label, read_json, version_dir
from gen.banks.values import REVIEW, review_summary
from gen.generators.bank.export import Job, Outcome, json_text, write_text
from gen.schemas.bank import ReviewSummary

CROISSANT = "croissant.json"
LISTED_FINDINGS = 20
"""Findings listed per version in a card and in the Croissant limitations; the rest are counted."""
SPLIT = "test"
"""The one split of an ``hf`` export: a bank is an evaluation set."""

COLUMNS = {
    "item_id": "The bank's content id of the item (how it is made: item_id in MANIFEST.lock.json).",
    "kind": "Item kind: tom, distractors, digital, mcq (an imported MCQ bank) or scenarios "
    "(context tracking).",
    "question_type": "Question type (goal, belief, actions; similar, dissimilar; a cue app for "
    "digital bundles).",
    "added_in": "The bank version that added the item.",
    "source": "SHA-256 of the manifest.json of the run the item came from (sources in "
    "MANIFEST.lock.json).",
    "source_format": "How record is read: mcq_record, egotom_csv or digital_bundle.",
    "source_item_id": "The item's id in the run or file it came from.",
    "question": "The question shown to the candidate.",
    "options": "The options, in the order shown to the candidate.",
    "answer": "0-based index of the correct option in options.",
    "answer_text": "The correct option's text.",
    "group": "The unit items share (a clip, a reference goal's group): items of one group are "
    "related.",
    "context": "The visible context as the candidate reads it (narrations, app state).",
    "wagibench": "PRIVILEGED. WAGIBench's MCQ layout row as JSON (structured goals of the options "
    "and of "
    "the truth); null when the run wrote none. Never show it to a candidate.",
    "record": "PRIVILEGED. The original record as canonical JSON, its privileged fields included "
    "(truth "
    "provenance, future narrations, hidden state). Never show it to a candidate.",
    "current_datetime": "The bundle's current date and time.",
    "cue_id": "The digital cue's id; null for an uncued bundle.",
    "cue_app": "The app the cue is in.",
    "cue": "The cue's text.",
    "main_persona": "The name of the bundle's main persona.",
    "related_personas": "Names of the five related personas.",
    "apps": "The apps the bundle has states for.",
    "chars_total": "Characters of the rendered bundle.",
    "scenario_id": "The scenario's id in the context benchmark's format (sc-NN bank, adv-NN "
    "contrast).",
    "subset": "bank or contrast (A/B pairs that share turn 1).",
    "pair_id": "The contrast pair the scenario belongs to; null in the bank subset.",
    "target_context": "PRIVILEGED (judge side). Which context turn 2 refers to: current, prior, "
    "clarify or abstain.",
    "change_type": "PRIVILEGED (judge side). The kind of context shift between turn 1 and turn 2.",
    "activity_domain": "The scenario's activity domain (kitchen, workshop…).",
    "referent_complexity": "How many referents turn 2 could mean.",
    "difficulty_tier": "easy, medium or hard.",
    "turn_2_user": "What the user says at turn 2 (the deictic question).",
}
PRIVILEGED_COLUMNS = ("wagibench", "record")
ANSWERS = {
    "tom": "tom (EgoToM §3): the correct option is C's future goal, belief or next actions read "
    "from the "
    "narrations after the transition; the wrong options are counterfactuals an LLM proposed from "
    "the "
    "narrations before it, conditioned on the true goal.",
    "distractors": "distractors (WAGIBench §3.1): the correct option is the reference goal; the "
    "distractors "
    "are other goals of the bank drawn from percentile bands of embedding similarity to it.",
    "mcq": "mcq: items imported from an existing MCQ bank, with that bank's answers.",
    "digital": "digital (WAGIBench's Digital Context Generator): phone-app states per sampled "
    "persona, moment "
    "and cue; code draws the skeleton and an LLM writes the words. Bundles have no answer.",
    "scenarios": "scenarios (Wearable Assistant Context Bench): three-turn context-tracking "
    "scenarios; code draws "
    "the skeleton (shift type, target), an LLM writes the words, and the judge's gold lists "
    "(current/prior answers, clarify/abstain indicators) are inline in each record.",
}


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

    from gen.labels import REVIEWS, label_file, latest, read_labels
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


# --------------------------------------------------------------------------- the card


def md(value: Any) -> str:
    """A value from the lock or the data as card text: one line, with HTML's ``<``, ``>`` and ``&``
    escaped (a card is rendered as HTML, so a name or a finding never becomes markup)."""
    return html.escape(" ".join(str(value).split()), quote=False)


def md_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += [
        "| " + " | ".join(md(r.get(c, "")).replace("|", "\\|") for c in cols) + " |" for r in rows
    ]
    return [*out, ""]


def license_url(lic: str) -> str:
    """A license as a URL: an SPDX id becomes its spdx.org page; a URL stays."""
    return lic if "://" in lic else f"https://spdx.org/licenses/{lic}.html"


def dataset_card(job: Job, header: dict[str, Any], *, intro: list[str] | None = None) -> str:
    """README.md of a ``parquet`` or ``hf`` export: a YAML header (``header``), then counts,
    releases, provenance, the last audit, the known findings, the review, license and files."""
    lock = job.lock
    kinds = [k for k in KINDS if k in job.frames]
    audit_path = job.folder / "audit" / "audit.json"
    audit = read_json(audit_path, "audit") if audit_path.is_file() else None
    head = yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=1000)
    lines = [
        "---",
        head.rstrip("\n"),
        "---",
        "",
        f"# {md(job.name)} {job.label}",
        "",
        f"Released {md(lock['created_at'])}; {lock['items']} items; bank schema revision "
        f"{lock['schema_revision']}; `{LOCK}` SHA-256 `{job.lock_sha}`. Made with gen "
        f"{md(lock['toolkit'].get('version'))} "
        f"(commit {md((lock['toolkit'].get('git') or {}).get('commit'))}).",
        "",
    ]
    lines += intro or []
    lines += ["## Counts", ""]
    lines += md_table(
        [
            {"kind": k, "question type": q, "items": n}
            for k in kinds
            for q, n in lock["counts"][k]["by_question_type"].items()
        ]
    )
    lines += ["## Releases", ""]
    lines += md_table(
        [
            {
                "version": h["label"],
                "date": h["created_at"],
                "added": sum((h.get("added") or {}).values()),
                "refused": sum((h.get("refused") or {}).values()),
                "audit errors/warnings/info": "/".join(
                    str((h.get("audit") or {}).get("by_severity", {}).get(s, 0))
                    for s in ("error", "warning", "info")
                ),
                "forced": (h.get("audit") or {}).get("forced", False),
                "note": h.get("message") or "",
            }
            for h in lock["history"]
        ]
    )
    lines += [
        "## Provenance",
        "",
        "Each row's `source` is the SHA-256 of the `manifest.json` of the run it came from "
        "(of its record files for input without a run manifest); the lock has the details:",
        "",
    ]
    lines += md_table(
        [
            {
                "source": s["source"][:16],
                "version": label(s["version"]),
                "generator": s.get("generator") or "external",
                "items": s.get("items_added"),
                "llm": (s.get("llm") or {}).get("model") or "",
                "model sha256": str((s.get("llm") or {}).get("model_sha256") or "")[:16],
                "embedder": (s.get("embedder") or {}).get("model") or "",
                "input": s.get("input"),
            }
            for s in lock["sources"]
        ]
    )
    if lock.get("prompts"):
        lines += ["Prompt, judge and answer templates the items came from:", ""]
        lines += md_table(
            [{"template": k, "sha256": ", ".join(v)} for k, v in lock["prompts"].items()]
        )
    lines += ["How answers were made:", ""]
    lines += [f"- {ANSWERS[k]}" for k in kinds] + [""]
    lines += ["Filters every item passed:", ""]
    lines += [f"- {md(f)}" for f in filter_lines(job)] + [""]
    lines += ["## Last audit", ""]
    if audit is None:
        lines += ["No audit in this version's folder.", ""]
    else:
        s = audit.get("summary") or {}
        sev = s.get("by_severity") or {}
        lines += [
            f"Audit of the batch that made {job.label} (`audit/` in the version folder): "
            f"{md(sev.get('error', 0))} errors, {md(sev.get('warning', 0))} "
            f"warnings, {md(sev.get('info', 0))} "
            f"info; fail_on={md(s.get('fail_on'))}, exit code {md(s.get('exit_code'))}.",
            "",
        ]
        lines += md_table(
            [
                {
                    "#": c.get("id"),
                    "check": c.get("key"),
                    "status": c.get("status"),
                    **{
                        sv: (c.get("findings") or {}).get(sv, 0)
                        for sv in ("error", "warning", "info")
                    },
                }
                for c in audit.get("checks") or []
            ]
        )
    lines += ["## Known audit findings", ""]
    found = known_findings(job)
    if not found:
        lines += ["No audit of any version up to this one has an error or warning finding.", ""]
    for v, fs in found:
        lines += [f"{label(v)} ({len(fs)}):", ""]
        lines += [f"- {md(finding_line(f))}" for f in fs[:LISTED_FINDINGS]]
        if len(fs) > LISTED_FINDINGS:
            lines.append(
                f"- … {len(fs) - LISTED_FINDINGS} more in versions/{label(v)}/audit/audit.json"
            )
        lines.append("")
    review = review_summary(job.folder)
    after = post_release_line(job)
    if review is not None or after is not None:
        lines += ["## Review", ""]
    if review is not None:
        lines += [f"{md(review_line(review))} (`{REVIEW}` in the version folder)", ""]
    if after is not None:
        lines += [md(after), ""]
    lines += [
        "## License and citation",
        "",
        f"License: {job.license} ({license_url(job.license)})."
        if job.license
        else "License: none given (`license=` of `bank export`).",
        "",
    ]
    if job.citation:
        lines += ["```", job.citation.strip(), "```", ""]
    lines += [
        "## Files",
        "",
        f"The bank version's files (SHA-256 as in `{LOCK}`; `EXPORT.json` lists this "
        "export's own files):",
        "",
    ]
    lines += md_table([{"file": k, "sha256": v} for k, v in lock["files"].items()])
    lines += ["## Columns", "", "`item_id`: " + md(lock.get("item_id", "")) + ".", ""]
    present = dict.fromkeys(c for df in job.frames.values() for c in df.columns)
    lines += md_table([{"column": c, "meaning": COLUMNS.get(c, "")} for c in present])
    lines += [
        "The privileged side of an item (what a candidate must never see) is only in the columns "
        f"{', '.join(f'`{c}`' for c in PRIVILEGED_COLUMNS)}; a prompt shows `question`, `options` "
        "and "
        "`context` only.",
        "",
        "`python -m gen bank verify bank=<dir>` rechecks the bank these files were exported from.",
        "",
    ]
    return "\n".join(lines)


def card_configs(files: dict[str, str]) -> list[dict[str, Any]]:
    return [{"config_name": k, "data_files": f} for k, f in files.items()]


# --------------------------------------------------------------------------- Croissant

CONTEXT = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "arrayShape": "cr:arrayShape",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileObject": "cr:fileObject",
    "fileProperty": "cr:fileProperty",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "name": {"@container": "@language"},
    "parentField": "cr:parentField",
    "path": "cr:path",
    "prov": "http://www.w3.org/ns/prov#",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
"""Croissant 1.1's JSON-LD context (as mlcroissant writes it), plus PROV-O."""
CONFORMS_TO = "http://mlcommons.org/croissant/1.1"


def field_type(dtype: Any) -> tuple[str, bool]:
    """``(Croissant dataType, is an array)`` of a polars column type."""
    import polars as pl

    if isinstance(dtype, pl.List):
        return field_type(dtype.inner)[0], True
    if dtype.is_integer():
        return "sc:Integer", False
    if dtype.is_float():
        return "sc:Float", False
    if dtype == pl.Boolean:
        return "sc:Boolean", False
    return "sc:Text", False


def croissant(job: Job, files: dict[str, str]) -> dict[str, Any]:
    """The Croissant document of an export whose kind ``k`` is in the parquet file ``files[k]``
    (relative to the export folder, which also holds the lock)."""
    lock = job.lock
    out_files = {**files, "lock": LOCK}
    dist = [
        {
            "@type": "cr:FileObject",
            "@id": path,
            "name": path,
            "contentUrl": path,
            "encodingFormat": "application/json" if k == "lock" else "application/x-parquet",
            "sha256": job.lock_sha if k == "lock" else lock["files"][f"{k}.parquet"],
            "description": (
                f"The bank's lock of {job.label}: SHA-256 of every file, counts, sources, history."
                if k == "lock"
                else f"The {k} items of {job.name} {job.label}."
            ),
        }
        for k, path in out_files.items()
    ]
    record_sets = []
    for k, path in files.items():
        fields = []
        for col, dtype in job.frames[k].schema.items():
            dt, is_array = field_type(dtype)
            f: dict[str, Any] = {
                "@type": "cr:Field",
                "@id": f"{k}/{col}",
                "name": col,
                "description": COLUMNS.get(col, col),
                "dataType": dt,
                "source": {"fileObject": {"@id": path}, "extract": {"column": col}},
            }
            if is_array:
                f["isArray"] = True
                f["arrayShape"] = "-1"
            fields.append(f)
        record_sets.append(
            {
                "@type": "cr:RecordSet",
                "@id": k,
                "name": k,
                "description": f"{lock['counts'][k]['items']} {k} items, one per row. {ANSWERS[k]}",
                "key": {"@id": f"{k}/item_id"},
                "field": fields,
            }
        )
    kinds = [k for k in KINDS if k in files]
    external = any(not s.get("generator") for s in lock.get("sources") or [])
    generated = any(s.get("generator") for s in lock.get("sources") or [])
    review = review_summary(job.folder)
    after = post_release_line(job)
    found = known_findings(job)
    limitations = [
        f"{label(v)}: {finding_line(f)}" for v, fs in found for f in fs[:LISTED_FINDINGS]
    ]
    limitations += [
        f"{label(v)}: {len(fs) - LISTED_FINDINGS} more findings in "
        f"versions/{label(v)}/audit/audit.json"
        for v, fs in found
        if len(fs) > LISTED_FINDINGS
    ]
    analysis = [
        f"{h['label']}: audit of the batch: "
        + ", ".join(
            f"{n} {s}" for s, n in sorted(((h.get("audit") or {}).get("by_severity") or {}).items())
        )
        + (" (forced)" if (h.get("audit") or {}).get("forced") else "")
        for h in lock["history"]
    ]
    doc: dict[str, Any] = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": job.name,
        "description": (
            f"{job.name} {job.label}: {lock['items']} items ("
            + ", ".join(f"{k} {lock['counts'][k]['items']}" for k in kinds)
            + ") of a benchmark bank for egocentric assistants, made and released with gen "
            f"(bank version {job.label}, lock sha256 {job.lock_sha})."
        ),
        "version": f"{job.version}.0.0",
        "datePublished": lock["created_at"],
        "keywords": ["benchmark", "egocentric", "multiple-choice", "synthetic", "gen"],
        "isLiveDataset": False,
        "distribution": dist,
        "recordSet": record_sets,
        "rai:dataCollection": (
            " and ".join(
                [
                    *(
                        ["Generated with gen (its generators and an LLM; see prov:wasGeneratedBy)"]
                        if generated
                        else []
                    ),
                    *(["imported from existing MCQ banks"] if external else []),
                ]
            )
            + "; released through `gen bank add`, which audits every batch and refuses exact and "
            "near "
            "duplicates. Sources: "
            + "; ".join(
                f"{label(s['version'])} {chain(s)} ({s.get('items_added')} items)"
                for s in lock.get("sources") or []
            )
            + "."
        ),
        "rai:dataCollectionType": [
            *(["Synthetic data (LLM-generated)"] if generated else []),
            *(["Existing dataset"] if external else []),
        ],
        "rai:machineAnnotationTools": model_lines(lock)
        + [
            f"prompt template {k} sha256 {', '.join(v)}"
            for k, v in (lock.get("prompts") or {}).items()
        ],
        "rai:dataPreprocessingProtocol": filter_lines(job),
        "rai:dataAnnotationProtocol": [ANSWERS[k] for k in kinds]
        + ([f"Review: {review_line(review)}"] if review else [])
        + ([after] if after else []),
        "rai:dataAnnotationAnalysis": analysis,
        "rai:dataLimitations": limitations
        or ["No audit of any version up to this one has an error or warning finding."],
        "rai:dataUseCases": [
            "Evaluating assistants on multiple-choice questions from the visible side of each item "
            "(question, options, context). The columns "
            + ", ".join(PRIVILEGED_COLUMNS)
            + " hold the privileged side (truth provenance, hidden state) and must never be shown "
            "to a candidate."
        ],
        "rai:dataReleaseMaintenancePlan": (
            f"Versioned with gen bank: every release is an immutable folder whose lock ({LOCK}) "
            "holds the SHA-256 of "
            "each file; `python -m gen bank verify` rechecks a bank. This file "
            f"describes {job.label}."
        ),
        "prov:wasGeneratedBy": [prov_activity(s) for s in lock.get("sources") or []],
    }
    if review is not None or after is not None:
        doc["rai:annotationsPerItem"] = " ".join(
            x for x in (review_line(review) if review else None, after) if x
        )
    if job.license:
        doc["license"] = license_url(job.license)
    if job.citation:
        doc["citeAs"] = job.citation.strip()
    return doc


def prov_activity(s: dict[str, Any]) -> dict[str, Any]:
    """One source run as a PROV-O activity: its generator, models and prompt hashes."""
    agents: list[dict[str, Any]] = (
        [{"@type": "prov:SoftwareAgent", "name": f"gen {s.get('toolkit_version')}"}]
        if s.get("generator")
        else []
    )
    llm = s.get("llm") or {}
    if llm.get("model"):
        agents.append(
            {
                "@type": "prov:SoftwareAgent",
                "name": f"{llm.get('backend')} {llm['model']}",
                "sha256": llm.get("model_sha256"),
            }
        )
    emb = s.get("embedder") or {}
    if emb.get("model"):
        agents.append(
            {"@type": "prov:SoftwareAgent", "name": f"{emb.get('backend')} {emb['model']}"}
        )
    return {
        "@type": "prov:Activity",
        "@id": f"source/{s['source']}",
        "name": f"{chain(s)} (added in {label(s['version'])}, {s.get('items_added')} items)",
        "sha256": s["source"],
        "prov:wasAssociatedWith": agents,
        "prov:used": [
            {"@type": "prov:Entity", "name": k, "sha256": v}
            for k, v in sorted((s.get("prompts") or {}).items())
        ],
    }


def write_croissant(job: Job, out: Path, files: dict[str, str]) -> None:
    write_text(out / CROISSANT, json_text(croissant(job, files)))


# --------------------------------------------------------------------------- writers


def _copy_data(job: Job, out: Path, files: dict[str, str]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for kind, name in files.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(job.folder / f"{kind}.parquet", target)
        outcomes += [
            (r, name)
            for r in job.frames[kind]
            .select("item_id", "kind", "question_type", "source_item_id")
            .iter_rows(named=True)
        ]
    shutil.copyfile(job.folder / LOCK, out / LOCK)
    return outcomes


def export_parquet(job: Job, out: Path) -> list[Outcome]:
    """The bank's data files as they are, the lock, a dataset card and ``croissant.json``."""
    files = {k: f"{k}.parquet" for k in KINDS if k in job.frames}
    outcomes = _copy_data(job, out, files)
    header: dict[str, Any] = {"configs": card_configs(files)}
    if job.license:
        header["license"] = job.license.lower() if "://" not in job.license else "other"
    write_text(out / "README.md", dataset_card(job, header))
    write_croissant(job, out, files)
    return outcomes


def export_croissant(job: Job, out: Path) -> list[Outcome]:
    """The data files, the lock and ``croissant.json`` describing them."""
    files = {k: f"{k}.parquet" for k in KINDS if k in job.frames}
    outcomes = _copy_data(job, out, files)
    write_croissant(job, out, files)
    return outcomes


def hf_features(job: Job, kind: str) -> list[dict[str, Any]]:
    """A kind's columns as Hugging Face feature declarations (strings, not large strings)."""
    out = []
    for col, dtype in job.frames[kind].schema.items():
        dt, is_array = field_type(dtype)
        name = {"sc:Integer": "int64", "sc:Float": "float64", "sc:Boolean": "bool"}.get(
            dt, "string"
        )
        out.append({"name": col, "list": name} if is_array else {"name": col, "dtype": name})
    return out


def export_hf(job: Job, out: Path) -> list[Outcome]:
    """A folder ``datasets.load_dataset(<folder>, <kind>)`` reads offline: ``<kind>/test.parquet``
    (the bank's file), a card whose YAML header names the configs, their files and typed
    features, and ``croissant.json``."""
    files = {k: f"{k}/{SPLIT}.parquet" for k in KINDS if k in job.frames}
    outcomes = _copy_data(job, out, files)
    header: dict[str, Any] = {"pretty_name": f"{job.name} {job.label}"}
    if job.license:
        header["license"] = "other" if "://" in job.license else job.license.lower()
        if "://" in job.license:
            header["license_link"] = job.license
    mcq = [k for k in files if k in MCQ_KINDS]
    if mcq:
        header["task_categories"] = ["multiple-choice"]
    header["tags"] = ["gen", "benchmark", "egocentric", "synthetic"]
    n = job.lock["items"]
    header["size_categories"] = [
        "n<1K"
        if n < 1000
        else "1K<n<10K"
        if n < 10_000
        else "10K<n<100K"
        if n < 100_000
        else "100K<n<1M"
    ]
    header["configs"] = [
        {"config_name": k, "data_files": [{"split": SPLIT, "path": f}]} for k, f in files.items()
    ]
    header["dataset_info"] = [
        {
            "config_name": k,
            "features": hf_features(job, k),
            "splits": [
                {
                    "name": SPLIT,
                    "num_bytes": (job.folder / f"{k}.parquet").stat().st_size,
                    "num_examples": job.frames[k].height,
                }
            ],
        }
        for k in files
    ]
    intro = ["## Load", "", "```python", "from datasets import load_dataset", ""]
    intro += [f'{k} = load_dataset("<this folder>", "{k}", split="{SPLIT}")' for k in files]
    intro += [
        "```",
        "",
        "One config per item kind, one split (`test`). `answer` is the 0-based index of the "
        "correct option in `options`, `answer_text` its text.",
        "",
    ]
    write_text(out / "README.md", dataset_card(job, header, intro=intro))
    write_croissant(job, out, files)
    return outcomes
