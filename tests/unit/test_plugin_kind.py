"""A lab's plugin adds a record kind that bank, audit, review and export handle with no edit to
gen: ``examples/plugin`` (the ``sightings`` generator and its ``sighting`` kind) is installed into
a folder of its own (``pip install --no-deps --target``) and run through the whole chain."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT, gen_env, pip_target

PLUGIN = ROOT / "examples" / "plugin"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("sightings-site")
    src = tmp_path_factory.mktemp("sightings-src") / "plugin"  # a build writes beside its source
    shutil.copytree(
        PLUGIN, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    pip_target(src, target)
    return target


@pytest.fixture(scope="module")
def chain(site: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """``gen sightings n=6``, then ``bank add``, ``audit``, ``bank export`` (hf, croissant,
    inspect) and the review page's items, each as a subprocess with the plugin on the path."""
    work = tmp_path_factory.mktemp("sightings-chain")
    env = gen_env(work / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])

    def gen(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "gen", *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    out: dict[str, object] = {"work": work}
    out["help"] = gen("--help")
    out["run"] = gen("sightings", "n=6", "seed=3", "hydra.run.dir=run")
    # a memory question's answer is in its context by design (the wrong options are too): the
    # leakage check reports each "where" item's answer in the timeline, an error; the lab that
    # knows it admits them with fail_on=never, and the version keeps the audit's findings
    out["add"] = gen("bank", "add", "bank=bank", "input=run", "fail_on=never", "hydra.run.dir=add")
    out["audit"] = gen("audit", "input=run", "hydra.run.dir=audit")
    for fmt in ("hf", "croissant", "inspect"):
        out[fmt] = gen("bank", "export", "bank=bank", f"format={fmt}", f"out=export-{fmt}")
    script = textwrap.dedent("""
        import json, sys
        from pathlib import Path
        from gen.generators.review.items import load_items, render
        items, files = load_items(Path(sys.argv[1]))
        print(json.dumps({"kinds": sorted({i.kind for i in items}), "n": len(items),
                          "html": render(items[0]), "files": [f.name for f in files]}))
    """)
    out["review"] = subprocess.run(
        [sys.executable, "-c", script, str(work / "run")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out


def test_the_plugin_is_listed_and_writes_its_kind(chain: dict) -> None:
    assert chain["help"].returncode == 0 and "sightings" in chain["help"].stdout
    assert chain["run"].returncode == 0, chain["run"].stderr
    run = chain["work"] / "run"
    records = [json.loads(x) for x in (run / "sightings.jsonl").read_text().splitlines()]
    assert len(records) == 6
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["records"]["kind"] == "sighting"
    # code-built: the answer is the object's last sighting before the question, and the
    # timeline shown ends before the question is asked
    for r in records:
        assert all(line[:5] < r["asked_at"] for line in r["timeline"])
        last = [line for line in r["timeline"] if r["object"] in line][-1]
        assert last.startswith(r["seen_at"])
        truth = r["options"][r["answer"]]
        assert truth == r["seen_at"] if r["question_type"] == "last_time" else truth in last


def test_bank_add_takes_sighting_records(chain: dict) -> None:
    assert chain["add"].returncode == 0, chain["add"].stderr
    bank = chain["work"] / "bank"
    lock = json.loads((bank / "current" / "MANIFEST.lock.json").read_text())
    assert lock["counts"]["sighting"]["items"] == 6
    frame = pl.read_parquet(bank / "current" / "sighting.parquet")
    assert frame["kind"].to_list() == ["sighting"] * 6
    # the bank row's MCQ columns come from the kind's to_mcq: the timeline is the context
    records = [
        json.loads(x) for x in (chain["work"] / "run" / "sightings.jsonl").read_text().splitlines()
    ]
    by_question = {(r["question"], "\n".join(r["timeline"])) for r in records}
    assert set(zip(frame["question"], frame["context"], strict=True)) == by_question


def test_audit_reads_sighting_records(chain: dict) -> None:
    assert chain["audit"].returncode in (0, 1), chain["audit"].stderr
    report = json.loads((chain["work"] / "audit" / "audit.json").read_text())
    assert report["summary"]["checks"]["structure"]["status"] == "ran"
    records = [
        json.loads(x) for x in (chain["work"] / "run" / "sightings.jsonl").read_text().splitlines()
    ]
    ids = {f["items"][0] for f in report["findings"] if f["kind"] == "answer_in_visible"}
    where = {r["item_id"] for r in records if r["question_type"] == "last_place"}
    # the audit read the kind's MCQ view: the timeline is the visible field it checks
    assert where and ids <= where
    assert all(
        f["fields"][0] == "visible.timeline"
        for f in report["findings"]
        if f["kind"] == "answer_in_visible"
    )


def test_exports_hold_the_sighting_items(chain: dict) -> None:
    work = chain["work"]
    for fmt in ("hf", "croissant", "inspect"):
        assert chain[fmt].returncode == 0, (fmt, chain[fmt].stderr)
    hf = list((work / "export-hf").rglob("*.parquet"))
    assert [p.parent.name for p in hf] == ["sighting"]
    assert pl.read_parquet(hf[0]).height == 6
    croissant = json.loads(next((work / "export-croissant").rglob("croissant.json")).read_text())
    sets = {s["@id"]: s for s in croissant["recordSet"]}
    assert (
        "sighting" in sets and "sighting (gen-sightings plugin)" in sets["sighting"]["description"]
    )
    assert any((work / "export-inspect").rglob("*.jsonl"))


def test_the_review_page_shows_a_sighting_as_an_mcq(chain: dict) -> None:
    proc = chain["review"]
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["kinds"] == ["mcq"] and shown["n"] == 6 and shown["files"] == ["sightings.jsonl"]
    record = json.loads((chain["work"] / "run" / "sightings.jsonl").read_text().splitlines()[0])
    assert record["question"].replace("?", "") in shown["html"]
    assert record["timeline"][0][6:] in shown["html"]


def test_gen_knows_nothing_of_the_plugin() -> None:
    """The chain above needed no edit to gen: no module of gen names the plugin's kind."""
    named = subprocess.run(
        ["git", "grep", "-il", "sighting", "--", "gen", "generators", "schemas", "conf"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert named.returncode == 1 and named.stdout == "", named.stdout
