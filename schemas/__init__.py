"""Schemas of every record the toolkit writes. Output models end in Record/Bundle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

if TYPE_CHECKING:
    from gen.errors import LLMOutputError
    from gen.llm.attempts import AttemptFailure

Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]


def plain_text(hi: int, lo: int = 1) -> str:
    """The pattern of a string of ``lo``..``hi`` characters without control characters, quotes or
    backslashes (a pattern: llama.cpp's grammar for a plain string lets a raw newline into the
    JSON). A pattern, not a type, so the capped types are written as aliases a checker reads."""
    return rf'^[^\x00-\x1f"\\]{{{lo},{hi}}}$'


class Reject(BaseModel):
    """A record that was not produced, and why. accepted + rejected = requested."""

    model_config = ConfigDict(extra="forbid")

    record_id: str
    """The id the record would have had (a bundle or item id), or the input's id it concerns."""
    index: int
    """The run index it was made for (0-based, one of ``ctx.indices()``: its seeds derive from
    it)."""
    stage: str
    """Where it failed (for example ``bio``, ``app.Calendar``, ``validate``)."""
    reason: str
    """A typed reason: truncated, invalid_output, backend_error, contradiction, too_few_items…"""
    detail: str = ""
    """One line on what went wrong (the failed check's numbers, the parse error); empty when the
    reason says it all."""
    raw: str | None = None
    """The last raw LLM output, when there was one."""

    @classmethod
    def from_failure(
        cls,
        failure: LLMOutputError | AttemptFailure,
        *,
        record_id: str,
        index: int,
        stage: str | None = None,
        detail: str | None = None,
    ) -> Reject:
        """The reject for a record whose stage gave nothing usable: the failure's typed reason,
        its detail and the model's raw output.

        Args:
            failure: the model's failure (``LLMOutputError``) or the attempt loop's last one
                (``AttemptFailure``, which names its stage).
            record_id: the record that was not produced.
            index: its index in the run.
            stage: where it failed; defaults to the failure's own stage (an ``AttemptFailure``'s).
            detail: the reject's detail when it should say more than the failure's (``None``: the
                failure's detail).
        """
        where = stage if stage is not None else getattr(failure, "stage", None)
        if where is None:
            raise TypeError("Reject.from_failure needs a stage for a failure that names none")
        return cls(
            record_id=record_id,
            index=index,
            stage=where,
            reason=failure.reason,
            detail=failure.detail if detail is None else detail,
            raw=failure.raw,
        )
