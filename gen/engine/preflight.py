"""Before a run does any work: where it may be written (:func:`check_out_dir`: no bank's folder,
never its input) and whether the optional parts it uses are installed (:func:`preflight`). The
command line checks the folder before Hydra writes ``.hydra/``; :func:`gen.engine.runner.run_config`
checks both again for every run, the API's included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gen.engine.registry import REGISTRY
from gen.engine.runconfig import (
    CommonConfig,
)
from gen.errors import ConfigError
from gen.extras import LLAMA_CPP, need
from gen.llm import LLMConfig
from gen.llm.config import LlamaCppConfig, LlamaServerConfig, OpenAIConfig
from gen.paths import is_within, owning_bank


def input_runs(cfg: CommonConfig) -> list[Path]:
    """The run folders a run reads (``input=`` one or a list): an input that is a run folder, or
    the run folder an input file lies in."""
    given = cfg.input if isinstance(cfg.input, list) else [cfg.input]
    out = []
    for value in given:
        if isinstance(value, str) and (p := Path(value).expanduser()).exists():
            folder = p if p.is_dir() else p.parent
            if (folder / "manifest.json").is_file():
                out.append(folder)
    return out


def _llm_configs(value: Any) -> Iterator[LLMConfig]:
    """Every LLM config in a config (``llm``, per-stage models, a judge's panel...)."""
    if isinstance(value, LlamaCppConfig | OpenAIConfig | LlamaServerConfig):
        yield value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _llm_configs(getattr(value, name, None))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _llm_configs(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _llm_configs(v)


def preflight(name: str, cfg: CommonConfig) -> None:
    """Before any work: every optional part generator ``name`` says a run of ``cfg`` uses is
    installed, else :class:`~gen.extras.MissingExtra` (exit 2) names the extra to install."""
    uses = REGISTRY[name].uses_of(cfg)
    local = [c for c in _llm_configs(cfg) if isinstance(c, LlamaCppConfig)] if "llm" in uses else []
    if local:
        own = all(c.model_path is not None for c in local)  # a GGUF of one's own: no SmolLM2
        need(
            "local", f"{name} with llm=llama_cpp (the in-process model)", LLAMA_CPP if own else None
        )
    if "embedder" in uses and cfg.embedder.backend == "sentence_transformers":
        need(
            "embed", f"{name} with the in-process embedder (embedder.backend=sentence_transformers)"
        )
    if "search" in uses:
        need("search", f"{name}'s search over embeddings")
    if "text" in uses:
        need("text", f"{name}'s text gates")
    if "video" in uses:
        need("video", f"{name} (video decoding)")


def check_out_dir(
    out: Path, cfg: CommonConfig, *, key: str = "out", shown: str | None = None
) -> None:
    """A run may be written at ``out``: a folder (or a place for one) that no bank owns and that
    is none of the run folders it reads nor inside one. Checked before anything is written
    (on the command line, before Hydra makes ``.hydra/``): a ConfigError naming ``key`` and the
    folder as the user gave it (``shown``)."""
    shown = shown or str(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{key}: {shown} is a file; a run is written into a folder")
    if (bank := owning_bank(out)) is not None:
        raise ConfigError(
            f"{key}: {shown} is inside the bank {bank} (its folders are written only by bank add; "
            "anything else there is drift); give the run a folder outside the bank"
        )
    for folder in input_runs(cfg):
        if is_within(folder, out):
            same = is_within(out, folder)
            raise ConfigError(
                f"{key}: {shown} is {'its input' if same else 'inside its input'} {folder}; a run "
                "never writes into its input: give it a folder of its own"
            )
