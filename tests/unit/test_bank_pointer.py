"""Released versions are immutable whatever ``current`` says: a removed, dangling or moved-back
pointer is a refusal of every command (one line, exit 2, the repair named), never a clean-up; a
batch the audit refuses leaves every byte of the bank as it was; and bad places and bad input
to ``bank add`` (an unwritable ``versions/``, a binary or list-shaped ``manifest.json``) are one
line, exit 2.

Part of the bank's tests (the core in ``test_bank.py``); the inputs, the audit stand-in and the
helpers that run the bank are in ``tests/bank_runs.py``."""

from __future__ import annotations

import errno
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bank_runs import (
    LEAK,
    Bank,
    _cli,
    _cli_command,
    audit_standin,  # noqa: F401  (pytest fixture, autouse: the audit stand-in)
    mcq,
    run_folder,
    tree,
)
from conftest import gen_env

from gen.banks.store import version_dir
from gen.errors import ConfigError, InputError
from gen.generators.bank import add as bank_add
from gen.generators.bank import commit as bank_commit

REFUSED = {"audit_options": {"findings": [LEAK]}}
"""A batch the audit stand-in refuses (an error finding, fail_on=error)."""


def two_releases(tmp: Path) -> Bank:
    bank = Bank(tmp)
    assert (
        bank.add(run_folder(tmp / "tom_a", [mcq(i) for i in range(4)]), near_dup_sim=None)[
            0
        ].exit_code
        == 0
    )
    assert (
        bank.add(run_folder(tmp / "tom_b", [mcq(i) for i in range(4, 7)]), near_dup_sim=None)[
            0
        ].exit_code
        == 0
    )
    assert bank.current == 2
    return bank


def damage(bank: Bank, how: str) -> str:
    """Damage the pointer; returns what the refusal says."""
    current = bank.root / "current"
    current.unlink()
    if how == "removed":
        return r"current is missing but .* holds released versions up to v0002"
    if how == "garbage":
        current.write_bytes(b"versions/v\xff\xfe0001\n")
        return r"current is not UTF-8 text"
    target = {"rolled_back": "versions/v0001", "dangling": "versions/v0009"}[how]
    current.symlink_to(target)
    return {
        "rolled_back": r"points to v0001 but v0002 is released too",
        "dangling": r"points to versions/v0009, which does not exist",
    }[how]


def repair(message: str) -> None:
    """Run the ``ln -sfn …`` the refusal names, as a user would."""
    m = re.search(r"(ln -sfn \S+ \S+) restores it", message)
    assert m, message
    subprocess.run(shlex.split(m.group(1)), check=True)


@pytest.mark.parametrize("how", ["removed", "rolled_back", "dangling", "garbage"])
def test_released_versions_are_immutable_whatever_current_says(tmp_path: Path, how: str) -> None:
    """Before: with ``current`` removed, an add whose audit refused the batch deleted v0001 and
    v0002 as crash leftovers; with it moved back to v0001, verify said ok and an add (refused or
    not) deleted v0002 and published another v0002. Now a refused and an accepted add, verify and
    export all refuse the bank, naming the repair, and every file of the bank is byte-identical
    afterwards; the repair named works."""
    bank = two_releases(tmp_path)
    versions = tree(bank.root / "versions")
    said = damage(bank, how)
    before = tree(bank.root)
    for cfg in (REFUSED, {}):
        with pytest.raises(InputError, match=said) as e:
            bank.add(
                run_folder(tmp_path / "tom_c", [mcq(i) for i in range(7, 9)]),
                near_dup_sim=None,
                **cfg,
            )
        assert e.value.exit_code == 2 and "nothing was changed" in str(e.value)
        assert tree(bank.root) == before
    for action in (bank.verify, lambda: bank.export("parquet")):
        with pytest.raises(InputError, match=said):
            action()
    assert tree(bank.root) == before and tree(bank.root / "versions") == versions
    repair(str(e.value))
    assert bank.current == 2 and bank.verify()[0].exit_code == 0
    result, _ = bank.add(
        run_folder(tmp_path / "tom_c", [mcq(i) for i in range(7, 9)]), near_dup_sim=None
    )
    assert result.accepted == 2 and bank.current == 3
    after = tree(bank.root / "versions")
    assert {k: v for k, v in after.items() if not k.startswith("v0003")} == versions


def test_a_damaged_pointer_is_one_line_exit_2_from_the_cli(tmp_path: Path) -> None:
    bank = two_releases(tmp_path)
    batch = run_folder(tmp_path / "tom_c", [mcq(9)])
    for k, how in enumerate(("removed", "rolled_back")):
        said = damage(bank, how)
        before = tree(bank.root)
        for j, args in enumerate((["add", f"input={batch}", "near_dup_sim=null"], ["verify"])):
            proc = _cli(tmp_path, "bank", *args, f"bank={bank.root}", f"hydra.run.dir=r{k}{j}")
            assert proc.returncode == 2, proc.stdout + proc.stderr
            lines = [x for x in proc.stderr.splitlines() if x.strip()]
            assert (
                len(lines) == 1
                and re.search(said, lines[0])
                and "ln -sfn versions/v0002" in lines[0]
            ), lines
            assert not (tmp_path / f"r{k}{j}").exists()
        assert tree(bank.root) == before
        repair(lines[0])


def test_a_pointer_moved_back_while_the_add_audits_is_refused_under_the_lock(
    tmp_path: Path, monkeypatch
) -> None:
    bank = two_releases(tmp_path)
    real = bank_add.run_audit

    def audit_then_roll_back(*a: Any, **k: Any):
        outcome = real(*a, **k)
        (bank.root / "current").unlink()
        (bank.root / "current").symlink_to("versions/v0001")
        return outcome

    monkeypatch.setattr(bank_add, "run_audit", audit_then_roll_back)
    versions = tree(bank.root / "versions")
    with pytest.raises(InputError, match="points to v0001 but v0002 is released too"):
        bank.add(run_folder(tmp_path / "tom_c", [mcq(9)]), near_dup_sim=None)
    assert tree(bank.root / "versions") == versions


def test_a_refused_batch_leaves_every_byte_of_the_bank(tmp_path: Path) -> None:
    """Not even the lock is taken: a refused first batch leaves no bank folder at all."""
    bank = two_releases(tmp_path)
    before = tree(bank.root)
    result, _ = bank.add(run_folder(tmp_path / "tom_c", [mcq(9)]), **REFUSED)
    assert result.exit_code == 1 and result.rejected == 1 and tree(bank.root) == before
    fresh = Bank(tmp_path / "fresh")
    result, _ = fresh.add(run_folder(tmp_path / "tom_d", [mcq(9)]), **REFUSED)
    assert result.exit_code == 1 and not fresh.root.exists()


# ------------------------------------------------------------------------- bad places and bad input


def test_an_unwritable_versions_folder_is_one_line_exit_2(tmp_path: Path, monkeypatch) -> None:
    """Before: a PermissionError while staging, ``unexpected`` with exit 1, after the audit. Now
    the plan names the folder (os.access; root writes anyway, so the staging step is checked
    too: any OSError its owner fixes is one line, exit 2, and the bank is as it was)."""
    bank = two_releases(tmp_path)
    vroot = bank.root / "versions"
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **k: Path(p) != vroot and real_access(p, mode, **k)
    )
    with pytest.raises(
        ConfigError, match=rf"cannot write to {re.escape(str(vroot))}: it is not writable"
    ):
        bank.add(run_folder(tmp_path / "tom_c", [mcq(9)]))
    monkeypatch.undo()
    before = tree(bank.root)

    def denied(root: Path, version: int) -> Path:
        raise PermissionError(
            errno.EACCES, "Permission denied", str(vroot / f".staging-v{version:04d}-1")
        )

    monkeypatch.setattr(bank_commit, "new_stage", denied)
    with pytest.raises(
        InputError, match=r"cannot write to .*Permission denied .*stays at v0002"
    ) as e:
        bank.add(run_folder(tmp_path / "tom_c", [mcq(9)]))
    assert e.value.exit_code == 2 and tree(bank.root) == before


def test_a_real_read_only_versions_folder(tmp_path: Path) -> None:
    """The real thing: ``versions/`` on a read-only mount (root writes through mode bits, so as
    root a private read-only bind mount; chmod otherwise). Before: ``unexpected PermissionError``,
    exit 1, after the audit."""
    bank = two_releases(tmp_path)
    vroot = bank.root / "versions"
    argv, env = _cli_command(
        tmp_path,
        "bank",
        "add",
        f"bank={bank.root}",
        f"input={run_folder(tmp_path / 'c', [mcq(9)])}",
        "near_dup_sim=null",
        "hydra.run.dir=r",
    )
    before = tree(bank.root)
    if os.geteuid() == 0:
        script = (
            f"mount --bind {shlex.quote(str(vroot))} {shlex.quote(str(vroot))} && "
            f"mount -o remount,bind,ro {shlex.quote(str(vroot))} && exec {shlex.join(argv)}"
        )
        probe = subprocess.run(
            ["unshare", "-m", "sh", "-c", f"mount --bind {tmp_path} {tmp_path}"],
            capture_output=True,
        )
        if probe.returncode != 0:
            pytest.skip(f"no private mounts here ({probe.stderr.decode()[:80]})")
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    else:
        vroot.chmod(0o555)
        try:
            proc = subprocess.run(
                argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
            )
        finally:
            vroot.chmod(0o755)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert (
        len(lines) == 1 and f"cannot write to {vroot}" in lines[0] and "unexpected" not in lines[0]
    ), lines
    assert not (tmp_path / "r").exists() and tree(bank.root) == before


@pytest.mark.parametrize(
    "manifest",
    [
        b"\xff\xfe\x00binary",
        b"[1, 2, 3]\n",
        b'{"prompts": ["a"]}\n',
        b'{"llm": "smollm2"}\n',
        b'{"inputs": 7}\n',
    ],
)
def test_a_bad_manifest_is_one_line_exit_2_and_no_run_folder(
    tmp_path: Path, manifest: bytes
) -> None:
    """Before: a binary manifest.json was ``unexpected UnicodeDecodeError`` and a list-shaped one
    ``unexpected AttributeError`` (exit 1), after the run folder and the audit."""
    folder = run_folder(tmp_path / "tom_a", [mcq(i) for i in range(3)])
    (folder / "manifest.json").write_bytes(manifest)
    proc = _cli(
        tmp_path, "bank", "add", "bank=b", f"input={folder}", "near_dup_sim=null", "hydra.run.dir=r"
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "manifest.json" in lines[0] and "unexpected" not in lines[0], lines
    assert not (tmp_path / "r").exists() and not (tmp_path / "b").exists()


def test_a_bad_wagibench_layout_file_is_an_input_error(tmp_path: Path) -> None:
    items = [dict(mcq(i, "similar", n_options=4), question="Which action?") for i in range(2)]
    folder = run_folder(tmp_path / "dis", items, "distractors")
    bank = Bank(tmp_path)
    for content in (b"\xff\xfe", b'["row"]', b'[{"meta": "x"}]'):
        (folder / "wagibench_mcq_similar.json").write_bytes(content)
        with pytest.raises(InputError, match="wagibench_mcq_similar.json"):
            bank.add(folder, near_dup_sim=None)
    assert not version_dir(bank.root, 1).exists()


def test_a_bank_name_that_would_become_markup_is_refused(tmp_path: Path) -> None:
    """The folder's name becomes the bank's name in every card and task file."""
    bank = Bank(tmp_path)
    bank.root = tmp_path / "<script>alert(1)"
    with pytest.raises(ConfigError, match="rename the folder"):
        bank.add(run_folder(tmp_path / "tom_a", [mcq(1)]))
    assert not bank.root.exists()


# ----------------------------------------------------------------------- folders the bank owns


@pytest.mark.parametrize(
    "where", ["versions/v0002", "versions/v0002/audit/x", "versions", "current/sub", "."]
)
def test_no_run_folder_inside_a_bank_from_the_cli(tmp_path: Path, where: str) -> None:
    """Before, ``gen audit … hydra.run.dir=bank/versions/v0002`` exited 0 and added files to the
    released version (then ``verify`` reported drift and add/export refused). Now exit 2 before
    anything is written: no .hydra/, no gen.log, the bank byte for byte as it was."""
    bank = two_releases(tmp_path)
    batch = run_folder(tmp_path / "batch", [mcq(i) for i in range(20, 22)])
    before = tree(bank.root)
    proc = subprocess.run(  # the real audit (not this module's stand-in)
        [
            sys.executable,
            "-m",
            "gen",
            "audit",
            f"input={batch}",
            "checks=[structure]",
            "embeddings=false",
            f"hydra.run.dir={bank.root / where}",
        ],
        cwd=tmp_path,
        env=gen_env(tmp_path / "cache"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "hydra.run.dir" in lines[0] and "inside the bank" in lines[0]
    assert tree(bank.root) == before
    assert bank.verify()[0].exit_code == 0


def test_no_run_folder_inside_a_bank_from_the_api(tmp_path: Path) -> None:
    """``gen.run(…, out=<bank>/versions/v0002)`` and a sub-run's folder there are refused before
    the folder or its gen.log is made; an export into another bank's folder too."""
    import gen

    bank = two_releases(tmp_path)
    batch = run_folder(tmp_path / "batch", [mcq(i) for i in range(20, 22)])
    before = tree(bank.root)
    for out in (version_dir(bank.root, 2), version_dir(bank.root, 2) / "run", bank.root / "x"):
        with pytest.raises(ConfigError, match=r"^out: .* is inside the bank .*bank \(its folders"):
            gen.run("audit", input=str(batch), out=out)
    assert tree(bank.root) == before
    other = tmp_path / "other"  # another bank: a version and its pointer
    (other / "versions" / "v0001").mkdir(parents=True)
    (other / "current").symlink_to(Path("versions") / "v0001")
    with pytest.raises(ConfigError, match=r"^out: .* is inside the bank .*other; export"):
        bank.export("parquet", out=str(other / "versions" / "v0001" / "exp"))
    assert sorted(p.name for p in other.rglob("*")) == ["current", "v0001", "versions"]
