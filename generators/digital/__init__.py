"""Digital Context Generator (WAGIBench G.1): per-app phone states for a sampled persona and moment.

For each bundle code samples the global state (a main persona, 5 related personas, a datetime,
optionally a digital cue) and a *skeleton* per app: how many items, their ids, times and
participants. The LLM only writes the words (titles, contents, queries, places). Validators then
drop or correct bad items, a bounded number of regenerations tops up thin apps, and cue-derived
items are merged in time order into the full lists and kept in the key lists (D*).

The package: :mod:`.state` (a bundle's global state), :mod:`.checks` (the validators),
:mod:`.assembly` (skeletons, draft schemas with code's counts, assembly, cue items, the merge),
:mod:`.goals` (goal-conditioned bundles), :mod:`.export` (WAGIBench's prompt and loader layout);
this module holds the config, one app and one bundle, and the generator.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext, derive_id
from gen.engine.stages import StageConfig, StagesConfig
from gen.errors import ConfigError, InputError, MissingInputError
from gen.formats.bundles import BundleRules, Checker, State, validate_items
from gen.formats.people import ensure_pool, load_pool, sample_related
from gen.formats.wagibench import bundle_stats, wagibench_record
from gen.generators.digital.assembly import (
    CUE_SCHEMA,
    Skeleton,
    assemble,
    assemble_cue,
    cue_plan,
    draft_schema,
    merge,
    skeleton,
    slot_line,
)
from gen.generators.digital.goals import (
    GOAL_APPS,
    GOAL_CUE,
    GoalIndex,
    goal_cue,
    goal_index,
    goal_problem,
)
from gen.generators.digital.state import load_cues, pick_cue, sample_datetime
from gen.llm.attempts import AttemptFailure, retry
from gen.paths import EXAMPLES
from gen.schemas import Reject
from gen.schemas import digital as S
from gen.schemas.digital import App
from gen.schemas.personas import PersonaRecord
from gen.text.gates import Gates

DEFAULT_HOUR_WEIGHTS = [
    0.6,
    0.3,
    0.2,
    0.1,
    0.1,
    0.3,
    1.2,
    3,
    4,
    4.5,
    4.5,
    4.5,
    5,
    4.5,
    4.5,
    4.5,
    4.5,
    5,
    5.5,
    5.5,
    5,
    4,
    3,
    1.5,
]
"""Hour-of-day weights: phone use is low at night and peaks in the evening."""


class CountsConfig(BaseModel):
    """Items requested per app, each ``[low, high]`` (uniform)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    calendar_events: tuple[int, int] = (4, 7)
    messaging_conversations: tuple[int, int] = (2, 4)
    messages_per_conversation: tuple[int, int] = (3, 7)
    notes: tuple[int, int] = (2, 4)
    searches: tuple[int, int] = (5, 9)
    videos: tuple[int, int] = (4, 7)
    places: tuple[int, int] = (3, 6)
    tracks: tuple[int, int] = (4, 7)

    @model_validator(mode="after")
    def _ordered(self) -> CountsConfig:
        for name, (lo, hi) in self:
            if not 1 <= lo <= hi <= 30:
                raise ValueError(f"counts.{name} must be [low, high] with 1 <= low <= high <= 30")
        return self


class MinItemsConfig(BaseModel):
    """Items an app must keep after validation; fewer means regenerate (then reject)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    Calendar: int = Field(2, ge=0)
    Messaging: int = Field(1, ge=0)
    Notes: int = Field(1, ge=0)
    Search: int = Field(3, ge=0)
    Videos: int = Field(2, ge=0)
    Maps: int = Field(2, ge=0)
    Music: int = Field(2, ge=0)


class DigitalStages(StagesConfig):
    apps: StageConfig = Field(default_factory=StageConfig)
    """The apps' items (``stages.apps.llm=…``)."""
    cue: StageConfig = Field(default_factory=StageConfig)
    """The cue's items in its app."""


class DigitalConfig(CommonConfig, BundleRules):
    n: int | None = Field(None, ge=1, le=10_000_000)  # type: ignore[assignment]
    """Bundles to make: 5 (about 7 minutes on 2 cores), or with goals= one per goal (the first
    n)."""
    goals: str | None = None
    """A goal bank (JSONL or parquet, as distractors reads): one bundle per goal, whose cued app
    makes the goal inferable; the bundle carries the goal row's client_tag and group (WAGIBench's
    join key) and replaces the cue bank."""
    goal_apps: dict[str, list[App]] = Field(
        default_factory=lambda: {k: list(v) for k, v in GOAL_APPS.items()}
    )
    """goals=: per action type, the apps whose state may make the goal inferable ([]: uncued)."""
    cue_action_max: float = Field(0.5, ge=0, le=1)
    """goals=: the key-only state may hold at most this share of the goal's request words (its
    query, reminder, message, content or place, stopwords and the phrase the cue word names aside:
    a one-word goal has none), else the bundle is rejected as cue_states_goal: a cue prompts its
    goal, it does not state it."""
    cue_rank_max: int = Field(3, ge=1)
    """goals=: the key-only state must rank its own goal among the top this many goals of the bank
    (MiniLM similarity; the goal's own group's paraphrases left out), else the bundle is rejected
    as cue_not_specific."""
    persona_pool: int = Field(50, ge=6, le=100_000)
    """Persona pool size, made (or reused, by seed) with the personas generator."""
    persona_file: str | None = None
    """An existing pool (personas.jsonl or a personas run folder) instead of persona_pool."""
    pool_dir: str | None = None
    """Where generated pools are kept for reuse by later runs and shards (null: inside the run
    folder, pools/)."""
    apps: list[App] = list(App)
    """Apps to generate."""
    stages: DigitalStages = Field(default_factory=DigitalStages)
    """A model per stage: ``stages.<apps|cue>.llm=<preset or fields>``."""
    cue_file: str | None = None
    """Cue bank JSONL (cue_id, app, cue); null means the shipped examples/cues.jsonl."""
    cue_rate: float = Field(0.3, ge=0, le=1)
    """Share of bundles that get a cue from the cue bank."""
    cue: str | None = None
    """One inline cue for every bundle (with cue_app)."""
    cue_app: App | None = None
    """The app the inline cue belongs to."""
    date_start: dt.date = dt.date(2025, 1, 1)
    """First date the current datetime is sampled from."""
    date_end: dt.date = dt.date(2025, 12, 31)
    """Last date the current datetime is sampled from."""
    hour_weights: list[float] = Field(
        default_factory=lambda: list(DEFAULT_HOUR_WEIGHTS), min_length=24, max_length=24
    )
    """Relative weight of each hour of the day (24 values)."""
    counts: CountsConfig = Field(default_factory=CountsConfig)
    """Items requested per app."""
    min_items: MinItemsConfig = Field(default_factory=MinItemsConfig)
    """Items an app must keep after validation."""
    items_per_call: int = Field(1, ge=1, le=30)
    """Items (conversations for Messaging) one LLM call writes. 1 suits small models; a
    large model can write a whole app per call."""
    attempts: int = Field(3, ge=1, le=10)
    """LLM generations per call before its items are given up (then the app is topped up
    or the bundle rejected); formerly ``app_attempts``."""
    renamed: ClassVar[dict[str, str]] = {"app_attempts": "attempts"}

    @model_validator(mode="after")
    def _check(self) -> DigitalConfig:
        if self.date_end < self.date_start:
            raise ValueError("date_end must not be before date_start")
        if (self.cue is None) != (self.cue_app is None):
            raise ValueError('cue and cue_app go together (cue="..." cue_app=Messaging)')
        if self.cue_app is not None and self.cue_app not in self.apps:
            raise ValueError(
                f"cue_app {self.cue_app.value} is not among apps={[a.value for a in self.apps]}"
            )
        if len(set(self.apps)) != len(self.apps):
            raise ValueError("apps must not repeat")
        if sum(self.hour_weights) <= 0 or min(self.hour_weights) < 0:
            raise ValueError("hour_weights must be >= 0 with a positive sum")
        lo, hi = self.cue_recent_minutes
        if not 0 <= lo <= hi < 15:
            raise ValueError("cue_recent_minutes must be [low, high] with 0 <= low <= high < 15")
        unknown = sorted(set(self.goal_apps) - set(GOAL_APPS))
        if unknown:
            raise ValueError(
                f"goal_apps: unknown action type(s) {unknown}; the types are {sorted(GOAL_APPS)}"
            )
        if self.goals is not None and self.cue is not None:
            raise ValueError("goals= sets each bundle's cue from its goal; drop cue=")
        if self.pool_dir is not None and not self.pool_dir.strip():
            raise ValueError(
                "pool_dir is empty (the pool would be made in the current folder): give a folder, "
                "or null for the run folder's pools/"
            )
        return self


# --------------------------------------------------------------------------- one app, one bundle


def _add(counts: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        counts[k] = counts.get(k, 0) + v


def build_app(
    ctx: RunContext, cfg: DigitalConfig, st: State, app: App, index: int
) -> tuple[dict[str, Any] | Reject, dict[str, int]]:
    """Generate one app chunk by chunk (each chunk retried with fresh seeds), validate,
    merge the cue items; too few valid items rejects the bundle."""
    bundle_id = ctx.record_id(index)
    cued = st.cue is not None and st.cue.app is app
    sk = skeleton(app, random.Random(ctx.seed(index, app.value, "skeleton")), st, cfg, cued)
    name = app.value.lower()
    minimum = getattr(cfg.min_items, app.value)
    counts: dict[str, int] = {}
    last: Reject | None = None

    def ids(*parts: object) -> str:
        return derive_id(cfg.seed, "digital", index, app.value, *parts)

    def attempt(
        what: str,
        messages_for: Callable[[], list[dict[str, str]]],
        schema: type[BaseModel],
        build: Callable[[Any, Checker], list[Any]],
        max_tokens: int,
    ) -> list[Any]:
        llm = ctx.stage_llm("cue" if what == "cue" else "apps")  # stages.<apps|cue>.llm
        checker: list[Checker] = []

        def call(a: int) -> Any:
            messages = messages_for()
            # a cue item should carry the cue's own words
            keep_out = [st.cue.cue] if what == "cue" and st.cue else []
            gates = Gates(messages, schema, language=cfg.language, keep_out=keep_out)
            checker[:] = [Checker(app, st, cfg, gates=gates)]
            return llm.structured(
                messages, schema, seed=ctx.seed(index, app.value, what, a), max_tokens=max_tokens
            )

        def check(draft: Any) -> list[Any]:
            items = build(draft, checker[0])
            _add(counts, checker[0].counts)
            if items:
                return items
            detail = f"every item of call {what} failed validation"
            key = f"{app.value}.no_valid_item.regenerated"
            raise AttemptFailure(f"app.{app.value}", "no_valid_item", detail, counts=[key])

        def failed(f: AttemptFailure) -> None:
            nonlocal last
            last = Reject.from_failure(f, record_id=bundle_id, index=index)

        try:
            return retry(
                call,
                check,
                budget=cfg.attempts,
                stage=f"app.{app.value}",
                count=lambda k: _add(counts, {k: 1}),
                llm_key=lambda reason: f"{app.value}.llm_{reason}.regenerated",
                failed=failed,
            )
        except AttemptFailure:
            return []

    items: list[Any] = []
    step = cfg.items_per_call
    for start in range(0, sk.k, step):
        slots = sk.slots[start : start + step]
        chunk = Skeleton(len(slots), slots)
        if app is App.Messaging:
            msg_range = (
                (len(slots[0]["senders"]),) * 2
                if len(slots) == 1
                else tuple(cfg.counts.messages_per_conversation)
            )
            max_tokens = 40 + sum(70 * len(x["senders"]) + 30 for x in slots)
        else:
            msg_range = (1, 1)
            max_tokens = 40 + TOKENS_PER_ITEM[app] * len(slots)

        # named functions, not lambdas: mypy cannot type a lambda whose defaults bind the loop's
        # values
        def messages_for(slots: list[dict[str, Any]] = slots) -> list[dict[str, str]]:
            return ctx.prompts.render(
                f"digital/{name}.jinja", s=st, lines=[slot_line(app, x, st) for x in slots]
            )

        def build(d: Any, chk: Checker, chunk: Skeleton = chunk, start: int = start) -> list[Any]:
            return validate_items(app, assemble(app, d, chunk, st, ids, start), chk)

        items += attempt(
            f"chunk{start}",
            messages_for,
            draft_schema(app, len(slots), msg_range),
            build,
            max_tokens,
        )
    final = Checker(app, st, cfg)
    items = validate_items(app, items, final)  # duplicates across chunks
    _add(counts, final.counts)
    cue_items: list[Any] = []
    if cued:
        plan = cue_plan(st, random.Random(ctx.seed(index, app.value, "cue")), cfg)
        cue_items = attempt(
            "cue",
            lambda: ctx.prompts.render(f"digital/{name}_cue.jinja", s=st, cue=st.cue, plan=plan),
            CUE_SCHEMA[app],
            lambda d, chk: validate_items(app, assemble_cue(app, d, plan, st, ids, chk), chk),
            60 + 4 * TOKENS_PER_ITEM[app],
        )
        if not cue_items:
            assert last is not None
            return last.model_copy(update={"stage": f"app.{app.value}.cue"}), counts
    if len(items) < minimum:
        return Reject(
            record_id=bundle_id,
            index=index,
            stage=f"app.{app.value}",
            reason="too_few_items",
            detail=f"{len(items)} valid items after validation and {cfg.attempts} attempts per "
            "call, "
            f"minimum {minimum}" + (f"; last failure: {last.reason}" if last else ""),
            raw=last.raw if last else None,
        ), counts
    return merge(app, items, cue_items, st), counts


TOKENS_PER_ITEM = {
    App.Calendar: 70,
    App.Messaging: 120,
    App.Notes: 190,
    App.Search: 50,
    App.Videos: 110,
    App.Maps: 70,
    App.Music: 70,
}
"""Completion budget per item (the schema's string caps bound it; this only stops runaways)."""


def make_bundle(
    ctx: RunContext,
    cfg: DigitalConfig,
    pool: list[PersonaRecord],
    cues: list[dict[str, str]],
    index: int,
    goals: GoalIndex | None = None,
) -> S.DigitalBundle | Reject:
    rng = random.Random(ctx.seed(index, "state"))
    main, related = sample_related(pool, rng)
    now = sample_datetime(rng, cfg)
    goal: S.GoalRef | None = None
    if goals is not None:
        cue, goal = goal_cue(
            ctx,
            cfg,
            goals.bank.rows[index],
            related,
            random.Random(ctx.seed(index, "goal")),
            goals.df,
            len(goals.texts),
        )
        st = State(main, related, now, cue)
    else:
        st = State(main, related, now, pick_cue(rng, cfg, cues, related))
    results = ctx.map(lambda app: build_app(ctx, cfg, st, app, index), cfg.apps)
    apps: dict[str, dict[str, Any]] = {}
    for _, counts in results:  # validators' work counts for rejected bundles too
        for k, v in counts.items():
            ctx.count(k, v)
    for app, (res, _) in zip(cfg.apps, results, strict=True):
        if isinstance(res, Reject):
            return res
        apps[app.value] = res
    bundle = S.DigitalBundle(
        bundle_id=ctx.record_id(index),
        main_persona=main,
        related_personas=related,
        current_datetime=st.now_text,
        cue=st.cue,
        goal=goal,
        apps={a.value: apps[a.value] for a in S.RENDER_ORDER if a.value in apps},
        stats={},
    )
    bundle.stats = bundle_stats(bundle)
    if goals is not None and goal is not None and goal.app is not None:
        problem = goal_problem(ctx, cfg, bundle, goals, index)
        if problem is not None:
            reason, detail = problem
            ctx.count(f"goal.{reason}")
            return Reject(
                record_id=bundle.bundle_id,
                index=index,
                stage="goal",
                reason=reason,
                detail=detail,
                raw=bundle.model_dump_json(),
            )
        ctx.count("goal.cued")
    elif goal is not None:
        ctx.count("goal.uncued")
    return bundle


# --------------------------------------------------------------------------- the generator


def merge_shards(
    ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]
) -> None:
    """``merge``: sizes over every shard's bundles; the pool is the shards' one."""
    ctx.extra["persona_pool"] = manifests[0]["persona_pool"]
    ctx.extra["characters"] = characters_summary(records)


@dataclass(frozen=True)
class Inputs:
    """What a digital run reads before it starts: the cue bank, and a given persona pool."""

    cues: list[dict[str, str]]
    cue_path: Path | None
    pool: list[PersonaRecord] | None
    """``persona_file``'s pool; None: the run makes (or reuses) one of ``persona_pool``."""
    pool_path: Path | None
    goals: Any = None
    """``goals=``'s goal bank (a :class:`generators.distractors.GoalBank`), or None."""


def plan(cfg: DigitalConfig) -> Plan:
    """``n`` bundles; the cue bank and ``persona_file`` are read here, before any run folder
    exists or a model loads."""
    cues: list[dict[str, str]] = []
    cue_path = pool_path = None
    goals = None
    if cfg.goals is not None:
        from gen.formats.goals import load_goals

        path = Path(cfg.goals).expanduser()
        if not path.is_file():
            raise MissingInputError(f"goals: no such file: {path}")
        goals = load_goals(path)
        if not goals.rows:
            raise InputError(f"goals: {path} holds no goals")
    elif cfg.cue is None and cfg.cue_rate > 0:
        cue_path = Path(cfg.cue_file).expanduser() if cfg.cue_file else EXAMPLES / "cues.jsonl"
        if not cue_path.is_file():
            raise MissingInputError(f"cue_file: no such file: {cue_path}")
        cues = load_cues(cue_path)
    pool = None
    if cfg.persona_file:
        pool_path = Path(cfg.persona_file).expanduser()
        if not pool_path.exists():
            raise MissingInputError(f"persona_file: no such file or folder: {pool_path}")
        pool = load_pool(pool_path)
        check_pool(pool, pool_path)
    n = (cfg.n or 5) if goals is None else min(cfg.n or len(goals.rows), len(goals.rows))
    return Plan(n, Inputs(cues, cue_path, pool, pool_path, goals))


def check_pool(pool: list[PersonaRecord], path: Path) -> None:
    if len(pool) < 6:
        raise ConfigError(
            f"the persona pool at {path} has {len(pool)} usable personas; at least 6 are needed"
        )


@generator(
    "digital",
    config=DigitalConfig,
    records=S.DigitalBundle,
    kind="digital",
    merge=merge_shards,
    plan=plan,
    uses=lambda cfg: ("llm", "text", *(("embedder",) if cfg.goals else ())),
)
def digital(cfg: DigitalConfig, ctx: RunContext) -> Iterator[S.DigitalBundle | Reject]:
    """Digital Context Generator: 7 phone-app states per sampled persona, moment and cue."""
    inputs: Inputs = ctx.plan.data
    cues = inputs.cues
    if inputs.cue_path is not None:
        ctx.record_input(inputs.cue_path)
    if inputs.pool is not None and inputs.pool_path is not None:
        pool, pool_path = inputs.pool, inputs.pool_path
    else:
        pool_dir = cfg.pool_dir if cfg.pool_dir is not None else str(ctx.out_dir / "pools")
        pool, pool_path = ensure_pool(ctx, cfg.seed, cfg.persona_pool, pool_dir)
        check_pool(pool, pool_path)
    ctx.extra["persona_pool"] = {"path": str(pool_path), "size": len(pool)}
    goals = None
    if inputs.goals is not None:
        ctx.record_input(inputs.goals.path)
        ctx.prompts.hash(GOAL_CUE)
        goals = goal_index(ctx, inputs.goals)
    for app in cfg.apps:
        ctx.prompts.hash(f"digital/{app.value.lower()}.jinja")
        if cues or cfg.cue or goals is not None:
            ctx.prompts.hash(f"digital/{app.value.lower()}_cue.jinja")
    records: list[dict[str, Any]] = []
    # bundles many at once (their apps too), one budget of calls in flight; written in order
    for item in ctx.imap(lambda i: make_bundle(ctx, cfg, pool, cues, i, goals), ctx.indices()):
        if isinstance(item, S.DigitalBundle):
            records.append(item.model_dump(mode="json"))
        yield item
    ctx.write_json("digital_state.json", {r["bundle_id"]: wagibench_record(r) for r in records})
    ctx.extra["characters"] = characters_summary(records)


PAPER_CHARS_PER_BUNDLE = 8900


def characters_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean characters per bundle and per app, against WAGIBench's ~8.9k per sample."""
    if not records:
        return {"bundles": 0}
    per_app: dict[str, list[int]] = {}
    for r in records:
        for app, n in r["stats"]["chars_per_app"].items():
            per_app.setdefault(app, []).append(n)
    mean_total = sum(r["stats"]["chars_total"] for r in records) / len(records)
    return {
        "bundles": len(records),
        "mean_chars_per_bundle": round(mean_total, 1),
        "paper_chars_per_bundle": PAPER_CHARS_PER_BUNDLE,
        "ratio_to_paper": round(mean_total / PAPER_CHARS_PER_BUNDLE, 3),
        "mean_chars_per_app": {a: round(sum(v) / len(v), 1) for a, v in per_app.items()},
    }
