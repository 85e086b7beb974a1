"""``python -m gen tom`` with the real embedded GGUF and the real embedding model, on 2 clips
of the project's fixture and 2 clips of the EgoToM paper data (skipped when absent). Asserts
structure and accounting, never prose: every clip ends as questions or as rejects with reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gen.formats.mcq import EGOTOM_QUESTION, egotom_columns
from gen.kinds.mcq import load_banks
from gen.schemas.tom import TomQuestion

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tom" / "narration.json"
EGOTOM = Path(__file__).resolve().parents[3] / "shared" / "data" / "egotom_paper"
STAGES = {
    "parse",
    "select",
    "analysis",
    "filter.time_window",
    "counterfactual_goals",
    "counterfactual_beliefs_actions",
    "simplify",
    "filter.keyword",
    "filter.length",
    "filter.similarity",
}
# Small caps keep the run to a few minutes on a loaded 2-core machine: one generation per
# stage, two tries inside it.
FAST = ["attempts=1", "llm.attempts=2", "progress=off"]


def check_clips_accounted(folder: Path, n: int, read_jsonl) -> dict[str, Any]:
    records = read_jsonl(folder / "tom.jsonl")
    rejects = read_jsonl(folder / "rejects.jsonl")
    manifest = json.loads((folder / "manifest.json").read_text())
    done: dict[int, list[str]] = {}
    for r in rejects:
        assert r["stage"] in STAGES and r["reason"] and r["detail"].startswith("clip ")
        done.setdefault(r["index"], []).append(r["stage"])
    clips_with_questions = {r["clip_id"] for r in records}
    for rec in records:
        q = TomQuestion.model_validate(rec)
        assert q.question == EGOTOM_QUESTION[q.question_type]
        assert q.options[q.answer] == q.privileged["truth"][q.question_type]
        assert len(q.options) == (3 if q.question_type == "goal" else 4)
        context = q.visible["context"]
        assert all(f.strip() not in context for f in q.privileged["future"].split("\n"))
    # every clip index gave questions, or rejects (a clip-level one, or one per question type)
    rows = {r["step"]: r for r in manifest["funnel"]["steps"]}
    assert rows["clips in"]["goal"] == n
    for q in ("goal", "belief", "actions"):
        made = sum(1 for r in records if r["question_type"] == q)
        assert rows["similarity filter"][q] == made
        dropped = sum(1 for r in rejects if f", {q} question:" in r["detail"])
        clip_level = sum(1 for r in rejects if ", " not in r["detail"].split(":")[0])
        assert made + dropped + clip_level == n, (q, made, dropped, clip_level)
    assert len(done) + len(clips_with_questions) >= n
    for q in ("goal", "belief", "actions"):
        df = pl.read_csv(folder / f"egotom_{q}_shuffled.csv", infer_schema_length=0)
        assert df.columns == egotom_columns(q)
        assert df.height == sum(1 for r in records if r["question_type"] == q)
    if records:
        assert len(load_banks(folder)[0].items) == len(records)
    return manifest


def test_fixture_clips_with_the_embedded_model(
    tmp_path: Path, run_gen, check_run_folder, read_jsonl
) -> None:
    out = tmp_path / "run"
    proc = run_gen("tom", f"input={FIXTURE}", "n=2", *FAST, f"hydra.run.dir={out}", timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = check_run_folder(out, "tom", 2, one_per_index=False)
    check_clips_accounted(out, 2, read_jsonl)
    assert m["llm"]["backend"] == "llama_cpp" and m["llm_usage"]["calls"] >= 2
    assert m["embedder"] is None or m["embedder"]["model"]


@pytest.mark.skipif(
    not EGOTOM.is_dir(), reason="EgoToM paper data (../shared/data/egotom_paper) not present"
)
def test_egotom_clips_with_the_embedded_model(
    tmp_path: Path, run_gen, check_run_folder, read_jsonl
) -> None:
    # the two shortest contexts of the goal file that have lines in the default time window,
    # written to a temporary CSV (the data stays out of the repository)
    df = pl.read_csv(EGOTOM / "egotom_goal_shuffled.csv", infer_schema_length=0)
    df = df.with_columns(pl.col("narrations_in_context").str.count_matches("\n").alias("_n"))
    df = (
        df.filter(pl.col("narrations_in_context").str.contains(r"0[34]m:\d\ds \|"))
        .sort("_n")
        .head(2)
        .drop("_n")
    )
    src = tmp_path / "egotom_goal_shuffled.csv"
    df.write_csv(src)
    out = tmp_path / "run"
    proc = run_gen("tom", f"input={src}", *FAST, f"hydra.run.dir={out}", timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = check_run_folder(out, "tom", 2, one_per_index=False)
    check_clips_accounted(out, 2, read_jsonl)
    assert m["funnel"]["selection"]["rules_not_applicable"] == {"duration": 2, "lines": 2}
