"""``python -m gen audit``: every check on a clean fixture (no findings) and on a planted one
(exactly the planted item ids and field paths), the check registry and the report files. Exit
codes, what the audit reads, the generic roles loader and the text check are in
``test_audit_inputs.py``, the statistics against hand-computed values in
``test_audit_stats.py``, the chronology check in ``test_audit_chronology.py``.

The fixtures in ``tests/fixtures/audit/`` come from ``make_fixtures.py`` (which also writes
``planted.json``: what each plant touched). Embeddings come from a fake embedder (character
trigrams hashed into 512 dimensions, ``tests/audit_runs.py``), so unit tests stay fast; the real
MiniLM runs in ``tests/integration/test_audit_real.py``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from audit_runs import FIX, PLANTED, expected, run_audit, triples, write_jsonl
from conftest import CONTEXT_BENCH

from gen.errors import InputError
from gen.generators.audit import AuditConfig
from gen.generators.audit.data import AuditData
from gen.generators.audit.registry import REGISTRY, check_keys
from gen.schemas.audit import FindingRecord

CHECKS = check_keys()

ROLES = FIX / "scenario_roles.yaml"


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


# -------------------------------------------------------------------- clean fixtures: nothing found


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
    """(rule, scenario id or None) -> count, from gen.generators.scenarios.rules' functions
    themselves: what the scenarios check must report, whatever the examples hold."""
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
    # besides the rules, check 18: sc-27's Turn 1 scene names the prior referent's "draw the
    # curtains back" and no phrase of the current one (docs/reference/audit.md gives the rate)
    assert scenario_findings(findings) == want and [
        (f["check"], f["kind"], f["items"]) for f in findings if f["check"] != "scenarios"
    ] == [("context_options", "answer_only_unnamed", ["sc-27"])]
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
        c["status"] == "skipped" and c["reason"]
        for k, c in checks.items()
        if k not in ("scenarios", "context_options")
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
        '{"scenario_id": 1, "change_type": "location", "target_context": "current", "turn_2_user": '
        '"x"}\n'
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


# ------------------------------------------------------- planted fixtures: exactly what was planted


def others_clean(findings: list[dict[str, Any]], *checks: str) -> None:
    extra = [f for f in findings if f["check"] not in checks]
    assert extra == [], extra


def test_planted_copied_answer_and_privileged_leaks(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "planted_leak.jsonl")
    assert triples(of(findings, "leakage")) == expected("leakage")
    # the copied answer also makes it the only option its context names (check 18), and nothing
    # else: the other plants touch no option
    (copied,) = [e for e in expected("leakage") if e[0] == "answer_in_visible"]
    assert triples(of(findings, "context_options")) == [
        ("answer_only_named", copied[1], ("visible", "options"))
    ]
    others_clean(findings, "leakage", "context_options")
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
    # nothing else is found: the choice-only classifier never sees positions (one fold split once
    # made
    # it right in 16/40 of these belief items, an uncorrected warning; averaged over 5 splits it is
    # not)
    assert [(g["check"], g["severity"]) for g in findings if g["check"] != "position"] == []
    assert result.exit_code == 1


def test_planted_key_made_the_longest_option(tmp_path: Path) -> None:
    result, findings, _ = run_audit(tmp_path, FIX / "planted_longest.jsonl")
    assert triples(of(findings, "length")) == expected("length")
    # the choice-only classifier finds the same tell on its own, and only planted items are easy for
    # it
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
    """The committed fixtures are exactly what make_fixtures.py builds (nothing edited by hand),
    but ``context_shortcut/``: a run folder as ``gen introspect`` wrote it before issue 42, kept
    as found (the records the options-against-context check must flag), and its README beside it."""
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
        if p.is_file()
        and p.suffix not in (".py", ".yaml")
        and not {"__pycache__", "context_shortcut"} & set(p.relative_to(FIX).parts)
        and p.name != "context_shortcut.README.md"
    )
    assert built == committed
    for rel in built:
        if rel.startswith("digital"):
            # personas come from Faker and bundles from gen.generators.digital: may move with them
            continue
        assert (tmp_path / rel).read_bytes() == (FIX / rel).read_bytes(), rel


# --------------------------------------------------------------------------- the registry


def test_registry_is_the_one_source_of_checks_help_and_report(clean_run) -> None:
    assert [c.order for c in REGISTRY.values()] == list(range(1, 19))
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
            "context_options",
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
    """A check that reads an option it does not declare in ``uses=`` would hide it from the
    report."""
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
    # in one process: the proxy records the reads in this one (workers=2 runs some checks aside)
    run_audit(tmp_path / "a", FIX / "run_clean", nocontext=str(FIX / "nocontext_clean"), workers=1)
    run_audit(tmp_path / "b", FIX / "planted_longest.jsonl", workers=1)
    run_audit(tmp_path / "c", FIX / "digital_planted", workers=1)
    for key, c in REGISTRY.items():
        assert read[key] <= set(c.uses), (key, read[key] - set(c.uses))
    assert read["length"] and read["shortcut"] and read["leakage"]  # the proxy saw the reads


PROBE_CHECK = """\"\"\"A check added as one file.\"\"\"

from gen.generators.audit.registry import CheckResult, check, finding


@check(
    "probe",
    order=19,
    title="Probe: items counted",
    finds="nothing, it counts items",
    uses=("alpha",),
)
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
        and '"integrity","scenarios","context_states","context_options","probe"]' in shown.stdout
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
        19,
        "probe",
        {"items": 80},
    )
    assert report["findings"][0]["check_id"] == 19
    md = (tmp_path / "out" / "audit.md").read_text()
    assert "## 19. Probe: items counted\n\nCounts the items" in md and "| alpha | 0.01 |" in md
    bad = run_gen("audit", f"input={FIX / 'clean.jsonl'}", "checks=[probe,nope]")
    assert bad.returncode == 2 and "nope" in bad.stderr and "'probe'" in bad.stderr


# -------------------------------------------------------------------- the report and the run folder


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_two_option_items_plot_without_a_divide_by_zero(tmp_path: Path) -> None:
    """Yes/no items have no distractor pair: the option-similarity plot draws the
    answer-distractor cosines alone (a density of no values warned "invalid value in divide")."""
    rows = []
    for line in (FIX / "clean.jsonl").read_text().splitlines()[:12]:
        row = json.loads(line)
        keep = [row["answer"], (row["answer"] + 1) % len(row["options"])]
        row["options"] = [row["options"][k] for k in keep]
        row["origins"] = [row["origins"][k] for k in keep]
        row["answer"] = 0
        rows.append(row)
    result, _, report = run_audit(
        tmp_path / "a", write_jsonl(tmp_path / "yn.jsonl", rows), plots=True
    )
    assert report["plots"]["similar_options"] == "option_similarity.png"
    assert (result.out_dir / "option_similarity.png").read_bytes()[:4] == b"\x89PNG"


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
    # check 18 also reports the copied answer (test_planted_copied_answer_and_privileged_leaks);
    # left out here, the counts are the leakage check's
    result, findings, report = run_audit(
        tmp_path,
        FIX / "planted_leak.jsonl",
        max_listed=2,
        checks=[c for c in CHECKS if c != "context_options"],
    )
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


@pytest.mark.parametrize("cache", ["gen's cache", "no cache"])
def test_an_audit_writes_nothing_under_home(tmp_path: Path, cache_dir: Path, cache: str) -> None:
    """Before, every audit (and bank add) made ``~/.config/matplotlib`` and
    ``~/.cache/matplotlib``: matplotlib's config and font cache now go to gen's cache folder
    (``<cache_dir>/matplotlib``), or a temporary folder when caching is off."""
    import os
    import subprocess
    import sys

    from conftest import gen_env

    home = tmp_path / "home"
    home.mkdir()
    env = gen_env(cache_dir)
    for var in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env.pop(var, None)
    env["HOME"] = str(home)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gen",
            "audit",
            f"input={FIX / 'clean.jsonl'}",
            "embeddings=false",
            "checks=[length,position]",
            "hydra.run.dir=run",
            *(["cache_dir=null"] if cache == "no cache" else []),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert any(p.suffix == ".png" for p in (tmp_path / "run").iterdir())  # matplotlib ran
    assert sorted(os.path.relpath(p, home) for p in home.rglob("*")) == []
    assert (cache_dir / "matplotlib").is_dir() == (cache == "gen's cache")
