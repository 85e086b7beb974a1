"""Check 10: a run folder's files against its manifest.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gen.llm import sha256_file
from generators.audit.registry import CheckResult, check, finding
from generators.audit.report import table
from schemas.audit import Severity

if TYPE_CHECKING:
    from generators.audit import AuditConfig
    from generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    return table([{"run folder": k, **v} for k, v in r.stats["folders"].items()])


@check("integrity", order=10, title="Integrity: output files against manifest.json",
       finds="output files or record counts that differ from the run's manifest.json",
       markdown=_markdown)
def integrity(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """The SHA-256 of every output file against the run's manifest.json, and the record counts."""
    key = "integrity"
    res = CheckResult(key)
    if not data.folders:
        return CheckResult(key, "skipped", "no run folder with a manifest.json among the inputs")
    verified: dict[str, Any] = {}
    for folder in data.folders:
        name = str(folder)

        def add(kind: str, sev: Severity, what: str, fields: list[str], name: str = name, **numbers: Any) -> None:
            res.findings.append(finding(key, kind, sev, what, fields=fields, numbers=numbers, bank=name))

        try:
            manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            add("manifest_unreadable", "error", f"manifest.json cannot be read ({e})", ["manifest.json"])
            continue
        outputs = manifest.get("outputs")
        if not isinstance(outputs, dict) or not outputs:
            add("manifest_without_outputs", "error", "manifest.json lists no output hashes", ["outputs"])
            continue
        ok = 0
        for rel, digest in sorted(outputs.items()):
            path = folder / rel
            if not path.is_file():
                add("output_missing", "error", f"{rel} is listed in the manifest but missing", [f"outputs.{rel}"])
                continue
            actual = sha256_file(path)
            if actual != digest:
                add("output_changed", "error", f"{rel} does not match its SHA-256 in manifest.json",
                    [f"outputs.{rel}"], expected=digest, actual=actual)
            else:
                ok += 1
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if path.is_file() and rel != "manifest.json" and rel not in outputs and not rel.endswith((".partial", ".tmp")):
                add("output_unlisted", "warning", f"{rel} is in the folder but not in the manifest", [f"outputs.{rel}"])
        counts = manifest.get("counts") or {}
        rec_name = (manifest.get("merged") or {}).get("generator") or manifest.get("generator")
        for fname, count_key in ((f"{rec_name}.jsonl", "accepted"), ("rejects.jsonl", "rejected")):
            path = folder / fname
            if path.is_file() and count_key in counts:
                lines = sum(1 for line in open(path, encoding="utf-8", errors="replace") if line.strip())
                if lines != counts[count_key]:
                    add("count_mismatch", "error", f"{fname} has {lines} lines, the manifest counts {counts[count_key]} {count_key}",
                        [f"counts.{count_key}"], lines=lines, manifest=counts[count_key])
        for src, digest in sorted((manifest.get("inputs") or {}).items()):
            p = Path(src)
            if p.is_file() and sha256_file(p) != digest:
                add("input_changed", "warning", f"the input {src} changed since the run", [f"inputs.{src}"])
        verified[name] = {"generator": manifest.get("generator"), "outputs": len(outputs), "matching": ok}
    res.stats = {"folders": verified}
    return res
