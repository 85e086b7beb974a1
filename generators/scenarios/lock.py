"""The benchmark's lock of a scenarios run (``MANIFEST.lock.json``: the files' hashes, the schema
revision, the judge prompt) and ``verify``, which recomputes it against the files."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gen
from gen.contextbench import (
    CHECKS_FILE,
    JUDGE_PROMPT_VERSION,
    JUDGE_TEMPLATE,
    LOCK,
    PROMPT_CONDITIONS,
    SCHEMA_REVISION,
)
from gen.engine.runner import RunContext
from gen.errors import InputError
from gen.generators.scenarios.skeleton import NAME
from gen.llm import sha256_file
from gen.paths import PROMPTS
from gen.readers import read_json
from gen.schemas import Reject
from gen.schemas.scenarios import LockCheckRecord, ScenarioRecord

if TYPE_CHECKING:
    from gen.generators.scenarios import ScenariosConfig


# --------------------------------------------------------------------------- lock and verify

LOCK_KEYS = (
    "schema_revision",
    "scenarios_sha256",
    "prompt_conditions_sha256",
    "scenario_checks_sha256",
    "judge_prompt_sha256",
)
"""What ``verify`` checks, one index each (a lock written before gen had a judge holds null there,
and that entry is not checked)."""


def judge_prompt() -> tuple[str, str]:
    """(version, SHA-256) of the context-tracking judge's prompt (``gen judge kind=context``), as
    the benchmark's lock records them: a bank is judged comparably only under the same judge
    prompt."""
    return JUDGE_PROMPT_VERSION, sha256_file(PROMPTS / JUDGE_TEMPLATE)


def scenarios_bytes(records: Sequence[ScenarioRecord]) -> bytes:
    """``scenarios.jsonl`` exactly as the runner writes it (one ``model_dump_json`` a line)."""
    return "".join(r.model_dump_json() + "\n" for r in records).encode("utf-8")


def make_lock(
    cfg: ScenariosConfig,
    records: Sequence[ScenarioRecord],
    checks_sha: str,
    conditions_sha: str | None,
) -> dict[str, Any]:
    """MANIFEST.lock.json in the benchmark's form, plus gen's own provenance keys."""
    version, sha = judge_prompt()
    return {
        "benchmark_version": cfg.benchmark_version,
        "schema_revision": SCHEMA_REVISION,
        "judge_prompt_version": version,
        "judge_prompt_sha256": sha,
        "scenarios_sha256": hashlib.sha256(scenarios_bytes(records)).hexdigest(),
        "prompt_conditions_sha256": conditions_sha,
        "scenario_checks_sha256": checks_sha,
        "generator": f"gen {NAME} {gen.__version__}",
        "counts": {cfg.subset: len(records)},
    }


def read_lock(folder: Path) -> dict[str, Any]:
    path = folder / LOCK
    if not path.is_file():
        raise InputError(f"input: {folder} holds no {LOCK} (not a scenarios run folder)")
    lock = read_json(path)  # not UTF-8, not JSON, NaN, a FIFO: one line naming the file
    if not isinstance(lock, dict):
        raise InputError(f"{path}:1: expected a JSON object")
    return lock


def lock_check(folder: Path, lock: dict[str, Any], k: str) -> tuple[Any, Any]:
    """(locked, computed) for one lock entry."""
    if k == "schema_revision":
        return lock.get(k), SCHEMA_REVISION
    if k == "judge_prompt_sha256":
        return lock.get(k), None if lock.get(k) is None else judge_prompt()[1]
    name = {
        "scenarios_sha256": f"{NAME}.jsonl",
        "prompt_conditions_sha256": PROMPT_CONDITIONS,
        "scenario_checks_sha256": CHECKS_FILE,
    }[k]
    path = folder / name
    if lock.get(k) is None and k == "prompt_conditions_sha256" and not path.exists():
        return None, None
    return lock.get(k), sha256_file(path) if path.is_file() else f"missing {name}"


def verify(cfg: ScenariosConfig, ctx: RunContext) -> Iterator[LockCheckRecord | Reject]:
    folder, lock = ctx.plan.data
    ctx.records_name = "verify"
    ctx.record_input(folder / LOCK)
    drift: dict[str, str] = {}
    for i, k in zip(ctx.indices(), LOCK_KEYS, strict=True):
        locked, computed = lock_check(folder, lock, k)
        if locked == computed:
            yield LockCheckRecord(key=k, value=locked)
        else:
            drift[k] = f"{k} mismatch: lockfile={locked!r}, computed={computed!r}"
            yield Reject(record_id=k, index=i, stage="verify", reason="drift", detail=drift[k])
    ctx.extra[NAME] = {
        "action": "verify",
        "folder": str(folder),
        "drift": list(drift.values()),
        "lock_sha256": sha256_file(folder / LOCK),
    }
    if drift:
        ctx.fail(
            f"{len(drift)} lock entr{'y' if len(drift) == 1 else 'ies'} drifted: "
            + "; ".join(drift)
        )
    ctx.say(
        *(f"[{NAME}] DRIFT {d}" for d in drift.values()),
        f"[{NAME}] "
        f"verify {folder}: {'ok' if not drift else f'{len(drift)} drifted'}; {len(LOCK_KEYS)} "
        "entries checked",
    )
