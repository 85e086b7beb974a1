"""Generators are plugins: a separate distribution adds one through the ``gen.generators`` entry
points, and the CLI and the Python API run it like gen's own. The plugin is the one the guide
(``docs/guides/plugin.md``) shows, file for file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT, gen_env, pip_target
from guides import blocks

from gen.paths import EXAMPLES


def guide_file(title: str) -> str:
    """A file the plugin guide shows (``docs/guides/plugin.md``): the test builds exactly what
    the guide tells a lab to write."""
    (block,) = [b for b in blocks(ROOT / "docs" / "guides" / "plugin.md") if b.title == title]
    return block.body + "\n"


PLUGIN = guide_file("gen_echo_plugin.py")
PYPROJECT = guide_file("pyproject.toml")


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin distribution, built and installed into a folder of its own (pip --target)."""
    src = tmp_path_factory.mktemp("plugin-src")
    (src / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (src / "gen_echo_plugin.py").write_text(textwrap.dedent(PLUGIN))
    site = pip_target(src, tmp_path_factory.mktemp("plugin-site"))
    assert list(site.glob("gen_echo_plugin-*.dist-info/entry_points.txt"))
    return site


def plugin_env(site: Path, cache: Path) -> dict[str, str]:
    env = gen_env(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    return env


def test_the_cli_lists_and_runs_a_plugin(
    plugin_site: Path, tmp_path: Path, cache_dir: Path
) -> None:
    env = plugin_env(plugin_site, cache_dir)
    helps = subprocess.run(
        [sys.executable, "-m", "gen", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        helps.returncode == 0 and "echo" in helps.stdout and "a plugin's generator" in helps.stdout
    )
    own = subprocess.run(
        [sys.executable, "-m", "gen", "echo", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "word=hello" in own.stdout and "The word each record repeats." in own.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "gen", "echo", "n=4", "word=hi", "hydra.run.dir=run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "run" / "echo.jsonl").read_text().splitlines()]
    assert rows == [{"index": i, "text": f"hi {i}"} for i in range(4)]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["generator"] == "echo"
    assert manifest["records"] == {
        "file": "echo.jsonl",
        "kind": "greeting",
        "models": ["EchoRecord"],
    }
    bad = subprocess.run(
        [sys.executable, "-m", "gen", "echo", "words=hi"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown option 'words' for echo" in bad.stderr


def test_the_api_runs_and_opens_a_plugin(
    plugin_site: Path, tmp_path: Path, cache_dir: Path
) -> None:
    script = textwrap.dedent("""
        import json, gen
        folder = gen.run("echo", n=2, word="hey", out="api-run")
        again = gen.open("api-run")
        records = list(again.records())
        print(json.dumps({"kind": again.kind, "type": type(records[0]).__name__,
                          "texts": [r.text for r in records], "ok": folder.ok,
                          "rows": again.to_polars().height}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=plugin_env(plugin_site, cache_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "kind": "greeting",
        "type": "EchoRecord",
        "texts": ["hey 0", "hey 1"],
        "ok": True,
        "rows": 2,
    }
    assert (tmp_path / "api-run" / "gen.log").is_file()


def test_a_broken_plugin_is_one_line(tmp_path: Path, cache_dir: Path) -> None:
    """An entry point that does not import, or names no generator, is a ConfigError naming it."""
    site = tmp_path / "site"
    dist = site / "broken_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[gen.generators]\nbroken = no_such_module:thing\nnotgen = json:dumps\n"
    )
    env = plugin_env(site, cache_dir)
    for name, words in (("broken", "cannot be imported"), ("notgen", "is not a generator")):
        proc = subprocess.run(
            [sys.executable, "-m", "gen", name, "n=1"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and words in proc.stderr and "broken-plugin" in proc.stderr, (
            proc.stderr
        )
        assert "Traceback" not in proc.stderr
    # the other generators still run: only the generator asked for is loaded (every one was)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gen",
            "introspect",
            "task=tool_selection",
            "progress=off",
            f"input={EXAMPLES / 'introspect' / 'requests.jsonl'}",
            f"tools={EXAMPLES / 'introspect' / 'tools.yaml'}",
            f"hydra.run.dir={tmp_path / 'ok'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_room_is_an_entry_point() -> None:
    """gen's own generators are registered as a plugin's are: one entry point per room, named as
    the room, loading the generator of that name."""
    from gen.engine.registry import REGISTRY

    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        "gen.generators"
    ]
    rooms = sorted(
        p.stem if p.is_file() else p.name
        for p in (ROOT / "generators").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    )
    assert sorted(eps) == rooms
    for name, value in eps.items():
        assert value == f"gen.generators.{name}:{name}"
        assert REGISTRY[name].name == name


# --------------------------------------------------------------------------- issue 43.4

IMPOSTOR = '''
from collections.abc import Iterator

import gen


class Cfg(gen.CommonConfig):
    pass


@gen.generator("audit", config=Cfg)
def fake_audit(cfg: Cfg, ctx: "gen.RunContext") -> Iterator[None]:
    """Impostor: not gen's audit."""
    raise RuntimeError("the impostor ran")


@gen.generator("digital", config=Cfg)
def fake_digital(cfg: Cfg, ctx: "gen.RunContext") -> Iterator[None]:
    """Impostor: not gen's digital."""
    raise RuntimeError("the impostor ran")
'''


def fake_site(tmp_path: Path, modules: dict[str, str], entry_points: str) -> Path:
    """A distribution ``impostor-plugin`` installed as a dist-info folder on a path of its own."""
    site = tmp_path / "site"
    dist = site / "impostor_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: impostor-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[gen.generators]\n{entry_points}")
    for name, text in modules.items():
        (site / f"{name}.py").write_text(text)
    return site


def gen_proc(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_plugin_cannot_take_a_built_in_name(tmp_path: Path, cache_dir: Path) -> None:
    """A plugin's module decorating ``audit`` under another entry point does not replace gen's
    audit once imported; a plugin registered as ``digital`` (first on sys.path) loses to gen's
    own, and ``--help`` and ``gen digital`` say so in one line naming the distribution."""
    site = fake_site(
        tmp_path,
        {"impostor": IMPOSTOR},
        "other = impostor:fake_audit\ndigital = impostor:fake_digital\n",
    )
    env = plugin_env(site, cache_dir)
    code = (
        "import impostor; from gen.engine.registry import REGISTRY; "
        "print(REGISTRY['audit'].fn.__module__, REGISTRY['digital'].fn.__module__)"
    )
    proc = gen_proc(env, tmp_path, "-c", code)
    assert proc.stdout.split() == ["gen.generators.audit", "gen.generators.digital"], proc.stderr
    proc = gen_proc(env, tmp_path, "-m", "gen", "other", "n=1")
    assert proc.returncode == 2 and "registers the generator 'audit', not 'other'" in proc.stderr
    helps = gen_proc(env, tmp_path, "-m", "gen", "--help")
    assert helps.returncode == 0 and "Digital Context Generator" in helps.stdout, helps.stderr
    assert "Impostor" not in helps.stdout
    assert "entry point digital of impostor-plugin (impostor:fake_digital) is skipped" in (
        helps.stderr
    )
    proc = gen_proc(env, tmp_path, "-m", "gen", "digital", "--help")
    assert proc.returncode == 0 and "impostor-plugin" in proc.stderr and "cue_rate" in proc.stdout


def test_a_plugin_that_exits_or_breaks_is_skipped_for_the_others(
    tmp_path: Path, cache_dir: Path
) -> None:
    """A plugin whose import raises SystemExit (``gen sx`` exited 0 having done nothing), fails,
    or is not a generator: ``--help`` lists every other generator and names each broken one in
    one line; its own name exits 2."""
    site = fake_site(
        tmp_path,
        {"sx_plugin": "raise SystemExit(0)\n", "bad_plugin": "import no_such_module\n"},
        "sx = sx_plugin:x\nbad = bad_plugin:x\nnotgen = json:dumps\n",
    )
    env = plugin_env(site, cache_dir)
    helps = gen_proc(env, tmp_path, "-m", "gen", "--help")
    assert helps.returncode == 0 and "personas" in helps.stdout and "example:" in helps.stdout
    skipped = [ln for ln in helps.stderr.splitlines() if "skipped" in ln]
    assert len(skipped) == 3 and "Traceback" not in helps.stderr, helps.stderr
    for name, words in (
        ("sx", "cannot be imported: SystemExit"),
        ("bad", "cannot be imported: ModuleNotFoundError"),
        ("notgen", "is not a generator"),
    ):
        proc = gen_proc(env, tmp_path, "-m", "gen", name, "n=1")
        assert proc.returncode == 2 and words in proc.stderr, (name, proc.stderr)
        assert "impostor-plugin" in proc.stderr and proc.stderr.count("\n") == 1
