"""Context-tracking scenarios in the Wearable Assistant Context Bench's released format.

The benchmark tests whether an assistant resolves "this"/"it" to the current camera frame or
stays anchored to an earlier one. Its 70 scenarios were written by hand; this generator writes
scenario banks of any size in its released ``scenarios.jsonl`` schema and refuses the ones that
break its authoring rules.

**Code owns the skeleton** (:func:`.skeleton.build_units`): shift type (``change_type``), target
(``target_context``), ``activity_domain``, ``referent_complexity``, ``difficulty_tier``,
``time_gap_bucket``, ids (``sc-NN`` / ``adv-NN`` from ``id_start``), ``pair_id``, and which
fields exist (``context_image`` exactly for ``cross_session_reference``, the deictic repair
exactly when the authoring rules allow it). **The LLM writes the words**, in three stages, each a
pydantic schema under the grammar and a one-shot prompt of the project's own
(``prompts/scenarios/``): 1 situations (the referent of each frame with its gold vocabulary by
category: name, technique, state; clarify/abstain indicators), 2 camera descriptions, 3 the user
turns and the repair prompts (3b: a contrast pair's second member). **Code checks every rule it
can** (:data:`.rules.RULES`) on every attempt, regenerates a failing stage with a fresh seed up to
``attempts`` times, and otherwise rejects the scenario naming the rule. Two checks need a
model, run through the ``llm=`` boundary on ``models=[…]``: identification (a model names the
thing from each camera description alone; cosine to the gold name under the embedder) and
semantic leakage (the conversation without its camera blocks; a reply that already hits the
target's gold list leaks). Bank-level rules (unique turn-2 texts, the validator's signature
limit, unique ids) are resolved in index order, so records do not depend on scheduling.

Outputs: ``scenarios.jsonl`` (the released layout, gold inline), ``rejects.jsonl`` (reason = the
rule), ``scenario_checks.jsonl`` (per scenario: skeleton, gold categories, every rule's first and
final result, attempts, model answers), ``MANIFEST.lock.json`` in the benchmark's form, and the
funnel in the manifest. ``python -m gen scenarios verify input=<run folder>`` recomputes the
lock's hashes and exits 1 naming any that drifted.

The rule functions are pure and take any scenario dict (ours or the released ones):
:func:`.rules.rule_problems` per scenario, :func:`.rules.bank_problems` over a list.

The package: :mod:`.rules` (the authoring rules, pure), :mod:`.skeleton` (the skeleton and its
tables, pure), :mod:`.stages` (the examples, the stages and model checks of one unit, assembly,
the bank-level rules in index order), :mod:`.lock` (the lock and ``verify``); this module holds
the config, the input readers, the funnel and the generator.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from gen.contextbench import (
    CHECKS_FILE,
    JUDGE_TEMPLATE,
    LOCK,
    PROMPT_CONDITIONS,
    read_rows,
    scenario_file,
)
from gen.contextbench.rules import RULES
from gen.engine.config import ModelChoice
from gen.engine.manifest import atomic_write
from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.engine.stages import StageConfig, StagesConfig
from gen.errors import ConfigError, InputError
from gen.generators.scenarios.bank import BankView, Outcome, resolve
from gen.generators.scenarios.lock import LOCK_KEYS, make_lock, read_lock, verify
from gen.generators.scenarios.skeleton import DEFAULT_SIZE, NAME, build_units, check_distribution
from gen.generators.scenarios.stages import Writer, draft_unit
from gen.llm import sha256_file
from gen.paths import input_file
from gen.readers import read_json
from gen.schemas.scenarios import LockCheckRecord, ScenarioRecord, Target

# --------------------------------------------------------------------------- config


class ScenariosStages(StagesConfig):
    situations: StageConfig = Field(default_factory=StageConfig)
    """The scenario's situations: scene, objects and the shift (``stages.situations.llm=…``)."""
    camera: StageConfig = Field(default_factory=StageConfig)
    """The camera texts of both turns."""
    speech: StageConfig = Field(default_factory=StageConfig)
    """The user's two turns."""
    follow_up: StageConfig = Field(default_factory=StageConfig)
    """subset=contrast: member B's own turn 2."""


class ScenariosConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Scenarios to generate; null: 50 (bank) / 20 (contrast), or the sum of distribution=."""
    action: Literal["generate", "verify"] = "generate"
    """generate | verify (python -m gen scenarios verify input=<run folder>: the lock's hashes
    against the files)."""
    subset: Literal["bank", "contrast"] = "bank"
    """bank: sc-NN scenarios; contrast: adv-NN scenarios with the earlier referent still in view (a
    prior one paired with a current one of its shift type: an A/B pair sharing turn 1)."""
    distribution: dict[str, dict[str, int]] | None = None
    """Counts per shift type and target ({object_in_hand: {current: 3, clarify: 1}, …}; any cell);
    null: the subset's released joint split scaled to n."""
    id_start: int = Field(1, ge=1)
    """Number of the first id (sc-NN/adv-NN): banks made in several runs stay unique."""
    existing: str | None = None
    """Earlier scenarios (a scenarios.jsonl or run folder) this bank joins: their ids, turn-2 texts
    and signatures count."""
    signature_limit: int | None = Field(2, ge=1)
    """Most scenarios per (change_type, target, difficulty, domain), the validator's check 6 (null:
    no limit)."""
    attempts: int = Field(3, ge=1, le=10)
    """Generations per stage (fresh seed) when its output breaks a rule; formerly
    ``stage_attempts``."""
    renamed: ClassVar[dict[str, str]] = {"stage_attempts": "attempts"}
    stages: ScenariosStages = Field(default_factory=ScenariosStages)
    """A model per stage: ``stages.<situations|camera|speech|follow_up>.llm=<preset or fields>``;
    the model checks use ``models=``."""
    model_checks: Literal["reject", "record", "off"] = "reject"
    """Identification and semantic-leak checks: reject (regenerate, then reject), record only, or
    off."""
    models: list[ModelChoice] = Field(default_factory=list)
    """Models of the model checks: llm presets ([smollm2]) or dicts ([{backend: openai, model: x}]);
    [] = llm=."""
    labels: list[str] = Field(default_factory=list)
    """Model names in scenario_checks.jsonl, one per model ([] = GGUF stem or served model name)."""
    identify_min_cosine: float = Field(0.6, ge=0, le=1)
    """Identification passes at this cosine between a model's answer and the gold name (MiniLM:
    knife/chef's knife 0.79, knife/spoon 0.53)."""
    identify_quorum: Literal["any", "all"] = "any"
    """How many models must identify each camera text (one reader, as the authoring rules' test, or
    all)."""
    # list[Target](…): a bare list literal in a lambda is typed list[str] by mypy
    leak_targets: list[Target] = Field(default_factory=lambda: list[Target](["current", "prior"]))
    """Targets the semantic-leak check applies to (blind clarify/abstain replies are what missing
    vision should give)."""
    leak_tokens: int = Field(96, ge=8, le=2048)
    """Reply length cap of the text-only model in the leak check (greedy)."""
    situations_tokens: int = Field(320, ge=32)
    """Completion cap of the situations call."""
    camera_tokens: int = Field(420, ge=32)
    """Completion cap of the camera call."""
    speech_tokens: int = Field(240, ge=32)
    """Completion cap of the speech calls."""
    benchmark_version: str = "0.1"
    """benchmark_version written into MANIFEST.lock.json (the benchmark runner's version the bank is
    for)."""
    prompt_conditions: str | None = None
    """The benchmark's prompt_conditions.json: copied into the run folder and hashed into the lock
    (null: none)."""

    @model_validator(mode="after")
    def _check(self) -> ScenariosConfig:
        if self.num_shards != 1:
            raise ValueError(
                "scenarios runs in one process (num_shards=1): the bank-level rules need the whole "
                "bank; make banks in several runs with id_start= and existing="
            )
        if self.action == "verify":
            if self.input is None:
                raise ValueError("verify needs input=<a scenarios run folder>")
            return self
        panel = self.models or [self.llm]
        if self.labels and len(self.labels) != len(panel):
            raise ValueError(f"labels: {len(self.labels)} given for {len(panel)} model(s)")
        if self.labels and len(set(self.labels)) != len(self.labels):
            raise ValueError("labels must be distinct")
        if self.distribution is not None:
            check_distribution(self.distribution)
            total = sum(c for row in self.distribution.values() for c in row.values())
            if total == 0:
                raise ValueError("distribution: every count is 0")
            if self.n is not None and self.n != total:
                raise ValueError(f"n={self.n} but distribution= sums to {total}; give one of them")
        return self

    @property
    def size(self) -> int:
        if self.distribution is not None:
            return sum(c for row in self.distribution.values() for c in row.values())
        return self.n or DEFAULT_SIZE[self.subset]


# --------------------------------------------------------------------------- input


def conditions_file(cfg: ScenariosConfig) -> Path | None:
    """``prompt_conditions=``, checked to be a JSON file (read as every input: a file that is not
    UTF-8, not JSON, a device or a FIFO is one line naming it)."""
    if cfg.prompt_conditions is None:
        return None
    src = Path(cfg.prompt_conditions).expanduser()
    if not src.exists():
        raise InputError(f"prompt_conditions: no such file: {src}")
    read_json(input_file(src, "prompt_conditions"))
    return src


def plan(cfg: ScenariosConfig) -> Plan:
    """generate: one index per unit (scenario, or contrast pair) of the skeleton; verify: one
    index per lock entry checked."""
    if cfg.action == "verify":
        folder = cfg.input_path()
        assert folder is not None
        if not folder.is_dir():
            raise InputError(f"input: {folder} is not a scenarios run folder")
        return Plan(len(LOCK_KEYS), (folder, read_lock(folder)))
    conditions_file(cfg)  # a bad prompt_conditions= fails here, before any run folder exists
    existing: list[dict[str, Any]] = []
    if cfg.existing is not None:
        path = Path(cfg.existing).expanduser()
        if not path.exists():
            raise InputError(f"existing: no such file or folder: {path}")
        existing = read_rows(path)
    units = build_units(cfg, existing)
    taken = {s["scenario_id"] for s in existing}
    clash = [sk.scenario_id for u in units for sk in u if sk.scenario_id in taken]
    if clash:
        last = max(
            (int(m.group(1)) for s in taken for m in [re.search(r"-(\d+)$", s)] if m), default=0
        )
        raise ConfigError(
            f"id_start={cfg.id_start}: {clash[0]} is already in existing= ({cfg.existing}); "
            f"use id_start={last + 1}"
        )
    return Plan(len(units), (units, existing))


# --------------------------------------------------------------------------- funnel


def funnel(outcomes: list[Outcome]) -> dict[str, Any]:
    """Per rule: units that reached it, passed it on its first evaluation, and passed it in the
    end; per stage: units, generations, first-try passes; outcomes by reason. A unit is a
    scenario or a contrast pair (``unit`` says which, ``unit`` when a run has both)."""
    sizes = {len(o.unit.members) for o in outcomes}
    contrast = 2 in sizes
    rows = []
    for stage, rule, what in RULES:
        k = f"{stage}.{rule}"
        evals = [o.unit.trace.evals[k] for o in outcomes if k in o.unit.trace.evals]
        if not evals and stage == "follow_up" and not contrast:
            continue
        rows.append(
            {
                "stage": stage,
                "rule": rule,
                "checks": what,
                "reached": len(evals),
                "first_try": sum(e[0] for e in evals),
                "final": sum(e[-1] for e in evals),
            }
        )
    stages = {}
    for stage in ("situations", "camera", "speech", *(("follow_up",) if contrast else ())):
        made = [o.unit.trace.attempts[stage] for o in outcomes if o.unit.trace.attempts[stage]]
        first = 0
        for o in outcomes:
            keys = [k for k in o.unit.trace.evals if k.startswith(f"{stage}.")]
            if (
                o.unit.trace.attempts[stage]
                and keys
                and o.unit.trace.attempts[stage] == 1
                and (o.unit.failure is None or o.unit.failure.stage != stage)
            ):
                first += 1
        stages[stage] = {
            "units": len(made),
            "generations": sum(made),
            "passed_on_first_generation": first,
            "llm_errors": sum(o.unit.trace.llm_errors[stage] for o in outcomes),
        }
    reasons = Counter(
        f"{o.unit.failure.stage}.{o.unit.failure.reason}" for o in outcomes if o.unit.failure
    )
    unit = "unit" if sizes == {1, 2} else "pair" if contrast else "scenario"
    return {
        "unit": unit,
        "units": len(outcomes),
        "accepted_units": sum(o.unit.failure is None for o in outcomes),
        "rules": rows,
        "stages": stages,
        "rejected_by": dict(sorted(reasons.items())),
    }


def funnel_lines(f: dict[str, Any]) -> list[str]:
    out: list[str] = []
    out.append(
        f"[{NAME}] funnel ({f['units']} {f['unit']}s, {f['accepted_units']} accepted): "
        "reached / passed on first try / passed in the end"
    )
    for r in f["rules"]:
        if r["reached"]:
            rule = f"{r['stage']}.{r['rule']}"
            out.append(f"  {rule:<38}{r['reached']:>5}{r['first_try']:>6}{r['final']:>6}")
    for stage, s in f["stages"].items():
        out.append(
            f"  {stage}: {s['generations']} generations for {s['units']} {f['unit']}s, "
            f"{s['passed_on_first_generation']} passed on the first"
        )
    return out


# --------------------------------------------------------------------------- the generator


def write_jsonl(path: Path, rows: Sequence[BaseModel]) -> str:
    atomic_write(path, "".join(r.model_dump_json() + "\n" for r in rows))
    return sha256_file(path)


@generator(
    NAME,
    config=ScenariosConfig,
    records=(ScenarioRecord, LockCheckRecord),
    kind="scenarios",
    plan=plan,
)
def scenarios(cfg: ScenariosConfig, ctx: RunContext) -> Iterator[Any]:
    """Context-tracking scenarios in the benchmark's released format, checked rule by rule (or
    verify a run's lock)."""
    if cfg.action == "verify":
        yield from verify(cfg, ctx)
        return
    units, existing = ctx.plan.data
    if cfg.existing is not None:
        path = Path(cfg.existing).expanduser()
        ctx.record_input(scenario_file(path))
    conditions_sha = None
    src = conditions_file(cfg)
    if src is not None:
        ctx.record_input(src)
        shutil.copyfile(src, ctx.out_dir / PROMPT_CONDITIONS)
        conditions_sha = sha256_file(ctx.out_dir / PROMPT_CONDITIONS)
    w = Writer(ctx, cfg)
    bank = BankView(list(existing))
    outcomes: list[Outcome] = []
    # units drafted many at once (their stages too); resolved against the bank in order
    for u in ctx.imap(lambda i: draft_unit(w, i, units[i]), ctx.indices()):
        out = resolve(w, u, bank)
        outcomes.append(out)
        yield out.items if len(out.items) > 1 else out.items[0]
    accepted = [it for o in outcomes for it in o.items if isinstance(it, ScenarioRecord)]
    checks_sha = write_jsonl(ctx.out_dir / CHECKS_FILE, [c for o in outcomes for c in o.checks])

    ctx.prompts.hash(JUDGE_TEMPLATE)  # the lock names the judge prompt; the manifest lists it too
    lock = make_lock(cfg, accepted, checks_sha, conditions_sha)
    atomic_write(ctx.out_dir / LOCK, json.dumps(lock, indent=2, ensure_ascii=False) + "\n")
    f = funnel(outcomes)
    skel = [sk for u in units for sk in u]
    ctx.extra[NAME] = {
        "subset": cfg.subset,
        "skeleton": {
            "scenarios": len(skel),
            "change_type": dict(Counter(s.change_type for s in skel)),
            "target_context": dict(Counter(s.target_context for s in skel)),
            "difficulty_tier": dict(Counter(s.difficulty_tier for s in skel)),
            "referent_complexity": dict(Counter(s.referent_complexity for s in skel)),
            "time_gap_bucket": dict(Counter(s.time_gap_bucket for s in skel)),
        },
        "funnel": f,
        "lock": lock,
        "model_checks": {
            "mode": cfg.model_checks,
            "models": w.labels,
            "identify_min_cosine": cfg.identify_min_cosine,
            "identify_quorum": cfg.identify_quorum,
            "leak_targets": cfg.leak_targets,
        },
    }
    ctx.say(*funnel_lines(f))
