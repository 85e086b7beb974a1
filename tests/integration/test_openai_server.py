"""The OpenAI-compatible backend against llama-cpp-python's own server on 127.0.0.1,
serving the embedded GGUF."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.persona import PersonaRecord

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"  # only ever the loopback address


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    with opener.open(url, timeout=timeout) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory, gguf_path: Path, env_for) -> Iterator[str]:
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python[server] is not installed")
    port = _free_port()
    logdir = tmp_path_factory.mktemp("server")
    log = open(logdir / "server.log", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path), "--host", HOST,
         "--port", str(port), "--n_ctx", "4096"],
        cwd=logdir, env=env_for(logdir / "cache"), stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://{HOST}:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited ({proc.returncode}): "
                            + (logdir / "server.log").read_text()[-2000:])
            try:
                models = _get(f"{base}/models")
                assert models["data"], models
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail("llama_cpp.server did not answer /v1/models within 120 s")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.close()


def test_personas_through_the_openai_backend(server: str, tmp_path: Path, run_gen,
                                             check_run_folder, read_jsonl) -> None:
    out = tmp_path / "run"
    proc = run_gen("personas", "n=2", "llm=openai", f"llm.base_url={server}", "llm.model=smollm2",
                   "llm.schema_format=json_object", f"hydra.run.dir={out}", "progress=off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = check_run_folder(out, "personas", 2)
    assert manifest["llm"]["backend"] == "openai"
    assert manifest["llm"]["model"] == "smollm2"
    assert manifest["llm"]["sampling"]["base_url"] == server
    usage = manifest["llm_usage"]
    assert usage["calls"] >= 2 and usage["cache_hits"] == 0
    assert usage["completion_tokens"] > 0  # the server really answered
    rejects = read_jsonl(out / "rejects.jsonl")
    assert not [r for r in rejects if r["reason"] == "backend_error"], rejects
    for raw in read_jsonl(out / "personas.jsonl"):
        PersonaRecord.model_validate(raw)
