"""The personas generator end to end with the real embedded GGUF, through ``python -m gen``.

Asserts structure, counts and invariants, never the prose.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from gen.generators.personas import bio_problems, sample_facts
from gen.schemas import Reject
from gen.schemas.personas import PersonaRecord
from gen.text.gates import GATES, Gates

pytestmark = pytest.mark.integration

SEED = 1
REASONS = {
    "contradiction",
    "truncated",
    "invalid_output",
    *GATES,
}  # a bio that fails a text gate too


@pytest.fixture(scope="module")
def real(tmp_path_factory, runner_for):
    base = tmp_path_factory.mktemp("personas_real")
    cache = base / "cache"
    run = runner_for(base, cache)
    first = base / "first"
    proc = run("personas", "n=4", f"seed={SEED}", f"hydra.run.dir={first}", "progress=plain")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return SimpleNamespace(base=base, cache=cache, run=run, first=first, proc=proc)


def test_counts_reconcile_and_records_validate(
    real, check_run_folder, read_jsonl, gguf_path: Path
) -> None:
    manifest = check_run_folder(real.first, "personas", 4, one_per_index=False)
    base = sample_facts(SEED, 4)
    records = read_jsonl(real.first / "personas.jsonl")
    rejects = [Reject.model_validate(r) for r in read_jsonl(real.first / "rejects.jsonl")]
    assert len(records) == 4  # a pool of the size asked for, one persona per slot, in slot order
    for slot, raw in enumerate(records):
        rec = PersonaRecord.model_validate(raw)
        if rec.persona_id == base[slot].persona_id:
            assert (
                rec.model_dump(exclude={"bio"}) == base[slot].model_dump()
            )  # facts are the sampled ones
        else:  # every bio of the slot's first facts failed: fresh facts of the same nationality
            assert (
                rec.persona_id not in {f.persona_id for f in base}
                and rec.nationality == base[slot].nationality
            )
        assert 40 <= len(rec.bio) <= 420
        assert bio_problems(rec, rec.bio) == []  # an accepted bio agrees with its facts
        assert (
            Gates().check(rec.bio, "sentence", max_chars=420) is None
        )  # and passes the text gates
    for rej in rejects:  # every failed draw of facts is a reject row of its slot
        assert rej.stage == "bio" and rej.reason in REASONS and 0 <= rej.index < 4
    assert manifest["pool"]["accepted"] == 4 and manifest["pool"]["rejected"] == len(rejects)

    llm = manifest["llm"]
    assert llm["backend"] == "llama_cpp"
    assert llm["model"] == gguf_path.name
    assert llm["model_sha256"] == hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    usage = manifest["llm_usage"]
    assert usage["calls"] >= 4 and usage["cache_hits"] == 0 and usage["completion_tokens"] > 0
    assert manifest["config"]["seed"] == SEED and manifest["config"]["n"] == 4
    assert "personas/bio.jinja" in manifest["prompts"]
    assert manifest["git"]["commit"]
    # plain progress (not a terminal) and a summary line
    assert "[personas] 4/4" in real.proc.stdout
    assert "[personas] done in" in real.proc.stdout


def test_rerun_is_served_from_the_cache(real, check_run_folder) -> None:
    second = real.base / "second"
    proc = real.run("personas", "n=4", f"seed={SEED}", f"hydra.run.dir={second}", "progress=off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = check_run_folder(second, "personas", 4, one_per_index=False)
    usage = manifest["llm_usage"]
    assert usage["calls"] > 0
    # every reply that passed validation is replayed; one that failed it is asked again (only
    # validated replies are cached, issue 43), and the deterministic model answers it the same
    assert 0 < usage["cache_hits"] <= usage["calls"] and usage["cached_completion_tokens"] > 0
    for name in ("personas.jsonl", "rejects.jsonl"):
        assert (second / name).read_bytes() == (real.first / name).read_bytes(), name
    assert proc.stdout.strip() == ""  # progress=off prints nothing


def test_larger_pool_extends_the_smaller_one(real, check_run_folder) -> None:
    third = real.base / "third"
    proc = real.run("personas", "n=6", f"seed={SEED}", f"hydra.run.dir={third}", "progress=off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = check_run_folder(third, "personas", 6, one_per_index=False)
    for name in ("personas.jsonl", "rejects.jsonl"):
        small = (real.first / name).read_bytes()
        assert (third / name).read_bytes().startswith(small), name
    # the first four personas' validated replies are replayed from the cache (a reply that
    # failed a check is asked again, issue 43); the last two are new calls
    assert 0 < manifest["llm_usage"]["cache_hits"] < manifest["llm_usage"]["calls"]
