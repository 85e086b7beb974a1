"""Check 4: does picking the longest (or shortest) option beat chance?"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.registry import (
    TELL_OPTIONS,
    CheckResult,
    check,
    finding,
    judged,
    tell_finding,
)
from gen.generators.audit.report import PNG_METADATA, per_type_table, tells_table
from gen.generators.audit.stats import Tell, binom_greater, rounded

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _plot(r: CheckResult, out_dir: Path, plt: Any) -> str | None:
    series = r.series
    if not series:
        return None
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
    fig.savefig(out_dir / "lengths.png", dpi=90, metadata=PNG_METADATA)
    plt.close(fig)
    return "lengths.png"


def _markdown(r: CheckResult) -> list[str]:
    return per_type_table(r) + tells_table(r)


@check(
    "length",
    order=4,
    title="Option-length tell",
    finds="picking the longest/shortest option beats chance, and answers much longer or shorter "
    "than "
    "every distractor",
    uses=("length_ratio", "min_items_per_test", *TELL_OPTIONS),
    markdown=_markdown,
    plot=_plot,
)
def length(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Does picking the longest (or shortest) option beat chance? One-sided binomial test per
    question type; and per item, EgoToM's length-ratio rule."""
    key = "length"
    res = CheckResult(key)
    if not data.mcq:
        return CheckResult(key, "skipped", "no multiple-choice items with a known answer")
    groups = data.by_type()
    table = {}
    tells: list[tuple[Tell, list[str]]] = []
    for qtype, xs in groups.items():
        longest, shortest, chance = [], [], []
        ans_len, dis_len = [], []
        for i, it in xs:
            lens = np.array([len(o.strip()) for o in it.options])
            a = it.answer
            assert a is not None
            others = np.delete(lens, a)
            ans_len.append(int(lens[a]))
            dis_len += others.tolist()
            chance.append(1 / len(lens))
            if lens[a] > others.max():
                longest.append(it.item_id)
            if lens[a] < others.min():
                shortest.append(it.item_id)
            r_long = lens[a] / max(1, others.max())
            r_short = others.min() / max(1, lens[a])
            for ratio, kind, word in (
                (r_long, "answer_much_longer", "longer"),
                (r_short, "answer_much_shorter", "shorter"),
            ):
                if ratio > cfg.length_ratio:
                    res.findings.append(
                        finding(
                            key,
                            kind,
                            "warning",
                            f"the answer is {ratio:.2f}x {word} "
                            f"than {'every' if word == 'longer' else 'the shortest'} "
                            f"distractor (rule: > {cfg.length_ratio})"
                            if word == "longer"
                            else f"every distractor is at least {ratio:.2f}x longer than the "
                            f"answer (rule: > {cfg.length_ratio})",
                            items=[it.item_id],
                            fields=[f"options[{a}]"],
                            numbers={
                                "ratio": rounded(ratio, 3),
                                "answer_chars": int(lens[a]),
                                "distractor_chars": others.tolist(),
                            },
                            bank=data.bank_name(i),
                        )
                    )
        n = len(xs)
        p0 = float(np.mean(chance))
        row: dict[str, Any] = {
            "items": n,
            "answer_mean_chars": rounded(float(np.mean(ans_len)), 1),
            "distractor_mean_chars": rounded(float(np.mean(dis_len)), 1),
            "pick_longest_accuracy": rounded(len(longest) / n, 3),
            "pick_shortest_accuracy": rounded(len(shortest) / n, 3),
            "chance": rounded(p0, 3),
        }
        res.series[qtype] = {"answer": ans_len, "distractor": dis_len}
        if n >= cfg.min_items_per_test:
            for name, hit in (("longest", longest), ("shortest", shortest)):
                tells.append(
                    (
                        Tell(
                            {"question_type": qtype, "tell": f"pick the {name}"},
                            len(hit),
                            n,
                            p0,
                            binom_greater(len(hit), n, p0),
                        ),
                        hit,
                    )
                )
        else:
            row["note"] = f"not tested: fewer than {cfg.min_items_per_test} items"
        table[qtype] = row
    judged([t for t, _ in tells], cfg)
    for t, hit in tells:
        if t.severity is not None:
            qtype, name = t.labels["question_type"], t.labels["tell"].split()[-1]
            res.findings.append(
                tell_finding(
                    key,
                    f"{name}_option_tell",
                    t,
                    f"{qtype}: picking the {name} option is right in",
                    items=hit,
                    fields=["options[answer]"],
                    numbers={"question_type": qtype},
                )
            )
    res.stats = {
        "per_question_type": table,
        "tells": [t.row() for t, _ in tells],
        "ratio_rule": cfg.length_ratio,
    }
    return res
