"""What a release publishes about a version, recomputed from the version's files: the one check
``bank verify`` runs on every version, ``bank add`` on the bank it builds on and on the version it
staged, and ``bank export`` before it writes a card (:func:`value_problems`, called by
:func:`generators.bank.verify.check_version`).

Every lock value an export publishes is either recomputed from the version's files or anchored:

* recomputed: ``items``, ``counts`` (items and question types per kind), ``label``, the newest
  history entry's additions per kind, its date (the lock's ``created_at``), each source's version,
  size and hash (against the rows' ``added_in`` and ``source`` columns), the prompt hashes (from
  the sources), and the newest audit summary (from ``audit/audit.json``);
* anchored: the history and sources up to the version before equal that version's lock (itself
  anchored by the SHA-256 the next lock records), and everything else of the lock but its ``files``
  (message, refused counts, models, toolkit, the bank's name) by the digest the version's
  ``CHANGELOG.md`` records (:func:`lock_digest`; ``files`` names the changelog's own hash, and is
  checked against the files themselves).

So an edit of the newest lock alone is caught. A consistent rewrite of the lock *and* the files
it hashes can only be caught against the lock's SHA-256 kept outside the bank (``bank verify``
prints it). ``review/summary.json`` is checked in the shape export reads it and against the
version's item count, and the bank's name (it reaches every card and task file) must be plain.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gen.banks.store import CHANGELOG, LOCK, label, read_json
from gen.errors import GenError
from gen.kinds import canonical
from gen.readers import validated
from gen.schemas.bank import ReviewSummary

BANK_NAME = re.compile(r"^[^\x00-\x1f\x7f<>&`|\\/]{1,100}$")
"""A bank's name (its folder's name when it was made): no markup, code-span, table, path or
control character, since it goes into every card, Croissant file and task file of a release
(where it is escaped or made an identifier as well)."""
CREATED_AT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)$")
DIGEST = re.compile(r"^- lock digest of (v\d{4,}): ([0-9a-f]{64})\b", re.MULTILINE)
REVIEW = "review/summary.json"


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a bank's name, or None."""
    if (
        isinstance(name, str)
        and BANK_NAME.match(name)
        and name == name.strip()
        and name not in (".", "..")
    ):
        return None
    return (
        f"the bank's name {str(name)[:60]!r} goes into every card and task file of a release: "
        "1-100 "
        "characters, none of < > & ` | \\ / or a control character"
    )


def prompts_of(sources: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The prompt, judge and answer templates of every source run (and the runs it read), each
    with the SHA-256 values it had, in order of first use: the lock's ``prompts``."""
    prompts: dict[str, list[str]] = {}
    for s in sources:
        for entry in [s, *(s.get("upstream") or [])]:
            for name, sha in (entry.get("prompts") or {}).items():
                prompts.setdefault(name, [])
                if sha not in prompts[name]:
                    prompts[name].append(sha)
    return {k: sorted(v) for k, v in sorted(prompts.items())}


def lock_digest(lock: dict[str, Any]) -> str:
    """SHA-256 of a lock's canonical JSON without ``files`` (whose CHANGELOG.md entry holds
    this)."""
    return hashlib.sha256(
        canonical({k: v for k, v in lock.items() if k != "files"}).encode("utf-8")
    ).hexdigest()


def digest_line(lock: dict[str, Any]) -> str:
    """The changelog line that anchors a lock's values."""
    return (
        f"- lock digest of {label(lock['version'])}: {lock_digest(lock)} (SHA-256 of {LOCK} "
        "without its file "
        "list; bank verify rechecks it)"
    )


def recorded_digest(changelog: str, version: int) -> str | None:
    """The digest a changelog records for ``version`` (None: made before digests were written)."""
    for m in DIGEST.finditer(changelog):
        if m.group(1) == label(version):
            return m.group(2)
    return None


@dataclass
class KindData:
    """What one data file of a version holds, as the lock describes it."""

    items: int = 0
    by_question_type: Counter[str] = field(default_factory=Counter)
    added: Counter[int] = field(default_factory=Counter)
    """Items per ``added_in``."""
    sources: dict[int, set[str]] = field(default_factory=dict)
    """The ``source`` values of the items added in each version."""


def kind_data(df: Any) -> KindData:
    """A kind's :class:`KindData` from its polars frame."""
    import polars as pl

    out = KindData(items=df.height)
    for q, n in df.group_by("question_type").len().iter_rows():
        out.by_question_type[q] = n
    for added, n, sources in (
        df.group_by("added_in").agg(pl.len(), pl.col("source").unique()).iter_rows()
    ):
        out.added[added] = n
        out.sources[added] = set(sources)
    return out


def _summary_of(audit: dict[str, Any]) -> dict[str, Any]:
    s = audit.get("summary")
    return s if isinstance(s, dict) else {}


def value_problems(
    version: int,
    folder: Path,
    lock: dict[str, Any],
    data: dict[str, KindData],
    previous: dict[str, Any] | None,
    audit: dict[str, Any] | None,
) -> list[tuple[str, str, str]]:
    """``(file, reason, detail)`` of every value of ``lock`` (a valid :class:`schemas.bank.Lock`)
    that its version's files contradict. ``data``: each data file's :class:`KindData`;
    ``previous``: the lock of the version before, when it is of this format; ``audit``:
    the version's ``audit/audit.json``."""
    rel = f"versions/{label(version)}/{LOCK}"
    out: list[tuple[str, str, str]] = []

    def bad(reason: str, what: str) -> None:
        out.append((LOCK, reason, f"{rel}: {what}"))

    if lock["label"] != label(version):
        bad(
            "lock_mismatch",
            f"label says {str(lock['label'])[:40]!r}, the folder is {label(version)}",
        )
    if (why := name_problem(lock.get("bank"))) is not None:
        bad("bad_name", why)
    total = sum(d.items for d in data.values())
    if lock["items"] != total:
        bad("count_mismatch", f"items says {lock['items']}, the data files hold {total}")
    for kind, d in data.items():
        counted = (lock["counts"].get(kind) or {}).get("by_question_type")
        if counted is not None and counted != dict(d.by_question_type):
            diff = sorted(
                q
                for q in set(counted) | set(d.by_question_type)
                if counted.get(q) != d.by_question_type.get(q)
            )
            bad(
                "count_mismatch",
                f"counts.{kind}.by_question_type says {diff[0][:40]!r}: {counted.get(diff[0])}, "
                f"the data holds {d.by_question_type.get(diff[0], 0)}",
            )
    history, sources = lock["history"], lock["sources"]
    mine = history[-1] if history else {}
    if not CREATED_AT.match(str(lock["created_at"])) or lock["created_at"] != mine.get(
        "created_at"
    ):
        bad(
            "lock_mismatch",
            f"created_at {str(lock['created_at'])[:40]!r} is not the date of its release in "
            "history (an ISO time)",
        )
    for h in history:
        if h.get("label") != label(h.get("version") or 0) or not CREATED_AT.match(
            str(h.get("created_at"))
        ):
            bad(
                "lock_mismatch",
                f"history entry {str(h.get('label'))[:40]!r} does not name its version "
                f"{h.get('version')} or its date",
            )
            break
    if mine.get("version") == version:
        added = {k: d.added[version] for k, d in data.items() if d.added[version]}
        if (mine.get("added") or {}) != added:
            bad(
                "count_mismatch",
                f"history says {label(version)} added {mine.get('added')}, the data has {added}",
            )
    if previous is not None:
        old = previous
        expected = [dict(h) for h in old["history"]]
        if (
            expected and len(history) >= 2
        ):  # the hash it records is checked against the file (hash_mismatch)
            expected[-1]["lock_sha256"] = history[-2].get("lock_sha256")
        if history[:-1] != expected:
            bad(
                "lock_mismatch",
                f"its history of earlier releases differs from versions/{label(version - 1)}'s "
                "(edited without a version bump)",
            )
        if sources[:-1] != old["sources"]:
            bad(
                "lock_mismatch",
                f"its sources of earlier releases differ from versions/{label(version - 1)}'s "
                "(edited without a version bump)",
            )
    by_version = {s.get("version"): s for s in sources}
    if [s.get("version") for s in sources] != list(range(1, version + 1)):
        bad(
            "lock_mismatch",
            f"its sources name versions {[s.get('version') for s in sources][:20]}, not 1 "
            f"to {version}",
        )
    newest = sources[-1] if sources else {}
    if newest.get("version") != version or newest.get("items_added") != sum(
        d.added[version] for d in data.values()
    ):
        bad(
            "count_mismatch",
            f"its last source says {newest.get('items_added')} items added in "
            f"{label(newest.get('version') or 0)}, the data "
            f"has {sum(d.added[version] for d in data.values())} "
            f"added in {label(version)}",
        )
    if mine.get("source") != newest.get("source") or mine.get("input") != newest.get("input"):
        bad("lock_mismatch", "the last history entry and the last source name different runs")
    for kind, d in data.items():
        for v, seen in sorted(d.sources.items(), key=lambda kv: str(kv[0])):
            want = (by_version.get(v) or {}).get("source")
            if seen != {want}:
                bad(
                    "lock_mismatch",
                    f"{kind} items added in {label(v) if isinstance(v, int) else v} come from "
                    f"source {sorted(map(str, seen))[0][:16]}…, the lock says {str(want)[:16]}…",
                )
                break
    if lock.get("prompts", {}) != prompts_of(sources):
        bad("lock_mismatch", "prompts is not the union of its sources' prompt hashes")
    findings = (audit or {}).get("findings")
    if findings is not None and not (
        isinstance(findings, list) and all(isinstance(f, dict) for f in findings)
    ):
        out.append(
            (
                "audit/audit.json",
                "bad_audit",
                f"versions/{label(version)}/audit/audit.json: findings is not "
                "a list of objects (the card lists them)",
            )
        )
    a = mine.get("audit") or {}
    if audit is not None and a and mine.get("version") == version:
        s = _summary_of(audit)
        recorded = {"by_severity": a.get("by_severity"), "fail_on": a.get("fail_on")}
        found = {
            "by_severity": s.get("by_severity") or {},
            "fail_on": s.get("fail_on"),
        }  # as add records them
        if recorded != found:
            bad(
                "lock_mismatch",
                f"its history says the batch's audit was {recorded}, audit/audit.json says {found}",
            )
    if a and a.get("forced") is not (a.get("exit_code") not in (0, None)):
        bad(
            "lock_mismatch",
            f"its history says forced={a.get('forced')} with audit exit code {a.get('exit_code')}",
        )
    out += changelog_problems(version, folder, lock)
    return out


def changelog_problems(
    version: int, folder: Path, lock: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """The lock against the digest its version's changelog records for it (versions made before
    digests were written have none)."""
    path = folder / CHANGELOG
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []  # a missing or damaged changelog is a file problem, named by the hash check
    recorded = recorded_digest(text, version)
    if recorded is None or recorded == lock_digest(lock):
        return []
    return [
        (
            LOCK,
            "lock_mismatch",
            f"versions/{label(version)}/{LOCK}: its values differ from those {CHANGELOG} recorded "
            "when "
            f"{label(version)} was released (digest {lock_digest(lock)[:16]}…, "
            f"recorded {recorded[:16]}…); "
            "edited without a version bump",
        )
    ]


def review_problems(folder: Path, items: int) -> list[tuple[str, str, str]]:
    """``review/summary.json`` of a version, when it has one, in the shape ``bank export`` reads
    (:class:`schemas.bank.ReviewSummary`) and within the version's ``items``."""
    try:
        summary = review_summary(folder)
    except GenError as e:
        return [(REVIEW, "bad_review_summary", str(e))]
    if summary is not None and summary.items_reviewed > items:
        return [
            (
                REVIEW,
                "bad_review_summary",
                f"{folder.name}/{REVIEW}: items_reviewed {summary.items_reviewed} is "
                f"more than the version's {items} items",
            )
        ]
    return []


def review_summary(folder: Path) -> ReviewSummary | None:
    """The version's ``review/summary.json`` (None when it has none)."""
    path = folder / REVIEW
    if not path.is_file():
        return None
    data = read_json(path, "review")
    return validated(ReviewSummary, data, str(path), what="summary", objects_only=False)
