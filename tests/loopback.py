"""A counting OpenAI-compatible server on 127.0.0.1 for tests of how many calls a run keeps in
flight: each chat call is answered by a script ``f(messages, seed) -> text`` (the scripted
backends of the unit tests) after ``delay`` seconds, as a model server with many slots would;
it counts the calls and the most that were in flight at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    """The stand-in servers' request handler: HTTP/1.1, quiet, and ``_send(status, body)`` of a
    JSON body (or bytes) with its length (tests/batch_standin.py and tests/vlm_server.py too)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any] | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Loopback:
    """``with Loopback(script, delay=0.3) as srv: ... srv.url, srv.max_in_flight, srv.calls``."""

    def __init__(
        self,
        script: Callable[[list[dict[str, str]], int], str],
        delay: float = 0.3,
        throttle_every: int = 0,
    ):
        """``throttle_every``: every that-many-th chat call is refused with 429 and Retry-After:
        0.1."""
        self.script, self.delay, self.throttle_every = script, delay, throttle_every
        self.throttled = 0
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server interface
                self._send(200, {"object": "list", "data": [{"id": "loopback", "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with owner._lock:
                    owner.calls += 1
                    refuse = owner.throttle_every and owner.calls % owner.throttle_every == 0
                    owner.throttled += bool(refuse)
                if refuse:
                    data = b'{"error": "busy"}'
                    self.send_response(429)
                    self.send_header("Retry-After", "0.1")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                with owner._lock:
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                try:
                    time.sleep(owner.delay)
                    with owner._lock:  # scripts keep logs: one answer at a time
                        text = owner.script(req["messages"], int(req.get("seed") or 0))
                finally:
                    with owner._lock:
                        owner.in_flight -= 1
                n = max(1, len(text) // 4)
                self._send(
                    200,
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "loopback",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 10,
                            "completion_tokens": n,
                            "total_tokens": 10 + n,
                        },
                    },
                )

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # many connections open at once

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Loopback:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
