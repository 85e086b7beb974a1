"""The one LLM boundary: structured calls through instructor, a per-call cache, usage counts.

Backends differ only in the raw ``create(**kwargs) -> ChatCompletion`` they provide (and,
optionally, a log-likelihood scorer): llama-cpp-python in process (:mod:`gen.llm.llama_cpp`),
any OpenAI-compatible server (:mod:`gen.llm.openai_compat`), llama.cpp's own server started by
the toolkit (:mod:`gen.llm.llama_server`), or the scripted fake of unit tests
(:mod:`gen.llm.fake`). Generators see only :class:`LanguageModel`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar, cast

from pydantic import BaseModel

from gen.errors import BackendError, LLMOutputError
from gen.llm import batch
from gen.llm.admission import Admission
from gen.llm.cache import Cache
from gen.llm.config import _Sampling
from gen.llm.http import ServerError, set_run_deadline
from gen.llm.replies import (
    _answer_only,
    _backend_error,
    _cached_reply,
    _finish,
    _first_line,
    _reply_problem,
    _reused,
    _text,
    _unusable,
    _usage,
)
from gen.llm.usage import Usage
from gen.timing import CLOCK

T = TypeVar("T", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])
Message = dict[str, str]
Prompt = str | Sequence[Message]
"""A plain-text prompt, or chat messages (a last ``assistant`` message is the start of the
answer: the reply is scored as its continuation)."""


# --------------------------------------------------------------------------- workers

_WORKER = threading.local()


def set_worker(index: int | None) -> None:
    """Number the calling thread (a :meth:`gen.engine.runner.RunContext.map` worker)."""
    _WORKER.index = index


def worker() -> int | None:
    """The calling thread's worker number; None outside a worker pool."""
    return getattr(_WORKER, "index", None)


class LogLik(NamedTuple):
    """Log-likelihood of one continuation given a prompt."""

    logprob: float
    """Sum of the natural-log probabilities of the continuation's tokens."""
    tokens: int
    """How many tokens the continuation took (callers length-normalise)."""


Scorer = Callable[[Prompt, list[str]], tuple[list[LogLik], int]]
"""A backend's scoring function: ``(prompt, continuations) -> (scores, tokens evaluated)``."""


# --------------------------------------------------------------------------- the boundary


class _Streak:
    """Consecutive ``backend_error`` outcomes of one backend, shared by its forks.

    A backend that is down or broken would otherwise turn every record of a run into a
    ``backend_error`` reject (and a hanging server costs its timeout per call): after ``limit``
    failures in a row the call that reached it raises :class:`BackendError` (exit 2), and so does
    every call after it. Any other outcome (an answer, even an invalid one) resets the count.
    A backend that has answered no call yet (the cache's replays do not count) and lets one run
    out of time stops the run at once: a server that does not serve would cost ``limit`` whole
    timeouts otherwise (25 minutes with the defaults).
    """

    def __init__(self, limit: int, where: str):
        self.limit = limit
        self.where = where
        self.count = 0
        self.last = ""
        self.stopped: str | None = None
        self.answered = False
        self._lock = threading.Lock()

    def check(self) -> None:
        """Refuse a call once the backend has failed ``limit`` calls in a row."""
        if self.stopped is not None:
            raise BackendError(self.stopped)

    def note(self, error: LLMOutputError | None, *, live: bool = True) -> None:
        """Count one call's outcome (``live``: the backend was asked, not the cache); raise
        BackendError when the failures reach the limit."""
        with self._lock:
            if self.stopped is not None:
                raise BackendError(self.stopped) from error
            if isinstance(error, batch.Deferred):  # not asked yet: no outcome
                return
            if error is None or error.reason != "backend_error":
                self.count = 0
                self.answered = self.answered or live
                return
            self.count += 1
            self.last = " ".join(error.detail.split())
            if self.limit and getattr(error, "timed_out", False) and not self.answered:
                self.stopped = (
                    f"{self.where} answered no call yet, and this one failed: {self.last}; the run "
                    "stops "
                    "here (raise the timeout if the server is only slow; a rerun into the same "
                    "folder "
                    "resumes from the cache)"
                )
                raise BackendError(self.stopped) from error
            if not self.limit or self.count < self.limit:
                return
            self.stopped = (
                f"{self.where} failed {self.count} calls in a row (llm.max_consecutive_errors="
                f"{self.limit}), the last with {self.last}; the run stops here (its records so far "
                "stay in the run folder's *.partial files; a rerun into the same folder resumes "
                "from the cache)"
            )
            raise BackendError(self.stopped) from error


def _watched(method: F) -> F:
    """A model call whose outcome counts in the backend's failure streak (:class:`_Streak`),
    made within the run's deadline (``llm.deadline``)."""

    @functools.wraps(method)
    def call(self: LLM, *args: Any, **kwargs: Any) -> Any:
        self._streak.check()
        self._check_deadline()
        set_run_deadline(self.deadline_at)  # the transport cuts a call in flight there
        hits = self.usage.cache_hits, self.usage.calls
        try:
            out = method(self, *args, **kwargs)
        except LLMOutputError as e:
            if e.reason == "backend_error":
                self._check_deadline(e)
            self._streak.note(e)
            raise
        live = self.usage.calls - hits[1] > self.usage.cache_hits - hits[0]
        self._streak.note(None, live=live)
        return out

    return cast(F, call)


class LLM:
    """Structured generation with validation, bounded re-asks, truncation detection and caching.

    Args:
        create: the backend's raw chat-completion function, OpenAI-shaped.
        identity: what identifies the model (backend, model name, weights hash); part of
            every cache key and of the manifest.
        sampling: sampling settings; temperature/top_p/max_tokens go to every call.
        cache: the per-call cache, or None.
        lock: serialise calls (an in-process model is not re-entrant).
        score: the backend's log-likelihood scorer (:meth:`loglik`), or None.
        where: how messages name the backend (``llm=openai at http://…/v1``).
        admission: the calls-in-flight budget (:class:`Admission`); None: a fixed one of the
            backend's concurrency.
        gated: ``create`` and ``score`` pass the admission themselves (a server's transport,
            which frees the call's place while it waits to retry).
        batcher: batch mode (:mod:`gen.llm.batch`): within a batch session, calls go to batches.
        batch_discount: the batch rate, a fraction of the price.
    """

    def __init__(
        self,
        create: Callable[..., Any],
        *,
        identity: dict[str, Any],
        sampling: _Sampling,
        cache: Cache | None = None,
        lock: bool = False,
        schema_format: str = "json_object",
        score: Scorer | None = None,
        where: str | None = None,
        admission: Admission | None = None,
        gated: bool = False,
        batcher: batch.Batcher | None = None,
        batch_discount: float = 1.0,
    ):
        import instructor  # heavy; only when a model is really used

        self.batcher = batcher
        self.batch_discount = batch_discount
        self.identity = identity
        self.sampling = sampling
        self.cache = cache
        self.usage = Usage()
        self.concurrency = 1 if lock else sampling.concurrency
        self.admission = admission or Admission(self.concurrency)
        """Shared by every fork: the whole command's calls to this backend pass it."""
        self._gated = gated
        self._create = create
        self._lock = threading.Lock() if lock else None
        self._schema_format = schema_format
        self._score = score
        self._client = instructor.patch(
            create=self._cached_create, mode=instructor.Mode.JSON_SCHEMA
        )
        self._closers: list[Callable[[], None]] = []
        self._unsaved = threading.local()
        """This thread's call's live replies, cached only once the call's answer passed."""
        self._streak = _Streak(
            sampling.max_consecutive_errors, where or f"llm={identity.get('backend')}"
        )
        self._family: tuple[str, str] | None = None
        self._family_resolve: Callable[[], tuple[str, str]] | None = None
        deadline = getattr(sampling, "deadline", None)
        self.deadline_at = time.monotonic() + deadline if deadline else None
        """The run's deadline (a ``time.monotonic()`` instant), shared by forks; None: none."""

    def _check_deadline(self, cause: BaseException | None = None) -> None:
        """Stop the run (BackendError) once ``llm.deadline`` has passed."""
        if self.deadline_at is not None and time.monotonic() >= self.deadline_at:
            raise BackendError(
                f"{self._streak.where}: the run's model calls passed llm.deadline="
                f"{self.sampling.deadline:g} s; the run stops here (its records so far stay in the "
                "run "
                "folder's *.partial files; a rerun into the same folder resumes from the cache)"
            ) from cause

    def set_family(self, resolve: Callable[[], tuple[str, str]]) -> None:
        """How to find this model's family (``(family, how it was found)``), asked on first use:
        a vocab-only GGUF read is not paid by runs that never compare families."""
        self._family, self._family_resolve = None, resolve

    @property
    def family_info(self) -> tuple[str | None, str]:
        """(family, how it was found); (None, "not known") for a backend that cannot say."""
        if self._family is None and self._family_resolve is not None:
            self._family = self._family_resolve()
        return self._family or (None, "not known")

    @property
    def family(self) -> str | None:
        """The model family judges compare (``llm.family=`` or derived; see
        :mod:`gen.llm.family`)."""
        return self.family_info[0]

    def fork(self) -> LLM:
        """The same loaded backend (model, cache, lock) with usage counters of its own: a
        sub-run's manifest counts its own calls. Only the original closes the backend."""
        import copy

        import instructor

        twin = copy.copy(self)
        twin.usage = Usage()
        twin._closers = []
        twin._client = instructor.patch(
            create=twin._cached_create, mode=instructor.Mode.JSON_SCHEMA
        )
        return twin

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the LLM is closed (a managed server is stopped this way)."""
        self._closers.append(fn)

    def close(self) -> None:
        """Release what the backend holds (idempotent); runs end by calling it."""
        while self._closers:
            self._closers.pop()()

    def describe(self) -> dict[str, Any]:
        """Backend identity and sampling settings (and the family, once known), for manifests."""
        out = {**self.identity, "sampling": self.sampling.model_dump()}
        if self._family is not None:
            out["family"], out["family_source"] = self._family
        return out

    @_watched
    def structured(
        self,
        messages: Sequence[Message],
        schema: type[T],
        *,
        seed: int,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> T:
        """One structured call: the schema constrains decoding where the backend can
        (``temperature`` overrides the configured one: a judge decodes greedily).

        Raises:
            LLMOutputError: truncated output, output invalid after all attempts, or a
                backend failure; ``raw`` holds the last text the model produced.
            BackendError: the backend failed ``llm.max_consecutive_errors`` calls in a row.
        """
        from instructor.core import IncompleteOutputException, InstructorRetryException

        self._unsaved_rows().clear()
        try:
            answer = self._client(
                messages=list(messages),
                response_model=schema,
                # instructor counts retries after the first try, ``attempts`` counts tries
                max_retries=self.sampling.attempts - 1,
                seed=seed,
                temperature=self.sampling.temperature if temperature is None else temperature,
                top_p=self.sampling.top_p,
                max_tokens=max_tokens or self.sampling.max_tokens,
            )
        except IncompleteOutputException as e:
            raise LLMOutputError("truncated", "hit max_tokens", _text(e.last_completion)) from None
        except InstructorRetryException as e:
            last = e.last_completion
            cause = e.__cause__ or e
            if isinstance(cause, batch.Deferred | batch.LineFailed):
                raise cause from None
            if (last is None and not e.failed_attempts) or isinstance(cause, ServerError):
                # the backend failed (on the first try, or on a re-ask): nothing to validate
                raise _backend_error(cause) from None
            if last is not None and _finish(last) == "length":
                raise LLMOutputError("truncated", "hit max_tokens", _text(last)) from None
            failed = e.failed_attempts[-1].exception if e.failed_attempts else e
            detail = _first_line(failed)[:300] if str(failed).strip() else "validation failed"
            raise LLMOutputError(
                "invalid_output", f"{e.n_attempts} attempts: {detail}", _text(last)
            ) from None
        except LLMOutputError:
            raise
        except Exception as e:  # transport or backend failure on one call
            raise _backend_error(e) from None
        self._save()  # the answer validated: its conversation is replayed from now on
        return answer

    @_watched
    def complete(
        self,
        messages: Sequence[Message],
        *,
        seed: int,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: Sequence[str] | None = None,
        whole: bool = False,
    ) -> str:
        """One free-text chat completion (no schema), cached like :meth:`structured`.

        Args:
            temperature: overrides the configured one (0 is greedy decoding).
            stop: strings that end the reply.
            whole: refuse a reply cut at ``max_tokens`` (``truncated``) instead of returning it.

        Returns:
            The reply text; a reply cut at ``max_tokens`` is returned as it is (``whole=False``).

        Raises:
            LLMOutputError: ``backend_error`` when the call fails or returns no text;
                ``truncated`` when ``whole`` and the reply hit ``max_tokens``.
            BackendError: the backend failed ``llm.max_consecutive_errors`` calls in a row.
        """
        kwargs: dict[str, Any] = {
            "messages": list(messages),
            "seed": seed,
            "temperature": self.sampling.temperature if temperature is None else temperature,
            "top_p": self.sampling.top_p,
            "max_tokens": max_tokens or self.sampling.max_tokens,
        }
        if stop:
            kwargs["stop"] = list(stop)
        self._unsaved_rows().clear()
        try:
            response = self._cached_create(**kwargs)
        except (batch.Deferred, batch.LineFailed):
            raise
        except Exception as e:  # transport or backend failure on one call
            raise _backend_error(e) from None
        text = _text(response)
        if text is None:
            raise LLMOutputError("backend_error", "the reply holds no text")
        if whole and _finish(response) == "length":  # refused, so not kept: asked again
            raise LLMOutputError("truncated", f"hit max_tokens={kwargs['max_tokens']}", text)
        if _unusable(response) is None:  # an empty answer or a refusal is asked again next time
            self._save()
        return text

    @_watched
    def loglik(self, prompt: Prompt, continuations: Sequence[str]) -> list[LogLik]:
        """Score each continuation by its log-likelihood after ``prompt`` (deterministic, cached).

        ``prompt`` is plain text, or chat messages that the backend wraps in the model's chat
        template (in-process GGUFs only); a last ``assistant`` message starts the answer.

        Raises:
            BackendError: the backend cannot score (a server without echo+logprobs, chat
                messages on a server, a GGUF without a chat template), or it failed
                ``llm.max_consecutive_errors`` calls in a row.
            LLMOutputError: ``backend_error`` when one call fails.
        """
        if self._score is None:
            raise BackendError(
                f"the {self.identity.get('backend')} backend cannot score log-likelihoods"
            )
        conts = list(continuations)
        if not conts:
            return []
        request = {
            "prompt": prompt if isinstance(prompt, str) else [dict(m) for m in prompt],
            "continuations": conts,
        }
        key = hashlib.sha256(
            json.dumps({"model": self.identity, "loglik": request}, sort_keys=True).encode()
        ).hexdigest()
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            scores = _scores(hit, len(conts))
            if scores is not None:  # else a damaged row: asked again, and replaced
                self.usage.add(hit=True, prompt=0, completion=0, seconds=0.0)
                return scores
        t0 = time.perf_counter()
        try:
            with self._slot(), CLOCK.timed("llm_calls"):
                scores, evaluated = self._score(prompt, conts)
        except (BackendError, LLMOutputError):
            raise
        except Exception as e:  # transport or backend failure on one call
            raise _backend_error(e) from None
        if len(scores) != len(conts):
            raise LLMOutputError(
                "backend_error", f"{len(scores)} scores for {len(conts)} continuations"
            )
        self.usage.add(hit=False, prompt=evaluated, completion=0, seconds=time.perf_counter() - t0)
        if self.cache is not None:
            self.cache.put(key, json.dumps([[s.logprob, s.tokens] for s in scores]))
        return scores

    @contextlib.contextmanager
    def _slot(self) -> Iterator[None]:
        """One live call's place in the admission (unless the transport takes it), and the
        in-process model's lock."""
        with contextlib.ExitStack() as stack:
            if not self._gated:
                stack.enter_context(self.admission.slot())
            if self._lock is not None:
                with CLOCK.timed("waiting"):
                    stack.enter_context(self._lock)
            yield

    @property
    def price(self) -> Any:
        """``llm.price`` (per million input and output tokens), or None."""
        return getattr(self.sampling, "price", None)

    # The cache sits under instructor, so re-asks are cached too and a rerun replays
    # exactly the same conversation; a reply is written only once its call's answer passed
    # (:meth:`_save`), and every reader sees it with its reasoning block set apart.
    def _cached_create(self, **kwargs: Any) -> Any:
        from openai.types.chat import ChatCompletion

        rf = kwargs.get("response_format")
        if rf and rf.get("type") == "json_schema" and self._schema_format == "json_object":
            kwargs["response_format"] = {
                "type": "json_object",
                "schema": rf["json_schema"]["schema"],
            }
        key = hashlib.sha256(
            json.dumps(
                {"model": self.identity, "request": keyed(kwargs)}, sort_keys=True, default=str
            ).encode()
        ).hexdigest()
        batcher = self.batcher
        session = batch.active() if batcher is not None else None
        if batcher and session and (result := session.result(key)) is not None:
            # answered by this run's batch: a live call's path from its reply on (checked,
            # validated, cached once valid, counted at the batch rate)
            response = batcher.reply(result, kwargs)
            self.usage.add(
                hit=False,
                prompt=_usage(response, "prompt_tokens"),
                completion=_usage(response, "completion_tokens"),
                seconds=0.0,
                reused=_reused(response),
                batched=True,
            )
            if self.cache is not None and _unusable(response) is None:
                self._unsaved_rows().append((key, response.model_dump_json()))
            return _answer_only(response)
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            cached = _cached_reply(hit, ChatCompletion)
            if cached is not None:  # else a row an older version cached unchecked: asked again
                self.usage.add(
                    hit=True,
                    prompt=_usage(cached, "prompt_tokens"),
                    completion=_usage(cached, "completion_tokens"),
                    seconds=0.0,
                )
                return _answer_only(cached)
        if batcher and session:  # written down for the next batch
            raise session.defer(batcher, key, batcher.body(kwargs))
        t0 = time.perf_counter()
        with self._slot(), CLOCK.timed("llm_calls"):
            response = self._create(**kwargs)
        seconds = time.perf_counter() - t0
        _reported_times(response)
        problem = _reply_problem(response)
        if problem is not None:  # never cached: a rerun asks again
            raise ServerError(
                f"the backend's reply is not a chat completion ({problem})", retry=False
            )
        self.usage.add(
            hit=False,
            prompt=_usage(response, "prompt_tokens"),
            completion=_usage(response, "completion_tokens"),
            seconds=seconds,
            reused=_reused(response),
        )
        if self.cache is not None and _unusable(response) is None:
            self._unsaved_rows().append((key, response.model_dump_json()))
        return _answer_only(response)

    def _unsaved_rows(self) -> list[tuple[str, str]]:
        rows = getattr(self._unsaved, "rows", None)
        if rows is None:
            rows = self._unsaved.rows = []
        return rows

    def _save(self) -> None:
        """Cache the live replies of the call that just passed (its re-asks too, so a rerun
        replays the same conversation); a call that failed leaves nothing to replay."""
        rows = self._unsaved_rows()
        if self.cache is not None and rows:
            self.cache.put_many(rows)
        rows.clear()


def keyed(request: dict[str, Any]) -> dict[str, Any]:
    """A chat request as its cache key sees it: an image part's data URL (megabytes of base64)
    replaced by its SHA-256, so a key is hashed from a small text and no image is ever kept whole
    in a cache row or its key."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not any(
        isinstance(m, dict) and isinstance(m.get("content"), list) for m in messages
    ):
        return request
    out = []
    for m in messages:
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            m = {**m, "content": [_part_key(p) for p in m["content"]]}
        out.append(m)
    return {**request, "messages": out}


def _part_key(part: Any) -> Any:
    image = part.get("image_url") if isinstance(part, dict) else None
    if not isinstance(image, dict):
        return part
    url = image.get("url")
    if not isinstance(url, str) or not url.startswith("data:"):
        return part
    digest = hashlib.sha256(url.encode()).hexdigest()
    return {**part, "image_url": {**image, "url": f"sha256:{digest}"}}


def _reported_times(response: Any) -> None:
    """Add a reply's own prompt-evaluation and generation times (llama-server's ``timings``) to
    the run's clock; other backends report none."""
    timings = (getattr(response, "model_extra", None) or {}).get("timings")
    if isinstance(timings, dict):
        for part, field in (
            ("llm_prompt_evaluation", "prompt_ms"),
            ("llm_generation", "predicted_ms"),
        ):
            ms = timings.get(field)
            if isinstance(ms, int | float) and ms >= 0:
                CLOCK.add(part, ms / 1000)


def _scores(hit: str, n: int) -> list[LogLik] | None:
    """Cached log-likelihoods (None for a row that is not ``n`` pairs of numbers)."""
    try:
        rows = json.loads(hit)
        scores = [LogLik(float(lp), int(k)) for lp, k in rows]
    except (ValueError, TypeError):
        return None
    return scores if len(scores) == n else None


class LanguageModel(Protocol):
    """What generators (and the runner) may use of a model: ``ctx.llm`` is one.

    :class:`LLM` is the implementation; a test may hand a run anything with these members.
    """

    usage: Usage
    """This run's call, token and cache-hit counters (the manifest's ``llm_usage``)."""
    concurrency: int
    """How many calls may be in flight at once (``ctx.map``'s default width)."""

    # read-only: LLM resolves the family lazily behind properties
    @property
    def family(self) -> str | None:
        """The model family judges compare with the candidate's (:mod:`gen.llm.family`)."""

    @property
    def family_info(self) -> tuple[str | None, str]:
        """(family, how it was found)."""

    def structured(
        self,
        messages: Sequence[Message],
        schema: type[T],
        *,
        seed: int,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> T: ...

    def complete(
        self,
        messages: Sequence[Message],
        *,
        seed: int,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: Sequence[str] | None = None,
        whole: bool = False,
    ) -> str: ...

    def loglik(self, prompt: Prompt, continuations: Sequence[str]) -> list[LogLik]: ...

    def describe(self) -> dict[str, Any]: ...

    def fork(self) -> LanguageModel: ...

    def close(self) -> None: ...
