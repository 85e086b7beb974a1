"""``python -m gen audit``'s inputs: exit codes through the CLI, what the audit reads (and never
reads), the generic roles loader, and the text check. Every check on the clean and planted
fixtures is in ``test_audit.py``."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from audit_runs import FIX, run_audit, triples, write_jsonl

from gen.errors import InputError, MissingInputError
from gen.formats.roles import Roles, load_roles_bank, read_roles
from gen.generators.audit import AuditConfig, plan

ROLES = FIX / "scenario_roles.yaml"


# ----------------------------------------------------------------------- exit codes through the CLI


def test_cli_exit_0_and_1(run_gen, tmp_path: Path) -> None:
    ok = run_gen(
        "audit",
        f"input={FIX / 'clean.jsonl'}",
        "embeddings=false",
        f"hydra.run.dir={tmp_path / 'ok'}",
    )
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "ok" / "audit.md").is_file()
    bad = run_gen(
        "audit",
        f"input={FIX / 'run_flipped'}",
        "embeddings=false",
        "checks=[integrity]",
        f"hydra.run.dir={tmp_path / 'bad'}",
    )
    assert bad.returncode == 1, bad.stderr
    assert (
        json.loads((tmp_path / "bad" / "audit.json").read_text())["summary"]["by_severity"]["error"]
        == 1
    )


def test_cli_input_errors_exit_2(run_gen, tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text((FIX / "clean.jsonl").read_text().splitlines()[0] + "\n{not json\n")
    cases = [
        (["input=/no/such/bank.jsonl"], "no such file"),
        ([f"input={broken}", f"roles={ROLES}"], f"{broken}:2"),
        ([f"input={FIX / 'clean.jsonl'}", "checks=[structure,lekage]"], "lekage"),
        ([], "input= is required"),
    ]
    for args, needle in cases:
        p = run_gen("audit", *args, "embeddings=false", f"hydra.run.dir={tmp_path / 'x'}")
        assert p.returncode == 2, (args, p.stderr)
        assert needle in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) <= 2, p.stderr  # one line, no traceback


def test_config_refuses_what_cannot_work() -> None:
    from pydantic import ValidationError

    for kw, needle in (
        ({"input": "x", "num_shards": 2}, "one process"),
        ({"input": "x", "checks": []}, "at least one check"),
        ({"input": "x", "checks": ["position", "position"]}, "each once"),
        ({"input": "x", "shortcut_repeats": 2}, "greater than or equal to 3"),
    ):  # bench/shortcut_null.py
        with pytest.raises(ValidationError, match=needle):
            AuditConfig(**kw)
    assert plan(AuditConfig(input="x", checks=["length", "structure"])).n == 2


@pytest.mark.parametrize(
    ("kw", "error", "needle"),
    [
        ({"roles": "BAD_ROLES"}, InputError, "visibel"),
        ({"input": str(FIX), "roles": str(ROLES)}, InputError, "must be a JSONL file"),
        ({"nocontext": str(FIX / "clean.jsonl")}, InputError, "a nocontext result needs"),
        ({"nocontext": str(FIX / "digital")}, MissingInputError, "nocontext.jsonl not found"),
        ({"against": "/no/such/bank"}, MissingInputError, "against: no such file"),
        (
            {"input": str(FIX / "nocontext_clean" / "nocontext.jsonl"), "roles": None},
            InputError,
            "not an MCQ record",
        ),
    ],
)
def test_input_errors_name_the_problem(
    tmp_path: Path, kw: dict[str, Any], error: type, needle: str
) -> None:
    bad_roles = tmp_path / "roles.yaml"
    bad_roles.write_text("id: scenario_id\nvisibel: [turn_1_user]\n")
    kw = {
        "input": str(FIX / "clean.jsonl"),
        **{k: str(bad_roles) if v == "BAD_ROLES" else v for k, v in kw.items()},
    }
    if kw.get("roles") is None:
        kw.pop("roles", None)
    with pytest.raises(error, match=needle):
        run_audit(tmp_path / "out", kw.pop("input"), **kw)


# ------------------------------------------------------------------ hardening: what the audit reads


OPENED: list[str] | None = None


def _record_opens(event: str, args: tuple[Any, ...]) -> None:
    if OPENED is not None and event == "open" and isinstance(args[0], str | bytes | Path):
        OPENED.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_record_opens)  # records only while a test sets OPENED


def test_integrity_never_reads_a_file_the_manifest_names_outside_the_run_folder(
    tmp_path: Path,
) -> None:
    global OPENED
    run_dir = tmp_path / "run"
    run_audit(
        run_dir, FIX / "clean.jsonl", checks=["structure"]
    )  # a real run folder with a real manifest
    outside = tmp_path / "outside.txt"
    outside.write_text("not part of the run\n")
    (run_dir / "link.txt").symlink_to(outside)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["outputs"].update(
        {"/etc/passwd": "0" * 64, "../outside.txt": "0" * 64, "link.txt": "0" * 64}
    )
    manifest["inputs"]["/etc/hostname"] = "0" * 64
    manifest["merged"] = {"generator": "../outside"}  # the records file is named after it
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    OPENED = []
    try:
        result, findings, report = run_audit(tmp_path / "out", run_dir, checks=["integrity"])
        opened = set(OPENED)
    finally:
        OPENED = None
    for path in ("/etc/passwd", "/etc/hostname", str(outside), str(tmp_path / "outside.jsonl")):
        assert os.path.realpath(path) not in opened, path
    assert str(run_dir / "audit.jsonl") in opened  # the hook saw the reads that are allowed
    assert triples(findings) == [
        ("outside_run_folder", (), (f,))
        for f in (
            "counts.accepted",
            "outputs.../outside.txt",
            "outputs./etc/passwd",
            "outputs.link.txt",
        )
    ]
    assert all(
        f["severity"] == "error"
        and f["what"].startswith("manifest names a file outside the run folder")
        for f in findings
    )
    stats = next(c for c in report["checks"] if c["key"] == "integrity")["stats"]["folders"][
        str(run_dir)
    ]
    assert (
        stats["inputs_outside_not_read"] == 2 and stats["matching"] == 4
    )  # audit.{jsonl,json,md}, rejects
    assert result.exit_code == 1


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"[]", "not a run manifest (a JSON object naming its generator), got a JSON list"),
        (b"{}", "got an empty object"),
        (b'{"outputs": {}}', "got an object without a generator"),
        (b"{not json", "manifest.json:1: not valid JSON"),
        (
            b'{"generator": "tom", "x": "\xff"}',
            "manifest.json:1: not UTF-8 text (byte 0xff at column 28",
        ),
        (b"[" * 100_000 + b"]" * 100_000, "manifest.json: not valid JSON (nested too deeply)"),
        (b'{"generator": "tom", "seed": NaN}', "manifest.json: seed: NaN is not a JSON number"),
    ],
    ids=["list", "empty", "no_generator", "not_json", "not_utf8", "deep", "nan"],
)
def test_a_manifest_that_is_not_one_is_an_input_error(
    tmp_path: Path, content: bytes, needle: str
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(FIX / "clean.jsonl", folder / "tom.jsonl")
    (folder / "manifest.json").write_bytes(content)
    with pytest.raises(InputError, match=re.escape(needle)):
        run_audit(tmp_path / "out", folder, checks=["integrity"])


def test_a_manifest_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    """It was refused ("Unexpected UTF-8 BOM"), unlike every other input."""
    from gen.generators.audit.data import read_manifest

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(
        b"\xef\xbb\xbf" + (FIX / "run_clean" / "manifest.json").read_bytes()
    )
    assert read_manifest(folder) == json.loads((FIX / "run_clean" / "manifest.json").read_text())


def test_cli_bad_manifest_exit_2(run_gen, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_text("[]")
    p = run_gen("audit", f"input={folder}", "embeddings=false", f"hydra.run.dir={tmp_path / 'out'}")
    assert p.returncode == 2 and f"{folder / 'manifest.json'}: not a run manifest" in p.stderr, (
        p.stderr
    )
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_an_empty_bank_is_an_input_error_unless_allowed(run_gen, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    p = run_gen("audit", f"input={empty}", "embeddings=false", f"hydra.run.dir={tmp_path / 'a'}")
    assert (
        p.returncode == 2
        and f"input: {empty} holds 0 items" in p.stderr
        and "allow_empty=true" in p.stderr
    )
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    ok = run_gen(
        "audit",
        f"input={empty}",
        "embeddings=false",
        "allow_empty=true",
        f"hydra.run.dir={tmp_path / 'b'}",
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "b" / "audit.json").read_text())["summary"]["findings"] == 0
    # the other readers: a roles bank, a folder of EgoToM CSVs with only their headers
    with pytest.raises(InputError, match="holds 0 items"):
        run_audit(tmp_path / "c", empty, roles=str(ROLES))
    ego = tmp_path / "ego"
    ego.mkdir()
    from gen.formats.mcq import write_egotom_csv

    write_egotom_csv([], "goal", ego / "egotom_goal_shuffled.csv")
    with pytest.raises(InputError, match="egotom_goal_shuffled.csv holds 0 items"):
        run_audit(tmp_path / "d", ego)


def _spoil(src: Path, dst: Path, line: int) -> Path:
    """``src`` with one byte of line ``line`` (1-based) replaced by 0xff (not UTF-8)."""
    lines = src.read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1][:2] + b"\xff" + lines[line - 1][3:]
    dst.write_bytes(b"\n".join(lines))
    return dst


def test_non_utf8_inputs_are_input_errors_naming_file_and_line(run_gen, tmp_path: Path) -> None:
    bank = _spoil(FIX / "clean.jsonl", tmp_path / "bank.jsonl", 3)
    roles = _spoil(ROLES, tmp_path / "roles.yaml", 1)
    scen = _spoil(FIX / "scenarios.jsonl", tmp_path / "scen.jsonl", 2)
    nc = tmp_path / "nc"
    nc.mkdir()
    _spoil(FIX / "nocontext_clean" / "nocontext.jsonl", nc / "nocontext.jsonl", 4)
    ego = tmp_path / "ego"
    ego.mkdir()
    from gen.formats.mcq import write_egotom_csv

    rows = [
        {
            "vuid": "v",
            "cuid": f"c{j}",
            "narrations_in_context": "00m:01s | #C C waits.",
            "gt_goal": "To go.",
            "goal_choice_a": "To go.",
            "goal_choice_b": "To stay.",
            "goal_choice_c": "To sit.",
            "clip_start_time": "0",
            "clip_end_time": "9",
        }
        for j in range(3)
    ]
    _spoil(write_egotom_csv(rows, "goal", tmp_path / "g.csv"), ego / "egotom_goal_shuffled.csv", 3)
    cases = [
        ({"input": bank}, f"{bank}:3: not UTF-8 text (byte 0xff at column 3"),
        ({"input": FIX / "scenarios.jsonl", "roles": str(roles)}, f"{roles}:1: not UTF-8"),
        ({"input": scen, "roles": str(ROLES)}, f"{scen}:2: not UTF-8"),
        (
            {"input": FIX / "clean.jsonl", "nocontext": str(nc)},
            f"{nc / 'nocontext.jsonl'}:4: not UTF-8",
        ),
        ({"input": ego}, f"{ego / 'egotom_goal_shuffled.csv'}:3: not UTF-8"),
    ]
    for j, (kw, needle) in enumerate(cases):
        kw = dict(kw)
        with pytest.raises(InputError, match=re.escape(needle)):
            run_audit(tmp_path / f"out{j}", kw.pop("input"), **kw)
    p = run_gen("audit", f"input={bank}", "embeddings=false", f"hydra.run.dir={tmp_path / 'cli'}")
    assert p.returncode == 2 and f"{bank}:3: not UTF-8 text" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


# ------------------------------------------------------------------------- the generic roles loader


def test_roles_answer_formats_and_option_layouts(tmp_path: Path) -> None:
    rows = [
        {
            "qid": "q1",
            "meta": {"clip": "c1"},
            "q": "Which?",
            "choices": ["Red", "Blue", "Green"],
            "key": "B",
            "ctx": {"narration": "C walks.", "time": "00:10"},
            "gold": ["blue"],
            "kind": "colour",
        },
        {
            "qid": "q2",
            "meta": {"clip": "c1"},
            "q": "Which?",
            "choices": ["Red", "Blue", "Green"],
            "key": "(c)",
            "ctx": {"narration": "C runs.", "time": "00:20"},
            "gold": ["green"],
            "kind": "colour",
        },
    ]
    path = write_jsonl(tmp_path / "bank.jsonl", rows)
    roles = Roles(
        id="qid",
        question="q",
        options="choices",
        answer="key",
        answer_format="letter",
        visible=["ctx"],
        privileged=["gold"],
        category="kind",
        group="meta.clip",
    )
    bank = load_roles_bank(path, roles)
    a, b = bank.items
    assert (a.answer, b.answer, bank.problems) == (1, 2, [])
    assert a.visible == {"q": "Which?", "ctx.narration": "C walks.", "ctx.time": "00:10"}
    assert (
        a.privileged == {"gold": "blue"}
        and a.group == "c1"
        and a.category == "colour" == a.question_type
    )
    as_text = Roles(id="qid", options=["choices"], answer="key", answer_format="text")
    rows2 = [
        {"qid": "t1", "a": "x", "b": "y", "key": "y"},
        {"qid": "t2", "a": "x", "b": "y", "key": 0},
    ]
    bank2 = load_roles_bank(
        write_jsonl(tmp_path / "b2.jsonl", rows2),
        as_text.model_copy(update={"options": ["a", "b"]}),
    )
    assert [it.answer for it in bank2.items] == [1, None]
    assert bank2.problems == [
        {
            "line": 1,
            "item_id": "t2",
            "field": "key",
            "problem": "answer 0 (text) names none of the 2 options",
        }
    ]
    bank3 = load_roles_bank(
        write_jsonl(tmp_path / "b3.jsonl", [{"id": "i", "opts": ["p", "q"], "ans": 2}]),
        Roles(id="id", options="opts", answer="ans"),
    )
    assert bank3.items[0].answer is None and bank3.problems[0]["field"] == "ans"


def test_roles_missing_fields_are_problems_not_errors(tmp_path: Path) -> None:
    rows = [
        {
            "scenario_id": "s1",
            "turn_1_user": "hi",
            "cue_type": "location",
            "target_context": "current",
        },
        {
            "turn_1_user": "",
            "turn_2_user": "where?",
            "cue_type": "location",
            "target_context": "prior",
        },
    ]
    bank = load_roles_bank(write_jsonl(tmp_path / "s.jsonl", rows), read_roles(ROLES))
    assert [(p["item_id"], p["field"], p["problem"]) for p in bank.problems] == [
        ("s1", "turn_2_user", "missing"),
        ("line2", "scenario_id", "missing"),
        ("line2", "turn_1_user", "empty"),
    ]
    assert bank.items[0].options == [] and bank.items[0].answer is None


def test_roles_file_and_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "r.yaml"
    bad.write_text("id: x\nanswer: key\n")
    with pytest.raises(InputError, match="answer needs options"):
        read_roles(bad)
    with pytest.raises(MissingInputError):
        read_roles(tmp_path / "none.yaml")
    lines = tmp_path / "l.jsonl"
    lines.write_text('{"id": 1}\n[1, 2]\n')
    with pytest.raises(InputError, match=r"l\.jsonl:2: expected a JSON object"):
        load_roles_bank(lines, Roles(id="id"))


def test_egotom_csv_answer_not_among_options(tmp_path: Path) -> None:
    from gen.formats.mcq import egotom_columns, write_egotom_csv

    rows = [
        {
            "vuid": "v",
            "cuid": f"v~pass_1~{j}-{j + 9}",
            "narrations_in_context": f"    00m:0{j}s | #C C waits.",
            "gt_goal": "To bake bread." if j else "To fly a kite.",
            "goal_choice_a": "To bake bread.",
            "goal_choice_b": "To mow the lawn.",
            "goal_choice_c": "To paint a fence.",
            "clip_start_time": "0",
            "clip_end_time": "9",
        }
        for j in range(3)
    ]
    folder = tmp_path / "egotom"
    folder.mkdir()
    write_egotom_csv(rows, "goal", folder / "egotom_goal_shuffled.csv")
    assert egotom_columns("goal")[3] == "gt_goal"
    result, findings, _ = run_audit(tmp_path / "out", folder, checks=["structure"])
    assert triples(findings) == [("answer_not_in_options", ("goal:v~pass_1~0-9",), ("gt_goal",))]


# --------------------------------------------------------------------------- the text check


def test_text_check_finds_broken_text_in_any_bank(tmp_path: Path) -> None:
    """Issue 23's four broken texts, planted into a copy of the clean bank, are found by the gate
    that names them (and only those items); the clean bank's texts pass."""
    rows = [json.loads(line) for line in (FIX / "clean.jsonl").read_text().splitlines()]
    goal = next(r for r in rows if r["question_type"] == "goal")
    belief = next(r for r in rows if r["question_type"] == "belief")
    goal2 = [r for r in rows if r["question_type"] == "goal"][1]
    goal["options"][1] = "To tie shoes, not with shoes but with shoes."
    belief["options"][2] = "C believes the exercise mat is in the air, p."
    goal2["options"][2] = "To the laundry detergent was used to clean the pot."
    bank = write_jsonl(tmp_path / "bank.jsonl", rows)
    result, findings, report = run_audit(tmp_path / "out", bank, embeddings=False, checks=["text"])
    got = {f["kind"]: f["items"] for f in findings}
    assert got == {
        "repetition": [goal["item_id"]],
        "truncated_text": [belief["item_id"]],
        "surface_form": [goal2["item_id"]],
    }
    assert {f["severity"] for f in findings} == {"error"} and result.exit_code == 1
    stats = report["checks"][0]["stats"]
    assert stats["failed"] == 3 and stats["checked"] == sum(1 + len(r["options"]) for r in rows)
    md = (tmp_path / "out" / "audit.md").read_text()
    assert "| repetition | 1 |" in md and "with shoes but with shoes" in md
