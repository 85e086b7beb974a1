"""A run folder, opened once: its manifest checked, its generator and records known.

Every reader of a run folder (audit, bank, review, judge, evaluate, merge, pipeline, the Python
API) opens it here, so none of them guesses from file names what a folder holds::

    run = RunFolder.open("outputs/digital/2026-11-26_10-00-00")
    run.generator, run.kind, len(run)        # 'digital', 'digital', 5
    for bundle in run.records():              # DigitalBundle objects, validated
        ...
    run.to_polars()                           # one row per record
"""

from __future__ import annotations

import html
import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field

from gen.errors import InputError, MissingInputError
from gen.paths import UnsafePathError, inside

MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
RUNTIME_OPTIONS = frozenset({"progress", "progress_every", "cache_dir"})
OLD_KINDS = {"scenario": "scenarios"}
"""Former record kinds -> today's (the scenarios kind took the bank's name), for old folders."""
"""Options that change how a run shows progress or where it caches, never what it writes: a run
made with other values of these is the same run."""


M = TypeVar("M", bound=BaseModel)


class Counts(BaseModel):
    model_config = ConfigDict(extra="allow")

    requested: int = Field(ge=0)
    accepted: int = Field(ge=0)
    rejected: int = Field(ge=0)
    indices_done: int | None = Field(None, ge=0)
    rejects_by_reason: dict[str, int] = Field(default_factory=dict)


class RecordsInfo(BaseModel):
    """Where a run's records are and what they are (manifests written since gen 0.2)."""

    file: str
    kind: str
    models: list[str] = Field(default_factory=list)


class Manifest(BaseModel):
    """The keys of ``manifest.json`` that readers rely on; a generator's own summaries are
    kept as extra keys (:attr:`extras`)."""

    model_config = ConfigDict(extra="allow")

    generator: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    config: dict[str, Any] = Field(default_factory=dict)
    counts: Counts | None = None
    """None in a manifest written by hand (a test's, an outside tool's)."""
    outputs: dict[str, str] = Field(default_factory=dict)
    records: RecordsInfo | None = None
    seed: int | None = None
    toolkit_version: str | None = None
    exit_code: int = 0
    error: str | None = None
    llm: dict[str, Any] | None = None
    llm_usage: dict[str, Any] | None = None
    inputs: dict[str, str] = Field(default_factory=dict)
    subruns: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def extras(self) -> dict[str, Any]:
        """The generator's own summaries (``ctx.extra``)."""
        return dict(self.model_extra or {})


@overload
def read_manifest(folder: Path) -> tuple[Manifest, dict[str, Any]]: ...
@overload
def read_manifest(folder: Path, model: type[M]) -> tuple[M, dict[str, Any]]: ...
def read_manifest(folder: Path, model: type[BaseModel] = Manifest) -> tuple[Any, dict[str, Any]]:
    """A folder's ``manifest.json``, checked against ``model`` (the keys its reader relies on:
    :class:`Manifest` by default), and as read: the one manifest reader. Anything else (not
    UTF-8, not JSON, a list, ``{}``, no generator) is an InputError naming the file and the
    field."""
    from gen.readers import read_json, validated

    file = folder / MANIFEST
    raw = read_json(file)  # strict JSON; a byte-order mark is read, as in every input
    if not isinstance(raw, dict) or not isinstance(raw.get("generator"), str):
        got = (
            "an empty object"
            if raw == {}
            else "an object without a generator"
            if isinstance(raw, dict)
            else f"a JSON {type(raw).__name__}"
        )
        raise InputError(
            f"{file}: not a run manifest (a JSON object naming its generator), got {got}"
        )
    return validated(model, raw, str(file), what="manifest"), raw


_ABSENT = object()


class RunFolder:
    """A finished run folder of any generator."""

    reused = False
    """Set by :meth:`gen.engine.runner.RunContext.subrun` when it opened this folder instead of
    running."""

    def __init__(self, path: Path, manifest: Manifest, raw: dict[str, Any]):
        self.path = path
        self.manifest = manifest
        self.raw = raw
        """The manifest as read (a generator's summaries, for its own readers)."""

    # ----------------------------------------------------------------- opening

    @classmethod
    def open(cls, path: str | Path) -> RunFolder:
        """The run folder at ``path``, or the one a file (its records file) lies in."""
        p = Path(path).expanduser()
        if not p.exists():
            raise MissingInputError(f"no such run folder: {p}")
        folder = p if p.is_dir() else p.parent
        if not (folder / MANIFEST).is_file():
            raise MissingInputError(
                f"{folder} is not a run folder (no {MANIFEST}; a run that did not finish has none)"
            )
        manifest, raw = read_manifest(folder)
        return cls(folder, manifest, raw)

    @classmethod
    def find(cls, path: str | Path) -> RunFolder | None:
        """The run folder ``path`` is or lies in, if it is one (a bare JSONL file is not)."""
        p = Path(path).expanduser()
        folder = p if p.is_dir() else p.parent
        return cls.open(folder) if (folder / MANIFEST).is_file() else None

    # ----------------------------------------------------------------- what it is

    @property
    def made_by(self) -> str:
        """The generator that wrote this folder (``merge`` for merged shards)."""
        return self.manifest.generator

    @property
    def generator(self) -> str:
        """The generator whose records this folder holds (for merged shards, theirs)."""
        merged = self.manifest.extras.get("merged")
        if (
            self.made_by == "merge"
            and isinstance(merged, dict)
            and isinstance(merged.get("generator"), str)
        ):
            return str(merged["generator"])
        return self.made_by

    @property
    def spec(self) -> Any:
        """The registered :class:`~gen.engine.registry.Generator` of :attr:`generator`, if
        installed."""
        from gen.engine.registry import REGISTRY

        return REGISTRY.get(self.generator)

    @property
    def kind(self) -> str:
        """What the records are (``mcq``, ``digital``, ``scenarios``…), as the manifest says or
        as the generator declares (a folder written before the scenarios kind took the bank's
        name says ``scenario``: read as ``scenarios``)."""
        if self.manifest.records is not None:
            kind = self.manifest.records.kind
            return OLD_KINDS.get(kind, kind)
        spec = self.spec
        return spec.kind if spec is not None else "records"

    @property
    def config(self) -> dict[str, Any]:
        """The config the records were made with (for merged shards, the shards' shared one)."""
        merged = self.manifest.extras.get("merged")
        if (
            self.made_by == "merge"
            and isinstance(merged, dict)
            and isinstance(merged.get("source_config"), dict)
        ):
            return dict(merged["source_config"])
        return self.manifest.config

    @property
    def partial(self) -> list[int] | None:
        """The shards a partial merge (``merge allow_missing=true``) lacks; None for any other
        folder. A merged folder that does not say it is complete counts as partial."""
        merged = self.manifest.extras.get("merged")
        if self.made_by != "merge" or not isinstance(merged, dict) or merged.get("complete"):
            return None
        missing = merged.get("missing_shards")
        return [k for k in missing if isinstance(k, int)] if isinstance(missing, list) else []

    @property
    def ok(self) -> bool:
        """The run ended with exit code 0."""
        return self.manifest.exit_code == 0

    def finished_with(self, config: dict[str, Any] | BaseModel) -> bool:
        """This folder holds a run that ended well with this config: every option of ``config``
        (its :data:`RUNTIME_OPTIONS` aside) has the same value in the manifest. What reuse of a
        sub-run's folder (a persona pool, a pipeline's finished step) asks. A folder written
        before an option was renamed holds it under its old name, read as the new one."""
        wanted = config.model_dump(mode="json") if isinstance(config, BaseModel) else config
        mine = dict(self.manifest.config)
        spec = self.spec
        for old, new in getattr(spec.config, "renamed", {}).items() if spec is not None else ():
            if old in mine and (new not in mine or mine[old] is not None):
                mine[new] = mine.pop(old)  # an old option's value won over the new one's
        return (
            self.ok
            and self.records_path.is_file()
            and all(
                mine.get(k, _ABSENT) == v for k, v in wanted.items() if k not in RUNTIME_OPTIONS
            )
        )

    # ----------------------------------------------------------------- files

    @property
    def records_path(self) -> Path:
        name = (
            self.manifest.records.file
            if self.manifest.records is not None
            else f"{self.generator}.jsonl"
        )
        return self.file(name, must_exist=False)

    @property
    def rejects_path(self) -> Path:
        return self.path / REJECTS

    def file(self, rel: str, *, must_exist: bool = True) -> Path:
        """An output file of the run by its name in the manifest (inside the folder)."""
        try:
            path = inside(self.path, rel, what="output")
        except UnsafePathError as e:
            raise InputError(f"{self.path / MANIFEST}: {e}") from None
        if must_exist and not path.is_file():
            raise MissingInputError(f"{self.path}: no {rel} in this run folder")
        return path

    def has(self, rel: str) -> bool:
        """The run has an output file ``rel``."""
        try:
            return inside(self.path, rel, what="output").is_file()
        except UnsafePathError:
            return False

    # ----------------------------------------------------------------- records

    def record_model(self) -> type[BaseModel] | None:
        """The model the records validate against (the one the manifest names, if declared)."""
        spec = self.spec
        if spec is None:
            return None
        names = self.manifest.records.models if self.manifest.records is not None else []
        return spec.record_model(names[0] if len(names) == 1 else None)

    def rows(self) -> Iterator[tuple[int, Any]]:
        """``(line, value)`` of every record, as JSON."""
        from gen.readers import iter_jsonl

        if not self.records_path.is_file():
            raise MissingInputError(
                f"{self.path}: its records file {self.records_path.name} is missing"
            )
        yield from iter_jsonl(self.records_path)

    def records(self, *, typed: bool = True) -> Iterator[Any]:
        """Every record: a validated model object (``typed``, when the generator is installed
        and declares its records), else a dict."""
        from gen.readers import validated

        model = self.record_model() if typed else None
        for line, row in self.rows():
            yield (
                row
                if model is None
                else validated(model, row, f"{self.records_path}:{line}", what="record")
            )

    def rejects(self) -> Iterator[Any]:
        """Every reject row (:class:`schemas.Reject`)."""
        from gen.readers import iter_jsonl, validated
        from gen.schemas import Reject

        if not self.rejects_path.is_file():
            return
        for line, row in iter_jsonl(self.rejects_path):
            yield validated(Reject, row, f"{self.rejects_path}:{line}", what="reject")

    def __len__(self) -> int:
        if self.manifest.counts is not None:
            return self.manifest.counts.accepted
        return sum(1 for _ in self.rows())

    def __repr__(self) -> str:
        counts = self.manifest.counts
        return f"RunFolder({str(self.path)!r}, generator={self.generator!r}, kind={self.kind!r}" + (
            f", records={counts.accepted}, rejected={counts.rejected})"
            if counts is not None
            else ")"
        )

    def _repr_html_(self) -> str:
        """The folder as a notebook shows it: what made it, its counts, its funnel (rejects by
        reason) and its first records."""
        counts = self.manifest.counts
        facts: list[tuple[str, Any]] = [
            ("generator", self.generator),
            ("kind", self.kind),
            ("folder", self.path),
        ]
        if counts is not None:
            facts += [
                ("requested", counts.requested),
                ("accepted", counts.accepted),
                ("rejected", counts.rejected),
            ]
        if not self.ok:
            facts.append(("exit code", f"{self.manifest.exit_code}: {self.manifest.error or ''}"))
        funnel = sorted((counts.rejects_by_reason if counts else {}).items(), key=lambda kv: -kv[1])
        try:
            rows = [row for _, row in itertools.islice(self.rows(), HTML_ROWS)]
            note = None
        except (OSError, ValueError) as e:  # a damaged records file: shown, never raised
            rows, note = [], str(e)
        return html_card("RunFolder", facts, funnel, rows, note=note)

    # ----------------------------------------------------------------- tables

    def to_polars(self) -> Any:
        """The records as a polars DataFrame (nested fields as structs and lists)."""
        import polars as pl

        rows = [
            r.model_dump(mode="json") if isinstance(r, BaseModel) else r for r in self.records()
        ]
        return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()

    def to_hf(self) -> Any:
        """The records as a Hugging Face ``datasets.Dataset`` (needs the ``datasets`` package)."""
        try:
            import datasets
        except ImportError:
            raise MissingInputError(
                "to_hf needs the datasets package: pip install 'egogen[release]'"
            ) from None
        rows = [
            r.model_dump(mode="json") if isinstance(r, BaseModel) else r for r in self.records()
        ]
        return datasets.Dataset.from_list(rows)


HTML_ROWS = 5
"""Records a notebook's table of a run folder or bank shows."""
HTML_COLUMNS = 8
HTML_CELL = 120


def html_cell(value: Any) -> str:
    """One value for an HTML table: text as is, anything else as JSON, cut, always escaped."""
    if isinstance(value, Path):
        value = str(value)
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > HTML_CELL:
        text = text[: HTML_CELL - 1] + "…"
    return html.escape(text)


def html_card(
    title: str,
    facts: Sequence[tuple[str, Any]],
    funnel: Sequence[tuple[str, int]],
    rows: Sequence[Any],
    *,
    funnel_title: str = "rejected by reason",
    rows_title: str | None = None,
    note: str | None = None,
) -> str:
    """What a notebook shows for a run folder or a bank (``_repr_html_``): a table of facts and
    counts, the funnel, and the first rows' first columns. Every text is escaped: records hold
    what a model wrote."""
    out = [f'<div class="gen-card"><table><caption><b>{html.escape(title)}</b></caption>']
    out += [f"<tr><th>{html.escape(k)}</th><td>{html_cell(v)}</td></tr>" for k, v in facts]
    out.append("</table>")
    if funnel:
        out.append(f"<table><caption>{html.escape(funnel_title)}</caption>")
        out += [f"<tr><td>{html_cell(k)}</td><td>{v}</td></tr>" for k, v in funnel]
        out.append("</table>")
    if note:
        out.append(f"<p>{html_cell(note)}</p>")
    dicts = [r for r in rows if isinstance(r, dict)]
    if dicts:
        columns = list(dict.fromkeys(k for r in dicts for k in r))[:HTML_COLUMNS]
        caption = rows_title or f"first {len(dicts)} records"
        out.append(f"<table><caption>{html.escape(caption)}</caption><tr>")
        out += [f"<th>{html_cell(c)}</th>" for c in columns]
        out.append("</tr>")
        for r in dicts:
            cells = "".join(f"<td>{html_cell(r[c]) if c in r else ''}</td>" for c in columns)
            out.append(f"<tr>{cells}</tr>")
        out.append("</table>")
    out.append("</div>")
    return "".join(out)


def records_file(path: Path, name: str) -> Path:
    """The records file a user gave as ``path``: a JSONL file itself, or a folder's ``<name>.jsonl``
    (read by its records: a folder whose manifest is damaged still gives them), else the records
    file its manifest names."""
    file = path
    if path.is_dir():
        file = path / f"{name}.jsonl"
        if not file.is_file() and (run := RunFolder.find(path)) is not None:
            file = run.records_path
    if not file.is_file():
        raise MissingInputError(f"input: {file} not found (expected a {name} run folder or file)")
    return file


def load_run_records(path: Path, name: str) -> tuple[list[dict[str, Any]], Path]:
    """Records of a run folder (the records file its manifest names, else ``<name>.jsonl``) or
    of a JSONL file, as JSON values; and the file they were read from."""
    from gen.readers import iter_jsonl

    file = records_file(path, name)
    return [record for _, record in iter_jsonl(file)], file
