"""Goals and the distractor MCQs built from them.

A goal is one of WAGIBench's 10 structured digital actions (appendix I.1), validated exactly:
the ``type`` picks the model, every field of that type is required, enums are closed and no
other field is allowed. A goal bank row (:class:`GoalRow`) carries a ``goal_id``, the ``group``
it came from (the script or scenario; goals of one group are paraphrases of each other), and
either a structured ``goal`` or a free ``text``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from gen.schemas import Hex32
from gen.schemas.mcq import MCQRecord

Str = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]
"""A required, non-blank field."""
MaybeStr = Annotated[str, StringConstraints(strip_whitespace=True, max_length=500)]
"""A required field that may be blank (a reminder or activity without a stated time)."""


class _Goal(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Search(_Goal):
    type: Literal["search"]
    source: Literal["world", "timeline"]
    """``world``: general knowledge (facts, news, weather); ``timeline``: the user's own history."""
    query_item: Str
    query: Str


class StoreMemory(_Goal):
    type: Literal["store_memory"]
    content: Str


class TemporalAttention(_Goal):
    type: Literal["temporal_attention"]
    action: Literal["set", "unset"]
    time: MaybeStr
    content: Str


class GuidedActivity(_Goal):
    type: Literal["guided_activity"]
    content: Str
    time: MaybeStr


class ControlEnvironment(_Goal):
    type: Literal["control_environment"]
    target: Str
    value: Str


class Communication(_Goal):
    type: Literal["communication"]
    action: Literal["message", "share"]
    target: Str
    content: Str


class Translate(_Goal):
    type: Literal["translate"]
    modality: Literal["text", "audio"]
    src_language: Str


class FindDirections(_Goal):
    type: Literal["find_directions"]
    to: Str


class Shop(_Goal):
    type: Literal["shop"]
    content: Str


class Entertain(_Goal):
    type: Literal["entertain"]
    modality: Literal["audio", "vision"]
    content: Str


Goal = Annotated[
    Search
    | StoreMemory
    | TemporalAttention
    | GuidedActivity
    | ControlEnvironment
    | Communication
    | Translate
    | FindDirections
    | Shop
    | Entertain,
    Field(discriminator="type"),
]
"""One structured goal; ``type`` selects the action."""
GOAL_TYPES: tuple[str, ...] = (
    "search",
    "store_memory",
    "temporal_attention",
    "guided_activity",
    "control_environment",
    "communication",
    "translate",
    "find_directions",
    "shop",
    "entertain",
)


class ContextWindow(BaseModel):
    # NaN / infinity would be written as bare NaN, which JSON readers other than Python's refuse
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    start_s: float | None = None
    end_s: float | None = None


CueModality = Literal["vision", "audio", "digital", "longitudinal"]


class CueEntry(BaseModel):
    """One cue of an observation in WAGIBench's ``x.cues`` shape: its modalities (WAGIBench buckets
    its scores by them) and its description (the judge's "cues" context)."""

    model_config = ConfigDict(extra="allow")

    modality: Annotated[list[CueModality], Field(min_length=1)]
    description: Annotated[list[Str], Field(min_length=1)]


class GoalRow(BaseModel):
    """One row of a goal bank (JSONL line or parquet row)."""

    model_config = ConfigDict(extra="forbid")

    goal_id: Str
    group: Str
    """The script or scenario the goal came from; goals of one group are paraphrases."""
    goal: Goal | None = None
    text: Str | None = None
    """A free-text goal, used as is, when there is no structured one."""
    client_tag: str | None = None
    """The observation (video) id for WAGIBench's layout; defaults to ``goal_id``."""
    context_window: ContextWindow | None = None
    """The observation's context window for WAGIBench's layout, when known."""
    cues: list[CueEntry] | None = None
    """The observation's cues (vision, audio, digital, longitudinal), carried into WAGIBench's
    ``x.cues`` with a digital run's cue."""

    @model_validator(mode="after")
    def _one_goal(self) -> GoalRow:
        if (self.goal is None) == (self.text is None):
            raise ValueError("give exactly one of goal (structured) or text (free)")
        return self


# --------------------------------------------------------------------------- MCQ records


class Distractor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goal_id: str
    """The distractor goal's ``goal_id`` in the goal bank."""
    group: str
    """That goal's group (it may be the reference's own unless ``exclude_same_group=true``)."""
    text: str
    """The goal as one sentence (its free text, or its type's template filled), as the option shows
    it."""
    option: int = Field(ge=0)
    """Where it landed among the shuffled options (0-based)."""
    similarity: float
    """Cosine similarity to the reference goal."""
    percentile: float
    """Percentile of that similarity among the reference's pool (after exclusions):
    exact, or estimated from the block's sample in the scalable mode (see ``percentile_mode``)."""
    similarity_to_others: list[float]
    """Cosine similarity to the other chosen distractors, in pick order (itself skipped)."""


class DistractorMCQ(MCQRecord):
    """One MCQ: a reference goal and N distractors from one percentile band of its pool."""

    item_id: Hex32
    reference_id: str
    """The reference goal's ``goal_id``."""
    mcq_index: int = Field(default=0, ge=0)
    """Which MCQ of this kind for this reference (``mcqs_per_kind`` > 1)."""
    band: tuple[float, float]
    """The percentile band the distractors were drawn from."""
    band_similarity: tuple[float, float]
    """The band's similarity thresholds for this reference (exact or estimated)."""
    band_candidates: int
    """Candidates in the band (in the block's sample, in the scalable mode)."""
    pool_size: int
    """Goals the percentiles are over after exclusions (the sample's, in the scalable mode)."""
    percentile_mode: Literal["exact", "estimated"]
    """``exact`` (full similarity rows) or ``estimated`` (the scalable mode's block sample:
    ``mode=``, ``exact_max``)."""
    distractors: list[Distractor]
    """In greedy pick order: the first drawn uniformly, each next the most diverse."""
