"""``embedder=openai`` end to end: ``python -m gen audit`` with its embeddings from a loopback
server that serves the real all-MiniLM-L6-v2's vectors finds what the in-process model finds
(the planted paraphrases), the key from the environment goes to the server and nowhere in the
run folder; a server that is not there is one line, exit 2. And against a real server: llama.cpp's
``llama-server --embedding`` (the ``[server]`` extra) on the embedded GGUF, whose replies the
client reads in batches as one request would give them, and a CLI run through it (skipped when
no llama-server binary is found)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from embeddings_server import EmbeddingsServer
from test_audit_real import FIX, PLANTED

from gen.errors import BackendError
from gen.llm.config import LlamaServerConfig
from gen.llm.embed import Embedder, EmbedderConfig, ServerEmbedderConfig, make_embedder
from gen.llm.llama_cpp import gguf_file
from gen.llm.llama_server import LlamaServer, find_binary

KEY = "sk-embed-integration-0123456789abcdef"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> EmbeddingsServer:
    minilm = Embedder(EmbedderConfig(), cache_dir=str(tmp_path_factory.mktemp("emb")))
    srv = EmbeddingsServer(minilm.encode, throttle=1)
    yield srv
    srv.close()


def audit_through(run_gen, url: str, out: Path, *options: str):
    """``python -m gen audit`` of the planted paraphrases, its embeddings from ``url``."""
    return run_gen(
        "audit",
        f"input={FIX / 'planted_paraphrase.jsonl'}",
        "checks=[similar_options]",
        "embedder=openai",
        f"embedder.base_url={url}",
        *options,
        "cache_dir=null",
        f"hydra.run.dir={out}",
        timeout=300,
    )


def test_the_cli_audits_with_a_server_embedder_as_with_the_model_in_process(
    tmp_path: Path, run_gen, served: EmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEN_EMB_KEY", KEY)
    out = tmp_path / "run"
    proc = audit_through(
        run_gen,
        served.url,
        out,
        "embedder.model=all-MiniLM-L6-v2",
        "embedder.api_key_env=GEN_EMB_KEY",
    )
    findings = [json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines()]
    got = sorted(
        (tuple(f["items"]), tuple(sorted(f["fields"])))
        for f in findings
        if f["check"] == "similar_options"
    )
    want = sorted((tuple(p["items"]), tuple(p["fields"])) for p in PLANTED["similar_options"])
    assert got == want, proc.stderr[-2000:]
    assert len(served.requests) >= 2 and set(served.auth) == {f"Bearer {KEY}"}  # a 429 first
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["embedder"]["backend"] == "openai"
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


def test_a_server_that_is_not_there_is_one_line_exit_2(tmp_path: Path, run_gen) -> None:
    srv = EmbeddingsServer(lambda texts: None)
    url = srv.url
    srv.close()
    proc = audit_through(run_gen, url, tmp_path / "run", "embedder.max_retries=0")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and f"embedder ({url}): cannot connect" in proc.stderr


@pytest.fixture(scope="module")
def llama_embeddings():
    """llama.cpp's server with ``--embedding`` (mean pooling) on the embedded SmolLM2 GGUF."""
    try:
        binary = find_binary(None)
        model = gguf_file(None)
    except BackendError as e:
        pytest.skip(f"no llama-server or GGUF: {e}")
    cfg = LlamaServerConfig(
        parallel=2, ctx_per_slot=2048, extra_args=["--embedding", "--pooling", "mean"]
    )
    srv = LlamaServer(binary, model, cfg)
    yield srv
    srv.stop()


TEXTS = [
    "C picks up a paint brush.",
    "C dips the brush in the paint container.",
    "C washes a bowl in the sink.",
    "C picks up the paint brush from the table.",
    "C walks to the kitchen.",
]


def test_llama_servers_embeddings_read_in_batches_as_in_one_request(llama_embeddings) -> None:
    one = make_embedder(ServerEmbedderConfig(base_url=llama_embeddings.base_url), None)
    batched = make_embedder(
        ServerEmbedderConfig(base_url=llama_embeddings.base_url, batch_size=2, concurrency=2), None
    )
    whole = one.encode(TEXTS)
    parts = batched.encode(TEXTS)
    assert whole.shape == parts.shape == (5, 576) and batched.describe()["requests"] == 3
    np.testing.assert_allclose(parts, whole, atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(whole, axis=1), 1.0, atol=1e-5)
    off = (whole @ whole.T)[~np.eye(5, dtype=bool)]
    assert off.max() < 0.999  # five texts, five vectors (the order is the texts')
    np.testing.assert_allclose(one.encode(TEXTS[::-1]), whole[::-1], atol=1e-3)


def test_a_cli_run_embeds_through_llama_server(tmp_path: Path, run_gen, llama_embeddings) -> None:
    out = tmp_path / "run"
    proc = audit_through(run_gen, llama_embeddings.base_url, out, "embedder.model=smollm2-mean")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: findings at fail_on
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["embedder"]["backend"] == "openai"
    assert manifest["embedder"]["dimensions"] == 576 and manifest["embedder"]["computed"] > 0
