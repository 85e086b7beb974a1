"""Schemas of every record the toolkit writes. Output models end in Record/Bundle."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]


def plain_text(hi: int, lo: int = 1) -> str:
    """The pattern of a string of ``lo``..``hi`` characters without control characters, quotes or
    backslashes (a pattern: llama.cpp's grammar for a plain string lets a raw newline into the
    JSON). A pattern, not a type, so the capped types are written as aliases a checker reads."""
    return rf'^[^\x00-\x1f"\\]{{{lo},{hi}}}$'


class Reject(BaseModel):
    """A record that was not produced, and why. accepted + rejected = requested."""

    model_config = ConfigDict(extra="forbid")

    record_id: str
    """The id the record would have had (a bundle or item id), or the input's id it concerns."""
    index: int
    """The run index it was made for (0-based, one of ``ctx.indices()``: its seeds derive from
    it)."""
    stage: str
    """Where it failed (for example ``bio``, ``app.Calendar``, ``validate``)."""
    reason: str
    """A typed reason: truncated, invalid_output, backend_error, contradiction, too_few_items…"""
    detail: str = ""
    """One line on what went wrong (the failed check's numbers, the parse error); empty when the
    reason says it all."""
    raw: str | None = None
    """The last raw LLM output, when there was one."""
