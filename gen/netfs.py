"""Folders on network filesystems (NFS, Lustre, GPFS, SMB…): how to tell, and a lock that holds
there.

Cluster users run from home and project directories on NFS or Lustre, often from several nodes
at once. Two things the toolkit does on a local disk are unsafe there: SQLite's WAL mode (its
``-shm`` index is shared memory, which exists only within one host: SQLite's documentation says
WAL "does not work over a network filesystem") and ``flock`` (on NFS it is emulated, or local to
the node with ``local_lock=flock``; on Lustre it fails unless the mount says ``flock``). So a folder
is judged by its filesystem (``statfs``' magic number), and on a network filesystem:

- the caches (:mod:`gen.llm.cache`) write one SQLite file per process and never share one for
  writing;
- :func:`exclusive` locks with a lock file made by ``O_CREAT | O_EXCL`` (atomic on NFSv3+ and
  Lustre), refreshed while held, and broken when its holder is gone.

``GEN_NETWORK_FS=1`` makes every folder count as networked (a filesystem the magic numbers miss,
or a test); ``GEN_NETWORK_FS=0`` none.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

NETWORK_MAGIC = {
    0x6969: "nfs",
    0x0BD00BD0: "lustre",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x517B: "smb",
    0x47504653: "gpfs",
    0x19830326: "beegfs",
    0x00C36400: "ceph",
    0x01021997: "9p",
    0x65735546: "fuse",
    0x5346414F: "afs",
    0x6B414653: "afs",
    0x7461636F: "ocfs2",
    0x01161970: "gfs2",
    0xAAD7AAEA: "panfs",
    0x73757245: "coda",
    0x564C: "ncp",
    0x786F4256: "vboxsf",
}
"""``statfs`` magic numbers (``f_type``, linux/magic.h and the vendors') of filesystems shared
between hosts. FUSE counts: sshfs, s3fs, gcsfuse and JuiceFS are FUSE."""

ENV = "GEN_NETWORK_FS"
HOST = socket.gethostname()
STALE_AFTER = 120.0
"""Seconds after which a lock file not refreshed by its holder (every ``STALE_AFTER / 12``
seconds) counts as left behind by a process that is gone."""


class _Statfs(ctypes.Structure):
    # f_type comes first (__fsword_t: a C long on Linux); the rest is room for the other fields
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 256)]


def fs_magic(path: Path) -> int | None:
    """``statfs(path).f_type``, or None where it cannot be read (not Linux, no such path)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = _Statfs()
        if libc.statfs(os.fsencode(str(path)), ctypes.byref(buf)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return buf.f_type & 0xFFFFFFFF


def network_fs(path: Path) -> str | None:
    """The network filesystem ``path`` (an existing folder or file) is on (``nfs``, ``lustre``…),
    or None for a local one. ``GEN_NETWORK_FS=1`` / ``0`` decides instead."""
    forced = os.environ.get(ENV, "").strip()
    if forced in ("1", "0"):
        return "forced (GEN_NETWORK_FS=1)" if forced == "1" else None
    magic = fs_magic(path)
    return NETWORK_MAGIC.get(magic) if magic is not None else None


def pid_alive(pid: int) -> bool:
    """A process with this pid runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, Linux), or ``-`` where unknown: a
    holder's pid that a new process took over is told apart by it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "-"


def holder() -> str:
    """This process, as lock and marker files name their holder: ``<host> <pid> <started>``."""
    return f"{HOST} {os.getpid()} {started(os.getpid())}"


def holder_gone(text: str, mtime: float, *, stale_after: float | None = None) -> bool:
    """A lock or marker file's holder (``"<host> <pid> <started> …"``) is gone: on this host a pid
    that does not run (or runs another process), on another host a file not refreshed for
    ``stale_after`` seconds (``STALE_AFTER``)."""
    stale_after = STALE_AFTER if stale_after is None else stale_after
    parts = text.split()
    if len(parts) >= 2 and parts[0] == HOST and parts[1].isdigit():
        pid = int(parts[1])
        if not pid_alive(pid):
            return True
        return len(parts) >= 3 and parts[2] != "-" and started(pid) not in ("-", parts[2])
    return time.time() - mtime > stale_after


@contextlib.contextmanager
def exclusive(lock: Path, *, poll: float = 0.2) -> Iterator[None]:
    """Hold an exclusive lock on ``lock`` (a file beside what it guards) while the block runs:
    ``flock`` on a local disk; on a network filesystem (or where flock is not supported) a lock
    file created with O_EXCL, refreshed while held and broken once its holder is gone."""
    import fcntl

    if network_fs(lock.parent) is None:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
            else:
                yield
                return
        finally:
            os.close(fd)
    with _lock_file(lock.with_name(lock.name + ".held"), poll):
        yield


@contextlib.contextmanager
def _lock_file(path: Path, poll: float) -> Iterator[None]:
    token = f"{holder()} {uuid.uuid4().hex}\n"
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            _break_if_stale(path)
            time.sleep(poll)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(token)
        break
    stop = threading.Event()

    def refresh() -> None:  # the holder's heartbeat: the lock's mtime says it is alive
        while not stop.wait(STALE_AFTER / 12):
            with contextlib.suppress(OSError):
                os.utime(path)

    beat = threading.Thread(target=refresh, daemon=True, name="gen-lock-heartbeat")
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        with contextlib.suppress(OSError):
            if path.read_text() == token:  # never remove a lock another process took over
                path.unlink()


def _break_if_stale(path: Path) -> None:
    try:
        text, mtime = path.read_text(), path.stat().st_mtime
    except (OSError, UnicodeDecodeError):
        return
    if not holder_gone(text, mtime):
        return
    aside = path.with_name(f"{path.name}.broken-{uuid.uuid4().hex[:8]}")
    try:  # rename is atomic: of two processes breaking the same lock, one wins
        os.rename(path, aside)
    except OSError:
        return
    try:
        if aside.read_text() != text:  # retaken between our look and the rename: give it back
            os.link(aside, path)  # unless yet another process holds it by now (EEXIST)
            aside.unlink()
            return
    except OSError:
        return
    with contextlib.suppress(OSError):
        aside.unlink()
