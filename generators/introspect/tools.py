"""Tool Selection (EgoIntrospect §4.3.1, appendices A.3 and H.1.1), from ``RequestSegment``
lines and a tool universe (``tools=``, a ``ToolUniverse`` YAML or JSON file).

Tool names are normalised first (H.1.1 stage 2): a raw name matches a canonical tool or one of its
aliases when they read the same (case, spaces, hyphens and underscores ignored); a name that
matches none is refused, never guessed. The candidate set is every canonical tool, in the
universe's order, read ``name in words: description``, plus "No tool needed"; the question is
multi-select. Hierarchical correctness:
a prediction is right when it holds every required tool and otherwise only helpful ones; with no
required tool, "No tool needed" or only helpful tools; with neither, "No tool needed" alone.
:func:`~gen.formats.mcq.correct`, :func:`~gen.formats.mcq.required_recall` and
:func:`~gen.formats.mcq.distractor_rate`
(in ``gen.formats.mcq``: ``evaluate`` scores a Tool Selection bank with them) score predictions so.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gen.formats.mcq import NO_TOOL, correct, distractor_rate, required_recall
from gen.generators.introspect.common import Built, Draft, Refusal, clip_text
from gen.schemas.introspect import RequestSegment, ToolUniverse

if TYPE_CHECKING:
    from gen.generators.introspect import IntrospectConfig

__all__ = [
    "NO_TOOL",
    "build",
    "correct",
    "distractor_rate",
    "normaliser",
    "required_recall",
    "tool_key",
]


def tool_key(name: str) -> str:
    """A tool name as compared: lower case, runs of spaces, hyphens, dots and underscores as one
    ``_``."""
    return re.sub(r"[\s\-_.]+", "_", name.strip().lower()).strip("_")


def normaliser(universe: ToolUniverse) -> dict[str, str]:
    """Raw-name key -> canonical name (each tool's own name and its aliases). Raises ValueError when
    two tools claim the same name (an over-merge the maintainer has to resolve)."""
    out: dict[str, str] = {}
    for t in universe.tools:
        for raw in (t.name, *t.aliases):
            k = tool_key(raw)
            if k in out and out[k] != t.name:
                raise ValueError(f"tools: {raw!r} names both {out[k]!r} and {t.name!r}")
            out[k] = t.name
    if tool_key(NO_TOOL) in out:
        raise ValueError(f"tools: {NO_TOOL!r} is the set's own option, not a tool")
    return out


def build(
    requests: list[RequestSegment], universe: ToolUniverse, cfg: IntrospectConfig
) -> list[Built]:
    names = normaliser(universe)
    tools = [t.name for t in universe.tools] + [NO_TOOL]
    # the canonical name in words: an identifier would read as a template's field name
    options = [f"{t.name.replace('_', ' ')}: {t.description}" for t in universe.tools] + [NO_TOOL]
    out: list[Built] = []
    for r in requests:
        unknown = [x for x in (*r.required_tools, *r.helpful_tools) if tool_key(x) not in names]
        if unknown:
            out.append(
                Refusal(
                    r.request_id,
                    "normalise",
                    "unknown_tool",
                    f"{unknown[0]!r} matches no tool or alias of the universe",
                )
            )
            continue
        required = sorted({names[tool_key(x)] for x in r.required_tools}, key=tools.index)
        helpful = sorted(
            {names[tool_key(x)] for x in r.helpful_tools} - set(required), key=tools.index
        )
        no = tools.index(NO_TOOL)
        answers = [tools.index(x) for x in required]
        acceptable = sorted(
            {*answers, *(tools.index(x) for x in helpful)} | (set() if answers else {no})
        )
        answers = answers or [no]
        answer = answers[0]
        span = (max(0.0, r.start - cfg.pad), r.end + cfg.pad)
        context = clip_text(r.context, span, relative=True)
        out.append(
            Draft(
                "tool_selection",
                f'The user asked: "{r.request}". Which tools does the assistant need to answer it? '
                "Choose every one that is needed.",
                options,
                answer,
                r.request_id,
                r.participant or r.request_id,
                origins=[
                    "required" if i in answers else "acceptable" if i in acceptable else "other"
                    for i in range(len(options))
                ],
                visible={"context": context},
                privileged={
                    "required": required,
                    "helpful": helpful,
                    "expected_response": r.expected_response,
                    "raw_required": list(r.required_tools),
                    "raw_helpful": list(r.helpful_tools),
                },
                extra={
                    "answers": answers,
                    "acceptable": acceptable,
                    "window": {"start": span[0], "end": span[1]},
                },
            )
        )
    return out
