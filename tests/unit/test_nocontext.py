"""nocontext: the answer parser, shuffle bookkeeping, the removal rules, the binomial
statistics and the config checks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import read_jsonl
from nocontext_runs import NAME, always_a, knows_giveaways, leaky_bank, screen, shown_options

from gen.engine.runner import RunContext
from gen.formats.mcq import parse_letter
from gen.generators.nocontext import NocontextConfig, Screener, binomial, plan, removal, shuffles
from gen.llm import scripted_llm
from gen.schemas.mcq import LETTERS

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
    from gen.formats.mcq import load_bank

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
