"""Running the ``tom`` generator in tests: the fixture inputs, a scripted LLM that answers each
tom stage (good answers by default, planted outputs served first, optionally per clip), tom's own
fake embedder (bag-of-words hashing vectors, or fixed vectors for named texts, which the embedder
in tests/fakes.py has not), the run context and the run in process, a synthetic clip and the
settings. Shared by test_tom.py, test_tom_runs.py and test_tom_e2e.py."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from gen.engine.runner import RunContext, run_config
from gen.formats.timelines import Clip, Line, speaker_of
from gen.generators.tom import TomConfig
from gen.llm import scripted_llm

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tom"
NARRATION = FIXTURES / "narration.json"
TIMELINES = FIXTURES / "timelines.jsonl"
EGOTOM = Path(__file__).resolve().parents[2] / "shared" / "data" / "egotom_paper"

# --------------------------------------------------------------------------- fakes


class FakeEmbedder:
    """Bag-of-words hashing vectors: identical texts give cosine 1, unrelated ones near 0."""

    def __init__(self, fixed: dict[str, list[float]] | None = None):
        self.fixed = fixed or {}
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = []
        for t in texts:
            v = np.zeros(256, dtype=np.float32)
            if t in self.fixed:
                v[: len(self.fixed[t])] = self.fixed[t]
            else:
                for w in re.findall(r"\w+", t.lower()):
                    v[int(hashlib.md5(w.encode()).hexdigest(), 16) % 256] += 1
            out.append(v / np.linalg.norm(v))
        return np.stack(out)

    def describe(self) -> dict[str, Any]:
        return {"backend": "fake"}


MARKERS = {
    "analysis": "Analyse C's behaviour in these narrations",
    "goals": "Propose three wrong goals",
    "beliefs_actions": "Propose three other beliefs",
    "simplify": "Shorten each sentence",
}


def stage_of(messages: list[dict[str, str]]) -> tuple[str, str]:
    """The stage a prompt is for, and its own request (the last user turn with a marker)."""
    for m in reversed(messages):
        if m["role"] != "user":
            continue
        for stage, marker in MARKERS.items():
            if marker in m["content"]:
                return stage, m["content"]
    raise AssertionError("not a tom prompt")


def allowed_range(request: str) -> tuple[int, int]:
    m = re.search(r"one of lines (\d+) to (\d+)", request)
    assert m, request
    return int(m[1]), int(m[2])


GOOD = {
    "analysis": lambda req: {
        "transition_line": sum(allowed_range(req)) // 2,
        "future_goal": "wash the dishes",
        "next_actions": [
            "turns off the stove",
            "carries the board to the sink",
            "scrubs the board",
        ],
        "belief": "the soup is ready",
    },
    "goals": lambda req: {
        "wrong_goals": ["To bake a cake.", "To set the table.", "To sweep the floor."]
    },
    "beliefs_actions": lambda req: {
        "alternatives": [
            {
                "belief": "the soup needs more salt",
                "next_actions": ["picks the salt", "adds salt to the pot", "stirs the pot"],
            },
            {
                "belief": "the carrots are still hard",
                "next_actions": ["lifts the lid", "pokes a carrot", "puts the lid back"],
            },
            {
                "belief": "the pot is about to boil over",
                "next_actions": ["lowers the heat", "moves the pot", "wipes the stove"],
            },
        ]
    },
    "simplify": lambda req: {
        "simplified": [
            "C picks the salt, adds salt, and stirs the pot.",
            "C lifts the lid, pokes a carrot, and puts the lid back.",
            "C lowers the heat, moves the pot, and wipes the stove.",
        ]
    },
}


class Script:
    """A scripted LLM by stage: good answers by default; ``plan[stage]`` is a list of outputs (a
    dict, a raw text, a ``(text, finish_reason)`` tuple, or ``f(request) -> dict``) served first,
    optionally per clip via ``when(request) -> bool``. Every call is logged."""

    def __init__(
        self,
        plan: dict[str, list[Any]] | None = None,
        when: Callable[[str, str], bool] | None = None,
    ):
        self.plan = {k: list(v) for k, v in (plan or {}).items()}
        self.when = when or (lambda stage, req: True)
        self.log: list[SimpleNamespace] = []

    def __call__(self, messages: list[dict[str, str]], seed: int) -> Any:
        stage, req = stage_of(messages)
        self.log.append(
            SimpleNamespace(
                stage=stage, request=req, messages=[dict(m) for m in messages], seed=seed
            )
        )
        queue = self.plan.get(stage)
        out: Any = GOOD[stage]
        if queue and self.when(stage, req):
            out = queue.pop(0)
        if callable(out):
            out = out(req)
        return json.dumps(out) if isinstance(out, dict) else out

    def calls(self, stage: str) -> list[SimpleNamespace]:
        return [c for c in self.log if c.stage == stage]


def make_ctx(
    tmp_path: Path, script: Script | None = None, embedder: Any = None, **cfg: Any
) -> RunContext:
    settings = TomConfig(**{"input": str(NARRATION), "cache_dir": None, "progress": "off", **cfg})
    ctx = RunContext("tom", settings, tmp_path)
    ctx.use(llm=scripted_llm(script or Script(), sampling=settings.llm))
    ctx.use(embedder=embedder or FakeEmbedder())
    return ctx


def run_tom(out: Path, script: Script | None = None, embedder: Any = None, **cfg: Any):
    ctx = make_ctx(out, script, embedder, **cfg)
    result = run_config("tom", ctx.cfg, out, ctx=ctx, quiet=True)
    return result, ctx


def clip_of(
    n: int = 80,
    duration: float = 300.0,
    *,
    fmt: str = "jsonl",
    speaker: str = "C",
    texts: Callable[[int], str] | None = None,
) -> Clip:
    """A synthetic clip: ``n`` lines evenly over ``[1, duration - 2]``, unique texts."""
    lines = []
    for i in range(n):
        t = 1 + i * (duration - 3) / max(1, n - 1)
        text = texts(i) if texts else f"#{speaker} {speaker} does step {i}."
        lines.append(Line(t, text, speaker_of(text)))
    return Clip(
        f"clip{n}", "video", fmt, "test", lines=lines, summary="C works.", duration=duration
    )  # type: ignore[arg-type]


def cfg_for(**kw: Any) -> TomConfig:
    return TomConfig(**{"input": str(NARRATION), "cache_dir": None, **kw})
