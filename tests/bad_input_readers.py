"""test_bad_input's table of input readers (:data:`READERS`): one line per reader, naming how its
input is made (:mod:`bad_input_inputs`), how it is corrupted and how its generator reads it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from bad_input_inputs import (
    BLIND,
    BUNDLE_GOALS,
    CHAIN,
    DIGITAL_STATE,
    FINDINGS,
    FIXTURES,
    JUDGE,
    JUDGED,
    LAYOUT,
    MANIFEST_FIELDS,
    NARRATION,
    OBSERVATIONS,
    RECALL_TIMELINE,
    SCENARIO_CHECKS,
    SCENARIO_LINES,
    _copy,
    _folder,
    _lines,
    _shards,
    _text,
    audit_read,
    audit_scenarios,
    bank_copy,
    bank_scenarios,
    egotom_rows,
    goals_parquet,
    judge_run,
    merge_plan,
    merge_run,
    persona_lines,
    plan_in_memory,
    plan_of,
    rehashed,
    review_labels,
    review_rendered,
    rows_of,
    scenario_lock,
    socratic_list,
)

from gen.formats.mcq import write_egotom_csv
from gen.formats.roles import load_roles_bank, read_roles
from gen.paths import EXAMPLES, PROMPTS


@dataclass(frozen=True)
class Reader:
    """One input reader: ``make(folder, assets)`` writes a small valid input into ``folder`` and
    returns the file to corrupt; ``read(folder)`` reads it as its generator does."""

    name: str
    kind: str
    """How it is corrupted: ``json``, ``jsonl``, ``csv``, ``yaml``, ``parquet`` or ``text``."""
    make: Callable[[Path, Any], Path]
    read: Callable[[Path], Any]
    folder_named: bool = False
    """Its input is a folder: a message may name the folder instead of the file."""
    then: Callable[[Path], Any] | None = None
    """What reads the rest during the run (``merge``'s hook), after ``read`` found no fault."""
    fields: tuple[str, ...] | None = None
    """The fields the field sweep replaces (None: every field of the input)."""
    written: Callable[[Path], Any] | None = None
    """What the input's writer does after the file is written (a shard's manifest records its
    records' SHA-256), run after each corruption."""


READERS = [
    Reader(
        "tom narration.json",
        "json",
        lambda d, a: _text(d / "narration.json", json.dumps(NARRATION, indent=1)),
        lambda d: plan_of("tom", input=str(d / "narration.json")),
    ),
    Reader(
        "tom timelines JSONL",
        "jsonl",
        lambda d, a: _text(d / "t.jsonl", _lines(FIXTURES / "tom" / "timelines.jsonl", 2)),
        lambda d: plan_of("tom", input=str(d / "t.jsonl")),
    ),
    Reader(
        "tom EgoToM CSV",
        "csv",
        lambda d, a: write_egotom_csv(egotom_rows(), "goal", d / "egotom_goal_shuffled.csv"),
        lambda d: plan_of("tom", input=str(d / "egotom_goal_shuffled.csv")),
    ),
    Reader(
        "distractors goal bank JSONL",
        "jsonl",
        lambda d, a: _text(
            d / "goals.jsonl",
            _lines(EXAMPLES / "goals.jsonl", 4) + '{"goal_id": "w", "group": "g", "text": "x", '
            '"context_window": {"start_s": 1.0, "end_s": 2.5}}\n',
        ),
        lambda d: plan_of("distractors", input=str(d / "goals.jsonl")),
    ),
    Reader(
        "distractors goal bank parquet",
        "parquet",
        lambda d, a: goals_parquet(d / "goals.parquet"),
        lambda d: plan_of("distractors", input=str(d / "goals.parquet")),
    ),
    Reader(
        "digital cue bank",
        "jsonl",
        lambda d, a: (
            _text(d / "pool.jsonl", persona_lines()),
            _text(d / "cues.jsonl", _lines(EXAMPLES / "cues.jsonl", 3)),
        )[1],
        lambda d: plan_of(
            "digital", cue_file=str(d / "cues.jsonl"), persona_file=str(d / "pool.jsonl")
        ),
    ),
    Reader(
        "digital persona_file",
        "jsonl",
        lambda d, a: _text(d / "personas.jsonl", persona_lines()),
        lambda d: plan_of("digital", persona_file=str(d / "personas.jsonl")),
    ),
    Reader(
        "digital persona_file run folder's manifest",
        "json",
        lambda d, a: (
            _text(d / "personas.jsonl", persona_lines()),
            _copy(a.shards[0] / "manifest.json", d / "manifest.json"),
        )[1],
        lambda d: plan_of("digital", persona_file=str(d)),
        folder_named=True,
        fields=("generator", "config", "outputs"),
    ),
    Reader(
        "nocontext MCQ JSONL",
        "jsonl",
        lambda d, a: _text(d / "mcq.jsonl", _lines(FIXTURES / "audit" / "clean.jsonl", 3)),
        lambda d: plan_of("nocontext", input=str(d / "mcq.jsonl")),
    ),
    Reader(
        "nocontext MCQ rows in memory",
        "jsonl",
        lambda d, a: _text(d / "mcq.jsonl", _lines(FIXTURES / "audit" / "clean.jsonl", 3)),
        lambda d: plan_in_memory("nocontext", rows_of(d / "mcq.jsonl"), d / "run"),
        folder_named=True,  # the message names the run folder's file the rows became
    ),
    Reader(
        "nocontext EgoToM CSV folder",
        "csv",
        lambda d, a: write_egotom_csv(egotom_rows(), "goal", d / "egotom_goal_shuffled.csv"),
        lambda d: plan_of("nocontext", input=str(d)),
        folder_named=True,
    ),
    Reader(
        "roles file",
        "yaml",
        lambda d, a: (
            _copy(FIXTURES / "audit" / "scenarios.jsonl", d / "bank.jsonl"),
            _copy(FIXTURES / "audit" / "scenario_roles.yaml", d / "roles.yaml"),
        )[1],
        lambda d: load_roles_bank(d / "bank.jsonl", read_roles(d / "roles.yaml")),
    ),
    Reader(
        "JSONL bank read through roles",
        "jsonl",
        lambda d, a: (
            _copy(FIXTURES / "audit" / "scenario_roles.yaml", d / "roles.yaml"),
            _text(d / "bank.jsonl", _lines(FIXTURES / "audit" / "scenarios.jsonl", 2)),
        )[1],
        lambda d: load_roles_bank(d / "bank.jsonl", read_roles(d / "roles.yaml")),
    ),
    Reader(
        "candidates items JSONL",
        "jsonl",
        lambda d, a: _text(d / "items.jsonl", _lines(EXAMPLES / "candidates" / "items.jsonl", 4)),
        lambda d: plan_of("candidates", input=str(d / "items.jsonl")),
    ),
    Reader(
        "candidates recall annotations (Memory Recall Prediction)",
        "jsonl",
        lambda d, a: _text(d / "recall.jsonl", _lines(EXAMPLES / "candidates" / "recall.jsonl", 2)),
        lambda d: plan_of("candidates", input=str(d / "recall.jsonl"), input_format="recall"),
    ),
    Reader(
        "candidates timelines JSONL (temporal-grounding items)",
        "jsonl",
        lambda d, a: _text(d / "t.jsonl", RECALL_TIMELINE),
        lambda d: plan_of("candidates", input=str(d / "t.jsonl"), input_format="timelines"),
    ),
    Reader(
        "introspect recording sessions",
        "jsonl",
        lambda d, a: _text(d / "r.jsonl", _lines(EXAMPLES / "introspect" / "recording.jsonl", 1)),
        lambda d: plan_of("introspect", task="recording", input=str(d / "r.jsonl")),
    ),
    Reader(
        "introspect emotion segments",
        "jsonl",
        lambda d, a: _text(d / "e.jsonl", _lines(EXAMPLES / "introspect" / "emotions.jsonl", 6)),
        lambda d: plan_of("introspect", task="emotion_intensity", input=str(d / "e.jsonl")),
    ),
    Reader(
        "introspect request segments",
        "jsonl",
        lambda d, a: _text(d / "q.jsonl", _lines(EXAMPLES / "introspect" / "requests.jsonl", 3)),
        lambda d: plan_of(
            "introspect",
            task="tool_selection",
            input=str(d / "q.jsonl"),
            tools=str(EXAMPLES / "introspect" / "tools.yaml"),
        ),
    ),
    Reader(
        "introspect tool universe",
        "yaml",
        lambda d, a: _copy(EXAMPLES / "introspect" / "tools.yaml", d / "tools.yaml"),
        lambda d: plan_of(
            "introspect",
            task="tool_selection",
            input=str(EXAMPLES / "introspect" / "requests.jsonl"),
            tools=str(d / "tools.yaml"),
        ),
    ),
    Reader(
        "introspect interruption sessions",
        "jsonl",
        lambda d, a: _text(
            d / "i.jsonl", _lines(EXAMPLES / "introspect" / "interruptions.jsonl", 1)
        ),
        lambda d: plan_of("introspect", task="proactive_timing", input=str(d / "i.jsonl")),
    ),
    Reader(
        "introspect memory sessions",
        "jsonl",
        lambda d, a: _text(d / "m.jsonl", _lines(EXAMPLES / "introspect" / "memories.jsonl", 1)),
        lambda d: plan_of("introspect", task="memory_lifespan", input=str(d / "m.jsonl")),
    ),
    Reader(
        "recommend sessions",
        "jsonl",
        lambda d, a: _text(d / "s.jsonl", _lines(EXAMPLES / "recommend" / "sessions.jsonl", 2)),
        lambda d: plan_of("recommend", input=str(d / "s.jsonl")),
    ),
    Reader(
        "rerank pools JSONL",
        "jsonl",
        lambda d, a: _text(d / "pools.jsonl", _lines(EXAMPLES / "rerank" / "pools.jsonl", 1)),
        lambda d: plan_of("rerank", input=str(d / "pools.jsonl")),
    ),
    Reader(
        "history observation table",
        "jsonl",
        lambda d, a: _text(d / "obs.jsonl", OBSERVATIONS),
        lambda d: plan_of("history", input=str(d / "obs.jsonl")),
    ),
    Reader(
        "review MCQ run folder",
        "jsonl",
        lambda d, a: _text(
            d / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 3)
        ),
        lambda d: plan_of("review", input=str(d)),
        folder_named=True,
    ),
    Reader(
        "review digital run folder",
        "jsonl",
        lambda d, a: _copy(FIXTURES / "audit" / "digital" / "digital.jsonl", d / "digital.jsonl"),
        lambda d: plan_of("review", input=str(d)),
        folder_named=True,
    ),
    Reader(
        "review label file",
        "jsonl",
        lambda d, a: review_labels(d),
        lambda d: plan_of("review", input=str(d), action="summary"),
        folder_named=True,
    ),
    Reader(
        "review rubric",
        "yaml",
        lambda d, a: (
            _text(d / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 2)),
            _copy(PROMPTS / "review" / "mcq.yaml", d / "rubric.yaml"),
        )[1],
        lambda d: plan_of("review", input=str(d), rubric=str(d / "rubric.yaml")),
    ),
    Reader(
        "review audit findings",
        "jsonl",
        lambda d, a: (
            _text(d / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 2)),
            _text(d / "audit.jsonl", FINDINGS),
        )[1],
        lambda d: plan_of("review", input=str(d)),
    ),
    Reader(
        "review scenarios run folder",
        "jsonl",
        lambda d, a: _text(d / "scenarios.jsonl", SCENARIO_LINES),
        lambda d: review_rendered(input=str(d)),
        folder_named=True,
    ),
    Reader(
        "review nocontext results",
        "jsonl",
        lambda d, a: (
            _text(d / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 2)),
            _text(_folder(d / "nc") / "nocontext.jsonl", BLIND),
        )[1],
        lambda d: review_rendered(input=str(d), nocontext=str(d / "nc")),
    ),
    Reader(
        "review judge distractor_validity results",
        "jsonl",
        lambda d, a: (
            _text(d / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 2)),
            _text(_folder(d / "j") / "judge.jsonl", JUDGED),
        )[1],
        lambda d: review_rendered(input=str(d), judge=str(d / "j")),
    ),
    Reader(
        "review judge run's manifest",
        "json",
        lambda d, a: (
            _text(d / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 2)),
            _text(_folder(d / "j") / "judge.jsonl", JUDGED),
            _text(
                d / "j" / "manifest.json",
                json.dumps(
                    {
                        "generator": "judge",
                        "judge": {"kind": "distractor_validity", "judge_label": "big"},
                    }
                ),
            ),
        )[2],
        lambda d: review_rendered(input=str(d), judge=str(d / "j")),
    ),
    Reader(
        "review a bank's version",
        "parquet",
        lambda d, a: bank_copy(d, a),
        lambda d: review_rendered(input=str(d / "bank")),
    ),
    Reader(
        "distractors digital= run (goal-conditioned bundles)",
        "jsonl",
        lambda d, a: (
            _text(d / "goals.jsonl", _lines(EXAMPLES / "goals.jsonl", 4)),
            _text(d / "digital.jsonl", BUNDLE_GOALS),
        )[1],
        lambda d: plan_of(
            "distractors", input=str(d / "goals.jsonl"), digital=str(d / "digital.jsonl")
        ),
    ),
    Reader(
        "pipeline chain file",
        "yaml",
        lambda d, a: _text(d / "chain.yaml", CHAIN),
        lambda d: plan_of("pipeline", chain=str(d / "chain.yaml")),
    ),
    Reader(
        "audit scenario bank (released schema)",
        "jsonl",
        lambda d, a: _text(d / "scenarios.jsonl", SCENARIO_LINES),
        audit_scenarios,
    ),
    Reader(
        "audit scenarios run's scenario_checks.jsonl",
        "jsonl",
        lambda d, a: (
            _text(d / "scenarios.jsonl", SCENARIO_LINES),
            _text(d / "scenario_checks.jsonl", SCENARIO_CHECKS),
        )[1],
        lambda d: audit_scenarios(d, "."),
    ),
    Reader(
        "bank add scenarios",
        "jsonl",
        lambda d, a: _text(d / "scenarios.jsonl", SCENARIO_LINES),
        bank_scenarios,
    ),
    Reader(
        "bank add: the input run's manifest.json",
        "json",
        lambda d, a: (
            _text(d / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 2)),
            _copy(FIXTURES / "audit" / "run_clean" / "manifest.json", d / "manifest.json"),
        )[1],
        lambda d: plan_of("bank", action="add", bank=str(d / "bank"), input=str(d)),
        folder_named=True,
    ),
    Reader(
        "judge wagibench predictions",
        "jsonl",
        lambda d, a: _copy(JUDGE / "predictions.jsonl", d / "p.jsonl"),
        lambda d: plan_of(
            "judge", kind="wagibench", input=str(d / "p.jsonl"), variant=["contexts_reference"]
        ),
    ),
    Reader(
        "judge context responses",
        "jsonl",
        lambda d, a: _copy(JUDGE / "responses.jsonl", d / "r.jsonl"),
        lambda d: plan_of(
            "judge",
            kind="context",
            input=str(JUDGE / "scenarios.jsonl"),
            responses=str(d / "r.jsonl"),
        ),
    ),
    Reader(
        "judge and evaluate scenario bank",
        "jsonl",
        lambda d, a: _copy(JUDGE / "scenarios.jsonl", d / "scenarios.jsonl"),
        lambda d: plan_of(
            "evaluate",
            input=str(d / "scenarios.jsonl"),
            judge="smollm2",
            prompt_conditions=str(JUDGE / "prompt_conditions.json"),
            mode="scenarios",
        ),
    ),
    Reader(
        "evaluate prompt_conditions",
        "json",
        lambda d, a: _copy(JUDGE / "prompt_conditions.json", d / "pc.json"),
        lambda d: plan_of(
            "evaluate",
            input=str(JUDGE / "scenarios.jsonl"),
            judge="smollm2",
            prompt_conditions=str(d / "pc.json"),
        ),
    ),
    Reader(
        "judge meta human ratings",
        "jsonl",
        lambda d, a: _copy(JUDGE / "ratings.jsonl", d / "ratings.jsonl"),
        lambda d: plan_of("judge", action="meta", input=str(d / "ratings.jsonl")),
    ),
    Reader(
        "merge: a shard's manifest",
        "json",
        lambda d, a: (_shards(d, a.shards), d / "s1" / "manifest.json")[1],
        merge_plan,
        folder_named=True,
        then=merge_run,
        fields=MANIFEST_FIELDS,
    ),
    Reader(
        "merge: a shard's records",
        "jsonl",
        lambda d, a: (_shards(d, a.shards), d / "s1" / "personas.jsonl")[1],
        merge_plan,
        folder_named=True,
        then=merge_run,
        written=rehashed,
    ),
    Reader(
        "scenarios verify: the run's MANIFEST.lock.json",
        "json",
        lambda d, a: scenario_lock(d),
        lambda d: plan_of("scenarios", action="verify", input=str(d)),
        folder_named=True,
    ),
    Reader(
        "scenarios prompt_conditions",
        "json",
        lambda d, a: _copy(JUDGE / "prompt_conditions.json", d / "pc.json"),
        lambda d: plan_of("scenarios", n=2, prompt_conditions=str(d / "pc.json")),
    ),
    Reader(
        "scenarios existing= bank",
        "jsonl",
        lambda d, a: _text(d / "scenarios.jsonl", SCENARIO_LINES),
        lambda d: plan_of("scenarios", n=2, id_start=50, existing=str(d / "scenarios.jsonl")),
    ),
    Reader(
        "digital goals= goal bank",
        "jsonl",
        lambda d, a: (
            _text(d / "pool.jsonl", persona_lines()),
            _text(d / "goals.jsonl", _lines(EXAMPLES / "goals.jsonl", 4)),
        )[1],
        lambda d: plan_of(
            "digital", goals=str(d / "goals.jsonl"), persona_file=str(d / "pool.jsonl")
        ),
    ),
    Reader(
        "judge meta judge_run records",
        "jsonl",
        lambda d, a: judge_run(d)[1],
        lambda d: plan_of(
            "judge", action="meta", input=str(d / "ratings.jsonl"), judge_run=str(d / "jr")
        ),
    ),
    Reader(
        "judge meta judge_run manifest",
        "json",
        lambda d, a: judge_run(d)[0],
        lambda d: plan_of(
            "judge", action="meta", input=str(d / "ratings.jsonl"), judge_run=str(d / "jr")
        ),
        folder_named=True,
    ),
    Reader(
        "audit digital run folder",
        "jsonl",
        lambda d, a: (
            _copy(FIXTURES / "audit" / "digital" / "manifest.json", d / "manifest.json"),
            _copy(FIXTURES / "audit" / "digital" / "digital.jsonl", d / "digital.jsonl"),
        )[1],
        lambda d: audit_read(d, "."),
        folder_named=True,
    ),
    Reader(
        "audit run folder's manifest",
        "json",
        lambda d, a: (
            _copy(FIXTURES / "audit" / "digital" / "digital.jsonl", d / "digital.jsonl"),
            _copy(FIXTURES / "audit" / "digital" / "manifest.json", d / "manifest.json"),
        )[1],
        lambda d: audit_read(d, "."),
        fields=("generator", "config", "merged", "source_config"),
    ),
    Reader(
        "nocontext WAGIBench MCQ layout",
        "json",
        lambda d, a: _text(d / "wagibench_mcq_similar.json", LAYOUT),
        lambda d: plan_of("nocontext", input=str(d / "wagibench_mcq_similar.json")),
    ),
    Reader(
        "judge references= (WAGIBench MCQ layout)",
        "json",
        lambda d, a: _text(d / "wagibench_mcq_similar.json", LAYOUT),
        lambda d: plan_of(
            "judge",
            kind="wagibench",
            input=str(JUDGE / "predictions.jsonl"),
            variant=["contexts_reference"],
            references=str(d / "wagibench_mcq_similar.json"),
        ),
    ),
    Reader(
        "judge digital_state.json",
        "json",
        lambda d, a: _text(d / "digital_state.json", DIGITAL_STATE),
        lambda d: plan_of(
            "judge",
            kind="wagibench",
            input=str(JUDGE / "predictions.jsonl"),
            variant=["contexts_reference"],
            digital_state=str(d / "digital_state.json"),
        ),
    ),
    *(
        [
            Reader(
                "socratic JSONL list of videos",
                "jsonl",
                socratic_list,
                lambda d: plan_of("socratic", input=str(d / "videos.jsonl")),
            ),
            Reader(
                "socratic sidecar transcript",
                "text",
                lambda d, a: socratic_list(d, a).with_name("v.srt"),
                lambda d: plan_of("socratic", input=str(d / "videos.jsonl")),
            ),
        ]
        if find_spec("av") is not None  # PyAV makes the video (the [video] extra)
        else []
    ),
]
"""Every input reader; adding one is one line."""
