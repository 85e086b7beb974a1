"""Records of ``review``: rubrics, the labels people give items, and what a review run writes.

A label is one line of ``reviews/<reviewer>.jsonl`` in the reviewed run folder; every change
(a score, a decision, a note) appends the item's whole current label, so the last line of an item
is that reviewer's verdict and the file is its history.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Decision = Literal["accept", "reject", "needs_edit"]
DECISIONS: tuple[str, ...] = ("accept", "reject", "needs_edit")
REVIEWER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A reviewer name is a file name too (``reviews/<reviewer>.jsonl``)."""
KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class RubricField(BaseModel):
    """One question a reviewer answers with a number key (1..len(labels))."""

    model_config = ConfigDict(extra="forbid")

    key: str
    """Short identifier (``answer_correct``), used in the label files and the summary."""
    question: str
    """What the reviewer judges, as a question."""
    labels: list[str] = Field(min_length=2, max_length=9)
    """What score 1, 2, … mean (at most 9: one number key each)."""

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if not KEY.match(v):
            raise ValueError(f"{v!r} is not a rubric key (lower case letters, digits and _, 1-40)")
        return v


class Rubric(BaseModel):
    """A rubric for one item kind (``prompts/review/<kind>.yaml`` or ``rubric=<file>``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=80)
    kinds: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]] = Field(min_length=1)
    """Item kinds it rates: ``mcq`` (tom, distractors, nocontext kept items, external MCQs),
    ``digital`` (digital bundles), ``scenarios`` (context-tracking scenarios in the context
    benchmark's released schema; ``scenario``, the former name, is read as ``scenarios``),
    ``record`` (every kind shown in the generic record layout) or a kind's name (that kind's
    records in the record layout, such as a plugin's kind)."""
    guidance: str = ""
    """Shown above the fields: what a good item is."""
    fields: list[RubricField] = Field(min_length=1, max_length=12)

    @field_validator("kinds", mode="before")
    @classmethod
    def _old_kinds(cls, v: object) -> object:
        return ["scenarios" if k == "scenario" else k for k in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _unique(self) -> Rubric:
        keys = [f.key for f in self.fields]
        if len(set(keys)) != len(keys):
            raise ValueError(f"rubric field keys must be unique, got {keys}")
        return self


class ReviewLabel(BaseModel):
    """One line of ``reviews/<reviewer>.jsonl``: a reviewer's whole current label of one item."""

    model_config = ConfigDict(extra="forbid")

    item_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    """The item's content hash (the bank's id: ``generators/bank/identity.py``)."""
    record_id: str | None = Field(default=None, max_length=200)
    """The record's own id in the run (``item_id`` of an MCQ record, ``bundle_id``,
    ``scenario_id``), for people."""
    reviewer: str
    """Who labelled it (letters, digits, ``.``, ``_``, ``-``; at most 64)."""
    time: str = Field(max_length=40)
    """UTC, ISO 8601, when the change was made."""
    rubric: str = Field(max_length=80)
    """The name of the rubric the scores are on."""
    scores: dict[str, int] = Field(default_factory=dict)
    """Rubric key -> score (1-based); a key is absent until scored."""
    decision: Decision | None = None
    """``accept``, ``reject`` or ``needs_edit``; null until decided."""
    note: str = Field(default="", max_length=10_000)
    """The reviewer's free note; empty when none."""

    @field_validator("reviewer")
    @classmethod
    def _reviewer(cls, v: str) -> str:
        if not REVIEWER.match(v):
            raise ValueError(f"{v!r} is not a reviewer name (letters, digits, . _ -; at most 64)")
        return v

    @field_validator("scores")
    @classmethod
    def _scores(cls, v: dict[str, int]) -> dict[str, int]:
        for k, s in v.items():
            if not KEY.match(k) or not 1 <= s <= 9:
                raise ValueError(f"score {k!r}={s!r}: a rubric key and a score 1-9")
        return v


class ReviewStatusRecord(BaseModel):
    """``review`` (serving): one line per item of the reviewed folder, as this reviewer left it."""

    item_id: str
    """The item's content hash (the bank's id), which labels are keyed by."""
    record_id: str | None
    """The record's own id in its file (``item_id`` of an MCQ record, ``bundle_id``,
    ``scenario_id``); null when unknown."""
    kind: str
    """``mcq``, ``digital``, ``scenarios``, or the kind's name for a kind shown in the record
    layout: which rubric rates it."""
    question_type: str | None
    """The item's question type (a bundle's ``cue:<App>`` or ``uncued``); null when it has none."""
    reviewer: str
    """The reviewer serving the page (``reviewer=``)."""
    decision: Decision | None
    """The reviewer's latest decision (``accept``, ``reject``, ``needs_edit``); null when undecided
    or unlabelled."""
    scores: dict[str, int]
    """Rubric key -> the reviewer's latest score (1-based); ``{}`` when unscored."""
    note: str
    """The reviewer's latest note; empty when none."""
    changes: int
    """How many label lines this reviewer wrote for the item."""


class AgreementRecord(BaseModel):
    """``review summary``: one line per item, the verdicts of every reviewer who labelled it."""

    item_id: str
    """The item's content hash (the bank's id)."""
    record_id: str | None
    """The record's own id in its file; null when unknown."""
    kind: str
    """``mcq``, ``digital``, ``scenarios`` or a record-layout kind's name; ``unknown`` for a label
    of an item the folder no longer holds."""
    decisions: dict[str, Decision | None]
    """Reviewer -> decision."""
    scores: dict[str, dict[str, int]]
    """Reviewer -> rubric key -> score."""
    disagree: list[str]
    """``decision`` and the rubric keys on which the reviewers differ."""
    accepted_by: list[str]
    """Reviewers whose latest decision is ``accept``, sorted."""
