"""Check 3: are answers spread evenly over the option positions?"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from generators.audit.registry import CheckResult, check, finding
from generators.audit.report import PNG_METADATA, table
from generators.audit.stats import pvalue, rounded
from schemas.mcq import LETTERS, MCQ

if TYPE_CHECKING:
    from generators.audit import AuditConfig
    from generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    return table([{"group": k, **{c: v for c, v in row.items() if c not in ("question_type",)}}
                  for k, row in r.stats["groups"].items()])


def _plot(r: CheckResult, out_dir: Path, plt: Any) -> str | None:
    series = r.series
    if not series:
        return None
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
    fig.savefig(out_dir / "positions.png", dpi=90, metadata=PNG_METADATA)
    plt.close(fig)
    return "positions.png"


@check("position", order=3, title="Answer-position balance",
       finds="answers piling up at one option position (chi-square against uniform)",
       uses=("min_items_per_test", "alpha"), markdown=_markdown, plot=_plot)
def position(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Per question type, are answers spread evenly over the positions? Chi-square goodness of fit
    against uniform."""
    from scipy.stats import chisquare

    key = "position"
    res = CheckResult(key)
    if not data.mcq:
        return CheckResult(key, "skipped", "no multiple-choice items with a known answer")
    groups: dict[tuple[str, int], list[tuple[int, MCQ]]] = defaultdict(list)
    for i, it in data.mcq:
        groups[(it.question_type, len(it.options))].append((i, it))
    tested = [g for g, xs in groups.items() if len(xs) >= cfg.min_items_per_test and len(xs) >= 5 * g[1]]
    m = max(1, len(tested))
    table = {}
    for (qtype, k), xs in sorted(groups.items()):
        counts = np.bincount([it.answer for _, it in xs], minlength=k)
        row: dict[str, Any] = {"question_type": qtype, "options": k, "items": len(xs),
                               "counts": {LETTERS[j]: int(c) for j, c in enumerate(counts)}}
        res.series[f"{qtype} ({k} options)"] = counts.tolist()
        if (qtype, k) in tested:
            stat, p = chisquare(counts)
            row.update({"chi2": rounded(stat, 3), "p": pvalue(p), "significant": bool(p < cfg.alpha / m)})
            if p < cfg.alpha / m:
                expected = len(xs) / k
                resid = (counts - expected) / math.sqrt(expected)
                over = [j for j in range(k) if resid[j] >= 2] or [int(np.argmax(resid))]
                ids = [it.item_id for _, it in xs if it.answer in over]
                shares = ", ".join(f"{LETTERS[j]} {counts[j] / len(xs):.0%}" for j in over)
                res.findings.append(finding(
                    key, "position_bias", "error",
                    f"{qtype}: answers pile up at {shares} (expected {1 / k:.0%} each; chi-square p={pvalue(p)})",
                    items=ids, fields=["answer"],
                    numbers={"question_type": qtype, "counts": row["counts"], "chi2": row["chi2"], "p": pvalue(p),
                             "alpha_corrected": rounded(cfg.alpha / m, 6), "positions": [LETTERS[j] for j in over]}))
        else:
            row["note"] = f"not tested: fewer than max({cfg.min_items_per_test}, 5 x options) items"
        table[f"{qtype}/{k}"] = row
    res.stats = {"groups": table, "tests": len(tested), "alpha": cfg.alpha}
    return res
