"""The per-call response cache and the embeddings cache (SQLite), and file hashing.

A cache file lives in ``cache_dir`` and is laid out by the folder's filesystem (:mod:`gen.netfs`):

- **a local disk**: one SQLite file (``llm.sqlite``) in WAL mode, shared by every process and
  thread (Hydra multirun shards); a killed process loses at most the call in flight.
- **a network filesystem** (NFS, Lustre…), where WAL's shared-memory index does not work across
  hosts and file locks are not to be trusted: every process writes a file of its own,
  ``llm.parts/<host>-<pid>-<id>.sqlite``, that no other process ever writes (so no lock is taken:
  SQLite's ``unix-none`` VFS, rollback journal), with a ``.live`` marker beside it while it runs.
  A process reads, read-only, the parts whose writer finished or is gone (a dead pid on this
  host, or a marker untouched for 10 minutes), and the single file of the local layout if one is
  there. When more than 8 parts are finished, opening merges all but the largest into a new part
  (published by an atomic rename before the merged ones are deleted, so a row is never lost).
  A part a killed process left with a hot journal is read from a private copy that SQLite rolls
  back, never rolled back in place.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gen.errors import ConfigError
from gen.netfs import HOST, holder, holder_gone, network_fs

CALLS = [
    "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS files (path TEXT, size INT, mtime INT, sha256 TEXT,"
    " PRIMARY KEY (path, size, mtime))",
]
MERGE_AT = 8
"""Finished parts a network-filesystem cache tolerates before opening merges them."""
READ_STALE = 600.0
"""Seconds after which another host's part, its marker untouched, is read (its writer is gone)."""
MERGE_STALE = 86_400.0
"""Seconds after which another host's unfinished part may be merged (and deleted)."""
HEARTBEAT = 60.0


class Cache:
    """Per-call response cache (see the module's docstring for its layout on disk).

    Safe across threads of one process and across processes (Hydra multirun shards), on a local
    disk and on a network filesystem.
    """

    def __init__(self, path: Path):
        self.path = path
        self._store = open_store(path, CALLS)

    @property
    def layout(self) -> str:
        """``wal`` (one shared file) or ``parts`` (one file per process: a network filesystem)."""
        return self._store.layout

    def get(self, key: str) -> str | None:
        rows = self._store.query("SELECT value FROM calls WHERE key=?", (key,), first=True)
        return rows[0][0] if rows else None

    def put(self, key: str, value: str) -> None:
        self._store.write("INSERT OR REPLACE INTO calls VALUES (?, ?)", [(key, value)])

    def put_many(self, rows: Sequence[tuple[str, str]]) -> None:
        """Write several ``(key, value)`` rows in one transaction."""
        self._store.write("INSERT OR REPLACE INTO calls VALUES (?, ?)", list(rows))

    def file_sha256(self, path: Path) -> str:
        """SHA-256 of a (large) file, memoised by path, size and mtime."""
        st = path.stat()
        ident = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        rows = self._store.query(
            "SELECT sha256 FROM files WHERE path=? AND size=? AND mtime=?", ident, first=True
        )
        if rows:
            return rows[0][0]
        digest = sha256_file(path)
        self._store.write("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)", [(*ident, digest)])
        return digest


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- stores


def open_store(path: Path, schema: Sequence[str]) -> WalStore | PartsStore:
    """The cache file ``path`` with the tables of ``schema``, for any thread: one shared WAL file
    on a local disk, per-process parts on a network filesystem. Every cache of the toolkit (LLM
    calls, embeddings) opens here.

    Raises:
        ConfigError: the cache folder cannot be used (a file stands there or above it, it is
            read-only, the file is not a database), naming it: ``cache_dir`` is the fix.
    """
    folder = path.parent
    try:
        for above in (folder, *folder.parents):
            if above.exists():
                if not above.is_dir():
                    raise ConfigError(f"cache_dir: cannot use {folder}: {above} is a file")
                break
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):  # sqlite writes its journals beside
            raise ConfigError(f"cache_dir: cannot use {folder}: it is not writable (read-only?)")
        if network_fs(folder) is None:
            return WalStore(path, schema)
        return PartsStore.shared(path, schema)
    except OSError as e:
        reason = e.strerror or str(e)
    except sqlite3.Error as e:
        reason = f"{path.name}: {e}"
    raise ConfigError(f"cache_dir: cannot use {folder}: {reason}")


class WalStore:
    """One SQLite file in WAL mode that every process and thread on this host shares."""

    layout = "wal"

    def __init__(self, path: Path, schema: Sequence[str]):
        self.path = path
        self._lock = threading.Lock()
        self.db = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        for statement in schema:
            self.db.execute(statement)
        self.db.execute("BEGIN IMMEDIATE")  # a write lock now, rather than a failing write later
        self.db.execute("ROLLBACK")
        self.db.execute("PRAGMA synchronous=NORMAL")

    def query(
        self, sql: str, params: Sequence[Any], *, first: bool = False
    ) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.db.execute(sql, params).fetchall()

    def write(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.executemany(sql, rows)
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")


def _uri(path: Path, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quote(str(path.resolve()), safe='/')}" + (f"?{query}" if query else "")


class PartsStore:
    """A cache on a network filesystem: this process's own part, and read-only views of the
    parts of processes that are done (see the module's docstring). One per cache file and
    process."""

    layout = "parts"
    _shared: dict[str, PartsStore] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, path: Path, schema: Sequence[str]) -> PartsStore:
        """This process's store for ``path`` (a forked child gets its own)."""
        key = str(path.resolve())
        with cls._shared_lock:
            store = cls._shared.get(key)
            if store is None or store.pid != os.getpid():
                store = cls._shared[key] = cls(path, schema)
            return store

    def __init__(self, path: Path, schema: Sequence[str]):
        self.path = path
        self.pid = os.getpid()
        self.schema = list(schema)
        self.tables = [
            m.group(1)
            for s in schema
            if (m := re.match(r"\s*CREATE TABLE IF NOT EXISTS (\w+)", s, re.IGNORECASE))
        ]
        self.folder = path.with_name(path.stem + ".parts")
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._own: sqlite3.Connection | None = None
        self._own_path: Path | None = None
        self._marker: Path | None = None
        self._beat = 0.0
        self._copies: Path | None = None
        self._readers: list[sqlite3.Connection] = []
        self._merge()
        for part in [*self._parts(READ_STALE), *([path] if path.is_file() else [])]:
            db = self._reader(part)
            if db is not None:
                self._readers.append(db)
        atexit.register(self.close)

    # ------------------------------------------------------------------ reading

    def _parts(self, stale_after: float) -> list[Path]:
        """The parts whose writer finished, or is gone (judged with ``stale_after``)."""
        out = []
        for part in sorted(self.folder.glob("*.sqlite")):
            if part == self._own_path:
                continue
            marker = part.with_suffix(".live")
            try:
                text, mtime = marker.read_text(), marker.stat().st_mtime
            except FileNotFoundError:
                out.append(part)
                continue
            except (OSError, UnicodeDecodeError):
                continue
            if holder_gone(text, mtime, stale_after=stale_after):
                out.append(part)
        return out

    def _readable(self, part: Path) -> Path:
        """``part`` itself, or, when a killed writer left a hot journal beside it, a private
        copy that SQLite has rolled back (the shared file is never written by a reader)."""
        journal = part.with_name(part.name + "-journal")
        if not journal.exists():
            return part
        if self._copies is None:
            self._copies = Path(tempfile.mkdtemp(prefix="gen-cache-"))
        copy = self._copies / f"{uuid.uuid4().hex[:8]}-{part.name}"
        shutil.copyfile(part, copy)
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(journal, copy.with_name(copy.name + "-journal"))
        db = sqlite3.connect(_uri(copy, vfs="unix-none"), uri=True)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # rolls the journal back
        finally:
            db.close()
        return copy

    def _reader(self, part: Path) -> sqlite3.Connection | None:
        try:
            db = sqlite3.connect(
                _uri(self._readable(part), mode="ro", immutable="1"),
                uri=True,
                check_same_thread=False,
            )
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except FileNotFoundError:  # merged and removed by another process meanwhile
            return None
        except sqlite3.DatabaseError:
            if part == self.path:  # the shared file of the local layout: say it is unusable
                raise
            return None  # a damaged part is only a cache miss
        return db if names & set(self.tables) else None

    def query(
        self, sql: str, params: Sequence[Any], *, first: bool = False
    ) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        with self._lock:
            for db in [*([self._own] if self._own is not None else []), *self._readers]:
                try:
                    rows += db.execute(sql, params).fetchall()
                except sqlite3.DatabaseError:
                    continue  # a table this part lacks, or a part deleted under us: a miss
                if rows and first:
                    break
        return rows

    # ------------------------------------------------------------------ writing

    def write(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._lock:
            db = self._own if self._own is not None else self._open_own()
            db.execute("BEGIN")
            try:
                db.executemany(sql, rows)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            if self._marker is not None and time.monotonic() - self._beat > HEARTBEAT:
                self._beat = time.monotonic()
                with contextlib.suppress(OSError):
                    os.utime(self._marker)

    def _open_own(self) -> sqlite3.Connection:
        name = f"{HOST}-{self.pid}-{uuid.uuid4().hex[:8]}"
        self._marker = self.folder / f"{name}.live"
        self._marker.write_text(holder() + "\n")  # before the part: never read while written
        self._beat = time.monotonic()
        self._own_path = self.folder / f"{name}.sqlite"
        db = sqlite3.connect(
            _uri(self._own_path, vfs="unix-none"),
            uri=True,
            check_same_thread=False,
            isolation_level=None,
        )
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA synchronous=NORMAL")
        for statement in self.schema:
            db.execute(statement)
        self._own = db
        return db

    def close(self) -> None:
        """Finish this process's part (it becomes readable by others) and drop the views."""
        with self._lock:
            if self._own is not None:
                self._own.close()
                self._own = None
                if self._marker is not None:
                    with contextlib.suppress(OSError):
                        self._marker.unlink()
            for db in self._readers:
                db.close()
            self._readers = []
            if self._copies is not None:
                shutil.rmtree(self._copies, ignore_errors=True)
                self._copies = None

    # ------------------------------------------------------------------ merging

    def _merge(self) -> None:
        """More than ``MERGE_AT`` finished parts: merge all but the largest into a new one."""
        parts = self._parts(MERGE_STALE)
        if len(parts) <= MERGE_AT:
            return
        sizes = {}
        for p in parts:
            with contextlib.suppress(OSError):
                sizes[p] = p.stat().st_size
        sources = sorted(sizes, key=lambda p: sizes[p])[:-1]
        tmp = self.folder / f".merge-{HOST}-{self.pid}-{uuid.uuid4().hex[:8]}.tmp"
        merged: list[Path] = []
        db = sqlite3.connect(_uri(tmp, vfs="unix-none"), uri=True, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=OFF")  # a private file, published whole or not at all
            for statement in self.schema:
                db.execute(statement)
            for src in sources:
                try:
                    db.execute(
                        "ATTACH DATABASE ? AS src",
                        (_uri(self._readable(src), mode="ro", immutable="1"),),
                    )
                except (sqlite3.DatabaseError, OSError):
                    continue
                try:
                    have = {
                        r[0]
                        for r in db.execute("SELECT name FROM src.sqlite_master WHERE type='table'")
                    }
                    for table in self.tables:
                        if table in have:
                            db.execute(
                                f"INSERT OR IGNORE INTO main.{table} SELECT * FROM src.{table}"
                            )
                    merged.append(src)
                except sqlite3.DatabaseError:
                    pass
                finally:
                    db.execute("DETACH DATABASE src")
        finally:
            db.close()
        if not merged:
            tmp.unlink(missing_ok=True)
            return
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.rename(tmp, self.folder / f"{HOST}-{self.pid}-{uuid.uuid4().hex[:8]}.sqlite")
        for src in merged:  # only after the merged part is published
            for leftover in (src, src.with_suffix(".live"), src.with_name(src.name + "-journal")):
                with contextlib.suppress(OSError):
                    leftover.unlink()
