"""What the judge tests share: the fixtures folder, an in-process ``gen judge`` run with a
scripted LLM, the scripted wagibench and distractor-validity judges and a small MCQ bank."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gen.engine.runner import RunContext, run_config
from gen.generators.judge import JudgeConfig
from gen.llm import scripted_llm

FIX = Path(__file__).resolve().parent / "fixtures" / "judge"
NAME = "judge"


def judge_run(
    tmp_path: Path, script: Any, *, family: str | None = "smollm", out: str = "run", **options: Any
) -> tuple[Any, RunContext, Path]:
    cfg = JudgeConfig(**{"cache_dir": None, "progress": "off", **options})
    folder = tmp_path / out
    ctx = RunContext(NAME, cfg, folder).use(llm=scripted_llm(script, family=family))
    return run_config(NAME, cfg, folder, ctx=ctx, quiet=True), ctx, folder


def wagibench_script(messages: list[dict[str, str]], seed: int) -> str:
    text = messages[-1]["content"]
    if "<answer>" in text:  # the reformat prompt
        if "bike" in text:
            action = (
                '{"type": "search", "source": "world", "query_item": "bike tyre", '
                '"query": "repair"}'
            )
            return f"Here: <answer>{action}</answer>"
        return "<answer>lamp ideas</answer>"
    return "<score>2</score>" if "soap" in text else "Relevant, I would say."


def mcq_bank(tmp_path: Path, n: int = 4) -> Path:
    src = (
        (Path(__file__).resolve().parent / "fixtures" / "audit" / "clean.jsonl")
        .read_text()
        .splitlines(True)
    )
    path = tmp_path / "bank" / "mcq.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(src[:n]))
    return path


def validity_script(messages: list[dict[str, str]], seed: int) -> str:
    """Scores the key 2 and everything else 0, except that 'paint' options are good answers too."""
    text = messages[-1]["content"]
    option = text.split("One candidate answer:\n", 1)[1].split("\n")[0]
    return (
        "<score>2</score>"
        if "paint" in option.lower() or "sand" in option.lower()
        else "<score>0</score>"
    )
