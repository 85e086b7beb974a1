"""The language identifier the text gates read: py3langid's model, loaded once per process on
first use from inside its wheel (nothing is downloaded), one text at a time (:func:`identify`) or
a batch's texts cleared at once (:func:`warm_language`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import cache
from typing import Any

LANGUAGES = (
    "en",
    "es",
    "fr",
    "de",
    "it",
    "pt",
    "nl",
    "sv",
    "da",
    "no",
    "fi",
    "pl",
    "cs",
    "ro",
    "tr",
    "id",
    "vi",
    "ja",
    "zh",
    "ko",
    "ru",
    "ar",
    "hi",
    "sw",
    "zu",
    "yo",
    "ca",
    "hu",
    "el",
    "uk",
)
"""Languages the identifier chooses among: the run's language must be one; the rest are those
a model drifts into (the persona nationalities' languages and other large ones)."""


@cache
def _identifier() -> Any:
    from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_modelpath(MODEL_DIR / MODEL_FILE, norm_probs=True)
    ident.set_languages(list(LANGUAGES))
    return ident


_ID_LOCK = threading.Lock()


def identify(text: str) -> tuple[str, float]:
    """The most likely language of ``text`` among :data:`LANGUAGES` and its probability."""
    with _ID_LOCK:
        lang, prob = _identifier().classify(text)
    return str(lang), float(prob)


_CLEAR: set[tuple[str, str, float]] = set()
_CLEAR_MAX = 1 << 16
LANGID_BATCH_BYTES = 1024
"""Longest text (UTF-8 bytes) :func:`warm_language` reads; a longer one is identified alone."""


def warm_language(texts: Iterable[str], language: str, min_prob: float) -> None:
    """Find, for many texts at once, those that no language but ``language`` can claim with
    ``min_prob``: the language gate then passes them without the identifier (:func:`is_clear`).

    The identifier walks a text's bytes through its automaton one at a time in Python, then sums
    its features' log-probabilities per language: ~40 µs a text, 8 % of a 1M-item audit. Here all
    texts walk the automaton together, a byte position at a time, and the sums are one sparse
    product in float64. The identifier sums in float32; how far its sums can be from these is
    bounded (each sum's rounding error is at most its terms' count times the unit roundoff times
    the sum of their magnitudes), and a text is cleared only when every other language stays
    under ``min_prob`` even at that bound. The others (most likely in another language, or near
    the threshold) are identified as before, so the gate's verdicts do not change."""
    todo = [t for t in dict.fromkeys(texts) if (t, language, min_prob) not in _CLEAR]
    if not todo:
        return
    if len(_CLEAR) + len(todo) > _CLEAR_MAX:
        _CLEAR.clear()
    encode = _identifier()._encode
    clear = _others_below([encode(t) for t in todo], language, min_prob)
    _CLEAR.update((t, language, min_prob) for t, ok in zip(todo, clear, strict=True) if ok)


def is_clear(text: str, language: str, min_prob: float) -> bool:
    """:func:`warm_language` found ``text`` in no other language than ``language`` at
    ``min_prob``."""
    return (text, language, min_prob) in _CLEAR


@cache
def langid_arrays() -> tuple[Any, ...]:
    """py3langid's automaton and its per-language feature log-probabilities as numpy arrays (for
    :func:`warm_language`): views of py3langid's own automaton (39 MB, not copied) and a float64
    copy of its table (24 MB), made once per process; made before a fork, they are shared."""
    import numpy as np

    ident = _identifier()
    moves = np.frombuffer(ident.tk_nextmove, dtype=f"u{ident.tk_nextmove.itemsize}")
    rows = np.asarray(ident.tk_row, dtype=np.int64) << 8
    emits = np.asarray(ident.tk_output, dtype=np.int64)
    ptc = np.ascontiguousarray(ident.nb_ptc, dtype=np.float64)  # (scipy copies any other)
    pc = np.asarray(ident.nb_pc, dtype=np.float64)
    labels = list(ident.nb_classes)
    # log-probabilities are never positive: their magnitudes are the sums negated, else kept apart
    magnitudes = None if (ptc <= 0).all() else np.abs(ptc)
    return moves, rows, emits, ptc, magnitudes, pc, labels


def _others_below(encoded: list[bytes], language: str, min_prob: float) -> list[bool]:
    """Per text (as the identifier encodes it), whether every language but ``language`` has a
    probability below ``min_prob`` in the identifier's float32 arithmetic, proven from float64."""
    import numpy as np
    from scipy.sparse import csr_matrix

    moves, rows, emits, ptc, magnitudes, pc, labels = langid_arrays()
    clear = np.zeros(len(encoded), dtype=bool)
    lens = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    use = np.flatnonzero((lens > 0) & (lens <= LANGID_BATCH_BYTES))
    if not len(use):
        return clear.tolist()
    use = use[np.argsort(-lens[use], kind="stable")]  # longest first: texts still walking lead
    n, width = len(use), int(lens[use[0]])
    lengths = lens[use]
    grid = np.zeros((n, width), dtype=np.uint8)
    grid[np.arange(width) < lengths[:, None]] = np.frombuffer(
        b"".join(encoded[i] for i in use), dtype=np.uint8
    )
    grid = np.ascontiguousarray(grid.T)  # a byte position's bytes side by side
    walking = np.searchsorted(-lengths, -np.arange(width), side="left")  # texts longer than j
    state = np.zeros(n, dtype=np.int64)
    hit_rows, hit_feats = [], []
    for j in range(width):  # the identifier's walk: move on the byte, then read the state's output
        k = int(walking[j])
        now = moves[rows[state[:k]] + grid[j, :k]]
        state[:k] = now
        feats = emits[now]
        at = (feats >= 0).nonzero()[0]
        hit_rows.append(at)
        hit_feats.append(feats[at])
    features = ptc.shape[0]
    keys, counts = np.unique(
        np.concatenate(hit_rows) * features + np.concatenate(hit_feats), return_counts=True
    )
    text_of, feat_of = keys // features, keys % features
    weights = csr_matrix((np.log1p(counts), (text_of, feat_of)), shape=(n, features))
    scores = weights @ ptc + pc
    magnitude = (pc - scores if magnitudes is None else weights @ magnitudes) + np.abs(pc)
    terms = np.bincount(text_of, minlength=n).astype(np.float64)
    unit = 2.0**-24  # float32's unit roundoff
    scale = 1.0 / np.sqrt(lengths)
    logits = scores * scale[:, None]
    # the float32 sums' error (terms, log1p and the product's roundings, adding the prior), scaled
    # as the identifier scales them; its own scaling and subtraction round once or twice more
    slack = (terms[:, None] + 5) * unit * 1.01 * magnitude * scale[:, None]
    bound = slack.max(axis=1) + 4 * unit * np.abs(logits).max(axis=1) + 1e-9
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    others = np.zeros(n)
    for label in set(labels) - {language}:  # a label's columns are summed (py3langid's aliases)
        cols = [c for c, x in enumerate(labels) if x == label]
        others = np.maximum(others, probs[:, cols].sum(axis=1))
    # logits within ``bound`` of these move a probability by a factor of at most exp(2 bound);
    # the softmax's own float32 rounding is far below the 1e-5 kept for it
    ok = (others * np.exp(2 * bound) * (1 + 1e-5) < min_prob) & (terms > 0)
    clear[use] = ok
    return clear.tolist()
