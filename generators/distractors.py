"""Percentile-band greedy distractor sampling (WAGIBench §3.1): MCQs from a goal bank.

Every goal of the bank is a reference. Goals are verbalised (one template per action type,
``prompts/distractors/<type>.jinja``), embedded (L2-normalised), and for each reference the cosine
similarity to every other goal of its *pool* is computed — the bank minus the reference and exact
duplicates of its text: the paper's "entire set of other reference goals", so a goal of the same
script (a fine-grained neighbour: "take care of plant" / "take care of monstera", appendix E.2) may
be a similar distractor (``exclude_same_group=true`` drops the reference's group too). *Similar*
distractors come from the 95th–99th percentile band of that pool, *dissimilar* ones from the
0th–80th. Within a band C the choice is greedy for diversity: D1 is uniform over C, each next
Di is the candidate of C whose largest similarity to the already chosen is smallest.

Two modes compute the same thing at different costs:

* ``exact`` (banks up to ``exact_max`` goals): full similarity rows, exact percentiles,
  time O(N²·d), memory O(N·d) (rows are processed in blocks). The greedy steps of a narrow
  band (the similar one) ask a FAISS inner-product index (``IndexFlatIP``) for the similarities
  of the last pick to just that row's candidates; a wide band uses one matrix product per step.
* ``scalable`` (larger banks): references are cut into blocks of ``block_size``; each block
  takes one uniform sample of ``sample_size`` goals (consecutive slices of one seeded
  permutation of the bank, so the samples cover it), the block's similarities are one
  matrix product against it, percentile thresholds are estimated from it (minus each
  reference's exclusions), band candidates are the sample's members inside the estimated band,
  and the greedy rule runs exactly within them (over the sample's Gram matrix). Time
  O(N·sample_size·d), memory O(N·d + block_size·sample_size). The percentiles written are
  estimates; their error is that of a sample quantile, sqrt(q(1-q)/sample_size).

Each reference yields a list: ``mcqs_per_kind`` MCQs per band, or a reject for a band with
fewer than N candidates (never a smaller option set). Percentiles need every similarity of a
row, so rows are BLAS matrix products (what ``faiss.pairwise_distances`` does for inner
products); a FAISS ``search`` with k = all returns them sorted but measured 5–7× slower here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from gen.errors import ConfigError, InputError, MissingInputError
from gen.goals import GoalBank, goal_dict, load_goals, verbalise
from gen.manifest import JsonListWriter
from gen.paths import EXAMPLES
from gen.readers import load_run_records, validated
from gen.registry import generator
from gen.runner import CommonConfig, Plan, RunContext, derive_seed
from gen.schemas import Reject
from gen.schemas.digital import DigitalBundle
from gen.schemas.distractors import Distractor, DistractorMCQ, GoalRow
from gen.vectors import ip_index, swig_ptr

NAME = "distractors"
BANK_FILES = ("goals.jsonl", "goals.parquet")


class DistractorsConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """References: the first n goals of the bank (null: every goal). Distractors come from the whole
    bank."""
    distractors: int = Field(3, ge=1, le=25)
    """Distractors per MCQ (N); options = N + 1."""
    bands: dict[str, tuple[float, float]] = {"similar": (95.0, 99.0), "dissimilar": (0.0, 80.0)}
    """Percentile bands [low, high] of the reference's similarities, one MCQ kind each."""
    mcqs_per_kind: int = Field(1, ge=1, le=20)
    """MCQs per reference and band; later ones avoid distractors the earlier ones used."""
    exclude_same_group: bool = False
    """Drop goals of the reference's own group (its script's other goals, paraphrases among them)
    before percentiles. Off: the paper samples from every other reference goal (§3.1)."""
    mode: Literal["auto", "exact", "scalable"] = "auto"
    """auto: exact up to exact_max goals, scalable beyond."""
    exact_max: int = Field(20_000, ge=2)
    """Largest bank handled in exact mode when mode=auto."""
    sample_size: int = Field(2048, ge=64)
    """Scalable mode: goals sampled per block of references (threshold estimate and candidates)."""
    block_size: int = Field(2048, ge=1)
    """Scalable mode: references sharing one sample (results depend on it, not on sharding)."""
    question: str = "Which digital action does the user most likely want to take now?"
    """The question every MCQ asks."""
    wagibench: bool = True
    """Also write wagibench_mcq_<band>.json in WAGIBench's MCQ layout."""
    digital: str | None = None
    """A digital run made from this goal bank (``digital goals=…``): the WAGIBench MCQ rows of a
    goal with a bundle carry the bundle's cue (``x.cues``), and its MCQ records show the bundle's
    key-only state (``visible.digital_state``, what WAGIBench's digital_key_only prompt shows);
    goals without one keep none (counted)."""

    @field_validator("bands")
    @classmethod
    def _bands(cls, v: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        if not v:
            raise ValueError("give at least one band")
        for name, (lo, hi) in v.items():
            if not name.isidentifier():
                raise ValueError(f"band name {name!r} must be a plain word (it names files)")
            if not 0 <= lo < hi <= 100:
                raise ValueError(
                    f"bands.{name} must be a pair low, high with 0 <= low < high <= 100, "
                    f"got {lo:g}, {hi:g}"
                )
        return v

    def bank_path(self) -> Path:
        """The goal bank file: input= (a .jsonl/.parquet file or a folder holding goals.*),
        or the shipped examples/goals.jsonl."""
        if self.input is None:
            return EXAMPLES / "goals.jsonl"
        path = Path(self.input).expanduser()
        if path.is_dir():
            for name in BANK_FILES:
                if (path / name).is_file():
                    return path / name
            raise MissingInputError(f"input: {path} holds no {' or '.join(BANK_FILES)}")
        if not path.exists():
            raise MissingInputError(f"input: no such file or folder: {path}")
        return path


def plan(cfg: DistractorsConfig) -> Plan:
    """One index per reference goal: the first ``n`` goals of the bank, or all of them."""
    bank = load_goals(cfg.bank_path())
    total = len(bank.rows)
    if total == 0:
        raise InputError(f"input: {bank.path} holds no goals")
    if cfg.n is not None and cfg.n > total:
        raise ConfigError(f"n={cfg.n} references but the bank has {total} goals")
    if cfg.digital is not None:
        bank.cues, bank.states = bundle_cues(
            Path(cfg.digital).expanduser(), {r.goal_id for r in bank.rows}
        )
    return Plan(total if cfg.n is None else cfg.n, bank)


def bundle_cues(
    path: Path, goal_ids: set[str]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """goal_id -> WAGIBench's cue list of the goal's bundle in a digital run (``digital goals=``),
    and goal_id -> its key-only rendering; a bundle of a goal this bank does not hold means the run
    was made from another bank."""
    from gen.wagibench import render_bundle, wagibench_cues

    records, file = load_run_records(path, "digital")
    cues: dict[str, list[dict[str, Any]]] = {}
    states: dict[str, str] = {}
    for lineno, r in enumerate(records, 1):
        goal = r.get("goal") if isinstance(r, dict) else None
        if not isinstance(goal, dict) or not isinstance(goal.get("goal_id"), str):
            raise InputError(
                f"{file}:{lineno}: goal: not a goal-conditioned bundle (make them with digital "
                "goals=…)"
            )
        if goal["goal_id"] not in goal_ids:
            raise InputError(
                f"{file}:{lineno}: goal.goal_id: {goal['goal_id']!r} is not in the goal bank "
                "(the digital run was made from another bank)"
            )
        cue = r.get("cue")
        if cue is not None and not (
            isinstance(cue, dict)
            and isinstance(cue.get("app"), str)
            and isinstance(cue.get("cue"), str)
        ):
            raise InputError(
                f"{file}:{lineno}: cue: expected null or an object with app and cue texts"
            )
        cues[goal["goal_id"]] = wagibench_cues(r)
        if cue is not None:  # the state a model is shown: the bundle must be one, field by field
            states[goal["goal_id"]] = render_bundle(
                validated(DigitalBundle, r, f"{file}:{lineno}"), key_only=True
            )
    return cues, states


# --------------------------------------------------------------------------- the sampler


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


# --------------------------------------------------------------------------- records


def build_mcq(
    ctx: RunContext, cfg: DistractorsConfig, rows: list[GoalRow], texts: list[str], c: Choice
) -> DistractorMCQ | Reject:
    i, kind = c.ref, c.band.name
    rid = ctx.record_id(i, kind, c.j)
    if c.picks is None:
        return Reject(
            record_id=rid, index=i, stage=kind, reason="too_few_candidates", detail=c.detail
        )
    ref = rows[i]
    members = [i, *c.picks]
    order = list(range(len(members)))
    random.Random(ctx.seed(i, kind, c.j, "shuffle")).shuffle(order)
    position = {m: p for p, m in enumerate(order)}  # member -> option index
    n = len(c.picks)
    distractors = [
        Distractor(
            goal_id=rows[g].goal_id,
            group=rows[g].group,
            text=texts[g],
            option=position[k + 1],
            similarity=round(c.similarity[k], 6),
            percentile=round(c.percentile[k], 4),
            similarity_to_others=[round(c.pairwise[k][m], 6) for m in range(n) if m != k],
        )
        for k, g in enumerate(c.picks)
    ]
    return DistractorMCQ(
        item_id=rid,
        question_type=kind,
        question=cfg.question,
        options=[texts[members[m]] for m in order],
        answer=position[0],
        origins=["reference" if m == 0 else "distractor" for m in order],
        group=ref.group,
        visible={},
        privileged={
            "reference_goal_id": ref.goal_id,
            "structured_goal": ref.goal.model_dump() if ref.goal else None,
        },
        reference_id=ref.goal_id,
        mcq_index=c.j,
        band=(c.band.lo, c.band.hi),
        band_similarity=(round(c.thresholds[0], 6), round(c.thresholds[1], 6)),
        band_candidates=c.candidates,
        pool_size=c.pool,
        percentile_mode="estimated" if c.estimated else "exact",
        distractors=distractors,
    )


def wagibench_row(
    mcq: DistractorMCQ,
    rows: list[GoalRow],
    index: dict[str, int],
    cues: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """One MCQ in the layout WAGIBench's MCQ evaluation reads; ``x.cues`` holds every cue the
    inputs have: the goal row's own (any modality) and its digital bundle's."""
    ref = rows[index[mcq.reference_id]]
    by_option = {d.option: rows[index[d.goal_id]] for d in mcq.distractors} | {mcq.answer: ref}
    window = (
        ref.context_window.model_dump() if ref.context_window else {"start_s": None, "end_s": None}
    )
    tag = ref.client_tag or ref.goal_id
    own = [c.model_dump() for c in ref.cues or []]
    bundle = [c for c in (cues or {}).get(ref.goal_id, []) if c not in own]
    return {
        "x": {
            "client_tag": tag,
            "context_window": window,
            "cues": own + bundle,
            "mcq_set": [goal_dict(by_option[k]) for k in range(len(mcq.options))],
        },
        "y": mcq.answer,
        "meta": {
            "client_tag": tag,
            "scenario": {"shortname": ref.group},
            "structured_goal": goal_dict(ref),
            "item_id": mcq.item_id,
            "question_type": mcq.question_type,
        },
    }


# --------------------------------------------------------------------------- the generator


def embed_bank(ctx: RunContext, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unit embeddings per goal (through the Embedder, once per distinct text) and text codes."""
    codes: dict[str, int] = {}
    text_codes = np.array([codes.setdefault(t, len(codes)) for t in texts], dtype=np.int64)
    vecs = np.asarray(ctx.embedder.encode(list(codes)), dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1)
    if not np.allclose(norms, 1, atol=1e-3):
        vecs /= np.maximum(norms, 1e-12)[:, None]  # another backend may not normalise
    return vecs[text_codes], text_codes


def summary(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values)
    return {
        "min": int(a.min()),
        "median": float(np.median(a)),
        "mean": round(float(a.mean()), 2),
        "max": int(a.max()),
    }


@generator(NAME, config=DistractorsConfig, records=DistractorMCQ, kind="mcq", plan=plan)
def distractors(cfg: DistractorsConfig, ctx: RunContext) -> Iterator[list[DistractorMCQ | Reject]]:
    """Distractor MCQs from a goal bank: percentile bands of embedding similarity, greedy
    diversity."""
    t0 = time.perf_counter()
    bank: GoalBank = ctx.plan.data
    path = bank.path
    ctx.record_input(path)
    rows = bank.rows
    texts = [verbalise(row, ctx.prompts) for row in rows]
    t1 = time.perf_counter()
    E, text_codes = embed_bank(ctx, texts)
    t2 = time.perf_counter()
    # One option to a reader: texts equal up to case and spacing are excluded and kept apart as one.
    alike: dict[str, int] = {}
    same_text = np.array(
        [alike.setdefault(" ".join(t.casefold().split()), len(alike)) for t in texts],
        dtype=np.int64,
    )
    group_codes: dict[str, int] = {}
    groups = np.array(
        [group_codes.setdefault(row.group, len(group_codes)) for row in rows], dtype=np.int64
    )
    scalable = cfg.mode == "scalable" or (cfg.mode == "auto" and len(rows) > cfg.exact_max)
    sampler = Sampler(
        E,
        groups,
        same_text,
        [Band(k, lo, hi) for k, (lo, hi) in cfg.bands.items()],
        distractors=cfg.distractors,
        mcqs_per_kind=cfg.mcqs_per_kind,
        exclude_same_group=cfg.exclude_same_group,
        scalable=scalable,
        sample_size=cfg.sample_size,
        block_size=cfg.block_size,
        seed=cfg.seed,
    )
    index = {row.goal_id: k for k, row in enumerate(rows)}
    writers = (
        {b: JsonListWriter(ctx.out_dir / f"wagibench_mcq_{b}.json") for b in cfg.bands}
        if cfg.wagibench
        else {}
    )
    candidates: dict[str, list[int]] = {b: [] for b in cfg.bands}
    uses = np.zeros(len(rows), dtype=np.int64)
    for choices in sampler.run(ctx.indices()):
        outcome: list[DistractorMCQ | Reject] = []
        for c in choices:
            item = build_mcq(ctx, cfg, rows, texts, c)
            if (
                isinstance(item, DistractorMCQ)
                and bank.states
                and rows[c.ref].goal_id in bank.states
            ):
                item.visible = {"digital_state": bank.states[rows[c.ref].goal_id]}
            candidates[c.band.name].append(c.candidates)
            if isinstance(item, DistractorMCQ):
                uses[c.picks] += 1
                if writers:
                    writers[c.band.name].write(wagibench_row(item, rows, index, bank.cues))
            outcome.append(item)
        yield outcome
    for w in writers.values():
        w.close()
    ctx.extra[NAME] = {
        "bank": {
            "path": str(path),
            "goals": len(rows),
            "groups": len(group_codes),
            "distinct_texts": int(text_codes.max()) + 1,
            "dim": int(E.shape[1]),
        },
        "mode": "scalable" if sampler.scalable else "exact",
        "percentiles": "estimated" if sampler.scalable else "exact",
        "sample_size": cfg.sample_size if sampler.scalable else None,
        "band_candidates": {b: summary(v) for b, v in candidates.items()},
        "distractor_uses": {
            "goals_used": int((uses > 0).sum()),
            "max_uses": int(uses.max(initial=0)),
        },
        **(
            {
                "digital": {
                    "run": cfg.digital,
                    "references_with_bundle": sum(
                        rows[i].goal_id in bank.cues for i in ctx.indices()
                    ),
                    "references_without_bundle": sum(
                        rows[i].goal_id not in bank.cues for i in ctx.indices()
                    ),
                }
            }
            if bank.cues is not None
            else {}
        ),
        "seconds": {
            "load_and_verbalise": round(t1 - t0, 3),
            "embed": round(t2 - t1, 3),
            "sample_and_write": round(time.perf_counter() - t2, 3),
        },
    }
