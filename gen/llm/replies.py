"""What a backend's reply says, read defensively: whether it is a usable chat completion (to use
or to cache), a cached reply validated again, the text, finish reason, token counts and prefix
reuse it reports, and a failed call as a ``backend_error``. :class:`gen.llm.boundary.LLM` reads
every reply through these."""

from __future__ import annotations

from typing import Any

from gen.errors import LLMOutputError
from gen.llm.http import ServerError


def _reply_problem(response: Any) -> str | None:
    """What makes ``response`` unfit to use or cache (None: a chat completion with a message)."""
    from openai.types.chat import ChatCompletion

    if not isinstance(response, ChatCompletion):
        return f"a {type(response).__name__}"
    choices = response.choices
    if not isinstance(choices, list) or not choices:
        return "no choices"
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        return "the message content is not text"
    if content is None and not getattr(message, "tool_calls", None):
        return "no message"
    return None


def _cached_reply(hit: str, model: Any) -> Any:
    """A cached reply, validated again (None for a row that is not a usable reply)."""
    from pydantic import ValidationError

    try:
        reply = model.model_validate_json(hit)
    except (ValidationError, ValueError):
        return None
    return reply if _reply_problem(reply) is None else None


def _backend_error(e: BaseException) -> LLMOutputError:
    """A failed call as a ``backend_error``: a server's own words, else the exception's type and
    text, on one line; ``timed_out`` when the call ran out of time."""
    text = str(e) if isinstance(e, ServerError) else f"{type(e).__name__}: {e}"
    error = LLMOutputError("backend_error", " ".join(text.split())[:300])
    error.timed_out = bool(getattr(e, "late", False))  # type: ignore[attr-defined]
    return error


def _reused(response: Any) -> int | None:
    """Prompt tokens the backend took from its prefix cache: ``usage.prompt_tokens_details.
    cached_tokens`` (OpenAI, vLLM, in process), else llama-server's ``timings.cache_n``; None
    when the reply does not say."""
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    cached = getattr(details, "cached_tokens", None) if details else None
    if cached is None:
        timings = (getattr(response, "model_extra", None) or {}).get("timings")
        cached = timings.get("cache_n") if isinstance(timings, dict) else None
    return int(cached) if isinstance(cached, int) and cached >= 0 else None


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
