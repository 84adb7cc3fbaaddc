"""Stride and dilation as stride-1 problems: the input split into stride phases.

The input-reuse device (seeds 000/004) only knows stride 1: a weight multiplies
a whole region and its products land one block further left for each step right
in the kernel. A strided, dilated convolution reads padded input pixel
``(p*sh + r*dh, q*sw + s*dw)`` for output ``(p, q)`` and tap ``(r, s)``. Writing
``r*dh = sh*u + a`` with ``0 <= a < sh`` (and ``s*dw = sw*v + b``), that pixel is
``xa[p + u, q + v]`` of the *phase* ``xa = x_padded[a::sh, b::sw]``. So each phase
``(a, b)`` is a stride-1 convolution of ``xa`` with the taps of that residue, at
offsets ``(u, v)`` (dilation leaves holes between offsets; the MUX positions of
the holes are simply never selected). Phases without taps are never read.

Region ``(i, j)`` of every phase feeds the same output pixels, so one job runs
the region through all phases in turn and keeps one partial OFM per kernel part
(its halo is the span of the part's offsets over all phases): stride costs
cycles in proportion to the taps, not extra partial OFMs. A *kernel part*
(Fig. 9) is a band of ``part_rows`` kernel rows, processed as its own pass with
its own, smaller partial OFM.

The datapath is fixed by the arch (Fig. 6): ``accumulators`` per processing unit (one
MUX, adder and register per partial-OFM pixel) and a MUX ``fan_in``. A kernel whose
partial OFM or fan-in exceeds them is split into kernel parts, tiles of ``part_rows x
part_cols`` kernel taps (Fig. 9 cuts rows; a wide or dilated kernel needs its columns
cut too), the fewest parts that fit. The fan-in of a cell counts the distinct
multipliers it is wired to: taps of different phases at the same offset share one
wire (the multiplier holds the phase's pixel in that phase's cycles).

The region grid covers the real input map, not the padded one (``Plan.origin``, in
phase-input pixels): rows and columns that hold only padding in every phase are not
tiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from ..derived import frozen
from ..ir import ConvLayer

NO_TAPS = frozen(np.zeros(0, np.int64))  # a part's taps in a phase it has none of


@dataclass(frozen=True)
class Part:
    """The taps of one kernel part over all phases: phase index, kernel row/col, offsets."""

    phase: np.ndarray
    r: np.ndarray
    s: np.ndarray
    u: np.ndarray
    v: np.ndarray

    @cached_property  # a plan is kept for later calls (``plan``), its parts with it
    def span(self) -> tuple[int, int]:
        """Extent of the offsets minus one (rows, cols): the partial OFM's halo."""
        return int(self.u.max() - self.u.min()), int(self.v.max() - self.v.min())

    def pofm_shape(self, region: tuple[int, int]) -> tuple[int, int]:
        """Partial-OFM shape (pixels) of one region: region + halo (Fig. 5: 4x4 -> 6x6)."""
        du, dv = self.span
        return region[0] + du, region[1] + dv

    def fan_in(self, region: tuple[int, int]) -> int:
        """Largest MUX fan-in of the part's partial OFM: distinct offsets whose product
        reaches one cell (rows times columns: the offsets are a product set)."""
        return _window_count(self.u, region[0]) * _window_count(self.v, region[1])

    def of_phase(self, i: int) -> np.ndarray:
        """Indices of this part's taps that belong to phase ``i`` (read-only)."""
        taps = self._phase_taps
        return taps[i] if i < len(taps) else NO_TAPS

    @cached_property
    def _phase_taps(self) -> tuple[np.ndarray, ...]:
        """``of_phase`` of every phase up to the part's last."""
        phases = int(self.phase.max(initial=-1)) + 1
        return tuple(frozen(np.flatnonzero(self.phase == i)) for i in range(phases))


@dataclass(frozen=True)
class Phase:
    """One stride phase: its residues (a, b) and the phase-input extent it uses (pixels)."""

    a: int
    b: int
    rows: int
    cols: int
    stride: tuple[int, int]

    def input(self, xp: np.ndarray) -> np.ndarray:
        """The phase input N x C x rows x cols from the padded input ``xp``."""
        return xp[:, :, self.a::self.stride[0], self.b::self.stride[1]][:, :, :self.rows,
                                                                         :self.cols]


@dataclass(frozen=True)
class Plan:
    """A layer as the device runs it: its phases with taps, and its kernel parts."""

    phases: tuple[Phase, ...]
    parts: tuple[Part, ...]
    origin: tuple[int, int]
    extent: tuple[int, int]
    part_shape: tuple[int, int]


def _residue_taps(k: int, dilation: int, stride: int, residue: int):
    """Kernel indices whose dilated offset has this residue mod stride, and their offsets."""
    idx = np.arange(k)
    keep = idx[(idx * dilation) % stride == residue]
    return keep, (keep * dilation - residue) // stride


def _taps(layer: ConvLayer) -> tuple[tuple[Phase, ...], np.ndarray]:
    """Phases with at least one tap, and every tap as rows (phase, r, s, u, v)."""
    (sh, sw), (dh, dw) = layer.stride, layer.dilation
    phases, rows = [], []
    for a in range(sh):
        rr, uu = _residue_taps(layer.R, dh, sh, a)
        for b in range(sw):
            ss, vv = _residue_taps(layer.S, dw, sw, b)
            if rr.size and ss.size:
                R, S = np.meshgrid(rr, ss, indexing="ij")
                U, V = np.meshgrid(uu, vv, indexing="ij")
                idx = np.full(R.size, len(phases))
                rows.append(np.stack([idx, R.ravel(), S.ravel(), U.ravel(), V.ravel()], 1))
                phases.append(Phase(a, b, layer.P + int(uu.max()), layer.Q + int(vv.max()),
                                    layer.stride))
    return tuple(phases), np.concatenate(rows)


def _window_count(offsets: np.ndarray, length: int) -> int:
    """Most distinct values of ``offsets`` inside any window of ``length`` consecutive
    integers."""
    vals = np.unique(offsets)
    return int((np.searchsorted(vals, vals + length) - np.arange(vals.size)).max())


def _real_span(phases, axis: int, pad: int, size: int, stride: int) -> tuple[int, int]:
    """(first, extent) of phase-input indices along ``axis`` that hold a real input pixel
    in some phase (at least one index, within the phase inputs)."""
    spans = []
    for ph in phases:
        a, n = (ph.a, ph.rows) if axis == 0 else (ph.b, ph.cols)
        lo = max(-(-(pad - a) // stride), 0)
        hi = min((pad + size - 1 - a) // stride + 1, n)
        if lo < hi:
            spans.append((lo, hi))
    if not spans:  # every output sees padding only: one region of zeros
        return 0, 1
    first = min(lo for lo, _ in spans)
    return first, max(hi for _, hi in spans) - first


def _bands(taps: np.ndarray, rows: int, cols: int) -> list[np.ndarray]:
    """Tap rows of every ``rows x cols`` tile of the kernel (tiles with taps)."""
    key = (taps[:, 1] // rows) * (taps[:, 2].max() // cols + 1) + taps[:, 2] // cols
    return [taps[key == k] for k in np.unique(key)]


def _fits(band: np.ndarray, region, accumulators: int, fan_in: int) -> bool:
    part = Part(*band.T)
    rows, cols = part.pofm_shape(region)
    return ((not accumulators or rows * cols <= accumulators)
            and (not fan_in or part.fan_in(region) <= fan_in))


def split(layer: ConvLayer, taps: np.ndarray, region, accumulators: int,
          fan_in: int) -> tuple[int, int]:
    """The kernel tile ``(rows, cols)`` giving the fewest parts that fit the datapath
    (ties: more rows per part, Fig. 9 cuts rows); ``accumulators``/``fan_in`` 0: no limit."""
    best = None
    for rows in range(layer.R, 0, -1):
        for cols in range(layer.S, 0, -1):
            if all(_fits(b, region, accumulators, fan_in) for b in _bands(taps, rows, cols)):
                parts = -(-layer.R // rows) * -(-layer.S // cols)
                if best is None or parts < best[0]:
                    best = parts, (rows, cols)
                break  # fewer columns only makes more parts
    if best is None:
        raise ValueError("no kernel part fits")  # callers check a 1x1 part fits first
    return best[1]


@lru_cache(maxsize=256)
def plan(layer: ConvLayer, region: tuple[int, int] = (1, 1), accumulators: int = 0,
         fan_in: int = 0) -> Plan:
    """Phases, region grid and kernel parts of ``layer`` on a datapath of ``region`` pixels,
    ``accumulators`` per PU and MUX ``fan_in`` (0: unlimited, the whole kernel is one part).

    Cached: the arithmetic, the counts and the checks all ask for it.
    """
    phases, taps = _taps(layer)
    shape = split(layer, taps, tuple(region), accumulators, fan_in)
    parts = tuple(Part(*b.T) for b in _bands(taps, *shape))
    (pt, _, pl, _), (sh, sw) = layer.padding, layer.stride
    r0, rows = _real_span(phases, 0, pt, layer.H, sh)
    c0, cols = _real_span(phases, 1, pl, layer.W, sw)
    return Plan(phases, parts, (r0, c0), (rows, cols), shape)
