"""``introspect`` end to end with the real models: each task family on its example under
``examples/introspect/``, then the real audit (all-MiniLM-L6-v2) and ``bank add`` on the run folder.
The code-built families need no LLM; the event form of Memory Assistance Recognition runs once with
the embedded SmolLM2 (the funnel says where its yield goes) and once with the scripted writer of the
unit tests, so its records reach the audit and the bank whatever the tiny model writes. Asserts
structure, accounting and the audit's verdicts, never prose."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import check_run_folder, read_jsonl
from scripted import event_writer

from gen.banks.store import LOCK
from gen.engine.runner import RunContext, run_config
from gen.generators.audit import AuditConfig
from gen.generators.bank import BankConfig
from gen.generators.introspect import IntrospectConfig
from gen.llm import scripted_llm
from gen.llm.embed import Embedder, EmbedderConfig
from gen.paths import EXAMPLES

NAME = "introspect"
EX = EXAMPLES / "introspect"

FAMILIES: list[tuple[str, str, dict[str, Any], set[str]]] = [
    # task, example, options, the audit checks allowed a (warning) finding
    ("recording", "recording.jsonl", {}, {"length"}),  # "yes" is 1.5x "no": fixed labels
    ("emotion_intensity", "emotions.jsonl", {}, set()),
    ("tool_selection", "requests.jsonl", {"tools": str(EX / "tools.yaml")}, {"length"}),
    ("proactive_timing", "interruptions.jsonl", {}, set()),
    ("memory_lifespan", "memories.jsonl", {}, set()),
    ("memory_assistance", "memories.jsonl", {"form": "object"}, set()),
]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    return Embedder(EmbedderConfig(), cache_dir=str(tmp_path_factory.mktemp("emb")))


def settings(**kw: Any) -> IntrospectConfig:
    return IntrospectConfig(**{"cache_dir": None, "progress": "off", **kw})


def audit(folder: Path, out: Path, embedder: Embedder) -> tuple[int, list[dict[str, Any]]]:
    cfg = AuditConfig(input=str(folder), cache_dir=None, progress="off")
    result = run_config(
        "audit", cfg, out, ctx=RunContext("audit", cfg, out).use(embedder=embedder), quiet=True
    )
    return result.exit_code, read_jsonl(out / "audit.jsonl")


def bank_add(folder: Path, bank: Path, out: Path, embedder: Embedder) -> Any:
    cfg = BankConfig(
        action="add", bank=str(bank), input=str(folder), cache_dir=None, progress="off"
    )
    return run_config(
        "bank", cfg, out, ctx=RunContext("bank", cfg, out).use(embedder=embedder), quiet=True
    )


def funnel_matches_rejects(folder: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The funnel says where the yield went: its refusals are exactly the rejects, by reason."""
    f = manifest[NAME]["funnel"]
    rejects = read_jsonl(folder / "rejects.jsonl")
    assert f["records"] == manifest["counts"]["accepted"]
    assert f["refused_by"] == dict(Counter(f"{r['stage']}.{r['reason']}" for r in rejects))
    assert f["records"] + sum(f["refused_by"].values()) == manifest["counts"]["requested"]
    return f


def audited_and_banked(
    folder: Path, tmp_path: Path, embedder: Embedder, allowed: set[str]
) -> tuple[list[dict[str, Any]], Any]:
    """The real audit passes the run (only warnings of ``allowed`` checks) and ``bank add`` takes
    every record as an MCQ item, or refuses it as a duplicate by reason."""
    code, findings = audit(folder, tmp_path / "audit", embedder)
    assert code == 0, findings
    assert {f["check"] for f in findings} <= allowed, [f["what"] for f in findings]
    assert all(f["severity"] == "warning" for f in findings)
    records = read_jsonl(folder / f"{NAME}.jsonl")
    added = bank_add(folder, tmp_path / "bank", tmp_path / "bankrun", embedder)
    assert added.exit_code == 0 and added.accepted + added.rejected == len(records)
    assert added.accepted >= 1
    refused = read_jsonl(tmp_path / "bankrun" / "rejects.jsonl")
    assert {r["reason"] for r in refused} <= {"duplicate", "near_duplicate"}, refused
    lock = json.loads((tmp_path / "bank" / "current" / LOCK).read_text())
    assert lock["items"] == added.accepted and set(lock["counts"]) == {"mcq"}
    return findings, added


@pytest.mark.parametrize(
    ("task", "file", "extra", "allowed"), FAMILIES, ids=[f[0] for f in FAMILIES]
)
def test_each_code_built_family_passes_the_real_audit_and_enters_the_bank(
    tmp_path: Path,
    minilm: Embedder,
    task: str,
    file: str,
    extra: dict[str, Any],
    allowed: set[str],
) -> None:
    out = tmp_path / task
    result = run_config(NAME, settings(task=task, input=str(EX / file), **extra), out, quiet=True)
    m = check_run_folder(out, NAME, result.requested, hydra=False)
    assert result.accepted >= 1
    funnel_matches_rejects(out, m)
    audited_and_banked(out, tmp_path, minilm, allowed)


def test_the_cli_runs_a_family_then_audit_and_bank_add(tmp_path: Path, run_gen) -> None:
    """The same path through ``python -m gen``: introspect, audit, bank add (exit codes, files)."""
    out = tmp_path / "run"
    proc = run_gen(
        NAME,
        "task=memory_lifespan",
        f"input={EX / 'memories.jsonl'}",
        "progress=off",
        f"hydra.run.dir={out}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = check_run_folder(out, NAME, 6)
    assert funnel_matches_rejects(out, m)["refused_by"] == {"label.lifespan_conflict": 1}
    proc = run_gen("audit", f"input={out}", "progress=off", f"hydra.run.dir={tmp_path / 'a'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "a" / "audit.json").read_text())["summary"]["exit_code"] == 0
    proc = run_gen(
        "bank",
        "add",
        f"bank={tmp_path / 'bank'}",
        f"input={out}",
        "progress=off",
        f"hydra.run.dir={tmp_path / 'b'}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert check_run_folder(tmp_path / "b", "bank", 5)["counts"]["accepted"] == 5


def test_memory_assistance_event_form_with_the_embedded_model(tmp_path: Path, run_gen) -> None:
    """SmolLM2-135M writes the wrong options in the candidates sub-run: each item ends as a record
    or as the sub-run's reject with its typed reason, and the funnel counts both."""
    out = tmp_path / "run"
    proc = run_gen(
        NAME,
        "task=memory_assistance",
        "form=event",
        "n=2",
        "event_attempts=2",
        f"input={EX / 'memories.jsonl'}",
        "progress=off",
        f"hydra.run.dir={out}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = check_run_folder(out, NAME, 2)
    f = funnel_matches_rejects(out, m)
    assert all(r.startswith("candidates.") for r in f["refused_by"])
    sub = json.loads((out / "candidates" / "manifest.json").read_text())
    assert sub["llm"]["backend"] == "llama_cpp" and sub["llm_usage"]["calls"] >= 2
    assert sub["counts"]["accepted"] == f["records"]
    for r in read_jsonl(out / "rejects.jsonl"):
        assert r["detail"].startswith("item P09-mall/") and r["reason"]
    for r in read_jsonl(out / f"{NAME}.jsonl"):
        assert r["origins"].count("positive") == 1 and len(set(r["options"])) == 4


def test_memory_assistance_event_records_pass_the_audit_and_enter_the_bank(
    tmp_path: Path, minilm: Embedder
) -> None:
    """Event-form records from the scripted writer (the real embedder in the sub-run's checks),
    both forms in one run: the audit's only findings are the privileged_in_other_item warnings of
    overlapping windows (a line one item hides as a wrong option's source shows in a neighbour's
    clip, where the paper's distractors come from), and the bank takes every record."""
    out = tmp_path / "run"
    c = settings(task="memory_assistance", input=str(EX / "memories.jsonl"))
    ctx = RunContext(NAME, c, out).use(llm=scripted_llm(event_writer), embedder=minilm)
    result = run_config(NAME, c, out, ctx=ctx, quiet=True)
    m = check_run_folder(out, NAME, result.requested, hydra=False)
    f = funnel_matches_rejects(out, m)
    assert f["records_by_question_type"].get("memory_assistance_event", 0) >= 2
    findings, added = audited_and_banked(out, tmp_path, minilm, {"leakage"})
    records = {r["item_id"]: r for r in read_jsonl(out / f"{NAME}.jsonl")}
    for x in findings:
        assert x["kind"] == "privileged_in_other_item"
        a, b = (records[i] for i in x["items"])
        assert a["group"] == b["group"] and a["window"]["start"] < b["window"]["end"]
        assert b["window"]["start"] < a["window"]["end"]  # the two clips overlap
        assert x["fields"][0].startswith("privileged.sources.")  # never the answer
    assert added.accepted == len(records) - added.rejected
