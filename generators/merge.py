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
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from gen.errors import InputError, MissingInputError
from gen.llm import Usage
from gen.run import REGISTRY, CommonConfig, Plan, RunContext, atomic_write, extras_of, generator
from schemas import Reject

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


@dataclass(frozen=True)
class Shard:
    folder: Path
    manifest: dict[str, Any]
    indices: tuple[int, int]


class MergeConfig(CommonConfig):
    input: list[str] = Field(min_length=1)  # type: ignore[assignment]
    """Shard run folders: input=[dir0,dir1,...]."""


def plan(cfg: MergeConfig) -> Plan:
    """As many indices as the shards requested, so the runner's accounting reconciles."""
    shards = read_shards(cfg.input)
    return Plan(sum(s.indices[1] - s.indices[0] for s in shards), shards)


def read_shards(paths: list[str]) -> list[Shard]:
    """Shard folders with their manifests, in index order; refuses overlaps and mismatches."""
    shards = []
    for p in paths:
        folder = Path(p).expanduser()
        manifest = folder / "manifest.json"
        if not manifest.is_file():
            raise MissingInputError(f"input: {folder} is not a finished run folder (no manifest.json)")
        m = json.loads(manifest.read_text())
        shards.append(Shard(folder, m, tuple(m["shard"]["indices"])))  # type: ignore[arg-type]
    shards.sort(key=lambda s: s.indices)
    first = shards[0]
    base = {k: v for k, v in first.manifest["config"].items() if k not in SHARD_KEYS}
    for s in shards[1:]:
        if s.manifest["generator"] != first.manifest["generator"]:
            raise InputError(f"input: {s.folder} is a {s.manifest['generator']} run, "
                             f"{first.folder} a {first.manifest['generator']} run")
        other = {k: v for k, v in s.manifest["config"].items() if k not in SHARD_KEYS}
        if other != base:
            diff = sorted(k for k in base.keys() | other.keys() if base.get(k) != other.get(k))
            raise InputError(f"input: {s.folder} was run with a different config ({', '.join(diff)})")
    for a, b in zip(shards, shards[1:], strict=False):
        if b.indices[0] < a.indices[1]:
            raise InputError(f"input: shards overlap: {a.folder} has indices [{a.indices[0]}, {a.indices[1]}), "
                             f"{b.folder} has [{b.indices[0]}, {b.indices[1]})")
    return shards


def _lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line if line.endswith("\n") else line + "\n" for line in f]


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
        data = [json.loads(p.read_text(encoding="utf-8")) for p in parts]
        if all(isinstance(d, list) for d in data):
            joined: Any = [x for d in data for x in d]
        elif all(isinstance(d, dict) for d in data):
            joined = {}
            for d in data:
                if any(k in joined and joined[k] != v for k, v in d.items()):
                    return None  # a per-shard summary: the generator's hook rebuilds it
                joined.update(d)
        else:
            return None
        return json.dumps(joined, ensure_ascii=False, indent=1) + "\n"  # as ctx.write_json
    return None


def merge_outputs(shards: list[Shard], name: str, out: Path) -> list[str]:
    """Write every extra output of the shards into ``out``; return those it could not merge."""
    own = {f"{name}.jsonl", "rejects.jsonl"}
    outputs: dict[str, list[Path]] = {}
    for s in shards:
        for rel in s.manifest.get("outputs") or {}:
            if rel in own or rel.startswith(SKIP_PREFIXES) or rel.endswith(SKIP_SUFFIXES):
                continue
            if not (s.folder / rel).is_file():
                raise MissingInputError(f"input: {s.folder / rel} is in the shard's manifest but missing")
            outputs.setdefault(rel, []).append(s.folder / rel)
    not_merged = []
    for rel, parts in sorted(outputs.items()):
        text = merge_file(parts)
        if text is None:
            not_merged.append(rel)
            continue
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out / rel, text)
    return not_merged


@generator("merge", config=MergeConfig, plan=plan)
def merge(cfg: MergeConfig, ctx: RunContext) -> Iterator[RawRecord | Reject | list[RawRecord | Reject]]:
    """Merge shard folders (input=[...]) of one run into one folder and one manifest."""
    shards: list[Shard] = ctx.plan.data
    name = shards[0].manifest["generator"]
    ctx.records_name = name
    hook = REGISTRY[name].merge if name in REGISTRY else None
    records: list[dict[str, Any]] = []  # parsed only for a hook
    for s in shards:
        for kind in (f"{name}.jsonl", "rejects.jsonl"):
            ctx.record_input(s.folder / kind)
        lines = [RawRecord(x.rstrip("\n")) for x in _lines(s.folder / f"{name}.jsonl")]
        rejects = [Reject.model_validate_json(x) for x in _lines(s.folder / "rejects.jsonl")]
        if hook is not None:
            records += [json.loads(r.line) for r in lines]
        if "indices_done" in s.manifest["counts"]:
            # An index gave a list of outcomes, and records do not say which index they came
            # from: the shard's outcomes go out as one list, then empty ones for its other indices.
            yield [*lines, *rejects]
            for _ in range(s.indices[1] - s.indices[0] - 1):
                yield []
        else:
            yield from lines
            yield from rejects
        for k, v in (s.manifest.get("validators") or {}).items():
            ctx.count(k, v)
    not_merged = merge_outputs(shards, name, ctx.out_dir)
    if hook is not None:
        hook(ctx, records, [s.manifest for s in shards])
    a, b = shards[0].indices[0], shards[-1].indices[1]
    covered = sum(s.indices[1] - s.indices[0] for s in shards)
    ctx.extra["merged"] = {
        "generator": name,
        "source_config": {k: v for k, v in shards[0].manifest["config"].items() if k not in SHARD_KEYS},
        "complete": covered == b - a and a == 0 and shards[0].manifest["shard"]["num_shards"] == len(shards),
        "not_merged": [rel for rel in not_merged if not (ctx.out_dir / rel).is_file()],
        "llm_usage": Usage.total([s.manifest.get("llm_usage") for s in shards]),
        "shards": [{"path": str(s.folder), "indices": list(s.indices), "counts": s.manifest["counts"],
                    "llm_usage": s.manifest.get("llm_usage"),
                    **({} if hook else {"summaries": extras_of(s.manifest)})} for s in shards],
    }
