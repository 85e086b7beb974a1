"""Label files: ``reviews/<reviewer>.jsonl`` in the reviewed run folder, appended atomically.

Every change is one ``write`` of one whole line to a file opened with ``O_APPEND``, under an
exclusive ``flock`` of that file: two servers (two reviewers, or one reviewer in two windows) on
the same folder never interleave or overwrite lines. A server killed mid-write leaves at most a
torn last line without its newline: readers skip it, and the next append (holding the lock) cuts
it off before writing, so the label in flight is the only one lost.
"""

from __future__ import annotations

import fcntl
import io
import os
from collections import defaultdict
from pathlib import Path

from gen.errors import InputError, not_utf8
from gen.paths import UnsafePathError, inside
from gen.readers import parse_json, validated
from gen.schemas.review import REVIEWER, ReviewLabel

REVIEWS = "reviews"
"""The folder of label files inside a reviewed run folder."""
SUMMARY_MD = "summary.md"
SUMMARY_JSON = "summary.json"
MAX_LINE = 1 << 20
"""More than any label line (a note is at most 10,000 characters)."""


def label_file(folder: Path, reviewer: str) -> Path:
    """``<folder>/reviews/<reviewer>.jsonl``, through :func:`gen.paths.inside` (a ``reviews``
    symlink out of the folder is refused)."""
    if not REVIEWER.match(reviewer):
        raise InputError(f"reviewer: {reviewer!r} is not a reviewer name (letters, digits, . _ -)")
    try:
        return inside(folder, f"{REVIEWS}/{reviewer}.jsonl", what="label file")
    except UnsafePathError as e:
        raise InputError(f"{folder}: {e}") from None


def append_label(folder: Path, label: ReviewLabel) -> Path:
    """Append one label line; atomic against other writers of the same file."""
    path = label_file(folder, label.reviewer)
    path.parent.mkdir(exist_ok=True)
    path = label_file(folder, label.reviewer)  # again: the folder now exists, symlinks resolve
    line = (label.model_dump_json() + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a killed writer's torn line: cut it off
            tail = os.pread(fd, min(size, MAX_LINE), max(0, size - MAX_LINE))
            cut = tail.rfind(b"\n")
            if cut >= 0 or size <= MAX_LINE:
                os.ftruncate(fd, size - len(tail) + cut + 1)
            else:  # not a line this module wrote: keep it, as a line of its own
                line = b"\n" + line
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return path


def read_label_file(path: Path) -> list[ReviewLabel]:
    """Every label of one file, in order. A torn last line (no newline, not JSON) is skipped;
    any other bad line is an InputError naming ``file:line: field``."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    reviewer = path.name.removesuffix(".jsonl")
    labels = []
    lines = io.StringIO(text, newline=None).readlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        torn = lineno == len(lines) and not line.endswith("\n")
        try:
            row = parse_json(line, f"{path}:{lineno}")
        except InputError:
            if torn:
                continue
            raise
        label = validated(ReviewLabel, row, f"{path}:{lineno}", what="line", objects_only=False)
        if label.reviewer != reviewer:
            raise InputError(
                f"{path}:{lineno}: reviewer: {label.reviewer!r} in {reviewer}'s label file"
            )
        labels.append(label)
    return labels


def read_labels(folder: Path) -> dict[str, list[ReviewLabel]]:
    """Reviewer -> that reviewer's labels, oldest first, from every ``reviews/*.jsonl``."""
    try:
        reviews = inside(folder, REVIEWS, what="reviews folder")
    except UnsafePathError as e:
        raise InputError(f"{folder}: {e}") from None
    if not reviews.is_dir():
        return {}
    out: dict[str, list[ReviewLabel]] = {}
    for entry in sorted(os.listdir(reviews)):
        if not entry.endswith(".jsonl") or not REVIEWER.match(entry.removesuffix(".jsonl")):
            continue
        out[entry.removesuffix(".jsonl")] = read_label_file(
            label_file(folder, entry.removesuffix(".jsonl"))
        )
    return out


def latest(labels: list[ReviewLabel]) -> tuple[dict[str, ReviewLabel], dict[str, int]]:
    """Item id -> the reviewer's last label of it, and item id -> how many lines it has."""
    last: dict[str, ReviewLabel] = {}
    changes: dict[str, int] = defaultdict(int)
    for label in labels:
        last[label.item_id] = label
        changes[label.item_id] += 1
    return last, dict(changes)
