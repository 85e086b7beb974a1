"""MCQ banks (ours, EgoToM's CSVs, WAGIBench's MCQ layout): each item asked once with its visible
context; accuracy with Wilson intervals, overall and per question type, against chance."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gen.errors import LLMOutputError
from gen.generators.evaluate.config import MCQ_PROMPT, NAME, EvaluateConfig
from gen.llm import LanguageModel
from gen.mcq import parse_letter
from gen.runner import RunContext
from gen.schemas import Reject
from gen.schemas.evaluate import MCQAnswerRecord
from gen.schemas.mcq import LETTERS, MCQ
from gen.stats import proportion, rounded


def ask(
    cfg: EvaluateConfig, ctx: RunContext, llm: LanguageModel, item: MCQ, source: Path, index: int
) -> MCQAnswerRecord | Reject:
    assert item.answer is not None
    shown = [[LETTERS[k], o] for k, o in enumerate(item.options)]
    messages = ctx.prompts.render(
        MCQ_PROMPT, context=item.context, question=item.question, options=shown
    )
    try:
        raw = llm.complete(
            messages,
            seed=ctx.seed(index, "answer"),
            max_tokens=cfg.mcq_tokens,
            temperature=cfg.mcq_temperature,
        )
    except LLMOutputError as e:
        return Reject(
            record_id=item.item_id,
            index=index,
            stage="candidate",
            reason=e.reason,
            detail=e.detail,
            raw=e.raw,
        )
    letter = parse_letter(raw, item.options)
    choice = None if letter is None else LETTERS.index(letter)
    return MCQAnswerRecord(
        item_id=item.item_id,
        question_type=item.question_type,
        source=str(source),
        n_options=len(item.options),
        answer=item.answer,
        raw=raw,
        letter=letter,
        choice=choice,
        correct=choice == item.answer,
    )


def mcq_summary(records: list[MCQAnswerRecord], rejected: int) -> dict[str, Any]:
    """Accuracy with Wilson intervals, overall and per question type, against chance (the mean of
    1 / options); unparseable answers count as wrong and are counted."""

    def block(rs: list[MCQAnswerRecord]) -> dict[str, Any]:
        return {
            **proportion(sum(r.correct for r in rs), len(rs)),
            "chance": rounded(sum(1 / r.n_options for r in rs) / len(rs)) if rs else None,
            "unparseable": sum(r.letter is None for r in rs),
        }

    types = sorted({r.question_type for r in records})
    return {
        "items": len(records) + rejected,
        "answered": len(records),
        "rejected": rejected,
        "accuracy": block(records),
        "by_question_type": {q: block([r for r in records if r.question_type == q]) for q in types},
        "letters": dict(sorted(Counter(r.letter or "unparseable" for r in records).items())),
        "note": "accuracy: correct / answered items with a 95 % Wilson interval; an unparseable "
        "answer is wrong.",
    }


def run_mcq(cfg: EvaluateConfig, ctx: RunContext) -> Iterator[MCQAnswerRecord | Reject]:
    _, banks, items = ctx.plan.data
    for b in banks:
        ctx.record_input(b.path)
    llm = ctx.llm
    records: list[MCQAnswerRecord] = []
    rejected = 0
    for out in ctx.imap(
        lambda i: ask(cfg, ctx, llm, items[i][1], items[i][0], i), ctx.indices()
    ):  # streamed, in order
        if isinstance(out, Reject):
            rejected += 1
        else:
            records.append(out)
        yield out
    summary = mcq_summary(records, rejected)
    summary["candidate"] = {"model": llm.describe().get("model"), "family": llm.family}
    ctx.write_json("summary.json", summary)
    ctx.extra[NAME] = {"mode": "mcq", **summary}
    a = summary["accuracy"]
    ctx.say(
        f"[evaluate] {a['k']}/{a['n']} correct ({a['rate']}, 95% CI {a['ci95']}; "
        f"chance {a['chance']}); "
        f"{a['unparseable']} unparseable",
        *(
            f"[evaluate]   {q}: {b['k']}/{b['n']} ({b['rate']}, {b['ci95']}; chance {b['chance']})"
            for q, b in summary["by_question_type"].items()
        ),
    )
