"""``digital``: WAGIBench's digital context bundles (phone-app states per persona, moment and
cue).

A bundle's content id hashes the whole bundle minus ``bundle_id``, ``stats`` (derived) and every
``*_id`` key holding a 32-hex id (persona, event, message… ids are seed-derived).
"""

from __future__ import annotations

import re
from typing import Any

from gen.kinds import Kind
from gen.schemas.digital import DigitalBundle

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_TEXT_KEYS = ("title", "content", "query", "name", "topic")


def strip_ids(obj: Any) -> Any:
    """A digital bundle without its seed-derived parts (32-hex ``*_id`` values, ``bundle_id``,
    ``stats``)."""
    if isinstance(obj, dict):
        return {
            k: strip_ids(v)
            for k, v in obj.items()
            if not (
                k in ("bundle_id", "stats")
                or (k.endswith("_id") and isinstance(v, str) and _HEX32.match(v))
            )
        }
    if isinstance(obj, list):
        return [strip_ids(v) for v in obj]
    return obj


def _texts(obj: Any) -> list[str]:
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in _TEXT_KEYS and isinstance(v, str):
                out.append(v)
            elif isinstance(v, dict | list) and not k.startswith("key_"):
                out += _texts(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _texts(v)
    return out


class Digital(Kind):
    def identity(self, record: dict[str, Any]) -> dict[str, Any]:
        return strip_ids(record)

    def text(self, record: dict[str, Any]) -> str:
        """Its cue, persona and item texts."""
        p = record.get("main_persona") or {}
        cue = (record.get("cue") or {}).get("cue") or "no cue"
        parts = [cue, f"{p.get('name', '')}, {p.get('occupation', '')}, {p.get('home_city', '')}"]
        for app in sorted(record.get("apps") or {}):
            texts = _texts(record["apps"][app])[:6]
            parts.append(f"{app}: " + "; ".join(texts))
        return "\n".join(parts)

    def question_type(self, record: dict[str, Any]) -> str:
        cue = record.get("cue")
        return f"cue:{cue['app']}" if cue else "uncued"

    def source_id(self, record: dict[str, Any]) -> str:
        return str(record.get("bundle_id") or "")

    def columns(self) -> dict[str, Any]:
        import polars as pl

        return {
            "current_datetime": pl.String,
            "cue_id": pl.String,
            "cue_app": pl.String,
            "cue": pl.String,
            "main_persona": pl.String,
            "related_personas": pl.List(pl.String),
            "apps": pl.List(pl.String),
            "chars_total": pl.Int64,
        }

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        cue = record.get("cue") or {}
        stats = record.get("stats") or {}
        return {
            "current_datetime": record.get("current_datetime"),
            "cue_id": cue.get("cue_id"),
            "cue_app": cue.get("app"),
            "cue": cue.get("cue"),
            "main_persona": (record.get("main_persona") or {}).get("name"),
            "related_personas": [
                (r.get("persona") or {}).get("name") for r in record.get("related_personas") or []
            ],
            "apps": sorted(record.get("apps") or {}),
            "chars_total": stats.get("chars_total"),
        }

    def column_docs(self) -> dict[str, str]:
        return {
            "current_datetime": "The bundle's current date and time.",
            "cue_id": "The digital cue's id; null for an uncued bundle.",
            "cue_app": "The app the cue is in.",
            "cue": "The cue's text.",
            "main_persona": "The name of the bundle's main persona.",
            "related_personas": "Names of the five related personas.",
            "apps": "The apps the bundle has states for.",
            "chars_total": "Characters of the rendered bundle.",
        }


DIGITAL = Digital(
    name="digital",
    record=DigitalBundle,
    files=("digital.jsonl",),
    source_format="digital_bundle",
    view="digital",
    formats=("wagibench",),
    noun="a digital bundle",
    help="digital (WAGIBench's Digital Context Generator): phone-app states per sampled "
    "persona, moment and cue; code draws the skeleton and an LLM writes the words. Bundles have "
    "no answer.",
)
KINDS = (DIGITAL,)
