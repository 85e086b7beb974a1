"""The distractor goal bank and its verbaliser: goal-bank validation (file, line and field of a bad
row; bad JSON, duplicate ids, numbers and nesting JSON cannot hold, BOM and non-UTF-8 text; parquet
banks), the config, the CLI's one-line exit 2, the verbaliser per action type, and the example
bank."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from distractors_runs import HEX32, NAME, text_bank, write_bank

from gen.errors import InputError
from gen.formats.goals import load_goals, verbalise
from gen.generators.distractors import DistractorsConfig, plan
from gen.paths import EXAMPLES
from gen.schemas.distractors import GOAL_TYPES, GoalRow
from gen.templates import Prompts

# --------------------------------------------------------------------------- the goal bank


GOOD = {"goal_id": "a1", "group": "kitchen", "goal": {"type": "shop", "content": "hand soap"}}


@pytest.mark.parametrize(
    "row, field, message",
    [
        (
            {**GOOD, "goal": {"type": "dance", "content": "x"}},
            "goal",
            "does not match any of the expected tags",
        ),
        (
            {**GOOD, "goal": {"type": "search", "source": "web", "query": "q", "query_item": "i"}},
            "goal.search.source",
            "'world' or 'timeline'",
        ),
        (
            {**GOOD, "goal": {"type": "search", "source": "world", "query_item": "i"}},
            "goal.search.query",
            "Field required",
        ),
        (
            {**GOOD, "goal": {"type": "shop", "content": "soap", "price": 3}},
            "goal.shop.price",
            "Extra inputs",
        ),
        (
            {**GOOD, "goal": {"type": "shop", "content": "   "}},
            "goal.shop.content",
            "at least 1 character",
        ),
        (
            {**GOOD, "goal": {"type": "translate", "modality": "video", "src_language": "German"}},
            "goal.translate.modality",
            "'text' or 'audio'",
        ),
        (
            {**GOOD, "goal": {"type": "entertain", "modality": "audio"}},
            "goal.entertain.content",
            "Field required",
        ),
        (
            {**GOOD, "goal": {"content": "soap"}},
            "goal",
            "Unable to extract tag using discriminator 'type'",
        ),
        ({**GOOD, "text": "buy soap"}, "row", "exactly one of goal"),
        ({"goal_id": "a1", "group": "kitchen"}, "row", "exactly one of goal"),
        ({"goal_id": "a1", "goal": GOOD["goal"]}, "group", "Field required"),
    ],
)
def test_bad_goals_name_file_line_and_field(
    tmp_path: Path, row: dict, field: str, message: str
) -> None:
    other = {
        "goal_id": "z9",
        "group": "g",
        "goal": {"type": "find_directions", "to": "the station"},
    }
    path = tmp_path / "bank.jsonl"
    path.write_text(json.dumps(other) + "\n\n" + json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_goals(path)
    assert str(e.value).startswith(f"{path}:3: {field}: ")
    assert message in str(e.value)


def test_bad_json_and_duplicate_ids(tmp_path: Path) -> None:
    path = tmp_path / "bank.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bank.jsonl:2: not valid JSON"):
        load_goals(path)
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bank.jsonl:2: goal_id 'a1' repeats .*bank.jsonl:1"):
        load_goals(path)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_context_window_that_is_no_number_names_file_line_and_field(
    tmp_path: Path, value: str
) -> None:
    """Python's json reads NaN and Infinity; the bank then wrote them back as bare NaN, which
    other JSON readers refuse. They are refused where read: file:line: field: reason."""
    path = tmp_path / "bank.jsonl"
    path.write_text(
        json.dumps(GOOD)
        + "\n"
        + json.dumps({**GOOD, "goal_id": "b2"})[:-1]
        + f', "context_window": {{"start_s": 0, "end_s": {value}}}}}\n',
        encoding="utf-8",
    )
    with pytest.raises(InputError) as e:
        load_goals(path)
    assert str(e.value).startswith(f"{path}:2: context_window.end_s: ")
    # a parquet bank's float column can hold NaN too
    bank = tmp_path / "bank.parquet"
    pl.DataFrame(
        [
            {
                **GOOD,
                "goal": json.dumps(GOOD["goal"]),
                "context_window": {"start_s": 0.0, "end_s": 1.0},
            },
            {
                **GOOD,
                "goal_id": "b2",
                "goal": json.dumps(GOOD["goal"]),
                "context_window": {"start_s": 0.0, "end_s": float(value)},
            },
        ]
    ).write_parquet(bank)
    with pytest.raises(
        InputError,
        match=r"bank.parquet:row 2: context_window.end_s: Input should be a finite number",
    ):
        load_goals(bank)


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (
            '{"goal_id": %s, "group": "g", "text": "x"}' % ("9" * 5000),
            "Exceeds the limit (4300 digits)",
        ),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
    ids=["5000_digits", "nested_100000_deep"],
)
def test_a_number_or_nesting_json_cannot_hold_is_an_input_error(
    tmp_path: Path, line: str, needle: str
) -> None:
    """Both were exit 1 "unexpected ValueError / RecursionError"."""
    path = tmp_path / "bank.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_goals(path)
    assert str(e.value).startswith(f"{path}:2: not valid JSON (") and needle in str(e.value)


def test_a_goal_bank_with_a_bom_reads_and_one_not_in_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bank.jsonl"
    text = (
        json.dumps(GOOD)
        + "\n"
        + json.dumps({**GOOD, "goal_id": "b2", "group": "café"}, ensure_ascii=False)
        + "\n"
    )
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert [r.goal_id for r in load_goals(path).rows] == ["a1", "b2"]
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(
        InputError, match=rf"^{re.escape(str(path))}:2: not UTF-8 text \(byte 0xe9 at column \d+"
    ):
        load_goals(path)


def test_every_action_type_validates_exactly() -> None:
    rows = load_goals(EXAMPLES / "goals.jsonl").rows
    for t in GOAL_TYPES:
        goal = next(r.goal for r in rows if r.goal.type == t).model_dump()
        assert GoalRow(goal_id="x", group="y", goal=goal).goal.model_dump() == goal
        for key in [k for k in goal if k != "type"]:
            with pytest.raises(ValueError, match="Field required"):
                GoalRow(goal_id="x", group="y", goal={k: v for k, v in goal.items() if k != key})


def test_parquet_bank_matches_jsonl(tmp_path: Path) -> None:
    src = [json.loads(x) for x in (EXAMPLES / "goals.jsonl").read_text().splitlines()[:40]]
    as_struct = tmp_path / "struct.parquet"
    pl.DataFrame(src).write_parquet(as_struct)  # one struct column holding every type's fields
    as_json = tmp_path / "json.parquet"
    pl.DataFrame([{**r, "goal": json.dumps(r["goal"])} for r in src]).write_parquet(as_json)
    want = [GoalRow.model_validate(r) for r in src]
    assert load_goals(as_struct).rows == want == load_goals(as_json).rows
    bad = tmp_path / "bad.parquet"
    pl.DataFrame(
        [{**r, "goal": json.dumps(r["goal"])} for r in src[:3]]
        + [{"goal_id": "q", "group": "g", "goal": json.dumps({"type": "shop"})}]
    ).write_parquet(bad)
    with pytest.raises(InputError, match=r"bad.parquet:row 4: goal.shop.content: Field required"):
        load_goals(bad)
    assert plan(DistractorsConfig(input=str(as_struct), cache_dir=None)).n == 40


def test_config_validation(tmp_path: Path) -> None:
    assert plan(DistractorsConfig()).n == len(load_goals(EXAMPLES / "goals.jsonl").rows)
    with pytest.raises(ValueError, match="bands.similar must be"):
        DistractorsConfig(bands={"similar": (99, 95)})
    with pytest.raises(ValueError, match="n=5000 references but the bank has 423 goals"):
        plan(DistractorsConfig(n=5000))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no goals"):
        plan(DistractorsConfig(input=str(empty)))
    folder = tmp_path / "f"
    folder.mkdir()
    write_bank(folder / "goals.jsonl", text_bank(7))
    assert plan(DistractorsConfig(input=str(folder))).n == 7


def test_cli_bad_goal_is_one_line_and_exit_2(tmp_path: Path, run_gen) -> None:
    bank = tmp_path / "bank.jsonl"
    bank.write_text(json.dumps({**GOOD, "goal": {"type": "shop"}}) + "\n", encoding="utf-8")
    proc = run_gen(NAME, f"input={bank}", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    assert f"{bank}:1: goal.shop.content: Field required" in proc.stderr
    assert "Traceback" not in proc.stderr


# -------------------------------------------------------------------------- verbaliser and examples


@pytest.mark.parametrize(
    "goal, text",
    [
        (
            {
                "type": "search",
                "source": "world",
                "query": "how to revive",
                "query_item": "a dying evergreen",
            },
            "Do a search for how to revive a dying evergreen",
        ),
        (
            {
                "type": "search",
                "source": "timeline",
                "query": "when did I last water",
                "query_item": "the basil",
            },
            "Look through my own history for when did I last water the basil",
        ),
        (
            {"type": "store_memory", "content": "I took my vitamins today"},
            "Save to my memory: I took my vitamins today",
        ),
        (
            {
                "type": "temporal_attention",
                "action": "set",
                "time": "Ten minutes",
                "content": "get ready for work",
            },
            "Remind me to get ready for work (Ten minutes)",
        ),
        (
            {"type": "temporal_attention", "action": "unset", "time": "", "content": "stop gaming"},
            "Cancel the reminder to stop gaming",
        ),
        (
            {"type": "guided_activity", "content": "guided meditation", "time": "ten minutes"},
            "Guide me through guided meditation for ten minutes",
        ),
        (
            {"type": "guided_activity", "content": "a stretching routine", "time": " "},
            "Guide me through a stretching routine",
        ),
        (
            {
                "type": "control_environment",
                "target": "smart lights in kitchen",
                "value": "brightness: 50%",
            },
            "Control the smart lights in kitchen: brightness: 50%",
        ),
        (
            {
                "type": "communication",
                "action": "message",
                "target": "Alex",
                "content": "on my way",
            },
            "Send Alex a message: on my way",
        ),
        (
            {
                "type": "communication",
                "action": "share",
                "target": "Instagram",
                "content": "the summit photo",
            },
            "Share the summit photo with Instagram",
        ),
        (
            {"type": "translate", "modality": "text", "src_language": "german"},
            "Translate the german text in front of me",
        ),
        (
            {"type": "translate", "modality": "audio", "src_language": "Spanish"},
            "Translate what is being said in Spanish",
        ),
        (
            {"type": "find_directions", "to": "nearest coffee shop"},
            "Get directions to nearest coffee shop",
        ),
        ({"type": "shop", "content": "running shoes"}, "Shop for running shoes"),
        (
            {"type": "entertain", "modality": "audio", "content": "rock playlist"},
            "Play rock playlist",
        ),
        (
            {"type": "entertain", "modality": "vision", "content": "cat videos"},
            "Put on cat videos to watch",
        ),
    ],
)
def test_verbaliser(goal: dict, text: str) -> None:
    prompts = Prompts()
    assert verbalise(GoalRow(goal_id="x", group="y", goal=goal), prompts) == text
    assert list(prompts.used) == [f"distractors/{goal['type']}.jinja"]


def test_free_text_goal_is_used_as_is() -> None:
    row = GoalRow(goal_id="x", group="y", text="  Book a  table for two ")
    assert verbalise(row, Prompts()) == "Book a table for two"


def test_example_bank() -> None:
    import importlib.util

    rows = load_goals(EXAMPLES / "goals.jsonl").rows
    assert len(rows) >= 300
    assert {r.goal.type for r in rows} == set(GOAL_TYPES)
    per_type = {t: sum(r.goal.type == t for r in rows) for t in GOAL_TYPES}
    assert min(per_type.values()) >= 10
    sizes = np.bincount(np.unique([r.group for r in rows], return_inverse=True)[1])
    assert sizes.min() >= 2 and len(sizes) >= 100
    assert all(HEX32.match(r.goal_id) for r in rows)
    texts = [verbalise(r, Prompts()) for r in rows]
    assert len(set(texts)) == len(texts)
    spec = importlib.util.spec_from_file_location("make_goals", EXAMPLES / "make_goals.py")
    make_goals = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_goals)
    lines = [json.dumps(r, ensure_ascii=False) for r in make_goals.rows(0)]
    assert (EXAMPLES / "goals.jsonl").read_text(encoding="utf-8") == "\n".join(lines) + "\n"
