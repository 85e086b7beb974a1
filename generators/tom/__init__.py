"""Causal goal / belief / action QA with counterfactual wrong answers (EgoToM, Li et al. 2025).

A dense narration timeline of one clip becomes three multiple-choice questions about the camera
wearer C at a transition moment. The truth is read off the *future* of the timeline; the wrong
answers are counterfactuals proposed from the *past* only, conditioned on the true goal.

Stages (one prompt file each under ``prompts/tom/``): 1 clip selection (code), 2 narration
analysis (the model picks the transition by line number from the lines code allows, then
writes the goal, three next actions and the belief), 3 counterfactual goals, 4 counterfactual
(belief, actions) pairs, 5 action simplification, 6 filters (keywords, time window, length,
similarity), 7 assembly (surface forms, seeded shuffles). Each clip gives a list of questions
and rejects; the funnel of survivors per step and question type goes to the manifest.

The package: :mod:`.forms` (the statements' surface forms and the text checks, pure: no model),
:mod:`.stages` (the LLM stages 2-5 with their pools and checks, and the stage-6 filters),
:mod:`.config` (the options); this module holds the input, clip selection, the funnel, assembly,
one clip's run (:func:`process_clip`) and the generator.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gen.engine.registry import generator
from gen.engine.runner import Plan, RunContext, derive_seed
from gen.formats.mcq import (
    EGOTOM_CHOICES,
    EGOTOM_QUESTION,
    EGOTOM_TYPES,
    answer_position,
    arrange,
    egotom_columns,
    write_egotom_csv,
)
from gen.formats.timelines import Clip, fmt_line, fmt_time, input_files, read_timelines
from gen.generators.tom.config import TomConfig
from gen.generators.tom.stages import (
    Truth,
    analysis,
    counterfactual_beliefs_actions,
    counterfactual_goals,
    in_window,
    keyword_hits,
    length_problem,
    numbered,
    similarity_problem,
    simplify,
)
from gen.llm.attempts import AttemptFailure
from gen.schemas import Reject
from gen.schemas.tom import QuestionType, TomQuestion

__all__ = ["TomConfig", "candidates", "plan", "read_input", "selection", "tom"]


# --------------------------------------------------------------------------- input


def plan(cfg: TomConfig) -> Plan:
    """One index per clip: every clip of the input, or the first ``n``."""
    clips = read_input(cfg)
    return Plan(len(clips) if cfg.n is None else min(cfg.n, len(clips)), clips)


def read_input(cfg: TomConfig) -> list[Clip]:
    """Every clip of ``input=``, in input order."""
    path = cfg.input_path()
    assert path is not None
    return read_timelines(path, cfg.input_format, tuple(cfg.passes))


# --------------------------------------------------------------------------- stage 1: selection


def selection(clip: Clip, cfg: TomConfig) -> tuple[list[tuple[str, str]], list[str]]:
    """Which selection rules the clip fails (reason, detail), and which could not be checked.

    EgoToM CSV clips hold only the lines up to EgoToM's query moment (``clip_end_time -
    clip_start_time`` is that context's length, about 3 minutes, not the 5-minute clip's), and
    EgoToM already selected them on the whole clip. The duration and line-count rules describe
    the whole clip, so they are not applicable there; the tag and C-share rules are checked on
    the given lines.
    """
    fails: list[tuple[str, str]] = []
    skipped: list[str] = []
    whole = clip.fmt != "egotom_csv"
    n = len(clip.lines)
    if n == 0:
        return [("empty", "no narration lines")], skipped
    if not whole or clip.duration is None:
        skipped.append("duration")
    elif clip.duration < cfg.min_duration:
        fails.append(("too_short", f"{clip.duration:.0f} s < {cfg.min_duration:.0f} s"))
    if not whole:
        skipped.append("lines")
    elif n < cfg.min_lines:
        fails.append(("too_few_lines", f"{n} lines < {cfg.min_lines}"))
    elif cfg.max_lines is not None and n > cfg.max_lines:
        fails.append(("too_many_lines", f"{n} lines > {cfg.max_lines}"))
    tags = [t.lower() for t in cfg.exclude_tags]
    tagged = [ln for ln in clip.lines if any(t in ln.text.lower() for t in tags)]
    if tagged:
        fails.append(
            (
                "uncertain",
                f"{len(tagged)} line(s) tagged {', '.join(cfg.exclude_tags)}, "
                f"first at {fmt_time(tagged[0].t)}: {tagged[0].text[:60]}",
            )
        )
    share = sum(ln.speaker == "C" for ln in clip.lines) / n
    if share < cfg.min_c_share:
        fails.append(("few_c_lines", f"{share:.0%} of lines about C < {cfg.min_c_share:.0%}"))
    return fails, skipped


def candidates(clip: Clip, cfg: TomConfig) -> list[int]:
    """0-based line positions the transition may take: the latter half of the lines, with
    ``min_future_lines`` lines at and after it."""
    n = len(clip.lines)
    return list(range(n // 2, n - cfg.min_future_lines + 1))


# --------------------------------------------------------------------------- funnel


def steps(cfg: TomConfig) -> tuple[str, ...]:
    """Funnel steps in the order a clip goes through them (the time window comes before the
    analysis when it restricts the lines offered). A count is of items that passed the step."""
    window, analysis_ = (
        ("time window", "analysis") if cfg.restrict_to_window else ("analysis", "time window")
    )
    return (
        "clips in",
        "selected",
        window,
        analysis_,
        "counterfactual",
        "simplify",
        "keyword filter",
        "length filter",
        "similarity filter",
    )


STAGE_STEP = {
    "parse": "selected",
    "select": "selected",
    "analysis": "analysis",
    "filter.time_window": "time window",
    "counterfactual_goals": "counterfactual",
    "counterfactual_beliefs_actions": "counterfactual",
    "simplify": "simplify",
    "filter.keyword": "keyword filter",
    "filter.length": "length filter",
    "filter.similarity": "similarity filter",
}
"""Reject stage -> the funnel step its item failed to pass."""


@dataclass
class ClipResult:
    items: list[TomQuestion | Reject]
    reached: dict[str, int]
    """Per question type, how many funnel steps it passed (len(STEPS) = a question)."""
    selection_fail: str | None = None
    skipped_rules: list[str] = field(default_factory=list)
    seconds: float = 0.0
    csv_rows: dict[str, dict[str, Any]] = field(default_factory=dict)


def funnel_rows(results: list[ClipResult], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per step, how many clips (then questions) of each type passed it."""
    rows = []
    for s, step in enumerate(names):
        rows.append(
            {"step": step, **{q: sum(r.reached[q] > s for r in results) for q in EGOTOM_TYPES}}
        )
    return rows


def funnel_lines(rows: list[dict[str, Any]], excluded: Counter[str]) -> list[str]:
    out = [
        "[tom] funnel (clips, then questions per type)",
        f"  {'step':<20}{'goal':>8}{'belief':>8}{'actions':>9}",
    ]
    out += [f"  {r['step']:<20}{r['goal']:>8}{r['belief']:>8}{r['actions']:>9}" for r in rows]
    if excluded:
        out.append(
            "  excluded at selection: " + ", ".join(f"{k}={v}" for k, v in sorted(excluded.items()))
        )
    return out


# --------------------------------------------------------------------- stage 7: assembly + one clip


def assemble(
    ctx: RunContext,
    index: int,
    clip: Clip,
    q: QuestionType,
    truth_text: str,
    wrongs: list[str],
    origins: list[str],
    truth: Truth,
    extra: dict[str, Any] | None = None,
) -> TomQuestion:
    """A question with its options in a seeded order: the truth at a position balanced per
    question type over the clips (:func:`gen.formats.mcq.answer_position`), the wrong options
    shuffled."""
    options = [truth_text, *wrongs]
    at = answer_position(derive_seed(ctx.cfg.seed, ctx.name, "positions"), q, index, len(options))
    order = arrange(len(options), at, random.Random(ctx.seed(index, q, "shuffle")))
    tline = clip.lines[truth.index]
    return TomQuestion(
        item_id=ctx.record_id(index, q),
        question_type=q,
        question=EGOTOM_QUESTION[q],
        options=[options[i] for i in order],
        answer=order.index(0),
        origins=[(["truth", *origins])[i] for i in order],
        group=clip.clip_id,
        visible={"context": context_text(clip, truth.index), "query_time": fmt_time(tline.t)},
        privileged={
            "transition": fmt_line(tline),
            "future": "\n".join(fmt_line(ln) for ln in clip.lines[truth.index :]),
            "truth": {"goal": truth.goal, "belief": truth.belief, "actions": truth.actions},
            "summary": clip.summary,
            "source": clip.source,
            **(extra or {}),
        },
        clip_id=clip.clip_id,
        vuid=clip.vuid,
        input_format=clip.fmt,
        clip_start_time=clip.start_sec,
        clip_end_time=round(clip.start_sec + tline.t, 6),
        query_sec=tline.t,
    )


def context_text(clip: Clip, upto: int) -> str:
    """The visible context: narrations strictly before the transition line."""
    return "\n".join(fmt_line(ln) for ln in clip.lines[:upto])


def csv_row(rec: TomQuestion, truth_text: str) -> dict[str, Any]:
    q = rec.question_type
    letters = [c.rsplit("_", 1)[1] for c in egotom_columns(q) if c.startswith(f"{q}_choice_")]
    return {
        "vuid": rec.vuid,
        "cuid": rec.clip_id,
        "narrations_in_context": rec.visible["context"],
        f"gt_{q}": truth_text,
        **{f"{q}_choice_{x}": o for x, o in zip(letters, rec.options, strict=True)},
        "clip_start_time": rec.clip_start_time,
        "clip_end_time": rec.clip_end_time,
    }


def process_clip(ctx: RunContext, cfg: TomConfig, index: int, clip: Clip) -> ClipResult:
    """All stages for one clip: its questions and rejects, and how far each type got."""
    t0 = time.perf_counter()
    names = steps(cfg)
    res = ClipResult([], dict.fromkeys(EGOTOM_TYPES, 1))
    per_q: dict[str, TomQuestion | Reject] = {}

    def passed(step: str, *qs: str) -> None:
        for q in qs or EGOTOM_TYPES:
            res.reached[q] = names.index(step) + 1

    def clip_reject(stage: str, reason: str, detail: str, raw: str | None = None) -> ClipResult:
        res.items = [
            Reject(
                record_id=ctx.record_id(index),
                index=index,
                stage=stage,
                reason=reason,
                detail=f"clip {clip.clip_id}: {detail}",
                raw=raw,
            )
        ]
        res.reached = dict.fromkeys(EGOTOM_TYPES, names.index(STAGE_STEP[stage]))
        res.seconds = time.perf_counter() - t0
        return res

    def q_reject(q: str, stage: str, reason: str, detail: str, raw: str | None = None) -> None:
        per_q[q] = Reject(
            record_id=ctx.record_id(index, q),
            index=index,
            stage=stage,
            reason=reason,
            detail=f"clip {clip.clip_id}, {q} question: {detail}",
            raw=raw,
        )
        res.reached[q] = names.index(STAGE_STEP[stage])

    # stage 1: parse problems and selection
    if clip.problems:
        reason = "malformed_clip" if not clip.lines else "malformed_line"
        more = f" (+{len(clip.problems) - 3} more)" if len(clip.problems) > 3 else ""
        return clip_reject("parse", reason, "; ".join(clip.problems[:3]) + more)
    fails, res.skipped_rules = selection(clip, cfg)
    if fails:
        res.selection_fail = fails[0][0]
        return clip_reject("select", fails[0][0], "; ".join(d for _, d in fails))
    passed("selected")

    # stage 2 and the time window (before it when it restricts the lines offered, else after)
    allowed = candidates(clip, cfg)
    if not allowed:
        return clip_reject(
            "analysis",
            "no_candidate_transition",
            f"{len(clip.lines)} lines leave no latter-half line with {cfg.min_future_lines} "
            "lines at and after it",
        )
    if cfg.restrict_to_window and cfg.window:
        inside = [i for i in allowed if in_window(clip.lines[i].t, cfg.window)]
        if not inside:
            lo, hi = cfg.window
            return clip_reject(
                "filter.time_window",
                "no_line_in_window",
                f"latter-half lines span {fmt_time(clip.lines[allowed[0]].t)}-"
                f"{fmt_time(clip.lines[allowed[-1]].t)}, window {fmt_time(lo)}-{fmt_time(hi)}",
            )
        allowed = inside
        passed("time window")
    try:
        truth = analysis(ctx, cfg, index, clip, allowed)
    except AttemptFailure as e:
        return clip_reject(e.stage, e.reason, e.detail, e.raw)
    passed("analysis")
    tline = clip.lines[truth.index]
    if not cfg.restrict_to_window:
        if not in_window(tline.t, cfg.window):
            lo, hi = cfg.window  # type: ignore[misc]
            return clip_reject(
                "filter.time_window",
                "transition_outside_window",
                f"transition at {fmt_time(tline.t)} outside {fmt_time(lo)}-{fmt_time(hi)}",
            )
        passed("time window")
    past = numbered(clip)[: truth.index]  # the counterfactual stages never see the future

    # stages 3 and 4 are independent (concurrent on a server), 5 follows 4
    def goals() -> list[str] | AttemptFailure:
        try:
            return counterfactual_goals(ctx, cfg, index, past, truth)
        except AttemptFailure as e:
            return e

    def beliefs_actions() -> Any:
        try:
            return counterfactual_beliefs_actions(ctx, cfg, index, past, truth)
        except AttemptFailure as e:
            return e

    wrong_goals, alts = ctx.map(lambda f: f(), [goals, beliefs_actions])
    choices: dict[QuestionType, tuple[str, list[str], list[str], dict[str, Any]]] = {}

    if isinstance(wrong_goals, AttemptFailure):
        q_reject("goal", wrong_goals.stage, wrong_goals.reason, wrong_goals.detail, wrong_goals.raw)
    else:
        passed("simplify", "goal")  # goals are not simplified
        kept = [g for g in wrong_goals if not keyword_hits(g, cfg.keywords)]
        hits = [g for g in wrong_goals if g not in kept]
        if hits:
            ctx.count("filter.keyword.wrong_goals_dropped", len(hits))
        need = EGOTOM_CHOICES["goal"] - 1
        if len(kept) < need:
            q_reject(
                "goal",
                "filter.keyword",
                "too_few_wrong_goals",
                f"{len(kept)} wrong goals left after dropping {hits} (need {need})",
            )
        else:
            passed("keyword filter", "goal")
            choices["goal"] = (
                truth.goal,
                kept[:need],
                ["counterfactual_goals"] * need,
                {"dropped_wrong_goals": hits},
            )

    if isinstance(alts, AttemptFailure):
        for q in ("belief", "actions"):
            q_reject(q, alts.stage, alts.reason, alts.detail, alts.raw)
    else:
        beliefs, actions, whys = alts
        stage4 = "counterfactual_beliefs_actions"
        if beliefs is None:
            q_reject(
                "belief",
                stage4,
                "no_usable_alternative",
                "; ".join(w for w in whys if w.startswith("belief")),
            )
        else:
            passed(
                "keyword filter", "belief"
            )  # beliefs are neither simplified nor keyword-filtered
            choices["belief"] = (truth.belief, beliefs, [stage4] * 3, {})
        if actions is None:
            q_reject(
                "actions",
                stage4,
                "no_usable_alternative",
                "; ".join(w for w in whys if w.startswith("actions")),
            )
        else:
            passed("counterfactual", "actions")
            changed = [False] * 3
            try:
                if cfg.simplify:
                    actions, changed = simplify(ctx, cfg, index, actions)
                passed("keyword filter", "actions")
                choices["actions"] = (truth.actions, actions, [stage4] * 3, {"simplified": changed})
            except AttemptFailure as e:
                q_reject("actions", e.stage, e.reason, e.detail, e.raw)

    # stage 6: length and similarity filters; stage 7: assembly
    for q, (truth_text, wrongs, origins, extra) in choices.items():
        problem = length_problem(truth_text, wrongs, cfg.length_ratio, cfg.length_unit)
        if problem:
            q_reject(q, "filter.length", *problem)
            continue
        passed("length filter", q)
        problem = (
            similarity_problem(ctx.embedder, [truth_text, *wrongs], cfg.max_similarity)
            if cfg.max_similarity is not None
            else None
        )
        if problem:
            q_reject(q, "filter.similarity", *problem)
            continue
        passed("similarity filter", q)
        rec = assemble(ctx, index, clip, q, truth_text, wrongs, origins, truth, extra)
        per_q[q] = rec
        res.csv_rows[q] = csv_row(rec, truth_text)
    res.items = [per_q[q] for q in EGOTOM_TYPES if q in per_q]
    res.seconds = time.perf_counter() - t0
    return res


# --------------------------------------------------------------------------- the generator


def merge_shards(
    ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]
) -> None:
    """``merge``: the funnel of all shards (counts add up; seconds are weighted means)."""
    funnels = [m["funnel"] for m in manifests]
    steps = [
        {"step": row["step"], **{q: sum(f["steps"][i][q] for f in funnels) for q in EGOTOM_TYPES}}
        for i, row in enumerate(funnels[0]["steps"])
    ]
    clips = [m["counts"].get("indices_done", m["counts"]["requested"]) for m in manifests]
    selected = [f["steps"][1]["goal"] if len(f["steps"]) > 1 else 0 for f in funnels]

    def mean(key: str, weights: list[int]) -> float:
        total = sum(weights)
        return (
            round(sum(f[key] * w for f, w in zip(funnels, weights, strict=True)) / total, 3)
            if total
            else 0.0
        )

    def added(key: str) -> dict[str, int]:
        c: Counter[str] = Counter()
        for f in funnels:
            c.update(f["selection"][key])
        return dict(sorted(c.items()))

    ctx.extra["funnel"] = {
        "steps": steps,
        "selection": {
            "excluded_by_reason": added("excluded_by_reason"),
            "rules_not_applicable": added("rules_not_applicable"),
        },
        "clips_in_input": funnels[0]["clips_in_input"],
        "seconds_per_clip": mean("seconds_per_clip", clips),
        "seconds_per_selected_clip": mean("seconds_per_selected_clip", selected),
    }


@generator(
    "tom",
    config=TomConfig,
    records=TomQuestion,
    kind="tom",
    merge=merge_shards,
    plan=plan,
    uses=lambda cfg: ("llm", "text", *(("embedder",) if cfg.max_similarity is not None else ())),
)
def tom(cfg: TomConfig, ctx: RunContext) -> Iterator[list[TomQuestion | Reject]]:
    """EgoToM causal goal/belief/action questions with counterfactual wrong answers
    (input=narrations)."""
    clips: list[Clip] = ctx.plan.data
    path = cfg.input_path()
    assert path is not None
    for f in input_files(path, clips[0].fmt):
        ctx.record_input(f)
    results: list[ClipResult] = []
    # clips many at once (their stages too), one budget of calls in flight; yielded in order
    for res in ctx.imap(lambda i: process_clip(ctx, cfg, i, clips[i]), ctx.indices()):
        results.append(res)
        yield res.items
    rows = funnel_rows(results, steps(cfg))
    excluded = Counter(r.selection_fail for r in results if r.selection_fail)
    not_applicable = Counter(rule for r in results for rule in r.skipped_rules)
    selected = [r.seconds for r in results if r.selection_fail is None and r.reached["goal"] > 1]
    ctx.extra["funnel"] = {
        "steps": rows,
        "selection": {
            "excluded_by_reason": dict(sorted(excluded.items())),
            "rules_not_applicable": dict(sorted(not_applicable.items())),
        },
        "clips_in_input": len(clips),
        "seconds_per_clip": round(sum(r.seconds for r in results) / max(1, len(results)), 3),
        "seconds_per_selected_clip": round(sum(selected) / max(1, len(selected)), 3),
    }
    if cfg.export_csv:
        for q in EGOTOM_TYPES:
            out = ctx.out_dir / f"egotom_{q}_shuffled.csv"
            tmp = out.with_name(out.name + ".tmp")
            write_egotom_csv([r.csv_rows[q] for r in results if q in r.csv_rows], q, tmp)
            os.replace(tmp, out)
    ctx.say(*funnel_lines(rows, excluded))
