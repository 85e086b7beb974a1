"""A model per stage: ``stages.<stage>.llm=<preset or fields>``.

A multi-stage generator (``tom``'s analysis and counterfactuals, ``digital``'s apps and cue…)
declares its stages as a :class:`StagesConfig` subclass, one :class:`StageConfig` field per stage
with a one-line docstring (``--help`` lists them). A stage's ``llm`` is

- null: the run's ``llm=``;
- a preset name: ``stages.analysis.llm=openai`` (``conf/``'s presets, as ``llm=`` takes them);
- fields over the run's ``llm``: ``stages.analysis.llm.model=llama-70b`` (same backend and
  server, another model), or a whole config with ``backend``.

The run loads each distinct model once (``ctx.stage_llm(name)``), and the manifest's ``stages``
names each stage's model, with its identity and hash under ``models``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from gen.llm import LLMConfig


class StageConfig(BaseModel):
    """One stage's settings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    llm: LLMConfig | None = None
    """This stage's model: a preset name, fields over the run's llm, or a config; null: the run's
    llm."""


class StagesConfig(BaseModel):
    """A generator's stages, one :class:`StageConfig` field each (subclassed per generator)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    def models(self) -> dict[str, Any]:
        """The stages that name a model of their own, with its config."""
        return {
            name: stage.llm
            for name, stage in self
            if isinstance(stage, StageConfig) and stage.llm is not None
        }


def stage_models(data: Any) -> Any:
    """A config's raw ``stages`` (before validation) with every stage's ``llm`` made a full
    config: a preset name looked up, fields laid over the run's ``llm``."""
    from gen.engine.config import llm_preset

    if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
        return data
    stages = {}
    for name, stage in data["stages"].items():
        llm = stage.get("llm") if isinstance(stage, dict) else None
        if isinstance(llm, str):
            try:
                llm = llm_preset(llm)
            except ValueError as e:
                raise ValueError(f"stages.{name}.llm: {str(e).removeprefix('models: ')}") from None
        elif isinstance(llm, dict) and "backend" not in llm:
            base = data.get("llm")
            if isinstance(base, BaseModel):
                base = base.model_dump()
            elif isinstance(base, str):
                base = llm_preset(base)
            elif not isinstance(base, dict):
                from gen.llm import LlamaCppConfig

                base = LlamaCppConfig().model_dump()
            llm = {**base, **llm}
        stages[name] = {**stage, "llm": llm} if isinstance(stage, dict) else stage
    return {**data, "stages": stages}
