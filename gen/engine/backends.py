"""The loaded models of one command (Backends): each LLM and embedder configuration loaded once,
shared by a run and its sub-runs, and closed once."""

from __future__ import annotations

import json
import threading
from typing import Any

from gen.engine.schedule import Helpers
from gen.llm import Cache, LanguageModel, LLMConfig
from gen.llm.embed import EMBEDDER_CONFIGS, EmbedderConfig, ServerEmbedderConfig


class Backends:
    """The loaded LLMs and embedders of one command, shared by a run and its sub-runs: a model
    is loaded once per configuration, and closed (a managed server stopped) once, by the run
    that made this object."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._llms: dict[str, LanguageModel] = {}
        self._embedders: dict[str, Any] = {}
        self._failed: dict[str, BaseException] = {}
        """Configurations whose loading failed, with the error: every later caller gets it at
        once (a run's many workers would otherwise each wait out the same preflight)."""
        self.helpers = Helpers()
        """The threads that run nested maps' items (:mod:`gen.engine.schedule`), one set per
        command."""

    def llm(self, cfg: LLMConfig, cache: Cache | None) -> LanguageModel:
        from gen.llm import make_llm

        key = json.dumps(
            [cfg.model_dump(mode="json"), str(cache.path) if cache else None], sort_keys=True
        )
        with self._lock:
            if key in self._failed:
                raise self._failed[key]
            if key not in self._llms:
                try:
                    self._llms[key] = make_llm(cfg, cache)
                except Exception as e:
                    self._failed[key] = e
                    raise
            return self._llms[key]

    def embedder(self, cfg: EmbedderConfig | ServerEmbedderConfig, cache_dir: str | None) -> Any:
        from gen.llm.embed import make_embedder

        key = json.dumps([cfg.model_dump(mode="json"), cache_dir], sort_keys=True)
        with self._lock:
            if key in self._failed:
                raise self._failed[key]
            if key not in self._embedders:
                try:
                    self._embedders[key] = make_embedder(cfg, cache_dir)
                except Exception as e:
                    self._failed[key] = e
                    raise
            return self._embedders[key]

    def put(
        self,
        cfg: LLMConfig | EmbedderConfig | ServerEmbedderConfig,
        key_extra: str | None,
        backend: Any,
    ) -> None:
        """Register a backend made elsewhere (a test's scripted LLM) for this configuration, so
        sub-runs asking for it get it too."""
        key = json.dumps([cfg.model_dump(mode="json"), key_extra], sort_keys=True)
        with self._lock:
            (self._embedders if isinstance(cfg, EMBEDDER_CONFIGS) else self._llms)[key] = backend

    def close(self) -> None:
        with self._lock:
            llms, self._llms = list(self._llms.values()), {}
            embedders, self._embedders = list(self._embedders.values()), {}
        self.helpers.close()
        for llm in [*llms, *embedders]:
            close = getattr(llm, "close", None)
            if close is not None:
                close()
