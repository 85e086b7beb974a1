"""A chain built by shards on a real Slurm cluster: a one-node cluster on this host (Debian's
slurm-wlm and munge, started by tests/slurm/start.sh: munged, slurmctld, slurmd), Hydra's submitit
launcher (the ``[slurm]`` extra) submitting each sharded step as a Slurm job array through the real
``sbatch``. Two shards give the same bank, byte for byte, as the unsharded run; a rerun after a lost
shard submits only that shard; a job that fails (a shard's task exits non-zero, or is cancelled
with ``scancel``) stops the chain with one line naming the job and where its log is.

Skipped, with the reason, where a cluster cannot be had (not root, no apt-get): CI runs as root on
Debian, so it runs there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chain_shards import assert_same_bank, gen, small_chain

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the [slurm] extra")

START = Path(__file__).resolve().parents[1] / "slurm" / "start.sh"
PARTITION = "gen"


@pytest.fixture(scope="module")
def slurm() -> str:
    """The partition of a one-node Slurm cluster on this host, started if it is not up."""
    if shutil.which("bash") is None:
        pytest.skip("no bash to start a Slurm cluster")
    proc = subprocess.run(["bash", str(START)], capture_output=True, text=True, timeout=600)
    if proc.returncode == 3:  # the script's "cannot here" (not root, nothing to install with)
        pytest.skip(proc.stderr.strip() or "no Slurm cluster on this machine")
    assert proc.returncode == 0, proc.stderr
    return PARTITION


def sharded(partition: str, *extra: str) -> list[str]:
    return [
        "shards=2",
        "launcher=submitit_slurm",
        f"launcher_options.partition={partition}",
        "launcher_options.timeout_min=20",
        "launcher_options.cpus_per_task=1",
        "progress_every=1",
        *extra,
    ]


def submissions(shards: Path) -> list[str]:
    """The jobs sbatch took for one step: submitit's job folders, ``<array>_<task>`` for the
    tasks of a job array, ``<job>`` for a job of one shard."""
    names = [p.name for p in (shards / ".submitit").iterdir()]
    arrays = {n.split("_")[0] for n in names if re.fullmatch(r"\d+_\d+", n)}
    return sorted(
        n for n in names if re.fullmatch(r"\d+_\d+", n) or n.isdigit() and n not in arrays
    )


def test_slurm_shards_build_the_unsharded_bank(
    tmp_path: Path, env_for, cache_dir, slurm: str
) -> None:
    chain = small_chain(tmp_path / "chain.yaml")
    env = env_for(cache_dir)
    proc = gen(tmp_path, env, "pipeline", f"chain={chain}", "progress=plain", "hydra.run.dir=whole")
    assert proc.returncode == 0, proc.stderr[-3000:]

    args = ["pipeline", f"chain={chain}", "progress=plain", *sharded(slurm), "hydra.run.dir=run"]
    netfs = {**env, "GEN_NETWORK_FS": "1", "GEN_CACHE_DIR": str(tmp_path / "shared-cache")}
    proc = gen(tmp_path, netfs, *args)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    run = tmp_path / "run"
    for step in ("recordings", "mcqs"):
        shards = run / f"{step}.shards"
        log = (shards / "launch.log").read_text()
        assert "Submitit 'slurm' sweep output dir" in log, log  # Hydra's launcher, Slurm's executor
        jobs = submissions(shards)
        # one job array of two tasks, run by Slurm (the task id in each job's own environment)
        assert len(jobs) == 2 and len({j.split("_")[0] for j in jobs}) == 1, jobs
        for k in (0, 1):
            manifest = json.loads((shards / str(k) / "manifest.json").read_text())
            assert manifest["shard"]["shard"] == k and manifest["exit_code"] == 0
    assert_same_bank(tmp_path / "whole", run)

    # a shard lost (a node died): the rerun submits a job of that shard alone
    before = submissions(run / "mcqs.shards")
    kept = submissions(run / "recordings.shards")
    shutil.rmtree(run / "mcqs.shards" / "1")
    shutil.rmtree(run / "mcqs")
    proc = gen(tmp_path, netfs, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    new = sorted(set(submissions(run / "mcqs.shards")) - set(before))
    assert len(new) == 1 and "_" not in new[0], new  # one plain job, not an array
    launches = [
        line
        for line in (run / "mcqs.shards" / "launch.log").read_text().splitlines()
        if line.startswith("$ ")
    ]
    assert len(launches) == 2 and " shard=1 " in launches[1], launches
    assert submissions(run / "recordings.shards") == kept  # the finished step: not again
    assert_same_bank(tmp_path / "whole", run)


def failure_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if "did not finish" in x]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_a_failed_slurm_task_stops_the_chain_naming_its_job_and_log(
    tmp_path: Path, env_for, cache_dir, slurm: str
) -> None:
    chain = small_chain(tmp_path / "chain.yaml")
    env = env_for(cache_dir)
    # the job script's setup lines run on the node before the shard: task 1 exits 3 there
    setup = "launcher_options.setup=['if [ \"$SLURM_ARRAY_TASK_ID\" = 1 ]; then exit 3; fi']"
    proc = gen(
        tmp_path,
        env,
        "pipeline",
        f"chain={chain}",
        "progress=plain",
        *sharded(slurm, setup),
        "hydra.run.dir=run",
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = failure_line(proc.stderr)
    shards = tmp_path / "run" / "recordings.shards"
    job = next(j for j in submissions(shards) if j.endswith("_1"))
    assert "shard(s) 1 of 2" in line and f"Slurm job {job}" in line, line
    log = re.search(r"log: (\S+?)[);,]", line)
    assert log and Path(log.group(1)).is_file(), line  # the log it names is there to read
    assert (shards / "0" / "manifest.json").is_file()  # the other shard finished
    steps = [json.loads(x) for x in (tmp_path / "run" / "pipeline.jsonl").read_text().splitlines()]
    assert [s["status"] for s in steps] == ["ran", "not_run", "not_run", "not_run"]


def test_a_cancelled_slurm_job_stops_the_chain_naming_it(
    tmp_path: Path, env_for, cache_dir, slurm: str
) -> None:
    chain = small_chain(tmp_path / "chain.yaml")
    env = env_for(cache_dir)
    # task 1 waits on the node until it is cancelled (scancel, as an operator or a preemption)
    setup = "launcher_options.setup=['if [ \"$SLURM_ARRAY_TASK_ID\" = 1 ]; then sleep 600; fi']"
    cmd = [sys.executable, "-m", "gen", "pipeline", f"chain={chain}", "progress=plain"]
    cmd += [*sharded(slurm, setup), "hydra.run.dir=run"]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    shards = tmp_path / "run" / "recordings.shards"
    deadline = time.monotonic() + 300
    job = None
    while time.monotonic() < deadline and job is None:
        time.sleep(1)
        if (shards / ".submitit").is_dir():
            job = next((j for j in submissions(shards) if j.endswith("_1")), None)
    assert job is not None, "the job array was never submitted"
    # wait until shard 0 is done, so the cancel hits task 1 alone
    while time.monotonic() < deadline and not (shards / "0" / "manifest.json").is_file():
        time.sleep(1)
    subprocess.run(["scancel", job], check=True, timeout=30)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr[-3000:]
    line = failure_line(stderr)
    assert "shard(s) 1 of 2" in line and f"Slurm job {job}" in line, line
