"""The Digital Context Generator's cues and CLI with a scripted LLM: cue banks and what reading
them refuses (bad banks, inputs read before any folder, reused pools), CLI forms and errors, and
goal-conditioned bundles. Bundles end to end, the WAGIBench layout, rendering, shards and
determinism are tested in test_digital_runs.py; the validators, the cue merge and the datetime
sampler in test_digital.py."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import read_jsonl
from digital_runs import (
    NAME,
    digital_script,
    goal_script,
    pool_file_fixture,  # noqa: F401  (pytest fixture pool_file)
    run_digital,
)

from gen.cli import normalize_overrides, validate
from gen.engine.runner import RunContext, run_config
from gen.errors import ConfigError, InputError
from gen.generators.digital import DigitalConfig
from gen.generators.digital.state import load_cues
from gen.llm import scripted_llm
from gen.paths import EXAMPLES
from gen.schemas.digital import App

# --------------------------------------------------------------------------- 8. cue banks


def test_shipped_cue_bank() -> None:
    cues = load_cues(EXAMPLES / "cues.jsonl")
    assert len(cues) >= 30
    assert {c["app"] for c in cues} == {a.value for a in App}
    assert len({c["cue_id"] for c in cues}) == len(cues)
    assert all(c["cue"].strip() for c in cues)


GOOD_CUE = '{"cue_id": "ok-1", "app": "Notes", "cue": "A note about bins"}'
BAD_BANKS = [
    (
        "unknown_app",
        [GOOD_CUE, '{"cue_id": "x", "app": "Fax", "cue": "hello"}'],
        2,
        "unknown app 'Fax'",
    ),
    ("bad_json", [GOOD_CUE, "", '{"cue_id": "x", "app": "Notes", '], 3, "not valid JSON"),
    ("missing_field", ['{"cue_id": "x", "app": "Notes"}'], 1, "cue_id, app and cue"),
    ("not_an_object", ['["Notes", "x"]'], 1, "cue_id, app and cue"),
    (
        "empty_cue",
        [GOOD_CUE, GOOD_CUE, '{"cue_id": "x", "app": "Notes", "cue": "  "}'],
        3,
        "empty cue",
    ),
    ("app_not_text", ['{"cue_id": "x", "app": ["Notes"], "cue": "hello"}'], 1, "unknown app"),
    ("cue_not_text", ['{"cue_id": "x", "app": "Notes", "cue": null}'], 1, "cue"),
]


@pytest.mark.parametrize(
    ("lines", "lineno", "needle"), [b[1:] for b in BAD_BANKS], ids=[b[0] for b in BAD_BANKS]
)
def test_bad_cue_bank_names_file_and_line(
    tmp_path: Path, lines: list[str], lineno: int, needle: str
) -> None:
    path = tmp_path / "bank.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_cues(path)
    assert str(e.value).startswith(f"{path}:{lineno}: ")
    assert needle in str(e.value)


def test_empty_cue_bank(tmp_path: Path) -> None:
    path = tmp_path / "bank.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="empty"):
        load_cues(path)


def test_cli_bad_cue_file_is_one_line_exit_2_before_any_model(run_gen, tmp_path: Path) -> None:
    """The cue bank is read before the persona pool is made: with a dead LLM server and a pool
    that would have to be generated, the error is still about the cue file, and no pool exists."""
    bad = tmp_path / "cues.jsonl"
    bad.write_text(GOOD_CUE + '\n{"cue_id": "x", "app": "Fax", "cue": "hi"}\n', encoding="utf-8")
    proc = run_gen(
        "digital",
        f"cue_file={bad}",
        "persona_pool=6",
        f"pool_dir={tmp_path / 'pools'}",
        "llm=openai",
        "llm.base_url=http://127.0.0.1:9/v1",
        "llm.max_retries=0",
        "progress=off",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and f"{bad}:2:" in lines[0] and "Fax" in lines[0]
    assert not (tmp_path / "pools").exists()
    assert not (tmp_path / "run").exists()  # read by the plan hook: no run folder either


def test_inputs_are_read_by_the_plan_hook_before_any_folder(
    tmp_path: Path, pool_file: Path
) -> None:
    """cue_file and persona_file are read when the run is sized: a persona file that is not
    UTF-8 was an "unexpected UnicodeDecodeError" (exit 1) from inside the run."""
    from gen.engine.registry import REGISTRY

    plan = REGISTRY[NAME].make_plan(DigitalConfig(persona_file=str(pool_file), cache_dir=None))
    assert (
        plan.n == 5 and len(plan.data.pool) == 8 and plan.data.cue_path == EXAMPLES / "cues.jsonl"
    )
    bad = tmp_path / "personas.jsonl"
    lines = pool_file.read_bytes().splitlines(keepends=True)
    bad.write_bytes(
        b"".join([*lines[:2], lines[2].replace(b'"bio":"', b'"bio":"\xe9', 1), *lines[3:]])
    )
    with pytest.raises(InputError, match=rf"^{re.escape(str(bad))}:3: not UTF-8 text"):
        REGISTRY[NAME].make_plan(DigitalConfig(persona_file=str(bad), cache_dir=None))
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"".join(lines[:3]))
    with pytest.raises(
        ConfigError, match=rf"pool at {re.escape(str(small))} has 3 usable personas"
    ):
        REGISTRY[NAME].make_plan(DigitalConfig(persona_file=str(small), cache_dir=None))


def test_a_persona_run_folder_is_read_by_its_records_not_its_manifest(
    tmp_path: Path, pool_file: Path
) -> None:
    folder = tmp_path / "pool_run"
    folder.mkdir()
    (folder / "personas.jsonl").write_bytes(pool_file.read_bytes())
    (folder / "manifest.json").write_text("[]", encoding="utf-8")  # not trusted, not needed
    from gen.engine.registry import REGISTRY

    assert (
        len(
            REGISTRY[NAME]
            .make_plan(DigitalConfig(persona_file=str(folder), cache_dir=None))
            .data.pool
        )
        == 8
    )


@pytest.mark.parametrize("manifest", ["[]", "{}", '{"config": 5}', "{not json"])
def test_a_reused_pool_whose_manifest_is_no_manifest_is_one_line(
    tmp_path: Path, pool_file: Path, manifest: str
) -> None:
    """pool_dir's pool is reused when its manifest's config matches: a manifest that is a list
    was a TypeError (exit 1); now an InputError naming it, and no pool is made over it."""
    from gen.formats.people import ensure_pool

    folder = tmp_path / "pools" / "seed0-n6"
    folder.mkdir(parents=True)
    (folder / "personas.jsonl").write_bytes(pool_file.read_bytes())
    (folder / "manifest.json").write_text(manifest, encoding="utf-8")
    cfg = DigitalConfig(
        persona_pool=6, pool_dir=str(tmp_path / "pools"), cache_dir=None, progress="off"
    )
    ctx = RunContext(NAME, cfg, tmp_path / "run")
    ctx.use(llm=scripted_llm(lambda m, s: pytest.fail("no pool may be generated")))
    with pytest.raises(InputError, match=rf"^{re.escape(str(folder / 'manifest.json'))}"):
        ensure_pool(ctx, 0, 6, str(tmp_path / "pools"))
    assert (folder / "personas.jsonl").read_bytes() == pool_file.read_bytes()


def test_the_default_pool_is_made_inside_the_run_folder_and_a_failed_one_leaves_nothing_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pool_dir`` was ``outputs/personas/pools`` under the current folder: a run whose model
    wrote nothing usable still left a pool folder there. Now the pool is the run's own."""
    from gen.errors import GenError

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    cfg = DigitalConfig(n=1, persona_pool=6, cache_dir=None, progress="off")
    assert cfg.pool_dir is None
    ctx = RunContext(NAME, cfg, tmp_path / "run")
    ctx.use(llm=scripted_llm(lambda m, s: "not a persona", sampling=cfg.llm))
    with pytest.raises(GenError, match="pool"):
        run_config(NAME, cfg, tmp_path / "run", ctx=ctx, quiet=True)
    assert list(work.iterdir()) == []
    assert (tmp_path / "run" / "pools" / "seed0-n6" / "manifest.json").is_file()
    with pytest.raises(ValueError, match="pool_dir is empty"):
        DigitalConfig(pool_dir=" ")


def test_missing_cue_file(tmp_path: Path, pool_file: Path) -> None:
    from gen.errors import MissingInputError

    with pytest.raises(MissingInputError, match="cue_file"):
        run_digital(tmp_path, pool_file, n=1, cue_file=str(tmp_path / "absent.jsonl"))


def test_cue_bank_respects_apps(tmp_path: Path, pool_file: Path) -> None:
    """Bank cues of apps that are not generated are never picked."""
    result, _ = run_digital(tmp_path, pool_file, n=3, cue_rate=1.0, apps=["Search", "Music"])
    assert result.accepted == 3
    for b in read_jsonl(tmp_path / "digital.jsonl"):
        assert b["cue"]["app"] in ("Search", "Music")


# --------------------------------------------------------------------------- 9. CLI forms


@pytest.mark.parametrize("form", ["+persona_pool=50", "persona_pool=50", "++persona_pool=50"])
def test_override_forms(form: str) -> None:
    overrides = normalize_overrides([form])
    assert [o.lstrip("+") for o in overrides] == ["persona_pool=50"]
    settings = validate(NAME, overrides)
    assert isinstance(settings, DigitalConfig)
    assert settings.persona_pool == 50


def test_composed_defaults_match_the_config_class() -> None:
    settings = validate(NAME, [])
    defaults = DigitalConfig()
    for key in (
        "persona_pool",
        "apps",
        "cue_rate",
        "counts",
        "min_items",
        "hour_weights",
        "window_past_days",
        "window_future_days",
        "cue_recent_minutes",
        "items_per_call",
    ):
        assert getattr(settings, key) == getattr(defaults, key), key


CLI_ERRORS = [
    (["+persona_pool=5"], ["persona_pool"]),
    (['cue="x"'], ["cue", "cue_app"]),
    (["apps=[Calendar,Foo]"], ["apps", "Foo"]),
    (["cue_app=Notes", "cue=x", "apps=[Calendar]"], ["cue_app", "Notes"]),
    (["date_start=2025-05-01", "date_end=2025-04-01"], ["date_end"]),
]


@pytest.mark.parametrize(("args", "needles"), CLI_ERRORS, ids=[" ".join(a) for a, _ in CLI_ERRORS])
def test_cli_errors_exit_2(run_gen, tmp_path: Path, args: list[str], needles: list[str]) -> None:
    proc = run_gen(NAME, *args, f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError):  # and the same in process
        validate(NAME, args)


# --------------------------------------------------------------------- 10. goal-conditioned bundles


GOALS = [
    {
        "goal_id": "g-msg",
        "group": "dinner_plans",
        "client_tag": "rec-0001",
        "goal": {
            "type": "communication",
            "action": "message",
            "target": "Alex",
            "content": "dinner at the Thai place",
        },
    },
    {
        "goal_id": "g-dir",
        "group": "airport_trip",
        "goal": {"type": "find_directions", "to": "SeaTac airport departures"},
    },
    {
        "goal_id": "g-lamp",
        "group": "lights",
        "goal": {"type": "control_environment", "target": "lamp", "value": "off"},
    },
    {
        "goal_id": "g-music",
        "group": "calm",
        "goal": {"type": "entertain", "modality": "audio", "content": "calm piano"},
    },
    {
        "goal_id": "g-notes",
        "group": "grocery",
        "goal": {"type": "store_memory", "content": "buy oat milk"},
    },
]


def goal_bank(tmp_path: Path) -> Path:
    path = tmp_path / "goals.jsonl"
    path.write_text("".join(json.dumps(g) + "\n" for g in GOALS))
    return path


def run_goals(out: Path, pool: Path, goals: Path, script=None, **cfg: Any):
    from fakes import FakeEmbedder

    settings = DigitalConfig(
        **{
            "cache_dir": None,
            "progress": "off",
            "persona_file": str(pool),
            "goals": str(goals),
            **cfg,
        }
    )
    ctx = RunContext(NAME, settings, out).use(
        llm=scripted_llm(script or goal_script(), sampling=settings.llm), embedder=FakeEmbedder()
    )
    return run_config(NAME, settings, out, ctx=ctx, quiet=True), ctx


def test_goal_app_mapping() -> None:
    from gen.generators.digital.goals import goal_app
    from gen.schemas.distractors import GoalRow

    cfg = DigitalConfig()
    rng = random.Random(0)

    def app_of(goal: dict[str, Any]) -> App | None:
        return goal_app(
            cfg, GoalRow.model_validate({"goal_id": "x", "group": "g", "goal": goal}).goal, rng
        )

    # the app that prompts the goal, never the one that performs it (Search, Music, Videos, Maps)
    assert (
        app_of({"type": "communication", "action": "message", "target": "A", "content": "c"})
        is App.Calendar
    )
    assert (
        app_of({"type": "temporal_attention", "action": "set", "time": "5 min", "content": "tea"})
        is App.Messaging
    )
    assert app_of({"type": "entertain", "modality": "audio", "content": "x"}) is App.Messaging
    assert (
        app_of({"type": "search", "source": "world", "query": "q", "query_item": "i"})
        is App.Messaging
    )
    assert (
        app_of({"type": "search", "source": "timeline", "query": "q", "query_item": "i"})
        is App.Notes
    )
    assert app_of({"type": "shop", "content": "x"}) is App.Notes
    assert app_of({"type": "find_directions", "to": "x"}) is App.Calendar
    assert app_of({"type": "control_environment", "target": "lamp", "value": "off"}) is None
    assert (
        goal_app(
            DigitalConfig(apps=[App.Calendar]),
            GoalRow.model_validate(
                {"goal_id": "x", "group": "g", "goal": {"type": "find_directions", "to": "x"}}
            ).goal,
            rng,
        )
        is App.Calendar
    )
    with pytest.raises(ValueError, match="goal_apps: unknown action type"):
        DigitalConfig(goal_apps={"teleport": [App.Maps]})


def test_goal_conditioned_bundles(tmp_path: Path, pool_file: Path) -> None:
    """One bundle per goal; the cued app follows the mapping; a person the goal names is a related
    persona and appears in the cue item; the goal row's keys are the bundle's WAGIBench keys; a
    goal that needs no digital context gives an uncued bundle, marked as such."""
    goals = goal_bank(tmp_path)
    # the bag-of-words fake cannot tell a one-word hint from the words every state shares, so the
    # rank test is off here (cue_rank_max = the bank's size); the next test keeps it
    result, _ = run_goals(tmp_path / "run", pool_file, goals, cue_rank_max=len(GOALS))
    assert result.requested == len(GOALS) and result.accepted == len(GOALS), read_jsonl(
        tmp_path / "run" / "rejects.jsonl"
    )
    bundles = {b["goal"]["goal_id"]: b for b in read_jsonl(tmp_path / "run" / "digital.jsonl")}
    msg = bundles["g-msg"]  # plans with the person to write to, about the goal's word
    assert (
        msg["cue"]["app"] == "Calendar" and msg["cue"]["cue"] == "plans with Alex about the dinner"
    )
    assert "dinner" in msg["apps"]["Calendar"]["key_events"][0]["title"]
    music = bundles["g-music"]  # a message from a related persona sharing a link
    assert music["cue"]["app"] == "Messaging" and music["cue"]["cue"].endswith(
        "shares a link about piano"
    )
    assert music["goal"]["person"] in {r["persona"]["name"] for r in music["related_personas"]}
    assert (
        music["goal"]["person"]
        in music["apps"]["Messaging"]["key_conversations"][0]["participants"]
    )
    assert bundles["g-dir"]["cue"] | {"person": None} == {
        "cue_id": "g-dir",
        "app": "Calendar",
        "person": None,
        "cue": "an appointment at the departures",
    }
    assert (
        bundles["g-notes"]["cue"]["app"] == "Messaging"
        and bundles["g-notes"]["goal"]["word"] == "milk"
    )
    assert all(b["goal"]["action_share"] <= 0.5 for b in bundles.values() if b["goal"]["app"])
    lamp = bundles["g-lamp"]
    assert lamp["cue"] is None and lamp["goal"]["app"] is None
    state = json.loads((tmp_path / "run" / "digital_state.json").read_text())
    metas = {(v["meta"]["client_tag"], v["meta"]["scenario"]["shortname"]) for v in state.values()}
    assert ("rec-0001", "dinner_plans") in metas and ("g-dir", "airport_trip") in metas
    assert (
        result.manifest["validators"]["goal.cued"] == 4
        and result.manifest["validators"]["goal.uncued"] == 1
    )
    # the same seed gives the same bundles
    run_goals(tmp_path / "again", pool_file, goals, cue_rank_max=len(GOALS))
    assert (tmp_path / "run" / "digital.jsonl").read_bytes() == (
        tmp_path / "again" / "digital.jsonl"
    ).read_bytes()


def test_a_cue_that_points_elsewhere_is_rejected(tmp_path: Path, pool_file: Path) -> None:
    """The default script writes cue items unrelated to the goal ("Cue spot …"): the place the
    goal names is missing, and the key-only state does not single out its goal."""
    result, _ = run_goals(
        tmp_path / "run", pool_file, goal_bank(tmp_path), script=digital_script(), n=4
    )
    reasons = {r["index"]: r["reason"] for r in read_jsonl(tmp_path / "run" / "rejects.jsonl")}
    assert reasons[1] == "cue_misses_goal_entity"
    assert (
        set(reasons.values()) <= {"cue_misses_goal_entity", "cue_not_specific"}
        and len(reasons) >= 2
    )
    assert result.manifest["validators"].get("goal.uncued") == 1  # the lamp has no digital context
