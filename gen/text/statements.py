"""Statements in EgoToM's surface forms, pure (no model): a goal (``To ….``), a belief
(``C believes that ….``) and an action statement (``C a, b, and c.``); the checks every such
statement passes (:func:`text_problem`, :func:`actions_problem`), and the one-shot answers of a
prompt a model must not copy (:func:`example_strings`). ``tom`` writes such statements,
``candidates`` writes and checks options in the same forms."""

from __future__ import annotations

import json
import re
from typing import Any

from gen.schemas.tom import ACTION_CHARS
from gen.text.gates import Gates, Kind, key
from gen.text.surface import infinitive

# --------------------------------------------------------------------------- surface forms


_SPACE = re.compile(r"\s+")
_EDGE = re.compile(r"^(?:\s|[\"'`*•·:;,-]|\d{1,2}[.)](?=\s))+|[\s\"'`*•·:;,.!-]+$")
_TAGGED_C = re.compile(r"^(?:#\s*c\s+)?c\s+", re.I)
_GOAL_PREFIX = re.compile(
    r"^(?:(?:c'?s\s+)?(?:future\s+|main\s+|overall\s+)?goal(?:\s+is)?\s*(?::|to\b)?\s*"
    r"|c\s+(?:wants|intends|plans|aims|tries|is\s+trying|is\s+going|needs|will\s+try)\s+(?=to\b)"
    r"|the\s+goal\s+is\s+(?=to\b))",
    re.I,
)
_BELIEF_PREFIX = re.compile(
    r"^(?:(?:c'?s\s+)?belief\s*:?\s*|c\s+(?:believes|thinks|knows|assumes|feels|expects|sees)\s*(?:that\b)?\s*"
    r"|that\s+)",
    re.I,
)
PLACEHOLDER = re.compile(
    r"^(?:n/?a|none|null|unknown|string|text|goal|belief|action|actions|tbd|\.\.\.|…)$", re.I
)


def _clean(text: str) -> str:
    return _EDGE.sub("", _SPACE.sub(" ", text)).strip()


def _lower_first(text: str) -> str:
    """Lower-case the first letter unless it starts an acronym or is C itself."""
    if len(text) > 1 and text[0].isupper() and text[1].islower() and not re.match(r"^C\b", text):
        return text[0].lower() + text[1:]
    return text


def _base_verb(word: str) -> str:
    """``bakes`` -> ``bake``, ``washes`` -> ``wash``, ``tidies`` -> ``tidy`` (third person to
    base)."""
    w = word.lower()
    if w.endswith("ies") and len(w) > 4:
        return word[:-3] + "y"
    if re.search(r"(?:ss|sh|ch|x|z|o)es$", w):
        return word[:-2]
    if w.endswith("s") and not w.endswith("ss") and len(w) > 3:
        return word[:-1]
    return word


def norm_goal(text: str) -> str:
    """``To <verb> ….``: strips "C's goal is", "C wants to", a leading "C"; adds "To"."""
    t = _clean(text)
    for _ in range(2):
        t = _clean(_GOAL_PREFIX.sub("", t))
    if re.match(r"^to\s", t, re.I):
        t = t[3:].strip()
    elif _TAGGED_C.match(t):  # "C bakes bread" -> "bake bread"
        rest = _TAGGED_C.sub("", t)
        verb, _, tail = rest.partition(" ")
        t = f"{_base_verb(verb)} {tail}".strip()
    if re.match(r"^[A-Za-z]+ing\b", t) and not re.match(
        r"^(?:bring|sing|ring|string|swing)\b", t, re.I
    ):
        t = (
            infinitive(t) or t
        )  # "Washing the dishes" -> "To wash the dishes."; else the form gate refuses it
    t = _lower_first(t)
    return f"To {t}." if t else ""


def norm_belief(text: str) -> str:
    """``C believes that ….``"""
    t = _clean(text)
    for _ in range(2):
        t = _clean(_BELIEF_PREFIX.sub("", t))
    t = _lower_first(t)
    return f"C believes that {t}." if t else ""


def norm_phrase(text: str) -> str:
    """One action as a bare verb phrase: no tag, no leading C / numbering / "then", no final
    stop."""
    t = _clean(text)
    t = _clean(re.sub(r"^(?:#\s*c\s+)?(?:c\s+)?(?:then\s+|and\s+|finally\s+)?", "", t, flags=re.I))
    return _lower_first(t)


def join_actions(phrases: list[str]) -> str:
    """``C a, b, and c.`` (EgoToM's action statement form)."""
    ps = [p for p in (norm_phrase(x) for x in phrases) if p]
    if not ps:
        return ""
    body = (
        ps[0]
        if len(ps) == 1
        else f"{ps[0]} and {ps[1]}"
        if len(ps) == 2
        else ", ".join(ps[:-1]) + f", and {ps[-1]}"
    )
    return f"C {body}."


def action_count(sentence: str) -> int:
    """How many actions an action statement lists ("C a, b, and c." has three)."""
    return len(
        [p for p in re.split(r",\s*(?:and\s+)?|\s+and\s+|\s+then\s+", sentence) if p.strip(" .")]
    )


def norm_sentence(text: str) -> str:
    """An action sentence: starts with ``C ``, one final stop."""
    t = _clean(text)
    t = _clean(re.sub(r"^(?:#\s*c\s+)?(?:c\s+)?", "", t, flags=re.I))
    return f"C {_lower_first(t)}." if t else ""


def text_problem(
    text: str, gates: Gates, kind: Kind, raw: str | None = None, cap: int | None = None
) -> tuple[str, str] | None:
    """Why a normalised statement is unusable, as (reason, detail): first the shared text gates
    (echoes of the prompt or its one-shot answers, truncation, the statement's form, repetition,
    language; the reason is the gate's name), then tom's own: empty or a placeholder. ``raw`` is
    the model's text before normalisation and ``cap`` its field's length cap."""
    failure = gates.check(text, kind, raw=raw, max_chars=cap)
    if failure is not None:
        return failure.gate, failure.detail
    core = re.sub(r"^(?:to|c believes that|c)\s+", "", key(text))
    if not core or PLACEHOLDER.match(core):
        return "empty_text", "empty or a placeholder"
    return None


def actions_problem(phrases: list[str], gates: Gates) -> tuple[str, str] | None:
    """Why a list of three raw next actions is unusable: one of them fails the gates as a verb
    phrase, or they repeat."""
    for p in phrases:
        why = text_problem(norm_phrase(p), gates, "phrase", raw=p, cap=ACTION_CHARS)
        if why:
            return why[0], f"action {p!r}: {why[1]}"
    if len({key(norm_phrase(p)) for p in phrases}) < 3:
        return "repeated_actions", f"next actions repeat: {phrases}"
    return None


def example_strings(messages: list[dict[str, str]]) -> set[str]:
    """Keys of every statement in the one-shot answers (the assistant turns), in their raw and
    normalised forms."""
    out: set[str] = set()

    def walk(obj: Any) -> None:
        if isinstance(obj, str):
            for form in (obj, norm_goal(obj), norm_belief(obj), norm_phrase(obj)):
                k = key(form)
                out.add(k)
                out.add(re.sub(r"^(?:to|c believes that|c)\s+", "", k))
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)
            if obj and all(isinstance(x, str) for x in obj):
                out.add(key(join_actions(obj)))

    for m in messages:
        if m["role"] == "assistant":
            try:
                walk(json.loads(m["content"]))
            except json.JSONDecodeError:
                walk(m["content"])
    out.discard("")
    return out
