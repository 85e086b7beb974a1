"""Running the ``digital`` generator in tests: a persona pool made without a model (and the
module-scoped ``pool_file`` fixture that writes one), the scripted LLM that answers every digital
prompt (app items and cue items, optionally with planted bad Search items), the generator run in
process with it, and the goal-conditioned variant of the script. Shared by the digital tests
(test_digital_runs.py and test_digital_cues.py import ``pool_file``) and the tests of what
consumes digital runs (bank, release, pipeline)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gen.engine.runner import RunContext, run_config
from gen.generators.digital import DigitalConfig
from gen.generators.personas import sample_facts
from gen.llm import scripted_llm
from gen.schemas.personas import PersonaRecord

NAME = "digital"


# --------------------------------------------------------------------------- the persona pool


@cache
def _pool(seed: int, n: int) -> tuple[PersonaRecord, ...]:
    return tuple(
        PersonaRecord(
            **f.model_dump(),
            bio=f"{f.first_name} works as {f.occupation.lower()} "
            f"in {f.home_city} and enjoys {f.interests[0]}.",
        )
        for f in sample_facts(seed, n)
    )


def persona_pool(seed: int = 0, n: int = 8) -> list[PersonaRecord]:
    return [p.model_copy(deep=True) for p in _pool(seed, n)]


def write_pool(path: Path, seed: int = 0, n: int = 8) -> Path:
    path.write_text(
        "".join(p.model_dump_json() + "\n" for p in persona_pool(seed, n)), encoding="utf-8"
    )
    return path


@pytest.fixture(scope="module", name="pool_file")
def pool_file_fixture(tmp_path_factory) -> Path:
    return write_pool(tmp_path_factory.mktemp("pool") / "personas.jsonl")


# --------------------------------------------------------------------------- the scripted LLM

NUMBERED = re.compile(r"^(\d+)\. (.*)$", re.M)
WORDS = (
    "amber",
    "birch",
    "cobalt",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lagoon",
    "maple",
    "nectar",
    "opal",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "tundra",
)


def _words(seed: int, j: int) -> str:
    """Words that differ per seed and item, so no validator (duplicate, echo, repetition) fires."""
    s = seed * 31 + j
    return f"{WORDS[s % 20]} {WORDS[s // 20 % 20]} {seed % 1_000_003} {j}"


def digital_script(
    bad_search_every: int = 0, log: list[str] | None = None
) -> Callable[[list[dict[str, str]], int], str]:
    """A scripted backend for digital prompts: the app and the item count come from the prompt
    (the few-shot answer's keys; the numbered lines of the last user message).
    ``bad_search_every``: every that-many-th seed, Search items are the placeholder "query"."""

    def script(messages: list[dict[str, str]], seed: int) -> str:
        shot = json.loads(next(m["content"] for m in messages if m["role"] == "assistant"))
        user = [m for m in messages if m["role"] == "user"][-1]["content"]
        lines = [m.group(2) for m in NUMBERED.finditer(user)]
        assert lines or not any(
            k in shot for k in ("events", "conversations", "notes", "videos", "places", "tracks")
        )

        def w(j: int = 0) -> str:
            return _words(seed, j)

        if "events" in shot:
            out: dict[str, Any] = {
                "events": [
                    {"title": f"Team lunch {w(j)}", "location": f"Verde hall {w(j)}"}
                    for j in range(len(lines))
                ]
            }
        elif "conversations" in shot:
            convs = []
            for j, line in enumerate(lines):
                k = int(re.search(r"(\d+) messages, from: ", line).group(1))
                convs.append(
                    {
                        "topic": f"Plans {w(j)}",
                        "messages": [{"content": f"Message {x} about {w(j)}"} for x in range(k)],
                    }
                )
            out = {"conversations": convs}
        elif "notes" in shot:
            out = {
                "notes": [
                    {"title": f"Jotting {w(j)}", "content": f"Remember {w(j)} soon"}
                    for j in range(len(lines))
                ]
            }
        elif "searches" in shot and lines:
            bad = bad_search_every and seed % bad_search_every == 0
            if bad and log is not None:
                log.append("bad_search")
            out = {
                "searches": [
                    {"query": "query" if bad else f"where is {w(j)}", "query_type": "web"}
                    for j in range(len(lines))
                ]
            }
        elif "videos" in shot:
            out = {
                "videos": [
                    {
                        "title": f"Clip {w(j)}",
                        "duration_secs": 300 + j,
                        "tags": ["fun", f"tag{j}"],
                        "category": "Education",
                    }
                    for j in range(len(lines))
                ]
            }
        elif "places" in shot:
            out = {
                "places": [
                    {"name": f"Spot {w(j)}", "address": f"Road {w(j)}"} for j in range(len(lines))
                ]
            }
        elif "tracks" in shot:
            out = {
                "tracks": [
                    {"title": f"Song {w(j)}", "artist": f"Band {w(j)}", "album": f"Record {w(j)}"}
                    for j in range(len(lines))
                ]
            }
        elif "day_offset" in shot:
            out = {
                "title": f"Cue event {w()}",
                "location": f"Hall {w()}",
                "day_offset": 1,
                "start_time": "09:30",
                "duration_minutes": 45,
            }
        elif "earlier_messages" in shot:
            out = {
                "earlier_messages": [
                    {"content": f"Earlier {w(1)}"},
                    {"content": f"Before that {w(2)}"},
                ],
                "cue_message": f"Cue message {w()}",
            }
        elif "searches" in shot:
            out = {
                "searches": [{"query": f"cue query {w(j)}", "query_type": "web"} for j in range(2)]
            }
        elif "video" in shot:
            out = {
                "video": {
                    "title": f"Cue clip {w()}",
                    "duration_secs": 400,
                    "tags": ["cue"],
                    "category": "Education",
                }
            }
        elif "place" in shot:
            out = {"place": {"name": f"Cue spot {w()}", "address": f"Cue road {w()}"}}
        elif "track" in shot:
            out = {
                "track": {
                    "title": f"Cue song {w()}",
                    "artist": f"Cue band {w()}",
                    "album": f"Cue record {w()}",
                }
            }
        elif {"title", "content"} <= shot.keys():
            out = {"title": f"Cue jotting {w()}", "content": f"Cue words {w()}"}
        else:
            raise AssertionError(f"not a digital prompt: {shot}")
        return json.dumps(out)

    return script


def run_digital(out_dir: Path, pool: Path, script=None, **cfg: Any):
    settings = DigitalConfig(
        **{"cache_dir": None, "progress": "off", "persona_file": str(pool), **cfg}
    )
    ctx = RunContext(NAME, settings, out_dir)
    ctx.use(llm=scripted_llm(script or digital_script(), sampling=settings.llm))
    return run_config(NAME, settings, out_dir, ctx=ctx, quiet=True), ctx


def first_shot(messages: list[dict[str, str]]) -> str:
    """The first few-shot answer: it tells which app (and whether a cue) a prompt is for."""
    return next(m["content"] for m in messages if m["role"] == "assistant")


# --------------------------------------------------------------------------- goal-conditioned cues

QUOTED = re.compile(r'"([^"]+)"')


def goal_script() -> Callable[[list[dict[str, str]], int], str]:
    """digital_script, except that a cue item carries the cue seed's own words (what a model
    that follows the prompt writes)."""
    base = digital_script()

    def script(messages: list[dict[str, str]], seed: int) -> str:
        out = json.loads(base(messages, seed))
        user = [m for m in messages if m["role"] == "user"][-1]["content"]
        quoted = QUOTED.findall(user.splitlines()[-1])
        if not quoted:
            return json.dumps(out)
        seed_text = quoted[0]
        if "day_offset" in out:
            out["title"] = seed_text
        elif "cue_message" in out:
            out["cue_message"] = f"About {seed_text}"
        elif "place" in out:
            out["place"]["name"] = seed_text
        elif "track" in out:
            out["track"]["title"] = seed_text
        elif "video" in out:
            out["video"]["title"] = seed_text
        elif "searches" in out:
            out["searches"] = [{"query": seed_text, "query_type": "web"}]
        elif {"title", "content"} <= out.keys():
            out["content"] = seed_text
        return json.dumps(out)

    return script
