"""Batch mode (``llm.batch=true``): a run's calls to an OpenAI-compatible server go through its
Batch API (``POST /files``, ``POST /batches``, ``GET /batches/{id}``, ``GET /files/{id}/content``)
instead of one request each.

A generator calls its model synchronously, so a run in batch mode is made in passes
(:func:`gen.engine.runner.run`):

1. a **collecting pass** runs the generator into a scratch folder: a call that neither the
   batches' results nor the cache can answer is written down (its ``custom_id`` is the call's
   cache key, its body the request the live transport would send) and answered with
   :class:`Deferred`, an ``LLMOutputError`` the generator turns into a reject like any other;
2. the calls written down go to the server as one batch file per model, and the batches are
   polled until they end; their results (and error lines) are kept in the run folder;
3. the next pass replays: calls the results answer are read back through the live path (the
   reply checked as a chat completion, validated under the schema, cached once valid, counted in
   the usage as a call, at ``llm.batch_discount`` times the price); a call that depends on an
   earlier answer (a re-ask, a later stage) is new, and is deferred in turn, so a multi-step
   generator takes one round per step;
4. once a pass defers nothing, the real pass writes the run folder: its records are the live
   run's by construction.

``batches.jsonl`` in the run folder logs every batch (uploaded, submitted, ended), and
``batches/`` holds its request file and its results: a rerun into the same folder (after a
SIGKILL) polls the batches still in flight instead of submitting their calls again, and reads
the ended ones back. No file holds the API key: it is read from its environment variable at
each request, as in live mode.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gen.errors import BackendError, LLMOutputError
from gen.llm.http import Endpoint, ServerError
from gen.llm.secrets import redact_data
from gen.paths import inside

STATE = "batches.jsonl"
"""The run folder's log of its batches (one JSON object a line)."""
FOLDER = "batches"
"""The run folder's batch files: ``<n>.input.jsonl``, ``<batch id>.output.jsonl`` / ``.errors``."""
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
FILE_CAP = 1 << 30
"""The largest results file read (bytes)."""


class _Quiet(logging.Filter):
    """instructor logs every failed call at ERROR: a deferred one has not failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return DEFERRED not in record.getMessage()


DEFERRED = "asked in the next batch"
logging.getLogger("instructor.v2.retry").addFilter(_Quiet())


class Deferred(LLMOutputError):
    """A call written down for the next batch (collecting passes only: the pass's records are
    thrown away)."""

    def __init__(self) -> None:
        super().__init__("deferred", DEFERRED)


class LineFailed(LLMOutputError):
    """A call its batch answered with an error line (or no line): the record's reject."""

    def __init__(self, detail: str):
        super().__init__("batch_error", detail)


class Batcher:
    """One batch-mode model: how its calls become batch lines, go to the server and come back.

    Args:
        endpoint: the server (``llm.base_url``; the key read from its variable per request).
        model: the served model's name.
        window: the batches' ``completion_window``.
        poll: seconds between looks at a batch in progress.
        parse: a result line's body and the call's ``max_tokens`` -> the checked chat completion
            (raises :class:`ServerError` for one that is not).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        *,
        window: str,
        poll: float,
        parse: Callable[[dict[str, Any], int], Any],
    ):
        self.endpoint = endpoint
        self.model = model
        self.window = window
        self.poll = poll
        self.parse = parse
        self.id = hashlib.sha256(json.dumps([endpoint.base_url, model]).encode()).hexdigest()[:16]
        """Which model a batch in ``batches.jsonl`` belongs to (its URL and model name)."""

    def body(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The request body of one call, as the live transport sends it."""
        extra = kwargs.get("extra_body") or {}
        plain = {k: v for k, v in kwargs.items() if v is not None and k != "extra_body"}
        return {"model": self.model, **plain, **extra}

    def reply(self, result: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        """A result line's answer to the call ``kwargs`` as a chat completion.

        Raises:
            LineFailed: the line is an error, or its body is not a chat completion.
        """
        if "error" in result:
            raise LineFailed(str(result["error"]))
        try:
            body = redact_data(result["body"], self.endpoint.key())
            return self.parse(body, int(self.body(kwargs).get("max_tokens") or 4096))
        except ServerError as e:
            raise LineFailed(f"batch {result['batch']}: {e}") from None

    # ------------------------------------------------------------------ the Batch API

    def _call(
        self, method: str, path: str, data: bytes | None = None, ctype: str = "application/json"
    ) -> bytes:
        """One request with the transport's retries; the reply's body (2xx only)."""
        tries = 0
        while True:
            tries += 1
            deadline = time.monotonic() + self.endpoint.timeout
            try:
                status, headers, raw = self.endpoint.request(
                    method, path, data, deadline=deadline, cap=FILE_CAP, ctype=ctype
                )
                if not 200 <= status < 300:
                    raise self.endpoint._status_error(status, headers, raw)
                return raw
            except ServerError as e:
                if not e.retry or tries > self.endpoint.max_retries:
                    raise BackendError(
                        f"llm.batch: {method} {self.endpoint.base_url}{path}: {e}"
                    ) from None
                time.sleep(e.wait if e.wait is not None else min(8.0, 0.5 * 2 ** (tries - 1)))

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        raw = self._call(method, path, None if body is None else json.dumps(body).encode())
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BackendError(f"llm.batch: {method} {path}: the reply is not a JSON object")
        return redact_data(data, self.endpoint.key())

    def upload(self, lines: bytes) -> str:
        """``POST /files`` (purpose ``batch``) -> the file's id."""
        boundary = uuid.uuid4().hex
        data = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                'filename="batch.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n'
            ).encode()
            + lines
            + f"\r\n--{boundary}--\r\n".encode()
        )
        raw = self._call("POST", "/files", data, f"multipart/form-data; boundary={boundary}")
        try:
            file_id = json.loads(raw)["id"]
        except (ValueError, KeyError, TypeError):
            file_id = None
        if not isinstance(file_id, str) or not file_id:
            raise BackendError("llm.batch: POST /files: the reply names no file id")
        return file_id

    def create(self, file_id: str) -> str:
        """``POST /batches`` for an uploaded file -> the batch's id."""
        got = self._json(
            "POST",
            "/batches",
            {
                "input_file_id": file_id,
                "endpoint": "/v1/chat/completions",
                "completion_window": self.window,
            },
        )
        batch_id = got.get("id")
        if not isinstance(batch_id, str) or not batch_id:
            raise BackendError("llm.batch: POST /batches: the reply names no batch id")
        return batch_id

    def status(self, batch_id: str) -> dict[str, Any]:
        return self._json("GET", f"/batches/{batch_id}")

    def content(self, file_id: str) -> bytes:
        return self._call("GET", f"/files/{file_id}/content")


class Session:
    """The batches of one run folder: what they answered, and the calls the pass under way
    deferred. Active (:func:`active`) while a batch-mode run makes its passes."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.state = folder / STATE
        self._lock = threading.Lock()
        self.results: dict[str, dict[str, Any]] = {}
        """custom_id -> ``{"body": …, "batch": id}`` or ``{"error": …, "batch": id}``."""
        self.batches: dict[str, dict[str, Any]] = {}
        """batch id -> its log entry (``backend``, ``n``, ``keys``, ``status``)."""
        self.uploaded: dict[int, dict[str, Any]] = {}
        """Request files uploaded and not yet made a batch (a kill between the two)."""
        self.pending: dict[str, dict[str, dict[str, Any]]] = {}
        """backend id -> custom_id -> the request body, deferred by the pass under way."""
        self.batchers: dict[str, Batcher] = {}
        self.submitted = 0
        self._load()

    # ------------------------------------------------------------------ the pass's side

    def result(self, key: str) -> dict[str, Any] | None:
        return self.results.get(key)

    def defer(self, batcher: Batcher, key: str, body: dict[str, Any]) -> Deferred:
        with self._lock:
            self.batchers.setdefault(batcher.id, batcher)
            self.pending.setdefault(batcher.id, {})[key] = body
        return Deferred()

    def deferred(self) -> int:
        return sum(len(v) for v in self.pending.values())

    # ------------------------------------------------------------------ between passes

    def flush(self, say: Callable[[str], None]) -> None:
        """Send the deferred calls no batch holds yet, then wait for every batch holding one.

        Raises:
            BackendError: a batch failed, expired or was cancelled (one line; a rerun into the
                same folder submits what it did not answer).
        """
        pending, self.pending = self.pending, {}
        for backend, calls in pending.items():
            batcher = self.batchers[backend]
            held = {k for b in self._live(backend) for k in b["keys"]}
            new = {k: body for k, body in calls.items() if k not in held}
            if new:
                self._submit(batcher, new, say)
            for entry in self._live(backend):
                if entry["keys"] & calls.keys():
                    self._wait(batcher, entry, say)

    def _live(self, backend: str) -> list[dict[str, Any]]:
        """The model's batches in flight or completed (their calls are not sent again)."""
        return [
            b
            for b in self.batches.values()
            if b["backend"] == backend and b.get("status") in (None, "completed")
        ]

    def _submit(self, batcher: Batcher, calls: dict[str, dict[str, Any]], say: Any) -> None:
        upload = next((u for u in self.uploaded.values() if u["keys"] == set(calls)), None)
        if upload is None:  # else uploaded before a kill, and never made a batch: made now
            n = 1 + max([0, *self.uploaded, *(b["n"] for b in self.batches.values())])
            lines = "".join(
                json.dumps(
                    {"custom_id": k, "method": "POST", "url": "/v1/chat/completions", "body": b},
                    sort_keys=True,
                )
                + "\n"
                for k, b in sorted(calls.items())
            ).encode()
            path = self._path(f"{n}.input.jsonl")
            path.write_bytes(lines)
            file_id = batcher.upload(lines)
            upload = {"n": n, "file": file_id, "backend": batcher.id, "keys": set(calls)}
            self._log({"event": "uploaded", "n": n, "file": file_id, "backend": batcher.id})
            self.uploaded[n] = upload
        batch_id = batcher.create(upload["file"])
        self.submitted += 1
        self._log({"event": "submitted", "n": upload["n"], "batch": batch_id})
        del self.uploaded[upload["n"]]
        self.batches[batch_id] = {**upload, "id": batch_id, "status": None}
        say(f"batch {batch_id}: {len(calls)} calls submitted to {batcher.endpoint.base_url}")

    def _wait(self, batcher: Batcher, entry: dict[str, Any], say: Callable[[str], None]) -> None:
        batch_id = entry["id"]
        while entry["status"] is None:
            info = batcher.status(batch_id)
            status = info.get("status")
            if status not in ENDED:
                time.sleep(batcher.poll)
                continue
            files = {}
            for what, field in (("output", "output_file_id"), ("errors", "error_file_id")):
                file_id = info.get(field)
                if isinstance(file_id, str) and file_id:
                    self._path(f"{_safe(batch_id)}.{what}.jsonl").write_bytes(
                        batcher.content(file_id)
                    )
                    files[what] = True
            self._log(
                {
                    "event": "ended",
                    "batch": batch_id,
                    "status": status,
                    "files": sorted(files),
                    "counts": info.get("request_counts"),
                    "message": _errors(info),
                }
            )
            entry["status"] = status
            answered = self._read(entry, sorted(files))
            if status == "completed":
                say(f"batch {batch_id}: completed, {answered} of {len(entry['keys'])} answered")
                continue
            why = f" ({_errors(info)})" if _errors(info) else ""
            raise BackendError(
                f"llm.batch: batch {batch_id} {status}{why} with {answered} of "
                f"{len(entry['keys'])} calls answered; a rerun into the same folder submits "
                "the rest"
            )

    # ------------------------------------------------------------------ the folder

    def _path(self, name: str) -> Path:
        (self.folder / FOLDER).mkdir(parents=True, exist_ok=True)
        return inside(self.folder / FOLDER, name, what="batch file")

    def _log(self, row: dict[str, Any]) -> None:
        with open(self.state, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()

    def _keys(self, n: int) -> set[str]:
        keys = set()
        path = self._path(f"{n}.input.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines():
            keys.add(json.loads(line)["custom_id"])
        return keys

    def _load(self) -> None:
        """Read ``batches.jsonl`` back (a rerun): batches in flight, ended ones' results."""
        if not self.state.is_file():
            return
        rows = []
        for line in self.state.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:  # a line cut by a kill: what it logged is done again
                continue
        try:
            for row in rows:
                event = row["event"]
                if event == "uploaded":
                    keys = self._keys(row["n"])
                    self.uploaded[row["n"]] = {**row, "keys": keys}
                elif event == "submitted":
                    upload = self.uploaded.pop(row["n"])
                    self.batches[row["batch"]] = {**upload, "id": row["batch"], "status": None}
                elif event == "ended":
                    entry = self.batches[row["batch"]]
                    entry["status"] = row["status"]
                    self._read(entry, row["files"])
        except (KeyError, TypeError, ValueError, OSError) as e:
            raise BackendError(
                f"{self.state}: the batches' log does not read back ({type(e).__name__}: {e}); "
                "run into a new folder"
            ) from None

    def _read(self, entry: dict[str, Any], files: list[str]) -> int:
        """Take an ended batch's result lines; its calls with none get an error result (a
        completed batch's only: an expired one's are sent again). Returns the answered count."""
        answered = 0
        for what in files:
            path = self._path(f"{_safe(entry['id'])}.{what}.jsonl")
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                row = json.loads(line)
                key = row.get("custom_id")
                if key not in entry["keys"]:
                    continue
                got = _line(row, entry["id"])
                if got is None:  # an expired request: asked again by the next batch
                    continue
                self.results[key] = got
                answered += "body" in got
        if entry["status"] == "completed":
            for key in entry["keys"] - self.results.keys():
                self.results[key] = {
                    "error": f"batch {entry['id']}: no result line for this call",
                    "batch": entry["id"],
                }
        return answered


def _line(row: dict[str, Any], batch_id: str) -> dict[str, Any] | None:
    """One result line as ``{"body": …}`` or ``{"error": …}``; None for a request that
    expired unanswered."""
    error = row.get("error")
    response: dict[str, Any] = row["response"] if isinstance(row.get("response"), dict) else {}
    status = response.get("status_code")
    body = response.get("body")
    if error or status != 200 or not isinstance(body, dict):
        if isinstance(error, dict) and error.get("code") == "batch_expired":
            return None
        if isinstance(error, dict):
            what = f"{error.get('code') or 'error'}: {error.get('message') or ''}".strip()
        elif isinstance(body, dict) and isinstance(body.get("error"), dict):
            what = f"HTTP {status} ({body['error'].get('message', '')})"
        else:
            what = f"HTTP {status}"
        return {"error": f"batch {batch_id}: {' '.join(what.split())[:300]}", "batch": batch_id}
    return {"body": body, "batch": batch_id}


def _errors(info: dict[str, Any]) -> str:
    errors = info.get("errors")
    data = errors.get("data") if isinstance(errors, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return " ".join(str(data[0].get("message") or data[0].get("code") or "").split())[:200]
    return ""


def _safe(batch_id: str) -> str:
    """A batch id as a file name part (the server chose it)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in batch_id)[:100]


_ACTIVE: list[Session] = []


def active() -> Session | None:
    """The batch session of the run under way (None: calls go live)."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def session(folder: Path) -> Iterator[Session]:
    """Make ``folder``'s batch session the active one for the block."""
    s = Session(folder)
    _ACTIVE.append(s)
    try:
        yield s
    finally:
        _ACTIVE.remove(s)


def wanted(cfg: Any) -> bool:
    """Whether a run's config holds a model in batch mode (its ``llm``, a stage's, a panel's)."""
    from pydantic import BaseModel

    def walk(value: Any) -> bool:
        if isinstance(value, BaseModel):
            if getattr(value, "backend", None) == "openai" and getattr(value, "batch", False):
                return True
            return any(walk(getattr(value, name)) for name in type(value).model_fields)
        if isinstance(value, list | tuple):
            return any(walk(v) for v in value)
        if isinstance(value, dict):
            return any(walk(v) for v in value.values())
        return False

    return walk(cfg)
