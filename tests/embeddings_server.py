"""A loopback stand-in for an OpenAI-compatible embeddings server, as real ones behave: vectors
not normalised, ``data`` in any order with each ``index``, a 429 with ``Retry-After`` now and
then, many requests at once."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


class EmbeddingsServer:
    """``/v1/embeddings`` on 127.0.0.1, answered with ``encode``'s vectors times a random scale
    and in a shuffled order; the first ``throttle`` requests get a 429 (``Retry-After: 0``)."""

    def __init__(
        self,
        encode: Callable[[list[str]], np.ndarray],
        *,
        throttle: int = 0,
        latency: float = 0.0,
        together: int = 0,
    ):
        self.encode, self.throttle, self.latency = encode, throttle, latency
        self.barrier = threading.Barrier(together, timeout=10) if together else None
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.in_flight = self.max_in_flight = 0
        rng = random.Random(0)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def reply(self, status: int, body: dict[str, Any], **headers: str) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 - http.server's interface
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner.lock:
                    owner.requests.append(body)
                    owner.auth.append(self.headers.get("Authorization"))
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                    throttled = len(owner.requests) <= owner.throttle
                try:
                    if self.path != "/v1/embeddings":
                        return self.reply(404, {"error": {"message": "no such route"}})
                    if throttled:
                        return self.reply(
                            429, {"error": {"message": "busy"}}, **{"Retry-After": "0"}
                        )
                    if owner.barrier is not None:
                        owner.barrier.wait()  # raises (a 500 below) unless enough came at once
                    time.sleep(owner.latency)
                    vecs = owner.encode(body["input"])
                    data = [
                        {"object": "embedding", "index": i, "embedding": [float(x) for x in v * s]}
                        for i, (v, s) in enumerate(
                            zip(vecs, [rng.uniform(0.5, 4) for _ in vecs], strict=True)
                        )
                    ]
                    rng.shuffle(data)
                    self.reply(200, {"object": "list", "data": data, "model": body["model"]})
                except threading.BrokenBarrierError:
                    self.reply(500, {"error": {"message": "requests did not come together"}})
                finally:
                    with owner.lock:
                        owner.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
