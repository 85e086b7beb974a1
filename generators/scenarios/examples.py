"""The one-shot examples the scenario prompts show (the benchmark's worked scenarios) and the specs
the prompts read; what a draft may not echo of them."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gen.contextbench.rules import (
    Problem,
    key,
    shingles,
)
from gen.generators.scenarios.skeleton import Skeleton, complexity_of
from gen.paths import PROMPTS
from gen.schemas.scenarios import (
    GOLD_FIELDS,
)

if TYPE_CHECKING:
    pass


EXAMPLES = "scenarios/examples.json"

# ---------------------------------------------------------------------- one-shot examples and specs


@lru_cache(maxsize=4)
def _examples(path: str) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(Path(path).read_text(encoding="utf-8"))["examples"])


def examples() -> tuple[dict[str, Any], ...]:
    """The project's worked scenarios (``prompts/scenarios/examples.json``)."""
    return _examples(str(PROMPTS / EXAMPLES))


def example_for(sk: Skeleton) -> dict[str, Any]:
    """The one-shot example a scenario's prompts show: the contrast pair for a pair, the
    clarify / abstain example for those targets, else the example of its shift type."""
    exs = examples()
    if sk.pair_id is not None:
        return next(e for e in exs if e.get("subset") == "contrast")
    if sk.target_context in ("clarify", "abstain"):
        return next(e for e in exs if e["target_context"] == sk.target_context)
    return next(
        e
        for e in exs
        if e["change_type"] == sk.change_type
        and not e.get("subset")
        and e["target_context"] in ("current", "prior")
    )


def example_skeleton(ex: dict[str, Any]) -> Skeleton:
    subset = ex.get("subset", "bank")
    return Skeleton(
        "sc-00" if subset == "bank" else "adv-00",
        subset,
        "pair-00" if subset == "contrast" else None,
        ex["change_type"],
        ex["target_context"],
        ex["activity_domain"],
        complexity_of(ex["change_type"], ex["target_context"], "easy", subset),
        "easy",
        ex["time_gap_bucket"],
    )


def situations_of(sk: Skeleton, sit: dict[str, Any]) -> dict[str, Any]:
    """Gold lists and their categories from a situations draft (code decides which list is
    which)."""

    def items(x: dict[str, Any]) -> list[str]:
        return list(
            dict.fromkeys(t.strip() for t in [x["name"], *x["technique"], *x["state"]] if t.strip())
        )

    def cats(x: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": x["name"].strip(),
            "technique": [t.strip() for t in x["technique"]],
            "state": [t.strip() for t in x["state"]],
        }

    gold: dict[str, list[str]] = {k: [] for k in GOLD_FIELDS}
    categories: dict[str, dict[str, Any]] = {}
    gold["prior_answers"] = items(sit["earlier"])
    categories["prior_answers"] = cats(sit["earlier"])
    if "now" in sit:
        gold["current_answers"] = items(sit["now"])
        categories["current_answers"] = cats(sit["now"])
    if "clarify_indicators" in sit:
        gold["clarify_indicators"] = list(
            dict.fromkeys(t.strip() for t in sit["clarify_indicators"] if t.strip())
        )
    if "abstain_indicators" in sit:
        gold["abstain_indicators"] = list(
            dict.fromkeys(t.strip() for t in sit["abstain_indicators"] if t.strip())
        )
    return {"gold": gold, "categories": categories}


def referent_names(sit: dict[str, Any]) -> list[str]:
    """The scenario's own object names (never in a camera text)."""
    return [
        n
        for n in [
            sit["earlier"]["name"],
            sit.get("now", {}).get("name"),
            *sit.get("candidates", []),
        ]
        if n
    ]


def spec(sk: Skeleton, sit: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """What the request macros read about a scenario (``prompts/scenarios/_requests.jinja``)."""
    s: dict[str, Any] = {
        "change_type": sk.change_type,
        "target_context": sk.target_context,
        "activity_domain": sk.activity_domain,
        "time_gap_bucket": sk.time_gap_bucket,
        "cross": sk.change_type == "cross_session_reference",
        "clarify": sk.target_context == "clarify",
        "abstain": sk.target_context == "abstain",
        "absent": sk.change_type == "absent_referent",
        "contrast": sk.subset == "contrast",
        "pair": sk.pair_id is not None,
        "distractor": sk.distractor,
        "in_hand": sk.change_type == "object_in_hand",
        "deictic": sk.deictic,
        "name_both": sk.subset == "contrast"
        or sk.change_type not in ("absent_referent", "cross_session_reference"),
    }
    if sit is not None:
        gold = situations_of(sk, sit)["gold"]
        s.update(
            sit=sit,
            names=referent_names(sit),
            forbidden=[*gold["current_answers"], *gold["prior_answers"]],
        )
    s.update(extra)
    return s


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def example_prompt(stage: str, ex: dict[str, Any]) -> dict[str, Any]:
    """A stage's one-shot: the example's own spec and its JSON answer."""
    sk = example_skeleton(ex)
    sit = ex["situations"]
    if stage == "situations":
        return {"s": spec(sk), "answer": dumps(sit)}
    if stage == "camera":
        return {"s": spec(sk, sit), "answer": dumps(ex["camera"])}
    if stage == "speech":
        return {"s": spec(sk, sit), "answer": dumps(ex["speech"])}
    return {
        "s": spec(sk, sit, turn_1_user=ex["speech"]["turn_1_user"]),
        "answer": dumps(ex["follow_up"]),
    }


@lru_cache(maxsize=1)
def example_shingles() -> dict[str, frozenset[tuple[str, ...]]]:
    """8-word runs of every example text, per stage (echo check)."""
    out: dict[str, set[tuple[str, ...]]] = {"camera": set(), "speech": set()}
    for ex in examples():
        for t in ex["camera"].values():
            out["camera"] |= shingles(t)
        for part in ("speech", "follow_up"):
            for t in ex.get(part, {}).values():
                out["speech"] |= shingles(t)
    return {k: frozenset(v) for k, v in out.items()}


def echo_problems(stage: str, texts: dict[str, str | None]) -> list[Problem]:
    pool = example_shingles()["camera" if stage == "camera" else "speech"]
    out = []
    for f, t in texts.items():
        if not t:
            continue
        if shingles(t) & pool or any(
            key(t) == key(x)
            for ex in examples()
            for part in ("camera", "speech", "follow_up")
            for x in ex.get(part, {}).values()
        ):
            out.append(("example_echo", f"{f} copies the one-shot example: {t[:60]!r}"))
    return out


def situation_echo(sit: dict[str, Any]) -> list[Problem]:
    """A situation copied whole (name and every phrase) from an example."""
    known = set()
    for ex in examples():
        for role in ("earlier", "now"):
            x = ex["situations"].get(role)
            if x:
                known.add(
                    (key(x["name"]), tuple(sorted(key(t) for t in x["technique"] + x["state"])))
                )
    out = []
    for role in ("earlier", "now"):
        x = sit.get(role)
        if (
            x
            and (key(x["name"]), tuple(sorted(key(t) for t in x["technique"] + x["state"])))
            in known
        ):
            out.append(("example_echo", f"{role} situation {x['name']!r} is the example's"))
    return out
