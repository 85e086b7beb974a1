"""``review``: kappa on hand-computed cases, label files under concurrent writers, the web app's
token, host and label checks, escaping of item text, the summary run, and a real server process
stopped with Ctrl-C."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from review_runs import FIX, ITEM, SCENARIO, copy_run, egotom_goal_folder, label, scenario_folder

from gen.agreement import cohen_kappa, field_agreement, fleiss_kappa
from gen.engine.runner import run_config
from gen.errors import InputError, MissingInputError
from gen.formats.labels import append_label, label_file, read_label_file, read_labels
from gen.generators.review import ReviewConfig, plan
from gen.generators.review.items import ReviewItem, load_items, render
from gen.generators.review.server import TOKEN_HEADER, Session, make_app
from gen.paths import ROOT

XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


# --------------------------------------------------------------------------- kappa


def test_cohen_kappa_on_the_textbook_case() -> None:
    """Wikipedia's example: 50 items, yes/yes 20, yes/no 5, no/yes 10, no/no 15: po 0.7,
    pe 0.5 (0.5*0.6 + 0.5*0.4), kappa 0.4."""
    pairs = [("y", "y")] * 20 + [("y", "n")] * 5 + [("n", "y")] * 10 + [("n", "n")] * 15
    assert cohen_kappa(pairs) == pytest.approx(0.4)
    assert cohen_kappa([("a", "a"), ("b", "b"), ("a", "a")]) == pytest.approx(1.0)
    # perfect disagreement on a balanced split: po 0, pe 0.5 -> -1
    assert cohen_kappa([("a", "b"), ("b", "a")]) == pytest.approx(-1.0)
    assert cohen_kappa([("a", "a"), ("a", "a")]) is None  # one category: chance agreement is 1
    assert cohen_kappa([("a", "b")]) is None


def test_fleiss_kappa_on_the_textbook_case_and_by_hand() -> None:
    """Fleiss (1971) as on Wikipedia: 10 items, 14 raters, 5 categories, kappa 0.210."""
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    ratings = [[c for c, k in enumerate(row) for _ in range(k)] for row in table]
    assert fleiss_kappa(ratings) == pytest.approx(0.20993, abs=1e-5)
    # by hand, three raters: P_i = 1, 1/3, 1, 1/3 -> P = 2/3; a and b 6 of 12 each -> Pe = 1/2;
    # kappa = (2/3 - 1/2) / (1/2) = 1/3
    assert fleiss_kappa(
        [["a", "a", "a"], ["a", "a", "b"], ["b", "b", "b"], ["a", "b", "b"]]
    ) == pytest.approx(1 / 3)
    # an item with one rating is left out; varying raters per item use pairs within each item
    assert fleiss_kappa([["a"], ["a", "a"], ["b", "b", "b"]]) == pytest.approx(1.0)
    assert fleiss_kappa([["a", "a"], ["a", "a"]]) is None


def test_field_agreement_takes_cohen_for_two_and_fleiss_for_more() -> None:
    two = {
        "i1": {"al": 1, "bo": 1},
        "i2": {"al": 2, "bo": 1},
        "i3": {"al": 2, "bo": 2},
        "i4": {"al": 1},
    }
    out = field_agreement(two, ["al", "bo"])
    # pairs (1,1) (2,1) (2,2): po 2/3; al 1:1/3 2:2/3, bo 1:2/3 2:1/3 -> pe 4/9; kappa 0.4
    assert out == {"items": 3, "observed": 0.6667, "method": "cohen", "kappa": 0.4}
    three = {
        "i1": {"a": 1, "b": 1, "c": 1},
        "i2": {"a": 1, "b": 1, "c": 2},
        "i3": {"a": 2, "b": 2, "c": 2},
        "i4": {"a": 1, "b": 2, "c": 2},
    }
    assert field_agreement(three, ["a", "b", "c"]) == {
        "items": 4,
        "observed": 0.5,
        "method": "fleiss",
        "kappa": 0.3333,
    }


# --------------------------------------------------------------------------- label files


def _writer(folder: str, reviewer: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        append_label(Path(folder), label(reviewer, item=f"{i:032x}", note="x" * (i % 7) * 900))


def test_concurrent_writers_never_clobber_a_label_file(tmp_path: Path) -> None:
    """Four processes append 150 labels each to the same file (notes up to 5.4 kB, beyond a
    pipe's atomic size): every line is whole and each label is there once."""
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_writer, args=(str(tmp_path), "alice", k * 1000, 150)) for k in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    labels = read_label_file(label_file(tmp_path, "alice"))
    assert len(labels) == 600
    assert sorted(lab.item_id for lab in labels) == sorted(
        f"{k * 1000 + i:032x}" for k in range(4) for i in range(150)
    )
    assert label_file(tmp_path, "alice").read_bytes().count(b"\n") == 600


def test_a_torn_last_line_is_skipped_and_cut_off_by_the_next_append(tmp_path: Path) -> None:
    append_label(tmp_path, label(decision="accept"))
    path = label_file(tmp_path, "alice")
    whole = path.read_bytes()
    path.write_bytes(whole + whole[:40])  # a writer killed mid-line
    assert [lab.decision for lab in read_label_file(path)] == ["accept"]
    append_label(tmp_path, label(decision="reject"))
    assert path.read_bytes().count(b"\n") == 2
    assert [lab.decision for lab in read_label_file(path)] == ["accept", "reject"]


def test_a_bad_label_line_names_file_line_and_field(tmp_path: Path) -> None:
    append_label(tmp_path, label())
    path = label_file(tmp_path, "alice")
    bad = json.loads(path.read_text())
    bad["decision"] = "maybe"
    path.write_text(path.read_text() + json.dumps(bad) + "\n")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:2: decision: "):
        read_labels(tmp_path)
    path.write_text(json.dumps({**bad, "decision": None, "reviewer": "bob"}) + "\n")
    with pytest.raises(InputError, match=r":1: reviewer: 'bob' in alice's label file"):
        read_labels(tmp_path)


def test_label_files_stay_inside_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (folder / "reviews").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError, match="resolves outside"):
        append_label(folder, label())
    assert not list((tmp_path / "elsewhere").iterdir())
    with pytest.raises(InputError, match="not a reviewer name"):
        label_file(folder, "../x")
    with pytest.raises(ValueError, match="reviewer="):
        ReviewConfig(input=str(folder), reviewer="../../etc", cache_dir=None)


# --------------------------------------------------------------------------- the web app


@pytest.fixture()
def app(tmp_path: Path) -> Any:
    from starlette.testclient import TestClient

    folder = copy_run(FIX / "run_clean", tmp_path / "run")
    data = plan(ReviewConfig(input=str(folder), reviewer="alice", cache_dir=None)).data
    session = Session(folder, data.items, "alice", data.rubrics)
    client = TestClient(make_app(session), base_url="http://127.0.0.1")
    client.session = session  # type: ignore[attr-defined]
    return client


def _post_chunks(app: Any, token: str, chunks: Any, length: int | None) -> tuple[int, int]:
    """POST /api/label straight through the ASGI app, its body streamed in ``chunks``; the status
    and how many chunks the app pulled (the test client reads a whole body before sending it)."""
    import asyncio

    pulled = 0
    status = 0
    it = iter(chunks)
    pending = next(it, None)

    async def receive() -> dict[str, Any]:
        nonlocal pulled, pending
        if pending is None:
            return {"type": "http.disconnect"}
        chunk, pending = pending, next(it, None)
        pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": pending is not None}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (TOKEN_HEADER.lower().encode(), token.encode()),
    ]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/label",
        "raw_path": b"/api/label",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app.app(scope, receive, send))
    return status, pulled


def test_a_large_label_request_is_refused_while_it_is_read(app: Any) -> None:
    """The whole body (200 MB) was read into memory before the 64 kB check: now a Content-Length
    over the limit is refused before a byte is read, and a streamed body after the limit."""
    from gen.generators.review.server import MAX_BODY

    chunk = b" " * 65_536
    many = (chunk for _ in range(3_200))  # 200 MiB if read whole
    status, pulled = _post_chunks(app, app.session.token, many, None)
    assert status == 413 and pulled <= 2
    assert _post_chunks(app, app.session.token, (chunk for _ in range(3_200)), 3_200 * 65_536) == (
        413,
        0,
    )
    assert _post_chunks(app, app.session.token, [b"{}"], 10**30) == (413, 0)
    assert _post_chunks(app, app.session.token, [b"{}"], -5)[0] == 413
    body = json.dumps({"item_id": app.session.items[0].item_id, "decision": "accept"}).encode()
    assert len(body) < MAX_BODY
    assert _post_chunks(app, app.session.token, [body[:10], body[10:]], None) == (200, 2)


def test_every_request_without_the_token_is_refused(app: Any) -> None:
    s = app.session
    item = s.items[0].item_id
    body = {"item_id": item, "decision": "accept"}
    assert app.get("/").status_code == 403
    assert app.get("/?token=wrong").status_code == 403
    assert app.get(f"/?token={s.token}").status_code == 200
    for headers in ({}, {TOKEN_HEADER: "wrong"}, {TOKEN_HEADER: s.token[:-1]}):
        assert app.get("/api/items", headers=headers).status_code == 403
        assert app.get("/api/item/0", headers=headers).status_code == 403
        assert app.post("/api/label", json=body, headers=headers).status_code == 403
    # the token in the query string is not enough for the API (a link cannot change data)
    assert app.post(f"/api/label?token={s.token}", json=body).status_code == 403
    assert not (s.folder / "reviews").exists()
    ok = app.post("/api/label", json=body, headers={TOKEN_HEADER: s.token})
    assert ok.status_code == 200 and ok.json()["label"]["decision"] == "accept"
    assert [lab.decision for lab in read_labels(s.folder)["alice"]] == ["accept"]


def test_a_foreign_host_and_a_form_post_are_refused(app: Any) -> None:
    s = app.session
    assert app.get(f"/?token={s.token}", headers={"host": "evil.example"}).status_code == 400
    form = app.post(
        "/api/label", data={"item_id": s.items[0].item_id}, headers={TOKEN_HEADER: s.token}
    )
    assert form.status_code == 415


@pytest.mark.parametrize("index", ["-1", "-2", "%2D1", "1_0", "%201", "99", "9" * 5000])
def test_an_item_index_outside_the_items_is_404(app: Any, index: str) -> None:
    """Before, ``/api/item/-1`` answered the last item (Python's negative index)."""
    s = app.session
    headers = {TOKEN_HEADER: s.token}
    assert app.get("/api/item/0", headers=headers).status_code == 200
    r = app.get(f"/api/item/{index}", headers=headers)
    assert r.status_code == 404 and r.json()["error"] == "no such item"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"item_id": ITEM}, "item_id: not an item of this folder"),
        (
            {"item_id": ["a", "list"]},
            "item_id: not an item of this folder",
        ),  # unhashable: a 400, not a crash
        ({"scores": {"nope": 1}}, "'nope' is not a field of rubric mcq-egotom"),
        ({"scores": {"inferable": 4}}, "scores.inferable: expected 1-3, got 4"),
        ({"scores": {"inferable": True}}, "scores.inferable: expected 1-3, got True"),
        ({"decision": "maybe"}, "decision: one of accept, reject, needs_edit"),
        ({"note": "x" * 10_001}, "note: String should have at most 10000 characters"),
        ({"reviewer": "bob"}, "unknown fields ['reviewer']"),
    ],
)
def test_a_bad_label_is_refused_and_not_written(
    app: Any, body: dict[str, Any], message: str
) -> None:
    s = app.session
    r = app.post(
        "/api/label", json={"item_id": s.items[0].item_id, **body}, headers={TOKEN_HEADER: s.token}
    )
    assert r.status_code == 400 and message in r.json()["error"]
    assert not (s.folder / "reviews").exists()


def test_items_list_my_labels_and_others_decisions(app: Any) -> None:
    s = app.session
    append_label(s.folder, label("bob", item=s.items[1].item_id, decision="reject"))
    app.post(
        "/api/label",
        json={"item_id": s.items[1].item_id, "scores": {"inferable": 3}, "decision": "accept"},
        headers={TOKEN_HEADER: s.token},
    )
    data = app.get("/api/items", headers={TOKEN_HEADER: s.token}).json()
    assert len(data["items"]) == 80 and data["reviewer"] == "alice"
    second = data["items"][1]
    assert second["label"]["scores"] == {"inferable": 3} and second["others"] == {"bob": "reject"}
    assert [f["key"] for f in data["rubrics"]["mcq"]["fields"]][0] == "inferable"


def test_the_page_allows_only_its_own_script(app: Any) -> None:
    r = app.get(f"/?token={app.session.token}")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
    assert r.headers["referrer-policy"] == "no-referrer"
    assert app.get("/static/review.js").status_code == 200
    assert app.get("/static/..%2Fmcq.yaml").status_code == 404


# --------------------------------------------------------------------------- escaping


def test_item_text_is_escaped_in_mcq_digital_and_scenario_views(tmp_path: Path) -> None:
    rows = [json.loads(x) for x in (FIX / "run_clean" / "tom.jsonl").read_text().splitlines()[:1]]
    rows[0]["visible"]["context"].append(f"04m:00s | C reads {XSS}")
    rows[0]["question"] = f"Which {XSS}?"
    rows[0]["options"][1] = XSS
    rows[0]["privileged"]["future_narration"] = XSS
    folder = tmp_path / "mcq"
    folder.mkdir()
    (folder / "tom.jsonl").write_text(json.dumps(rows[0]) + "\n")
    bundle = json.loads((FIX / "digital" / "digital.jsonl").read_text().splitlines()[0])
    bundle["apps"]["Notes"]["notes"][0]["content"] = XSS
    bundle["cue"]["cue"] = XSS
    dig = tmp_path / "dig"
    dig.mkdir()
    (dig / "digital.jsonl").write_text(json.dumps(bundle) + "\n")
    sc = scenario_folder(
        tmp_path / "sc",
        turn_1_image=f"A hand holds a tool {XSS}",
        notes=XSS,
        gold={**SCENARIO["gold"], "current_answers": [XSS, "hammer"]},
    )
    for f in (folder, dig, sc):
        items, _ = load_items(f)
        html = render(items[0])
        assert "<script" not in html and "<img" not in html and 'onerror="' not in html
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
        assert html.count("&lt;script&gt;") >= 2


def test_the_cue_items_of_a_bundle_are_highlighted() -> None:
    items, _ = load_items(FIX / "digital")
    html = render(items[0])
    assert re.search(
        r'class="key">Nomthandazo Mondise · 2025-06-11 15:26:00 · Are we still having dinner', html
    )
    assert html.count('class="entry key"') == 1


def test_audit_findings_show_with_the_items_they_name(tmp_path: Path) -> None:
    folder = copy_run(FIX / "run_clean", tmp_path / "run")
    finding = {
        "check": "length",
        "check_id": 4,
        "kind": "longest_answer",
        "severity": "warning",
        "what": "the answer is the <b>longest</b> option",
        "items": ["goal-001"],
        "fields": ["options[answer]"],
    }
    (folder / "audit.jsonl").write_text(json.dumps(finding) + "\n")
    items: list[ReviewItem] = plan(
        ReviewConfig(input=str(folder), reviewer="al", cache_dir=None)
    ).data.items
    assert [len(it.findings) for it in items[:3]] == [0, 1, 0]
    assert "the answer is the &lt;b&gt;longest&lt;/b&gt; option" in render(items[1])


# --------------------------------------------------------------------------- summary


def test_summary_reports_counts_kappa_and_disagreements(tmp_path: Path) -> None:
    folder = copy_run(FIX / "run_clean", tmp_path / "run")
    items = plan(ReviewConfig(input=str(folder), reviewer="al", cache_dir=None)).data.items
    for r, ds in [
        ("al", ["accept", "accept", "reject", "accept"]),
        ("bo", ["accept", "reject", "reject", "accept"]),
    ]:
        for it, d in zip(items, ds, strict=False):
            append_label(
                folder,
                label(
                    r, item=it.item_id, decision=d, scores={"inferable": 3 if d == "accept" else 1}
                ),
            )
    append_label(
        folder,
        label(
            "al",
            item=items[0].item_id,
            decision="accept",
            scores={"inferable": 3},
            note="second thoughts, same verdict",
        ),
    )  # a whole label: the last line counts
    cfg = ReviewConfig(input=str(folder), action="summary", cache_dir=None, progress="off")
    result = run_config("review", cfg, tmp_path / "out", quiet=True)
    assert (result.requested, result.accepted) == (4, 4)
    report = json.loads((folder / "reviews" / "summary.json").read_text())
    assert report["per_reviewer"]["al"] == {
        "items": 4,
        "lines": 5,
        "accept": 3,
        "reject": 1,
        "needs_edit": 0,
        "undecided": 0,
        "unknown_items": 0,
    }
    # pairs A/A A/R R/R A/A: po 0.75, pe (3*2 + 1*2)/16 = 0.5 -> kappa 0.5
    assert report["agreement"]["decision"] == {
        "items": 4,
        "observed": 0.75,
        "method": "cohen",
        "kappa": 0.5,
    }
    assert report["agreement"]["inferable"]["kappa"] == 0.5
    assert [d["record_id"] for d in report["disagreements"]] == ["goal-001"]
    assert report["disagreements"][0]["disagree"] == ["decision", "inferable"]
    md = (folder / "reviews" / "summary.md").read_text()
    assert "| decision | 4 | 0.75 | 0.5 | cohen |" in md
    assert json.loads((tmp_path / "out" / "review_summary.json").read_text()) == report
    records = [json.loads(x) for x in (tmp_path / "out" / "review.jsonl").read_text().splitlines()]
    assert records[0]["accepted_by"] == ["al", "bo"] and records[1]["disagree"] == [
        "decision",
        "inferable",
    ]


def test_summary_without_labels_says_how_to_make_them(tmp_path: Path) -> None:
    folder = copy_run(FIX / "run_clean", tmp_path / "run")
    with pytest.raises(MissingInputError, match="holds no labels yet"):
        plan(ReviewConfig(input=str(folder), action="summary", cache_dir=None))


def test_the_audit_of_a_reviewed_run_folder_does_not_flag_its_labels(tmp_path: Path) -> None:
    from audit_runs import run_audit

    folder = copy_run(FIX / "run_clean", tmp_path / "run")
    append_label(folder, label())
    _, findings, _ = run_audit(tmp_path / "out", folder, checks=["integrity"])
    assert not [f for f in findings if f["kind"] == "output_unlisted"]
    (folder / "stray.txt").write_text("x")
    _, findings, _ = run_audit(tmp_path / "out2", folder, checks=["integrity"])
    assert [f["fields"] for f in findings if f["kind"] == "output_unlisted"] == [
        ["outputs.stray.txt"]
    ]


# --------------------------------------------------------------------------- the server process


def test_the_server_listens_on_loopback_saves_labels_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    folder = copy_run(FIX / "digital", tmp_path / "run")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gen",
            "review",
            f"input={folder}",
            "reviewer=carol",
            f"hydra.run.dir={tmp_path / 'out'}",
            "progress=plain",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = None
        deadline = time.time() + 60
        while url is None and time.time() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "the server exited before printing its address"
            m = re.search(r"open (http://127\.0\.0\.1:(\d+)/\?token=(\S+))", line)
            url = m and m.group(1)
        assert m is not None
        base, token = url.split("/?")[0], m.group(3)
        items = json.loads(
            urllib.request.urlopen(
                urllib.request.Request(f"{base}/api/items", headers={TOKEN_HEADER: token}),
                timeout=10,
            ).read()
        )
        item = items["items"][2]["item_id"]
        req = urllib.request.Request(
            f"{base}/api/label",
            method="POST",
            headers={TOKEN_HEADER: token, "Content-Type": "application/json"},
            data=json.dumps(
                {"item_id": item, "decision": "needs_edit", "scores": {"realistic": 2}}
            ).encode(),
        )
        assert (
            json.loads(urllib.request.urlopen(req, timeout=10).read())["label"]["decision"]
            == "needs_edit"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{base}/api/items"), timeout=10)
        assert refused.value.code == 403
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(
            timeout=120
        )  # it writes its records and manifest; slow on a loaded machine (> 30 s once)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    records = [json.loads(x) for x in (tmp_path / "out" / "review.jsonl").read_text().splitlines()]
    assert [r["decision"] for r in records] == [None, None, "needs_edit"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["review"]["decisions"] == {"needs_edit": 1, "undecided": 2}
    assert os.path.isfile(folder / "reviews" / "carol.jsonl")


def test_the_audit_lists_the_items_reviewers_decided_differently(tmp_path: Path) -> None:
    from audit_runs import run_audit

    folder = copy_run(FIX / "run_clean", tmp_path / "run")
    _, _, report = run_audit(tmp_path / "out0", folder, checks=["review"])
    assert (
        report["checks"][0]["status"] == "skipped" and "no labels" in report["checks"][0]["reason"]
    )
    items = plan(ReviewConfig(input=str(folder), reviewer="al", cache_dir=None)).data.items
    for r, ds in [
        ("al", ["accept", "accept", "reject"]),
        ("bo", ["accept", "reject", "reject"]),
        ("cy", ["accept"]),
    ]:
        for it, d in zip(items, ds, strict=False):
            append_label(
                folder,
                label(r, item=it.item_id, decision=d).model_copy(
                    update={"record_id": it.record_id}
                ),
            )
    append_label(folder, label("cy", item=items[2].item_id, note="undecided"))
    result, findings, report = run_audit(tmp_path / "out", folder, checks=["review"])
    assert [(f["kind"], f["severity"], f["items"]) for f in findings] == [
        ("review_disagreement", "warning", ["goal-001"])
    ]
    assert findings[0]["what"] == "reviewers decided differently (al: accept, bo: reject)"
    stats = report["checks"][0]["stats"]
    assert (
        stats["reviewers"] == ["al", "bo", "cy"]
        and stats["labelled"] == 3
        and stats["disagreements"] == 1
    )
    # Fleiss over the items with two or more decisions, [A,A,A] [A,R] [R,R] (cy's note has none):
    # P = (1 + 0 + 1) / 3 = 2/3; 4 A and 3 R of 7: Pe = 25/49; kappa = (2/3 - 25/49) / (24/49) =
    # 23/72
    assert stats["agreement"]["method"] == "fleiss"
    assert stats["agreement"]["kappa"] == pytest.approx(23 / 72, abs=1e-4)
    assert result.exit_code == 0  # a warning: for a person to settle


def test_an_egotom_csv_folder_shows_its_narrations_as_the_timeline(tmp_path: Path) -> None:

    folder = egotom_goal_folder(tmp_path, "00m:01s | C opens a door\n00m:05s | C <b>sits</b>")
    items, files = load_items(folder)
    assert [it.record_id for it in items] == ["v1~pass_1~0-9"] and files == [
        folder / "egotom_goal_shuffled.csv"
    ]
    html = render(items[0])
    assert "<li>00m:01s | C opens a door</li><li>00m:05s | C &lt;b&gt;sits&lt;/b&gt;</li>" in html
    assert "narrations_in_context" not in html and '<strong class="answer">B</strong>' in html
