"""Running the documentation: the ``bash`` and ``python`` blocks of a page, in page order,
through the real command line (in process: Hydra, run folders, manifests) with the model
backends swapped for a scripted LLM and a bag-of-words embedder, and shortened where a test
must be small.

Which blocks run: fenced ``bash`` blocks (each ``gen …`` / ``python -m gen …`` command in them;
other commands such as ``pip install`` or ``export`` are left to the reader) and fenced ``python``
blocks (executed in one namespace per page). Blocks fenced as ``text``, ``console``, ``yaml``,
``toml`` or ``py`` are shown, not run. A command's expected exit code is 0 unless its line ends
with ``# exit code N``.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

DOCS = ROOT / "docs"
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)


@dataclass
class Block:
    lang: str
    body: str
    title: str | None = None


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, in order (``title="…"`` kept)."""
    return blocks_of(path.read_text(encoding="utf-8"))


def blocks_of(text: str) -> list[Block]:
    out = []
    for m in FENCE.finditer(text):
        info = m.group("info").strip()
        lang = info.split()[0] if info else ""
        title = re.search(r'title="([^"]+)"', info)
        body = "\n".join(line[len(m.group("indent")) :] for line in m.group("body").splitlines())
        out.append(Block(lang, body, title.group(1) if title else None))
    return out


@dataclass
class Command:
    argv: list[str]
    """After ``gen``: the generator and its overrides."""
    expect: int
    line: str


def commands(script: str) -> list[Command]:
    """The gen commands of a bash block (``\\`` continuations joined, ``&&`` chains split,
    ``# exit code N`` read, comments dropped)."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        expect = re.search(r"#\s*exit code (\d+)", line)
        words = shlex.split(line, comments=True)
        for part in " ".join(shlex.quote(w) for w in words).split(" '&&' ") if words else []:
            argv = shlex.split(part)
            while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):  # VAR=value gen …
                argv = argv[1:]
            if argv[:1] == ["gen"]:
                argv = argv[1:]
            elif argv[:3] == ["python", "-m", "gen"]:
                argv = argv[3:]
            else:
                continue
            out.append(Command(argv, int(expect.group(1)) if expect else 0, line.strip()))
    return out


@dataclass
class Page:
    """How to run one page: its scripted backends and how to make each command small."""

    script: Callable[[list[dict[str, str]], int], str] | None = None
    embedder: Any = None
    """The embedder every command gets (None: a bag-of-words fake; ``"real"``: gen's own, the
    page's configured model, for the integration tests of pages whose checks need real vectors)."""
    extra: dict[str, list[str]] = field(default_factory=dict)
    """Overrides appended to every command of a generator (``{"digital": ["n=1"]}``)."""
    replace: dict[str, str] = field(default_factory=dict)
    """Words (command words, or text in python blocks) replaced before running."""
    numbered: bool = False
    """A command that names no ``hydra.run.dir=`` runs into ``outputs/<generator>/<NN>`` (NN the
    command's place on the page) instead of a timestamped folder: two quick runs in one second
    would otherwise share one folder."""
    instead: dict[str, Callable[[list[str], Path], int]] = field(default_factory=dict)
    """Generator (``review``) -> what runs instead of a command that would wait for a person:
    ``f(argv, cwd) -> exit code``."""


def run_cli(argv: list[str]) -> int:
    """``gen <argv>`` in this process, as the console script runs it."""
    from gen.cli import main

    saved = list(sys.argv)
    sys.argv = ["gen", *argv]
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        sys.argv = saved


@contextlib.contextmanager
def backends(monkeypatch: pytest.MonkeyPatch, page: Page) -> Iterator[None]:
    """Every model gen would load is the page's scripted LLM and embedder instead."""
    import gen.llm
    import gen.llm.embed
    from gen.llm import scripted_llm

    def make_llm(cfg: Any, cache: Any) -> Any:
        if page.script is None:
            raise AssertionError(f"this page's commands should not call an LLM ({cfg.backend})")
        return scripted_llm(page.script, sampling=cfg, cache=cache)

    def make_embedder(cfg: Any, cache_dir: Any) -> Any:
        if page.embedder is None:
            from fakes import FakeEmbedder

            return FakeEmbedder()
        return page.embedder

    monkeypatch.setattr(gen.llm, "make_llm", make_llm)
    if page.embedder != "real":
        monkeypatch.setattr(gen.llm.embed, "make_embedder", make_embedder)
    yield


def run_page(
    path: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch, page: Page
) -> list[tuple[str, int]]:
    """Run a page's blocks in order in ``cwd``; the commands run and their exit codes. A
    command whose exit code is not the one the page says fails the test."""
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("NO_COLOR", "1")
    namespace: dict[str, Any] = {"__name__": "__guide__"}
    ran: list[tuple[str, int]] = []
    with backends(monkeypatch, page):
        for block in blocks(path):
            if block.lang == "bash":
                for cmd in commands(block.body):
                    argv = [page.replace.get(w, w) for w in cmd.argv]
                    argv += page.extra.get(argv[0], []) if argv else []
                    if (
                        page.numbered
                        and argv
                        and not any(a.startswith("hydra.run.dir=") for a in argv)
                    ):
                        argv.append(f"hydra.run.dir=outputs/{argv[0]}/{len(ran):02d}")
                    runner = page.instead.get(argv[0]) if argv else None
                    if runner is not None and not set(argv) & {"summary", "--help"}:
                        code = runner(argv, cwd)
                    else:
                        code = run_cli(argv)
                    assert code == cmd.expect, (
                        f"{path.name}: `{cmd.line}` exited {code}, the page says {cmd.expect}"
                    )
                    ran.append((cmd.line, code))
            elif block.lang == "python":
                source = block.body
                for old, new in page.replace.items():
                    source = source.replace(old, new)
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(source, f"{path.name}:python", "exec"), namespace)  # noqa: S102 - the page's own code
                ran.append(("python", 0))
    return ran


def listing(path: Path, heading: str) -> list[str]:
    """The entries of the first ``text`` block after ``heading`` that draws a folder tree."""
    text = path.read_text(encoding="utf-8")
    start = text.index(heading)
    for block in blocks_of(text[start:]):
        if block.lang == "text" and "├──" in block.body:
            return [
                re.split(r"\s{2,}", line.split("── ", 1)[1])[0].rstrip("/")
                for line in block.body.splitlines()
                if "── " in line
            ]
    raise AssertionError(f"no folder listing after {heading!r} in {path.name}")
