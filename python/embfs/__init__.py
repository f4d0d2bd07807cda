"""embfs: embedding tables on an embfs mount, from Python.

    import embfs
    m = embfs.Mount("/mnt/emb")
    t = m.create("user.emb", dim=64, dtype="f32", exist_ok=True)
    rows, present = t.gather([42, 7, 42], present=True)   # (3, 64) float32, [bool]
    t.scatter([42, 7], rows[:2] + 1)
    m.set_batch(1000); m.snapshot("step-1000")
    old = m.table("user.emb", snapshot="step-1000").gather([42])

Only ordinary file calls on the mount (README "Batched rows"): a table is a
file, a batch of rows moves through MNT/.embfs/rows.  Standard library and
numpy; torch is optional (embfs.torch, and gather/scatter accept tensors).

Threads and processes: every thread gets its own fd of .embfs/rows (a
request and its response belong to an fd), opened on first use; a process
made by fork() (a DataLoader worker) opens its own on first use and never
touches the parent's.  Errors are EmbfsError (an OSError: .errno, .strerror,
.filename = the table's path); bad arguments are also ValueError/TypeError.

The package's modules, each owning one job (this file only re-exports):
  errors.py    EmbfsError, BadArgument, BadType
  _wire.py     the byte formats of .embfs/rows, restore and delta; limits
  _conn.py     the request channel: per-thread, fork-safe fds of .embfs/rows
  _arrays.py   dtypes (numpy, torch, bf16 bits), aligned buffers, unique
  mount.py     Mount: tables, snapshots, restore, deltas, batch id, sync;
               Table: geometry, gather/scatter/prefetch, file calls on it
  init.py      Init: deterministic values of rows never written
  torch.py     embfs.torch (PyTorch modules and optimizers; imports torch)
  dist.py      embfs.dist (row-sharded tables over torch.distributed)
"""
from ._arrays import DTYPES, bf16_to_f32, f32_to_bf16, unique
from ._conn import close_all
from ._wire import MAX_BYTES, MAX_COUNT
from .errors import BadArgument, BadType, EmbfsError
from .init import Init
from .mount import Mount, Table

# The private names stay reachable as embfs._NAME, as before the split
# (tests use embfs._data_runs).
from ._arrays import _PAGE, _aligned, _bytes_view, _is_tensor, _torch, _torch_dtype  # noqa: F401
from ._conn import _Conn, _advance, _after_fork, _all_conns  # noqa: F401
from ._wire import _F_PRESENT, _GATHER, _HDR, _OFF_MAX, _PREFETCH, _ROW_ID_MAX, _SCATTER  # noqa: F401
from .errors import _oserror  # noqa: F401
from .init import _mix  # noqa: F401
from .mount import _data_runs, _libc  # noqa: F401

__all__ = ["close_all", "Mount", "Table", "EmbfsError", "BadArgument", "BadType", "Init", "unique",
           "bf16_to_f32", "f32_to_bf16", "DTYPES", "MAX_COUNT", "MAX_BYTES"]

# The public names keep "embfs" as their module, where they are documented
# and where pickles (an Init in a saved embfs.torch module) and tracebacks
# have always named them.
for _obj in (close_all, Mount, Table, EmbfsError, BadArgument, BadType, Init, unique, bf16_to_f32, f32_to_bf16):
    _obj.__module__ = __name__
del _obj
