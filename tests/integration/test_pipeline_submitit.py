"""A chain built by shards on submitit's local executor, through Hydra's submitit launcher (the
``[slurm]`` extra; real submitit, real subprocesses, the real embedder): ``pipeline shards=2
launcher=submitit_local`` gives the same bank as the unsharded run, and a rerun after a lost shard
launches only that shard. The shards run with the network-filesystem layout forced
(``GEN_NETWORK_FS=1``: a cache part per process, O_EXCL lock files), as on a cluster's NFS or
Lustre. Slurm itself is not on the test machine: ``submitit_slurm`` differs only in the executor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from chain_shards import assert_same_bank, gen, small_chain

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the [slurm] extra")


def test_submitit_shards_build_the_unsharded_bank(tmp_path: Path, env_for, cache_dir) -> None:
    chain = small_chain(tmp_path / "chain.yaml")
    env = env_for(cache_dir)
    proc = gen(tmp_path, env, "pipeline", f"chain={chain}", "progress=plain", "hydra.run.dir=whole")
    assert proc.returncode == 0, proc.stderr[-3000:]

    sharded = [
        "pipeline",
        f"chain={chain}",
        "progress=plain",
        "shards=2",
        "launcher=submitit_local",
        "launcher_options.timeout_min=20",
        "progress_every=1",
        "hydra.run.dir=sharded",
    ]
    netfs = {**env, "GEN_NETWORK_FS": "1", "GEN_CACHE_DIR": str(tmp_path / "shared-cache")}
    proc = gen(tmp_path, netfs, *sharded)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "shards finished" in proc.stdout + proc.stderr  # progress while the jobs run
    run = tmp_path / "sharded"
    for step in ("recordings", "mcqs"):
        shards = run / f"{step}.shards"
        log = (shards / "launch.log").read_text()
        assert "Submitit 'local' sweep output dir" in log, log  # Hydra's submitit launcher ran it
        # submitit's own files: one job per shard, each ran in a process of its own and returned
        assert len(list((shards / ".submitit").glob("*/*_result.pkl"))) == 2
        for i in (0, 1):
            manifest = json.loads((shards / str(i) / "manifest.json").read_text())
            assert manifest["shard"]["shard"] == i and manifest["exit_code"] == 0
    # each shard process wrote a cache part of its own (no shared SQLite writer on a network fs)
    assert len(list((tmp_path / "shared-cache").rglob("*.parts/*.sqlite"))) >= 2
    assert_same_bank(tmp_path / "whole", run)

    # a shard lost (a node died): the rerun launches only it, and the bank is the same again
    shutil.rmtree(run / "mcqs.shards" / "1")
    shutil.rmtree(run / "mcqs")
    proc = gen(tmp_path, netfs, *sharded)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launches = [
        line
        for line in (run / "mcqs.shards" / "launch.log").read_text().splitlines()
        if line.startswith("$ ")
    ]
    assert len(launches) == 2 and " shard=1 " in launches[1], launches
    assert_same_bank(tmp_path / "whole", run)
