"""The guides whose runs need real sentence vectors, run as the page shows them with gen's own
embedder (all-MiniLM-L6-v2): a bank's batches are audited before they are added, and the audit's
tells are measured on real distractors (a bag-of-words fake makes distractors with tells of its
own, which the audit rightly refuses). No LLM is called: the commands make distractor MCQs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from guides import DOCS, Page, run_page

GUIDES = DOCS / "guides"


def test_the_bank_guide_grows_verifies_and_releases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = GUIDES / "bank.md"
    ran = run_page(page, tmp_path, monkeypatch, Page(embedder="real"))
    assert sum(1 for line, _ in ran if "bank add" in line) == 3
    bank = tmp_path / "banks" / "egoqa"
    assert sorted(p.name for p in (bank / "versions").iterdir()) == ["v0001", "v0002"]
    assert (bank / "current").resolve().name == "v0002"
    for name in ("distractors.parquet", "MANIFEST.lock.json", "CHANGELOG.md", "audit"):
        assert (bank / "versions" / "v0001" / name).exists(), name
    assert (tmp_path / "release" / "hf" / "README.md").is_file()
    assert list((tmp_path / "release" / "lm_eval").glob("egoqa_v0002*.yaml"))
    assert (tmp_path / "release" / "inspect" / "task.py").is_file()


def fake_reviewer(argv: list[str], cwd: Path) -> int:
    """What a reviewer does in the page, as its label file: ana accepts every item, ben rejects
    every third."""
    from gen.formats.labels import append_label
    from gen.generators.review import ReviewConfig, plan
    from gen.schemas.review import ReviewLabel

    opts = dict(a.split("=", 1) for a in argv[1:])
    folder = cwd / opts["input"]
    items = plan(
        ReviewConfig(input=str(folder), reviewer=opts["reviewer"], cache_dir=None)
    ).data.items
    for i, it in enumerate(items):
        decision = "reject" if opts["reviewer"] == "ben" and i % 3 == 0 else "accept"
        append_label(
            folder,
            ReviewLabel(
                item_id=it.item_id,
                reviewer=opts["reviewer"],
                time="2026-01-01T00:00:00Z",
                rubric="mcq-egotom",
                decision=decision,
            ),
        )
    return 0


def test_the_review_guide_rates_agrees_and_admits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = GUIDES / "review.md"
    run_page(page, tmp_path, monkeypatch, Page(embedder="real", instead={"review": fake_reviewer}))
    reviews = tmp_path / "runs" / "mcqs" / "reviews"
    assert sorted(p.name for p in reviews.glob("*.jsonl")) == ["ana.jsonl", "ben.jsonl"]
    summary = json.loads((reviews / "summary.json").read_text())
    assert summary["per_reviewer"]["ben"]["reject"] > 0 and (reviews / "summary.md").is_file()
    import polars as pl

    n_items = sum(1 for _ in (tmp_path / "runs" / "mcqs" / "distractors.jsonl").open())
    admitted = pl.read_parquet(
        tmp_path / "banks" / "reviewed" / "current" / "distractors.parquet"
    ).height
    assert n_items == 80 and admitted == n_items - len(
        range(0, n_items, 3)
    )  # what ben rejected stays out
