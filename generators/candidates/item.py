"""One item through every step (:func:`process`): the input checks, the item's setup, the wrong
options (LLM-generated, one reason per other label, or sampled from the negatives), the rerank
(:mod:`generators.rerank`'s pure functions), the positive's rewording, the context lines hidden
from the candidate, the seeded shuffle and the record; or a reject naming the step and reason."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.engine.runner import RunContext
from gen.formats import ranking as rr
from gen.formats.mcq import arrange
from gen.formats.timelines import Line, fmt_line, fmt_time
from gen.generators.candidates.checks import (
    Option,
    Pool,
    Setup,
    Vectors,
    borrowed_words,
    clean,
    has_phrase,
    key,
    length_problem,
    narration_text,
    option_text,
    set_problem,
    surface,
    text_problem,
)
from gen.llm.attempts import AttemptFailure, retry
from gen.schemas import Reject
from gen.schemas.candidates import (
    CandidateItem,
    CandidateRecord,
    RestyleDraft,
    RewordDraft,
    TimedLine,
    plain_draft,
    reasons_draft,
)
from gen.text.gates import key as _key
from gen.text.statements import example_strings as _example_strings

if TYPE_CHECKING:
    from gen.generators.candidates import CandidatesConfig, Kind

STEPS = ("items in", "input checks", "distractors", "rerank", "records")
"""Funnel steps an item passes in order (``rerank`` passes through when rerank=false)."""


# --------------------------------------------------------------------------- one item


@dataclass
class ItemResult:
    out: CandidateRecord | Reject
    reached: int
    """Funnel steps passed (len(STEPS) = a record)."""
    agreement: dict[str, int] = field(default_factory=dict)


def positive_option(item: CandidateItem, kind: Kind) -> Option:
    p = item.positive
    if kind == "label_reason":
        assert p.label is not None and p.reason is not None
        return Option(option_text(p.label, p.reason), p.reason, "positive", p.time, label=p.label)
    text = p.text if p.text is not None else option_text(p.label, p.reason or "")
    return Option(text, text, "positive", p.time)


def input_problem(item: CandidateItem, cfg: CandidatesConfig) -> tuple[str, str] | None:
    """Item-level problems no regeneration fixes."""
    p = item.positive
    if cfg.kind == "label_reason":
        if p.label is None or p.reason is None:
            return "no_label_reason", "label_reason needs a positive with label and reason"
        if p.label not in cfg.taxonomy:
            return "label_not_in_taxonomy", f"{p.label!r} is not one of {cfg.taxonomy}"
    q = _key(item.question)
    for w in item.withhold:
        if has_phrase(_key(w), q):
            return "withheld_visible", f"the question holds the withheld text {w!r}"
        if isinstance(item.context, str) and has_phrase(_key(w), _key(item.context)):
            return "withheld_visible", f"the context holds the withheld text {w!r}"
    core = p.reason if cfg.kind == "label_reason" else (p.text or p.reason)
    if isinstance(item.context, str) and core and has_phrase(_key(core), _key(item.context)):
        return "positive_in_context", "the free-text context states the positive"
    return None


def prompt_lines(lines: list[TimedLine], numbered: bool) -> list[str]:
    return [
        f"{i + 1}. {fmt_time(x.t)} | {x.text}" if numbered else f"{fmt_time(x.t)} | {x.text}"
        for i, x in enumerate(lines)
    ]


MODEL_STAGE = {"distractors": "writer", "reasons": "writer", "reword": "rewording"}
"""Each call's stage -> the stage whose model it uses (``stages.<stage>.llm``)."""


def _fill(
    ctx: RunContext,
    pool: Pool,
    budget: int,
    stage: str,
    call: Callable[[int], Any],
    offer: Callable[[Any], None],
    done: Callable[[], bool] | None = None,
    one_option: bool = False,
) -> None:
    """Calls (at most ``budget``) until the pool is full (or ``done``): each answer's options are
    offered to the pool, which counts the ones it turns away; the model's failures are counted
    and kept on the pool (the last one names a reject). ``one_option``: each call writes one
    option, so the calls for every option the pool misses go out at once (the pool cannot be
    full before the last of them is offered, so no call is wasted) and their answers are offered
    in call order, as one call at a time would."""
    finished = done or (lambda: pool.full)
    if finished():
        return

    def check(draft: Any) -> None:
        offer(draft)
        if not finished():
            raise AttemptFailure(stage, "pool_short", "the pool is not full yet", counts=[])

    def failed(f: AttemptFailure) -> None:
        if f.llm:
            pool.llm_errors.append(f)

    try:
        retry(
            call,
            check,
            budget=budget,
            stage=stage,
            count=ctx.count,
            failed=failed,
            ahead=(lambda: pool.room - len(pool.items)) if one_option else None,
            fan=ctx.map,
        )
    except AttemptFailure:
        pass


def source_order(s: Setup, seed: int) -> list[int]:
    """The lines a generated option is based on, in the order they are tried: a seeded shuffle of
    the allowed lines, those whose length is within ``length_ratio`` of the positive first."""
    order = list(s.allowed)
    random.Random(seed).shuffle(order)
    size = s.size(s.positive.text)
    fits = [
        j
        for j in order
        if length_problem([size, s.size(narration_text(s.lines[j].text))], s.cfg.length_ratio)
        is None
    ]
    order = fits + [j for j in order if j not in fits]
    if not s.groups:
        return order
    # one line of each source group before a second of any: the first calls are all usable
    seen: Counter[int] = Counter()
    rank = {}
    for j in order:
        g = s.groups.get(j)
        rank[j] = 0 if g is None else seen[g]
        if g is not None:
            seen[g] += 1
    return sorted(order, key=rank.__getitem__)


def generate(
    ctx: RunContext, cfg: CandidatesConfig, index: int, item: CandidateItem, s: Setup, room: int
) -> Pool:
    """Generated wrong options. On a timed context (``cite_sources``) code picks the moments and
    one call each rewrites a moment in the positive's style (at most ``attempts`` x room moments
    tried); otherwise one call writes the missing options from the whole context, ``attempts``
    times at most."""
    pool = Pool(s, room, ctx.count)
    if cfg.cite_sources and s.lines:
        order = source_order(s, ctx.seed(index, "sources"))[: cfg.attempts * room]

        def restyle(a: int) -> tuple[int, RestyleDraft]:
            j = order[a]
            msgs = ctx.prompts.render(
                "candidates/restyle.jinja",
                positive=s.positive.text,
                line=prompt_lines(s.lines, False)[j],
            )
            s.examples |= _example_strings(msgs)
            seed = ctx.seed(index, "distractor", j)
            return j, ctx.stage_llm(MODEL_STAGE["distractors"]).structured(
                msgs, RestyleDraft, seed=seed, max_tokens=cfg.draft_tokens
            )

        def offer_line(answer: tuple[int, RestyleDraft]) -> None:
            j, draft = answer
            text = clean(draft.text)
            pool.offer(Option(text, text, "generated", s.lines[j].t, line=j))

        _fill(ctx, pool, len(order), "distractors", restyle, offer_line, one_option=True)
        return pool

    def write(a: int) -> Any:
        need = room - len(pool.items)
        msgs = ctx.prompts.render(
            "candidates/generated.jinja",
            lines=prompt_lines(s.lines, False),
            question=item.question,
            text=item.context if isinstance(item.context, str) else "",
            positive=s.positive.text,
            others=s.others,
            need=need,
        )
        s.examples |= _example_strings(msgs)
        seed = ctx.seed(index, "distractors", a)
        return ctx.stage_llm(MODEL_STAGE["distractors"]).structured(
            msgs, plain_draft(need), seed=seed, max_tokens=cfg.draft_tokens
        )

    def offer(draft: Any) -> None:
        for d in draft.distractors:
            text = clean(d)
            pool.offer(Option(text, text, "generated"))

    _fill(ctx, pool, cfg.attempts, "distractors", write, offer)
    return pool


def label_reasons(
    ctx: RunContext, cfg: CandidatesConfig, index: int, item: CandidateItem, s: Setup
) -> Pool:
    p = item.positive
    others = [x for x in cfg.taxonomy if x != p.label]
    if cfg.options - 1 < len(
        others
    ):  # a smaller set: the other labels sampled with the item's seed
        others = sorted(
            random.Random(ctx.seed(index, "labels")).sample(others, cfg.options - 1),
            key=cfg.taxonomy.index,
        )
    pool = Pool(s, len(others), ctx.count)
    missing: list[str] = []

    def unlabelled() -> list[str]:
        return [x for x in others if x not in {o.label for o in pool.items}]

    def write(a: int) -> Any:
        missing[:] = unlabelled()
        msgs = ctx.prompts.render(
            "candidates/label_reason.jinja",
            lines=prompt_lines(s.lines, False),
            text=item.context if isinstance(item.context, str) else "",
            label=p.label,
            reason=p.reason,
            labels=missing,
        )
        s.examples |= _example_strings(msgs)
        schema = reasons_draft(tuple(missing))
        seed = ctx.seed(index, "reasons", a)
        llm = ctx.stage_llm(MODEL_STAGE["reasons"])
        return llm.structured(msgs, schema, seed=seed, max_tokens=cfg.draft_tokens)

    def offer(draft: Any) -> None:
        for j, label in enumerate(missing):
            reason = clean(getattr(draft, f"l{j}"))
            pool.offer(Option(option_text(label, reason), reason, "generated", label=label))

    _fill(ctx, pool, cfg.attempts, "reasons", write, offer, done=lambda: not unlabelled())
    pool.items.sort(key=lambda o: cfg.taxonomy.index(o.label or ""))
    return pool


def sample(ctx: RunContext, item: CandidateItem, s: Setup, room: int, rng: random.Random) -> Pool:
    """``room`` negatives drawn without replacement with the item's seeded generator from the
    pool left once every annotated id (the positive's, the other accepted items') is taken out
    (VII: the segment's recommendations the participant did not accept), passed through as the
    participant saw them: no check turns one away and no surface is changed, since each rule or
    rewrite would change what was sampled or edit participant-approved text. The pool is short
    when fewer than ``room`` are left (``too_few_negatives``)."""
    pool = Pool(s, room, ctx.count)
    banned = {x for x in [item.positive.id, *(o.id for o in item.others)] if x is not None}
    draw = [n for n in item.negatives if n.id not in banned]
    if len(draw) < len(item.negatives):
        ctx.count("sampled.annotated_id_excluded", len(item.negatives) - len(draw))
    if len(draw) >= room:
        pool.items = [
            Option(n.text, n.text, f"sampled:{n.id}", n.time) for n in rng.sample(draw, room)
        ]
    return pool


def reword(
    ctx: RunContext, cfg: CandidatesConfig, index: int, s: Setup, chosen: list[Option]
) -> tuple[Option, float | None]:
    """The positive reworded to the distractors' phrasing when the rewording keeps its meaning and
    the set still passes every rule; else the original (counted why)."""
    pos = s.positive
    msgs = ctx.prompts.render(
        "candidates/reword.jinja", positive=pos.core, others=[o.core for o in chosen]
    )
    s.examples |= _example_strings(msgs)

    def ask(a: int) -> RewordDraft:
        seed = ctx.seed(index, "reword", a)
        return ctx.stage_llm(MODEL_STAGE["reword"]).structured(
            msgs, RewordDraft, seed=seed, max_tokens=cfg.reword_tokens
        )

    def check(draft: RewordDraft) -> tuple[Option, float | None]:
        core = clean(draft.text)
        why = text_problem(core, s.examples)
        if why is None and _key(core) == _key(pos.core):
            ctx.count("reword.unchanged")
            return pos, 1.0
        if why is None and borrowed_words(core, [o.core for o in chosen], pos.core):
            # pulled toward the distractors: the positive would be the one most like them
            why = "borrowed"
        sim = float(s.vectors.sim(core, [pos.core])[0]) if why is None else 0.0
        if why is None and sim < cfg.reword_min_similarity:
            why = "meaning_changed"
        new = Option(
            surface(option_text(pos.label, core), pos.text),
            core,
            "positive",
            pos.time,
            label=pos.label,
        )
        if why is None:
            p = set_problem(s, [new, *chosen])
            why = p[0] if p else None
        if why is None:
            ctx.count("reword.accepted")
            return new, round(sim, 4)
        raise AttemptFailure("reword", why, "the rewording is not kept")

    try:
        return retry(ask, check, budget=cfg.attempts, stage="reword", count=ctx.count)
    except AttemptFailure:
        ctx.count("reword.kept_original")
        return pos, None


def hidden_lines(s: Setup, item: CandidateItem, options: list[Option]) -> set[int]:
    """Context lines the candidate must not see: lines naming the positive or holding a withheld
    text, the lines options were based on, lines equal to an option, and the lines of the other
    annotated items (each is the answer of its own item: shown here, it would leak across items)."""
    keys = (
        {_key(o.core) for o in options}
        | {_key(o.text) for o in options}
        | {_key(o) for o in s.others}
    )
    out = set()
    for j, ln in enumerate(s.lines):
        k = key(ln.text)
        if (
            k in s.named
            or k in keys
            or any(has_phrase(_key(w), _key(ln.text)) for w in item.withhold)
        ):
            out.add(j)
    return out | {o.line for o in options if o.line is not None} | set(item.hide)


def setup(ctx: RunContext, cfg: CandidatesConfig, item: CandidateItem, vectors: Vectors) -> Setup:
    annotated = positive_option(item, cfg.kind)
    # sampled: the participant-approved text as it is (no surface of ours)
    pos = (
        annotated
        if cfg.kind == "sampled"
        else replace(annotated, text=surface(annotated.text, annotated.text))
    )
    lines = item.lines
    pk = _key(pos.core)
    named: set[str] = set()
    if lines:
        lk = [key(x.text) for x in lines]
        sims = vectors.sim(pos.core, [narration_text(x.text) for x in lines])
        named = {
            k
            for k, c in zip(lk, sims, strict=True)
            if k == pk or has_phrase(pk, k) or c >= cfg.max_similarity
        }
    others = [o.text for o in item.others]
    other_keys = {_key(o) for o in others}
    counts = Counter(key(x.text) for x in lines)
    repeated = near_repeats([narration_text(x.text) for x in lines], vectors, cfg.max_similarity)
    allowed = [
        j
        for j, x in enumerate(lines)
        if key(x.text) not in named
        and key(x.text) not in other_keys
        and counts[key(x.text)] == 1
        and j not in repeated
        and not any(has_phrase(_key(w), _key(x.text)) for w in item.withhold)
        and (item.sources is None or j in item.sources)
        and j not in item.hide
    ]
    return Setup(
        cfg,
        pos,
        others,
        named,
        list(item.withhold),
        vectors,
        set(),
        lines,
        allowed,
        annotated=annotated.text,
        groups={j: g for g, js in enumerate(item.source_groups) for j in js},
    )


def near_repeats(texts: list[str], vectors: Vectors, threshold: float) -> set[int]:
    """Lines with another line at or above ``threshold`` cosine: a wrong option based on one would
    stay visible in its near-twin, and a candidate could eliminate it."""
    if len(texts) < 2:
        return set()
    v = vectors(texts)
    sims = v @ v.T
    np.fill_diagonal(sims, -1)
    return {j for j in range(len(texts)) if float(sims[j].max()) >= threshold}


def process(
    ctx: RunContext, cfg: CandidatesConfig, index: int, item: CandidateItem, at: int
) -> ItemResult:
    """One item through every step: a record, or a reject naming the step and the reason. The
    answer goes to option ``at`` (balanced over the run's items of its task,
    :class:`gen.formats.mcq.Positions`)."""
    k = cfg.options
    record_id = ctx.record_id(index)

    def reject(
        step: str, stage: str, reason: str, detail: str, raw: str | None = None
    ) -> ItemResult:
        return ItemResult(
            Reject(
                record_id=record_id,
                index=index,
                stage=stage,
                reason=reason,
                detail=f"item {item.item_id}: {detail}",
                raw=raw,
            ),
            STEPS.index(step),
        )

    problem = input_problem(item, cfg)
    if problem:
        return reject("input checks", "input", *problem)
    vectors = Vectors(ctx.embedder)
    s = setup(ctx, cfg, item, vectors)
    if s.positive.text != s.annotated:
        ctx.count("surface.changed")
    usable = len({s.groups.get(j, -1 - j) for j in s.allowed})  # one per source group
    if cfg.kind == "generated" and cfg.cite_sources and s.lines and usable < k - 1:
        return reject(
            "input checks",
            "input",
            "too_few_sources",
            f"{usable} context lines (or source groups) a wrong option may be based on, "
            f"need {k - 1}",
        )
    shuffle_seed = ctx.seed(index, "sample" if cfg.kind == "sampled" else "shuffle")
    rng = random.Random(shuffle_seed)
    room = k - 1 + (cfg.rerank_spares if cfg.rerank else 0)
    if cfg.kind == "generated":
        pool = generate(ctx, cfg, index, item, s, room)
    elif cfg.kind == "label_reason":
        pool = label_reasons(ctx, cfg, index, item, s)
    else:
        pool = sample(ctx, item, s, room, rng)
    need = k - 1
    if len(pool.items) < need:
        errors = pool.llm_errors
        fallback = (
            errors[-1].reason
            if errors
            else ("too_few_negatives" if cfg.kind == "sampled" else "too_few_distractors")
        )
        return reject(
            "distractors",
            cfg.kind,
            pool.reason(fallback),
            pool.detail(need),
            errors[-1].raw if errors else None,
        )
    chosen = pool.items[:need]
    if cfg.kind == "sampled":
        texts = [key(o.text) for o in (s.positive, *chosen)]
        if len(set(texts)) < len(
            texts
        ):  # refused, never rewritten: two options would read the same
            return reject(
                "distractors",
                cfg.kind,
                "duplicate_options",
                "two of the drawn options read the same: "
                f"{[o.text for o in (s.positive, *chosen)]}",
            )
    rerank_info: dict[str, Any] | None = None
    agreement: dict[str, int] = {}
    if cfg.rerank:
        texts = [s.positive.text, *(o.text for o in pool.items)]
        try:
            draft, calls = rr.call(
                ctx.stage_llm("rerank"),
                ctx.prompts,
                rr.render_context(item.context),
                texts,
                seed=lambda a: ctx.seed(index, "rerank", a),
                attempts=cfg.rerank_attempts,
                max_tokens=cfg.rerank_tokens,
                count=ctx.count,
            )
        except AttemptFailure as e:
            return reject(
                "rerank", "rerank", e.reason, f"{e.detail} (after {e.attempts} calls)", e.raw
            )
        confirmed, emb = rr.pairs_at(
            ctx.embedder, texts, cfg.confirm_similarity, cfg.max_similarity
        )
        held, unconfirmed = rr.supported(draft, confirmed)
        ctx.count("rerank.unconfirmed_duplicates", len(unconfirmed))
        res = rr.resolve(held, len(texts), protect=0, count=ctx.count)
        keep = [i for i in res.kept if i != 0]
        if len(keep) < need:
            return reject(
                "rerank",
                "rerank",
                "too_few_after_dedup",
                f"{len(keep)} wrong options left after removing {len(res.removed)} duplicates, "
                f"need {need}",
            )
        chosen = [pool.items[i - 1] for i in keep[:need]]
        ctx.count("rerank.ungrounded_used", sum(not res.grounded[i] for i in keep[:need]))
        agreement = rr.agreement(len(texts), rr.resolve(draft, len(texts), protect=0).groups, emb)
        names = ["positive", *(f"d{j + 1}" for j in range(len(pool.items)))]
        rerank_info = {
            "pool": names,
            "order": [names[i] for i in res.order],
            "removed": [[names[i], names[j]] for i, j in res.removed],
            "unconfirmed_duplicates": [[names[i], names[j]] for i, j in unconfirmed],
            "ungrounded": [names[i] for i, g in enumerate(res.grounded) if not g],
            "reason": draft.reason,
            "calls": calls,
            "embedding_duplicates": [[names[a], names[b]] for a, b in emb],
            "agreement": agreement,
        }
    positive, sim = s.positive, None
    if cfg.reword_positive and cfg.kind != "sampled":
        positive, sim = reword(ctx, cfg, index, s, chosen)
    options = [positive, *chosen]
    order = arrange(len(options), at, rng)
    hide = hidden_lines(s, item, [s.positive, *options])
    shown = [options[i] for i in order]
    visible: dict[str, Any] = {
        "context": "\n".join(fmt_line_of(x) for j, x in enumerate(s.lines) if j not in hide)
        if s.lines
        else (item.context if isinstance(item.context, str) else "")
    }
    privileged: dict[str, Any] = {
        "positive": s.annotated,
        "option_times": {str(j): o.time for j, o in enumerate(shown) if o.time is not None},
        "sources": {
            str(j): fmt_line_of(s.lines[o.line]) for j, o in enumerate(shown) if o.line is not None
        },
    }
    if item.withhold:
        privileged["withheld"] = list(item.withhold)
    rec = CandidateRecord(
        item_id=record_id,
        question_type=item.task,
        question=item.question,
        options=[o.text for o in shown],
        answer=order.index(0),
        origins=[o.origin for o in shown],
        group=item.group or item.item_id,
        visible=visible,
        privileged=privileged,
        source_item=item.item_id,
        kind=cfg.kind,
        reworded=positive is not s.positive,
        reword_similarity=sim,
        window=item.window.model_dump() if item.window else None,
        others=[o.text for o in item.others],
        shuffle_seed=shuffle_seed,
        rerank=rerank_info,
    )
    return ItemResult(rec, len(STEPS), agreement)


def fmt_line_of(x: TimedLine) -> str:
    """A context line as the candidate sees it (EgoToM's ``    MMm:SSs | text``)."""
    return fmt_line(Line(x.t, x.text, "?"))
