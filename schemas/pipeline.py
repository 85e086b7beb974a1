"""Records of ``pipeline``: one per step of a chain."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class StepRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str
    generator: str
    folder: str
    """The step's run folder, relative to the pipeline's."""
    status: Literal["ran", "skipped", "not_run"]
    """``skipped``: a finished run of the same config was already there (a rerun);
    ``not_run``: an earlier step stopped the chain."""
    exit_code: int | None
    counts: dict[str, Any]
