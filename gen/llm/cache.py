"""The per-call response cache (SQLite) and file hashing."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from gen.errors import ConfigError


class Cache:
    """Per-call response cache in SQLite (WAL: a killed process loses at most the call in flight).

    Safe across threads of one process and across processes (Hydra multirun shards).
    """

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._db = open_db(path, [
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT)",
            "CREATE TABLE IF NOT EXISTS files (path TEXT, size INT, mtime INT, sha256 TEXT,"
            " PRIMARY KEY (path, size, mtime))",
        ])
        self._db.execute("PRAGMA synchronous=NORMAL")

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM calls WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?)", (key, value))

    def file_sha256(self, path: Path) -> str:
        """SHA-256 of a (large) file, memoised by path, size and mtime."""
        st = path.stat()
        ident = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        with self._lock:
            row = self._db.execute(
                "SELECT sha256 FROM files WHERE path=? AND size=? AND mtime=?", ident
            ).fetchone()
        if row:
            return row[0]
        digest = sha256_file(path)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)", (*ident, digest))
        return digest


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def open_db(path: Path, schema: Sequence[str]) -> sqlite3.Connection:
    """Open (creating it and its folder) the SQLite cache file ``path`` in WAL mode, with the
    tables of ``schema``, for any thread. Every cache of the toolkit (LLM calls, embeddings)
    opens here.

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
        if not os.access(folder, os.W_OK | os.X_OK):  # sqlite writes its -wal/-shm files beside
            raise ConfigError(f"cache_dir: cannot use {folder}: it is not writable (read-only?)")
        db = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        for statement in schema:
            db.execute(statement)
        db.execute("BEGIN IMMEDIATE")  # a write lock now, rather than a failing write later
        db.execute("ROLLBACK")
        return db
    except OSError as e:
        reason = e.strerror or str(e)
    except sqlite3.Error as e:
        reason = f"{path.name}: {e}"
    raise ConfigError(f"cache_dir: cannot use {folder}: {reason}")
