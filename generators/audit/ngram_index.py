"""The leakage check's indexes (check 2, :mod:`generators.audit.checks.leakage`): every privileged
text's word n-gram keys with its owner, probed with a visible text for the owners it contains, and
every visible field as a digest of its text."""

from __future__ import annotations

import hashlib
from array import array

import numpy as np

from gen.generators.audit.text import Grams, positions

PARTS = 16
"""The term index is kept in this many parts by the keys' top bits: each part is sorted on its
own, so sorting needs memory for one part, not for all."""
_SHIFT = np.uint64(64 - 4)
PAIRS = 1 << 22
""":meth:`TermIndex.contained` joins texts with the terms they share probed keys with this many
(text, term) pairs at a time (a few arrays of 8 bytes a pair)."""
OWNER_CHUNKS = 16
""":meth:`TermIndex.build` sorts the (key, term) pairs of a sixteenth of the terms at a time:
sorting them all at once held four copies of every pair (an eighth at a time was the build's
peak at 1M items, 0.9 GB of pairs and their sort)."""
RECENT = 4096
"""Privileged texts :meth:`TermIndex.add` remembers, so that a text the items just before held is
one term of the index, whoever else holds it: a clip's items follow each other and share its gold
narration (the 100k bench bank's 6.9M keys fall to 3.9M; a text met again later is one more term,
which costs memory, not findings)."""


class TermIndex:
    """Every privileged text's word n-gram keys with its owners (item, source field), held as
    typed buffers (a million tom items have ~60M keys; one small array per text would cost more in
    headers than in keys), then sorted part by part. The index is of terms (``tid``): a text, with
    every owner that held it while :data:`RECENT` remembered it."""

    def __init__(self) -> None:
        self.terms = 0
        self.keys = [array("Q") for _ in range(PARTS)]
        self.tids = [array("i") for _ in range(PARTS)]
        self.item = array("i")  # per owner
        self.src = array("i")
        self.term = array("i")  # per owner, its term
        self.size = array("i")  # per term, its key count
        self._recent: dict[str, int] = {}  # text -> its term (-1: no keys)
        self.paths: dict[str, int] = {}
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.sizes = np.zeros(0, dtype=np.int64)
        self._staged: list[np.ndarray] = []
        self._staged_tids: list[np.ndarray] = []
        self._staged_n = 0

    def add(self, i: int, terms: list[tuple[str, str]], grams: Grams, n: int) -> None:
        self.terms += len(terms)
        for src, t in terms:
            tid = self._recent.get(t)
            if tid is None:
                keys = grams.keys(t, n)
                tid = len(self.size) if len(keys) else -1
                if len(self._recent) >= RECENT:
                    self._recent.clear()
                self._recent[t] = tid
                if len(keys):
                    self.size.append(len(keys))
                    self._staged.append(keys)
                    self._staged_tids.append(np.full(len(keys), tid, dtype=np.int32))
                    self._staged_n += len(keys)
            if tid < 0:
                continue
            self.item.append(i)
            self.src.append(self.paths.setdefault(src, len(self.paths)))
            self.term.append(tid)
        if self._staged_n >= 1 << 16:
            self._flush()

    def _flush(self) -> None:
        """The staged keys into their parts (in order: a key's terms stay in tid order)."""
        if not self._staged:
            return
        keys, tids = np.concatenate(self._staged), np.concatenate(self._staged_tids)
        self._staged, self._staged_tids, self._staged_n = [], [], 0
        part = (keys >> _SHIFT).astype(np.int64)
        order = np.argsort(part, kind="stable")
        cut = np.searchsorted(part[order], np.arange(PARTS + 1))
        keys, tids = keys[order], tids[order]
        for p in range(PARTS):
            self.keys[p].frombytes(keys[cut[p] : cut[p + 1]].tobytes())
            self.tids[p].frombytes(tids[cut[p] : cut[p + 1]].tobytes())

    def build(self, containment: float) -> None:
        """Sort each part by key (a key's terms stay in their order) and drop the bank's template
        phrases: keys shared by many privileged texts ("c believes that the") are not content,
        they neither count for nor against containment (a key counts each owner of its terms).
        Then the index :meth:`contained` probes: of each term only its rarest keys, one more than
        it may miss and still reach ``containment`` (a term that reaches it shares one of them with
        the text: the others are too few), and each term's kept keys, rarest first: past the
        probed ones, :meth:`contained` reads them one at a time, only while the term can still
        reach ``containment``. A key kept by up to a hundredth of the owners would otherwise make
        a probe's work grow with the bank."""
        self._flush()
        sizes = np.array(self.size, dtype=np.int64)
        term = np.frombuffer(self.term, dtype=np.int32)
        owners = np.bincount(term, minlength=len(sizes))  # per term, how many owners hold it
        self.owners_of = np.argsort(term, kind="stable").astype(np.int32)  # by term, in order
        self.owners_start = np.concatenate(([0], np.cumsum(owners)))
        common = max(20, len(term) // 100)
        # per part: its kept keys, how many terms and owners hold each, and the terms key by key
        # (a pair's key and counts are read through its key's place, not held per pair)
        kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        for p in range(PARTS):
            keys = np.frombuffer(self.keys[p], dtype=np.uint64)
            order = np.argsort(keys, kind="stable")
            tids = np.frombuffer(self.tids[p], dtype=np.int32)[order]
            keys = keys[order]
            del order
            self.keys[p], self.tids[p] = array("Q"), array("i")
            ukeys, counts = np.unique(keys, return_counts=True)
            del keys
            held = (
                np.add.reduceat(owners[tids], np.cumsum(counts) - counts) if len(tids) else counts
            )
            drop = held > common
            if drop.any():
                gone = np.repeat(drop, counts)
                sizes -= np.bincount(tids[gone], minlength=len(sizes))
                tids = tids[~gone]
                ukeys, counts, held = ukeys[~drop], counts[~drop], held[~drop]
            kept.append((ukeys, counts.astype(np.int32), held.astype(np.int32), tids))
        self.sizes = sizes
        start = np.concatenate(
            ([0], np.cumsum(sum(np.bincount(t, minlength=len(sizes)) for *_, t in kept)))
        )
        probe_lim = sizes - least_hits(sizes, containment) + 1
        pkeys, ptids = [], []
        owned = np.empty(int(start[-1]), dtype=np.uint64)  # filled in place, chunk by chunk
        step = max(1, -(-len(sizes) // OWNER_CHUNKS))
        for a in range(0, len(sizes), step):  # the pairs of terms a..a+step, sorted at once
            parts = []
            for ukeys, counts, held, tids in kept:
                at = np.nonzero((tids >= a) & (tids < a + step))[0]
                place = np.repeat(np.arange(len(ukeys), dtype=np.int32), counts)[at]
                parts.append((ukeys[place], held[place], tids[at]))
                del at, place
            key, freq, tid = (np.concatenate(xs) for xs in zip(*parts, strict=True))
            del parts
            by_term = np.lexsort((key, freq, tid))  # per term, its rarest keys first
            key, tid = key[by_term], tid[by_term]
            del by_term, freq
            rank = np.arange(len(tid)) - (start[tid] - start[a])
            probe = (sizes[tid] > 0) & (rank < probe_lim[tid])
            pkeys.append(key[probe])
            ptids.append(tid[probe])
            del rank, probe
            owned[start[a] : start[min(a + step, len(sizes))]] = key  # its keys, rarest first
        del kept, key, tid
        pkey, ptid = np.concatenate(pkeys), np.concatenate(ptids)
        del pkeys, ptids
        # by key, a key's terms in their order: the pairs come in term order, so a stable sort
        # by key alone keeps it (a lexsort by both held twice the memory at the build's peak)
        ptid = ptid[np.argsort(pkey, kind="stable")]
        pkey.sort()
        new = np.ones(len(pkey), dtype=bool)
        new[1:] = pkey[1:] != pkey[:-1]
        first = np.append(np.flatnonzero(new), len(pkey))  # where each distinct key's terms start
        del new
        self.parts = [(pkey[first[:-1]], first, ptid)]
        del pkey
        self.owned, self.owned_start = owned, start
        self.unprobed = start[:-1] + probe_lim  # where each term's keys past its probed ones start

    def contained(
        self, texts: list[np.ndarray], containment: float
    ) -> list[list[tuple[int, int, int]]]:
        """Per array of ``texts`` (each sorted, distinct keys): (owner, keys of it the owner has,
        the owner's key count) for every owner with at least ``containment`` of its keys among
        them, in the order a walk over the array's keys meets them (by its first key among them,
        then a key's owners in their order). The texts are looked up together, a group of them at
        a time (:data:`PAIRS`): the terms that share a probed key with one (:meth:`build`), then
        each one's other keys, then the owners of the terms it contains."""
        out: list[list[tuple[int, int, int]]] = [[] for _ in texts]
        sizes = [len(k) for k in texts]
        ukeys, starts, _ = self.parts[0]
        if not sum(sizes) or not len(ukeys):
            return out
        keys = np.concatenate(texts)
        text = np.repeat(np.arange(len(texts)), sizes)
        at = positions(ukeys, keys)
        sel = np.nonzero(ukeys[at] == keys)[0]
        at = at[sel]
        runs = starts[at + 1] - starts[at]
        text = text[sel]  # the text of each matched key
        # texts in groups of up to PAIRS (text, term) pairs (a text with more is a group alone)
        upto = np.cumsum(np.bincount(text, weights=runs, minlength=len(texts)))
        first_of = np.concatenate(([0], np.cumsum(sizes)))
        t0 = 0
        while t0 < len(texts):
            t1 = max(
                t0 + 1, int(np.searchsorted(upto, (upto[t0 - 1] if t0 else 0) + PAIRS, "right"))
            )
            k0, k1 = np.searchsorted(text, [t0, t1])
            self._contained_in(
                keys, first_of, text[k0:k1], at[k0:k1], runs[k0:k1], containment, out
            )
            t0 = t1
        return out

    def _contained_in(
        self,
        keys: np.ndarray,
        first_of: np.ndarray,
        text: np.ndarray,
        at: np.ndarray,
        runs: np.ndarray,
        containment: float,
        out: list[list[tuple[int, int, int]]],
    ) -> None:
        """:meth:`contained` for the texts of ``text``: their matched probe keys (``at`` in the
        probe index, ``runs`` terms each)."""
        _, starts, tids = self.parts[0]
        if not len(at):
            return
        each, rows = _spans(starts[at], runs)
        terms = len(self.sizes)
        pair = text[each].astype(np.int64) * terms + tids[rows]
        del each, rows
        # (text, term) candidates, by text, with the probed keys they share: a term that shares
        # h of them missed the others, and can miss h - 1 of its keys past them and still reach
        # containment (it was probed on all it may miss, and one more)
        pair, hits = np.unique(pair, return_counts=True)
        cand_text, cand = pair // terms, pair % terms
        del pair
        first = self.unprobed[cand]
        left = self.owned_start[cand + 1] - first
        missed = np.zeros(len(cand), dtype=np.int64)
        alive = np.arange(len(cand))
        j = 0
        while len(alive):  # each one's next unprobed key, rarest first, till it misses too many
            alive = alive[left[alive] > j]
            theirs = self.owned[first[alive] + j]
            miss = ~self._in_texts(keys, first_of, cand_text[alive], theirs)[0]
            missed[alive[miss]] += 1
            alive = alive[missed[alive] < hits[alive]]
            j += 1
        ok = np.nonzero(missed < hits)[0]
        if not len(ok):
            return
        # the terms left hold enough: where the text first meets them (all their keys)
        cand_text, cand = cand_text[ok], cand[ok]
        count = hits[ok] + (left[ok] - missed[ok])
        size = self.sizes[cand]
        lo = self.owned_start[cand]
        row, rows = _spans(lo, self.owned_start[cand + 1] - lo)
        hit, pos = self._in_texts(keys, first_of, cand_text[row], self.owned[rows])
        meet = np.full(len(cand), np.iinfo(np.int64).max)
        np.minimum.at(meet, row[hit], pos[hit])
        keep = np.nonzero(count / size >= containment)[0]
        # each term found, as its owners: in the walk's order, a key's owners in theirs
        lo = self.owners_start[cand[keep]]
        row, rows = _spans(lo, self.owners_start[cand[keep] + 1] - lo)
        row = keep[row]
        owner = self.owners_of[rows]
        walk = np.lexsort((owner, meet[row], cand_text[row]))
        found = row[walk]
        for r, o, k, s in zip(
            cand_text[found].tolist(),
            owner[walk].tolist(),
            count[found].tolist(),
            size[found].tolist(),
            strict=True,
        ):
            out[r].append((o, k, s))

    @staticmethod
    def _in_texts(
        keys: np.ndarray, first_of: np.ndarray, text: np.ndarray, needles: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per needle, whether its text's keys (``keys[first_of[t]:first_of[t + 1]]``, sorted)
        hold it, and where. ``text`` is sorted: each text's needles are searched in its own keys
        (a text's few hundred keys stay in cache; one search of all texts' keys did not)."""
        hit = np.zeros(len(needles), dtype=bool)
        pos = np.zeros(len(needles), dtype=np.int64)
        if not len(needles):
            return hit, pos
        cut = np.flatnonzero(text[1:] != text[:-1]) + 1
        for a, b in zip(
            np.concatenate(([0], cut)).tolist(), np.append(cut, len(text)).tolist(), strict=True
        ):
            r = int(text[a])
            tk = keys[first_of[r] : first_of[r + 1]]
            at = positions(tk, needles[a:b])
            hit[a:b] = tk[at] == needles[a:b]
            pos[a:b] = at
        return hit, pos


def _spans(lo: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``lo[i] .. lo[i] + n[i] - 1`` of every span, flat, each with its span ``i``."""
    span = np.repeat(np.arange(len(lo)), n)
    return span, lo[span] + (np.arange(len(span)) - np.repeat(np.cumsum(n) - n, n))


def least_hits(sizes: np.ndarray, containment: float) -> np.ndarray:
    """Per term of ``sizes`` keys, the fewest of them a text must hold for ``k / size >=
    containment`` as :meth:`TermIndex.contained` computes it (at least 1)."""
    s = np.maximum(sizes, 1)
    k = np.maximum(np.ceil(containment * s).astype(np.int64), 1)
    for _ in range(3):  # the float ceiling may be one off either way
        k = np.where((k > 1) & ((k - 1) / s >= containment), k - 1, k)
        k = np.where(k / s < containment, k + 1, k)
    return k


class VisibleTexts:
    """Every (item, visible field) as a 16-byte digest of its normalised text: which items share a
    text, and which texts an item shows, without keeping the texts."""

    def __init__(self) -> None:
        self.digests = bytearray()
        self.start = array("q", [0])
        self.path = array("i")
        self.names: dict[str, int] = {}

    def add(self, visible: list[tuple[str, str]]) -> None:
        for path, v in visible:
            self.digests += hashlib.blake2b(v.encode(), digest_size=16).digest()
            self.path.append(self.names.setdefault(path, len(self.names)))
        self.start.append(len(self.path))

    def groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per field, the id of its text; the fields in order of text id; where each id's fields
        start."""
        d = np.frombuffer(bytes(self.digests), dtype="V16")
        _, first, text_of = np.unique(d, return_index=True, return_inverse=True)
        rank = np.argsort(np.argsort(first, kind="stable"))  # text ids in order of first appearance
        text_of = rank[text_of.ravel()]
        order = np.argsort(text_of, kind="stable")
        return text_of, order, np.concatenate(([0], np.cumsum(np.bincount(text_of))))
