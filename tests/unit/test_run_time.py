"""The manifest's ``time`` section: where a run's wall time went (LLM calls, waiting for a slot,
embedding, the text checks, the rest), measured with a scripted LLM and an embedder whose calls
take a known time."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

from gen.engine.registry import REGISTRY, Generator
from gen.engine.runner import CommonConfig, RunContext, run_config
from gen.llm import scripted_llm
from gen.llm.embed import _Cached
from gen.text.gates import Gates

CALL, EMBED = 0.15, 0.1
"""Seconds a scripted call and an embedder's computation take."""


class Item(BaseModel):
    text: str


class SlowEmbedder(_Cached):
    """The real cached-embedder path (:class:`gen.llm.embed._Cached`, no cache) over a computation
    that sleeps."""

    model_id = "slow"

    def compute(self, texts: list[str]) -> Any:
        time.sleep(EMBED)
        return np.ones((len(texts), 4), dtype=np.float32) / 2

    def describe(self) -> dict[str, Any]:
        return {"backend": "fake", "model": "slow"}


def timed(cfg: CommonConfig, ctx: RunContext) -> Any:
    """Per index: two LLM calls at once on a model that takes one (one waits for the other),
    one embedding, the text checks of the replies."""
    gates = Gates([{"role": "user", "content": "Write a goal."}])
    for i in ctx.indices():
        replies: list[str] = []

        def ask(seed: int, into: list[str]) -> None:
            messages = [{"role": "user", "content": f"Write goal {seed}."}]
            into.append(ctx.llm.complete(messages, seed=seed))

        threads = [threading.Thread(target=ask, args=(2 * i + k, replies)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ctx.embedder.encode(replies)
        for text in replies:
            assert gates.check(text, "goal") is None
        yield Item(text=replies[0])


def slow_reply(messages: list[dict[str, str]], seed: int) -> str:
    time.sleep(CALL)
    return "To find the red kettle in the kitchen."


@pytest.fixture()
def registered() -> Any:
    REGISTRY["timed_standin"] = Generator("timed_standin", timed, CommonConfig, "timed stand-in")
    yield
    del REGISTRY["timed_standin"]


def test_the_manifest_splits_the_wall_time_by_where_it_went(
    registered: Any, tmp_path: Path
) -> None:
    from gen.cores import cores_used
    from gen.timing import CLOCK

    # an earlier run of this process had a backend that reports its timings (the clock is the
    # process's): this run's backend reports none, and its split says so
    CLOCK.add("llm_prompt_evaluation", 0.5)
    cfg = CommonConfig(n=3, cache_dir=None, progress="off")
    out = tmp_path / "run"
    ctx = RunContext("timed_standin", cfg, out).use(
        llm=scripted_llm(slow_reply, sampling=cfg.llm), embedder=SlowEmbedder(None)
    )
    result = run_config("timed_standin", cfg, out, ctx=ctx, quiet=True)
    split = json.loads((out / "manifest.json").read_text())["time"]
    assert split == result.manifest["time"]
    parts = split["thread_seconds"]
    # 3 indices: 6 calls of CALL s, one at a time (3 waits of CALL s), 3 embeddings of EMBED s
    assert parts["llm_calls"] == pytest.approx(6 * CALL, abs=0.25)
    assert parts["waiting"] == pytest.approx(3 * CALL, abs=0.25)
    assert parts["embedding"] == pytest.approx(3 * EMBED, abs=0.15)
    assert parts["checks"] > 0  # the gates ran (loading spaCy, tagging each reply)
    assert parts["llm_prompt_evaluation"] is None  # the scripted backend reports no timings
    assert parts["llm_generation"] is None
    wall = split["wall_seconds"]
    assert wall == result.manifest["wall_seconds"]
    # waits overlap the calls (thread-seconds): the parts sum past the wall, "other" stays >= 0
    measured = sum(parts[p] for p in ("llm_calls", "waiting", "embedding", "checks"))
    assert split["other_seconds"] == pytest.approx(max(0.0, wall - measured), abs=0.002)
    assert split["cores"] == cores_used()  # what the run had: cores, jobs sharing them, its share


def test_a_backend_s_own_timings_split_the_calls(
    registered: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama-server's ``timings`` (prompt_ms, predicted_ms) go to prompt evaluation and
    generation; the run's summary says where the time went."""
    cfg = CommonConfig(n=1, cache_dir=None, progress="plain")
    llm = scripted_llm(slow_reply, sampling=cfg.llm)
    create = llm._create

    def with_timings(**kwargs: Any) -> Any:
        reply = create(**kwargs)
        reply.model_extra["timings"] = {"prompt_ms": 40.0, "predicted_ms": 110.0}
        return reply

    llm._create = with_timings
    out = tmp_path / "run"
    ctx = RunContext("timed_standin", cfg, out).use(llm=llm, embedder=SlowEmbedder(None))
    run_config("timed_standin", cfg, out, ctx=ctx)
    parts = json.loads((out / "manifest.json").read_text())["time"]["thread_seconds"]
    assert parts["llm_prompt_evaluation"] == pytest.approx(2 * 0.040)
    assert parts["llm_generation"] == pytest.approx(2 * 0.110)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "time: wall" in ln)
    assert "llm calls" in line and "llm generation 0.2s" in line and "other" in line
