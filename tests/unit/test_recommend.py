"""``recommend``: the proactive recommendation pipeline's global path (EgoIntrospect B.2). The
stage-1 gating and the scene it inherits, each request check on planted cases, and a run with a
scripted writer: the previous segment's summary carried forward, the rerank applied, refusals
typed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import check_run_folder, read_jsonl
from fakes import FakeEmbedder
from scripted import writer

from gen.generators.recommend import (
    RecommendConfig,
    copies_input,
    nouns,
    plan,
    request_problem,
    scene_of,
    segments,
)
from gen.llm import scripted_llm
from gen.paths import EXAMPLES
from gen.runner import RunContext, run
from gen.schemas.recommend import CATEGORIES, RecommendSession

NAME = "recommend"
SESSIONS = EXAMPLES / "recommend" / "sessions.jsonl"


def cfg(**kw: Any) -> RecommendConfig:
    return RecommendConfig(**{"input": str(SESSIONS), "cache_dir": None, "progress": "off", **kw})


def session(**kw: Any) -> RecommendSession:
    row = {
        "session_id": "s",
        "duration": 1000,
        "timeline": [{"t": 10.0, "text": "x"}],
        "forbidden": [
            {"start": 250, "end": 400},
            {"start": 390, "end": 420},
            {"start": 905, "end": 2000},
        ],
        "scenes": [
            {"start": 0, "end": 500, "context": "a market"},
            {"start": 500, "end": 1000, "context": "a park"},
        ],
    }
    return RecommendSession.model_validate({**row, **kw})


def test_stage_1_gating_and_the_inherited_scene() -> None:
    s = session()
    assert segments(s, cfg()) == [(0, 250), (420, 720), (720, 905)]
    assert segments(s, cfg(max_segment=100, min_segment=60))[-2:] == [(720, 820), (820, 905)]
    assert scene_of(s, (420, 720)) == "a park"  # 220 s of park, 80 of market
    assert scene_of(s, (0, 250)) == "a market" and scene_of(session(scenes=[]), (0, 10)) is None
    assert plan(cfg()).n == 7


def test_each_request_check_on_planted_cases() -> None:
    grounding = nouns("The wearer compares two jars of tomato sauce next to the pasta shelf.")
    c = cfg()
    ok = "Which of these sauces has less sugar?"
    assert request_problem(ok, grounding, set(), c) is None
    assert request_problem("Tell me a joke about cats.", grounding, set(), c) == "ungrounded"
    assert (
        request_problem("The user wants a sauce recipe.", grounding, set(), c) == "not_first_person"
    )
    assert (
        request_problem("Would you like a sauce recipe?", grounding, set(), c) == "not_first_person"
    )
    assert request_problem("Your sauce is on the shelf.", grounding, set(), c) == "not_first_person"
    assert (
        request_problem("The sauce will be cheaper tomorrow.", grounding, set(), c)
        == "not_first_person"
    )
    assert (
        request_problem("Compare the sugar in these two sauces.", grounding, set(), c) is None
    )  # an order
    assert request_problem("Remind me to buy pasta.", grounding, set(), c) is None
    assert (
        request_problem("The sauce is on offer. What about the pasta?", grounding, set(), c)
        == "not_first_person"
    )
    assert (
        request_problem("I have pasta at home. Which sauce goes with it?", grounding, set(), c)
        is None
    )
    assert copies_input(
        "Project manager, 34, likes short suggestions.",
        ["", "Project manager, 34, likes short suggestions."],
    )
    assert not copies_input("The wearer compares two sauces.", ["a supermarket", "41, cooks"])
    long = (
        "Find me a tomato sauce recipe that my two young children would eat without complaining "
        "and that takes under twenty minutes on a weekday evening."
    )
    assert request_problem(long, grounding, set(), c) == "too_long"
    assert (
        request_problem(ok, grounding, {"which of these sauces has less sugar"}, c) == "duplicate"
    )
    assert request_problem("sauce sauce sauce sauce sauce", grounding, set(), c) == "text_gates"


def run_recommend(out: Path, reply: Any, **kw: Any) -> tuple[Any, RunContext]:
    c = cfg(**kw)
    ctx = RunContext(NAME, c, out).use(llm=scripted_llm(reply), embedder=FakeEmbedder())
    return run(NAME, c, out, ctx=ctx, quiet=True), ctx


def test_a_run_on_the_example_carries_summaries_and_reranks(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result, ctx = run_recommend(out, writer(), min_candidates=3)
    check_run_folder(out, NAME, 7, hydra=False)
    recs = read_jsonl(out / "recommend.jsonl")
    assert result.accepted == 7 and len(recs) == 7
    first, second = recs[0], recs[1]
    assert first["previous_summary"] is None and second["previous_summary"] == first["summary"]
    assert recs[4]["previous_summary"] is None  # a new session starts without one
    assert first["scene_context"].startswith("an indoor food market")
    for r in recs:
        assert [c["id"] for c in r["ranked"]] == list(range(1, len(r["ranked"]) + 1))
        assert {c["source"] for c in r["ranked"]} == {"global"}
        assert {c["category"] for c in r["candidates"]} <= set(CATEGORIES)
    # the prompt holds what the paper's global generator is given
    prompt = next(
        c["messages"][-1]["content"]
        for c in ctx.llm.calls
        if "Before this:" in c["messages"][-1]["content"]
    )
    assert "Wearer: 28, loves cooking" in prompt and "Scene: an indoor food market" in prompt
    f = result.manifest[NAME]["funnel"]
    assert f["records"] == 7 and f["after_rerank"] == sum(len(r["ranked"]) for r in recs)


def test_a_segment_whose_requests_fail_the_checks_is_refused_by_the_dominant_check(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    result, _ = run_recommend(out, writer({"ungrounded": True}), min_candidates=3, attempts=2, n=2)
    assert result.rejected == 2
    rejects = read_jsonl(out / "rejects.jsonl")
    assert {(r["stage"], r["reason"]) for r in rejects} == {("checks", "ungrounded")}
    assert (
        result.manifest["validators"]["turned_away.ungrounded"] == 2 * 2 * 7
    )  # 2 drafts x 2 segments x 7


def test_reader_names_bad_lines(tmp_path: Path) -> None:
    from gen.errors import InputError

    good = json.loads(SESSIONS.read_text().splitlines()[0])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**good, "forbidden": [{"start": 5, "end": 1}]}) + "\n")
    with pytest.raises(
        InputError, match=r"bad.jsonl:1: forbidden.0: Value error, end must be >= start"
    ):
        plan(cfg(input=str(bad)))


def test_the_embedding_dedup_is_measured_beside_the_rerankers(tmp_path: Path) -> None:
    """A reranker that calls every request a duplicate of the first (as SmolLM2-135M does): only
    the calls the embedder confirms remove a request (before: a pool of one whatever the
    embedder said); the embedding's verdict on each pair is recorded beside the reranker's, so the
    funnel shows the pairs only the reranker called the same."""
    # the writer's requests share all words but one ("Tell me something useful about the X
    # here."): the bag-of-words fake puts each pair at 6/7 = 0.86
    out = tmp_path / "strict"
    writes = writer({"all_duplicates": True})
    result, _ = run_recommend(out, writes, min_candidates=3, n=1, confirm_similarity=0.9)
    (rec,) = read_jsonl(out / "recommend.jsonl")
    n = len(rec["candidates"])
    assert rec["removed"] == [] and len(rec["ranked"]) == n
    assert rec["unconfirmed_duplicates"] == [[str(i), "1"] for i in range(2, n + 1)]
    a = rec["dedup_agreement"]
    assert (
        a["both"] + a["llm_only"] == n * (n - 1) // 2 and a["embedding_only"] == a["neither"] == 0
    )
    f = result.manifest[NAME]["funnel"]
    assert f["dedup_agreement"]["pairs"] == n * (n - 1) // 2
    assert f["dedup_agreement"]["llm_only"] == a["llm_only"]
    assert f["duplicates_unconfirmed"] == n - 1 and f["duplicates_removed"] == 0
    out = tmp_path / "default"  # confirm_similarity=0.75: the fake confirms every call
    run_recommend(out, writes, min_candidates=3, n=1)
    (rec,) = read_jsonl(out / "recommend.jsonl")
    assert len(rec["ranked"]) == 1 and len(rec["removed"]) == n - 1
    assert rec["unconfirmed_duplicates"] == []
