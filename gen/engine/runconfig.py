"""What a run is given before it starts: the options every generator takes (CommonConfig, renamed
options), the plan of its record indices (Plan, PlanHook, shard_range), and the seeds and ids
derived per record (derive_seed, derive_id)."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gen.engine.stages import stage_models
from gen.errors import ConfigError, MissingInputError
from gen.llm import LlamaCppConfig, LLMConfig
from gen.llm.embed import EmbedderChoice, EmbedderConfig
from gen.paths import input_file

LOG = logging.getLogger("gen.engine.config")
SHARED_OPTIONS = ("seed", "llm", "embedder", "cache_dir", "progress", "progress_every")
"""What a run inside a run inherits from its parent unless given (:meth:`RunContext.config_for`)."""


def renamed_options(data: Any, renamed: dict[str, str]) -> Any:
    """Config data with each old option name moved to its new name, warned about on gen's log
    (the console shows it, and the run's ``gen.log``). The old name's value wins: on the command
    line the new name is always there, holding its default. An old name set to null (an optional
    option left unset, as ``persona_pool`` was) is dropped: it never stood for a value."""
    if not renamed or not isinstance(data, dict) or not renamed.keys() & data.keys():
        return data
    data = dict(data)
    for old, new in renamed.items():
        if old in data:
            value = data.pop(old)
            if value is None:
                continue
            LOG.warning(
                "option %s is now called %s; %s=%s is used as %s=%s (the old name goes in the "
                "next release)",
                old,
                new,
                old,
                value,
                new,
                value,
            )
            data[new] = value
    return data


class CommonConfig(BaseModel):
    """Options every generator takes (``seed=``, ``n=``, ``llm=``, ``embedder=``, ``input=``…)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    """Run seed; per-record seeds derive from (seed, generator, record index)."""
    n: int = Field(default=10, ge=1, le=10_000_000)
    """Records to produce."""
    input: str | None = None
    """A file or an earlier run folder to read from."""
    shard: int = Field(default=0, ge=0)
    """This process's slice of the record indices (0-based)."""
    num_shards: int = Field(default=1, ge=1)
    """How many disjoint contiguous slices the indices are cut into."""
    llm: LLMConfig = Field(default_factory=LlamaCppConfig)
    """The LLM backend (``llm=smollm2``, ``llm=llama_cpp``, ``llm=openai``,
    ``llm=llama_server``)."""
    embedder: EmbedderChoice = Field(default_factory=EmbedderConfig)
    """The sentence-embedding backend (``embedder=minilm`` in process, ``embedder=openai`` an
    OpenAI-compatible embeddings server)."""
    cache_dir: str | None = Field(
        default_factory=lambda: os.environ.get("GEN_CACHE_DIR", "~/.cache/gen"),
        json_schema_extra={"hydra": "${oc.env:GEN_CACHE_DIR,'~/.cache/gen'}"},
    )
    """Per-call LLM and embedding cache folder ($GEN_CACHE_DIR, else ~/.cache/gen; null disables
    caching)."""
    progress: Literal["auto", "rich", "plain", "off"] = "auto"
    """Progress display: rich on a terminal, an updating bar in a Jupyter notebook, periodic lines
    otherwise."""
    progress_every: float = Field(default=10.0, gt=0)
    """Seconds between plain progress lines."""

    renamed: ClassVar[dict[str, str]] = {}
    """Old option name -> its new name, accepted (with a warning) for one release."""

    @model_validator(mode="before")
    @classmethod
    def _renamed_options(cls, data: Any) -> Any:
        return renamed_options(data, cls.renamed)

    @model_validator(mode="before")
    @classmethod
    def _stage_models(cls, data: Any) -> Any:
        return stage_models(data)  # stages.<stage>.llm: a preset name or fields over llm

    @field_validator("cache_dir")
    @classmethod
    def _cache_dir_named(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError(
                "empty (the cache would be made in the current folder): give a folder, or null to "
                "disable caching (is GEN_CACHE_DIR set but empty?)"
            )
        return v

    @model_validator(mode="after")
    def _shard_in_range(self) -> CommonConfig:
        if self.shard >= self.num_shards:
            raise ValueError(f"shard must be < num_shards ({self.num_shards}), got {self.shard}")
        return self

    def input_path(self, required: bool = True) -> Path | None:
        """The ``input=`` path, checked to exist."""
        if self.input is None:
            if required:
                raise ConfigError("input= is required for this generator (a file or a run folder)")
            return None
        path = Path(self.input).expanduser()
        if not path.exists():
            raise MissingInputError(f"input: no such file or folder: {path}")
        return path if path.is_dir() else input_file(path, "input")


@dataclass(frozen=True)
class Plan:
    """How many record indices a run has, decided once per run, and what was read to know it."""

    n: int
    """Record indices of the whole run (all shards)."""
    data: Any = None
    """What the plan hook read (clips, a goal bank…), handed to the generator as ``ctx.plan.data``
    so the input is read once."""


PlanHook = Callable[[Any], Plan]
"""``(cfg) -> Plan``: a generator's sizing hook. It reads the input (once) and says how many
record indices the run has; config validation itself reads no files and sets nothing."""


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed from a run seed and any path of names and indices (stable everywhere)."""
    key = "/".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") & 0x7FFFFFFF


def derive_id(seed: int, *parts: object) -> str:
    """A 32-lowercase-hex id from the same inputs as :func:`derive_seed`."""
    key = "/".join(str(p) for p in ("id", seed, *parts)).encode()
    return hashlib.sha256(key).hexdigest()[:32]


def shard_range(n: int, shard: int, num_shards: int) -> range:
    """Contiguous slice ``shard`` of ``range(n)``; concatenating the slices in order gives
    range(n)."""
    return range(n * shard // num_shards, n * (shard + 1) // num_shards)
