"""``kind=distractor_validity``: screening an MCQ bank for wrong options that are good answers too.

WAGIBench's first failure of MCQ distractors is "multiple relevant goals": a wrong option that
also answers the question. Every option of an item (the key included, the judge is not told which
it is) is scored alone, with the item's visible context and question, on the judge's 0 / 1 / 2
scale; an item is flagged when a wrong option scores at least as high as the answer. An item
whose answer's score could not be read is not flagged (``flagged`` null) and is counted.
``python -m gen audit input=<bank> judge=<this run>`` reports the flagged items as findings, so
``bank add`` can gate on them (``audit_options={judge: <run>}``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gen.engine.panel import (
    JudgeModel,
    Panel,
    build_panel,
    candidate_families,
    pairwise_agreement,
)
from gen.engine.runner import Plan, RunContext
from gen.errors import InputError, LLMOutputError
from gen.generators.judge.scores import judgment
from gen.generators.judge.summary import finish, prompt_sha256
from gen.kinds.mcq import load_banks
from gen.schemas import Reject
from gen.schemas.judge import Judgment, ValidityRecord
from gen.schemas.mcq import MCQ
from gen.stats import mean_interval, proportion

if TYPE_CHECKING:
    from gen.generators.judge import JudgeConfig

JUDGE_PROMPT_VERSION = "distractor-validity-1"
"""Bumped whenever ``judge/distractor_validity.jinja`` changes meaning."""
TEMPLATE = "judge/distractor_validity.jinja"


def plan(cfg: JudgeConfig) -> Plan:
    """One index per item with two or more options and a known answer."""
    path = cfg.input_path()
    assert path is not None
    banks = load_banks(path)
    items = [
        (bank.path, it)
        for bank in banks
        for it in bank.items
        if len(it.options) >= 2 and it.answer is not None
    ]
    if not items:
        raise InputError(f"input: {path} holds no MCQ item with options and an answer")
    items = items[: cfg.n]
    return Plan(len(items), (banks, items))


def flags(scores: list[Judgment], answer: int) -> tuple[bool | None, list[int]]:
    """(flagged, wrong options scoring at least the answer); flagged is None when the answer's
    judgment has no score. A wrong option without a score never flags."""
    key = scores[answer].score
    if key is None:
        return None, []
    hits = [
        i for i, s in enumerate(scores) if i != answer and s.score is not None and s.score >= key
    ]
    return bool(hits), hits


def judge_item(
    cfg: JudgeConfig, ctx: RunContext, panel: Panel, item: MCQ, source: str, index: int
) -> ValidityRecord | Reject:
    assert item.answer is not None
    jobs = [(j, k) for j in panel.judges for k in range(len(item.options))]

    def one(job: tuple[JudgeModel, int]) -> Judgment:
        j, k = job
        messages = ctx.prompts.render(
            TEMPLATE, context=item.context, question=item.question, option=item.options[k]
        )
        return judgment(
            j.llm.complete(
                messages,
                seed=ctx.seed(index, "option", k),
                max_tokens=cfg.judge_tokens,
                temperature=cfg.judge_temperature,
            ),
            lenient=cfg.judge_parse == "lenient",
        )

    try:
        results = ctx.map(one, jobs, workers=min(j.llm.concurrency for j in panel.judges))
    except LLMOutputError as e:
        return Reject.from_failure(e, record_id=item.item_id, index=index, stage="judge")
    scores: dict[str, list[Judgment]] = defaultdict(list)
    for (j, _), res in zip(jobs, results, strict=True):
        scores[j.label].append(res)
        if not res.followed:
            ctx.count(f"not_followed.{j.label}.{res.problem}")
    flagged, hits = {}, {}
    for label, js in scores.items():
        flagged[label], hits[label] = flags(js, item.answer)
    return ValidityRecord(
        item_id=item.item_id,
        question_type=item.question_type,
        source=source,
        answer=item.answer,
        n_options=len(item.options),
        scores=dict(scores),
        flagged=flagged,
        flagged_options=hits,
    )


def summarise(
    cfg: JudgeConfig, records: list[ValidityRecord], panel: Panel, rejected: int, seed: int
) -> dict[str, Any]:
    judges = {}
    for j in panel.judges:
        judged = [r for r in records if r.flagged[j.label] is not None]
        by_type: dict[str, list[ValidityRecord]] = defaultdict(list)
        for r in judged:
            by_type[r.question_type].append(r)
        options = [s for r in records for s in r.scores[j.label]]
        answer_scores = [r.scores[j.label][r.answer].normalised for r in records]
        wrong_scores = [
            s.normalised for r in records for k, s in enumerate(r.scores[j.label]) if k != r.answer
        ]
        judges[j.label] = {
            "items_judged": len(judged),
            "answer_not_scored": len(records) - len(judged),
            "flagged": proportion(sum(bool(r.flagged[j.label]) for r in judged), len(judged)),
            "flagged_by_question_type": {
                q: proportion(sum(bool(r.flagged[j.label]) for r in rs), len(rs))
                for q, rs in sorted(by_type.items())
            },
            "not_followed": proportion(sum(not s.followed for s in options), len(options)),
            "not_followed_by_problem": dict(
                sorted(Counter(s.problem for s in options if s.problem).items())
            ),
            "answer_score": mean_interval(
                [x for x in answer_scores if x is not None], seed=seed, resamples=cfg.bootstrap
            ),
            "wrong_option_score": mean_interval(
                [x for x in wrong_scores if x is not None], seed=seed, resamples=cfg.bootstrap
            ),
        }
    return {
        "kind": "distractor_validity",
        "primary": panel.primary.label,
        "items": {"total": len(records) + rejected, "judged": len(records), "rejected": rejected},
        "judges": judges,
        "agreement": {
            "option_scores": pairwise_agreement(
                {
                    j.label: [s.score for r in records for s in r.scores[j.label]]
                    for j in panel.judges
                }
            ),
            "flagged": pairwise_agreement(
                {j.label: [r.flagged[j.label] for r in records] for j in panel.judges}
            ),
        },
        "note": "flagged: a wrong option scored at least as high as the answer (0 irrelevant, 1 "
        "borderline, "
        "2 a good answer), each option judged alone without knowing the key.",
    }


def run(cfg: JudgeConfig, ctx: RunContext) -> Iterator[ValidityRecord | Reject]:
    banks, items = ctx.plan.data
    for bank in banks:
        ctx.record_input(bank.path)
    panel = build_panel(
        cfg, ctx, candidate_families(cfg.candidate_family, []), default=cfg.llm, candidate=False
    )
    sha = prompt_sha256(ctx, TEMPLATE)
    records: list[ValidityRecord] = []
    rejected = 0
    width = max(j.llm.concurrency for j in panel.judges)  # items many at once, in order
    for out in ctx.imap(
        lambda i: judge_item(cfg, ctx, panel, items[i][1], str(items[i][0]), i),
        ctx.indices(),
        width=width,
    ):
        if isinstance(out, Reject):
            rejected += 1
        else:
            records.append(out)
            if out.flagged[panel.primary.label]:
                ctx.count("flagged")
        yield out
    summary = summarise(cfg, records, panel, rejected, ctx.seed(0, "bootstrap"))
    p = summary["judges"][panel.primary.label]
    lines = [
        f"judge distractor_validity: {summary['items']['judged']} items judged "
        f"by {panel.primary.label}: "
        f"{p['flagged']['k']}/{p['flagged']['n']} "
        f"flagged; {p['not_followed']['k']}/{p['not_followed']['n']} "
        "option judgments did not follow the format"
    ]
    finish(
        cfg,
        ctx,
        panel,
        summary,
        {"judge_prompt_version": JUDGE_PROMPT_VERSION, "judge_prompt_sha256": sha},
        lines,
    )
