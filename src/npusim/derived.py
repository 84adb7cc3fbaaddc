"""Data derived from a read-only array, computed once per array and reused by every later call.

A network's weights do not change between calls, so what the machines derive from them (the
non-zero mask, the int8 weights and scales, the packed mask words, the per-tap and per-kernel
non-zero counts) need not be recomputed by each ``simulate`` or each arch point of a sweep.
``derived(a, key, make)`` keeps ``make()``'s value with ``a`` for ``key``, but only when ``a``
cannot change under it: ``a`` and every array it views are read-only (``frozen`` makes an
array so: ``ops.Conv`` freezes its weights and bias when it is built). For any other array it
calls ``make()`` every time: a cached value can never be stale because the data cannot be written
through numpy (only by turning the write flag back on by hand, which the flag's owner
should not do while the array is in a network). An entry lives as long as its array
(``weakref.finalize``); the derived arrays are returned read-only, so they key their own
derived data in turn.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

_store: dict[int, dict] = {}  # id(array) -> {key: value}, while the array lives


def is_frozen(a) -> bool:
    """Whether no one can write ``a``'s data through numpy: it and every array it views are
    read-only, and its memory is numpy's own or immutable bytes."""
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        a = a.base
    return a is None or isinstance(a, bytes)


def frozen(a: np.ndarray) -> np.ndarray:
    """``a`` read-only: itself, flagged, when it owns its data; else a read-only copy (a view
    of writeable data, or memory numpy does not own, could change under a cache)."""
    a = np.asarray(a)
    if is_frozen(a):
        return a
    if a.base is not None:
        a = a.copy()
    a.setflags(write=False)
    return a


def derived(a: np.ndarray, key, make: Callable[[], object]):
    """``make()``, computed once for the read-only array ``a`` and ``key`` (whatever else it
    depends on), returned from the store on later calls; computed afresh on every call for an
    array that could be written (``is_frozen``). Arrays in the value should be read-only
    (``frozen``)."""
    if not is_frozen(a):
        return make()
    entry = _store.get(id(a))
    if entry is None:
        entry = _store[id(a)] = {}
        weakref.finalize(a, _store.pop, id(a), None)
    if key not in entry:
        entry[key] = make()
    return entry[key]


def int8_weights(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``quant.quantize_weights(w)`` (int8 weights, per-output-channel scales), read-only,
    once per read-only ``w``: what an int8 run's convs multiply, and what its figures count."""
    from . import quant

    return derived(w, "int8", lambda: tuple(map(frozen, quant.quantize_weights(w))))


def weight_mask(w: np.ndarray) -> np.ndarray:
    """``w != 0``, read-only, once per read-only ``w``."""
    return derived(w, "mask", lambda: _nonzero(w))


def _nonzero(w: np.ndarray) -> np.ndarray:
    return frozen(w != 0)


def laid_out(w: np.ndarray, dtype, shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    """``w`` as ``dtype``, reshaped to ``shape`` with its axes in the order ``axes``, contiguous
    and read-only: a machine's layout of its weights in the order its datapath reads them,
    made once per read-only ``w``, dtype, shape and axes. Laying out a large tensor costs
    more than the arithmetic that reads it (VGG-16's fc6, 4096 x 25088, takes about 0.8 s
    to transpose on one core)."""
    key = ("layout", np.dtype(dtype).str, tuple(shape), tuple(axes))
    return derived(w, key, lambda: frozen(_lay_out(w, dtype, shape, axes)))


def _lay_out(w: np.ndarray, dtype, shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(w.astype(dtype, copy=False).reshape(shape).transpose(axes))


def kernel_blocks(w: np.ndarray, dtype, groups: int, width: int, taps: str = "crs") -> np.ndarray:
    """The K x Cg x R x S weights ``w`` as ``dtype`` in blocks of ``width`` kernels of a conv
    group, each block's weights of one tap side by side and its taps in the order ``taps``
    ("crs": channel, row, column; "rsc": row, column, channel): G x ceil(Kg / width) x
    (the three tap axes in that order) x width, the last block's missing kernels zero;
    64-byte aligned, contiguous and read-only, once per read-only ``w``, dtype, groups,
    width and order (a machine that sums a block of kernels in vector registers reads its
    weights as one run)."""
    key = ("kernel blocks", np.dtype(dtype).str, groups, width, taps)
    return derived(w, key, lambda: _blocks(w, dtype, groups, width, taps))


_TAP_AXES = {"crs": (3, 4, 5), "rsc": (4, 5, 3)}  # of (G, blocks, width, Cg, R, S)


def _blocks(w: np.ndarray, dtype, groups: int, width: int, taps: str) -> np.ndarray:
    K, Cg, R, S = w.shape
    kg = K // groups
    blocks = -(-kg // width)
    padded = np.zeros((groups, blocks * width, Cg, R, S), dtype)
    padded[:, :kg] = w.reshape(groups, kg, Cg, R, S)
    laid = padded.reshape(groups, blocks, width, Cg, R, S).transpose(0, 1, *_TAP_AXES[taps], 2)
    out = _aligned_empty(laid.shape, dtype)
    out[...] = laid
    view = out  # read-only down to the aligned buffer, which nothing else holds (``frozen``
    while isinstance(view, np.ndarray):  # would copy a view of writeable memory, and lose
        view.setflags(write=False)  # the alignment)
        view = view.base
    return out


def _aligned_empty(shape: tuple[int, ...], dtype, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``align``-byte boundary
    (numpy promises 16): a vector register's load then reads one cache line, not two."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    raw = np.empty(size * dtype.itemsize + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + size * dtype.itemsize].view(dtype).reshape(shape)
