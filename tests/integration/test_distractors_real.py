"""``python -m gen distractors`` on the shipped example bank with the real embedding model
(all-MiniLM-L6-v2): the run folder reconciles, the bands mean something with real sentence
embeddings, and the embedding cache makes a rerun or a grown bank embed only new text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gen.kinds.mcq import load_banks
from gen.paths import EXAMPLES
from gen.schemas.distractors import DistractorMCQ

NAME = "distractors"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, runner_for) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("distractors_real")
    run_gen = runner_for(tmp, tmp / "cache")
    lines = (EXAMPLES / "goals.jsonl").read_text(encoding="utf-8").splitlines()
    grown = tmp / "grown.jsonl"
    extra = [
        {
            "goal_id": f"new{k}",
            "group": f"new{k}",
            "goal": {"type": "shop", "content": f"{k} packs of AA batteries"},
        }
        for k in range(5)
    ]
    grown.write_text("\n".join(lines + [json.dumps(e) for e in extra]) + "\n", encoding="utf-8")
    out = {}
    for name, args in (("first", []), ("again", []), ("grown", [f"input={grown}"])):
        proc = run_gen(NAME, *args, f"hydra.run.dir={tmp / name}", timeout=900)
        assert proc.returncode == 0, proc.stderr
        out[name] = tmp / name
    return out


def records(folder: Path) -> list[DistractorMCQ]:
    return [
        DistractorMCQ.model_validate_json(x)
        for x in (folder / f"{NAME}.jsonl").read_text().splitlines()
    ]


def test_run_folder_reconciles(runs: dict[str, Path], check_run_folder) -> None:
    n = sum(1 for x in (EXAMPLES / "goals.jsonl").read_text().splitlines() if x.strip())
    manifest = check_run_folder(runs["first"], NAME, n, one_per_index=False)
    assert manifest["counts"]["accepted"] + manifest["counts"]["rejected"] == 2 * n
    assert manifest["embedder"]["model"] and manifest[NAME]["mode"] == "exact"
    assert manifest[NAME]["bank"]["dim"] == 384
    for kind in ("similar", "dissimilar"):
        rows = json.loads((runs["first"] / f"wagibench_mcq_{kind}.json").read_text())
        assert len(rows) == sum(r.question_type == kind for r in records(runs["first"]))
    (bank,) = load_banks(runs["first"])
    assert len(bank.items) == manifest["counts"]["accepted"]


def test_bands_with_real_embeddings(runs: dict[str, Path]) -> None:
    recs = records(runs["first"])
    sim = [d for r in recs if r.question_type == "similar" for d in r.distractors]
    dis = [d for r in recs if r.question_type == "dissimilar" for d in r.distractors]
    assert min(d.percentile for d in sim) >= 95 and max(d.percentile for d in sim) <= 99
    assert max(d.percentile for d in dis) <= 80
    assert np.mean([d.similarity for d in sim]) > np.mean([d.similarity for d in dis]) + 0.2

    # similar distractors mostly share the reference's action type; dissimilar ones rarely do
    def same_type(kind: str) -> float:
        hits = [
            d.text.split()[0] == r.options[r.answer].split()[0]
            for r in recs
            if r.question_type == kind
            for d in r.distractors
        ]
        return float(np.mean(hits))

    assert same_type("similar") > 2 * same_type("dissimilar")
    # the paper's pool: a script's other goals may come back as fine-grained distractors, but no
    # option is the answer again in other case or spacing (the bank has such variants)
    assert any(d.group == r.group for r in recs for d in r.distractors)
    for r in recs:
        assert len({" ".join(o.casefold().split()) for o in r.options}) == len(r.options)


def test_embedding_cache_on_rerun_and_grown_bank(runs: dict[str, Path]) -> None:
    first, again, grown = (
        json.loads((runs[k] / "manifest.json").read_text()) for k in ("first", "again", "grown")
    )
    distinct = first[NAME]["bank"]["distinct_texts"]
    assert first["embedder"]["computed"] + first["embedder"]["cache_hits"] == distinct
    assert again["embedder"]["computed"] == 0 and again["embedder"]["cache_hits"] == distinct
    assert grown["embedder"]["computed"] == 5
    assert first["outputs"][f"{NAME}.jsonl"] == again["outputs"][f"{NAME}.jsonl"]
