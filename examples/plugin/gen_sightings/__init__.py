"""A lab's gen plugin: the ``sightings`` generator and its own record kind, ``sighting``.

``gen sightings n=6`` writes memory questions a smart-glasses assistant should answer from what
its wearer's glasses saw during a day: *where* an object was last seen, or *when*. Code builds
every item from a timeline (the one this package ships, or ``timeline=<your JSON>``): no LLM, so
structure, times and answers are right by construction.

The kind is declared once (:data:`SIGHTING`); gen's ``bank add``, ``audit``, ``review`` and ``bank
export`` read sighting records through it with no edit to gen: an MCQ-shaped kind needs only its
record model and ``to_mcq`` (this one also says what near-duplicates are judged on).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

import gen
from gen.errors import InputError

# --------------------------------------------------------------------------- the kind


class Sighting(BaseModel):
    """One question about the wearer's day: where, or when, an object was last seen."""

    item_id: str
    """The item's id in its run (derived from the run's seed and the record's index)."""
    question_type: Literal["last_place", "last_time"]
    """``last_place``: where was it last seen; ``last_time``: when."""
    object: str
    """The object asked about."""
    asked_at: str = Field(pattern=r"^\d\d:\d\d$")
    """When the wearer asks (HH:MM); the timeline shown ends before it."""
    timeline: list[str]
    """What the glasses saw up to the question, one ``HH:MM what happened`` line per event."""
    question: str
    """The question the candidate is asked."""
    options: list[str] = Field(min_length=2)
    """The answer options in the order shown."""
    answer: int = Field(ge=0)
    """0-based index of the correct option."""
    seen_at: str = Field(pattern=r"^\d\d:\d\d$")
    """PRIVILEGED: when the object was last seen before the question."""


def to_mcq(record: dict[str, Any]) -> gen.MCQ:
    """A sighting as gen's multiple-choice item: the timeline is the visible context, the time
    of the last sighting the privileged side, the object the group."""
    s = Sighting.model_validate(record)
    context = "\n".join(s.timeline)
    return gen.MCQ(
        item_id=s.item_id,
        question_type=s.question_type,
        question=s.question,
        options=s.options,
        answer=s.answer if s.answer < len(s.options) else None,
        context=context,
        group=s.object,
        visible={"visible.timeline": context},
        privileged={"privileged.seen_at": s.seen_at},
        line=0,
    )


class SightingKind(gen.MCQKind):
    """An MCQ-shaped kind: everything but the near-duplicate text follows from :func:`to_mcq`."""

    def text(self, record: dict[str, Any]) -> str:
        """A day's questions share one timeline, which would make any two of them look alike:
        near-duplicates are judged on what is asked, when, and the options."""
        s = Sighting.model_validate(record)
        return "\n".join([s.question, f"asked at {s.asked_at}", *sorted(s.options)])


SIGHTING = SightingKind(
    name="sighting",
    record=Sighting,
    files=("sightings.jsonl",),
    noun="a sighting record",
    help="sighting (gen-sightings plugin): where or when the wearer last saw an object, built by "
    "code from a day's timeline; the answer is the last sighting before the question.",
    to_mcq=to_mcq,
)

# --------------------------------------------------------------------------- the generator


class Event(BaseModel):
    t: str = Field(pattern=r"^\d\d:\d\d$")
    """When (HH:MM)."""
    object: str
    place: str
    doing: str
    """What the glasses saw, as a phrase (``dropped the keys in the hallway bowl``)."""


class SightingsConfig(gen.CommonConfig):
    n: int = Field(6, ge=1)
    """Questions to write (at most as many as the timeline gives)."""
    timeline: str | None = None
    """A JSON list of events ``{t: "HH:MM", object, place, doing}`` (null: the day this plugin
    ships)."""
    options: int = Field(4, ge=2, le=6)
    """Options per question."""


def read_timeline(path: str | None) -> list[Event]:
    """The events, in time order; a file that is not a list of events is one line naming it."""
    if path is None:
        text = resources.files(__package__).joinpath("timeline.json").read_text("utf-8")
        where = "the shipped timeline"
    else:
        try:
            text = Path(path).expanduser().read_text("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"timeline: cannot read {path}: {e}") from None
        where = path
    try:
        events = TypeAdapter(list[Event]).validate_json(text)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ValueError(f"timeline: {where}: not a list of events ({loc}: {err['msg']})") from None
    return sorted(events, key=lambda e: e.t)


def questions(events: list[Event], k: int) -> list[tuple[str, int, list[int]]]:
    """Every question the timeline gives with ``k`` options: ``(type, i, asks)`` asks about the
    object of sighting ``i`` at one of the events ``asks`` (after it, before the object is seen
    again, so sighting ``i`` is the answer), when enough other places or times were seen."""
    places = {e.place for e in events}
    out = []
    for i, e in enumerate(events):
        again = next((j for j in range(i + 1, len(events)) if events[j].object == e.object), None)
        asks = list(range(i + 1, len(events) if again is None else again))
        if asks and len(places) >= k:
            out.append(("last_place", i, asks))
        if asks := [j for j in asks if j >= k]:  # k distinct times shown before the question
            out.append(("last_time", i, asks))
    return out


def build(
    cfg: SightingsConfig,
    events: list[Event],
    q: tuple[str, int, list[int]],
    rng: random.Random,
    item_id: str,
) -> Sighting:
    qtype, i, asks = q
    j = rng.choice(asks)
    last, before = events[i], events[:j]
    if qtype == "last_place":
        truth = last.place
        seen = [e.place for e in before if e.place != truth]
        rest = [e.place for e in events[j:] if e.place != truth]
        question = f"Where did I last see my {last.object}?"
    else:
        truth = last.t
        seen = [e.t for e in before if e.t != truth]
        rest = []
        question = f"When did I last see my {last.object}?"
    pool = list(dict.fromkeys(seen))  # the places (times) the timeline shows first
    if len(pool) < cfg.options - 1:
        pool += [p for p in dict.fromkeys(rest) if p not in pool]
    wrong = rng.sample(pool, cfg.options - 1)
    options = [truth, *wrong]
    rng.shuffle(options)
    return Sighting(
        item_id=item_id,
        question_type=qtype,  # type: ignore[arg-type]
        object=last.object,
        asked_at=events[j].t,
        timeline=[f"{e.t} {e.doing}" for e in before],
        question=question,
        options=options,
        answer=options.index(truth),
        seen_at=last.t,
    )


@gen.generator("sightings", config=SightingsConfig, records=Sighting, kind="sighting")
def sightings(cfg: SightingsConfig, ctx: gen.RunContext) -> Iterator[Sighting | gen.Reject]:
    """Sightings: where or when an object was last seen, from a day's timeline (a plugin)."""
    try:
        events = read_timeline(cfg.timeline)
    except ValueError as e:
        raise InputError(str(e)) from None
    pool = questions(events, cfg.options)
    random.Random(ctx.seed(0, "order")).shuffle(pool)
    # each (type, object) once before any twice: two "when did I last see my keys?" of one day
    # differ only in the hour, which is what a near-duplicate check cannot see
    seen: dict[tuple[str, str], int] = {}
    rank = []
    for qtype, i, _ in pool:
        key = (qtype, events[i].object)
        seen[key] = seen.get(key, -1) + 1
        rank.append(seen[key])
    pool = [q for _, q in sorted(zip(rank, pool, strict=True), key=lambda x: x[0])]
    for i in ctx.indices():
        item_id = ctx.record_id(i)
        if i >= len(pool):
            yield gen.Reject(
                record_id=item_id,
                index=i,
                stage="draw",
                reason="timeline_exhausted",
                detail=f"the timeline gives {len(pool)} questions with {cfg.options} options",
            )
            continue
        yield build(cfg, events, pool[i], random.Random(ctx.seed(i, "options")), item_id)
