"""A written unit against the bank, in index order: assembly into the released layout and
:func:`resolve` (the bank-level rules; a duplicate turn 2 regenerates its stage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gen.contextbench.rules import (
    Problem,
    bank_problems,
    rule_problems,
    signature,
)
from gen.generators.scenarios.skeleton import Skeleton
from gen.llm.attempts import AttemptFailure
from gen.schemas import Reject
from gen.schemas.scenarios import (
    RECORD_FIELDS,
    ScenarioChecks,
    ScenarioRecord,
)

if TYPE_CHECKING:
    pass

from gen.generators.scenarios.examples import situations_of
from gen.generators.scenarios.stages import (
    Unit,
    Writer,
    stage_camera,
    stage_follow_up,
    stage_speech,
)

# --------------------------------------------------------------------------- assembly


def assemble(u: Unit, sk: Skeleton) -> dict[str, Any]:
    """The record of one member, fields in the released order."""
    sit, cam = u.sit or {}, u.camera or {}
    member_b = len(u.members) == 2 and sk is u.members[1]
    speech = {**(u.speech or {}), **(u.follow or {})} if member_b else (u.speech or {})
    made = situations_of(sk, sit)
    gold = made["gold"]
    if sk.target_context == "clarify":
        more = f"hidden: {' / '.join(sit['candidates'])}"
    elif sk.target_context == "abstain":
        more = f"never shown: {sit['hidden_detail']}"
    elif sk.change_type == "cross_session_reference":
        more = f"turn 1: {sit['meanwhile']}; turn 2: {sit['now']['name']}"
    else:
        more = f"turn 2: {sit['now']['name']}"
    record = {
        "scenario_id": sk.scenario_id,
        "subset": sk.subset,
        "pair_id": sk.pair_id,
        "target_context": sk.target_context,
        "change_type": sk.change_type,
        "activity_domain": sk.activity_domain,
        "referent_complexity": sk.referent_complexity,
        "difficulty_tier": sk.difficulty_tier,
        "time_gap_bucket": sk.time_gap_bucket,
        "context_image": cam.get("context_image")
        if sk.change_type == "cross_session_reference"
        else None,
        "turn_1_image": cam["turn_1_image"],
        "turn_1_user": speech["turn_1_user"],
        "turn_2_image": cam["turn_2_image_b"] if member_b else cam["turn_2_image"],
        "turn_2_user": speech["turn_2_user"],
        "turn_3_repair_prompt": speech["turn_3_repair_prompt"],
        "turn_3_repair_prompt_deictic": speech.get("turn_3_repair_prompt_deictic")
        if sk.deictic
        else None,
        "notes": f"gen scenarios: {sk.change_type} in {sk.activity_domain}, "
        f"target {sk.target_context}; "
        f"{'context image' if sk.change_type == 'cross_session_reference' else 'turn 1'}: "
        f"{sit['earlier']['name']}; {more}.",
        "gold": gold,
    }
    assert tuple(record) == RECORD_FIELDS
    return record


def categories_of(u: Unit, sk: Skeleton) -> dict[str, dict[str, Any]]:
    return situations_of(sk, u.sit or {})["categories"] if u.sit else {}


# ------------------------------------------------------------------------- the bank, in index order


@dataclass
class BankView:
    """The accepted scenarios so far (``existing=`` first): what the bank-level rules see."""

    rows: list[dict[str, Any]]

    def texts(self, f: str) -> frozenset[str]:
        return frozenset((r.get(f) or "").strip().lower() for r in self.rows if r.get(f))


@dataclass
class Outcome:
    unit: Unit
    items: list[ScenarioRecord | Reject]
    checks: list[ScenarioChecks]


def resolve(w: Writer, u: Unit, bank: BankView) -> Outcome:
    """Bank-level rules for one drafted unit against the scenarios accepted before it (a
    duplicate turn-2 text regenerates its stage with the bank known, up to ``attempts``
    more), then the final check of every record (:func:`rule_problems`, :func:`bank_problems`):
    anything that breaks a rule is rejected, never written."""
    if u.failure is None:
        users, images = bank.texts("turn_2_user"), bank.texts("turn_2_image")

        def dup(stage: str, texts: list[str | None], seen: frozenset[str]) -> bool:
            hit = any((t or "").strip().lower() in seen for t in texts)
            u.trace.record(
                stage,
                ["duplicate_turn_2"],
                [("duplicate_turn_2", "identical to an earlier scenario's")] if hit else [],
            )
            return hit

        try:
            cam = u.camera or {}
            if dup("camera", [cam.get("turn_2_image"), cam.get("turn_2_image_b")], images):
                stage_camera(w, u, images)
            if dup("speech", [(u.speech or {}).get("turn_2_user")], users):
                stage_speech(w, u, users)
                if len(u.members) == 2:
                    stage_follow_up(w, u, users)
            elif len(u.members) == 2 and dup(
                "follow_up", [(u.follow or {}).get("turn_2_user")], users
            ):
                stage_follow_up(w, u, users)
        except AttemptFailure as e:
            u.failure = e
    records: list[dict[str, Any]] = []
    if u.failure is None:
        records = [assemble(u, sk) for sk in u.members]
        final: list[Problem] = []
        for rec, sk in zip(records, u.members, strict=True):
            final += rule_problems(rec, categories=categories_of(u, sk))
        rec_problems = [(r, d) for r, d in final if r in ("schema", "field_presence")]
        u.trace.record("record", ["schema", "field_presence"], rec_problems)
        trial = bank_problems([*bank.rows, *records], signature_limit=w.cfg.signature_limit)
        mine = {r["scenario_id"] for r in records}
        bank_level = [
            (rule, d)
            for sid, rule, d in trial
            if sid in mine
            or (rule == "signature_limit" and any(str(signature(r)) in d for r in records))
        ]
        u.trace.record(
            "record",
            ["duplicate_id", "signature_limit"],
            [(r, d) for r, d in bank_level if r in ("duplicate_id", "signature_limit")],
        )
        problems = final + bank_level
        if problems:
            rule, detail = problems[0]
            u.failure = AttemptFailure("record", rule, "; ".join(d for _, d in problems[:4]))
            w.ctx.count(f"record.{rule}")
    items: list[ScenarioRecord | Reject] = []
    checks = []
    f = u.failure
    for j, sk in enumerate(u.members):
        if f is None:
            items.append(ScenarioRecord.model_validate(records[j]))
        else:
            items.append(
                Reject.from_failure(
                    f,
                    record_id=sk.scenario_id,
                    index=u.index,
                    detail=f"{sk.scenario_id} ({sk.change_type}/{sk.target_context}): {f.detail}",
                )
            )
        checks.append(
            ScenarioChecks(
                scenario_id=sk.scenario_id,
                index=u.index,
                status="accepted" if f is None else "rejected",
                stage=None if f is None else f.stage,
                reason=None if f is None else f.reason,
                skeleton=sk.as_dict(),
                categories=categories_of(u, sk),
                rules=u.trace.summary(),
                attempts=dict(sorted(u.trace.attempts.items())),
                identification=u.identification,
                leak=[r for r in u.leak if r["member"] == sk.scenario_id],
            )
        )
    if u.failure is None:
        bank.rows += records
    return Outcome(u, items, checks)
