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

from gen.errors import InputError, MissingInputError
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
    """The columns of a kind's parquet file, in order."""
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
    root.mkdir(parents=True, exist_ok=True)
    with open(root / WRITER_LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


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
