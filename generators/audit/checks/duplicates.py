"""Check 6: the same item twice (exactly, or nearly: the same question and options on nearly the
same context), within the bank and against a second bank."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.items import Items
from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import PNG_METADATA, cell
from gen.generators.audit.stats import rounded
from gen.generators.audit.text import Grams, norm, visible_fields
from gen.generators.audit.vectors import Vectors, knn
from gen.schemas.mcq import MCQ

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    out = [f"{s['exact_duplicate_groups']} groups of exact duplicates among {s['items']} items."]
    if "nearest_neighbour" in s:
        out.append(
            f"Nearest other item, (question+options cosine + context overlap) / 2: "
            f"{cell(s['nearest_neighbour'])}."
        )
    if "against" in s:
        a = s["against"]
        out.append(
            f"Against {a['name']} ({a['items']} items): {a['exact']} exact matches"
            + (f"; nearest {cell(a['nearest_neighbour'])}" if "nearest_neighbour" in a else "")
            + "."
        )
    return [*out, ""]


def _plot(r: CheckResult, out_dir: Path, plt: Any) -> str | None:
    s = r.series
    if not len(s.get("nearest", ())):
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    bins = [x / 50 for x in range(-10, 51)]
    ax.hist(s["nearest"], bins=bins, alpha=0.6, label="nearest other item")
    if len(s.get("nearest_against", ())):
        ax.hist(s["nearest_against"], bins=bins, alpha=0.6, label="nearest item of against=")
    ax.set_xlabel("nearest item: (question+options cosine + context overlap) / 2")
    ax.set_ylabel("items")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "item_similarity.png", dpi=90, metadata=PNG_METADATA)
    plt.close(fig)
    return "item_similarity.png"


def item_text(it: MCQ) -> str:
    """What is embedded for an item: its question and options (its visible fields when it has no
    options). The visible context is compared lexically (:func:`context_vectors`): a whole-item
    embedding is dominated by a shared context (items of one clip read alike whatever they ask)."""
    if it.options:
        return "\n".join(p for p in (it.question, *it.options) if p)
    return "\n".join(v for v in it.visible.values() if v) or it.question


def context_text(it: MCQ, visible: list[tuple[str, str]] | None = None) -> str:
    """The normalised visible context of an item with options ("" without options: an item
    without options is its visible text, compared semantically)."""
    if not it.options:
        return ""
    return " ".join(
        v for p, v in (visible if visible is not None else visible_fields(it)) if p != "question"
    )


def item_signature(it: MCQ, visible: list[tuple[str, str]] | None = None) -> str:
    """Exact-duplicate key: normalised question, options as a set, visible fields."""
    vis = sorted(
        (p, v)
        for p, v in (visible if visible is not None else visible_fields(it))
        if p != "question"
    )
    key = json.dumps(
        [norm(it.question), sorted(norm(o) for o in it.options), vis], ensure_ascii=False
    )
    return hashlib.sha256(key.encode()).hexdigest()


BUCKETS = 1 << 16


def context_vectors(texts: list[str], grams: Grams | None = None) -> Any:
    """The set of word trigrams of each (normalised) text, hashed into 2^16 columns, rows
    L2-normalised (sparse): the dot product of two rows is the cosine overlap of two contexts.
    Sets, not counts: formulaic narration ("with his right hand") would otherwise make every
    context alike. An empty text gets a column of its own, so two items without context count as
    having the same (no) context. Each distinct text is processed once."""
    from scipy.sparse import csr_matrix

    grams = grams or Grams()
    distinct: dict[str, int] = {}
    row_of = np.array([distinct.setdefault(t, len(distinct)) for t in texts], dtype=np.int64)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for r, text in enumerate(distinct):
        keys = grams.keys(text, min(3, max(1, len(text.split()))))
        buckets = (
            np.unique(keys % np.uint64(BUCKETS - 1)).astype(np.int64)
            if len(keys)
            else np.array([BUCKETS - 1])
        )
        rows.append(np.full(len(buckets), r))
        cols.append(buckets)
    r_, c_ = (np.concatenate(x) if x else np.zeros(0, dtype=np.int64) for x in (rows, cols))
    X = csr_matrix((np.ones(len(c_), dtype=np.float32), (r_, c_)), shape=(len(distinct), BUCKETS))
    X = X.multiply(1 / np.sqrt(np.maximum(np.asarray(X.sum(axis=1)).ravel(), 1))[:, None]).tocsr()
    return X[row_of]


def row_dots(X: Any, Y: Any, pairs: list[tuple[int, int]]) -> np.ndarray:
    if not pairs:
        return np.zeros(0, dtype=np.float32)
    ii, jj = (np.array(x) for x in zip(*pairs, strict=True))
    return np.asarray(X[ii].multiply(Y[jj]).sum(axis=1)).ravel()


def projection(seed: int, dims: int = 128) -> np.ndarray:
    """The seeded Gaussian random projection of the lexical part (:func:`combined`)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((BUCKETS, dims), dtype=np.float32) / np.sqrt(dims)


def combined(sem: np.ndarray, lex: Any, R: np.ndarray) -> np.ndarray:
    """One vector per item whose inner products approximate (semantic + lexical) / 2: the
    semantic part as is, the lexical part by the random projection ``R`` (:func:`projection`)."""
    proj = np.asarray(lex @ R, dtype=np.float32)
    proj /= np.maximum(np.linalg.norm(proj, axis=1, keepdims=True), 1e-9)
    return np.hstack([sem, proj]).astype(np.float32) / np.sqrt(2)


EMBED_BLOCK = 2048
"""Items embedded (and their contexts vectorised) at once."""


@dataclass
class _Side:
    """One bank's item vectors, on disk: the embedding of question and options, and the
    :func:`combined` vector the neighbour search runs on."""

    items: Items
    sem: Vectors
    comb: Vectors


def _side(data: AuditData, items: Items, R: np.ndarray) -> _Side:
    """Embed ``items`` block by block (the lexical part from their contexts)."""
    embed = data.embed
    assert embed is not None
    side = _Side(items, Vectors(), Vectors())

    def flush(texts: list[str], contexts: list[str]) -> None:
        sem = np.asarray(embed(texts), dtype=np.float32)
        side.sem.append(sem)
        side.comb.append(combined(sem, context_vectors(contexts, data.grams), R))

    texts: list[str] = []
    contexts: list[str] = []
    for i, it in enumerate(items):
        texts.append(item_text(it))
        contexts.append(context_text(it, items.visible(i)))
        if len(texts) == EMBED_BLOCK:
            flush(texts, contexts)
            texts, contexts = [], []
    if texts:
        flush(texts, contexts)
    return side


def _lexical(side: _Side, rows: list[int], grams: Grams) -> tuple[Any, dict[int, int]]:
    """The context vectors of some items (read again) and each item's row among them."""
    at = {i: r for r, i in enumerate(rows)}
    texts = [context_text(it, side.items.visible(i)) for i, it in side.items.iter_at(rows)]
    return context_vectors(texts, grams), at


def _near_pairs(
    a: _Side, b: _Side | None, cfg: AuditConfig, grams: Grams
) -> tuple[list[tuple[int, int, float, float]], np.ndarray]:
    """Pairs whose question+options cosine >= item_dup_sim and context overlap >= context_dup_sim:
    candidates are each item's ``DUP_NEIGHBOURS`` nearest by :func:`combined` vectors above a cut
    (with a margin for the projection's error), then both similarities are computed exactly
    (the candidates' vectors read back, their contexts vectorised again). Also each item's
    nearest combined similarity (for the histogram)."""
    sims, ids = knn(a.comb, None if b is None else b.comb, DUP_NEIGHBOURS)
    cut = (cfg.item_dup_sim + cfg.context_dup_sim) / 2 - 0.08
    cand = sorted(
        {
            (i, int(j)) if b is not None or i < j else (int(j), i)
            for i, row in enumerate(ids)
            for j, d in zip(row, sims[i], strict=True)
            if j >= 0 and d >= cut
        }
    )
    nn = sims[:, 0] if sims.shape[1] else np.zeros(0, dtype=np.float32)
    if not cand:
        return [], nn
    other = a if b is None else b
    ii, jj = [i for i, _ in cand], [j for _, j in cand]
    sem = np.einsum("nd,nd->n", a.sem.take(ii), other.sem.take(jj))
    if b is None:
        X, at = _lexical(a, sorted(set(ii) | set(jj)), grams)
        Y, bt = X, at
    else:
        X, at = _lexical(a, sorted(set(ii)), grams)
        Y, bt = _lexical(b, sorted(set(jj)), grams)
    lex = row_dots(X, Y, [(at[i], bt[j]) for i, j in cand])
    keep = [
        (i, j, float(s), float(x))
        for (i, j), s, x in zip(cand, sem, lex, strict=True)
        if s >= cfg.item_dup_sim - 1e-6 and x >= cfg.context_dup_sim - 1e-6
    ]
    return keep, nn


DUP_NEIGHBOURS = 10
"""Candidates per item for near-duplicates: a cluster larger than this still shows up, each
member with its ten closest."""


@check(
    "duplicates",
    order=6,
    title="Duplicate and near-duplicate items",
    finds="the same item twice, exactly or nearly, within the bank or against against=",
    uses=("embeddings", "item_dup_sim", "context_dup_sim"),
    markdown=_markdown,
    plot=_plot,
)
def duplicates(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Items that show the same question, options and visible text (exact), or ask nearly the same
    (embedding cosine of question and options) on nearly the same context (word-trigram overlap),
    within the bank and against a second bank."""
    key = "duplicates"
    res = CheckResult(key)
    if data.scenarios is not None:
        return CheckResult(
            key,
            "skipped",
            "a scenario bank: duplicate ids and identical turn-2 texts are the "
            "scenarios check's rules",
        )
    if data.bundles is not None or not data.items:
        return CheckResult(key, "skipped", "no items")
    items, ids = data.items, data.items.ids
    sig = _signatures(items)
    _, first, group, counts = np.unique(
        sig, return_index=True, return_inverse=True, return_counts=True
    )
    members = np.argsort(group.ravel(), kind="stable")
    starts = np.concatenate(([0], np.cumsum(counts)))
    exact_pairs: set[tuple[int, int]] = set()
    for g in np.argsort(first, kind="stable").tolist():  # in order of first appearance
        if counts[g] > 1:
            idxs = members[starts[g] : starts[g + 1]].tolist()
            res.findings.append(
                finding(
                    key,
                    "duplicate_items",
                    "error",
                    f"{len(idxs)} items show the same question, options and visible fields",
                    items=[ids[i] for i in idxs],
                    fields=["question", "options", "visible"],
                    numbers={"count": len(idxs)},
                )
            )
            exact_pairs |= {(a, b) for a in idxs for b in idxs if a < b}
    asig = _signatures(data.against)
    in_against = np.isin(sig, asig)
    found = set(sig[in_against].tolist())
    against_sig: dict[bytes, list[str]] = defaultdict(list)
    for j, s in enumerate(asig.tolist()):
        if s in found:
            against_sig[s].append(data.against.ids[j])
    for i in np.nonzero(in_against)[0].tolist():
        s = sig[i].tolist()
        res.findings.append(
            finding(
                key,
                "duplicate_in_against",
                "error",
                f"the same item is in {data.against_name} as {', '.join(against_sig[s][:5])}",
                items=[ids[i]],
                fields=["question", "options", "visible"],
                numbers={"against_items": against_sig[s]},
                bank=data.bank_name(i),
            )
        )
    stats: dict[str, Any] = {
        "items": len(items),
        "exact_duplicate_groups": int((counts > 1).sum()),
        "item_dup_sim": cfg.item_dup_sim,
        "context_dup_sim": cfg.context_dup_sim,
    }
    if data.against:
        stats["against"] = {
            "name": data.against_name,
            "items": len(data.against),
            "exact": int(in_against.sum()),
        }
    if data.embed is not None:
        R = projection(data.seed)
        a = _side(data, items, R)
        b = _side(data, data.against, R) if data.against else None
        del R
        pairs, nn = _near_pairs(a, None, cfg, data.grams)
        for i, j, cos, overlap in pairs:
            if (i, j) in exact_pairs:
                continue
            res.findings.append(
                finding(
                    key,
                    "near_duplicate_items",
                    "warning",
                    f"{ids[i]} and {ids[j]} ask nearly the same (cosine {cos:.3f}) on "
                    f"nearly the same context (overlap {overlap:.2f})",
                    items=[ids[i], ids[j]],
                    fields=["question", "options", "visible"],
                    numbers={"cosine": rounded(cos), "context_overlap": rounded(overlap, 3)},
                )
            )
        res.series["nearest"] = nn
        if len(nn):
            stats["nearest_neighbour"] = {
                "median": rounded(np.median(nn), 3),
                "p99": rounded(np.percentile(nn, 99), 3),
                "max": rounded(nn.max(), 3),
            }
        if b is not None:
            pairs, ann = _near_pairs(a, b, cfg, data.grams)
            for i, j, cos, overlap in pairs:
                if in_against[i] and asig[j] == sig[i]:
                    continue
                res.findings.append(
                    finding(
                        key,
                        "near_duplicate_in_against",
                        "warning",
                        f"{ids[i]} asks nearly the same as "
                        f"{data.against.ids[j]} of {data.against_name} (cosine {cos:.3f}, "
                        f"context overlap {overlap:.2f})",
                        items=[ids[i]],
                        fields=["question", "options", "visible"],
                        numbers={
                            "cosine": rounded(cos),
                            "context_overlap": rounded(overlap, 3),
                            "against_item": data.against.ids[j],
                        },
                        bank=data.bank_name(i),
                    )
                )
            res.series["nearest_against"] = ann
            stats["against"]["nearest_neighbour"] = {
                "median": rounded(np.median(ann), 3),
                "max": rounded(ann.max(), 3),
            }
    res.stats = stats
    return res


def _signatures(items: Items) -> np.ndarray:
    """Each item's :func:`item_signature` as 32 bytes (``V32``), in one pass."""
    buf = bytearray()
    for i, it in enumerate(items):
        buf += bytes.fromhex(item_signature(it, items.visible(i)))
    return np.frombuffer(bytes(buf), dtype="V32")
