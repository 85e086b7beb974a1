"""The LLM stages 2-5 of one clip and the stage-6 filters: narration analysis (the transition and
the true statements), counterfactual goals, counterfactual (belief, actions) pairs and action
simplification, each a structured call checked by code and regenerated with a fresh seed
(:func:`run_stage`), wrong choices pooled across attempts (:class:`Pool`); then the keyword,
time-window, length and similarity filters."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from gen.engine.runner import RunContext
from gen.formats.mcq import EGOTOM_CHOICES
from gen.formats.timelines import Clip, fmt_time
from gen.llm.attempts import AttemptFailure, retry
from gen.schemas.tom import (
    BELIEF_CHARS,
    GOAL_CHARS,
    SENTENCE_CHARS,
    AlternativesDraft,
    AnalysisDraft,
    SimplifiedDraft,
    WrongGoalsDraft,
    analysis_draft,
)
from gen.text.gates import Gates, Kind, count_key, key
from gen.text.statements import (
    action_count,
    actions_problem,
    example_strings,
    join_actions,
    norm_belief,
    norm_goal,
    norm_phrase,
    norm_sentence,
    text_problem,
)

if TYPE_CHECKING:
    from gen.generators.tom.config import TomConfig

# --------------------------------------------------------------------------- stages 2-5


@dataclass
class Truth:
    index: int
    """0-based line position of the transition."""
    goal: str
    belief: str
    actions: str
    phrases: list[str]


class Pool:
    """Usable wrong choices of one type gathered across a stage's attempts: each candidate must
    pass :func:`text_problem` as a ``kind`` statement, differ from the truth and the choices kept
    so far, and (with an embedder) stay at or below ``max_similarity`` cosine to them, so one bad
    choice in an attempt costs that choice, not the question. Kept in the order offered
    (deterministic)."""

    def __init__(
        self,
        truth: str,
        need: int,
        gates: Gates,
        kind: Kind,
        count: Callable[[str], None],
        embedder: Any = None,
        max_similarity: float | None = None,
        room: int | None = None,
    ):
        self.truth, self.need, self.gates, self.kind, self.count = truth, need, gates, kind, count
        self.room = room or need
        """How many it keeps (``room`` > ``need`` leaves spares for a later filter)."""
        self.embedder, self.max_similarity = embedder, max_similarity
        self.items: list[str] = []
        self.rejected: list[str] = []
        """``why: text`` of every candidate turned away, for the reject detail."""

    @property
    def full(self) -> bool:
        return len(self.items) >= self.need

    def offer(
        self,
        text: str,
        problem: tuple[str, str] | None = None,
        raw: str | None = None,
        cap: int | None = None,
    ) -> None:
        """Keep ``text`` unless the pool is full or the text is unusable (``problem`` set by the
        caller for a problem only it can see; ``raw``/``cap``: the model's text and its cap)."""
        if len(self.items) >= self.room:
            return
        problem = problem or text_problem(text, self.gates, self.kind, raw, cap)
        why = (
            problem[0]
            if problem
            else (
                "same_as_truth"
                if key(text) == key(self.truth)
                else "duplicate"
                if key(text) in {key(x) for x in self.items}
                else None
            )
        )
        if why is None and self.embedder is not None and self.max_similarity is not None:
            with _EMBED_LOCK:
                vecs = self.embedder.encode([text, self.truth, *self.items])
            cos = vecs[1:] @ vecs[0]
            if float(cos.max()) > self.max_similarity:
                why = "near_duplicate"
                text = f"{text} (cosine {float(cos.max()):.3f})"
        if why:
            self.count(why)
            self.rejected.append(f"{why}: {text!r}" + (f" ({problem[1]})" if problem else ""))
        else:
            self.items.append(text)

    def detail(self) -> str:
        turned = "; ".join(self.rejected[-4:]) or "none"
        return f"{len(self.items)} usable of {self.need}; turned away: {turned}"


def stage_gates(
    cfg: TomConfig, messages: list[dict[str, str]], schema: type[BaseModel], keep_out: list[str]
) -> Gates:
    """The shared gates of one stage's prompt. Outputs may copy what the prompt gives them to
    work from (``keep_out``: the clip's narrations and summary, the true statements, the
    sentences to shorten), but no other six words of the prompt (its instructions, the one-shot
    conversation) and no one-shot answer."""
    prompt = "\n".join(m["content"] for m in messages if m["role"] != "assistant")
    return Gates(
        messages,
        schema,
        language=cfg.language,
        prompt_text=prompt,
        keep_out=keep_out,
        examples=example_strings(messages),
    )


MODEL_STAGE = {
    "analysis": "analysis",
    "counterfactual_goals": "counterfactuals",
    "counterfactual_beliefs_actions": "counterfactuals",
    "simplify": "simplification",
}
"""Each call's stage -> the stage whose model it uses (``stages.<stage>.llm``)."""


def run_stage(
    ctx: RunContext,
    cfg: TomConfig,
    index: int,
    stage: str,
    messages: list[dict[str, str]],
    schema: type[BaseModel],
    check: Callable[[Any], tuple[Any, tuple[str, str] | None]],
    max_tokens: int,
) -> Any:
    """One structured call, checked by code; a failed check regenerates with a fresh seed up to
    ``attempts`` times. Raises :class:`AttemptFailure` with the last reason."""
    llm = ctx.stage_llm(MODEL_STAGE[stage])

    def call(a: int) -> Any:
        return llm.structured(
            messages, schema, seed=ctx.seed(index, stage, a), max_tokens=max_tokens
        )

    def checked(draft: Any) -> Any:
        value, problem = check(draft)
        if problem is None:
            return value
        raise AttemptFailure(stage, *problem, counts=[count_key(stage, problem[0])])

    return retry(call, checked, budget=cfg.attempts, stage=stage, count=ctx.count)


def numbered(clip: Clip) -> list[str]:
    """The timeline as the analysis prompt shows it: ``12. 03m:18s | #C C …`` (1-based)."""
    return [f"{i + 1}. {fmt_time(ln.t)} | {ln.text}" for i, ln in enumerate(clip.lines)]


def check_transition(line_no: int, clip: Clip, cfg: TomConfig) -> tuple[str, str] | None:
    """Validate the model's transition line number (1-based): a line of the timeline, in its
    latter half, with ``min_future_lines`` at and after it, and (``restrict_to_window``) inside
    the time window. A grammar-constrained backend cannot fail this; others can."""
    n = len(clip.lines)
    if not 1 <= line_no <= n:
        return "transition_unknown", f"line {line_no} is not in the timeline (1-{n})"
    i = line_no - 1
    at = f"line {line_no} ({fmt_time(clip.lines[i].t)})"
    if i < n // 2:
        return "transition_first_half", f"{at} is in the first half (lines 1-{n // 2})"
    if i > n - cfg.min_future_lines:
        return (
            "transition_too_late",
            f"{at} leaves fewer than {cfg.min_future_lines} lines at and after it",
        )
    if cfg.restrict_to_window and not in_window(clip.lines[i].t, cfg.window):
        lo, hi = cfg.window  # type: ignore[misc]
        return "transition_outside_window", f"{at} is outside {fmt_time(lo)}-{fmt_time(hi)}"
    return None


def analysis(ctx: RunContext, cfg: TomConfig, index: int, clip: Clip, allowed: list[int]) -> Truth:
    """Stage 2: the transition (a line number among ``allowed``, 0-based positions, checked again
    by code) and the truth statements."""
    messages = ctx.prompts.render(
        "tom/analysis.jinja",
        summary=clip.summary,
        lines=numbered(clip),
        first=allowed[0] + 1,
        last=allowed[-1] + 1,
    )
    schema = analysis_draft(tuple(i + 1 for i in allowed))
    gates = stage_gates(cfg, messages, schema, [*numbered(clip), clip.summary])

    def check(d: AnalysisDraft) -> tuple[Truth | None, tuple[str, str] | None]:
        problem = check_transition(d.transition_line, clip, cfg)
        if problem:
            return None, problem
        goal, belief = norm_goal(d.future_goal), norm_belief(d.belief)
        phrases = [norm_phrase(p) for p in d.next_actions]
        actions = join_actions(phrases)
        for what, text, raw, cap in (
            ("goal", goal, d.future_goal, GOAL_CHARS),
            ("belief", belief, d.belief, BELIEF_CHARS),
            ("actions", actions, None, None),
        ):
            why = text_problem(text, gates, "action" if what == "actions" else what, raw, cap)  # type: ignore[arg-type]
            if why:
                return None, (why[0], f"{what}: {text!r}: {why[1]}")
        why = actions_problem(d.next_actions, gates)
        if why:
            return None, why
        return Truth(d.transition_line - 1, goal, belief, actions, phrases), None

    return run_stage(ctx, cfg, index, "analysis", messages, schema, check, cfg.analysis_tokens)


def counterfactual_goals(
    ctx: RunContext, cfg: TomConfig, index: int, past: list[str], truth: Truth
) -> list[str]:
    """Stage 3: wrong goals from the past only; kept those usable and distinct from the truth."""
    messages = ctx.prompts.render("tom/goals.jinja", lines=past, goal=truth.goal)
    gates = stage_gates(cfg, messages, WrongGoalsDraft, [*past, truth.goal])
    # room for all three the prompt asks for: the keyword filter may drop one later
    pool = Pool(
        truth.goal,
        EGOTOM_CHOICES["goal"] - 1,
        gates,
        "goal",
        lambda why: ctx.count(count_key("counterfactual_goals", why, "dropped")),
        *_similarity(ctx, cfg),
        room=3,
    )

    def check(d: WrongGoalsDraft) -> tuple[list[str] | None, tuple[str, str] | None]:
        for g in d.wrong_goals:
            pool.offer(norm_goal(g), raw=g, cap=GOAL_CHARS)
        if not pool.full:
            return None, ("too_few_wrong_goals", pool.detail())
        return pool.items, None

    return run_stage(
        ctx, cfg, index, "counterfactual_goals", messages, WrongGoalsDraft, check, cfg.goals_tokens
    )


def _similarity(ctx: RunContext, cfg: TomConfig) -> tuple[Any, float | None]:
    """The embedder and threshold a pool screens near-duplicates with (none when the
    similarity filter is off)."""
    return (ctx.embedder, cfg.max_similarity) if cfg.max_similarity is not None else (None, None)


def counterfactual_beliefs_actions(
    ctx: RunContext, cfg: TomConfig, index: int, past: list[str], truth: Truth
) -> tuple[list[str] | None, list[str] | None, list[str]]:
    """Stage 4: three (belief, actions) alternatives that still serve the true goal. Returns the
    wrong beliefs and wrong action statements (None for a type without three usable ones) and
    the reasons; usable alternatives pool across attempts, which go on until both types have
    three."""
    messages = ctx.prompts.render(
        "tom/beliefs_actions.jinja",
        lines=past,
        goal=truth.goal,
        belief=truth.belief,
        actions=truth.actions,
    )
    gates = stage_gates(
        cfg, messages, AlternativesDraft, [*past, truth.goal, truth.belief, truth.actions]
    )
    sim = _similarity(ctx, cfg)
    kinds: dict[str, Kind] = {"belief": "belief", "actions": "action"}

    def counter(q: str) -> Callable[[str], None]:
        return lambda why: ctx.count(
            count_key(f"counterfactual_beliefs_actions.{q}", why, "dropped")
        )

    pools = {
        q: Pool(t, 3, gates, kinds[q], counter(q), *sim)
        for q, t in (("belief", truth.belief), ("actions", truth.actions))
    }

    def outcome() -> tuple[list[str] | None, list[str] | None, list[str]]:
        return (
            *(p.items if p.full else None for p in pools.values()),  # type: ignore[return-value]
            [f"{q}: {p.detail()}" for q, p in pools.items() if not p.full],
        )

    def check(d: AlternativesDraft) -> tuple[Any, tuple[str, str] | None]:
        for a in d.alternatives:
            pools["belief"].offer(norm_belief(a.belief), raw=a.belief, cap=BELIEF_CHARS)
            pools["actions"].offer(
                join_actions(a.next_actions), actions_problem(a.next_actions, gates)
            )
        if all(p.full for p in pools.values()):
            return outcome(), None
        return None, ("no_usable_alternative", "; ".join(outcome()[2]))

    try:
        return run_stage(
            ctx,
            cfg,
            index,
            "counterfactual_beliefs_actions",
            messages,
            AlternativesDraft,
            check,
            cfg.beliefs_actions_tokens,
        )
    except AttemptFailure:
        if any(p.full for p in pools.values()):  # one type is complete after every attempt
            return outcome()
        raise


def simplify(
    ctx: RunContext, cfg: TomConfig, index: int, sentences: list[str]
) -> tuple[list[str], list[bool]]:
    """Stage 5: the alternative action statements rewritten in narration style. A rewrite that
    fails the text gates or tom's own checks (empty), is longer than its original or no longer
    lists three actions keeps the original (counted)."""
    messages = ctx.prompts.render("tom/simplify.jinja", sentences=sentences)
    gates = stage_gates(cfg, messages, SimplifiedDraft, sentences)

    def check(d: SimplifiedDraft) -> tuple[Any, None]:
        out, changed = [], []
        for original, new in zip(sentences, d.simplified, strict=True):
            s = norm_sentence(new)
            problem = text_problem(s, gates, "action", raw=new, cap=SENTENCE_CHARS)
            why = (
                problem[0]
                if problem
                else (
                    "longer"
                    if len(s) > len(original)
                    else "lost_actions"
                    if action_count(s) < 3
                    else None
                )
            )
            if why:
                ctx.count(count_key("simplify", why, "kept_original"))
            out.append(original if why else s)
            changed.append(why is None and s != original)
        return (out, changed), None

    return run_stage(
        ctx, cfg, index, "simplify", messages, SimplifiedDraft, check, cfg.simplify_tokens
    )


# --------------------------------------------------------------------------- stage 6: filters


def keyword_hits(text: str, keywords: list[str]) -> list[str]:
    """Keywords found in ``text``, each matched at a word start, any case ("class" also hits
    "classes", "train for" hits "train for a race")."""
    return [k for k in keywords if re.search(r"(?<!\w)" + re.escape(k), text, re.I)]


def in_window(t: float, window: tuple[float, float] | None) -> bool:
    return window is None or window[0] <= t <= window[1]


def length_problem(
    truth: str, wrongs: list[str], ratio: float | None, unit: Literal["chars", "words"] = "chars"
) -> tuple[str, str] | None:
    """EgoToM's length rule: the truth more than ``ratio``× longer than every wrong choice, or
    every wrong choice more than ``ratio``× longer than the truth."""
    if ratio is None or not wrongs:
        return None

    def size(s: str) -> int:
        return len(s) if unit == "chars" else len(s.split())

    lt, lw = size(truth), [size(w) for w in wrongs]
    if lt > ratio * max(lw):
        return (
            "truth_longest",
            f"truth {lt} {unit} > {ratio}x every wrong choice ({', '.join(map(str, lw))})",
        )
    if min(lw) > ratio * lt:
        return (
            "truth_shortest",
            f"every wrong choice ({', '.join(map(str, lw))} {unit}) > {ratio}x the truth ({lt})",
        )
    return None


_EMBED_LOCK = threading.Lock()


def similarity_problem(
    embedder: Any, options: list[str], threshold: float | None
) -> tuple[str, str] | None:
    """Any two choices above ``threshold`` cosine under the embedder (vectors are unit length)."""
    if threshold is None:
        return None
    with _EMBED_LOCK:
        vecs = embedder.encode(options)
    sims = vecs @ vecs.T
    best, pair = -1.0, (0, 0)
    for i in range(len(options)):
        for j in range(i + 1, len(options)):
            if sims[i, j] > best:
                best, pair = float(sims[i, j]), (i, j)
    if best > threshold:
        return "near_duplicate_options", (
            f"cosine {best:.3f} > {threshold} between {options[pair[0]]!r} and {options[pair[1]]!r}"
        )
    return None
