"""Kill a real run mid-way, rerun it: no half-written output, and the same records as an
uninterrupted run."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

N = 8
SEED = 2


def cache_rows(db: Path) -> int:
    """Rows in the LLM cache's ``calls`` table, 0 while it does not exist yet."""
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:  # table not created yet, or the file is mid-setup
        return 0


def test_kill_and_resume(tmp_path: Path, env_for, check_run_folder, runner_for) -> None:
    cache = tmp_path / "cache"
    folder_a, folder_b = tmp_path / "A", tmp_path / "B"
    args = ["personas", f"n={N}", f"seed={SEED}", "progress=off"]
    log = open(tmp_path / "killed.log", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [sys.executable, "-m", "gen", *args, f"hydra.run.dir={folder_a}"],
        cwd=tmp_path,
        env=env_for(cache),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        while cache_rows(cache / "llm.sqlite") < 2:
            assert proc.poll() is None, (
                "the run ended before it could be killed: "
                + (tmp_path / "killed.log").read_text()[-2000:]
            )
            assert time.monotonic() < deadline, "no LLM calls were cached within 180 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        log.close()

    rows_at_kill = cache_rows(cache / "llm.sqlite")
    assert rows_at_kill >= 2
    # a killed run leaves at most partial files, never final outputs
    assert not (folder_a / "personas.jsonl").exists()
    assert not (folder_a / "rejects.jsonl").exists()
    assert not (folder_a / "manifest.json").exists()
    leftovers = {p.name for p in folder_a.iterdir() if p.is_file()} if folder_a.exists() else set()
    assert leftovers <= {"records.jsonl.partial", "rejects.jsonl.partial", "gen.log"}, leftovers

    run = runner_for(tmp_path, cache)
    resumed = run(*args, f"hydra.run.dir={folder_a}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    manifest_a = check_run_folder(folder_a, "personas", N, one_per_index=False)
    usage = manifest_a["llm_usage"]
    assert usage["cache_hits"] >= 2  # the calls finished before the kill were replayed
    assert usage["calls"] > usage["cache_hits"]  # and the rest were generated

    again = run(*args, f"hydra.run.dir={folder_b}")
    assert again.returncode == 0, again.stderr[-3000:]
    manifest_b = check_run_folder(folder_b, "personas", N, one_per_index=False)
    # the validated replies are replayed; a reply that failed a check is asked again (only
    # validated replies are cached, issue 43), and the deterministic model answers it the same
    assert 0 < manifest_b["llm_usage"]["cache_hits"] <= manifest_b["llm_usage"]["calls"]
    for name in ("personas.jsonl", "rejects.jsonl"):
        assert (folder_a / name).read_bytes() == (folder_b / name).read_bytes(), name
    assert manifest_a["counts"] == manifest_b["counts"]
