"""The CPU cores a gen process should use: the physical cores it may run on, shared among the gen
jobs this machine runs at once.

A sweep under a local launcher (``hydra/launcher=joblib``, ``launcher=submitit_local``) runs its
jobs side by side on one machine, and each job's libraries would take every core: llama.cpp's
threads busy-wait, so two shards on two cores with two threads each generated at 7 tok/s against
46 for one shard alone (``personas n=3``, 2026-11-30). So the sweep sets ``GEN_LOCAL_JOBS`` for its
jobs (:func:`launch_width`), and a library's thread count left unset becomes this process's share
of the cores (:func:`shared_threads`). Set ``GEN_LOCAL_JOBS`` by hand when something else starts
several gen processes on one machine (GNU parallel, a shell loop with ``&``). A Slurm job needs
none of this: its affinity mask holds only its own cores.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gen.errors import ConfigError

LOCAL_JOBS = "GEN_LOCAL_JOBS"
"""How many gen jobs run at once on this machine, this one included (unset: 1)."""


def physical_cores(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> int:
    """The physical cores this process may run on: the CPUs of its affinity mask, the hyper-threads
    of one core counted once (``topology/thread_siblings_list``, as llama.cpp's
    ``cpu_get_num_physical_cores`` reads them); the CPUs themselves where that is unreadable."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not cpus:
        return max(1, os.cpu_count() or 1)
    cores = set()
    for c in cpus:
        try:
            cores.add((sys_cpu / f"cpu{c}/topology/thread_siblings_list").read_text().strip())
        except OSError:
            return len(cpus)
    return max(1, len(cores))


def local_jobs() -> int:
    """``GEN_LOCAL_JOBS``: how many gen jobs share this machine's cores (1 when unset).

    Raises:
        ConfigError: it is set to anything but a whole number of at least 1.
    """
    raw = os.environ.get(LOCAL_JOBS, "").strip()
    if not raw:
        return 1
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{LOCAL_JOBS}={raw!r}: give how many gen jobs run at once (1 or more)")
    return int(raw)


def job_cores(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> int:
    """This process's share of the physical cores it may run on (at least one)."""
    return max(1, physical_cores(sys_cpu) // local_jobs())


def shared_threads() -> int | None:
    """The threads a library left at its own default should use: None (its default) when this is
    the machine's only gen job, else this job's share of the cores (:func:`job_cores`)."""
    return job_cores() if local_jobs() > 1 else None


def cores_used() -> dict[str, int]:
    """What a run's manifest says of its cores (``time.cores``): the physical cores it may run on,
    the gen jobs sharing them, and its share."""
    return {"physical": physical_cores(), "local_jobs": local_jobs(), "per_job": job_cores()}


def launch_width(launcher: Mapping[str, Any], jobs: int) -> int:
    """How many of a sweep's ``jobs`` a Hydra launcher (its config node) runs at once on this
    machine: joblib's ``n_jobs`` (negative: counted from the CPUs, as joblib does), every job for
    submitit's local executor, one for the others (Hydra's basic launcher runs them one after
    another; a cluster's jobs run on cores of their own)."""
    target = str(launcher.get("_target_") or "")
    if target.endswith(".JoblibLauncher"):
        n = int(launcher.get("n_jobs") or 1)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        width = n if n > 0 else cpus + 1 + n
    elif target.endswith("submitit_launcher.LocalLauncher"):
        width = jobs
    else:
        return 1
    return max(1, min(jobs, width))
