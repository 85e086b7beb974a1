"""HTTP to an OpenAI-compatible server, with a wall-clock deadline, a bounded reply and bounded
retries.

The OpenAI client's ``timeout`` bounds each socket read, so a server that trickles a byte a
second (or its headers) holds a call for ever, and it reads a reply whole before anyone can
look at its size. Here one call is one :meth:`Endpoint.post`:

- a **deadline**: the call's ``timeout`` (and the run's ``llm.deadline``, when nearer) covers
  connecting, waiting, reading, the transport retries and their waits; a watchdog shuts the
  connection's socket down when it passes, whatever phase the request is in;
- a **bounded reply**: the body is read in chunks and refused past a size (a server that ignores
  ``max_tokens`` is cut off there, and not asked again);
- **bounded retries**: connection failures, 408/425/429/5xx and replies that are not what was asked
  for are retried up to ``max_retries`` times, after the server's ``Retry-After`` (when it fits in
  the deadline) or a short backoff; other statuses are not retried;
- **one budget**: with an :class:`~gen.llm.admission.Admission`, each try holds a place in it
  (not the waits between tries); a 429/503 tells it the server is overloaded, and its
  ``Retry-After`` pauses every call, not only this one;
- **secrets**: the API key is read from its environment variable at each request and sent as a
  header; no error text holds it (a server's error body is redacted).

Every failure is a :class:`ServerError` whose message is one line meant for a reject's detail.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from gen.llm.admission import Admission
from gen.llm.secrets import env_secret, redact, redact_data
from gen.timing import CLOCK

T = TypeVar("T")
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
OVERLOADED = frozenset({429, 503})
"""Statuses that say the server has too much to do (the admission backs off)."""
MAX_WAIT = 60.0
"""The longest a Retry-After is honoured (longer: the call fails at once, naming it)."""
CHUNK = 1 << 16

_CALL = threading.local()
_JITTER = random.Random()  # the backoff's own: never the global generator others may seed


def set_run_deadline(at: float | None) -> None:
    """The run's deadline (a ``time.monotonic()`` instant) for the calls of the calling thread."""
    _CALL.run_deadline = at


def run_deadline() -> float | None:
    return getattr(_CALL, "run_deadline", None)


class ServerError(Exception):
    """One request or call that failed; ``str()`` is one line naming what happened.

    Attributes:
        retry: another try may succeed (connection failures, 429/5xx, a malformed reply).
        status: the HTTP status, when the server answered one.
    """

    def __init__(
        self,
        what: str,
        *,
        retry: bool,
        status: int | None = None,
        wait: float | None = None,
        late: bool = False,
    ):
        super().__init__(what)
        self.retry = retry
        self.status = status
        self.wait = wait
        self.late = late


JSON = "application/json"


class Endpoint:
    """One server root (``base_url``) and how calls to it are made.

    Args:
        base_url: the API root (``http://host:port/v1``).
        timeout: wall-clock seconds of one call, its retries included.
        max_retries: retries of one call after a retryable failure.
        key_env: the environment variable holding the API key (None: never send one).
        where: how messages name the backend's option that sets the deadline (``llm.timeout``).
        option: the config group messages name (``llm``: ``llm.base_url``, ``llm.api_key_env``).
        admission: the calls-in-flight budget each try passes (None: none).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        max_retries: int,
        key_env: str | None = None,
        where: str = "llm.timeout",
        option: str = "llm",
        admission: Admission | None = None,
    ):
        import httpx

        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.key_env = key_env
        self.where = where
        self.option = option
        self.admission = admission
        # no keep-alive: every request has its own connection, so the watchdog always knows the
        # socket to shut down; an LLM call takes seconds, a new connection milliseconds
        self._client = httpx.Client(
            trust_env=True, follow_redirects=False, limits=httpx.Limits(max_keepalive_connections=0)
        )

    def close(self) -> None:
        self._client.close()

    def key(self) -> str | None:
        """The API key now (read from the environment at every request; never stored)."""
        return env_secret(self.key_env)

    def key_hint(self) -> str:
        """What to check after a 401/403 (names the variable, never shows the key)."""
        if not self.key_env:
            return ""
        if self.key() is None:
            return (
                f"; ${self.key_env} is not set "
                f"(the API key is read from the variable {self.option}.api_key_env names)"
            )
        return f"; check the key in ${self.key_env} ({self.option}.api_key_env)"

    # ------------------------------------------------------------------ one call

    def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        cap: int,
        parse: Callable[[dict[str, Any]], T],
        form: tuple[bytes, str] | None = None,
    ) -> T:
        """POST ``body`` as JSON to ``{base_url}{path}`` and return ``parse`` of the reply's JSON
        object, retrying what may succeed on another try (``parse`` raises a retryable
        :class:`ServerError` for a reply of the wrong shape), all within the call's deadline.
        ``form``: (bytes, content type) sent instead of ``body`` (a multipart upload: audio to a
        transcription server).

        Raises:
            ServerError: the last failure, once retries or time ran out.
        """
        start = time.monotonic()
        deadline = start + self.timeout
        run_end = run_deadline()
        by_run = run_end is not None and run_end < deadline
        if by_run:
            deadline = run_end  # type: ignore[assignment]
        data, kind = form if form is not None else (json.dumps(body).encode(), JSON)
        estimate = len(data) // 4 + int(body.get("max_tokens") or 0)  # tokens, for llm.tpm
        tries = 0
        while True:
            tries += 1
            try:
                with self.admission.slot(estimate) if self.admission else _nothing():
                    status, headers, raw = self.request(
                        "POST", path, data, deadline=deadline, cap=cap, ctype=kind
                    )
                out = parse(self._json(status, headers, raw))
                if self.admission is not None:
                    self.admission.used(estimate, _tokens(out))
                return out
            except ServerError as e:
                failure = e
                if self.admission is not None and e.status in OVERLOADED:
                    self.admission.throttled(e.wait)
            if failure.late:
                failure = ServerError(
                    f"no complete answer within {self._limit(by_run)}", retry=False, late=True
                )
            left = deadline - time.monotonic()
            if not failure.retry or tries > self.max_retries or left <= 0:
                break
            wait = (
                failure.wait
                if failure.wait is not None
                else min(8.0, 0.5 * 2 ** (tries - 1)) * _JITTER.uniform(0.75, 1.25)
            )
            if wait > min(left, MAX_WAIT):
                raise ServerError(
                    f"{failure} (its Retry-After of {wait:g} s is past the call's "
                    f"{self._limit(by_run)})",
                    retry=False,
                    status=failure.status,
                )
            with CLOCK.timed("waiting"):
                time.sleep(wait)
        after = f" after {tries} tries" if tries > 1 else ""
        raise ServerError(
            f"{failure}{after}", retry=False, status=failure.status, late=failure.late
        )

    def _limit(self, by_run: bool) -> str:
        return "llm.deadline" if by_run else f"{self.where}={self.timeout:g} s"

    def _json(self, status: int, headers: Any, raw: bytes) -> dict[str, Any]:
        if not 200 <= status < 300:
            raise self._status_error(status, headers, raw)
        try:
            data = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ServerError(
                f"HTTP {status} but the reply is not JSON ({self._peek(raw)})",
                retry=True,
                status=status,
            ) from None
        if not isinstance(data, dict):
            raise ServerError(
                f"HTTP {status} but the reply is JSON {type(data).__name__}, not an object",
                retry=True,
                status=status,
            )
        # a server may echo the Authorization header in a 200 reply too: the key is gone before
        # the reply reaches a record, a reject, a log line or the cache
        return redact_data(data, self.key())

    def _status_error(self, status: int, headers: Any, raw: bytes) -> ServerError:
        message = ""
        try:
            err = json.loads(raw)
            inner = err.get("error") if isinstance(err, dict) else None
            message = str(
                inner.get("message", "")
                if isinstance(inner, dict)
                else inner or err.get("message", "")
            )
        except (ValueError, UnicodeDecodeError, RecursionError, AttributeError):
            message = self._peek(raw)
        message = " ".join(redact(message, self.key()).split())[:200]
        hint = {
            401: self.key_hint(),
            403: self.key_hint(),
            404: f"; does {self.option}.base_url end in /v1?",
        }.get(status, "")
        if 300 <= status < 400:
            hint = (
                "; redirects are not followed: give the server's final API root as "
                f"{self.option}.base_url"
            )
        what = f"HTTP {status}" + (f" ({message})" if message else "") + hint
        wait = retry_after(headers) if status in RETRY_STATUS else None
        if wait is not None:
            what += f" (Retry-After {wait:g} s)"
        return ServerError(what, retry=status in RETRY_STATUS, status=status, wait=wait)

    def _peek(self, raw: bytes) -> str:
        if not raw.strip():
            return "an empty body"
        text = " ".join(redact(raw[:80].decode("utf-8", "replace"), self.key()).split())
        return f"it starts {text!r}"

    # ------------------------------------------------------------------ one request

    def request(
        self,
        method: str,
        path: str,
        data: bytes | None,
        *,
        deadline: float,
        cap: int,
        ctype: str = "application/json",
    ) -> tuple[int, Any, bytes]:
        """One HTTP request (a body of type ``ctype``), its reply read whole (at most ``cap``
        bytes) before ``deadline``.

        Returns:
            (status, headers, body).

        Raises:
            ServerError: cannot connect, the connection failed, no complete reply in time,
                or a reply larger than ``cap``.
        """
        import httpx

        left = deadline - time.monotonic()
        if left <= 0:
            raise _late(0)
        sockets: list[socket.socket] = []
        fired = threading.Event()

        def trace(event: str, info: dict[str, Any]) -> None:
            stream = info.get("return_value") if event.endswith(".complete") else None
            sock = getattr(stream, "get_extra_info", lambda _: None)("socket")
            if isinstance(sock, socket.socket):
                sockets.append(sock)
                if fired.is_set():
                    _shut(sock)

        def expire() -> None:
            fired.set()
            for s in list(sockets):
                _shut(s)

        headers = {"Accept-Encoding": "identity", "Content-Type": ctype}
        key = self.key()
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        watchdog = threading.Timer(left, expire)
        watchdog.daemon = True
        watchdog.start()
        body = bytearray()
        try:
            with self._client.stream(
                method,
                f"{self.base_url}{path}",
                content=data,
                headers=headers,
                timeout=httpx.Timeout(left),
                extensions={"trace": trace},
            ) as r:
                for chunk in r.iter_bytes(CHUNK):
                    body += chunk
                    if len(body) > cap:
                        raise ServerError(
                            f"the reply passed {cap:,} bytes and was cut off (does the "
                            "server ignore max_tokens?)",
                            retry=False,
                            status=r.status_code,
                        )
                    if fired.is_set() or time.monotonic() > deadline:
                        raise _late(left)
                return r.status_code, r.headers, bytes(body)
        except ServerError:
            raise
        except httpx.TimeoutException:
            raise _late(left) from None
        except httpx.HTTPError as e:
            if fired.is_set() or time.monotonic() >= deadline:
                raise _late(left) from None
            reason = " ".join(redact(str(e) or type(e).__name__, key).split())[:200]
            if isinstance(e, httpx.ConnectError):
                raise ServerError(f"cannot connect ({reason})", retry=True) from None
            got = f", {len(body):,} bytes of the reply read" if body else ""
            raise ServerError(
                f"the connection failed ({type(e).__name__}: {reason}{got})", retry=True
            ) from None
        except OSError as e:  # a socket error httpx did not wrap
            if fired.is_set():
                raise _late(left) from None
            raise ServerError(f"the connection failed ({e.strerror or e})", retry=True) from None
        finally:
            watchdog.cancel()

    def get_ok(self, path: str, timeout: float) -> None:
        """One GET without retries; any 2xx is fine (the preflight).

        Raises:
            ServerError: as :meth:`request`, or the HTTP status.
        """
        status, headers, raw = self.request(
            "GET", path, None, deadline=time.monotonic() + timeout, cap=1 << 22
        )
        if not 200 <= status < 300:
            raise self._status_error(status, headers, raw)


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def _tokens(reply: Any) -> int:
    """Prompt and completion tokens a reply says it used (-1: it does not say)."""
    usage = getattr(reply, "usage", None)
    total = getattr(usage, "total_tokens", None) if usage is not None else None
    return int(total) if isinstance(total, int) else -1


def _no_constant(name: str) -> Any:
    raise ValueError(
        f"{name} is not JSON"
    )  # NaN, Infinity: Python's json takes them, JSON does not


def _late(seconds: float) -> ServerError:
    return ServerError(f"no complete answer within {seconds:.3g} s", retry=False, late=True)


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown (also under TLS: SSLSocket.shutdown would touch the TLS state
    # another thread is reading with); a blocked read returns at once
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def retry_after(headers: Any) -> float | None:
    """Seconds a ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms`` header asks for."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
