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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..ir import ConvLayer


@dataclass(frozen=True)
class Part:
    """The taps of one kernel part over all phases: phase index, kernel row/col, offsets."""

    phase: np.ndarray
    r: np.ndarray
    s: np.ndarray
    u: np.ndarray
    v: np.ndarray

    @property
    def span(self) -> tuple[int, int]:
        """Extent of the offsets minus one (rows, cols): the partial OFM's halo."""
        return int(self.u.max() - self.u.min()), int(self.v.max() - self.v.min())

    def pofm_shape(self, region: tuple[int, int]) -> tuple[int, int]:
        """Partial-OFM shape (pixels) of one region: region + halo (Fig. 5: 4x4 -> 6x6)."""
        du, dv = self.span
        return region[0] + du, region[1] + dv

    def of_phase(self, i: int) -> np.ndarray:
        """Indices of this part's taps that belong to phase ``i``."""
        return np.flatnonzero(self.phase == i)


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

    @property
    def extent(self) -> tuple[int, int]:
        """Rows and columns of the region grid: the largest phase input (pixels)."""
        return max(ph.rows for ph in self.phases), max(ph.cols for ph in self.phases)


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


@lru_cache(maxsize=256)
def plan(layer: ConvLayer, part_rows: int = 0) -> Plan:
    """Phases and kernel parts of ``layer`` (``part_rows=0``: the whole kernel is one part).

    Cached: the arithmetic, the counts and the checks all ask for it.
    """
    phases, taps = _taps(layer)
    band = taps[:, 1] // part_rows if part_rows else np.zeros(len(taps), int)
    parts = tuple(Part(*taps[band == b].T) for b in np.unique(band))
    return Plan(phases, parts)
