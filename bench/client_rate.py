"""The most model calls per second one gen process sends: the client's own cost per call.

A server on 127.0.0.1, in its own process, answers every chat call at once with one fixed
structured answer; one gen process (``gen.llm.make_llm`` with ``llm=openai``, no cache) sends
``--calls`` structured calls from ``--width`` threads, the way a generator's records do. What is
measured is gen's side only: the OpenAI client, instructor's parse into the schema, the backend's
admission, retries and usage counters, all under one interpreter lock. Reported: calls/s, the
client process's CPU seconds per call (user + system), and the server's, so a server that is
the limit shows. 1 / client CPU per call is the ceiling of one process's calls/s; a many-slot
server at latency L keeps N slots busy only while the generator can send N / L calls/s (64
slots at 2 s: 32 calls/s).

    python bench/client_rate.py [--calls 3000] [--width 64] [--json bench/results/client_rate.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent

SERVER = textwrap.dedent(
    """
    import json, os, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    ANSWER = {"bio": "Ana is a nurse in Porto who runs along the river before her shift."}
    REPLY = json.dumps({
        "id": "c", "object": "chat.completion", "created": 0, "model": "fixed",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": json.dumps(ANSWER)}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 24, "total_tokens": 144},
    }).encode()
    MODELS = json.dumps({"object": "list", "data": [{"id": "fixed", "object": "model"}]}).encode()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a): pass
        def _send(self, data):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            if self.path.endswith("/cpu"):
                t = os.times()
                return self._send(json.dumps(t.user + t.system).encode())
            self._send(MODELS)
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(REPLY)

    class S(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    s = S(("127.0.0.1", 0), H)
    print(s.server_address[1], flush=True)
    s.serve_forever()
    """
)


class Bio(BaseModel):
    bio: str


def server_cpu(url: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url.removesuffix("/v1") + "/cpu", timeout=10) as r:
        return float(r.read())


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "client_rate.json")
    args = ap.parse_args()

    env = {**os.environ, "NO_PROXY": "127.0.0.1"}
    srv = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        port = int(srv.stdout.readline())
        url = f"http://127.0.0.1:{port}/v1"
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
            os.environ.pop(var, None)
        os.environ["NO_PROXY"] = "127.0.0.1"
        from gen.llm import OpenAIConfig, make_llm

        llm = make_llm(OpenAIConfig(base_url=url, model="fixed", concurrency=args.width))
        messages = [
            {"role": "system", "content": "You write one short bio from the facts given."},
            {"role": "user", "content": "Name: Ana. Occupation: nurse. City: Porto. " * 8},
        ]

        def one(i: int) -> str:
            return llm.structured(messages, Bio, seed=i, max_tokens=200).bio

        with ThreadPoolExecutor(args.width) as pool:  # warm-up: connections, imports
            list(pool.map(one, range(args.width)))
            cpu0, srv0, t0 = own_cpu(), server_cpu(url), time.perf_counter()
            got = list(pool.map(one, range(args.width, args.width + args.calls)))
            wall = time.perf_counter() - t0
            cpu, srv_cpu = own_cpu() - cpu0, server_cpu(url) - srv0
        assert len(got) == args.calls and all(got)
    finally:
        srv.kill()
    row = {
        "calls": args.calls,
        "width": args.width,
        "wall_s": round(wall, 2),
        "calls_per_s": round(args.calls / wall, 1),
        "client_cpu_ms_per_call": round(1000 * cpu / args.calls, 2),
        "server_cpu_ms_per_call": round(1000 * srv_cpu / args.calls, 2),
        "client_ceiling_calls_per_s": round(args.calls / cpu, 1),
    }
    out = {
        "bench": "client_rate",
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "python": platform.python_version(),
        **row,
    }
    print(json.dumps(out, indent=1))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
