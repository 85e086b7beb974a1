"""``gen <generator> [hydra overrides]`` (also ``python -m gen``): a thin shell around Hydra.

Every option is a pydantic field (:mod:`gen.engine.config` hands them to Hydra). Before Hydra runs,
the shell composes and validates the config of every job of the command (each value of a
sweep), and sizes each run (its generator's plan hook reads its input): any mistake is one
line on stderr and exit code 2, before a run folder exists or a model loads. Then Hydra's own
main runs the jobs, so run folders, ``.hydra/``, ``-m`` sweeps and launchers behave as Hydra
documents them; a job reuses the settings and plan validated here.

Override forms: ``key=v``, ``+key=v`` and ``++key=v`` all set an option. The shell hands
Hydra every option override as ``++key=v`` (add or override), so Hydra never judges option
names; pydantic does, once, naming the option and its generator.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from gen.errors import ConfigError, GenError
from gen.paths import CONF

USAGE = "usage: gen <generator> [key=value ...]   (gen --help; also python -m gen)"
GROUPS = ("generator", "llm", "embedder")
MAX_JOBS = 10_000
"""Most jobs one sweep may expand to (each is validated before the first runs)."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _main(argv)
        sys.stdout.flush()  # a buffered pipe fails here, not in the interpreter's final flush
        return code
    except GenError as e:
        return fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except BrokenPipeError:  # the reader went away (gen --help | head): nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(
            devnull, sys.stdout.fileno()
        )  # so the interpreter's final flush does not fail again
        return 141  # 128 + SIGPIPE, as a shell reports it


def _main(argv: list[str]) -> int:
    from gen.engine.registry import REGISTRY, collisions
    from gen.llm.secrets import refuse_on_command_line

    refuse_on_command_line(argv)  # before any parser or message can repeat a key

    if not argv or argv[0] in ("-h", "--help", "help"):
        print_help()
        return 0
    name, rest = argv[0], argv[1:]
    REGISTRY.get_or_fail(name)
    for line in collisions(name):  # gen's own runs; the plugin that took its name is named
        fail(line, 2)
    if any(a in ("-h", "--help") for a in rest):
        print_generator_help(name)
        return 0
    rest = action_word(name, rest)
    flags, overrides = split_flags(name, rest)
    overrides = normalize_overrides(overrides)
    multirun = any(f in ("-m", "--multirun") for f in flags)
    check_output_options(overrides)
    jobs = validate_jobs(name, overrides, multirun=multirun)
    check_run_dir(name, overrides, multirun=multirun)
    check_job_dirs(name, overrides, jobs, multirun=multirun)
    _VALIDATED.update({job.key: job for job in jobs})
    sys.argv = [sys.argv[0], *flags, f"generator={name}", *overrides]
    if multirun:
        share_cores(name, sweep_jobs(overrides)[0], len(jobs))
        return run_sweep(name, len(jobs), swept_keys(overrides))
    _hydra_main(name)
    return 0


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys a sweep varies (``input`` of ``input=a,b``)."""
    return [
        raw.split("=", 1)[0].lstrip("+")
        for raw, o in zip(overrides, _parse(overrides), strict=True)
        if o.is_sweep_override()
    ]


def share_cores(name: str, job: list[str], jobs: int) -> None:
    """Tell the sweep's jobs how many of them share this machine's cores (``GEN_LOCAL_JOBS``, read
    by :mod:`gen.cores`; times any count this process was given, for a sweep run by a sweep's
    job): a local launcher runs them side by side, and each job's libraries would take every
    core."""
    from omegaconf import OmegaConf

    from gen.cores import LOCAL_JOBS, launch_width, local_jobs

    node = _compose(name, job).hydra.launcher
    width = launch_width(cast(dict[str, Any], OmegaConf.to_container(node, resolve=True)), jobs)
    if width > 1:
        os.environ[LOCAL_JOBS] = str(local_jobs() * width)


def run_sweep(name: str, expected: int, swept: list[str]) -> int:
    """Hydra runs every job of the sweep (a job's non-zero exit does not stop the others); then
    one line per job, and the largest exit code of the jobs (see :mod:`gen.sweep`)."""
    from gen.sweep import Sweep, summary

    sweep = Sweep()
    interrupted = False
    try:
        _hydra_main(name)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        outcomes = sweep.outcomes()
        sweep.close()
    lines, code = summary(outcomes, expected, swept, interrupted=interrupted)
    for line in lines:
        print(line, flush=True)
    return code


def action_word(name: str, rest: list[str]) -> list[str]:
    """``gen bank add …``: a bare word right after the generator name becomes
    ``action=<word>`` when the generator's config has an ``action`` field."""
    from gen.engine.registry import REGISTRY

    if (
        rest
        and "=" not in rest[0]
        and not rest[0].startswith(("-", "+", "~"))
        and "action" in REGISTRY[name].config.model_fields
    ):
        return [f"action={rest[0]}", *rest[1:]]
    return rest


FLAGS = {"-m", "--multirun", "-v", "--verbose"}


def split_flags(name: str, rest: list[str]) -> tuple[list[str], list[str]]:
    """Hydra's flags gen passes on (``-m``), ``-v`` (library logs on the console too), and
    the overrides. Any other flag is refused in one line."""
    flags, overrides = [], []
    for a in rest:
        if a.startswith("-") and not a.startswith("--") and a not in FLAGS:
            raise ConfigError(
                f"unknown flag {a!r} for {name} (flags: -m for sweeps, -v for library logs; "
                f"gen {name} --help lists the options)"
            )
        if a.startswith("--") and a not in FLAGS:
            raise ConfigError(
                f"unknown flag {a!r} for {name} (flags: -m for sweeps, -v for library logs; "
                f"gen {name} --help lists the options)"
            )
        if a in ("-v", "--verbose"):
            overrides += [
                "hydra.job_logging.handlers.console.level=INFO",
                "hydra.job_logging.handlers.console.filters=[]",
            ]
        elif a in FLAGS:
            flags.append(a)
        else:
            overrides.append(a)
    return flags, overrides


class OwnLogs:
    """Console filter: gen's own log lines, and any library's errors; the rest of the library
    chatter (one ``HTTP Request: POST …`` per call) goes only to the run folder's log.
    instructor's errors too: the LLM boundary turns every failed call into a typed reject (or,
    after ``llm.max_consecutive_errors`` in a row, the run's one error line)."""

    def filter(self, record: Any) -> bool:
        top = record.name.split(".", 1)[0]
        return top in ("gen", "generators") or (record.levelno >= 40 and top != "instructor")


def fail(message: str, code: int) -> int:
    from rich.console import Console
    from rich.markup import escape

    from gen.llm.secrets import scrub

    message = scrub(message)  # the last guard: no line on the terminal repeats a key

    # escape: a message's own brackets ("must be [low, high]") are text, not markup
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]error:[/] {escape(message)}"
    )
    return code


# --------------------------------------------------------------------------- overrides


def _parse(overrides: list[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception as e:  # noqa: BLE001 - Hydra's parser raises several types
        raise ConfigError(f"cannot parse overrides: {_first_line(e)}") from None


def _is_option(key: str) -> bool:
    """An option override (not a config group choice, not Hydra's own settings)."""
    return not (key in GROUPS or key.startswith("hydra") or "/" in key)


def normalize_overrides(overrides: list[str]) -> list[str]:
    """``key=v`` / ``+key=v`` / ``++key=v`` for an option all become ``++key=v``; group
    choices (``llm=openai``), deletions (``~key``) and ``hydra.*`` stay as they are."""
    out = []
    for raw, o in zip(overrides, _parse(overrides), strict=True):
        key = o.get_key_element().lstrip("+~")
        if _is_option(key) and not raw.startswith("~"):
            out.append("++" + raw.lstrip("+"))
        else:
            out.append(raw)
    return out


def _check_choices(overrides: list[Any]) -> None:
    """``llm=`` / ``embedder=`` name a preset that exists."""
    from gen.engine.config import EMBEDDER_PRESETS, LLM_PRESETS

    presets = {"llm": LLM_PRESETS, "embedder": EMBEDDER_PRESETS}
    for o in overrides:
        key = o.get_key_element()
        if key in presets:
            values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
            for v in values:
                if v not in presets[key]:
                    raise ConfigError(
                        f"unknown choice {key}={v}; available {key}: {', '.join(presets[key])}"
                    )


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """Every job of a sweep, as Hydra's basic sweeper makes them (the cartesian product of the
    swept values); one job without sweeps."""
    parsed = _parse(overrides)
    _check_choices(parsed)
    axes: list[list[str]] = []
    for raw, o in zip(overrides, parsed, strict=True):
        if o.is_sweep_override():
            key = raw.split("=", 1)[0]
            try:
                values = list(o.sweep_string_iterator())
            except Exception as e:  # noqa: BLE001 - a glob over config groups, say
                raise ConfigError(f"{key}: cannot expand this sweep ({_first_line(e)})") from None
            axes.append([f"{key}={v}" for v in values])
        else:
            axes.append([raw])
    count = 1
    for a in axes:
        count *= len(a)
    if count > MAX_JOBS:
        raise ConfigError(f"the sweep makes {count} jobs; at most {MAX_JOBS}")
    return [list(job) for job in itertools.product(*axes)]


# --------------------------------------------------------------------------- validation


@dataclass
class Job:
    key: str
    settings: Any
    plan: Any


_VALIDATED: dict[str, Job] = {}
"""Jobs validated (and sized) by the shell, by their composed config, for Hydra's job to reuse."""


def _compose(name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from gen.engine.config import register
    from gen.engine.registry import REGISTRY

    register(name, REGISTRY[name].config)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None, job_name="gen"):
            return compose(
                "config", overrides=[f"generator={name}", *overrides], return_hydra_config=True
            )
    finally:
        GlobalHydra.instance().clear()


def _plain(cfg: Any, *, throw_on_missing: bool = False) -> dict[str, Any]:
    """A composed config (resolved) as plain data."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=throw_on_missing)
    # a composed config's root is a DictConfig, whose keys are the config's (string) names
    return cast(dict[str, Any], data)


def _key(name: str, data: dict[str, Any]) -> str:
    return json.dumps([name, data], sort_keys=True, default=str)


def validate(name: str, overrides: list[str]) -> Any:
    """Compose and validate one job's overrides (options in any form); the pydantic settings.

    Raises:
        ConfigError: an unknown option or choice, or an invalid value, named.
        MissingInputError: ``input=`` does not exist.
    """
    job = sweep_jobs(normalize_overrides(overrides))[0]  # a sweep: its first job
    settings = settings_from(name, composed(name, job))
    if isinstance(settings.input, str):
        settings.input_path()  # a missing input= fails here, before any model loads
    return settings


def composed(name: str, overrides: list[str]) -> dict[str, Any]:
    """The composed config of one job as plain data (without Hydra's own node), refused when
    it holds a key once interpolated, Hydra's own settings included (:func:`refuse_in_config`).
    """
    from omegaconf import open_dict
    from omegaconf.errors import MissingMandatoryValue

    from gen.llm.secrets import refuse_in_config

    try:
        cfg = _compose(name, overrides)
    except Exception as e:  # noqa: BLE001 - Hydra raises several types here
        raise ConfigError(
            _first_line(e) + (f" {_first_line(e.__cause__)}" if e.__cause__ else "")
        ) from None
    with open_dict(cfg):
        hydra_node = cfg.pop("hydra", None)
    try:
        data = _plain(cfg, throw_on_missing=True)
    except MissingMandatoryValue as e:
        raise ConfigError(f"{e.full_key} is required (for example {e.full_key}=...)") from None
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"config: {_first_line(e)}") from None
    hydra = dict(_leaves(hydra_node, "hydra")) if hydra_node is not None else {}
    refuse_in_config({**data, **hydra})  # before a folder, a log line or a .hydra file holds it
    return data


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, str]]:
    """(dotted key, resolved text) of every string leaf of Hydra's node that resolves here (its
    ``runtime`` values are only known inside the job: those leaves are left out)."""
    from omegaconf import DictConfig, ListConfig

    keys: list[Any] = list(node.keys()) if isinstance(node, DictConfig) else [*range(len(node))]
    for k in keys:
        where = f"{prefix}.{k}" if isinstance(node, DictConfig) else f"{prefix}[{k}]"
        if where == "hydra.overrides":  # the command line's own words, checked as such
            continue
        try:
            value = node[k]
        except Exception:  # noqa: BLE001, S112 - a value only the job knows (runtime.*)
            continue
        if isinstance(value, (DictConfig, ListConfig)):
            yield from _leaves(value, where)
        elif isinstance(value, str):
            yield where, value


def validate_jobs(name: str, overrides: list[str], *, multirun: bool) -> list[Job]:
    """Validate and size every job of the command before the first one starts."""
    from gen.engine.registry import REGISTRY

    if not multirun and any(o.is_sweep_override() for o in _parse(overrides)):
        raise ConfigError("a sweep (key=a,b) needs -m: gen <generator> -m key=a,b")
    jobs = sweep_jobs(overrides)
    out = []
    for job in jobs:
        data = composed(name, job)
        settings = settings_from(name, data)
        if isinstance(settings.input, str):
            settings.input_path()
        plan = REGISTRY[name].make_plan(settings)
        out.append(Job(_key(name, data), settings, plan))
    return out


def settings_from(name: str, data: dict[str, Any]) -> Any:
    """Composed config data -> the generator's pydantic config (as
    :func:`gen.engine.api.configure`)."""
    from gen.engine.api import configure

    return configure(name, data)


RUN_DIRS = ("hydra.run.dir", "hydra.sweep.dir")
LOG_FILES = ("hydra.job_logging.", "hydra.hydra_logging.")


def check_output_options(overrides: list[str]) -> None:
    """Hydra's output settings that would write outside the run folder are refused before
    anything is written: an empty run or sweep folder (the current folder), the current folder or
    one above it, an ``output_subdir`` or sweep ``subdir`` that is empty, absolute or climbs
    (``..``), a job name or log file that leaves the run folder, and ``hydra.job.chdir=true``
    (gen reads relative inputs from the folder the command was given in)."""
    for raw, o in zip(overrides, _parse(overrides), strict=True):
        key = o.key_or_group.lstrip("+~")
        if not key.startswith("hydra.") or raw.startswith("~") or o.is_sweep_override():
            continue
        value = o.value()
        text = "" if value is None else str(value)
        if key in RUN_DIRS:
            _check_run_folder(key, text, value)
        elif key in ("hydra.output_subdir", "hydra.sweep.subdir"):
            if value is None and key == "hydra.output_subdir":
                continue  # null: no .hydra folder
            _check_relative(
                key,
                text,
                "null keeps no .hydra folder"
                if key == "hydra.output_subdir"
                else "the default is the job number",
            )
        elif key == "hydra.job.chdir" and value not in (False, "false", "False"):
            raise ConfigError(
                "hydra.job.chdir: gen runs in the folder the command was given in (relative inputs "
                "are read from there); leave hydra.job.chdir out"
            )
        elif key == "hydra.job.name":
            _check_relative(key, text, "it names the run's log file", single=True)
        elif key.startswith(LOG_FILES) and key.endswith(".filename"):
            base = "${hydra.runtime.output_dir}/"
            if not text.startswith(base):
                raise ConfigError(
                    f"{key}: a log file goes inside the run folder ({base}<name>.log), got {text!r}"
                )
            _check_relative(key, text.removeprefix(base), "a file name inside the run folder")


def _check_run_folder(key: str, text: str, value: Any) -> None:
    if value is None or not text.strip():
        raise ConfigError(
            f"{key} is empty: give the run its own folder ({key}=<folder>), or leave it out "
            "(outputs/<generator>/<time>)"
        )
    if "${" in text:
        return
    where = Path(text).expanduser().resolve()
    here = Path.cwd().resolve()
    if where == here or where in here.parents:
        raise ConfigError(
            f"{key}={text}: the run would be written into "
            f"{'the current folder' if where == here else f'{where}, a folder above this one'}; "
            "give the run its own folder"
        )


def _check_relative(key: str, text: str, hint: str, *, single: bool = False) -> None:
    from pathlib import PurePosixPath

    parts = PurePosixPath(text).parts
    if not text.strip():
        raise ConfigError(f"{key} is empty ({hint})")
    if (
        text.startswith(("/", "~"))
        or any(p in ("..", ".") for p in parts)
        or (single and len(parts) > 1)
        or "\\" in text
        or "\x00" in text
    ):
        raise ConfigError(
            f"{key}={text}: must stay inside the run folder (a plain relative name; {hint})"
        )


def check_run_dir(name: str, overrides: list[str], *, multirun: bool) -> None:
    """The run folder (``hydra.run.dir=`` or ``outputs/<name>``) can be made; a file there or a
    read-only place is one line, not Hydra's traceback."""
    from gen.paths import unwritable

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == key]
    # an interpolated folder (${now:...}) is checked up to its first interpolation
    where = Path(given[-1].split("${")[0] or ".") if given else Path("outputs") / name
    shown = given[-1] if given else where
    why = unwritable(where)
    if why is not None:
        raise ConfigError(f"{key}: cannot make a run folder at {shown}: {why}")


def check_job_dirs(name: str, overrides: list[str], jobs: list[Job], *, multirun: bool) -> None:
    """No job's run folder lies in a bank or in one of its inputs
    (:func:`gen.engine.preflight.check_out_dir`): checked here, before Hydra makes ``.hydra/`` in
    it."""
    from gen.engine.preflight import check_out_dir

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == key]
    text = given[-1] if given else f"outputs/{name}/${{now:%Y-%m-%d_%H-%M-%S}}"
    fixed = text.split("${")[0]
    # an interpolated folder (outputs/<name>/<time>) lies somewhere under its fixed part: a
    # stand-in child of it is checked (inside a bank or an input run folder, or not)
    where = Path(fixed or ".") if fixed == text else Path(fixed + "_").parent / "_"
    for job in jobs:
        check_out_dir(
            where.expanduser(), job.settings, key=key, shown=given[-1] if given else str(where)
        )


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


# --------------------------------------------------------------------------- hydra main


def _task(cfg: Any) -> int:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from gen.sweep import report

    hc = HydraConfig.get()
    name = hc.runtime.choices["generator"]
    out_dir = Path(hc.runtime.output_dir)
    code, error = _job(name, cfg, out_dir)
    if (
        hc.mode == RunMode.MULTIRUN
    ):  # a sweep's job: report and return, so the sweep runs its other jobs
        report(int(hc.job.num), list(hc.overrides.task), code, error, out_dir)
        if code == 130:
            raise KeyboardInterrupt
        return code
    if code:
        sys.exit(code)
    return 0


def _job(name: str, cfg: Any, out_dir: Path) -> tuple[int, str | None]:
    """Run one job; its exit code and one-line error (printed here, once)."""
    from gen.engine.registry import REGISTRY
    from gen.engine.runner import run_config

    try:
        data = _plain(cfg)
        data.pop("hydra", None)
        job = _VALIDATED.pop(_key(name, data), None)
        if job is None:  # a launcher's worker process: validate and size here
            settings = settings_from(name, data)
            plan = REGISTRY[name].make_plan(settings)
        else:
            settings, plan = job.settings, job.plan
        result = run_config(name, settings, out_dir, resolved=data, plan=plan)
    except GenError as e:
        return fail(str(e), e.exit_code), str(e)
    except KeyboardInterrupt:
        return fail("interrupted", 130), "interrupted"
    except Exception as e:
        if os.environ.get("GEN_DEBUG"):
            raise
        message = f"unexpected {type(e).__name__}: {e} (GEN_DEBUG=1 shows the traceback)"
        return fail(message, 1), message
    if result.exit_code and result.error:
        fail(result.error, result.exit_code)
    return result.exit_code, result.error


def _hydra_main(name: str) -> None:
    import hydra

    from gen.engine.config import register
    from gen.engine.registry import REGISTRY

    register(name, REGISTRY[name].config)
    hydra.main(version_base=None, config_path=str(CONF), config_name="config")(_task)()


# --------------------------------------------------------------------------- help


def print_help() -> None:
    from gen.engine.config import LLM_PRESETS
    from gen.engine.registry import REGISTRY, collisions

    helps = {}
    for name in sorted(REGISTRY):
        try:
            helps[name] = REGISTRY[name].help
        except ConfigError as e:  # a broken plugin: one line, and the others are listed
            fail(f"skipped: {e}", 2)
    for line in collisions():
        fail(line, 2)
    from gen import kinds

    for line in kinds.skipped():  # a plugin kind not taken: one line each
        fail(line, 2)
    print(USAGE)
    print("\ngenerators:")
    width = max(len(n) for n in helps)
    for name, text in helps.items():
        print(f"  {name:<{width}}  {text}")
    print(
        f"\ncommon overrides: seed= n= llm={'|'.join(LLM_PRESETS)} embedder= input= shard= "
        "num_shards="
    )
    print(
        "                  hydra.run.dir=<folder>   -m ... hydra/launcher=joblib (sweeps)   -v "
        "(library logs)"
    )
    print("example: gen digital +persona_pool=50")


def print_generator_help(name: str) -> None:
    """A generator's help line and its options; the docs' reference pages show the same rows
    (:mod:`gen.docs`)."""
    from gen.docs import options
    from gen.engine.registry import REGISTRY
    from gen.engine.stages import StagesConfig

    g = REGISTRY[name]
    print(f"gen {name} [key=value ...]\n\n{g.help}\n")
    for title, rows in options(name):
        print(f"{title}:")
        for o in rows:
            print(f"  {f'{o.key}={o.default}':<28} {o.description}")
        print()
    stages = g.config.model_fields.get("stages")
    if (
        stages is not None
        and isinstance(stages.annotation, type)
        and issubclass(stages.annotation, StagesConfig)
    ):
        print(
            "stages (a model per stage: stages.<stage>.llm=<preset> or "
            "stages.<stage>.llm.<field>=…; "
            "unset: the run's llm):"
        )
        for stage, info in stages.annotation.model_fields.items():
            print(f"  {stage:<28} {' '.join((info.description or '').split())}")
        print()
