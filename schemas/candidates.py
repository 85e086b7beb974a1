"""Candidate sets around one annotated positive (EgoIntrospect §3 and its task appendices): the
input items ``gen candidates`` reads (:class:`CandidateItem`), what the LLM writes
(``*Draft``), and the MCQ record code assembles (:class:`CandidateRecord`).

An item names its task, the question, the annotated positive (a text, or a label and a reason),
the context the candidate set is built from (timed lines or free text), the window, the other
annotated items of that window (which must never become distractors) and, for sampled
negatives, the segment's rejected alternatives. Drafts are small on purpose: fixed list sizes (in
the JSON schema) and capped strings without control characters.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    field_validator,
    model_validator,
)

from gen.schemas import Hex32, plain_text
from gen.schemas.mcq import MCQRecord

EMOTIONS = [
    "Joy",
    "Surprise",
    "Stress",
    "Social Connection",
    "Achievement",
    "Disappointment",
    "Awkward",
    "Boring",
    "Relaxation",
]
"""EgoIntrospect's fixed 9-emotion taxonomy (Task 1.2, EI-label and EI-label+reason)."""

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
"""A required, non-blank input text."""


Seconds = Annotated[float, Field(ge=0, le=10_000_000, allow_inf_nan=False)]


# --------------------------------------------------------------------------- input items


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimedLine(_In):
    """One line of a timed context (a narration, a transcript line)."""

    t: Seconds
    """Seconds from the clip start."""
    text: Text


class Positive(_In):
    """The annotated positive: a ``text``, or a ``label`` with its ``reason`` (label_reason)."""

    text: Text | None = None
    label: Text | None = None
    reason: Text | None = None
    time: Seconds | None = None
    """When it happened (seconds from the clip start), if it has a time: the option's source
    time."""
    id: Text | None = None
    """Its id in the segment's pool (sampled: negatives with this id are never drawn)."""

    @model_validator(mode="after")
    def _text_or_label(self) -> Positive:
        if self.text is None and (self.label is None or self.reason is None):
            raise ValueError("a positive needs text, or label and reason")
        return self


class Other(_In):
    """Another annotated item of the same window: never a distractor (collision avoidance)."""

    text: Text
    time: Seconds | None = None
    id: Text | None = None


class Negative(_In):
    """A rejected alternative of the segment (sampled kind: VII's not-accepted recommendations)."""

    id: Text
    text: Text
    time: Seconds | None = None


class Window(_In):
    start: Seconds
    end: Seconds

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.end < self.start:
            raise ValueError("window end must be >= start")
        return self


class CandidateItem(_In):
    """One input row of ``gen candidates`` (one line of the items JSONL)."""

    item_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    task: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]
    """The task (``memory_recall``, ``temporal_grounding``, ``request_prediction``,
    ``ei_label_reason``, ``vii``…): the records' ``question_type``."""
    question: Text
    positive: Positive
    context: list[TimedLine] | Text = Field(default_factory=list)
    """Timed lines (``[{t, text}]``) or free text: what the distractors are written from and
    what the candidate sees (minus the lines options were taken from)."""
    window: Window | None = None
    others: list[Other] = Field(default_factory=list)
    negatives: list[Negative] = Field(default_factory=list)
    sources: list[Annotated[int, Field(ge=0)]] | None = None
    """0-based context lines a generated wrong option may be based on (default: every line that
    names neither the positive nor another annotated item nor a withheld text, and whose text
    occurs once in the context)."""
    source_groups: list[list[Annotated[int, Field(ge=0)]]] = Field(default_factory=list)
    """Sets of context lines (a sub-clip's) of which at most one is the source of a generated
    wrong option (Memory Assistance Recognition: one option per sub-clip, EgoIntrospect K.1)."""
    withhold: list[Text] = Field(default_factory=list)
    """Texts the candidate's prompt must never hold (Request Prediction: the original spoken
    request)."""
    hide: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    """0-based context lines the candidate never sees and no option is based on (Memory Recall
    Prediction: the moments of the recalled details, the answer's among them)."""
    group: str | None = None
    """The unit items share (a clip, a segment), for cross-item leakage checks."""

    @field_validator("positive", mode="before")
    @classmethod
    def _plain_positive(cls, v: Any) -> Any:
        return {"text": v} if isinstance(v, str) else v

    @field_validator("others", mode="before")
    @classmethod
    def _plain_others(cls, v: Any) -> Any:
        return [{"text": x} if isinstance(x, str) else x for x in v] if isinstance(v, list) else v

    @property
    def lines(self) -> list[TimedLine]:
        """The context's timed lines (none for a free-text context)."""
        return self.context if isinstance(self.context, list) else []


# --------------------------------------------------------------------------- recall annotations


class RecallEvent(_In):
    """A high-level event setting of the participant's recall account, with its time span."""

    event_id: Text
    setting: Text | None = None
    """The event setting (restaurant, commute, gym)."""
    location: Text | None = None
    participants: list[Text] = Field(default_factory=list)
    activity: Text | None = None
    """The primary activity."""
    start: Seconds
    end: Seconds


class RecallDetail(_In):
    """One atomic vivid detail the participant recalled, located in the recording by the
    experimenters (its timestamp)."""

    detail_id: Text
    text: Text
    """The detail as recalled (refined into a concise statement)."""
    time: Seconds
    """Seconds from the session start where the detail happens."""
    event_id: Text | None = None


class RecallSession(_In):
    """One line of a recall-annotation JSONL (EgoIntrospect Task 3.1, appendices A.5 and C.5):
    a recording session, its timed text (what the clip shows, as narration, scene notes or a
    transcript: gen has no video model), the recall account's events and vivid details."""

    session_id: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)
    ]
    participant: Text | None = None
    timeline: list[TimedLine] = Field(min_length=1)
    """The session's timed lines, seconds from the session start."""
    events: list[RecallEvent] = Field(default_factory=list)
    details: list[RecallDetail] = Field(min_length=1)


# --------------------------------------------------------------------------- drafts


OptionText = Annotated[str, Field(pattern=plain_text(160))]


class PlainDraft(BaseModel):
    """Wrong options written from the context (a free-text one, or lines without sources)."""

    distractors: list[OptionText]


@lru_cache(maxsize=64)
def plain_draft(need: int) -> type[PlainDraft]:
    """:class:`PlainDraft` with exactly ``need`` distractors (in the JSON schema)."""
    return create_model(
        "PlainDraft",
        __base__=PlainDraft,
        distractors=(
            list[OptionText],
            Field(json_schema_extra={"minItems": need, "maxItems": need}),
        ),
    )


class ReasonsDraft(BaseModel):
    """label_reason: one reason per listed label (a dynamic model: one field per label)."""


@lru_cache(maxsize=64)
def reasons_draft(labels: tuple[str, ...]) -> type[ReasonsDraft]:
    """A model with one required reason per label, the label as its JSON key, in this order."""
    fields: dict[str, Any] = {
        f"l{i}": (OptionText, Field(alias=label)) for i, label in enumerate(labels)
    }
    return create_model("ReasonsDraft", __base__=ReasonsDraft, **fields)


class RewordDraft(BaseModel):
    """The positive reworded in the distractors' style, its meaning unchanged."""

    text: OptionText


class RestyleDraft(BaseModel):
    """One context line written as a wrong option in the positive's style."""

    text: OptionText


# --------------------------------------------------------------------------- records


class CandidateRecord(MCQRecord):
    """A candidate set as an MCQ: the positive and its wrong options, shuffled by a seeded RNG.

    ``origins`` per option: ``positive``, ``generated`` or ``sampled:<negative id>``.
    ``visible`` holds ``context`` (the timed lines as ``"    MMm:SSs | text"`` minus the lines
    that name the positive, that an option was taken from, or that are another annotated item of
    the window; or the free text). ``privileged`` holds ``positive`` (the annotated
    positive as written before any rewording), ``option_times`` (``{"<option index>": seconds}``
    for every option with a source time: the positive's time, a generated option's source line,
    a sampled negative's time; the audit's chronology check reads it), ``sources`` (``{"<option
    index>": the hidden context line it came from}``) and ``withheld`` (texts that must never be
    shown, such as Request Prediction's original request).
    """

    item_id: Hex32
    source_item: str
    """The input item's id."""
    kind: str
    """``generated``, ``label_reason`` or ``sampled``."""
    reworded: bool = False
    """The positive option is the LLM's rewording (it kept the meaning: ``reword_similarity``)."""
    reword_similarity: float | None = None
    """Cosine (embedder) between the kept rewording and the original positive, 4 decimals (1.0: the
    rewording was the same text); None when no rewording was kept or asked."""
    window: dict[str, float] | None = None
    """The input item's window as ``{start, end}`` in seconds; None when the item has none."""
    others: list[str] = Field(default_factory=list)
    """The window's other annotated items (the collision set), as text."""
    shuffle_seed: int
    """The seed of the option shuffle (and of the sampling, for sampled)."""
    rerank: dict[str, Any] | None = None
    """``rerank=true``: the reranker's order, duplicates and grounding flags over the pool."""
    privileged: dict[str, Any]
