"""``candidates``: the items and timeline readers, every check on planted violations, collision
avoidance, the three kinds (generated, label_reason, sampled) end to end with a scripted LLM,
the seeded shuffle and its key, rewording, rerank=true, determinism, and that nocontext, audit
and bank read the records."""

from __future__ import annotations

import json
import random
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import read_jsonl
from fakes import FakeEmbedder

from gen.errors import InputError
from gen.generators.candidates import (
    CandidatesConfig,
    detect_format,
    key,
    narration_text,
    read_items,
    timeline_items,
)
from gen.generators.candidates.checks import Option, Pool, Vectors, clean
from gen.generators.candidates.item import input_problem, setup
from gen.generators.candidates.recall import read_recall, recall_items
from gen.llm import OpenAIConfig, scripted_llm
from gen.mcq import load_banks
from gen.paths import EXAMPLES
from gen.registry import REGISTRY
from gen.runner import RunContext, run
from gen.schemas.candidates import EMOTIONS, CandidateItem, CandidateRecord
from gen.timelines import Clip, Line

NAME = "candidates"
EGOTOM = Path(__file__).resolve().parents[3] / "shared" / "data" / "egotom_paper"
ITEMS = EXAMPLES / "candidates" / "items.jsonl"


LINES = [
    (0, "#C C opens the kitchen cupboard."),
    (5, "#C C takes out a blue bowl."),
    (10, "#C C pours cereal into the bowl."),
    (15, "#C C closes the kitchen cupboard."),
    (20, "#C C opens the fridge door."),
    (25, "#C C takes out the milk carton."),
    (30, "#C C pours milk into the bowl."),
    (35, "#C C puts the carton back."),
    (40, "#C C picks up a metal spoon."),
    (45, "#C C sits down at the table."),
]


def mrp(**kw: Any) -> dict[str, Any]:
    """A memory-recall item around 00m:25s; ``others`` holds the spoon at 00m:40s."""
    row = {
        "item_id": "mrp-1",
        "task": "memory_recall",
        "question": "What did C do at 00m:25s?",
        "positive": {"text": "C takes out the milk carton.", "time": 25},
        "context": [{"t": t, "text": x} for t, x in LINES],
        "window": {"start": 0, "end": 45},
        "others": [{"text": "C picks up a metal spoon.", "time": 40}],
        "group": "kitchen-1",
    }
    return {**row, **kw}


REASONS = {
    "Joy": "C smiled at the sunny garden while putting the tools away",
    "Surprise": "a neighbour suddenly knocked on the door during the repair",
    "Stress": "the drill battery was nearly empty before the last screw",
    "Social Connection": "C called a friend to show the repaired table",
    "Achievement": "C finally fixed the wobbly table leg on a first try",
    "Disappointment": "one screw head broke off halfway and the leg still wobbles",
    "Awkward": "C dropped all the screws on the floor in front of guests",
    "Boring": "tightening the same screws again took a long and dull hour",
    "Relaxation": "C finally sat down with a cup of tea after all the work",
}


MOMENT = re.compile(
    r'Rewrite this moment as a wrong answer in the same style: "\d+m:\d+s \| (.*)"$'
)


def good_reply(messages: list[dict[str, str]], seed: int) -> str:
    """A well-behaved writer: restyles each moment it is given, writes distinct wrong options for
    a free-text context and one distinct reason per label, rewords the positive with the same
    words, reranks in the given order."""
    req = messages[-1]["content"]
    if m := MOMENT.search(req):
        return json.dumps({"text": narration_text(m[1])})
    if "wrong answer" in req:
        need = int(re.search(r"Write (\d+) wrong", req)[1])
        return json.dumps(
            {
                "distractors": [
                    f"Remind me to water the {w} plants tonight."
                    for w in ("garden", "balcony", "kitchen", "office", "bedroom")[:need]
                ]
            }
        )
    if "For each of these feelings" in req:
        labels = req.rsplit("as long: ", 1)[1].rstrip(".").split(", ")
        return json.dumps({label: REASONS[label] for label in labels})
    if "Rewrite this statement" in req:
        text = req.rsplit('without changing what it says: "', 1)[1].rstrip('"')
        words = text.rstrip(".").split()
        return json.dumps(
            {"text": " ".join([words[0], *reversed(words[1:])]) + "."}
        )  # same bag of words
    if "List every candidate exactly once" in req:
        texts = re.findall(
            r"^(\d+)\. (?:\[[^\]]*\] )?(.*)$", req.rsplit("Candidates, numbered:", 1)[1], re.M
        )
        return json.dumps(
            {
                "ranking": [
                    {"id": int(i), "text": t, "duplicate_of": None, "grounded": True}
                    for i, t in texts
                ],
                "reason": "in the given order",
            }
        )
    raise AssertionError(f"unexpected prompt: {req[:200]}")


def write_items(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_candidates(
    out: Path, rows: list[dict[str, Any]] | Path, reply: Any = good_reply, **cfg: Any
):
    path = (
        rows
        if isinstance(rows, Path)
        else write_items(out.parent / f"{out.name}_items.jsonl", rows)
    )
    config = CandidatesConfig(input=str(path), cache_dir=None, progress="off", **cfg)
    llm = scripted_llm(reply, sampling=config.llm)
    ctx = RunContext(NAME, config, out).use(llm=llm, embedder=FakeEmbedder())
    result = run(NAME, config, out, ctx=ctx, quiet=True)
    return result, read_jsonl(out / "candidates.jsonl"), read_jsonl(out / "rejects.jsonl"), llm


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
    from gen.timelines import speaker_of

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
        # the key: replaying the seeded shuffle puts the positive where the record says
        order = list(range(4))
        random.Random(rec.shuffle_seed).shuffle(order)
        assert order.index(0) == rec.answer
    assert len(set(answers)) > 1  # per-item seeds: the positive does not sit at one position
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
        result = run(NAME, config, out, ctx=ctx, quiet=True)
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
        order = list(range(4))
        rng.shuffle(order)
        assert origins == [(["positive", *[f"sampled:{p}" for p in picks]])[i] for i in order]
        assert rec["answer"] == order.index(0)
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
