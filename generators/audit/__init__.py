"""Leakage and validity audits for any MCQ or scenario bank, or a digital run: ``python -m gen
audit``.

The checks are registered units (:mod:`generators.audit.registry`), one module each under
``checks/``. One record index per check (``checks=``, every registered check by default): index i
runs check i and yields its findings, so ``audit.jsonl`` holds one line per finding and the
manifest's ``indices_done`` equals the number of checks. After the last check the report is
written (:mod:`generators.audit.report`): ``audit.md`` (tables and PNG plots), ``audit.json``
(statistics, thresholds, findings), and the exit code, one rule: 1 when a finding of at least
``fail_on`` severity exists (default ``error``: warnings and info are listed and exit 0), 0
otherwise, 2 for input errors.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field, model_validator

from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.generators.audit import checks as _checks  # noqa: F401  (registers every check)
from gen.generators.audit.data import AuditData, load_inputs
from gen.generators.audit.items import Follower, Items
from gen.generators.audit.registry import (
    REGISTRY,
    CheckResult,
    check_keys,
    checks_help,
    validate_uses,
)
from gen.generators.audit.report import write_report
from gen.schemas.audit import FindingRecord
from gen.text.gates import Language

__all__ = ["AuditConfig", "AuditData", "CheckResult", "audit", "plan"]


class AuditConfig(CommonConfig):
    roles: str | None = None
    """Roles file (YAML/JSON) for a generic JSONL bank: id, visible, privileged, options, answer…"""
    against: str | None = None
    """A second bank to look for duplicates of this bank's items in (train vs test, v1 vs v2)."""
    against_roles: str | None = None
    """Roles file for against= when it is a generic JSONL bank (default: roles=)."""
    nocontext: str | None = None
    """A nocontext run folder (or its nocontext.jsonl) to summarise blind solvability from
    (default: input= itself when it is a nocontext run)."""
    judge: str | None = None
    """A judge run of kind distractor_validity (or its judge.jsonl): items whose wrong option a
    judge scored at least as high as the answer."""
    judge_severity: Literal["error", "warning", "info"] = "warning"
    """Severity of a flagged item (warning: for a person to look at, judges are noisy; error makes
    bank add refuse the batch at its default fail_on=error)."""
    language: Language = "en"
    """The language the text check expects questions and options in (the text gates' language
    gate; an ISO 639-1 code)."""
    checks: list[str] = Field(default_factory=check_keys, description=checks_help())
    fail_on: Literal["info", "warning", "error", "never"] = "error"
    """Exit code 1 when a finding of at least this severity exists (default error: an error exits
    1, warnings and info are listed and exit 0; never: always 0). Bad input exits 2."""
    allow_empty: bool = False
    """Audit an input with zero items; otherwise that is an input error (exit 2): an audit of
    nothing must not pass a CI gate."""
    alpha: float = Field(0.01, gt=0, lt=1)
    """Family-wise significance level of a check's tell tests, Holm-corrected over that check's
    tests (one per question type; length's longest and shortest, blind's models count apart). An
    error needs the Holm-adjusted p below alpha and an effect above max_effect (0.01: a
    conventional strict level, a clean bank fails a check by chance ~1 audit in 100)."""
    max_effect: float = Field(5.0, ge=0, le=100)
    """The largest tell the bank may have, in points of accuracy above chance (the project's
    validity goal: a shortcut gains at most 5 points). Larger and significant: error; its 95 %
    Wilson interval above it, or larger with p < warn_p: warning; significant but smaller: info."""
    warn_p: float = Field(0.05, gt=0, lt=1)
    """Uncorrected p-value below which a tell larger than max_effect is a warning (the usual 5 %
    level: a small bank cannot reach alpha after correction unless its tell is huge)."""
    power: float = Field(0.8, gt=0, lt=1)
    """Probability for the power line: the smallest tell that gives an error this often at the
    bank's size (80 %, the usual design value), at the strictest Holm level alpha/m."""
    min_items_per_test: int = Field(20, ge=2)
    """Fewest items of a question type for the position, length and context-overlap tests
    (position also needs 5 per option, the usual chi-square rule)."""
    leak_ngram: int = Field(5, ge=2, le=20)
    """Word n-gram size for partial leakage: 5 words is longer than the shared phrases of a
    domain ("picks up the cup") and shorter than a copied clause."""
    leak_containment: float = Field(0.6, gt=0, le=1)
    """Share of a privileged text's n-grams found in a visible field that makes a partial leak."""
    leak_min_chars: int = Field(3, ge=1)
    """Privileged terms shorter than this (normalised) are not searched for ("cup" still is)."""
    states_containment: float = Field(0.6, gt=0, le=1)
    """Share of an option's distinctive words (those no other option of its item has) that a visible
    context must hold to state it (the leakage check's containment: most of what sets the option
    apart)."""
    context_name_share: float = Field(0.6, gt=0, le=1)
    """Share of an option's distinctive lemmas (those no other option of its item has) that one
    sentence of the visible context must hold to name the option (the leakage check's
    containment: a two-word name needs both words, three words two of them)."""
    length_ratio: float = Field(1.4, gt=1)
    """An answer more than this many times longer than every distractor, or every distractor
    this much longer than it, is flagged (EgoToM's own filter, §3)."""
    option_dup_sim: float = Field(0.94, gt=0, le=1)
    """Cosine at or above which two options of an item are near-duplicates (EgoToM's threshold,
    measured there with all-mpnet-base-v2)."""
    answer_close_sim: float = Field(0.90, gt=0, le=1)
    """Cosine at or above which a distractor may also be correct. Ours: above the 99th percentile
    of answer-distractor cosines of EgoToM's filtered bank under all-MiniLM-L6-v2 (0.87-0.89)."""
    item_dup_sim: float = Field(0.95, gt=0, le=1)
    """Near-duplicate items: cosine of question+options at least this (one reworded option
    keeps ~0.99)…"""
    context_dup_sim: float = Field(0.8, gt=0, le=1)
    """…and visible contexts sharing at least this (cosine of their word-trigram sets: a one-word
    edit of a 40-word context keeps ~0.9; EgoToM contexts of different videos reach 0.39)."""
    shortcut_folds: int = Field(5, ge=2, le=20)
    """Cross-validation folds of the choice-only classifier (items of one group share a fold)."""
    shortcut_repeats: int = Field(5, ge=3, le=50)
    """Times the folds are drawn (repeated cross-validation): an item's result is its average over
    the draws, so the verdict does not hang on one split (one draw moved a 154-item bank's
    accuracy by 2.8 points, sd). At least 3: with fewer, the tested count varies more than the
    binomial test assumes (bench/shortcut_null.py: one draw 1.26-1.49 times, p < 0.05 in 7.2 % of
    null tests)."""
    shortcut_l2: float = Field(1.0, gt=0)
    """L2 penalty of the choice-only classifier (on standardised features)."""
    shortcut_min_items: int = Field(30, ge=10)
    """Fewest items of a question type to train the choice-only classifier on."""
    shortcut_max_items: int = Field(50_000, ge=100)
    """Most items of a question type the choice-only and options-against-context classifiers are
    cross-validated on; a larger type is sampled (seeded) to this many: the accuracy is then known
    to a few tenths of a point, and only sampled items can be listed as easy."""
    shortcut_confidence: float = Field(0.8, gt=0, le=1)
    """Out-of-fold probability of the answer above which a solved item is listed as easy."""
    blind_max_correct: int = Field(2, ge=0)
    """An item answered right without context in more shuffles than this, by any model, is
    flagged (EgoToM: more than 2 of 3 shuffles)."""
    embeddings: bool = True
    """Use the embedder for similar options and near-duplicate items (false: exact checks only)."""
    workers: int = Field(2, ge=1, le=64)
    """Processes the audit works in: with more than one, the text check (spaCy's tagger over every
    option, the largest cost) runs in a process of its own beside the other checks, its chunks of
    texts tagged in this many (the findings do not depend on it; 2: the VM's cores)."""
    plots: bool = True
    """Draw the PNG plots of audit.md."""
    max_listed: int = Field(20, ge=1)
    """Findings shown per check in audit.md (audit.jsonl has all)."""

    @model_validator(mode="after")
    def _checks(self) -> AuditConfig:
        unknown = [c for c in self.checks if c not in REGISTRY]
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; choose from {check_keys()}")
        if not self.checks or len(set(self.checks)) != len(self.checks):
            raise ValueError("checks must name at least one check, each once")
        if self.num_shards != 1:
            raise ValueError("audit runs in one process (num_shards=1)")
        return self


validate_uses(AuditConfig.model_fields)


def plan(cfg: AuditConfig) -> Plan:
    """One record index per check."""
    return Plan(len(cfg.checks))


def uses(cfg: AuditConfig) -> tuple[str, ...]:
    """What the chosen checks load: the tagger for ``text``; the embedder for a check that reads
    ``embeddings`` when they are on, and the search over them for ``duplicates``."""
    embeds = cfg.embeddings and any("embeddings" in REGISTRY[c].uses for c in cfg.checks)
    return (
        *(("text",) if "text" in cfg.checks else ()),
        *(("embedder",) if embeds else ()),
        *(("search",) if embeds and "duplicates" in cfg.checks else ()),
    )


@generator(
    "audit",
    config=AuditConfig,
    records=FindingRecord,
    kind="finding",
    plan=plan,
    noun="findings",
    uses=uses,
)
def audit(cfg: AuditConfig, ctx: RunContext) -> Iterator[list[FindingRecord]]:
    """Audit an MCQ/scenario bank or a digital run; exit 1 on an error (fail_on=), warnings exit 0.

    Leakage, tells, duplicates, integrity. Exit code: 1 when a finding of at least ``fail_on``
    severity exists, 0 otherwise, 2 for bad input (:func:`generators.audit.report.fails`)."""
    indices = ctx.indices()
    chosen = [cfg.checks[i] for i in indices]
    items = Items()
    aside = {
        key: _Aside(key, cfg, items=items) for key in FOLLOW if cfg.workers > 1 and key in chosen
    }
    results: list[CheckResult] = []
    try:
        data = load_inputs(cfg, ctx, items)
        data.items.seal()  # the followers' end of the items (an input without them has none)
        if cfg.workers > 1 and data.items:
            aside |= {key: _Aside(key, cfg, data=data) for key in LOADED if key in chosen}
        # this process's checks first, in order, while the aside ones run; then all in order
        own = {key: _timed(key, data, cfg) for key in chosen if key not in aside}
        for key in chosen:
            res = own.pop(key) if key in own else aside.pop(key).result()
            results.append(res)
            yield list(res.findings)
    finally:
        for left in aside.values():
            left.stop()
    write_report(cfg, ctx, data, results)


FOLLOW = ("text",)
"""Checks that run in a process of their own when ``workers`` > 1, started before the input is
read: they read only the items, as the reader writes them (the text check reads their questions
and options and is the largest cost)."""
LOADED = ("leakage", "shortcut")
"""Checks that run in a process of their own beside the others when ``workers`` > 1, started once
the input is read (the next largest costs; what they compute is theirs alone)."""


def _timed(key: str, data: AuditData, cfg: AuditConfig) -> CheckResult:
    t0 = time.perf_counter()
    res = REGISTRY[key].fn(data, cfg)
    res.seconds = round(time.perf_counter() - t0, 3)
    return res


class _Aside:
    """Check ``key`` running in a forked process: with ``data``, forked once the input is read
    (it reads the same spill file); with ``items``, forked before, walking the items as the reader
    writes them to their spill file (:class:`~generators.audit.items.Follower`)."""

    def __init__(
        self,
        key: str,
        cfg: AuditConfig,
        *,
        data: AuditData | None = None,
        items: Items | None = None,
    ) -> None:
        mp = multiprocessing.get_context("fork")
        self.key = key
        self._recv, send = mp.Pipe(duplex=False)
        self._queue: Any = None
        if items is not None:
            self._queue = queue = mp.Queue()
            items.feed(queue)

        def run() -> None:
            try:
                if data is not None:
                    seen = data
                else:
                    assert items is not None
                    seen = AuditData(items=Follower(items, queue), workers=cfg.workers)
                out: tuple[str, Any] = ("ok", _timed(key, seen, cfg))
            except BaseException as e:  # noqa: BLE001 - handed to the parent, which raises it
                out = ("error", e)
            send.send(out)

        self._proc = mp.Process(target=run, name=f"audit-{key}")
        self._proc.start()
        send.close()

    def result(self) -> CheckResult:
        """Wait for the check's result (an error in it is raised here)."""
        try:
            status, value = self._recv.recv()
        except EOFError:
            self._proc.join()
            raise RuntimeError(
                f"audit: the {self.key} check's process ended without a result "
                f"(exit code {self._proc.exitcode})"
            ) from None
        finally:
            self._recv.close()
        self._proc.join()
        if status == "error":
            raise value
        return value  # type: ignore[no-any-return]

    def stop(self) -> None:
        """End the process if it still runs (the audit stopped before taking its result)."""
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join()
        if self._queue is not None:
            self._queue.cancel_join_thread()  # what it did not read is dropped, not waited on
