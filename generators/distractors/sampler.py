"""The percentile-band greedy sampler over an embedded goal bank: exact and scalable modes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gen.engine.runner import derive_seed
from gen.llm.vectors import ip_index, swig_ptr

NAME = "distractors"
"""The generator's name: the namespace of its seeds."""


@dataclass(frozen=True)
class Band:
    name: str
    lo: float
    hi: float


@dataclass(slots=True)
class Choice:
    """The outcome for one (reference, band, MCQ number): distractors, or why there are none."""

    ref: int
    band: Band
    j: int
    picks: list[int] | None
    """Bank indices of the distractors in greedy pick order (None: rejected)."""
    similarity: list[float]
    percentile: list[float]
    pairwise: list[list[float]]
    thresholds: tuple[float, float]
    candidates: int
    pool: int
    estimated: bool
    detail: str = ""


BIG = np.float32(1e30)
"""Score of a goal that may not be picked (outside the band, excluded, already chosen)."""
DRAWS = 256
"""Uniform draws per row when picking D1 by rejection; rows with no hit fall back to a scan."""


def matches(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All pairs (i, k) with ``a[i] == b[k]``, without a len(a)×len(b) matrix (they are few)."""
    order = np.argsort(b, kind="stable")
    sb = b[order]
    lo, hi = np.searchsorted(sb, a, "left"), np.searchsorted(sb, a, "right")
    cnt = hi - lo
    rows = np.repeat(np.arange(len(a)), cnt)
    starts = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)
    return rows, order[np.arange(len(rows)) + starts]


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: uniform 64-bit values from counters (vectorised, wraps)."""
    x = x.astype(np.uint64)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


@dataclass
class Sampler:
    """The band sampler over an embedded bank (``E``: N×d unit rows)."""

    E: np.ndarray
    groups: np.ndarray
    """Group code per goal (int)."""
    texts: np.ndarray
    """Verbalised-text code per goal (int); equal codes are exact duplicates."""
    bands: list[Band]
    distractors: int = 3
    mcqs_per_kind: int = 1
    exclude_same_group: bool = False
    scalable: bool = False
    sample_size: int = 2048
    block_size: int = 2048
    seed: int = 0
    row_budget: int = 1 << 23
    """Similarity entries held at once: rows per chunk = row_budget // universe size."""

    def __post_init__(self) -> None:
        self.E = np.ascontiguousarray(self.E, dtype=np.float32)
        self.N = len(self.E)
        self.groups = np.asarray(self.groups, dtype=np.int64)
        self.texts = np.asarray(self.texts, dtype=np.int64)
        if self.scalable and self.sample_size >= self.N:
            self.scalable = False  # the "sample" would be the whole bank: exact is cheaper
        self._buf: dict[str, np.ndarray] = {}
        self._perm: np.ndarray | None = None

    def run(self, refs: range) -> Iterator[list[Choice]]:
        """One list of choices (bands × MCQs) per reference in ``refs``, in order.

        References are processed in chunks aligned to absolute indices and always computed
        whole, so a reference's result does not depend on ``refs`` (shards, ``n``): the same
        matrix products run on the same rows.
        """
        if not len(refs):
            return
        if not self.scalable:
            rows = max(1, self.row_budget // self.N)
            every = np.arange(self.N)
            index = ip_index(self.E)
            for c0 in range(refs.start // rows * rows, refs.stop, rows):
                yield from self._block(
                    np.arange(c0, min(c0 + rows, self.N)), refs, self.E, every, None, index
                )
            return
        b = self.block_size
        rows = max(1, min(b, self.row_budget // self.sample_size))
        for block in range(refs.start // b, (refs.stop - 1) // b + 1):
            universe = self.block_sample(block)
            U = np.ascontiguousarray(self.E[universe])
            gram = U @ U.T
            for c0 in range(block * b, min((block + 1) * b, self.N), rows):
                c1 = min(c0 + rows, (block + 1) * b, self.N)
                if c1 > refs.start and c0 < refs.stop:
                    yield from self._block(np.arange(c0, c1), refs, U, universe, gram)

    def block_sample(self, block: int) -> np.ndarray:
        """The sample of goals shared by reference block ``block`` (sorted): the block's slice
        of one seeded permutation of the bank, so each sample is uniform and consecutive blocks
        see different goals (with block_size = sample_size every goal is in one sample, so any
        goal can become a distractor)."""
        if self._perm is None:
            self._perm = np.random.default_rng(derive_seed(self.seed, NAME, "sample")).permutation(
                self.N
            )
        at = (block * self.sample_size + np.arange(self.sample_size)) % self.N
        return np.sort(self._perm[at])

    def _buffer(self, name: str, shape: tuple[int, int], dtype: type) -> np.ndarray:
        """A reused work array (fresh large arrays cost more in page faults than the math)."""
        size = shape[0] * shape[1]
        buf = self._buf.get(name)
        if buf is None or buf.size < size or buf.dtype != dtype:
            buf = self._buf[name] = np.empty(size, dtype=dtype)
        return buf[:size].reshape(shape)

    def _block(
        self,
        refs: np.ndarray,
        keep: range,
        U: np.ndarray,
        uid: np.ndarray,
        gram: np.ndarray | None,
        index: Any = None,
    ) -> list[list[Choice]]:
        """The choices of the chunk ``refs`` against universe ``U`` (goals ``uid``), returned for
        the references in ``keep``. Scalable mode: ``gram`` is U's Gram matrix. Exact mode:
        ``index`` is a FAISS inner-product index of the bank, for narrow bands' similarities."""
        B, n = len(refs), len(U)
        r = np.arange(B)
        S = np.matmul(self.E[refs], U.T, out=self._buffer("S", (B, n), np.float32))
        tu = self.texts[uid]
        # Exclusions (self, same text, same group) are few per row: found as sparse pairs.
        pairs = [matches(self.texts[refs], tu), matches(refs, uid)]
        if self.exclude_same_group:
            pairs.append(matches(self.groups[refs], self.groups[uid]))
        key = np.unique(np.concatenate([p[0] * n + p[1] for p in pairs]))
        xr, xc = key // n, key % n
        M = n - np.bincount(xr, minlength=B)  # pool per row
        Ss = self._buffer("Ss", (B, n), np.float32)
        np.copyto(Ss, S)
        Ss[xr, xc] = np.inf
        Ss.sort(axis=1)  # excluded sort last
        top = np.maximum(M - 1, 0)

        def quantile(q: float) -> np.ndarray:  # numpy's "linear" percentile of the valid part
            pos = q / 100 * top
            lo = np.floor(pos).astype(np.int64)
            hi = np.minimum(lo + 1, top)
            a, b = Ss[r, lo], Ss[r, hi]
            with np.errstate(invalid="ignore"):  # inf - inf in rows with an empty pool
                return np.where(hi > lo, a + (pos - lo) * (b - a), a).astype(np.float32)

        def sims_to(d: np.ndarray, out: np.ndarray) -> np.ndarray:  # similarities of U[d] to U
            return (
                np.take(gram, d, axis=0, out=out)
                if gram is not None
                else np.matmul(U[d], U.T, out=out)
            )

        blocked = self._buffer("blocked", (B, n), np.bool_)
        tmp = self._buffer("tmp", (B, n), np.bool_)
        score = self._buffer("score", (B, n), np.float32)
        row = self._buffer("row", (B, n), np.float32)
        seeds = {
            (band.name, j): np.array(
                [derive_seed(self.seed, NAME, int(i), band.name, j) for i in refs], dtype=np.uint64
            )
            for band in self.bands
            for j in range(self.mcqs_per_kind)
        }
        out: list[list[Choice]] = [[] for _ in range(B)]
        wanted = (refs >= keep.start) & (refs < keep.stop)
        for band in self.bands:
            t_lo, t_hi = quantile(band.lo), quantile(band.hi)
            np.less(S, t_lo[:, None], out=blocked)
            np.greater(S, t_hi[:, None], out=tmp)
            blocked |= tmp
            blocked[xr, xc] = True
            for j in range(self.mcqs_per_kind):
                count = n - np.count_nonzero(blocked, axis=1)
                ok = (count >= self.distractors) & (M >= 2)
                picks = [self._first_pick(blocked, count, seeds[band.name, j])]
                if self.distractors > 1 and not ok.any():
                    picks += [picks[0]] * (self.distractors - 1)  # every row is a reject
                elif self.distractors > 1:
                    sparse = index is not None and count.max() * 4 <= n
                    rest = (
                        self._greedy_sparse(picks[0], blocked, count, index, tu)
                        if sparse
                        else self._greedy_dense(picks[0], blocked, sims_to, score, row, tu)
                    )
                    ok &= rest[1]
                    picks += rest[0]
                P = np.stack(picks, axis=1)  # B×N positions in U
                if j + 1 < self.mcqs_per_kind:  # later MCQs avoid these
                    blocked[r[ok, None], P[ok]] = True
                sim = S[r[:, None], P]
                less, most = np.empty_like(P), np.empty_like(P)
                for k in range(P.shape[1]):
                    less[:, k] = np.count_nonzero(np.less(Ss, sim[:, k : k + 1], out=tmp), axis=1)
                    most[:, k] = (
                        np.count_nonzero(np.less_equal(Ss, sim[:, k : k + 1], out=tmp), axis=1) - 1
                    )
                # A similarity shared by several goals (texts the embedder cannot tell apart, such
                # as a case variant) holds every percentile from its first rank to its last; the
                # one written is the point of that range nearest the band it was drawn from.
                scale = 100 / np.maximum(top, 1)[:, None]
                pct = np.clip(band.lo, less * scale, np.maximum(most, less) * scale)
                if gram is not None:
                    pair = gram[P[:, :, None], P[:, None, :]]
                else:
                    V = U[P]
                    pair = np.einsum("bnd,bmd->bnm", V, V)
                w = wanted
                self._collect(
                    out,
                    refs[w],
                    band,
                    j,
                    ok[w],
                    count[w],
                    M[w],
                    t_lo[w],
                    t_hi[w],
                    uid[P[w]],
                    sim[w],
                    pct[w],
                    pair[w],
                    estimated=gram is not None,
                )
        return out[: int(wanted.sum())]

    def _greedy_dense(
        self,
        first: np.ndarray,
        blocked: np.ndarray,
        sims_to: Any,
        score: np.ndarray,
        row: np.ndarray,
        tu: np.ndarray,
    ) -> tuple[list[np.ndarray], np.ndarray]:
        """D2..DN over all of U: each next is the candidate whose largest similarity to the
        chosen is smallest (a running max over B×n; non-candidates score BIG)."""
        B = len(first)
        r = np.arange(B)
        picks, ok = [first], np.ones(B, dtype=bool)
        sims_to(first, score)
        np.multiply(blocked, BIG, out=row)
        score += row
        for step in range(1, self.distractors):
            if step > 1:
                np.maximum(score, sims_to(picks[-1], row), out=score)
            dr, dc = matches(tu[picks[-1]], tu)  # the last pick and any goal with its text
            score[dr, dc] = BIG
            nxt = score.argmin(1)
            ok &= score[r, nxt] < BIG / 2
            picks.append(nxt)
        return picks[1:], ok

    def _greedy_sparse(
        self, first: np.ndarray, blocked: np.ndarray, count: np.ndarray, index: Any, tu: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray]:
        """The same rule over each row's candidate list only (a narrow band in exact mode):
        FAISS computes the similarities of the last pick to just those goals."""
        B = len(first)
        r = np.arange(B)
        rows, cols = np.nonzero(~blocked)
        k = int(count.max())
        C = np.full((B, k), -1, dtype=np.int64)  # candidates, -1 padded
        C[rows, np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)] = cols
        pad = C < 0
        score = np.empty((B, k), dtype=np.float32)
        sims = np.empty((B, k), dtype=np.float32)
        picks, ok = [first], np.ones(B, dtype=bool)
        for step in range(1, self.distractors):
            q = np.ascontiguousarray(self.E[picks[-1]])
            index.compute_distance_subset(B, swig_ptr(q), k, swig_ptr(sims), swig_ptr(C))
            if step == 1:
                score[:] = sims
                score[pad] = BIG
            else:
                np.maximum(score, sims, out=score)
            score[tu[C] == tu[picks[-1]][:, None]] = BIG  # the last pick and its text
            at = score.argmin(1)
            ok &= score[r, at] < BIG / 2
            picks.append(C[r, at])
        return picks[1:], ok

    def _first_pick(self, blocked: np.ndarray, count: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """D1 uniform over each row's candidates: the first of DRAWS seeded uniform positions
        that is a candidate (rejection sampling), else the k-th candidate by a scan."""
        B, n = blocked.shape
        r = np.arange(B)
        draws = (
            mix64(seeds[:, None] * np.uint64(DRAWS) + np.arange(DRAWS, dtype=np.uint64))
            % np.uint64(n)
        ).astype(np.int64)
        hit = ~blocked[r[:, None], draws]
        first = hit.argmax(1)
        pick = draws[r, first]
        miss = np.flatnonzero(~hit[r, first] & (count > 0))
        for b in miss:  # a thin band: pick its k-th candidate, k uniform from the seed
            cand = np.flatnonzero(~blocked[b])
            pick[b] = cand[
                int(mix64(seeds[b : b + 1] ^ np.uint64(0x5EED))[0] % np.uint64(len(cand)))
            ]
        return pick

    def _collect(
        self,
        out: list[list[Choice]],
        refs: np.ndarray,
        band: Band,
        j: int,
        ok: np.ndarray,
        count: np.ndarray,
        M: np.ndarray,
        t_lo: np.ndarray,
        t_hi: np.ndarray,
        picks: np.ndarray,
        sim: np.ndarray,
        pct: np.ndarray,
        pair: np.ndarray,
        estimated: bool,
    ) -> None:
        where = " in the block's sample" if estimated else ""
        lists = (
            picks.tolist(),
            sim.tolist(),
            pct.tolist(),
            pair.tolist(),
            t_lo.tolist(),
            t_hi.tolist(),
            count.tolist(),
            M.tolist(),
            ok.tolist(),
        )
        for b, (pk, sm, pc, pr, lo, hi, c, m, good) in enumerate(zip(*lists, strict=True)):
            if good:
                out[b].append(
                    Choice(int(refs[b]), band, j, pk, sm, pc, pr, (lo, hi), c, m, estimated)
                )
                continue
            why = (
                f"pool of {m} goals after exclusions"
                if m < 2
                else f"band [{band.lo:g}, {band.hi:g}] has {c} candidates{where}"
                if c < self.distractors
                else f"band [{band.lo:g}, {band.hi:g}] has {c} candidates{where} but fewer than "
                f"{self.distractors} distinct texts"
            )
            out[b].append(
                Choice(
                    int(refs[b]),
                    band,
                    j,
                    None,
                    [],
                    [],
                    [],
                    (lo, hi),
                    c,
                    m,
                    estimated,
                    detail=f"{why}; {self.distractors} needed",
                )
            )
