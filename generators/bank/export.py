"""``bank export format=…``: one version of the bank in a layout other tools read.

Formats (one writer each, :func:`export_kinds` says which item kinds it covers):

* ``parquet``: the bank's data files as they are, the lock, a dataset card (README.md: counts,
  provenance, audits) and ``croissant.json`` (:mod:`~generators.bank.release`);
* ``croissant``: the data files, the lock and ``croissant.json`` (MLCommons Croissant 1.1 with
  the Responsible AI fields, :mod:`~generators.bank.croissant`) alone;
* ``hf``: a folder ``datasets.load_dataset`` reads as it is, one config per kind
  (:mod:`~generators.bank.release`);
* ``lm_eval`` and ``inspect``: evaluation-harness tasks for the multiple-choice kinds
  (:mod:`~generators.bank.harness`);
* ``wagibench``: WAGIBench's MCQ layout from ``distractors`` items and its digital-state JSON
  from ``digital`` items; ``egotom``: EgoToM's CSVs from ``tom`` and EgoToM-typed ``mcq`` items;
  ``scenarios``: the Wearable Assistant Context Bench's released ``scenarios.jsonl`` (field
  names and order of its schema, gold inline) from ``scenarios`` items, with ``bank_ids.json``
  (each scenario_id's bank item id and version) and a ``MANIFEST.lock.json`` in the benchmark's
  form.

One outcome per item of the kinds the format covers. Exported ids are the bank's; the original
id is kept as ``source_item_id``. Every export holds ``EXPORT.json``: the bank, its version and
lock SHA-256, the format, and the SHA-256 of every other file of the export. An export is
byte-reproducible: the same bank version gives the same bytes (no clock, no absolute path, rows
in the bank's order, sorted keys).

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gen
from gen import kinds
from gen.banks.store import (
    LOCK,
    fsync_tree,
    is_within,
    label,
    read_json,
    read_kind,
    remove,
    version_dir,
)
from gen.errors import ConfigError
from gen.formats.mcq import EGOTOM_CHOICES, EGOTOM_TYPES, LETTERS, write_egotom_csv
from gen.llm import sha256_file
from gen.paths import inside, owning_bank, safe_part, unwritable
from gen.schemas import Reject
from gen.schemas.bank import BankItemRecord

if TYPE_CHECKING:
    from gen.engine.runner import RunContext
    from gen.generators.bank import BankConfig
    from gen.templates import Prompts

FORMATS = ("parquet", "croissant", "hf", "wagibench", "egotom", "lm_eval", "inspect", "scenarios")
EVERY_KIND = ("parquet", "croissant", "hf")
"""The formats every bank kind joins; a kind joins the others it declares
(:attr:`gen.kinds.Kind.formats`)."""


def export_kinds(fmt: str) -> tuple[str, ...]:
    """The bank kinds format ``fmt`` covers, in the bank's order."""
    return tuple(k.name for k in kinds.bank_kinds() if fmt in EVERY_KIND or fmt in k.formats)


EXPORT_FILE = "EXPORT.json"
Outcome = tuple[dict[str, Any], "str | Reject"]
"""An exported row and the file it went to, or the reject that kept it out."""


@dataclass(frozen=True)
class Job:
    """What a writer exports: one verified version of a bank, and the release's own facts."""

    root: Path
    version: int
    folder: Path
    """The version's folder."""
    lock: dict[str, Any]
    lock_sha: str
    frames: dict[str, Any]
    """The version's items per covered kind (polars frames, in the bank's order)."""
    prompts: Prompts
    """The run's templates (the harness prompt is hashed into the run's manifest)."""
    license: str | None = None
    citation: str | None = None

    @property
    def label(self) -> str:
        return label(self.version)

    @property
    def name(self) -> str:
        return str(self.lock.get("bank") or self.root.name)


Writer = Callable[[Job, Path], list[Outcome]]


def writers() -> dict[str, Writer]:
    from gen.generators.bank import harness, release

    return {
        "parquet": release.export_parquet,
        "croissant": release.export_croissant,
        "hf": release.export_hf,
        "wagibench": export_wagibench,
        "egotom": export_egotom,
        "lm_eval": harness.export_lm_eval,
        "inspect": harness.export_inspect,
        "scenarios": export_scenarios,
    }


def check_out(root: Path, out: Path) -> None:
    """``out=`` is a place for a new export: outside the bank (resolved through symlinks, so
    ``<bank>/current`` is refused too), not a file, and new or empty (it is renamed into place
    whole)."""
    if is_within(root, out) or is_within(out, root):
        raise ConfigError(
            f"out: {out} is inside the bank {root} (or holds it); export to a folder outside it"
        )
    if (other := owning_bank(out)) is not None:
        raise ConfigError(
            f"out: {out} is inside the bank {other}; export to a folder outside every bank"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(
            f"out: {out} exists and is not an empty folder; an export goes to a new folder"
        )
    why = unwritable(out.parent)  # the export is renamed into place there
    if why is not None:
        raise ConfigError(f"out: cannot make {out}: {why}")


def export(cfg: BankConfig, ctx: RunContext) -> Iterator[BankItemRecord | Reject]:
    root = cfg.bank_path()
    version = ctx.plan.data
    folder = version_dir(root, version)
    lock = read_json(folder / LOCK, "bank")
    out = Path(cfg.out).expanduser() if cfg.out else ctx.out_dir / cfg.format
    check_out(root, out)
    frames = {
        k: read_kind(folder / f"{k}.parquet")
        for k in export_kinds(cfg.format)
        if (folder / f"{k}.parquet").is_file()
    }
    job = Job(
        root,
        version,
        folder,
        lock,
        sha256_file(folder / LOCK),
        frames,
        ctx.prompts,
        license=cfg.license,
        citation=cfg.citation,
    )
    writer = writers()[cfg.format]
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.parent / f".{out.name}.export-{os.getpid()}"
    remove(stage)
    stage.mkdir()
    try:
        outcomes = writer(job, stage)
        write_text(stage / EXPORT_FILE, export_info(job, cfg.format, stage))
        written = tree_hashes(stage)
        fsync_tree(stage)
        try:
            os.rename(stage, out)  # onto a missing or empty folder: the export appears whole
        except OSError as e:
            raise ConfigError(
                f"out: cannot put the export at {out} ({e.strerror}); choose a new folder"
            ) from None
    finally:
        remove(stage)
    ctx.extra["bank"] = {
        "action": "export",
        "bank": str(root),
        "version": label(version),
        "format": cfg.format,
        "out": str(out),
        "files": written,
    }
    ctx.say(
        f"[bank] exported {label(version)} of {root} as {cfg.format} to {out}: {', '.join(written)}"
    )
    for i, (row, where) in zip(ctx.indices(), outcomes, strict=True):
        if isinstance(where, Reject):
            yield where.model_copy(update={"index": i})
        else:
            yield BankItemRecord(
                item_id=row["item_id"],
                kind=row["kind"],
                question_type=row["question_type"],
                status="exported",
                version=label(version),
                source_item_id=row["source_item_id"],
                where=where,
            )


def tree_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder``, by POSIX path relative to it, sorted."""
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix())
        if p.is_file()
    }


def export_info(job: Job, fmt: str, stage: Path) -> str:
    """``EXPORT.json``: which bank version this export is, and the hash of each of its files."""
    info = {
        "bank": job.name,
        "version": job.version,
        "label": job.label,
        "lock_sha256": job.lock_sha,
        "format": fmt,
        "items": {k: df.height for k, df in job.frames.items()},
        "gen": gen.__version__,
        "license": job.license,
        "prompts": dict(sorted(job.prompts.used.items())),
        "files": {k: v for k, v in tree_hashes(stage).items() if k != EXPORT_FILE},
    }
    return json_text(info)


def json_text(obj: Any) -> str:
    """JSON as every export writes it: sorted keys, one-space indent, UTF-8 as is, a final
    newline."""
    return json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def file_part(text: str) -> str:
    """A file-name part for a value from item data: :func:`gen.paths.safe_part`, plus a short
    hash when that changed it, so two values never share a file."""
    part = safe_part(text)
    return (
        part if part == text else f"{part}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"
    )


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="\n")


def export_wagibench(job: Job, out: Path) -> list[Outcome]:
    frames = job.frames
    from gen.formats.wagibench import wagibench_record

    outcomes: list[Outcome] = []
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in (
        r for k, f in frames.items() if kinds.require(k).is_mcq for r in f.iter_rows(named=True)
    ):
        name = f"wagibench_mcq_{file_part(r['question_type'])}.json"
        by_type.setdefault(name, []).append(wagibench_mcq(r))
        outcomes.append((r, name))
    for name, rows in by_type.items():
        write_text(
            inside(out, name, what="export file"),
            json.dumps(rows, ensure_ascii=False, indent=1) + "\n",
        )
    bundles = [k for k in frames if not kinds.require(k).is_mcq]
    if bundles:
        state = {}
        for r in (r for k in bundles for r in frames[k].iter_rows(named=True)):
            rec = wagibench_record({**json.loads(r["record"]), "bundle_id": r["item_id"]})
            rec["meta"]["source_item_id"] = r["source_item_id"]
            state[r["item_id"]] = rec
            outcomes.append((r, "digital_state.json"))
        write_text(
            out / "digital_state.json", json.dumps(state, ensure_ascii=False, indent=1) + "\n"
        )
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
        mcq_set = [
            truth if k == rec["answer"] and truth else {"text": o}
            for k, o in enumerate(rec["options"])
        ]
        tag = priv.get("reference_goal_id") or r["item_id"]
        row = {
            "x": {
                "client_tag": tag,
                "context_window": {"start_s": None, "end_s": None},
                "cues": [],
                "mcq_set": mcq_set,
            },
            "y": rec["answer"],
            "meta": {
                "client_tag": tag,
                "scenario": {"shortname": rec.get("group")},
                "structured_goal": truth or {"text": rec["options"][rec["answer"]]},
                "question_type": rec["question_type"],
            },
        }
    row.setdefault("meta", {})
    row["meta"]["item_id"] = r["item_id"]
    row["meta"]["source_item_id"] = r["source_item_id"]
    return row


def export_egotom(job: Job, out: Path) -> list[Outcome]:
    frames = job.frames
    outcomes: list[Outcome] = []
    rows: dict[str, list[dict[str, Any]]] = {q: [] for q in EGOTOM_TYPES}
    for frame in frames.values():
        for r in frame.iter_rows(named=True):
            q = r["question_type"]
            rec = json.loads(r["record"])
            reason = None
            if q not in EGOTOM_TYPES:
                reason = (
                    "not_egotom_type",
                    f"question type {q!r} is not one of {', '.join(EGOTOM_TYPES)}",
                )
            elif len(r["options"]) != EGOTOM_CHOICES[q]:
                reason = (
                    "wrong_option_count",
                    f"{len(r['options'])} options; EgoToM's {q} CSV has {EGOTOM_CHOICES[q]}",
                )
            elif r["answer"] is None:
                reason = ("no_answer", "the answer is not among the options")
            if reason:
                outcomes.append(
                    (
                        r,
                        Reject(
                            record_id=r["item_id"],
                            index=0,
                            stage="export",
                            reason=reason[0],
                            detail=reason[1],
                        ),
                    )
                )
                continue
            if r["source_format"] == "egotom_csv":
                row = dict(rec)
            else:
                row = {
                    "vuid": rec.get("vuid") or r["group"],
                    "cuid": rec.get("clip_id") or r["group"],
                    "narrations_in_context": r["context"],
                    "clip_start_time": rec.get("clip_start_time"),
                    "clip_end_time": rec.get("clip_end_time"),
                }
            row[f"gt_{q}"] = r["options"][r["answer"]]
            row.update({f"{q}_choice_{LETTERS[k]}": o for k, o in enumerate(r["options"])})
            rows[q].append(row)
            outcomes.append((r, f"egotom_{q}_shuffled.csv"))
    for q, rs in rows.items():
        if rs:
            write_egotom_csv(rs, q, out / f"egotom_{q}_shuffled.csv")
    return outcomes


def export_scenarios(job: Job, out: Path) -> list[Outcome]:
    """``scenarios.jsonl`` in the context benchmark's released schema, rows in the bank's order,
    each its stored record re-serialised through :class:`schemas.scenarios.ScenarioRecord` (the
    released field order, as ``gen scenarios`` writes it). The scenario ids are the records' own
    (the benchmark's tools key on them): a scenario whose id an earlier row already has is a reject
    (``duplicate_scenario_id``; ``gen scenarios existing=<bank export> id_start=…`` numbers a new
    batch past a bank's ids). ``bank_ids.json`` maps each exported scenario_id to its bank item id,
    version and source id; ``MANIFEST.lock.json`` is the benchmark's lock of the file."""
    from gen.contextbench import LOCK as SCENARIO_LOCK
    from gen.contextbench import RECORDS, SCHEMA_REVISION
    from gen.schemas.scenarios import ScenarioRecord

    outcomes: list[Outcome] = []
    lines: list[str] = []
    ids: dict[str, dict[str, Any]] = {}
    subsets: dict[str, int] = {}
    for frame in job.frames.values():
        for r in frame.iter_rows(named=True):
            rec = ScenarioRecord.model_validate(json.loads(r["record"]))
            if rec.scenario_id in ids:
                first = ids[rec.scenario_id]["item_id"]
                outcomes.append(
                    (
                        r,
                        Reject(
                            record_id=r["item_id"],
                            index=0,
                            stage="export",
                            reason="duplicate_scenario_id",
                            detail=f"scenario_id {rec.scenario_id} is already item {first}'s in "
                            "this export",
                        ),
                    )
                )
                continue
            ids[rec.scenario_id] = {
                "item_id": r["item_id"],
                "added_in": label(r["added_in"]),
                "source_item_id": r["source_item_id"],
            }
            subsets[rec.subset] = subsets.get(rec.subset, 0) + 1
            lines.append(rec.model_dump_json() + "\n")
            outcomes.append((r, RECORDS))
    write_text(out / RECORDS, "".join(lines))
    write_text(out / "bank_ids.json", json_text(ids))
    lock = {
        "benchmark_version": f"{job.name} {job.label}",
        "schema_revision": SCHEMA_REVISION,
        "judge_prompt_version": None,
        "judge_prompt_sha256": None,
        "scenarios_sha256": sha256_file(out / RECORDS),
        "prompt_conditions_sha256": None,
        "generator": f"gen bank export {gen.__version__}",
        "bank_lock_sha256": job.lock_sha,
        "counts": dict(sorted(subsets.items())),
    }
    write_text(out / SCENARIO_LOCK, json.dumps(lock, indent=2, ensure_ascii=False) + "\n")
    return outcomes
