"""What every region of the input-reuse device has to do, counted from 0/1 masks.

Every stride phase input (``phases``) is cut into regions of ``rh x rw`` pixels
on one grid (Fig. 5/7); region ``t`` of every phase feeds the same outputs, so a
job takes it through all phases. For region ``t``, kernel ``k`` and a
group of ``l`` channels (the region's depth), a weight cycle ``(group, tap)``
runs unless it is skipped: all ``l`` weights of that tap are zero (claims 6/15),
or all ``l`` channel slices of the region are zero (the compressed stream says so:
claim 7, input-side skipping). With ``l = 1`` the count is a matrix product,

    cycles[n, k, t] = sum_c any(x[n, c, region t]) * nonzero_taps[k, c],

done with BLAS. Jobs are laid out in the order the device runs them: region-major
(image, region row, region column), then conv group, then kernel set of
``P`` kernels (one per processing unit), so the arrays feed ``operation_units``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir import ConvLayer
from ..reference import pad_input
from . import compressed_ifm
from .operation_units import Transfers, reduce_last
from .phases import Part, Phase, Plan, plan


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


def part_weights(w_mask: np.ndarray, layer: ConvLayer, part: Part, taps) -> np.ndarray:
    """Non-zero flags of the part's taps ``taps`` (indices), G x Kg x Cg x taps."""
    wp = w_mask[:, :, part.r[taps], part.s[taps]]
    return wp.reshape(layer.groups, layer.Kg, layer.Cg, -1)


def grid_counts(xp_mask: np.ndarray, ph: Phase, grid: tuple[int, int],
                region: tuple[int, int]) -> np.ndarray:
    """Non-zero pixels per region and channel of one phase, N x C x Th x Tw, on the common
    region grid (``grid`` = rows, cols of the largest phase input)."""
    pm = ph.input(xp_mask)
    full = np.zeros(pm.shape[:2] + grid, bool)
    full[:, :, :pm.shape[2], :pm.shape[3]] = pm
    return compressed_ifm.block_counts(full, region)


def active_cycles(active: np.ndarray, wp: np.ndarray, depth: int,
                  taps: np.ndarray) -> np.ndarray:
    """Non-skipped weight cycles N x G x Kg x T of one part.

    ``active`` is N x G x Cg x T (region channel slice has a non-zero), ``wp``
    G x Kg x Cg x taps, ``taps`` its non-zero taps per kernel and channel (G x Kg x Cg,
    float32);
    channels go ``depth`` at a time (one cycle per group and tap).
    """
    a = active.astype(np.float32)
    if depth == 1:
        return np.rint(np.matmul(taps, a)).astype(np.int64)
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
    return int(np.count_nonzero(wp if depth == 1 else channel_groups(wp, depth)))


def kernel_sets(per_kernel: np.ndarray, pus: int) -> np.ndarray:
    """N x G x Kg x T x ... -> N x T x (G * sets) x P x ... (zero-padded kernel slots)."""
    n, g, kg = per_kernel.shape[:3]
    sets = math.ceil(kg / pus)
    x = np.zeros((n, g, sets * pus, *per_kernel.shape[3:]), per_kernel.dtype)
    x[:, :, :kg] = per_kernel
    x = x.reshape(n, g, sets, pus, *per_kernel.shape[3:])
    x = np.moveaxis(x, 4, 1)
    return x.reshape(n, x.shape[1], g * sets, pus, *per_kernel.shape[4:])


def part_cycles(layer, counts: list, w_mask, layout: Plan, geo: Geometry):
    """Weight cycles N x G x Kg x T x parts, and the dense, weight-only and product counts."""
    n, T = counts[0].shape[0], counts[0].shape[2] * counts[0].shape[3]
    cnt = [c.reshape(n, layer.groups, layer.Cg, T) for c in counts]
    cyc = np.zeros((n, layer.groups, layer.Kg, T, len(layout.parts)), np.int64)
    dense = wonly = products = 0
    for pi, part in enumerate(layout.parts):
        for i in range(len(layout.phases)):
            taps = part.of_phase(i)
            if not taps.size:
                continue
            wp = part_weights(w_mask, layer, part, taps)
            live = reduce_last(wp, np.add, np.float32)  # non-zero taps, G x Kg x Cg (exact)
            cyc[..., pi] += active_cycles(cnt[i] > 0, wp, geo.depth, live)
            dense += math.ceil(layer.Cg / geo.depth) * taps.size * layer.K * n * T
            wonly += weight_only_cycles(wp, geo.depth) * n * T
            per_channel = cnt[i].sum(axis=(0, 3)).astype(np.int64)  # G x Cg
            products += int((live.sum(axis=1, dtype=np.int64) * per_channel).sum())
    return cyc, dense, wonly, products


def transfers(sets: np.ndarray, pixels: np.ndarray, layer: ConvLayer, pus: int) -> Transfers:
    """Sequence of transfers (job, slot, part order) from the jobs' per-part cycles
    (N x T x J x P x parts) and each part's partial-OFM pixels."""
    jobs_per_region = sets.shape[2]
    job, slot, part = np.nonzero(sets.reshape(-1, pus, sets.shape[-1]))
    per_group = jobs_per_region // layer.groups
    g, kset = np.divmod(job % jobs_per_region, per_group)
    return Transfers(job, g * layer.Kg + kset * pus + slot, pixels[part])


def region_work(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray,
                geo: Geometry) -> Work:
    """Jobs, transfers and skip counts of ``layer`` from the non-zero masks of x and w."""
    layout = plan(layer, geo.part_rows)
    grid = tuple(math.ceil(e / r) * r for e, r in zip(layout.extent, geo.region, strict=True))
    xp = pad_input(x_mask, layer, False)
    counts = [grid_counts(xp, ph, grid, geo.region) for ph in layout.phases]
    cyc, dense, wonly, products = part_cycles(layer, counts, w_mask, layout, geo)
    sets = kernel_sets(cyc, geo.pus)  # N x T x J x P x parts
    shapes = [part.pofm_shape(geo.region) for part in layout.parts]
    pixels = np.array([h * w for h, w in shapes], np.int64)
    n, T = sets.shape[:2]
    return Work(slot_cycles=reduce_last(sets, np.add).reshape(-1, geo.pus),
                transfers=transfers(sets, pixels, layer, geo.pus),
                dense_cycles=dense, weight_only_cycles=wonly, products=products,
                sram_ifmap_words=int(sum(c.sum() for c in counts)),
                sram_ifmap_bitmaps=n * layer.C * T * len(layout.phases), regions=n * T,
                pofm_peak=max(shapes, key=lambda s: s[0] * s[1]))
