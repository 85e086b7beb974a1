"""Merge shard folders of one sharded run into one folder with one manifest.

Shards cut the indices into contiguous slices and every generator writes its outputs in index
order, so concatenating the shards' outputs in index order gives the unsharded run's bytes:

* the records and ``rejects.jsonl``, line by line;
* every other output of the shards (from their manifests' ``outputs``), by type: ``.jsonl``
  line by line, ``.csv`` row by row under one header, ``.json`` lists concatenated and
  ``.json`` objects joined (keys may not clash), in sub-folders too (``nocontext``'s
  ``kept/``). A file of another type, or an object whose keys clash (a summary, not a map), is
  left to the generator's merge hook; what nothing merged is listed in ``merged.not_merged``;
* the manifest's summaries: the generator's merge hook recomputes them from all the records
  (``tom``'s funnel, ``nocontext``'s accuracies, ``digital``'s sizes…); without a hook each
  shard's stay under ``merged.shards``.

A merge proves itself complete before it writes: every shard of ``num_shards`` once (or, with
``allow_missing``, the missing ones listed and the merge marked partial), each shard's files the
ones its run wrote (their SHA-256 as its manifest's ``outputs`` recorded), the index ranges
contiguous from 0 and disjoint.

Shard folders are input, not trusted: the plan hook checks each manifest (:class:`ShardManifest`),
passes every file name it gives through :func:`gen.paths.inside` (the shard folder when read,
the run folder when written), and parses every record and reject, so a bad shard is one
InputError naming the file before anything is written.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gen.engine.manifest import atomic_write, extras_of
from gen.engine.registry import REGISTRY, generator
from gen.engine.runfolder import read_manifest
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.errors import InputError, MissingInputError
from gen.llm import Usage, sha256_file
from gen.llm.usage import SUMMED
from gen.paths import UnsafePathError, inside
from gen.readers import parse_json, read_json, read_text, validated
from gen.schemas import Reject

# Keys that may differ between shards of one run.
SHARD_KEYS = {"shard", "progress", "progress_every", "cache_dir"}
# Outputs merge never copies: the runner's own files and Hydra's.
SKIP_PREFIXES = (".hydra/",)
SKIP_SUFFIXES = (".log",)


@dataclass(frozen=True)
class RawRecord:
    """A record line copied as is, so merged records are byte-identical to the shards'."""

    line: str

    def model_dump_json(self) -> str:
        return self.line


class _ShardPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    shard: int = Field(ge=0)
    indices: tuple[int, int]
    num_shards: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> _ShardPart:
        if not 0 <= self.indices[0] <= self.indices[1]:
            raise ValueError(
                f"indices must be [start, stop] with 0 <= start <= stop, got {list(self.indices)}"
            )
        if self.shard >= self.num_shards:
            raise ValueError(f"shard must be < num_shards ({self.num_shards}), got {self.shard}")
        return self


class _Counts(BaseModel):
    model_config = ConfigDict(extra="allow")
    requested: int = Field(ge=0)
    indices_done: int | None = Field(None, ge=0)


class ShardManifest(BaseModel):
    """The parts of a shard's ``manifest.json`` merge relies on; the rest (a generator's
    summaries) is the generator's merge hook's to read."""

    model_config = ConfigDict(extra="allow")
    generator: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    """A generator's name (it names the records file)."""
    config: dict[str, Any]
    shard: _ShardPart
    counts: _Counts
    outputs: dict[str, str] = Field(default_factory=dict)
    validators: dict[str, int] = Field(default_factory=dict)
    llm_usage: dict[str, int | float | None] | None = None

    @model_validator(mode="after")
    def _summed_usage_are_numbers(self) -> ShardManifest:
        # merge adds these up; the others (a reuse ratio) may be null
        for key in SUMMED:
            if self.llm_usage and key in self.llm_usage and self.llm_usage[key] is None:
                raise ValueError(f"llm_usage.{key}: a number is required, got null")
        return self


@dataclass(frozen=True)
class Shard:
    folder: Path
    manifest: dict[str, Any]
    """As read (a generator's merge hook reads its summaries)."""
    meta: ShardManifest
    """The parts merge relies on, checked."""
    indices: tuple[int, int]
    records: Path
    """``<generator>.jsonl`` inside the folder."""
    rejects: Path
    outputs: dict[str, Path]
    """The shard's other outputs to merge: manifest name -> file inside the folder."""


class MergeConfig(CommonConfig):
    input: list[str] = Field(min_length=1)  # type: ignore[assignment]
    """Shard run folders: input=[dir0,dir1,...]."""
    allow_missing: bool = False
    """Merge the shards given though some of num_shards are missing: a partial merge, marked so
    in its manifest (``merged.complete: false``, ``merged.missing_shards``); ``bank add`` refuses
    it."""


@dataclass(frozen=True)
class Shards:
    """The shards to merge, in index order, and the numbers of those missing."""

    shards: list[Shard]
    missing: list[int]


def plan(cfg: MergeConfig) -> Plan:
    """As many indices as the shards requested, so the runner's accounting reconciles."""
    given = read_shards(cfg.input, allow_missing=cfg.allow_missing)
    return Plan(sum(s.indices[1] - s.indices[0] for s in given.shards), given)


def read_shard(folder: Path) -> Shard:
    """One shard folder: its manifest checked (types, and every file name it gives stays
    inside the folder), its records and rejects found, their rows matching its indices."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        raise MissingInputError(f"input: {folder} is not a finished run folder (no manifest.json)")
    m, raw = read_manifest(folder, ShardManifest)

    def path(name: str, what: str) -> Path:
        try:
            return inside(folder, name, what=what)
        except UnsafePathError as e:
            raise InputError(f"{manifest}: {e}; a shard's files lie inside its folder") from None

    records = path(f"{m.generator}.jsonl", "generator")
    rejects = path("rejects.jsonl", "rejects")
    for f in (records, rejects):
        if not f.is_file():
            raise MissingInputError(f"input: {folder} is not a finished run folder (no {f.name})")
    own = {records.name, rejects.name}
    outputs = {}
    for rel in m.outputs:
        file = path(rel, "output")
        if rel in own or rel.startswith(SKIP_PREFIXES) or rel.endswith(SKIP_SUFFIXES):
            continue
        if not file.is_file():
            raise MissingInputError(f"input: {file} is in the shard's manifest but missing")
        outputs[rel] = file
    a, b = m.shard.indices
    lines, rejected, _ = _records(records, rejects)  # every row parses, before any folder is made
    rows = len(lines) + len(rejected)
    fits = (rows == b - a) if m.counts.indices_done is None else (b > a or rows == 0)
    if not fits:
        raise InputError(
            f"input: {folder} holds {rows} records and rejects for its {b - a} indices "
            f"[{a}, {b}) (manifest.json: shard.indices)"
        )
    for rel, file in ((records.name, records), (rejects.name, rejects), *outputs.items()):
        recorded = m.outputs.get(rel)
        if recorded is None:
            raise InputError(
                f"input: shard {m.shard.shard} ({folder}): its manifest.json records no hash of "
                f"{rel} (outputs); a finished run's manifest has one"
            )
        if sha256_file(file) != recorded:
            raise InputError(
                f"input: shard {m.shard.shard} ({folder}): {rel} is not the file its run wrote "
                "(its SHA-256 differs from manifest.json's outputs); rerun that shard"
            )
    return Shard(folder, raw, m, (a, b), records, rejects, outputs)


def read_shards(paths: list[str], *, allow_missing: bool = False) -> Shards:
    """Shard folders with their manifests, in index order, proved complete: every shard of
    ``num_shards`` given once (``allow_missing``: the missing ones listed instead), their index
    ranges contiguous from 0 and disjoint; refuses overlaps and mismatches."""
    shards = [read_shard(Path(p).expanduser()) for p in paths]
    shards.sort(key=lambda s: (s.meta.shard.shard, s.indices))
    first = shards[0]
    base = {k: v for k, v in first.manifest["config"].items() if k not in SHARD_KEYS}
    for s in shards[1:]:
        if s.manifest["generator"] != first.manifest["generator"]:
            raise InputError(
                f"input: {s.folder} is a {s.manifest['generator']} run, "
                f"{first.folder} a {first.manifest['generator']} run"
            )
        other = {k: v for k, v in s.manifest["config"].items() if k not in SHARD_KEYS}
        if other != base:
            diff = sorted(k for k in base.keys() | other.keys() if base.get(k) != other.get(k))
            raise InputError(
                f"input: {s.folder} was run with a different config ({', '.join(diff)})"
            )
    k = first.meta.shard.num_shards
    for s in shards:
        if s.meta.shard.num_shards != k:
            raise InputError(
                f"input: shard {s.meta.shard.shard} ({s.folder}) is one of "
                f"{s.meta.shard.num_shards} shards, {first.folder} one of {k}"
            )
    for a, b in zip(shards, shards[1:], strict=False):
        if a.meta.shard.shard == b.meta.shard.shard:
            raise InputError(
                f"input: shard {a.meta.shard.shard} is given twice: {a.folder} and {b.folder}"
            )
        if b.indices[0] < a.indices[1]:
            raise InputError(
                f"input: shards overlap: {a.folder} has indices [{a.indices[0]}, {a.indices[1]}), "
                f"{b.folder} has [{b.indices[0]}, {b.indices[1]})"
            )
        if b.meta.shard.shard == a.meta.shard.shard + 1 and b.indices[0] != a.indices[1]:
            raise InputError(
                f"input: shard {b.meta.shard.shard} ({b.folder}) starts at index {b.indices[0]}, "
                f"not where shard {a.meta.shard.shard} ends ({a.indices[1]}): indices are missing"
            )
    if first.meta.shard.shard == 0 and first.indices[0] != 0:
        raise InputError(
            f"input: shard 0 ({first.folder}) starts at index {first.indices[0]}, not 0"
        )
    missing = sorted(set(range(k)) - {s.meta.shard.shard for s in shards})
    if missing and not allow_missing:
        raise InputError(
            f"input: shard(s) {', '.join(map(str, missing))} of {k} missing (given: "
            f"{', '.join(str(s.meta.shard.shard) for s in shards)}); give every shard's folder, "
            "or allow_missing=true for a partial merge"
        )
    return Shards(shards, missing)


def _rows(path: Path) -> list[tuple[int, str]]:
    """``(line number, line)`` of the non-blank lines of a records file, as merge copies them."""
    return [(k, line) for k, line in enumerate(_lines(path), 1) if line.strip(" \t\r\n\f\v")]


def _lines(path: Path) -> list[str]:
    """A text file's lines, each ending in a newline (read as the runner wrote them: only
    ``\\n``, ``\\r\\n`` and ``\\r`` end a line; a U+2028 inside a JSON string does not)."""
    return [
        line if line.endswith("\n") else line + "\n"
        for line in io.StringIO(read_text(path), newline=None)
    ]


def merge_file(parts: list[Path]) -> str | None:
    """The shards' copies of one output joined in index order, or None when its type (or
    content) has no generic merge."""
    suffix = parts[0].suffix
    if suffix == ".jsonl":
        return "".join(line for p in parts for line in _lines(p))
    if suffix == ".csv":
        texts = [_lines(p) for p in parts]
        headers = {t[0] for t in texts if t}
        if len(headers) > 1:
            raise InputError(f"input: {parts[0].name} has different columns in different shards")
        return "".join(texts[0][:1]) + "".join(line for t in texts for line in t[1:])
    if suffix == ".json":
        data = [read_json(p) for p in parts]
        if all(isinstance(d, list) for d in data):
            joined: Any = [x for d in data for x in d]
            for indent in (1, None):  # a list streamed by JsonListWriter keeps its layout
                if read_text(parts[0]) == _streamed(data[0], indent):
                    return _streamed(joined, indent)
        elif all(isinstance(d, dict) for d in data):
            joined = {}
            for d in data:
                if any(k in joined and joined[k] != v for k, v in d.items()):
                    return None  # a per-shard summary: the generator's hook rebuilds it
                joined.update(d)
        else:
            return None
        return (
            json.dumps(joined, ensure_ascii=False, indent=1, allow_nan=False) + "\n"
        )  # as ctx.write_json
    return None


def _streamed(items: list[Any], indent: int | None) -> str:
    """A list as :class:`gen.engine.manifest.JsonListWriter` writes it."""
    if not items:
        return "[]\n"
    body = ",\n".join(
        json.dumps(x, ensure_ascii=False, indent=indent, allow_nan=False) for x in items
    )
    return "[\n" + body + "\n]\n"


def merge_outputs(shards: list[Shard], out: Path) -> list[str]:
    """Write every extra output of the shards into ``out``; return those it could not merge."""
    outputs: dict[str, list[Path]] = {}
    for s in shards:
        for rel, file in s.outputs.items():
            outputs.setdefault(rel, []).append(file)
    not_merged = []
    for rel, parts in sorted(outputs.items()):
        text = merge_file(parts)
        if text is None:
            not_merged.append(rel)
            continue
        try:  # names were checked when read; here a symlink in the run folder may still lead out
            target = inside(out, rel, what="output")
        except UnsafePathError as e:
            raise InputError(f"{out}: {e}; merge writes only inside its run folder") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, text)
    return not_merged


def _records(
    records: Path, rejects: Path
) -> tuple[list[RawRecord], list[Reject], list[dict[str, Any]]]:
    """A shard's record lines (as they are, and parsed) and its rejects; a line that is not
    one is an InputError naming the file and line."""
    lines, parsed = [], []
    for k, line in _rows(records):
        parsed.append(parse_json(line, f"{records}:{k}"))
        lines.append(RawRecord(line.rstrip("\n")))
    rejected = []
    for k, line in _rows(rejects):
        rejected.append(
            validated(
                Reject, parse_json(line, f"{rejects}:{k}"), f"{rejects}:{k}", objects_only=False
            )
        )
    return lines, rejected, parsed


@generator("merge", config=MergeConfig, kind="merged", plan=plan)
def merge(
    cfg: MergeConfig, ctx: RunContext
) -> Iterator[RawRecord | Reject | list[RawRecord | Reject]]:
    """Merge shard folders (input=[...]) of one run into one folder and one manifest."""
    given: Shards = ctx.plan.data
    shards = given.shards
    name = shards[0].manifest["generator"]
    ctx.records_name = name
    source = shards[0].manifest.get("records")
    ctx.records_kind = (
        source.get("kind")
        if isinstance(source, dict) and isinstance(source.get("kind"), str)
        else None
    )
    if ctx.records_kind is None and name in REGISTRY:
        ctx.records_kind = REGISTRY[name].kind
    if isinstance(source, dict) and isinstance(source.get("models"), list):
        ctx.records_models = [m for m in source["models"] if isinstance(m, str)]
    hook = REGISTRY[name].merge if name in REGISTRY else None
    records: list[dict[str, Any]] = []  # parsed only for a hook
    for s in shards:
        for f in (s.records, s.rejects):
            ctx.record_input(f)
        lines, rejects, parsed = _records(s.records, s.rejects)
        if hook is not None:
            records += parsed
        if s.meta.counts.indices_done is not None:
            # An index gave a list of outcomes, and records do not say which index they came
            # from: the shard's outcomes go out as one list, then empty ones for its other indices.
            span = s.indices[1] - s.indices[0]
            if span:
                yield [*lines, *rejects]
                for _ in range(span - 1):
                    yield []
        else:
            yield from lines
            yield from rejects
        for k, v in s.meta.validators.items():
            ctx.count(k, v)
    not_merged = merge_outputs(shards, ctx.out_dir)
    if hook is not None:
        try:
            hook(ctx, records, [s.manifest for s in shards])
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            IndexError,
            ZeroDivisionError,
        ) as e:
            # the hook reads only the shards' summaries and records: a shape it cannot read is
            # theirs (written by another version, or edited), named with what the hook missed
            folders = ", ".join(str(s.folder / "manifest.json") for s in shards)
            raise InputError(
                f"input: {name}'s merge cannot read the shards' summaries or records "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}) in {folders}"
            ) from None
    if given.missing:
        ctx.say(
            f"partial merge: shard(s) {', '.join(map(str, given.missing))} of "
            f"{shards[0].meta.shard.num_shards} missing",
            always=True,
        )
    ctx.extra["merged"] = {
        "generator": name,
        "source_config": {
            k: v for k, v in shards[0].manifest["config"].items() if k not in SHARD_KEYS
        },
        "complete": not given.missing,
        "missing_shards": given.missing,
        "not_merged": [rel for rel in not_merged if not inside(ctx.out_dir, rel).is_file()],
        "llm_usage": Usage.total([s.meta.llm_usage for s in shards]),
        "shards": [
            {
                "path": str(s.folder),
                "shard": s.meta.shard.shard,
                "indices": list(s.indices),
                "counts": s.manifest["counts"],
                "llm_usage": s.manifest.get("llm_usage"),
                **({} if hook else {"summaries": extras_of(s.manifest)}),
            }
            for s in shards
        ],
    }
