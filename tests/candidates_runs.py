"""What the candidates tests share: the example item (a 10-line kitchen timeline), a well-behaved
scripted writer and a run of the generator in process with it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conftest import read_jsonl
from fakes import FakeEmbedder

from gen.engine.runner import RunContext, run_config
from gen.generators.candidates import (
    CandidatesConfig,
    narration_text,
)
from gen.llm import scripted_llm
from gen.paths import EXAMPLES

NAME = "candidates"
EGOTOM = Path(__file__).resolve().parents[2] / "shared" / "data" / "egotom_paper"
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
    result = run_config(NAME, config, out, ctx=ctx, quiet=True)
    return result, read_jsonl(out / "candidates.jsonl"), read_jsonl(out / "rejects.jsonl"), llm
