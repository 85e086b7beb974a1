"""Records of ``bank``: the items an ``add`` added or an ``export`` wrote, the files a
``verify`` checked, and the review summary an ``export`` reports."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from gen.schemas.review import REVIEWER


class BankItemRecord(BaseModel):
    """One item an ``add`` added or an ``export`` wrote (a line of ``bank.jsonl``)."""

    item_id: str
    """The item's id in the bank: a 32-hex hash of what the candidate sees (order-free) and the
    answer, so the same item from two runs has one id."""
    kind: str
    """The bank kind it is filed under: ``tom``, ``distractors``, ``mcq``, ``digital`` or
    ``scenarios``."""
    question_type: str
    """The item's question type (a bundle's ``cue:<App>`` or ``uncued``), by which counts are
    kept."""
    status: Literal["added", "exported"]
    """``added`` by ``bank add``, ``exported`` by ``bank export``."""
    version: str
    """The bank version it went into or came from, as ``v0001``."""
    source_item_id: str
    """The item's id in its input (``item_id``, a bundle's ``bundle_id``, a scenario's
    ``scenario_id``)."""
    where: str
    """``file:line`` of the input (add) or the exported file (export)."""


class VerifyRecord(BaseModel):
    """One file of one version whose SHA-256 and contents check (a line of ``bank.jsonl``)."""

    version: str
    """The version checked, as ``v0001``."""
    file: str
    """The file's path inside the version folder, as its lock lists it."""
    sha256: str
    """The file's SHA-256 (hex), equal to the lock's."""
    status: Literal["ok"] = "ok"
    """Always ``ok``: a file that fails a check is a reject naming the problem instead."""


VERDICT = r"^[A-Za-z0-9_][A-Za-z0-9_ -]{0,39}$"
"""A verdict's name in a review summary (it is printed in the dataset card)."""


class ReviewSummary(BaseModel):
    """``review/summary.json`` of a bank version folder, as ``bank export`` reads it into the
    dataset card and the Croissant file (the minimal shape; other keys are ignored). ``bank
    verify`` checks it in this shape, so verify, add and export agree on one."""

    model_config = ConfigDict(extra="ignore")

    items_reviewed: int = Field(ge=0)
    """How many of the version's items a reviewer judged."""
    by_verdict: dict[
        Annotated[str, StringConstraints(pattern=VERDICT)], Annotated[int, Field(ge=0)]
    ]
    """Items per verdict (``accept``, ``fix``, ``reject``…); they add up to ``items_reviewed``."""
    reviewers: int | None = Field(default=None, ge=1)
    """How many reviewers took part."""
    protocol: str | None = Field(default=None, max_length=2000)
    """How the review was done, in a sentence."""
    reviewer_names: list[Annotated[str, StringConstraints(pattern=REVIEWER.pattern)]] = []
    """Who reviewed (``bank add require_review=k`` keeps them, so later versions count them
    once)."""

    @model_validator(mode="after")
    def _adds_up(self) -> ReviewSummary:
        if sum(self.by_verdict.values()) != self.items_reviewed:
            raise ValueError(
                f"by_verdict adds up to {sum(self.by_verdict.values())}, "
                f"items_reviewed is {self.items_reviewed}"
            )
        return self


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
    message: str | None = None
    source: str | None = None
    input: str | None = None
    added: dict[str, int] = {}
    refused: dict[str, int] = {}
    audit: dict[str, Any] | None = None
    lock_sha256: str | None = None


class LockModel(BaseModel):
    """A model a source run used (``llm``, ``embedder``)."""

    model_config = ConfigDict(extra="allow", strict=True)
    backend: str | None = None
    model: str | None = None
    model_sha256: str | None = None
    model_path: str | None = None


class LockRun(BaseModel):
    """A run in a lock's ``sources`` or in a source's ``upstream`` (what the card's provenance and
    Croissant's PROV-O read)."""

    model_config = ConfigDict(extra="allow", strict=True)
    generator: str | None = None
    toolkit_version: str | None = None
    llm: LockModel | None = None
    embedder: LockModel | None = None
    prompts: dict[str, str] = {}


class LockSource(LockRun):
    """One source run in a lock's ``sources``: the batch a version added."""

    source: str
    version: int
    items_added: int = Field(ge=0)
    input: str
    upstream: list[LockRun] = []


class Lock(BaseModel):
    """A version's ``MANIFEST.lock.json`` (``generators.bank.add.make_lock`` writes it), in the
    shape every reader needs: ``verify``, ``export`` and the release formats (dataset card,
    Croissant). ``verify`` checks it before anything reads it, so a lock edited into valid JSON of
    another shape is a ``bad_lock`` problem naming the field, and export refuses the bank, rather
    than a crash. Fields no reader needs are free."""

    model_config = ConfigDict(extra="allow", strict=True)
    format: str
    schema_revision: int
    bank: str
    version: int
    label: str
    created_at: str
    toolkit: LockToolkit
    item_id: str
    items: int = Field(ge=0)
    counts: dict[str, LockCount]
    files: dict[str, str]
    prompts: dict[str, list[str]] = {}
    sources: list[LockSource] = []
    history: list[LockHistory]


class SourceManifest(BaseModel):
    """The fields of a run's ``manifest.json`` that ``bank add`` records as a batch's provenance
    (other keys are ignored; one of the wrong type is an input error naming it)."""

    model_config = ConfigDict(extra="ignore")
    generator: str | None = None
    toolkit_version: str | None = None
    git: dict[str, Any] | None = None
    seed: int | None = None
    started_at: str | None = None
    llm: LockModel | None = None
    embedder: LockModel | None = None
    prompts: dict[str, str] = {}
    inputs: dict[str, Any] = {}
    """Input files the run read (path -> SHA-256); their run folders are the batch's upstream."""
