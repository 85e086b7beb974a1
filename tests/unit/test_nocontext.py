"""nocontext: the answer parser, shuffle bookkeeping, the removal rules, planted leaky and
position-biased models through the real runner, loglik scoring, the kept/ output, and the
LLM boundary's new free-text and log-likelihood calls (scripted and a fake HTTP server)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from concurrency import Jittered
from conftest import loopback_server, merge_and_compare, read_jsonl

from gen.errors import BackendError, GenError, LLMOutputError
from gen.generators.nocontext import (
    NocontextConfig,
    Screener,
    binomial,
    normalise,
    pick,
    plain_prompt,
    plan,
    removal,
    shuffles,
)
from gen.llm import Cache, LogLik, OpenAIConfig, make_llm, scripted_llm
from gen.mcq import load_banks, parse_letter, write_egotom_csv
from gen.runner import RunContext, run
from gen.schemas.mcq import LETTERS

NAME = "nocontext"
OPTION_LINE = re.compile(r"^([a-z])\) (.*)$", re.M)


# --------------------------------------------------------------------------- fixtures


def mcq(
    i: int, truth: str, wrong: list[str], *, answer_at: int = 0, qtype: str = "goal", **extra: Any
) -> dict[str, Any]:
    options = list(wrong)
    options.insert(answer_at, truth)
    return {
        "item_id": f"item{i}",
        "question_type": qtype,
        "question": "What is C's goal?",
        "options": options,
        "answer": answer_at,
        "group": f"clip{i}",
        "origins": ["truth" if o == truth else "counterfactual" for o in options],
        "visible": {"context": f"narrations of clip {i}"},
        "privileged": {"truth": truth},
        **extra,
    }


def leaky_bank(path: Path, n: int = 12, leaky: tuple[int, ...] = (2, 5, 9)) -> Path:
    """n items; in the ``leaky`` ones the truth carries a give-away word ("obviously")."""
    rows = []
    for i in range(n):
        qtype = ("goal", "belief", "actions")[i % 3]
        truth = f"C {'obviously ' if i in leaky else ''}wants outcome {i}."
        wrong = [f"C wants alternative {i}-{k}." for k in range(3)]
        rows.append(mcq(i, truth, wrong, answer_at=i % 4, qtype=qtype, extra_field=i))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def shown_options(messages: list[dict[str, str]]) -> list[tuple[str, str]]:
    user = next(m["content"] for m in messages if m["role"] == "user")
    return OPTION_LINE.findall(user)


def knows_giveaways(messages: list[dict[str, str]], seed: int) -> str:
    """Answers the option with the give-away word; otherwise always the last letter shown."""
    shown = shown_options(messages)
    for letter, text in shown:
        if "obviously" in text:
            return f"Answer 1: {letter}) {text}"
    letter, text = shown[-1]
    return f"Answer 1: {letter}) {text}"


def always_a(messages: list[dict[str, str]], seed: int) -> str:
    return "Answer 1: a)"


def screen(
    tmp_path: Path, script: Callable | list[str], bank: Path | None = None, **overrides: Any
) -> tuple[Any, RunContext, Path]:
    bank = bank or leaky_bank(tmp_path / "items.jsonl")
    settings = NocontextConfig(input=str(bank), cache_dir=None, progress="off", **overrides)
    out = tmp_path / "run"
    ctx = RunContext(NAME, settings, out)
    ctx.use(llm=scripted_llm(script, sampling=settings.llm))
    return run(NAME, settings, out, ctx=ctx, quiet=True), ctx, out


# --------------------------------------------------------------------------- the parser

FOUR = [
    "C finishes painting the pottery.",
    "C mixes new paint colours.",
    "C believes the task is complete.",
    "C washes the brushes.",
]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Answer 1: b) C mixes new paint colours.", "b"),
        ("Answer 1: (B)", "b"),
        ("answer 1:c)", "c"),
        ("Answer: d", "d"),
        ("**Answer 1:** a) C finishes painting the pottery.", "a"),
        ("Answer 1: C.", "c"),
        ("b", "b"),
        ("B.", "b"),
        ("(c)", "c"),
        ("**D)** C washes the brushes.", "d"),
        ("  a) C finishes painting the pottery.\n\nThis is the most likely.", "a"),
        ("The correct answer is (d).", "d"),
        ("The answer is: B", "b"),
        ("I would go with option C because painting takes time.", "c"),
        ("Choice (a) seems right.", "a"),
        ("Based on the statements, I pick (b), since people usually mix paint first.", "b"),
        # the person is called C: a sentence about C is not the letter c ...
        ("C believes the task is complete.", "c"),  # ... but it quotes option c exactly
        ("C washes the brushes.", "d"),
        ("Answer 1: C believes the task is complete.", "c"),
        ("Answer 1: C washes the brushes.", "d"),
        ("C is a person who likes art.", None),
        ("C probably wants to finish the work.", None),
        # the format echoed, the list echoed, nothing, out of range, contradictions
        ("Answer 1: <letter>) <answer>", None),
        (
            "a) C finishes painting the pottery.\nb) C mixes new paint colours.\nc) C believes the "
            "task is complete.",
            None,
        ),
        ("", None),
        ("   ", None),
        (None, None),
        ("I cannot answer without more information.", None),
        ("Answer 1: e) C repairs a bike.", None),
        ("Answer 1: b) C washes the brushes.", None),  # letter b, text of d: contradiction
        ("The answer is a or b.", None),
    ],
)
def test_parse_letter(reply: str | None, expected: str | None) -> None:
    assert parse_letter(reply, FOUR) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # SmolLM2-135M's habit on 3-option goal items: a letter "d" that does not exist, then an
        # option's text; the text decides
        (
            "d) To repair a broken drill.\n\nThe correct answer is: d) To repair a broken drill.",
            "b",
        ),
        ("d) To clean the kitchen.", "c"),
        ("d) To repair a broken leg.", None),
        ("Answer 1: c) To clean the kitchen.", "c"),
    ],
)
def test_parse_letter_three_options(reply: str, expected: str | None) -> None:
    options = ["To paint a vase.", "To repair a broken drill.", "To clean the kitchen."]
    assert parse_letter(reply, options) == expected


# --------------------------------------------------------------------------- shuffles


@pytest.mark.parametrize(("m", "count"), [(3, 3), (4, 3), (4, 4), (5, 2), (8, 3)])
def test_shuffles_put_the_answer_in_distinct_positions(m: int, count: int) -> None:
    for answer in range(m):
        for seed in range(20):
            orders = shuffles(m, answer, count, seed)
            assert len(orders) == count
            assert all(sorted(o) == list(range(m)) for o in orders)
            positions = [o.index(answer) for o in orders]
            assert len(set(positions)) == count  # count <= m: every position differs
            assert len({tuple(o) for o in orders}) == count
            assert shuffles(m, answer, count, seed) == orders  # seeded


def test_shuffles_beyond_the_positions_balance_and_stay_distinct_where_possible() -> None:
    orders = shuffles(4, 1, 10, seed=3)
    positions = [o.index(1) for o in orders]
    assert sorted(positions.count(p) for p in range(4)) == [2, 2, 3, 3]
    assert len({tuple(o) for o in orders}) == 10
    two = shuffles(2, 0, 3, seed=1)  # only 2 orders exist: one repeats
    assert len({tuple(o) for o in two}) == 2
    assert sorted(o.index(0) for o in two) in ([0, 0, 1], [0, 1, 1])
    assert shuffles(4, 1, 3, seed=1) != shuffles(4, 1, 3, seed=2)


def test_an_always_a_model_is_right_at_most_once_in_three() -> None:
    for m in (3, 4):
        for seed in range(50):
            orders = shuffles(m, 2, 3, seed)
            assert sum(o[0] == 2 for o in orders) <= 1


def test_correct_letter_follows_the_correct_option_through_every_shuffle(tmp_path: Path) -> None:
    """Permutation bookkeeping: the prompt shows options[order[p]] at letter p, the knowing
    model names the truth's letter, and the record maps it back to the original index."""
    bank = leaky_bank(tmp_path / "items.jsonl", n=8, leaky=tuple(range(8)))
    seen: list[tuple[list[tuple[str, str]], str]] = []

    def script(messages: list[dict[str, str]], seed: int) -> str:
        reply = knows_giveaways(messages, seed)
        seen.append((shown_options(messages), reply))
        return reply

    result, _, out = screen(tmp_path, script, bank=bank, shuffles=4, max_correct=3)
    assert result.accepted == 8
    items = {r["item_id"]: r for r in read_jsonl(bank)}
    calls = iter(seen)
    for rec in read_jsonl(out / "nocontext.jsonl"):
        item = items[rec["item_id"]]
        answers = rec["answers"]["SmolLM2-135M-Instruct.Q4_1"]
        assert [a["shuffle"] for a in answers] == [0, 1, 2, 3]
        for a in answers:
            shown, reply = next(calls)
            # what was shown is the item's options in the recorded order
            assert [t for _, t in shown] == [item["options"][i] for i in a["order"]]
            assert [x for x, _ in shown] == list(LETTERS[:4])
            assert a["raw"] == reply
            pos = a["order"].index(item["answer"])
            assert a["letter"] == LETTERS[pos]
            assert a["choice"] == item["answer"] == a["order"][LETTERS.index(a["letter"])]
            assert a["correct"] is True
        assert len({a["order"].index(item["answer"]) for a in answers}) == 4
        assert rec["correct"] == {"SmolLM2-135M-Instruct.Q4_1": 4}
        assert rec["kept"] is False and rec["removed_by"] == ["max_correct"]


# --------------------------------------------------------------------------- removal rules


@pytest.mark.parametrize(
    ("correct", "max_correct", "panel_k", "expected"),
    [
        ({"m1": 3, "m2": 0}, 2, None, ["max_correct"]),
        ({"m1": 2, "m2": 2}, 2, None, []),
        ({"m1": 0, "m2": 0}, 2, None, []),
        ({"m1": 1}, 0, None, ["max_correct"]),
        ({"m1": 3}, None, None, []),
        # panel: more than k models right on a majority (2 of 3) of shuffles
        ({"a": 2, "b": 2, "c": 1, "d": 0}, None, 1, ["panel"]),
        ({"a": 2, "b": 1, "c": 1, "d": 0}, None, 1, []),
        ({"a": 3, "b": 3, "c": 2, "d": 0}, None, 2, ["panel"]),
        ({"a": 3, "b": 3, "c": 1, "d": 0}, None, 2, []),
        ({"a": 3, "b": 3, "c": 3, "d": 0}, 2, 2, ["max_correct", "panel"]),
        ({"a": 3, "b": 0}, 2, 1, ["max_correct"]),
    ],
)
def test_removal_rules(
    correct: dict[str, int], max_correct: int | None, panel_k: int | None, expected: list[str]
) -> None:
    assert removal(correct, 3, max_correct, panel_k) == expected


def test_panel_majority_with_an_even_number_of_shuffles() -> None:
    assert removal({"a": 2, "b": 2}, 4, None, 1) == []  # 2 of 4 is not a majority
    assert removal({"a": 3, "b": 3}, 4, None, 1) == ["panel"]


def test_panel_of_scripted_models(tmp_path: Path) -> None:
    """Three models: two know the give-aways, one guesses 'a'. Panel k=1 removes the leaky
    items (2 models right on a majority); k=2 removes nothing; the any-model rule would."""
    bank = leaky_bank(tmp_path / "items.jsonl")
    from gen.mcq import load_bank

    items = load_bank(bank).items
    for k, expected in ((1, {2, 5, 9}), (2, set())):
        cfg = NocontextConfig(
            input=str(bank),
            cache_dir=None,
            progress="off",
            models=[{"backend": "openai", "model": f"m{j}"} for j in range(3)],
            max_correct=None,
            panel_k=k,
        )
        ctx = RunContext(NAME, cfg, tmp_path / f"k{k}")
        panel = [
            ("knows1", scripted_llm(knows_giveaways)),
            ("knows2", scripted_llm(knows_giveaways)),
            ("guess", scripted_llm(always_a)),
        ]
        sc = Screener(cfg, ctx, panel)
        removed = {i for i, item in enumerate(items) if not sc.screen(item, i, bank).kept}
        assert removed == expected


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
    run(NAME, settings, tmp_path / "run", ctx=ctx, quiet=True)
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
    run(NAME, settings, tmp_path / "run", ctx=ctx, quiet=True)
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
        run(NAME, settings, tmp_path / norm, ctx=ctx, quiet=True)
        outs[norm] = read_jsonl(tmp_path / norm / "nocontext.jsonl")
    # summed: the truth is the shortest line, chosen every time; per character the lines tie
    # (but one) and the first shown wins, which the balanced shuffles make right at most twice
    assert all(
        not r["kept"] and r["correct"]["SmolLM2-135M-Instruct.Q4_1"] == 3 for r in outs["none"]
    )
    assert all(r["kept"] for r in outs["chars"])


# --------------------------------------------------------------------------- statistics


def test_binomial_summary_matches_wilson() -> None:
    b = binomial(30, 60, 0.25)
    z = 1.959963984540054
    p, n = 0.5, 60
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert b["ci95"] == [round(centre - half, 4), round(centre + half, 4)]
    assert b["accuracy"] == 0.5 and b["chance"] == 0.25 and b["p_above_chance"] < 1e-4
    assert binomial(15, 60, 0.25)["p_above_chance"] > 0.4
    assert binomial(0, 0, 0.25)["accuracy"] is None


def test_summary_blind_guesser_expectation(tmp_path: Path) -> None:
    result, _, _ = screen(tmp_path, always_a)
    m = result.manifest["nocontext"]["models"]["SmolLM2-135M-Instruct.Q4_1"]
    assert m["removed_by_a_blind_guesser_expected"] == round(12 * (1 / 4) ** 3, 2)
    assert sum(m["items_by_correct_shuffles"].values()) == 12
    assert len(m["accuracy_by_shuffle"]) == 3


# --------------------------------------------------------------------------- config


def test_config_validation(tmp_path: Path) -> None:
    bank = str(leaky_bank(tmp_path / "items.jsonl"))
    with pytest.raises(ValueError, match="max_correct=3 can never be exceeded"):
        NocontextConfig(input=bank, max_correct=3)
    with pytest.raises(ValueError, match="panel_k=1 can never be exceeded by 1"):
        NocontextConfig(input=bank, panel_k=1)
    with pytest.raises(ValueError, match="labels: 2 given for 1"):
        NocontextConfig(input=bank, labels=["x", "y"])
    with pytest.raises(ValueError, match="chat_template=false"):
        NocontextConfig(input=bank, mode="loglik", models=[{"backend": "openai"}])
    ok = NocontextConfig(
        input=bank,
        mode="loglik",
        chat_template=False,
        models=["openai", "smollm2"],
        panel_k=1,
        max_correct=None,
    )
    assert [m.backend for m in ok.models] == ["openai", "llama_cpp"]
    assert ok.models[0].concurrency == 4  # the openai preset's
    with pytest.raises(ValueError, match=r"the llama_cpp preset needs model_path"):
        NocontextConfig(input=bank, models=["llama_cpp"])
    with pytest.raises(ValueError, match="no llm preset 'gpt9'"):
        NocontextConfig(input=bank, models=["gpt9"])
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="holds no items"):
        plan(NocontextConfig(input=str(tmp_path / "empty.jsonl")))


def test_labels_default_and_dedupe(tmp_path: Path) -> None:
    from gen.llm.labels import model_label, unique_labels

    cfg = NocontextConfig(
        input=str(leaky_bank(tmp_path / "items.jsonl")),
        models=[
            {"backend": "openai", "model": "llama-405b"},
            {"backend": "llama_cpp", "model_path": "/m/Qwen2.5-7B.Q4_K_M.gguf"},
            {"backend": "openai", "model": "llama-405b", "base_url": "http://127.0.0.1:9/v1"},
        ],
    )
    labels = unique_labels([model_label(m) for m in cfg.models])
    assert labels == ["llama-405b", "Qwen2.5-7B.Q4_K_M", "llama-405b#2"]


def test_cli_errors_before_any_model_loads(run_gen) -> None:
    r = run_gen("nocontext")
    assert r.returncode == 2 and "input= is required" in r.stderr
    r = run_gen("nocontext", "input=/nonexistent/items.jsonl")
    assert r.returncode == 2 and "no such file" in r.stderr
    egotom = Path("/work/shared/data/egotom_paper")
    if egotom.is_dir():
        r = run_gen("nocontext", f"input={egotom}", "max_correct=3")
        assert r.returncode == 2 and "max_correct" in r.stderr


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
        run(NAME, settings, tmp_path / "run", ctx=ctx, quiet=True)


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
