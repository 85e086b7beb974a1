"""Check 3: are answers spread evenly over the option positions?"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.registry import TELL_OPTIONS, CheckResult, check, judged, tell_finding
from gen.generators.audit.report import PNG_METADATA, table, tells_table
from gen.generators.audit.stats import Tell, rounded
from gen.schemas.mcq import LETTERS

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    return table(
        [
            {"group": k, **{c: v for c, v in row.items() if c not in ("question_type",)}}
            for k, row in r.stats["groups"].items()
        ]
    ) + tells_table(r)


def _plot(r: CheckResult, out_dir: Path, plt: Any) -> str | None:
    series = r.series
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(series) + 2), 3.2))
    width = 0.8 / max(len(c) for c in series.values())
    for g, counts in enumerate(series.values()):
        total = sum(counts) or 1
        for j, c in enumerate(counts):
            ax.bar(
                g + j * width,
                c / total,
                width,
                color=f"C{j}",
                label=chr(65 + j) if g == 0 else None,
            )
        ax.hlines(
            1 / len(counts),
            g - width / 2,
            g + (len(counts) - 0.5) * width,
            colors="k",
            linestyles="dashed",
        )
    ax.set_xticks(
        [g + (len(c) - 1) * width / 2 for g, c in enumerate(series.values())],
        list(series),
        fontsize=8,
    )
    ax.set_ylabel("share of answers")
    ax.legend(title="position", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(out_dir / "positions.png", dpi=90, metadata=PNG_METADATA)
    plt.close(fig)
    return "positions.png"


@check(
    "position",
    order=3,
    title="Answer-position balance",
    finds="answers piling up at one option position (chi-square against uniform)",
    uses=("min_items_per_test", *TELL_OPTIONS),
    markdown=_markdown,
    plot=_plot,
)
def position(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Per question type, are answers spread evenly over the positions? Chi-square goodness of fit
    against uniform; the tell's effect is how much always answering the most frequent position
    beats chance."""
    from scipy.stats import chisquare

    key = "position"
    res = CheckResult(key)
    if not data.mcq:
        return CheckResult(key, "skipped", "no multiple-choice items with a known answer")
    items = data.items  # the columns: no item is read
    mcq = data.mcq.indices
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, t, k in zip(
        mcq.tolist(), items.qtype[mcq].tolist(), items.n_options[mcq].tolist(), strict=True
    ):
        groups[(items.types[t], k)].append(i)
    table = {}
    tells: list[tuple[Tell, list[int], np.ndarray]] = []
    for (qtype, k), xs in sorted(groups.items()):
        answers = items.answer[xs].tolist()  # data.mcq keeps only items with a known answer
        counts = np.bincount(answers, minlength=k)
        row: dict[str, Any] = {
            "question_type": qtype,
            "options": k,
            "items": len(xs),
            "counts": {LETTERS[j]: int(c) for j, c in enumerate(counts)},
        }
        res.series[f"{qtype} ({k} options)"] = counts.tolist()
        if len(xs) >= cfg.min_items_per_test and len(xs) >= 5 * k:
            stat, p = chisquare(counts)
            row["chi2"] = rounded(stat, 3)
            best = int(np.argmax(counts))  # the shortcut: always answer the most frequent position
            tells.append(
                (
                    Tell(
                        {"question_type": qtype, "options": k, "tell": f"always {LETTERS[best]}"},
                        int(counts[best]),
                        len(xs),
                        1 / k,
                        float(p),
                        test="chi-square",
                    ),
                    xs,
                    counts,
                )
            )
        else:
            row["note"] = f"not tested: fewer than max({cfg.min_items_per_test}, 5 x options) items"
        table[f"{qtype}/{k}"] = row
    judged([t for t, _, _ in tells], cfg)
    for t, xs, counts in tells:
        if t.severity is None:
            continue
        qtype, k = t.labels["question_type"], t.labels["options"]
        expected = len(xs) / k
        resid = (counts - expected) / math.sqrt(expected)
        over = [j for j in range(k) if resid[j] >= 2] or [int(np.argmax(resid))]
        shares = ", ".join(f"{LETTERS[j]} {counts[j] / len(xs):.0%}" for j in over)
        res.findings.append(
            tell_finding(
                key,
                "position_bias",
                t,
                f"{qtype}: answers pile up at {shares} (expected {1 / k:.0%} each, chi-square "
                "test); "
                f"always answering {t.labels['tell'].split()[-1]} is right in",
                items=[items.ids[i] for i in xs if int(items.answer[i]) in over],
                fields=["answer"],
                numbers={
                    "question_type": qtype,
                    "counts": table[f"{qtype}/{k}"]["counts"],
                    "chi2": table[f"{qtype}/{k}"]["chi2"],
                    "positions": [LETTERS[j] for j in over],
                },
            )
        )
    res.stats = {"groups": table, "tells": [t.row() for t, _, _ in tells]}
    return res
