#!/usr/bin/python3
"""dlrmtorch: examples/dlrm.py's model with its 26 tables held by torch in
DRAM, the anchor of the DLRM figure of make bench (section train).

    PYTHONPATH=TOP/python dlrmtorch.py [--steps 150] [--batch 128] [--seed 1]
        [--threads 1] [--log 50] [--fused]

The same data (examples/dlrm.py's Data, the same seed and steps), the same
dense model and dense optimizer (torch.optim.Adagrad), one torch thread.
The tables are what a torch user holds: torch.nn.EmbeddingBag(VOCAB[f],
16, mode="sum", sparse=True), one per feature, indexed by the raw category
value (dense re-indexing: no hashing into 2^48 row ids, which no DRAM
array holds), initialised uniform in +-16^-0.5 as the example's
embfs.Init, trained with row-wise Adagrad in torch ops (coalesce,
index_add_ of the row means of g^2, then the row update: FBGEMM's rule,
as embfs.torch.RowWiseAdagrad with the example's lr 0.1 and eps 1e-8;
trainbench.py's TorchRowAdagrad).
--fused: one EmbeddingBag of all 26 tables' rows (a feature's values offset
by the rows of the tables before it), one lookup and one optimizer update a
step, as FBGEMM's table-batched embeddings and TorchRec's
EmbeddingBagCollection fuse tables of one dim: the fastest of the two.

It prints a line as the example does, medians per step over the steps:
  per step (medians of N steps, ms): torch tables (their lookups and
  row-wise Adagrad) T, torch compute C; data D, whole step W
where compute is forward + backward + the dense step less the table
lookups (the example's "torch compute"), data making the batch (the
example's generator, on the training thread as there), and the whole step
everything between two steps' ends (the example's "whole step").
"""
import argparse
import importlib.util
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("dlrm", os.path.join(TOP, "examples", "dlrm.py"))
dlrm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dlrm)
from trainbench import TorchRowAdagrad  # noqa: E402 (beside this file: trainbench's reference)


class TorchDLRM(torch.nn.Module):
    """dlrm.DLRM with torch.nn.EmbeddingBag tables (see the top)."""

    def __init__(self, seed, fused=False):
        super().__init__()
        self.bottom = dlrm.mlp(dlrm.BOTTOM, True)
        g = torch.Generator().manual_seed(seed)
        bound = dlrm.DIM ** -0.5
        self.tabs = torch.nn.ModuleList()
        self.fused = fused
        sizes = [int(v) for v in dlrm.VOCAB] if not fused else [int(dlrm.VOCAB.sum())]
        self.base = torch.from_numpy(np.concatenate([[0], np.cumsum(dlrm.VOCAB)[:-1]]).astype(np.int64))
        for n in sizes:
            e = torch.nn.EmbeddingBag(n, dlrm.DIM, mode="sum", sparse=True)
            with torch.no_grad():
                e.weight.uniform_(-bound, bound, generator=g)
            self.tabs.append(e)
        n = dlrm.SPARSE + 1
        li, lj = torch.tril_indices(n, n, -1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = dlrm.mlp([dlrm.DIM + n * (n - 1) // 2] + dlrm.TOP, False)
        self.lookup_s = 0.0  # seconds inside the tables' forwards

    def forward(self, dense, r):
        x = self.bottom(dense)
        t0 = time.perf_counter()
        if self.fused:
            v = (r + self.base).reshape(-1)
            e = self.tabs[0](v, torch.arange(0, v.numel(), dtype=torch.int64)).reshape(r.shape[0], dlrm.SPARSE, -1)
            embs = list(e.unbind(1))
        else:
            embs = [self.tabs[f](r[:, f:f + 1]) for f in range(dlrm.SPARSE)]
        self.lookup_s += time.perf_counter() - t0
        t = torch.stack([x] + embs, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([x, z], dim=1)).squeeze(1)


def main(argv):
    ap = argparse.ArgumentParser(prog="dlrmtorch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--sparse-lr", type=float, default=0.1)
    ap.add_argument("--fused", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    data = dlrm.Data(a.seed, a.batch)
    model = TorchDLRM(a.seed, a.fused)
    dense = [p for n, p in model.named_parameters() if not n.startswith("tabs.")]
    opt = torch.optim.Adagrad(dense, lr=a.lr)
    sparse = TorchRowAdagrad([t.weight for t in model.tabs], lr=a.sparse_lr)
    print(f"DLRM, tables in DRAM: steps 1..{a.steps}, batch {a.batch}, {dlrm.SPARSE} torch.nn.EmbeddingBag tables "
          f"of {dlrm.DIM} f32 ({sum(int(v) for v in dlrm.VOCAB)} rows), seed {a.seed}, torch {torch.__version__} "
          f"on {a.threads} thread(s)")
    rec = {k: [] for k in ("tables", "compute", "data", "wall")}
    losses = []
    w0 = time.perf_counter()
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        xd, _, y, _, r = data.sample(step)
        d = time.perf_counter() - t0
        lk0 = model.lookup_s
        t0 = time.perf_counter()
        loss = F.binary_cross_entropy_with_logits(model(xd, r), y)
        opt.zero_grad()
        sparse.zero_grad()
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        lk = model.lookup_s - lk0
        sparse.step()
        t2 = time.perf_counter()
        rec["compute"].append((t1 - t0) - lk)
        rec["tables"].append(lk + (t2 - t1))
        rec["data"].append(d)
        losses.append(loss.item())
        if step % a.log == 0:
            print(f"step {step} loss {losses[-1]!r} mean {math.fsum(losses) / len(losses)!r}", flush=True)
            losses = []
        w1 = time.perf_counter()
        rec["wall"].append(w1 - w0)
        w0 = w1
    med = {k: statistics.median(v) * 1e3 for k, v in rec.items()}
    print(f"per step (medians of {a.steps} steps, ms): torch tables (their lookups and row-wise Adagrad) "
          f"{med['tables']:.1f}, torch compute {med['compute']:.1f}; data {med['data']:.1f}, "
          f"whole step {med['wall']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
