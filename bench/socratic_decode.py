"""Frames decoded per second by ``socratic``'s decoder (PyAV) on this machine.

A synthetic video (``--seconds`` at ``--fps``, ``--size``; MPEG-4 part 2 and H.264) is made with
PyAV, then cut into 10-second clips the way ``gen socratic`` cuts it: per clip, every frame of the
clip is decoded (from the keyframe before it) and ``frames_per_clip`` of them are scaled to
``max_side`` and JPEG-encoded. Reported: frames through the decoder per second, clips per second
and sampled frames per second, each the best of ``--repeat`` runs.

    python bench/socratic_decode.py [--seconds 60] [--fps 30] [--size 1280x720]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make(path: Path, seconds: float, fps: int, size: tuple[int, int], codec: str) -> None:
    import av
    import numpy as np

    w, h = size
    with av.open(str(path), "w") as c:
        v = c.add_stream(codec, rate=fps)
        v.width, v.height, v.pix_fmt = w, h, "yuv420p"
        v.bit_rate = 4_000_000
        for k in range(int(seconds * fps)):
            img = np.zeros((h, w, 3), dtype=np.uint8)
            img[:, :, k % 3] = 200
            x = (k * 7) % (w - 64)
            img[h // 2 - 32 : h // 2 + 32, x : x + 64] = 255
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = k, Fraction(1, fps)
            for p in v.encode(f):
                c.mux(p)
        for p in v.encode():
            c.mux(p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--frames-per-clip", type=int, default=8)
    ap.add_argument("--max-side", type=int, default=448)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import av

    from gen.generators.socratic import clip_bounds
    from gen.generators.socratic.video import frames, probe

    size = tuple(int(x) for x in args.size.split("x"))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for codec in ("mpeg4", "libx264"):
            path = Path(tmp) / f"v_{codec}.mp4"
            make(path, args.seconds, args.fps, size, codec)  # type: ignore[arg-type]
            info = probe(path)
            clips = clip_bounds(info.duration, 10.0)
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                for a, b in clips:
                    frames(path, a, b, args.frames_per_clip, max_side=args.max_side)
                best = min(best, time.perf_counter() - t0)
            decoded = int(args.seconds * args.fps)
            results.append(
                {
                    "codec": codec,
                    "video": f"{args.seconds:g} s, {args.fps} fps, {args.size}",
                    "clips": len(clips),
                    "seconds": round(best, 3),
                    "decoded_frames_per_s": round(decoded / best, 1),
                    "clips_per_s": round(len(clips) / best, 2),
                    "sampled_frames_per_s": round(len(clips) * args.frames_per_clip / best, 1),
                }
            )
    print(
        json.dumps(
            {
                "pyav": av.__version__,
                "cpus": os.cpu_count(),
                "load": os.getloadavg(),
                "python": platform.python_version(),
                "results": results,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
