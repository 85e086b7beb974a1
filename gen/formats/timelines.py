"""Narration timelines: the clips of Ego4D's ``narration.json``, EgoToM's CSVs and gen's JSONL
timelines, read into one shape (:class:`Clip` of timed :class:`Line` s).

``tom`` asks its questions about these clips; ``candidates`` cuts memory-recall items from them.
A malformed narration does not fail the read: it becomes one of its clip's ``problems`` (naming
file and line), and the generator rejects that clip. A file that cannot be read at all is an
:class:`~gen.errors.InputError`.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gen.errors import InputError, MissingInputError
from gen.formats.mcq import egotom_type
from gen.paths import input_file
from gen.readers import parse_json, read_json, read_text

InputFormat = Literal["ego4d", "egotom_csv", "jsonl"]


def parse_time(value: Any) -> float | None:
    """Seconds from a number or a timestamp string (``03m:18s``, ``3m18s``, ``03:18``,
    ``1:02:03``, ``198.5``, ``198s``); None when it is not one (or negative / not finite)."""
    if isinstance(value, bool):
        return None
    try:  # an integer too large for a float (400 digits) is no timestamp either
        sec = _seconds(value)
    except (OverflowError, ValueError):
        return None
    return sec if sec is not None and math.isfinite(sec) and sec >= 0 else None


def _seconds(value: Any) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    m = _TIME.match(value)
    if not m:
        return None
    g = m.groupdict()
    if g["m"] is not None:
        return int(g["m"]) * 60 + float(g["s"] or 0)
    if g["h2"] is not None:
        return int(g["h2"]) * 3600 + int(g["m2"]) * 60 + float(g["s2"])
    if g["m3"] is not None:
        return int(g["m3"]) * 60 + float(g["s3"])
    return float(g["sec"])


_TIME = re.compile(
    r"""^\s*(?:
        (?P<m>\d+)\s*m\s*:?\s*(?:(?P<s>\d+(?:\.\d+)?)\s*s)?       # 03m:18s  3m18s  3m
      | (?P<h2>\d+):(?P<m2>\d{1,2}):(?P<s2>\d{1,2}(?:\.\d+)?)     # 1:02:03
      | (?P<m3>\d+):(?P<s3>\d{1,2}(?:\.\d+)?)                     # 03:18
      | (?P<sec>\d+(?:\.\d+)?)\s*s?                              # 198  198.5  198s
    )\s*$""",
    re.X,
)


@dataclass(frozen=True)
class Line:
    t: float
    """Seconds from the clip start."""
    text: str
    speaker: Literal["C", "O", "?"]
    """``C`` the camera wearer, ``O`` someone else (``#O``, ``#X``…), ``?`` untagged."""


@dataclass
class Clip:
    clip_id: str
    vuid: str
    fmt: InputFormat
    source: str
    """Where it came from (file and position), for rejects."""
    lines: list[Line] = field(default_factory=list)
    summary: str = ""
    start_sec: float = 0.0
    """Clip start in seconds of the source video."""
    duration: float | None = None
    """Clip length in seconds; None when the input cannot tell (EgoToM CSV)."""
    problems: list[str] = field(default_factory=list)
    """Malformed lines, each naming file and line; a clip with problems is rejected at ``parse``."""


def fmt_time(sec: float) -> str:
    """``MMm:SSs`` as EgoToM prints narration times (whole seconds, floored)."""
    s = int(sec)
    return f"{s // 60:02d}m:{s % 60:02d}s"


def fmt_line(line: Line) -> str:
    """One narration in EgoToM's ``narrations_in_context`` form."""
    return f"    {fmt_time(line.t)} | {line.text}"


_TAG = re.compile(r"^.{0,2}?#[\s$]*([A-Za-z]+)")


def speaker_of(text: str) -> Literal["C", "O", "?"]:
    """Who a narration is about: ``#C C …`` (also ``#c c``, ``# C``, ``#CC``, ``$#C``),
    ``#O``/``#X`` (others), untagged ``C …``; anything else is ``?``."""
    m = _TAG.match(text)
    if m:
        word = m.group(1).lower()
        if word in ("unsure", "unknown", "summary"):
            return "?"
        return "C" if word[0] == "c" else "O"
    if re.match(r"^[Cc]\s", text):
        return "C"
    return "?"


def detect_format(path: Path) -> InputFormat:
    if path.is_dir():
        if any(egotom_type(p) for p in path.glob("*.csv")):
            return "egotom_csv"
        if (path / "narration.json").is_file():
            return "ego4d"
        raise InputError(f"input: {path} holds no EgoToM CSV or narration.json (set input_format=)")
    by_suffix: dict[str, InputFormat] = {".json": "ego4d", ".csv": "egotom_csv", ".jsonl": "jsonl"}
    suffix = path.suffix.lower()
    if suffix in by_suffix:
        return by_suffix[suffix]
    raise InputError(
        f"input: cannot tell the format of {path} from its name (set "
        "input_format=ego4d|egotom_csv|jsonl)"
    )


def input_files(path: Path, fmt: InputFormat) -> list[Path]:
    if not path.exists():
        raise MissingInputError(f"input: no such file or folder: {path}")
    if not path.is_dir():
        return [path]
    if fmt == "egotom_csv":
        files = sorted(p for p in path.glob("*.csv") if egotom_type(p))
    elif fmt == "ego4d":
        files = (
            [path / "narration.json"]
            if (path / "narration.json").is_file()
            else sorted(path.glob("*.json"))
        )
    else:
        files = sorted(path.glob("*.jsonl"))
    if not files:
        raise InputError(f"input: {path} holds no {fmt} file")
    return files


def _narration(text: Any, t: Any, where: str) -> tuple[Line | None, str | None]:
    """A parsed narration or the problem with it."""
    if not isinstance(text, str) or not text.strip():
        return None, f"{where}: empty or missing narration text"
    sec = parse_time(t)
    if sec is None:
        return None, f"{where}: bad timestamp {_short(t)}"
    text = " ".join(text.split())
    return Line(sec, text, speaker_of(text)), None


def _short(value: Any, limit: int = 60) -> str:
    """A value's repr, cut (a 400-digit timestamp is named, not copied)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _add_narration(clip: Clip, text: Any, t: Any, where: str) -> None:
    """Append the parsed narration to the clip's lines, or its problem to the clip's problems."""
    line, problem = _narration(text, t, where)
    if line is None:
        clip.problems.append(problem or where)
    else:
        clip.lines.append(line)


def read_ego4d(path: Path, passes: tuple[str, ...]) -> list[Clip]:
    """Ego4D ``narration.json``: video uid -> pass -> narrations + summaries. Each summary's
    [start_sec, end_sec) window is one clip (the 5-minute units narrators were given), id
    ``{vuid}~{pass}~{first}-{end}`` over the pass's time-sorted narrations, as EgoToM's cuid."""
    data = read_json(path)
    if isinstance(data, dict) and isinstance(data.get("videos"), dict):
        data = data["videos"]
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected Ego4D's layout, an object of video uid -> narration passes"
        )
    clips: list[Clip] = []
    for vuid, video in data.items():
        if not isinstance(video, dict):
            clips.append(
                Clip(
                    vuid,
                    vuid,
                    "ego4d",
                    f"{path}: {vuid}",
                    problems=[f"{path}: {vuid}: not an object"],
                )
            )
            continue
        for pname in passes:
            p = video.get(pname)
            if p is None:
                continue
            short = pname.removeprefix("narration_")
            where = f"{path}: {vuid}.{pname}"
            bad = (
                ["narrations", "summaries"]
                if not isinstance(p, dict)
                else [
                    k for k in ("narrations", "summaries") if not isinstance(p.get(k) or [], list)
                ]
            )
            if bad:
                clips.append(
                    Clip(
                        f"{vuid}~{short}",
                        vuid,
                        "ego4d",
                        where,
                        problems=[
                            f"{where}: not a narration pass ({' and '.join(bad)} must be "
                            f"{'lists' if len(bad) > 1 else 'a list'})"
                        ],
                    )
                )
                continue
            clips += _pass_clips(vuid, short, where, p)
    return clips


def _pass_clips(vuid: str, short: str, where: str, p: dict[str, Any]) -> list[Clip]:
    good: list[tuple[float, int, Line]] = []
    bad: list[tuple[int, str]] = []  # (position in the list, problem)
    for k, n in enumerate(p.get("narrations") or []):
        loc = f"{where}.narrations[{k}]"
        if not isinstance(n, dict):
            bad.append((k, f"{loc}: not an object"))
            continue
        line, problem = _narration(n.get("narration_text"), n.get("timestamp_sec"), loc)
        if line is None:
            bad.append((k, problem or loc))
        else:
            good.append((line.t, k, line))
    good.sort(key=lambda x: (x[0], x[1]))
    summaries = p.get("summaries") or []
    if not summaries and good:  # no summary to cut at: the whole pass is one clip
        summaries = [{"start_sec": 0.0, "end_sec": good[-1][0] + 1e-6, "summary_text": ""}]
    clips = []
    for j, s in enumerate(summaries):
        loc = f"{where}.summaries[{j}]"
        start = parse_time(s.get("start_sec")) if isinstance(s, dict) else None
        end = parse_time(s.get("end_sec")) if isinstance(s, dict) else None
        if start is None or end is None or end <= start:
            clips.append(
                Clip(
                    f"{vuid}~{short}~summary{j}",
                    vuid,
                    "ego4d",
                    loc,
                    problems=[f"{loc}: summary without a valid start_sec < end_sec"],
                )
            )
            continue
        idx = [i for i, (t, _, _) in enumerate(good) if start <= t < end]
        first, last = (idx[0], idx[-1] + 1) if idx else (0, 0)
        text = s.get("summary_text") if isinstance(s.get("summary_text"), str) else ""
        clip = Clip(
            f"{vuid}~{short}~{first}-{last}",
            vuid,
            "ego4d",
            loc,
            lines=[Line(good[i][0] - start, good[i][2].text, good[i][2].speaker) for i in idx],
            summary=re.sub(r"^#\s*summary\s*", "", text, flags=re.I).strip(),
            start_sec=start,
            duration=end - start,
        )
        # a malformed narration belongs to the clip its neighbours (in list order) fall in
        for k, problem in bad:
            near = [t for t, pos, _ in good if pos < k][-1:] or [
                t for t, pos, _ in good if pos > k
            ][:1]
            if near and start <= near[0] < end:
                clip.problems.append(problem)
        clips.append(clip)
    return clips


_CSV_LINE = re.compile(r"^\s*(?P<time>[^|]+?)\s*\|\s*(?P<text>.*?)\s*$")


def read_egotom_csvs(files: list[Path]) -> list[Clip]:
    """EgoToM CSVs: each row's ``narrations_in_context`` is the clip's timeline. The three
    question files share clips (same cuid, same context): a cuid is read once."""
    import polars as pl

    clips: dict[str, Clip] = {}
    for path in files:
        input_file(path)
        try:
            df = pl.read_csv(path, infer_schema_length=0)
        except Exception as e:  # noqa: BLE001 - polars raises several types
            raise InputError(f"{path}: cannot parse CSV ({str(e).splitlines()[0]})") from None
        missing = [
            c for c in ("cuid", "narrations_in_context", "clip_start_time") if c not in df.columns
        ]
        if missing:
            raise InputError(f"{path}: missing EgoToM column(s) {', '.join(missing)}")
        for r, row in enumerate(df.iter_rows(named=True)):
            where = f"{path}: row {r + 1}"
            cuid = (row.get("cuid") or "").strip() or f"{path.stem}:row{r + 1}"
            if cuid in clips:
                continue
            clip = Clip(cuid, (row.get("vuid") or cuid.split("~")[0]).strip(), "egotom_csv", where)
            start = parse_time(_float_text(row.get("clip_start_time")))
            if start is None:
                clip.problems.append(
                    f"{where}: bad clip_start_time {_short(row.get('clip_start_time'))}"
                )
            clip.start_sec = start or 0.0
            for k, raw in enumerate((row.get("narrations_in_context") or "").split("\n")):
                if not raw.strip():
                    continue
                m = _CSV_LINE.match(raw)
                loc = f"{where} (cuid {cuid}), narration line {k + 1}"
                if not m:
                    clip.problems.append(
                        f"{loc}: expected 'MMm:SSs | text', got {raw.strip()[:60]!r}"
                    )
                    continue
                _add_narration(clip, m.group("text"), m.group("time"), loc)
            clip.lines.sort(key=lambda x: x.t)
            clips[cuid] = clip
    return list(clips.values())


def _float_text(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def read_jsonl(path: Path) -> list[Clip]:
    """JSONL timelines: ``clip_id``, optional ``summary``/``vuid``/``start_sec``/``duration``,
    ``narrations: [{t, text}]`` (``t`` in seconds or ``MMm:SSs``). A line that is not a clip
    becomes a clip with a problem (rejected at ``parse``), not a failed run."""
    clips = []
    with io.StringIO(read_text(path), newline=None) as f:  # a file that is not UTF-8 fails whole
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = parse_json(raw, where)
            except InputError as e:
                clips.append(
                    Clip(
                        f"{path.stem}:{lineno}",
                        f"{path.stem}:{lineno}",
                        "jsonl",
                        where,
                        problems=[str(e)],
                    )
                )
                continue
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("clip_id"), str | int)
                or not isinstance(row.get("narrations"), list)
            ):
                cid = (
                    str(row.get("clip_id"))
                    if isinstance(row, dict) and row.get("clip_id")
                    else f"{path.stem}:{lineno}"
                )
                clips.append(
                    Clip(
                        cid,
                        cid,
                        "jsonl",
                        where,
                        problems=[f"{where}: a timeline needs clip_id and a narrations list"],
                    )
                )
                continue
            cid = str(row["clip_id"])
            summary = row.get("summary")
            clip = Clip(
                cid,
                str(row.get("vuid") or cid),
                "jsonl",
                where,
                summary=summary if isinstance(summary, str) else "",
            )
            start = parse_time(row.get("start_sec", 0.0))
            if start is None:
                clip.problems.append(f"{where}: bad start_sec {_short(row.get('start_sec'))}")
            clip.start_sec = start or 0.0
            for k, n in enumerate(row["narrations"]):
                loc = f"{where}: narrations[{k}]"
                if not isinstance(n, dict):
                    clip.problems.append(f"{loc}: not an object with t and text")
                    continue
                _add_narration(clip, n.get("text"), n.get("t"), loc)
            clip.lines.sort(key=lambda x: x.t)
            if "duration" in row:
                clip.duration = parse_time(row["duration"])
                if clip.duration is None:
                    clip.problems.append(f"{where}: bad duration {_short(row['duration'])}")
            elif clip.lines:  # the last narration bounds the clip from below
                clip.duration = clip.lines[-1].t
            clips.append(clip)
    return clips


def read_timelines(
    path: Path,
    fmt: InputFormat | Literal["auto"] = "auto",
    passes: tuple[str, ...] = ("narration_pass_1", "narration_pass_2"),
) -> list[Clip]:
    """Every clip of a file or folder, in input order (``passes``: the passes of Ego4D's
    ``narration.json`` to read); an InputError when it holds none."""
    fmt = detect_format(path) if fmt == "auto" else fmt
    files = input_files(path, fmt)
    if fmt == "ego4d":
        clips = [c for f in files for c in read_ego4d(f, passes)]
    elif fmt == "egotom_csv":
        clips = read_egotom_csvs(files)
    else:
        clips = [c for f in files for c in read_jsonl(f)]
    if not clips:
        raise InputError(f"input: no clips found in {path} (read as {fmt})")
    return clips
