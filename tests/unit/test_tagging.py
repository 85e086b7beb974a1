"""The text gates' tagger (gen.text.tagging): spaCy's pipeline loaded once and offline, the
tagger alone giving the whole pipeline's tags, a head of a text giving its first tags exactly, and
numpy's matrix product giving blis's tags."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_tagger_and_the_embedder_load_once_when_many_threads_ask_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Records are checked on many threads: each one's first tag or embedding must wait for the
    one load, not start its own (each load is seconds of CPU and a model's memory)."""
    import threading
    import time
    import types

    import spacy

    import gen.llm.embed
    from gen.text import tagging

    loads: list[str] = []

    def slow_load(*args: object, **kwargs: object) -> object:
        loads.append("load")
        time.sleep(0.2)
        return types.SimpleNamespace(pipeline=[])  # a pipeline without models

    def together(fn: object) -> None:
        start = threading.Barrier(8)

        def one() -> None:
            start.wait()
            fn()  # type: ignore[operator]

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    monkeypatch.setattr(spacy, "load", slow_load)
    tagging._load_tagger.cache_clear()
    try:
        together(tagging.tagger)
    finally:
        tagging._load_tagger.cache_clear()
    assert loads == ["load"]

    import sentence_transformers

    loads.clear()
    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", slow_load)
    embedder = gen.llm.embed.make_embedder(gen.llm.embed.EmbedderConfig(), None)
    together(embedder._load)
    assert loads == ["load"]


def test_tagger_loads_offline_and_downloads_nothing(tmp_path: Path) -> None:
    """A fresh process with every socket refused and the hubs offline still tags and identifies."""
    code = textwrap.dedent("""
        import socket
        def refuse(*a, **k):
            raise OSError("network use at run time")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        from gen.text.gates import Gates
        from gen.text.tagging import tags
        assert [t[1] for t in tags("He sands the board.")][:2] == ["PRP", "VBZ"]
        french = "Il fait beau aujourd'hui, on va au parc cet après-midi?"
        assert Gates().check(french, "prose").gate == "language"
        print("ok")
    """)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "SPACY_WARNING_IGNORE": "",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


def test_penn_and_pos_tags_equal_the_whole_pipelines_and_words_its_tokens() -> None:
    """The tagger alone gives the Penn tags the whole pipeline gives (the attribute ruler's one
    tag rule, whitespace is _SP, applied), the ruler's POS per word and tag the same POS, and the
    tokenizer alone its tokens."""
    from gen.text import tagging

    texts = [
        "C picks the cup on the table, rinses the plate, and dries the spoon.",
        "He wants to finish the  pot and the lid\n\non the stove",
        "He ai n't gon na do it",
        "  C's hand-towels\tetc.\u00a0ok ",
        "\n",
        "There's a cat and there are dogs; it's John's.",
    ]
    assert tagging._pos_is_local()
    for text in texts:
        full = tagging.tags(text)
        tagging._PENN.pop(text, None)
        tagging._TAGS.pop(text, None)
        assert tagging.penn(text) == tuple((w, t) for w, t, _, _ in full)
        tagging._POS.clear()
        assert tagging.pos_tags(text) == tuple((w, t, p) for w, t, p, _ in full)
        assert tagging.words(text) == [w for w, *_ in full]


CARRIERS = [
    "He picks up the knife from the counter and slices the onion into thin rings.",
    "He wants to finish painting the fence before the rain starts in the afternoon.",
    "He believes that the red bucket is still full of water from the garden hose.",
    "He  slowly   opens the drawer, takes out a spoon and closes it again quickly.",
    "He walks to the sink",
    "He",
]


@pytest.mark.parametrize("text", CARRIERS)
def test_a_head_of_a_text_gives_its_first_tags_exactly(text: str) -> None:
    """A token's tag depends on the 4 tokens each side (the model's tok2vec): the tags of a head
    cut 4 tokens later are the whole text's, and Tail reads past the head from the whole text."""
    from gen.text import tagging

    assert tagging._receptive_field() == tagging.RECEPTIVE == 4
    full = tagging.penn(text)
    for tokens in (1, 3, 5):
        tagging._HEAD_TAGS.clear()
        head, exact = tagging.penn_head(text, tokens)
        assert exact >= min(tokens, len(full))
        assert head[:exact] == full[:exact]
        tail = tagging.Tail(text, 1, tokens)
        assert [tail.tag(k) for k in range(len(full) + 2)] == [t for _, t in full[1:]] + [None] * 3


def test_the_tagger_multiplies_with_numpy_and_tags_as_with_blis() -> None:
    """The tagger's models run numpy's matrix product (OpenBLAS, three times blis's speed on the
    VM), on one BLAS thread; a sentence's tags are those the blis product gives."""
    from thinc.api import NumpyOps
    from threadpoolctl import threadpool_info

    from gen.text import tagging

    nlp = tagging.tagger()
    ops = {
        type(node.ops)
        for _, p in nlp.pipeline
        if getattr(p, "model", None) is not None
        for node in p.model.walk()
    }
    assert ops == {type(tagging._matmul_ops())} and ops != {NumpyOps}
    texts = [
        "He wants to season and marinate the meat before dinner",
        "I watch as he slowly folds the towel on the chair",
        "He believes that the knife is in the drawer",
        "Then he picks up the red cup and rinses it",
    ]
    threads: list[int] = []
    gemm = tagging._matmul_ops().gemm

    def counted(*args: object, **kwargs: object) -> object:
        threads.extend(  # numpy's own BLAS (scipy's is another library)
            i["num_threads"]
            for i in threadpool_info()
            if "numpy" in Path(i["filepath"]).parent.name
        )
        return gemm(*args, **kwargs)

    def tagged(o: object) -> list[tuple[str, ...]]:
        tagging.use_ops(nlp, o)
        with tagging._running():
            return [tuple(t.tag_ for t in d) for d in nlp.pipe(texts, disable=["lemmatizer"])]

    matmul = tagging._matmul_ops()
    try:
        matmul.gemm = counted  # type: ignore[method-assign]
        got = tagged(matmul)
        blis = tagged(NumpyOps())
    finally:
        del matmul.gemm
        tagged(matmul)
    assert got == blis and threads and set(threads) == {1}
