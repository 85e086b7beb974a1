"""Records of ``bank``: the items an ``add`` added or an ``export`` wrote, and the files a
``verify`` checked."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


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
