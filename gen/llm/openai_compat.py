"""Any OpenAI-compatible server (``llm=openai``: vLLM, llama.cpp's server, llama-cpp-python's
server): chat completions with the schema in ``response_format``, log-likelihoods from the
completions endpoint where the server returns prompt log-probabilities."""

from __future__ import annotations

from typing import Any

from gen.errors import BackendError
from gen.llm.boundary import LLM, LogLik, Prompt, Scorer
from gen.llm.cache import Cache
from gen.llm.config import OpenAIConfig


def make_openai_llm(cfg: OpenAIConfig, cache: Cache | None = None) -> LLM:
    """An LLM that talks to the server at ``cfg.base_url`` with up to ``cfg.concurrency``
    calls in flight, once the server has answered :func:`preflight`."""
    if cfg.preflight_timeout:
        preflight(cfg)  # before importing openai (seconds on a loaded machine): fail fast
    from openai import OpenAI

    client = OpenAI(base_url=cfg.base_url, api_key=cfg.api_key, timeout=cfg.timeout,
                    max_retries=cfg.max_retries)
    identity = {"backend": "openai", "model": cfg.model, "model_sha256": cfg.model_sha256}

    def create(**kwargs: Any) -> Any:  # the server needs the model name on every request
        return client.chat.completions.create(model=cfg.model, **kwargs)

    return LLM(create, identity=identity, sampling=cfg, cache=cache,
               lock=False, schema_format=cfg.schema_format, score=_openai_scorer(client, cfg),
               where=f"llm=openai at {cfg.base_url}")


def preflight(cfg: OpenAIConfig) -> None:
    """Ask the server for ``GET {base_url}/models`` once, within ``cfg.preflight_timeout``
    seconds and without retries, with the API key and the environment's proxy settings, as the
    client's calls would go. Any 2xx answer means the server is up.

    Raises:
        BackendError: one line naming the URL and what happened (connection refused, no
            answer in time, an HTTP error status), before any model call is made.
    """
    import http.client
    import urllib.error
    import urllib.request

    url = f"{cfg.base_url.rstrip('/')}/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {cfg.api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=cfg.preflight_timeout):
            return
    except urllib.error.HTTPError as e:
        hint = {401: "; check llm.api_key", 403: "; check llm.api_key",
                404: "; does llm.base_url end in /v1?"}.get(e.code, "")
        what = f"HTTP {e.code}{hint}"
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        if isinstance(reason, TimeoutError):
            what = f"no answer within llm.preflight_timeout={cfg.preflight_timeout:g} s"
        else:
            what = f"cannot connect ({' '.join(str(reason).split()) or type(reason).__name__})"
    raise BackendError(f"llm.base_url: {url}: {what} (llm.preflight_timeout=0 skips this check)")


def _openai_scorer(client: Any, cfg: OpenAIConfig) -> Scorer:
    """Log-likelihoods from an OpenAI-compatible *completions* endpoint with ``echo`` and
    ``logprobs`` (vLLM): the server returns the log-probability of every prompt token, and the
    continuation's are the tokens past the prompt's end. llama.cpp's C++ server returns none
    (a clear error here); llama-cpp-python 0.3.36's server returns them shifted by one token
    (abetlen/llama-cpp-python#1983), so its scores are wrong: score GGUFs in process."""

    def score(prompt: Prompt, continuations: list[str]) -> tuple[list[LogLik], int]:
        import openai

        if not isinstance(prompt, str):
            raise BackendError("loglik on an OpenAI-compatible server needs a plain-text prompt "
                               "(the server's chat template is not visible to the client)")
        out, evaluated = [], 0
        for cont in continuations:
            full = prompt + cont
            try:
                r = client.completions.create(model=cfg.model, prompt=full, max_tokens=1,
                                              temperature=0, echo=True, logprobs=1)
            except (openai.BadRequestError, openai.NotFoundError,
                    openai.UnprocessableEntityError) as e:
                raise BackendError(f"{cfg.base_url} refused a completions request with echo and "
                                   f"logprobs ({type(e).__name__}); loglik needs a server that "
                                   "returns prompt log-probabilities (vLLM, llama.cpp); "
                                   "use mode=generate otherwise") from None
            lp = r.choices[0].logprobs if r.choices else None
            if lp is None or not lp.token_logprobs or not lp.text_offset or not lp.tokens:
                raise BackendError(f"{cfg.base_url} returned no prompt log-probabilities for "
                                   "echo=true; loglik needs a server that does (vLLM, llama.cpp); "
                                   "use mode=generate otherwise")
            total, n = 0.0, 0
            for token, offset, logprob in zip(lp.tokens, lp.text_offset, lp.token_logprobs,
                                              strict=False):
                if offset >= len(full):  # the one generated token
                    break
                if offset + len(token) > len(prompt) and logprob is not None:
                    total += logprob
                    n += 1
            echoed = sum(1 for off in lp.text_offset if off < len(full))
            if echoed == 0 or (cont and n == 0):
                raise BackendError(f"{cfg.base_url} returned log-probabilities for generated "
                                   "tokens only (no echo); loglik needs prompt log-probabilities "
                                   "(vLLM); use mode=generate otherwise")
            evaluated += echoed
            out.append(LogLik(total, n))
        return out, evaluated

    return score
