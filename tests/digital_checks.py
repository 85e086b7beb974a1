"""Invariants every accepted ``digital`` bundle must hold, shared by the unit tests (scripted
LLM) and the integration tests (the real GGUF): structure, ids, times, participants, cue."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from gen.formats.bundles import FMT_M, FMT_S
from gen.formats.wagibench import render_bundle
from gen.schemas import digital as S
from gen.schemas.digital import RENDER_ORDER

HEX32 = re.compile(r"^[0-9a-f]{32}$")
ORDER = [a.value for a in RENDER_ORDER]


def _t(value: str, fmt: str) -> dt.datetime:
    return dt.datetime.strptime(value, fmt)  # raises on a wrong format


def past_times(app: str, state: dict[str, Any]) -> list[dt.datetime]:
    """Every time of a past-type app's full list."""
    if app == "Messaging":
        return [_t(m["timestamp"], FMT_S) for c in state["conversations"] for m in c["messages"]]
    if app == "Notes":
        return [_t(n["last_updated"], FMT_M) for n in state["notes"]]
    if app == "Search":
        return [_t(s["timestamp"], FMT_S) for s in state["searches"]]
    if app == "Videos":
        return [_t(v["watch_timestamp"], FMT_S) for v in state["videos"]]
    if app == "Maps":
        return [_t(p["last_viewed"], FMT_S) for p in state["maps"]["recent_places"]]
    music = state["music"]
    return [
        _t(x["played_at"], FMT_S) for x in [*music["recent_tracks"], music["currently_playing"]]
    ]


def ids(obj: Any, out: list[str] | None = None) -> list[str]:
    """Every ``*_id`` string value, depth first."""
    out = [] if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.endswith("_id") and isinstance(v, str):
                out.append(v)
            else:
                ids(v, out)
    elif isinstance(obj, list):
        for v in obj:
            ids(v, out)
    return out


def key_list(b: dict[str, Any], app: str) -> Any:
    state = b["apps"][app]
    return state[next(k for k in state if k.startswith("key_"))]


def check_bundle(
    b: dict[str, Any], window_past_days: int = 30, window_future_days: int = 30
) -> None:
    """Structure and invariants (no judgement of prose), then the cue's placement."""
    S.DigitalBundle.model_validate(b)
    assert HEX32.match(b["bundle_id"])
    assert list(b["apps"]) == ORDER
    now = _t(b["current_datetime"], FMT_M)
    lo, hi = now - dt.timedelta(days=window_past_days), now + dt.timedelta(days=window_future_days)
    main = b["main_persona"]["name"]
    names = {main, *(r["persona"]["name"] for r in b["related_personas"])}
    assert len(b["related_personas"]) == 5 and len(names) == 6
    apps = b["apps"]
    full = ids(
        {a: {k: v for k, v in s.items() if not k.startswith("key_")} for a, s in apps.items()}
    )
    keys = ids({a: {k: v for k, v in s.items() if k.startswith("key_")} for a, s in apps.items()})
    assert full and all(HEX32.match(x) for x in full + keys)
    assert len(full) == len(set(full))
    # key items are full-list items (a cue conversation that joined another keeps only its messages)
    cue_convs = {c["conversation_id"] for c in apps["Messaging"]["key_conversations"]}
    assert set(keys) - cue_convs <= set(full)
    for app in ORDER:
        if app != "Calendar":
            times = past_times(app, apps[app])
            assert times, app
            assert all(lo <= t <= now for t in times), (
                app,
                b["current_datetime"],
            )  # none future-dated
    cal = apps["Calendar"]["events"]
    for e in cal:
        start, end = _t(e["start_datetime"], FMT_M), _t(e["end_datetime"], FMT_M)
        assert lo <= start < end <= hi
        assert set(e["attendees"]) <= names - {main}
    assert [e["start_datetime"] for e in cal] == sorted(e["start_datetime"] for e in cal)
    for c in apps["Messaging"]["conversations"]:
        assert main in c["participants"] and set(c["participants"]) <= names
        assert len(c["participants"]) >= 2
        assert {m["sender"] for m in c["messages"]} <= set(c["participants"])
        stamps = [m["timestamp"] for m in c["messages"]]
        assert stamps == sorted(stamps)
        assert all(m["content"].strip() for m in c["messages"])
    for app, key in (
        ("Notes", "last_updated"),
        ("Search", "timestamp"),
        ("Videos", "watch_timestamp"),
    ):
        stamps = [x[key] for x in apps[app][app.lower() if app != "Search" else "searches"]]
        assert stamps == sorted(stamps), app
    maps, music = apps["Maps"]["maps"], apps["Music"]["music"]
    assert set(maps) == {"home_location", "current_location", "recent_places"}
    assert maps["home_location"]["address"] == b["main_persona"]["home_address"]
    assert set(music) == {"currently_playing", "recent_tracks"}
    assert all(
        x["played_at"] <= music["currently_playing"]["played_at"] for x in music["recent_tracks"]
    )
    assert b["stats"]["chars_total"] == len(render_bundle(b))
    check_cue(b)


def check_cue(b: dict[str, Any]) -> None:
    """Only the cued app has a key list; its cue item is in the full list and, for apps of past
    items, is the latest item (1-10 minutes before now); a Calendar cue event is upcoming."""
    cue = b["cue"]
    now = _t(b["current_datetime"], FMT_M)
    for app in ORDER:
        assert bool(key_list(b, app)) == bool(cue and cue["app"] == app), app
    if not cue:
        return
    app, state, keys = cue["app"], b["apps"][cue["app"]], key_list(b, cue["app"])
    if app == "Calendar":
        (ev,) = keys
        assert ev in state["events"] and _t(ev["start_datetime"], FMT_M) > now
        return
    if app == "Messaging":
        (conv,) = keys
        last = state["conversations"][-1]
        assert last["messages"][-len(conv["messages"]) :] == conv["messages"]
        assert sorted(last["participants"]) == sorted(conv["participants"])
        assert conv["messages"][-1]["sender"] != b["main_persona"]["name"]
        if cue["person"]:
            assert conv["messages"][-1]["sender"] == cue["person"]
        newest = _t(conv["messages"][-1]["timestamp"], FMT_S)
    else:
        if app == "Maps":
            keys, full = keys["recent_places"], state["maps"]["recent_places"]
        elif app == "Music":
            keys = [keys["currently_playing"]]
            full = [*state["music"]["recent_tracks"], state["music"]["currently_playing"]]
        else:
            full = state[{"Notes": "notes", "Search": "searches", "Videos": "videos"}[app]]
        assert keys and full[-len(keys) :] == keys  # the cue items are the latest
        newest = max(past_times(app, state))
    assert now - dt.timedelta(minutes=11) <= newest <= now - dt.timedelta(minutes=1)
