"""Code's part of an app: the skeleton (how many items, their ids, times and participants), the
LLM's draft schema with code's counts, the draft and skeleton assembled into items, cue items,
and the merge of cue-derived items into the full lists in time order (key lists: D*)."""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, create_model

from gen.formats.bundles import FMT_M, FMT_S, LIST_KEY, Checker, State, clamp, fix_duration
from gen.schemas import digital as S
from gen.schemas.digital import App
from gen.schemas.personas import PersonaRecord

if TYPE_CHECKING:
    from gen.generators.digital import DigitalConfig


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
    App.Calendar: (
        "a doctor's appointment",
        "groceries",
        "a haircut",
        "the gym",
        "a work meeting",
        "paying a bill",
        "a dinner out",
        "a class",
        "a phone call",
        "a delivery",
    ),
    App.Messaging: (
        "weekend plans",
        "a favour",
        "dinner tonight",
        "good news",
        "a shared errand",
        "a funny story",
        "running late",
        "a birthday",
        "a lost item",
        "a recommendation",
    ),
    App.Notes: (
        "a shopping list",
        "a to-do list",
        "gift ideas",
        "a trip plan",
        "books to read",
        "a recipe",
        "meeting notes",
        "a workout plan",
        "passwords hint list",
        "budget",
    ),
    App.Search: (
        "a recipe",
        "the weather",
        "a product to buy",
        "a health question",
        "a local business",
        "the news",
        "a travel plan",
        "a how-to question",
        "a film",
        "a word's meaning",
    ),
    App.Videos: (
        "a tutorial",
        "a music video",
        "comedy",
        "the news",
        "a documentary",
        "sports highlights",
        "a product review",
        "a travel vlog",
        "a cooking video",
    ),
    App.Maps: (
        "a café",
        "a pharmacy",
        "a supermarket",
        "a gym",
        "a restaurant",
        "a park",
        "a hardware store",
        "a clinic",
        "a bakery",
        "a train station",
        "a bookshop",
    ),
    App.Music: (
        "pop",
        "rock",
        "jazz",
        "hip hop",
        "classical",
        "indie",
        "electronic",
        "folk",
        "soul",
        "latin",
        "country",
        "reggae",
    ),
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
        people = (
            ", with " + " and ".join(_who(st, a) for a in slot["attendees"])
            if slot["attendees"]
            else ", alone"
        )
        when = f"{slot['weekday']} {slot['start'][11:]}-{slot['end'][11:]}"
        return f"{when}{people}. Topic: {slot['topic']}."
    if app is App.Messaging:
        others = [p for p in slot["participants"] if p != st.main.name]
        senders = ", ".join(x.split()[0] for x in slot["senders"])
        return (
            f"Chat with {', '.join(_who(st, o) for o in others)}. Topic: {slot['topic']}. "
            f"{len(slot['senders'])} messages, from: {senders}."
        )
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
            slots.append(
                {
                    "start": start.strftime(FMT_M),
                    "end": end.strftime(FMT_M),
                    "weekday": start.strftime("%A"),
                    "attendees": attendees,
                }
            )
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
            slots.append(
                {
                    "participants": participants,
                    "group": group,
                    "senders": senders,
                    "times": [t.strftime(FMT_S) for t in times],
                }
            )
        for slot, topic in zip(slots, pick_topics(rng, st, app, k), strict=True):
            slot["topic"] = topic
        return Skeleton(k, slots)
    key, days = {
        App.Notes: ("notes", 30),
        App.Search: ("searches", 7),
        App.Videos: ("videos", 14),
        App.Maps: ("places", 14),
        App.Music: ("tracks", 3),
    }[app]
    k = rng.randint(*getattr(c, key))
    fmt = FMT_M if app is App.Notes else FMT_S
    times = _past_times(rng, st.now, k, min(days, cfg.window_past_days))
    slots = [
        {"time": t.strftime(fmt), "topic": topic}
        for t, topic in zip(times, pick_topics(rng, st, app, k), strict=True)
    ]
    if app is App.Music and not cued:  # the newest track is the one playing now
        slots[-1]["time"] = _minutes_ago(st.now, rng, 0, 4).strftime(FMT_S)
    return Skeleton(k, slots)


# ------------------------------------------------------------------- LLM schemas with code's counts


@cache
def draft_schema(app: App, k: int, msg_range: tuple[int, int] = (1, 1)) -> type[BaseModel]:
    """The app's draft model with exactly k items, so the grammar enforces code's counts."""

    def sized(name: str, item: type, n: int, hi: int | None = None) -> Any:
        return (list[item], Field(min_length=n, max_length=hi or n))  # type: ignore[valid-type]

    if app is App.Calendar:
        return create_model("CalendarDraft", events=sized("events", S.EventDraft, k))
    if app is App.Messaging:
        conv = create_model(
            "ConversationDraft",
            topic=(S.Short, ...),
            messages=sized("messages", S.MessageDraft, *msg_range),
        )
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
    App.Calendar: S.CalendarCueDraft,
    App.Messaging: S.MessagingCueDraft,
    App.Notes: S.NoteDraft,
    App.Search: S.SearchCueDraft,
    App.Videos: S.VideosCueDraft,
    App.Maps: S.MapsCueDraft,
    App.Music: S.MusicCueDraft,
}


# ------------------------------------------------------------- assembly (draft + skeleton -> items)


def assemble(
    app: App, draft: Any, sk: Skeleton, st: State, ids: Callable[..., str], start: int = 0
) -> list[Any]:
    """Join the LLM's words with code's structure into app items (``start``: index of the
    first slot within the app, for ids)."""

    def ids_at(j: int, *rest: object) -> str:
        return ids(start + j, *rest)

    if app is App.Calendar:
        return [
            S.CalendarEvent(
                event_id=ids_at(j),
                title=e.title.strip(),
                start_datetime=s["start"],
                end_datetime=s["end"],
                location=e.location.strip(),
                attendees=list(s["attendees"]),
            )
            for j, (e, s) in enumerate(zip(draft.events, sk.slots, strict=False))
        ]
    if app is App.Messaging:
        convs = []
        for j, (c, s) in enumerate(zip(draft.conversations, sk.slots, strict=False)):
            n = min(len(c.messages), len(s["senders"]))
            times = s["times"][-n:]  # the newest n slots, so the conversation ends where planned
            senders = s["senders"][-n:]
            title = c.topic.strip() if s["group"] else s["participants"][1]
            msgs = [
                S.Message(
                    message_id=ids_at(j, x),
                    sender=senders[x],
                    timestamp=times[x],
                    content=c.messages[x].content.strip(),
                )
                for x in range(n)
            ]
            convs.append(
                S.Conversation(
                    conversation_id=ids_at(j),
                    title=title,
                    participants=list(s["participants"]),
                    messages=msgs,
                )
            )
        return convs
    if app is App.Notes:
        return [
            S.Note(
                note_id=ids_at(j),
                title=x.title.strip(),
                content=x.content.strip(),
                last_updated=s["time"],
            )
            for j, (x, s) in enumerate(zip(draft.notes, sk.slots, strict=False))
        ]
    if app is App.Search:
        return [
            S.SearchItem(
                search_id=ids_at(j),
                query=x.query.strip(),
                query_type=x.query_type,
                timestamp=s["time"],
            )
            for j, (x, s) in enumerate(zip(draft.searches, sk.slots, strict=False))
        ]
    if app is App.Videos:
        return [
            S.Video(
                video_id=ids_at(j),
                title=x.title.strip(),
                duration_secs=x.duration_secs,
                tags=[t.strip() for t in x.tags],
                category=x.category,
                watch_timestamp=s["time"],
            )
            for j, (x, s) in enumerate(zip(draft.videos, sk.slots, strict=False))
        ]
    if app is App.Maps:
        return [
            S.Place(
                place_id=ids_at(j),
                name=x.name.strip(),
                address=x.address.strip(),
                last_viewed=s["time"],
            )
            for j, (x, s) in enumerate(zip(draft.places, sk.slots, strict=False))
        ]
    return [
        S.Track(
            track_id=ids_at(j),
            title=x.title.strip(),
            artist=x.artist.strip(),
            album=x.album.strip(),
            played_at=s["time"],
        )
        for j, (x, s) in enumerate(zip(draft.tracks, sk.slots, strict=False))
    ]


def cue_plan(st: State, rng: random.Random, cfg: DigitalConfig) -> dict[str, Any]:
    """Code's part of a cue item: who (the cue's person), and when (minutes before now)."""
    lo, hi = cfg.cue_recent_minutes
    person = st.cue.person if st.cue and st.cue.person else rng.choice(st.related).persona.name
    return {"person": person, "time": _minutes_ago(st.now, rng, lo, hi)}


def assemble_cue(
    app: App, draft: Any, plan: dict[str, Any], st: State, ids: Callable[..., str], chk: Checker
) -> list[Any]:
    """Place the cue-derived items where they make the cue true at the sampled moment."""
    t: dt.datetime = plan["time"]
    if app is App.Calendar:
        offset = clamp(
            draft.day_offset, 0, min(30, chk.cfg.window_future_days - 1), chk, "cue_day_offset"
        )
        minutes = clamp(draft.duration_minutes, 15, 600, chk, "cue_duration")
        day = st.now.date() + dt.timedelta(days=offset)
        hh, mm = map(int, draft.start_time.split(":"))
        start = dt.datetime(day.year, day.month, day.day, hh, mm)
        if start <= st.now:  # a cue event is upcoming: "at 9" said at 10:00 means tomorrow
            start += dt.timedelta(days=1)
            chk.note("cue_event_in_past", "corrected")
        end = start + dt.timedelta(minutes=minutes)
        text = f"{st.cue.cue} {draft.title}" if st.cue else draft.title
        attendees = [
            n
            for n in st.names - {st.main.name}
            if re.search(rf"\b{re.escape(n.split()[0])}\b", text)
        ]
        return [
            S.CalendarEvent(
                event_id=ids("cue"),
                title=draft.title.strip(),
                start_datetime=start.strftime(FMT_M),
                end_datetime=end.strftime(FMT_M),
                location=draft.location.strip(),
                attendees=sorted(attendees),
            )
        ]
    if app is App.Messaging:
        person = plan["person"]
        contents = [m.content for m in draft.earlier_messages] + [draft.cue_message]
        times = [t]
        for _ in contents[:-1]:
            times.append(times[-1] - dt.timedelta(minutes=rng_minutes(ids, len(times))))
        times.reverse()
        n = len(contents)
        senders = [person if (n - 1 - x) % 2 == 0 else st.main.name for x in range(n)]
        msgs = [
            S.Message(
                message_id=ids("cue", x),
                sender=senders[x],
                timestamp=times[x].strftime(FMT_S),
                content=contents[x].strip(),
            )
            for x in range(n)
        ]
        return [
            S.Conversation(
                conversation_id=ids("cue"),
                title=person,
                participants=[st.main.name, person],
                messages=msgs,
            )
        ]
    if app is App.Notes:
        return [
            S.Note(
                note_id=ids("cue"),
                title=draft.title.strip(),
                content=draft.content.strip(),
                last_updated=t.strftime(FMT_M),
            )
        ]
    if app is App.Search:
        n = len(draft.searches)
        return [
            S.SearchItem(
                search_id=ids("cue", x),
                query=s.query.strip(),
                query_type=s.query_type,
                timestamp=(t - dt.timedelta(seconds=40 * (n - 1 - x))).strftime(FMT_S),
            )
            for x, s in enumerate(draft.searches)
        ]
    if app is App.Videos:
        v = draft.video
        return [
            S.Video(
                video_id=ids("cue"),
                title=v.title.strip(),
                duration_secs=fix_duration(v.duration_secs, chk),
                tags=[x.strip() for x in v.tags],
                category=v.category,
                watch_timestamp=t.strftime(FMT_S),
            )
        ]
    if app is App.Maps:
        return [
            S.Place(
                place_id=ids("cue"),
                name=draft.place.name.strip(),
                address=draft.place.address.strip(),
                last_viewed=t.strftime(FMT_S),
            )
        ]
    x = draft.track
    return [
        S.Track(
            track_id=ids("cue"),
            title=x.title.strip(),
            artist=x.artist.strip(),
            album=x.album.strip(),
            played_at=t.strftime(FMT_S),
        )
    ]


def rng_minutes(ids: Callable[..., str], j: int) -> float:
    """A deterministic 1-9 minute gap between cue messages (derived from the item ids)."""
    return 1 + int(ids("gap", j)[:4], 16) % 9


# --------------------------------------------------------------------------- merge


def _time_of(app: App, item: Any) -> str:
    return {
        App.Calendar: lambda x: x.start_datetime,
        App.Messaging: lambda x: x.messages[-1].timestamp,
        App.Notes: lambda x: x.last_updated,
        App.Search: lambda x: x.timestamp,
        App.Videos: lambda x: x.watch_timestamp,
        App.Maps: lambda x: x.last_viewed,
        App.Music: lambda x: x.played_at,
    }[app](item)


def merge(app: App, items: list[Any], cue_items: list[Any], st: State) -> dict[str, Any]:
    """One app's final state: cue items merged in time order into the full list, and kept
    alone in the key list. A cue conversation joins an existing one with the same people."""
    key = LIST_KEY[app]
    if app is App.Messaging:
        convs = [c.model_copy(deep=True) for c in items]
        for cue_conv in cue_items:
            same = next(
                (c for c in convs if sorted(c.participants) == sorted(cue_conv.participants)), None
            )
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
        return {
            "music": {"currently_playing": current, "recent_tracks": recent},
            "key_music": {"currently_playing": keys[-1]} if keys else {},
        }
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
