"""Tests of the embfs Python package (python/embfs) on a real mount.

Run by tests/e2e/python.sh (make test):
    PYTHONPATH=python /usr/bin/python3 -m unittest discover -s tests/python -v
Randomized cases draw from EMBFS_SEED (printed; set it to replay).
"""
import errno
import os
import subprocess
import random
import threading
import unittest
import zlib

import numpy as np

import embfs
from mountutil import PREFIX, Pooled, PooledCase

SEED = int(os.environ.get("EMBFS_SEED") or random.SystemRandom().randrange(1 << 32))
print(f"test_embfs: seed {SEED} (replay: EMBFS_SEED={SEED})", flush=True)


class MountCase(PooledCase):
    def setUp(self):
        self.rng = np.random.default_rng([SEED, zlib.crc32(self.id().encode())])

    def fresh(self, name, dim=8, dtype="f32"):
        return self.m.create(self.gone(name), dim, dtype)


class TestRows(MountCase):
    def test_roundtrip_duplicates_last_wins(self):
        t = self.fresh("rt.emb", 16)
        ids = self.rng.integers(0, 5000, 3000)
        rows = self.rng.standard_normal((3000, 16)).astype(np.float32)
        t.scatter(ids, rows)
        want = {}
        for i, r in zip(ids, rows):
            want[int(i)] = r
        u = np.array(sorted(want))
        got = t.gather(u)
        self.assertEqual(got.shape, (len(u), 16))
        np.testing.assert_array_equal(got, np.stack([want[i] for i in u]))
        # a 2-D id array gives rows of its shape
        g2 = t.gather(u[:20].reshape(4, 5))
        self.assertEqual(g2.shape, (4, 5, 16))
        np.testing.assert_array_equal(g2.reshape(20, 16), got[:20])
        # and the same bytes through the file
        with open(t.path, "rb") as f:
            f.seek(int(u[3]) * t.row_size)
            self.assertEqual(f.read(t.row_size), got[3].tobytes())

    def test_size_after_a_growing_scatter(self):
        # a scatter or push past the end returns only once the kernel has
        # dropped the table's cached size: a stat right after sees the new
        # one (it saw the old one about half the time)
        t = self.fresh("grow.emb", 4)
        for k in range(60):
            os.stat(t.path)  # the kernel holds the size now
            row = 1000 + 7 * k
            if k % 2:
                t.push([row], np.ones((1, 4), np.float32), optimizer="sgd", lr=0.5)
            else:
                t.scatter([row], np.ones((1, 4), np.float32))
            self.assertEqual(os.stat(t.path).st_size, (row + 1) * t.row_size, f"step {k}")
            self.assertEqual(list(t.stored_ids(row)), [row])

    def test_presence(self):
        t = self.fresh("pres.emb", 4)
        t.scatter([1, 3], np.ones((2, 4), np.float32))
        t.scatter([5], np.zeros((1, 4), np.float32))  # a stored row of zeros
        rows, p = t.gather([0, 1, 2, 3, 5, 10 ** 9], present=True)
        self.assertEqual(p.tolist(), [False, True, False, True, True, False])
        self.assertEqual(rows[4].tolist(), [0.0] * 4)
        t.truncate(4)  # rows 4.. dropped
        self.assertEqual(t.present([3, 5]).tolist(), [True, False])
        self.assertEqual(list(t.stored_ids()), [1, 3])

    def test_presence_many_rows_bit_order(self):
        t = self.fresh("bits.emb", 2)
        ids = np.arange(0, 2000)
        stored = self.rng.random(2000) < 0.3
        t.scatter(ids[stored], np.ones((stored.sum(), 2), np.float32))
        order = self.rng.permutation(2000)
        p = t.present(ids[order])
        np.testing.assert_array_equal(p, stored[order])

    def test_dtypes(self):
        for name, npd in embfs.DTYPES.items():
            t = self.fresh(f"dt-{name}.emb", 3, name)
            self.assertEqual(t.dtype, npd)
            self.assertEqual(t.row_size, 3 * npd.itemsize)
            rows = (self.rng.integers(-100, 100, (4, 3))).astype(npd) if name not in ("u8",) else \
                self.rng.integers(0, 200, (4, 3)).astype(npd)
            t.scatter([0, 7, 9, 2], rows)
            np.testing.assert_array_equal(t.gather([0, 7, 9, 2]), rows)

    def test_bf16(self):
        t = self.fresh("bf.emb", 4, "bf16")
        x = np.array([[1.0, -2.5, 3.140625, 1e-3]], np.float32)
        t.scatter([3], embfs.f32_to_bf16(x))
        back = embfs.bf16_to_f32(t.gather([3]))
        np.testing.assert_allclose(back, x, rtol=1e-2)
        self.assertEqual(back[0, :3].tolist(), [1.0, -2.5, 3.140625])

    def test_chunking_past_request_limits(self):
        # 70,000 ids (> 65,536 per request) and 80 MiB of 4 KiB rows (> 64 MiB)
        t = self.fresh("chunk.emb", 2)
        ids = self.rng.permutation(200000)[:70000]
        rows = np.stack([ids, -ids], 1).astype(np.float32)
        t.scatter(ids, rows)
        np.testing.assert_array_equal(t.gather(ids[::-1]), rows[::-1])
        big = self.fresh("chunkbig.emb", 1024)
        ids = np.arange(20000) * 7
        rows = np.repeat(ids.astype(np.float32)[:, None], 1024, 1)
        big.scatter(ids, rows)
        got = big.gather(ids)
        np.testing.assert_array_equal(got[:, 0], ids)
        np.testing.assert_array_equal(got[:, 1023], ids)
        st = self.m.stats()
        self.assertGreaterEqual(st["batch.gathers"], 3)

    def test_out_buffers(self):
        t = self.fresh("out.emb", 8)
        rows = self.rng.standard_normal((10, 8)).astype(np.float32)
        t.scatter(np.arange(10), rows)
        out = np.empty((10, 8), np.float32)
        r = t.gather(np.arange(10), out=out)
        self.assertIs(r, out)
        np.testing.assert_array_equal(out, rows)
        buf = t.empty(10)
        self.assertEqual(buf.ctypes.data % 4096, 0)
        self.assertIs(t.gather(np.arange(10), out=buf), buf)
        np.testing.assert_array_equal(buf, rows)
        with self.assertRaises(TypeError):
            t.gather(np.arange(10), out=np.empty((10, 8), np.float64))
        with self.assertRaises(ValueError):
            t.gather(np.arange(10), out=np.empty((9, 8), np.float32))

    def test_bad_input_changes_nothing(self):
        t = self.fresh("bad.emb", 4)
        t.scatter([0, 1], np.ones((2, 4), np.float32))
        before = t.gather([0, 1, 2])
        cases = [
            (TypeError, lambda: t.scatter([2], np.ones((1, 4), np.float64))),
            (ValueError, lambda: t.scatter([2, 3], np.ones((3, 4), np.float32))),
            (ValueError, lambda: t.scatter([2], np.ones((1, 5), np.float32))),
            (ValueError, lambda: t.scatter([-1], np.ones((1, 4), np.float32))),
            (ValueError, lambda: t.scatter([t.max_row + 1], np.ones((1, 4), np.float32))),
            (ValueError, lambda: t.gather([2 ** 62])),
            (TypeError, lambda: t.gather([1.5])),
            (ValueError, lambda: t.gather([0, -5])),
        ]
        for exc, fn in cases:
            with self.assertRaises(exc) as cm:
                fn()
            self.assertIsInstance(cm.exception, embfs.EmbfsError)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            self.assertIn("bad.emb", str(cm.exception))
        np.testing.assert_array_equal(t.gather([0, 1, 2]), before)
        with self.assertRaises(embfs.EmbfsError) as cm:
            self.m.create("bad.emb", 5)
        self.assertEqual(cm.exception.errno, errno.EEXIST)
        with self.assertRaises(ValueError):
            self.m.create("x.emb", 4, "f128")
        with self.assertRaises(embfs.EmbfsError) as cm:
            self.m.table("nosuch.emb")
        self.assertEqual(cm.exception.errno, errno.ENOENT)

    def test_removed_and_recreated(self):
        t = self.fresh("gone.emb", 4)
        t.scatter([1], np.ones((1, 4), np.float32))
        other = self.m.table("gone.emb")
        self.m.remove("gone.emb")
        with self.assertRaises(embfs.EmbfsError) as cm:
            t.gather([1])
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertIn("gone.emb", str(cm.exception))
        self.assertIn("removed", str(cm.exception))
        # made again with the same geometry: the handle follows the name
        self.m.create("gone.emb", 4)
        self.assertEqual(other.present([1]).tolist(), [False])
        other.scatter([2], np.ones((1, 4), np.float32))
        # made again with another geometry: a clear error, nothing written
        self.m.remove("gone.emb")
        self.m.create("gone.emb", 6)
        with self.assertRaises(embfs.EmbfsError) as cm:
            other.scatter([2], np.ones((1, 4), np.float32))
        self.assertEqual(cm.exception.errno, errno.ESTALE)
        self.assertIn("geometry", str(cm.exception))
        self.assertEqual(list(self.m.table("gone.emb").stored_ids()), [])

    def test_removed_while_open_elsewhere(self):
        # an fd of the table keeps it alive, but a request by inode gets ESTALE
        t = self.fresh("orphan.emb", 4)
        t.scatter([1], np.ones((1, 4), np.float32))
        fd = os.open(t.path, os.O_RDONLY)
        try:
            self.m.remove("orphan.emb")
            with self.assertRaises(embfs.EmbfsError) as cm:
                t.gather([1])
            self.assertEqual(cm.exception.errno, errno.ENOENT)
        finally:
            os.close(fd)

    def test_threads_own_fds(self):
        t = self.fresh("thr.emb", 8)
        errs, fds = [], set()

        def work(k):
            try:
                rng = np.random.default_rng([SEED, k])
                for _ in range(30):
                    ids = rng.choice(np.arange(k * 1000, k * 1000 + 1000), 200, replace=False)
                    rows = np.repeat(ids.astype(np.float32)[:, None], 8, 1)
                    t.scatter(ids, rows)
                    g = t.gather(ids)
                    np.testing.assert_array_equal(g, rows)
                fds.add(self.m._conn().fd)
            except Exception as e:  # reported below
                errs.append(e)
        th = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        self.assertEqual(errs, [])
        self.assertEqual(len(fds), 4)

    def test_fork(self):
        t = self.fresh("fork.emb", 4)
        t.scatter([0], np.full((1, 4), 7, np.float32))
        parent_fd = self.m._conn().fd
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # the child opens its own fd; the parent's is not used
                g = t.gather([0])
                t.scatter([1], g + 1)
                code = 0 if self.m._conn().fd >= 0 and g[0, 0] == 7 else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(self.m._conn().fd, parent_fd)
        self.assertEqual(t.gather([1])[0].tolist(), [8.0] * 4)

    def test_prefetch(self):
        t = self.fresh("pf.emb", 8)
        t.scatter(np.arange(500), np.ones((500, 8), np.float32))
        self.m.sync()
        s0 = self.m.stats()
        t.prefetch(np.arange(500))
        t.gather(np.arange(500))
        s1 = self.m.stats()
        self.assertEqual(s1["batch.prefetches"] - s0["batch.prefetches"], 1)
        self.assertEqual(s1["prefetch.rows"] - s0["prefetch.rows"], 500)

    def test_unique(self):
        ids = self.rng.integers(0, 50, 300)
        u, inv = embfs.unique(ids)
        np.testing.assert_array_equal(u[inv], ids)
        self.assertTrue((np.diff(u) > 0).all())


class TestSnapshots(MountCase):
    def test_snapshot_blocks_and_cp(self):
        # a snapshot's table counts the rows it holds that were still only
        # in the cache when it was taken (st_blocks), so cp takes a dense
        # one for dense and copies it with copy_file_range, in the daemon
        m = self.m
        t = m.create("sb.emb", 64)
        t.scatter(np.arange(4000), np.ones((4000, 64), np.float32))
        m.snapshot("sb")
        self.addCleanup(lambda: "sb" in m.snapshots() and m.drop("sb"))
        src = os.path.join(m.path, ".snapshots", "sb", "sb.emb")
        st = os.stat(src)
        self.assertEqual((st.st_size, st.st_blocks), (4000 * 256, 4000 * 256 // 512))
        before = m.stats()["fs.copy_rows"]
        dst = os.path.join(m.path, self.gone("sbc.emb"))
        subprocess.run(["cp", src, dst], check=True)
        self.assertEqual(m.stats()["fs.copy_rows"] - before, 4000)
        c = m.table("sbc.emb")
        self.assertEqual((c.dim, c.dtype_name), (64, "f32"))
        np.testing.assert_array_equal(c.gather(np.arange(4000)), np.ones((4000, 64), np.float32))

    def test_snapshot_cycle(self):
        m = self.m
        t = m.create("s.emb", 4)
        t.scatter([1, 2], np.ones((2, 4), np.float32))
        m.set_batch(m.batch + 10)
        b = m.batch
        m.set_batch(b)  # the same: fine
        m.snapshot("a")
        self.assertGreater(m.batch, b)
        with self.assertRaises(embfs.EmbfsError) as cm:
            m.set_batch(b - 1)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertIn("never goes back", str(cm.exception))
        t.scatter([2, 3], np.full((2, 4), 2, np.float32))
        m.snapshot("b")
        self.assertEqual([n for n in m.snapshots() if n in ("a", "b")], ["a", "b"])  # oldest first
        sa = m.table("s.emb", snapshot="a")
        rows, p = sa.gather([1, 2, 3], present=True)
        self.assertEqual(p.tolist(), [True, True, False])
        self.assertEqual(rows[:, 0].tolist(), [1, 1, 0])
        self.assertEqual(embfs.Table(os.path.join(m.path, ".snapshots", "b", "s.emb")).gather([2])[0, 0], 2)
        with self.assertRaises(embfs.EmbfsError) as cm:
            sa.scatter([1], np.ones((1, 4), np.float32))
        self.assertEqual(cm.exception.errno, errno.EROFS)
        with self.assertRaises(embfs.EmbfsError) as cm:
            m.snapshot("a")
        self.assertEqual(cm.exception.errno, errno.EEXIST)
        # as_array maps the snapshot
        arr = sa.as_array()
        self.assertEqual(arr.shape, (sa.nrows, 4))
        np.testing.assert_array_equal(np.asarray(arr[1:3]), rows[:2])
        del arr
        # restore: the live table becomes the snapshot's
        t.copy_from(sa)
        self.assertEqual(t.present([1, 2, 3]).tolist(), [True, True, False])
        self.assertEqual(t.gather([2])[0, 0], 1)
        m.drop("a")
        self.assertNotIn("a", m.snapshots())
        self.assertIn("b", m.snapshots())
        with self.assertRaises(embfs.EmbfsError):
            sa.gather([1])
        m.sync()


    def test_copy_sparse_far_rows(self):
        # rows 2^40 apart: the copy walks what is stored, not the file's length
        m = self.m
        t = m.create("far.emb", 4)
        far = [3, 1 << 40, (1 << 47) + 7]  # ids up to 2^48 - 2
        t.scatter(far, np.arange(12, dtype=np.float32).reshape(3, 4))
        dense = list(range(1000, 1100))  # a run of 100 rows: copied in the daemon
        t.scatter(dense, np.ones((100, 4), np.float32))
        far = sorted(far + dense)
        u = m.create("far2.emb", 4)
        u.scatter([5], np.ones((1, 4), np.float32))
        c0 = m.stats()["fs.copy_rows"]
        self.assertEqual(u.copy_from(t), 103)
        self.assertEqual(m.stats()["fs.copy_rows"] - c0, 100)  # the run of 100 in the daemon
        self.assertEqual(list(u.stored_ids()), far)
        np.testing.assert_array_equal(u.gather(far), t.gather(far))
        self.assertEqual(os.stat(u.path).st_size, os.stat(t.path).st_size)


    def test_copy_file_range_takes_geometry_and_mode(self):
        # what cp -a of a snapshot's table relies on (docs/snapshots.md)
        m = self.m
        t = m.create("geo.emb", 4, "f16")
        os.chmod(t.path, 0o640)
        t.scatter([0, 9], np.ones((2, 4), np.float16))
        m.snapshot("geo")
        snap = os.path.join(m.path, ".snapshots", "geo", "geo.emb")
        self.assertEqual(os.stat(snap).st_mode & 0o7777, 0o640)  # its table's mode
        dst = os.path.join(m.path, "geo2.emb")
        fi = os.open(snap, os.O_RDONLY)
        fo = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o600)  # the mount's default geometry
        try:
            self.assertEqual(os.copy_file_range(fi, fo, 1 << 20, 0, 0), os.fstat(fi).st_size)
        finally:
            os.close(fi)
            os.close(fo)
        g = embfs.Table(dst)
        self.assertEqual((g.dim, g.dtype_name), (4, "f16"))
        self.assertEqual(list(g.stored_ids()), [0, 9])
        # into a table with rows: where the source has none, they go
        h = m.create("geo3.emb", 4, "f16")
        h.scatter([1, 9, 10, 40], np.full((4, 4), 3, np.float16))
        fi = os.open(snap, os.O_RDONLY)
        fo = os.open(h.path, os.O_WRONLY)
        try:
            self.assertEqual(os.copy_file_range(fi, fo, 1 << 20, 0, 0), os.fstat(fi).st_size)
        finally:
            os.close(fi)
            os.close(fo)
        # part of a row: copied if the source stores it, else nothing is stored
        fi = os.open(snap, os.O_RDONLY)
        fo = os.open(h.path, os.O_WRONLY)
        try:
            self.assertEqual(os.copy_file_range(fi, fo, 6, 5 * 8, 50 * 8), 6)
            self.assertEqual(os.copy_file_range(fi, fo, 6, 9 * 8, 51 * 8), 6)
        finally:
            os.close(fi)
            os.close(fo)
        self.assertEqual(h.present([50, 51]).tolist(), [False, True])
        self.assertEqual(h.gather([51])[0].tolist(), [1, 1, 1, 0])
        h.truncate(50)
        # row 1 punched; rows 10 and 40 lie past the source's 10 rows: untouched
        self.assertEqual(list(h.stored_ids()), [0, 9, 10, 40])
        np.testing.assert_array_equal(h.gather([0, 9, 10]), np.array([[1] * 4, [1] * 4, [3] * 4], np.float16))
        # setting the geometry it has is fine with rows; another cuts the
        # bytes again (the same bytes, rows of the new size)
        os.setxattr(dst, "user.embfs.dim", b"4")
        os.setxattr(dst, "user.embfs.row_size", b"8")
        with open(dst, "rb") as f:
            before = f.read()
        os.setxattr(dst, "user.embfs.dim", b"2")
        with open(dst, "rb") as f:
            self.assertEqual(f.read(), before)
        os.setxattr(dst, "user.embfs.dim", b"4")
        with self.assertRaises(OSError) as cm:
            os.setxattr(dst, "user.embfs.row_size", b"16")
        self.assertEqual(cm.exception.errno, errno.EPERM)
        m.drop("geo")


    def test_restore_in_place(self):
        m = self.m
        t = m.create("rs.emb", 4)
        ids = np.arange(0, 3000)
        t.scatter(ids, np.repeat(ids.astype(np.float32)[:, None], 4, 1))
        t.scatter([10 ** 9], np.ones((1, 4), np.float32))  # a far row
        m.snapshot("rs")
        want_ids = list(t.stored_ids())
        want = t.gather(want_ids)
        size = os.stat(t.path).st_size
        # after the snapshot: rows changed, deleted, added (near and far), grown
        t.scatter([5, 2999, 4000, 10 ** 10], np.full((4, 4), -1, np.float32))
        t.scatter(np.arange(100, 200), np.zeros((100, 4), np.float32))
        os.truncate(t.path, 2500 * t.row_size)  # rows 2500.. and the far ones gone
        t.truncate(2500)
        t.scatter([2600, 3500], np.ones((2, 4), np.float32))
        r = m.restore("rs", "rs.emb")
        self.assertEqual(list(t.stored_ids()), want_ids)
        np.testing.assert_array_equal(t.gather(want_ids), want)
        self.assertEqual(os.stat(t.path).st_size, size)
        # only what differed was written: 5, 100..199, 2500..2999 (2600 too), the far row
        self.assertEqual(r["rows_rewritten"], 1 + 100 + 500 + 1)
        self.assertEqual(r["rows_deleted"], 1)  # 3500 (4000 and 10^10 went with the truncate)
        self.assertEqual(r["walk"], "since")
        self.assertLess(r["rows_examined"], 1000)  # the changed ones, not the table
        again = m.restore("rs", "rs.emb")  # idempotent: nothing to do
        self.assertEqual((again["rows_rewritten"], again["rows_deleted"]), (0, 0))
        # bad requests: a clear errno, nothing changed
        for snap, name, err in (("nosuch", "rs.emb", errno.ENOENT), ("rs", "nosuch.emb", errno.ENOENT)):
            with self.assertRaises(embfs.EmbfsError) as cm:
                m.restore(snap, name)
            self.assertEqual(cm.exception.errno, err)
        p = os.path.join(m.path, ".embfs", "restore")
        for bad in (b"\n", b"rs rs.emb extra\n", b" rs.emb\n", b"rs a/b\n", b"rs  rs.emb\n"):
            fd = os.open(p, os.O_WRONLY)
            try:
                with self.assertRaises(OSError) as cm:
                    os.write(fd, bad)
                self.assertEqual(cm.exception.errno, errno.EINVAL)
            finally:
                os.close(fd)
        np.testing.assert_array_equal(t.gather(want_ids), want)
        m.drop("rs")

    def test_restore_geometry_and_recreated(self):
        m = self.m
        t = m.create("rg.emb", 4)
        t.scatter([1, 2], np.ones((2, 4), np.float32))
        m.snapshot("rg")
        m.remove("rg.emb")
        u = m.create("rg.emb", 8)  # made again, another geometry
        u.scatter([3], np.ones((1, 8), np.float32))
        m.restore("rg", "rg.emb")
        v = m.table("rg.emb")
        self.assertEqual((v.dim, list(v.stored_ids())), (4, [1, 2]))
        m.drop("rg")


    def test_delta_chain(self):
        # deltas A->B->C applied to a copy of A give B, then C, exactly
        m = self.m
        rng = np.random.default_rng([SEED, 11])
        t = m.create("dl.emb", 4)
        t.scatter(np.arange(2000), rng.standard_normal((2000, 4)).astype(np.float32))
        m.snapshot("dA")
        for s_ in ("dA", "dB", "dC"):
            self.addCleanup(lambda n=s_: n in m.snapshots() and m.drop(n))
        ch = rng.choice(np.arange(10, 2000), 50, replace=False)  # not the rows punched below
        t.scatter(ch, rng.standard_normal((50, 4)).astype(np.float32))
        t.scatter([5000], np.ones((1, 4), np.float32))  # a new row, the file grows
        t.punch([7, 8, 9])
        t.scatter([ch[0]], m.table("dl.emb", snapshot="dA").gather([ch[0]]))  # changed back
        m.snapshot("dB")
        t.truncate(1500)  # rows 1500.. and 5000 go
        t.scatter([3], np.zeros((1, 4), np.float32))
        m.snapshot("dC")
        changed, deleted, size = m.delta("dA", "dB", "dl.emb")
        self.assertEqual(sorted(deleted.tolist()), [7, 8, 9])
        self.assertEqual(set(changed.tolist()), set(ch.tolist()) | {5000})  # ch[0]: a new version
        self.assertEqual(size, 5001 * 16)
        d = self.pool.dir
        m.export_delta("dA", "dB", "dl.emb", os.path.join(d, "ab.npz"))
        m.export_delta("dB", "dC", "dl.emb", os.path.join(d, "bc.npz"))
        r = m.create("dl2.emb", 4)
        r.copy_from(m.table("dl.emb", snapshot="dA"))
        for step, snap in (("ab", "dB"), ("bc", "dC")):
            r.apply_delta(os.path.join(d, f"{step}.npz"))
            want = m.table("dl.emb", snapshot=snap)
            self.assertEqual(list(r.stored_ids()), list(want.stored_ids()))
            ids = np.array(list(want.stored_ids()))
            np.testing.assert_array_equal(r.gather(ids), want.gather(ids))
            self.assertEqual(os.stat(r.path).st_size, os.stat(want.path).st_size)
        # since dC, against the live table
        t.scatter([11], np.ones((1, 4), np.float32))
        c2, d2, _ = m.delta("dC", None, "dl.emb")
        self.assertEqual((c2.tolist(), d2.tolist()), ([11], []))
        for bad, err in ((("nosuch", "dB"), errno.ENOENT), (("dB", "dA"), errno.EINVAL)):
            with self.assertRaises(embfs.EmbfsError) as cm:
                m.delta(*bad, "dl.emb")
            self.assertEqual(cm.exception.errno, err)

    def test_delta_views(self):
        # .snapshots/A/.delta/B: sparse views of the changed rows, id lists;
        # cp -r --sparse=always ships them, apply_delta of the copies (and of
        # the views on the mount) gives B, then C, exactly
        m = self.m
        rng = np.random.default_rng([SEED, 12])
        n, rs = 20000, 64
        t = m.create("dv.emb", 16)
        t.scatter(np.arange(n), rng.standard_normal((n, 16)).astype(np.float32))
        m.create("dvgone.emb", 4).scatter([1], np.ones((1, 4), np.float32))
        m.snapshot("vA")
        for s_ in ("vA", "vB", "vC"):
            self.addCleanup(lambda k=s_: k in m.snapshots() and m.drop(k))
        ch = rng.choice(np.arange(100, n), 200, replace=False)
        t.scatter(ch, rng.standard_normal((200, 16)).astype(np.float32))
        t.scatter(ch[:3], np.zeros((3, 16), np.float32))  # changed to zeros: still changed
        t.scatter([n + 50], np.ones((1, 16), np.float32))  # grows
        t.punch(np.arange(10, 20))
        m.remove("dvgone.emb")
        m.create("dvnew.emb", 4).scatter([2], np.ones((1, 4), np.float32))
        m.snapshot("vB")
        t.truncate(n - 1000)
        t.scatter([5], np.full((1, 16), 7, np.float32))
        m.snapshot("vC")
        d = m.delta_path("vA", "vB")
        later = set(os.listdir(os.path.dirname(d)))
        self.assertTrue({".live", "vB", "vC"} <= later and "vA" not in later)
        self.assertNotIn(".delta", os.listdir(os.path.join(m.path, ".snapshots", "vA")))
        names = os.listdir(d)
        self.assertTrue({".changed", ".deleted", "dv.emb"} <= set(names))
        self.assertFalse({"dvgone.emb", "dvnew.emb"} & set(names))  # a table A or B lacks: none
        view = os.path.join(d, "dv.emb")
        st = os.stat(view)
        want_ch = np.sort(np.r_[ch, n + 50])
        self.assertEqual(st.st_size, (n + 51) * rs)
        self.assertEqual(st.st_blocks, (len(want_ch) * rs + 511) // 512)
        chg = np.fromfile(os.path.join(d, ".changed", "dv.emb"), dtype="<u8")
        np.testing.assert_array_equal(chg, want_ch)
        np.testing.assert_array_equal(np.fromfile(os.path.join(d, ".deleted", "dv.emb"), dtype="<u8"),
                                      np.arange(10, 20))
        # SEEK_DATA walks exactly the changed rows
        fd = os.open(view, os.O_RDONLY)
        try:
            runs = list(embfs._data_runs(fd, st.st_size))
        finally:
            os.close(fd)
        got = np.concatenate([np.arange(lo // rs, hi // rs) for lo, hi in runs])
        np.testing.assert_array_equal(got, want_ch)
        # bytes: B's rows where changed, zeros elsewhere
        whole = np.fromfile(view, dtype=np.float32).reshape(-1, 16)
        vb = m.table("dv.emb", snapshot="vB")
        np.testing.assert_array_equal(whole[want_ch], vb.gather(want_ch))
        mask = np.ones(len(whole), bool)
        mask[want_ch] = False
        self.assertFalse(whole[mask].any())
        for bad, err in ((os.O_WRONLY, errno.EROFS), (os.O_RDWR, errno.EROFS)):
            with self.assertRaises(OSError) as cm:
                os.open(view, bad)
            self.assertEqual(cm.exception.errno, err)
        with self.assertRaises(FileNotFoundError):  # B must be later than A
            os.stat(os.path.join(m.delta_path("vB", "vA"), "dv.emb"))
        # shipped with cp, applied to a copy of A: B, then C
        out = os.path.join(self.pool.dir, "ship")
        # (this pool's other tables include ones of 2^40 rows, more than a
        # file on ext4 can hold: dv.emb's files only)
        for sub in ("", ".changed", ".deleted"):
            os.makedirs(os.path.join(out + "-ab", sub), exist_ok=True)
            r_ = subprocess.run(["cp", "--sparse=always", os.path.join(d, sub, "dv.emb"),
                                 os.path.join(out + "-ab", sub, "dv.emb")], capture_output=True, text=True)
            self.assertEqual(r_.returncode, 0, r_.stderr)
        r = m.create("dv2.emb", 16)
        r.copy_from(m.table("dv.emb", snapshot="vA"))
        for step, snap in ((out + "-ab", "vB"), (m.delta_path("vB", "vC"), "vC")):
            r.apply_delta(step, "dv.emb")
            want = m.table("dv.emb", snapshot=snap)
            self.assertEqual(list(r.stored_ids()), list(want.stored_ids()))
            ids = np.fromiter(want.stored_ids(), dtype=np.int64)
            np.testing.assert_array_equal(r.gather(ids), want.gather(ids))
            self.assertEqual(os.stat(r.path).st_size, os.stat(want.path).st_size)
        # against the live tables: as of the open
        t.scatter([11, 12], np.ones((2, 16), np.float32))
        live = m.delta_path("vC")
        np.testing.assert_array_equal(np.fromfile(os.path.join(live, ".changed", "dv.emb"), dtype="<u8"),
                                      [11, 12])
        self.assertEqual(os.stat(os.path.join(live, "dv.emb")).st_blocks, (2 * rs + 511) // 512)

class TestRollback(MountCase):
    """The whole mount back to a snapshot (its own pool: it unlinks tables)."""
    size = "128M"

    def test_rollback(self):
        m = self.m
        a = m.create("ra.emb", 4)
        b = m.create("rb.emb", 8, "f16")
        a.scatter(np.arange(100), np.ones((100, 4), np.float32))
        b.scatter([3, 70], np.full((2, 8), 2, np.float16))
        os.chmod(b.path, 0o600)
        m.snapshot("r")
        a.scatter(np.arange(50), np.zeros((50, 4), np.float32))
        m.remove("rb.emb")
        m.create("rc.emb", 4).scatter([1], np.ones((1, 4), np.float32))
        fd = os.open(a.path, os.O_RDONLY)  # an open file of a table: fine
        try:
            r = m.rollback("r")
        finally:
            os.close(fd)
        self.assertEqual((r["tables"], r["created"], r["unlinked"]), (2, 1, 1))
        self.assertEqual(m.tables(), ["ra.emb", "rb.emb"])
        np.testing.assert_array_equal(m.table("ra.emb").gather(np.arange(100)), np.ones((100, 4), np.float32))
        nb = m.table("rb.emb")
        self.assertEqual((nb.dim, nb.dtype_name, os.stat(nb.path).st_mode & 0o777), (8, "f16", 0o600))
        self.assertEqual(list(nb.stored_ids()), [3, 70])
        with self.assertRaises(embfs.EmbfsError) as cm:
            m.rollback("nosuch")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        again = m.rollback("r")
        self.assertEqual((again["rows_rewritten"], again["created"], again["unlinked"]), (0, 0, 0))


class TestNoCache(MountCase):
    """Without the row cache, presence comes from the store."""
    opts = "cache_size=0"
    size = "128M"

    def test_presence_store(self):
        t = self.m.create("nc.emb", 4)
        t.scatter([2, 9], np.ones((2, 4), np.float32))
        self.assertEqual(t.present([1, 2, 9, 100]).tolist(), [False, True, True, False])


    def test_restore_store_only(self):
        t = self.m.create("ncr.emb", 4)
        t.scatter(np.arange(50), np.ones((50, 4), np.float32))
        self.m.snapshot("ncr")
        t.scatter(np.arange(10, 20), np.zeros((10, 4), np.float32))
        r = self.m.restore("ncr", "ncr.emb")
        self.assertEqual(r["rows_rewritten"], 10)
        np.testing.assert_array_equal(t.gather(np.arange(50)), np.ones((50, 4), np.float32))


def wait_spilled(m, secs=60):
    """Until the spill tier holds rows in runs (the mover works in the background)."""
    import time
    end = time.monotonic() + secs
    while m.stats().get("spill.run_rows", 0) == 0:
        if time.monotonic() > end:
            raise TimeoutError("no row reached the spill runs")
        time.sleep(0.05)


class TestSpill(unittest.TestCase):
    """A restore over a table mostly on the spill device (sorted runs)."""

    def test_restore_spilled(self):
        rng = np.random.default_rng([SEED, 7])
        with Pooled(size="64M", opts=f"cache_size=2M,spill={self.sdir},spill_size=256M") as p:
            m = embfs.Mount(p.mnt)
            t = m.create("sp.emb", 16)
            n = 300000  # row versions past spill_high (30% of the pool): runs
            for k in range(0, n, 50000):
                ids = np.arange(k, k + 50000)
                t.scatter(ids, np.repeat(ids.astype(np.float32)[:, None], 16, 1))
            m.sync()
            wait_spilled(m)
            m.snapshot("sp")
            ch = np.unique(rng.integers(0, n, 3000))
            t.scatter(ch, np.full((len(ch), 16), -7, np.float32))
            m.sync()
            r = m.restore("sp", "sp.emb")
            self.assertEqual(r["rows_rewritten"], len(ch))
            self.assertEqual(r["walk"], "both")
            for k in range(0, n, 65536):
                ids = np.arange(k, min(k + 65536, n))
                got = t.gather(ids)
                np.testing.assert_array_equal(got[:, 0], ids.astype(np.float32))
                np.testing.assert_array_equal(got[:, 15], ids.astype(np.float32))
            embfs.close_all()

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.sdir = tempfile.mkdtemp(prefix=PREFIX + "pyspill.")

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.sdir, ignore_errors=True)


class TestConnClose(unittest.TestCase):
    def test_one_close_per_fd(self):
        """Threads closing one request fd at once (close_all against a
        thread's exit) close it once: no EBADF, no fd reused meanwhile
        closed.  Before the fix 3,000 rounds of 3 threads gave thousands of
        EBADF (make test's python part failed in a Collection's teardown)."""
        from embfs._conn import _Conn
        errs = []
        for _ in range(3000):
            c = _Conn(os.devnull)
            b = threading.Barrier(3)

            def close():
                b.wait()
                try:
                    c.close()
                except OSError as e:
                    errs.append(e)
            ts = [threading.Thread(target=close) for _ in range(3)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            self.assertEqual(c.fd, -1)
        self.assertEqual(errs, [])


class TestInit(unittest.TestCase):
    def test_deterministic_per_row(self):
        ini = embfs.Init.uniform(-0.5, 0.5, seed=3)
        a = ini.values([5, 9, 1 << 60], 8)
        b = ini.values([1 << 60, 5], 8)
        np.testing.assert_array_equal(a[[2, 0]], b)
        self.assertTrue((a >= -0.5).all() and (a < 0.5).all())
        self.assertFalse(np.array_equal(ini.values([5], 8), embfs.Init.uniform(-0.5, 0.5, seed=4).values([5], 8)))
        n = embfs.Init.normal(0, 1, seed=1, cols=6).values(np.arange(20000), 7)
        self.assertAlmostEqual(float(n[:, :6].mean()), 0, delta=0.02)
        self.assertAlmostEqual(float(n[:, :6].std()), 1, delta=0.02)
        self.assertEqual(n[:, 6].tolist(), [0.0] * 20000)

    def test_gather_init_fills_only_missing(self):
        with Pooled(size="64M", opts="cache_size=8M") as p:
            m = embfs.Mount(p.mnt)
            t = m.create("i.emb", 4)
            t.scatter([2], np.zeros((1, 4), np.float32))
            ini = embfs.Init.uniform(1, 2, seed=0)
            g = t.gather([1, 2, 3], init=ini)
            self.assertEqual(g[1].tolist(), [0.0] * 4)
            np.testing.assert_array_equal(g[[0, 2]], ini.values([1, 3], 4))


if __name__ == "__main__":
    unittest.main()
