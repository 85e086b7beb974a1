"""The text gates over a bank's visible texts (the audit's ``text`` check): every question and
option, streamed in chunks so that a bank of any size holds one chunk's tags in memory."""

from __future__ import annotations

import itertools
import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gen.text.gates import (
    CONTENT_WORDS_WITHIN,
    LANGUAGE_MIN_PROB,
    Gates,
    Kind,
    could_repeat,
    key,
    run_gates,
)
from gen.text.language import warm_language
from gen.text.surface import carrier
from gen.text.tagging import forget_since, head_read, tagged_count, warm_heads, warm_penn


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
MEMO = 1 << 18
"""Distinct texts whose verdicts :func:`audit_texts` keeps (cleared when full): a bank repeats its
questions on every item and may repeat options; each distinct text is tagged and gated once."""
AHEAD = 2
"""Chunks in flight per worker process."""

Verdict = tuple[str, str] | None
"""The first gate a text fails and why, or None."""


def _verdicts(texts: list[tuple[str, Kind]], language: str) -> list[Verdict]:
    """The gates over some distinct texts, their tags read in one batch and forgotten after."""
    ctx = Gates(language=language).context
    mark = tagged_count()
    # the surface-form gate reads the first Penn tags of a form's carrier sentence, the repetition
    # gate all of a text that has a word three times (and their POS, gen.text.tagging.pos_tags)
    warm_heads(c for text, kind in texts if (c := carrier(text, kind)) is not None)
    warm_penn(
        text
        for text, _ in texts
        if len(key(text).split()) <= CONTENT_WORDS_WITHIN and could_repeat(text)
    )
    warm_language((text for text, _ in texts), language, LANGUAGE_MIN_PROB)
    out: list[Verdict] = []
    for text, kind in texts:
        failure = run_gates(text, replace(ctx, kind=kind))
        out.append(None if failure is None else (failure.gate, failure.detail))
    forget_since(mark)
    return out


def _by_head(texts: list[tuple[str, Kind]], workers: int) -> list[list[tuple[str, Kind]]]:
    """``texts`` parted among ``workers`` by the head the surface-form gate tags of each (the text
    itself when it has none): each head is tagged by one worker and kept in its cache, not tagged
    again by every worker that meets it."""
    parts: list[list[tuple[str, Kind]]] = [[] for _ in range(workers)]
    for text, kind in texts:
        c = carrier(text, kind)
        read = head_read(*c) if c is not None else text
        parts[zlib.crc32(read.encode()) % workers].append((text, kind))
    return parts


class _Parts:
    """The verdicts of a chunk's parts, each gated by a worker, in the parts' order."""

    def __init__(self, jobs: list[Any]) -> None:
        self.jobs = jobs

    def get(self) -> list[Verdict]:
        return [v for job in self.jobs for v in job.get()]


class _Inline:
    """:func:`_verdicts` run when asked, in this process (the pool's interface)."""

    def __init__(self, texts: list[tuple[str, Kind]], language: str) -> None:
        self.args = texts, language

    def get(self) -> list[Verdict]:
        return _verdicts(*self.args)


def audit_texts(
    texts: Iterable[AuditText],
    *,
    language: str = "en",
    examples_per_gate: int = 5,
    workers: int = 1,
) -> TextAudit:
    """Run the shared gates over a bank's visible texts (no prompt is known, so the prompt-echo
    gates that need one compare against nothing): counts per gate (the first gate a text fails)
    and up to ``examples_per_gate`` examples each (item, field, text, detail). Each distinct text
    (and kind) is gated once; ``workers`` > 1 tags and gates chunks in that many forked processes,
    the verdicts taken in the bank's order."""
    report = TextAudit()
    memo: dict[tuple[str, Kind], Verdict] = {}
    stream = iter(texts)
    pool = None
    if workers > 1:
        import multiprocessing

        from gen.text.language import langid_arrays
        from gen.text.tagging import tagger

        tagger()  # loaded once, before the fork: the workers share its pages
        langid_arrays()
        pool = multiprocessing.get_context("fork").Pool(workers)
    inflight: deque[tuple[list[AuditText], list[tuple[str, Kind]], Any]] = deque()
    sent: set[tuple[str, Kind]] = set()
    try:
        while True:
            while len(inflight) < (AHEAD * workers if pool is not None else 1):
                chunk = list(itertools.islice(stream, AUDIT_CHUNK))
                if not chunk:
                    break
                todo = list(
                    dict.fromkeys(
                        k for t in chunk if (k := (t.text, t.kind)) not in memo and k not in sent
                    )
                )
                sent.update(todo)
                job: Any
                if pool is not None:
                    parts = _by_head(todo, workers)
                    todo = [t for part in parts for t in part]
                    job = _Parts([pool.apply_async(_verdicts, (p, language)) for p in parts if p])
                else:
                    job = _Inline(todo, language)
                inflight.append((chunk, todo, job))
            if not inflight:
                break
            chunk, todo, job = inflight.popleft()
            if len(memo) >= MEMO:
                memo.clear()
            memo.update(zip(todo, job.get(), strict=True))
            sent.difference_update(todo)
            for t in chunk:
                k = (t.text, t.kind)
                if k not in memo:  # its verdict was dropped with a full memo: gate it again
                    memo[k] = _verdicts([k], language)[0]
                _count(report, t, memo[k], examples_per_gate)
    finally:
        if pool is not None:
            pool.terminate()
    report.by_gate = dict(sorted(report.by_gate.items()))
    return report


def _count(report: TextAudit, t: AuditText, verdict: Verdict, examples_per_gate: int) -> None:
    report.checked += 1
    if verdict is None:
        return
    gate, detail = verdict
    report.failed += 1
    report.by_gate[gate] = report.by_gate.get(gate, 0) + 1
    report.failures.append((gate, t.item_id, t.field))
    shown = report.examples.setdefault(gate, [])
    if len(shown) < examples_per_gate:
        shown.append({"item_id": t.item_id, "field": t.field, "text": t.text, "detail": detail})
