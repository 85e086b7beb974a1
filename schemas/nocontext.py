"""Records of ``nocontext``: blind screening of MCQ items."""

from __future__ import annotations

from pydantic import BaseModel


class Answer(BaseModel):
    """One model's answer to one shuffle of an item."""

    shuffle: int
    """Which seeded shuffle of the options (0-based, ``shuffles`` of them per item)."""
    order: list[int]
    """Original option indices in the order shown (shown letter ``a`` is ``order[0]``)."""
    raw: str | None
    """The model's reply (generate mode); null in loglik mode."""
    letter: str | None
    """The letter read from the reply or scored highest; null when unparseable."""
    choice: int | None
    """The original index of the chosen option; null when unparseable."""
    correct: bool
    """``choice`` is the correct option (an unparseable reply is wrong)."""
    scores: list[float] | None = None
    """loglik mode: the normalised score of each shown answer line, in shown order."""


class NocontextRecord(BaseModel):
    """The screening of one item: every model's answer on every shuffle, and the verdict."""

    item_id: str
    """The item's id in its input."""
    question_type: str
    """The item's question type (the summary counts removals per type)."""
    source: str
    """The input file the item came from."""
    line: int
    """Row (CSV) or line (JSONL) of the item in its input file, 0-based."""
    n_options: int
    """How many options the item has."""
    answer: int
    """Original index of the correct option."""
    kept: bool
    """No rule removed it: it goes to ``kept/`` (``removed_by`` is empty)."""
    removed_by: list[str]
    """Rules that removed it: ``max_correct`` and/or ``panel``; empty when kept."""
    shuffles: int
    """Seeded option orders each model answered (``shuffles=``)."""
    correct: dict[str, int]
    """Model label -> shuffles answered correctly."""
    unparseable: dict[str, int]
    """Model label -> answers no letter could be read from (generate mode)."""
    answers: dict[str, list[Answer]]
    """Model label -> its answer on each shuffle, in shuffle order."""
