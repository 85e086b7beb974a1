"""Every generator's own example output (``seed=0``) audited with check 18, ``context_options``:
no structural tell, the answer never the only option the visible context names nor the only one
it does not (issue 42). The code-built introspect families run on their examples through
``python -m gen``; ``candidates input_format=recall`` on its example with the embedded SmolLM2 and
all-MiniLM-L6-v2; the event form of Memory Assistance Recognition with the unit tests' scripted
writer (SmolLM2-135M writes it no record: the construction, which lines are shown and which
options come from where, is code). ``tom`` and ``candidates`` on ``examples/candidates/items.jsonl``
yield no item with the embedded model at the smallest settings (minutes each; see
``bench/example_tells.py`` and its results), so they are measured there, not here. ``distractors``
on ``examples/goals.jsonl`` shows no context (``visible`` is empty): check 18 sees no item."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import read_jsonl
from scripted import event_writer

from gen.engine.runner import RunContext
from gen.engine.runner import run_config as run
from gen.generators.audit import AuditConfig
from gen.generators.introspect import IntrospectConfig
from gen.llm import scripted_llm
from gen.llm.embed import Embedder, EmbedderConfig
from gen.paths import EXAMPLES

INTRO = EXAMPLES / "introspect"
RUNS: dict[str, list[str]] = {
    # run name -> the generator and its options after ``python -m gen`` (seed=0 added)
    "recording": ["introspect", "task=recording", f"input={INTRO / 'recording.jsonl'}"],
    "emotion_intensity": [
        "introspect",
        "task=emotion_intensity",
        f"input={INTRO / 'emotions.jsonl'}",
    ],
    "tool_selection": [
        "introspect",
        "task=tool_selection",
        f"input={INTRO / 'requests.jsonl'}",
        f"tools={INTRO / 'tools.yaml'}",
    ],
    "proactive_timing": [
        "introspect",
        "task=proactive_timing",
        f"input={INTRO / 'interruptions.jsonl'}",
    ],
    "memory_lifespan": ["introspect", "task=memory_lifespan", f"input={INTRO / 'memories.jsonl'}"],
    "memory_object": [
        "introspect",
        "task=memory_assistance",
        "form=object",
        f"input={INTRO / 'memories.jsonl'}",
    ],
    "candidates_recall": [
        "candidates",
        f"input={EXAMPLES / 'candidates' / 'recall.jsonl'}",
        "input_format=recall",
        "llm.attempts=2",
    ],
    "distractors": ["distractors", f"input={EXAMPLES / 'goals.jsonl'}", "n=20"],
}
RECORDS = {"introspect": "introspect.jsonl", "candidates": "candidates.jsonl"}
NO_CONTEXT = {"distractors"}
"""Runs whose items show no context besides question and options: check 18 has nothing to see."""


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    return Embedder(EmbedderConfig(), cache_dir=str(tmp_path_factory.mktemp("emb")))


@pytest.fixture(scope="module")
def outputs(
    tmp_path_factory: pytest.TempPathFactory, runner_for, minilm: Embedder
) -> Callable[[str], Path]:
    """``outputs(name)``: that example's run folder, made on first use and kept for the module
    (so ``-k`` runs only what it selects)."""
    tmp = tmp_path_factory.mktemp("example_tells")
    run_gen = runner_for(tmp, tmp / "cache")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name in made:
            return made[name]
        folder = tmp / name
        if name in RUNS:
            proc = run_gen(
                *RUNS[name], "seed=0", "progress=off", f"hydra.run.dir={folder}", timeout=1200
            )
            assert proc.returncode == 0, (name, proc.stderr[-2000:])
        else:  # the event form: the scripted writer writes the wrong options in the sub-run
            c = IntrospectConfig(
                task="memory_assistance",
                form="event",
                input=str(INTRO / "memories.jsonl"),
                seed=0,
                cache_dir=None,
                progress="off",
            )
            ctx = RunContext("introspect", c, folder)
            ctx.use(llm=scripted_llm(event_writer), embedder=minilm)
            assert run("introspect", c, folder, ctx=ctx, quiet=True).exit_code == 0
        made[name] = folder
        return folder

    return get


def check18(folder: Path, out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """This checkout's check 18 alone on a run folder: its report entry and its findings."""
    cfg = AuditConfig(
        input=str(folder),
        checks=["context_options"],
        embeddings=False,
        cache_dir=None,
        progress="off",
    )
    run("audit", cfg, out, ctx=RunContext("audit", cfg, out), quiet=True)
    report = json.loads((out / "audit.json").read_text())
    entry = next(c for c in report["checks"] if c["key"] == "context_options")
    return entry, read_jsonl(out / "audit.jsonl")


@pytest.mark.parametrize("name", [*RUNS, "memory_event"])
def test_no_structural_tell_on_the_example_output(
    name: str, outputs: Callable[[str], Path], tmp_path: Path
) -> None:
    folder = outputs(name)
    entry, findings = check18(folder, tmp_path / "audit")
    structural = [f for f in findings if f["kind"].startswith("answer_only_")]
    assert structural == [], [(f["kind"], f["items"]) for f in structural]
    if name in NO_CONTEXT:
        assert entry["status"] == "skipped" and "visible context" in entry["reason"]
        return
    generator = RUNS[name][0] if name in RUNS else "introspect"
    records = read_jsonl(folder / RECORDS[generator])
    # the example yields items, and check 18 sees every one of them (each shows a context)
    assert records and entry["status"] == "ran", entry
    assert entry["stats"]["items"] == len(records)
    assert entry["stats"]["structural"] == 0
