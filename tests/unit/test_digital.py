"""The Digital Context Generator: validators, cue merge, WAGIBench export, rendering, the
generator end to end with a scripted LLM (invariants, shards, determinism), cue banks, CLI forms,
and the datetime sampler."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from concurrency import Jittered
from conftest import merge_and_compare, read_jsonl
from digital_checks import ORDER, check_bundle, key_list

import generators  # noqa: F401  (fills the registry)
from gen.cli import normalize_overrides, validate
from gen.errors import ConfigError, InputError
from gen.gates import Gates
from gen.llm import OpenAIConfig, scripted_llm
from gen.paths import EXAMPLES
from gen.prompts import Prompts
from gen.run import RunContext, run
from generators.digital import DigitalConfig
from generators.digital.assembly import assemble_cue, merge
from generators.digital.checks import Checker, text_problem, validate_items
from generators.digital.export import render_bundle, wagibench_record
from generators.digital.state import FMT_M, FMT_S, State, load_cues, sample_datetime
from generators.personas import sample_facts, sample_related
from schemas import Reject
from schemas import digital as S
from schemas.digital import App
from schemas.personas import PersonaRecord

NAME = "digital"
PAST_APPS = [App.Messaging, App.Notes, App.Search, App.Videos, App.Maps, App.Music]
NOW = dt.datetime(2025, 6, 11, 15, 30)


# --------------------------------------------------------------------------- personas and state


@cache
def _pool(seed: int, n: int) -> tuple[PersonaRecord, ...]:
    return tuple(PersonaRecord(**f.model_dump(), bio=f"{f.first_name} works as {f.occupation.lower()} "
                                                 f"in {f.home_city} and enjoys {f.interests[0]}.")
            for f in sample_facts(seed, n))


def persona_pool(seed: int = 0, n: int = 8) -> list[PersonaRecord]:
    return [p.model_copy(deep=True) for p in _pool(seed, n)]


def write_pool(path: Path, seed: int = 0, n: int = 8) -> Path:
    path.write_text("".join(p.model_dump_json() + "\n" for p in persona_pool(seed, n)), encoding="utf-8")
    return path


def make_state(cue: S.Cue | None = None, now: dt.datetime = NOW) -> State:
    main, related = sample_related(persona_pool(), random.Random(0))
    return State(main, related, now, cue)


def hexid(*parts: object) -> str:
    import hashlib

    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:32]


def m_(t: dt.datetime) -> str:
    return t.strftime(FMT_M)


def s_(t: dt.datetime) -> str:
    return t.strftime(FMT_S)


def clean_item(app: App, st: State, when: dt.datetime, j: int = 0) -> Any:
    """A valid item of ``app`` at ``when`` (a Calendar event starts then; a conversation's last
    message is then); ``j`` makes texts and ids distinct."""
    friend = st.related[0].persona.name
    if app is App.Calendar:
        return S.CalendarEvent(event_id=hexid("ev", j), title=f"Dentist check-up number {j}",
                               start_datetime=m_(when), end_datetime=m_(when + dt.timedelta(hours=1)),
                               location=f"Clinic on Elm Street {j}", attendees=[friend])
    if app is App.Messaging:
        msgs = [S.Message(message_id=hexid("msg", j, 0), sender=friend, timestamp=s_(when - dt.timedelta(minutes=5)),
                          content=f"Are we still on for Friday, round {j}?"),
                S.Message(message_id=hexid("msg", j, 1), sender=st.main.name, timestamp=s_(when),
                          content=f"Yes, see you at seven by the fountain {j}")]
        return S.Conversation(conversation_id=hexid("conv", j), title=friend,
                              participants=[st.main.name, friend], messages=msgs)
    if app is App.Notes:
        return S.Note(note_id=hexid("note", j), title=f"Hardware shop list {j}",
                      content=f"wood glue, sandpaper, two hinges, batch {j}", last_updated=m_(when))
    if app is App.Search:
        return S.SearchItem(search_id=hexid("search", j), query=f"cheap flights to porto in october {j}",
                            query_type="travel", timestamp=s_(when))
    if app is App.Videos:
        return S.Video(video_id=hexid("video", j), title=f"Repotting a monstera, part {j}", duration_secs=600,
                       tags=["plants", "howto"], category="Howto & Style", watch_timestamp=s_(when))
    if app is App.Maps:
        return S.Place(place_id=hexid("place", j), name=f"Café Aurora {j}", address=f"Harbour Road {j}, Turku",
                       last_viewed=s_(when))
    return S.Track(track_id=hexid("track", j), title=f"Blue in Green {j}", artist=f"Miles Davis {j}",
                   album="Kind of Blue", played_at=s_(when))


def checker(app: App, st: State | None = None, **cfg: Any) -> Checker:
    return Checker(app, st or make_state(), DigitalConfig(**cfg))


def dumps(items: list[Any]) -> list[dict[str, Any]]:
    return [x.model_dump(mode="json") for x in items]


def set_text(app: App, item: Any, text: str) -> Any:
    """Put ``text`` into the app's main text field (for Messaging: the last message)."""
    field = {App.Calendar: "title", App.Notes: "title", App.Search: "query", App.Videos: "title",
             App.Maps: "name", App.Music: "title"}
    if app is App.Messaging:
        item.messages[-1].content = text
    else:
        setattr(item, field[app], text)
    return item


def set_time(app: App, item: Any, value: str) -> Any:
    field = {App.Calendar: "start_datetime", App.Notes: "last_updated", App.Search: "timestamp",
             App.Videos: "watch_timestamp", App.Maps: "last_viewed", App.Music: "played_at"}
    if app is App.Messaging:
        item.messages[-1].timestamp = value
    else:
        setattr(item, field[app], value)
    return item


# --------------------------------------------------------------------------- 1. validators


def test_clean_items_pass_untouched() -> None:
    st = make_state()
    for app in App:
        items = [clean_item(app, st, NOW - dt.timedelta(hours=3 + j), j) for j in range(3)]
        before = dumps(items)
        chk = checker(app, st)
        kept = validate_items(app, items, chk)
        assert dumps(kept) == before, app
        assert chk.counts == {}, (app, chk.counts)


BAD_TEXTS = [
    ("", "empty_text"),
    ("   ", "empty_text"),
    ("Title", "placeholder_text"),
    ("event title", "placeholder_text"),
    ("Dinner with {name}", "gate.template_echo"),  # the shared gates run first
    ("Lorem ipsum dolor sit amet", "placeholder_text"),
    ("N/A", "placeholder_text"),
    ("2025-06-11 16:00", "datetime_as_text"),
    ("16:30", "datetime_as_text"),
    ("no, no, no, no, no", "gate.repetition"),
    ("walk the dog walk the dog walk the dog walk the dog", "gate.repetition"),
    ("Dinner with next_actions_31", "gate.schema_echo"),
    ("Pick up the dry cleaning and the", "gate.truncated_text"),
    ('{"title": "Dinner"', "gate.json_fragment"),
]


@pytest.mark.parametrize("app", list(App), ids=lambda a: a.value)
@pytest.mark.parametrize(("text", "rule"), BAD_TEXTS, ids=[f"{r}:{t!r}" for t, r in BAD_TEXTS])
def test_bad_text_is_dropped_and_counted(app: App, text: str, rule: str) -> None:
    st = make_state()
    good = clean_item(app, st, NOW - dt.timedelta(hours=2), 1)
    bad = set_text(app, clean_item(app, st, NOW - dt.timedelta(hours=3), 2), text)
    chk = checker(app, st)
    kept = validate_items(app, [bad, good], chk)
    if app is App.Messaging:  # one bad message is dropped; its conversation stays
        assert len(kept) == 2
        assert [len(c.messages) for c in kept] == [1, 2]
        assert all(m.content != text for m in kept[0].messages)
    else:
        assert dumps(kept) == dumps([good])
    assert chk.counts == {f"{app.value}.{rule}.dropped": 1}


@pytest.mark.parametrize("text", ["Title Fight concert tickets", "Call mum at 18:30 about the trip",
                                  "Notes on the 2025-06-01 budget", "no more late trains please"])
def test_ordinary_text_is_not_flagged(text: str) -> None:
    assert text_problem(text) is None
    chk = checker(App.Notes)
    assert chk.texts_ok(text) and chk.counts == {}


def test_calendar_location_is_checked_too() -> None:
    st = make_state()
    ev = clean_item(App.Calendar, st, NOW + dt.timedelta(days=1))
    ev.location = "Location"
    chk = checker(App.Calendar, st)
    assert validate_items(App.Calendar, [ev], chk) == []
    assert chk.counts == {"Calendar.placeholder_text.dropped": 1}


def test_prompt_echo_of_the_last_prompt_and_of_the_few_shot_answers() -> None:
    st = make_state()
    messages = Prompts().render("digital/notes.jinja", s=st,
                                lines=["Topic: a recipe for lemon cake with fresh berries from the market."])
    chk = Checker(App.Notes, st, DigitalConfig(), gates=Gates(messages, S.NoteDraft))
    assert chk.gates is not None and "groceries" in chk.gates.context.examples  # the one-shot answer's title
    notes = [clean_item(App.Notes, st, NOW - dt.timedelta(hours=h), h) for h in (1, 2, 3, 4, 5)]
    notes[0].title = "Groceries"  # a few-shot answer string, copied
    notes[1].content = "Reminder: lemon cake with fresh berries from the shop"  # six words of the last prompt
    notes[2].content = "Plan: a recipe for lemon"  # five words of the prompt are fine
    notes[4].content = "Topic: a recipe for lemon"  # the prompt's own line label is not
    kept = validate_items(App.Notes, notes, chk)
    assert [n.note_id for n in kept] == [notes[2].note_id, notes[3].note_id]
    assert chk.counts == {"Notes.gate.example_echo.dropped": 1, "Notes.gate.prompt_echo.dropped": 1,
                          "Notes.gate.fewshot_marker.dropped": 1}


@pytest.mark.parametrize("app", list(App), ids=lambda a: a.value)
def test_unparseable_datetime(app: App) -> None:
    st = make_state()
    fmt_bad = "2025-02-30 10:00" if app in (App.Calendar, App.Notes) else "2025-02-30 10:00:00"
    bad = set_time(app, clean_item(app, st, NOW - dt.timedelta(hours=3), 1), fmt_bad)
    good = clean_item(app, st, NOW - dt.timedelta(hours=2), 2)
    chk = checker(app, st)
    kept = validate_items(app, [bad, good], chk)
    assert chk.counts == {f"{app.value}.unparseable_datetime.dropped": 1}
    if app is App.Messaging:
        assert [len(c.messages) for c in kept] == [1, 2]
    else:
        assert dumps(kept) == dumps([good])


@pytest.mark.parametrize("app", list(App), ids=lambda a: a.value)
def test_out_of_window_datetime(app: App) -> None:
    st = make_state()
    when = NOW - dt.timedelta(days=31)
    bad = clean_item(app, st, when, 1)
    chk = checker(app, st)
    kept = validate_items(app, [bad, clean_item(app, st, NOW - dt.timedelta(days=29), 2)], chk)
    if app is App.Messaging:  # both messages of the old conversation are out: the conversation goes
        assert len(kept) == 1
        assert chk.counts == {"Messaging.out_of_window.dropped": 2, "Messaging.empty_conversation.dropped": 1}
    else:
        assert len(kept) == 1
        assert chk.counts == {f"{app.value}.out_of_window.dropped": 1}
    # the window follows the config
    chk = checker(app, st, window_past_days=40)
    assert len(validate_items(app, [clean_item(app, st, when, 1)], chk)) == 1 and chk.counts == {}


def test_calendar_future_window() -> None:
    st = make_state()
    far = clean_item(App.Calendar, st, NOW + dt.timedelta(days=31), 1)
    near = clean_item(App.Calendar, st, NOW + dt.timedelta(days=20), 2)
    past = clean_item(App.Calendar, st, NOW - dt.timedelta(days=2), 3)  # calendar items may be past
    chk = checker(App.Calendar, st)
    assert dumps(validate_items(App.Calendar, [far, near, past], chk)) == dumps([near, past])
    assert chk.counts == {"Calendar.out_of_window.dropped": 1}


@pytest.mark.parametrize("app", PAST_APPS, ids=lambda a: a.value)
def test_past_item_later_than_now(app: App) -> None:
    st = make_state()
    later = clean_item(app, st, NOW + dt.timedelta(minutes=5), 1)
    at_now = clean_item(app, st, NOW, 2)  # exactly now is not in the future
    chk = checker(app, st)
    kept = validate_items(app, [later, at_now], chk)
    assert chk.counts == {f"{app.value}.future_past_item.dropped": 1}
    if app is App.Messaging:  # the future message goes, the earlier one stays
        assert [len(c.messages) for c in kept] == [1, 2]
        assert kept[0].messages[0].timestamp == s_(NOW)
    else:
        assert dumps(kept) == dumps([at_now])


def test_unknown_attendee_is_removed_and_counted() -> None:
    st = make_state()
    ev = clean_item(App.Calendar, st, NOW + dt.timedelta(days=1))
    known = ev.attendees[0]
    ev.attendees = ["Ghost Person", known, "Another Stranger"]
    chk = checker(App.Calendar, st)
    (kept,) = validate_items(App.Calendar, [ev], chk)
    assert kept.attendees == [known]
    assert chk.counts == {"Calendar.unknown_participant.corrected": 2}


def test_unknown_participant_and_sender() -> None:
    st = make_state()
    friend, other = st.related[0].persona.name, st.related[1].persona.name
    group = clean_item(App.Messaging, st, NOW - dt.timedelta(hours=1), 1)
    group.participants = [st.main.name, friend, "Ghost Person"]
    group.messages.append(S.Message(message_id=hexid("ghost"), sender="Ghost Person",
                                    timestamp=s_(NOW - dt.timedelta(minutes=30)), content="Boo from nowhere, friends"))
    outsider = clean_item(App.Messaging, st, NOW - dt.timedelta(hours=2), 2)
    outsider.messages[0].sender = other  # a known persona, but not in this chat
    alone = clean_item(App.Messaging, st, NOW - dt.timedelta(hours=3), 3)
    alone.participants = [st.main.name, "Ghost Person"]
    alone.messages[0].sender = "Ghost Person"
    chk = checker(App.Messaging, st)
    kept = validate_items(App.Messaging, [group, outsider, alone], chk)
    assert [c.conversation_id for c in kept] == [group.conversation_id, outsider.conversation_id]
    assert kept[0].participants == [st.main.name, friend]
    assert all(m.sender != "Ghost Person" for c in kept for m in c.messages)
    assert [m.sender for m in kept[1].messages] == [st.main.name]
    assert chk.counts == {"Messaging.unknown_participant.corrected": 2,
                          "Messaging.unknown_sender.dropped": 3,
                          "Messaging.empty_conversation.dropped": 1}


@pytest.mark.parametrize("app", list(App), ids=lambda a: a.value)
def test_duplicates_within_an_app(app: App) -> None:
    st = make_state()
    if app is App.Messaging:
        conv = clean_item(app, st, NOW - dt.timedelta(hours=1), 1)
        dup = conv.messages[0].model_copy(update={"message_id": hexid("dup"),
                                                  "timestamp": s_(NOW - dt.timedelta(minutes=59))})
        conv.messages.append(dup)
        chk = checker(app, st)
        (kept,) = validate_items(app, [conv], chk)
        assert len(kept.messages) == 2
    else:
        a = clean_item(app, st, NOW - dt.timedelta(hours=1), 1)
        # same text (case and punctuation aside), other id; Calendar's key includes the start
        b = clean_item(app, st, NOW - dt.timedelta(hours=1 if app is App.Calendar else 2), 1)
        key = {App.Calendar: "title", App.Notes: "title", App.Search: "query", App.Videos: "title",
               App.Maps: "name", App.Music: "title"}[app]
        setattr(b, key, getattr(a, key).upper() + "!")
        b = b.model_copy(update={next(f for f in type(b).model_fields if f.endswith("_id")): hexid("other")})
        c = clean_item(app, st, NOW - dt.timedelta(hours=3), 3)
        chk = checker(app, st)
        kept = validate_items(app, [a, b, c], chk)
        assert dumps(kept) == dumps([a, c])
    assert chk.counts == {f"{app.value}.duplicate.dropped": 1}


def test_calendar_same_title_at_another_time_is_not_a_duplicate() -> None:
    st = make_state()
    a = clean_item(App.Calendar, st, NOW + dt.timedelta(days=1), 1)
    b = clean_item(App.Calendar, st, NOW + dt.timedelta(days=8), 1).model_copy(update={"event_id": hexid("b")})
    chk = checker(App.Calendar, st)
    assert len(validate_items(App.Calendar, [a, b], chk)) == 2 and chk.counts == {}


@pytest.mark.parametrize("minutes", [0, -30])
def test_end_before_start(minutes: int) -> None:
    st = make_state()
    ev = clean_item(App.Calendar, st, NOW + dt.timedelta(days=1), 1)
    ev.end_datetime = m_(NOW + dt.timedelta(days=1, minutes=minutes))
    good = clean_item(App.Calendar, st, NOW + dt.timedelta(days=2), 2)
    chk = checker(App.Calendar, st)
    assert dumps(validate_items(App.Calendar, [ev, good], chk)) == dumps([good])
    assert chk.counts == {"Calendar.end_before_start.dropped": 1}


def test_video_duration_and_tags_are_corrected() -> None:
    st = make_state()
    v = clean_item(App.Videos, st, NOW - dt.timedelta(hours=1), 1)
    v.duration_secs = 7  # minutes the model forgot to convert
    v.tags = ["plants", "TBD", "plants", "{tag}"]
    chk = checker(App.Videos, st)
    (kept,) = validate_items(App.Videos, [v], chk)
    assert kept.duration_secs == 7 * 60
    assert kept.tags == ["plants"]
    assert chk.counts == {"Videos.duration_secs.corrected": 1, "Videos.bad_tag.corrected": 2}


# --------------------------------------------------------------------------- 2. merge


def _cue(app: App, st: State) -> S.Cue:
    return S.Cue(cue_id=f"{app.value.lower()}-t", app=app, cue="something just happened",
                 person=st.related[0].persona.name)


@pytest.mark.parametrize("app", [App.Calendar, App.Notes, App.Search, App.Videos], ids=lambda a: a.value)
def test_merge_puts_cue_items_in_time_order_and_in_the_key_list(app: App) -> None:
    st = make_state()
    base = NOW + dt.timedelta(days=3) if app is App.Calendar else NOW
    items = [clean_item(app, st, base - dt.timedelta(hours=h), h) for h in (30, 20, 10)]
    cue_item = clean_item(app, st, base - dt.timedelta(hours=15), 99)
    out = merge(app, items, [cue_item], st)
    key = {App.Calendar: "events", App.Notes: "notes", App.Search: "searches", App.Videos: "videos"}[app]
    assert list(out) == [key, f"key_{key}"]
    assert out[f"key_{key}"] == dumps([cue_item])
    assert out[key] == dumps([items[0], items[1], cue_item, items[2]])
    # no cue: an empty key list, the full list in time order
    out = merge(app, list(reversed(items)), [], st)
    assert out[f"key_{key}"] == [] and out[key] == dumps(items)


def test_merge_cue_conversation_joins_one_with_the_same_people() -> None:
    st = make_state()
    friend = st.related[0].persona.name
    other = st.related[1].persona.name
    same = clean_item(App.Messaging, st, NOW - dt.timedelta(hours=2), 1)
    group = clean_item(App.Messaging, st, NOW - dt.timedelta(hours=1), 2)
    group.participants = [st.main.name, friend, other]
    cue_msgs = [S.Message(message_id=hexid("cue", 0), sender=st.main.name, timestamp=s_(NOW - dt.timedelta(minutes=9)),
                          content="Leaving work now"),
                S.Message(message_id=hexid("cue", 1), sender=friend, timestamp=s_(NOW - dt.timedelta(minutes=3)),
                          content="Can you grab bread?")]
    cue_conv = S.Conversation(conversation_id=hexid("cue"), title=friend, participants=[friend, st.main.name],
                              messages=list(reversed(cue_msgs)))  # order of people and messages does not matter
    before = dumps([same, group])
    out = merge(App.Messaging, [same, group], [cue_conv], st)
    assert dumps([same, group]) == before  # inputs are not mutated
    convs = out["conversations"]
    assert [c["conversation_id"] for c in convs] == [group.conversation_id, same.conversation_id]
    joined = convs[-1]
    assert [m["message_id"] for m in joined["messages"]] == [*(m.message_id for m in same.messages),
                                                             hexid("cue", 0), hexid("cue", 1)]
    stamps = [m["timestamp"] for m in joined["messages"]]
    assert stamps == sorted(stamps)
    assert out["key_conversations"] == dumps([cue_conv])


def test_merge_cue_conversation_with_new_people_is_added() -> None:
    st = make_state()
    conv = clean_item(App.Messaging, st, NOW - dt.timedelta(hours=2), 1)
    stranger_free = st.related[2].persona.name
    cue_conv = clean_item(App.Messaging, st, NOW - dt.timedelta(minutes=5), 2).model_copy(
        update={"participants": [st.main.name, stranger_free], "title": stranger_free})
    cue_conv.messages[0].sender = stranger_free
    out = merge(App.Messaging, [conv], [cue_conv], st)
    assert [c["conversation_id"] for c in out["conversations"]] == [conv.conversation_id, cue_conv.conversation_id]
    assert out["key_conversations"] == dumps([cue_conv])


def test_merge_maps_shape() -> None:
    st = make_state(now=dt.datetime(2025, 6, 14, 12, 0))  # a Saturday noon: where they last looked
    places = [clean_item(App.Maps, st, st.now - dt.timedelta(hours=h), h) for h in (5, 2)]
    cue_place = clean_item(App.Maps, st, st.now - dt.timedelta(minutes=4), 9)
    out = merge(App.Maps, places, [cue_place], st)
    assert set(out) == {"maps", "key_maps"}
    maps = out["maps"]
    assert set(maps) == {"home_location", "current_location", "recent_places"}
    assert maps["home_location"] == {"name": "Home", "address": st.main.home_address}
    assert maps["recent_places"] == dumps([*places, cue_place])
    assert maps["current_location"] == {"name": cue_place.name, "address": cue_place.address}
    assert out["key_maps"] == {"recent_places": dumps([cue_place])}
    uncued = merge(App.Maps, places, [], st)
    assert uncued["key_maps"] == {}
    night = make_state(now=dt.datetime(2025, 6, 14, 23, 0))
    assert merge(App.Maps, places, [], night)["maps"]["current_location"]["name"] == "Home"


def test_merge_music_shape_cue_track_is_playing() -> None:
    st = make_state()
    tracks = [clean_item(App.Music, st, NOW - dt.timedelta(hours=h), h) for h in (3, 1, 2)]
    cue_track = clean_item(App.Music, st, NOW - dt.timedelta(minutes=2), 9)
    out = merge(App.Music, tracks, [cue_track], st)
    assert set(out) == {"music", "key_music"}
    assert out["music"]["currently_playing"] == cue_track.model_dump(mode="json")
    assert out["music"]["recent_tracks"] == dumps([tracks[0], tracks[2], tracks[1]])
    assert out["key_music"] == {"currently_playing": cue_track.model_dump(mode="json")}
    uncued = merge(App.Music, tracks, [], st)
    assert uncued["music"]["currently_playing"] == tracks[1].model_dump(mode="json")  # the newest
    assert uncued["key_music"] == {}


def _with_related_name(st: State, j: int, first: str, last: str) -> State:
    rel = st.related[j]
    st.related[j] = rel.model_copy(update={"persona": rel.persona.model_copy(
        update={"first_name": first, "last_name": last, "name": f"{first} {last}"})})
    return st


@pytest.mark.parametrize(("cue", "attends"), [
    ("Lunch with Ann tomorrow at 12:30", True),
    ("Ann's birthday dinner is on Saturday evening", True),
    ("Annual car service on Friday morning", False),  # a name inside a word is not a mention
    ("Dinner with Joanna on Friday", False),
])
def test_calendar_cue_attendees_are_the_people_it_names(cue: str, attends: bool) -> None:
    st = _with_related_name(make_state(), 1, "Ann", "Berg")
    st.cue = S.Cue(cue_id="c", app=App.Calendar, cue=cue)
    draft = S.CalendarCueDraft(title="Planned thing", location="Garage Nord", day_offset=1, start_time="09:00",
                               duration_minutes=60)
    chk = checker(App.Calendar, st)
    (ev,) = assemble_cue(App.Calendar, draft, {"person": None, "time": NOW}, st, hexid, chk)
    others = {r.persona.first_name for r in st.related} - {"Ann"}
    assert not any(o in cue for o in others)  # the case is about Ann alone
    assert ev.attendees == (["Ann Berg"] if attends else [])


def test_calendar_cue_event_is_upcoming_and_clamped() -> None:
    st = make_state(S.Cue(cue_id="c", app=App.Calendar, cue="There is a meeting today at 9:00"))
    chk = checker(App.Calendar, st)
    today_earlier = S.CalendarCueDraft(title="Standup", location="Office", day_offset=-3, start_time="09:00",
                                       duration_minutes=2000)
    (ev,) = assemble_cue(App.Calendar, today_earlier, {"person": None, "time": NOW}, st, hexid, chk)
    # offset -3 -> 0 (today); 09:00 is before now (15:30), so it moves to tomorrow; 2000 min -> 600
    assert ev.start_datetime == "2025-06-12 09:00" and ev.end_datetime == "2025-06-12 19:00"
    assert chk.counts == {"Calendar.cue_day_offset.corrected": 1, "Calendar.cue_duration.corrected": 1,
                          "Calendar.cue_event_in_past.corrected": 1}
    assert validate_items(App.Calendar, [ev], chk) == [ev]


@pytest.mark.parametrize("past,future", [(1, 1), (1, 30), (2, 3)])
def test_narrow_windows_still_give_bundles(tmp_path: Path, past: int, future: int) -> None:
    """Skeleton times (events, messages, the rest) respect window_past_days/window_future_days,
    so no code-placed item is dropped as out of window."""
    pool = write_pool(tmp_path / "personas.jsonl")
    result, _ = run_digital(tmp_path / "run", pool, n=4, cue_rate=0.0,
                            window_past_days=past, window_future_days=future)
    assert result.accepted == 4, result.manifest["validators"]
    assert not any("out_of_window" in k for k in result.manifest["validators"])
    for b in read_jsonl(tmp_path / "run" / "digital.jsonl"):
        check_bundle(b, window_past_days=past, window_future_days=future)


# --------------------------------------------------------------------------- the scripted LLM

NUMBERED = re.compile(r"^(\d+)\. (.*)$", re.M)
WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
         "kestrel", "lagoon", "maple", "nectar", "opal", "pepper", "quartz", "raven", "saffron", "tundra")


def _words(seed: int, j: int) -> str:
    """Words that differ per seed and item, so no validator (duplicate, echo, repetition) fires."""
    s = seed * 31 + j
    return f"{WORDS[s % 20]} {WORDS[s // 20 % 20]} {seed % 1_000_003} {j}"


def digital_script(bad_search_every: int = 0, log: list[str] | None = None) -> Callable[[list[dict[str, str]], int], str]:
    """A scripted backend for digital prompts: the app and the item count come from the prompt
    (the few-shot answer's keys; the numbered lines of the last user message).
    ``bad_search_every``: every that-many-th seed, Search items are the placeholder "query"."""
    def script(messages: list[dict[str, str]], seed: int) -> str:
        shot = json.loads(next(m["content"] for m in messages if m["role"] == "assistant"))
        user = [m for m in messages if m["role"] == "user"][-1]["content"]
        lines = [m.group(2) for m in NUMBERED.finditer(user)]
        assert lines or not any(k in shot for k in ("events", "conversations", "notes", "videos", "places", "tracks"))

        def w(j: int = 0) -> str:
            return _words(seed, j)

        if "events" in shot:
            out: dict[str, Any] = {"events": [{"title": f"Team lunch {w(j)}", "location": f"Verde hall {w(j)}"}
                                              for j in range(len(lines))]}
        elif "conversations" in shot:
            convs = []
            for j, line in enumerate(lines):
                k = int(re.search(r"(\d+) messages, from: ", line).group(1))
                convs.append({"topic": f"Plans {w(j)}",
                              "messages": [{"content": f"Message {x} about {w(j)}"} for x in range(k)]})
            out = {"conversations": convs}
        elif "notes" in shot:
            out = {"notes": [{"title": f"Jotting {w(j)}", "content": f"Remember {w(j)} soon"} for j in range(len(lines))]}
        elif "searches" in shot and lines:
            bad = bad_search_every and seed % bad_search_every == 0
            if bad and log is not None:
                log.append("bad_search")
            out = {"searches": [{"query": "query" if bad else f"where is {w(j)}", "query_type": "web"}
                                for j in range(len(lines))]}
        elif "videos" in shot:
            out = {"videos": [{"title": f"Clip {w(j)}", "duration_secs": 300 + j, "tags": ["fun", f"tag{j}"],
                               "category": "Education"} for j in range(len(lines))]}
        elif "places" in shot:
            out = {"places": [{"name": f"Spot {w(j)}", "address": f"Road {w(j)}"} for j in range(len(lines))]}
        elif "tracks" in shot:
            out = {"tracks": [{"title": f"Song {w(j)}", "artist": f"Band {w(j)}", "album": f"Record {w(j)}"}
                              for j in range(len(lines))]}
        elif "day_offset" in shot:
            out = {"title": f"Cue event {w()}", "location": f"Hall {w()}", "day_offset": 1,
                   "start_time": "09:30", "duration_minutes": 45}
        elif "earlier_messages" in shot:
            out = {"earlier_messages": [{"content": f"Earlier {w(1)}"}, {"content": f"Before that {w(2)}"}],
                   "cue_message": f"Cue message {w()}"}
        elif "searches" in shot:
            out = {"searches": [{"query": f"cue query {w(j)}", "query_type": "web"} for j in range(2)]}
        elif "video" in shot:
            out = {"video": {"title": f"Cue clip {w()}", "duration_secs": 400, "tags": ["cue"], "category": "Education"}}
        elif "place" in shot:
            out = {"place": {"name": f"Cue spot {w()}", "address": f"Cue road {w()}"}}
        elif "track" in shot:
            out = {"track": {"title": f"Cue song {w()}", "artist": f"Cue band {w()}", "album": f"Cue record {w()}"}}
        elif {"title", "content"} <= shot.keys():
            out = {"title": f"Cue jotting {w()}", "content": f"Cue words {w()}"}
        else:
            raise AssertionError(f"not a digital prompt: {shot}")
        return json.dumps(out)

    return script


def run_digital(out_dir: Path, pool: Path, script=None, **cfg: Any):
    settings = DigitalConfig(**{"cache_dir": None, "progress": "off", "persona_file": str(pool), **cfg})
    ctx = RunContext(NAME, settings, out_dir)
    ctx.use(llm=scripted_llm(script or digital_script(), sampling=settings.llm))
    return run(NAME, settings, out_dir, ctx=ctx, quiet=True), ctx


def first_shot(messages: list[dict[str, str]]) -> str:
    """The first few-shot answer: it tells which app (and whether a cue) a prompt is for."""
    return next(m["content"] for m in messages if m["role"] == "assistant")


# --------------------------------------------------------------------------- 5. end to end


@pytest.fixture(scope="module")
def pool_file(tmp_path_factory) -> Path:
    return write_pool(tmp_path_factory.mktemp("pool") / "personas.jsonl")


@pytest.fixture(scope="module")
def bank_run(tmp_path_factory, pool_file: Path) -> SimpleNamespace:
    out = tmp_path_factory.mktemp("bank_run")
    log: list[str] = []
    result, ctx = run_digital(out, pool_file, digital_script(bad_search_every=4, log=log), n=3, cue_rate=1.0)
    return SimpleNamespace(out=out, result=result, ctx=ctx, log=log,
                           bundles=read_jsonl(out / "digital.jsonl"), rejects=read_jsonl(out / "rejects.jsonl"))


def pool_names(pool: Path) -> set[str]:
    return {r["name"] for r in read_jsonl(pool)}


def test_end_to_end_bank_cues(bank_run, pool_file: Path, check_run_folder) -> None:
    assert (bank_run.result.accepted, bank_run.result.rejected) == (3, 0), bank_run.rejects
    manifest = check_run_folder(bank_run.out, NAME, 3, hydra=False)
    for b in bank_run.bundles:
        check_bundle(b)
        assert b["cue"] is not None  # cue_rate=1
        names = {b["main_persona"]["name"], *(r["persona"]["name"] for r in b["related_personas"])}
        assert names <= pool_names(pool_file)
        if b["cue"]["person"]:
            assert b["cue"]["person"] in names - {b["main_persona"]["name"]}
            assert "{person}" not in b["cue"]["cue"]
    assert len({b["bundle_id"] for b in bank_run.bundles}) == 3
    state = json.loads((bank_run.out / "digital_state.json").read_text(encoding="utf-8"))
    assert list(state) == [b["bundle_id"] for b in bank_run.bundles]
    # validators' drops reach the manifest, one per planted bad item, each followed by a regeneration
    bad = len(bank_run.log)
    assert bad > 0
    assert manifest["validators"] == {"Search.placeholder_text.dropped": bad, "Search.no_valid_item.regenerated": bad}
    chars = manifest["characters"]
    assert chars["bundles"] == 3
    assert chars["mean_chars_per_bundle"] == round(sum(b["stats"]["chars_total"] for b in bank_run.bundles) / 3, 1)
    assert set(chars["mean_chars_per_app"]) == set(ORDER)
    assert manifest["persona_pool"] == {"path": str(pool_file), "size": 8}
    assert str(EXAMPLES / "cues.jsonl") in manifest["inputs"]
    assert set(manifest["prompts"]) >= {f"digital/{a.lower()}.jinja" for a in ORDER} | {
        f"digital/{a.lower()}_cue.jinja" for a in ORDER}
    assert manifest["llm_usage"]["calls"] == len(bank_run.ctx.llm.calls)


def test_one_item_per_call_by_default(bank_run) -> None:
    """items_per_call=1: every non-cue prompt lists exactly one numbered line."""
    for call in bank_run.ctx.llm.calls:
        user = call["messages"][-1]["content"]
        lines = NUMBERED.findall(user)
        assert len(lines) <= 1, user


CUE_TEXTS = {
    App.Calendar: "A calendar event for lunch with {person} tomorrow at 12:30",
    App.Messaging: "{person} just asked if you can water the plants",
    App.Notes: "A note with the gate code for {person}'s flat",
    App.Search: "Searched how to descale a kettle",
    App.Videos: "Watched a video on knot tying",
    App.Maps: "Looked up the nearest bike repair shop",
    App.Music: "Playing an upbeat cycling playlist",
}


@pytest.mark.parametrize("app", list(App), ids=lambda a: a.value)
def test_end_to_end_inline_cue_per_app(tmp_path: Path, pool_file: Path, app: App, check_run_folder) -> None:
    result, _ = run_digital(tmp_path, pool_file, n=2, cue=CUE_TEXTS[app], cue_app=app)
    assert (result.accepted, result.rejected) == (2, 0), read_jsonl(tmp_path / "rejects.jsonl")
    manifest = check_run_folder(tmp_path, NAME, 2, hydra=False)
    assert manifest["inputs"] == {}  # an inline cue reads no cue bank
    for b in read_jsonl(tmp_path / "digital.jsonl"):
        check_bundle(b)
        assert (b["cue"]["cue_id"], b["cue"]["app"]) == ("inline", app.value)
        names = {r["persona"]["name"] for r in b["related_personas"]}
        if "{person}" in CUE_TEXTS[app]:
            assert b["cue"]["person"] in names
            assert b["cue"]["person"].split()[0] in b["cue"]["cue"]
        else:
            assert b["cue"]["person"] is None
        if app is App.Calendar and b["cue"]["person"]:  # the person the cue names attends
            (ev,) = key_list(b, "Calendar")
            assert ev["attendees"] == [b["cue"]["person"]]


@pytest.fixture(scope="module")
def uncued_run(tmp_path_factory, pool_file: Path) -> SimpleNamespace:
    out = tmp_path_factory.mktemp("uncued")
    result, ctx = run_digital(out, pool_file, n=2, cue_rate=0.0)
    return SimpleNamespace(out=out, result=result, ctx=ctx, bundles=read_jsonl(out / "digital.jsonl"))


def test_end_to_end_uncued(uncued_run) -> None:
    assert uncued_run.result.accepted == 2
    for b in uncued_run.bundles:
        check_bundle(b)
        assert b["cue"] is None
    prompts = uncued_run.result.manifest["prompts"]
    assert not any(p.endswith("_cue.jinja") for p in prompts)
    assert uncued_run.result.manifest["inputs"] == {}  # cue_rate=0 reads no cue bank


def test_a_thin_app_rejects_the_bundle(tmp_path: Path, pool_file: Path, check_run_folder) -> None:
    """Notes that always fail validation: too_few_items at stage app.Notes; the drops are counted."""
    base = digital_script()

    def script(messages, seed):
        out = json.loads(base(messages, seed))
        if "notes" in out:
            out["notes"] = [{"title": "Title", "content": n["content"]} for n in out["notes"]]
        return json.dumps(out)

    result, ctx = run_digital(tmp_path, pool_file, script, n=2, cue_rate=0.0, app_attempts=2)
    assert (result.accepted, result.rejected) == (0, 2)
    manifest = check_run_folder(tmp_path, NAME, 2, hydra=False)
    rejects = [Reject.model_validate(r) for r in read_jsonl(tmp_path / "rejects.jsonl")]
    assert [r.index for r in rejects] == [0, 1]
    for r in rejects:
        assert (r.stage, r.reason) == ("app.Notes", "too_few_items")
        assert "no_valid_item" in r.detail and r.raw and "Title" in r.raw
    notes_calls = sum(1 for c in ctx.llm.calls if '"notes"' in first_shot(c["messages"]))
    assert manifest["validators"]["Notes.placeholder_text.dropped"] == notes_calls
    assert manifest["validators"]["Notes.no_valid_item.regenerated"] == notes_calls
    assert json.loads((tmp_path / "digital_state.json").read_text()) == {}
    assert manifest["characters"] == {"bundles": 0}


def test_truncated_cue_rejects_at_the_cue_stage(tmp_path: Path, pool_file: Path) -> None:
    base = digital_script()

    def script(messages, seed):
        text = base(messages, seed)
        return (text[:20], "length") if '"track"' in first_shot(messages) else text

    result, _ = run_digital(tmp_path, pool_file, script, n=1, cue="Playing jazz", cue_app=App.Music)
    assert (result.accepted, result.rejected) == (0, 1)
    (rej,) = read_jsonl(tmp_path / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == ("app.Music.cue", "truncated")
    assert result.manifest["validators"] == {"Music.llm_truncated.regenerated": 3}


# --------------------------------------------------------------------------- 3. WAGIBench layout


def test_wagibench_layout(bank_run) -> None:
    state = json.loads((bank_run.out / "digital_state.json").read_text(encoding="utf-8"))
    for b in bank_run.bundles:
        rec = state[b["bundle_id"]]
        assert rec == wagibench_record(b)
        check_wagibench(rec, b)


def test_wagibench_layout_uncued(uncued_run) -> None:
    for b in uncued_run.bundles:
        rec = wagibench_record(b)
        check_wagibench(rec, b)
        assert rec["meta"]["scenario"]["shortname"] == "uncued"
        assert rec["x"]["cues"] == []


def check_wagibench(rec: dict[str, Any], b: dict[str, Any]) -> None:
    cue = b["cue"]
    assert rec["meta"]["client_tag"] == b["bundle_id"]
    assert rec["meta"]["scenario"]["shortname"] == (cue["cue_id"] if cue else "uncued")
    if cue:
        assert rec["x"]["cues"] == [{"modality": ["digital"], "app": cue["app"], "description": [cue["cue"]]}]
    app_states = rec["x"]["app_states"]
    assert list(app_states) == ["datetimings", *ORDER]
    assert app_states["datetimings"] == {"current_datetime": b["current_datetime"]}
    lists = {"Calendar": "events", "Messaging": "conversations", "Search": "searches", "Videos": "videos",
             "Notes": "notes"}
    for app in ORDER:
        entry = app_states[app]
        assert set(entry) == {"state", "context"}
        assert entry["context"] is (cue is not None and cue["app"] == app)
        if app in lists:
            name = lists[app]
            assert set(entry["state"]) == {name, f"key_{name}"}
            assert entry["state"][name] == b["apps"][app][name]
            assert entry["state"][f"key_{name}"] == b["apps"][app][f"key_{name}"]
        else:
            name = app.lower()
            assert list(entry["state"]) == [name]
            assert entry["state"][name] == b["apps"][app][name]
    assert sum(app_states[a]["context"] for a in ORDER) == (1 if cue else 0)


# --------------------------------------------------------------------------- 4. rendering

HEADER = re.compile(r"^Current state of the user's (\w+) app:$", re.M)


def rendered_blocks(text: str) -> list[tuple[str, Any]]:
    heads = list(HEADER.finditer(text))
    blocks = []
    for h, nxt in zip(heads, [*heads[1:], None], strict=True):
        body = text[h.end():nxt.start() if nxt else len(text)]
        blocks.append((h.group(1), json.loads(body)))
    return blocks


def test_render_bundle_order_and_content(bank_run) -> None:
    for b in bank_run.bundles:
        text = render_bundle(b)
        assert text.splitlines()[0] == f"The current datetime is: {b['current_datetime']}"
        blocks = rendered_blocks(text)
        assert [a for a, _ in blocks] == ["Calendar", "Messaging", "Search", "Videos", "Notes", "Maps", "Music"]
        for app, view in blocks:
            state = b["apps"][app]
            assert view == state[{"Calendar": "events", "Messaging": "conversations", "Search": "searches",
                                  "Videos": "videos", "Notes": "notes", "Maps": "maps", "Music": "music"}[app]]
        assert render_bundle(S.DigitalBundle.model_validate(b)) == text


def test_render_bundle_key_only(bank_run, uncued_run) -> None:
    for b in bank_run.bundles:
        text = render_bundle(b, key_only=True)
        assert text.splitlines()[0] == f"The current datetime is: {b['current_datetime']}"
        blocks = rendered_blocks(text)
        assert [a for a, _ in blocks] == [b["cue"]["app"]]
        assert blocks[0][1] == key_list(b, b["cue"]["app"])
        assert len(text) < len(render_bundle(b))
    for b in uncued_run.bundles:
        assert render_bundle(b, key_only=True) == f"The current datetime is: {b['current_datetime']}"


def test_render_bundle_skips_missing_apps(tmp_path: Path, pool_file: Path) -> None:
    result, _ = run_digital(tmp_path, pool_file, n=1, apps=["Music", "Calendar"], cue_rate=0.0)
    assert result.accepted == 1
    (b,) = read_jsonl(tmp_path / "digital.jsonl")
    assert list(b["apps"]) == ["Calendar", "Music"]  # render order, not config order
    assert [a for a, _ in rendered_blocks(render_bundle(b))] == ["Calendar", "Music"]


# --------------------------------------------------------------------------- 6. shards, 7. determinism


def test_shards_concatenate_to_the_whole(tmp_path: Path, pool_file: Path) -> None:
    n, seed = 4, 5
    run_digital(tmp_path / "whole", pool_file, n=n, seed=seed, cue_rate=0.5)
    whole = (tmp_path / "whole" / "digital.jsonl").read_bytes()
    parts, state = b"", {}
    for shard in range(2):
        folder = tmp_path / f"s{shard}"
        result, _ = run_digital(folder, pool_file, n=n, seed=seed, cue_rate=0.5, shard=shard, num_shards=2)
        assert result.requested == 2
        parts += (folder / "digital.jsonl").read_bytes()
        state.update(json.loads((folder / "digital_state.json").read_text(encoding="utf-8")))
    assert len(whole.splitlines()) == n
    assert parts == whole
    assert state == json.loads((tmp_path / "whole" / "digital_state.json").read_text(encoding="utf-8"))


def test_concurrent_app_calls_give_the_sequential_bytes(tmp_path: Path, pool_file: Path) -> None:
    """Issue 9: a bundle's app calls in flight at once, answered out of order, give records and
    state byte-identical to one call at a time."""
    outs = {}
    for k in (1, 4):
        script = Jittered(digital_script())
        run_digital(tmp_path / str(k), pool_file, script, n=3, seed=3, cue_rate=0.5,
                    llm=OpenAIConfig(concurrency=k))
        assert (script.max_in_flight > 1) == (k > 1)
        outs[k] = [(tmp_path / str(k) / f).read_bytes() for f in ("digital.jsonl", "digital_state.json")]
    assert outs[1] == outs[4]


def test_shards_merge_to_the_whole_run(tmp_path: Path, pool_file: Path) -> None:
    run_digital(tmp_path / "whole", pool_file, n=4, seed=5, cue_rate=0.5)
    for shard in range(2):
        run_digital(tmp_path / f"s{shard}", pool_file, n=4, seed=5, cue_rate=0.5, shard=shard, num_shards=2)
    merged = merge_and_compare(tmp_path / "whole", [tmp_path / "s0", tmp_path / "s1"], tmp_path / "m")
    assert merged["characters"]["bundles"] == 4


def test_same_seed_same_bytes_and_prefix_stability(tmp_path: Path, pool_file: Path) -> None:
    for name, n in (("a", 2), ("b", 2), ("c", 4)):
        run_digital(tmp_path / name, pool_file, n=n, seed=11, cue_rate=0.5)
    a, b, c = ((tmp_path / x / "digital.jsonl").read_bytes() for x in "abc")
    assert a == b
    assert (tmp_path / "a" / "digital_state.json").read_bytes() == (tmp_path / "b" / "digital_state.json").read_bytes()
    assert len(a.splitlines()) == 2 and len(c.splitlines()) == 4
    assert c.startswith(a)
    run_digital(tmp_path / "d", pool_file, n=2, seed=12, cue_rate=0.5)
    other = read_jsonl(tmp_path / "d" / "digital.jsonl")
    assert {x["bundle_id"] for x in other}.isdisjoint(x["bundle_id"] for x in read_jsonl(tmp_path / "a" / "digital.jsonl"))


# --------------------------------------------------------------------------- 8. cue banks


def test_shipped_cue_bank() -> None:
    cues = load_cues(EXAMPLES / "cues.jsonl")
    assert len(cues) >= 30
    assert {c["app"] for c in cues} == {a.value for a in App}
    assert len({c["cue_id"] for c in cues}) == len(cues)
    assert all(c["cue"].strip() for c in cues)


GOOD_CUE = '{"cue_id": "ok-1", "app": "Notes", "cue": "A note about bins"}'
BAD_BANKS = [
    ("unknown_app", [GOOD_CUE, '{"cue_id": "x", "app": "Fax", "cue": "hello"}'], 2, "unknown app 'Fax'"),
    ("bad_json", [GOOD_CUE, "", '{"cue_id": "x", "app": "Notes", '], 3, "not valid JSON"),
    ("missing_field", ['{"cue_id": "x", "app": "Notes"}'], 1, "cue_id, app and cue"),
    ("not_an_object", ['["Notes", "x"]'], 1, "cue_id, app and cue"),
    ("empty_cue", [GOOD_CUE, GOOD_CUE, '{"cue_id": "x", "app": "Notes", "cue": "  "}'], 3, "empty cue"),
    ("app_not_text", ['{"cue_id": "x", "app": ["Notes"], "cue": "hello"}'], 1, "unknown app"),
    ("cue_not_text", ['{"cue_id": "x", "app": "Notes", "cue": null}'], 1, "cue"),
]


@pytest.mark.parametrize(("lines", "lineno", "needle"), [b[1:] for b in BAD_BANKS], ids=[b[0] for b in BAD_BANKS])
def test_bad_cue_bank_names_file_and_line(tmp_path: Path, lines: list[str], lineno: int, needle: str) -> None:
    path = tmp_path / "bank.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_cues(path)
    assert str(e.value).startswith(f"{path}:{lineno}: ")
    assert needle in str(e.value)


def test_empty_cue_bank(tmp_path: Path) -> None:
    path = tmp_path / "bank.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="empty"):
        load_cues(path)


def test_cli_bad_cue_file_is_one_line_exit_2_before_any_model(run_gen, tmp_path: Path) -> None:
    """The cue bank is read before the persona pool is made: with a dead LLM server and a pool
    that would have to be generated, the error is still about the cue file, and no pool exists."""
    bad = tmp_path / "cues.jsonl"
    bad.write_text(GOOD_CUE + '\n{"cue_id": "x", "app": "Fax", "cue": "hi"}\n', encoding="utf-8")
    proc = run_gen("digital", f"cue_file={bad}", "persona_pool=6", f"pool_dir={tmp_path / 'pools'}",
                   "llm=openai", "llm.base_url=http://127.0.0.1:9/v1", "llm.max_retries=0", "progress=off",
                   f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and f"{bad}:2:" in lines[0] and "Fax" in lines[0]
    assert not (tmp_path / "pools").exists()
    assert not (tmp_path / "run").exists()  # read by the plan hook: no run folder either


def test_inputs_are_read_by_the_plan_hook_before_any_folder(tmp_path: Path, pool_file: Path) -> None:
    """cue_file and persona_file are read when the run is sized: a persona file that is not
    UTF-8 was an "unexpected UnicodeDecodeError" (exit 1) from inside the run."""
    from gen.run import REGISTRY

    plan = REGISTRY[NAME].make_plan(DigitalConfig(persona_file=str(pool_file), cache_dir=None))
    assert plan.n == 5 and len(plan.data.pool) == 8 and plan.data.cue_path == EXAMPLES / "cues.jsonl"
    bad = tmp_path / "personas.jsonl"
    lines = pool_file.read_bytes().splitlines(keepends=True)
    bad.write_bytes(b"".join([*lines[:2], lines[2].replace(b'"bio":"', b'"bio":"\xe9', 1), *lines[3:]]))
    with pytest.raises(InputError, match=rf"^{re.escape(str(bad))}:3: not UTF-8 text"):
        REGISTRY[NAME].make_plan(DigitalConfig(persona_file=str(bad), cache_dir=None))
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"".join(lines[:3]))
    with pytest.raises(ConfigError, match=rf"pool at {re.escape(str(small))} has 3 usable personas"):
        REGISTRY[NAME].make_plan(DigitalConfig(persona_file=str(small), cache_dir=None))


def test_a_persona_run_folder_is_read_by_its_records_not_its_manifest(tmp_path: Path, pool_file: Path) -> None:
    folder = tmp_path / "pool_run"
    folder.mkdir()
    (folder / "personas.jsonl").write_bytes(pool_file.read_bytes())
    (folder / "manifest.json").write_text("[]", encoding="utf-8")  # not trusted, not needed
    from gen.run import REGISTRY

    assert len(REGISTRY[NAME].make_plan(DigitalConfig(persona_file=str(folder), cache_dir=None)).data.pool) == 8


@pytest.mark.parametrize("manifest", ["[]", "{}", '{"config": 5}', "{not json"])
def test_a_reused_pool_whose_manifest_is_no_manifest_is_one_line(tmp_path: Path, pool_file: Path, manifest: str) -> None:
    """pool_dir's pool is reused when its manifest's config matches: a manifest that is a list
    was a TypeError (exit 1); now an InputError naming it, and no pool is made over it."""
    from generators.personas import ensure_pool

    folder = tmp_path / "pools" / "seed0-n6"
    folder.mkdir(parents=True)
    (folder / "personas.jsonl").write_bytes(pool_file.read_bytes())
    (folder / "manifest.json").write_text(manifest, encoding="utf-8")
    cfg = DigitalConfig(persona_pool=6, pool_dir=str(tmp_path / "pools"), cache_dir=None, progress="off")
    ctx = RunContext(NAME, cfg, tmp_path / "run")
    ctx.use(llm=scripted_llm(lambda m, s: pytest.fail("no pool may be generated")))
    with pytest.raises(InputError, match=rf"^{re.escape(str(folder / 'manifest.json'))}"):
        ensure_pool(ctx, 0, 6, str(tmp_path / "pools"))
    assert (folder / "personas.jsonl").read_bytes() == pool_file.read_bytes()


def test_missing_cue_file(tmp_path: Path, pool_file: Path) -> None:
    from gen.errors import MissingInputError

    with pytest.raises(MissingInputError, match="cue_file"):
        run_digital(tmp_path, pool_file, n=1, cue_file=str(tmp_path / "absent.jsonl"))


def test_cue_bank_respects_apps(tmp_path: Path, pool_file: Path) -> None:
    """Bank cues of apps that are not generated are never picked."""
    result, _ = run_digital(tmp_path, pool_file, n=3, cue_rate=1.0, apps=["Search", "Music"])
    assert result.accepted == 3
    for b in read_jsonl(tmp_path / "digital.jsonl"):
        assert b["cue"]["app"] in ("Search", "Music")


# --------------------------------------------------------------------------- 9. CLI forms


@pytest.mark.parametrize("form", ["+persona_pool=50", "persona_pool=50", "++persona_pool=50"])
def test_override_forms(form: str) -> None:
    overrides = normalize_overrides([form])
    assert [o.lstrip("+") for o in overrides] == ["persona_pool=50"]
    settings = validate(NAME, overrides)
    assert isinstance(settings, DigitalConfig)
    assert settings.persona_pool == 50


def test_composed_defaults_match_the_config_class() -> None:
    settings = validate(NAME, [])
    defaults = DigitalConfig()
    for key in ("persona_pool", "apps", "cue_rate", "counts", "min_items", "hour_weights",
                "window_past_days", "window_future_days", "cue_recent_minutes", "items_per_call"):
        assert getattr(settings, key) == getattr(defaults, key), key


CLI_ERRORS = [
    (["+persona_pool=5"], ["persona_pool"]),
    (['cue="x"'], ["cue", "cue_app"]),
    (["apps=[Calendar,Foo]"], ["apps", "Foo"]),
    (["cue_app=Notes", "cue=x", "apps=[Calendar]"], ["cue_app", "Notes"]),
    (["date_start=2025-05-01", "date_end=2025-04-01"], ["date_end"]),
]


@pytest.mark.parametrize(("args", "needles"), CLI_ERRORS, ids=[" ".join(a) for a, _ in CLI_ERRORS])
def test_cli_errors_exit_2(run_gen, tmp_path: Path, args: list[str], needles: list[str]) -> None:
    proc = run_gen(NAME, *args, f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError):  # and the same in process
        validate(NAME, args)


# --------------------------------------------------------------------------- 10. datetime sampler


def test_sample_datetime_window_and_default_weights() -> None:
    cfg = DigitalConfig(date_start=dt.date(2025, 3, 1), date_end=dt.date(2025, 3, 3))
    rng = random.Random(0)
    samples = [sample_datetime(rng, cfg) for _ in range(3000)]
    assert {s.date() for s in samples} == {dt.date(2025, 3, d) for d in (1, 2, 3)}
    assert all(s.second == 0 and s.microsecond == 0 for s in samples)
    hours = [s.hour for s in samples]
    night = sum(h in (2, 3, 4) for h in hours)
    evening = sum(h in (18, 19, 20) for h in hours)
    assert evening > 10 * night  # weights 5.5+5.5+5 against 0.2+0.1+0.1


def test_sample_datetime_single_hour() -> None:
    weights = [0.0] * 24
    weights[13] = 1.0
    cfg = DigitalConfig(date_start=dt.date(2025, 12, 31), date_end=dt.date(2025, 12, 31), hour_weights=weights)
    rng = random.Random(3)
    samples = [sample_datetime(rng, cfg) for _ in range(500)]
    assert {s.hour for s in samples} == {13}
    assert {s.date() for s in samples} == {dt.date(2025, 12, 31)}
    assert len({s.minute for s in samples}) > 30
    assert sample_datetime(random.Random(9), cfg) == sample_datetime(random.Random(9), cfg)


def test_bad_hour_weights_are_refused() -> None:
    with pytest.raises(ValueError, match="hour_weights"):
        DigitalConfig(hour_weights=[0.0] * 24)
    with pytest.raises(ValueError, match="hour_weights"):
        DigitalConfig(hour_weights=[1.0] * 23)


@pytest.mark.parametrize(("secs", "fixed"), [(5, 300), (0, 60), (90, 90), (10**6, 4 * 3600)])
def test_cue_video_duration_is_corrected_and_counted(secs: int, fixed: int) -> None:
    st = make_state(S.Cue(cue_id="c", app=App.Videos, cue="A friend sent a video"))
    chk = checker(App.Videos, st)
    draft = S.VideosCueDraft(video=S.VideoDraft(title="Street food in Hanoi", duration_secs=secs,
                                                tags=["food"], category="Food & Cooking"))
    (video,) = assemble_cue(App.Videos, draft, {"person": None, "time": NOW}, st, hexid, chk)
    assert video.duration_secs == fixed
    assert chk.counts.get("Videos.duration_secs.corrected", 0) == (fixed != secs)


def test_texts_at_their_cap_and_the_album_go_through_the_gates() -> None:
    """A text that reaches its draft's length cap was cut there; a track's album is the model's
    text too."""
    st = make_state()
    note = clean_item(App.Notes, st, NOW - dt.timedelta(hours=2), 1)
    note.content = ("Buy oat milk, eggs and spinach at the market; " * 20)[:S.LONG_CHARS]
    chk = checker(App.Notes, st)
    assert validate_items(App.Notes, [note], chk) == [] and chk.counts == {"Notes.gate.truncated_text.dropped": 1}
    track = clean_item(App.Music, st, NOW - dt.timedelta(hours=2), 1)
    track.album = "Songs of the"
    chk = checker(App.Music, st)
    assert validate_items(App.Music, [track], chk) == [] and chk.counts == {"Music.gate.truncated_text.dropped": 1}


# --------------------------------------------------------------------------- 10. goal-conditioned bundles


GOALS = [
    {"goal_id": "g-msg", "group": "dinner_plans", "client_tag": "rec-0001",
     "goal": {"type": "communication", "action": "message", "target": "Alex", "content": "dinner tonight"}},
    {"goal_id": "g-dir", "group": "airport_trip",
     "goal": {"type": "find_directions", "to": "SeaTac airport departures"}},
    {"goal_id": "g-lamp", "group": "lights", "goal": {"type": "control_environment", "target": "lamp", "value": "off"}},
    {"goal_id": "g-music", "group": "calm", "goal": {"type": "entertain", "modality": "audio", "content": "calm piano"}},
    {"goal_id": "g-notes", "group": "grocery", "goal": {"type": "store_memory", "content": "buy oat milk"}},
]
QUOTED = re.compile(r'"([^"]+)"')


def goal_script() -> Callable[[list[dict[str, str]], int], str]:
    """digital_script, except that a cue item carries the cue seed's own words (what a model
    that follows the prompt writes)."""
    base = digital_script()

    def script(messages: list[dict[str, str]], seed: int) -> str:
        out = json.loads(base(messages, seed))
        user = [m for m in messages if m["role"] == "user"][-1]["content"]
        quoted = QUOTED.findall(user.splitlines()[-1])
        if not quoted:
            return json.dumps(out)
        seed_text = quoted[0]
        if "day_offset" in out:
            out["title"] = seed_text
        elif "cue_message" in out:
            out["cue_message"] = f"About {seed_text}"
        elif "place" in out:
            out["place"]["name"] = seed_text
        elif "track" in out:
            out["track"]["title"] = seed_text
        elif "video" in out:
            out["video"]["title"] = seed_text
        elif "searches" in out:
            out["searches"] = [{"query": seed_text, "query_type": "web"}]
        elif {"title", "content"} <= out.keys():
            out["content"] = seed_text
        return json.dumps(out)

    return script


def goal_bank(tmp_path: Path) -> Path:
    path = tmp_path / "goals.jsonl"
    path.write_text("".join(json.dumps(g) + "\n" for g in GOALS))
    return path


def run_goals(out: Path, pool: Path, goals: Path, script=None, **cfg: Any):
    from bank_runs import FakeEmbedder

    settings = DigitalConfig(**{"cache_dir": None, "progress": "off", "persona_file": str(pool),
                                "goals": str(goals), **cfg})
    ctx = RunContext(NAME, settings, out).use(llm=scripted_llm(script or goal_script(), sampling=settings.llm),
                                              embedder=FakeEmbedder())
    return run(NAME, settings, out, ctx=ctx, quiet=True), ctx


def test_goal_app_mapping() -> None:
    from generators.digital.goals import goal_app
    from schemas.distractors import GoalRow

    cfg = DigitalConfig()
    rng = random.Random(0)

    def app_of(goal: dict[str, Any]) -> App | None:
        return goal_app(cfg, GoalRow.model_validate({"goal_id": "x", "group": "g", "goal": goal}).goal, rng)

    assert app_of({"type": "communication", "action": "message", "target": "A", "content": "c"}) is App.Messaging
    assert app_of({"type": "temporal_attention", "action": "set", "time": "5 min", "content": "tea"}) is App.Calendar
    assert app_of({"type": "entertain", "modality": "audio", "content": "x"}) is App.Music
    assert app_of({"type": "entertain", "modality": "vision", "content": "x"}) is App.Videos
    assert app_of({"type": "search", "source": "world", "query": "q", "query_item": "i"}) is App.Search
    assert {app_of({"type": "search", "source": "timeline", "query": "q", "query_item": "i"})
            for _ in range(20)} == {App.Notes, App.Messaging}
    assert app_of({"type": "control_environment", "target": "lamp", "value": "off"}) is None
    assert goal_app(DigitalConfig(apps=[App.Calendar]), GoalRow.model_validate(
        {"goal_id": "x", "group": "g", "goal": {"type": "find_directions", "to": "x"}}).goal, rng) is App.Calendar
    with pytest.raises(ValueError, match="goal_apps: unknown action type"):
        DigitalConfig(goal_apps={"teleport": [App.Maps]})


def test_goal_conditioned_bundles(tmp_path: Path, pool_file: Path) -> None:
    """One bundle per goal; the cued app follows the mapping; a person the goal names is a related
    persona and appears in the cue item; the goal row's keys are the bundle's WAGIBench keys; a
    goal that needs no digital context gives an uncued bundle, marked as such."""
    goals = goal_bank(tmp_path)
    result, _ = run_goals(tmp_path / "run", pool_file, goals)
    assert result.requested == len(GOALS) and result.accepted == len(GOALS), read_jsonl(tmp_path / "run" / "rejects.jsonl")
    bundles = {b["goal"]["goal_id"]: b for b in read_jsonl(tmp_path / "run" / "digital.jsonl")}
    msg = bundles["g-msg"]
    assert msg["cue"]["app"] == "Messaging" and msg["goal"]["person"] in {r["persona"]["name"] for r in msg["related_personas"]}
    assert msg["goal"]["person"] in msg["apps"]["Messaging"]["key_conversations"][0]["participants"]
    assert bundles["g-dir"]["cue"]["app"] in ("Maps", "Calendar")
    assert bundles["g-music"]["cue"]["app"] == "Music" and bundles["g-notes"]["cue"]["app"] == "Notes"
    lamp = bundles["g-lamp"]
    assert lamp["cue"] is None and lamp["goal"]["app"] is None
    assert all(b["goal"]["rank"] <= 3 for b in bundles.values() if b["goal"]["app"])
    state = json.loads((tmp_path / "run" / "digital_state.json").read_text())
    metas = {(v["meta"]["client_tag"], v["meta"]["scenario"]["shortname"]) for v in state.values()}
    assert ("rec-0001", "dinner_plans") in metas and ("g-dir", "airport_trip") in metas
    assert result.manifest["validators"]["goal.cued"] == 4 and result.manifest["validators"]["goal.uncued"] == 1
    # the same seed gives the same bundles
    run_goals(tmp_path / "again", pool_file, goals)
    assert (tmp_path / "run" / "digital.jsonl").read_bytes() == (tmp_path / "again" / "digital.jsonl").read_bytes()


def test_a_cue_that_points_elsewhere_is_rejected(tmp_path: Path, pool_file: Path) -> None:
    """The default script writes cue items unrelated to the goal ("Cue spot …"): the place the
    goal names is missing, and the key-only state does not single out its goal."""
    result, _ = run_goals(tmp_path / "run", pool_file, goal_bank(tmp_path), script=digital_script(), n=4)
    reasons = {r["index"]: r["reason"] for r in read_jsonl(tmp_path / "run" / "rejects.jsonl")}
    assert reasons[1] == "cue_misses_goal_entity"
    assert set(reasons.values()) <= {"cue_misses_goal_entity", "cue_not_specific"} and len(reasons) >= 2
    assert result.manifest["validators"].get("goal.uncued") == 1  # the lamp has no digital context
