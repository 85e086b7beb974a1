"""The checks a model runs on a drafted unit: identification (can a judge name the referent from
the camera text alone) and the semantic leak (does the user's speech give it away)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gen.contextbench.rules import (
    Problem,
    word_match,
)
from gen.errors import LLMOutputError
from gen.generators.scenarios.skeleton import Skeleton
from gen.schemas.scenarios import (
    IdentifyDraft,
)

if TYPE_CHECKING:
    pass

from gen.generators.scenarios.examples import dumps, examples, situations_of

if TYPE_CHECKING:
    from gen.generators.scenarios.stages import Unit, Writer


# --------------------------------------------------------------------------- model checks


def identify_frames(sk: Skeleton, sit: dict[str, Any]) -> list[tuple[str, str]]:
    """(camera field, gold name) the identification check applies to: every frame that shows a
    named referent. Not: a clarify turn 2 (hidden on purpose), a turn 2 without a referent of its
    own (an absent referent's abstain scenario: the place without it)."""
    frames = []
    if sk.change_type == "cross_session_reference":
        frames += [("context_image", sit["earlier"]["name"]), ("turn_1_image", sit["meanwhile"])]
    else:
        frames.append(("turn_1_image", sit["earlier"]["name"]))
    if sk.target_context != "clarify" and "now" in sit:
        frames.append(("turn_2_image", sit["now"]["name"]))
        if sk.pair_id is not None:
            frames.append(("turn_2_image_b", sit["now"]["name"]))
    return frames


def identification(w: Writer, u: Unit, cam: dict[str, Any], attempt: int) -> list[Problem]:
    """Each model names the thing from each camera text alone; a frame passes when
    ``identify_quorum`` of the models answer within ``identify_min_cosine`` of the gold name.
    Every answer is recorded on the unit."""
    cfg, ctx = w.cfg, w.ctx
    ex = examples()[0]
    shown = {
        "description": ex["camera"]["turn_2_image"],
        "answer": dumps({"name": ex["situations"]["now"]["name"]}),
    }
    jobs = [
        (f, gold, label, llm)
        for f, gold in identify_frames(u.lead, u.sit or {})
        for label, llm in w.panel
    ]

    def ask(job: tuple[str, str, str, Any]) -> str | None:
        f, _, label, llm = job
        messages = ctx.prompts.render("scenarios/identify.jinja", example=shown, description=cam[f])
        try:
            return llm.structured(
                messages,
                IdentifyDraft,
                seed=ctx.seed(u.index, "identify", f, label, attempt),
                max_tokens=48,
            ).name
        except LLMOutputError as e:
            ctx.count(f"identify.llm_{e.reason}")
            return None

    answers = ctx.map(ask, jobs)
    texts = [t for (_, gold, _, _), a in zip(jobs, answers, strict=True) for t in (a or "", gold)]
    with w.embed_lock:
        vecs = ctx.embedder.encode(texts) if texts else None
    rows: list[dict[str, Any]] = []
    by_frame: dict[str, list[bool]] = {}
    for j, ((f, gold, label, _), a) in enumerate(zip(jobs, answers, strict=True)):
        cos = float(vecs[2 * j] @ vecs[2 * j + 1]) if a and vecs is not None else None
        ok = cos is not None and cos >= cfg.identify_min_cosine
        rows.append(
            {
                "field": f,
                "gold": gold,
                "model": label,
                "answer": a,
                "cosine": None if cos is None else round(cos, 4),
                "pass": ok,
                "attempt": attempt,
            }
        )
        by_frame.setdefault(f, []).append(ok)
    u.identification += rows
    failed = [
        f
        for f, oks in by_frame.items()
        if not (any(oks) if cfg.identify_quorum == "any" else all(oks))
    ]
    problems = [
        (
            "not_identifiable",
            f"{f}: "
            + "; ".join(
                f"{r['model']} said {r['answer']!r} (cosine {r['cosine']})"
                for r in rows
                if r["field"] == f and r["attempt"] == attempt
            ),
        )
        for f in failed
    ]
    u.trace.record("camera", ["not_identifiable"], problems)
    return problems


def gold_list_of(target: str) -> str:
    return {
        "current": "current_answers",
        "prior": "prior_answers",
        "clarify": "clarify_indicators",
        "abstain": "abstain_indicators",
    }[target]


def semantic_leak(
    w: Writer,
    u: Unit,
    member: Skeleton,
    turn_1_user: str,
    turn_2_user: str,
    stage: str,
    attempt: int,
) -> list[Problem]:
    """MMStar-style: the candidate's conversation without its camera blocks, to each model
    (greedy); a turn-2 reply that hits the target's gold list (word boundary) leaks."""
    cfg, ctx = w.cfg, w.ctx
    if member.target_context not in cfg.leak_targets:
        return []
    tokens = situations_of(member, u.sit or {})["gold"][gold_list_of(member.target_context)]

    def ask(job: tuple[str, Any]) -> dict[str, Any]:
        label, llm = job
        row: dict[str, Any] = {"member": member.scenario_id, "model": label, "attempt": attempt}
        try:
            first = ctx.prompts.render(
                "scenarios/leak.jinja", turns=[{"user": turn_1_user, "assistant": None}]
            )
            reply_1 = llm.complete(
                first,
                seed=ctx.seed(u.index, stage, "leak", label, attempt, 1),
                max_tokens=cfg.leak_tokens,
                temperature=0.0,
            )
            second = ctx.prompts.render(
                "scenarios/leak.jinja",
                turns=[
                    {"user": turn_1_user, "assistant": reply_1},
                    {"user": turn_2_user, "assistant": None},
                ],
            )
            reply_2 = llm.complete(
                second,
                seed=ctx.seed(u.index, stage, "leak", label, attempt, 2),
                max_tokens=cfg.leak_tokens,
                temperature=0.0,
            )
        except LLMOutputError as e:
            ctx.count(f"leak.llm_{e.reason}")
            return {**row, "error": e.detail, "hits": [], "leak": False}
        hits = [t for t in tokens if t.strip() and word_match(t, reply_2)]
        return {**row, "reply_1": reply_1, "reply_2": reply_2, "hits": hits, "leak": bool(hits)}

    rows = ctx.map(ask, w.panel)
    u.leak += rows
    problems = [
        ("semantic_leak", f"{r['model']} answered without the camera and hit {r['hits'][:3]}")
        for r in rows
        if r["leak"]
    ]
    u.trace.record(stage, ["semantic_leak"], problems)
    return problems
