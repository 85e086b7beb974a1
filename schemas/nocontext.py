"""Records of ``nocontext``: blind screening of MCQ items."""

from __future__ import annotations

from pydantic import BaseModel


class Answer(BaseModel):
    """One model's answer to one shuffle of an item."""

    shuffle: int
    order: list[int]
    """Original option indices in the order shown (shown letter ``a`` is ``order[0]``)."""
    raw: str | None
    """The model's reply (generate mode); null in loglik mode."""
    letter: str | None
    """The letter read from the reply or scored highest; null when unparseable."""
    choice: int | None
    """The original index of the chosen option; null when unparseable."""
    correct: bool
    scores: list[float] | None = None
    """loglik mode: the normalised score of each shown answer line, in shown order."""


class NocontextRecord(BaseModel):
    """The screening of one item: every model's answer on every shuffle, and the verdict."""

    item_id: str
    question_type: str
    source: str
    """The input file the item came from."""
    line: int
    """Row (CSV) or line (JSONL) of the item in its input file, 0-based."""
    n_options: int
    answer: int
    """Original index of the correct option."""
    kept: bool
    removed_by: list[str]
    """Rules that removed it: ``max_correct`` and/or ``panel``; empty when kept."""
    shuffles: int
    correct: dict[str, int]
    """Model label -> shuffles answered correctly."""
    unparseable: dict[str, int]
    """Model label -> answers no letter could be read from (generate mode)."""
    answers: dict[str, list[Answer]]
