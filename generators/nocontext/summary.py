"""The screening's statistics: blind accuracy against chance (binomial intervals), letter-position
bias, the per-model tally and the summary (summary.json and its table)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from gen.generators.nocontext.config import RULES, NocontextConfig
from gen.schemas.mcq import LETTERS
from gen.schemas.nocontext import NocontextRecord


def binomial(correct: int, total: int, chance: float) -> dict[str, Any]:
    """Accuracy with a Wilson 95% interval and a one-sided exact test against chance."""
    if total == 0:
        return {
            "correct": 0,
            "answers": 0,
            "accuracy": None,
            "chance": None,
            "ci95": None,
            "p_above_chance": None,
        }
    from scipy.stats import binomtest

    ci = binomtest(correct, total, chance).proportion_ci(confidence_level=0.95, method="wilson")
    above = binomtest(correct, total, chance, alternative="greater").pvalue
    return {
        "correct": correct,
        "answers": total,
        "accuracy": round(correct / total, 4),
        "chance": round(chance, 4),
        "ci95": [round(ci.low, 4), round(ci.high, 4)],
        "p_above_chance": float(f"{above:.3g}"),
    }


def letter_bias(counts: Counter[str], expected: dict[str, float]) -> dict[str, Any]:
    """Chosen letters against what a position-blind model would choose (chi-square)."""
    letters = sorted(expected)
    total = sum(counts[k] for k in letters)
    out: dict[str, Any] = {
        "counts": {k: counts[k] for k in letters},
        "share": {k: round(counts[k] / total, 4) if total else None for k in letters},
        "expected_share": {k: round(expected[k] / sum(expected.values()), 4) for k in letters},
    }
    if total and len(letters) > 1:
        from scipy.stats import chisquare

        exp = [expected[k] / sum(expected.values()) * total for k in letters]
        chi2, p = chisquare([counts[k] for k in letters], exp)
        out |= {"chi2": round(float(chi2), 3), "p_uniform": float(f"{p:.3g}")}
    return out


@dataclass
class Tally:
    """Per-model running counts for the summary."""

    correct: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    chance: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_shuffle: Counter[int] = field(default_factory=Counter)
    letters: Counter[str] = field(default_factory=Counter)
    expected_letters: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    unparseable: int = 0
    histogram: Counter[int] = field(default_factory=Counter)
    guess_removals: float = 0.0

    def add(self, rec: NocontextRecord, label: str, max_correct: int | None) -> None:
        m = rec.n_options
        for a in rec.answers[label]:
            for key in ("all", rec.question_type):
                self.correct[key] += a.correct
                self.answers[key] += 1
                self.chance[key] += 1 / m
            self.by_shuffle[a.shuffle] += a.correct
            if a.letter is None:
                self.unparseable += 1
            else:
                self.letters[a.letter] += 1
                for k in LETTERS[:m]:
                    self.expected_letters[k] += 1 / m
        self.histogram[rec.correct[label]] += 1
        if max_correct is not None:  # chance that a blind guesser removes this item
            from scipy.stats import binom

            self.guess_removals += float(binom.sf(max_correct, rec.shuffles, 1 / m))


def summarise(
    cfg: NocontextConfig,
    records: list[NocontextRecord],
    tallies: dict[str, Tally],
    n_rejected: int,
    seconds: float,
    describe: dict[str, Any],
) -> dict[str, Any]:
    by_type: dict[str, Counter[str]] = defaultdict(Counter)
    removed_by: Counter[str] = Counter()
    for r in records:
        by_type[r.question_type]["items"] += 1
        by_type[r.question_type]["kept" if r.kept else "removed"] += 1
        removed_by.update(r.removed_by)
    n = len(records)
    models = {}
    for label, t in tallies.items():
        types = sorted(k for k in t.answers if k != "all")
        answers = t.answers["all"]
        models[label] = {
            "llm": describe[label],
            "accuracy": binomial(
                t.correct["all"], answers, t.chance["all"] / answers if answers else 0
            ),
            "accuracy_by_question_type": {
                q: binomial(t.correct[q], t.answers[q], t.chance[q] / t.answers[q]) for q in types
            },
            "accuracy_by_shuffle": [
                round(t.by_shuffle[k] / n, 4) if n else None for k in range(cfg.shuffles)
            ],
            "items_by_correct_shuffles": {str(k): t.histogram[k] for k in range(cfg.shuffles + 1)},
            "removed_by_a_blind_guesser_expected": round(t.guess_removals, 2),
            "unparseable": t.unparseable,
            "unparseable_rate": round(t.unparseable / answers, 4) if answers else None,
            "letter_bias": letter_bias(t.letters, dict(t.expected_letters)),
        }
    answering = (
        {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens}
        if cfg.mode == "generate"
        else {"norm": cfg.norm, "chat_template": cfg.chat_template}
    )
    return {
        "mode": cfg.mode,
        "prompt": cfg.prompt,
        "shuffles": cfg.shuffles,
        "answering": answering,
        "rules": {"max_correct": cfg.max_correct, "panel_k": cfg.panel_k},
        "items": {
            "screened": n + n_rejected,
            "kept": sum(r.kept for r in records),
            "removed": sum(not r.kept for r in records),
            "rejected": n_rejected,
            "removed_by": {k: removed_by[k] for k in RULES},
        },
        "by_question_type": {q: dict(c) for q, c in sorted(by_type.items())},
        "models": models,
        "throughput": {
            "seconds": round(seconds, 2),
            "items_per_second": round(n / seconds, 3) if seconds else None,
            "answers_per_second": round(n * cfg.shuffles * len(tallies) / seconds, 3)
            if seconds
            else None,
        },
        "note": "ci95 is a Wilson interval over all answers; the shuffles of one item are not "
        "independent, so it is narrower than an interval over items.",
    }


def table(summary: dict[str, Any]) -> str:
    """A short plain-text table of the summary, printed at the end of a run."""
    it = summary["items"]
    lines = [
        f"nocontext: {it['screened']} items x {summary['shuffles']} shuffles, "
        f"mode={summary['mode']}, prompt={summary['prompt']}: kept {it['kept']}, "
        f"removed {it['removed']}, rejected {it['rejected']}"
    ]
    head = f"  {'model':<28} {'type':<10} {'answers':>7} {'acc':>6} {'95% CI':>15} {'chance':>6}"
    lines.append(head + f" {'unparsed':>8} {'top letter':>10}")
    for label, m in summary["models"].items():
        bias = m["letter_bias"]["share"]
        top = max(bias, key=lambda k: bias[k] or 0) if bias else "-"
        top_s = f"{top} {bias[top]:.0%}" if bias and bias[top] is not None else "-"
        rows = [("all", m["accuracy"]), *m["accuracy_by_question_type"].items()]
        for i, (q, acc) in enumerate(rows):
            if not acc["answers"]:
                continue
            ci = f"[{acc['ci95'][0]:.2f}, {acc['ci95'][1]:.2f}]"
            extra = f" {m['unparseable']:>8} {top_s:>10}" if i == 0 else ""
            lines.append(
                f"  {label[:28]:<28} {q[:10]:<10} {acc['answers']:>7} "
                f"{acc['accuracy']:>6.3f} {ci:>15} {acc['chance']:>6.3f}{extra}"
            )
    tp = summary["throughput"]
    lines.append(f"  {tp['items_per_second']} items/s ({tp['seconds']} s)")
    return "\n".join(lines)
