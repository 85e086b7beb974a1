"""Reading the files users give: text as UTF-8, strict JSON and JSONL, YAML validated by a model.

Every problem is one :class:`~gen.errors.InputError` line naming the file (and the line, and the
field): the CLI prints it and exits 2.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from gen import paths
from gen.errors import InputError
from gen.paths import input_file, read_input

M = TypeVar("M", bound=BaseModel)


class _NotJSONNumber(ValueError):
    """NaN, Infinity or a number too large for a float: Python's json reads them, JSON has none."""


def _no_constant(name: str) -> Any:
    raise _NotJSONNumber(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJSONNumber(
            f"{text[:20]}{'…' if len(text) > 20 else ''} is too large for a number"
        )
    return value


def _non_finite_at(value: Any, where: str = "") -> str | None:
    """The field path (``a.b[2]``) of the first NaN or infinity in a parsed value."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "value"
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for k, v in items:
        found = _non_finite_at(
            v, f"{where}[{k}]" if isinstance(k, int) else f"{where}.{k}" if where else str(k)
        )
        if found is not None:
            return found
    return None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _surrogate_at(value: Any, where: str = "") -> str | None:
    """The field path of the first string (or key) holding a lone UTF-16 surrogate (``\\ud800``
    without its pair), which no UTF-8 file can hold."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "value"
        return None
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for k, v in items:
        at = f"{where}[{k}]" if isinstance(k, int) else f"{where}.{k}" if where else str(k)
        found = _surrogate_at(k, at) if isinstance(k, str) else None
        found = found or _surrogate_at(v, at)
        if found is not None:
            return found.encode("utf-8", "backslashreplace").decode("ascii")
    return None


def no_lone_surrogates(value: Any, text: str, where: str) -> Any:
    """``value`` parsed from ``text``, refused (an InputError at ``where``) when an escape in the
    text made a lone surrogate: such a string fails when written, at the end of a run."""
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        field = _surrogate_at(value)
        if field is not None:
            raise InputError(
                f"{where}: {field}: holds a lone UTF-16 surrogate escape (\\ud800 without its "
                "pair), which is not text"
            )
    return value


def parse_json(text: str, where: str, *, whole_file: bool = False) -> Any:
    """``text`` as strict JSON (RFC 8259): NaN, Infinity and numbers beyond a float's range are
    refused, as other tools refuse them. Any problem is an InputError starting with ``where``
    (``file:line``); ``whole_file``: ``where`` is a file, and a syntax error adds its line."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        at = f"{where}:{e.lineno}" if whole_file else where
        raise InputError(f"{at}: not valid JSON ({e.msg})") from None
    except _NotJSONNumber as e:
        try:
            field = _non_finite_at(json.loads(text))
        except (ValueError, RecursionError):
            field = None
        raise InputError(
            f"{where}: {field or 'value'}: {e} (JSON has no NaN or Infinity)"
        ) from None
    except RecursionError:
        raise InputError(f"{where}: not valid JSON (nested too deeply)") from None
    except (
        ValueError
    ) as e:  # an integer of more than 4300 digits (sys.int_info.str_digits_check_threshold)
        raise InputError(f"{where}: not valid JSON ({str(e).split(';')[0]})") from None
    return no_lone_surrogates(value, text, where)


def _utf8(data: bytes, where: str) -> str:
    data = data.removeprefix(codecs.BOM_UTF8)  # as utf-8-sig, but the error's offset is into data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise InputError(
            f"{where}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at column {column}; "
            "save the file as UTF-8)"
        ) from None


def read_text(path: Path) -> str:
    """A text input file as UTF-8 (a leading byte-order mark, as spreadsheet exports write,
    is dropped); an unreadable or non-UTF-8 file is an InputError naming it (and the line)."""
    return _utf8(read_input(path), str(path))


def read_yaml_model(path: Path, model: type[M], what: str) -> M:
    """A YAML (or JSON) file validated as ``model`` (a roles file, a rubric): a syntax error is an
    InputError naming the file and its line, a wrong value names the file and the field
    (``what`` when the whole file is wrong)."""
    import yaml

    text = read_text(path)
    try:
        data = no_lone_surrogates(yaml.safe_load(text), text, str(path))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(
            f"{path}{line}: not valid YAML/JSON ({getattr(e, 'problem', None) or 'syntax error'})"
        ) from None
    except RecursionError:
        raise InputError(f"{path}: not valid YAML/JSON (nested too deeply)") from None
    return validated(model, data, str(path), what=what, objects_only=False)


def first_error(e: Any, default: str = "row") -> tuple[str, str]:
    """A pydantic ``ValidationError``'s first error as (field path, message on one line)."""
    err = e.errors()[0]
    return ".".join(str(x) for x in err["loc"]) or default, " ".join(str(err["msg"]).split())


def validated(
    model: type[M], data: Any, where: str, *, what: str = "row", objects_only: bool = True
) -> M:
    """``model.model_validate(data)`` for one input row or file; every failure is one InputError
    line ``where: field: reason`` (``what`` when the whole row is wrong). ``objects_only``: a row
    that is not a JSON object is refused before validation, by its type."""
    from pydantic import ValidationError

    if objects_only and not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        field, msg = first_error(e, what)
        raise InputError(f"{where}: {field}: {msg}"[:500]) from None
    except RecursionError:
        raise InputError(f"{where}: nested too deeply") from None


def read_json(path: Path) -> Any:
    """A JSON file (a manifest, Ego4D's narration.json), read as :func:`read_text` and parsed
    as :func:`parse_json`: every problem is an InputError naming the file."""
    return parse_json(read_text(path), str(path), whole_file=True)


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of every non-blank line of a JSONL file, read as
    :func:`read_text` (lines end as in Python's text files) and parsed as :func:`parse_json`:
    a file that is not UTF-8 or a line that is not strict JSON is an InputError naming the
    file and line. The file is streamed: memory holds one line (at most MAX_INPUT_BYTES), whatever
    the file's size; only a regular file is read (a FIFO would block the reader, a device never
    ends)."""
    input_file(path, bounded=False)
    try:
        fd = os.open(
            path, os.O_RDONLY | os.O_NONBLOCK
        )  # a FIFO put here since the check does not block
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{path}: is not a regular file")
    limit = paths.MAX_INPUT_BYTES
    with open(fd, encoding="utf-8-sig", newline=None) as f:  # universal newlines, as read_text
        try:
            for lineno, line in enumerate(iter(lambda: f.readline(limit + 1), ""), 1):
                if len(line) > limit:
                    raise InputError(
                        f"{path}:{lineno}: a line longer than an input may be "
                        f"({limit >> 20:,} MiB; GEN_MAX_INPUT_BYTES raises it)"
                    )
                if line.strip():
                    yield lineno, parse_json(line, f"{path}:{lineno}")
        except UnicodeDecodeError:
            read_text(path)  # raises the InputError that names the line and column of the bad byte
            raise
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
