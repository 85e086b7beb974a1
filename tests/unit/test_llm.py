"""The LLM boundary with a scripted backend: parsing, re-asks, truncation, errors, cache, usage."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from conftest import loopback_server
from pydantic import BaseModel, Field

from gen.errors import LLMOutputError
from gen.llm import Cache, LlamaCppConfig, OpenAIConfig, make_llm, scripted_llm, sha256_file

MESSAGES = [{"role": "system", "content": "Reply with JSON."}, {"role": "user", "content": "A bio."}]


class Bio(BaseModel):
    bio: str


class Item(BaseModel):
    title: str
    minutes: int = Field(ge=0)


def _structured(llm, schema=Bio, seed: int = 1, **kw):
    return llm.structured(MESSAGES, schema, seed=seed, **kw)


# --------------------------------------------------------------------------- parsing


def test_clean_json_parses_in_one_call() -> None:
    llm = scripted_llm(['{"bio": "Ada writes compilers."}'])
    result = _structured(llm)
    assert isinstance(result, Bio) and result.bio == "Ada writes compilers."
    assert len(llm.calls) == 1
    assert llm.usage.calls == 1 and llm.usage.cache_hits == 0


def test_request_carries_seed_sampling_and_schema() -> None:
    llm = scripted_llm(['{"title": "t", "minutes": 3}'], sampling=LlamaCppConfig(temperature=0.2, top_p=0.5))
    _structured(llm, Item, seed=77, max_tokens=64)
    call = llm.calls[0]
    assert call["seed"] == 77
    assert (call["temperature"], call["top_p"], call["max_tokens"]) == (0.2, 0.5, 64)
    assert call["messages"] == MESSAGES
    # llama.cpp takes the schema as json_object + schema (converted from instructor's json_schema)
    rf = call["response_format"]
    assert rf["type"] == "json_object"
    assert set(rf["schema"]["properties"]) == {"title", "minutes"}
    assert set(rf["schema"]["required"]) == {"title", "minutes"}


def test_default_max_tokens_comes_from_sampling() -> None:
    llm = scripted_llm(['{"bio": "x"}'], sampling=LlamaCppConfig(max_tokens=321))
    _structured(llm)
    assert llm.calls[0]["max_tokens"] == 321


@pytest.mark.parametrize(
    "noisy",
    [
        '```json\n{"bio": "fenced"}\n```',  # markdown fence
        '{"bio": 5}',  # wrong type
        '{"biography": "wrong key"}',  # missing field
        "Sure! Here is the bio you asked for.",  # prose, not JSON
    ],
)
def test_noisy_output_is_reasked_with_the_error(noisy: str) -> None:
    llm = scripted_llm([noisy, '{"bio": "clean"}'])
    result = _structured(llm)
    if len(llm.calls) == 1:  # a lenient parser may accept the fence outright
        assert result.bio == "fenced"
        return
    assert result.bio == "clean"
    assert len(llm.calls) == 2
    reask = llm.calls[1]["messages"]
    # the re-ask replays the conversation, the bad answer, and the validation error
    assert reask[: len(MESSAGES)] == MESSAGES
    assert reask[len(MESSAGES)] == {"role": "assistant", "content": noisy}
    assert reask[-1]["role"] == "user" and "bio" in reask[-1]["content"]


@pytest.mark.parametrize("attempts", [1, 2, 3])
def test_invalid_after_all_attempts_keeps_raw(attempts: int) -> None:
    outputs = [f'{{"bio": {i}}}' for i in range(10)]
    llm = scripted_llm(outputs, sampling=LlamaCppConfig(attempts=attempts))
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    err = info.value
    assert err.reason == "invalid_output"
    # exactly ``attempts`` tries, and raw is the last one
    assert len(llm.calls) == attempts
    assert err.raw == outputs[attempts - 1]
    assert f"{attempts} attempts" in err.detail
    assert "string" in err.detail.lower()  # the validation error, not instructor's wrapper
    assert "<failed_attempts>" not in err.detail


def test_truncated_output() -> None:
    llm = scripted_llm([('{"bio": "abc', "length")])
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    assert info.value.reason == "truncated"
    assert info.value.raw == '{"bio": "abc'
    assert len(llm.calls) == 1  # truncation is not re-asked: the same cap would truncate again


def test_truncated_after_a_reask() -> None:
    llm = scripted_llm(['{"bio": 5}', ('{"bio": "abc', "length")])
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    assert info.value.reason == "truncated"
    assert info.value.raw == '{"bio": "abc'


def test_backend_failure_is_backend_error() -> None:
    def down(messages, seed):
        raise ConnectionError("server went away")

    llm = scripted_llm(down)
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    assert info.value.reason == "backend_error"
    assert "ConnectionError" in info.value.detail and "server went away" in info.value.detail
    assert info.value.raw is None


def test_callable_script_sees_messages_and_seed() -> None:
    seen: list[tuple[str, int]] = []

    def script(messages, seed):
        seen.append((messages[-1]["content"], seed))
        return json.dumps({"bio": f"seed {seed}"})

    llm = scripted_llm(script)
    assert _structured(llm, seed=5).bio == "seed 5"
    assert _structured(llm, seed=6).bio == "seed 6"
    assert seen == [("A bio.", 5), ("A bio.", 6)]


# --------------------------------------------------------------------------- cache


def test_identical_call_is_a_cache_hit(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    first = scripted_llm(['{"bio": "from the model"}'], cache=cache)
    assert _structured(first, seed=3).bio == "from the model"
    assert (first.usage.calls, first.usage.cache_hits) == (1, 0)

    # A second LLM whose script is empty: any real call would fail.
    second = scripted_llm([], cache=cache)
    assert _structured(second, seed=3).bio == "from the model"
    assert second.calls == []
    assert (second.usage.calls, second.usage.cache_hits) == (1, 1)
    assert second.usage.completion_tokens == 0
    assert second.usage.cached_completion_tokens == first.usage.completion_tokens > 0


def test_different_seed_is_a_miss(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    _structured(scripted_llm(['{"bio": "seed three"}'], cache=cache), seed=3)
    other = scripted_llm(['{"bio": "seed four"}'], cache=cache)
    assert _structured(other, seed=4).bio == "seed four"
    assert len(other.calls) == 1 and other.usage.cache_hits == 0


@pytest.mark.parametrize(
    "change",
    [
        {"messages": [{"role": "user", "content": "Another bio."}]},
        {"max_tokens": 99},
        {"schema": Item},
    ],
    ids=["messages", "max_tokens", "schema"],
)
def test_any_request_change_is_a_miss(tmp_path: Path, change: dict[str, Any]) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    _structured(scripted_llm(['{"bio": "first"}'], cache=cache), seed=3)
    schema = change.get("schema", Bio)
    llm = scripted_llm(['{"title": "t", "minutes": 1}' if schema is Item else '{"bio": "second"}'],
                       cache=cache)
    llm.structured(change.get("messages", MESSAGES), schema, seed=3,
                   max_tokens=change.get("max_tokens"))
    assert len(llm.calls) == 1 and llm.usage.cache_hits == 0


def test_model_identity_is_part_of_the_key(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    _structured(scripted_llm(['{"bio": "model a"}'], cache=cache), seed=3)
    other = scripted_llm(['{"bio": "model b"}'], cache=cache)
    other.identity = {"backend": "scripted", "model": "another"}
    assert _structured(other, seed=3).bio == "model b"


def test_reasks_are_cached_and_replayed(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    first = scripted_llm(['{"bio": 5}', '{"bio": "fixed"}'], cache=cache)
    assert _structured(first).bio == "fixed"
    replay = scripted_llm([], cache=cache)
    assert _structured(replay).bio == "fixed"
    assert (replay.usage.calls, replay.usage.cache_hits, len(replay.calls)) == (2, 2, 0)


def test_failures_are_cached_too(tmp_path: Path) -> None:
    """A rerun must reproduce rejects as well as records."""
    cache = Cache(tmp_path / "c.sqlite")
    with pytest.raises(LLMOutputError):
        _structured(scripted_llm([('{"bio": "ab', "length")], cache=cache))
    with pytest.raises(LLMOutputError) as info:
        _structured(scripted_llm([], cache=cache))
    assert info.value.reason == "truncated" and info.value.raw == '{"bio": "ab'


def test_cache_persists_across_connections(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "c.sqlite"
    Cache(path).put("k", "v")
    assert Cache(path).get("k") == "v"
    assert Cache(path).get("missing") is None


def test_cache_is_thread_safe(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")

    def work(t: int) -> None:
        for i in range(50):
            cache.put(f"{t}-{i}", str(i))
            assert cache.get(f"{t}-{i}") == str(i)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rows = cache._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    assert rows == 400


def test_file_sha256(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    f = tmp_path / "weights.bin"
    data = os.urandom(3 * (1 << 20) + 17)  # spans several read blocks
    f.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert cache.file_sha256(f) == expected == sha256_file(f)
    assert cache.file_sha256(f) == expected  # memoised answer is the same
    # a changed file (new mtime) is hashed again
    f.write_bytes(b"other" + data[5:])
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert cache.file_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest() != expected


def test_usage_and_describe() -> None:
    llm = scripted_llm(['{"bio": 1}', '{"bio": "ok"}'])
    _structured(llm)
    usage = llm.usage.as_dict()
    assert usage["calls"] == 2 and usage["cache_hits"] == 0
    assert usage["prompt_tokens"] == 20  # the scripted backend reports 10 per call
    assert usage["completion_tokens"] > 0
    described = llm.describe()
    assert described["backend"] == "scripted"
    assert described["sampling"]["attempts"] == 3


# --------------------------------------------------------------------------- OpenAI-compatible backend


class _FakeServer(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []
    reply = '{"bio": "from the fake server"}'
    delay = 0.0
    active = max_active = 0
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with cls.lock:
            cls.requests.append({"path": self.path, "body": body})
            cls.active += 1
            cls.max_active = max(cls.max_active, cls.active)
        time.sleep(cls.delay)
        with cls.lock:
            cls.active -= 1
        out = json.dumps({
            "id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": type(self).reply}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[str]:
    _FakeServer.requests = []
    _FakeServer.delay, _FakeServer.active, _FakeServer.max_active = 0.0, 0, 0
    with loopback_server(_FakeServer) as base:
        yield base


@pytest.mark.parametrize("schema_format", ["json_schema", "json_object"])
def test_openai_backend_sends_model_and_schema(fake_server: str, schema_format: str) -> None:
    cfg = OpenAIConfig(base_url=fake_server, model="smollm2", max_retries=0,
                       schema_format=schema_format)
    llm = make_llm(cfg, None)
    assert _structured(llm, seed=9).bio == "from the fake server"
    (req,) = _FakeServer.requests
    body = req["body"]
    assert req["path"] == "/v1/chat/completions"
    assert body["model"] == "smollm2"
    assert body["seed"] == 9
    assert body["response_format"]["type"] == schema_format
    schema = (body["response_format"]["schema"] if schema_format == "json_object"
              else body["response_format"]["json_schema"]["schema"])
    assert schema["required"] == ["bio"]
    assert llm.describe()["backend"] == "openai"


def test_openai_backend_keeps_its_concurrency_in_flight(fake_server: str, tmp_path: Path) -> None:
    """llm=openai (vLLM): ctx.map keeps llm.concurrency requests open at the server at once,
    and the answers come back in input order."""
    from gen.run import RunContext
    from generators.personas import PersonasConfig

    _FakeServer.delay = 0.3
    llm = make_llm(OpenAIConfig(base_url=fake_server, concurrency=4, max_retries=0), None)
    ctx = RunContext("personas", PersonasConfig(cache_dir=None), tmp_path)
    ctx.use(llm=llm)
    t0 = time.perf_counter()
    out = ctx.map(lambda seed: (seed, _structured(llm, seed=seed).bio), range(8))
    assert [seed for seed, _ in out] == list(range(8))
    assert _FakeServer.max_active == 4
    assert sorted(r["body"]["seed"] for r in _FakeServer.requests) == list(range(8)) and llm.usage.calls == 8
    assert time.perf_counter() - t0 < 8 * 0.3  # overlapped, not one after another


def test_openai_backend_down_is_backend_error() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = make_llm(OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=5), None)
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    assert info.value.reason == "backend_error"
