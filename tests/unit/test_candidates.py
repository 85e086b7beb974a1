"""``candidates``: the items and timeline readers, every check on planted violations, collision
avoidance, the generated kind end to end with a scripted LLM (the seeded shuffle and its key,
restyle waves, rewording, determinism)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from candidates_runs import (
    ITEMS,
    LINES,
    MOMENT,
    NAME,
    good_reply,
    mrp,
    run_candidates,
    write_items,
)
from fakes import FakeEmbedder

from gen.engine.runner import RunContext, derive_seed, run_config
from gen.errors import InputError
from gen.formats.mcq import answer_position
from gen.formats.timelines import Clip, Line
from gen.generators.candidates import (
    CandidatesConfig,
    key,
    narration_text,
    read_items,
    timeline_items,
)
from gen.generators.candidates.checks import Option, Pool, Vectors, clean
from gen.generators.candidates.item import input_problem, setup
from gen.llm import OpenAIConfig, scripted_llm
from gen.schemas.candidates import CandidateItem, CandidateRecord

# --------------------------------------------------------------------------- readers


def test_items_reader_reads_the_examples_and_names_bad_lines(tmp_path: Path) -> None:
    items = read_items(ITEMS)
    assert [i.task for i in items] == [
        "temporal_grounding",
        "request_prediction",
        "ei_label_reason",
        "vii",
    ]
    assert items[1].positive.text.startswith("Tell me") and items[2].positive.label == "Achievement"
    for row, needle in [
        (
            {**mrp(), "positive": {"time": 3}},
            ":1: positive: Value error, a positive needs text, or label and reason",
        ),
        ({**mrp(), "context": [{"t": -1, "text": "x"}]}, ":1: context.list[TimedLine].0.t"),
        (
            {**mrp(), "window": {"start": 9, "end": 1}},
            ":1: window: Value error, window end must be >= start",
        ),
        ({**mrp(), "surprise": 1}, ":1: surprise: Extra inputs are not permitted"),
        (
            {**mrp(), "negatives": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]},
            ":1: negatives: id 'a' is given twice",
        ),
    ]:
        path = write_items(tmp_path / "bad.jsonl", [row])
        with pytest.raises(InputError) as e:
            read_items(path)
        assert str(e.value).startswith(str(path)) and needle in str(e.value), str(e.value)
    path = write_items(tmp_path / "twice.jsonl", [mrp(), mrp()])
    with pytest.raises(InputError, match=r"twice.jsonl:2: item_id: 'mrp-1' repeats line 1"):
        read_items(path)


def clip(lines: list[tuple[float, str]], cid: str = "v~pass_1~0-20") -> Clip:
    from gen.formats.timelines import speaker_of

    return Clip(cid, "v", "jsonl", "test", lines=[Line(t, x, speaker_of(x)) for t, x in lines])


def test_timeline_items_pick_unique_positives_with_their_window_others_and_negatives() -> None:
    lines = [
        *LINES,
        (50, "#C C opens the fridge door."),
        (55, "#O a man waves at C."),
        (60, "#C C eats the cereal."),
    ]
    cfg = CandidatesConfig(input="x", window=30, per_clip=3, spacing=10, min_side_lines=2)
    items, summary = timeline_items([clip(lines)], cfg)
    assert summary == {"clips": 1, "items": len(items), "skipped": {}, "skipped_examples": []}
    assert 1 <= len(items) <= 3
    times = [it.positive.time for it in items]
    assert times == sorted(times) and all(abs(a - b) >= 10 for a in times for b in times if a != b)
    for it in items:
        t = it.positive.time
        ctx = it.lines
        assert all(t - 15 <= x.t <= t + 15 for x in ctx)
        assert sum(x.t < t for x in ctx) >= 2 and sum(x.t > t for x in ctx) >= 2
        assert it.question == f"What did C do at 00m:{int(t):02d}s?"
        # the positive's text occurs once in the clip (the fridge door occurs twice: never a
        # positive),
        # and the collision set is the other positives in the window
        assert sum(key(x) == key(it.positive.text) for _, x in lines) == 1
        assert {o.time for o in it.others} == {u for u in times if u != t and t - 15 <= u <= t + 15}
        neg = {n.text for n in it.negatives}
        assert key(it.positive.text) not in {key(x) for x in neg} and not neg & {
            o.text for o in it.others
        }
        assert all(sum(key(x.text) == key(n) for x in ctx) == 1 for n in neg)
        assert not any(n.text.startswith("#") for n in it.negatives)
    every, _ = timeline_items([clip(lines)], cfg.model_copy(update={"per_clip": 20, "spacing": 0}))
    picked = {it.positive.text for it in every}
    assert (
        "C takes out the milk carton." in picked and "C opens the fridge door." not in picked
    )  # 20 s and 50 s
    again, _ = timeline_items([clip(lines)], cfg)
    assert again == items  # seeded by (seed, clip id)
    other, _ = timeline_items([clip(lines)], cfg.model_copy(update={"seed": 5}))
    assert isinstance(other, list)
    bad = clip([(0, "#C C x.")])
    bad.problems.append("t.jsonl:3: bad timestamp")
    _, summary = timeline_items([bad, clip(LINES[:2], "short")], cfg)
    assert summary["skipped"] == {"malformed": 1, "no_eligible_positive": 1}


def test_narration_text_and_clean() -> None:
    assert narration_text("#C C opens the door.-") == "C opens the door."
    assert narration_text("#c c opens the door") == "C opens the door"
    assert narration_text("#O a man waves") == "A man waves"
    assert clean(' 3. 00m:12s | "C opens the door."') == "C opens the door."
    assert clean("#C C opens the door.") == "C opens the door."


# --------------------------------------------------------------------- checks on planted violations


def make_setup(row: dict[str, Any] | None = None, **cfg: Any):
    config = CandidatesConfig(input="x", **cfg)
    item = CandidateItem.model_validate(row or mrp())
    return setup(None, config, item, Vectors(FakeEmbedder())), item  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("C takes out the milk carton.", None, "same_as_positive"),
        ("C picks up a metal spoon.", None, "collision"),  # an annotated item of the window
        ("C picks up a metal spoon now.", None, "collision"),  # ...or near it (cosine)
        ("C takes out the milk carton now.", None, "near_positive"),
        (
            "C takes out a blue bowl from it, now quickly and loudly in the kitchen.",
            None,
            "length_ratio",
        ),
        ("", None, "empty_text"),
        ("C opens opens opens the the the door door door now now now", None, "repetition"),
        ("C walks a dog across the park.", 9, "ungrounded_source"),
        (
            "A dog runs across the park.",
            None,
            "subject",
        ),  # the positive is about C: so is every option
        (
            "C opens the milk cupboard.",
            0,
            "borrowed",
        ),  # line 0 opens the kitchen cupboard; milk is the positive's
    ],
)
def test_each_check_turns_away_its_planted_violation(
    text: str, line: int | None, reason: str
) -> None:
    s, _ = make_setup()
    pool = Pool(s, 3, lambda _: None)
    assert (
        5 not in s.allowed and 8 not in s.allowed
    )  # the positive's line and the spoon's are never sources
    assert not pool.offer(Option(text, text, "generated", line=line))
    assert list(pool.turned) == [reason], pool.rejected
    assert pool.reason("x") == reason


def test_every_option_takes_the_positives_surface() -> None:
    """Code owns the surface: an option offered without the positive's final mark, or in lower case,
    is shown with them (counted), before any check sees it; a bare positive gets a period."""
    counted: list[str] = []
    s, _ = make_setup(mrp(positive={"text": "C takes out the milk carton", "time": 25}))
    assert s.positive.text == "C takes out the milk carton."
    pool = Pool(s, 3, counted.append)
    assert pool.offer(Option("c pours milk into a glass", "c pours milk into a glass", "generated"))
    assert pool.offer(Option("C opens the freezer door.", "C opens the freezer door.", "generated"))
    assert [o.text for o in pool.items] == [
        "C pours milk into a glass.",
        "C opens the freezer door.",
    ]
    assert counted == ["surface.changed"]
    question, _ = make_setup(
        {
            **mrp(),
            "task": "request_prediction",
            "context": "at the sink",
            "positive": {"text": "Can you remind me to buy milk?"},
        }
    )
    pool = Pool(question, 3, counted.append)
    assert pool.offer(
        Option("Can you order new sponges.", "Can you order new sponges.", "generated")
    )
    assert pool.items[0].text == "Can you order new sponges?" and not question.off_subject(
        "Can you order"
    )


def test_duplicates_names_positive_and_withheld_are_turned_away() -> None:
    s, _ = make_setup(
        {
            **mrp(),
            "withhold": ["pour the milk"],
            "context": [
                *mrp()["context"],
                {"t": 50, "text": "#C C takes out the milk carton again."},
            ],
        }
    )
    assert key("#C C takes out the milk carton again.") in s.named  # a line naming the positive
    pool = Pool(s, 3, lambda _: None)
    assert pool.offer(Option("C opens the fridge door.", "C opens the fridge door.", "generated"))
    for text, reason in [
        ("C opens the fridge door.", "duplicate"),
        ("C opens the fridge door now.", "near_duplicate"),
        ("C takes out the milk carton again.", "names_positive"),
        ("C will pour the milk slowly.", "withheld"),
    ]:
        assert not pool.offer(Option(text, text, "generated")), text
        assert pool.turned[reason] == 1, (text, pool.rejected)


def test_a_line_with_a_near_twin_is_never_a_source() -> None:
    twin = {
        "t": 47,
        "text": "#C C takes out a blue bowl again.",
    }  # cosine 0.93 to 00m:05s under the fake embedder
    s, _ = make_setup(mrp(context=[*mrp()["context"], twin]))
    assert 1 not in s.allowed and 10 not in s.allowed and 0 in s.allowed
    s, _ = make_setup()
    assert 1 in s.allowed


def test_input_problems_no_regeneration_fixes() -> None:
    cfg = CandidatesConfig(input="x", kind="label_reason")
    ei = CandidateItem.model_validate(
        {
            "item_id": "e",
            "task": "ei",
            "question": "q",
            "positive": {"label": "Anger", "reason": "r"},
        }
    )
    assert input_problem(ei, cfg)[0] == "label_not_in_taxonomy"
    assert input_problem(ei, cfg.model_copy(update={"taxonomy": ["Anger", "Calm"]})) is None
    rp = CandidateItem.model_validate(
        {
            "item_id": "r",
            "task": "rp",
            "question": "Did you ask: is the milk fresh?",
            "positive": "Tell me if the milk is fresh.",
            "withhold": ["is the milk fresh"],
        }
    )
    assert input_problem(rp, CandidatesConfig(input="x"))[0] == "withheld_visible"
    free = CandidateItem.model_validate(
        {
            "item_id": "f",
            "task": "t",
            "question": "q",
            "positive": "C opens the door",
            "context": "Then C opens the door and leaves.",
        }
    )
    assert input_problem(free, CandidatesConfig(input="x"))[0] == "positive_in_context"


# --------------------------------------------------------------------------- generated, end to end


def test_generated_records_hide_sources_record_key_origins_times_and_are_deterministic(
    tmp_path: Path,
) -> None:
    result, recs, rejects, llm = run_candidates(
        tmp_path / "a", [mrp(item_id=f"m{i}") for i in range(6)]
    )
    assert (result.accepted, result.rejected, rejects) == (6, 0, [])
    answers = []
    for r in recs:
        rec = CandidateRecord.model_validate(r)
        answers.append(rec.answer)
        assert (
            len(rec.options) == 4
            and rec.origins.count("positive") == 1
            and rec.origins.count("generated") == 3
        )
        assert rec.origins[rec.answer] == "positive"
        assert rec.reworded and key(rec.options[rec.answer]) != key("C takes out the milk carton.")
        assert rec.privileged["positive"] == "C takes out the milk carton."
        # every option has its source time; the positive's is 25 s
        times = rec.privileged["option_times"]
        assert set(times) == {"0", "1", "2", "3"} and times[str(rec.answer)] == 25
        # the positive's line and every source line are hidden; the rest of the window is shown
        ctx = rec.visible["context"]
        assert "milk carton" not in ctx and "00m:25s" not in ctx
        for j, src in rec.privileged["sources"].items():
            assert src not in ctx and src.strip().startswith(f"00m:{int(times[j]):02d}s")
        # the other annotated item's line (the spoon) is hidden too: it is the answer of its own
        # item
        assert ctx.count("\n") + 1 == 10 - 5 and "spoon" not in ctx
        # the collision set (the spoon at 00m:40s) never becomes an option, and its line is not
        # offered
        assert not any("spoon" in o for o in rec.options)
        assert rec.others == ["C picks up a metal spoon."] and rec.window == {
            "start": 0.0,
            "end": 45.0,
        }
        # the key: the positive sits at the run's balanced position for the item's rank
        assert rec.answer == answer_position(
            derive_seed(0, "candidates", "positions"), rec.question_type, len(answers) - 1, 4
        )
    assert sorted(answers[:4]) == [0, 1, 2, 3]  # balanced: each position once in a block of 4
    asked = [MOMENT.search(c["messages"][-1]["content"]) for c in llm.calls]
    moments = {m[1] for m in asked if m}
    assert len(moments) >= 3 and not moments & {
        LINES[5][1],
        LINES[8][1],
    }  # never the positive's line nor the spoon's
    _, again, _, _ = run_candidates(tmp_path / "b", [mrp(item_id=f"m{i}") for i in range(6)])
    assert again == recs
    manifest = result.manifest
    assert manifest[NAME]["funnel"] == [
        {"step": "items in", "items": 6},
        {"step": "input checks", "items": 6},
        {"step": "distractors", "items": 6},
        {"step": "records", "items": 6},
    ]
    assert manifest["prompts"].keys() == {
        "candidates/restyle.jinja",
        "candidates/reword.jinja",
        "candidates/_system.jinja",
    }


def test_collision_avoidance_turns_away_an_annotated_item_and_tries_another_moment(
    tmp_path: Path,
) -> None:
    def reply(messages: list[dict[str, str]], seed: int) -> str:
        if MOMENT.search(messages[-1]["content"]) and "bowl" in messages[-1]["content"]:
            return json.dumps(
                {"text": "C picks up a metal spoon."}
            )  # another annotated item of the window
        return good_reply(messages, seed)

    result, recs, rejects, _ = run_candidates(
        tmp_path / "a", [mrp(item_id=f"m{i}") for i in range(4)], reply=reply
    )
    assert result.accepted == 4, rejects
    assert result.manifest["validators"]["turned_away.collision"] >= 1
    assert not any("spoon" in o for r in recs for o in r["options"])


def test_an_items_restyle_calls_go_out_at_once_and_write_the_one_at_a_time_bytes(
    tmp_path: Path,
) -> None:
    """The calls for every option a pool misses go out together (a 2 s call on a server is 2 s
    for the item, not 3 x 2 s), and their answers are offered in call order: with a moment the
    pool turns away (the spoon) and a second wave, records, rejects and counters are those of one
    call at a time."""

    def reply(messages: list[dict[str, str]], seed: int) -> str:
        if MOMENT.search(messages[-1]["content"]) and "bowl" in messages[-1]["content"]:
            return json.dumps({"text": "C picks up a metal spoon."})
        return good_reply(messages, seed)

    class Together:
        """Counts the calls in flight; with ``wait``, the first three restyle calls wait for
        each other (they pass only when the item sends them at once, else the barrier breaks
        after 10 s and the run fails)."""

        def __init__(self, wait: bool):
            self.barrier = threading.Barrier(3, timeout=10) if wait else None
            self.lock = threading.Lock()
            self.restyles = self.in_flight = self.max_in_flight = 0

        def __call__(self, messages: list[dict[str, str]], seed: int) -> str:
            with self.lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                first = bool(MOMENT.search(messages[-1]["content"])) and self.restyles < 3
                self.restyles += first
            try:
                if first and self.barrier is not None:
                    self.barrier.wait()
                return reply(messages, seed)
            finally:
                with self.lock:
                    self.in_flight -= 1

    runs = {}
    for k in (1, 8):
        script = Together(wait=k > 1)
        config = CandidatesConfig(
            input=str(write_items(tmp_path / "items.jsonl", [mrp(item_id="m0")])),
            cache_dir=None,
            progress="off",
            llm=OpenAIConfig(concurrency=k),
        )
        llm = scripted_llm(script, sampling=config.llm)
        out = tmp_path / str(k)
        ctx = RunContext(NAME, config, out).use(llm=llm, embedder=FakeEmbedder())
        result = run_config(NAME, config, out, ctx=ctx, quiet=True)
        restyles = sum(bool(MOMENT.search(c["messages"][-1]["content"])) for c in llm.calls)
        runs[k] = (
            (out / "candidates.jsonl").read_bytes(),
            (out / "rejects.jsonl").read_bytes(),
            result.manifest["validators"],
            restyles,
        )
        assert script.max_in_flight == (3 if k > 1 else 1)  # one item: its 3 missing options
    assert runs[1] == runs[8]
    assert runs[1][2]["turned_away.collision"] == 1 and runs[1][3] == 4  # no call wasted


def test_a_check_regeneration_cannot_fix_is_the_reject_reason(tmp_path: Path) -> None:
    def near(messages: list[dict[str, str]], seed: int) -> str:
        if MOMENT.search(messages[-1]["content"]):
            return json.dumps({"text": "C takes the milk carton out now."})
        return good_reply(messages, seed)

    result, recs, rejects, _ = run_candidates(tmp_path / "a", [mrp()], reply=near, attempts=2)
    assert (result.accepted, [r["reason"] for r in rejects]) == (0, ["near_positive"])
    assert rejects[0]["stage"] == "generated" and "0 usable of 3" in rejects[0]["detail"]
    assert (
        result.manifest["validators"]["turned_away.near_positive"] == 6
    )  # attempts x 3 moments tried
    assert result.manifest[NAME]["funnel"][2] == {"step": "distractors", "items": 0}


def test_too_few_sources_and_invalid_llm_output_are_rejects(tmp_path: Path) -> None:
    short = mrp(context=mrp()["context"][4:7])
    result, _, rejects, _ = run_candidates(tmp_path / "a", [short])
    assert [r["reason"] for r in rejects] == ["too_few_sources"]
    result, _, rejects, _ = run_candidates(
        tmp_path / "b", [mrp()], reply=lambda m, s: "not json", attempts=2
    )
    assert [r["reason"] for r in rejects] == ["invalid_output"]
    assert result.manifest["validators"]["distractors.llm_invalid_output"] == 6
    only = mrp(
        sources=[0, 1]
    )  # the item names the lines wrong options may come from: two are too few
    _, _, rejects, _ = run_candidates(tmp_path / "c", [only])
    assert [r["reason"] for r in rejects] == ["too_few_sources"]


def test_rewording_that_changes_the_meaning_keeps_the_original(tmp_path: Path) -> None:
    def drift(messages: list[dict[str, str]], seed: int) -> str:
        if "Rewrite this statement" in messages[-1]["content"]:
            return json.dumps({"text": "C walks the dog in a sunny park."})
        return good_reply(messages, seed)

    result, recs, _, _ = run_candidates(tmp_path / "a", [mrp()], reply=drift)
    rec = recs[0]
    assert not rec["reworded"] and rec["options"][rec["answer"]] == "C takes out the milk carton."
    assert result.manifest["validators"]["reword.meaning_changed"] == 3
    assert result.manifest["validators"]["reword.kept_original"] == 1
    _, recs, _, llm = run_candidates(tmp_path / "b", [mrp()], reword_positive=False)
    assert not recs[0]["reworded"] and not any(
        "Rewrite this statement" in c["messages"][-1]["content"] for c in llm.calls
    )


def test_a_rewording_that_borrows_the_distractors_words_keeps_the_original(tmp_path: Path) -> None:
    """The positive reworded toward the distractors' words would be the option most like the others:
    a word of a distractor the original positive lacks makes the rewording fail
    (reword.borrowed)."""

    def borrow(messages: list[dict[str, str]], seed: int) -> str:
        req = messages[-1]["content"]
        if "Rewrite this statement" in req:
            other = re.search(r'"(C [^"]+)"', req.split("without changing", 1)[0])[
                1
            ]  # a distractor shown
            noun = other.rstrip(".").split()[-1]
            return json.dumps({"text": f"C takes out the milk carton near the {noun}."})
        return good_reply(messages, seed)

    result, recs, _, llm = run_candidates(tmp_path / "a", [mrp()], reply=borrow, length_ratio=None)
    assert any("Rewrite this statement" in c["messages"][-1]["content"] for c in llm.calls)
    assert (
        not recs[0]["reworded"]
        and recs[0]["options"][recs[0]["answer"]] == "C takes out the milk carton."
    )
    assert result.manifest["validators"]["reword.borrowed"] == 3


def test_request_prediction_never_shows_the_original_request(tmp_path: Path) -> None:
    rp = json.loads(ITEMS.read_text().splitlines()[1])
    rp["context"].append({"t": 12, "text": "[user] hey glasses, is this milk still good?"})

    def sneaky(messages: list[dict[str, str]], seed: int) -> str:
        req = messages[-1]["content"]
        if "wrong answer" in req:
            n = int(re.search(r"Write (\d+) wrong", req)[1])
            texts = [
                "Ask whether is this milk still good today.",
                "Add milk and eggs to the shopping list.",
                "Find a recipe that uses up old milk.",
                "Set a reminder to buy fresh milk now.",
            ]
            return json.dumps(
                {"distractors": texts[:n] if n == 3 else texts[-n:]}
            )  # the withheld one first
        return good_reply(messages, seed)

    result, recs, rejects, _ = run_candidates(
        tmp_path / "a",
        [rp],
        reply=sneaky,
        cite_sources=False,
        reword_positive=False,
        length_ratio=2.0,
    )
    assert result.accepted == 1, rejects
    rec = recs[0]
    shown = "\n".join([rec["question"], rec["visible"]["context"], *rec["options"]]).lower()
    assert (
        "is this milk still good" not in shown
    )  # the line holding it is hidden, the distractor turned away
    assert rec["privileged"]["withheld"] == ["is this milk still good"]
    assert result.manifest["validators"]["turned_away.withheld"] == 1
    assert "hmm, where did I put the milk" in rec["visible"]["context"]
