"""Replay a hostile user's cases against the real CLI and count what went wrong.

Each case of :data:`CASES` (a table: adding one is one entry) runs ``python -m gen …`` as a
subprocess in a temporary folder of its own: the current folder is ``<tmp>/work``, ``$HOME`` is
``<tmp>/home`` (with ``XDG_CACHE_HOME`` under it), the LLM cache is ``<tmp>/cache``, the run
folder ``<tmp>/work/run`` (or the case's own). A fake API key is in ``OPENAI_API_KEY`` for every
case. Each case is bounded in time (its process group is killed after ``timeout`` seconds); the
loopback servers it may talk to are in-process stand-ins that misbehave in one way each (a key
demanded, ``{"choices": "nope"}``, silence after ``/models``, one byte a second, 429 with
Retry-After, a body that is not JSON, a reset connection), each bounded in time and count.

Counted per case, and in total:

* ``clean``: the exit code is one the case expects, a non-zero exit says so in at most one line
  on stderr, no traceback nor "unexpected" error, within its time, nothing written outside, no
  secret, and the case's own invariant holds (a sweep ran every job; a bank's released versions
  are byte-identical);
* ``tracebacks``: a ``Traceback`` on stdout or stderr;
* ``unexpected``: an ``error: unexpected …`` line (exit 1 from a crash, where a refusal or a
  finding was due);
* ``writes_outside``: files made or changed in the case's folder outside its run folder and the
  cache (the current folder and ``$HOME`` are snapshotted before and after);
* ``secrets``: the fake key found in any file the case wrote (``.hydra/`` included) or in its
  stdout/stderr;
* ``hung``: the case ran past its time bound.

Deterministic: fixed inputs and seeds, cases in table order, no randomness. Run from the
repository root:  python bench/fuzz.py [--only SUBSTRING] [--list] [--json out.json] [-v]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import http.server
import json
import os
import platform
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"
KEY = "sk-fuzz-0123456789abcdefSECRET"
"""The fake API key: in the environment of every case, on the command line of some."""


# --------------------------------------------------------------------------- loopback stand-ins


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _chat_reply(content: str) -> bytes:
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()


MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
MAX_SILENCE = 90.0
"""Longest a stand-in keeps a connection open without answering (so a hung client ends)."""


def make_handler(mode: str) -> type[http.server.BaseHTTPRequestHandler]:
    """A request handler that misbehaves as ``mode`` says (``/models`` answers well, except in
    ``auth`` mode without the key)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if mode == "auth" and self.headers.get("Authorization") != f"Bearer {KEY}":
                self._send(401, b'{"error": {"message": "invalid api key"}}')
            else:
                self._send(200, MODELS)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(min(length, 1 << 24))
            self.server.posts += 1  # type: ignore[attr-defined]
            if mode == "ok":
                self._send(200, _chat_reply("{}"))
            elif mode == "auth":
                if self.headers.get("Authorization") != f"Bearer {KEY}":
                    self._send(401, b'{"error": {"message": "invalid api key"}}')
                else:
                    self._send(200, _chat_reply("{}"))
            elif mode == "malformed":
                self._send(200, b'{"choices": "nope"}')
            elif mode == "not_json":
                self._send(200, b"<html>busy</html>")
            elif mode == "429":
                self._send(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "1"})
            elif mode == "empty":
                self._send(200, _chat_reply(""))
            elif mode == "echo":  # the Authorization header repeated in a good reply
                got = self.headers.get("Authorization", "")
                self._send(200, _chat_reply(json.dumps({"bio": f"you sent {got}"})))
            elif mode == "toolcall":  # content: null, a tool call instead
                reply = json.loads(_chat_reply("{}"))
                reply["choices"][0]["message"] = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "t",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
                self._send(200, json.dumps(reply).encode())
            elif mode == "think":
                self._send(200, _chat_reply('<think>JSON, then.</think>{"bio": "x"}'))
            elif mode == "silent":
                time.sleep(MAX_SILENCE)
            elif mode == "trickle":
                body = _chat_reply("{" + " " * 200 + "}")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                t0 = time.monotonic()
                for b in body:
                    if time.monotonic() - t0 > MAX_SILENCE:
                        break
                    try:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(1.0)
            elif mode == "reset":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b'{"choices": [')
                self.wfile.flush()
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                self.connection.close()
            else:
                raise AssertionError(mode)

    return Handler


class Stand:
    """A loopback stand-in of one mode on a free port, for one case."""

    def __init__(self, mode: str):
        self.server = _Server(("127.0.0.1", 0), make_handler(mode))
        self.server.posts = 0  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------- case inputs


def _mcq(tmp: Path, name: str = "mcq.jsonl", src: str = "clean.jsonl") -> Path:
    return _text(tmp / "work" / name, (FIXTURES / "audit" / src).read_bytes())


def _big_question(tmp: Path) -> Path:
    rows = [
        json.loads(x)
        for x in (FIXTURES / "audit" / "clean.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    rows[0]["question"] = "What is C's goal? " + "word " * 1_000_000  # 5 MB
    path = tmp / "work" / "run_big" / "tom.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _text(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


CHAIN = (
    "steps:\n  - {name: rec, generator: history, options: {synthesize: true}}\n"
    "  - {name: mcqs, generator: distractors, options: {n: 2}, inputs: {input: "
    "rec/../../../etc/passwd}}\n"
)


def make_bank(tmp: Path) -> Path:
    """A bank of two released versions (two run_clean MCQs, then two more), made in process
    with the structure check only; its folder."""
    sys.path.insert(0, str(ROOT))
    from gen.engine.runner import run_config
    from gen.generators.bank import BankConfig

    lines = (
        (FIXTURES / "audit" / "run_clean" / "tom.jsonl")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    bank = tmp / "work" / "bank"
    for k, part in enumerate((lines[:2], lines[2:4])):
        src = _text(tmp / "src" / f"r{k}" / "tom.jsonl", "".join(part)).parent
        cfg = BankConfig(
            action="add",
            bank=str(bank),
            input=str(src),
            near_dup_sim=None,
            fail_on="never",
            audit_options={"checks": ["structure"], "embeddings": False},
            cache_dir=None,
            progress="off",
        )
        run_config("bank", cfg, tmp / "src" / f"out{k}", quiet=True)
    return bank


def versions_digest(bank: Path) -> dict[str, str]:
    """SHA-256 of every file of every released version of a bank."""
    out = {}
    for p in sorted((bank / "versions").rglob("*")):
        if p.is_file() and not p.name.startswith(".staging"):
            out[p.relative_to(bank).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# --------------------------------------------------------------------------- the table


@dataclass
class Case:
    """One hostile command: ``setup(tmp, ctx)`` writes its inputs and returns its arguments
    (``ctx`` holds a stand-in's ``url`` and anything the check needs); ``expect`` the exit codes
    that are a correct answer; ``check(tmp, ctx, proc)`` an invariant beyond the exit (a problem
    string, or None)."""

    name: str
    setup: Callable[[Path, dict[str, Any]], list[str]]
    expect: tuple[int, ...] = (2,)
    server: str | None = None
    timeout: float = 120.0
    run_dir: bool = True
    """Add ``hydra.run.dir=<tmp>/work/run`` (False: the case sets its own output options)."""
    check: Callable[[Path, dict[str, Any], subprocess.CompletedProcess], str | None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    allowed: tuple[str, ...] = ()
    """More paths (relative to the case folder) a run may write under."""


def _fifo(tmp: Path, ctx: dict[str, Any]) -> list[str]:
    os.mkfifo(tmp / "work" / "rows.jsonl")
    return ["audit", "input=rows.jsonl", "embeddings=false"]


def _sweep_check(tmp: Path, ctx: dict[str, Any], proc: subprocess.CompletedProcess) -> str | None:
    ran = [k for k in range(3) if (tmp / "work" / "sweep" / str(k) / "manifest.json").is_file()]
    if ran != [0, 1, 2]:
        return f"jobs run: {ran} of [0, 1, 2]"
    if sum(line.startswith("job ") for line in proc.stdout.splitlines()) != 3:
        return "no line per job"
    return None


def _bank_setup(how: str) -> Callable[[Path, dict[str, Any]], list[str]]:
    def setup(tmp: Path, ctx: dict[str, Any]) -> list[str]:
        bank = make_bank(tmp)
        current = bank / "current"
        if how == "removed":
            current.unlink()
        else:
            current.unlink()
            current.symlink_to(Path("versions") / "v0001")
        ctx["digest"] = versions_digest(bank)
        batch = (
            _mcq(tmp, "leak/tom.jsonl", "planted_leak.jsonl").parent
            if how != "rolled_back_accepted"
            else _text(
                tmp / "work" / "ok" / "tom.jsonl",
                "".join(
                    (FIXTURES / "audit" / "run_clean" / "tom.jsonl")
                    .read_text(encoding="utf-8")
                    .splitlines(keepends=True)[4:6]
                ),
            ).parent
        )
        return [
            "bank",
            "add",
            f"bank={bank}",
            f"input={batch}",
            "near_dup_sim=null",
            "audit_options={checks:[structure,leakage],embeddings:false}",
        ]

    return setup


def _bank_check(tmp: Path, ctx: dict[str, Any], proc: subprocess.CompletedProcess) -> str | None:
    after = versions_digest(tmp / "work" / "bank")
    changed = sorted(k for k in ctx["digest"] if after.get(k) != ctx["digest"][k])
    return f"released version files changed or removed: {changed[:3]}" if changed else None


def _persona(tmp: Path, ctx: dict[str, Any], *extra: str) -> list[str]:
    return [
        "personas",
        "n=1",
        "llm=openai",
        f"llm.base_url={ctx['url']}",
        "llm.model=m",
        "llm.timeout=5",
        "llm.max_retries=0",
        "llm.preflight_timeout=5",
        *extra,
    ]


def _replayed_check(
    tmp: Path, ctx: dict[str, Any], proc: subprocess.CompletedProcess
) -> str | None:
    posts = ctx["stand"].server.posts
    return (
        None
        if posts
        else "the healthy server got no call: the bad replies were replayed from the cache"
    )


def _poisoned_by(mode: str) -> Callable[[Path, dict[str, Any]], list[str]]:
    """Run once against a stand-in of ``mode`` (``malformed``: ``{"choices": "nope"}``; a tool
    call, say), same cache; the case then points the same command at a healthy server, which
    must see the calls again."""

    def setup(tmp: Path, ctx: dict[str, Any]) -> list[str]:
        bad = Stand(mode)
        try:
            argv = _persona(
                tmp, {"url": bad.url}, "progress=off", f"hydra.run.dir={tmp / 'work' / 'run0'}"
            )
            subprocess.run(
                [sys.executable, "-m", "gen", *argv],
                cwd=tmp / "work",
                env=env_for(tmp, {}),
                capture_output=True,
                timeout=120,
                check=False,
            )
        finally:
            bad.close()
        return _persona(tmp, ctx)

    return setup


IMPOSTOR = """import gen


class Cfg(gen.CommonConfig):
    pass


@gen.generator("audit", config=Cfg)
def fake_audit(cfg, ctx):
    "Impostor."
    raise RuntimeError("the impostor ran")


@gen.generator("digital", config=Cfg)
def fake_digital(cfg, ctx):
    "Impostor."
    raise RuntimeError("the impostor ran")


KIND = gen.MCQKind(name="mcq", files=("mcq.jsonl",))  # gen's own kind's name
"""


def _plugins(*argv: str) -> Callable[[Path, dict[str, Any]], list[str]]:
    """A distribution on the case's ``PYTHONPATH`` whose entry points impersonate (``other``
    decorates ``audit``, ``digital`` takes a built-in name, a kind named ``mcq``) or break (``sx``
    raises SystemExit, ``bad`` does not import, ``notgen`` is no generator, the kind ``thing`` no
    Kind); then ``gen <argv>``."""

    def setup(tmp: Path, ctx: dict[str, Any]) -> list[str]:
        site = tmp / "site"
        dist = site / "impostor_plugin-0.1.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: impostor-plugin\nVersion: 0.1\n"
        )
        (dist / "entry_points.txt").write_text(
            "[gen.generators]\nother = impostor:fake_audit\ndigital = impostor:fake_digital\n"
            "sx = sx_plugin:x\nbad = bad_plugin:x\nnotgen = json:dumps\n"
            "[gen.kinds]\nmcq = impostor:KIND\nsx = sx_plugin:x\nthing = json:dumps\n"
        )
        (site / "impostor.py").write_text(IMPOSTOR)
        (site / "sx_plugin.py").write_text("raise SystemExit(0)\n")
        (site / "bad_plugin.py").write_text("import no_such_module\n")
        ctx["env"] = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
        return list(argv)

    return setup


def _own_mcq_kind(tmp: Path, ctx: dict[str, Any], proc: subprocess.CompletedProcess) -> str | None:
    frame = tmp / "work" / "bank" / "current" / "mcq.parquet"
    return None if frame.is_file() else "the mcq records did not reach the bank's mcq kind"


def _names_plugin(tmp: Path, ctx: dict[str, Any], proc: subprocess.CompletedProcess) -> str | None:
    if "impostor-plugin" not in proc.stderr:
        return "the plugin that took a built-in name is not named"
    return None


def _pool_check(tmp: Path, ctx: dict[str, Any], proc: subprocess.CompletedProcess) -> str | None:
    return "a pool folder under outputs/" if (tmp / "work" / "outputs").exists() else None


def _merge(tmp: Path, how: str) -> list[str]:
    """``merge`` of a two-shard personas run (made in process with a scripted LLM), its shards
    changed ``how``: ``copied`` (shard 0's records over shard 1's), ``missing``, ``twice``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from shards import personas_shards

    s0, s1 = personas_shards(tmp / "work" / "sh")
    if how == "copied":
        shutil.copy(s0 / "personas.jsonl", s1 / "personas.jsonl")
    given = {"missing": [s0], "twice": [s0, s1, s1]}.get(how, [s0, s1])
    return ["merge", f"input=[{','.join(map(str, given))}]"]


def _partial_check(tmp: Path, ctx: dict[str, Any], proc: subprocess.CompletedProcess) -> str | None:
    merged = json.loads((tmp / "work" / "run" / "manifest.json").read_text())["merged"]
    return None if merged["complete"] is False and merged["missing_shards"] == [1] else str(merged)


def _in_bank(tmp: Path, ctx: dict[str, Any], where: str) -> list[str]:
    bank = make_bank(tmp)
    ctx["digest"] = versions_digest(bank)
    return ["audit", f"input={_mcq(tmp).name}", "embeddings=false", f"hydra.run.dir={bank / where}"]


def _export_into_bank(tmp: Path, ctx: dict[str, Any]) -> list[str]:
    bank = make_bank(tmp)
    ctx["digest"] = versions_digest(bank)
    other = tmp / "work" / "other"
    (other / "versions" / "v0001").mkdir(parents=True)
    (other / "current").symlink_to(Path("versions") / "v0001")
    return ["bank", "export", f"bank={bank}", "format=parquet", f"out={other}/versions/v0001/x"]


def _shards_check(tmp: Path, ctx: dict[str, Any], proc: subprocess.CompletedProcess) -> str | None:
    made = sorted((tmp / "work" / "run" / "rec.shards").iterdir())
    return None if [p.name for p in made if p.is_dir()] == ["0", "1", "2", "3"] else f"{made[:6]}"


CASES: list[Case] = [
    # a sweep runs every job and reports each
    Case(
        "sweep: a job's exit 1 does not stop the others",
        lambda t, c: [
            "audit",
            "-m",
            f"input={_mcq(t, 'leak.jsonl', 'planted_leak.jsonl').name},"
            f"{_mcq(t).name},{_mcq(t).name}",
            "embeddings=false",
            "checks=[structure,leakage]",
            f"hydra.sweep.dir={t / 'work' / 'sweep'}",
        ],
        expect=(1,),
        run_dir=False,
        check=_sweep_check,
        allowed=("work/sweep",),
    ),
    # bad input: one line, exit 2
    Case(
        "chain step input with ..",
        lambda t, c: (_text(t / "work" / "chain.yaml", CHAIN), ["pipeline", "chain=chain.yaml"])[1],
    ),
    Case(
        "scenarios verify: non-UTF-8 lock",
        lambda t, c: (
            _text(t / "work" / "sc" / "MANIFEST.lock.json", b'{"schema_revision": "\xff"}'),
            ["scenarios", "action=verify", "input=sc"],
        )[1],
    ),
    Case(
        "input=/dev/zero (tom, as JSONL)",
        lambda t, c: ["tom", "input=/dev/zero", "input_format=jsonl"],
    ),
    Case("input=/dev/zero (rerank)", lambda t, c: ["rerank", "input=/dev/zero"]),
    Case("input=/dev/zero (history)", lambda t, c: ["history", "input=/dev/zero"]),
    Case("input=/dev/zero (audit)", lambda t, c: ["audit", "input=/dev/zero", "embeddings=false"]),
    Case("input is a FIFO (audit)", _fifo, timeout=60),
    Case(
        "a 5 MB question (audit: a finding)",
        lambda t, c: ["audit", f"input={_big_question(t)}", "embeddings=false"],
        expect=(1,),
        timeout=300,
    ),
    Case(
        "a lone surrogate escape in a JSONL input",
        lambda t, c: (
            _text(
                t / "work" / "mcq.jsonl",
                (FIXTURES / "audit" / "clean.jsonl")
                .read_text(encoding="utf-8")
                .replace("What is", "What\\ud800 is", 1),
            ),
            ["audit", "input=mcq.jsonl", "embeddings=false"],
        )[1],
    ),
    Case(
        "binary prompt_conditions (scenarios)",
        lambda t, c: (
            _text(t / "work" / "pc.json", b"\xff\xfe\x00\x01"),
            ["scenarios", "n=1", "prompt_conditions=pc.json"],
        )[1],
    ),
    Case(
        "binary prompt_conditions (evaluate)",
        lambda t, c: (
            _text(t / "work" / "pc.json", b"\xff\xfe\x00\x01"),
            [
                "evaluate",
                f"input={FIXTURES / 'judge' / 'scenarios.jsonl'}",
                "judge=smollm2",
                "mode=scenarios",
                "prompt_conditions=pc.json",
            ],
        )[1],
    ),
    Case(
        "hydra.job.chdir=true with a relative input",
        lambda t, c: ["audit", f"input={_mcq(t).name}", "embeddings=false", "hydra.job.chdir=true"],
    ),
    Case(
        "llm.base_url=notaurl",
        lambda t, c: ["personas", "n=1", "llm=openai", "llm.base_url=notaurl"],
    ),
    Case(
        "embedder.model_path=/etc/passwd",
        lambda t, c: [
            "distractors",
            f"input={EXAMPLES / 'goals.jsonl'}",
            "n=1",
            "embedder.model_path=/etc/passwd",
        ],
    ),
    # easy slips that wrote outside the run folder
    Case(
        "hydra.run.dir= (empty)",
        lambda t, c: ["audit", f"input={_mcq(t).name}", "embeddings=false", "hydra.run.dir="],
        run_dir=False,
    ),
    Case("cache_dir= (empty)", lambda t, c: ["audit", f"input={_mcq(t).name}", "cache_dir="]),
    Case(
        "hydra.output_subdir=../..",
        lambda t, c: [
            "audit",
            f"input={_mcq(t).name}",
            "embeddings=false",
            "hydra.output_subdir=../..",
        ],
    ),
    Case(
        "hydra.job.name=../../x",
        lambda t, c: [
            "audit",
            f"input={_mcq(t).name}",
            "embeddings=false",
            "hydra.job.name=../../x",
        ],
    ),
    Case(
        "digital's default pool_dir with a server that fails",
        lambda t, c: [
            "digital",
            "n=1",
            "persona_pool=6",
            "llm=openai",
            f"llm.base_url={c['url']}",
            "llm.model=m",
            "llm.timeout=5",
            "llm.max_retries=0",
            "llm.preflight_timeout=5",
        ],
        server="429",
        expect=(1, 2),
        check=_pool_check,
    ),
    # the bank's released versions whatever its pointer says
    Case(
        "bank: current removed, a refused add",
        _bank_setup("removed"),
        expect=(1, 2),
        check=_bank_check,
        timeout=300,
        allowed=("work/bank",),
    ),
    Case(
        "bank: current rolled back, a refused add",
        _bank_setup("rolled_back"),
        expect=(1, 2),
        check=_bank_check,
        timeout=300,
        allowed=("work/bank",),
    ),
    Case(
        "bank: current rolled back, an accepted add",
        _bank_setup("rolled_back_accepted"),
        expect=(0, 1, 2),
        check=_bank_check,
        timeout=300,
        allowed=("work/bank",),
    ),
    # a key on the command line, servers that misbehave: a typed reject, a bounded retry, or the
    # run's one line (exit 2: the backend stopped it), within the case's time
    Case(
        "llm.api_key on the command line",
        lambda t, c: _persona(t, c, f"llm.api_key={KEY}"),
        server="auth",
        expect=(2,),
    ),
    Case(
        "server demands the key; key only in the environment",
        lambda t, c: _persona(t, c),
        server="auth",
        expect=(0, 1),
    ),
    Case(
        'server answers {"choices": "nope"}',
        lambda t, c: _persona(t, c),
        server="malformed",
        expect=(0, 1, 2),
    ),
    Case(
        "a bad reply is not cached (then a healthy server)",
        _poisoned_by("malformed"),
        server="ok",
        expect=(0, 1, 2),
        check=_replayed_check,
        timeout=180,
    ),
    Case(
        "server answers a body that is not JSON",
        lambda t, c: _persona(t, c),
        server="not_json",
        expect=(0, 1, 2),
    ),
    Case(
        "server answers 429 with Retry-After",
        lambda t, c: _persona(t, c),
        server="429",
        expect=(0, 1, 2),
    ),
    Case(
        "server answers an empty content",
        lambda t, c: _persona(t, c),
        server="empty",
        expect=(0, 1, 2),
    ),
    Case(
        "server resets the connection mid-reply",
        lambda t, c: _persona(t, c),
        server="reset",
        expect=(0, 1, 2),
    ),
    Case(
        "server goes silent after /models",
        lambda t, c: _persona(t, c),
        server="silent",
        expect=(0, 1, 2),
        timeout=60,
    ),
    Case(
        "server trickles one byte a second",
        lambda t, c: _persona(t, c),
        server="trickle",
        expect=(0, 1, 2),
        timeout=60,
    ),
    # issue 43: secrets/plugins/cache
    Case(
        "secrets: hydra.run.dir interpolates the key",
        lambda t, c: ["personas", "n=1", "hydra.run.dir=runs/${oc.env:OPENAI_API_KEY}"],
        run_dir=False,
    ),
    Case(
        "secrets: hydra.job.name interpolates the key",
        lambda t, c: ["personas", "n=1", "hydra.job.name=${oc.env:OPENAI_API_KEY}"],
    ),
    Case(
        "secrets: a launcher option interpolates the key",
        lambda t, c: [
            "pipeline",
            f"chain={EXAMPLES / 'chains' / 'wagibench.yaml'}",
            "shards=2",
            "launcher=submitit_slurm",
            "launcher_options.partition=${oc.env:OPENAI_API_KEY}",
        ],
    ),
    Case(
        "secrets: an option's value interpolates the key (validation error)",
        lambda t, c: ["tom", "n=1", "language=${oc.env:OPENAI_API_KEY}"],
    ),
    Case(
        "secrets: server echoes the Authorization header in a 200 reply",
        lambda t, c: _persona(t, c, "draws=1", "attempts=1"),
        server="echo",
        expect=(0, 1, 2),
    ),
    Case(
        "cache: a tool-call reply is not cached (then a healthy server)",
        _poisoned_by("toolcall"),
        server="ok",
        expect=(0, 1, 2),
        check=_replayed_check,
        timeout=180,
    ),
    Case(
        "cache: a reply with a <think> block before its JSON",
        lambda t, c: _persona(t, c),
        server="think",
        expect=(0, 1, 2),
    ),
    Case("plugins: a module decorating audit under another name", _plugins("other", "n=1")),
    Case(
        "plugins: a plugin registered as digital",
        _plugins("digital", "--help"),
        expect=(0,),
        check=_names_plugin,
    ),
    Case("plugins: SystemExit in a plugin's import", _plugins("sx", "n=1")),
    Case("plugins: --help beside broken plugins", _plugins("--help"), expect=(0,), run_dir=False),
    Case("plugins: a broken plugin's own name", _plugins("bad", "n=1")),
    # issue 44: kinds
    Case(
        "kinds: bank add of mcq records beside a plugin kind named mcq",
        lambda t, c: [
            *_plugins("bank", "add", "bank=bank", "near_dup_sim=null")(t, c),
            f"input={_mcq(t).name}",
        ],
        expect=(0,),
        allowed=("work/bank",),
        check=_own_mcq_kind,
    ),
    Case(
        "kinds: bank add kind=<not a kind>",
        lambda t, c: ["bank", "add", "bank=bank", f"input={_mcq(t).name}", "kind=sightingz"],
    ),
    # issue 43: merge/bank/API
    Case("merge: shard 0's records copied over shard 1's", lambda t, c: _merge(t, "copied")),
    Case("merge: a shard missing", lambda t, c: _merge(t, "missing")),
    Case("merge: a shard given twice", lambda t, c: _merge(t, "twice")),
    Case(
        "merge: allow_missing=true (a partial merge, marked)",
        lambda t, c: [*_merge(t, "missing"), "allow_missing=true"],
        expect=(0,),
        check=_partial_check,
    ),
    Case(
        "merge: hydra.run.dir=<one of its inputs>",
        lambda t, c: [*_merge(t, "whole"), f"hydra.run.dir={t / 'work' / 'sh' / 's1'}"],
        run_dir=False,
    ),
    Case(
        "audit: hydra.run.dir=bank/versions/v0002",
        lambda t, c: _in_bank(t, c, "versions/v0002"),
        run_dir=False,
        check=_bank_check,
        timeout=300,
    ),
    Case(
        "audit: hydra.run.dir=bank/current/x",
        lambda t, c: _in_bank(t, c, "current/x"),
        run_dir=False,
        check=_bank_check,
        timeout=300,
    ),
    Case(
        "bank export out=<another bank>/versions/v0001/x",
        _export_into_bank,
        check=_bank_check,
        timeout=300,
    ),
    Case(
        "pipeline shards=10000 on a 4-record step",
        lambda t, c: (
            _text(
                t / "work" / "chain.yaml",
                "steps:\n  - {name: rec, generator: history, options: {synthesize: true, n: 4}}\n",
            ),
            ["pipeline", "chain=chain.yaml", "shards=10000"],
        )[1],
        expect=(0,),
        check=_shards_check,
        timeout=300,
    ),
]
"""Every case, in the order they run; adding one is one entry."""


# --------------------------------------------------------------------------- running a case


LIBRARY_CACHES: tuple[str, ...] = ()
"""Caches a library may keep under ``$HOME`` whatever the command: none (matplotlib's config and
font list go to gen's cache folder since issue 43)."""


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def env_for(tmp: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEN_", "OPENAI_", "HYDRA_"))}
    env.update(
        HOME=str(tmp / "home"),
        XDG_CACHE_HOME=str(tmp / "home" / ".cache"),
        GEN_CACHE_DIR=str(tmp / "cache"),
        OPENAI_API_KEY=KEY,
        NO_COLOR="1",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
    env.update(extra)
    return env


def secrets_in(tmp: Path, texts: list[str]) -> list[str]:
    """Where the key is: files under the case folder the run wrote, and the process output."""
    found = [f"<{n}>" for n, t in zip(("stdout", "stderr"), texts, strict=True) if KEY in t]
    for dirpath, _, filenames in os.walk(tmp):
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_fifo() or not p.is_file():
                continue
            try:
                if KEY.encode() in p.read_bytes():
                    found.append(p.relative_to(tmp).as_posix())
            except OSError:
                continue
    return found


def run_case(case: Case, base: Path) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="case-", dir=base))
    for d in ("work", "home", "cache"):
        (tmp / d).mkdir()
    ctx: dict[str, Any] = {}
    stand = Stand(case.server) if case.server else None
    if stand is not None:
        ctx["url"], ctx["stand"] = stand.url, stand
    row: dict[str, Any] = {"case": case.name}
    try:
        argv = case.setup(tmp, ctx)
        argv += ["progress=off"] + (
            [f"hydra.run.dir={tmp / 'work' / 'run'}"] if case.run_dir else []
        )
        before = snapshot(tmp)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gen", *argv],
            cwd=tmp / "work",
            env=env_for(tmp, {**case.env, **ctx.get("env", {})}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        hung = False
        try:
            out, err = proc.communicate(timeout=case.timeout)
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        wall = time.monotonic() - t0
        done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        after = snapshot(tmp)
        allowed = ("work/run", "cache", *LIBRARY_CACHES, *case.allowed)
        outside = sorted(
            k
            for k in before.keys() | after.keys()
            if before.get(k) != after.get(k)
            and not any(k == a or k.startswith(a + "/") for a in allowed)
        )
        err_lines = [ln for ln in err.splitlines() if ln.strip() and "[HYDRA]" not in ln]
        traceback = "Traceback" in out or "Traceback" in err
        unexpected = "error: unexpected " in err  # exit 1 as a crash, not as findings
        problem = case.check(tmp, ctx, done) if case.check is not None and not hung else None
        secrets = secrets_in(tmp, [out, err])
        one_line = proc.returncode == 0 or len(err_lines) <= 1
        clean = (
            not hung
            and proc.returncode in case.expect
            and one_line
            and not traceback
            and not unexpected
            and not outside
            and not secrets
            and problem is None
        )
        row.update(
            argv=argv,
            exit=None if hung else proc.returncode,
            expect=list(case.expect),
            wall_s=round(wall, 1),
            clean=clean,
            hung=hung,
            traceback=traceback,
            unexpected=unexpected,
            stderr_lines=len(err_lines),
            writes_outside=outside[:5],
            n_writes_outside=len(outside),
            secrets=secrets,
            problem=problem,
            stderr_tail=err_lines[-1][:300] if err_lines else "",
        )
    except Exception as e:  # noqa: BLE001 - a case that cannot be set up is reported, not fatal
        row.update(clean=False, error=f"setup: {type(e).__name__}: {e}")
    finally:
        if stand is not None:
            stand.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--json", type=Path, help="write the counts and every case's row here")
    ap.add_argument(
        "-v", "--verbose", action="store_true", help="print each case's last stderr line"
    )
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.only or args.only in c.name]
    if args.list:
        for c in cases:
            print(c.name)
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="gen-fuzz-") as base:
        for c in cases:
            row = run_case(c, Path(base))
            rows.append(row)
            flags = [k for k in ("hung", "traceback", "unexpected") if row.get(k)]
            flags += [f"writes outside: {', '.join(row['writes_outside'][:3])}"] * bool(
                row.get("n_writes_outside")
            )
            flags += [f"secret in {', '.join(row['secrets'][:5])}"] * bool(row.get("secrets"))
            flags += [f"{row['stderr_lines']} stderr lines"] * (
                row.get("stderr_lines", 0) > 1 and bool(row.get("exit"))
            )
            flags += [row["problem"]] if row.get("problem") else []
            flags += [row["error"]] if row.get("error") else []
            status = "clean" if row["clean"] else "NOT CLEAN"
            print(
                f"{status:9} exit={row.get('exit')} "
                f"(expect {row.get('expect')}) {row.get('wall_s', '-')}s  {c.name}"
                + (f"  [{'; '.join(map(str, flags))}]" if flags else ""),
                flush=True,
            )
            if args.verbose and row.get("stderr_tail"):
                print(f"          {row['stderr_tail']}")
    counts = {
        "cases": len(rows),
        "clean": sum(r["clean"] for r in rows),
        "tracebacks": sum(bool(r.get("traceback")) for r in rows),
        "unexpected": sum(bool(r.get("unexpected")) for r in rows),
        "writes_outside": sum(bool(r.get("n_writes_outside")) for r in rows),
        "secrets": sum(bool(r.get("secrets")) for r in rows),
        "hung": sum(bool(r.get("hung")) for r in rows),
        "wrong_exit": sum(r.get("exit") is not None and r["exit"] not in r["expect"] for r in rows),
        "setup_errors": sum("error" in r for r in rows),
    }
    print("counts: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "date": dt.date.today().isoformat(),
                    "machine": platform.platform(),
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "counts": counts,
                    "cases": rows,
                },
                indent=1,
            ).replace(KEY, "<KEY>")
            + "\n",
            encoding="utf-8",
        )
    return 0 if counts["clean"] == counts["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
