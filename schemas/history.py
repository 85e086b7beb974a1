"""The longitudinal history bank (WAGIBench §2.4, appendix G.3): observations in, one history
record per test observation out."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from gen.schemas.distractors import ContextWindow, CueEntry, Goal

Str = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]


class Observation(BaseModel):
    """One recording: who, where, which script, when, and what the model is shown of it."""

    model_config = ConfigDict(extra="ignore")

    client_tag: Str
    """The recording's id (WAGIBench joins on it with the scenario shortname)."""
    scenario: Str
    """The scenario shortname of the recording (``meta.scenario.shortname``)."""
    participant: Str
    """Who recorded it (a persona's ``persona_id`` when synthesized); a history stays within one
    participant."""
    environment: Str
    """Where it was recorded; a history stays within one environment."""
    script: Str
    """The script recorded; recordings of one script are each other's positive support."""
    longitudinal: bool
    """The script is one a user would repeat (WAGIBench's longitudinal set L)."""
    recorded_at: dt.datetime
    """When it was recorded; supports are recorded strictly earlier."""
    world_state: str | dict[str, Any]
    """The recording as the prompt shows it (a caption, or a context dict)."""
    structured_goal: Goal | None = None
    """The recording's goal: one of the 10 structured digital actions (null: not annotated, as a
    video captioned by ``socratic`` without one; its support then shows no past action)."""
    context_window: ContextWindow
    """The recording's context window, carried to its goal bank row."""
    transcription: str | None = None
    """What was said during the recording, when known; the history's world state holds it as
    text."""
    cues: list[CueEntry] | None = None
    """The recording's cues (vision, audio, digital, longitudinal), passed to its goal bank row."""

    @field_validator("recorded_at")
    @classmethod
    def _naive_utc(cls, v: dt.datetime) -> dt.datetime:
        """Times with a zone are compared in UTC; times without one are taken as they are."""
        if v.tzinfo is not None:
            return v.astimezone(dt.UTC).replace(tzinfo=None)
        return v

    @property
    def key(self) -> tuple[str, str]:
        return self.client_tag, self.scenario


HistoryType = Literal["setup", "negative"]


class Support(BaseModel):
    """One past recording in an observation's history bank, and why it was chosen."""

    model_config = ConfigDict(extra="forbid")

    client_tag: str
    """The past recording's ``client_tag``."""
    scenario: str
    """The past recording's scenario shortname."""
    participant: str
    """The participant, the test observation's own."""
    environment: str
    """The environment, the test observation's own."""
    script: str
    """The script the past recording is of (the observation's for ``setup``, another for
    ``negative``)."""
    history_type: HistoryType
    """``setup``: the positive support (same script); ``negative``: another script."""
    recorded_at: str
    """When it was recorded (ISO ``YYYY-MM-DD HH:MM:SS``, UTC when the input had a zone), strictly
    before the observation."""
    why: str
    """Which rule chose it (same participant and environment, earlier, same/other script)."""


class HistoryRecord(BaseModel):
    """The history bank of one test observation."""

    model_config = ConfigDict(extra="forbid")

    client_tag: str
    """The test observation's ``client_tag`` (WAGIBench joins on it with ``scenario``)."""
    scenario: str
    """The test observation's scenario shortname (``meta.scenario.shortname``)."""
    participant: str
    """Who recorded it; supports are this participant's earlier recordings."""
    environment: str
    """Where it was recorded; supports are from the same environment."""
    script: str
    """The script recorded; a support of the same script is the positive (``setup``)."""
    longitudinal: bool
    """The script is one a user repeats (WAGIBench's set L): the bank then holds up to ``positives``
    same-script supports."""
    recorded_at: str
    """When it was recorded (ISO ``YYYY-MM-DD HH:MM:SS``, UTC when the input had a zone)."""
    supports: list[Support]
    """In the seeded order the bank is shown in (WAGIBench shuffles it)."""
    eligible: dict[str, int] = Field(default_factory=dict)
    """How many earlier recordings of the participant in the environment there were: ``same_script``
    and ``other_script``."""
    shortfalls: list[Literal["fewer_supports", "no_positive"]]
    """What the bank lacks: fewer than ``supports`` eligible recordings; a longitudinal
    observation with no earlier recording of its script."""
