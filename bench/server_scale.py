"""How busy gen keeps a many-slot model server: calls in flight per generator, before and after.

A stand-in OpenAI-compatible server on 127.0.0.1 answers each chat call from a recording of the
embedded model's real answers to the same request (record once, replay many), after a fixed
latency and with N slots (a call beyond N waits for a slot, as on a real server). For each
generator it

1. records, once: the generator run with ``llm=openai llm.concurrency=1`` against the server in
   recording mode, which asks the embedded SmolLM2 (in this process) and keeps its answer under
   the request's hash; that run's records are the reference. ``--record-slots K`` records
   through llama.cpp's own server with K slots and ``llm.concurrency=K`` instead (continuous
   batching; the ``[server]`` extra): on 2 cores, 16 slots answered 80 short structured calls a
   minute against 57 for one slot; more cores, more. Records do not depend on scheduling, so
   that run is as good a reference; the answers to requests not recorded before are that
   server's;
2. replays at N slots with today's code (``--before``: a checkout of the code to compare with,
   put first on PYTHONPATH) and with this checkout, ``llm.concurrency=N``: the time-weighted mean
   of calls in flight (seen by the server, from its first request to its last reply), the most
   at once, calls/s against N/latency, records/hour, the generator's own CPU seconds, and whether
   the records are byte-identical to the reference. ``busy`` is over the whole span, the run's
   tail included: its last records' chains of dependent calls once fewer calls are left than
   slots. The tail lasts about as long as the longest chain whatever the run's size, so a run of
   thousands of records spends a small part of its span there and a run of a few hundred calls
   much of it. ``busy_until_full`` is the mean up to the last moment all N slots were busy and
   ``full_until_s`` that moment: the slots the scheduler keeps busy while records are left;
3. replays once more at 1024 slots (``unbounded``): the calls in flight these records allow at
   most, whatever the scheduler (records x independent calls in each, over their chains of
   dependent calls). At N slots a run can keep at most min(N, that) busy; where ``after`` is
   below it, the scheduling or the generator's own CPU (checks, embeddings between calls) is
   the limit, and ``client_cpu_s`` against the span says which;
4. with ``--shards K``: replays at N slots as K shard processes at once (``shard=i
   num_shards=K``), merged with ``gen merge`` and compared with the reference like the others:
   what fills the server when one process's own CPU per call is the limit;
5. with ``--server-embedder``: the generators that embed (``rerank``, ``candidates``,
   ``recommend``) with ``embedder=openai`` against the same stand-in, which serves
   ``/v1/embeddings`` with all-MiniLM-L6-v2's vectors (each text encoded alone, so a text's
   vector does not depend on its batch; kept in ``embeddings.jsonl`` beside the recording) after
   ``--embed-latency`` seconds, outside the chat slots: what the run keeps in flight once a GPU
   server embeds and the client's CPU per record is small. A one-slot run with the server
   embedder is its reference (``embedder_reference``), itself compared with the in-process
   reference.

    python bench/server_scale.py --generators personas nocontext [--slots 64] [--latency 2] \
        [--before /tmp/gen-main] [--json bench/results/server_scale.json]

A replayed request that is not in the recording is answered with HTTP 500 and counted
(``misses``): a run that asks what the recording run did not ask is not scheduling-independent.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

EGOTOM = SHARED / "data" / "egotom_paper"

GENERATORS: dict[str, list[str]] = {
    "personas": ["n=16"],
    "nocontext": [f"input={EGOTOM}", "sample=128"],
    "digital": ["n=2", "persona_file={work}/../personas/record/personas.jsonl"],
    "tom": [f"input={EGOTOM}", "n=4"],
    "rerank": ["input={work}/pools.jsonl", "n=4"],
    "candidates": [f"input={EGOTOM / 'egotom_goal_shuffled.csv'}", "n=32"],
    "scenarios": ["n=6"],
    "evaluate": [f"input={EGOTOM}", "limit=16"],
    "judge": [
        "kind=distractor_validity",
        f"input={EGOTOM / 'egotom_goal_shuffled.csv'}",
        "n=16",
        "judge_tokens=160",
    ],
    "recommend": [
        "input={work}/sessions.jsonl",
        "n=16",
        "draft_tokens=450",
        "rerank_tokens=450",
    ],
}
"""Each generator's options (beside llm=…); ``{work}`` is the generator's bench folder (digital
takes the personas run's pool: run personas first). These sizes record in about an hour for
all of them on 2 shared cores (1-20 answers a minute): fewer records than slots, so the
unbounded replay, not the 64 slots, bounds them. The measurements page's table used
``--records personas=256 digital=8 tom=64 rerank=224 candidates=224 scenarios=24
evaluate=128 judge=64 recommend=48`` (nocontext 128), about 5 hours of recording; a larger
``--records`` extends a smaller one's recording."""
RECORDS = {name: f"{name}.jsonl" for name in GENERATORS}


def rerank_pools(path: Path, n: int = 16) -> None:
    """``n`` pools from EgoToM's goal questions: the clip's last 12 narration lines as context,
    the goal choices as candidates (the true goal and two wrong ones; real text, one pool a
    clip)."""
    import csv

    rows = []
    with (EGOTOM / "egotom_goal_shuffled.csv").open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            lines = [ln.strip() for ln in row["narrations_in_context"].splitlines() if ln.strip()]
            texts = [row[k] for k in ("gt_goal", "goal_choice_a", "goal_choice_b", "goal_choice_c")]
            if len(set(texts)) < 3:
                continue
            rows.append(
                {
                    "pool_id": row["cuid"],
                    "context": " ".join(lines[-12:]),
                    "candidates": sorted(set(texts)),
                }
            )
            if len(rows) == n:
                break
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def recommend_sessions(path: Path, n: int = 16) -> None:
    """``n`` sessions from EgoToM's clips: the clip's narration lines as the timeline (seconds
    from the clip's start), its length as the duration, one scene over the whole clip; no
    profile and no do-not-disturb interval (both optional). A clip of about 200 s is one
    segment, so sessions are independent records."""
    import csv
    import re

    stamp = re.compile(r"^\s*(\d+)m:(\d+)s\s*\|\s*(?:#C\s+)?(.+?)[\s.-]*$")
    rows = []
    with (EGOTOM / "egotom_goal_shuffled.csv").open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            lines = []
            for ln in row["narrations_in_context"].splitlines():
                m = stamp.match(ln)
                if m:
                    lines.append({"t": 60 * int(m[1]) + int(m[2]), "text": m[3] + "."})
            if not lines:
                continue
            duration = max(lines[-1]["t"] + 1, 30)
            rows.append(
                {
                    "session_id": row["cuid"],
                    "participant": row["vuid"][:8],
                    "duration": duration,
                    "timeline": lines,
                    "scenes": [{"start": 0, "end": duration, "context": "an Ego4D recording"}],
                }
            )
            if len(rows) == n:
                break
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


UNBOUNDED = 1024
"""Slots (and llm.concurrency) of the ``unbounded`` replay: more than any measured run keeps in
flight, so its mean is the records' own parallelism (records x independent calls in each, over
their chains of dependent calls), the most any scheduler could keep busy with them."""


def request_key(body: dict[str, Any]) -> str:
    """A chat request's identity: everything but the model's name."""
    return hashlib.sha256(
        json.dumps({k: v for k, v in body.items() if k != "model"}, sort_keys=True).encode()
    ).hexdigest()


class Server:
    """The stand-in server: ``record`` (answers from the embedded model, one at a time, kept) or
    ``replay`` (answers from the recording after ``latency`` seconds, ``slots`` at once)."""

    def __init__(
        self,
        recording: dict[str, dict[str, Any]],
        mode: str,
        slots: int = 1,
        latency: float = 0.0,
        keep: Path | None = None,
        embeddings: dict[str, list[float]] | None = None,
        embed_keep: Path | None = None,
        embed_latency: float = 0.0,
    ):
        """``keep``: the recording's JSONL file, each new answer appended as it comes (a killed
        recording run resumes where it stopped)."""
        self.recording, self.mode, self.latency, self.keep = recording, mode, latency, keep
        self.slots = threading.BoundedSemaphore(slots)
        self.lock = threading.Lock()
        self.in_flight = self.calls = self.misses = self.max_in_flight = 0
        self.area = self.area_full = 0.0
        self.first: float | None = None
        self.full = 0.0
        self.n = slots
        self.last = self.at = 0.0
        self.model: Any = None
        self.model_lock = threading.Lock()
        self.upstream: Any = None
        """record mode: answers requests instead of the in-process model (``--record-slots``)."""
        self.embeddings = embeddings if embeddings is not None else {}
        self.embed_keep, self.embed_latency = embed_keep, embed_latency
        self.embedder: Any = None
        self.embed_requests = self.embed_computed = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's interface
                self.send(
                    200, {"object": "list", "data": [{"id": "smollm2-replay", "object": "model"}]}
                )

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path.endswith("/embeddings"):
                    status, reply = owner.embed(body)
                else:
                    status, reply = owner.answer(body)
                self.send(status, reply)

        class Threading(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 1024

        self.httpd = Threading(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _tick(self, delta: int) -> None:
        now = time.monotonic()
        with self.lock:
            if self.first is None:
                self.first = self.at = now
            self.area += self.in_flight * (now - self.at)
            self.at = now
            self.in_flight += delta
            if self.in_flight >= self.n:
                self.full, self.area_full = now, self.area
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if delta < 0:
                self.last = now

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = request_key(body)
        with self.slots:
            self._tick(+1)
            try:
                with self.lock:
                    self.calls += 1
                if self.mode == "record":
                    if key not in self.recording:
                        reply = self.ask_model(body)
                        with self.lock:
                            self.recording[key] = reply
                            if self.keep is not None:
                                with self.keep.open("a", encoding="utf-8") as f:
                                    f.write(json.dumps({"key": key, "reply": reply}) + "\n")
                    return 200, self.recording[key]
                time.sleep(self.latency)
                if key not in self.recording:
                    with self.lock:
                        self.misses += 1
                    return 500, {"error": "not in the recording"}
                return 200, self.recording[key]
            finally:
                self._tick(-1)

    def embed(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """An embeddings request: each text's all-MiniLM-L6-v2 vector, encoded alone the first
        time it is asked (and kept), after ``embed_latency``; not a chat slot."""
        texts = body["input"]
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        new = {}
        with self.model_lock:
            self.embed_requests += 1
            for k, t in zip(keys, texts, strict=True):
                if k not in self.embeddings and k not in new:
                    if self.embedder is None:
                        from gen.llm.embed import Embedder, EmbedderConfig

                        self.embedder = Embedder(EmbedderConfig(), None)
                    new[k] = [float(x) for x in self.embedder.encode([t])[0]]
            if new:
                self.embeddings.update(new)
                self.embed_computed += len(new)
                if self.embed_keep is not None:
                    with self.embed_keep.open("a", encoding="utf-8") as f:
                        f.writelines(
                            json.dumps({"key": k, "vector": v}) + "\n" for k, v in new.items()
                        )
        time.sleep(self.embed_latency)
        data = [
            {"object": "embedding", "index": i, "embedding": self.embeddings[k]}
            for i, k in enumerate(keys)
        ]
        return 200, {"object": "list", "data": data, "model": body.get("model", "")}

    def ask_model(self, body: dict[str, Any]) -> dict[str, Any]:
        """The embedded model's answer to a request, through gen's own in-process backend (which
        turns a json_schema response format into llama.cpp's schema-constrained json_object)."""
        from gen.llm import LlamaCppConfig, make_llm

        if self.upstream is not None:
            return self.upstream(body)
        with self.model_lock:
            if self.model is None:
                self.model = make_llm(LlamaCppConfig(n_threads_batch=1))
            kwargs = {k: v for k, v in body.items() if k not in ("model", "stream")}
            reply = self.model._create(**_llama_kwargs(kwargs))
        return reply.model_dump(mode="json") if hasattr(reply, "model_dump") else dict(reply)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            span = (self.last - self.first) if self.first is not None else 0.0
            full = (self.full - self.first) if self.first is not None and self.full else 0.0
            return {
                "calls": self.calls,
                "misses": self.misses,
                "seconds": round(span, 2),
                "mean_in_flight": round(self.area / span, 2) if span > 0 else 0.0,
                "full_until_s": round(full, 2),
                "mean_in_flight_until_full": round(self.area_full / full, 2) if full > 0 else 0.0,
                "max_in_flight": self.max_in_flight,
            }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class LlamaServerUpstream:
    """llama.cpp's own server on the embedded GGUF with ``slots`` slots (continuous batching),
    answering a recording's requests as sent (it takes OpenAI's json_schema response format)."""

    def __init__(self, slots: int):
        from gen.llm.config import LlamaServerConfig
        from gen.llm.llama_cpp import gguf_file
        from gen.llm.llama_server import LlamaServer, find_binary

        cfg = LlamaServerConfig(parallel=slots, ctx_per_slot=8192)
        self.server = LlamaServer(find_binary(None), gguf_file(None), cfg)
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{self.server.base_url}/chat/completions",
            data=json.dumps({k: v for k, v in body.items() if k != "stream"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with self.opener.open(req, timeout=1800) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.server.stop()


def _llama_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    rf = kwargs.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        kwargs["response_format"] = {"type": "json_object", "schema": rf["json_schema"]["schema"]}
    return kwargs


EMBEDS = ("rerank", "candidates", "recommend")
"""The generators ``--server-embedder`` runs: those that embed every pool or item."""


def run_group(label: str) -> str:
    """The ``--runs`` name of a replay's label (``shards2`` -> shards)."""
    return "embedder" if "embedder" in label else label.rstrip("0123456789")


def server_embedder(url: str, concurrency: int) -> list[str]:
    """The options that send a run's embeddings to the stand-in."""
    return [
        "embedder=openai",
        f"embedder.base_url={url}",
        "embedder.model=minilm-replay",
        f"embedder.concurrency={concurrency}",
    ]


def gen_command(
    name: str, url: str, concurrency: int, out: Path, code: Path | None, *extra: str
) -> tuple[list[str], dict[str, str]]:
    """``python -m gen <name>`` against ``url`` and its environment; ``code``: a checkout first
    on PYTHONPATH."""
    env = {**os.environ, "NO_PROXY": "127.0.0.1", "GEN_CACHE_DIR": str(out.parent / "cache-unused")}
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(var, None)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    args = [
        sys.executable,
        "-m",
        "gen",
        name,
        *(o.replace("{work}", str(out.parent)) for o in GENERATORS[name]),
        "llm=openai",
        f"llm.base_url={url}",
        "llm.model=smollm2-replay",
        f"llm.concurrency={concurrency}",
        "llm.timeout=600",
        "cache_dir=null",
        "progress=off",
        f"hydra.run.dir={out}",
        *extra,
    ]
    return args, env


def run_gen(
    name: str, url: str, concurrency: int, out: Path, code: Path | None, *extra: str
) -> tuple[int, float, str, float]:
    """One run: (exit code, wall seconds, last stderr line, CPU seconds)."""
    args, env = gen_command(name, url, concurrency, out, code, *extra)
    t0, cpu0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run(args, cwd=out.parent, env=env, capture_output=True, text=True)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return proc.returncode, time.perf_counter() - t0, last, _children_cpu() - cpu0


def run_shards(
    name: str, url: str, concurrency: int, out: Path, shards: int
) -> tuple[int, float, str, float]:
    """``shards`` processes at once (``shard=i num_shards=K``, each with ``concurrency`` calls
    in flight at most, the server's slots shared), then ``gen merge`` of their folders into
    ``out``: how a generator whose own CPU per call caps one process fills a server."""
    procs = []
    t0, cpu0 = time.perf_counter(), _children_cpu()
    for i in range(shards):
        args, env = gen_command(
            name,
            url,
            concurrency,
            out.parent / f"{out.name}_{i}",
            None,
            f"shard={i}",
            f"num_shards={shards}",
        )
        procs.append(
            subprocess.Popen(args, cwd=out.parent, env=env, stderr=subprocess.PIPE, text=True)
        )
    errs = [p.communicate()[1] for p in procs]
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    # exit 1 is a run that wrote its folder and failed its own target (a persona pool short of
    # a slot): merged like any other; exit 2 and above wrote nothing to merge
    bad = [(p.returncode, e) for p, e in zip(procs, errs, strict=True) if p.returncode > 1]
    if bad:
        return bad[0][0], wall, (bad[0][1].strip().splitlines() or [""])[-1], cpu
    folders = ",".join(str(out.parent / f"{out.name}_{i}") for i in range(shards))
    merge = subprocess.run(
        [sys.executable, "-m", "gen", "merge", f"input=[{folders}]", f"hydra.run.dir={out}"],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
    )
    last = (merge.stderr.strip().splitlines() or [""])[-1]
    return merge.returncode, wall, last, cpu


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _rejects(folder: Path) -> bytes:
    path = folder / "rejects.jsonl"
    return path.read_bytes() if path.is_file() else b""


def count_records(path: Path) -> int:
    return sum(1 for _ in path.open(encoding="utf-8")) if path.is_file() else 0


def table(results: dict[str, Any]) -> str:
    """The results as the measurements page's Markdown table."""

    def cell(row: dict[str, Any] | None, *keys: str) -> str:
        return " / ".join(str(row.get(k, "–")) for k in keys) if row else "–"

    def pct(row: dict[str, Any] | None, key: str) -> str:
        return f"{100 * row[key]:.0f} %" if row and key in row else "–"

    lines = [
        "| generator | calls | records (rejects) | before: in flight | after: in flight mean"
        " / most | busy | busy until full (s) | calls/s | client CPU s | 2 shards: busy, calls/s"
        " | server embedder: busy, until full, client CPU s | same bytes"
        " | 1024 slots: mean / most |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in results["generators"].items():
        a, b, u, e = g.get("after"), g.get("before"), g.get("unbounded"), g.get("after_embedder")
        sh = next((v for k, v in g.items() if k.startswith("shards")), None)
        refused = bool(sh) and sh["exit"] > 1  # a generator that runs in one process only
        same = all(r["identical_to_one_slot"] for r in (a, u, e, None if refused else sh) if r)
        until = pct(e, "busy_until_full") if e and e.get("full_until_s") else "never full"
        embedded = f"{pct(e, 'busy')}, {until}, {cell(e, 'client_cpu_s')}" if e else "–"
        full = (
            f"{pct(a, 'busy_until_full')} ({cell(a, 'full_until_s')} of {cell(a, 'seconds')})"
            if a and a.get("full_until_s")
            else ("never full" if a and "full_until_s" in a else "–")
        )
        shards = "one process only" if refused else f"{pct(sh, 'busy')}, {cell(sh, 'calls_per_s')}"
        lines.append(
            f"| `{name}` | {a['calls'] if a else g['recorded_calls']}"
            f" | {cell(a, 'records_written')}"
            f" ({cell(a, 'rejects_written')}) | {cell(b, 'mean_in_flight')}"
            f" | {cell(a, 'mean_in_flight', 'max_in_flight')} | {pct(a, 'busy')}"
            f" | {full} | {cell(a, 'calls_per_s')} | {cell(a, 'client_cpu_s')}"
            f" | {shards} | {embedded} | {'yes' if same else 'NO'}"
            f" | {cell(u, 'mean_in_flight', 'max_in_flight')} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--generators", nargs="+", default=list(GENERATORS), choices=list(GENERATORS))
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--latency", type=float, default=2.0)
    ap.add_argument(
        "--before", type=Path, default=None, help="a checkout of the code to compare with"
    )
    ap.add_argument(
        "--unbounded",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"also replay at {UNBOUNDED} slots: the calls in flight these records allow at most",
    )
    ap.add_argument(
        "--shards",
        type=int,
        default=0,
        help="also replay as this many shard processes at once on the N slots, then merge",
    )
    ap.add_argument(
        "--records",
        nargs="+",
        default=[],
        metavar="NAME=N",
        help="a generator's record count instead of GENERATORS' (its n=, sample= or limit=)",
    )
    ap.add_argument(
        "--server-embedder",
        action="store_true",
        help=f"also replay {', '.join(EMBEDS)} with embedder=openai against the stand-in",
    )
    ap.add_argument(
        "--embed-latency",
        type=float,
        default=0.05,
        help="seconds the stand-in takes per embeddings request (a GPU server's order)",
    )
    ap.add_argument(
        "--record-slots",
        type=int,
        default=1,
        help="record through llama.cpp's llama-server with this many slots (the [server] extra)",
    )
    ap.add_argument(
        "--runs",
        nargs="+",
        default=["before", "after", "unbounded", "shards", "embedder"],
        choices=["before", "after", "unbounded", "shards", "embedder"],
        help="which replays to run (each also needs its own option; earlier ones are kept)",
    )
    ap.add_argument("--work", type=Path, default=ROOT / "outputs" / "bench" / "server_scale")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "server_scale.json")
    ap.add_argument("--table", action="store_true", help="print --json's table and stop")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.json.read_text())))
        return 0
    for item in args.records:
        name, _, n = item.partition("=")
        GENERATORS[name] = [
            f"{o.split('=')[0]}={int(n)}" if o.split("=")[0] in ("n", "sample", "limit") else o
            for o in GENERATORS[name]
        ]
    args.work.mkdir(parents=True, exist_ok=True)
    results = json.loads(args.json.read_text()) if args.json.is_file() else {}
    results.update(
        {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
            "date": dt.date.today().isoformat(),
            "slots": args.slots,
            "latency_s": args.latency,
            "limit_calls_per_s": round(args.slots / args.latency, 2),
        }
    )
    results.setdefault("generators", {})
    for name in args.generators:
        work = args.work / name
        work.mkdir(parents=True, exist_ok=True)
        rec_file = work / "recording.jsonl"
        recording: dict[str, Any] = {}
        if rec_file.is_file():
            for line in rec_file.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                recording[row["key"]] = row["reply"]
        reference = work / "record" / RECORDS[name]
        if name == "rerank" and not (work / "pools.jsonl").is_file():
            n = next(int(o[2:]) for o in GENERATORS[name] if o.startswith("n="))
            rerank_pools(work / "pools.jsonl", n)
        if name == "recommend" and not (work / "sessions.jsonl").is_file():
            n = next(int(o[2:]) for o in GENERATORS[name] if o.startswith("n="))
            recommend_sessions(work / "sessions.jsonl", n)
        if not reference.is_file():
            srv = Server(recording, "record", args.record_slots, keep=rec_file)
            upstream = None
            if args.record_slots > 1:
                upstream = srv.upstream = LlamaServerUpstream(args.record_slots)
            code, secs, last, _ = run_gen(name, srv.url, args.record_slots, work / "record", None)
            srv.close()
            if upstream is not None:
                upstream.stop()
            print(
                f"{name}: recorded {len(recording)} answers in {secs:.0f} s (exit {code}) {last}",
                flush=True,
            )
        row: dict[str, Any] = {
            "recorded_calls": len(recording),
            "records": count_records(reference),
        }
        runs = [("before", args.before, args.slots), ("after", None, args.slots)]
        if args.unbounded:
            runs.append(("unbounded", None, UNBOUNDED))
        if args.shards > 1:
            runs.append((f"shards{args.shards}", None, args.slots))
        embeddings: dict[str, list[float]] = {}
        emb_file = work / "embeddings.jsonl"
        if args.server_embedder and name in EMBEDS:
            if emb_file.is_file():
                for line in emb_file.read_text(encoding="utf-8").splitlines():
                    item = json.loads(line)
                    embeddings[item["key"]] = item["vector"]
            runs += [("embedder_reference", None, 1), ("after_embedder", None, args.slots)]
        runs = [r for r in runs if run_group(r[0]) in args.runs]
        for label, code_dir, slots in runs:
            if label == "before" and code_dir is None:
                continue
            embedded = "embedder" in label
            srv = Server(
                recording,
                "replay",
                slots,
                0.0 if label == "embedder_reference" else args.latency,
                embeddings=embeddings,
                embed_keep=emb_file,
                embed_latency=args.embed_latency,
            )
            out = work / label
            extra = server_embedder(srv.url, slots) if embedded else []
            if label.startswith("shards"):
                code, secs, last, cpu = run_shards(name, srv.url, slots, out, args.shards)
            else:
                code, secs, last, cpu = run_gen(name, srv.url, slots, out, code_dir, *extra)
            srv.close()
            s = srv.stats()
            got = out / RECORDS[name]
            # the server embedder's one-slot run is its own reference (a text's vector encoded
            # alone may differ in the last bits from the same text in an in-process batch)
            ref = (
                work / "embedder_reference"
                if label == "after_embedder"
                else out
                if label == "embedder_reference"
                else reference.parent
            )
            row[label] = {
                **s,
                "exit": code,
                "wall_s": round(secs, 1),
                "busy": round(s["mean_in_flight"] / slots, 3),
                "busy_until_full": round(s["mean_in_flight_until_full"] / slots, 3),
                "calls_per_s": round(s["calls"] / s["seconds"], 2) if s["seconds"] else 0.0,
                "records_per_hour": round(count_records(got) / secs * 3600) if secs else 0,
                "records_written": count_records(got),
                "rejects_written": count_records(out / "rejects.jsonl"),
                "client_cpu_s": round(cpu, 1),
                "identical_to_one_slot": got.is_file()
                and got.read_bytes() == (ref / RECORDS[name]).read_bytes()
                and _rejects(out) == _rejects(ref),
                **({"error": last} if code else {}),
            }
            if embedded:
                row[label].update(
                    embed_requests=srv.embed_requests,
                    embed_computed=srv.embed_computed,
                    identical_to_in_process=got.is_file()
                    and got.read_bytes() == reference.read_bytes()
                    and _rejects(out) == _rejects(reference.parent),
                )
            print(f"{name} {label}: {json.dumps(row[label])}", flush=True)
        results["generators"].setdefault(name, {}).update(row)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
