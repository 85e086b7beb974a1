"""The one attempt loop around a generator's model calls, in the shape of instructor's retry:
call, check the answer, on a failure count it by reason (and, where a generator asks for it,
re-ask with the failure named), try again; when the budget is spent, raise the last failure.

A *call* is one structured model call for attempt ``a`` (0-based; the generator derives the
attempt's seed from it, so seeds, cache keys and records do not depend on this loop). A *check*
turns the model's answer into the stage's value or raises :class:`AttemptFailure` naming the
broken rule. The model's own failures (:class:`~gen.errors.LLMOutputError`: truncated, invalid
after instructor's own retries, backend error) become an :class:`AttemptFailure` too, so a
generator handles one failure type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from gen.errors import LLMOutputError

D = TypeVar("D")
T = TypeVar("T")


class AttemptFailure(Exception):
    """A stage gave nothing usable: raised by a check for one attempt, and by :func:`retry`
    for the last attempt once the budget is spent. Carries the reject fields.

    Attributes:
        stage: the stage (the reject's ``stage``).
        reason: the broken rule or the model's failure (``truncated``, ``invalid_output``…).
        detail: what was wrong, for the reject row.
        raw: the model's answer (the draft as JSON unless the check gave its own).
        attempts: the calls made when it was raised by the loop (0 from a check).
        counts: the counters this attempt adds (``None``: ``<stage>.<reason>``).
        llm: True when the model itself failed (no answer to check).
        failed: every failed attempt of the loop, in order (instructor's ``failed_attempts``).
    """

    def __init__(
        self,
        stage: str,
        reason: str,
        detail: str,
        raw: str | None = None,
        *,
        counts: Sequence[str] | None = None,
        attempts: int = 0,
        llm: bool = False,
    ):
        super().__init__(f"{stage}: {reason}: {detail}")
        self.stage, self.reason, self.detail, self.raw = stage, reason, detail, raw
        self.counts = counts
        self.attempts = attempts
        self.llm = llm
        self.failed: list[AttemptFailure] = []

    def __str__(self) -> str:
        return f"{self.stage}: {self.reason}: {self.detail}"

    def keys(self) -> list[str]:
        """The counters this failed attempt adds."""
        return list(self.counts) if self.counts is not None else [f"{self.stage}.{self.reason}"]


def _raw(draft: Any) -> str | None:
    dump = getattr(draft, "model_dump_json", None)
    return dump() if callable(dump) else None


def _outcome(call: Callable[[int], D], a: int) -> tuple[bool, D | LLMOutputError]:
    """Attempt ``a``'s call: (True, the answer) or (False, the model's failure)."""
    try:
        return True, call(a)
    except LLMOutputError as e:
        return False, e


def retry(
    call: Callable[[int], D],
    check: Callable[[D], T],
    *,
    budget: int,
    stage: str,
    count: Callable[[str], None] | None = None,
    llm_key: Callable[[str], str] | None = None,
    failed: Callable[[AttemptFailure], None] | None = None,
    ahead: Callable[[], int] | None = None,
    fan: Callable[[Callable[[int], Any], list[int]], list[Any]] | None = None,
) -> T:
    """Up to ``budget`` attempts of ``call`` then ``check``; the first value the check accepts.

    Args:
        call: attempt number (0-based) -> the model's answer; may raise ``LLMOutputError``.
        check: the answer -> the stage's value; raises :class:`AttemptFailure` to try again.
        budget: attempts at most.
        stage: the stage the failures name.
        count: where each failed attempt's counters go (``ctx.count``).
        llm_key: the counter of a model failure by its reason (default ``<stage>.llm_<reason>``).
        failed: called with each failed attempt after it is counted (to re-ask with the failure
            named, as rerank does, or keep the model's errors).
        ahead: when an attempt is due whose call has not been made, how many attempts (from it
            on, within the budget) to call at once: their calls run together through ``fan``
            (``ctx.map``) and their answers are checked one by one in attempt order, so the value,
            the counters and ``failed`` are those of one attempt at a time. An attempt past the
            accepted one is called but never checked: give at most the calls the caller is sure
            to check (candidates' restyle: the options its pool still misses).
        fan: ``(call, attempts) -> answers in that order``; without it the calls run one by one.

    Raises:
        AttemptFailure: the last attempt's failure once the budget is spent (``attempts`` says
            how many calls were made, ``failed`` lists every failed attempt).
    """
    history: list[AttemptFailure] = []
    last = AttemptFailure(stage, "no_attempt", "no attempt left")
    answers: dict[int, tuple[bool, Any]] = {}
    for a in range(budget):
        if a not in answers:
            k = max(1, min(ahead(), budget - a)) if ahead is not None else 1
            due = list(range(a, a + k))
            one = partial(_outcome, call)
            answers.update(zip(due, fan(one, due) if fan and k > 1 else map(one, due), strict=True))
        ok, draft = answers.pop(a)
        if not ok:
            e = draft
            key = llm_key(e.reason) if llm_key is not None else f"{stage}.llm_{e.reason}"
            last = AttemptFailure(stage, e.reason, e.detail, e.raw, counts=[key], llm=True)
        else:
            try:
                return check(draft)
            except AttemptFailure as f:
                last = f
                if last.raw is None:
                    last.raw = _raw(draft)
        last.attempts = a + 1
        if last.reason == "deferred":  # batch mode's collecting pass: the rest waits for it
            raise last
        history.append(last)
        if count is not None:
            for key in last.keys():
                count(key)
        if failed is not None:
            failed(last)
    last.failed = history
    raise last
