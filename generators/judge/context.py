"""``kind=context``: the context-tracking benchmark's judge (spec: "Scoring", "The judge",
"Repair turn").

Each reply (turn 2, or turn 3 after the repair prompt) is labelled ``current`` / ``prior`` /
``clarify`` / ``abstain`` with a one-sentence rationale, as a JSON verdict decoded under a
schema (:class:`schemas.judge.ContextVerdict`). The judge sees only :data:`JUDGE_SEES`: the
user's turns, the reply, the four answer lists and the frames described in plain words (and, on
turn 3, the repair prompt the candidate was sent). Everything else of a scenario is withheld
(:data:`WITHHELD`): the spec names the target, the shift type and the notes; gen also withholds
the other skeleton fields, which hint at the answer (``referent_complexity`` ``absent_referent``
means abstain or prior; ``time_gap_bucket`` ``next_day`` means a cross-session prior; the
difficulty, domain, subset, pair and id add nothing a judge needs), and the repair prompts on
turn 2 (the named one says which referent was meant).

Scores (:func:`metrics`): balanced turn-2 accuracy over ``current`` and ``prior`` (the mean of the
two per-class accuracies; 95 % interval by a bootstrap over scenarios, whose trials are not
independent), per-label accuracy rows with Wilson intervals (``clarify`` and ``abstain`` as extra
rows), and the repair rate: the share of turn-2 misses whose turn-3 reply is right. Every reply
also carries the deterministic word-boundary hits of the four lists (recorded, not the score).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gen.contextbench import JUDGE_PROMPT_VERSION, scenario_file
from gen.contextbench import JUDGE_TEMPLATE as TEMPLATE
from gen.contextbench import load as load_scenarios
from gen.contextbench.scoring import metrics, repair_text, signals
from gen.engine.panel import (
    JudgeModel,
    Panel,
    build_panel,
    candidate_families,
    pairwise_agreement,
    require_candidate_family,
)
from gen.engine.runner import Plan, RunContext
from gen.errors import InputError, LLMOutputError, MissingInputError
from gen.generators.judge.summary import finish, prompt_sha256
from gen.readers import iter_jsonl, validated
from gen.schemas import Reject
from gen.schemas.judge import (
    LABELS,
    ContextJudgeRecord,
    ContextJudgment,
    ContextVerdict,
    ResponseRow,
)
from gen.schemas.scenarios import RECORD_FIELDS, ScenarioRecord
from gen.stats import proportion
from gen.text.gates import Gates

if TYPE_CHECKING:
    from gen.generators.judge import JudgeConfig

JUDGE_SEES = ("turn_1_user", "turn_2_user", "context_image", "turn_1_image", "turn_2_image", "gold")
"""The scenario fields the judge's prompt is made from (plus, on turn 3, the repair prompt sent)."""
WITHHELD = tuple(f for f in RECORD_FIELDS if f not in JUDGE_SEES)
"""Every other field: never in the judge's prompt (the repair prompts only as sent, on turn 3)."""
FRAMES = (
    ("context_image", "before the conversation started"),
    ("turn_1_image", "when the user spoke the first turn"),
    ("turn_2_image", "when the user spoke the second turn (now)"),
)


# --------------------------------------------------------------------------- input


def read_responses(path: Path, scenarios: dict[str, ScenarioRecord]) -> list[ResponseRow]:
    """Replies to judge; each must name a scenario of the bank, once per (candidate, condition,
    scenario, trial, turn)."""
    if not path.is_file():
        raise MissingInputError(f"responses: no such file: {path}")
    rows: list[ResponseRow] = []
    seen: set[tuple[Any, ...]] = set()
    for lineno, raw in iter_jsonl(path):
        where = f"{path}:{lineno}"
        row = validated(ResponseRow, raw, where, objects_only=False)
        if row.scenario_id not in scenarios:
            raise InputError(
                f"{where}: scenario_id: {row.scenario_id!r} is not in the scenario bank"
            )
        key = (row.candidate, row.condition, row.scenario_id, row.trial, row.turn)
        if key in seen:
            raise InputError(
                f"{where}: scenario_id: a second turn-{row.turn} reply for {row.scenario_id} trial "
                f"{row.trial} ({row.condition}, {row.candidate})"
            )
        seen.add(key)
        rows.append(row)
    return rows


def plan(cfg: JudgeConfig) -> Plan:
    path = cfg.input_path()
    assert path is not None and cfg.responses is not None
    scenarios = load_scenarios(path)
    rows = read_responses(Path(cfg.responses).expanduser(), scenarios)
    if not rows:
        raise InputError(f"responses: {cfg.responses} holds no replies")
    rows = rows[: cfg.n]
    # the benchmark's runner stops on a candidate it cannot place: before a run folder is made
    require_candidate_family(
        cfg,
        candidate_families(cfg.candidate_family, [(r.candidate, r.candidate_family) for r in rows]),
        f"responses: {cfg.responses}",
    )
    return Plan(len(rows), (scenarios, rows))


# --------------------------------------------------------------------------- the judge's view


def judge_view(s: ScenarioRecord, turn: int, repair_style: str = "named") -> dict[str, Any]:
    """The template variables of the judge's prompt: made from :data:`JUDGE_SEES` only."""
    seen = s.model_dump(include=set(JUDGE_SEES))
    return {
        "turn_1_user": seen["turn_1_user"],
        "turn_2_user": seen["turn_2_user"],
        "repair": repair_text(s, repair_style) if turn == 3 else None,
        "lists": seen["gold"],
        "frames": [[name, seen[f]] for f, name in FRAMES if seen.get(f)],
    }


def judge_messages(ctx: RunContext, s: ScenarioRecord, row: ResponseRow) -> list[dict[str, str]]:
    return ctx.prompts.render(
        TEMPLATE, **judge_view(s, row.turn, row.repair_style), response=row.response
    )


def verdict(
    ctx: RunContext,
    j: JudgeModel,
    messages: list[dict[str, str]],
    target: str,
    seed: int,
    cfg: JudgeConfig,
) -> ContextJudgment:
    """One judge's verdict; output that does not fit the schema, or whose rationale fails the
    shared text gates (cut off, repeating, in another language, an echo of the schema), is a
    verdict without a label (counted as not following instructions, the gate as its problem); a
    backend failure raises."""
    try:
        v = j.llm.structured(
            messages,
            ContextVerdict,
            seed=seed,
            max_tokens=cfg.verdict_tokens,
            temperature=cfg.judge_temperature,
        )
    except LLMOutputError as e:
        if e.reason == "backend_error":
            raise
        ctx.count(f"not_followed.{j.label}.{e.reason}")
        return ContextJudgment(
            label=None, rationale=None, correct=None, problem=e.reason, raw=e.raw
        )
    failure = Gates().check(v.rationale, "prose")  # the stored rationale must not be visibly broken
    if failure is not None:
        ctx.count(f"not_followed.{j.label}.{failure.gate}")
        return ContextJudgment(
            label=None, rationale=None, correct=None, problem=failure.gate, raw=v.model_dump_json()
        )
    return ContextJudgment(label=v.label, rationale=v.rationale, correct=v.label == target)


def judge_response(
    cfg: JudgeConfig, ctx: RunContext, panel: Panel, s: ScenarioRecord, row: ResponseRow, index: int
) -> ContextJudgeRecord | Reject:
    messages = judge_messages(ctx, s, row)
    rid = f"{row.scenario_id}/{row.condition}/{row.trial}/t{row.turn}"
    try:
        verdicts = ctx.map(
            lambda j: verdict(ctx, j, messages, s.target_context, ctx.seed(index, "verdict"), cfg),
            panel.judges,
            workers=min(j.llm.concurrency for j in panel.judges),
        )
    except LLMOutputError as e:
        return Reject.from_failure(e, record_id=rid, index=index, stage="judge")
    return ContextJudgeRecord(
        scenario_id=row.scenario_id,
        turn=row.turn,
        trial=row.trial,
        condition=row.condition,
        candidate=row.candidate,
        target_context=s.target_context,
        response=row.response,
        signals=signals(row.response, s.gold.model_dump()),
        verdicts={j.label: v for j, v in zip(panel.judges, verdicts, strict=True)},
    )


# --------------------------------------------------------------------------- metrics


def summarise(
    cfg: JudgeConfig, records: list[ContextJudgeRecord], panel: Panel, rejected: int, seed: int
) -> dict[str, Any]:
    """Per judge, per candidate and condition: :func:`metrics`; the primary score (balanced
    turn-2 accuracy under ``ranking_condition``); the judges' agreement; the code signals."""
    cells = sorted({(r.candidate or "", r.condition) for r in records})
    judges = {}
    for j in panel.judges:

        def label(r: ContextJudgeRecord, j: JudgeModel = j) -> str | None:
            return r.verdicts[j.label].label

        judges[j.label] = {
            f"{cand or 'candidate'} / {cond}": metrics(
                [r for r in records if (r.candidate or "", r.condition) == (cand, cond)],
                label,
                seed=seed,
                resamples=cfg.bootstrap,
            )
            for cand, cond in cells
        }
    primary = {
        k: {
            "balanced_accuracy": v["balanced_accuracy"],
            "ci95": v["balanced_accuracy_ci95"],
            "repair_rate": v["repair"]["rate"],
        }
        for k, v in judges[panel.primary.label].items()
        if k.endswith(f" / {cfg.ranking_condition}")
    }
    t2 = [r for r in records if r.turn == 2]
    return {
        "kind": "context",
        "primary": panel.primary.label,
        "ranking_condition": cfg.ranking_condition,
        "primary_score": primary,
        "replies": {
            "total": len(records) + rejected,
            "judged": len(records),
            "rejected": rejected,
            "turn_2": len(t2),
            "turn_3": len(records) - len(t2),
        },
        "judges": judges,
        "agreement": {
            "turn_2": pairwise_agreement(
                {j.label: [r.verdicts[j.label].label for r in t2] for j in panel.judges}
            ),
            "all_turns": pairwise_agreement(
                {j.label: [r.verdicts[j.label].label for r in records] for j in panel.judges}
            ),
        },
        "signals": {
            "turn_2_replies_hitting": {
                lst: sum(bool(r.signals[lst]) for r in t2) for lst in LABELS
            },
            "turn_2_replies_hitting_their_target_list": proportion(
                sum(bool(r.signals[r.target_context]) for r in t2), len(t2)
            ),
        },
        "note": "balanced_accuracy: mean of the current and prior turn-2 accuracies (ci95: "
        "bootstrap over "
        "scenarios); per_label: Wilson intervals over replies; repair: turn-2 misses right on turn "
        "3. "
        "signals are word-boundary hits of the answer lists, recorded beside the judge, not the "
        "score.",
    }


def headline(summary: dict[str, Any]) -> list[str]:
    out = [
        f"judge context: {summary['replies']['judged']} replies judged "
        f"({summary['replies']['rejected']} "
        f"rejected), primary judge {summary['primary']}"
    ]
    for cell, m in summary["judges"][summary["primary"]].items():
        ba, ci = m["balanced_accuracy"], m["balanced_accuracy_ci95"]
        out.append(
            f"  {cell}: balanced turn-2 accuracy {ba if ba is not None else '-'}"
            f"{f' [{ci[0]}, {ci[1]}]' if ci else ''}; not followed {m['turn_2']['not_followed']}; "
            f"repair {m['repair']['k']}/{m['repair']['n']}"
        )
    return out


# --------------------------------------------------------------------------- the run


def run(cfg: JudgeConfig, ctx: RunContext) -> Iterator[ContextJudgeRecord | Reject]:
    scenarios, rows = ctx.plan.data
    assert cfg.input is not None and cfg.responses is not None
    ctx.record_input(scenario_file(Path(cfg.input).expanduser()))
    ctx.record_input(Path(cfg.responses).expanduser())
    panel = build_panel(
        cfg,
        ctx,
        candidate_families(cfg.candidate_family, [(r.candidate, r.candidate_family) for r in rows]),
        default=cfg.llm,
    )
    sha = prompt_sha256(ctx, TEMPLATE)
    records: list[ContextJudgeRecord] = []
    rejected = 0
    width = max(j.llm.concurrency for j in panel.judges)  # responses many at once, in order
    for out in ctx.imap(
        lambda i: judge_response(cfg, ctx, panel, scenarios[rows[i].scenario_id], rows[i], i),
        ctx.indices(),
        width=width,
    ):
        if isinstance(out, Reject):
            rejected += 1
        else:
            records.append(out)
        yield out
    summary = summarise(cfg, records, panel, rejected, ctx.seed(0, "bootstrap"))
    candidates = sorted({r.candidate for r in rows if r.candidate})
    finish(
        cfg,
        ctx,
        panel,
        summary,
        {
            "judge_prompt_version": JUDGE_PROMPT_VERSION,
            "judge_prompt_sha256": sha,
            "candidate_model": candidates or None,
            "withheld_from_judge": list(WITHHELD),
        },
        headline(summary),
    )
