"""Model families, which judges compare with the candidate's: a model judging its own family can
score it too high or too low, so the benchmark's default judge comes from another family.

A backend's family comes from its config (``llm.family=``) or is derived: for a GGUF from its
metadata (``general.basename``, then ``general.name``, then the file name; the architecture
last, since many families share ``llama``), for a served model from its name. A name is matched
by its prefix (after any ``org/``) against :data:`PREFIXES`; an unknown name is its own family.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PREFIXES: tuple[tuple[str, str], ...] = (
    ("gpt", "openai"),
    ("chatgpt", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("claude", "anthropic"),
    ("gemini", "google"),
    ("gemma", "google"),
    ("meta-llama", "meta"),
    ("llama", "meta"),
    ("qwen", "qwen"),
    ("qwq", "qwen"),
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("ministral", "mistral"),
    ("codestral", "mistral"),
    ("smollm", "smollm"),
    ("phi", "microsoft"),
    ("deepseek", "deepseek"),
    ("internvl", "internvl"),
    ("command", "cohere"),
    ("granite", "ibm"),
    ("olmo", "allenai"),
)
"""Name prefix -> family, tried in order (the first match wins)."""
JUDGE_FAMILY_FOR: dict[str, str] = {"anthropic": "google", "google": "openai", "openai": "google"}
"""The context benchmark's ``--judge-family auto`` (``resolve_judge_family``): the judge's family
for a candidate of each family (Claude -> Gemini, Gemini -> OpenAI, OpenAI -> Gemini)."""
ALIASES: dict[str, str] = {"claude": "anthropic", "gemini": "google", "gpt": "openai"}
"""The benchmark's family names (claude, gemini, openai) as gen's families."""
FAMILIES: tuple[str, ...] = tuple(sorted({f for _, f in PREFIXES}))
"""The families gen knows by name (``candidate_family=`` is one of them or an alias)."""


def known_family(name: str) -> str | None:
    """``name`` as one of :data:`FAMILIES` (aliases too: ``claude`` -> anthropic), or None."""
    family = canonical_family(name)
    return family if family in FAMILIES else None


def families_text() -> str:
    """The valid family names on one line (an error message's list)."""
    aliases = ", ".join(f"{a} ({f})" for a, f in sorted(ALIASES.items()))
    return f"{', '.join(FAMILIES)}; or {aliases}"


def canonical_family(name: str) -> str:
    """A family as gen names it (``claude`` -> anthropic, ``gemini`` -> google), lower case."""
    n = name.strip().lower()
    return ALIASES.get(n, n)


def family_of_name(name: str) -> str | None:
    """The family a model name starts with (``Qwen2.5-72B`` -> qwen, ``meta-llama/Llama-3`` ->
    meta), or None when no prefix matches."""
    base = name.strip().lower()
    for part in (base, base.rsplit("/", 1)[-1]):
        for prefix, family in PREFIXES:
            # "phi-3", "llama3", "smollm2" match; "phillip" does not
            if part.startswith(prefix) and not part[len(prefix) : len(prefix) + 1].isalpha():
                return family
    return None


def family_from_gguf(metadata: dict[str, Any], path: str | Path) -> tuple[str, str]:
    """(family, how it was found) from a GGUF's metadata and file name."""
    for key in ("general.basename", "general.name"):
        value = metadata.get(key)
        if isinstance(value, str) and (fam := family_of_name(value)):
            return fam, f"gguf {key}={value!r}"
    stem = Path(path).name
    if fam := family_of_name(stem):
        return fam, f"gguf file name {stem!r}"
    arch = metadata.get("general.architecture")
    if isinstance(arch, str) and (fam := family_of_name(arch)):
        return fam, f"gguf general.architecture={arch!r}"
    name = metadata.get("general.basename") or metadata.get("general.name") or Path(path).stem
    return str(name).lower(), f"unknown family: the model's own name {name!r}"


def family_from_served(model: str) -> tuple[str, str]:
    """(family, how it was found) for a model served by name (an OpenAI-compatible server)."""
    if fam := family_of_name(model):
        return fam, f"served model name {model!r}"
    return model.lower(), f"unknown family: the served model name {model!r}"


def gguf_metadata(path: str | Path) -> dict[str, Any]:
    """A GGUF's metadata without loading its weights (llama.cpp's vocab-only load)."""
    from llama_cpp import Llama

    llama = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        return dict(llama.metadata)
    finally:
        llama.close()
