"""``embedder=openai``: an OpenAI-compatible embeddings server instead of the in-process model.

A loopback stand-in serves ``POST /v1/embeddings`` with the unit tests' bag-of-words embedder, as a
real server does it (vectors not normalised, ``data`` in any order with each ``index``, a 429
with ``Retry-After`` now and then, many requests at once). The vectors gen gets are the model's,
in input order; a run's records are byte-identical to the same run with the model in process;
requests go out from many records at once; the key goes only into the header; every malformed
reply is a retryable ``ServerError`` and a dead server stops the run with a one-line error."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embeddings_server import EmbeddingsServer
from fakes import FakeEmbedder
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rerank import POOLS, rerank_reply

from gen.engine.api import configure
from gen.engine.runner import RunContext, run_config
from gen.errors import BackendError, ConfigError
from gen.generators.rerank import RerankConfig
from gen.llm import scripted_llm
from gen.llm.embed import ServerEmbedder, ServerEmbedderConfig, make_embedder, vectors
from gen.llm.http import ServerError

KEY = "sk-test-embeddings-0123456789abcdef"


@pytest.fixture
def served() -> Iterator[EmbeddingsServer]:
    srv = EmbeddingsServer(FakeEmbedder().encode, throttle=1)
    yield srv
    srv.close()


def embedder(srv: EmbeddingsServer, cache_dir: str | None = None, **kw: Any) -> ServerEmbedder:
    cfg = ServerEmbedderConfig(base_url=srv.url, model="bow", api_key_env="GEN_TEST_EMB_KEY", **kw)
    made = make_embedder(cfg, cache_dir)
    assert isinstance(made, ServerEmbedder)
    return made


TEXTS = [f"text {i} about {w}" for i, w in enumerate("pasta timer taxi map bus fish tram".split())]


def test_the_vectors_are_the_served_models_in_input_order_after_a_429(
    served: EmbeddingsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEN_TEST_EMB_KEY", KEY)
    emb = embedder(served, str(tmp_path / "cache"), batch_size=3)
    got = emb.encode(TEXTS)
    assert got.dtype == np.float32 and got.shape == (7, FakeEmbedder.dim)
    np.testing.assert_allclose(got, FakeEmbedder().encode(TEXTS), atol=1e-6)
    # one 429 (retried after its Retry-After), then 3 batches of at most 3 texts
    assert [len(r["input"]) for r in served.requests] == [3, 3, 3, 1]
    assert {r["model"] for r in served.requests} == {"bow"}
    assert set(served.auth) == {f"Bearer {KEY}"}
    # cached by text: a second encode asks the server only for the new text
    again = emb.encode([TEXTS[2], "a new text", TEXTS[0]])
    assert served.requests[-1]["input"] == ["a new text"]
    np.testing.assert_allclose(again[[0, 2]], got[[2, 0]], atol=1e-6)
    assert emb.describe() == {
        "backend": "openai",
        "model": "bow",
        "base_url": served.url,
        "dimensions": FakeEmbedder.dim,
        "requests": 4,
        "computed": 8,
        "cache_hits": 2,
    }
    assert KEY not in json.dumps(emb.describe())


def test_a_run_is_byte_identical_to_the_model_in_process_and_holds_no_key(
    served: EmbeddingsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEN_TEST_EMB_KEY", KEY)
    outs = {}
    for name in ("local", "server"):
        cfg = RerankConfig(
            input=str(POOLS),
            cache_dir=None,
            progress="off",
            dedup_similarity=0.6,
            confirm_similarity=0.6,
            embedder=(
                {"backend": "openai", "base_url": served.url, "api_key_env": "GEN_TEST_EMB_KEY"}
                if name == "server"
                else {}
            ),
        )
        out = outs[name] = tmp_path / name
        ctx = RunContext("rerank", cfg, out).use(
            llm=scripted_llm(rerank_reply({1: 2}, ungrounded=(5,)), sampling=cfg.llm),
            embedder=FakeEmbedder() if name == "local" else None,
        )
        result = run_config("rerank", cfg, out, ctx=ctx, quiet=True)
        assert result.accepted == 1
    assert (outs["server"] / "rerank.jsonl").read_bytes() == (
        outs["local"] / "rerank.jsonl"
    ).read_bytes()
    assert served.requests, "the server run embedded nothing"
    manifest = json.loads((outs["server"] / "manifest.json").read_text())
    assert manifest["config"]["embedder"]["backend"] == "openai"
    for path in outs["server"].rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


def test_requests_from_many_records_go_out_at_once() -> None:
    # 4 requests must be at the server together for any of them to be answered
    srv = EmbeddingsServer(FakeEmbedder().encode, together=4, latency=0.05)
    try:
        emb = embedder(srv, concurrency=4)
        threads = [
            threading.Thread(target=emb.encode, args=([f"record {i} text"],)) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert emb.computed == 8 and emb.requests == 8
        assert srv.max_in_flight == 4  # at once, and no more than embedder.concurrency
    finally:
        srv.close()


def test_a_dead_server_is_a_one_line_backend_error_naming_the_option() -> None:
    srv = EmbeddingsServer(FakeEmbedder().encode)
    url = srv.url
    srv.close()
    emb = make_embedder(ServerEmbedderConfig(base_url=url, max_retries=0), None)
    with pytest.raises(BackendError) as e:
        emb.encode(["a text"])
    msg = str(e.value)
    assert msg.startswith(f"embedder ({url}): cannot connect") and "\n" not in msg


def test_a_404_names_embedder_base_url(served: EmbeddingsServer) -> None:
    emb = make_embedder(ServerEmbedderConfig(base_url=served.url + "/x", max_retries=0), None)
    with pytest.raises(BackendError, match=r"does embedder\.base_url end in /v1\?"):
        emb.encode(["a text"])


@pytest.mark.parametrize("group", ["embedder", "llm"])
@pytest.mark.parametrize(
    "data",
    [
        {"api_key": KEY},
        {"api_key_env": KEY},
        {"base_url": f"http://user:{KEY}@127.0.0.1:8000/v1"},
    ],
)
def test_a_key_in_the_config_is_refused_without_repeating_it(
    group: str, data: dict[str, str]
) -> None:
    """Through the Python API (a notebook's traceback) as on the command line: the one-line
    error names the option and never the value (a URL's password was echoed before)."""
    with pytest.raises(ConfigError) as e:
        configure("rerank", {group: {"backend": "openai", **data}}, check_input=False)
    assert f"for {group}" in str(e.value) and KEY not in str(e.value)


GOOD = {"data": [{"index": 1, "embedding": [0, 3]}, {"index": 0, "embedding": [4, 0]}]}


@pytest.mark.parametrize(
    "reply, why",
    [
        ({}, "has no data list"),
        ({"data": [{"embedding": [1.0]}]}, "holds 1 vectors for 2 texts"),
        ({"data": [1, 2]}, "holds a int where a vector belongs"),
        ({"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}, "each once"),
        ({"data": [{"index": True, "embedding": [1]}, {"embedding": [1]}]}, "the index True"),
        ({"data": [{"embedding": [1, 2]}, {"embedding": [1]}]}, "of different lengths"),
        ({"data": [{"embedding": ["1"]}, {"embedding": [1]}]}, "not a list of numbers"),
        ({"data": [{"embedding": []}, {"embedding": []}]}, "not a list of numbers"),
        ({"data": [{"embedding": [0, 0]}, {"embedding": [1, 0]}]}, "a vector of zeros"),
        ({"data": [{"embedding": [10**400, 1]}, {"embedding": [1, 0]}]}, "past float range"),
    ],
)
def test_a_malformed_reply_is_a_retryable_server_error_naming_what(
    reply: dict[str, Any], why: str
) -> None:
    with pytest.raises(ServerError, match=why) as e:
        vectors(reply, 2)
    assert e.value.retry
    got = vectors(GOOD, 2)
    assert got.tolist() == [[1.0, 0.0], [0.0, 1.0]] and got.dtype == np.float32
    huge = vectors({"data": [{"embedding": [1e308, 1e308]}]}, 1)
    np.testing.assert_allclose(huge, [[0.5**0.5, 0.5**0.5]], rtol=1e-6)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=9), inner),
    max_leaves=20,
)
ITEM = st.fixed_dictionaries(
    {},
    optional={
        "index": st.integers(-1, 3) | JSON,
        "embedding": st.lists(st.floats(allow_nan=False) | st.integers(), max_size=3) | JSON,
    },
)


@settings(max_examples=300, deadline=None)
@given(
    reply=st.fixed_dictionaries({}, optional={"data": st.lists(ITEM, max_size=4) | JSON}) | JSON,
    n=st.integers(1, 3),
)
def test_any_reply_is_unit_vectors_or_a_server_error(reply: Any, n: int) -> None:
    """The embeddings reply is the server embedder's input reader: whatever JSON comes back is
    ``n`` finite unit vectors of one length, or a retryable ``ServerError``."""
    if not isinstance(reply, dict):  # the HTTP layer refuses a reply that is not an object
        return
    try:
        got = vectors(reply, n)
    except ServerError as e:
        assert e.retry and "\n" not in str(e)
        return
    assert got.shape[0] == n and got.shape[1] >= 1 and np.isfinite(got).all()
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_a_dimension_change_against_a_warm_cache_recomputes(
    served: EmbeddingsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model behind ``embedder.model`` changes dimension: the cache's vectors of the old one
    are never stacked with the new ones (numpy's ``ValueError``, exit 1, before), they are
    computed again, whether the new texts or only cached ones are asked for."""
    monkeypatch.setenv("GEN_TEST_EMB_KEY", KEY)
    cache = str(tmp_path / "cache")
    old = embedder(served, cache).encode(TEXTS[:4])
    assert old.shape == (4, FakeEmbedder.dim)
    wider = lambda texts: np.concatenate([FakeEmbedder().encode(texts)] * 2, axis=1)  # noqa: E731
    served.encode = wider
    mixed = embedder(served, cache).encode(TEXTS[2:6])  # two cached, two new
    assert mixed.shape == (4, 2 * FakeEmbedder.dim)
    cached_only = embedder(served, cache)
    got = cached_only.encode(TEXTS[:2])  # every text cached, at the old dimension
    assert got.shape == (2, 2 * FakeEmbedder.dim)
    np.testing.assert_allclose(got, wider(TEXTS[:2]) / np.sqrt(2), atol=1e-6)
    again = embedder(served, cache)
    n = len(served.requests)
    assert again.encode(TEXTS[:2]).shape == (2, 2 * FakeEmbedder.dim)
    assert len(served.requests) == n + 1 and again.computed == 1  # one text asks the model
