"""The ``tom`` generator's parts, without an LLM stage run: input parsing (Ego4D narrations,
EgoToM CSVs, timelines JSONL, and what each refuses), sizing and configuration, clip selection,
the options' surface forms, and the filter rules (keywords, length, similarity, time window). Each
LLM stage's prompt and parsing with the scripted fake LLM and transition validation are tested in
test_tom_runs.py; the filters in a run, assembly (seeded shuffles), no leak of the future, the
EgoToM CSV export, the funnel and the generator end to end in test_tom_e2e.py; the scripted LLM,
tom's fake embedder and the run helpers are in tests/tom_runs.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import read_jsonl
from tom_runs import EGOTOM, NARRATION, TIMELINES, FakeEmbedder, cfg_for, clip_of

from gen.errors import ConfigError, InputError, MissingInputError
from gen.formats.mcq import egotom_columns
from gen.formats.timelines import Clip, Line, fmt_line, fmt_time, parse_time, speaker_of
from gen.generators.tom import TomConfig, plan, read_input, selection
from gen.generators.tom.stages import in_window, keyword_hits, length_problem, similarity_problem
from gen.text.statements import join_actions, norm_belief, norm_goal, norm_sentence

# --------------------------------------------------------------------------- 1. parsing


@pytest.mark.parametrize(
    ("value", "sec"),
    [
        ("03m:18s", 198.0),
        ("3m18s", 198.0),
        ("03m:18.5s", 198.5),
        (" 00m:00s ", 0.0),
        ("03:18", 198.0),
        ("1:02:03", 3723.0),
        ("198", 198.0),
        ("198.25", 198.25),
        ("198s", 198.0),
        ("4m", 240.0),
        (12, 12.0),
        (12.5, 12.5),
        (0, 0.0),
    ],
)
def test_parse_time_accepts_the_usual_forms(value: Any, sec: float) -> None:
    assert parse_time(value) == sec


@pytest.mark.parametrize(
    "value",
    [None, "soon", "", "-3", -1, float("nan"), float("inf"), True, "03m:18x", [1], "1:2:3:4"],
)
def test_parse_time_rejects_non_times(value: Any) -> None:
    assert parse_time(value) is None


def test_fmt_time_matches_egotom() -> None:
    assert fmt_time(0) == "00m:00s" and fmt_time(198.9) == "03m:18s" and fmt_time(3600) == "60m:00s"
    assert fmt_line(Line(61, "#C C picks a cup", "C")) == "    01m:01s | #C C picks a cup"


@pytest.mark.parametrize(
    ("text", "who"),
    [
        ("#C C picks a cup", "C"),
        ("#c c hold the angle grinder", "C"),
        ("# C C takes blade", "C"),
        ("#CC puts the cardboard paper", "C"),
        ("#$C C rolls blended potato", "C"),
        ("$#C C picks a drill", "C"),
        ("y#C C hands the rope", "C"),
        ("#CCtalks to #OO", "C"),
        ("C C feels the knife edges.", "C"),
        ("#O man X gives C a cup", "O"),
        ("#o person x points", "O"),
        ("#x x drops dice", "O"),
        ("#X X fixes C camera", "O"),
        ("passes the vase to his left hand", "?"),
        ("cabinet", "?"),
        ("#unsure", "?"),
        ("#summary C cooks", "?"),
    ],
)
def test_speaker_tags_as_found_in_real_narrations(text: str, who: str) -> None:
    assert speaker_of(text) == who


def test_ego4d_fixture_is_cut_at_summaries() -> None:
    clips = read_input(cfg_for())
    assert len(clips) == 9  # the redacted video has no pass
    ids = [c.clip_id for c in clips]
    assert ids[0] == "0a1b2c3d-0000-4000-8000-000000000001~pass_1~0-80"
    assert (
        ids[3] == "0a1b2c3d-0000-4000-8000-000000000002~pass_1~84-109"
    )  # second summary of the pass
    first = clips[0]
    assert first.fmt == "ego4d" and first.vuid == "0a1b2c3d-0000-4000-8000-000000000001"
    assert first.summary == "C makes a vegetable soup and cleans up."  # "#summary" tag stripped
    assert first.duration == 300.0 and len(first.lines) == 80 and first.start_sec == 0.0
    workshop = clips[2]
    assert workshop.start_sec == 10.0 and workshop.lines[0].t == pytest.approx(
        1.0
    )  # relative to the summary
    assert all(a.t <= b.t for c in clips for a, b in zip(c.lines, c.lines[1:], strict=False))
    bad = clips[7]
    assert (
        bad.problems and "narration.json" in bad.problems[0] and "narrations[30]" in bad.problems[0]
    )
    assert "bad timestamp None" in bad.problems[0]
    assert sum(bool(c.problems) for c in clips) == 1


def test_ego4d_malformed_entries_are_reported_not_raised(tmp_path: Path) -> None:
    good = [{"timestamp_sec": 1.0 + i, "narration_text": f"#C C step {i}"} for i in range(10)]
    data = {
        "v1": {
            "narration_pass_1": {
                "narrations": [
                    *good[:5],
                    {"timestamp_sec": 6.5, "narration_text": ""},
                    "oops",
                    *good[5:],
                ],
                "summaries": [
                    {"start_sec": 0, "end_sec": 20, "summary_text": "#summary x"},
                    {"start_sec": 30},
                ],
            }
        },
        "v2": "not a video",
        "v3": {
            "narration_pass_1": {"narrations": good}
        },  # no summaries: the whole pass is one clip
    }
    path = tmp_path / "narration.json"
    path.write_text(json.dumps(data))
    clips = read_input(cfg_for(input=str(path)))
    by_id = {c.clip_id: c for c in clips}
    c1 = by_id["v1~pass_1~0-10"]
    assert len(c1.lines) == 10 and len(c1.problems) == 2
    assert any("narrations[5]: empty or missing narration text" in p for p in c1.problems)
    assert any("narrations[6]: not an object" in p for p in c1.problems)
    assert "summaries[1]" in by_id["v1~pass_1~summary1"].problems[0]
    assert by_id["v2"].problems == [f"{path}: v2: not an object"]
    assert len(by_id["v3~pass_1~0-10"].lines) == 10 and not by_id["v3~pass_1~0-10"].problems


def test_ego4d_unparseable_file_is_an_input_error_with_line(tmp_path: Path) -> None:
    path = tmp_path / "narration.json"
    path.write_text('{\n "v1": {\n  "narration_pass_1": [,]\n }\n}\n')
    with pytest.raises(ValueError, match=r"narration\.json:3: not valid JSON"):
        plan(cfg_for(input=str(path)))
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected Ego4D's layout"):
        plan(cfg_for(input=str(path)))


def write_csv(path: Path, rows: list[dict[str, str]], q: str = "goal") -> Path:
    cols = egotom_columns(q)
    pl.DataFrame(
        {c: [r.get(c, "") for r in rows] for c in cols}, schema=dict.fromkeys(cols, pl.String)
    ).write_csv(path)
    return path


def csv_row(cuid: str, lines: list[str], start: str = "100.5") -> dict[str, str]:
    return {
        "vuid": cuid.split("~")[0],
        "cuid": cuid,
        "narrations_in_context": "\n".join(lines),
        "gt_goal": "To x.",
        "goal_choice_a": "To x.",
        "goal_choice_b": "To y.",
        "goal_choice_c": "To z.",
        "clip_start_time": start,
        "clip_end_time": "300.0",
    }


def test_egotom_csv_rows_become_clips_once_per_cuid(tmp_path: Path) -> None:
    lines = [f"    {fmt_time(5 * i)} | #C C step {i}" for i in range(40)]
    folder = tmp_path / "bank"
    folder.mkdir()
    write_csv(
        folder / "egotom_goal_shuffled.csv",
        [
            csv_row("v1~pass_1~0-90", lines),
            csv_row("v2~pass_2~3-70", [*lines[:3], "garbage without a bar", *lines[3:]]),
        ],
    )
    write_csv(
        folder / "egotom_belief_shuffled.csv",
        [{**csv_row("v1~pass_1~0-90", lines), "gt_belief": "C believes."}],
        q="belief",
    )
    clips = read_input(cfg_for(input=str(folder)))
    assert [c.clip_id for c in clips] == [
        "v1~pass_1~0-90",
        "v2~pass_2~3-70",
    ]  # belief row is the same clip
    c1, c2 = clips
    assert (
        c1.fmt == "egotom_csv" and c1.vuid == "v1" and c1.start_sec == 100.5 and c1.duration is None
    )
    assert [ln.t for ln in c1.lines[:3]] == [0.0, 5.0, 10.0] and c1.lines[1].text == "#C C step 1"
    assert (
        len(c2.problems) == 1 and "row 2" in c2.problems[0] and "narration line 4" in c2.problems[0]
    )
    assert "egotom_goal_shuffled.csv" in c2.problems[0]


def test_egotom_csv_without_its_columns_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    pl.DataFrame({"cuid": ["a"], "text": ["b"]}).write_csv(path)
    with pytest.raises(ValueError, match="missing EgoToM column"):
        plan(cfg_for(input=str(path)))


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="EgoToM paper data not present")
def test_real_egotom_csvs_parse_without_problems() -> None:
    clips = read_input(cfg_for(input=str(EGOTOM)))
    assert len(clips) == 579  # 706 rows over three files, 579 distinct cuids
    assert not [c.problems for c in clips if c.problems]
    assert all(c.lines and c.duration is None for c in clips)
    # robust tags: few clips fall under 60% about C once "#c c", "#CC"... count as C
    assert sum(selection(c, cfg_for(input=str(EGOTOM)))[0] != [] for c in clips) <= 5


def test_jsonl_fixture_reports_bad_lines_with_file_and_line() -> None:
    clips = read_input(cfg_for(input=str(TIMELINES)))
    assert [c.clip_id for c in clips] == ["bake-001", "bike-001", "timelines:3", "bake-002"]
    bake, bike, cut, bad = clips
    assert (
        bake.start_sec == 120.0
        and bake.duration == 300.0
        and bake.summary == "C bakes a loaf of bread."
    )
    assert bike.lines[1].t == 6.0 and bike.vuid == "bike-001"  # "00m:06s" strings parse
    assert len(cut.problems) == 1 and cut.problems[0].startswith(f"{TIMELINES}:3: not valid JSON")
    assert bad.problems == [f"{TIMELINES}:4: narrations[10]: bad timestamp 'soon'"]


@pytest.mark.parametrize("summaries", [5, True, "a summary"])
def test_ego4d_summaries_that_are_no_list_are_a_clip_problem(
    tmp_path: Path, summaries: Any
) -> None:
    """Before: ``TypeError: 'int' object is not iterable`` (a traceback); now the pass is a
    clip rejected at parse, like a pass whose narrations are no list."""
    good = [{"timestamp_sec": 1.0 + i, "narration_text": f"#C C step {i}"} for i in range(5)]
    path = tmp_path / "narration.json"
    path.write_text(
        json.dumps(
            {
                "v1": {"narration_pass_1": {"narrations": good, "summaries": summaries}},
                "v2": {"narration_pass_1": {"narrations": good}},
            }
        )
    )
    clips = plan(cfg_for(input=str(path))).data
    assert [c.clip_id for c in clips] == ["v1~pass_1", "v2~pass_1~0-5"]
    assert clips[0].problems == [
        f"{path}: v1.narration_pass_1: not a narration pass (summaries must be a list)"
    ]
    assert not clips[1].problems


def test_a_timestamp_too_large_for_a_float_is_a_bad_timestamp(tmp_path: Path) -> None:
    """A 400-digit integer timestamp was an OverflowError (a traceback) in both readers."""
    huge = int("9" * 400)
    assert (
        parse_time(huge) is None
        and parse_time("9" * 5000 + "m:01s") is None
        and parse_time("1e999") is None
    )
    good = [{"timestamp_sec": 1.0 + i, "narration_text": f"#C C step {i}"} for i in range(5)]
    path = tmp_path / "narration.json"
    path.write_text(
        json.dumps(
            {
                "v1": {
                    "narration_pass_1": {
                        "narrations": [
                            *good,
                            {"timestamp_sec": huge, "narration_text": "#C C waits"},
                        ],
                        "summaries": [{"start_sec": 0, "end_sec": huge}],
                    }
                }
            }
        )
    )
    (clip,) = plan(cfg_for(input=str(path))).data
    assert clip.problems == [
        f"{path}: v1.narration_pass_1.summaries[0]: summary without a valid start_sec < end_sec"
    ]
    timelines = tmp_path / "timelines.jsonl"
    timelines.write_text(
        json.dumps(
            {"clip_id": "a", "start_sec": huge, "narrations": [{"t": huge, "text": "#C C x"}]}
        )
        + "\n"
    )
    (clip,) = plan(cfg_for(input=str(timelines))).data
    start, stamp = clip.problems
    assert start.startswith(f"{timelines}:1: bad start_sec 9999")
    assert stamp.startswith(f"{timelines}:1: narrations[0]: bad timestamp 9999")
    assert all(p.endswith("(400 characters)") for p in clip.problems)  # named, not copied


def test_nan_in_a_timeline_line_makes_that_clip_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "timelines.jsonl"
    path.write_text(
        '{"clip_id": "a", "narrations": [{"t": NaN, "text": "#C C x"}]}\n'
        '{"clip_id": "b", "narrations": [{"t": 1, "text": "#C C x"}]}\n'
    )
    a, b = plan(cfg_for(input=str(path))).data
    assert a.problems == [
        f"{path}:1: narrations[0].t: NaN is not a JSON number (JSON has no NaN or Infinity)"
    ]
    assert not b.problems


@pytest.mark.parametrize("name", ["narration.json", "timelines.jsonl", "egotom_goal_shuffled.csv"])
def test_tom_inputs_with_a_bom_read_as_without(tmp_path: Path, name: str) -> None:
    """Spreadsheet exports start with a byte-order mark; JSON and JSONL refused it before."""
    source = {"narration.json": NARRATION, "timelines.jsonl": TIMELINES}.get(name)
    plain = tmp_path / "plain" / name
    plain.parent.mkdir()
    if source is None:
        write_csv(
            plain,
            [
                csv_row(
                    "v1~pass_1~0-90", [f"    {fmt_time(5 * i)} | #C C step {i}" for i in range(5)]
                )
            ],
        )
    else:
        plain.write_bytes(source.read_bytes())
    bom = tmp_path / "bom" / name
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())

    def seen(path: Path) -> list[Any]:
        return [
            (c.clip_id, c.lines, [p.replace(str(path), "F") for p in c.problems])
            for c in plan(cfg_for(input=str(path))).data
        ]

    assert seen(bom) == seen(plain)


@pytest.mark.parametrize("name", ["narration.json", "timelines.jsonl"])
def test_tom_inputs_not_in_utf8_name_file_and_line(tmp_path: Path, name: str) -> None:
    """Before: ``UnicodeDecodeError`` (timelines, a traceback) or an error without the line."""
    source = NARRATION if name == "narration.json" else TIMELINES
    path = tmp_path / name
    lines = source.read_bytes().split(b"\n")
    k = next(i for i, line in enumerate(lines) if b"#C C" in line and i > 1)
    lines[k] = lines[k].replace(b"#C C", "#C Ç".encode("latin-1"), 1)
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(
        InputError, match=rf"^{re.escape(str(path))}:{k + 1}: not UTF-8 text \(byte 0xc7"
    ):
        plan(cfg_for(input=str(path)))


def test_cli_a_pass_with_summaries_5_is_a_parse_reject_not_a_traceback(
    run_gen, tmp_path: Path
) -> None:
    path = tmp_path / "narration.json"
    path.write_text(json.dumps({"v1": {"narration_pass_1": {"narrations": [], "summaries": 5}}}))
    proc = run_gen("tom", f"input={path}", "progress=off", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    (reject,) = read_jsonl(tmp_path / "run" / "rejects.jsonl")
    assert reject["stage"] == "parse" and "summaries must be a list" in reject["detail"]


def test_n_defaults_to_every_clip_and_limits(tmp_path: Path) -> None:
    assert cfg_for().n is None  # validation sets nothing; the plan sizes the run
    assert plan(cfg_for()).n == 9
    assert plan(cfg_for(n=2)).n == 2
    assert plan(cfg_for(n=50)).n == 9  # n limits; it never invents clips
    assert plan(cfg_for(input=str(TIMELINES))).n == 4


def test_input_is_required_and_must_exist(tmp_path: Path) -> None:
    # input errors surface when the run is sized (the CLI does it before the run: one line, exit 2)
    with pytest.raises(ValueError, match="input= is required"):
        plan(TomConfig(cache_dir=None))
    with pytest.raises(MissingInputError):
        plan(TomConfig(input=str(tmp_path / "nope.json")))
    (tmp_path / "clips.txt").write_text("x")
    with pytest.raises(ValueError, match="cannot tell the format"):
        plan(TomConfig(input=str(tmp_path / "clips.txt")))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no clips found"):
        plan(TomConfig(input=str(empty)))
    assert issubclass(InputError, ValueError) and issubclass(ConfigError, ValueError)


def test_config_options() -> None:
    cfg = cfg_for(time_window=["2m30s", "04m:30s"])
    assert cfg.window == (150.0, 270.0)
    with pytest.raises(ValueError, match="time_window"):
        cfg_for(time_window=[300, 100])
    with pytest.raises(ValueError, match="max_lines"):
        cfg_for(min_lines=100, max_lines=50)
    assert cfg_for(time_window=None).window is None


def test_config_composes_and_reaches_pydantic() -> None:
    from gen.cli import validate

    settings = validate("tom", [f"input={NARRATION}"])
    assert isinstance(settings, TomConfig) and settings.n is None
    assert settings.model_dump() == TomConfig(input=str(NARRATION)).model_dump()


# --------------------------------------------------------------------------- 2. selection


@pytest.mark.parametrize(
    ("clip", "reason"),
    [
        (clip_of(80, 299.0), "too_short"),
        (clip_of(59), "too_few_lines"),
        (clip_of(181), "too_many_lines"),
        (
            clip_of(80, texts=lambda i: "#C C picks #unsure" if i == 40 else f"#C C step {i}"),
            "uncertain",
        ),
        (
            clip_of(
                80, texts=lambda i: "#C C picks #Unknown thing" if i == 3 else f"#C C step {i}"
            ),
            "uncertain",
        ),
        (
            clip_of(80, texts=lambda i: f"#O man X step {i}" if i % 2 else f"#C C step {i}"),
            "few_c_lines",
        ),
    ],
)
def test_selection_rules(clip: Clip, reason: str) -> None:
    fails, skipped = selection(clip, cfg_for())
    assert [f[0] for f in fails] == [reason] and not skipped


def test_selection_passes_a_good_clip_and_is_configurable() -> None:
    assert selection(clip_of(80), cfg_for()) == ([], [])
    assert selection(clip_of(80, 200.0), cfg_for(min_duration=0))[0] == []
    assert selection(clip_of(30), cfg_for(min_lines=20))[0] == []
    assert selection(clip_of(400), cfg_for(max_lines=None))[0] == []
    odd = clip_of(80, texts=lambda i: f"#O man X step {i}" if i % 2 else f"#C C step {i}")
    assert selection(odd, cfg_for(min_c_share=0.5))[0] == []
    tagged = clip_of(80, texts=lambda i: "#C C picks #unsure" if i == 40 else f"#C C step {i}")
    assert selection(tagged, cfg_for(exclude_tags=[]))[0] == []
    several = clip_of(30, 100.0)
    assert [f[0] for f in selection(several, cfg_for())[0]] == ["too_short", "too_few_lines"]


def test_csv_clips_skip_rules_about_the_whole_clip() -> None:
    """An EgoToM CSV row holds only the context before EgoToM's query moment (~3 min, ~60
    lines): duration and line count cannot be judged, the tag and C-share rules can."""
    short = clip_of(30, 180.0, fmt="egotom_csv")
    short.duration = None
    fails, skipped = selection(short, cfg_for())
    assert fails == [] and skipped == ["duration", "lines"]
    others = clip_of(30, 180.0, fmt="egotom_csv", speaker="O")
    assert [f[0] for f in selection(others, cfg_for())[0]] == ["few_c_lines"]


# --------------------------------------------------------------------------- 3. surface forms


@pytest.mark.parametrize(
    ("raw", "goal"),
    [
        ("wash the dishes", "To wash the dishes."),
        ("To wash the dishes.", "To wash the dishes."),
        ("C's goal is to wash the dishes", "To wash the dishes."),
        ("Future goal: To sew a cloth.", "To sew a cloth."),
        ("C wants to fix the bike!", "To fix the bike."),
        ("C washes the car", "To wash the car."),
        ("C tidies the room", "To tidy the room."),
        ("Washing the dishes", "To wash the dishes."),
        ("Making bread", "To make bread."),
        ("  ", ""),
    ],
)
def test_goal_surface_form(raw: str, goal: str) -> None:
    assert norm_goal(raw) == goal


@pytest.mark.parametrize(
    ("raw", "belief"),
    [
        ("the soup is ready", "C believes that the soup is ready."),
        ("C believes that the soup is ready.", "C believes that the soup is ready."),
        ("C thinks the pot is hot", "C believes that the pot is hot."),
        ("Belief: The TV is on", "C believes that the TV is on."),
        ("that C has enough flour", "C believes that C has enough flour."),
    ],
)
def test_belief_surface_form(raw: str, belief: str) -> None:
    assert norm_belief(raw) == belief


def test_action_surface_forms() -> None:
    assert (
        join_actions(["#C C picks the salt", "C adds salt.", "then stirs the pot"])
        == "C picks the salt, adds salt, and stirs the pot."
    )
    assert join_actions(["Picks a cup", "fills it"]) == "C picks a cup and fills it."
    assert (
        norm_sentence("picks the salt, adds salt, and stirs the pot")
        == "C picks the salt, adds salt, and stirs the pot."
    )
    assert norm_sentence("#C C picks x..") == "C picks x."
    from gen.text.statements import action_count

    assert (
        action_count("C picks a cup, fills it, and drinks.") == 3
        and action_count("C to the toilet.") == 1
    )
    assert (
        action_count("C picks a cup and fills it.") == 2
        and action_count("C a, b and c then d.") == 4
    )


# --------------------------------------------------------------------------- 6. filters: the rules


def test_keyword_filter_matches_word_starts() -> None:
    kw = TomConfig.model_fields["keywords"].get_default(call_default_factory=True)
    assert keyword_hits("To demonstrate knife skills.", kw) == ["demonstrate"]
    assert keyword_hits("To prepare for a cooking class.", kw) == ["class"]
    assert keyword_hits("To teach Classes.", kw) == ["class"]
    assert keyword_hits("To train for a marathon.", kw) == ["train for"]
    assert keyword_hits("To film a tutorial on Technique.", kw) == ["tutorial", "technique"]
    assert (
        keyword_hits("To declassify files.", kw) == []
        and keyword_hits("To train the dog.", kw) == []
    )


@pytest.mark.parametrize(
    ("truth", "wrongs", "unit", "expected"),
    [
        ("x" * 16, ["x" * 10, "x" * 11], "chars", "truth_longest"),  # 16 > 1.4 * 11
        ("x" * 14, ["x" * 10, "x" * 11], "chars", None),  # 14 <= 1.4 * 11
        ("x" * 10, ["x" * 15, "x" * 20], "chars", "truth_shortest"),
        ("x" * 10, ["x" * 14, "x" * 20], "chars", None),  # one wrong choice within 1.4x
        ("a b c d e f g h", ["a b c d e", "a b c"], "words", "truth_longest"),
        (
            "a b c d e f g",
            ["abcdefghijklmnop qrstuvwxyz", "abcdefghijklmnop"],
            "words",
            "truth_longest",
        ),
        ("a b c d e f g", ["abcdefghijklmnop qrstuvwxyz", "abcdefghijklmnop"], "chars", None),
    ],
)
def test_length_rule(truth: str, wrongs: list[str], unit: str, expected: str | None) -> None:
    problem = length_problem(truth, wrongs, 1.4, unit)  # type: ignore[arg-type]
    assert (problem[0] if problem else None) == expected
    assert length_problem(truth, wrongs, None, unit) is None  # type: ignore[arg-type]


def test_similarity_rule() -> None:
    emb = FakeEmbedder({"a": [1, 0, 0], "b": [0.95, 0.312, 0], "c": [0, 0, 1], "d": [0, 1, 0]})
    problem = similarity_problem(emb, ["a", "b", "c"], 0.94)
    assert problem and problem[0] == "near_duplicate_options" and "'a' and 'b'" in problem[1]
    assert similarity_problem(emb, ["a", "c", "d"], 0.94) is None
    assert similarity_problem(emb, ["a", "b"], 0.96) is None  # cos(a, b) = 0.95
    assert similarity_problem(emb, ["a", "a"], None) is None
    assert (
        in_window(150, (150, 270)) and in_window(270, (150, 270)) and not in_window(271, (150, 270))
    )
