"""Counters of one run's LLM use (calls, cache hits, tokens, generation time, prompt reuse) and
what they cost at a price: the manifest's ``llm_usage`` and the progress line's tokens/s."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

SUMMED = (
    "calls",
    "cache_hits",
    "prompt_tokens",
    "completion_tokens",
    "cached_completion_tokens",
    "generation_seconds",
    "prompt_tokens_reported",
    "prompt_tokens_reused",
    "batched_calls",
    "batched_prompt_tokens",
    "batched_completion_tokens",
)
"""The counts of :meth:`Usage.as_dict` that add up across shards (always numbers)."""


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
        self.prompt_tokens_reported = 0
        self.prompt_tokens_reused = 0
        self.batched_calls = 0
        self.batched_prompt_tokens = 0
        self.batched_completion_tokens = 0

    def add(
        self,
        *,
        hit: bool,
        prompt: int,
        completion: int,
        seconds: float,
        reused: int | None = None,
        batched: bool = False,
    ) -> None:
        """One call; ``reused``: the prompt tokens the backend did not evaluate (a prefix it had
        cached), when it says so; ``batched``: answered by a batch (:mod:`gen.llm.batch`), at
        the batch rate."""
        with self._lock:
            self.calls += 1
            if batched and not hit:
                self.batched_calls += 1
                self.batched_prompt_tokens += prompt
                self.batched_completion_tokens += completion
            if hit:
                self.cache_hits += 1
                self.cached_completion_tokens += completion
            else:
                self.prompt_tokens += prompt
                self.completion_tokens += completion
                self.generation_seconds += seconds
                if reused is not None:
                    self.prompt_tokens_reported += prompt
                    self.prompt_tokens_reused += min(reused, prompt)

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.generation_seconds if self.generation_seconds else 0.0

    def cost(self, price: Any, batch_discount: float = 1.0) -> float | None:
        """What the calls made (not the cache's replays) cost at ``price`` (a
        :class:`gen.llm.config. Price`, per million input and output tokens), the batched ones
        at ``batch_discount`` times it; None without a price."""
        if price is None:
            return None
        full = (self.prompt_tokens * price.input + self.completion_tokens * price.output) / 1e6
        batched = (
            self.batched_prompt_tokens * price.input + self.batched_completion_tokens * price.output
        ) / 1e6
        return full - batched * (1.0 - batch_discount)

    @classmethod
    def total(cls, dicts: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
        """The sum of several runs' :meth:`as_dict` (shards of one run)."""
        u = cls()
        for d in dicts:
            if d:
                for key in SUMMED:
                    setattr(u, key, getattr(u, key) + d.get(key, 0))
        return u.as_dict()

    def as_dict(self) -> dict[str, Any]:
        batched = (
            {
                "batched_calls": self.batched_calls,
                "batched_prompt_tokens": self.batched_prompt_tokens,
                "batched_completion_tokens": self.batched_completion_tokens,
            }
            if self.batched_calls
            else {}
        )
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_completion_tokens": self.cached_completion_tokens,
            "generation_seconds": round(self.generation_seconds, 3),
            "completion_tokens_per_second": round(self.tokens_per_second, 2),
            # prompt reuse, over the calls whose backend reports it (in process, llama-server,
            # vLLM with --enable-prompt-tokens-details): tokens sent, not evaluated, evaluated
            "prompt_tokens_reported": self.prompt_tokens_reported,
            "prompt_tokens_reused": self.prompt_tokens_reused,
            "prompt_tokens_evaluated": (
                self.prompt_tokens_reported - self.prompt_tokens_reused
                if self.prompt_tokens_reported
                else None
            ),
            "prompt_reuse_ratio": (
                round(self.prompt_tokens_reused / self.prompt_tokens_reported, 4)
                if self.prompt_tokens_reported
                else None
            ),
            **batched,
        }
