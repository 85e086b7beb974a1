"""The leakage check's term index (generators/audit/ngram_index.py) against a brute-force count:
which owners a visible text contains, in which order, whatever share of the owners is sorted at
once."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gen.generators.audit import ngram_index
from gen.generators.audit.ngram_index import TermIndex
from gen.generators.audit.text import Grams

WORDS = "c picks puts the cup knife bowl on table shelf red blue with his hand then".split()
N = 3


def bank(seed: int, owners: int) -> tuple[Grams, list[list[tuple[str, str]]], list[str]]:
    """Privileged texts per item (a template phrase in many: keys the index drops as common) and
    visible texts, some holding an owner's text whole or in part."""
    rng = random.Random(seed)

    def text(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k))

    terms = []
    for i in range(owners):
        one = [("truth", text(rng.randint(2, 12)))]
        if i % 2:
            one.append(("summary", "c believes that the " + text(rng.randint(3, 8))))
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


@pytest.mark.parametrize(("seed", "owners"), [(0, 60), (1, 400), (2, 1500)])
@pytest.mark.parametrize(("chunks", "pairs"), [(1, 1 << 22), (3, 1), (8, 40)])
def test_the_owners_a_text_contains_are_the_brute_force_ones(
    seed: int, owners: int, chunks: int, pairs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ngram_index, "OWNER_CHUNKS", chunks)
    monkeypatch.setattr(ngram_index, "PAIRS", pairs)  # texts joined one or a few at a time
    grams, terms, visible = bank(seed, owners)
    index = TermIndex()
    for i, one in enumerate(terms):
        index.add(i, one, grams, N)
    index.build(0.5)
    texts = [np.unique(grams.keys(v, N)) for v in visible]
    got = index.contained(texts, 0.5)
    assert got == brute(grams, terms, visible, 0.5)
    assert sum(map(len, got)) >= 25  # the planted copies are found
