"""Shards of one run as jobs of a Hydra launcher: the command line's own sweep, run for a caller.

``pipeline shards=K launcher=submitit_slurm`` runs a step's generator as K jobs by running, in a
child process, the command a person would type::

    python -m gen <generator> -m shard=0,1,…,K-1 num_shards=K <the step's options> \\
        hydra/launcher=submitit_slurm hydra.launcher.partition=… \\
        hydra.sweep.dir=<run>/<step>.shards hydra.sweep.subdir=${shard}

So the jobs are Hydra's (``submitit_local``, ``submitit_slurm`` from the ``[slurm]`` extra, or
``joblib``), each job validates its own config (on another machine there is nothing else to
reuse), and shard ``i`` always writes ``<sweep dir>/<i>`` whatever subset of the shards is
launched (a rerun launches only the shards without a finished folder). Whether a shard succeeded
is read from its folder afterwards, not from the launcher: a job on another machine cannot report
to this one.

Options reach the child as overrides: :func:`overrides_of` writes a config's values in Hydra's
override grammar (quoted strings, lists, dicts; ``llm=`` / ``embedder=`` as the preset of the
backend and then every field), so the jobs validate to the same config the caller validated
(tests/unit/test_launch.py checks the round trip through the command line's own parser).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from gen.errors import ConfigError

Launcher = Literal["local", "joblib", "submitit_local", "submitit_slurm"]
LAUNCHERS: tuple[str, ...] = ("local", "joblib", "submitit_local", "submitit_slurm")
"""``local``: the shards one after another in this process; the others: Hydra's launchers."""

_PLUGINS = {
    "joblib": ("hydra_plugins.hydra_joblib_launcher.config", "JobLibLauncherConf", "joblib"),
    "submitit_local": (
        "hydra_plugins.hydra_submitit_launcher.config",
        "LocalQueueConf",
        "slurm",
    ),
    "submitit_slurm": (
        "hydra_plugins.hydra_submitit_launcher.config",
        "SlurmQueueConf",
        "slurm",
    ),
}
"""launcher -> (its Hydra plugin's config module, config class, the extra that installs it)."""

_BACKEND_PRESET = {"llama_cpp": "smollm2", "openai": "openai", "llama_server": "llama_server"}
"""The ``llm=`` preset a backend's fields are set over (every field is then given)."""

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def launcher_fields(launcher: str) -> list[str]:
    """The settings ``hydra.launcher.<key>`` of a Hydra launcher; a ConfigError naming the extra
    to install when its plugin is missing."""
    module, cls, extra = _PLUGINS[launcher]
    try:
        import importlib

        conf = getattr(importlib.import_module(module), cls)
    except ImportError:
        raise ConfigError(
            f"launcher={launcher} needs Hydra's {launcher.split('_')[0]} launcher plugin: "
            f"pip install 'egogen[{extra}]'"
        ) from None
    return [f.name for f in dataclasses.fields(conf) if not f.name.startswith("_")]


def check_launcher(launcher: str, options: dict[str, Any]) -> None:
    """``launcher_options`` name settings the launcher has (checked before anything runs)."""
    if launcher == "local":
        if options:
            raise ConfigError(
                "launcher_options: launcher=local runs the shards in this process and takes "
                "none (give launcher=submitit_slurm, submitit_local or joblib)"
            )
        return
    fields = launcher_fields(launcher)
    for key in options:
        if key not in fields:
            raise ConfigError(
                f"launcher_options: {launcher} has no setting {key!r} (its settings: "
                f"{', '.join(fields)})"
            )


def hydra_value(value: Any, where: str = "value") -> str:
    """``value`` (JSON-like data) in Hydra's override grammar: strings quoted (a ``${`` escaped,
    so it stays text), lists and dicts written out."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # Hydra reads a backslash as an escape only before a quote (and the closing quote)
        text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
        text = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text).replace("${", "\\${")
        return f"'{text}'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v, where) for v in value) + "]"
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if not isinstance(k, str) or not _KEY.match(k):
                raise ConfigError(f"{where}: key {k!r} cannot be passed to a launcher's jobs")
            parts.append(f"{k}:{hydra_value(v, where)}")
        return "{" + ",".join(parts) + "}"
    raise ConfigError(f"{where}: a {type(value).__name__} cannot be passed to a launcher's jobs")


def overrides_of(options: dict[str, Any]) -> list[str]:
    """Option values (as a generator's config holds them, or plain data) as command-line
    overrides; ``llm`` / ``embedder`` become their backend's preset and then every field."""
    out: list[str] = []
    for key, value in options.items():
        data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        if key in ("llm", "embedder") and isinstance(data, dict):
            preset = _BACKEND_PRESET.get(str(data.get("backend"))) if key == "llm" else "minilm"
            if preset is None:
                raise ConfigError(f"{key}: backend {data.get('backend')!r} has no preset")
            out.append(f"{key}={preset}")
            out += [f"++{key}.{k}={hydra_value(v, f'{key}.{k}')}" for k, v in data.items()]
        elif key in ("llm", "embedder") and isinstance(data, str):
            out.append(f"{key}={data}")
        else:
            out.append(f"++{key}={hydra_value(data, key)}")
    return out


def shard_command(
    generator: str,
    options: dict[str, Any],
    shards: list[int],
    num_shards: int,
    sweep_dir: Path,
    launcher: str,
    launcher_options: dict[str, Any],
) -> list[str]:
    """The command that runs ``shards`` of ``generator``'s run as jobs of ``launcher``."""
    settings = [
        f"hydra.launcher.{k}={hydra_value(v, f'launcher_options.{k}')}"
        for k, v in launcher_options.items()
    ]
    return [
        sys.executable,
        "-m",
        "gen",
        generator,
        "-m",
        f"shard={','.join(str(i) for i in shards)}",
        f"num_shards={num_shards}",
        *overrides_of(options),
        f"hydra/launcher={launcher}",
        *settings,
        f"hydra.sweep.dir={hydra_value(str(sweep_dir))}",
        "hydra.sweep.subdir=${shard}",
    ]


def launch(
    command: list[str],
    log: Path,
    *,
    every: float = 10.0,
    report: Callable[[], None] | None = None,
) -> int:
    """Run a launch command to its end, its output into ``log``; its exit code. The command's
    sweep waits for every job (Hydra's launchers do), so its end is the shards' end; meanwhile
    ``report`` is called every ``every`` seconds (how many shards have finished). Interrupted,
    the command is stopped; jobs a scheduler already runs are the scheduler's to cancel."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("NO_COLOR", "1")
    with log.open("a", encoding="utf-8") as f:
        f.write("$ " + " ".join(command) + "\n")
        f.flush()
        proc = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            while True:
                try:
                    return proc.wait(timeout=every)
                except subprocess.TimeoutExpired:
                    if report is not None:
                        report()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def failed_jobs(sweep_dir: Path, launched: list[int], missing: list[int], since: float) -> str:
    """Where to look for the shards of one launch that did not finish: for each, the scheduler's
    job and its log, read from the folders submitit made during the launch (``launched``: the
    shards the launch ran, in its order; ``since``: when it started). Several shards go to Slurm
    as one job array, whose task ``a`` ran shard ``launched[a]`` in ``.submitit/<array>_<a>/``;
    one shard alone as a plain job, in ``.submitit/<job>/``; the log is ``<job>_0_log.err`` in
    its folder (submitit's layout). Empty where the launcher leaves no such folders (joblib,
    submitit's local executor, whose jobs are processes of this machine)."""
    root = sweep_dir / ".submitit"
    arrays: dict[int, dict[int, Path]] = {}
    if root.is_dir():
        for p in root.iterdir():
            m = re.fullmatch(r"(\d+)(?:_(\d+))?", p.name)
            if m and p.is_dir() and p.stat().st_mtime >= since - 1:
                # an array's own folder <array>/ (its submission) is keyed -1: not a task
                arrays.setdefault(int(m[1]), {})[int(m[2]) if m[2] else -1] = p
    if not arrays:
        return ""
    tasks = arrays[max(arrays)]  # this launch's: the newest
    if len(tasks) > 1:
        tasks.pop(-1, None)  # a job array: its tasks
    elif len(launched) == 1:
        tasks = {0: tasks.popitem()[1]}  # one shard, one plain job
    else:
        return ""  # several shards, no array: a local executor's processes
    parts = [
        f"shard {launched[a]} is Slurm job {p.name} (log: {p / f'{p.name}_0_log.err'})"
        for a, p in sorted(tasks.items())
        if a < len(launched) and launched[a] in missing
    ]
    return "; ".join(parts)
