"""``recommend``: the proactive recommendation pipeline's global path (EgoIntrospect B.2). The
stage-1 gating and the scene it inherits, each request flag on planted cases, and runs with a
scripted writer: the previous segment's summary carried forward, every request kept through the
rerank (ungrounded last), every marked duplicate removed, refusals typed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import check_run_folder, read_jsonl
from fakes import FakeEmbedder
from scripted import writer

from gen.engine.runner import RunContext, run_config
from gen.generators.recommend import (
    RecommendConfig,
    copies_input,
    nouns,
    plan,
    request_flags,
    scene_of,
    segments,
)
from gen.llm import scripted_llm
from gen.paths import EXAMPLES
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


def test_each_request_flag_on_planted_cases() -> None:
    grounding = nouns("The wearer compares two jars of tomato sauce next to the pasta shelf.")
    c = cfg()

    def flags(text: str) -> list[str]:
        return request_flags(text, grounding, c)

    ok = "Which of these sauces has less sugar?"
    assert flags(ok) == []
    assert flags("Tell me a joke about cats.") == ["no_shared_noun"]
    assert flags("The user wants a sauce recipe.") == ["not_first_person"]
    assert flags("Would you like a sauce recipe?") == ["not_first_person"]
    assert flags("Your sauce is on the shelf.") == ["not_first_person"]
    assert flags("The sauce will be cheaper tomorrow.") == ["not_first_person"]
    assert flags("Compare the sugar in these two sauces.") == []  # an order
    assert flags("Remind me to buy pasta.") == []
    assert flags("The sauce is on offer. What about the pasta?") == ["not_first_person"]
    assert flags("I have pasta at home. Which sauce goes with it?") == []
    assert copies_input(
        "Project manager, 34, likes short suggestions.",
        ["", "Project manager, 34, likes short suggestions."],
    )
    assert not copies_input("The wearer compares two sauces.", ["a supermarket", "41, cooks"])
    long = (
        "Find me a tomato sauce recipe that my two young children would eat without complaining "
        "and that takes under twenty minutes on a weekday evening."
    )
    assert flags(long) == ["too_long"]
    assert flags(
        "The user should tell a long joke about the penguins of the south pole and "
        "their many friends at the zoo."
    ) == ["too_long", "not_first_person", "no_shared_noun"]


def run_recommend(out: Path, reply: Any, **kw: Any) -> tuple[Any, RunContext]:
    c = cfg(**kw)
    ctx = RunContext(NAME, c, out).use(llm=scripted_llm(reply), embedder=FakeEmbedder())
    return run_config(NAME, c, out, ctx=ctx, quiet=True), ctx


def test_a_run_on_the_example_carries_summaries_and_reranks(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result, ctx = run_recommend(out, writer())
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


JOKE = "Tell me a joke about penguins."
THIRD = "The user wants to hear about the weather tomorrow."
ORDINALS = "first second third fourth fifth sixth seventh eighth ninth".split()
SLOWLY = " and then tell me all about it again in even more detail, slowly."


def planted(faults: dict[str, Any] | None = None) -> Any:
    """The shared writer, with planted requests (B.2 drops none of them before the rerank) and a
    reranker that reverses the pool, calls the long request a duplicate of the third-person one
    (the bag-of-words embedder puts them far apart) and marks the last request ungrounded."""
    base = writer(faults)

    def reply(messages: list[dict[str, str]], seed: int) -> str:
        req = messages[-1]["content"]
        if "Candidates, numbered:" in req:
            texts = re.findall(
                r"^(\d+)\. (?:\[[^\]]*\] )?(.*)$", req.rsplit("Candidates, numbered:", 1)[1], re.M
            )
            ids = {t: int(i) for i, t in reversed(texts)}
            ranking = [
                {
                    "id": int(i),
                    "text": t,
                    "duplicate_of": ids[THIRD] if t.endswith(SLOWLY) else None,
                    "grounded": int(i) != len(texts),
                }
                for i, t in reversed(texts)
            ]
            return json.dumps({"ranking": ranking, "reason": "the pool reversed"})
        draft = json.loads(base(messages, seed))
        seen: set[str] = set()
        for j, cat in enumerate(CATEGORIES):  # the writer repeats itself on a short clip
            t = draft[cat][0]
            if t in seen:
                draft[cat] = [t.replace("something useful", f"a {ORDINALS[j]} useful thing")]
            seen.add(draft[cat][0])
        first = draft["object_identification"][0]
        long = first.rstrip(".") + SLOWLY
        draft["object_identification"] = [first, JOKE]
        draft["text_and_audio"] = [long]
        draft["procedural_guidance"] = [THIRD]
        draft["decision_support"] = [first]  # the same words as the first request
        return json.dumps(draft)

    return reply


def test_every_request_is_kept_through_the_rerank_and_every_marked_duplicate_removed(
    tmp_path: Path,
) -> None:
    """B.2 (stages 6-7) on the example: the pool is every request the global generator wrote (the
    long one, the third-person one, the ungrounded one, the repeat); the reranker's order is kept
    with ungrounded requests last (its own mark, and the joke that names nothing of the clip);
    every duplicate it marks is removed, whatever the embedder says, and so is the repeat."""
    out = tmp_path / "run"
    reply = planted()
    result, ctx = run_recommend(out, reply)
    recs = read_jsonl(out / "recommend.jsonl")
    assert result.accepted == 7 and result.rejected == 0
    drafts = {
        d["summary"]: d
        for c in ctx.llm.calls
        if "Candidates, numbered:" not in c["messages"][-1]["content"]
        for d in [json.loads(reply(c["messages"], 0))]
    }
    assert len(drafts) == 7
    shown_last = 0
    for rec in recs:
        draft = drafts[rec["summary"]]
        wrote = [" ".join(t.split()) for cat in CATEGORIES for t in draft[cat]]
        pool = [c["text"] for c in rec["candidates"]]
        assert pool == wrote and rec["turned_away"] == []  # every request pooled
        by_text = {c["text"]: c for c in rec["candidates"]}
        assert "no_shared_noun" in by_text[JOKE]["flags"]
        assert "not_first_person" in by_text[THIRD]["flags"]
        assert any("too_long" in c["flags"] for c in rec["candidates"])
        assert sum("repeats" in c["flags"] for c in rec["candidates"]) == 1
        ids = {c["text"]: str(c["id"]) for c in rec["candidates"]}
        long = next(str(c["id"]) for c in rec["candidates"] if c["text"].endswith(SLOWLY))
        n = len(pool)
        repeat_id = str(pool.index(pool[0], 1) + 1)
        # the reversed order ranks the repeat above the first and the third-person request above
        # the long one: those two stay
        removed = {(r["input_id"], r["duplicate_of"]) for r in rec["removed"]}
        assert removed == {(long, ids[THIRD]), ("1", repeat_id)}
        order = [str(i) for i in range(n, 0, -1) if str(i) not in {long, "1"}]
        ungrounded = {str(n)} | {
            str(c["id"]) for c in rec["candidates"] if "no_shared_noun" in c["flags"]
        }
        assert ids[JOKE] in ungrounded
        expect = [i for i in order if i not in ungrounded] + [i for i in order if i in ungrounded]
        assert [
            c["input_id"] for c in rec["ranked"]
        ] == expect  # the reranker's order, ungrounded last
        assert [c["grounded"] for c in rec["ranked"]] == [i not in ungrounded for i in expect]
        assert len(rec["ranked"]) == n - 2
        shown_last += sum(not c["grounded"] for c in rec["ranked"])
    f = result.manifest[NAME]["funnel"]
    assert f["requests_pooled"] == sum(len(r["candidates"]) for r in recs)
    assert f["duplicates_removed"] == 2 * 7 and f["ungrounded_last"] == shown_last >= 2 * 7
    assert f["pooled_requests_flagged"]["no_shared_noun"] >= 7


def test_a_draft_of_ungrounded_requests_is_kept_with_them_last(tmp_path: Path) -> None:
    """Seven of nine requests name nothing the call was given: before, the segment was refused;
    B.2 keeps them, at the bottom."""
    out = tmp_path / "run"
    result, _ = run_recommend(out, writer({"ungrounded": True}), attempts=2, n=2)
    assert (result.accepted, result.rejected) == (2, 0)
    for rec in read_jsonl(out / "recommend.jsonl"):
        assert len(rec["candidates"]) == 9
        ranked = rec["ranked"]
        # the seven jokes are one request said seven times: six repeats removed
        assert len(ranked) == 3 and [c["grounded"] for c in ranked] == [True, True, False]
        assert ranked[-1]["text"] == "Tell me a joke about penguins."
    assert result.manifest["validators"]["flagged.no_shared_noun"] == 2 * 7


def test_reader_names_bad_lines(tmp_path: Path) -> None:
    from gen.errors import InputError

    good = json.loads(SESSIONS.read_text().splitlines()[0])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**good, "forbidden": [{"start": 5, "end": 1}]}) + "\n")
    with pytest.raises(
        InputError, match=r"bad.jsonl:1: forbidden.0: Value error, end must be >= start"
    ):
        plan(cfg(input=str(bad)))


def test_every_duplicate_the_reranker_marks_is_removed_and_the_embedding_only_measured(
    tmp_path: Path,
) -> None:
    """A reranker that calls every request a duplicate of the first (as SmolLM2-135M does): B.2
    removes every marked duplicate, so the pool keeps one, whatever the embedder says (before: a
    call the embedder did not confirm was kept). The embedding's verdict on each pair is recorded
    beside the reranker's, so the funnel shows the pairs only the reranker called the same."""
    # the writer's requests share all words but one ("Tell me something useful about the X
    # here."): the bag-of-words fake puts each pair at 6/7 = 0.86, below dedup_similarity=0.9
    out = tmp_path / "run"
    result, _ = run_recommend(out, writer({"all_duplicates": True}), n=1)
    (rec,) = read_jsonl(out / "recommend.jsonl")
    n = len(rec["candidates"])
    assert len(rec["ranked"]) == 1 and len(rec["removed"]) == n - 1
    assert {r["duplicate_of"] for r in rec["removed"]} == {"1"}
    a = rec["dedup_agreement"]
    assert a["llm_only"] == n * (n - 1) // 2 and a["both"] == a["embedding_only"] == 0
    f = result.manifest[NAME]["funnel"]
    assert f["dedup_agreement"]["llm_only"] == a["llm_only"]
    assert f["duplicates_removed"] == n - 1
