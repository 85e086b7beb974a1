"""Rerank + semantic dedup of candidate pools (EgoIntrospect appendix B.2, stage 7).

One structured call orders a whole pool from most to least appropriate, marks semantic
duplicates and ungrounded candidates, and gives a reason. Code accepts the answer only when it
holds exactly the input candidates — every id once, none added, texts unchanged — and otherwise
asks again naming the difference, then rejects the pool with it. Then the duplicates are
removed (of each group of candidates marked as meaning the same, the highest-ranked stays),
ungrounded candidates go last, and ids are renumbered 1, 2, … in the final order. An embedding
dedup runs beside the LLM's; the manifest reports how often the two agree.

The method itself (the call, its checks, the dedup) is :mod:`gen.formats.ranking`, which
``candidates rerank=true`` uses on its own pools too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field

from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.errors import InputError
from gen.formats.ranking import (
    agreement,
    agreement_summary,
    call,
    pairs_at,
    render_context,
    resolve,
    supported,
)
from gen.llm.attempts import AttemptFailure
from gen.readers import iter_jsonl, validated
from gen.schemas import Reject
from gen.schemas.rerank import Pool, RankedCandidate, RerankRecord

NAME = "rerank"


class RerankConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Pools to rerank from the start of the input; null = every pool."""
    attempts: int = Field(3, ge=1, le=10)
    """Structured calls per pool: the first, then re-asks naming what was wrong with the last
    answer."""
    dedup_similarity: float = Field(0.9, gt=0, le=1)
    """The embedding dedup beside the LLM's: two candidates at or above this cosine are duplicates
    (the audit's answer_close_sim; MiniLM paraphrases of one request score 0.85–0.95)."""
    max_tokens: int = Field(1024, ge=64)
    """Completion cap of the rerank call (it copies every candidate's text)."""
    confirm_similarity: float = Field(0.75, ge=0, le=1)
    """A duplicate the reranker calls is removed only when the embedder puts the two candidates at
    or above this cosine (MiniLM: paraphrases 0.85–0.95, related requests 0.5–0.7); 0 = every
    call."""


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
            raise InputError(
                f"{where}: pool_id: {pool.pool_id!r} repeats line {seen[pool.pool_id]}"
            )
        seen[pool.pool_id] = lineno
        ids = input_ids(pool)
        dup = next((i for i in ids if ids.count(i) > 1), None)
        if dup is not None:
            raise InputError(f"{where}: candidates: id {dup!r} is given twice")
    if not pools:
        raise InputError(
            f"{path}: no pools (one JSON object per line: pool_id, context, candidates)"
        )
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


def rerank_pool(ctx: RunContext, cfg: RerankConfig, index: int, pool: Pool) -> RerankRecord:
    """One pool: the call, the resolved order, the embedding dedup beside it. Raises
    AttemptFailure."""
    texts = [c.text for c in pool.candidates]
    ids = input_ids(pool)
    draft, attempts = call(
        ctx.llm,
        ctx.prompts,
        render_context(pool.context),
        texts,
        seed=lambda a: ctx.seed(index, "rerank", a),
        attempts=cfg.attempts,
        max_tokens=cfg.max_tokens,
        count=ctx.count,
        categories=[c.category for c in pool.candidates],
    )
    emb, confirmed = pairs_at(ctx.embedder, texts, cfg.dedup_similarity, cfg.confirm_similarity)
    held, unconfirmed = supported(draft, confirmed)
    res = resolve(held, len(texts), count=ctx.count)
    ctx.count("rerank.unconfirmed_duplicates", len(unconfirmed))
    ctx.count("rerank.duplicates_removed", len(res.removed))
    ctx.count("rerank.ungrounded", sum(not g for g in res.grounded))
    return RerankRecord(
        pool_id=pool.pool_id,
        ranked=[
            RankedCandidate(
                id=new + 1,
                input_id=ids[i],
                text=texts[i],
                category=pool.candidates[i].category,
                source=pool.candidates[i].source,
                grounded=res.grounded[i],
            )
            for new, i in enumerate(res.kept)
        ],
        removed=[
            {"input_id": ids[i], "text": texts[i], "duplicate_of": ids[k]} for i, k in res.removed
        ],
        reason=draft.reason,
        attempts=attempts,
        order=[ids[i] for i in res.order],
        embedding_duplicates=[[ids[a], ids[b]] for a, b in emb],
        unconfirmed_duplicates=[[ids[a], ids[b]] for a, b in unconfirmed],
        agreement=agreement(len(texts), resolve(draft, len(texts)).groups, emb),
    )


@generator(NAME, config=RerankConfig, records=RerankRecord, kind="rerank", plan=plan)
def rerank(cfg: RerankConfig, ctx: RunContext) -> Iterator[RerankRecord | Reject]:
    """Rerank + semantic dedup of candidate pools: one checked structured call per pool
    (input=pools.jsonl)."""
    pools: list[Pool] = ctx.plan.data
    path = cfg.input_path()
    assert path is not None
    ctx.record_input(path)
    totals: Counter[str] = Counter()
    calls: Counter[int] = Counter()

    def one(i: int) -> RerankRecord | Reject:
        try:
            return rerank_pool(ctx, cfg, i, pools[i])
        except AttemptFailure as e:
            return Reject.from_failure(
                e,
                record_id=ctx.record_id(i),
                index=i,
                stage="rerank",
                detail=f"pool {pools[i].pool_id}: {e.detail} (after {e.attempts} calls)",
            )

    for out in ctx.imap(one, ctx.indices()):  # pools many at once, yielded in order
        if isinstance(out, RerankRecord):
            totals.update(out.agreement)
            calls[out.attempts] += 1
        yield out
    ctx.extra[NAME] = {
        "agreement": agreement_summary(totals),
        "calls_per_accepted_pool": {str(k): v for k, v in sorted(calls.items())},
        "dedup_similarity": cfg.dedup_similarity,
    }
