"""WAGIBench's goal bank (§3.1): one reference goal per row, structured by action type (or free
text), read and validated here for every room that samples goals (``distractors`` builds MCQs over
it, ``digital goals=`` conditions bundles on its goals, ``history`` draws past recordings from it);
:func:`verbalise` says a goal as one sentence, from its type's template."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gen.errors import InputError
from gen.paths import input_file
from gen.readers import iter_jsonl, parse_json, validated
from gen.schemas.distractors import GoalRow
from gen.templates import Prompts


@dataclass
class GoalBank:
    path: Path
    rows: list[GoalRow]
    cues: dict[str, list[dict[str, Any]]] | None = None
    """goal_id -> the cues of the goal's digital bundle (``digital=``); None without a digital
    run."""
    states: dict[str, str] | None = None
    """goal_id -> the key-only rendering of the goal's bundle (``digital=``)."""


def load_goals(path: Path) -> GoalBank:
    """Read and validate a goal bank; any bad row is an InputError naming file:line and field."""
    if path.suffix == ".parquet":
        raw = _parquet_rows(path)
    elif path.suffix == ".jsonl":
        raw = _jsonl_rows(path)
    else:
        raise InputError(f"input: {path}: expected a .jsonl or .parquet goal bank")
    rows: list[GoalRow] = []
    seen: dict[str, str] = {}
    for loc, obj in raw:
        row = validated(GoalRow, obj, loc, objects_only=False)
        if row.goal_id in seen:
            raise InputError(f"{loc}: goal_id {row.goal_id!r} repeats {seen[row.goal_id]}")
        seen[row.goal_id] = loc
        rows.append(row)
    return GoalBank(path, rows)


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    for lineno, row in iter_jsonl(path):
        yield f"{path}:{lineno}", row


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    import polars as pl

    input_file(path)
    try:
        df = pl.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - polars raises several types
        raise InputError(f"{path}: cannot read parquet ({str(e).splitlines()[0]})") from None
    for k, row in enumerate(df.iter_rows(named=True), 1):
        goal = row.get("goal")
        if isinstance(goal, str):  # a goal column of JSON strings
            row["goal"] = parse_json(goal, f"{path}:row {k}: goal")
        elif isinstance(goal, dict):  # a struct column holds every type's fields; drop the absent
            row["goal"] = {key: v for key, v in goal.items() if v is not None}
        yield f"{path}:row {k}", {key: v for key, v in row.items() if v is not None}


def verbalise(row: GoalRow, prompts: Prompts) -> str:
    """A goal as one sentence: its free text, or its type's template filled with its fields."""
    if row.goal is None:
        return " ".join((row.text or "").split())
    name = f"distractors/{row.goal.type}.jinja"
    if name not in prompts.used:
        prompts.hash(name)
    text = prompts.env.get_template(name).render(**row.goal.model_dump())
    return " ".join(text.split())


def goal_dict(row: GoalRow) -> dict[str, Any]:
    """The goal as WAGIBench writes it: the structured dict, or ``{"text": ...}``."""
    return row.goal.model_dump() if row.goal is not None else {"text": row.text}
