"""The per-call response cache (SQLite) and file hashing."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path


class Cache:
    """Per-call response cache in SQLite (WAL: a killed process loses at most the call in flight).

    Safe across threads of one process and across processes (Hydra multirun shards).
    """

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT)")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT, size INT, mtime INT, sha256 TEXT,"
            " PRIMARY KEY (path, size, mtime))"
        )

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
