"""The LLM boundary and its backends.

- :mod:`gen.llm.config`: the ``llm=`` configs (one per backend);
- :mod:`gen.llm.cache`: the per-call SQLite cache;
- :mod:`gen.llm.boundary`: :class:`LLM` (structured / complete / loglik through instructor and
  the cache) and :class:`LanguageModel`, what generators may use of it;
- :mod:`gen.llm.llama_cpp`, :mod:`gen.llm.openai_compat`, :mod:`gen.llm.llama_server`: the
  backends; :mod:`gen.llm.fake`: the scripted backend of unit tests.

:func:`make_llm` builds the configured backend. Heavy imports (llama_cpp, openai, instructor)
happen only when a model is really made.
"""

from __future__ import annotations

from gen.llm.boundary import LLM, LanguageModel, LogLik, Message, Prompt, Usage
from gen.llm.cache import Cache, sha256_file
from gen.llm.config import LlamaCppConfig, LlamaServerConfig, LLMConfig, OpenAIConfig
from gen.llm.fake import scripted_llm
from gen.llm.llama_cpp import EMBEDDED_GGUF, embedded_gguf, make_llama_cpp_llm
from gen.llm.llama_server import make_server_llm
from gen.llm.openai_compat import make_openai_llm

__all__ = [
    "EMBEDDED_GGUF", "LLM", "Cache", "LLMConfig", "LanguageModel", "LlamaCppConfig",
    "LlamaServerConfig", "LogLik", "Message", "OpenAIConfig", "Prompt", "Usage", "embedded_gguf",
    "make_llm", "scripted_llm", "sha256_file",
]


def make_llm(cfg: LlamaCppConfig | OpenAIConfig | LlamaServerConfig, cache: Cache | None = None) -> LLM:
    """Build the configured backend. Heavy imports and model loads happen here, once."""
    if isinstance(cfg, LlamaServerConfig):
        return make_server_llm(cfg, cache)
    if isinstance(cfg, LlamaCppConfig):
        return make_llama_cpp_llm(cfg, cache)
    return make_openai_llm(cfg, cache)
