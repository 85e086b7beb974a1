"""The chain the pipeline shard tests run (tests/unit/test_launch.py in process, tests/integration/
test_pipeline_submitit.py through submitit) and how they compare its banks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import yaml

SKIP = ("manifest.json", "gen.log")


def small_chain(path: Path) -> Path:
    """Recordings (history synthesize, LLM-free) -> distractor MCQs (embedder only) -> a bank ->
    its hf release: the smallest chain with shardable steps whose bank can be compared."""
    steps = [
        {
            "name": "recordings",
            "generator": "history",
            "options": {
                "synthesize": True,
                "participants": 4,
                "scripts_per_participant": 4,
                "repeats": 2,
            },
        },
        {
            "name": "mcqs",
            "generator": "distractors",
            "shard": True,
            "options": {"n": 12},
            "inputs": {"input": "recordings/goals.jsonl"},
        },
        {
            "name": "add",
            "generator": "bank",
            "options": {"action": "add", "bank": "{run}/bank", "force": True, "message": "m"},
            "inputs": {"input": "mcqs"},
        },
        {
            "name": "release",
            "generator": "bank",
            "options": {"action": "export", "bank": "{run}/bank", "format": "hf"},
        },
    ]
    path.write_text(yaml.safe_dump({"steps": steps}))
    return path


def outputs(folder: Path) -> dict[str, bytes]:
    """Every file a step wrote (its manifest and log aside: they name paths and times)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in SKIP and ".hydra" not in p.parts
    }


def released(run_dir: Path) -> pl.DataFrame:
    """The released items (the hf export's table), without ``source``: the manifest hash of the
    run they came from (a merge run's when sharded), which is provenance, not content."""
    return pl.read_parquet(run_dir / "release" / "hf" / "distractors" / "test.parquet").drop(
        "source"
    )


def assert_same_bank(whole: Path, sharded: Path) -> None:
    for step in ("recordings", "mcqs"):
        mine, theirs = outputs(sharded / step), outputs(whole / step)
        assert mine.keys() == theirs.keys(), step
        for name in theirs:
            assert mine[name] == theirs[name], f"{step}/{name} differs from the unsharded run's"
    a, b = released(whole), released(sharded)
    assert a.height == 12 and a.equals(b)


def gen(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``python -m gen *args`` in ``cwd`` with ``env``, as the shard tests run the pipeline."""
    return subprocess.run(
        [sys.executable, "-m", "gen", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
