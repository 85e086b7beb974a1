"""MCQ banks (ours, EgoToM's CSVs, WAGIBench's MCQ layout): each item asked once with its visible
context; accuracy with Wilson intervals, overall and per question type, against chance.

Options are labelled ``a`` … ``z``, then ``aa``, ``ab`` … (:func:`gen.formats.mcq.label`), so a
bank of
any number of options runs (EgoIntrospect's 33 tools plus "No tool needed"). A multi-select item
(an ``introspect task=tool_selection`` record: ``answers`` the required options, ``acceptable``
with the helpful ones) is answered with a list of labels and scored by EgoIntrospect H.1.1:
strict hierarchical accuracy, required recall and distractor rate
(:func:`gen.formats.mcq.correct`, :func:`gen.formats.mcq.required_recall`,
:func:`gen.formats.mcq.distractor_rate`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gen.engine.runner import RunContext
from gen.errors import LLMOutputError
from gen.formats.mcq import (
    NO_TOOL,
    correct,
    distractor_rate,
    label,
    parse_labels,
    parse_letter,
    required_recall,
)
from gen.generators.evaluate.config import MCQ_MULTI_PROMPT, MCQ_PROMPT, NAME, EvaluateConfig
from gen.llm import LanguageModel
from gen.schemas import Reject
from gen.schemas.evaluate import MCQAnswerRecord
from gen.schemas.mcq import LETTERS, MCQ
from gen.stats import proportion, rounded


def ask(
    cfg: EvaluateConfig, ctx: RunContext, llm: LanguageModel, item: MCQ, source: Path, index: int
) -> MCQAnswerRecord | Reject:
    """One item asked once; a multi-select item (``answers`` given: EgoIntrospect's Tool
    Selection) is answered with a list of labels and scored by H.1.1's hierarchical rule."""
    assert item.answer is not None
    multi = item.answers is not None
    shown = [[label(k), o] for k, o in enumerate(item.options)]
    messages = ctx.prompts.render(
        MCQ_MULTI_PROMPT if multi else MCQ_PROMPT,
        context=item.context,
        question=item.question,
        options=shown,
    )
    try:
        raw = llm.complete(
            messages,
            seed=ctx.seed(index, "answer"),
            max_tokens=cfg.mcq_tokens,
            temperature=cfg.mcq_temperature,
        )
    except LLMOutputError as e:
        return Reject.from_failure(e, record_id=item.item_id, index=index, stage="candidate")
    base: dict[str, Any] = {
        "item_id": item.item_id,
        "question_type": item.question_type,
        "source": str(source),
        "n_options": len(item.options),
        "answer": item.answer,
        "raw": raw,
    }
    if multi:
        return multi_select(item, raw, base)
    if len(item.options) <= len(LETTERS):
        letter = parse_letter(raw, item.options)
        choice = None if letter is None else LETTERS.index(letter)
    else:  # two-letter labels: read as a list that must hold one option
        chosen = parse_labels(raw, item.options)
        choice = chosen[0] if chosen is not None and len(chosen) == 1 else None
        letter = None if choice is None else label(choice)
    return MCQAnswerRecord(**base, letter=letter, choice=choice, correct=choice == item.answer)


def multi_select(item: MCQ, raw: str, base: dict[str, Any]) -> MCQAnswerRecord:
    """A multi-select answer scored by EgoIntrospect H.1.1: the item's ``answers`` are its
    required options (the "No tool needed" option alone when none is), ``acceptable`` adds the
    helpful ones; an unparseable reply is wrong and chose nothing."""
    assert item.answers is not None
    none = item.options.index(NO_TOOL) if NO_TOOL in item.options else None
    required = [i for i in item.answers if i != none]
    helpful = sorted(set(item.acceptable or []) - set(required) - {none})
    chosen = parse_labels(raw, item.options)
    return MCQAnswerRecord(
        **base,
        letter=None if chosen is None else ",".join(label(i) for i in chosen),
        choice=None,
        correct=chosen is not None and correct(required, helpful, chosen, none=none),
        choices=chosen,
        required=required,
        helpful=helpful,
        none_option=none,
    )


def multi_summary(records: list[MCQAnswerRecord]) -> dict[str, Any] | None:
    """EgoIntrospect H.1.1's three numbers over the multi-select records, each with a Wilson
    interval: strict (hierarchical) accuracy, required recall (over items with required options)
    and distractor rate (predictions holding a tool neither required nor helpful); an unparseable
    reply chose nothing. None when there is no multi-select record."""
    rs = [r for r in records if r.required is not None]
    if not rs:
        return None
    # the "No tool needed" option as the rule's special value (its index differs per item)
    rows = [
        (
            r.required or [],
            r.helpful or [],
            [NO_TOOL if i == r.none_option else i for i in r.choices or []],
        )
        for r in rs
    ]
    with_required = [(req, p) for req, _, p in rows if req]
    recall = required_recall(with_required)
    distract = distractor_rate(rows)
    return {
        "items": len(rs),
        "strict_accuracy": proportion(sum(r.correct for r in rs), len(rs)),
        "required_recall": proportion(
            round((recall or 0.0) * len(with_required)), len(with_required)
        ),
        "distractor_rate": proportion(round((distract or 0.0) * len(rs)), len(rs)),
        "unparseable": sum(r.choices is None for r in rs),
        "note": "EgoIntrospect H.1.1: strict accuracy by the hierarchical rule (every required "
        "option and otherwise only helpful ones; with none required, No tool needed or only "
        "helpful ones); required recall over the items with required options; distractor rate: "
        "the share of predictions holding an option neither required nor helpful (No tool "
        "needed is no tool). An unparseable reply chose nothing.",
    }


def mcq_summary(records: list[MCQAnswerRecord], rejected: int) -> dict[str, Any]:
    """Accuracy with Wilson intervals, overall and per question type, against chance (the mean of
    1 / options over single-answer items); unparseable answers count as wrong and are counted;
    multi-select items also get EgoIntrospect's required recall and distractor rate."""

    def block(rs: list[MCQAnswerRecord]) -> dict[str, Any]:
        single = [r for r in rs if r.required is None]
        return {
            **proportion(sum(r.correct for r in rs), len(rs)),
            "chance": rounded(sum(1 / r.n_options for r in single) / len(single))
            if single
            else None,
            "unparseable": sum(r.letter is None for r in rs),
        }

    types = sorted({r.question_type for r in records})
    out = {
        "items": len(records) + rejected,
        "answered": len(records),
        "rejected": rejected,
        "accuracy": block(records),
        "by_question_type": {q: block([r for r in records if r.question_type == q]) for q in types},
        "letters": dict(sorted(Counter(r.letter or "unparseable" for r in records).items())),
        "note": "accuracy: correct / answered items with a 95 % Wilson interval; an unparseable "
        "answer is wrong; a multi-select item is correct by EgoIntrospect H.1.1's hierarchical "
        "rule; chance: single-answer items only.",
    }
    if (multi := multi_summary(records)) is not None:
        out["multi_select"] = multi
    return out


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
        *(
            (
                f"[evaluate] multi-select (EgoIntrospect H.1.1), {m['items']} items: strict "
                f"{m['strict_accuracy']['k']}/{m['strict_accuracy']['n']} "
                f"({m['strict_accuracy']['rate']}, {m['strict_accuracy']['ci95']}); required "
                f"recall {m['required_recall']['k']}/{m['required_recall']['n']} "
                f"({m['required_recall']['rate']}); distractor rate "
                f"{m['distractor_rate']['k']}/{m['distractor_rate']['n']} "
                f"({m['distractor_rate']['rate']})",
            )
            if (m := summary.get("multi_select"))
            else ()
        ),
    )
