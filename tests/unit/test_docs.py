"""The docs site (``docs/``, ``mkdocs.yml``) builds with warnings as errors: a broken link or
anchor, a page missing from the nav, a generator without its reference page each fail here.
Each generator's reference page lists exactly the options ``gen <name> --help`` lists, in its
sections and order (the pages' tables are generated from the same config fields by
``docs/hooks.py``; this reads them back from the built HTML). The site builds with the light
core alone: the build runs with the heavy libraries blocked from import, and the Python API page
documents every public name of ``gen``."""

from __future__ import annotations

import contextlib
import html
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import gen
from gen.engine.registry import REGISTRY

try:
    import material  # noqa: F401
    import mkdocs  # noqa: F401
    import mkdocstrings_handlers.python  # noqa: F401

    MKDOCS = True
except ImportError:
    MKDOCS = False

needs_mkdocs = pytest.mark.skipif(
    not MKDOCS,
    reason='mkdocs, mkdocs-material or mkdocstrings-python is missing: pip install -e ".[docs]"',
)
OPTIONS_DIV = re.compile(r'<div class="gen-options">(.*?)</div>', re.S)
# What the extras bring (torch, llama.cpp, spaCy, FAISS, the sentence embedder): `pip install -e
# ".[docs]"` brings none of them, so the build runs with each refused at import; an attempt,
# even one a library catches, is printed and fails the build's test.
HEAVY = ["torch", "llama_cpp", "spacy", "faiss", "sentence_transformers"]
MKDOCS_WITHOUT_HEAVY = f"""
import importlib.abc, sys
class Heavy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            print(f"BLOCKED import of {{name}}", file=sys.stderr)
            raise ImportError(f"{{name}} is not part of the [docs] extra")
sys.meta_path.insert(0, Heavy())
sys.argv[0] = "mkdocs"
from mkdocs.__main__ import cli
cli()
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MKDOCS_WITHOUT_HEAVY,
            "build",
            "--strict",
            "--clean",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    warnings = [line for line in proc.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0 and not warnings, "\n".join(warnings) or proc.stderr[-3000:]
    blocked = [line for line in proc.stderr.splitlines() if line.startswith("BLOCKED")]
    assert not blocked, "the docs build needs more than the [docs] extra: " + "; ".join(blocked)
    return out


def own_generators() -> list[str]:
    return sorted(n for n in REGISTRY if REGISTRY[n].fn.__module__.startswith("gen.generators."))


def help_options(name: str) -> list[tuple[str, list[str]]]:
    """``gen <name> --help``'s sections and their option keys, as the command line prints them."""
    from gen.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([name, "--help"])
    sections: list[tuple[str, list[str]]] = []
    inside = False  # in an options section (not another block, such as a generator's stages)
    for line in out.getvalue().splitlines():
        if re.match(r"^[\w ]+ options:$", line):
            sections.append((line[:-1], []))
            inside = True
        elif line and not line.startswith(" "):
            inside = False
        elif inside and line.startswith("  ") and "=" in line:
            sections[-1][1].append(line.strip().split("=", 1)[0])
    return sections


def page_options(page: Path) -> list[tuple[str, list[str]]]:
    """The options tables of a built reference page: each section's title and first column."""
    (block,) = OPTIONS_DIV.findall(page.read_text(encoding="utf-8"))
    titles = [html.unescape(t) for t in re.findall(r"<strong>([^<]+)</strong>", block)]
    tables = re.findall(r"<tbody>(.*?)</tbody>", block, re.S)
    keys = [
        [html.unescape(k) for k in re.findall(r"<tr>\s*<td><code>([^<]+)</code></td>", t)]
        for t in tables
    ]
    assert len(titles) == len(keys), f"{page.name}: {len(titles)} titles, {len(keys)} tables"
    return list(zip(titles, keys, strict=True))


@needs_mkdocs
def test_the_docs_build_strictly(site: Path) -> None:
    assert (site / "index.html").is_file() and (site / "getting-started.html").is_file()
    for name in own_generators():
        assert (site / "reference" / f"{name}.html").is_file(), f"no reference page for {name}"


@needs_mkdocs
def test_the_api_reference_documents_every_public_name(site: Path) -> None:
    """Each name ``import gen`` gives (``gen.__all__``) has its section on the Python API page,
    with its docstring; no Sphinx role is left as text."""
    page = (site / "reference" / "api.html").read_text(encoding="utf-8")
    sections = set(re.findall(r'<h2 id="([\w.]+)"', page))
    public = [n for n in gen.__all__ if not n.startswith("__")]
    missing = [n for n in public if not any(s.split(".")[-1] == n for s in sections)]
    assert not missing, f"docs/reference/api.md documents no {missing}"
    assert "Run <code>generator</code> with these options" in page  # gen.run's docstring
    assert not re.search(r":(attr|class|data|exc|func|meth|mod|obj):<code>", page)


@needs_mkdocs
@pytest.mark.parametrize("name", own_generators())
def test_a_reference_page_lists_exactly_the_options_of_help(site: Path, name: str) -> None:
    shown = help_options(name)
    assert shown and any(keys for _, keys in shown), f"gen {name} --help listed no options"
    assert page_options(site / "reference" / f"{name}.html") == shown


def test_help_options_are_read_as_printed() -> None:
    """The reader above against a known option of each section (a value holding ``=`` too)."""
    sections = dict(help_options("audit"))
    assert "checks" in sections["audit options"] and "seed" in sections["common options"]
    assert all("=" not in k and " " not in k for keys in sections.values() for k in keys)
