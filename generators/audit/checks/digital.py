"""Check 9: a digital run's bundles against the digital generator's own rules."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gen.formats.bundles import FMT_M, FMT_S, BundleRules, Checker, State, validate_items
from gen.generators.audit.registry import CheckResult, check, finding
from gen.generators.audit.report import cell
from gen.schemas import digital as S
from gen.schemas.audit import FindingRecord

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    return [
        f"{s['bundles']} bundles; cued per app: {cell(s['cued_per_app']) or 'none'}; "
        f"windows: {cell(s['windows'])}.",
        "",
    ]


@check(
    "digital",
    order=9,
    title="Digital bundles: times, participants, cue",
    finds="bundles breaking the digital generator's own rules: times, participants, ids, the cue",
    markdown=_markdown,
)
def digital(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """The digital generator's own validators re-run on every item (time windows, past items before
    now, participants, text, duplicates), time order, unique ids, the cue in its key list as the
    latest or upcoming item."""
    key = "digital"
    res = CheckResult(key)
    if data.bundles is None:
        return CheckResult(key, "skipped", "not a digital run")
    known = {"window_past_days", "window_future_days", "cue_recent_minutes"}
    dcfg = BundleRules(**{k: v for k, v in data.digital_config.items() if k in known})
    rules: Counter[str] = Counter()
    cued: Counter[str] = Counter()
    for b in data.bundles:
        bid = str(b.get("bundle_id", "?"))
        try:
            bundle = S.DigitalBundle.model_validate(b)
        except ValidationError as e:
            for err in e.errors()[:5]:
                res.findings.append(
                    finding(
                        key,
                        "invalid_bundle",
                        "error",
                        f"not a digital bundle: {err['msg']}",
                        items=[bid],
                        fields=[_loc(err["loc"])],
                    )
                )
            continue
        if bundle.cue:
            cued[bundle.cue.app.value] += 1
        for f in _bundle_findings(bundle, b, dcfg):
            rules[f.kind] += 1
            res.findings.append(f)
    res.stats = {
        "bundles": len(data.bundles),
        "cued_per_app": dict(sorted(cued.items())),
        "findings_by_kind": dict(sorted(rules.items())),
        "windows": {k: getattr(dcfg, k) for k in sorted(known)},
    }
    return res


def _loc(loc: Iterable[Any]) -> str:
    out = ""
    for x in loc:
        out += f"[{x}]" if isinstance(x, int) else (f".{x}" if out else str(x))
    return out


_TIME_RULES = {"unparseable_datetime", "out_of_window", "future_past_item", "end_before_start"}
_PEOPLE_RULES = {"unknown_participant", "unknown_sender", "empty_conversation"}


def _app_items(app: str, state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(path inside the app, item) of an app's full list."""
    base = f"apps.{app}"
    if app == "Maps":
        return [
            (f"{base}.maps.recent_places[{j}]", x)
            for j, x in enumerate(state["maps"]["recent_places"])
        ]
    if app == "Music":
        music = state["music"]
        return [
            *(
                (f"{base}.music.recent_tracks[{j}]", x)
                for j, x in enumerate(music["recent_tracks"])
            ),
            (f"{base}.music.currently_playing", music["currently_playing"]),
        ]
    name = {
        "Calendar": "events",
        "Messaging": "conversations",
        "Notes": "notes",
        "Search": "searches",
        "Videos": "videos",
    }[app]
    return [(f"{base}.{name}[{j}]", x) for j, x in enumerate(state[name])]


ITEM_MODEL = {
    "Calendar": "CalendarEvent",
    "Messaging": "Conversation",
    "Notes": "Note",
    "Search": "SearchItem",
    "Videos": "Video",
    "Maps": "Place",
    "Music": "Track",
}
ID_FIELD = {
    "Calendar": "event_id",
    "Messaging": "conversation_id",
    "Notes": "note_id",
    "Search": "search_id",
    "Videos": "video_id",
    "Maps": "place_id",
    "Music": "track_id",
}
TIME_FIELD = {
    "Calendar": "start_datetime",
    "Notes": "last_updated",
    "Search": "timestamp",
    "Videos": "watch_timestamp",
    "Maps": "last_viewed",
    "Music": "played_at",
}


def _bundle_findings(
    bundle: S.DigitalBundle, raw: dict[str, Any], dcfg: BundleRules
) -> list[FindingRecord]:
    key = "digital"
    bid = bundle.bundle_id
    out: list[FindingRecord] = []
    now = dt.datetime.strptime(bundle.current_datetime, FMT_M)
    st = State(bundle.main_persona, bundle.related_personas, now, bundle.cue)

    def add(kind: str, what: str, fields: list[str], **numbers: Any) -> None:
        out.append(finding(key, kind, "error", what, items=[bid], fields=fields, numbers=numbers))

    all_ids: Counter[str] = Counter()
    for app, state in raw["apps"].items():
        try:
            entries = _app_items(app, state)
        except (KeyError, TypeError):
            add("invalid_app_state", f"{app}: the app state lacks its list", [f"apps.{app}"])
            continue
        model = getattr(S, ITEM_MODEL[app])
        parsed: list[tuple[str, Any]] = []
        for path, x in entries:
            try:
                parsed.append((path, model.model_validate(x)))
            except ValidationError as e:
                err = e.errors()[0]
                add(
                    "invalid_item",
                    f"{app}: {err['msg']}",
                    [f"{path}.{_loc(err['loc'])}".rstrip(".")],
                )
        app_enum = S.App(app)
        passing = []
        for path, item in parsed:
            all_ids[getattr(item, ID_FIELD[app])] += 1
            chk = Checker(app_enum, st, dcfg)
            copy = item.model_copy(deep=True)
            kept = validate_items(app_enum, [copy], chk)
            if not chk.counts and kept:
                passing.append((path, item))
                continue
            hits = {k.split(".", 1)[1]: v for k, v in chk.counts.items()}
            names = sorted({h.rsplit(".", 1)[0] for h in hits})
            kind = (
                "time"
                if set(names) & _TIME_RULES
                else "participants"
                if set(names) & _PEOPLE_RULES
                else "text"
            )
            fields = _validator_fields(app, path, item, copy)
            add(
                f"validator_{kind}",
                f"{app}: fails the digital validators ({', '.join(names)})",
                fields,
                rules=hits,
            )
            if kept and not any(h.endswith(".dropped") for h in hits):
                passing.append((path, item))
        if passing:  # duplicates: items that pass alone but not together
            chk = Checker(app_enum, st, dcfg)
            kept = validate_items(app_enum, [x.model_copy(deep=True) for _, x in passing], chk)
            kept_ids = {getattr(x, ID_FIELD[app]) for x in kept}
            for path, item in passing:
                if getattr(item, ID_FIELD[app]) not in kept_ids:
                    add("validator_duplicate", f"{app}: duplicates an earlier item", [path])
        times = [_item_time(app, x) for _, x in parsed]
        if times != sorted(times):
            add("not_time_ordered", f"{app}: the full list is not in time order", [LIST_PATH[app]])
        if app == "Messaging":
            for path, c in parsed:
                stamps = [m.timestamp for m in c.messages]
                if stamps != sorted(stamps):
                    add(
                        "not_time_ordered",
                        "Messaging: a conversation's messages are not in time order",
                        [f"{path}.messages"],
                    )
    for item_id, k in sorted(all_ids.items()):
        if k > 1:
            add(
                "duplicate_id",
                f"the id {item_id} is used by {k} items",
                ["apps"],
                id=item_id,
                count=k,
            )
    out += _cue_findings(bundle, raw, now, dcfg)
    return out


LIST_PATH = {
    "Calendar": "apps.Calendar.events",
    "Messaging": "apps.Messaging.conversations",
    "Notes": "apps.Notes.notes",
    "Search": "apps.Search.searches",
    "Videos": "apps.Videos.videos",
    "Maps": "apps.Maps.maps.recent_places",
    "Music": "apps.Music.music",
}


def _item_time(app: str, x: Any) -> str:
    if app == "Messaging":
        return x.messages[-1].timestamp if x.messages else ""
    return getattr(x, TIME_FIELD[app])


def _validator_fields(app: str, path: str, before: Any, after: Any) -> list[str]:
    """The field paths the validators changed or objected to, as precisely as the item shows."""
    if app == "Messaging":
        fields = []
        if list(before.participants) != list(after.participants):
            fields.append(f"{path}.participants")
        kept = {m.message_id for m in after.messages}
        for j, m in enumerate(before.messages):
            if m.message_id not in kept:
                fields.append(f"{path}.messages[{j}]")
        return fields or [path]
    if app == "Calendar" and list(before.attendees) != list(after.attendees):
        return [f"{path}.attendees"]
    return [path]


def _cue_findings(
    bundle: S.DigitalBundle, raw: dict[str, Any], now: dt.datetime, dcfg: BundleRules
) -> list[FindingRecord]:
    key = "digital"
    bid = bundle.bundle_id
    out: list[FindingRecord] = []
    cue_app = bundle.cue.app.value if bundle.cue else None

    def add(kind: str, what: str, fields: list[str], **numbers: Any) -> None:
        out.append(finding(key, kind, "error", what, items=[bid], fields=fields, numbers=numbers))

    for app, state in raw["apps"].items():
        kname = next((k for k in state if k.startswith("key_")), None)
        keys: Any = state.get(kname) if kname else None  # JSON: a list, a dict for Maps and Music
        if bool(keys) != (app == cue_app):
            if app == cue_app:
                add(
                    "cue_not_in_key_list",
                    f"{app} carries the cue but its key list is empty",
                    [f"apps.{app}.{kname or 'key_*'}"],
                )
            else:
                add(
                    "key_list_without_cue",
                    f"{app} has key items but the cue is "
                    + (f"on {cue_app}" if cue_app else "absent"),
                    [f"apps.{app}.{kname}"],
                )
    if cue_app is None or cue_app not in raw["apps"]:
        return out
    cue = bundle.cue
    assert cue is not None  # cue_app is set only when the bundle has a cue
    state = raw["apps"][cue_app]
    kname = next((k for k in state if k.startswith("key_")), "key_*")
    keys = state.get(kname) or []
    if not keys:
        return out
    lo_min, hi_min = dcfg.cue_recent_minutes
    recent = (
        now - dt.timedelta(minutes=hi_min + 1),
        now - dt.timedelta(minutes=max(0, lo_min - 1)),
    )
    if cue_app == "Calendar":
        full_ids = {e.get("event_id") for e in state.get("events", [])}
        for j, ev in enumerate(keys):
            if ev.get("event_id") not in full_ids:
                add(
                    "cue_not_in_full_list",
                    "the Calendar cue event is not in the events list",
                    [f"apps.Calendar.{kname}[{j}]"],
                )
            if ev.get("start_datetime", "") <= bundle.current_datetime:
                add(
                    "cue_event_not_upcoming",
                    "the Calendar cue event does not start after now",
                    [f"apps.Calendar.{kname}[{j}].start_datetime"],
                )
        return out
    if cue_app == "Messaging":
        convs = state.get("conversations", [])
        all_msgs = [
            (ci, mi, m) for ci, c in enumerate(convs) for mi, m in enumerate(c.get("messages", []))
        ]
        for j, conv in enumerate(keys):
            msgs = conv.get("messages", [])
            if not msgs:
                add(
                    "cue_not_in_key_list",
                    "the Messaging cue conversation has no messages",
                    [f"apps.Messaging.{kname}[{j}]"],
                )
                continue
            cue_msg = msgs[-1]
            where = next(
                (
                    (ci, mi)
                    for ci, mi, m in all_msgs
                    if m.get("message_id") == cue_msg.get("message_id")
                ),
                None,
            )
            if where is None:
                add(
                    "cue_not_in_full_list",
                    "the cue message is not in any conversation",
                    [f"apps.Messaging.{kname}[{j}].messages[{len(msgs) - 1}]"],
                )
                continue
            latest = max(m.get("timestamp", "") for _, _, m in all_msgs)
            path = f"apps.Messaging.conversations[{where[0]}].messages[{where[1]}]"
            if cue_msg.get("timestamp", "") < latest:
                add(
                    "cue_not_latest",
                    "the cue message is not the latest message",
                    [f"{path}.timestamp"],
                )
            _recent(add, cue_msg.get("timestamp", ""), FMT_S, recent, f"{path}.timestamp")
            if cue_msg.get("sender") == bundle.main_persona.name:
                add(
                    "cue_sender", "the cue message is sent by the user themself", [f"{path}.sender"]
                )
            elif cue.person and cue_msg.get("sender") != cue.person:
                add(
                    "cue_sender",
                    f"the cue names {cue.person} but the message is from someone else",
                    [f"{path}.sender"],
                )
        return out
    entries = _app_items(cue_app, state)
    key_items = (
        keys["recent_places"]
        if cue_app == "Maps"
        else [keys["currently_playing"]]
        if cue_app == "Music"
        else keys
    )
    id_field = ID_FIELD[cue_app]
    full = {x.get(id_field): (p, x) for p, x in entries}
    tfield = TIME_FIELD[cue_app]
    fmt = FMT_M if cue_app == "Notes" else FMT_S
    # the cue's items together are the latest (a Search cue is a refinement: several queries)
    key_ids = {x.get(id_field) for x in key_items}
    latest = max(
        (x.get(tfield, "") for _, x in entries if x.get(id_field) not in key_ids), default=""
    )
    for x in key_items:
        if x.get(id_field) not in full:
            add(
                "cue_not_in_full_list",
                f"a {cue_app} cue item is not in the full list",
                [f"apps.{cue_app}.{kname}"],
            )
            continue
        path, _ = full[x.get(id_field)]
        if x.get(tfield, "") < latest:
            later = [
                p
                for p, y in entries
                if y.get(tfield, "") > x.get(tfield, "") and y.get(id_field) not in key_ids
            ]
            add(
                "cue_not_latest",
                f"the {cue_app} cue item is not the latest item",
                [f"{path}.{tfield}", *later],
            )
        _recent(add, x.get(tfield, ""), fmt, recent, f"{path}.{tfield}")
    return out


def _recent(
    add: Callable[..., None],
    value: str,
    fmt: str,
    window: tuple[dt.datetime, dt.datetime],
    path: str,
) -> None:
    try:
        t = dt.datetime.strptime(value, fmt)
    except ValueError:
        return  # the validators report unparseable times
    if not window[0] <= t <= window[1]:
        add("cue_not_recent", f"the cue item is at {value}, not just before now", [path])
