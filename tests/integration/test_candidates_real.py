"""``python -m gen candidates`` and ``rerank`` with the real embedded GGUF and embedding model: two
temporal-grounding items cut from the EgoToM paper's action timelines
(``../shared/data/egotom_paper``; skipped when absent), and the example pool. Asserts structure and
accounting, never prose: every item ends as a record or a reject with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.kinds.mcq import load_banks
from gen.paths import EXAMPLES
from gen.schemas.candidates import CandidateRecord
from gen.schemas.rerank import RerankRecord

EGOTOM = Path(__file__).resolve().parents[3] / "shared" / "data" / "egotom_paper"
# The tom fixtures repeat their narrations (a positive's text must occur once in its clip): the
# Ego4D one gives a single item, so the two items come from the real EgoToM timelines.
STAGES = {"input", "generated", "rerank"}


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="../shared/data/egotom_paper is not present")
def test_two_timeline_items_with_the_embedded_model(
    tmp_path: Path, run_gen, check_run_folder, read_jsonl
) -> None:
    out = tmp_path / "run"
    proc = run_gen(
        "candidates",
        f"input={EGOTOM / 'egotom_actions_shuffled.csv'}",
        "n=2",
        "llm.attempts=2",
        "progress=off",
        f"hydra.run.dir={out}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = check_run_folder(out, "candidates", 2)
    assert (
        m["llm"]["backend"] == "llama_cpp"
        and m["llm_usage"]["calls"] >= 1
        and m["embedder"]["model"]
    )
    funnel = {r["step"]: r["items"] for r in m["candidates"]["funnel"]}
    records = read_jsonl(out / "candidates.jsonl")
    rejects = read_jsonl(out / "rejects.jsonl")
    assert funnel["items in"] == 2 and funnel["records"] == len(records)
    for r in rejects:
        assert r["stage"] in STAGES and r["reason"] and r["detail"].startswith("item ")
    for raw in records:
        rec = CandidateRecord.model_validate(raw)
        assert (
            len(rec.options) == 4 == len(set(rec.options)) and rec.origins[rec.answer] == "positive"
        )
        assert rec.origins.count("generated") == 3
        times = rec.privileged["option_times"]
        assert set(times) == {"0", "1", "2", "3"}
        context = rec.visible["context"]
        assert rec.privileged["positive"] not in context
        assert all(src not in context for src in rec.privileged["sources"].values())
    if records:
        assert len(load_banks(out)[0].items) == len(records)


def test_the_example_pool_is_reranked_or_rejected_with_the_difference(
    tmp_path: Path, run_gen, check_run_folder, read_jsonl
) -> None:
    out = tmp_path / "run"
    proc = run_gen(
        "rerank",
        f"input={EXAMPLES / 'rerank' / 'pools.jsonl'}",
        "progress=off",
        f"hydra.run.dir={out}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = check_run_folder(out, "rerank", 1)
    for raw in read_jsonl(out / "rerank.jsonl"):
        rec = RerankRecord.model_validate(raw)
        assert sorted(rec.order) == ["1", "2", "3", "4", "5"]
        assert [c.id for c in rec.ranked] == list(range(1, len(rec.ranked) + 1))
        assert len(rec.ranked) + len(rec.removed) == 5
        assert sum(rec.agreement.values()) == 10
        # MiniLM puts only the two pasta timers (0.94) above confirm_similarity=0.75: whatever the
        # tiny model calls a duplicate, no other candidate is removed
        assert all({r["input_id"], r["duplicate_of"]} == {"1", "2"} for r in rec.removed)
        assert len(rec.ranked) >= 4
    for r in read_jsonl(out / "rejects.jsonl"):
        assert r["stage"] == "rerank" and r["reason"]
    assert m["rerank"]["agreement"]["pairs"] in (0, 10)
