"""Two runs of one bank, item by item (``gen.compare(a, b)``): two ``evaluate`` runs of
different models on the same items, lined up by item id, with their agreement, each one's
accuracy per question type, and McNemar's exact test of the pairs on which they differ. What
``review summary`` does for people, for models::

    cmp = gen.compare("runs/eval-smollm", "runs/eval-qwen")
    cmp.accuracy, cmp.by_type, cmp.p_value
    cmp.to_polars()     # one row per item: its type, each run's correctness and choice

Records are read through :class:`~gen.engine.runfolder.RunFolder` as JSON; a record kind is
compared when it says per item whether its answer was right: ``evaluate``'s MCQ answers
(``item_id``, ``question_type``, ``correct``) and its scenario trials (``scenario_id``,
``condition``, ``trial``, ``change_type``, ``correct_turn_2``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gen.engine.runfolder import RunFolder, html_card
from gen.errors import InputError
from gen.stats import agreement, cohen_kappa, mcnemar_exact, rounded


@dataclass(frozen=True)
class Outcome:
    """One item of one run: its type, whether the answer was right, and the option chosen."""

    type: str
    correct: bool
    choice: Any = None


def outcomes(run: RunFolder, what: str) -> dict[str, Outcome]:
    """Each item's outcome in ``run``, by item id (a scenario trial's id is
    ``<scenario_id>/<condition>/<trial>``); a record without a right-or-wrong answer, or an id
    twice, is an InputError naming the run (``what``: ``a`` or ``b``)."""
    out: dict[str, Outcome] = {}
    for line, row in run.rows():
        where = f"compare: {what}: {run.records_path}:{line}"
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected a JSON object")
        if "item_id" in row and isinstance(row.get("correct"), bool):
            key, kind = str(row["item_id"]), str(row.get("question_type", ""))
            correct, choice = row["correct"], row.get("choice")
        elif "scenario_id" in row and "correct_turn_2" in row:
            key = f"{row['scenario_id']}/{row.get('condition', '')}/{row.get('trial', 0)}"
            kind, correct, choice = str(row.get("change_type", "")), row["correct_turn_2"], None
            if correct is None:  # no judge label fit: not scored, as evaluate counts it
                continue
        else:
            raise InputError(
                f"{where}: a {run.kind} record says no per-item right or wrong answer (compare "
                "reads evaluate runs: item_id, question_type, correct)"
            )
        if key in out:
            raise InputError(f"{where}: item {key} appears twice")
        out[key] = Outcome(kind, bool(correct), choice)
    return out


@dataclass
class Comparison:
    """Two runs of one bank lined up item by item (:func:`compare`)."""

    names: tuple[str, str]
    """What the two runs are called in tables (their folders' names, or the names given)."""
    items: list[tuple[str, Outcome, Outcome]] = field(repr=False)
    """(item id, the outcome in a, in b), sorted by id."""

    @property
    def n(self) -> int:
        """Items in both runs."""
        return len(self.items)

    @property
    def accuracy(self) -> tuple[float | None, float | None]:
        """Each run's share of right answers."""
        return (self._share(0), self._share(1))

    def _share(self, side: int, kind: str | None = None) -> float | None:
        rows = [pair[side] for pair in self._pairs() if kind is None or pair[0].type == kind]
        return rounded(sum(r.correct for r in rows) / len(rows)) if rows else None

    def _pairs(self) -> list[tuple[Outcome, Outcome]]:
        return [(a, b) for _, a, b in self.items]

    @property
    def agreement(self) -> float | None:
        """Share of items both runs got right or both got wrong."""
        a, b = ([pair[k].correct for pair in self._pairs()] for k in (0, 1))
        value = agreement(a, b)
        return rounded(value) if value is not None else None

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa of the two runs' right/wrong outcomes."""
        a, b = ([pair[k].correct for pair in self._pairs()] for k in (0, 1))
        value = cohen_kappa(a, b)
        return rounded(value) if value is not None else None

    @property
    def discordant(self) -> tuple[int, int]:
        """(items only a got right, items only b got right): McNemar's pairs."""
        only_a = sum(a.correct and not b.correct for _, a, b in self.items)
        only_b = sum(b.correct and not a.correct for _, a, b in self.items)
        return only_a, only_b

    @property
    def p_value(self) -> float:
        """McNemar's exact two-sided p-value: that the runs' accuracies differ by chance."""
        return rounded(mcnemar_exact(*self.discordant), 6)

    @property
    def by_type(self) -> dict[str, dict[str, Any]]:
        """Per question type: its items and each run's accuracy."""
        kinds = sorted({a.type for _, a, _ in self.items})
        return {
            k: {
                "n": sum(a.type == k for _, a, _ in self.items),
                self.names[0]: self._share(0, k),
                self.names[1]: self._share(1, k),
            }
            for k in kinds
        }

    def to_polars(self) -> Any:
        """One row per item: its id and type, each run's correctness and choice."""
        import polars as pl

        a, b = self.names
        return pl.DataFrame(
            [
                {
                    "item_id": key,
                    "question_type": x.type,
                    f"{a}_correct": x.correct,
                    f"{b}_correct": y.correct,
                    f"{a}_choice": x.choice,
                    f"{b}_choice": y.choice,
                }
                for key, x, y in self.items
            ],
            infer_schema_length=None,
        )

    def _repr_html_(self) -> str:
        a, b = self.names
        only_a, only_b = self.discordant
        facts = [
            ("items matched", self.n),
            (f"accuracy {a}", self.accuracy[0]),
            (f"accuracy {b}", self.accuracy[1]),
            ("agreement (both right or both wrong)", self.agreement),
            ("Cohen's kappa", self.kappa),
            (f"right only in {a}", only_a),
            (f"right only in {b}", only_b),
            ("McNemar exact p", self.p_value),
        ]
        rows = [{"question_type": k, **v} for k, v in self.by_type.items()]
        return html_card("Comparison", facts, [], rows, rows_title="accuracy by question type")

    def __repr__(self) -> str:
        a, b = self.names
        return (
            f"Comparison({a!r} vs {b!r}: {self.n} items, accuracy {self.accuracy[0]} vs "
            f"{self.accuracy[1]}, agreement {self.agreement}, McNemar p={self.p_value})"
        )


def compare(
    a: RunFolder | str | Path, b: RunFolder | str | Path, *, names: tuple[str, str] | None = None
) -> Comparison:
    """Two runs of one bank (two ``evaluate`` runs of different models), lined up by item id.

    Args:
        a: a run folder (or its path).
        b: another run folder of the same items.
        names: what to call them in tables (default: the folders' names; ``a`` and ``b`` when
            those are the same).

    Raises:
        InputError: a run whose records say no right or wrong answer per item, or two runs that
            are not of one bank (their item ids differ: the message says how many matched).
    """
    runs = [x if isinstance(x, RunFolder) else RunFolder.open(x) for x in (a, b)]
    first, second = outcomes(runs[0], "a"), outcomes(runs[1], "b")
    shared = first.keys() & second.keys()
    if first.keys() != second.keys():
        only_a, only_b = sorted(first.keys() - shared), sorted(second.keys() - shared)
        raise InputError(
            f"compare: the runs are not of one bank: {len(shared)} items matched, "
            f"{len(only_a)} only in a{f' (e.g. {only_a[0]})' if only_a else ''}, "
            f"{len(only_b)} only in b{f' (e.g. {only_b[0]})' if only_b else ''}"
        )
    if not shared:
        raise InputError("compare: the runs have no scored items")
    if names is None:
        names = (runs[0].path.name, runs[1].path.name)
        if names[0] == names[1]:
            names = ("a", "b")
    return Comparison(names, [(k, first[k], second[k]) for k in sorted(shared)])
