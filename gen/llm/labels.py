"""How outputs name a model: its GGUF file's stem, or the served model's name, made unique
within a panel (``name``, ``name#2``). Screening panels, judges and the evaluation runner label
their results this way."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any


def model_label(cfg: Any) -> str:
    """A model's default name in the outputs: its GGUF file stem, or the served model name."""
    if hasattr(cfg, "model_path"):  # a GGUF, in process or behind a managed llama-server
        if cfg.model_path:
            return Path(cfg.model_path).name.removesuffix(".gguf")
        from gen.llm import EMBEDDED_GGUF

        return EMBEDDED_GGUF.removesuffix(".gguf")
    return cfg.model


def unique_labels(labels: list[str]) -> list[str]:
    seen: Counter[str] = Counter()
    out = []
    for label in labels:
        seen[label] += 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out
