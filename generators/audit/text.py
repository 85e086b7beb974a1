"""Text helpers shared by the checks: normalisation, word n-gram keys, an item's visible text."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from operator import itemgetter

import numpy as np

from gen.schemas.mcq import LETTERS, MCQ

_NON_WORD = re.compile(r"[\W_]+")


def norm(text: str) -> str:
    """Casefolded, NFKC, every run of non-letters/digits (underscores too) one space."""
    if text.isascii():  # the same, in C: NFKC leaves ASCII as it is, casefold lowers it
        return b" ".join(text.encode().translate(_ASCII_NORM).split()).decode()
    return " ".join(_NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


_ASCII_NORM = bytes(
    c + 32 if 65 <= c <= 90 else c if 97 <= c <= 122 or 48 <= c <= 57 else 32 for c in range(256)
)
"""An ASCII character as :func:`norm` makes it: a letter lowered, a digit kept, anything else (the
characters ``[\\W_]`` matches) a space."""


def has_phrase(term: str, text: str) -> bool:
    """``term`` occurs in ``text`` on word boundaries (both already :func:`norm`-ed)."""
    return f" {term} " in f" {text} "


def letter(i: int | None) -> str:
    return "-" if i is None else LETTERS[i]


def visible_fields(it: MCQ) -> list[tuple[str, str]]:
    """An item's visible fields (and its question, when no visible field holds it), normalised;
    empty ones dropped."""
    fields = [(p, norm(v)) for p, v in it.visible.items()]
    if it.question.strip() and not any(v == it.question for v in it.visible.values()):
        fields.append(("question", norm(it.question)))
    return [(p, v) for p, v in fields if v]


class Grams:
    """Word n-grams of normalised texts as arrays of 64-bit keys: each word hashed from its bytes
    (:func:`word_hashes`), the words' hashes combined by a polynomial, vectorised. A key depends
    on its n words alone, not on what else was read or in which order (word ids numbered as first
    read made the duplicates check's context overlap depend on whether the leakage check ran
    before it), so every check and every process gives a text the same keys. The last texts'
    word hashes and keys are kept (a context repeats among the items of its clip)."""

    P = np.uint64(0x9E3779B97F4A7C15)
    CACHED = 8192
    """Texts whose word hashes are kept (the most recent)..."""
    IDS_KEPT = 1 << 19
    """...and at most this many of their words: 8192 contexts of 700 words held 80 MB once the
    short texts were no longer read one by one (:meth:`prime`) and stopped clearing the cache."""
    KEYS_CACHED = 64
    SHORT = 200
    """Longest text (in characters) whose words are looked up one by one."""
    WORDS_KEPT = 1 << 20
    """Words whose hashes are kept for the short texts' lookups (cleared when full)."""

    def __init__(self) -> None:
        self._words: dict[str, int] = {}
        self._ids: dict[str, np.ndarray] = {}
        self._ids_held = 0
        self._keys: dict[tuple[str, int], np.ndarray] = {}
        self._primed: dict[tuple[str, int], np.ndarray] = {}

    def ids(self, text: str) -> np.ndarray:
        """A 64-bit hash of each word of ``text`` (its ``split()``), in order, as
        :func:`word_hashes` gives it: a short text's words looked up in a table of the words met
        (a numpy pass costs more than a few dictionary lookups), a long one's hashed in numpy.
        Kept for the last texts."""
        got = self._ids.get(text)
        if got is None:
            if len(text) > self.SHORT:
                got = word_hashes(text)
            else:
                got = np.array(self._hashes(text.split()), dtype=np.uint64)
            if len(self._ids) >= self.CACHED or self._ids_held > self.IDS_KEPT:
                self._ids.clear()
                self._ids_held = 0
            self._ids[text] = got
            self._ids_held += len(got)
        return got

    def keys(self, text: str, n: int) -> np.ndarray:
        """The distinct n-gram keys of ``text`` (sorted); empty when it has fewer than n words.
        The last texts' keys are kept (a clip's context is read by each of its items): the array
        is shared, not to be changed."""
        got = self._primed.get((text, n))
        if got is None:
            got = self._keys.get((text, n))
        if got is None:
            got = self._keys_of(text, n)
            if len(self._keys) >= self.KEYS_CACHED:
                self._keys.clear()
            self._keys[(text, n)] = got
        return got

    def prime(self, batches: Iterable[tuple[Sequence[str], int]]) -> None:
        """Compute the keys of each ``(texts, n)`` batch together (:meth:`keys_many`) for
        :meth:`keys` to give until the next call, which drops them: a check reading items in
        blocks primes a block's short texts (its terms, its options) before it reads them."""
        self._primed = {
            (t, n): k
            for texts, n in batches
            for t, k in zip(texts, self.keys_many(texts, n), strict=True)
        }

    def keys_many(self, texts: Sequence[str], n: int) -> list[np.ndarray]:
        """:meth:`keys` of each of ``texts`` (views of one array: not to be changed), computed
        together: the words of all hashed at once, every n-gram's key made at once, those that run
        across two texts dropped, then sorted by text and key and made distinct in one pass. About
        3 µs a short text (an option, a gold line) in blocks of a few hundred, against 10 µs one at
        a time, where a numpy call's own overhead is most of the cost."""
        k = len(texts)
        counts = np.fromiter(map(len, map(str.split, texts)), dtype=np.intp, count=k)
        h = self._ngrams(word_hashes(" ".join(texts)), n)
        m = len(h)
        if not m:
            return [np.zeros(0, dtype=np.uint64) for _ in texts]
        text_of = np.repeat(np.arange(k), counts)[:m]
        inside = np.arange(n, m + n) <= np.cumsum(counts)[text_of]  # ends in its first word's text
        h, text_of = h[inside], text_of[inside]
        order = np.argsort(h)
        order = order[np.argsort(text_of[order], kind="stable")]
        h, text_of = h[order], text_of[order]
        new = np.empty(len(h), dtype=bool)
        new[:1] = True
        np.not_equal(h[1:], h[:-1], out=new[1:])
        new[1:] |= text_of[1:] != text_of[:-1]
        h = h[new]
        bounds = np.searchsorted(text_of[new], np.arange(k + 1)).tolist()
        return [h[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def _keys_of(self, text: str, n: int) -> np.ndarray:
        h = self._ngrams(self.ids(text), n)
        if not len(h):
            return h
        h.sort()
        return h[np.concatenate(([True], h[1:] != h[:-1]))]

    @classmethod
    def _ngrams(cls, ids: np.ndarray, n: int) -> np.ndarray:
        """The key of every run of n word hashes in ``ids``, in order (a new array; empty when
        there are fewer than n): the polynomial both :meth:`keys` and :meth:`keys_many` use."""
        m = len(ids) - n + 1
        if m < 1:
            return np.zeros(0, dtype=np.uint64)
        h = ids[:m].copy()
        for j in range(1, n):
            h *= cls.P  # wraps modulo 2^64, as intended
            h += ids[j : j + m]
        return h

    def _hashes(self, words: list[str]) -> Sequence[int]:
        """:func:`word_hashes` of a short text's words, looked up among the words met."""
        known = self._words
        try:  # every word met before: one C-level lookup
            return itemgetter(*words)(known) if len(words) > 1 else [known[w] for w in words]
        except KeyError:
            if len(known) >= self.WORDS_KEPT:
                known.clear()
            got: list[int] = word_hashes(" ".join(words)).tolist()
            known.update(zip(words, got, strict=True))
            return got


_BYTE_BASE = np.uint64(0x100000001B3)
"""The polynomial base a word's bytes are hashed with (FNV's prime: odd, so invertible modulo
2^64)."""
_BYTE_BASE_INV = np.uint64(pow(int(_BYTE_BASE), -1, 1 << 64))
_POWERS: list[np.ndarray] = [np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.uint64)]
"""``_BYTE_BASE`` and its inverse to the powers 0…L-1, grown to the longest text met."""
_ASCII_PARTS = bytes(
    0 if c in b" \t\n\v\f\r\x1c\x1d\x1e\x1f" else 0x80 if c == 0 else c for c in range(256)
)
"""An ASCII text's bytes as :func:`word_hashes` reads them: 0 where ``str.split`` parts words, a
NUL (a word's byte to ``split``) made 0x80, which no ASCII text holds."""
_UTF8_PARTS = bytes(0 if c == 32 else 0x80 if c == 0 else c for c in range(256))
"""The same for the UTF-8 of a text whose words are already parted by single spaces (0x80 never
follows an ASCII byte in UTF-8)."""
_MIX = (np.uint64(30), np.uint64(0xBF58476D1CE4E5B9), np.uint64(27), np.uint64(31))


def _powers(length: int) -> tuple[np.ndarray, np.ndarray]:
    if len(_POWERS[0]) < length:
        size = max(length, 2 * len(_POWERS[0]), 4096)
        for k, base in enumerate((_BYTE_BASE, _BYTE_BASE_INV)):
            p = np.full(size, base, dtype=np.uint64)
            p[0] = 1
            _POWERS[k] = np.cumprod(p, dtype=np.uint64)  # wraps modulo 2^64, as intended
    return _POWERS[0], _POWERS[1]


def word_hashes(text: str) -> np.ndarray:
    """A 64-bit hash of each word of ``text`` (the words ``text.split()`` gives), in order,
    computed in numpy over the text's UTF-8 bytes: per word the polynomial of its bytes (the sum
    of each byte times the base's inverse power at its place, scaled back by the power at the
    word's end), then mixed (a multiply and shifts, as splitmix64's finaliser) so that the n-gram
    polynomial over them is not one over bytes. A 700-word context in about half the time a
    dictionary of word ids took (71 against 128 µs), and the same for a word wherever and whenever
    it is read. Two different words share a hash with
    probability about 2^-64."""
    if text.isascii():
        raw = text.encode().translate(_ASCII_PARTS)
    else:  # Unicode spaces part words too
        raw = " ".join(text.split()).encode().translate(_UTF8_PARTS)
    b = np.frombuffer(raw, dtype=np.uint8)
    if not len(b):
        return np.zeros(0, dtype=np.uint64)
    if raw[0] and raw[-1] and b"\0\0" not in raw:  # single partings (a normalised text)
        gaps = np.flatnonzero(b == 0)
        starts = np.empty(len(gaps) + 1, dtype=np.intp)
        starts[0] = 0
        np.add(gaps, 1, out=starts[1:])
        ends = np.empty_like(starts)
        ends[:-1] = gaps
        ends[-1] = len(b)
    else:
        word = np.concatenate(([False], b != 0, [False]))
        edges = np.flatnonzero(word[1:] != word[:-1])
        starts, ends = edges[0::2], edges[1::2]
        if not len(starts):
            return np.zeros(0, dtype=np.uint64)
    power, inverse = _powers(len(b))
    # a word's sum runs to the next word's start: the partings between add 0
    h = np.add.reduceat(b * inverse[: len(b)], starts)  # wraps modulo 2^64, as intended
    h *= power[ends - 1]
    shift, mul, shift2, shift3 = _MIX
    h ^= h >> shift
    h *= mul
    h ^= h >> shift2
    h *= mul
    h ^= h >> shift3
    return h


def member(needles: np.ndarray, haystack: np.ndarray) -> np.ndarray:
    """``needles`` found in the sorted array ``haystack`` (np.isin re-sorts the haystack each
    call)."""
    if not len(haystack):
        return np.zeros(len(needles), dtype=bool)
    return haystack[positions(haystack, needles)] == needles


SORTED_SEARCH = 1 << 12
"""Needles from which :func:`positions` sorts them before it searches."""


def positions(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Where each of ``needles`` is or would go in the sorted, non-empty ``haystack`` (at most its
    last place). Many needles are searched in sorted order: a search then starts near the last
    one's place, where unsorted needles in a haystack of millions missed the cache at every step
    (10M keys: 2.4 µs a needle unsorted, 0.36 µs sorted first)."""
    if len(needles) < SORTED_SEARCH:
        at = np.searchsorted(haystack, needles)
    else:
        order = np.argsort(needles)
        at = np.empty(len(needles), dtype=np.intp)
        at[order] = np.searchsorted(haystack, needles[order])
    return np.minimum(at, len(haystack) - 1, out=at)


def share_in(needles: np.ndarray, haystack: np.ndarray) -> float:
    """The share of ``needles`` (at least one) found in the sorted ``haystack``: the mean of
    :func:`member`, as numpy computes it, without its overhead."""
    return int(np.count_nonzero(member(needles, haystack))) / len(needles)


def shares_in(needles: list[np.ndarray], haystack: np.ndarray) -> list[float]:
    """:func:`share_in` of each array of ``needles`` (0.0 for an empty one), in one search: an
    item's terms or options against one field cost one numpy pass, not one each."""
    sizes = [len(x) for x in needles]
    if not any(sizes):
        return [0.0] * len(needles)
    hit = np.concatenate(([0], np.cumsum(member(np.concatenate(needles), haystack)))).tolist()
    out, at = [], 0
    for size in sizes:
        out.append((hit[at + size] - hit[at]) / size if size else 0.0)
        at += size
    return out


_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_POSSESSIVE = re.compile(r"['’]s?$")


_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
"""Where a text's sentences and lines part: the spaces after ``.!?;``, and line breaks."""
_SENTENCE_END = re.compile(r"[.!?;]\s")


def sentence_words(text: str) -> list[list[str]]:
    """:func:`words` of each sentence or line of ``text`` (its pieces between :data:`_SENTENCE`),
    those without words left out. An ASCII text is lowered, parted and made words at once (one
    split where no sentence ends inside a line, then one character table over all pieces):
    60 % less time than reading each piece with the regular expression. Any other text is split
    first (casefolding and NFKC may change where a piece ends)."""
    if not text.isascii():
        return [w for w in (words(p) for p in _SENTENCE.split(text)) if w]
    low = text.lower()
    pieces = _SENTENCE.split(low) if _SENTENCE_END.search(low) else low.split("\n")
    # no piece holds a line break: the table keeps them as the pieces' seams
    seams = "\n".join(pieces).translate(_ASCII_SPACES_BUT_LINES).split("\n")
    if "'" not in low:
        return [found for piece in seams if (found := piece.split())]
    return [found for piece in seams if (found := _apostrophes(piece.split()))]


def words(text: str) -> list[str]:
    """The words of ``text``, casefolded and NFKC-normalised, a possessive ending dropped
    ("poster's" is "poster"); hyphens and other marks split words."""
    if text.isascii():  # NFKC leaves it as it is, casefold lowers it
        return _ascii_words(text.lower())
    return _words_in(unicodedata.normalize("NFKC", text).casefold())


def _words_in(low: str) -> list[str]:
    """:func:`words` of a text already casefolded and normalised."""
    found = _WORD.findall(low)
    if "'" not in low and "’" not in low:
        return found
    return [_POSSESSIVE.sub("", w) if "'" in w or "’" in w else w for w in found]


_ASCII_SPACES = str.maketrans({chr(c): " " for c in range(128) if not chr(c).isalnum() and c != 39})
"""An ASCII character that is neither a letter, a digit nor an apostrophe, made a space."""


_ASCII_SPACES_BUT_LINES = {k: v for k, v in _ASCII_SPACES.items() if k != ord("\n")}
"""The same, a line break kept."""


def _ascii_words(low: str) -> list[str]:
    """:func:`_words_in` of a lowered ASCII text, without the regular expression where it can:
    every character but a letter, a digit or an apostrophe made a space, the text split."""
    found = low.translate(_ASCII_SPACES).split()
    return _apostrophes(found) if "'" in low else found


def _apostrophes(pieces: list[str]) -> list[str]:
    """Lowered ASCII pieces of letters, digits and apostrophes as :func:`_words_in`'s words:
    only a piece with an apostrophe goes through :data:`_WORD` (which parts "'it''s'" into "it"
    and "s") and loses a possessive ending."""
    return [x for piece in pieces for x in (_words_in(piece) if "'" in piece else (piece,))]


class Lemmas:
    """Word -> lemma, each distinct word lemmatised once, out of context, by the English pipeline
    the text gates use (:func:`gen.text.tagging.tags`): "novels" is "novel", "placed" "place". A
    word is lemmatised alone, so it maps the same way wherever it stands (an option and a context
    agree); the cost follows the vocabulary, not the bank's length. ``english=False`` keeps words as
    they are (the tagger is English)."""

    CACHED = 1 << 16
    """Texts whose content lemmas are kept (cleared when full): a context's lines and a bank's
    questions repeat, and each is read once per item that shows it."""

    def __init__(self, english: bool = True) -> None:
        self.english = english
        self._map: dict[str, str] = {}
        self._content: dict[str, list[str]] = {}
        self._kept: dict[str, str | None] = {}
        """Per word, its lemma when it is a content word, else None."""

    def learn(self, texts: Iterable[str]) -> None:
        """Lemmatise the new words of ``texts`` in one batch."""
        self._learn(w for t in texts for w in words(t))

    def _learn(self, ws: Iterable[str]) -> None:
        new = list(dict.fromkeys(w for w in ws if w and w not in self._map))
        if not new:
            return
        if not self.english:
            self._map.update((w, w) for w in new)
            return
        from gen.text.tagging import forget_since, tagged_count, tags, warm

        mark = tagged_count()
        warm(new)
        for w in new:
            toks = tags(w)
            self._map[w] = toks[0][3].casefold() if len(toks) == 1 and toks[0][3] else w
        forget_since(mark)  # the shared tag cache keeps texts, not this vocabulary

    def content(self, text: str) -> list[str]:
        """The lemmas of ``text``'s content words, in order (stopwords and bare one-digit numbers
        left out, before and after lemmatising). Cached per text: the list is shared, not to be
        changed."""
        got = self._content.get(text)
        if got is None:
            got = self.contents([text])[0]
            if len(self._content) >= self.CACHED:
                self._content.clear()
            self._content[text] = got
        return got

    def contents(self, texts: list[str]) -> list[list[str]]:
        """:meth:`content` of each of ``texts``, their new words learnt at once and nothing cached
        (a context's lines, each read once: a third faster than one by one)."""
        return self.contents_of([words(t) for t in texts])

    def contents_of(self, each: list[list[str]]) -> list[list[str]]:
        """:meth:`contents` of texts given as their :func:`words`."""
        from gen.text.words import STOPWORDS

        distinct = set().union(*each)
        if not distinct <= self._map.keys():
            self._learn(w for ws in each for w in ws)
        kept = self._kept
        for w in distinct.difference(kept):  # a word's verdict, found once
            lemma = self._map.get(w, w)
            skip = w in STOPWORDS or w in NAME_NOTHING or (w.isdigit() and len(w) < 2)
            kept[w] = None if skip or lemma in STOPWORDS else lemma
        get = kept.__getitem__
        return [[k for k in map(get, ws) if k is not None] for ws in each]


NAME_NOTHING = frozenset({"yet", "also", "even", "ever", "already"})
"""Adverbs :data:`gen.text.words.STOPWORDS` keeps that name nothing either ("not boiling yet")."""
