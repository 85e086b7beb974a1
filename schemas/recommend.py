"""The proactive recommendation generator's global path (EgoIntrospect appendix B.2): the
sessions ``gen recommend`` reads (:class:`RecommendSession`), what the global generator writes for
one segment (:class:`GlobalDraft`: a factual summary and first-person requests in the nine intent
categories), and the record per segment (:class:`RecommendationRecord`: the pool of every request,
flagged, and its rerank).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from gen.schemas import plain_text
from gen.schemas.introspect import Forbidden, Id, Line, Seconds, Session, Span, Text
from gen.schemas.rerank import RankedCandidate

CATEGORIES: dict[str, str] = {
    "object_identification": "object identification and recognition",
    "text_and_audio": "translation, text and audio recognition",
    "procedural_guidance": "procedural guidance",
    "decision_support": "decision support",
    "contextual_memory": "contextual memory",
    "computation": "computation and estimation",
    "task_assistance": "task assistance",
    "recommendation": "context-aware recommendation",
    "engaging_interaction": "engaging interaction",
}
"""The nine intent categories of B.2 stage 5, in its order: field name -> what it covers."""


class Scene(Span):
    """A scene-context annotation (where the participant is, with whom, doing what) over a span."""

    context: Text


class RecommendSession(Session):
    """One line of ``gen recommend``'s input: a recording session, its timed lines (the clip's
    text: gen has no video model), the participant's profile and do-not-disturb intervals, and
    the scene-context annotations."""

    profile: Text | None = None
    forbidden: list[Forbidden] = Field(default_factory=list)
    scenes: list[Scene] = Field(default_factory=list)


Request = Annotated[str, Field(pattern=plain_text(160, 3))]
Summary = Annotated[str, Field(pattern=plain_text(400, 10))]


class GlobalDraft(BaseModel):
    """The global generator's answer for one segment: a short factual summary of the clip and
    one or two requests per intent category, each as the participant would say it."""

    summary: Summary
    object_identification: list[Request] = Field(min_length=1, max_length=2)
    text_and_audio: list[Request] = Field(min_length=1, max_length=2)
    procedural_guidance: list[Request] = Field(min_length=1, max_length=2)
    decision_support: list[Request] = Field(min_length=1, max_length=2)
    contextual_memory: list[Request] = Field(min_length=1, max_length=2)
    computation: list[Request] = Field(min_length=1, max_length=2)
    task_assistance: list[Request] = Field(min_length=1, max_length=2)
    recommendation: list[Request] = Field(min_length=1, max_length=2)
    engaging_interaction: list[Request] = Field(min_length=1, max_length=2)


class Candidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    """Its number in the segment's pool, 1-based in the order the requests passed the checks."""
    text: str
    """The request, as the participant would say it (it passed the text gates and the request
    checks)."""
    category: str
    """Its intent category: a key of :data:`CATEGORIES`."""
    source: str = "global"
    """The path that made it: ``global`` (the local path is not built)."""
    flags: list[str] = Field(default_factory=list)
    """What code noted on the request (``too_long``, ``not_first_person``, ``no_shared_noun``,
    ``repeats``); a flag never drops a request."""


class RecommendationRecord(BaseModel):
    """One interruptible segment's recommendations: what the generator was given, its summary,
    the candidate pool (every request, flagged) and the reranked list (every marked duplicate
    removed, ungrounded last, ids 1, 2, … in the final order)."""

    model_config = ConfigDict(extra="forbid")

    item_id: str
    """32 hex derived from the run's seed, the generator and the record's index."""
    session_id: Id
    """The input session's ``session_id``."""
    participant: Id | None
    """The session's participant; null when the input has none."""
    segment: Span
    """The interruptible segment, in seconds of the session (between ``min_segment`` and
    ``max_segment`` long)."""
    scene_context: str | None
    """The scene annotation overlapping the segment most (the earlier on a tie); null when none
    overlaps."""
    profile: str | None
    """The participant's profile from the input; null when it has none."""
    previous_summary: str | None
    """The summary written for the session's previous segment; null for its first."""
    summary: str
    """The global generator's factual summary of the segment (it passed the text gates and copies
    none of its input)."""
    candidates: list[Candidate]
    """The requests that passed the checks, the pool the reranker ordered."""
    turned_away: list[dict[str, str]]
    """Requests left out of the pool because they failed gen's shared text gates: ``text``,
    ``category``, ``reason``."""
    ranked: list[RankedCandidate]
    """The pool after the rerank: duplicates removed, ungrounded requests last, ids renumbered 1, 2,
    …"""
    removed: list[dict[str, Any]] = Field(default_factory=list)
    """Duplicates removed: ``input_id``, ``text``, ``duplicate_of`` (the id kept)."""
    rerank_reason: str | None = None
    """The reranker's one-sentence reason for its order."""
    dedup_agreement: dict[str, int] = Field(default_factory=dict)
    """Request pairs by verdict, the reranker's duplicates against the embedding's (``both``,
    ``llm_only``, ``embedding_only``, ``neither``)."""
    attempts: dict[str, int]
    """Calls per stage (global, rerank)."""


__all__ = [
    "CATEGORIES",
    "Candidate",
    "GlobalDraft",
    "Line",
    "RecommendSession",
    "RecommendationRecord",
    "Scene",
    "Seconds",
]
