"""Context-tracking scenarios (the Wearable Assistant Context Bench's released format): the
record (:class:`ScenarioRecord`, field names and order as in the released ``scenarios.jsonl``),
what the LLM writes at each stage (``*Draft``), and the per-scenario check sidecar
(:class:`ScenarioChecks`, a line of ``scenario_checks.jsonl``; the released schema has no room
for it).

Drafts are small: every string has a length cap the grammar enforces (a pattern that also keeps
control characters, quotes and backslashes out, as in :mod:`schemas.tom`), lists have bounded
sizes, and which draft a scenario gets (cross-session, clarify, abstain, contrast) is chosen by
code from its skeleton, so the model never decides which fields exist.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from gen.schemas import plain_text

ChangeType = Literal[
    "object_in_hand",
    "object_state",
    "sequential_task",
    "location",
    "object_in_view",
    "absent_referent",
    "screen_content",
    "cross_session_reference",
]
Target = Literal["current", "prior", "clarify", "abstain"]
Complexity = Literal[
    "single_referent", "multi_referent", "distractor_present", "absent_referent", "compound_shift"
]
Difficulty = Literal["easy", "medium", "hard"]
TimeGap = Literal["seconds", "minutes", "hours", "next_day"]
Subset = Literal["bank", "contrast"]

CHANGE_TYPES: tuple[str, ...] = get_args(ChangeType)
"""The 8 shift types, in the released bank's order (its ids run through them in this order)."""
TARGETS: tuple[str, ...] = get_args(Target)
COMPLEXITIES: tuple[str, ...] = get_args(Complexity)
DIFFICULTIES: tuple[str, ...] = get_args(Difficulty)
TIME_GAPS: tuple[str, ...] = get_args(TimeGap)
SUBSETS: tuple[str, ...] = get_args(Subset)


Name = Annotated[str, Field(pattern=plain_text(40, 2))]
"""An object, place or screen name (1-4 words)."""
Phrase = Annotated[str, Field(pattern=plain_text(60, 3))]
"""A gold phrase: technique or state vocabulary, an indicator."""
CameraText = Annotated[str, Field(pattern=plain_text(360, 40))]
"""A camera (scene) description; the released ones run 200-450 characters."""
SpeechText = Annotated[str, Field(pattern=plain_text(140, 6))]
"""One spoken user turn."""


# --------------------------------------------------------------------------- the record


class Gold(BaseModel):
    """Judge-only answer lists (inline on each scenario)."""

    model_config = ConfigDict(extra="forbid")

    current_answers: list[str] = Field(default_factory=list)
    """Words of a reply grounded in the turn-2 frame: the object's name, technique and state
    vocabulary; empty when there is no current referent."""
    prior_answers: list[str] = Field(default_factory=list)
    """Words of a reply anchored to the earlier frame (turn 1 or ``context_image``), in the same
    three categories."""
    clarify_indicators: list[str] = Field(default_factory=list)
    """Phrases of a clarifying question (scored for ``clarify``); empty when the scenario has
    none."""
    abstain_indicators: list[str] = Field(default_factory=list)
    """Phrases of declining to answer (scored for ``abstain``); empty when the scenario has none."""


class ScenarioRecord(BaseModel):
    """One scenario, in the released ``scenarios.jsonl`` layout: field names and their order are
    those of the released rows (``gold`` last, where the rows put it; schema.md's table lists it
    fourth), so the benchmark's own tools read gen's output unchanged."""

    model_config = ConfigDict(extra="forbid")

    scenario_id: str = Field(pattern=r"^(sc|adv)-\d{2,}$")
    """``sc-NN`` in the bank subset, ``adv-NN`` in the contrast subset (gen numbers them from
    ``id_start``)."""
    subset: Subset
    """``bank`` (the primary bank) or ``contrast`` (the distractor-rich pack)."""
    pair_id: str | None = None
    """``pair-NN`` shared by a contrast A/B pair (one turn 1 and turn-2 scene, targets current and
    prior); null otherwise."""
    target_context: Target
    """What a good assistant grounds turn 2 in: ``current`` (the turn-2 frame), ``prior`` (an
    earlier one), ``clarify`` (ask) or ``abstain`` (decline)."""
    change_type: ChangeType
    """The shift type between turn 1 and turn 2 (one of eight: ``object_in_hand``,
    ``object_state``…)."""
    activity_domain: str
    """Domain tag (``workshop``, ``kitchen``…), for coverage; gen picks the least-used of the shift
    type's eight."""
    referent_complexity: Complexity
    """Complexity estimate: ``single_referent``, ``multi_referent`` (clarify),
    ``distractor_present``, ``absent_referent`` or ``compound_shift``."""
    difficulty_tier: Difficulty
    """``easy``, ``medium`` or ``hard`` (clarify and abstain are hard; the rest near 30/40/30 %)."""
    time_gap_bucket: TimeGap | None = None
    """Time between turn 1 and turn 2: ``seconds``, ``minutes``, ``hours`` or ``next_day`` (gen: a
    seeded choice among the shift type's)."""
    context_image: str | None
    """Camera description from before the conversation; gen writes it exactly for
    ``cross_session_reference``, null otherwise."""
    turn_1_image: str
    """Camera description when turn 1 is spoken (physical properties, never the object's name)."""
    turn_1_user: str
    """The user's first message: natural speech that names no visible object."""
    turn_2_image: str
    """Camera description when turn 2 is spoken: where the shift becomes visible."""
    turn_2_user: str
    """The user's follow-up after the shift; it does not announce the shift."""
    turn_3_repair_prompt: str
    """The named repair sent after a turn-2 miss: it names the intended and the wrong referent."""
    turn_3_repair_prompt_deictic: str | None = None
    """A repair in pointing words only (``this``, ``what I'm holding now``), for a visible current
    referent; null where a gesture cannot resolve it."""
    notes: str | None = None
    """Authoring notes, not read by the runner (gen: the shift type, domain, target and
    referents)."""
    gold: Gold
    """The judge-only answer lists; the candidate never sees them."""


RECORD_FIELDS: tuple[str, ...] = tuple(ScenarioRecord.model_fields)
GOLD_FIELDS: tuple[str, ...] = tuple(Gold.model_fields)
VISIBLE_FIELDS: tuple[str, ...] = (
    "context_image",
    "turn_1_image",
    "turn_1_user",
    "turn_2_image",
    "turn_2_user",
    "turn_3_repair_prompt",
    "turn_3_repair_prompt_deictic",
)
"""What the candidate sees (the audio and camera channels); the gold lists are the judge's, and
target_context, change_type and notes are seen by neither."""


# --------------------------------------------------------------------------- stage 1: situations


class Situation(BaseModel):
    """One frame's referent and its gold vocabulary, by the three categories."""

    name: Name
    technique: list[Phrase] = Field(min_length=2, max_length=3)
    state: list[Phrase] = Field(min_length=2, max_length=3)


class SituationsDraft(BaseModel):
    """current / prior targets: the earlier (turn 1) and the now (turn 2) referent."""

    earlier: Situation
    now: Situation


class CrossSessionSituationsDraft(BaseModel):
    """cross_session_reference: the referent seen before the conversation (context image), the
    scene of turn 1 (no gold), and the turn 2 referent."""

    earlier: Situation
    meanwhile: Phrase
    now: Situation


class ClarifySituationsDraft(BaseModel):
    """clarify: the turn 1 referent, what the half-hidden turn 2 object could be, and phrases of
    a clarifying reply."""

    earlier: Situation
    candidates: list[Name] = Field(min_length=2, max_length=3)
    clarify_indicators: list[Phrase] = Field(min_length=3, max_length=5)


class CrossClarifySituationsDraft(BaseModel):
    """clarify on a cross-session reference: the context-image referent, the scene of turn 1, and
    the half-hidden turn 2 object's possibilities with clarifying phrases."""

    earlier: Situation
    meanwhile: Phrase
    candidates: list[Name] = Field(min_length=2, max_length=3)
    clarify_indicators: list[Phrase] = Field(min_length=3, max_length=5)


class AbstainSituationsDraft(BaseModel):
    """abstain on an absent referent: the turn 1 referent, the detail of it the camera never
    showed, and phrases of a reply that declines."""

    earlier: Situation
    hidden_detail: Phrase
    abstain_indicators: list[Phrase] = Field(min_length=3, max_length=5)


class ShiftAbstainSituationsDraft(BaseModel):
    """abstain on a shift that keeps a referent in view: both referents, the detail of the turn 2
    referent the camera does not show, and phrases of a reply that declines."""

    earlier: Situation
    now: Situation
    hidden_detail: Phrase
    abstain_indicators: list[Phrase] = Field(min_length=3, max_length=5)


class CrossAbstainSituationsDraft(BaseModel):
    """abstain on a cross-session reference: the context-image referent (whose detail the camera
    never showed), the scene of turn 1, the turn 2 referent, and phrases of a reply that
    declines."""

    earlier: Situation
    meanwhile: Phrase
    now: Situation
    hidden_detail: Phrase
    abstain_indicators: list[Phrase] = Field(min_length=3, max_length=5)


# --------------------------------------------------------------------------- stage 2: camera


class CameraDraft(BaseModel):
    turn_1_image: CameraText
    turn_2_image: CameraText


class CrossSessionCameraDraft(BaseModel):
    context_image: CameraText
    turn_1_image: CameraText
    turn_2_image: CameraText


class ContrastCameraDraft(BaseModel):
    """A contrast pair: one turn 1, and the turn 2 scene described twice (one per member: the
    benchmark's validator refuses two identical turn-2 images)."""

    turn_1_image: CameraText
    turn_2_image: CameraText
    turn_2_image_b: CameraText


# --------------------------------------------------------------------------- stage 3: speech


class SpeechDraft(BaseModel):
    turn_1_user: SpeechText
    turn_2_user: SpeechText
    turn_3_repair_prompt: SpeechText


class DeicticSpeechDraft(SpeechDraft):
    """Where the authoring rules allow a deictic repair (visible-referent current targets)."""

    turn_3_repair_prompt_deictic: SpeechText


class FollowUpDraft(BaseModel):
    """Contrast member B: its own turn 2 and named repair after the shared turn 1."""

    turn_2_user: SpeechText
    turn_3_repair_prompt: SpeechText


# --------------------------------------------------------------------------- model checks


class IdentifyDraft(BaseModel):
    """The identification check: what a model names from one camera description alone."""

    name: Name


# --------------------------------------------------------------------------- sidecar


class ScenarioChecks(BaseModel):
    """One line of ``scenario_checks.jsonl``: per scenario (accepted or rejected) its skeleton,
    gold vocabulary by category, every rule's first and final result, the attempts per stage,
    and the model checks' answers."""

    model_config = ConfigDict(extra="forbid")

    scenario_id: str
    index: int
    status: Literal["accepted", "rejected"]
    stage: str | None = None
    """Where a rejected scenario failed."""
    reason: str | None = None
    """The rule (or LLM failure) that rejected it."""
    skeleton: dict[str, Any]
    categories: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Gold vocabulary by list and category: ``{"current_answers": {"name": …, "technique": […],
    "state": […]}, …}``."""
    rules: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """``"<stage>.<rule>": {"first": bool, "final": bool, "evaluations": int}``."""
    attempts: dict[str, int] = Field(default_factory=dict)
    """LLM generations per stage."""
    identification: list[dict[str, Any]] = Field(default_factory=list)
    """Per camera field and model: the gold name, the model's answer, the cosine, pass."""
    leak: list[dict[str, Any]] = Field(default_factory=list)
    """Per model: its turn-1 and turn-2 replies without camera blocks, and the gold hits."""


class LockCheckRecord(BaseModel):
    """One lock entry that matches (a line of ``verify.jsonl``)."""

    key: str
    """The lock entry checked: ``schema_revision`` or a file's or the judge prompt's SHA-256."""
    value: Any
    """Its value, the same in the lock and recomputed from the files."""
    status: Literal["ok"] = "ok"
    """Always ``ok``: an entry that drifted is a reject naming both values instead."""
