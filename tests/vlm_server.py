"""A stand-in vision-language and speech server on 127.0.0.1 for socratic's tests.

``POST /v1/chat/completions`` with image parts answers a seven-step caption that names the
frames' dominant colour (decoded from the request's images: what a VLM sees); without images it
answers the merge, keeping the two captions' shared summary (or, ``invent=true``, adding a fact
neither has). ``POST /v1/audio/transcriptions`` reads the uploaded WAV and says whether it holds a
tone. Every request is logged: its model, its image count and sizes and colours, its form fields.
"""

from __future__ import annotations

import base64
import io
import json
import re
import threading
import wave
from http.server import ThreadingHTTPServer
from typing import Any

from loopback import JSONHandler
from videos import COLOURS


def dominant(data: bytes) -> tuple[str, tuple[int, int]]:
    """The named colour nearest an image's mean, and its size."""
    from PIL import Image, ImageStat

    img = Image.open(io.BytesIO(data)).convert("RGB")
    mean = ImageStat.Stat(img).mean
    name = min(
        COLOURS, key=lambda c: sum((m - x) ** 2 for m, x in zip(mean, COLOURS[c], strict=False))
    )
    return name, img.size


def caption(colour: str, model: str) -> dict[str, str]:
    return {
        "scene": f"A room with {colour} walls seen from the wearer's eyes.",
        "spatial_relations": "A white square is in the middle of the view.",
        "objects": f"A white square on a {colour} wall.",
        "motion": "The white square moves from left to right.",
        "text": "A sign reads EXIT 7.",
        "details": f"Model {model} notes a faint shadow." if model.endswith("b") else "",
        "summary": f"A white square moves across a {colour} wall with an exit sign.",
    }


def merge(prompt: str, invent: bool) -> dict[str, Any]:
    summaries = re.findall(r"^summary: (.+)$", prompt, re.M)
    shadows = re.findall(r"^details: (.+)$", prompt, re.M)
    merged = summaries[0] if summaries else "Nothing shared."
    if invent:
        merged += " A golden retriever barks at a bicycle courier beside the orchestra."
    return {"merged": merged, "dropped": shadows}


class StandIn:
    """``with StandIn() as srv: srv.url, srv.chats, srv.uploads``."""

    def __init__(self, invent: bool = False, broken_caption: bool = False):
        self.invent, self.broken_caption = invent, broken_caption
        self.chats: list[dict[str, Any]] = []
        self.uploads: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server interface
                self._send(200, {"object": "list", "data": [{"id": "stand-in", "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.endswith("/audio/transcriptions"):
                    self._send(200, owner.transcribe(raw, self.headers.get("Content-Type", "")))
                else:
                    self._send(200, owner.chat(json.loads(raw)))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def chat(self, req: dict[str, Any]) -> dict[str, Any]:
        images, texts = [], []
        for m in req["messages"]:
            parts = m["content"] if isinstance(m["content"], list) else [m["content"]]
            for p in parts:
                if isinstance(p, str):
                    texts.append(p)
                elif p.get("type") == "image_url":
                    url = p["image_url"]["url"]
                    head, b64 = url.split(",", 1)
                    images.append((head, *dominant(base64.b64decode(b64))))
                else:
                    texts.append(p.get("text", ""))
        entry = {
            "model": req.get("model"),
            "images": len(images),
            "mimes": sorted({h for h, _, _ in images}),
            "colours": [c for _, c, _ in images],
            "sizes": [s for _, _, s in images],
            "text": "\n".join(texts),
        }
        with self._lock:
            self.chats.append(entry)
        if images:
            colour = max(set(entry["colours"]), key=entry["colours"].count)
            body: Any = caption(colour, str(req.get("model")))
            content = "not json" if self.broken_caption else json.dumps(body)
        else:
            content = json.dumps(merge(entry["text"], self.invent))
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "stand-in",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }

    def transcribe(self, raw: bytes, kind: str) -> dict[str, Any]:
        boundary = kind.split("boundary=", 1)[1].encode()
        fields: dict[str, str] = {}
        audio = b""
        for part in raw.split(b"--" + boundary):
            if b"\r\n\r\n" not in part:
                continue
            head, body = part.split(b"\r\n\r\n", 1)
            body = body.removesuffix(b"\r\n")
            name = re.search(rb'name="([^"]+)"', head)
            if name is None:
                continue
            if name.group(1) == b"file":
                audio = body
            else:
                fields[name.group(1).decode()] = body.decode()
        with wave.open(io.BytesIO(audio)) as w:
            rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
            frames = w.readframes(w.getnframes())
        import numpy as np

        samples = np.frombuffer(frames, dtype=np.int16).astype(float)
        seconds = len(samples) / rate if rate else 0.0
        loud = bool(len(samples)) and float(np.sqrt(np.mean(samples**2))) > 1000
        with self._lock:
            self.uploads.append(
                {
                    "fields": fields,
                    "rate": rate,
                    "channels": channels,
                    "width": width,
                    "seconds": seconds,
                    "loud": loud,
                }
            )
        segs = [{"start": 0.0, "end": round(seconds, 3), "text": " a steady tone"}] if loud else []
        return {"text": " ".join(s["text"] for s in segs), "segments": segs}

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
