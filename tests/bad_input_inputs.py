"""The small valid inputs of test_bad_input's readers' table: what each reader reads before
Hypothesis corrupts it (run folders, banks, scenario and judge files, EgoToM CSVs, goal parquet),
and the helpers that build them."""

from __future__ import annotations

import codecs
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl

from gen.engine.registry import REGISTRY
from gen.engine.runner import RunContext, run_config
from gen.generators.personas import sample_facts
from gen.paths import EXAMPLES
from gen.schemas.personas import PersonaRecord

FIXTURES = Path(__file__).resolve().parent / "fixtures"

JUDGE = FIXTURES / "judge"
BOM = codecs.BOM_UTF8


def plan_of(name: str, **options: Any) -> Any:
    """What a run reads before it starts: the generator's plan hook on these options."""
    g = REGISTRY[name]
    return g.make_plan(g.config(**{"cache_dir": None, "progress": "off", **options}))


def rows_of(path: Path) -> list[Any]:
    """A JSONL file's lines as a notebook might hold them: each parsed as Python's json reads it
    (NaN, Infinity, any number), or the line's text when it is no JSON; bytes that are not UTF-8
    become lone surrogates; a leading byte-order mark is dropped, as pandas and polars drop it."""
    rows: list[Any] = []
    data = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        try:
            rows.append(json.loads(line))
        except (ValueError, RecursionError):
            rows.append(line)
    return rows


def plan_in_memory(name: str, rows: list[Any], folder: Path, **options: Any) -> Any:
    """What ``gen.run(name, input=rows, out=folder)`` reads before it starts: the rows written as
    the run's input file (:func:`gen.engine.api.in_memory_inputs`), then the plan hook on it."""
    from gen.engine.api import in_memory_inputs

    given, _ = in_memory_inputs(name, {"input": rows, **options}, folder)
    return plan_of(name, **given)


def merge_plan(folder: Path) -> Any:
    """What ``merge`` reads of the two shards in ``folder`` before it starts."""
    return plan_of("merge", input=[str(folder / "s0"), str(folder / "s1")])


def rehashed(folder: Path) -> None:
    """``folder``'s shard s1 with its records' SHA-256 recorded anew, as if its run had written the
    bytes a case put there: what the parse makes of them is the case (merge refuses records that
    are not the file the run wrote: tests/unit/test_merge.py)."""
    import hashlib

    manifest = folder / "s1" / "manifest.json"
    m = json.loads(manifest.read_text(encoding="utf-8"))
    records = (folder / "s1" / "personas.jsonl").read_bytes()
    m["outputs"]["personas.jsonl"] = hashlib.sha256(records).hexdigest()
    manifest.write_text(json.dumps(m), encoding="utf-8")


def merge_run(folder: Path) -> Any:
    """The merge itself, into ``folder/run`` (the generator's merge hook reads the summaries)."""
    from gen.generators.merge import MergeConfig

    cfg = MergeConfig(
        input=[str(folder / "s0"), str(folder / "s1")], cache_dir=None, progress="off"
    )
    return run_config("merge", cfg, folder / "run", quiet=True)


def persona_lines(n: int = 7) -> str:
    return "".join(
        PersonaRecord(
            **f.model_dump(), bio=f"{f.first_name} works in {f.home_city}."
        ).model_dump_json()
        + "\n"
        for f in sample_facts(0, n)
    )


NARRATION = {
    "v1": {
        "narration_pass_1": {
            "narrations": [
                {"timestamp_sec": 1.5 + i, "narration_text": f"#C C step {i}"} for i in range(4)
            ],
            "summaries": [{"start_sec": 0.0, "end_sec": 10.0, "summary_text": "#summary C works."}],
        }
    }
}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


def _lines(path: Path, k: int) -> str:
    return "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:k])


def _text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _shards(folder: Path, made: list[Path]) -> None:
    for s in made:
        shutil.copytree(s, folder / s.name)


OBSERVATIONS = "".join(
    json.dumps(
        {
            "client_tag": f"rec{i}",
            "scenario": "s1",
            "participant": "p1",
            "environment": "kitchen",
            "script": "s1",
            "longitudinal": True,
            "recorded_at": f"2025-01-0{i + 1}T10:00:00",
            "world_state": f"caption {i}",
            "structured_goal": {"type": "shop", "content": "hand soap"},
            "context_window": {"start_s": 0.0, "end_s": 10.0},
        }
    )
    + "\n"
    for i in range(3)
)
"""A small valid observation table for the history bank."""

RECALL_TIMELINE = (
    json.dumps(
        {
            "clip_id": "kitchen-001",
            "start_sec": 0.0,
            "duration": 60.0,
            "narrations": [
                {"t": float(t), "text": f"#C C {text}"}
                for t, text in enumerate(
                    [
                        "opens the fridge",
                        "takes out the milk",
                        "closes the fridge door",
                        "pours milk into a cup",
                        "puts the carton on the counter",
                        "stirs the coffee with a spoon",
                        "rinses the spoon in the sink",
                        "wipes the counter with a cloth",
                        "sits down at the table",
                    ],
                    start=1,
                )
            ],
        }
    )
    + "\n"
)
"""One clip of distinct narrations: candidates cuts temporal-grounding items from it (the tom
fixtures repeat their lines, and a positive's text must occur once in its clip)."""


BUNDLE_GOALS = "".join(
    json.dumps(
        {
            **b,
            "goal": {
                "goal_id": json.loads(x)["goal_id"],
                "client_tag": json.loads(x)["goal_id"],
                "group": "g",
                "app": b["cue"]["app"] if b["cue"] else None,
            },
        }
    )
    + "\n"
    for x, b in zip(
        _lines(EXAMPLES / "goals.jsonl", 2).splitlines(),
        map(
            json.loads,
            (FIXTURES / "audit" / "digital" / "digital.jsonl").read_text().splitlines()[:2],
        ),
        strict=True,
    )
)
"""Goal-conditioned bundles as distractors' digital= reads them (its cue, and the key-only state it
shows)."""
CHAIN = (
    "steps:\n  - {name: rec, generator: history, options: {synthesize: true}}\n"
    "  - {name: mcqs, generator: distractors, options: {n: 2}, inputs: {input: rec/goals.jsonl}}\n"
)
"""A small valid chain for the pipeline."""


SCENARIO = {
    "scenario_id": "sc-01",
    "subset": "bank",
    "pair_id": None,
    "target_context": "current",
    "change_type": "object_in_hand",
    "activity_domain": "kitchen",
    "referent_complexity": "single_referent",
    "difficulty_tier": "easy",
    "time_gap_bucket": "seconds",
    "context_image": None,
    "turn_1_image": "A hand holds a long wooden shaft dipped into a steel vessel.",
    "turn_1_user": "Should I keep moving this around?",
    "turn_2_image": "A hand grips a black handle attached to a flat triangular blade.",
    "turn_2_user": "Is my grip okay for this?",
    "turn_3_repair_prompt": "I mean the chef's knife now, not the wooden spoon.",
    "turn_3_repair_prompt_deictic": "I mean this thing in my hand right now.",
    "notes": "a swap",
    "gold": {
        "current_answers": ["chef's knife", "pinch grip", "knuckles tucked"],
        "prior_answers": ["wooden spoon", "stir gently", "simmering"],
        "clarify_indicators": [],
        "abstain_indicators": [],
    },
}
SCENARIO_LINES = "".join(
    json.dumps(s) + "\n"
    for s in (
        SCENARIO,
        {
            **SCENARIO,
            "scenario_id": "sc-02",
            "target_context": "prior",
            "turn_3_repair_prompt_deictic": None,
            "turn_2_user": "Was that the right grip earlier?",
            "turn_3_repair_prompt": "I mean the wooden spoon before, not the chef's knife.",
        },
    )
)
"""Two scenarios in the context benchmark's released schema (no roles file needed)."""


SCENARIO_CHECKS = "".join(
    json.dumps(
        {
            "scenario_id": sid,
            "index": k,
            "status": "accepted",
            "skeleton": {},
            "categories": {
                "current_answers": {
                    "name": "chef's knife",
                    "technique": ["pinch grip"],
                    "state": ["knuckles tucked"],
                },
                "prior_answers": {
                    "name": "wooden spoon",
                    "technique": ["stir gently"],
                    "state": ["simmering"],
                },
            },
        }
    )
    + "\n"
    for k, sid in enumerate(("sc-01", "sc-02"))
)
"""A scenarios run's scenario_checks.jsonl for SCENARIO_LINES (the gold categories the audit
reads)."""


def audit_scenarios(folder: Path, input: str = "scenarios.jsonl") -> Any:
    """What ``audit`` reads of a scenario bank, and its scenarios check on what it read."""
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.checks.scenarios import scenarios as scenarios_check
    from gen.generators.audit.data import load_inputs

    cfg = AuditConfig(input=str(folder / input), cache_dir=None, progress="off", embeddings=False)
    return scenarios_check(load_inputs(cfg, RunContext("audit", cfg, folder / "run")), cfg)


def bank_scenarios(folder: Path) -> Any:
    """What ``bank add`` reads of a scenarios run: its plan (kind, count), then the batch."""
    from gen.banks.batch import load_batch

    p = plan_of(
        "bank",
        action="add",
        bank=str(folder / "run" / "bank"),
        input=str(folder / "scenarios.jsonl"),
    )
    return load_batch(p.data.files)


LAYOUT = json.dumps(
    [
        {
            "x": {
                "client_tag": f"rec{i}",
                "context_window": {"start_s": 0.0, "end_s": 10.0},
                "cues": [f"Notes: buy soap {i}"],
                "mcq_set": [
                    {"type": "shop", "content": "hand soap"},
                    {"type": "call", "content": "mom"},
                    {"type": "note", "content": "call the plumber"},
                ],
            },
            "y": i % 3,
            "meta": {
                "client_tag": f"rec{i}",
                "scenario": {"shortname": "soap"},
                "item_id": f"soap_rec{i}",
                "structured_goal": {"type": "shop", "content": "hand soap"},
            },
        }
        for i in range(1, 3)
    ],
    indent=1,
)
"""A WAGIBench MCQ layout file (as distractors writes wagibench_mcq_*.json) of two rows."""
DIGITAL_STATE = json.dumps(
    {
        f"soap_rec{i}": {
            "x": {"client_tag": f"rec{i}", "app_states": {"Notes": [f"buy soap {i}"]}},
            "meta": {"client_tag": f"rec{i}", "scenario": {"shortname": "soap"}},
        }
        for i in range(1, 3)
    },
    indent=1,
)
"""A digital_state.json (WAGIBench's layout) of two observations."""


def audit_read(folder: Path, input: str) -> Any:
    """What ``audit`` reads of its input (every check then reads that)."""
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import load_inputs

    cfg = AuditConfig(input=str(folder / input), cache_dir=None, progress="off", embeddings=False)
    return load_inputs(cfg, RunContext("audit", cfg, folder / "run"))


def scenario_lock(folder: Path) -> Path:
    """A scenarios run folder's lock (what ``scenarios action=verify`` reads before it starts)."""
    from gen.generators.scenarios.lock import LOCK, LOCK_KEYS

    return _text(
        folder / LOCK,
        json.dumps(
            {
                "benchmark_version": "v1",
                **{k: "0" * 64 for k in LOCK_KEYS},
                "schema_revision": 1,
                "counts": {"bank": 2},
            },
            indent=1,
        ),
    )


def judge_run(folder: Path) -> tuple[Path, Path]:
    """A wagibench judge run folder (``jr/``: its manifest and records) for the ratings of
    ``ratings.jsonl`` (``judge action=meta judge_run=``)."""
    ratings = _copy(JUDGE / "ratings.jsonl", folder / "ratings.jsonl")
    ids = [
        json.loads(x)["id"] for x in ratings.read_text(encoding="utf-8").splitlines() if x.strip()
    ]
    manifest = _text(
        _folder(folder / "jr") / "manifest.json",
        json.dumps({"generator": "judge", "judge": {"kind": "wagibench", "judge_label": "big"}}),
    )
    records = _text(
        folder / "jr" / "judge.jsonl",
        "".join(
            json.dumps(
                {"id": i, "judgments": {"contexts_reference": {"big": {"normalised": k % 3 / 2}}}}
            )
            + "\n"
            for k, i in enumerate(ids)
        ),
    )
    return manifest, records


MANIFEST_FIELDS = (
    "generator",
    "config",
    "seed",
    "shard",
    "indices",
    "num_shards",
    "counts",
    "requested",
    "accepted",
    "indices_done",
    "outputs",
    "validators",
    "llm_usage",
    "calls",
    "pool",
    "exit_code",
)
"""What merge and its personas hook read of a shard's manifest."""


FINDINGS = "".join(
    json.dumps(
        {
            "check": "length",
            "check_id": 4,
            "kind": "longest_answer",
            "severity": "warning",
            "what": "the answer is the longest option",
            "items": [f"goal-00{i}"],
            "fields": ["options[answer]"],
            "numbers": {"ratio": 1.5},
        }
    )
    + "\n"
    for i in range(2)
)
"""Two audit findings naming the first two items of run_clean."""


BLIND = "".join(
    json.dumps(
        {
            "item_id": f"goal-00{i}",
            "question_type": "goal",
            "source": "tom.jsonl",
            "line": i,
            "n_options": 3,
            "answer": i,
            "kept": True,
            "removed_by": [],
            "shuffles": 2,
            "correct": {"m": 1},
            "unparseable": {"m": 0},
            "answers": {
                "m": [
                    {
                        "shuffle": k,
                        "order": [0, 1, 2],
                        "raw": "Answer: a",
                        "letter": "a",
                        "choice": k,
                        "correct": k == i,
                    }
                    for k in range(2)
                ]
            },
        }
    )
    + "\n"
    for i in range(2)
)
"""A nocontext run's records of the first two items of run_clean."""
JUDGED = "".join(
    json.dumps(
        {
            "item_id": f"goal-00{i}",
            "question_type": "goal",
            "source": "tom.jsonl",
            "answer": i,
            "n_options": 3,
            "scores": {
                "big": [
                    {
                        "score": s,
                        "normalised": s / 2,
                        "followed": True,
                        "raw": f"<score>{s}</score>",
                    }
                    for s in (2, 0, 1)
                ]
            },
            "flagged": {"big": False},
            "flagged_options": {"big": []},
        }
    )
    + "\n"
    for i in range(2)
)
"""A distractor_validity judge run's records of the first two items of run_clean."""


def review_rendered(**options: Any) -> list[str]:
    """What ``review`` reads of its input, and every item rendered as the page shows it (a value
    that passes the reader must not break the page)."""
    from gen.generators.review.items import render

    return [render(it) for it in plan_of("review", **options).data.items]


def bank_copy(folder: Path, assets: SimpleNamespace) -> Path:
    """A one-version bank of two run_clean MCQs (added once per module, with the real audit's
    structure check) copied into ``folder/bank``; its data file. Any change to it is drift (the
    lock holds its SHA-256): review refuses the bank naming the file, as bank export does."""
    from gen.generators.bank import BankConfig

    if not hasattr(assets, "bank"):
        src = assets.root / "bank_src"
        (src / "run").mkdir(parents=True)
        _text(src / "run" / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 2))
        cfg = BankConfig(
            action="add",
            bank=str(src / "bank"),
            input=str(src / "run"),
            near_dup_sim=None,
            fail_on="never",
            audit_options={"checks": ["structure"], "embeddings": False},
            cache_dir=None,
            progress="off",
        )
        assert run_config("bank", cfg, src / "out", quiet=True).accepted == 2
        assets.bank = src / "bank"
    shutil.copytree(assets.bank, folder / "bank", symlinks=True)  # current is a symlink
    return folder / "bank" / "versions" / "v0001" / "tom.parquet"


def review_labels(folder: Path) -> Path:
    """A run folder of three MCQs and a reviewer's label file of them (``reviews/alice.jsonl``)."""
    from gen.generators.review.items import load_items

    _text(folder / "tom.jsonl", _lines(FIXTURES / "audit" / "run_clean" / "tom.jsonl", 3))
    (folder / "reviews").mkdir()
    return _text(
        folder / "reviews" / "alice.jsonl",
        "".join(
            json.dumps(
                {
                    "item_id": it.item_id,
                    "record_id": it.record_id,
                    "reviewer": "alice",
                    "time": "2026-01-01T00:00:00Z",
                    "rubric": "mcq-egotom",
                    "scores": {"inferable": 3},
                    "decision": "accept",
                    "note": "fine",
                }
            )
            + "\n"
            for it in load_items(folder)[0]
        ),
    )


def goals_parquet(path: Path, rows: list[dict[str, Any]] | None = None) -> Path:
    pl.DataFrame(rows if rows is not None else GOAL_ROWS).write_parquet(path)
    return path


GOAL_ROWS = [
    {**r, "goal": json.dumps(r["goal"]), "context_window": {"start_s": 1.0, "end_s": 2.0 + i}}
    for i, r in enumerate(json.loads(x) for x in _lines(EXAMPLES / "goals.jsonl", 4).splitlines())
]


def egotom_rows(n: int = 2) -> list[dict[str, str]]:
    return [
        {
            "vuid": f"v{i}",
            "cuid": f"v{i}~pass_1~0-9",
            "narrations_in_context": "    00m:01s | #C C opens the door",
            "gt_goal": "To leave.",
            "goal_choice_a": "To cook.",
            "goal_choice_b": "To leave.",
            "goal_choice_c": "To sleep.",
            "clip_start_time": "0",
            "clip_end_time": "9",
        }
        for i in range(n)
    ]


def socratic_list(folder: Path, assets: Any) -> Path:
    """A JSONL list of one video (made once per session with PyAV, copied in) with a sidecar
    transcript and every optional field."""
    from videos import make_video

    made = assets.root / "socratic_clip.mp4"
    if not made.is_file():
        make_video(made, 3.0, fps=2, size=(64, 48))
    shutil.copy(made, folder / "v.mp4")
    (folder / "v.srt").write_text("1\n00:00:00,500 --> 00:00:01,000\nhello\n", encoding="utf-8")
    row = {
        "path": "v.mp4",
        "id": "v1",
        "participant": "p1",
        "environment": "hall",
        "script": "s",
        "recorded_at": "2025-03-01T08:00:00",
        "longitudinal": False,
        "structured_goal": {"type": "shop", "content": "milk"},
        "context_windows": [{"start_s": 0.0, "end_s": 2.0}],
        "transcript": "v.srt",
    }
    path = folder / "videos.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path
