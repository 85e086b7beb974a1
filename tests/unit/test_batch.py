"""Batch mode (``llm.batch=true``, :mod:`gen.llm.batch`) against a loopback stand-in of the Batch
API (tests/batch_standin.py): a batch-mode nocontext run writes the live run's records and
rejects byte for byte, with the live usage at the batch rate; a run SIGKILLed while it polls
resumes by the batch id in its folder without submitting again; a failed line is a typed
reject; a failed or expired batch ends the run with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gen.engine.runner import run_config as run
from gen.errors import BackendError
from gen.generators.nocontext import NocontextConfig
from gen.llm.usage import Usage
from tests.batch_standin import BatchStandIn
from tests.conftest import gen_env
from tests.llm_calls import one_line_exit_2
from tests.nocontext_runs import knows_giveaways, leaky_bank

NAME = "nocontext"
KEY = "sk-batch-test-0123456789abcdef"


def llm(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "backend": "openai",
        "base_url": url,
        "model": "loopback",
        "api_key_env": "BATCH_TEST_KEY",
        "price": {"input": 2.0, "output": 8.0},
        "batch_poll": 0.02,
        **extra,
    }


def screen(tmp_path: Path, url: str, out: str, **extra: Any) -> Path:
    bank = tmp_path / "items.jsonl"
    if not bank.exists():
        leaky_bank(bank)
    cfg = NocontextConfig(
        input=str(bank),
        cache_dir=str(tmp_path / f"cache-{out}"),
        progress="off",
        llm=llm(url, **extra),
    )
    run(NAME, cfg, tmp_path / out, quiet=True)
    return tmp_path / out


def usage(folder: Path) -> tuple[dict[str, Any], float]:
    manifest = json.loads((folder / "manifest.json").read_text())
    (model,) = manifest["models"].values()
    return model["usage"], model["cost"]


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCH_TEST_KEY", KEY)


def test_a_batch_run_writes_the_live_runs_records_at_the_batch_rate(tmp_path: Path) -> None:
    with BatchStandIn(knows_giveaways) as srv:
        live = screen(tmp_path, srv.url, "live")
        calls = srv.chat_calls
        batched = screen(tmp_path, srv.url, "batch", batch=True)
    assert calls == 12 * 3 and srv.chat_calls == calls  # the batch run made no live call
    assert srv.uploads == srv.submissions == 1
    for name in ("nocontext.jsonl", "rejects.jsonl", "removed.jsonl"):
        assert (batched / name).read_bytes() == (live / name).read_bytes(), name
    live_usage, live_cost = usage(live)
    batch_usage, batch_cost = usage(batched)
    assert batch_usage["batched_calls"] == batch_usage["calls"] == live_usage["calls"] == 36
    assert batch_usage["cache_hits"] == 0
    for field in ("prompt_tokens", "completion_tokens"):
        assert batch_usage[field] == live_usage[field] == batch_usage[f"batched_{field}"]
    assert batch_cost == pytest.approx(live_cost / 2) and live_cost > 0
    # the key went in headers only: never into the run folder's files
    assert set(srv.authorization) == {f"Bearer {KEY}"}
    state = [json.loads(x) for x in (batched / "batches.jsonl").read_text().splitlines()]
    assert [r["event"] for r in state] == ["uploaded", "submitted", "ended"]
    assert state[-1]["status"] == "completed"
    for path in batched.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
    assert not (batched / ".batch-pass").exists()


def test_a_failed_line_is_a_typed_reject(tmp_path: Path) -> None:
    def fail(body: dict[str, Any]) -> bool:
        return "outcome 4." in body["messages"][-1]["content"]

    with BatchStandIn(knows_giveaways, fail=fail) as srv:
        out = screen(tmp_path, srv.url, "batch", batch=True)
        assert srv.chat_calls == 0 and srv.submissions == 1
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["record_id"], r["reason"]) for r in rejects] == [("item4", "batch_error")]
    assert "this line is refused" in rejects[0]["detail"]
    assert len((out / "nocontext.jsonl").read_text().splitlines()) == 11
    # a rerun into the folder reads the same answers back: no second submission
    with BatchStandIn(knows_giveaways) as srv2:
        again = screen(tmp_path, srv2.url, "batch", batch=True)
        assert srv2.submissions == 0 and srv2.chat_calls == 0
    assert (again / "rejects.jsonl").read_text() == (out / "rejects.jsonl").read_text()


def test_a_failed_batch_stops_the_run_with_one_line(tmp_path: Path) -> None:
    with BatchStandIn(knows_giveaways, outcome="failed") as srv:
        with pytest.raises(BackendError, match=r"batch batch_1 failed \(the model is not served"):
            screen(tmp_path, srv.url, "batch", batch=True)
    assert not (tmp_path / "batch" / "nocontext.jsonl").exists()


def test_an_expired_batch_stops_and_a_rerun_sends_only_the_rest(tmp_path: Path) -> None:
    with BatchStandIn(knows_giveaways, outcome="expired") as srv:
        with pytest.raises(BackendError, match=r"expired with 18 of 36 calls answered"):
            screen(tmp_path, srv.url, "batch", batch=True)
        srv.outcome = "completed"
        out = screen(tmp_path, srv.url, "batch", batch=True)
        assert srv.submissions == 2 and srv.chat_calls == 0
        sent = [len(f.splitlines()) for k, f in srv.files.items() if k.startswith("file-")]
        assert sent == [36, 18]
        live = screen(tmp_path, srv.url, "live")
    assert (out / "nocontext.jsonl").read_bytes() == (live / "nocontext.jsonl").read_bytes()


def test_a_cli_run_with_a_failed_batch_exits_2_with_one_line(tmp_path: Path) -> None:
    leaky_bank(tmp_path / "items.jsonl")
    with BatchStandIn(knows_giveaways, outcome="failed") as srv:
        proc = subprocess.run(
            [sys.executable, "-m", "gen", NAME, *cli(tmp_path, srv.url, "out")],
            env={**gen_env(tmp_path / "cache"), "BATCH_TEST_KEY": KEY},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert "batch_1 failed" in one_line_exit_2(proc)


def cli(tmp_path: Path, url: str, out: str) -> list[str]:
    return [
        f"input={tmp_path / 'items.jsonl'}",
        "llm=openai",
        f"llm.base_url={url}",
        "llm.model=loopback",
        "llm.api_key_env=BATCH_TEST_KEY",
        "llm.batch=true",
        "llm.batch_poll=0.05",
        "progress=off",
        f"hydra.run.dir={tmp_path / out}",
    ]


def test_a_run_killed_while_polling_resumes_without_submitting_again(tmp_path: Path) -> None:
    leaky_bank(tmp_path / "items.jsonl")
    env = {**gen_env(tmp_path / "cache"), "BATCH_TEST_KEY": KEY}
    with BatchStandIn(knows_giveaways) as srv:
        srv.hold.set()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gen", NAME, *cli(tmp_path, srv.url, "out")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert srv.polled.wait(120), "the run never polled its batch"
            time.sleep(0.2)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert srv.submissions == 1
        assert not (tmp_path / "out" / "nocontext.jsonl").exists()
        srv.hold.clear()
        again = subprocess.run(
            [sys.executable, "-m", "gen", NAME, *cli(tmp_path, srv.url, "out")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 0, again.stderr[-2000:]
        assert srv.submissions == srv.uploads == 1 and srv.chat_calls == 0
        live = screen(tmp_path, srv.url, "live")
    out = tmp_path / "out"
    for name in ("nocontext.jsonl", "rejects.jsonl"):
        assert (out / name).read_bytes() == (live / name).read_bytes(), name


def test_batched_tokens_cost_the_batch_rate() -> None:
    u = Usage()
    u.add(hit=False, prompt=1000, completion=100, seconds=1.0)
    u.add(hit=False, prompt=1000, completion=100, seconds=0.0, batched=True)
    u.add(hit=True, prompt=1000, completion=100, seconds=0.0, batched=True)  # a replay: free
    price = NocontextConfig.model_validate(
        {"llm": {"backend": "openai", "price": {"input": 1.0, "output": 10.0}}}
    ).llm.price
    assert u.cost(price) == pytest.approx(2 * 2000 / 1e6)
    assert u.cost(price, 0.5) == pytest.approx(2000 / 1e6 + 1000 / 1e6)
    assert u.as_dict()["batched_calls"] == 1
    assert "batched_calls" not in Usage().as_dict()
    assert Usage.total([u.as_dict(), u.as_dict()])["batched_completion_tokens"] == 200


def test_a_reask_is_a_second_round(tmp_path: Path) -> None:
    """A call that depends on an answer (instructor's re-ask after an invalid one) is deferred
    in the pass that reads that answer, and goes in the next batch."""
    from gen.llm import Cache, OpenAIConfig, make_llm
    from gen.llm.batch import Deferred, session
    from tests.llm_calls import MESSAGES, Bio

    def script(messages: list[dict[str, str]], seed: int) -> str:
        return '{"bio": "fixed"}' if len(messages) > len(MESSAGES) else '{"name": 1}'

    with BatchStandIn(script) as srv:
        cfg = OpenAIConfig(**llm(srv.url, batch=True, preflight_timeout=0))
        model = make_llm(cfg, Cache(tmp_path / "llm.sqlite"))
        rounds = 0
        with session(tmp_path / "run") as s:
            while True:
                one = model.fork()  # a pass's own usage, as the runner's passes have
                try:
                    answer = one.structured(MESSAGES, Bio, seed=1)
                    break
                except Deferred:
                    rounds += 1
                    s.flush(lambda line: None)
        model.close()
    assert (answer.bio, rounds, srv.submissions) == ("fixed", 2, 2)
    assert one.usage.batched_calls == one.usage.calls == 2 and srv.chat_calls == 0
