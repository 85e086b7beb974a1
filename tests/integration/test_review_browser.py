"""``python -m gen review`` in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by selenium with the system driver; nothing is downloaded) opens the
page a real server process prints, rates three items by keyboard, reloads, and finds the labels
on the page and in ``reviews/alice.jsonl``; an item holding ``<script>`` renders as text; a
request without the token is refused; the blind answers and judge scores show after ``v``; a
scenario keeps its judge side hidden until ``v``. Takes the README's screenshots
(docs/review_*.png), written there only with ``GEN_DOCS_SCREENSHOTS=1``: a test run leaves the
checkout as it was (a screenshot's bytes follow the machine's fonts).

Skipped, with the reason, where chromium, chromedriver or selenium is missing
(``apt-get install -y chromium chromium-driver``; ``pip install -e .[dev]``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gen.paths import ROOT

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "audit"
DOCS = ROOT / "docs"
SHOTS = Path(tempfile.gettempdir()) / "gen-review-screenshots"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _missing() -> str | None:
    if CHROMIUM is None:
        return "chromium is not installed (apt-get install -y chromium chromium-driver)"
    if CHROMEDRIVER is None:
        return "chromedriver is not installed (apt-get install -y chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e .[dev])"
    return None


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(_missing() is not None, reason=_missing() or ""),
]


@contextmanager
def server(folder: Path, out: Path, reviewer: str, *options: str) -> Iterator[str]:
    """A real ``python -m gen review`` process; yields the address it prints; stops it with
    Ctrl-C (SIGINT) and checks it ends cleanly."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gen",
            "review",
            f"input={folder}",
            f"reviewer={reviewer}",
            f"hydra.run.dir={out}",
            "progress=plain",
            *options,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = None
        deadline = time.time() + 90
        while url is None and time.time() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "the server exited before printing its address"
            m = re.search(r"open (http://127\.0\.0\.1:\d+/\?token=\S+)", line)
            url = m.group(1) if m else None
        assert url is not None
        yield url
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture()
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not download a driver
    opts = Options()
    opts.binary_location = CHROMIUM  # type: ignore[assignment]
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--disable-gpu",
        "--no-first-run",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, condition: Any, timeout: float = 15) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition)


def keys(driver: Any, text: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(text).perform()


def shown(driver: Any, index: int) -> None:
    """Wait until item ``index`` is on the page and every label sent is saved."""
    wait(driver, lambda d: d.execute_script("return document.body.dataset.shown") == str(index))
    saved(driver)


def saved(driver: Any) -> None:
    wait(driver, lambda d: d.execute_script("return document.body.dataset.pending || '0'") == "0")
    assert "not saved" not in driver.find_element("id", "status").text


def screenshot(driver: Any, name: str) -> None:
    """The README's picture, without the save time in the status line (the same page gives the
    same file on every run)."""
    driver.execute_script("document.getElementById('status').textContent = ''")
    where = DOCS if os.environ.get("GEN_DOCS_SCREENSHOTS") == "1" else SHOTS
    where.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(where / name)), name


def chosen(driver: Any) -> tuple[str | None, int]:
    """(the decision shown as chosen, how many rubric scores are shown as chosen)."""
    decision = [
        b.get_attribute("data-decision")
        for b in driver.find_elements("css selector", "#decision button.chosen")
    ]
    return (decision[0] if decision else None), len(
        driver.find_elements("css selector", "#rubric .scale span.chosen")
    )


def blind_record(item_id: str) -> dict[str, Any]:
    """A nocontext record: smollm2 chose B, A, C on three shuffles (right once: B is the answer)."""
    return {
        "item_id": item_id,
        "question_type": "goal",
        "source": "tom.jsonl",
        "line": 1,
        "n_options": 3,
        "answer": 1,
        "kept": True,
        "removed_by": [],
        "shuffles": 3,
        "correct": {"smollm2": 1},
        "unparseable": {"smollm2": 0},
        "answers": {
            "smollm2": [
                {
                    "shuffle": k,
                    "order": [0, 1, 2],
                    "raw": f"Answer: {x}",
                    "letter": x,
                    "choice": "abc".index(x),
                    "correct": x == "b",
                }
                for k, x in enumerate("bac")
            ]
        },
    }


def judged_record(item_id: str) -> dict[str, Any]:
    """A distractor_validity record: the judge scores A 0, B (the answer) 2, C 2: flagged."""
    return {
        "item_id": item_id,
        "question_type": "goal",
        "source": "tom.jsonl",
        "answer": 1,
        "n_options": 3,
        "scores": {
            "qwen": [
                {"score": v, "normalised": v / 2, "followed": True, "raw": f"<score>{v}</score>"}
                for v in (0, 2, 2)
            ]
        },
        "flagged": {"qwen": True},
        "flagged_options": {"qwen": [2]},
    }


def test_rate_three_items_by_keyboard_reload_and_find_the_labels(
    tmp_path: Path, browser: Any
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(FIX / "run_clean", folder)
    rows = [json.loads(x) for x in (folder / "tom.jsonl").read_text().splitlines()]
    rows[0]["visible"]["context"].append(f"03m:59s | C types {XSS}")
    rows[0]["options"][2] = f"To {XSS}"
    (folder / "tom.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = tmp_path / "results"
    results.mkdir()
    (results / "nocontext.jsonl").write_text(json.dumps(blind_record("goal-001")) + "\n")
    (results / "judge.jsonl").write_text(json.dumps(judged_record("goal-001")) + "\n")
    with server(
        folder, tmp_path / "out", "alice", f"nocontext={results}", f"judge={results}"
    ) as url:
        base = url.split("/?")[0]
        browser.get(url)
        shown(browser, 0)
        # the <script> item renders as text and runs nothing
        assert XSS in browser.find_element("css selector", ".timeline").text
        assert browser.execute_script("return window.__xss === undefined")
        assert not browser.find_elements("css selector", "#item script, #item img")
        plan = [("33233", "a"), ("12111", "r"), ("32322", "e")]
        for i, (scores, decision) in enumerate(plan):
            shown(browser, i)
            keys(browser, scores + decision)
            saved(browser)
            assert chosen(browser) == (
                {"a": "accept", "r": "reject", "e": "needs_edit"}[decision],
                5,
            )
            keys(browser, "j")
        shown(browser, 3)
        keys(browser, "n")
        browser.switch_to.active_element.send_keys("wording is odd <b>here</b>")
        from selenium.webdriver.common.keys import Keys

        browser.switch_to.active_element.send_keys(Keys.ESCAPE)
        saved(browser)
        # reload: the labels come back from the server
        browser.get(url)
        shown(browser, 0)
        assert chosen(browser) == ("accept", 5)
        assert re.search(r"^3 / 80 decided by alice", browser.find_element("id", "progress").text)
        keys(browser, "j")
        shown(browser, 1)
        assert chosen(browser) == ("reject", 5)
        keys(browser, "v")  # reveal: the answer, origins and (none here) audit findings
        assert browser.find_element("css selector", ".privileged .answer").text == "B"
        # what the blind model answered and the judge's score of each option, shown after v
        blind = browser.find_element("css selector", ".blind table")
        assert blind.is_displayed() and "smollm2 1 of 3 B, A, C 0" in blind.text.replace("\n", " ")
        judged = browser.find_element("css selector", ".validity table").text.splitlines()
        assert judged == ["option qwen (primary)", "A 0", "B (answer) 2", "C 2"]
        assert (
            "qwen: flagged: C scored at least the answer"
            in browser.find_element("css selector", ".validity ul").text
        )
        screenshot(browser, "review_mcq.png")
        # filters: unreviewed skips the decided items
        keys(browser, "u")
        wait(browser, lambda d: "showing 77" in d.find_element("id", "progress").text)
        # a request without the token is refused, by the API and by the page
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(
                urllib.request.Request(
                    f"{base}/api/label",
                    method="POST",
                    headers={"Content-Type": "application/json"},
                    data=json.dumps({"item_id": "0" * 32, "decision": "accept"}).encode(),
                ),
                timeout=10,
            )
        assert refused.value.code == 403
        browser.get(base + "/")
        assert (
            "needs the address the server printed" in browser.find_element("tag name", "body").text
        )
    lines = [json.loads(x) for x in (folder / "reviews" / "alice.jsonl").read_text().splitlines()]
    last: dict[str, dict[str, Any]] = {}
    for lab in lines:
        last[lab["record_id"]] = lab
    assert {k: (v["decision"], v["scores"]) for k, v in last.items() if k != "goal-003"} == {
        "goal-000": (
            "accept",
            {
                "inferable": 3,
                "truth_accurate": 3,
                "distractors_wrong": 2,
                "distinct": 3,
                "interesting": 3,
            },
        ),
        "goal-001": (
            "reject",
            {
                "inferable": 1,
                "truth_accurate": 2,
                "distractors_wrong": 1,
                "distinct": 1,
                "interesting": 1,
            },
        ),
        "goal-002": (
            "needs_edit",
            {
                "inferable": 3,
                "truth_accurate": 2,
                "distractors_wrong": 3,
                "distinct": 2,
                "interesting": 2,
            },
        ),
    }
    assert (
        last["goal-003"]["note"] == "wording is odd <b>here</b>"
        and last["goal-003"]["decision"] is None
    )
    assert len(lines) == 3 * 6 + 1  # every change is a line
    records = [json.loads(x) for x in (tmp_path / "out" / "review.jsonl").read_text().splitlines()]
    assert [r["decision"] for r in records[:4]] == ["accept", "reject", "needs_edit", None]


def test_a_digital_bundle_shows_its_apps_side_by_side_with_the_cue_highlighted(
    tmp_path: Path, browser: Any
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(FIX / "digital", folder)
    with server(folder, tmp_path / "out", "bob") as url:
        browser.get(url)
        shown(browser, 0)
        apps = [a.text.split("\n")[0] for a in browser.find_elements("css selector", ".app")]
        assert apps == ["Calendar", "Messaging", "Search", "Videos", "Notes", "Maps", "Music"]
        tops = {a.location["y"] for a in browser.find_elements("css selector", ".app")[:3]}
        assert len(tops) == 1  # side by side
        key = browser.find_element("css selector", ".entry .key")
        assert "Are we still having dinner tonight?" in key.text
        assert (
            "Nomthandazo just asked about dinner"
            in browser.find_element("css selector", ".cue mark").text
        )
        keys(browser, "3331a")
        saved(browser)
        screenshot(browser, "review_digital.png")
    lab = json.loads((folder / "reviews" / "bob.jsonl").read_text().splitlines()[-1])
    assert lab["decision"] == "accept" and lab["scores"] == {
        "persona_consistent": 3,
        "time_consistent": 3,
        "cue_grounded": 3,
        "realistic": 1,
    }


def test_a_scenario_shows_its_turns_and_keeps_the_judges_side_until_revealed(
    tmp_path: Path, browser: Any
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    rows = [
        json.loads(x)
        for x in (FIX.parent / "judge" / "scenarios.jsonl").read_text().splitlines()[:2]
    ]
    rows[1]["turn_1_image"] += f" A label reads {XSS}."
    (folder / "scenarios.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with server(folder, tmp_path / "out", "dana") as url:
        browser.get(url)
        shown(browser, 0)
        cameras = [c.text for c in browser.find_elements("css selector", ".candidate .camera")]
        assert cameras == [
            f"[Camera: {rows[0]['turn_1_image']}]",
            f"[Camera: {rows[0]['turn_2_image']}]",
        ]
        users = [u.text for u in browser.find_elements("css selector", ".candidate .user")]
        assert users == [rows[0]["turn_1_user"], rows[0]["turn_2_user"]]
        # the target, the shift type and the gold lists are on the page but not shown before v
        target = browser.find_element("css selector", ".privileged .target")
        assert not target.is_displayed()
        assert rows[0]["change_type"] not in browser.find_element("id", "position").text
        keys(browser, "v")
        assert target.is_displayed() and target.text == rows[0]["target_context"]
        gold = [g.text for g in browser.find_elements("css selector", ".gold-list li")]
        assert rows[0]["gold"]["current_answers"][0] in gold
        keys(browser, "332333a")
        saved(browser)
        screenshot(browser, "review_scenario.png")
        keys(browser, "j")  # a camera description holding <script> renders as text
        shown(browser, 1)
        assert f"[Camera: {rows[1]['turn_1_image']}]" in [
            c.text for c in browser.find_elements("css selector", ".candidate .camera")
        ]
        assert browser.execute_script("return window.__xss === undefined")
        assert not browser.find_elements("css selector", "#item script, #item img")
    lab = json.loads((folder / "reviews" / "dana.jsonl").read_text().splitlines()[-1])
    assert lab["decision"] == "accept" and lab["rubric"] == "scenario-checklist"
    assert lab["scores"] == {
        "speech_deictic": 3,
        "camera_identifiable": 3,
        "camera_neutral": 2,
        "shift_implicit": 3,
        "target_right": 3,
        "gold_usable": 3,
    }
