"""What the LLM-boundary tests share: one request and the schemas it is parsed into."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

MESSAGES = [
    {"role": "system", "content": "Reply with JSON."},
    {"role": "user", "content": "A bio."},
]


class Bio(BaseModel):
    bio: str


class Item(BaseModel):
    title: str
    minutes: int = Field(ge=0)


def _structured(llm, schema=Bio, seed: int = 1, **kw):
    return llm.structured(MESSAGES, schema, seed=seed, **kw)


def one_line_exit_2(proc: Any) -> str:
    """The one stderr line of a command that exited 2 without a traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]
