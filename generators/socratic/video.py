"""Video decoding with PyAV (FFmpeg's libraries inside its wheel; ``pip install 'egogen[video]'``):
a video's length and streams, a clip's frames sampled evenly and downscaled, a clip's audio as
16 kHz mono WAV; and transcript sidecars (SubRip ``.srt``, WebVTT ``.vtt``).

PyAV is imported on first use (:func:`require_av`), so gen imports without it. A file FFmpeg
cannot read, a video without frames, or one that breaks while it is decoded raises
:class:`VideoError` with a typed reason; the generator makes it a reject.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import math
import re
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gen.errors import InputError
from gen.extras import need
from gen.readers import read_text
from gen.schemas.socratic import TranscriptLine

VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".avi", ".webm", ".m4v", ".mpg", ".mpeg", ".ts")
"""What a folder's videos are named (any case)."""
SIDECARS = (".srt", ".vtt")
"""Transcript sidecars looked for beside a video: ``<video stem>.srt``, then ``.vtt``."""
AUDIO_RATE = 16_000
"""Whisper's input rate: audio is sent as 16 kHz mono 16-bit WAV."""


class VideoError(Exception):
    """A video (or one of its clips) cannot be used; ``reason`` is the reject's."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def require_av() -> Any:
    """The ``av`` module, or a MissingExtra naming the extra that installs it."""
    need("video", "socratic (video decoding with PyAV)")
    import av

    return av


def _open(path: Path) -> Any:
    av = require_av()
    try:
        return av.open(str(path), metadata_errors="ignore")
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as e:
        raise VideoError("unreadable_video", f"{path.name}: FFmpeg cannot open it ({e})") from None


@dataclass(frozen=True)
class VideoInfo:
    duration: float
    """Seconds."""
    width: int
    height: int
    has_audio: bool
    created: dt.datetime | None
    """The container's ``creation_time`` tag, if any (naive UTC)."""


def probe(path: Path) -> VideoInfo:
    """A video's length, frame size, audio and creation time (from the container's headers).

    Raises:
        VideoError: ``unreadable_video`` (not a video FFmpeg reads), ``no_video_stream``,
            ``empty_video`` (no length).
    """
    av = require_av()
    with _open(path) as c:
        if not c.streams.video:
            if not c.streams.audio and not c.duration:  # a container written without a frame
                raise VideoError("empty_video", f"{path.name}: the video is empty (zero length)")
            raise VideoError("no_video_stream", f"{path.name}: holds no video stream")
        s = c.streams.video[0]
        duration = None
        if s.duration is not None and s.time_base is not None:
            duration = float(s.duration * s.time_base)
        elif c.duration is not None:
            duration = c.duration / av.time_base
        if not duration or not math.isfinite(duration) or duration <= 0:
            raise VideoError("empty_video", f"{path.name}: the video has no length (no frames)")
        return VideoInfo(
            duration=round(duration, 6),
            width=int(s.codec_context.width or 0),
            height=int(s.codec_context.height or 0),
            has_audio=bool(c.streams.audio),
            created=_created(c.metadata.get("creation_time")),
        )


def _created(tag: Any) -> dt.datetime | None:
    if not isinstance(tag, str):
        return None
    try:
        t = dt.datetime.fromisoformat(tag.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.astimezone(dt.UTC).replace(tzinfo=None) if t.tzinfo else t


def scaled(width: int, height: int, max_side: int) -> tuple[int, int]:
    """(width, height) shrunk to ``max_side`` on the longer side (never enlarged), even numbers
    (what the encoders of the frames' formats like)."""
    k = min(1.0, max_side / max(width, height, 1))
    return max(2, round(width * k / 2) * 2), max(2, round(height * k / 2) * 2)


def targets(start: float, end: float, n: int) -> list[float]:
    """``n`` instants spread evenly over [start, end): the middle of each of n equal parts."""
    step = (end - start) / n
    return [start + (k + 0.5) * step for k in range(n)]


@dataclass(frozen=True)
class Frame:
    t: float
    """Seconds of the video."""
    width: int
    height: int
    mime: str
    data: bytes

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode()}"


def frames(
    path: Path,
    start: float,
    end: float,
    n: int,
    *,
    max_side: int,
    image_format: str = "jpeg",
    quality: int = 85,
) -> list[Frame]:
    """``n`` frames of [start, end), each the decoded frame nearest an instant of
    :func:`targets`, scaled to ``max_side`` and encoded (JPEG or PNG). Only frames near the clip
    are decoded (a seek to the keyframe before ``start``), one at a time: memory does not grow with
    the clip's length or the video's size.

    Raises:
        VideoError: ``damaged_video`` when decoding fails, ``no_frames`` when the clip has none.
    """
    av = require_av()
    want = targets(start, end, n)
    picked: list[Frame] = []
    with _open(path) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        base = float(s.start_time * s.time_base) if s.start_time and s.time_base else 0.0
        size = scaled(s.codec_context.width or 2, s.codec_context.height or 2, max_side)
        prev: tuple[float, Any] | None = None
        try:
            if start > 0:
                c.seek(int((start + base) / s.time_base), stream=s, backward=True)
            for f in c.decode(s):
                if f.time is None:
                    continue
                t = float(f.time) - base
                if t >= end:
                    break
                while len(picked) < n and t >= want[len(picked)]:
                    target = want[len(picked)]
                    use = (t, f)
                    if prev is not None and prev[0] >= start and target - prev[0] < t - target:
                        use = prev
                    picked.append(_encode(use[1], use[0], size, image_format, quality))
                prev = (t, f)
        except av.error.FFmpegError as e:
            raise VideoError(
                "damaged_video", f"{path.name}: decoding failed at {start:g}-{end:g} s ({e})"
            ) from None
    if prev is None or prev[0] < start:
        if not picked:
            raise VideoError("no_frames", f"{path.name}: no frame in {start:g}-{end:g} s")
    while len(picked) < n and prev is not None:  # the clip ended before its last instants
        picked.append(_encode(prev[1], prev[0], size, image_format, quality))
    return picked


def _encode(frame: Any, t: float, size: tuple[int, int], image_format: str, quality: int) -> Frame:
    image = frame.reformat(width=size[0], height=size[1], format="rgb24").to_image()
    buf = io.BytesIO()
    if image_format == "png":
        image.save(buf, format="PNG")
    else:
        image.save(buf, format="JPEG", quality=quality)
    return Frame(round(t, 3), size[0], size[1], f"image/{image_format}", buf.getvalue())


def audio_wav(path: Path, start: float, end: float) -> bytes | None:
    """[start, end) of the video's first audio stream as 16 kHz mono 16-bit WAV; None when the
    video has no audio stream.

    Raises:
        VideoError: ``damaged_video`` when decoding fails.
    """
    av = require_av()
    rate = AUDIO_RATE
    first, last = round(start * rate), round(end * rate)
    pcm = bytearray()
    with _open(path) as c:
        if not c.streams.audio:
            return None
        s = c.streams.audio[0]
        base = float(s.start_time * s.time_base) if s.start_time and s.time_base else 0.0
        resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
        at = None  # the sample index (of the whole audio) pcm's end stands at
        try:
            if start > 0:
                c.seek(int((start + base) / s.time_base), stream=s, backward=True)
            for f in c.decode(s):
                for r in resampler.resample(f):
                    if at is None:
                        at = round(((float(r.time) - base) if r.time is not None else 0.0) * rate)
                    data = bytes(r.to_ndarray().tobytes())
                    count = len(data) // 2
                    lo, hi = max(first, at), min(last, at + count)
                    if hi > lo:
                        pcm += data[(lo - at) * 2 : (hi - at) * 2]
                    at += count
                if at is not None and at >= last:
                    break
        except av.error.FFmpegError as e:
            raise VideoError(
                "damaged_video", f"{path.name}: audio decoding failed at {start:g} s ({e})"
            ) from None
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(pcm))
    return buf.getvalue()


# --------------------------------------------------------------------------- sidecars


def sidecar(video: Path) -> Path | None:
    """The transcript beside ``video``: ``<stem>.srt``, else ``<stem>.vtt``."""
    for suffix in SIDECARS:
        p = video.with_suffix(suffix)
        if p.is_file():
            return p
    return None


_CUE = re.compile(
    r"^\s*(?P<a>(?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})\s*-->\s*(?P<b>(?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})"
)


def _stamp(text: str) -> float:
    parts = text.replace(",", ".").split(":")
    sec = float(parts[-1])
    for k, p in enumerate(reversed(parts[:-1])):
        sec += int(p) * 60 ** (k + 1)
    return sec


def read_sidecar(path: Path) -> list[TranscriptLine]:
    """A SubRip or WebVTT file's cues, in file order (markup like ``<i>`` removed).

    Raises:
        InputError: not UTF-8, a cue whose end is before its start, or no cue at all, naming the
            file and line.
    """
    lines = read_text(path).splitlines()
    out: list[TranscriptLine] = []
    i = 0
    while i < len(lines):
        m = _CUE.match(lines[i])
        if not m:
            i += 1
            continue
        a, b = _stamp(m.group("a")), _stamp(m.group("b"))
        if b < a:
            raise InputError(f"{path}:{i + 1}: the cue ends ({m.group('b')}) before it starts")
        text: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip():
            text.append(re.sub(r"<[^>]*>", "", lines[j]).strip())
            j += 1
        words = " ".join(" ".join(text).split())
        if words:
            out.append(TranscriptLine(start=a, end=b, text=words))
        i = j
    if not out and lines and any(x.strip() for x in lines):
        raise InputError(f"{path}: no cue ('00:00:01,000 --> 00:00:02,000' and its text) found")
    return out
