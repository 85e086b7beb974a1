"""Running the audit in tests: the fixture banks (``tests/fixtures/audit/``, with ``planted.json``:
what each plant touched), a deterministic stand-in embedder, the audit run in process, and
findings compared as (kind, items, fields) triples. Shared by the audit's unit tests and the
review tests that read an audit."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from gen.engine.runner import RunContext, run_config
from gen.generators.audit import AuditConfig
from gen.generators.audit.text import norm

FIX = Path(__file__).resolve().parent / "fixtures" / "audit"
PLANTED = json.loads((FIX / "planted.json").read_text())


class TrigramEmbedder:
    """Deterministic stand-in for MiniLM: character trigrams of the normalised text hashed into
    512 buckets, L2-normalised. Paraphrases sharing most words land close; different sentences
    do not."""

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), 512), dtype=np.float32)
        for i, t in enumerate(texts):
            s = f"  {norm(t)}  "
            for j in range(len(s) - 2):
                h = int.from_bytes(hashlib.md5(s[j : j + 3].encode()).digest()[:4], "little")
                out[i, h % 512] += 1.0
        out /= np.linalg.norm(out, axis=1, keepdims=True) + 1e-9
        return out

    def describe(self) -> dict[str, Any]:
        return {"backend": "trigram-fake"}


# thresholds for the trigram embedder (its cosines run lower than MiniLM's for paraphrases)
FAKE_SIM = {"option_dup_sim": 0.94, "answer_close_sim": 0.75, "item_dup_sim": 0.95}


def run_audit(
    out: Path, input: Path | str, **cfg: Any
) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """Run the audit in process with the trigram embedder (no plots unless asked); (RunResult,
    findings, audit.json)."""
    settings = AuditConfig(
        **{
            "input": str(input),
            "cache_dir": None,
            "progress": "off",
            "plots": False,
            **FAKE_SIM,
            **cfg,
        }
    )
    ctx = RunContext("audit", settings, out)
    ctx.use(embedder=TrigramEmbedder())
    result = run_config("audit", settings, out, ctx=ctx, quiet=True)
    findings = [json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines() if x.strip()]
    return result, findings, json.loads((out / "audit.json").read_text())


def triples(
    findings: list[dict[str, Any]], kinds: set[str] | None = None, sort_fields: bool = False
) -> list[tuple]:
    return sorted(
        (
            f["kind"] if kinds is None else "*",
            tuple(f["items"]),
            tuple(sorted(f["fields"]) if sort_fields else f["fields"]),
        )
        for f in findings
        if kinds is None or f["kind"] in kinds
    )


def expected(name: str, kind: str | None = None, sort_fields: bool = False) -> list[tuple]:
    return sorted(
        (
            kind or p["kind"],
            tuple(p["items"]),
            tuple(sorted(p["fields"]) if sort_fields else p["fields"]),
        )
        for p in PLANTED[name]
    )


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
