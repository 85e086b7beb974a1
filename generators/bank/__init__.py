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

One module per concern: :mod:`~generators.bank.identity` (what makes two items the same:
content ids), :mod:`~generators.bank.store` (versions, the pointer and its check, crash
leftovers, the lock, the atomic commit), :mod:`~generators.bank.batch` (reading an input batch:
its files, items and provenance), :mod:`~generators.bank.add`, :mod:`~generators.bank.verify` and
:mod:`~generators.bank.export` (the three actions; ``add`` writes a version through
:mod:`~generators.bank.commit`, and every action checks the values a release publishes through
:mod:`~generators.bank.values`; the export formats that publish a release live in
:mod:`~generators.bank.release` (dataset card, Hugging Face folder; Croissant in
:mod:`~generators.bank.croissant`, what both say in :mod:`~generators.bank.facts`) and
:mod:`~generators.bank.harness` (lm-eval and inspect_ai tasks)); records in :mod:`schemas.bank`.

A damaged bank is never built on: ``add`` and ``export`` verify the bank first and refuse one
that drifted with the message ``verify`` prints (exit code 1), before writing anything. A
damaged or moved-back ``current`` pointer is refused by every action (exit code 2, saying how to
repair it); released versions are never removed, and a failed ``add`` leaves the bank as it was.

``n`` is derived by the plan hook: the items in ``input=`` (add), the versions (verify), the
items of the covered kinds (export).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from gen import kinds
from gen.banks.batch import batch_files, count_rows, source_info
from gen.banks.store import (
    LOCK,
    SCHEMA_REVISION,
    bank_name,
    check_pointer,
    check_root,
    label,
    read_json,
    version_dir,
)
from gen.banks.values import name_problem
from gen.banks.verify import drift_line, require_clean, verify_bank
from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.errors import ConfigError, InputError, MissingInputError
from gen.generators.bank import add, export
from gen.generators.bank.add import AddPlan, read_reviews
from gen.generators.bank.export import check_out, export_kinds
from gen.llm import sha256_file
from gen.schemas import Reject
from gen.schemas.bank import BankItemRecord, VerifyRecord

NAME = "bank"
LICENSE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9.+-]*|https?://\S+)$")


class BankConfig(CommonConfig):
    n: int = Field(0, ge=0)
    """Derived, not set: items in input= (add), versions (verify), items exported (export)."""
    action: Literal["add", "verify", "export"] | None = None
    """add | verify | export; also given as the word after ``bank`` (python -m gen bank add …)."""
    bank: str | None = None
    """The bank directory (created by the first add)."""
    kind: str = "auto"
    """add: the item kind of input= (a bank kind: tom, distractors, digital, mcq, scenarios or a
    plugin's); auto: the kind its run folder's manifest names, else the kind whose declared
    files hold it (tom.jsonl, digital.jsonl…; scenarios for records in the context benchmark's
    released schema, known by their fields); EgoToM CSVs and other MCQ JSONL are mcq."""
    roles: str | None = None
    """add: a roles file (YAML/JSON, as for audit): input= is then any JSONL bank, read through
    it and stored as MCQ records (kind mcq) that keep each source row under ``source_row``."""
    near_dup_sim: float | None = Field(0.95, gt=0, le=1)
    """add: cosine at or above which an item is a near-duplicate of a bank item or an earlier
    batch item of the same question type (the audit's item_dup_sim); null: exact only."""
    fail_on: Literal["info", "warning", "error", "never"] = "error"
    """add: refuse the batch when its audit has a finding of at least this severity."""
    require_review: int | None = Field(None, ge=1)
    """add: admit only items accepted by at least this many reviewers (their last label in the
    input run folder's reviews/, written by python -m gen review); the lock records who. null: no
    review needed."""
    force: bool = False
    """add: add despite audit findings at or above fail_on (they go into the changelog)."""
    message: str | None = None
    """add: a line for the changelog entry of the new version."""
    audit_options: dict[str, Any] | None = None
    """add: extra options for the audit run (for example audit_options={checks: [structure,
    leakage]})."""
    format: Literal[
        "parquet", "croissant", "hf", "lm_eval", "inspect", "wagibench", "egotom", "scenarios"
    ] = "parquet"
    """export: parquet (data files, dataset card, croissant.json), croissant (data files +
    croissant.json), hf (a Hugging Face datasets folder), lm_eval / inspect (harness tasks of the
    MCQ kinds), wagibench (MCQ + digital-state JSON), egotom (CSVs), scenarios (the context
    benchmark's scenarios.jsonl)."""
    license: str | None = None
    """export: the data's license, an SPDX id (CC-BY-4.0) or a URL, for the card and
    croissant.json."""
    citation: str | None = None
    """export: how to cite the bank (BibTeX or a sentence), for the card and croissant.json."""
    out: str | None = None
    """export: a new (or empty) output folder outside the bank (null: <run folder>/<format>)."""
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
        if self.kind != "auto" and self.kind not in kinds.bank_names():
            raise ValueError(
                f"kind={self.kind!r}: choose auto or a bank kind: {', '.join(kinds.bank_names())}"
            )
        if self.license is not None and not LICENSE.match(self.license):
            raise ValueError(
                f"license={self.license!r}: an SPDX id (CC-BY-4.0, MIT) or an http(s) URL"
            )
        return self

    def bank_path(self) -> Path:
        assert self.bank is not None
        return Path(self.bank).expanduser()


def plan(cfg: BankConfig) -> Plan:
    """The indices of an action: items in input= (add; data: :class:`AddPlan`), versions
    (verify; data: the target version), items exported (export; data: the target version).
    ``add`` and ``export`` verify the bank here, before anything is written."""
    root = cfg.bank_path()
    check_root(root, writing=cfg.action == "add")
    if cfg.action == "add":
        if (why := name_problem(bank_name(root))) is not None:
            raise ConfigError(f"bank: {root}: {why}; rename the folder")
        path = cfg.input_path()
        assert path is not None
        files = batch_files(path, cfg.kind, cfg.roles)
        n = sum(count_rows(f, k) for f, k, _ in files)
        if n == 0:
            raise InputError(f"input: {path} holds no items")
        source = source_info(
            files, cfg.input or str(path)
        )  # a bad manifest.json: one line, no run folder
        current = check_pointer(root)
        if current is not None:
            revision = read_json(version_dir(root, current) / LOCK, "bank").get("schema_revision")
            if revision != SCHEMA_REVISION:
                raise InputError(
                    f"bank: {root} has schema revision {revision}, this toolkit writes "
                    f"{SCHEMA_REVISION}; use the gen version that made it"
                )
            require_clean(root, current)
        reviews = read_reviews(path) if cfg.require_review is not None else None
        return Plan(n, AddPlan(files, current, reviews, source))
    current = check_pointer(root)
    if current is None:
        raise MissingInputError(
            f"bank: no released version at {root} "
            f"(python -m gen bank add bank={cfg.bank} input=<run folder> makes one)"
        )
    target = cfg.version or current
    if target > current:
        raise ConfigError(f"version={target}, but the bank's current version is {label(current)}")
    if cfg.action == "verify":
        return Plan(target, target)
    if cfg.out is not None:
        check_out(root, Path(cfg.out).expanduser())
    require_clean(root, target)
    lock = read_json(version_dir(root, target) / LOCK, "bank")
    counts = lock.get("counts", {})
    return Plan(sum(counts.get(k, {}).get("items", 0) for k in export_kinds(cfg.format)), target)


def uses(cfg: BankConfig) -> tuple[str, ...]:
    """add's near-duplicate search embeds the batch and searches the bank (its audit, a run of
    its own, says what it uses)."""
    return ("embedder", "search") if cfg.action == "add" and cfg.near_dup_sim is not None else ()


@generator(
    NAME,
    config=BankConfig,
    records=(BankItemRecord, VerifyRecord),
    kind="bank",
    plan=plan,
    uses=uses,
)
def bank(cfg: BankConfig, ctx: RunContext) -> Iterator[Any]:
    """A versioned bank: add a batch (audited, deduplicated, atomic), verify hashes, export."""
    if cfg.action == "add":
        yield from add.add(cfg, ctx)
    elif cfg.action == "verify":
        yield from verify(cfg, ctx)
    else:
        yield from export.export(cfg, ctx)


def verify(cfg: BankConfig, ctx: RunContext) -> Iterator[list[VerifyRecord | Reject]]:
    root = cfg.bank_path()
    target, checks, left = verify_bank(root, ctx.plan.data)
    bad = sum(len(c.problems) for c in checks)
    ctx.exit_code = 1 if bad else 0
    lock_path = version_dir(root, target) / LOCK
    lock_sha = (
        sha256_file(lock_path) if lock_path.is_file() and not lock_path.is_symlink() else None
    )
    ctx.extra["bank"] = {
        "action": "verify",
        "bank": str(root),
        "version": label(target),
        "problems": bad,
        "files_ok": sum(len(c.ok_files) for c in checks),
        "leftovers": left,
        "lock_sha256": lock_sha,
    }
    ctx.say(
        *(f"[bank] {drift_line(p)}" for c in checks for p in c.problems),
        *(
            f"[bank] ignored (an unfinished add left it; the next add removes it): {rel}"
            for rel in left
        ),
        "[bank] "
        f"verify {root} {label(target)}: {f'{bad} problem(s)' if bad else 'ok'}; {len(checks)} "
        f"versions, {sum(len(c.ok_files) for c in checks)} files checked; lock sha256 {lock_sha}",
    )
    for i, c in zip(ctx.indices(), checks, strict=True):
        out: list[VerifyRecord | Reject] = [
            VerifyRecord(version=label(c.version), file=f, sha256=s) for f, s in c.ok_files
        ]
        out += [
            Reject(record_id=p.path, index=i, stage="verify", reason=p.reason, detail=p.detail)
            for p in c.problems
        ]
        yield out
