"""embfs._wire: the byte formats of the mount's control files, as the
daemon reads and writes them (README "Batched rows", "Restore in place",
"Deltas"); no I/O here.

- .embfs/rows: a request is a header (_HDR, magic b"EMBB") then the row ids
  (little-endian uint64) and, for a scatter, the rows; a push has its
  parameters (_PUSH_HDR) before the ids and float32 gradients after them; a gather's response
  is the rows, then with _F_PRESENT a bitmap of the stored ones.  The
  limits of one request (MAX_COUNT, MAX_BYTES) and of row ids and offsets.
- .embfs/restore: the one-line report a restore or rollback answers.
- .embfs/delta: a header (_DELTA_HDR, magic b"EMBD") then the changed and
  deleted row ids.
"""
import struct

import numpy as np

_HDR = struct.Struct("<4sIQIIQ")  # magic, op, table inode, count, flags, total length
_GATHER, _SCATTER, _PREFETCH, _PUSH, _MULTI = 1, 2, 3, 4, 5
# a MULTI's part (struct embfs_batch_sub): table inode, op, count, flags, 0
_SUB = struct.Struct("<QIIII")
MAX_TABLES = 1024            # parts of a MULTI request
MAX_MULTI = 256 << 20        # bytes of a MULTI request, and of its response
_F_INIT = 2
# an init spec (struct embfs_batch_init): kind, columns, seed, p, q, fill
_INIT = struct.Struct("<IIQddd")
# a push's parameters (struct embfs_batch_push): optimizer, weight columns,
# step, lr, eps, beta1, beta2, weight decay, then an init spec
_PUSH_HDR = struct.Struct("<IIQddddd" + _INIT.format[1:])
OPTIMIZERS = {"sgd": 1, "rowwise_adagrad": 2, "adagrad": 3, "adam": 4}
_INIT_KINDS = {"uniform": 1, "normal": 2, "constant": 3}
_F_PRESENT = 1
MAX_COUNT = 65536            # row ids per request (include/embfs/batch.h)
MAX_BYTES = 64 << 20         # count * row_size per request
_OFF_MAX = (1 << 63) - 1
# The largest row id a pool stores (a row version keeps 48 bits of its id:
# include/embfs/layout.h EMB_ROW_ID_MAX); writes past it get EFBIG.
_ROW_ID_MAX = (1 << 48) - 2

# .embfs/delta's answer: magic, row size, batch, B's file size, changed and
# deleted ids that follow (uint64 each)
_DELTA_HDR = struct.Struct("<4sIQQQQ")


def _request(op, ino, count, body, flags=0):
    """The header of a request on .embfs/rows for COUNT rows of table inode
    INO whose body is the byte buffers BODY (the ids, then any rows):
    (header bytes, total length)."""
    total = _HDR.size + sum(len(p) for p in body)
    return _HDR.pack(b"EMBB", op, ino, count, flags, total), total


def _present_len(n):
    """Bytes of the stored-rows bitmap that follows n gathered rows."""
    return (n + 7) // 8


def _present(bits, n):
    """The stored-rows bitmap of n rows as a bool array (bit i of byte i/8,
    least significant first)."""
    return np.unpackbits(np.frombuffer(bits, np.uint8, _present_len(n)),
                         count=n, bitorder="little").view(bool)


def _restore_report(line):
    """.embfs/restore's answer ("...: key value key value ... -- text") as
    a dict: ms a float, counts ints, other values strings."""
    words = line.split(": ", 1)[1].split(" -- ")[0].split()
    out = {}
    for k, v in zip(words[::2], words[1::2]):
        out[k] = float(v) if k == "ms" else int(v) if v.isdigit() else v
    return out


def _state_cols(optimizer, dim):
    """The state columns an optimizer keeps after dim weights."""
    return {"sgd": 0, "rowwise_adagrad": 1, "adagrad": dim, "adam": 2 * dim}[optimizer]


def _init_fields(init):
    """An init spec's fields (init: an embfs.Init or None: zeros)."""
    if init is None:
        return (0, 0xFFFFFFFF, 0, 0.0, 0.0, 0.0)
    cols = 0xFFFFFFFF if init.cols is None else min(int(init.cols), 0xFFFFFFFF)
    return (_INIT_KINDS[init.kind], cols, init.seed & 0xFFFFFFFFFFFFFFFF, init.p, init.q, float(init.fill))


def _init_spec(init):
    """An init spec's bytes."""
    return _INIT.pack(*_init_fields(init))


def _push_params(optimizer, dim, lr, eps, betas, weight_decay, step, init):
    """A push's parameter bytes (init: an embfs.Init or None: zeros)."""
    return _PUSH_HDR.pack(OPTIMIZERS[optimizer], dim, step, lr, eps, betas[0], betas[1], weight_decay,
                          *_init_fields(init))
