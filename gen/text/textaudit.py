"""The text gates over a bank's visible texts (the audit's ``text`` check): every question and
option, streamed in chunks so that a bank of any size holds one chunk's tags in memory."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gen.text.gates import CONTENT_WORDS_WITHIN, Gates, Kind, could_repeat, key, run_gates
from gen.text.surface import _ACTION_FRAMES, _BELIEF_FRAMES, _GOAL_FRAMES
from gen.text.tagging import forget_since, tagged_count, warm_penn


def _first_frames(text: str, kind: Kind) -> list[str]:
    """The texts the gates of ``kind`` will tag first for ``text``."""
    body = text.strip().rstrip(".!").strip()
    frame = {
        "goal": _GOAL_FRAMES[0],
        "action": _ACTION_FRAMES[0],
        "phrase": _ACTION_FRAMES[0],
        "belief": _BELIEF_FRAMES[0],
    }.get(kind)
    if frame is None:
        return [text]
    rest = re.sub(r"^(?:To|C believes(?:\s+that)?|C)\s+", "", body)
    return [text, frame.format(rest), frame.split("{}")[0].strip()]


@dataclass
class AuditText:
    """One visible text of a bank for :func:`audit_texts`."""

    item_id: str
    field: str
    """Where it is in the item (``options[2]``, ``question``)."""
    text: str
    kind: Kind


FORM_OF_TYPE: dict[str, Kind] = {"goal": "goal", "belief": "belief", "actions": "action"}
"""Question types whose options have one of EgoToM's forms."""


def bank_texts(items: Iterable[Any]) -> list[AuditText]:
    """The visible question and options of every item of a loaded bank (:class:`schemas.mcq.MCQ`):
    options of EgoToM's question types are checked for their form, every other text as prose."""
    out = []
    for it in items:
        kind = FORM_OF_TYPE.get(it.question_type, "prose")
        if it.question:
            out.append(AuditText(it.item_id, "question", it.question, "prose"))
        for i, option in enumerate(it.options):
            out.append(AuditText(it.item_id, f"options[{i}]", option, kind))
    return out


@dataclass
class TextAudit:
    """Per gate, how many texts failed it and a few of them."""

    checked: int = 0
    failed: int = 0
    by_gate: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    """(gate, item id, field) of every text that failed, in the bank's order."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "failed": self.failed,
            "by_gate": dict(self.by_gate),
            "examples": {k: list(v) for k, v in self.examples.items()},
        }


AUDIT_CHUNK = 2048
"""Texts :func:`audit_texts` tags at once."""


def audit_texts(
    texts: Iterable[AuditText], *, language: str = "en", examples_per_gate: int = 5
) -> TextAudit:
    """Run the shared gates over a bank's visible texts (no prompt is known, so the prompt-echo
    gates that need one compare against nothing): counts per gate (the first gate a text fails)
    and up to ``examples_per_gate`` examples each (item, field, text, detail)."""
    report = TextAudit()
    ctx = Gates(language=language).context
    stream = iter(texts)
    while chunk := list(
        itertools.islice(stream, AUDIT_CHUNK)
    ):  # a bank of any size: one chunk's tags in memory
        mark = tagged_count()
        # the surface-form gate reads the Penn tags of a form's first frame, the repetition gate
        # those of a text that has a word three times (and their POS, gen.text.tagging.pos_tags)
        warm_penn(
            x
            for t in chunk
            for x in _first_frames(t.text, t.kind)[1:]
            + (
                [t.text]
                if len(key(t.text).split()) <= CONTENT_WORDS_WITHIN and could_repeat(t.text)
                else []
            )
        )
        for t in chunk:
            report.checked += 1
            failure = run_gates(t.text, replace(ctx, kind=t.kind))
            if failure is None:
                continue
            report.failed += 1
            report.by_gate[failure.gate] = report.by_gate.get(failure.gate, 0) + 1
            report.failures.append((failure.gate, t.item_id, t.field))
            shown = report.examples.setdefault(failure.gate, [])
            if len(shown) < examples_per_gate:
                shown.append(
                    {
                        "item_id": t.item_id,
                        "field": t.field,
                        "text": t.text,
                        "detail": failure.detail,
                    }
                )
        forget_since(mark)
    report.by_gate = dict(sorted(report.by_gate.items()))
    return report
