"""Watching processes from tests: is a pid alive, wait for it to go, wait for a pid file."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FAKE = Path(__file__).resolve().parent / "fixtures" / "server" / "fake_llama_server.py"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def wait_file(path: Path, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


@contextmanager
def stand_in(tmp_path: Path, *flags: str, lifetime: float = 120) -> Iterator[tuple[str, Path]]:
    """The stand-in server (``FAKE``) on 127.0.0.1 with ``flags`` (``--misbehave``, ``--api-key``…),
    for at most ``lifetime`` seconds; yields its /v1 URL and its request log (one JSON line per
    request). The process is killed when the block ends."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / f"stand-in-{port}.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(FAKE),
            "--port",
            str(port),
            "--load-seconds",
            "0",
            "--log",
            str(log),
            "--lifetime",
            str(lifetime),
            *flags,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"the stand-in server did not start ({' '.join(flags)})"
                    ) from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1", log
    finally:
        proc.kill()
        proc.wait(10)


def requests(log: Path, method: str | None = "POST") -> list[dict]:
    """The stand-in's logged requests (all, or those of one method)."""
    import json

    if not log.is_file():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if method is None or r["method"] == method]
