"""nocontext through the real runner: planted leaky and position-biased models, loglik
scoring, the kept/ output, and the LLM boundary's free-text and log-likelihood calls
(scripted and a fake OpenAI-compatible HTTP server)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from concurrency import Jittered
from conftest import loopback_server, merge_and_compare, read_jsonl
from nocontext_runs import (
    NAME,
    OPTION_LINE,
    always_a,
    knows_giveaways,
    leaky_bank,
    screen,
    shown_options,
)

from gen.engine.runner import RunContext, run_config
from gen.errors import BackendError, GenError, LLMOutputError
from gen.formats.mcq import write_egotom_csv
from gen.generators.nocontext import NocontextConfig, normalise, pick, plain_prompt, plan
from gen.kinds.mcq import load_banks
from gen.llm import Cache, LogLik, OpenAIConfig, make_llm, scripted_llm
from gen.schemas.mcq import LETTERS

# --------------------------------------------------------------------------- through the runner


def test_planted_leaky_items_are_caught(tmp_path: Path, check_run_folder) -> None:
    result, ctx, out = screen(tmp_path, knows_giveaways)
    check_run_folder(out, NAME, 12, hydra=False)
    records = read_jsonl(out / "nocontext.jsonl")
    assert len(records) == 12
    removed = {r["item_id"] for r in records if not r["kept"]}
    assert removed == {"item2", "item5", "item9"}
    for r in records:
        assert r["shuffles"] == 3
        assert set(r) >= {
            "item_id",
            "question_type",
            "source",
            "kept",
            "answers",
            "correct",
            "shuffles",
        }
        assert r["source"] == str(tmp_path / "items.jsonl")
        label = "SmolLM2-135M-Instruct.Q4_1"
        assert r["correct"][label] == sum(a["correct"] for a in r["answers"][label])
        # the non-leaky ones: "always the last letter" is right at most once
        if r["kept"]:
            assert r["correct"][label] <= 1
    # removed.jsonl: the removed items with their text and every answer
    rows = read_jsonl(out / "removed.jsonl")
    assert {r["item_id"] for r in rows} == removed
    assert all(len(r["answers"][label]) == 3 and r["item"]["options"] for r in rows)
    # kept/: the other 9, byte-identical lines of the input, read back by load_banks
    kept_file = out / "kept" / "items.jsonl"
    source = (tmp_path / "items.jsonl").read_text().splitlines(keepends=True)
    assert kept_file.read_text() == "".join(source[i] for i in range(12) if i not in (2, 5, 9))
    for path in (kept_file, out / "kept", out):  # the file, the folder, the run folder
        banks = load_banks(path)
        assert [i.item_id for b in banks for i in b.items] == [
            f"item{i}" for i in range(12) if i not in (2, 5, 9)
        ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == ctx.extra["nocontext"]
    assert result.manifest["nocontext"]["items"] == {
        "screened": 12,
        "kept": 9,
        "removed": 3,
        "rejected": 0,
        "removed_by": {"max_correct": 3, "panel": 0},
    }
    assert result.manifest["validators"]["removed.max_correct"] == 3
    for name in ("summary.json", "removed.jsonl", "kept/items.jsonl"):
        assert (
            result.manifest["outputs"][name]
            == hashlib.sha256((out / name).read_bytes()).hexdigest()
        )
    assert "nocontext/full.jinja" in result.manifest["prompts"]
    assert "nocontext/_option.jinja" in result.manifest["prompts"]


def test_position_biased_model_is_not_caught(tmp_path: Path) -> None:
    result, _, out = screen(tmp_path, always_a)
    records = read_jsonl(out / "nocontext.jsonl")
    assert all(r["kept"] for r in records)
    label = "SmolLM2-135M-Instruct.Q4_1"
    assert all(r["correct"][label] <= 1 for r in records)
    assert (out / "removed.jsonl").read_text() == ""
    m = json.loads((out / "summary.json").read_text())["models"][label]
    bias = m["letter_bias"]
    assert bias["share"]["a"] == 1.0
    assert bias["expected_share"] == {k: 0.25 for k in "abcd"}
    assert bias["p_uniform"] < 1e-6
    # correct exactly when the truth was shown first: once per item (4 options, 3 shuffles)
    assert m["accuracy"]["correct"] == sum(r["correct"][label] for r in records)
    assert m["unparseable"] == 0
    assert len(load_banks(out)[0].items) == 12


def test_unparseable_answers_count_as_wrong_and_are_counted(tmp_path: Path) -> None:
    result, _, out = screen(tmp_path, lambda m, s: "I need more context to answer that.")
    label = "SmolLM2-135M-Instruct.Q4_1"
    records = read_jsonl(out / "nocontext.jsonl")
    assert all(
        r["kept"] and r["correct"][label] == 0 and r["unparseable"][label] == 3 for r in records
    )
    assert all(
        a["letter"] is None and a["choice"] is None and a["correct"] is False
        for r in records
        for a in r["answers"][label]
    )
    summary = result.manifest["nocontext"]["models"][label]
    assert summary["unparseable"] == 36 and summary["unparseable_rate"] == 1.0
    assert result.manifest["validators"][f"unparseable.{label}"] == 36


def test_choices_only_prompt_hides_the_question(tmp_path: Path) -> None:
    prompts: list[str] = []

    def script(messages: list[dict[str, str]], seed: int) -> str:
        prompts.append("\n".join(m["content"] for m in messages))
        return "a"

    screen(tmp_path, script, prompt="choices_only")
    assert prompts and not any("What is C's goal?" in p for p in prompts)
    assert all(len(OPTION_LINE.findall(p)) == 4 for p in prompts)
    full: list[str] = []
    screen(
        tmp_path / "full",
        lambda m, s: full.append(m[-1]["content"]) or "a",
        bank=tmp_path / "items.jsonl",
    )
    assert all("What is C's goal?" in p for p in full)
    assert not any("narrations of clip" in p for p in prompts + full)  # no context, ever


def test_generate_calls_are_greedy_and_seeded(tmp_path: Path) -> None:
    _, ctx, _ = screen(tmp_path, always_a, max_tokens=20)
    calls = ctx.llm.calls
    assert len(calls) == 36
    assert all(c["temperature"] == 0.0 and c["max_tokens"] == 20 for c in calls)
    assert "response_format" not in calls[0]
    # one seed per (item, shuffle): the same item's shuffles differ
    assert len({c["seed"] for c in calls}) == 36


def test_rerun_is_identical(tmp_path: Path) -> None:
    screen(tmp_path / "a", knows_giveaways, bank=leaky_bank(tmp_path / "items.jsonl"))
    screen(tmp_path / "b", knows_giveaways, bank=tmp_path / "items.jsonl")
    for name in ("nocontext.jsonl", "removed.jsonl", "kept/items.jsonl"):
        assert (tmp_path / "a/run" / name).read_bytes() == (tmp_path / "b/run" / name).read_bytes()


def test_concurrent_shuffles_give_the_sequential_bytes(tmp_path: Path) -> None:
    """Issue 9: an item's shuffles in flight at once, answered out of order, give the same bytes
    as one call at a time. The answers depend on each call's seed, so a shuffle that got
    another's seed or answer would show."""

    def seeded_guess(messages: list[dict[str, str]], seed: int) -> str:
        shown = shown_options(messages)
        letter, text = shown[seed % len(shown)]
        return f"Answer 1: {letter}) {text}"

    bank = leaky_bank(tmp_path / "items.jsonl")
    outs = {}
    for k in (1, 4):
        script = Jittered(seeded_guess)
        screen(tmp_path / str(k), script, bank=bank, llm=OpenAIConfig(concurrency=k))
        assert (script.max_in_flight > 1) == (k > 1)
        outs[k] = [
            (tmp_path / str(k) / "run" / f).read_bytes()
            for f in ("nocontext.jsonl", "removed.jsonl", "kept/items.jsonl")
        ]
    assert outs[1] == outs[4]
    records = [json.loads(x) for x in outs[1][0].splitlines()]
    assert len({json.dumps(r["correct"]) for r in records}) > 1  # the guesses differ by seed


def test_shards_merge_to_the_whole(tmp_path: Path) -> None:
    """``merge`` of three nocontext shards: records, removed.jsonl, kept/ byte for byte, and
    the summary (accuracies, intervals, letter bias) recomputed over the whole bank."""
    bank = leaky_bank(tmp_path / "items.jsonl")
    screen(tmp_path / "whole", knows_giveaways, bank=bank)
    for k in range(3):
        screen(tmp_path / f"s{k}", knows_giveaways, bank=bank, shard=k, num_shards=3)
    merge_and_compare(
        tmp_path / "whole" / "run",
        [tmp_path / f"s{k}" / "run" for k in range(3)],
        tmp_path / "m",
        ignore=("summary.json",),
    )
    whole = json.loads((tmp_path / "whole" / "run" / "summary.json").read_text())
    merged = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert whole.pop("throughput").keys() == merged.pop("throughput").keys()
    for label in whole["models"]:
        for d in (whole, merged):
            d["models"][label]["usage"].pop("generation_seconds")
            d["models"][label]["usage"].pop("completion_tokens_per_second")
    assert merged == whole


def test_egotom_csv_input_keeps_the_csv_format(tmp_path: Path) -> None:
    folder = tmp_path / "egotom"
    folder.mkdir()
    for q, n_opt in (("goal", 3), ("belief", 4)):
        rows = []
        for i in range(5):
            opts = [
                f"C {q} statement {i}-{k}{' obviously' if i == 1 else ''}"
                if k == 0
                else f"C {q} statement {i}-{k}"
                for k in range(n_opt)
            ]
            row = {
                "vuid": f"v{i}",
                "cuid": f"v{i}~pass_1~{i}",
                "narrations_in_context": "00m:01s | #C C walks",
                f"gt_{q}": opts[0],
                "clip_start_time": "0",
                "clip_end_time": "300",
            }
            row |= {f"{q}_choice_{LETTERS[k]}": opts[(k + i) % n_opt] for k in range(n_opt)}
            rows.append(row)
        write_egotom_csv(rows, q, folder / f"egotom_{q}_shuffled.csv")
    # an item whose truth is not among its options cannot be screened: a reject
    bad = folder / "egotom_actions_shuffled.csv"
    write_egotom_csv(
        [
            {
                "vuid": "x",
                "cuid": "x~1",
                "narrations_in_context": "",
                "gt_actions": "C runs.",
                **{f"actions_choice_{c}": f"C does {c}." for c in "abcd"},
            }
        ],
        "actions",
        bad,
    )
    result, _, out = screen(tmp_path, knows_giveaways, bank=folder)
    assert (result.requested, result.accepted, result.rejected) == (11, 10, 1)
    reject = read_jsonl(out / "rejects.jsonl")[0]
    assert (reject["reason"], reject["stage"], reject["record_id"]) == (
        "no_answer",
        "input",
        "actions:x~1",
    )
    kept = sorted(p.name for p in (out / "kept").iterdir())
    assert kept == [
        "egotom_actions_shuffled.csv",
        "egotom_belief_shuffled.csv",
        "egotom_goal_shuffled.csv",
    ]
    banks = {b.path.name: b for b in load_banks(out)}
    assert all(b.format == "egotom_csv" for b in banks.values())
    assert len(banks["egotom_goal_shuffled.csv"].items) == 4  # item 1 leaked
    assert len(banks["egotom_belief_shuffled.csv"].items) == 4
    assert banks["egotom_actions_shuffled.csv"].items == []  # header only: still an EgoToM CSV
    header = (folder / "egotom_goal_shuffled.csv").read_text().splitlines()[0]
    assert (out / "kept" / "egotom_goal_shuffled.csv").read_text().splitlines()[0] == header
    summary = result.manifest["nocontext"]
    assert set(summary["models"]["SmolLM2-135M-Instruct.Q4_1"]["accuracy_by_question_type"]) == {
        "goal",
        "belief",
    }
    goal = summary["models"]["SmolLM2-135M-Instruct.Q4_1"]["accuracy_by_question_type"]["goal"]
    assert goal["chance"] == pytest.approx(1 / 3, abs=1e-4)


def test_backend_failure_is_a_reject_not_a_verdict(tmp_path: Path) -> None:
    def flaky(messages: list[dict[str, str]], seed: int) -> str:
        if "outcome 4." in messages[-1]["content"]:
            raise ConnectionError("server went away")
        return "a"

    result, _, out = screen(tmp_path, flaky)
    assert (result.accepted, result.rejected) == (11, 1)
    reject = read_jsonl(out / "rejects.jsonl")[0]
    assert reject["reason"] == "backend_error" and reject["record_id"] == "item4"
    assert "item4" not in [i.item_id for i in load_banks(out)[0].items]


def test_sample_screens_a_seeded_subset(tmp_path: Path) -> None:
    bank = leaky_bank(tmp_path / "items.jsonl")
    a = NocontextConfig(input=str(bank), sample=5)
    b = NocontextConfig(input=str(bank), sample=5, seed=1)
    assert plan(a).n == 5 and plan(NocontextConfig(input=str(bank))).n == 12
    result, _, out = screen(tmp_path, always_a, bank=bank, sample=5)
    ids = [r["item_id"] for r in read_jsonl(out / "nocontext.jsonl")]
    assert len(ids) == 5 and ids == sorted(ids, key=lambda x: int(x[4:]))
    assert [i.item_id for _, i in plan(a).data[1]] == ids
    assert [i.item_id for _, i in plan(b).data[1]] != ids
    assert len(load_banks(out)[0].items) == 5  # kept = the screened items that passed


# --------------------------------------------------------------------------- loglik mode


def giveaway_scorer(prompt: Any, continuations: list[str]) -> list[float]:
    """Log-probabilities that favour the give-away option, else the *shortest* line."""
    return [-1.0 if "obviously" in c else -0.5 * len(c) for c in continuations]


def test_loglik_mode_catches_the_leaky_items(tmp_path: Path) -> None:
    bank = leaky_bank(tmp_path / "items.jsonl")
    settings = NocontextConfig(input=str(bank), cache_dir=None, progress="off", mode="loglik")
    ctx = RunContext(NAME, settings, tmp_path / "run")
    prompts: list[Any] = []

    def scorer(prompt: Any, continuations: list[str]) -> list[float]:
        prompts.append((prompt, continuations))
        return giveaway_scorer(prompt, continuations)

    ctx.use(llm=scripted_llm([], scorer=scorer))
    run_config(NAME, settings, tmp_path / "run", ctx=ctx, quiet=True)
    records = read_jsonl(tmp_path / "run" / "nocontext.jsonl")
    assert {r["item_id"] for r in records if not r["kept"]} == {"item2", "item5", "item9"}
    prompt, conts = prompts[0]
    # chat messages whose last (assistant) turn opens the answer line; one line per option
    assert isinstance(prompt, list) and prompt[-1] == {"role": "assistant", "content": "Answer 1:"}
    assert [c[:4] for c in conts] == [" a) ", " b) ", " c) ", " d) "]
    shown = shown_options(prompt)
    assert [c.strip() for c in conts] == [f"{x}) {t}" for x, t in shown]
    for r in records:
        for a in r["answers"]["SmolLM2-135M-Instruct.Q4_1"]:
            assert a["raw"] is None and len(a["scores"]) == 4
            assert a["letter"] == LETTERS[pick(a["scores"])]
            assert a["choice"] == a["order"][LETTERS.index(a["letter"])]


def test_loglik_plain_prompt(tmp_path: Path) -> None:
    bank = leaky_bank(tmp_path / "items.jsonl", n=3)
    settings = NocontextConfig(
        input=str(bank), cache_dir=None, progress="off", mode="loglik", chat_template=False
    )
    ctx = RunContext(NAME, settings, tmp_path / "run")
    seen: list[Any] = []
    ctx.use(llm=scripted_llm([], scorer=lambda p, c: seen.append(p) or [0.0] * len(c)))
    run_config(NAME, settings, tmp_path / "run", ctx=ctx, quiet=True)
    assert isinstance(seen[0], str) and seen[0].endswith("\n\nAnswer 1:")
    assert "Question 1: What is C's goal?" in seen[0]


def test_length_normalisation() -> None:
    lines = ["a) short", "b) a much longer option text"]
    raw = [-8.0, -20.0]  # the short line is likelier in total, the long one per character
    scores = {
        norm: [normalise(lp, 4, t, norm) for lp, t in zip(raw, lines, strict=True)]
        for norm in ("none", "chars", "tokens")
    }
    assert pick(scores["none"]) == 0
    assert pick(scores["chars"]) == 1
    assert scores["chars"] == [-1.0, -20.0 / len(lines[1])]
    assert scores["tokens"] == [-2.0, -5.0]
    assert pick([-1.0, -1.0, -2.0]) == 0  # ties go to the first shown


def test_norm_is_applied_in_the_run(tmp_path: Path) -> None:
    bank = leaky_bank(tmp_path / "items.jsonl", n=4, leaky=())
    outs = {}
    for norm in ("none", "chars"):
        settings = NocontextConfig(
            input=str(bank), cache_dir=None, progress="off", mode="loglik", norm=norm
        )
        ctx = RunContext(NAME, settings, tmp_path / norm)
        # -0.5 per character of the line plus a bonus to one specific line
        ctx.use(
            llm=scripted_llm(
                [], scorer=lambda p, c: [-0.5 * len(x) - (10 if "-0." in x else 0) for x in c]
            )
        )
        run_config(NAME, settings, tmp_path / norm, ctx=ctx, quiet=True)
        outs[norm] = read_jsonl(tmp_path / norm / "nocontext.jsonl")
    # summed: the truth is the shortest line, chosen every time; per character the lines tie
    # (but one) and the first shown wins, which the balanced shuffles make right at most twice
    assert all(
        not r["kept"] and r["correct"]["SmolLM2-135M-Instruct.Q4_1"] == 3 for r in outs["none"]
    )
    assert all(r["kept"] for r in outs["chars"])


# --------------------------------------------------------------------------- the LLM boundary


def test_complete_is_free_text_and_cached(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    llm = scripted_llm(["Answer 1: b) hello"], cache=cache)
    msgs = [{"role": "user", "content": "Pick one."}]
    assert (
        llm.complete(msgs, seed=3, max_tokens=12, temperature=0.0, stop=["\n"])
        == "Answer 1: b) hello"
    )
    call = llm.calls[0]
    assert (call["seed"], call["max_tokens"], call["temperature"], call["stop"]) == (
        3,
        12,
        0.0,
        ["\n"],
    )
    assert "response_format" not in call
    replay = scripted_llm([], cache=cache)
    assert (
        replay.complete(msgs, seed=3, max_tokens=12, temperature=0.0, stop=["\n"])
        == "Answer 1: b) hello"
    )
    assert replay.usage.cache_hits == 1
    with pytest.raises(LLMOutputError, match="ran out of outputs"):  # another seed: another call
        scripted_llm([], cache=cache).complete(
            msgs, seed=4, max_tokens=12, temperature=0.0, stop=["\n"]
        )


def test_complete_backend_failure() -> None:
    def down(messages: Any, seed: int) -> str:
        raise ConnectionError("refused")

    with pytest.raises(LLMOutputError) as info:
        scripted_llm(down).complete([{"role": "user", "content": "x"}], seed=1)
    assert info.value.reason == "backend_error"


def test_loglik_is_cached_and_counts_tokens(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    llm = scripted_llm([], cache=cache, scorer=lambda p, c: [-1.5, -2.5])
    assert llm.loglik("Q: x\nA:", [" yes", " no"]) == [LogLik(-1.5, 4), LogLik(-2.5, 3)]

    def boom(p: Any, c: list[str]) -> list[float]:
        raise AssertionError("should be a cache hit")

    replay = scripted_llm([], cache=cache, scorer=boom)
    assert replay.loglik("Q: x\nA:", [" yes", " no"]) == [LogLik(-1.5, 4), LogLik(-2.5, 3)]
    assert replay.usage.cache_hits == 1
    assert scripted_llm([], scorer=boom).loglik("anything", []) == []
    with pytest.raises(BackendError, match="cannot score"):
        scripted_llm([]).loglik("x", [" y"])


def test_plain_prompt() -> None:
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "Answer 1:"},
    ]
    assert plain_prompt(msgs) == "S\n\nU\n\nAnswer 1:"


# ------------------------------------------------------------------------ OpenAI-compatible scoring


class _Completions(BaseHTTPRequestHandler):
    mode = "echo"
    requests: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the preflight's GET /v1/models
        self._send(200, {"object": "list", "data": [{"id": "served", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if self.mode == "refuse":
            self._send(
                400,
                {"error": {"message": "echo is not supported", "type": "invalid_request_error"}},
            )
            return
        text = body["prompt"]
        # one "token" per word (with its leading space), logprob -0.1 * token length
        tokens = re.findall(r"\s*\S+", text)
        offsets, pos = [], 0
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        logprobs = [None] + [-0.1 * len(t) for t in tokens[1:]]
        tokens.append(" gen")
        offsets.append(len(text))
        logprobs.append(-3.0)
        if self.mode == "generated_only":
            tokens, offsets, logprobs = tokens[-1:], offsets[-1:], logprobs[-1:]
        self._send(
            200,
            {
                "id": "x",
                "object": "text_completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "text": text + " gen",
                        "finish_reason": "length",
                        "logprobs": {
                            "tokens": tokens,
                            "text_offset": offsets,
                            "token_logprobs": logprobs,
                            "top_logprobs": None,
                        },
                    }
                ],
            },
        )

    def _send(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def completions_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    _Completions.requests = []
    with loopback_server(_Completions) as base:
        yield base


def _server_llm(base: str, mode: str) -> Any:
    _Completions.mode = mode
    return make_llm(OpenAIConfig(base_url=base, model="served", max_retries=0, timeout=10))


def test_openai_loglik_sums_the_continuation_tokens(completions_server: str) -> None:
    llm = _server_llm(completions_server, "echo")
    prompt = "C refers to a person.\nAnswer 1:"
    scores = llm.loglik(prompt, [" a) C walks home.", " b) C cooks."])
    # continuation words: " a)", " C", " walks", " home." -> lengths 3, 2, 6, 6
    assert scores[0].tokens == 4 and scores[0].logprob == pytest.approx(-0.1 * 17)
    assert scores[1].tokens == 3 and scores[1].logprob == pytest.approx(-0.1 * (3 + 2 + 7))
    req = _Completions.requests[0]
    assert req["echo"] is True and req["logprobs"] == 1 and req["max_tokens"] == 1
    assert req["prompt"] == prompt + " a) C walks home." and req["model"] == "served"
    with pytest.raises(BackendError, match="plain-text prompt"):
        llm.loglik([{"role": "user", "content": "x"}], [" y"])


@pytest.mark.parametrize(
    ("mode", "message"),
    [("refuse", "refused a completions request"), ("generated_only", "generated tokens only")],
)
def test_openai_loglik_unsupported_is_a_clear_error(
    completions_server: str, mode: str, message: str
) -> None:
    llm = _server_llm(completions_server, mode)
    with pytest.raises(BackendError, match=message):
        llm.loglik("Question:", [" a) yes"])


def test_backend_error_from_loglik_stops_the_run(tmp_path: Path) -> None:
    bank = leaky_bank(tmp_path / "items.jsonl", n=2)
    settings = NocontextConfig(input=str(bank), cache_dir=None, progress="off", mode="loglik")
    ctx = RunContext(NAME, settings, tmp_path / "run")
    ctx.use(llm=scripted_llm([]))  # no scorer: the backend cannot score
    with pytest.raises(GenError, match="cannot score"):  # one line, exit 2 in the CLI
        run_config(NAME, settings, tmp_path / "run", ctx=ctx, quiet=True)


def test_models_panel_through_the_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """models= builds one LLM per entry (labels from the served names), answers are kept per
    model, the any-model rule fires on the one that knows, and the extra LLMs are closed."""
    import gen.llm

    closed: list[str] = []

    def fake_make_llm(cfg: Any, cache: Any = None) -> Any:
        llm = scripted_llm(knows_giveaways if cfg.model == "oracle" else always_a)
        if hasattr(llm, "on_close"):
            llm.on_close(lambda: closed.append(cfg.model))
        return llm

    monkeypatch.setattr(gen.llm, "make_llm", fake_make_llm)
    result, ctx, out = screen(
        tmp_path,
        [],
        models=[
            {"backend": "openai", "model": "oracle"},
            {"backend": "openai", "model": "guesser"},
        ],
    )
    assert not ctx.llm.calls  # the llm= model was not asked
    records = read_jsonl(out / "nocontext.jsonl")
    assert all(set(r["answers"]) == {"oracle", "guesser"} for r in records)
    assert {r["item_id"] for r in records if not r["kept"]} == {"item2", "item5", "item9"}
    assert all(r["correct"]["guesser"] <= 1 for r in records)
    summary = result.manifest["nocontext"]["models"]
    assert summary["guesser"]["letter_bias"]["share"]["a"] == 1.0
    assert summary["oracle"]["accuracy"]["accuracy"] > summary["guesser"]["accuracy"]["accuracy"]
    from gen.llm import LLM

    if hasattr(LLM, "on_close"):  # backends that hold resources (a managed server) are released
        assert sorted(closed) == ["guesser", "oracle"]


def test_loglik_refuses_backends_without_prompt_logprobs(tmp_path: Path) -> None:
    import gen.llm

    if not hasattr(gen.llm, "LlamaServerConfig"):
        pytest.skip("no llama_server backend in this version")
    bank = str(leaky_bank(tmp_path / "items.jsonl"))
    with pytest.raises(ValueError, match="llama-server does not"):
        NocontextConfig(input=bank, mode="loglik", models=[{"backend": "llama_server"}])
    from gen.llm.labels import model_label

    cfg = NocontextConfig(
        input=bank,
        models=[
            {"backend": "llama_server"},
            {"backend": "llama_server", "model_path": "/m/x.gguf"},
        ],
    )
    assert [model_label(m) for m in cfg.models] == ["SmolLM2-135M-Instruct.Q4_1", "x"]
