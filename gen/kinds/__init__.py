"""Record kinds, declared once: what a record is, and what every reader of it needs.

A :class:`Kind` holds its record model, the files it is written under in a run folder, its
identity (what the content id hashes), the text near-duplicate checks embed, its bank row, its
review layout, the release formats it joins, and (for an MCQ-shaped kind) how it reads as an
:class:`~gen.schemas.mcq.MCQ` — which is what the audit, the review page and the answer harnesses
read. ``bank``, ``audit``, ``review``, ``merge`` and ``bank export`` loop over kinds; none of them
tests a file name or switches on a kind's name.

gen's own kinds live in this package (``mcq``, ``tom``, ``distractors``, ``digital``,
``scenarios``, and the run kinds ``history`` and ``screening`` that are not bank items). A lab's
package adds one the way it adds a generator, through an entry point::

    [project.entry-points."gen.kinds"]
    routine = "my_lab.routines:ROUTINE"     # a Kind (or MCQKind) object named "routine"

and its generator names it: ``@gen.generator("routines", kind="routine", records=Routine)``.
An MCQ-shaped kind needs only its record model and ``to_mcq``; everything else follows from it.
Any other kind needs only its record model: the review page shows its records in the ``record``
layout, field by field as the model declares them (:meth:`Kind.review_fields`).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
import textwrap
import unicodedata
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, ValidationError

from gen.errors import ConfigError, InputError

if TYPE_CHECKING:
    from gen.engine.runfolder import RunFolder
    from gen.schemas.mcq import MCQ

NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
"""A kind's name: it names files (``<bank>/vNNNN/<name>.parquet``) and columns' values."""
GROUP = "gen.kinds"
"""The entry-point group plugin kinds are registered under (name = the kind's name)."""

# --------------------------------------------------------------------------- content ids

_WS = re.compile(r"\s+")


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, non-ASCII as is (hashed as UTF-8)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def norm(text: str | None) -> str | None:
    """NFC, whitespace runs collapsed to one space, stripped."""
    if text is None:
        return None
    return _WS.sub(" ", unicodedata.normalize("NFC", text)).strip()


def content_id(identity: dict[str, Any]) -> str:
    """The first 32 hex digits of SHA-256 over the canonical JSON of an item's identity."""
    return hashlib.sha256(canonical(identity).encode("utf-8")).hexdigest()[:32]


# --------------------------------------------------------------------------- the declaration


class Kind:
    """One record kind. Subclass it (or :class:`MCQKind`) and override what differs.

    Attributes:
        name: the kind's name: the manifest's ``records.kind``, the bank's file
            (``<name>.parquet``), the ``kind`` column of its rows.
        record: the pydantic model a record validates against.
        files: the names its records are written under in a run folder (the first is the usual
            one); a folder without a manifest is read by them.
        help: what one item is, for the bank's facts and the dataset card.
        source_format: how a stored record is read back (the bank's ``source_format`` column).
        bank: whether a bank holds its records as items.
        view: the review page's layout for it: ``record`` (the default: its fields as
            :meth:`review_fields` gives them), ``mcq`` (an MCQ-shaped kind), ``digital``,
            ``scenarios``.
        formats: the release formats it joins besides ``parquet``, ``hf`` and ``croissant``.
    """

    name: str
    record: type[BaseModel]
    files: tuple[str, ...] = ()
    help: str = ""
    source_format: str = "record"
    bank: bool = True
    view: str = "record"
    formats: tuple[str, ...] = ()
    noun: str = "a record"
    """How an error names one record (``not <noun>``)."""
    family: str = ""
    """Near-duplicates are looked for within a family (default: the kind itself)."""
    privileged: tuple[str, ...] | None = None
    """Record layout: the fields the review page hides until the reviewer reveals the privileged
    side (None: a field named ``privileged`` and the fields whose description starts with
    ``PRIVILEGED``)."""
    rubric: Path | None = None
    """Record layout: the rubric file its records are rated with (a YAML
    :class:`~gen.schemas.review.Rubric` listing the kind's name or ``record`` in ``kinds``), a
    file in the kind's package: ``Path(__file__).with_name("review.yaml")``. None: gen's generic
    rubric, ``prompts/review/record.yaml``."""

    def __init__(self, **attrs: Any) -> None:
        for key, value in attrs.items():
            if key not in ("name", "record") and not hasattr(type(self), key):
                raise TypeError(f"{type(self).__name__}: unknown attribute {key!r}")
            setattr(self, key, value)
        if not isinstance(getattr(self, "record", None), type):
            raise TypeError(f"{type(self).__name__}: a kind needs a name and a record model")
        if not NAME.match(str(getattr(self, "name", ""))):
            raise TypeError(
                f"{type(self).__name__}: kind name {getattr(self, 'name', '')!r}: lower-case "
                "letters, digits and _ (it names the bank's file of its items)"
            )
        self.family = self.family or self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # ----------------------------------------------------------------- reading

    def validate(self, record: Any, where: str) -> None:
        """Check one record against :attr:`record`; an InputError naming ``where`` otherwise."""
        try:
            self.record.model_validate(record)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise InputError(f"{where}: not {self.noun} ({loc}: {err['msg']})") from None

    def holds(self, path: Path) -> bool:
        """``path`` is one of this kind's record files (by its declared names)."""
        return path.name in self.files

    def declared(self, folder: Path) -> list[Path]:
        """Its declared files that are in ``folder`` (a name a plugin declares is joined only
        through :func:`gen.paths.inside`: one that would leave the folder is none)."""
        from gen.paths import UnsafePathError, inside

        out = []
        for name in self.files:
            try:
                path = inside(folder, name, what="kind file")
            except UnsafePathError:
                continue
            if path.is_file():
                out.append(path)
        return out

    def find(self, folder: Path) -> list[Path]:
        """Its item files in a folder without a manifest (the first declared name there; none
        for a kind whose records are not bank items)."""
        return self.declared(folder)[:1] if self.bank else []

    def source_format_of(self, path: Path) -> str:
        """How the records of file ``path`` are read back (the bank's ``source_format``)."""
        return self.source_format

    def item_files(self, run: RunFolder) -> list[Path]:
        """The files of a run folder of this kind that hold bank items (its records, for a bank
        kind)."""
        return [run.records_path] if self.bank and run.records_path.is_file() else []

    @property
    def gives_items(self) -> bool:
        """A run folder of this kind holds bank items: its records are, or it declares where
        they are (:meth:`item_files`)."""
        return self.bank or type(self).item_files is not Kind.item_files

    def read(self, path: Path) -> Iterator[tuple[str, Any]]:
        """``(where, record)`` of every record of one file (JSONL: ``file:line``)."""
        from gen.readers import iter_jsonl

        for lineno, row in iter_jsonl(path):
            yield f"{path}:{lineno}", row

    # ----------------------------------------------------------------- identity

    def identity(self, record: dict[str, Any]) -> dict[str, Any]:
        """What the content id hashes: every run-specific field left out (a kind that declares
        nothing hashes the whole record)."""
        return {"record": record}

    def item_id(self, record: dict[str, Any]) -> str:
        """The item's content id (:func:`content_id` of :meth:`identity`)."""
        return content_id(self.identity(record))

    def text(self, record: dict[str, Any]) -> str:
        """The text near-duplicate checks embed (a kind that declares nothing: the record's
        canonical JSON)."""
        return canonical(record)

    def question_type(self, record: dict[str, Any]) -> str:
        """The item's type in the bank (near-duplicates are looked for within one)."""
        return self.name

    def source_id(self, record: dict[str, Any]) -> str:
        """The id the record carries itself (seed-derived, unlike the content id)."""
        return str(record.get("item_id") or "")

    # ----------------------------------------------------------------- bank rows

    def columns(self) -> dict[str, Any]:
        """The bank row's flat columns (name -> polars dtype), after the common ones."""
        return {}

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        """The values of :meth:`columns` for one record."""
        return {}

    def column_docs(self) -> dict[str, str]:
        """What each of :meth:`columns` holds (the dataset card's field descriptions)."""
        return {}

    # ----------------------------------------------------------------- views

    def mcq(self, record: dict[str, Any]) -> MCQ | None:
        """The record as a multiple-choice item (None: the kind is not MCQ-shaped)."""
        return None

    @property
    def is_mcq(self) -> bool:
        """Its records read as MCQs (:meth:`mcq`): the audit's statistics, the review page's MCQ
        layout and the answer harnesses take them."""
        return type(self).mcq is not Kind.mcq

    def review_fields(self, record: dict[str, Any]) -> list[ReviewField]:
        """The record as the review page's ``record`` layout shows it: the record model's fields
        in their declared order (then any key the model does not declare), each labelled with
        its name and described by its docstring; a nested value as indented JSON. Fields named
        in :attr:`privileged` (by default: ``privileged`` and those whose description starts
        with ``PRIVILEGED``) go to the privileged side."""
        docs = field_docs(self.record)
        declared = [k for k in self.record.model_fields if k in record]
        hidden = self.privileged
        out = []
        for key in [*declared, *(k for k in record if k not in self.record.model_fields)]:
            doc = docs.get(key, "")
            secret = (
                key == "privileged" or doc.startswith("PRIVILEGED")
                if hidden is None
                else key in hidden
            )
            out.append(
                ReviewField(key, key.replace("_", " "), field_text(record[key]), doc, secret)
            )
        return out


class ReviewField(NamedTuple):
    """One field of a record as the review page's ``record`` layout shows it."""

    key: str
    """The record's key."""
    label: str
    """What the page calls it."""
    value: str
    """Its value as text (a string as is, anything else as JSON; nested values indented)."""
    doc: str
    """What it holds (the record model's field description), shown beside the label."""
    privileged: bool
    """Hidden until the reviewer reveals the privileged side."""


def field_text(value: Any) -> str:
    """A record's value as text for a reader: a string as is, a number, bool or null as JSON, a
    list or object as indented JSON (non-ASCII as is)."""
    if isinstance(value, str):
        return value
    nested = isinstance(value, (dict, list)) and bool(value)
    return json.dumps(value, ensure_ascii=False, indent=2 if nested else None, default=str)


@cache
def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """The docstrings written under a model's fields (its bases' too): the string right after
    ``name: type``, whether or not pydantic keeps it as the field's description."""
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        for stmt, after in zip(body.body, [*body.body[1:], None], strict=True):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                out[stmt.target.id] = " ".join(after.value.value.split())
    for key, field in model.model_fields.items():
        if field.description:
            out[key] = " ".join(field.description.split())
    return out


def mcq_identity(q: MCQ) -> dict[str, Any]:
    """What an MCQ's content id hashes: what the candidate sees, order-free, plus the answer
    text."""
    return {
        "question_type": q.question_type,
        "question": norm(q.question),
        "visible": {k: norm(v) for k, v in sorted(q.visible.items())},
        "options": sorted(norm(o) or "" for o in q.options),
        "answer": norm(q.answer_text),
    }


class MCQKind(Kind):
    """A kind whose records read as multiple-choice items: identity, text, question type, bank
    row and review view all follow from :meth:`mcq`. A plugin gives ``to_mcq`` (or overrides
    :meth:`mcq`); gen's own MCQ kinds read records in the :class:`~gen.schemas.mcq.MCQRecord`
    shape."""

    source_format = "mcq_record"
    view = "mcq"
    formats = ("lm_eval", "inspect")
    noun = "an MCQ record"
    family = "mcq"
    to_mcq: Callable[[dict[str, Any]], MCQ] | None = None
    """Record -> MCQ, for a kind declared without subclassing."""

    def __init__(self, **attrs: Any) -> None:
        if "record" not in attrs and "record" not in type(self).__dict__:
            from gen.schemas.mcq import MCQRecord

            attrs["record"] = MCQRecord
        super().__init__(**attrs)

    def mcq(self, record: dict[str, Any]) -> MCQ:
        if self.to_mcq is not None:
            return self.to_mcq(record)
        from gen.formats.mcq import from_record
        from gen.schemas.mcq import MCQRecord

        return from_record(MCQRecord.model_validate(record), 0)

    def iter_mcq(self, path: Path) -> Iterator[MCQ]:
        """The items of one of its files as MCQs, streamed (each record validated first; an
        MCQ's ``line`` is its 0-based line, so a subset is written back line for line). Records
        in the MCQRecord shape go through gen's MCQ file reader
        (:func:`gen.formats.mcq.iter_bank`)."""
        if self.to_mcq is None and type(self).mcq is MCQKind.mcq:
            from gen.formats.mcq import iter_bank

            yield from iter_bank(path)
            return
        from gen.readers import iter_jsonl

        for lineno, row in iter_jsonl(path):
            self.validate(row, f"{path}:{lineno}")
            yield self.mcq(row).model_copy(update={"line": lineno - 1})

    def identity(self, record: dict[str, Any]) -> dict[str, Any]:
        return mcq_identity(self.mcq(record))

    def text(self, record: dict[str, Any]) -> str:
        """Question and sorted options before the context (the embedder truncates long
        inputs)."""
        ident = self.identity(record)
        return "\n".join(
            [
                ident["question"] or "",
                *ident["options"],
                *(v or "" for v in ident["visible"].values()),
            ]
        )

    def question_type(self, record: dict[str, Any]) -> str:
        return self.mcq(record).question_type

    def source_id(self, record: dict[str, Any]) -> str:
        return self.mcq(record).item_id

    def columns(self) -> dict[str, Any]:
        import polars as pl

        return {
            "question": pl.String,
            "options": pl.List(pl.String),
            "answer": pl.Int64,
            "answer_text": pl.String,
            "group": pl.String,
            "context": pl.String,
            "wagibench": pl.String,
        }

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        q = self.mcq(record)
        return {
            "question": q.question,
            "options": q.options,
            "answer": q.answer,
            "answer_text": q.answer_text,
            "group": q.group,
            "context": q.context,
            "wagibench": None,
        }

    def column_docs(self) -> dict[str, str]:
        return {
            "question": "The question shown to the candidate.",
            "options": "The options, in the order shown to the candidate.",
            "answer": "0-based index of the correct option in options.",
            "answer_text": "The correct option's text.",
            "group": "The unit items share (a clip, a reference goal's group): items of one "
            "group are related.",
            "context": "The visible context as the candidate reads it (narrations, app state).",
            "wagibench": "PRIVILEGED. WAGIBench's MCQ layout row as JSON (structured goals of "
            "the options and of the truth); null when the run wrote none. Never show it to a "
            "candidate.",
        }


# --------------------------------------------------------------------------- the registry

_BUILTIN = (
    "gen.kinds.mcq",
    "gen.kinds.digital",
    "gen.kinds.scenarios",
    "gen.kinds.history",
    "gen.kinds.screening",
)
"""gen's own kind modules (each lists its kinds in ``KINDS``), in the bank's order."""
_BANK_ORDER = ("tom", "distractors", "digital", "mcq", "scenarios")
"""The order of gen's own bank kinds (the files of a bank version, its review and exports)."""
_KINDS: dict[str, Kind] | None = None
_SKIPPED: list[str] = []


def _load() -> dict[str, Kind]:
    global _KINDS
    if _KINDS is not None:
        return _KINDS
    import importlib

    from gen.engine.registry import entry_point_candidates, owned

    own = {k.name: k for module in _BUILTIN for k in importlib.import_module(module).KINDS}
    found = {name: own[name] for name in (*_BANK_ORDER, *own) if name in own}
    skipped: list[str] = []
    for name, eps in sorted(entry_point_candidates(GROUP).items()):
        eps = [ep for ep in eps if not owned(ep, "gen.kinds.")]
        if not eps:
            continue
        where = ", ".join(f"{ep.value} ({ep.dist.name if ep.dist else 'unknown'})" for ep in eps)
        if name in found:
            skipped.append(f"kind {name} of {where} is skipped: {name} is gen's own kind")
            continue
        if len(eps) > 1:
            skipped.append(f"kind {name} is registered by several distributions: {where}")
            continue
        try:
            obj = eps[0].load()
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin's import can fail anyhow
            text = " ".join(str(e).split())[:200]
            skipped.append(f"kind {name} = {where}: cannot be imported: {type(e).__name__}: {text}")
            continue
        if not isinstance(obj, Kind):
            skipped.append(f"kind {name} = {where}: is not a gen.Kind")
        elif obj.name != name:
            skipped.append(f"kind {name} = {where}: declares the kind {obj.name!r}, not {name!r}")
        else:
            found[name] = obj
    _KINDS = found
    _SKIPPED[:] = skipped
    return found


def reload() -> None:
    """Read the entry points again (after installing a plugin in a running process)."""
    global _KINDS
    _KINDS = None


def skipped() -> list[str]:
    """One line per plugin kind that was not taken, and why."""
    _load()
    return list(_SKIPPED)


def every() -> list[Kind]:
    """Every kind, gen's own first (in the bank's order), then plugins' by name."""
    return list(_load().values())


def get(name: str) -> Kind | None:
    return _load().get(name)


def require(name: str) -> Kind:
    """The kind ``name``, or a ConfigError listing the bank's kinds."""
    kind = get(name)
    if kind is None:
        raise ConfigError(
            f"unknown kind {name!r}; choose one of: {', '.join(k.name for k in bank_kinds())}"
        )
    return kind


def bank_kinds() -> list[Kind]:
    """The kinds a bank holds as items, in the bank's order."""
    return [k for k in every() if k.bank]


def bank_names() -> tuple[str, ...]:
    return tuple(k.name for k in bank_kinds())


def for_file(path: Path) -> Kind | None:
    """The bank kind whose declared files hold ``path`` (the first one, in the bank's order)."""
    return next((k for k in bank_kinds() if k.holds(path)), None)


def of_run(run: RunFolder) -> Kind | None:
    """The kind of a run folder's records. A folder written before tom and distractors named
    their own kinds says ``mcq``: its records file's declared kind is taken then."""
    kind = get(run.kind)
    if kind is not None and kind.is_mcq:
        named = for_file(run.records_path)
        if named is not None and named.is_mcq and named.family == kind.family:
            return named
    return kind


def of_path(path: Path) -> Kind | None:
    """The kind of what ``path`` holds: a run folder's (its manifest; a damaged one is read as a
    folder without), else the first kind declaring a file there (a file: the first whose declared
    files hold it)."""
    from gen.engine.runfolder import RunFolder

    if path.is_file():
        return next((k for k in every() if k.holds(path)), None)
    if not path.is_dir():
        return None
    try:
        run = RunFolder.find(path)
    except InputError:
        run = None
    if run is not None and (kind := of_run(run)) is not None:
        return kind
    return next((k for k in every() if k.declared(path)), None)


def in_folder(folder: Path) -> tuple[Kind, list[Path]] | None:
    """A folder without a manifest: the first kind (in the bank's order) with item files in it,
    and those files."""
    for kind in every():
        files = kind.find(folder)
        if files:
            return kind, files
    return None
