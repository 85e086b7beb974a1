"""Servers that misbehave, through the stand-in server
(``tests/fixtures/server/fake_llama_server.py``): each misbehaviour ends as a typed reject
(``backend_error``) or a bounded retry, within the call's wall-clock deadline; a bad reply never
enters the cache; the run's deadline stops a run."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from processes import requests, stand_in
from pydantic import BaseModel

from gen.errors import BackendError, LLMOutputError
from gen.llm import Cache, OpenAIConfig, make_llm

MESSAGES = [{"role": "user", "content": "Write a one-sentence bio."}]


class Bio(BaseModel):
    bio: str


@pytest.fixture(autouse=True)
def _direct(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")


def llm_at(url: str, cache: Cache | None = None, **over: Any) -> Any:
    cfg = {
        "base_url": url,
        "max_retries": 1,
        "timeout": 10,
        "concurrency": 1,
        "attempts": 1,
        **over,
    }
    return make_llm(OpenAIConfig(**cfg), cache)


def ask(llm: Any, seed: int = 1) -> tuple[str | None, str, float]:
    """(the bio or None, the reject reason and detail or "", seconds) of one structured call."""
    t0 = time.monotonic()
    try:
        return llm.structured(MESSAGES, Bio, seed=seed).bio, "", time.monotonic() - t0
    except LLMOutputError as e:
        return None, f"{e.reason}: {e.detail}", time.monotonic() - t0


def posts(log: Path) -> int:
    return len(requests(log))


# --------------------------------------------------------------------------- retried, then answered


@pytest.mark.parametrize("mode", ["429", "503"])
def test_a_busy_server_is_waited_for_as_its_retry_after_says(tmp_path: Path, mode: str) -> None:
    with stand_in(tmp_path, "--misbehave", mode, "--bad-requests", "2", "--retry-after", "1") as (
        url,
        log,
    ):
        bio, why, seconds = ask(llm_at(url, max_retries=3))
    assert bio is not None and why == ""
    assert posts(log) == 3 and 2.0 <= seconds < 8  # two waits of Retry-After: 1


def test_a_retry_after_past_the_deadline_fails_at_once(tmp_path: Path) -> None:
    with stand_in(tmp_path, "--misbehave", "503", "--retry-after", "120") as (url, log):
        bio, why, seconds = ask(llm_at(url, max_retries=5, timeout=5))
    assert bio is None and seconds < 3 and posts(log) == 1
    assert why == (
        "backend_error: HTTP 503 (busy, come back later) (Retry-After 120 s) (its Retry-After "
        "of 120 s is past the call's llm.timeout=5 s)"
    )


@pytest.mark.parametrize("mode", ["notjson", "empty", "badshape", "cutoff", "reset"])
def test_a_bad_reply_once_is_retried(tmp_path: Path, mode: str) -> None:
    with stand_in(tmp_path, "--misbehave", mode, "--bad-requests", "1") as (url, log):
        bio, why, _ = ask(llm_at(url, max_retries=1))
    assert bio is not None and why == "" and posts(log) == 2


@pytest.mark.parametrize(
    ("mode", "detail"),
    [
        (
            "notjson",
            "HTTP 200 but the reply is not JSON (it starts '<html><body>502 Bad "
            "Gateway</body></html>')",
        ),
        ("empty", "the reply holds no text (an empty message)"),
        ("badshape", "the reply is not a chat completion (choices: a str)"),
        (
            "cutoff",
            "the connection failed (RemoteProtocolError: peer closed connection without sending "
            "complete message body",
        ),
        ("reset", "the connection failed (ReadError: [Errno 104] Connection reset by peer)"),
    ],
)
def test_a_bad_reply_every_time_is_a_typed_reject_after_bounded_tries(
    tmp_path: Path, mode: str, detail: str
) -> None:
    cache = Cache(tmp_path / "cache" / "llm.sqlite")
    with stand_in(tmp_path, "--misbehave", mode) as (url, log):
        bio, why, seconds = ask(llm_at(url, cache, max_retries=2, attempts=3))
    assert (
        bio is None and why.startswith(f"backend_error: {detail}") and why.endswith("after 3 tries")
    )
    assert posts(log) == 3 and seconds < 10  # max_retries=2: 3 requests; no re-ask of a failed call
    # nothing was cached: a healthy server is asked again, and answers
    with stand_in(tmp_path) as (url, log):
        bio, why, _ = ask(llm_at(url, cache))
    assert bio is not None and posts(log) == 1


# --------------------------------------------------------------------------- deadlines


@pytest.mark.parametrize("mode", ["silent-after-models", "trickle"])
def test_llm_timeout_is_a_wall_clock_deadline(tmp_path: Path, mode: str) -> None:
    """A server that never answers a chat call, and one that sends its reply (headers included)
    a byte a second: the call ends at llm.timeout, however many retries are allowed."""
    with stand_in(tmp_path, "--misbehave", mode) as (url, log):
        bio, why, seconds = ask(llm_at(url, timeout=3, max_retries=5, max_consecutive_errors=0))
    assert bio is None and why == "backend_error: no complete answer within llm.timeout=3 s"
    assert 2.9 <= seconds < 4.5 and posts(log) == 1


def test_a_server_that_never_answers_is_cut_at_the_timeout_without_preflight(
    tmp_path: Path,
) -> None:
    with stand_in(tmp_path, "--misbehave", "silent") as (url, _):
        bio, why, seconds = ask(
            llm_at(url, timeout=2, preflight_timeout=0, max_consecutive_errors=0)
        )
    assert bio is None and why == "backend_error: no complete answer within llm.timeout=2 s"
    assert seconds < 3.5


def test_a_server_that_answered_nothing_stops_the_run_at_its_first_timeout(tmp_path: Path) -> None:
    """Without this, a server that accepts calls and never answers costs max_consecutive_errors
    whole timeouts (25 minutes with the defaults); a server that did answer before gets the
    streak (a slow call among good ones is a reject)."""
    with stand_in(tmp_path, "--misbehave", "silent-after-models") as (url, _):
        llm = llm_at(url, timeout=2)
        t0 = time.monotonic()
        with pytest.raises(
            BackendError,
            match=r"answered no call yet, and this one failed: no complete "
            r"answer within llm.timeout=2 s; the run stops here",
        ):
            llm.structured(MESSAGES, Bio, seed=1)
        assert time.monotonic() - t0 < 3.5
    with stand_in(tmp_path, "--misbehave", "silent-after-models", "--good-first", "1") as (
        url,
        log,
    ):
        llm = llm_at(url, timeout=2)
        assert ask(llm, seed=1)[0] is not None
        bio, why, _ = ask(llm, seed=2)
        assert bio is None and why == "backend_error: no complete answer within llm.timeout=2 s"


def test_the_run_deadline_stops_the_run(tmp_path: Path) -> None:
    """llm.deadline cuts the call in flight when it passes (long before llm.timeout) and stops
    the run (BackendError: exit 2), and every later call is refused at once."""
    with stand_in(tmp_path, "--misbehave", "silent-after-models") as (url, _):
        llm = llm_at(url, timeout=100, deadline=2)
        t0 = time.monotonic()
        with pytest.raises(
            BackendError,
            match=r"the run's model calls passed llm.deadline=2 s; the run "
            r"stops here \(its records so far stay",
        ):
            llm.structured(MESSAGES, Bio, seed=1)
        assert time.monotonic() - t0 < 3.5
        with pytest.raises(BackendError, match="llm.deadline=2 s"):
            llm.structured(MESSAGES, Bio, seed=2)


# --------------------------------------------------------------------------- bounded replies


def test_a_reply_that_ignores_max_tokens_is_cut_off_and_not_asked_again(tmp_path: Path) -> None:
    """A 30 MB reply to max_tokens=64: read up to about 1 MB, not retried, not re-asked (the
    issue's run sent 1.35 GB back for one persona)."""
    with stand_in(tmp_path, "--misbehave", "huge") as (url, log):
        bio, why, seconds = ask(llm_at(url, max_retries=3, attempts=3, max_tokens=64))
    assert bio is None and why.startswith(
        "backend_error: the reply passed 1,052,672 bytes and was cut off "
        "(does the server ignore max_tokens?)"
    )
    sent = requests(log)
    assert len(sent) == 1 and sent[0]["bytes"] < 10_000 and seconds < 10


def test_usage_over_max_tokens_is_refused(tmp_path: Path) -> None:
    from gen.llm.http import ServerError
    from gen.llm.openai_compat import chat_completion

    reply = {
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "x"}}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 500, "total_tokens": 501},
    }
    with pytest.raises(ServerError, match="500 completion tokens for max_tokens=64") as info:
        chat_completion(reply, 64)
    assert not info.value.retry
    assert chat_completion(reply, 500).choices[0].message.content == "x"


def test_other_servers_finish_reasons_are_mapped() -> None:
    from gen.llm.openai_compat import chat_completion

    def finish(reason: Any) -> str:
        reply = {"choices": [{"finish_reason": reason, "message": {"content": "x"}}]}
        return chat_completion(reply, 16).choices[0].finish_reason

    assert [finish(r) for r in (None, "eos_token", "stop", "max_tokens", "length")] == [
        "stop",
        "stop",
        "stop",
        "length",
        "length",
    ]


# --------------------------------------------------------------------------- the cache


def test_a_poisoned_cache_row_is_asked_again(tmp_path: Path) -> None:
    """A row an older version cached unchecked (``{"choices": "nope"}``) is not replayed: the
    call goes to the server, and the row is replaced by the good reply."""
    cache = Cache(tmp_path / "cache" / "llm.sqlite")
    keys: list[str] = []
    put_many = cache.put_many  # a call's replies are kept together once its answer is valid

    def keep(rows: Any) -> None:
        keys.extend(k for k, _ in rows)
        put_many(rows)

    cache.put_many = keep  # type: ignore[method-assign]
    with stand_in(tmp_path) as (url, log):
        assert ask(llm_at(url, cache))[0] is not None
        cache.put(keys[0], json.dumps({"choices": "nope"}))
        bio, why, _ = ask(llm_at(url, cache))
        assert bio is not None and posts(log) == 2
        assert json.loads(cache.get(keys[0]) or "{}")["choices"][0]["message"]["content"]
        assert ask(llm_at(url, cache))[0] is not None and posts(log) == 2  # now a hit


def test_a_bad_reply_from_any_backend_is_not_cached(tmp_path: Path) -> None:
    """The boundary checks every backend's reply before caching it (not only the HTTP one's)."""
    from gen.llm import scripted_llm

    cache = Cache(tmp_path / "c.sqlite")
    llm = scripted_llm(['{"bio": "x"}'], cache=cache)
    good = llm._create

    def broken(**kwargs: Any) -> Any:
        reply = good(**kwargs)
        reply.choices = []
        return reply

    llm._create = broken
    with pytest.raises(
        LLMOutputError, match="backend_error: the backend's reply is not a chat completion"
    ):
        llm.structured(MESSAGES, Bio, seed=1)
    replay = scripted_llm(['{"bio": "y"}'], cache=cache)
    assert replay.structured(MESSAGES, Bio, seed=1).bio == "y" and len(replay.calls) == 1


# --------------------------------------------------------------------------- the CLI


def _one_line(proc: Any, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # every line parses


def test_a_run_stopped_by_a_bad_server_resumes_from_its_good_replies(
    run_gen, tmp_path: Path
) -> None:
    """The issue's case: a server that answers ``{"choices": "nope"}`` stops the run after 5 calls
    in a row; rerun into the same folder against a healthy server, the 3 good replies replay from
    the cache and the 5 bad ones are asked again (before, the bad replies were cached and the
    healthy server saw only GET /models)."""
    run = tmp_path / "run"
    args = [
        "personas",
        "n=8",
        "attempts=1",
        "draws=1",
        "widen=none",
        "llm=openai",
        "llm.max_retries=0",
        "llm.concurrency=1",
        "progress=off",
        f"hydra.run.dir={run}",
    ]
    with stand_in(tmp_path, "--misbehave", "badshape", "--good-first", "3") as (url, log):
        line = _one_line(run_gen(*args, f"llm.base_url={url}", timeout=300), 2)
        assert len(requests(log)) == 8
    assert (
        "failed 5 calls in a row" in line
        and "the reply is not a chat completion (choices: a str)" in line
    )
    partial = _rows(run / "rejects.jsonl.partial")
    assert [r["reason"] for r in partial][3:] == ["backend_error"] * 4 and len(partial) == 7
    with stand_in(tmp_path) as (url, log):
        proc = run_gen(*args, f"llm.base_url={url}", timeout=300)
        assert len(requests(log)) == 5
    assert proc.returncode == 1 and "the persona pool has 0 of 8 personas" in _one_line(proc, 1)
    final = _rows(run / "rejects.jsonl")
    assert [r["index"] for r in final] == list(range(8)) and "backend_error" not in {
        r["reason"] for r in final
    }
    assert final[:3] == partial[:3]


def test_a_trickling_server_stops_the_run_in_bounded_time(run_gen, tmp_path: Path) -> None:
    """Before: past 90 s with llm.timeout=5 max_retries=0. Now a call ends at llm.timeout: after
    one good answer, the streak stops the run (5 calls of 3 s, retries not taken: time is up)."""
    with stand_in(tmp_path, "--misbehave", "trickle", "--good-first", "1") as (url, log):
        t0 = time.monotonic()
        # one call at a time, so the count of requests is exact (at llm.concurrency=k, up to k-1
        # more calls are under way when the streak stops the run)
        proc = run_gen(
            "personas",
            "n=20",
            "attempts=1",
            "draws=1",
            "widen=none",
            "llm=openai",
            f"llm.base_url={url}",
            "llm.timeout=3",
            "llm.max_retries=2",
            "llm.concurrency=1",
            "progress=off",
            f"hydra.run.dir={tmp_path / 'run'}",
            timeout=300,
        )
        seconds = time.monotonic() - t0
    line = _one_line(proc, 2)
    assert "failed 5 calls in a row" in line and "no complete answer within llm.timeout=3 s" in line
    assert 6 <= len(requests(log)) <= 7 and seconds < 60
    rejects = _rows(tmp_path / "run" / "rejects.jsonl.partial")
    assert [r["reason"] for r in rejects][1:] == ["backend_error"] * 4
