"""The tom generator's options: TomConfig, its stages' models (TomStages) and the default filter
keywords."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from gen.engine.runner import CommonConfig
from gen.engine.stages import StageConfig, StagesConfig
from gen.formats.timelines import parse_time
from gen.text.gates import Language

DEFAULT_KEYWORDS = [
    "demonstrate",
    "demonstration",
    "tutorial",
    "class",
    "train for",
    "compete",
    "competition",
    "technique",
]
"""EgoToM appendix 7: wrong goals the generator collapsed to (…for a tutorial/class/competition)."""


class TomStages(StagesConfig):
    analysis: StageConfig = Field(default_factory=StageConfig)
    """The clip's analysis: its goal, beliefs and actions (``stages.analysis.llm=…``)."""
    counterfactuals: StageConfig = Field(default_factory=StageConfig)
    """The wrong goals, beliefs and actions."""
    simplification: StageConfig = Field(default_factory=StageConfig)
    """Shortening the statements to EgoToM's length."""


class TomConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Clips to process from the start of the input; null = every clip in the input."""
    input_format: Literal["auto", "ego4d", "egotom_csv", "jsonl"] = "auto"
    """Input layout: Ego4D narration.json, EgoToM CSV(s), or JSONL timelines (auto: by name)."""
    passes: list[str] = Field(
        default_factory=lambda: ["narration_pass_1", "narration_pass_2"], min_length=1
    )
    """Ego4D narration passes to cut clips from (EgoToM used both)."""
    min_duration: float = Field(300.0, ge=0)
    """Selection: a clip lasts at least this many seconds (0 disables)."""
    min_lines: int = Field(60, ge=0)
    """Selection: at least this many narration lines."""
    max_lines: int | None = Field(180, ge=1)
    """Selection: at most this many narration lines (null: no maximum)."""
    exclude_tags: list[str] = Field(default_factory=lambda: ["#unsure", "#unknown"])
    """Selection: a clip with a line holding one of these tags is excluded ([] disables)."""
    min_c_share: float = Field(0.6, ge=0, le=1)
    """Selection: at least this share of the lines are about C (``#C``)."""
    min_future_lines: int = Field(3, ge=1)
    """The transition needs this many lines at and after it (the next actions come from them)."""
    time_window: tuple[float | str, float | str] | None = (150.0, 270.0)
    """Filter: the transition lies in this window from the clip start (seconds or 2m30s); null
    disables."""
    restrict_to_window: bool = True
    """Offer the model only transition lines inside time_window; false: filter after analysis (the
    paper's order)."""
    keywords: list[str] = Field(default_factory=lambda: list(DEFAULT_KEYWORDS))
    """Filter: wrong goals containing one of these (at a word start, any case) are dropped."""
    length_ratio: float | None = Field(1.4, gt=1)
    """Filter: drop when the truth is this many times longer than every wrong choice or vice versa
    (null: off)."""
    length_unit: Literal["chars", "words"] = "chars"
    """What the length rule measures."""
    max_similarity: float | None = Field(0.94, gt=0, le=1)
    """Filter: drop when two choices exceed this cosine under the embedder; null disables."""
    simplify: bool = True
    """Run stage 5 (rewrite alternative action statements in narration style)."""
    stages: TomStages = Field(default_factory=TomStages)
    """A model per stage: ``stages.<analysis|counterfactuals|simplification>.llm=<preset or
    fields>``."""
    attempts: int = Field(3, ge=1, le=10)
    """Generations per stage (fresh seed) when the output fails code's checks (the shared text
    gates of gen.text.gates, then tom's own); formerly ``stage_attempts``."""
    renamed: ClassVar[dict[str, str]] = {"stage_attempts": "attempts"}
    language: Language = "en"
    """The language the statements must be in (the text gates' language check)."""
    analysis_tokens: int = Field(192, ge=32)
    """Completion cap of the narration-analysis call."""
    goals_tokens: int = Field(128, ge=32)
    """Completion cap of the counterfactual-goals call."""
    beliefs_actions_tokens: int = Field(320, ge=32)
    """Completion cap of the counterfactual belief/action call."""
    simplify_tokens: int = Field(160, ge=32)
    """Completion cap of the simplification call."""
    export_csv: bool = True
    """Also write egotom_{goal,belief,actions}_shuffled.csv (EgoToM's columns)."""

    @field_validator("time_window")
    @classmethod
    def _window(cls, v: tuple[Any, Any] | None) -> tuple[float, float] | None:
        if v is None:
            return None
        lo, hi = (parse_time(x) for x in v)
        if lo is None or hi is None or hi <= lo:
            raise ValueError("time_window must be [start, end] with start < end (seconds or 2m30s)")
        return lo, hi

    @field_validator("keywords", "exclude_tags")
    @classmethod
    def _strip(cls, v: list[str]) -> list[str]:
        return [x.strip() for x in v if x.strip()]

    @model_validator(mode="after")
    def _lines(self) -> TomConfig:
        if self.max_lines is not None and self.max_lines < self.min_lines:
            raise ValueError("max_lines must be >= min_lines")
        return self

    @property
    def window(self) -> tuple[float, float] | None:
        return self.time_window  # type: ignore[return-value]
