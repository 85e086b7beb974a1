"""``merge`` reads shard folders it did not write: every name a manifest gives stays inside its
folder, and a manifest, record or reject it cannot read is one line naming the file (exit 2)."""

from __future__ import annotations

import codecs
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from shards import personas_shards

from gen.cli import validate_jobs
from gen.engine.registry import REGISTRY
from gen.engine.runner import run_config
from gen.errors import InputError
from gen.generators.merge import MergeConfig


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return personas_shards(tmp_path_factory.mktemp("made"))


@pytest.fixture
def shards(made: list[Path], tmp_path: Path) -> list[Path]:
    """Fresh copies of the two shards, two levels down: ``tmp_path/in/a/s0``."""
    out = []
    for s in made:
        dst = tmp_path / "in" / "a" / s.name
        shutil.copytree(s, dst)
        out.append(dst)
    return out


def edit_manifest(folder: Path, **changes: Any) -> Path:
    path = folder / "manifest.json"
    m = json.loads(path.read_text(encoding="utf-8"))
    m.update(changes)
    path.write_text(json.dumps(m), encoding="utf-8")
    return path


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime: what a command changed."""
    return {
        p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() or p.is_symlink()
    }


def one_line(proc: Any, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def plan(shards: list[Path]) -> Any:
    (job,) = validate_jobs("merge", [f"input=[{','.join(map(str, shards))}]"], multirun=False)
    return job.plan


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "dotdot_inside"])
def test_output_names_from_a_manifest_never_leave_the_folders(
    run_gen, tmp_path: Path, shards: list[Path], kind: str
) -> None:
    """The shards' manifests name an output by an absolute path or one climbing out with
    ``..``: before, merge read it from there and wrote it there (overwriting or creating a file
    anywhere, exit 0). Now: exit 2 naming the manifest, and nothing is written anywhere."""
    victim = tmp_path / "victim.json"
    victim.write_text('{"keep": 1}', encoding="utf-8")
    (tmp_path / "in" / "x.json").write_text(
        '{"from": "outside"}', encoding="utf-8"
    )  # s?/../../x.json
    name = {
        "absolute": str(victim),
        "dotdot": "../../x.json",
        "dotdot_inside": "kept/../../../x.json",
    }[kind]
    for s in shards:
        m = json.loads((s / "manifest.json").read_text(encoding="utf-8"))
        edit_manifest(s, outputs={**m["outputs"], name: "0" * 64})
    before = tree(tmp_path)
    out = tmp_path / "o" / "p" / "run"
    proc = run_gen("merge", f"input=[{shards[0]},{shards[1]}]", f"hydra.run.dir={out}")
    line = one_line(proc, "manifest.json", name)
    assert "absolute" in line if kind == "absolute" else "leaves its folder" in line
    assert tree(tmp_path) == before  # no run folder, no outside file created or rewritten
    assert victim.read_text(encoding="utf-8") == '{"keep": 1}'


def test_a_generator_name_is_a_plain_name(shards: list[Path]) -> None:
    """The records file is ``<generator>.jsonl``, read from the shards and written to the run
    folder: a generator named ``../x`` would lead both outside."""
    for s in shards:
        edit_manifest(s, generator="../personas")
    with pytest.raises(InputError, match=r"manifest\.json: generator: String should match"):
        plan(shards)


def test_a_symlinked_output_leading_out_of_the_shard_is_refused(
    tmp_path: Path, shards: list[Path]
) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"secret": 1}', encoding="utf-8")
    for s in shards:
        (s / "link.json").symlink_to(secret)
        m = json.loads((s / "manifest.json").read_text(encoding="utf-8"))
        edit_manifest(s, outputs={**m["outputs"], "link.json": "0" * 64})
    with pytest.raises(InputError, match=r"manifest\.json: output 'link\.json' resolves outside"):
        plan(shards)


def test_a_symlink_in_the_run_folder_cannot_lead_writes_out(
    tmp_path: Path, shards: list[Path]
) -> None:
    """Names were checked when read; the run folder itself may hold a symlink to elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for i, s in enumerate(shards):
        (s / "sub").mkdir()
        (s / "sub" / "extra.jsonl").write_text(f'{{"i": {i}}}\n', encoding="utf-8")
        m = json.loads((s / "manifest.json").read_text(encoding="utf-8"))
        digest = hashlib.sha256((s / "sub" / "extra.jsonl").read_bytes()).hexdigest()
        edit_manifest(s, outputs={**m["outputs"], "sub/extra.jsonl": digest})
    out = tmp_path / "run"
    out.mkdir()
    (out / "sub").symlink_to(elsewhere)
    cfg = MergeConfig(input=[str(s) for s in shards], cache_dir=None, progress="off")
    with pytest.raises(InputError, match=r"output 'sub/extra\.jsonl' resolves outside"):
        run_config("merge", cfg, out, quiet=True)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("content", ["[]", "{}"])
def test_a_manifest_that_is_a_list_or_empty_is_one_line(
    run_gen, tmp_path: Path, shards: list[Path], content: str
) -> None:
    """Before: a traceback (``list indices must be integers``, ``KeyError: 'shard'``)."""
    (shards[1] / "manifest.json").write_text(content, encoding="utf-8")
    proc = run_gen("merge", f"input=[{shards[0]},{shards[1]}]", f"hydra.run.dir={tmp_path / 'run'}")
    one_line(proc, str(shards[1] / "manifest.json"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "content", ["[1, 2]", "null", '"manifest"', "7", '{"shard": NaN}', "{", ""]
)
def test_a_manifest_that_is_no_object_names_the_file(shards: list[Path], content: str) -> None:
    (shards[1] / "manifest.json").write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as e:
        plan(shards)
    assert str(e.value).startswith(str(shards[1] / "manifest.json")) and "\n" not in str(e.value)


BAD_FIELDS = [
    ({"shard": "0"}, "shard"),
    ({"shard": {"shard": 1, "indices": [0, "two"], "num_shards": 2}}, "shard.indices.1"),
    ({"shard": {"shard": 1, "indices": [3, 1], "num_shards": 2}}, "indices must be [start, stop]"),
    ({"shard": {"shard": 1, "indices": [0, 2]}}, "shard.num_shards"),
    ({"shard": {"indices": [2, 4], "num_shards": 2}}, "shard.shard"),
    ({"shard": {"shard": 2, "indices": [2, 4], "num_shards": 2}}, "shard must be < num_shards"),
    ({"counts": []}, "counts"),
    ({"counts": {"requested": "many"}}, "counts.requested"),
    ({"config": [1]}, "config"),
    ({"outputs": ["personas.jsonl"]}, "outputs"),
    ({"outputs": {"personas.jsonl": 5}}, "outputs.personas.jsonl"),
    ({"validators": {"x": "lots"}}, "validators.x"),
    ({"llm_usage": {"calls": "many"}}, "llm_usage.calls"),
    # null, where merge adds it up (a TypeError, exit 1, before: found by the bad-input test)
    ({"llm_usage": {"calls": None}}, "llm_usage.calls: a number is required"),
    ({"generator": 7}, "generator"),
]


@pytest.mark.parametrize(("changes", "needle"), BAD_FIELDS, ids=[n for _, n in BAD_FIELDS])
def test_a_manifest_field_of_the_wrong_type_names_the_field(
    shards: list[Path], changes: dict[str, Any], needle: str
) -> None:
    path = edit_manifest(shards[1], **changes)
    with pytest.raises(InputError) as e:
        plan(shards)
    assert str(e.value).startswith(f"{path}: ") and needle in str(e.value)
    assert "\n" not in str(e.value)


def test_records_and_rejects_that_do_not_fit_the_indices(shards: list[Path]) -> None:
    """Before, a shard with a record too many ran to the end and failed with exit 1 (the
    runner's count check); now the plan refuses it, naming the folder. (A shard whose counts
    have ``indices_done`` may give several rows per index; this one gives one.)"""
    m = json.loads((shards[1] / "manifest.json").read_text(encoding="utf-8"))
    edit_manifest(shards[1], counts={k: v for k, v in m["counts"].items() if k != "indices_done"})
    plan(shards)
    with open(shards[1] / "personas.jsonl", "a", encoding="utf-8") as f:
        f.write((shards[1] / "personas.jsonl").read_text(encoding="utf-8").splitlines()[0] + "\n")
    with pytest.raises(InputError, match=r"holds 3 records and rejects for its 2 indices \[2, 4\)"):
        plan(shards)


@pytest.mark.parametrize(
    ("file", "line", "needle"),
    [
        ("personas.jsonl", "{not json", "not valid JSON"),
        ("personas.jsonl", '{"age": NaN}', "age: NaN is not a JSON number"),
        ("rejects.jsonl", '{"record_id": "x"}', "index: Field required"),
    ],
)
def test_a_bad_record_or_reject_line_names_file_and_line(
    tmp_path: Path, shards: list[Path], file: str, line: str, needle: str
) -> None:
    path = shards[1] / file
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = lines[:1] if file == "personas.jsonl" else lines  # the rows still fit the indices
    path.write_text("\n".join([*kept, line]) + "\n", encoding="utf-8")
    if file == "rejects.jsonl":
        rows = shards[1] / "personas.jsonl"
        rows.write_text(rows.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    cfg = MergeConfig(input=[str(s) for s in shards], cache_dir=None, progress="off")
    with pytest.raises(InputError) as e:
        run_config("merge", cfg, tmp_path / "run", quiet=True)
    assert str(e.value).startswith(f"{path}:{len(kept) + 1}: ") and needle in str(e.value)


def test_summaries_the_hook_cannot_read_are_an_input_error(
    tmp_path: Path, shards: list[Path]
) -> None:
    """The personas hook sums each shard's ``pool`` summary: a shard without it (an edited or
    foreign manifest) was a KeyError, exit 1; now one line naming the manifests."""
    assert REGISTRY["personas"].merge is not None
    m = json.loads((shards[1] / "manifest.json").read_text(encoding="utf-8"))
    del m["pool"]
    (shards[1] / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    cfg = MergeConfig(input=[str(s) for s in shards], cache_dir=None, progress="off")
    with pytest.raises(
        InputError, match=r"personas's merge cannot read the shards' summaries.*KeyError: 'pool'"
    ):
        run_config("merge", cfg, tmp_path / "run", quiet=True)


def test_a_manifest_with_a_bom_merges_and_one_not_utf8_is_named(
    tmp_path: Path, shards: list[Path]
) -> None:
    path = shards[1] / "manifest.json"
    path.write_bytes(codecs.BOM_UTF8 + path.read_bytes())
    cfg = MergeConfig(input=[str(s) for s in shards], cache_dir=None, progress="off")
    assert run_config("merge", cfg, tmp_path / "run", quiet=True).requested == 4
    path.write_bytes(path.read_bytes().replace(b'"generator"', b'"gen\xe9rator"', 1))
    with pytest.raises(InputError, match=rf"^{path}:\d+: not UTF-8 text \(byte 0xe9"):
        plan(shards)


# ------------------------------------------------------------------- completeness (issue 43)


def test_a_shard_whose_records_were_replaced_is_refused(run_gen, shards: list[Path]) -> None:
    """Before, shard 0's records copied over shard 1's merged with exit 0: two duplicates and
    two records missing (row counts matched; the manifests' output hashes were not compared)."""
    shutil.copy(shards[0] / "personas.jsonl", shards[1] / "personas.jsonl")
    with pytest.raises(
        InputError, match=r"^input: shard 1 \(.*\): personas\.jsonl is not the file"
    ):
        plan(shards)
    proc = run_gen("merge", f"input=[{shards[0]},{shards[1]}]", "hydra.run.dir=m")
    one_line(proc, "shard 1", str(shards[1]), "SHA-256")
    assert not (shards[0].parent.parent.parent / "m").exists()


def test_a_missing_shard_is_refused_unless_a_partial_merge_is_asked(
    tmp_path: Path, shards: list[Path]
) -> None:
    """Before, one shard of two merged with exit 0 and half the records; only
    ``merged.complete: false`` said so. Now exit 2 naming the shard; ``allow_missing=true``
    writes a partial merge, marked in its manifest, that ``bank add`` refuses."""
    from gen.banks.batch import batch_files

    with pytest.raises(InputError, match=r"^input: shard\(s\) 1 of 2 missing \(given: 0\)"):
        plan(shards[:1])
    with pytest.raises(InputError, match=r"shard\(s\) 0 of 2 missing \(given: 1\)"):
        plan(shards[1:])
    cfg = MergeConfig(input=[str(shards[1])], allow_missing=True, cache_dir=None, progress="off")
    result = run_config("merge", cfg, tmp_path / "part", quiet=True)
    merged = result.manifest["merged"]
    assert merged["complete"] is False and merged["missing_shards"] == [0]
    assert result.accepted == 2
    with pytest.raises(InputError, match=r"is a partial merge \(shard\(s\) 0 missing\)"):
        batch_files(tmp_path / "part")
    whole = run_config(
        "merge", MergeConfig(input=[str(s) for s in shards], cache_dir=None), tmp_path / "w"
    )
    assert whole.manifest["merged"]["complete"] is True
    assert whole.manifest["merged"]["missing_shards"] == []


def test_a_shard_given_twice_or_of_another_split_is_refused(
    tmp_path: Path, shards: list[Path]
) -> None:
    """Every shard of num_shards once, all of one split, their indices contiguous."""
    twin = tmp_path / "twin"
    shutil.copytree(shards[1], twin)
    with pytest.raises(InputError, match=r"shard 1 is given twice: .* and .*"):
        plan([*shards, twin])
    edit_manifest(twin, shard={"shard": 1, "num_shards": 3, "indices": [2, 4]})
    with pytest.raises(InputError, match=r"shard 1 \(.*twin\) is one of 3 shards"):
        plan([shards[0], twin])
    edit_manifest(twin, shard={"shard": 1, "num_shards": 2, "indices": [3, 4]})
    lines = (twin / "personas.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (twin / "personas.jsonl").write_text(lines[0], encoding="utf-8")
    m = json.loads((twin / "manifest.json").read_text(encoding="utf-8"))
    m["outputs"]["personas.jsonl"] = hashlib.sha256(lines[0].encode()).hexdigest()
    (twin / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(InputError, match=r"shard 1 \(.*\) starts at index 3, not where shard 0"):
        plan([shards[0], twin])


@pytest.mark.parametrize("where", ["itself", "inside"])
def test_a_merge_never_writes_into_its_inputs(
    run_gen, tmp_path: Path, shards: list[Path], where: str
) -> None:
    """Before, ``merge … hydra.run.dir=<shard 1>`` overwrote that shard (exit 0). Now exit 2
    before anything is written (no .hydra/, no log), from the command line and the API."""
    import gen
    from gen.errors import ConfigError

    out = shards[1] if where == "itself" else shards[1] / "merged"
    before = tree(tmp_path)
    proc = run_gen("merge", f"input=[{shards[0]},{shards[1]}]", f"hydra.run.dir={out}")
    one_line(proc, "hydra.run.dir", "its input", str(shards[1]))
    assert tree(tmp_path) == before and not out.with_name(".hydra").exists()
    with pytest.raises(ConfigError, match="never writes into its input"):
        gen.run("merge", input=[str(s) for s in shards], out=out, cache_dir=None, progress="off")
    assert tree(tmp_path) == before
