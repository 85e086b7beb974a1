"""The audit's report: ``audit.json`` (statistics, thresholds, findings), ``audit.md`` (tables and
PNG plots, per check from the registry) and the exit code."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gen.engine.manifest import atomic_write
from gen.engine.runner import CommonConfig, RunContext
from gen.generators.audit.registry import REGISTRY, CheckResult
from gen.schemas.audit import SEVERITY_RANK, FindingRecord

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData

NOT_THRESHOLDS = (
    "roles",
    "against",
    "against_roles",
    "nocontext",
    "judge",
    "checks",
    "fail_on",
    "allow_empty",
    "plots",
    "max_listed",
    "workers",
)
"""Audit options that are inputs, presentation or execution, not thresholds of a check."""


def fails(findings: list[FindingRecord], fail_on: str) -> bool:
    if fail_on == "never":
        return False
    return any(SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on] for f in findings)


def package_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for pkg in ("scipy", "matplotlib", "faiss-cpu"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def thresholds(cfg: AuditConfig) -> dict[str, Any]:
    """Every option a check may read, with its value."""
    keys = [
        k
        for k in type(cfg).model_fields
        if k not in CommonConfig.model_fields and k not in NOT_THRESHOLDS
    ]
    return {k: getattr(cfg, k) for k in keys}


def write_report(
    cfg: AuditConfig, ctx: RunContext, data: AuditData, results: list[CheckResult]
) -> None:
    findings = [f for r in results for f in r.findings]
    by_sev = Counter(f.severity for f in findings)
    ctx.exit_code = 1 if fails(findings, cfg.fail_on) else 0
    summary = {
        "findings": len(findings),
        "by_severity": {s: by_sev.get(s, 0) for s in ("error", "warning", "info")},
        "fail_on": cfg.fail_on,
        "exit_code": ctx.exit_code,
        "checks": {
            r.key: {"status": r.status, **Counter(f.severity for f in r.findings)} for r in results
        },
    }
    ctx.extra["audit"] = {**summary, "packages": package_versions()}
    plots = draw_plots(ctx.out_dir, results, cfg.cache_dir) if cfg.plots else {}
    report = {
        "input": cfg.input,
        "roles": cfg.roles,
        "against": cfg.against,
        "nocontext": cfg.nocontext,
        "judge": cfg.judge,
        "banks": [
            {"path": str(b.path), "format": b.format, "items": len(b.items)} for b in data.banks
        ],
        "bundles": None if data.bundles is None else len(data.bundles),
        "scenarios": None if data.scenarios is None else len(data.scenarios),
        "run_folders": [str(f) for f in data.folders],
        "summary": summary,
        "thresholds": thresholds(cfg),
        "checks": [
            {
                "id": REGISTRY[r.key].order,
                "key": r.key,
                "title": REGISTRY[r.key].title,
                "status": r.status,
                "reason": r.reason,
                "seconds": r.seconds,
                "options": {k: getattr(cfg, k) for k in REGISTRY[r.key].uses},
                "stats": r.stats,
                "findings": dict(Counter(f.severity for f in r.findings)),
            }
            for r in results
        ],
        "power": power_lines(results),
        "embedding": None
        if data.embed is None
        else {
            "texts": data.embedded,
            "computed": getattr(ctx.embedder, "computed", None),
            "from_cache": getattr(ctx.embedder, "cache_hits", None),
        },
        "plots": plots,
        "findings": [f.model_dump(mode="json") for f in findings],
    }
    ctx.write_json("audit.json", report)
    atomic_write(ctx.out_dir / "audit.md", render_markdown(cfg, data, results, summary, plots))


def draw_plots(
    out_dir: Path, results: list[CheckResult], cache_dir: str | None = None
) -> dict[str, str]:
    """Each check's PNG plot (its ``plot=``), where a picture reads better than a table; returns
    check key -> file name."""
    matplotlib_home(cache_dir)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: dict[str, str] = {}
    for r in results:
        draw = REGISTRY[r.key].plot
        if r.status == "ran" and draw is not None and (name := draw(r, out_dir, plt)) is not None:
            made[r.key] = name
    return made


_TEMP: list[tempfile.TemporaryDirectory[str]] = []


def matplotlib_home(cache_dir: str | None) -> None:
    """matplotlib keeps its config and font cache in ``$MPLCONFIGDIR``, else it makes
    ``~/.config/matplotlib`` and ``~/.cache/matplotlib``: before its first import, point it at
    gen's cache folder (``<cache_dir>/matplotlib``), or a temporary folder of this process when
    caching is off. A ``MPLCONFIGDIR`` the user set is kept."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    if cache_dir is not None:
        folder = Path(cache_dir).expanduser() / "matplotlib"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            cache_dir = None  # a cache folder we cannot write: matplotlib would warn, then go home
    if cache_dir is None:
        if not _TEMP:
            _TEMP.append(tempfile.TemporaryDirectory(prefix="gen-matplotlib-"))
        folder = Path(_TEMP[0].name)
    os.environ["MPLCONFIGDIR"] = str(folder)


PNG_METADATA = {"Software": None}
"""No matplotlib version in the PNGs: the same numbers give the same bytes."""


# --------------------------------------------------------------------------- audit.md


def cell(x: Any) -> str:
    """A value as a markdown table cell."""
    if isinstance(x, float):
        return (
            f"{x:.3g}"
            if abs(x) < 1e-3 and x
            else f"{x:.3f}".rstrip("0").rstrip(".")
            if x % 1
            else f"{x:.0f}"
        )
    if isinstance(x, dict):
        return ", ".join(f"{k}: {cell(v)}" for k, v in x.items())
    if isinstance(x, list | tuple):
        return ", ".join(cell(v) for v in x)
    return str(x).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]], cols: list[str] | None = None) -> list[str]:
    """A markdown table (columns: every key in first-seen order, unless given), then a blank
    line."""
    if not rows:
        return []
    cols = cols or list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return [*out, ""]


def per_type_table(r: CheckResult) -> list[str]:
    """A check's ``per_question_type`` statistics, one row per type (``top_features`` inline,
    ``easiest`` left to audit.json)."""
    rows = []
    for t, v in r.stats["per_question_type"].items():
        row = {"question type": t}
        for k, x in v.items():
            if k == "easiest":
                continue
            row[k] = ", ".join(f"{n} ({w:+.2f})" for n, w in x) if k == "top_features" else x
        rows.append(row)
    return table(rows)


TELL_COLUMNS = {
    "test": "test",
    "items": "items",
    "hits": "hits",
    "accuracy": "accuracy",
    "chance": "chance",
    "effect": "effect (points)",
    "effect_ci95": "95% CI",
    "p": "p",
    "p_holm": "Holm p",
    "detectable_effect": "detectable (points)",
}


def tells_table(r: CheckResult) -> list[str]:
    """A check's tell tests (``stats["tells"]``): effect and interval next to the p-values, the
    power line, and the verdict with the rule that fired."""
    rows = []
    for t in r.stats.get("tells", []):
        row = {
            k.replace("_", " "): v
            for k, v in t.items()
            if k not in TELL_COLUMNS and k not in ("severity", "rule")
        }
        row |= {name: "-" if t[k] is None else t[k] for k, name in TELL_COLUMNS.items() if k in t}
        row["verdict"] = f"{t['severity']}: {t['rule']}" if t["severity"] else "-"
        rows.append(row)
    if not rows:
        return []
    return [
        "Tells: accuracy minus chance in points (effect) with its 95 % Wilson interval, the "
        "one-sided p-value "
        "and the Holm-adjusted one over this check's tests; detectable: the smallest effect this "
        "many items "
        "turn into an error with the configured power.",
        "",
        *table(rows),
    ]


def power_lines(results: list[CheckResult]) -> list[dict[str, Any]]:
    """Per question type and tell check, the smallest tell the bank's size turns into an error
    (from the checks' ``stats["tells"]``; binomial tests, whose power has a closed form)."""
    out: dict[tuple[str, int, str], dict[str, Any]] = {}
    for r in results:
        for t in r.stats.get("tells", []) if r.status == "ran" else []:
            if t["test"] != "binomial":
                continue
            model = str(t.get("model", ""))
            out.setdefault(
                (t["question_type"], REGISTRY[r.key].order, model),
                {
                    "question_type": t["question_type"],
                    "check": r.key + (f" ({model})" if model else ""),
                    "items": t["items"],
                    "chance": t["chance"],
                    "detectable_effect": t["detectable_effect"],
                },
            )
    return [out[k] for k in sorted(out)]


def option_doc(cfg: AuditConfig, key: str) -> str:
    """An option's docstring on one line (where its default comes from)."""
    return " ".join((type(cfg).model_fields[key].description or "").split())


def render_markdown(
    cfg: AuditConfig,
    data: AuditData,
    results: list[CheckResult],
    summary: dict[str, Any],
    plots: dict[str, str],
) -> str:
    src = (
        f"{len(data.items)} items from {', '.join(b.path.name for b in data.banks)}"
        if data.banks
        else f"{len(data.bundles)} digital bundles"
        if data.bundles is not None
        else f"{len(data.scenarios)} scenarios from {getattr(data.scenarios_file, 'name', '')}"
        if data.scenarios is not None
        else "a run folder"
    )
    sev = summary["by_severity"]
    lines = [
        f"# Audit of `{cfg.input}`",
        "",
        f"{src}. Findings: **{sev['error']} errors**, {sev['warning']} warnings, {sev['info']} "
        "info. "
        f"`fail_on={cfg.fail_on}` gives exit code **{summary['exit_code']}**.",
        "",
    ]
    rows = []
    for r in results:
        c = Counter(f.severity for f in r.findings)
        rows.append(
            {
                "#": REGISTRY[r.key].order,
                "check": r.key,
                "status": r.status if r.status == "ran" else f"skipped: {r.reason}",
                "errors": c["error"],
                "warnings": c["warning"],
                "info": c["info"],
                "seconds": r.seconds,
            }
        )
    lines += table(rows)
    if power := power_lines(results):
        lines += [
            "## Power",
            "",
            "The smallest tell (accuracy minus chance, in points) that this bank's size turns "
            "into an error "
            f"with probability {cfg.power:.0%}: significant at the strictest Holm level of its "
            "check and larger "
            f"than max_effect={cfg.max_effect:g}. A smaller tell can pass without a finding, so no "
            "finding means "
            '"too small to tell" below this line, not "clean".',
            "",
        ]
        lines += table(
            [
                {
                    "question type": p["question_type"],
                    "check": p["check"],
                    "items": p["items"],
                    "chance": p["chance"],
                    "smallest error (points)": "not reachable"
                    if p["detectable_effect"] is None
                    else p["detectable_effect"],
                }
                for p in power
            ]
        )
    for r in results:
        chk = REGISTRY[r.key]
        lines += [f"## {chk.order}. {chk.title}", "", chk.doc, ""]
        if r.status != "ran":
            lines += [f"Skipped: {r.reason}.", ""]
            continue
        if chk.uses:
            lines += [
                "Options: "
                + ", ".join(f"`{k}={cell(getattr(cfg, k))}`" for k in chk.uses)
                + " (see Options).",
                "",
            ]
        if chk.markdown is not None:
            lines += chk.markdown(r)
        if r.key in plots:
            lines += [f"![{r.key}]({plots[r.key]})", ""]
        if not r.findings:
            lines += ["No findings.", ""]
            continue
        shown = sorted(r.findings, key=lambda f: -SEVERITY_RANK[f.severity])[: cfg.max_listed]
        lines += table(
            [
                {
                    "severity": f.severity,
                    "kind": f.kind,
                    "what": f.what,
                    "items": ", ".join(f.items[:6])
                    + (f" … (+{len(f.items) - 6})" if len(f.items) > 6 else ""),
                    "fields": ", ".join(f.fields[:4]),
                }
                for f in shown
            ]
        )
        if len(r.findings) > len(shown):
            lines += [f"… {len(r.findings) - len(shown)} more in `audit.jsonl`.", ""]
    used = list(
        dict.fromkeys(k for r in results if r.status == "ran" for k in REGISTRY[r.key].uses)
    )
    if used:
        lines += [
            "## Options",
            "",
            "The options the checks above used, and where each default comes from.",
            "",
        ]
        lines += table(
            [{"option": k, "value": getattr(cfg, k), "meaning": option_doc(cfg, k)} for k in used]
        )
    return "\n".join(lines).rstrip() + "\n"
