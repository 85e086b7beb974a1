"""Exporting the versioned bank, and what it holds beyond tom's MCQs: the export layouts (parquet
with its dataset card, WAGIBench's MCQ files and digital state, EgoToM's columns with the items
that do not fit, an older version, a drifted bank refused); context-tracking scenarios (ids from
the visible channels only, added, deduplicated, verified and exported ``format=scenarios``, the
benchmark's own examples through its validator); and ``require_review`` (items admitted when k
reviewers accepted them, recorded in the lock and the dataset card).

Part of the bank's tests (the core in ``test_bank.py``, verify and hardening in
``test_bank_verify.py``); the inputs, the audit stand-in and the helpers that run the bank are in
``tests/bank_runs.py``. ``test_real_audit_*`` run the registered audit, the others its stand-in."""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from bank_runs import (
    WORDS,
    Bank,
    audit_standin,  # noqa: F401  (pytest fixture, autouse: the audit stand-in)
    digital_run_fixture,  # noqa: F401  (pytest fixture digital_run)
    flip_byte,
    grown_fixture,  # noqa: F401  (pytest fixture grown)
    ids_of,
    mcq,
    problems,
    run_folder,
)
from conftest import read_jsonl

from gen import kinds
from gen.banks.store import LOCK, version_dir
from gen.errors import ConfigError, GenError, InputError, MissingInputError
from gen.formats.mcq import egotom_columns, load_bank

# --------------------------------------------------------------------------- export


def test_export_parquet_with_dataset_card(grown: Bank) -> None:
    result, _ = grown.export("parquet")
    out = result.out_dir / "parquet"
    lock = grown.lock()
    assert sorted(p.name for p in out.iterdir()) == [
        "EXPORT.json",
        "MANIFEST.lock.json",
        "README.md",
        "croissant.json",
        "tom.parquet",
    ]
    assert (
        hashlib.sha256((out / "tom.parquet").read_bytes()).hexdigest()
        == lock["files"]["tom.parquet"]
    )
    assert (result.accepted, result.requested) == (7, 7)
    card = (out / "README.md").read_text()
    assert card.startswith("---\nconfigs:\n- config_name: tom\n  data_files: tom.parquet\n---\n")
    assert "| tom | goal | 7 |" in card
    assert "| v0001 |" in card and "| v0002 |" in card
    assert "| tom/goals.jinja | " + "a" * 64 + " |" in card  # provenance: prompt hashes
    assert "smollm2.gguf" in card
    assert "## Last audit" in card and "| 1 | structure | ran | 0 | 0 | 0 |" in card
    assert hashlib.sha256((grown.root / "current" / LOCK).read_bytes()).hexdigest() in card


def test_export_wagibench_layouts(tmp_path: Path, digital_run: Path) -> None:
    bank = Bank(tmp_path)
    dis = [
        dict(
            mcq(i, "similar", n_options=4),
            question="Which action?",
            privileged={
                "reference_goal_id": f"g{i}",
                "structured_goal": {"type": "shop", "content": f"milk {i}"},
            },
        )
        for i in range(3)
    ]
    layout = [
        {
            "x": {
                "client_tag": f"obs{i}",
                "context_window": {"start_s": 1, "end_s": 2},
                "cues": [],
                "mcq_set": [{"type": "shop", "content": f"o{k}"} for k in range(4)],
            },
            "y": d["answer"],
            "meta": {
                "client_tag": f"obs{i}",
                "scenario": {"shortname": "s"},
                "item_id": d["item_id"],
                "question_type": "similar",
            },
        }
        for i, d in enumerate(dis[:2])
    ]  # the third has no layout row: built from its record
    bank.add(
        run_folder(
            tmp_path / "dis", dis, "distractors", extra={"wagibench_mcq_similar.json": layout}
        )
    )
    digital = digital_run
    bank.add(digital)
    result, _ = bank.export("wagibench")
    out = result.out_dir / "wagibench"
    assert sorted(p.name for p in out.iterdir()) == [
        "EXPORT.json",
        "digital_state.json",
        "wagibench_mcq_similar.json",
    ]
    rows = json.loads((out / "wagibench_mcq_similar.json").read_text())
    ids = ids_of(dis)
    assert [r["meta"]["item_id"] for r in rows] == ids
    assert [r["meta"]["source_item_id"] for r in rows] == [d["item_id"] for d in dis]
    assert rows[0]["x"] == layout[0]["x"] and rows[0]["y"] == dis[0]["answer"]
    built = rows[2]
    assert built["y"] == dis[2]["answer"] and len(built["x"]["mcq_set"]) == 4
    assert built["x"]["mcq_set"][dis[2]["answer"]] == {"type": "shop", "content": "milk 2"}
    state = json.loads((out / "digital_state.json").read_text())
    bundles = read_jsonl(digital / "digital.jsonl")
    from gen.formats.wagibench import wagibench_record

    for b in bundles:
        bid = kinds.require("digital").item_id(b)
        expected = wagibench_record({**b, "bundle_id": bid})
        assert state[bid]["x"] == expected["x"] and state[bid]["meta"]["client_tag"] == bid
        assert state[bid]["meta"]["source_item_id"] == b["bundle_id"]
    assert result.accepted == 4


def test_export_egotom_columns_and_unfit_items(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    good = [mcq(i) for i in range(3)]
    four = mcq(7, n_options=4)
    other = mcq(8, "who")
    bank.add(run_folder(tmp_path / "tom_a", [*good, four, other]))
    result, _ = bank.export("egotom")
    assert (result.accepted, result.rejected) == (3, 2)
    rejects = {r["reason"] for r in read_jsonl(result.out_dir / "rejects.jsonl")}
    assert rejects == {"wrong_option_count", "not_egotom_type"}
    df = pl.read_csv(result.out_dir / "egotom" / "egotom_goal_shuffled.csv", infer_schema_length=0)
    assert df.columns == egotom_columns("goal")
    assert df["cuid"].to_list() == [r["clip_id"] for r in good]
    assert df["gt_goal"].to_list() == [r["options"][r["answer"]] for r in good]
    assert df["goal_choice_b"].to_list() == [r["options"][1] for r in good]
    assert df["narrations_in_context"].to_list() == [r["visible"]["context"] for r in good]
    # and EgoToM's loader reads it back to the same items
    back = load_bank(result.out_dir / "egotom" / "egotom_goal_shuffled.csv").items
    assert [q.answer_text for q in back] == df["gt_goal"].to_list()


def test_export_an_older_version(grown: Bank) -> None:
    result, _ = grown.export("parquet", version=1)
    assert result.requested == 4
    assert (
        pl.read_parquet(result.out_dir / "parquet" / "tom.parquet")["added_in"].to_list() == [1] * 4
    )


def test_export_refuses_a_drifted_bank(grown: Bank) -> None:
    """Exit code 1 with verify's own line (it was exit 2 before; drift is verify's exit 1)."""
    flip_byte(grown.root / "current" / "tom.parquet")
    with pytest.raises(GenError, match="DRIFT versions/v0002/tom.parquet: hash_mismatch") as e:
        grown.export("parquet")
    assert e.value.exit_code == 1


# ----------------------------------------------------------------------- context-tracking scenarios


def scenario(i: int, *, sid: str | None = None, target: str = "current") -> dict[str, Any]:
    """A valid scenario in the context benchmark's released schema, with its own words (and, for
    i < 9, its own signature: the validator allows 2 per signature)."""
    r = random.Random(f"scenario/{i}")
    w = lambda k: " ".join(r.sample(WORDS, k))  # noqa: E731
    gold = {
        "current_answers": [w(1), w(1), w(2)],
        "prior_answers": [w(1), w(1), w(2)],
        "clarify_indicators": [],
        "abstain_indicators": [],
    }
    return {
        "scenario_id": sid or f"sc-{i + 1:02d}",
        "subset": "bank",
        "pair_id": None,
        "target_context": target,
        "change_type": "object_in_hand",
        "activity_domain": ("kitchen", "workshop", "garden")[i // 3 % 3],
        "referent_complexity": "single_referent",
        "difficulty_tier": ("easy", "medium", "hard")[i % 3],
        "time_gap_bucket": "seconds",
        "context_image": None,
        "turn_1_image": f"A hand holds a long {w(3)} near a steel vessel.",
        "turn_1_user": f"Should I keep moving this {w(2)}?",
        "turn_2_image": f"A hand grips a flat {w(3)} over a wooden slab.",
        "turn_2_user": f"Is my grip okay for this {w(2)}?",
        "turn_3_repair_prompt": f"I mean the {gold['current_answers'][0]} now, not "
        f"the {gold['prior_answers'][0]}.",
        "turn_3_repair_prompt_deictic": "I mean this thing in my hand right now.",
        "notes": f"note {i}",
        "gold": gold,
    }


def test_scenario_id_hashes_the_visible_channels_only() -> None:
    from gen.schemas.scenarios import VISIBLE_FIELDS

    s = scenario(1)
    relabelled = {
        **s,
        "scenario_id": "sc-99",
        "target_context": "prior",
        "change_type": "location",
        "notes": "other",
        "difficulty_tier": "hard",
        "gold": {**s["gold"], "current_answers": ["something else", "a", "b"]},
        "turn_2_user": "  Is my grip   okay" + s["turn_2_user"][len("Is my grip okay") :],
    }  # spacing only
    assert kinds.require("scenarios").item_id(relabelled) == kinds.require("scenarios").item_id(s)
    assert re.fullmatch(r"[0-9a-f]{32}", kinds.require("scenarios").item_id(s))
    for f in VISIBLE_FIELDS:
        scenarios = kinds.require("scenarios")
        assert scenarios.item_id({**s, f: (s[f] or "") + " changed"}) != scenarios.item_id(s), f


def test_scenarios_are_added_verified_deduplicated_and_exported(tmp_path: Path) -> None:
    from gen.contextbench import LOCK as SCENARIO_LOCK
    from gen.schemas.scenarios import RECORD_FIELDS

    bank = Bank(tmp_path)
    first = [scenario(i) for i in range(4)]
    result, _ = bank.add(run_folder(tmp_path / "sc_a", first, generator="scenarios"))
    assert (result.accepted, result.exit_code, bank.current) == (4, 0, 1)
    frame = bank.frame("scenarios")
    assert frame["item_id"].to_list() == [kinds.require("scenarios").item_id(s) for s in first]
    assert frame["source_item_id"].to_list() == [s["scenario_id"] for s in first]
    assert set(frame["question_type"].to_list()) == {"object_in_hand/current"}
    assert bank.lock()["counts"]["scenarios"]["items"] == 4 and problems(bank) == []
    # the same scenarios renumbered and with other gold lists: the same items, refused
    again = [
        {**s, "scenario_id": f"sc-{50 + k}", "gold": {**s["gold"], "abstain_indicators": ["x"]}}
        for k, s in enumerate(first[:2])
    ] + [scenario(4, sid="sc-05")]
    result, _ = bank.add(run_folder(tmp_path / "sc_b", again, generator="scenarios"))
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert [(r["reason"], r["stage"]) for r in rejects] == [("duplicate", "bank")] * 2
    assert (result.accepted, bank.current) == (1, 2) and problems(bank) == []
    # a third batch reusing a scenario id: kept in the bank, refused by the export (ids are the
    # format's keys)
    bank.add(run_folder(tmp_path / "sc_c", [scenario(5, sid="sc-01")], generator="scenarios"))
    result, _ = bank.export("scenarios", out=str(tmp_path / "export"))
    out = tmp_path / "export"
    rows = read_jsonl(out / "scenarios.jsonl")
    assert [r["scenario_id"] for r in rows] == ["sc-01", "sc-02", "sc-03", "sc-04", "sc-05"]
    assert rows[:4] == first and all(tuple(r) == RECORD_FIELDS for r in rows)
    assert [
        (r["reason"], r["record_id"]) for r in read_jsonl(result.out_dir / "rejects.jsonl")
    ] == [("duplicate_scenario_id", kinds.require("scenarios").item_id(scenario(5, sid="sc-01")))]
    ids = json.loads((out / "bank_ids.json").read_text())
    assert ids["sc-01"] == {
        "item_id": kinds.require("scenarios").item_id(first[0]),
        "added_in": "v0001",
        "source_item_id": "sc-01",
    }
    lock = json.loads((out / SCENARIO_LOCK).read_text())
    assert (
        lock["scenarios_sha256"]
        == hashlib.sha256((out / "scenarios.jsonl").read_bytes()).hexdigest()
    )
    assert (
        lock["counts"] == {"bank": 5}
        and lock["bank_lock_sha256"]
        == hashlib.sha256((version_dir(bank.root, 3) / LOCK).read_bytes()).hexdigest()
    )
    again, _ = bank.export("scenarios", out=str(tmp_path / "export2"))  # byte-reproducible
    assert (tmp_path / "export2" / "scenarios.jsonl").read_bytes() == (
        out / "scenarios.jsonl"
    ).read_bytes()
    result, _ = bank.export(
        "parquet", out=str(tmp_path / "parquet")
    )  # the generic exports carry the kind
    assert (tmp_path / "parquet" / "scenarios.parquet").is_file() and result.exit_code == 0
    assert "Wearable Assistant Context Bench" in (tmp_path / "parquet" / "README.md").read_text()


def test_contrast_members_are_not_near_duplicates_of_each_other(tmp_path: Path) -> None:
    a = {**scenario(1, sid="adv-01"), "subset": "contrast", "pair_id": "pair-01"}
    b = {
        **a,
        "scenario_id": "adv-02",
        "target_context": "prior",
        "turn_3_repair_prompt_deictic": None,
        "turn_2_user": a["turn_2_user"].replace("Is my grip okay", "Was my grip okay"),
    }
    bank = Bank(tmp_path)
    result, _ = bank.add(run_folder(tmp_path / "pair", [a, b], generator="scenarios"))
    assert result.accepted == 2  # one turn 1, a current and a prior target: two question types
    assert set(bank.frame("scenarios")["question_type"].to_list()) == {
        "object_in_hand/current",
        "object_in_hand/prior",
    }


def test_a_bad_scenario_line_is_an_input_error_naming_file_and_line(tmp_path: Path) -> None:
    rows = [scenario(0), {**scenario(1), "change_type": "teleport"}]
    folder = run_folder(tmp_path / "bad", rows, generator="scenarios")
    with pytest.raises(
        InputError,
        match=r"scenarios.jsonl:2: not a scenario in the released schema \(change_type: ",
    ):
        Bank(tmp_path).add(folder)
    with pytest.raises(ConfigError, match="kind=digital does not fit"):
        Bank(tmp_path).add(folder, kind="digital")


def test_real_audit_gates_a_scenario_batch(tmp_path: Path) -> None:
    """The registered audit on a scenario batch: its scenarios check's errors refuse the batch."""
    bank = Bank(tmp_path)
    leaky = [scenario(i) for i in range(3)]
    leaky[1]["turn_2_user"] = f"Is this {leaky[1]['gold']['current_answers'][0]} right?"
    result, _ = bank.add(run_folder(tmp_path / "sc", leaky, generator="scenarios"))
    assert (result.accepted, result.exit_code, bank.current) == (0, 1, None)
    report = json.loads((result.out_dir / "audit" / "audit.json").read_text())
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert {(f["check"], f["kind"], tuple(f["items"])) for f in errors} == {
        ("scenarios", "gold_in_speech", ("sc-02",)),
        # the user now names the current referent, and the context names no other (check 18)
        ("context_options", "answer_only_named", ("sc-02",)),
    }
    result, _ = bank.add(run_folder(tmp_path / "sc2", leaky, generator="scenarios"), force=True)
    assert (result.accepted, bank.current) == (3, 1)


def test_the_benchmarks_examples_round_trip_and_pass_its_validator(tmp_path: Path) -> None:
    """The 10 released examples through add (forced: their audit has findings) and export
    format=scenarios: the same records in the same order and field order, and the benchmark's own
    validator (checks 1, 2, 3, 6) passes on the export."""
    from conftest import CONTEXT_BENCH, context_bench_failures, context_bench_validator

    examples = CONTEXT_BENCH / "examples.jsonl"
    if not examples.is_file():
        pytest.skip("the context benchmark's examples are not in ../shared")
    validator = context_bench_validator()
    bank = Bank(tmp_path)
    result, _ = bank.add(examples, force=True)
    assert (result.accepted, bank.current) == (10, 1)
    bank.export("scenarios", out=str(tmp_path / "export"))
    rows = read_jsonl(tmp_path / "export" / "scenarios.jsonl")
    released = read_jsonl(examples)
    assert rows == released and [list(r) for r in rows] == [list(r) for r in released]
    assert context_bench_failures(validator, rows) == []


# --------------------------------------------------------------------------- require_review


def test_require_review_admits_items_accepted_by_k_reviewers_and_records_who(
    tmp_path: Path,
) -> None:
    from gen.formats.labels import append_label
    from gen.generators.review.items import load_items
    from gen.schemas.review import ReviewLabel

    records = [mcq(i) for i in range(6)]
    folder = run_folder(tmp_path / "tom_a", records)
    ids = ids_of(records)
    assert [it.item_id for it in load_items(folder)[0]] == ids  # review labels carry the bank's ids

    def label(reviewer: str, i: int, decision: str) -> None:
        append_label(
            folder,
            ReviewLabel(
                item_id=ids[i], reviewer=reviewer, time="t", rubric="mcq-egotom", decision=decision
            ),
        )

    for i in range(4):
        label("alice", i, "accept")
    label("bob", 0, "accept")
    label("bob", 1, "reject")
    label("bob", 1, "accept")  # the last label counts
    label("bob", 2, "reject")
    label("carol", 3, "needs_edit")
    bank = Bank(tmp_path)
    with pytest.raises(MissingInputError, match="holds no labels"):
        bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]), require_review=1)
    result, _ = bank.add(folder, require_review=2)
    assert (result.accepted, result.rejected, result.exit_code) == (2, 4, 0)
    assert bank.ids() == set(ids[:2])
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert {(r["stage"], r["reason"]) for r in rejects} == {("review", "not_accepted")}
    detail = {r["record_id"]: r["detail"] for r in rejects}
    assert detail[ids[2]].endswith("accepted by 1 of the 2 reviewer(s) required (alice)")
    assert detail[ids[5]].endswith("accepted by 0 of the 2 reviewer(s) required")
    review = bank.lock()["sources"][0]["review"]
    assert review["required"] == 2 and review["accepted_by"] == {
        ids[0]: ["alice", "bob"],
        ids[1]: ["alice", "bob"],
    }
    assert set(review["label_files"]) == {"alice", "bob", "carol"}
    assert (
        review["label_files"]["alice"]
        == hashlib.sha256((folder / "reviews" / "alice.jsonl").read_bytes()).hexdigest()
    )
    verified, _ = bank.verify()
    assert verified.exit_code == 0
    # one reviewer is enough at k=1: the items alice accepted and bob did not refuse join
    result, _ = bank.add(folder, require_review=1)
    assert result.accepted == 2 and bank.ids() == set(ids[:4])
    # the version's review summary, which bank export puts in the dataset card
    summary = json.loads((bank.root / "current" / "review" / "summary.json").read_text())
    assert {k: summary[k] for k in ("items_reviewed", "by_verdict", "reviewers")} == {
        "items_reviewed": 4,
        "by_verdict": {"accept": 4},
        "reviewers": 2,
    }
    assert (
        summary["reviewer_names"] == ["alice", "bob"] and "several rules" in summary["protocol"]
    )  # k=2, then k=1
    result, _ = bank.add(
        run_folder(tmp_path / "tom_c", [mcq(7)])
    )  # unreviewed: the summary carries over
    assert result.accepted == 1
    assert json.loads((bank.root / "current" / "review" / "summary.json").read_text()) == summary
    assert bank.verify()[0].exit_code == 0
    assert bank.export("parquet", out=str(tmp_path / "release"))[0].exit_code == 0
    assert (
        "4 items reviewed by 2 reviewer(s): accept 4"
        in (tmp_path / "release" / "README.md").read_text()
    )
