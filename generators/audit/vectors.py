"""Vectors of a whole bank in bounded memory: :class:`Vectors` (float32 rows in an anonymous
temporary file, read back in blocks or by row) and :func:`knn` (exact inner-product neighbours
by FAISS, blocked over the queries and over the base, so neither needs to fit in memory)."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from gen.llm.vectors import ip_index


class Vectors:
    """float32 rows of one width, appended in blocks, kept in a temporary file (deleted with the
    object): 100k items embedded with MiniLM are 150 MB, a million 1.5 GB."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="gen-audit-vec-")  # noqa: SIM115 - lives as long as the object
        self.dim = 0
        self.n = 0

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=np.float32)
        if not len(block):
            return
        if self.n and block.shape[1] != self.dim:
            raise ValueError(f"rows of width {block.shape[1]}, not {self.dim}")
        self.dim = block.shape[1]
        self._file.write(block.tobytes())
        self.n += len(block)

    def __len__(self) -> int:
        return self.n

    def _read(self, start: int, size: int) -> bytes:
        self._file.flush()
        fd, parts = self._file.fileno(), []
        while size > 0:
            got = os.pread(fd, size, start)
            if not got:
                raise OSError("the audit's vector file ended early")
            parts.append(got)
            start, size = start + len(got), size - len(got)
        return b"".join(parts)

    def block(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as an array."""
        stop = min(stop, self.n)
        if stop <= start:
            return np.zeros((0, self.dim), dtype=np.float32)
        row = 4 * self.dim
        return np.frombuffer(
            self._read(start * row, (stop - start) * row), dtype=np.float32
        ).reshape(-1, self.dim)

    def take(self, rows: list[int] | np.ndarray) -> np.ndarray:
        """The rows at ``rows`` (any order, repeats allowed), as an array."""
        rows = np.asarray(rows, dtype=np.int64)
        uniq, back = np.unique(rows, return_inverse=True)
        got = (
            np.stack([self.block(int(r), int(r) + 1)[0] for r in uniq])
            if len(uniq)
            else np.zeros((0, self.dim), dtype=np.float32)
        )
        return got[back.ravel()]


def _rows(x: np.ndarray | Vectors, start: int, stop: int) -> np.ndarray:
    return (
        x.block(start, stop)
        if isinstance(x, Vectors)
        else np.ascontiguousarray(x[start:stop], dtype=np.float32)
    )


def knn(
    a: np.ndarray | Vectors,
    b: np.ndarray | Vectors | None,
    k: int,
    block: int = 4096,
    base_block: int = 65536,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest inner products of each row of ``a`` with the rows of ``b`` (or with the
    other rows of ``a``): exact FAISS search, ``block`` queries at a time against ``base_block``
    base rows at a time, the best ``k`` kept per query (ties: the lower row). Returns
    (similarities, indices), each row best first."""
    base = a if b is None else b
    n, m = len(a), len(base)
    k = min(k, m - (b is None))
    if k < 1 or not n:
        return np.zeros((n, 0), dtype=np.float32), np.zeros((n, 0), dtype=np.int64)
    best_d = np.full((n, k), -np.inf, dtype=np.float32)
    best_i = np.full((n, k), -1, dtype=np.int64)
    for bs in range(0, m, base_block):
        rows = _rows(base, bs, bs + base_block)
        index = ip_index(rows)
        kk = min(k + (b is None), len(rows))
        for s in range(0, n, block):
            d, i = index.search(_rows(a, s, s + block), kk)
            i = np.where(i >= 0, i + bs, -1)
            if b is None:  # not the row itself
                own = i == np.arange(s, s + len(i))[:, None]
                d, i = np.where(own, -np.inf, d), np.where(own, -1, i)
            d = np.concatenate([best_d[s : s + len(i)], d], axis=1)
            i = np.concatenate([best_i[s : s + len(i)], i], axis=1)
            order = np.lexsort((np.where(i < 0, np.iinfo(np.int64).max, i), -d), axis=1)[:, :k]
            best_d[s : s + len(i)] = np.take_along_axis(d, order, 1)
            best_i[s : s + len(i)] = np.take_along_axis(i, order, 1)
    return best_d, best_i
