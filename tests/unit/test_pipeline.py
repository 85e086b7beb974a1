"""The WAGIBench chain as one command (scripted LLM, bag-of-words embedder): recordings ->
digital goals= -> distractors digital= -> history -> audits -> bank -> export, joined by
WAGIBench's own loader; reruns skip finished steps and resume the interrupted one."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from conftest import (
    WAGIBENCH_LOADER,
    WAGIBENCH_MIXIN,
    read_jsonl,
    wagibench_loader,
    wagibench_prompt,
)
from digital_runs import goal_script, write_pool
from fakes import FakeEmbedder

from gen.engine.runner import RunContext, run_config
from gen.errors import ConfigError, InputError
from gen.generators.pipeline import PipelineConfig, plan
from gen.llm import scripted_llm
from gen.paths import EXAMPLES

NAME = "pipeline"


def small_chain(path: Path, pool: Path) -> Path:
    """The shipped wagibench chain, made small: 128 recordings, 4 bundles and 48 MCQs per band."""
    steps = yaml.safe_load((EXAMPLES / "chains" / "wagibench.yaml").read_text())["steps"]
    by = {s["name"]: s for s in steps}
    by["recordings"]["options"].update(
        participants=8, scripts_per_participant=8, repeats=2, longitudinal_share=0.5
    )
    # the bag-of-words fake cannot rank a one-word hint: the rank test is off (cue_rank_max)
    by["digital"]["options"] = {"n": 4, "persona_file": str(pool), "cue_rank_max": 10_000}
    by["mcqs"]["options"] = {"n": 48}  # the later ones have earlier recordings: history to show
    # 48 MCQs of a synthesized bank (repeated goals) have findings; reported, not failed, so that
    # a rerun finds the step finished
    by["audit_mcqs"]["options"] = {"fail_on": "never"}
    path.write_text(yaml.safe_dump({"steps": steps}))
    return path


def run_chain(out: Path, chain: Path, **cfg):
    settings = PipelineConfig(chain=str(chain), cache_dir=None, progress="off", **cfg)
    ctx = RunContext(NAME, settings, out).use(
        llm=scripted_llm(goal_script(), sampling=settings.llm), embedder=FakeEmbedder()
    )
    return run_config(NAME, settings, out, ctx=ctx, quiet=True), ctx


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chain")
    chain = small_chain(tmp / "chain.yaml", write_pool(tmp / "personas.jsonl"))
    result, _ = run_chain(tmp / "run", chain)
    return tmp, chain, result


def test_the_chain_runs_every_step(chain_run) -> None:
    tmp, _, result = chain_run
    steps = read_jsonl(tmp / "run" / "pipeline.jsonl")
    assert [s["step"] for s in steps] == [
        "recordings",
        "digital",
        "mcqs",
        "history",
        "audit_mcqs",
        "audit_history",
        "bank_mcqs",
        "bank_digital",
        "export",
    ]
    assert all(s["status"] == "ran" for s in steps) and result.exit_code == 0, steps
    audit_history = next(s for s in steps if s["step"] == "audit_history")
    assert audit_history["exit_code"] == 0  # the history bank keeps its own rules
    subruns = {s["path"] for s in result.manifest["subruns"]}
    assert {"recordings", "digital", "mcqs", "history", "export"} <= subruns
    m = json.loads((tmp / "run" / "digital" / "manifest.json").read_text())
    assert m["parent"] == str(tmp / "run")


@pytest.mark.skipif(
    not WAGIBENCH_LOADER.is_file(), reason="WAGIBench's loader (../shared/data/wagibench) is absent"
)
def test_wagibench_loader_joins_the_export(chain_run) -> None:
    """Every exported MCQ row joins its digital state (key-only or not) and its history."""
    tmp, _, _ = chain_run
    export = tmp / "run" / "export" / "wagibench"
    history = tmp / "run" / "history" / "longitudinal_history.json"
    load = wagibench_loader()
    files = sorted(export.glob("wagibench_mcq_*.json"))
    assert [f.name for f in files] == [
        "wagibench_mcq_dissimilar.json",
        "wagibench_mcq_similar.json",
    ]
    bundles = {
        b["goal"]["client_tag"]: b for b in read_jsonl(tmp / "run" / "digital" / "digital.jsonl")
    }
    assert bundles
    for mcq in files:
        rows = json.loads(mcq.read_text())
        joined = [r for r in rows if r["meta"]["client_tag"] in bundles]
        # a goal's MCQ carries its bundle's cue; an uncued or rejected goal's carries none
        assert all(
            any("digital" in c["modality"] for c in r["x"]["cues"])
            == bool(bundles.get(r["meta"]["client_tag"], {}).get("cue"))
            for r in rows
        )
        for key_only in ("0", "1"):
            out = io.StringIO()
            with redirect_stdout(out):
                data = load(
                    str(mcq),
                    str(export),
                    digital_state_path=str(export / "digital_state.json"),
                    longitudinal_history_path=str(history),
                    digital_key_only=key_only,
                )
            text = out.getvalue()
            assert f"Success counter (Digital) = {len(joined)}/{len(rows)}" in text, text
            assert f"Success counter (Longitudinal) = {len(rows)}/{len(rows)}" in text, text
            assert all(
                d["x"]["digital_state"]["digital_key_only"] is (key_only == "1")
                for d in data
                if d["x"]["digital_state"]
            )


@pytest.mark.skipif(
    not (WAGIBENCH_LOADER.is_file() and WAGIBENCH_MIXIN.is_file()),
    reason="WAGIBench's loader and prompt builder (../shared/data/wagibench) are absent",
)
def test_the_prompt_wagibench_builds_shows_every_past_action_and_no_script(chain_run) -> None:
    """WAGIBench's own load_ob2_data and build_prompt on the chain's export: every support's past
    action (its structured goal, each field) is in the text the model reads; no scenario id and no
    recording id is (the synthesized world states name no script)."""
    tmp, _, _ = chain_run
    export = tmp / "run" / "export" / "wagibench"
    history = tmp / "run" / "history" / "longitudinal_history.json"
    load, build = wagibench_loader(), wagibench_prompt()
    observations = read_jsonl(tmp / "run" / "recordings" / "observations.jsonl")
    # ids that cannot occur in prose by chance: multi-word scenario ids (one-word ones, "umbrella",
    # may be a goal's own word) and recording ids
    scenarios = {o["scenario"] for o in observations if "_" in o["scenario"]}
    tags = {o["client_tag"] for o in observations}
    assert len(scenarios) > 10
    shown = 0
    for mcq in sorted(export.glob("wagibench_mcq_*.json")):
        for key_only in ("0", "1"):
            with redirect_stdout(io.StringIO()):
                data = load(
                    str(mcq),
                    str(export),
                    digital_state_path=str(export / "digital_state.json"),
                    longitudinal_history_path=str(history),
                    digital_key_only=key_only,
                )
            for row in data:
                prompt = build(row, "mcq")
                supports = row["x"]["longitudinal_history"]
                for h in supports:
                    goal = h["structured_goal"]
                    assert all(str(v) in prompt for v in goal.values() if v), (goal, prompt)
                    assert f"'type': '{goal['type']}'" in prompt
                    shown += 1
                leaked = [s for s in scenarios | tags if s in prompt]
                assert not leaked, leaked
                assert ("Here are a list of the user's past actions" in prompt) == bool(supports)
                if key_only == "0" and row["x"]["digital_state"]:
                    assert "Current state of the user's Calendar app" in prompt
    assert shown > 0


CURRENT = "\nHere is a description of the user's current context: "
PAST = "\nHere are a list of the user's past actions"


@pytest.mark.skipif(
    not (WAGIBENCH_LOADER.is_file() and WAGIBENCH_MIXIN.is_file()),
    reason="WAGIBench's loader and prompt builder (../shared/data/wagibench) are absent",
)
def test_the_current_context_is_the_recording_not_its_digital_state(chain_run) -> None:
    """Issue 42.4: WAGIBench's own load_ob2_data and build_prompt on the chain's export. A test
    observation's current context (``world_state_ctx``, "a description of the user's current
    context") is its recording's caption and holds no digital cue text; each support shows its own
    caption and its past action; the digital state is printed once, as the digital context, and
    only for a row that has one."""
    tmp, _, _ = chain_run
    export = tmp / "run" / "export" / "wagibench"
    history = tmp / "run" / "history" / "longitudinal_history.json"
    load, build = wagibench_loader(), wagibench_prompt()
    captions = {
        o["client_tag"]: o["world_state"]
        for o in read_jsonl(tmp / "run" / "recordings" / "observations.jsonl")
    }
    bundles = read_jsonl(tmp / "run" / "digital" / "digital.jsonl")
    cues = [b["cue"]["cue"] for b in bundles if b.get("cue")]
    assert cues  # the chain made cued bundles: there is digital cue text to keep out
    digital = ("The current datetime is", "Current state of the user's", *cues)
    rows = shown_current = supports = 0
    for mcq in sorted(export.glob("wagibench_mcq_*.json")):
        with redirect_stdout(io.StringIO()):
            data = load(
                str(mcq),
                str(export),
                digital_state_path=str(export / "digital_state.json"),
                longitudinal_history_path=str(history),
            )
        for row in data:
            x = row["x"]
            assert x["world_state_ctx"] == [captions[row["meta"]["client_tag"]]]
            assert not [d for d in digital if d in json.dumps(x["world_state_ctx"])]
            prompt = build(row, "mcq")
            if CURRENT in prompt:
                current = prompt.split(CURRENT, 1)[1].split(PAST, 1)[0]
                assert current == str(x["world_state_ctx"])
                assert not [d for d in digital if d in current], current
                shown_current += 1
            for h in x["longitudinal_history"] or []:
                assert h["world_state"]["context"] == [captions[h["client_tag"]]]
                assert h["world_state"]["action"][0] in prompt
                assert not [d for d in digital if d in json.dumps(h["world_state"])]
                supports += 1
            assert prompt.count("The current datetime is") == bool(x["digital_state"])
            rows += 1
    assert rows and shown_current and supports


@pytest.mark.skipif(
    not WAGIBENCH_LOADER.is_file(),
    reason="WAGIBench's maestro_ob2.py (../shared/data/wagibench) is absent",
)
def test_wagibench_buckets_the_export_by_every_cue_modality(chain_run) -> None:
    """Their evaluate_ob2 (taken out of maestro_ob2.py with ast) on the exported rows: a
    longitudinal recording's row lands in the longitudinal bucket, a cued bundle's in the digital
    one."""
    import ast
    import logging
    import typing

    tmp, _, _ = chain_run
    tree = ast.parse(WAGIBENCH_LOADER.read_text(encoding="utf-8"))
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name == "evaluate_ob2")
        or (
            isinstance(n, ast.AnnAssign)
            and isinstance(n.target, ast.Name)
            and n.target.id in ("OPTIONS", "CONTEXT_WINDOW_LEN_BUCKET")
        )
    ]
    scope: dict[str, typing.Any] = {
        "logger": logging.getLogger("wagibench"),
        "Final": typing.Final,
        **{k: getattr(typing, k) for k in ("Dict", "List", "Any", "Optional")},
    }
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(WAGIBENCH_LOADER), "exec"), scope)
    longitudinal = {
        o["client_tag"]
        for o in read_jsonl(tmp / "run" / "recordings" / "observations.jsonl")
        if o["longitudinal"]
    }
    buckets: dict[str, int] = {}
    for mcq in sorted((tmp / "run" / "export" / "wagibench").glob("wagibench_mcq_*.json")):
        for row in json.loads(mcq.read_text()):
            out = scope["evaluate_ob2"]("ABCD"[row["y"]], row["y"], row["x"], row["meta"])
            assert out["correct"] is True
            assert ("correct_cueModality_longitudinal" in out) == (
                row["meta"]["client_tag"] in longitudinal
            )
            for k in out:
                buckets[k] = buckets.get(k, 0) + 1
    assert buckets.get("correct_cueModality_longitudinal") and buckets.get(
        "correct_cueModality_digital"
    )


def test_a_rerun_skips_finished_steps_and_resumes_the_interrupted_one(chain_run) -> None:
    tmp, chain, _ = chain_run
    before = {p: p.read_bytes() for p in (tmp / "run").rglob("*.jsonl")}
    again, _ = run_chain(tmp / "run", chain)
    steps = read_jsonl(tmp / "run" / "pipeline.jsonl")
    assert {s["status"] for s in steps} == {"skipped"} and again.exit_code == 0
    (tmp / "run" / "history" / "manifest.json").unlink()  # as if killed before it finished
    third, _ = run_chain(tmp / "run", chain)
    status = {s["step"]: s["status"] for s in read_jsonl(tmp / "run" / "pipeline.jsonl")}
    assert (
        status["history"] == "ran" and status["mcqs"] == "skipped" and status["export"] == "skipped"
    )
    after = {p: p.read_bytes() for p in (tmp / "run").rglob("*.jsonl") if p in before}
    assert after == {p: b for p, b in before.items() if p.name != "pipeline.jsonl"} | {
        tmp / "run" / "pipeline.jsonl": after[tmp / "run" / "pipeline.jsonl"]
    }


def test_every_step_is_validated_before_the_first_runs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "steps": [
                    {"name": "a", "generator": "history", "options": {"synthesize": True}},
                    {
                        "name": "b",
                        "generator": "distractors",
                        "options": {"bands": {"x": [9, 1]}},
                        "inputs": {"input": "a/goals.jsonl"},
                    },
                ]
            }
        )
    )
    with pytest.raises(
        ConfigError, match=r"bad.yaml: step b \(distractors\): invalid value for bands"
    ):
        plan(PipelineConfig(chain=str(bad)))
    bad.write_text(
        yaml.safe_dump({"steps": [{"name": "a", "generator": "history", "inputs": {"input": "z"}}]})
    )
    with pytest.raises(InputError, match=r"steps.0 \(a\): inputs.input: 'z' names no earlier step"):
        plan(PipelineConfig(chain=str(bad)))
    bad.write_text(yaml.safe_dump({"steps": [{"name": "a", "generator": "nope"}]}))
    with pytest.raises(InputError, match="unknown generator 'nope'"):
        plan(PipelineConfig(chain=str(bad)))
    with pytest.raises(ConfigError, match="no chain 'nosuch'"):
        plan(PipelineConfig(chain="nosuch"))
    with pytest.raises(
        ConfigError, match="leaves its folder"
    ):  # a shipped chain's name stays in examples/chains/
        plan(PipelineConfig(chain="a\\b"))
    assert plan(PipelineConfig()).n == 9  # the shipped chain validates
