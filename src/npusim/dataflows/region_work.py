"""What every region of the input-reuse device has to do, counted from 0/1 masks.

For each stride phase and kernel part (``phases``), the phase input is cut into
regions of ``rh x rw`` pixels (Fig. 5/7). For region ``t``, kernel ``k`` and a
group of ``l`` channels (the region's depth), a weight cycle ``(group, tap)``
runs unless it is skipped: all ``l`` weights of that tap are zero (claims 6/15),
or all ``l`` channel slices of the region are zero (the compressed stream says so:
claim 7, input-side skipping). With ``l = 1`` the count is a matrix product,

    cycles[n, k, t] = sum_c any(x[n, c, region t]) * nonzero_taps[k, c],

done with BLAS. Jobs are laid out in the order the device runs them: region-major
(image, phase, region row, region column), then conv group, then kernel set of
``P`` kernels (one per processing unit), so the arrays feed ``operation_units``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir import ConvLayer
from ..reference import pad_input
from . import compressed_ifm
from .operation_units import Transfers
from .phases import Part, Phase, phases


@dataclass(frozen=True)
class Geometry:
    """The device's shape as the counts need it."""

    region: tuple[int, int]
    depth: int
    pus: int
    part_rows: int


@dataclass
class Work:
    """Jobs, transfers and skip counts of one layer."""

    slot_cycles: np.ndarray
    transfers: Transfers
    dense_cycles: int
    weight_only_cycles: int
    products: int
    sram_ifmap_words: int
    sram_ifmap_bitmaps: int
    regions: int
    pofm_peak: tuple[int, int]


def part_weights(w_mask: np.ndarray, layer: ConvLayer, part: Part) -> np.ndarray:
    """Non-zero flags of the part's taps, G x Kg x Cg x taps."""
    wp = w_mask[:, :, part.r, part.s]
    return wp.reshape(layer.groups, layer.Kg, layer.Cg, -1)


def active_cycles(active: np.ndarray, wp: np.ndarray, depth: int) -> np.ndarray:
    """Non-skipped weight cycles N x G x Kg x T of one part.

    ``active`` is N x G x Cg x T (region channel slice has a non-zero), ``wp``
    G x Kg x Cg x taps; channels go ``depth`` at a time (one cycle per group and tap).
    """
    a = active.astype(np.float32)
    if depth == 1:
        return np.rint(np.matmul(wp.sum(axis=3, dtype=np.float32), a)).astype(np.int64)
    g, kg, cg, taps = wp.shape
    out = 0
    for c0 in range(0, cg, depth):
        wj = wp[:, :, c0:c0 + depth].transpose(0, 1, 3, 2).reshape(g, kg * taps, -1)
        hit = np.matmul(wj.astype(np.float32), a[:, :, c0:c0 + depth]) > 0
        out = out + hit.reshape(a.shape[0], g, kg, taps, -1).sum(axis=3)
    return np.asarray(out, np.int64)


def channel_groups(wp: np.ndarray, depth: int) -> np.ndarray:
    """``wp`` (G x Kg x Cg x taps) with channels in groups of ``depth``: any non-zero per group,
    G x Kg x ceil(Cg / depth) x taps."""
    g, kg, cg, taps = wp.shape
    groups = math.ceil(cg / depth)
    padded = np.zeros((g, kg, groups * depth, taps), bool)
    padded[:, :, :cg] = wp
    return padded.reshape(g, kg, groups, depth, taps).any(axis=3)


def weight_only_cycles(wp: np.ndarray, depth: int) -> int:
    """Weight cycles per region summed over kernels, skipping zero weights only."""
    return int(np.count_nonzero(channel_groups(wp, depth)))


def kernel_sets(per_kernel: np.ndarray, pus: int) -> np.ndarray:
    """N x G x Kg x T x ... -> N x T x (G * sets) x P x ... (zero-padded kernel slots)."""
    n, g, kg = per_kernel.shape[:3]
    sets = math.ceil(kg / pus)
    pad = [(0, 0)] * per_kernel.ndim
    pad[2] = (0, sets * pus - kg)
    x = np.pad(per_kernel, pad).reshape(n, g, sets, pus, *per_kernel.shape[3:])
    x = np.moveaxis(x, 4, 1)
    return x.reshape(n, x.shape[1], g * sets, pus, *per_kernel.shape[4:])


def phase_work(layer, xp_mask, w_mask, ph: Phase, geo: Geometry, max_parts: int):
    """Per-phase arrays: slot cycles, transfer flags and pixels, and scalar counts."""
    pm = ph.input(xp_mask)
    n = pm.shape[0]
    counts = compressed_ifm.block_counts(pm, geo.region)
    T = counts.shape[2] * counts.shape[3]
    cnt = counts.reshape(n, layer.groups, layer.Cg, T)
    cyc = np.zeros((n, layer.groups, layer.Kg, T, max_parts), np.int64)
    pix = np.zeros(max_parts, np.int64)
    dense = wonly = products = 0
    for i, part in enumerate(ph.parts):
        wp = part_weights(w_mask, layer, part)
        cyc[..., i] = active_cycles(cnt > 0, wp, geo.depth)
        pix[i] = np.prod(part.pofm_shape(geo.region))
        dense += math.ceil(layer.Cg / geo.depth) * wp.shape[3] * layer.K
        wonly += weight_only_cycles(wp, geo.depth)
        per_channel = cnt.sum(axis=(0, 3)).astype(np.int64)  # G x Cg
        products += int((wp.sum(axis=(1, 3)) * per_channel).sum())
    sets = kernel_sets(cyc, geo.pus)  # N x T x J x P x parts
    bitmaps = n * layer.C * T
    scalars = (dense * n * T, wonly * n * T, products, int(counts.sum()), bitmaps, n * T)
    return sets, np.broadcast_to(pix, sets.shape), scalars


def transfers(flags_pixels: list, layer: ConvLayer, pus: int) -> Transfers:
    """Sequence of transfers (job, slot, part order) from per-phase cycles and pixels."""
    cyc = np.concatenate([c for c, _ in flags_pixels], axis=1)
    pix = np.concatenate([p for _, p in flags_pixels], axis=1)
    jobs_per_region = cyc.shape[2]
    cyc = cyc.reshape(-1, pus, cyc.shape[-1])
    job, slot, part = np.nonzero(cyc)
    sets = jobs_per_region // layer.groups
    g, kset = (job % jobs_per_region) // sets, (job % jobs_per_region) % sets
    kernel = g * layer.Kg + kset * pus + slot
    return Transfers(job, kernel, pix.reshape(cyc.shape)[job, slot, part])


def region_work(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray,
                geo: Geometry) -> Work:
    """Jobs, transfers and skip counts of ``layer`` from the non-zero masks of x and w."""
    xp = pad_input(x_mask, layer, False)
    phs = phases(layer, geo.part_rows)
    max_parts = max(len(ph.parts) for ph in phs)
    per = [phase_work(layer, xp, w_mask, ph, geo, max_parts) for ph in phs]
    sets = np.concatenate([s for s, _, _ in per], axis=1)  # N x T x J x P x parts
    slot_cycles = sets.sum(axis=-1).reshape(-1, geo.pus)
    sc = np.array([s for _, _, s in per], np.int64).sum(axis=0)
    pofm = [part.pofm_shape(geo.region) for ph in phs for part in ph.parts]
    return Work(slot_cycles=slot_cycles,
                transfers=transfers([(s, p) for s, p, _ in per], layer, geo.pus),
                dense_cycles=int(sc[0]), weight_only_cycles=int(sc[1]), products=int(sc[2]),
                sram_ifmap_words=int(sc[3]), sram_ifmap_bitmaps=int(sc[4]),
                regions=int(sc[5]), pofm_peak=max(pofm, key=lambda s: s[0] * s[1]))
