"""Socratic captions of video clips (WAGIBench §2.4, appendix G.3): what each captioning model
writes (:class:`Caption`, the seven steps of the prompt), what the merge writes
(:class:`MergeDraft`), and the record of one clip (:class:`SocraticRecord`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

CHARS = 2000
"""The longest step, merge or dropped item kept (checked by code, not in the JSON schema)."""


def _capped(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > CHARS:
        raise ValueError(f"at most {CHARS} characters, got {len(text)}")
    return text


# Patterns, not lengths: a JSON schema's maxLength becomes a grammar rule nested once per character
# in llama.cpp (2,000 levels crash its parser); the pattern keeps raw newlines, quotes and
# backslashes out of the JSON a grammar-constrained model writes, and the completion cap bounds
# the length.
Text = Annotated[str, Field(pattern=r'^[^\x00-\x1f"\\]*$'), AfterValidator(_capped)]
"""A step of a caption: may be blank (a clip without text shows none)."""
Said = Annotated[str, Field(pattern=r'^[^\x00-\x1f"\\]+$'), AfterValidator(_capped)]
"""A text that must say something."""


class Caption(BaseModel):
    """One model's caption of one clip, the seven steps of the prompt in their order."""

    model_config = ConfigDict(extra="ignore")

    scene: Text
    """Step 1: the primary setting and activity."""
    spatial_relations: Text
    """Step 2: where the key objects and people are relative to each other."""
    objects: Text
    """Step 3: the key objects and people, their colour, shape, texture."""
    motion: Text
    """Step 4: significant motion and actions."""
    text: Text
    """Step 5: text visible in the frames (signs, labels, screens)."""
    details: Text
    """Step 6: anything else that stands out."""
    summary: Said
    """Step 7: a concise summary of steps 1-6."""

    def as_text(self) -> str:
        """The caption as the merge reads it: one labelled line per step with text."""
        return "\n".join(f"{name}: {value}" for name, value in self if value)


class MergeDraft(BaseModel):
    """The merge of two captions: what both say, and what only one of them said."""

    merged: Said
    """One paragraph of what both captions say about the clip."""
    dropped: list[Text] = Field(default_factory=list)
    """What only one caption said, one short item each."""


class TranscriptLine(BaseModel):
    """One utterance, in seconds of the video."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    start: float = Field(ge=0)
    """When it starts, seconds of the video."""
    end: float = Field(ge=0)
    """When it ends, seconds of the video."""
    text: str
    """What was said."""


class SocraticRecord(BaseModel):
    """One clip of a video: both captions, their merge, what the merge dropped, the speech in it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    record_id: str
    """The record's id in the run (one per clip)."""
    video_id: str
    """The video's id (the JSONL list's ``id``, else the file name without its suffix)."""
    clip: int = Field(ge=0)
    """0-based clip index within the video."""
    start: float = Field(ge=0)
    """Clip start, seconds of the video."""
    end: float = Field(ge=0)
    """Clip end (the last clip of a video is shorter)."""
    frames: int = Field(ge=1)
    """Frames sent to each captioning model."""
    frame_size: tuple[int, int]
    """(width, height) of the frames as sent."""
    caption_a: Caption
    """The ``caption_a`` stage's caption of the clip's frames."""
    caption_b: Caption
    """The ``caption_b`` stage's caption of the clip's frames."""
    merged: str
    """What both captions say: the clip's Socratic context."""
    dropped: list[str]
    """What the merge left out because only one caption said it."""
    novel_share: float = Field(ge=0, le=1)
    """Share of the merged caption's content words found in neither caption (the overlap
    check)."""
    transcript: list[TranscriptLine] = Field(default_factory=list)
    """The utterances that overlap the clip."""
    transcript_source: str = "none"
    """Where the transcript came from: ``server``, ``sidecar:<file name>`` or ``none``."""
