"""What the review tests share: the audit fixtures folder, a copied run folder, a review label,
the judge fixture's first scenario and a scenarios run folder holding it, and a one-row EgoToM goal
CSV folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from gen.schemas.review import ReviewLabel

FIX = Path(__file__).resolve().parent / "fixtures" / "audit"
ITEM = "0123456789abcdef0123456789abcdef"


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def label(reviewer: str = "alice", item: str = ITEM, **kw: Any) -> ReviewLabel:
    return ReviewLabel(
        item_id=item, reviewer=reviewer, time="2026-01-01T00:00:00Z", rubric="mcq-egotom", **kw
    )


SCENARIO: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent / "fixtures" / "judge" / "scenarios.jsonl")
    .read_text()
    .splitlines()[0]
)


def scenario_folder(folder: Path, *rows: dict[str, Any], **change: Any) -> Path:
    """A scenarios run folder: ``scenarios.jsonl`` holding ``rows`` (default: the judge fixture's
    first scenario with ``change``)."""
    folder.mkdir(parents=True)
    rows = rows or ({**SCENARIO, **change},)
    (folder / "scenarios.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def egotom_goal_folder(tmp_path: Path, narrations: str) -> Path:
    """A folder holding a one-row EgoToM goal CSV (clip v1~pass_1~0-9, answer "To rest")."""
    import polars as pl

    from gen.formats.mcq import egotom_columns

    folder = tmp_path / "egotom"
    folder.mkdir()
    row = {
        "vuid": "v1",
        "cuid": "v1~pass_1~0-9",
        "narrations_in_context": narrations,
        "gt_goal": "To rest",
        "goal_choice_a": "To cook",
        "goal_choice_b": "To rest",
        "goal_choice_c": "To leave",
        "clip_start_time": "0",
        "clip_end_time": "9",
    }
    pl.DataFrame([row], schema=dict.fromkeys(egotom_columns("goal"), pl.String)).write_csv(
        folder / "egotom_goal_shuffled.csv"
    )
    return folder
