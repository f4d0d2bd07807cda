"""Restores and rollbacks are all or nothing across a crash, and refuse
changes while they run.

Each round puts the mount in the same "before" state (rows rewritten and
punched since snapshot s, a table made since, one unlinked since), starts a
rollback (or a one-table restore) in a thread, SIGKILLs the daemon after a
random delay within the time one takes, mounts the pool again and checks
that the mount is exactly "before" or exactly "after" (every table as
snapshot s holds it) -- never a mix.  Delays draw from EMBFS_SEED (printed;
set it to replay).
"""
import errno
import hashlib
import os
import random
import signal
import subprocess
import threading
import time
import unittest

import numpy as np

import embfs
from mountutil import Pooled, mounted

SEED = int(os.environ.get("EMBFS_SEED") or random.SystemRandom().randrange(1 << 32))
print(f"test_restore_crash: seed {SEED} (replay: EMBFS_SEED={SEED})", flush=True)

N = 60000      # rows of a.emb (dim 64 f32: 256-byte rows)
ROUNDS = 6


def digest(m):
    """{table: (dim, dtype, mode, size, sha256 of bytes, stored ids' sha)} of the live mount."""
    out = {}
    for name in m.tables():
        t = m.table(name)
        st = os.stat(t.path)
        h = hashlib.sha256()
        with open(t.path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                h.update(b)
        ids = np.fromiter(t.stored_ids(), dtype=np.uint64)
        out[name] = (t.dim, t.dtype_name, st.st_mode & 0o777, st.st_size, h.hexdigest(),
                     hashlib.sha256(ids.tobytes()).hexdigest())
    return out


class TestRestoreCrash(unittest.TestCase):
    def setUp(self):
        self.rng = random.Random(SEED)
        # on tmpfs where there is one: a punch or a restore's commit is an
        # msync, an fsync of a disk file (a SIGKILL loses nothing of either)
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.p = Pooled(size="512M", opts="cache_size=16M", base=shm)
        self.p.__enter__()
        self.m = embfs.Mount(self.p.mnt)

    def tearDown(self):
        self.p.__exit__(None, None, None)

    def kill_and_remount(self):
        embfs.close_all()
        self.p.proc.send_signal(signal.SIGKILL)
        self.p.proc.wait()
        self.p.proc = None
        self.p.log.close()
        r = subprocess.run(["fusermount3", "-u", self.p.mnt], stderr=subprocess.DEVNULL)
        if r.returncode or mounted(self.p.mnt):
            subprocess.run(["fusermount3", "-uz", self.p.mnt], stderr=subprocess.DEVNULL)
        self.p.mount()
        self.m = embfs.Mount(self.p.mnt)

    def base(self):
        """Tables a (rows 0..N), b and keep; snapshot s."""
        m = self.m
        a = m.create("a.emb", 64)
        ids = np.arange(N)
        a.scatter(ids, np.repeat(ids[:, None].astype(np.float32), 64, axis=1))
        m.create("b.emb", 8, "f16").scatter([3, 70], np.full((2, 8), 2, np.float16))
        m.create("keep.emb", 4).scatter([5], np.ones((1, 4), np.float32))
        m.snapshot("s")
        m.sync()

    def make_before(self):
        """The changes since s, the same every round whatever state it starts from."""
        m = self.m
        a = m.table("a.emb")
        ids = np.arange(0, N, 3)
        a.scatter(ids, np.full((len(ids), 64), -1, np.float32))
        a.punch(np.arange(1000, 3000))
        a.punch(np.arange(1, N, 2500))
        if "b.emb" in m.tables():
            m.remove("b.emb")
        if "c.emb" not in m.tables():
            m.create("c.emb", 4)
        m.table("c.emb").scatter([1, 2], np.ones((2, 4), np.float32))
        m.sync()

    def crash_rounds(self, request, only=None):
        self.base()
        self.make_before()
        before = digest(self.m)
        t0 = time.monotonic()
        request(self.m)
        took = time.monotonic() - t0
        after = digest(self.m)
        if only:
            before, after = {only: before[only]}, {only: after[only]}
        self.assertNotEqual(before, after)
        seen = {"before": 0, "after": 0}
        recovered = 0
        for r in range(ROUNDS):
            self.make_before()
            self.assertEqual(self.sel(digest(self.m), only), before)
            delay = self.rng.uniform(0, took * 1.3)
            done = []

            def go():
                try:
                    request(embfs.Mount(self.p.mnt))
                    done.append("ok")
                except OSError as e:
                    done.append(e.errno)
            th = threading.Thread(target=go)
            th.start()
            time.sleep(delay)
            self.kill_and_remount()
            th.join(timeout=30)
            got = self.sel(digest(self.m), only)
            state = "before" if got == before else "after" if got == after else None
            print(f"  round {r}: killed after {delay * 1e3:.1f} ms of {took * 1e3:.1f}: {state}"
                  f" (request: {done[0] if done else '?'})", flush=True)
            self.assertIsNotNone(state, f"round {r} (seed {SEED}): a mix of before and after")
            seen[state] += 1
            st = self.m.stats()
            self.assertEqual(st["restore.pending"], 0)
            recovered += st["restore.recovered"]
        print(f"  {seen}, {recovered} finished at mount", flush=True)

    @staticmethod
    def sel(d, only):
        return {only: d.get(only)} if only else d

    def test_rollback_crash(self):
        self.crash_rounds(lambda m: m.rollback("s"))

    def test_restore_crash(self):
        self.crash_rounds(lambda m: m.restore("s", "a.emb"), only="a.emb")

    def test_changes_refused_while_running(self):
        """Writes to the table a restore runs on get EBUSY; the restore
        wins, and after it writes go on."""
        self.base()
        self.make_before()
        m = self.m
        a = m.table("a.emb")
        keep = m.table("keep.emb")
        stop = threading.Event()
        errs = {"busy": 0, "ok": 0, "other": 0}

        def writer():
            w = embfs.Mount(self.p.mnt).table("a.emb")
            while not stop.is_set():
                try:
                    w.scatter([0], np.full((1, 64), 7, np.float32))
                    errs["ok"] += 1
                except OSError as e:
                    errs["busy" if e.errno == errno.EBUSY else "other"] += 1
        th = threading.Thread(target=writer)
        th.start()
        try:
            for _ in range(3):
                m.restore("s", "a.emb")
                keep.scatter([6], np.ones((1, 4), np.float32))  # other tables go on
        finally:
            stop.set()
            th.join()
        print(f"  writes during restores: {errs}", flush=True)
        self.assertEqual(errs["other"], 0)
        self.assertGreater(errs["busy"], 0)
        a.scatter([0], np.full((1, 64), 8, np.float32))
        self.assertEqual(a.gather([0])[0, 0], 8)


if __name__ == "__main__":
    unittest.main()
