"""No-context (blind) screening of multiple-choice items (EgoToM §3.3, MMStar).

An item that an LLM answers correctly without its context (no video, narrations or app state)
tests the language prior, not the context. Every item is asked, without its context, to a panel
of LLMs on ``shuffles`` seeded orders of its options; it is removed when any model is correct on
more than ``max_correct`` of them (EgoToM: more than 2 of 3), and/or when more than ``panel_k``
models are correct on a majority of them (MMStar's panel rule).

The correct option takes a different position in every shuffle (while positions last), so a
model that always picks the same letter is right at most ``ceil(shuffles / options)`` times and
never removes an item on its own. Two answering modes: ``generate`` (free text, a letter parsed
from it; unparseable counts as wrong and is counted) and ``loglik`` (the answer line
``<letter>) <option>`` scored by its length-normalised log-likelihood, as lm-evaluation-harness's
``acc_norm``; deterministic).

Outputs: ``nocontext.jsonl`` (one record per screened item, every answer), ``removed.jsonl`` (the
removed items with their text and every answer), ``kept/<input file name>`` (the kept items in the
input's own format, read unchanged by the next step) and ``summary.json`` (blind accuracy against
chance with binomial confidence intervals, letter-position bias, unparseable counts, items/s).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path
from typing import Any

from gen.engine.registry import generator
from gen.engine.runner import Plan, RunContext
from gen.errors import InputError, LLMOutputError
from gen.formats.mcq import Bank, parse_letter, write_subset
from gen.generators.nocontext.config import NocontextConfig
from gen.generators.nocontext.summary import Tally, binomial, summarise, table
from gen.kinds.mcq import load_banks
from gen.llm import LanguageModel, Message, Usage
from gen.llm.labels import model_label, unique_labels
from gen.schemas import Reject
from gen.schemas.mcq import LETTERS, MCQ
from gen.schemas.nocontext import Answer, NocontextRecord

__all__ = [
    "NocontextConfig",
    "Screener",
    "binomial",
    "nocontext",
    "normalise",
    "pick",
    "plain_prompt",
    "plan",
    "removal",
    "shuffles",
]


def plan(cfg: NocontextConfig) -> Plan:
    """One index per screened item (every item of the input, or a seeded ``sample``)."""
    path = cfg.input_path()
    assert path is not None
    banks = load_banks(path)
    items = screen_list(cfg, banks)
    if not items:
        raise InputError(f"input: {cfg.input} holds no items")
    return Plan(len(items), (banks, items))


# --------------------------------------------------------------------------- pure pieces


def screen_list(cfg: NocontextConfig, banks: list[Bank]) -> list[tuple[int, MCQ]]:
    """(bank index, item) of every item to screen, in input order (a seeded subset with
    ``sample``)."""
    items = [(b, item) for b, bank in enumerate(banks) for item in bank.items]
    if cfg.sample is not None and cfg.sample < len(items):
        chosen = sorted(
            random.Random(f"{cfg.seed}/nocontext/sample").sample(range(len(items)), cfg.sample)
        )
        items = [items[i] for i in chosen]
    return items


def shuffles(n_options: int, answer: int, count: int, seed: int) -> list[list[int]]:
    """``count`` seeded orders of ``n_options`` options (original indices in shown order).

    The correct option takes every position once before any position repeats (so a model
    that always answers the same letter is right at most ``ceil(count / n_options)`` times),
    and orders repeat only when no unused order with that position is left.
    """
    rng = random.Random(seed)
    positions: list[int] = []
    while len(positions) < count:
        block = list(range(n_options))
        rng.shuffle(block)
        positions += block
    others = [i for i in range(n_options) if i != answer]
    used: set[tuple[int, ...]] = set()
    orders = []
    for pos in positions[:count]:
        if math.factorial(len(others)) <= 720:  # few enough to enumerate: exact "distinct"
            free = [
                list(r)
                for r in permutations(others)
                if tuple([*r[:pos], answer, *r[pos:]]) not in used
            ]
            rest = rng.choice(free) if free else rng.sample(others, len(others))
        else:
            for _ in range(100):
                rest = rng.sample(others, len(others))
                if tuple([*rest[:pos], answer, *rest[pos:]]) not in used:
                    break
        order = [*rest[:pos], answer, *rest[pos:]]
        used.add(tuple(order))
        orders.append(order)
    return orders


def removal(
    correct: dict[str, int], shuffles_: int, max_correct: int | None, panel_k: int | None
) -> list[str]:
    """The rules that remove an item, given each model's correct-shuffle count."""
    rules = []
    if max_correct is not None and any(c > max_correct for c in correct.values()):
        rules.append("max_correct")
    if panel_k is not None and sum(2 * c > shuffles_ for c in correct.values()) > panel_k:
        rules.append("panel")
    return rules


def pick(scores: Sequence[float]) -> int:
    """Index of the highest score (the first on ties)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def normalise(logprob: float, tokens: int, text: str, norm: str) -> float:
    if norm == "chars":
        return logprob / max(1, len(text))
    if norm == "tokens":
        return logprob / max(1, tokens)
    return logprob


def plain_prompt(messages: Sequence[Message]) -> str:
    """Chat messages as one plain text (loglik with ``chat_template=false``)."""
    return "\n\n".join(m["content"] for m in messages)


# --------------------------------------------------------------------------- the generator


@dataclass
class Screener:
    """Asks one item, shuffle by shuffle, to every model of the panel."""

    cfg: NocontextConfig
    ctx: RunContext
    panel: list[tuple[str, LanguageModel]]

    @property
    def template(self) -> str:
        return f"nocontext/{self.cfg.prompt}.jinja"

    def messages(self, item: MCQ, order: list[int], prefill: bool) -> list[Message]:
        shown = [[LETTERS[p], item.options[i]] for p, i in enumerate(order)]
        return self.ctx.prompts.render(
            self.template, question=item.question, options=shown, prefill=prefill
        )

    def answer_line(self, letter: str, text: str) -> str:
        module: Any = self.ctx.prompts.env.get_template("nocontext/_option.jinja").module
        return str(module.option(letter, text))

    def ask(self, llm: LanguageModel, item: MCQ, index: int, k: int, order: list[int]) -> Answer:
        shown = [item.options[i] for i in order]
        if self.cfg.mode == "generate":
            raw = llm.complete(
                self.messages(item, order, prefill=False),
                seed=self.ctx.seed(index, "answer", k),
                max_tokens=self.cfg.max_tokens,
                temperature=self.cfg.temperature,
            )
            letter = parse_letter(raw, shown)
            pos = None if letter is None else LETTERS.index(letter)
            scores = None
        else:
            msgs = self.messages(item, order, prefill=True)
            lines = [" " + self.answer_line(LETTERS[p], t) for p, t in enumerate(shown)]
            prompt = msgs if self.cfg.chat_template else plain_prompt(msgs)
            results = llm.loglik(prompt, lines)
            scores = [
                round(normalise(r.logprob, r.tokens, line.strip(), self.cfg.norm), 6)
                for r, line in zip(results, lines, strict=True)
            ]
            pos = pick(scores)
            raw, letter = None, LETTERS[pos]
        choice = None if pos is None else order[pos]
        return Answer(
            shuffle=k,
            order=order,
            raw=raw,
            letter=letter,
            choice=choice,
            correct=choice is not None and choice == item.answer,
            scores=scores,
        )

    def screen(self, item: MCQ, index: int, source: Path) -> NocontextRecord | Reject:
        if item.answer is None:
            return Reject(
                record_id=item.item_id,
                index=index,
                stage="input",
                reason="no_answer",
                detail="the correct option is not among the options",
            )
        orders = shuffles(
            len(item.options), item.answer, self.cfg.shuffles, self.ctx.seed(index, "shuffle")
        )

        def model(entry: tuple[str, LanguageModel]) -> list[Answer] | LLMOutputError:
            llm = entry[1]
            try:
                return self.ctx.map(
                    lambda job: self.ask(llm, item, index, *job),
                    enumerate(orders),
                    workers=llm.concurrency,
                )
            except LLMOutputError as e:
                return e

        # the panel's models at once when they all take several calls (a server's); the first
        # model (in the panel's order) that fails makes the reject, as one after another would
        together = min(llm.concurrency for _, llm in self.panel) > 1
        answers: dict[str, list[Answer]] = {}
        for (label, _), got in zip(
            self.panel,
            self.ctx.map(model, self.panel, workers=len(self.panel) if together else 1),
            strict=True,
        ):
            if isinstance(got, LLMOutputError):
                return Reject.from_failure(
                    got, record_id=item.item_id, index=index, stage=f"answer.{label}"
                )
            answers[label] = got
        correct = {label: sum(a.correct for a in ans) for label, ans in answers.items()}
        removed_by = removal(correct, self.cfg.shuffles, self.cfg.max_correct, self.cfg.panel_k)
        return NocontextRecord(
            item_id=item.item_id,
            question_type=item.question_type,
            source=str(source),
            line=item.line,
            n_options=len(item.options),
            answer=item.answer,
            kept=not removed_by,
            removed_by=removed_by,
            shuffles=self.cfg.shuffles,
            correct=correct,
            unparseable={
                label: sum(a.letter is None for a in ans) for label, ans in answers.items()
            },
            answers=answers,
        )


def build_panel(cfg: NocontextConfig, ctx: RunContext) -> list[tuple[str, LanguageModel]]:
    """The screening models, loaded now (so throughput excludes loading), with their labels."""
    configs = cfg.models or [cfg.llm]
    llms = [ctx.llm_for(c) for c in configs]
    labels = cfg.labels or unique_labels([model_label(c) for c in configs])
    return list(zip(labels, llms, strict=True))


def merge_shards(
    ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]
) -> None:
    """``merge``: the summary recomputed from every shard's records (accuracies, intervals,
    letter bias and removals over the whole bank), with summed time and usage."""
    cfg = NocontextConfig.model_construct(
        **manifests[0]["config"]
    )  # as run; inputs need not exist now
    parts = [m["nocontext"] for m in manifests]
    labels = list(parts[0]["models"])
    recs = [NocontextRecord.model_validate(r) for r in records]
    tallies = {label: Tally() for label in labels}
    for rec in recs:
        for label in labels:
            tallies[label].add(rec, label, cfg.max_correct)
    summary = summarise(
        cfg,
        recs,
        tallies,
        sum(p["items"]["rejected"] for p in parts),
        sum(p["throughput"]["seconds"] for p in parts),
        {label: parts[0]["models"][label]["llm"] for label in labels},
    )
    for label in labels:
        summary["models"][label]["usage"] = Usage.total(
            [p["models"][label].get("usage") for p in parts]
        )
    ctx.write_json("summary.json", summary)
    ctx.extra["nocontext"] = summary


@generator(
    "nocontext",
    config=NocontextConfig,
    records=NocontextRecord,
    kind="screening",
    merge=merge_shards,
    plan=plan,
    uses=("llm",),
)
def nocontext(cfg: NocontextConfig, ctx: RunContext) -> Iterator[NocontextRecord | Reject]:
    """Blind screening: remove MCQ items that LLMs answer correctly without their context."""
    banks: list[Bank]
    banks, items = ctx.plan.data
    for bank in banks:
        ctx.record_input(bank.path)
    panel = build_panel(cfg, ctx)
    screener = Screener(cfg, ctx, panel)
    ctx.prompts.hash(screener.template)
    tallies = {label: Tally() for label, _ in panel}
    records: list[NocontextRecord] = []
    kept: dict[int, list[int]] = defaultdict(list)
    n_rejected = 0
    removed_tmp = ctx.out_dir / "removed.jsonl.partial"
    t0 = time.perf_counter()
    with open(removed_tmp, "w", encoding="utf-8") as removed_f:
        # items many at once (their shuffles and panel models too), one budget of calls in flight
        outcomes = ctx.imap(
            lambda i: screener.screen(items[i][1], i, banks[items[i][0]].path),
            ctx.indices(),
            width=max(llm.concurrency for _, llm in panel),
        )
        for index, outcome in zip(ctx.indices(), outcomes, strict=True):
            b, item = items[index]
            if isinstance(outcome, Reject):
                n_rejected += 1
                yield outcome
                continue
            records.append(outcome)
            for label, _ in panel:
                tallies[label].add(outcome, label, cfg.max_correct)
            if outcome.kept:
                kept[b].append(item.line)
                ctx.count("kept")
            else:
                ctx.count("removed")
                for rule in outcome.removed_by:
                    ctx.count(f"removed.{rule}")
                row = {
                    **outcome.model_dump(mode="json"),
                    "item": {"question": item.question, "options": item.options},
                }
                removed_f.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
            for label, n in outcome.unparseable.items():
                if n:
                    ctx.count(f"unparseable.{label}", n)
            yield outcome
    seconds = time.perf_counter() - t0
    os.replace(removed_tmp, ctx.out_dir / "removed.jsonl")
    (ctx.out_dir / "kept").mkdir(exist_ok=True)
    for b, bank in enumerate(banks):
        write_subset(bank, kept.get(b, []), ctx.out_dir / "kept" / bank.path.name)
    describe = {label: llm.describe() for label, llm in panel}
    summary = summarise(cfg, records, tallies, n_rejected, seconds, describe)
    for label, llm in panel:
        summary["models"][label]["usage"] = llm.usage.as_dict()
    ctx.write_json("summary.json", summary)
    ctx.extra["nocontext"] = summary
    ctx.say(table(summary))
