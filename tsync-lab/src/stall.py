#!/usr/bin/python3
"""A pass-through FUSE file system whose writes stall: what a busy disk looks like to a writer.

    stall.py SOURCE MOUNTPOINT --period SECS --stall SECS   # writes block STALL s of every PERIOD s
    stall.py SOURCE MOUNTPOINT --gate FILE                  # writes block while FILE exists

Every file operation is passed through to SOURCE; only write(), flush() and fsync() stall: a call
made during a stall returns when the stall ends, as a write() does on a saturated disk under
Linux's dirty-page throttling. Runs in the foreground until unmounted (`umount MOUNTPOINT`).
Prints `mounted` once the file system serves requests, and `blocked` at the first stalled call of
each stall, on stdout (line-buffered), for the test or benchmark that drives it.

Mounted by `tsync_lab::StallingFs` for the agent's output tests and `cargo xtask bench capture`
(needs root, FUSE and Debian's python3-fusepy, which `cargo xtask setup` installs).
"""

import argparse
import errno
import os
import sys
import threading
import time

try:  # Debian's python3-fusepy
    from fusepy import FUSE, FuseOSError, Operations
except ImportError:  # fusepy from PyPI
    from fuse import FUSE, FuseOSError, Operations


class Stall:
    """Decides when writes stall, and waits the stall out."""

    def __init__(self, period, stall, gate):
        self.period = period
        self.stall = stall
        self.gate = gate
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.stalling = False  # a call is waiting out the current stall

    def _remaining(self):
        """Seconds until the current stall ends (None: until the gate opens), or 0 if none."""
        if self.gate is not None:
            return None if os.path.exists(self.gate) else 0
        phase = (time.monotonic() - self.start) % self.period
        return self.stall - phase if phase < self.stall else 0

    def wait(self):
        remaining = self._remaining()
        if remaining == 0:
            return
        with self.lock:
            if not self.stalling:
                self.stalling = True
                print("blocked", flush=True)
        if remaining is None:
            while os.path.exists(self.gate):
                time.sleep(0.01)
        else:
            time.sleep(remaining)
        with self.lock:
            self.stalling = False


class Passthrough(Operations):
    def __init__(self, root, stall):
        self.root = os.path.realpath(root)
        self.stall = stall

    def _full(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def init(self, path):
        print("mounted", flush=True)

    def access(self, path, mode):
        if not os.access(self._full(path), mode):
            raise FuseOSError(errno.EACCES)

    def chmod(self, path, mode):
        return os.chmod(self._full(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._full(path), uid, gid)

    def getattr(self, path, fh=None):
        st = os.lstat(self._full(path))
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size",
                "st_uid")
        return {key: getattr(st, key) for key in keys}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._full(path))

    def mkdir(self, path, mode):
        return os.mkdir(self._full(path), mode)

    def rmdir(self, path):
        return os.rmdir(self._full(path))

    def unlink(self, path):
        return os.unlink(self._full(path))

    def rename(self, old, new):
        return os.rename(self._full(old), self._full(new))

    def statfs(self, path):
        st = os.statvfs(self._full(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                "f_flag", "f_frsize", "f_namemax")
        return {key: getattr(st, key) for key in keys}

    def utimens(self, path, times=None):
        return os.utime(self._full(path), times)

    def open(self, path, flags):
        return os.open(self._full(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._full(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path, length, offset, fh):
        return os.pread(fh, length, offset)

    def write(self, path, data, offset, fh):
        self.stall.wait()
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        with open(self._full(path), "r+") as f:
            f.truncate(length)

    def flush(self, path, fh):
        self.stall.wait()
        return 0

    def fsync(self, path, datasync, fh):
        self.stall.wait()
        return os.fdatasync(fh) if datasync else os.fsync(fh)

    def release(self, path, fh):
        return os.close(fh)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source")
    p.add_argument("mountpoint")
    p.add_argument("--period", type=float, help="seconds of one stall cycle")
    p.add_argument("--stall", type=float, help="seconds of each cycle during which writes block")
    p.add_argument("--gate", help="writes block while this file exists")
    args = p.parse_args()
    if args.gate is None and not (args.period and args.stall is not None
                                  and 0 <= args.stall <= args.period):
        p.error("give --gate FILE, or --period and --stall with 0 <= stall <= period")
    stall = Stall(args.period, args.stall, args.gate)
    FUSE(Passthrough(args.source, stall), args.mountpoint, foreground=True, nothreads=False,
         big_writes=True, max_write=131072)
    return 0


if __name__ == "__main__":
    sys.exit(main())
