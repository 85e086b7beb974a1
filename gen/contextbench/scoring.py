"""Scoring a candidate on the context bench: the repair prompt it is sent (:func:`repair_text`),
the code signals of a reply (:func:`signals`: which gold terms it names), and the benchmark's
numbers from a judge's labels (:func:`metrics`: balanced turn-2 accuracy with a bootstrap interval,
per-label accuracy, repair). The context judge and the evaluation runner score with these."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from gen.contextbench.rules import word_match
from gen.schemas.judge import LABELS, ContextJudgeRecord
from gen.schemas.scenarios import ScenarioRecord
from gen.stats import balanced_accuracy, bootstrap_ci, proportion, rounded

SCORED = ("current", "prior")
"""The classes of the primary score (balanced accuracy)."""


def repair_text(s: ScenarioRecord, style: str) -> str:
    """The repair prompt a candidate is sent: the deictic one when asked for and present, else
    the named one (the spec's fallback)."""
    return (
        s.turn_3_repair_prompt_deictic if style == "deictic" else None
    ) or s.turn_3_repair_prompt


def signals(response: str, lists: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per answer list, its terms found in ``response`` at word boundaries, case-insensitive
    (the benchmark's ``\\b<token>\\b`` match): code signals recorded beside the verdict."""
    short = {
        "current_answers": "current",
        "prior_answers": "prior",
        "clarify_indicators": "clarify",
        "abstain_indicators": "abstain",
    }
    return {
        short[k]: [t for t in lists.get(k, []) if t.strip() and word_match(t, response)]
        for k in short
    }


Key = tuple[Any, ...]


def metrics(
    records: Sequence[ContextJudgeRecord],
    label_of: Callable[[ContextJudgeRecord], str | None],
    *,
    seed: int,
    resamples: int = 2000,
) -> dict[str, Any]:
    """The benchmark's numbers for one candidate and condition, under one judge's labels.

    - ``balanced_accuracy``: turn 2, the mean of the accuracies on the ``current`` and on the
      ``prior`` scenarios (None when either class is absent or unjudged); its ``ci95`` from a
      bootstrap over scenarios (a scenario's trials move together);
    - ``per_label``: per target label, turn-2 accuracy with a Wilson interval (rows, not
      scenarios: trials of one scenario are not independent, so it is narrower than it should be);
    - ``repair``: of the judged turn-2 misses with a judged turn-3 reply, the share labelled right.
    Replies the judge gave no label (``not_followed``) are left out of every rate and counted.
    """
    t2 = [r for r in records if r.turn == 2]
    judged = [r for r in t2 if label_of(r) is not None]
    by_scenario: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for r in judged:
        by_scenario[r.scenario_id].append((r.target_context, str(label_of(r))))

    def balanced(units: list[list[tuple[str, str]]]) -> float | None:
        return balanced_accuracy([p for u in units for p in u], SCORED)

    units = list(by_scenario.values())
    ba = balanced(units)
    per_label = {}
    for lab in LABELS:
        rows = [r for r in judged if r.target_context == lab]
        per_label[lab] = proportion(sum(label_of(r) == lab for r in rows), len(rows))
    turn3 = {(r.candidate, r.condition, r.scenario_id, r.trial): r for r in records if r.turn == 3}
    misses = [r for r in judged if label_of(r) != r.target_context]
    answered = [
        turn3[k]
        for r in misses
        if (k := (r.candidate, r.condition, r.scenario_id, r.trial)) in turn3
    ]
    repaired = [r for r in answered if label_of(r) is not None]
    return {
        "turn_2": {
            "replies": len(t2),
            "judged": len(judged),
            "not_followed": len(t2) - len(judged),
            "scenarios": len(by_scenario),
        },
        "balanced_accuracy": None if ba is None else rounded(ba),
        "balanced_accuracy_ci95": bootstrap_ci(units, balanced, seed=seed, resamples=resamples),
        "per_label": per_label,
        "predicted": dict(sorted(Counter(str(label_of(r)) for r in judged).items())),
        "repair": {
            "turn_2_misses": len(misses),
            "with_turn_3": len(answered),
            "turn_3_not_followed": len(answered) - len(repaired),
            **proportion(sum(label_of(r) == r.target_context for r in repaired), len(repaired)),
        },
    }
