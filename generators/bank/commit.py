"""Writing a new version of the bank: its rows, lock, changelog and review summary, staged
beside the bank, checked as ``bank verify`` checks a version, and committed in one atomic step
(:func:`commit`). A failure before the commit point leaves the bank as it was.

A row holds the item's original record as canonical JSON (``record``) plus flat columns for
analysis (question, options, answer, context…; for digital: datetime, cue, persona…),
``added_in`` (the version that added it) and ``source`` (SHA-256 of the input run's
``manifest.json``, detailed in the lock). Existing rows are copied unchanged (``verify`` checks
it); files of untouched kinds are hard links to the previous version's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gen
from gen import kinds
from gen.banks.batch import Item
from gen.banks.identity import ITEM_ID
from gen.banks.store import (
    CHANGELOG,
    FORMAT,
    LOCK,
    SCHEMA_REVISION,
    bank_name,
    bank_write_error,
    columns,
    fault,
    fsync,
    fsync_tree,
    label,
    new_stage,
    publish,
    read_json,
    remove,
    version_dir,
    version_files,
    write_durable,
)
from gen.banks.values import digest_line, prompts_of
from gen.banks.verify import check_version
from gen.engine.manifest import git_info
from gen.errors import GenError
from gen.kinds import canonical
from gen.llm import sha256_file
from gen.schemas import Reject

if TYPE_CHECKING:
    from gen.generators.bank import BankConfig

LISTED = 20  # refused items / findings listed in a changelog entry
PER_REASON = 5  # refused items listed per reason in a changelog entry


@dataclass
class AuditOutcome:
    exit_code: int
    report: dict[str, Any]
    folder: Path

    @property
    def summary(self) -> dict[str, Any]:
        s = self.report.get("summary") or {}
        return {
            "by_severity": s.get("by_severity") or {},
            "fail_on": s.get("fail_on"),
            "exit_code": self.exit_code,
            "findings": s.get("findings", len(self.findings)),
        }

    @property
    def findings(self) -> list[dict[str, Any]]:
        return list(self.report.get("findings") or [])


SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass
class Verdict:
    item: Item
    reject: Reject | None = None


def commit(
    cfg: BankConfig,
    root: Path,
    current: int | None,
    version: int,
    frames: dict[str, Any],
    new: list[Item],
    verdicts: list[Verdict],
    source: dict[str, Any],
    audit: AuditOutcome,
) -> None:
    """Stage version ``version`` beside the bank, check it as ``verify`` would, then make it
    current in one atomic step. Any failure before the switch leaves the bank as it was (the
    stage removed); an OSError its owner fixes (permissions, a full disk) is one line, exit 2."""
    stage: Path | None = None
    try:
        stage = new_stage(root, version)
        stage_version(cfg, root, stage, current, version, frames, new, verdicts, source, audit)
        publish(root, stage, version)
    except OSError as e:
        if (said := bank_write_error(root, e, current)) is not None:
            raise said from None
        raise
    finally:
        if stage is not None and (stage.exists() or stage.is_symlink()):
            remove(stage)


def stage_version(
    cfg: BankConfig,
    root: Path,
    stage: Path,
    current: int | None,
    version: int,
    frames: dict[str, Any],
    new: list[Item],
    verdicts: list[Verdict],
    source: dict[str, Any],
    audit: AuditOutcome,
) -> None:
    """Write version ``version`` into ``stage`` (fsynced) and check it before it can become
    current."""
    import polars as pl

    old_dir = version_dir(root, current) if current else None
    by_kind: dict[str, list[Item]] = {}
    for it in new:
        by_kind.setdefault(it.kind, []).append(it)
    for kind in kinds.bank_names():
        target = stage / f"{kind}.parquet"
        if kind in by_kind:
            rows = [row_of(it, version, source["source"]) for it in by_kind[kind]]
            df = pl.DataFrame(rows, schema=columns(kind))
            if kind in frames:
                df = pl.concat([frames[kind].select(list(columns(kind))), df])
            df.write_parquet(target)
            fsync(target)
            fault("staging")
        elif kind in frames:
            assert old_dir is not None
            try:  # unchanged: the previous version's file, not a copy
                os.link(old_dir / f"{kind}.parquet", target)
            except OSError:
                shutil.copy2(old_dir / f"{kind}.parquet", target)
    if audit.folder.is_dir():
        shutil.copytree(audit.folder, stage / "audit")
    write_review_summary(stage, old_dir, new, source.get("review"))
    old_lock = read_json(old_dir / LOCK, "bank") if old_dir else None
    lock = make_lock(cfg, root, version, stage, old_lock, old_dir, new, verdicts, source, audit)
    write_durable(stage / CHANGELOG, changelog(lock, old_dir, new, verdicts, audit, cfg))
    lock["files"] = version_files(stage)
    write_durable(stage / LOCK, json.dumps(lock, indent=1, ensure_ascii=False) + "\n")
    fsync_tree(stage)
    previous = {
        iid: (added, hashlib.sha256(rec.encode()).hexdigest())
        for df in frames.values()
        for iid, added, rec in df.select("item_id", "added_in", "record").iter_rows()
    }
    problems, _ = check_version(
        root, version, stage, lock, previous if current else None, previous_lock=old_lock
    )  # before it can become current
    if problems:
        raise GenError(
            f"bank: the staged {label(version)} does not verify, nothing "
            f"written: {problems[0].detail}"
        )


def row_of(item: Item, version: int, source: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "item_id": item.item_id,
        "kind": item.kind,
        "question_type": item.question_type,
        "added_in": version,
        "source": source,
        "source_format": item.fmt,
        "source_item_id": item.source_item_id,
    }
    row.update(kinds.require(item.kind).row(item.record))
    if item.wagibench is not None:
        row["wagibench"] = canonical(item.wagibench)
    row["record"] = canonical(item.record)
    return row


def write_review_summary(
    stage: Path, old_dir: Path | None, new: list[Item], review: dict[str, Any] | None
) -> None:
    """The version's ``review/summary.json`` (what ``bank export`` puts in the dataset card): the
    previous version's reviewed items plus this batch's, when it was admitted by ``require_review``
    (each admitted item was accepted by at least k reviewers; the reviewers' names are kept so
    later versions count them once)."""
    from gen.banks.values import REVIEW, review_summary

    old = review_summary(old_dir) if old_dir else None  # validated: a damaged one is an InputError
    if review is None and old is None:
        return
    known = (
        read_json(old_dir / REVIEW, "bank").get("reviewer_names")
        if old is not None and old_dir
        else None
    )
    summary: dict[str, Any] = {
        **(old.model_dump() if old else {"items_reviewed": 0, "by_verdict": {}}),
        "reviewer_names": known if isinstance(known, list) else [],
    }
    if review is not None:
        admitted = [it for it in new if it.item_id in review["accepted_by"]]
        names = {r for it in admitted for r in review["accepted_by"][it.item_id]}
        summary["items_reviewed"] += len(admitted)
        summary["by_verdict"]["accept"] = summary["by_verdict"].get("accept", 0) + len(admitted)
        summary["reviewer_names"] = sorted(set(summary.get("reviewer_names") or []) | names)
        protocol = (
            "gen review; an item is admitted when at least "
            f"{review['required']} reviewer(s) accepted it"
        )
        summary["protocol"] = (
            protocol
            if summary.get("protocol") in (None, protocol)
            else "gen review; several rules (see the lock's sources)"
        )
    summary["reviewers"] = len(summary["reviewer_names"]) or summary.get("reviewers")
    (stage / REVIEW).parent.mkdir(exist_ok=True)
    write_durable(
        stage / REVIEW, json.dumps(summary, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    )


def make_lock(
    cfg: BankConfig,
    root: Path,
    version: int,
    stage: Path,
    old_lock: dict[str, Any] | None,
    old_dir: Path | None,
    new: list[Item],
    verdicts: list[Verdict],
    source: dict[str, Any],
    audit: AuditOutcome,
) -> dict[str, Any]:
    import polars as pl

    counts: dict[str, Any] = {}
    for kind in kinds.bank_names():
        p = stage / f"{kind}.parquet"
        if p.is_file():
            df = pl.read_parquet(p, columns=["question_type", "added_in"])
            counts[kind] = {
                "items": df.height,
                "by_question_type": dict(sorted(Counter(df["question_type"].to_list()).items())),
            }
    sources = list((old_lock or {}).get("sources") or [])
    sources.append({**source, "version": version, "items_added": len(new)})
    history = [dict(h) for h in (old_lock or {}).get("history") or []]
    if history and old_dir is not None:
        history[-1]["lock_sha256"] = sha256_file(old_dir / LOCK)
    refused = Counter(f"{v.reject.stage}:{v.reject.reason}" for v in verdicts if v.reject)
    history.append(
        {
            "version": version,
            "label": label(version),
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "message": cfg.message,
            "source": source["source"],
            "input": source["input"],
            "added": {
                k: sum(1 for it in new if it.kind == k)
                for k in kinds.bank_names()
                if any(it.kind == k for it in new)
            },
            "refused": dict(sorted(refused.items())),
            "audit": {**audit.summary, "forced": cfg.force and audit.exit_code != 0},
            "lock_sha256": None,
        }
    )
    return {
        "format": FORMAT,
        "schema_revision": SCHEMA_REVISION,
        "bank": bank_name(root),
        "version": version,
        "label": label(version),
        "created_at": history[-1]["created_at"],
        "toolkit": {"version": gen.__version__, "git": git_info()},
        "item_id": ITEM_ID,
        "items": sum(c["items"] for c in counts.values()),
        "counts": counts,
        "files": {},
        "prompts": prompts_of(sources),
        "sources": sources,
        "history": history,
    }


def changelog(
    lock: dict[str, Any],
    old_dir: Path | None,
    new: list[Item],
    verdicts: list[Verdict],
    audit: AuditOutcome,
    cfg: BankConfig,
) -> str:
    h = lock["history"][-1]
    added = Counter((it.kind, it.question_type) for it in new)
    lines = [f"## {h['label']} — {h['created_at']}", ""]
    if cfg.message:
        lines += [cfg.message, ""]
    lines.append(
        f"- added {len(new)}: " + ", ".join(f"{k}/{q} {n}" for (k, q), n in sorted(added.items()))
    )
    src = lock["sources"][-1]
    what = (
        f"{src.get('generator')} run, manifest sha256 {h['source'][:16]}…"
        if src.get("manifest")
        else f"no run manifest; record files sha256 {h['source'][:16]}…"
    )
    lines.append(f"- source: `{h['input']}` ({what})")
    rej = [v.reject for v in verdicts if v.reject]
    if rej:
        lines.append(
            f"- refused {len(rej)}: "
            + ", ".join(f"{k} {n}" for k, n in sorted(h["refused"].items()))
        )
        groups: dict[tuple[str, str], list[Reject]] = {}
        for r in rej:
            groups.setdefault((r.stage, r.reason), []).append(r)
        for rs in groups.values():
            lines += [
                f"  - `{r.record_id}` {r.stage} {r.reason}: {r.detail}" for r in rs[:PER_REASON]
            ]
            if len(rs) > PER_REASON:
                lines.append(
                    f"  - … {len(rs) - PER_REASON} more {rs[0].stage} {rs[0].reason} in the add "
                    "run's rejects.jsonl"
                )
    sev = audit.summary["by_severity"]
    verdict = (
        "passed"
        if audit.exit_code == 0
        else f"FORCED (force=true) past findings at or above fail_on={cfg.fail_on}"
    )
    lines.append(
        f"- audit: {sev.get('error', 0)} errors, {sev.get('warning', 0)} warnings, "
        f"{sev.get('info', 0)} info — {verdict} (audit/audit.md)"
    )
    if audit.exit_code != 0 and cfg.force:
        for f in sorted(
            audit.findings, key=lambda f: -SEVERITY_RANK.get(f.get("severity", ""), -1)
        )[:LISTED]:
            items = ", ".join((f.get("items") or [])[:5])
            lines.append(
                f"  - {f.get('severity')} {f.get('check')}/{f.get('kind')}: {f.get('what')}"
                + (f" (items: {items})" if items else "")
            )
        if len(audit.findings) > LISTED:
            lines.append(f"  - … {len(audit.findings) - LISTED} more in audit/audit.json")
    lines.append(
        digest_line(lock)
    )  # anchors every value of the lock but its file list (bank verify)
    previous = ""
    if old_dir is not None and (old_dir / CHANGELOG).is_file():
        previous = (
            (old_dir / CHANGELOG).read_text(encoding="utf-8").split("\n", 2)[2]
        )  # drop its title
    return f"# Changelog of {lock['bank']}\n\n" + "\n".join(lines) + "\n\n" + previous
