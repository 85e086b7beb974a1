"""Rerank + semantic dedup of candidate pools (EgoIntrospect appendix B.2, stage 7).

One structured call orders a whole pool from most to least appropriate, marks semantic
duplicates and ungrounded candidates, and gives a reason. Code accepts the answer only when it
holds exactly the input candidates — every id once, none added, texts unchanged — and otherwise
asks again naming the difference, then rejects the pool with it. Then the duplicates are
removed (of each group of candidates marked as meaning the same, the highest-ranked stays),
ungrounded candidates go last, and ids are renumbered 1, 2, … in the final order. An embedding
dedup runs beside the LLM's; the manifest reports how often the two agree.

The pure pieces (:func:`messages`, :func:`permutation_problems`, :func:`call`, :func:`resolve`,
:func:`embedding_pairs`, :func:`agreement`) are what ``candidates rerank=true`` uses on its own
pools with the same model.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from gen.errors import InputError, LLMOutputError
from gen.readers import iter_jsonl, validated
from gen.registry import generator
from gen.runner import CommonConfig, Plan, RunContext
from gen.schemas import Reject
from gen.schemas.candidates import TimedLine
from gen.schemas.rerank import Pool, RankedCandidate, RerankDraft, RerankRecord, rerank_draft
from gen.templates import Prompts

NAME = "rerank"
TEMPLATE = "rerank/rerank.jinja"


class RerankConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Pools to rerank from the start of the input; null = every pool."""
    attempts: int = Field(3, ge=1, le=10)
    """Structured calls per pool: the first, then re-asks naming what was wrong with the last answer."""
    dedup_similarity: float = Field(0.9, gt=0, le=1)
    """The embedding dedup beside the LLM's: two candidates at or above this cosine are duplicates
    (the audit's answer_close_sim; MiniLM paraphrases of one request score 0.85–0.95)."""
    max_tokens: int = Field(1024, ge=64)
    """Completion cap of the rerank call (it copies every candidate's text)."""


# --------------------------------------------------------------------------- input


def read_pools(path: Path) -> list[Pool]:
    """Pools JSONL: one pool per line, ``pool_id``, ``context`` (timed lines or text) and
    ``candidates`` (texts, or ``{text, id, category, source}``). A bad line is an InputError
    naming ``file:line: field``; candidate ids must be unique in a pool, pool ids in the file."""
    pools: list[Pool] = []
    seen: dict[str, int] = {}
    for lineno, row in iter_jsonl(path):
        where = f"{path}:{lineno}"
        pools.append(validated(Pool, row, where))
        pool = pools[-1]
        if pool.pool_id in seen:
            raise InputError(f"{where}: pool_id: {pool.pool_id!r} repeats line {seen[pool.pool_id]}")
        seen[pool.pool_id] = lineno
        ids = input_ids(pool)
        dup = next((i for i in ids if ids.count(i) > 1), None)
        if dup is not None:
            raise InputError(f"{where}: candidates: id {dup!r} is given twice")
    if not pools:
        raise InputError(f"{path}: no pools (one JSON object per line: pool_id, context, candidates)")
    return pools


def input_ids(pool: Pool) -> list[str]:
    """Each candidate's input id: its ``id``, else its 1-based position."""
    return [c.id if c.id is not None else str(i + 1) for i, c in enumerate(pool.candidates)]


def plan(cfg: RerankConfig) -> Plan:
    path = cfg.input_path()
    assert path is not None
    if path.is_dir():
        raise InputError(f"input: {path} is a folder; rerank reads a pools JSONL file")
    pools = read_pools(path)
    return Plan(len(pools) if cfg.n is None else min(cfg.n, len(pools)), pools)


# --------------------------------------------------------------------------- the call


def render_context(context: list[TimedLine] | str) -> str:
    """Timed lines as ``MMm:SSs | text``, one per line; free text as it is."""
    from gen.timelines import fmt_time

    if isinstance(context, str):
        return context
    return "\n".join(f"{fmt_time(x.t)} | {x.text}" for x in context) or "(none)"


def messages(prompts: Prompts, context: str, texts: Sequence[str],
             categories: Sequence[str | None] | None = None) -> list[dict[str, str]]:
    """The rerank prompt: the situation and the numbered candidates."""
    cats = list(categories) if categories is not None else [None] * len(texts)
    return prompts.render(TEMPLATE, context=context,
                          candidates=[(i + 1, c, t) for i, (c, t) in enumerate(zip(cats, texts, strict=True))])


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
    rewritten = [f"{r.id}: {texts[r.id - 1]!r} -> {r.text!r}" for r in draft.ranking
                 if 1 <= r.id <= n and r.text.strip() != texts[r.id - 1].strip()]
    if rewritten:
        problems.append("rewrote " + "; ".join(rewritten))
    return problems


PROBLEM_COUNTERS = {"dropped": "dropped_ids", "added": "added_ids", "listed": "repeated_ids",
                    "rewrote": "rewritten_texts"}
"""The manifest counter of each kind of difference :func:`permutation_problems` names."""


@dataclass
class RerankFailure(Exception):
    """The pool could not be reranked: ``reason`` (``not_a_permutation`` or the LLM's own
    ``invalid_output``/``truncated``/``backend_error``), the difference or error, the raw answer."""

    reason: str
    detail: str
    raw: str | None = None
    attempts: int = 0

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


def call(llm: Any, prompts: Prompts, context: str, texts: Sequence[str], *, seed: Callable[[int], int],
         attempts: int, max_tokens: int, count: Callable[[str], None],
         categories: Sequence[str | None] | None = None) -> tuple[RerankDraft, int]:
    """The rerank call, re-asked with the difference named until the answer is an exact
    permutation of the pool (``attempts`` calls at most). Returns the answer and the calls it
    took; raises :class:`RerankFailure`."""
    msgs = messages(prompts, context, texts, categories)
    schema = rerank_draft(tuple(texts))
    last = RerankFailure("invalid_output", "no attempt")
    for a in range(attempts):
        try:
            draft = llm.structured(msgs, schema, seed=seed(a), max_tokens=max_tokens)
        except LLMOutputError as e:
            count(f"rerank.llm_{e.reason}")
            last = RerankFailure(e.reason, e.detail, e.raw, a + 1)
            continue
        problems = permutation_problems(texts, draft)
        if not problems:
            return draft, a + 1
        for p in problems:
            count(f"rerank.{PROBLEM_COUNTERS[p.split()[0]]}")
        raw = draft.model_dump_json()
        last = RerankFailure("not_a_permutation", "; ".join(problems), raw, a + 1)
        msgs = [*msgs, {"role": "assistant", "content": raw},
                {"role": "user", "content": prompts.render("rerank/reask.jinja", problems=problems, n=len(texts))[0]["content"]}]
    raise last


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


def resolve(draft: RerankDraft, n: int, *, protect: int | None = None,
            count: Callable[[str], None] = lambda _: None) -> Resolved:
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
    kept = [i for i in order if i not in gone and grounded[i]] + [i for i in order if i not in gone and not grounded[i]]
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(group[i], []).append(i)
    return Resolved(order, kept, removed, grounded, [m for m in members.values() if len(m) > 1])


_EMBED_LOCK = threading.Lock()


def embedding_pairs(embedder: Any, texts: Sequence[str], threshold: float) -> list[tuple[int, int]]:
    """Pairs (i < j) of texts at or above ``threshold`` cosine (the embedder gives unit vectors)."""
    if len(texts) < 2:
        return []
    with _EMBED_LOCK:
        vecs = embedder.encode(list(texts))
    sims = vecs @ vecs.T
    return [(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts)) if float(sims[i, j]) >= threshold - 1e-9]


def agreement(n: int, llm_groups: Sequence[Sequence[int]], emb_pairs: Sequence[tuple[int, int]]) -> dict[str, int]:
    """Every pair of candidates by verdict: both call it a duplicate pair (the LLM: same group),
    only the LLM, only the embedding, neither."""
    same = {(min(a, b), max(a, b)) for g in llm_groups for a in g for b in g if a != b}
    emb = {(min(a, b), max(a, b)) for a, b in emb_pairs}
    total = n * (n - 1) // 2
    both = len(same & emb)
    return {"both": both, "llm_only": len(same - emb), "embedding_only": len(emb - same),
            "neither": total - len(same | emb)}


def agreement_summary(counts: Counter[str]) -> dict[str, Any]:
    """Pair verdicts summed over pools, with the share of pairs on which the two agree and the
    share of flagged pairs both flagged (Jaccard)."""
    total = sum(counts[k] for k in ("both", "llm_only", "embedding_only", "neither"))
    flagged = counts["both"] + counts["llm_only"] + counts["embedding_only"]
    return {"pairs": total, **{k: counts[k] for k in ("both", "llm_only", "embedding_only", "neither")},
            "agree_share": round((counts["both"] + counts["neither"]) / total, 4) if total else None,
            "flagged_jaccard": round(counts["both"] / flagged, 4) if flagged else None}


# --------------------------------------------------------------------------- the generator


def rerank_pool(ctx: RunContext, cfg: RerankConfig, index: int, pool: Pool) -> RerankRecord:
    """One pool: the call, the resolved order, the embedding dedup beside it. Raises RerankFailure."""
    texts = [c.text for c in pool.candidates]
    ids = input_ids(pool)
    draft, attempts = call(ctx.llm, ctx.prompts, render_context(pool.context), texts,
                           seed=lambda a: ctx.seed(index, "rerank", a), attempts=cfg.attempts,
                           max_tokens=cfg.max_tokens, count=ctx.count,
                           categories=[c.category for c in pool.candidates])
    res = resolve(draft, len(texts), count=ctx.count)
    emb = embedding_pairs(ctx.embedder, texts, cfg.dedup_similarity)
    ctx.count("rerank.duplicates_removed", len(res.removed))
    ctx.count("rerank.ungrounded", sum(not g for g in res.grounded))
    return RerankRecord(
        pool_id=pool.pool_id,
        ranked=[RankedCandidate(id=new + 1, input_id=ids[i], text=texts[i], category=pool.candidates[i].category,
                                source=pool.candidates[i].source, grounded=res.grounded[i])
                for new, i in enumerate(res.kept)],
        removed=[{"input_id": ids[i], "text": texts[i], "duplicate_of": ids[k]} for i, k in res.removed],
        reason=draft.reason, attempts=attempts, order=[ids[i] for i in res.order],
        embedding_duplicates=[[ids[a], ids[b]] for a, b in emb],
        agreement=agreement(len(texts), res.groups, emb),
    )


@generator(NAME, config=RerankConfig, records=RerankRecord, kind="rerank", plan=plan)
def rerank(cfg: RerankConfig, ctx: RunContext) -> Iterator[RerankRecord | Reject]:
    """Rerank + semantic dedup of candidate pools: one checked structured call per pool (input=pools.jsonl)."""
    pools: list[Pool] = ctx.plan.data
    path = cfg.input_path()
    assert path is not None
    ctx.record_input(path)
    totals: Counter[str] = Counter()
    calls: Counter[int] = Counter()

    def one(i: int) -> RerankRecord | Reject:
        try:
            return rerank_pool(ctx, cfg, i, pools[i])
        except RerankFailure as e:
            return Reject(record_id=ctx.record_id(i), index=i, stage="rerank", reason=e.reason,
                          detail=f"pool {pools[i].pool_id}: {e.detail} (after {e.attempts} calls)", raw=e.raw)

    indices = list(ctx.indices())
    step = max(1, cfg.llm.concurrency)
    for start in range(0, len(indices), step):
        for out in ctx.map(one, indices[start:start + step]):
            if isinstance(out, RerankRecord):
                totals.update(out.agreement)
                calls[out.attempts] += 1
            yield out
    ctx.extra[NAME] = {"agreement": agreement_summary(totals),
                       "calls_per_accepted_pool": {str(k): v for k, v in sorted(calls.items())},
                       "dedup_similarity": cfg.dedup_similarity}
