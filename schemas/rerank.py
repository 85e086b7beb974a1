"""Rerank + semantic dedup of candidate pools (EgoIntrospect's proactive pipeline, stage 7): the
input pools ``gen rerank`` reads (:class:`Pool`), the reranker's structured answer
(:class:`RerankDraft`), and the record code writes once the answer is an exact permutation of
the pool (:class:`RerankRecord`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model, field_validator
from pydantic.json_schema import JsonValue

from gen.schemas import plain_text
from gen.schemas.candidates import TimedLine

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
ReasonText = Annotated[str, Field(pattern=plain_text(300))]


class PoolCandidate(BaseModel):
    """One candidate of a pool: its text, and optionally an id, an intent category and the path
    that produced it (EgoIntrospect: ``global`` or ``local``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: Text
    id: Name | None = None
    """Its id in the input (default: its 1-based position)."""
    category: Name | None = None
    """Its intent category, when known."""
    source: Name | None = None
    """The path that produced it (EgoIntrospect: ``global`` or ``local``), when known."""


class Pool(BaseModel):
    """One input row of ``gen rerank``: a pool of candidates with the context they are judged by."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool_id: Name
    context: list[TimedLine] | Text = Field(default_factory=list)
    """Timed lines or free text (scene context, participant profile, previous summary…)."""
    candidates: list[PoolCandidate] = Field(min_length=1, max_length=200)

    @field_validator("candidates", mode="before")
    @classmethod
    def _plain(cls, v: Any) -> Any:
        return [{"text": x} if isinstance(x, str) else x for x in v] if isinstance(v, list) else v


# --------------------------------------------------------------------------- the reranker's answer


class RankedDraft(BaseModel):
    id: int
    """The candidate's number in the prompt (1-based)."""
    text: str
    """Its text, copied unchanged."""
    duplicate_of: int | None
    """The number of a candidate it means the same as, or null."""
    grounded: bool
    """False: the context does not support it (hallucinated)."""


class RerankDraft(BaseModel):
    """The whole pool from most to least appropriate, each candidate once, plus a short reason."""

    ranking: list[RankedDraft]
    reason: ReasonText


@lru_cache(maxsize=256)
def rerank_draft(texts: tuple[str, ...]) -> type[RerankDraft]:
    """:class:`RerankDraft` for a pool of these texts. In the JSON schema only: ``ranking`` has
    exactly one entry per candidate, each entry is one of the candidates (its number and its text
    together) and ``duplicate_of`` another candidate's number — a grammar-constrained backend can
    then still drop or repeat a candidate but not rewrite one. Pydantic enforces none of it: code
    validates every answer (:func:`generators.rerank.permutation_problems`), whatever the
    backend."""
    ids = list(range(1, len(texts) + 1))

    def dup(i: int) -> dict[str, Any]:
        others = [j for j in ids if j != i]
        return {"anyOf": [{"enum": others}, {"type": "null"}]} if others else {"type": "null"}

    entries: list[JsonValue] = [
        {
            "type": "object",
            "properties": {
                "id": {"const": i},
                "text": {"const": t},
                "duplicate_of": dup(i),
                "grounded": {"type": "boolean"},
            },
            "required": ["id", "text", "duplicate_of", "grounded"],
        }
        for i, t in zip(ids, texts, strict=True)
    ]
    return create_model(
        "RerankDraft",
        __base__=RerankDraft,
        ranking=(
            list[RankedDraft],
            Field(
                json_schema_extra={
                    "items": {"anyOf": entries},
                    "minItems": len(texts),
                    "maxItems": len(texts),
                }
            ),
        ),
    )


# --------------------------------------------------------------------------- records


class RankedCandidate(BaseModel):
    id: int
    """The new id: 1, 2, … in the final order."""
    input_id: str
    """Its id in the input pool."""
    text: str
    """The candidate's text, as in the input."""
    category: str | None = None
    """Its intent category from the input; null when it had none."""
    source: str | None = None
    """The path that produced it from the input (``global``, ``local``); null when it had none."""
    grounded: bool
    """The reranker found it supported by the context; ungrounded candidates are ranked last."""


class RerankRecord(BaseModel):
    """One reranked pool: the kept candidates in order (ungrounded last), the semantic duplicates
    removed, the reranker's reason, and the embedding dedup that ran beside it."""

    pool_id: str
    """The input pool's ``pool_id``."""
    ranked: list[RankedCandidate]
    """The kept candidates in the final order (grounded first, each part in the reranker's
    order)."""
    removed: list[dict[str, Any]]
    """Semantic duplicates removed: ``input_id``, ``text``, ``duplicate_of`` (the input id kept)."""
    reason: str
    """The reranker's short reason for its order (at most 300 characters)."""
    attempts: int
    """Structured calls it took (1 = the first answer was an exact permutation)."""
    order: list[str]
    """The reranker's order of every input id, before duplicates were removed."""
    embedding_duplicates: list[list[str]]
    """Pairs of input ids at or above ``dedup_similarity`` cosine under the embedder."""
    unconfirmed_duplicates: list[list[str]] = Field(default_factory=list)
    """Duplicates the reranker called that the embedder does not confirm (below
    ``confirm_similarity``), kept: ``[candidate, the one it was called a duplicate of]``."""
    agreement: dict[str, int]
    """Candidate pairs by verdict: ``both``, ``llm_only``, ``embedding_only``, ``neither``."""
