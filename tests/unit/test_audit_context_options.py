"""The options-against-context check (audit check 18): how the visible context names each option,
the per-item tell (the answer the only option named, or the only one not named), the classifier
on those features, on every bank kind with a visible context; and the audit's exit-code rule.

The object-form records ``introspect task=memory_assistance form=object`` wrote on the shipped
example before issue 42 (``tests/fixtures/audit/context_shortcut/``) name every wrong option in the
context and hide only the answer: both items are flagged and the audit exits 1."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from audit_runs import FIX, run_audit, write_jsonl
from conftest import SHARED

from gen.formats.mcq import write_egotom_csv
from gen.generators.audit.checks.context_options import (
    View,
    option_views,
    tell_of,
)
from gen.generators.audit.text import Lemmas

KEY = "context_options"
OBJECT_FORM = FIX / "context_shortcut"
DATA = SHARED / "data"
EGOTOM = DATA / "egotom_paper"
CONTEXT_BENCH = DATA / "context_bench"
ROOT = Path(__file__).resolve().parents[2]


def of(findings: list[dict[str, Any]], key: str = KEY) -> list[dict[str, Any]]:
    return [f for f in findings if f["check"] == key]


def view(options: list[str], answer: int, *context: str, question: str = "Which one?") -> View:
    return View("x", "t", "x", [[o] for o in options], answer, list(context), question)


@pytest.fixture(scope="module")
def lemmas() -> Lemmas:
    return Lemmas()


# ------------------------------------------------------------------ how the context names options


def test_a_multi_word_option_is_named_by_its_lemmas_in_one_sentence(lemmas: Lemmas) -> None:
    v = view(
        ["Lisbon guidebook", "novels table", "sale sign"],
        0,
        "A shop assistant restocks a table of new novels.\n"
        "The wearer passes a shoe shop with a sale sign in the window.",
    )
    ov, _ = option_views(lemmas, v, 0.6)
    # "novels table" is named by "a table of new novels" (order free, plural folded)
    assert [o.named for o in ov] == [False, True, True]
    assert tell_of(ov, 0) == "answer_only_unnamed"
    assert ov[1].first == 0.0 and 0 < ov[2].first < 1  # the table's sentence comes first


def test_words_spread_over_sentences_do_not_name_an_option(lemmas: Lemmas) -> None:
    v = view(
        ["Lisbon guidebook", "red kettle"],
        1,
        "A guidebook lies on the shelf. The wearer thinks of Lisbon.",
    )
    ov, _ = option_views(lemmas, v, 0.6)
    assert [o.named for o in ov] == [False, False] and tell_of(ov, 1) is None
    assert ov[0].best == 0.5 and ov[0].context_share == 1.0  # partial: half in one sentence


def test_mentions_count_sentences_and_the_shared_words_do_not_decide(lemmas: Lemmas) -> None:
    v = view(
        ["C picks up the knife", "C picks up the spoon", "C picks up the cup"],
        0,
        "C holds the knife.\nC washes the knife.\nC looks at the cup.",
    )
    ov, _ = option_views(lemmas, v, 0.6)
    assert [o.mentions for o in ov] == [2, 0, 1]  # "C picks up" is shared by all: not a name
    assert tell_of(ov, 0) is None  # two options named


def test_the_answer_alone_named_is_the_other_tell(lemmas: Lemmas) -> None:
    v = view(["blue umbrella", "train ticket"], 1, "The wearer buys a train ticket at the kiosk.")
    ov, _ = option_views(lemmas, v, 0.6)
    assert tell_of(ov, 1) == "answer_only_named"


def test_a_contexts_lines_lemmatised_at_once_are_each_lines_content() -> None:
    """Lemmas.contents (a context's lines in one batch, new words learnt together, nothing cached)
    gives each line what content gives it alone: plurals and tenses folded, stopwords, bare digits
    and possessives dropped, non-ASCII text normalised; words first seen in the batch included."""
    lines = [
        "00m:04s | #C C carries the cupboard doors in the bags",
        "",
        "The wearer's sisters placed 3 novels on the table; 12 cups.",
        "Ｃ ouvre la fenêtre — déjà vu, naïve café’s menu",
        "He is not boiling it yet, also even already",
        "C washes the knives. C dries them with both hands!",
    ]
    alone = Lemmas()
    each = [list(alone.content(t)) for t in lines]
    assert each[0] == ["00m", "04", "c", "c", "carry", "cupboard", "door", "bag"]  # "04s" a plural
    assert Lemmas().contents(lines) == each
    assert Lemmas(english=False).contents(lines) == [
        Lemmas(english=False).content(t) for t in lines
    ]


# ------------------------------------------------------------------ the kept object-form fixture


def test_the_object_form_records_are_flagged_per_item(tmp_path: Path) -> None:
    result, findings, report = run_audit(tmp_path, OBJECT_FORM)
    records = [json.loads(x) for x in (OBJECT_FORM / "introspect.jsonl").read_text().splitlines()]
    answers = {r["item_id"]: r["options"][r["answer"]] for r in records}
    assert sorted(answers.values()) == ["Lisbon guidebook", "latte art"]
    mine = of(findings)
    # the guidebook item: the context names "novels table", "sale sign", "lift map", never the
    # answer. The latte-art item: it names "phone cases", half of "lift doors" ("lift"), and
    # neither "kiosk fridge" (its sub-clip holds no line) nor the answer: two options unnamed, so
    # "pick the odd one out" has no single pick there
    assert [(f["kind"], answers[f["items"][0]], f["severity"]) for f in mine] == [
        ("answer_only_unnamed", "Lisbon guidebook", "error")
    ]
    assert result.exit_code == 1 == report["summary"]["exit_code"]
    assert of(findings, "integrity") == []  # the run folder is whole: the exit code is the tell's
    stats = next(c for c in report["checks"] if c["key"] == KEY)["stats"]
    (row,) = stats["per_question_type"].values()
    assert row["answer_named"] == 0 and row["distractor_named"] == 0.667
    assert row["items_with_odd_one"] == 2  # the latte-art item's: "phone cases", the only named
    assert "classifier not run" in row["note"]  # 2 items: the per-item tell still fires


def test_gen_audit_exits_1_on_the_object_form_records(run_gen, tmp_path: Path) -> None:
    p = run_gen(
        "audit",
        f"input={OBJECT_FORM}",
        "embeddings=false",
        f"checks=[{KEY}]",
        f"hydra.run.dir={tmp_path / 'out'}",
    )
    assert p.returncode == 1, p.stderr
    findings = [json.loads(x) for x in (tmp_path / "out" / "audit.jsonl").read_text().splitlines()]
    assert [f["kind"] for f in findings] == ["answer_only_unnamed"]


# ------------------------------------------------------------------ every bank kind with a context


def mcq(i: int, options: list[str], answer: int, context: str, qtype: str = "t") -> dict:
    return {
        "item_id": f"q{i}",
        "question_type": qtype,
        "question": "What does the wearer need?",
        "options": options,
        "answer": answer,
        "group": f"g{i}",
        "visible": {"context": context},
    }


OBJECTS = [
    "kettle", "ladder", "umbrella", "wallet", "scissors", "hammer", "pillow", "bucket",
    "lantern", "blanket", "helmet", "compass", "notebook", "teapot", "shovel", "candle",
]  # fmt: skip


def test_an_mcq_jsonl_bank_of_two_items_is_flagged(tmp_path: Path) -> None:
    bank = write_jsonl(
        tmp_path / "bank.jsonl",
        [
            mcq(0, ["the kettle", "the ladder", "the umbrella"], 2, "An umbrella by the door."),
            mcq(1, ["the wallet", "the hammer"], 0, "The wallet and the hammer on the bench."),
        ],
    )
    _, findings, _ = run_audit(tmp_path / "out", bank, checks=[KEY])
    assert [(f["kind"], f["items"]) for f in findings] == [("answer_only_named", ["q0"])]


def test_egotom_csvs_are_read_with_their_narrations_as_context(tmp_path: Path) -> None:
    folder = tmp_path / "egotom"
    folder.mkdir()
    rows = [
        {
            "vuid": "v",
            "cuid": f"c{i}",
            "narrations_in_context": "00m:02s | #C C fills the kettle with water\n"
            "00m:05s | #C C looks around",
            "gt_actions": "C boils the water in the kettle",
            "actions_choice_a": "C boils the water in the kettle",
            "actions_choice_b": "C opens the window",
            "actions_choice_c": "C folds the towel",
            "actions_choice_d": "C sweeps the floor",
        }
        for i in range(2)
    ]
    write_egotom_csv(rows, "actions", folder / "egotom_actions_shuffled.csv")
    _, findings, _ = run_audit(tmp_path / "out", folder, checks=[KEY])
    assert sorted(f["items"][0] for f in findings) == ["actions:c0", "actions:c1"]
    assert {f["kind"] for f in findings} == {"answer_only_named"}


def scenario(sid: str, target: str, turn_2_image: str) -> dict[str, Any]:
    return {
        "scenario_id": sid,
        "subset": "bank",
        "pair_id": None,
        "target_context": target,
        "change_type": "object_in_hand",
        "context_image": None,
        "turn_1_image": "Right hand around a long wooden shaft with a bowl-shaped head in a pot.",
        "turn_1_user": "Should I keep moving this around?",
        "turn_2_image": turn_2_image,
        "turn_2_user": "Is my grip okay for this?",
        "turn_3_repair_prompt": "I mean the chef's knife, not the wooden spoon.",
        "gold": {
            "current_answers": ["chef's knife", "knife"],
            "prior_answers": ["wooden spoon", "spoon"],
            "clarify_indicators": [],
            "abstain_indicators": [],
        },
    }


def test_scenarios_referents_are_their_gold_lists(tmp_path: Path) -> None:
    bank = write_jsonl(
        tmp_path / "scenarios.jsonl",
        [
            scenario("sc-1", "current", "Right hand on the black handle of a chef's knife."),
            scenario("sc-2", "current", "Right hand on a black handle above a triangular blade."),
        ],
    )
    _, findings, report = run_audit(tmp_path / "out", bank, checks=[KEY])
    assert [(f["kind"], f["items"]) for f in findings] == [("answer_only_named", ["sc-1"])]
    assert next(c for c in report["checks"] if c["key"] == KEY)["stats"]["items"] == 2


# ------------------------------------------------------------------ the classifier


def classifier_bank(leaky: bool) -> list[dict]:
    """60 items whose context names all three options (no per-item tell): in the leaky bank the
    answer is named first and twice, the wrong options once, later; in the clean one the option
    named first and twice is any of the three."""
    import random

    rng = random.Random(7)
    rows = []
    for i in range(60):
        order = rng.sample(OBJECTS, 3)
        answer = rng.randrange(3)
        first = order[answer] if leaky else order[rng.randrange(3)]
        rest = [o for o in order if o != first]
        context = (
            f"The wearer picks up the {first}.\nThe wearer walks to the window.\n"
            f"The wearer puts down the {first}.\nThe wearer glances at the {rest[0]}.\n"
            f"The wearer passes the {rest[1]}."
        )
        rows.append(mcq(i, [f"the {o}" for o in order], answer, context))
    return rows


def test_the_classifier_finds_the_answer_named_first_and_most(tmp_path: Path) -> None:
    bank = write_jsonl(tmp_path / "leaky.jsonl", classifier_bank(leaky=True))
    result, findings, report = run_audit(tmp_path / "out", bank, checks=[KEY])
    assert [f["kind"] for f in findings] == ["context_options_classifier"]
    (f,) = findings
    assert f["severity"] == "error" and f["numbers"]["rule"] == "significant_and_large"
    assert f["numbers"]["n"] == 60 and f["numbers"]["chance"] == 0.333
    (tell,) = next(c for c in report["checks"] if c["key"] == KEY)["stats"]["tells"]
    assert tell["accuracy"] > 0.9 and tell["p"] < 1e-10 and tell["effect_ci95"][0] > 5
    assert result.exit_code == 1


def test_the_classifier_is_at_chance_when_naming_says_nothing(tmp_path: Path) -> None:
    bank = write_jsonl(tmp_path / "clean.jsonl", classifier_bank(leaky=False))
    result, findings, report = run_audit(tmp_path / "out", bank, checks=[KEY])
    assert findings == [] and result.exit_code == 0
    (tell,) = next(c for c in report["checks"] if c["key"] == KEY)["stats"]["tells"]
    assert tell["severity"] is None and tell["effect"] < 15


def test_embedding_cosines_join_the_features_when_embeddings_are_on(tmp_path: Path) -> None:
    bank = write_jsonl(tmp_path / "leaky.jsonl", classifier_bank(leaky=True))
    for embeddings, extra in ((True, ["context_cosine", "question_cosine"]), (False, [])):
        _, _, report = run_audit(
            tmp_path / str(embeddings), bank, checks=[KEY], embeddings=embeddings
        )
        features = next(c for c in report["checks"] if c["key"] == KEY)["stats"]["features"]
        assert features[-2:] == extra or (not extra and "context_cosine" not in features)


# ------------------------------------------------------------------ the rates the docs give


def documented(label: str) -> tuple[int, int]:
    """(items flagged, items) as docs/reference/audit.md gives them for ``label``."""
    text = (ROOT / "docs" / "reference" / "audit.md").read_text()
    m = re.search(rf"\| {re.escape(label)} \| (\d+) / (\d+) \|", text)
    assert m, label
    return int(m.group(1)), int(m.group(2))


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="EgoToM paper data not present")
def test_the_documented_rate_on_the_egotom_paper_subset(tmp_path: Path) -> None:
    _, findings, report = run_audit(tmp_path, EGOTOM, checks=[KEY], embeddings=False)
    stats = next(c for c in report["checks"] if c["key"] == KEY)["stats"]
    assert documented("EgoToM paper subset") == (stats["structural"], stats["items"])


@pytest.mark.skipif(not CONTEXT_BENCH.is_dir(), reason="context-bench examples not present")
def test_the_documented_rate_on_the_context_bench_examples(tmp_path: Path) -> None:
    _, _, report = run_audit(tmp_path, CONTEXT_BENCH / "examples.jsonl", checks=[KEY])
    stats = next(c for c in report["checks"] if c["key"] == KEY)["stats"]
    assert documented("context-bench examples") == (stats["structural"], stats["items"])


# ------------------------------------------------------------------ the exit-code rule


RULE = "exit 1 on a finding at `fail_on=` (default: an error), warnings listed with exit 0"


def test_the_exit_code_rule_is_one_in_readme_help_and_code(run_gen, tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    assert RULE in next(x for x in readme.splitlines() if "docs/reference/audit.md" in x)
    shown = run_gen("audit", "--help").stdout
    assert "exit 1 on an error (fail_on=), warnings exit 0" in shown
    assert "an error exits 1, warnings and info are listed and exit 0" in " ".join(shown.split())
    answer = "C walks to the kitchen and opens the fridge door slowly"
    warned = write_jsonl(  # most of the answer's 5-word phrases in the context: a warning only
        tmp_path / "warn.jsonl",
        [
            mcq(
                0,
                [answer, "C sits on the sofa", "C waters the plants"],
                0,
                "C walks to the kitchen and opens the fridge door.",
            )
        ],
    )
    for code, extra in ((0, []), (1, ["fail_on=warning"])):
        out = tmp_path / f"out{code}"
        p = run_gen(
            "audit",
            f"input={warned}",
            "embeddings=false",
            "checks=[structure,leakage]",
            *extra,
            f"hydra.run.dir={out}",
        )
        assert p.returncode == code, p.stderr
        summary = json.loads((out / "audit.json").read_text())["summary"]
        assert summary["by_severity"] == {"error": 0, "warning": 1, "info": 0}
        assert summary["exit_code"] == code
