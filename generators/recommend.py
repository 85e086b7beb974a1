"""Proactive recommendations, the global path (EgoIntrospect appendix B.2): ``python -m gen
recommend input=<sessions.jsonl>``.

**Stage 1, gating** (code): each session's do-not-disturb intervals are clipped to the recording
and merged; the interruptible rest is cut into segments of at most ``max_segment`` seconds (300),
and segments shorter than ``min_segment`` (30) are dropped. A segment inherits the scene context
with the largest overlap, and the summary the generator wrote for the session's previous segment.

**Stage 5, the global generator** (one structured call per segment,
``prompts/recommend/global.jinja``): from the segment's timed lines (the clip as text: gen has no
video model), the scene context, the participant's profile and the previous summary, a factual
summary and one or two requests in each of the nine intent categories. A draft whose summary fails
a text gate, or repeats the profile, scene or previous summary, is asked again with a fresh seed
(``attempts``).

**Stage 6, the pool**: every request of the draft, in category order. B.2 drops none before the
rerank: concise first-person phrasing and scene grounding are what its prompt asks for, and the
reranker checks grounding. Code flags what it can see (:data:`FLAGS`: ``too_long``,
``not_first_person``, ``no_shared_noun``, ``repeats``) without dropping; the only requests left out
are those that fail gen's shared text gates (cut off, an echo of the prompt's example: not a
request the model meant), listed as ``turned_away``.

**Stage 7, the rerank** (:mod:`gen.formats.ranking`, as ``rerank`` and ``candidates rerank=true``):
one
checked structured call orders the whole pool and marks semantic duplicates and ungrounded
requests. Every marked duplicate is removed (an exact repeat is marked by code as well); ungrounded
requests (the reranker's mark, or no noun shared with what the call was given) go last; ids are
renumbered. The embedding dedup beside it only measures agreement. Stages 2-4 (object detection,
gaze synchronization, fixation proportions) and the local path read video frames and gaze logs
and are not built.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.errors import InputError
from gen.formats import ranking as rr
from gen.formats.timelines import fmt_time
from gen.intervals import Interval, complement, merge, split
from gen.llm.attempts import AttemptFailure, retry
from gen.readers import iter_jsonl, validated
from gen.schemas import Reject
from gen.schemas.introspect import Span
from gen.schemas.recommend import (
    CATEGORIES,
    Candidate,
    GlobalDraft,
    RecommendationRecord,
    RecommendSession,
)
from gen.schemas.rerank import RankedCandidate, RerankDraft
from gen.text.gates import Gates, key
from gen.text.statements import example_strings
from gen.text.tagging import tags

NAME = "recommend"
PROMPT = "recommend/global.jinja"
FLAGS = ("too_long", "not_first_person", "no_shared_noun", "repeats")
"""What code notes on a pooled request (the funnel's rows); none drops it. ``no_shared_noun``
sends it to the bottom with the reranker's ungrounded ones; ``repeats`` (the same words as an
earlier request) marks it a duplicate of that one."""

_THIRD = re.compile(
    r"\b(?:the (?:user|wearer|participant|person|camera wearer)|he|she|his|him|hers)\b", re.I
)
_ASSISTANT = re.compile(
    r"\b(?:would you like|do you want(?: me)?|shall i|i can help|i could help|let me help|"
    r"i will help|you should|you could|you might want|you may want|i recommend|i suggest|"
    r"you can|you will|you'll|you need|you have|your)\b",
    re.I,
)
_FIRST = re.compile(r"\b(?:i|me|my|mine|we|us|our|i'm|i've|i'd|i'll)\b", re.I)


_SENTENCE = re.compile(r"[^.!?]+[.!?]*")


def wearers_request(text: str) -> bool:
    """A request in the wearer's voice, sentence by sentence: each is a question, about the wearer
    (I, me, my…), or an order to the assistant (it starts with a verb in the base form:
    "Translate…", "Remind…"). A statement about the scene before a question ("The vendor is a
    baker. What about the bread?") is not the wearer asking."""
    sentences = [m.group().strip() for m in _SENTENCE.finditer(text) if m.group().strip()]
    return bool(sentences) and all(_wearers_sentence(x) for x in sentences)


def _wearers_sentence(text: str) -> bool:
    if text.endswith("?") or _FIRST.search(text):
        return True
    first = tags(text)[:1]
    return bool(first) and first[0][1] == "VB"


class RecommendConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Segments to process from the start; null = every interruptible segment."""
    max_segment: float = Field(300.0, gt=0)
    """The longest segment (B.2 stage 1: 300 s)."""
    min_segment: float = Field(30.0, ge=0)
    """Shorter segments are dropped (B.2 stage 1: 30 s)."""
    attempts: int = Field(3, ge=1, le=10)
    """Global-generator calls per segment when the summary fails a gate or copies its input, or
    every request fails the text gates."""
    max_words: int = Field(20, ge=3)
    """A request longer than this many words is flagged ``too_long`` (kept: B.2's prompt asks for
    concise requests, nothing drops a long one)."""
    draft_tokens: int = Field(700, ge=64)
    """Completion cap of the global call."""
    rerank_attempts: int = Field(3, ge=1, le=10)
    """Rerank calls until the answer is an exact permutation of the pool."""
    rerank_tokens: int = Field(1500, ge=64)
    """Completion cap of the rerank call (it copies every request)."""
    dedup_similarity: float = Field(0.9, gt=0, le=1)
    """Cosine at or above which the embedding dedup beside the reranker's calls two requests the
    same (measured against the reranker's duplicates: the funnel's ``dedup_agreement``; nothing
    removed by it: B.2 removes the reranker's duplicates)."""


# --------------------------------------------------------------------------- input and segments


@dataclass
class Segment:
    session: int
    span: Interval


def read_sessions(path: Path) -> list[RecommendSession]:
    """The sessions JSONL; a bad line is an InputError ``file:line: field: reason``; session ids
    unique."""
    out: list[RecommendSession] = []
    seen: dict[str, int] = {}
    for lineno, row in iter_jsonl(path):
        s = validated(RecommendSession, row, f"{path}:{lineno}")
        if s.session_id in seen:
            raise InputError(
                f"{path}:{lineno}: session_id: {s.session_id!r} repeats line {seen[s.session_id]}"
            )
        seen[s.session_id] = lineno
        out.append(s)
    if not out:
        raise InputError(
            f"{path}: no sessions (one JSON object per line: session_id, duration, timeline…)"
        )
    return out


def segments(s: RecommendSession, cfg: RecommendConfig) -> list[Interval]:
    """Stage 1: the interruptible segments of a session, in time order."""
    free = complement(merge(((f.start, f.end) for f in s.forbidden), s.duration), s.duration)
    return [c for iv in free for c in split(iv, cfg.max_segment, cfg.min_segment)]


def scene_of(s: RecommendSession, span: Interval) -> str | None:
    """The scene context with the largest overlap (the earlier one on a tie), if any overlaps."""
    best, most = None, 0.0
    for sc in s.scenes:
        overlap = min(span[1], sc.end) - max(span[0], sc.start)
        if overlap > most:
            best, most = sc.context, overlap
    return best


def plan(cfg: RecommendConfig) -> Plan:
    """One index per interruptible segment, sessions in input order."""
    path = cfg.input_path()
    assert path is not None
    if path.is_dir():
        raise InputError(f"input: {path} is a folder; recommend reads a sessions JSONL file")
    sessions = read_sessions(path)
    segs = [Segment(i, span) for i, s in enumerate(sessions) for span in segments(s, cfg)]
    if not segs:
        raise InputError(
            f"input: {path}: no interruptible segment of at least {cfg.min_segment:g} s"
        )
    segs = segs[: cfg.n] if cfg.n is not None else segs
    return Plan(len(segs), (sessions, segs))


# --------------------------------------------------------------------------- checks (pure)


def nouns(text: str) -> set[str]:
    """Lower-case lemmas of the nouns and proper nouns of ``text``."""
    return {
        lemma.lower() for w, _, pos, lemma in tags(text) if pos in ("NOUN", "PROPN") and w.isalpha()
    }


def request_flags(text: str, grounding: set[str], cfg: RecommendConfig) -> list[str]:
    """What code notes on a request (:data:`FLAGS` but ``repeats``, which needs the pool)."""
    flags = []
    if len(text.split()) > cfg.max_words:
        flags.append("too_long")
    if _THIRD.search(text) or _ASSISTANT.search(text) or not wearers_request(text):
        flags.append("not_first_person")
    if not nouns(text) & grounding:
        flags.append("no_shared_noun")
    return flags


def copies_input(summary: str, given: Sequence[str]) -> bool:
    """The summary repeats what the call was given (the profile, the scene, the previous summary)
    instead of saying what the clip shows."""
    k = key(summary)
    return any(g and (key(g) in k or k in key(g)) for g in given)


@dataclass
class Checked:
    summary: str
    kept: list[Candidate]
    """The pool: every request but those that failed the text gates."""
    turned: list[dict[str, str]] = field(default_factory=list)
    copies: dict[int, int] = field(default_factory=dict)
    """0-based pool index of a request with the same words as an earlier one -> that one."""


def check_draft(
    draft: GlobalDraft,
    grounding: set[str],
    cfg: RecommendConfig,
    examples: set[str],
    count: Any = lambda *_: None,
) -> Checked:
    """A draft's pool (stage 6): every request, in category order, flagged; only a request that
    fails the shared text gates is turned away."""
    first: dict[str, int] = {}
    out = Checked(draft.summary.strip(), [])
    gates = Gates(examples=set(examples))
    for cat in CATEGORIES:
        for text in getattr(draft, cat):
            t = " ".join(text.split())
            failure = gates.check(t, "prose")
            if failure is not None:
                count("turned_away.text_gates")
                out.turned.append({"text": t, "category": cat, "reason": "text_gates"})
                continue
            flags = request_flags(t, grounding, cfg)
            i = len(out.kept)
            if key(t) in first:
                out.copies[i] = first[key(t)]
                flags.append("repeats")
            else:
                first[key(t)] = i
            for f in flags:
                count(f"flagged.{f}")
            out.kept.append(Candidate(id=i + 1, text=t, category=cat, flags=flags))
    return out


def code_marks(draft: RerankDraft, pool: Checked) -> RerankDraft:
    """The reranker's answer with code's own marks added: a request that repeats an earlier one's
    words is its duplicate (unless the reranker named one), one that shares no noun with what the
    call was given is ungrounded."""
    ranking = []
    for r in draft.ranking:
        i = r.id - 1
        update: dict[str, Any] = {}
        if i in pool.copies and r.duplicate_of is None:
            update["duplicate_of"] = pool.copies[i] + 1
        if "no_shared_noun" in pool.kept[i].flags:
            update["grounded"] = False
        ranking.append(r.model_copy(update=update) if update else r)
    return draft.model_copy(update={"ranking": ranking})


# --------------------------------------------------------------------------- one session


def clip_lines(s: RecommendSession, span: Interval) -> list[str]:
    return [
        f"{fmt_time(x.t - span[0])} | {x.text}" for x in s.timeline if span[0] <= x.t <= span[1]
    ]


def one_segment(
    ctx: RunContext,
    cfg: RecommendConfig,
    index: int,
    s: RecommendSession,
    span: Interval,
    previous: str | None,
) -> tuple[RecommendationRecord | Reject, str | None]:
    """A segment's record (or reject) and the summary the next segment inherits."""
    rid = ctx.record_id(index)
    src = f"{s.session_id} {fmt_time(span[0])}-{fmt_time(span[1])}"

    def reject(stage: str, reason: str, detail: str, raw: str | None = None) -> Reject:
        return Reject(
            record_id=rid,
            index=index,
            stage=stage,
            reason=reason,
            detail=f"{src}: {detail}",
            raw=raw,
        )

    lines = clip_lines(s, span)
    if not lines:
        return reject("segment", "empty_clip", "no timeline line in the segment"), previous
    scene = scene_of(s, span)
    messages = ctx.prompts.render(
        PROMPT,
        clip=lines,
        scene=scene or "",
        profile=s.profile or "",
        previous=previous or "",
        categories=CATEGORIES,
    )
    examples = example_strings(messages)
    grounding = nouns(
        " ".join(
            [*(x.split(" | ", 1)[1] for x in lines), scene or "", s.profile or "", previous or ""]
        )
    )
    best: Checked | None = None
    errors: list[AttemptFailure] = []
    calls = 0

    def ask(a: int) -> GlobalDraft:
        nonlocal calls
        calls = a + 1
        seed = ctx.seed(index, "global", a)
        return ctx.llm.structured(messages, GlobalDraft, seed=seed, max_tokens=cfg.draft_tokens)

    def check(draft: GlobalDraft) -> None:
        """The first draft with a sound summary and a request to pool is kept."""
        nonlocal best
        failure = Gates(examples=examples).check(draft.summary, "prose")
        if failure is not None:
            raise AttemptFailure("summary", failure.gate, failure.detail)
        if copies_input(draft.summary, [scene or "", s.profile or "", previous or ""]):
            raise AttemptFailure("summary", "copies_input", "the summary copies its input")
        checked = check_draft(draft, grounding, cfg, examples, ctx.count)
        if best is None or len(checked.kept) > len(best.kept):
            best = checked
        if not checked.kept:
            raise AttemptFailure(
                "checks", "text_gates", "every request failed the text gates", counts=[]
            )

    def failed(f: AttemptFailure) -> None:
        if f.llm:
            errors.append(f)

    try:
        retry(ask, check, budget=cfg.attempts, stage="global", count=ctx.count, failed=failed)
    except AttemptFailure:
        pass
    if best is None:
        if errors:
            return reject("global", errors[-1].reason, errors[-1].detail, errors[-1].raw), previous
        return reject(
            "global", "summary_gates", f"the summary failed a text gate in {calls} drafts"
        ), previous
    if not best.kept:
        return reject(
            "checks",
            "text_gates",
            f"every request of {calls} drafts failed the text gates",
        ), best.summary
    texts = [c.text for c in best.kept]
    context = "\n".join(
        x
        for x in (
            f"Scene: {scene}" if scene else "",
            f"Wearer: {s.profile}" if s.profile else "",
            f"Before this: {previous}" if previous else "",
            f"Now: {best.summary}",
        )
        if x
    )
    try:
        rdraft, rcalls = rr.call(
            ctx.llm,
            ctx.prompts,
            context,
            texts,
            seed=lambda a: ctx.seed(index, "rerank", a),
            attempts=cfg.rerank_attempts,
            max_tokens=cfg.rerank_tokens,
            count=ctx.count,
            categories=[c.category for c in best.kept],
        )
    except AttemptFailure as e:
        return reject(
            "rerank", e.reason, f"{e.detail} (after {e.attempts} calls)", e.raw
        ), best.summary
    (emb,) = rr.pairs_at(ctx.embedder, texts, cfg.dedup_similarity)
    marked = code_marks(rdraft, best)
    res = rr.resolve(marked, len(texts), count=ctx.count)
    ctx.count("rerank.duplicates_removed", len(res.removed))
    agree = rr.agreement(len(texts), rr.resolve(rdraft, len(texts)).groups, emb)
    ranked = [
        RankedCandidate(
            id=new + 1,
            input_id=str(best.kept[i].id),
            text=texts[i],
            category=best.kept[i].category,
            source="global",
            grounded=res.grounded[i],
        )
        for new, i in enumerate(res.kept)
    ]
    rec = RecommendationRecord(
        item_id=rid,
        session_id=s.session_id,
        participant=s.participant,
        segment=Span(start=span[0], end=span[1]),
        scene_context=scene,
        profile=s.profile,
        previous_summary=previous,
        summary=best.summary,
        candidates=best.kept,
        turned_away=best.turned,
        ranked=ranked,
        removed=[
            {
                "input_id": str(best.kept[i].id),
                "text": texts[i],
                "duplicate_of": str(best.kept[k].id),
            }
            for i, k in res.removed
        ],
        rerank_reason=rdraft.reason,
        dedup_agreement=agree,
        attempts={"global": calls, "rerank": rcalls},
    )
    return rec, best.summary


def one_session(
    ctx: RunContext, cfg: RecommendConfig, s: RecommendSession, todo: Sequence[tuple[int, Interval]]
) -> list[RecommendationRecord | Reject]:
    """A session's segments in time order: each inherits the summary written for the one before."""
    previous: str | None = None
    out = []
    for index, span in todo:
        result, previous = one_segment(ctx, cfg, index, s, span, previous)
        out.append(result)
    return out


# --------------------------------------------------------------------------- the generator


def funnel(outcomes: list[RecommendationRecord | Reject]) -> dict[str, Any]:
    recs = [o for o in outcomes if isinstance(o, RecommendationRecord)]
    flagged = Counter(f for r in recs for c in r.candidates for f in c.flags)
    return {
        "segments": len(outcomes),
        "records": len(recs),
        "rejected_by": dict(
            sorted(
                Counter(f"{o.stage}.{o.reason}" for o in outcomes if isinstance(o, Reject)).items()
            )
        ),
        "requests_pooled": sum(len(r.candidates) for r in recs),
        "requests_turned_away_by_text_gates": sum(len(r.turned_away) for r in recs),
        "pooled_requests_flagged": {c: flagged.get(c, 0) for c in FLAGS},
        "after_rerank": sum(len(r.ranked) for r in recs),
        "duplicates_removed": sum(len(r.removed) for r in recs),
        "ungrounded_last": sum(not c.grounded for r in recs for c in r.ranked),
        "dedup_agreement": rr.agreement_summary(
            sum((Counter(r.dedup_agreement) for r in recs), Counter())
        ),
        "categories_kept": dict(
            sorted(Counter(c.category for r in recs for c in r.candidates).items())
        ),
    }


def funnel_lines(f: dict[str, Any]) -> list[str]:
    out: list[str] = []
    out.append(
        f"[{NAME}] {f['segments']} segments, {f['records']} records; {f['requests_pooled']} "
        f"requests pooled ({f['requests_turned_away_by_text_gates']} failed the text gates), "
        f"{f['after_rerank']} after the rerank ({f['duplicates_removed']} duplicates removed, "
        f"{f['ungrounded_last']} ungrounded last)"
    )
    a = f["dedup_agreement"]
    if a["pairs"]:
        out.append(
            f"  request pairs called duplicates: reranker and embedding {a['both']}, reranker "
            f"only {a['llm_only']}, "
            f"embedding only {a['embedding_only']} (of {a['pairs']})"
        )
    for k, v in f["pooled_requests_flagged"].items():
        out.append(f"  flagged {k:<24}{v:>6}")
    for k, v in f["rejected_by"].items():
        out.append(f"  refused {k:<30}{v:>6}")
    return out


@generator(
    NAME, config=RecommendConfig, records=RecommendationRecord, kind="recommendations", plan=plan
)
def recommend(cfg: RecommendConfig, ctx: RunContext) -> Iterator[RecommendationRecord | Reject]:
    """Proactive recommendations, global path (B.2): gated segments -> a summary and first-person
    requests in nine categories -> the whole pool reranked."""
    sessions, segs = ctx.plan.data
    path = cfg.input_path()
    assert path is not None
    ctx.record_input(path)
    ctx.prompts.hash(PROMPT)
    indices = list(ctx.indices())
    by_session: dict[int, list[tuple[int, Interval]]] = {}
    for i in indices:
        by_session.setdefault(segs[i].session, []).append((i, segs[i].span))
    results: dict[int, RecommendationRecord | Reject] = {}
    for si, outs in zip(
        by_session,
        ctx.map(lambda si: one_session(ctx, cfg, sessions[si], by_session[si]), list(by_session)),
        strict=True,
    ):
        for (i, _), o in zip(by_session[si], outs, strict=True):
            results[i] = o
    outcomes = [results[i] for i in indices]
    yield from outcomes
    f = funnel(outcomes)
    ctx.extra[NAME] = {"funnel": f, "segments": {"max": cfg.max_segment, "min": cfg.min_segment}}
    ctx.say(*funnel_lines(f))
