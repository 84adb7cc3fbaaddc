"""The dense baseline: a rows x cols systolic array, output-, weight- or input-stationary.

Source: SCALE-Sim (Samajdar et al., ISPASS 2020), whose stall-free cycle counts this
module equals layer by layer (tests/test_systolic.py, data from SCALE-Sim 3.0.0).

A conv is lowered to a GEMM per group: M = N*P*Q output pixels, Kr = Cg*R*S
reduction, F = K/groups filters. Each stationarity maps two of these onto the
array's rows and columns and streams the third:

    OS: rows <- M,  cols <- F,  stream Kr    fold = Kr + rows + cols - 2
    WS: rows <- Kr, cols <- F,  stream M     fold = 2*rows + cols + M - 2
    IS: rows <- Kr, cols <- M,  stream F     fold = 2*rows + cols + F - 2

cycles = groups * ceil(a/rows) * ceil(b/cols) * fold - 1 (SCALE-Sim's count).
Zeros are multiplied like any value: a dense machine skips nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import engine
from ..arch.spec import spec
from ..ir import ConvLayer
from ..stats import LayerStats, energy_pj
from .base import element_bytes, register


@dataclass(frozen=True)
class Params:
    """The ``[systolic]`` section of an arch file."""

    rows: int = spec(32, "PEs", min=1)
    cols: int = spec(32, "PEs", min=1)
    stationary: str = spec("ws", "operand held in the PEs", choices=("os", "ws", "is"))


@dataclass(frozen=True)
class Mapping:
    """A layer's GEMM as laid on the array: spatial dims (a on rows, b on cols), streamed dim t."""

    a: int
    b: int
    t: int
    groups: int
    rows: int
    cols: int
    stationary: str

    @property
    def folds(self) -> int:
        """Array-sized tiles, all groups."""
        return self.groups * math.ceil(self.a / self.rows) * math.ceil(self.b / self.cols)

    @property
    def fold_cycles(self) -> int:
        """Cycles of one fold: fill, stream, drain."""
        if self.stationary == "os":
            return self.t + self.rows + self.cols - 2
        return 2 * self.rows + self.cols + self.t - 2

    @property
    def cycles(self) -> int:
        return self.folds * self.fold_cycles - 1

    @property
    def mapped_pe_folds(self) -> int:
        """Sum over folds of the PEs that hold work (a * b per group)."""
        return self.groups * self.a * self.b


def gemm_mapping(layer: ConvLayer, p: Params) -> Mapping:
    """Lay the layer's per-group GEMM (M pixels, Kr reduction, F filters) onto the array."""
    M, Kr, F = layer.N * layer.P * layer.Q, layer.Cg * layer.R * layer.S, layer.Kg
    a, b, t = {"os": (M, F, Kr), "ws": (Kr, F, M), "is": (Kr, M, F)}[p.stationary]
    return Mapping(a, b, t, layer.groups, p.rows, p.cols, p.stationary)


def sram_words(layer: ConvLayer, m: Mapping) -> tuple[int, int, int]:
    """Words read from the ifmap and filter SRAMs and written to the ofmap SRAM.

    The stationary operand is read once; the streamed operand is read once per
    fold of the other spatial dim; outputs are written once per reduction fold
    (partial sums) unless the reduction stays in the PEs (OS).
    """
    G, M = layer.groups, layer.N * layer.P * layer.Q
    Kr, F = layer.Cg * layer.R * layer.S, layer.Kg
    fold_a, fold_b = math.ceil(m.a / m.rows), math.ceil(m.b / m.cols)
    if m.stationary == "os":
        ifmap, filt, ofmap = M * Kr * fold_b, F * Kr * fold_a, M * F
    elif m.stationary == "ws":
        ifmap, filt, ofmap = M * Kr * fold_b, Kr * F, M * F * fold_a
    else:
        ifmap, filt, ofmap = Kr * M, F * Kr * fold_b, M * F * fold_a
    return G * ifmap, G * filt, G * ofmap


def dram_bytes(layer: ConvLayer, arch, elem: int, m: Mapping) -> tuple[int, int, int]:
    """DRAM bytes per tensor: each tensor once, the streamed operand again for every
    pass over it that its SRAM cannot hold across (capacity-bound refetch)."""
    ifmap = layer.N * layer.C * layer.H * layer.W * elem
    filt = layer.K * layer.Cg * layer.R * layer.S * elem
    ofmap = layer.N * layer.K * layer.P * layer.Q * elem
    mem = arch.memory
    if m.stationary in ("os", "ws") and ifmap > mem.ifmap_sram_kb * 1024:
        ifmap *= math.ceil(m.b / m.cols)  # ifmap re-streamed for every filter fold
    if m.stationary in ("os", "is") and filt > mem.filter_sram_kb * 1024:
        filt *= math.ceil(m.a / m.rows) if m.stationary == "os" else math.ceil(m.b / m.cols)
    return ifmap, filt, ofmap


@register
class Systolic:
    name = "systolic"
    Params = Params

    def supports(self, layer: ConvLayer, arch) -> str | None:
        return None

    def run(self, layer, x, w, bias, arch):
        out = engine.conv2d(x, w, bias, layer)
        return out, self.stats(layer, arch)

    def estimate(self, layer, x_mask, w_mask, arch):
        return self.stats(layer, arch)

    def stats(self, layer: ConvLayer, arch) -> LayerStats:
        """Costs of the layer; a dense array's costs depend on shapes only."""
        p = arch.params(self.name)
        m = gemm_mapping(layer, p)
        dtype = layer.dtype
        elem = element_bytes(dtype)
        pes = p.rows * p.cols
        sram = [v * elem for v in sram_words(layer, m)]
        dram = dram_bytes(layer, arch, elem, m)
        return LayerStats(
            name=layer.name, dataflow=self.name, shape=layer.describe(),
            dense_macs=layer.macs, macs=layer.macs, cycles=m.cycles, pe_cycles=m.cycles * pes,
            mapped_pe_cycles=m.mapped_pe_folds * m.fold_cycles,
            sram_ifmap_bytes=sram[0], sram_filter_bytes=sram[1], sram_ofmap_bytes=sram[2],
            dram_ifmap_bytes=dram[0], dram_filter_bytes=dram[1], dram_ofmap_bytes=dram[2],
            energy_pj=energy_pj(arch, macs=layer.macs, sram_bytes=sum(sram),
                                dram_bytes=sum(dram), dtype=dtype),
            extra={"folds": m.folds},
        )
