"""A scripted backend for unit tests only: canned outputs through the real parse path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gen.llm.boundary import LLM, LogLik, Message, Prompt
from gen.llm.cache import Cache
from gen.llm.config import LlamaCppConfig, _Sampling


def scripted_llm(
    script: Sequence[str | tuple[str, str]] | Callable[[list[Message], int], str | tuple[str, str]],
    *,
    cache: Cache | None = None,
    sampling: _Sampling | None = None,
    scorer: Callable[[Prompt, list[str]], list[float]] | None = None,
    family: str | None = None,
) -> LLM:
    """A fake backend for unit tests only: canned outputs through the real parse path.

    Args:
        script: a list of outputs served in order, or ``f(messages, seed) -> output``. An
            output is a text, or ``(text, finish_reason)`` to simulate truncation.
        scorer: ``f(prompt, continuations) -> log-probabilities`` behind :meth:`LLM.loglik`
            (each continuation counts one token per character).
        family: the model family it claims (judges compare families); None: not known.
    """
    from openai.types.chat import ChatCompletion

    queue = [] if callable(script) else list(script)
    calls: list[dict[str, Any]] = []

    def create(**kwargs: Any) -> ChatCompletion:
        calls.append(kwargs)
        if callable(script):
            out = script(kwargs["messages"], kwargs.get("seed", 0))
        else:
            if not queue:
                raise RuntimeError("scripted LLM ran out of outputs")
            out = queue.pop(0)
        text, finish = out if isinstance(out, tuple) else (out, "stop")
        return ChatCompletion.model_validate(
            {
                "id": f"fake-{len(calls)}",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": finish,
                        "message": {"role": "assistant", "content": text},
                    }
                ],
                "usage": {
                    "prompt_tokens": 10,
                    "completion_tokens": max(1, len(text) // 4),
                    "total_tokens": 10 + max(1, len(text) // 4),
                },
            }
        )

    def score(prompt: Prompt, continuations: list[str]) -> tuple[list[LogLik], int]:
        assert scorer is not None
        values = scorer(prompt, continuations)
        return [LogLik(float(v), len(c)) for v, c in zip(values, continuations, strict=True)], 10

    llm = LLM(
        create,
        identity={"backend": "scripted", "model": "scripted"},
        sampling=sampling or LlamaCppConfig(),
        cache=cache,
        lock=False,
        score=score if scorer is not None else None,
    )
    llm.calls = calls  # type: ignore[attr-defined]
    if family is not None:
        llm.set_family(lambda: (family, "scripted"))
    return llm
