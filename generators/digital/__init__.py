"""Digital Context Generator (WAGIBench G.1): per-app phone states for a sampled persona and moment.

For each bundle code samples the global state (a main persona, 5 related personas, a datetime,
optionally a digital cue) and a *skeleton* per app: how many items, their ids, times and
participants. The LLM only writes the words (titles, contents, queries, places). Validators then
drop or correct bad items, a bounded number of regenerations tops up thin apps, and cue-derived
items are merged in time order into the full lists and kept in the key lists (D*).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from gen.errors import ConfigError, InputError, LLMOutputError, MissingInputError
from gen.gates import Gates, Kind, Language, count_key, key
from gen.paths import EXAMPLES
from gen.run import CommonConfig, Plan, RunContext, derive_id, generator, iter_jsonl
from generators.personas import ensure_pool, load_pool, sample_related
from schemas import Reject
from schemas import digital as S
from schemas.digital import LONG_CHARS as LONG
from schemas.digital import SHORT_CHARS as SHORT
from schemas.digital import TAG_CHARS, App
from schemas.digital import TEXT_CHARS as TEXT
from schemas.personas import PersonaRecord, RelatedPersona

FMT_M = "%Y-%m-%d %H:%M"
FMT_S = "%Y-%m-%d %H:%M:%S"
DEFAULT_HOUR_WEIGHTS = [0.6, 0.3, 0.2, 0.1, 0.1, 0.3, 1.2, 3, 4, 4.5, 4.5, 4.5, 5, 4.5, 4.5, 4.5,
                        4.5, 5, 5.5, 5.5, 5, 4, 3, 1.5]
"""Hour-of-day weights: phone use is low at night and peaks in the evening."""


class CountsConfig(BaseModel):
    """Items requested per app, each ``[low, high]`` (uniform)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    calendar_events: tuple[int, int] = (4, 7)
    messaging_conversations: tuple[int, int] = (2, 4)
    messages_per_conversation: tuple[int, int] = (3, 7)
    notes: tuple[int, int] = (2, 4)
    searches: tuple[int, int] = (5, 9)
    videos: tuple[int, int] = (4, 7)
    places: tuple[int, int] = (3, 6)
    tracks: tuple[int, int] = (4, 7)

    @model_validator(mode="after")
    def _ordered(self) -> CountsConfig:
        for name, (lo, hi) in self:
            if not 1 <= lo <= hi <= 30:
                raise ValueError(f"counts.{name} must be [low, high] with 1 <= low <= high <= 30")
        return self


class MinItemsConfig(BaseModel):
    """Items an app must keep after validation; fewer means regenerate (then reject)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    Calendar: int = Field(2, ge=0)
    Messaging: int = Field(1, ge=0)
    Notes: int = Field(1, ge=0)
    Search: int = Field(3, ge=0)
    Videos: int = Field(2, ge=0)
    Maps: int = Field(2, ge=0)
    Music: int = Field(2, ge=0)


GOAL_APPS: dict[str, list[App]] = {
    "communication": [App.Messaging], "translate": [App.Messaging],
    "temporal_attention": [App.Calendar], "find_directions": [App.Maps, App.Calendar],
    "entertain": [App.Music, App.Videos], "search": [App.Search], "store_memory": [App.Notes],
    "shop": [App.Notes, App.Search], "guided_activity": [App.Videos, App.Search], "control_environment": [],
}
"""Which app's state makes a goal of each action type inferable. Code refines two: ``entertain``
takes Music for audio and Videos for vision; ``search`` with ``source: timeline`` (the user's own
history) takes Notes or Messaging instead of Search. An empty list: no digital context."""


class DigitalConfig(CommonConfig):
    n: int | None = Field(None, ge=1, le=10_000_000)  # type: ignore[assignment]
    """Bundles to make: 5 (about 7 minutes on 2 cores), or with goals= one per goal (the first n)."""
    goals: str | None = None
    """A goal bank (JSONL or parquet, as distractors reads): one bundle per goal, whose cued app
    makes the goal inferable; the bundle carries the goal row's client_tag and group (WAGIBench's
    join key) and replaces the cue bank."""
    goal_apps: dict[str, list[App]] = Field(default_factory=lambda: {k: list(v) for k, v in GOAL_APPS.items()})
    """goals=: per action type, the apps whose state may make the goal inferable ([]: uncued)."""
    cue_rank_max: int = Field(3, ge=1)
    """goals=: the key-only state must rank its own goal among the top this many goals of the bank
    (MiniLM similarity; the goal's own group's paraphrases left out), else the bundle is rejected
    as cue_not_specific."""
    persona_pool: int = Field(50, ge=6, le=100_000)
    """Persona pool size, made (or reused, by seed) with the personas generator."""
    persona_file: str | None = None
    """An existing pool (personas.jsonl or a personas run folder) instead of persona_pool."""
    pool_dir: str = "outputs/personas/pools"
    """Where generated pools are kept for reuse."""
    apps: list[App] = list(App)
    """Apps to generate."""
    cue_file: str | None = None
    """Cue bank JSONL (cue_id, app, cue); null means the shipped examples/cues.jsonl."""
    cue_rate: float = Field(0.3, ge=0, le=1)
    """Share of bundles that get a cue from the cue bank."""
    cue: str | None = None
    """One inline cue for every bundle (with cue_app)."""
    cue_app: App | None = None
    """The app the inline cue belongs to."""
    date_start: dt.date = dt.date(2025, 1, 1)
    """First date the current datetime is sampled from."""
    date_end: dt.date = dt.date(2025, 12, 31)
    """Last date the current datetime is sampled from."""
    hour_weights: list[float] = Field(default_factory=lambda: list(DEFAULT_HOUR_WEIGHTS),
                                      min_length=24, max_length=24)
    """Relative weight of each hour of the day (24 values)."""
    counts: CountsConfig = Field(default_factory=CountsConfig)
    """Items requested per app."""
    min_items: MinItemsConfig = Field(default_factory=MinItemsConfig)
    """Items an app must keep after validation."""
    items_per_call: int = Field(1, ge=1, le=30)
    """Items (conversations for Messaging) one LLM call writes. 1 suits small models; a
    large model can write a whole app per call."""
    app_attempts: int = Field(3, ge=1, le=10)
    """LLM generations per call before its items are given up (then the app is topped up
    or the bundle rejected)."""
    window_past_days: int = Field(30, ge=1)
    """Items may lie at most this many days before the current datetime."""
    window_future_days: int = Field(30, ge=1)
    """Calendar events may lie at most this many days after it."""
    cue_recent_minutes: tuple[int, int] = (1, 10)
    """A cue item happened this many minutes before now (it is the latest item)."""
    language: Language = "en"
    """The language the apps' texts must be in (the text gates' language check)."""

    @model_validator(mode="after")
    def _check(self) -> DigitalConfig:
        if self.date_end < self.date_start:
            raise ValueError("date_end must not be before date_start")
        if (self.cue is None) != (self.cue_app is None):
            raise ValueError("cue and cue_app go together (cue=\"...\" cue_app=Messaging)")
        if self.cue_app is not None and self.cue_app not in self.apps:
            raise ValueError(f"cue_app {self.cue_app.value} is not among apps={[a.value for a in self.apps]}")
        if len(set(self.apps)) != len(self.apps):
            raise ValueError("apps must not repeat")
        if sum(self.hour_weights) <= 0 or min(self.hour_weights) < 0:
            raise ValueError("hour_weights must be >= 0 with a positive sum")
        lo, hi = self.cue_recent_minutes
        if not 0 <= lo <= hi < 15:
            raise ValueError("cue_recent_minutes must be [low, high] with 0 <= low <= high < 15")
        unknown = sorted(set(self.goal_apps) - set(GOAL_APPS))
        if unknown:
            raise ValueError(f"goal_apps: unknown action type(s) {unknown}; the types are {sorted(GOAL_APPS)}")
        if self.goals is not None and self.cue is not None:
            raise ValueError("goals= sets each bundle's cue from its goal; drop cue=")
        return self


# --------------------------------------------------------------------------- global state


@dataclass
class State:
    """The global state of one bundle, as the prompts see it."""

    main: PersonaRecord
    related: list[RelatedPersona]
    now: dt.datetime
    cue: S.Cue | None

    @property
    def names(self) -> set[str]:
        return {self.main.name, *(r.persona.name for r in self.related)}

    @property
    def now_text(self) -> str:
        return self.now.strftime(FMT_M)

    @property
    def weekday(self) -> str:
        return self.now.strftime("%A")


def sample_datetime(rng: random.Random, cfg: DigitalConfig) -> dt.datetime:
    days = (cfg.date_end - cfg.date_start).days
    day = cfg.date_start + dt.timedelta(days=rng.randint(0, days))
    hour = rng.choices(range(24), weights=cfg.hour_weights)[0]
    return dt.datetime(day.year, day.month, day.day, hour, rng.randint(0, 59))


def load_cues(path: Path) -> list[dict[str, str]]:
    """Read a cue bank; a bad line is an InputError naming the file and line."""
    cues = []
    valid = ", ".join(a.value for a in App)
    for lineno, row in iter_jsonl(path):
        if not isinstance(row, dict) or not {"cue_id", "app", "cue"} <= row.keys():
            raise InputError(f"{path}:{lineno}: a cue needs the fields cue_id, app and cue")
        if not isinstance(row["app"], str) or row["app"] not in App.__members__:
            raise InputError(f"{path}:{lineno}: unknown app {row['app']!r} (choose from {valid})")
        if not isinstance(row["cue"], str) or not row["cue"].strip():
            raise InputError(f"{path}:{lineno}: empty cue text")
        cues.append({"cue_id": str(row["cue_id"]), "app": row["app"], "cue": str(row["cue"])})
    if not cues:
        raise InputError(f"{path}: the cue bank is empty")
    return cues


def pick_cue(rng: random.Random, cfg: DigitalConfig, cues: list[dict[str, str]],
             related: list[RelatedPersona]) -> S.Cue | None:
    """Inline cue for every bundle, or a bank cue with probability cue_rate. A ``{person}``
    slot is filled with a related persona, so the cue's people are in the persona set."""
    person = rng.choice(related).persona
    draw = rng.random()
    pick = rng.random()
    if cfg.cue is not None:
        row = {"cue_id": "inline", "app": cfg.cue_app.value, "cue": cfg.cue}  # type: ignore[union-attr]
    else:
        usable = [c for c in cues if App(c["app"]) in cfg.apps]
        if not usable or draw >= cfg.cue_rate:
            return None
        row = usable[int(pick * len(usable))]
    named = "{person}" in row["cue"]
    text = row["cue"].replace("{person}", person.first_name)
    return S.Cue(cue_id=row["cue_id"], app=App(row["app"]), cue=text,
                 person=person.name if named else None)


# --------------------------------------------------------------------------- validators


PLACEHOLDER = re.compile(
    r"^\W*(title|location|content|topic|query|name|address|artist|album|text|string|message|note"
    r"|event|event title|song|track|video|place|n/?a|none|null|tbd|todo|untitled|unknown|example"
    r"|lorem ipsum.*|\.\.\.|…)\W*$"
    r"|[{}<>\[\]]|lorem ipsum|placeholder|your (?:title|text|message|query)|insert \w+ here",
    re.I,
)
DATETIME_TEXT = re.compile(r"^\s*(\d{4}-\d{2}-\d{2}([ T]\d{1,2}:\d{2}(:\d{2})?)?|\d{1,2}:\d{2}(\s?[ap]\.?m\.?)?)\s*$", re.I)


def text_problem(text: str) -> str | None:
    """Why a generated text is unusable by digital's own rules (after the shared text gates):
    empty, a format hint echoed back, or a datetime."""
    if not text or not text.strip():
        return "empty_text"
    if DATETIME_TEXT.match(text):
        return "datetime_as_text"
    if PLACEHOLDER.search(text):
        return "placeholder_text"
    return None


def time_problem(value: str, fmt: str, now: dt.datetime, *, past: bool,
                 past_days: int, future_days: int) -> str | None:
    """Why an item time is invalid: unparseable, outside the window, or (past items) after now."""
    try:
        t = dt.datetime.strptime(value, fmt)
    except (TypeError, ValueError):
        return "unparseable_datetime"
    if t < now - dt.timedelta(days=past_days) or t > now + dt.timedelta(days=future_days):
        return "out_of_window"
    if past and t > now:
        return "future_past_item"
    return None


@dataclass
class Checker:
    """Runs the validators over one app's items and counts what it dropped or corrected. Texts
    go through the shared gates of ``gates`` (the prompt's, when a call is checked), then
    digital's own :func:`text_problem`."""

    app: App
    state: State
    cfg: DigitalConfig
    counts: dict[str, int] = field(default_factory=dict)
    gates: Gates | None = None

    def __post_init__(self) -> None:
        if self.gates is None:
            self.gates = Gates(language=self.cfg.language)

    def note(self, rule: str, action: str = "dropped", n: int = 1) -> None:
        k = count_key(self.app.value, rule, action)
        self.counts[k] = self.counts.get(k, 0) + n

    def time_ok(self, value: str, fmt: str, past: bool) -> bool:
        problem = time_problem(value, fmt, self.state.now, past=past,
                               past_days=self.cfg.window_past_days, future_days=self.cfg.window_future_days)
        if problem:
            self.note(problem)
        return problem is None

    def problem(self, text: str, kind: Kind = "title", cap: int | None = SHORT) -> str | None:
        """The first shared gate or digital rule ``text`` fails, as a counter name."""
        assert self.gates is not None
        failure = self.gates.check(text, kind, max_chars=cap)
        return failure.gate if failure else text_problem(text)

    def texts_ok(self, *texts: str | tuple[str, Kind, int | None]) -> bool:
        """Every text passes (a bare text is a short title; else ``(text, kind, cap)``); the
        first failure is counted."""
        for t in texts:
            problem = self.problem(*t) if isinstance(t, tuple) else self.problem(t)
            if problem:
                self.note(problem)
                return False
        return True

    def people(self, names: list[str]) -> list[str]:
        kept = [n for n in names if n in self.state.names]
        if len(kept) != len(names):
            self.note("unknown_participant", "corrected", len(names) - len(kept))
        return kept

    def dedupe(self, items: list[Any], get_key: Callable[[Any], str]) -> list[Any]:
        seen: set[str] = set()
        out = []
        for item in items:
            k = key(get_key(item))
            if k in seen:
                self.note("duplicate")
                continue
            seen.add(k)
            out.append(item)
        return out


def fix_duration(secs: int, chk: Checker | None = None) -> int:
    """A video length in seconds: tiny values are minutes the model forgot to convert; a
    change is counted as ``duration_secs`` corrected when a checker is given."""
    fixed = min(secs * 60 if 1 <= secs < 15 else 60 if secs < 1 else secs, 4 * 3600)
    if fixed != secs and chk is not None:
        chk.note("duration_secs", "corrected")
    return fixed


def clamp(value: int, lo: int, hi: int, chk: Checker, rule: str) -> int:
    if not lo <= value <= hi:
        chk.note(rule, "corrected")
        return max(lo, min(hi, value))
    return value


def validate_items(app: App, items: list[Any], chk: Checker) -> list[Any]:
    """Drop or correct invalid items of one app (the lists hold schema item models)."""
    if app is App.Calendar:
        kept = []
        for e in items:
            if not chk.texts_ok(e.title, (e.location, "name", SHORT)):
                continue
            if not (chk.time_ok(e.start_datetime, FMT_M, past=False) and chk.time_ok(e.end_datetime, FMT_M, past=False)):
                continue
            if e.end_datetime <= e.start_datetime:
                chk.note("end_before_start")
                continue
            e.attendees = chk.people(e.attendees)
            kept.append(e)
        return chk.dedupe(kept, lambda e: e.title + "|" + e.start_datetime)
    if app is App.Messaging:
        kept = []
        for c in items:
            c.participants = chk.people(c.participants)
            msgs = []
            for m in c.messages:
                if m.sender not in chk.state.names or m.sender not in c.participants:
                    chk.note("unknown_sender")
                    continue
                if chk.texts_ok((m.content, "prose", TEXT)) and chk.time_ok(m.timestamp, FMT_S, past=True):
                    msgs.append(m)
            c.messages = chk.dedupe(msgs, lambda m: m.sender + "|" + m.content)
            # a group's title is the model's topic; a two-person chat's is the other's name (code's)
            title: tuple[str, Kind, int | None] = (c.title, "title" if len(c.participants) > 2 else "name", SHORT)
            if len(c.participants) < 2 or not c.messages or not chk.texts_ok(title):
                chk.note("empty_conversation")
                continue
            kept.append(c)
        return kept
    if app is App.Notes:
        kept = [n for n in items if chk.texts_ok(n.title, (n.content, "prose", LONG))
                and chk.time_ok(n.last_updated, FMT_M, past=True)]
        return chk.dedupe(kept, lambda n: n.title)
    if app is App.Search:
        kept = [s for s in items if chk.texts_ok(s.query) and chk.time_ok(s.timestamp, FMT_S, past=True)]
        return chk.dedupe(kept, lambda s: s.query)
    if app is App.Videos:
        kept = []
        for v in items:
            v.duration_secs = fix_duration(v.duration_secs, chk)
            if chk.texts_ok(v.title) and chk.time_ok(v.watch_timestamp, FMT_S, past=True):
                tags = [t for t in v.tags if chk.problem(t, "name", TAG_CHARS) is None]
                if len(tags) != len(v.tags):
                    chk.note("bad_tag", "corrected", len(v.tags) - len(tags))
                v.tags = list(dict.fromkeys(tags))
                kept.append(v)
        return chk.dedupe(kept, lambda v: v.title)
    if app is App.Maps:
        kept = [p for p in items if chk.texts_ok((p.name, "name", SHORT), (p.address, "name", SHORT))
                and chk.time_ok(p.last_viewed, FMT_S, past=True)]
        return chk.dedupe(kept, lambda p: p.name)
    kept = [t for t in items if chk.texts_ok(*((x, "name", SHORT) for x in (t.title, t.artist, t.album)))
            and chk.time_ok(t.played_at, FMT_S, past=True)]
    return chk.dedupe(kept, lambda t: t.title + "|" + t.artist)


# --------------------------------------------------------------------------- skeletons


def _minutes_ago(now: dt.datetime, rng: random.Random, lo: float, hi: float) -> dt.datetime:
    return (now - dt.timedelta(minutes=rng.uniform(lo, hi))).replace(microsecond=0)


def _past_times(rng: random.Random, now: dt.datetime, k: int, max_days: float) -> list[dt.datetime]:
    """k past moments, oldest first, at least 15 minutes before now (cue items are newer)."""
    return sorted(_minutes_ago(now, rng, 15, max_days * 1440) for _ in range(k))


@dataclass
class Skeleton:
    """Code-owned structure of one app's state; the prompt shows it to the LLM."""

    k: int
    slots: list[dict[str, Any]]


APP_TOPICS: dict[App, tuple[str, ...]] = {
    App.Calendar: ("a doctor's appointment", "groceries", "a haircut", "the gym", "a work meeting",
                   "paying a bill", "a dinner out", "a class", "a phone call", "a delivery"),
    App.Messaging: ("weekend plans", "a favour", "dinner tonight", "good news", "a shared errand",
                    "a funny story", "running late", "a birthday", "a lost item", "a recommendation"),
    App.Notes: ("a shopping list", "a to-do list", "gift ideas", "a trip plan", "books to read",
                "a recipe", "meeting notes", "a workout plan", "passwords hint list", "budget"),
    App.Search: ("a recipe", "the weather", "a product to buy", "a health question", "a local business",
                 "the news", "a travel plan", "a how-to question", "a film", "a word's meaning"),
    App.Videos: ("a tutorial", "a music video", "comedy", "the news", "a documentary",
                 "sports highlights", "a product review", "a travel vlog", "a cooking video"),
    App.Maps: ("a café", "a pharmacy", "a supermarket", "a gym", "a restaurant", "a park",
               "a hardware store", "a clinic", "a bakery", "a train station", "a bookshop"),
    App.Music: ("pop", "rock", "jazz", "hip hop", "classical", "indie", "electronic", "folk",
                "soul", "latin", "country", "reggae"),
}


def work_topic(p: PersonaRecord) -> str:
    if p.status == "student":
        return f"studying {p.occupation.removesuffix(' student')}"
    if p.status == "retired":
        return "retirement hobbies"
    return f"work as {p.occupation.lower()}"


def pick_topics(rng: random.Random, st: State, app: App, k: int) -> list[str]:
    """Code chooses what each item is about, so items differ and fit the persona."""
    personal = [*st.main.interests, work_topic(st.main)]
    pool = personal + list(APP_TOPICS[app]) if app is not App.Music else list(APP_TOPICS[app])
    picks = rng.sample(pool, min(k, len(pool)))
    return picks + [rng.choice(pool) for _ in range(k - len(picks))]


def _who(st: State, name: str) -> str:
    rel = next((r.relation for r in st.related if r.persona.name == name), None)
    return f"{name} ({rel})" if rel else name


def slot_line(app: App, slot: dict[str, Any], st: State) -> str:
    """How one slot reads in the prompt: when, who, about what (all chosen by code)."""
    if app is App.Calendar:
        people = ", with " + " and ".join(_who(st, a) for a in slot["attendees"]) if slot["attendees"] else ", alone"
        return f"{slot['weekday']} {slot['start'][11:]}-{slot['end'][11:]}{people}. Topic: {slot['topic']}."
    if app is App.Messaging:
        others = [p for p in slot["participants"] if p != st.main.name]
        senders = ", ".join(x.split()[0] for x in slot["senders"])
        return (f"Chat with {', '.join(_who(st, o) for o in others)}. Topic: {slot['topic']}. "
                f"{len(slot['senders'])} messages, from: {senders}.")
    label = "Genre" if app is App.Music else "Topic"
    return f"{label}: {slot['topic']}."


def skeleton(app: App, rng: random.Random, st: State, cfg: DigitalConfig, cued: bool) -> Skeleton:
    c = cfg.counts
    others = [r.persona.name for r in st.related]
    if app is App.Calendar:
        k = rng.randint(*c.calendar_events)
        slots: list[dict[str, Any]] = []
        # whole days back/ahead that keep every event inside the configured window
        back, ahead = min(2, cfg.window_past_days - 1), min(14, cfg.window_future_days - 1)
        for _ in range(k):
            day = st.now.date() + dt.timedelta(days=rng.randint(-back, ahead))
            hour = rng.choices(range(7, 22), weights=cfg.hour_weights[7:22])[0]
            start = dt.datetime(day.year, day.month, day.day, hour, rng.choice((0, 15, 30, 45)))
            end = start + dt.timedelta(minutes=rng.choice((30, 45, 60, 60, 90, 120, 180)))
            if end > st.now + dt.timedelta(days=cfg.window_future_days):  # late on the last day
                start, end = start - dt.timedelta(days=1), end - dt.timedelta(days=1)
            attendees = rng.sample(others, rng.choice((0, 0, 1, 1, 2)))
            slots.append({"start": start.strftime(FMT_M), "end": end.strftime(FMT_M),
                          "weekday": start.strftime("%A"), "attendees": attendees})
        slots.sort(key=lambda s: s["start"])
        for slot, topic in zip(slots, pick_topics(rng, st, app, k), strict=True):
            slot["topic"] = topic
        return Skeleton(k, slots)
    if app is App.Messaging:
        k = rng.randint(*c.messaging_conversations)
        people = rng.sample(others, min(k, len(others)))
        slots = []
        for j in range(k):
            group = rng.random() < 0.3
            members = rng.sample(others, rng.randint(2, 3)) if group else [people[j % len(people)]]
            participants = [st.main.name, *members]
            m = rng.randint(*c.messages_per_conversation)
            senders: list[str] = []
            for x in range(m):
                pool = [p for p in participants if not senders or p != senders[-1]]
                senders.append(pool[0] if x == 0 and rng.random() < 0.5 else rng.choice(pool))
            # the newest message at most 3 days back, the oldest still inside the window
            span = min(3, cfg.window_past_days) * 1440 - 90 * (m - 1)
            end = _minutes_ago(st.now, rng, 15, max(16, span))
            times = [end]
            for _ in range(m - 1):
                times.append(times[-1] - dt.timedelta(minutes=rng.uniform(1, 90)))
            times = [t.replace(microsecond=0) for t in reversed(times)]
            slots.append({"participants": participants, "group": group, "senders": senders,
                          "times": [t.strftime(FMT_S) for t in times]})
        for slot, topic in zip(slots, pick_topics(rng, st, app, k), strict=True):
            slot["topic"] = topic
        return Skeleton(k, slots)
    key, days = {App.Notes: ("notes", 30), App.Search: ("searches", 7), App.Videos: ("videos", 14),
                 App.Maps: ("places", 14), App.Music: ("tracks", 3)}[app]
    k = rng.randint(*getattr(c, key))
    fmt = FMT_M if app is App.Notes else FMT_S
    times = _past_times(rng, st.now, k, min(days, cfg.window_past_days))
    slots = [{"time": t.strftime(fmt), "topic": topic}
             for t, topic in zip(times, pick_topics(rng, st, app, k), strict=True)]
    if app is App.Music and not cued:  # the newest track is the one playing now
        slots[-1]["time"] = _minutes_ago(st.now, rng, 0, 4).strftime(FMT_S)
    return Skeleton(k, slots)


# --------------------------------------------------------------------------- LLM schemas with code's counts


@cache
def draft_schema(app: App, k: int, msg_range: tuple[int, int] = (1, 1)) -> type[BaseModel]:
    """The app's draft model with exactly k items, so the grammar enforces code's counts."""
    def sized(name: str, item: type, n: int, hi: int | None = None) -> Any:
        return (list[item], Field(min_length=n, max_length=hi or n))  # type: ignore[valid-type]

    if app is App.Calendar:
        return create_model("CalendarDraft", events=sized("events", S.EventDraft, k))
    if app is App.Messaging:
        conv = create_model("ConversationDraft", topic=(S.Short, ...),
                            messages=sized("messages", S.MessageDraft, *msg_range))
        return create_model("MessagingDraft", conversations=sized("conversations", conv, k))
    if app is App.Notes:
        return create_model("NotesDraft", notes=sized("notes", S.NoteDraft, k))
    if app is App.Search:
        return create_model("SearchDraft", searches=sized("searches", S.SearchDraftItem, k))
    if app is App.Videos:
        return create_model("VideosDraft", videos=sized("videos", S.VideoDraft, k))
    if app is App.Maps:
        return create_model("MapsDraft", places=sized("places", S.PlaceDraft, k))
    return create_model("MusicDraft", tracks=sized("tracks", S.TrackDraft, k))


CUE_SCHEMA: dict[App, type[BaseModel]] = {
    App.Calendar: S.CalendarCueDraft, App.Messaging: S.MessagingCueDraft, App.Notes: S.NoteDraft,
    App.Search: S.SearchCueDraft, App.Videos: S.VideosCueDraft, App.Maps: S.MapsCueDraft,
    App.Music: S.MusicCueDraft,
}


# --------------------------------------------------------------------------- assembly (draft + skeleton -> items)


def assemble(app: App, draft: Any, sk: Skeleton, st: State, ids: Callable[..., str], start: int = 0) -> list[Any]:
    """Join the LLM's words with code's structure into app items (``start``: index of the
    first slot within the app, for ids)."""
    def ids_at(j: int, *rest: object) -> str:
        return ids(start + j, *rest)

    if app is App.Calendar:
        return [S.CalendarEvent(event_id=ids_at(j), title=e.title.strip(), start_datetime=s["start"],
                                end_datetime=s["end"], location=e.location.strip(),
                                attendees=list(s["attendees"]))
                for j, (e, s) in enumerate(zip(draft.events, sk.slots, strict=False))]
    if app is App.Messaging:
        convs = []
        for j, (c, s) in enumerate(zip(draft.conversations, sk.slots, strict=False)):
            n = min(len(c.messages), len(s["senders"]))
            times = s["times"][-n:]  # the newest n slots, so the conversation ends where planned
            senders = s["senders"][-n:]
            title = c.topic.strip() if s["group"] else s["participants"][1]
            msgs = [S.Message(message_id=ids_at(j, x), sender=senders[x], timestamp=times[x],
                              content=c.messages[x].content.strip()) for x in range(n)]
            convs.append(S.Conversation(conversation_id=ids_at(j), title=title,
                                        participants=list(s["participants"]), messages=msgs))
        return convs
    if app is App.Notes:
        return [S.Note(note_id=ids_at(j), title=x.title.strip(), content=x.content.strip(), last_updated=s["time"])
                for j, (x, s) in enumerate(zip(draft.notes, sk.slots, strict=False))]
    if app is App.Search:
        return [S.SearchItem(search_id=ids_at(j), query=x.query.strip(), query_type=x.query_type, timestamp=s["time"])
                for j, (x, s) in enumerate(zip(draft.searches, sk.slots, strict=False))]
    if app is App.Videos:
        return [S.Video(video_id=ids_at(j), title=x.title.strip(), duration_secs=x.duration_secs,
                        tags=[t.strip() for t in x.tags], category=x.category, watch_timestamp=s["time"])
                for j, (x, s) in enumerate(zip(draft.videos, sk.slots, strict=False))]
    if app is App.Maps:
        return [S.Place(place_id=ids_at(j), name=x.name.strip(), address=x.address.strip(), last_viewed=s["time"])
                for j, (x, s) in enumerate(zip(draft.places, sk.slots, strict=False))]
    return [S.Track(track_id=ids_at(j), title=x.title.strip(), artist=x.artist.strip(), album=x.album.strip(),
                    played_at=s["time"]) for j, (x, s) in enumerate(zip(draft.tracks, sk.slots, strict=False))]


def cue_plan(st: State, rng: random.Random, cfg: DigitalConfig) -> dict[str, Any]:
    """Code's part of a cue item: who (the cue's person), and when (minutes before now)."""
    lo, hi = cfg.cue_recent_minutes
    person = st.cue.person if st.cue and st.cue.person else rng.choice(st.related).persona.name
    return {"person": person, "time": _minutes_ago(st.now, rng, lo, hi)}


def assemble_cue(app: App, draft: Any, plan: dict[str, Any], st: State, ids: Callable[..., str],
                 chk: Checker) -> list[Any]:
    """Place the cue-derived items where they make the cue true at the sampled moment."""
    t: dt.datetime = plan["time"]
    if app is App.Calendar:
        offset = clamp(draft.day_offset, 0, min(30, chk.cfg.window_future_days - 1), chk, "cue_day_offset")
        minutes = clamp(draft.duration_minutes, 15, 600, chk, "cue_duration")
        day = st.now.date() + dt.timedelta(days=offset)
        hh, mm = map(int, draft.start_time.split(":"))
        start = dt.datetime(day.year, day.month, day.day, hh, mm)
        if start <= st.now:  # a cue event is upcoming: "at 9" said at 10:00 means tomorrow
            start += dt.timedelta(days=1)
            chk.note("cue_event_in_past", "corrected")
        end = start + dt.timedelta(minutes=minutes)
        text = f"{st.cue.cue} {draft.title}" if st.cue else draft.title
        attendees = [n for n in st.names - {st.main.name} if re.search(rf"\b{re.escape(n.split()[0])}\b", text)]
        return [S.CalendarEvent(event_id=ids("cue"), title=draft.title.strip(),
                                start_datetime=start.strftime(FMT_M), end_datetime=end.strftime(FMT_M),
                                location=draft.location.strip(), attendees=sorted(attendees))]
    if app is App.Messaging:
        person = plan["person"]
        contents = [m.content for m in draft.earlier_messages] + [draft.cue_message]
        times = [t]
        for _ in contents[:-1]:
            times.append(times[-1] - dt.timedelta(minutes=rng_minutes(ids, len(times))))
        times.reverse()
        n = len(contents)
        senders = [person if (n - 1 - x) % 2 == 0 else st.main.name for x in range(n)]
        msgs = [S.Message(message_id=ids("cue", x), sender=senders[x], timestamp=times[x].strftime(FMT_S),
                          content=contents[x].strip()) for x in range(n)]
        return [S.Conversation(conversation_id=ids("cue"), title=person,
                               participants=[st.main.name, person], messages=msgs)]
    if app is App.Notes:
        return [S.Note(note_id=ids("cue"), title=draft.title.strip(), content=draft.content.strip(),
                       last_updated=t.strftime(FMT_M))]
    if app is App.Search:
        n = len(draft.searches)
        return [S.SearchItem(search_id=ids("cue", x), query=s.query.strip(), query_type=s.query_type,
                             timestamp=(t - dt.timedelta(seconds=40 * (n - 1 - x))).strftime(FMT_S))
                for x, s in enumerate(draft.searches)]
    if app is App.Videos:
        v = draft.video
        return [S.Video(video_id=ids("cue"), title=v.title.strip(), duration_secs=fix_duration(v.duration_secs, chk),
                        tags=[x.strip() for x in v.tags], category=v.category, watch_timestamp=t.strftime(FMT_S))]
    if app is App.Maps:
        return [S.Place(place_id=ids("cue"), name=draft.place.name.strip(), address=draft.place.address.strip(),
                        last_viewed=t.strftime(FMT_S))]
    x = draft.track
    return [S.Track(track_id=ids("cue"), title=x.title.strip(), artist=x.artist.strip(), album=x.album.strip(),
                    played_at=t.strftime(FMT_S))]


def rng_minutes(ids: Callable[..., str], j: int) -> float:
    """A deterministic 1-9 minute gap between cue messages (derived from the item ids)."""
    return 1 + int(ids("gap", j)[:4], 16) % 9


# --------------------------------------------------------------------------- merge


LIST_KEY = {App.Calendar: "events", App.Messaging: "conversations", App.Notes: "notes",
            App.Search: "searches", App.Videos: "videos", App.Maps: "maps", App.Music: "music"}


def _time_of(app: App, item: Any) -> str:
    return {App.Calendar: lambda x: x.start_datetime, App.Messaging: lambda x: x.messages[-1].timestamp,
            App.Notes: lambda x: x.last_updated, App.Search: lambda x: x.timestamp,
            App.Videos: lambda x: x.watch_timestamp, App.Maps: lambda x: x.last_viewed,
            App.Music: lambda x: x.played_at}[app](item)


def merge(app: App, items: list[Any], cue_items: list[Any], st: State) -> dict[str, Any]:
    """One app's final state: cue items merged in time order into the full list, and kept
    alone in the key list. A cue conversation joins an existing one with the same people."""
    key = LIST_KEY[app]
    if app is App.Messaging:
        convs = [c.model_copy(deep=True) for c in items]
        for cue_conv in cue_items:
            same = next((c for c in convs if sorted(c.participants) == sorted(cue_conv.participants)), None)
            if same is None:
                convs.append(cue_conv.model_copy(deep=True))
            else:
                same.messages = sorted(same.messages + cue_conv.messages, key=lambda m: m.timestamp)
        full: list[Any] = sorted(convs, key=lambda c: _time_of(app, c))
    else:
        full = sorted(items + cue_items, key=lambda x: _time_of(app, x))
    dump = [x.model_dump(mode="json") for x in full]
    keys = [x.model_dump(mode="json") for x in cue_items]
    if app is App.Maps:
        state = maps_state(dump, st)
        return {"maps": state, "key_maps": {"recent_places": keys} if keys else {}}
    if app is App.Music:
        current, recent = dump[-1], dump[:-1]
        return {"music": {"currently_playing": current, "recent_tracks": recent},
                "key_music": {"currently_playing": keys[-1]} if keys else {}}
    return {key: dump, f"key_{key}": keys}


def maps_state(places: list[dict[str, Any]], st: State) -> dict[str, Any]:
    """Home is the persona's address; where they are now follows the hour and their week."""
    p = st.main
    home = {"name": "Home", "address": p.home_address}
    workday = st.now.weekday() < 5 and 9 <= st.now.hour < 17
    if st.now.hour < 7 or st.now.hour >= 21 or not places:
        current = home
    elif workday and (place := p.employer or p.school):
        current = {"name": place, "address": f"{place}, {p.home_city}, {p.country}"}
    else:
        current = {"name": places[-1]["name"], "address": places[-1]["address"]}
    return {"home_location": home, "current_location": current, "recent_places": places}


# --------------------------------------------------------------------------- one app, one bundle


def _add(counts: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        counts[k] = counts.get(k, 0) + v


def build_app(ctx: RunContext, cfg: DigitalConfig, st: State, app: App,
              index: int) -> tuple[dict[str, Any] | Reject, dict[str, int]]:
    """Generate one app chunk by chunk (each chunk retried with fresh seeds), validate,
    merge the cue items; too few valid items rejects the bundle."""
    bundle_id = ctx.record_id(index)
    cued = st.cue is not None and st.cue.app is app
    sk = skeleton(app, random.Random(ctx.seed(index, app.value, "skeleton")), st, cfg, cued)
    name = app.value.lower()
    minimum = getattr(cfg.min_items, app.value)
    counts: dict[str, int] = {}
    last: Reject | None = None

    def ids(*parts: object) -> str:
        return derive_id(cfg.seed, "digital", index, app.value, *parts)

    def attempt(what: str, messages_for: Callable[[], list[dict[str, str]]], schema: type[BaseModel],
                build: Callable[[Any, Checker], list[Any]], max_tokens: int) -> list[Any]:
        nonlocal last
        for a in range(cfg.app_attempts):
            messages = messages_for()
            # a cue item should carry the cue's own words
            keep_out = [st.cue.cue] if what == "cue" and st.cue else []
            chk = Checker(app, st, cfg, gates=Gates(messages, schema, language=cfg.language, keep_out=keep_out))
            try:
                draft = ctx.llm.structured(messages, schema, seed=ctx.seed(index, app.value, what, a),
                                           max_tokens=max_tokens)
            except LLMOutputError as e:
                _add(counts, {f"{app.value}.llm_{e.reason}.regenerated": 1})
                last = Reject(record_id=bundle_id, index=index, stage=f"app.{app.value}", reason=e.reason,
                              detail=e.detail, raw=e.raw)
                continue
            items = build(draft, chk)
            _add(counts, chk.counts)
            if items:
                return items
            _add(counts, {f"{app.value}.no_valid_item.regenerated": 1})
            last = Reject(record_id=bundle_id, index=index, stage=f"app.{app.value}", reason="no_valid_item",
                          detail=f"every item of call {what} failed validation", raw=draft.model_dump_json())
        return []

    items: list[Any] = []
    step = cfg.items_per_call
    for start in range(0, sk.k, step):
        slots = sk.slots[start:start + step]
        chunk = Skeleton(len(slots), slots)
        if app is App.Messaging:
            msg_range = (len(slots[0]["senders"]),) * 2 if len(slots) == 1 else tuple(cfg.counts.messages_per_conversation)
            max_tokens = 40 + sum(70 * len(x["senders"]) + 30 for x in slots)
        else:
            msg_range = (1, 1)
            max_tokens = 40 + TOKENS_PER_ITEM[app] * len(slots)

        # named functions, not lambdas: mypy cannot type a lambda whose defaults bind the loop's values
        def messages_for(slots: list[dict[str, Any]] = slots) -> list[dict[str, str]]:
            return ctx.prompts.render(f"digital/{name}.jinja", s=st, lines=[slot_line(app, x, st) for x in slots])

        def build(d: Any, chk: Checker, chunk: Skeleton = chunk, start: int = start) -> list[Any]:
            return validate_items(app, assemble(app, d, chunk, st, ids, start), chk)

        items += attempt(f"chunk{start}", messages_for, draft_schema(app, len(slots), msg_range), build, max_tokens)
    final = Checker(app, st, cfg)
    items = validate_items(app, items, final)  # duplicates across chunks
    _add(counts, final.counts)
    cue_items: list[Any] = []
    if cued:
        plan = cue_plan(st, random.Random(ctx.seed(index, app.value, "cue")), cfg)
        cue_items = attempt(
            "cue",
            lambda: ctx.prompts.render(f"digital/{name}_cue.jinja", s=st, cue=st.cue, plan=plan),
            CUE_SCHEMA[app],
            lambda d, chk: validate_items(app, assemble_cue(app, d, plan, st, ids, chk), chk),
            60 + 4 * TOKENS_PER_ITEM[app])
        if not cue_items:
            assert last is not None
            return last.model_copy(update={"stage": f"app.{app.value}.cue"}), counts
    if len(items) < minimum:
        return Reject(record_id=bundle_id, index=index, stage=f"app.{app.value}", reason="too_few_items",
                      detail=f"{len(items)} valid items after validation and {cfg.app_attempts} attempts per call, "
                             f"minimum {minimum}" + (f"; last failure: {last.reason}" if last else ""),
                      raw=last.raw if last else None), counts
    return merge(app, items, cue_items, st), counts


TOKENS_PER_ITEM = {App.Calendar: 70, App.Messaging: 120, App.Notes: 190, App.Search: 50,
                   App.Videos: 110, App.Maps: 70, App.Music: 70}
"""Completion budget per item (the schema's string caps bound it; this only stops runaways)."""


def make_bundle(ctx: RunContext, cfg: DigitalConfig, pool: list[PersonaRecord],
                cues: list[dict[str, str]], index: int, goals: GoalIndex | None = None) -> S.DigitalBundle | Reject:
    rng = random.Random(ctx.seed(index, "state"))
    main, related = sample_related(pool, rng)
    now = sample_datetime(rng, cfg)
    goal: S.GoalRef | None = None
    if goals is not None:
        cue, goal = goal_cue(ctx, cfg, goals.bank.rows[index], related, random.Random(ctx.seed(index, "goal")))
        st = State(main, related, now, cue)
    else:
        st = State(main, related, now, pick_cue(rng, cfg, cues, related))
    results = ctx.map(lambda app: build_app(ctx, cfg, st, app, index), cfg.apps)
    apps: dict[str, dict[str, Any]] = {}
    for _, counts in results:  # validators' work counts for rejected bundles too
        for k, v in counts.items():
            ctx.count(k, v)
    for app, (res, _) in zip(cfg.apps, results, strict=True):
        if isinstance(res, Reject):
            return res
        apps[app.value] = res
    bundle = S.DigitalBundle(bundle_id=ctx.record_id(index), main_persona=main, related_personas=related,
                             current_datetime=st.now_text, cue=st.cue, goal=goal,
                             apps={a.value: apps[a.value] for a in S.RENDER_ORDER if a.value in apps},
                             stats={})
    bundle.stats = bundle_stats(bundle)
    if goals is not None and goal is not None and goal.app is not None:
        problem = goal_problem(ctx, cfg, bundle, goals, index)
        if problem is not None:
            reason, detail = problem
            ctx.count(f"goal.{reason}")
            return Reject(record_id=bundle.bundle_id, index=index, stage="goal", reason=reason, detail=detail,
                          raw=bundle.model_dump_json())
        ctx.count("goal.cued")
    elif goal is not None:
        ctx.count("goal.uncued")
    return bundle


# --------------------------------------------------------------------------- goal-conditioned bundles


@dataclass
class GoalIndex:
    """A goal bank's goals, verbalised and embedded once per run (for the specificity check)."""

    bank: Any
    texts: list[str]
    vectors: Any
    groups: list[str]


def goal_index(ctx: RunContext, bank: Any) -> GoalIndex:
    from generators.distractors import verbalise

    texts = [verbalise(r, ctx.prompts) for r in bank.rows]
    return GoalIndex(bank, texts, ctx.embedder.encode(texts), [r.group for r in bank.rows])


def goal_app(cfg: DigitalConfig, goal: Any, rng: random.Random) -> App | None:
    """The app whose state must make ``goal`` inferable (the documented mapping and its two
    refinements), among the run's apps; None when the goal needs no digital context."""
    apps = list(cfg.goal_apps.get(goal.type, []))
    if goal.type == "entertain" and len(apps) > 1:
        apps = [a for a in apps if a is (App.Music if goal.modality == "audio" else App.Videos)] or apps
    if goal.type == "search" and goal.source == "timeline" and apps == GOAL_APPS["search"]:
        apps = [App.Notes, App.Messaging]
    apps = [a for a in apps if a in cfg.apps]
    return rng.choice(apps) if apps else None


def goal_cue(ctx: RunContext, cfg: DigitalConfig, row: Any, related: list[RelatedPersona],
             rng: random.Random) -> tuple[S.Cue | None, S.GoalRef]:
    """The cue a goal sets (the app and the seed its cue prompt is given; a person the goal
    names becomes a related persona), and the bundle's reference to its goal."""
    tag = row.client_tag or row.goal_id
    if row.goal is None:  # a free-text goal: no structure to pick an app from
        return None, S.GoalRef(goal_id=row.goal_id, client_tag=tag, group=row.group, app=None)
    app = goal_app(cfg, row.goal, rng)
    person = rng.choice(related).persona if row.goal.type in ("communication", "translate") else None
    ref = S.GoalRef(goal_id=row.goal_id, client_tag=tag, group=row.group, app=app,
                    person=person.name if person else None)
    if app is None:
        return None, ref
    seed = ctx.prompts.env.get_template(GOAL_CUE).render(
        g=row.goal.model_dump(), app=app.value, person=person.first_name if person else None)
    return S.Cue(cue_id=row.goal_id, app=app, cue=" ".join(seed.split()),
                 person=person.name if person else None), ref


GOAL_CUE = "digital/goal_cue.jinja"
_WORD = re.compile(r"[a-z0-9']+")
_COMMON = {"the", "a", "an", "of", "to", "at", "in", "on", "for", "and", "my", "me", "with", "from"}


def goal_problem(ctx: RunContext, cfg: DigitalConfig, bundle: S.DigitalBundle, goals: GoalIndex,
                 index: int) -> tuple[str, str] | None:
    """Why a goal-conditioned bundle fails its goal (reason, detail), or None: the cue item is in
    the app's key list; a person or place the goal names appears in it; the key-only state points
    to this goal more than to others of the bank (``cue_rank_max``)."""
    assert bundle.goal is not None and bundle.goal.app is not None
    app = bundle.goal.app
    keys = app_view(bundle, app.value, key_only=True)
    if not keys:
        return "cue_not_in_key_list", f"the {app.value} app has no key item"
    text = json.dumps(keys, ensure_ascii=False).casefold()
    goal = goals.bank.rows[index].goal
    if bundle.goal.person and bundle.goal.person.casefold() not in text \
            and bundle.goal.person.split()[0].casefold() not in text:
        return "cue_misses_goal_entity", f"{bundle.goal.person} (the goal's person) is not in the cue item"
    if goal.type == "find_directions":
        words = [w for w in _WORD.findall(goal.to.casefold()) if w not in _COMMON and len(w) > 2]
        if words and not any(re.search(rf"\b{re.escape(w)}\b", text) for w in words):
            return "cue_misses_goal_entity", f"no word of the place {goal.to!r} is in the cue item"
    import numpy as np

    v = np.asarray(ctx.embedder.encode([render_bundle(bundle, key_only=True)]))[0]
    sims = np.asarray(goals.vectors) @ v
    own = sims[index]
    group = goals.groups[index]
    others = [j for j in range(len(sims)) if j != index and goals.groups[j] != group]
    rank = 1 + int(sum(sims[j] > own for j in others))
    bundle.goal.rank = rank
    if rank > cfg.cue_rank_max:
        best = max(others, key=lambda j: sims[j])
        return "cue_not_specific", (f"the key-only state ranks its goal {rank} of {len(others) + 1} (cue_rank_max="
                                    f"{cfg.cue_rank_max}); closest: {goals.texts[best]!r} ({sims[best]:.3f} vs {own:.3f})")
    return None


# --------------------------------------------------------------------------- rendering and export


def app_view(bundle: S.DigitalBundle | dict[str, Any], app: str, key_only: bool) -> Any:
    apps = bundle.apps if isinstance(bundle, S.DigitalBundle) else bundle["apps"]
    state = apps[app]
    name = LIST_KEY[App(app)]
    return state[f"key_{name}"] if key_only else state[name]


def render_bundle(bundle: S.DigitalBundle | dict[str, Any], key_only: bool = False) -> str:
    """The bundle as WAGIBench's prompt shows it; ``key_only`` gives the high-signal D* form
    (only cue-derived sub-states)."""
    b = bundle if isinstance(bundle, dict) else bundle.model_dump(mode="json")
    parts = [f"The current datetime is: {b['current_datetime']}"]
    for app in S.RENDER_ORDER:
        if app.value not in b["apps"]:
            continue
        view = app_view(b, app.value, key_only)
        if key_only and not view:
            continue
        parts.append(f"Current state of the user's {app.value} app:\n{json.dumps(view, ensure_ascii=False, indent=1)}")
    return "\n\n".join(parts)


def bundle_stats(bundle: S.DigitalBundle) -> dict[str, Any]:
    per_app = {}
    for app in bundle.apps:
        per_app[app] = len(json.dumps(app_view(bundle, app, False), ensure_ascii=False, indent=1))
    return {"chars_per_app": per_app, "chars_total": len(render_bundle(bundle))}


def wagibench_record(b: dict[str, Any]) -> dict[str, Any]:
    """One bundle in the layout WAGIBench's evaluation loader reads."""
    cue = b["cue"]
    app_states: dict[str, Any] = {"datetimings": {"current_datetime": b["current_datetime"]}}
    for app, state in b["apps"].items():
        context = bool(cue and cue["app"] == app)
        if app in ("Maps", "Music"):
            name = LIST_KEY[App(app)]
            app_states[app] = {"state": {name: state[name]}, "context": context}
        else:
            app_states[app] = {"state": state, "context": context}
    goal = b.get("goal")
    if goal:  # goal-conditioned: joined to the goal's MCQs and history by the goal row's keys
        meta = {"client_tag": goal["client_tag"], "scenario": {"shortname": goal["group"]}}
    else:
        meta = {"client_tag": b["bundle_id"], "scenario": {"shortname": cue["cue_id"] if cue else "uncued"}}
    return {"meta": meta, "x": {"cues": wagibench_cues(b), "app_states": app_states}}


def wagibench_cues(b: dict[str, Any]) -> list[dict[str, Any]]:
    """The bundle's cue as WAGIBench's ``x.cues`` list (an uncued bundle: ``[]``)."""
    cue = b.get("cue")
    return [{"modality": ["digital"], "app": cue["app"], "description": [cue["cue"]]}] if cue else []


# --------------------------------------------------------------------------- the generator


def merge_shards(ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]) -> None:
    """``merge``: sizes over every shard's bundles; the pool is the shards' one."""
    ctx.extra["persona_pool"] = manifests[0]["persona_pool"]
    ctx.extra["characters"] = characters_summary(records)


@dataclass(frozen=True)
class Inputs:
    """What a digital run reads before it starts: the cue bank, and a given persona pool."""

    cues: list[dict[str, str]]
    cue_path: Path | None
    pool: list[PersonaRecord] | None
    """``persona_file``'s pool; None: the run makes (or reuses) one of ``persona_pool``."""
    pool_path: Path | None
    goals: Any = None
    """``goals=``'s goal bank (a :class:`generators.distractors.GoalBank`), or None."""


def plan(cfg: DigitalConfig) -> Plan:
    """``n`` bundles; the cue bank and ``persona_file`` are read here, before any run folder
    exists or a model loads."""
    cues: list[dict[str, str]] = []
    cue_path = pool_path = None
    goals = None
    if cfg.goals is not None:
        from generators.distractors import load_goals

        path = Path(cfg.goals).expanduser()
        if not path.is_file():
            raise MissingInputError(f"goals: no such file: {path}")
        goals = load_goals(path)
        if not goals.rows:
            raise InputError(f"goals: {path} holds no goals")
    elif cfg.cue is None and cfg.cue_rate > 0:
        cue_path = Path(cfg.cue_file).expanduser() if cfg.cue_file else EXAMPLES / "cues.jsonl"
        if not cue_path.is_file():
            raise MissingInputError(f"cue_file: no such file: {cue_path}")
        cues = load_cues(cue_path)
    pool = None
    if cfg.persona_file:
        pool_path = Path(cfg.persona_file).expanduser()
        if not pool_path.exists():
            raise MissingInputError(f"persona_file: no such file or folder: {pool_path}")
        pool = load_pool(pool_path)
        check_pool(pool, pool_path)
    n = (cfg.n or 5) if goals is None else min(cfg.n or len(goals.rows), len(goals.rows))
    return Plan(n, Inputs(cues, cue_path, pool, pool_path, goals))


def check_pool(pool: list[PersonaRecord], path: Path) -> None:
    if len(pool) < 6:
        raise ConfigError(f"the persona pool at {path} has {len(pool)} usable personas; at least 6 are needed")


@generator("digital", config=DigitalConfig, merge=merge_shards, plan=plan)
def digital(cfg: DigitalConfig, ctx: RunContext) -> Iterator[S.DigitalBundle | Reject]:
    """Digital Context Generator: 7 phone-app states per sampled persona, moment and cue."""
    inputs: Inputs = ctx.plan.data
    cues = inputs.cues
    if inputs.cue_path is not None:
        ctx.record_input(inputs.cue_path)
    if inputs.pool is not None and inputs.pool_path is not None:
        pool, pool_path = inputs.pool, inputs.pool_path
    else:
        pool, pool_path = ensure_pool(ctx, cfg.seed, cfg.persona_pool, cfg.pool_dir)
        check_pool(pool, pool_path)
    ctx.extra["persona_pool"] = {"path": str(pool_path), "size": len(pool)}
    goals = None
    if inputs.goals is not None:
        ctx.record_input(inputs.goals.path)
        ctx.prompts.hash(GOAL_CUE)
        goals = goal_index(ctx, inputs.goals)
    for app in cfg.apps:
        ctx.prompts.hash(f"digital/{app.value.lower()}.jinja")
        if cues or cfg.cue or goals is not None:
            ctx.prompts.hash(f"digital/{app.value.lower()}_cue.jinja")
    records: list[dict[str, Any]] = []
    for i in ctx.indices():
        item = make_bundle(ctx, cfg, pool, cues, i, goals)
        if isinstance(item, S.DigitalBundle):
            records.append(item.model_dump(mode="json"))
        yield item
    ctx.write_json("digital_state.json", {r["bundle_id"]: wagibench_record(r) for r in records})
    ctx.extra["characters"] = characters_summary(records)


PAPER_CHARS_PER_BUNDLE = 8900


def characters_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean characters per bundle and per app, against WAGIBench's ~8.9k per sample."""
    if not records:
        return {"bundles": 0}
    per_app: dict[str, list[int]] = {}
    for r in records:
        for app, n in r["stats"]["chars_per_app"].items():
            per_app.setdefault(app, []).append(n)
    mean_total = sum(r["stats"]["chars_total"] for r in records) / len(records)
    return {"bundles": len(records), "mean_chars_per_bundle": round(mean_total, 1),
            "paper_chars_per_bundle": PAPER_CHARS_PER_BUNDLE,
            "ratio_to_paper": round(mean_total / PAPER_CHARS_PER_BUNDLE, 3),
            "mean_chars_per_app": {a: round(sum(v) / len(v), 1) for a, v in per_app.items()}}
