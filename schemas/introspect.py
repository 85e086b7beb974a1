"""EgoIntrospect's task families built from a maintainer's own annotation files (``gen
introspect task=…``): one input schema per family, taken from what a participant labelled
(appendix A), and the record every family writes (:class:`IntrospectRecord`, an MCQ record:
binary tasks have two options, Tool Selection lists every tool and marks the required and the
acceptable ones).

Times are seconds from the start of the session's recording. ``timeline`` lines are the
session's timed text (scene notes, narration, transcript lines): gen has no video model, so a
clip is the text of its time span; a line marked ``speech`` is audio and is left out wherever the
paper removes a clip's audio.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from gen.schemas.mcq import MCQRecord

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
Id = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Seconds = Annotated[float, Field(ge=0, le=10_000_000, allow_inf_nan=False)]

TASKS = (
    "recording",
    "emotion_intensity",
    "tool_selection",
    "proactive_timing",
    "memory_assistance",
    "memory_lifespan",
)
Task = Literal[
    "recording",
    "emotion_intensity",
    "tool_selection",
    "proactive_timing",
    "memory_assistance",
    "memory_lifespan",
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Line(_In):
    """One timed line of a session."""

    t: Seconds
    """Seconds from the session's start."""
    text: Text
    """The line's text."""
    speech: bool = False
    """A transcript line (audio): dropped where a task removes the clip's audio."""


class Span(_In):
    start: Seconds
    """Seconds from the session's start."""
    end: Seconds
    """Seconds from the session's start (at or after ``start``)."""

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.end < self.start:
            raise ValueError("end must be >= start")
        return self


class SeenObject(_In):
    """An object seen at a moment (a bounding-box label, or a detector's class)."""

    label: Text
    """The object's name."""
    time: Seconds
    """Seconds from the session's start when it was seen."""


class Session(_In):
    """What every session-based input has: its id, participant, length and timed lines."""

    session_id: Id
    participant: Id | None = None
    """Who recorded the session, when the annotation says."""
    duration: Seconds
    """The recording's length (seconds)."""
    timeline: list[Line] = Field(default_factory=list)
    """The session's timed lines (narrations, transcript lines), each at or before ``duration``."""

    @model_validator(mode="after")
    def _inside(self) -> Session:
        late = next((x for x in self.timeline if x.t > self.duration), None)
        if late is not None:
            raise ValueError(
                f"a timeline line at {late.t} s is after the duration {self.duration} s"
            )
        return self


# --------------------------------------------------------------------- Task 1.1 Moment of Recording


class PhotoTarget(_In):
    """What a photo command was meant to capture (the bounding box's label) and what the
    participant hoped the photo would show."""

    label: Text
    expectation: Text | None = None


class RecordingCommand(_In):
    """One "take a photo" / "record a video" command as the participant annotated it (A.1)."""

    command_id: Id
    kind: Literal["photo", "video"]
    time: Seconds
    """When the command was given."""
    start: Seconds | None = None
    """video: the start of the intended event segment."""
    end: Seconds | None = None
    """video: its end."""
    explanation: Text | None = None
    """Why the participant recorded the moment."""
    moment_type: (
        Literal[
            "Information Moment",
            "Visual Aesthetic Curiosity",
            "Emotional Reaction",
            "Social Interaction",
            "Task/Goal Oriented",
        ]
        | None
    ) = None
    attention: Literal["High", "Normal", "Low"] | None = None
    planning: Literal["Pre Planned", "On-the-spot Plan", "Spontaneous"] | None = None
    target: PhotoTarget | None = None
    """photo: the captured object or scene."""

    @model_validator(mode="after")
    def _by_kind(self) -> RecordingCommand:
        if self.kind == "video" and (self.start is None or self.end is None):
            raise ValueError("a video command needs start and end (its event segment)")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError("end must be >= start")
        return self


class RecordingSession(Session):
    """A ``task=recording`` input line: a session, its recording commands and the objects seen in
    it (the photo test's wrong options come from these)."""

    commands: list[RecordingCommand] = Field(default_factory=list)
    objects: list[SeenObject] = Field(default_factory=list)


# ----------------------------------------------------------------------- Task 1.2 Emotion Intensity


class EmotionSegment(_In):
    """A ``task=emotion_intensity`` input line: one annotated emotion segment (A.2)."""

    segment_id: Id
    participant: Id
    session_id: Id | None = None
    start: Seconds
    end: Seconds
    labels: list[Text] = Field(min_length=1)
    """The emotion labels, the main one first (the predefined nine, or a custom one)."""
    reason: Text
    """What caused the emotion, in the participant's words."""
    intensity: int = Field(ge=1, le=5)
    """Self-rated intensity, 1 (very weak) to 5 (very strong)."""
    context: list[Line] = Field(default_factory=list)
    """The segment's timed lines (what the clip shows)."""

    @model_validator(mode="after")
    def _ordered(self) -> EmotionSegment:
        if self.end < self.start:
            raise ValueError("end must be >= start")
        return self


# -------------------------------------------------------------------------- Task 2.1 Tool Selection


class RequestSegment(_In):
    """A ``task=tool_selection`` input line: one user-initiated request segment (A.3, H.1) with
    the tools it needs: ``required`` (necessary to answer) and ``helpful`` (would improve the
    answer), in any surface form (normalised against the tool universe)."""

    request_id: Id
    participant: Id | None = None
    start: Seconds
    end: Seconds
    request: Text
    """The verified spoken request."""
    expected_response: Text | None = None
    """What an ideal answer provides, in the participant's words."""
    referents: list[SeenObject] = Field(default_factory=list)
    context: list[Line] = Field(default_factory=list)
    required_tools: list[Text] = Field(default_factory=list)
    helpful_tools: list[Text] = Field(default_factory=list)


class Tool(_In):
    """A canonical tool of the universe (``tools=`` file): its description and the raw names
    that mean it (``map_search``, ``maps_api`` -> ``location_search``)."""

    name: Id
    description: Text
    aliases: list[Text] = Field(default_factory=list)


class ToolUniverse(_In):
    """The ``tools=`` file: every canonical tool, in the order the options list them."""

    tools: list[Tool] = Field(min_length=1)


# ------------------------------------------------------------------------ Task 2.2 Proactive Timing


class Forbidden(Span):
    """A do-not-disturb interval the participant marked, with why."""

    reason: Text | None = None


class InterruptSession(Session):
    """A ``task=proactive_timing`` input line: a session, the participant's do-not-disturb
    intervals (A.4) and profile."""

    forbidden: list[Forbidden] = Field(default_factory=list)
    profile: Text | None = None


# --------------------------------------------------------------------------- Task 3.2 Memory Intent


class MemoryItem(_In):
    """One "help me remember" item as the participant annotated it (A.6, C.5 task 3.2)."""

    memory_id: Id
    time: Seconds
    """When the memory trigger was said."""
    start: Seconds | None = None
    """The cue interval (short-term) or the event interval (long-term event)."""
    end: Seconds | None = None
    content: Text
    """What to remember, as edited by the participant."""
    reason: Text | None = None
    memory_type: Text | None = None
    """Possibly Useful Information, Task Reminder, Permanent Precious Memory, Knowledge/Insights, or
    custom."""
    lifespan: Literal["short_term", "long_term"] | None = None
    """short_term: for use within 24 hours; long_term: beyond."""
    usage_hours: float | None = Field(None, ge=0)
    """When the participant expects to use it (hours after the moment); <= 24 is short-term."""
    object: Text | None = None
    """The bounding-box label of an object memory (the image-form question)."""

    @model_validator(mode="after")
    def _checks(self) -> MemoryItem:
        if (self.start is None) != (self.end is None):
            raise ValueError("give start and end together")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError("end must be >= start")
        if self.lifespan is None and self.usage_hours is None:
            raise ValueError("a memory needs lifespan or usage_hours")
        return self


class MemorySession(Session):
    """A ``task=memory_assistance`` / ``memory_lifespan`` input line: a session, its memory items
    and the objects seen in it."""

    memories: list[MemoryItem] = Field(min_length=1)
    objects: list[SeenObject] = Field(default_factory=list)


# --------------------------------------------------------------------------- the record


class IntrospectRecord(MCQRecord):
    """One question of a task family, as an MCQ record (``audit``, ``bank add`` and ``evaluate``
    read it): ``question_type`` names the question type (``recording_test``, ``photo_test``,
    ``emotion_intensity_highest`` / ``_lowest``, ``tool_selection``, ``proactive_timing``,
    ``memory_assistance_event`` / ``_object``, ``memory_lifespan``); ``visible.context`` is the
    clip's text as the candidate sees it; ``privileged`` the annotation behind the answer.
    Tool Selection is multi-select: ``answers`` are the required tools, ``acceptable`` the
    required and helpful ones, ``answer`` the first required tool (or "No tool needed")."""

    task: str
    """The task family it was built for (``task=``): ``recording``, ``emotion_intensity``,
    ``tool_selection``, ``proactive_timing``, ``memory_assistance`` or ``memory_lifespan``."""
    source: str
    """The annotation the question was built from (session/command, segment ids…)."""
    shuffle_seed: int | None = None
    """The seed of the question's option shuffle (to replay it); null where no options were
    shuffled."""
    answers: list[int] | None = None
    """Tool Selection: 0-based indices of the required tools (or of "No tool needed"); null for the
    other families."""
    acceptable: list[int] | None = None
    """Tool Selection: the required and the helpful tools' indices, sorted; null for the other
    families."""
    window: Span | None = None
    """The clip's time span in its session (seconds)."""
    prompt: list[dict[str, str]] | None = None
    """The paper's own prompt for the item as chat messages (``memory_lifespan``: K.1's
    chain-of-thought prompt, ``prompts/introspect/lifespan.jinja``); ``evaluate`` asks its own
    MCQ prompt."""
