"""``review`` of other runs: scenarios shown as the candidate gets them with the judge's side
apart and rated with the scenario rubric, nocontext and judge results beside their items, and a
bank reviewed by version with its labels in the bank's review area."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from review_runs import FIX, SCENARIO, copy_run, egotom_goal_folder, label, scenario_folder

from gen.engine.runner import run_config
from gen.errors import InputError, MissingInputError
from gen.formats.labels import append_label, read_label_file
from gen.generators.review import ReviewConfig, plan
from gen.generators.review.items import load_items, render
from gen.generators.review.server import TOKEN_HEADER, Session, make_app

# --------------------------------------------------------------------------- scenarios


def candidate_and_privileged(html: str) -> tuple[str, str]:
    at = html.index('<section class="privileged">')
    return html[:at], html[at:]


def test_a_scenario_is_shown_as_the_candidate_gets_it_with_the_judges_side_apart(
    tmp_path: Path,
) -> None:
    from gen import kinds

    cross = {
        **SCENARIO,
        "scenario_id": "sc-02",
        "change_type": "cross_session_reference",
        "target_context": "prior",
        "context_image": "A wall shelf with three glass jars of pale grains, lids screwed on.",
    }
    folder = scenario_folder(tmp_path / "run", SCENARIO, cross)
    items, files = load_items(folder)
    assert files == [folder / "scenarios.jsonl"]
    assert [(it.kind, it.record_id, it.question_type) for it in items] == [
        ("scenarios", "sc-01", kinds.require("scenarios").question_type(SCENARIO)),
        ("scenarios", "sc-02", "cross_session_reference/prior"),
    ]
    assert [it.item_id for it in items] == [
        kinds.require("scenarios").item_id(r) for r in (SCENARIO, cross)
    ]  # the bank's ids
    seen, judge = candidate_and_privileged(render(items[0]))
    # the runner's injection, turn by turn: the camera block, then the user's words
    turns = re.findall(
        r'<h3>(Turn \d)</h3>\s*<div class="turn">\s*<p class="camera">\[Camera: (.*?)\]</p>'
        r'<p class="user">(.*?)</p>',
        seen,
    )
    assert turns == [
        ("Turn 1", SCENARIO["turn_1_image"], SCENARIO["turn_1_user"].replace("'", "&#39;")),
        ("Turn 2", SCENARIO["turn_2_image"], SCENARIO["turn_2_user"].replace("'", "&#39;")),
    ]
    assert "Before the conversation" not in seen
    # nothing of the judge's side before the reveal: target, shift type, gold terms, notes, repair
    for hidden in (
        SCENARIO["target_context"],
        SCENARIO["change_type"],
        *SCENARIO["gold"]["current_answers"],
        *SCENARIO["gold"]["prior_answers"],
        SCENARIO["turn_3_repair_prompt"],
    ):
        assert hidden.replace("'", "&#39;") not in seen
    assert f'<strong class="target">{SCENARIO["target_context"]}</strong>' in judge
    assert f'<strong class="change">{SCENARIO["change_type"]}</strong>' in judge
    for name in ("current answers", "prior answers", "clarify indicators", "abstain indicators"):
        assert f"<h4>{name}</h4>" in judge
    assert all(f"<li>{t}</li>" in judge for t in SCENARIO["gold"]["current_answers"])
    seen2, _ = candidate_and_privileged(render(items[1]))
    assert re.search(
        r"<h3>Before the conversation</h3>\s*<div class=\"turn\">\s*<p class=\"camera\">\[Camera: "
        r"A wall "
        r"shelf[^<]*\]</p>\s*</div>\s*<h3>Turn 1</h3>",
        seen2,
    )


def test_scenarios_are_rated_with_the_scenario_rubric_and_their_type_is_privileged(
    tmp_path: Path,
) -> None:
    from starlette.testclient import TestClient

    folder = scenario_folder(tmp_path / "run")
    data = plan(ReviewConfig(input=str(folder), reviewer="alice", cache_dir=None)).data
    rubric = data.rubrics["scenarios"]
    assert (
        list(data.rubrics) == ["scenarios"]
        and rubric.name == "scenario-checklist"
        and rubric.kinds == ["scenarios"]
    )
    assert [f.key for f in rubric.fields] == [
        "speech_deictic",
        "camera_identifiable",
        "camera_neutral",
        "shift_implicit",
        "target_right",
        "gold_usable",
    ]
    session = Session(folder, data.items, "alice", data.rubrics)
    client = TestClient(make_app(session), base_url="http://127.0.0.1")
    listed = client.get("/api/items", headers={TOKEN_HEADER: session.token}).json()["items"]
    assert listed[0]["kind"] == "scenarios" and listed[0]["type_privileged"] is True
    ok = client.post(
        "/api/label",
        json={
            "item_id": data.items[0].item_id,
            "scores": {"camera_identifiable": 3},
            "decision": "accept",
        },
        headers={TOKEN_HEADER: session.token},
    )
    assert ok.status_code == 200 and ok.json()["label"]["rubric"] == "scenario-checklist"
    bad = client.post(
        "/api/label",
        json={"item_id": data.items[0].item_id, "scores": {"inferable": 1}},
        headers={TOKEN_HEADER: session.token},
    )
    assert (
        bad.status_code == 400 and "not a field of rubric scenario-checklist" in bad.json()["error"]
    )


# ---------------------------------------------------------------------- nocontext and judge results


def blind_record(
    item_id: str,
    correct: dict[str, list[int]],
    *,
    n_options: int = 3,
    answer: int = 0,
    kept: bool = True,
) -> dict[str, Any]:
    """A nocontext record: per model, the option it chose on each shuffle."""
    from gen.schemas.nocontext import NocontextRecord

    answers = {
        m: [
            {
                "shuffle": k,
                "order": list(range(n_options)),
                "raw": f"Answer: {'abc'[c]}",
                "letter": "abc"[c],
                "choice": c,
                "correct": c == answer,
            }
            for k, c in enumerate(cs)
        ]
        for m, cs in correct.items()
    }
    return NocontextRecord(
        item_id=item_id,
        question_type="goal",
        source="/runs/tom/tom.jsonl",
        line=4,
        n_options=n_options,
        answer=answer,
        kept=kept,
        removed_by=[] if kept else ["max_correct"],
        shuffles=3,
        correct={m: sum(c == answer for c in cs) for m, cs in correct.items()},
        unparseable={m: 0 for m in correct},
        answers=answers,
    ).model_dump(mode="json")


def judged_record(
    item_id: str, scores: dict[str, list[int | None]], *, answer: int = 0
) -> dict[str, Any]:
    from gen.generators.judge.validity import flags
    from gen.schemas.judge import Judgment, ValidityRecord

    js = {
        j: [
            Judgment(
                score=s,
                normalised=None if s is None else s / 2,
                followed=s is not None,
                problem=None if s is not None else "no_score_tag",
                raw=f"<score>{s}</score>",
            )
            for s in ss
        ]
        for j, ss in scores.items()
    }
    fl = {j: flags(v, answer) for j, v in js.items()}
    return ValidityRecord(
        item_id=item_id,
        question_type="goal",
        source="tom.jsonl",
        answer=answer,
        n_options=len(next(iter(scores.values()))),
        scores=js,
        flagged={j: f[0] for j, f in fl.items()},
        flagged_options={j: f[1] for j, f in fl.items()},
    ).model_dump(mode="json")


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_nocontext_run_shows_what_the_blind_models_answered(tmp_path: Path) -> None:
    """A nocontext run folder reviewed: its kept items, each with every model's right-in-k-of-n
    and the options it chose, on the privileged side only."""
    run_dir = tmp_path / "nc"
    rows = [json.loads(x) for x in (FIX / "run_clean" / "tom.jsonl").read_text().splitlines()[:3]]
    jsonl(run_dir / "kept" / "tom.jsonl", rows)
    jsonl(
        run_dir / "nocontext.jsonl",
        [
            blind_record("goal-000", {"smollm2": [0, 0, 2], "qwen": [1, 1, 1]}),
            blind_record("goal-001", {"smollm2": [1, 1, 1]}, answer=1),
            blind_record("goal-009", {"smollm2": [0, 0, 0]}, kept=False),
        ],
    )
    data = plan(ReviewConfig(input=str(run_dir), reviewer="al", cache_dir=None)).data
    assert data.results.nocontext == run_dir / "nocontext.jsonl"
    assert [len(it.blind) for it in data.items] == [1, 1, 0]
    seen, hidden = candidate_and_privileged(render(data.items[0]))
    assert "nocontext" not in seen and "smollm2" not in seen
    table = re.findall(
        r"<tr><td>(\w+)</td><td>(\d+ of \d+)</td><td>([A-C?, ]*)</td><td>(\d+)</td></tr>", hidden
    )
    assert table == [("qwen", "0 of 3", "B, B, B", "0"), ("smollm2", "2 of 3", "A, A, C", "0")]
    assert "kept · tom.jsonl:5 · chance: right in 1.0 of the shuffles" in hidden
    assert "another version" not in hidden
    # nocontext= names a run for another folder; a record with other options is shown as such
    other = copy_run(FIX / "run_clean", tmp_path / "run")
    jsonl(
        tmp_path / "nc2" / "nocontext.jsonl",
        [blind_record("goal-002", {"m": [0, 1, 2]}, n_options=4)],
    )
    data = plan(
        ReviewConfig(
            input=str(other), nocontext=str(tmp_path / "nc2"), reviewer="al", cache_dir=None
        )
    ).data
    assert [i for i, it in enumerate(data.items) if it.blind] == [2]
    assert (
        "this nocontext record has 4 options and answer A; the item has 3 and answer C: it was "
        "made from "
        "another version of the item"
    ) in render(data.items[2])


def test_a_judge_run_shows_each_options_score_and_flags_the_item(tmp_path: Path) -> None:
    folder = copy_run(FIX / "run_clean", tmp_path / "run")
    judge = tmp_path / "judge"
    jsonl(
        judge / "judge.jsonl",
        [
            judged_record("goal-000", {"big": [2, 0, 1], "small": [1, 1, None]}),
            judged_record("goal-001", {"big": [0, 2, 2], "small": [0, 2, 0]}, answer=1),
        ],
    )
    (judge / "manifest.json").write_text(
        json.dumps(
            {"generator": "judge", "judge": {"kind": "distractor_validity", "judge_label": "big"}}
        )
    )
    data = plan(
        ReviewConfig(input=str(folder), judge=str(judge), reviewer="al", cache_dir=None)
    ).data
    assert data.results.judge_primary == "big"
    assert [it.flags() for it in data.items[:3]] == [
        0,
        1,
        0,
    ]  # goal-001: option C scored as high as the answer
    seen, hidden = candidate_and_privileged(render(data.items[1]))
    assert "judge" not in seen.lower()
    assert "<th>big (primary)</th><th>small</th>" in hidden
    rows = re.findall(
        r'<tr class="([^"]*)"><td>([A-C])( \(answer\))?</td><td>([^<]*)</td><td>([^<]*)</td></tr>',
        hidden,
    )
    assert rows == [
        ("", "A", "", "0", "0"),
        ("is-answer", "B", " (answer)", "2", "2"),
        (" flagged", "C", "", "2", "0"),
    ]
    assert (
        'big: <strong class="sev-warning">flagged</strong>: C scored at least the answer' in hidden
    )
    assert "small: not flagged" in hidden
    first = render(data.items[0])  # flagged by the second judge only: shown, not counted
    assert "<td>– (no_score_tag)</td>" in first and "big: not flagged" in first
    assert (
        'small: <strong class="sev-warning">flagged</strong>: B scored at least the answer' in first
    )
    # the page's "flagged" filter counts it
    from starlette.testclient import TestClient

    session = Session(folder, data.items, "al", data.rubrics)
    listed = (
        TestClient(make_app(session), base_url="http://127.0.0.1")
        .get("/api/items", headers={TOKEN_HEADER: session.token})
        .json()["items"]
    )
    assert [it["flagged"] for it in listed[:3]] == [0, 1, 0]


def test_judge_and_nocontext_results_that_do_not_fit_are_one_line_errors(tmp_path: Path) -> None:
    folder = copy_run(FIX / "run_clean", tmp_path / "run")
    judge = tmp_path / "judge"
    jsonl(judge / "judge.jsonl", [judged_record("goal-000", {"big": [2, 0, 1]})])
    (judge / "manifest.json").write_text(
        json.dumps({"generator": "judge", "judge": {"kind": "context"}})
    )
    with pytest.raises(
        InputError, match=r"manifest.json: judge: not a judge run of kind distractor_validity"
    ):
        plan(ReviewConfig(input=str(folder), judge=str(judge), cache_dir=None))
    (judge / "manifest.json").unlink()
    bad = judged_record("goal-000", {"big": [2, 0, 1]})
    bad["scores"]["big"].pop()
    jsonl(judge / "judge.jsonl", [judged_record("goal-001", {"big": [2, 0, 1]}), bad])
    with pytest.raises(
        InputError,
        match=rf"^{re.escape(str(judge / 'judge.jsonl'))}:2: "
        r"scores.big: 2 judgments for 3 options$",
    ):
        plan(ReviewConfig(input=str(folder), judge=str(judge), cache_dir=None))
    jsonl(
        judge / "judge.jsonl",
        [judged_record("goal-000", {"a": [2, 0, 1]}), judged_record("goal-001", {"b": [2, 0, 1]})],
    )
    with pytest.raises(InputError, match="records of several judges"):
        plan(ReviewConfig(input=str(folder), judge=str(judge), cache_dir=None))
    nc = jsonl(
        tmp_path / "nc" / "nocontext.jsonl",
        [{**blind_record("goal-000", {"m": [0, 0, 0]}), "correct": {"m": 7}}],
    )
    with pytest.raises(InputError, match=rf"^{re.escape(str(nc))}:1: correct.m: 7 is not 0-3$"):
        plan(ReviewConfig(input=str(folder), nocontext=str(nc), cache_dir=None))
    jsonl(
        nc,
        [{k: v for k, v in blind_record("goal-000", {"m": [0, 0, 0]}).items() if k != "answers"}],
    )
    with pytest.raises(InputError, match=rf"^{re.escape(str(nc))}:1: answers: Field required$"):
        plan(ReviewConfig(input=str(folder), nocontext=str(nc), cache_dir=None))
    with pytest.raises(MissingInputError, match="nocontext: .* not found"):
        plan(ReviewConfig(input=str(folder), nocontext=str(tmp_path), cache_dir=None))
    # a judge run given as input= holds no items: the message says what to do
    with pytest.raises(
        InputError,
        match=r"holds judge results, not items: review the bank the judge read, with judge=",
    ):
        plan(ReviewConfig(input=str(judge), cache_dir=None))


def test_egotom_items_match_results_and_findings_by_the_mcq_id(tmp_path: Path) -> None:
    """An EgoToM row's record id is its cuid, but nocontext, judge and audit name it ``goal:<cuid>``
    (gen's MCQ reader): both names find it."""

    folder = egotom_goal_folder(tmp_path, "00m:01s | C opens a door")
    (folder / "audit.jsonl").write_text(
        json.dumps(
            {
                "check": "length",
                "check_id": 4,
                "kind": "longest_answer",
                "severity": "warning",
                "what": "longest",
                "items": ["goal:v1~pass_1~0-9"],
                "fields": [],
            }
        )
        + "\n"
    )
    jsonl(
        folder / "nocontext.jsonl", [blind_record("goal:v1~pass_1~0-9", {"m": [1, 1, 0]}, answer=1)]
    )
    data = plan(ReviewConfig(input=str(folder), reviewer="al", cache_dir=None)).data
    assert data.items[0].record_id == "v1~pass_1~0-9"
    assert (len(data.items[0].findings), len(data.items[0].blind)) == (1, 1)


# --------------------------------------------------------------------------- a bank


@pytest.fixture()
def bank(tmp_path: Path) -> Any:
    """A bank of three versions: v1 three MCQs (their batch's audit names the second), v2 two
    scenarios, v3 one more MCQ. Added with a stand-in audit that reports planted findings (that of
    tests/bank_runs.py)."""
    from bank_runs import REGISTRY, Bank, Generator, StandInAuditConfig, _standin, mcq, run_folder

    def standin(cfg: StandInAuditConfig, ctx: Any) -> Any:
        from gen.schemas.audit import FindingRecord

        for _ in _standin(cfg, ctx):  # audit.json; the findings are the records (audit.jsonl)
            yield [FindingRecord.model_validate(f) for f in cfg.findings]

    real = REGISTRY.get("audit")
    REGISTRY["audit"] = Generator("audit", standin, StandInAuditConfig, "audit stand-in")
    try:
        b = Bank(tmp_path)
        records = [mcq(i) for i in range(4)]
        finding = {
            "check": "length",
            "check_id": 4,
            "kind": "longest_answer",
            "severity": "warning",
            "what": "the answer is the longest option",
            "items": [records[1]["item_id"]],
            "fields": [],
        }
        assert (
            b.add(
                run_folder(tmp_path / "tom_a", records[:3]), audit_options={"findings": [finding]}
            )[0].accepted
            == 3
        )
        scenarios = scenario_folder(
            tmp_path / "sc",
            SCENARIO,
            {**SCENARIO, "scenario_id": "sc-02", "turn_2_user": "And is the angle okay?"},
        )
        assert b.add(scenarios, near_dup_sim=None)[0].accepted == 2
        assert b.add(run_folder(tmp_path / "tom_b", records[3:]))[0].accepted == 1
        b.records = records  # type: ignore[attr-defined]
        yield b
    finally:
        if real is not None:
            REGISTRY["audit"] = real


def test_a_bank_is_reviewed_by_version_and_its_labels_go_to_its_review_area(
    bank: Any, tmp_path: Path
) -> None:
    from gen.banks.store import LOCK, version_dir
    from gen.banks.verify import verify_bank

    data = plan(ReviewConfig(input=str(bank.root), reviewer="alice", cache_dir=None)).data
    assert data.folder == bank.root and bank.current == 3
    assert {
        it.item_id for it in data.items
    } == bank.ids()  # the bank's ids: labels follow the items
    assert [(it.kind, it.record_id) for it in data.items] == [
        ("mcq", r["item_id"]) for r in bank.records
    ] + [("scenarios", "sc-01"), ("scenarios", "sc-02")]
    assert data.files == [
        version_dir(bank.root, 3) / LOCK,
        version_dir(bank.root, 3) / "tom.parquet",
        version_dir(bank.root, 3) / "scenarios.parquet",
    ]
    # the audit of each version's batch is shown with the items it names
    assert data.findings == [version_dir(bank.root, v) / "audit" / "audit.jsonl" for v in (1, 2, 3)]
    assert [len(it.findings) for it in data.items] == [0, 1, 0, 0, 0, 0]
    assert set(data.rubrics) == {"mcq", "scenarios"}
    old = plan(ReviewConfig(input=str(bank.root), version=1, reviewer="alice", cache_dir=None)).data
    assert [it.record_id for it in old.items] == [r["item_id"] for r in bank.records[:3]]
    # labels: the bank's reviews/, outside its versions; the bank still verifies
    from starlette.testclient import TestClient

    session = Session(data.folder, data.items, "alice", data.rubrics)
    client = TestClient(make_app(session), base_url="http://127.0.0.1")
    for it, d in zip(
        data.items, ["accept", "reject", "accept", "accept", "needs_edit", "accept"], strict=True
    ):
        assert (
            client.post(
                "/api/label",
                json={"item_id": it.item_id, "decision": d},
                headers={TOKEN_HEADER: session.token},
            ).status_code
            == 200
        )
    assert len(read_label_file(bank.root / "reviews" / "alice.jsonl")) == 6
    _, checks, leftovers = verify_bank(bank.root)
    assert not [p for c in checks for p in c.problems] and leftovers == []
    # summary: into the bank's reviews/ too
    append_label(bank.root, label("bob", item=data.items[1].item_id, decision="accept"))
    result = run_config(
        "review",
        ReviewConfig(input=str(bank.root), action="summary", cache_dir=None, progress="off"),
        tmp_path / "sum",
        quiet=True,
    )
    assert result.accepted == 6
    report = json.loads((bank.root / "reviews" / "summary.json").read_text())
    assert report["reviewers"] == ["alice", "bob"] and [
        d["record_id"] for d in report["disagreements"]
    ] == [bank.records[1]["item_id"]]
    assert bank.verify()[0].exit_code == 0


def test_what_review_refuses_of_a_bank(bank: Any, tmp_path: Path) -> None:
    from gen.banks.store import version_dir
    from gen.banks.verify import DriftError
    from gen.errors import ConfigError

    with pytest.raises(ConfigError, match=r"version=4, but the bank .* is at v0003"):
        plan(ReviewConfig(input=str(bank.root), version=4, cache_dir=None))
    with pytest.raises(
        ConfigError, match=r"version=1 is for input=<bank folder>; .* is not a bank"
    ):
        plan(ReviewConfig(input=str(FIX / "run_clean"), version=1, cache_dir=None))
    with pytest.raises(
        ConfigError,
        match=rf"is a version folder of the bank {re.escape(str(bank.root))}; review it as "
        rf"input={re.escape(str(bank.root))} version=N",
    ):
        plan(ReviewConfig(input=str(version_dir(bank.root, 2)), cache_dir=None))
    parquet = version_dir(bank.root, 3) / "tom.parquet"
    parquet.chmod(0o644)
    parquet.write_bytes(
        parquet.read_bytes()[:-8]
    )  # damaged: nothing is reviewed, the file is named
    with pytest.raises(
        DriftError,
        match=rf"^input: bank .* v0003 does not verify, nothing to review: "
        rf"{re.escape(str(parquet))}: hash_mismatch: ",
    ):
        plan(ReviewConfig(input=str(bank.root), cache_dir=None))
    assert (
        len(plan(ReviewConfig(input=str(bank.root), version=2, cache_dir=None)).data.items) == 5
    )  # v2 is intact
    empty = tmp_path / "empty"
    (empty / "versions").mkdir(parents=True)
    with pytest.raises(MissingInputError, match="has no released version yet"):
        plan(ReviewConfig(input=str(empty), cache_dir=None))


def test_bank_export_reports_the_labels_given_after_release(bank: Any, tmp_path: Path) -> None:
    """A version is immutable, so labels of a bank's items live in <bank>/reviews/; the dataset
    card and croissant.json of an export report those of the exported items, with the files'
    hashes; the same labels give the same bytes."""
    items = plan(ReviewConfig(input=str(bank.root), reviewer="al", cache_dir=None)).data.items
    assert bank.export("parquet", out=str(tmp_path / "before"))[0].exit_code == 0
    assert "## Review" not in (tmp_path / "before" / "README.md").read_text()
    for r, ds in [
        ("al", ["accept", "reject", "accept", "needs_edit"]),
        ("bo", ["accept", "accept"]),
    ]:
        for it, d in zip(items, ds, strict=False):
            append_label(bank.root, label(r, item=it.item_id, decision=d))
    append_label(bank.root, label("cy", item=items[5].item_id, note="no decision yet"))
    append_label(
        bank.root, label("cy", item="f" * 32, decision="reject")
    )  # not an item of the bank
    for out in ("a", "b"):
        assert bank.export("parquet", out=str(tmp_path / out))[0].exit_code == 0
    card = (tmp_path / "a" / "README.md").read_text()
    sha = hashlib.sha256((bank.root / "reviews" / "al.jsonl").read_bytes()).hexdigest()
    # items 0 (accept, accept), 1 (reject, accept: disagreed), 2 (accept), 3 (needs_edit); cy
    # decided none of them
    assert (
        "After release: 4 items reviewed by 2 reviewer(s): accept 2, disagreed 1, needs_edit 1; "
        "protocol: gen review "
        "after release"
    ) in card
    assert f"`reviews/al.jsonl` {sha[:16]}…" in card and "reviews/cy.jsonl" not in card
    croissant = json.loads((tmp_path / "a" / "croissant.json").read_text())
    assert croissant["rai:annotationsPerItem"].startswith(
        "After release: 4 items reviewed by 2 reviewer(s)"
    )
    assert any(p.startswith("After release:") for p in croissant["rai:dataAnnotationProtocol"])
    for name in ("README.md", "croissant.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # an older version's export counts the labels of its own items only (v2: not item 3)
    assert bank.export("parquet", out=str(tmp_path / "v2"), version=2)[0].exit_code == 0
    assert (
        "After release: 3 items reviewed by 2 reviewer(s): accept 2, disagreed 1;"
        in (tmp_path / "v2" / "README.md").read_text()
    )
