"""``introspect``: EgoIntrospect's task families from annotation files. Each family's
construction rule on small inputs written here (exact clips, labels, answers, refusals), the
interval algebra they share, Tool Selection's scoring, and runs on the project's examples
(records an MCQ reader takes, the funnel, seeded and reproducible). The event form of Memory
Assistance Recognition runs a candidates sub-run with a scripted writer."""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import check_run_folder, read_jsonl
from fakes import FakeEmbedder
from scripted import event_writer

from gen.engine.runner import RunContext, run_config
from gen.errors import InputError
from gen.generators.candidates import CandidatesConfig
from gen.generators.candidates.checks import Option, Pool, Vectors
from gen.generators.candidates.item import setup as candidates_setup
from gen.generators.candidates.item import source_order
from gen.generators.introspect import IntrospectConfig, plan
from gen.generators.introspect.assistance import build as assistance_build
from gen.generators.introspect.assistance import segment
from gen.generators.introspect.common import Draft, Refusal
from gen.generators.introspect.intensity import build as build_intensity
from gen.generators.introspect.lifespan import build as build_lifespan
from gen.generators.introspect.recording import build as build_recording
from gen.generators.introspect.timing import build as build_timing
from gen.generators.introspect.tools import (
    NO_TOOL,
    correct,
    distractor_rate,
    required_recall,
    tool_key,
)
from gen.intervals import complement, merge, place, split
from gen.kinds.mcq import load_banks
from gen.llm import scripted_llm
from gen.paths import EXAMPLES
from gen.schemas.candidates import CandidateItem
from gen.schemas.introspect import (
    EmotionSegment,
    InterruptSession,
    MemoryItem,
    MemorySession,
    RecordingSession,
)

NAME = "introspect"
EX = EXAMPLES / "introspect"


def cfg(**kw: Any) -> IntrospectConfig:
    return IntrospectConfig(**{"input": "x", "cache_dir": None, "progress": "off", **kw})


def drafts(built: list[Any]) -> list[Draft]:
    return [b for b in built if isinstance(b, Draft)]


def refusals(built: list[Any]) -> list[tuple[str, str]]:
    return [(b.source, b.reason) for b in built if isinstance(b, Refusal)]


# --------------------------------------------------------------------------- intervals


def test_interval_algebra() -> None:
    assert merge([(10, 20), (15, 30), (40, 50), (-5, 2), (95, 120), (60, 60)], 100) == [
        (0, 2),
        (10, 30),
        (40, 50),
        (95, 100),
    ]
    assert complement([(0, 2), (10, 30)], 40) == [(2, 10), (30, 40)]
    assert complement([], 5) == [(0.0, 5)]
    assert split((0, 700), 300, 15) == [(0, 300), (300, 600), (600, 700)]
    assert split((0, 610), 300, 15) == [(0, 300), (300, 600)]  # the 10-second rest is dropped
    rng = random.Random(1)
    w = place(10, (0, 100), [(20, 80)], rng, gap=5)
    assert w is not None and (w[1] <= 15 or w[0] >= 85)
    assert place(10, (0, 30), [(5, 25)], rng) is None


# --------------------------------------------------------------------------- recording


def session(**kw: Any) -> RecordingSession:
    lines = [{"t": float(t), "text": f"scene {t}"} for t in range(0, 1200, 10)]
    row = {
        "session_id": "s",
        "duration": 1200,
        "timeline": lines + [{"t": 101, "text": "take a photo", "speech": True}],
        "commands": [
            {"command_id": "p", "kind": "photo", "time": 100, "target": {"label": "mural"}},
            {"command_id": "v", "kind": "video", "time": 300, "start": 300, "end": 330},
        ],
        "objects": [
            {"label": x, "time": 100 + d}
            for x, d in (("mural", 0), ("bench", 2), ("tree", -3), ("lamp", 4), ("dog", 9))
        ],
    }
    return RecordingSession.model_validate({**row, **kw})


def test_recording_windows_negatives_and_the_photo_test() -> None:
    built = build_recording([session()], cfg(task="recording"))
    tests = [d for d in drafts(built) if d.question_type == "recording_test"]
    pos = [d for d in tests if d.answer == 0]
    neg = [d for d in tests if d.answer == 1]
    assert [d.extra["window"] for d in pos] == [
        {"start": 70, "end": 130},
        {"start": 270, "end": 360},
    ]  # +-30 s
    assert len(neg) == 4 and all(d.options == ["yes", "no"] for d in tests)
    for d in neg:  # same length as its positive, away from every positive window and command
        w = d.extra["window"]
        assert not any(
            w["start"] < p.extra["window"]["end"] and p.extra["window"]["start"] < w["end"]
            for p in pos
        )
        assert d.privileged["commands_in_clip"] == []
    assert sorted(d.extra["window"]["end"] - d.extra["window"]["start"] for d in neg) == [
        60,
        60,
        90,
        90,
    ]
    assert all("take a photo" not in d.visible["context"] for d in tests)  # no audio
    photo = next(d for d in drafts(built) if d.question_type == "photo_test")
    assert photo.options[photo.answer] == "mural" and len(photo.options) == 4
    assert set(photo.options) == {
        "mural",
        "bench",
        "tree",
        "lamp",
    }  # the dog is 9 s away: outside 10 s
    with_names = session(
        timeline=[
            {"t": 95.0, "text": "A mural of a whale."},
            {"t": 98.0, "text": "A bench."},
            {"t": 99.0, "text": "Pigeons on the square."},
        ]
    )
    shown = next(
        d
        for d in drafts(build_recording([with_names], cfg(task="recording")))
        if d.question_type == "photo_test"
    ).visible["context"]
    assert (
        "mural" not in shown and "bench" not in shown.lower() and "Pigeons" in shown
    )  # every option's line alike
    assert build_recording([session()], cfg(task="recording")) == built  # seeded


def test_recording_refusals() -> None:
    crowded = session(
        duration=140,
        timeline=[{"t": 5.0, "text": "x"}],
        commands=[{"command_id": "p", "kind": "photo", "time": 60, "target": {"label": "mural"}}],
    )
    got = refusals(build_recording([crowded], cfg(task="recording")))
    assert ("s/p/negative1", "no_room_for_negative") in got and ("s/p", "too_few_objects") in got
    untargeted = session(commands=[{"command_id": "p", "kind": "photo", "time": 100}])
    assert ("s/p", "no_photo_target") in refusals(
        build_recording([untargeted], cfg(task="recording"))
    )
    with pytest.raises(ValueError, match="a video command needs start and end"):
        session(commands=[{"command_id": "v", "kind": "video", "time": 3}])


def test_a_distractor_object_is_not_drawn_twice_in_a_session() -> None:
    objects = [
        {"label": x, "time": t}
        for t in (100, 200)
        for x in ("mural", "bench", "tree", "lamp", "sign", "bin", "car")
    ]
    s = session(
        commands=[
            {"command_id": "p1", "kind": "photo", "time": 100, "target": {"label": "mural"}},
            {"command_id": "p2", "kind": "photo", "time": 200, "target": {"label": "mural"}},
        ],
        objects=objects,
    )
    photos = [
        d
        for d in drafts(build_recording([s], cfg(task="recording")))
        if d.question_type == "photo_test"
    ]
    wrong = [o for d in photos for i, o in enumerate(d.options) if i != d.answer]
    assert len(wrong) == 6 == len(set(wrong))


# --------------------------------------------------------------------------- emotion intensity


def seg(
    sid: str, label: str, intensity: int, reason: str | None = None, participant: str = "P1"
) -> EmotionSegment:
    return EmotionSegment(
        segment_id=sid,
        participant=participant,
        start=0,
        end=10,
        labels=[label],
        reason=reason or f"reason {sid}",
        intensity=intensity,
    )


def test_emotion_intensity_compares_within_one_participant() -> None:
    rows = [
        seg("a", "Joy", 2),
        seg("b", "Joy", 5),
        seg("c", "Joy", 3),
        seg("d", "Joy", 1),
        seg("x", "Stress", 4, "reason a"),
        seg("y", "Stress", 2),
        seg("z", "Joy", 4, participant="P2"),
    ]
    built = build_intensity(rows, cfg(task="emotion_intensity"))
    d = drafts(built)[0]
    assert set(d.options) == {"Joy: reason a", "Joy: reason b", "Joy: reason c", "Joy: reason d"}
    best = {"highest": "Joy: reason b", "lowest": "Joy: reason d"}[
        d.question_type.rsplit("_", 1)[1]
    ]
    assert d.options[d.answer] == best
    # Stress has two: filled with P1's other segments whose reason differs ("reason a" is taken by
    # x)
    stress = drafts(built)[1]
    assert stress.privileged["target_label"] == "Stress" and len(stress.options) == 4
    assert "Joy: reason a" not in stress.options and all(
        not o.startswith("Joy: reason z") for o in stress.options
    )
    # G.1: a group under four (one included) is filled, never refused
    assert not any(r == "group_too_small" for _, r in refusals(built))
    # directions alternate (balanced highest / lowest)
    assert [x.question_type for x in drafts(built)] == [
        "emotion_intensity_highest",
        "emotion_intensity_lowest",
    ]


def test_emotion_intensity_ties_and_labels() -> None:
    tied = [seg("a", "Joy", 3), seg("b", "Joy", 3), seg("c", "Joy", 3), seg("d", "Joy", 3)]
    assert [r for _, r in refusals(build_intensity(tied, cfg(task="emotion_intensity")))] == [
        "tied_intensity"
    ]
    one_way = [seg("a", "Joy", 5), seg("b", "Joy", 5), seg("c", "Joy", 3), seg("d", "Joy", 1)]
    d = drafts(build_intensity(one_way, cfg(task="emotion_intensity")))[0]
    assert d.question_type == "emotion_intensity_lowest" and d.options[d.answer] == "Joy: reason d"
    custom = build_intensity([seg("n", "Nostalgia", 5)], cfg(task="emotion_intensity"))
    assert refusals(custom) == [("n", "label_not_in_taxonomy")]


# --------------------------------------------------------------------------- tool selection


@pytest.mark.parametrize(
    ("required", "helpful", "predicted", "ok"),
    [
        ({"a"}, {"b"}, {"a"}, True),
        ({"a"}, {"b"}, {"a", "b"}, True),
        ({"a"}, {"b"}, {"a", "c"}, False),
        ({"a", "b"}, set(), {"a"}, False),
        (set(), {"b"}, {NO_TOOL}, True),
        (set(), {"b"}, {"b"}, True),
        (set(), {"b"}, set(), False),
        (set(), {"b"}, {"b", "c"}, False),
        (set(), set(), {NO_TOOL}, True),
        (set(), set(), {"a"}, False),
        ({"a"}, set(), {"a", NO_TOOL}, False),
    ],
)
def test_tool_selection_hierarchical_correctness(
    required: set[str], helpful: set[str], predicted: set[str], ok: bool
) -> None:
    assert correct(required, helpful, predicted) is ok


def test_tool_selection_metrics_and_names() -> None:
    assert required_recall([({"a"}, {"a", "x"}), ({"a", "b"}, {"a"}), (set(), {NO_TOOL})]) == 0.5
    assert distractor_rate(
        [({"a"}, set(), {"a", "x"}), (set(), {"b"}, {"b"}), (set(), set(), {NO_TOOL})]
    ) == pytest.approx(1 / 3)
    assert tool_key(" Maps-API ") == tool_key("maps_api") == tool_key("maps api") == "maps_api"


def test_tool_selection_on_the_examples(tmp_path: Path) -> None:
    out = tmp_path / "ts"
    c = cfg(task="tool_selection", input=str(EX / "requests.jsonl"), tools=str(EX / "tools.yaml"))
    result = run_config(NAME, c, out, quiet=True)
    recs = {r["source"]: r for r in read_jsonl(out / "introspect.jsonl")}
    assert result.rejected == 1 and read_jsonl(out / "rejects.jsonl")[0]["reason"] == "unknown_tool"

    def names(r: dict[str, Any], field: str) -> list[str]:
        return [r["options"][i].split(":")[0].replace(" ", "_") for i in r[field]]

    r3 = recs["P02-r3"]  # OCR + translator -> ocr, translation
    assert names(r3, "answers") == ["ocr", "translation"]
    r4 = recs["P02-r4"]  # helpful only: "No tool needed" or the calculator
    assert r4["options"][r4["answer"]] == NO_TOOL and set(names(r4, "acceptable")) == {
        "calculator",
        "No_tool_needed",
    }
    r7 = recs["P02-r7"]  # "transit-schedule" required, "Maps API" helpful
    assert names(r7, "answers") == ["transit_schedule"]
    assert set(names(r7, "acceptable")) == {"transit_schedule", "location_search"}
    assert r7["options"][-1] == NO_TOOL and r7["options"][4].startswith("location search: places")
    bad = tmp_path / "tools.yaml"
    bad.write_text(
        "tools:\n  - {name: a, description: x, aliases: [b]}\n  - {name: b2, description: y, "
        "aliases: [B]}\n"
    )
    with pytest.raises(InputError, match="'B' names both 'a' and 'b2'"):
        plan(cfg(task="tool_selection", input=str(EX / "requests.jsonl"), tools=str(bad)))
    with pytest.raises(ValueError, match="needs tools="):
        cfg(task="tool_selection")


# --------------------------------------------------------------------------- proactive timing


def test_proactive_timing_clips() -> None:
    lines = [{"t": float(t), "text": f"line {t}"} for t in range(0, 1000, 7)]
    s = InterruptSession.model_validate(
        {
            "session_id": "s",
            "duration": 1000,
            "timeline": lines,
            "forbidden": [
                {"start": 100, "end": 200, "reason": "driving"},
                {"start": 190, "end": 510},
                {"start": 600, "end": 610},
                {"start": 990, "end": 1200},
            ],
        }
    )
    built = build_timing([s], cfg(task="proactive_timing"))
    got = [
        (d.extra["window"]["start"], d.extra["window"]["end"], d.options[d.answer])
        for d in drafts(built)
    ]
    assert got == [
        (0, 100, "True"),
        (100, 400, "False"),
        (400, 510, "False"),
        (510, 600, "True"),
        (610, 910, "True"),
        (910, 990, "True"),
    ]  # 600-610 and 1000-... dropped (< 15 s / outside)
    assert drafts(built)[1].privileged["forbidden_reasons"] == ["driving"]
    assert all(
        "driving" not in d.question and "driving" not in d.visible["context"] for d in drafts(built)
    )


# --------------------------------------------------------------------------- memory


def memory(**kw: Any) -> MemoryItem:
    return MemoryItem.model_validate(
        {"memory_id": "m", "time": 100, "content": "parked at B14", "lifespan": "short_term", **kw}
    )


def test_memory_segments_are_type_aware() -> None:
    c = cfg(task="memory_assistance")
    assert segment(memory(start=98, end=102), 1000, c) == ("STM", (94, 106))  # extended to 12 s
    assert segment(memory(start=80, end=100), 1000, c) == ("STM", (80, 100))
    assert segment(memory(lifespan="long_term", object="sign"), 1000, c) == ("LTO", (85, 115))
    assert segment(memory(lifespan="long_term", start=0, end=200), 1000, c) == (
        "LTE",
        (77.5, 122.5),
    )  # 45 s cap
    assert segment(memory(lifespan="long_term"), 1000, c) == ("LTE", None)
    assert segment(memory(lifespan=None, usage_hours=30, start=90, end=95), 1000, c)[0] == "LTE"


def test_memory_lifespan_labels_clips_and_refusals() -> None:
    lines = [{"t": float(t), "text": f"line {t}"} for t in range(0, 400, 3)] + [
        {"t": 101, "text": "help me remember the spot", "speech": True}
    ]
    s = MemorySession.model_validate(
        {
            "session_id": "s",
            "duration": 400,
            "timeline": lines,
            "memories": [
                {
                    "memory_id": "a",
                    "time": 100,
                    "start": 90,
                    "end": 140,
                    "content": "bay B14",
                    "lifespan": "short_term",
                },
                {
                    "memory_id": "b",
                    "time": 200,
                    "content": "the poster's band names",
                    "usage_hours": 100,
                },
                {
                    "memory_id": "c",
                    "time": 300,
                    "content": "the code",
                    "lifespan": "long_term",
                    "usage_hours": 2,
                },
                {
                    "memory_id": "d",
                    "time": 350,
                    "content": "call the dentist tomorrow",
                    "lifespan": "short_term",
                },
            ],
        }
    )
    built = build_lifespan([s], cfg(task="memory_lifespan"))
    a, b, d = drafts(built)
    assert a.options[a.answer] == "within 24 hours" and a.extra["window"] == {
        "start": 92.5,
        "end": 107.5,
    }
    assert b.privileged["label"] == "more_than_24h" and b.privileged["label_from"] == "usage_hours"
    assert "help me remember" not in a.visible["context"]  # no audio
    # K.1 keeps content that says when it is needed: the candidate reads the clip, not the content
    assert refusals(built) == [("s/c", "lifespan_conflict")]
    assert d.privileged["content"] == "call the dentist tomorrow"
    assert all("tomorrow" not in x.question and x.question == a.question for x in (a, b, d))
    assert d.prompt is not None and d.prompt[1] == {"context": d.visible["context"]}


# --------------------------------------------------------------------------- runs on the examples


@pytest.mark.parametrize(
    ("task", "file", "extra"),
    [
        ("recording", "recording.jsonl", {}),
        ("emotion_intensity", "emotions.jsonl", {}),
        ("proactive_timing", "interruptions.jsonl", {}),
        ("memory_lifespan", "memories.jsonl", {}),
        ("memory_assistance", "memories.jsonl", {"form": "object"}),
    ],
)
def test_each_family_runs_on_its_example_and_an_mcq_reader_takes_it(
    tmp_path: Path, task: str, file: str, extra: dict[str, Any]
) -> None:
    out = tmp_path / task
    result = run_config(NAME, cfg(task=task, input=str(EX / file), **extra), out, quiet=True)
    check_run_folder(out, NAME, result.requested, hydra=False)
    assert result.accepted > 0
    f = result.manifest[NAME]["funnel"]
    assert f["records"] == result.accepted and sum(f["refused_by"].values()) == result.rejected
    bank = load_banks(out)[0]
    assert len(bank.items) == result.accepted and all(it.answer is not None for it in bank.items)
    again = tmp_path / f"{task}2"
    run_config(NAME, cfg(task=task, input=str(EX / file), **extra), again, quiet=True)
    assert (out / "introspect.jsonl").read_bytes() == (again / "introspect.jsonl").read_bytes()


def test_memory_assistance_object_form_on_the_example(tmp_path: Path) -> None:
    out = tmp_path / "mar"
    run_config(
        NAME,
        cfg(task="memory_assistance", input=str(EX / "memories.jsonl"), form="object"),
        out,
        quiet=True,
    )
    for r in read_jsonl(out / "introspect.jsonl"):
        assert r["options"][r["answer"]] == r["privileged"]["object"]
        assert len(set(r["options"])) == 4
        subs = r["privileged"][
            "subclips"
        ]  # inside the shown window, apart from each other by min_gap
        assert all(r["window"]["start"] <= a <= b <= r["window"]["end"] for a, b in subs)
        assert all(y[0] >= x[1] + 5 for x, y in zip(subs, subs[1:], strict=False))
        assert "remember" not in r["visible"]["context"].lower()


def test_memory_assistance_event_form_runs_a_candidates_subrun(tmp_path: Path) -> None:
    out = tmp_path / "mar"
    c = cfg(task="memory_assistance", input=str(EX / "memories.jsonl"), form="event")
    ctx = RunContext(NAME, c, out).use(llm=scripted_llm(event_writer), embedder=FakeEmbedder())
    result = run_config(NAME, c, out, ctx=ctx, quiet=True)
    check_run_folder(out, NAME, result.requested, hydra=False)
    assert [s["generator"] for s in result.manifest["subruns"]] == ["candidates"]
    items = read_jsonl(out / "event_items.jsonl")
    assert len(items) == result.requested and all(
        it["task"] == "memory_assistance_event" for it in items
    )
    recs = read_jsonl(out / "introspect.jsonl")
    rejects = read_jsonl(out / "rejects.jsonl")
    assert len(recs) + len(rejects) == result.requested
    contents = {it["item_id"]: it["positive"]["text"] for it in items}
    for r in recs:
        assert r["question_type"] == "memory_assistance_event" and r["privileged"]["subtype"] in (
            "STM",
            "LTE",
        )
        assert r["privileged"]["positive"] == contents[r["source"]]
        assert "remember" not in r["visible"]["context"].lower()
    assert Counter(r["reason"] for r in rejects) == Counter(
        result.manifest["counts"]["rejects_by_reason"]
    )
    assert recs, rejects  # the sub-run's records come back as this family's


def test_emotion_intensity_fills_a_group_of_one_as_g1_does() -> None:
    """G.1: "When fewer than four valid clips are available for a target participant-emotion
    group, the remaining slots are filled with clips from the same participant that do not belong
    to the target emotion and do not share the same reason description"."""
    rows = [
        seg("z", "Joy", 4, participant="P2"),
        seg("s1", "Stress", 2, participant="P2"),
        seg("s2", "Stress", 5, participant="P2", reason="reason z"),  # shares z's reason
        seg("a1", "Awkward", 1, participant="P2"),
        seg("r1", "Relaxation", 3, participant="P2"),
    ]
    built = build_intensity(rows, cfg(task="emotion_intensity"))
    joy = next(d for d in drafts(built) if d.privileged["target_label"] == "Joy")
    assert len(joy.options) == 4 and sum(o.startswith("Joy:") for o in joy.options) == 1
    assert "Stress: reason z" not in joy.options  # the same reason is never a filler
    assert set(joy.options) == {
        "Joy: reason z",
        "Stress: reason s1",
        "Awkward: reason a1",
        "Relaxation: reason r1",
    }
    assert not refusals(built)
    strict = build_intensity(rows, cfg(task="emotion_intensity", min_group=2))
    assert ("P2/Joy", "group_too_small") in refusals(strict)


def test_memory_lifespan_records_carry_k1_chain_of_thought_prompt(tmp_path: Path) -> None:
    out = tmp_path / "mli"
    run_config(NAME, cfg(task="memory_lifespan", input=str(EX / "memories.jsonl")), out, quiet=True)
    recs = read_jsonl(out / "introspect.jsonl")
    assert recs
    for r in recs:
        system, user = (m["content"] for m in r["prompt"])
        assert all(f"[{step}]" in system for step in ("WHAT", "CONTEXT", "REUSABILITY"))
        assert "within_24h or more_than_24h" in system
        assert r["visible"]["context"] in user and r["privileged"]["content"] not in r["question"]
    hashes = read_jsonl(out / "introspect.jsonl") and (out / "manifest.json").read_text()
    assert "introspect/lifespan.jinja" in hashes


CONTENT_STOP = {"a", "an", "the", "of", "in", "on", "at", "with", "and", "to", "for", "by"}


def _stem(w: str) -> str:
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w


def _named(option: str, context: str) -> bool:
    """The test's own reading of "the context names the option": one line holds every word of the
    option (case, punctuation and a plural s ignored)."""
    want = {_stem(w) for w in re.findall(r"[a-z0-9]+", option.lower())} - CONTENT_STOP
    return any(
        want <= {_stem(w) for w in re.findall(r"[a-z0-9]+", line.split("|", 1)[-1].lower())}
        for line in context.splitlines()
    )


def test_memory_assistance_object_form_names_every_option_or_none(tmp_path: Path) -> None:
    """Issue 42.1: on the example, in every object-form record the visible context names either
    every option or none of them (read from the records, not the code)."""
    out = tmp_path / "mar"
    c = cfg(task="memory_assistance", input=str(EX / "memories.jsonl"), form="object")
    result = run_config(NAME, c, out, quiet=True)
    recs = read_jsonl(out / "introspect.jsonl")
    assert len(recs) == 2 and result.rejected == 0
    for r in recs:
        named = [_named(o, r["visible"]["context"]) for o in r["options"]]
        assert all(named) or not any(named), (r["options"], named)


def test_memory_assistance_object_form_refuses_an_answer_the_text_never_shows() -> None:
    code = {t: f"x{chr(97 + t // 50)}{chr(97 + t % 50 // 5)}" for t in range(0, 400, 5)}
    lines = [{"t": float(t), "text": f"The wearer walks past sign {code[t]}."} for t in code]
    lines[20] = {"t": 100.0, "text": "The wearer looks at a heart drawn in the foam."}
    s = MemorySession.model_validate(
        {
            "session_id": "s",
            "duration": 400,
            "timeline": lines,
            "objects": [{"label": f"sign {c}", "time": t} for t, c in code.items()],
            "memories": [
                {
                    "memory_id": "m",
                    "time": 100,
                    "content": "the heart",
                    "lifespan": "long_term",
                    "object": "latte art",
                }
            ],
        }
    )
    built = assistance_build([s], cfg(task="memory_assistance", form="object"))
    assert refusals(built) == [("s/m", "answer_not_shown")]
    lines[20] = {"t": 100.0, "text": "The wearer looks at the latte art drawn in the foam."}
    s = MemorySession.model_validate({**s.model_dump(), "timeline": lines})
    (d,) = drafts(assistance_build([s], cfg(task="memory_assistance", form="object")))
    assert not any(_named(o, d.visible["context"]) for o in d.options)  # hidden alike
    w = d.extra["window"]
    signs = sum(w["start"] <= t <= w["end"] for t in code) - 1  # line 20 is the latte art
    assert d.visible["context"].count("walks past sign") == signs - 3  # all but the wrong options


def test_memory_assistance_event_form_takes_one_wrong_option_per_subclip(tmp_path: Path) -> None:
    """K.1: "we sample three non-overlapping sub-clips ... Each sub-clip is then converted into one
    option"."""
    out = tmp_path / "mar"
    c = cfg(task="memory_assistance", input=str(EX / "memories.jsonl"), form="event")
    ctx = RunContext(NAME, c, out).use(llm=scripted_llm(event_writer), embedder=FakeEmbedder())
    run_config(NAME, c, out, ctx=ctx, quiet=True)
    items = {it["item_id"]: it for it in read_jsonl(out / "event_items.jsonl")}
    recs = read_jsonl(out / "introspect.jsonl")
    assert recs
    for r in recs:
        it = items[r["source"]]
        assert len(it["source_groups"]) == 3
        group_of = {
            it["context"][j]["t"]: g for g, js in enumerate(it["source_groups"]) for j in js
        }
        times = [t for k, t in r["privileged"]["option_times"].items() if int(k) != r["answer"]]
        groups = [group_of[t] for t in times]
        assert len(groups) == 3 and len(set(groups)) == 3, groups


def test_a_second_option_from_one_source_group_is_turned_away() -> None:
    moments = [
        "The wearer opens a red door.",
        "The wearer lifts a blue box.",
        "The wearer waters a green plant.",
        "The wearer reads a yellow map.",
    ]
    item = CandidateItem.model_validate(
        {
            "item_id": "i",
            "task": "memory_assistance_event",
            "question": "q?",
            "positive": {"text": "The wearer parks the car by pillar B14."},
            "context": [{"t": float(t), "text": x} for t, x in enumerate(moments)],
            "source_groups": [[0, 1], [2, 3]],
        }
    )
    cc = CandidatesConfig(kind="generated", input="x", cache_dir=None, progress="off")
    s = candidates_setup(None, cc, item, Vectors(FakeEmbedder()))  # type: ignore[arg-type]
    order = source_order(s, 0)
    assert {s.groups[order[0]], s.groups[order[1]]} == {0, 1}  # one of each group first
    pool = Pool(s, 2, lambda _: None)

    def offered(j: int) -> bool:
        return pool.offer(Option(moments[j], moments[j], "generated", float(j), line=j))

    assert offered(0)
    assert not offered(1) and pool.turned["same_source_group"] == 1
    assert offered(2) and pool.full
