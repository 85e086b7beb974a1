"""Record kinds are declared once (``gen/kinds``): the readers of run folders and banks find a
folder's records through its kind, never by a file's name, and a plugin's kind is taken only
under a name of its own."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, gen_env

from gen import kinds
from gen.engine.runfolder import RunFolder
from gen.errors import ConfigError

CODE = ("gen", "generators")


def test_gen_s_own_kinds_in_the_bank_s_order() -> None:
    assert kinds.bank_names() == ("tom", "distractors", "digital", "mcq", "scenarios")
    assert [k.name for k in kinds.every() if not k.bank] == ["history", "screening"]
    assert {k.name for k in kinds.every() if k.is_mcq} == {"tom", "distractors", "mcq"}
    with pytest.raises(ConfigError, match="unknown kind 'sightingz'; choose one of: tom"):
        kinds.require("sightingz")


def test_no_module_tells_a_kind_by_a_file_name() -> None:
    """Only a kind's declaration names its files: no module outside ``gen/kinds`` tests a path
    against one of them (``"digital.jsonl" in …``, ``… == "tom.jsonl"``,
    ``(p / "x.jsonl").is_file()``)."""
    names = sorted({f for k in kinds.every() for f in k.files})
    quoted = "|".join(re.escape(n) for n in names)
    tell = re.compile(
        rf"""(["']({quoted})["']\s*(in|==|!=)\b)|((==|!=|\bin)\s*\(?["']({quoted})["'])"""
        rf"""|(/\s*["']({quoted})["']\s*\)\s*\.(is_file|exists)\b)"""
    )
    found = []
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(("gen/kinds/", "gen/generators/", "gen/examples/")):
                continue  # the declarations; the links to generators/ and examples/
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if tell.search(line):
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_check_finds_a_file_name_tell() -> None:
    """The pattern above is not vacuous: it finds the tells the bank's batch reader had."""
    old = (
        'elif (path / "digital.jsonl").is_file():\n'
        'if stem == "digital":\n'
        'return "scenarios.jsonl" in names\n'
    )
    names = sorted({f for k in kinds.every() for f in k.files})
    quoted = "|".join(re.escape(n) for n in names)
    tell = re.compile(
        rf"""(["']({quoted})["']\s*(in|==|!=)\b)|((==|!=|\bin)\s*\(?["']({quoted})["'])"""
        rf"""|(/\s*["']({quoted})["']\s*\)\s*\.(is_file|exists)\b)"""
    )
    assert [bool(tell.search(line)) for line in old.splitlines()] == [True, False, True]


def test_a_folder_written_before_tom_named_its_kind_is_read_as_tom(tmp_path: Path) -> None:
    """tom and distractors runs now say ``tom``/``distractors``; an older folder says ``mcq``,
    and its records file's declared kind is taken."""
    folder = tmp_path / "old-tom"
    folder.mkdir()
    (folder / "tom.jsonl").write_text("")
    manifest = {"generator": "tom", "records": {"file": "tom.jsonl", "kind": "mcq"}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert kinds.of_run(RunFolder.open(folder)).name == "tom"
    manifest["records"] = {"file": "candidates.jsonl", "kind": "mcq"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert kinds.of_run(RunFolder.open(folder)).name == "mcq"


def test_a_kind_folder_without_a_manifest_is_found_by_its_declared_files(tmp_path: Path) -> None:
    (tmp_path / "digital.jsonl").write_text("{}\n")
    found = kinds.in_folder(tmp_path)
    assert found is not None and found[0].name == "digital"
    assert kinds.in_folder(tmp_path / "nothing-here") is None


BAD_PLUGIN = textwrap.dedent("""
    from pydantic import BaseModel

    import gen

    class Rec(BaseModel):
        x: int

    MCQ_AGAIN = gen.MCQKind(name="mcq", record=Rec, files=("m.jsonl",))
    RENAMED = gen.MCQKind(name="other", record=Rec, files=("o.jsonl",))
    NOT_A_KIND = object()
    GOOD = gen.MCQKind(name="good", record=Rec, files=("good.jsonl",))
""")


def test_a_plugin_kind_is_taken_only_under_a_name_of_its_own(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "bad_kinds.py").write_text(BAD_PLUGIN)
    info = site / "bad_kinds-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-kinds\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[gen.kinds]\n"
        "mcq = bad_kinds:MCQ_AGAIN\n"
        "renamed = bad_kinds:RENAMED\n"
        "thing = bad_kinds:NOT_A_KIND\n"
        "broken = no_such_module:X\n"
        "good = bad_kinds:GOOD\n"
    )
    env = gen_env(tmp_path / "cache")
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    script = (
        "import json; from gen import kinds; "
        "print(json.dumps({'names': kinds.bank_names(), 'skipped': kinds.skipped(), "
        "'mcq': type(kinds.get('mcq')).__module__}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["names"] == ["tom", "distractors", "digital", "mcq", "scenarios", "good"]
    assert out["mcq"] == "gen.kinds.mcq"  # gen's own, whatever a plugin declares
    skipped = "\n".join(out["skipped"])
    assert (
        "kind mcq of bad_kinds:MCQ_AGAIN (bad-kinds) is skipped: mcq is gen's own kind" in skipped
    )
    assert "kind renamed = bad_kinds:RENAMED (bad-kinds): declares the kind 'other'" in skipped
    assert "kind thing = bad_kinds:NOT_A_KIND (bad-kinds): is not a gen.Kind" in skipped
    assert "kind broken = no_such_module:X (bad-kinds): cannot be imported" in skipped
    helps = subprocess.run(
        [sys.executable, "-m", "gen", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert helps.returncode == 0 and "generators:" in helps.stdout
    lines = helps.stderr.splitlines()
    assert len(lines) == 4 and all(line.startswith("error: kind ") for line in lines)
