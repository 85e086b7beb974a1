"""``history``: WAGIBench-style history banks (a chain of past observations per item). Not bank
items; the audit reads them (its history checks)."""

from __future__ import annotations

from gen.kinds import Kind
from gen.schemas.history import HistoryRecord

HISTORY = Kind(
    name="history",
    record=HistoryRecord,
    files=("history.jsonl",),
    source_format="history_record",
    bank=False,
    view="history",
    noun="a history record",
    help="history: past observations chained to a current one (WAGIBench's history).",
)
KINDS = (HISTORY,)
