"""Reranking a pool of candidates with one checked structured call, and semantic dedup
(EgoIntrospect appendix B.2, stage 7): what the ``rerank`` generator does to pools from a file and
``candidates rerank=true`` does to its own pools, with the same model.

One structured call orders a whole pool from most to least appropriate, marks semantic
duplicates and ungrounded candidates, and gives a reason. Code accepts the answer only when it
holds exactly the input candidates — every id once, none added, texts unchanged — and otherwise
asks again naming the difference (:func:`call`). :func:`resolve` removes the duplicates (of each
group marked as meaning the same, the highest-ranked stays) and puts ungrounded candidates last.
An embedding dedup runs beside the LLM's (:func:`embedding_pairs`); :func:`agreement` counts how
often the two agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gen.llm.attempts import AttemptFailure, retry
from gen.schemas.candidates import TimedLine
from gen.schemas.rerank import RerankDraft, rerank_draft
from gen.templates import Prompts

TEMPLATE = "rerank/rerank.jinja"


def render_context(context: list[TimedLine] | str) -> str:
    """Timed lines as ``MMm:SSs | text``, one per line; free text as it is."""
    from gen.formats.timelines import fmt_time

    if isinstance(context, str):
        return context
    return "\n".join(f"{fmt_time(x.t)} | {x.text}" for x in context) or "(none)"


def messages(
    prompts: Prompts,
    context: str,
    texts: Sequence[str],
    categories: Sequence[str | None] | None = None,
) -> list[dict[str, str]]:
    """The rerank prompt: the situation and the numbered candidates."""
    cats = list(categories) if categories is not None else [None] * len(texts)
    return prompts.render(
        TEMPLATE,
        context=context,
        candidates=[(i + 1, c, t) for i, (c, t) in enumerate(zip(cats, texts, strict=True))],
    )


def permutation_problems(texts: Sequence[str], draft: RerankDraft) -> list[str]:
    """Why an answer is not exactly the input pool: ids dropped, added or given twice, texts
    rewritten. Empty when every candidate 1..n appears once with its text unchanged."""
    n = len(texts)
    ids = [r.id for r in draft.ranking]
    counts = Counter(ids)
    problems = []
    dropped = [i for i in range(1, n + 1) if i not in counts]
    added = sorted({i for i in ids if not 1 <= i <= n})
    twice = sorted(i for i, c in counts.items() if c > 1 and 1 <= i <= n)
    if dropped:
        problems.append(f"dropped {dropped}")
    if added:
        problems.append(f"added {added} (there are candidates 1 to {n})")
    if twice:
        problems.append(f"listed {twice} more than once")
    rewritten = [
        f"{r.id}: {texts[r.id - 1]!r} -> {r.text!r}"
        for r in draft.ranking
        if 1 <= r.id <= n and r.text.strip() != texts[r.id - 1].strip()
    ]
    if rewritten:
        problems.append("rewrote " + "; ".join(rewritten))
    return problems


PROBLEM_COUNTERS = {
    "dropped": "dropped_ids",
    "added": "added_ids",
    "listed": "repeated_ids",
    "rewrote": "rewritten_texts",
}
"""The manifest counter of each kind of difference :func:`permutation_problems` names."""


def call(
    llm: Any,
    prompts: Prompts,
    context: str,
    texts: Sequence[str],
    *,
    seed: Callable[[int], int],
    attempts: int,
    max_tokens: int,
    count: Callable[[str], None],
    categories: Sequence[str | None] | None = None,
) -> tuple[RerankDraft, int]:
    """The rerank call, re-asked with the difference named until the answer is an exact
    permutation of the pool (``attempts`` calls at most). Returns the answer and the calls it
    took; raises :class:`~gen.llm.attempts.AttemptFailure` (stage ``rerank``, reason
    ``not_a_permutation`` or the model's own ``invalid_output``/``truncated``/``backend_error``,
    the difference or error, the raw answer, the calls made)."""
    msgs = messages(prompts, context, texts, categories)
    schema = rerank_draft(tuple(texts))
    calls = 0
    named: list[str] = []

    def ask(a: int) -> RerankDraft:
        nonlocal calls
        calls = a + 1
        return llm.structured(msgs, schema, seed=seed(a), max_tokens=max_tokens)

    def check(draft: RerankDraft) -> RerankDraft:
        problems = permutation_problems(texts, draft)
        if not problems:
            return draft
        named[:] = problems
        keys = [f"rerank.{PROBLEM_COUNTERS[p.split()[0]]}" for p in problems]
        raise AttemptFailure("rerank", "not_a_permutation", "; ".join(problems), counts=keys)

    def reask(f: AttemptFailure) -> None:
        """The next call sees its answer and the difference named (instructor's re-ask)."""
        nonlocal msgs
        if f.llm or f.raw is None:
            return
        again = prompts.render("rerank/reask.jinja", problems=named, n=len(texts))[0]["content"]
        msgs = [*msgs, {"role": "assistant", "content": f.raw}, {"role": "user", "content": again}]

    draft = retry(ask, check, budget=attempts, stage="rerank", count=count, failed=reask)
    return draft, calls


# --------------------------------------------------------------------------- what the answer means


@dataclass
class Resolved:
    """A valid answer applied: 0-based candidate indices."""

    order: list[int]
    """The reranker's order of every candidate."""
    kept: list[int]
    """Candidates kept, in the final order (grounded first, each part in the reranker's order)."""
    removed: list[tuple[int, int]] = field(default_factory=list)
    """(duplicate removed, the candidate kept in its place)."""
    grounded: list[bool] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)
    """Groups of two or more candidates the reranker marked as meaning the same."""


def components(n: int, pairs: Sequence[tuple[int, int]]) -> list[int]:
    """Union-find: the group (a representative index) of each of n items joined by ``pairs``."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [find(i) for i in range(n)]


def resolve(
    draft: RerankDraft,
    n: int,
    *,
    protect: int | None = None,
    count: Callable[[str], None] = lambda _: None,
) -> Resolved:
    """Apply a valid answer: each group of duplicates keeps its highest-ranked member (``protect``,
    the positive of a candidate set, always stays and stands for its group), ungrounded
    candidates go last. A ``duplicate_of`` naming the candidate itself or no candidate is
    ignored (counted)."""
    order = [r.id - 1 for r in draft.ranking]
    grounded = [True] * n
    pairs: list[tuple[int, int]] = []
    for r in draft.ranking:
        grounded[r.id - 1] = r.grounded
        if r.duplicate_of is not None:
            if 1 <= r.duplicate_of <= n and r.duplicate_of != r.id:
                pairs.append((r.id - 1, r.duplicate_of - 1))
            else:
                count("rerank.bad_duplicate_of")
    group = components(n, pairs)
    rank = {i: pos for pos, i in enumerate(order)}
    keeper: dict[int, int] = {}
    for i in sorted(range(n), key=lambda i: (i != protect, rank[i])):
        keeper.setdefault(group[i], i)
    removed = [(i, keeper[group[i]]) for i in order if keeper[group[i]] != i]
    gone = {i for i, _ in removed}
    kept = [i for i in order if i not in gone and grounded[i]] + [
        i for i in order if i not in gone and not grounded[i]
    ]
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(group[i], []).append(i)
    return Resolved(order, kept, removed, grounded, [m for m in members.values() if len(m) > 1])


def supported(
    draft: RerankDraft, support: Sequence[tuple[int, int]]
) -> tuple[RerankDraft, list[tuple[int, int]]]:
    """The answer with every ``duplicate_of`` that ``support`` (0-based pairs, e.g. the pairs the
    embedder puts at or above a floor) does not hold cleared, so :func:`resolve` removes only
    those duplicates; and the calls cleared, as (candidate, the one it was called a duplicate of).
    A weak reranker calls unrelated candidates duplicates (SmolLM2-135M marks every candidate a
    duplicate of the first), which would empty the pool. ``duplicate_of`` naming the candidate
    itself or no candidate is left for :func:`resolve` to count."""
    held = {(min(a, b), max(a, b)) for a, b in support}
    n = len(draft.ranking)
    cleared: list[tuple[int, int]] = []
    ranking = []
    for r in draft.ranking:
        d = r.duplicate_of
        if d is not None and 1 <= d <= n and d != r.id:
            pair = (min(r.id, d) - 1, max(r.id, d) - 1)
            if pair not in held:
                cleared.append((r.id - 1, d - 1))
                r = r.model_copy(update={"duplicate_of": None})
        ranking.append(r)
    return draft.model_copy(update={"ranking": ranking}), cleared


def embedding_pairs(embedder: Any, texts: Sequence[str], threshold: float) -> list[tuple[int, int]]:
    """Pairs (i < j) of texts at or above ``threshold`` cosine (the embedder gives unit vectors)."""
    return pairs_at(embedder, texts, threshold)[0]


def pairs_at(
    embedder: Any, texts: Sequence[str], *thresholds: float
) -> list[list[tuple[int, int]]]:
    """:func:`embedding_pairs` at each threshold, from one embedding of the texts (a pool's
    dedup and confirmation floors: the embedder is the generator's main CPU cost per pool)."""
    if len(texts) < 2:
        return [[] for _ in thresholds]
    vecs = embedder.encode(list(texts))
    sims = vecs @ vecs.T
    n = len(texts)
    return [
        [(i, j) for i in range(n) for j in range(i + 1, n) if float(sims[i, j]) >= t - 1e-9]
        for t in thresholds
    ]


def agreement(
    n: int, llm_groups: Sequence[Sequence[int]], emb_pairs: Sequence[tuple[int, int]]
) -> dict[str, int]:
    """Every pair of candidates by verdict: both call it a duplicate pair (the LLM: same group),
    only the LLM, only the embedding, neither."""
    same = {(min(a, b), max(a, b)) for g in llm_groups for a in g for b in g if a != b}
    emb = {(min(a, b), max(a, b)) for a, b in emb_pairs}
    total = n * (n - 1) // 2
    both = len(same & emb)
    return {
        "both": both,
        "llm_only": len(same - emb),
        "embedding_only": len(emb - same),
        "neither": total - len(same | emb),
    }


def agreement_summary(counts: Counter[str]) -> dict[str, Any]:
    """Pair verdicts summed over pools, with the share of pairs on which the two agree and the
    share of flagged pairs both flagged (Jaccard)."""
    total = sum(counts[k] for k in ("both", "llm_only", "embedding_only", "neither"))
    flagged = counts["both"] + counts["llm_only"] + counts["embedding_only"]
    return {
        "pairs": total,
        **{k: counts[k] for k in ("both", "llm_only", "embedding_only", "neither")},
        "agree_share": round((counts["both"] + counts["neither"]) / total, 4) if total else None,
        "flagged_jaccard": round(counts["both"] / flagged, 4) if flagged else None,
    }


# --------------------------------------------------------------------------- the generator
