"""What a run shows on the terminal goes through gen/engine/progress.py alone: generators never
print,
they ``ctx.say`` lines, which progress=off silences and the other modes show."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from rich.table import Table

from gen.engine.progress import Progress
from gen.engine.runner import CommonConfig, RunContext

ROOT = Path(__file__).resolve().parents[2]


def test_no_generator_calls_print() -> None:
    found = []
    for path in sorted((ROOT / "generators").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "print"
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], "generators say things through ctx.say, never print: " + ", ".join(found)


@pytest.mark.parametrize("mode", ["off", "plain"])
def test_say_honours_the_progress_mode(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = RunContext("demo", CommonConfig(progress=mode, cache_dir=None), tmp_path)
    table = Table(title="pool")
    table.add_column("field")
    table.add_row("kept as a table")
    ctx.say("[demo] funnel", "  step 3", table)
    ctx.say("open http://127.0.0.1:1/", always=True)
    out = capsys.readouterr().out
    if mode == "off":
        assert out == "open http://127.0.0.1:1/\n"
    else:
        assert out.startswith("[demo] funnel\n  step 3\n") and "kept as a table" in out
        assert out.endswith("open http://127.0.0.1:1/\n")


def test_a_quiet_progress_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    Progress("demo", 1, "off", 1.0).say("a line")
    assert capsys.readouterr().out == ""
