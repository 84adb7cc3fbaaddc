"""What a sparse-pairs layer's weights fix before any feature is seen, computed once.

The plan of a layer on the sparse-pairs machine (``grouping``: weight groups of kernels and
slices of output pixels, dealt to the processor groups) depends only on the kernels'
non-zero counts, the layer's geometry and the machine; so do the kernel loads, the
receptive-field vector bits broadcast and, of the layer's steps for the memory model
(``sparse_pairs.steps``), everything but their cycles and their feature bytes: which wave
and chunk of pixels each step is, the weight groups each wave loads, the outputs each step
writes and the kernel loads it makes. ``layout`` builds them once per read-only weight
mask (``npusim.derived``: a network's weights), geometry and machine: a network's later
calls, and the arch points of a sweep that keep the array, reuse them.

Steps: a wave is the ``processor_groups`` work units run side by side (unit ``u`` in wave
``u // processor_groups``); a step is one output row's worth (``Q`` pixels, a *chunk*) of
every unit's slice in the wave. Arrays are read-only.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..arch.sections.sparse_pairs import SparsePairs as Params
from ..derived import derived, frozen
from ..ir import ConvLayer
from . import bitmap, grouping
from .base import element_bytes

KEPT = 8  # machines whose layouts each weight mask keeps (an arch sweep's latest)
_KEPT_LOCK = threading.Lock()


@dataclass(frozen=True, eq=False)
class Layout:
    """The weight-fixed part of a layer's counts (see the module doc).

    ``plan`` the weight groups and slices; ``kernel_nonzeros`` (K,) every kernel's non-zero
    weights; ``occupied`` (units,) the kernels each unit's weight group holds;
    ``field_bits`` the receptive-field vector bits broadcast; ``loads`` what the kernel
    stores take in (``kernel_loads``, bytes and counts). Per step, for the memory model
    (waves x ``chunks`` positions, of which ``keep`` those some unit has pixels for):
    ``part`` its chunk, ``filter`` its wave at the wave's first step (else -1) and
    ``filter_bytes`` that wave's weight groups, ``ofmap`` its index (the output block) and
    ``ofmap_bytes`` the outputs it writes, ``load_bytes`` its kernel loads into the
    processors' stores, ``ifmap`` the block of stored features it reads: its chunk of the
    set of conv groups its wave's kernels belong to, ``set * chunks + part`` (sets numbered
    as the waves first meet them; one set on an ungrouped layer), whose groups
    ``set_groups`` holds (sets x G, bool); and ``chunk_pixels`` (chunks,) each chunk's
    pixels over all slices; ``load_total`` all steps' kernel load bytes.
    """

    plan: grouping.Plan
    kernel_nonzeros: np.ndarray
    occupied: np.ndarray
    field_bits: int
    loads: dict
    chunks: int
    keep: np.ndarray
    part: np.ndarray
    filter: np.ndarray
    filter_bytes: np.ndarray
    ofmap: np.ndarray
    ofmap_bytes: np.ndarray
    load_bytes: np.ndarray
    set_groups: np.ndarray
    ifmap: np.ndarray
    chunk_pixels: np.ndarray
    load_total: int


def layout(layer: ConvLayer, kernel_nonzeros: np.ndarray, p: Params) -> Layout:
    """The layout of ``layer`` with kernels of ``kernel_nonzeros`` non-zero weights (K,) on
    machine ``p``: made once per read-only ``kernel_nonzeros``, geometry and machine, the
    last ``KEPT`` machines' kept."""
    kept = derived(kernel_nonzeros, "sparse-pairs layouts", dict)
    key = (layer.input_shape, layer.weight_shape, layer.stride, layer.padding, layer.dilation,
           layer.groups, layer.dtype, p)  # every field of the layer but its name and bias
    with _KEPT_LOCK:
        made = kept.pop(key, None)
    made = made or _layout(layer, np.array(kernel_nonzeros, np.int64), p)
    with _KEPT_LOCK:  # a sweep's threads may share a network's weights
        kept[key] = made  # the latest last
        while len(kept) > KEPT:
            del kept[next(iter(kept))]
    return made


def _layout(layer: ConvLayer, nnz: np.ndarray, p: Params) -> Layout:
    """The layout, made (``nnz`` a copy: the kept layout must not hold the array it is
    kept with, ``derived``'s key)."""
    pixels = layer.N * layer.P * layer.Q
    pl = grouping.plan(nnz, pixels, p.processor_groups, p.processors_per_group, p.grouping,
                       p.dealing)
    u = np.arange(pl.units)
    wg, lo, hi = u // pl.slices, pl.bounds[u % pl.slices], pl.bounds[u % pl.slices + 1]
    chunks = -(-int((hi - lo).max()) // layer.Q)
    ends = np.minimum(lo[:, None] + layer.Q * np.arange(1, chunks + 1), hi[:, None])
    chunk = np.diff(np.concatenate([lo[:, None], ends], axis=1), axis=1)  # units x chunks
    keep = _by_wave(chunk, p.processor_groups) > 0
    wave, part = np.divmod(np.flatnonzero(keep), chunks)
    fit, stream = group_loads(layer, p, pl.groups, nnz)
    loads = stream[wg][:, None] * chunk
    loads[:, 0] += fit[wg]
    held = held_kernels(pl.groups)
    elem = element_bytes(layer.dtype)
    sets, set_of_wave = wave_sets(layer, pl, p.processor_groups)
    load_bytes = _by_wave(loads, p.processor_groups)[keep]
    return Layout(
        plan=pl, kernel_nonzeros=frozen(nnz), occupied=frozen(held[wg]),
        field_bits=_field_bits(layer, pl), loads=kernel_loads(layer, p, pl, nnz),
        chunks=chunks, keep=frozen(keep), part=frozen(part),
        filter=frozen(np.where(part == 0, wave, -1)),
        filter_bytes=frozen(_wave_weight_bytes(layer, pl, nnz, wg, p.processor_groups)[wave]),
        ofmap=frozen(np.arange(len(part))),
        ofmap_bytes=frozen(_by_wave(chunk * held[wg][:, None] * elem, p.processor_groups)[keep]),
        load_bytes=frozen(load_bytes), set_groups=frozen(sets),
        ifmap=frozen(set_of_wave[wave] * chunks + part),
        chunk_pixels=frozen(chunk[:pl.slices].sum(axis=0)), load_total=int(load_bytes.sum()))


def wave_sets(layer: ConvLayer, pl: grouping.Plan,
              processor_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct sets of conv groups the waves' kernels belong to, sets x G, bool, in
    the order the waves first meet them; each wave's set): the channels a wave reads."""
    waves = -(-pl.units // processor_groups)
    if layer.groups == 1:
        return np.ones((1, 1), bool), np.zeros(waves, np.int64)
    kernels = pl.groups[np.arange(pl.units) // pl.slices]  # units x size
    wave = np.repeat(np.arange(pl.units) // processor_groups, kernels.shape[1])
    used = kernels.ravel() != grouping.EMPTY
    member = np.zeros((waves, layer.groups), bool)
    member[wave[used], kernels.ravel()[used] // layer.Kg] = True
    sets, first, inverse = np.unique(member, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return sets[order], rank[inverse.ravel()]


def kernel_bytes(layer: ConvLayer, kernel_nonzeros: np.ndarray) -> np.ndarray:
    """Bytes of every kernel as a processor stores it (K,): its bit vector in whole bytes
    and its non-zero weights."""
    return (bitmap.bitmap_bytes(layer.Cg * layer.R * layer.S)
            + np.asarray(kernel_nonzeros, np.int64) * element_bytes(layer.dtype))


def held_kernels(groups: np.ndarray) -> np.ndarray:
    """Kernels each weight group holds (weight groups,)."""
    return np.count_nonzero(groups != grouping.EMPTY, axis=1)


def _held_bytes(layer: ConvLayer, groups: np.ndarray, nnz: np.ndarray) -> np.ndarray:
    """Bytes of the kernel in each slot of each weight group (weight groups x size; 0 for
    an empty slot)."""
    size = kernel_bytes(layer, nnz)
    return np.where(groups != grouping.EMPTY, size[np.maximum(groups, 0)], 0)


def group_loads(layer: ConvLayer, p: Params, groups: np.ndarray,
                nnz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per weight group: (bytes of its kernels that fit a processor's store, loaded once per
    unit; bytes of those that do not, streamed again for every pixel of a unit)."""
    held = _held_bytes(layer, groups, nnz)
    fits = held <= p.kernel_store_bytes
    return (np.where(fits, held, 0).sum(axis=1), np.where(fits, 0, held).sum(axis=1))


def kernel_loads(layer: ConvLayer, p: Params, pl: grouping.Plan,
                 nnz: np.ndarray) -> dict[str, int]:
    """What the kernel stores take in over the layer, bytes: every unit loads each of its
    kernels once if it fits ``kernel_store_bytes``, else streams it in pieces of that size
    for every pixel (``kernel_load_bytes``, of which ``kernel_bitmap_bytes`` bit vectors);
    the kernels that do not fit, and the largest kernel (the store a layer needs)."""
    fit, stream = group_loads(layer, p, pl.groups, nnz)
    pixels = layer.N * layer.P * layer.Q
    size = kernel_bytes(layer, nnz)
    vector = bitmap.bitmap_bytes(layer.Cg * layer.R * layer.S)
    streamed = size > p.kernel_store_bytes
    loads = len(nnz) * pl.slices + int(streamed.sum()) * (pixels - pl.slices)
    return {"kernel_load_bytes": int(fit.sum()) * pl.slices + int(stream.sum()) * pixels,
            "kernel_bitmap_bytes": loads * vector,
            "streamed_kernels": int(streamed.sum()),
            "peak_kernel_bytes": int(size.max())}


def _field_bits(layer: ConvLayer, pl: grouping.Plan) -> int:
    """Receptive-field vector bits broadcast: one vector per step and distinct conv group
    among the weight group's kernels."""
    conv_groups = np.where(pl.groups != grouping.EMPTY, pl.groups // layer.Kg, -1)
    ordered = np.sort(conv_groups, axis=1)
    distinct = (ordered[:, :1] >= 0).sum() + ((ordered[:, 1:] != ordered[:, :-1])
                                              & (ordered[:, 1:] >= 0)).sum()
    return layer.Cg * layer.R * layer.S * int(distinct) * layer.N * layer.P * layer.Q


def wave_grid(per_unit: np.ndarray, groups: int) -> np.ndarray:
    """Per-unit values (units x columns) laid out by wave and processor group (unit ``u`` in
    wave ``u // groups`` on group ``u % groups``): waves x groups x columns, int64, zero
    where the last wave has no unit. Summed over axis 1: per wave; over axis 0: per
    processor group."""
    waves = -(-len(per_unit) // groups)
    out = np.zeros((waves * groups, *per_unit.shape[1:]), np.int64)
    out[:len(per_unit)] = per_unit
    return out.reshape(waves, groups, *per_unit.shape[1:])


def _by_wave(per_unit: np.ndarray, groups: int) -> np.ndarray:
    """Per-unit, per-chunk values (units x chunks) summed over each wave's units
    (waves * chunks,)."""
    return wave_grid(per_unit, groups).sum(axis=1).ravel()


def _wave_weight_bytes(layer: ConvLayer, pl: grouping.Plan, nnz: np.ndarray, wg: np.ndarray,
                       groups: int) -> np.ndarray:
    """DRAM bytes of the weight groups each wave loads (waves,): per kernel its bit vector
    and its non-zero weights, each distinct weight group of the wave once."""
    held = _held_bytes(layer, pl.groups, nnz).sum(axis=1)
    wave = np.arange(len(wg)) // groups
    pairs = np.unique(wave * len(pl.groups) + wg)
    return np.bincount(pairs // len(pl.groups), held[pairs % len(pl.groups)],
                       minlength=wave[-1] + 1).astype(np.int64)
