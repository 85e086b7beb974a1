"""The generators gen knows: found through the ``gen.generators`` entry-point group.

A generator is a function decorated with :func:`generator`; a distribution makes it known by
naming it in its entry points::

    [project.entry-points."gen.generators"]
    echo = "my_lab.echo:echo"

gen's own generators are listed the same way in its ``pyproject.toml``, so the runtime (this
package's modules) never imports the generator rooms: a generator is imported when it is first
asked for by name, and ``gen --help`` imports each one to print its line of help.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gen.errors import ConfigError

if TYPE_CHECKING:
    from gen.engine.runner import CommonConfig, MergeHook, PlanHook, RunContext

USES = ("llm", "embedder", "text", "search", "video")
"""What a generator may declare it uses (``@generator(uses=...)``): the model through ``llm``,
the embedder, the text gates' tagger, the search over embeddings, video decoding."""
UsesHook = Callable[[Any], "tuple[str, ...] | list[str] | set[str]"]

GROUP = "gen.generators"
"""The entry-point group generators are registered under (name = the generator's name)."""


@dataclass(frozen=True)
class Generator:
    """A registered generator: its function, config, help line, records and hooks."""

    name: str
    fn: Callable[[Any, RunContext], Iterator[BaseModel]]
    config: type[CommonConfig]
    help: str
    merge: MergeHook | None = None
    plan: PlanHook | None = None
    noun: str = "accepted"
    """What progress lines call the records (``findings`` for an audit)."""
    records: tuple[type[BaseModel], ...] = ()
    """The models of the records it writes (the first is the usual one; an action may write
    another, and the manifest names the one written)."""
    kind: str = "records"
    """What its records are: a declared record kind (:mod:`gen.kinds`: ``tom``, ``mcq``,
    ``digital``, ``scenarios``, a plugin's…), through which bank, audit, review and export read
    them; any other word names records no reader takes."""
    uses: UsesHook | tuple[str, ...] = ()
    """The optional parts a run uses (:data:`USES`), or a function of its config that says: the
    runner checks their extras are installed before any work
    (:func:`gen.engine.preflight.preflight`)."""

    def uses_of(self, cfg: CommonConfig) -> tuple[str, ...]:
        """What a run of ``cfg`` uses, each of :data:`USES`."""
        used = tuple(self.uses(cfg) if callable(self.uses) else self.uses)
        unknown = [u for u in used if u not in USES]
        if unknown:
            raise ValueError(f"generator {self.name}: unknown uses {unknown}; choose from {USES}")
        return used

    def make_plan(self, cfg: CommonConfig) -> Any:
        """The run's size: the plan hook's, else ``n``."""
        from gen.engine.runconfig import Plan

        return self.plan(cfg) if self.plan is not None else Plan(cfg.n)

    def record_model(self, name: str | None = None) -> type[BaseModel] | None:
        """The declared record model called ``name`` (the first without a name)."""
        if name is None:
            return self.records[0] if self.records else None
        return next((m for m in self.records if m.__name__ == name), None)


def generator(
    name: str,
    *,
    config: type[CommonConfig],
    records: type[BaseModel] | tuple[type[BaseModel], ...] = (),
    kind: str = "records",
    merge: MergeHook | None = None,
    plan: PlanHook | None = None,
    noun: str = "accepted",
    uses: UsesHook | tuple[str, ...] = (),
) -> Callable[[Callable], Callable]:
    """Declare a generator called ``name``; its docstring's first line is its help.

    Args:
        config: its options (a :class:`~gen.engine.runner.CommonConfig` subclass).
        records: the pydantic model(s) of its records.
        kind: what its records are: a kind declared in :mod:`gen.kinds` (or a plugin's ``gen.kinds``
            entry points) for records that bank, audit, review and export take.
        merge: combines the summaries of its shards (without it, ``merge`` keeps each shard's).
        plan: sizes a run from its input (without it, a run has ``n`` indices).
        noun: what progress lines call its records.
        uses: the optional parts a run uses (``llm``, ``embedder``, ``text``, ``search``,
            ``video``), or a function of its config that returns them: a run whose extra is
            missing exits 2 naming it before any work (``llm`` with ``llm=llama_cpp`` needs
            ``[local]``, ``embedder`` with ``embedder=local`` ``[embed]``).

    The decorated function carries its :class:`Generator` as ``.generator`` (what an entry point
    loads) and is registered in :data:`REGISTRY` as soon as its module is imported.
    """

    def register(fn: Callable) -> Callable:
        doc = (fn.__doc__ or "").strip().splitlines()
        models = records if isinstance(records, tuple) else (records,)
        spec = Generator(
            name, fn, config, doc[0] if doc else "", merge, plan, noun, models, kind, uses
        )
        fn.generator = spec  # type: ignore[attr-defined]
        ep = _entry_points().get(name)
        # only the module its entry point names registers a name: a plugin decorating
        # "audit" must not replace gen's audit by being imported
        if ep is None or ep.module == fn.__module__:
            REGISTRY[name] = spec
        return fn

    return register


OWN = "egogen"
"""gen's own distribution: its generators' names are not a plugin's to take."""


def _dist(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "an unknown distribution"


def owned(ep: EntryPoint, prefix: str = "gen.generators.") -> bool:
    """The entry point is gen's own (its distribution, or without one a module under
    ``prefix``)."""
    if ep.dist is None:
        return ep.module.startswith(prefix)
    return ep.dist.name.replace("_", "-").lower() == OWN


def _candidates() -> dict[str, list[EntryPoint]]:
    return entry_point_candidates(GROUP)


def entry_point_candidates(group: str) -> dict[str, list[EntryPoint]]:
    """Every entry point of ``group`` by name (one per distinct target)."""
    out: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=group):
        same = out.setdefault(ep.name, [])
        if all(e.value != ep.value for e in same):
            same.append(ep)
    return out


def _entry_points() -> dict[str, EntryPoint]:
    """The entry point each name loads: gen's own where a plugin names one of its generators
    too (the plugin's is skipped, :func:`collisions` says so); the first of several plugins
    (loading that name is then refused, naming them)."""
    chosen = {}
    for name, eps in _candidates().items():
        own = [ep for ep in eps if owned(ep)]
        chosen[name] = own[0] if own else eps[0]
    return chosen


def collisions(only: str | None = None) -> list[str]:
    """One line per name several distributions register (whatever ``sys.path``'s order); with
    ``only``, that name's."""
    lines = []
    for name, eps in sorted(_candidates().items()):
        if len(eps) < 2 or only not in (None, name):
            continue
        own = [ep for ep in eps if owned(ep)]
        others = ", ".join(f"{_dist(ep)} ({ep.value})" for ep in eps if not owned(ep))
        if own:
            lines.append(
                f"entry point {name} of {others} is skipped: {name} is gen's own generator "
                "(a plugin takes a name of its own)"
            )
        else:
            lines.append(f"generator {name} is registered by several distributions: {others}")
    return lines


class Registry(MutableMapping[str, Generator]):
    """Generators by name, loaded from their entry points on first use (a test may put a
    stand-in under a name)."""

    def __init__(self) -> None:
        self._loaded: dict[str, Generator] = {}
        self._lock = threading.RLock()

    def __getitem__(self, name: str) -> Generator:
        with self._lock:
            if name in self._loaded:
                return self._loaded[name]
            eps = _candidates().get(name, [])
            if not eps:
                raise KeyError(name)
            if len(eps) > 1 and not any(owned(ep) for ep in eps):
                raise ConfigError(
                    f"generator {name} is registered by several distributions: "
                    + ", ".join(f"{_dist(ep)} ({ep.value})" for ep in eps)
                    + "; uninstall one of them"
                )
            self._loaded[name] = load(_entry_points()[name])
            return self._loaded[name]

    def __setitem__(self, name: str, spec: Generator) -> None:
        with self._lock:
            self._loaded[name] = spec

    def __delitem__(self, name: str) -> None:
        with self._lock:
            del self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._loaded or name in _entry_points())

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(set(self._loaded) | set(_entry_points())))

    def __len__(self) -> int:
        return len(set(self._loaded) | set(_entry_points()))

    def get_or_fail(self, name: str) -> Generator:
        """The generator ``name``, or a ConfigError listing the ones there are."""
        if name not in self:
            raise ConfigError(f"unknown generator {name!r}; choose one of: {', '.join(self)}")
        return self[name]


def load(ep: EntryPoint) -> Generator:
    """The generator an entry point names: a function decorated with :func:`generator` (or the
    :class:`Generator` itself), registered under the same name."""
    where = f"entry point {ep.name} = {ep.value!r} ({GROUP}"
    where += f", distribution {ep.dist.name})" if ep.dist is not None else ")"
    try:
        obj = ep.load()
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin's import can fail in any way
        text = " ".join(str(e).split())[:200]
        raise ConfigError(f"{where}: cannot be imported: {type(e).__name__}: {text}") from None
    spec = obj if isinstance(obj, Generator) else getattr(obj, "generator", None)
    if not isinstance(spec, Generator):
        raise ConfigError(f"{where}: is not a generator (decorate it with gen.generator)")
    if spec.name != ep.name:
        raise ConfigError(f"{where}: registers the generator {spec.name!r}, not {ep.name!r}")
    return spec


REGISTRY = Registry()
"""Every generator by name (loaded from the ``gen.generators`` entry points on first use)."""
