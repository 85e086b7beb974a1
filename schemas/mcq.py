"""Multiple-choice items, as every step after generation sees them.

Generators that write MCQs (``tom``, ``distractors``) write records that *are* ``MCQRecord`` plus
their own fields, so ``nocontext``, ``audit`` and ``bank`` read any of them, and EgoToM's CSVs,
through one loader (:mod:`gen.formats.mcq`) into :class:`MCQ`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

LETTERS = "abcdefghijklmnopqrstuvwxyz"


class MCQRecord(BaseModel):
    """The fields every MCQ record the toolkit writes starts with.

    ``visible`` holds what the candidate model is shown besides the question and options
    (context text, the query time...); ``privileged`` holds what it must never see (the
    truth's provenance, future narrations, hidden state). Audits check the two never meet.
    """

    model_config = ConfigDict(extra="allow")

    item_id: str
    """The item's id, unique in its file (a generated item's: 32 hex derived from the run's seed,
    the generator and the record's index)."""
    question_type: str
    """``goal`` / ``belief`` / ``actions`` (tom), ``similar`` / ``dissimilar`` (distractors)…"""
    question: str
    """The question the candidate model is asked."""
    options: list[str] = Field(min_length=2)
    """The answer options in the order shown (at least two); ``answer`` and ``origins`` index
    them."""
    answer: int = Field(ge=0)
    """0-based index of the correct option."""
    origins: list[str] | None = None
    """Per option where it came from (``truth``, a counterfactual stage, ``distractor``…)."""
    group: str | None = None
    """The unit items share (a clip, a reference goal's group), for cross-item leakage checks."""
    visible: dict[str, Any] = Field(default_factory=dict)
    """``context`` (text, or a list of lines) and anything else shown; ``{}`` when none."""
    privileged: dict[str, Any] = Field(default_factory=dict)
    """What the candidate must never see (the truth's provenance, future narrations, hidden state);
    ``{}`` when none."""

    @model_validator(mode="after")
    def _answer_in_range(self) -> MCQRecord:
        if self.answer >= len(self.options):
            raise ValueError(f"answer {self.answer} out of range for {len(self.options)} options")
        if self.origins is not None and len(self.origins) != len(self.options):
            raise ValueError("origins must have one entry per option")
        return self


class MCQ(BaseModel):
    """One item of a loaded bank, whatever file it came from (see
    :func:`gen.formats.mcq.load_bank`)."""

    item_id: str
    question_type: str
    question: str
    options: list[str]
    answer: int | None
    """0-based index of the correct option; None for an item without options."""
    context: str = ""
    """The visible context as the candidate would read it (narrations, app state...)."""
    group: str | None = None
    """The unit items share (clip, video, scenario, reference goal) — for leakage across items."""
    category: str | None = None
    """A category for counts (a scenario bank's shift type); None when the bank has none."""
    origins: list[str] | None = None
    visible: dict[str, str] = Field(default_factory=dict)
    """Field path -> visible text (``context``, ``question``, ``options[0]``…)."""
    privileged: dict[str, str] = Field(default_factory=dict)
    """Field path -> ground-truth text the candidate must not see."""
    answers: list[int] | None = None
    """A multi-select item (EgoIntrospect's Tool Selection): the required options (or the "No
    tool needed" option alone); None for a single-answer item."""
    acceptable: list[int] | None = None
    """A multi-select item: the options a right answer may hold (required and helpful)."""
    line: int
    """0-based row (CSV) or line (JSONL) in the source file, to write subsets back unchanged."""

    @property
    def answer_text(self) -> str | None:
        return None if self.answer is None else self.options[self.answer]
