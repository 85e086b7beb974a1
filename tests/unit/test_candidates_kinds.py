"""``candidates``: Memory Recall Prediction, the label_reason and sampled kinds, rerank=true, and
that nocontext, audit and bank read the records (and the real EgoToM timelines cut into items)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from candidates_runs import (
    EGOTOM,
    ITEMS,
    LINES,
    NAME,
    REASONS,
    good_reply,
    mrp,
    run_candidates,
)
from fakes import FakeEmbedder

from gen.engine.registry import REGISTRY
from gen.errors import InputError
from gen.formats.mcq import arrange
from gen.generators.candidates import (
    CandidatesConfig,
    detect_format,
    key,
    narration_text,
)
from gen.generators.candidates.recall import read_recall, recall_items
from gen.kinds.mcq import load_banks
from gen.paths import EXAMPLES
from gen.schemas.candidates import EMOTIONS

# ------------------------------------------------------------------------- Memory Recall Prediction

RECALL = EXAMPLES / "candidates" / "recall.jsonl"


def test_recall_annotations_make_one_item_per_vivid_detail_in_its_3_minute_clip() -> None:
    cfg = CandidatesConfig(input=str(RECALL), cache_dir=None)
    sessions = read_recall(RECALL)
    items, summary = recall_items(sessions, cfg)
    assert summary["items"] == summary["details"] == 5 and summary["skipped"] == {}
    first = items[0]
    assert first.task == "memory_recall" and first.question == cfg.recall_question
    assert (
        first.positive.text == "My name was spelled Jon on the coffee cup."
        and first.positive.time == 196
    )
    assert first.window is not None and (first.window.start, first.window.end) == (
        106,
        286,
    )  # 180 s centred
    assert all(106 <= x.t <= 286 for x in first.lines)
    # the clip's other recalled details: never an option; every detail's moment hidden
    assert {o.id for o in first.others} == {"d2", "d3"}
    assert sorted(first.lines[j].t for j in first.hide) == [196, 214, 266]
    # a detail near the session's end: the clip moves inside the session, still 180 s
    last = next(i for i in items if i.item_id == "P05-hardware#d2")
    assert last.window is not None and (last.window.start, last.window.end) == (84, 264)
    assert cfg.model_copy(update={"clip": 60}).clip == 60
    assert recall_items(sessions, cfg.model_copy(update={"clip": 60}))[0][0].window.end - 166 == 60


def test_recall_reader_names_bad_lines(tmp_path: Path) -> None:
    good = json.loads(RECALL.read_text().splitlines()[0])
    for row, needle in [
        ({**good, "details": []}, ":1: details: List should have at least 1 item"),
        ({**good, "details": [{**good["details"][0], "time": -3}]}, ":1: details.0.time"),
        (
            {**good, "details": [good["details"][0], good["details"][0]]},
            "detail_id 'd1' is given twice",
        ),
        ({**good, "details": [{**good["details"][0], "event_id": "e9"}]}, "names event_id 'e9'"),
    ]:
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(InputError, match=re.escape(needle)):
            read_recall(path)
    assert detect_format(RECALL) == "recall"


def test_memory_recall_prediction_end_to_end(tmp_path: Path) -> None:
    """The recalled detail is the answer; the wrong options are written from other moments of its
    clip (never a recalled detail's moment); no option's moment is shown."""
    result, recs, rejects, _ = run_candidates(
        tmp_path / "a", RECALL, length_ratio=None, reword_positive=False
    )
    assert result.accepted + result.rejected == 5 and result.accepted >= 4, rejects
    items = {
        i.item_id: i for i in recall_items(read_recall(RECALL), CandidatesConfig(input="x"))[0]
    }
    for rec in recs:
        item = items[rec["source_item"]]
        assert (
            rec["question_type"] == "memory_recall"
            and rec["options"][rec["answer"]] == item.positive.text
        )
        moments = [item.positive.time, *(o.time for o in item.others)]
        for src in rec["privileged"]["sources"].values():
            t = int(src.split("m:")[0]) * 60 + int(src.split("m:")[1][:2])
            assert all(abs(t - m) > 8 for m in moments)
        shown = rec["visible"]["context"]
        for j in item.hide:
            assert item.lines[j].text not in shown
        assert all(s.split("| ", 1)[1] not in shown for s in rec["privileged"]["sources"].values())
    assert result.manifest["candidates"]["recall"]["items"] == 5


# ------------------------------------------------------------------------- label_reason and sampled


def test_label_reason_is_a_nine_way_set_over_the_taxonomy(tmp_path: Path) -> None:
    ei = json.loads(ITEMS.read_text().splitlines()[2])
    result, recs, rejects, llm = run_candidates(tmp_path / "a", [ei], kind="label_reason")
    assert result.accepted == 1, rejects
    rec = recs[0]
    labels = [o.split(":", 1)[0] for o in rec["options"]]
    assert sorted(labels) == sorted(EMOTIONS) and len(rec["options"]) == 9
    assert labels[rec["answer"]] == "Achievement" and rec["origins"][rec["answer"]] == "positive"
    for o in rec["options"]:
        label, reason = o.split(": ", 1)
        if label != "Achievement":
            assert (
                reason == REASONS[label] + "."
            )  # the positive's reason ends bare: every option gets a period
    assert all(o.endswith(".") for o in rec["options"])
    ask = next(c for c in llm.calls if "For each of these feelings" in c["messages"][-1]["content"])
    assert (
        "C felt Achievement because C finally fixed the wobbly table leg without any help"
        in ask["messages"][-1]["content"]
    )
    # an overridden taxonomy, and k below its size: the other labels are sampled with the item's
    # seed
    custom = ["Achievement", "Joy", "Stress", "Boring"]
    _, recs, _, _ = run_candidates(tmp_path / "b", [ei], kind="label_reason", taxonomy=custom)
    assert sorted(o.split(":")[0] for o in recs[0]["options"]) == sorted(custom)
    _, recs, _, _ = run_candidates(tmp_path / "c", [ei], kind="label_reason", k=4)
    assert len(recs[0]["options"]) == 4 and "Achievement" in [
        o.split(":")[0] for o in recs[0]["options"]
    ]
    with pytest.raises(ValueError, match="more than the taxonomy's 9 labels"):
        CandidatesConfig(input="x", kind="label_reason", k=10)


def test_sampled_draws_three_without_replacement_with_a_seed_and_records_the_key(
    tmp_path: Path,
) -> None:
    vii = json.loads(ITEMS.read_text().splitlines()[3])
    rows = [{**vii, "item_id": f"v{i}"} for i in range(8)]
    result, recs, rejects, llm = run_candidates(
        tmp_path / "a", rows, kind="sampled", length_ratio=None
    )
    assert result.accepted == 8 and llm.calls == []  # no LLM for sampled negatives
    drawn = set()
    for rec in recs:
        origins = rec["origins"]
        ids = sorted(o.split(":", 1)[1] for o in origins if o.startswith("sampled:"))
        assert (
            len(ids) == 3 == len(set(ids)) and "r5" not in ids and "r2" not in ids
        )  # annotated ids excluded
        drawn.add(tuple(ids))
        # replay: the seeded generator draws the negatives, then shuffles the four
        rng = random.Random(rec["shuffle_seed"])
        pool = [n for n in vii["negatives"] if n["id"] not in ("r2", "r5")]
        picks = [pool[j]["id"] for j in rng.sample(range(len(pool)), 3)]
        order = arrange(4, rec["answer"], rng)  # the answer's balanced place, the rest shuffled
        assert origins == [(["positive", *[f"sampled:{p}" for p in picks]])[i] for i in order]
    assert len(drawn) > 1
    assert result.manifest["validators"]["sampled.annotated_id_excluded"] == 8
    few = {
        **vii,
        "negatives": [*vii["negatives"][:2], vii["negatives"][3]],
    }  # r5 is annotated: two left
    _, _, rejects, _ = run_candidates(tmp_path / "b", [few], kind="sampled", length_ratio=None)
    assert [r["reason"] for r in rejects] == ["too_few_negatives"]


def test_sampled_negatives_and_the_positive_pass_through_unchanged(tmp_path: Path) -> None:
    """VII: what the participant saw is what the candidate sees. A negative far longer than the
    others, one close to the positive and one without a final period are drawn and kept as
    written, the positive keeps its own surface; only two options that read the same refuse the
    item (a refusal, not a rewrite)."""
    vii = json.loads(ITEMS.read_text().splitlines()[3])
    negatives = [
        {"id": "n1", "text": "remind me about the pasta timer"},  # no capital, no period
        {
            "id": "n2",
            "text": "Set a timer for the pasta, it needs about ten minutes.",
        },  # near the positive
        {
            "id": "n3",
            "text": "Look up three different sauces that would go with this pasta tonight, "
            "with their cooking times and what I would need to buy for each of them.",
        },
    ]
    row = {
        **vii,
        "positive": {"text": "set a timer for the pasta", "id": "r2"},
        "others": [],
        "negatives": negatives,
    }
    result, recs, rejects, _ = run_candidates(
        tmp_path / "a", [row], kind="sampled"
    )  # default length_ratio 1.4
    assert result.accepted == 1, rejects
    assert sorted(recs[0]["options"]) == sorted(
        ["set a timer for the pasta", *(n["text"] for n in negatives)]
    )
    assert "surface.changed" not in result.manifest["validators"]
    twin = {**row, "negatives": [*negatives[:2], {"id": "n4", "text": "Set a timer for the pasta"}]}
    _, _, rejects, _ = run_candidates(tmp_path / "b", [twin], kind="sampled")
    assert [r["reason"] for r in rejects] == ["duplicate_options"]


def test_sampled_runs_on_timeline_items_with_times(tmp_path: Path) -> None:
    result, recs, rejects, _ = run_candidates(
        tmp_path / "a",
        [
            mrp(
                negatives=[
                    {"id": f"L{i + 1}", "text": narration_text(x), "time": t}
                    for i, (t, x) in enumerate(LINES)
                    if i not in (5, 8)
                ]
            )
        ],
        kind="sampled",
    )
    assert result.accepted == 1, rejects
    rec = recs[0]
    assert len(rec["privileged"]["option_times"]) == 4
    for o in rec["options"]:
        assert o not in rec["visible"]["context"].replace(
            "#C ", ""
        )  # every option's line is hidden


# --------------------------------------------------------------------------- rerank=true


def test_rerank_true_drops_a_semantic_duplicate_and_keeps_the_positive(tmp_path: Path) -> None:
    def reply(messages: list[dict[str, str]], seed: int) -> str:
        req = messages[-1]["content"]
        if "List every candidate exactly once" in req:
            texts = re.findall(r"^(\d+)\. (.*)$", req.rsplit("Candidates, numbered:", 1)[1], re.M)
            ranking = [
                {"id": int(i), "text": t, "duplicate_of": None, "grounded": True} for i, t in texts
            ]
            ranking[1]["duplicate_of"] = 1  # candidate 2 means the positive: removed
            ranking[0]["duplicate_of"] = 3  # the positive marked as a duplicate: it stays, 3 goes
            ranking[3]["grounded"] = False  # candidate 4 goes last
            return json.dumps({"ranking": ranking, "reason": "by fit"})
        return good_reply(messages, seed)

    result, recs, rejects, _ = run_candidates(
        tmp_path / "a", [mrp()], reply=reply, rerank=True, rerank_spares=2, confirm_similarity=0
    )
    assert result.accepted == 1, rejects
    info = recs[0]["rerank"]
    assert info["pool"] == ["positive", "d1", "d2", "d3", "d4", "d5"]
    assert info["removed"] == [["d1", "positive"], ["d2", "positive"]]
    assert info["ungrounded"] == ["d3"] and info["calls"] == 1
    kept = [
        o for o, g in zip(recs[0]["options"], recs[0]["origins"], strict=True) if g == "generated"
    ]
    assert len(kept) == 3
    assert result.manifest[NAME]["funnel"][3] == {"step": "rerank", "items": 1}
    agree = result.manifest[NAME]["rerank_agreement"]
    assert agree["pairs"] == 15 and agree["llm_only"] == 3 and agree["both"] == 0
    with pytest.raises(ValueError, match="needs kind=generated"):
        CandidatesConfig(input="x", rerank=True, kind="sampled")


def test_rerank_true_removes_only_the_duplicates_the_embedder_confirms(tmp_path: Path) -> None:
    """A reranker that calls every option a duplicate of another (SmolLM2-135M calls each a
    duplicate of the first) removes only the pairs the embedder puts at or above
    ``confirm_similarity`` ("C opens the kitchen cupboard." / "C closes …": 0.8 under the
    bag-of-words embedder); the others are listed as unconfirmed and counted."""
    embedder = FakeEmbedder()
    called: list[tuple[str, str]] = []

    def reply(messages: list[dict[str, str]], seed: int) -> str:
        req = messages[-1]["content"]
        if "List every candidate exactly once" not in req:
            return good_reply(messages, seed)
        texts = re.findall(r"^(\d+)\. (.*)$", req.rsplit("Candidates, numbered:", 1)[1], re.M)
        vecs = embedder.encode([t for _, t in texts])
        ranking = []
        for j, (i, t) in enumerate(texts):
            # each option a duplicate of its nearest earlier one (the second of the first)
            near = int((vecs[:j] @ vecs[j]).argmax()) if j else None
            if near is not None and j > 1:
                called.append((texts[near][1], t))
            dup = None if near is None or j == 1 else near + 1
            ranking.append({"id": int(i), "text": t, "duplicate_of": dup, "grounded": True})
        return json.dumps({"ranking": ranking, "reason": "near ones"})

    result, recs, rejects, _ = run_candidates(
        tmp_path / "a", [mrp()], reply=reply, rerank=True, rerank_spares=5
    )
    assert result.accepted == 1, rejects
    info = recs[0]["rerank"]
    cos = {pair: float(np.prod(embedder.encode(list(pair)), axis=0).sum()) for pair in called}
    confirmed = [p for p, c in cos.items() if c >= 0.75]
    assert confirmed and len(confirmed) < len(cos)
    assert len(info["removed"]) == len(confirmed)
    assert len(info["unconfirmed_duplicates"]) == len(cos) - len(confirmed)
    assert result.manifest["validators"]["rerank.unconfirmed_duplicates"] == len(cos) - len(
        confirmed
    )
    assert not any(b in recs[0]["options"] for _, b in confirmed)


def test_rerank_true_rejects_a_pool_the_reranker_cannot_return_whole(tmp_path: Path) -> None:
    def reply(messages: list[dict[str, str]], seed: int) -> str:
        if (
            "List every candidate exactly once" in messages[-1]["content"]
            or "Your list is not" in messages[-1]["content"]
        ):
            return json.dumps(
                {
                    "ranking": [
                        {
                            "id": 1,
                            "text": "C takes out the milk carton.",
                            "duplicate_of": None,
                            "grounded": True,
                        }
                    ],
                    "reason": "short",
                }
            )
        return good_reply(messages, seed)

    result, _, rejects, _ = run_candidates(
        tmp_path / "a", [mrp()], reply=reply, rerank=True, rerank_attempts=2
    )
    assert [(r["stage"], r["reason"]) for r in rejects] == [("rerank", "not_a_permutation")]
    assert (
        "dropped [2, 3, 4, 5, 6]" in rejects[0]["detail"]
        and "after 2 calls" in rejects[0]["detail"]
    )


# --------------------------------------------------------------------------- the next steps read it


def test_nocontext_audit_and_bank_read_the_records(tmp_path: Path) -> None:
    result, recs, _, _ = run_candidates(tmp_path / "run", [mrp(item_id=f"m{i}") for i in range(3)])
    banks = load_banks(tmp_path / "run")
    assert [b.path.name for b in banks] == ["candidates.jsonl"] and len(banks[0].items) == 3
    item = banks[0].items[0]
    assert item.context == recs[0]["visible"]["context"] and item.answer == recs[0]["answer"]
    assert (
        json.loads(item.privileged["privileged.option_times"])
        == recs[0]["privileged"]["option_times"]
    )
    nc = REGISTRY["nocontext"]
    assert nc.make_plan(nc.config(input=str(tmp_path / "run"), cache_dir=None)).n == 3
    from gen.banks.batch import batch_files

    assert [(f.name, k) for f, k, _ in batch_files(tmp_path / "run")] == [
        ("candidates.jsonl", "mcq")
    ]


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="the shared EgoToM data is not here")
def test_the_real_egotom_timelines_cut_into_items() -> None:
    from gen.generators.candidates import plan

    p = plan(CandidatesConfig(input=str(EGOTOM), n=20, cache_dir=None))
    assert p.n == 20 and p.data.fmt == "egotom_csv" and p.data.timeline["clips"] == 579
    for it in p.data.items[:20]:
        assert it.task == "temporal_grounding" and len(it.negatives) >= 0
        assert sum(key(x.text) == key(it.positive.text) for x in it.lines) == 1


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="the shared EgoToM data is not here")
def test_items_of_one_clip_share_no_window_line_by_default() -> None:
    """By default two items of a clip have windows that share no line, so no line one item hides
    (its answer, a wrong option's source) is shown in the other's context: on the first full run,
    with positives 15 s apart, 18 of the audit's 29 leakage warnings were such lines. It costs 3 of
    EgoToM's 532 action items."""
    from gen.generators.candidates import plan

    def shared_lines(**kw: Any) -> tuple[int, int]:
        cfg = CandidatesConfig(
            input=str(EGOTOM / "egotom_actions_shuffled.csv"), cache_dir=None, **kw
        )
        items = plan(cfg).data.items
        by_clip: dict[str, list[Any]] = {}
        for it in items:
            by_clip.setdefault(it.group, []).append(it)
        shared = sum(
            len({(x.t, x.text) for x in a.lines} & {(x.t, x.text) for x in b.lines})
            for its in by_clip.values()
            for i, a in enumerate(its)
            for b in its[i + 1 :]
        )
        return len(items), shared

    assert shared_lines() == (529, 0)
    n, shared = shared_lines(spacing=15)
    assert n == 532 and shared > 100  # the old default: overlapping windows


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="the shared EgoToM data is not here")
def test_on_the_real_timelines_the_shown_order_says_nothing_about_time(tmp_path: Path) -> None:
    """The whole generated path (timeline cut, source choice, checks, rewording, shuffle) on 200
    items of the EgoToM action timelines with the scripted writer: neither the answer's position nor
    the options' order carries their source times. Whatever ordered the pool (source order,
    acceptance) the seeded shuffle must erase: the audit's position and chronology checks find
    nothing, and the options run forward in time about as often as backward. The writer ends each
    rewrite with a period, as SmolLM2 does, where most narrations end bare: the one surface per item
    leaves the choice-only classifier nothing to read (without it, it is right on 82 %: ends_bare,
    end_odd)."""
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.checks.chronology import chronology
    from gen.generators.audit.checks.chronology import kendall as tau_of
    from gen.generators.audit.checks.position import position
    from gen.generators.audit.checks.shortcut import shortcut
    from gen.generators.audit.data import AuditData

    def with_period(messages: list[dict[str, str]], seed: int) -> str:
        out = json.loads(good_reply(messages, seed))
        return json.dumps({"text": out["text"].rstrip(".") + "."} if "text" in out else out)

    result, recs, _, _ = run_candidates(
        tmp_path / "run",
        EGOTOM / "egotom_actions_shuffled.csv",
        with_period,
        n=200,
        reword_positive=False,
    )  # the positives stay as annotated
    assert result.accepted >= 100 and result.manifest["validators"]["surface.changed"] > 100
    data = AuditData(items=load_banks(tmp_path / "run")[0].items)
    cfg = AuditConfig(input="x")
    for check in (chronology, position, shortcut):
        res = check(data, cfg)
        assert res.status == "ran" and res.findings == [], (check.__name__, res.stats.get("tells"))
    taus = [
        tau_of({int(j): t for j, t in r["privileged"]["option_times"].items()})[0] for r in recs
    ]
    forward, backward = sum(t > 0 for t in taus), sum(t < 0 for t in taus)
    assert (
        abs(forward - backward) <= 3 * (forward + backward) ** 0.5 / 2 + 1
    )  # within 3 sigma of a fair coin
    assert abs(sum(taus) / len(taus)) < 0.1
