"""A fresh pool mounted for a test case: mkfs.embfs, embfs -f, wait for the
mount to appear in /proc/mounts (never sleep and hope), and always unmount
and reap the daemon (by its PID) at the end, also when the test fails.

    with Pooled(size="256M", opts="cache_size=64M") as p:
        m = embfs.Mount(p.mnt)

or a test class derived from PooledCase (one pool for the class: self.m).
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", os.path.join(TOP, "build"))
# The start of every file name a test makes in /dev/shm or /tmp: "embfs-",
# then, under tests/run.sh, its run's tag and a dot (the runner's leftover
# check looks at its own run's files only).
PREFIX = "embfs-" + (os.environ["EMBFS_TEST_RUN"] + "." if os.environ.get("EMBFS_TEST_RUN") else "")


def mounted(mnt):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def wait_for(cond, secs, what):
    end = time.monotonic() + secs
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"not within {secs} s: {what}")
        time.sleep(0.02)


class Pooled:
    def __init__(self, size="256M", opts=None, tables=(), snapshots=True, base=None, env=None):
        """env: variables added to the daemon's environment (LD_PRELOAD of a shim)."""
        self.size, self.opts, self.tables, self.base = size, opts, tables, base
        self.env = dict(os.environ, **env) if env else None
        self.proc = None

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix=PREFIX + "pytest.", dir=self.base)
        self.pool = os.path.join(self.dir, "pool.embfs")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        try:
            args = [os.path.join(BUILD, "mkfs.embfs"), "-s", self.size, "-L", "pytest"]
            for t in self.tables:
                args += ["-t", t]
            subprocess.run(args + [self.pool], check=True, stdout=subprocess.DEVNULL)
            self.mount()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def mount(self):
        cmd = [os.path.join(BUILD, "embfs"), "-f"]
        if self.opts:
            cmd += ["-o", self.opts]
        # appended: a daemon killed and mounted again keeps its log
        self.log = open(os.path.join(self.dir, "daemon.log"), "a")
        self.log.write(f"--- {' '.join(cmd)} {self.pool} (at {time.monotonic():.3f})\n")
        self.log.flush()
        self.proc = subprocess.Popen(cmd + [self.pool, self.mnt], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env)

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"embfs exited with {self.proc.returncode}: {self.daemon_log()}")
            return mounted(self.mnt)
        wait_for(up, 30, f"mount of {self.mnt}")

    def daemon_log(self, n=2000):
        """The last n characters of the daemons' log (every mount's, in order)."""
        try:
            with open(os.path.join(self.dir, "daemon.log")) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def unmount(self):
        if self.proc is None:
            return
        emb = sys.modules.get("embfs")
        try:
            if emb is not None:
                emb.close_all()  # our own fds would keep the mount busy
        finally:
            self._stop()

    def _stop(self):
        """Unmount and reap the daemon (also when closing our fds failed)."""
        if mounted(self.mnt):
            r = subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL)
            if r.returncode:
                subprocess.run(["fusermount3", "-uz", self.mnt], stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        rc, self.proc = self.proc.returncode, None
        self.log.close()
        if rc != 0:
            raise RuntimeError(f"embfs exited with {rc}: {self.daemon_log()}")

    def __exit__(self, *exc):
        try:
            self.unmount()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class PooledCase(unittest.TestCase):
    """Test cases sharing one fresh pool, mounted for the class (size, opts)."""
    size = "512M"
    opts = "cache_size=32M"

    @classmethod
    def setUpClass(cls):
        import embfs
        cls.pool = Pooled(size=cls.size, opts=cls.opts)
        cls.pool.__enter__()
        cls.m = embfs.Mount(cls.pool.mnt)

    @classmethod
    def tearDownClass(cls):
        cls.pool.__exit__(None, None, None)

    def gone(self, name):
        """Table NAME removed if it is there; NAME."""
        import embfs
        try:
            self.m.remove(name)
        except embfs.EmbfsError:
            pass
        return name
