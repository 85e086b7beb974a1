"""EgoToM causal Theory-of-Mind QA: what the LLM writes at each stage (``*Draft``) and the
question records code assembles from it (:class:`TomQuestion`).

Drafts are small on purpose: the embedded model is tiny, so every string has a length cap the
grammar enforces, lists have exact sizes, and the transition is a line *number* chosen from
the ones code allows (an enum in the JSON schema) rather than a free-typed timestamp. Code adds
the surface forms ("To …", "C believes that …", "C a, b, and c.").
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

from gen.schemas import Hex32, plain_text
from gen.schemas.mcq import MCQRecord

QuestionType = Literal["goal", "belief", "actions"]

# Caps near the 99th percentile of EgoToM's own statements (goal 63 chars, belief 125 with its
# 16-char "C believes that ", actions 113 for three), so rambling stops early.
# The cap is written as a pattern that also excludes control characters, quotes and backslashes:
# llama.cpp's grammar for a plain string lets a raw newline into the JSON, which then fails to
# parse; and a pattern replaces maxLength in the grammar, so the length goes into it.
GOAL_CHARS, ACTION_CHARS, BELIEF_CHARS, SENTENCE_CHARS = 64, 40, 100, 120
"""The caps; a text of exactly its cap was cut there (the text gates count it as truncated)."""
GoalText = Annotated[str, Field(pattern=plain_text(GOAL_CHARS))]
ActionPhrase = Annotated[str, Field(pattern=plain_text(ACTION_CHARS))]
BeliefText = Annotated[str, Field(pattern=plain_text(BELIEF_CHARS))]
ActionSentence = Annotated[str, Field(pattern=plain_text(SENTENCE_CHARS))]


# --------------------------------------------------------------------------- stage drafts


class AnalysisDraft(BaseModel):
    """Stage 2, narration analysis over the whole timeline."""

    transition_line: int
    """Number of the line where C moves on to the next set of actions (from the numbered list)."""
    future_goal: GoalText
    next_actions: list[ActionPhrase] = Field(min_length=3, max_length=3)
    belief: BeliefText


@lru_cache(maxsize=256)
def analysis_draft(candidates: tuple[int, ...]) -> type[AnalysisDraft]:
    """:class:`AnalysisDraft` whose ``transition_line`` may only be one of ``candidates``.

    The enum lives only in the JSON schema, so a grammar-constrained backend cannot pick
    another line, while pydantic still accepts any integer: code then validates it and
    rejects with a specific reason (unknown line, first half…) on backends that ignore enums.
    """
    return create_model(
        "AnalysisDraft",
        __base__=AnalysisDraft,
        transition_line=(int, Field(json_schema_extra={"enum": list(candidates)})),
    )


class WrongGoalsDraft(BaseModel):
    """Stage 3: three goals C does not have, from the past narrations only."""

    wrong_goals: list[GoalText] = Field(min_length=3, max_length=3)


class AlternativeDraft(BaseModel):
    belief: BeliefText
    next_actions: list[ActionPhrase] = Field(min_length=3, max_length=3)


class AlternativesDraft(BaseModel):
    """Stage 4: three (belief, next actions) pairs that still serve the true goal."""

    alternatives: list[AlternativeDraft] = Field(min_length=3, max_length=3)


class SimplifiedDraft(BaseModel):
    """Stage 5: the alternative action statements rewritten in narration style."""

    simplified: list[ActionSentence] = Field(min_length=3, max_length=3)


# --------------------------------------------------------------------------- records


class TomQuestion(MCQRecord):
    """One EgoToM-style question about the camera wearer C at a clip's transition moment.

    ``visible`` holds ``context`` (the narrations before the query moment, one per line in
    EgoToM's ``"    MMm:SSs | #C C …"`` form) and ``query_time`` (``MMm:SSs`` from the clip
    start). ``privileged`` holds what the candidate must never see: the transition line, the
    future narrations from it on, the three truth statements, the clip summary.
    """

    item_id: Hex32
    question_type: QuestionType
    clip_id: str
    """EgoToM-style ``{vuid}~{pass}~{first}-{last}`` for Ego4D input, else the input's id."""
    vuid: str
    """The source video id."""
    input_format: Literal["ego4d", "egotom_csv", "jsonl"]
    """The input the clip was read from: ``ego4d`` (narrations), ``egotom_csv`` (EgoToM's CSVs) or
    ``jsonl`` (timelines); ``input_format=auto`` resolved."""
    clip_start_time: float
    """Clip start in seconds of the source video (EgoToM's ``clip_start_time``)."""
    clip_end_time: float
    """The query moment in seconds of the source video (EgoToM's ``clip_end_time``)."""
    query_sec: float
    """The query moment in seconds from the clip start."""
    privileged: dict[str, Any]
