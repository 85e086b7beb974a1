"""A versioned benchmark bank grown release by release: ``python -m gen bank add|verify|export``.

Layout of a bank directory (``bank=``)::

    bank/
      current -> versions/v0003        the single commit point (a symlink, replaced atomically)
      versions/v0001/ … v0003/         immutable snapshots, one per release
        tom.parquet  distractors.parquet  digital.parquet  mcq.parquet   (the kinds it has)
        MANIFEST.lock.json             version, schema revision, SHA-256 of every file, prompts…
        CHANGELOG.md                   every release so far, newest first
        audit/                         the audit of the batch this release added
      .lock                            held (flock) by a running ``add``

Items: one parquet file per kind (``tom``, ``distractors``, ``digital``; ``mcq`` for external
MCQ banks: EgoToM CSVs, MCQ-record JSONL of other origin). A row holds the item's original
record as canonical JSON (``record``) plus flat columns for analysis (question, options,
answer, context…; for digital: datetime, cue, persona…), ``added_in`` (the version that
added it) and ``source`` (SHA-256 of the input run's ``manifest.json``, detailed in the lock).

**Item ids are content hashes**: the first 32 hex digits of SHA-256 over the canonical JSON
(sorted keys, no spaces, UTF-8) of the item's *identity*, which leaves out every run-specific
field, so the same item has the same id on every machine and from every seed:

* MCQ kinds: ``question_type``, ``question``, the visible fields (as the candidate reads them,
  via :mod:`gen.mcq`), the options **sorted** and the answer **as text** — so a reshuffled copy
  is the same item. Each text is NFC-normalised with whitespace runs collapsed. Not hashed:
  the record's own ``item_id`` (seed-derived), ``group``, ``origins``, ``privileged`` and any
  generator-specific field.
* digital bundles: the whole bundle minus ``bundle_id``, ``stats`` (derived) and every
  ``*_id`` key holding a 32-hex id (persona, event, message… ids are seed-derived).

``add`` (one outcome per input item: a record with status ``added``, or a reject):
the batch is audited first through the registry (``audit`` with ``input=`` and ``fail_on=``);
findings at or above ``fail_on`` refuse the whole batch (reason ``audit_failed``, exit code 1)
unless ``force=true``, which records them in the changelog. Then exact duplicates (same id) of
bank items or of an earlier batch item (reason ``duplicate``, stage ``bank``/``batch``), then
near-duplicates: cosine of ``ctx.embedder`` vectors (FAISS inner product) at or above
``near_dup_sim`` to a bank item or to an earlier kept batch item of the same family (MCQ or
digital) and question type (reason ``near_duplicate``). The embedded text is the question and
the sorted options, then the visible fields (the embedder truncates long inputs); for a bundle,
its cue, main persona and the first item texts of each app. Default ``near_dup_sim=0.95``, the
audit's ``item_dup_sim``: measured with all-MiniLM-L6-v2 on EgoToM's 706 published items, no two
distinct items of one question type reach 0.93 (highest 0.928), while synonym-rewritten copies
reach 0.95 in 60-79% and 0.93 in 83-94% of cases (hand-written paraphrases: 0.96-0.99); 0.95
keeps a margin for larger banks, whose nearest distinct pairs creep up. The rest is written as
a new version; existing rows are copied unchanged (``verify`` checks it), files of untouched
kinds are hard links to the previous version's. Nothing new: no version.

**Atomicity.** The new version is staged in ``versions/.staging-vNNNN-<pid>``, fsynced,
renamed to ``versions/vNNNN``, and only then does ``current`` switch (``os.replace`` of a new
symlink: the one commit point). A crash or SIGKILL before the switch leaves the old version
current, after it the new one; staging folders and uncommitted versions are ignored by readers
and deleted by the next ``add``. ``GEN_BANK_FAULT=<phase>`` (one of :data:`FAULT_PHASES`)
makes ``add`` SIGKILL itself at that phase, for tests.

``verify`` (one outcome per version: a record per file that checks, a reject per problem;
exit code 1 on any problem): every file of every version against its lock, no file missing
or added, every lock against the SHA-256 the next version recorded for it, every item id
recomputed from its record, ids unique, counts and ``added_in`` consistent, and every item of a
version present unchanged in the next one. It prints the SHA-256 of the checked version's lock:
publish it with a release, since a consistent rewrite of the newest version's files *and* its
lock can only be caught against a hash kept elsewhere (older versions are anchored by the
newer locks).

``export format=parquet|wagibench|egotom`` (one outcome per item of the kinds the format
covers): the data files with a dataset card (README.md: counts, provenance, the last audit);
WAGIBench's MCQ layout from ``distractors`` items and its digital-state JSON from ``digital``
items; EgoToM's CSVs from ``tom`` items and EgoToM-typed ``mcq`` items. Exported ids are the
bank's; the original id is kept as ``source_item_id``.

``n`` is derived by the config validator (the runner needs it before the run): the items in
``input=`` (add), the versions (verify), the items of the covered kinds (export).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

import gen
from gen.errors import ConfigError, GenError, InputError, MissingInputError
from gen.llm import sha256_file
from gen.mcq import (
    EGOTOM_CHOICES,
    EGOTOM_QUESTION,
    EGOTOM_TYPES,
    LETTERS,
    egotom_columns,
    egotom_type,
    from_record,
    write_egotom_csv,
)
from gen.run import CommonConfig, Plan, RunContext, generator, git_info, iter_jsonl
from schemas import Reject
from schemas.mcq import MCQ, MCQRecord

NAME = "bank"
SCHEMA_REVISION = 1
"""Revision of the bank's file format (columns, lock keys). Readers refuse a newer one."""
FORMAT = "gen-bank"
KINDS = ("tom", "distractors", "digital", "mcq")
MCQ_KINDS = ("tom", "distractors", "mcq")
LOCK = "MANIFEST.lock.json"
CHANGELOG = "CHANGELOG.md"
CURRENT = "current"
VERSIONS = "versions"
FAULT_ENV = "GEN_BANK_FAULT"
FAULT_PHASES = ("audited", "staging", "staged", "renamed", "linked", "committed")
"""``audited``: after the audit; ``staging``: one data file written into the staging folder;
``staged``: the whole version staged; ``renamed``: staged folder renamed to ``vNNNN``;
``linked``: the new ``current`` symlink made under a temporary name; ``committed``: after the
switch, before the run folder is finished."""
EXPORT_KINDS = {"parquet": KINDS, "wagibench": ("distractors", "digital"), "egotom": ("tom", "mcq")}
_VERSION_DIR = re.compile(r"^v(\d{4,})$")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_WS = re.compile(r"\s+")
LISTED = 20  # refused items / findings listed in a changelog entry
PRINTED = 3  # refused items printed per reason (rejects.jsonl lists them all)
PER_REASON = 5  # refused items listed per reason in a changelog entry


class BankConfig(CommonConfig):
    n: int = Field(0, ge=0)
    """Derived, not set: items in input= (add), versions (verify), items exported (export)."""
    action: Literal["add", "verify", "export"] | None = None
    """add | verify | export; also given as the word after ``bank`` (python -m gen bank add …)."""
    bank: str | None = None
    """The bank directory (created by the first add)."""
    kind: Literal["auto", "tom", "distractors", "digital", "mcq"] = "auto"
    """add: the item kind of input=; auto: from the file name (tom.jsonl, distractors.jsonl,
    digital.jsonl; EgoToM CSVs and other MCQ JSONL are mcq)."""
    roles: str | None = None
    """add: a roles file (YAML/JSON, as for audit): input= is then any JSONL bank, read through
    it and stored as MCQ records (kind mcq) that keep each source row under ``source_row``."""
    near_dup_sim: float | None = Field(0.95, gt=0, le=1)
    """add: cosine at or above which an item is a near-duplicate of a bank item or an earlier
    batch item of the same question type (the audit's item_dup_sim); null: exact only."""
    fail_on: Literal["info", "warning", "error", "never"] = "error"
    """add: refuse the batch when its audit has a finding of at least this severity."""
    force: bool = False
    """add: add despite audit findings at or above fail_on (they go into the changelog)."""
    message: str | None = None
    """add: a line for the changelog entry of the new version."""
    audit_options: dict[str, Any] | None = None
    """add: extra options for the audit run (for example audit_options={checks: [structure, leakage]})."""
    format: Literal["parquet", "wagibench", "egotom"] = "parquet"
    """export: parquet (data files + dataset card), wagibench (MCQ + digital-state JSON), egotom (CSVs)."""
    out: str | None = None
    """export: output folder (null: <run folder>/<format>)."""
    version: int | None = Field(None, ge=1)
    """verify/export: this version instead of the current one."""

    @model_validator(mode="after")
    def _action(self) -> BankConfig:
        if self.action is None:
            raise ValueError("choose an action: python -m gen bank add|verify|export bank=<dir> …")
        if self.bank is None:
            raise ValueError(f"bank= is required: python -m gen bank {self.action} bank=<dir> …")
        if self.num_shards != 1:
            raise ValueError("bank runs in one process (num_shards=1)")
        return self

    def bank_path(self) -> Path:
        assert self.bank is not None
        return Path(self.bank).expanduser()


def plan(cfg: BankConfig) -> Plan:
    """The indices of an action: items in input= (add; data: the batch's files), versions
    (verify; data: the target version), items exported (export; data: the target version)."""
    root = cfg.bank_path()
    if cfg.action == "add":
        path = cfg.input_path()
        assert path is not None
        files = batch_files(path, cfg.kind, cfg.roles)
        n = sum(count_rows(f, fmt) for f, _, fmt in files)
        if n == 0:
            raise InputError(f"input: {path} holds no items")
        return Plan(n, files)
    current = read_pointer(root)
    if current is None:
        raise MissingInputError(f"bank: no released version at {root} "
                                f"(python -m gen bank add bank={cfg.bank} input=<run folder> makes one)")
    target = cfg.version or current
    if target > current:
        raise ConfigError(f"version={target}, but the bank's current version is {label(current)}")
    if cfg.action == "verify":
        return Plan(target, target)
    lock = read_json(version_dir(root, target) / LOCK, "bank")
    counts = lock.get("counts", {})
    return Plan(sum(counts.get(k, {}).get("items", 0) for k in EXPORT_KINDS[cfg.format]), target)


# --------------------------------------------------------------------------- records


class BankItemRecord(BaseModel):
    """One item an ``add`` added or an ``export`` wrote (a line of ``bank.jsonl``)."""

    item_id: str
    kind: str
    question_type: str
    status: Literal["added", "exported"]
    version: str
    source_item_id: str
    where: str
    """``file:line`` of the input (add) or the exported file (export)."""


class VerifyRecord(BaseModel):
    """One file of one version whose SHA-256 and contents check (a line of ``bank.jsonl``)."""

    version: str
    file: str
    sha256: str
    status: Literal["ok"] = "ok"


# --------------------------------------------------------------------------- identity


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, non-ASCII as is (hashed as UTF-8)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def norm(text: str | None) -> str | None:
    """NFC, whitespace runs collapsed to one space, stripped."""
    if text is None:
        return None
    return _WS.sub(" ", unicodedata.normalize("NFC", text)).strip()


def content_id(identity: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(identity).encode("utf-8")).hexdigest()[:32]


def mcq_identity(q: MCQ) -> dict[str, Any]:
    """What an MCQ item's id hashes: what the candidate sees, order-free, plus the answer text."""
    return {
        "question_type": q.question_type,
        "question": norm(q.question),
        "visible": {k: norm(v) for k, v in sorted(q.visible.items())},
        "options": sorted(norm(o) or "" for o in q.options),
        "answer": norm(q.answer_text),
    }


def strip_ids(obj: Any) -> Any:
    """A digital bundle without its seed-derived parts (32-hex ``*_id`` values, ``bundle_id``, ``stats``)."""
    if isinstance(obj, dict):
        return {k: strip_ids(v) for k, v in obj.items()
                if not (k in ("bundle_id", "stats") or (k.endswith("_id") and isinstance(v, str) and _HEX32.match(v)))}
    if isinstance(obj, list):
        return [strip_ids(v) for v in obj]
    return obj


def egotom_row_mcq(row: dict[str, Any]) -> MCQ:
    """One EgoToM CSV row (all strings) as :class:`MCQ`, exactly as :func:`gen.mcq.read_egotom_csv` reads it."""
    q = next((t for t in EGOTOM_TYPES if f"gt_{t}" in row and f"{t}_choice_a" in row), None)
    if q is None:
        raise InputError("not an EgoToM row (no gt_goal/gt_belief/gt_actions column)")
    cols = [c for c in egotom_columns(q) if c.startswith(f"{q}_choice_")]
    options = [(row.get(c) or "").strip() for c in cols]
    truth = (row.get(f"gt_{q}") or "").strip()
    context = row.get("narrations_in_context") or ""
    return MCQ(item_id=f"{q}:{row.get('cuid')}", question_type=q, question=EGOTOM_QUESTION[q],
               options=options, answer=options.index(truth) if truth in options else None, context=context,
               group=row.get("cuid"), origins=["truth" if o == truth else "counterfactual" for o in options],
               visible={"narrations_in_context": context}, privileged={f"gt_{q}": truth}, line=0)


def record_mcq(fmt: str, record: dict[str, Any]) -> MCQ:
    """An MCQ-kind record (``mcq_record`` JSON or an ``egotom_csv`` row) as :class:`MCQ`."""
    if fmt == "egotom_csv":
        return egotom_row_mcq(record)
    return from_record(MCQRecord.model_validate(record), 0)


def identity_of(fmt: str, record: dict[str, Any]) -> dict[str, Any]:
    if fmt == "digital_bundle":
        return strip_ids(record)
    return mcq_identity(record_mcq(fmt, record))


def item_id_of(fmt: str, record: dict[str, Any]) -> str:
    return content_id(identity_of(fmt, record))


def embed_text(fmt: str, record: dict[str, Any]) -> str:
    """The text near-duplicates are found on: question and sorted options before the context
    (the embedder truncates long inputs); for a bundle, its cue, persona and item texts."""
    if fmt == "digital_bundle":
        b = record
        p = b.get("main_persona") or {}
        cue = (b.get("cue") or {}).get("cue") or "no cue"
        parts = [cue, f"{p.get('name', '')}, {p.get('occupation', '')}, {p.get('home_city', '')}"]
        for app in sorted(b.get("apps") or {}):
            texts = _texts(b["apps"][app])[:6]
            parts.append(f"{app}: " + "; ".join(texts))
        return "\n".join(parts)
    q = record_mcq(fmt, record)
    ident = mcq_identity(q)
    return "\n".join([ident["question"] or "", *ident["options"], *(v or "" for v in ident["visible"].values())])


_TEXT_KEYS = ("title", "content", "query", "name", "topic")


def _texts(obj: Any) -> list[str]:
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in _TEXT_KEYS and isinstance(v, str):
                out.append(v)
            elif isinstance(v, dict | list) and not k.startswith("key_"):
                out += _texts(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _texts(v)
    return out


def family(kind: str) -> str:
    return "digital" if kind == "digital" else "mcq"


# --------------------------------------------------------------------------- the batch


@dataclass
class Item:
    kind: str
    fmt: str
    """``mcq_record``, ``egotom_csv`` or ``digital_bundle``: how ``record`` is read."""
    record: dict[str, Any]
    item_id: str
    source_item_id: str
    where: str
    question_type: str
    wagibench: dict[str, Any] | None = None


def kind_of(path: Path) -> tuple[str, str]:
    """(kind, format) of a records file from its name."""
    if path.suffix == ".csv":
        if egotom_type(path) is None:
            raise InputError(f"input: {path} is not an EgoToM CSV (no gt_goal/gt_belief/gt_actions column)")
        return "mcq", "egotom_csv"
    if path.suffix != ".jsonl":
        raise InputError(f"input: {path}: expected a .jsonl of records or an EgoToM .csv")
    stem = path.stem
    if stem == "digital":
        return "digital", "digital_bundle"
    return (stem if stem in MCQ_KINDS else "mcq"), "mcq_record"


def batch_files(path: Path, kind: str = "auto", roles: str | None = None) -> list[tuple[Path, str, str]]:
    """The record files of input= with their kind and format: a run folder (tom, distractors,
    digital, mcq, a nocontext run's kept/), a folder of EgoToM CSVs, one file, or (with a
    roles file) any JSONL bank."""
    from gen.mcq import RECORD_FILES

    if roles is not None:
        if not path.is_file() or path.suffix != ".jsonl":
            raise InputError(f"input: with roles= the bank must be one JSONL file, got {path}")
        if kind == "digital":
            raise ConfigError("kind=digital does not fit roles= (a roles file describes MCQs)")
        return [(path, "mcq" if kind == "auto" else kind, "roles_jsonl")]
    files: list[Path]
    if path.is_file():
        files = [path]
    elif (path / "digital.jsonl").is_file():
        files = [path / "digital.jsonl"]
    elif any((path / n).is_file() for n in RECORD_FILES if n != "nocontext_kept.jsonl"):
        files = [next(path / n for n in RECORD_FILES if (path / n).is_file())]
    elif (path / "nocontext.jsonl").is_file() and (path / "kept").is_dir():
        files = sorted(p for p in (path / "kept").iterdir() if p.suffix in (".jsonl", ".csv"))
    elif (path / "nocontext_kept.jsonl").is_file():
        files = [path / "nocontext_kept.jsonl"]
    else:
        files = sorted(p for p in path.glob("*.csv") if egotom_type(p) is not None)
    if not files:
        raise InputError(f"input: {path} holds no records (tom.jsonl, distractors.jsonl, digital.jsonl, "
                         "mcq.jsonl or EgoToM CSVs)")
    out = []
    for f in files:
        k, fmt = kind_of(f)
        if kind != "auto":
            if (kind == "digital") != (fmt == "digital_bundle"):
                raise ConfigError(f"kind={kind} does not fit {f} ({fmt})")
            k = kind
        out.append((f, k, fmt))
    return out


def count_rows(path: Path, fmt: str) -> int:
    if fmt == "egotom_csv":
        return len(read_csv_rows(path))
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def read_csv_rows(path: Path) -> list[dict[str, Any]]:
    import polars as pl

    try:  # all strings, as gen.mcq reads it: nothing is reinterpreted
        return pl.read_csv(path, infer_schema_length=0).to_dicts()
    except Exception as e:  # noqa: BLE001 - polars raises several types
        raise InputError(f"{path}: cannot parse CSV ({str(e).splitlines()[0]})") from None


def run_folder(path: Path) -> Path | None:
    """The run folder a records file belongs to (the one holding manifest.json), if any."""
    for folder in (path.parent, path.parent.parent):
        if (folder / "manifest.json").is_file():
            return folder
    return None


def wagibench_rows(folder: Path | None) -> dict[str, dict[str, Any]]:
    """The WAGIBench MCQ layout rows a distractors run wrote, by the MCQ's item_id."""
    rows: dict[str, dict[str, Any]] = {}
    if folder is None:
        return rows
    for f in sorted(folder.glob("wagibench_mcq_*.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise InputError(f"{f}: not valid JSON ({e.msg})") from None
        for row in data if isinstance(data, list) else []:
            rid = (row.get("meta") or {}).get("item_id")
            if rid:
                rows[rid] = row
    return rows


def roles_items(path: Path, kind: str, roles_file: str) -> list[Item]:
    """A JSONL bank read through a roles file, each row as an MCQ record (the form the bank
    stores, hashes and exports) keeping the row itself under ``source_row``."""
    from gen.mcq import load_roles_bank, read_roles

    roles = read_roles(Path(roles_file).expanduser())
    bank = load_roles_bank(path, roles)
    if bank.problems:
        p = bank.problems[0]
        raise InputError(f"{path}:{p['line'] + 1}: {p['field']}: {p['problem']} "
                         f"({len(bank.problems)} problem(s) in the file; the bank takes clean rows only)")
    rows = dict(iter_jsonl(path))
    items = []
    for q in bank.items:
        where = f"{path}:{q.line + 1}"
        if q.answer is None or len(q.options) < 2:
            raise InputError(f"{where}: the bank takes MCQs; the roles file gives this row "
                             f"{len(q.options)} option(s) and {'no' if q.answer is None else 'an'} answer")

        def strip(fields: dict[str, str], prefix: str) -> dict[str, str]:
            return {k.removeprefix(prefix): v for k, v in fields.items() if k != roles.question}

        record = {"item_id": q.item_id, "question_type": q.question_type, "question": q.question,
                  "options": q.options, "answer": q.answer, "group": q.group,
                  "visible": strip(q.visible, "visible."), "privileged": strip(q.privileged, "privileged."),
                  **({"category": q.category} if q.category is not None else {}),
                  "source_row": rows[q.line + 1]}
        mcq = from_record(MCQRecord.model_validate(record), 0)
        items.append(Item(kind, "mcq_record", record, content_id(mcq_identity(mcq)), q.item_id, where,
                          q.question_type))
    return items


def load_batch(files: list[tuple[Path, str, str]], roles: str | None = None) -> list[Item]:
    """Every input item, validated (a bad line is an InputError naming file:line), with its id."""
    from schemas.digital import DigitalBundle

    items: list[Item] = []
    for path, kind, fmt in files:
        if fmt == "roles_jsonl":
            assert roles is not None
            items += roles_items(path, kind, roles)
            continue
        if fmt == "egotom_csv":
            for i, row in enumerate(read_csv_rows(path)):
                q = egotom_row_mcq(row)
                items.append(Item(kind, fmt, row, content_id(mcq_identity(q)), str(row.get("cuid") or ""),
                                  f"{path}:row {i + 1}", q.question_type))
            continue
        wb = wagibench_rows(run_folder(path)) if kind == "distractors" else {}
        for lineno, record in iter_jsonl(path):
            where = f"{path}:{lineno}"
            try:
                if fmt == "digital_bundle":
                    DigitalBundle.model_validate(record)
                    sid = record["bundle_id"]
                    cue = record.get("cue")
                    qtype = f"cue:{cue['app']}" if cue else "uncued"
                    items.append(Item(kind, fmt, record, item_id_of(fmt, record), sid, where, qtype))
                else:
                    q = from_record(MCQRecord.model_validate(record), 0)
                    items.append(Item(kind, fmt, record, content_id(mcq_identity(q)), q.item_id, where,
                                      q.question_type, wb.get(q.item_id)))
            except ValidationError as e:
                err = e.errors()[0]
                loc = ".".join(str(x) for x in err["loc"])
                what = "a digital bundle" if fmt == "digital_bundle" else "an MCQ record"
                raise InputError(f"{where}: not {what} ({loc}: {err['msg']})") from None
    return items


def source_info(files: list[tuple[Path, str, str]], input_arg: str) -> dict[str, Any]:
    """Provenance of a batch: its run's manifest (generator, models, prompt and judge/answer
    template hashes) and, one level up, the manifests of the runs it read."""
    folder = run_folder(files[0][0])
    records = {f.name if folder is None else f.relative_to(folder).as_posix(): sha256_file(f) for f, _, _ in files}
    info: dict[str, Any] = {"input": input_arg, "records": records}
    if folder is None:
        info["source"] = hashlib.sha256(canonical(records).encode()).hexdigest()
        info["manifest"] = None
        info["prompts"] = {}
        return info
    manifest_path = folder / "manifest.json"
    try:
        m = json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{manifest_path}: not valid JSON ({e.msg})") from None
    info["source"] = sha256_file(manifest_path)
    info["manifest"] = "manifest.json"
    info.update(_manifest_summary(m))
    upstream = []
    for p in sorted(m.get("inputs") or {}):
        up = run_folder(Path(p))
        if up is not None and up != folder and (up / "manifest.json").is_file():
            try:
                um = json.loads((up / "manifest.json").read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                continue
            upstream.append({"path": str(up), "manifest_sha256": sha256_file(up / "manifest.json"),
                             **_manifest_summary(um)})
    info["upstream"] = upstream
    return info


def _manifest_summary(m: dict[str, Any]) -> dict[str, Any]:
    llm = m.get("llm") or {}
    emb = m.get("embedder") or {}
    return {
        "generator": m.get("generator"), "toolkit_version": m.get("toolkit_version"), "git": m.get("git"),
        "seed": m.get("seed"), "started_at": m.get("started_at"),
        "llm": {k: llm.get(k) for k in ("backend", "model", "model_sha256") if k in llm} or None,
        "embedder": {"backend": emb.get("backend"),
                     # the embedded model's folder is called "model": name it by its package
                     "model": Path(emb["model_path"]).parent.name if emb.get("model") == "model" and emb.get("model_path")
                     else emb.get("model")} if emb else None,
        "prompts": dict(sorted((m.get("prompts") or {}).items())),
    }


# --------------------------------------------------------------------------- bank files


def label(version: int) -> str:
    return f"v{version:04d}"


def version_dir(root: Path, version: int) -> Path:
    return root / VERSIONS / label(version)


def read_pointer(root: Path) -> int | None:
    """The current version (None: no release yet). ``current`` is a symlink; a plain file
    holding the target (a checkout without symlinks) is read too."""
    p = root / CURRENT
    if p.is_symlink():
        target = os.readlink(p)
    elif p.is_file():
        target = p.read_text(encoding="utf-8").strip()
    else:
        return None
    m = re.fullmatch(rf"{VERSIONS}/v(\d{{4,}})/?", target)
    if not m:
        raise InputError(f"bank: {p} points to {target!r}, not {VERSIONS}/vNNNN")
    return int(m.group(1))


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingInputError(f"{what}: {path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{what}: {path} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise InputError(f"{what}: {path} is not a JSON object")
    return data


def read_kind(path: Path) -> Any:
    import polars as pl

    return pl.read_parquet(path)


def columns(kind: str) -> dict[str, Any]:
    import polars as pl

    common = {"item_id": pl.String, "kind": pl.String, "question_type": pl.String, "added_in": pl.Int64,
              "source": pl.String, "source_format": pl.String, "source_item_id": pl.String}
    if kind == "digital":
        flat = {"current_datetime": pl.String, "cue_id": pl.String, "cue_app": pl.String, "cue": pl.String,
                "main_persona": pl.String, "related_personas": pl.List(pl.String), "apps": pl.List(pl.String),
                "chars_total": pl.Int64}
    else:
        flat = {"question": pl.String, "options": pl.List(pl.String), "answer": pl.Int64,
                "answer_text": pl.String, "group": pl.String, "context": pl.String, "wagibench": pl.String}
    return {**common, **flat, "record": pl.String}


def row_of(item: Item, version: int, source: str) -> dict[str, Any]:
    row: dict[str, Any] = {"item_id": item.item_id, "kind": item.kind, "question_type": item.question_type,
                           "added_in": version, "source": source, "source_format": item.fmt,
                           "source_item_id": item.source_item_id}
    if item.fmt == "digital_bundle":
        b = item.record
        cue = b.get("cue") or {}
        stats = b.get("stats") or {}
        row.update(current_datetime=b.get("current_datetime"), cue_id=cue.get("cue_id"), cue_app=cue.get("app"),
                   cue=cue.get("cue"), main_persona=(b.get("main_persona") or {}).get("name"),
                   related_personas=[(r.get("persona") or {}).get("name") for r in b.get("related_personas") or []],
                   apps=sorted(b.get("apps") or {}), chars_total=stats.get("chars_total"))
    else:
        q = record_mcq(item.fmt, item.record)
        row.update(question=q.question, options=q.options, answer=q.answer, answer_text=q.answer_text,
                   group=q.group, context=q.context,
                   wagibench=None if item.wagibench is None else canonical(item.wagibench))
    row["record"] = canonical(item.record)
    return row


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for p in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
        _fsync(p)
    _fsync(folder)


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    _fsync(path)


def fault(phase: str) -> None:
    """SIGKILL this process at ``phase`` when GEN_BANK_FAULT names it (crash tests)."""
    if os.environ.get(FAULT_ENV) == phase:
        os.kill(os.getpid(), signal.SIGKILL)


def version_files(folder: Path) -> dict[str, str]:
    """SHA-256 of every file of a version folder except its lock."""
    return {p.relative_to(folder).as_posix(): sha256_file(p)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).as_posix() != LOCK}


def leftovers(root: Path, current: int | None) -> list[Path]:
    """What a crashed add left: staging folders, versions newer than current, temporary pointers."""
    out = sorted(root.glob(".current.tmp-*"))
    vdir = root / VERSIONS
    if vdir.is_dir():
        for p in sorted(vdir.iterdir()):
            m = _VERSION_DIR.match(p.name)
            if p.name.startswith(".staging-") or (m and int(m.group(1)) > (current or 0)):
                out.append(p)
    return out


def _remove(p: Path) -> None:
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.is_dir():
        shutil.rmtree(p)


# --------------------------------------------------------------------------- near-duplicates


@dataclass
class Match:
    where: Literal["bank", "batch"]
    index: int
    cosine: float


def near_duplicates(new: Any, old: Any, threshold: float) -> list[Match | None]:
    """For each new vector in order: its nearest bank vector when the cosine is at or above
    ``threshold``; else the most similar *earlier kept* new vector at or above it; else None.
    Vectors are L2-normalised, so FAISS inner product is the cosine."""
    import faiss
    import numpy as np

    new = np.ascontiguousarray(new, dtype=np.float32)
    out: list[Match | None] = [None] * len(new)
    if len(new) == 0:
        return out
    d = new.shape[1]
    if old is not None and len(old):
        index = faiss.IndexFlatIP(d)
        index.add(np.ascontiguousarray(old, dtype=np.float32))
        sims, ids = index.search(new, 1)
        for i in range(len(new)):
            if sims[i, 0] >= threshold:
                out[i] = Match("bank", int(ids[i, 0]), float(sims[i, 0]))
    index = faiss.IndexFlatIP(d)
    index.add(new)
    lims, dists, labels = index.range_search(new, threshold - 1e-6)  # range_search keeps sims > radius
    kept: set[int] = set()
    for i in range(len(new)):
        if out[i] is not None:
            continue
        best: Match | None = None
        for s, j in zip(dists[lims[i]:lims[i + 1]], labels[lims[i]:lims[i + 1]], strict=True):
            j = int(j)
            if j < i and j in kept and s >= threshold and (best is None or s > best.cosine):
                best = Match("batch", j, float(s))
        if best is None:
            kept.add(i)
        out[i] = best
    return out


# --------------------------------------------------------------------------- the audit


@dataclass
class AuditOutcome:
    exit_code: int
    report: dict[str, Any]
    folder: Path

    @property
    def summary(self) -> dict[str, Any]:
        s = self.report.get("summary") or {}
        return {"by_severity": s.get("by_severity") or {}, "fail_on": s.get("fail_on"),
                "exit_code": self.exit_code, "findings": s.get("findings", len(self.findings))}

    @property
    def findings(self) -> list[dict[str, Any]]:
        return list(self.report.get("findings") or [])


SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def run_audit(cfg: BankConfig, ctx: RunContext, path: Path, out: Path) -> AuditOutcome:
    """The registered ``audit`` on the batch, with input= and fail_on= (and audit_options)."""
    from gen.run import REGISTRY

    g = REGISTRY.get("audit")
    if g is None:
        raise ConfigError("bank add needs the audit generator, which is not registered")
    options = {"input": str(path), "fail_on": cfg.fail_on, "seed": cfg.seed, "llm": cfg.llm,
               **({"roles": cfg.roles} if cfg.roles is not None else {}),
               "embedder": cfg.embedder, "cache_dir": cfg.cache_dir, "progress": "off", **(cfg.audit_options or {})}
    try:
        acfg = g.config.model_validate(options)
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"audit_options: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    result = ctx.subrun("audit", acfg, out)
    report = read_json(out / "audit.json", "audit") if (out / "audit.json").is_file() else {}
    return AuditOutcome(result.exit_code, report, out)


# --------------------------------------------------------------------------- add


@dataclass
class Verdict:
    item: Item
    reject: Reject | None = None


def _existing(root: Path, current: int | None) -> tuple[dict[str, Any], dict[str, tuple[str, int]]]:
    """The current version's frames per kind and ``item_id -> (kind, added_in)``."""
    frames: dict[str, Any] = {}
    ids: dict[str, tuple[str, int]] = {}
    if current is None:
        return frames, ids
    folder = version_dir(root, current)
    for kind in KINDS:
        p = folder / f"{kind}.parquet"
        if p.is_file():
            df = read_kind(p)
            frames[kind] = df
            for iid, added in zip(df["item_id"].to_list(), df["added_in"].to_list(), strict=True):
                ids[iid] = (kind, added)
    return frames, ids


def dedupe(cfg: BankConfig, ctx: RunContext, batch: list[Item], frames: dict[str, Any],
           ids: dict[str, tuple[str, int]]) -> list[Verdict]:
    """Exact duplicates by id, then near-duplicates by embedding, per (family, question type)."""
    verdicts = [Verdict(it) for it in batch]
    first: dict[str, int] = {}
    for i, v in enumerate(verdicts):
        it = v.item
        if it.item_id in ids:
            kind, added = ids[it.item_id]
            v.reject = Reject(record_id=it.item_id, index=i, stage="bank", reason="duplicate",
                              detail=f"{it.where}: same content as {kind} item {it.item_id} added in {label(added)}")
        elif it.item_id in first:
            j = first[it.item_id]
            v.reject = Reject(record_id=it.item_id, index=i, stage="batch", reason="duplicate",
                              detail=f"{it.where}: same content as {batch[j].where}")
        else:
            first[it.item_id] = i
    if cfg.near_dup_sim is None:
        return verdicts
    scopes: dict[tuple[str, str], list[int]] = {}
    for i, v in enumerate(verdicts):
        if v.reject is None:
            scopes.setdefault((family(v.item.kind), v.item.question_type), []).append(i)
    for (fam, qtype), members in scopes.items():
        old_rows = []  # (kind, item_id, added_in, text)
        for kind, df in frames.items():
            if family(kind) != fam:
                continue
            sub = df.filter(df["question_type"] == qtype).select("item_id", "added_in", "source_format", "record")
            for iid, added, fmt, rec in sub.iter_rows():
                old_rows.append((kind, iid, added, embed_text(fmt, json.loads(rec))))
        new_texts = [embed_text(batch[i].fmt, batch[i].record) for i in members]
        new_vecs = ctx.embedder.encode(new_texts)
        old_vecs = ctx.embedder.encode([r[3] for r in old_rows]) if old_rows else None
        for i, m in zip(members, near_duplicates(new_vecs, old_vecs, cfg.near_dup_sim), strict=True):
            if m is None:
                continue
            it = batch[i]
            if m.where == "bank":
                kind, iid, added, _ = old_rows[m.index]
                detail = f"{it.where}: cosine {m.cosine:.3f} to {kind} item {iid} added in {label(added)}"
            else:
                other = batch[members[m.index]]
                detail = f"{it.where}: cosine {m.cosine:.3f} to {other.item_id} ({other.where}) of this batch"
            verdicts[i].reject = Reject(record_id=it.item_id, index=i, stage=m.where, reason="near_duplicate",
                                        detail=detail)
    return verdicts


def add(cfg: BankConfig, ctx: RunContext) -> Iterator[BankItemRecord | Reject]:
    root = cfg.bank_path()
    path = cfg.input_path()
    assert path is not None
    files = ctx.plan.data
    batch = load_batch(files, cfg.roles)
    if len(batch) != ctx.plan.n:
        raise InputError(f"input: {path} changed while the bank read it ({ctx.plan.n} then {len(batch)} items)")
    for f, _, _ in files:
        ctx.record_input(f)
    source = source_info(files, cfg.input or str(path))
    if cfg.roles is not None:
        roles_path = Path(cfg.roles).expanduser()
        source["roles"] = {"path": str(roles_path), "sha256": sha256_file(roles_path)}
    audit = run_audit(cfg, ctx, path, ctx.out_dir / "audit")
    fault("audited")
    refused = audit.exit_code != 0 and not cfg.force
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # one add at a time; readers need no lock
        current = read_pointer(root)
        if current is not None:
            revision = read_json(version_dir(root, current) / LOCK, "bank").get("schema_revision")
            if revision != SCHEMA_REVISION:
                raise InputError(f"bank: {root} has schema revision {revision}, this toolkit writes "
                                 f"{SCHEMA_REVISION}; use the gen version that made it")
        for p in leftovers(root, current):
            _remove(p)
            ctx.count("leftovers_removed")
        frames, ids = _existing(root, current)
        if refused:
            verdicts = [Verdict(it, Reject(record_id=it.item_id, index=i, stage="audit", reason="audit_failed",
                                           detail=audit_detail(audit, cfg.fail_on)))
                        for i, it in enumerate(batch)]
        else:
            verdicts = dedupe(cfg, ctx, batch, frames, ids)
        new = [v.item for v in verdicts if v.reject is None]
        version = current or 0
        if new:
            version = (current or 0) + 1
            commit(cfg, root, current, version, frames, new, verdicts, source, audit)
            fault("committed")
    ctx.exit_code = 1 if refused else 0
    reasons = Counter(f"{v.reject.reason}" for v in verdicts if v.reject)
    ctx.extra["bank"] = {
        "action": "add", "bank": str(root), "version_before": label(current) if current else None,
        "version": label(version) if version else None, "released": bool(new),
        "added": dict(Counter(it.kind for it in new)), "refused": dict(sorted(reasons.items())),
        "audit": {**audit.summary, "forced": cfg.force and audit.exit_code != 0, "folder": "audit"},
        "source": source["source"],
    }
    print_add(cfg, root, current, version, new, verdicts, audit, refused)
    for v in verdicts:
        it = v.item
        yield v.reject or BankItemRecord(item_id=it.item_id, kind=it.kind, question_type=it.question_type,
                                         status="added", version=label(version),
                                         source_item_id=it.source_item_id, where=it.where)


def audit_detail(audit: AuditOutcome, fail_on: str) -> str:
    worst = [f for f in audit.findings if SEVERITY_RANK.get(f.get("severity"), -1) >= SEVERITY_RANK.get(fail_on, 9)]
    shown = "; ".join(f"{f.get('severity')} {f.get('check')}/{f.get('kind')}" for f in worst[:3])
    more = f" (+{len(worst) - 3})" if len(worst) > 3 else ""
    return (f"the batch's audit has {len(worst)} finding(s) at or above fail_on={fail_on}: {shown}{more}; "
            f"see audit/audit.md; force=true adds it anyway")


def commit(cfg: BankConfig, root: Path, current: int | None, version: int, frames: dict[str, Any],
           new: list[Item], verdicts: list[Verdict], source: dict[str, Any], audit: AuditOutcome) -> None:
    """Stage version ``version`` beside the bank, then make it current in one atomic step."""
    import polars as pl

    vroot = root / VERSIONS
    vroot.mkdir(exist_ok=True)
    stage = vroot / f".staging-{label(version)}-{os.getpid()}"
    stage.mkdir()
    old_dir = version_dir(root, current) if current else None
    by_kind: dict[str, list[Item]] = {}
    for it in new:
        by_kind.setdefault(it.kind, []).append(it)
    for kind in KINDS:
        target = stage / f"{kind}.parquet"
        if kind in by_kind:
            rows = [row_of(it, version, source["source"]) for it in by_kind[kind]]
            df = pl.DataFrame(rows, schema=columns(kind))
            if kind in frames:
                df = pl.concat([frames[kind].select(list(columns(kind))), df])
            df.write_parquet(target)
            _fsync(target)
            fault("staging")
        elif kind in frames:
            assert old_dir is not None
            try:  # unchanged: the previous version's file, not a copy
                os.link(old_dir / f"{kind}.parquet", target)
            except OSError:
                shutil.copy2(old_dir / f"{kind}.parquet", target)
    if audit.folder.is_dir():
        shutil.copytree(audit.folder, stage / "audit")
    old_lock = read_json(old_dir / LOCK, "bank") if old_dir else None
    lock = make_lock(cfg, root, version, stage, old_lock, old_dir, new, verdicts, source, audit)
    _write_text(stage / CHANGELOG, changelog(lock, old_dir, new, verdicts, audit, cfg))
    lock["files"] = version_files(stage)
    _write_text(stage / LOCK, json.dumps(lock, indent=1, ensure_ascii=False) + "\n")
    _fsync_tree(stage)
    previous = {iid: (added, hashlib.sha256(rec.encode()).hexdigest()) for df in frames.values()
                for iid, added, rec in df.select("item_id", "added_in", "record").iter_rows()}
    problems, _ = check_version(version, stage, lock, previous if current else None)  # before it can become current
    if problems:
        raise GenError(f"bank: the staged {label(version)} does not verify: {problems[0].detail}")
    fault("staged")
    final = version_dir(root, version)
    os.rename(stage, final)
    _fsync(vroot)
    fault("renamed")
    tmp = root / f".current.tmp-{os.getpid()}"
    os.symlink(f"{VERSIONS}/{label(version)}", tmp)
    fault("linked")
    os.replace(tmp, root / CURRENT)  # the commit point
    _fsync(root)


def make_lock(cfg: BankConfig, root: Path, version: int, stage: Path, old_lock: dict[str, Any] | None,
              old_dir: Path | None, new: list[Item], verdicts: list[Verdict], source: dict[str, Any],
              audit: AuditOutcome) -> dict[str, Any]:
    import polars as pl

    counts: dict[str, Any] = {}
    for kind in KINDS:
        p = stage / f"{kind}.parquet"
        if p.is_file():
            df = pl.read_parquet(p, columns=["question_type", "added_in"])
            counts[kind] = {"items": df.height,
                            "by_question_type": dict(sorted(Counter(df["question_type"].to_list()).items()))}
    sources = list((old_lock or {}).get("sources") or [])
    sources.append({**source, "version": version, "items_added": len(new)})
    prompts: dict[str, list[str]] = {}
    for s in sources:
        for entry in [s, *(s.get("upstream") or [])]:
            for name, sha in (entry.get("prompts") or {}).items():
                prompts.setdefault(name, [])
                if sha not in prompts[name]:
                    prompts[name].append(sha)
    history = [dict(h) for h in (old_lock or {}).get("history") or []]
    if history and old_dir is not None:
        history[-1]["lock_sha256"] = sha256_file(old_dir / LOCK)
    refused = Counter(f"{v.reject.stage}:{v.reject.reason}" for v in verdicts if v.reject)
    history.append({
        "version": version, "label": label(version),
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "message": cfg.message, "source": source["source"], "input": source["input"],
        "added": {k: sum(1 for it in new if it.kind == k) for k in KINDS if any(it.kind == k for it in new)},
        "refused": dict(sorted(refused.items())),
        "audit": {**audit.summary, "forced": cfg.force and audit.exit_code != 0},
        "lock_sha256": None,
    })
    return {
        "format": FORMAT, "schema_revision": SCHEMA_REVISION, "bank": root.name,
        "version": version, "label": label(version),
        "created_at": history[-1]["created_at"],
        "toolkit": {"version": gen.__version__, "git": git_info()},
        "item_id": ("first 32 hex of SHA-256 of the canonical JSON of the item's identity (see "
                    "generators/bank.py): MCQ: question_type, question, visible fields, sorted options, "
                    "answer text; digital: the bundle without seed-derived ids and stats"),
        "items": sum(c["items"] for c in counts.values()),
        "counts": counts,
        "files": {},
        "prompts": {k: sorted(v) for k, v in sorted(prompts.items())},
        "sources": sources,
        "history": history,
    }


def changelog(lock: dict[str, Any], old_dir: Path | None, new: list[Item], verdicts: list[Verdict],
              audit: AuditOutcome, cfg: BankConfig) -> str:
    h = lock["history"][-1]
    added = Counter((it.kind, it.question_type) for it in new)
    lines = [f"## {h['label']} — {h['created_at']}", ""]
    if cfg.message:
        lines += [cfg.message, ""]
    lines.append(f"- added {len(new)}: " + ", ".join(f"{k}/{q} {n}" for (k, q), n in sorted(added.items())))
    src = lock["sources"][-1]
    what = (f"{src.get('generator')} run, manifest sha256 {h['source'][:16]}…" if src.get("manifest")
            else f"no run manifest; record files sha256 {h['source'][:16]}…")
    lines.append(f"- source: `{h['input']}` ({what})")
    rej = [v.reject for v in verdicts if v.reject]
    if rej:
        lines.append(f"- refused {len(rej)}: " + ", ".join(f"{k} {n}" for k, n in sorted(h["refused"].items())))
        groups: dict[tuple[str, str], list[Reject]] = {}
        for r in rej:
            groups.setdefault((r.stage, r.reason), []).append(r)
        for rs in groups.values():
            lines += [f"  - `{r.record_id}` {r.stage} {r.reason}: {r.detail}" for r in rs[:PER_REASON]]
            if len(rs) > PER_REASON:
                lines.append(f"  - … {len(rs) - PER_REASON} more {rs[0].stage} {rs[0].reason} in the add run's rejects.jsonl")
    sev = audit.summary["by_severity"]
    verdict = "passed" if audit.exit_code == 0 else f"FORCED (force=true) past findings at or above fail_on={cfg.fail_on}"
    lines.append(f"- audit: {sev.get('error', 0)} errors, {sev.get('warning', 0)} warnings, "
                 f"{sev.get('info', 0)} info — {verdict} (audit/audit.md)")
    if audit.exit_code != 0 and cfg.force:
        for f in sorted(audit.findings, key=lambda f: -SEVERITY_RANK.get(f.get("severity"), -1))[:LISTED]:
            items = ", ".join((f.get("items") or [])[:5])
            lines.append(f"  - {f.get('severity')} {f.get('check')}/{f.get('kind')}: {f.get('what')}"
                         + (f" (items: {items})" if items else ""))
        if len(audit.findings) > LISTED:
            lines.append(f"  - … {len(audit.findings) - LISTED} more in audit/audit.json")
    previous = ""
    if old_dir is not None and (old_dir / CHANGELOG).is_file():
        previous = (old_dir / CHANGELOG).read_text(encoding="utf-8").split("\n", 2)[2]  # drop its title
    return f"# Changelog of {lock['bank']}\n\n" + "\n".join(lines) + "\n\n" + previous


def print_add(cfg: BankConfig, root: Path, current: int | None, version: int, new: list[Item],
              verdicts: list[Verdict], audit: AuditOutcome, refused: bool) -> None:
    if cfg.progress == "off":
        return
    sev = audit.summary["by_severity"]
    print(f"[bank] audit: {sev.get('error', 0)} errors, {sev.get('warning', 0)} warnings, {sev.get('info', 0)} info"
          f" (fail_on={cfg.fail_on}{', forced' if cfg.force and audit.exit_code else ''})")
    rej = [v.reject for v in verdicts if v.reject]
    worst = [f for f in audit.findings if SEVERITY_RANK.get(f.get("severity"), -1) >= SEVERITY_RANK.get(cfg.fail_on, 9)]
    for f in worst[:LISTED] if audit.exit_code else []:
        print(f"[bank] audit {f.get('severity')} {f.get('check')}/{f.get('kind')}: {f.get('what')}")
    if refused:
        print(f"[bank] batch refused by its audit ({len(rej)} items, {audit.folder}/audit.md); {root} stays at "
              f"{label(current) if current else 'no version'}; force=true adds it anyway")
        return
    groups: dict[tuple[str, str], list[Reject]] = {}
    for r in rej:
        groups.setdefault((r.stage, r.reason), []).append(r)
    for (stage, reason), rs in sorted(groups.items()):
        print(f"[bank] refused {len(rs)} ({stage} {reason}), for example:")
        for r in rs[:PRINTED]:
            print(f"[bank]   {r.record_id}: {r.detail}")
    if new:
        print(f"[bank] {root}: {label(current) if current else 'empty'} -> {label(version)}, added {len(new)}, "
              f"refused {len(rej)}" + (" (the run folder's rejects.jsonl lists them)" if rej else ""))
    else:
        print(f"[bank] nothing new; {root} stays at {label(current) if current else 'no version'}")


# --------------------------------------------------------------------------- verify


@dataclass
class Problem:
    version: int
    path: str
    reason: str
    detail: str


@dataclass
class VersionCheck:
    version: int
    ok_files: list[tuple[str, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


Rows = dict[str, tuple[int, str]]
"""item_id -> (added_in, SHA-256 of the record) of one version."""


def check_version(version: int, folder: Path, lock: dict[str, Any], previous: Rows | None,
                  ok: list[tuple[str, str]] | None = None,
                  checked: dict[str, Rows] | None = None) -> tuple[list[Problem], Rows]:
    """Problems of one version folder against its lock (files, hashes, counts, ids, append-only),
    and its rows. ``previous``: the rows of the version before, when known; ``checked``: rows of
    data files already checked, by SHA-256 (hard-linked files are read once)."""
    rel = f"{VERSIONS}/{label(version)}"
    problems: list[Problem] = []

    def problem(path: str, reason: str, detail: str) -> None:
        problems.append(Problem(version, f"{rel}/{path}" if path else rel, reason, detail))

    if lock.get("format") != FORMAT or not isinstance(lock.get("schema_revision"), int):
        problem(LOCK, "bad_lock", f"{rel}/{LOCK} is not a {FORMAT} lock")
        return problems, {}
    if lock["schema_revision"] > SCHEMA_REVISION:
        problem(LOCK, "newer_schema", f"{rel}/{LOCK}: schema revision {lock['schema_revision']} is newer than "
                                      f"this toolkit's {SCHEMA_REVISION}; upgrade gen")
        return problems, {}
    if lock.get("version") != version:
        problem(LOCK, "version_mismatch", f"{rel}/{LOCK} says version {lock.get('version')}, its folder {label(version)}")
    expected: dict[str, str] = lock.get("files") or {}
    found = version_files(folder)
    for name in sorted(expected.keys() | found.keys()):
        if name not in found:
            problem(name, "missing_file", f"{rel}/{name} is listed in the lock but missing")
        elif name not in expected:
            problem(name, "unexpected_file", f"{rel}/{name} is not in the lock (added without a version bump)")
        elif expected[name] != found[name]:
            problem(name, "hash_mismatch", f"{rel}/{name}: SHA-256 {found[name][:16]}… but the lock has "
                                           f"{expected[name][:16]}… (changed without a version bump)")
        elif ok is not None:
            ok.append((name, found[name]))
    current_rows: Rows = {}
    counts = lock.get("counts") or {}
    for kind in KINDS:
        name = f"{kind}.parquet"
        if name not in found:
            if kind in counts:
                problem(name, "missing_file", f"{rel}/{name}: the lock counts {counts[kind].get('items')} {kind} "
                                              "items but the file is missing")
            continue
        sha = found[name]
        if checked is not None and sha in checked:
            rows = checked[sha]
        else:
            rows = {}
            try:
                df = read_kind(folder / name)
                data = df.select("item_id", "added_in", "source_format", "record").iter_rows()
                for iid, added, fmt, rec in data:
                    if iid in rows:
                        problem(name, "duplicate_id", f"{rel}/{name}: item {iid} appears twice")
                    try:
                        recomputed = item_id_of(fmt, json.loads(rec))
                    except (ValueError, GenError, KeyError, TypeError) as e:
                        recomputed = f"unreadable record ({e})"
                    if recomputed != iid:
                        problem(name, "item_id_mismatch", f"{rel}/{name}: item {iid}: its record hashes to {recomputed}")
                    rows[iid] = (added, hashlib.sha256(rec.encode()).hexdigest())
            except Exception as e:  # noqa: BLE001 - a damaged parquet file raises several types
                problem(name, "unreadable", f"{rel}/{name}: cannot read ({str(e).splitlines()[0][:120]})")
                continue
            if checked is not None and not any(p.path.endswith(name) for p in problems):
                checked[sha] = rows
        if counts.get(kind, {}).get("items") != len(rows):
            problem(name, "count_mismatch", f"{rel}/{name}: {len(rows)} items, the lock counts "
                                            f"{counts.get(kind, {}).get('items')}")
        late = [i for i, (a, _) in rows.items() if not isinstance(a, int) or a > version]
        if late:
            problem(name, "bad_added_in", f"{rel}/{name}: {len(late)} items say added_in > {version}, e.g. {late[0]}")
        current_rows.update(rows)
    for kind in counts:
        if kind not in KINDS:
            problem(LOCK, "unknown_kind", f"{rel}/{LOCK} counts an unknown kind {kind!r}")
    history = lock.get("history") or []
    mine = history[-1] if history else {}
    if mine.get("version") != version:
        problem(LOCK, "bad_history", f"{rel}/{LOCK}: its history does not end with {label(version)}")
    else:
        added = Counter(a for a, _ in current_rows.values())
        if added.get(version, 0) != sum((mine.get("added") or {}).values()):
            problem(LOCK, "count_mismatch", f"{rel}/{LOCK}: history says {sum((mine.get('added') or {}).values())} "
                                            f"items added in {label(version)}, the data has {added.get(version, 0)}")
    if previous is not None:
        gone = [i for i in previous if i not in current_rows]
        changed = [i for i, v in previous.items() if i in current_rows and current_rows[i] != v]
        if gone:
            problem("", "removed_item", f"{rel}: {len(gone)} items of {label(version - 1)} are missing, e.g. {gone[0]}")
        if changed:
            problem("", "rewritten_item", f"{rel}: {len(changed)} items of {label(version - 1)} were rewritten, "
                                          f"e.g. {changed[0]}")
    if previous is not None or version == 1:
        new_here = [i for i in current_rows if previous is None or i not in previous]
        wrong = [i for i in new_here if current_rows[i][0] != version]
        if wrong:
            problem("", "bad_added_in", f"{rel}: {len(wrong)} items new in {label(version)} say another added_in, "
                                        f"e.g. {wrong[0]}")
    return problems, current_rows


def verify_bank(root: Path, target: int | None = None) -> tuple[int, list[VersionCheck], list[str]]:
    """Check versions 1..target (default: current); returns (target, per-version checks, leftovers)."""
    current = read_pointer(root)
    if current is None:
        raise MissingInputError(f"bank: no released version at {root}")
    target = target or current
    checks = [VersionCheck(v) for v in range(1, target + 1)]
    top = checks[-1]
    if not version_dir(root, current).is_dir():
        top.problems.append(Problem(target, CURRENT, "bad_pointer",
                                    f"{CURRENT} points to {VERSIONS}/{label(current)}, which does not exist"))
    locks: dict[int, dict[str, Any] | None] = {}
    for c in checks:
        folder = version_dir(root, c.version)
        try:
            locks[c.version] = read_json(folder / LOCK, "bank")
        except GenError as e:
            locks[c.version] = None
            reason = "missing_version" if not folder.is_dir() else "missing_file" if not (folder / LOCK).exists() else "bad_lock"
            c.problems.append(Problem(c.version, f"{VERSIONS}/{label(c.version)}/{LOCK}", reason, str(e)))
    top_lock = locks[target]
    history = (top_lock or {}).get("history") or []
    if top_lock is not None and [h.get("version") for h in history] != list(range(1, target + 1)):
        top.problems.append(Problem(target, f"{VERSIONS}/{label(target)}/{LOCK}", "bad_history",
                                    f"the history of {label(target)} lists versions {[h.get('version') for h in history]}"))
    for h in history[:-1]:
        v = h.get("version")
        if isinstance(v, int) and 1 <= v < target and locks.get(v) is not None:
            sha = sha256_file(version_dir(root, v) / LOCK)
            # each lock is recorded by the next one; the newest is checked against every later history
            later = [locks[w] for w in range(v + 1, target + 1) if locks.get(w)]
            recorded = {(x.get("history") or [{}] * v)[v - 1].get("lock_sha256") for x in later
                        if len(x.get("history") or []) >= v}
            for r in sorted(recorded, key=str):
                if r != sha:
                    checks[v - 1].problems.append(Problem(
                        v, f"{VERSIONS}/{label(v)}/{LOCK}", "hash_mismatch",
                        f"{VERSIONS}/{label(v)}/{LOCK}: SHA-256 {sha[:16]}… but a later release recorded "
                        f"{str(r)[:16]}… (changed without a version bump)"))
                    break
    previous: Rows | None = None
    checked: dict[str, Rows] = {}
    for c in checks:
        lock = locks[c.version]
        if lock is None:
            previous = None
            continue
        found, previous = check_version(c.version, version_dir(root, c.version), lock, previous,
                                        c.ok_files, checked)
        c.problems += found
    vroot = root / VERSIONS
    left = [p.relative_to(root).as_posix() for p in leftovers(root, current)]
    for p in sorted(vroot.iterdir()) if vroot.is_dir() else []:
        if not (_VERSION_DIR.match(p.name) or p.name.startswith(".staging-")):
            top.problems.append(Problem(target, f"{VERSIONS}/{p.name}", "unexpected_file",
                                        f"{VERSIONS}/{p.name} is not a version folder"))
    return target, checks, left


def verify(cfg: BankConfig, ctx: RunContext) -> Iterator[list[VerifyRecord | Reject]]:
    root = cfg.bank_path()
    target, checks, left = verify_bank(root, ctx.plan.data)
    bad = sum(len(c.problems) for c in checks)
    ctx.exit_code = 1 if bad else 0
    lock_sha = sha256_file(version_dir(root, target) / LOCK) if (version_dir(root, target) / LOCK).is_file() else None
    ctx.extra["bank"] = {"action": "verify", "bank": str(root), "version": label(target), "problems": bad,
                         "files_ok": sum(len(c.ok_files) for c in checks), "leftovers": left,
                         "lock_sha256": lock_sha}
    if cfg.progress != "off":
        for c in checks:
            for p in c.problems:
                print(f"[bank] DRIFT {p.path}: {p.reason}: {p.detail}")
        for p in left:
            print(f"[bank] ignored (an unfinished add left it; the next add removes it): {p}")
        state = f"{bad} problem(s)" if bad else "ok"
        print(f"[bank] verify {root} {label(target)}: {state}; {len(checks)} versions, "
              f"{sum(len(c.ok_files) for c in checks)} files checked; lock sha256 {lock_sha}")
    for i, c in zip(ctx.indices(), checks, strict=True):
        out: list[VerifyRecord | Reject] = [VerifyRecord(version=label(c.version), file=f, sha256=s)
                                            for f, s in c.ok_files]
        out += [Reject(record_id=p.path, index=i, stage="verify", reason=p.reason, detail=p.detail)
                for p in c.problems]
        yield out


# --------------------------------------------------------------------------- export


def export(cfg: BankConfig, ctx: RunContext) -> Iterator[BankItemRecord | Reject]:
    root = cfg.bank_path()
    folder = version_dir(root, ctx.plan.data)
    lock = read_json(folder / LOCK, "bank")
    problems, _ = check_version(ctx.plan.data, folder, lock, None)
    if problems:
        raise InputError(f"bank: {problems[0].detail}; run python -m gen bank verify bank={cfg.bank}")
    out = Path(cfg.out).expanduser() if cfg.out else ctx.out_dir / cfg.format
    out.mkdir(parents=True, exist_ok=True)
    frames = {k: read_kind(folder / f"{k}.parquet") for k in EXPORT_KINDS[cfg.format]
              if (folder / f"{k}.parquet").is_file()}
    writer = {"parquet": export_parquet, "wagibench": export_wagibench, "egotom": export_egotom}[cfg.format]
    outcomes = writer(folder, lock, frames, out)
    written = {p.name: sha256_file(p) for p in sorted(out.iterdir()) if p.is_file()}
    ctx.extra["bank"] = {"action": "export", "bank": str(root), "version": label(ctx.plan.data), "format": cfg.format,
                         "out": str(out), "files": written}
    if cfg.progress != "off":
        print(f"[bank] exported {label(ctx.plan.data)} of {root} as {cfg.format} to {out}: {', '.join(written)}")
    for i, (row, where) in zip(ctx.indices(), outcomes, strict=True):
        if isinstance(where, Reject):
            yield where.model_copy(update={"index": i})
        else:
            yield BankItemRecord(item_id=row["item_id"], kind=row["kind"], question_type=row["question_type"],
                                 status="exported", version=label(ctx.plan.data),
                                 source_item_id=row["source_item_id"], where=where)


Outcome = tuple[dict[str, Any], "str | Reject"]


def _atomic_copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def export_parquet(folder: Path, lock: dict[str, Any], frames: dict[str, Any], out: Path) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for kind, df in frames.items():
        _atomic_copy(folder / f"{kind}.parquet", out / f"{kind}.parquet")
        outcomes += [(r, f"{kind}.parquet") for r in df.select("item_id", "kind", "question_type",
                                                               "source_item_id").iter_rows(named=True)]
    _atomic_copy(folder / LOCK, out / LOCK)
    audit = read_json(folder / "audit" / "audit.json", "audit") if (folder / "audit" / "audit.json").is_file() else None
    _atomic_text(out / "README.md", dataset_card(lock, frames, audit, sha256_file(folder / LOCK)))
    return outcomes


def export_wagibench(folder: Path, lock: dict[str, Any], frames: dict[str, Any], out: Path) -> list[Outcome]:
    from generators.digital import wagibench_record

    outcomes: list[Outcome] = []
    if "distractors" in frames:
        by_type: dict[str, list[dict[str, Any]]] = {}
        for r in frames["distractors"].iter_rows(named=True):
            name = f"wagibench_mcq_{r['question_type']}.json"
            by_type.setdefault(name, []).append(wagibench_mcq(r))
            outcomes.append((r, name))
        for name, rows in by_type.items():
            _atomic_text(out / name, json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
    if "digital" in frames:
        state = {}
        for r in frames["digital"].iter_rows(named=True):
            rec = wagibench_record({**json.loads(r["record"]), "bundle_id": r["item_id"]})
            rec["meta"]["source_item_id"] = r["source_item_id"]
            state[r["item_id"]] = rec
            outcomes.append((r, "digital_state.json"))
        _atomic_text(out / "digital_state.json", json.dumps(state, ensure_ascii=False, indent=1) + "\n")
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
            tmp = out / f"egotom_{q}_shuffled.csv.tmp"
            write_egotom_csv(rs, q, tmp)
            os.replace(tmp, out / f"egotom_{q}_shuffled.csv")
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


# --------------------------------------------------------------------------- the generator


@generator(NAME, config=BankConfig, plan=plan)
def bank(cfg: BankConfig, ctx: RunContext) -> Iterator[Any]:
    """A versioned bank: add a batch (audited, deduplicated, atomic), verify hashes, export."""
    if cfg.action == "add":
        yield from add(cfg, ctx)
    elif cfg.action == "verify":
        yield from verify(cfg, ctx)
    else:
        yield from export(cfg, ctx)
