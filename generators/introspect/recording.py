"""Moment of Recording (EgoIntrospect §4.2.1, appendices A.1 and F.1), from ``RecordingSession``
lines.

- **Recording test** (binary): each photo or video command gives a positive window, the command's
  moment (photo) or its annotated event segment (video) extended by ``pad`` seconds on each side;
  ``negatives_per_positive`` negative windows of the same length are placed with the session's
  seed where no positive window and no command is. The clip is shown without its audio (speech
  lines left out), so the spoken command does not give the answer away.
- **Photo test** (``k``-way): the object the photo command was meant to capture against ``k-1``
  objects seen within ``photo_window`` seconds of the photo moment, drawn with the seed; an
  object that was a wrong option in one of the session's questions is not drawn again. The
  clip's lines that name an option are left out, all options alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gen.formats.mcq import Positions
from gen.generators.introspect.common import (
    Built,
    Draft,
    Refusal,
    clip_text,
    fmt_span,
    positions,
    rng_for,
    shuffled,
)
from gen.intervals import Interval, overlaps, place
from gen.schemas.introspect import RecordingCommand, RecordingSession
from gen.text.gates import key

if TYPE_CHECKING:
    from gen.generators.introspect import IntrospectConfig

RECORD_QUESTION = "Would the user want to capture a moment of this clip with the glasses?"
PHOTO_QUESTION = "Which of these did the user choose to photograph?"


def positive_window(c: RecordingCommand, pad: float, duration: float) -> Interval:
    start, end = (
        (c.start, c.end)
        if c.kind == "video" and c.start is not None and c.end is not None
        else (c.time, c.time)
    )
    return max(0.0, start - pad), min(duration, end + pad)


def build(sessions: list[RecordingSession], cfg: IntrospectConfig) -> list[Built]:
    out: list[Built] = []
    places = positions(cfg.seed)
    for s in sessions:
        rng, _ = rng_for(cfg.seed, "recording", s.session_id)
        windows = [positive_window(c, cfg.pad, s.duration) for c in s.commands]
        busy = [*windows, *((c.time, c.time) for c in s.commands)]
        placed: list[Interval] = []
        for c, w in zip(s.commands, windows, strict=True):
            src = f"{s.session_id}/{c.command_id}"
            out.append(
                binary(
                    s,
                    w,
                    src,
                    True,
                    {
                        "command": c.command_id,
                        "kind": c.kind,
                        "explanation": c.explanation,
                        "moment_type": c.moment_type,
                        "attention": c.attention,
                        "planning": c.planning,
                    },
                    cfg,
                )
            )
            for j in range(cfg.negatives_per_positive):
                neg = place(w[1] - w[0], (0.0, s.duration), [*busy, *placed], rng)
                if neg is None:
                    out.append(
                        Refusal(
                            f"{src}/negative{j + 1}",
                            "recording_test",
                            "no_room_for_negative",
                            f"no {w[1] - w[0]:.0f}-second window of {s.session_id} without a "
                            "command is free",
                        )
                    )
                    continue
                placed.append(neg)
                out.append(
                    binary(
                        s, neg, f"{src}/negative{j + 1}", False, {"negative_of": c.command_id}, cfg
                    )
                )
        used: set[str] = set()
        for c in s.commands:
            if c.kind == "photo":
                out.append(photo(s, c, used, cfg, places))
    return out


def binary(
    s: RecordingSession,
    w: Interval,
    src: str,
    positive: bool,
    info: dict[str, object],
    cfg: IntrospectConfig,
) -> Built:
    text = clip_text(s.timeline, w, audio=False)
    if not text:
        return Refusal(
            src,
            "recording_test",
            "empty_clip",
            f"no line without speech in {fmt_span(w)} of {s.session_id}",
        )
    commands = [
        c.command_id
        for c in s.commands
        if overlaps(w, (c.time, c.time))
        or (c.start is not None and c.end is not None and overlaps(w, (c.start, c.end)))
    ]
    return Draft(
        "recording_test",
        RECORD_QUESTION,
        ["yes", "no"],
        0 if positive else 1,
        src,
        s.session_id,
        visible={"context": text},
        privileged={
            **{k: v for k, v in info.items() if v is not None},
            "commands_in_clip": commands,
        },
        extra={"window": {"start": w[0], "end": w[1]}},
    )


def photo(
    s: RecordingSession,
    c: RecordingCommand,
    used: set[str],
    cfg: IntrospectConfig,
    places: Positions,
) -> Built:
    src = f"{s.session_id}/{c.command_id}"
    if c.target is None:
        return Refusal(
            src, "photo_test", "no_photo_target", "a photo command without its target's label"
        )
    rng, seed = rng_for(cfg.seed, "photo", s.session_id, c.command_id)
    half = cfg.photo_window / 2
    target = key(c.target.label)
    pool: dict[str, tuple[str, float]] = {}
    for o in sorted(s.objects, key=lambda o: (o.time, o.label)):
        k = key(o.label)
        if abs(o.time - c.time) <= half and k != target and k not in used and k not in pool:
            pool[k] = (o.label, o.time)
    need = cfg.k - 1
    if len(pool) < need:
        return Refusal(
            src,
            "photo_test",
            "too_few_objects",
            f"{len(pool)} other objects within {half:g} s of the photo (not used before in the "
            f"session), need {need}",
        )
    picks = rng.sample(sorted(pool), need)
    used.update(picks)
    options, origins, answer = shuffled(
        [c.target.label, *(pool[p][0] for p in picks)],
        ["positive", *(f"object@{pool[p][1]:g}" for p in picks)],
        rng,
        places,
        "photo_test",
    )
    w = (max(0.0, c.time - cfg.pad), min(s.duration, c.time + cfg.pad))
    times = {c.target.label: c.time, **{pool[p][0]: pool[p][1] for p in picks}}
    return Draft(
        "photo_test",
        PHOTO_QUESTION,
        options,
        answer,
        src,
        s.session_id,
        origins=origins,
        visible={"context": clip_text(s.timeline, w, audio=False, hide=options)},
        privileged={
            "target": c.target.label,
            "expectation": c.target.expectation,
            "explanation": c.explanation,
            "option_times": {str(i): times[o] for i, o in enumerate(options)},
        },
        extra={"window": {"start": w[0], "end": w[1]}, "shuffle_seed": seed},
    )
