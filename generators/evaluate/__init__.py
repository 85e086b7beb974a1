"""The candidate runner: ``python -m gen evaluate input=<bank> llm=<candidate> [judge=<judge
llm>]``.

**Scenario banks** (the context-tracking benchmark; spec: "Scenario structure", "Video block
injection format", "Scoring", "Repair turn", "Reproducibility"). Per scenario, prompt condition
(``condition=``, the system prompts of ``prompt_conditions.json``) and seeded trial
(``trials=``): the candidate gets the pre-conversation frame as its own ``[Camera: …]`` block when
the scenario has one, then turn 1 (``[Camera: turn_1_image]`` + the user's words), then turn 2;
the turn-2 replies are judged in a ``judge kind=context`` sub-run (``judge_turn2/``); a turn-2 miss
gets the repair prompt (``repair_style=named|deictic``, deictic falling back to named where the
scenario has none) and its turn-3 reply is judged in a second sub-run (``judge_turn3/``). Each
step is a run of its own: ``responses_turn2.jsonl`` and ``responses_turn3.jsonl`` are the judge's
``responses=`` inputs, so ``python -m gen judge kind=context input=<bank> responses=…`` re-judges
them with any judge. Records: one :class:`~schemas.evaluate.TrialRecord` per trial; the summary
holds the spec's run-manifest fields and the scores (balanced turn-2 accuracy, per-label rows,
repair rate, with intervals).

``no_camera=true`` is the benchmark's camera ablation (the user's words without any
``[Camera: …]`` block; the manifest's ``camera_injection`` says false); ``judge_family=auto`` picks
the judge the benchmark would (another family than the candidate's, by its mapping).

**MCQ banks** (ours, EgoToM's CSVs, WAGIBench's MCQ layout): each item is asked once with its
visible context; accuracy with Wilson intervals, overall and per question type, against chance.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gen import kinds
from gen.contextbench import load as load_scenarios
from gen.engine.registry import generator
from gen.engine.runner import Plan, RunContext
from gen.errors import ConfigError, InputError
from gen.generators.evaluate.config import NAME, EvaluateConfig
from gen.generators.evaluate.mcq import run_mcq
from gen.generators.evaluate.scenarios import cell, conversation, run_scenarios
from gen.kinds.mcq import load_banks
from gen.paths import ROOT
from gen.readers import iter_jsonl, read_json
from gen.schemas.evaluate import MCQAnswerRecord, TrialRecord

__all__ = ["EvaluateConfig", "cell", "conversation", "evaluate", "is_scenarios", "plan"]

SHARED_CONDITIONS = ROOT.parent / "shared" / "data" / "context_bench" / "prompt_conditions.json"
"""The benchmark's prompt conditions as this project's shared data holds them (the default of
``prompt_conditions=`` when present)."""


# --------------------------------------------------------------------------- input


def is_scenarios(path: Path) -> bool:
    """A scenario bank: a folder whose kind lays its records out as scenarios (a scenarios run),
    or a JSONL whose first row has a scenario_id."""
    if path.is_dir():
        return (kind := kinds.of_path(path)) is not None and kind.view == "scenarios"
    if path.suffix != ".jsonl":
        return False
    for _, row in iter_jsonl(path):
        return isinstance(row, dict) and "scenario_id" in row
    return False


def read_conditions(path: Path) -> dict[str, str]:
    """name -> system prompt of a prompt_conditions.json (a list of {name, system_prompt, …})."""
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(
            f"{path}: expected a JSON list of prompt conditions, got a {type(data).__name__}"
        )
    out = {}
    for i, c in enumerate(data):
        if (
            not isinstance(c, dict)
            or not isinstance(c.get("name"), str)
            or not isinstance(c.get("system_prompt"), str)
        ):
            raise InputError(
                f"{path}: [{i}]: a prompt condition needs a string name and system_prompt"
            )
        out[c["name"]] = c["system_prompt"]
    return out


def conditions_path(cfg: EvaluateConfig) -> Path:
    if cfg.prompt_conditions is not None:
        path = Path(cfg.prompt_conditions).expanduser()
        if not path.is_file():
            raise InputError(f"prompt_conditions: no such file: {path}")
        return path
    if SHARED_CONDITIONS.is_file():
        return SHARED_CONDITIONS
    raise ConfigError(
        "prompt_conditions= is required for a scenario bank (the benchmark's "
        "prompt_conditions.json)"
    )


def plan(cfg: EvaluateConfig) -> Plan:
    """Scenarios: one index per scenario x condition x trial; MCQ: one per item."""
    path = cfg.input_path()
    assert path is not None
    scenarios = cfg.mode == "scenarios" or (cfg.mode == "auto" and is_scenarios(path))
    if not scenarios:
        banks = load_banks(path)
        items = [
            (b.path, it)
            for b in banks
            for it in b.items
            if len(it.options) >= 2 and it.answer is not None
        ]
        items = items[: cfg.limit] if cfg.limit else items
        if not items:
            raise InputError(f"input: {path} holds no MCQ item with options and an answer")
        return Plan(len(items), ("mcq", banks, items))
    if not cfg.judges and cfg.judge is None:
        raise ConfigError(
            "judge= is required for a scenario bank (the model that labels the replies; by default "
            "of another family than llm=, e.g. judge={backend: openai, model: …}, or judge=smollm2 "
            "allow_same_family=true)"
        )
    bank = list(load_scenarios(path).values())[: cfg.limit or None]
    cpath = conditions_path(cfg)
    conditions = read_conditions(cpath)
    unknown = [c for c in cfg.condition if c not in conditions]
    if unknown:
        raise ConfigError(
            f"condition: {unknown[0]!r} is not in {cpath} (it has {', '.join(conditions)})"
        )
    if cfg.ranking_condition not in cfg.condition:
        raise ConfigError(
            f"ranking_condition={cfg.ranking_condition!r} is not among condition={cfg.condition}"
        )
    if not bank:
        raise InputError(f"input: {path} holds no scenarios")
    return Plan(
        len(bank) * len(cfg.condition) * cfg.trials, ("scenarios", bank, (cpath, conditions))
    )


@generator(
    NAME,
    config=EvaluateConfig,
    records=(TrialRecord, MCQAnswerRecord),
    kind="evaluation",
    plan=plan,
    uses=("llm",),
)
def evaluate(cfg: EvaluateConfig, ctx: RunContext) -> Iterator[Any]:
    """Run a candidate model on a scenario bank (turns, judge, repair) or an MCQ bank, with
    intervals."""
    if ctx.plan.data[0] == "mcq":
        yield from run_mcq(cfg, ctx)
    else:
        yield from run_scenarios(cfg, ctx)
