"""The model boundary: the LLM, its backends, and the embedders.

- :mod:`gen.llm.config`: the ``llm=`` configs (one per backend);
- :mod:`gen.llm.cache`: the per-call SQLite cache (one WAL file, or per-process parts on a
  network filesystem);
- :mod:`gen.llm.http`: the servers' transport (a wall-clock deadline per call, bounded replies
  and retries); :mod:`gen.llm.secrets`: keys from the environment only;
- :mod:`gen.llm.boundary`: :class:`LLM` (structured / complete / loglik through instructor and
  the cache) and :class:`LanguageModel`, what generators may use of it;
- :mod:`gen.llm.llama_cpp`, :mod:`gen.llm.openai_compat`, :mod:`gen.llm.llama_server`: the
  backends; :mod:`gen.llm.fake`: the scripted backend of unit tests;
- :mod:`gen.llm.embed`: the embedding boundary (``embedder=`` configs, the embedders);
  :mod:`gen.llm.vectors`: exact search over their vectors (FAISS).

:func:`make_llm` builds the configured backend. Heavy imports (llama_cpp, openai, instructor)
happen only when a model is really made.
"""

from __future__ import annotations

from gen.llm.boundary import LLM, LanguageModel, LogLik, Message, Prompt, set_worker, worker
from gen.llm.cache import Cache, sha256_file
from gen.llm.config import LlamaCppConfig, LlamaServerConfig, LLMConfig, OpenAIConfig
from gen.llm.fake import scripted_llm
from gen.llm.llama_cpp import EMBEDDED_GGUF, embedded_gguf, make_llama_cpp_llm
from gen.llm.llama_server import make_server_llm
from gen.llm.openai_compat import make_openai_llm
from gen.llm.replies import split_think
from gen.llm.usage import Usage

__all__ = [
    "EMBEDDED_GGUF",
    "LLM",
    "Cache",
    "LLMConfig",
    "LanguageModel",
    "LlamaCppConfig",
    "LlamaServerConfig",
    "LogLik",
    "Message",
    "OpenAIConfig",
    "Prompt",
    "Usage",
    "embedded_gguf",
    "make_llm",
    "scripted_llm",
    "set_worker",
    "sha256_file",
    "split_think",
    "worker",
]


def make_llm(
    cfg: LlamaCppConfig | OpenAIConfig | LlamaServerConfig, cache: Cache | None = None
) -> LLM:
    """Build the configured backend. Heavy imports and model loads happen here, once."""
    if isinstance(cfg, LlamaServerConfig):
        llm = make_server_llm(cfg, cache)
    elif isinstance(cfg, LlamaCppConfig):
        llm = make_llama_cpp_llm(cfg, cache)
    else:
        llm = make_openai_llm(cfg, cache)
    llm.set_family(lambda: resolve_family(cfg, llm))
    return llm


def resolve_family(
    cfg: LlamaCppConfig | OpenAIConfig | LlamaServerConfig, llm: LLM
) -> tuple[str, str]:
    """(family, how it was found): ``llm.family=``, else the GGUF's metadata (the loaded model's,
    or a vocab-only read for a managed server), else the served model name."""
    from gen.llm.family import family_from_gguf, family_from_served, gguf_metadata

    if cfg.family:
        return cfg.family, "llm.family (config)"
    if isinstance(cfg, OpenAIConfig):
        return family_from_served(cfg.model)
    path = llm.identity["model_path"]
    metadata = getattr(llm, "gguf_metadata", None)
    return family_from_gguf(metadata if metadata is not None else gguf_metadata(path), path)
