"""``python -m gen audit``: every check on a clean fixture (no findings) and on a planted one
(exactly the planted item ids and field paths), the generic roles loader, the report files,
exit codes 0/1/2, what the audit reads, and the text check. The statistics against
hand-computed values are in ``test_audit_stats.py``, the chronology check in
``test_audit_chronology.py``.

The fixtures in ``tests/fixtures/audit/`` come from ``make_fixtures.py`` (which also writes
``planted.json``: what each plant touched). Embeddings come from a fake embedder (character
trigrams hashed into 512 dimensions, ``tests/audit_runs.py``), so unit tests stay fast; the real
MiniLM runs in ``tests/integration/test_audit_real.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from audit_runs import FIX, PLANTED, expected, run_audit, triples, write_jsonl
from conftest import CONTEXT_BENCH

from gen.errors import InputError, MissingInputError
from gen.generators.audit import AuditConfig, plan
from gen.generators.audit.data import AuditData
from gen.generators.audit.registry import REGISTRY, check_keys
from gen.mcq import Roles, load_roles_bank, read_roles
from gen.schemas.audit import FindingRecord

CHECKS = check_keys()

ROLES = FIX / "scenario_roles.yaml"
EXACT_ONLY = [
    "structure",
    "leakage",
    "position",
    "length",
    "shortcut",
    "blind",
    "digital",
    "history",
    "integrity",
    "review",
    "scenarios",
]


def of(findings: list[dict[str, Any]], check: str) -> list[dict[str, Any]]:
    return [f for f in findings if f["check"] == check]


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    return run_audit(
        tmp_path_factory.mktemp("clean"),
        FIX / "run_clean",
        nocontext=str(FIX / "nocontext_clean"),
        plots=True,
    )


# --------------------------------------------------------------------------- clean fixtures: nothing found


def test_clean_bank_every_check_runs_and_finds_nothing(clean_run) -> None:
    result, findings, report = clean_run
    assert findings == [] and result.exit_code == 0
    status = {c["key"]: c["status"] for c in report["checks"]}
    # not a digital, history or scenario bank, no judge= run; the clean fixture's options carry no
    # source times, so the chronology check has nothing to test
    assert status == {
        **dict.fromkeys(CHECKS, "ran"),
        "digital": "skipped",
        "history": "skipped",
        "judge": "skipped",
        "chronology": "skipped",
        "review": "skipped",
        "scenarios": "skipped",
    }
    stats = {c["key"]: c["stats"] for c in report["checks"]}
    # the statistics were computed, not skipped: a clean verdict means something
    assert stats["structure"]["per_question_type"]["goal"]["items"] == 40
    assert [t["p"] > 0.5 for t in stats["position"]["tells"]] == [True, True]
    assert {t: r["chance"] for t, r in stats["length"]["per_question_type"].items()} == {
        "belief": 0.25,
        "goal": 0.333,
    }
    assert (
        len(stats["length"]["tells"]) == 4 and len(stats["shortcut"]["tells"]) == 4
    )  # classifier, most central
    assert all(t["severity"] is None and t["accuracy"] < 0.5 for t in stats["shortcut"]["tells"])
    assert stats["similar_options"]["per_question_type"]["goal"]["answer_distractor"]["pairs"] == 80
    assert stats["duplicates"]["nearest_neighbour"]["max"] < 0.95
    assert stats["blind"]["items_with_results"] == 80
    assert stats["integrity"]["folders"][str(FIX / "run_clean")]["matching"] == 2


def test_clean_scenario_bank_finds_nothing(tmp_path: Path) -> None:
    result, findings, report = run_audit(tmp_path, FIX / "scenarios.jsonl", roles=str(ROLES))
    assert findings == [] and result.exit_code == 0
    stats = {c["key"]: c for c in report["checks"]}
    assert stats["structure"]["stats"]["per_category"]["object_in_hand"] == 2
    assert set(stats["structure"]["stats"]["per_question_type"]) == {
        "current",
        "prior",
        "clarify",
        "abstain",
    }
    assert stats["leakage"]["stats"]["terms"] > 30
    for key in ("position", "length", "similar_options", "shortcut"):
        assert stats[key]["status"] == "skipped"  # no options in a scenario bank
    assert stats["duplicates"]["status"] == "ran"


EXAMPLES_JSONL = CONTEXT_BENCH / "examples.jsonl"


def scenario_expectation(rows: list[dict[str, Any]]) -> Counter:
    """(rule, scenario id or None) -> count, from gen.generators.scenarios.rules' functions themselves:
    what the scenarios check must report, whatever the examples hold."""
    from pydantic import ValidationError

    from gen.contextbench.rules import (
        bank_problems,
        presence_problems,
        rule_problems,
        schema_problems,
    )
    from gen.schemas.scenarios import ScenarioRecord

    want: Counter = Counter()
    valid = []
    for s in rows:
        try:
            ScenarioRecord.model_validate(s)
        except ValidationError:
            problems = schema_problems(s) + presence_problems(s)
        else:
            valid.append(s)
            problems = rule_problems(s)
        want.update((rule, s["scenario_id"]) for rule, _ in problems)
    want.update(
        (rule, None if sid == "<bank>" else sid)
        for sid, rule, _ in bank_problems(valid, signature_limit=2)
    )
    return want


def scenario_findings(findings: list[dict[str, Any]]) -> Counter:
    return Counter(
        (f["kind"], f["items"][0] if f["items"] else None) for f in of(findings, "scenarios")
    )


def test_released_example_scenarios_are_audited_without_roles(tmp_path: Path) -> None:
    if not EXAMPLES_JSONL.is_file():
        pytest.skip("the context benchmark's examples are not in ../shared")
    rows = [
        json.loads(x) for x in EXAMPLES_JSONL.read_text(encoding="utf-8").splitlines() if x.strip()
    ]
    result, findings, report = run_audit(tmp_path / "out", EXAMPLES_JSONL, embeddings=False)
    want = scenario_expectation(rows)
    assert (
        scenario_findings(findings) == want
        and [f for f in findings if f["check"] != "scenarios"] == []
    )
    errors = [f for f in findings if f["severity"] == "error"]
    assert result.exit_code == (1 if errors else 0) and report["scenarios"] == len(rows) == 10
    checks = {c["key"]: c for c in report["checks"]}
    assert (
        checks["scenarios"]["status"] == "ran" and checks["scenarios"]["stats"]["scenarios"] == 10
    )
    assert checks["scenarios"]["stats"]["with_findings"] == len({sid for _, sid in want if sid})
    for key in ("structure", "leakage", "duplicates"):
        assert checks[key]["status"] == "skipped" and "scenarios check" in checks[key]["reason"], (
            key
        )
    assert all(
        c["status"] == "skipped" and c["reason"] for k, c in checks.items() if k != "scenarios"
    )
    for f in of(
        findings, "scenarios"
    ):  # each finding names the field its rule found, when it names one
        if f["kind"] in ("gold_in_speech", "object_name_in_camera", "speech_not_deictic"):
            assert f["fields"] and f["fields"][0] in f["what"], f
    md = (tmp_path / "out" / "audit.md").read_text()
    assert "10 scenarios from examples.jsonl" in md and "## 16. Context-tracking scenarios" in md


def test_a_planted_scenario_violation_is_found(tmp_path: Path) -> None:
    if not EXAMPLES_JSONL.is_file():
        pytest.skip("the context benchmark's examples are not in ../shared")
    rows = [
        json.loads(x) for x in EXAMPLES_JSONL.read_text(encoding="utf-8").splitlines() if x.strip()
    ]
    _, clean, _ = run_audit(tmp_path / "clean", EXAMPLES_JSONL, embeddings=False)
    gold = rows[0]["gold"]["current_answers"][0]
    rows[0] = {
        **rows[0],
        "turn_2_user": f"Is my grip okay for this {gold}?",
    }  # a gold token in user speech
    rows[2] = {**rows[2], "turn_2_user": rows[1]["turn_2_user"]}  # the same turn-2 text twice
    rows[3] = {**rows[3], "change_type": "teleport"}  # outside the released schema
    folder = tmp_path / "run"  # a folder holding scenarios.jsonl reads as a scenarios run
    folder.mkdir()
    (folder / "scenarios.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    result, findings, report = run_audit(tmp_path / "planted", folder, embeddings=False)
    got = scenario_findings(findings)
    assert got == scenario_expectation(rows)
    new = got - scenario_findings(clean)
    assert (
        new[("gold_in_speech", rows[0]["scenario_id"])] >= 1
    )  # "chef's knife" holds "knife", another gold item
    assert new[("duplicate_turn_2", rows[2]["scenario_id"])] == 1
    assert new[("schema", rows[3]["scenario_id"])] >= 1
    leaks = [f for f in findings if f["kind"] == "gold_in_speech"]
    assert all(f["severity"] == "error" and f["fields"] == ["turn_2_user"] for f in leaks)
    assert any(repr(gold) in f["what"] for f in leaks)
    assert result.exit_code == 1
    stats = next(c for c in report["checks"] if c["key"] == "scenarios")["stats"]
    assert stats["schema_invalid"] == 1
    # an empty scenario bank is an input error, not a clean audit
    (folder / "scenarios.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(InputError, match="holds 0 scenarios"):
        run_audit(tmp_path / "empty", folder, embeddings=False)


def test_scenario_records_without_the_released_fields_still_need_roles(tmp_path: Path) -> None:
    """A JSONL of other scenario records (the roles fixture's) is not taken for the released
    schema: without roles= it is read as before, with it through the roles file."""
    from gen.contextbench import is_scenario_bank

    assert not is_scenario_bank(FIX / "scenarios.jsonl")
    bad = tmp_path / "scenarios.jsonl"
    bad.write_text(
        '{"scenario_id": 1, "change_type": "location", "target_context": "current", "turn_2_user": "x"}\n'
    )
    with pytest.raises(InputError, match=rf"^{re.escape(str(bad))}:1: scenario_id: "):
        run_audit(tmp_path / "out", bad, embeddings=False)


def test_clean_digital_run_finds_nothing(tmp_path: Path) -> None:
    result, findings, report = run_audit(tmp_path, FIX / "digital")
    assert findings == [] and result.exit_code == 0
    checks = {c["key"]: c for c in report["checks"]}
    assert checks["digital"]["status"] == "ran" and checks["digital"]["stats"]["bundles"] == 3
    assert checks["digital"]["stats"]["cued_per_app"] == {"Messaging": 1, "Search": 1}
    assert checks["integrity"]["status"] == "ran"
    assert checks["structure"]["status"] == "skipped"


def test_a_search_cue_of_several_queries_is_the_latest_together(tmp_path: Path) -> None:
    """The digital generator writes a Search cue as a refinement (queries 40 s apart, all key
    items): the cue is the latest when its items together come after every other search."""
    rows = [
        json.loads(line) for line in (FIX / "digital" / "digital.jsonl").read_text().splitlines()
    ]
    b = next(r for r in rows if r["cue"] and r["cue"]["app"] == "Search")
    search = b["apps"]["Search"]
    cue = search["key_searches"][0]
    first = {
        **cue,
        "search_id": "0" * 32,
        "query": "museum opening hours",
        "timestamp": "2025-03-02 10:01:20",
    }
    search["searches"].insert(len(search["searches"]) - 1, first)
    search["key_searches"] = [first, cue]
    (tmp_path / "run").mkdir()
    write_jsonl(tmp_path / "run" / "digital.jsonl", rows)
    shutil.copy(FIX / "digital" / "manifest.json", tmp_path / "run" / "manifest.json")
    _, findings, _ = run_audit(tmp_path / "out", tmp_path / "run", checks=["digital"])
    assert (
        findings == []
    )  # (a non-cue item after a cue item stays an error: test_planted_digital_defects)


# --------------------------------------------------------------------------- planted fixtures: exactly what was planted


def others_clean(findings: list[dict[str, Any]], *checks: str) -> None:
    extra = [f for f in findings if f["check"] not in checks]
    assert extra == [], extra


def test_planted_copied_answer_and_privileged_leaks(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "planted_leak.jsonl")
    assert triples(of(findings, "leakage")) == expected("leakage")
    others_clean(findings, "leakage")
    assert result.exit_code == 1


def test_planted_keys_stacked_on_one_letter(tmp_path: Path) -> None:
    result, findings, report = run_audit(tmp_path, FIX / "planted_position.jsonl")
    assert triples(of(findings, "position")) == expected("position")
    (f,) = of(findings, "position")
    assert f["numbers"]["counts"] == {"a": 0, "b": 40, "c": 0, "d": 0} and f["severity"] == "error"
    tells = next(c for c in report["checks"] if c["key"] == "position")["stats"]["tells"]
    assert [(t["question_type"], t["severity"]) for t in tells] == [
        ("belief", "error"),
        ("goal", None),
    ]
    assert f["numbers"]["effect"] == 75.0 and f["numbers"]["rule"] == "significant_and_large"
    # nothing else is found: the choice-only classifier never sees positions (one fold split once made
    # it right in 16/40 of these belief items, an uncorrected warning; averaged over 5 splits it is not)
    assert [(g["check"], g["severity"]) for g in findings if g["check"] != "position"] == []
    assert result.exit_code == 1


def test_planted_key_made_the_longest_option(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "planted_longest.jsonl")
    assert triples(of(findings, "length")) == expected("length")
    # the choice-only classifier finds the same tell on its own, and only planted items are easy for it
    (sc,) = of(findings, "shortcut")
    assert sc["numbers"]["question_type"] == "goal"
    assert set(sc["items"]) <= set(PLANTED["length"][0]["items"]) and len(sc["items"]) >= 25
    suffix = {
        "commas",
        "ands",
        "log_chars",
        "length_z",
        "is_longest",
        "words",
        "length_rank",
        *(f"word:{w}" for w in "then tidy up and rest for a while".split()),
    }
    top = [name for name, _ in sc["numbers"]["top_features"]]
    assert len(set(top) & suffix) >= 4, top
    others_clean(findings, "length", "shortcut")
    assert result.exit_code == 1


def test_planted_paraphrase_of_the_key_as_a_distractor(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "planted_paraphrase.jsonl")
    got = triples(
        of(findings, "similar_options"),
        kinds={"distractor_close_to_answer", "near_duplicate_options"},
        sort_fields=True,
    )
    assert got == expected("similar_options", kind="*", sort_fields=True)
    assert all(f["severity"] == "warning" for f in findings)
    others_clean(findings, "similar_options")
    assert result.exit_code == 0  # warnings only: fail_on=error passes...
    result, _, _ = run_audit(
        tmp_path / "strict", FIX / "planted_paraphrase.jsonl", fail_on="warning"
    )
    assert result.exit_code == 1  # ...fail_on=warning does not


def test_planted_duplicated_items(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "planted_duplicate.jsonl")
    assert triples(of(findings, "duplicates")) == expected("duplicates")
    others_clean(findings, "duplicates")
    assert result.exit_code == 1


def test_duplicates_against_a_second_bank(tmp_path: Path) -> None:
    result, findings, report = run_audit(
        tmp_path, FIX / "clean.jsonl", against=str(FIX / "against.jsonl")
    )
    assert triples(findings) == expected("against")
    stats = next(c for c in report["checks"] if c["key"] == "duplicates")["stats"]
    assert stats["against"] == {
        "name": "against.jsonl",
        "items": 5,
        "exact": 1,
        "nearest_neighbour": stats["against"]["nearest_neighbour"],
    }
    assert result.exit_code == 1


def test_planted_structure_defects(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "planted_structure.jsonl")
    assert triples(of(findings, "structure")) == expected("structure")
    others_clean(findings, "structure")
    assert result.exit_code == 1


def test_planted_scenario_defects(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "planted_scenarios.jsonl", roles=str(ROLES))
    assert triples(findings) == expected("scenarios")
    assert result.exit_code == 1


def test_planted_blind_solvable_items(tmp_path: Path) -> None:
    result, findings, report = run_audit(
        tmp_path, FIX / "clean.jsonl", nocontext=str(FIX / "nocontext_planted")
    )
    assert triples(findings) == expected("blind")
    models = next(c for c in report["checks"] if c["key"] == "blind")["stats"]["models"]
    assert models["qwen"]["per_question_type"]["belief"]["trials"] == 120
    assert models["smollm2"]["letters_chosen"] and models["smollm2"]["unparsed"] == 0
    assert result.exit_code == 0  # warnings


def test_planted_digital_defects(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "digital_planted")
    assert triples(findings) == expected("digital")
    assert result.exit_code == 1


def test_planted_flipped_byte(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "run_flipped")
    assert triples(findings) == expected("integrity")
    (f,) = findings
    assert f["numbers"]["expected"] != f["numbers"]["actual"]
    assert result.exit_code == 1


def test_fixtures_are_current(tmp_path: Path) -> None:
    """The committed fixtures are exactly what make_fixtures.py builds (nothing edited by hand)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", FIX / "make_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    mod.main(tmp_path)
    built = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(FIX).as_posix()
        for p in FIX.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".yaml") and "__pycache__" not in p.parts
    )
    assert built == committed
    for rel in built:
        if rel.startswith("digital"):
            continue  # personas come from Faker and bundles from gen.generators.digital: may move with them
        assert (tmp_path / rel).read_bytes() == (FIX / rel).read_bytes(), rel


# --------------------------------------------------------------------------- the registry


def test_registry_is_the_one_source_of_checks_help_and_report(clean_run) -> None:
    assert [c.order for c in REGISTRY.values()] == list(range(1, 18))
    assert (
        AuditConfig(input="x").checks
        == CHECKS
        == [
            "structure",
            "leakage",
            "position",
            "length",
            "similar_options",
            "duplicates",
            "shortcut",
            "blind",
            "digital",
            "history",
            "judge",
            "chronology",
            "text",
            "review",
            "integrity",
            "scenarios",
            "context_states",
        ]
    )
    help_text = AuditConfig.model_fields["checks"].description
    for c in REGISTRY.values():
        assert f"{c.key}: {c.finds}" in help_text
        assert set(c.uses) <= set(AuditConfig.model_fields)
    result, _, report = clean_run
    md = (result.out_dir / "audit.md").read_text()
    for c in REGISTRY.values():
        assert f"## {c.order}. {c.title}\n\n{c.doc}\n" in md
    assert [(c["id"], c["title"]) for c in report["checks"]] == [
        (c.order, c.title) for c in REGISTRY.values()
    ]
    length = md[md.index("## 4. ") : md.index("## 5. ")]
    assert (
        "Options: `length_ratio=1.4`, `min_items_per_test=20`, `alpha=0.01`, `max_effect=5`"
        in length
    )
    assert "item_dup_sim" not in length
    assert "| length_ratio | 1.4 | An answer more than" in md[md.index("## Options") :]
    # every threshold of the report is read by some check
    used = {u for c in REGISTRY.values() for u in c.uses}
    assert set(report["thresholds"]) <= used, set(report["thresholds"]) - used


def test_checks_read_only_the_options_they_declare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check that reads an option it does not declare in ``uses=`` would hide it from the report."""
    import dataclasses

    read: dict[str, set[str]] = {k: set() for k in REGISTRY}

    class Reads:
        def __init__(self, cfg: AuditConfig, key: str) -> None:
            self._cfg, self._key = cfg, key

        def __getattr__(self, name: str) -> Any:
            read[self._key].add(name)
            return getattr(self._cfg, name)

    for key, c in list(REGISTRY.items()):

        def fn(data: AuditData, cfg: AuditConfig, _fn: Any = c.fn, _key: str = key) -> Any:
            return _fn(data, Reads(cfg, _key))

        monkeypatch.setitem(REGISTRY, key, dataclasses.replace(c, fn=fn))
    run_audit(tmp_path / "a", FIX / "run_clean", nocontext=str(FIX / "nocontext_clean"))
    run_audit(tmp_path / "b", FIX / "planted_longest.jsonl")
    run_audit(tmp_path / "c", FIX / "digital_planted")
    for key, c in REGISTRY.items():
        assert read[key] <= set(c.uses), (key, read[key] - set(c.uses))
    assert read["length"] and read["shortcut"] and read["leakage"]  # the proxy saw the reads


PROBE_CHECK = """\"\"\"A check added as one file.\"\"\"

from gen.generators.audit.registry import CheckResult, check, finding


@check("probe", order=18, title="Probe: items counted", finds="nothing, it counts items", uses=("alpha",))
def probe(data, cfg):
    \"\"\"Counts the items, to show that a new check is one new file.\"\"\"
    res = CheckResult("probe", stats={"items": len(data.items)})
    res.findings.append(finding("probe", "counted", "info", f"{len(data.items)} items"))
    return res
"""


def test_a_new_check_is_one_new_file(tmp_path: Path, runner_for: Any, cache_dir: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    for d in ("gen", "generators", "schemas", "conf", "prompts", "examples", "personas"):
        # gen/ links to the card's folders beside it: copied as links, they point at the copies
        shutil.copytree(
            root / d, tmp_path / d, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "generators" / "audit" / "checks" / "probe.py").write_text(PROBE_CHECK)
    run_gen = runner_for(tmp_path, cache_dir)
    shown = run_gen("audit", "--help")
    assert (
        "probe: nothing, it counts items" in shown.stdout
        and '"integrity","scenarios","context_states","probe"]' in shown.stdout
    ), shown.stdout
    p = run_gen(
        "audit",
        f"input={FIX / 'clean.jsonl'}",
        "embeddings=false",
        "checks=[structure,probe]",
        f"hydra.run.dir={tmp_path / 'out'}",
    )
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert [(c["id"], c["key"], c["stats"]) for c in report["checks"]][1] == (
        18,
        "probe",
        {"items": 80},
    )
    assert report["findings"][0]["check_id"] == 18
    md = (tmp_path / "out" / "audit.md").read_text()
    assert "## 18. Probe: items counted\n\nCounts the items" in md and "| alpha | 0.01 |" in md
    bad = run_gen("audit", f"input={FIX / 'clean.jsonl'}", "checks=[probe,nope]")
    assert bad.returncode == 2 and "nope" in bad.stderr and "'probe'" in bad.stderr


# --------------------------------------------------------------------------- the report and the run folder


def test_report_files_manifest_and_one_index_per_check(clean_run) -> None:
    result, findings, report = clean_run
    out = result.out_dir
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["requested"] == len(CHECKS) == manifest["counts"]["indices_done"]
    assert manifest["counts"]["accepted"] == len(findings) and manifest["counts"]["rejected"] == 0
    assert manifest["audit"]["exit_code"] == 0 and manifest["audit"]["fail_on"] == "error"
    for name in (
        "audit.jsonl",
        "audit.json",
        "audit.md",
        "lengths.png",
        "positions.png",
        "option_similarity.png",
        "item_similarity.png",
    ):
        assert name in manifest["outputs"], name
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["plots"] == {
        "length": "lengths.png",
        "position": "positions.png",
        "similar_options": "option_similarity.png",
        "duplicates": "item_similarity.png",
    }
    assert (
        report["thresholds"]["length_ratio"] == 1.4
        and report["thresholds"]["option_dup_sim"] == 0.94
    )
    md = (out / "audit.md").read_text()
    for j, key in enumerate(CHECKS, 1):
        assert f"| {j} | {key} |" in md
        assert f"## {j}. " in md
    assert "![length](lengths.png)" in md and "exit code **0**" in md
    assert "| alpha | 0.01 |" in md


def test_findings_table_in_markdown_and_json(tmp_path: Path) -> None:
    result, findings, report = run_audit(tmp_path, FIX / "planted_leak.jsonl", max_listed=2)
    md = (tmp_path / "audit.md").read_text()
    assert "**4 errors**" not in md and "**3 errors**, 1 warnings" in md
    assert "| error | answer_in_visible |" in md and "… 2 more in `audit.jsonl`." in md
    assert report["summary"]["by_severity"] == {"error": 3, "warning": 1, "info": 0}
    assert report["findings"] == findings
    for f in findings:
        FindingRecord.model_validate(f)
        assert f["check_id"] == CHECKS.index(f["check"]) + 1


def test_checks_option_selects_and_orders_indices(tmp_path: Path) -> None:
    result, findings, report = run_audit(
        tmp_path, FIX / "planted_leak.jsonl", checks=["position", "leakage"]
    )
    assert [c["key"] for c in report["checks"]] == ["position", "leakage"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["counts"]["requested"] == 2 and len(findings) == 4


@pytest.mark.parametrize(
    ("fail_on", "code"), [("info", 1), ("warning", 1), ("error", 1), ("never", 0)]
)
def test_fail_on_levels(tmp_path: Path, fail_on: str, code: int) -> None:
    result, _, report = run_audit(
        tmp_path, FIX / "planted_leak.jsonl", fail_on=fail_on, checks=["leakage"]
    )
    assert result.exit_code == code == report["summary"]["exit_code"]


def test_embeddings_false_skips_only_the_embedding_parts(tmp_path: Path) -> None:
    result, findings, report = run_audit(
        tmp_path, FIX / "planted_duplicate.jsonl", embeddings=False
    )
    status = {c["key"]: c["status"] for c in report["checks"]}
    assert status["similar_options"] == "skipped" and status["duplicates"] == "ran"
    assert triples(findings) == [e for e in expected("duplicates") if e[0] == "duplicate_items"]


# --------------------------------------------------------------------------- exit codes through the CLI


def test_cli_exit_0_and_1(run_gen, tmp_path: Path) -> None:
    ok = run_gen(
        "audit",
        f"input={FIX / 'clean.jsonl'}",
        "embeddings=false",
        f"hydra.run.dir={tmp_path / 'ok'}",
    )
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "ok" / "audit.md").is_file()
    bad = run_gen(
        "audit",
        f"input={FIX / 'run_flipped'}",
        "embeddings=false",
        "checks=[integrity]",
        f"hydra.run.dir={tmp_path / 'bad'}",
    )
    assert bad.returncode == 1, bad.stderr
    assert (
        json.loads((tmp_path / "bad" / "audit.json").read_text())["summary"]["by_severity"]["error"]
        == 1
    )


def test_cli_input_errors_exit_2(run_gen, tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text((FIX / "clean.jsonl").read_text().splitlines()[0] + "\n{not json\n")
    cases = [
        (["input=/no/such/bank.jsonl"], "no such file"),
        ([f"input={broken}", f"roles={ROLES}"], f"{broken}:2"),
        ([f"input={FIX / 'clean.jsonl'}", "checks=[structure,lekage]"], "lekage"),
        ([], "input= is required"),
    ]
    for args, needle in cases:
        p = run_gen("audit", *args, "embeddings=false", f"hydra.run.dir={tmp_path / 'x'}")
        assert p.returncode == 2, (args, p.stderr)
        assert needle in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) <= 2, p.stderr  # one line, no traceback


def test_config_refuses_what_cannot_work() -> None:
    from pydantic import ValidationError

    for kw, needle in (
        ({"input": "x", "num_shards": 2}, "one process"),
        ({"input": "x", "checks": []}, "at least one check"),
        ({"input": "x", "checks": ["position", "position"]}, "each once"),
        ({"input": "x", "shortcut_repeats": 2}, "greater than or equal to 3"),
    ):  # bench/shortcut_null.py
        with pytest.raises(ValidationError, match=needle):
            AuditConfig(**kw)
    assert plan(AuditConfig(input="x", checks=["length", "structure"])).n == 2


@pytest.mark.parametrize(
    ("kw", "error", "needle"),
    [
        ({"roles": "BAD_ROLES"}, InputError, "visibel"),
        ({"input": str(FIX), "roles": str(ROLES)}, InputError, "must be a JSONL file"),
        ({"nocontext": str(FIX / "clean.jsonl")}, InputError, "a nocontext result needs"),
        ({"nocontext": str(FIX / "digital")}, MissingInputError, "nocontext.jsonl not found"),
        ({"against": "/no/such/bank"}, MissingInputError, "against: no such file"),
        (
            {"input": str(FIX / "nocontext_clean" / "nocontext.jsonl"), "roles": None},
            InputError,
            "not an MCQ record",
        ),
    ],
)
def test_input_errors_name_the_problem(
    tmp_path: Path, kw: dict[str, Any], error: type, needle: str
) -> None:
    bad_roles = tmp_path / "roles.yaml"
    bad_roles.write_text("id: scenario_id\nvisibel: [turn_1_user]\n")
    kw = {
        "input": str(FIX / "clean.jsonl"),
        **{k: str(bad_roles) if v == "BAD_ROLES" else v for k, v in kw.items()},
    }
    if kw.get("roles") is None:
        kw.pop("roles", None)
    with pytest.raises(error, match=needle):
        run_audit(tmp_path / "out", kw.pop("input"), **kw)


# --------------------------------------------------------------------------- hardening: what the audit reads


OPENED: list[str] | None = None


def _record_opens(event: str, args: tuple[Any, ...]) -> None:
    if OPENED is not None and event == "open" and isinstance(args[0], str | bytes | Path):
        OPENED.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_record_opens)  # records only while a test sets OPENED


def test_integrity_never_reads_a_file_the_manifest_names_outside_the_run_folder(
    tmp_path: Path,
) -> None:
    global OPENED
    run_dir = tmp_path / "run"
    run_audit(
        run_dir, FIX / "clean.jsonl", checks=["structure"]
    )  # a real run folder with a real manifest
    outside = tmp_path / "outside.txt"
    outside.write_text("not part of the run\n")
    (run_dir / "link.txt").symlink_to(outside)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["outputs"].update(
        {"/etc/passwd": "0" * 64, "../outside.txt": "0" * 64, "link.txt": "0" * 64}
    )
    manifest["inputs"]["/etc/hostname"] = "0" * 64
    manifest["merged"] = {"generator": "../outside"}  # the records file is named after it
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    OPENED = []
    try:
        result, findings, report = run_audit(tmp_path / "out", run_dir, checks=["integrity"])
        opened = set(OPENED)
    finally:
        OPENED = None
    for path in ("/etc/passwd", "/etc/hostname", str(outside), str(tmp_path / "outside.jsonl")):
        assert os.path.realpath(path) not in opened, path
    assert str(run_dir / "audit.jsonl") in opened  # the hook saw the reads that are allowed
    assert triples(findings) == [
        ("outside_run_folder", (), (f,))
        for f in (
            "counts.accepted",
            "outputs.../outside.txt",
            "outputs./etc/passwd",
            "outputs.link.txt",
        )
    ]
    assert all(
        f["severity"] == "error"
        and f["what"].startswith("manifest names a file outside the run folder")
        for f in findings
    )
    stats = next(c for c in report["checks"] if c["key"] == "integrity")["stats"]["folders"][
        str(run_dir)
    ]
    assert (
        stats["inputs_outside_not_read"] == 2 and stats["matching"] == 4
    )  # audit.{jsonl,json,md}, rejects
    assert result.exit_code == 1


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"[]", "not a run manifest (a JSON object naming its generator), got a JSON list"),
        (b"{}", "got an empty object"),
        (b'{"outputs": {}}', "got an object without a generator"),
        (b"{not json", "manifest.json:1: not valid JSON"),
        (
            b'{"generator": "tom", "x": "\xff"}',
            "manifest.json:1: not UTF-8 text (byte 0xff at column 28",
        ),
        (b"[" * 100_000 + b"]" * 100_000, "manifest.json: not valid JSON (nested too deeply)"),
        (b'{"generator": "tom", "seed": NaN}', "manifest.json: seed: NaN is not a JSON number"),
    ],
    ids=["list", "empty", "no_generator", "not_json", "not_utf8", "deep", "nan"],
)
def test_a_manifest_that_is_not_one_is_an_input_error(
    tmp_path: Path, content: bytes, needle: str
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(FIX / "clean.jsonl", folder / "tom.jsonl")
    (folder / "manifest.json").write_bytes(content)
    with pytest.raises(InputError, match=re.escape(needle)):
        run_audit(tmp_path / "out", folder, checks=["integrity"])


def test_a_manifest_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    """It was refused ("Unexpected UTF-8 BOM"), unlike every other input."""
    from gen.generators.audit.data import read_manifest

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(
        b"\xef\xbb\xbf" + (FIX / "run_clean" / "manifest.json").read_bytes()
    )
    assert read_manifest(folder) == json.loads((FIX / "run_clean" / "manifest.json").read_text())


def test_cli_bad_manifest_exit_2(run_gen, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_text("[]")
    p = run_gen("audit", f"input={folder}", "embeddings=false", f"hydra.run.dir={tmp_path / 'out'}")
    assert p.returncode == 2 and f"{folder / 'manifest.json'}: not a run manifest" in p.stderr, (
        p.stderr
    )
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_an_empty_bank_is_an_input_error_unless_allowed(run_gen, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    p = run_gen("audit", f"input={empty}", "embeddings=false", f"hydra.run.dir={tmp_path / 'a'}")
    assert (
        p.returncode == 2
        and f"input: {empty} holds 0 items" in p.stderr
        and "allow_empty=true" in p.stderr
    )
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    ok = run_gen(
        "audit",
        f"input={empty}",
        "embeddings=false",
        "allow_empty=true",
        f"hydra.run.dir={tmp_path / 'b'}",
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "b" / "audit.json").read_text())["summary"]["findings"] == 0
    # the other readers: a roles bank, a folder of EgoToM CSVs with only their headers
    with pytest.raises(InputError, match="holds 0 items"):
        run_audit(tmp_path / "c", empty, roles=str(ROLES))
    ego = tmp_path / "ego"
    ego.mkdir()
    from gen.mcq import write_egotom_csv

    write_egotom_csv([], "goal", ego / "egotom_goal_shuffled.csv")
    with pytest.raises(InputError, match="egotom_goal_shuffled.csv holds 0 items"):
        run_audit(tmp_path / "d", ego)


def _spoil(src: Path, dst: Path, line: int) -> Path:
    """``src`` with one byte of line ``line`` (1-based) replaced by 0xff (not UTF-8)."""
    lines = src.read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1][:2] + b"\xff" + lines[line - 1][3:]
    dst.write_bytes(b"\n".join(lines))
    return dst


def test_non_utf8_inputs_are_input_errors_naming_file_and_line(run_gen, tmp_path: Path) -> None:
    bank = _spoil(FIX / "clean.jsonl", tmp_path / "bank.jsonl", 3)
    roles = _spoil(ROLES, tmp_path / "roles.yaml", 1)
    scen = _spoil(FIX / "scenarios.jsonl", tmp_path / "scen.jsonl", 2)
    nc = tmp_path / "nc"
    nc.mkdir()
    _spoil(FIX / "nocontext_clean" / "nocontext.jsonl", nc / "nocontext.jsonl", 4)
    ego = tmp_path / "ego"
    ego.mkdir()
    from gen.mcq import write_egotom_csv

    rows = [
        {
            "vuid": "v",
            "cuid": f"c{j}",
            "narrations_in_context": "00m:01s | #C C waits.",
            "gt_goal": "To go.",
            "goal_choice_a": "To go.",
            "goal_choice_b": "To stay.",
            "goal_choice_c": "To sit.",
            "clip_start_time": "0",
            "clip_end_time": "9",
        }
        for j in range(3)
    ]
    _spoil(write_egotom_csv(rows, "goal", tmp_path / "g.csv"), ego / "egotom_goal_shuffled.csv", 3)
    cases = [
        ({"input": bank}, f"{bank}:3: not UTF-8 text (byte 0xff at column 3"),
        ({"input": FIX / "scenarios.jsonl", "roles": str(roles)}, f"{roles}:1: not UTF-8"),
        ({"input": scen, "roles": str(ROLES)}, f"{scen}:2: not UTF-8"),
        (
            {"input": FIX / "clean.jsonl", "nocontext": str(nc)},
            f"{nc / 'nocontext.jsonl'}:4: not UTF-8",
        ),
        ({"input": ego}, f"{ego / 'egotom_goal_shuffled.csv'}:3: not UTF-8"),
    ]
    for j, (kw, needle) in enumerate(cases):
        kw = dict(kw)
        with pytest.raises(InputError, match=re.escape(needle)):
            run_audit(tmp_path / f"out{j}", kw.pop("input"), **kw)
    p = run_gen("audit", f"input={bank}", "embeddings=false", f"hydra.run.dir={tmp_path / 'cli'}")
    assert p.returncode == 2 and f"{bank}:3: not UTF-8 text" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


# --------------------------------------------------------------------------- the generic roles loader


def test_roles_answer_formats_and_option_layouts(tmp_path: Path) -> None:
    rows = [
        {
            "qid": "q1",
            "meta": {"clip": "c1"},
            "q": "Which?",
            "choices": ["Red", "Blue", "Green"],
            "key": "B",
            "ctx": {"narration": "C walks.", "time": "00:10"},
            "gold": ["blue"],
            "kind": "colour",
        },
        {
            "qid": "q2",
            "meta": {"clip": "c1"},
            "q": "Which?",
            "choices": ["Red", "Blue", "Green"],
            "key": "(c)",
            "ctx": {"narration": "C runs.", "time": "00:20"},
            "gold": ["green"],
            "kind": "colour",
        },
    ]
    path = write_jsonl(tmp_path / "bank.jsonl", rows)
    roles = Roles(
        id="qid",
        question="q",
        options="choices",
        answer="key",
        answer_format="letter",
        visible=["ctx"],
        privileged=["gold"],
        category="kind",
        group="meta.clip",
    )
    bank = load_roles_bank(path, roles)
    a, b = bank.items
    assert (a.answer, b.answer, bank.problems) == (1, 2, [])
    assert a.visible == {"q": "Which?", "ctx.narration": "C walks.", "ctx.time": "00:10"}
    assert (
        a.privileged == {"gold": "blue"}
        and a.group == "c1"
        and a.category == "colour" == a.question_type
    )
    as_text = Roles(id="qid", options=["choices"], answer="key", answer_format="text")
    rows2 = [
        {"qid": "t1", "a": "x", "b": "y", "key": "y"},
        {"qid": "t2", "a": "x", "b": "y", "key": 0},
    ]
    bank2 = load_roles_bank(
        write_jsonl(tmp_path / "b2.jsonl", rows2),
        as_text.model_copy(update={"options": ["a", "b"]}),
    )
    assert [it.answer for it in bank2.items] == [1, None]
    assert bank2.problems == [
        {
            "line": 1,
            "item_id": "t2",
            "field": "key",
            "problem": "answer 0 (text) names none of the 2 options",
        }
    ]
    bank3 = load_roles_bank(
        write_jsonl(tmp_path / "b3.jsonl", [{"id": "i", "opts": ["p", "q"], "ans": 2}]),
        Roles(id="id", options="opts", answer="ans"),
    )
    assert bank3.items[0].answer is None and bank3.problems[0]["field"] == "ans"


def test_roles_missing_fields_are_problems_not_errors(tmp_path: Path) -> None:
    rows = [
        {
            "scenario_id": "s1",
            "turn_1_user": "hi",
            "cue_type": "location",
            "target_context": "current",
        },
        {
            "turn_1_user": "",
            "turn_2_user": "where?",
            "cue_type": "location",
            "target_context": "prior",
        },
    ]
    bank = load_roles_bank(write_jsonl(tmp_path / "s.jsonl", rows), read_roles(ROLES))
    assert [(p["item_id"], p["field"], p["problem"]) for p in bank.problems] == [
        ("s1", "turn_2_user", "missing"),
        ("line2", "scenario_id", "missing"),
        ("line2", "turn_1_user", "empty"),
    ]
    assert bank.items[0].options == [] and bank.items[0].answer is None


def test_roles_file_and_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "r.yaml"
    bad.write_text("id: x\nanswer: key\n")
    with pytest.raises(InputError, match="answer needs options"):
        read_roles(bad)
    with pytest.raises(MissingInputError):
        read_roles(tmp_path / "none.yaml")
    lines = tmp_path / "l.jsonl"
    lines.write_text('{"id": 1}\n[1, 2]\n')
    with pytest.raises(InputError, match=r"l\.jsonl:2: expected a JSON object"):
        load_roles_bank(lines, Roles(id="id"))


def test_egotom_csv_answer_not_among_options(tmp_path: Path) -> None:
    from gen.mcq import egotom_columns, write_egotom_csv

    rows = [
        {
            "vuid": "v",
            "cuid": f"v~pass_1~{j}-{j + 9}",
            "narrations_in_context": f"    00m:0{j}s | #C C waits.",
            "gt_goal": "To bake bread." if j else "To fly a kite.",
            "goal_choice_a": "To bake bread.",
            "goal_choice_b": "To mow the lawn.",
            "goal_choice_c": "To paint a fence.",
            "clip_start_time": "0",
            "clip_end_time": "9",
        }
        for j in range(3)
    ]
    folder = tmp_path / "egotom"
    folder.mkdir()
    write_egotom_csv(rows, "goal", folder / "egotom_goal_shuffled.csv")
    assert egotom_columns("goal")[3] == "gt_goal"
    result, findings, _ = run_audit(tmp_path / "out", folder, checks=["structure"])
    assert triples(findings) == [("answer_not_in_options", ("goal:v~pass_1~0-9",), ("gt_goal",))]


# --------------------------------------------------------------------------- the text check


def test_text_check_finds_broken_text_in_any_bank(tmp_path: Path) -> None:
    """Issue 23's four broken texts, planted into a copy of the clean bank, are found by the gate
    that names them (and only those items); the clean bank's texts pass."""
    rows = [json.loads(line) for line in (FIX / "clean.jsonl").read_text().splitlines()]
    goal = next(r for r in rows if r["question_type"] == "goal")
    belief = next(r for r in rows if r["question_type"] == "belief")
    goal2 = [r for r in rows if r["question_type"] == "goal"][1]
    goal["options"][1] = "To tie shoes, not with shoes but with shoes."
    belief["options"][2] = "C believes the exercise mat is in the air, p."
    goal2["options"][2] = "To the laundry detergent was used to clean the pot."
    bank = write_jsonl(tmp_path / "bank.jsonl", rows)
    result, findings, report = run_audit(tmp_path / "out", bank, embeddings=False, checks=["text"])
    got = {f["kind"]: f["items"] for f in findings}
    assert got == {
        "repetition": [goal["item_id"]],
        "truncated_text": [belief["item_id"]],
        "surface_form": [goal2["item_id"]],
    }
    assert {f["severity"] for f in findings} == {"error"} and result.exit_code == 1
    stats = report["checks"][0]["stats"]
    assert stats["failed"] == 3 and stats["checked"] == sum(1 + len(r["options"]) for r in rows)
    md = (tmp_path / "out" / "audit.md").read_text()
    assert "| repetition | 1 |" in md and "with shoes but with shoes" in md
