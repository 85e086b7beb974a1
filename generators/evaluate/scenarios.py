"""Scenario banks: the candidate's turns per scenario, condition and trial, the judge sub-runs of
turns 2 and 3, the repair prompt, and the run's summary."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gen.contextbench import JUDGE_PROMPT_VERSION, scenario_file
from gen.contextbench import JUDGE_TEMPLATE as TEMPLATE
from gen.contextbench.scoring import metrics, repair_text, signals
from gen.engine.manifest import git_info
from gen.engine.panel import build_panel, pairwise_agreement
from gen.engine.runner import RunContext
from gen.errors import LLMOutputError
from gen.generators.evaluate.config import NAME, TURN, EvaluateConfig
from gen.llm import Message
from gen.llm.cache import sha256_file
from gen.llm.labels import model_label
from gen.readers import iter_jsonl, read_json
from gen.schemas import Reject
from gen.schemas.evaluate import TrialRecord
from gen.schemas.judge import ContextJudgeRecord, ResponseRow
from gen.schemas.scenarios import ScenarioRecord


def cell(cfg: EvaluateConfig, index: int) -> tuple[int, int, int]:
    """(scenario, condition, trial) of an index: scenario-major, then condition, then trial."""
    per_scenario = len(cfg.condition) * cfg.trials
    return index // per_scenario, (index % per_scenario) // cfg.trials, index % cfg.trials


def user_turn(ctx: RunContext, image: str | None, words: str | None) -> Message:
    return ctx.prompts.render(TURN, image=image, user=words)[0]


def conversation(
    ctx: RunContext,
    system: str,
    s: ScenarioRecord,
    replies: list[str],
    repair: str | None = None,
    camera: bool = True,
) -> list[Message]:
    """The candidate's messages up to the next reply: the condition's system prompt, the
    pre-conversation frame as its own block, then each turn with its camera block and the replies
    so far (turn 1, turn 2, then the repair prompt). ``camera=False`` (the ablation): the user's
    words only, no frame at all."""
    msgs: list[Message] = [{"role": "system", "content": system}]
    if s.context_image and camera:
        msgs.append(user_turn(ctx, s.context_image, None))
    turns: list[tuple[str | None, str]] = [
        (s.turn_1_image if camera else None, s.turn_1_user),
        (s.turn_2_image if camera else None, s.turn_2_user),
    ]
    if repair is not None:
        turns.append((None, repair))
    for k, (image, words) in enumerate(turns[: len(replies) + 1]):
        msgs.append(user_turn(ctx, image, words))
        if k < len(replies):
            msgs.append({"role": "assistant", "content": replies[k]})
    return msgs


def judge_step(
    cfg: EvaluateConfig,
    ctx: RunContext,
    bank_file: Path,
    rows: list[ResponseRow],
    turn: int,
    family: str | None,
) -> tuple[dict[tuple[str, str, int], ContextJudgeRecord], dict[str, Any]]:
    """Write the replies of one turn and judge them in a ``judge kind=context`` sub-run; returns
    its records by (scenario, condition, trial) and its manifest's ``judge`` section."""
    name, folder = f"responses_turn{turn}.jsonl", f"judge_turn{turn}"
    responses = ctx.out_dir / name
    responses.write_text("".join(r.model_dump_json() + "\n" for r in rows), encoding="utf-8")
    if not rows:
        return {}, {}
    out = ctx.out_dir / folder
    judged = ctx.subrun(
        "judge",
        out,
        **{**cfg.judge_options(), "candidate_family": family},  # the family this run resolved
        kind="context",
        input=str(bank_file),
        responses=str(responses),
        progress="off",
    )
    records = {}
    for _, rec in iter_jsonl(out / "judge.jsonl"):
        r = ContextJudgeRecord.model_validate(rec)
        records[(r.scenario_id, r.condition, r.trial)] = r
    return records, judged.raw["judge"]


def run_scenarios(cfg: EvaluateConfig, ctx: RunContext) -> Iterator[TrialRecord | Reject]:
    _, bank, (cpath, conditions) = ctx.plan.data
    path = cfg.input_path()
    assert path is not None
    bank_file = scenario_file(path)
    ctx.record_input(bank_file)
    ctx.record_input(cpath)
    candidate = ctx.llm
    family, family_source = candidate.family_info
    label = model_label(cfg.llm)
    # the cross-family rule before any candidate call (the judge sub-runs apply it again)
    # a name gen cannot place is no family (the benchmark's runner: None for open weights)
    known = family and not family_source.startswith("unknown family")
    if cfg.candidate_family is not None:
        family, family_source, known = cfg.candidate_family, "candidate_family= (config)", True
    panel = build_panel(
        cfg, ctx, {family: f"llm= ({family_source})"} if family and known else {}, default=None
    )
    t2_rows: list[ResponseRow] = []
    first: dict[int, list[str] | Reject] = {}

    def turns_1_2(index: int) -> list[str] | Reject:
        si, ci, trial = cell(cfg, index)
        s, system = bank[si], conditions[cfg.condition[ci]]
        replies: list[str] = []
        try:
            for turn in (1, 2):
                replies.append(
                    candidate.complete(
                        conversation(ctx, system, s, replies, camera=not cfg.no_camera),
                        max_tokens=cfg.max_tokens,
                        seed=ctx.seed(index, "turn", turn),
                    )
                )
        except LLMOutputError as e:
            return Reject.from_failure(
                e,
                record_id=f"{s.scenario_id}/{cfg.condition[ci]}/{trial}",
                index=index,
                stage=f"candidate.turn_{len(replies) + 1}",
            )
        return replies

    indices = list(ctx.indices())
    for index, out in zip(indices, ctx.map(turns_1_2, indices), strict=True):
        first[index] = out
        if not isinstance(out, Reject):
            si, ci, trial = cell(cfg, index)
            t2_rows.append(
                ResponseRow(
                    scenario_id=bank[si].scenario_id,
                    turn=2,
                    response=out[1],
                    trial=trial,
                    condition=cfg.condition[ci],
                    candidate=label,
                    candidate_family=family,
                    repair_style=cfg.repair_style,
                )
            )
    t2, judge_info = judge_step(cfg, ctx, bank_file, t2_rows, 2, family)
    primary = judge_info.get("judge_label", panel.primary.label)
    misses = {}
    for index in indices:
        si, ci, trial = cell(cfg, index)
        s = bank[si]
        r2 = t2.get((s.scenario_id, cfg.condition[ci], trial))
        got = r2.verdicts[primary].label if r2 else None
        if got is not None and got != s.target_context:
            misses[index] = repair_text(s, cfg.repair_style)

    def turn_3(index: int) -> str | Reject:
        si, ci, trial = cell(cfg, index)
        s, system = bank[si], conditions[cfg.condition[ci]]
        replies = first[index]
        assert isinstance(replies, list)
        try:
            return candidate.complete(
                conversation(ctx, system, s, replies, misses[index], camera=not cfg.no_camera),
                max_tokens=cfg.max_tokens,
                seed=ctx.seed(index, "turn", 3),
            )
        except LLMOutputError as e:
            return Reject.from_failure(
                e,
                record_id=f"{s.scenario_id}/{cfg.condition[ci]}/{trial}",
                index=index,
                stage="candidate.turn_3",
            )

    third = dict(zip(misses, ctx.map(turn_3, list(misses)), strict=True))
    t3_rows = [
        ResponseRow(
            scenario_id=bank[cell(cfg, i)[0]].scenario_id,
            turn=3,
            response=out,
            trial=cell(cfg, i)[2],
            condition=cfg.condition[cell(cfg, i)[1]],
            candidate=label,
            candidate_family=family,
            repair_style=cfg.repair_style,
        )
        for i, out in third.items()
        if not isinstance(out, Reject)
    ]
    t3, _ = judge_step(cfg, ctx, bank_file, t3_rows, 3, family)
    trials: list[TrialRecord] = []
    for index in indices:
        out = first[index]
        if isinstance(out, Reject):
            yield out
            continue
        reply_3 = third.get(index)
        if isinstance(reply_3, Reject):
            yield reply_3
            continue
        si, ci, trial = cell(cfg, index)
        s = bank[si]
        key = (s.scenario_id, cfg.condition[ci], trial)
        r2, r3 = t2.get(key), t3.get(key)
        if r2 is None:
            yield Reject(
                record_id="/".join(map(str, key)),
                index=index,
                stage="judge.turn_2",
                reason="not_judged",
                detail="the judge sub-run rejected this reply (judge_turn2/rejects.jsonl)",
            )
            continue
        l2 = r2.verdicts[primary].label
        rec = TrialRecord(
            scenario_id=s.scenario_id,
            condition=cfg.condition[ci],
            trial=trial,
            target_context=s.target_context,
            change_type=s.change_type,
            replies={"turn_1": out[0], "turn_2": out[1], "turn_3": reply_3},
            repair_prompt=misses.get(index),
            turn_2={k: v.label for k, v in r2.verdicts.items()},
            turn_3={k: v.label for k, v in r3.verdicts.items()} if r3 else None,
            correct_turn_2=None if l2 is None else l2 == s.target_context,
            repaired=None
            if r3 is None or r3.verdicts[primary].label is None
            else r3.verdicts[primary].label == s.target_context,
            signals_turn_2=signals(out[1], s.gold.model_dump()),
        )
        trials.append(rec)
        yield rec
    judged = list(t2.values()) + list(t3.values())
    summary = scenario_summary(
        cfg, judged, [j.label for j in panel.judges], primary, ctx.seed(0, "bootstrap")
    )
    lock = read_lock(bank_file.parent)
    manifest = {
        "benchmark_version": lock.get("benchmark_version"),
        "schema_revision": lock.get("schema_revision"),
        "camera_injection": not cfg.no_camera,
        "scenarios_sha256": sha256_file(bank_file),
        "expected_answers_sha256": None,
        "prompt_conditions_sha256": sha256_file(cpath),
        "judge_prompt_version": JUDGE_PROMPT_VERSION,
        "judge_prompt_sha256": judge_info.get("judge_prompt_sha256"),
        "judge_prompt_matches_lock": None
        if not lock.get("judge_prompt_sha256") or not judge_info
        else lock["judge_prompt_sha256"] == judge_info.get("judge_prompt_sha256"),
        "candidate_model": candidate.describe().get("model"),
        "candidate_family": family,
        "candidate_family_source": family_source,
        **{k: judge_info.get(k, v) for k, v in panel.manifest().items() if k.startswith("judge_")},
        "judges": judge_info.get("judges", panel.manifest()["judges"]),
        "trials": cfg.trials,
        "temperature": candidate.describe()["sampling"]["temperature"],
        "conditions": cfg.condition,
        "ranking_condition": cfg.ranking_condition,
        "repair_style": cfg.repair_style,
        "timestamp_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "runner_git_commit": git_info()["commit"],
    }
    ctx.prompts.hash(TEMPLATE)
    ctx.write_json("summary.json", {"manifest": manifest, **summary})
    ctx.extra[NAME] = {"mode": "scenarios", "manifest": manifest, **summary}
    for cellname, m in summary["judges"][primary].items():
        ba, ci95 = m["balanced_accuracy"], m["balanced_accuracy_ci95"]
        ctx.say(
            f"[evaluate] {cellname}: balanced turn-2 accuracy {ba if ba is not None else '-'}"
            f"{f' {ci95}' if ci95 else ''}, judge not followed {m['turn_2']['not_followed']}/"
            f"{m['turn_2']['replies']}, repair {m['repair']['k']}/{m['repair']['n']} "
            f"(judge {primary})"
        )


def read_lock(folder: Path) -> dict[str, Any]:
    """The bank's MANIFEST.lock.json when it has one (a scenarios run folder), else {}."""
    path = folder / "MANIFEST.lock.json"
    if not path.is_file():
        return {}
    data = read_json(path)
    return data if isinstance(data, dict) else {}


def scenario_summary(
    cfg: EvaluateConfig,
    records: list[ContextJudgeRecord],
    judges: list[str],
    primary: str,
    seed: int,
) -> dict[str, Any]:
    """Per judge and condition: balanced turn-2 accuracy, per-label rows, repair rate (with
    intervals); the primary score; the judges' agreement on turn 2."""
    out: dict[str, Any] = {}
    for j in judges:

        def label(r: ContextJudgeRecord, j: str = j) -> str | None:
            return r.verdicts[j].label

        out[j] = {
            cond: metrics(
                [r for r in records if r.condition == cond],
                label,
                seed=seed,
                resamples=cfg.bootstrap,
            )
            for cond in cfg.condition
        }
    p = out[primary][cfg.ranking_condition]
    t2 = [r for r in records if r.turn == 2]
    return {
        "primary": primary,
        "primary_score": {
            "balanced_turn_2_accuracy": p["balanced_accuracy"],
            "ci95": p["balanced_accuracy_ci95"],
            "condition": cfg.ranking_condition,
            "repair_rate": p["repair"]["rate"],
            "repair_ci95": p["repair"]["ci95"],
        },
        "judges": out,
        "agreement_turn_2": pairwise_agreement(
            {j: [r.verdicts[j].label for r in t2] for j in judges}
        ),
    }
