"""Scripted LLM writers the unit and integration tests share (for ``scripted_llm``): they answer
the prompts of ``introspect``'s event form and of ``recommend`` the way a capable model would,
so a test's records do not depend on what the embedded SmolLM2 can write."""

from __future__ import annotations

import json
import re
from typing import Any

from gen.schemas.recommend import CATEGORIES


def event_writer(messages: list[dict[str, str]], seed: int) -> str:
    """Rewrites a moment about as long as the right answer (the length rule holds)."""
    req = messages[-1]["content"]
    if m := re.search(
        r'Rewrite this moment as a wrong answer in the same style: "\d+m:\d+s \| (.*)"$', req
    ):
        size = len(re.search(r'Right answer: "(.*)"', req)[1])
        words, text = m[1].replace("The wearer ", "").rstrip(".").split(), ""
        for w in words * 3:
            if len(text) + len(w) + 2 > size:
                break
            text = f"{text} {w}".strip()
        while text.split()[-1].lower() in (
            "a",
            "an",
            "the",
            "of",
            "at",
            "to",
            "in",
            "on",
            "with",
            "and",
            "by",
        ):
            text = text.rsplit(" ", 1)[0]
        return json.dumps({"text": text[:1].upper() + text[1:] + "."})
    if "Rewrite this statement" in req:
        return json.dumps(
            {"text": req.rsplit('without changing what it says: "', 1)[1].rstrip('"')}
        )
    raise AssertionError(req[:200])


def writer(faults: dict[str, Any] | None = None) -> Any:
    """Global: a summary and one request per category built from the clip's nouns (plus planted
    faults); rerank: the given order, nothing removed."""
    faults = faults or {}

    def reply(messages: list[dict[str, str]], seed: int) -> str:
        req = messages[-1]["content"]
        if "Candidates, numbered:" in req:
            texts = re.findall(
                r"^(\d+)\. (?:\[[^\]]*\] )?(.*)$", req.rsplit("Candidates, numbered:", 1)[1], re.M
            )
            dup = (
                (lambda i: 1 if int(i) > 1 else None)
                if faults.get("all_duplicates")
                else (lambda i: None)
            )
            return json.dumps(
                {
                    "ranking": [
                        {"id": int(i), "text": t, "duplicate_of": dup(i), "grounded": True}
                        for i, t in texts
                    ],
                    "reason": "in the given order",
                }
            )
        seen = [ln.split(" | ", 1)[1] for ln in req.splitlines() if re.match(r"^\d+m:\d+s \| ", ln)]
        words = [
            w
            for ln in seen
            for w in re.findall(r"[a-z]{4,}", ln.lower())
            if w not in ("wearer", "with", "into")
        ]
        out: dict[str, Any] = {
            "summary": "The wearer " + seen[0].split(" ", 2)[-1].rstrip(".") + " and carries on."
        }
        for j, cat in enumerate(CATEGORIES):
            out[cat] = [f"Tell me something useful about the {words[j % len(words)]} here."]
        if faults.get("ungrounded"):
            out = {
                **out,
                **{cat: ["Tell me a joke about penguins."] for cat in list(CATEGORIES)[:7]},
            }
        return json.dumps(out)

    return reply
