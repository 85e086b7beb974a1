"""``python -m gen scenarios`` end to end on the real embedded GGUF and the real embedding model,
n=2. Asserts accounting and invariants, never prose: every scenario ends accepted or rejected
with a rule's name, nothing that breaks a rule is written, the funnel adds up, the lock matches
the files, and the benchmark's own validator passes on whatever was accepted."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conftest import check_run_folder, context_bench_failures, context_bench_validator, read_jsonl

from gen.contextbench.rules import RULES, rule_problems
from gen.schemas.scenarios import RECORD_FIELDS, ScenarioRecord

# One generation per stage and one try inside it keep this to a few minutes on a loaded 2-core
# machine; the model checks run (and reject) as by default.
FAST = ["n=2", "attempts=1", "llm.attempts=1", "progress=off"]
REASONS = {rule for _, rule, _ in RULES} | {"truncated", "invalid_output", "backend_error"}


def test_two_scenarios_with_the_embedded_model(tmp_path: Path, run_gen) -> None:
    out = tmp_path / "run"
    done = run_gen("scenarios", *FAST, f"hydra.run.dir={out}", timeout=1800)
    assert done.returncode == 0, done.stderr
    manifest = check_run_folder(out, "scenarios", 2)
    rows = read_jsonl(out / "scenarios.jsonl")
    rejects = read_jsonl(out / "rejects.jsonl")
    checks = read_jsonl(out / "scenario_checks.jsonl")
    assert [c["scenario_id"] for c in checks] == ["sc-01", "sc-02"]
    by_id = {c["scenario_id"]: c for c in checks}
    for r in rows:
        assert tuple(r) == RECORD_FIELDS
        ScenarioRecord.model_validate(r)
        assert rule_problems(r, categories=by_id[r["scenario_id"]]["categories"]) == []
        assert by_id[r["scenario_id"]]["status"] == "accepted"
    for r in rejects:
        assert r["reason"] in REASONS and r["detail"].startswith(r["record_id"])
        assert (
            by_id[r["record_id"]]["status"] == "rejected"
            and by_id[r["record_id"]]["reason"] == r["reason"]
        )
    assert context_bench_failures(context_bench_validator(), rows) == []
    f = manifest["scenarios"]["funnel"]
    assert f["units"] == 2 and f["accepted_units"] == len(rows)
    for row in f["rules"]:
        assert row["final"] <= row["reached"] <= 2 and row["first_try"] <= row["reached"]
    # attempts=1: one generation per stage and unit, one more where resolve() regenerates
    assert all(s["generations"] <= 4 for s in f["stages"].values())  # +1 where a turn 2 repeated
    assert sum(f["rejected_by"].values()) == len(rejects)
    lock = json.loads((out / "MANIFEST.lock.json").read_text())
    assert (
        lock["scenarios_sha256"]
        == hashlib.sha256((out / "scenarios.jsonl").read_bytes()).hexdigest()
    )
    assert (
        lock["scenario_checks_sha256"]
        == hashlib.sha256((out / "scenario_checks.jsonl").read_bytes()).hexdigest()
    )
    assert manifest["llm"]["backend"] == "llama_cpp" and manifest["llm_usage"]["calls"] >= 2
    verify = run_gen("scenarios", "verify", f"input={out}", f"hydra.run.dir={tmp_path / 'verify'}")
    assert verify.returncode == 0, verify.stderr
