"""The bank's files: versions, the ``current`` pointer, the writer's lock, staging and the
atomic commit, and reading a version's files and lock.

Layout of a bank directory (``bank=``)::

    bank/
      current -> versions/v0003        the single commit point (a symlink, replaced atomically)
      versions/v0001/ … v0003/         immutable snapshots, one per release
      .lock                            held (flock) by a running ``add``

**Atomicity.** A new version is staged in ``versions/.staging-vNNNN-<pid>``, fsynced, and
announced in a publishing note (``.publishing-vNNNN-<pid>``: the version and its lock's
SHA-256), then renamed to ``versions/vNNNN``; only then does ``current`` switch (``os.replace``
of a new symlink: the one commit point), and the note goes. A crash or SIGKILL before the
switch leaves the old version current, after it the new one. ``GEN_BANK_FAULT=<phase>`` (one of
:data:`FAULT_PHASES`) makes ``add`` SIGKILL itself at that phase, for tests.

**Released versions are never removed.** What a crash leaves (:func:`leftovers`: staging
folders, temporary pointers and notes of processes that are gone, and a version folder above
``current`` that such a note names with its lock's hash) is ignored by readers and removed by
the next ``add``. Any other version folder above ``current``, a missing ``current`` beside
released versions, or one pointing at no version is a damaged pointer: every command refuses
the bank, saying how to repair it (:func:`check_pointer`), and nothing is cleaned up.

A version holds its own files: a symlink in it, or a version folder that is a symlink or
resolves outside the bank, is drift (:func:`version_files` lists such entries apart).
"""

from __future__ import annotations

import errno
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
from gen.paths import (  # the bank's layout, which the run engine reads too
    CURRENT,
    LOCK,
    VERSION_DIR,
    VERSIONS,
    WRITER_LOCK,
    is_within,
    unwritable,
)

SCHEMA_REVISION = 1
"""Revision of the bank's file format (columns, lock keys). Readers refuse a newer one."""
FORMAT = "gen-bank"
CHANGELOG = "CHANGELOG.md"
FAULT_ENV = "GEN_BANK_FAULT"
FAULT_PHASES = ("audited", "staging", "staged", "renamed", "linked", "committed")
"""``audited``: after the audit; ``staging``: one data file written into the staging folder;
``staged``: the whole version staged; ``renamed``: staged folder renamed to ``vNNNN``;
``linked``: the new ``current`` symlink made under a temporary name; ``committed``: after the
switch, before the run folder is finished."""
PUBLISHING = re.compile(r"^\.publishing-v(\d{4,})-(\d+)$")
"""The note an ``add`` writes before it renames a staged version into place."""
LEFTOVER = re.compile(r"^(?:\.staging-v\d{4,}|\.current\.tmp)-(\d+)$")
USER_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ENAMETOOLONG,
        errno.EMLINK,
        errno.ETXTBSY,
    }
)
"""OSErrors writing to the bank that its owner fixes (permissions, a read-only or full disk): one
line, exit code 2, not an unexpected failure."""


def label(version: int) -> str:
    return f"v{version:04d}"


def version_dir(root: Path, version: int) -> Path:
    return root / VERSIONS / label(version)


def bank_name(root: Path) -> str:
    """The name a new version records (``bank`` in its lock): the bank folder's own name."""
    return Path(os.path.abspath(root)).name


def check_root(root: Path, *, writing: bool) -> None:
    """``bank=`` is a folder (or, for a writer, a place where one can be made, and its lock
    file is a file): one line naming the path, not an OSError halfway through a run."""
    if root.exists() and not root.is_dir():
        raise ConfigError(f"bank: {root} is a file, not a bank folder")
    if not writing:
        return
    why = unwritable(root)
    if why is not None:
        raise ConfigError(f"bank: cannot write to {root}: {why}")
    lock = root / WRITER_LOCK
    if lock.is_symlink() or (lock.exists() and not lock.is_file()):
        raise InputError(
            f"bank: {lock} is not a plain file (it is the lock a running add holds); remove it"
        )
    vroot = root / VERSIONS
    if vroot.exists() and not vroot.is_dir():
        raise InputError(f"bank: {vroot} is not a folder (it holds the bank's versions)")
    if vroot.is_dir() and not os.access(vroot, os.W_OK | os.X_OK):
        raise ConfigError(
            f"bank: cannot write to {vroot}: it is not writable (its permissions, or a read-only "
            "disk)"
        )


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
            raise InputError(
                f"bank: {p} is not UTF-8 text (it names the current version: {VERSIONS}/vNNNN)"
            ) from None
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

    common = {
        "item_id": pl.String,
        "kind": pl.String,
        "question_type": pl.String,
        "added_in": pl.Int64,
        "source": pl.String,
        "source_format": pl.String,
        "source_item_id": pl.String,
    }
    from gen import kinds

    flat = kinds.require(kind).columns()
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


def version_numbers(root: Path) -> list[int]:
    """The numbers of every entry of ``versions/`` named ``vNNNN`` (folder or not), sorted."""
    vroot = root / VERSIONS
    if not vroot.is_dir():
        return []
    return sorted(int(m.group(1)) for p in vroot.iterdir() if (m := VERSION_DIR.match(p.name)))


def _gone(pid: int) -> bool:
    """Whether process ``pid`` no longer runs (this process counts as gone: it is not writing)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: it runs, as another user
        return False
    return False


def publishing(root: Path) -> dict[int, tuple[Path, int]]:
    """``version -> (note, pid)`` of the publishing notes whose version folder exists with the
    lock the note names: versions an ``add`` renamed into place and may not have made current."""
    out: dict[int, tuple[Path, int]] = {}
    for note in sorted(root.glob(".publishing-v*")) if root.is_dir() else []:
        m = PUBLISHING.match(note.name)
        if not m or note.is_symlink() or not note.is_file():
            continue
        version = int(m.group(1))
        lock = version_dir(root, version) / LOCK
        try:
            said = json.loads(note.read_text(encoding="utf-8"))
            ok = (
                isinstance(said, dict)
                and said.get("version") == version
                and lock.is_file()
                and not lock.is_symlink()
                and said.get("lock_sha256") == sha256_file(lock)
            )
        except (OSError, ValueError):
            ok = False
        if ok:
            out[version] = (note, int(m.group(2)))
    return out


def leftovers(root: Path, current: int | None) -> list[Path]:
    """What a crashed add left, and nothing else: staging folders, temporary pointers and
    publishing notes of processes that are gone, and a version above ``current`` that such a
    note names (with its lock's SHA-256): renamed into place, never made current."""
    out: list[Path] = []
    if not root.is_dir():
        return out
    for p in sorted([*root.glob(".current.tmp-*"), *root.glob(".publishing-v*")]):
        m = LEFTOVER.match(p.name) or PUBLISHING.match(p.name)
        if m and _gone(int(m.group(m.lastindex or 1))):
            out.append(p)
    for version, (_, pid) in publishing(root).items():
        if version > (current or 0) and _gone(pid):
            out.append(version_dir(root, version))
    vroot = root / VERSIONS
    for p in sorted(vroot.glob(".staging-*")) if vroot.is_dir() else []:
        m = LEFTOVER.match(p.name)
        if m and _gone(int(m.group(1))):
            out.append(p)
    return sorted(out)


def check_pointer(root: Path) -> int | None:
    """The current version (None: no release yet), once the pointer and the version folders
    agree. A released version is never cleaned up, so a pointer that is missing beside released
    versions, names no version, or names one older than a released version (moved back, restored
    from an old copy) refuses the bank (InputError, exit code 2) saying how to repair it. Versions
    an unfinished add renamed into place but never made current (:func:`publishing`) are not
    released."""
    p = root / CURRENT
    pending = publishing(root)

    def fix(current: int | None) -> tuple[int | None, str]:
        released = [v for v in version_numbers(root) if v <= (current or 0) or v not in pending]
        newest = released[-1] if released else None
        return newest, (
            f"ln -sfn {VERSIONS}/{label(newest)} {p} restores it (then python -m gen bank verify "
            f"bank={root})"
            if newest
            else f"remove {p} to start the bank anew"
        )

    try:
        current = read_pointer(root)
    except InputError as e:
        raise InputError(f"{e}; nothing was changed: {fix(None)[1]}") from None
    newest, how = fix(current)
    if current is None:
        if newest is not None:
            raise InputError(
                f"bank: {p} is missing but {root / VERSIONS} holds released versions up to "
                f"{label(newest)}; nothing was changed: {how}"
            )
        return None
    if current not in version_numbers(root):
        raise InputError(
            f"bank: {p} points to {VERSIONS}/{label(current)}, which does not exist; nothing was "
            f"changed: {fix(None)[1]}"
        )
    if newest is not None and newest > current:
        raise InputError(
            f"bank: {p} points to {label(current)} but {label(newest)} is released too (the "
            "pointer "
            f"was moved back or restored from an older copy); released versions are never removed, "
            f"nothing was changed: {how}"
        )
    return current


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
    """Make a fully staged (and fsynced) version current in one atomic step: note it, rename it to
    ``versions/vNNNN``, then replace ``current`` with a new symlink (the commit point) and drop
    the note. A failure before the switch undoes every step (the bank is as it was); SIGKILL
    leaves what :func:`leftovers` names."""
    target = version_dir(root, version)
    if target.exists() or target.is_symlink():
        raise InputError(
            f"bank: {target} exists but is not current; nothing was changed (bank verify says why)"
        )
    note = root / f".publishing-{label(version)}-{os.getpid()}"
    tmp = root / f".current.tmp-{os.getpid()}"
    renamed = False
    try:
        write_durable(
            note,
            json.dumps(
                {"version": version, "lock_sha256": sha256_file(stage / LOCK), "pid": os.getpid()}
            )
            + "\n",
        )
        fsync(root)
        fault("staged")
        os.rename(stage, target)
        renamed = True
        fsync(root / VERSIONS)
        fault("renamed")
        os.symlink(f"{VERSIONS}/{label(version)}", tmp)
        fault("linked")
        os.replace(tmp, root / CURRENT)  # the commit point
    except BaseException:
        for p in (tmp, note):
            if p.is_symlink() or p.exists():
                p.unlink()
        if renamed:
            os.rename(target, stage)  # the caller removes its stage
        raise
    try:
        fsync(root)
        note.unlink()
        fsync(root)
    except OSError:
        pass  # committed: a note left behind is a leftover the next add removes


def bank_write_error(root: Path, e: OSError, current: int | None) -> InputError | None:
    """The one-line error for an OSError writing the bank that its owner fixes (None: another
    kind, an unexpected failure)."""
    if e.errno not in USER_ERRNOS:
        return None
    where = f" ({e.filename})" if e.filename else ""
    return InputError(
        f"bank: cannot write to {root}: {e.strerror or e}{where}; nothing was changed, it stays at "
        f"{label(current) if current else 'no version'}"
    )
