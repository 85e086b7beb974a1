"""Merge shard folders of one sharded run into one folder with one manifest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from gen.errors import InputError, MissingInputError
from gen.run import CommonConfig, RunContext, generator
from schemas import Reject

# Keys that may differ between shards of one run.
SHARD_KEYS = {"shard", "progress", "progress_every", "cache_dir"}


@dataclass(frozen=True)
class RawRecord:
    """A record line copied as is, so merged records are byte-identical to the shards'."""

    line: str

    def model_dump_json(self) -> str:
        return self.line


class MergeConfig(CommonConfig):
    input: list[str] = Field(min_length=1)  # type: ignore[assignment]
    """Shard run folders: input=[dir0,dir1,...]."""

    @model_validator(mode="after")
    def _count(self) -> MergeConfig:
        # n is what the shards requested, so the runner's accounting reconciles.
        self.n = sum(b - a for _, _, (a, b) in read_shards(self.input))
        return self


def read_shards(paths: list[str]) -> list[tuple[Path, dict[str, Any], tuple[int, int]]]:
    """Shard folders with their manifests, in index order; refuses overlaps and mismatches."""
    shards = []
    for p in paths:
        folder = Path(p).expanduser()
        manifest = folder / "manifest.json"
        if not manifest.is_file():
            raise MissingInputError(f"input: {folder} is not a finished run folder (no manifest.json)")
        m = json.loads(manifest.read_text())
        shards.append((folder, m, tuple(m["shard"]["indices"])))
    shards.sort(key=lambda s: s[2])
    first = shards[0][1]
    base = {k: v for k, v in first["config"].items() if k not in SHARD_KEYS}
    for folder, m, _ in shards[1:]:
        if m["generator"] != first["generator"]:
            raise InputError(f"input: {folder} is a {m['generator']} run, {shards[0][0]} a {first['generator']} run")
        other = {k: v for k, v in m["config"].items() if k not in SHARD_KEYS}
        if other != base:
            diff = sorted(k for k in base.keys() | other.keys() if base.get(k) != other.get(k))
            raise InputError(f"input: {folder} was run with a different config ({', '.join(diff)})")
    for (fa, _, (a0, a1)), (fb, _, (b0, b1)) in zip(shards, shards[1:], strict=False):
        if b0 < a1:
            raise InputError(f"input: shards overlap: {fa} has indices [{a0}, {a1}), {fb} has [{b0}, {b1})")
    return shards  # type: ignore[return-value]


@generator("merge", config=MergeConfig)
def merge(cfg: MergeConfig, ctx: RunContext) -> Iterator[RawRecord | Reject]:
    """Merge shard folders (input=[...]) of one run into one folder and one manifest."""
    shards = read_shards(cfg.input)
    name = shards[0][1]["generator"]
    ctx.records_name = name
    merged_json: dict[str, dict[str, Any]] = {}
    for folder, m, _ in shards:
        for kind in (f"{name}.jsonl", "rejects.jsonl"):
            ctx.record_input(folder / kind)
        with open(folder / f"{name}.jsonl", encoding="utf-8") as f:
            for line in f:
                yield RawRecord(line.rstrip("\n"))
        with open(folder / "rejects.jsonl", encoding="utf-8") as f:
            for line in f:
                yield Reject.model_validate_json(line)
        for extra in sorted(folder.glob("*.json")):
            if extra.name != "manifest.json":
                data = json.loads(extra.read_text())
                if isinstance(data, dict):
                    merged_json.setdefault(extra.name, {}).update(data)
        for k, v in (m.get("validators") or {}).items():
            ctx.count(k, v)
    for fname, data in merged_json.items():
        ctx.write_json(fname, data)
    a, b = shards[0][2][0], shards[-1][2][1]
    covered = sum(e - s for _, _, (s, e) in shards)
    ctx.extra["merged"] = {
        "generator": name,
        "source_config": {k: v for k, v in shards[0][1]["config"].items() if k not in SHARD_KEYS},
        "complete": covered == b - a and a == 0 and shards[0][1]["shard"]["num_shards"] == len(shards),
        "shards": [{"path": str(f), "indices": list(r), "counts": m["counts"],
                    "llm_usage": m.get("llm_usage")} for f, m, r in shards],
    }
