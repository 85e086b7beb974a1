"""Check 7: can a classifier that sees only the options pick the answer?"""

from __future__ import annotations

import contextlib
import math
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.registry import TELL_OPTIONS, CheckResult, check, judged, tell_finding
from gen.generators.audit.report import per_type_table, tells_table
from gen.generators.audit.stats import Tell, binom_greater, rounded
from gen.generators.audit.text import norm
from gen.schemas.mcq import MCQ
from gen.text.gates import final_mark

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData
NEGATION = {"not", "no", "never", "nothing", "none", "nobody", "cannot", "without", "nor", "t"}
ABSOLUTE = {"always", "never", "all", "every", "only", "completely", "entirely", "none", "must"}
HEDGE = {
    "may",
    "might",
    "could",
    "probably",
    "likely",
    "possibly",
    "perhaps",
    "some",
    "maybe",
    "usually",
}
DENSE = (
    "log_chars",
    "words",
    "length_z",
    "is_longest",
    "is_shortest",
    "length_rank",
    "question_overlap",
    "question_overlap_rel",
    "centrality",
    "centrality_rel",
    "commas",
    "ands",
    "negation",
    "absolute",
    "hedge",
    "digits",
    "template_start",
    "distinct_word_ratio",
    "ends_bare",
    "end_odd",
    "lower_start",
)
"""The dense features; ``word:<w>`` features follow. The last three are the surface that ``norm``
drops: no final mark (.?!), a final mark no other option of the item has, a lower-case first letter
(narrations end bare where a model's rewrites end with a period)."""


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def centrality(sets: list[set[str]]) -> list[float]:
    """Each option's mean Jaccard similarity of word sets to the other options."""
    k = len(sets)
    return [_mean([_jaccard(sets[a], sets[b]) for b in range(k) if b != a]) for a in range(k)]


def _mean(xs: list[float]) -> float:
    """``float(np.mean(xs))``: numpy adds fewer than 8 numbers left to right, as ``sum`` does, so
    the same number bit for bit without numpy's overhead (a fifth of the choice-only check's
    time outside its fits at 1M items); 8 or more (added pairwise) and none go to numpy."""
    return sum(xs) / len(xs) if 0 < len(xs) < 8 else float(np.mean(xs))


def central_credit(it: MCQ) -> float:
    """Picking the option that shares the most words with the other options (mean Jaccard of word
    sets), ties broken at random: 1/(options tied at the top) when the answer is one of them, else
    0 (exactly chance on average when the answer says nothing). Wrong options written from the
    answer borrow its words, and the answer becomes the hub of the set."""
    cen = centrality([set(norm(o).split()) for o in it.options])
    top = [j for j, c in enumerate(cen) if c >= max(cen) - 1e-12]
    return 1 / len(top) if it.answer in top else 0.0


class Features:
    """Per item and option, the classifier's features in bounded memory: the dense ones as a
    float32 array (rows ``r * k + j``: option j of item r), the word ones as a sparse 0/1 matrix
    (a million options by 300 words would be 1.2 GB dense). :func:`_standardised` gives what the
    fit reads: the values ``(F - mean) / std`` over the training options, in float32, as one
    dense array of every feature held them."""

    def __init__(self, dense: np.ndarray, words: Any, n: int, k: int) -> None:
        self.dense, self.words, self.n, self.k = dense, words, n, k
        self._products: Any = None

    @property
    def products(self) -> Any:
        """:attr:`words` as the fit's products read them, in float64 (made once): with float32
        data, scipy casts it to float64 in every product, a quarter of the choice-only check's
        time at 1M items. The same numbers (each is 0 or 1) and the same sums."""
        if self._products is None:
            self._products = self.words.astype(np.float64)
        return self._products

    def rows(self, items: np.ndarray) -> np.ndarray:
        """The option rows of some items (all k of each, padding included)."""
        return (items[:, None] * self.k + np.arange(self.k)).ravel()


def option_features(
    items: Sequence[MCQ], vocab: list[str], kmax: int | None = None
) -> tuple[Features, np.ndarray, list[str]]:
    """Per item and option, features of the options alone (and the question): length and its
    rank in the item, overlap with the question and with the other options, word patterns, and
    presence of the bank's frequent words. Returns (features, mask[n, k], names). ``kmax``: the
    most options of an item, when known (else the items are read once more for it)."""
    from scipy.sparse import csr_matrix

    if kmax is None:
        kmax = max(len(it.options) for it in items)
    n = len(items)
    names = [*DENSE, *(f"word:{w}" for w in vocab)]
    col = {w: j for j, w in enumerate(vocab)}
    dense = np.zeros((n * kmax, len(DENSE)), dtype=np.float32)
    mask = np.zeros((n, kmax), dtype=bool)
    word_rows, word_cols = array("q"), array("q")
    for r, it in enumerate(items):
        k = len(it.options)
        mask[r, :k] = True
        toks = [norm(o).split() for o in it.options]
        sets = [set(t) for t in toks]
        q = set(norm(it.question).split())
        chars = np.array([len(o.strip()) for o in it.options], dtype=np.float64)
        z = (chars - chars.mean()) / (chars.std() + 1e-9)
        rank = np.argsort(np.argsort(chars)) / max(1, k - 1)
        qov = np.array([_jaccard(s, q) for s in sets])
        cen = np.array(centrality(sets))
        firsts = Counter(t[0] for t in toks if t)
        marks = [final_mark(o) for o in it.options]
        mark_count = Counter(marks)
        for j in range(k):
            t, s = toks[j], sets[j]
            dense[r * kmax + j] = [
                math.log1p(chars[j]),
                len(t),
                z[j],
                chars[j] == chars.max() and (chars == chars.max()).sum() == 1,
                chars[j] == chars.min() and (chars == chars.min()).sum() == 1,
                rank[j],
                qov[j],
                qov[j] - qov.mean(),
                cen[j],
                cen[j] - cen.mean(),
                it.options[j].count(","),
                t.count("and"),
                bool(s & NEGATION),
                bool(s & ABSOLUTE),
                bool(s & HEDGE),
                any(c.isdigit() for c in it.options[j]),
                bool(t) and firsts[t[0]] > k / 2,
                len(s) / max(1, len(t)),
                marks[j] == "",
                k > 2 and mark_count[marks[j]] == 1,
                it.options[j].lstrip()[:1].islower(),
            ]
            for w in s:
                if w in col:
                    word_rows.append(r * kmax + j)
                    word_cols.append(col[w])
    words = csr_matrix(
        (np.ones(len(word_rows), dtype=np.float32), (np.asarray(word_rows), np.asarray(word_cols))),
        shape=(n * kmax, len(vocab)),
    )
    return Features(dense, words, n, kmax), mask, names


def option_vocab(items: Sequence[MCQ], limit: int = 300, min_items: int = 3) -> list[str]:
    """Words that occur in the options of at least ``min_items`` items but not in every option
    of most items (those cancel out within an item)."""
    df: Counter[str] = Counter()
    everywhere: Counter[str] = Counter()
    for it in items:
        sets = [set(norm(o).split()) for o in it.options]
        df.update(set().union(*sets))
        everywhere.update(set.intersection(*sets))
    words = [w for w, c in df.items() if c >= min_items and everywhere[w] < 0.9 * c]
    return sorted(words, key=lambda w: (-df[w], w))[:limit]


WORD_BLOCK = 32
"""Word features standardised at once (a dense block of the training options by this many words)."""


@dataclass
class Standardised:
    """The features standardised over some training items: the dense ones as float64 rows; each
    word feature by its two values, absent (``absent``) and present minus absent (``delta``)."""

    dense: np.ndarray
    absent: np.ndarray
    delta: np.ndarray


def _standardised(F: Features, mask: np.ndarray, train: np.ndarray) -> Standardised:
    """``(F - mean) / std`` over the training items' options, computed as numpy computes it on one
    float32 array of every feature (a column's mean and std do not depend on the other columns),
    std 0 taken as 1."""
    rows = F.rows(np.nonzero(train)[0])[mask[train].ravel()]
    at = F.dense[rows]
    mu, sd = at.mean(axis=0), at.std(axis=0)
    sd[sd < 1e-9] = 1.0
    dense = ((F.dense - mu) / sd).astype(np.float64)
    del at
    words = F.words[rows]
    v = words.shape[1]
    absent, present = np.zeros(v, dtype=np.float32), np.zeros(v, dtype=np.float32)
    for c in range(0, v, WORD_BLOCK):
        block = words[:, c : c + WORD_BLOCK].toarray()
        mu, sd = block.mean(axis=0), block.std(axis=0)
        sd[sd < 1e-9] = 1.0
        absent[c : c + WORD_BLOCK] = (np.float32(0) - mu) / sd
        present[c : c + WORD_BLOCK] = (np.float32(1) - mu) / sd
    a64 = absent.astype(np.float64)
    return Standardised(dense, a64, present.astype(np.float64) - a64)


def _scores(F: Features, S: Standardised, w: np.ndarray) -> np.ndarray:
    d = S.dense.shape[1]
    s = F.products @ (S.delta * w[d:])
    s += S.absent @ w[d:]
    return (S.dense @ w[:d] + s).reshape(F.n, F.k)


def _fit_logit(
    F: Features, S: Standardised, mask: np.ndarray, y: np.ndarray, l2: float, train: np.ndarray
) -> np.ndarray:
    """Conditional logit (softmax over an item's options) on the ``train`` items, L2-penalised, on
    the standardised features ``S``, by L-BFGS. The loss works in place on its arrays, with the
    answers' flat positions, the held-out rows and the transposes made once: the same numbers as
    the plain expressions (checked bit for bit in the tests), a tenth less of each evaluation."""
    from scipy.optimize import minimize

    d = S.dense.shape[1]
    at = np.arange(F.n) * F.k + np.where(train, y, 0)  # each item's answer in the flat scores
    held = ~train
    pad = None if mask.all() else ~mask
    dense_t, products_t = S.dense.T, F.products.T

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = _scores(F, S, w)
        if pad is not None:
            s[pad] = -np.inf
        mx = _row_max(s)
        e = s - mx
        np.exp(e, out=e)
        z = _row_sum(e)
        nll = -(s.ravel()[at] - mx[:, 0] - np.log(z[:, 0]))[train].sum()
        e /= z  # the gradient of the loss by the scores
        gr = e.reshape(F.n * F.k)
        gr[at] -= 1
        e[held] = 0.0
        grad = np.concatenate([dense_t @ gr, S.absent * gr.sum() + S.delta * (products_t @ gr)])
        return nll + 0.5 * l2 * w @ w, grad + l2 * w

    w0 = np.zeros(d + len(S.absent))
    return minimize(loss, w0, jac=True, method="L-BFGS-B", options={"maxiter": 300}).x


def _predict(F: Features, S: Standardised, mask: np.ndarray, w: np.ndarray) -> np.ndarray:
    s = np.where(mask, _scores(F, S, w), -np.inf)
    s -= _row_max(s)
    e = np.exp(s)
    return e / _row_sum(e)


def _row_max(a: np.ndarray) -> np.ndarray:
    """``a.max(axis=1, keepdims=True)`` of an (items, options) array, taken column by column:
    the same numbers, an order of magnitude faster for an item's few options (numpy reduces each
    short row on its own; it was a tenth of the choice-only check's time)."""
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        np.maximum(out, a[:, j], out=out)
    return out[:, None]


def _row_sum(a: np.ndarray) -> np.ndarray:
    """``a.sum(axis=1, keepdims=True)`` of an (items, options) array, column by column while
    numpy adds a row left to right (fewer than 8 options; it adds 8 or more pairwise): the same
    numbers, faster (:func:`_row_max`)."""
    if a.shape[1] >= 8:
        return a.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        out += a[:, j]
    return out[:, None]


def folds_for(items: Sequence[MCQ] | list[str], k: int, seed: int | tuple[int, int]) -> np.ndarray:
    """Fold of each item; items sharing a group (clip, video) share a fold. ``items``: the items,
    or each one's group (its id when it has none)."""
    keys = [x if isinstance(x, str) else x.group or x.item_id for x in items]
    groups = sorted(set(keys))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(groups))
    fold_of = {groups[g]: r % k for r, g in enumerate(order)}
    return np.array([fold_of[g] for g in keys])


def sampled(idx: np.ndarray, most: int, seed: int) -> np.ndarray:
    """``most`` of the items ``idx``, drawn without replacement (seeded), in their order: what a
    classifier of a very large bank is cross-validated on (its accuracy at a few tenths of a
    point; the fits cost in proportion to the items)."""
    rng = np.random.default_rng((seed, len(idx)))
    return np.sort(rng.choice(idx, most, replace=False))


def one_blas_thread() -> Any:
    """The classifier's products are small: BLAS threads only add contention (measured 40x
    slower with 2 threads on a loaded 2-core machine)."""
    try:
        from threadpoolctl import threadpool_limits
    except (
        ImportError
    ):  # pragma: no cover - it comes with scikit-learn, a sentence-transformers dependency
        return contextlib.nullcontext()
    return threadpool_limits(1)


def shortcut_cv(
    items: Sequence[MCQ],
    cfg: AuditConfig,
    seed: int,
    *,
    kmax: int | None = None,
    groups: list[str] | None = None,
    answers: np.ndarray | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Per item, the out-of-fold probability of the answer and the share of fold draws in which the
    classifier picks it (``correct``, averaged over ``shortcut_repeats`` draws of the folds), and
    the features the classifier fitted on every item leans on most. ``items`` is read twice (the
    word vocabulary, the features); ``kmax``, ``groups`` (group or id per item) and ``answers``,
    when the caller has them, save reading it more; ``workers``: processes for the fold fits."""
    with one_blas_thread():
        vocab = option_vocab(items)
        F, mask, names = option_features(items, vocab, kmax)
        if groups is None:
            groups = [it.group or it.item_id for it in items]
        y = np.array([it.answer for it in items]) if answers is None else answers
        folds_list = [
            folds_for(groups, cfg.shortcut_folds, (seed, r)) for r in range(cfg.shortcut_repeats)
        ]
        p_answer, right = cv_hits(
            F, mask, y, folds_list, cfg.shortcut_folds, cfg.shortcut_l2, workers
        )
        everyone = np.ones(len(y), dtype=bool)
        w = _fit_logit(F, _standardised(F, mask, everyone), mask, y, cfg.shortcut_l2, everyone)
        top = np.argsort(-np.abs(w))[:8]
        return {
            "p_answer": p_answer / cfg.shortcut_repeats,
            "correct": right / cfg.shortcut_repeats,
            "weights": [(names[j], rounded(w[j], 3)) for j in top if abs(w[j]) > 1e-6],
        }


def cv_hits(
    F: Features,
    mask: np.ndarray,
    y: np.ndarray,
    folds_list: list[np.ndarray],
    n_folds: int,
    l2: float,
    workers: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Summed over the fold draws: each item's out-of-fold probability of its answer ``y``, and how
    often the classifier picks it (the fits in ``workers`` forked processes; the same sums)."""
    p_answer = np.zeros(len(y))
    right = np.zeros(len(y))
    tests = [folds == f for folds in folds_list for f in range(n_folds)]
    tests = [t for t in tests if t.any() and not t.all()]
    global _CV
    _CV = (F, mask, y, l2)
    F.products  # noqa: B018 - made before the fork: the workers share it
    try:
        if workers > 1 and len(tests) > 1:
            import multiprocessing

            with multiprocessing.get_context("fork").Pool(workers) as pool:  # F shared, not sent
                fitted = pool.imap(_held_out, tests)
                for test, (pa, hit) in zip(tests, fitted, strict=True):  # summed in draw order
                    p_answer[test] += pa
                    right[test] += hit
        else:
            for test in tests:
                pa, hit = _held_out(test)
                p_answer[test] += pa
                right[test] += hit
    finally:
        _CV = None
    return p_answer, right


_CV: tuple[Features, np.ndarray, np.ndarray, float] | None = None
"""What :func:`cv_hits` fits on, for :func:`_held_out` in this process or a forked worker."""


def _held_out(test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fit on the items outside ``test``; the test items' probability of their answer and whether
    the classifier picks it."""
    assert _CV is not None
    F, mask, y, l2 = _CV
    train = ~test
    S = _standardised(F, mask, train)
    w = _fit_logit(F, S, mask, y, l2, train)
    P = _predict(F, S, mask, w)[test]
    return P[np.arange(len(P)), y[test]], P.argmax(axis=1) == y[test]


def _markdown(r: CheckResult) -> list[str]:
    return per_type_table(r) + tells_table(r)


@check(
    "shortcut",
    order=7,
    title="Choice-only shortcut classifier",
    finds="a classifier that sees only the options beats chance; the answer is the option most "
    "like the others",
    uses=(
        "shortcut_folds",
        "shortcut_repeats",
        "shortcut_l2",
        "shortcut_min_items",
        "shortcut_max_items",
        "shortcut_confidence",
        "min_items_per_test",
        *TELL_OPTIONS,
    ),
    markdown=_markdown,
)
def shortcut(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """A conditional-logit classifier that sees only the options (length and its rank, overlap with
    the question and the other options, negations, hedges, absolutes, frequent words, the final
    mark and case), scored by repeated k-fold cross-validation against chance."""
    key = "shortcut"
    res = CheckResult(key)
    groups = data.by_type()
    if not groups:
        return CheckResult(key, "skipped", "no multiple-choice items with a known answer")
    table = {}
    tells: list[tuple[Tell, list[str], dict[str, Any], np.ndarray]] = []
    central: list[tuple[Tell, list[str]]] = []
    for qtype, xs in groups.items():
        idx = xs.indices
        items = data.items.view(idx)  # read when iterated: never all in memory
        ids = xs.ids
        p0 = float(np.mean(1 / data.items.n_options[idx]))
        credit = [central_credit(it) for it in items]
        hub = [i for i, c in zip(ids, credit, strict=True) if c == 1]  # the answer alone on top
        hits = int(
            round(sum(credit))
        )  # an expected count: the binomial test on it errs on the safe side
        if len(items) >= cfg.min_items_per_test:
            central.append(
                (
                    Tell(
                        {"question_type": qtype, "tell": "pick the most central"},
                        hits,
                        len(items),
                        p0,
                        binom_greater(hits, len(items), p0),
                    ),
                    hub,
                )
            )
        if len(items) < cfg.shortcut_min_items:
            table[qtype] = {
                "items": len(items),
                "note": f"classifier not run: fewer than {cfg.shortcut_min_items} items",
                "pick_most_central_accuracy": rounded(hits / len(items), 3),
            }
            continue
        total = len(idx)
        if total > cfg.shortcut_max_items:  # the tell's estimate, at a bounded cost
            idx = sampled(idx, cfg.shortcut_max_items, data.seed)
            items, ids = data.items.view(idx), [data.items.ids[j] for j in idx.tolist()]
        out = shortcut_cv(
            items,
            cfg,
            data.seed,
            kmax=int(data.items.n_options[idx].max()),
            groups=[
                g or i
                for g, i in zip((data.items.groups[j] for j in idx.tolist()), ids, strict=True)
            ],
            answers=data.items.answer[idx].astype(np.int64),
            workers=data.workers,
        )
        n = len(items)
        # Expected hits over the fold draws. Cross-validated hits are dependent, so the binomial
        # test
        # on their sum is valid only as measured: under the null on EgoToM's option sets
        # (bench/shortcut_null.py) the sum of 5 draws varies 0.77-0.92 times a binomial count and is
        # below p = 0.05 in 3.5 % of 1,200 tests (the binomial's own discrete size); one draw varies
        # 1.26-1.49 times and gives 7.2 % (hence shortcut_repeats >= 3: 0.91-1.01 times, 3.3 %)
        k = int(round(float(out["correct"].sum())))
        order = np.argsort(-out["p_answer"], kind="stable")
        easiest = [{"item": ids[r], "p_answer": rounded(out["p_answer"][r], 3)} for r in order[:10]]
        table[qtype] = {
            "items": n,
            "folds": cfg.shortcut_folds,
            "repeats": cfg.shortcut_repeats,
            "accuracy": rounded(k / n, 3),
            "pick_most_central_accuracy": rounded(hits / n, 3),
            "chance": rounded(p0, 3),
            "top_features": out["weights"],
            "easiest": easiest,
        }
        if total > n:
            table[qtype]["sampled_from"] = total
        res.series[qtype] = out["p_answer"].tolist()
        tells.append(
            (
                Tell(
                    {"question_type": qtype, "tell": "choice-only classifier"},
                    k,
                    n,
                    p0,
                    binom_greater(k, n, p0),
                ),
                ids,
                out,
                order,
            )
        )
    judged([t for t, *_ in tells] + [t for t, _ in central], cfg)
    for t, ids, out, order in tells:
        if t.severity is None:
            continue
        easy = [
            ids[r]
            for r in order
            if out["correct"][r] > 0.5 and out["p_answer"][r] >= cfg.shortcut_confidence
        ]
        res.findings.append(
            tell_finding(
                key,
                "choice_only_shortcut",
                t,
                f"{t.labels['question_type']} (listed: the items it solves with p "
                f">= {cfg.shortcut_confidence}): "
                f"a classifier that sees only the options ({cfg.shortcut_folds}-fold "
                "cross-validation, "
                f"{cfg.shortcut_repeats} draws) is right in",
                items=easy,
                fields=["options"],
                numbers={
                    "question_type": t.labels["question_type"],
                    "top_features": out["weights"],
                },
            )
        )
    for t, hub in central:
        if t.severity is not None:
            res.findings.append(
                tell_finding(
                    key,
                    "central_answer_tell",
                    t,
                    f"{t.labels['question_type']} (listed: the items whose answer alone is the "
                    "most central): the "
                    "option sharing the most words with the other options (ties broken at random) "
                    "is the answer in",
                    items=hub,
                    fields=["options"],
                    numbers={"question_type": t.labels["question_type"]},
                )
            )
    res.stats = {
        "per_question_type": table,
        "tells": [t.row() for t, *_ in tells] + [t.row() for t, _ in central],
    }
    return res
