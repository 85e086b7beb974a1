"""``bank export format=parquet|wagibench|egotom``: one version of the bank in a layout other
tools read.

One outcome per item of the kinds the format covers: the data files with a dataset card
(README.md: counts, provenance, the last audit); WAGIBench's MCQ layout from ``distractors``
items and its digital-state JSON from ``digital`` items; EgoToM's CSVs from ``tom`` items and
EgoToM-typed ``mcq`` items. Exported ids are the bank's; the original id is kept as
``source_item_id``.

The version is verified first (a damaged bank is never exported from). ``out=`` must be a new
(or empty) folder outside the bank: the export is written into a staging folder beside it and
renamed into place only when complete, so there is never a half-written export. File names made
from item data (a question type) go through :func:`gen.paths.safe_part` and
:func:`gen.paths.inside`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gen.errors import ConfigError
from gen.llm import sha256_file
from gen.mcq import EGOTOM_CHOICES, EGOTOM_TYPES, LETTERS, write_egotom_csv
from gen.paths import inside, safe_part
from generators.bank.identity import KINDS
from generators.bank.store import (
    LOCK,
    fsync_tree,
    is_within,
    label,
    read_json,
    read_kind,
    remove,
    version_dir,
)
from schemas import Reject
from schemas.bank import BankItemRecord

if TYPE_CHECKING:
    from gen.run import RunContext
    from generators.bank import BankConfig

EXPORT_KINDS = {"parquet": KINDS, "wagibench": ("distractors", "digital"), "egotom": ("tom", "mcq")}
"""The item kinds each format covers."""
Outcome = tuple[dict[str, Any], "str | Reject"]
"""An exported row and the file it went to, or the reject that kept it out."""


def check_out(root: Path, out: Path) -> None:
    """``out=`` is a place for a new export: outside the bank (resolved through symlinks, so
    ``<bank>/current`` is refused too), not a file, and new or empty (it is renamed into place
    whole)."""
    if is_within(root, out) or is_within(out, root):
        raise ConfigError(f"out: {out} is inside the bank {root} (or holds it); export to a folder outside it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"out: {out} exists and is not an empty folder; an export goes to a new folder")
    probe = out.parent
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"out: cannot make {out}: {probe} is not a writable folder")


def export(cfg: BankConfig, ctx: RunContext) -> Iterator[BankItemRecord | Reject]:
    root = cfg.bank_path()
    version = ctx.plan.data
    folder = version_dir(root, version)
    lock = read_json(folder / LOCK, "bank")
    out = Path(cfg.out).expanduser() if cfg.out else ctx.out_dir / cfg.format
    check_out(root, out)
    frames = {k: read_kind(folder / f"{k}.parquet") for k in EXPORT_KINDS[cfg.format]
              if (folder / f"{k}.parquet").is_file()}
    writer = {"parquet": export_parquet, "wagibench": export_wagibench, "egotom": export_egotom}[cfg.format]
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.parent / f".{out.name}.export-{os.getpid()}"
    remove(stage)
    stage.mkdir()
    try:
        outcomes = writer(folder, lock, frames, stage)
        written = {p.name: sha256_file(p) for p in sorted(stage.iterdir()) if p.is_file()}
        fsync_tree(stage)
        try:
            os.rename(stage, out)  # onto a missing or empty folder: the export appears whole
        except OSError as e:
            raise ConfigError(f"out: cannot put the export at {out} ({e.strerror}); choose a new folder") from None
    finally:
        remove(stage)
    ctx.extra["bank"] = {"action": "export", "bank": str(root), "version": label(version), "format": cfg.format,
                         "out": str(out), "files": written}
    if cfg.progress != "off":
        print(f"[bank] exported {label(version)} of {root} as {cfg.format} to {out}: {', '.join(written)}")
    for i, (row, where) in zip(ctx.indices(), outcomes, strict=True):
        if isinstance(where, Reject):
            yield where.model_copy(update={"index": i})
        else:
            yield BankItemRecord(item_id=row["item_id"], kind=row["kind"], question_type=row["question_type"],
                                 status="exported", version=label(version),
                                 source_item_id=row["source_item_id"], where=where)


def file_part(text: str) -> str:
    """A file-name part for a value from item data: :func:`gen.paths.safe_part`, plus a short
    hash when that changed it, so two values never share a file."""
    part = safe_part(text)
    return part if part == text else f"{part}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"


def write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def export_parquet(folder: Path, lock: dict[str, Any], frames: dict[str, Any], out: Path) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for kind, df in frames.items():
        shutil.copyfile(folder / f"{kind}.parquet", out / f"{kind}.parquet")
        outcomes += [(r, f"{kind}.parquet") for r in df.select("item_id", "kind", "question_type",
                                                               "source_item_id").iter_rows(named=True)]
    shutil.copyfile(folder / LOCK, out / LOCK)
    audit = read_json(folder / "audit" / "audit.json", "audit") if (folder / "audit" / "audit.json").is_file() else None
    write_text(out / "README.md", dataset_card(lock, frames, audit, sha256_file(folder / LOCK)))
    return outcomes


def export_wagibench(folder: Path, lock: dict[str, Any], frames: dict[str, Any], out: Path) -> list[Outcome]:
    from generators.digital import wagibench_record

    outcomes: list[Outcome] = []
    if "distractors" in frames:
        by_type: dict[str, list[dict[str, Any]]] = {}
        for r in frames["distractors"].iter_rows(named=True):
            name = f"wagibench_mcq_{file_part(r['question_type'])}.json"
            by_type.setdefault(name, []).append(wagibench_mcq(r))
            outcomes.append((r, name))
        for name, rows in by_type.items():
            write_text(inside(out, name, what="export file"), json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
    if "digital" in frames:
        state = {}
        for r in frames["digital"].iter_rows(named=True):
            rec = wagibench_record({**json.loads(r["record"]), "bundle_id": r["item_id"]})
            rec["meta"]["source_item_id"] = r["source_item_id"]
            state[r["item_id"]] = rec
            outcomes.append((r, "digital_state.json"))
        write_text(out / "digital_state.json", json.dumps(state, ensure_ascii=False, indent=1) + "\n")
    return outcomes


def wagibench_mcq(r: dict[str, Any]) -> dict[str, Any]:
    """A distractors item in WAGIBench's MCQ layout: the row its run wrote when there is one
    (structured goals for every option), else one built from the record (the answer's
    structured goal, the distractors as text)."""
    if r["wagibench"]:
        row = json.loads(r["wagibench"])
    else:
        rec = json.loads(r["record"])
        priv = rec.get("privileged") or {}
        truth = priv.get("structured_goal")
        mcq_set = [truth if k == rec["answer"] and truth else {"text": o} for k, o in enumerate(rec["options"])]
        tag = priv.get("reference_goal_id") or r["item_id"]
        row = {"x": {"client_tag": tag, "context_window": {"start_s": None, "end_s": None}, "cues": [],
                     "mcq_set": mcq_set},
               "y": rec["answer"],
               "meta": {"client_tag": tag, "scenario": {"shortname": rec.get("group")},
                        "structured_goal": truth or {"text": rec["options"][rec["answer"]]},
                        "question_type": rec["question_type"]}}
    row.setdefault("meta", {})
    row["meta"]["item_id"] = r["item_id"]
    row["meta"]["source_item_id"] = r["source_item_id"]
    return row


def export_egotom(folder: Path, lock: dict[str, Any], frames: dict[str, Any], out: Path) -> list[Outcome]:
    outcomes: list[Outcome] = []
    rows: dict[str, list[dict[str, Any]]] = {q: [] for q in EGOTOM_TYPES}
    for kind in ("tom", "mcq"):
        if kind not in frames:
            continue
        for r in frames[kind].iter_rows(named=True):
            q = r["question_type"]
            rec = json.loads(r["record"])
            reason = None
            if q not in EGOTOM_TYPES:
                reason = ("not_egotom_type", f"question type {q!r} is not one of {', '.join(EGOTOM_TYPES)}")
            elif len(r["options"]) != EGOTOM_CHOICES[q]:
                reason = ("wrong_option_count", f"{len(r['options'])} options; EgoToM's {q} CSV has {EGOTOM_CHOICES[q]}")
            elif r["answer"] is None:
                reason = ("no_answer", "the answer is not among the options")
            if reason:
                outcomes.append((r, Reject(record_id=r["item_id"], index=0, stage="export",
                                           reason=reason[0], detail=reason[1])))
                continue
            if r["source_format"] == "egotom_csv":
                row = dict(rec)
            else:
                row = {"vuid": rec.get("vuid") or r["group"], "cuid": rec.get("clip_id") or r["group"],
                       "narrations_in_context": r["context"], "clip_start_time": rec.get("clip_start_time"),
                       "clip_end_time": rec.get("clip_end_time")}
            row[f"gt_{q}"] = r["options"][r["answer"]]
            row.update({f"{q}_choice_{LETTERS[k]}": o for k, o in enumerate(r["options"])})
            rows[q].append(row)
            outcomes.append((r, f"egotom_{q}_shuffled.csv"))
    for q, rs in rows.items():
        if rs:
            write_egotom_csv(rs, q, out / f"egotom_{q}_shuffled.csv")
    return outcomes


def _md_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r.get(c, "")).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return [*out, ""]


def dataset_card(lock: dict[str, Any], frames: dict[str, Any], audit: dict[str, Any] | None, lock_sha: str) -> str:
    """README.md of an exported parquet dataset: counts, provenance, the last audit."""
    kinds = [k for k in KINDS if k in frames]
    lines = ["---", "configs:"]
    for k in kinds:
        lines += [f"- config_name: {k}", f"  data_files: {k}.parquet"]
    lines += ["---", "", f"# {lock.get('bank')} {lock['label']}", "",
              f"Released {lock['created_at']}; {lock['items']} items; bank schema revision {lock['schema_revision']}; "
              f"`{LOCK}` SHA-256 `{lock_sha}`. Made with gen {lock['toolkit'].get('version')} "
              f"(commit {(lock['toolkit'].get('git') or {}).get('commit')}).", "",
              "## Counts", ""]
    lines += _md_table([{"kind": k, "question type": q, "items": n} for k in kinds
                        for q, n in lock["counts"][k]["by_question_type"].items()])
    lines += ["## Releases", ""]
    lines += _md_table([{"version": h["label"], "date": h["created_at"], "added": sum((h.get("added") or {}).values()),
                         "refused": sum((h.get("refused") or {}).values()),
                         "audit errors/warnings/info": "/".join(str((h.get("audit") or {}).get("by_severity", {}).get(s, 0))
                                                                for s in ("error", "warning", "info")),
                         "forced": (h.get("audit") or {}).get("forced", False), "note": h.get("message") or ""}
                        for h in lock["history"]])
    lines += ["## Provenance", "", "Each row's `source` is the SHA-256 of the `manifest.json` of the run it came from "
              "(of its record files for input without a run manifest); the lock has the details:", ""]
    lines += _md_table([{"source": s["source"][:16], "version": label(s["version"]),
                         "generator": s.get("generator") or "external", "items": s.get("items_added"),
                         "llm": (s.get("llm") or {}).get("model") or "",
                         "model sha256": str((s.get("llm") or {}).get("model_sha256") or "")[:16],
                         "embedder": (s.get("embedder") or {}).get("model") or "", "input": s.get("input")}
                        for s in lock["sources"]])
    if lock.get("prompts"):
        lines += ["Prompt, judge and answer templates the items came from:", ""]
        lines += _md_table([{"template": k, "sha256": ", ".join(v)} for k, v in lock["prompts"].items()])
    lines += ["## Last audit", ""]
    if audit is None:
        lines += ["No audit in this version's folder.", ""]
    else:
        s = audit.get("summary") or {}
        sev = s.get("by_severity") or {}
        lines += [f"Audit of the batch that made {lock['label']} (`audit/` in the version folder): "
                  f"{sev.get('error', 0)} errors, {sev.get('warning', 0)} warnings, {sev.get('info', 0)} info; "
                  f"fail_on={s.get('fail_on')}, exit code {s.get('exit_code')}.", ""]
        lines += _md_table([{"#": c.get("id"), "check": c.get("key"), "status": c.get("status"),
                             **{sv: (c.get("findings") or {}).get(sv, 0) for sv in ("error", "warning", "info")}}
                            for c in audit.get("checks") or []])
    lines += ["## Files", ""]
    lines += _md_table([{"file": k, "sha256": v} for k, v in lock["files"].items()])
    lines += ["## Columns", "",
              "`item_id`: " + lock.get("item_id", "") + "; "
              "`added_in`: the version that added it; `source`, `source_format`, `source_item_id`: where it came "
              "from; `record`: the original record as canonical JSON; the other columns are flat copies for "
              "analysis.", "",
              f"The data files' SHA-256 are those of `{LOCK}`; `python -m gen bank verify bank=<dir>` "
              "rechecks the bank they were exported from.", ""]
    return "\n".join(lines)


