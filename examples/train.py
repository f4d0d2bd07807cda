#!/usr/bin/python3
"""Train a small click model whose embedding tables live on embfs.

    /usr/bin/python3 examples/train.py MNT [--batches 600] [--every 100]

Synthetic data: users and items drawn Zipf(0.99); a click happens with
probability sigmoid(6 * cos(true_user, true_item)) for hidden true vectors.
The model scores a (user, item) pair by the dot product of their embeddings.
MNT/user.emb and MNT/item.emb hold one row per id: 16 float32 weights plus a
row-wise Adagrad accumulator (dim 17, f32), created if missing.

Each step: gather the batch's unique user and item rows through
MNT/.embfs/rows (one request and one read per table), announce the next
batch's ids (PREFETCH), compute the logistic loss and its gradients with
numpy, and scatter the updated rows back.  Rows never written are holes and
read as zeros: they get a small random start on first use.  Every --every
steps it prints the loss, writes the step number to .embfs/batch (the batch
id that stamps row versions) and, if MNT/.snapshots exists, takes the
snapshot .snapshots/step-N.  Only ordinary file calls: no embfs library.
"""
import argparse
import errno
import mmap
import os
import struct
import sys
import time

import numpy as np

DIM = 16                      # weights per row; the row holds DIM + 1 floats
GATHER, SCATTER, PREFETCH = 1, 2, 3
HDR = struct.Struct("<4sIQIIQ")  # magic, op, table inode, count, flags, total length


class Table:
    """A table file on the mount: its inode names it in batch requests."""

    def __init__(self, mnt, name):
        self.path = os.path.join(mnt, name)
        if not os.path.exists(self.path):
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644))
            os.setxattr(self.path, "user.embfs.dim", b"%d" % (DIM + 1))
            os.setxattr(self.path, "user.embfs.dtype", b"f32")
            print(f"created {self.path} (dim {DIM + 1}, f32)")
        dim = int(os.getxattr(self.path, "user.embfs.dim"))
        dtype = os.getxattr(self.path, "user.embfs.dtype").decode()
        if dim != DIM + 1 or dtype != "f32":
            sys.exit(f"{self.path}: geometry {dim} x {dtype}, this example needs {DIM + 1} x f32")
        self.ino = os.stat(self.path).st_ino
        self.row_size = (DIM + 1) * 4


class Batch:
    """An open .embfs/rows: this fd's own request and response."""

    def __init__(self, mnt):
        self.fd = os.open(os.path.join(mnt, ".embfs", "rows"), os.O_RDWR)
        self.buf = mmap.mmap(-1, 1 << 20)  # page aligned: the response comes in few reads

    def _send(self, op, table, ids, rows=b""):
        ids = np.ascontiguousarray(ids, dtype="<u8")
        total = HDR.size + ids.nbytes + len(rows)
        msg = memoryview(b"".join([HDR.pack(b"EMBB", op, table.ino, len(ids), 0, total),
                                   ids.tobytes(), rows]))
        done = 0
        while done < total:  # a short write means "send the rest": that write gets the error
            done += os.pwrite(self.fd, msg[done:], done)

    def gather(self, table, ids):
        self._send(GATHER, table, ids)
        need = len(ids) * table.row_size
        if len(self.buf) < need:
            self.buf = mmap.mmap(-1, need)
        view, got = memoryview(self.buf), 0
        while got < need:
            n = os.preadv(self.fd, [view[got:need]], got)
            if n == 0:
                raise OSError(errno.EIO, "short gather response")
            got += n
        rows = np.frombuffer(self.buf, dtype=np.float32, count=need // 4).reshape(len(ids), DIM + 1)
        return rows.copy()

    def scatter(self, table, ids, rows):
        self._send(SCATTER, table, ids, np.ascontiguousarray(rows, dtype=np.float32).tobytes())

    def prefetch(self, table, ids):
        self._send(PREFETCH, table, ids)


def zipf_sampler(n, theta, rng):
    cdf = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** -theta)
    cdf /= cdf[-1]
    return lambda size: np.minimum(np.searchsorted(cdf, rng.random(size)), n - 1).astype(np.uint64)


def set_batch_id(mnt, step):
    """Tell embfs which batch the following writes belong to, if it takes batch ids."""
    path = os.path.join(mnt, ".embfs", "batch")
    if not os.path.exists(path):
        return "no .embfs/batch: batch id not set"
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"%d\n" % step, 0)
        return f"batch id {step}"
    except OSError as e:
        return f"batch id not set ({e.strerror})"
    finally:
        os.close(fd)


def snapshot(mnt, step):
    snaps = os.path.join(mnt, ".snapshots")
    if not os.path.isdir(snaps):
        return "no .snapshots: no snapshot taken"
    try:
        os.mkdir(os.path.join(snaps, f"step-{step}"))
        return f"snapshot .snapshots/step-{step}"
    except OSError as e:
        return f"snapshot step-{step} failed ({e.strerror})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mnt")
    ap.add_argument("--batches", type=int, default=600)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--items", type=int, default=5000)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    rng = np.random.default_rng(a.seed)
    true_u = rng.standard_normal((a.users, DIM)).astype(np.float32)
    true_i = rng.standard_normal((a.items, DIM)).astype(np.float32)
    true_u /= np.linalg.norm(true_u, axis=1, keepdims=True)
    true_i /= np.linalg.norm(true_i, axis=1, keepdims=True)
    draw_u, draw_i = zipf_sampler(a.users, 0.99, rng), zipf_sampler(a.items, 0.99, rng)

    def make_batch():
        u, i = draw_u(a.batch_size), draw_i(a.batch_size)
        logit = 6.0 * np.sum(true_u[u] * true_i[i], axis=1)
        y = (rng.random(a.batch_size) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        return u, i, y

    users, items = Table(a.mnt, "user.emb"), Table(a.mnt, "item.emb")
    b = Batch(a.mnt)
    print(f"training on {a.mnt}: {a.batches} batches of {a.batch_size} clicks, "
          f"{a.users} users x {a.items} items, Zipf(0.99), dim {DIM}, row-wise Adagrad lr {a.lr}")
    nxt = make_batch()
    b.prefetch(users, np.unique(nxt[0]))
    b.prefetch(items, np.unique(nxt[1]))
    losses, rows_moved, t0 = [], 0, time.time()
    for step in range(1, a.batches + 1):
        u, i, y = nxt
        uu, ui = np.unique(u, return_inverse=True)
        iu, ii = np.unique(i, return_inverse=True)
        U, I = b.gather(users, uu), b.gather(items, iu)
        nxt = make_batch()  # look ahead: the daemon pins these rows meanwhile
        b.prefetch(users, np.unique(nxt[0]))
        b.prefetch(items, np.unique(nxt[1]))
        for R in (U, I):  # holes read as zeros: rows on first use
            fresh = ~R.any(axis=1)
            R[fresh, :DIM] = rng.standard_normal((fresh.sum(), DIM)) * 0.1
        s = np.sum(U[ui, :DIM] * I[ii, :DIM], axis=1)
        p = 1 / (1 + np.exp(-s))
        losses.append(float(-np.mean(y * np.log(p + 1e-7) + (1 - y) * np.log(1 - p + 1e-7))))
        g = (p - y)[:, None]
        gu = np.zeros((len(uu), DIM), np.float32)
        gi = np.zeros((len(iu), DIM), np.float32)
        np.add.at(gu, ui, g * I[ii, :DIM])
        np.add.at(gi, ii, g * U[ui, :DIM])
        for R, G in ((U, gu), (I, gi)):  # row-wise Adagrad: the accumulator is column DIM
            R[:, DIM] += np.mean(G * G, axis=1)
            R[:, :DIM] -= a.lr * G / np.sqrt(R[:, DIM:] + 1e-6)
        b.scatter(users, uu, U)
        b.scatter(items, iu, I)
        rows_moved += 2 * (len(uu) + len(iu))
        if step % a.every == 0:
            print(f"step {step:5d}  loss {np.mean(losses[-a.every:]):.4f}  "
                  f"({rows_moved / (time.time() - t0):,.0f} rows/s gathered+scattered)  "
                  f"{set_batch_id(a.mnt, step)}; {snapshot(a.mnt, step)}", flush=True)
    first, last = np.mean(losses[:a.every]), np.mean(losses[-a.every:])
    print(f"loss {first:.4f} -> {last:.4f} over {a.batches} batches "
          f"({'decreased' if last < first else 'DID NOT DECREASE'})")
    return 0 if last < first else 1


if __name__ == "__main__":
    sys.exit(main())
