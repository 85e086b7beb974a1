"""Verifying the versioned bank, and what the bank refuses: verify catches every kind of drift (a
flipped byte in the current or an old version, an edited lock or one of the wrong shape, added and
removed files, a record edited under a matching lock, a removed item, a moved pointer) and reads a
pointer file and older versions; the hardening of issue 14: a damaged bank stops add and export
with verify's own line (exit 1), file names made from item data stay inside out=, an export never
writes through an existing folder nor inside the bank and appears whole or not at all, and bad
places and pointers are one line, exit 2.

Part of the bank's tests (the core in ``test_bank.py``, exports in ``test_bank_export.py``); the
inputs, the audit stand-in and the helpers that run the bank are in ``tests/bank_runs.py``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from bank_runs import (
    Bank,
    _cli,
    audit_standin,  # noqa: F401  (pytest fixture, autouse: the audit stand-in)
    flip_byte,
    grown_fixture,  # noqa: F401  (pytest fixture grown)
    mcq,
    problems,
    run_folder,
    tree,
)
from conftest import check_run_folder, read_jsonl

from gen.banks.store import LOCK, label, read_pointer, version_dir
from gen.errors import ConfigError, GenError, InputError

# --------------------------------------------------------------------------- verify


def test_verify_clean(grown: Bank) -> None:
    result, _ = grown.verify()
    assert (result.exit_code, result.rejected) == (0, 0)
    manifest = check_run_folder(result.out_dir, "bank", 2, hydra=False, one_per_index=False)
    records = read_jsonl(result.out_dir / "bank.jsonl")
    assert {(r["version"], r["file"]) for r in records} == {
        (label(v), f) for v in (1, 2) for f in grown.lock(v)["files"]
    }
    assert (
        manifest["bank"]["lock_sha256"]
        == hashlib.sha256((grown.root / "current" / LOCK).read_bytes()).hexdigest()
    )


def test_verify_catches_a_one_byte_change(grown: Bank) -> None:
    flip_byte(grown.root / "current" / "tom.parquet")
    assert ("versions/v0002/tom.parquet", "hash_mismatch") in problems(grown)


def test_verify_catches_a_one_byte_change_in_an_old_version(grown: Bank) -> None:
    flip_byte(grown.root / "versions" / "v0001" / "CHANGELOG.md", at=5)
    assert problems(grown) == [("versions/v0001/CHANGELOG.md", "hash_mismatch")]


def test_verify_catches_an_edited_old_lock(grown: Bank) -> None:
    lock = grown.root / "versions" / "v0001" / LOCK
    lock.write_text(lock.read_text().replace('"items": 4', '"items": 4 '))
    assert problems(grown) == [("versions/v0001/MANIFEST.lock.json", "hash_mismatch")]


def _without_question_types(counts: dict[str, Any]) -> dict[str, Any]:
    return {k: {"items": v["items"]} for k, v in counts.items()}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("history", ["v1", "v2"]),
        ("counts", [4]),
        ("files", "all"),
        ("counts", {"tom": 4}),
        ("history", [{"version": "one"}, {}]),
        ("toolkit", "gen 0.1.0"),
        ("label", 2),
        ("created_at", None),
        ("items", "4"),
        ("counts", _without_question_types),
    ],
)
def test_a_lock_of_the_wrong_shape_is_a_problem_not_a_crash(
    grown: Bank, field: str, value: Any
) -> None:
    """A lock edited by hand into valid JSON of the wrong shape is named (bad_lock, with the field),
    for the newest and for an old version, and export refuses the bank (exit 1, as verify): also
    the fields only export reads (the dataset card's label, date, toolkit and counts per question
    type), since the newest lock is recorded by no later one."""
    for version in (2, 1):
        path = version_dir(grown.root, version) / LOCK
        original = path.read_text()
        lock = json.loads(original)
        lock[field] = value(lock[field]) if callable(value) else value
        path.write_text(json.dumps(lock, indent=1))
        result, _ = grown.verify()
        assert result.exit_code == 1
        bad = [r for r in read_jsonl(result.out_dir / "rejects.jsonl") if r["reason"] == "bad_lock"]
        assert len(bad) == 1 and field in bad[0]["detail"], bad
        with pytest.raises(
            GenError, match=rf"DRIFT versions/v000{version}/MANIFEST.lock.json: bad_lock"
        ) as e:
            grown.export("parquet")
        assert e.value.exit_code == 1
        path.write_text(original)
    assert grown.verify()[0].exit_code == 0


def test_verify_catches_added_and_removed_files(grown: Bank) -> None:
    (grown.root / "current" / "notes.txt").write_text("hello")
    (grown.root / "current" / "audit" / "audit.json").unlink()
    assert sorted(problems(grown)) == [
        ("versions/v0002/audit/audit.json", "missing_file"),
        ("versions/v0002/notes.txt", "unexpected_file"),
    ]


def _rewrite(bank: Bank, version: int, change) -> None:
    """Rewrite a version's tom.parquet and fix its lock's hash and counts: drift that the file
    hashes alone cannot see (the lock was edited to match)."""
    folder = version_dir(bank.root, version)
    df = change(pl.read_parquet(folder / "tom.parquet"))
    (folder / "tom.parquet").unlink()  # do not write through a hard link
    df.write_parquet(folder / "tom.parquet")
    lock = json.loads((folder / LOCK).read_text())
    lock["files"]["tom.parquet"] = hashlib.sha256((folder / "tom.parquet").read_bytes()).hexdigest()
    lock["counts"]["tom"]["items"] = df.height
    (folder / LOCK).write_text(json.dumps(lock, indent=1))


def test_verify_catches_an_edited_record_even_with_a_matching_lock(grown: Bank) -> None:
    def edit(df: pl.DataFrame) -> pl.DataFrame:
        rec = json.loads(df["record"][5])
        rec["options"][0] = "To do something else"
        return df.with_columns(
            pl.Series("record", [*df["record"][:5], json.dumps(rec), *df["record"][6:]])
        )

    _rewrite(grown, 2, edit)
    assert ("versions/v0002/tom.parquet", "item_id_mismatch") in problems(grown)


def test_verify_catches_a_removed_or_rewritten_old_item(grown: Bank) -> None:
    _rewrite(grown, 2, lambda df: df.filter(pl.col("item_id") != df["item_id"][0]))
    assert ("versions/v0002", "removed_item") in problems(grown)


def test_verify_refuses_a_moved_pointer(grown: Bank) -> None:
    """A pointer to no version is a refusal naming the repair (more in test_bank_pointer.py)."""
    os.remove(grown.root / "current")
    os.symlink("versions/v0009", grown.root / "current")
    with pytest.raises(
        InputError, match="points to versions/v0009, which does not exist.*ln -sfn versions/v0002"
    ):
        grown.verify()


def test_verify_reads_a_pointer_file(grown: Bank) -> None:
    """A checkout without symlinks (git on Windows) has ``current`` as a file holding the target."""
    os.remove(grown.root / "current")
    (grown.root / "current").write_text("versions/v0002\n")
    assert problems(grown) == [] and grown.current == 2


def test_verify_an_older_version(grown: Bank) -> None:
    flip_byte(grown.root / "current" / "tom.parquet")
    result, _ = grown.verify(version=1)
    assert (result.exit_code, result.requested) == (0, 1)


# ------------------------------------------------------------------ every value a release publishes


def _edit_lock(bank: Bank, version: int, edit) -> str:
    """Edit one value of a version's lock in place (nothing else); returns the original text."""
    path = version_dir(bank.root, version) / LOCK
    original = path.read_text()
    lock = json.loads(original)
    edit(lock)
    path.write_text(json.dumps(lock, indent=1, ensure_ascii=False) + "\n")
    return original


EDITS = {
    "items": (lambda lock: lock.update(items=999), "count_mismatch"),
    "per-type counts": (
        lambda lock: lock["counts"]["tom"]["by_question_type"].update(goal=999),
        "count_mismatch",
    ),
    "a new question type": (
        lambda lock: lock["counts"]["tom"]["by_question_type"].update(belief=0),
        "count_mismatch",
    ),
    "label": (lambda lock: lock.update(label="v0009"), "lock_mismatch"),
    "bank name": (lambda lock: lock.update(bank="<script>alert(1)</script>"), "bad_name"),
    "bank name, plain": (lambda lock: lock.update(bank="another"), "lock_mismatch"),
    "date": (lambda lock: lock.update(created_at="2020-01-01T00:00:00+00:00"), "lock_mismatch"),
    "toolkit": (lambda lock: lock["toolkit"].update(version="9.9.9"), "lock_mismatch"),
    "message": (lambda lock: lock["history"][-1].update(message="<b>edited</b>"), "lock_mismatch"),
    "refused": (
        lambda lock: lock["history"][-1].update(refused={"bank:duplicate": 50}),
        "lock_mismatch",
    ),
    "added": (lambda lock: lock["history"][-1].update(added={"tom": 30}), "count_mismatch"),
    "audit": (
        lambda lock: lock["history"][-1]["audit"]["by_severity"].update(error=3),
        "lock_mismatch",
    ),
    "forced": (lambda lock: lock["history"][-1]["audit"].update(forced=True), "lock_mismatch"),
    "an earlier release": (lambda lock: lock["history"][0].update(label="v0007"), "lock_mismatch"),
    "an earlier release's note": (
        lambda lock: lock["history"][0].update(message="rewritten"),
        "lock_mismatch",
    ),
    "model": (lambda lock: lock["sources"][-1]["llm"].update(model="gpt-9"), "lock_mismatch"),
    "source size": (lambda lock: lock["sources"][-1].update(items_added=40), "count_mismatch"),
    "prompts": (
        lambda lock: lock["prompts"].update({"tom/goals.jinja": ["f" * 64]}),
        "lock_mismatch",
    ),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_verify_catches_an_edit_of_any_value_export_publishes(
    grown: Bank, tmp_path: Path, what: str
) -> None:
    """Before: an edit of the newest lock alone (items 118 -> 999, counts per type, the label, a
    ``<script>`` bank name…) verified clean and export published it in the dataset card. Now verify
    names it (exit 1) and export refuses with verify's line; restored, both pass."""
    edit, reason = EDITS[what]
    original = _edit_lock(grown, 2, edit)
    found = problems(grown)
    assert ("versions/v0002/MANIFEST.lock.json", reason) in found, found
    with pytest.raises(GenError, match="DRIFT versions/v0002/MANIFEST.lock.json") as e:
        grown.export("parquet", out=str(tmp_path / "out"))
    assert e.value.exit_code == 1 and not (tmp_path / "out").exists()
    (version_dir(grown.root, 2) / LOCK).write_text(original)
    assert (
        problems(grown) == []
        and grown.export("parquet", out=str(tmp_path / "out"))[0].exit_code == 0
    )


def test_the_changelog_anchors_the_lock(grown: Bank) -> None:
    """The digest line the changelog keeps for its version is the lock without its file list."""
    from gen.banks.values import lock_digest, recorded_digest

    changelog = (grown.root / "current" / "CHANGELOG.md").read_text()
    lock = grown.lock()
    assert recorded_digest(changelog, 2) == lock_digest(lock) and recorded_digest(
        changelog, 1
    ) == lock_digest(grown.lock(1))
    assert (
        lock_digest({**lock, "files": {}}) == lock_digest(lock) != lock_digest({**lock, "items": 8})
    )


def _plant_review(bank: Bank, summary: Any) -> None:
    """A review summary in the current version with the lock's file list updated (as a release
    of a review would), so only its content can be wrong."""
    folder = version_dir(bank.root, bank.current)
    (folder / "review").mkdir(exist_ok=True)
    (folder / "review" / "summary.json").write_text(json.dumps(summary))
    lock = json.loads((folder / LOCK).read_text())
    lock["files"]["review/summary.json"] = hashlib.sha256(
        (folder / "review" / "summary.json").read_bytes()
    ).hexdigest()
    lock["files"] = dict(sorted(lock["files"].items()))
    (folder / LOCK).write_text(json.dumps(lock, indent=1, ensure_ascii=False) + "\n")


@pytest.mark.parametrize(
    "summary",
    [
        {"items_reviewed": -5, "by_verdict": {}},
        {"items_reviewed": 2, "by_verdict": {"accept": 5}},
        {"items_reviewed": 99, "by_verdict": {"accept": 99}},
        {"items_reviewed": 1, "by_verdict": {"<script>": 1}},
        [1, 2],
    ],
)
def test_verify_add_and_export_agree_on_a_review_summary(
    grown: Bank, tmp_path: Path, summary: Any
) -> None:
    """Before, ``items_reviewed: -5``: verify found 0 problems, export 2 (exit 2), and the failed
    add left ``versions/.staging-v0003-<pid>``. Now all three say verify's line, exit 1, and the add
    writes nothing."""
    _plant_review(grown, summary)
    found = problems(grown)
    assert found == [("versions/v0002/review/summary.json", "bad_review_summary")], found
    before = tree(grown.root)
    for action in (
        lambda: grown.export("hf", out=str(tmp_path / "out")),
        lambda: grown.add(run_folder(tmp_path / "tom_c", [mcq(9)]), near_dup_sim=None),
    ):
        with pytest.raises(
            GenError, match="DRIFT versions/v0002/review/summary.json: bad_review_summary"
        ) as e:
            action()
        assert e.value.exit_code == 1
    assert tree(grown.root) == before and not (tmp_path / "out").exists()


def test_a_card_escapes_what_comes_from_data(tmp_path: Path) -> None:
    """Question types come from the items: the card shows them as text, never as markup."""
    bank = Bank(tmp_path)
    bank.add(
        run_folder(tmp_path / "tom_a", [mcq(i, "<img src=x onerror=alert(1)>") for i in range(2)]),
        near_dup_sim=None,
        message="first <b>release</b> & more",
    )
    assert problems(bank) == []
    assert bank.export("parquet", out=str(tmp_path / "out"))[0].exit_code == 0
    card = (tmp_path / "out" / "README.md").read_text()
    body = card.split("---", 2)[2]
    assert "<img" not in body and "<b>" not in body
    assert (
        "&lt;img src=x onerror=alert(1)&gt;" in body
        and "first &lt;b&gt;release&lt;/b&gt; &amp; more" in body
    )


# --------------------------------------------------------------------------- hardening (issue 14)


def _lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


def _outside(tmp: Path, inside_of: Path, pattern: str) -> list[Path]:
    """Files matching ``pattern`` anywhere under ``tmp`` but not under ``inside_of``."""
    return [p for p in tmp.rglob(pattern) if inside_of not in p.parents]


def _wagibench_bank(tmp: Path) -> Bank:
    """A bank whose distractors items have a question type that climbs out of a folder."""
    bank = Bank(tmp)
    items = [dict(mcq(i, "similar", n_options=4), question="Which action?") for i in range(2)]
    items += [
        dict(mcq(i, "x/../../../../ESCAPE", n_options=4), question="Which action?")
        for i in range(2)
    ]
    bank.add(run_folder(tmp / "dis", items, "distractors"), near_dup_sim=None)
    return bank


def test_export_file_names_from_item_data_stay_inside_out(tmp_path: Path) -> None:
    """A question type ``x/../../../../ESCAPE`` becomes a plain file name inside out=; before,
    the export died half-written (``unexpected FileNotFoundError``)."""
    bank = _wagibench_bank(tmp_path)
    out = tmp_path / "e1" / "e2" / "e3" / "out"
    proc = _cli(
        tmp_path,
        "bank",
        "export",
        f"bank={bank.root}",
        "format=wagibench",
        f"out={out}",
        "hydra.run.dir=r_export",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = sorted(p.name for p in out.iterdir() if p.name != "EXPORT.json")
    assert len(names) == 2 and names[0] == "wagibench_mcq_similar.json"
    assert re.fullmatch(r"wagibench_mcq_x_\.\._\.\._\.\._\.\._ESCAPE-[0-9a-f]{8}\.json", names[1])
    rows = json.loads((out / names[1]).read_text())
    assert [r["meta"]["question_type"] for r in rows] == [
        "x/../../../../ESCAPE"
    ] * 2  # the data keeps its value
    assert _outside(tmp_path, out, "*ESCAPE*") == []
    records = read_jsonl(tmp_path / "r_export" / "bank.jsonl")
    assert sorted({r["where"] for r in records}) == names


def test_export_never_writes_through_an_existing_folder(tmp_path: Path) -> None:
    """With the intermediate folder there, the old export wrote ESCAPE.json three folders above
    out=; now out= must be new or empty (exit 2) and nothing is written anywhere."""
    bank = _wagibench_bank(tmp_path)
    out = tmp_path / "e1" / "e2" / "e3" / "out"
    (out / "wagibench_mcq_x").mkdir(parents=True)
    proc = _cli(
        tmp_path,
        "bank",
        "export",
        f"bank={bank.root}",
        "format=wagibench",
        f"out={out}",
        "hydra.run.dir=r_export",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        len(_lines(proc.stderr)) == 1
        and "not an empty folder" in proc.stderr
        and str(out) in proc.stderr
    )
    assert (
        _outside(tmp_path, tmp_path / "dis", "*ESCAPE*") == []
        and not (tmp_path / "e1" / "ESCAPE.json").exists()
    )
    assert [p.name for p in out.iterdir()] == ["wagibench_mcq_x"]


def test_a_failed_export_leaves_no_folder(tmp_path: Path, monkeypatch) -> None:
    """An export that fails halfway (here: on the second MCQ layout) leaves neither out= nor its
    staging folder: an export appears whole or not at all."""
    from gen.generators.bank import export as bank_export

    bank = _wagibench_bank(tmp_path)
    real = bank_export.wagibench_mcq
    calls = []

    def fail_late(r: dict[str, Any]) -> dict[str, Any]:
        calls.append(r["item_id"])
        if len(calls) == 3:
            raise OSError("disk full")
        return real(r)

    monkeypatch.setattr(bank_export, "wagibench_mcq", fail_late)
    out = tmp_path / "exports" / "wb"
    with pytest.raises(OSError, match="disk full"):
        bank.export("wagibench", out=str(out))
    assert len(calls) == 3 and not out.exists() and list((tmp_path / "exports").iterdir()) == []
    monkeypatch.undo()
    result, _ = bank.export("wagibench", out=str(out))
    assert result.accepted == 4 and len(list(out.iterdir())) == 3  # two MCQ files and EXPORT.json


def test_export_refuses_an_out_inside_the_bank(grown: Bank, tmp_path: Path) -> None:
    """out=<bank>/current wrote a README into a released version (verify then failed): refused in
    one line, exit 2, through symlinks too; the bank still verifies."""
    proc = _cli(
        tmp_path,
        "bank",
        "export",
        f"bank={grown.root}",
        f"out={grown.root / 'current'}",
        "hydra.run.dir=r_in",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(_lines(proc.stderr)) == 1 and "inside the bank" in proc.stderr
    assert not (tmp_path / "r_in").exists()
    (tmp_path / "link").symlink_to(grown.root / "versions")
    for out in (
        grown.root / "versions" / "v0001" / "export",
        tmp_path / "link" / "v0002" / "x",
        grown.root,
    ):
        with pytest.raises(ConfigError, match="inside the bank"):
            grown.export("parquet", out=str(out))
    assert problems(grown) == []
    assert sorted(p.name for p in (grown.root / "current").iterdir()) == sorted(
        {"CHANGELOG.md", LOCK, "audit", "tom.parquet"}
    )


def test_verify_refuses_a_version_folder_outside_the_bank(grown: Bank, tmp_path: Path) -> None:
    """versions/v0001 as a symlink to an identical folder elsewhere verified clean before; a
    version (or a file in one) that is a symlink or resolves outside the bank is drift."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(grown.root / "versions" / "v0001", elsewhere)
    (grown.root / "versions" / "v0001").symlink_to(elsewhere)
    assert problems(grown) == [("versions/v0001", "symlink")]
    (grown.root / "versions" / "v0001").unlink()
    shutil.move(elsewhere, grown.root / "versions" / "v0001")
    assert problems(grown) == []
    log = grown.root / "versions" / "v0002" / "CHANGELOG.md"
    copy = tmp_path / "CHANGELOG.md"
    shutil.copyfile(log, copy)
    log.unlink()
    log.symlink_to(copy)  # the same bytes, borrowed
    assert problems(grown) == [("versions/v0002/CHANGELOG.md", "symlink")]


def test_a_damaged_bank_stops_every_writer(tmp_path: Path) -> None:
    """A released data file deleted: add (even with force=true) added every released item again
    as new; now add and export stop with verify's own line, exit 1, before writing anything."""
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)]), near_dup_sim=None)
    (bank.root / "versions" / "v0001" / "tom.parquet").unlink()
    before = sorted(p.relative_to(bank.root).as_posix() for p in bank.root.rglob("*"))
    proc = _cli(tmp_path, "bank", "verify", f"bank={bank.root}", "hydra.run.dir=r_verify")
    assert proc.returncode == 1
    drift = next(x for x in proc.stdout.splitlines() if "DRIFT" in x).removeprefix("[bank] ")
    assert drift.startswith("DRIFT versions/v0001/tom.parquet: missing_file")
    batch = run_folder(tmp_path / "tom_b", [mcq(i) for i in range(2, 6)])
    proc = _cli(
        tmp_path,
        "bank",
        "add",
        f"bank={bank.root}",
        f"input={batch}",
        "force=true",
        "near_dup_sim=null",
        "hydra.run.dir=r_add",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        len(_lines(proc.stderr)) == 1 and drift in proc.stderr and "unexpected" not in proc.stderr
    )
    assert not (tmp_path / "r_add").exists()  # refused before the run folder, the audit, the lock
    out = tmp_path / "exported"
    proc = _cli(
        tmp_path, "bank", "export", f"bank={bank.root}", f"out={out}", "hydra.run.dir=r_exp"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(_lines(proc.stderr)) == 1 and drift in proc.stderr
    assert not out.exists() and not (tmp_path / "r_exp").exists()
    assert sorted(p.relative_to(bank.root).as_posix() for p in bank.root.rglob("*")) == before
    assert bank.current == 1


def test_add_under_the_lock_checks_a_version_released_since_its_plan(
    tmp_path: Path, monkeypatch
) -> None:
    """Another add may release a version while this one audits; that version is verified too
    before it is built on."""
    from gen.generators.bank import add as bank_add_module

    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]), near_dup_sim=None)
    real = bank_add_module.run_audit
    audits = []

    def audit_then_damage(*a: Any, **k: Any):
        outcome = real(*a, **k)
        audits.append(1)
        if len(audits) > 1:  # the concurrent add's own audit
            return outcome
        bank.add(
            run_folder(tmp_path / "tom_c", [mcq(9)]), near_dup_sim=None
        )  # a concurrent release: v0002
        (bank.root / "versions" / "v0002" / "CHANGELOG.md").write_text("edited\n")
        return outcome

    monkeypatch.setattr(bank_add_module, "run_audit", audit_then_damage)
    with pytest.raises(GenError, match="DRIFT versions/v0002/CHANGELOG.md: hash_mismatch") as e:
        bank.add(run_folder(tmp_path / "tom_b", [mcq(i) for i in range(3, 6)]), near_dup_sim=None)
    assert e.value.exit_code == 1 and bank.current == 2
    assert sorted(p.name for p in (bank.root / "versions").iterdir()) == ["v0001", "v0002"]


def test_bad_places_and_pointers_are_one_line_exit_2(tmp_path: Path) -> None:
    """Input at fault is exit 2 naming the file, not ``unexpected …`` (exit 1): a non-UTF-8
    pointer file, bank= that is a file or under one (read-only, as root can still write
    anywhere), a .lock that is a folder, or a symlink (add truncated the file it points to)."""
    batch = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)])
    bank = Bank(tmp_path)
    bank.add(batch, near_dup_sim=None)
    a_file = tmp_path / "plain.txt"
    a_file.write_text("not a bank\n")
    lock_dir = tmp_path / "locked"
    shutil.copytree(bank.root, lock_dir, symlinks=True)
    (lock_dir / ".lock").unlink()
    (lock_dir / ".lock").mkdir()
    bad_pointer = tmp_path / "pointer"
    shutil.copytree(bank.root, bad_pointer, symlinks=True)
    (bad_pointer / "current").unlink()
    (bad_pointer / "current").write_bytes(b"versions/v\xff\xfe0001\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    lock_link = tmp_path / "lock_link"
    shutil.copytree(bank.root, lock_link, symlinks=True)
    (lock_link / ".lock").unlink()
    (lock_link / ".lock").symlink_to(victim)  # opening it for writing truncated the victim
    batch2 = run_folder(tmp_path / "tom_b", [mcq(i) for i in range(3, 5)])
    cases = [
        (["verify", f"bank={bad_pointer}"], str(bad_pointer / "current")),
        (["add", f"bank={bad_pointer}", f"input={batch2}"], str(bad_pointer / "current")),
        (["add", f"bank={a_file}", f"input={batch2}"], str(a_file)),
        (["add", f"bank={a_file / 'bank'}", f"input={batch2}"], str(a_file)),
        (["export", f"bank={a_file}"], str(a_file)),
        (["add", f"bank={lock_dir}", f"input={batch2}"], str(lock_dir / ".lock")),
        (["add", f"bank={lock_link}", f"input={batch2}"], str(lock_link / ".lock")),
    ]
    for k, (args, named) in enumerate(cases):
        proc = _cli(
            tmp_path,
            "bank",
            *args,
            "near_dup_sim=null" if args[0] == "add" else "progress=off",
            f"hydra.run.dir=r{k}",
        )
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert (
            len(_lines(proc.stderr)) == 1
            and named in proc.stderr
            and "unexpected" not in proc.stderr
        ), proc.stderr
        assert not (tmp_path / f"r{k}").exists()
    assert a_file.read_text() == "not a bank\n" and victim.read_text() == "someone else's file\n"
    assert read_pointer(lock_dir) == read_pointer(lock_link) == 1


def test_add_on_a_flipped_byte_is_drift_said_as_verify_says_it(tmp_path: Path) -> None:
    """bank add reading a damaged data file of the current version: exit 1 with verify's line,
    not ``unexpected ComputeError`` (nor items added over it)."""
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)]), near_dup_sim=None)
    flip_byte(bank.root / "current" / "tom.parquet")
    proc = _cli(
        tmp_path,
        "bank",
        "add",
        f"bank={bank.root}",
        f"input={run_folder(tmp_path / 'tom_b', [mcq(7)])}",
        "near_dup_sim=null",
        "hydra.run.dir=r_add",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(_lines(proc.stderr)) == 1 and "unexpected" not in proc.stderr
    assert (
        "DRIFT versions/v0001/tom.parquet: hash_mismatch: versions/v0001/tom.parquet: SHA-256"
        in proc.stderr
    )
    assert bank.current == 1 and sorted(p.name for p in (bank.root / "versions").iterdir()) == [
        "v0001"
    ]
