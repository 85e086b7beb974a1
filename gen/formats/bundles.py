"""A digital bundle's state and the checks every app item passes: what ``digital`` applies to
each generated item before it is kept (texts, times against the bundle's moment, durations,
counts, each fix or drop counted by rule) and what ``audit`` re-runs on a finished bundle.

:class:`BundleRules` are the checks' settings (``digital``'s config holds them, an audit reads them
from the run's manifest); :class:`State` is the moment and the people a bundle is about."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gen.schemas import digital as S
from gen.schemas.digital import LONG_CHARS as LONG
from gen.schemas.digital import SHORT_CHARS as SHORT
from gen.schemas.digital import TAG_CHARS, App
from gen.schemas.digital import TEXT_CHARS as TEXT
from gen.schemas.personas import PersonaRecord, RelatedPersona
from gen.text.gates import Gates, Kind, Language, count_key, key


class BundleRules(BaseModel):
    """The settings of a bundle's item checks."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    window_past_days: int = Field(30, ge=1)
    """Items may lie at most this many days before the current datetime."""
    window_future_days: int = Field(30, ge=1)
    """Calendar events may lie at most this many days after it."""
    cue_recent_minutes: tuple[int, int] = (1, 10)
    """A cue item happened this many minutes before now (it is the latest item)."""
    language: Language = "en"
    """The language the apps' texts must be in (the text gates' language check)."""


FMT_M = "%Y-%m-%d %H:%M"
FMT_S = "%Y-%m-%d %H:%M:%S"


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


LIST_KEY = {
    App.Calendar: "events",
    App.Messaging: "conversations",
    App.Notes: "notes",
    App.Search: "searches",
    App.Videos: "videos",
    App.Maps: "maps",
    App.Music: "music",
}


# --------------------------------------------------------------------------- validators


PLACEHOLDER = re.compile(
    r"^\W*(title|location|content|topic|query|name|address|artist|album|text|string|message|note"
    r"|event|event title|song|track|video|place|n/?a|none|null|tbd|todo|untitled|unknown|example"
    r"|lorem ipsum.*|\.\.\.|…)\W*$"
    r"|[{}<>\[\]]|lorem ipsum|placeholder|your (?:title|text|message|query)|insert \w+ here",
    re.I,
)
DATETIME_TEXT = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2}([ T]\d{1,2}:\d{2}(:\d{2})?)?|\d{1,2}:\d{2}(\s?[ap]\.?m\.?)?)\s*$", re.I
)


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


def time_problem(
    value: str, fmt: str, now: dt.datetime, *, past: bool, past_days: int, future_days: int
) -> str | None:
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
    cfg: BundleRules
    counts: dict[str, int] = field(default_factory=dict)
    gates: Gates | None = None

    def __post_init__(self) -> None:
        if self.gates is None:
            self.gates = Gates(language=self.cfg.language)

    def note(self, rule: str, action: str = "dropped", n: int = 1) -> None:
        k = count_key(self.app.value, rule, action)
        self.counts[k] = self.counts.get(k, 0) + n

    def time_ok(self, value: str, fmt: str, past: bool) -> bool:
        problem = time_problem(
            value,
            fmt,
            self.state.now,
            past=past,
            past_days=self.cfg.window_past_days,
            future_days=self.cfg.window_future_days,
        )
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
            if not (
                chk.time_ok(e.start_datetime, FMT_M, past=False)
                and chk.time_ok(e.end_datetime, FMT_M, past=False)
            ):
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
                if chk.texts_ok((m.content, "prose", TEXT)) and chk.time_ok(
                    m.timestamp, FMT_S, past=True
                ):
                    msgs.append(m)
            c.messages = chk.dedupe(msgs, lambda m: m.sender + "|" + m.content)
            # a group's title is the model's topic; a two-person chat's is the other's name (code's)
            title: tuple[str, Kind, int | None] = (
                c.title,
                "title" if len(c.participants) > 2 else "name",
                SHORT,
            )
            if len(c.participants) < 2 or not c.messages or not chk.texts_ok(title):
                chk.note("empty_conversation")
                continue
            kept.append(c)
        return kept
    if app is App.Notes:
        kept = [
            n
            for n in items
            if chk.texts_ok(n.title, (n.content, "prose", LONG))
            and chk.time_ok(n.last_updated, FMT_M, past=True)
        ]
        return chk.dedupe(kept, lambda n: n.title)
    if app is App.Search:
        kept = [
            s for s in items if chk.texts_ok(s.query) and chk.time_ok(s.timestamp, FMT_S, past=True)
        ]
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
        kept = [
            p
            for p in items
            if chk.texts_ok((p.name, "name", SHORT), (p.address, "name", SHORT))
            and chk.time_ok(p.last_viewed, FMT_S, past=True)
        ]
        return chk.dedupe(kept, lambda p: p.name)
    kept = [
        t
        for t in items
        if chk.texts_ok(*((x, "name", SHORT) for x in (t.title, t.artist, t.album)))
        and chk.time_ok(t.played_at, FMT_S, past=True)
    ]
    return chk.dedupe(kept, lambda t: t.title + "|" + t.artist)
