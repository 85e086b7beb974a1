"""The versioned bank, its core: content ids (ignoring run-specific fields, the documented hash,
EgoTom rows, digital items) and add (duplicates, near-duplicates, the audit gate, force, kinds,
versions and hard links, external banks, roles files, nocontext runs).

A failure while staging, the config and the CLI's action word, two adds at once, SIGKILL during add
and ids across processes are in ``test_bank_processes.py``; verify and the hardening against
damaged banks and bad places in ``test_bank_verify.py``; exports, context-tracking scenarios and
``require_review`` in ``test_bank_export.py``; the inputs, the audit stand-in and the helpers that
run the bank in ``tests/bank_runs.py``.

Most tests run the registered ``audit`` through a stand-in (:func:`bank_runs.standin_audit`, same
name, ``input=``/``fail_on=`` options and ``audit.json`` output) so that findings can be planted
exactly; ``test_real_audit_*`` run the real one when it is registered."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from bank_runs import (
    LEAK,
    WORDS,
    Bank,
    audit_standin,  # noqa: F401  (pytest fixture, autouse: the audit stand-in)
    digital_run_fixture,  # noqa: F401  (pytest fixture digital_run)
    ids_of,
    mcq,
    paraphrase,
    run_folder,
)
from conftest import check_run_folder, read_jsonl

from gen import kinds
from gen.banks.store import LOCK, version_dir
from gen.banks.verify import verify_bank
from gen.cli import validate
from gen.engine.manifest import output_hashes
from gen.errors import InputError
from gen.formats.mcq import egotom_columns, load_bank
from gen.generators.audit.registry import check_keys
from gen.generators.bank import plan
from gen.generators.bank.add import near_duplicates
from gen.kinds import mcq_identity
from gen.kinds.digital import strip_ids
from gen.kinds.mcq import egotom_row_mcq

# --------------------------------------------------------------------------- ids


def test_id_ignores_run_specific_fields_and_option_order() -> None:
    rec = mcq(1)
    other = json.loads(json.dumps(rec))
    other.update(
        item_id="f" * 32, group="another clip", privileged={"truth": "x"}, clip_start_time=99.0
    )
    order = [2, 0, 1]  # reshuffled options, the same answer text
    other["options"] = [rec["options"][k] for k in order]
    other["answer"] = order.index(rec["answer"])
    other["origins"] = [rec["origins"][k] for k in order]
    other["question"] = "  What is C's   future goal? "  # whitespace only
    assert kinds.require("mcq").item_id(other) == kinds.require("mcq").item_id(rec)
    assert re.fullmatch(r"[0-9a-f]{32}", kinds.require("mcq").item_id(rec))


@pytest.mark.parametrize("change", ["question", "option", "answer", "context", "question_type"])
def test_id_changes_with_what_the_candidate_sees(change: str) -> None:
    rec = mcq(1)
    other = json.loads(json.dumps(rec))
    if change == "question":
        other["question"] = "What will C do next?"
    elif change == "option":
        other["options"][1] += " quickly"
    elif change == "answer":
        other["answer"] = (rec["answer"] + 1) % 3
    elif change == "context":
        other["visible"]["context"] += "\n    09m:00s | #C C waves"
    else:
        other["question_type"] = "belief"
    assert kinds.require("mcq").item_id(other) != kinds.require("mcq").item_id(rec)


def test_id_is_the_documented_hash() -> None:
    """Anyone can recompute an id: SHA-256 of the canonical JSON of the identity, 32 hex."""
    rec = mcq(3)
    ident = {
        "question_type": "goal",
        "question": rec["question"],
        "visible": {"visible.context": " ".join(rec["visible"]["context"].split())},
        "options": sorted(rec["options"]),
        "answer": rec["options"][rec["answer"]],
    }
    text = json.dumps(ident, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert kinds.require("mcq").item_id(rec) == hashlib.sha256(text.encode()).hexdigest()[:32]


def test_egotom_row_reads_as_gen_mcq_does(tmp_path: Path) -> None:
    rows = [
        {
            "vuid": "v1",
            "cuid": "v1~pass_1~0-9",
            "narrations_in_context": "    00m:01s | #C C opens the door",
            "gt_goal": "To leave",
            "goal_choice_a": "To cook",
            "goal_choice_b": " To leave ",
            "goal_choice_c": "To sleep",
            "clip_start_time": "0.0",
            "clip_end_time": "9.5",
        },
        {
            "vuid": "v2",
            "cuid": "v2~pass_1~3-4",
            "narrations_in_context": "",
            "gt_goal": "missing",
            "goal_choice_a": "a",
            "goal_choice_b": "b",
            "goal_choice_c": None,
            "clip_start_time": "1",
            "clip_end_time": "2",
        },
    ]
    path = tmp_path / "egotom_goal_shuffled.csv"
    pl.DataFrame(rows, schema=dict.fromkeys(egotom_columns("goal"), pl.String)).write_csv(path)
    theirs = load_bank(path).items
    mine = [egotom_row_mcq(r) for _, r in kinds.require("mcq").read(path)]
    assert [mcq_identity(q) for q in mine] == [mcq_identity(q) for q in theirs]
    assert mine[0].answer == 1 and mine[1].answer is None


def test_digital_id_ignores_seed_derived_ids(digital_run: Path) -> None:
    b = read_jsonl(digital_run / "digital.jsonl")[0]
    renamed = json.loads(json.dumps(b).replace(b["bundle_id"], "0" * 32))
    for key in ("event_id", "message_id", "persona_id", "track_id"):
        renamed = json.loads(
            re.sub(rf'"{key}": "[0-9a-f]{{32}}"', f'"{key}": "{"1" * 32}"', json.dumps(renamed))
        )
    renamed["stats"] = {"chars_total": 1}
    assert renamed != b
    assert kinds.require("digital").item_id(renamed) == kinds.require("digital").item_id(b)
    changed = json.loads(json.dumps(b))
    changed["apps"]["Calendar"]["events"][0]["title"] += "!"
    assert kinds.require("digital").item_id(changed) != kinds.require("digital").item_id(b)
    assert changed["cue"]["cue_id"] and "cue_id" in json.dumps(
        strip_ids(b)
    )  # a cue id is content, kept


# --------------------------------------------------------------------------- add


def test_first_add_creates_version_one(tmp_path: Path) -> None:
    records = [mcq(i) for i in range(8)]
    folder = run_folder(tmp_path / "tom_a", records)
    bank = Bank(tmp_path)
    result, ctx = bank.add(folder, message="first release")
    assert (result.accepted, result.rejected, result.exit_code) == (8, 0, 0)
    check_run_folder(result.out_dir, "bank", 8, hydra=False)
    assert bank.current == 1 and os.readlink(bank.root / "current") == "versions/v0001"
    df = bank.frame("tom")
    assert df["item_id"].to_list() == ids_of(records)
    assert df["added_in"].to_list() == [1] * 8
    assert [
        json.loads(r) for r in df["record"].to_list()
    ] == records  # the original records, unchanged
    assert df["options"].to_list() == [r["options"] for r in records]
    assert df["source"].unique().to_list() == [
        hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    ]
    lock = bank.lock()
    assert (lock["version"], lock["label"], lock["schema_revision"], lock["items"]) == (
        1,
        "v0001",
        1,
        8,
    )
    assert lock["counts"] == {"tom": {"items": 8, "by_question_type": {"goal": 8}}}
    assert lock["prompts"] == {"tom/_system.jinja": ["c" * 64], "tom/goals.jinja": ["a" * 64]}
    assert lock["sources"][0]["llm"]["model_sha256"] == "b" * 64
    assert set(lock["files"]) == {
        "tom.parquet",
        "CHANGELOG.md",
        "audit/audit.json",
        "audit/audit.jsonl",
        "audit/rejects.jsonl",
        "audit/manifest.json",
    }
    for name, sha in lock["files"].items():
        assert hashlib.sha256((bank.root / "current" / name).read_bytes()).hexdigest() == sha
    assert lock["history"][0]["message"] == "first release"
    # the audit saw the input run folder, through the registry
    audit = json.loads((bank.root / "current" / "audit" / "audit.json").read_text())
    assert audit["input"] == str(folder) and "tom.jsonl" in " ".join(audit["seen"])
    assert "first release" in (bank.root / "current" / "CHANGELOG.md").read_text()


def test_same_batch_twice_adds_nothing(tmp_path: Path) -> None:
    folder = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(6)])
    bank = Bank(tmp_path)
    bank.add(folder)
    lock_before = (bank.root / "current" / LOCK).read_bytes()
    result, ctx = bank.add(folder)
    assert (result.accepted, result.rejected, result.exit_code) == (0, 6, 0)
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert {(r["stage"], r["reason"]) for r in rejects} == {("bank", "duplicate")}
    assert [r["record_id"] for r in rejects] == sorted(
        bank.ids(), key=[r["record_id"] for r in rejects].index
    )
    assert all("added in v0001" in r["detail"] for r in rejects)
    assert bank.current == 1 and (bank.root / "current" / LOCK).read_bytes() == lock_before
    assert sorted(p.name for p in (bank.root / "versions").iterdir()) == ["v0001"]
    assert result.manifest["bank"]["released"] is False


def test_duplicates_within_a_batch_and_reshuffled_copies(tmp_path: Path) -> None:
    records = [mcq(i) for i in range(4)]
    copy = json.loads(json.dumps(records[1]))
    copy["options"] = copy["options"][::-1]
    copy["answer"] = 2 - copy["answer"]
    copy["item_id"] = "e" * 32
    folder = run_folder(tmp_path / "tom_a", [*records, copy])
    result, _ = Bank(tmp_path).add(folder)
    assert (result.accepted, result.rejected) == (4, 1)
    (rej,) = read_jsonl(result.out_dir / "rejects.jsonl")
    assert (rej["index"], rej["stage"], rej["reason"]) == (4, "batch", "duplicate")
    assert rej["record_id"] == ids_of(records)[1] and "tom.jsonl:2" in rej["detail"]


def test_paraphrased_batch_is_refused_as_near_duplicates(tmp_path: Path) -> None:
    records = [mcq(i) for i in range(6)]
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", records))
    paraphrased = [paraphrase(r) for r in records[:4]] + [mcq(i) for i in range(6, 8)]
    result, ctx = bank.add(run_folder(tmp_path / "tom_b", paraphrased))
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert [(r["index"], r["stage"], r["reason"]) for r in rejects] == [
        (i, "bank", "near_duplicate") for i in range(4)
    ]
    for r, orig in zip(rejects, ids_of(records), strict=False):
        cos = float(re.search(r"cosine (\d\.\d+)", r["detail"]).group(1))
        assert cos >= 0.95 and orig in r["detail"] and "v0001" in r["detail"]
    assert result.accepted == 2 and bank.current == 2
    assert bank.ids() == set(ids_of(records)) | set(ids_of(paraphrased[4:]))
    # exact checks only: the paraphrases are new content
    bank2 = Bank(tmp_path / "exact")
    bank2.add(run_folder(tmp_path / "tom_a", records))
    result, _ = bank2.add(run_folder(tmp_path / "tom_b", paraphrased), near_dup_sim=None)
    assert (result.accepted, result.rejected) == (6, 0)


def test_near_duplicates_within_a_batch_keep_the_first(tmp_path: Path) -> None:
    a = mcq(1)
    folder = run_folder(tmp_path / "tom_a", [a, paraphrase(a), mcq(2), paraphrase(paraphrase(a))])
    result, _ = Bank(tmp_path).add(folder)
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert [(r["index"], r["stage"], r["reason"]) for r in rejects] == [
        (1, "batch", "near_duplicate"),
        (3, "batch", "near_duplicate"),
    ]
    assert all(kinds.require("mcq").item_id(a) in r["detail"] for r in rejects)


def test_near_duplicates_only_within_a_question_type(tmp_path: Path) -> None:
    goal = mcq(1)
    belief = dict(paraphrase(goal), question_type="belief")
    result, _ = Bank(tmp_path).add(run_folder(tmp_path / "tom_a", [goal, belief]))
    assert (result.accepted, result.rejected) == (2, 0)


def test_near_duplicates_pure() -> None:
    def unit(*v: float) -> list[float]:
        a = np.array(v, dtype=np.float32)
        return list(a / np.linalg.norm(a))

    old = np.array([unit(1, 0, 0)])
    new = np.array(
        [
            unit(1, 0.1, 0),  # near the bank item
            unit(0, 1, 0),  # kept
            unit(0, 1, 0.05),  # near new[1], which was kept
            unit(0, 0, 1),  # kept
            unit(0.9, 0.1, 0),
        ]
    )  # near the bank item, not near a refused one
    got = near_duplicates(new, old, 0.99)
    assert [None if m is None else (m.where, m.index) for m in got] == [
        ("bank", 0),
        None,
        ("batch", 1),
        None,
        ("bank", 0),
    ]
    # a refused item does not refuse its own near copies: only kept ones count
    chain = np.array([unit(1, 0, 0), unit(1, 0.12, 0), unit(1, 0.24, 0)])
    sims = chain @ chain.T
    thr = float(sims[0, 1]) - 1e-4  # 0~1 and 1~2 are near, 0~2 is not
    assert sims[0, 2] < thr
    assert [None if m is None else m.index for m in near_duplicates(chain, None, thr)] == [
        None,
        0,
        None,
    ]
    # the threshold is inclusive
    same = np.array([[1.0, 0, 0], [1.0, 0, 0]])
    assert near_duplicates(same, None, 1.0)[1] is not None


def test_audit_findings_refuse_the_batch(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]))
    folder = run_folder(tmp_path / "tom_b", [mcq(i) for i in range(3, 6)])
    result, ctx = bank.add(folder, audit_options={"findings": [LEAK]})
    assert (result.accepted, result.rejected, result.exit_code) == (0, 3, 1)
    rejects = read_jsonl(result.out_dir / "rejects.jsonl")
    assert {(r["stage"], r["reason"]) for r in rejects} == {("audit", "audit_failed")}
    assert (
        "1 finding(s) at or above fail_on=error" in rejects[0]["detail"]
        and "leakage/answer_in_visible" in rejects[0]["detail"]
    )
    assert bank.current == 1 and len(bank.ids()) == 3
    assert (
        result.out_dir / "audit" / "audit.json"
    ).is_file()  # the report stays in the add's run folder
    # below fail_on: added
    result, _ = bank.add(folder, audit_options={"findings": [dict(LEAK, severity="warning")]})
    assert (result.accepted, result.exit_code, bank.current) == (3, 0, 2)
    assert bank.lock()["history"][-1]["audit"]["by_severity"] == {
        "error": 0,
        "warning": 1,
        "info": 0,
    }


def test_real_audit_gates_the_batch(tmp_path: Path) -> None:
    """The registered audit (not the stand-in): a clean batch passes, a copied answer refuses."""
    bank = Bank(tmp_path)
    # every check but the text gates, which refuse this file's nonce words ("To kabar lofin …")
    # on their face (tested in test_audit)
    opts = {"checks": [k for k in check_keys() if k != "text"]}
    result, _ = bank.add(
        run_folder(tmp_path / "tom_a", [mcq(i) for i in range(6)]), audit_options=opts
    )
    assert (result.accepted, result.exit_code, bank.current) == (6, 0, 1)
    leaky = [mcq(i) for i in range(6, 12)]
    leaky[2]["visible"]["context"] += (
        "\n    05m:00s | #C C says: " + leaky[2]["options"][leaky[2]["answer"]]
    )
    result, _ = bank.add(run_folder(tmp_path / "tom_b", leaky), audit_options=opts)
    assert (result.accepted, result.exit_code, bank.current) == (0, 1, 1)
    report = json.loads((result.out_dir / "audit" / "audit.json").read_text())
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors and all(f["items"] == [leaky[2]["item_id"]] for f in errors)
    # the copied answer, and so the only option its context names (audit check 18)
    assert {f["check"] for f in errors} == {"leakage", "context_options"}
    result, _ = bank.add(run_folder(tmp_path / "tom_c", leaky), force=True, audit_options=opts)
    assert (result.accepted, bank.current) == (6, 2)
    assert "leakage/" in (bank.root / "current" / "CHANGELOG.md").read_text()


def test_force_adds_and_records_the_findings(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    result, _ = bank.add(
        run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]),
        audit_options={"findings": [LEAK]},
        force=True,
    )
    assert (result.accepted, result.exit_code, bank.current) == (3, 0, 1)
    entry = bank.lock()["history"][-1]
    assert entry["audit"]["forced"] is True and entry["audit"]["by_severity"]["error"] == 1
    log = (bank.root / "current" / "CHANGELOG.md").read_text()
    assert (
        "FORCED" in log
        and "error leakage/answer_in_visible: The answer appears in the visible context." in log
    )
    assert "items: x1" in log


def test_fail_on_never_and_info(tmp_path: Path) -> None:
    info = dict(LEAK, severity="info")
    result, _ = Bank(tmp_path / "a").add(
        run_folder(tmp_path / "tom_a", [mcq(1)]), fail_on="info", audit_options={"findings": [info]}
    )
    assert result.exit_code == 1
    result, _ = Bank(tmp_path / "b").add(
        run_folder(tmp_path / "tom_a", [mcq(1)]),
        fail_on="never",
        audit_options={"findings": [LEAK]},
    )
    assert (result.exit_code, result.accepted) == (0, 1)


def test_kinds_versions_and_hard_links(tmp_path: Path, digital_run: Path) -> None:
    bank = Bank(tmp_path)
    tom = [mcq(i) for i in range(4)]
    bank.add(run_folder(tmp_path / "tom_a", tom))
    dis = [dict(mcq(i, "similar", n_options=4), question="Which action?") for i in range(3)]
    bank.add(run_folder(tmp_path / "dis", dis, "distractors"))
    digital = digital_run
    result, _ = bank.add(digital)
    assert (result.accepted, bank.current) == (1, 3)
    v = {k: version_dir(bank.root, k) for k in (1, 2, 3)}
    # untouched kinds are the previous version's file (hard link), touched ones are new files
    assert (
        os.stat(v[1] / "tom.parquet").st_ino
        == os.stat(v[2] / "tom.parquet").st_ino
        == os.stat(v[3] / "tom.parquet").st_ino
    )
    assert (
        os.stat(v[2] / "distractors.parquet").st_ino == os.stat(v[3] / "distractors.parquet").st_ino
    )
    assert not (v[2] / "digital.parquet").exists()
    lock = bank.lock()
    assert {k: c["items"] for k, c in lock["counts"].items()} == {
        "tom": 4,
        "distractors": 3,
        "digital": 1,
    }
    assert [h["added"] for h in lock["history"]] == [{"tom": 4}, {"distractors": 3}, {"digital": 1}]
    assert [h["lock_sha256"] for h in lock["history"][:2]] == [
        hashlib.sha256((v[k] / LOCK).read_bytes()).hexdigest() for k in (1, 2)
    ]
    assert lock["history"][2]["lock_sha256"] is None
    assert [s["generator"] for s in lock["sources"]] == ["tom", "distractors", "digital"]
    assert any(
        k.startswith("digital/") for k in lock["prompts"]
    )  # the digital run's real prompt hashes
    df = bank.frame("digital")
    bundles = read_jsonl(digital / "digital.jsonl")
    assert df["source_item_id"].to_list() == [b["bundle_id"] for b in bundles]
    assert df["cue_app"].to_list() == [b["cue"]["app"] for b in bundles]
    assert df["question_type"].to_list() == [f"cue:{b['cue']['app']}" for b in bundles]
    # existing items never rewritten: v1's rows are in v3 byte for byte
    assert bank.frame("tom", 1).equals(bank.frame("tom", 3))
    assert verify_bank(bank.root)[1][-1].problems == []


def test_append_keeps_old_rows_unchanged(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)]))
    bank.add(run_folder(tmp_path / "tom_b", [mcq(i) for i in range(2, 7)]))
    v1, v2 = bank.frame("tom", 1), bank.frame("tom", 2)
    assert v2.head(4).equals(v1)
    assert v2["added_in"].to_list() == [1, 1, 1, 1, 2, 2, 2]
    assert bank.lock()["history"][-1]["refused"] == {"bank:duplicate": 2}


def test_external_egotom_csvs_are_kind_mcq(tmp_path: Path) -> None:
    folder = tmp_path / "egotom"
    folder.mkdir()
    rows = [
        {
            "vuid": f"v{i}",
            "cuid": f"v{i}~pass_1~0-9",
            "narrations_in_context": f"    00m:01s | #C C opens door {i}",
            "gt_belief": f"C believes {i}",
            **{
                f"belief_choice_{x}": (f"C believes {i}" if x == "b" else f"C doubts {i}{x}")
                for x in "abcd"
            },
            "clip_start_time": "0",
            "clip_end_time": "9",
        }
        for i in range(3)
    ]
    cols = egotom_columns("belief")
    pl.DataFrame(
        [{c: r[c] for c in cols} for r in rows], schema=dict.fromkeys(cols, pl.String)
    ).write_csv(folder / "egotom_belief_shuffled.csv")
    bank = Bank(tmp_path)
    result, _ = bank.add(folder)
    assert result.accepted == 3
    df = bank.frame("mcq")
    assert df["source_format"].unique().to_list() == ["egotom_csv"]
    assert df["answer"].to_list() == [1, 1, 1] and df["source_item_id"].to_list() == [
        r["cuid"] for r in rows
    ]
    assert (
        bank.lock()["sources"][0]["manifest"] is None
    )  # no run folder: provenance is the file hashes
    result, _ = bank.export("egotom")
    out = result.out_dir / "egotom" / "egotom_belief_shuffled.csv"
    back = pl.read_csv(out, infer_schema_length=0)
    assert back.columns == cols
    assert back.to_dicts() == [{c: r[c] for c in cols} for r in rows]  # the original rows, exactly


def test_any_jsonl_bank_through_a_roles_file(tmp_path: Path) -> None:
    """roles=: a JSONL bank with its own field names is stored as MCQ records (kind mcq) that
    keep each source row; ids are content hashes as for any MCQ; the audit gets the roles file;
    the lock records the roles file's hash; rows the roles file cannot make MCQs of are refused."""
    r = random.Random(3)
    rows = [
        {
            "qid": f"q{i}",
            "prompt": f"Which tool does C need next, {i}?",
            "kind": "tool",
            "clip": f"c{i}",
            "choices": [" ".join(r.sample(WORDS, 2)) for _ in range(3)],
            "gold": "b",
            "scene": {"caption": " ".join(r.sample(WORDS, 6)), "time": f"00:0{i}"},
            "hidden": {"why": f"the next step needs tool {i}"},
        }
        for i in range(3)
    ]
    data = tmp_path / "tools.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in rows))
    roles = tmp_path / "roles.yaml"
    roles.write_text(
        "id: qid\nquestion: prompt\nvisible: [scene]\nprivileged: [hidden]\noptions: choices\n"
        "answer: gold\nanswer_format: letter\ngroup: clip\nquestion_type: kind\n"
    )
    bank = Bank(tmp_path)
    result, ctx = bank.add(data, roles=str(roles), near_dup_sim=None)
    assert result.accepted == 3 and bank.current == 1
    df = bank.frame("mcq")
    assert df["source_item_id"].to_list() == ["q0", "q1", "q2"] and df["answer"].to_list() == [
        1,
        1,
        1,
    ]
    stored = [json.loads(x) for x in df["record"].to_list()]
    assert [s["source_row"] for s in stored] == rows
    assert stored[0]["visible"] == {
        "scene.caption": rows[0]["scene"]["caption"],
        "scene.time": "00:00",
    }
    assert stored[0]["privileged"] == {"hidden.why": "the next step needs tool 0"}
    assert stored[0]["question"] == rows[0]["prompt"] and stored[0]["group"] == "c0"
    expected = {kinds.require("mcq").item_id(s) for s in stored}
    assert set(df["item_id"].to_list()) == expected
    assert (
        bank.lock()["sources"][0]["roles"]["sha256"]
        == hashlib.sha256(roles.read_bytes()).hexdigest()
    )
    audit = json.loads((ctx.out_dir / "audit" / "manifest.json").read_text())
    assert audit["config"]["roles"] == str(roles)
    assert bank.add(data, roles=str(roles), near_dup_sim=None)[0].accepted == 0  # same items again
    assert bank.verify()[0].exit_code == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "gold": "z"}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:2: gold"):
        bank.add(bad, roles=str(roles))
    with pytest.raises(InputError, match="one JSONL file"):
        plan(
            validate(
                "bank", ["action=add", f"bank={bank.root}", f"input={tmp_path}", f"roles={roles}"]
            )
        )


def test_a_nocontext_run_gives_its_kept_items_and_both_prompt_sets(tmp_path: Path) -> None:
    """tom -> nocontext (keeps what blind models cannot answer) -> bank: the lock holds the
    nocontext run's answer templates and, one level up, the tom run's prompts."""
    records = [mcq(i) for i in range(5)]
    tom_run = run_folder(tmp_path / "tom_run", records)
    nc = tmp_path / "nocontext_run"
    (nc / "kept").mkdir(parents=True)
    (nc / "kept" / "tom.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records[:3]), encoding="utf-8"
    )
    (nc / "nocontext.jsonl").write_text(
        "".join(json.dumps({"item_id": r["item_id"]}) + "\n" for r in records), encoding="utf-8"
    )
    manifest = {
        "generator": "nocontext",
        "prompts": {"nocontext/choices_only.jinja": "d" * 64},
        "inputs": {str(tom_run / "tom.jsonl"): "x"},
        "outputs": output_hashes(nc),
    }
    (nc / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    bank = Bank(tmp_path)
    result, _ = bank.add(nc)
    assert result.accepted == 3 and bank.ids() == set(ids_of(records[:3]))
    lock = bank.lock()
    assert set(lock["counts"]) == {"tom"}
    assert lock["prompts"] == {
        "nocontext/choices_only.jinja": ["d" * 64],
        "tom/_system.jinja": ["c" * 64],
        "tom/goals.jinja": ["a" * 64],
    }
    (src,) = lock["sources"]
    assert src["generator"] == "nocontext" and src["records"] == {
        "kept/tom.jsonl": hashlib.sha256((nc / "kept" / "tom.jsonl").read_bytes()).hexdigest()
    }
    assert [u["generator"] for u in src["upstream"]] == ["tom"]
