"""embfs.dist: row-sharded tables over torch.distributed (gloo, loopback),
one pool and mount per rank.

- examples/dlrm_dist.py on W = 1, 2 and 4 ranks: the union of the shards
  equals the one-rank tables (same ids; rows to float rounding, the dense
  part trained with SGD so that rounding stays small), and every
  row lives on its owner;
- a rank SIGKILLed after a global checkpoint, the job resumed from it: the
  shards end bit for bit as an uninterrupted run's;
- resharding a checkpoint of 2 shards into 3, then training on from it;
- bad input: disagreeing geometry, a half-present checkpoint name, an
  incomplete checkpoint.
Seeds: EMBFS_SEED (printed) picks the data seed and the kill step.
"""
import datetime
import os
import random
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import embfs
from mountutil import PREFIX, TOP, Pooled

SEED = int(os.environ.get("EMBFS_SEED") or random.SystemRandom().randrange(1 << 32))
print(f"test_dist: seed {SEED} (replay: EMBFS_SEED={SEED})", flush=True)

PY = "/usr/bin/python3"
EX = os.path.join(TOP, "examples", "dlrm_dist.py")
SHM = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
TABLES, BATCH, STEPS, EVERY = 3, 192, 8, 4  # BATCH: a multiple of 1, 2, 3, 4


def run_example(mounts, manifests, *extra, check=True):
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"))
    args = [PY, EX, ",".join(mounts), "--manifests", manifests, "--tables", str(TABLES), "--batch", str(BATCH),
            "--steps", str(STEPS), "--every", str(EVERY), "--seed", str(SEED % 1000 + 1),
            "--timeout", "30", "--limit", "240", *extra]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if check and r.returncode:
        raise AssertionError(f"{' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}")
    return r


def union(mounts, snapshot=None):
    """{table: (ids, rows)} over the shards, ids ascending; checks owners."""
    import embfs.dist as ed
    out = {}
    w = len(mounts)
    for f in range(TABLES):
        name = f"C{f + 1}.emb"
        ids, rows = [], []
        for r, mnt in enumerate(mounts):
            t = embfs.Mount(mnt).table(name, snapshot=snapshot)
            i = np.fromiter(t.stored_ids(), dtype=np.int64)
            assert (ed.shard_of(name, i, w) == r).all(), f"{name}: rows on shard {r} it does not own"
            ids.append(i)
            rows.append(t.gather(i))
        i = np.concatenate(ids)
        o = np.argsort(i)
        out[name] = (i[o], np.concatenate(rows)[o])
    return out


class Pools:
    """n fresh pools mounted (on /dev/shm when there is one)."""

    def __init__(self, n):
        self.p = [Pooled(size="96M", opts="cache_size=8M", base=SHM) for _ in range(n)]

    def __enter__(self):
        try:
            for p in self.p:
                p.__enter__()
        except BaseException:
            self.__exit__()
            raise
        return [p.mnt for p in self.p]

    def __exit__(self, *exc):
        embfs.close_all()
        for p in self.p:
            if getattr(p, "dir", None):
                p.__exit__(None, None, None)


class TestDist(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=PREFIX + "dist.", dir=SHM)

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.tmp])

    def man(self, tag):
        return os.path.join(self.tmp, tag)

    def assertSameTables(self, a, b, exact):
        self.assertEqual(sorted(a), sorted(b))
        for name in a:
            np.testing.assert_array_equal(a[name][0], b[name][0], err_msg=name)
            if exact:
                np.testing.assert_array_equal(a[name][1], b[name][1], err_msg=name)
            else:
                # W ranks sum a row's gradients (and DDP the dense part's) in
                # another order than one rank: rounding.  The runs compared
                # so train both parts with SGD (--dense-opt sgd --sparse-opt
                # sgd), which keeps that rounding at its size: seen at most
                # 7.5e-9 (EMBFS_SEED 3151619427, 1, 329, 7, 11, 12345).  An
                # optimizer that normalizes a step does not: a gradient that
                # nearly cancels has a large relative rounding error, and
                # Adagrad steps by about lr times it.  On the
                # dense part (data seed 329) weights ended 0.02 apart by step
                # 8; on the rows, row-wise Adagrad put C1.emb 5.0e-5 apart
                # for EMBFS_SEED=3151619427, before and after pushes.  A lost
                # gradient row moves a row by lr times it: dropping one in
                # embfs.dist._take_grads fails this with 1.5e-5 (seed 1).
                d = np.abs(a[name][1].astype(np.float64) - b[name][1])
                if not d.size:
                    continue
                self.worst = max(getattr(self, "worst", 0.0), float(d.max()))
                self.assertLess(d.max(), 1e-6, name)

    def test_worlds_agree(self):
        with Pools(1) as one, Pools(2) as two, Pools(4) as four:
            sgd = ("--dense-opt", "sgd", "--sparse-opt", "sgd")  # see assertSameTables
            run_example(one, self.man("w1"), *sgd)
            r2 = run_example(two, self.man("w2"), *sgd)
            r4 = run_example(four, self.man("w4"), *sgd)
            print(r2.stdout.strip().splitlines()[-1], flush=True)
            self.addCleanup(lambda: print(f"largest difference from W=1: {getattr(self, 'worst', 0.0):.3g}",
                                          flush=True))
            ref = union(one)
            self.assertSameTables(ref, union(two), exact=False)
            self.assertSameTables(ref, union(four), exact=False)
            # the checkpoints too: a snapshot per shard, a manifest per rank
            self.assertSameTables(union(one, "step-4"), union(two, "step-4"), exact=False)
            import embfs.dist as ed
            self.assertEqual(ed.checkpoints(self.man("w2"), 1), ["step-4", "step-8"])
            self.assertIn("all-to-all", r4.stdout)

    def test_kill_restore_resume(self):
        kill = 5 + SEED % 3  # after the checkpoint at step 4, before the end
        with Pools(2) as ref, Pools(2) as job:
            run_example(ref, self.man("ref"))
            r = run_example(job, self.man("job"), "--kill-at", str(kill), "--kill-rank", str(SEED % 2),
                            check=False)
            self.assertEqual(r.returncode, 3, r.stderr[-2000:])
            self.assertIn("died", r.stderr)
            import embfs.dist as ed
            self.assertEqual(ed.checkpoints(self.man("job")), ["step-4"])  # step-8 never reached
            r = run_example(job, self.man("job"), "--resume", "step-4")
            self.assertIn("resumed from step-4", r.stdout)
            self.assertSameTables(union(ref), union(job), exact=True)

    def test_reshard(self):
        import embfs.dist as ed
        with Pools(2) as two, Pools(3) as three:
            run_example(two, self.man("src"))
            moved = ed.reshard(two, "step-8", three, self.man("src"), self.man("dst"))
            self.assertEqual(sum(moved.values()), sum(len(v[0]) for v in union(two, "step-8").values()))
            self.assertSameTables(union(two, "step-8"), union(three, "step-8"), exact=True)
            self.assertSameTables(union(two, "step-8"), union(three), exact=True)
            # a job of 3 ranks resumes from the resharded checkpoint
            import shutil
            shutil.copy(os.path.join(self.man("src"), "step-8.dense.pt"), self.man("dst"))
            global STEPS
            old, STEPS = STEPS, 10
            try:
                r = run_example(three, self.man("dst"), "--resume", "step-8")
            finally:
                STEPS = old
            self.assertIn("resumed from step-8 (step 8, 3 shards)", r.stdout)
            # a checkpoint of another world size is refused
            r = run_example(two, self.man("dst"), "--resume", "step-8", check=False)
            self.assertEqual(r.returncode, 3)
            self.assertIn("reshard it", r.stderr + r.stdout)

    def test_bad_input(self):
        with Pools(2) as two:
            env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"))
            code = BAD.replace("@MOUNTS@", repr(two)).replace("@MAN@", repr(self.man("bad"))) \
                      .replace("@RDZV@", repr(os.path.join(self.tmp, "rdzv")))
            script = os.path.join(self.tmp, "bad.py")  # spawned ranks import it: a file
            with open(script, "w") as f:
                f.write(code)
            r = subprocess.run([PY, script], env=env, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-3000:])
            self.assertEqual(r.stdout.count("ok"), 2 * 3, r.stdout)


# run with torch.multiprocessing in a fresh interpreter: each check prints
# "ok" on both ranks
BAD = r'''
import datetime, errno, os, sys, numpy as np, torch, torch.distributed as dist, torch.multiprocessing as mp
import embfs, embfs.dist as ed

def rank(r, mounts, man, rdzv):
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=r, world_size=2,
                            timeout=datetime.timedelta(seconds=20))
    m = embfs.Mount(mounts[r])
    # 1. geometry that disagrees: every rank refuses
    m.create("g.emb", 8 if r == 0 else 9)
    try:
        ed.ShardedEmbedding(m, "g.emb", 7 if r == 0 else 8)
    except embfs.EmbfsError as e:
        assert "rank" in str(e), e
        print("ok geometry", flush=True)
    # 2. a checkpoint name present on one shard only: EEXIST everywhere, nothing taken
    if r == 1:
        m.snapshot("half")
    try:
        ed.checkpoint(m, "half", 5, man)
    except embfs.EmbfsError as e:
        assert e.errno == errno.EEXIST, e
        assert ("half" in m.snapshots()) == (r == 1)
        print("ok exists", flush=True)
    # 3. an incomplete checkpoint (rank 1's manifest lost): restore refuses on every rank
    e_ = ed.ShardedEmbedding(m, "e.emb", 4, optimizer="sgd")
    ed.checkpoint(m, "c1", 10, man)
    if r == 1:
        os.unlink(os.path.join(man, "c1.rank1.json"))
    dist.barrier()
    try:
        ed.restore(m, "c1", man)
    except embfs.EmbfsError as e:
        assert "rank 1" in str(e), e
        print("ok incomplete", flush=True)
    dist.destroy_process_group()
    embfs.close_all()

if __name__ == "__main__":
    mp.spawn(rank, args=(@MOUNTS@, @MAN@, @RDZV@), nprocs=2)
'''


if __name__ == "__main__":
    unittest.main()
