"""Records of ``evaluate``: one candidate trial of a context-tracking scenario, or one MCQ
answer."""

from __future__ import annotations

from pydantic import BaseModel

from gen.schemas.judge import Label


class TrialRecord(BaseModel):
    """One seeded trial of one scenario under one prompt condition: the candidate's replies, the
    judges' labels of turn 2 and (after a miss) turn 3."""

    scenario_id: str
    condition: str
    trial: int
    target_context: Label
    change_type: str
    replies: dict[str, str | None]
    """``turn_1``, ``turn_2``, ``turn_3`` (null unless turn 2 was a miss)."""
    repair_prompt: str | None
    """The repair prompt sent (named, or deictic with the named one as fallback); null: no
    repair."""
    turn_2: dict[str, Label | None]
    """Judge label -> its label of the turn-2 reply (null: the judge's output did not fit the
    schema)."""
    turn_3: dict[str, Label | None] | None
    correct_turn_2: bool | None
    """By the primary judge; null when it gave no label."""
    repaired: bool | None
    """By the primary judge, for a turn-2 miss: the turn-3 reply is right; null otherwise."""
    signals_turn_2: dict[str, list[str]]
    """Word-boundary hits of the four answer lists in the turn-2 reply (code signals, not the
    score)."""


class MCQAnswerRecord(BaseModel):
    """The candidate's answer to one multiple-choice item, with its visible context. A
    multi-select item (EgoIntrospect's Tool Selection) is scored by H.1.1's hierarchical rule
    (``correct``) and records what its required recall and distractor rate read."""

    item_id: str
    question_type: str
    source: str
    n_options: int
    answer: int
    raw: str
    letter: str | None
    """The option label read from the reply (``a`` … ``z``, ``aa`` …); a multi-select reply's
    labels joined by commas (null: unparseable, counted wrong)."""
    choice: int | None
    """The option chosen (null: unparseable, or a multi-select item)."""
    correct: bool
    """Single answer: the key chosen; multi-select: H.1.1's strict hierarchical correctness."""
    choices: list[int] | None = None
    """Multi-select: the options chosen, in the reply's order (null: single answer, or
    unparseable)."""
    required: list[int] | None = None
    """Multi-select: the required options (empty when none is: the answer is "No tool needed" or
    a helpful option)."""
    helpful: list[int] | None = None
    """Multi-select: the helpful-but-not-required options."""
    none_option: int | None = None
    """Multi-select: the "No tool needed" option (no tool in the distractor rate); null if none."""
