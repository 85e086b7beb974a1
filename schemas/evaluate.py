"""Records of ``evaluate``: one candidate trial of a context-tracking scenario, or one MCQ
answer."""

from __future__ import annotations

from pydantic import BaseModel

from gen.schemas.judge import Label


class TrialRecord(BaseModel):
    """One seeded trial of one scenario under one prompt condition: the candidate's replies, the
    judges' labels of turn 2 and (after a miss) turn 3."""

    scenario_id: str
    """The scenario's ``scenario_id`` in the bank."""
    condition: str
    """The prompt condition's name (``condition=``; its system prompt from
    ``prompt_conditions.json``)."""
    trial: int
    """0-based trial of this scenario and condition (``trials=``), each with its own seed."""
    target_context: Label
    """The scenario's gold label: ``current``, ``prior``, ``clarify`` or ``abstain``."""
    change_type: str
    """The scenario's ``change_type``, as the bank has it."""
    replies: dict[str, str | None]
    """``turn_1``, ``turn_2``, ``turn_3`` (null unless turn 2 was a miss)."""
    repair_prompt: str | None
    """The repair prompt sent (named, or deictic with the named one as fallback); null: no
    repair."""
    turn_2: dict[str, Label | None]
    """Judge label -> its label of the turn-2 reply (null: the judge's output did not fit the
    schema)."""
    turn_3: dict[str, Label | None] | None
    """Judge label -> its label of the turn-3 (repair) reply; null when there was no repair."""
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
    """The item's id in the bank (for an EgoToM CSV: ``<question type>:<cuid>``)."""
    question_type: str
    """The item's question type, by which accuracy is also reported."""
    source: str
    """The bank file the item was read from."""
    n_options: int
    """How many options were shown (lettered a, b, c…); chance is 1 / this."""
    answer: int
    """0-based index of the correct option."""
    raw: str
    """The candidate's reply as it wrote it."""
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
