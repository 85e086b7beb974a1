"""``audit`` with the real all-MiniLM-L6-v2: the planted paraphrase and duplicates are found at
the default thresholds and the clean fixtures stay clean; the CLI end to end on the scenario
bank; and the audit of EgoToM's real bank (skipped when ../shared/data is absent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gen.engine.runner import RunContext, run_config
from gen.generators.audit import AuditConfig
from gen.llm.embed import Embedder, EmbedderConfig

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "audit"
PLANTED = json.loads((FIX / "planted.json").read_text())
EGOTOM = Path(__file__).resolve().parents[3] / "shared" / "data" / "egotom_paper"


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> Embedder:
    return Embedder(EmbedderConfig(), cache_dir=str(tmp_path_factory.mktemp("emb")))


def audit(
    out: Path, embedder: Embedder | None, input: Path, **cfg: Any
) -> tuple[int, list[dict[str, Any]]]:
    settings = AuditConfig(input=str(input), cache_dir=None, progress="off", **cfg)
    ctx = RunContext("audit", settings, out)
    if embedder is not None:
        ctx.use(embedder=embedder)  # one model load for the module
    result = run_config("audit", settings, out, ctx=ctx, quiet=True)
    return result.exit_code, [json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines()]


def found(findings: list[dict[str, Any]], check: str) -> list[tuple]:
    return sorted(
        (tuple(f["items"]), tuple(sorted(f["fields"]))) for f in findings if f["check"] == check
    )


def test_minilm_clean_bank_and_scenarios_stay_clean(tmp_path: Path, minilm: Embedder) -> None:
    code, findings = audit(tmp_path / "a", minilm, FIX / "clean.jsonl")
    assert (code, findings) == (0, [])
    code, findings = audit(
        tmp_path / "b", minilm, FIX / "scenarios.jsonl", roles=str(FIX / "scenario_roles.yaml")
    )
    assert (code, findings) == (0, [])
    assert minilm.computed > 0  # the real model ran


def test_minilm_finds_the_paraphrased_keys(tmp_path: Path, minilm: Embedder) -> None:
    code, findings = audit(
        tmp_path, minilm, FIX / "planted_paraphrase.jsonl", checks=["similar_options"]
    )
    want = sorted((tuple(p["items"]), tuple(p["fields"])) for p in PLANTED["similar_options"])
    assert found(findings, "similar_options") == want
    assert all(f["numbers"]["cosine"] >= 0.9 for f in findings)


def test_minilm_finds_the_duplicates_within_and_against(tmp_path: Path, minilm: Embedder) -> None:
    _, findings = audit(
        tmp_path / "a", minilm, FIX / "planted_duplicate.jsonl", checks=["duplicates"]
    )
    assert found(findings, "duplicates") == sorted(
        (tuple(p["items"]), tuple(sorted(p["fields"]))) for p in PLANTED["duplicates"]
    )
    _, findings = audit(
        tmp_path / "b",
        minilm,
        FIX / "clean.jsonl",
        checks=["duplicates"],
        against=str(FIX / "against.jsonl"),
    )
    assert found(findings, "duplicates") == sorted(
        (tuple(p["items"]), tuple(sorted(p["fields"]))) for p in PLANTED["against"]
    )


def test_cli_scenario_bank_end_to_end(run_gen, tmp_path: Path) -> None:
    roles = f"roles={FIX / 'scenario_roles.yaml'}"
    ok = run_gen(
        "audit", f"input={FIX / 'scenarios.jsonl'}", roles, f"hydra.run.dir={tmp_path / 'ok'}"
    )
    assert ok.returncode == 0, ok.stderr
    manifest = json.loads((tmp_path / "ok" / "manifest.json").read_text())
    assert manifest["embedder"]["model"] and manifest["audit"]["exit_code"] == 0
    bad = run_gen(
        "audit",
        f"input={FIX / 'planted_scenarios.jsonl'}",
        roles,
        f"hydra.run.dir={tmp_path / 'bad'}",
    )
    assert bad.returncode == 1, bad.stderr
    kinds = {
        json.loads(x)["kind"] for x in (tmp_path / "bad" / "audit.jsonl").read_text().splitlines()
    }
    assert kinds == {p["kind"] for p in PLANTED["scenarios"]}


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="../shared/data/egotom_paper is not present")
def test_egotom_real_bank(tmp_path: Path) -> None:
    """EgoToM's released bank: structurally clean and balanced in answer positions, but option
    length and option wording give the answer away (no embeddings: the statistics only)."""
    code, findings = audit(tmp_path, None, EGOTOM, embeddings=False)
    report = json.loads((tmp_path / "audit.json").read_text())
    checks = {c["key"]: c for c in report["checks"]}
    assert checks["structure"]["stats"]["per_question_type"] == {
        "actions": {"items": 267, "options": {"4": 267}, "no_answer": 0},
        "belief": {"items": 202, "options": {"4": 202}, "no_answer": 0},
        "goal": {"items": 237, "options": {"3": 237}, "no_answer": 0},
    }
    by = {(f["check"], f["kind"], f["numbers"].get("question_type")) for f in findings}
    assert not [f for f in findings if f["check"] in ("structure", "position", "duplicates")]
    assert {
        ("length", "longest_option_tell", "actions"),
        ("length", "longest_option_tell", "goal"),
    } <= by
    assert {("shortcut", "choice_only_shortcut", q) for q in ("actions", "belief", "goal")} <= by
    assert ("leakage", "answer_overlaps_context", "actions") in by
    # every tell sized: effect in points with its interval, and the rule that fired
    tells = {
        (c["key"], t["question_type"], t["tell"]): t
        for c in checks.values()
        for t in c["stats"].get("tells", [])
    }
    goal = tells[("length", "goal", "pick the longest")]
    assert (goal["effect"], goal["effect_ci95"], goal["severity"]) == (15.6, [9.3, 21.9], "error")
    assert tells[("leakage", "actions", "pick the most overlap")]["rule"] == "significant_and_large"
    assert (
        tells[("length", "belief", "pick the shortest")]["severity"] is None
    )  # +4.7 points, p = 0.07
    assert {(p["question_type"], p["check"]): p["detectable_effect"] for p in report["power"]}[
        ("goal", "length")
    ] == 12.2
    assert code == 1
