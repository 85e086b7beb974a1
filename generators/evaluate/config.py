"""The evaluate generator's options (EvaluateConfig), its name and its prompt templates."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gen.engine.panel import JudgeOptions

NAME = "evaluate"
TURN = "evaluate/turn.jinja"
MCQ_PROMPT = "evaluate/mcq.jinja"
MCQ_MULTI_PROMPT = "evaluate/mcq_multi.jinja"


class EvaluateConfig(JudgeOptions):
    mode: Literal["auto", "scenarios", "mcq"] = "auto"
    """auto: a scenarios.jsonl (or a scenarios run) is a scenario bank, anything else an MCQ
    bank."""
    condition: list[str] = Field(default_factory=lambda: ["baseline"])
    """Scenarios: the prompt conditions to run (names in prompt_conditions.json)."""
    prompt_conditions: str | None = None
    """Scenarios: the benchmark's prompt_conditions.json (null:
    ../shared/data/context_bench/prompt_conditions.json when present, else required)."""
    trials: int = Field(5, ge=1, le=1000)
    """Scenarios: seeded trials per scenario and condition (the spec's 5)."""
    repair_style: Literal["named", "deictic"] = "named"
    """Scenarios: the repair prompt after a turn-2 miss (deictic falls back to named where the
    scenario has none)."""
    no_camera: bool = False
    """Scenarios: the camera ablation (the benchmark's --no-camera): the candidate gets no [Camera:
    …] block, the pre-conversation frame included; the judge still sees the frames."""
    max_tokens: int = Field(256, ge=8, le=32768)
    """Scenarios: reply cap of each candidate turn."""
    mcq_temperature: float = Field(0.0, ge=0, le=2)
    """MCQ: sampling temperature of the candidate's answers (0: greedy)."""
    mcq_tokens: int = Field(48, ge=1, le=4096)
    """MCQ: answer length cap in tokens."""
    limit: int | None = Field(None, ge=1)
    """Evaluate only the first k scenarios or items (null: all)."""

    @field_validator("condition", mode="before")
    @classmethod
    def _one_condition(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> EvaluateConfig:
        if self.num_shards != 1:
            raise ValueError(
                "evaluate runs in one process (num_shards=1): the judge sub-runs need every reply"
            )
        if not self.condition or len(set(self.condition)) != len(self.condition):
            raise ValueError("condition must name at least one prompt condition, each once")
        return self
