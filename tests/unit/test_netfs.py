"""Network filesystems (NFS, Lustre…): detection by ``statfs``' magic number, and what changes
there, exercised by forcing the detection (``GEN_NETWORK_FS=1``): the caches write one SQLite file
per process (no WAL, no lock), read the parts of finished or dead processes, never write another
process's file, and merge many parts into few; the persona pool's lock is a lock file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT, gen_env
from processes import requests, stand_in

from gen import netfs
from gen.llm.cache import CALLS, MERGE_AT, Cache, PartsStore

CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    "GEN_NETWORK_FS": "1",
}


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEN_NETWORK_FS", "1")


def child(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=CHILD_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def no_wal_anywhere(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.endswith(("-wal", "-shm"))]


# --------------------------------------------------------------------------- detection


def test_the_magic_number_is_statfs_own(tmp_path: Path) -> None:
    """Read with ctypes, the same f_type as coreutils' ``stat -f`` reports (the outside tool)."""
    out = subprocess.run(
        ["stat", "-f", "-c", "%t", str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert netfs.fs_magic(tmp_path) == int(out.stdout.strip(), 16)


@pytest.mark.parametrize(
    ("magic", "kind"),
    [
        (0x6969, "nfs"),
        (0x0BD00BD0, "lustre"),
        (0x47504653, "gpfs"),
        (0xFF534D42, "cifs"),
        (0x65735546, "fuse"),
        (0xEF53, None),
        (0x01021994, None),
        (None, None),
    ],
)
def test_network_filesystems_by_magic(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, magic: int | None, kind: str | None
) -> None:
    monkeypatch.delenv("GEN_NETWORK_FS", raising=False)
    monkeypatch.setattr(netfs, "fs_magic", lambda path: magic)
    assert netfs.network_fs(tmp_path) == kind
    monkeypatch.setenv("GEN_NETWORK_FS", "0")
    assert netfs.network_fs(tmp_path) is None
    monkeypatch.setenv("GEN_NETWORK_FS", "1")
    assert netfs.network_fs(tmp_path) is not None


def test_an_nfs_magic_number_switches_the_cache_layout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GEN_NETWORK_FS", raising=False)
    assert Cache(tmp_path / "a" / "llm.sqlite").layout == "wal"
    monkeypatch.setattr(netfs, "fs_magic", lambda path: 0x6969)
    monkeypatch.setattr("gen.llm.cache.network_fs", netfs.network_fs)
    cache = Cache(tmp_path / "b" / "llm.sqlite")
    assert cache.layout == "parts"
    cache.put("k", "v")
    assert cache.get("k") == "v" and no_wal_anywhere(tmp_path / "b")


# --------------------------------------------------------------------------- the cache in parts


WRITER = """
    import sys
    from pathlib import Path
    from gen.llm.cache import Cache
    cache = Cache(Path(sys.argv[1]))
    for i in range(int(sys.argv[3])):
        cache.put(f"{sys.argv[2]}-{i}", "v" * 500)
        assert cache.get(f"{sys.argv[2]}-{i}") == "v" * 500
"""


def test_processes_write_parts_of_their_own_and_read_each_others(
    tmp_path: Path, network: None
) -> None:
    path = tmp_path / "cache" / "llm.sqlite"
    writers = [child(WRITER, str(path), f"w{k}", "60") for k in range(4)]
    for w in writers:
        assert w.wait(120) == 0, w.stderr.read() if w.stderr else ""
    parts = sorted((tmp_path / "cache" / "llm.parts").iterdir())
    assert len([p for p in parts if p.suffix == ".sqlite"]) == 4
    assert [p for p in parts if p.suffix == ".live"] == []  # all four finished
    assert not path.exists() and no_wal_anywhere(tmp_path)
    cache = Cache(path)
    assert all(cache.get(f"w{k}-{i}") == "v" * 500 for k in range(4) for i in range(60))
    assert cache.get("absent") is None


HOLDER = """
    import sys, time
    from pathlib import Path
    from gen.llm.cache import Cache
    cache = Cache(Path(sys.argv[1]))
    for i in range(10):
        cache.put(f"kept-{i}", "v")
    store = cache._store
    db = store._own
    db.execute("PRAGMA cache_size=1")  # spill to the file mid-transaction: a hot journal
    db.execute("BEGIN")
    rows = [(f"lost-{i}", "x" * 2000) for i in range(300)]
    db.executemany("INSERT INTO calls VALUES (?, ?)", rows)
    print(store._own_path, flush=True)
    time.sleep(120)
"""


def test_a_part_killed_mid_write_is_read_as_committed_and_never_written(
    tmp_path: Path, network: None
) -> None:
    path = tmp_path / "cache" / "llm.sqlite"
    holder = child(HOLDER, str(path))
    assert holder.stdout is not None
    part = Path(holder.stdout.readline().strip())
    journal = part.with_name(part.name + "-journal")
    assert journal.exists() and part.with_suffix(".live").exists()
    live = PartsStore(path, CALLS)  # its writer is alive: not read
    assert live.query("SELECT value FROM calls WHERE key='kept-0'", ()) == []
    live.close()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    before = (part.read_bytes(), journal.read_bytes())
    store = PartsStore(path, CALLS)  # its writer is dead (this host): read from a rolled-back copy
    try:
        assert [
            store.query("SELECT value FROM calls WHERE key=?", (f"kept-{i}",)) for i in range(10)
        ] == [[("v",)]] * 10
        assert store.query("SELECT count(*) FROM calls WHERE key LIKE 'lost-%'", ()) == [(0,)]
    finally:
        store.close()
    assert (part.read_bytes(), journal.read_bytes()) == before  # the shared files were not touched


def test_many_finished_parts_are_merged_without_losing_a_row(
    tmp_path: Path, network: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cache" / "llm.sqlite"
    monkeypatch.setattr("gen.llm.cache.MERGE_AT", 1000)  # 12 processes that each leave a part
    for k in range(MERGE_AT + 4):
        store = PartsStore(path, CALLS)
        store.write("INSERT INTO calls VALUES (?, ?)", [(f"{k}-{i}", str(i)) for i in range(k + 1)])
        store.close()
    monkeypatch.undo()
    monkeypatch.setenv("GEN_NETWORK_FS", "1")
    folder = tmp_path / "cache" / "llm.parts"
    assert len(list(folder.glob("*.sqlite"))) == MERGE_AT + 4
    store = PartsStore(path, CALLS)
    try:
        assert len(list(folder.glob("*.sqlite"))) == 2  # the largest, and the rest merged
        assert not list(folder.glob(".merge-*"))
        for k in range(MERGE_AT + 4):
            for i in range(k + 1):
                assert store.query(
                    "SELECT value FROM calls WHERE key=?", (f"{k}-{i}",), first=True
                ) == [(str(i),)]
    finally:
        store.close()


def test_another_hosts_part_is_read_once_its_writer_is_quiet(tmp_path: Path, network: None) -> None:
    path = tmp_path / "cache" / "llm.sqlite"
    store = PartsStore(path, CALLS)
    store.write("INSERT INTO calls VALUES ('k', 'v')", [()])
    own = store._own_path
    store.close()
    assert own is not None
    marker = own.with_suffix(".live")
    marker.write_text("another-node 4242\n")  # as if a process on another node still wrote it
    fresh = PartsStore(path, CALLS)
    assert fresh.query("SELECT value FROM calls WHERE key='k'", ()) == []
    fresh.close()
    hour_ago = time.time() - 3600
    os.utime(marker, (hour_ago, hour_ago))
    quiet = PartsStore(path, CALLS)
    assert quiet.query("SELECT value FROM calls WHERE key='k'", ()) == [("v",)]
    quiet.close()


def test_the_llm_cache_replays_across_processes_in_parts(tmp_path: Path, network: None) -> None:
    from pydantic import BaseModel

    from gen.llm import scripted_llm

    class Bio(BaseModel):
        bio: str

    path = tmp_path / "cache" / "llm.sqlite"
    llm = scripted_llm(['{"bio": "once"}'], cache=Cache(path))
    assert llm.structured([{"role": "user", "content": "x"}], Bio, seed=1).bio == "once"
    PartsStore._shared.pop(str(path.resolve())).close()  # as at exit: the part is finished
    assert not list((tmp_path / "cache" / "llm.parts").glob("*.live"))
    replay = scripted_llm([], cache=Cache(path))
    assert replay.structured([{"role": "user", "content": "x"}], Bio, seed=1).bio == "once"
    assert replay.usage.cache_hits == 1


def test_embeddings_are_cached_in_parts(
    tmp_path: Path, network: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from gen.llm.embed import Embedder, EmbedderConfig, embedded_minilm

    class Model:
        calls = 0

        def encode(self, texts: list[str], **_: object) -> np.ndarray:
            Model.calls += len(texts)
            return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    monkeypatch.setattr(Embedder, "_load", lambda self: Model())
    cache = str(tmp_path / "cache")
    one = Embedder(EmbedderConfig(model_path=str(embedded_minilm())), cache)
    assert one.encode(["a", "bb"]).shape == (2, 2) and Model.calls == 2
    PartsStore._shared[str((tmp_path / "cache" / "embeddings.sqlite").resolve())].close()
    PartsStore._shared.clear()
    two = Embedder(EmbedderConfig(model_path=str(embedded_minilm())), cache)
    assert two.encode(["bb", "a", "ccc"])[:, 0].tolist() == [2, 1, 3]
    assert Model.calls == 3 and two.cache_hits == 2
    assert (tmp_path / "cache" / "embeddings.parts").is_dir() and no_wal_anywhere(tmp_path)


# --------------------------------------------------------------------------- the lock


LOCKER = """
    import sys, time
    from pathlib import Path
    from gen.netfs import exclusive
    with exclusive(Path(sys.argv[1])):
        with open(sys.argv[2], "a") as f:
            f.write(f"in {time.monotonic()}\\n")
        time.sleep(0.8)
        with open(sys.argv[2], "a") as f:
            f.write(f"out {time.monotonic()}\\n")
"""


def test_the_lock_file_excludes_across_processes(tmp_path: Path, network: None) -> None:
    log = tmp_path / "log"
    lockers = [child(LOCKER, str(tmp_path / ".lock"), str(log)) for _ in range(3)]
    for p in lockers:
        assert p.wait(60) == 0, p.stderr.read() if p.stderr else ""
    events = [line.split()[0] for line in log.read_text().splitlines()]
    assert events == ["in", "out"] * 3  # never two inside at once
    assert not (tmp_path / ".lock.held").exists() and not (tmp_path / ".lock").exists()


def test_a_holder_is_gone_when_its_pid_is_dead_or_taken_over() -> None:
    me = netfs.holder()
    host, pid, start = me.split()
    assert not netfs.holder_gone(me, time.time())
    assert netfs.holder_gone(f"{host} 999999999 {start}", time.time())  # no such process
    assert netfs.holder_gone(
        f"{host} {pid} {int(start) + 1}", time.time()
    )  # the pid, another process
    assert not netfs.holder_gone(f"{host} {pid}", time.time())  # an older marker: the pid alone
    assert not netfs.holder_gone("another-node 1 2", time.time() - 60)
    assert netfs.holder_gone("another-node 1 2", time.time() - 3 * netfs.STALE_AFTER)


def test_a_lock_left_by_a_dead_process_is_broken(tmp_path: Path, network: None) -> None:
    held = tmp_path / ".lock.held"
    held.write_text(f"{socket.gethostname()} 999999999 x\n")  # no such pid
    t0 = time.monotonic()
    with netfs.exclusive(tmp_path / ".lock"):
        assert held.read_text().split()[1] == str(os.getpid())
    assert time.monotonic() - t0 < 5 and not held.exists()


def test_another_hosts_lock_is_broken_only_when_stale(
    tmp_path: Path, network: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = tmp_path / ".lock.held"
    held.write_text("another-node 12 x\n")
    monkeypatch.setattr(netfs, "STALE_AFTER", 1.0)
    t0 = time.monotonic()
    with netfs.exclusive(tmp_path / ".lock"):
        waited = time.monotonic() - t0
    assert 0.9 <= waited < 5  # waited for the lock to go stale, then broke it


def test_flock_that_is_not_supported_falls_back_to_the_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import fcntl

    monkeypatch.setenv("GEN_NETWORK_FS", "0")

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with netfs.exclusive(tmp_path / ".lock"):
        assert (tmp_path / ".lock.held").exists()
    assert not (tmp_path / ".lock.held").exists()


POOL = """
    import json, sys
    from pathlib import Path
    sys.path[:0] = [sys.argv[3], sys.argv[3] + "/unit"]
    from test_personas import pool_script
    from gen.llm import scripted_llm
    from gen.engine.runner import RunContext
    from gen.generators.digital import DigitalConfig
    from gen.formats.people import ensure_pool
    script = pool_script(lambda n, s: False)
    def counted(messages, seed):
        with open(sys.argv[2], "a") as f:
            f.write("call\\n")
        return script(messages, seed)
    cfg = DigitalConfig(persona_pool=6, pool_dir=sys.argv[1], cache_dir=None, progress="off")
    ctx = RunContext("digital", cfg, Path(sys.argv[1]).parent / "run")
    ctx.use(llm=scripted_llm(counted))
    pool, folder = ensure_pool(ctx, 0, 6, sys.argv[1])
    print(json.dumps([p.persona_id for p in pool]))
"""


def test_shards_started_together_make_the_persona_pool_once(tmp_path: Path, network: None) -> None:
    pools, calls = tmp_path / "pools", tmp_path / "calls"
    shards = [child(POOL, str(pools), str(calls), str(ROOT / "tests")) for _ in range(2)]
    outs = []
    for p in shards:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out.splitlines()[-1]))
    assert outs[0] == outs[1] and len(outs[0]) == 6
    assert len(calls.read_text().splitlines()) == 6  # one bio call per persona: made once
    assert not (pools / "seed0-n6" / ".lock.held").exists()


# --------------------------------------------------------------------------- the CLI


def test_a_cli_run_on_a_network_filesystem(tmp_path: Path, cache_dir: Path) -> None:
    """A run and its rerun with the detection forced: the cache is in parts, nothing in WAL; the
    rerun's calls all replay from the first run's part (the server sees no chat call)."""
    env = gen_env(cache_dir) | {"GEN_NETWORK_FS": "1"}
    with stand_in(tmp_path) as (url, log):
        for k in (1, 2):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gen",
                    "personas",
                    "n=2",
                    "attempts=1",
                    "draws=1",
                    "widen=none",
                    "llm=openai",
                    f"llm.base_url={url}",
                    "progress=off",
                    f"hydra.run.dir={tmp_path / f'run{k}'}",
                ],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert proc.returncode in (0, 1), proc.stderr
            assert len(requests(log)) == 2  # the second run: cache hits only
    assert (tmp_path / "run2" / "rejects.jsonl").read_bytes() == (
        tmp_path / "run1" / "rejects.jsonl"
    ).read_bytes()
    parts = list((cache_dir / "llm.parts").glob("*"))
    assert [p.suffix for p in parts] == [".sqlite"] and no_wal_anywhere(cache_dir)
