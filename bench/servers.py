"""What a server that misbehaves costs a real ``gen`` run: time, requests, bytes sent, the outcome.

For each misbehaviour of the stand-in server (``tests/fixtures/server/fake_llama_server.py
--misbehave MODE``), one ``python -m gen personas llm=openai …`` run on 127.0.0.1 with a fresh
cache; reported per case: exit code, wall seconds, chat requests the server received, bytes it
received (what ``gen`` sent, re-asks included), the rejects by reason and the first reject's
detail, and the last stderr line. A run is killed at ``--limit`` seconds (reported as exit -9).

``--code`` runs another checkout of the toolkit (an older commit exported with ``git archive``)
against the same stand-in, for a before/after comparison.

Run from the repository root:  python bench/servers.py [--code DIR] [--cases a,b] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "server" / "fake_llama_server.py"
SMALL = ["n=3", "bio_attempts=1", "max_attempts=1", "llm.concurrency=1"]
CASES: dict[str, tuple[list[str], list[str]]] = {
    # name: (stand-in flags, gen options)
    "429_retry_after_1s_twice": (
        ["--misbehave", "429", "--bad-requests", "2"],
        [*SMALL, "llm.max_retries=3"],
    ),
    "503_retry_after_120s": (
        ["--misbehave", "503", "--retry-after", "120"],
        [*SMALL, "llm.timeout=5"],
    ),
    "not_json": (["--misbehave", "notjson"], SMALL),
    "empty_message": (["--misbehave", "empty"], SMALL),
    "choices_nope": (["--misbehave", "badshape"], SMALL),
    "body_cut_off": (["--misbehave", "cutoff"], SMALL),
    "reset_mid_reply": (["--misbehave", "reset"], SMALL),
    "never_answers": (["--misbehave", "silent"], [*SMALL, "llm.preflight_timeout=2"]),
    "silent_after_models_timeout_5": (
        ["--misbehave", "silent-after-models"],
        [*SMALL, "llm.timeout=5", "llm.max_retries=0"],
    ),
    "silent_after_models_defaults": (["--misbehave", "silent-after-models"], ["n=20"]),
    "trickle_1_byte_per_s_timeout_5": (
        ["--misbehave", "trickle"],
        [*SMALL, "llm.timeout=5", "llm.max_retries=0"],
    ),
    "30_MB_reply_one_persona": (["--misbehave", "huge"], ["n=1", "max_attempts=1"]),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_case(code: Path, flags: list[str], options: list[str], limit: float, work: Path) -> dict:
    port = free_port()
    log = work / "server.jsonl"
    server = subprocess.Popen(
        [
            sys.executable,
            str(FAKE),
            "--port",
            str(port),
            "--load-seconds",
            "0",
            "--log",
            str(log),
            "--lifetime",
            str(limit + 60),
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.7)
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "GEN_CACHE_DIR": str(work / "cache"),
        "NO_COLOR": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    env.pop("GEN_DEBUG", None)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "gen",
                "personas",
                "llm=openai",
                f"llm.base_url=http://127.0.0.1:{port}/v1",
                "progress=off",
                f"hydra.run.dir={work / 'run'}",
                *options,
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=limit,
        )
        code_, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        code_, stderr = (
            -9,
            (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or ""),
        )
    seconds = time.monotonic() - t0
    server.kill()
    server.wait()
    rows = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    posts = [r for r in rows if r["method"] == "POST"]
    rejects = []
    for name in ("rejects.jsonl", "rejects.jsonl.partial"):
        f = work / "run" / name
        if f.is_file():
            rejects = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
            break
    lines = [x for x in stderr.splitlines() if x.strip()]
    return {
        "exit_code": code_,
        "seconds": round(seconds, 1),
        "chat_requests": len(posts),
        "bytes_sent": sum(r.get("bytes", 0) for r in posts),
        "rejects_by_reason": dict(Counter(r["reason"] for r in rejects)),
        "first_reject": (rejects[0].get("detail") or "")[:200] if rejects else None,
        "stderr_last_line": lines[-1][:300] if lines else "",
        "stderr_lines": len(lines),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--code", type=Path, default=ROOT, help="the checkout to run (default: this one)"
    )
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--limit", type=float, default=900.0, help="seconds before a run is killed")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "servers.json")
    args = ap.parse_args()
    results = {}
    for name in args.cases.split(","):
        flags, options = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            results[name] = {
                "server": flags,
                "options": options,
                **run_case(args.code.resolve(), flags, options, args.limit, Path(tmp)),
            }
        print(name, json.dumps(results[name]), flush=True)
    out = {
        "bench": "servers",
        "code": str(args.code),
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}",
        "python": platform.python_version(),
        "cases": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
