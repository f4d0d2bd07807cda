"""embfs._arrays: the array side of rows, numpy and (optional) torch.

The numpy dtype of each embfs dtype (DTYPES) and the torch one
(_torch_dtype); bf16 as int16 raw bits and its conversions; page-aligned
buffers and byte views that requests read into and write from; telling a
tensor from an array without importing torch (_is_tensor), importing it only
when one is used (_torch); unique for numpy or torch ids.
"""
import numpy as np

_PAGE = 4096

# embfs dtype -> numpy dtype of the array gather returns.  numpy has no
# bfloat16: bf16 rows come as int16 holding the raw bits (embfs.torch views
# them as torch.bfloat16; bf16_to_f32 converts).
DTYPES = {"f32": np.dtype("<f4"), "f16": np.dtype("<f2"), "bf16": np.dtype("<i2"),
          "f64": np.dtype("<f8"), "i8": np.dtype("i1"), "u8": np.dtype("u1"),
          "i16": np.dtype("<i2"), "i32": np.dtype("<i4")}


def _aligned(nbytes):
    """A page-aligned uint8 array of nbytes (a response lands in whole pages:
    fewer FUSE reads)."""
    raw = np.empty(nbytes + _PAGE, np.uint8)
    off = -raw.ctypes.data % _PAGE
    return raw[off:off + nbytes]


def _bytes_view(a):
    """A writable or read-only byte memoryview of a C-contiguous ndarray."""
    return memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")


def _torch():
    import torch
    return torch


def _is_tensor(x):
    t = type(x)
    return t.__module__ == "torch" and t.__name__ in ("Tensor", "Parameter") or \
        (t.__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "numpy"))


_TORCH_DTYPES = None


def _torch_dtype(name):
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        torch = _torch()
        _TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                         "f64": torch.float64, "i8": torch.int8, "u8": torch.uint8,
                         "i16": torch.int16, "i32": torch.int32}
    return _TORCH_DTYPES[name]


def unique(ids):
    """(unique ids ascending, inverse) with unique[inverse] == ids (flattened);
    numpy or torch like ids."""
    if _is_tensor(ids):
        u, inv = _torch().unique(ids.reshape(-1), sorted=True, return_inverse=True)
        return u, inv
    u, inv = np.unique(np.asarray(ids).reshape(-1), return_inverse=True)
    return u, inv


def bf16_to_f32(a):
    """int16 raw bfloat16 bits (as gather returns them) -> float32."""
    return (np.asarray(a).view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(a):
    """float32 -> int16 raw bfloat16 bits, rounded to nearest even."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(np.asarray(a, np.float32))
    r = np.where(nan, np.uint32(0x7FC0), r)
    return r.astype(np.uint16).view(np.int16)
