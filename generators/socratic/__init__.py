"""Socratic captions and transcripts of videos (WAGIBench §2.4 and appendix G.3): ``gen socratic``.

Each video is cut into ``clip_seconds`` clips (the last one shorter). Of each clip,
``frames_per_clip`` frames are sampled evenly, downscaled to ``max_side`` and sent as image parts
of an OpenAI-compatible chat request to two captioning stages, ``caption_a`` and ``caption_b``
(WAGIBench: Qwen2.5-VL-72B and InternVL2.5-78B-MPO; here any two vision-language servers, set
with ``stages.<stage>.llm.*``), each answering the seven steps of the prompt as JSON. A text-only
``merge`` stage keeps what both captions say and lists what it dropped; a merge whose content
words are mostly in neither caption (``max_novel``), or that fails the shared text gates, is
regenerated and in the end rejected. Speech comes from an OpenAI-compatible
``/audio/transcriptions`` server (``transcribe=true``) or a sidecar beside the video
(``<stem>.srt`` or ``.vtt``).

Outputs: ``socratic.jsonl`` (one record per clip), ``observations.jsonl`` (the recordings as
``history`` reads them: one per clip, or per video, or per context window of the JSONL list; the
world state is the merged captions of the clips in it, concatenated) and ``timelines.jsonl`` (a
video's merged captions as a JSONL timeline ``tom`` and ``candidates`` read).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gen.engine.manifest import atomic_write
from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.engine.stages import StageConfig, StagesConfig
from gen.errors import InputError, MissingInputError
from gen.generators.socratic.video import (
    VIDEO_SUFFIXES,
    Frame,
    VideoError,
    VideoInfo,
    audio_wav,
    frames,
    probe,
    read_sidecar,
    require_av,
    sidecar,
)
from gen.llm.attempts import AttemptFailure, retry
from gen.llm.http import ServerError
from gen.llm.speech import SpeechConfig, Transcriber
from gen.paths import input_file, inside
from gen.readers import iter_jsonl, validated
from gen.schemas import Reject
from gen.schemas.distractors import ContextWindow, Goal
from gen.schemas.history import Observation
from gen.schemas.socratic import Caption, MergeDraft, SocraticRecord, TranscriptLine
from gen.text.gates import Gates, Language, content_lemmas, count_key

NAME = "socratic"
CAPTION_STAGES = ("caption_a", "caption_b")


class SocraticStages(StagesConfig):
    caption_a: StageConfig = Field(default_factory=StageConfig)
    """The first captioning model, a vision-language server (WAGIBench: Qwen2.5-VL-72B)."""
    caption_b: StageConfig = Field(default_factory=StageConfig)
    """The second captioning model (WAGIBench: InternVL2.5-78B-MPO)."""
    merge: StageConfig = Field(default_factory=StageConfig)
    """The text-only merge of the two captions (WAGIBench: DeepSeek-R1-Distill-Llama-70B)."""


class SocraticConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """Clips to caption from the start of the input (null: every clip of every video)."""
    clip_seconds: float = Field(10.0, gt=0, le=3600)
    """Clip length in seconds (WAGIBench: 10); a video's last clip is shorter."""
    frames_per_clip: int = Field(8, ge=1, le=64)
    """Frames sampled evenly from each clip and sent to each captioning model."""
    max_side: int = Field(448, ge=16, le=4096)
    """Frames are downscaled so that their longer side is at most this many pixels."""
    image_format: Literal["jpeg", "png"] = "jpeg"
    """How frames are encoded in the requests' data URLs."""
    jpeg_quality: int = Field(85, ge=10, le=100)
    """JPEG quality of the frames."""
    observations: Literal["clip", "video"] = "clip"
    """What one recording of observations.jsonl is when the input names no context windows: each
    clip, or each whole video."""
    participant: str = Field("wearer", min_length=1)
    """The participant of a video the JSONL list gives none for."""
    environment: str = Field("unknown", min_length=1)
    """The environment of a video the JSONL list gives none for."""
    transcribe: bool = False
    """Transcribe each clip's audio on the speech server (else a sidecar .srt/.vtt, if any)."""
    speech: SpeechConfig = Field(default_factory=SpeechConfig)
    """The transcription server (``speech.base_url``, ``speech.model``…)."""
    max_words: int = Field(200, ge=20, le=2000)
    """Word budget of a caption and of the merge (WAGIBench: 200)."""
    caption_tokens: int = Field(768, ge=64)
    """Completion cap of a captioning call."""
    merge_tokens: int = Field(512, ge=64)
    """Completion cap of the merge call."""
    max_novel: float = Field(0.34, ge=0, le=1)
    """Overlap check: the largest share of the merge's content words found in neither caption."""
    attempts: int = Field(3, ge=1, le=10)
    """Generations per stage (fresh seed) when the output fails the checks."""
    language: Language = "en"
    """The language captions and merges must be in (the text gates' language check)."""
    stages: SocraticStages = Field(default_factory=SocraticStages)
    """A model per stage: ``stages.<caption_a|caption_b|merge>.llm=<preset or fields>``."""


# --------------------------------------------------------------------------- input


class VideoRow(BaseModel):
    """One line of a JSONL list of videos."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    """The video, relative to the list's folder."""
    id: str | None = Field(None, min_length=1, max_length=200)
    """The video's id (default: its file name without suffix)."""
    context_windows: list[ContextWindow] | None = None
    """Each window (seconds) is one recording in observations.jsonl."""
    participant: str | None = None
    environment: str | None = None
    script: str | None = None
    scenario: str | None = None
    longitudinal: bool = False
    recorded_at: dt.datetime | None = None
    structured_goal: Goal | None = None
    transcript: str | None = None
    """A sidecar transcript (.srt or .vtt), relative to the list's folder."""

    @model_validator(mode="after")
    def _windows(self) -> VideoRow:
        for w in self.context_windows or []:
            if w.start_s is None or w.end_s is None or w.end_s <= w.start_s or w.start_s < 0:
                raise ValueError("context_windows: each needs 0 <= start_s < end_s")
        return self


@dataclass
class Video:
    id: str
    path: Path
    row: VideoRow | None = None
    info: VideoInfo | None = None
    error: VideoError | None = None
    transcript_file: Path | None = None
    lines: list[TranscriptLine] | None = None


@dataclass
class Unit:
    """One index of the run: a clip, or a video that could not be read (clip -1)."""

    video: Video
    clip: int
    start: float = 0.0
    end: float = 0.0


@dataclass
class Input:
    videos: list[Video]
    units: list[Unit]
    source: Path


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_SUFFIXES


def read_list(path: Path) -> list[Video]:
    """A JSONL list of videos; a bad row stops the read naming ``file:line: field: reason``."""
    videos = []
    for lineno, raw in iter_jsonl(path):
        where = f"{path}:{lineno}"
        row = validated(VideoRow, raw, where)
        file = inside(path.parent, row.path, what=f"{where}: path")
        if not file.exists():
            raise MissingInputError(f"{where}: path: no such file: {file}")
        input_file(file, f"{where}: path", bounded=False)
        extra = (
            inside(path.parent, row.transcript, what=f"{where}: transcript")
            if row.transcript
            else None
        )
        if extra is not None and not extra.is_file():
            raise MissingInputError(f"{where}: transcript: no such file: {extra}")
        videos.append(Video(row.id or file.stem, file, row, transcript_file=extra))
    if not videos:
        raise InputError(f"{path}: the list of videos is empty")
    return videos


def read_videos(path: Path) -> list[Video]:
    """The videos of ``input=``: a video file, a folder of videos (by suffix, sorted by name), or
    a JSONL list; ids must be unique."""
    if path.is_dir():
        videos = [Video(p.stem, p) for p in sorted(path.iterdir()) if p.is_file() and is_video(p)]
        if not videos:
            raise InputError(
                f"input: {path} holds no video ({', '.join(VIDEO_SUFFIXES)}) to caption"
            )
    elif path.suffix.lower() == ".jsonl":
        videos = read_list(path)
    else:
        input_file(path, "input", bounded=False)
        videos = [Video(path.stem, path)]
    seen: dict[str, Path] = {}
    for v in videos:
        if v.id in seen:
            raise InputError(f"input: video id {v.id!r} is both {seen[v.id]} and {v.path}")
        seen[v.id] = v.path
        if v.transcript_file is None:
            v.transcript_file = sidecar(v.path)
    return videos


def clip_bounds(duration: float, clip_seconds: float) -> list[tuple[float, float]]:
    """[start, end) of each clip of a video: ``clip_seconds`` each, the last one shorter."""
    count = max(1, math.ceil(duration / clip_seconds - 1e-9))
    return [
        (round(k * clip_seconds, 6), round(min(duration, (k + 1) * clip_seconds), 6))
        for k in range(count)
    ]


def plan(cfg: SocraticConfig) -> Plan:
    """One index per clip of every readable video, and one per video that cannot be read (its
    reject). PyAV is needed before anything is read."""
    require_av()
    if cfg.input is None:
        raise InputError("input= is required: a video, a folder of videos or a JSONL list of them")
    path = Path(cfg.input).expanduser()
    if not path.exists():
        raise MissingInputError(f"input: no such file or folder: {path}")
    videos = read_videos(path)
    units: list[Unit] = []
    for v in videos:
        try:
            v.info = probe(v.path)
        except VideoError as e:
            v.error = e
            units.append(Unit(v, -1))
            continue
        if v.transcript_file is not None and not cfg.transcribe:
            v.lines = read_sidecar(v.transcript_file)
        units += [
            Unit(v, k, a, b)
            for k, (a, b) in enumerate(clip_bounds(v.info.duration, cfg.clip_seconds))
        ]
    n = len(units) if cfg.n is None else min(cfg.n, len(units))
    return Plan(n, Input(videos, units, path))


# --------------------------------------------------------------------------- prompts and checks


def caption_messages(
    ctx: RunContext, cfg: SocraticConfig, unit: Unit, shots: list[Frame]
) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The captioning prompt as text messages (what the gates compare against) and as the
    request's messages: the user turn's text followed by one image part per frame."""
    text = ctx.prompts.render(
        "socratic/caption.jinja",
        frames=len(shots),
        start=unit.start,
        end=unit.end,
        max_words=cfg.max_words,
    )
    request: list[dict[str, Any]] = [dict(m) for m in text]
    last = request[-1]
    last["content"] = [
        {"type": "text", "text": last["content"]},
        *({"type": "image_url", "image_url": {"url": f.data_url()}} for f in shots),
    ]
    return text, request


def novel_share(merged: str, a: Caption, b: Caption) -> tuple[float, list[str]]:
    """The share of the merge's content words (lemmas) found in neither caption, and those
    words: the overlap check of a merge that adds facts."""
    words = content_lemmas(merged)
    if not words:
        return 0.0, []
    known = content_lemmas(a.as_text()) | content_lemmas(b.as_text())
    new = sorted(words - known)
    return len(new) / len(words), new


def check_caption(gates: Gates, stage: str, cap: Caption) -> Caption:
    for name, value in cap:
        if value and (fail := gates.check(value, "prose")) is not None:
            raise AttemptFailure(
                stage, fail.gate, f"{name}: {fail.detail}", counts=[fail.key(stage)]
            )
    return cap


def check_merge(
    gates: Gates, cfg: SocraticConfig, a: Caption, b: Caption, draft: MergeDraft
) -> tuple[MergeDraft, float]:
    if (fail := gates.check(draft.merged, "prose")) is not None:
        raise AttemptFailure(
            "merge", fail.gate, f"merged: {fail.detail}", counts=[fail.key("merge")]
        )
    share, new = novel_share(draft.merged, a, b)
    if share > cfg.max_novel:
        raise AttemptFailure(
            "merge",
            "adds_facts",
            f"{share:.0%} of the merged caption's content words are in neither caption "
            f"(max_novel={cfg.max_novel:g}): {', '.join(new[:12])}",
            counts=[count_key("merge", "adds_facts")],
        )
    return draft, share


# --------------------------------------------------------------------------- one clip


@dataclass
class Run:
    ctx: RunContext
    cfg: SocraticConfig
    data: Input
    transcriber: Transcriber | None = None
    frames_decoded: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def reject(
    ctx: RunContext,
    i: int,
    unit: Unit,
    stage: str,
    reason: str,
    detail: str,
    raw: str | None = None,
) -> Reject:
    where = unit.video.id if unit.clip < 0 else f"{unit.video.id} {unit.start:g}-{unit.end:g} s"
    return Reject(
        record_id=ctx.record_id(i),
        index=i,
        stage=stage,
        reason=reason,
        detail=f"{where}: {detail}",
        raw=raw,
    )


def transcript_of(r: Run, unit: Unit) -> tuple[list[TranscriptLine], str]:
    """The clip's utterances and where they came from (raises VideoError, ServerError)."""
    v = unit.video
    if r.transcriber is not None:
        assert v.info is not None
        if not v.info.has_audio:
            raise VideoError(
                "no_audio_track",
                f"{v.path.name} has no audio track to transcribe (transcribe=false, or give a "
                "sidecar .srt/.vtt)",
            )
        wav = audio_wav(v.path, unit.start, unit.end)
        assert wav is not None
        segs = r.transcriber.transcribe(wav, unit.end - unit.start)
        return [
            TranscriptLine(
                start=round(unit.start + s.start, 3),
                end=round(min(unit.end, unit.start + s.end), 3),
                text=s.text,
            )
            for s in segs
        ], "server"
    if v.lines is not None and v.transcript_file is not None:
        return [ln for ln in v.lines if ln.start < unit.end and ln.end > unit.start], (
            f"sidecar:{v.transcript_file.name}"
        )
    return [], "none"


def process(r: Run, i: int) -> SocraticRecord | Reject:
    ctx, cfg = r.ctx, r.cfg
    unit = r.data.units[i]
    v = unit.video
    if unit.clip < 0:
        assert v.error is not None
        return reject(ctx, i, unit, "decode", v.error.reason, v.error.detail)
    try:
        shots = frames(
            v.path,
            unit.start,
            unit.end,
            cfg.frames_per_clip,
            max_side=cfg.max_side,
            image_format=cfg.image_format,
            quality=cfg.jpeg_quality,
        )
    except VideoError as e:
        return reject(ctx, i, unit, "decode", e.reason, e.detail)
    with r.lock:
        r.frames_decoded += len(shots)
    try:
        lines, source = transcript_of(r, unit)
    except VideoError as e:
        return reject(ctx, i, unit, "transcribe", e.reason, e.detail)
    except ServerError as e:
        return reject(ctx, i, unit, "transcribe", "backend_error", str(e))

    text, request = caption_messages(ctx, cfg, unit, shots)
    gates = Gates(text, Caption, language=cfg.language)

    def caption(stage: str) -> Caption | AttemptFailure:
        llm = ctx.stage_llm(stage)

        def call(a: int) -> Caption:
            return llm.structured(
                cast(Any, request),
                Caption,
                seed=ctx.seed(i, stage, a),
                max_tokens=cfg.caption_tokens,
            )

        try:
            return retry(
                call,
                lambda c: check_caption(gates, stage, c),
                budget=cfg.attempts,
                stage=stage,
                count=ctx.count,
            )
        except AttemptFailure as e:
            return e

    got = ctx.map(caption, list(CAPTION_STAGES), workers=2)
    for stage, out in zip(CAPTION_STAGES, got, strict=True):
        if isinstance(out, AttemptFailure):
            return reject(ctx, i, unit, stage, out.reason, out.detail, out.raw)
    a, b = cast(list[Caption], got)

    messages = ctx.prompts.render(
        "socratic/merge.jinja",
        caption_a=a.as_text(),
        caption_b=b.as_text(),
        max_words=cfg.max_words,
    )
    merge_gates = Gates(
        messages, MergeDraft, language=cfg.language, keep_out=[a.as_text(), b.as_text()]
    )
    llm = ctx.stage_llm("merge")
    try:
        draft, share = retry(
            lambda k: llm.structured(
                messages, MergeDraft, seed=ctx.seed(i, "merge", k), max_tokens=cfg.merge_tokens
            ),
            lambda d: check_merge(merge_gates, cfg, a, b, d),
            budget=cfg.attempts,
            stage="merge",
            count=ctx.count,
        )
    except AttemptFailure as e:
        return reject(ctx, i, unit, "merge", e.reason, e.detail, e.raw)
    return SocraticRecord(
        record_id=ctx.record_id(i),
        video_id=v.id,
        clip=unit.clip,
        start=unit.start,
        end=unit.end,
        frames=len(shots),
        frame_size=(shots[0].width, shots[0].height),
        caption_a=a,
        caption_b=b,
        merged=draft.merged,
        dropped=[d for d in draft.dropped if d],
        novel_share=round(share, 4),
        transcript=lines,
        transcript_source=source,
    )


# --------------------------------------------------------------------------- the timelines


def recorded_at(v: Video) -> dt.datetime:
    """When a video was recorded: the list's ``recorded_at``, else the container's
    ``creation_time``, else the file's modification time (UTC, whole seconds)."""
    if v.row is not None and v.row.recorded_at is not None:
        t = v.row.recorded_at
        return t.astimezone(dt.UTC).replace(tzinfo=None) if t.tzinfo else t
    if v.info is not None and v.info.created is not None:
        return v.info.created
    mtime = dt.datetime.fromtimestamp(int(v.path.stat().st_mtime), dt.UTC)
    return mtime.replace(tzinfo=None)


def windows_of(
    v: Video, cfg: SocraticConfig, clips: list[SocraticRecord]
) -> list[tuple[str, float, float]]:
    """(client_tag, start, end) of each recording a video gives observations.jsonl."""
    if v.row is not None and v.row.context_windows:
        return [
            (f"{v.id}_w{j}", float(w.start_s or 0.0), float(w.end_s or 0.0))
            for j, w in enumerate(v.row.context_windows)
        ]
    if cfg.observations == "video":
        assert v.info is not None
        return [(v.id, 0.0, v.info.duration)]
    return [(f"{v.id}_c{c.clip:03d}", c.start, c.end) for c in clips]


def observations(
    v: Video, cfg: SocraticConfig, clips: list[SocraticRecord], count: Any
) -> Iterator[Observation]:
    """A video's recordings as ``history`` reads them: the merged captions of the clips in each
    window, concatenated (WAGIBench G.3), with the speech in it."""
    row = v.row
    start_time = recorded_at(v)
    for tag, lo, hi in windows_of(v, cfg, clips):
        inside_ = [c for c in clips if c.start < hi and c.end > lo]
        if not inside_:
            count("observations.window_without_caption")
            continue
        speech = [ln for c in inside_ for ln in c.transcript if ln.start < hi and ln.end > lo]
        script = (row.script if row else None) or tag
        yield Observation(
            client_tag=tag,
            scenario=(row.scenario if row else None) or script,
            participant=(row.participant if row else None) or cfg.participant,
            environment=(row.environment if row else None) or cfg.environment,
            script=script,
            longitudinal=row.longitudinal if row else False,
            recorded_at=start_time + dt.timedelta(seconds=lo),
            world_state=" ".join(c.merged for c in inside_),
            structured_goal=row.structured_goal if row else None,
            context_window=ContextWindow(start_s=lo, end_s=hi),
            transcription="\n".join(dict.fromkeys(ln.text for ln in speech)) or None,
        )


def timeline(v: Video, clips: list[SocraticRecord]) -> dict[str, Any]:
    """A video's merged captions as a JSONL timeline (``tom``, ``candidates``): one narration per
    clip at its start."""
    assert v.info is not None
    return {
        "clip_id": v.id,
        "vuid": v.id,
        "start_sec": 0.0,
        "duration": v.info.duration,
        "narrations": [{"t": c.start, "text": c.merged} for c in clips],
    }


# --------------------------------------------------------------------------- the generator


@generator(
    NAME,
    config=SocraticConfig,
    records=SocraticRecord,
    kind="socratic",
    plan=plan,
    uses=("llm", "text", "video"),
)
def socratic(cfg: SocraticConfig, ctx: RunContext) -> Iterator[SocraticRecord | Reject]:
    """Socratic captions of video clips by two vision-language models, merged; transcripts."""
    data: Input = ctx.plan.data
    r = Run(ctx, cfg, data)
    if cfg.transcribe:
        r.transcriber = Transcriber(cfg.speech, ctx.cache)
    for p in dict.fromkeys(u.video.path for u in data.units if u.video.error is None):
        ctx.record_input(p)
    kept: dict[str, list[SocraticRecord]] = defaultdict(list)
    try:
        for out in ctx.imap(lambda i: process(r, i), ctx.indices()):
            if isinstance(out, SocraticRecord):
                kept[out.video_id].append(out)
            yield out
    finally:
        if r.transcriber is not None:
            r.transcriber.close()
    obs_lines, timeline_lines = [], []
    for v in data.videos:
        if not kept.get(v.id):
            continue
        for o in observations(v, cfg, kept[v.id], ctx.count):
            obs_lines.append(json.dumps(o.model_dump(mode="json"), ensure_ascii=False))
        timeline_lines.append(json.dumps(timeline(v, kept[v.id]), ensure_ascii=False))
    atomic_write(ctx.out_dir / "observations.jsonl", "".join(x + "\n" for x in obs_lines))
    atomic_write(ctx.out_dir / "timelines.jsonl", "".join(x + "\n" for x in timeline_lines))
    ctx.extra[NAME] = {
        "videos": len(data.videos),
        "unreadable_videos": sum(v.error is not None for v in data.videos),
        "clips": len(data.units) - sum(v.error is not None for v in data.videos),
        "frames_decoded": r.frames_decoded,
        "observations": len(obs_lines),
    }
