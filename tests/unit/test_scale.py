"""Server-scale generation: one budget of calls in flight per backend (gen.llm.admission), records
many at once in order (gen.engine.schedule, ctx.imap), and generators that keep a many-slot server
busy
through a counting loopback server while writing the bytes of a one-call-at-a-time run."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from digital_runs import digital_script, run_digital, write_pool
from loopback import Loopback

from gen.engine.runner import run_config
from gen.engine.schedule import Helpers, fan_out, ordered
from gen.generators.digital import DigitalConfig
from gen.generators.nocontext import NocontextConfig
from gen.llm import OpenAIConfig
from gen.llm.admission import Admission


@pytest.fixture(autouse=True)
def _direct(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")


def served(url: str, concurrency: int = 32) -> OpenAIConfig:
    return OpenAIConfig(
        base_url=url, model="loopback", concurrency=concurrency, timeout=60, max_retries=0
    )


# ---------------------------------------------------------------------- generators through a server


def test_digital_keeps_the_server_busy_and_writes_the_sequential_bytes(tmp_path: Path) -> None:
    """Bundles many at once and their apps at once: >= 24 of 32 calls in flight, where one bundle
    at a time had at most 7; the records and state are those of an in-process run."""
    pool = write_pool(tmp_path / "personas.jsonl")
    run_digital(tmp_path / "one", pool, n=12, seed=3, cue_rate=0.5)
    with Loopback(digital_script(), delay=0.3) as srv:
        cfg = DigitalConfig(
            cache_dir=None,
            progress="off",
            persona_file=str(pool),
            n=12,
            seed=3,
            cue_rate=0.5,
            llm=served(srv.url),
        )
        result = run_config("digital", cfg, tmp_path / "many", quiet=True)
    assert result.accepted == 12
    assert srv.max_in_flight >= 24, srv.max_in_flight
    assert srv.max_in_flight <= 32
    for name in ("digital.jsonl", "digital_state.json"):
        assert (tmp_path / "many" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()


def _guess(messages: list[dict[str, str]], seed: int) -> str:
    letters = [line[0] for line in messages[-1]["content"].splitlines() if line[1:3] == ") "]
    return f"Answer 1: {letters[seed % len(letters)]})"


def _bank(path: Path, n: int) -> Path:
    from nocontext_runs import leaky_bank

    return leaky_bank(path, n=n)


def test_nocontext_keeps_the_server_busy_and_writes_the_sequential_bytes(tmp_path: Path) -> None:
    """Items many at once (each with its three shuffles): >= 24 of 32 calls in flight, where one
    item at a time had 3; the records are those of one call at a time."""
    bank = _bank(tmp_path / "items.jsonl", 40)
    outs = {}
    for k in (1, 32):
        with Loopback(_guess, delay=0.3 if k > 1 else 0.0) as srv:
            cfg = NocontextConfig(
                input=str(bank), cache_dir=None, progress="off", llm=served(srv.url, k)
            )
            run_config("nocontext", cfg, tmp_path / str(k), quiet=True)
        assert srv.calls == 120
        if k > 1:
            assert 24 <= srv.max_in_flight <= 32, srv.max_in_flight
        else:
            assert srv.max_in_flight == 1
        outs[k] = [
            (tmp_path / str(k) / f).read_bytes() for f in ("nocontext.jsonl", "removed.jsonl")
        ]
    assert outs[1] == outs[32]


# --------------------------------------------------------------------------- the scheduler


def test_ordered_yields_in_input_order_with_a_bounded_window() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def slow(i: int) -> int:
        with lock:
            started.append(i)
        time.sleep(0.05 if i % 3 == 0 else 0.001)
        return i * i

    out = []
    for i, r in enumerate(ordered(slow, range(40), workers=8, window=10)):
        with lock:
            assert len(started) <= i + 10 + 1  # never more than the window ahead of the consumer
        out.append(r)
    assert out == [i * i for i in range(40)]


def test_imap_lets_sixteen_widths_of_records_pass_a_slow_one(tmp_path: Path) -> None:
    """A record with a long chain of calls holds the records after it until it ends; meanwhile
    ctx.imap starts 16 times the width of them (4 times left a simulated 64-slot run of
    persona-like records 60 % busy, 16 times 75 %), and still no more."""
    from gen.engine.runner import RunContext

    cfg = NocontextConfig(input=str(tmp_path / "x.jsonl"), cache_dir=None, progress="off")
    ctx = RunContext("nocontext", cfg, tmp_path / "run")
    started: set[int] = set()
    lock, release = threading.Lock(), threading.Event()

    def record(i: int) -> int:
        with lock:
            started.add(i)
        if i == 0:
            release.wait(30)
        return i

    out: list[int] = []
    consumer = threading.Thread(target=lambda: out.extend(ctx.imap(record, range(500), width=4)))
    consumer.start()
    deadline = time.monotonic() + 20
    while len(started) < 64 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # none beyond the window starts
    with lock:
        behind = len(started)
    release.set()
    consumer.join(30)
    assert behind == 64, behind
    assert out == list(range(500))


def test_ordered_raises_a_failure_at_its_turn() -> None:
    def f(i: int) -> int:
        if i == 5:
            raise ValueError("five")
        return i

    got = []
    with pytest.raises(ValueError, match="five"):
        for r in ordered(f, range(20), workers=4, window=8):
            got.append(r)
    assert got == [0, 1, 2, 3, 4]


def test_nested_fan_outs_share_helpers_without_deadlock() -> None:
    helpers = Helpers(cap=3)  # far fewer threads than nested items
    inner = fan_out(lambda i: fan_out(lambda j: (i, j), range(5), 5, helpers), range(6), 6, helpers)
    assert inner == [[(i, j) for j in range(5)] for i in range(6)]
    helpers.close()


def test_fan_out_raises_the_earliest_failure() -> None:
    def f(i: int) -> int:
        time.sleep(0.02 * (5 - i))
        if i in (1, 3):
            raise KeyError(i)
        return i

    with pytest.raises(KeyError) as e:
        fan_out(f, range(5), 5, Helpers())
    assert e.value.args == (1,)


# --------------------------------------------------------------------------- the admission


def _fill(adm: Admission, calls: int, seconds: float = 0.0) -> int:
    """Run ``calls`` calls from many threads; the most in flight at once."""
    most = [0]
    lock = threading.Lock()

    def one() -> None:
        with adm.slot():
            with lock:
                most[0] = max(most[0], adm.in_flight)
            time.sleep(seconds)

    threads = [threading.Thread(target=one) for _ in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return most[0]


def test_the_admission_holds_its_limit() -> None:
    adm = Admission(4)
    assert _fill(adm, 20, 0.02) == 4
    stats = adm.stats()
    assert stats["calls"] == 20 and stats["peak"] == 4 and stats["in_flight"] == 0


def test_throttling_halves_the_limit_and_good_calls_grow_it_back() -> None:
    adm = Admission(16, adaptive=True)
    adm.throttled(None)
    assert adm.limit == 8
    adm.throttled(None)  # the same round trip: one cut
    assert adm.limit == 8
    for _ in range(200):
        with adm.slot():
            pass
    assert adm.limit == 16  # grown back, never past the maximum
    fixed = Admission(16)
    fixed.throttled(None)
    assert fixed.limit == 16  # adaptive=false keeps its limit


def test_retry_after_pauses_every_call() -> None:
    adm = Admission(8, adaptive=True)
    adm.throttled(0.3)
    t0 = time.monotonic()
    with adm.slot():
        pass
    assert time.monotonic() - t0 >= 0.25


def test_queueing_latency_lowers_the_limit() -> None:
    adm = Admission(32, adaptive=True)
    for _ in range(40):
        adm.acquire()
        adm.release(0.1)
    assert adm.limit == 32
    for _ in range(10):
        adm.acquire()
        adm.release(1.0)  # ten times slower: calls queue on the server
        time.sleep(0.06)
    assert adm.limit < 32


def test_rpm_spaces_the_calls() -> None:
    adm = Admission(8, rpm=600)  # ten a second, a bucket of 600
    adm._rpm.level = 0.0  # type: ignore[union-attr]  # spent
    t0 = time.monotonic()
    for _ in range(3):
        with adm.slot():
            pass
    assert time.monotonic() - t0 >= 0.25


def test_a_throttling_server_is_backed_off_and_every_call_still_answered() -> None:
    """A server that refuses every fifth call with 429 and Retry-After: the limit backs off, the
    refused calls are asked again, and every call gets the answer a healthy server gives."""
    from gen.llm import make_llm

    def script(messages: list[dict[str, str]], seed: int) -> str:
        return f"answer {seed}"

    with Loopback(script, delay=0.05, throttle_every=5) as srv:
        llm = make_llm(
            OpenAIConfig(
                base_url=srv.url, model="loopback", concurrency=8, max_retries=5, timeout=30
            )
        )
        got = fan_out(
            lambda s: llm.complete([{"role": "user", "content": "hi"}], seed=s, max_tokens=16),
            range(40),
            16,
            Helpers(),
        )
        llm.close()
    assert got == [f"answer {s}" for s in range(40)]
    stats = llm.admission.stats()
    assert srv.throttled >= 8
    assert stats["throttled"] == srv.throttled and stats["backoffs"] >= 1
    assert stats["peak"] <= 8


def test_personas_slots_at_once_make_the_slot_by_slot_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slots filled many at once, where two failed slots' fresh draws pick the same name: the
    later slot is filled again in order, so the pool (names, ids, rejects, counters) is the one
    a slot-by-slot run makes."""
    from test_personas import run_pool

    import gen.generators.personas.facts as P

    names = [f"Name{k} Family{k}" for k in range(40)]

    def unique_name(nat: Any, gender: str, rng: Any, used: set[str]) -> tuple[str, str]:
        rng.random()
        name = next(n for n in names if n not in used)  # every draw wants the first free name
        used.add(name)
        return tuple(name.split(" "))  # type: ignore[return-value]

    monkeypatch.setattr(P, "_unique_name", unique_name)
    bad = {"Name2 Family2", "Name7 Family7"}
    outs, manifests = {}, {}
    for k in (1, 8):
        result, _ = run_pool(
            tmp_path / str(k), lambda name, seed: name in bad, n=10, llm=OpenAIConfig(concurrency=k)
        )
        outs[k] = [
            (tmp_path / str(k) / f).read_bytes() for f in ("personas.jsonl", "rejects.jsonl")
        ]
        manifests[k] = (result.manifest["pool"], result.manifest["validators"])
    assert outs[1] == outs[8]
    assert manifests[1] == manifests[8]
    got = [line for line in outs[1][0].decode().splitlines()]
    assert (
        "Name10 Family10" in got[2] and "Name11 Family11" in got[7]
    )  # the two redraws, in slot order


# --------------------------------------------------------------------------- a model per stage


def test_a_stage_of_its_own_model_goes_to_its_server_and_the_manifest_names_both(
    tmp_path: Path,
) -> None:
    """``stages.cue.llm`` on another server: every cue call goes there, every app call to the
    run's llm; the manifest names each stage's model with its hash, and each model's usage."""
    from gen.cli import validate

    pool = write_pool(tmp_path / "personas.jsonl")
    seen: dict[str, list[str]] = {"apps": [], "cue": []}

    def logged(where: str) -> Any:
        script = digital_script()

        def answer(messages: list[dict[str, str]], seed: int) -> str:
            seen[where].append(messages[-1]["content"])
            return script(messages, seed)

        return answer

    with Loopback(logged("apps"), delay=0.0) as apps, Loopback(logged("cue"), delay=0.0) as cue:
        cfg = validate(
            "digital",
            [
                f"persona_file={pool}",
                "n=3",
                "seed=3",
                "cue_rate=1.0",
                "cache_dir=null",
                "progress=off",
                "llm=openai",
                f"llm.base_url={apps.url}",
                "llm.model=writer",
                f"stages.cue.llm.base_url={cue.url}",
                "stages.cue.llm.model=cuer",
            ],
        )
        result = run_config("digital", cfg, tmp_path / "run", quiet=True)
    assert result.accepted == 3
    assert seen["cue"] and len(seen["cue"]) == cue.calls and apps.calls == len(seen["apps"])
    assert 0 < cue.calls < apps.calls  # one cue per bundle, in one of its seven apps
    m = result.manifest
    assert set(m["stages"]) == {"apps", "cue"}
    assert m["stages"]["apps"]["model"] != m["stages"]["cue"]["model"]
    for stage in ("apps", "cue"):
        label = m["stages"][stage]["model"]
        assert m["stages"][stage]["sha256"] == m["models"][label]["sha256"]
    assert m["models"][m["stages"]["cue"]["model"]]["llm"]["model"] == "cuer"
    assert m["models"][m["stages"]["cue"]["model"]]["usage"]["calls"] == cue.calls
    assert m["models"][m["stages"]["apps"]["model"]]["usage"]["calls"] == apps.calls


def _two_servers_run(
    tmp_path: Path, name: str, script: Any, stage: str, options: list[str]
) -> tuple[Any, dict[str, list[str]], Any, Any]:
    """``name`` with ``stages.<stage>.llm`` on a second loopback server (model ``staged``) and
    every other call on the run's (model ``writer``); one call at a time, a fake embedder."""
    from fakes import FakeEmbedder

    from gen.cli import validate
    from gen.engine.runner import RunContext

    seen: dict[str, list[str]] = {"run": [], "stage": []}

    def logged(where: str) -> Any:
        def answer(messages: list[dict[str, str]], seed: int) -> str:
            seen[where].append(messages[-1]["content"])
            return script(messages, seed)

        return answer

    with Loopback(logged("run"), delay=0.0) as main, Loopback(logged("stage"), 0.0) as other:
        cfg = validate(
            name,
            [
                *options,
                "cache_dir=null",
                "progress=off",
                "llm=openai",
                f"llm.base_url={main.url}",
                "llm.model=writer",
                "llm.concurrency=1",
                f"stages.{stage}.llm.base_url={other.url}",
                f"stages.{stage}.llm.model=staged",
            ],
        )
        ctx = RunContext(name, cfg, tmp_path / "run").use(embedder=FakeEmbedder())
        result = run_config(name, cfg, tmp_path / "run", ctx=ctx, quiet=True)
    assert other.calls == len(seen["stage"]) > 0 and main.calls == len(seen["run"]) > 0
    m = result.manifest
    label = m["stages"][stage]["model"]
    assert m["models"][label]["llm"]["model"] == "staged"
    assert m["models"][label]["usage"]["calls"] == other.calls
    assert m["stages"][stage]["sha256"] == m["models"][label]["sha256"]
    for s, used in m["stages"].items():
        if s != stage:
            assert m["models"][used["model"]]["llm"]["model"] == "writer", s
    return result, seen, m, cfg


def test_a_scenarios_stage_of_its_own_model_gets_every_call_of_that_stage(
    tmp_path: Path,
) -> None:
    """``stages.camera.llm``: every camera call goes to its server; situations, speech and the
    model checks (``models=``: the run's llm) to the run's."""
    from test_scenarios_runs import MARKERS, Fake

    result, seen, m, cfg = _two_servers_run(
        tmp_path,
        "scenarios",
        Fake(),
        "camera",
        ["n=2", "seed=3", "labels=[fake]"],
    )
    assert result.accepted == 2
    assert all(MARKERS["camera"] in req for req in seen["stage"])
    assert not any(MARKERS["camera"] in req for req in seen["run"])
    assert any(MARKERS["identify"] in req for req in seen["run"])
    assert set(m["stages"]) == {"situations", "camera", "speech"}
    assert cfg.stages.speech.llm is None and cfg.stages.camera.llm.concurrency == 1


def test_a_candidates_stage_of_its_own_model_gets_every_call_of_that_stage(
    tmp_path: Path,
) -> None:
    """``stages.rewording.llm``: the positive's rewording goes to its server, the wrong options
    and the rerank to the run's."""
    from candidates_runs import good_reply, mrp, write_items

    items = write_items(tmp_path / "items.jsonl", [mrp(), mrp(item_id="mrp-2")])
    result, seen, m, _ = _two_servers_run(
        tmp_path, "candidates", good_reply, "rewording", [f"input={items}", "rerank=true"]
    )
    assert result.accepted == 2
    assert len(seen["stage"]) == 2
    assert all("Rewrite this statement" in req for req in seen["stage"])
    assert not any("Rewrite this statement" in req for req in seen["run"])
    assert set(m["stages"]) == {"writer", "rewording", "rerank"}


def test_help_lists_each_generators_stages(capsys: pytest.CaptureFixture[str]) -> None:
    from gen.cli import print_generator_help

    for name, stages in {
        "tom": ("analysis", "counterfactuals", "simplification"),
        "digital": ("apps", "cue"),
        "scenarios": ("situations", "camera", "speech", "follow_up"),
        "candidates": ("writer", "rewording", "rerank"),
    }.items():
        print_generator_help(name)
        text = capsys.readouterr().out.split("stages (a model per stage", 1)[1]
        listed = [ln.split()[0] for ln in text.strip().splitlines()[1:]]
        assert tuple(listed) == stages, name


def test_stage_models_are_presets_or_fields_over_llm() -> None:
    from gen.cli import validate

    s = validate("tom", ["stages.analysis.llm=openai", "stages.simplification.llm.temperature=0.0"])
    assert s.stages.analysis.llm.backend == "openai"
    assert s.stages.simplification.llm == s.llm.model_copy(update={"temperature": 0.0})
    assert s.stages.counterfactuals.llm is None
    with pytest.raises(Exception, match="stages"):
        validate("tom", ["stages.nosuch.llm=openai"])


def test_the_manifest_prices_each_models_calls_and_the_progress_line_shows_them(
    tmp_path: Path,
) -> None:
    from gen.engine.runner import RunContext

    bank = _bank(tmp_path / "items.jsonl", 4)
    with Loopback(_guess, delay=0.0) as srv:
        llm = OpenAIConfig(
            **{**served(srv.url, 4).model_dump(), "price": {"input": 2.0, "output": 10.0}}
        )
        cfg = NocontextConfig(input=str(bank), cache_dir=None, progress="off", llm=llm)
        ctx = RunContext("nocontext", cfg, tmp_path / "run")
        result = run_config("nocontext", cfg, tmp_path / "run", ctx=ctx, quiet=True)
        status = ctx.status()
    ((label, model),) = result.manifest["models"].items()
    usage = model["usage"]
    assert usage["calls"] == srv.calls == 12
    assert model["cost"] == pytest.approx(
        (usage["prompt_tokens"] * 2.0 + usage["completion_tokens"] * 10.0) / 1e6
    )
    assert model["admission"]["max"] == 4 and model["admission"]["calls"] == 12
    assert status.startswith("in flight 0/4") and "tok/s" in status and "cost 0.0" in status
