"""The bank with the real models and the real audit, through ``python -m gen``: a paraphrased
batch refused as near-duplicates by all-MiniLM-L6-v2 + FAISS, SIGKILL at every phase of an add,
and ids equal across two independent runs on EgoToM's published CSVs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import bank_state, check_run_folder, read_jsonl

from gen import kinds
from gen.banks.store import FAULT_ENV, FAULT_PHASES, leftovers, read_pointer
from gen.engine.manifest import output_hashes

EGOTOM = Path("/work/shared/data/egotom_paper")

# Six clips (the bank's first release), the same six questions reworded by hand (what a second
# generation run or a copy edit gives), and three questions about other clips.
CLIPS = [
    (
        [
            "C picks up a knife from the counter.",
            "C cuts the onion on the chopping board.",
            "C scrapes the chopped onion into the pan.",
            "C turns on the stove.",
        ],
        ["To cook an onion stir-fry", "To clean the kitchen counter", "To sharpen the knife"],
        0,
    ),
    (
        [
            "C opens the garage door.",
            "C takes a wrench from the toolbox.",
            "C kneels beside the bicycle.",
            "C loosens the bolt on the rear wheel.",
        ],
        ["To paint the garage", "To repair the bicycle wheel", "To wash the car"],
        1,
    ),
    (
        [
            "C waters the tomato plants.",
            "C pulls weeds from the flower bed.",
            "C carries a bag of soil to the garden.",
            "C picks up a trowel.",
        ],
        ["To plant new seedlings in the garden", "To mow the lawn", "To build a fence"],
        0,
    ),
    (
        [
            "C folds a shirt on the bed.",
            "C places the shirt in the suitcase.",
            "C takes a pair of shoes from the closet.",
            "C zips a toiletry bag.",
        ],
        ["To do the laundry", "To tidy the bedroom", "To pack for a trip"],
        2,
    ),
    (
        [
            "C lays a sheet of sandpaper on the table.",
            "C sands the edge of the wooden plank.",
            "C wipes dust off the plank with a cloth.",
            "C opens a can of varnish.",
        ],
        ["To varnish the wooden plank", "To cut the plank in half", "To glue two planks together"],
        0,
    ),
    (
        [
            "C takes a mixing bowl from the cupboard.",
            "C cracks two eggs into the bowl.",
            "C pours flour into the bowl.",
            "C whisks the mixture.",
        ],
        ["To fry some eggs", "To bake a cake", "To make an omelette for lunch"],
        1,
    ),
]
PARAPHRASES = [
    (
        [
            "C grabs a knife off the countertop.",
            "C chops the onion on the cutting board.",
            "C slides the diced onion into the frying pan.",
            "C switches the stove on.",
        ],
        ["To cook a stir-fry with onion", "To wipe down the kitchen counter", "To hone the knife"],
        0,
    ),
    (
        [
            "C lifts the garage door open.",
            "C pulls a wrench out of the tool box.",
            "C kneels next to the bike.",
            "C undoes the bolt on the back wheel.",
        ],
        ["To paint the inside of the garage", "To fix the bike's wheel", "To clean the car"],
        1,
    ),
    (
        [
            "C waters the tomato plant.",
            "C removes weeds from the flowerbed.",
            "C brings a sack of soil into the garden.",
            "C grabs a trowel.",
        ],
        ["To plant some new seedlings in the garden", "To cut the grass", "To put up a fence"],
        0,
    ),
    (
        [
            "C folds a shirt on top of the bed.",
            "C puts the shirt into the suitcase.",
            "C gets a pair of shoes out of the wardrobe.",
            "C closes the zip of a toiletry bag.",
        ],
        ["To wash the laundry", "To clean up the bedroom", "To pack a suitcase for a trip"],
        2,
    ),
    (
        [
            "C puts a piece of sandpaper on the table.",
            "C sands the edge of the wood plank.",
            "C wipes the dust from the plank with a rag.",
            "C opens a tin of varnish.",
        ],
        [
            "To varnish the plank of wood",
            "To saw the plank in two",
            "To glue the two planks together",
        ],
        0,
    ),
    (
        [
            "C gets a mixing bowl out of the cupboard.",
            "C breaks two eggs into the bowl.",
            "C adds flour to the bowl.",
            "C whisks the batter.",
        ],
        ["To fry a couple of eggs", "To bake a cake", "To prepare an omelette for lunch"],
        1,
    ),
]
NEW = [
    (
        [
            "C unrolls a yoga mat on the floor.",
            "C sits on the mat.",
            "C stretches both arms over the head.",
            "C starts a video on the tablet.",
        ],
        ["To follow a yoga session", "To vacuum the living room", "To repair the tablet"],
        0,
    ),
    (
        [
            "C scans a carton of milk at the self-checkout.",
            "C places the milk in a shopping bag.",
            "C takes a loaf of bread from the cart.",
            "C taps the payment card on the reader.",
        ],
        ["To return the milk", "To finish buying the groceries", "To bake bread at home"],
        1,
    ),
    (
        [
            "C unscrews the cover of the light switch.",
            "C tests the wires with a voltage tester.",
            "C removes the old switch.",
            "C takes a new switch out of its box.",
        ],
        ["To paint the wall", "To call an electrician", "To get the lights working again"],
        2,
    ),
]


def tom_record(i: int, clip: tuple[list[str], list[str], int], tag: str) -> dict[str, Any]:
    lines, options, answer = clip
    context = "\n".join(f"    0{k}m:{10 + 7 * k}s | #C {line}" for k, line in enumerate(lines))
    return {
        "item_id": hashlib.sha256(f"{tag}/{i}".encode()).hexdigest()[:32],
        "question_type": "goal",
        "question": "What is C's future goal?",
        "options": options,
        "answer": answer,
        "group": f"{tag}-clip{i}",
        "origins": ["truth" if k == answer else "counterfactual" for k in range(3)],
        "visible": {"context": context, "query_time": f"0{len(lines)}m:00s"},
        "privileged": {"transition": f"clip {i} transition line"},
    }


def run_folder(out: Path, records: list[dict[str, Any]]) -> Path:
    out.mkdir(parents=True)
    (out / "tom.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (out / "rejects.jsonl").write_text("", encoding="utf-8")
    manifest = {
        "generator": "tom",
        "seed": 0,
        "config": {},
        "prompts": {"tom/goals.jinja": "a" * 64},
        "inputs": {},
        "counts": {"requested": len(records), "accepted": len(records), "rejected": 0},
    }
    manifest["outputs"] = output_hashes(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("batches")
    return {
        "first": run_folder(
            tmp / "first", [tom_record(i, c, "first") for i, c in enumerate(CLIPS)]
        ),
        "second": run_folder(
            tmp / "second",
            [tom_record(i, c, "para") for i, c in enumerate(PARAPHRASES)]
            + [tom_record(i, c, "new") for i, c in enumerate(NEW)],
        ),
    }


def test_paraphrased_batch_is_refused_with_minilm(
    batches: dict[str, Path], run_gen, tmp_path: Path
) -> None:
    proc = run_gen(
        "bank",
        "add",
        f"bank={tmp_path / 'bank'}",
        f"input={batches['first']}",
        f"hydra.run.dir={tmp_path / 'r1'}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    check_run_folder(tmp_path / "r1", "bank", 6)
    proc = run_gen(
        "bank",
        "add",
        f"bank={tmp_path / 'bank'}",
        f"input={batches['second']}",
        f"hydra.run.dir={tmp_path / 'r2'}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    manifest = check_run_folder(tmp_path / "r2", "bank", 9)
    rejects = read_jsonl(tmp_path / "r2" / "rejects.jsonl")
    assert [(r["index"], r["stage"], r["reason"]) for r in rejects] == [
        (i, "bank", "near_duplicate") for i in range(6)
    ]
    first_ids = [
        kinds.require("mcq").item_id(json.loads(line))
        for line in (batches["first"] / "tom.jsonl").read_text().splitlines()
    ]
    cosines = []
    for i, r in enumerate(rejects):
        assert first_ids[i] in r["detail"], r["detail"]  # refused as a copy of its own original
        cosines.append(float(re.search(r"cosine (\d\.\d+)", r["detail"]).group(1)))
    added = read_jsonl(tmp_path / "r2" / "bank.jsonl")
    assert [a["where"].rsplit(":", 1)[1] for a in added] == ["7", "8", "9"]  # the three new clips
    assert manifest["embedder"]["model"] and manifest["bank"]["version"] == "v0002"
    audit = json.loads((tmp_path / "bank" / "current" / "audit" / "audit.json").read_text())
    assert audit["summary"]["exit_code"] == 0  # the real audit ran on the batch
    print("paraphrase cosines:", cosines)


@pytest.fixture(scope="module")
def reference(batches: dict[str, Path], tmp_path_factory, runner_for) -> dict[str, Any]:
    """The bank after the first batch (old) and after both (new), without any crash."""
    tmp = tmp_path_factory.mktemp("reference")
    run_gen = runner_for(tmp, tmp / "cache")
    assert (
        run_gen(
            "bank", "add", "bank=bank", f"input={batches['first']}", "hydra.run.dir=r1", timeout=900
        ).returncode
        == 0
    )
    old = bank_state(tmp / "bank")
    assert (
        run_gen(
            "bank",
            "add",
            "bank=bank",
            f"input={batches['second']}",
            "hydra.run.dir=r2",
            timeout=900,
        ).returncode
        == 0
    )
    return {"tmp": tmp, "old": old, "new": bank_state(tmp / "bank")}


@pytest.mark.parametrize("phase", FAULT_PHASES)
def test_sigkill_at_every_phase(
    phase: str,
    reference: dict[str, Any],
    batches: dict[str, Path],
    tmp_path: Path,
    runner_for,
    env_for,
) -> None:
    bank = tmp_path / "bank"
    shutil.copytree(reference["tmp"] / "bank", bank, symlinks=True)
    shutil.rmtree(bank / "versions" / "v0002")  # back to the first release
    (bank / "current").unlink()
    (bank / "current").symlink_to("versions/v0001")
    assert bank_state(bank) == reference["old"]
    env = {
        **env_for(reference["tmp"] / "cache"),
        FAULT_ENV: phase,
    }  # the reference's embedding cache
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gen",
            "bank",
            "add",
            f"bank={bank}",
            f"input={batches['second']}",
            f"hydra.run.dir={tmp_path / 'killed'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == -9, (proc.returncode, proc.stderr)
    committed = phase == "committed"
    assert bank_state(bank) == (reference["new"] if committed else reference["old"])
    run_gen = runner_for(tmp_path, reference["tmp"] / "cache")
    proc = run_gen("bank", "verify", f"bank={bank}", f"hydra.run.dir={tmp_path / 'v1'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_gen(
        "bank",
        "add",
        f"bank={bank}",
        f"input={batches['second']}",
        f"hydra.run.dir={tmp_path / 'again'}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    assert bank_state(bank) == reference["new"]
    assert not leftovers(bank, read_pointer(bank))
    assert (
        run_gen("bank", "verify", f"bank={bank}", f"hydra.run.dir={tmp_path / 'v2'}").returncode
        == 0
    )


@pytest.mark.skipif(
    not (EGOTOM / "egotom_goal_shuffled.csv").is_file(), reason="EgoToM paper CSVs not present"
)
def test_ids_equal_across_two_machines_on_egotom(tmp_path: Path, runner_for) -> None:
    """EgoToM's published CSVs added by two independent processes (own folders and caches, other
    PYTHONHASHSEED): the same ids (= the ones computed here) and byte-identical data files."""
    states = []
    for k in (1, 2):
        home = tmp_path / f"machine{k}"
        home.mkdir()
        os.environ["PYTHONHASHSEED"] = str(k)
        try:
            run_gen = runner_for(home, home / "cache")
            proc = run_gen(
                "bank",
                "add",
                "bank=bank",
                f"input={EGOTOM}",
                "fail_on=never",
                "near_dup_sim=null",
                "audit_options={embeddings: false, plots: false}",
                "hydra.run.dir=r",
                timeout=900,
            )
        finally:
            os.environ.pop("PYTHONHASHSEED", None)
        assert proc.returncode == 0, proc.stderr
        states.append(bank_state(home / "bank"))
    expected = set()
    for q in ("goal", "belief", "actions"):
        for _, row in kinds.require("mcq").read(EGOTOM / f"egotom_{q}_shuffled.csv"):
            expected.add(kinds.require("mcq").item_id(row))
    assert states[0][1] == states[1][1] == expected
    assert states[0][2] == states[1][2]
    assert len(expected) == 237 + 202 + 267
