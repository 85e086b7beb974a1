"""Speech to text through any OpenAI-compatible ``POST /audio/transcriptions`` server
(whisper.cpp's server, vLLM, a hosted API): a WAV file in, timed segments out, cached by the
audio's SHA-256 and the settings (never the audio itself).

WAGIBench transcribed with Whisper at beam size 5 and the temperature schedule 0, 0.2 … 1.0
(appendix G). OpenAI's API takes one ``temperature``; whisper.cpp's server also reads
``beam_size`` and ``temperature_inc`` (the schedule's step), which ``decoding=true`` sends;
a server that refuses unknown fields is used with ``decoding=false``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gen.llm.cache import Cache
from gen.llm.http import Endpoint, ServerError

WHISPER_TEMPERATURES = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
"""WAGIBench's temperature schedule (appendix G)."""


class SpeechConfig(BaseModel):
    """The transcription server (``speech.*``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    base_url: str = "http://127.0.0.1:8080/v1"
    """The server's API root; audio goes to ``{base_url}/audio/transcriptions``."""
    model: str = "whisper-1"
    """The model name the server expects (WAGIBench: Whisper base)."""
    api_key_env: str | None = None
    """The environment variable holding the API key (null: send none)."""
    timeout: float = Field(300.0, gt=0)
    """Wall-clock seconds of one transcription, its retries included."""
    max_retries: int = Field(2, ge=0, le=10)
    """Retries of one transcription after a retryable failure."""
    language: str | None = None
    """The spoken language (ISO 639-1), or null to let the model detect it."""
    beam_size: int = Field(5, ge=1, le=16)
    """Beam search width (WAGIBench: 5), sent as ``beam_size`` when ``decoding=true``."""
    temperatures: list[float] = Field(
        default_factory=lambda: list(WHISPER_TEMPERATURES), min_length=1
    )
    """The temperature schedule (WAGIBench: 0 to 1.0 in steps of 0.2): its first value is sent as
    ``temperature``, its step as ``temperature_inc`` when ``decoding=true``."""
    decoding: bool = True
    """Send ``beam_size`` and ``temperature_inc`` (whisper.cpp's server reads them); false for a
    server that refuses fields outside OpenAI's API."""

    @field_validator("temperatures")
    @classmethod
    def _schedule(cls, v: list[float]) -> list[float]:
        if any(not 0 <= t <= 1 for t in v) or v != sorted(v):
            raise ValueError("temperatures: rising values between 0 and 1")
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("base_url: an http:// or https:// URL")
        return v.rstrip("/")

    def fields(self) -> dict[str, str]:
        """The form fields of a request (besides the file)."""
        out = {
            "model": self.model,
            "response_format": "verbose_json",
            "temperature": f"{self.temperatures[0]:g}",
        }
        if self.language:
            out["language"] = self.language
        if self.decoding:
            out["beam_size"] = str(self.beam_size)
            step = self.temperatures[1] - self.temperatures[0] if len(self.temperatures) > 1 else 0
            out["temperature_inc"] = f"{step:g}"
        return out


class Segment(BaseModel):
    """One timed utterance, in seconds of the audio sent."""

    start: float
    end: float
    text: str


def multipart(fields: dict[str, str], audio: bytes, name: str = "audio.wav") -> tuple[bytes, str]:
    """A ``multipart/form-data`` body: the fields, then the audio as ``file``."""
    boundary = f"gen-{uuid.uuid4().hex}"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    parts.append(
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + audio
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def segments(data: dict[str, Any], length: float) -> list[Segment]:
    """A server's reply as segments: ``verbose_json``'s ``segments``, else its ``text`` as one
    segment over the whole audio (``length`` seconds).

    Raises:
        ServerError: the reply holds neither (retryable: another try may get one).
    """
    raw = data.get("segments")
    if isinstance(raw, list):
        out = []
        for s in raw:
            if not isinstance(s, dict) or not isinstance(s.get("text"), str):
                raise ServerError("a transcription segment without text", retry=True)
            try:
                start, end = float(s.get("start") or 0.0), float(s.get("end") or length)
            except (TypeError, ValueError):
                raise ServerError("a transcription segment without times", retry=True) from None
            if s["text"].strip():
                out.append(Segment(start=start, end=end, text=" ".join(s["text"].split())))
        return out
    text = data.get("text")
    if not isinstance(text, str):
        raise ServerError("the reply is not a transcription (no text, no segments)", retry=True)
    return [Segment(start=0.0, end=length, text=" ".join(text.split()))] if text.strip() else []


class Transcriber:
    """One transcription server: ``transcribe(wav, seconds) -> segments``, cached per audio."""

    def __init__(self, cfg: SpeechConfig, cache: Cache | None = None):
        self.cfg = cfg
        self.cache = cache
        self.endpoint = Endpoint(
            cfg.base_url,
            timeout=cfg.timeout,
            max_retries=cfg.max_retries,
            key_env=cfg.api_key_env,
            where="speech.timeout",
            option="speech",
        )

    def close(self) -> None:
        self.endpoint.close()

    def transcribe(self, wav: bytes, seconds: float) -> list[Segment]:
        """The segments of ``wav`` (``seconds`` long).

        Raises:
            ServerError: the server failed or answered something else, after its retries.
        """
        fields = self.cfg.fields()
        key = hashlib.sha256(
            json.dumps(
                {
                    "speech": self.cfg.base_url,
                    "fields": fields,
                    "audio": hashlib.sha256(wav).hexdigest(),
                },
                sort_keys=True,
            ).encode()
        ).hexdigest()
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            try:
                return [Segment.model_validate(s) for s in json.loads(hit)]
            except (ValueError, TypeError):
                pass  # a damaged row: asked again, and replaced
        out = self.endpoint.post(
            "/audio/transcriptions",
            {},
            cap=1 << 22,
            parse=lambda data: segments(data, seconds),
            form=multipart(fields, wav),
        )
        if self.cache is not None:
            self.cache.put(key, json.dumps([s.model_dump() for s in out]))
        return out
