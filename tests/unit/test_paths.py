"""``gen.paths.inside``, the one door for names that come from data, and a scan of the code base
for joins of names onto folders that do not go through it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gen.paths import ROOT, UnsafePathError, inside, safe_part


@pytest.mark.parametrize(
    "name",
    [
        "/etc/passwd",
        "../x.json",
        "a/../../x",
        ".",
        "",
        "a//b",
        "a/",
        "C:/x",
        "a\\b",
        "a\x00b",
        "x" * 2000,
    ],
)
def test_inside_refuses_names_that_leave_or_are_odd(tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafePathError):
        inside(tmp_path, name)


def test_inside_follows_symlinks_and_keeps_plain_names(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match="resolves outside"):
        inside(folder, "out/x.json")
    assert inside(folder, "kept/tom.jsonl") == folder / "kept" / "tom.jsonl"
    assert safe_part("../../a b") == "a_b" and safe_part("..") == "item"


# --------------------------------------------------------------------------- the scan

PATHY = re.compile(
    r"(?:^|[._(\s])(?:folder|dir|out|out_dir|path|root|vroot|stage|run|up|base|parent|manifest|old_dir"
    r"|[a-z_]*_dir|[a-z_]*_path|[a-z_]*folder)\b|\bPath\(|expanduser\(\)|^[A-Z][A-Z_]*$"
)
"""A left operand of ``/`` that is a folder (by name: folder, out_dir, ctx.out_dir,
Path(...)...)."""

ALLOWED = {
    ("generators/socratic", "(start + base) / s.time_base"): "arithmetic",  # seconds, a Fraction
    ("gen/cli", "Path('outputs') / name"): "registry",  # a registered generator's name
    ("gen/engine", "Path('outputs') / generator"): "registry",  # a registered generator's name
    (
        "gen/engine",
        "Path('outputs') / generator / dt.datetime.now().strftime('%Y-%m-%d_%H-%M-%S')",
    ): "registry",
    ("gen/templates", "self.root / name"): "template",  # prompt names written in code
    ("gen/engine", "self.out_dir / name"): "code",  # write_json's names come from generator code
    ("gen/engine", "path / f'{name}.jsonl'"): "code",  # records_file(path, "personas")
    ("gen/engine", "out_dir / rel"): "listing",  # the run folder's own files (output_hashes)
    ("gen/paths", "folder.joinpath(*parts)"): "door",  # inside() itself
    ("gen/llm", "self.path / f"): "constant",  # the embedder's modules.json, config.json
    ("gen/llm", "self.folder / f'{name}.live'"): "pid",  # a cache part: host, pid, random
    ("gen/llm", "self.folder / f'{name}.sqlite'"): "pid",
    ("gen/llm", "self.folder / f'{HOST}-{self.pid}-{uuid.uuid4().hex[:8]}.sqlite'"): "pid",
    ("gen/llm", "self.folder / f'.merge-{HOST}-{self.pid}-{uuid.uuid4().hex[:8]}.tmp'"): "pid",
    ("gen/formats", "Path(pool_dir).expanduser() / f'seed{seed}-n{size}'"): "integers",
    ("gen/banks", "folder / name"): "listing",  # verify reads only names found in the folder
    ("gen/banks", "root / VERSIONS / label(version)"): "integer",  # v0001…
    ("gen/banks", "root / f'.current.tmp-{os.getpid()}'"): "pid",
    ("gen/banks", "root / f'.publishing-{label(version)}-{os.getpid()}'"): "pid",
    ("gen/banks", "vroot / f'.staging-{label(version)}-{os.getpid()}'"): "pid",
    ("generators/distractors", "path / name"): "constant",  # BANK_FILES
    (
        "generators/distractors",
        "ctx.out_dir / f'wagibench_mcq_{b}.json'",
    ): "identifier",  # band names are checked
    (
        "generators/nocontext",
        "ctx.out_dir / 'kept' / bank.path.name",
    ): "basename",  # an input file's own name
    ("generators/tom", "ctx.out_dir / f'egotom_{q}_shuffled.csv'"): "constant",  # EGOTOM_TYPES
    ("generators/bank", "ctx.out_dir / cfg.format"): "enum",  # a Literal option
    ("generators/bank", "folder / f'{kind}.parquet'"): "identifier",  # kind names are checked
    ("generators/bank", "folder / f'{k}.parquet'"): "constant",  # KINDS
    ("generators/bank", "old_dir / f'{kind}.parquet'"): "constant",  # KINDS
    ("generators/bank", "stage / f'{kind}.parquet'"): "constant",  # KINDS
    ("generators/bank", "out / f'egotom_{q}_shuffled.csv'"): "constant",  # EGOTOM_TYPES
    (
        "generators/bank",
        "out.parent / f'.{out.name}.export-{os.getpid()}'",
    ): "staging",  # beside out=
    ("generators/bank", "job.folder / f'{kind}.parquet'"): "constant",  # KINDS
    ("generators/bank", "job.folder / f'{k}.parquet'"): "constant",  # KINDS
    ("generators/bank", "out / data"): "constant",  # f"{kind}.jsonl", KINDS
    (
        "generators/bank",
        "out / f'{task}.yaml'",
    ): "identifier",  # base_name() makes a Python identifier
    ("generators/bank", "out / name"): "constant",  # <kind>/test.parquet, KINDS
    ("generators/scenarios", "folder / name"): "constant",  # the lock's own file names
    ("generators/evaluate", "ctx.out_dir / name"): "constant",  # responses_turn{2,3}.jsonl
    ("generators/evaluate", "ctx.out_dir / folder"): "constant",  # judge_turn{2,3}
    ("generators/review", "folder / f'{kind}.parquet'"): "constant",  # KINDS (a bank's version)
    ("generators/review", "path / name"): "constant",  # NOCONTEXT_FILE, JUDGE_FILE
}
"""Joins of a non-constant name onto a folder that are legitimate, each with a one-word reason.
Everything else joins data-derived names through ``gen.paths.inside``."""


def room(path: Path, root: Path) -> str:
    """``gen/run`` for gen/run.py, ``generators/bank`` for generators/bank.py or
    generators/bank/x.py."""
    rel = path.relative_to(root).with_suffix("").parts
    return "/".join(rel[:2])


def _pathy(node: ast.expr) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _pathy(node.left)
    return bool(PATHY.search(ast.unparse(node)))


def _constant(node: ast.expr) -> bool:
    """A literal string, or an UPPER_CASE module constant."""
    return (
        (isinstance(node, ast.Constant) and isinstance(node.value, str | int | float))
        or (isinstance(node, ast.Name) and node.id.isupper())
        or (isinstance(node, ast.Attribute) and node.attr.isupper())
    )


def joins(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every join of a non-constant name onto a folder: ``folder / x``
    (x not a literal), ``os.path.join(..., x)``, ``p.joinpath(x)``, ``Path(folder, x)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and _pathy(node.left)
            and not _constant(node.right)
        ):
            found.append((node.lineno, node.col_offset, ast.unparse(node)))
        elif isinstance(node, ast.Call):
            fn = ast.unparse(node.func)
            many = (
                fn in ("os.path.join", "Path", "PurePath", "PurePosixPath", "pathlib.Path")
                and len(node.args) > 1
            )
            if (many or fn.endswith(".joinpath")) and not all(
                _constant(a) for a in node.args[1 if many else 0 :]
            ):
                found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [(line, expr) for line, _, expr in sorted(found)]


def scan(root: Path) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted([*(root / "gen").rglob("*.py"), *(root / "generators").rglob("*.py")]):
        for line, expr in joins(path.read_text(encoding="utf-8")):
            out.setdefault((room(path, root), expr), []).append(f"{path.relative_to(root)}:{line}")
    return out


def test_data_derived_names_join_folders_only_through_inside() -> None:
    found = scan(ROOT)
    unknown = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not unknown, (
        "names joined onto folders outside gen.paths.inside (use inside(folder, name), or "
        "add a constant's join to ALLOWED with a one-word reason): "
        + "; ".join(f"{', '.join(v)}: {k[1]}" for k, v in sorted(unknown.items()))
    )
    stale = [k for k in ALLOWED if k not in found]
    assert not stale, f"ALLOWED lists joins the code no longer has: {stale}"
    assert all(re.fullmatch(r"[a-z]+", reason) for reason in ALLOWED.values())


def test_the_scan_catches_the_merge_bug(tmp_path: Path) -> None:
    """The scan finds what merge did before (``out / rel``, ``s.folder / rel``), and the
    numeric divisions of the code base are no joins."""
    bug = """
def merge_outputs(shards, name, out):
    for s in shards:
        for rel in s.manifest.get("outputs") or {}:
            outputs.setdefault(rel, []).append(s.folder / rel)
    for rel, parts in sorted(outputs.items()):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out / rel, text)
        shutil.copy(parts[0], os.path.join(out, rel))
    ratio = len(hits) / n + k / sizes[tid] + total / max(1, len(rows))
    return folder / "manifest.json", out / LOCK
"""
    assert [e for _, e in joins(bug)] == [
        "s.folder / rel",
        "out / rel",
        "out / rel",
        "os.path.join(out, rel)",
    ]
    (tmp_path / "gen").mkdir()
    (tmp_path / "generators").mkdir()
    (tmp_path / "generators" / "merge.py").write_text(bug, encoding="utf-8")
    found = {k[1] for k in scan(tmp_path)}
    assert found == {"s.folder / rel", "out / rel", "os.path.join(out, rel)"}


def test_one_writable_folder_probe_serves_run_folders_banks_and_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run folders, banks and exports ask one probe: a file in the way is named, and what the
    permission bits cannot tell (a read-only mount, where making a folder fails) is refused by
    each of them before anything is written."""
    import errno
    import tempfile

    from gen.banks.store import check_root
    from gen.cli import check_run_dir
    from gen.errors import ConfigError
    from gen.generators.bank.export import check_out
    from gen.paths import unwritable

    (tmp_path / "blocker").write_text("a file")
    assert unwritable(tmp_path / "blocker" / "x" / "y") == f"{tmp_path / 'blocker'} is not a folder"
    assert unwritable(tmp_path / "new" / "folder") is None
    assert list(tmp_path.iterdir()) == [tmp_path / "blocker"]  # the probe leaves nothing behind

    def read_only(*args: object, **kwargs: object) -> str:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    assert unwritable(tmp_path / "new") == f"{tmp_path}: Read-only file system"
    bank, out = tmp_path / "bank", tmp_path / "export"
    with pytest.raises(ConfigError, match=f"hydra.run.dir: .*{tmp_path}: Read-only file system"):
        check_run_dir("personas", [f"hydra.run.dir={tmp_path / 'run'}"], multirun=False)
    with pytest.raises(ConfigError, match=f"bank: cannot write to {bank}: .*Read-only"):
        check_root(bank, writing=True)
    with pytest.raises(ConfigError, match=f"out: cannot make {out}: .*Read-only"):
        check_out(bank, out)
    check_root(bank, writing=False)  # a reader never probes
