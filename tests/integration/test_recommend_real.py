"""``recommend`` with the real models: the example sessions through the embedded SmolLM2 (one
segment: every request checked, the rerank, the funnel), and all seven segments through the unit
tests' scripted writer with the real all-MiniLM-L6-v2 beside it; then ``audit`` (integrity: a
recommendation is a pool, not a question) and ``bank add``, which refuses the kind by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import check_run_folder, read_jsonl
from scripted import writer

from gen.engine.runner import RunContext, run_config
from gen.errors import InputError
from gen.generators.audit import AuditConfig
from gen.generators.bank import BankConfig
from gen.generators.recommend import RecommendConfig
from gen.llm import scripted_llm
from gen.llm.embed import Embedder, EmbedderConfig
from gen.paths import EXAMPLES
from gen.schemas.recommend import CATEGORIES

NAME = "recommend"
SESSIONS = EXAMPLES / "recommend" / "sessions.jsonl"


def cfg(**kw: Any) -> RecommendConfig:
    return RecommendConfig(**{"input": str(SESSIONS), "cache_dir": None, "progress": "off", **kw})


def check_records(out: Path, manifest: dict) -> dict:
    """Each record's pool, ranking and funnel agree; the funnel's refusals are the rejects."""
    f = manifest[NAME]["funnel"]
    recs = read_jsonl(out / f"{NAME}.jsonl")
    rejects = read_jsonl(out / "rejects.jsonl")
    assert f["segments"] == len(recs) + len(rejects) and f["records"] == len(recs)
    assert sum(f["rejected_by"].values()) == len(rejects)
    assert f["after_rerank"] == sum(len(r["ranked"]) for r in recs)
    for r in recs:
        assert [c["id"] for c in r["ranked"]] == list(range(1, len(r["ranked"]) + 1))
        assert len(r["ranked"]) + len(r["removed"]) == len(r["candidates"])
        assert {c["category"] for c in r["candidates"]} <= set(CATEGORIES)
    return f


def test_one_segment_with_the_embedded_model(tmp_path: Path, run_gen) -> None:
    out = tmp_path / "run"
    proc = run_gen(
        NAME,
        f"input={SESSIONS}",
        "n=1",
        "attempts=1",
        "draft_tokens=450",  # a draft of SmolLM2 is ~300 tokens; keeps the test to minutes
        "rerank_tokens=450",
        "progress=off",
        f"hydra.run.dir={out}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = check_run_folder(out, NAME, 1)
    assert m["llm"]["backend"] == "llama_cpp" and m["llm_usage"]["calls"] >= 1
    f = check_records(out, m)
    for r in read_jsonl(out / "rejects.jsonl"):
        assert r["reason"] and r["stage"] in ("segment", "global", "checks", "rerank"), r
    assert f["records"] + sum(f["rejected_by"].values()) == 1


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    return Embedder(EmbedderConfig(), cache_dir=str(tmp_path_factory.mktemp("emb")))


def test_the_example_audited_and_refused_by_the_bank(tmp_path: Path, minilm: Embedder) -> None:
    out = tmp_path / "run"
    c = cfg()
    ctx = RunContext(NAME, c, out).use(llm=scripted_llm(writer()), embedder=minilm)
    result = run_config(NAME, c, out, ctx=ctx, quiet=True)
    m = check_run_folder(out, NAME, 7, hydra=False)
    f = check_records(out, m)
    assert result.accepted == 7 and f["dedup_agreement"]["pairs"] >= 7
    a = AuditConfig(input=str(out), cache_dir=None, progress="off")
    audited = run_config(
        "audit",
        a,
        tmp_path / "a",
        ctx=RunContext("audit", a, tmp_path / "a").use(embedder=minilm),
        quiet=True,
    )
    assert audited.exit_code == 0 and read_jsonl(tmp_path / "a" / "audit.jsonl") == []
    b = BankConfig(action="add", bank=str(tmp_path / "bank"), input=str(out), cache_dir=None)
    with pytest.raises(InputError, match="is a recommend run; its records .recommendations."):
        run_config("bank", b, tmp_path / "b", ctx=RunContext("bank", b, tmp_path / "b"), quiet=True)
