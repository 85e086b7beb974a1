"""A loopback stand-in for an OpenAI-compatible server with the Batch API, for the batch-mode
tests (test_batch.py): chat completions answered live by a script ``f(messages, seed) -> text``
(as :class:`tests.loopback.Loopback`), and ``POST /v1/files``, ``GET /v1/files/{id}/content``,
``POST /v1/batches``, ``GET /v1/batches/{id}`` answering a batch's lines with the same script.

A batch goes validating -> in_progress -> ``outcome`` (``completed``, ``failed`` or
``expired``) over ``polls`` looks at it, and waits in progress while ``hold`` is set; the
lines ``fail(body)`` picks come back in the error file. It counts uploads, submissions, polls
and live chat calls, and keeps every request's Authorization header."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any

from loopback import JSONHandler


def completion(text: str) -> dict[str, Any]:
    """The chat completion of ``text`` (10 prompt tokens, a token per 4 characters)."""
    n = max(1, len(text) // 4)
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "loopback",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n},
    }


class BatchStandIn:
    """``with BatchStandIn(script) as srv: ... srv.url, srv.submissions``."""

    def __init__(
        self,
        script: Callable[[list[dict[str, str]], int], str],
        *,
        outcome: str = "completed",
        polls: int = 2,
        fail: Callable[[dict[str, Any]], bool] = lambda body: False,
    ):
        self.script, self.outcome, self.polls, self.fail = script, outcome, polls, fail
        self.uploads = self.submissions = self.looks = self.chat_calls = 0
        self.hold = threading.Event()
        """Set: batches stay in progress (cleared: they go on)."""
        self.polled = threading.Event()
        """Set at the first look at a batch."""
        self.authorization: list[str | None] = []
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        owner = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server interface
                owner.authorization.append(self.headers.get("Authorization"))
                parts = self.path.strip("/").split("/")
                if parts[1:2] == ["files"] and parts[3:] == ["content"]:
                    with owner._lock:
                        data = owner.files.get(parts[2])
                    self._send(200, data) if data is not None else self._send(404, {})
                elif parts[1:2] == ["batches"] and len(parts) == 3:
                    self._send(200, owner._look(parts[2]))
                else:
                    self._send(200, {"object": "list", "data": [{"id": "loopback"}]})

            def do_POST(self) -> None:  # noqa: N802
                owner.authorization.append(self.headers.get("Authorization"))
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.endswith("/files"):
                    self._send(200, owner._upload(raw, self.headers.get("Content-Type", "")))
                elif self.path.endswith("/batches"):
                    self._send(200, owner._create(json.loads(raw)))
                else:
                    req = json.loads(raw)
                    with owner._lock:
                        owner.chat_calls += 1
                        text = owner.script(req["messages"], int(req.get("seed") or 0))
                    self._send(200, completion(text))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _upload(self, raw: bytes, ctype: str) -> dict[str, Any]:
        boundary = ctype.split("boundary=")[1].encode()
        content = None
        for part in raw.split(b"--" + boundary):
            head, _, body = part.partition(b"\r\n\r\n")
            if b'name="file"' in head:
                content = body[: -len(b"\r\n")] if body.endswith(b"\r\n") else body
            elif b'name="purpose"' in head:
                assert body.strip() == b"batch", body
        assert content is not None
        with self._lock:
            self.uploads += 1
            file_id = f"file-{self.uploads}"
            self.files[file_id] = content
        return {"id": file_id, "object": "file", "purpose": "batch", "bytes": len(content)}

    def _create(self, req: dict[str, Any]) -> dict[str, Any]:
        assert req["endpoint"] == "/v1/chat/completions" and req["completion_window"] == "24h"
        with self._lock:
            self.submissions += 1
            batch_id = f"batch_{self.submissions}"
            self.batches[batch_id] = {
                "id": batch_id,
                "object": "batch",
                "input_file_id": req["input_file_id"],
                "status": "validating",
                "looks": 0,
            }
        return self._public(batch_id)

    def _public(self, batch_id: str) -> dict[str, Any]:
        return {k: v for k, v in self.batches[batch_id].items() if k != "looks"}

    def _look(self, batch_id: str) -> dict[str, Any]:
        self.polled.set()
        with self._lock:
            self.looks += 1
            batch = self.batches[batch_id]
            if batch["status"] in ("validating", "in_progress"):
                batch["looks"] += 1
                batch["status"] = "in_progress"
                if batch["looks"] >= self.polls and not self.hold.is_set():
                    self._end(batch)
            return self._public(batch_id)

    def _end(self, batch: dict[str, Any]) -> None:
        lines = [json.loads(x) for x in self.files[batch["input_file_id"]].splitlines()]
        if self.outcome == "failed":
            batch["status"] = "failed"
            batch["errors"] = {
                "object": "list",
                "data": [
                    {"code": "invalid_request", "message": "the model is not served in batch"}
                ],
            }
            return
        out, errors = [], []
        for i, line in enumerate(lines):
            body = line["body"]
            if self.outcome == "expired" and i % 2:
                errors.append(
                    {
                        "id": f"r{i}",
                        "custom_id": line["custom_id"],
                        "response": None,
                        "error": {"code": "batch_expired", "message": "not done in time"},
                    }
                )
            elif self.fail(body):
                errors.append(
                    {
                        "id": f"r{i}",
                        "custom_id": line["custom_id"],
                        "response": {
                            "status_code": 400,
                            "body": {"error": {"message": "this line is refused"}},
                        },
                        "error": None,
                    }
                )
            else:
                text = self.script(body["messages"], int(body.get("seed") or 0))
                out.append(
                    {
                        "id": f"r{i}",
                        "custom_id": line["custom_id"],
                        "response": {"status_code": 200, "body": completion(text)},
                        "error": None,
                    }
                )
        batch["status"] = "expired" if self.outcome == "expired" else "completed"
        batch["request_counts"] = {
            "total": len(lines),
            "completed": len(out),
            "failed": len(errors),
        }
        for what, rows in (("output_file_id", out), ("error_file_id", errors)):
            if rows:
                file_id = f"{batch['id']}-{what}"
                self.files[file_id] = "".join(json.dumps(r) + "\n" for r in rows).encode()
                batch[what] = file_id

    def __enter__(self) -> BatchStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
