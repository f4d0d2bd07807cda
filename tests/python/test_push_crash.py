"""Pushes across a SIGKILL of the daemon: every row is before or after each
push (never torn), and pushes an fsync acknowledged survive (issue 27).

Table p.emb: N rows of DIM f32 columns, pushed with SGD, lr 1 and gradient
-1 in every column, so a row that k pushes included holds k in every column
(exact in f32); a torn row would show unequal columns.  Each round a child
process (fork) pushes batches (random subsets of the N rows, drawn from
the seed, the round and the push's number) in a loop and reports over a
pipe, in records of 17 bytes (atomic on a pipe): push k started (before its
request is sent), push k returned, and an fsync of the table that returned
(covering every push that had returned when it began).  fsyncs are either
the child's own after some pushes, or a thread of the child's that fsyncs
over and over while the pushes go on.  The parent SIGKILLs the daemon (by
its PID) once K pushes started, after a short random delay or at once when
an fsync is reported (or SOFT_CAP s into the round, on a slow machine or
pool); the child's calls then fail, each after the kill: ENOTCONN,
ECONNABORTED, or EIO (the kernel's answer to a request it was copying to
the daemon when the daemon died: a push is up to half a MiB; about one
round in a hundred sees it).  The parent reaps the child, mounts the pool again and
gathers every row: its columns are all equal, at least what the pushes up
to the last reported fsync made it, at most what every push started made
it.  The next round pushes on from what the crash left.  The mount options
change with the round: a row cache holding every row (written back at
fsync only), the same with a 20 ms flusher (rows written back while pushes
update them), and a cache smaller than the table (rows evicted and read
back while pushes update them).  After the rounds, a clean unmount and
mount find the same rows and pool.recovered 0.  The pool is on /dev/shm
where it can be (EMBFS_TEST_DIR: elsewhere).

Randomness (batches, K, delays, modes) draws from EMBFS_SEED (printed; set
it to replay the same draws); EMBFS_ROUNDS rounds (default 12).
"""
import errno
import os
import random
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
import embfs  # noqa: E402
from mountutil import Pooled, mounted  # noqa: E402

SEED = int(os.environ.get("EMBFS_SEED") or random.SystemRandom().randrange(1 << 32))
print(f"test_push_crash: seed {SEED} (replay: EMBFS_SEED={SEED})", flush=True)

ROUNDS = int(os.environ.get("EMBFS_ROUNDS") or 12)
N = 4096          # rows of p.emb
DIM = 64          # f32 columns: 256-byte rows
BATCH = (200, 2000)
NAME = "p.emb"
# per round (r % 3): every row in the cache; a flusher; a cache of 1/4 of the table
OPTS = ("cache_size=16M", "cache_size=16M,dirty_age_ms=20", "cache_size=256K")
# a report: kind, number, time.  S k: push k starts; D k: push k returned;
# F k: an fsync that began after push k returned returned; E: a call failed
# (number: errno | OP_* << 16 | the push in flight or last returned << 24,
# time: time.monotonic_ns() when it failed).  17 bytes: atomic on a pipe.
REC = struct.Struct("<cQQ")
OP_PUSH, OP_FSYNC, OP_SYNCER = 0, 1, 2
OPS = ("push", "fsync", "fsync thread's fsync")
# what a call in flight or made after the kill gets (EIO: see above)
FAILED_BY_KILL = (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO)
SOFT_CAP = 3.0     # s: a round's kill comes by then, whatever K is
MAX_PUSHES = 20000  # a child never killed stops here (the test then fails)


def batch_ids(rnd, k):
    """Row ids of push k (1, 2, ...) of round rnd: distinct, sorted."""
    g = np.random.default_rng([SEED, rnd, k])
    return np.sort(g.choice(N, int(g.integers(BATCH[0], BATCH[1] + 1)), replace=False))


def counts(rnd, upto):
    """How many of pushes 1..upto of round rnd include each row."""
    c = np.zeros(N, np.int64)
    for k in range(1, upto + 1):
        c[batch_ids(rnd, k)] += 1
    return c


def pusher(mnt, rnd, sync_mode, sync_seed, wfd):
    """The child: push until a request fails, reporting on wfd.  Exits 3
    when stopped by an error (its errno reported), 4 if never stopped."""
    def put(kind, n, t=0):
        os.write(wfd, REC.pack(kind, n, t))

    def failed(e, op, k):
        put(b"E", (e.errno or 0) | op << 16 | k << 24, time.monotonic_ns())

    status = 4
    try:
        rng = random.Random(sync_seed)
        t = embfs.Mount(mnt).table(NAME)
        fd = os.open(t.path, os.O_RDONLY | os.O_CLOEXEC)
        g = -np.ones((BATCH[1], DIM), np.float32)
        acked = [0]
        stop = threading.Event()
        errs = []
        k = 0

        def syncer():
            try:
                while not stop.is_set():
                    a = acked[0]
                    os.fsync(fd)
                    put(b"F", a)
                    time.sleep(rng.uniform(0, 0.005))
            except OSError as e:
                failed(e, OP_SYNCER, acked[0])
                errs.append(e.errno)
        th = None
        if sync_mode == "thread":
            th = threading.Thread(target=syncer, daemon=True)
            th.start()
        op = OP_PUSH
        try:
            for k in range(1, MAX_PUSHES + 1):
                ids = batch_ids(rnd, k)
                put(b"S", k)
                op = OP_PUSH
                t.push(ids, g[:len(ids)], "sgd", lr=1.0)
                acked[0] = k
                put(b"D", k)
                if sync_mode == "inline" and rng.random() < 0.2:
                    op = OP_FSYNC
                    os.fsync(fd)
                    put(b"F", k)
        except OSError as e:
            failed(e, op, k)
            errs.append(e.errno)
        stop.set()
        if th is not None:
            th.join(10)
        if errs:
            status = 3
    except BaseException as e:  # anything else: say so, the parent fails
        try:
            os.write(2, f"pusher: {e!r}\n".encode())
        except OSError:
            pass
        status = 5
    os._exit(status)


class TestPushCrash(unittest.TestCase):
    def setUp(self):
        print(f"  seed {SEED} (replay: EMBFS_SEED={SEED}), {ROUNDS} rounds", flush=True)
        self.rng = random.Random(SEED)
        # on tmpfs where there is one (as test_restore_crash: a SIGKILL loses
        # nothing of a file's pages, and its msyncs are cheap); EMBFS_TEST_DIR
        # puts the pool elsewhere (on disk: rounds with the small cache are
        # slow, hundreds of ms a push)
        base = os.environ.get("EMBFS_TEST_DIR") or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        self.p = Pooled(size="256M", opts=OPTS[0], base=base)
        self.p.__enter__()

    def tearDown(self):
        embfs.close_all()
        self.p.__exit__(None, None, None)

    def kill_daemon(self):
        """SIGKILL the daemon (its PID), drop the dead mount."""
        self.p.proc.send_signal(signal.SIGKILL)
        self.p.proc.wait()
        self.p.proc = None
        self.p.log.close()
        r = subprocess.run(["fusermount3", "-u", self.p.mnt], stderr=subprocess.DEVNULL)
        if r.returncode or mounted(self.p.mnt):
            subprocess.run(["fusermount3", "-uz", self.p.mnt], stderr=subprocess.DEVNULL)

    def rows(self):
        """Every row of p.emb (n x DIM f32) and which are stored."""
        return embfs.Mount(self.p.mnt).table(NAME).gather(np.arange(N), present=True)

    def check(self, what, rows, lo, hi):
        """rows: each row's columns equal, an integer in [lo, hi]; its values."""
        v = rows[:, 0]
        torn = np.flatnonzero((rows != v[:, None]).any(axis=1))
        if len(torn):
            i = torn[0]
            self.fail(f"{what}: {len(torn)} torn rows, e.g. row {i}: columns "
                      f"{np.unique(rows[i]).tolist()[:8]} (want all equal, in [{lo[i]}, {hi[i]}]); "
                      f"rows {torn[:8].tolist()}\n{self.log()}(seed {SEED}, replay: EMBFS_SEED={SEED})")
        vi = v.astype(np.int64)
        self.assertTrue((vi == v).all(), f"{what}: a row holds a non-integer (seed {SEED})")
        bad = np.flatnonzero((vi < lo) | (vi > hi))
        if len(bad):
            i = bad[0]
            below = int((vi < lo).sum())
            self.fail(f"{what}: {len(bad)} rows out of bounds ({below} below the last fsync's counts, "
                      f"{len(bad) - below} above the pushes started), e.g. row {i} holds {vi[i]}, want "
                      f"[{lo[i]}, {hi[i]}]; rows {bad[:8].tolist()}\n{self.log()}"
                      f"(seed {SEED}, replay: EMBFS_SEED={SEED})")
        return vi

    def log(self):
        return "daemon log (every mount):\n  " + self.p.daemon_log(1500).strip().replace("\n", "\n  ") + "\n"

    def one_round(self, rnd, base):
        """Push, kill, remount, check; the rows the crash left."""
        rng = self.rng
        sync_mode = ("inline", "thread")[rnd % 2]
        kill_at = rng.randrange(5, 250)           # pushes started
        on_sync = rng.random() < 1 / 3           # kill as an fsync is reported
        delay = rng.uniform(0, 0.004)
        sync_seed = rng.randrange(1 << 32)
        embfs.close_all()
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # never returns to the test
            try:
                os.close(rfd)
                pusher(self.p.mnt, rnd, sync_mode, sync_seed, wfd)
            finally:
                os._exit(5)
        os.close(wfd)
        seen = {b"S": 0, b"D": 0, b"F": 0}
        fails = []  # (errno, op, push, time)
        n_sync = 0
        buf = b""

        def take(data):
            nonlocal buf, n_sync
            buf += data
            got = []
            while len(buf) >= REC.size:
                kind, n, tm = REC.unpack_from(buf)
                buf = buf[REC.size:]
                if kind == b"E":
                    fails.append((n & 0xFFFF, (n >> 16) & 0xFF, n >> 24, tm))
                    continue
                if kind == b"F":
                    n_sync += 1
                    n = max(n, seen[b"F"])
                seen[kind] = n
                got.append(kind)
            return got

        t0 = time.monotonic()
        killed = None
        child = None
        try:
            capped = False
            while killed is None:
                now = time.monotonic()
                if now > t0 + 30:
                    self.fail(f"round {rnd}: no push started within 30 s ({seen}; seed {SEED})")
                r, _, _ = select.select([rfd], [], [], 0.05)
                kinds = []
                if r:
                    data = os.read(rfd, 1 << 16)
                    if not data:
                        break
                    kinds = take(data)
                # a slow machine or pool (EMBFS_TEST_DIR on disk): kill by SOFT_CAP s at the latest
                capped = seen[b"S"] > 0 and now > t0 + SOFT_CAP
                if not capped:
                    if seen[b"S"] < kill_at or (on_sync and b"F" not in kinds):
                        continue
                    if not on_sync:
                        time.sleep(delay)
                killed = time.monotonic()
                t_kill = time.monotonic_ns()
                self.kill_daemon()
            # the child stops on its error; everything it wrote is in the pipe
            while True:
                r, _, _ = select.select([rfd], [], [], 30)
                if not r:
                    self.fail(f"round {rnd}: the pusher did not stop within 30 s of the kill (seed {SEED})")
                data = os.read(rfd, 1 << 16)
                if not data:
                    break
                take(data)
            _, st = os.waitpid(pid, 0)
            child = os.waitstatus_to_exitcode(st)
        finally:
            os.close(rfd)
            if child is None:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except OSError:
                    pass
        self.assertIsNotNone(killed, f"round {rnd}: the pusher stopped before the kill ({seen}, exit {child})")
        self.assertEqual(child, 3, f"round {rnd}: pusher exit {child}, want 3 (stopped by the crash); {seen}")
        why = ", ".join(f"{OPS[op]} {errno.errorcode.get(e, e)} (push {k}, {(tm - t_kill) / 1e6:+.1f} ms from the kill)"
                        for e, op, k, tm in fails)
        early = [f for f in fails if f[3] < t_kill]
        odd = [f for f in fails if f[0] not in FAILED_BY_KILL]
        if early or odd:
            what = "a call failed before the kill" if early else "a call failed with an errno a kill does not explain"
            self.fail(f"round {rnd}: {what}: {why}\n{self.log()}(seed {SEED}, replay: EMBFS_SEED={SEED})")

        opts = self.p.opts
        self.p.opts = OPTS[(rnd + 1) % len(OPTS)]  # the next round's
        self.p.mount()
        m = embfs.Mount(self.p.mnt)
        rec = m.stats()["pool.recovered"]
        lo = base + counts(rnd, seen[b"F"])
        hi = base + counts(rnd, seen[b"S"])
        rows, present = self.rows()
        what = f"round {rnd} (-o {opts}, {sync_mode} fsyncs)"
        got = self.check(what, rows, lo, hi)
        self.assertEqual(rec, 1, f"{what}: pool.recovered is {rec} after SIGKILL, want 1")
        # rows only go up from 0 (absent): stored exactly when pushed
        self.assertTrue((present == (got > 0)).all(), f"{what}: rows stored without a push, or pushed and "
                        f"absent: {np.flatnonzero(present != (got > 0))[:8].tolist()} (seed {SEED})")
        moved = int((got > base).sum())
        flight = ""
        if seen[b"S"] > seen[b"D"]:  # the push the kill interrupted: its rows kept (some, all or none)
            ids = batch_ids(rnd, seen[b"S"])
            flight = f", {int((got[ids] == hi[ids]).sum())} of its {len(ids)} rows after it"
        how = "at the time cap" if capped else "at an fsync" if on_sync else f"+{delay * 1e3:.1f} ms"
        print(f"  round {rnd}: -o {opts}, {sync_mode} fsyncs, killed {(killed - t0) * 1e3:.0f} ms in ({how}): "
              f"{seen[b'S']} pushes started, {seen[b'D']} returned{flight}; {n_sync} fsyncs, the last "
              f"covering {seen[b'F']}; child: {why}; rows changed {moved}, ahead of "
              f"the last fsync {int((got > lo).sum())} of {N}", flush=True)
        embfs.close_all()
        return got

    def test_push_crash(self):
        t0 = time.monotonic()
        m = embfs.Mount(self.p.mnt)
        m.create(NAME, DIM, "f32")
        embfs.close_all()
        base = np.zeros(N, np.int64)
        for rnd in range(ROUNDS):  # each mounts the pool again with the next one's options
            base = self.one_round(rnd, base)
        # a clean unmount writes back what the last mount holds: the same rows
        self.p.unmount()
        self.p.opts = OPTS[0]
        self.p.mount()
        rows, _ = self.rows()
        got = self.check("after a clean unmount and mount", rows, base, base)
        self.assertEqual(embfs.Mount(self.p.mnt).stats()["pool.recovered"], 0)
        print(f"  {ROUNDS} rounds in {time.monotonic() - t0:.1f} s; rows pushed {int(got.sum())} times in all, "
              f"{int((got > 0).sum())} of {N} rows stored (seed {SEED})", flush=True)


if __name__ == "__main__":
    unittest.main()
