"""Records of ``bank``: the items an ``add`` added or an ``export`` wrote, the files a
``verify`` checked, and the review summary an ``export`` reports."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BankItemRecord(BaseModel):
    """One item an ``add`` added or an ``export`` wrote (a line of ``bank.jsonl``)."""

    item_id: str
    kind: str
    question_type: str
    status: Literal["added", "exported"]
    version: str
    source_item_id: str
    where: str
    """``file:line`` of the input (add) or the exported file (export)."""


class VerifyRecord(BaseModel):
    """One file of one version whose SHA-256 and contents check (a line of ``bank.jsonl``)."""

    version: str
    file: str
    sha256: str
    status: Literal["ok"] = "ok"


class ReviewSummary(BaseModel):
    """``review/summary.json`` of a bank version folder, as ``bank export`` reads it into the
    dataset card and the Croissant file (the minimal shape; other keys are ignored)."""

    model_config = ConfigDict(extra="ignore")

    items_reviewed: int = Field(ge=0)
    """How many of the version's items a reviewer judged."""
    by_verdict: dict[str, int]
    """Items per verdict (``accept``, ``fix``, ``reject``…)."""
    reviewers: int | None = Field(default=None, ge=1)
    """How many reviewers took part."""
    protocol: str | None = None
    """How the review was done, in a sentence."""


class LockCount(BaseModel):
    """A kind's entry under a lock's ``counts``."""

    model_config = ConfigDict(extra="allow", strict=True)
    items: int | None = None


class LockHistory(BaseModel):
    """One release in a lock's ``history``."""

    model_config = ConfigDict(extra="allow", strict=True)
    version: int
    added: dict[str, int] | None = None
    lock_sha256: str | None = None


class LockShape(BaseModel):
    """What ``bank verify`` reads of a version's ``MANIFEST.lock.json``, in the shape it must have
    (other fields are free): a lock edited into valid JSON of another shape is a ``bad_lock``
    problem naming the field, not a crash."""

    model_config = ConfigDict(extra="allow", strict=True)
    files: dict[str, str] | None = None
    counts: dict[str, LockCount] | None = None
    history: list[LockHistory] | None = None
