"""What makes two bank items the same: canonical forms, content ids, identity per kind, and the
text near-duplicates are found on.

**Item ids are content hashes**: the first 32 hex digits of SHA-256 over the canonical JSON
(sorted keys, no spaces, UTF-8) of the item's *identity*, which leaves out every run-specific
field, so the same item has the same id on every machine and from every seed:

* MCQ kinds: ``question_type``, ``question``, the visible fields (as the candidate reads them,
  via :mod:`gen.mcq`), the options **sorted** and the answer **as text** — so a reshuffled copy
  is the same item. Each text is NFC-normalised with whitespace runs collapsed. Not hashed:
  the record's own ``item_id`` (seed-derived), ``group``, ``origins``, ``privileged`` and any
  generator-specific field.
* digital bundles: the whole bundle minus ``bundle_id``, ``stats`` (derived) and every
  ``*_id`` key holding a 32-hex id (persona, event, message… ids are seed-derived).
* context-tracking scenarios (the context benchmark's released schema): the visible channels
  only, as the candidate gets them (:data:`schemas.scenarios.VISIBLE_FIELDS`: the context image,
  the two camera frames, the user turns and both repair prompts), each normalised. Not hashed:
  ``scenario_id``, ``pair_id``, the skeleton (``target_context``, ``change_type``, domain,
  difficulty…), ``notes`` and the judge's ``gold`` lists — so one scenario re-labelled or
  re-numbered is the same item, and two that differ only in what the judge is told collide.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import Any

from gen.errors import InputError
from gen.mcq import EGOTOM_QUESTION, EGOTOM_TYPES, egotom_columns, from_record
from gen.schemas.mcq import MCQ, MCQRecord

KINDS = ("tom", "distractors", "digital", "mcq", "scenarios")
"""Item kinds, one parquet file each: ``mcq`` is for external MCQ banks (EgoToM CSVs, MCQ
records of other origin)."""
MCQ_KINDS = ("tom", "distractors", "mcq")
ITEM_ID = (
    "first 32 hex of SHA-256 of the canonical JSON of the item's identity (see "
    "generators/bank/identity.py): MCQ: question_type, question, visible fields, sorted options, "
    "answer text; digital: the bundle without seed-derived ids and stats; scenarios: the visible "
    "channels (context image, camera frames, user turns, repair prompts), not the gold or the "
    "target"
)
"""How ids are made, in words, for every lock."""
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_WS = re.compile(r"\s+")


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, non-ASCII as is (hashed as UTF-8)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def norm(text: str | None) -> str | None:
    """NFC, whitespace runs collapsed to one space, stripped."""
    if text is None:
        return None
    return _WS.sub(" ", unicodedata.normalize("NFC", text)).strip()


def content_id(identity: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(identity).encode("utf-8")).hexdigest()[:32]


def mcq_identity(q: MCQ) -> dict[str, Any]:
    """What an MCQ item's id hashes: what the candidate sees, order-free, plus the answer text."""
    return {
        "question_type": q.question_type,
        "question": norm(q.question),
        "visible": {k: norm(v) for k, v in sorted(q.visible.items())},
        "options": sorted(norm(o) or "" for o in q.options),
        "answer": norm(q.answer_text),
    }


def scenario_identity(record: dict[str, Any]) -> dict[str, Any]:
    """What a scenario's id hashes: its visible channels, normalised (absent ones as null)."""
    from gen.schemas.scenarios import VISIBLE_FIELDS

    def text(v: Any) -> Any:
        return norm(v) if isinstance(v, str) else v

    return {"scenario": {f: text(record.get(f)) for f in VISIBLE_FIELDS}}


SCENARIO_EMBED_ORDER = (
    "turn_2_user",
    "turn_2_image",
    "turn_1_user",
    "turn_1_image",
    "context_image",
)
"""A scenario's text for near-duplicates: turn 2 first (where scenarios of one setting differ;
the embedder truncates long inputs)."""


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


def egotom_row_mcq(row: dict[str, Any]) -> MCQ:
    """One EgoToM CSV row (all strings) as :class:`MCQ`, exactly as :func:`gen.mcq.read_egotom_csv`
    reads it."""
    q = next((t for t in EGOTOM_TYPES if f"gt_{t}" in row and f"{t}_choice_a" in row), None)
    if q is None:
        raise InputError("not an EgoToM row (no gt_goal/gt_belief/gt_actions column)")
    cols = [c for c in egotom_columns(q) if c.startswith(f"{q}_choice_")]
    options = [(row.get(c) or "").strip() for c in cols]
    truth = (row.get(f"gt_{q}") or "").strip()
    context = row.get("narrations_in_context") or ""
    return MCQ(
        item_id=f"{q}:{row.get('cuid')}",
        question_type=q,
        question=EGOTOM_QUESTION[q],
        options=options,
        answer=options.index(truth) if truth in options else None,
        context=context,
        group=row.get("cuid"),
        origins=["truth" if o == truth else "counterfactual" for o in options],
        visible={"narrations_in_context": context},
        privileged={f"gt_{q}": truth},
        line=0,
    )


def record_mcq(fmt: str, record: dict[str, Any]) -> MCQ:
    """An MCQ-kind record (``mcq_record`` JSON or an ``egotom_csv`` row) as :class:`MCQ`."""
    if fmt == "egotom_csv":
        return egotom_row_mcq(record)
    return from_record(MCQRecord.model_validate(record), 0)


def identity_of(fmt: str, record: dict[str, Any]) -> dict[str, Any]:
    if fmt == "digital_bundle":
        return strip_ids(record)
    if fmt == "scenario_record":
        return scenario_identity(record)
    return mcq_identity(record_mcq(fmt, record))


def item_id_of(fmt: str, record: dict[str, Any]) -> str:
    return content_id(identity_of(fmt, record))


def embed_text(fmt: str, record: dict[str, Any]) -> str:
    """The text near-duplicates are found on: question and sorted options before the context
    (the embedder truncates long inputs); for a bundle, its cue, persona and item texts."""
    if fmt == "digital_bundle":
        b = record
        p = b.get("main_persona") or {}
        cue = (b.get("cue") or {}).get("cue") or "no cue"
        parts = [cue, f"{p.get('name', '')}, {p.get('occupation', '')}, {p.get('home_city', '')}"]
        for app in sorted(b.get("apps") or {}):
            texts = _texts(b["apps"][app])[:6]
            parts.append(f"{app}: " + "; ".join(texts))
        return "\n".join(parts)
    if fmt == "scenario_record":
        return "\n".join(record[f] for f in SCENARIO_EMBED_ORDER if isinstance(record.get(f), str))
    q = record_mcq(fmt, record)
    ident = mcq_identity(q)
    return "\n".join(
        [ident["question"] or "", *ident["options"], *(v or "" for v in ident["visible"].values())]
    )


_TEXT_KEYS = ("title", "content", "query", "name", "topic")


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


def family(kind: str) -> str:
    """Near-duplicates are looked for within a family: ``digital`` bundles, ``scenarios``, or
    MCQs."""
    return kind if kind in ("digital", "scenarios") else "mcq"


def scenario_question_type(record: dict[str, Any]) -> str:
    """A scenario's question type in the bank: ``<change_type>/<target_context>``. Near-duplicates
    are looked for within one, so the two members of a contrast pair (one turn 1, a current and
    a prior target) are not taken for copies of each other."""
    return f"{record.get('change_type')}/{record.get('target_context')}"
