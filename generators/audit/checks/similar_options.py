"""Check 5: options that say nearly the same, and distractors so close to the answer that they
may also be correct (embedding cosine)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import PNG_METADATA, per_type_table
from gen.generators.audit.stats import rounded
from gen.generators.audit.text import letter, norm
from gen.schemas.audit import FindingRecord, Severity
from gen.schemas.mcq import MCQ

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _plot(r: CheckResult, out_dir: Path, plt: Any) -> str | None:
    s = r.series
    # a density of no values divides by zero: two-option items have no distractor pair
    drawn = [k for k in ("distractor_distractor", "answer_distractor") if s and len(s[k])]
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    bins = [x / 50 for x in range(-10, 51)]
    for k in drawn:
        ax.hist(s[k], bins=bins, alpha=0.55, density=True, label=k.replace("_", "-"))
    for name, v in s["thresholds"].items():
        ax.axvline(
            v, color="k", linestyle="dashed" if name == "option_dup_sim" else "dotted", linewidth=1
        )
    ax.set_xlabel("cosine similarity of two options of an item")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "option_similarity.png", dpi=90, metadata=PNG_METADATA)
    plt.close(fig)
    return "option_similarity.png"


def _embed_unique(
    embed: Callable[[list[str]], np.ndarray], texts: list[str]
) -> tuple[np.ndarray, dict[str, int]]:
    uniq = sorted(set(texts))
    vecs = embed(uniq) if uniq else np.zeros((0, 1), dtype=np.float32)
    return np.asarray(vecs, dtype=np.float32), {t: j for j, t in enumerate(uniq)}


OPTION_BLOCK = 4096
"""Items whose options are embedded at once."""


def _block(
    data: AuditData,
    cfg: AuditConfig,
    xs: list[tuple[int, MCQ]],
    ans_dis: dict[str, list[np.ndarray]],
    dis_dis: dict[str, list[np.ndarray]],
    counts: Counter[str],
) -> list[tuple[int, int, int, FindingRecord]]:
    """One block of items: every pair of options of an item, its cosine added to the type's
    answer-distractor or distractor-distractor values; the pairs found, keyed for item order."""
    key = "similar_options"
    assert data.embed is not None
    vecs, at = _embed_unique(data.embed, [o.strip() for _, it in xs for o in it.options])
    kmax = max(len(it.options) for _, it in xs)
    idx = np.full((len(xs), kmax), -1, dtype=np.int64)
    for r, (_, it) in enumerate(xs):
        idx[r, : len(it.options)] = [at[o.strip()] for o in it.options]
    found: list[tuple[int, int, int, FindingRecord]] = []
    for a in range(kmax):
        for b in range(a + 1, kmax):
            rows = np.nonzero((idx[:, a] >= 0) & (idx[:, b] >= 0))[0]
            if not len(rows):
                continue
            sims = np.einsum("nd,nd->n", vecs[idx[rows, a]], vecs[idx[rows, b]])
            qtypes = [xs[r][1].question_type for r in rows.tolist()]
            answer = np.array([xs[r][1].answer in (a, b) for r in rows.tolist()], dtype=bool)
            for qtype in dict.fromkeys(qtypes):
                of_type = np.array([q == qtype for q in qtypes], dtype=bool)
                if (of_type & answer).any():
                    ans_dis[qtype].append(sims[of_type & answer])
                if (of_type & ~answer).any():
                    dis_dis[qtype].append(sims[of_type & ~answer])
            for r, s in zip(rows.tolist(), sims.tolist(), strict=True):
                i, it = xs[r]
                is_ans = it.answer in (a, b)
                if s < min(cfg.option_dup_sim, cfg.answer_close_sim) or norm(it.options[a]) == norm(
                    it.options[b]
                ):
                    continue  # not close (or the same text: a structure finding)
                sev: Severity
                if s >= cfg.option_dup_sim:
                    kind, sev, what = (
                        "near_duplicate_options",
                        "warning",
                        f"options {letter(a)} and {letter(b)} say nearly the same (cosine {s:.3f})",
                    )
                elif is_ans and s >= cfg.answer_close_sim:
                    d = b if it.answer == a else a
                    kind, sev, what = (
                        "distractor_close_to_answer",
                        "warning",
                        f"distractor {letter(d)} is so close to the answer {letter(it.answer)} "
                        f"that it may also be correct (cosine {s:.3f})",
                    )
                else:
                    continue
                counts[kind] += 1
                fields = [f"options[{a}]", f"options[{b}]"]
                if kind == "distractor_close_to_answer" and it.answer == b:
                    fields.reverse()  # the answer first
                found.append(
                    (
                        i,
                        a,
                        b,
                        finding(
                            key,
                            kind,
                            sev,
                            what,
                            items=[it.item_id],
                            fields=fields,
                            numbers={"cosine": rounded(s)},
                            bank=data.bank_name(i),
                        ),
                    )
                )
    return found


@check(
    "similar_options",
    order=5,
    title="Near-duplicate options and distractors close to the answer",
    finds="near-identical options, and distractors so close to the answer that they may also be "
    "right",
    uses=("embeddings", "option_dup_sim", "answer_close_sim"),
    markdown=per_type_table,
    plot=_plot,
)
def similar_options(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Embedding cosine between the options of each item: near-duplicate options, and distractors
    so close to the answer that they may also be correct."""
    key = "similar_options"
    res = CheckResult(key)
    if data.embed is None:
        return CheckResult(key, "skipped", "embeddings=false")
    xs = np.nonzero(data.items.n_options >= 2)[0]
    if not len(xs):
        return CheckResult(key, "skipped", "no items with options")
    ans_dis: dict[str, list[np.ndarray]] = defaultdict(list)
    dis_dis: dict[str, list[np.ndarray]] = defaultdict(list)
    counts: Counter[str] = Counter()
    for start in range(
        0, len(xs), OPTION_BLOCK
    ):  # the options of a block of items embedded at once
        block = list(data.items.iter_at(xs[start : start + OPTION_BLOCK]))
        found = _block(data, cfg, block, ans_dis, dis_dis, counts)
        res.findings += [f for *_, f in sorted(found, key=lambda x: x[:3])]  # in item order
    table = {}
    for qtype in sorted(set(ans_dis) | set(dis_dis)):
        row = {}
        for name, chunks in (
            ("answer_distractor", ans_dis[qtype]),
            ("distractor_distractor", dis_dis[qtype]),
        ):
            vals = np.concatenate(chunks).astype(np.float64) if chunks else np.zeros(0)
            if len(vals):
                q = np.percentile(vals, [50, 90, 99])
                row[name] = {
                    "pairs": len(vals),
                    "median": rounded(q[0], 3),
                    "p90": rounded(q[1], 3),
                    "p99": rounded(q[2], 3),
                    "max": rounded(float(vals.max()), 3),
                }
        table[qtype] = row
    res.series = {
        "answer_distractor": np.concatenate(
            [c for v in ans_dis.values() for c in v] or [np.zeros(0)]
        ),
        "distractor_distractor": np.concatenate(
            [c for v in dis_dis.values() for c in v] or [np.zeros(0)]
        ),
        "thresholds": {
            "option_dup_sim": cfg.option_dup_sim,
            "answer_close_sim": cfg.answer_close_sim,
        },
    }
    res.stats = {
        "per_question_type": table,
        "option_dup_sim": cfg.option_dup_sim,
        "answer_close_sim": cfg.answer_close_sim,
        "findings_by_kind": dict(sorted(counts.items())),
    }
    return res
