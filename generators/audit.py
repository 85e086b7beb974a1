"""Leakage and validity audits for any MCQ or scenario bank, or a digital run: ``python -m gen audit``.

One record index per check (``checks=``, the ten of :data:`gen.audit_checks.CHECKS` by default):
index i runs check i and yields its findings, so ``audit.jsonl`` holds one line per finding and
the manifest's ``indices_done`` equals the number of checks. After the last check the report is
written: ``audit.md`` (tables and PNG plots), ``audit.json`` (statistics, thresholds, findings),
and the exit code: 0 clean, 1 when a finding reaches ``fail_on``, 2 for input errors.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from gen.audit_checks import (
    CHECK_FUNCTIONS,
    CHECKS,
    SEVERITY_RANK,
    TITLES,
    AuditData,
    CheckResult,
    FindingRecord,
)
from gen.errors import ConfigError, InputError, MissingInputError
from gen.mcq import RECORD_FILES, egotom_type, load_banks, load_roles_bank, read_roles
from gen.run import CommonConfig, Plan, RunContext, generator, iter_jsonl, load_run_records


class AuditConfig(CommonConfig):
    roles: str | None = None
    """Roles file (YAML/JSON) for a generic JSONL bank: id, visible, privileged, options, answer…"""
    against: str | None = None
    """A second bank to look for duplicates of this bank's items in (train vs test, v1 vs v2)."""
    against_roles: str | None = None
    """Roles file for against= when it is a generic JSONL bank (default: roles=)."""
    nocontext: str | None = None
    """A nocontext run folder (or its nocontext.jsonl) to summarise blind solvability from
    (default: input= itself when it is a nocontext run)."""
    checks: list[str] = Field(default_factory=lambda: list(CHECKS))
    """Checks to run, by key: structure, leakage, position, length, similar_options, duplicates,
    shortcut, blind, digital, integrity."""
    fail_on: Literal["info", "warning", "error", "never"] = "error"
    """Exit code 1 when a finding of at least this severity exists."""
    alpha: float = Field(0.01, gt=0, lt=1)
    """Significance level of the statistical tells, Bonferroni-corrected over the groups a check
    tests (a conventional strict level: a clean bank fails a check by chance ~1 audit in 100)."""
    min_items_per_test: int = Field(20, ge=2)
    """Fewest items of a question type for the position and length tests (position also needs
    5 per option, the usual chi-square rule)."""
    leak_ngram: int = Field(5, ge=2, le=20)
    """Word n-gram size for partial leakage: 5 words is longer than the shared phrases of a
    domain ("picks up the cup") and shorter than a copied clause."""
    leak_containment: float = Field(0.6, gt=0, le=1)
    """Share of a privileged text's n-grams found in a visible field that makes a partial leak."""
    leak_min_chars: int = Field(3, ge=1)
    """Privileged terms shorter than this (normalised) are not searched for ("cup" still is)."""
    length_ratio: float = Field(1.4, gt=1)
    """An answer more than this many times longer than every distractor, or every distractor
    this much longer than it, is flagged (EgoToM's own filter, §3)."""
    option_dup_sim: float = Field(0.94, gt=0, le=1)
    """Cosine at or above which two options of an item are near-duplicates (EgoToM's threshold,
    measured there with all-mpnet-base-v2)."""
    answer_close_sim: float = Field(0.90, gt=0, le=1)
    """Cosine at or above which a distractor may also be correct. Ours: above the 99th percentile
    of answer-distractor cosines of EgoToM's filtered bank under all-MiniLM-L6-v2 (0.87-0.89)."""
    item_dup_sim: float = Field(0.95, gt=0, le=1)
    """Near-duplicate items: cosine of question+options at least this (one reworded option
    keeps ~0.99)…"""
    context_dup_sim: float = Field(0.8, gt=0, le=1)
    """…and visible contexts sharing at least this (cosine of their word-trigram sets: a one-word
    edit of a 40-word context keeps ~0.9; EgoToM contexts of different videos reach 0.39)."""
    shortcut_folds: int = Field(5, ge=2, le=20)
    """Cross-validation folds of the choice-only classifier (items of one group share a fold)."""
    shortcut_l2: float = Field(1.0, gt=0)
    """L2 penalty of the choice-only classifier (on standardised features)."""
    shortcut_min_items: int = Field(30, ge=10)
    """Fewest items of a question type to train the choice-only classifier on."""
    shortcut_confidence: float = Field(0.8, gt=0, le=1)
    """Out-of-fold probability of the answer above which a solved item is listed as easy."""
    blind_max_correct: int = Field(2, ge=0)
    """An item answered right without context in more shuffles than this, by any model, is
    flagged (EgoToM: more than 2 of 3 shuffles)."""
    embeddings: bool = True
    """Use the embedder for similar options and near-duplicate items (false: exact checks only)."""
    plots: bool = True
    """Draw the PNG plots of audit.md."""
    max_listed: int = Field(20, ge=1)
    """Findings shown per check in audit.md (audit.jsonl has all)."""

    @model_validator(mode="after")
    def _checks(self) -> AuditConfig:
        unknown = [c for c in self.checks if c not in CHECKS]
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; choose from {list(CHECKS)}")
        if not self.checks or len(set(self.checks)) != len(self.checks):
            raise ValueError("checks must name at least one check, each once")
        if self.num_shards != 1:
            raise ValueError("audit runs in one process (num_shards=1)")
        return self


def plan(cfg: AuditConfig) -> Plan:
    """One record index per check."""
    return Plan(len(cfg.checks))


# --------------------------------------------------------------------------- inputs


def _has_bank(folder: Path) -> bool:
    run = folder.parent if folder.name == "kept" else folder  # a nocontext run, or its kept/
    return (any((folder / n).is_file() for n in RECORD_FILES) or (run / "nocontext.jsonl").is_file()
            or any(egotom_type(p) for p in folder.glob("*.csv")))


def _read_bank(path: Path, roles: str | None, what: str) -> list[Any]:
    if roles is not None:
        if not path.is_file():
            raise InputError(f"{what}: with roles= the bank must be a JSONL file, got the folder {path}")
        return [load_roles_bank(path, read_roles(Path(roles).expanduser()))]
    return load_banks(path)


def _run_folder(path: Path) -> Path | None:
    folder = path if path.is_dir() else path.parent
    return folder if (folder / "manifest.json").is_file() else None


def load_inputs(cfg: AuditConfig, ctx: RunContext) -> AuditData:
    """Read input=, against=, nocontext= once; bad input raises a GenError (exit 2)."""
    if cfg.input is None:
        raise ConfigError("input= is required (a bank file, a run folder, or a folder of EgoToM CSVs)")
    path = cfg.input_path()
    assert path is not None
    data = AuditData(seed=ctx.seed(0, "folds"))
    folders: list[Path] = []
    digital = path / "digital.jsonl" if path.is_dir() else path if path.name == "digital.jsonl" else None
    if cfg.roles is None and digital is not None and digital.is_file():
        data.bundles, file = load_run_records(digital, "digital")
        ctx.record_input(file)
        manifest = _run_folder(file)
        if manifest is not None:
            m = json.loads((manifest / "manifest.json").read_text(encoding="utf-8"))
            data.digital_config = (m.get("merged") or {}).get("source_config") or m.get("config") or {}
    elif cfg.roles is not None or path.is_file() or _has_bank(path):
        data.banks = _read_bank(path, cfg.roles, "input")
        if cfg.roles is not None:
            ctx.record_input(Path(cfg.roles).expanduser())
        for bank in data.banks:
            ctx.record_input(bank.path)
            data.items += bank.items
            data.bank_of += [bank.path.name] * len(bank.items)
    elif not (path / "manifest.json").is_file():
        raise InputError(f"input: {path} holds no bank ({', '.join(RECORD_FILES)}, EgoToM CSVs), "
                         "no digital.jsonl and no manifest.json")
    if (f := _run_folder(path)) is not None:
        folders.append(f)
    if cfg.against is not None:
        apath = Path(cfg.against).expanduser()
        if not apath.exists():
            raise MissingInputError(f"against: no such file or folder: {apath}")
        for bank in _read_bank(apath, cfg.against_roles or cfg.roles, "against"):
            ctx.record_input(bank.path)
            data.against += bank.items
        data.against_name = apath.name
    nocontext = cfg.nocontext
    if nocontext is None and path.is_dir() and (path / "nocontext.jsonl").is_file():
        nocontext = str(path)  # a nocontext run audited as a bank: its own blind results
    if nocontext is not None:
        npath = Path(nocontext).expanduser()
        data.nocontext = read_nocontext(npath)
        if (f := _run_folder(npath)) is not None and f not in folders:
            folders.append(f)
    data.folders = folders
    if cfg.embeddings:
        data.embed = lambda texts: ctx.embedder.encode(texts)
    return data


NOCONTEXT_KEYS = ("item_id", "question_type", "correct")


def read_nocontext(path: Path) -> list[dict[str, Any]]:
    """Per-item results of a nocontext run (``nocontext.jsonl``)."""
    file = path / "nocontext.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise MissingInputError(f"nocontext: {file} not found (expected a nocontext run folder or its nocontext.jsonl)")
    rows = []
    for lineno, row in iter_jsonl(file):
        missing = [k for k in NOCONTEXT_KEYS if not isinstance(row, dict) or k not in row]
        if missing or not isinstance(row.get("correct"), dict):
            raise InputError(f"{file}:{lineno}: a nocontext result needs {', '.join(NOCONTEXT_KEYS)} "
                             f"(correct: {{model: shuffles right}})")
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- the generator


@generator("audit", config=AuditConfig, plan=plan, noun="findings")
def audit(cfg: AuditConfig, ctx: RunContext) -> Iterator[list[FindingRecord]]:
    """Audit an MCQ/scenario bank or a digital run: leakage, tells, duplicates, integrity."""
    data = load_inputs(cfg, ctx)
    results: list[CheckResult] = []
    for i in ctx.indices():
        key = cfg.checks[i]
        t0 = time.perf_counter()
        res = CHECK_FUNCTIONS[key](data, cfg)
        res.seconds = round(time.perf_counter() - t0, 3)
        results.append(res)
        yield list(res.findings)
    write_report(cfg, ctx, data, results)


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
    keys = [k for k in AuditConfig.model_fields if k not in CommonConfig.model_fields
            and k not in ("roles", "against", "against_roles", "nocontext", "checks", "fail_on", "plots", "max_listed")]
    return {k: getattr(cfg, k) for k in keys}


def write_report(cfg: AuditConfig, ctx: RunContext, data: AuditData, results: list[CheckResult]) -> None:
    findings = [f for r in results for f in r.findings]
    by_sev = Counter(f.severity for f in findings)
    ctx.exit_code = 1 if fails(findings, cfg.fail_on) else 0
    summary = {"findings": len(findings), "by_severity": {s: by_sev.get(s, 0) for s in ("error", "warning", "info")},
               "fail_on": cfg.fail_on, "exit_code": ctx.exit_code,
               "checks": {r.key: {"status": r.status, **Counter(f.severity for f in r.findings)} for r in results}}
    ctx.extra["audit"] = {**summary, "packages": package_versions()}
    plots = draw_plots(ctx.out_dir, results) if cfg.plots else {}
    report = {
        "input": cfg.input, "roles": cfg.roles, "against": cfg.against, "nocontext": cfg.nocontext,
        "banks": [{"path": str(b.path), "format": b.format, "items": len(b.items)} for b in data.banks],
        "bundles": None if data.bundles is None else len(data.bundles),
        "run_folders": [str(f) for f in data.folders],
        "summary": summary, "thresholds": thresholds(cfg),
        "checks": [{"id": CHECKS.index(r.key) + 1, "key": r.key, "title": TITLES[r.key], "status": r.status,
                    "reason": r.reason, "seconds": r.seconds, "stats": r.stats,
                    "findings": dict(Counter(f.severity for f in r.findings))} for r in results],
        "plots": plots,
        "findings": [f.model_dump(mode="json") for f in findings],
    }
    ctx.write_json("audit.json", report)
    from gen.run import atomic_write

    atomic_write(ctx.out_dir / "audit.md", render_markdown(cfg, data, results, summary, plots))


# --------------------------------------------------------------------------- plots


def draw_plots(out_dir: Path, results: list[CheckResult]) -> dict[str, str]:
    """PNG plots where a picture reads better than a table; returns check key -> file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: dict[str, str] = {}
    res = {r.key: r for r in results if r.status == "ran"}
    meta = {"Software": None}
    if "length" in res and res["length"].series:
        series = res["length"].series
        fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3.2), squeeze=False)
        for ax, (qtype, s) in zip(axes[0], series.items(), strict=True):
            hi = max(s["answer"] + s["distractor"])
            bins = list(range(0, hi + 10, max(1, hi // 30)))
            ax.hist(s["distractor"], bins=bins, alpha=0.55, density=True, label="distractors")
            ax.hist(s["answer"], bins=bins, alpha=0.55, density=True, label="answers")
            ax.set_title(qtype)
            ax.set_xlabel("option length (characters)")
        axes[0][0].legend()
        fig.tight_layout()
        fig.savefig(out_dir / "lengths.png", dpi=90, metadata=meta)
        plt.close(fig)
        made["length"] = "lengths.png"
    if "position" in res and res["position"].series:
        series = res["position"].series
        fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(series) + 2), 3.2))
        width = 0.8 / max(len(c) for c in series.values())
        for g, counts in enumerate(series.values()):
            total = sum(counts) or 1
            for j, c in enumerate(counts):
                ax.bar(g + j * width, c / total, width, color=f"C{j}", label=chr(65 + j) if g == 0 else None)
            ax.hlines(1 / len(counts), g - width / 2, g + (len(counts) - 0.5) * width, colors="k", linestyles="dashed")
        ax.set_xticks([g + (len(c) - 1) * width / 2 for g, c in enumerate(series.values())], list(series), fontsize=8)
        ax.set_ylabel("share of answers")
        ax.legend(title="position", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(out_dir / "positions.png", dpi=90, metadata=meta)
        plt.close(fig)
        made["position"] = "positions.png"
    if "similar_options" in res and res["similar_options"].series:
        s = res["similar_options"].series
        fig, ax = plt.subplots(figsize=(5.5, 3.2))
        bins = [x / 50 for x in range(-10, 51)]
        ax.hist(s["distractor_distractor"], bins=bins, alpha=0.55, density=True, label="distractor-distractor")
        ax.hist(s["answer_distractor"], bins=bins, alpha=0.55, density=True, label="answer-distractor")
        for name, v in s["thresholds"].items():
            ax.axvline(v, color="k", linestyle="dashed" if name == "option_dup_sim" else "dotted", linewidth=1)
        ax.set_xlabel("cosine similarity of two options of an item")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "option_similarity.png", dpi=90, metadata=meta)
        plt.close(fig)
        made["similar_options"] = "option_similarity.png"
    if "duplicates" in res and res["duplicates"].series.get("nearest"):
        s = res["duplicates"].series
        fig, ax = plt.subplots(figsize=(5.5, 3.2))
        bins = [x / 50 for x in range(-10, 51)]
        ax.hist(s["nearest"], bins=bins, alpha=0.6, label="nearest other item")
        if s.get("nearest_against"):
            ax.hist(s["nearest_against"], bins=bins, alpha=0.6, label="nearest item of against=")
        ax.set_xlabel("nearest item: (question+options cosine + context overlap) / 2")
        ax.set_ylabel("items")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / "item_similarity.png", dpi=90, metadata=meta)
        plt.close(fig)
        made["duplicates"] = "item_similarity.png"
    return made


# --------------------------------------------------------------------------- audit.md

WHAT = {
    "structure": "Every answer is one of its item's options, options are distinct and non-empty, ids are "
                 "unique, required fields are present; counts per question type and category.",
    "leakage": "A privileged text (the answer, gold terms, hidden state, future narration) in a visible field "
               "of the same item (word-boundary match of the normalised text, or a share of its word n-grams), "
               "in the item id or a file name, or in the visible text of another item.",
    "position": "Per question type, are answers spread evenly over the positions? Chi-square goodness of fit "
                "against uniform.",
    "length": "Does picking the longest (or shortest) option beat chance? One-sided binomial test per question "
              "type; and per item, EgoToM's length-ratio rule.",
    "similar_options": "Embedding cosine between the options of each item: near-duplicate options, and "
                       "distractors so close to the answer that they may also be correct.",
    "duplicates": "Items that show the same question, options and visible text (exact), or ask nearly the same "
                  "(embedding cosine of question and options) on nearly the same context (word-trigram overlap), "
                  "within the bank and against a second bank.",
    "shortcut": "A conditional-logit classifier that sees only the options (length and its rank, overlap with "
                "the question and the other options, negations, hedges, absolutes, frequent words), scored by "
                "k-fold cross-validation against chance.",
    "blind": "Blind accuracy of the models of a nocontext run per question type against chance, and the items "
             "they answer without context.",
    "digital": "The digital generator's own validators re-run on every item (time windows, past items before "
               "now, participants, text, duplicates), time order, unique ids, the cue in its key list as the "
               "latest or upcoming item.",
    "integrity": "The SHA-256 of every output file against the run's manifest.json, and the record counts.",
}


def _cell(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1e-3 and x else f"{x:.3f}".rstrip("0").rstrip(".") if x % 1 else f"{x:.0f}"
    if isinstance(x, dict):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in x.items())
    if isinstance(x, list | tuple):
        return ", ".join(_cell(v) for v in x)
    return str(x).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[dict[str, Any]], cols: list[str] | None = None) -> list[str]:
    if not rows:
        return []
    cols = cols or list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return [*out, ""]


def _stats_md(r: CheckResult) -> list[str]:
    s = r.stats
    if r.key == "structure":
        rows = [{"question type": t, **v} for t, v in s["per_question_type"].items()]
        out = [f"{s['items']} items, {s['groups']} groups.", ""] + _table(rows)
        if s["per_category"]:
            out += _table([{"category": k, "items": v} for k, v in s["per_category"].items()])
        return out
    if r.key in ("length", "shortcut", "similar_options"):
        rows = []
        for t, v in s["per_question_type"].items():
            row = {"question type": t}
            for k, x in v.items():
                if k == "easiest":
                    continue
                row[k] = ", ".join(f"{n} ({w:+.2f})" for n, w in x) if k == "top_features" else x
            rows.append(row)
        return _table(rows)
    if r.key == "position":
        return _table([{"group": k, **{c: v for c, v in row.items() if c not in ("question_type",)}}
                       for k, row in s["groups"].items()])
    if r.key == "leakage":
        out = [f"{s['terms']} privileged texts searched in the visible fields of {s['items']} items "
               f"({s['ngram']}-word n-grams, containment >= {s['containment']}).", ""]
        if s["context_overlap"]:
            out += ["Context-overlap tell: share of each option's word trigrams found in the item's visible "
                    "fields, and how often picking the option with the most is right.", ""]
            out += _table([{"question type": t, **v} for t, v in s["context_overlap"].items()])
        return out
    if r.key == "duplicates":
        out = [f"{s['exact_duplicate_groups']} groups of exact duplicates among {s['items']} items."]
        if "nearest_neighbour" in s:
            out.append(f"Nearest other item, (question+options cosine + context overlap) / 2: "
                       f"{_cell(s['nearest_neighbour'])}.")
        if "against" in s:
            out.append(f"Against {s['against']['name']} ({s['against']['items']} items): {s['against']['exact']} exact "
                       f"matches" + (f"; nearest {_cell(s['against']['nearest_neighbour'])}" if "nearest_neighbour" in s['against'] else "") + ".")
        return [*out, ""]
    if r.key == "blind":
        rows = [{"model": m, "question type": q, **v} for m, mv in s["models"].items()
                for q, v in mv["per_question_type"].items()]
        out = [f"{s['items_with_results']} items with results ({s['bank_items_without_results']} bank items without); "
               f"{s['kept_by_nocontext']} kept by the nocontext run.", ""] + _table(rows)
        out += _table([{"model": m, "letters chosen": v["letters_chosen"], "unparsed": v["unparsed"]}
                       for m, v in s["models"].items()])
        return out
    if r.key == "digital":
        return [f"{s['bundles']} bundles; cued per app: {_cell(s['cued_per_app']) or 'none'}; "
                f"windows: {_cell(s['windows'])}.", ""]
    if r.key == "integrity":
        return _table([{"run folder": k, **v} for k, v in s["folders"].items()])
    return []


def render_markdown(cfg: AuditConfig, data: AuditData, results: list[CheckResult], summary: dict[str, Any],
                    plots: dict[str, str]) -> str:
    src = (f"{len(data.items)} items from {', '.join(b.path.name for b in data.banks)}" if data.banks else
           f"{len(data.bundles)} digital bundles" if data.bundles is not None else "a run folder")
    sev = summary["by_severity"]
    lines = [f"# Audit of `{cfg.input}`", "",
             f"{src}. Findings: **{sev['error']} errors**, {sev['warning']} warnings, {sev['info']} info. "
             f"`fail_on={cfg.fail_on}` gives exit code **{summary['exit_code']}**.", ""]
    rows = []
    for r in results:
        c = Counter(f.severity for f in r.findings)
        rows.append({"#": CHECKS.index(r.key) + 1, "check": r.key,
                     "status": r.status if r.status == "ran" else f"skipped: {r.reason}",
                     "errors": c["error"], "warnings": c["warning"], "info": c["info"], "seconds": r.seconds})
    lines += _table(rows)
    for r in results:
        lines += [f"## {CHECKS.index(r.key) + 1}. {TITLES[r.key]}", "", WHAT[r.key], ""]
        if r.status != "ran":
            lines += [f"Skipped: {r.reason}.", ""]
            continue
        lines += _stats_md(r)
        if r.key in plots:
            lines += [f"![{r.key}]({plots[r.key]})", ""]
        if not r.findings:
            lines += ["No findings.", ""]
            continue
        shown = sorted(r.findings, key=lambda f: -SEVERITY_RANK[f.severity])[:cfg.max_listed]
        lines += _table([{"severity": f.severity, "kind": f.kind, "what": f.what,
                          "items": ", ".join(f.items[:6]) + (f" … (+{len(f.items) - 6})" if len(f.items) > 6 else ""),
                          "fields": ", ".join(f.fields[:4])} for f in shown])
        if len(r.findings) > len(shown):
            lines += [f"… {len(r.findings) - len(shown)} more in `audit.jsonl`.", ""]
    lines += ["## Thresholds", "", *_table([{"option": k, "value": v, "meaning": _doc(k)} for k, v in thresholds(cfg).items()])]
    return "\n".join(lines).rstrip() + "\n"


def _doc(key: str) -> str:
    doc = AuditConfig.model_fields[key].description or ""
    return " ".join(doc.split())

