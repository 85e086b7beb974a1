"""A chain of generators as one command: ``gen pipeline chain=wagibench``.

A chain is a YAML list of steps (``examples/chains/<name>.yaml``, or any file): each names a
generator, its options, and ``inputs``: options whose value is an earlier step's run folder (or a
file in it, ``step/file``). Every step runs as a sub-run in ``<run folder>/<step>/`` with the
pipeline's seed, backends and cache (one model load for the whole chain). All steps' configs are
validated before the first runs. A rerun into the same folder (``hydra.run.dir=``) skips every step
whose folder holds a finished run of the same config, and resumes the one that was interrupted
(its finished model calls replay from the cache). A step that ends with a non-zero exit code stops
the chain with one line naming it, unless the step lists that code under ``allow_exit`` (an audit's
1 on findings, say).

``shards=K`` runs each shardable step as K jobs (``shard=i num_shards=K``) in
``<run folder>/<step>.shards/<i>/`` and merges them (``merge``) into the step's folder before the
next step reads it: in this process one after another (``launcher=local``), or as jobs of a Hydra
launcher (``launcher=submitit_slurm``, ``submitit_local``, ``joblib``; :mod:`gen.engine.launch`). A
rerun
launches only the shards without a finished folder.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gen.engine.launch import Launcher, check_launcher, failed_jobs, launch, shard_command
from gen.engine.registry import REGISTRY, generator
from gen.engine.runfolder import RunFolder
from gen.engine.runner import SHARED_OPTIONS, CommonConfig, Plan, RunContext
from gen.errors import ConfigError, GenError, InputError, MissingInputError
from gen.paths import EXAMPLES, UnsafePathError, inside, safe_part
from gen.readers import no_lone_surrogates, read_text, validated
from gen.schemas.pipeline import StepRecord

NAME = "pipeline"
CHAINS = EXAMPLES / "chains"
"""Options every step takes from the pipeline (a step's own options may override seed)."""


class Step(BaseModel):
    """One step of a chain."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    """The step's folder name inside the pipeline's run folder."""
    generator: str
    options: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, str] = Field(default_factory=dict)
    """option -> an earlier step's name, or ``step/file`` for a file in its run folder."""
    allow_exit: list[int] = Field(default_factory=list)
    """Exit codes of this step that do not stop the chain (an audit's 1 on findings)."""
    shard: bool | None = None
    """Run this step as the pipeline's ``shards`` jobs and merge them (null: when its generator
    merges its shards' summaries, :attr:`gen.engine.registry.Generator.merge`)."""


class PipelineConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Steps to run: the first n of the chain (null: all)."""
    chain: str = "wagibench"
    """A chain shipped in examples/chains/ by name, or the path of a YAML file of steps."""
    shards: int = Field(1, ge=1, le=10_000)
    """Jobs each shardable step runs as (its shards are merged before the next step)."""
    launcher: Launcher = "local"
    """Where shards run: local (here, one after another), joblib, submitit_local, submitit_slurm."""
    launcher_options: dict[str, Any] = Field(default_factory=dict)
    """The launcher's settings (hydra.launcher.*): partition, timeout_min, cpus_per_task, mem_gb…"""

    @model_validator(mode="after")
    def _not_cut(self) -> PipelineConfig:
        if self.num_shards > 1:
            raise ValueError(
                "num_shards would cut the chain's steps; give shards=K to run each shardable "
                "step as K jobs"
            )
        return self


class Chain(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[Step] = Field(min_length=1)


def chain_path(cfg: PipelineConfig) -> Path:
    if "/" not in cfg.chain and not cfg.chain.endswith((".yaml", ".yml")):
        try:
            path = inside(CHAINS, f"{cfg.chain}.yaml", what="chain")
        except UnsafePathError as e:
            raise ConfigError(f"chain: {e}") from None
        if not path.is_file():
            shipped = ", ".join(sorted(p.stem for p in CHAINS.glob("*.yaml")))
            raise ConfigError(
                f"chain: no chain {cfg.chain!r} (shipped: {shipped}; or give a YAML file's path)"
            )
        return path
    path = Path(cfg.chain).expanduser()
    if not path.is_file():
        raise MissingInputError(f"chain: no such file: {path}")
    return path


def read_chain(path: Path) -> list[Step]:
    """A chain file: ``steps:`` a list of steps; a bad one is one line naming the file and step."""
    import yaml

    text = read_text(path)
    try:
        data = no_lone_surrogates(yaml.safe_load(text), text, str(path))
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    steps = validated(Chain, data, str(path), what="chain", objects_only=False).steps
    seen: set[str] = set()
    for k, s in enumerate(steps):
        where = f"{path}: steps.{k} ({s.name})"
        if s.generator not in REGISTRY or s.generator == NAME:
            raise InputError(f"{where}: generator: unknown generator {s.generator!r}")
        if s.name in seen:
            raise InputError(f"{where}: name: repeats an earlier step")
        for option, ref in s.inputs.items():
            if ref.split("/", 1)[0] not in seen:
                raise InputError(f"{where}: inputs.{option}: {ref!r} names no earlier step")
        seen.add(s.name)
    return steps


def step_options(
    step: Step, run_dir: Path, where: str = "chain", given: str | None = None
) -> dict[str, Any]:
    """A step's own options, with its inputs resolved to paths inside the pipeline's run folder
    (``{run}`` in an option is that folder, ``{input}`` the pipeline's ``input=``: a chain that
    starts from the user's files); the rest it inherits from the pipeline's run
    (:data:`gen.engine.runner.SHARED_OPTIONS`)."""
    options: dict[str, Any] = {}
    for k, v in step.options.items():
        if isinstance(v, str) and "{input}" in v:
            if given is None:
                raise ConfigError(
                    f"{where}: step {step.name} ({step.generator}): option {k} takes the "
                    "pipeline's input=, which is not given"
                )
            v = v.replace("{input}", given)
        options[k] = v.replace("{run}", str(run_dir)) if isinstance(v, str) else v
    for option, ref in step.inputs.items():
        try:
            options[option] = str(inside(run_dir, ref, what=f"inputs.{option}"))
        except (
            UnsafePathError
        ) as e:  # "rec/../../x": a step reads only inside the pipeline's run folder
            raise InputError(f"{where}: step {step.name} ({step.generator}): {e}") from None
    return options


def step_config(
    step: Step, cfg: PipelineConfig, run_dir: Path, where: str = "chain"
) -> CommonConfig:
    """A step's validated config, as its sub-run will have it: the pipeline's shared options and
    the step's own."""
    from gen.engine.api import configure

    options = {
        **{k: getattr(cfg, k) for k in SHARED_OPTIONS},
        **step_options(step, run_dir, where, cfg.input),
    }
    try:
        return configure(step.generator, options, check_input=False)
    except ConfigError as e:
        raise ConfigError(f"{where}: step {step.name} ({step.generator}): {e}") from None


def plan(cfg: PipelineConfig) -> Plan:
    """One index per step; every step's config is validated here, before the first runs."""
    path = chain_path(cfg)
    steps = read_chain(path)
    if cfg.shards > 1:
        check_launcher(cfg.launcher, cfg.launcher_options)
    steps = steps[: cfg.n] if cfg.n is not None else steps
    for s in steps:
        step_config(
            s, cfg, Path("/nonexistent-run-folder"), str(path)
        )  # names, values; paths at run time
    return Plan(len(steps), steps)


@generator(NAME, config=PipelineConfig, records=StepRecord, kind="step", plan=plan)
def pipeline(cfg: PipelineConfig, ctx: RunContext) -> Iterator[StepRecord]:
    """A chain of generators as one command (steps wired by their run folders; reruns resume)."""
    steps: list[Step] = ctx.plan.data
    ctx.record_input(chain_path(cfg))
    for i in ctx.indices():
        step = steps[i]
        folder = inside(ctx.out_dir, safe_part(step.name), what="step name")
        ctx.say(f"[pipeline] step {i + 1}/{len(steps)}: {step.name} ({step.generator})")
        if sharded(step, cfg):
            run, missing, count, jobs = run_shards(step, cfg, ctx, folder)
            if run is None:
                yield StepRecord(
                    step=step.name,
                    generator=step.generator,
                    folder=shards_dir(ctx.out_dir, step).name,
                    status="ran",
                    exit_code=1,
                    counts={"shards": count, "shards_finished": count - len(missing)},
                )
                ctx.fail(
                    f"chain step {step.name} ({step.generator}): shard(s) "
                    f"{', '.join(map(str, missing))} of {count} did not finish "
                    + (f"({jobs}; " if jobs else "(")
                    + f"see {shards_dir(ctx.out_dir, step)}: the shards' folders and launch.log); "
                    "the same command into the same folder runs only those again",
                    1,
                )
                yield from not_run(steps, range(i + 1, ctx.indices().stop))
                return
        else:
            run = ctx.subrun(
                step.generator,
                folder,
                reuse=True,
                quiet=cfg.progress == "off",
                **step_options(step, ctx.out_dir, str(chain_path(cfg)), cfg.input),
            )
        ctx.count("steps.skipped" if run.reused else "steps.ran")
        code = run.manifest.exit_code
        yield StepRecord(
            step=step.name,
            generator=step.generator,
            folder=step.name,
            status="skipped" if run.reused else "ran",
            exit_code=code,
            counts=run.raw.get("counts", {}),
        )
        if code and code not in step.allow_exit:
            ctx.fail(
                f"chain step {step.name} ({step.generator}) ended with exit code {code}"
                + (
                    f": {run.manifest.error}"
                    if run.manifest.error
                    else f" (its run folder: {folder})"
                ),
                code,
            )
            yield from not_run(steps, range(i + 1, ctx.indices().stop))
            return


def not_run(steps: list[Step], indices: range) -> Iterator[StepRecord]:
    """The steps an earlier step's failure kept from running."""
    for j in indices:
        yield StepRecord(
            step=steps[j].name,
            generator=steps[j].generator,
            folder=steps[j].name,
            status="not_run",
            exit_code=None,
            counts={},
        )


def sharded(step: Step, cfg: PipelineConfig) -> bool:
    """The step runs as ``cfg.shards`` jobs: asked for, and the step is shardable (it says so,
    or by default its generator merges its shards' summaries)."""
    if cfg.shards == 1:
        return False
    return step.shard if step.shard is not None else REGISTRY[step.generator].merge is not None


def shards_dir(run_dir: Path, step: Step) -> Path:
    """Where a sharded step's shards run: ``<run>/<step>.shards/<i>/`` (and the launcher's
    files: ``launch.log``, ``.submitit/``)."""
    return inside(run_dir, f"{safe_part(step.name)}.shards", what="step name")


def run_shards(
    step: Step, cfg: PipelineConfig, ctx: RunContext, folder: Path
) -> tuple[RunFolder | None, list[int], int, str]:
    """Run a step as ``cfg.shards`` jobs, or as many as it has records when fewer (those without
    a finished folder of their config; all on a first run) and merge them into the step's folder;
    the merged folder, or None and the shards that did not finish; the number of shards; and
    where the unfinished shards' scheduler jobs and logs are (:func:`failed_jobs`). Every shard
    has the config the unsharded step would have (the pipeline's shared options and the step's
    own, :meth:`RunContext.config_for`) but its slice."""
    run_dir = ctx.out_dir.resolve()
    base = shards_dir(run_dir, step)
    options = step_options(step, run_dir, str(chain_path(cfg)), cfg.input)
    # no more shards than the step has records: a shard of none is an empty folder
    records = REGISTRY[step.generator].make_plan(ctx.config_for(step.generator, **options)).n
    count = max(1, min(cfg.shards, records))
    dirs = [inside(base, str(k), what="shard") for k in range(count)]
    configs = [
        ctx.config_for(step.generator, shard=k, num_shards=count, **options) for k in range(count)
    ]

    def pending() -> list[int]:
        return [
            k
            for k, (d, c) in enumerate(zip(dirs, configs, strict=True))
            if (done := RunFolder.find(d)) is None or not done.finished_with(c)
        ]

    todo = pending()
    if todo and cfg.launcher == "local":
        for k in todo:
            ctx.say(f"[pipeline]   {step.name}: shard {k + 1}/{count}")
            ctx.subrun(
                step.generator,
                dirs[k],
                reuse=True,
                quiet=cfg.progress == "off",
                shard=k,
                num_shards=count,
                **options,
            )
    elif todo:
        spec = REGISTRY[step.generator]
        shared = {
            k: getattr(cfg, k)
            for k in SHARED_OPTIONS
            if k not in options and k in spec.config.model_fields
        }
        command = shard_command(
            step.generator,
            {**shared, **options},
            todo,
            count,
            base,
            cfg.launcher,
            cfg.launcher_options,
        )
        ctx.say(
            f"[pipeline]   {step.name}: shard(s) {', '.join(map(str, todo))} of {count} "
            f"through {cfg.launcher} (log: {base / 'launch.log'})"
        )
        seen = [len(todo)]

        def report() -> None:  # a line when a shard finishes, while the jobs run
            try:
                left = len(pending())
            except (GenError, OSError):  # a folder being written: the next look reads it
                return
            if left != seen[0]:
                seen[0] = left
                ctx.say(f"[pipeline]   {step.name}: {count - left}/{count} shards finished")

        started = time.time()
        launch(command, base / "launch.log", every=cfg.progress_every, report=report)
        missing = pending()
        if missing:
            return None, missing, count, failed_jobs(base, todo, missing, started)
    missing = pending()
    if missing:
        return None, missing, count, ""
    merged = ctx.subrun(
        "merge",
        folder,
        reuse=True,
        quiet=cfg.progress == "off",
        input=[str(d) for d in dirs],
    )
    return merged, [], count, ""
