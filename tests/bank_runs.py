"""Running the versioned bank in tests: valid MCQ records and finished run folders to add
(:func:`mcq`, :func:`paraphrase`, :func:`run_folder`; the bag-of-words embedder is
:class:`fakes.FakeEmbedder`), the audit stand-in (:func:`standin_audit`: same name, ``input=``/
``fail_on=`` options and ``audit.json`` output, reporting the findings a test plants),
:class:`Bank` to add, verify and export in process, a digital run folder, a bank in two releases
and what verify finds in it, and ``python -m gen`` in a child process with the stand-in
registered (:func:`_cli`).

Shared by the bank's tests (``test_bank.py``, ``test_bank_processes.py``, ``test_bank_verify.py``,
``test_bank_export.py``),
the release and review tests (which build banks with it) and the pipeline and digital tests (the
embedder). A test module
takes the pytest fixtures here by importing them by name: ``audit_standin`` (autouse: the
stand-in in place of the registered audit for every test but ``test_real_audit_*``),
``digital_run`` and ``grown`` (defined as ``digital_run_fixture`` and ``grown_fixture``, so that a
test's parameter of the fixture's name does not shadow an import)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import gen_env, read_jsonl
from fakes import FakeEmbedder
from pydantic import model_validator

from gen import kinds
from gen.banks.store import LOCK, read_pointer, version_dir
from gen.engine.manifest import output_hashes
from gen.engine.registry import REGISTRY, Generator
from gen.engine.runner import CommonConfig, RunContext, run_config
from gen.generators.bank import BankConfig

HERE = Path(__file__).resolve().parent
WORDS = [
    f"{a}{b}"
    for a in ("ka", "lo", "mi", "nu", "pe", "ri", "so", "tu", "va", "ze")
    for b in ("bar", "cen", "dol", "fin", "gat", "hum", "jor", "kel", "lin", "mop")
]


# --------------------------------------------------------------------------- fixtures: inputs


def mcq(i: int, qtype: str = "goal", *, seed: int = 0, n_options: int = 3) -> dict[str, Any]:
    """A valid MCQ record with its own words (distinct items share little vocabulary)."""
    r = random.Random(f"{qtype}/{i}")
    ctx = "\n".join(f"    0{k}m:1{k}s | #C C {' '.join(r.sample(WORDS, 5))}" for k in range(4))
    opts = [f"To {' '.join(r.sample(WORDS, 3))}" for _ in range(n_options)]
    answer = i % n_options
    return {
        "item_id": hashlib.sha256(f"{seed}/{qtype}/{i}".encode()).hexdigest()[:32],
        "question_type": qtype,
        "question": "What is C's future goal?",
        "options": opts,
        "answer": answer,
        "group": f"clip{i}",
        "origins": ["truth" if k == answer else "counterfactual" for k in range(n_options)],
        "visible": {"context": ctx},
        "privileged": {"truth": "hidden state " + str(i)},
        "vuid": f"video{i}",
        "clip_id": f"video{i}~pass_1~0-{i}",
        "clip_start_time": 1.5,
        "clip_end_time": 9.0 + i,
    }


def paraphrase(rec: dict[str, Any]) -> dict[str, Any]:
    """The same item reworded a little (one word of one option and of the context)."""
    p = json.loads(json.dumps(rec))
    p["options"][0] = p["options"][0] + " soon"
    p["visible"]["context"] = p["visible"]["context"].replace("#C C", "#C C then", 1)
    p["item_id"] = hashlib.sha256(("para" + rec["item_id"]).encode()).hexdigest()[:32]
    return p


def run_folder(
    out: Path,
    records: list[dict[str, Any]],
    generator: str = "tom",
    extra: dict[str, Any] | None = None,
) -> Path:
    """A finished run folder: records, rejects, extra JSON files and a manifest with prompt
    hashes and output hashes (so the audit's integrity check applies)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{generator}.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8"
    )
    (out / "rejects.jsonl").write_text("", encoding="utf-8")
    for name, obj in (extra or {}).items():
        (out / name).write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    manifest = {
        "generator": generator,
        "toolkit_version": "0.1.0",
        "seed": 0,
        "config": {},
        "llm": {"backend": "llama_cpp", "model": "smollm2.gguf", "model_sha256": "b" * 64},
        "prompts": {f"{generator}/goals.jinja": "a" * 64, f"{generator}/_system.jinja": "c" * 64},
        "inputs": {},
        "counts": {"requested": len(records), "accepted": len(records), "rejected": 0},
    }
    manifest["outputs"] = output_hashes(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


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
    fails = cfg.fail_on != "never" and any(
        RANK[f["severity"]] >= RANK[cfg.fail_on] for f in cfg.findings
    )
    ctx.exit_code = int(fails)
    sev = {s: sum(f["severity"] == s for f in cfg.findings) for s in ("error", "warning", "info")}
    ctx.write_json(
        "audit.json",
        {
            "input": cfg.input,
            "seen": seen,
            "summary": {
                "findings": len(cfg.findings),
                "by_severity": sev,
                "fail_on": cfg.fail_on,
                "exit_code": ctx.exit_code,
            },
            "checks": [{"id": 1, "key": "structure", "status": "ran", "findings": sev}],
            "findings": cfg.findings,
        },
    )
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


LEAK = {
    "check": "leakage",
    "check_id": 2,
    "kind": "answer_in_visible",
    "severity": "error",
    "what": "The answer appears in the visible context.",
    "items": ["x1"],
    "fields": ["visible.context"],
}


# --------------------------------------------------------------------------- running the bank


def bank_run(run_dir: Path, **cfg: Any) -> tuple[Any, RunContext]:
    settings = BankConfig(**{"cache_dir": None, "progress": "off", **cfg})
    ctx = RunContext("bank", settings, run_dir)
    ctx.use(embedder=FakeEmbedder())
    return run_config("bank", settings, run_dir, ctx=ctx, quiet=True), ctx


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
        for kind in kinds.bank_names():
            p = version_dir(self.root, version or self.current) / f"{kind}.parquet"
            if p.is_file():
                out |= set(pl.read_parquet(p)["item_id"].to_list())
        return out


def ids_of(records: list[dict[str, Any]]) -> list[str]:
    return [kinds.require("mcq").item_id(r) for r in records]


# --------------------------------------------------------------------------- a digital run


@pytest.fixture(scope="module", name="digital_run")
def digital_run_fixture(tmp_path_factory) -> Path:
    """A digital run folder (one cued bundle) made by the digital generator with the scripted
    LLM of tests/digital_runs.py."""
    from digital_runs import digital_script, run_digital, write_pool

    tmp = tmp_path_factory.mktemp("digital")
    out = tmp / "run"
    result, _ = run_digital(
        out, write_pool(tmp / "pool.jsonl"), digital_script(), n=1, cue_rate=1.0
    )
    assert result.accepted == 1
    return out


# ---------------------------------------------------- a bank in two releases, and what verify finds


@pytest.fixture(name="grown")
def grown_fixture(tmp_path: Path) -> Bank:
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


def tree(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (symlinks as ``-> target``), by relative path: a
    bank's every byte, to compare before and after a command."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def flip_byte(path: Path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    k = len(data) // 2 if at is None else at
    data[k] ^= 0x01
    path.write_bytes(bytes(data))


# ----------------------------------------------------------------------- the CLI in a child process


def _cli_command(
    tmp: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """``python -m gen`` in a child process, with the audit stand-in of this module registered."""
    code = (
        "import sys, bank_runs; bank_runs.standin_audit(); from gen.cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    base = gen_env(tmp / "cache")
    base["PYTHONPATH"] = os.pathsep.join([str(HERE), base["PYTHONPATH"]])
    return [sys.executable, "-c", code, *args], {**base, **(env or {})}


def _cli(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    argv, full_env = _cli_command(tmp, *args, env=env)
    return subprocess.run(argv, cwd=tmp, env=full_env, capture_output=True, text=True, timeout=300)
