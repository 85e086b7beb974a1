"""The runner: turns a generator into a run folder, and what a generator may use (RunContext).

A generator is a function ``(cfg, ctx) -> Iterator[Record | Reject | list[Record | Reject]]``
that yields exactly one outcome per index of ``ctx.indices()``, in order: a record, a reject,
or a list of them when one input unit gives several outputs (a clip gives several questions).
The runner streams them to ``<name>.jsonl`` and ``rejects.jsonl``, reconciles counts, and
writes ``manifest.json``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from gen.cores import cores_used
from gen.engine.backends import Backends
from gen.engine.manifest import (
    TOOLKIT_VERSION,
    atomic_write,
    count_lines,
    git_info,
    output_hashes,
    package_versions,
)
from gen.engine.preflight import check_out_dir, preflight
from gen.engine.progress import Progress
from gen.engine.registry import REGISTRY
from gen.engine.runconfig import (
    SHARED_OPTIONS,
    CommonConfig,
    Plan,
    PlanHook,
    derive_id,
    derive_seed,
    shard_range,
)
from gen.engine.runfolder import RunFolder
from gen.engine.schedule import fan_out, ordered
from gen.errors import BackendError
from gen.llm import Cache, LanguageModel, LLMConfig, batch, sha256_file
from gen.llm.labels import model_label, unique_labels
from gen.paths import inside
from gen.schemas import Reject
from gen.templates import Prompts
from gen.timing import CLOCK, summary_line, time_split

__all__ = [
    "SHARED_OPTIONS",
    "CommonConfig",
    "MergeHook",
    "Plan",
    "PlanHook",
    "RunContext",
    "RunResult",
    "derive_id",
    "derive_seed",
    "run_config",
    "shard_range",
]

R = TypeVar("R")
MergeHook = Callable[["RunContext", list[dict[str, Any]], list[dict[str, Any]]], None]
"""``(ctx, merged records, shard manifests)``: a generator's part of ``merge`` — it sets the
merged manifest's summaries in ``ctx.extra`` and rewrites summary files from all the records."""


def _key(cfg: Any) -> str:
    return json.dumps(cfg.model_dump(mode="json"), sort_keys=True)


def _cost(llm: Any) -> float | None:
    """What a model's calls in this run cost at its ``llm.price`` (None without a price)."""
    price = getattr(llm, "price", None)
    cost = getattr(llm.usage, "cost", None)
    discount = getattr(llm, "batch_discount", 1.0)
    return cost(price, discount) if price is not None and cost is not None else None


WINDOW = 16
"""ctx.imap's window of records under way or waiting to be yielded, in multiples of the width: a
record with a long chain of calls (a persona slot redrawn many times) holds the records after it
until it ends, and the window is what the others fill the slots with meanwhile (a simulated
64-slot run of persona-like records, 5 % with 12 calls in a row: 60 % busy at 4x, 75 % at 16x).
"""


class RunContext:
    """What a generator may use: seeds, indices, the LLM and embedder (lazy), prompts,
    counters for the manifest, a way to write extra output files, and sub-runs."""

    def __init__(
        self,
        name: str,
        cfg: CommonConfig,
        out_dir: Path,
        *,
        backends: Backends | None = None,
        parent: RunContext | None = None,
    ):
        self.name = name
        self.cfg = cfg
        self.out_dir = out_dir
        self.prompts = Prompts()
        self.stats: Counter[str] = Counter()
        self.extra: dict[str, Any] = {}
        self.inputs: dict[str, str] = {}
        self.records_name = name
        """Base name of the records file (``merge`` writes the shards' generator name)."""
        self.records_kind: str | None = None
        """What the records are, when not the generator's declared kind (``merge``: the shards')."""
        self.records_models: list[str] = []
        """Names of the records' models the runner cannot see (``merge`` copies lines as they
        are)."""
        self.exit_code = 0
        """Process exit code after a complete run (``audit`` sets 1 on findings)."""
        self.error: str | None = None
        """The one-line message of a run that ends with a non-zero exit code (:meth:`fail`)."""
        self.plan = Plan(cfg.n)
        """The run's size and what its plan hook read (the runner sets it)."""
        self.parent = parent
        self.progress: Progress | None = None
        """The run's terminal display (set by :func:`run`); :meth:`say` writes through it."""
        self.subruns: list[dict[str, Any]] = []
        self._backends = backends or Backends()
        self._owns_backends = backends is None
        self._llm: LanguageModel | None = None
        self._embedder: Any = None
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._models: dict[str, tuple[Any, LanguageModel]] = {}
        """Every model this run used, by its config's JSON: (config, this run's fork)."""
        self._stages: dict[str, Any] = {}
        """Stage name -> the config of the model it used (:meth:`stage_llm`)."""

    def count(self, key: str, n: int = 1) -> None:
        """Add to a manifest counter (validators' drops and corrections); thread-safe."""
        with self._lock:
            self.stats[key] += n

    @cached_property
    def cache(self) -> Cache | None:
        if self.cfg.cache_dir is None:
            return None
        return Cache(Path(self.cfg.cache_dir).expanduser() / "llm.sqlite")

    @property
    def llm(self) -> LanguageModel:
        """This run's LLM (loaded on first use; a sub-run shares its parent's loaded model
        but counts its own usage)."""
        with self._lock:
            if self._llm is None:
                self._llm = self._backends.llm(self.cfg.llm, self.cache).fork()
            self._models.setdefault(_key(self.cfg.llm), (self.cfg.llm, self._llm))
            return self._llm

    @property
    def llm_loaded(self) -> bool:
        return self._llm is not None

    def llm_for(self, cfg: LLMConfig) -> LanguageModel:
        """Another configured model (a screening panel's, a stage's), loaded once per command;
        its calls count in this run's manifest under ``models``."""
        if cfg == self.cfg.llm:
            return self.llm
        key = _key(cfg)
        with self._lock:
            if key in self._models:
                return self._models[key][1]
        llm = self._backends.llm(cfg, self.cache).fork()
        with self._lock:
            return self._models.setdefault(key, (cfg, llm))[1]

    def stage_llm(self, stage: str) -> LanguageModel:
        """The model of stage ``stage``: its ``stages.<stage>.llm``, else the run's."""
        stages = getattr(self.cfg, "stages", None)
        cfg = stages.models().get(stage) if stages is not None else None
        with self._lock:
            self._stages[stage] = cfg if cfg is not None else self.cfg.llm
        return self.llm if cfg is None else self.llm_for(cfg)

    @property
    def width(self) -> int:
        """How many calls this run's models take at once, the widest of them (the run's llm,
        its stages'; a loaded model's own concurrency)."""
        stages = getattr(self.cfg, "stages", None)
        configs = [self.cfg.llm, *(stages.models().values() if stages is not None else ())]
        width = max(
            1 if c.backend == "llama_cpp" else c.concurrency for c in configs
        )  # in process: one
        return max(width, self._llm.concurrency) if self._llm is not None else width

    def models_manifest(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The manifest's ``models`` (each model used: identity, its hash, usage, cost, calls in
        flight) and ``stages`` (each stage's model, by its label there)."""
        with self._lock:
            used = list(self._models.values())
            stages = dict(self._stages)
        labels = unique_labels([model_label(c) for c, _ in used])
        models: dict[str, Any] = {}
        by_key: dict[str, str] = {}
        for label, (cfg, llm) in zip(labels, used, strict=True):
            by_key[_key(cfg)] = label
            desc = llm.describe()
            usage = llm.usage
            cost = _cost(llm)
            admission = getattr(llm, "admission", None)
            models[label] = {
                "llm": desc,
                "sha256": hashlib.sha256(
                    json.dumps(desc, sort_keys=True, default=str).encode()
                ).hexdigest(),
                "usage": usage.as_dict(),
                "cost": round(cost, 6) if cost is not None else None,
                "admission": admission.stats() if admission is not None else None,
            }
        out_stages = {}
        for stage, cfg in sorted(stages.items()):
            label = by_key.get(_key(cfg), model_label(cfg))
            out_stages[stage] = {
                "model": label,
                "sha256": models[label]["sha256"] if label in models else None,
            }
        return models, out_stages

    def status(self) -> str:
        """The progress line's view of the models: calls in flight (of the limit), completion
        tokens a second since the run started, and the cost so far where a price is set."""
        with self._lock:
            used = [llm for _, llm in self._models.values()]
        seen: set[int] = set()
        flight = limit = 0
        tokens = 0
        cost: float | None = None
        for llm in used:
            tokens += llm.usage.completion_tokens
            spent = _cost(llm)
            if spent is not None:
                cost = (cost or 0.0) + spent
            admission = getattr(llm, "admission", None)
            if admission is not None and id(admission) not in seen:
                seen.add(id(admission))
                stats = admission.stats()
                flight += stats["in_flight"]
                limit += stats["limit"]
        if not used:
            return ""
        elapsed = time.perf_counter() - self._t0
        parts = [
            f"in flight {flight}/{limit}",
            f"{tokens / elapsed:.1f} tok/s" if elapsed > 0 else "",
        ]
        if cost is not None:
            parts.append(f"cost {cost:.4f}")
        return " ".join(p for p in parts if p)

    @property
    def embedder(self) -> Any:
        with self._lock:
            if self._embedder is None:
                self._embedder = self._backends.embedder(self.cfg.embedder, self.cfg.cache_dir)
            return self._embedder

    @property
    def embedder_loaded(self) -> bool:
        return self._embedder is not None

    def say(self, *items: Any, always: bool = False) -> None:
        """Show lines of text or rich renderables (a funnel, a verdict) on the terminal, through the
        run's progress display (:meth:`gen.engine.progress.Progress.say`): nothing when progress is
        off,
        unless ``always``. Generators never print."""
        if self.progress is None:  # a generator called outside :func:`run` (a test)
            self.progress = Progress(self.name, 0, self.cfg.progress, self.cfg.progress_every)
        self.progress.say(*items, always=always)

    def fail(self, message: str, code: int = 1) -> None:
        """End the run with exit code ``code`` and this one-line message, after its files are
        written (a pool smaller than asked for); the manifest records both."""
        self.exit_code = code
        self.error = message

    def use(self, *, llm: LanguageModel | None = None, embedder: Any = None) -> RunContext:
        """Give this run backends made elsewhere (a test's scripted LLM, a fake embedder)."""
        if llm is not None:
            self._llm = llm
            self._models[_key(self.cfg.llm)] = (self.cfg.llm, llm)
            self._backends.put(self.cfg.llm, str(self.cache.path) if self.cache else None, llm)
        if embedder is not None:
            self._embedder = embedder
            self._backends.put(self.cfg.embedder, self.cfg.cache_dir, embedder)
        return self

    def close(self) -> None:
        """Release the backends (stops a managed llama-server) when this run made them."""
        if self._owns_backends:
            self._backends.close()

    def config_for(self, name: str, **options: Any) -> CommonConfig:
        """The validated config of generator ``name`` run inside this run: ``options``, and for
        every option of :data:`SHARED_OPTIONS` not given, this run's value (the same models,
        cache, seed and progress display). A bad value is a ConfigError naming the option."""
        from gen.engine.config import validate_options

        spec = REGISTRY[name]
        inherited = {
            k: getattr(self.cfg, k)
            for k in SHARED_OPTIONS
            if k not in options and k in spec.config.model_fields and hasattr(self.cfg, k)
        }
        return validate_options(name, spec.config, {**inherited, **options}, check_input=False)

    def subrun(
        self, name: str, out_dir: Path, *, reuse: bool = False, quiet: bool = True, **options: Any
    ) -> RunFolder:
        """Run generator ``name`` inside this run, with :meth:`config_for`'s config: its own folder
        and manifest (linked from this run's manifest under ``subruns``), this run's loaded
        backends. ``reuse``: a folder that already holds a run of this config that ended well is
        opened, not run again (a persona pool, a pipeline's finished step)."""
        cfg = self.config_for(name, **options)
        if reuse and (done := RunFolder.find(out_dir)) is not None and done.finished_with(cfg):
            self._link(name, out_dir, done, reused=True)
            done.reused = True
            return done
        child = RunContext(name, cfg, out_dir, backends=self._backends, parent=self)
        run_config(name, cfg, out_dir, ctx=child, quiet=quiet)
        folder = RunFolder.open(out_dir)
        self._link(name, out_dir, folder, reused=False)
        return folder

    def _link(self, name: str, out_dir: Path, folder: RunFolder, *, reused: bool) -> None:
        try:
            where = out_dir.resolve().relative_to(self.out_dir.resolve()).as_posix()
        except ValueError:
            where = str(out_dir)
        counts = folder.raw.get("counts") or {}
        self.subruns.append(
            {
                "generator": name,
                "path": where,
                "manifest_sha256": sha256_file(out_dir / "manifest.json"),
                "counts": {k: counts.get(k) for k in ("requested", "accepted", "rejected")},
                "exit_code": folder.manifest.exit_code,
                **({"reused": True} if reused else {}),
            }
        )

    def indices(self, n: int | None = None) -> range:
        return shard_range(n or self.plan.n, self.cfg.shard, self.cfg.num_shards)

    def seed(self, index: int, *parts: object) -> int:
        return derive_seed(self.cfg.seed, self.name, index, *parts)

    def record_id(self, index: int, *parts: object) -> str:
        return derive_id(self.cfg.seed, self.name, index, *parts)

    def map(
        self, fn: Callable[[Any], R], items: Iterable[Any], workers: int | None = None
    ) -> list[R]:
        """Apply ``fn`` to independent items (a bundle's apps, an item's shuffles), up to
        ``workers`` at once (default: :attr:`width`); results come back in input order, so records
        do not depend on scheduling. The calls pass the backend's one budget of calls in flight
        (:mod:`gen.llm.admission`), whatever map or record they come from. A map inside a record
        of :meth:`imap` keeps that record's worker number (:func:`gen.llm.worker`): a server
        backend sends its calls to one slot, where their shared prompt prefix stays cached."""
        if workers is None:
            workers = self.width
        return fan_out(fn, items, workers, self._backends.helpers)

    def imap(
        self,
        fn: Callable[[Any], R],
        items: Iterable[Any],
        *,
        width: int | None = None,
        window: int | None = None,
    ) -> Iterator[R]:
        """``fn`` over the run's records (``ctx.indices()``), many at once, yielded in input order
        as each one's predecessors are done: enough records under way to keep ``width`` calls in
        flight (default: :attr:`width`), with no batch barrier, and at most ``window`` records
        (default :data:`WINDOW` times the width) under way or waiting to be yielded. A width of 1
        (an in-process model, one server slot) works one record after another, as a plain loop."""
        width = self.width if width is None else width
        workers = 1 if width <= 1 else 2 * width
        return ordered(fn, items, workers=workers, window=window or WINDOW * width)

    def record_input(self, path: Path) -> None:
        """Note an input file's SHA-256 in the manifest."""
        self.inputs[str(path)] = sha256_file(path)

    def write_json(self, name: str, obj: Any) -> Path:
        """Write an extra output atomically (it is hashed into the manifest); a large list is
        better streamed with :class:`JsonListWriter`."""
        path = self.out_dir / name
        atomic_write(path, json.dumps(obj, ensure_ascii=False, indent=1, allow_nan=False) + "\n")
        return path


# --------------------------------------------------------------------------- runner


@dataclass
class RunResult:
    out_dir: Path
    requested: int
    accepted: int
    rejected: int
    manifest: dict[str, Any]
    exit_code: int = 0
    error: str | None = None


def run_config(
    name: str,
    cfg: CommonConfig,
    out_dir: Path,
    *,
    resolved: dict[str, Any] | None = None,
    ctx: RunContext | None = None,
    quiet: bool = False,
    plan: Plan | None = None,
) -> RunResult:
    """Run generator ``name`` with a validated config into ``out_dir`` and write its records,
    rejects and manifest (the engine under :func:`gen.run` and the command line).

    Records stream to ``*.partial`` files that replace the final ones only when the run is
    complete, so a killed run leaves no half-written output; rerunning it replays finished
    LLM calls from the cache and produces the same records.
    """
    if batch.wanted(cfg) and batch.active() is None:
        return _batched(name, cfg, out_dir, resolved=resolved, ctx=ctx, quiet=quiet, plan=plan)
    gen_ = REGISTRY[name]
    ctx = ctx or RunContext(name, cfg, out_dir)
    preflight(name, cfg)  # a missing extra: exit 2 naming it, before any work
    ctx.plan = plan if plan is not None else gen_.make_plan(cfg)  # input errors: before any write
    check_out_dir(out_dir, cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    clock = CLOCK.snapshot()
    indices = ctx.indices()
    requested = len(indices)
    rejects_path = out_dir / "rejects.jsonl"
    by_reason: Counter[str] = Counter()
    by_stage: Counter[str] = Counter()
    accepted = rejected = done = 0
    many = False
    models: set[str] = set()
    progress = Progress(
        name,
        requested,
        cfg.progress if not quiet else "off",
        cfg.progress_every,
        usage=lambda: ctx.llm.usage if ctx.llm_loaded else None,
        noun=gen_.noun,
        status=ctx.status,
    )
    # a quiet run (a sub-run, a test) shows no bar and no summary; what its generator says still
    # follows its progress option
    ctx.progress = (
        progress if not quiet else Progress(name, requested, cfg.progress, cfg.progress_every)
    )
    rec_tmp = out_dir / "records.jsonl.partial"
    rej_tmp = rejects_path.with_name(rejects_path.name + ".partial")
    try:
        with (
            open(rec_tmp, "w", encoding="utf-8") as rec_f,
            open(rej_tmp, "w", encoding="utf-8") as rej_f,
            progress,
        ):
            for outcome in gen_.fn(cfg, ctx):
                done += 1
                many = many or isinstance(outcome, list)
                for item in outcome if isinstance(outcome, list) else [outcome]:
                    if isinstance(item, Reject):
                        rejected += 1
                        by_reason[item.reason] += 1
                        by_stage[item.stage] += 1
                        rej_f.write(item.model_dump_json() + "\n")
                    else:
                        accepted += 1
                        if isinstance(item, BaseModel):
                            models.add(type(item).__name__)
                        rec_f.write(item.model_dump_json() + "\n")
                progress.update(done, accepted, rejected)
    finally:
        ctx.close()
    if done != requested:
        raise RuntimeError(f"generator {name} yielded {done} outcomes for {requested} indices")
    os.replace(rec_tmp, inside(out_dir, f"{ctx.records_name}.jsonl", what="records file"))
    os.replace(rej_tmp, rejects_path)
    wall = time.perf_counter() - t0
    used_models, stages = ctx.models_manifest()
    manifest = {
        "generator": name,
        "toolkit_version": TOOLKIT_VERSION,
        "git": git_info(),
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "config": resolved if resolved is not None else cfg.model_dump(mode="json"),
        "records": {
            "file": f"{ctx.records_name}.jsonl",
            "kind": ctx.records_kind or gen_.kind,
            "models": sorted(models | set(ctx.records_models)),
        },
        "seed": cfg.seed,
        "shard": {
            "shard": cfg.shard,
            "num_shards": cfg.num_shards,
            "indices": [indices.start, indices.stop],
        },
        "llm": ctx.llm.describe() if ctx.llm_loaded else None,
        "embedder": ctx.embedder.describe() if ctx.embedder_loaded else None,
        "prompts": dict(sorted(ctx.prompts.used.items())),
        "inputs": ctx.inputs,
        "packages": package_versions(),
        "counts": {
            "requested": requested,
            **({"indices_done": done} if many else {}),
            "accepted": accepted,
            "rejected": rejected,
            "rejects_by_reason": dict(sorted(by_reason.items())),
            "rejects_by_stage": dict(sorted(by_stage.items())),
        },
        "validators": dict(sorted(ctx.stats.items())),
        "llm_usage": ctx.llm.usage.as_dict() if ctx.llm_loaded else None,
        "models": used_models,
        "stages": stages,
        "parent": str(ctx.parent.out_dir) if ctx.parent is not None else None,
        "subruns": ctx.subruns,
        "exit_code": ctx.exit_code,
        "error": ctx.error,
        "started_at": started.isoformat(timespec="seconds"),
        "wall_seconds": round(wall, 3),
        "time": {**time_split(clock, CLOCK.snapshot(), wall), "cores": cores_used()},
        **ctx.extra,
    }
    manifest["outputs"] = output_hashes(out_dir)
    atomic_write(
        out_dir / "manifest.json",
        json.dumps(manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n",
    )
    progress.summary(accepted, rejected, by_reason, wall)
    progress.say(f"[{name}] {summary_line(manifest['time'])}")
    progress.outputs(
        out_dir,
        {
            rel: count_lines(out_dir / rel) if rel.endswith(".jsonl") else None
            for rel in manifest["outputs"]
            if not rel.startswith(".hydra/")
        },
    )
    return RunResult(out_dir, requested, accepted, rejected, manifest, ctx.exit_code, ctx.error)


def _batched(
    name: str,
    cfg: CommonConfig,
    out_dir: Path,
    *,
    resolved: dict[str, Any] | None,
    ctx: RunContext | None,
    quiet: bool,
    plan: Plan | None,
) -> RunResult:
    """A run in batch mode (:mod:`gen.llm.batch`): collecting passes into a scratch folder, each
    followed by the batches of the calls it deferred, until a pass defers none; then the real
    pass, which the batches' results and the cache answer whole."""
    ctx = ctx or RunContext(name, cfg, out_dir)
    plan = plan if plan is not None else REGISTRY[name].make_plan(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = out_dir / ".batch-pass"
    try:
        with batch.session(out_dir) as session:
            while True:
                shutil.rmtree(scratch, ignore_errors=True)
                probe = RunContext(name, cfg, scratch, backends=ctx._backends, parent=ctx.parent)
                try:
                    run_config(name, cfg, scratch, ctx=probe, quiet=True, plan=plan)
                except Exception:
                    if not session.deferred():  # a failure of its own, not of a missing answer
                        raise
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                if not session.deferred():
                    break
                session.flush(ctx.say)
            result = run_config(
                name, cfg, out_dir, resolved=resolved, ctx=ctx, quiet=quiet, plan=plan
            )
            if session.deferred():
                raise BackendError(
                    f"llm.batch: the run asked {session.deferred()} calls its collecting pass did "
                    "not (is the generator deterministic?); rerun into the same folder"
                )
            return result
    finally:
        ctx.close()
