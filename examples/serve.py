#!/usr/bin/python3
"""Serve recommendations from embfs tables with numpy.memmap, as a serving process would.

    /usr/bin/python3 examples/serve.py DIR [USER_ID ...]

DIR holds user.emb and item.emb: the mount root (the live tables) or a
snapshot of them (MNT/.snapshots/step-N, read-only, as of its mkdir).  Each
table is mapped with numpy.memmap (mmap of the file: rows come from the
kernel page cache, filled by embfs on first touch); its geometry comes from
the user.embfs.dim / user.embfs.dtype extended attributes.  Row r is simply
table[r]; ids past the end of the file are holes and read as zeros.  For
each user id (default: 0 1 2, the most active users of train.py/train.c) it
prints the user's row and the 5 items with the highest score (the dot product
of the first 16 columns; the 17th is the trainer's Adagrad state).
"""
import os
import sys

import numpy as np

DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8,
          "u8": np.uint8, "i16": np.int16, "i32": np.int32}
WEIGHTS = 16


def open_table(path):
    dim = int(os.getxattr(path, "user.embfs.dim"))
    dtype = os.getxattr(path, "user.embfs.dtype").decode()
    if dtype not in DTYPES:
        sys.exit(f"{path}: dtype {dtype} is not handled by this example")
    row_bytes = dim * np.dtype(DTYPES[dtype]).itemsize
    rows = os.stat(path).st_size // row_bytes
    if rows == 0:
        sys.exit(f"{path}: no rows (train first)")
    return np.memmap(path, dtype=DTYPES[dtype], mode="r", shape=(rows, dim))


def row(table, rid):
    return np.asarray(table[rid]) if rid < len(table) else np.zeros(table.shape[1], table.dtype)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    ids = [int(x) for x in sys.argv[2:]] or [0, 1, 2]
    users, items = open_table(os.path.join(d, "user.emb")), open_table(os.path.join(d, "item.emb"))
    print(f"{d}: memmap user.emb {users.shape[0]} rows x {users.shape[1]} {users.dtype}, "
          f"item.emb {items.shape[0]} rows x {items.shape[1]} {items.dtype}")
    w = np.asarray(items[:, :WEIGHTS], dtype=np.float32)
    for uid in ids:
        u = row(users, uid)[:WEIGHTS].astype(np.float32)
        if not u.any():
            print(f"  user {uid}: no row (a hole): nothing to recommend")
            continue
        scores = w @ u
        top = np.argpartition(-scores, 5)[:5]
        top = top[np.argsort(-scores[top])]
        shown = " ".join(f"{x:+.3f}" for x in u[:4])
        recs = ", ".join(f"{i} ({scores[i]:+.2f})" for i in top)
        print(f"  user {uid}: row [{shown} ...]  top items: {recs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
