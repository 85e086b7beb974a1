"""Check 15: a run folder's files against its manifest.json."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gen.formats.labels import REVIEWS
from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import table
from gen.llm import sha256_file
from gen.paths import UnsafePathError, inside
from gen.schemas.audit import Severity

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _object(manifest: dict[str, Any], key: str) -> dict[str, Any]:
    """A manifest section that should be a JSON object ({} when it is absent or is not one)."""
    value = manifest.get(key)
    return value if isinstance(value, dict) else {}


def _markdown(r: CheckResult) -> list[str]:
    return table([{"run folder": k, **v} for k, v in r.stats["folders"].items()])


@check(
    "integrity",
    order=15,
    title="Integrity: output files against manifest.json",
    finds="output files or record counts that differ from the run's manifest.json",
    markdown=_markdown,
)
def integrity(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """The SHA-256 of every output file against the run's manifest.json, and the record counts.
    Every name the manifest gives is joined onto the run folder through ``gen.paths.inside``: a
    name leaving the folder (absolute, ``..``, a symlink out) is an error and is never opened;
    inputs recorded outside the folder are not read."""
    key = "integrity"
    res = CheckResult(key)
    if not data.folders:
        return CheckResult(key, "skipped", "no run folder with a manifest.json among the inputs")
    verified: dict[str, Any] = {}
    for folder in data.folders:
        name = str(folder)

        def add(
            kind: str, sev: Severity, what: str, fields: list[str], name: str = name, **numbers: Any
        ) -> None:
            res.findings.append(
                finding(key, kind, sev, what, fields=fields, numbers=numbers, bank=name)
            )

        def file(rel: str, field: str, folder: Path = folder) -> Path | None:
            """``folder/rel`` for a name the manifest gives; a name leaving the folder is an
            error finding and is never opened."""
            try:
                return inside(folder, rel, what="manifest name")
            except UnsafePathError as e:
                add(
                    "outside_run_folder",
                    "error",
                    f"manifest names a file outside the run folder ({e})",
                    [field],
                )
                return None

        manifest = data.manifests[folder]
        outputs = manifest.get("outputs")
        if not isinstance(outputs, dict) or not outputs:
            add(
                "manifest_without_outputs",
                "error",
                "manifest.json lists no output hashes",
                ["outputs"],
            )
            continue
        ok = 0
        for rel, digest in sorted(outputs.items()):
            if (path := file(rel, f"outputs.{rel}")) is None:
                continue
            if not path.is_file():
                add(
                    "output_missing",
                    "error",
                    f"{rel} is listed in the manifest but missing",
                    [f"outputs.{rel}"],
                )
                continue
            actual = sha256_file(path)
            if actual != digest:
                add(
                    "output_changed",
                    "error",
                    f"{rel} does not match its SHA-256 in manifest.json",
                    [f"outputs.{rel}"],
                    expected=digest,
                    actual=actual,
                )
            else:
                ok += 1
        for path in sorted(folder.rglob("*")):  # rglob does not enter symlinked folders
            rel = path.relative_to(folder).as_posix()
            if (
                path.is_file()
                and rel != "manifest.json"
                and rel not in outputs
                and not rel.endswith((".partial", ".tmp"))
                and not rel.startswith(f"{REVIEWS}/")
            ):  # people's labels, added after the run (gen review)
                add(
                    "output_unlisted",
                    "warning",
                    f"{rel} is in the folder but not in the manifest",
                    [f"outputs.{rel}"],
                )
        counts = _object(manifest, "counts")
        rec_name = _object(manifest, "merged").get("generator") or manifest["generator"]
        for fname, count_key in ((f"{rec_name}.jsonl", "accepted"), ("rejects.jsonl", "rejected")):
            if (
                count_key not in counts
                or (path := file(fname, f"counts.{count_key}")) is None
                or not path.is_file()
            ):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = sum(1 for line in f if line.strip())
            if lines != counts[count_key]:
                add(
                    "count_mismatch",
                    "error",
                    f"{fname} has {lines} lines, the manifest "
                    f"counts {counts[count_key]} {count_key}",
                    [f"counts.{count_key}"],
                    lines=lines,
                    manifest=counts[count_key],
                )
        inputs = _object(manifest, "inputs")
        outside = 0
        for src, digest in sorted(inputs.items()):
            # an input inside the folder is re-hashed; one outside it (the usual case) is not read
            try:
                p = inside(folder, src, what="manifest input")
            except UnsafePathError:
                outside += 1
                continue
            if p.is_file() and sha256_file(p) != digest:
                add(
                    "input_changed",
                    "warning",
                    f"the input {src} changed since the run",
                    [f"inputs.{src}"],
                )
        verified[name] = {
            "generator": manifest["generator"],
            "outputs": len(outputs),
            "matching": ok,
        }
        if outside:
            verified[name]["inputs_outside_not_read"] = outside
    res.stats = {"folders": verified}
    return res
