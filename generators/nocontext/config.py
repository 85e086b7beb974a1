"""The nocontext generator's options (NocontextConfig) and its removal rules."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gen.engine.config import ModelChoice
from gen.engine.runner import CommonConfig

RULES = ("max_correct", "panel")


class NocontextConfig(CommonConfig):
    models: list[ModelChoice] = Field(default_factory=list)
    """Screening models: conf/llm names ([smollm2]) or llm dicts ([{backend: openai, model: x}]); []
    = llm=."""
    labels: list[str] = Field(default_factory=list)
    """Model names in the outputs, one per model ([] = GGUF file stem or served model name)."""
    shuffles: int = Field(3, ge=1, le=26)
    """Seeded orders of the options each model answers (EgoToM: 3)."""
    mode: Literal["generate", "loglik"] = "generate"
    """generate: read a letter from a free-text answer; loglik: the most likely answer line."""
    prompt: Literal["full", "choices_only"] = "full"
    """full: question and lettered options; choices_only: the options without the question."""
    max_correct: int | None = Field(2, ge=0)
    """Remove an item when any model is right on more than this many shuffles (null: off)."""
    panel_k: int | None = Field(None, ge=0)
    """Remove an item when more than this many models are right on most shuffles (null: off)."""
    temperature: float = Field(0.0, ge=0, le=2)
    """generate: sampling temperature of the answers (0: greedy)."""
    max_tokens: int = Field(48, ge=1, le=4096)
    """generate: answer length cap in tokens."""
    norm: Literal["chars", "tokens", "none"] = "chars"
    """loglik: divide log-likelihoods by characters (acc_norm), tokens, or nothing (acc)."""
    chat_template: bool = True
    """loglik: score inside the GGUF's chat template; false scores plain text (servers)."""
    sample: int | None = Field(None, ge=1)
    """Screen a seeded random subset of this many items (null: all; n is set from the input)."""

    @model_validator(mode="after")
    def _check(self) -> NocontextConfig:
        panel = self.models or [self.llm]
        if self.labels and len(self.labels) != len(panel):
            raise ValueError(f"labels: {len(self.labels)} given for {len(panel)} model(s)")
        if self.labels and len(set(self.labels)) != len(self.labels):
            raise ValueError("labels must be distinct")
        if self.max_correct is not None and self.max_correct >= self.shuffles:
            raise ValueError(
                f"max_correct={self.max_correct} can never be exceeded with "
                f"shuffles={self.shuffles}; use a smaller value or null"
            )
        if self.panel_k is not None and self.panel_k >= len(panel):
            raise ValueError(
                f"panel_k={self.panel_k} can never be exceeded by {len(panel)} "
                "model(s); use a smaller value or null"
            )
        if self.mode == "loglik":
            if any(m.backend not in ("llama_cpp", "openai") for m in panel):
                raise ValueError(
                    "loglik needs prompt log-probabilities: an in-process GGUF "
                    "(llm=smollm2 / llama_cpp) or a server that echoes them "
                    "(llm=openai, e.g. vLLM); llama-server does not"
                )
            if self.chat_template and any(m.backend == "openai" for m in panel):
                raise ValueError(
                    "loglik on an OpenAI-compatible server scores plain text: "
                    "add chat_template=false"
                )
        return self
