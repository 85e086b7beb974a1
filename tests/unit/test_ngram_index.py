"""The leakage check's term index (generators/audit/ngram_index.py) against a brute-force count:
which owners a visible text contains, in which order, whatever share of the owners is sorted at
once."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gen.generators.audit import ngram_index
from gen.generators.audit.ngram_index import TermIndex
from gen.generators.audit.text import SORTED_SEARCH, Grams, positions

WORDS = "c picks puts the cup knife bowl on table shelf red blue with his hand then".split()
N = 3


def bank(seed: int, owners: int) -> tuple[Grams, list[list[tuple[str, str]]], list[str]]:
    """Privileged texts per item (a template phrase in many: keys the index drops as common) and
    visible texts, some holding an owner's text whole or in part."""
    rng = random.Random(seed)

    def text(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k))

    terms: list[list[tuple[str, str]]] = []
    for i in range(owners):
        one = [("truth", text(rng.randint(2, 12)))]
        if i % 2:
            one.append(("summary", "c believes that the " + text(rng.randint(3, 8))))
        if terms and i % 3 == 0:  # a clip's next item: its texts again (one under another field)
            one += [("future", t) for _, t in terms[-1]]
        if terms and i % 7 == 0:  # a text an item long before held
            one.append(("transition", rng.choice(rng.choice(terms))[1]))
        terms.append(one)
    flat = [t for one in terms for _, t in one]
    visible = [text(30) for _ in range(20)]
    visible += [rng.choice(flat) + " " + text(5) for _ in range(20)]
    visible += [" ".join(rng.choice(flat).split()[:-1]) for _ in range(10)]
    return Grams(), terms, visible


def brute(
    grams: Grams, terms: list[list[tuple[str, str]]], texts: list[str], containment: float
) -> list[list[tuple[int, int, int]]]:
    """Per text, (owner, keys of it the text has, its key count), owners met in a walk over the
    text's sorted keys, a key's owners in their order; a key more than ``max(20, owners // 100)``
    owners hold counts for none."""
    owners = [grams.keys(t, N).tolist() for one in terms for _, t in one]
    owners = [keys for keys in owners if keys]
    holders: dict[int, int] = {}
    for keys in owners:
        for k in set(keys):
            holders[k] = holders.get(k, 0) + 1
    common = max(20, len(owners) // 100)
    kept = [[k for k in keys if holders[k] <= common] for keys in owners]
    out = []
    for text in texts:
        tk = np.unique(grams.keys(text, N))
        at = {k: j for j, k in enumerate(tk.tolist())}
        found = []
        for o, keys in enumerate(kept):
            hit = [at[k] for k in keys if k in at]
            if keys and len(hit) / len(keys) >= containment:
                found.append((min(hit), o, len(hit), len(keys)))
        out.append([(o, h, s) for _, o, h, s in sorted(found)])
    return out


@pytest.mark.parametrize(("seed", "owners"), [(0, 60), (1, 400), (2, 1500), (3, 4000)])
@pytest.mark.parametrize(("chunks", "pairs", "recent"), [(1, 1 << 22, 4096), (3, 1, 2), (8, 40, 5)])
def test_the_owners_a_text_contains_are_the_brute_force_ones(
    seed: int, owners: int, chunks: int, pairs: int, recent: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owners sharing a text (one item's and the next's, or one's long before) are each found:
    whether the index keeps the text once (remembered) or again (forgotten, ``recent``)."""
    monkeypatch.setattr(ngram_index, "OWNER_CHUNKS", chunks)
    monkeypatch.setattr(ngram_index, "PAIRS", pairs)  # texts joined one or a few at a time
    monkeypatch.setattr(ngram_index, "RECENT", recent)
    grams, terms, visible = bank(seed, owners)
    index = TermIndex()
    for i, one in enumerate(terms):
        index.add(i, one, grams, N)
    index.build(0.5)
    texts = [np.unique(grams.keys(v, N)) for v in visible]
    got = index.contained(texts, 0.5)
    assert got == brute(grams, terms, visible, 0.5)
    assert sum(map(len, got)) >= 25  # the planted copies are found
    if recent > 100:  # a text met again while remembered is kept once
        assert len(index.size) < 0.8 * len(index.item)


def test_a_texts_owners_take_their_place_among_other_texts_owners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two texts a visible text first meets at the same key: their owners in the owners' order
    (item 0's, 1's, 2's), not one text's owners after the other's."""
    grams = Grams()
    x, y = "cup knife bowl on", "knife bowl on table"  # each shares "knife bowl on" and no more
    terms = [[("truth", x)], [("truth", y)], [("future", x)]]
    index = TermIndex()
    for i, one in enumerate(terms):
        index.add(i, one, grams, N)
    index.build(0.5)
    assert len(index.size) == 2  # item 2's text is item 0's
    got = index.contained([np.unique(grams.keys("red knife bowl on shelf", N))], 0.5)
    assert [o for o, *_ in got[0]] == [0, 1, 2]
    assert got == brute(grams, terms, ["red knife bowl on shelf"], 0.5)


def test_a_phrase_is_common_by_its_owners_not_by_its_texts() -> None:
    """2,522 owners of 47 texts: a phrase 22 owners hold is not the bank's template (more than
    max(20, 2522 // 100) = 25 hold none), though more than max(20, 47 // 100) texts would be."""
    grams = Grams()
    terms = [[("truth", f"clip {b} cup knife bowl")] for b in range(25) for _ in range(100)]
    terms += [[("summary", f"alpha beta gamma w{k}")] for k in range(22)]
    index = TermIndex()
    for i, one in enumerate(terms):
        index.add(i, one, grams, N)
    index.build(0.5)
    assert len(index.size) == 47
    got = index.contained([np.unique(grams.keys("alpha beta gamma", N))], 0.5)
    assert [o for o, *_ in got[0]] == list(range(2500, 2522))
    assert got == brute(grams, terms, ["alpha beta gamma"], 0.5)


def test_an_index_of_template_phrases_alone_contains_nothing() -> None:
    """Every key held by more owners than the cut (30 items, one text): no key is left to probe,
    and a text holding the phrase contains no owner."""
    grams = Grams()
    index = TermIndex()
    for i in range(30):
        index.add(i, [("summary", "c believes that the cup")], grams, N)
    index.build(0.5)
    assert len(index.parts[0][0]) == 0
    text = np.unique(grams.keys("c believes that the cup", N))
    assert index.contained([text, text[:0]], 0.5) == [[], []]


@pytest.mark.parametrize("needles", [7, SORTED_SEARCH - 1, SORTED_SEARCH, 5 * SORTED_SEARCH])
def test_positions_are_searchsorted_s_whether_the_needles_are_sorted_first_or_not(
    needles: int,
) -> None:
    """Needles repeated, below, inside and past the haystack: the place numpy's search gives, at
    most the last, in the needles' order."""
    rng = np.random.default_rng(needles)
    haystack = np.unique(rng.integers(100, 1 << 40, 50_000, dtype=np.uint64))
    x = np.concatenate(
        [
            rng.choice(haystack, needles // 2),
            rng.integers(0, 1 << 41, needles - needles // 2, dtype=np.uint64),
        ]
    )
    x[:3] = [0, haystack[-1], np.uint64(1 << 41)]
    rng.shuffle(x[3:])
    want = np.minimum(np.searchsorted(haystack, x), len(haystack) - 1)
    assert positions(haystack, x).tolist() == want.tolist()
