"""Shards of a chain's steps (``pipeline shards=K``): options reach a launcher's jobs unchanged
(through the command line's own parser), the shards merged give the unsharded run's files byte for
byte, a rerun runs only the shards that did not finish, and launcher settings are checked before
anything runs. Hydra's launchers themselves: tests/integration/test_pipeline_submitit.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from chain_shards import assert_same_bank, small_chain
from fakes import FakeEmbedder
from pydantic import BaseModel

from gen.cli import validate
from gen.engine.api import configure
from gen.engine.launch import check_launcher, hydra_value, overrides_of, shard_command
from gen.engine.runner import CommonConfig, RunContext, run_config
from gen.errors import ConfigError
from gen.generators.pipeline import PipelineConfig
from gen.generators.pipeline import plan as pipeline_plan


def run_chain(out: Path, chain: Path, **options):
    settings = PipelineConfig(chain=str(chain), cache_dir=None, progress="off", **options)
    ctx = RunContext("pipeline", settings, out).use(embedder=FakeEmbedder())
    return run_config("pipeline", settings, out, ctx=ctx, quiet=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    chain = small_chain(tmp / "chain.yaml")
    whole = run_chain(tmp / "whole", chain)
    sharded = run_chain(tmp / "sharded", chain, shards=2)
    assert whole.exit_code == 0 and sharded.exit_code == 0, (whole.error, sharded.error)
    return tmp, chain


def test_two_shards_merged_are_the_unsharded_run(runs) -> None:
    tmp, _ = runs
    assert_same_bank(tmp / "whole", tmp / "sharded")
    for step in ("recordings", "mcqs"):  # both shardable: history has a merge hook, mcqs says so
        assert [p.name for p in sorted((tmp / "sharded" / f"{step}.shards").iterdir())] == [
            "0",
            "1",
        ]
        merged = json.loads((tmp / "sharded" / step / "manifest.json").read_text())
        assert merged["generator"] == "merge" and merged["merged"]["complete"]
    assert not (tmp / "sharded" / "add.shards").exists()  # bank: no merge hook, not shardable


def test_a_rerun_runs_only_the_shard_that_did_not_finish(runs, tmp_path) -> None:
    import shutil

    src, chain = runs
    run_dir = tmp_path / "run"
    assert run_chain(run_dir, chain, shards=2).exit_code == 0
    kept = (run_dir / "mcqs.shards" / "0" / "manifest.json").read_bytes()
    shutil.rmtree(run_dir / "mcqs.shards" / "1")
    shutil.rmtree(run_dir / "mcqs")
    again = run_chain(run_dir, chain, shards=2)
    assert again.exit_code == 0
    assert (run_dir / "mcqs.shards" / "0" / "manifest.json").read_bytes() == kept  # not rerun
    assert (run_dir / "mcqs.shards" / "1" / "distractors.jsonl").is_file()
    steps = [json.loads(x) for x in (run_dir / "pipeline.jsonl").read_text().splitlines()]
    # the bank's steps find finished runs of their configs (as any pipeline rerun does)
    assert [s["status"] for s in steps] == ["skipped", "ran", "skipped", "skipped"]
    assert (run_dir / "mcqs" / "distractors.jsonl").read_bytes() == (
        src / "whole" / "mcqs" / "distractors.jsonl"
    ).read_bytes()


def test_options_reach_the_jobs_as_the_caller_validated_them() -> None:
    """Every value survives Hydra's override grammar: quotes, backslashes, ``${`` (text, not an
    interpolation), lists, dicts, null, and a server backend's every field."""
    cfg = configure(
        "pipeline",
        {
            "chain": "it's ${not.an.interpolation} C:\\dir\\ and \\'q\\'",
            "seed": 7,
            "shards": 3,
            "launcher": "submitit_slurm",
            "launcher_options": {
                "partition": "cpu",
                "timeout_min": 240,
                "additional_parameters": {"mail_type": "END"},
                "setup": ["module load cuda", "echo 'hi'"],
            },
            "llm": {
                "backend": "openai",
                "base_url": "http://gpu-node-7:8000/v1",
                "model": "Qwen/Qwen2.5-72B-Instruct",
                "concurrency": 64,
                "rpm": 600.0,
                "price": {"input": 0.15, "output": 0.6},
            },
            "cache_dir": None,
        },
        check_input=False,
    )
    options = cfg.model_dump(mode="json", exclude={"shard", "num_shards"})
    assert validate("pipeline", overrides_of({**options, "llm": cfg.llm})) == cfg


def test_the_shard_command_is_a_sweep_of_the_command_line() -> None:
    cmd = shard_command(
        "digital",
        {"n": 4},
        [1, 3],
        4,
        Path("/runs/x/digital.shards"),
        "submitit_slurm",
        {"partition": "cpu", "timeout_min": 60},
    )
    assert cmd[1:6] == ["-m", "gen", "digital", "-m", "shard=1,3"]
    assert "num_shards=4" in cmd and "hydra/launcher=submitit_slurm" in cmd
    assert "hydra.launcher.partition='cpu'" in cmd and "hydra.launcher.timeout_min=60" in cmd
    assert cmd[-2:] == ["hydra.sweep.dir='/runs/x/digital.shards'", "hydra.sweep.subdir=${shard}"]


def test_launcher_settings_are_checked_before_anything_runs(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    check_launcher("submitit_slurm", {"partition": "cpu", "timeout_min": 60, "mem_gb": 8})
    check_launcher("submitit_local", {"timeout_min": 60})
    check_launcher("joblib", {"n_jobs": 2})
    with pytest.raises(ConfigError, match="submitit_slurm has no setting 'partiton'"):
        check_launcher("submitit_slurm", {"partiton": "cpu"})
    with pytest.raises(ConfigError, match="launcher=local runs the shards in this process"):
        check_launcher("local", {"partition": "cpu"})
    chain = small_chain(tmp_path / "chain.yaml")
    with pytest.raises(ConfigError, match="has no setting"):
        pipeline_plan(
            PipelineConfig(
                chain=str(chain),
                shards=2,
                launcher="submitit_local",
                launcher_options={"partition": "x"},
            )
        )
    with pytest.raises(ConfigError, match="give shards=K"):
        configure("pipeline", {"num_shards": 2}, check_input=False)


def test_hydra_values() -> None:
    assert hydra_value(None) == "null" and hydra_value(True) == "true" and hydra_value(2) == "2"
    assert hydra_value(["a", 1]) == "['a',1]" and hydra_value({"k": [None]}) == "{k:[null]}"
    with pytest.raises(ConfigError, match="cannot be passed"):
        hydra_value({"a b": 1}, "x")


class Numbered(BaseModel):
    index: int


class FlakyConfig(CommonConfig):
    """A stand-in generator's options: the common ones."""


def test_a_shard_that_fails_stops_the_chain_and_the_rerun_runs_only_it(
    tmp_path: Path,
) -> None:
    from gen.engine.registry import REGISTRY, generator

    broken = {"shard": 1}

    @generator("flaky", config=FlakyConfig, records=Numbered, merge=lambda ctx, r, m: None)
    def flaky(cfg: FlakyConfig, ctx: RunContext):
        """Numbers; one shard fails while ``broken`` says so."""
        for i in ctx.indices():
            yield Numbered(index=i)
        if cfg.shard == broken["shard"]:
            ctx.fail("the node went away", 1)

    try:
        check_rerun(tmp_path, broken)
    finally:
        REGISTRY.pop("flaky", None)  # the decorator registered it; no other test sees it


def check_rerun(tmp_path: Path, broken: dict[str, int]) -> None:
    chain = tmp_path / "chain.yaml"
    chain.write_text(
        yaml.safe_dump({"steps": [{"name": "numbers", "generator": "flaky", "options": {"n": 5}}]})
    )
    run_dir = tmp_path / "run"
    first = run_chain(run_dir, chain, shards=3)
    assert first.exit_code == 1
    assert "numbers (flaky): shard(s) 1 of 3 did not finish" in first.error
    assert "numbers.shards" in first.error and not (run_dir / "numbers").exists()
    kept = (run_dir / "numbers.shards" / "0" / "manifest.json").read_bytes()

    broken["shard"] = -1  # the cause fixed: the same command again
    again = run_chain(run_dir, chain, shards=3)
    assert again.exit_code == 0, again.error
    assert (run_dir / "numbers.shards" / "0" / "manifest.json").read_bytes() == kept
    lines = (run_dir / "numbers" / "flaky.jsonl").read_text().splitlines()
    assert [json.loads(x)["index"] for x in lines] == [0, 1, 2, 3, 4]


def test_submitit_slurm_submits_the_launcher_options_to_sbatch(tmp_path: Path, env_for) -> None:
    """Slurm is not on this machine, so ``sbatch`` (and ``srun``) here are stand-ins: sbatch
    keeps the script submitit gave it and refuses it. The script carries the pipeline's
    launcher_options as ``#SBATCH`` lines (an array of the 2 shards) and the setup commands, and
    the refused jobs stop the chain naming the shards that did not finish."""
    import os
    import subprocess
    import sys

    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the [slurm] extra")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(
        '#!/bin/sh\ncp "$1" "$SBATCH_CAPTURE"\necho "sbatch: error: no Slurm here" >&2\nexit 1\n'
    )
    sbatch.chmod(0o755)
    srun = bin_dir / "srun"  # submitit looks for it to tell it is on a Slurm cluster
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    env = env_for(tmp_path / "cache")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["SBATCH_CAPTURE"] = str(tmp_path / "submitted.sh")
    chain = small_chain(tmp_path / "chain.yaml")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gen",
            "pipeline",
            f"chain={chain}",
            "shards=2",
            "launcher=submitit_slurm",
            "launcher_options.partition=cpu",
            "launcher_options.timeout_min=240",
            "launcher_options.cpus_per_task=4",
            "launcher_options.mem_gb=16",
            "launcher_options.setup=['source /shared/venv/bin/activate']",
            "hydra.run.dir=run",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    script = (tmp_path / "submitted.sh").read_text()
    for line in (
        "#SBATCH --partition=cpu",
        "#SBATCH --time=240",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=16GB",
        "#SBATCH --array=0-1",
        "source /shared/venv/bin/activate",
    ):
        assert line in script, (line, script)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "recordings (history): shard(s) 0, 1 of 2 did not finish" in proc.stderr
    assert (
        "sbatch: error: no Slurm here"
        in (tmp_path / "run/recordings.shards/launch.log").read_text()
    )


def test_shards_are_capped_at_a_steps_records(runs, tmp_path) -> None:
    """Before, ``shards=40`` on a step of 12 records made 40 shard folders, 28 of them empty
    runs; now a step runs as at most as many shards as it has records, merged as before."""
    src, chain = runs
    out = tmp_path / "many"
    result = run_chain(out, chain, shards=40)
    assert result.exit_code == 0, result.error
    shards = sorted(int(p.name) for p in (out / "mcqs.shards").iterdir() if p.name.isdigit())
    assert shards == list(range(12))
    merged = json.loads((out / "mcqs" / "manifest.json").read_text())
    assert merged["merged"]["complete"] and len(merged["merged"]["shards"]) == 12
    assert_same_bank(src / "whole", out)
