"""The bank's files: versions, the ``current`` pointer, the writer's lock, staging and the
atomic commit, and reading a version's files and lock.

Layout of a bank directory (``bank=``)::

    bank/
      current -> versions/v0003        the single commit point (a symlink, replaced atomically)
      versions/v0001/ … v0003/         immutable snapshots, one per release
      .lock                            held (flock) by a running ``add``

**Atomicity.** A new version is staged in ``versions/.staging-vNNNN-<pid>``, fsynced, renamed
to ``versions/vNNNN``, and only then does ``current`` switch (``os.replace`` of a new symlink:
the one commit point). A crash or SIGKILL before the switch leaves the old version current,
after it the new one; staging folders and uncommitted versions are ignored by readers and
deleted by the next ``add``. ``GEN_BANK_FAULT=<phase>`` (one of :data:`FAULT_PHASES`) makes
``add`` SIGKILL itself at that phase, for tests.

A version holds its own files: a symlink in it, or a version folder that is a symlink or
resolves outside the bank, is drift (:func:`version_files` lists such entries apart).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gen.errors import ConfigError, InputError, MissingInputError
from gen.llm import sha256_file

SCHEMA_REVISION = 1
"""Revision of the bank's file format (columns, lock keys). Readers refuse a newer one."""
FORMAT = "gen-bank"
LOCK = "MANIFEST.lock.json"
CHANGELOG = "CHANGELOG.md"
CURRENT = "current"
VERSIONS = "versions"
WRITER_LOCK = ".lock"
FAULT_ENV = "GEN_BANK_FAULT"
FAULT_PHASES = ("audited", "staging", "staged", "renamed", "linked", "committed")
"""``audited``: after the audit; ``staging``: one data file written into the staging folder;
``staged``: the whole version staged; ``renamed``: staged folder renamed to ``vNNNN``;
``linked``: the new ``current`` symlink made under a temporary name; ``committed``: after the
switch, before the run folder is finished."""
VERSION_DIR = re.compile(r"^v(\d{4,})$")


def label(version: int) -> str:
    return f"v{version:04d}"


def version_dir(root: Path, version: int) -> Path:
    return root / VERSIONS / label(version)


def is_within(folder: Path, path: Path) -> bool:
    """Whether ``path`` resolves (through symlinks, existing or not) inside ``folder``."""
    base = os.path.realpath(folder)
    return os.path.commonpath([base, os.path.realpath(path)]) == base


def check_root(root: Path, *, writing: bool) -> None:
    """``bank=`` is a folder (or, for a writer, a place where one can be made, and its lock
    file is a file): one line naming the path, not an OSError halfway through a run."""
    if root.exists() and not root.is_dir():
        raise ConfigError(f"bank: {root} is a file, not a bank folder")
    if not writing:
        return
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"bank: cannot make a bank at {root}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"bank: cannot write to {root}: {probe} is not writable")
    lock = root / WRITER_LOCK
    if lock.is_symlink() or (lock.exists() and not lock.is_file()):
        raise InputError(f"bank: {lock} is not a plain file (it is the lock a running add holds); remove it")


def read_pointer(root: Path) -> int | None:
    """The current version (None: no release yet). ``current`` is a symlink; a plain file
    holding the target (a checkout without symlinks) is read too."""
    p = root / CURRENT
    if p.is_symlink():
        target = os.readlink(p)
    elif p.is_file():
        try:
            target = p.read_text(encoding="utf-8").strip()
        except UnicodeDecodeError:
            raise InputError(f"bank: {p} is not UTF-8 text (it names the current version: {VERSIONS}/vNNNN)") from None
        except OSError as e:
            raise InputError(f"bank: cannot read {p} ({e.strerror})") from None
    elif p.exists():
        raise InputError(f"bank: {p} is neither a symlink nor a file naming {VERSIONS}/vNNNN")
    else:
        return None
    m = re.fullmatch(rf"{VERSIONS}/v(\d{{4,}})/?", target)
    if not m:
        raise InputError(f"bank: {p} points to {target[:80]!r}, not {VERSIONS}/vNNNN")
    return int(m.group(1))


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingInputError(f"{what}: {path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{what}: {path} is not valid JSON ({e})") from None
    except OSError as e:
        raise InputError(f"{what}: cannot read {path} ({e.strerror})") from None
    if not isinstance(data, dict):
        raise InputError(f"{what}: {path} is not a JSON object")
    return data


def read_kind(path: Path) -> Any:
    import polars as pl

    return pl.read_parquet(path)


def columns(kind: str) -> dict[str, Any]:
    """The columns of a kind's parquet file, in order."""
    import polars as pl

    common = {"item_id": pl.String, "kind": pl.String, "question_type": pl.String, "added_in": pl.Int64,
              "source": pl.String, "source_format": pl.String, "source_item_id": pl.String}
    flat: dict[str, pl.DataType | type[pl.DataType]]  # a class (pl.String) or an instance (pl.List(...))
    if kind == "scenarios":
        flat = {"scenario_id": pl.String, "subset": pl.String, "pair_id": pl.String, "target_context": pl.String,
                "change_type": pl.String, "activity_domain": pl.String, "referent_complexity": pl.String,
                "difficulty_tier": pl.String, "turn_2_user": pl.String}
    elif kind == "digital":
        flat = {"current_datetime": pl.String, "cue_id": pl.String, "cue_app": pl.String, "cue": pl.String,
                "main_persona": pl.String, "related_personas": pl.List(pl.String), "apps": pl.List(pl.String),
                "chars_total": pl.Int64}
    else:
        flat = {"question": pl.String, "options": pl.List(pl.String), "answer": pl.Int64,
                "answer_text": pl.String, "group": pl.String, "context": pl.String, "wagibench": pl.String}
    return {**common, **flat, "record": pl.String}


def version_files(folder: Path) -> dict[str, str]:
    """SHA-256 of every regular file of a version folder except its lock (symlinks are not
    followed: :func:`version_links` lists them)."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(folder):
        here = Path(dirpath)
        dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink())
        for name in files:
            p = here / name
            rel = p.relative_to(folder).as_posix()
            if not p.is_symlink() and p.is_file() and rel != LOCK:
                out[rel] = sha256_file(p)
    return dict(sorted(out.items()))


def version_links(root: Path, folder: Path) -> list[tuple[str, str]]:
    """``(name, where it points)`` of every entry of a version folder that is a symlink or
    resolves outside the bank: a version holds its own files, nothing borrowed."""
    out = []
    for dirpath, dirs, files in os.walk(folder):
        here = Path(dirpath)
        for name in [*dirs, *files]:
            p = here / name
            if p.is_symlink() or not is_within(root, p):
                out.append((p.relative_to(folder).as_posix(), os.path.realpath(p)))
        dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink())
    return sorted(out)


def leftovers(root: Path, current: int | None) -> list[Path]:
    """What a crashed add left: staging folders, versions newer than current, temporary pointers."""
    out = sorted(root.glob(".current.tmp-*"))
    vdir = root / VERSIONS
    if vdir.is_dir():
        for p in sorted(vdir.iterdir()):
            m = VERSION_DIR.match(p.name)
            if p.name.startswith(".staging-") or (m and int(m.group(1)) > (current or 0)):
                out.append(p)
    return out


def remove(p: Path) -> None:
    """Delete a file, a symlink (not what it points to) or a folder tree."""
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.is_dir():
        shutil.rmtree(p)


# --------------------------------------------------------------------------- writing


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    for p in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
        fsync(p)
    fsync(folder)


def write_durable(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    fsync(path)


def fault(phase: str) -> None:
    """SIGKILL this process at ``phase`` when GEN_BANK_FAULT names it (crash tests)."""
    if os.environ.get(FAULT_ENV) == phase:
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def writer_lock(root: Path) -> Iterator[None]:
    """Hold the bank's lock (flock on ``.lock``): one writer at a time; readers need no lock."""
    lock = root / WRITER_LOCK
    try:
        root.mkdir(parents=True, exist_ok=True)
        # never through a symlink, never truncating: the lock file only carries the flock
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise InputError(f"bank: cannot take the lock {lock} ({e.strerror or e})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def new_stage(root: Path, version: int) -> Path:
    """An empty staging folder for ``version`` beside the bank's versions."""
    vroot = root / VERSIONS
    vroot.mkdir(exist_ok=True)
    stage = vroot / f".staging-{label(version)}-{os.getpid()}"
    stage.mkdir()
    return stage


def publish(root: Path, stage: Path, version: int) -> None:
    """Make a fully staged (and fsynced) version current in one atomic step: rename it to
    ``versions/vNNNN``, then replace ``current`` with a new symlink (the commit point)."""
    fault("staged")
    vroot = root / VERSIONS
    os.rename(stage, version_dir(root, version))
    fsync(vroot)
    fault("renamed")
    tmp = root / f".current.tmp-{os.getpid()}"
    os.symlink(f"{VERSIONS}/{label(version)}", tmp)
    fault("linked")
    os.replace(tmp, root / CURRENT)  # the commit point
    fsync(root)
