"""LLM judges of free-form answers: ``python -m gen judge kind=… | judge meta``.

Kinds (``kind=``), one module each:

- ``wagibench`` (:mod:`~generators.judge.wagibench`): WAGIBench's judge (paper §3.2, appendix
  I.1): a predicted digital action, reformatted into one of the 10 structured types when it is
  free text, scored 0 / 1 / 2 against the script's cues and the reference
  (``variant=cues_reference``, the paper's best) or §4.3's other inputs, read from a ``<score>``
  tag after any ``<think>`` block.
- ``context`` (:mod:`~generators.judge.context`): the context-tracking benchmark's judge: a
  turn-2 (or repair turn-3) reply labelled current / prior / clarify / abstain with a one-sentence
  rationale, from what the spec lets the judge see; balanced accuracy, repair rate.
- ``distractor_validity`` (:mod:`~generators.judge.validity`): every option of an MCQ item scored
  as an answer; an item whose wrong option scores at least its answer is flagged (``audit
  judge=<run>`` reports them).

``judge meta`` (:mod:`~generators.judge.meta`): the judge against human raters (pairwise
accuracy, kappa, a confusion matrix). The judges, their families and their agreement:
:mod:`~generators.judge.panel`. One record per input row in ``judge.jsonl``; the summary (also
in the manifest under ``judge``) in ``summary.json``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gen.engine.config import ModelChoice
from gen.engine.panel import JudgeOptions
from gen.engine.registry import generator
from gen.engine.runner import Plan, RunContext
from gen.errors import ConfigError
from gen.generators.judge import context, meta, validity, wagibench
from gen.schemas.judge import (
    ContextJudgeRecord,
    MetaRecord,
    ValidityRecord,
    Variant,
    WagibenchJudgeRecord,
)

NAME = "judge"
KINDS = {"wagibench": wagibench, "context": context, "distractor_validity": validity}


class JudgeConfig(JudgeOptions):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """action=score: the rows to judge, from the start (predictions, replies, MCQ items); null =
    every row."""
    action: Literal["score", "meta"] = "score"
    """score: judge the input (kind=); meta: the judge against human raters (python -m gen judge
    meta input=<ratings>)."""
    kind: Literal["wagibench", "context", "distractor_validity"] | None = None
    """What is judged: wagibench (predicted goals), context (context-tracking replies),
    distractor_validity (MCQ options)."""
    responses: str | None = None
    """kind=context: the replies to judge (JSONL: scenario_id, turn, response, trial, condition,
    candidate…); input= is the scenario bank."""
    references: str | None = None
    """kind=wagibench: a WAGIBench MCQ layout file or folder (gen's wagibench_mcq_*.json) giving
    rows without a reference their reference and cues, by id; meta: the reference and options of
    each rating row (the baselines)."""
    digital_state: str | None = None
    """kind=wagibench: a digital_state.json (WAGIBench's layout) giving the rows of its observations
    their app states as context."""
    socratic: str | None = None
    """kind=wagibench: a socratic run whose merged captions are the captions of the rows without
    any (the socratic variants): the clips of each row's observation, one per line."""
    # list[Variant](…): a bare list literal in a lambda is typed list[str] by mypy
    variant: list[Variant] = Field(default_factory=lambda: list[Variant](["cues_reference"]))
    """kind=wagibench: the judge's inputs (§4.3): cues_reference (the script's cues + the reference:
    the paper's best), reference, cues, socratic (captions: the rows' own, or socratic=<run>'s),
    socratic_reference, contexts_reference (cues, captions, digital state + reference); several run
    side by side."""
    reformatter: ModelChoice | None = None
    """kind=wagibench: the model that turns free-text predictions into structured actions (null: the
    primary judge)."""
    judge_tokens: int = Field(default=1024, ge=4, le=16384)
    """wagibench, distractor_validity: reply cap of a score call (WAGIBench's code: 1,024, room for
    a reasoning judge's <think> block)."""
    judge_parse: Literal["lenient", "strict"] = "lenient"
    """How a score is read: lenient (WAGIBench's code: <think> set apart, the first value between
    score tags or a bare number, 2.0 too) or strict (exactly one <score> tag holding 0, 1 or 2)."""
    reformat_tokens: int = Field(default=1024, ge=16, le=16384)
    """wagibench: reply cap of a reformat call (WAGIBench's code: 1,024, room for a reasoning
    model's <think> block); a reply cut at it is a reject, never a score."""
    judge_run: str | None = None
    """meta: a judge run whose records give the judge's value of each rating row (by id); null: the
    rows' judge field."""
    plots: bool = True
    """meta: draw the confusion matrix PNG."""
    baselines: bool = True
    """meta: the Snap-MCQ and SBERT-similarity baselines beside the judge (appendix H), for rows
    whose prediction and reference are known."""
    sbert_tie: float = Field(default=0.1, ge=0, le=2)
    """meta: the SBERT baseline ties two predictions whose similarities to the reference differ by
    at most this (appendix H: 0.1)."""

    @field_validator("variant", mode="before")
    @classmethod
    def _one_variant(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> JudgeConfig:
        if self.num_shards != 1:
            raise ValueError(
                "judge runs in one process (num_shards=1): its summary needs every row"
            )
        if self.action == "score" and self.kind is None:
            raise ValueError(
                "kind= is required: wagibench, context or distractor_validity (or: judge meta "
                "input=<ratings>)"
            )
        if self.action == "meta" and self.kind is not None:
            raise ValueError(
                "judge meta reads its kind from the ratings (numbers or labels); drop kind="
            )
        if self.kind == "context" and self.responses is None:
            raise ValueError(
                "kind=context needs responses=<replies JSONL> (input= is the scenario bank)"
            )
        if not self.variant or len(set(self.variant)) != len(self.variant):
            raise ValueError(
                "variant must name each of its variants once (cues_reference, reference, cues, "
                "socratic, "
                "socratic_reference, contexts_reference)"
            )
        return self


def plan(cfg: JudgeConfig) -> Plan:
    """One index per input row: a prediction, a reply, an MCQ item, a rating."""
    if cfg.input is None:
        raise ConfigError(
            "input= is required (predictions, a scenario bank, an MCQ run, or human ratings)"
        )
    if cfg.action == "meta":
        return meta.plan(cfg)
    assert cfg.kind is not None
    return KINDS[cfg.kind].plan(cfg)


@generator(
    NAME,
    config=JudgeConfig,
    records=(WagibenchJudgeRecord, ContextJudgeRecord, ValidityRecord, MetaRecord),
    kind="judgment",
    plan=plan,
)
def judge(cfg: JudgeConfig, ctx: RunContext) -> Iterator[Any]:
    """LLM judges: WAGIBench goal scores, context-tracking labels, distractor validity; judge meta
    vs human raters."""
    if cfg.action == "meta":
        yield from meta.run(cfg, ctx)
        return
    assert cfg.kind is not None
    yield from KINDS[cfg.kind].run(cfg, ctx)
