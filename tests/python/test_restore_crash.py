"""Restores and rollbacks are all or nothing across a crash, and refuse
changes while they run.

Each round puts the mount in the same "before" state (rows rewritten and
punched since snapshot s, a table made since, one unlinked since), starts a
rollback (or a one-table restore) in a thread, SIGKILLs the daemon after a
random delay within the time one takes (every other round: around the
time its reply comes), mounts the pool again and checks
that the mount is exactly "before" or exactly "after" (every table as
snapshot s holds it) -- never a mix -- and "after" when the request was
acknowledged before the kill.  Delays draw from EMBFS_SEED (printed; set it
to replay); EMBFS_ROUNDS rounds per test (default 6).  A round that ends
neither before nor after prints, per table and field, how it differs from
each, which rows differ, and the daemons' log.

Table bytes are read with O_DIRECT: the state compared is the daemon's, not
pages the kernel may keep for a moment after a scatter (docs/files.md "SCATTER and
the kernel's page cache").  test_reads_after_restore checks that after a
restore or rollback returns, reads through the page cache and stat see it.
"""
import errno
import hashlib
import mmap
import os
import random
import signal
import subprocess
import threading
import time
import unittest

import numpy as np

import embfs
from mountutil import BUILD, Pooled, mounted

SEED = int(os.environ.get("EMBFS_SEED") or random.SystemRandom().randrange(1 << 32))
print(f"test_restore_crash: seed {SEED} (replay: EMBFS_SEED={SEED})", flush=True)

N = 60000      # rows of a.emb (dim 64 f32: 256-byte rows)
ROUNDS = int(os.environ.get("EMBFS_ROUNDS") or 6)
FIELDS = ("dim", "dtype", "mode", "size", "bytes", "ids")
# test_reads_after_restore: the daemon's page-cache invalidations each wait
# this long first (build/shim/slowinval.so)
SLOWINVAL = os.path.join(BUILD, "shim", "slowinval.so")
INVAL_DELAY_MS = 1000


def read_direct(path):
    """The file's bytes read with O_DIRECT (from the daemon, never the page cache)."""
    buf = mmap.mmap(-1, 1 << 20)  # page-aligned
    out = bytearray()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    try:
        while True:
            n = os.readv(fd, [buf])
            if not n:
                break
            out += buf[:n]
    finally:
        os.close(fd)
        buf.close()
    return bytes(out)


def read_cached(path):
    with open(path, "rb") as f:
        return f.read()


def digest(m, keep=None):
    """{table: (dim, dtype, mode, size, sha256 of bytes, stored ids' sha)} of the
    live mount; keep (a dict), if given, gets {table: (bytes, ids, row size)}."""
    out = {}
    for name in m.tables():
        t = m.table(name)
        st = os.stat(t.path)
        data = read_direct(t.path)
        ids = np.fromiter(t.stored_ids(), dtype=np.uint64)
        out[name] = (t.dim, t.dtype_name, st.st_mode & 0o777, st.st_size, hashlib.sha256(data).hexdigest(),
                     hashlib.sha256(ids.tobytes()).hexdigest())
        if keep is not None:
            keep[name] = (data, ids, t.row_size)
    return out


def rows_differing(x, y, rs):
    """Row ids whose bytes differ between x and y (up to the longer one)."""
    n = max(len(x), len(y))
    a = np.zeros(n, np.uint8)
    b = np.zeros(n, np.uint8)
    a[:len(x)] = np.frombuffer(x, np.uint8)
    b[:len(y)] = np.frombuffer(y, np.uint8)
    pad = -n % rs
    a, b = np.pad(a, (0, pad)), np.pad(b, (0, pad))
    return np.nonzero((a != b).reshape(-1, rs).any(axis=1))[0]


def explain(got, gk, refs):
    """Lines saying, per table and field, how state `got` (raw data gk)
    differs from each reference (name, digest, raw data), and for bytes
    and ids which rows."""
    out = []
    for rname, ref, rk in refs:
        out.append(f"against {rname}:")
        for t in sorted(set(got) | set(ref)):
            if t not in got or t not in ref:
                out.append(f"  {t}: {'missing' if t not in got else 'extra'} (a table {rname} "
                           f"{'has' if t not in got else 'does not have'})")
                continue
            for f, g, r in zip(FIELDS, got[t], ref[t]):
                if g == r:
                    continue
                line = f"  {t}.{f}: {g!r:.20} vs {r!r:.20}"
                if f == "bytes":
                    d = rows_differing(gk[t][0], rk[t][0], gk[t][2])
                    line += f" -- {len(d)} rows differ: {d[:8].tolist()}{' ...' if len(d) > 8 else ''}"
                elif f == "ids":
                    gi, ri = gk[t][1], rk[t][1]
                    more, less = np.setdiff1d(gi, ri), np.setdiff1d(ri, gi)
                    line += (f" -- {len(more)} stored only here {more[:8].tolist()}, "
                             f"{len(less)} only there {less[:8].tolist()}")
                out.append(line)
    return out


class TestRestoreCrash(unittest.TestCase):
    def setUp(self):
        print(f"  seed {SEED} (replay: EMBFS_SEED={SEED}), {ROUNDS} rounds", flush=True)
        self.rng = random.Random(SEED)
        # on tmpfs where there is one: a punch or a restore's commit is an
        # msync, an fsync of a disk file (a SIGKILL loses nothing of either);
        # EMBFS_TEST_DIR puts the pool elsewhere (on disk)
        base = os.environ.get("EMBFS_TEST_DIR") or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        env = None
        if self._testMethodName == "test_reads_after_restore":
            if not os.path.exists(SLOWINVAL):
                self.skipTest(f"{SLOWINVAL} not built")
            # a sanitizer build's runtime must come first in the library
            # list; the shim is not instrumented, so let it be second
            asan = os.environ.get("ASAN_OPTIONS")
            env = {"LD_PRELOAD": SLOWINVAL, "EMBFS_INVAL_DELAY_MS": str(INVAL_DELAY_MS),
                   "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}
        self.p = Pooled(size="512M", opts="cache_size=16M", base=base, env=env)
        self.p.__enter__()
        self.m = embfs.Mount(self.p.mnt)

    def tearDown(self):
        self.p.__exit__(None, None, None)

    def kill_and_remount(self):
        """SIGKILL the daemon, mount the pool again; when the kill was sent."""
        embfs.close_all()
        t_kill = time.monotonic()
        self.p.proc.send_signal(signal.SIGKILL)
        self.p.proc.wait()
        self.p.proc = None
        self.p.log.close()
        r = subprocess.run(["fusermount3", "-u", self.p.mnt], stderr=subprocess.DEVNULL)
        if r.returncode or mounted(self.p.mnt):
            subprocess.run(["fusermount3", "-uz", self.p.mnt], stderr=subprocess.DEVNULL)
        self.p.mount()
        self.m = embfs.Mount(self.p.mnt)
        return t_kill

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
        bk, ak = {}, {}
        before = digest(self.m, bk)
        t0 = time.monotonic()
        request(self.m)
        took = time.monotonic() - t0
        after = digest(self.m, ak)
        if only:
            before, after = {only: before[only]}, {only: after[only]}
        self.assertNotEqual(before, after)
        seen = {"before": 0, "after": 0}
        recovered = 0
        for r in range(ROUNDS):
            self.make_before()
            self.assertEqual(self.sel(digest(self.m), only), before, f"round {r} (seed {SEED}): not before")
            # half the kills anywhere in the request, half around its reply
            delay = self.rng.uniform(0, took * 1.3) if r % 2 == 0 else took * self.rng.uniform(0.8, 1.2)
            done = []

            def go():
                try:
                    request(embfs.Mount(self.p.mnt))
                    done.append(("ok", time.monotonic()))
                except OSError as e:
                    done.append((errno.errorcode.get(e.errno, e.errno), time.monotonic()))
            t_start = time.monotonic()
            th = threading.Thread(target=go)
            th.start()
            time.sleep(delay)
            t_kill = self.kill_and_remount()
            th.join(timeout=30)
            gk = {}
            got = self.sel(digest(self.m, gk), only)
            state = "before" if got == before else "after" if got == after else None
            if done:
                what, t_done = done[0]
                reply = f"{what}, {(t_done - t_kill) * 1e3:+.1f} ms from the kill"
                acked = what == "ok" and t_done < t_kill
            else:
                reply, acked = "none within 30 s", False
            print(f"  round {r}: killed after {(t_kill - t_start) * 1e3:.1f} ms (drew {delay * 1e3:.1f}) of "
                  f"{took * 1e3:.1f}: {state} (request: {reply})", flush=True)
            if state is None or (acked and state != "after"):
                # the runner keeps the end of the output: the message ends with the round
                why = ["daemon log (both mounts):", "  " + self.p.daemon_log(1500).strip().replace("\n", "\n  ")]
                try:
                    with open(os.path.join(self.p.mnt, ".embfs", "restore")) as f:
                        why.append(f".embfs/restore now: {f.read().strip()!r}")
                except OSError as e:
                    why.append(f".embfs/restore: {e}")
                why += explain(got, gk, [("before", before, bk), ("after", after, ak)])
                why.append(f"round {r}: {state or 'neither before nor after'}"
                           f"{', though acknowledged before the kill' if state else ''} (request: {reply}; "
                           f"seed {SEED}, replay: EMBFS_SEED={SEED})")
                self.fail("\n".join(why))
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

    def test_reads_after_restore(self):
        """Once a rollback or restore returns, reads through the kernel's page
        cache and stat see the snapshot's rows, size and mode, though the
        kernel held pages and attributes of the tables from before and the
        daemon's invalidations each take INVAL_DELAY_MS (the shim; the
        rollback sends three, within the daemon's 5 s bound).  The
        issue 25 finding: the restore queued its invalidation and replied
        without waiting for it, so a digest taken right after a rollback
        (test_rollback_crash's "after") could read the old bytes of a.emb
        with the new ids, and a round that ended "after" then matched
        neither."""
        self.base()
        snap = os.path.join(self.p.mnt, ".snapshots", "s")
        for what, request, names in (("rollback", lambda m: m.rollback("s"), ("a.emb", "b.emb", "keep.emb")),
                                     ("restore", lambda m: m.restore("s", "a.emb"), ("a.emb",))):
            self.make_before()
            # mounted again: no invalidation of make_before's scatters is
            # still queued (it would drop the pages whenever it came)
            self.p.unmount()
            self.p.mount()
            m = self.m = embfs.Mount(self.p.mnt)
            a = m.table("a.emb")
            # the mode changed since s too (not the size: the kernel drops
            # the pages of a file it sees change size)
            os.chmod(a.path, 0o600)
            for name in m.tables():               # pages and attributes in the kernel
                read_cached(m.table(name).path)
                os.stat(m.table(name).path)       # after the read (its atime)
            paths = {name: os.path.join(self.p.mnt, name) for name in names}
            t0 = time.monotonic()
            request(m)
            took = time.monotonic() - t0
            # first, before a listing (READDIRPLUS) refreshes attributes and
            # the kernel drops pages of a file whose size or mtime changed
            seen = {name: (os.stat(path), read_cached(path)) for name, path in paths.items()}
            for name in names:
                spath = os.path.join(snap, name)
                (st, got), ss = seen[name], os.stat(spath)
                self.assertEqual((st.st_mode & 0o7777, st.st_size), (ss.st_mode & 0o7777, ss.st_size),
                                 f"{what} (returned after {took * 1e3:.0f} ms): stat of {name}: mode and size")
                want = read_direct(spath)
                self.assertEqual(read_direct(paths[name]), want, f"{what}: {name} read with O_DIRECT")
                if got != want:
                    d = rows_differing(got, want, m.table(name).row_size)
                    self.fail(f"{what} (returned after {took * 1e3:.0f} ms): {name} read through the page "
                              f"cache: {len(d)} rows are not the snapshot's, e.g. {d[:8].tolist()}")
            if what == "rollback":
                self.assertEqual(sorted(m.tables()), sorted(names))
            print(f"  {what}: returned after {took * 1e3:.0f} ms, reads see it", flush=True)

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
