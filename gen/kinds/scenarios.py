"""``scenarios``: context-tracking scenarios in the Wearable Assistant Context Bench's released
schema.

A scenario's content id hashes its visible channels only, as the candidate gets them
(:data:`schemas.scenarios.VISIBLE_FIELDS`: the context image, the two camera frames, the user
turns and both repair prompts), each normalised. Not hashed: ``scenario_id``, ``pair_id``, the
skeleton (``target_context``, ``change_type``, domain, difficulty…), ``notes`` and the judge's
``gold`` lists — so one scenario re-labelled or re-numbered is the same item, and two that differ
only in what the judge is told collide.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gen.contextbench import RECORDS
from gen.kinds import Kind, norm
from gen.schemas.scenarios import VISIBLE_FIELDS, ScenarioRecord

EMBED_ORDER = ("turn_2_user", "turn_2_image", "turn_1_user", "turn_1_image", "context_image")
"""A scenario's text for near-duplicates: turn 2 first (where scenarios of one setting differ;
the embedder truncates long inputs)."""
ROW = (
    "scenario_id",
    "subset",
    "pair_id",
    "target_context",
    "change_type",
    "activity_domain",
    "referent_complexity",
    "difficulty_tier",
    "turn_2_user",
)


class Scenarios(Kind):
    def holds(self, path: Path) -> bool:
        """A ``scenarios.jsonl``, or any JSONL whose first record carries the released schema's
        keys (:func:`gen.contextbench.is_scenario_bank`)."""
        from gen.contextbench import is_scenario_bank

        return super().holds(path) or (path.is_file() and is_scenario_bank(path))

    def identity(self, record: dict[str, Any]) -> dict[str, Any]:
        def text(v: Any) -> Any:
            return norm(v) if isinstance(v, str) else v

        return {"scenario": {f: text(record.get(f)) for f in VISIBLE_FIELDS}}

    def text(self, record: dict[str, Any]) -> str:
        return "\n".join(record[f] for f in EMBED_ORDER if isinstance(record.get(f), str))

    def question_type(self, record: dict[str, Any]) -> str:
        """``<change_type>/<target_context>``: the two members of a contrast pair (one turn 1, a
        current and a prior target) are not taken for copies of each other."""
        return f"{record.get('change_type')}/{record.get('target_context')}"

    def source_id(self, record: dict[str, Any]) -> str:
        return str(record.get("scenario_id") or "")

    def columns(self) -> dict[str, Any]:
        import polars as pl

        return dict.fromkeys(ROW, pl.String)

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        return {k: record.get(k) for k in ROW}

    def column_docs(self) -> dict[str, str]:
        return {
            "scenario_id": "The scenario's id in the context benchmark's format (sc-NN bank, "
            "adv-NN contrast).",
            "subset": "bank or contrast (A/B pairs that share turn 1).",
            "pair_id": "The contrast pair the scenario belongs to; null in the bank subset.",
            "target_context": "PRIVILEGED (judge side). Which context turn 2 refers to: current, "
            "prior, clarify or abstain.",
            "change_type": "PRIVILEGED (judge side). The kind of context shift between turn 1 "
            "and turn 2.",
            "activity_domain": "The scenario's activity domain (kitchen, workshop…).",
            "referent_complexity": "How many referents turn 2 could mean.",
            "difficulty_tier": "easy, medium or hard.",
            "turn_2_user": "What the user says at turn 2 (the deictic question).",
        }


SCENARIOS = Scenarios(
    name="scenarios",
    record=ScenarioRecord,
    files=(RECORDS,),
    source_format="scenario_record",
    view="scenarios",
    formats=("scenarios",),
    noun="a scenario in the released schema",
    help="scenarios (Wearable Assistant Context Bench): three-turn context-tracking scenarios; "
    "code draws the skeleton (shift type, target), an LLM writes the words, and the judge's gold "
    "lists (current/prior answers, clarify/abstain indicators) are inline in each record.",
)
KINDS = (SCENARIOS,)
