"""The one attempt loop (gen.llm.attempts.retry) and the renamed attempt budgets: the loop's
order of calls, its counters and its last failure; an old option name moves to the new one with a
warning, on the Python API and on the command line (where Hydra holds the new name's default)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gen.cli import validate
from gen.engine.api import configure
from gen.engine.runfolder import RunFolder
from gen.errors import LLMOutputError
from gen.llm.attempts import AttemptFailure, retry


def scripted(*answers: Any) -> tuple[list[int], Any]:
    """A call that gives ``answers`` in order (an exception is raised), logging attempt numbers."""
    seen: list[int] = []

    def call(a: int) -> Any:
        seen.append(a)
        out = answers[a]
        if isinstance(out, Exception):
            raise out
        return out

    return seen, call


def even(x: int) -> int:
    if x % 2:
        raise AttemptFailure("stage", "odd", f"{x} is odd", raw=str(x))
    return x * 10


def test_the_first_accepted_answer_ends_the_loop_and_failures_are_counted_by_reason() -> None:
    seen, call = scripted(LLMOutputError("truncated", "cut", "{"), 3, 4, 6)
    counts: Counter[str] = Counter()
    assert retry(call, even, budget=5, stage="stage", count=lambda k: counts.update([k])) == 40
    assert seen == [0, 1, 2]
    assert counts == {"stage.llm_truncated": 1, "stage.odd": 1}


def test_the_last_failure_is_raised_with_every_failed_attempt() -> None:
    _, call = scripted(3, LLMOutputError("invalid_output", "bad json", "{x"), 5)
    hooked: list[str] = []
    with pytest.raises(AttemptFailure) as e:
        retry(call, even, budget=3, stage="stage", failed=lambda f: hooked.append(f.reason))
    f = e.value
    assert (f.stage, f.reason, f.detail, f.raw, f.attempts, f.llm) == (
        "stage",
        "odd",
        "5 is odd",
        "5",
        3,
        False,
    )
    assert [(x.reason, x.attempts, x.llm) for x in f.failed] == [
        ("odd", 1, False),
        ("invalid_output", 2, True),
        ("odd", 3, False),
    ]
    assert f.failed[1].raw == "{x" and hooked == ["odd", "invalid_output", "odd"]


def test_calls_made_ahead_are_checked_in_order_with_the_one_at_a_time_outcome() -> None:
    """``ahead``: the calls of several attempts go out at once (through ``fan``), their answers
    are checked in attempt order, and the value, counters and failures are the loop's without it;
    an attempt past the accepted one is called but never checked."""
    answers = (LLMOutputError("truncated", "cut", "{"), 3, 5, 4, 7, 8)
    waves: list[list[int]] = []

    def fan(one: Any, due: list[int]) -> list[Any]:
        waves.append(due)
        return [one(a) for a in reversed(due)][::-1]  # answered last first

    outcomes = []
    for ahead in (None, lambda: 3):
        seen, call = scripted(*answers)
        counts: Counter[str] = Counter()
        hooked: list[int] = []
        value = retry(
            call,
            even,
            budget=6,
            stage="stage",
            count=lambda k, c=counts: c.update([k]),
            failed=lambda f, hooked=hooked: hooked.append(f.attempts),
            ahead=ahead,
            fan=fan,
        )
        outcomes.append((value, counts, hooked))
    assert outcomes[0] == outcomes[1] == (40, {"stage.llm_truncated": 1, "stage.odd": 2}, [1, 2, 3])
    assert seen == [2, 1, 0, 5, 4, 3] and waves == [[0, 1, 2], [3, 4, 5]]


def test_a_check_names_its_own_counters_and_the_model_failure_key() -> None:
    def check(x: int) -> int:
        raise AttemptFailure("app.Notes", "no_valid_item", "none", counts=["Notes.none", "Notes.x"])

    _, call = scripted(1, LLMOutputError("backend_error", "500"))
    counts: Counter[str] = Counter()
    with pytest.raises(AttemptFailure) as e:
        retry(
            call,
            check,
            budget=2,
            stage="app.Notes",
            count=lambda k: counts.update([k]),
            llm_key=lambda r: f"Notes.llm_{r}.regenerated",
        )
    assert counts == {"Notes.none": 1, "Notes.x": 1, "Notes.llm_backend_error.regenerated": 1}
    assert e.value.reason == "backend_error" and e.value.attempts == 2


def test_the_answer_is_kept_as_raw_json_when_the_check_gives_none() -> None:
    from pydantic import BaseModel

    class Draft(BaseModel):
        text: str

    def check(d: Draft) -> str:
        raise AttemptFailure("s", "short", "too short")

    with pytest.raises(AttemptFailure) as e:
        retry(lambda a: Draft(text="hi"), check, budget=1, stage="s")
    assert e.value.raw == '{"text":"hi"}'


def test_the_failed_hook_can_re_ask_with_the_failure_named() -> None:
    messages: list[str] = ["ask"]
    asked: list[list[str]] = []

    def call(a: int) -> int:
        asked.append(list(messages))
        return a + 1

    def reask(f: AttemptFailure) -> None:
        messages.extend([f.raw or "", f"fix: {f.detail}"])

    assert retry(call, even, budget=3, stage="s", failed=reask) == 20
    assert asked == [["ask"], ["ask", "1", "fix: 1 is odd"]]


def pool_folder(path: Path, config: dict[str, Any]) -> RunFolder:
    """A finished (empty) personas run folder whose manifest holds ``config``."""
    (path / "personas.jsonl").write_text("")
    manifest = {
        "generator": "personas",
        "config": config,
        "records": {"file": "personas.jsonl", "kind": "records"},
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    return RunFolder.open(path)


RENAMED = [
    ("digital", "app_attempts", "attempts"),
    ("tom", "stage_attempts", "attempts"),
    ("scenarios", "stage_attempts", "attempts"),
    ("personas", "bio_attempts", "attempts"),
    ("personas", "max_attempts", "draws"),
    ("personas", "persona_pool", "n"),
]


@pytest.mark.parametrize(("name", "old", "new"), RENAMED)
def test_an_old_option_name_is_moved_with_a_warning(
    name: str, old: str, new: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gen.engine.config"):
        cfg = configure(name, {old: 2, "cache_dir": None}, check_input=False)
    assert getattr(cfg, new) == 2 and old not in type(cfg).model_fields
    assert any(
        r.name == "gen.engine.config" and f"option {old} is now called {new}" in r.getMessage()
        for r in caplog.records
    )
    dumped = cfg.model_dump()
    assert new in dumped and old not in dumped  # manifests and sub-runs carry the new name


def test_an_old_option_name_on_the_command_line_wins_over_the_new_names_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="gen.engine.config"):
        settings = validate("personas", ["bio_attempts=2", "max_attempts=7"])
    assert (settings.attempts, settings.draws) == (2, 7)
    assert sum("is now called" in r.getMessage() for r in caplog.records) == 2
    assert validate("personas", ["attempts=4"]).attempts == 4


def test_an_old_name_out_of_range_is_named_by_its_new_name() -> None:
    from gen.errors import ConfigError

    with pytest.raises(ConfigError, match="attempts"):
        validate("tom", ["stage_attempts=0"])


def test_a_folder_written_with_the_old_option_names_is_still_finished_with_the_config(
    tmp_path: Path,
) -> None:
    """A persona pool made before the rename is reused, not made again."""
    cfg = configure("personas", {"n": 6, "cache_dir": None}, check_input=False)
    old = cfg.model_dump(mode="json")
    old["bio_attempts"], old["max_attempts"] = old.pop("attempts"), old.pop("draws")
    folder = pool_folder(tmp_path, old)
    assert folder.finished_with(cfg)
    assert not folder.finished_with(cfg.model_copy(update={"draws": 9}))


def test_the_scenarios_kind_has_one_name_and_old_folders_and_rubrics_still_read(
    tmp_path: Path,
) -> None:
    from gen.engine.registry import REGISTRY
    from gen.schemas.review import Rubric

    assert REGISTRY["scenarios"].kind == "scenarios"  # the bank's kind and the generator's name
    manifest = {
        "generator": "scenarios",
        "records": {"file": "scenarios.jsonl", "kind": "scenario"},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert RunFolder.open(tmp_path).kind == "scenarios"
    field = {"key": "ok", "question": "Fine?", "labels": ["no", "yes"]}
    rubric = Rubric.model_validate({"name": "mine", "kinds": ["scenario"], "fields": [field]})
    assert rubric.kinds == ["scenarios"]


def test_personas_old_pool_option_moves_to_n_on_the_command_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``personas +persona_pool=12`` (the documented form before) is ``n=12``, with a warning."""
    with caplog.at_level(logging.WARNING, logger="gen.engine.config"):
        assert validate("personas", ["+persona_pool=12"]).n == 12
        assert validate("personas", ["persona_pool=12", "n=3"]).n == 12  # as it won over n
    assert sum("option persona_pool is now called n" in r.getMessage() for r in caplog.records) == 2
    assert validate("personas", ["n=7"]).n == 7
    # an old config holding the unset option (null) keeps its n
    cfg = configure(
        "personas", {"n": 8, "persona_pool": None, "cache_dir": None}, check_input=False
    )
    assert cfg.n == 8 and "persona_pool" not in cfg.model_dump()


@pytest.mark.parametrize(
    ("old", "n"), [({"n": 50, "persona_pool": 12}, 12), ({"n": 6, "persona_pool": None}, 6)]
)
def test_a_pool_made_with_persona_pool_is_reused_for_its_size(
    tmp_path: Path, old: dict[str, Any], n: int
) -> None:
    """A pool folder written when ``persona_pool`` won over ``n`` is finished with the same size
    asked as ``n``; one where it was unset (null) with its ``n``."""
    cfg = configure("personas", {"n": n, "cache_dir": None}, check_input=False)
    written = {**cfg.model_dump(mode="json"), **old}
    folder = pool_folder(tmp_path, written)
    assert folder.finished_with(cfg)
    assert not folder.finished_with(cfg.model_copy(update={"n": n + 1}))


@pytest.mark.parametrize(
    "failure",
    [
        LLMOutputError("truncated", "hit max_tokens=48", raw='{"bio": "Ana is'),
        AttemptFailure("bio", "truncated", "hit max_tokens=48", '{"bio": "Ana is'),
    ],
    ids=["llm_output_error", "attempt_failure"],
)
def test_a_failure_becomes_a_typed_reject(failure: LLMOutputError | AttemptFailure) -> None:
    from gen.schemas import Reject

    got = Reject.from_failure(failure, record_id="p-3", index=3, stage="bio")
    assert got == Reject(
        record_id="p-3",
        index=3,
        stage="bio",
        reason="truncated",
        detail="hit max_tokens=48",
        raw='{"bio": "Ana is',
    )
    more = Reject.from_failure(failure, record_id="p-3", index=3, stage="x", detail="pool 7: cut")
    assert (more.stage, more.reason, more.detail, more.raw) == (
        "x",
        "truncated",
        "pool 7: cut",
        '{"bio": "Ana is',
    )


def test_an_attempt_failure_names_its_own_stage_and_a_model_failure_needs_one() -> None:
    from gen.schemas import Reject

    got = Reject.from_failure(
        AttemptFailure("app.Calendar", "no_valid_item", "none"), record_id="b", index=0
    )
    assert (got.stage, got.reason, got.raw) == ("app.Calendar", "no_valid_item", None)
    with pytest.raises(TypeError, match="needs a stage"):
        Reject.from_failure(LLMOutputError("backend_error", "down"), record_id="b", index=0)
