"""The documentation runs: every ``gen`` command and Python block of the README, Getting
started and each guide, in page order, through the real command line with a scripted LLM and a
bag-of-words embedder, made small where a real run would be long (``tests/guides.py``). A
renamed option, a changed exit code, a file a page names that a run no longer writes: each
fails here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from digital_runs import digital_script
from guides import DOCS, Page, listing, run_page

GUIDES = DOCS / "guides"


def main_job_script() -> Any:
    """Bios for the persona pool (from the prompt's own facts), then the digital apps' items."""
    from test_personas import pool_script

    bios, apps = pool_script(lambda name, seed: False), digital_script()

    def script(messages: list[dict[str, str]], seed: int) -> str:
        if "Write a bio of" in messages[-1]["content"]:
            return bios(messages, seed)
        return apps(messages, seed)

    return script


SMALL_MAIN_JOB = Page(
    script=main_job_script(),
    extra={"digital": ["n=1", "persona_pool=6"]},
    replace={"persona_pool=50, n=5": "persona_pool=6, n=1"},
    numbered=True,
)


def test_the_readme_runs_and_lists_what_the_main_job_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = run_page(
        ROOT / "README.md",
        tmp_path,
        monkeypatch,
        Page(
            script=main_job_script(),
            extra={"digital": ["n=1", "persona_pool=6"]},
            replace={"persona_pool=50, n=5": "persona_pool=6, n=1"},
            instead={"pipeline": validate_only},
            numbered=True,
        ),
    )
    assert [line for line, _ in ran][:1] == [
        'pip install torch==2.13.0 && CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install -e ".[dev]" '
        "&& python -m gen digital "
        "+persona_pool=50"
    ]
    main, smoke = sorted((tmp_path / "outputs" / "digital").iterdir())  # the page's order
    assert json.loads((smoke / "manifest.json").read_text())["config"]["apps"] == [
        "Calendar",
        "Messaging",
    ]
    for name in listing(ROOT / "README.md", "## What the main job writes"):
        assert (main / name).exists(), f"the README lists {name}; the main job did not write it"
    manifest = json.loads((main / "manifest.json").read_text())
    assert manifest["counts"]["accepted"] == 1 and manifest["config"]["persona_pool"] == 6


def validate_only(argv: list[str], cwd: Path) -> int:
    """A command a page shows whose run is another test's (the WAGIBench chain's): its options
    are validated as the command line validates them, nothing is run."""
    from gen.cli import action_word, normalize_overrides, split_flags, validate_jobs

    name, rest = argv[0], action_word(argv[0], argv[1:])
    _, overrides = split_flags(name, rest)
    validate_jobs(name, normalize_overrides(overrides), multirun=False)
    return 0


def test_getting_started_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = DOCS / "getting-started.md"
    ran = run_page(page, tmp_path, monkeypatch, SMALL_MAIN_JOB)
    assert sum(1 for line, _ in ran if line.startswith("gen digital")) == 5
    main = min((tmp_path / "outputs" / "digital").iterdir())
    for name in listing(page, "## The main job"):
        assert (main / name).exists(), (
            f"Getting started lists {name}; the main job did not write it"
        )
    runs = [
        json.loads((f / "manifest.json").read_text())["config"]["llm"]
        for f in sorted((tmp_path / "outputs" / "digital").iterdir())
    ]
    assert [r["backend"] for r in runs] == [
        "llama_cpp",
        "llama_cpp",
        "openai",
        "openai",
        "llama_server",
    ]
    assert runs[3]["api_key_env"] == "MY_VLLM_KEY" and "api_key" not in json.dumps(runs).replace(
        "api_key_env", ""
    )


def test_the_wagibench_guide_runs_its_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide's one command on the shipped chain made small (test_pipeline's: 128 recordings,
    4 bundles), and every folder its listing names."""
    from digital_runs import goal_script, write_pool
    from test_pipeline import small_chain

    chain = small_chain(tmp_path / "chain.yaml", write_pool(tmp_path / "personas.jsonl"))
    page = GUIDES / "wagibench.md"
    ran = run_page(
        page,
        tmp_path,
        monkeypatch,
        Page(script=goal_script(), replace={"chain=wagibench": f"chain={chain}"}),
    )
    assert [line for line, _ in ran] == [
        "gen pipeline chain=wagibench hydra.run.dir=runs/wagibench"
    ]
    run = tmp_path / "runs" / "wagibench"
    for name in listing(page, "## Run it"):
        assert (run / name).exists(), f"the guide lists {name}; the chain did not write it"
    steps = [json.loads(x) for x in (run / "pipeline.jsonl").read_text().splitlines()]
    assert all(s["status"] == "ran" for s in steps)
    assert list((run / "export").rglob("digital_state.json"))


def test_the_audit_guide_audits_and_screens_egotom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import SHARED

    bank = SHARED / "data" / "egotom_paper"
    if not (bank / "egotom_goal_shuffled.csv").is_file():
        pytest.skip("EgoToM's released CSVs (../shared/data/egotom_paper) are absent")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").mkdir()
    (tmp_path / "shared" / "data" / "egotom_paper").symlink_to(bank)
    work = tmp_path / "work"
    work.mkdir()
    page = GUIDES / "audit-a-bank.md"
    run_page(page, work, monkeypatch, Page(script=lambda messages, seed: "A"))
    audit = work / "runs" / "egotom-audit"
    for name in listing(page, "## 1. Audit the bank"):
        assert (audit / name).exists(), f"the guide lists {name}; the audit did not write it"
    assert "shortcut" in (audit / "audit.md").read_text()
    blind = work / "runs" / "egotom-blind"
    assert (
        (blind / "summary.json").is_file()
        and (blind / "kept").is_dir()
        and (blind / "removed.jsonl").is_file()
    )
    assert "blind" in (work / "runs" / "egotom-blind-audit" / "audit.md").read_text()


def test_the_scale_out_guide_runs_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide's command validated whole (the chain, the vLLM model's options, the Slurm
    launcher's settings against Hydra's submitit plugin), then run shortened in this process: the
    shipped chain made small (test_pipeline's), 2 shards one after another (``launcher=local``;
    Slurm is not on this machine, and tests/integration/test_pipeline_submitit.py runs submitit's
    local executor). The rerun after a failure keeps every finished step."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the [slurm] extra")
    from digital_runs import goal_script, write_pool
    from guides import run_cli
    from test_pipeline import small_chain

    chain = small_chain(tmp_path / "chain.yaml", write_pool(tmp_path / "personas.jsonl"))
    short = {
        "chain=wagibench": f"chain={chain}",
        "shards=8": "shards=2",
        "launcher=submitit_slurm": "launcher=local",
        "cache_dir=/shared/gen-cache": f"cache_dir={tmp_path / 'cache'}",
    }

    def shortened(argv: list[str], cwd: Path) -> int:
        validate_only(argv, cwd)
        return run_cli([short.get(a, a) for a in argv if not a.startswith("launcher_options.")])

    page = GUIDES / "scale-out.md"
    ran = run_page(
        page, tmp_path, monkeypatch, Page(script=goal_script(), instead={"pipeline": shortened})
    )
    assert len(ran) == 2 and all(
        line.startswith("gen pipeline chain=wagibench shards=8 launcher=submitit_slurm")
        for line, _ in ran
    )
    run = tmp_path / "runs" / "wagibench-big"
    for name in listing(page, "## 3. One command"):
        assert (run / name).exists(), f"the guide lists {name}; the sharded chain did not write it"
    for step in ("recordings", "digital", "history"):
        assert sorted(p.name for p in (run / f"{step}.shards").iterdir()) == ["0", "1"]
    steps = [json.loads(x) for x in (run / "pipeline.jsonl").read_text().splitlines()]
    assert all(s["status"] == "skipped" for s in steps)  # the rerun: nothing left to do
