"""Reading a judge's answer: the ``<score>`` tag (WAGIBench's lenient reading after a reasoning
block, or strictly), the reformatted action, the code signals. Pure functions, tested case by
case."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gen.llm import split_think
from gen.schemas.distractors import GOAL_TYPES, Goal
from gen.schemas.judge import Judgment

SCORES = {0: 0.0, 1: 0.5, 2: 1.0}
"""The judge's 0 / 1 / 2 (one token each) on the paper's 0 / 0.5 / 1 scale."""
_SCORE = re.compile(r"<score>(.*?)</score>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
_GOAL: TypeAdapter[Any] = TypeAdapter(Goal)


def parse_score(text: str) -> tuple[int | None, str | None]:
    """The score of a judge's reply, or why there is none.

    Exactly one ``<score>…</score>`` pair (tags in lower case, as the prompt shows them) holding
    ``0``, ``1`` or ``2``, spaces around it allowed; text outside the tag is allowed. Problems:
    ``no_score_tag``, ``several_score_tags`` (even when they agree: the reply is not the one
    score asked for), ``not_a_score`` (``2.0``, ``**2**``, ``3``, empty).
    """
    found = _SCORE.findall(text)
    if not found:
        return None, "no_score_tag"
    if len(found) > 1:
        return None, "several_score_tags"
    value = found[0].strip()
    if value not in ("0", "1", "2"):
        return None, "not_a_score"
    return int(value), None


_LOOSE_SCORE = re.compile(r"(?:<score>|</score>)([^<>]+)(?:</score>|<score>)", re.S)


def parse_score_lenient(text: str) -> tuple[int | None, str | None]:
    """The score of a judge's reply as WAGIBench's code reads it (``post_process_llm_outputs`` with
    ``think`` then ``score``, and ``float``): the reasoning set apart; then the first value between
    score tags (an unclosed or a stray tag too: the text before a lone ``</score>``, after a lone
    ``<score>``), or the whole answer; a number that is 0, 1 or 2 (``2.0`` too). Problems:
    ``unfinished_think`` (no answer after the reasoning), ``no_score_tag`` (no tag and not a
    number), ``not_a_score`` (a tag without 0, 1 or 2). Their code, given a reply without think
    tags, reads an empty answer; here the whole reply is the answer."""
    _, answer = split_think(text)
    if answer is None:
        return None, "unfinished_think"
    tagged = "<score>" in answer or "</score>" in answer
    if m := _LOOSE_SCORE.search(answer):
        value = m.group(1)
    elif "</score>" in answer:
        value = answer.split("</score>")[0]
    elif "<score>" in answer:
        value = answer.split("<score>")[-1]
    else:
        value = answer
    value = value.replace("<score>", "").replace("</score>", "").strip()
    try:
        number = float(value)
    except ValueError:
        return None, "not_a_score" if tagged else "no_score_tag"
    if number not in SCORES:
        return None, "not_a_score"
    return int(number), None


def judgment(raw: str, lenient: bool = True) -> Judgment:
    """A judge reply as a :class:`Judgment` (score, normalised score, followed, problem), read by
    :func:`parse_score_lenient` (WAGIBench's reading) or, ``lenient=False``, :func:`parse_score`."""
    score, problem = parse_score_lenient(raw) if lenient else parse_score(raw)
    return Judgment(
        score=score,
        normalised=None if score is None else SCORES[score],
        followed=score is not None,
        problem=problem,
        raw=raw,
    )


def as_action(value: Any) -> dict[str, Any] | None:
    """``value`` as a valid structured action of the 10 types (normalised), or None."""
    try:
        return _GOAL.validate_python(value).model_dump()
    except ValidationError:
        return None


def parse_reformat(text: str) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(action, problem, detail) of a reformat reply: exactly one ``<answer>`` tag holding one
    JSON object (a code fence inside is allowed) that is a valid action of the 10 types.
    Problems: ``no_answer_tag``, ``several_answer_tags``, ``not_json``, ``not_an_object``,
    ``unknown_type``, ``invalid_fields``; a reasoning block is set apart first
    (:func:`split_think`; ``unfinished_think`` when it never closed)."""
    _, answer = split_think(text)
    if answer is None:
        return None, "unfinished_think", None
    found = _ANSWER.findall(answer)
    if not found:
        return None, "no_answer_tag", None
    if len(found) > 1:
        return None, "several_answer_tags", None
    body = found[0].strip()
    if m := _FENCE.match(body):
        body = m.group(1)
    try:
        value = json.loads(body, parse_constant=_refuse)
    except (ValueError, RecursionError) as e:
        return None, "not_json", str(e).split("\n")[0][:200]
    if not isinstance(value, dict):
        return None, "not_an_object", type(value).__name__
    if value.get("type") not in GOAL_TYPES:
        return None, "unknown_type", repr(value.get("type"))[:100]
    try:
        return _GOAL.validate_python(value).model_dump(), None, None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"][1:]) or "action"
        return None, "invalid_fields", f"{where}: {err['msg']}"[:200]


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
