"""Records of ``judge``: LLM judges of free-form answers, their inputs, and the meta-evaluation.

Inputs (each row validated here; a bad row is ``file:line: field: reason``):
:class:`PredictionRow` (WAGIBench goal predictions), :class:`ResponseRow` (context-tracking
replies), :class:`RatingRow` (human ratings for the meta-evaluation). Outputs, one line of
``judge.jsonl`` per input row: :class:`WagibenchJudgeRecord`, :class:`ContextJudgeRecord`,
:class:`ValidityRecord`, :class:`MetaRecord`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gen.schemas.distractors import Goal

Label = Literal["current", "prior", "clarify", "abstain"]
LABELS: tuple[str, ...] = get_args(Label)
Variant = Literal[
    "cues_reference", "reference", "cues", "socratic", "socratic_reference", "contexts_reference"
]
"""The judge's inputs (WAGIBench §4.3): the reference goal, the script's cues, a description of the
video (socratic: the captions), alone or with the reference; ``contexts_reference``: cues, captions
and the digital state with the reference. The paper's best: ``cues_reference`` (76.8 %)."""
VARIANT_CONTEXTS: dict[str, tuple[str, ...]] = {
    "reference": (),
    "cues": ("cues",),
    "socratic": ("captions",),
    "cues_reference": ("cues",),
    "socratic_reference": ("captions",),
    "contexts_reference": ("cues", "captions", "digital_state"),
}
"""The contexts each variant shows."""
Id = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]


# --------------------------------------------------------------------------- inputs


class Contexts(BaseModel):
    """What describes an observation, for the judge's variants that show contexts (cues, captions,
    digital state)."""

    model_config = ConfigDict(extra="forbid")

    cues: list[str | dict[str, Any]] | str | None = None
    """The script's cues (WAGIBench ``x.cues``): texts or cue objects."""
    captions: list[str] | str | None = None
    """Captions of the video (WAGIBench's socratic or longitudinal captions)."""
    digital_state: dict[str, Any] | str | None = None
    """The phone's app states (``digital_state.json``'s ``x.app_states``) or their rendering."""

    def empty(self) -> bool:
        return not any((self.cues, self.captions, self.digital_state))


class PredictionRow(BaseModel):
    """One predicted goal to judge (a JSONL line, or a WAGIBench-layout row with a
    ``prediction``)."""

    model_config = ConfigDict(extra="forbid")

    id: Id
    prediction: dict[str, Any] | Annotated[str, StringConstraints(min_length=1, max_length=20_000)]
    """A structured action (one of the 10 types) or free text (reformatted first)."""
    reference: Goal | None = None
    """The reference structured goal; null: joined from ``references=`` by id."""
    contexts: Contexts | None = None
    model: str | None = None
    """The candidate that predicted it (for per-model rows and the family check)."""
    model_family: str | None = None
    group: str | None = None
    """The observation the prediction is for (WAGIBench: scenario shortname + client tag)."""


class ResponseRow(BaseModel):
    """One candidate reply to judge: turn 2, or turn 3 after the repair prompt."""

    model_config = ConfigDict(extra="forbid")

    scenario_id: Id
    turn: Literal[2, 3]
    response: Annotated[str, StringConstraints(max_length=50_000)]
    trial: int = Field(default=0, ge=0, le=1_000_000)
    condition: Id = "baseline"
    """The prompt condition the candidate ran under (``prompt_conditions.json``)."""
    candidate: str | None = None
    candidate_family: str | None = None
    repair_style: Literal["named", "deictic"] = "named"
    """Turn 3: which repair prompt the candidate was sent (deictic falls back to named when the
    scenario has none)."""


class RatingRow(BaseModel):
    """One prediction's ratings: two or three human raters, and optionally the judge's value."""

    model_config = ConfigDict(extra="forbid")

    id: Id
    group: Id
    """The observation; pairs are formed among the predictions of one group."""
    raters: Annotated[list[float | Id], Field(min_length=2, max_length=3)]
    """Raters 1 and 2 (the ground truth) and an optional held-out rater 3 (human-human figure):
    numbers (0 / 0.5 / 1 or 0 / 1 / 2) or labels (current / prior / …)."""
    judge: float | Id | None = None
    """The judge's value; null: taken from ``judge_run=`` by id."""
    prediction: (
        dict[str, Any] | Annotated[str, StringConstraints(min_length=1, max_length=20_000)] | None
    ) = None
    """The predicted goal (for the baselines); null: the judge run's prediction of this id."""
    reference: (
        dict[str, Any] | Annotated[str, StringConstraints(min_length=1, max_length=20_000)] | None
    ) = None
    """The reference goal (for the baselines); null: ``references=``' structured goal of this id."""
    options: list[dict[str, Any] | str] | None = None
    """The MCQ's options, the reference among them (Snap-MCQ); null: ``references=``' mcq_set of
    this id."""


# --------------------------------------------------------------------------- outputs


class Judgment(BaseModel):
    """One judge call scored on WAGIBench's 0 / 1 / 2 scale."""

    score: int | None
    """0 irrelevant, 1 borderline, 2 very relevant; null when the judge did not follow the
    format."""
    normalised: float | None
    """score / 2: 0, 0.5 or 1 (the paper's scale)."""
    followed: bool
    """The reply held exactly one ``<score>`` tag with 0, 1 or 2 in it."""
    problem: str | None = None
    """Why not: ``no_score_tag``, ``not_a_score``, ``unfinished_think`` (``several_score_tags``
    under the strict reading)."""
    raw: str
    """The judge's reply as it wrote it."""


class Reformat(BaseModel):
    """A free-text prediction turned into one of the 10 structured actions."""

    raw: str
    """The reformatter's reply as it wrote it."""
    action: dict[str, Any] | None
    """The structured action read from its ``<answer>`` tag (one of the 10 types, normalised); null
    when ``problem`` is set."""
    problem: str | None = None
    """``no_answer_tag``, ``several_answer_tags``, ``not_json``, ``not_an_object``,
    ``unknown_type``, ``invalid_fields`` (with the reason in ``detail``)."""
    detail: str | None = None
    """For ``invalid_fields``: which fields failed and why; null otherwise."""


class WagibenchJudgeRecord(BaseModel):
    id: str
    """The prediction row's ``id`` (its reference is joined by it)."""
    group: str | None
    """The observation the prediction is for (WAGIBench: shortname + client tag); null when the row
    has none."""
    model: str | None
    """The candidate that made the prediction; null when the row does not say."""
    action_type: str
    """The reference goal's type (rows are summarised per type)."""
    prediction: dict[str, Any] | str
    """The prediction as the row gave it: a structured action or free text."""
    structured: bool
    """The prediction was already a valid action (no reformat)."""
    reformat: Reformat | None
    """The reformat call that turned a free-text prediction into an action; null when it was already
    structured."""
    outcome: Literal["judged", "reformat_invalid"]
    """``judged``, or ``reformat_invalid``: the reformat gave no valid action, so nothing was
    judged."""
    judgments: dict[str, dict[str, Judgment]]
    """variant -> judge label -> judgment (empty when the reformat failed)."""


class ContextVerdict(BaseModel):
    """The context judge's answer (the schema its output is decoded under)."""

    label: Label
    rationale: Annotated[str, StringConstraints(pattern=r'^[^\x00-\x1f"\\]{1,300}$')]
    """One sentence saying which frame the reply matches."""


class ContextJudgment(BaseModel):
    label: Label | None
    """Null when the judge's output did not fit the schema (``problem``)."""
    rationale: str | None
    """The judge's one-sentence reason; null when it gave no usable verdict."""
    correct: bool | None
    """``label`` equals the scenario's ``target_context``; null when there is no label."""
    problem: str | None = None
    """Why there is no label: the output's failure reason or the text gate it failed; null when
    followed."""
    raw: str | None = None
    """The judge's output when it was not usable; null otherwise."""


class ContextJudgeRecord(BaseModel):
    scenario_id: str
    """The scenario the reply answers (its ``scenario_id`` in ``scenarios=``)."""
    turn: Literal[2, 3]
    """2 (the question after the shift) or 3 (the reply to the repair prompt)."""
    trial: int
    """The response row's trial (0-based)."""
    condition: str
    """The prompt condition the candidate ran under."""
    candidate: str | None
    """The candidate model that replied, when the row names it."""
    target_context: Label
    """The truth, for the metrics (the judge's prompt never holds it)."""
    response: str
    """The candidate's reply that was judged."""
    signals: dict[str, list[str]]
    """Per answer list (current, prior, clarify, abstain), its terms found in the response at
    word boundaries: code signals that travel with the verdict, not the score."""
    verdicts: dict[str, ContextJudgment]
    """Judge label -> verdict."""


class ValidityRecord(BaseModel):
    """How good each option of an MCQ item is as an answer, per judge; flagged when a wrong
    option scores at least as high as the answer (WAGIBench's "multiple relevant goals")."""

    item_id: str
    """The item's id in its bank."""
    question_type: str
    """The item's question type (the summary's rows are per type)."""
    source: str
    """The bank file the item was read from."""
    answer: int
    """0-based index of the correct option."""
    n_options: int
    """How many options the item has (each judged)."""
    scores: dict[str, list[Judgment]]
    """Judge label -> one judgment per option, in the item's order."""
    flagged: dict[str, bool | None]
    """Judge label -> flagged; null when the answer's judgment did not follow the format."""
    flagged_options: dict[str, list[int]]
    """Judge label -> wrong options scoring at least the answer."""


class MetaRecord(BaseModel):
    id: str
    """The rating row's ``id`` (the prediction it rates)."""
    group: str
    """The observation; pairs are formed among one group's predictions."""
    raters: list[float | str]
    """Raters 1 and 2 (the ground truth) and an optional rater 3: scores or labels, as the input
    gave them."""
    judge: float | str | None
    """Null when the judge gave no usable value for this row (not followed, not judged)."""
    snap_mcq: float | None = None
    """Snap-MCQ baseline (appendix H): 1 when the option most similar to the prediction is the
    reference."""
    sbert: float | None = None
    """SBERT-similarity baseline: the cosine of the prediction and the reference."""
