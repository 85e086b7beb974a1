"""``audit`` streams its input into a spill file and reads it back per check, in bounded memory
(bench/audit_scale.py measures it). What it finds must not change: a generated bank of 1,200 items
(``tests/audit_scale_bank.py``: every MCQ check has work) in both formats is audited with every
check and compared with what the in-memory audit found on it (``golden.json``: findings,
statistics, power lines). And the pieces that replaced in-memory ones: the spill store, the
streamed JSONL reader, the blocked nearest-neighbour search."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from audit_scale_bank import audit_both

from gen.errors import InputError
from gen.formats.mcq import iter_mcq_jsonl, read_mcq_jsonl
from gen.generators.audit.checks.duplicates import knn
from gen.generators.audit.items import Items
from gen.generators.audit.text import visible_fields
from gen.readers import iter_jsonl

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "audit_scale" / "golden.json"


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> dict:
    return audit_both(tmp_path_factory.mktemp("scale"))


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_streamed_audit_finds_what_the_in_memory_audit_found(audited, fmt: str) -> None:
    want, got = json.loads(GOLDEN.read_text())[fmt], audited[fmt]
    assert len(got["findings"]) == len(want["findings"])
    assert got["findings"] == want["findings"]  # the same findings, in the same order
    assert {c["key"]: c for c in got["checks"]} == {c["key"]: c for c in want["checks"]}
    assert (got["summary"], got["power"]) == (want["summary"], want["power"])


def test_the_golden_bank_gives_every_mcq_check_work() -> None:
    """A comparison of nothing proves nothing: the golden run found something in each check."""
    found = {f["check"] for f in json.loads(GOLDEN.read_text())["jsonl"]["findings"]}
    assert {
        "structure",
        "leakage",
        "length",
        "similar_options",
        "duplicates",
        "shortcut",
        "chronology",
        "text",
    } <= found


def test_items_spill_and_read_back(tmp_path: Path) -> None:
    items = read_mcq_jsonl(
        Path(__file__).resolve().parent.parent / "fixtures" / "audit" / "clean.jsonl"
    )
    store = Items(items)
    assert len(store) == len(items) and list(store) == items
    assert store[3] == items[3] and store[-1] == items[-1] and store[2:4] == items[2:4]
    assert [store.visible(i) for i in (5, 0, 5)] == [visible_fields(items[i]) for i in (5, 0, 5)]
    assert store.ids == [it.item_id for it in items]
    assert store.types == list(dict.fromkeys(it.question_type for it in items))
    assert store.answer.tolist() == [it.answer for it in items]
    sub = store.subset([7, 2, 9])
    assert [(i, it.item_id) for i, it in sub] == [
        (7, items[7].item_id),
        (2, items[2].item_id),
        (9, items[9].item_id),
    ]
    with pytest.raises(RuntimeError):
        store.append(items[0])


def test_a_spilled_item_is_what_model_construct_makes() -> None:
    """Items are built from their spilled records directly (``items._mcq``, five times faster):
    the same field values in the same order, the same fields set, no extra or private values,
    as pydantic's ``model_construct`` gives them, whatever the record holds."""
    from gen.generators.audit.items import FIELDS, _mcq
    from gen.schemas.mcq import MCQ

    items = read_mcq_jsonl(
        Path(__file__).resolve().parent.parent / "fixtures" / "audit" / "clean.jsonl"
    )
    rows = [(*(getattr(it, f) for f in FIELDS), visible_fields(it)) for it in items]
    rows.append(("x", "t", "", ["a", "b"], None, "", None, None, None, {}, {}, 0, []))
    for row in rows:
        want, got = MCQ.model_construct(**dict(zip(FIELDS, row, strict=False))), _mcq(row)
        assert list(got.__dict__.items()) == list(want.__dict__.items())
        assert got.model_fields_set == want.model_fields_set
        assert (got.__pydantic_extra__, got.__pydantic_private__) == (
            want.__pydantic_extra__,
            want.__pydantic_private__,
        )
        assert got.model_dump_json() == want.model_dump_json()
        assert got.answer_text == want.answer_text


def test_a_follower_reads_the_items_as_they_are_written(tmp_path: Path) -> None:
    """A check started before the bank is read (the text check's process) walks the items as the
    reader spills them: every item, in order, block by block; an input without items is empty."""
    import multiprocessing

    from gen.generators.audit.items import FEED_BLOCK, Follower

    items = read_mcq_jsonl(
        Path(__file__).resolve().parent.parent / "fixtures" / "audit" / "clean.jsonl"
    )
    many = [items[k % len(items)] for k in range(2 * FEED_BLOCK + 7)]
    mp = multiprocessing.get_context("fork")
    store, queue = Items(), mp.Queue()
    store.feed(queue)
    got = mp.Queue()

    def follow() -> None:
        follower = Follower(store, queue)
        got.put((bool(follower), [it.item_id for it in follower], bool(follower)))

    proc = mp.Process(target=follow)
    proc.start()  # forked before the first append, as the audit forks its text check
    for it in many:
        store.append(it)
    store.seal()
    first, ids, after = got.get(timeout=60)
    proc.join()
    assert (first, ids, after) == (True, [it.item_id for it in many], False)
    empty, q = Items(), mp.Queue()
    empty.feed(q)
    empty.seal()
    none = Follower(empty, q)
    assert not none and list(none) == []


def test_jsonl_is_read_line_by_line_and_a_bad_byte_is_still_named(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\r\n\r\n{"a": 2}\r{"a": 3}\n')
    assert list(iter_jsonl(path)) == [(1, {"a": 1}), (3, {"a": 2}), (4, {"a": 3})]
    path.write_bytes(
        b'{"a": 1}\n' * 5000 + b'{"a": "\xff"}\n'
    )  # the bad byte beyond the first read
    with pytest.raises(InputError, match=r"a.jsonl:5001: not UTF-8 text \(byte 0xff at column 8"):
        list(iter_jsonl(path))
    with pytest.raises(InputError, match=r"a.jsonl:1: not an MCQ record \(item_id"):
        next(iter_mcq_jsonl(path))
    fifo = (
        tmp_path / "fifo.jsonl"
    )  # streamed, a FIFO would block the reader forever: refused at open
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=rf"^{fifo}: is a FIFO, not a regular file"):
        next(iter_jsonl(fifo))
    with pytest.raises(InputError, match=rf"^{tmp_path}: is a folder"):
        next(iter_jsonl(tmp_path))


def test_blocked_knn_matches_one_block() -> None:
    """The base split into blocks (and the queries): the same neighbours as one search."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(500, 24)).astype(np.float32)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = rng.normal(size=(130, 24)).astype(np.float32)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    for base in (None, b):
        whole = knn(a, base, 5, block=10_000, base_block=10_000)
        parts = knn(a, base, 5, block=64, base_block=37)
        np.testing.assert_allclose(parts[0], whole[0], atol=1e-6)
        np.testing.assert_array_equal(parts[1], whole[1])


def test_one_process_finds_what_two_find(tmp_path: Path) -> None:
    """workers=1 (every check in this process) gives the golden findings too: the text check's
    own process and the classifiers' pools change the time, not the findings."""
    from audit_runs import run_audit
    from audit_scale_bank import GOLDEN_CHECKS, outcome, write

    paths = write(tmp_path / "bank")
    run_audit(
        tmp_path / "out",
        paths["jsonl"],
        checks=GOLDEN_CHECKS,
        against=str(paths["against"]),
        workers=1,
    )
    got, want = outcome(tmp_path / "out"), json.loads(GOLDEN.read_text())["jsonl"]
    assert got["findings"] == want["findings"]
    assert (got["summary"], got["power"]) == (want["summary"], want["power"])


def test_leakage_and_shortcut_run_aside_with_the_same_findings(tmp_path: Path) -> None:
    """With workers > 1 the leakage and shortcut checks run in processes of their own once the
    bank is read; the findings are one process's, in the checks' order."""
    from audit_runs import run_audit
    from audit_scale_bank import GOLDEN_CHECKS, outcome, write

    paths = write(tmp_path / "bank", n=600)
    got = {}
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        run_audit(out, paths["jsonl"], checks=GOLDEN_CHECKS, embeddings=False, workers=workers)
        got[workers] = outcome(out)
    assert got[1]["findings"] == got[2]["findings"]
    assert [c["key"] for c in got[2]["checks"]] == GOLDEN_CHECKS
    assert {f["check"] for f in got[2]["findings"]} >= {"leakage", "shortcut"}


def test_a_large_question_type_is_classified_on_a_sample(tmp_path: Path) -> None:
    """Above shortcut_max_items items of a type, the classifiers are cross-validated on a seeded
    sample of that many (their cost follows the items); below it, on every item."""
    from audit_runs import run_audit
    from audit_scale_bank import write

    paths = write(tmp_path / "bank", n=400)
    stats = {}
    for most in (100, 100, 10_000):
        _, findings, report = run_audit(
            tmp_path / f"out{len(stats)}",
            paths["jsonl"],
            checks=["shortcut", "context_options"],
            shortcut_max_items=most,
            workers=2,
        )
        checks = {c["key"]: c["stats"] for c in report["checks"]}
        assert report["embedding"]["texts"] > 0  # context_options' cosines
        stats[len(stats)] = (checks, findings)
    sampled, again, whole = (stats[k][0] for k in range(3))
    assert sampled == again  # seeded
    assert any("sampled_from" in r for r in sampled["shortcut"]["per_question_type"].values())
    for qtype, row in sampled["shortcut"]["per_question_type"].items():
        total = whole["shortcut"]["per_question_type"][qtype]["items"]
        assert "sampled_from" not in whole["shortcut"]["per_question_type"][qtype]
        if total > 100:
            assert (row["items"], row["sampled_from"]) == (100, total)
        row = sampled["context_options"]["per_question_type"][qtype]
        if row["items"] > 100:
            assert row["sampled"] == 100


def test_norm_of_ascii_text_is_the_unicode_rule() -> None:
    """``norm``'s ASCII path (a byte table) gives what its rule gives (NFKC, casefold, every run
    of ``[\\W_]`` one space): every ASCII character, and random ASCII texts."""
    import random
    import re
    import unicodedata

    from gen.generators.audit.text import norm

    def rule(text: str) -> str:
        return " ".join(
            re.sub(r"[\W_]+", " ", unicodedata.normalize("NFKC", text).casefold()).split()
        )

    rng = random.Random(3)
    texts = [chr(c) for c in range(128)] + [f"a{chr(c)}B" for c in range(128)]
    texts += [
        "".join(rng.choice([chr(c) for c in range(128)]) for _ in range(60)) for _ in range(500)
    ]
    texts += ["  C picks_up the CUP,\tthen   the lid!\n00m:05s | #C", "", "___", "Ünïcode ﬁne"]
    assert [norm(t) for t in texts] == [rule(t) for t in texts]


def test_sentence_words_of_ascii_text_are_the_split_rule() -> None:
    """``sentence_words``'s ASCII path (lowered once, read line by line) gives what its rule gives
    (split at the spaces after ``.!?;`` and at line breaks, then ``words`` of each piece, empty
    ones left out): random ASCII texts of words, marks, spaces and line breaks; a few by hand."""
    import random
    import re

    from gen.generators.audit.text import _words_in, sentence_words, words

    def rule(text: str) -> list[list[str]]:
        pieces = re.split(r"(?<=[.!?;])\s+|\n+", text)
        return [w for w in (words(p) for p in pieces) if w]

    rng = random.Random(5)
    alphabet = ["C", "cup's", "it's", "3.5", "'", ".", "!", "?", ";", ",", " ", "  ", "\n", "\t"]
    alphabet += ["\r", "\x1c", "\x0b", "a", "B", "_", "-", "ok.", "'s", "''", "x'y'z", "9", "|"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(40))) for _ in range(5000)]
    texts += ["x.\n  y", "a\n. b", "...  x", "The wearer's cups. C dries them!\n\n00m:05s | #C"]
    texts += ["Ｃ ouvre la fenêtre. Déjà vu’s", "I’m here. You’re there"]  # split first
    assert [sentence_words(t) for t in texts] == [rule(t) for t in texts]
    ascii_texts = [t for t in texts if t.isascii()]
    assert [words(t) for t in ascii_texts] == [_words_in(t.lower()) for t in ascii_texts]


def test_word_hashes_are_the_words_of_split_and_differ_per_word() -> None:
    """``word_hashes`` (numpy over a text's bytes) hashes exactly the words ``str.split`` gives,
    each word the same wherever it stands, and different words differently: random texts of
    words, every kind of space, NUL and non-ASCII letters; a short text (looked up word by word)
    and a long one (hashed in numpy) give a word the same hash."""
    import random

    from gen.generators.audit.text import Grams, word_hashes

    rng = random.Random(11)
    alphabet = ["a", "B", "cup", "cups", "\x00", "\x80", "é", "ﬁ", "ü", "0", " ", "  ", "\t"]
    alphabet += ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\u2003", "\u00a0", "\u0080"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(60))) for _ in range(3000)]
    texts += ["", " ", "a", " a b ", "a\x00 \x00a", "x" * 5000]
    hashed: dict[str, int] = {}
    for text in texts:
        got = word_hashes(text).tolist()
        assert len(got) == len(text.split())
        for w, h in zip(text.split(), got, strict=True):
            assert hashed.setdefault(w, h) == h
    assert len(set(hashed.values())) == len(hashed)
    grams = Grams()
    long = " ".join(hashed)  # over Grams.SHORT characters: hashed in numpy
    assert len(long) > Grams.SHORT
    for w in hashed:
        assert grams.ids(w).tolist() == [hashed[w]]  # one by one: looked up
    assert grams.ids(long).tolist() == list(hashed.values())


def test_a_texts_keys_do_not_depend_on_what_was_read_before() -> None:
    """Word n-gram keys are the same for a text whatever texts the same ``Grams`` read before:
    the duplicates check's context overlap once changed with whether the leakage check had read
    the bank first in the same process (the golden bank's against-bank median nearest neighbour
    was 0.62 alone and 0.625 after leakage)."""
    from gen.generators.audit.text import Grams

    texts = ["c picks up the cup from the table", "the cup is on the table now", "a b c d e"]
    fresh = [Grams().keys(t, 3).tolist() for t in texts]
    warm = Grams()
    warm.keys("table now the cup picks c up a e d b", 3)
    assert [warm.keys(t, 3).tolist() for t in reversed(texts)] == fresh[::-1]


@pytest.mark.parametrize("n", [1, 3, 5])
def test_keys_made_together_are_each_texts_own(n: int) -> None:
    """:meth:`Grams.keys_many` gives each text the keys :meth:`Grams.keys` gives it alone, whatever
    texts sit beside it in the batch: texts shorter than n words, empty ones, a word repeated
    across a text's end and the next one's start (whose n-grams run across two texts and must be
    dropped), a text repeated, every kind of space and non-ASCII letters; and :meth:`Grams.keys`
    gives a primed text the same keys."""
    import random

    from gen.generators.audit.text import Grams

    rng = random.Random(n)
    words = ["a", "cup", "cups", "the", "é", "ﬁ", "x" * 40, "0"]
    spaces = [" ", " ", " ", "  ", "\t", "\u2003"]
    texts = [
        "".join(rng.choice(words) + rng.choice(spaces) for _ in range(rng.randrange(9))).strip()
        for _ in range(400)
    ]
    texts += ["", "a", "a a a a a a", "a a a a a a", " a b ", "cup the cup the cup"]
    rng.shuffle(texts)
    alone = [Grams().keys(t, n).tolist() for t in texts]
    for size in (1, 2, 7, 64, len(texts)):
        together = [
            k.tolist()
            for s in range(0, len(texts), size)
            for k in Grams().keys_many(texts[s : s + size], n)
        ]
        assert together == alone
    assert Grams().keys_many([], n) == []
    grams = Grams()
    grams.prime([(texts[:50], n), (texts[50:60], n + 1)])
    assert [grams.keys(t, n).tolist() for t in texts[:50]] == alone[:50]
    assert [grams.keys(t, n + 1).tolist() for t in texts[50:60]] == [
        Grams().keys(t, n + 1).tolist() for t in texts[50:60]
    ]


def test_duplicates_finds_the_same_with_or_without_leakage_before_it(tmp_path: Path) -> None:
    """The duplicates check's findings and statistics are the same run alone and after the
    leakage check in one process (they differed while word ids were numbered as first read)."""
    from audit_runs import run_audit
    from audit_scale_bank import outcome, write

    paths = write(tmp_path / "bank")
    got = []
    for checks in (["duplicates"], ["leakage", "duplicates"]):
        out = tmp_path / f"out{len(checks)}"
        run_audit(out, paths["jsonl"], checks=checks, against=str(paths["against"]), workers=1)
        o = outcome(out)
        got.append(
            (
                [f for f in o["findings"] if f["check"] == "duplicates"],
                [c for c in o["checks"] if c["key"] == "duplicates"],
            )
        )
    assert got[0][0]
    assert got[0] == got[1]


@pytest.mark.parametrize("k", range(1, 11))
def test_the_classifier_row_max_and_sum_are_numpys(k: int) -> None:
    """The choice-only classifier's row max and sum (column by column) give numpy's numbers bit
    for bit, a masked option's -inf included, at every option count up to 10."""
    from gen.generators.audit.checks.shortcut import _row_max, _row_sum

    rng = np.random.default_rng(k)
    a = rng.normal(size=(5000, k)) * 10 ** rng.uniform(-3, 3, size=(5000, 1))
    a[:, 1:][rng.random((5000, k - 1)) < 0.2] = -np.inf  # an item's first option is real
    assert np.array_equal(_row_max(a), a.max(axis=1, keepdims=True))
    e = np.exp(a - a.max(axis=1, keepdims=True))
    assert np.array_equal(_row_sum(e), e.sum(axis=1, keepdims=True))


def test_the_classifier_word_products_are_the_float32_ones() -> None:
    """The fit's word products read a float64 copy of the 0/1 word features (made once), not the
    float32 matrix scipy casts on every product: the same numbers bit for bit, both ways."""
    from scipy.sparse import csr_matrix

    from gen.generators.audit.checks.shortcut import Features

    rng = np.random.default_rng(3)
    rows, cols = np.repeat(np.arange(20_000), 6), rng.integers(0, 300, 120_000)
    words = csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(20_000, 300))
    words.data[:] = 1  # repeated (row, column) pairs were summed
    F = Features(np.zeros((20_000, 1), dtype=np.float32), words, 5_000, 4)
    assert F.products is F.products and F.products.dtype == np.float64
    x, g = rng.normal(size=300), rng.normal(size=20_000)
    assert np.array_equal(F.products @ x, words @ x)
    assert np.array_equal(F.products.T @ g, words.T @ g)


@pytest.mark.parametrize("n", range(0, 12))
def test_the_classifier_mean_is_numpys(n: int) -> None:
    """The centrality's mean of a few Jaccard similarities gives numpy's number bit for bit at
    every length (left-to-right below 8; numpy's own from 8, where it adds pairwise)."""
    import warnings

    from gen.generators.audit.checks.shortcut import _mean

    rng = np.random.default_rng(n)
    for _ in range(3000):
        xs = (rng.normal(size=n) * 10 ** rng.uniform(-5, 5, size=n)).tolist()
        xs = [x if rng.random() > 0.2 else float(rng.choice([0.0, 1.0, 0.5, 1 / 3])) for x in xs]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing
            want = float(np.mean(xs))
            got = _mean(xs)
        assert got == want or (np.isnan(got) and np.isnan(want))


@pytest.mark.parametrize("padded", [False, True])
def test_the_classifier_fit_is_the_plain_expressions(padded: bool) -> None:
    """The fit's in-place loss (answers' flat positions, held-out rows and transposes made once)
    reaches the weights the plain expressions reach, bit for bit, with and without padded
    options."""
    from scipy.optimize import minimize
    from scipy.sparse import csr_matrix

    from gen.generators.audit.checks.shortcut import (
        Features,
        _fit_logit,
        _row_max,
        _row_sum,
        _standardised,
    )

    rng = np.random.default_rng(int(padded))
    n, k, v = 3000, 4, 120
    mask = np.ones((n, k), dtype=bool)
    if padded:
        mask[:, 2:] = rng.random((n, 2)) < 0.7
    dense = (rng.normal(size=(n * k, 5)) * [1, 10, 0.1, 3, 1]).astype(np.float32)
    words = csr_matrix((rng.random((n * k, v)) < 0.1).astype(np.float32))
    F = Features(dense, words, n, k)
    strength = rng.normal(size=v) * 2
    signal = (dense[:, 0] + words @ strength).reshape(n, k)
    y = np.where(mask, signal + rng.gumbel(size=(n, k)), -np.inf).argmax(axis=1)
    train = rng.random(n) < 0.8
    S = _standardised(F, mask, train)
    rows, yy = np.arange(n), np.where(train, y, 0)
    d = S.dense.shape[1]

    def plain(w: np.ndarray) -> tuple[float, np.ndarray]:
        scores = S.dense @ w[:d] + (S.absent @ w[d:] + F.products @ (S.delta * w[d:]))
        s = np.where(mask, scores.reshape(n, k), -np.inf)
        mx = _row_max(s)
        e = np.exp(s - mx)
        z = _row_sum(e)
        nll = -(s[rows, yy] - mx[:, 0] - np.log(z[:, 0]))[train].sum()
        g = e / z
        g[rows, yy] -= 1
        g[~train] = 0.0
        gr = g.reshape(n * k)
        grad = np.concatenate([S.dense.T @ gr, S.absent * gr.sum() + S.delta * (F.products.T @ gr)])
        return nll + 0.5 * w @ w, grad + w

    want = minimize(plain, np.zeros(d + v), jac=True, method="L-BFGS-B", options={"maxiter": 300})
    assert want.nit > 10, want.nit
    assert np.array_equal(_fit_logit(F, S, mask, y, 1.0, train), want.x)
