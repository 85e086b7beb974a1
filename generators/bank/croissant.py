"""``croissant.json`` of a bank export: MLCommons Croissant 1.1 JSON-LD (files with SHA-256, one
record set per kind with typed fields, license, citation) with the Responsible AI extension (how
the data was made: generators, models and their hashes, prompt hashes, filters, audits, review)
and a PROV-O account of the source runs (``prov:wasGeneratedBy``). What it says is read from the
version folder and the bank's review area (:mod:`~generators.bank.facts`): the same version and
the same labels give the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gen import kinds
from gen.banks.store import LOCK, label
from gen.banks.values import review_summary
from gen.generators.bank.export import Job, json_text, write_text
from gen.generators.bank.facts import (
    LISTED_FINDINGS,
    PRIVILEGED_COLUMNS,
    answers,
    chain,
    column_doc,
    filter_lines,
    finding_line,
    known_findings,
    license_url,
    model_lines,
    post_release_line,
    review_line,
)

CROISSANT = "croissant.json"

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
                "description": column_doc(col) or col,
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
                "description": f"{lock['counts'][k]['items']} {k} items, one per row. {answers(k)}",
                "key": {"@id": f"{k}/item_id"},
                "field": fields,
            }
        )
    present = [k for k in kinds.bank_names() if k in files]
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
            + ", ".join(f"{k} {lock['counts'][k]['items']}" for k in present)
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
        "rai:dataAnnotationProtocol": [answers(k) for k in present]
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
