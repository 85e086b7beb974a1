"""What the distractor tests share: the generator's name, the 32-hex id pattern and a goal bank
of free-text goals written as JSON lines. Used by ``test_distractors.py`` and
``test_distractors_goals.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

NAME = "distractors"
HEX32 = re.compile(r"^[0-9a-f]{32}$")


def write_bank(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def text_bank(n: int, group_size: int = 1) -> list[dict[str, Any]]:
    return [
        {"goal_id": f"g{k:05d}", "group": f"grp{k // group_size}", "text": f"free goal number {k}"}
        for k in range(n)
    ]
