"""The LLM boundary with a scripted backend: parsing, re-asks, truncation, errors, cache, usage."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from llm_calls import MESSAGES, Bio, Item, _structured, one_line_exit_2

from gen.errors import BackendError, ConfigError, LLMOutputError
from gen.llm import Cache, LlamaCppConfig, scripted_llm, sha256_file

# --------------------------------------------------------------------------- parsing


def test_clean_json_parses_in_one_call() -> None:
    llm = scripted_llm(['{"bio": "Ada writes compilers."}'])
    result = _structured(llm)
    assert isinstance(result, Bio) and result.bio == "Ada writes compilers."
    assert len(llm.calls) == 1
    assert llm.usage.calls == 1 and llm.usage.cache_hits == 0


def test_request_carries_seed_sampling_and_schema() -> None:
    llm = scripted_llm(
        ['{"title": "t", "minutes": 3}'], sampling=LlamaCppConfig(temperature=0.2, top_p=0.5)
    )
    _structured(llm, Item, seed=77, max_tokens=64)
    call = llm.calls[0]
    assert call["seed"] == 77
    assert (call["temperature"], call["top_p"], call["max_tokens"]) == (0.2, 0.5, 64)
    assert call["messages"] == MESSAGES
    # llama.cpp takes the schema as json_object + schema (converted from instructor's json_schema)
    rf = call["response_format"]
    assert rf["type"] == "json_object"
    assert set(rf["schema"]["properties"]) == {"title", "minutes"}
    assert set(rf["schema"]["required"]) == {"title", "minutes"}


def test_default_max_tokens_comes_from_sampling() -> None:
    llm = scripted_llm(['{"bio": "x"}'], sampling=LlamaCppConfig(max_tokens=321))
    _structured(llm)
    assert llm.calls[0]["max_tokens"] == 321


@pytest.mark.parametrize(
    "noisy",
    [
        '```json\n{"bio": "fenced"}\n```',  # markdown fence
        '{"bio": 5}',  # wrong type
        '{"biography": "wrong key"}',  # missing field
        "Sure! Here is the bio you asked for.",  # prose, not JSON
    ],
)
def test_noisy_output_is_reasked_with_the_error(noisy: str) -> None:
    llm = scripted_llm([noisy, '{"bio": "clean"}'])
    result = _structured(llm)
    if len(llm.calls) == 1:  # a lenient parser may accept the fence outright
        assert result.bio == "fenced"
        return
    assert result.bio == "clean"
    assert len(llm.calls) == 2
    reask = llm.calls[1]["messages"]
    # the re-ask replays the conversation, the bad answer, and the validation error
    assert reask[: len(MESSAGES)] == MESSAGES
    assert reask[len(MESSAGES)] == {"role": "assistant", "content": noisy}
    assert reask[-1]["role"] == "user" and "bio" in reask[-1]["content"]


@pytest.mark.parametrize("attempts", [1, 2, 3])
def test_invalid_after_all_attempts_keeps_raw(attempts: int) -> None:
    outputs = [f'{{"bio": {i}}}' for i in range(10)]
    llm = scripted_llm(outputs, sampling=LlamaCppConfig(attempts=attempts))
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    err = info.value
    assert err.reason == "invalid_output"
    # exactly ``attempts`` tries, and raw is the last one
    assert len(llm.calls) == attempts
    assert err.raw == outputs[attempts - 1]
    assert f"{attempts} attempts" in err.detail
    assert "string" in err.detail.lower()  # the validation error, not instructor's wrapper
    assert "<failed_attempts>" not in err.detail


def test_truncated_output() -> None:
    llm = scripted_llm([('{"bio": "abc', "length")])
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    assert info.value.reason == "truncated"
    assert info.value.raw == '{"bio": "abc'
    assert len(llm.calls) == 1  # truncation is not re-asked: the same cap would truncate again


def test_truncated_after_a_reask() -> None:
    llm = scripted_llm(['{"bio": 5}', ('{"bio": "abc', "length")])
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    assert info.value.reason == "truncated"
    assert info.value.raw == '{"bio": "abc'


def test_backend_failure_is_backend_error() -> None:
    def down(messages, seed):
        raise ConnectionError("server went away")

    llm = scripted_llm(down)
    with pytest.raises(LLMOutputError) as info:
        _structured(llm)
    assert info.value.reason == "backend_error"
    assert "ConnectionError" in info.value.detail and "server went away" in info.value.detail
    assert info.value.raw is None


def test_callable_script_sees_messages_and_seed() -> None:
    seen: list[tuple[str, int]] = []

    def script(messages, seed):
        seen.append((messages[-1]["content"], seed))
        return json.dumps({"bio": f"seed {seed}"})

    llm = scripted_llm(script)
    assert _structured(llm, seed=5).bio == "seed 5"
    assert _structured(llm, seed=6).bio == "seed 6"
    assert seen == [("A bio.", 5), ("A bio.", 6)]


# --------------------------------------------------------------------------- cache


def test_identical_call_is_a_cache_hit(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    first = scripted_llm(['{"bio": "from the model"}'], cache=cache)
    assert _structured(first, seed=3).bio == "from the model"
    assert (first.usage.calls, first.usage.cache_hits) == (1, 0)

    # A second LLM whose script is empty: any real call would fail.
    second = scripted_llm([], cache=cache)
    assert _structured(second, seed=3).bio == "from the model"
    assert second.calls == []
    assert (second.usage.calls, second.usage.cache_hits) == (1, 1)
    assert second.usage.completion_tokens == 0
    assert second.usage.cached_completion_tokens == first.usage.completion_tokens > 0


def test_different_seed_is_a_miss(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    _structured(scripted_llm(['{"bio": "seed three"}'], cache=cache), seed=3)
    other = scripted_llm(['{"bio": "seed four"}'], cache=cache)
    assert _structured(other, seed=4).bio == "seed four"
    assert len(other.calls) == 1 and other.usage.cache_hits == 0


@pytest.mark.parametrize(
    "change",
    [
        {"messages": [{"role": "user", "content": "Another bio."}]},
        {"max_tokens": 99},
        {"schema": Item},
    ],
    ids=["messages", "max_tokens", "schema"],
)
def test_any_request_change_is_a_miss(tmp_path: Path, change: dict[str, Any]) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    _structured(scripted_llm(['{"bio": "first"}'], cache=cache), seed=3)
    schema = change.get("schema", Bio)
    llm = scripted_llm(
        ['{"title": "t", "minutes": 1}' if schema is Item else '{"bio": "second"}'], cache=cache
    )
    llm.structured(
        change.get("messages", MESSAGES), schema, seed=3, max_tokens=change.get("max_tokens")
    )
    assert len(llm.calls) == 1 and llm.usage.cache_hits == 0


def test_model_identity_is_part_of_the_key(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    _structured(scripted_llm(['{"bio": "model a"}'], cache=cache), seed=3)
    other = scripted_llm(['{"bio": "model b"}'], cache=cache)
    other.identity = {"backend": "scripted", "model": "another"}
    assert _structured(other, seed=3).bio == "model b"


def test_reasks_are_cached_and_replayed(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    first = scripted_llm(['{"bio": 5}', '{"bio": "fixed"}'], cache=cache)
    assert _structured(first).bio == "fixed"
    replay = scripted_llm([], cache=cache)
    assert _structured(replay).bio == "fixed"
    assert (replay.usage.calls, replay.usage.cache_hits, len(replay.calls)) == (2, 2, 0)


def test_failures_are_asked_again(tmp_path: Path) -> None:
    """Only replies whose answer passed are cached: a truncated or invalid reply is asked again
    by the rerun (the server may be fixed, max_tokens raised), not replayed as the same reject."""
    cache = Cache(tmp_path / "c.sqlite")
    with pytest.raises(LLMOutputError) as info:
        _structured(scripted_llm([('{"bio": "ab', "length")], cache=cache))
    assert info.value.reason == "truncated" and info.value.raw == '{"bio": "ab'
    with pytest.raises(LLMOutputError):
        _structured(scripted_llm(['{"bio": 5}', '{"bio": 6}'], cache=cache))
    fixed = scripted_llm(['{"bio": "fixed"}'], cache=cache)
    assert _structured(fixed).bio == "fixed" and len(fixed.calls) == 1


def test_cache_persists_across_connections(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "c.sqlite"
    Cache(path).put("k", "v")
    assert Cache(path).get("k") == "v"
    assert Cache(path).get("missing") is None


@pytest.mark.parametrize("network", ["0", "1"], ids=["local", "network_fs"])
def test_cache_is_thread_safe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network: str
) -> None:
    monkeypatch.setenv("GEN_NETWORK_FS", network)
    cache = Cache(tmp_path / "c.sqlite")
    assert cache.layout == ("parts" if network == "1" else "wal")

    def work(t: int) -> None:
        for i in range(50):
            cache.put(f"{t}-{i}", str(i))
            assert cache.get(f"{t}-{i}") == str(i)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(cache.get(f"{t}-{i}") == str(i) for t in range(8) for i in range(50))


def _unusable_caches(tmp_path: Path) -> list[tuple[Path, str]]:
    """(cache folder, what the error says) for folders no cache can live in."""
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    holds_a_dir = tmp_path / "dir_db"
    (holds_a_dir / "llm.sqlite").mkdir(parents=True)
    (holds_a_dir / "embeddings.sqlite").mkdir()
    junk = tmp_path / "junk_db"
    junk.mkdir()
    (junk / "llm.sqlite").write_bytes(b"junk" * 1000)
    (junk / "embeddings.sqlite").write_bytes(b"junk" * 1000)
    return [
        (a_file, f"{a_file} is a file"),
        (a_file / "sub" / "dir", f"{a_file} is a file"),
        (holds_a_dir, "unable to open database file"),
        (junk, "file is not a database"),
    ]


def test_an_unusable_cache_folder_is_a_config_error(tmp_path: Path) -> None:
    from gen.llm.embed import Embedder, EmbedderConfig

    for folder, reason in _unusable_caches(tmp_path):
        with pytest.raises(ConfigError) as info:
            Cache(folder / "llm.sqlite")
        assert str(info.value).startswith(f"cache_dir: cannot use {folder}: ") and reason in str(
            info.value
        )
        with pytest.raises(ConfigError, match=f"cache_dir: cannot use {folder}: .*{reason}"):
            Embedder(EmbedderConfig(model_path=str(tmp_path)), str(folder))  # the model loads later


@pytest.mark.parametrize("case", [0, 1])
def test_the_cli_names_an_unusable_cache_dir(run_gen, tmp_path: Path, case: int) -> None:
    folder, reason = _unusable_caches(tmp_path)[case]
    proc = run_gen(
        "personas",
        "n=1",
        f"cache_dir={folder}",
        "progress=off",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert one_line_exit_2(proc) == f"error: cache_dir: cannot use {folder}: {reason}"


@pytest.mark.parametrize("where", ["/etc/passwd", "empty_folder"])
def test_an_embedder_model_path_that_is_no_model_is_one_line(
    run_gen, tmp_path: Path, where: str
) -> None:
    """Before: ``unexpected NotADirectoryError`` (exit 1) from sentence-transformers."""
    from gen.llm.embed import Embedder, EmbedderConfig
    from gen.paths import EXAMPLES

    path = Path(where)
    if where == "empty_folder":
        path = tmp_path / where
        path.mkdir()
    with pytest.raises(
        BackendError, match=f"embedder.model_path: {path} is not a sentence-transformers model"
    ):
        Embedder(EmbedderConfig(model_path=str(path)), None)
    proc = run_gen(
        "rerank",
        f"input={EXAMPLES / 'rerank' / 'pools.jsonl'}",
        f"embedder.model_path={path}",
        "progress=off",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert one_line_exit_2(proc) == (
        f"error: embedder.model_path: {path} is not a sentence-transformers model "
        "folder (no modules.json or config.json in it)"
    )


def _read_only_mounts_work() -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o ro tmpfs /mnt"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


def test_the_cli_names_a_read_only_cache_dir(tmp_path: Path, cache_dir: Path) -> None:
    """A read-only tmpfs, and a read-only bind of a folder holding a good cache, each mounted
    in a mount namespace of the gen process only (tests run as root, which ignores mode bits)."""
    import subprocess
    import sys

    from conftest import gen_env

    if not _read_only_mounts_work():
        pytest.skip("no mount namespaces here (unshare -m / mount)")
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    Cache(full / "llm.sqlite").put("k", "v")
    for folder in (empty, full):
        script = (
            f"mount -t tmpfs -o ro tmpfs {empty} && mount --bind {full} {full} && "
            f'mount -o remount,bind,ro {full} && exec "$@"'
        )
        proc = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                script,
                "sh",
                sys.executable,
                "-m",
                "gen",
                "personas",
                "n=1",
                f"cache_dir={folder}",
                "progress=off",
                f"hydra.run.dir={tmp_path / 'run'}",
            ],
            cwd=tmp_path,
            env=gen_env(cache_dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert (
            one_line_exit_2(proc)
            == f"error: cache_dir: cannot use {folder}: it is not writable (read-only?)"
        )
    assert (
        Cache(full / "llm.sqlite").get("k") == "v"
    )  # outside the namespace it was never read-only


def test_file_sha256(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    f = tmp_path / "weights.bin"
    data = os.urandom(3 * (1 << 20) + 17)  # spans several read blocks
    f.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert cache.file_sha256(f) == expected == sha256_file(f)
    assert cache.file_sha256(f) == expected  # memoised answer is the same
    # a changed file (new mtime) is hashed again
    f.write_bytes(b"other" + data[5:])
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert cache.file_sha256(f) == hashlib.sha256(f.read_bytes()).hexdigest() != expected


def test_usage_and_describe() -> None:
    llm = scripted_llm(['{"bio": 1}', '{"bio": "ok"}'])
    _structured(llm)
    usage = llm.usage.as_dict()
    assert usage["calls"] == 2 and usage["cache_hits"] == 0
    assert usage["prompt_tokens"] == 20  # the scripted backend reports 10 per call
    assert usage["completion_tokens"] > 0
    described = llm.describe()
    assert described["backend"] == "scripted"
    assert described["sampling"]["attempts"] == 3


def _reply(usage: dict[str, Any], **extra: Any) -> Any:
    from openai.types.chat import ChatCompletion

    return ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "{}"},
                }
            ],
            "usage": {"completion_tokens": 1, "total_tokens": 1, **usage},
            **extra,
        }
    )


def test_prompt_reuse_is_counted_only_where_the_backend_reports_it() -> None:
    from gen.llm.boundary import _reused
    from gen.llm.usage import Usage

    openai_style = _reply({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 60}})
    server_style = _reply({"prompt_tokens": 50}, timings={"cache_n": 20, "prompt_n": 30})
    silent = _reply({"prompt_tokens": 70})
    assert [_reused(r) for r in (openai_style, server_style, silent)] == [60, 20, None]
    u = Usage()
    for r in (openai_style, server_style, silent):
        u.add(hit=False, prompt=r.usage.prompt_tokens, completion=1, seconds=0.1, reused=_reused(r))
    u.add(
        hit=True, prompt=100, completion=1, seconds=0.0, reused=100
    )  # a cache hit is no evaluation
    d = u.as_dict()
    assert (d["prompt_tokens"], d["prompt_tokens_reported"], d["prompt_tokens_reused"]) == (
        220,
        150,
        80,
    )
    assert d["prompt_tokens_evaluated"] == 70 and d["prompt_reuse_ratio"] == round(80 / 150, 4)
    assert Usage().as_dict()["prompt_reuse_ratio"] is None  # nothing reported: unknown, not 0
    total = Usage.total([d, d])  # shards of one run
    assert (total["prompt_tokens_reused"], total["prompt_tokens_evaluated"]) == (160, 140)


def test_map_numbers_its_worker_threads(tmp_path: Path) -> None:
    from gen.engine.runner import CommonConfig, RunContext
    from gen.llm import worker

    ctx = RunContext("t", CommonConfig(), tmp_path)
    seen: dict[int, set[int | None]] = {}
    lock = threading.Lock()

    def job(i: int) -> int:
        time.sleep(0.01)
        with lock:
            seen.setdefault(threading.get_ident(), set()).add(worker())
        return i

    assert ctx.map(job, range(12), workers=3) == list(range(12))
    assert all(len(ws) == 1 for ws in seen.values())  # a thread keeps its number
    assert set().union(*seen.values()) == set(range(len(seen)))
    assert worker() is None  # outside a pool

    def outer(
        i: int,
    ) -> set[int | None]:  # a map inside a worker: its threads keep the worker's number
        mine = worker()
        inner = ctx.map(lambda _: worker(), range(4), workers=2)
        return {mine, *inner}

    assert all(len(ws) == 1 and None not in ws for ws in ctx.map(outer, range(6), workers=3))


# --------------------------------------------------------------------------- issue 43.5, 43.7


def _chat_reply(content: str | None, *, tool: bool = False, refusal: str | None = None) -> Any:
    from openai.types.chat import ChatCompletion

    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if tool:
        message["tool_calls"] = [
            {"id": "c", "type": "function", "function": {"name": "bio", "arguments": "{}"}}
        ]
    return ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        }
    )


def _serving(llm: Any, replies: list[Any]) -> Any:
    served = list(replies)
    llm._create = lambda **kw: served.pop(0)
    return llm


@pytest.mark.parametrize(
    "bad",
    [
        _chat_reply(None, tool=True),
        _chat_reply(""),
        _chat_reply("I can't help.", refusal="I can't help."),
    ],
    ids=["tool call", "empty", "refusal"],
)
def test_only_replies_that_passed_are_cached(tmp_path: Path, bad: Any) -> None:
    """A tool call (``content: null``), an empty message or a refusal is not cached: once the
    server is fixed, the rerun asks it again instead of replaying the same reject."""
    cache = Cache(tmp_path / "c.sqlite")
    broken = _serving(scripted_llm([], cache=cache, sampling=LlamaCppConfig(attempts=1)), [bad])
    with pytest.raises(LLMOutputError):
        _structured(broken)
    broken = _serving(scripted_llm([], cache=cache), [bad])
    try:
        broken.complete(MESSAGES, seed=1)
    except LLMOutputError as e:
        assert e.reason == "backend_error"
    fixed = scripted_llm(['{"bio": "fixed"}', "fixed"], cache=cache)
    assert _structured(fixed).bio == "fixed" and fixed.complete(MESSAGES, seed=1) == "fixed"
    assert fixed.usage.cache_hits == 0 and len(fixed.calls) == 2


def test_a_tool_call_cached_by_an_older_version_is_asked_again(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    probe = scripted_llm(["unused"], cache=cache)
    probe.complete(MESSAGES, seed=1)
    ((key, _),) = cache._store.query("SELECT key, value FROM calls", ())
    cache.put(key, _chat_reply(None, tool=True).model_dump_json())  # what the old code kept
    fixed = scripted_llm(["fixed"], cache=cache)
    assert fixed.complete(MESSAGES, seed=1) == "fixed" and fixed.usage.cache_hits == 0


@pytest.mark.parametrize(
    "reply",
    [
        '<think>The user wants JSON.</think>\n{"bio": "a bio"}',
        'The user wants JSON, no opening tag.</think>{"bio": "a bio"}',
    ],
    ids=["closed", "no opening tag"],
)
def test_a_reasoning_block_is_set_apart_on_every_parse_path(tmp_path: Path, reply: str) -> None:
    """Structured calls, plain text and the cache's replay all read the answer after
    ``</think>`` (one place: the boundary); a judge's strict score reads it too."""
    from gen.generators.judge.scores import judgment

    cache = Cache(tmp_path / "c.sqlite")
    assert _structured(scripted_llm([reply], cache=cache)).bio == "a bio"
    assert _structured(scripted_llm([], cache=cache)).bio == "a bio"  # replayed, stripped
    text = reply.replace('{"bio": "a bio"}', "<score>2</score>")
    plain = scripted_llm([text])
    assert plain.complete(MESSAGES, seed=1) == "<score>2</score>"
    assert judgment(scripted_llm([text]).complete(MESSAGES, seed=1), lenient=False).score == 2
    unfinished = scripted_llm(["<think>still thinking"])
    assert unfinished.complete(MESSAGES, seed=1) == "<think>still thinking"  # no answer: kept
