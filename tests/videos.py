"""Short synthetic videos made with PyAV for socratic's tests: a background colour per segment of
the video (so a stand-in model can tell the clips apart by their frames), a white square moving
across, a line of drawn text, and a 440 Hz tone (or no audio track)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220)}


def colour_at(t: float, segments: list[tuple[float, str]]) -> str:
    """The background colour at ``t`` seconds: the last segment starting at or before it."""
    name = segments[0][1]
    for start, colour in segments:
        if t >= start:
            name = colour
    return name


def make_video(
    path: Path,
    seconds: float = 25.0,
    *,
    fps: int = 4,
    size: tuple[int, int] = (320, 240),
    segments: list[tuple[float, str]] | None = None,
    audio: bool = True,
    text: str = "EXIT 7",
) -> Path:
    """Write an MPEG-4 video (``mpeg4`` video, AAC audio: FFmpeg's own encoders, in PyAV's
    wheel)."""
    import av
    import numpy as np
    from PIL import Image, ImageDraw

    segments = segments or [(0.0, "red"), (10.0, "green"), (20.0, "blue")]
    w, h = size
    with av.open(str(path), "w") as c:
        v = c.add_stream("mpeg4", rate=fps)
        v.width, v.height, v.pix_fmt = w, h, "yuv420p"
        v.bit_rate = 400_000
        a = None
        if audio:
            a = c.add_stream("aac", rate=16_000)
            a.layout = "mono"
        for k in range(round(seconds * fps)):
            t = k / fps
            img = Image.new("RGB", size, COLOURS[colour_at(t, segments)])
            d = ImageDraw.Draw(img)
            x = int((w - 40) * (t % 5) / 5)
            d.rectangle([x, h // 2 - 20, x + 40, h // 2 + 20], fill=(255, 255, 255))
            d.text((10, 10), text, fill=(255, 255, 255))
            frame = av.VideoFrame.from_image(img)
            frame.pts = k
            frame.time_base = Fraction(1, fps)
            for p in v.encode(frame):
                c.mux(p)
        for p in v.encode():
            c.mux(p)
        if a is not None:
            rate, chunk = 16_000, 1024
            total = int(seconds * rate)
            for start in range(0, total, chunk):
                n = min(chunk, total - start)
                x = np.arange(start, start + n)
                wave = (0.3 * 32767 * np.sin(2 * math.pi * 440 * x / rate)).astype(np.int16)
                af = av.AudioFrame.from_ndarray(wave.reshape(1, -1), format="s16", layout="mono")
                af.sample_rate = rate
                af.pts = start
                af.time_base = Fraction(1, rate)
                for p in a.encode(af):
                    c.mux(p)
            for p in a.encode():
                c.mux(p)
    return path


def make_empty_video(path: Path) -> Path:
    """A container with a video stream and no frame (zero length)."""
    import av

    with av.open(str(path), "w") as c:
        v = c.add_stream("mpeg4", rate=4)
        v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
        c.start_encoding()  # the header, and no frame
    return path
