"""Records of ``audit``: one finding per line of ``audit.jsonl``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Severity = Literal["info", "warning", "error"]
"""``error``: a defect the bank should not ship with (an answer not among the options, a leaked
answer, a large tell, a changed output file); ``warning``: for a person to look at (a distractor
nearly identical to the answer, a near-duplicate item); ``info``: context."""
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


class FindingRecord(BaseModel):
    """One audit finding: a line of ``audit.jsonl``."""

    check: str
    """The check's key (``structure``, ``leakage``, ``position``…)."""
    check_id: int
    """The check's number (its ``order=`` in the registry), as in the report."""
    kind: str
    """A typed name of what was found (``answer_in_visible``, ``position_bias``…)."""
    severity: Severity
    """``error``, ``warning`` or ``info`` (see :data:`Severity`); ``fail_on=`` sets which exit 1."""
    what: str
    """One sentence a person can act on."""
    items: list[str] = Field(default_factory=list)
    """Item ids (bundle ids for ``digital``; empty for file-level findings)."""
    fields: list[str] = Field(default_factory=list)
    """Field paths: ``visible.context``, ``options[2]``, ``options[answer]`` (the answer option of
    each listed item), ``apps.Messaging.conversations[0].messages[1].timestamp``, ``outputs.x``."""
    numbers: dict[str, Any] = Field(default_factory=dict)
    """The finding's figures by name (a tell's ``accuracy``, ``chance``, ``effect``, ``p``,
    ``p_holm``, ``n``…; a duplicate's ``cosine``); ``{}`` when it has none."""
    bank: str | None = None
    """The bank file or run folder it concerns, when the audit read several."""
