"""The review web app: Starlette routes served by uvicorn on 127.0.0.1.

Why Starlette and uvicorn: both are already installed as dependencies of
``llama-cpp-python[server]`` (its OpenAI-compatible server is built on them), both are
well-kept ASGI projects, and they give routing, JSON, static files, host checks and a
clean shutdown in a few lines — nothing new to install, no front-end build step.

Security: the socket is bound to 127.0.0.1 only; a random per-session token (printed in the
page's address) is required by every API request, in the ``X-Review-Token`` header (a header a
cross-site page cannot send without a CORS preflight this app never answers), and by the page
itself; requests whose ``Host`` is not the loopback name are refused (DNS rebinding); the page
runs under a Content-Security-Policy that allows only its own script, so even text that escaped
escaping could not run. The server reads the run folder's items at start and writes only
``reviews/<reviewer>.jsonl`` inside it.
"""

from __future__ import annotations

import datetime as dt
import hmac
import secrets
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gen.formats.labels import append_label, latest, read_labels
from gen.generators.review.items import TEMPLATES, ReviewItem, render
from gen.readers import first_error
from gen.schemas.review import DECISIONS, ReviewLabel, Rubric

HOST = "127.0.0.1"
TOKEN_HEADER = "X-Review-Token"
MAX_BODY = 64_000
"""Largest label request accepted (a note is at most 10,000 characters)."""
STATIC = {"review.js": "text/javascript", "review.css": "text/css"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


@dataclass
class Session:
    """One server's state: the folder, its items, the reviewer, the rubrics and the token."""

    folder: Path
    items: list[ReviewItem]
    reviewer: str
    rubrics: dict[str, Rubric]
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    mine: dict[str, ReviewLabel] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.by_id = {it.item_id: it for it in self.items}
        self.mine = latest(read_labels(self.folder).get(self.reviewer, []))[0]

    def others(self) -> dict[str, dict[str, str | None]]:
        """Item id -> other reviewer -> their current decision (read from their files now)."""
        out: dict[str, dict[str, str | None]] = {}
        for reviewer, labels in read_labels(self.folder).items():
            if reviewer == self.reviewer:
                continue
            for item_id, label in latest(labels)[0].items():
                out.setdefault(item_id, {})[reviewer] = label.decision
        return out

    def check_label(self, body: Any) -> ReviewLabel:
        """A label request -> the label to append; ValueError naming what is wrong."""
        if not isinstance(body, dict):
            raise ValueError("expected a JSON object")
        unknown = set(body) - {"item_id", "scores", "decision", "note"}
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        item_id = body.get("item_id")
        # JSON can send a list or object here: unhashable, a dict lookup would raise TypeError (a
        # 500)
        item = self.by_id.get(item_id) if isinstance(item_id, str) else None
        if item is None:
            raise ValueError("item_id: not an item of this folder")
        rubric = self.rubrics[item.kind]
        scale = {f.key: len(f.labels) for f in rubric.fields}
        scores = body.get("scores") or {}
        if not isinstance(scores, dict):
            raise ValueError("scores: expected an object")
        for key, value in scores.items():
            if key not in scale:
                raise ValueError(f"scores: {key!r} is not a field of rubric {rubric.name}")
            if type(value) is not int or not 1 <= value <= scale[key]:
                raise ValueError(f"scores.{key}: expected 1-{scale[key]}, got {value!r}")
        decision = body.get("decision")
        if decision is not None and decision not in DECISIONS:
            raise ValueError(f"decision: one of {', '.join(DECISIONS)} or null")
        try:
            return ReviewLabel(
                item_id=item.item_id,
                record_id=item.record_id,
                reviewer=self.reviewer,
                time=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
                rubric=rubric.name,
                scores=scores,
                decision=decision,
                note=body.get("note") or "",
            )
        except ValidationError as e:
            field, msg = first_error(e, "label")
            raise ValueError(f"{field}: {msg}") from None

    def save(self, label: ReviewLabel) -> None:
        with self.lock:
            append_label(self.folder, label)
            self.mine[label.item_id] = label


def make_app(session: Session) -> Any:
    """The ASGI app of one session."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    page = (TEMPLATES / "page.html").read_text(encoding="utf-8")

    def refused(message: str, status: int = 403) -> Response:
        return JSONResponse({"error": message}, status_code=status, headers=HEADERS)

    def authorised(given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), session.token.encode())

    async def index(request: Request) -> Response:
        if not authorised(request.query_params.get("token")):
            return HTMLResponse(
                "<!doctype html><title>gen review</title><p>This page needs the address the "
                "server printed, with its token.</p>",
                status_code=403,
                headers=HEADERS,
            )
        return HTMLResponse(page, headers=HEADERS)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return refused("not found", 404)
        return Response(_static_bytes(name), media_type=STATIC[name], headers=HEADERS)

    async def items(request: Request) -> Response:
        if not authorised(request.headers.get(TOKEN_HEADER)):
            return refused("missing or wrong token")
        others = session.others()
        return JSONResponse(
            {
                "reviewer": session.reviewer,
                "folder": session.folder.name,
                "rubrics": {k: r.model_dump(mode="json") for k, r in session.rubrics.items()},
                "items": [
                    {
                        "index": it.index,
                        "item_id": it.item_id,
                        "record_id": it.record_id,
                        "kind": it.kind,
                        "question_type": it.question_type,
                        "type_privileged": it.kind == "scenarios",
                        "flagged": it.flags(),
                        "label": (
                            session.mine[it.item_id].model_dump(mode="json")
                            if it.item_id in session.mine
                            else None
                        ),
                        "others": others.get(it.item_id, {}),
                    }
                    for it in session.items
                ],
            },
            headers=HEADERS,
        )

    async def item(request: Request) -> Response:
        if not authorised(request.headers.get(TOKEN_HEADER)):
            return refused("missing or wrong token")
        raw = request.path_params["index"]
        # digits only: int() reads "-1" (Python's last item), " 1" and "1_0" too
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 9 or int(raw) >= len(session.items):
            return refused("no such item", 404)
        it = session.items[int(raw)]
        return JSONResponse({"html": render(it)}, headers=HEADERS)

    async def label(request: Request) -> Response:
        if not authorised(request.headers.get(TOKEN_HEADER)):
            return refused("missing or wrong token")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return refused("expected Content-Type: application/json", 415)
        raw = await bounded_body(request, MAX_BODY)
        if raw is None:
            return refused("request too large", 413)
        from gen.errors import InputError
        from gen.readers import parse_json

        try:
            new = session.check_label(parse_json(raw.decode("utf-8", errors="replace"), "request"))
        except (ValueError, InputError) as e:
            return refused(str(e), 400)
        session.save(new)
        return JSONResponse({"label": new.model_dump(mode="json")}, headers=HEADERS)

    routes = [
        Route("/", index),
        Route("/static/{name}", static),
        Route("/api/items", items),
        Route("/api/item/{index}", item),
        Route("/api/label", label, methods=["POST"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=[HOST, "localhost"])],
    )


async def bounded_body(request: Any, limit: int) -> bytes | None:
    """A request's body, or None when it is larger than ``limit`` bytes: a ``Content-Length`` over
    the limit is refused before a byte is read, and a streamed (chunked) body is read only up to
    the limit, so a 200 MB request costs at most ``limit`` bytes of memory."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.strip().isdigit() or int(declared) > limit):
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _static_bytes(name: str) -> bytes:
    from gen.paths import inside

    return inside(TEMPLATES, name, what="static file").read_bytes()


def bind(port: int | None) -> socket.socket:
    """A listening socket on 127.0.0.1 (``port``, or a free one)."""
    from gen.errors import ConfigError

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port or 0))
    except OSError as e:
        sock.close()
        raise ConfigError(
            f"port={port}: cannot listen on {HOST}:{port} ({e.strerror or e})"
        ) from None
    sock.listen(64)
    return sock


class Server:
    """uvicorn in a background thread (so it installs no signal handlers: the main thread's
    Ctrl-C stops it through :meth:`stop`, and the run then writes its records and manifest)."""

    def __init__(self, session: Session, port: int | None = None):
        import uvicorn

        self.session = session
        self.sock = bind(port)
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            make_app(session), log_level="warning", access_log=False, lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="review-server")

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.done.set()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={self.session.token}"

    def start(self) -> Server:
        self.thread.start()
        return self

    def wait(self, stop: threading.Event | None = None) -> None:
        """Serve until Ctrl-C (or ``stop`` is set), then shut down cleanly. Events, not
        ``Thread.join``: a join interrupted by Ctrl-C can report a live thread as finished."""
        try:
            while not self.done.wait(0.3) and not (stop is not None and stop.is_set()):
                pass
        except KeyboardInterrupt:
            pass
        self.stop()

    def stop(self) -> None:
        self.server.should_exit = True
        if self.done.wait(10):
            self.sock.close()
