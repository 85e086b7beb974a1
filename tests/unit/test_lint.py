"""The code is clean by its own tools (STYLE.md §8): ruff's rules and mypy's types, as configured in
pyproject.toml. Run with the rest of the suite, so the README's one test command holds them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )


def test_ruff_finds_nothing() -> None:
    proc = run("ruff", "check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_format_changes_nothing() -> None:
    # one layout for every file, so a diff shows what changed and not who formatted it
    proc = run("ruff", "format", "--check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_mypy_finds_nothing(tmp_path: Path) -> None:
    proc = run("mypy", "--cache-dir", str(tmp_path / "mypy"))  # files and settings: pyproject.toml
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout
