"""The Wearable Assistant Context Bench's scenario format, as every room reads it.

``gen scenarios`` writes scenario banks in the benchmark's released format (its lockfile
``MANIFEST.lock.json``); ``audit``, ``bank``, ``judge`` and ``evaluate`` read them. The reading
(:func:`scenario_file`, :func:`read_rows` for the audit's own checks, :func:`load` validated),
the lockfile's names and the context judge's identity live here; the benchmark's authoring rules
as pure functions in :mod:`gen.contextbench.rules` (their text and word-pattern checks in
:mod:`gen.contextbench.wording`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gen.errors import GenError, InputError, MissingInputError
from gen.readers import iter_jsonl, validated
from gen.schemas.scenarios import ScenarioRecord

RECORDS = "scenarios.jsonl"
"""A scenarios run's records: the bank in the released format."""
SCHEMA_REVISION = 1
"""The released scenario format's ``SCHEMA_REVISION`` (the one gen writes)."""
LOCK = "MANIFEST.lock.json"
CHECKS_FILE = "scenario_checks.jsonl"
PROMPT_CONDITIONS = "prompt_conditions.json"
JUDGE_PROMPT_VERSION = "context-judge-1"
"""Bumped whenever ``judge/context.jinja`` changes meaning; hashed with the template into the run
manifest and the scenario bank's lockfile."""
JUDGE_TEMPLATE = "judge/context.jinja"
SCENARIO_KEYS = ("scenario_id", "change_type", "target_context", "turn_2_user")
"""The fields by which a JSONL file is known as a scenario bank in the released schema (no
roles file needed): ``audit`` and ``bank add`` read such a file as scenarios."""


def scenario_file(path: Path) -> Path:
    """The bank's file: ``path`` itself, or the ``scenarios.jsonl`` of a run folder."""
    file = path / RECORDS if path.is_dir() else path
    if not file.is_file():
        raise MissingInputError(
            f"input: {path}: no {RECORDS} there (expected a scenario bank file or run folder)"
        )
    return file


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Scenarios as they are (the audit checks their schema and rules itself); a row that is not
    an object with a string ``scenario_id`` is an InputError naming file and line."""
    file = scenario_file(path)
    rows = []
    for lineno, row in iter_jsonl(file):
        if not isinstance(row, dict) or not isinstance(row.get("scenario_id"), str):
            raise InputError(
                f"{file}:{lineno}: scenario_id: a scenario object with a string scenario_id is "
                "required"
            )
        rows.append(row)
    return rows


def load(path: Path) -> dict[str, ScenarioRecord]:
    """Scenarios by id, each validated as the released format; a bad row is
    ``file:line: field: reason``, a repeated id is refused."""
    file = scenario_file(path)
    out: dict[str, ScenarioRecord] = {}
    for lineno, row in iter_jsonl(file):
        s = validated(ScenarioRecord, row, f"{file}:{lineno}", objects_only=False)
        if s.scenario_id in out:
            raise InputError(f"{file}:{lineno}: scenario_id: {s.scenario_id!r} appears twice")
        out[s.scenario_id] = s
    return out


def is_scenario_bank(path: Path) -> bool:
    """Whether ``path`` is a scenarios run folder (it holds ``scenarios.jsonl``) or a JSONL file
    whose first record carries :data:`SCENARIO_KEYS`. A file whose first line does not parse is
    not one: its usual reader names the fault."""
    if path.is_dir():
        return (path / RECORDS).is_file()
    if path.suffix != ".jsonl" or not path.is_file():
        return False
    try:
        for _, row in iter_jsonl(path):
            return isinstance(row, dict) and all(k in row for k in SCENARIO_KEYS)
    except GenError:
        return False
    return False
