"""``bank add``: a batch audited, de-duplicated against the bank and itself, and released as a
new version in one atomic step.

One outcome per input item: a record with status ``added``, or a reject. The bank is verified
first (:func:`generators.bank.verify.require_clean`): a damaged bank is never built on. The
batch is audited through the registry (``audit`` with ``input=`` and ``fail_on=``); findings at
or above ``fail_on`` refuse the whole batch (reason ``audit_failed``, exit code 1) unless
``force=true``, which records them in the changelog. Then exact duplicates (same id) of bank
items or of an earlier batch item (reason ``duplicate``, stage ``bank``/``batch``), then
near-duplicates: cosine of ``ctx.embedder`` vectors (FAISS inner product) at or above
``near_dup_sim`` to a bank item or to an earlier kept batch item of the same family (MCQ or
digital) and question type (reason ``near_duplicate``). The embedded text is the question and
the sorted options, then the visible fields (the embedder truncates long inputs); for a bundle,
its cue, main persona and the first item texts of each app. Default ``near_dup_sim=0.95``, the
audit's ``item_dup_sim``: measured with all-MiniLM-L6-v2 on EgoToM's 706 published items, no two
distinct items of one question type reach 0.93 (highest 0.928), while synonym-rewritten copies
reach 0.95 in 60-79% and 0.93 in 83-94% of cases (hand-written paraphrases: 0.96-0.99); 0.95
keeps a margin for larger banks, whose nearest distinct pairs creep up. The rest is written as
a new version (:mod:`~generators.bank.commit`). Nothing new: no version.

A batch its audit refuses is never written and the bank is not touched (not even its lock); an
add that fails while it writes leaves the bank as it was. Under the bank's lock, ``add`` checks
the pointer again (:func:`generators.bank.store.check_pointer`: a damaged or moved-back pointer
is a refusal, never a clean-up) and removes only what crashed adds left
(:func:`generators.bank.store.leftovers`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gen import kinds
from gen.banks.batch import Item, load_batch
from gen.banks.store import (
    LOCK,
    SCHEMA_REVISION,
    bank_write_error,
    check_pointer,
    fault,
    label,
    leftovers,
    read_json,
    read_kind,
    remove,
    version_dir,
    writer_lock,
)
from gen.banks.verify import require_clean
from gen.errors import ConfigError, InputError, MissingInputError
from gen.generators.bank.commit import SEVERITY_RANK, AuditOutcome, Verdict, commit
from gen.llm import sha256_file
from gen.llm.vectors import ip_index
from gen.schemas import Reject
from gen.schemas.bank import BankItemRecord

if TYPE_CHECKING:
    from gen.engine.runner import RunContext
    from gen.generators.bank import BankConfig

LISTED = 20  # audit findings printed
PRINTED = 3  # refused items printed per reason (rejects.jsonl lists them all)


@dataclass(frozen=True)
class AddPlan:
    """What the plan hook read for an add: the batch's files, and the version it verified."""

    files: list[tuple[Path, str, str]]
    """``(path, kind, format)`` of every records file of input=."""
    verified: int | None
    """The bank's current version when the plan verified it (None: no release yet)."""
    reviews: dict[str, Any] | None = None
    """``require_review``: the input folder's labels, read by the plan (:func:`read_reviews`)."""
    source: dict[str, Any] | None = None
    """The batch's provenance (:func:`generators.bank.batch.source_info`), read by the plan."""


# --------------------------------------------------------------------------- near-duplicates


@dataclass
class Match:
    where: Literal["bank", "batch"]
    index: int
    cosine: float


def near_duplicates(new: Any, old: Any, threshold: float) -> list[Match | None]:
    """For each new vector in order: its nearest bank vector when the cosine is at or above
    ``threshold``; else the most similar *earlier kept* new vector at or above it; else None.
    Vectors are L2-normalised, so FAISS inner product is the cosine."""
    import numpy as np

    new = np.ascontiguousarray(new, dtype=np.float32)
    out: list[Match | None] = [None] * len(new)
    if len(new) == 0:
        return out
    if old is not None and len(old):
        sims, ids = ip_index(old).search(new, 1)
        for i in range(len(new)):
            if sims[i, 0] >= threshold:
                out[i] = Match("bank", int(ids[i, 0]), float(sims[i, 0]))
    lims, dists, labels = ip_index(new).range_search(
        new, threshold - 1e-6
    )  # range_search keeps sims > radius
    kept: set[int] = set()
    for i in range(len(new)):
        if out[i] is not None:
            continue
        best: Match | None = None
        for s, j in zip(dists[lims[i] : lims[i + 1]], labels[lims[i] : lims[i + 1]], strict=True):
            j = int(j)
            if j < i and j in kept and s >= threshold and (best is None or s > best.cosine):
                best = Match("batch", j, float(s))
        if best is None:
            kept.add(i)
        out[i] = best
    return out


# --------------------------------------------------------------------------- the audit


def run_audit(cfg: BankConfig, ctx: RunContext, path: Path, out: Path) -> AuditOutcome:
    """The registered ``audit`` on the batch, with input= and fail_on= (and audit_options); the
    models, cache and seed are this run's."""
    from gen.engine.registry import REGISTRY

    if "audit" not in REGISTRY:
        raise ConfigError("bank add needs the audit generator, which is not registered")
    options = {
        "input": str(path),
        "fail_on": cfg.fail_on,
        **({"roles": cfg.roles} if cfg.roles is not None else {}),
        "progress": "off",
        **(cfg.audit_options or {}),
    }
    try:
        folder = ctx.subrun("audit", out, **options)
    except ConfigError as e:
        raise ConfigError(f"audit_options: {e}") from None
    report = read_json(out / "audit.json", "audit") if (out / "audit.json").is_file() else {}
    return AuditOutcome(folder.manifest.exit_code, report, out)


# --------------------------------------------------------------------------- add


def _existing(root: Path, current: int | None) -> tuple[dict[str, Any], dict[str, tuple[str, int]]]:
    """The current version's frames per kind and ``item_id -> (kind, added_in)``."""
    frames: dict[str, Any] = {}
    ids: dict[str, tuple[str, int]] = {}
    if current is None:
        return frames, ids
    folder = version_dir(root, current)
    for kind in kinds.bank_names():
        p = folder / f"{kind}.parquet"
        if p.is_file():
            df = read_kind(p)
            frames[kind] = df
            for iid, added in zip(df["item_id"].to_list(), df["added_in"].to_list(), strict=True):
                ids[iid] = (kind, added)
    return frames, ids


def read_reviews(path: Path) -> dict[str, Any]:
    """The labels of ``gen review`` in the input's run folder (``reviews/<reviewer>.jsonl``):
    ``{"folder", "files": {reviewer: sha256}, "accepted_by": {item id: [reviewers]}}``, by each
    reviewer's last label of an item."""
    from gen.formats.labels import REVIEWS, label_file, latest, read_labels

    folder = path if path.is_dir() else path.parent
    labels = read_labels(folder)
    if not any(labels.values()):
        raise MissingInputError(
            f"require_review: {folder}/{REVIEWS} holds no labels "
            f"(python -m gen review input={folder} makes them)"
        )
    accepted: dict[str, list[str]] = {}
    for reviewer, ls in sorted(labels.items()):
        for item_id, lab in latest(ls)[0].items():
            if lab.decision == "accept":
                accepted.setdefault(item_id, []).append(reviewer)
    return {
        "folder": str(folder),
        "files": {r: sha256_file(label_file(folder, r)) for r in sorted(labels)},
        "accepted_by": accepted,
    }


def review_gate(
    batch: list[Item], reviews: dict[str, Any], k: int
) -> tuple[dict[int, Reject], dict[str, Any]]:
    """``require_review=k``: the batch items fewer than k reviewers accepted (rejects, stage
    ``review``), and what the lock records: the label files' hashes and who accepted each item
    admitted."""
    rejects: dict[int, Reject] = {}
    admitted: dict[str, list[str]] = {}
    for i, it in enumerate(batch):
        who = reviews["accepted_by"].get(it.item_id, [])
        if len(who) < k:
            rejects[i] = Reject(
                record_id=it.item_id,
                index=i,
                stage="review",
                reason="not_accepted",
                detail=f"{it.where}: accepted by {len(who)} of the {k} reviewer(s) required"
                + (f" ({', '.join(who)})" if who else ""),
            )
        else:
            admitted[it.item_id] = who
    return rejects, {"required": k, "label_files": reviews["files"], "accepted_by": admitted}


def dedupe(
    cfg: BankConfig,
    ctx: RunContext,
    batch: list[Item],
    frames: dict[str, Any],
    ids: dict[str, tuple[str, int]],
    gated: dict[int, Reject] | None = None,
) -> list[Verdict]:
    """Exact duplicates by id, then near-duplicates by embedding, per (family, question type);
    items already refused (``gated``: not accepted by enough reviewers) are left out."""
    verdicts = [Verdict(it, (gated or {}).get(i)) for i, it in enumerate(batch)]
    first: dict[str, int] = {}
    for i, v in enumerate(verdicts):
        it = v.item
        if v.reject is not None:
            continue
        if it.item_id in ids:
            kind, added = ids[it.item_id]
            v.reject = Reject(
                record_id=it.item_id,
                index=i,
                stage="bank",
                reason="duplicate",
                detail=f"{it.where}: same content as {kind} item {it.item_id} added "
                f"in {label(added)}",
            )
        elif it.item_id in first:
            j = first[it.item_id]
            v.reject = Reject(
                record_id=it.item_id,
                index=i,
                stage="batch",
                reason="duplicate",
                detail=f"{it.where}: same content as {batch[j].where}",
            )
        else:
            first[it.item_id] = i
    if cfg.near_dup_sim is None:
        return verdicts
    scopes: dict[tuple[str, str], list[int]] = {}
    for i, v in enumerate(verdicts):
        if v.reject is None:
            scopes.setdefault((kinds.require(v.item.kind).family, v.item.question_type), []).append(
                i
            )
    for (fam, qtype), members in scopes.items():
        old_rows = []  # (kind, item_id, added_in, text)
        for kind, df in frames.items():
            if kinds.require(kind).family != fam:
                continue
            sub = df.filter(df["question_type"] == qtype).select("item_id", "added_in", "record")
            for iid, added, rec in sub.iter_rows():
                old_rows.append((kind, iid, added, kinds.require(kind).text(json.loads(rec))))
        new_texts = [kinds.require(batch[i].kind).text(batch[i].record) for i in members]
        new_vecs = ctx.embedder.encode(new_texts)
        old_vecs = ctx.embedder.encode([r[3] for r in old_rows]) if old_rows else None
        for i, m in zip(
            members, near_duplicates(new_vecs, old_vecs, cfg.near_dup_sim), strict=True
        ):
            if m is None:
                continue
            it = batch[i]
            if m.where == "bank":
                kind, iid, added, _ = old_rows[m.index]
                detail = (
                    f"{it.where}: cosine {m.cosine:.3f} to {kind} item {iid} "
                    f"added in {label(added)}"
                )
            else:
                other = batch[members[m.index]]
                detail = (
                    f"{it.where}: cosine {m.cosine:.3f} to {other.item_id} ({other.where}) "
                    "of this batch"
                )
            verdicts[i].reject = Reject(
                record_id=it.item_id, index=i, stage=m.where, reason="near_duplicate", detail=detail
            )
    return verdicts


def add(cfg: BankConfig, ctx: RunContext) -> Iterator[BankItemRecord | Reject]:
    root = cfg.bank_path()
    path = cfg.input_path()
    assert path is not None
    files = ctx.plan.data.files
    batch = load_batch(files, cfg.roles)
    if len(batch) != ctx.plan.n:
        raise InputError(
            f"input: {path} changed while the bank read it ({ctx.plan.n} then {len(batch)} items)"
        )
    for f, _, _ in files:
        ctx.record_input(f)
    source = dict(ctx.plan.data.source)
    gated: dict[int, Reject] = {}
    if cfg.require_review is not None:
        gated, source["review"] = review_gate(batch, ctx.plan.data.reviews, cfg.require_review)
    if cfg.roles is not None:
        roles_path = Path(cfg.roles).expanduser()
        source["roles"] = {"path": str(roles_path), "sha256": sha256_file(roles_path)}
    audit = run_audit(cfg, ctx, path, ctx.out_dir / "audit")
    fault("audited")
    refused = audit.exit_code != 0 and not cfg.force
    if refused:  # nothing to write: the bank is not touched, not even its lock
        current = version = ctx.plan.data.verified
        verdicts = [
            Verdict(
                it,
                Reject(
                    record_id=it.item_id,
                    index=i,
                    stage="audit",
                    reason="audit_failed",
                    detail=audit_detail(audit, cfg.fail_on),
                ),
            )
            for i, it in enumerate(batch)
        ]
        new: list[Item] = []
    else:
        current, version, verdicts = add_under_lock(cfg, ctx, root, batch, gated, source, audit)
        new = [v.item for v in verdicts if v.reject is None]
    ctx.exit_code = 1 if refused else 0
    reasons = Counter(f"{v.reject.reason}" for v in verdicts if v.reject)
    ctx.extra["bank"] = {
        "action": "add",
        "bank": str(root),
        "version_before": label(current) if current else None,
        "version": label(version) if version else None,
        "released": bool(new),
        "added": dict(Counter(it.kind for it in new)),
        "refused": dict(sorted(reasons.items())),
        "audit": {**audit.summary, "forced": cfg.force and audit.exit_code != 0, "folder": "audit"},
        "source": source["source"],
    }
    ctx.say(*add_lines(cfg, root, current, version, new, verdicts, audit, refused))
    for v in verdicts:
        it = v.item
        yield v.reject or BankItemRecord(
            item_id=it.item_id,
            kind=it.kind,
            question_type=it.question_type,
            status="added",
            version=label(version or 0),
            source_item_id=it.source_item_id,
            where=it.where,
        )


def add_under_lock(
    cfg: BankConfig,
    ctx: RunContext,
    root: Path,
    batch: list[Item],
    gated: dict[int, Reject],
    source: dict[str, Any],
    audit: AuditOutcome,
) -> tuple[int | None, int | None, list[Verdict]]:
    """Holding the bank's lock: check the pointer and the version built on, remove what crashed
    adds left, deduplicate against the current version, and commit what is new. Returns the
    version before, the version after and the verdicts."""
    with writer_lock(root):  # one add at a time; readers need no lock
        current = check_pointer(root)  # it may have moved since the plan: never a clean-up
        if current is not None:
            if current != ctx.plan.data.verified:  # another add released a version since the plan
                require_clean(root, current)
            revision = read_json(version_dir(root, current) / LOCK, "bank").get("schema_revision")
            if revision != SCHEMA_REVISION:
                raise InputError(
                    f"bank: {root} has schema revision {revision}, this toolkit writes "
                    f"{SCHEMA_REVISION}; use the gen version that made it"
                )
        try:
            for p in leftovers(root, current):
                remove(p)
                ctx.count("leftovers_removed")
        except OSError as e:
            raise (bank_write_error(root, e, current) or e) from None
        frames, ids = _existing(root, current)
        verdicts = dedupe(cfg, ctx, batch, frames, ids, gated)
        new = [v.item for v in verdicts if v.reject is None]
        version = current
        if new:
            version = (current or 0) + 1
            commit(cfg, root, current, version, frames, new, verdicts, source, audit)
            fault("committed")
    return current, version, verdicts


def audit_detail(audit: AuditOutcome, fail_on: str) -> str:
    worst = [
        f
        for f in audit.findings
        if SEVERITY_RANK.get(f.get("severity", ""), -1) >= SEVERITY_RANK.get(fail_on, 9)
    ]
    shown = "; ".join(f"{f.get('severity')} {f.get('check')}/{f.get('kind')}" for f in worst[:3])
    more = f" (+{len(worst) - 3})" if len(worst) > 3 else ""
    return (
        f"the batch's audit has {len(worst)} finding(s) at or above "
        f"fail_on={fail_on}: {shown}{more}; "
        f"see audit/audit.md; force=true adds it anyway"
    )


def add_lines(
    cfg: BankConfig,
    root: Path,
    current: int | None,
    version: int | None,
    new: list[Item],
    verdicts: list[Verdict],
    audit: AuditOutcome,
    refused: bool,
) -> list[str]:
    out: list[str] = []
    sev = audit.summary["by_severity"]
    out.append(
        f"[bank] audit: {sev.get('error', 0)} errors, {sev.get('warning', 0)} "
        f"warnings, {sev.get('info', 0)} info"
        f" (fail_on={cfg.fail_on}{', forced' if cfg.force and audit.exit_code else ''})"
    )
    rej = [v.reject for v in verdicts if v.reject]
    worst = [
        f
        for f in audit.findings
        if SEVERITY_RANK.get(f.get("severity", ""), -1) >= SEVERITY_RANK.get(cfg.fail_on, 9)
    ]
    for f in worst[:LISTED] if audit.exit_code else []:
        out.append(
            f"[bank] audit {f.get('severity')} {f.get('check')}/{f.get('kind')}: {f.get('what')}"
        )
    if refused:
        out.append(
            f"[bank] batch refused by its audit ({len(rej)} "
            f"items, {audit.folder}/audit.md); {root} stays at "
            f"{label(current) if current else 'no version'}; force=true adds it anyway"
        )
        return out
    groups: dict[tuple[str, str], list[Reject]] = {}
    for r in rej:
        groups.setdefault((r.stage, r.reason), []).append(r)
    for (stage, reason), rs in sorted(groups.items()):
        out.append(f"[bank] refused {len(rs)} ({stage} {reason}), for example:")
        for r in rs[:PRINTED]:
            out.append(f"[bank]   {r.record_id}: {r.detail}")
    if new:
        out.append(
            f"[bank] {root}: {label(current) if current else 'empty'} -> {label(version or 0)}, "
            f"added {len(new)}, "
            f"refused {len(rej)}" + (" (the run folder's rejects.jsonl lists them)" if rej else "")
        )
    else:
        out.append(
            f"[bank] nothing new; {root} stays at {label(current) if current else 'no version'}"
        )
    return out
