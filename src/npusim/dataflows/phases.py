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

A *kernel part* (Fig. 9) is a band of ``part_rows`` kernel rows; each part of a
phase is processed as its own pass with its own, smaller partial OFM.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..ir import ConvLayer


@dataclass(frozen=True)
class Part:
    """The taps of one kernel part within a phase: kernel rows/cols and phase offsets."""

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


@dataclass(frozen=True)
class Phase:
    """One stride phase: its residues (a, b), the phase-input extent used, its kernel parts."""

    a: int
    b: int
    rows: int
    cols: int
    parts: tuple[Part, ...]
    layer_stride: tuple[int, int] = (1, 1)

    def input(self, xp: np.ndarray) -> np.ndarray:
        """The phase input N x C x rows x cols from the padded input ``xp``."""
        return xp[:, :, self.a::self.layer_stride[0], self.b::self.layer_stride[1]][
            :, :, :self.rows, :self.cols]


def _offsets(k: int, dilation: int, stride: int, residue: int) -> tuple[np.ndarray, np.ndarray]:
    """Kernel indices whose dilated offset has this residue mod stride, and their phase offsets."""
    idx = np.arange(k)
    keep = idx[(idx * dilation) % stride == residue]
    return keep, (keep * dilation - residue) // stride


def _parts(rr, uu, ss, vv, part_rows: int) -> tuple[Part, ...]:
    """Split a phase's taps (outer product of row and column taps) into bands of kernel rows."""
    band = rr // part_rows if part_rows else np.zeros_like(rr)
    parts = []
    for b in np.unique(band):
        r, u = rr[band == b], uu[band == b]
        R, S = np.meshgrid(r, ss, indexing="ij")
        U, V = np.meshgrid(u, vv, indexing="ij")
        parts.append(Part(R.ravel(), S.ravel(), U.ravel(), V.ravel()))
    return tuple(parts)


@lru_cache(maxsize=256)
def phases(layer: ConvLayer, part_rows: int = 0) -> tuple[Phase, ...]:
    """The stride phases of ``layer`` that hold at least one tap (``part_rows=0``: whole kernel).

    Cached: a layer's phases are asked for by the arithmetic, the counts and the checks.
    """
    (sh, sw), (dh, dw) = layer.stride, layer.dilation
    out = []
    for a in range(sh):
        rr, uu = _offsets(layer.R, dh, sh, a)
        for b in range(sw):
            ss, vv = _offsets(layer.S, dw, sw, b)
            if rr.size and ss.size:
                out.append(Phase(a, b, layer.P + int(uu.max()), layer.Q + int(vv.max()),
                                 _parts(rr, uu, ss, vv, part_rows), layer.stride))
    return tuple(out)

