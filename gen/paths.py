"""Where the toolkit's own files live, and the one door for names that come from data.

Names read from manifests, item fields or input files are joined onto a folder only through
:func:`inside`: it refuses absolute paths, ``..``, empty or odd names, and symlinks that leave
the folder. Nothing else joins data-derived names onto a path (a test greps for it).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path, PurePosixPath

from gen.errors import InputError

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


class UnsafePathError(InputError):
    """A data-derived name would leave its folder (or is no usable name): bad input, so one line
    and exit 2 wherever it surfaces (an InputError, hence a ValueError too)."""


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
    if (
        not parts
        or name.endswith("/")
        or any(p in ("..", ".") or not _NAME_PART.match(p) for p in parts)
        or "//" in name
    ):
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


MAX_INPUT_BYTES = int(os.environ.get("GEN_MAX_INPUT_BYTES") or 2 << 30)
"""Largest input file a reader takes whole into memory (``GEN_MAX_INPUT_BYTES``, default 2 GiB)."""


def input_file(path: Path, what: str | None = None, *, bounded: bool = True) -> Path:
    """``path`` if it is a regular file (or a symlink to one) of at most :data:`MAX_INPUT_BYTES`
    (any size when not ``bounded``: a reader that streams it).

    A device (``/dev/zero``), a FIFO (which blocks a reader forever), a socket or a folder where
    a file is read is an InputError naming it; so is a file larger than the bound. A missing
    path is left to the caller (its own message names the option).
    """
    import stat

    shown = f"{what}: {path}" if what else str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return path
    except OSError as e:
        raise InputError(f"{shown}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{shown}: is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "not a regular file"
        )
        raise InputError(f"{shown}: is {kind}, not a regular file (give a file or a folder)")
    if bounded and st.st_size > MAX_INPUT_BYTES:
        raise InputError(
            f"{shown}: {st.st_size >> 20:,} MiB is larger than an input may be "
            f"({MAX_INPUT_BYTES >> 20:,} MiB; GEN_MAX_INPUT_BYTES raises it)"
        )
    return path


def read_input(path: Path, what: str | None = None) -> bytes:
    """The bytes of an input file checked by :func:`input_file`, read without blocking on a FIFO
    put in its place meanwhile and never past the bound (a file that grows while read is
    refused)."""
    input_file(path, what)
    shown = f"{what}: {path}" if what else str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise InputError(f"{shown}: cannot read ({e.strerror or e})") from None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO or a device since the check
            raise InputError(f"{shown}: is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise InputError(f"{shown}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(
            f"{shown}: larger than an input may be ({MAX_INPUT_BYTES >> 20:,} MiB; "
            "GEN_MAX_INPUT_BYTES raises it)"
        )
    return data


def unwritable(path: Path) -> str | None:
    """Why a folder cannot be made (or written in) at ``path``; None when it can. The nearest
    place at or above ``path`` that exists must be a folder gen may write in: besides its
    permission bits, a folder is made there and removed, for what ``access()`` cannot tell (root
    in /proc, a read-only mount). The one writable-folder probe (run folders, banks, exports).

    Returns:
        ``"<place> is not a folder"``, ``"<place> is not writable"``, ``"<place>: <OS error>"``
        or None.
    """
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".gen-probe-", dir=probe))
    except OSError as e:
        return f"{probe}: {e.strerror or e}"
    return None


# --------------------------------------------------------------------------- banks' folders
# A bank's layout, as far as every writer must know it: everything under a bank folder is the
# bank's own (only ``bank add`` writes there), so the runner refuses a run folder there.

LOCK = "MANIFEST.lock.json"
CURRENT = "current"
VERSIONS = "versions"
WRITER_LOCK = ".lock"
VERSION_DIR = re.compile(r"^v(\d{4,})$")


def is_within(folder: Path, path: Path) -> bool:
    """Whether ``path`` resolves (through symlinks, existing or not) inside ``folder``."""
    base = os.path.realpath(folder)
    return os.path.commonpath([base, os.path.realpath(path)]) == base


def is_bank(folder: Path) -> bool:
    """``folder`` is a bank: a ``versions/`` folder beside its ``current`` pointer or writer's
    lock, or holding a released version (``vNNNN/`` with its lock)."""
    vroot = folder / VERSIONS
    if not vroot.is_dir():
        return False
    if os.path.lexists(folder / CURRENT) or os.path.lexists(folder / WRITER_LOCK):
        return True
    try:
        return any(VERSION_DIR.match(p.name) and (p / LOCK).is_file() for p in vroot.iterdir())
    except OSError:
        return False


def owning_bank(path: Path) -> Path | None:
    """The bank ``path`` is or lies in (resolved through symlinks, existing or not), if any.
    Everything under a bank folder is the bank's own: only ``bank add`` writes there."""
    where = Path(os.path.realpath(path.expanduser()))
    for folder in (where, *where.parents):
        if is_bank(folder):
            return folder
    return None
