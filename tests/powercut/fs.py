"""A FUSE filesystem that forgets, at a power cut, everything that was not fsynced.

`python -m tests.powercut.fs LIVE DURABLE MOUNTPOINT STATS_FILE` mounts MOUNTPOINT as a
passthrough to LIVE (what running processes see: the page cache plus the disk) and keeps
DURABLE as what the disk would hold after a power cut at this instant:

* file data reaches DURABLE only when that file is fsynced (fsync or fdatasync, also the
  writes of a file opened O_SYNC/O_DSYNC): the byte ranges written since its last sync and
  its size are copied then. close, rename and the kernel's periodic writeback never make
  data durable here: a power cut may come before the writeback, so this is the worst case
  a real disk allows, and the one JetStream's `sync_interval` is about;
* namespace changes (create, mkdir, rename, unlink, rmdir) are one ordered log, applied to
  DURABLE at the next fsync of any file or directory. That is how the journal of ext4
  (data=ordered, the default) and XFS behave: metadata changes go to the journal in order,
  and an fsync commits the journal's running transaction, which carries every change made
  before it. An entry never followed by any fsync is lost, as on those filesystems.

The power cut itself is done by the harness (tests/powercut/mount.py): SIGKILL the
processes writing here (nothing more reaches the filesystem, so DURABLE holds exactly what
had been synced), unmount, and make LIVE a copy of DURABLE for the next mount.

At unmount the daemon writes counts (writes, fsyncs, directory fsyncs, bytes made
durable) to STATS_FILE as JSON.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import mfusepy as fuse

Op = tuple[str, str, str]  # (kind, path, new path for a rename)
SYNC_FLAGS = os.O_SYNC | os.O_DSYNC


class PowerCutFS(fuse.Operations):  # type: ignore[misc]
    """Passthrough to `live`; `durable` receives only what a power cut would keep."""

    use_ns = True

    def __init__(self, live: Path, durable: Path, stats: Path) -> None:
        self.live, self.durable, self.stats_file = live, durable, stats
        self._mutex = threading.Lock()
        self.journal: list[Op] = []  # namespace changes not yet committed
        self.dirty: dict[str, list[tuple[int, int]]] = {}  # path -> written ranges
        self.resized: set[str] = set()  # paths truncated since their last sync
        self.sync_fds: set[int] = set()  # handles opened O_SYNC / O_DSYNC
        self.stats: Counter[str] = Counter()

    def _l(self, path: str) -> str:
        return str(self.live) + path

    def _d(self, path: str) -> str:
        return str(self.durable) + path

    # -- reads: straight through ------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._l(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino")
        attrs: dict[str, Any] = {k: getattr(st, k) for k in keys}
        for k in ("st_atime", "st_mtime", "st_ctime"):
            attrs[k] = getattr(st, k + "_ns")
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._l(path))]

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._l(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
        return {k: getattr(st, k) for k in (*keys, "f_files", "f_frsize", "f_namemax")}

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._l(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    # -- files ------------------------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        fd = os.open(self._l(path), flags & ~os.O_CREAT)
        if flags & SYNC_FLAGS:
            self.sync_fds.add(fd)
        if flags & os.O_TRUNC:
            with self._mutex:
                self.resized.add(path)
        return fd

    def create(self, path: str, mode: int, flags: int) -> int:
        with self._mutex:
            fd = os.open(self._l(path), flags | os.O_CREAT, mode)
            self.journal.append(("create", path, ""))
            self.resized.add(path)
        if flags & SYNC_FLAGS:
            self.sync_fds.add(fd)
        return fd

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            written = os.pwrite(fh, data, offset)
            self.dirty.setdefault(path, []).append((offset, offset + written))
            self.stats["writes"] += 1
        if fh in self.sync_fds:
            self._sync(path, "o_sync")
        return written

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mutex:
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._l(path), length)
            self.resized.add(path)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._sync(path, "fsync")
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            self.stats["fsyncdir"] += 1
            self._commit_journal()
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        self.sync_fds.discard(fh)
        os.close(fh)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._l(path), ns=times)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._l(path), mode)
        return 0

    # -- namespace: applied to LIVE now, to DURABLE at the next sync -----------------------
    def mkdir(self, path: str, mode: int) -> int:
        return self._namespace(("mkdir", path, ""), lambda: os.mkdir(self._l(path), mode))

    def rmdir(self, path: str) -> int:
        return self._namespace(("rmdir", path, ""), lambda: os.rmdir(self._l(path)))

    def unlink(self, path: str) -> int:
        return self._namespace(("unlink", path, ""), lambda: os.unlink(self._l(path)))

    def rename(self, old: str, new: str) -> int:
        return self._namespace(("rename", old, new), lambda: os.rename(self._l(old), self._l(new)))

    def _namespace(self, op: Op, apply: Any) -> int:
        with self._mutex:
            apply()
            self.journal.append(op)
            kind, path, new = op
            if kind in ("unlink", "rmdir"):
                self._forget(path)
            elif kind == "rename":
                self._move_pending(path, new)
        return 0

    def _forget(self, path: str) -> None:
        self.dirty.pop(path, None)
        self.resized.discard(path)

    def _move_pending(self, old: str, new: str) -> None:
        """Unsynced writes follow their file (or the files under a directory) to `new`."""
        self._forget(new)
        for table in (self.dirty, self.resized):
            keys = [k for k in table if k == old or k.startswith(old + "/")]
            for key in keys:
                moved = new + key[len(old) :]
                if isinstance(table, dict):
                    table[moved] = table.pop(key)
                else:
                    table.discard(key)
                    table.add(moved)

    # -- the durable image ----------------------------------------------------------------
    def _sync(self, path: str, why: str) -> None:
        with self._mutex:
            self.stats[why] += 1
            self._commit_journal()
            ranges = self.dirty.pop(path, [])
            resized = path in self.resized
            self.resized.discard(path)
            if not ranges and not resized:
                return
            with open(self._l(path), "rb") as src, open(self._d(path), "r+b") as dst:
                size = os.fstat(src.fileno()).st_size
                if resized or os.fstat(dst.fileno()).st_size > size:
                    dst.truncate(size)
                for start, end in ranges:
                    if start >= size:  # written, then truncated away before this sync
                        continue
                    chunk = os.pread(src.fileno(), min(end, size) - start, start)
                    os.pwrite(dst.fileno(), chunk, start)
                    self.stats["bytes_synced"] += len(chunk)

    def _commit_journal(self) -> None:
        for kind, path, new in self.journal:
            try:
                _apply(kind, self._d(path), self._d(new) if new else "")
            except OSError as exc:  # the log is replayed in order: a miss is our bug
                print(f"powercut fs: {kind} {path} {new}: {exc}", file=sys.stderr)
                self.stats["journal_errors"] += 1
        self.journal.clear()

    def destroy(self, path: str) -> None:
        self.stats_file.write_text(json.dumps(dict(self.stats)))


def _apply(kind: str, path: str, new: str) -> None:
    if kind == "create":
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    elif kind == "mkdir":
        os.mkdir(path)
    elif kind == "rmdir":
        os.rmdir(path)
    elif kind == "unlink":
        os.unlink(path)
    elif kind == "rename":
        os.rename(path, new)


def main(argv: list[str]) -> None:
    live, durable, mountpoint, stats = (Path(a).resolve() for a in argv)
    ops = PowerCutFS(live, durable, stats)
    fuse.FUSE(ops, str(mountpoint), foreground=True, nothreads=False, fsname="powercut")


if __name__ == "__main__":
    main(sys.argv[1:])
