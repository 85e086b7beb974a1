"""Any OpenAI-compatible server (``llm=openai``: vLLM, llama.cpp's server, llama-cpp-python's
server): chat completions with the schema in ``response_format``, log-likelihoods from the
completions endpoint where the server returns prompt log-probabilities."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gen.errors import BackendError
from gen.llm.admission import Admission
from gen.llm.batch import Batcher
from gen.llm.boundary import LLM, LogLik, Prompt, Scorer
from gen.llm.cache import Cache
from gen.llm.config import OpenAIConfig
from gen.llm.http import Endpoint, ServerError

FINISH = {
    None: "stop",
    "eos": "stop",
    "eos_token": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "max_length": "length",
}
"""Other servers' finish reasons, as OpenAI's (a reply cut at max_tokens must stay ``length``)."""


def reply_cap(max_tokens: int, echo_chars: int = 0) -> int:
    """The largest reply body accepted for a call of ``max_tokens`` (and an echoed prompt of
    ``echo_chars`` characters, whose tokens come back with their log-probabilities): a server
    that ignores max_tokens is cut off there instead of being read whole."""
    return (1 << 20) + 64 * max_tokens + 512 * echo_chars


def make_openai_llm(cfg: OpenAIConfig, cache: Cache | None = None) -> LLM:
    """An LLM that talks to the server at ``cfg.base_url`` with up to ``cfg.concurrency``
    calls in flight (adapting below it, :mod:`gen.llm.admission`), once the server has answered
    :func:`preflight`."""
    admission = Admission(cfg.concurrency, adaptive=cfg.adaptive, rpm=cfg.rpm, tpm=cfg.tpm)
    endpoint = Endpoint(
        cfg.base_url,
        timeout=cfg.timeout,
        max_retries=cfg.max_retries,
        key_env=cfg.api_key_env,
        admission=admission,
    )
    if cfg.preflight_timeout:
        preflight(cfg, endpoint)
    identity = {"backend": "openai", "model": cfg.model, "model_sha256": cfg.model_sha256}
    llm = LLM(
        chat_create(endpoint, cfg.model),
        identity=identity,
        sampling=cfg,
        cache=cache,
        lock=False,
        schema_format=cfg.schema_format,
        score=_openai_scorer(endpoint, cfg),
        where=f"llm=openai at {cfg.base_url}",
        admission=admission,
        gated=True,
        batcher=Batcher(
            endpoint,
            cfg.model,
            window=cfg.batch_window,
            poll=cfg.batch_poll,
            parse=chat_completion,
        )
        if cfg.batch
        else None,
        batch_discount=cfg.batch_discount if cfg.batch else 1.0,
    )
    llm.on_close(endpoint.close)
    return llm


def chat_create(endpoint: Endpoint, model: str) -> Any:
    """The backend's ``create(**kwargs) -> ChatCompletion``: one ``POST /chat/completions``
    (``extra_body`` merged into the request, as the OpenAI client does), its reply checked by
    :func:`chat_completion` before anyone sees it or caches it."""

    def create(**kwargs: Any) -> Any:
        extra = kwargs.pop("extra_body", None) or {}
        body = {"model": model, **{k: v for k, v in kwargs.items() if v is not None}, **extra}
        max_tokens = int(body.get("max_tokens") or 4096)
        return endpoint.post(
            "/chat/completions",
            body,
            cap=reply_cap(max_tokens),
            parse=lambda data: chat_completion(data, max_tokens),
        )

    return create


def chat_completion(data: dict[str, Any], max_tokens: int) -> Any:
    """A server's reply as a validated ``ChatCompletion``: at least one choice whose message
    has text, a known finish reason, and no more tokens than ``max_tokens`` allowed.

    Raises:
        ServerError: the reply is not one (``retry``: another request may get a good one; a
            server ignoring max_tokens would ignore it again).
    """
    from openai.types.chat import ChatCompletion
    from pydantic import ValidationError

    choices = data.get("choices")
    if (
        not isinstance(choices, list)
        or not choices
        or not all(isinstance(c, dict) for c in choices)
    ):
        raise ServerError(
            f"the reply is not a chat completion (choices: {_shape(choices)})", retry=True
        )
    fixed = [
        {
            "index": i,
            **c,
            "finish_reason": FINISH.get(c.get("finish_reason"), c.get("finish_reason")),
            "message": {"role": "assistant", **c["message"]}
            if isinstance(c.get("message"), dict)
            else c.get("message"),
        }
        for i, c in enumerate(choices)
    ]
    envelope = {"id": "", "object": "chat.completion", "created": 0, "model": ""}
    try:
        reply = ChatCompletion.model_validate(
            {
                **envelope,
                **{k: v for k, v in data.items() if v is not None},
                "choices": fixed,
                "object": "chat.completion",
            }
        )
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ServerError(
            f"the reply is not a chat completion ({where}: {err['msg']})", retry=True
        ) from None
    message = reply.choices[0].message
    if not (message.content or "").strip() and not message.tool_calls:
        raise ServerError("the reply holds no text (an empty message)", retry=True)
    used = reply.usage.completion_tokens if reply.usage else None
    if used is not None and used > max_tokens + 16:  # some servers count an end token or two
        raise ServerError(
            f"the reply has {used} completion tokens for max_tokens={max_tokens} "
            "(the server ignores max_tokens)",
            retry=False,
        )
    return reply


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return "an empty list" if not value else "a list of " + type(value[0]).__name__
    return "missing" if value is None else f"a {type(value).__name__}"


def preflight(cfg: OpenAIConfig, endpoint: Endpoint | None = None) -> None:
    """Ask the server for ``GET {base_url}/models`` once, within ``cfg.preflight_timeout``
    seconds and without retries, with the API key and the environment's proxy settings, as the
    calls would go. Any 2xx answer means the server is up.

    Raises:
        BackendError: one line naming the URL and what happened (connection refused, no
            answer in time, an HTTP error status), before any model call is made.
    """
    own = endpoint is None
    ep = endpoint or Endpoint(
        cfg.base_url, timeout=cfg.preflight_timeout, max_retries=0, key_env=cfg.api_key_env
    )
    url = f"{cfg.base_url.rstrip('/')}/models"
    try:
        ep.get_ok("/models", cfg.preflight_timeout)
        return
    except ServerError as e:
        what = (
            f"no answer within llm.preflight_timeout={cfg.preflight_timeout:g} s"
            if e.late
            else str(e)
        )
    finally:
        if own:
            ep.close()
    raise BackendError(f"llm.base_url: {url}: {what} (llm.preflight_timeout=0 skips this check)")


def _openai_scorer(endpoint: Endpoint, cfg: OpenAIConfig) -> Scorer:
    """Log-likelihoods from an OpenAI-compatible *completions* endpoint with ``echo`` and
    ``logprobs`` (vLLM): the server returns the log-probability of every prompt token, and the
    continuation's are the tokens past the prompt's end. llama.cpp's C++ server returns none
    (a clear error here); llama-cpp-python 0.3.36's server returns them shifted by one token
    (abetlen/llama-cpp-python#1983), so its scores are wrong: score GGUFs in process."""

    def completion(data: dict[str, Any]) -> Any:
        # checked by hand: OpenAI's Completion type has no room for the first prompt token's
        # null log-probability that vLLM (rightly) returns
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ServerError(
                f"the reply is not a completion (choices: {_shape(choices)})", retry=True
            )
        lp = choices[0].get("logprobs")
        if lp is None:
            return SimpleNamespace(choices=[SimpleNamespace(logprobs=None)])
        ok = (
            isinstance(lp, dict)
            and all(
                isinstance(lp.get(k), list | type(None))
                for k in ("tokens", "text_offset", "token_logprobs")
            )
            and all(isinstance(t, str) for t in lp.get("tokens") or [])
            and all(isinstance(o, int) for o in lp.get("text_offset") or [])
            and all(isinstance(x, int | float | type(None)) for x in lp.get("token_logprobs") or [])
        )
        if not ok:
            raise ServerError(
                "the reply is not a completion (logprobs: not lists of tokens, offsets "
                "and numbers)",
                retry=True,
            )
        return SimpleNamespace(
            choices=[
                SimpleNamespace(
                    logprobs=SimpleNamespace(
                        tokens=lp.get("tokens"),
                        text_offset=lp.get("text_offset"),
                        token_logprobs=lp.get("token_logprobs"),
                    )
                )
            ]
        )

    def score(prompt: Prompt, continuations: list[str]) -> tuple[list[LogLik], int]:
        if not isinstance(prompt, str):
            raise BackendError(
                "loglik on an OpenAI-compatible server needs a plain-text prompt "
                "(the server's chat template is not visible to the client)"
            )
        out, evaluated = [], 0
        for cont in continuations:
            full = prompt + cont
            body = {
                "model": cfg.model,
                "prompt": full,
                "max_tokens": 1,
                "temperature": 0,
                "echo": True,
                "logprobs": 1,
            }
            try:
                r = endpoint.post(
                    "/completions", body, cap=reply_cap(1, len(full)), parse=completion
                )
            except ServerError as e:
                if e.status in (400, 404, 422):
                    raise BackendError(
                        f"{cfg.base_url} refused a completions request with echo and "
                        f"logprobs (HTTP {e.status}); loglik needs a server that "
                        "returns prompt log-probabilities (vLLM, llama.cpp); "
                        "use mode=generate otherwise"
                    ) from None
                raise
            lp = r.choices[0].logprobs if r.choices else None
            if lp is None or not lp.token_logprobs or not lp.text_offset or not lp.tokens:
                raise BackendError(
                    f"{cfg.base_url} returned no prompt log-probabilities for "
                    "echo=true; loglik needs a server that does (vLLM, llama.cpp); "
                    "use mode=generate otherwise"
                )
            total, n = 0.0, 0
            for token, offset, logprob in zip(
                lp.tokens, lp.text_offset, lp.token_logprobs, strict=False
            ):
                if offset >= len(full):  # the one generated token
                    break
                if offset + len(token) > len(prompt) and logprob is not None:
                    total += logprob
                    n += 1
            echoed = sum(1 for off in lp.text_offset if off < len(full))
            if echoed == 0 or (cont and n == 0):
                raise BackendError(
                    f"{cfg.base_url} returned log-probabilities for generated "
                    "tokens only (no echo); loglik needs prompt log-probabilities "
                    "(vLLM); use mode=generate otherwise"
                )
            evaluated += echoed
            out.append(LogLik(total, n))
        return out, evaluated

    return score
