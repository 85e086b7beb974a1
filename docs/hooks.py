"""MkDocs hook: the generated parts of the pages, from the code.

A page holds a marker where generated Markdown goes:

- ``<!-- gen:options -->`` a generator's options, the rows ``gen <name> --help`` prints (the
  generator is the page's file name, ``reference/<name>.md``, or named: ``<!-- gen:options tom -->``);
- ``<!-- gen:records -->`` the schema of the records it declares (``records=``);
- ``<!-- gen:generators -->`` every generator and its help line;
- ``<!-- gen:backend <preset> -->`` an ``llm=`` / ``embedder=`` preset's options.

Every one of gen's generators needs its reference page, with its options and records: a
missing one is a warning, which ``mkdocs build --strict`` turns into a failed build.
"""

from __future__ import annotations

import logging
import re
from pathlib import PurePosixPath
from typing import Any

from gen.config import EMBEDDER_PRESETS, LLM_PRESETS
from gen.docs import backend_markdown, generators_markdown, options_markdown, records_markdown
from gen.registry import REGISTRY

log = logging.getLogger("mkdocs.hooks.gen")
MARKER = re.compile(r"<!-- gen:(\w+)(?: ([\w.-]+))? -->")


def own_generators() -> list[str]:
    """gen's own generators (a lab's plugins installed beside gen document themselves)."""
    return [n for n in REGISTRY if REGISTRY[n].fn.__module__.startswith("gen.generators.")]


def on_files(files: Any, config: Any) -> Any:
    pages = {PurePosixPath(f.src_uri).stem for f in files.documentation_pages()
             if f.src_uri.startswith("reference/")}
    for name in own_generators():
        if name not in pages:
            log.warning(f"the generator {name} has no reference page: write docs/reference/{name}.md "
                        "(with <!-- gen:options --> and <!-- gen:records -->) and add it to mkdocs.yml's nav")
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
        if what == "backend" and arg in LLM_PRESETS:
            model = LLM_PRESETS[arg][0]
            return backend_markdown(model, skip=("backend",))
        if what == "backend" and arg in EMBEDDER_PRESETS:
            return backend_markdown(EMBEDDER_PRESETS[arg][0], skip=("backend",))
        log.warning(f"{src}: unknown marker {m.group(0)}")
        return ""

    out = MARKER.sub(generated, markdown)
    if src.startswith("reference/") and stem in REGISTRY:
        for what in ("options", "records"):
            if f"<!-- gen:{what}" not in markdown:
                log.warning(f"{src}: the reference page of {stem} has no <!-- gen:{what} --> marker")
    return out
