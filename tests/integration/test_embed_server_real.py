"""``embedder=openai`` end to end: ``python -m gen audit`` with its embeddings from a loopback
server that serves the real all-MiniLM-L6-v2's vectors finds what the in-process model finds
(the planted paraphrases), the key from the environment goes to the server and nowhere in the
run folder; a server that is not there is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from embeddings_server import EmbeddingsServer
from test_audit_real import FIX, PLANTED

from gen.embed import Embedder, EmbedderConfig

KEY = "sk-embed-integration-0123456789abcdef"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> EmbeddingsServer:
    minilm = Embedder(EmbedderConfig(), cache_dir=str(tmp_path_factory.mktemp("emb")))
    srv = EmbeddingsServer(minilm.encode, throttle=1)
    yield srv
    srv.close()


def test_the_cli_audits_with_a_server_embedder_as_with_the_model_in_process(
    tmp_path: Path, run_gen, served: EmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEN_EMB_KEY", KEY)
    out = tmp_path / "run"
    proc = run_gen(
        "audit",
        f"input={FIX / 'planted_paraphrase.jsonl'}",
        "checks=[similar_options]",
        "embedder=openai",
        f"embedder.base_url={served.url}",
        "embedder.model=all-MiniLM-L6-v2",
        "embedder.api_key_env=GEN_EMB_KEY",
        "cache_dir=null",
        f"hydra.run.dir={out}",
        timeout=300,
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
    proc = run_gen(
        "audit",
        f"input={FIX / 'planted_paraphrase.jsonl'}",
        "checks=[similar_options]",
        "embedder=openai",
        f"embedder.base_url={url}",
        "embedder.max_retries=0",
        "cache_dir=null",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and f"embedder ({url}): cannot connect" in proc.stderr
