"""``llm=llama_server`` with the real llama.cpp server (the ``[server]`` extra) on the embedded
GGUF: structured calls through its OpenAI-compatible API with JSON-schema ``response_format``,
two slots in flight, prompt reuse reported, and no server left behind. Skipped when no llama-server
binary is found."""

from __future__ import annotations

import json
import subprocess

import pytest

from gen.errors import BackendError
from gen.llm.llama_server import find_binary

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def binary():
    try:
        return find_binary(None)
    except BackendError as e:
        pytest.skip(f"no llama-server: {e}")


def _servers_of(binary) -> set[int]:
    out = subprocess.run(["pgrep", "-f", str(binary)], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def test_a_run_on_the_real_server(binary, run_gen, tmp_path, check_run_folder) -> None:
    before = _servers_of(binary)
    folder = tmp_path / "run"
    proc = run_gen(
        "personas",
        "n=3",
        "llm=llama_server",
        "llm.parallel=2",
        "llm.threads=2",
        "llm.threads_batch=1",
        "progress=plain",
        f"hydra.run.dir={folder}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = check_run_folder(folder, "personas", 3, one_per_index=False)
    assert manifest["llm"]["backend"] == "llama_server" and manifest["llm"]["parallel"] == 2
    usage = manifest["llm_usage"]
    assert usage["calls"] >= 3 and usage["completion_tokens"] > 0
    # the server says how much of each prompt it had cached; a worker's calls go to its own
    # slot, so its later calls find the shared instructions there
    assert (
        usage["prompt_tokens_reported"] == usage["prompt_tokens"] > usage["prompt_tokens_evaluated"]
    )
    assert usage["prompt_tokens_reused"] > 0
    records = [json.loads(x) for x in (folder / "personas.jsonl").read_text().splitlines()]
    assert all(len(r["bio"]) >= 40 for r in records)  # the schema's constraint held
    assert _servers_of(binary) <= before  # ours is gone
