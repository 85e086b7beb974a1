"""Every input reader against malformed content.

A table of readers (:data:`READERS`: one line each) drives each generator's ``plan`` hook — where
inputs are read — in process, on a small valid input that Hypothesis corrupts: random bytes, a
truncated file, a byte-order mark, a non-UTF-8 byte, an empty file, deep nesting, wrong JSON
types in each field, huge numbers, NaN, missing and extra fields or columns. The property: a
``GenError`` (exit 2) whose message is one line naming the file, or a valid result; never
another exception, never a write outside the run folder; and a BOM before valid content reads
as valid. A handful of real ``python -m gen`` runs check the same at the process level. The
shared readers' own cases (strict JSON, BOM, non-UTF-8, EgoToM columns, roles) come first.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shards import personas_shards

from gen.errors import GenError, InputError
from gen.generators.personas import sample_facts
from gen.mcq import load_banks, write_egotom_csv
from gen.paths import EXAMPLES, PROMPTS
from gen.readers import iter_jsonl, parse_json, read_json
from gen.registry import REGISTRY
from gen.roles import load_roles_bank, read_roles
from gen.runner import RunContext, run
from gen.schemas.personas import PersonaRecord

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
JUDGE = FIXTURES / "judge"
BOM = codecs.BOM_UTF8


# --------------------------------------------------------------------------- the shared readers


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": NaN}', "a: NaN is not a JSON number"),
        ('{"a": {"b": [1, -Infinity]}}', "a.b[1]: -Infinity is not a JSON number"),
        ('[{"x": 1e999}]', "[0].x: 1e999 is too large for a number"),
        (
            "9" * 5000,
            "not valid JSON (Exceeds the limit (4300 digits) for integer string conversion: value "
            "has 5000 digits)",
        ),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON (nested too deeply)"),
        ('{"a": 1', "not valid JSON (Expecting ',' delimiter)"),
    ],
    ids=["nan", "infinity", "1e999", "5000_digits", "deep", "cut"],
)
def test_parse_json_is_strict_and_names_where_and_field(text: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        parse_json(text, "f.jsonl:3")
    assert str(e.value) == f"f.jsonl:3: {message}" + (
        " (JSON has no NaN or Infinity)"
        if "JSON number" in message or "too large" in message
        else ""
    )


def test_iter_jsonl_reads_a_bom_and_names_a_bad_byte_and_nan_by_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(BOM + b'{"a": 1}\r\n\r\n{"b": "\xc3\xa9"}\n')
    assert list(iter_jsonl(path)) == [(1, {"a": 1}), (3, {"b": "é"})]
    path.write_bytes(b'{"a": 1}\n{"b": "caf\xe9"}\n')  # latin-1, as an old export writes it
    with pytest.raises(
        InputError,
        match=rf"^{path}:2: not UTF-8 text \(byte 0xe9 at column 11; save the file as UTF-8\)$",
    ):
        list(iter_jsonl(path))
    path.write_text('{"a": 1}\n{"w": {"start_s": NaN}}\n', encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:2: w.start_s: NaN is not a JSON number"):
        list(iter_jsonl(path))


def test_read_json_names_the_line_of_a_syntax_error_and_reads_a_bom(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(BOM + b'{\n "a": [1,\n 2]\n}\n')
    assert read_json(path) == {"a": [1, 2]}
    path.write_text('{\n "a": [1,\n ]\n}\n', encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:3: not valid JSON"):
        read_json(path)


def test_the_runner_never_writes_nan(tmp_path: Path) -> None:
    """What gen writes is JSON other tools read: a NaN reaching a manifest or an extra output is
    a bug (exit 1), never a file with a bare NaN in it."""
    from gen.generators.personas import PersonasConfig

    ctx = RunContext("personas", PersonasConfig(cache_dir=None), tmp_path)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        ctx.write_json("x.json", {"v": float("nan")})
    assert not (tmp_path / "x.json").exists()


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


def test_an_egotom_csv_without_its_context_column_is_refused(tmp_path: Path) -> None:
    """It loaded with empty contexts: passed ``audit``, went into a bank, was screened blind
    by ``nocontext``. The shared reader now names the file and the missing column."""
    folder = tmp_path / "egotom"
    folder.mkdir()
    path = folder / "egotom_goal_shuffled.csv"
    write_egotom_csv(egotom_rows(), "goal", path)
    assert [q.context for q in load_banks(folder)[0].items] == [
        "    00m:01s | #C C opens the door"
    ] * 2
    pl.read_csv(path, infer_schema_length=0).drop("narrations_in_context").write_csv(path)
    with pytest.raises(
        InputError,
        match=rf"^{path}: missing EgoToM column\(s\) narrations_in_context \(an EgoToM "
        r"goal CSV has vuid, cuid, narrations_in_context, gt_goal",
    ):
        load_banks(folder)
    with pytest.raises(InputError, match="narrations_in_context"):
        plan_of("nocontext", input=str(folder))


def test_egotom_csv_with_a_bom_reads_and_a_non_utf8_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "egotom_goal_shuffled.csv"
    write_egotom_csv(egotom_rows(), "goal", path)
    plain = load_banks(path)[0].items
    path.write_bytes(BOM + path.read_bytes())
    assert load_banks(path)[0].items == plain
    path.write_bytes(path.read_bytes().replace(b"opens", b"\xf6ffnet"))
    with pytest.raises(InputError, match=rf"^{path}:2: not UTF-8 text \(byte 0xf6 at column"):
        load_banks(path)
    folder = (
        tmp_path / "f"
    )  # found in a folder by its header: a bad byte there fails in the reader too
    folder.mkdir()
    (folder / "egotom_goal_shuffled.csv").write_bytes(b"\xff" + path.read_bytes())
    with pytest.raises(
        InputError, match=r"egotom_goal_shuffled.csv:1: not UTF-8 text \(byte 0xff at column 1"
    ):
        load_banks(folder)


def test_roles_file_with_a_bom_reads_and_a_non_utf8_one_is_named(tmp_path: Path) -> None:
    """A roles file that was not UTF-8 was an ``unexpected UnicodeDecodeError`` (exit 1)."""
    path = tmp_path / "roles.yaml"
    text = (FIXTURES / "audit" / "scenario_roles.yaml").read_bytes()
    path.write_bytes(BOM + text)
    assert read_roles(path) == read_roles(FIXTURES / "audit" / "scenario_roles.yaml")
    path.write_bytes(text.replace(b"authoring notes", b"authoring n\xf6tes"))
    with pytest.raises(InputError, match=rf"^{path}:3: not UTF-8 text \(byte 0xf6"):
        read_roles(path)
    path.write_text("id: [" * 2000 + "x" + "]" * 2000, encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}: "):
        read_roles(path)


def test_mcq_jsonl_with_a_bom_nan_or_a_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "mcq.jsonl"
    clean = (FIXTURES / "audit" / "clean.jsonl").read_bytes()
    path.write_bytes(BOM + clean)
    assert load_banks(path)[0].items == load_banks(FIXTURES / "audit" / "clean.jsonl")[0].items
    first, rest = clean.split(b"\n", 1)
    path.write_bytes(first + b"\n" + rest.replace(b'"group"', b'"extra": NaN, "group"', 1))
    with pytest.raises(InputError, match=rf"^{path}:2: extra: NaN is not a JSON number"):
        load_banks(path)
    path.write_bytes(first + b"\n" + rest.replace(b"C ", b"C \xe9", 1))
    with pytest.raises(InputError, match=rf"^{path}:2: not UTF-8 text"):
        load_banks(path)


# --------------------------------------------------------------------------- the readers' table


def plan_of(name: str, **options: Any) -> Any:
    """What a run reads before it starts: the generator's plan hook on these options."""
    g = REGISTRY[name]
    return g.make_plan(g.config(**{"cache_dir": None, "progress": "off", **options}))


def merge_plan(folder: Path) -> Any:
    """What ``merge`` reads of the two shards in ``folder`` before it starts."""
    return plan_of("merge", input=[str(folder / "s0"), str(folder / "s1")])


def merge_run(folder: Path) -> Any:
    """The merge itself, into ``folder/run`` (the generator's merge hook reads the summaries)."""
    from gen.generators.merge import MergeConfig

    cfg = MergeConfig(
        input=[str(folder / "s0"), str(folder / "s1")], cache_dir=None, progress="off"
    )
    return run("merge", cfg, folder / "run", quiet=True)


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


GOAL_BUNDLES = "".join(
    json.dumps(
        {
            **json.loads(line),
            "goal": {"goal_id": f"g{k}", "client_tag": f"rec{k}", "group": "s1", "app": "Notes"},
        }
    )
    + "\n"
    for k, line in enumerate(
        (FIXTURES / "audit" / "digital" / "digital.jsonl").read_text(encoding="utf-8").splitlines()
    )
)
"""A digital goals= run's bundles for three of OBSERVATIONS' recordings (what history's digital=
reads)."""


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


@dataclass(frozen=True)
class Reader:
    """One input reader: ``make(folder, assets)`` writes a small valid input into ``folder`` and
    returns the file to corrupt; ``read(folder)`` reads it as its generator does."""

    name: str
    kind: str
    """How it is corrupted: ``json``, ``jsonl``, ``csv``, ``yaml`` or ``parquet``."""
    make: Callable[[Path, Any], Path]
    read: Callable[[Path], Any]
    folder_named: bool = False
    """Its input is a folder: a message may name the folder instead of the file."""
    then: Callable[[Path], Any] | None = None
    """What reads the rest during the run (``merge``'s hook), after ``read`` found no fault."""
    fields: tuple[str, ...] | None = None
    """The fields the field sweep replaces (None: every field of the input)."""


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
    Reader(
        "history digital= run (goal-conditioned bundles)",
        "jsonl",
        lambda d, a: (
            _text(d / "obs.jsonl", OBSERVATIONS),
            _text(d / "digital.jsonl", GOAL_BUNDLES),
        )[1],
        lambda d: plan_of("history", input=str(d / "obs.jsonl"), digital=str(d / "digital.jsonl")),
    ),
]
"""Every input reader; adding one is one line."""


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
        assert run("bank", cfg, src / "out", quiet=True).accepted == 2
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


# --------------------------------------------------------------------------- corruptions

HUGE = "9" * 5000
RAW_VALUES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "9" * 400,
    HUGE,
    "-1",
    "0",
    "2.5",
    "true",
    "false",
    "null",
    '""',
    '"x"',
    "[]",
    "{}",
    "[1, 2]",
    '{"a": 1}',
    '"../../escape.json"',
    '"/etc/passwd"',
    '"\\u0000"',
    '"' + "é" * 3 + '"',
    "[" * 3000 + "]" * 3000,
    "[" * 100_000 + "]" * 100_000,
]
"""JSON (and YAML flow) texts a field is replaced by; some are not JSON at all (NaN, 5,000
digits)."""
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)
raw_value = st.sampled_from(RAW_VALUES) | json_values.map(json.dumps)
cell_text = st.sampled_from(
    [
        "",
        "NaN",
        "inf",
        "-1",
        HUGE,
        "1e999",
        "a,b",
        'x"y',
        "line\nbreak",
        "\x00",
        "99m:99s | #C C x",
        "../../x",
    ]
) | st.text(max_size=30)
SENTINEL = "\u0001SENTINEL\u0001"


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a parsed JSON/YAML value, containers included."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths_of(v, (*prefix, i))
    return out


def edited(value: Any, path: tuple[Any, ...], how: str) -> Any:
    """``value`` with the position at ``path`` replaced by the sentinel, deleted, or its parent
    given an unknown key."""
    value = json.loads(json.dumps(value))
    *head, last = path
    parent = value
    for k in head:
        parent = parent[k]
    if how == "replace":
        parent[last] = SENTINEL
    elif how == "delete":
        del parent[last]
    elif isinstance(parent, dict):
        parent["unexpected_field"] = 1
    else:
        parent.append(SENTINEL)
    return value


def dumped(value: Any, token: str, yaml_text: bool = False) -> str:
    if yaml_text:
        import yaml

        return (
            yaml.safe_dump(value, sort_keys=False, allow_unicode=True)
            .replace(repr(SENTINEL)[1:-1], token)
            .replace(f"'{SENTINEL}'", token)
            .replace(f'"{SENTINEL}"', token)
            .replace(SENTINEL, token)
        )
    return json.dumps(value, ensure_ascii=False).replace(
        json.dumps(SENTINEL, ensure_ascii=False), token
    )


@st.composite
def corrupted(draw: st.DrawFn, kind: str, valid: bytes) -> tuple[str, bytes]:
    """(what was done, the new content of the file)."""
    common = ["random_bytes", "truncated", "empty"] + (
        [] if kind == "parquet" else ["bom", "not_utf8"]
    )
    how = draw(
        st.sampled_from(
            common
            + {
                "json": ["field"] * 4,
                "jsonl": ["field"] * 4 + ["line"],
                "yaml": ["field"] * 4,
                "csv": ["cell"] * 2 + ["column"] * 2,
                "parquet": ["column"] * 5,
            }[kind]
        )
    )
    if how == "random_bytes":
        return how, draw(st.binary(max_size=200))
    if how == "truncated":
        return how, valid[: draw(st.integers(0, max(0, len(valid) - 1)))]
    if how == "bom":
        return how, BOM + valid
    if how == "not_utf8":
        at = draw(st.integers(0, len(valid)))
        return how, valid[:at] + draw(
            st.sampled_from([b"\xff", b"\xe9", b"\xc3", b"\x80\x80"])
        ) + valid[at:]
    if how == "empty":
        return how, b""
    if kind == "parquet":
        return how, draw(parquet_column_edit())
    text = valid.decode("utf-8")
    if kind == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        r = draw(st.integers(0, len(rows) - 1))
        c = draw(st.integers(0, len(rows[0]) - 1))
        if how == "cell":
            rows[r][c] = draw(cell_text)
        elif draw(st.booleans()):
            rows = [row[:c] + row[c + 1 :] for row in rows]  # a column missing
        else:
            rows = [row + [draw(cell_text) if i else "extra_column"] for i, row in enumerate(rows)]
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        return f"{how} {r},{c}", out.getvalue().encode("utf-8")
    if kind == "jsonl":
        lines = [json.loads(x) for x in text.splitlines() if x.strip()]
        k = draw(st.integers(0, len(lines) - 1))
        if how == "line":
            lines[k] = SENTINEL
            token = draw(raw_value)
            return how, "\n".join(dumped(x, token) for x in lines).encode("utf-8") + b"\n"
        doc = lines[k]
    else:
        import yaml

        doc = yaml.safe_load(text) if kind == "yaml" else json.loads(text)
    spots = paths_of(doc)
    path = draw(st.sampled_from(spots)) if spots else ()
    edit = draw(st.sampled_from(["replace", "replace", "delete", "add"])) if path else "replace"
    token = draw(raw_value)
    new = edited(doc, path, edit) if path else SENTINEL
    if kind == "jsonl":
        lines[k] = new
        out = "\n".join(dumped(x, token) for x in lines) + "\n"
    else:
        out = dumped(new, token, yaml_text=kind == "yaml")
    return f"{edit} {'.'.join(map(str, path))} = {token[:30]}", out.encode("utf-8")


@st.composite
def parquet_column_edit(draw: st.DrawFn) -> bytes:
    rows = [dict(r) for r in GOAL_ROWS]
    col = draw(st.sampled_from([*rows[0], "unexpected_column"]))
    choice = draw(
        st.sampled_from(["drop", "ints", "floats", "strings", "bools", "nulls", "lists", "structs"])
    )
    values: list[Any] = {
        "ints": [draw(st.integers(-(2**63), 2**63 - 1)) for _ in rows],
        "floats": [draw(st.sampled_from([float("nan"), float("inf"), -1.0, 1e308])) for _ in rows],
        "strings": [draw(cell_text) for _ in rows],
        "bools": [True, False, True, False],
        "nulls": [None] * len(rows),
        "lists": [[1, 2]] * len(rows),
        "structs": [{"start_s": draw(st.sampled_from([float("nan"), 1.0, -5.0])), "end_s": None}]
        * len(rows),
    }.get(choice, [])
    for r, v in zip(rows, values or [None] * len(rows), strict=True):
        if choice == "drop":
            r.pop(col, None)
        else:
            r[col] = v
    buf = io.BytesIO()
    pl.DataFrame(rows, strict=False).write_parquet(buf)
    return buf.getvalue()


# --------------------------------------------------------------------------- the property


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in root.rglob("*")
        if not p.is_dir()
    }


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("assets")
    return SimpleNamespace(root=root, shards=personas_shards(root / "shards"))


EXAMPLES_PER_READER = 20


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
@settings(
    max_examples=EXAMPLES_PER_READER,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(data=st.data())
def test_a_reader_gives_a_one_line_error_naming_the_file_or_a_valid_result(
    assets: SimpleNamespace, reader: Reader, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory(dir=assets.root) as tmp:
        folder = Path(tmp)
        target = reader.make(folder, assets)
        reader.read(folder)  # the valid input reads
        how, content = data.draw(corrupted(reader.kind, target.read_bytes()), label="corruption")
        target.write_bytes(content)
        holds(reader, folder, target, how, run_too=True)


def holds(reader: Reader, folder: Path, target: Path, how: str, *, run_too: bool = False) -> None:
    """The property: a one-line GenError naming the file, or a valid result; no other
    exception; nothing written but the run folder; a BOM before valid content reads."""
    before = tree(folder)
    try:
        reader.read(folder)
        if run_too and reader.then is not None:
            reader.then(folder)
    except GenError as e:
        message = str(e)
        assert how != "bom", f"a BOM before valid content was refused: {message}"
        assert message.strip() and "\n" not in message, f"{how}: not one line: {message!r}"
        named = [str(target)] + ([str(target.parent)] if reader.folder_named else [])
        assert any(n in message for n in named), f"{how}: {message!r} does not name {target}"
    after = tree(folder)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert all(k.startswith("run/") for k in changed), (
        f"{how}: written outside the run folder: {sorted(changed)}"
    )
    shutil.rmtree(folder / "run", ignore_errors=True)


HOSTILE = [
    "NaN",
    "-Infinity",
    "1e999",
    "9" * 400,
    HUGE,
    "[" * 100_000 + "]" * 100_000,
    "true",
    "-7",
    '"x"',
    "[]",
    "{}",
    "null",
]
"""What every field of a JSON-like input is replaced by, in turn (with the field deleted, and an
unknown field added)."""
HOSTILE_CELLS = ["", "NaN", HUGE, "1e999", "-7", "x", "../../x", "9999999m:99s | #C C x", "\x00"]


def field_variants(
    kind: str, valid: bytes, fields: tuple[str, ...] | None = None
) -> list[tuple[str, bytes]]:
    """Every field (every key name, at all its places at once; every CSV or parquet column)
    with each hostile value, deleted, and beside an unknown field."""
    if kind == "parquet":
        out = []
        for col in [*GOAL_ROWS[0], "unexpected_column"]:
            for label, values in [
                ("ints", [7, -1, 2**62, 0]),
                ("floats", [float("nan"), float("inf"), -1.0, 0.5]),
                ("strings", ["", HUGE, "x", "NaN"]),
                ("nulls", [None] * 4),
                ("drop", None),
            ]:
                rows = [
                    {k: v for k, v in r.items() if not (values is None and k == col)}
                    for r in GOAL_ROWS
                ]
                for r, v in zip(rows, values or [], strict=False):
                    r[col] = v
                buf = io.BytesIO()
                pl.DataFrame(rows, strict=False).write_parquet(buf)
                out.append((f"{col} = {label}", buf.getvalue()))
        return out
    text = valid.decode("utf-8")
    if kind == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        out = []
        for c, name in enumerate(rows[0]):
            for cell in [*HOSTILE_CELLS, None]:
                new = (
                    [r[:c] + r[c + 1 :] for r in rows]
                    if cell is None
                    else [rows[0], *[r[:c] + [cell] + r[c + 1 :] for r in rows[1:]]]
                )
                buf = io.StringIO()
                csv.writer(buf, lineterminator="\n").writerows(new)
                out.append(
                    (
                        f"{name} = {cell!r:.20}" if cell is not None else f"{name} dropped",
                        buf.getvalue().encode(),
                    )
                )
        return out
    import yaml

    docs = (
        [json.loads(x) for x in text.splitlines() if x.strip()]
        if kind == "jsonl"
        else [yaml.safe_load(text) if kind == "yaml" else json.loads(text)]
    )
    keys = sorted(
        {p[-1] for d in docs for p in paths_of(d) if isinstance(p[-1], str)}
        & set(fields or [p[-1] for d in docs for p in paths_of(d)])
    )
    out = []
    for key in keys:
        for how in [*HOSTILE, "delete", "add"]:
            new = [_each(d, key, how) for d in docs]
            token = how if how not in ("delete", "add") else "null"
            if kind == "jsonl":
                body = "\n".join(dumped(d, token) for d in new) + "\n"
            else:
                body = dumped(new[0], token, yaml_text=kind == "yaml")
            out.append((f"{key} = {how[:20]}", body.encode("utf-8")))
    return out


def _each(value: Any, key: str, how: str) -> Any:
    """``value`` with every ``key`` (at any depth) set to the sentinel, deleted, or given an
    unknown sibling."""
    if isinstance(value, list):
        return [_each(v, key, how) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k != key:
            out[k] = _each(v, key, how)
        elif how == "add":
            out[k], out["unexpected_field"] = v, 1
        elif how != "delete":
            out[k] = SENTINEL
    return out


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
def test_every_field_of_a_reader_with_each_hostile_value(
    assets: SimpleNamespace, reader: Reader
) -> None:
    """The deterministic half of the property: each field (key name, column) of the valid
    input replaced by each hostile value (NaN, a 400- and a 5,000-digit number, 1e999,
    100,000-deep nesting, each JSON type), deleted, or beside an unknown field."""
    with tempfile.TemporaryDirectory(dir=assets.root) as tmp:
        folder = Path(tmp)
        target = reader.make(folder, assets)
        reader.read(folder)
        variants = field_variants(reader.kind, target.read_bytes(), reader.fields)
        assert len(variants) >= 20
        for how, content in variants:
            target.write_bytes(content)
            holds(reader, folder, target, how)


# --------------------------------------------------------------------------- real processes


def _pool_folder(tmp: Path) -> list[str]:
    (tmp / "pool.jsonl").write_text(persona_lines(), encoding="utf-8")
    return [f"persona_file={tmp / 'pool.jsonl'}"]


PROCESS_CASES = [
    (
        "distractors",
        "goals.jsonl",
        b'{"goal_id": "a", "group": "g", "text": "x", "context_window": {"start_s": NaN}}\n',
        lambda t, f: [f"input={f}"],
        ":1: context_window.start_s: NaN is not a JSON number",
    ),
    (
        "tom",
        "narration.json",
        json.dumps(NARRATION).replace("step 1", "st\u00e9p 1").encode("latin-1"),
        lambda t, f: [f"input={f}"],
        ":1: not UTF-8 text (byte 0xe9",
    ),
    (
        "nocontext",
        "egotom_goal_shuffled.csv",
        b"vuid,cuid,gt_goal,goal_choice_a,goal_choice_b,goal_choice_c\nv,v~1,a,a,b,c\n",
        lambda t, f: [f"input={f}"],
        "missing EgoToM column(s) narrations_in_context",
    ),
    (
        "digital",
        "cues.jsonl",
        b'{"cue_id": ' + HUGE.encode() + b', "app": "Notes", "cue": "x"}\n',
        lambda t, f: [f"cue_file={f}", *_pool_folder(t)],
        ":1: not valid JSON (Exceeds the limit (4300 digits)",
    ),
    (
        "merge",
        "manifest.json",
        b"[]",
        lambda t, f: [f"input=[{f.parent}]"],
        "expected a run manifest (a JSON object), got list",
    ),
]


@pytest.mark.parametrize(
    ("name", "file", "content", "args", "needle"), PROCESS_CASES, ids=[c[0] for c in PROCESS_CASES]
)
def test_a_real_run_on_bad_input_is_one_line_exit_2_and_writes_nothing(
    run_gen, tmp_path: Path, name: str, file: str, content: bytes, args: Callable, needle: str
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = inputs / file
    path.write_bytes(content)
    argv = args(inputs, path)
    before = tree(tmp_path)
    proc = run_gen(name, *argv, "progress=off", f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert str(path) in lines[0] and needle in lines[0], lines[0]
    after = tree(tmp_path)
    assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == set()


# -------------------------------------------------------------------------- hostile files and texts


def test_an_input_that_is_not_a_regular_file_or_too_large_is_refused_before_a_byte_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/dev/zero`` was read whole into memory and a FIFO blocked the reader forever."""
    import os

    import gen.paths
    from gen.paths import input_file, read_input
    from gen.readers import read_text

    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=rf"^{fifo}: is a FIFO, not a regular file"):
        read_text(fifo)  # would block without a writer
    with pytest.raises(InputError, match=r"^input: /dev/zero: is a device, not a regular file"):
        read_input(Path("/dev/zero"), "input")
    with pytest.raises(InputError, match="is a folder"):
        input_file(tmp_path)
    big = _text(tmp_path / "big.jsonl", "{}\n" * 100)
    monkeypatch.setattr(gen.paths, "MAX_INPUT_BYTES", 50)
    with pytest.raises(
        InputError,
        match=rf"^{big}: 0 MiB is larger than an input may be \(0 MiB; GEN_MAX_INPUT_BYTES",
    ):
        read_text(big)
    # a JSONL file is streamed: any size, one line in memory, a line beyond the bound refused
    assert len(list(iter_jsonl(big))) == 100
    long = _text(tmp_path / "long.jsonl", "{}\n" + '"' + "x" * 60 + '"\n')
    with pytest.raises(InputError, match=rf"^{long}:2: a line longer than an input may be"):
        list(iter_jsonl(long))


def test_a_lone_surrogate_escape_is_refused_where_it_is_read(tmp_path: Path) -> None:
    """``"\\ud800"`` parsed into a string no UTF-8 file can hold: the run failed when it wrote its
    records or manifest, ``unexpected UnicodeEncodeError`` (exit 1). A surrogate pair is text."""
    from gen.readers import read_yaml_model
    from gen.schemas.review import Rubric

    assert parse_json('"\\ud83d\\ude00"', "f:1") == "\U0001f600"
    assert parse_json('"\\\\ud800"', "f:1") == "\\ud800"  # an escaped backslash: no surrogate
    with pytest.raises(InputError, match=r"^f:1: a\[1\]: holds a lone UTF-16 surrogate escape"):
        parse_json('{"a": ["x", "\\ud800"]}', "f:1")
    with pytest.raises(InputError, match=r"^f:1: b: holds a lone UTF-16 surrogate"):
        parse_json('{"b": "\\udfff tail"}', "f:1")
    path = _text(
        tmp_path / "r.yaml",
        (PROMPTS / "review" / "mcq.yaml")
        .read_text(encoding="utf-8")
        .replace("name: ", 'name: "\\ud800" # ', 1),
    )
    with pytest.raises(InputError, match=rf"^{path}: name: holds a lone UTF-16 surrogate"):
        read_yaml_model(path, Rubric, "rubric")


def test_the_tagger_reads_a_text_longer_than_spacys_limit() -> None:
    """A 5 MB question stopped ``audit`` and ``bank add`` with spaCy's E088 (exit 1)."""
    from gen.gates import GateContext, run_gates
    from gen.tagging import TAG_MAX_CHARS, tags, warm

    text = "To open the door " + "and walk " * 600_000 + "to the car."
    assert len(text) > 5_000_000 > TAG_MAX_CHARS
    toks = tags(text)
    assert toks[0][0] == "To" and toks[-1][0] == "." and len(toks) < TAG_MAX_CHARS
    warm([text + " Again.", "Short."])
    failure = run_gates(text, GateContext(kind="goal"))
    assert failure is not None and failure.gate == "repetition"


FIXTURE_MCQ = FIXTURES / "audit" / "clean.jsonl"


def _hostile_setup(tmp: Path, case: str) -> list[str]:
    """The files of one hostile case in ``tmp``; the command's arguments."""
    import os

    if case == "dev_zero":
        return ["tom", "input=/dev/zero", "input_format=jsonl"]
    if case == "fifo":
        os.mkfifo(tmp / "rows.jsonl")
        return ["audit", "input=rows.jsonl", "embeddings=false"]
    if case == "fifo_in_a_folder":
        (tmp / "bank").mkdir()
        os.mkfifo(tmp / "bank" / "mcq.jsonl")
        return ["nocontext", "input=bank"]
    if case == "chain_input_climbs":
        _text(tmp / "chain.yaml", CHAIN.replace("rec/goals.jsonl", "rec/../../../etc/passwd"))
        return ["pipeline", "chain=chain.yaml"]
    if case == "lock_not_utf8":
        (tmp / "sc").mkdir()
        (tmp / "sc" / "MANIFEST.lock.json").write_bytes(b'{"schema_revision": "\xff"}\n')
        return ["scenarios", "action=verify", "input=sc"]
    if case == "lone_surrogate":
        _text(
            tmp / "mcq.jsonl",
            FIXTURE_MCQ.read_text(encoding="utf-8").replace("What is", "What\\ud800 is", 1),
        )
        return ["audit", "input=mcq.jsonl", "embeddings=false"]
    if case == "binary_prompt_conditions":
        (tmp / "pc.json").write_bytes(b"\xff\xfe\x00\x01binary")
        return ["scenarios", "n=1", "prompt_conditions=pc.json"]
    raise AssertionError(case)


HOSTILE_CASES = {
    "dev_zero": "input: /dev/zero: is a device, not a regular file",
    "fifo": "input: rows.jsonl: is a FIFO, not a regular file",
    "fifo_in_a_folder": "input: bank holds no MCQ file",  # a FIFO is no file: never opened
    "chain_input_climbs": "chain.yaml: step mcqs (distractors): inputs.input "
    "'rec/../../../etc/passwd' leaves its folder",
    "lock_not_utf8": "MANIFEST.lock.json:1: not UTF-8 text (byte 0xff at column 22",
    "lone_surrogate": "mcq.jsonl:1: question: holds a lone UTF-16 surrogate escape",
    "binary_prompt_conditions": "pc.json:1: not UTF-8 text (byte 0xff at column 1",
}


@pytest.mark.parametrize("case", list(HOSTILE_CASES))
def test_a_hostile_input_is_one_line_exit_2_within_seconds_and_writes_nothing_outside_the_run(
    run_gen, tmp_path: Path, case: str
) -> None:
    """Each was a traceback (the chain's ``..``, a non-UTF-8 lock), ``unexpected`` (exit 1: a lone
    surrogate, binary prompt_conditions, after the run folder was made), a read of /dev/zero into
    memory, or a hang (a FIFO)."""
    argv = _hostile_setup(tmp_path, case)
    before = tree(tmp_path)
    proc = run_gen(*argv, "progress=off", f"hydra.run.dir={tmp_path / 'run'}", timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert HOSTILE_CASES[case] in lines[0], lines[0]
    after = tree(tmp_path)
    changed = {
        k
        for k in before.keys() | after.keys()
        if before.get(k) != after.get(k) and not k.startswith("cache/")
    }
    assert all(k.startswith("run/") for k in changed), changed  # audit reads its input in the run
