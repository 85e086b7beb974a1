"""Many records and calls under way at once, their results in input order.

A run keeps its model busy by working on several records at once (:func:`ordered`, behind
``ctx.imap``) and, inside a record, on its independent calls at once (:func:`fan_out`, behind
``ctx.map``: a bundle's apps, an item's shuffles and panel models). Neither decides how many calls
reach the model: every call passes its backend's :class:`gen.llm.admission.Admission`, one budget
for the whole command, so a finished call frees its place for any waiting one, whichever record
or map it belongs to, and there is no batch barrier.

Results come back in input order and every record draws from its own seeds, so records do not
depend on scheduling; with a width of 1 both run in the caller's thread, one after another.

The items of nested maps run on one shared set of helper threads (:class:`Helpers`, one per
command). A map's caller runs items too, so a map never waits for a helper that is busy elsewhere:
nested maps cannot deadlock, and the threads stay bounded however deep they nest.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from gen.llm import set_worker, worker

T = TypeVar("T")
R = TypeVar("R")
MAX_HELPERS = 512


class Helpers:
    """Daemon threads that run the items of maps: one more is started whenever a job would
    otherwise wait for an idle one (up to ``cap``), so every map gets the runners it asked for."""

    def __init__(self, cap: int = MAX_HELPERS):
        self.cap = cap
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle = 0
        """Threads waiting for a job."""
        self._queued = 0
        """Jobs submitted and not yet taken."""

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            self._queued += 1
            if self._idle < self._queued and len(self._threads) < self.cap:
                t = threading.Thread(
                    target=self._loop, daemon=True, name=f"gen-helper-{len(self._threads)}"
                )
                t.start()
                self._threads.append(t)
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                if job is not None:
                    self._queued -= 1
            if job is None:
                return
            job()  # a job catches its own errors

    def close(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)


def fan_out(fn: Callable[[T], R], items: Iterable[T], width: int, helpers: Helpers) -> list[R]:
    """``[fn(x) for x in items]`` with up to ``width`` items at once (the caller and helpers).

    The first failure stops new items from starting; once the started ones end, the failure of
    the earliest item is raised (as a sequential loop would have raised it, had it got there).
    A call deferred to a batch (:mod:`gen.llm.batch`'s collecting pass) stops nothing: the
    other items' calls go in the same batch.
    Each runner keeps the caller's worker number (:func:`gen.llm.worker`), or numbers itself
    when the caller has none, so a server backend sends related calls to one slot.
    """
    items = list(items)
    n = len(items)
    if width <= 1 or n <= 1:
        out, deferred = [], None
        for x in items:
            try:
                out.append(fn(x))
            except Exception as e:
                if not _deferred(e):
                    if deferred is None:
                        raise
                    raise deferred from None  # the earliest failure, as below
                deferred = deferred or e
        if deferred is not None:
            raise deferred
        return out
    results: list[Any] = [None] * n
    errors: dict[int, BaseException] = {}
    lock = threading.Condition()
    state = {"next": 0, "running": 0, "stop": False}
    parent = worker()

    def drain(number: int) -> None:  # one worker: takes items until none is left
        own = worker()
        set_worker(parent if parent is not None else number)
        try:
            while True:
                with lock:
                    i = state["next"]
                    if i >= n or state["stop"]:
                        return
                    state["next"] += 1
                    state["running"] += 1
                try:
                    results[i] = fn(items[i])
                except BaseException as e:  # noqa: BLE001 - raised in the caller, in input order
                    with lock:
                        errors[i] = e
                        state["stop"] = state["stop"] or not _deferred(e)
                finally:
                    with lock:
                        state["running"] -= 1
                        lock.notify_all()
        finally:
            set_worker(own)

    runners = min(width, n)
    for k in range(1, runners):
        helpers.submit(lambda k=k: drain(k))  # type: ignore[misc]
    drain(0)
    with lock:
        while state["running"]:
            lock.wait()
    if errors:
        raise errors[min(errors)]
    return results


def _deferred(e: BaseException) -> bool:
    """A call written down for a batch (its ``LLMOutputError`` reason is ``deferred``)."""
    return getattr(e, "reason", None) == "deferred"


def ordered(fn: Callable[[T], R], items: Iterable[T], *, workers: int, window: int) -> Iterator[R]:
    """``fn`` over ``items`` with up to ``workers`` at once, results yielded in input order as soon
    as each one's predecessors are; at most ``window`` results are under way or waiting to be
    yielded (a run's records stream, a bounded number in memory). ``workers <= 1``: one after
    another in the caller's thread. A failure is raised when its item's turn comes; the items
    under way then end before this returns, and none queued starts. Ctrl-C does not wait for them:
    the workers are daemon threads, so the run stops (and its server with it) at once."""
    if workers <= 1:
        for x in items:
            yield fn(x)
        return
    numbers = itertools.count()
    jobs: queue.SimpleQueue[tuple[Future[R], T] | None] = queue.SimpleQueue()
    stop = threading.Event()

    def loop() -> None:
        set_worker(next(numbers))
        while (job := jobs.get()) is not None:
            future, x = job
            if stop.is_set() or not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(x))
            except BaseException as e:  # noqa: BLE001 - raised in the caller, in input order
                future.set_exception(e)

    threads = [
        threading.Thread(target=loop, daemon=True, name=f"gen-record-{k}") for k in range(workers)
    ]
    for t in threads:
        t.start()

    def submit(x: T) -> Future[R]:
        future: Future[R] = Future()
        jobs.put((future, x))
        return future

    pending: deque[Future[R]] = deque()
    it = iter(items)
    interrupted = False
    try:
        for x in itertools.islice(it, max(window, workers)):
            pending.append(submit(x))
        while pending:
            result = pending.popleft().result()
            for x in itertools.islice(it, 1):
                pending.append(submit(x))
            yield result
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:  # an error (a backend that stopped the run) leaves nothing queued behind it
        stop.set()
        for future in pending:
            future.cancel()
        for _ in threads:
            jobs.put(None)
        if not interrupted:
            for t in threads:
                t.join()
