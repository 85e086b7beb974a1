"""The versioned bank: content ids, add (duplicates, near-duplicates, audit gate, force),
versions and hard links, verify (every kind of drift), export layouts, SIGKILL during add in a
real subprocess, ids across processes, and the CLI's action word.

Most tests run the registered ``audit`` through a stand-in (:func:`standin_audit`, same name,
``input=``/``fail_on=`` options and ``audit.json`` output) so that findings can be planted
exactly; ``test_real_audit_*`` run the real one when it is registered."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import bank_state, check_run_folder, gen_env, read_jsonl
from pydantic import model_validator

import generators  # noqa: F401  (fills the registry)
from gen.cli import action_word, validate
from gen.errors import ConfigError, GenError, InputError, MissingInputError
from gen.mcq import egotom_columns, load_bank
from gen.run import REGISTRY, CommonConfig, Generator, RunContext, output_hashes, run
from generators.audit.registry import check_keys
from generators.bank import BankConfig, plan
from generators.bank import add as bank_add
from generators.bank.add import near_duplicates
from generators.bank.batch import read_csv_rows
from generators.bank.identity import (
    KINDS,
    content_id,
    egotom_row_mcq,
    item_id_of,
    mcq_identity,
    record_mcq,
    strip_ids,
)
from generators.bank.store import FAULT_ENV, LOCK, label, leftovers, read_pointer, version_dir
from generators.bank.verify import verify_bank

HERE = Path(__file__).resolve().parent
WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ri", "so", "tu", "va", "ze")
         for b in ("bar", "cen", "dol", "fin", "gat", "hum", "jor", "kel", "lin", "mop")]


# --------------------------------------------------------------------------- fixtures: inputs


def mcq(i: int, qtype: str = "goal", *, seed: int = 0, n_options: int = 3) -> dict[str, Any]:
    """A valid MCQ record with its own words (distinct items share little vocabulary)."""
    r = random.Random(f"{qtype}/{i}")
    ctx = "\n".join(f"    0{k}m:1{k}s | #C C {' '.join(r.sample(WORDS, 5))}" for k in range(4))
    opts = [f"To {' '.join(r.sample(WORDS, 3))}" for _ in range(n_options)]
    answer = i % n_options
    return {"item_id": hashlib.sha256(f"{seed}/{qtype}/{i}".encode()).hexdigest()[:32], "question_type": qtype,
            "question": "What is C's future goal?", "options": opts, "answer": answer, "group": f"clip{i}",
            "origins": ["truth" if k == answer else "counterfactual" for k in range(n_options)],
            "visible": {"context": ctx}, "privileged": {"truth": "hidden state " + str(i)},
            "vuid": f"video{i}", "clip_id": f"video{i}~pass_1~0-{i}", "clip_start_time": 1.5, "clip_end_time": 9.0 + i}


def paraphrase(rec: dict[str, Any]) -> dict[str, Any]:
    """The same item reworded a little (one word of one option and of the context)."""
    p = json.loads(json.dumps(rec))
    p["options"][0] = p["options"][0] + " soon"
    p["visible"]["context"] = p["visible"]["context"].replace("#C C", "#C C then", 1)
    p["item_id"] = hashlib.sha256(("para" + rec["item_id"]).encode()).hexdigest()[:32]
    return p


def run_folder(out: Path, records: list[dict[str, Any]], generator: str = "tom",
               extra: dict[str, Any] | None = None) -> Path:
    """A finished run folder: records, rejects, extra JSON files and a manifest with prompt
    hashes and output hashes (so the audit's integrity check applies)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{generator}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (out / "rejects.jsonl").write_text("", encoding="utf-8")
    for name, obj in (extra or {}).items():
        (out / name).write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    manifest = {"generator": generator, "toolkit_version": "0.1.0", "seed": 0, "config": {},
                "llm": {"backend": "llama_cpp", "model": "smollm2.gguf", "model_sha256": "b" * 64},
                "prompts": {f"{generator}/goals.jinja": "a" * 64, f"{generator}/_system.jinja": "c" * 64},
                "inputs": {}, "counts": {"requested": len(records), "accepted": len(records), "rejected": 0}}
    manifest["outputs"] = output_hashes(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


class FakeEmbedder:
    """Bag of words, hashed into 256 dimensions, L2-normalised: rewording one word of an item
    keeps the cosine near 1; items with other words are far apart."""

    dim = 256

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def describe(self) -> dict[str, Any]:
        return {"backend": "fake", "model": "bag-of-words"}


# --------------------------------------------------------------------------- the audit stand-in


class StandInAuditConfig(CommonConfig):
    fail_on: str = "error"
    roles: str | None = None
    findings: list[dict[str, Any]] = []
    """Findings to report, planted by the test through audit_options."""

    @model_validator(mode="after")
    def _one(self) -> StandInAuditConfig:
        if self.input is None:
            raise ValueError("input= is required")
        self.n = 1
        return self


RANK = {"info": 0, "warning": 1, "error": 2}


def _standin(cfg: StandInAuditConfig, ctx: RunContext) -> Iterator[list[Any]]:
    """Audit stand-in: reports the planted findings; exit code 1 at or above fail_on."""
    cfg.input_path()
    seen = [str(p) for p in Path(cfg.input).iterdir()] if Path(cfg.input).is_dir() else [cfg.input]
    fails = cfg.fail_on != "never" and any(RANK[f["severity"]] >= RANK[cfg.fail_on] for f in cfg.findings)
    ctx.exit_code = int(fails)
    sev = {s: sum(f["severity"] == s for f in cfg.findings) for s in ("error", "warning", "info")}
    ctx.write_json("audit.json", {"input": cfg.input, "seen": seen,
                                  "summary": {"findings": len(cfg.findings), "by_severity": sev,
                                              "fail_on": cfg.fail_on, "exit_code": ctx.exit_code},
                                  "checks": [{"id": 1, "key": "structure", "status": "ran",
                                              "findings": sev}],
                                  "findings": cfg.findings})
    yield []


def standin_audit() -> Generator:
    real = REGISTRY.get("audit")
    REGISTRY["audit"] = Generator("audit", _standin, StandInAuditConfig, "audit stand-in")
    return real


@pytest.fixture(autouse=True)
def audit_standin(request) -> Iterator[None]:
    if request.node.name.startswith("test_real_audit"):
        yield
        return
    real = standin_audit()
    yield
    if real is not None:
        REGISTRY["audit"] = real


LEAK = {"check": "leakage", "check_id": 2, "kind": "answer_in_visible", "severity": "error",
        "what": "The answer appears in the visible context.", "items": ["x1"], "fields": ["visible.context"]}


# --------------------------------------------------------------------------- running the bank


def bank_run(run_dir: Path, **cfg: Any) -> tuple[Any, RunContext]:
    settings = BankConfig(**{"cache_dir": None, "progress": "off", **cfg})
    ctx = RunContext("bank", settings, run_dir)
    ctx.use(embedder=FakeEmbedder())
    return run("bank", settings, run_dir, ctx=ctx, quiet=True), ctx


class Bank:
    """A bank folder in a test, with helpers to add, verify and read it."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "bank"
        self.runs = 0

    def _out(self) -> Path:
        self.runs += 1
        return self.tmp / f"run{self.runs}"

    def add(self, folder: Path, **cfg: Any):
        return bank_run(self._out(), action="add", bank=str(self.root), input=str(folder), **cfg)

    def verify(self, **cfg: Any):
        return bank_run(self._out(), action="verify", bank=str(self.root), **cfg)

    def export(self, fmt: str, **cfg: Any):
        return bank_run(self._out(), action="export", bank=str(self.root), format=fmt, **cfg)

    @property
    def current(self) -> int | None:
        return read_pointer(self.root)

    def lock(self, version: int | None = None) -> dict[str, Any]:
        return json.loads((version_dir(self.root, version or self.current) / LOCK).read_text())

    def frame(self, kind: str, version: int | None = None) -> pl.DataFrame:
        return pl.read_parquet(version_dir(self.root, version or self.current) / f"{kind}.parquet")

    def ids(self, version: int | None = None) -> set[str]:
        out: set[str] = set()
        for kind in KINDS:
            p = version_dir(self.root, version or self.current) / f"{kind}.parquet"
            if p.is_file():
                out |= set(pl.read_parquet(p)["item_id"].to_list())
        return out


def ids_of(records: list[dict[str, Any]]) -> list[str]:
    return [item_id_of("mcq_record", r) for r in records]


# --------------------------------------------------------------------------- ids


def test_id_ignores_run_specific_fields_and_option_order() -> None:
    rec = mcq(1)
    other = json.loads(json.dumps(rec))
    other.update(item_id="f" * 32, group="another clip", privileged={"truth": "x"}, clip_start_time=99.0)
    order = [2, 0, 1]  # reshuffled options, the same answer text
    other["options"] = [rec["options"][k] for k in order]
    other["answer"] = order.index(rec["answer"])
    other["origins"] = [rec["origins"][k] for k in order]
    other["question"] = "  What is C's   future goal? "  # whitespace only
    assert item_id_of("mcq_record", other) == item_id_of("mcq_record", rec)
    assert re.fullmatch(r"[0-9a-f]{32}", item_id_of("mcq_record", rec))


@pytest.mark.parametrize("change", ["question", "option", "answer", "context", "question_type"])
def test_id_changes_with_what_the_candidate_sees(change: str) -> None:
    rec = mcq(1)
    other = json.loads(json.dumps(rec))
    if change == "question":
        other["question"] = "What will C do next?"
    elif change == "option":
        other["options"][1] += " quickly"
    elif change == "answer":
        other["answer"] = (rec["answer"] + 1) % 3
    elif change == "context":
        other["visible"]["context"] += "\n    09m:00s | #C C waves"
    else:
        other["question_type"] = "belief"
    assert item_id_of("mcq_record", other) != item_id_of("mcq_record", rec)


def test_id_is_the_documented_hash() -> None:
    """Anyone can recompute an id: SHA-256 of the canonical JSON of the identity, 32 hex."""
    rec = mcq(3)
    ident = {"question_type": "goal", "question": rec["question"],
             "visible": {"visible.context": " ".join(rec["visible"]["context"].split())},
             "options": sorted(rec["options"]), "answer": rec["options"][rec["answer"]]}
    text = json.dumps(ident, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert item_id_of("mcq_record", rec) == hashlib.sha256(text.encode()).hexdigest()[:32]


def test_egotom_row_reads_as_gen_mcq_does(tmp_path: Path) -> None:
    rows = [{"vuid": "v1", "cuid": "v1~pass_1~0-9", "narrations_in_context": "    00m:01s | #C C opens the door",
             "gt_goal": "To leave", "goal_choice_a": "To cook", "goal_choice_b": " To leave ", "goal_choice_c": "To sleep",
             "clip_start_time": "0.0", "clip_end_time": "9.5"},
            {"vuid": "v2", "cuid": "v2~pass_1~3-4", "narrations_in_context": "", "gt_goal": "missing",
             "goal_choice_a": "a", "goal_choice_b": "b", "goal_choice_c": None, "clip_start_time": "1", "clip_end_time": "2"}]
    path = tmp_path / "egotom_goal_shuffled.csv"
    pl.DataFrame(rows, schema=dict.fromkeys(egotom_columns("goal"), pl.String)).write_csv(path)
    theirs = load_bank(path).items
    mine = [egotom_row_mcq(r) for r in read_csv_rows(path)]
    assert [mcq_identity(q) for q in mine] == [mcq_identity(q) for q in theirs]
    assert mine[0].answer == 1 and mine[1].answer is None


@pytest.fixture(scope="module")
def digital_run(tmp_path_factory) -> Path:
    """A digital run folder (one cued bundle) made by the digital generator with the scripted
    LLM of tests/digital_runs.py."""
    from digital_runs import digital_script, run_digital, write_pool

    tmp = tmp_path_factory.mktemp("digital")
    out = tmp / "run"
    result, _ = run_digital(out, write_pool(tmp / "pool.jsonl"), digital_script(), n=1, cue_rate=1.0)
    assert result.accepted == 1
    return out


def test_digital_id_ignores_seed_derived_ids(digital_run: Path) -> None:
    b = read_jsonl(digital_run / "digital.jsonl")[0]
    renamed = json.loads(json.dumps(b).replace(b["bundle_id"], "0" * 32))
    for key in ("event_id", "message_id", "persona_id", "track_id"):
        renamed = json.loads(re.sub(rf'"{key}": "[0-9a-f]{{32}}"', f'"{key}": "{"1" * 32}"', json.dumps(renamed)))
    renamed["stats"] = {"chars_total": 1}
    assert renamed != b
    assert item_id_of("digital_bundle", renamed) == item_id_of("digital_bundle", b)
    changed = json.loads(json.dumps(b))
    changed["apps"]["Calendar"]["events"][0]["title"] += "!"
    assert item_id_of("digital_bundle", changed) != item_id_of("digital_bundle", b)
    assert changed["cue"]["cue_id"] and "cue_id" in json.dumps(strip_ids(b))  # a cue id is content, kept


# --------------------------------------------------------------------------- add


def test_first_add_creates_version_one(tmp_path: Path) -> None:
    records = [mcq(i) for i in range(8)]
    folder = run_folder(tmp_path / "tom_a", records)
    bank = Bank(tmp_path)
    result, ctx = bank.add(folder, message="first release")
    assert (result.accepted, result.rejected, result.exit_code) == (8, 0, 0)
    check_run_folder(result.out_dir, "bank", 8, hydra=False)
    assert bank.current == 1 and os.readlink(bank.root / "current") == "versions/v0001"
    df = bank.frame("tom")
    assert df["item_id"].to_list() == ids_of(records)
    assert df["added_in"].to_list() == [1] * 8
    assert [json.loads(r) for r in df["record"].to_list()] == records  # the original records, unchanged
    assert df["options"].to_list() == [r["options"] for r in records]
    assert df["source"].unique().to_list() == [hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()]
    lock = bank.lock()
    assert (lock["version"], lock["label"], lock["schema_revision"], lock["items"]) == (1, "v0001", 1, 8)
    assert lock["counts"] == {"tom": {"items": 8, "by_question_type": {"goal": 8}}}
    assert lock["prompts"] == {"tom/_system.jinja": ["c" * 64], "tom/goals.jinja": ["a" * 64]}
    assert lock["sources"][0]["llm"]["model_sha256"] == "b" * 64
    assert set(lock["files"]) == {"tom.parquet", "CHANGELOG.md", "audit/audit.json", "audit/audit.jsonl",
                                  "audit/rejects.jsonl", "audit/manifest.json"}
    for name, sha in lock["files"].items():
        assert hashlib.sha256((bank.root / "current" / name).read_bytes()).hexdigest() == sha
    assert lock["history"][0]["message"] == "first release"
    # the audit saw the input run folder, through the registry
    audit = json.loads((bank.root / "current" / "audit" / "audit.json").read_text())
    assert audit["input"] == str(folder) and "tom.jsonl" in " ".join(audit["seen"])
    assert "first release" in (bank.root / "current" / "CHANGELOG.md").read_text()


def test_same_batch_twice_adds_nothing(tmp_path: Path) -> None:
    folder = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(6)])
    bank = Bank(tmp_path)
    bank.add(folder)
    lock_before = (bank.root / "current" / LOCK).read_bytes()
    result, ctx = bank.add(folder)
    assert (result.accepted, result.rejected, result.exit_code) == (0, 6, 0)
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert {(r["stage"], r["reason"]) for r in rejects} == {("bank", "duplicate")}
    assert [r["record_id"] for r in rejects] == sorted(bank.ids(), key=[r["record_id"] for r in rejects].index)
    assert all("added in v0001" in r["detail"] for r in rejects)
    assert bank.current == 1 and (bank.root / "current" / LOCK).read_bytes() == lock_before
    assert sorted(p.name for p in (bank.root / "versions").iterdir()) == ["v0001"]
    assert result.manifest["bank"]["released"] is False


def test_duplicates_within_a_batch_and_reshuffled_copies(tmp_path: Path) -> None:
    records = [mcq(i) for i in range(4)]
    copy = json.loads(json.dumps(records[1]))
    copy["options"] = copy["options"][::-1]
    copy["answer"] = 2 - copy["answer"]
    copy["item_id"] = "e" * 32
    folder = run_folder(tmp_path / "tom_a", [*records, copy])
    result, _ = Bank(tmp_path).add(folder)
    assert (result.accepted, result.rejected) == (4, 1)
    (rej,) = read_jsonl(result.out_dir / "rejects.jsonl")
    assert (rej["index"], rej["stage"], rej["reason"]) == (4, "batch", "duplicate")
    assert rej["record_id"] == ids_of(records)[1] and "tom.jsonl:2" in rej["detail"]


def test_paraphrased_batch_is_refused_as_near_duplicates(tmp_path: Path) -> None:
    records = [mcq(i) for i in range(6)]
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", records))
    paraphrased = [paraphrase(r) for r in records[:4]] + [mcq(i) for i in range(6, 8)]
    result, ctx = bank.add(run_folder(tmp_path / "tom_b", paraphrased))
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert [(r["index"], r["stage"], r["reason"]) for r in rejects] == [(i, "bank", "near_duplicate") for i in range(4)]
    for r, orig in zip(rejects, ids_of(records), strict=False):
        cos = float(re.search(r"cosine (\d\.\d+)", r["detail"]).group(1))
        assert cos >= 0.95 and orig in r["detail"] and "v0001" in r["detail"]
    assert result.accepted == 2 and bank.current == 2
    assert bank.ids() == set(ids_of(records)) | set(ids_of(paraphrased[4:]))
    # exact checks only: the paraphrases are new content
    bank2 = Bank(tmp_path / "exact")
    bank2.add(run_folder(tmp_path / "tom_a", records))
    result, _ = bank2.add(run_folder(tmp_path / "tom_b", paraphrased), near_dup_sim=None)
    assert (result.accepted, result.rejected) == (6, 0)


def test_near_duplicates_within_a_batch_keep_the_first(tmp_path: Path) -> None:
    a = mcq(1)
    folder = run_folder(tmp_path / "tom_a", [a, paraphrase(a), mcq(2), paraphrase(paraphrase(a))])
    result, _ = Bank(tmp_path).add(folder)
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert [(r["index"], r["stage"], r["reason"]) for r in rejects] == [(1, "batch", "near_duplicate"),
                                                                        (3, "batch", "near_duplicate")]
    assert all(item_id_of("mcq_record", a) in r["detail"] for r in rejects)


def test_near_duplicates_only_within_a_question_type(tmp_path: Path) -> None:
    goal = mcq(1)
    belief = dict(paraphrase(goal), question_type="belief")
    result, _ = Bank(tmp_path).add(run_folder(tmp_path / "tom_a", [goal, belief]))
    assert (result.accepted, result.rejected) == (2, 0)


def test_near_duplicates_pure() -> None:
    def unit(*v: float) -> list[float]:
        a = np.array(v, dtype=np.float32)
        return list(a / np.linalg.norm(a))

    old = np.array([unit(1, 0, 0)])
    new = np.array([unit(1, 0.1, 0),     # near the bank item
                    unit(0, 1, 0),       # kept
                    unit(0, 1, 0.05),    # near new[1], which was kept
                    unit(0, 0, 1),       # kept
                    unit(0.9, 0.1, 0)])  # near the bank item, not near a refused one
    got = near_duplicates(new, old, 0.99)
    assert [None if m is None else (m.where, m.index) for m in got] == [("bank", 0), None, ("batch", 1), None, ("bank", 0)]
    # a refused item does not refuse its own near copies: only kept ones count
    chain = np.array([unit(1, 0, 0), unit(1, 0.12, 0), unit(1, 0.24, 0)])
    sims = chain @ chain.T
    thr = float(sims[0, 1]) - 1e-4  # 0~1 and 1~2 are near, 0~2 is not
    assert sims[0, 2] < thr
    assert [None if m is None else m.index for m in near_duplicates(chain, None, thr)] == [None, 0, None]
    # the threshold is inclusive
    same = np.array([[1.0, 0, 0], [1.0, 0, 0]])
    assert near_duplicates(same, None, 1.0)[1] is not None


def test_audit_findings_refuse_the_batch(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]))
    folder = run_folder(tmp_path / "tom_b", [mcq(i) for i in range(3, 6)])
    result, ctx = bank.add(folder, audit_options={"findings": [LEAK]})
    assert (result.accepted, result.rejected, result.exit_code) == (0, 3, 1)
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert {(r["stage"], r["reason"]) for r in rejects} == {("audit", "audit_failed")}
    assert "1 finding(s) at or above fail_on=error" in rejects[0]["detail"] and "leakage/answer_in_visible" in rejects[0]["detail"]
    assert bank.current == 1 and len(bank.ids()) == 3
    assert (result.out_dir / "audit" / "audit.json").is_file()  # the report stays in the add's run folder
    # below fail_on: added
    result, _ = bank.add(folder, audit_options={"findings": [dict(LEAK, severity="warning")]})
    assert (result.accepted, result.exit_code, bank.current) == (3, 0, 2)
    assert bank.lock()["history"][-1]["audit"]["by_severity"] == {"error": 0, "warning": 1, "info": 0}


@pytest.mark.skipif(not hasattr(generators, "audit"), reason="the audit generator is not registered")
def test_real_audit_gates_the_batch(tmp_path: Path) -> None:
    """The registered audit (not the stand-in): a clean batch passes, a copied answer refuses."""
    bank = Bank(tmp_path)
    # every check but the text gates, which refuse this file's nonce words ("To kabar lofin …")
    # on their face (tested in test_audit)
    opts = {"checks": [k for k in check_keys() if k != "text"]}
    result, _ = bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(6)]), audit_options=opts)
    assert (result.accepted, result.exit_code, bank.current) == (6, 0, 1)
    leaky = [mcq(i) for i in range(6, 12)]
    leaky[2]["visible"]["context"] += "\n    05m:00s | #C C says: " + leaky[2]["options"][leaky[2]["answer"]]
    result, _ = bank.add(run_folder(tmp_path / "tom_b", leaky), audit_options=opts)
    assert (result.accepted, result.exit_code, bank.current) == (0, 1, 1)
    report = json.loads((result.out_dir / "audit" / "audit.json").read_text())
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors and all(f["items"] == [leaky[2]["item_id"]] for f in errors)
    assert {f["check"] for f in errors} == {"leakage"}
    result, _ = bank.add(run_folder(tmp_path / "tom_c", leaky), force=True, audit_options=opts)
    assert (result.accepted, bank.current) == (6, 2)
    assert "leakage/" in (bank.root / "current" / "CHANGELOG.md").read_text()


def test_force_adds_and_records_the_findings(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    result, _ = bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]),
                         audit_options={"findings": [LEAK]}, force=True)
    assert (result.accepted, result.exit_code, bank.current) == (3, 0, 1)
    entry = bank.lock()["history"][-1]
    assert entry["audit"]["forced"] is True and entry["audit"]["by_severity"]["error"] == 1
    log = (bank.root / "current" / "CHANGELOG.md").read_text()
    assert "FORCED" in log and "error leakage/answer_in_visible: The answer appears in the visible context." in log
    assert "items: x1" in log


def test_fail_on_never_and_info(tmp_path: Path) -> None:
    info = dict(LEAK, severity="info")
    result, _ = Bank(tmp_path / "a").add(run_folder(tmp_path / "tom_a", [mcq(1)]), fail_on="info",
                                         audit_options={"findings": [info]})
    assert result.exit_code == 1
    result, _ = Bank(tmp_path / "b").add(run_folder(tmp_path / "tom_a", [mcq(1)]), fail_on="never",
                                         audit_options={"findings": [LEAK]})
    assert (result.exit_code, result.accepted) == (0, 1)


def test_kinds_versions_and_hard_links(tmp_path: Path, digital_run: Path) -> None:
    bank = Bank(tmp_path)
    tom = [mcq(i) for i in range(4)]
    bank.add(run_folder(tmp_path / "tom_a", tom))
    dis = [dict(mcq(i, "similar", n_options=4), question="Which action?") for i in range(3)]
    bank.add(run_folder(tmp_path / "dis", dis, "distractors"))
    digital = digital_run
    result, _ = bank.add(digital)
    assert (result.accepted, bank.current) == (1, 3)
    v = {k: version_dir(bank.root, k) for k in (1, 2, 3)}
    # untouched kinds are the previous version's file (hard link), touched ones are new files
    assert os.stat(v[1] / "tom.parquet").st_ino == os.stat(v[2] / "tom.parquet").st_ino == os.stat(v[3] / "tom.parquet").st_ino
    assert os.stat(v[2] / "distractors.parquet").st_ino == os.stat(v[3] / "distractors.parquet").st_ino
    assert not (v[2] / "digital.parquet").exists()
    lock = bank.lock()
    assert {k: c["items"] for k, c in lock["counts"].items()} == {"tom": 4, "distractors": 3, "digital": 1}
    assert [h["added"] for h in lock["history"]] == [{"tom": 4}, {"distractors": 3}, {"digital": 1}]
    assert [h["lock_sha256"] for h in lock["history"][:2]] == [
        hashlib.sha256((v[k] / LOCK).read_bytes()).hexdigest() for k in (1, 2)]
    assert lock["history"][2]["lock_sha256"] is None
    assert [s["generator"] for s in lock["sources"]] == ["tom", "distractors", "digital"]
    assert any(k.startswith("digital/") for k in lock["prompts"])  # the digital run's real prompt hashes
    df = bank.frame("digital")
    bundles = read_jsonl(digital / "digital.jsonl")
    assert df["source_item_id"].to_list() == [b["bundle_id"] for b in bundles]
    assert df["cue_app"].to_list() == [b["cue"]["app"] for b in bundles]
    assert df["question_type"].to_list() == [f"cue:{b['cue']['app']}" for b in bundles]
    # existing items never rewritten: v1's rows are in v3 byte for byte
    assert bank.frame("tom", 1).equals(bank.frame("tom", 3))
    assert verify_bank(bank.root)[1][-1].problems == []


def test_append_keeps_old_rows_unchanged(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)]))
    bank.add(run_folder(tmp_path / "tom_b", [mcq(i) for i in range(2, 7)]))
    v1, v2 = bank.frame("tom", 1), bank.frame("tom", 2)
    assert v2.head(4).equals(v1)
    assert v2["added_in"].to_list() == [1, 1, 1, 1, 2, 2, 2]
    assert bank.lock()["history"][-1]["refused"] == {"bank:duplicate": 2}


def test_external_egotom_csvs_are_kind_mcq(tmp_path: Path) -> None:
    folder = tmp_path / "egotom"
    folder.mkdir()
    rows = [{"vuid": f"v{i}", "cuid": f"v{i}~pass_1~0-9", "narrations_in_context": f"    00m:01s | #C C opens door {i}",
             "gt_belief": f"C believes {i}", **{f"belief_choice_{x}": (f"C believes {i}" if x == "b" else f"C doubts {i}{x}")
                                                for x in "abcd"}, "clip_start_time": "0", "clip_end_time": "9"}
            for i in range(3)]
    cols = egotom_columns("belief")
    pl.DataFrame([{c: r[c] for c in cols} for r in rows], schema=dict.fromkeys(cols, pl.String)).write_csv(
        folder / "egotom_belief_shuffled.csv")
    bank = Bank(tmp_path)
    result, _ = bank.add(folder)
    assert result.accepted == 3
    df = bank.frame("mcq")
    assert df["source_format"].unique().to_list() == ["egotom_csv"]
    assert df["answer"].to_list() == [1, 1, 1] and df["source_item_id"].to_list() == [r["cuid"] for r in rows]
    assert bank.lock()["sources"][0]["manifest"] is None  # no run folder: provenance is the file hashes
    result, _ = bank.export("egotom")
    out = result.out_dir / "egotom" / "egotom_belief_shuffled.csv"
    back = pl.read_csv(out, infer_schema_length=0)
    assert back.columns == cols
    assert back.to_dicts() == [{c: r[c] for c in cols} for r in rows]  # the original rows, exactly


def test_any_jsonl_bank_through_a_roles_file(tmp_path: Path) -> None:
    """roles=: a JSONL bank with its own field names is stored as MCQ records (kind mcq) that
    keep each source row; ids are content hashes as for any MCQ; the audit gets the roles file;
    the lock records the roles file's hash; rows the roles file cannot make MCQs of are refused."""
    r = random.Random(3)
    rows = [{"qid": f"q{i}", "prompt": f"Which tool does C need next, {i}?", "kind": "tool", "clip": f"c{i}",
             "choices": [" ".join(r.sample(WORDS, 2)) for _ in range(3)], "gold": "b",
             "scene": {"caption": " ".join(r.sample(WORDS, 6)), "time": f"00:0{i}"},
             "hidden": {"why": f"the next step needs tool {i}"}} for i in range(3)]
    data = tmp_path / "tools.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in rows))
    roles = tmp_path / "roles.yaml"
    roles.write_text("id: qid\nquestion: prompt\nvisible: [scene]\nprivileged: [hidden]\noptions: choices\n"
                     "answer: gold\nanswer_format: letter\ngroup: clip\nquestion_type: kind\n")
    bank = Bank(tmp_path)
    result, ctx = bank.add(data, roles=str(roles), near_dup_sim=None)
    assert result.accepted == 3 and bank.current == 1
    df = bank.frame("mcq")
    assert df["source_item_id"].to_list() == ["q0", "q1", "q2"] and df["answer"].to_list() == [1, 1, 1]
    stored = [json.loads(x) for x in df["record"].to_list()]
    assert [s["source_row"] for s in stored] == rows
    assert stored[0]["visible"] == {"scene.caption": rows[0]["scene"]["caption"], "scene.time": "00:00"}
    assert stored[0]["privileged"] == {"hidden.why": "the next step needs tool 0"}
    assert stored[0]["question"] == rows[0]["prompt"] and stored[0]["group"] == "c0"
    expected = {content_id(mcq_identity(record_mcq("mcq_record", s))) for s in stored}
    assert set(df["item_id"].to_list()) == expected
    assert bank.lock()["sources"][0]["roles"]["sha256"] == hashlib.sha256(roles.read_bytes()).hexdigest()
    audit = json.loads((ctx.out_dir / "audit" / "manifest.json").read_text())
    assert audit["config"]["roles"] == str(roles)
    assert bank.add(data, roles=str(roles), near_dup_sim=None)[0].accepted == 0  # same items again
    assert bank.verify()[0].exit_code == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "gold": "z"}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:2: gold"):
        bank.add(bad, roles=str(roles))
    with pytest.raises(InputError, match="one JSONL file"):
        plan(validate("bank", ["action=add", f"bank={bank.root}", f"input={tmp_path}", f"roles={roles}"]))


def test_a_nocontext_run_gives_its_kept_items_and_both_prompt_sets(tmp_path: Path) -> None:
    """tom -> nocontext (keeps what blind models cannot answer) -> bank: the lock holds the
    nocontext run's answer templates and, one level up, the tom run's prompts."""
    records = [mcq(i) for i in range(5)]
    tom_run = run_folder(tmp_path / "tom_run", records)
    nc = tmp_path / "nocontext_run"
    (nc / "kept").mkdir(parents=True)
    (nc / "kept" / "tom.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:3]), encoding="utf-8")
    (nc / "nocontext.jsonl").write_text("".join(json.dumps({"item_id": r["item_id"]}) + "\n" for r in records),
                                        encoding="utf-8")
    manifest = {"generator": "nocontext", "prompts": {"nocontext/choices_only.jinja": "d" * 64},
                "inputs": {str(tom_run / "tom.jsonl"): "x"}, "outputs": output_hashes(nc)}
    (nc / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    bank = Bank(tmp_path)
    result, _ = bank.add(nc)
    assert result.accepted == 3 and bank.ids() == set(ids_of(records[:3]))
    lock = bank.lock()
    assert set(lock["counts"]) == {"tom"}
    assert lock["prompts"] == {"nocontext/choices_only.jinja": ["d" * 64], "tom/_system.jinja": ["c" * 64],
                               "tom/goals.jinja": ["a" * 64]}
    (src,) = lock["sources"]
    assert src["generator"] == "nocontext" and src["records"] == {
        "kept/tom.jsonl": hashlib.sha256((nc / "kept" / "tom.jsonl").read_bytes()).hexdigest()}
    assert [u["generator"] for u in src["upstream"]] == ["tom"]


# --------------------------------------------------------------------------- atomicity (in process)


def test_leftovers_are_ignored_by_readers_and_removed_by_the_next_add(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]))
    (bank.root / "versions" / ".staging-v0002-999").mkdir()
    (bank.root / "versions" / ".staging-v0002-999" / "tom.parquet").write_bytes(b"half")
    shutil.copytree(version_dir(bank.root, 1), bank.root / "versions" / "v0002")  # renamed, never made current
    os.symlink("versions/v0002", bank.root / ".current.tmp-999")
    result, _ = bank.verify()
    assert result.exit_code == 0
    assert result.manifest["bank"]["leftovers"] == [".current.tmp-999", "versions/.staging-v0002-999", "versions/v0002"]
    result, ctx = bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))
    assert bank.current == 2 and ctx.stats["leftovers_removed"] == 3
    assert sorted(p.name for p in (bank.root / "versions").iterdir()) == ["v0001", "v0002"]
    assert not list(bank.root.glob(".current.tmp-*"))
    assert bank.verify()[0].exit_code == 0 and len(bank.ids()) == 4


def test_a_failure_while_staging_leaves_the_old_version(tmp_path: Path, monkeypatch) -> None:
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]))

    def boom(*a: Any, **k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(bank_add, "make_lock", boom)
    with pytest.raises(OSError, match="disk full"):
        bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))
    monkeypatch.undo()
    assert bank.current == 1 and bank.verify()[0].exit_code == 0
    assert bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))[0].accepted == 1 and bank.current == 2


# --------------------------------------------------------------------------- verify


@pytest.fixture
def grown(tmp_path: Path) -> Bank:
    """A bank in two releases (the second touches tom again, so v1 and v2 have their own files)."""
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)]))
    bank.add(run_folder(tmp_path / "tom_b", [mcq(i) for i in range(4, 7)]))
    return bank


def problems(bank: Bank) -> list[tuple[str, str]]:
    result, _ = bank.verify()
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert result.exit_code == (1 if rejects else 0)
    return [(r["record_id"], r["reason"]) for r in rejects]


def test_verify_clean(grown: Bank) -> None:
    result, _ = grown.verify()
    assert (result.exit_code, result.rejected) == (0, 0)
    manifest = check_run_folder(result.out_dir, "bank", 2, hydra=False, one_per_index=False)
    records = read_jsonl(result.out_dir / "bank.jsonl")
    assert {(r["version"], r["file"]) for r in records} == {(label(v), f) for v in (1, 2)
                                                           for f in grown.lock(v)["files"]}
    assert manifest["bank"]["lock_sha256"] == hashlib.sha256((grown.root / "current" / LOCK).read_bytes()).hexdigest()


def flip_byte(path: Path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    k = len(data) // 2 if at is None else at
    data[k] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_catches_a_one_byte_change(grown: Bank) -> None:
    flip_byte(grown.root / "current" / "tom.parquet")
    assert ("versions/v0002/tom.parquet", "hash_mismatch") in problems(grown)


def test_verify_catches_a_one_byte_change_in_an_old_version(grown: Bank) -> None:
    flip_byte(grown.root / "versions" / "v0001" / "CHANGELOG.md", at=5)
    assert problems(grown) == [("versions/v0001/CHANGELOG.md", "hash_mismatch")]


def test_verify_catches_an_edited_old_lock(grown: Bank) -> None:
    lock = grown.root / "versions" / "v0001" / LOCK
    lock.write_text(lock.read_text().replace('"items": 4', '"items": 4 '))
    assert problems(grown) == [("versions/v0001/MANIFEST.lock.json", "hash_mismatch")]


@pytest.mark.parametrize(("field", "value"), [("history", ["v1", "v2"]), ("counts", [4]), ("files", "all"),
                                            ("counts", {"tom": 4}), ("history", [{"version": "one"}, {}])])
def test_a_lock_of_the_wrong_shape_is_a_problem_not_a_crash(grown: Bank, field: str, value: Any) -> None:
    """A lock edited by hand into valid JSON of the wrong shape is named (bad_lock, with the field),
    for the newest and for an old version, and export refuses the bank (exit 1, as verify)."""
    for version in (2, 1):
        path = version_dir(grown.root, version) / LOCK
        original = path.read_text()
        lock = json.loads(original)
        lock[field] = value
        path.write_text(json.dumps(lock, indent=1))
        result, _ = grown.verify()
        assert result.exit_code == 1
        bad = [r for r in read_jsonl(result.out_dir / "rejects.jsonl") if r["reason"] == "bad_lock"]
        assert len(bad) == 1 and field in bad[0]["detail"], bad
        with pytest.raises(GenError, match=rf"DRIFT versions/v000{version}/MANIFEST.lock.json: bad_lock") as e:
            grown.export("parquet")
        assert e.value.exit_code == 1
        path.write_text(original)
    assert grown.verify()[0].exit_code == 0


def test_verify_catches_added_and_removed_files(grown: Bank) -> None:
    (grown.root / "current" / "notes.txt").write_text("hello")
    (grown.root / "current" / "audit" / "audit.json").unlink()
    assert sorted(problems(grown)) == [("versions/v0002/audit/audit.json", "missing_file"),
                                       ("versions/v0002/notes.txt", "unexpected_file")]


def _rewrite(bank: Bank, version: int, change) -> None:
    """Rewrite a version's tom.parquet and fix its lock's hash and counts: drift that the file
    hashes alone cannot see (the lock was edited to match)."""
    folder = version_dir(bank.root, version)
    df = change(pl.read_parquet(folder / "tom.parquet"))
    (folder / "tom.parquet").unlink()  # do not write through a hard link
    df.write_parquet(folder / "tom.parquet")
    lock = json.loads((folder / LOCK).read_text())
    lock["files"]["tom.parquet"] = hashlib.sha256((folder / "tom.parquet").read_bytes()).hexdigest()
    lock["counts"]["tom"]["items"] = df.height
    (folder / LOCK).write_text(json.dumps(lock, indent=1))


def test_verify_catches_an_edited_record_even_with_a_matching_lock(grown: Bank) -> None:
    def edit(df: pl.DataFrame) -> pl.DataFrame:
        rec = json.loads(df["record"][5])
        rec["options"][0] = "To do something else"
        return df.with_columns(pl.Series("record", [*df["record"][:5], json.dumps(rec), *df["record"][6:]]))

    _rewrite(grown, 2, edit)
    assert ("versions/v0002/tom.parquet", "item_id_mismatch") in problems(grown)


def test_verify_catches_a_removed_or_rewritten_old_item(grown: Bank) -> None:
    _rewrite(grown, 2, lambda df: df.filter(pl.col("item_id") != df["item_id"][0]))
    assert ("versions/v0002", "removed_item") in problems(grown)


def test_verify_catches_a_moved_pointer(grown: Bank) -> None:
    os.remove(grown.root / "current")
    os.symlink("versions/v0009", grown.root / "current")
    found = problems(grown)
    assert ("current", "bad_pointer") in found


def test_verify_reads_a_pointer_file(grown: Bank) -> None:
    """A checkout without symlinks (git on Windows) has ``current`` as a file holding the target."""
    os.remove(grown.root / "current")
    (grown.root / "current").write_text("versions/v0002\n")
    assert problems(grown) == [] and grown.current == 2


def test_verify_an_older_version(grown: Bank) -> None:
    flip_byte(grown.root / "current" / "tom.parquet")
    result, _ = grown.verify(version=1)
    assert (result.exit_code, result.requested) == (0, 1)


# --------------------------------------------------------------------------- export


def test_export_parquet_with_dataset_card(grown: Bank) -> None:
    result, _ = grown.export("parquet")
    out = result.out_dir / "parquet"
    lock = grown.lock()
    assert sorted(p.name for p in out.iterdir()) == ["EXPORT.json", "MANIFEST.lock.json", "README.md",
                                                     "croissant.json", "tom.parquet"]
    assert hashlib.sha256((out / "tom.parquet").read_bytes()).hexdigest() == lock["files"]["tom.parquet"]
    assert (result.accepted, result.requested) == (7, 7)
    card = (out / "README.md").read_text()
    assert card.startswith("---\nconfigs:\n- config_name: tom\n  data_files: tom.parquet\n---\n")
    assert "| tom | goal | 7 |" in card
    assert "| v0001 |" in card and "| v0002 |" in card
    assert "| tom/goals.jinja | " + "a" * 64 + " |" in card  # provenance: prompt hashes
    assert "smollm2.gguf" in card
    assert "## Last audit" in card and "| 1 | structure | ran | 0 | 0 | 0 |" in card
    assert hashlib.sha256((grown.root / "current" / LOCK).read_bytes()).hexdigest() in card


def test_export_wagibench_layouts(tmp_path: Path, digital_run: Path) -> None:
    bank = Bank(tmp_path)
    dis = [dict(mcq(i, "similar", n_options=4), question="Which action?",
                privileged={"reference_goal_id": f"g{i}", "structured_goal": {"type": "shop", "content": f"milk {i}"}})
           for i in range(3)]
    layout = [{"x": {"client_tag": f"obs{i}", "context_window": {"start_s": 1, "end_s": 2}, "cues": [],
                     "mcq_set": [{"type": "shop", "content": f"o{k}"} for k in range(4)]},
               "y": d["answer"], "meta": {"client_tag": f"obs{i}", "scenario": {"shortname": "s"},
                                          "item_id": d["item_id"], "question_type": "similar"}}
              for i, d in enumerate(dis[:2])]  # the third has no layout row: built from its record
    bank.add(run_folder(tmp_path / "dis", dis, "distractors", extra={"wagibench_mcq_similar.json": layout}))
    digital = digital_run
    bank.add(digital)
    result, _ = bank.export("wagibench")
    out = result.out_dir / "wagibench"
    assert sorted(p.name for p in out.iterdir()) == ["EXPORT.json", "digital_state.json", "wagibench_mcq_similar.json"]
    rows = json.loads((out / "wagibench_mcq_similar.json").read_text())
    ids = ids_of(dis)
    assert [r["meta"]["item_id"] for r in rows] == ids
    assert [r["meta"]["source_item_id"] for r in rows] == [d["item_id"] for d in dis]
    assert rows[0]["x"] == layout[0]["x"] and rows[0]["y"] == dis[0]["answer"]
    built = rows[2]
    assert built["y"] == dis[2]["answer"] and len(built["x"]["mcq_set"]) == 4
    assert built["x"]["mcq_set"][dis[2]["answer"]] == {"type": "shop", "content": "milk 2"}
    state = json.loads((out / "digital_state.json").read_text())
    bundles = read_jsonl(digital / "digital.jsonl")
    from generators.digital.export import wagibench_record

    for b in bundles:
        bid = item_id_of("digital_bundle", b)
        expected = wagibench_record({**b, "bundle_id": bid})
        assert state[bid]["x"] == expected["x"] and state[bid]["meta"]["client_tag"] == bid
        assert state[bid]["meta"]["source_item_id"] == b["bundle_id"]
    assert result.accepted == 4


def test_export_egotom_columns_and_unfit_items(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    good = [mcq(i) for i in range(3)]
    four = mcq(7, n_options=4)
    other = mcq(8, "who")
    bank.add(run_folder(tmp_path / "tom_a", [*good, four, other]))
    result, _ = bank.export("egotom")
    assert (result.accepted, result.rejected) == (3, 2)
    rejects = {r["reason"] for r in read_jsonl(result.out_dir / "rejects.jsonl")}
    assert rejects == {"wrong_option_count", "not_egotom_type"}
    df = pl.read_csv(result.out_dir / "egotom" / "egotom_goal_shuffled.csv", infer_schema_length=0)
    assert df.columns == egotom_columns("goal")
    assert df["cuid"].to_list() == [r["clip_id"] for r in good]
    assert df["gt_goal"].to_list() == [r["options"][r["answer"]] for r in good]
    assert df["goal_choice_b"].to_list() == [r["options"][1] for r in good]
    assert df["narrations_in_context"].to_list() == [r["visible"]["context"] for r in good]
    # and EgoToM's loader reads it back to the same items
    back = load_bank(result.out_dir / "egotom" / "egotom_goal_shuffled.csv").items
    assert [q.answer_text for q in back] == df["gt_goal"].to_list()


def test_export_an_older_version(grown: Bank) -> None:
    result, _ = grown.export("parquet", version=1)
    assert result.requested == 4
    assert pl.read_parquet(result.out_dir / "parquet" / "tom.parquet")["added_in"].to_list() == [1] * 4


def test_export_refuses_a_drifted_bank(grown: Bank) -> None:
    """Exit code 1 with verify's own line (it was exit 2 before; drift is verify's exit 1)."""
    flip_byte(grown.root / "current" / "tom.parquet")
    with pytest.raises(GenError, match="DRIFT versions/v0002/tom.parquet: hash_mismatch") as e:
        grown.export("parquet")
    assert e.value.exit_code == 1


# --------------------------------------------------------------------------- config and CLI


def test_action_word() -> None:
    assert action_word("bank", ["add", "bank=x"]) == ["action=add", "bank=x"]
    assert action_word("bank", ["bank=x", "add"]) == ["bank=x", "add"]  # only right after the name
    assert action_word("bank", ["-m", "x=1"]) == ["-m", "x=1"]
    assert action_word("bank", ["+x=1"]) == ["+x=1"]
    assert action_word("personas", ["add", "n=1"]) == ["add", "n=1"]  # no action field
    assert action_word("bank", []) == []


def test_config_errors(tmp_path: Path) -> None:
    from gen.cli import validate_jobs

    def validate(name: str, overrides: list[str]):  # what the command checks before a run: config and plan
        (job,) = validate_jobs(name, overrides, multirun=False)
        return job

    with pytest.raises(ConfigError, match="bank= is required"):
        validate("bank", ["action=verify"])
    with pytest.raises(MissingInputError, match="no released version"):
        validate("bank", ["action=verify", f"bank={tmp_path / 'none'}"])
    with pytest.raises(ConfigError, match="input= is required"):
        validate("bank", ["action=add", f"bank={tmp_path}"])
    with pytest.raises(MissingInputError, match="no such file"):
        validate("bank", ["action=add", f"bank={tmp_path}", f"input={tmp_path / 'nope'}"])
    with pytest.raises(ConfigError, match="unknown option|action"):
        validate("bank", ["action=grow", f"bank={tmp_path}"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tom.jsonl").write_text(json.dumps(mcq(1)) + "\n" + json.dumps({**mcq(2), "answer": 7}) + "\n")
    job = validate("bank", ["action=add", f"bank={tmp_path / 'b'}", f"input={bad}"])
    assert job.plan.n == 2
    with pytest.raises(InputError, match=r"tom.jsonl:2: not an MCQ record"):
        Bank(tmp_path).add(bad)
    with pytest.raises(ConfigError, match="choose an action"):
        validate("bank", [f"bank={tmp_path}"])


def _cli_command(tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``python -m gen`` in a child process, with this file's audit stand-in registered."""
    code = ("import sys, test_bank; test_bank.standin_audit(); from gen.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    base = gen_env(tmp / "cache")
    base["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), base["PYTHONPATH"]])
    return [sys.executable, "-c", code, *args], {**base, **(env or {})}


def _cli(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    argv, full_env = _cli_command(tmp, *args, env=env)
    return subprocess.run(argv, cwd=tmp, env=full_env, capture_output=True, text=True, timeout=300)


def test_two_adds_at_once_take_turns(tmp_path: Path) -> None:
    """Two ``bank add`` processes at once with overlapping batches (items 2 and 3 in both): while
    the bank's lock is held neither commits; then one releases v0001 and the other v0002 on top
    of it, adding only what is new. No item twice, no version lost, verify clean."""
    import fcntl
    import time

    batches = [run_folder(tmp_path / "a", [mcq(i) for i in range(0, 4)]),
               run_folder(tmp_path / "b", [mcq(i) for i in range(2, 6)])]
    root = tmp_path / "bank"
    root.mkdir()
    procs = []
    with open(root / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running add would
        for k, folder in enumerate(batches):
            argv, env = _cli_command(tmp_path, "bank", "add", f"bank={root}", f"input={folder}",
                                     "near_dup_sim=null", f"hydra.run.dir=r{k}")
            procs.append(subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"r{k}" / "audit" / "manifest.json").is_file() for k in range(2)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "an add ended early"
            time.sleep(0.1)
        time.sleep(1.0)  # both are past their audit, at the lock
        assert all(p.poll() is None for p in procs) and bank_state(root)[0] is None
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    current, ids, _ = bank_state(root)
    assert current == 2 and ids == {content_id(mcq_identity(record_mcq("mcq_record", mcq(i))))
                                    for i in range(6)}
    added = sorted(json.loads((tmp_path / f"r{k}" / "manifest.json").read_text())["bank"]["added"]["tom"]
                   for k in range(2))
    assert added == [2, 4]  # the second to get the lock adds only its two new items
    assert _cli(tmp_path, "bank", "verify", f"bank={root}", "hydra.run.dir=rv").returncode == 0


def test_cli_action_word_and_verify_exit_codes(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "bank", "bank=b", "hydra.run.dir=r0")
    assert proc.returncode == 2 and "choose an action" in proc.stderr
    assert not (tmp_path / "r0").exists() and not (tmp_path / "b").exists()  # nothing left behind
    folder = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)])
    proc = _cli(tmp_path, "bank", "add", "bank=b", f"input={folder}", "near_dup_sim=null", "hydra.run.dir=r1")
    assert proc.returncode == 0, proc.stderr
    assert "empty -> v0001, added 3" in proc.stdout
    check_run_folder(tmp_path / "r1", "bank", 3)
    flip_byte(tmp_path / "b" / "current" / "tom.parquet")
    proc = _cli(tmp_path, "bank", "verify", "bank=b", "hydra.run.dir=r2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DRIFT versions/v0001/tom.parquet: hash_mismatch" in proc.stdout


# --------------------------------------------------------------------------- SIGKILL during add


@pytest.mark.parametrize("phase", ["renamed", "committed"])
def test_sigkill_during_add_leaves_old_or_new_version(tmp_path: Path, phase: str) -> None:
    """A real ``python -m gen bank add`` process SIGKILLs itself at ``phase``; the bank is then
    exactly the old version (before the pointer switch) or exactly the new one (after), verify
    passes, and the next add cleans up and reaches the same bank as an uninterrupted add.
    Two phases here (a whole uncommitted version on disk; just after the switch); all six, with
    the real audit and embedder, in tests/integration/test_bank_real.py."""
    first = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)])
    second = run_folder(tmp_path / "tom_b", [mcq(i) for i in range(2, 7)])
    ref = Bank(tmp_path / "ref")
    ref.add(first, near_dup_sim=None)
    old = bank_state(ref.root)
    ref.add(second, near_dup_sim=None)
    new = bank_state(ref.root)
    bank = Bank(tmp_path / "killed")
    bank.add(first, near_dup_sim=None)
    assert bank_state(bank.root) == old
    proc = _cli(tmp_path, "bank", "add", f"bank={bank.root}", f"input={second}", "near_dup_sim=null",
                "hydra.run.dir=killed_run", env={FAULT_ENV: phase})
    assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)
    after = bank_state(bank.root)
    assert after == (new if phase == "committed" else old)
    assert bank.verify()[0].exit_code == 0
    result, _ = bank.add(second, near_dup_sim=None)
    assert bank_state(bank.root) == new
    assert result.accepted == (0 if phase == "committed" else 3)
    assert not leftovers(bank.root, bank.current)
    assert bank.verify()[0].exit_code == 0


# --------------------------------------------------------------------------- ids across processes


def test_two_processes_give_the_same_ids_and_bytes(tmp_path: Path) -> None:
    """Two independent runs of the same command (own folders, own caches, other hash seeds)."""
    records = [mcq(i) for i in range(5)]
    state = []
    for k in (1, 2):
        home = tmp_path / f"machine{k}"
        home.mkdir()
        folder = run_folder(home / "tom_a", records)
        proc = _cli(home, "bank", "add", "bank=b", f"input={folder}", "near_dup_sim=null", "hydra.run.dir=r",
                    env={"PYTHONHASHSEED": str(k)})
        assert proc.returncode == 0, proc.stderr
        state.append(bank_state(home / "b"))
    assert state[0][1] == state[1][1] == set(ids_of(records))
    # the manifests hold the same bytes here, so the data files are byte-identical too
    assert state[0][2] == state[1][2]


# --------------------------------------------------------------------------- hardening (issue 14)


def _lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


def _outside(tmp: Path, inside_of: Path, pattern: str) -> list[Path]:
    """Files matching ``pattern`` anywhere under ``tmp`` but not under ``inside_of``."""
    return [p for p in tmp.rglob(pattern) if inside_of not in p.parents]


def _wagibench_bank(tmp: Path) -> Bank:
    """A bank whose distractors items have a question type that climbs out of a folder."""
    bank = Bank(tmp)
    items = [dict(mcq(i, "similar", n_options=4), question="Which action?") for i in range(2)]
    items += [dict(mcq(i, "x/../../../../ESCAPE", n_options=4), question="Which action?") for i in range(2)]
    bank.add(run_folder(tmp / "dis", items, "distractors"), near_dup_sim=None)
    return bank


def test_export_file_names_from_item_data_stay_inside_out(tmp_path: Path) -> None:
    """A question type ``x/../../../../ESCAPE`` becomes a plain file name inside out=; before,
    the export died half-written (``unexpected FileNotFoundError``)."""
    bank = _wagibench_bank(tmp_path)
    out = tmp_path / "e1" / "e2" / "e3" / "out"
    proc = _cli(tmp_path, "bank", "export", f"bank={bank.root}", "format=wagibench", f"out={out}",
                "hydra.run.dir=r_export")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = sorted(p.name for p in out.iterdir() if p.name != "EXPORT.json")
    assert len(names) == 2 and names[0] == "wagibench_mcq_similar.json"
    assert re.fullmatch(r"wagibench_mcq_x_\.\._\.\._\.\._\.\._ESCAPE-[0-9a-f]{8}\.json", names[1])
    rows = json.loads((out / names[1]).read_text())
    assert [r["meta"]["question_type"] for r in rows] == ["x/../../../../ESCAPE"] * 2  # the data keeps its value
    assert _outside(tmp_path, out, "*ESCAPE*") == []
    records = read_jsonl(tmp_path / "r_export" / "bank.jsonl")
    assert sorted({r["where"] for r in records}) == names


def test_export_never_writes_through_an_existing_folder(tmp_path: Path) -> None:
    """With the intermediate folder there, the old export wrote ESCAPE.json three folders above
    out=; now out= must be new or empty (exit 2) and nothing is written anywhere."""
    bank = _wagibench_bank(tmp_path)
    out = tmp_path / "e1" / "e2" / "e3" / "out"
    (out / "wagibench_mcq_x").mkdir(parents=True)
    proc = _cli(tmp_path, "bank", "export", f"bank={bank.root}", "format=wagibench", f"out={out}",
                "hydra.run.dir=r_export")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(_lines(proc.stderr)) == 1 and "not an empty folder" in proc.stderr and str(out) in proc.stderr
    assert _outside(tmp_path, tmp_path / "dis", "*ESCAPE*") == [] and not (tmp_path / "e1" / "ESCAPE.json").exists()
    assert [p.name for p in out.iterdir()] == ["wagibench_mcq_x"]


def test_a_failed_export_leaves_no_folder(tmp_path: Path, monkeypatch) -> None:
    """An export that fails halfway (here: on the second MCQ layout) leaves neither out= nor its
    staging folder: an export appears whole or not at all."""
    from generators.bank import export as bank_export

    bank = _wagibench_bank(tmp_path)
    real = bank_export.wagibench_mcq
    calls = []

    def fail_late(r: dict[str, Any]) -> dict[str, Any]:
        calls.append(r["item_id"])
        if len(calls) == 3:
            raise OSError("disk full")
        return real(r)

    monkeypatch.setattr(bank_export, "wagibench_mcq", fail_late)
    out = tmp_path / "exports" / "wb"
    with pytest.raises(OSError, match="disk full"):
        bank.export("wagibench", out=str(out))
    assert len(calls) == 3 and not out.exists() and list((tmp_path / "exports").iterdir()) == []
    monkeypatch.undo()
    result, _ = bank.export("wagibench", out=str(out))
    assert result.accepted == 4 and len(list(out.iterdir())) == 3  # two MCQ files and EXPORT.json


def test_export_refuses_an_out_inside_the_bank(grown: Bank, tmp_path: Path) -> None:
    """out=<bank>/current wrote a README into a released version (verify then failed): refused in
    one line, exit 2, through symlinks too; the bank still verifies."""
    proc = _cli(tmp_path, "bank", "export", f"bank={grown.root}", f"out={grown.root / 'current'}",
                "hydra.run.dir=r_in")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(_lines(proc.stderr)) == 1 and "inside the bank" in proc.stderr
    assert not (tmp_path / "r_in").exists()
    (tmp_path / "link").symlink_to(grown.root / "versions")
    for out in (grown.root / "versions" / "v0001" / "export", tmp_path / "link" / "v0002" / "x", grown.root):
        with pytest.raises(ConfigError, match="inside the bank"):
            grown.export("parquet", out=str(out))
    assert problems(grown) == []
    assert sorted(p.name for p in (grown.root / "current").iterdir()) == sorted(
        {"CHANGELOG.md", LOCK, "audit", "tom.parquet"})


def test_verify_refuses_a_version_folder_outside_the_bank(grown: Bank, tmp_path: Path) -> None:
    """versions/v0001 as a symlink to an identical folder elsewhere verified clean before; a
    version (or a file in one) that is a symlink or resolves outside the bank is drift."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(grown.root / "versions" / "v0001", elsewhere)
    (grown.root / "versions" / "v0001").symlink_to(elsewhere)
    assert problems(grown) == [("versions/v0001", "symlink")]
    (grown.root / "versions" / "v0001").unlink()
    shutil.move(elsewhere, grown.root / "versions" / "v0001")
    assert problems(grown) == []
    log = grown.root / "versions" / "v0002" / "CHANGELOG.md"
    copy = tmp_path / "CHANGELOG.md"
    shutil.copyfile(log, copy)
    log.unlink()
    log.symlink_to(copy)  # the same bytes, borrowed
    assert problems(grown) == [("versions/v0002/CHANGELOG.md", "symlink")]


def test_a_damaged_bank_stops_every_writer(tmp_path: Path) -> None:
    """A released data file deleted: add (even with force=true) added every released item again
    as new; now add and export stop with verify's own line, exit 1, before writing anything."""
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)]), near_dup_sim=None)
    (bank.root / "versions" / "v0001" / "tom.parquet").unlink()
    before = sorted(p.relative_to(bank.root).as_posix() for p in bank.root.rglob("*"))
    proc = _cli(tmp_path, "bank", "verify", f"bank={bank.root}", "hydra.run.dir=r_verify")
    assert proc.returncode == 1
    drift = next(x for x in proc.stdout.splitlines() if "DRIFT" in x).removeprefix("[bank] ")
    assert drift.startswith("DRIFT versions/v0001/tom.parquet: missing_file")
    batch = run_folder(tmp_path / "tom_b", [mcq(i) for i in range(2, 6)])
    proc = _cli(tmp_path, "bank", "add", f"bank={bank.root}", f"input={batch}", "force=true", "near_dup_sim=null",
                "hydra.run.dir=r_add")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(_lines(proc.stderr)) == 1 and drift in proc.stderr and "unexpected" not in proc.stderr
    assert not (tmp_path / "r_add").exists()  # refused before the run folder, the audit, the lock
    out = tmp_path / "exported"
    proc = _cli(tmp_path, "bank", "export", f"bank={bank.root}", f"out={out}", "hydra.run.dir=r_exp")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(_lines(proc.stderr)) == 1 and drift in proc.stderr
    assert not out.exists() and not (tmp_path / "r_exp").exists()
    assert sorted(p.relative_to(bank.root).as_posix() for p in bank.root.rglob("*")) == before
    assert bank.current == 1


def test_add_under_the_lock_checks_a_version_released_since_its_plan(tmp_path: Path, monkeypatch) -> None:
    """Another add may release a version while this one audits; that version is verified too
    before it is built on."""
    from generators.bank import add as bank_add_module

    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]), near_dup_sim=None)
    real = bank_add_module.run_audit
    audits = []

    def audit_then_damage(*a: Any, **k: Any):
        outcome = real(*a, **k)
        audits.append(1)
        if len(audits) > 1:  # the concurrent add's own audit
            return outcome
        bank.add(run_folder(tmp_path / "tom_c", [mcq(9)]), near_dup_sim=None)  # a concurrent release: v0002
        (bank.root / "versions" / "v0002" / "CHANGELOG.md").write_text("edited\n")
        return outcome

    monkeypatch.setattr(bank_add_module, "run_audit", audit_then_damage)
    with pytest.raises(GenError, match="DRIFT versions/v0002/CHANGELOG.md: hash_mismatch") as e:
        bank.add(run_folder(tmp_path / "tom_b", [mcq(i) for i in range(3, 6)]), near_dup_sim=None)
    assert e.value.exit_code == 1 and bank.current == 2
    assert sorted(p.name for p in (bank.root / "versions").iterdir()) == ["v0001", "v0002"]


def test_bad_places_and_pointers_are_one_line_exit_2(tmp_path: Path) -> None:
    """Input at fault is exit 2 naming the file, not ``unexpected …`` (exit 1): a non-UTF-8
    pointer file, bank= that is a file or under one (read-only, as root can still write
    anywhere), a .lock that is a folder, or a symlink (add truncated the file it points to)."""
    batch = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)])
    bank = Bank(tmp_path)
    bank.add(batch, near_dup_sim=None)
    a_file = tmp_path / "plain.txt"
    a_file.write_text("not a bank\n")
    lock_dir = tmp_path / "locked"
    shutil.copytree(bank.root, lock_dir, symlinks=True)
    (lock_dir / ".lock").unlink()
    (lock_dir / ".lock").mkdir()
    bad_pointer = tmp_path / "pointer"
    shutil.copytree(bank.root, bad_pointer, symlinks=True)
    (bad_pointer / "current").unlink()
    (bad_pointer / "current").write_bytes(b"versions/v\xff\xfe0001\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    lock_link = tmp_path / "lock_link"
    shutil.copytree(bank.root, lock_link, symlinks=True)
    (lock_link / ".lock").unlink()
    (lock_link / ".lock").symlink_to(victim)  # opening it for writing truncated the victim
    batch2 = run_folder(tmp_path / "tom_b", [mcq(i) for i in range(3, 5)])
    cases = [
        (["verify", f"bank={bad_pointer}"], str(bad_pointer / "current")),
        (["add", f"bank={bad_pointer}", f"input={batch2}"], str(bad_pointer / "current")),
        (["add", f"bank={a_file}", f"input={batch2}"], str(a_file)),
        (["add", f"bank={a_file / 'bank'}", f"input={batch2}"], str(a_file)),
        (["export", f"bank={a_file}"], str(a_file)),
        (["add", f"bank={lock_dir}", f"input={batch2}"], str(lock_dir / ".lock")),
        (["add", f"bank={lock_link}", f"input={batch2}"], str(lock_link / ".lock")),
    ]
    for k, (args, named) in enumerate(cases):
        proc = _cli(tmp_path, "bank", *args, "near_dup_sim=null" if args[0] == "add" else "progress=off",
                    f"hydra.run.dir=r{k}")
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert len(_lines(proc.stderr)) == 1 and named in proc.stderr and "unexpected" not in proc.stderr, proc.stderr
        assert not (tmp_path / f"r{k}").exists()
    assert a_file.read_text() == "not a bank\n" and victim.read_text() == "someone else's file\n"
    assert read_pointer(lock_dir) == read_pointer(lock_link) == 1


def test_add_on_a_flipped_byte_is_drift_said_as_verify_says_it(tmp_path: Path) -> None:
    """bank add reading a damaged data file of the current version: exit 1 with verify's line,
    not ``unexpected ComputeError`` (nor items added over it)."""
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)]), near_dup_sim=None)
    flip_byte(bank.root / "current" / "tom.parquet")
    proc = _cli(tmp_path, "bank", "add", f"bank={bank.root}", f"input={run_folder(tmp_path / 'tom_b', [mcq(7)])}",
                "near_dup_sim=null", "hydra.run.dir=r_add")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(_lines(proc.stderr)) == 1 and "unexpected" not in proc.stderr
    assert "DRIFT versions/v0001/tom.parquet: hash_mismatch: versions/v0001/tom.parquet: SHA-256" in proc.stderr
    assert bank.current == 1 and sorted(p.name for p in (bank.root / "versions").iterdir()) == ["v0001"]


# --------------------------------------------------------------------------- context-tracking scenarios


def scenario(i: int, *, sid: str | None = None, target: str = "current") -> dict[str, Any]:
    """A valid scenario in the context benchmark's released schema, with its own words (and, for
    i < 9, its own signature: the validator allows 2 per signature)."""
    r = random.Random(f"scenario/{i}")
    w = lambda k: " ".join(r.sample(WORDS, k))  # noqa: E731
    gold = {"current_answers": [w(1), w(1), w(2)], "prior_answers": [w(1), w(1), w(2)],
            "clarify_indicators": [], "abstain_indicators": []}
    return {"scenario_id": sid or f"sc-{i + 1:02d}", "subset": "bank", "pair_id": None, "target_context": target,
            "change_type": "object_in_hand", "activity_domain": ("kitchen", "workshop", "garden")[i // 3 % 3],
            "referent_complexity": "single_referent", "difficulty_tier": ("easy", "medium", "hard")[i % 3],
            "time_gap_bucket": "seconds", "context_image": None,
            "turn_1_image": f"A hand holds a long {w(3)} near a steel vessel.",
            "turn_1_user": f"Should I keep moving this {w(2)}?",
            "turn_2_image": f"A hand grips a flat {w(3)} over a wooden slab.",
            "turn_2_user": f"Is my grip okay for this {w(2)}?",
            "turn_3_repair_prompt": f"I mean the {gold['current_answers'][0]} now, not the {gold['prior_answers'][0]}.",
            "turn_3_repair_prompt_deictic": "I mean this thing in my hand right now.",
            "notes": f"note {i}", "gold": gold}


def test_scenario_id_hashes_the_visible_channels_only() -> None:
    from schemas.scenarios import VISIBLE_FIELDS

    s = scenario(1)
    relabelled = {**s, "scenario_id": "sc-99", "target_context": "prior", "change_type": "location",
                  "notes": "other", "difficulty_tier": "hard",
                  "gold": {**s["gold"], "current_answers": ["something else", "a", "b"]},
                  "turn_2_user": "  Is my grip   okay" + s["turn_2_user"][len("Is my grip okay"):]}  # spacing only
    assert item_id_of("scenario_record", relabelled) == item_id_of("scenario_record", s)
    assert re.fullmatch(r"[0-9a-f]{32}", item_id_of("scenario_record", s))
    for f in VISIBLE_FIELDS:
        assert item_id_of("scenario_record", {**s, f: (s[f] or "") + " changed"}) != item_id_of("scenario_record", s), f


def test_scenarios_are_added_verified_deduplicated_and_exported(tmp_path: Path) -> None:
    from generators.scenarios import LOCK as SCENARIO_LOCK
    from schemas.scenarios import RECORD_FIELDS

    bank = Bank(tmp_path)
    first = [scenario(i) for i in range(4)]
    result, _ = bank.add(run_folder(tmp_path / "sc_a", first, generator="scenarios"))
    assert (result.accepted, result.exit_code, bank.current) == (4, 0, 1)
    frame = bank.frame("scenarios")
    assert frame["item_id"].to_list() == [item_id_of("scenario_record", s) for s in first]
    assert frame["source_item_id"].to_list() == [s["scenario_id"] for s in first]
    assert set(frame["question_type"].to_list()) == {"object_in_hand/current"}
    assert bank.lock()["counts"]["scenarios"]["items"] == 4 and problems(bank) == []
    # the same scenarios renumbered and with other gold lists: the same items, refused
    again = [{**s, "scenario_id": f"sc-{50 + k}", "gold": {**s["gold"], "abstain_indicators": ["x"]}}
             for k, s in enumerate(first[:2])] + [scenario(4, sid="sc-05")]
    result, _ = bank.add(run_folder(tmp_path / "sc_b", again, generator="scenarios"))
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert [(r["reason"], r["stage"]) for r in rejects] == [("duplicate", "bank")] * 2
    assert (result.accepted, bank.current) == (1, 2) and problems(bank) == []
    # a third batch reusing a scenario id: kept in the bank, refused by the export (ids are the format's keys)
    bank.add(run_folder(tmp_path / "sc_c", [scenario(5, sid="sc-01")], generator="scenarios"))
    result, _ = bank.export("scenarios", out=str(tmp_path / "export"))
    out = tmp_path / "export"
    rows = read_jsonl(out / "scenarios.jsonl")
    assert [r["scenario_id"] for r in rows] == ["sc-01", "sc-02", "sc-03", "sc-04", "sc-05"]
    assert rows[:4] == first and all(tuple(r) == RECORD_FIELDS for r in rows)
    assert [(r["reason"], r["record_id"]) for r in read_jsonl(result.out_dir / "rejects.jsonl")] == [
        ("duplicate_scenario_id", item_id_of("scenario_record", scenario(5, sid="sc-01")))]
    ids = json.loads((out / "bank_ids.json").read_text())
    assert ids["sc-01"] == {"item_id": item_id_of("scenario_record", first[0]), "added_in": "v0001",
                            "source_item_id": "sc-01"}
    lock = json.loads((out / SCENARIO_LOCK).read_text())
    assert lock["scenarios_sha256"] == hashlib.sha256((out / "scenarios.jsonl").read_bytes()).hexdigest()
    assert lock["counts"] == {"bank": 5} and lock["bank_lock_sha256"] == hashlib.sha256(
        (version_dir(bank.root, 3) / LOCK).read_bytes()).hexdigest()
    again, _ = bank.export("scenarios", out=str(tmp_path / "export2"))  # byte-reproducible
    assert (tmp_path / "export2" / "scenarios.jsonl").read_bytes() == (out / "scenarios.jsonl").read_bytes()
    result, _ = bank.export("parquet", out=str(tmp_path / "parquet"))  # the generic exports carry the kind
    assert (tmp_path / "parquet" / "scenarios.parquet").is_file() and result.exit_code == 0
    assert "Wearable Assistant Context Bench" in (tmp_path / "parquet" / "README.md").read_text()


def test_contrast_members_are_not_near_duplicates_of_each_other(tmp_path: Path) -> None:
    a = {**scenario(1, sid="adv-01"), "subset": "contrast", "pair_id": "pair-01"}
    b = {**a, "scenario_id": "adv-02", "target_context": "prior", "turn_3_repair_prompt_deictic": None,
         "turn_2_user": a["turn_2_user"].replace("Is my grip okay", "Was my grip okay")}
    bank = Bank(tmp_path)
    result, _ = bank.add(run_folder(tmp_path / "pair", [a, b], generator="scenarios"))
    assert result.accepted == 2  # one turn 1, a current and a prior target: two question types
    assert set(bank.frame("scenarios")["question_type"].to_list()) == {"object_in_hand/current", "object_in_hand/prior"}


def test_a_bad_scenario_line_is_an_input_error_naming_file_and_line(tmp_path: Path) -> None:
    rows = [scenario(0), {**scenario(1), "change_type": "teleport"}]
    folder = run_folder(tmp_path / "bad", rows, generator="scenarios")
    with pytest.raises(InputError, match=r"scenarios.jsonl:2: not a scenario in the released schema \(change_type: "):
        Bank(tmp_path).add(folder)
    with pytest.raises(ConfigError, match="kind=digital does not fit"):
        Bank(tmp_path).add(folder, kind="digital")


def test_real_audit_gates_a_scenario_batch(tmp_path: Path) -> None:
    """The registered audit on a scenario batch: its scenarios check's errors refuse the batch."""
    bank = Bank(tmp_path)
    leaky = [scenario(i) for i in range(3)]
    leaky[1]["turn_2_user"] = f"Is this {leaky[1]['gold']['current_answers'][0]} right?"
    result, _ = bank.add(run_folder(tmp_path / "sc", leaky, generator="scenarios"))
    assert (result.accepted, result.exit_code, bank.current) == (0, 1, None)
    report = json.loads((result.out_dir / "audit" / "audit.json").read_text())
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert {(f["check"], f["kind"], tuple(f["items"])) for f in errors} == {("scenarios", "gold_in_speech", ("sc-02",))}
    result, _ = bank.add(run_folder(tmp_path / "sc2", leaky, generator="scenarios"), force=True)
    assert (result.accepted, bank.current) == (3, 1)


def test_the_benchmarks_examples_round_trip_and_pass_its_validator(tmp_path: Path) -> None:
    """The 10 released examples through add (forced: their audit has findings) and export
    format=scenarios: the same records in the same order and field order, and the benchmark's own
    validator (checks 1, 2, 3, 6) passes on the export."""
    from conftest import CONTEXT_BENCH, context_bench_failures, context_bench_validator

    examples = CONTEXT_BENCH / "examples.jsonl"
    if not examples.is_file():
        pytest.skip("the context benchmark's examples are not in ../shared")
    validator = context_bench_validator()
    bank = Bank(tmp_path)
    result, _ = bank.add(examples, force=True)
    assert (result.accepted, bank.current) == (10, 1)
    bank.export("scenarios", out=str(tmp_path / "export"))
    rows = read_jsonl(tmp_path / "export" / "scenarios.jsonl")
    released = read_jsonl(examples)
    assert rows == released and [list(r) for r in rows] == [list(r) for r in released]
    assert context_bench_failures(validator, rows) == []


# --------------------------------------------------------------------------- require_review


def test_require_review_admits_items_accepted_by_k_reviewers_and_records_who(tmp_path: Path) -> None:
    from generators.review.items import load_items
    from generators.review.labels import append_label
    from schemas.review import ReviewLabel

    records = [mcq(i) for i in range(6)]
    folder = run_folder(tmp_path / "tom_a", records)
    ids = ids_of(records)
    assert [it.item_id for it in load_items(folder)[0]] == ids  # review labels carry the bank's ids

    def label(reviewer: str, i: int, decision: str) -> None:
        append_label(folder, ReviewLabel(item_id=ids[i], reviewer=reviewer, time="t", rubric="mcq-egotom",
                                         decision=decision))

    for i in range(4):
        label("alice", i, "accept")
    label("bob", 0, "accept")
    label("bob", 1, "reject")
    label("bob", 1, "accept")  # the last label counts
    label("bob", 2, "reject")
    label("carol", 3, "needs_edit")
    bank = Bank(tmp_path)
    with pytest.raises(MissingInputError, match="holds no labels"):
        bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]), require_review=1)
    result, _ = bank.add(folder, require_review=2)
    assert (result.accepted, result.rejected, result.exit_code) == (2, 4, 0)
    assert bank.ids() == set(ids[:2])
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert {(r["stage"], r["reason"]) for r in rejects} == {("review", "not_accepted")}
    detail = {r["record_id"]: r["detail"] for r in rejects}
    assert detail[ids[2]].endswith("accepted by 1 of the 2 reviewer(s) required (alice)")
    assert detail[ids[5]].endswith("accepted by 0 of the 2 reviewer(s) required")
    review = bank.lock()["sources"][0]["review"]
    assert review["required"] == 2 and review["accepted_by"] == {ids[0]: ["alice", "bob"], ids[1]: ["alice", "bob"]}
    assert set(review["label_files"]) == {"alice", "bob", "carol"}
    assert review["label_files"]["alice"] == hashlib.sha256((folder / "reviews" / "alice.jsonl").read_bytes()).hexdigest()
    verified, _ = bank.verify()
    assert verified.exit_code == 0
    # one reviewer is enough at k=1: the items alice accepted and bob did not refuse join
    result, _ = bank.add(folder, require_review=1)
    assert result.accepted == 2 and bank.ids() == set(ids[:4])
    # the version's review summary, which bank export puts in the dataset card
    summary = json.loads((bank.root / "current" / "review" / "summary.json").read_text())
    assert {k: summary[k] for k in ("items_reviewed", "by_verdict", "reviewers")} == {
        "items_reviewed": 4, "by_verdict": {"accept": 4}, "reviewers": 2}
    assert summary["reviewer_names"] == ["alice", "bob"] and "several rules" in summary["protocol"]  # k=2, then k=1
    result, _ = bank.add(run_folder(tmp_path / "tom_c", [mcq(7)]))  # unreviewed: the summary carries over
    assert result.accepted == 1
    assert json.loads((bank.root / "current" / "review" / "summary.json").read_text()) == summary
    assert bank.verify()[0].exit_code == 0
    assert bank.export("parquet", out=str(tmp_path / "release"))[0].exit_code == 0
    assert "4 items reviewed by 2 reviewer(s): accept 4" in (tmp_path / "release" / "README.md").read_text()
