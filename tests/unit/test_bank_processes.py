"""The versioned bank across processes and failures: leftovers of a crashed add and a failure
while staging (in process), the config and the CLI's action word, two adds at once, SIGKILL during
add in a real subprocess (the old version or the new one, nothing in between), and the same ids
and bytes from two processes.

The core (ids, add) is in ``test_bank.py``; the inputs, the audit stand-in and the helpers that
run the bank in ``tests/bank_runs.py``."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bank_runs import (
    Bank,
    _cli,
    _cli_command,
    audit_standin,  # noqa: F401  (pytest fixture, autouse: the audit stand-in)
    flip_byte,
    ids_of,
    mcq,
    run_folder,
    tree,
)
from conftest import bank_state, check_run_folder

from gen import kinds
from gen.banks import store as bank_store
from gen.banks.store import FAULT_ENV, LOCK, leftovers, version_dir
from gen.cli import action_word
from gen.errors import ConfigError, InputError, MissingInputError
from gen.generators.bank import commit as bank_commit

# --------------------------------------------------------------------------- atomicity (in process)


def crash_leftovers(root: Path, version: int, pid: int = 999_999) -> None:
    """What a SIGKILL between rename and pointer switch leaves, from a process ``pid`` that is gone:
    a staging folder, the next version renamed into place (a copy of the current one, relabelled)
    with its publishing note, and a temporary pointer."""
    stage = root / "versions" / f".staging-v{version:04d}-{pid}"
    stage.mkdir()
    (stage / "tom.parquet").write_bytes(b"half")
    shutil.copytree(version_dir(root, version - 1), version_dir(root, version))
    sha = hashlib.sha256((version_dir(root, version) / LOCK).read_bytes()).hexdigest()
    (root / f".publishing-v{version:04d}-{pid}").write_text(
        json.dumps({"version": version, "lock_sha256": sha})
    )
    os.symlink(f"versions/v{version:04d}", root / f".current.tmp-{pid}")


def test_leftovers_are_ignored_by_readers_and_removed_by_the_next_add(tmp_path: Path) -> None:
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]))
    crash_leftovers(bank.root, 2)
    result, _ = bank.verify()
    assert result.exit_code == 0
    assert result.manifest["bank"]["leftovers"] == [
        ".current.tmp-999999",
        ".publishing-v0002-999999",
        "versions/.staging-v0002-999999",
        "versions/v0002",
    ]
    result, ctx = bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))
    assert bank.current == 2 and ctx.stats["leftovers_removed"] == 4
    assert sorted(p.name for p in (bank.root / "versions").iterdir()) == ["v0001", "v0002"]
    assert not list(bank.root.glob(".current.tmp-*")) and not list(bank.root.glob(".publishing-*"))
    assert bank.verify()[0].exit_code == 0 and len(bank.ids()) == 4


def test_only_what_a_gone_process_left_is_removed(tmp_path: Path) -> None:
    """A staging folder of a process that still runs stays; a version above current whose note
    names another lock is a released version (a refusal, below), not a leftover."""
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]))
    alive = os.getppid()  # runs, and is not this process
    (bank.root / "versions" / f".staging-v0002-{alive}").mkdir()
    bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))
    assert (bank.root / "versions" / f".staging-v0002-{alive}").is_dir() and bank.current == 2
    assert leftovers(bank.root, 2) == []
    crash_leftovers(bank.root, 3)
    note = next(bank.root.glob(".publishing-v0003-*"))
    note.write_text(
        json.dumps({"version": 3, "lock_sha256": "0" * 64})
    )  # not the lock of versions/v0003
    assert version_dir(bank.root, 3) not in leftovers(bank.root, 2)
    with pytest.raises(InputError, match="v0003 is released too"):
        bank.add(run_folder(tmp_path / "tom_c", [mcq(10)]))
    assert version_dir(bank.root, 3).is_dir()


def test_a_failure_while_staging_leaves_the_bank_as_it_was(tmp_path: Path, monkeypatch) -> None:
    """A failure anywhere before the pointer switch (an unexpected one, exit 1; a disk the owner
    must fix, one line exit 2; the pointer's symlink failing after the rename) leaves every file
    of the bank as it was: no staging folder, no version, no note."""
    bank = Bank(tmp_path)
    bank.add(run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)]))
    before = tree(bank.root)

    def boom(*a: Any, **k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(bank_commit, "make_lock", boom)
    with pytest.raises(OSError, match="disk full"):
        bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))
    assert tree(bank.root) == before

    def full(*a: Any, **k: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(bank.root / "versions"))

    monkeypatch.setattr(bank_commit, "make_lock", full)
    with pytest.raises(
        InputError, match=r"cannot write to .*: No space left on device .*stays at v0001"
    ) as e:
        bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))
    assert e.value.exit_code == 2 and tree(bank.root) == before
    monkeypatch.undo()

    def no_symlink(*a: Any, **k: Any) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(bank_store.os, "symlink", no_symlink)  # after the rename, before the switch
    with pytest.raises(InputError, match="Permission denied"):
        bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))
    monkeypatch.undo()
    assert tree(bank.root) == before
    assert bank.current == 1 and bank.verify()[0].exit_code == 0
    assert bank.add(run_folder(tmp_path / "tom_b", [mcq(9)]))[0].accepted == 1 and bank.current == 2


# --------------------------------------------------------------------------- config and CLI


def test_action_word() -> None:
    assert action_word("bank", ["add", "bank=x"]) == ["action=add", "bank=x"]
    assert action_word("bank", ["bank=x", "add"]) == ["bank=x", "add"]  # only right after the name
    assert action_word("bank", ["-m", "x=1"]) == ["-m", "x=1"]
    assert action_word("bank", ["+x=1"]) == ["+x=1"]
    assert action_word("personas", ["add", "n=1"]) == ["add", "n=1"]  # no action field
    assert action_word("bank", []) == []


def test_config_errors(tmp_path: Path) -> None:
    from gen.cli import validate_jobs

    def validate(
        name: str, overrides: list[str]
    ):  # what the command checks before a run: config and plan
        (job,) = validate_jobs(name, overrides, multirun=False)
        return job

    with pytest.raises(ConfigError, match="bank= is required"):
        validate("bank", ["action=verify"])
    with pytest.raises(MissingInputError, match="no released version"):
        validate("bank", ["action=verify", f"bank={tmp_path / 'none'}"])
    with pytest.raises(ConfigError, match="input= is required"):
        validate("bank", ["action=add", f"bank={tmp_path}"])
    with pytest.raises(MissingInputError, match="no such file"):
        validate("bank", ["action=add", f"bank={tmp_path}", f"input={tmp_path / 'nope'}"])
    with pytest.raises(ConfigError, match="unknown option|action"):
        validate("bank", ["action=grow", f"bank={tmp_path}"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tom.jsonl").write_text(
        json.dumps(mcq(1)) + "\n" + json.dumps({**mcq(2), "answer": 7}) + "\n"
    )
    job = validate("bank", ["action=add", f"bank={tmp_path / 'b'}", f"input={bad}"])
    assert job.plan.n == 2
    with pytest.raises(InputError, match=r"tom.jsonl:2: not an MCQ record"):
        Bank(tmp_path).add(bad)
    with pytest.raises(ConfigError, match="choose an action"):
        validate("bank", [f"bank={tmp_path}"])


def test_two_adds_at_once_take_turns(tmp_path: Path) -> None:
    """Two ``bank add`` processes at once with overlapping batches (items 2 and 3 in both): while
    the bank's lock is held neither commits; then one releases v0001 and the other v0002 on top
    of it, adding only what is new. No item twice, no version lost, verify clean."""
    import fcntl
    import time

    batches = [
        run_folder(tmp_path / "a", [mcq(i) for i in range(0, 4)]),
        run_folder(tmp_path / "b", [mcq(i) for i in range(2, 6)]),
    ]
    root = tmp_path / "bank"
    root.mkdir()
    procs = []
    with open(root / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running add would
        for k, folder in enumerate(batches):
            argv, env = _cli_command(
                tmp_path,
                "bank",
                "add",
                f"bank={root}",
                f"input={folder}",
                "near_dup_sim=null",
                f"hydra.run.dir=r{k}",
            )
            procs.append(
                subprocess.Popen(
                    argv,
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"r{k}" / "audit" / "manifest.json").is_file() for k in range(2)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), (
                "an add ended early"
            )
            time.sleep(0.1)
        time.sleep(1.0)  # both are past their audit, at the lock
        assert all(p.poll() is None for p in procs) and bank_state(root)[0] is None
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    current, ids, _ = bank_state(root)
    assert current == 2 and ids == {kinds.require("mcq").item_id(mcq(i)) for i in range(6)}
    added = sorted(
        json.loads((tmp_path / f"r{k}" / "manifest.json").read_text())["bank"]["added"]["tom"]
        for k in range(2)
    )
    assert added == [2, 4]  # the second to get the lock adds only its two new items
    assert _cli(tmp_path, "bank", "verify", f"bank={root}", "hydra.run.dir=rv").returncode == 0


def test_cli_action_word_and_verify_exit_codes(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "bank", "bank=b", "hydra.run.dir=r0")
    assert proc.returncode == 2 and "choose an action" in proc.stderr
    assert not (tmp_path / "r0").exists() and not (tmp_path / "b").exists()  # nothing left behind
    folder = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)])
    proc = _cli(
        tmp_path,
        "bank",
        "add",
        "bank=b",
        f"input={folder}",
        "near_dup_sim=null",
        "hydra.run.dir=r1",
    )
    assert proc.returncode == 0, proc.stderr
    assert "empty -> v0001, added 3" in proc.stdout
    check_run_folder(tmp_path / "r1", "bank", 3)
    flip_byte(tmp_path / "b" / "current" / "tom.parquet")
    proc = _cli(tmp_path, "bank", "verify", "bank=b", "hydra.run.dir=r2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DRIFT versions/v0001/tom.parquet: hash_mismatch" in proc.stdout


# --------------------------------------------------------------------------- SIGKILL during add


@pytest.mark.parametrize("phase", ["renamed", "committed"])
def test_sigkill_during_add_leaves_old_or_new_version(tmp_path: Path, phase: str) -> None:
    """A real ``python -m gen bank add`` process SIGKILLs itself at ``phase``; the bank is then
    exactly the old version (before the pointer switch) or exactly the new one (after), verify
    passes, and the next add cleans up and reaches the same bank as an uninterrupted add.
    Two phases here (a whole uncommitted version on disk; just after the switch); all six, with
    the real audit and embedder, in tests/integration/test_bank_real.py."""
    first = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(4)])
    second = run_folder(tmp_path / "tom_b", [mcq(i) for i in range(2, 7)])
    ref = Bank(tmp_path / "ref")
    ref.add(first, near_dup_sim=None)
    old = bank_state(ref.root)
    ref.add(second, near_dup_sim=None)
    new = bank_state(ref.root)
    bank = Bank(tmp_path / "killed")
    bank.add(first, near_dup_sim=None)
    assert bank_state(bank.root) == old
    proc = _cli(
        tmp_path,
        "bank",
        "add",
        f"bank={bank.root}",
        f"input={second}",
        "near_dup_sim=null",
        "hydra.run.dir=killed_run",
        env={FAULT_ENV: phase},
    )
    assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)
    after = bank_state(bank.root)
    assert after == (new if phase == "committed" else old)
    assert bank.verify()[0].exit_code == 0
    result, _ = bank.add(second, near_dup_sim=None)
    assert bank_state(bank.root) == new
    assert result.accepted == (0 if phase == "committed" else 3)
    assert not leftovers(bank.root, bank.current)
    assert bank.verify()[0].exit_code == 0


# --------------------------------------------------------------------------- ids across processes


def test_two_processes_give_the_same_ids_and_bytes(tmp_path: Path) -> None:
    """Two independent runs of the same command (own folders, own caches, other hash seeds)."""
    records = [mcq(i) for i in range(5)]
    state = []
    for k in (1, 2):
        home = tmp_path / f"machine{k}"
        home.mkdir()
        folder = run_folder(home / "tom_a", records)
        proc = _cli(
            home,
            "bank",
            "add",
            "bank=b",
            f"input={folder}",
            "near_dup_sim=null",
            "hydra.run.dir=r",
            env={"PYTHONHASHSEED": str(k)},
        )
        assert proc.returncode == 0, proc.stderr
        state.append(bank_state(home / "b"))
    assert state[0][1] == state[1][1] == set(ids_of(records))
    # the manifests hold the same bytes here, so the data files are byte-identical too
    assert state[0][2] == state[1][2]
