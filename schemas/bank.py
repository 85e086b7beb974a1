"""Records of ``bank``: the items an ``add`` added or an ``export`` wrote, the files a
``verify`` checked, and the review summary an ``export`` reports."""

from __future__ import annotations

from typing import Any, Literal

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
    items: int = Field(ge=0)
    by_question_type: dict[str, int]


class LockToolkit(BaseModel):
    """The toolkit that wrote a lock."""

    model_config = ConfigDict(extra="allow", strict=True)
    version: str
    git: dict[str, Any] | None = None


class LockHistory(BaseModel):
    """One release in a lock's ``history``."""

    model_config = ConfigDict(extra="allow", strict=True)
    version: int
    label: str
    created_at: str
    added: dict[str, int] = {}
    audit: dict[str, Any] | None = None
    lock_sha256: str | None = None


class Lock(BaseModel):
    """A version's ``MANIFEST.lock.json`` (``generators.bank.add.make_lock`` writes it), in the
    shape every reader needs: ``verify``, ``export`` and the release formats (dataset card,
    Croissant). ``verify`` checks it before anything reads it, so a lock edited into valid JSON of
    another shape is a ``bad_lock`` problem naming the field, and export refuses the bank, rather
    than a crash. Fields no reader needs are free."""

    model_config = ConfigDict(extra="allow", strict=True)
    format: str
    schema_revision: int
    version: int
    label: str
    created_at: str
    toolkit: LockToolkit
    item_id: str
    items: int = Field(ge=0)
    counts: dict[str, LockCount]
    files: dict[str, str]
    prompts: dict[str, list[str]] = {}
    sources: list[dict[str, Any]] = []
    history: list[LockHistory]
