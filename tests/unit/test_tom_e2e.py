"""The ``tom`` generator in a run with the scripted fake LLM: every filter with planted cases, and
the generator end to end: the run folder, the MCQ records, no leak of the future, the EgoToM CSV
export, the funnel, concurrency, shards, seeded shuffles, ``n`` extension and bad input at the CLI.
The LLM stages are tested in test_tom_runs.py; the input parsing and the filter rules in
test_tom.py; the scripted LLM, tom's fake embedder and the run helpers are in tests/tom_runs.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from concurrency import Jittered
from conftest import merge_and_compare, read_jsonl
from tom_runs import (
    EGOTOM,
    NARRATION,
    TIMELINES,
    FakeEmbedder,
    Script,
    make_ctx,
    run_tom,
    stage_of,
)

from gen.engine.runner import run_config
from gen.formats.mcq import EGOTOM_QUESTION, egotom_columns
from gen.formats.timelines import fmt_line, fmt_time
from gen.generators.tom import read_input
from gen.generators.tom.stages import numbered
from gen.kinds.mcq import load_banks
from gen.llm import OpenAIConfig, scripted_llm
from gen.schemas.tom import TomQuestion

HEX32 = re.compile(r"^[0-9a-f]{32}$")
TYPES = ("goal", "belief", "actions")

# --------------------------------------------------------------------------- 6. filters in a run


def test_keyword_filter_in_a_run(tmp_path: Path) -> None:
    """Two wrong goals hit keywords: the goal question has only one left and is dropped; with
    one hit the two first survivors make the 3-choice question."""
    two = {
        "wrong_goals": [
            "To demonstrate soup for a class.",
            "To set the table.",
            "To train for a cook-off.",
        ]
    }
    one = {"wrong_goals": ["To bake a cake.", "To film a tutorial.", "To set the table."]}
    script = Script({"goals": [two, one]})
    run_tom(tmp_path, script, n=2)
    rejects = read_jsonl(tmp_path / "rejects.jsonl")
    kw = [r for r in rejects if r["stage"] == "filter.keyword"]
    assert (
        len(kw) == 1
        and kw[0]["reason"] == "too_few_wrong_goals"
        and "goal question" in kw[0]["detail"]
    )
    goals = [r for r in read_jsonl(tmp_path / "tom.jsonl") if r["question_type"] == "goal"]
    assert len(goals) == 1
    assert sorted(goals[0]["options"]) == [
        "To bake a cake.",
        "To set the table.",
        "To wash the dishes.",
    ]
    assert goals[0]["privileged"]["dropped_wrong_goals"] == ["To film a tutorial."]


def test_length_and_similarity_filters_in_a_run(tmp_path: Path) -> None:
    """The filters judge the final choices: too-long wrong goals (length), and simplified action
    statements that became near-duplicates of each other (similarity, after the pool)."""
    long_goals = {
        "wrong_goals": [
            "To prepare an elaborate three course dinner",
            "To renovate the entire kitchen",
            "To reorganise every cupboard in the house",
        ]
    }
    a, b = (
        "C picks the salt, adds it to the pot, and stirs the pot.",
        "C picks the salt, adds it to the pot, and stirs again.",
    )
    same = {"simplified": [a, b, "C lowers the heat, moves the pot, and wipes."]}
    emb = FakeEmbedder({a: [1, 0, 0], b: [0.99, 0.141, 0]})
    run_tom(tmp_path, Script({"goals": [long_goals], "simplify": [same]}), emb, n=1, simplify=True)
    rejects = {r["stage"]: r for r in read_jsonl(tmp_path / "rejects.jsonl")}
    assert rejects["filter.length"]["reason"] == "truth_shortest"
    assert rejects["filter.similarity"]["reason"] == "near_duplicate_options"
    assert "actions question" in rejects["filter.similarity"]["detail"]
    assert [r["question_type"] for r in read_jsonl(tmp_path / "tom.jsonl")] == ["belief"]


def test_time_window_filter_both_ways(tmp_path: Path) -> None:
    out = tmp_path / "a"
    script = Script()
    run_tom(out, script, n=1, time_window=[290, 299])
    (rej,) = read_jsonl(out / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == ("filter.time_window", "no_line_in_window")
    assert not script.log  # no LLM call spent on it
    out = tmp_path / "b"
    run_tom(out, Script(), n=1, time_window=[10, 20], restrict_to_window=False)  # the paper's order
    (rej,) = read_jsonl(out / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == ("filter.time_window", "transition_outside_window")
    m = json.loads((out / "manifest.json").read_text())
    assert [r["step"] for r in m["funnel"]["steps"]][2:4] == ["analysis", "time window"]
    assert [r["goal"] for r in m["funnel"]["steps"]][:4] == [1, 1, 1, 0]


# --------------------------------------------------------------------------- 7. end to end


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory) -> SimpleNamespace:
    out = tmp_path_factory.mktemp("tom_run")
    script = Script()
    result, ctx = run_tom(out, script)
    return SimpleNamespace(
        out=out,
        result=result,
        ctx=ctx,
        script=script,
        records=read_jsonl(out / "tom.jsonl"),
        rejects=read_jsonl(out / "rejects.jsonl"),
        manifest=json.loads((out / "manifest.json").read_text()),
        clips=read_input(ctx.cfg),
    )


def test_run_folder_reconciles(fixture_run, check_run_folder) -> None:
    m = check_run_folder(fixture_run.out, "tom", 9, hydra=False, one_per_index=False)
    assert m["counts"]["accepted"] == 12 and m["counts"]["rejected"] == 5
    assert m["counts"]["rejects_by_reason"] == {
        "few_c_lines": 1,
        "malformed_line": 1,
        "too_few_lines": 1,
        "too_short": 1,
        "uncertain": 1,
    }
    assert set(m["prompts"]) >= {
        "tom/analysis.jinja",
        "tom/goals.jinja",
        "tom/beliefs_actions.jinja",
        "tom/simplify.jinja",
        "tom/_oneshot.jinja",
    }
    for name in (
        "egotom_goal_shuffled.csv",
        "egotom_belief_shuffled.csv",
        "egotom_actions_shuffled.csv",
    ):
        assert name in m["outputs"]
    # every clip ends as questions or rejects: nothing silently lost
    indices = {r["index"] for r in fixture_run.rejects}
    by_clip = {r["clip_id"] for r in fixture_run.records}
    assert len(indices) + len(by_clip) == 9 and not indices & {
        i for i, c in enumerate(fixture_run.clips) if c.clip_id in by_clip
    }


def test_records_are_mcq_records(fixture_run) -> None:
    for rec in fixture_run.records:
        q = TomQuestion.model_validate(rec)
        assert (
            HEX32.match(q.item_id)
            and q.group == q.clip_id
            and q.question == EGOTOM_QUESTION[q.question_type]
        )
        assert len(q.options) == (3 if q.question_type == "goal" else 4)
        assert q.options[q.answer] == q.privileged["truth"][q.question_type]
        assert (
            q.origins is not None
            and q.origins[q.answer] == "truth"
            and q.origins.count("truth") == 1
        )
        assert len(set(q.options)) == len(q.options)
        assert q.privileged["source"].startswith(
            f"{NARRATION}: {q.vuid}.narration_pass_"
        )  # provenance
    assert len({r["item_id"] for r in fixture_run.records}) == len(fixture_run.records)
    first = fixture_run.records[0]
    assert first["options"][first["answer"]] == "To wash the dishes."
    assert all(
        o.startswith("C believes that ")
        for r in fixture_run.records
        if r["question_type"] == "belief"
        for o in r["options"]
    )
    assert all(
        re.match(r"^C .+, .+, and .+\.$", o)
        for r in fixture_run.records
        if r["question_type"] == "actions"
        for o in r["options"]
    )


def test_no_future_narration_is_visible(fixture_run) -> None:
    clips = {c.clip_id: c for c in fixture_run.clips}
    for rec in fixture_run.records:
        clip = clips[rec["clip_id"]]
        context = rec["visible"]["context"].split("\n")
        k = len(context)
        assert context == [
            fmt_line(ln) for ln in clip.lines[:k]
        ]  # exactly the past, in EgoToM's form
        assert rec["visible"]["query_time"] == fmt_time(clip.lines[k].t)
        assert rec["query_sec"] == clip.lines[k].t and rec["clip_end_time"] == pytest.approx(
            clip.start_sec + clip.lines[k].t
        )
        future = rec["privileged"]["future"].split("\n")
        assert (
            future == [fmt_line(ln) for ln in clip.lines[k:]]
            and rec["privileged"]["transition"] == future[0]
        )
        visible_text = json.dumps(rec["visible"])
        assert not any(f.strip() in visible_text for f in future)
        assert rec["privileged"]["summary"] not in visible_text
        assert set(rec["visible"]) == {"context", "query_time"}


def test_counterfactual_prompts_never_see_the_future(fixture_run) -> None:
    clips = [c for c in fixture_run.clips if not c.problems]
    by_goal = {}
    for call in fixture_run.script.log:
        if call.stage == "analysis":
            clip = next(
                c
                for c in clips
                if numbered(c)[0] in call.request and numbered(c)[-1] in call.request
            )
            by_goal = {"clip": clip}
            continue
        clip = by_goal["clip"]
        rec = next(r for r in fixture_run.records if r["clip_id"] == clip.clip_id)
        k = len(rec["visible"]["context"].split("\n"))
        text = "\n".join(m["content"] for m in call.messages)
        future = [ln.text for ln in clip.lines[k:]]
        past = numbered(clip)[:k]
        if call.stage in ("goals", "beliefs_actions"):
            assert all(p in call.request for p in past)  # the whole past...
        assert not any(line in text for line in numbered(clip)[k:])  # ...and no future line
        assert not any(fmt_line(ln).strip() in text for ln in clip.lines[k:])
        assert not [
            f for f in future if f in text and not any(f == ln.text for ln in clip.lines[:k])
        ]
    assert {c.stage for c in fixture_run.script.log} == {
        "analysis",
        "goals",
        "beliefs_actions",
        "simplify",
    }


def test_export_csvs_have_egotom_columns_and_load(fixture_run) -> None:
    out = fixture_run.out
    for q in TYPES:
        df = pl.read_csv(out / f"egotom_{q}_shuffled.csv", infer_schema_length=0)
        assert df.columns == egotom_columns(q)
        if EGOTOM.is_dir():  # the real files' header, exactly
            assert (EGOTOM / f"egotom_{q}_shuffled.csv").read_text().splitlines()[0] == ",".join(
                df.columns
            )
        recs = [r for r in fixture_run.records if r["question_type"] == q]
        assert df.height == len(recs) == 4
        for row, rec in zip(df.iter_rows(named=True), recs, strict=True):
            assert (
                row["cuid"] == rec["clip_id"]
                and row["narrations_in_context"] == rec["visible"]["context"]
            )
            assert row[f"gt_{q}"] == rec["options"][rec["answer"]]
            assert [row[c] for c in egotom_columns(q) if "_choice_" in c] == rec["options"]
            assert float(row["clip_end_time"]) == pytest.approx(rec["clip_end_time"])
    banks = load_banks(out)  # a run folder: tom.jsonl first
    assert len(banks) == 1 and banks[0].path.name == "tom.jsonl" and banks[0].format == "jsonl"
    assert len(banks[0].items) == 12
    item = banks[0].items[0]
    assert (
        item.context == fixture_run.records[0]["visible"]["context"]
        and item.group == fixture_run.records[0]["clip_id"]
    )
    assert "privileged.future" in item.privileged
    (csv_bank,) = load_banks(out / "egotom_belief_shuffled.csv")
    assert [i.answer for i in csv_bank.items] == [
        r["answer"] for r in fixture_run.records if r["question_type"] == "belief"
    ]


def test_funnel_in_manifest(fixture_run) -> None:
    f = fixture_run.manifest["funnel"]
    steps = [r["step"] for r in f["steps"]]
    assert steps == [
        "clips in",
        "selected",
        "time window",
        "analysis",
        "counterfactual",
        "simplify",
        "keyword filter",
        "length filter",
        "similarity filter",
    ]
    assert f["steps"][0] == {"step": "clips in", "goal": 9, "belief": 9, "actions": 9}
    assert f["steps"][1]["goal"] == 4 and f["steps"][-1] == {
        "step": "similarity filter",
        "goal": 4,
        "belief": 4,
        "actions": 4,
    }
    assert f["selection"]["excluded_by_reason"] == {
        "few_c_lines": 1,
        "too_few_lines": 1,
        "too_short": 1,
        "uncertain": 1,
    }
    assert f["clips_in_input"] == 9 and f["seconds_per_clip"] >= 0


def test_funnel_counts_each_stage_drop(tmp_path: Path) -> None:
    """Plant one failure per stage on successive clips of a 6-clip JSONL: the funnel falls by
    one at each step and each drop is a reject with its stage."""
    base = json.loads(TIMELINES.read_text().splitlines()[0])
    path = tmp_path / "six.jsonl"
    path.write_text(
        "".join(
            json.dumps({**base, "clip_id": f"c{i}", "summary": f"clip c{i}"}) + "\n"
            for i in range(6)
        )
    )
    bad_goals = {"wrong_goals": ["To demonstrate it.", "To compete.", "To bake."]}
    bad_alts = "not json"
    long_simpl = ('{"simplified": ["C', "length")
    plan = {
        "analysis": [
            {
                "transition_line": 1,
                "future_goal": "a b",
                "next_actions": ["a", "b", "c"],
                "belief": "d e",
            }
        ]
        * 2,
        "goals": [bad_goals] * 2,
        "beliefs_actions": [bad_alts] * 6,
        "simplify": [long_simpl] * 2,
    }
    order = {"analysis": "c0", "goals": "c1", "beliefs_actions": "c2", "simplify": "c3"}
    script = Script(
        plan,
        when=lambda stage, req: (
            f"clip {order[stage]}" in req
            or (stage != "analysis" and current["clip"] == order[stage])
        ),
    )
    current = {"clip": ""}
    orig = script.__call__

    def tracking(messages, seed):
        stage, req = stage_of(messages)
        m = re.search(r"Summary of the whole video: clip (c\d)", req)
        if m:
            current["clip"] = m.group(1)
        return orig(messages, seed)

    ctx = make_ctx(tmp_path, None, None, input=str(path), progress="plain", attempts=2)
    ctx.use(llm=scripted_llm(tracking))
    run_config("tom", ctx.cfg, tmp_path, ctx=ctx, quiet=True)
    rejects = read_jsonl(tmp_path / "rejects.jsonl")
    stages = sorted(
        (r["detail"].split(":")[0].split(",")[0], r["stage"], r["reason"]) for r in rejects
    )
    assert stages == [
        ("clip c0", "analysis", "transition_first_half"),
        ("clip c1", "filter.keyword", "too_few_wrong_goals"),
        ("clip c2", "counterfactual_beliefs_actions", "invalid_output"),
        ("clip c2", "counterfactual_beliefs_actions", "invalid_output"),
        ("clip c3", "simplify", "truncated"),
    ]
    rows = {
        r["step"]: (r["goal"], r["belief"], r["actions"])
        for r in json.loads((tmp_path / "manifest.json").read_text())["funnel"]["steps"]
    }
    assert rows["clips in"] == rows["selected"] == rows["time window"] == (6, 6, 6)
    assert rows["analysis"] == (5, 5, 5) and rows["counterfactual"] == (5, 4, 4)
    assert rows["simplify"] == (5, 4, 3) and rows["keyword filter"] == (4, 4, 3)
    assert rows["similarity filter"] == (4, 4, 3)
    assert len(read_jsonl(tmp_path / "tom.jsonl")) == 11


def test_funnel_is_printed(tmp_path: Path, capsys) -> None:
    ctx = make_ctx(tmp_path, progress="plain", n=2)
    run_config("tom", ctx.cfg, tmp_path, ctx=ctx, quiet=True)
    out = capsys.readouterr().out
    assert "[tom] funnel" in out and re.search(r"clips in\s+2\s+2\s+2", out)
    assert re.search(r"similarity filter\s+2\s+2\s+2", out)


def test_concurrent_clips_and_stages_give_the_sequential_bytes(tmp_path: Path) -> None:
    """Issue 9: clips in flight at once (and a clip's two counterfactual stages), answered out
    of order, give records, CSVs and funnel byte-identical to one call at a time."""
    outs = {}
    for k in (1, 4):
        script = Jittered(Script())
        result, _ = run_tom(tmp_path / str(k), script, llm=OpenAIConfig(concurrency=k))
        assert (script.max_in_flight > 1) == (k > 1)
        names = ["tom.jsonl", *(f"egotom_{q}_shuffled.csv" for q in TYPES)]
        outs[k] = (
            [(tmp_path / str(k) / f).read_bytes() for f in names],
            result.manifest["funnel"]["steps"],
        )
    assert outs[1][0][0].count(b"\n") == 12  # 4 selected clips x 3 questions
    assert outs[1] == outs[4]


def test_shards_merge_to_the_whole(tmp_path: Path) -> None:
    """``merge`` of two tom shards of the 9-clip fixture (5 excluded at selection): records,
    rejects and the EgoToM CSVs byte for byte, the funnel added up."""
    run_tom(tmp_path / "whole")
    for k in range(2):
        run_tom(tmp_path / f"s{k}", shard=k, num_shards=2)
    merged = merge_and_compare(
        tmp_path / "whole", [tmp_path / "s0", tmp_path / "s1"], tmp_path / "m"
    )
    assert merged["counts"]["indices_done"] == 9 and merged["funnel"]["steps"][-1]["goal"] == 4


def test_shuffles_are_seeded_and_deterministic(tmp_path: Path) -> None:
    base = json.loads(TIMELINES.read_text().splitlines()[0])
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({**base, "clip_id": f"c{i}"}) + "\n" for i in range(12)))
    outs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 7)):
        run_tom(tmp_path / name, input=str(path), seed=seed)
        outs[name] = (tmp_path / name / "tom.jsonl").read_bytes()
    assert outs["a"] == outs["b"]
    assert outs["a"] != outs["c"]
    recs = [json.loads(x) for x in outs["a"].decode().splitlines()]
    for q in TYPES:
        answers = [r["answer"] for r in recs if r["question_type"] == q]
        k = len(next(r for r in recs if r["question_type"] == q)["options"])
        # balanced by construction: each block of k clips holds the truth once at each position
        assert len(answers) == 12 and all(
            sorted(answers[b : b + k]) == list(range(k)) for b in range(0, 12, k)
        )
    # the option sets are the same whatever the seed; only their order moves
    recs_c = [json.loads(x) for x in outs["c"].decode().splitlines()]
    assert [sorted(r["options"]) for r in recs] == [sorted(r["options"]) for r in recs_c]


def test_n_extends_and_shards_concatenate(tmp_path: Path) -> None:
    run_tom(tmp_path / "all", n=9)
    run_tom(tmp_path / "s0", shard=0, num_shards=2)
    run_tom(tmp_path / "s1", shard=1, num_shards=2)
    run_tom(tmp_path / "n4", n=4)
    full = (tmp_path / "all" / "tom.jsonl").read_text()
    assert (tmp_path / "s0" / "tom.jsonl").read_text() + (
        tmp_path / "s1" / "tom.jsonl"
    ).read_text() == full
    assert full.startswith((tmp_path / "n4" / "tom.jsonl").read_text())


def test_cli_reports_bad_input_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "narration.json"
    bad.write_text("{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "gen", "tom", f"input={bad}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "narration.json:1: not valid JSON" in proc.stderr and "Traceback" not in proc.stderr
