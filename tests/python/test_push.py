"""Pushes (.embfs/rows PUSH): optimizers applied in the daemon.

Against torch.optim on a dense copy of the same table (SGD, Adagrad,
SparseAdam), row-wise Adagrad against its formula, f16/bf16 rows against
the same update rounded to the dtype, duplicates, the init of unseen rows,
processes pushing to the same rows at once (no update lost), and bad
requests refused whole with their errno.  Randomized cases print their
seed (EMBFS_SEED replays them)."""
import errno
import multiprocessing
import os
import random
import struct
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
import embfs  # noqa: E402
from embfs import _wire  # noqa: E402
from mountutil import PooledCase  # noqa: E402

try:
    import torch
except ImportError:  # torch is installed by make test's deps; say so if not
    torch = None


def seed_of(case):
    s = int(os.environ.get("EMBFS_SEED", random.randrange(1 << 31)))
    print(f"{case}: EMBFS_SEED={s}", flush=True)
    return s


def raw_push(table, ids, grads, optim=1, dim=None, step=0, lr=0.1, eps=1e-10, betas=(0.9, 0.999), wd=0.0,
             init_kind=0, count=None, total=None):
    """Send a PUSH request as bytes (no client checks): the write's OSError."""
    ids = np.asarray(ids, "<u8")
    grads = np.asarray(grads, "<f4")
    dim = grads.shape[1] if dim is None else dim
    params = _wire._PUSH_HDR.pack(optim, dim, step, lr, eps, betas[0], betas[1], wd, init_kind, 0xFFFFFFFF, 0,
                                  0.0, 0.0, 0.0)
    body = params + ids.tobytes() + grads.tobytes()
    n = len(ids) if count is None else count
    hdr = _wire._HDR.pack(b"EMBB", _wire._PUSH, table.ino, n, 0, total or _wire._HDR.size + len(body))
    fd = os.open(os.path.join(table.mount.path, ".embfs", "rows"), os.O_RDWR)
    try:
        os.pwrite(fd, hdr + body, 0)
    finally:
        os.close(fd)


class TestPushMath(PooledCase):
    size = "512M"
    opts = "cache_size=32M"

    def dense_case(self, name, optimizer, state_cols, make_opt, steps=6, n=300, d=8, batch=64):
        seed = seed_of(f"{name}")
        rng = np.random.default_rng(seed)
        init = embfs.Init.uniform(-0.5, 0.5, seed=seed, cols=d)
        t = self.m.create(self.gone(name), d + state_cols, "f32")
        ref = torch.nn.Parameter(torch.from_numpy(init.values(np.arange(n), d)))
        opt = make_opt([ref])
        for k in range(1, steps + 1):
            ids = rng.integers(0, n, batch)
            g = rng.standard_normal((batch, d)).astype(np.float32)
            t.push(ids, g, optimizer, lr=0.05, eps=1e-8, betas=(0.9, 0.999), step=k, init=init)
            ref.grad = torch.sparse_coo_tensor(torch.from_numpy(ids)[None, :], torch.from_numpy(g), (n, d))
            opt.step()
        got = t.gather(np.arange(n), init=init)[:, :d]
        want = ref.detach().numpy()
        err = np.abs(got - want).max()
        self.assertLess(err, 1e-6, f"{name}: largest difference {err} (EMBFS_SEED={seed})")
        return t, rng

    @unittest.skipIf(torch is None, "torch missing")
    def test_sgd_matches_torch(self):
        self.dense_case("p_sgd", "sgd", 0, lambda p: torch.optim.SGD(p, lr=0.05))

    @unittest.skipIf(torch is None, "torch missing")
    def test_adagrad_matches_torch(self):
        self.dense_case("p_adagrad", "adagrad", 8, lambda p: torch.optim.Adagrad(p, lr=0.05, eps=1e-8))

    @unittest.skipIf(torch is None, "torch missing")
    def test_adam_matches_torch(self):
        self.dense_case("p_adam", "adam", 16,
                        lambda p: torch.optim.SparseAdam(p, lr=0.05, betas=(0.9, 0.999), eps=1e-8))

    def test_rowwise_adagrad_formula(self):
        seed = seed_of("rowwise_adagrad")
        rng = np.random.default_rng(seed)
        d, n = 16, 100
        t = self.m.create(self.gone("p_rw"), d + 1, "f32")
        w = np.zeros((n, d + 1), np.float32)
        for _ in range(5):
            ids = rng.choice(n, 40, replace=False)
            g = rng.standard_normal((40, d)).astype(np.float32)
            t.push(ids, g, "rowwise_adagrad", lr=0.1, eps=1e-8)
            s = w[ids, d] + np.mean(g * g, axis=1, dtype=np.float32)
            w[ids, d] = s
            w[ids, :d] -= (np.float32(0.1) * g) / (np.sqrt(s) + np.float32(1e-8))[:, None]
        got = t.gather(np.arange(n))
        err = np.abs(got - w).max()
        self.assertLess(err, 1e-6, f"largest difference {err} (EMBFS_SEED={seed})")

    def test_weight_decay(self):
        t = self.m.create(self.gone("p_wd"), 4, "f32")
        t.scatter([7], np.array([[1, 2, 3, 4]], np.float32))
        t.push([7], np.ones((1, 4), np.float32), "sgd", lr=0.5, weight_decay=0.1)
        want = np.array([1, 2, 3, 4], np.float32) - np.float32(0.5) * (1 + np.float32(0.1) * np.array([1, 2, 3, 4],
                                                                                                       np.float32))
        np.testing.assert_allclose(t.gather([7])[0], want, rtol=1e-7)

    def low_precision(self, dtype, ulp):
        seed = seed_of(f"low_precision {dtype}")
        rng = np.random.default_rng(seed)
        d, n = 8, 64
        t = self.m.create(self.gone("p_" + dtype), d + 1, dtype)
        w = np.zeros((n, d + 1), np.float32)  # the reference, rounded to dtype after each step

        def rnd(a):
            return embfs.bf16_to_f32(embfs.f32_to_bf16(a)) if dtype == "bf16" else a.astype(np.float16).astype(
                np.float32)
        for _ in range(4):
            ids = rng.choice(n, 32, replace=False)
            g = rng.standard_normal((32, d)).astype(np.float32)
            t.push(ids, g, "rowwise_adagrad", lr=0.1, eps=1e-8)
            s = w[ids, d] + np.mean(g * g, axis=1, dtype=np.float32)
            w[ids, d] = s
            w[ids, :d] -= (np.float32(0.1) * g) / (np.sqrt(s) + np.float32(1e-8))[:, None]
            w = rnd(w)
        raw = t.gather(np.arange(n))
        got = embfs.bf16_to_f32(raw) if dtype == "bf16" else raw.astype(np.float32)
        # one rounding step of the dtype at most (a sum in another order)
        bad = np.abs(got - w) > ulp * np.maximum(np.abs(w), 1e-3)
        self.assertFalse(bad.any(), f"{dtype}: {got[bad][:4]} against {w[bad][:4]} (EMBFS_SEED={seed})")

    def test_f16_rows(self):
        self.low_precision("f16", 2.0 ** -10)

    def test_bf16_rows(self):
        self.low_precision("bf16", 2.0 ** -7)

    def test_duplicates_summed(self):
        a = self.m.create(self.gone("p_dup_a"), 3, "f32")
        b = self.m.create(self.gone("p_dup_b"), 3, "f32")
        g = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
        a.push([3, 5, 3], g, "rowwise_adagrad", lr=1.0)
        b.push([3, 5], np.array([[6, 8], [3, 4]], np.float32), "rowwise_adagrad", lr=1.0)
        np.testing.assert_array_equal(a.gather([3, 5]), b.gather([3, 5]))

    def test_init_of_unseen_rows(self):
        for init in (embfs.Init.uniform(-1, 1, seed=42, cols=5), embfs.Init.constant(0.25, cols=3, fill=1.5),
                     embfs.Init.normal(0, 0.1, seed=-7)):
            t = self.m.create(self.gone("p_init"), 6, "f32")
            ids = np.array([0, 9, 12345, 2 ** 40])
            t.push(ids, np.zeros((4, 6), np.float32), "sgd", lr=0.0, init=init)
            want = init.values(ids, 6)
            self.assertTrue(t.present(ids).all())
            np.testing.assert_allclose(t.gather(ids), want, rtol=1e-7, err_msg=repr(init))
            self.m.remove("p_init")

    def test_init_bits(self):
        """The daemon's uniform f32 init (8 columns at a time where the CPU
        has AVX-512) gives Init.values' bits, also past a multiple of 8 and
        for an Init of fewer columns than the row."""
        for init in (embfs.Init.uniform(-1.5, 0.7, seed=11), embfs.Init.uniform(-0.05, 0.05, seed=3, cols=13),
                     embfs.Init.uniform(2, 3, seed=5, cols=100, fill=0.5)):
            t = self.m.create(self.gone("p_bits"), 67, "f32")
            ids = np.array([0, 1, 7, 12345, 2 ** 40, 2 ** 47 + 3])
            np.testing.assert_array_equal(t.gather(ids, init=init), init.values(ids, 67), err_msg=repr(init))
            t.push(ids[:3], np.zeros((3, 67), np.float32), "sgd", lr=0.0, init=init)
            np.testing.assert_array_equal(t.gather(ids[:3]), init.values(ids[:3], 67), err_msg=repr(init))
            self.m.remove("p_bits")

    def test_stats(self):
        t = self.m.create(self.gone("p_stats"), 2, "f32")
        before = self.m.stats()
        t.push([1, 2, 3], np.ones((3, 2), np.float32))
        after = self.m.stats()
        self.assertEqual(after["batch.pushes"] - before["batch.pushes"], 1)
        self.assertEqual(after["batch.push_rows"] - before["batch.push_rows"], 3)


class TestTorchModules(PooledCase):
    """embfs.torch.EmbeddingBag + SGD / Adagrad / Adam (pushes) against
    torch.nn.EmbeddingBag(sparse=True) + torch.optim on the same data."""
    size = "256M"
    opts = "cache_size=16M"

    def case(self, name, optimizer, make_et, make_torch):
        import embfs.torch as et
        seed = seed_of(name)
        rng = np.random.default_rng(seed)
        n, d = 500, 8
        init = embfs.Init.uniform(-0.1, 0.1, seed=seed, cols=d)
        bag = et.EmbeddingBag(self.m, self.gone(name), d, mode="sum", optimizer=optimizer, init=init)
        ref = torch.nn.EmbeddingBag(n, d, mode="sum", sparse=True)
        with torch.no_grad():
            ref.weight.copy_(torch.from_numpy(init.values(np.arange(n), d)))
        opt, topt = make_et([bag]), make_torch(ref.parameters())
        for _ in range(6):
            ids = torch.from_numpy(rng.integers(0, n, (32, 4)))
            target = torch.from_numpy(rng.standard_normal((32, d)).astype(np.float32))
            for mod, o in ((bag, opt), (ref, topt)):
                ((mod(ids) - target) ** 2).sum().backward()
                o.step()
                o.zero_grad()
        got = bag.weights(np.arange(n)).numpy()
        err = np.abs(got - ref.weight.detach().numpy()).max()
        self.assertLess(err, 2e-6, f"{name}: largest difference {err} (EMBFS_SEED={seed})")

    @unittest.skipIf(torch is None, "torch missing")
    def test_sgd(self):
        import embfs.torch as et
        self.case("m_sgd", "sgd", lambda m: et.SGD(m, lr=0.01), lambda p: torch.optim.SGD(p, lr=0.01))

    @unittest.skipIf(torch is None, "torch missing")
    def test_adagrad(self):
        import embfs.torch as et
        self.case("m_adagrad", "exact_adagrad", lambda m: et.Adagrad(m, lr=0.05),
                  lambda p: torch.optim.Adagrad(p, lr=0.05))

    @unittest.skipIf(torch is None, "torch missing")
    def test_adam(self):
        import embfs.torch as et
        self.case("m_adam", "adam", lambda m: et.Adam(m, lr=0.01), lambda p: torch.optim.SparseAdam(p, lr=0.01))


class TestMulti(PooledCase):
    """Mount.multi: many tables in one MULTI request."""
    size = "256M"
    opts = "cache_size=16M"

    def tables(self, k=3, dim=5):
        return [self.m.create(self.gone(f"mt{i}"), dim, "f32") for i in range(k)]

    def test_gathers_equal_single_requests(self):
        seed = seed_of("multi gathers")
        rng = np.random.default_rng(seed)
        ts = self.tables()
        for t in ts:
            t.scatter(rng.choice(1000, 200, replace=False), rng.standard_normal((200, 5)).astype(np.float32))
        init = embfs.Init.uniform(-1, 1, seed=3)
        ids = [rng.integers(0, 1000, 300) for _ in ts]
        before = self.m.stats()["batch.multis"]
        got = self.m.multi(gathers=[(t, i, init) for t, i in zip(ts, ids)])
        self.assertEqual(self.m.stats()["batch.multis"], before + 1)
        for t, i, (rows, pres) in zip(ts, ids, got):
            want, wpres = t.gather(i, present=True, init=init)
            np.testing.assert_array_equal(rows, want, err_msg=f"EMBFS_SEED={seed}")
            np.testing.assert_array_equal(pres, wpres)
            np.testing.assert_array_equal(pres, t.present(i))

    def test_daemon_init_equals_client_init(self):
        t = self.tables(1, 7)[0]
        ids = np.array([0, 5, 77, 2 ** 33])
        for init in (embfs.Init.uniform(-2, 3, seed=11, cols=4), embfs.Init.normal(1, 0.5, seed=12),
                     embfs.Init.constant(0.5, fill=-1.0)):
            np.testing.assert_allclose(t.gather(ids, init=init), init.values(ids, 7), rtol=1e-7)
        # a callable that is not an Init still runs in this process
        np.testing.assert_array_equal(t.gather([1], init=lambda i, tb: np.full((len(i), 7), 9, np.float32)),
                                      np.full((1, 7), 9, np.float32))

    def test_gather_sees_push_of_same_call(self):
        ts = self.tables()
        g = np.ones((2, 5), np.float32)
        got = self.m.multi(pushes=[(t, [1, 2], g, {"lr": 0.5}) for t in ts],
                           gathers=[(t, [1, 2, 3], None) for t in ts])
        for rows, pres in got:
            np.testing.assert_array_equal(rows[:2], np.full((2, 5), -0.5, np.float32))
            np.testing.assert_array_equal(pres, [True, True, False])

    def test_out_arrays_and_no_bitmaps(self):
        # rows land in the caller's arrays (views of one), with and without
        # bitmaps, in one request and run apart; a wrong out is refused
        ts = self.tables(2, 4)
        ts[0].scatter([3], np.full((1, 4), 2, np.float32))
        init = embfs.Init.constant(0.25)
        for n, multis in ((3, 1), (70000, 0)):  # 70,000 ids: past a part's limit, run apart
            buf = np.full((2 * n, 4), 7, np.float32)
            ids = np.arange(n) + 2
            before = self.m.stats()["batch.multis"]
            for present in (True, False):
                got = self.m.multi(gathers=[(ts[0], ids, init, buf[:n]), (ts[1], ids, init, buf[n:])],
                                   present=present)
                self.assertTrue(np.shares_memory(got[0][0], buf) and np.shares_memory(got[1][0], buf))
                np.testing.assert_array_equal(buf[1], np.full(4, 2, np.float32))
                np.testing.assert_array_equal(buf[0], np.full(4, 0.25, np.float32))
                np.testing.assert_array_equal(buf[n:], np.full((n, 4), 0.25, np.float32))
                if present:
                    np.testing.assert_array_equal(got[0][1][:3], [False, True, False])
                else:
                    self.assertIsNone(got[0][1])
            self.assertEqual(self.m.stats()["batch.multis"] - before, 2 * multis)
        for bad in (np.zeros((3, 4), np.float64), np.zeros((2, 4), np.float32), np.zeros((4, 3), np.float32).T):
            with self.assertRaises(embfs.BadArgument):
                self.m.multi(gathers=[(ts[0], [1, 2, 3], None, bad)])

    def test_beyond_limits_runs_apart(self):
        ts = self.tables(2, 4)
        ids = np.arange(70000)
        got = self.m.multi(pushes=[(ts[0], ids, np.ones((70000, 4), np.float32), {"lr": 1.0})],
                           gathers=[(ts[0], ids[::7], None), (ts[1], ids[:5], None)])
        np.testing.assert_array_equal(got[0][0], np.full((10000, 4), -1, np.float32))
        self.assertFalse(got[1][1].any())

    def test_refused_whole(self):
        ts = self.tables()
        g = np.ones((2, 5), np.float32)
        bad = np.array([[1, 1, 1, 1, 1], [np.nan, 0, 0, 0, 0]], np.float32)
        with self.assertRaises(embfs.EmbfsError) as cm:
            self.m.multi(pushes=[(ts[0], [1, 2], g, {}), (ts[1], [1, 2], bad, {})])
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        with self.assertRaises(embfs.EmbfsError) as cm:
            self.m.multi(pushes=[(ts[0], [1, 2], g, {}), (ts[0], [3, 4], g, {})])  # a table twice
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        snap = "mt_snap"
        self.m.snapshot(snap)
        try:
            st = self.m.table(ts[2].name, snapshot=snap)
            with self.assertRaises(OSError) as cm:  # the client refuses it before the daemon would
                self.m.multi(pushes=[(ts[0], [1, 2], g, {}), (st, [1, 2], g, {})])
            self.assertEqual(cm.exception.errno, errno.EROFS)
            self.assertEqual(self.m.multi(gathers=[(st, [1], None)])[0][1].tolist(), [False])
        finally:
            self.m.drop(snap)
        for t in ts:
            self.assertFalse(t.present([1, 2, 3, 4]).any(), t)

    def test_raw_errnos(self):
        ts = self.tables(2)
        sub = _wire._SUB
        ids = np.array([1, 2], "<u8").tobytes()

        def send(parts, bodies, count=None, flags=0):
            body = b"".join(parts) + b"".join(bodies)
            hdr = _wire._HDR.pack(b"EMBB", _wire._MULTI, 0, len(parts) if count is None else count, flags,
                                  _wire._HDR.size + len(body))
            fd = os.open(os.path.join(self.m.path, ".embfs", "rows"), os.O_RDWR)
            try:
                with self.assertRaises(OSError) as cm:
                    os.pwrite(fd, hdr + body, 0)
                return cm.exception.errno
            finally:
                os.close(fd)
        g = sub.pack(ts[0].ino, _wire._GATHER, 2, 0, 0)
        self.assertEqual(send([g], [ids], flags=1), errno.EINVAL)              # flags on the header
        self.assertEqual(send([g, g], [ids, ids]), errno.EINVAL)               # a table twice
        self.assertEqual(send([sub.pack(123456789, _wire._GATHER, 2, 0, 0)], [ids]), errno.EINVAL)  # no table
        self.assertEqual(send([sub.pack(ts[0].ino, _wire._SCATTER, 2, 0, 0)], [ids]), errno.EINVAL)  # no scatter
        self.assertEqual(send([sub.pack(ts[0].ino, _wire._GATHER, 2, 0, 1)], [ids]), errno.EINVAL)  # reserved
        self.assertEqual(send([g], [ids + b"x"]), errno.EINVAL)                # trailing bytes
        self.assertEqual(send([g], [ids[:8]]), errno.EINVAL)                   # short


class TestCollection(PooledCase):
    """embfs.torch.Collection: one request a step for many tables."""
    size = "256M"
    opts = "cache_size=16M"

    def train(self, prefix, kind, steps=5, fuse=False, collection=True, seed=0, jagged=False, pipeline=False,
              dims=(4, 8, 6)):
        import embfs.torch as et
        rng = np.random.default_rng(seed)
        specs = [et.TableSpec(self.gone(f"{prefix}{i}"), d, init=embfs.Init.uniform(-0.1, 0.1, seed=i, cols=d))
                 for i, d in enumerate(dims)]
        if collection:
            mod = et.Collection(self.m, specs, optimizer=kind, fuse_push=fuse, pipeline=pipeline)
            mods = [mod]
        else:
            mods = [et.EmbeddingBag(self.m, s.name, s.embedding_dim, optimizer=kind, init=s.init) for s in specs]
        opt = {"sgd": lambda: et.SGD(mods, lr=0.05), "adagrad": lambda: et.RowWiseAdagrad(mods, lr=0.05),
               "adam": lambda: et.Adam(mods, lr=0.01)}[kind]()
        before = self.m.stats()["batch.multis"]
        batches = [[torch.from_numpy(rng.integers(0, 200, (16, 3))) for _ in dims] for _ in range(steps)]
        for k, ids in enumerate(batches):
            if pipeline and k + 1 < steps:
                mod.prefetch(batches[k + 1])  # as embfs.torch.Prefetcher does
            if collection and jagged:
                keys = [s.name for s in specs][::-1]
                values = torch.cat([ids[2 - k].reshape(-1) for k in range(3)])
                outd = mod.forward_jagged(keys, values, torch.full((3 * 16,), 3))
                outs = [outd[s.name] for s in specs]
            elif collection:
                outs = mod(ids)
            else:
                outs = [m(i) for m, i in zip(mods, ids)]
            sum((o * o).sum() for o in outs).backward()
            opt.step()
            opt.zero_grad()
        if collection:
            mod.flush()
        multis = self.m.stats()["batch.multis"] - before
        return [m.table.gather(np.arange(200)) for m in (mod.bags if collection else mods)], multis

    @unittest.skipIf(torch is None, "torch missing")
    def test_equals_separate_modules(self):
        seed = seed_of("collection")
        for kind in ("sgd", "adagrad", "adam"):
            a, multis = self.train("ca", kind, seed=seed)
            self.assertEqual(multis, 10, "a step is two requests: one gather, one push")
            b, _ = self.train("cb", kind, seed=seed, collection=False)
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y, err_msg=f"{kind} EMBFS_SEED={seed}")

    @unittest.skipIf(torch is None, "torch missing")
    def test_one_weight_array_equals_separate_modules(self):
        # tables of one dim share a weight array and an embedding_bag: the
        # same rows as a module per table, but for the order in which
        # torch's backward sums a row's gradients (it sorts all the ids)
        seed = seed_of("collection one group")
        for kind in ("sgd", "adagrad"):
            a, _ = self.train("ga", kind, seed=seed, dims=(8, 8, 8))
            b, _ = self.train("gb", kind, seed=seed, collection=False, dims=(8, 8, 8))
            for x, y in zip(a, b):
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=f"{kind} EMBFS_SEED={seed}")

    @unittest.skipIf(torch is None, "torch missing")
    def test_fused_push_bit_for_bit(self):
        seed = seed_of("collection fuse_push")
        a, _ = self.train("fa", "adagrad", seed=seed)
        b, multis = self.train("fb", "adagrad", seed=seed, fuse=True)
        self.assertEqual(multis, 6, "with fuse_push a step is one request, and flush sends the last pushes")
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y, err_msg=f"EMBFS_SEED={seed}")

    @unittest.skipIf(torch is None, "torch missing")
    def test_pipeline_bit_for_bit(self):
        seed = seed_of("collection pipeline")
        for kind, dims in (("adagrad", (4, 8, 6)), ("adam", (4, 8, 6)), ("adagrad", (8, 8, 8))):
            a, _ = self.train("pa", kind, seed=seed, steps=8, dims=dims)
            b, multis = self.train("pb", kind, seed=seed, steps=8, pipeline=True, dims=dims)
            # a step: the gather ahead (the first step's gathered then), and
            # the pushes with the rows they changed
            self.assertEqual(multis, 8 + 8, kind)
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y, err_msg=f"{kind} {dims} EMBFS_SEED={seed}")

    @unittest.skipIf(torch is None, "torch missing")
    def test_pipeline_split_pushes_bit_for_bit(self):
        # pushes of _SPLIT_BYTES or more go in two requests, the rows the
        # next batch shares with them first (which that batch waits for),
        # then the rest; here every push is split, and every batch looked up
        # by prefetch() (as when the thread is behind), so that the batches
        # ahead are looked up when the pushes come
        import embfs.torch as et
        seed = seed_of("collection pipeline split")
        saved = et._SPLIT_BYTES, et.Collection._behind
        et._SPLIT_BYTES, et.Collection._behind = 0, lambda self: True
        try:
            for kind, dims in (("sgd", (4, 8, 6)), ("adagrad", (8, 8, 8)), ("adam", (4, 8, 6))):
                a, _ = self.train("sa", kind, seed=seed, steps=8, dims=dims)
                b, multis = self.train("sb", kind, seed=seed, steps=8, pipeline=True, dims=dims)
                # 8 gathers, 8 pushes, and the 7 that the next batch shares rows with split
                self.assertEqual(multis, 8 + 8 + 7, f"{kind}: the pushes went in two requests")
                for x, y in zip(a, b):
                    np.testing.assert_array_equal(x, y, err_msg=f"{kind} {dims} EMBFS_SEED={seed}")
                c, _ = self.train("sc", kind, seed=seed, steps=60, pipeline=True, dims=(8, 4))
                d, _ = self.train("sd", kind, seed=seed, steps=60, dims=(8, 4))
                for x, y in zip(c, d):
                    np.testing.assert_array_equal(x, y, err_msg=f"{kind} 60 steps EMBFS_SEED={seed}")
        finally:
            et._SPLIT_BYTES, et.Collection._behind = saved

    @unittest.skipIf(torch is None, "torch missing")
    def test_pipeline_many_steps_few_rows(self):
        # every step shares most rows with the next, and the gather and push
        # threads race for them: pipelined equals unpipelined, bit for bit
        seed = seed_of("collection pipeline races")
        for kind in ("sgd", "adagrad"):
            a, _ = self.train("ra", kind, seed=seed, steps=60, dims=(8, 4))
            b, _ = self.train("rb", kind, seed=seed, steps=60, pipeline=True, dims=(8, 4))
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y, err_msg=f"{kind} EMBFS_SEED={seed}")

    @unittest.skipIf(torch is None, "torch missing")
    def test_pipeline_edge_cases(self):
        # batches not announced, one announced steps ahead, a lookup in
        # eval, two lookups in one step, keyed jagged input, a flush midway:
        # pipelined equals unpipelined, bit for bit
        import embfs.torch as et
        seed = seed_of("collection pipeline edges")

        def run(tag, pipeline):
            specs = [et.TableSpec(self.gone(f"{tag}{i}"), d, init=embfs.Init.uniform(-0.1, 0.1, seed=i, cols=d))
                     for i, d in enumerate((8, 8, 4))]
            c = et.Collection(self.m, specs, optimizer="adagrad", pipeline=pipeline)
            opt = et.RowWiseAdagrad([c], lr=0.1)
            r = np.random.default_rng(seed)
            batches = [[torch.from_numpy(r.integers(0, 300, (16, 2))) for _ in range(3)] for _ in range(12)]
            for k, b in enumerate(batches):
                if k + 1 < len(batches) and k % 4 != 3:
                    c.prefetch(batches[k + 1])
                if k == 5:
                    c.prefetch(batches[9])
                if k == 6:
                    c.eval()
                    with torch.no_grad():
                        c(b)
                    c.train()
                loss = sum((o * o).sum() for o in c(b))
                if k % 3 == 1:
                    loss = loss + sum(o.sum() for o in c([x[:3] for x in b]))
                if k == 8:
                    vals = torch.cat([x.reshape(-1) for x in b])
                    d = c.forward_jagged([s.name for s in specs], vals, torch.full((3 * 16,), 2))
                    loss = loss + sum(v.sum() for v in d.values())
                loss.backward()
                opt.step()
                opt.zero_grad()
                if k == 10:
                    c.flush()
            c.flush()
            return [b.table.gather(np.arange(300)) for b in c.bags]

        for x, y in zip(run("pea", False), run("peb", True)):
            np.testing.assert_array_equal(x, y, err_msg=f"EMBFS_SEED={seed}")
        # again with every step's pushes split (several batches ahead, later
        # ones patched by the second request)
        saved = et._SPLIT_BYTES, et.Collection._behind
        et._SPLIT_BYTES, et.Collection._behind = 0, lambda self: True
        try:
            for x, y in zip(run("pec", False), run("ped", True)):
                np.testing.assert_array_equal(x, y, err_msg=f"split, EMBFS_SEED={seed}")
        finally:
            et._SPLIT_BYTES, et.Collection._behind = saved

    @unittest.skipIf(torch is None, "torch missing")
    def test_pipeline_raises_a_refused_push(self):
        # a push the background thread sends is refused (NaN gradients):
        # the next flush raises its error, and the rows are unchanged
        import embfs.torch as et
        spec = et.TableSpec(self.gone("pnan"), 4, init=embfs.Init.uniform(-0.1, 0.1, seed=3, cols=4))
        mod = et.Collection(self.m, [spec], optimizer="sgd", pipeline=True)
        opt = et.SGD([mod], lr=0.1)
        ids = torch.tensor([[1, 2], [3, 4]])
        mod.prefetch([ids])
        (mod([ids])[0] * float("nan")).sum().backward()
        opt.step()
        with self.assertRaises(embfs.EmbfsError) as cm:
            mod.flush()
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertEqual(list(mod.bags[0].table.stored_ids()), [])
        mod.flush()  # raised once

    @unittest.skipIf(torch is None, "torch missing")
    def test_pipeline_split_refused_applies_nothing(self):
        # a step's pushes split in two requests (the rows the next batch
        # shares with them first) are refused whole, as one request is:
        # NaN gradients keep a step from being split, and when the first
        # request is refused the second is not sent
        import embfs.torch as et
        saved = et._SPLIT_BYTES, et.Collection._behind, et.Collection._splittable
        et._SPLIT_BYTES, et.Collection._behind = 0, lambda self: True
        b0, b1 = torch.tensor([[1, 2], [3, 4]]), torch.tensor([[3, 4], [5, 6]])  # b1 shares rows 3 and 4
        try:
            for name, nan_bag, force in (("pnan1", 0, False), ("pnan2", 1, True)):
                if force:  # the shared rows' request refused (NaN), the rest finite
                    et.Collection._splittable = lambda self, pushes, aheads: bool(aheads)
                spec = et.TableSpec(self.gone(name), 4, init=embfs.Init.uniform(-0.1, 0.1, seed=3, cols=4))
                mod = et.Collection(self.m, [spec], optimizer="sgd", pipeline=True)
                opt = et.SGD([mod], lr=0.1)
                mod.prefetch([b1])
                out = mod([b0])[0]
                scale = torch.ones(2, 1)
                scale[nan_bag] = float("nan")
                (out * scale).sum().backward()
                opt.step()
                with self.assertRaises(embfs.EmbfsError) as cm:
                    mod([b1])
                self.assertEqual(cm.exception.errno, errno.EINVAL, name)
                mod.flush()
                self.assertEqual(list(mod.bags[0].table.stored_ids()), [], name)
        finally:
            et._SPLIT_BYTES, et.Collection._behind, et.Collection._splittable = saved

    @unittest.skipIf(torch is None, "torch missing")
    def test_pipeline_failed_lookup_keeps_the_push(self):
        # the background thread fails to look a batch ahead up: the step's
        # pushes still go, that batch's forward() raises the error, and a
        # forward() of it after the error was raised gathers it then; the
        # rows equal an unpipelined run's
        import embfs.torch as et
        b0, b1 = torch.tensor([[1, 2], [3, 4]]), torch.tensor([[3, 4], [5, 6]])
        saved = et._Lookup

        class Failing(saved):
            __slots__ = ()

            def __init__(self, *a):
                raise MemoryError("injected")

        def run(name, pipeline, raised_by_wait=False):
            spec = et.TableSpec(self.gone(name), 4, init=embfs.Init.uniform(-0.1, 0.1, seed=3, cols=4))
            mod = et.Collection(self.m, [spec], optimizer="sgd", pipeline=pipeline)
            opt = et.SGD([mod], lr=0.1)
            if pipeline:
                mod.prefetch([b0])
                mod.wait()
                et._Lookup = Failing
                try:
                    mod.prefetch([b1])  # the thread is idle: it looks the batch up, and fails
                    self.assertIsInstance(mod._futures[-1].exception(), MemoryError)
                finally:
                    et._Lookup = saved
                if raised_by_wait:
                    with self.assertRaises(MemoryError):
                        mod.wait()
            mod([b0])[0].sum().backward()
            opt.step()
            if pipeline and not raised_by_wait:
                with self.assertRaises(MemoryError):
                    mod([b1])
            (mod([b1])[0] * 2).sum().backward()
            opt.step()
            mod.flush()
            return mod.bags[0].table.gather(np.arange(8))

        want = run("plka", False)
        np.testing.assert_array_equal(run("plkb", True), want)
        np.testing.assert_array_equal(run("plkc", True, raised_by_wait=True), want)

    @unittest.skipIf(torch is None, "torch missing")
    def test_jagged_equals_dense(self):
        seed = seed_of("collection jagged")
        a, _ = self.train("ja", "sgd", seed=seed)
        b, _ = self.train("jb", "sgd", seed=seed, jagged=True)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y, err_msg=f"EMBFS_SEED={seed}")


class TestPushSnapshots(PooledCase):
    """A push after a snapshot leaves the snapshot's rows as they were:
    rows cached (updated in place, the old bytes kept aside first) and
    rows not cached (a 256 KiB cache over 4,000 rows of 1 KiB)."""
    size = "256M"
    opts = "cache_size=256K"

    def test_snapshot_keeps_old_rows(self):
        seed = seed_of("push after snapshot")
        rng = np.random.default_rng(seed)
        t = self.m.create(self.gone("ps.emb"), 256, "f32")
        n = 4000
        old = rng.standard_normal((n, 256)).astype(np.float32)
        t.scatter(np.arange(n), old)
        snap = "ps_snap"
        try:
            self.m.drop(snap)
        except embfs.EmbfsError:
            pass
        self.m.snapshot(snap)
        try:
            ids = rng.choice(n, 1500, replace=False)
            g = rng.standard_normal((1500, 256)).astype(np.float32)
            t.push(ids, g, "sgd", lr=0.5)
            want = old.copy()
            want[ids] = old[ids] - np.float32(0.5) * g
            np.testing.assert_array_equal(t.gather(np.arange(n)), want, err_msg=f"EMBFS_SEED={seed}")
            st = self.m.table("ps.emb", snapshot=snap)
            np.testing.assert_array_equal(st.gather(np.arange(n)), old, err_msg=f"EMBFS_SEED={seed}")
            t.fsync()  # written back: the snapshot still reads its own versions
            np.testing.assert_array_equal(st.gather(np.arange(n)), old)
        finally:
            self.m.drop(snap)


def _pusher(mnt, name, rounds, rows):
    m = embfs.Mount(mnt)
    t = m.table(name)
    g = -np.ones((len(rows), 4), np.float32)
    for _ in range(rounds):
        t.push(rows, g, "sgd", lr=1.0)
    embfs.close_all()


class TestPushConcurrent(PooledCase):
    size = "256M"
    opts = "cache_size=16M"

    def run_procs(self, nproc, rounds=150):
        name = self.gone(f"p_conc{nproc}")
        t = self.m.create(name, 4, "f32")
        ctx = multiprocessing.get_context("fork")
        # overlapping sets: every process pushes rows 0..63, each also its own 8
        procs = [ctx.Process(target=_pusher, args=(self.pool.mnt, name, rounds,
                                                   np.r_[np.arange(64), 1000 + 8 * i + np.arange(8)]))
                 for i in range(nproc)]
        embfs.close_all()
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            self.assertEqual(p.exitcode, 0)
        shared = t.gather(np.arange(64))
        np.testing.assert_array_equal(shared, np.full((64, 4), nproc * rounds, np.float32))
        own = t.gather(1000 + np.arange(8 * nproc))
        np.testing.assert_array_equal(own, np.full((8 * nproc, 4), rounds, np.float32))

    def test_two_processes(self):
        self.run_procs(2)

    def test_four_processes(self):
        self.run_procs(4)


class TestPushRefused(PooledCase):
    size = "256M"
    opts = "cache_size=16M"

    def setUp(self):
        self.t = self.m.create(self.gone("p_bad"), 5, "f32")
        self.t.scatter([1, 2], np.ones((2, 5), np.float32))

    def assertUnchanged(self):
        np.testing.assert_array_equal(self.t.gather([1, 2]), np.ones((2, 5), np.float32))
        self.assertFalse(self.t.present([3])[0])

    def refused(self, err, **kw):
        with self.assertRaises(OSError) as cm:
            raw_push(self.t, **kw)
        self.assertEqual(cm.exception.errno, err, kw)
        self.assertUnchanged()

    def test_client_checks(self):
        with self.assertRaises(embfs.BadType):
            self.t.push([1], np.ones((1, 5), np.float64))
        with self.assertRaises(embfs.BadArgument):
            self.t.push([1, 2], np.ones((1, 5), np.float32))
        with self.assertRaises(embfs.BadArgument):
            self.t.push([1], np.ones((1, 3), np.float32), "adagrad")  # 3 + 3 > 5 columns
        with self.assertRaises(embfs.BadArgument):
            self.t.push([1], np.ones((1, 2), np.float32), "adam", step=0)
        self.assertUnchanged()

    def test_errnos(self):
        g = np.ones((2, 2), np.float32)
        ids = [1, 3]
        self.refused(errno.EINVAL, ids=ids, grads=g, optim=3, dim=3)      # state does not fit
        self.refused(errno.EINVAL, ids=ids, grads=g, optim=9)             # no such optimizer
        self.refused(errno.EINVAL, ids=ids, grads=g, optim=4, step=0)     # adam without a step
        self.refused(errno.EINVAL, ids=ids, grads=g, dim=6)               # wider than the row
        self.refused(errno.EINVAL, ids=ids, grads=g, total=_wire._HDR.size + 96 + 16 + 12)  # short gradients
        self.refused(errno.EINVAL, ids=[1, 1 << 62], grads=g)             # id out of range
        self.refused(errno.EINVAL, ids=ids, grads=np.array([[1, np.nan], [0, 0]], np.float32))
        self.refused(errno.EINVAL, ids=ids, grads=np.array([[1, 0], [np.inf, 0]], np.float32))

    def test_nan_from_python(self):
        with self.assertRaises(embfs.EmbfsError) as cm:
            self.t.push([1, 3], np.array([[1, np.nan], [0, 0]], np.float32))
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertUnchanged()

    def test_int_table(self):
        t = self.m.create(self.gone("p_int"), 4, "i8")
        with self.assertRaises(OSError) as cm:
            raw_push(t, ids=[0], grads=np.ones((1, 4), np.float32))
        self.assertEqual(cm.exception.errno, errno.EINVAL)

    def test_snapshot_table(self):
        snap = self.gone_snap("p_snap")
        self.m.snapshot(snap)
        try:
            st = self.m.table("p_bad", snapshot=snap)
            with self.assertRaises(OSError) as cm:
                raw_push(st, ids=[1], grads=np.ones((1, 5), np.float32))
            self.assertEqual(cm.exception.errno, errno.EROFS)
            with self.assertRaises(embfs.EmbfsError) as cm:
                st.push([1], np.ones((1, 5), np.float32))
            self.assertEqual(cm.exception.errno, errno.EROFS)
        finally:
            self.m.drop(snap)
        self.assertUnchanged()

    def gone_snap(self, name):
        try:
            self.m.drop(name)
        except embfs.EmbfsError:
            pass
        return name


if __name__ == "__main__":
    unittest.main()
