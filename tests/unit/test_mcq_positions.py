"""Answer positions balanced by construction (``gen.formats.mcq.answer_position``, ``Positions``,
``arrange``): the blocks, and every MCQ generator that orders options using them — distractors
(200 MCQs of the example bank, the audit's position check, shards), candidates, introspect's
photo test. tom's are in ``test_tom_e2e.py``."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from audit_runs import run_audit
from candidates_runs import ITEMS, run_candidates
from test_distractors import run_distractors
from test_introspect import cfg as introspect_cfg
from test_introspect import drafts, session

from gen.formats.mcq import Positions, answer_position, arrange
from gen.generators.introspect.recording import build as build_recording
from gen.paths import EXAMPLES


@pytest.mark.parametrize("k", [2, 3, 4, 5, 26])
def test_every_block_of_k_ranks_is_a_permutation(k: int) -> None:
    for seed, stream in ((0, "similar"), (7, "goal"), (2**31 - 1, "photo_test")):
        got = [answer_position(seed, stream, r, k) for r in range(10 * k)]
        assert all(sorted(got[b : b + k]) == list(range(k)) for b in range(0, 10 * k, k))
        # seeded and pure: the same call gives the same place; another seed or stream another
        assert got == [answer_position(seed, stream, r, k) for r in range(10 * k)]
    if k > 2:
        assert [answer_position(0, "a", r, k) for r in range(20 * k)] != [
            answer_position(1, "a", r, k) for r in range(20 * k)
        ]
        assert [answer_position(0, "a", r, k) for r in range(20 * k)] != [
            answer_position(0, "b", r, k) for r in range(20 * k)
        ]


def test_any_run_of_ranks_is_within_one_of_even() -> None:
    pos = [answer_position(3, "q", r, 4) for r in range(400)]
    for start in (0, 1, 5, 37):
        for n in (20, 21, 63):
            counts = Counter(pos[start : start + n])
            assert max(counts.values()) - min(counts[j] for j in range(4)) <= 2


def test_positions_count_ranks_per_stream_and_option_count() -> None:
    places = Positions(11)
    streams = ["x", "y", "x", "x", "y", "x", "x", "y", "x", "x"]
    ks = [4, 4, 2, 4, 4, 2, 4, 4, 4, 2]
    got = [places.take(s, k) for s, k in zip(streams, ks, strict=True)]
    assert got == [
        answer_position(11, "x", 0, 4),
        answer_position(11, "y", 0, 4),
        answer_position(11, "x", 0, 2),
        answer_position(11, "x", 1, 4),
        answer_position(11, "y", 1, 4),
        answer_position(11, "x", 1, 2),
        answer_position(11, "x", 2, 4),
        answer_position(11, "y", 2, 4),
        answer_position(11, "x", 3, 4),
        answer_position(11, "x", 2, 2),
    ]
    assert sorted(g for g, s, k in zip(got, streams, ks, strict=True) if (s, k) == ("x", 4)) == [
        0,
        1,
        2,
        3,
    ]


def test_arrange_puts_the_answer_at_its_place_and_shuffles_the_rest() -> None:
    for k in (2, 3, 4, 7):
        for at in range(k):
            order = arrange(k, at, random.Random(at))
            assert sorted(order) == list(range(k)) and order.index(0) == at
    rest = {tuple(arrange(4, 1, random.Random(s))) for s in range(50)}
    assert len(rest) == 6  # all 3! orders of the wrong options occur
    with pytest.raises(ValueError, match="position 4"):
        arrange(4, 4, random.Random(0))


# --------------------------------------------------------------------------- the generators


def positions_by_type(path: Path) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        out.setdefault(r["question_type"], Counter())["abcdefghij"[r["answer"]]] += 1
    return out


def test_200_distractor_mcqs_of_the_example_bank_are_balanced(tmp_path: Path) -> None:
    """The first 100 goals of ``examples/goals.jsonl``, seed 0: two bands x 100 MCQs. Before:
    similar a25 b31 c26 d18, dissimilar a20 b19 c29 d32 (its first 20: d 13 times)."""
    res = run_distractors(tmp_path / "run", input=str(EXAMPLES / "goals.jsonl"), n=100)
    assert res.accepted == 200
    counts = positions_by_type(tmp_path / "run" / "distractors.jsonl")
    assert counts == {q: Counter(a=25, b=25, c=25, d=25) for q in ("similar", "dissimilar")}


def test_the_audits_position_check_finds_nothing_on_a_generated_bank(tmp_path: Path) -> None:
    """The bank guide's first batch shape (the first goals of the example bank, seed 0): its
    dissimilar band put 13 of 20 answers at d, a position finding."""
    run_distractors(tmp_path / "run", input=str(EXAMPLES / "goals.jsonl"), n=20)
    _, findings, report = run_audit(tmp_path / "audit", tmp_path / "run", checks=["position"])
    assert [f for f in findings if f["check"] == "position"] == []
    (pos,) = [c for c in report["checks"] if c["key"] == "position"]
    assert pos["status"] == "ran" and len(pos["stats"]["tells"]) == 2  # both bands were tested
    groups = pos["stats"]["groups"]
    assert {g: row["counts"] for g, row in groups.items()} == {
        f"{q}/4": {"a": 5, "b": 5, "c": 5, "d": 5} for q in ("similar", "dissimilar")
    }


def test_candidates_positions_are_balanced_per_task_and_equal_across_shards(
    tmp_path: Path,
) -> None:
    vii = json.loads(ITEMS.read_text().splitlines()[3])
    rows = [
        {**vii, "item_id": f"v{i}", **({"task": "other_task"} if i % 3 == 0 else {})}
        for i in range(16)
    ]
    _, recs, rejects, _ = run_candidates(tmp_path / "all", rows, kind="sampled", length_ratio=None)
    assert rejects == []
    by_task: dict[str, list[int]] = {}
    for r in recs:
        by_task.setdefault(r["question_type"], []).append(r["answer"])
    # every block of 4 items of one task holds each position once
    for answers in by_task.values():
        for b in range(0, len(answers) - len(answers) % 4, 4):
            assert sorted(answers[b : b + 4]) == [0, 1, 2, 3]
    shards = []
    for k in range(3):
        _, part, _, _ = run_candidates(
            tmp_path / f"s{k}", rows, kind="sampled", length_ratio=None, shard=k, num_shards=3
        )
        shards += part
    assert shards == recs


def test_introspect_photo_tests_are_balanced() -> None:
    sessions = [session(session_id=f"s{i}") for i in range(8)]
    photos = [
        d
        for d in drafts(build_recording(sessions, introspect_cfg(task="recording")))
        if d.question_type == "photo_test"
    ]
    assert len(photos) == 8 and all(d.options[d.answer] == "mural" for d in photos)
    assert Counter(d.answer for d in photos) == Counter({0: 2, 1: 2, 2: 2, 3: 2})
