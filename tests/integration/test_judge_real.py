"""judge and evaluate on the real embedded GGUF, as candidate and judge at once
(allow_same_family=true), through the CLI on two or three rows per path: the pipeline runs, and
every row is scored or counted as a judge that did not follow instructions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import check_run_folder, read_jsonl

pytestmark = pytest.mark.integration
FIX = Path(__file__).resolve().parent.parent / "fixtures"
JUDGE = FIX / "judge"
SAME = ("judge=smollm2", "allow_same_family=true")


def test_evaluate_scenarios_with_the_repair_turn(tmp_path: Path, run_gen) -> None:
    out = tmp_path / "eval"
    r = run_gen(
        "evaluate",
        f"input={JUDGE / 'scenarios.jsonl'}",
        f"prompt_conditions={JUDGE / 'prompt_conditions.json'}",
        *SAME,
        "trials=1",
        "limit=2",
        "max_tokens=48",
        "verdict_tokens=96",
        f"hydra.run.dir={out}",
        "progress=plain",
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    manifest = check_run_folder(out, "evaluate", 2)
    for t in read_jsonl(out / "evaluate.jsonl"):
        label = t["turn_2"]["SmolLM2-135M-Instruct.Q4_1"]
        assert label in ("current", "prior", "clarify", "abstain", None)
        # the repair prompt was sent exactly after a judged miss
        assert (t["turn_3"] is not None) == (label is not None and label != t["target_context"])
    judged = read_jsonl(out / "judge_turn2" / "judge.jsonl")
    assert len(judged) == 2
    for rec in judged:
        v = rec["verdicts"]["SmolLM2-135M-Instruct.Q4_1"]
        assert (v["label"] is not None) != (
            v["problem"] is not None
        )  # scored, or counted as not following
    m = manifest["evaluate"]["manifest"]
    assert m["judge_family"] == m["candidate_family"] == "smollm"
    assert "gguf general.basename='smollm2'" in m["judge_family_source"]
    assert m["judge_prompt_version"] == "context-judge-1" and len(m["judge_prompt_sha256"]) == 64


def test_the_real_judge_refuses_its_own_family(tmp_path: Path, run_gen) -> None:
    r = run_gen(
        "evaluate",
        f"input={JUDGE / 'scenarios.jsonl'}",
        f"prompt_conditions={JUDGE / 'prompt_conditions.json'}",
        "judge=smollm2",
        "limit=1",
        "trials=1",
        f"hydra.run.dir={tmp_path / 'x'}",
        timeout=300,
    )
    assert r.returncode == 2 and "of the candidate's model family 'smollm'" in r.stderr
    assert not (
        tmp_path / "x" / "responses_turn2.jsonl"
    ).exists()  # refused before any candidate call


def test_wagibench_judge_scores_or_counts_every_row(tmp_path: Path, run_gen) -> None:
    out = tmp_path / "wagi"
    r = run_gen(
        "judge",
        "kind=wagibench",
        f"input={JUDGE / 'predictions.jsonl'}",
        "variant=[reference,contexts_reference]",
        "reformat_tokens=96",
        f"hydra.run.dir={out}",
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    check_run_folder(out, "judge", 3)
    for rec in read_jsonl(out / "judge.jsonl"):
        if rec["outcome"] == "reformat_invalid":
            assert rec["reformat"]["problem"]
            continue
        for by_judge in rec["judgments"].values():
            for j in by_judge.values():
                assert j["followed"] == (j["score"] in (0, 1, 2)) and (
                    j["followed"] or j["problem"]
                )


def test_distractor_validity_and_mcq_evaluation(tmp_path: Path, run_gen) -> None:
    bank = tmp_path / "mcq.jsonl"
    bank.write_text("".join((FIX / "audit" / "clean.jsonl").read_text().splitlines(True)[:2]))
    out = tmp_path / "valid"
    r = run_gen(
        "judge", "kind=distractor_validity", f"input={bank}", f"hydra.run.dir={out}", timeout=900
    )
    assert r.returncode == 0, r.stderr[-2000:]
    check_run_folder(out, "judge", 2)
    for rec in read_jsonl(out / "judge.jsonl"):
        (scores,) = rec["scores"].values()
        assert len(scores) == rec["n_options"] and all(
            s["followed"] or s["problem"] for s in scores
        )
    audit = run_gen(
        "audit",
        f"input={bank}",
        f"judge={out}",
        "checks=[structure,judge]",
        "embeddings=false",
        f"hydra.run.dir={tmp_path / 'audit'}",
        timeout=300,
    )
    assert audit.returncode in (0, 1), audit.stderr[-2000:]
    report = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert {c["key"]: c["status"] for c in report["checks"]}["judge"] == "ran"
    ev = tmp_path / "ev"
    r = run_gen("evaluate", f"input={bank}", f"hydra.run.dir={ev}", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    check_run_folder(ev, "evaluate", 2)
