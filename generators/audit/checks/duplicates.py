"""Check 6: the same item twice (exactly, or nearly: the same question and options on nearly the
same context), within the bank and against a second bank."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import PNG_METADATA, cell
from gen.generators.audit.stats import rounded
from gen.generators.audit.text import Grams, norm, visible_fields
from gen.schemas.mcq import MCQ

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    out = [f"{s['exact_duplicate_groups']} groups of exact duplicates among {s['items']} items."]
    if "nearest_neighbour" in s:
        out.append(f"Nearest other item, (question+options cosine + context overlap) / 2: "
                   f"{cell(s['nearest_neighbour'])}.")
    if "against" in s:
        a = s["against"]
        out.append(f"Against {a['name']} ({a['items']} items): {a['exact']} exact matches"
                   + (f"; nearest {cell(a['nearest_neighbour'])}" if "nearest_neighbour" in a else "") + ".")
    return [*out, ""]


def _plot(r: CheckResult, out_dir: Path, plt: Any) -> str | None:
    s = r.series
    if not s.get("nearest"):
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    bins = [x / 50 for x in range(-10, 51)]
    ax.hist(s["nearest"], bins=bins, alpha=0.6, label="nearest other item")
    if s.get("nearest_against"):
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
    return " ".join(v for p, v in (visible if visible is not None else visible_fields(it)) if p != "question")


def item_signature(it: MCQ, visible: list[tuple[str, str]] | None = None) -> str:
    """Exact-duplicate key: normalised question, options as a set, visible fields."""
    vis = sorted((p, v) for p, v in (visible if visible is not None else visible_fields(it)) if p != "question")
    key = json.dumps([norm(it.question), sorted(norm(o) for o in it.options), vis], ensure_ascii=False)
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
        buckets = np.unique(keys % np.uint64(BUCKETS - 1)).astype(np.int64) if len(keys) else np.array([BUCKETS - 1])
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


def combined(sem: np.ndarray, lex: Any, seed: int, dims: int = 128) -> np.ndarray:
    """One vector per item whose inner products approximate (semantic + lexical) / 2: the
    semantic part as is, the lexical part by a seeded Gaussian random projection."""
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((BUCKETS, dims), dtype=np.float32) / np.sqrt(dims)
    proj = np.asarray(lex @ R, dtype=np.float32)
    proj /= np.maximum(np.linalg.norm(proj, axis=1, keepdims=True), 1e-9)
    return np.hstack([sem, proj]).astype(np.float32) / np.sqrt(2)


def knn(a: np.ndarray, b: np.ndarray | None, k: int, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest inner products of each row of ``a`` with the rows of ``b`` (or with the
    other rows of ``a``): exact FAISS search in blocks. Returns (similarities, indices), -1 padded."""
    import faiss

    base = a if b is None else b
    k = min(k, len(base) - (b is None))
    if k < 1 or not len(a):
        return np.zeros((len(a), 0), dtype=np.float32), np.zeros((len(a), 0), dtype=np.int64)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(np.ascontiguousarray(base, dtype=np.float32))
    sims, ids = [], []
    for s in range(0, len(a), block):
        d, i = index.search(np.ascontiguousarray(a[s:s + block], dtype=np.float32), k + (b is None))
        if b is None:  # drop the row itself
            own = i == np.arange(s, s + len(i))[:, None]
            keep = np.argsort(own, axis=1, kind="stable")[:, :k]
            d, i = np.take_along_axis(d, keep, 1), np.take_along_axis(i, keep, 1)
        sims.append(d)
        ids.append(i)
    return np.concatenate(sims), np.concatenate(ids)


def _near_pairs(sem_a: np.ndarray, lex_a: Any, sem_b: np.ndarray | None, lex_b: Any, cfg: AuditConfig,
                seed: int) -> tuple[list[tuple[int, int, float, float]], np.ndarray]:
    """Pairs whose question+options cosine >= item_dup_sim and context overlap >= context_dup_sim:
    candidates are each item's ``DUP_NEIGHBOURS`` nearest by :func:`combined` vectors above a cut
    (with a margin for the projection's error), then both similarities are computed exactly.
    Also each item's nearest combined similarity (for the histogram)."""
    ca = combined(sem_a, lex_a, seed)
    cb = None if sem_b is None else combined(sem_b, lex_b, seed)
    sims, ids = knn(ca, cb, DUP_NEIGHBOURS)
    cut = (cfg.item_dup_sim + cfg.context_dup_sim) / 2 - 0.08
    cand = sorted({(i, int(j)) if cb is not None or i < j else (int(j), i)
                   for i, row in enumerate(ids) for j, d in zip(row, sims[i], strict=True) if j >= 0 and d >= cut})
    nn = sims[:, 0] if sims.shape[1] else np.zeros(0, dtype=np.float32)
    if not cand:
        return [], nn
    other_sem = sem_a if sem_b is None else sem_b
    other_lex = lex_a if lex_b is None else lex_b
    sem = np.einsum("nd,nd->n", sem_a[[i for i, _ in cand]], other_sem[[j for _, j in cand]])
    lex = row_dots(lex_a, other_lex, cand)
    keep = [(i, j, float(s), float(x)) for (i, j), s, x in zip(cand, sem, lex, strict=True)
            if s >= cfg.item_dup_sim - 1e-6 and x >= cfg.context_dup_sim - 1e-6]
    return keep, nn


DUP_NEIGHBOURS = 10
"""Candidates per item for near-duplicates: a cluster larger than this still shows up, each
member with its ten closest."""


@check("duplicates", order=6, title="Duplicate and near-duplicate items",
       finds="the same item twice, exactly or nearly, within the bank or against against=",
       uses=("embeddings", "item_dup_sim", "context_dup_sim"), markdown=_markdown, plot=_plot)
def duplicates(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Items that show the same question, options and visible text (exact), or ask nearly the same
    (embedding cosine of question and options) on nearly the same context (word-trigram overlap),
    within the bank and against a second bank."""
    key = "duplicates"
    res = CheckResult(key)
    if data.scenarios is not None:
        return CheckResult(key, "skipped", "a scenario bank: duplicate ids and identical turn-2 texts are the "
                                           "scenarios check's rules")
    if data.bundles is not None or not data.items:
        return CheckResult(key, "skipped", "no items")
    sig = [item_signature(it, data.visible(i)) for i, it in enumerate(data.items)]
    by_sig: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sig):
        by_sig[s].append(i)
    exact_pairs: set[tuple[int, int]] = set()
    for idxs in by_sig.values():
        if len(idxs) > 1:
            ids = [data.items[i].item_id for i in idxs]
            res.findings.append(finding(key, "duplicate_items", "error",
                                        f"{len(idxs)} items show the same question, options and visible fields",
                                        items=ids, fields=["question", "options", "visible"],
                                        numbers={"count": len(idxs)}))
            exact_pairs |= {(a, b) for a in idxs for b in idxs if a < b}
    against_sig: dict[str, list[str]] = defaultdict(list)
    for it in data.against:
        against_sig[item_signature(it)].append(it.item_id)
    for i, s in enumerate(sig):
        if s in against_sig:
            res.findings.append(finding(key, "duplicate_in_against", "error",
                                        f"the same item is in {data.against_name} as {', '.join(against_sig[s][:5])}",
                                        items=[data.items[i].item_id], fields=["question", "options", "visible"],
                                        numbers={"against_items": against_sig[s]}, bank=data.bank_name(i)))
    stats: dict[str, Any] = {"items": len(data.items), "exact_duplicate_groups": sum(len(v) > 1 for v in by_sig.values()),
                             "item_dup_sim": cfg.item_dup_sim, "context_dup_sim": cfg.context_dup_sim}
    if data.against:
        stats["against"] = {"name": data.against_name, "items": len(data.against),
                            "exact": sum(s in against_sig for s in sig)}
    if data.embed is not None:
        both = data.items + data.against
        sem_all = np.asarray(data.embed([item_text(it) for it in both]), dtype=np.float32)
        lex_all = context_vectors([context_text(it, data.visible(i) if i < len(data.items) else None)
                                   for i, it in enumerate(both)], data.grams)
        n = len(data.items)
        sem, lex = sem_all[:n], lex_all[:n]
        pairs, nn = _near_pairs(sem, lex, None, None, cfg, data.seed)
        for i, j, cos, overlap in pairs:
            if (i, j) in exact_pairs:
                continue
            a, b = data.items[i], data.items[j]
            res.findings.append(finding(key, "near_duplicate_items", "warning",
                                        f"{a.item_id} and {b.item_id} ask nearly the same (cosine {cos:.3f}) on "
                                        f"nearly the same context (overlap {overlap:.2f})",
                                        items=[a.item_id, b.item_id], fields=["question", "options", "visible"],
                                        numbers={"cosine": rounded(cos), "context_overlap": rounded(overlap, 3)}))
        res.series["nearest"] = nn.tolist()
        if len(nn):
            stats["nearest_neighbour"] = {"median": rounded(np.median(nn), 3), "p99": rounded(np.percentile(nn, 99), 3),
                                          "max": rounded(nn.max(), 3)}
        if data.against:
            exact_against = {i for i, s in enumerate(sig) if s in against_sig}
            pairs, ann = _near_pairs(sem, lex, sem_all[n:], lex_all[n:], cfg, data.seed)
            for i, j, cos, overlap in pairs:
                if i in exact_against and item_signature(data.against[j]) == sig[i]:
                    continue
                res.findings.append(finding(key, "near_duplicate_in_against", "warning",
                                            f"{data.items[i].item_id} asks nearly the same as "
                                            f"{data.against[j].item_id} of {data.against_name} (cosine {cos:.3f}, "
                                            f"context overlap {overlap:.2f})",
                                            items=[data.items[i].item_id], fields=["question", "options", "visible"],
                                            numbers={"cosine": rounded(cos), "context_overlap": rounded(overlap, 3),
                                                     "against_item": data.against[j].item_id},
                                            bank=data.bank_name(i)))
            res.series["nearest_against"] = ann.tolist()
            stats["against"]["nearest_neighbour"] = {"median": rounded(np.median(ann), 3), "max": rounded(ann.max(), 3)}
    res.stats = stats
    return res
