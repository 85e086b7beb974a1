"""Audit check ``context_states``: the visible context states the answer. Its pure parts, and the
WAGIBench chain's MCQs built with the goal cues as they were (``tests/fixtures/digital/
goal_cue_before.jinja``: the goal's own query or content as the cue, and the apps that perform the
goal) and as they are: the check fires on the first bank and passes the second."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import read_jsonl
from digital_runs import goal_script, write_pool
from fakes import FakeEmbedder

from gen.engine.runner import RunContext, run_config
from gen.generators.audit import AuditConfig
from gen.generators.audit.checks.context_states import containment, distinctive, option_words
from gen.generators.digital import DigitalConfig
from gen.generators.distractors import DistractorsConfig
from gen.llm import scripted_llm
from gen.paths import EXAMPLES, PROMPTS
from gen.schemas.digital import App
from gen.templates import Prompts
from gen.text.words import content_words

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "digital" / "goal_cue_before.jinja"
BEFORE_APPS = {
    "communication": [App.Messaging],
    "translate": [App.Messaging],
    "temporal_attention": [App.Calendar],
    "find_directions": [App.Maps, App.Calendar],
    "entertain": [App.Music, App.Videos],
    "search": [App.Search],
    "store_memory": [App.Notes],
    "shop": [App.Notes, App.Search],
    "guided_activity": [App.Videos, App.Search],
    "control_environment": [],
}
"""The goal apps of the cues as they were: the app that performs the goal (a search in Search)."""
GOALS = 36


def test_distinctive_words_and_containment() -> None:
    options = [
        "Do a search for opening hours of the post office",
        "Do a search for how to feed a sourdough starter",
        "Shop for paper towels",
        '{"type": "shop", "content": "paper plates"}',
    ]
    assert option_words(options[3]) == {"paper", "plates"}  # a goal dict by its values
    d = distinctive(options)
    assert (
        d[0] == {"opening", "hours", "post", "office"}
        and d[2] == {"shop", "towels"}
        and d[3] == {"plates"}
    )
    share = containment(options, {"opening", "hours", "post", "office", "street"})
    assert share == [1.0, 0.0, 0.0, 0.0]
    assert (
        containment(options, {"office", "tom"})[0] == 0.25
    )  # naming the thing is not stating the goal


def bank_of(tmp: Path, before: bool) -> Path:
    """The chain's MCQs of the example bank's first GOALS goals: digital goals= (scripted LLM: a cue
    item carries its seed's words), then distractors digital= (each record shows its bundle's
    key-only state)."""
    goals = tmp / "goals.jsonl"
    if not goals.exists():
        goals.write_text((EXAMPLES / "goals.jsonl").read_text())
    options: dict[str, Any] = {
        "goals": str(goals),
        "n": GOALS,
        "persona_file": str(write_pool(tmp / "pool.jsonl")),
        # the bag-of-words fake cannot rank a one-word hint; the rank test is off here
        "cue_rank_max": 10_000,
        "cache_dir": None,
        "progress": "off",
    }
    if before:  # as it was: the performing apps, and no cue_states_goal test
        options |= {"goal_apps": BEFORE_APPS, "cue_action_max": 1.0}
    cfg = DigitalConfig(**options)
    name = "before" if before else "after"
    ctx = RunContext("digital", cfg, tmp / f"digital_{name}").use(
        llm=scripted_llm(goal_script(), sampling=cfg.llm), embedder=FakeEmbedder()
    )
    if before:
        root = tmp / "prompts"
        if not root.exists():
            shutil.copytree(PROMPTS, root)
            shutil.copy(FIXTURE, root / "digital" / "goal_cue.jinja")
        ctx.prompts = Prompts(root)
    run_config("digital", cfg, tmp / f"digital_{name}", ctx=ctx, quiet=True)
    dcfg = DistractorsConfig(
        input=str(goals),
        n=GOALS,
        digital=str(tmp / f"digital_{name}"),
        cache_dir=None,
        progress="off",
    )
    run_config(
        "distractors",
        dcfg,
        tmp / f"mcqs_{name}",
        ctx=RunContext("distractors", dcfg, tmp / f"mcqs_{name}").use(embedder=FakeEmbedder()),
        quiet=True,
    )
    return tmp / f"mcqs_{name}"


def audit(folder: Path, out: Path) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
    cfg = AuditConfig(
        input=str(folder),
        checks=["context_states"],
        min_items_per_test=15,
        cache_dir=None,
        progress="off",
        plots=False,
    )
    result = run_config("audit", cfg, out, quiet=True)
    (check,) = json.loads((out / "audit.json").read_text())["checks"]
    return result, check, read_jsonl(out / "audit.jsonl")


@pytest.fixture(scope="module")
def banks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("states")
    return tmp, bank_of(tmp, before=True), bank_of(tmp, before=False)


def test_the_check_fires_on_cues_that_state_their_goal(banks) -> None:
    tmp, before, _ = banks
    records = read_jsonl(before / "distractors.jsonl")
    assert (
        sum(bool(r["visible"]) for r in records) >= 40
    )  # the MCQs show their bundle's key-only state
    result, check, findings = audit(before, tmp / "audit_before")
    assert result.exit_code == 1, check
    assert {f["kind"] for f in findings} == {"context_states_answer"}
    assert {f["severity"] for f in findings} == {"error"}
    for row in check["stats"]["per_question_type"].values():
        assert row["answer_stated"] >= 0.5 and row["effect_points"] > 20 and row["cohens_h"] > 0.8
    stated = {i for f in findings for i in f["items"]}
    by_id = {r["item_id"]: r for r in records}
    search = [
        by_id[i]
        for i in sorted(stated)
        if by_id[i]["privileged"]["structured_goal"]["type"] == "search"
    ]
    assert search  # the cues as they were: the goal's query item in the Search app
    for record in search:  # ("did I close", "the garage door this morning") shows the second
        item = record["privileged"]["structured_goal"]["query_item"]
        assert item.casefold() in record["visible"]["digital_state"].casefold(), record["item_id"]


def test_the_check_passes_cues_that_prompt_their_goal(banks) -> None:
    tmp, _, after = banks
    records = read_jsonl(after / "distractors.jsonl")
    assert sum(bool(r["visible"]) for r in records) >= 40
    result, check, findings = audit(after, tmp / "audit_after")
    assert result.exit_code == 0 and not findings, findings
    for row in check["stats"]["per_question_type"].values():
        assert row["answer_stated"] < 0.1 and abs(row["effect_points"]) <= 5
        assert row["answer_mean_containment"] > row["distractor_mean_containment"]  # it still hints


def test_the_cues_still_point_to_their_goal(banks) -> None:
    """What the cue checks keep: a blind reader given only the key-only state (the option whose
    distinctive words the state holds most) picks the goal above chance, while no bundle's state
    holds more than half of its goal's action words."""
    from scipy.stats import binomtest

    tmp, _, after = banks
    bundles = read_jsonl(tmp / "digital_after" / "digital.jsonl")
    cued = [b for b in bundles if b["goal"]["app"]]
    assert len(cued) >= 25 and all(b["goal"]["action_share"] <= 0.5 for b in cued)
    hits = n = 0
    for r in read_jsonl(after / "distractors.jsonl"):
        if not r["visible"]:
            continue
        share = containment(r["options"], set(content_words(r["visible"]["digital_state"])))
        n += 1
        hits += share[r["answer"]] > max(s for j, s in enumerate(share) if j != r["answer"])
    assert n >= 40 and binomtest(hits, n, 0.25, alternative="greater").pvalue < 0.01, (hits, n)
