"""``bank verify``: every version against its lock, and the gate every writer passes first.

One outcome per version: a record per file that checks, a reject per problem; exit code 1 on
any problem. Every file of every version against its lock, no file missing or added, no
symlink and nothing resolving outside the bank, every lock against the SHA-256 the next
version recorded for it, every item id recomputed from its record, ids unique, counts and
``added_in`` consistent, every item of a version present unchanged in the next one, and every
value a release publishes from the lock recomputed or anchored (:mod:`~generators.bank.values`:
counts, label, history, sources, prompts, the audit summary, the changelog's lock digest, the
bank's name, ``review/summary.json``). It prints the SHA-256 of the checked version's lock:
publish it with a release, since a consistent rewrite of the newest version's files *and* its
lock can only be caught against a hash kept elsewhere (older versions are anchored by the newer
locks). A damaged or moved-back ``current`` pointer is a refusal (exit code 2) saying how to
repair it (:func:`generators.bank.store.check_pointer`), before any check.

``add`` and ``export`` run the same checks first (:func:`require_clean`): a damaged bank is
never built on or exported from.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gen import kinds
from gen.banks.store import (
    FORMAT,
    LOCK,
    SCHEMA_REVISION,
    VERSION_DIR,
    VERSIONS,
    check_pointer,
    is_within,
    label,
    leftovers,
    read_json,
    read_kind,
    version_dir,
    version_files,
    version_links,
)
from gen.banks.values import KindData, kind_data, review_problems, value_problems
from gen.errors import GenError, MissingInputError
from gen.llm import sha256_file
from gen.readers import validated
from gen.schemas.bank import Lock


class DriftError(GenError):
    """The bank does not verify, so nothing is written on top of it or exported from it. Exit
    code 1, as ``bank verify`` gives for the same bank."""

    exit_code = 1


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


def current_format(lock: dict[str, Any]) -> bool:
    """A lock of this toolkit's format, at a schema revision it reads (``check_version`` names the
    others: ``bad_lock``, ``newer_schema``)."""
    rev = lock.get("schema_revision")
    return lock.get("format") == FORMAT and isinstance(rev, int) and rev <= SCHEMA_REVISION


def drift_line(p: Problem) -> str:
    """How verify prints a problem (and how a refused writer names the first one)."""
    return f"DRIFT {p.path}: {p.reason}: {p.detail}"


def check_version(
    root: Path,
    version: int,
    folder: Path,
    lock: dict[str, Any],
    previous: Rows | None,
    ok: list[tuple[str, str]] | None = None,
    checked: dict[str, tuple[Rows, KindData]] | None = None,
    previous_lock: dict[str, Any] | None = None,
) -> tuple[list[Problem], Rows]:
    """Problems of one version folder against its lock (files, hashes, counts, ids, append-only,
    and every value a release publishes: :func:`generators.bank.values.value_problems`), and its
    rows. ``previous``: the rows of the version before, when known; ``previous_lock``: its lock,
    when known; ``checked``: rows of data files already checked, by
    SHA-256 (hard-linked files are read once)."""
    rel = f"{VERSIONS}/{label(version)}"
    problems: list[Problem] = []

    def problem(path: str, reason: str, detail: str) -> None:
        problems.append(Problem(version, f"{rel}/{path}" if path else rel, reason, detail))

    if lock.get("format") != FORMAT or not isinstance(lock.get("schema_revision"), int):
        problem(LOCK, "bad_lock", f"{rel}/{LOCK} is not a {FORMAT} lock")
        return problems, {}
    if lock["schema_revision"] > SCHEMA_REVISION:
        problem(
            LOCK,
            "newer_schema",
            f"{rel}/{LOCK}: schema revision {lock['schema_revision']} is newer than "
            f"this toolkit's {SCHEMA_REVISION}; upgrade gen",
        )
        return problems, {}
    if lock.get("version") != version:
        problem(
            LOCK,
            "version_mismatch",
            f"{rel}/{LOCK} says version {lock.get('version')}, its folder {label(version)}",
        )
    links = dict(version_links(root, folder))
    for name, target in links.items():
        problem(
            name,
            "symlink",
            f"{rel}/{name} is a symlink or leaves the bank (to {target}); "
            "a version holds its own files",
        )
    expected: dict[str, str] = lock.get("files") or {}
    found = version_files(folder)
    for name in sorted(expected.keys() | found.keys()):
        if name not in found:
            if name not in links:
                problem(name, "missing_file", f"{rel}/{name} is listed in the lock but missing")
        elif name not in expected:
            problem(
                name,
                "unexpected_file",
                f"{rel}/{name} is not in the lock (added without a version bump)",
            )
        elif expected[name] != found[name]:
            problem(
                name,
                "hash_mismatch",
                f"{rel}/{name}: SHA-256 {found[name][:16]}… but the lock has "
                f"{expected[name][:16]}… (changed without a version bump)",
            )
        elif ok is not None:
            ok.append((name, found[name]))
    current_rows: Rows = {}
    data: dict[str, KindData] = {}
    counts = lock.get("counts") or {}
    for kind in kinds.bank_names():
        name = f"{kind}.parquet"
        if name not in found:
            if kind in counts and name not in links:
                problem(
                    name,
                    "missing_file",
                    f"{rel}/{name}: the lock counts {counts[kind].get('items')} {kind} "
                    "items but the file is missing",
                )
            continue
        sha = found[name]
        if checked is not None and sha in checked:
            rows, data[kind] = checked[sha]
        else:
            rows = {}
            try:
                df = read_kind(folder / name)
                for iid, added, rec in df.select("item_id", "added_in", "record").iter_rows():
                    if iid in rows:
                        problem(name, "duplicate_id", f"{rel}/{name}: item {iid} appears twice")
                    try:
                        recomputed = kinds.require(kind).item_id(json.loads(rec))
                    except (ValueError, GenError, KeyError, TypeError) as e:
                        recomputed = f"unreadable record ({e})"
                    if recomputed != iid:
                        problem(
                            name,
                            "item_id_mismatch",
                            f"{rel}/{name}: item {iid}: its record hashes to {recomputed}",
                        )
                    rows[iid] = (added, hashlib.sha256(rec.encode()).hexdigest())
                data[kind] = kind_data(df)
            except Exception as e:  # noqa: BLE001 - a damaged parquet file raises several types
                problem(
                    name,
                    "unreadable",
                    f"{rel}/{name}: cannot read ({str(e).splitlines()[0][:120]})",
                )
                continue
            if checked is not None and not any(p.path.endswith(name) for p in problems):
                checked[sha] = (rows, data[kind])
        if counts.get(kind, {}).get("items") != len(rows):
            problem(
                name,
                "count_mismatch",
                f"{rel}/{name}: {len(rows)} items, the lock counts "
                f"{counts.get(kind, {}).get('items')}",
            )
        late = [i for i, (a, _) in rows.items() if not isinstance(a, int) or a > version]
        if late:
            problem(
                name,
                "bad_added_in",
                f"{rel}/{name}: {len(late)} items say added_in > {version}, e.g. {late[0]}",
            )
        current_rows.update(rows)
    for kind in counts:
        if kind not in kinds.bank_names():
            problem(LOCK, "unknown_kind", f"{rel}/{LOCK} counts an unknown kind {kind!r}")
    history = lock.get("history") or []
    mine = history[-1] if history else {}
    if mine.get("version") != version:
        problem(
            LOCK, "bad_history", f"{rel}/{LOCK}: its history does not end with {label(version)}"
        )
    if previous is not None:
        gone = [i for i in previous if i not in current_rows]
        changed = [i for i, v in previous.items() if i in current_rows and current_rows[i] != v]
        if gone:
            problem(
                "",
                "removed_item",
                f"{rel}: {len(gone)} items of {label(version - 1)} are missing, e.g. {gone[0]}",
            )
        if changed:
            problem(
                "",
                "rewritten_item",
                f"{rel}: {len(changed)} items of {label(version - 1)} were rewritten, "
                f"e.g. {changed[0]}",
            )
    if previous is not None or version == 1:
        new_here = [i for i in current_rows if previous is None or i not in previous]
        wrong = [i for i in new_here if current_rows[i][0] != version]
        if wrong:
            problem(
                "",
                "bad_added_in",
                f"{rel}: {len(wrong)} items new in {label(version)} say another added_in, "
                f"e.g. {wrong[0]}",
            )
    if current_format(lock):
        try:
            validated(Lock, lock, f"{rel}/{LOCK}")  # every field the checks below and export read
        except GenError as e:
            problem(LOCK, "bad_lock", str(e))
            return problems, current_rows
    if current_format(lock) and not any(p.reason == "unreadable" for p in problems):
        audit_path = folder / "audit" / "audit.json"
        try:
            audit = (
                read_json(audit_path, "audit")
                if audit_path.is_file() and not audit_path.is_symlink()
                else None
            )
        except GenError as e:
            audit = None
            problem("audit/audit.json", "unreadable", str(e))
        for path, reason, detail in value_problems(
            version, folder, lock, data, previous_lock, audit
        ):
            problem(path, reason, detail)
        for path, reason, detail in review_problems(folder, len(current_rows)):
            problem(path, reason, detail)
    return problems, current_rows


def verify_bank(root: Path, target: int | None = None) -> tuple[int, list[VersionCheck], list[str]]:
    """Check versions 1..target (default: current); returns (target, per-version checks,
    leftovers)."""
    current = check_pointer(
        root
    )  # a damaged or moved-back pointer: a refusal saying how to repair it
    if current is None:
        raise MissingInputError(f"bank: no released version at {root}")
    target = target or current
    checks = [VersionCheck(v) for v in range(1, target + 1)]
    top = checks[-1]
    vroot = root / VERSIONS
    if vroot.is_symlink():
        top.problems.append(
            Problem(
                target,
                VERSIONS,
                "symlink",
                f"{VERSIONS} is a symlink (to {os.path.realpath(vroot)}); the bank holds its own "
                "files",
            )
        )
    locks: dict[int, dict[str, Any] | None] = {}
    for c in checks:
        folder = version_dir(root, c.version)
        rel = f"{VERSIONS}/{label(c.version)}"
        if folder.is_symlink() or (folder.exists() and not is_within(root, folder)):
            locks[c.version] = None
            c.problems.append(
                Problem(
                    c.version,
                    rel,
                    "symlink",
                    f"{rel} is a symlink or leaves the bank (to {os.path.realpath(folder)}); "
                    "a version holds its own files",
                )
            )
            continue
        try:
            raw = read_json(folder / LOCK, "bank")
            if not isinstance(raw, dict) or current_format(raw):  # others: check_version names them
                validated(
                    Lock, raw, f"{rel}/{LOCK}"
                )  # every field verify and export read, in its shape
            locks[c.version] = raw
        except GenError as e:
            locks[c.version] = None
            reason = (
                "missing_version"
                if not folder.is_dir()
                else "missing_file"
                if not (folder / LOCK).exists()
                else "bad_lock"
            )
            c.problems.append(Problem(c.version, f"{rel}/{LOCK}", reason, str(e)))
    top_lock = locks[target]
    history = (top_lock or {}).get("history") or []
    if top_lock is not None and [h.get("version") for h in history] != list(range(1, target + 1)):
        top.problems.append(
            Problem(
                target,
                f"{VERSIONS}/{label(target)}/{LOCK}",
                "bad_history",
                f"the history of {label(target)} lists "
                f"versions {[h.get('version') for h in history]}",
            )
        )
    for h in history[:-1]:
        v = h.get("version")
        if isinstance(v, int) and 1 <= v < target and locks.get(v) is not None:
            sha = sha256_file(version_dir(root, v) / LOCK)
            # each lock is recorded by the next one; the newest is checked against every later
            # history
            later = [x for x in (locks.get(w) for w in range(v + 1, target + 1)) if x]
            recorded = {
                (x.get("history") or [{}] * v)[v - 1].get("lock_sha256")
                for x in later
                if len(x.get("history") or []) >= v
            }
            for r in sorted(recorded, key=str):
                if r != sha:
                    checks[v - 1].problems.append(
                        Problem(
                            v,
                            f"{VERSIONS}/{label(v)}/{LOCK}",
                            "hash_mismatch",
                            f"{VERSIONS}/{label(v)}/{LOCK}: SHA-256 {sha[:16]}… but a later "
                            "release recorded "
                            f"{str(r)[:16]}… (changed without a version bump)",
                        )
                    )
                    break
    previous: Rows | None = None
    checked: dict[str, tuple[Rows, KindData]] = {}
    for c in checks:
        lock = locks[c.version]
        if lock is None:
            previous = None
            continue
        before = locks.get(c.version - 1)
        prev_lock = before if before is not None and current_format(before) else None
        found, previous = check_version(
            root,
            c.version,
            version_dir(root, c.version),
            lock,
            previous,
            c.ok_files,
            checked,
            prev_lock,
        )
        c.problems += found
    left = [p.relative_to(root).as_posix() for p in leftovers(root, current)]
    for p in sorted(vroot.iterdir()) if vroot.is_dir() else []:
        if not (VERSION_DIR.match(p.name) or p.name.startswith(".staging-")):
            top.problems.append(
                Problem(
                    target,
                    f"{VERSIONS}/{p.name}",
                    "unexpected_file",
                    f"{VERSIONS}/{p.name} is not a version folder",
                )
            )
    return target, checks, left


def require_clean(root: Path, target: int) -> None:
    """Refuse to build on or export from a bank whose versions 1..target do not verify: the
    first problem as ``bank verify`` prints it (:class:`DriftError`, exit code 1)."""
    _, checks, _ = verify_bank(root, target)
    found = [p for c in checks for p in c.problems]
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise DriftError(
            f"bank {root} {label(target)} does not verify, nothing written: {drift_line(found[0])}"
            f"{more}; python -m gen bank verify bank={root} lists every problem"
        )
