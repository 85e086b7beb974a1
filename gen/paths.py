"""Where the toolkit's own files live, and the one door for names that come from data.

Names read from manifests, item fields or input files are joined onto a folder only through
:func:`inside`: it refuses absolute paths, ``..``, empty or odd names, and symlinks that leave
the folder. Nothing else joins data-derived names onto a path (a test greps for it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

PACKAGE = Path(__file__).parent
"""The installed package; its data folders (the repository's ``prompts/``, ``conf/``,
``examples/`` and ``personas/``, linked into ``gen/`` in a checkout) ship inside it."""
PROMPTS = PACKAGE / "prompts"
CONF = PACKAGE / "conf"
EXAMPLES = PACKAGE / "examples"
PERSONAS = PACKAGE / "personas"
ROOT = Path(__file__).resolve().parent.parent
"""The source checkout the package runs from, when it does (an editable install): its git
commit goes into manifests; an installed wheel has none (:data:`CHECKOUT` is None)."""
CHECKOUT = ROOT if (ROOT / "pyproject.toml").is_file() and (ROOT / "generators").is_dir() else None

_NAME_PART = re.compile(r"^[^\x00-\x1f/\\]+$")


class UnsafePathError(ValueError):
    """A data-derived name would leave its folder (or is no usable name)."""


def inside(folder: Path, name: str, *, what: str = "name") -> Path:
    """``folder / name`` for a relative, downward ``name`` that stays inside ``folder``.

    Args:
        folder: the folder the name is relative to (a run folder, an export folder, a bank).
        name: a POSIX-style relative path read from data (``kept/tom.jsonl``).
        what: how the caller's message names the value (``manifest output``…).

    Raises:
        UnsafePathError: an absolute name, a ``..`` or ``.`` part, an empty part, a control
            character or backslash, or a path whose existing parts resolve (through symlinks)
            outside ``folder``.
    """
    if not isinstance(name, str) or not name or len(name) > 1024:
        raise UnsafePathError(f"{what} {name!r} is not a usable file name")
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise UnsafePathError(f"{what} {name!r} is an absolute path")
    parts = PurePosixPath(name).parts
    if not parts or name.endswith("/") or any(p in ("..", ".") or not _NAME_PART.match(p) for p in parts) \
            or "//" in name:
        raise UnsafePathError(f"{what} {name!r} leaves its folder or is not a plain relative path")
    path = folder.joinpath(*parts)
    base = os.path.realpath(folder)
    real = os.path.realpath(path)
    if os.path.commonpath([base, real]) != base:
        raise UnsafePathError(f"{what} {name!r} resolves outside {folder} (a symlink)")
    return path


def safe_part(text: str, *, fallback: str = "item") -> str:
    """One file-name component made from free text (a question type, a kind): letters,
    digits, ``-``, ``_`` and ``.`` kept, anything else ``_``; never empty, ``.`` or ``..``."""
    part = re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("._") or fallback
    return part[:120]
