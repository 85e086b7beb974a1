"""Records of ``pipeline``: one per step of a chain."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class StepRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str
    """The step's name in the chain (its folder name)."""
    generator: str
    """The generator the step ran."""
    folder: str
    """The step's run folder, relative to the pipeline's."""
    status: Literal["ran", "skipped", "not_run"]
    """``skipped``: a finished run of the same config was already there (a rerun);
    ``not_run``: an earlier step stopped the chain."""
    exit_code: int | None
    """The step's exit code (1 for a sharded step whose shards did not all finish); null when not
    run."""
    counts: dict[str, Any]
    """The step's manifest ``counts`` (a sharded step that failed: ``shards`` and
    ``shards_finished``); ``{}`` when not run."""
