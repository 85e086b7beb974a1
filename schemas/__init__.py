"""Schemas of every record the toolkit writes. Output models end in Record/Bundle."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]


class Reject(BaseModel):
    """A record that was not produced, and why. accepted + rejected = requested."""

    model_config = ConfigDict(extra="forbid")

    record_id: str
    index: int
    stage: str
    """Where it failed (for example ``bio``, ``app.Calendar``, ``validate``)."""
    reason: str
    """A typed reason: truncated, invalid_output, backend_error, contradiction, too_few_items…"""
    detail: str = ""
    raw: str | None = None
    """The last raw LLM output, when there was one."""
