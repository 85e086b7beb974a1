"""The ``scenarios`` generator (context-tracking scenarios in the benchmark's released format) run
end to end: regeneration, reject accounting, the field order, contrast pairs, model checks, the
lock and its verify path, determinism, the benchmark's own validator on gen's output, and the
audit of a scenarios run. The LLM is a fake writer that reads each request and answers within the
rules unless told to plant a fault. The skeleton and the rules one by one are tested in
test_scenarios.py."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    CONTEXT_BENCH,
    check_run_folder,
    context_bench_failures,
    context_bench_validator,
    read_jsonl,
)
from fakes import FakeEmbedder
from scenario_runs import SK, settings

from gen.contextbench.rules import (
    RULES,
    bank_problems,
    load_vocabulary,
    object_names_in_camera,
    rule_problems,
)
from gen.engine.runner import RunContext, run_config
from gen.errors import ConfigError, InputError
from gen.generators.scenarios import LOCK, plan
from gen.generators.scenarios.examples import examples
from gen.generators.scenarios.skeleton import cell_counts
from gen.generators.scenarios.stages import check_situations, tidy_situations
from gen.llm import OpenAIConfig, scripted_llm
from gen.paths import PROMPTS
from gen.schemas.scenarios import CHANGE_TYPES, RECORD_FIELDS, VISIBLE_FIELDS, ScenarioRecord

NAME = "scenarios"
EXAMPLES_JSONL = CONTEXT_BENCH / "examples.jsonl"

# --------------------------------------------------------------------------- the fake writer

SYLLABLES = ["ka", "lo", "mi", "ru", "te", "zo", "ne", "pa", "vi", "du", "sho", "ber"]
MARKERS = {
    "situations": "Plan two moments of it.",
    "camera": "Describe what the glasses' camera sees at each moment",
    "speech": "Write what the person says aloud",
    "follow_up": "The same two moments, with a different second question.",
    "identify": "Name the main object, place or screen in 1 to 4 words.",
}


def word(*parts: Any) -> str:
    """A made-up word from a hash: never an object name, never a gold phrase by accident."""
    h = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return "".join(SYLLABLES[b % len(SYLLABLES)] for b in h[:5])


class Fake:
    """A scripted writer. ``faults`` plants one violation per name: ``{fault: "first"}`` on the
    first generation of that request only, ``{fault: "always"}`` on every one."""

    def __init__(self, faults: dict[str, str] | None = None):
        self.faults = faults or {}
        self.names: dict[str, str] = {}  # camera text -> the name it shows (for identification)
        self.made: list[str] = []  # every referent name written (for the leak fault)
        self.calls: Counter[str] = Counter()
        self.seen: Counter[str] = Counter()
        self.turn_2: dict[str, str] = {}  # turn_1_user -> turn_2_user (member A's, for follow_same)

    def on(self, fault: str, request: str) -> bool:
        mode = self.faults.get(fault)
        return mode == "always" or (mode == "first" and self.seen[request] == 1)

    def __call__(self, messages: list[dict[str, str]], seed: int) -> str | tuple[str, str]:
        if messages[0]["content"].startswith("You are an assistant helping someone"):
            self.calls["leak"] += 1
            return (
                ("Try " + ", ".join(self.made) + ".")
                if "leak" in self.faults
                else "Happy to help with that."
            )
        request = [m for m in messages if m["role"] == "user"][-1]["content"]
        stage = next(s for s, marker in MARKERS.items() if marker in request)
        self.calls[stage] += 1
        self.seen[request] += 1
        return getattr(self, stage)(request, seed)

    def situations(self, req: str, seed: int) -> str | tuple[str, str]:
        if "truncated" in self.faults:
            return '{"earlier": {"name": "a', "length"
        w1, w2 = word(req, seed, 1), word(req, seed, 2)

        def sit(w: str, noun: str) -> dict[str, Any]:
            self.made.append(f"{w} {noun}")
            return {
                "name": f"{w} {noun}",
                "technique": [f"twist the {w} dial", f"lift the {w} flap"],
                "state": [f"{w} cover open", f"{w} dust on top"],
            }

        out: dict[str, Any] = {"earlier": sit(w1, "gadget")}
        if "blank_category" in self.faults:
            out["earlier"]["technique"] = ["   ", "   "]
        if "meanwhile (the scene" in req:
            out["meanwhile"] = f"{word(req, seed, 5)} hall"
        if "now (what it shows later)" in req or "now (the scene later)" in req:
            out["now"] = sit(w2, "widget")
            if "overlap" in self.faults:  # the same referent twice
                out["now"]["name"] = out["earlier"]["name"]
            if "shared_phrase" in self.faults:
                out["now"]["state"][0] = out["earlier"]["state"][0]
        if "candidates (2 or 3 things" in req:
            out["candidates"] = [f"{word(req, seed, 3)} gizmo", f"{word(req, seed, 4)} gizmo"]
            out["clarify_indicators"] = [
                "which one do you mean",
                "can you show me",
                "hard to tell from here",
            ]
        if "hidden_detail (that detail" in req:
            out["hidden_detail"] = f"the {w1} code on the base"
            out["abstain_indicators"] = [
                "I could not see that",
                "it was turned away",
                "not visible to me",
            ]
        return json.dumps(out)

    def camera(self, req: str, seed: int) -> str:
        fields = ["context_image"] if "context_image:" in req else []
        fields += ["turn_1_image", "turn_2_image"] + (
            ["turn_2_image_b"] if "turn_2_image_b:" in req else []
        )
        out: dict[str, str] = {}
        out_names: dict[str, str] = {}
        for f in fields:
            line = re.search(rf"^{f}: (.*)$", req, re.M)
            shown = line.group(1) if line else ""
            name = re.sub(r"^before the conversation: |^a hand holds ", "", shown)
            name = name.split(" (")[0].rstrip(".").split(";")[0]
            text = (
                f"A rounded {word(req, seed, f)} shape with ribbed grey sides rests on a wooden "
                "bench, "
                f"a hand turning it slowly near the edge while light falls across its top."
            )
            if f == "turn_1_image" and self.on("camera_name", req):
                text += f" It is a {name}."
            if f == "turn_2_image" and self.on("camera_refers", req):
                text += " The shape is larger than before."
            if f == "turn_2_image" and self.on("camera_functional", req):
                text += " The cutting tool lies beside it."
            if f == "turn_2_image" and self.on("camera_eval", req):
                text += " The hand grips it correctly."
            if f == "turn_1_image" and self.on("echo", req):
                text = examples()[0]["camera"]["turn_1_image"]
            if f == "turn_1_image" and self.on("repetitive", req):
                text = "a grey shape on a bench " * 4
            out[f] = text
            self.names[text] = (
                out_names.get("turn_2_image", name) if f == "turn_2_image_b" else name
            )
            out_names[f] = name
        if self.on("same_images", req):
            out["turn_2_image"] = out["turn_1_image"]
        return json.dumps(out)

    def speech(self, req: str, seed: int) -> str:
        pw = word(req, seed, "t2")
        out = {
            "turn_1_user": f"Is this set up all right, {word(req, seed, 't1')}?",
            "turn_2_user": f"What do I do with this one next, {pw}?",
        }
        if self.on("dup_turn_2", req):
            out["turn_2_user"] = "What do I do with this one next?"
        now = re.search(r"turn_2_user: a question about the (.+?) at the second moment", req)
        if self.on("speech_gold", req) and now:
            out["turn_2_user"] = f"Is this {now.group(1)} ready?"
        if self.on("announce", req):
            out["turn_2_user"] = f"I switched to this one, what now, {pw}?"
        if self.on("speech_property", req):
            out["turn_2_user"] = f"Is the red one ready now, {pw}?"
        if self.on("speech_name", req):
            out["turn_1_user"] = f"Should I use the screwdriver on this, {word(req, seed, 't1')}?"
        if self.on("not_deictic", req):
            out["turn_2_user"] = f"What should I do next, {pw}?"
        if self.on("empty", req):
            out["turn_1_user"] = "string"
        out["turn_3_repair_prompt"] = self.repair(req)
        self.turn_2[out["turn_1_user"]] = out["turn_2_user"]
        if self.on("repair_unnamed", req):
            out["turn_3_repair_prompt"] = "I mean the other thing."
        if "turn_3_repair_prompt_deictic:" in req:
            out["turn_3_repair_prompt_deictic"] = "I mean this one, right here, right now."
        return json.dumps(out)

    def follow_up(self, req: str, seed: int) -> str:
        out = {
            "turn_2_user": f"What about the one I had before, {word(req, seed, 'b')}?",
            "turn_3_repair_prompt": self.repair(req),
        }
        if self.on("follow_same", req):  # member A's own turn 2
            out["turn_2_user"] = self.turn_2[
                json.loads(re.search(r'first question was: (".*")', req).group(1))
            ]
        return json.dumps(out)

    @staticmethod
    def repair(req: str) -> str:
        m = re.search(r"naming both: the (.+?) (now|from before), not the (.+?)\.$", req, re.M)
        if m:
            return f"I mean the {m.group(1)} {m.group(2)}, not the {m.group(3)}."
        m = re.search(r"naming the (.+?) they mean\.$", req, re.M)
        if m:
            return f"I mean the {m.group(1)} from before."
        m = re.search(r"they mean (.+) of the (.+?)\.$", req, re.M)
        if m:
            return f"I mean {m.group(1)} of the {m.group(2)}."
        return "Could you ask me to open my hand first?"

    def identify(self, req: str, seed: int) -> str:
        text = re.search(r"Camera: (.*)\nName the main", req, re.S).group(1)
        name = self.names.get(text, "unknown thing")
        if "identify_wrong" in self.faults:
            name = "banana peel"
        return json.dumps({"name": name})


def run_scenarios(out: Path, fake: Fake | None = None, **kw: Any) -> tuple[Any, RunContext, Fake]:
    cfg = settings(**kw)
    fake = fake or Fake()
    ctx = RunContext(NAME, cfg, out)
    ctx.use(llm=scripted_llm(fake, sampling=cfg.llm), embedder=FakeEmbedder())
    return run_config(NAME, cfg, out, ctx=ctx, quiet=True), ctx, fake


def funnel_row(manifest: dict[str, Any], stage: str, rule: str) -> dict[str, Any]:
    return next(
        r for r in manifest[NAME]["funnel"]["rules"] if (r["stage"], r["rule"]) == (stage, rule)
    )


# --------------------------------------------------------------------------- end to end


ONE_PER_SHIFT_TYPE = {
    "object_in_hand": {"current": 1},
    "object_state": {"current": 1},
    "sequential_task": {"current": 1},
    "location": {"current": 1},
    "object_in_view": {"current": 1},
    "absent_referent": {"prior": 1},
    "screen_content": {"current": 1},
    "cross_session_reference": {"prior": 1},
}


def test_end_to_end_one_per_shift_type(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result, _, fake = run_scenarios(out, distribution=ONE_PER_SHIFT_TYPE)
    manifest = check_run_folder(out, NAME, 8, hydra=False)
    rows = read_jsonl(out / "scenarios.jsonl")
    assert len(rows) == 8 and result.rejected == 0
    for r in rows:
        assert tuple(r) == RECORD_FIELDS
        assert tuple(r["gold"]) == (
            "current_answers",
            "prior_answers",
            "clarify_indicators",
            "abstain_indicators",
        )
        ScenarioRecord.model_validate(r)
        assert (r["context_image"] is not None) == (r["change_type"] == "cross_session_reference")
    assert [r["scenario_id"] for r in rows] == [f"sc-{i:02d}" for i in range(1, 9)]
    checks = read_jsonl(out / "scenario_checks.jsonl")
    assert [c["scenario_id"] for c in checks] == [r["scenario_id"] for r in rows]
    for c, r in zip(checks, rows, strict=True):
        assert c["status"] == "accepted" and c["attempts"]["situations"] == 1
        assert rule_problems(r, categories=c["categories"]) == []
        assert c["identification"] and all(x["pass"] for x in c["identification"])
        assert {x["model"] for x in c["leak"]} == {"SmolLM2-135M-Instruct.Q4_1"}
    f = manifest[NAME]["funnel"]
    assert f["accepted_units"] == 8
    assert {(r["stage"], r["rule"]) for r in f["rules"]} == {
        (s, r) for s, r, _ in RULES if s != "follow_up"
    }
    assert funnel_row(manifest, "speech", "gold_in_speech") == {
        **funnel_row(manifest, "speech", "gold_in_speech"),
        "reached": 8,
        "first_try": 8,
        "final": 8,
    }
    assert funnel_row(manifest, "speech", "semantic_leak")["reached"] == 8
    assert funnel_row(manifest, "camera", "not_identifiable")["reached"] == 8
    assert f["stages"]["camera"] == {
        "units": 8,
        "generations": 8,
        "passed_on_first_generation": 8,
        "llm_errors": 0,
    }
    # prompts and the rule data are hashed into the manifest
    assert {
        "scenarios/object_names.txt",
        "scenarios/examples.json",
        "scenarios/identify.jinja",
        "scenarios/leak.jinja",
    } <= set(manifest["prompts"])
    assert fake.calls["identify"] == sum(len(c["identification"]) for c in checks)


@pytest.mark.parametrize("subset", ["bank", "contrast"])
def test_every_cell_is_written_and_passes_every_rule(tmp_path: Path, subset: str) -> None:
    """All 32 shift type x target cells (the rules forbid none), through the stages and rules."""
    every = {ct: {t: 1 for t in ("current", "prior", "clarify", "abstain")} for ct in CHANGE_TYPES}
    out = tmp_path / subset
    result, _, _ = run_scenarios(out, distribution=every, subset=subset)
    rows = read_jsonl(out / "scenarios.jsonl")
    assert result.rejected == 0 and len(rows) == 32
    assert Counter((r["change_type"], r["target_context"]) for r in rows) == {
        (ct, t): 1 for ct in CHANGE_TYPES for t in ("current", "prior", "clarify", "abstain")
    }
    checks = {c["scenario_id"]: c for c in read_jsonl(out / "scenario_checks.jsonl")}
    for r in rows:
        assert rule_problems(r, categories=checks[r["scenario_id"]]["categories"]) == []
        frames = {x["field"] for x in checks[r["scenario_id"]]["identification"]}
        assert ("turn_2_image" in frames) == (
            r["target_context"] != "clarify"
            and not (r["target_context"] == "abstain" and r["change_type"] == "absent_referent")
        )
        if r["target_context"] == "abstain" and r["change_type"] not in (
            "absent_referent",
            "cross_session_reference",
        ):
            assert r["gold"]["current_answers"] and r["gold"]["abstain_indicators"]
    assert sum(r["pair_id"] is not None for r in rows) == (12 if subset == "contrast" else 0)
    assert context_bench_failures(context_bench_validator(), rows) == []


def test_the_lock_matches_the_files_and_verify_finds_drift(tmp_path: Path, run_gen) -> None:
    out = tmp_path / "run"
    conditions = tmp_path / "prompt_conditions.json"
    conditions.write_text('[{"name": "baseline", "system_prompt": "Be helpful."}]\n')
    run_scenarios(out, n=3, prompt_conditions=str(conditions))
    lock = json.loads((out / LOCK).read_text())
    assert set(lock) >= {
        "benchmark_version",
        "schema_revision",
        "scenarios_sha256",
        "prompt_conditions_sha256",
        "judge_prompt_version",
        "judge_prompt_sha256",
    }
    assert lock["judge_prompt_version"] == "context-judge-1" and lock["schema_revision"] == 1
    assert (
        lock["judge_prompt_sha256"]
        == hashlib.sha256((PROMPTS / "judge" / "context.jinja").read_bytes()).hexdigest()
    )
    assert (
        lock["scenarios_sha256"]
        == hashlib.sha256((out / "scenarios.jsonl").read_bytes()).hexdigest()
    )
    assert lock["prompt_conditions_sha256"] == hashlib.sha256(conditions.read_bytes()).hexdigest()
    assert (out / "prompt_conditions.json").read_bytes() == conditions.read_bytes()
    ok = run_gen("scenarios", "verify", f"input={out}", f"hydra.run.dir={tmp_path / 'v1'}")
    assert ok.returncode == 0, ok.stderr
    assert "verify" in ok.stdout and "ok" in ok.stdout
    assert len(read_jsonl(tmp_path / "v1" / "verify.jsonl")) == 5
    text = (out / "scenarios.jsonl").read_text()
    (out / "scenarios.jsonl").write_text(text.replace("?", "!", 1))
    (out / "prompt_conditions.json").write_text("[]\n")
    bad = run_gen("scenarios", "verify", f"input={out}", f"hydra.run.dir={tmp_path / 'v2'}")
    assert bad.returncode == 1
    assert (
        "DRIFT scenarios_sha256 mismatch" in bad.stdout
        and "DRIFT prompt_conditions_sha256" in bad.stdout
    )
    assert "2 lock entries drifted: scenarios_sha256; prompt_conditions_sha256" in bad.stderr
    rejects = read_jsonl(tmp_path / "v2" / "rejects.jsonl")
    assert {r["record_id"] for r in rejects} == {"scenarios_sha256", "prompt_conditions_sha256"}
    # a bank locked under another judge prompt is judged incomparably: drift
    locked = json.loads((out / LOCK).read_text())
    (out / LOCK).write_text(json.dumps({**locked, "judge_prompt_sha256": "0" * 64}))
    judge = run_gen("scenarios", "verify", f"input={out}", f"hydra.run.dir={tmp_path / 'v4'}")
    assert judge.returncode == 1 and "DRIFT judge_prompt_sha256 mismatch" in judge.stdout
    # a lock from before gen had a judge (null there) is not checked on it
    (out / LOCK).write_text(json.dumps({**locked, "judge_prompt_sha256": None}))
    old = run_gen("scenarios", "verify", f"input={out}", f"hydra.run.dir={tmp_path / 'v5'}")
    assert "judge_prompt_sha256" not in old.stdout + old.stderr
    (out / LOCK).unlink()
    missing = run_gen("scenarios", "verify", f"input={out}", f"hydra.run.dir={tmp_path / 'v3'}")
    assert missing.returncode == 2 and "holds no MANIFEST.lock.json" in missing.stderr


def test_validator_passes_on_output(tmp_path: Path) -> None:
    """The benchmark's own validate_scenarios.py (checks 1, 2, 3, 6) on a full default bank of
    50, with its frozen change_type distribution enforced, and on a default contrast subset of
    20."""
    validator = context_bench_validator()
    run_scenarios(tmp_path / "bank")
    rows = read_jsonl(tmp_path / "bank" / "scenarios.jsonl")
    assert len(rows) == 50
    assert context_bench_failures(validator, rows, enforce_distribution=True) == []
    run_scenarios(tmp_path / "contrast", subset="contrast")
    contrast = read_jsonl(tmp_path / "contrast" / "scenarios.jsonl")
    assert len(contrast) == 20 and context_bench_failures(validator, contrast) == []
    # the validator does fail on a planted break, so passing means something
    broken = [
        {**rows[0], "turn_2_user": f"Is this {rows[0]['gold']['current_answers'][0]} ok?"},
        *rows[1:],
    ]
    assert [f["check"] for f in context_bench_failures(validator, broken)] == ["token_leakage"]


def test_field_order_is_the_released_one() -> None:
    assert set(VISIBLE_FIELDS) < set(RECORD_FIELDS) and not set(VISIBLE_FIELDS) & {
        "gold",
        "notes",
        "target_context",
    }
    if not EXAMPLES_JSONL.is_file():
        pytest.skip("the released examples are not in ../shared")
    for row in read_jsonl(EXAMPLES_JSONL):
        assert tuple(row) == RECORD_FIELDS
        ScenarioRecord.model_validate(row)


@pytest.mark.parametrize(
    ("fault", "stage", "rule"),
    [
        ("camera_name", "camera", "object_name_in_camera"),
        ("camera_refers", "camera", "camera_refers_to_turn_1"),
        ("camera_eval", "camera", "camera_evaluates_technique"),
        ("same_images", "camera", "no_visible_shift"),
        ("echo", "camera", "example_echo"),
        ("repetitive", "camera", "text_gates"),  # the shared gate fires first
        ("speech_gold", "speech", "gold_in_speech"),
        ("announce", "speech", "shift_announced"),
        ("not_deictic", "speech", "speech_not_deictic"),
        ("repair_unnamed", "speech", "repair_not_named"),
        ("empty", "speech", "empty_text"),
    ],
)
def test_a_broken_first_draft_is_regenerated(
    tmp_path: Path, fault: str, stage: str, rule: str
) -> None:
    out = tmp_path / "run"
    result, _, _ = run_scenarios(
        out,
        Fake({fault: "first"}),
        n=2,
        distribution={"location": {"current": 1}, "object_in_hand": {"current": 1}},
    )
    assert result.accepted == 2
    manifest = json.loads((out / "manifest.json").read_text())
    row = funnel_row(manifest, stage, rule)
    assert (row["reached"], row["first_try"], row["final"]) == (2, 0, 2)
    checks = read_jsonl(out / "scenario_checks.jsonl")
    assert all(c["attempts"][stage] == 2 for c in checks)
    assert all(
        c["rules"][f"{stage}.{rule}"] == {"first": False, "final": True, "evaluations": 2}
        for c in checks
    )
    assert manifest["validators"][f"{stage}.{rule}"] == 2


@pytest.mark.parametrize(
    ("fault", "stage", "rule", "also"),
    [
        ("speech_gold", "speech", "gold_in_speech", None),
        ("speech_property", "speech", "speech_describes_properties", None),
        ("speech_name", "speech", "object_name_in_speech", None),
        ("camera_functional", "camera", "camera_functional_label", None),
        ("camera_name", "camera", "object_name_in_camera", None),
        ("overlap", "situations", "gold_lists_overlap", None),
        ("blank_category", "situations", "empty_text", "three_categories"),
        ("truncated", "situations", "truncated", None),
        ("identify_wrong", "camera", "not_identifiable", None),
        ("leak", "speech", "semantic_leak", None),
    ],
)
def test_a_rule_broken_on_every_attempt_rejects_with_its_name(
    tmp_path: Path, fault: str, stage: str, rule: str, also: str | None
) -> None:
    out = tmp_path / "run"
    result, _, fake = run_scenarios(out, Fake({fault: "always"}), n=2, attempts=2)
    check_run_folder(out, NAME, 2, hydra=False)
    assert result.accepted == 0 and result.rejected == 2
    rejects = read_jsonl(out / "rejects.jsonl")
    assert {(r["stage"], r["reason"]) for r in rejects} == {(stage, rule)}
    assert all(r["record_id"] in r["detail"] for r in rejects)
    checks = read_jsonl(out / "scenario_checks.jsonl")
    assert [(c["status"], c["reason"]) for c in checks] == [("rejected", rule)] * 2
    assert all(c["attempts"][stage] == 2 for c in checks)
    for r in (rule, also):
        if r and r != "truncated":
            assert all(
                c["rules"][f"{stage}.{r}"] == {"first": False, "final": False, "evaluations": 2}
                for c in checks
            )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["rejects_by_reason"] == {rule: 2}
    assert manifest[NAME]["funnel"]["rejected_by"] == {f"{stage}.{rule}": 2}
    assert manifest[NAME]["lock"]["scenarios_sha256"] == hashlib.sha256(b"").hexdigest()


def test_shared_phrases_are_dropped_and_counted(tmp_path: Path) -> None:
    sit = {
        "earlier": {
            "name": "apple tree",
            "technique": ["pick the apple", "cut it into wedges"],
            "state": ["brown fruit", "fresh fruit", "apple tree"],
        },
        "now": {
            "name": "banana tree",
            "technique": ["pick the banana", "Cut it into wedges."],
            "state": ["yellow fruit", "fresh fruit", "yellow fruit"],
        },
    }
    tidy, dropped = tidy_situations(sit)
    assert dropped == 6  # 2 shared in each, the earlier's own name, a repeat
    assert tidy["earlier"] == {
        "name": "apple tree",
        "technique": ["pick the apple"],
        "state": ["brown fruit"],
    }
    assert tidy["now"] == {
        "name": "banana tree",
        "technique": ["pick the banana"],
        "state": ["yellow fruit"],
    }
    assert check_situations(SK, tidy)[1] == []
    assert sit["earlier"]["state"][1] == "fresh fruit"  # the draft itself is left as it was
    emptied, _ = tidy_situations({**sit, "now": {**sit["now"], "technique": ["pick the apple"]}})
    assert "three_categories" in {r for r, _ in check_situations(SK, emptied)[1]}
    result, _, _ = run_scenarios(tmp_path / "run", Fake({"shared_phrase": "always"}), n=2)
    assert result.accepted == 2
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["validators"]["situations.phrases_dropped"] == 4
    for row in read_jsonl(tmp_path / "run" / "scenarios.jsonl"):
        assert not set(row["gold"]["current_answers"]) & set(row["gold"]["prior_answers"])


@pytest.mark.parametrize("fault", ["identify_wrong", "leak"])
def test_model_checks_record_only_or_off(tmp_path: Path, fault: str) -> None:
    result, _, _ = run_scenarios(
        tmp_path / "rec", Fake({fault: "always"}), n=2, model_checks="record"
    )
    assert result.accepted == 2
    checks = read_jsonl(tmp_path / "rec" / "scenario_checks.jsonl")
    if fault == "identify_wrong":
        assert all(
            not x["pass"] and x["answer"] == "banana peel"
            for c in checks
            for x in c["identification"]
        )
    else:
        assert all(x["leak"] and x["hits"] for c in checks for x in c["leak"])
    result, _, fake = run_scenarios(
        tmp_path / "off", Fake({fault: "always"}), n=2, model_checks="off"
    )
    assert result.accepted == 2 and fake.calls["identify"] == 0 and fake.calls["leak"] == 0


def test_leak_check_skips_targets_not_listed(tmp_path: Path) -> None:
    _, _, fake = run_scenarios(
        tmp_path / "run",
        Fake({"leak": "always"}),
        n=1,
        distribution={"absent_referent": {"abstain": 1}},
    )
    assert fake.calls["leak"] == 0
    checks = read_jsonl(tmp_path / "run" / "scenario_checks.jsonl")
    assert checks[0]["status"] == "accepted" and checks[0]["leak"] == []
    # turn 2 of an abstain scenario shows no referent: only turn 1 is identified
    assert [x["field"] for x in checks[0]["identification"]] == ["turn_1_image"]


def test_identical_turn_2_across_the_bank_is_regenerated_in_index_order(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result, _, _ = run_scenarios(out, Fake({"dup_turn_2": "first"}), n=3)
    assert result.accepted == 3
    rows = read_jsonl(out / "scenarios.jsonl")
    assert len({r["turn_2_user"] for r in rows}) == 3
    assert rows[0]["turn_2_user"] == "What do I do with this one next?"  # the first keeps its text
    checks = read_jsonl(out / "scenario_checks.jsonl")
    assert [c["attempts"]["speech"] for c in checks] == [1, 2, 2]
    assert [c["rules"]["speech.duplicate_turn_2"]["first"] for c in checks] == [True, False, False]
    row = funnel_row(json.loads((out / "manifest.json").read_text()), "speech", "duplicate_turn_2")
    assert (row["reached"], row["first_try"], row["final"]) == (3, 1, 3)


def test_existing_bank_counts_for_ids_and_turn_2(tmp_path: Path) -> None:
    first = tmp_path / "first"
    run_scenarios(first, Fake({"dup_turn_2": "always"}), n=1)
    with pytest.raises(ConfigError, match="sc-01 is already in existing=.*use id_start=2"):
        plan(settings(n=2, existing=str(first)))
    second = tmp_path / "second"
    # every first draft repeats the existing scenario's turn 2; the bank knows it and regenerates
    result, _, _ = run_scenarios(
        second, Fake({"dup_turn_2": "first"}), n=2, id_start=2, existing=str(first)
    )
    assert result.accepted == 2
    both = read_jsonl(first / "scenarios.jsonl") + read_jsonl(second / "scenarios.jsonl")
    assert [r["scenario_id"] for r in both] == ["sc-01", "sc-02", "sc-03"]
    assert bank_problems(both) == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"scenario_id": "sc-01"}\n[1, 2]\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: scenario_id"):
        plan(settings(existing=str(bad)))


def test_contrast_pairs_share_turn_1_and_split_current_prior(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result, _, _ = run_scenarios(
        out, subset="contrast", distribution={"object_in_hand": {"current": 2, "prior": 2}}
    )
    check_run_folder(out, NAME, 2, hydra=False, one_per_index=False)
    rows = read_jsonl(out / "scenarios.jsonl")
    assert [r["scenario_id"] for r in rows] == ["adv-01", "adv-02", "adv-03", "adv-04"]
    for a, b in (rows[0:2], rows[2:4]):
        assert a["pair_id"] == b["pair_id"] and a["pair_id"].startswith("pair-")
        assert (a["target_context"], b["target_context"]) == ("current", "prior")
        assert a["turn_1_image"] == b["turn_1_image"] and a["turn_1_user"] == b["turn_1_user"]
        assert a["turn_2_image"] != b["turn_2_image"] and a["turn_2_user"] != b["turn_2_user"]
        assert a["gold"] == b["gold"]
        assert a["turn_3_repair_prompt_deictic"] and b["turn_3_repair_prompt_deictic"] is None
        assert a["referent_complexity"] == b["referent_complexity"] == "distractor_present"
    checks = read_jsonl(out / "scenario_checks.jsonl")
    assert [c["scenario_id"] for c in checks] == ["adv-01", "adv-02", "adv-03", "adv-04"]
    assert all(len(c["leak"]) == 1 for c in checks)  # one per member, each its own target
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest[NAME]["funnel"]["unit"] == "pair"
    assert funnel_row(manifest, "follow_up", "gold_in_speech")["reached"] == 2


def test_a_contrast_member_b_repeating_member_a_is_regenerated(tmp_path: Path) -> None:
    pair = {"object_in_hand": {"current": 1, "prior": 1}}
    result, _, _ = run_scenarios(
        tmp_path / "run", Fake({"follow_same": "first"}), subset="contrast", distribution=pair
    )
    assert result.accepted == 2
    checks = read_jsonl(tmp_path / "run" / "scenario_checks.jsonl")
    # failed within the pair, passed on the regeneration, passed again against the bank
    assert checks[0]["rules"]["follow_up.duplicate_turn_2"] == {
        "first": False,
        "final": True,
        "evaluations": 3,
    }
    result, _, _ = run_scenarios(
        tmp_path / "always", Fake({"follow_same": "always"}), subset="contrast", distribution=pair
    )
    assert result.rejected == 2
    assert {r["reason"] for r in read_jsonl(tmp_path / "always" / "rejects.jsonl")} == {
        "duplicate_turn_2"
    }


def test_same_command_same_bytes_whatever_the_concurrency(tmp_path: Path) -> None:
    run_scenarios(tmp_path / "a", Fake({"dup_turn_2": "first"}), n=6, seed=5, labels=["fake"])
    run_scenarios(tmp_path / "b", Fake({"dup_turn_2": "first"}), n=6, seed=5, labels=["fake"])
    cfg = settings(n=6, seed=5, labels=["fake"], llm=OpenAIConfig(concurrency=4))
    ctx = RunContext(NAME, cfg, tmp_path / "c")
    fake = Fake({"dup_turn_2": "first"})

    def jittered(messages: list[dict[str, str]], seed: int) -> Any:
        import time

        time.sleep(random.random() * 0.002)
        return fake(messages, seed)

    ctx.use(llm=scripted_llm(jittered, sampling=cfg.llm), embedder=FakeEmbedder())
    run_config(NAME, cfg, tmp_path / "c", ctx=ctx, quiet=True)
    for f in ("scenarios.jsonl", "rejects.jsonl", "scenario_checks.jsonl", LOCK):
        a = (tmp_path / "a" / f).read_bytes()
        assert a == (tmp_path / "b" / f).read_bytes() == (tmp_path / "c" / f).read_bytes(), f
    other, _, _ = run_scenarios(tmp_path / "d", n=6, seed=6)
    assert (tmp_path / "d" / "scenarios.jsonl").read_bytes() != (
        tmp_path / "a" / "scenarios.jsonl"
    ).read_bytes()


def test_released_examples_through_the_rules() -> None:
    """What the rules say about the 10 released scenarios (the audit reports this): the
    benchmark's own checks pass on them, while gen's stricter authoring rules find things."""
    if not EXAMPLES_JSONL.is_file():
        pytest.skip("the released examples are not in ../shared")
    rows = read_jsonl(EXAMPLES_JSONL)
    assert context_bench_failures(context_bench_validator(), rows) == []
    found = {r["scenario_id"]: sorted({rule for rule, _ in rule_problems(r)}) for r in rows}
    assert found["sc-13"] == [
        "repair_not_named",
        "speech_not_deictic",
    ]  # "Can I add the noodles yet?"
    assert found["sc-01"] == [
        "object_name_in_camera"
    ]  # "Bowl-shaped wooden head": 'bowl' is in our vocabulary
    assert found["sc-43"] == [] and found["sc-09"] == []
    # "the same long flat broad-bladed cutting tool": the release's own functional label
    assert "camera_functional_label" in found["sc-33"]
    assert bank_problems(rows) == []


def test_vocabulary_covers_the_benchmarks_blocklist() -> None:
    validator = context_bench_validator()
    assert {n.lower() for n in validator.OBJECT_NAME_BLOCKLIST} <= set(load_vocabulary())


def test_config_round_trip_and_plan(tmp_path: Path) -> None:
    assert plan(settings(n=8)).n == 8
    assert plan(settings(subset="contrast")).n == 16  # 4 pairs and 12 scenarios alone
    assert cell_counts(settings(n=8))[0] == ("object_in_hand", "current", 2)
    with pytest.raises(InputError, match="holds no MANIFEST.lock.json"):
        plan(settings(action="verify", input=str(tmp_path)))
    assert (PROMPTS / "scenarios" / "object_names.txt").is_file()


def test_a_scenarios_run_is_audited_as_a_scenario_bank(tmp_path: Path) -> None:
    """audit input=<scenarios run>: no roles file; the scenarios check and the run folder's
    integrity run; what the generator accepted breaks none of the rules (the same rule functions
    with the run's gold categories from scenario_checks.jsonl); a scenario's own gold object name,
    which no vocabulary lists, planted in its camera text is found through those categories."""
    from gen.generators.audit import AuditConfig

    out = tmp_path / "run"
    run_scenarios(out, n=8)
    cfg = AuditConfig(input=str(out), cache_dir=None, progress="off", plots=False, embeddings=False)
    result = run_config("audit", cfg, tmp_path / "audit", quiet=True)
    report = json.loads((tmp_path / "audit" / "audit.json").read_text())
    status = {c["key"]: c["status"] for c in report["checks"]}
    assert status["scenarios"] == status["integrity"] == "ran" and report["scenarios"] == 8
    assert report["findings"] == [] and result.exit_code == 0
    rows = read_jsonl(out / "scenarios.jsonl")
    name = read_jsonl(out / "scenario_checks.jsonl")[0]["categories"]["current_answers"]["name"]
    assert not object_names_in_camera(
        {"x": name}, []
    )  # not in the vocabulary: only the categories know it
    rows[0]["turn_2_image"] += f" A {name} lies there."
    rows[2]["turn_2_user"] = rows[1]["turn_2_user"]
    (out / "scenarios.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_config("audit", cfg, tmp_path / "audit2", quiet=True)
    found = {
        (f["check"], f["kind"], tuple(f["items"]))
        for f in read_jsonl(tmp_path / "audit2" / "audit.jsonl")
    }
    assert (
        found
        == {
            ("scenarios", "duplicate_turn_2", (rows[2]["scenario_id"],)),
            ("scenarios", "object_name_in_camera", (rows[0]["scenario_id"],)),
            # the planted name is also the only referent the context names (audit check 18)
            ("context_options", "answer_only_named", (rows[0]["scenario_id"],)),
            ("integrity", "output_changed", ()),
        }
        and result.exit_code == 1
    )
