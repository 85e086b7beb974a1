"""The audit's checks as registered units, in the spirit of inspect_ai's ``@scorer``.

A check is a function ``(data: AuditData, cfg: AuditConfig) -> CheckResult`` in its own module
under ``checks/``, registered by :func:`check`::

    @check("length", order=4, title="Option-length tell",
           finds="picking the longest/shortest option beats chance",
           uses=("length_ratio", "min_items_per_test", "alpha"))
    def length(data: AuditData, cfg: AuditConfig) -> CheckResult:
        \"\"\"What the check does, as audit.md says it.\"\"\"

The registry, in ``order``, is the one source for: the default ``checks=`` list and its
validation, the ``--help`` text of ``checks``, the report's titles and "what it does" (the
function's docstring), the options each check reads (``uses``: shown with the check in audit.md),
and, through ``markdown=`` and ``plot=``, how its statistics are shown. Adding a check is one new
module under ``checks/`` and nothing else.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gen.generators.audit.stats import Tell, judge
from gen.schemas.audit import FindingRecord, Severity

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


@dataclass
class CheckResult:
    """What one check found: statistics for the report's tables, findings, and plot series."""

    key: str
    status: Literal["ran", "skipped"] = "ran"
    reason: str = ""
    """Why a check was skipped (not applicable to this input, a missing optional input)."""
    stats: dict[str, Any] = field(default_factory=dict)
    findings: list[FindingRecord] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    """Raw numbers for plots (not written to audit.json)."""
    seconds: float = 0.0


CheckFn = Callable[["AuditData", "AuditConfig"], CheckResult]
Markdown = Callable[[CheckResult], list[str]]
"""``(result) -> lines``: the check's statistics as audit.md shows them (tables, sentences)."""
Plot = Callable[[CheckResult, Path, Any], "str | None"]
"""``(result, out_dir, pyplot) -> file name``: draws the check's PNG into ``out_dir``, or None."""


@dataclass(frozen=True)
class Check:
    key: str
    order: int
    """The check's number in the report and in every finding (``check_id``); the run order."""
    title: str
    finds: str
    """One line: what a finding of this check means (``--help``, the README's table)."""
    uses: tuple[str, ...]
    """The audit options (config fields) the check reads."""
    fn: CheckFn
    doc: str
    """What the check does, from the function's docstring (audit.md)."""
    markdown: Markdown | None = None
    plot: Plot | None = None


REGISTRY: dict[str, Check] = {}
"""Every registered check by key, always in ``order``."""


def check(
    key: str,
    *,
    order: int,
    title: str,
    finds: str,
    uses: tuple[str, ...] = (),
    markdown: Markdown | None = None,
    plot: Plot | None = None,
) -> Callable[[CheckFn], CheckFn]:
    """Register a check (see the module docstring). ``order`` is its number, unique."""

    def register(fn: CheckFn) -> CheckFn:
        old = REGISTRY.get(key)
        if old is not None and (old.fn.__module__, old.fn.__qualname__) != (
            fn.__module__,
            fn.__qualname__,
        ):
            raise ValueError(f"audit check {key!r} is registered twice")
        taken = {c.order: c.key for c in REGISTRY.values() if c.key != key}
        if order in taken:
            raise ValueError(f"audit checks {taken[order]!r} and {key!r} both have order={order}")
        doc = " ".join(inspect.cleandoc(fn.__doc__ or "").split())
        if not doc:
            raise ValueError(f"audit check {key!r} needs a docstring (audit.md shows it)")
        REGISTRY[key] = Check(key, order, title, finds, tuple(uses), fn, doc, markdown, plot)
        ordered = sorted(REGISTRY.values(), key=lambda c: c.order)
        REGISTRY.clear()
        REGISTRY.update((c.key, c) for c in ordered)
        return fn

    return register


def check_keys() -> list[str]:
    """Every check's key, in order (the default ``checks=``)."""
    return list(REGISTRY)


def checks_help() -> str:
    """The ``--help`` text of ``checks=``: every check with what it finds."""
    return (
        "Checks to run, by key (default: all, in this order). "
        + "; ".join(f"{c.key}: {c.finds}" for c in REGISTRY.values())
        + "."
    )


def validate_uses(fields: dict[str, Any]) -> None:
    """Every option a check says it uses is a field of the config (checked at import)."""
    for c in REGISTRY.values():
        unknown = [u for u in c.uses if u not in fields]
        if unknown:
            raise ValueError(f"audit check {c.key!r} uses unknown option(s) {unknown}")


def finding(key: str, kind: str, severity: Severity, what: str, **kw: Any) -> FindingRecord:
    """A finding of check ``key`` (its number from the registry)."""
    return FindingRecord(
        check=key, check_id=REGISTRY[key].order, kind=kind, severity=severity, what=what, **kw
    )


TELL_OPTIONS = ("alpha", "max_effect", "warn_p", "power")
"""The options every tell check reads through :func:`judged` (its ``uses=`` includes them)."""


def judged(tells: list[Tell], cfg: AuditConfig) -> list[Tell]:
    """A check's family of tell tests, judged by the audit's rules (:func:`stats.judge`)."""
    return judge(
        tells, alpha=cfg.alpha, max_effect=cfg.max_effect, warn_p=cfg.warn_p, power=cfg.power
    )


def tell_finding(key: str, kind: str, tell: Tell, what: str, **kw: Any) -> FindingRecord:
    """The finding of a judged tell (it has a severity): ``what``, its numbers, the rule that
    fired."""
    assert tell.severity is not None
    numbers = {**kw.pop("numbers", {}), **tell.numbers()}
    return finding(
        key,
        kind,
        tell.severity,
        f"{what} {tell.summary()}; {tell.rule}: {tell.why}",
        numbers=numbers,
        **kw,
    )
