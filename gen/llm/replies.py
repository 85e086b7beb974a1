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


def _unusable(response: Any) -> str | None:
    """Why a well-formed reply is no answer to keep (None: it has text): a tool call
    (``content: null``), an empty message or a refusal is never cached, so it is not replayed
    once the server is fixed."""
    message = response.choices[0].message
    if getattr(message, "refusal", None):
        return "a refusal"
    if message.content is None:
        return "a tool call, no text" if getattr(message, "tool_calls", None) else "no text"
    if not message.content.strip():
        return "an empty message"
    return None


def _cached_reply(hit: str, model: Any) -> Any:
    """A cached reply, validated again (None for a row that is not a usable reply, such as a
    tool call or an empty message an older version cached)."""
    from pydantic import ValidationError

    try:
        reply = model.model_validate_json(hit)
    except (ValidationError, ValueError):
        return None
    return reply if _reply_problem(reply) is None and _unusable(reply) is None else None


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_think(text: str) -> tuple[str | None, str | None]:
    """(reasoning, answer) of a reply: a reasoning model's ``<think>…</think>`` block is set apart
    (DeepSeek-R1's distills often omit the opening tag, their chat template writes it); a reply
    whose thinking never closed has no answer (None: the token budget ran out, as WAGIBench's
    ``split_think_and_response`` says); a reply without the tags is all answer."""
    if THINK_CLOSE in text:
        before, _, after = text.partition(THINK_CLOSE)
        return before.split(THINK_OPEN, 1)[-1].strip(), after.strip()
    if THINK_OPEN in text:
        return text.split(THINK_OPEN, 1)[1].strip(), None
    return None, text


def _answer_only(response: Any) -> Any:
    """``response`` with its message's reasoning block set apart (:func:`split_think`): what
    every parse path of the boundary reads (structured, plain text, a judge's score). A reply
    whose thinking never closed keeps its text, so a reader can tell it has no answer."""
    try:
        message = response.choices[0].message
        text = message.content
    except (AttributeError, IndexError, TypeError):
        return response
    if not isinstance(text, str):
        return response
    _, answer = split_think(text)
    if answer is None or answer == text:
        return response
    out = response.model_copy(deep=True)
    out.choices[0].message.content = answer
    return out


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
