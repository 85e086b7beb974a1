"""What a released bank says about itself, and the data exports that carry it.

* :func:`dataset_card`: the README.md of a ``parquet`` or ``hf`` export (counts, releases,
  provenance, the last audit, every version's known audit findings, the review summary when
  there is one, license and citation, columns with the privileged ones named);
* ``croissant.json`` (:mod:`~generators.bank.croissant`), MLCommons Croissant 1.1 JSON-LD with
  the Responsible AI extension and a PROV-O account of the source runs;
* the writers of ``format=parquet``, ``croissant`` and ``hf``.

What both say (columns and their privileged side, answers, filters, audits, findings, models,
the review summary and the labels given after release) is read by
:mod:`~generators.bank.facts` from the version folder (its lock, ``audit/`` of each version up
to it, ``review/summary.json``) and from the bank's review area (``<bank>/reviews/``): the same
version and the same labels give the same bytes.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path
from typing import Any

import yaml

from gen import kinds
from gen.banks.store import LOCK, label, read_json
from gen.banks.values import REVIEW, review_summary
from gen.generators.bank.croissant import field_type, write_croissant
from gen.generators.bank.export import Job, Outcome, write_text
from gen.generators.bank.facts import (
    LISTED_FINDINGS,
    PRIVILEGED_COLUMNS,
    answers,
    column_doc,
    filter_lines,
    finding_line,
    known_findings,
    license_url,
    post_release_line,
    review_line,
)

SPLIT = "test"
"""The one split of an ``hf`` export: a bank is an evaluation set."""


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


def dataset_card(job: Job, header: dict[str, Any], *, intro: list[str] | None = None) -> str:
    """README.md of a ``parquet`` or ``hf`` export: a YAML header (``header``), then counts,
    releases, provenance, the last audit, the known findings, the review, license and files."""
    lock = job.lock
    shown = [k for k in kinds.bank_names() if k in job.frames]
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
            for k in shown
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
    lines += [f"- {answers(k)}" for k in shown] + [""]
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
    lines += md_table([{"column": c, "meaning": column_doc(c)} for c in present])
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
    files = {k: f"{k}.parquet" for k in kinds.bank_names() if k in job.frames}
    outcomes = _copy_data(job, out, files)
    header: dict[str, Any] = {"configs": card_configs(files)}
    if job.license:
        header["license"] = job.license.lower() if "://" not in job.license else "other"
    write_text(out / "README.md", dataset_card(job, header))
    write_croissant(job, out, files)
    return outcomes


def export_croissant(job: Job, out: Path) -> list[Outcome]:
    """The data files, the lock and ``croissant.json`` describing them."""
    files = {k: f"{k}.parquet" for k in kinds.bank_names() if k in job.frames}
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
    files = {k: f"{k}/{SPLIT}.parquet" for k in kinds.bank_names() if k in job.frames}
    outcomes = _copy_data(job, out, files)
    header: dict[str, Any] = {"pretty_name": f"{job.name} {job.label}"}
    if job.license:
        header["license"] = "other" if "://" in job.license else job.license.lower()
        if "://" in job.license:
            header["license_link"] = job.license
    mcq = [k for k in files if kinds.require(k).is_mcq]
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
