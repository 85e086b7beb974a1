"""The OpenAI-compatible backend against llama-cpp-python's own server on 127.0.0.1,
serving the embedded GGUF (the conftest fixture ``llama_cpp_python_server``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.schemas.personas import PersonaRecord

pytestmark = pytest.mark.integration


def test_personas_through_the_openai_backend(
    llama_cpp_python_server: str, tmp_path: Path, run_gen, check_run_folder, read_jsonl
) -> None:
    server = llama_cpp_python_server
    out = tmp_path / "run"
    proc = run_gen(
        "personas",
        "n=2",
        "llm=openai",
        f"llm.base_url={server}",
        "llm.model=smollm2",
        "llm.schema_format=json_object",
        f"hydra.run.dir={out}",
        "progress=off",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = check_run_folder(out, "personas", 2, one_per_index=False)
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
