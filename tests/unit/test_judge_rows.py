"""``judge n=``: the rows judged, from the start, for every kind (null: every row); its summary
counts only those. ``n`` was listed by ``--help`` as "Records to produce" and ignored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import read_jsonl
from judge_runs import FIX, judge_run, mcq_bank, validity_script, wagibench_script

KINDS: dict[str, tuple[dict[str, Any], Any, int]] = {
    "distractor_validity": ({}, validity_script, 4),
    "wagibench": (
        {"input": str(FIX / "predictions.jsonl"), "variant": ["reference"]},
        wagibench_script,
        3,
    ),
    "context": (
        {"input": str(FIX / "scenarios.jsonl"), "responses": str(FIX / "responses.jsonl")},
        lambda messages, seed: '{"label": "current", "rationale": "It answers the new state."}',
        None,
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_n_judges_the_first_rows_only(tmp_path: Path, kind: str) -> None:
    options, script, every = KINDS[kind]
    if kind == "distractor_validity":
        options = {"input": str(mcq_bank(tmp_path))}
    result, _, folder = judge_run(tmp_path, script, kind=kind, out="all", **options)
    rows = read_jsonl(folder / "judge.jsonl") + read_jsonl(folder / "rejects.jsonl")
    assert every is None or len(rows) == every
    assert len(rows) >= 3 and result.requested == len(rows)
    result, _, folder = judge_run(tmp_path, script, kind=kind, out="two", n=2, **options)
    two = read_jsonl(folder / "judge.jsonl") + read_jsonl(folder / "rejects.jsonl")
    assert result.requested == 2 and len(two) == 2
    first = read_jsonl(tmp_path / "all" / "judge.jsonl")
    kept = read_jsonl(folder / "judge.jsonl")
    assert kept == [r for r in first if r in kept] and kept == first[: len(kept)]
