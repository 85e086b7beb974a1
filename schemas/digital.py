"""Digital Context Generator schemas: what the LLM writes (``*Draft``), and the app items and
bundle that code assembles from it (ids, times, participants are code's)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gen.schemas import Hex32
from gen.schemas.personas import PersonaRecord, RelatedPersona


class App(str, Enum):  # noqa: UP042 - StrEnum changes str(member), which outputs use
    Calendar = "Calendar"
    Messaging = "Messaging"
    Notes = "Notes"
    Search = "Search"
    Videos = "Videos"
    Maps = "Maps"
    Music = "Music"


RENDER_ORDER = (App.Calendar, App.Messaging, App.Search, App.Videos, App.Notes, App.Maps, App.Music)
"""The order in which WAGIBench's prompt shows the apps."""

QueryType = Literal["web", "news", "images", "videos", "shopping", "local", "recipes", "travel"]
VideoCategory = Literal[
    "Music",
    "Education",
    "Entertainment",
    "Gaming",
    "Sports",
    "News",
    "Howto & Style",
    "Science & Technology",
    "Travel & Events",
    "Comedy",
    "Film & Animation",
    "People & Blogs",
    "Food & Cooking",
    "Pets & Animals",
    "Autos & Vehicles",
]

SHORT_CHARS, TEXT_CHARS, LONG_CHARS, TAG_CHARS = 80, 160, 500, 30
"""Length caps of the drafts' strings; a text that reaches its cap was cut there (the text gates
count it as truncated)."""
Short = Annotated[str, Field(min_length=1, max_length=SHORT_CHARS)]
Text = Annotated[str, Field(min_length=1, max_length=TEXT_CHARS)]
Long = Annotated[str, Field(min_length=1, max_length=LONG_CHARS)]
HHMM = Annotated[str, Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")]


# --------------------------------------------------------------------------- LLM drafts
# Counts are set per call (code picks them) by building a constrained copy of these models.


class EventDraft(BaseModel):
    title: Short
    location: Short


class CalendarDraft(BaseModel):
    events: list[EventDraft]


class CalendarCueDraft(BaseModel):
    title: Short
    location: Short
    # Integers are unbounded on purpose: llama.cpp grammars do not enforce numeric ranges,
    # so a bound would only cause re-asks; code corrects out-of-range values and counts it.
    day_offset: int
    """Days after today's date on which the event starts."""
    start_time: HHMM
    duration_minutes: int


class MessageDraft(BaseModel):
    content: Text


class ConversationDraft(BaseModel):
    topic: Short
    messages: list[MessageDraft]


class MessagingDraft(BaseModel):
    conversations: list[ConversationDraft]


class MessagingCueDraft(BaseModel):
    earlier_messages: list[MessageDraft] = Field(min_length=1, max_length=4)
    cue_message: Text


class NoteDraft(BaseModel):
    title: Short
    content: Long


class NotesDraft(BaseModel):
    notes: list[NoteDraft]


class SearchDraftItem(BaseModel):
    query: Short
    query_type: QueryType


class SearchDraft(BaseModel):
    searches: list[SearchDraftItem]


class SearchCueDraft(BaseModel):
    searches: list[SearchDraftItem] = Field(min_length=1, max_length=3)


class VideoDraft(BaseModel):
    title: Short
    duration_secs: int  # unbounded: code corrects, see CalendarCueDraft
    tags: list[Annotated[str, Field(min_length=1, max_length=TAG_CHARS)]] = Field(
        min_length=1, max_length=5
    )
    category: VideoCategory


class VideosDraft(BaseModel):
    videos: list[VideoDraft]


class VideosCueDraft(BaseModel):
    video: VideoDraft


class PlaceDraft(BaseModel):
    name: Short
    address: Short


class MapsDraft(BaseModel):
    places: list[PlaceDraft]


class MapsCueDraft(BaseModel):
    place: PlaceDraft


class TrackDraft(BaseModel):
    title: Short
    artist: Short
    album: Short


class MusicDraft(BaseModel):
    tracks: list[TrackDraft]


class MusicCueDraft(BaseModel):
    track: TrackDraft


# --------------------------------------------------------------------------- app items

_ITEM = ConfigDict(extra="forbid")
DATETIME = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}$"
DATETIME_S = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$"


class CalendarEvent(BaseModel):
    model_config = _ITEM
    event_id: Hex32
    """32 hex derived from the run's seed, the bundle's index, the app and the item's slot."""
    title: str
    """The event's title (the LLM's words, through the text gates)."""
    start_datetime: str = Field(pattern=DATETIME)
    """Start, ``YYYY-MM-DD HH:MM``, planned by code within ``window_past_days`` before and
    ``window_future_days`` after the current datetime."""
    end_datetime: str = Field(pattern=DATETIME)
    """End, ``YYYY-MM-DD HH:MM``, after the start."""
    location: str
    """Where it takes place (the LLM's words)."""
    attendees: list[str]
    """Related personas who attend, by full name (code draws zero to two; a cue's event: those its
    text names); never the main persona."""


class Message(BaseModel):
    model_config = _ITEM
    message_id: Hex32
    """32 hex derived from the run's seed, the bundle's index, the app and the item's slot."""
    sender: str
    """The sender's full name: the main persona or a participant, chosen by code."""
    timestamp: str = Field(pattern=DATETIME_S)
    """When it was sent, ``YYYY-MM-DD HH:MM:SS``, at or before the current datetime."""
    content: str
    """The message text (the LLM's words, through the text gates)."""


class Conversation(BaseModel):
    model_config = _ITEM
    conversation_id: Hex32
    """32 hex derived from the run's seed, the bundle's index, the app and the item's slot."""
    title: str
    """A group's topic (the LLM's); a two-person chat's: the other person's name."""
    participants: list[str]
    """Full names, the main persona first, then related personas."""
    messages: list[Message]
    """Oldest first; a cue's messages are merged in by time."""


class Note(BaseModel):
    model_config = _ITEM
    note_id: Hex32
    """32 hex derived from the run's seed, the bundle's index, the app and the item's slot."""
    title: str
    """The note's title."""
    content: str
    """The note's text."""
    last_updated: str = Field(pattern=DATETIME)
    """When it was last edited, ``YYYY-MM-DD HH:MM``, at or before the current datetime."""


class SearchItem(BaseModel):
    model_config = _ITEM
    search_id: Hex32
    """32 hex derived from the run's seed, the bundle's index, the app and the item's slot."""
    query: str
    """The search as typed."""
    query_type: str
    """``web``, ``news``, ``images``, ``videos``, ``shopping``, ``local``, ``recipes`` or
    ``travel``."""
    timestamp: str = Field(pattern=DATETIME_S)
    """When it was searched, ``YYYY-MM-DD HH:MM:SS``, at or before the current datetime."""


class Video(BaseModel):
    model_config = _ITEM
    video_id: Hex32
    """32 hex derived from the run's seed, the bundle's index, the app and the item's slot."""
    title: str
    """The video's title."""
    duration_secs: int
    """Length in seconds (values under 15 read as minutes and converted; at most 4 hours)."""
    tags: list[str]
    """Up to five distinct tags."""
    category: str
    """One of the video categories (``Music``, ``Education``, ``Entertainment``…)."""
    watch_timestamp: str = Field(pattern=DATETIME_S)
    """When it was watched, ``YYYY-MM-DD HH:MM:SS``, at or before the current datetime."""


class Place(BaseModel):
    model_config = _ITEM
    place_id: Hex32
    """32 hex derived from the run's seed, the bundle's index, the app and the item's slot."""
    name: str
    """The place's name."""
    address: str
    """Its address (the LLM's words)."""
    last_viewed: str = Field(pattern=DATETIME_S)
    """When it was looked up, ``YYYY-MM-DD HH:MM:SS``, at or before the current datetime."""


class Location(BaseModel):
    model_config = _ITEM
    name: str
    """``Home``, or the workplace's, school's or last place's name."""
    address: str
    """Its address (home: the persona's ``home_address``)."""


class MapsState(BaseModel):
    model_config = _ITEM
    home_location: Location
    """``Home`` at the main persona's ``home_address``."""
    current_location: Location
    """Where the persona is now: home at night (before 7, from 21), the employer or school on a
    weekday 9-17, else the last place viewed."""
    recent_places: list[Place]
    """Places looked up, oldest first."""


class Track(BaseModel):
    model_config = _ITEM
    track_id: Hex32
    """32 hex derived from the run's seed, the bundle's index, the app and the item's slot."""
    title: str
    """The track's title."""
    artist: str
    """Its artist."""
    album: str
    """Its album."""
    played_at: str = Field(pattern=DATETIME_S)
    """When it was played, ``YYYY-MM-DD HH:MM:SS``, at or before the current datetime."""


class MusicState(BaseModel):
    model_config = _ITEM
    currently_playing: Track
    """The most recently played track."""
    recent_tracks: list[Track]
    """The tracks played before it, oldest first."""


# One app's state in a bundle: the full list (what the app shows) and the key list (the D*
# view: only the items the cue gave rise to), under WAGIBench's field names.


class CalendarApp(BaseModel):
    model_config = _ITEM
    events: list[CalendarEvent]
    """Every event, by start time (the cue's among them)."""
    key_events: list[CalendarEvent]
    """Only the events the cue gave rise to (WAGIBench's D* view); empty without a Calendar cue."""


class MessagingApp(BaseModel):
    model_config = _ITEM
    conversations: list[Conversation]
    """Every conversation, by their last message's time (the cue's merged in)."""
    key_conversations: list[Conversation]
    """Only the conversations the cue gave rise to; empty without a Messaging cue."""


class NotesApp(BaseModel):
    model_config = _ITEM
    notes: list[Note]
    """Every note, by last update."""
    key_notes: list[Note]
    """Only the notes the cue gave rise to; empty without a Notes cue."""


class SearchApp(BaseModel):
    model_config = _ITEM
    searches: list[SearchItem]
    """Every search, oldest first."""
    key_searches: list[SearchItem]
    """Only the searches the cue gave rise to; empty without a Search cue."""


class VideosApp(BaseModel):
    model_config = _ITEM
    videos: list[Video]
    """Every video watched, oldest first."""
    key_videos: list[Video]
    """Only the videos the cue gave rise to; empty without a Videos cue."""


class KeyMaps(BaseModel):
    model_config = _ITEM
    recent_places: list[Place] = []
    """Only the places the cue gave rise to."""


class MapsApp(BaseModel):
    model_config = _ITEM
    maps: MapsState
    """Home, where the persona is now, and the places looked up."""
    key_maps: KeyMaps
    """The cue's places; ``{}`` without a Maps cue."""


class KeyMusic(BaseModel):
    model_config = _ITEM
    currently_playing: Track | None = None
    """The cue's track; null (absent) without a Music cue."""


class MusicApp(BaseModel):
    model_config = _ITEM
    music: MusicState
    """What is playing and what played before."""
    key_music: KeyMusic
    """The cue's track; ``{}`` without a Music cue."""


APP_STATE: dict[App, type[BaseModel]] = {
    App.Calendar: CalendarApp,
    App.Messaging: MessagingApp,
    App.Notes: NotesApp,
    App.Search: SearchApp,
    App.Videos: VideosApp,
    App.Maps: MapsApp,
    App.Music: MusicApp,
}
"""The model of each app's state in ``DigitalBundle.apps``."""


# --------------------------------------------------------------------------- bundle


class Cue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cue_id: str
    """The cue bank row's ``cue_id`` (``inline`` for ``cue=``; a goal cue's: the goal's
    ``goal_id``)."""
    app: App
    """The app whose state the cue conditions."""
    cue: str
    """The cue text with any ``{person}`` filled by a related persona's first name."""
    person: str | None = None
    """The related persona the cue names, if any (code chose them)."""


class GoalRef(BaseModel):
    """The goal a goal-conditioned bundle was made for (``digital goals=``)."""

    model_config = ConfigDict(extra="forbid")
    goal_id: str
    """The goal row's ``goal_id`` in the goal bank (``goals=``)."""
    client_tag: str
    """The goal row's client_tag (its goal_id when it has none): WAGIBench's join key, with
    ``group``."""
    group: str
    """The goal row's group: the scenario shortname WAGIBench joins on."""
    app: App | None
    """The app whose state makes the goal inferable; None: the goal needs no digital context."""
    person: str | None = None
    """The related persona the cue comes from (a Messaging cue's sender)."""
    word: str | None = None
    """The goal's word the cue names (its most specific word: the thing, place or person it is
    about)."""
    action_share: float | None = None
    """Share of the goal's action words (its query, content or place) found in the key-only
    state."""
    rank: int | None = None
    """Where the goal ranked among the bank's goals by similarity to the key-only state (1 =
    first)."""


class DigitalBundle(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bundle_id: Hex32
    """32 hex derived from the run's seed, the generator and the record's index."""
    main_persona: PersonaRecord
    """The persona whose phone this is, drawn from the persona pool."""
    related_personas: list[RelatedPersona]
    """Five other personas of the pool, each with an age-consistent relation to the main one; the
    apps' people come from them."""
    current_datetime: str = Field(pattern=DATETIME)
    """The moment of the bundle, ``YYYY-MM-DD HH:MM``, sampled between ``date_start`` and
    ``date_end`` by ``hour_weights``."""
    cue: Cue | None
    """What the bundle was conditioned on (from ``cue_file``, ``cue=`` or the goal); None for an
    uncued bundle."""
    goal: GoalRef | None = None
    """Set when the bundle was made for a goal of a goal bank."""
    apps: dict[str, dict[str, Any]]
    """Per app (WAGIBench field names): e.g. Calendar -> {events, key_events}; each state is
    checked against its model in :data:`APP_STATE` and kept as the plain dict it is (so a record's
    bytes are the generator's)."""
    stats: dict[str, Any]
    """``chars_per_app`` (characters of each app's rendered state) and ``chars_total`` (the whole
    bundle as WAGIBench's prompt shows it)."""
    doc_models: ClassVar[tuple[type[BaseModel], ...]] = tuple(APP_STATE.values())
    """The app states' models, shown beside the record's in the docs (``apps`` keeps plain
    dicts)."""

    @field_validator("apps")
    @classmethod
    def _typed_apps(cls, apps: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, state in apps.items():
            APP_STATE[App(name)].model_validate(state)
        return apps
