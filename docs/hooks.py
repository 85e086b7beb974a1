"""MkDocs hook: the generated parts of the pages, from the code.

A page holds a marker where generated Markdown goes:

- ``<!-- gen:options -->`` a generator's options, the rows ``gen <name> --help`` prints (the
  generator is the page's file name, ``reference/<name>.md``, or named:
  ``<!-- gen:options tom -->``);
- ``<!-- gen:records -->`` the schema of the records it declares (``records=``);
- ``<!-- gen:generators -->`` every generator and its help line;
- ``<!-- gen:backend <preset> -->`` an ``llm=`` / ``embedder=`` preset's options (``llm.openai``,
  ``embedder.openai`` where both groups have the name);
- ``<!-- gen:bench-results -->`` every file of ``bench/results/`` with the machine and date it
records.

The Python API page (``reference/api.md``) is mkdocstrings' work, from the docstrings; the
Sphinx roles some docstrings use (``:class:`~gen.kinds.Kind```) show as their code alone there.

Every one of gen's generators needs its reference page, with its options and records: a
missing one is a warning, which ``mkdocs build --strict`` turns into a failed build.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path, PurePosixPath
from typing import Any

from gen.docs import backend_markdown, generators_markdown, options_markdown, records_markdown
from gen.engine.config import EMBEDDER_PRESETS, LLM_PRESETS
from gen.engine.registry import REGISTRY

log = logging.getLogger("mkdocs.hooks.gen")
# a marker, not one quoted in inline code (`<!-- gen:options -->` in prose about the markers)
MARKER = re.compile(r"(?<!`)<!-- gen:([\w-]+)(?: ([\w.-]+))? -->(?!`)")
RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
# a Sphinx role before a code span, as mkdocstrings renders it (``:meth:<code>~a.b.c</code>``;
# the ``~`` shows the last name alone, as Sphinx does)
ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):<code>(?:~[\w.]*\.)?")


def own_generators() -> list[str]:
    """gen's own generators (a lab's plugins installed beside gen document themselves)."""
    return [n for n in REGISTRY if REGISTRY[n].fn.__module__.startswith("gen.generators.")]


def on_files(files: Any, config: Any) -> Any:
    pages = {
        PurePosixPath(f.src_uri).stem
        for f in files.documentation_pages()
        if f.src_uri.startswith("reference/")
    }
    for name in own_generators():
        if name not in pages:
            log.warning(
                f"the generator {name} has no reference page: write docs/reference/{name}.md "
                "(with <!-- gen:options --> and <!-- gen:records -->) and add it to mkdocs.yml's "
                "nav"
            )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    stem = PurePosixPath(src).stem

    def generated(m: re.Match[str]) -> str:
        what, arg = m.group(1), m.group(2)
        if what in ("options", "records"):
            name = arg or stem
            if name not in REGISTRY:
                log.warning(f"{src}: {m.group(0)} names no generator ({name!r})")
                return ""
            return options_markdown(name) if what == "options" else records_markdown(name)
        if what == "generators":
            return generators_markdown()
        if what == "bench-results":
            return bench_results_markdown()
        group, _, preset = (arg or "").rpartition(".")  # embedder.openai: the embedder preset
        presets = EMBEDDER_PRESETS if group == "embedder" else LLM_PRESETS
        if what == "backend" and preset in presets and group in ("", "llm", "embedder"):
            return backend_markdown(presets[preset][0], skip=("backend",))
        if what == "backend" and not group and preset in EMBEDDER_PRESETS:
            return backend_markdown(EMBEDDER_PRESETS[preset][0], skip=("backend",))
        log.warning(f"{src}: unknown marker {m.group(0)}")
        return ""

    out = MARKER.sub(generated, markdown)
    if src.startswith("reference/") and stem in REGISTRY:
        for what in ("options", "records"):
            if not any(m.group(1) == what for m in MARKER.finditer(markdown)):
                log.warning(
                    f"{src}: the reference page of {stem} has no <!-- gen:{what} --> marker"
                )
    return out


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """A docstring's Sphinx role shows as its code span (``~a.b.c`` as ``c``)."""
    return ROLE.sub("<code>", html)


def bench_results_markdown() -> str:
    """One row per ``bench/results/*.json``: the machine and the date the file records (a
    result without them says so, rather than pass for a current figure)."""
    rows = ["| result | date | machine |", "|---|---|---|"]
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data = data if isinstance(data, dict) else {}
        machine = data.get("machine")
        info = machine if isinstance(machine, dict) else {}
        date = str(data.get("date") or info.get("date") or "")[:10] or "not recorded"
        if isinstance(machine, str):
            where = machine
        elif info:
            cores = info.get("cores") or info.get("cpus") or info.get("nproc")
            cpu = info.get("cpu") or ("x86_64" if "x86_64" in str(info.get("platform", "")) else "")
            where = ", ".join(
                x
                for x in (
                    cpu,
                    f"{cores} cores" if cores else "",
                    f"Python {info['python']}" if "python" in info else "",
                )
                if x
            )
        else:
            where = f"{data['cores']} cores" if "cores" in data else "not recorded"
        rows.append(f"| `{path.name}` | {date} | {where or 'not recorded'} |")
    return "\n".join(rows) + "\n"
