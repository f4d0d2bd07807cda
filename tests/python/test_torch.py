"""Tests of embfs.torch (python/embfs/torch.py) on a real mount, against
torch's own modules and optimizers on the same weights.

Randomized cases draw from EMBFS_SEED (printed; set it to replay).
"""
import os
import random
import unittest

import numpy as np

import embfs
from mountutil import PooledCase

try:
    import torch
    import torch.nn.functional as F
    import embfs.torch as et
except ImportError:  # python3-torch missing: tests/deps.sh installs it
    torch = None

SEED = int(os.environ.get("EMBFS_SEED") or random.SystemRandom().randrange(1 << 32))
print(f"test_torch: seed {SEED} (replay: EMBFS_SEED={SEED})", flush=True)


class _Rows(torch.utils.data.Dataset if torch else object):
    """Batches of ids; __getitem__ also gathers from the table (in a DataLoader
    worker process: the fork-safety case)."""

    def __init__(self, table_path, n):
        self.path, self.n = table_path, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t = embfs.Table(self.path)
        ids = torch.arange(i * 10, i * 10 + 10)
        return ids, torch.from_numpy(t.gather(ids.numpy()).copy())


@unittest.skipIf(torch is None, "no torch for this python3")
class TestModules(PooledCase):
    size = "256M"

    def setUp(self):
        torch.manual_seed(SEED & 0xFFFFFFFF)
        self.rng = np.random.default_rng(SEED)

    def test_embedding_matches_torch_sgd(self):
        emb = et.Embedding(self.m, self.gone("e.emb"), 6, optimizer="sgd")
        ids = torch.randint(0, 40, (8, 3))
        w0 = emb.weights(np.arange(40))
        ref = torch.nn.Embedding(40, 6, sparse=True)
        ref.weight.data.copy_(w0)
        opt, ropt = et.SGD([emb], lr=0.3), torch.optim.SGD(ref.parameters(), lr=0.3)
        for step in range(3):
            tgt = torch.randn(8, 3, 6)
            out, rout = emb(ids), ref(ids)
            torch.testing.assert_close(out, rout)
            ((out - tgt) ** 2).sum().backward()
            ((rout - tgt) ** 2).sum().backward()
            opt.step()
            ropt.step()
            ropt.zero_grad()
            torch.testing.assert_close(emb.weights(np.arange(40)), ref.weight.data, rtol=1e-6, atol=1e-6)
        # rows never looked up were never written
        used = set(ids.reshape(-1).tolist())
        self.assertEqual(set(emb.table.stored_ids()), used)

    def test_bag_modes_offsets_weights(self):
        for mode in ("sum", "mean"):
            bag = et.EmbeddingBag(self.m, self.gone(f"b-{mode}.emb"), 5, mode=mode, optimizer="sgd")
            w = bag.weights(np.arange(30))
            inp = torch.randint(0, 30, (20,))
            offsets = torch.tensor([0, 3, 3, 9, 15])
            psw = torch.rand(20) if mode == "sum" else None
            got = bag(inp, offsets, per_sample_weights=psw)
            want = F.embedding_bag(inp, w, offsets, mode=mode, per_sample_weights=psw)
            torch.testing.assert_close(got, want)
            got2 = bag(inp.reshape(4, 5))
            torch.testing.assert_close(got2, F.embedding_bag(inp.reshape(4, 5), w, mode=mode))
            et.SGD([bag], lr=0.1).zero_grad()

    def test_rowwise_adagrad_and_state_in_rows(self):
        bag = et.EmbeddingBag(self.m, self.gone("ada.emb"), 4, mode="sum")
        self.assertEqual(bag.table.dim, 5)
        opt = et.RowWiseAdagrad([bag], lr=0.5, eps=1e-6)
        ids = torch.tensor([[1, 2], [2, 7]])
        w = bag.weights([1, 2, 7]).numpy().copy()
        s = np.zeros(3, np.float32)
        for _ in range(3):
            out = bag(ids)
            (out * torch.tensor([[1.0, 2, 3, 4], [0.5, 0, -1, 2]])).sum().backward()
            g = np.array([[1.0, 2, 3, 4], [1.5, 2, 2, 6], [0.5, 0, -1, 2]], np.float32)
            s = s + (g * g).mean(1)
            w = w - 0.5 * g / (np.sqrt(s) + 1e-6)[:, None]
            opt.step()
        raw = bag.table.gather([1, 2, 7])
        np.testing.assert_allclose(raw[:, :4], w, rtol=1e-5)
        np.testing.assert_allclose(raw[:, 4], s, rtol=1e-5)

    def test_accumulate_two_lookups_one_step(self):
        emb = et.Embedding(self.m, self.gone("acc.emb"), 3, optimizer="sgd")
        w = emb.weights([4]).clone()
        opt = et.SGD([emb], lr=1.0)
        emb(torch.tensor([4])).sum().backward()
        (2 * emb(torch.tensor([4, 4]))).sum().backward()
        opt.step()
        torch.testing.assert_close(emb.weights([4]), w - 5.0)

    def test_pipelined_modules_match(self):
        # pipeline=True (batches announced through a Prefetcher, gathered
        # ahead, pushes handed to a background thread) trains the rows as
        # the plain modules do: the bags bit for bit, the embedding to float
        # rounding (a bag of one row's backward sums in another order)
        batches = [(torch.randint(0, 50, (6, 3)), torch.randint(0, 50, (12,))) for _ in range(6)]
        offsets = torch.tensor([0, 2, 2, 7])
        got = {}
        for pipe in (False, True):
            e = et.Embedding(self.m, self.gone(f"pe{int(pipe)}.emb"), 4, optimizer="adagrad", pipeline=pipe)
            b = et.EmbeddingBag(self.m, self.gone(f"pb{int(pipe)}.emb"), 5, optimizer="adagrad", pipeline=pipe)
            opt = et.RowWiseAdagrad([e, b], lr=0.2)
            for k, (ei, bi) in enumerate(et.Prefetcher(batches, lambda x: [(e, x[0]), (b, x[1])])):
                loss = (e(ei) ** 2).sum() + (b(bi, offsets) * torch.arange(5.0)).sum()
                if k % 3 == 2:  # two lookups in one step: their gradients summed
                    loss = loss + e(ei[:2]).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
            self.assertEqual(b.weights([0]).shape, (1, 5))  # waits for the last pushes
            got[pipe] = e.table.gather(np.arange(50)), b.table.gather(np.arange(50))
        np.testing.assert_allclose(got[True][0], got[False][0], rtol=1e-5, atol=1e-6, err_msg=f"EMBFS_SEED={SEED}")
        np.testing.assert_array_equal(got[True][1], got[False][1], err_msg=f"EMBFS_SEED={SEED}")
        self.assertGreater(np.abs(got[True][1]).sum(), 0)

    def test_eval_writes_nothing(self):
        emb = et.Embedding(self.m, self.gone("ev.emb"), 3)
        emb.eval()
        emb(torch.tensor([1, 2])).sum()
        with torch.no_grad():
            emb.train()
            emb(torch.tensor([3]))
        et.RowWiseAdagrad([emb], lr=0.1).step()
        self.assertEqual(list(emb.table.stored_ids()), [])

    def test_init_deterministic_and_bf16(self):
        ini = embfs.Init.normal(0, 0.1, seed=9)
        a = et.Embedding(self.m, self.gone("ia.emb"), 4, init=ini, optimizer="sgd")
        b = et.Embedding(self.m, self.gone("ib.emb"), 4, init=ini, optimizer="sgd", dtype="bf16")
        torch.testing.assert_close(a(torch.tensor([5, 6])), a(torch.tensor([6, 5])).flip(0))
        torch.testing.assert_close(b(torch.tensor([5])), a(torch.tensor([5])), rtol=1e-2, atol=1e-3)
        self.assertEqual(b.table.dtype_name, "bf16")

    def test_state_dict_describes_the_table(self):
        emb = et.Embedding(self.m, self.gone("sd.emb"), 4)
        sd = emb.state_dict()
        self.assertEqual(list(sd), ["_extra_state"])
        self.assertEqual(sd["_extra_state"]["table"], "sd.emb")
        again = et.Embedding(self.m, "sd.emb", 4)
        again.load_state_dict(sd)
        other = et.Embedding(self.m, self.gone("sd2.emb"), 4, optimizer="sgd")
        with self.assertRaises(embfs.EmbfsError):
            other.load_state_dict(sd)
        with self.assertRaises(embfs.EmbfsError):  # the table holds another geometry
            et.Embedding(self.m, "sd.emb", 7)
        self.assertEqual(list(torch.nn.Sequential(emb).parameters()), [])

    def test_snapshot_holds_rows_and_state(self):
        emb = et.Embedding(self.m, self.gone("snap.emb"), 2)
        opt = et.RowWiseAdagrad([emb], lr=0.1)
        emb(torch.tensor([1])).sum().backward()
        opt.step()
        before = emb.table.gather([1])
        name = f"t-{SEED}-{random.random()}"
        self.m.snapshot(name)
        emb(torch.tensor([1])).sum().backward()
        opt.step()
        snap = self.m.table("snap.emb", snapshot=name)
        np.testing.assert_array_equal(snap.gather([1]), before)
        self.assertGreater(emb.table.gather([1])[0, 2], before[0, 2])
        self.m.drop(name)

    def test_dataloader_workers_and_prefetcher(self):
        t = self.m.create(self.gone("dl.emb"), 3)
        t.scatter(np.arange(100), np.repeat(np.arange(100, dtype=np.float32)[:, None], 3, 1))
        t.gather([0])  # the parent's fd exists before the workers fork
        loader = torch.utils.data.DataLoader(_Rows(t.path, 10), batch_size=None, num_workers=2)
        emb = et.Embedding(self.m, "dl.emb", 2, optimizer="adagrad", create=False)
        s0 = self.m.stats()
        seen = 0
        for ids, rows in et.Prefetcher(loader, lambda b: [(emb, b[0])]):
            self.assertEqual(rows[:, 0].tolist(), ids.tolist())
            emb.eval()
            emb(ids)
            seen += 1
        self.assertEqual(seen, 10)
        s1 = self.m.stats()
        self.assertEqual(s1["batch.prefetches"] - s0["batch.prefetches"], 9)
        self.assertEqual(s1["prefetch.rows"] - s0["prefetch.rows"], 90)

    def test_table_tensors(self):
        t = self.m.create(self.gone("tt.emb"), 4, "bf16")
        rows = torch.randn(3, 4).to(torch.bfloat16)
        t.scatter(torch.tensor([1, 5, 9]), rows)
        got = t.gather(torch.tensor([9, 1]))
        self.assertEqual(got.dtype, torch.bfloat16)
        torch.testing.assert_close(got, rows[[2, 0]])
        out = t.empty(2, torch=True)
        self.assertIs(t.gather(torch.tensor([5, 1]), out=out), out)
        torch.testing.assert_close(out, rows[[1, 0]])
        with self.assertRaises(TypeError):
            t.scatter(torch.tensor([1]), torch.randn(1, 4))  # float32 into bf16

    def test_bad_input(self):
        emb = et.Embedding(self.m, self.gone("bi.emb"), 2)
        with self.assertRaises(ValueError):
            emb(torch.tensor([1.0]))
        with self.assertRaises(ValueError):
            emb(torch.tensor([-3]))
        with self.assertRaises(ValueError):
            et.SGD([emb], lr=0.1)  # its rows hold Adagrad state
        with self.assertRaises(ValueError):
            et.EmbeddingBag(self.m, "x.emb", 2, mode="max")


if __name__ == "__main__":
    unittest.main()
