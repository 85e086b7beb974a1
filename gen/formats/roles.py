"""Any JSONL bank read with a roles file: which fields of a row the candidate sees, which are
ground truth, and where the options and the answer live (:class:`Roles`, :func:`read_roles`);
:func:`load_roles_bank` and :func:`iter_roles_bank` give its items as :class:`schemas.mcq.MCQ` in
a :class:`gen.formats.mcq.Bank` of format ``roles_jsonl``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gen.errors import InputError, MissingInputError
from gen.formats.mcq import Bank, as_text
from gen.schemas.mcq import LETTERS, MCQ


class Roles(BaseModel):
    """Which fields of a JSONL bank the candidate sees, which are ground truth, and where the
    options and the answer live. Read from a small YAML or JSON file (:func:`read_roles`).
    Field names may be dotted (``meta.clip``); a field holding an object counts as each of its
    keys (``visible`` -> ``visible.context``, ``visible.query_time``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    id: str
    """The field holding the item id."""
    visible: list[str] = Field(default_factory=list)
    """Fields the candidate is shown besides the question and the options."""
    privileged: list[str] = Field(default_factory=list)
    """Ground truth the candidate must never see (gold answers, hidden state, future events)."""
    question: str | None = None
    """The field holding the question (it is visible too)."""
    options: str | list[str] | None = None
    """One field holding the list of options, or one field per option in order; null: no options."""
    answer: str | None = None
    """The field holding the correct option (see ``answer_format``)."""
    answer_format: Literal["index", "letter", "text"] = "index"
    """``index``: 0-based integer; ``letter``: a, B, (c)…; ``text``: the option's own text."""
    question_type: str | None = None
    """The field grouping items for per-type statistics; null: the category, else one type."""
    category: str | None = None
    """A field to count items by (a scenario bank's shift type)."""
    group: str | None = None
    """The field naming the unit items share (clip, video, scenario)."""
    required: list[str] = Field(default_factory=list)
    """Fields every row must have, non-empty. A missing one is a row problem, not a load error."""

    @model_validator(mode="after")
    def _answer_needs_options(self) -> Roles:
        if self.answer is not None and self.options is None:
            raise ValueError("answer needs options (the field or fields holding the options)")
        return self


def read_roles(path: Path) -> Roles:
    """A roles file (YAML or JSON); a mistake is an InputError naming the file and the key."""
    if not path.is_file():
        raise MissingInputError(f"roles: no such file: {path}")
    from gen.readers import read_yaml_model

    return read_yaml_model(path, Roles, "roles")


_MISSING = object()


def get_field(row: dict[str, Any], path: str) -> Any:
    """``row[path]``, following dots into nested objects; a sentinel when absent."""
    if path in row:
        return row[path]
    value: Any = row
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _empty(value: Any) -> bool:
    return value is _MISSING or value is None or value == "" or value == [] or value == {}


def _fields(row: dict[str, Any], names: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in names:
        value = get_field(row, name)
        if value is _MISSING or value is None:
            continue
        if isinstance(value, dict):
            out.update({f"{name}.{k}": as_text(v) for k, v in value.items() if v is not None})
        else:
            out[name] = as_text(value)
    return out


def parse_answer(value: Any, options: list[str], fmt: str) -> int | None:
    """The 0-based index an answer field names, or None when it names no option."""
    if fmt == "index":
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(options):
            return value
        return None
    if fmt == "letter":
        text = str(value).strip().strip("().:").strip().lower()
        if len(text) == 1 and text in LETTERS[: len(options)]:
            return LETTERS.index(text)
        return None
    text = as_text(value).strip()
    stripped = [o.strip() for o in options]
    return stripped.index(text) if text in stripped else None


def load_roles_bank(path: Path, roles: Roles) -> Bank:
    """Any JSONL bank read through a roles file into :class:`MCQ` items (options may be empty,
    then ``answer`` is None). Rows that parse but miss a field or name no option become
    ``Bank.problems``; a line that is not a JSON object is an InputError."""
    problems: list[dict[str, Any]] = []
    items = list(iter_roles_bank(path, roles, problems))
    return Bank(path, "roles_jsonl", items, problems)


def iter_roles_bank(path: Path, roles: Roles, problems: list[dict[str, Any]]) -> Iterator[MCQ]:
    """:func:`load_roles_bank`'s items, line by line; each row's problems are appended to
    ``problems`` as its item is made."""
    if not path.is_file():
        raise MissingInputError(f"input: no such file: {path}")
    from gen.readers import iter_jsonl

    return _roles_items(path, roles, problems, iter_jsonl(path))


def _roles_items(
    path: Path, roles: Roles, problems: list[dict[str, Any]], rows: Iterator[tuple[int, Any]]
) -> Iterator[MCQ]:
    for lineno, row in rows:
        if not isinstance(row, dict):
            raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield _roles_item(row, roles, lineno - 1, problems)  # 0-based, as write_subset


def _roles_item(
    row: dict[str, Any], roles: Roles, line: int, problems: list[dict[str, Any]]
) -> MCQ:
    raw_id = get_field(row, roles.id)
    item_id = f"line{line + 1}" if _empty(raw_id) else as_text(raw_id)

    def problem(field_: str, what: str) -> None:
        problems.append({"line": line, "item_id": item_id, "field": field_, "problem": what})

    for name in dict.fromkeys([roles.id, *roles.required]):
        value = get_field(row, name)
        if _empty(value):
            problem(name, "missing" if value is _MISSING else "empty")
    options: list[str] = []
    if isinstance(roles.options, str):
        value = get_field(row, roles.options)
        if isinstance(value, list):
            options = [as_text(v) for v in value]
        elif value is not _MISSING:
            problem(roles.options, f"options must be a list, got {type(value).__name__}")
    elif roles.options:
        for name in roles.options:
            value = get_field(row, name)
            options.append("" if value is _MISSING or value is None else as_text(value))
    answer = None
    if roles.answer is not None:
        value = get_field(row, roles.answer)
        if value is _MISSING or value is None:
            problem(roles.answer, "missing")
        else:
            answer = parse_answer(value, options, roles.answer_format)
            if answer is None:
                problem(
                    roles.answer,
                    f"answer {value!r} ({roles.answer_format}) names none of the {len(options)} "
                    "options",
                )
    question = (
        ""
        if roles.question is None
        else as_text(v)
        if not _empty(v := get_field(row, roles.question))
        else ""
    )
    visible = _fields(row, roles.visible)
    if roles.question and roles.question not in visible and question:
        visible = {roles.question: question, **visible}  # the question is shown too
    category = (
        None
        if roles.category is None or _empty(c := get_field(row, roles.category))
        else as_text(c)
    )
    qtype = (
        None
        if roles.question_type is None or _empty(t := get_field(row, roles.question_type))
        else as_text(t)
    )
    group = None if roles.group is None or _empty(g := get_field(row, roles.group)) else as_text(g)
    return MCQ(
        item_id=item_id,
        question_type=qtype or category or "all",
        question=question,
        options=options,
        answer=answer,
        context="\n".join(visible.values()),
        group=group,
        category=category,
        visible=visible,
        privileged=_fields(row, roles.privileged),
        line=line,
    )
