"""The longitudinal history bank (WAGIBench §2.4, appendix G.3): ``python -m gen history``.

For each test observation, up to ``supports`` past recordings of the same participant in the same
environment, recorded strictly earlier, never the observation itself. When the observation is
longitudinal (its script is one a user repeats), ``positives`` of them (one, in the paper) are
recordings of the same script — the positive support, ``history_type: setup`` — and the rest come
from other scripts; a non-longitudinal observation gets supports of other scripts only. The
choice and the order (WAGIBench shuffles the bank) are seeded per observation, so a record depends
only on (seed, observation) and shards agree. Shortfalls are never silent: an observation with
fewer eligible recordings, or a longitudinal one with no earlier recording of its script, keeps
what exists and is counted per reason (a reject with ``require_full=true``).

Outputs: ``history.jsonl`` (one record per test observation: each support, its type and why it
was chosen), and ``longitudinal_history.json`` in the layout WAGIBench's evaluation loader reads
as ``longitudinal_history_path`` (joined to the MCQs by ``meta.client_tag`` +
``meta.scenario.shortname``). Each support's ``world_state`` there is the dict their prompt
builder prints: ``context`` (its caption), ``action`` (its structured goal written out as appendix
I.1 shows it) and ``transcription``. Without videos, ``synthesize=true`` builds the observation
table from gen's own material (personas as participants, a few environments, the scripts and goals
of a goal bank) and writes it as ``observations.jsonl``, with the recordings as a goal bank
(``goals.jsonl``: one row per recording, joined to everything else by its client_tag and scenario);
a synthesized world state says where and when, never which script or goal. A recording's world
state is always its caption (what it shows of the surroundings), for the test observation
(``world_state_ctx``) as for a support: its digital state (a ``digital goals=`` bundle) reaches
WAGIBench's prompt once, as the digital context (the bank's export, ``digital_state.json``), never
as the user's surroundings (§2.3-2.4, appendix G.3, I.1).
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import Field, model_validator

from gen.engine.manifest import JsonListWriter, atomic_write
from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext, derive_seed
from gen.errors import InputError, MissingInputError
from gen.paths import EXAMPLES, inside
from gen.readers import iter_jsonl, validated
from gen.schemas import Reject
from gen.schemas.distractors import ContextWindow, CueEntry, Goal
from gen.schemas.history import HistoryRecord, HistoryType, Observation, Support

NAME = "history"
WHOLE_RUN_OUTPUTS = ("observations.jsonl", "goals.jsonl")
"""What a synthesizing run writes whole in every shard (the table), not its slice."""
ENVIRONMENTS = ["kitchen", "living room", "home office", "garage", "bedroom", "gym"]


class HistoryConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Test observations: the first n of the table's test set (null: all of them)."""
    supports: int = Field(5, ge=1, le=100)
    """Past recordings per history bank (WAGIBench: 5)."""
    positives: int = Field(1, ge=0, le=100)
    """Supports of a longitudinal observation that share its script (WAGIBench: 1, the "setup")."""
    test: Literal["all", "longitudinal"] = "all"
    """Which observations get a history bank: every one (WAGIBench), or only longitudinal ones."""
    require_full: bool = False
    """Reject an observation whose bank falls short (fewer supports, no positive) instead of
    keeping what exists."""
    synthesize: bool = False
    """Build the observation table from gen's own material instead of reading input=."""
    goals: str | None = None
    """synthesize: the goal bank whose groups are the scripts (null: examples/goals.jsonl)."""
    persona_file: str | None = None
    """synthesize: a persona pool for the participants (null: facts sampled by code, no LLM)."""
    participants: int = Field(12, ge=1, le=100_000)
    """synthesize: participants."""
    environments: list[str] = Field(default_factory=lambda: list(ENVIRONMENTS[:3]), min_length=1)
    """synthesize: environments; each participant records each script in one of them."""
    scripts_per_participant: int = Field(8, ge=1, le=1000)
    """synthesize: scripts each participant records (WAGIBench: ~8)."""
    repeats: int = Field(3, ge=1, le=100)
    """synthesize: recordings of each script per participant, on different days."""
    longitudinal_share: float = Field(0.15, ge=0, le=1)
    """synthesize: share of scripts that are longitudinal (WAGIBench: 25 of 165)."""
    start_date: dt.date = dt.date(2025, 3, 1)
    """synthesize: first recording day."""
    days: int = Field(60, ge=1, le=36500)
    """synthesize: recordings fall on days within this many days of start_date."""

    @model_validator(mode="before")
    @classmethod
    def _no_digital(cls, data: Any) -> Any:
        if isinstance(data, dict) and "digital" in data:
            raise ValueError(
                "digital: history no longer takes a digital run (a recording's world state is its "
                "caption; its digital state reaches WAGIBench as the bank's digital_state.json)"
            )
        return data

    @model_validator(mode="after")
    def _check(self) -> HistoryConfig:
        if self.positives > self.supports:
            raise ValueError(f"positives={self.positives} cannot exceed supports={self.supports}")
        if self.synthesize and self.input is not None:
            raise ValueError("give input= (an observation table) or synthesize=true, not both")
        return self


# --------------------------------------------------------------------------- the table


@dataclass
class Table:
    """The observations (input order) and their source for rejects and the manifest."""

    rows: list[Observation]
    source: str
    tests: list[int]
    """Indices into rows of the test observations, in table order."""


def read_table(path: Path) -> list[Observation]:
    """An observation table (JSONL); a bad row stops the read naming ``file:line: field:
    reason``."""
    rows: list[Observation] = []
    seen: dict[tuple[str, str], int] = {}
    for lineno, raw in iter_jsonl(path):
        obs = validated(Observation, raw, f"{path}:{lineno}")
        if obs.key in seen:
            raise InputError(
                f"{path}:{lineno}: client_tag: {obs.client_tag!r} with scenario "
                f"{obs.scenario!r} repeats line {seen[obs.key]}"
            )
        seen[obs.key] = lineno
        rows.append(obs)
    if not rows:
        raise InputError(f"{path}: the observation table is empty")
    return rows


def plan(cfg: HistoryConfig) -> Plan:
    """One index per test observation (the table is read, or synthesized, once)."""
    if cfg.synthesize:
        rows = synthesize(cfg)
        source = "synthesized"
    else:
        path = cfg.input_path()
        assert path is not None
        if path.is_dir():
            path = path / "observations.jsonl"
            if not path.is_file():
                raise MissingInputError(f"input: {path.parent} holds no observations.jsonl")
        rows = read_table(path)
        source = str(path)
    tests = [i for i, r in enumerate(rows) if cfg.test == "all" or r.longitudinal]
    if not tests:
        raise InputError(
            f"input: {source} has no {'longitudinal ' if cfg.test != 'all' else ''}observation"
        )
    n = len(tests) if cfg.n is None else min(cfg.n, len(tests))
    return Plan(n, Table(rows, source, tests[:n]))


# --------------------------------------------------------------------------- sampling


Shortfall = Literal["fewer_supports", "no_positive"]
"""Why a bank has fewer supports than asked (the values of ``HistoryRecord.shortfalls``)."""


def bank_of(
    obs: Observation, past: list[Observation], cfg: HistoryConfig, seed: int
) -> tuple[list[tuple[Observation, HistoryType]], dict[str, int], list[Shortfall]]:
    """The supports of ``obs`` among ``past`` (the participant's earlier recordings in the same
    environment), in shown order, with the eligible counts and the shortfalls."""
    rng = random.Random(seed)
    same = [p for p in past if p.script == obs.script]
    other = [p for p in past if p.script != obs.script]
    chosen: list[tuple[Observation, HistoryType]] = []
    shortfalls: list[Shortfall] = []
    want_pos = cfg.positives if obs.longitudinal else 0
    if want_pos:
        pos = rng.sample(same, min(want_pos, len(same)))
        chosen += [(p, "setup") for p in pos]
        if len(pos) < want_pos:
            shortfalls.append("no_positive")
    negs = rng.sample(other, min(cfg.supports - len(chosen), len(other)))
    chosen += [(p, "negative") for p in negs]
    if len(chosen) < cfg.supports:
        shortfalls.append("fewer_supports")
    rng.shuffle(chosen)
    return chosen, {"same_script": len(same), "other_script": len(other)}, shortfalls


def when(obs: Observation) -> str:
    return obs.recorded_at.isoformat(sep=" ")


def reasons(obs: Observation) -> dict[str, str]:
    """Why a support was chosen, per history type (the rules that admitted it)."""
    base = (
        f"participant {obs.participant}, {obs.environment}, "
        f"recorded before {obs.recorded_at:%Y-%m-%d %H:%M}"
    )
    return {
        "setup": f"{base}; same script {obs.script!r} (positive)",
        "negative": f"{base}; another script",
    }


def action_text(goal: Goal) -> str:
    """A structured goal written out as WAGIBench's history shows a past action (appendix I.1:
    ``{ 'type': 'shop', 'content': 'hand soap' }``): its fields in schema order, empty ones left
    out."""
    fields = [(k, v) for k, v in goal.model_dump().items() if v not in (None, "")]
    return "{ " + ", ".join(f"'{k}': '{v}'" for k, v in fields) + " }"


def current_context(obs: Observation) -> list[str]:
    """The test observation's own context as WAGIBench's ``x.world_state_ctx`` (a list of captions,
    appendix I.1: "a description of the user's current context"): a caption, or a context dict's
    ``context``. Never its past action or its digital state: those are the answer and the digital
    context."""
    ws = obs.world_state
    if isinstance(ws, str):
        return [ws]
    ctx = ws.get("context")
    if isinstance(ctx, str):
        return [ctx]
    if isinstance(ctx, list):
        return [c if isinstance(c, str) else json.dumps(c, ensure_ascii=False) for c in ctx]
    rest = {k: v for k, v in ws.items() if k not in ("action", "transcription")}
    return [json.dumps(rest, ensure_ascii=False)]


def history_state(obs: Observation) -> dict[str, Any]:
    """The dict WAGIBench's prompt builder prints for a support
    (``json.dumps(hist["world_state"])``; G.3: "history context and structured goal annotation are
    packaged into a JSON dictionary"): its context, its past action and its transcription, as
    appendix I.1's example. A given context dict keeps its own keys; the action and transcription
    are added when it lacks them."""
    base: dict[str, Any] = (
        dict(obs.world_state)
        if isinstance(obs.world_state, dict)
        else {"context": [obs.world_state]}
    )
    if obs.structured_goal is not None:
        base.setdefault("action", [action_text(obs.structured_goal)])
    base.setdefault("transcription", obs.transcription or "")
    return base


def shown(obs: Observation) -> dict[str, Any]:
    """What WAGIBench's history entry holds of a recording (besides its id and type). The
    transcription lives inside ``world_state`` as text: a top-level ``transcription`` is, to their
    prompt builder, a list of timed utterances to filter by the context window."""
    return {
        "world_state": history_state(obs),
        "context_window": obs.context_window.model_dump(),
        "structured_goal": obs.structured_goal.model_dump() if obs.structured_goal else None,
    }


def wagibench_entry(
    rec: HistoryRecord, obs: Observation, views: dict[tuple[str, str], dict[str, Any]]
) -> dict[str, Any]:
    """One test observation in the layout WAGIBench's loader reads as longitudinal history; the
    observation's own context is ``x.world_state_ctx`` (its caption, a one-caption list as their
    example)."""
    history = [
        {
            "client_tag": s.client_tag,
            "history_type": s.history_type,
            **views[(s.client_tag, s.scenario)],
        }
        for s in rec.supports
    ]
    return {
        "meta": {"client_tag": rec.client_tag, "scenario": {"shortname": rec.scenario}},
        "x": {"world_state_ctx": current_context(obs)},
        "longitudinal_history": history,
    }


# --------------------------------------------------------------------------- synthesis


def synthesize(cfg: HistoryConfig) -> list[Observation]:
    """An observation table from gen's own material: participants (a persona pool, or facts by
    code), environments, scripts = the goal bank's groups (each recording carries one of its
    group's goals), world states = where and when it was recorded."""
    from gen.formats.goals import load_goals
    from gen.formats.people import load_pool, persona_id

    bank = load_goals(Path(cfg.goals).expanduser() if cfg.goals else EXAMPLES / "goals.jsonl")
    scripts: dict[str, list[Any]] = defaultdict(list)
    for row in bank.rows:
        if row.goal is not None:
            scripts[row.group].append(row)
    if not scripts:
        raise InputError(
            f"goals: {bank.path} has no structured goal (the history needs structured actions)"
        )
    names = sorted(scripts)
    rng = random.Random(derive_seed(cfg.seed, NAME, "scripts"))
    longitudinal = set(rng.sample(names, round(cfg.longitudinal_share * len(names))))
    if cfg.persona_file:
        people = [p.persona_id for p in load_pool(Path(cfg.persona_file).expanduser())][
            : cfg.participants
        ]
    else:
        people = [persona_id(cfg.seed, i) for i in range(cfg.participants)]
    rows = []
    for person in people:
        prng = random.Random(derive_seed(cfg.seed, NAME, "participant", person))
        for script in prng.sample(names, min(cfg.scripts_per_participant, len(names))):
            env = prng.choice(cfg.environments)
            for r in range(cfg.repeats):
                goal = scripts[script][r % len(scripts[script])]
                when = dt.datetime.combine(cfg.start_date, dt.time()) + dt.timedelta(
                    days=prng.randrange(cfg.days), minutes=prng.randrange(7 * 60, 22 * 60)
                )
                tag = f"{person[:8]}-{script}-{r}"
                # names no script or goal
                world = f"In the {env}, {when:%A} {part_of_day(when)} (no video)."
                rows.append(
                    Observation(
                        client_tag=tag,
                        scenario=script,
                        participant=person,
                        environment=env,
                        script=script,
                        longitudinal=script in longitudinal,
                        recorded_at=when,
                        world_state=world,
                        structured_goal=goal.goal,
                        context_window=ContextWindow(start_s=0.0, end_s=30.0),
                        cues=[LONGITUDINAL_CUE] if script in longitudinal else None,
                    )
                )
    rows.sort(key=lambda o: (o.recorded_at, o.client_tag))
    return rows


LONGITUDINAL_CUE = CueEntry(
    modality=["longitudinal"],
    description=[
        "The user has done this before: an earlier "
        "recording of the same routine is in their history."
    ],
)
"""The cue of a synthesized longitudinal recording (its script is one the user repeats, §2.4)."""


def part_of_day(t: dt.datetime) -> str:
    return "morning" if t.hour < 12 else "afternoon" if t.hour < 17 else "evening"


def goal_row(o: Observation) -> dict[str, Any]:
    """A recording as a goal bank row (distractors and ``digital goals=`` read these): its goal,
    its scenario as the group, its client_tag as the id WAGIBench joins on."""
    return {
        "goal_id": o.client_tag,
        "group": o.scenario,
        "goal": o.structured_goal.model_dump() if o.structured_goal else None,
        "client_tag": o.client_tag,
        "context_window": o.context_window.model_dump(),
        **({"cues": [c.model_dump() for c in o.cues]} if o.cues else {}),
    }


# --------------------------------------------------------------------------- the generator


def observation_row(o: Observation) -> dict[str, Any]:
    return o.model_dump(mode="json")


def merge_shards(
    ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]
) -> None:
    """``merge``: the bank summary over every shard's records. A synthesized table
    (``observations.jsonl``, ``goals.jsonl``) is the whole run's in every shard, not a slice: it is
    copied once (every shard's copy must be the same), not concatenated."""
    ctx.extra["history"] = summary(
        [HistoryRecord.model_validate(r) for r in records],
        sum(m["history"]["rejected"] for m in manifests),
    )
    if not manifests[0]["config"].get("synthesize"):
        return
    folders = [Path(p).expanduser() for p in cast(list[str], ctx.cfg.input)]
    for name in WHOLE_RUN_OUTPUTS:
        copies = {(f / name).read_bytes() for f in folders if (f / name).is_file()}
        if len(copies) > 1:
            raise ValueError(f"the shards' {name} differ (a synthesized table is the same in all)")
        if copies:
            atomic_write(inside(ctx.out_dir, name), copies.pop().decode("utf-8"))


class Tally:
    """The bank summary, counted as records go by (a run keeps no records in memory)."""

    def __init__(self) -> None:
        self.banks = self.longitudinal = self.with_positive = 0
        self.shortfalls: Counter[str] = Counter()
        self.sizes: Counter[int] = Counter()

    def add(self, r: HistoryRecord) -> None:
        self.banks += 1
        self.longitudinal += r.longitudinal
        self.with_positive += any(s.history_type == "setup" for s in r.supports)
        self.shortfalls.update(r.shortfalls)
        self.sizes[len(r.supports)] += 1


def summary(records: list[HistoryRecord], rejected: int) -> dict[str, Any]:
    tally = Tally()
    for r in records:
        tally.add(r)
    return tally_summary(tally, rejected)


def tally_summary(t: Tally, rejected: int) -> dict[str, Any]:
    counts, sizes = t.shortfalls, t.sizes
    return {
        "banks": t.banks,
        "rejected": rejected,
        "longitudinal": t.longitudinal,
        "with_positive": t.with_positive,
        "shortfalls": dict(sorted(counts.items())),
        "supports_per_bank": {str(k): v for k, v in sorted(sizes.items())},
    }


@generator(
    NAME, config=HistoryConfig, records=HistoryRecord, kind="history", plan=plan, merge=merge_shards
)
def history(cfg: HistoryConfig, ctx: RunContext) -> Iterator[HistoryRecord | Reject]:
    """Longitudinal history banks: earlier recordings of the same participant and environment."""
    table: Table = ctx.plan.data
    if cfg.synthesize:
        with (
            open(ctx.out_dir / "observations.jsonl", "w", encoding="utf-8") as f,
            open(ctx.out_dir / "goals.jsonl", "w", encoding="utf-8") as g,
        ):
            for o in table.rows:
                f.write(json.dumps(observation_row(o), ensure_ascii=False, allow_nan=False) + "\n")
                g.write(json.dumps(goal_row(o), ensure_ascii=False, allow_nan=False) + "\n")
    else:
        ctx.record_input(Path(table.source))
    groups: dict[tuple[str, str], list[Observation]] = defaultdict(list)
    for o in table.rows:
        groups[(o.participant, o.environment)].append(o)
    times: dict[tuple[str, str], list[dt.datetime]] = {}
    for k, obs_list in groups.items():
        obs_list.sort(
            key=lambda o: (o.recorded_at, o.key)
        )  # ties broken by key: any table order gives the same banks
        times[k] = [o.recorded_at for o in obs_list]
    views: dict[tuple[str, str], dict[str, Any]] = {}
    tally = Tally()
    out = JsonListWriter(ctx.out_dir / "longitudinal_history.json", indent=None)
    rejected = 0
    for i in ctx.indices():
        obs = table.rows[table.tests[i]]
        group = (obs.participant, obs.environment)
        past = groups[group][
            : bisect.bisect_left(times[group], obs.recorded_at)
        ]  # strictly earlier
        chosen, eligible, shortfalls = bank_of(
            obs, past, cfg, derive_seed(cfg.seed, NAME, *obs.key)
        )
        why = reasons(obs)
        for s in shortfalls:
            ctx.count(f"shortfall.{s}")
        # built without re-validation: every field comes from validated observations
        rec = HistoryRecord.model_construct(
            client_tag=obs.client_tag,
            scenario=obs.scenario,
            participant=obs.participant,
            environment=obs.environment,
            script=obs.script,
            longitudinal=obs.longitudinal,
            recorded_at=when(obs),
            supports=[
                Support.model_construct(
                    client_tag=p.client_tag,
                    scenario=p.scenario,
                    participant=p.participant,
                    environment=p.environment,
                    script=p.script,
                    history_type=kind,
                    recorded_at=when(p),
                    why=why[kind],
                )
                for p, kind in chosen
            ],
            eligible=eligible,
            shortfalls=shortfalls,
        )
        if shortfalls and cfg.require_full:
            rejected += 1
            yield Reject(
                record_id=f"{obs.client_tag}_{obs.scenario}",
                index=i,
                stage="bank",
                reason=shortfalls[0],
                detail=f"{len(chosen)} supports of {cfg.supports}; eligible: {eligible}",
                raw=rec.model_dump_json(),
            )
            continue
        tally.add(rec)
        for p, _ in chosen:
            if p.key not in views:
                views[p.key] = shown(p)
        out.write(wagibench_entry(rec, obs, views))
        yield rec
    out.close()
    ctx.extra["history"] = tally_summary(tally, rejected)
