"""What the nocontext tests share: a small MCQ bank with planted leaky items, the scripted
models that know the give-aways or always answer a), and a screen run in process. Shared by
test_nocontext.py, test_nocontext_runs.py and test_scale.py (the bank)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gen.engine.runner import RunContext, run_config
from gen.generators.nocontext import NocontextConfig
from gen.llm import scripted_llm

NAME = "nocontext"
OPTION_LINE = re.compile(r"^([a-z])\) (.*)$", re.M)


def mcq(
    i: int, truth: str, wrong: list[str], *, answer_at: int = 0, qtype: str = "goal", **extra: Any
) -> dict[str, Any]:
    options = list(wrong)
    options.insert(answer_at, truth)
    return {
        "item_id": f"item{i}",
        "question_type": qtype,
        "question": "What is C's goal?",
        "options": options,
        "answer": answer_at,
        "group": f"clip{i}",
        "origins": ["truth" if o == truth else "counterfactual" for o in options],
        "visible": {"context": f"narrations of clip {i}"},
        "privileged": {"truth": truth},
        **extra,
    }


def leaky_bank(path: Path, n: int = 12, leaky: tuple[int, ...] = (2, 5, 9)) -> Path:
    """n items; in the ``leaky`` ones the truth carries a give-away word ("obviously")."""
    rows = []
    for i in range(n):
        qtype = ("goal", "belief", "actions")[i % 3]
        truth = f"C {'obviously ' if i in leaky else ''}wants outcome {i}."
        wrong = [f"C wants alternative {i}-{k}." for k in range(3)]
        rows.append(mcq(i, truth, wrong, answer_at=i % 4, qtype=qtype, extra_field=i))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def shown_options(messages: list[dict[str, str]]) -> list[tuple[str, str]]:
    user = next(m["content"] for m in messages if m["role"] == "user")
    return OPTION_LINE.findall(user)


def knows_giveaways(messages: list[dict[str, str]], seed: int) -> str:
    """Answers the option with the give-away word; otherwise always the last letter shown."""
    shown = shown_options(messages)
    for letter, text in shown:
        if "obviously" in text:
            return f"Answer 1: {letter}) {text}"
    letter, text = shown[-1]
    return f"Answer 1: {letter}) {text}"


def always_a(messages: list[dict[str, str]], seed: int) -> str:
    return "Answer 1: a)"


def screen(
    tmp_path: Path, script: Callable | list[str], bank: Path | None = None, **overrides: Any
) -> tuple[Any, RunContext, Path]:
    bank = bank or leaky_bank(tmp_path / "items.jsonl")
    settings = NocontextConfig(input=str(bank), cache_dir=None, progress="off", **overrides)
    out = tmp_path / "run"
    ctx = RunContext(NAME, settings, out)
    ctx.use(llm=scripted_llm(script, sampling=settings.llm))
    return run_config(NAME, settings, out, ctx=ctx, quiet=True), ctx, out
