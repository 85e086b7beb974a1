"""Reading an input batch of ``bank add``: its record files and their kind and format
(:func:`batch_files`: a run folder, a folder of EgoToM CSVs, one file, or a JSONL bank read
through a roles file), every item validated with its content id (:class:`Item`,
:func:`load_batch`; a bad line is an InputError naming file:line), and the batch's provenance
(:func:`source_info`: the run's manifest and those of the runs it read). ``gen review`` reads a
run folder's items through the same functions, so an item's id there is its id in a bank."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gen import kinds
from gen.engine.runfolder import RunFolder
from gen.errors import ConfigError, GenError, InputError
from gen.kinds import Kind, canonical
from gen.llm import sha256_file
from gen.readers import iter_jsonl
from gen.schemas.bank import SourceManifest

# --------------------------------------------------------------------------- the batch


@dataclass
class Item:
    kind: str
    fmt: str
    """How ``record`` is read back (its kind's :meth:`~gen.kinds.Kind.source_format_of`: an MCQ
    record, an EgoToM CSV row, a digital bundle…)."""
    record: dict[str, Any]
    item_id: str
    source_item_id: str
    where: str
    question_type: str
    wagibench: dict[str, Any] | None = None


def kind_of(path: Path) -> Kind:
    """The bank kind of a records file, by its kind's declared files (a JSONL no kind declares
    holds ``mcq`` records)."""
    if path.suffix not in (".jsonl", ".csv"):
        raise InputError(f"input: {path}: expected a .jsonl of records or an EgoToM .csv")
    kind = kinds.for_file(path)
    if kind is None and path.suffix == ".csv":
        raise InputError(
            f"input: {path} is not an EgoToM CSV (no gt_goal/gt_belief/gt_actions column)"
        )
    return kind or kinds.require("mcq")


def batch_files(
    path: Path, kind: str = "auto", roles: str | None = None
) -> list[tuple[Path, str, str]]:
    """The record files of input= with their kind and format: a run folder (its kind's item
    files), a folder of record files without a manifest (the first kind that declares one of
    them), one file, or (with a roles file) any JSONL bank."""
    wanted = None if kind == "auto" else kinds.require(kind)
    if roles is not None:
        if not path.is_file() or path.suffix != ".jsonl":
            raise InputError(f"input: with roles= the bank must be one JSONL file, got {path}")
        if wanted is not None and not wanted.is_mcq:
            raise ConfigError(f"kind={kind} does not fit roles= (a roles file describes MCQs)")
        return [(path, "mcq" if wanted is None else kind, "roles_jsonl")]
    files: list[Path]
    run = RunFolder.find(path) if path.is_dir() else None
    source = run if path.is_dir() else RunFolder.find(f) if (f := run_folder(path)) else None
    if source is not None and (missing := source.partial) is not None:
        raise InputError(
            f"input: {source.path} is a partial merge (shard(s) "
            f"{', '.join(map(str, missing)) or 'unknown'} missing); a bank takes a complete run: "
            "merge every shard"
        )
    if path.is_file():
        files = [path]
    elif run is not None:
        files = run_files(run)
    else:
        found = kinds.in_folder(path)
        files = found[1] if found is not None else []
    if not files:
        names = ", ".join(f for k in kinds.bank_kinds() for f in k.files)
        raise InputError(f"input: {path} holds no records ({names} or EgoToM CSVs)")
    out = []
    for f in files:
        k = kind_of(f)
        if wanted is not None:
            if wanted.family != k.family:
                raise ConfigError(f"kind={kind} does not fit {f} ({k.source_format_of(f)})")
            k = wanted
        out.append((f, k.name, k.source_format_of(f)))
    return out


def run_files(run: RunFolder) -> list[Path]:
    """The item files of a run folder, by the kind its manifest names: its records, or (a
    screening) the items it kept."""
    kind = kinds.of_run(run)
    if kind is not None and kind.gives_items:
        return kind.item_files(run)
    raise InputError(
        f"input: {run.path} is a {run.generator} run; its records ({run.kind}) are not items a "
        f"bank holds ({', '.join(kinds.bank_names())})"
    )


def count_rows(path: Path, kind: str) -> int:
    """The records of one batch file, parsed as the batch will be (a non-UTF-8 byte or a bad line
    is an InputError naming file:line)."""
    return sum(1 for _ in kinds.require(kind).read(path))


def run_folder(path: Path) -> Path | None:
    """The run folder a records file belongs to (the one holding manifest.json), if any."""
    for folder in (path.parent, path.parent.parent):
        if (folder / "manifest.json").is_file():
            return folder
    return None


def wagibench_rows(folder: Path | None) -> dict[str, dict[str, Any]]:
    """The WAGIBench MCQ layout rows a distractors run wrote, by the MCQ's item_id (a file that
    is not a JSON list of objects with a ``meta`` object is an InputError naming it)."""
    from gen.readers import read_json

    rows: dict[str, dict[str, Any]] = {}
    if folder is None:
        return rows
    for f in sorted(folder.glob("wagibench_mcq_*.json")):
        data = read_json(f)
        if not isinstance(data, list) or not all(
            isinstance(r, dict) and isinstance(r.get("meta", {}), dict) for r in data
        ):
            raise InputError(
                f"{f}: not WAGIBench's MCQ layout (a JSON list of rows with a meta object)"
            )
        for row in data:
            rid = (row.get("meta") or {}).get("item_id")
            if isinstance(rid, str) and rid:
                rows[rid] = row
    return rows


def roles_items(path: Path, kind: str, roles_file: str) -> list[Item]:
    """A JSONL bank read through a roles file, each row as an MCQ record (the form the bank
    stores, hashes and exports) keeping the row itself under ``source_row``."""
    from gen.formats.roles import load_roles_bank, read_roles

    roles = read_roles(Path(roles_file).expanduser())
    bank = load_roles_bank(path, roles)
    if bank.problems:
        p = bank.problems[0]
        raise InputError(
            f"{path}:{p['line'] + 1}: {p['field']}: {p['problem']} "
            f"({len(bank.problems)} problem(s) in the file; the bank takes clean rows only)"
        )
    rows = dict(iter_jsonl(path))
    items = []
    for q in bank.items:
        where = f"{path}:{q.line + 1}"
        if q.answer is None or len(q.options) < 2:
            raise InputError(
                f"{where}: the bank takes MCQs; the roles file gives this row "
                f"{len(q.options)} option(s) and {'no' if q.answer is None else 'an'} answer"
            )

        def strip(fields: dict[str, str], prefix: str) -> dict[str, str]:
            return {k.removeprefix(prefix): v for k, v in fields.items() if k != roles.question}

        record = {
            "item_id": q.item_id,
            "question_type": q.question_type,
            "question": q.question,
            "options": q.options,
            "answer": q.answer,
            "group": q.group,
            "visible": strip(q.visible, "visible."),
            "privileged": strip(q.privileged, "privileged."),
            **({"category": q.category} if q.category is not None else {}),
            "source_row": rows[q.line + 1],
        }
        items.append(
            Item(
                kind,
                "mcq_record",
                record,
                kinds.require(kind).item_id(record),
                q.item_id,
                where,
                q.question_type,
            )
        )
    return items


def load_batch(files: list[tuple[Path, str, str]], roles: str | None = None) -> list[Item]:
    """Every input item, validated by its kind (a bad line is an InputError naming file:line),
    with its content id."""
    items: list[Item] = []
    for path, name, fmt in files:
        if fmt == "roles_jsonl":
            assert roles is not None
            items += roles_items(path, name, roles)
            continue
        kind = kinds.require(name)
        wb = wagibench_rows(run_folder(path)) if kind.is_mcq else {}
        for where, record in kind.read(path):
            kind.validate(record, where)
            sid = kind.source_id(record)
            items.append(
                Item(
                    name,
                    fmt,
                    record,
                    kind.item_id(record),
                    sid,
                    where,
                    kind.question_type(record),
                    wb.get(sid),
                )
            )
    return items


def source_info(files: list[tuple[Path, str, str]], input_arg: str) -> dict[str, Any]:
    """Provenance of a batch: its run's manifest (generator, models, prompt and judge/answer
    template hashes) and, one level up, the manifests of the runs it read."""
    folder = run_folder(files[0][0])
    records = {
        f.name if folder is None else f.relative_to(folder).as_posix(): sha256_file(f)
        for f, _, _ in files
    }
    info: dict[str, Any] = {"input": input_arg, "records": records}
    if folder is None:
        info["source"] = hashlib.sha256(canonical(records).encode()).hexdigest()
        info["manifest"] = None
        info["prompts"] = {}
        return info
    manifest_path = folder / "manifest.json"
    m = read_manifest(manifest_path)
    info["source"] = sha256_file(manifest_path)
    info["manifest"] = "manifest.json"
    info.update(_manifest_summary(m))
    upstream = []
    for p in sorted(m.inputs):
        up = run_folder(Path(p))
        if up is not None and up != folder and (up / "manifest.json").is_file():
            try:
                um = read_manifest(up / "manifest.json")
            except GenError:  # a run it read, not the batch: its provenance is left out
                continue
            upstream.append(
                {
                    "path": str(up),
                    "manifest_sha256": sha256_file(up / "manifest.json"),
                    **_manifest_summary(um),
                }
            )
    info["upstream"] = upstream
    return info


def read_manifest(path: Path) -> SourceManifest:
    """A run's manifest, the fields the bank records (an InputError naming the file otherwise)."""
    from gen.engine.runfolder import read_manifest as read

    return read(path.parent, SourceManifest)[0]


def _manifest_summary(m: SourceManifest) -> dict[str, Any]:
    llm, emb = m.llm, m.embedder
    return {
        "generator": m.generator,
        "toolkit_version": m.toolkit_version,
        "git": m.git,
        "seed": m.seed,
        "started_at": m.started_at,
        "llm": {
            k: v
            for k, v in llm.model_dump(exclude_unset=True).items()
            if k in ("backend", "model", "model_sha256")
        }
        or None
        if llm is not None
        else None,
        "embedder": {
            "backend": emb.backend,
            # the embedded model's folder is called "model": name it by its package
            "model": Path(emb.model_path).parent.name
            if emb.model == "model" and emb.model_path
            else emb.model,
        }
        if emb is not None and emb.model_fields_set
        else None,
        "prompts": dict(sorted(m.prompts.items())),
    }
