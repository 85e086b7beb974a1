"""What a lab's legal review and its tooling read before the code: the licence, the citation, the
changelog and the version, each written once and carried into the sdist."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tomllib
from importlib.metadata import distribution
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SHARED

import gen

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# Citation File Format 1.2.0: its schema's required keys and every top-level key it defines
CFF_REQUIRED = {"cff-version", "message", "title", "authors"}
CFF_KEYS = CFF_REQUIRED | {
    "abstract", "commit", "contact", "date-released", "doi", "identifiers", "keywords", "license",
    "license-url", "preferred-citation", "references", "repository", "repository-artifact",
    "repository-code", "type", "url", "version",
}  # fmt: skip
# the modules whose import a blocked finder refuses, given as a JSON list in argv[1]
BLOCKER = """
import importlib.abc, json, sys
class Blocked(importlib.abc.MetaPathFinder):
    names = set(json.loads(sys.argv.pop(1)))
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(f"blocked import of {name}")
sys.meta_path.insert(0, Blocked())
"""


def test_the_licence_is_apache_2_in_the_file_the_metadata_and_the_citation() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert PYPROJECT["license"] == "Apache-2.0" and PYPROJECT["license-files"] == ["LICENSE"]
    assert "License ::" not in " ".join(PYPROJECT.get("classifiers", []))  # PEP 639: one place
    assert yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))["license"] == (
        "Apache-2.0"
    )


def test_the_version_is_written_once_and_read_without_importing_gen() -> None:
    """pyproject.toml declares no version of its own; setuptools reads gen's literal from its
    source text (gen itself blocked: a build environment has none of gen's dependencies)."""
    assert "version" not in PYPROJECT and PYPROJECT["dynamic"] == ["version"]
    code = BLOCKER + (
        "from setuptools.config.expand import read_attr\n"
        "print(read_attr('gen.engine.manifest.TOOLKIT_VERSION', root_dir=sys.argv[1]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(["gen", "pydantic"]), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == gen.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", gen.__version__)


def test_the_installed_metadata_says_gens_version() -> None:
    installed = distribution("egogen").version
    assert installed == gen.__version__, (
        f"installed egogen {installed}, gen.__version__ {gen.__version__}: reinstall "
        '(pip install -e ".[dev]") after changing gen.engine.manifest.TOOLKIT_VERSION'
    )


def test_the_citation_is_valid_cff_1_2_and_cites_this_version() -> None:
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert CFF_REQUIRED <= set(cff) <= CFF_KEYS, set(cff) ^ CFF_REQUIRED
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert isinstance(cff["message"], str) and cff["message"].strip()
    assert cff["title"].strip() and cff["version"] == gen.__version__
    for person in cff["authors"] + [a for r in cff["references"] for a in r["authors"]]:
        assert person.get("name") or person.get("family-names"), person  # entity or person
    for ref in cff["references"]:
        assert {"type", "title", "authors"} <= set(ref), ref


def test_the_changelog_keeps_a_changelog_from_0_1_0() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    heads = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert heads[0] == ("Unreleased", ""), heads
    releases = heads[1:]
    assert [v for v, _ in releases] == ["0.2.0", "0.1.0"], releases
    dates = [d for _, d in releases]
    assert all(dates) and dates == sorted(dates, reverse=True), dates
    assert set(re.findall(r"^### (.+)$", text, re.M)) <= {
        "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security",
    }  # fmt: skip
    # the version under way is newer than every release listed
    released = max(tuple(map(int, v.split("."))) for v, _ in releases)
    assert tuple(map(int, gen.__version__.split(".")[:3])) > released


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, built by setuptools' own PEP 517 hook (what ``python -m build --sdist`` calls)."""
    out = tmp_path_factory.mktemp("sdist")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / proc.stdout.strip().splitlines()[-1]


def test_the_sdist_carries_licence_citation_and_changelog(sdist: Path) -> None:
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        for name in ("LICENSE", "CITATION.cff", "CHANGELOG.md"):
            member = tar.extractfile(f"{top}/{name}")
            assert member is not None, name
            assert member.read() == (ROOT / name).read_bytes(), name
        info = tar.extractfile(f"{top}/PKG-INFO")
        assert info is not None
        meta = info.read().decode()
    assert top == f"egogen-{gen.__version__}"
    assert f"\nVersion: {gen.__version__}\n" in meta
    assert "\nLicense-Expression: Apache-2.0\n" in meta and "\nLicense-File: LICENSE\n" in meta


def test_the_sdist_ships_none_of_the_shared_data(sdist: Path) -> None:
    """EgoToM's questions (CC BY-NC 4.0) and the other shared material are read from
    ``../shared/data`` and never packaged: no CSV at all, and no file equal to a shared one."""
    data = SHARED / "data"  # absent beside some checkouts: then the CSV rule alone
    shared_bytes = {p.read_bytes() for p in data.rglob("*") if p.is_file() and p.name != "LICENSE"}
    with tarfile.open(sdist) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        assert not [m.name for m in files if m.name.endswith(".csv")]
        same = [m.name for m in files if (f := tar.extractfile(m)) and f.read() in shared_bytes]
    assert not same, same
