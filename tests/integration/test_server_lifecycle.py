"""The toolkit's llama-server lifecycle seen from outside, through ``python -m gen`` processes:
the server is gone after a finished run, after Ctrl-C, and (Linux) after a SIGKILL of the
toolkit. A stand-in server plays llama-server (tests/fixtures/server), so these run everywhere;
test_llama_server.py does the same with the real binary when it is installed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import FAKE, wait_file, wait_gone

pytestmark = pytest.mark.integration


def test_a_finished_run_leaves_no_server(run_gen, tmp_path: Path, monkeypatch) -> None:
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("FAKE_SERVER_PIDFILE", str(pidfile))
    folder = tmp_path / "run"
    proc = run_gen(
        "personas",
        "n=2",
        "draws=1",
        "widen=none",
        "llm=llama_server",
        f"llm.binary={FAKE}",
        "progress=off",
        f"hydra.run.dir={folder}",
    )
    # The stand-in's bios agree with no persona's facts, so the finished run reports a short
    # pool (exit 1, its files written): the run ran to its end, which is what matters here.
    assert proc.returncode == 1 and "the persona pool has 0 of 2" in proc.stderr, proc.stderr[
        -2000:
    ]
    assert wait_gone(int(wait_file(pidfile)), 5)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["counts"]["rejects_by_reason"] == {"contradiction": 2}
    assert manifest["llm"]["backend"] == "llama_server" and manifest["llm"]["parallel"] == 4
    assert manifest["llm"]["deterministic"] is False
    assert manifest["llm_usage"]["calls"] >= 2


def _start_run(
    tmp_path: Path, env_for, cache_dir: Path, *extra: str
) -> tuple[subprocess.Popen, int]:
    pidfile = tmp_path / "pid"
    env = env_for(cache_dir)
    env["FAKE_SERVER_PIDFILE"] = str(pidfile)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gen",
            "personas",
            "n=50",
            "llm=llama_server",
            f"llm.binary={FAKE}",
            "llm.extra_args=[--delay,'2']",
            "progress=off",
            f"hydra.run.dir={tmp_path / 'run'}",
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, int(wait_file(pidfile))


def test_ctrl_c_stops_the_server(tmp_path: Path, env_for, cache_dir: Path) -> None:
    proc, server_pid = _start_run(tmp_path, env_for, cache_dir)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert wait_gone(server_pid)
    assert not (
        tmp_path / "run" / "personas.jsonl"
    ).exists()  # an interrupted run publishes nothing


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_sigkilled_toolkit_takes_its_server_along(
    tmp_path: Path, env_for, cache_dir: Path
) -> None:
    proc, server_pid = _start_run(tmp_path, env_for, cache_dir)
    proc.kill()
    proc.communicate(timeout=30)
    assert wait_gone(server_pid)
