"""The cores a gen process uses (gen.cores): physical cores counted once per core, shared among the
jobs of a sweep that a local launcher runs side by side, and the sweep telling its jobs so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gen.cores import (
    LOCAL_JOBS,
    cores_used,
    job_cores,
    launch_width,
    local_jobs,
    physical_cores,
    shared_threads,
)
from gen.errors import ConfigError

JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
SUBMITIT = "hydra_plugins.hydra_submitit_launcher.submitit_launcher"


def _topology(root: Path, siblings: list[str]) -> None:
    for cpu, sib in enumerate(siblings):
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(sib + "\n")


def test_physical_cores_count_a_cores_hyper_threads_once(tmp_path: Path, monkeypatch) -> None:
    _topology(tmp_path, ["0,2", "1,3", "0,2", "1,3"])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert physical_cores(tmp_path) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2})  # one core's two threads
    assert physical_cores(tmp_path) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 7})  # cpu7: no topology
    assert physical_cores(tmp_path) == 3


def test_a_job_takes_its_share_of_the_cores(tmp_path: Path, monkeypatch) -> None:
    _topology(tmp_path, [str(c) for c in range(8)])  # 8 cores, no hyper-threads
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.delenv(LOCAL_JOBS, raising=False)
    assert local_jobs() == 1 and job_cores(tmp_path) == 8
    assert shared_threads() is None  # alone: every library keeps its own default
    for jobs, share in (("2", 4), ("3", 2), ("8", 1), ("20", 1)):
        monkeypatch.setenv(LOCAL_JOBS, jobs)
        assert local_jobs() == int(jobs)
        assert job_cores(tmp_path) == share  # at least one core each
    monkeypatch.setenv(LOCAL_JOBS, " 2 ")
    assert local_jobs() == 2


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_a_bad_local_jobs_value_is_refused_naming_it(bad: str, monkeypatch) -> None:
    monkeypatch.setenv(LOCAL_JOBS, bad)
    with pytest.raises(ConfigError, match=LOCAL_JOBS):
        local_jobs()


def test_shared_threads_follow_the_jobs(monkeypatch) -> None:
    monkeypatch.setenv(LOCAL_JOBS, "2")
    assert shared_threads() == max(1, physical_cores() // 2)
    assert cores_used() == {
        "physical": physical_cores(),
        "local_jobs": 2,
        "per_job": max(1, physical_cores() // 2),
    }


def test_launch_width_is_the_jobs_a_local_launcher_runs_at_once(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    assert launch_width({"_target_": JOBLIB, "n_jobs": 2}, 5) == 2
    assert launch_width({"_target_": JOBLIB, "n_jobs": 8}, 3) == 3  # at most the sweep's jobs
    assert launch_width({"_target_": JOBLIB, "n_jobs": -1}, 10) == 4  # joblib: every CPU
    assert launch_width({"_target_": JOBLIB, "n_jobs": -2}, 10) == 3  # all but one
    assert launch_width({"_target_": JOBLIB, "n_jobs": 1}, 10) == 1
    assert launch_width({"_target_": f"{SUBMITIT}.LocalLauncher"}, 6) == 6  # all at once
    assert launch_width({"_target_": f"{SUBMITIT}.SlurmLauncher"}, 6) == 1  # their own nodes
    assert (
        launch_width({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, 6)
        == 1
    )  # one after another
    assert launch_width({}, 6) == 1


def test_a_joblib_sweep_tells_its_jobs_how_many_share_the_cores(monkeypatch) -> None:
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    from gen.cli import share_cores

    monkeypatch.setenv(LOCAL_JOBS, "1")  # so that what share_cores sets is undone after the test
    monkeypatch.delenv(LOCAL_JOBS)
    share_cores("personas", ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], 3)
    assert os.environ[LOCAL_JOBS] == "2"
    # a sweep run by a job of a sweep: its jobs share that job's part of the machine
    share_cores("personas", ["hydra/launcher=joblib", "hydra.launcher.n_jobs=3"], 3)
    assert os.environ[LOCAL_JOBS] == "6"
    monkeypatch.delenv(LOCAL_JOBS)
    share_cores("personas", [], 3)  # Hydra's basic launcher: one job at a time
    assert LOCAL_JOBS not in os.environ
    share_cores("personas", ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], 1)
    assert LOCAL_JOBS not in os.environ  # a sweep of one job runs alone
