"""gen installs beside any stack: the wheel, installed into a fresh virtual environment (no
editable install, no repository on the path), runs the main generators from any directory and
gives the Python API; it installs one top-level import package, ``gen``."""

from __future__ import annotations

import json
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import build_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the wheel installed (no dependencies resolved: the test machine's own
    site-packages lend them through a plain path entry, whose .pth files, such as an editable
    install's finder, do not run)."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=300
    )
    python = root / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (purelib / "zz_lent_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_the_wheel_holds_one_package_and_its_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("egogen-")}
    assert tops == {"gen"}
    for data in (
        "gen/prompts/personas/bio.jinja",
        "gen/conf/config.yaml",
        "gen/examples/goals.jsonl",
        "gen/personas/nationalities.yaml",
        "gen/generators/digital/__init__.py",
        "gen/schemas/mcq.py",
    ):
        assert data in names, data
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[gen.generators]" in text and "digital = gen.generators.digital:digital" in text


def test_the_installed_wheel_runs_from_anywhere(
    venv: Path, tmp_path: Path, cache_dir: Path
) -> None:
    python = str(venv / "bin" / "python")
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GEN_CACHE_DIR": str(cache_dir),
        "NO_COLOR": "1",
        "HF_HUB_OFFLINE": "1",
    }
    where = subprocess.run(
        [python, "-c", "import gen, json; print(json.dumps([gen.__file__, gen.__version__]))"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert where.returncode == 0, where.stderr
    file, version = json.loads(where.stdout)
    assert Path(file).is_relative_to(venv) and version != "0.0.0+unknown"
    for top in ("generators", "schemas"):
        proc = subprocess.run(
            [python, "-c", f"import {top}"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr, (top, proc.stderr)
    run = subprocess.run(
        [python, "-m", "gen", "personas", "+persona_pool=6", "hydra.run.dir=pool"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (venv / "bin" / "gen").is_file()  # the console script too
    api = subprocess.run(
        [
            python,
            "-c",
            "import gen, json; f = gen.open('pool'); "
            "print(json.dumps([f.generator, f.kind, len(list(f.records())), callable(gen.run)]))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert api.returncode == 0, api.stderr
    assert json.loads(api.stdout) == ["personas", "persona", 6, True]
    manifest = json.loads((tmp_path / "pool" / "manifest.json").read_text())
    assert manifest["git"] == {
        "commit": None,
        "dirty": None,
    }  # no checkout behind an installed wheel
