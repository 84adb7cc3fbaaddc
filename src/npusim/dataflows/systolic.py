"""The dense baseline: a rows x cols systolic array, output-, weight- or input-stationary.

Source: SCALE-Sim 3.0.0 (Samajdar et al., "A systematic methodology for characterizing
scalability of DNN accelerators using SCALE-Sim", ISPASS 2020). Its stall-free
``Total Cycles``, utilisation, mapping efficiency and SRAM access counts are equalled
layer by layer (tests/test_systolic.py, data in tests/data/scalesim/); the cycle
emulator in ``npusim.emulate.systolic`` is the living definition of the machine.

A conv is lowered to one GEMM per group: M = N*P*Q output pixels, Kr = Cg*R*S
reduction (ordered tap-major, channel-fastest, as SCALE-Sim's NHWC addresses),
F = K/groups filters. Each stationarity lays two of them on the array's
rows and columns (a fold is one array-sized tile of them) and streams the third:

    OS: rows <- M,  cols <- F,  stream Kr    fold = Kr + rows + cols - 2
    WS: rows <- Kr, cols <- F,  stream M     fold = 2*rows + cols + M - 2
    IS: rows <- Kr, cols <- M,  stream F     fold = 2*rows + cols + F - 2

Loop order (outer to inner): group, column fold, row fold, then the streamed dim
in the array. cycles = groups * ceil(a/rows) * ceil(b/cols) * fold - 1: the array is
busy ``folds * fold`` cycles and, as SCALE-Sim, the count is the index (from 0) of
the last busy cycle. Zeros are multiplied like any value: a dense machine skips nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import engine
from ..arch.spec import spec
from ..ir import ConvLayer
from ..memory import used_input_pixels
from ..stats import LayerStats, energy_pj
from .base import Machine, element_bytes, register


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
    def row_folds(self) -> int:
        return math.ceil(self.a / self.rows)

    @property
    def col_folds(self) -> int:
        return math.ceil(self.b / self.cols)

    @property
    def folds(self) -> int:
        """Array-sized tiles, all groups."""
        return self.groups * self.row_folds * self.col_folds

    @property
    def fold_cycles(self) -> int:
        """Cycles of one fold: fill, stream, drain (cycles)."""
        return fold_cycles(self.stationary, self.rows, self.cols, self.t)

    @property
    def busy_cycles(self) -> int:
        """Cycles the array is busy with the layer (cycles)."""
        return self.folds * self.fold_cycles

    @property
    def cycles(self) -> int:
        """SCALE-Sim's count: the index of the last busy cycle (cycles)."""
        return self.busy_cycles - 1

    @property
    def mapped_pe_folds(self) -> int:
        """Sum over folds of the PEs that hold work (a * b per group)."""
        return self.groups * self.a * self.b


def fold_cycles(stationary: str, rows: int, cols: int, streamed: int) -> int:
    """Cycles of one fold of ``streamed`` operand vectors on a rows x cols array (cycles).

    OS: operands skewed in from two edges, the last pair meets at the far corner
    after ``streamed + rows + cols - 2`` cycles. WS/IS: ``rows`` cycles to shift the
    stationary tile in, then the streamed vectors, skewed, and their partial sums
    down to the bottom edge: ``streamed + rows + cols - 2`` more.
    """
    if stationary == "os":
        return streamed + rows + cols - 2
    return 2 * rows + cols + streamed - 2


def gemm_mapping(layer: ConvLayer, p: Params) -> Mapping:
    """Lay the layer's per-group GEMM (M pixels, Kr reduction, F filters) onto the array."""
    M, Kr, F = layer.N * layer.P * layer.Q, layer.Cg * layer.R * layer.S, layer.Kg
    a, b, t = {"os": (M, F, Kr), "ws": (Kr, F, M), "is": (Kr, M, F)}[p.stationary]
    return Mapping(a, b, t, layer.groups, p.rows, p.cols, p.stationary)


def sram_words(layer: ConvLayer, m: Mapping) -> tuple[int, int, int]:
    """Words read from the ifmap and filter SRAMs and written to the ofmap SRAM.

    The stationary operand is read once; a streamed operand once per fold of the
    other spatial dim; outputs are written once per reduction fold (partial sums)
    unless the reduction stays in the PEs (OS). These are SCALE-Sim's counts, except
    that its OS ofmap count adds rows + cols per fold (see docs/systolic.md).
    """
    M, Kr, F = layer.N * layer.P * layer.Q, layer.Cg * layer.R * layer.S, layer.Kg
    fa, fb = m.row_folds, m.col_folds
    words = {"os": (M * Kr * fb, F * Kr * fa, M * F),
             "ws": (M * Kr * fb, Kr * F, M * F * fa),
             "is": (Kr * M, F * Kr * fb, M * F * fa)}[m.stationary]
    return tuple(layer.groups * w for w in words)  # type: ignore[return-value]


def dram_bytes(layer: ConvLayer, arch, elem: int, m: Mapping) -> tuple[int, int, int]:
    """DRAM bytes per tensor: every used element once, and a streamed operand again for
    every pass over it when what is reused across the passes does not fit the active half
    of its double-buffered SRAM (the other half is being refilled); outputs leave once.

    Column folds are the outer loop: the ifmap (OS, WS) or the filters (IS) are streamed
    once per column fold; in OS one column fold's filters (Kr x cols) once per row fold.
    In WS a row fold is a tile of kernel taps, so without the whole ifmap in SRAM its
    reuse across taps is lost too (``ws_refetch_words``).
    """
    ifmap = layer.N * layer.C * used_input_pixels(layer) * elem
    filt = layer.K * layer.Cg * layer.R * layer.S * elem
    ofmap = layer.N * layer.K * layer.P * layer.Q * elem
    ifmap_half, filter_half = arch.memory.ifmap_sram_kb * 512, arch.memory.filter_sram_kb * 512
    if m.stationary == "os" and ifmap > ifmap_half:
        ifmap *= m.col_folds
    if m.stationary == "ws" and ifmap > ifmap_half:
        ifmap = m.col_folds * ws_refetch_words(layer, m) * elem
    if m.stationary == "is" and filt > filter_half:
        filt *= m.col_folds
    if m.stationary == "os" and m.t * min(m.b, m.cols) * elem > filter_half:
        filt *= m.row_folds
    return ifmap, filt, ofmap


def ws_refetch_words(layer: ConvLayer, m: Mapping) -> int:
    """ifmap words one WS column fold fetches when the ifmap does not stay in SRAM: each
    row fold (``rows`` reduction terms, tap-major and channel-fastest) fetches its own
    streamed words, at most the used pixels of the channels it covers."""
    M, used = layer.N * layer.P * layer.Q, layer.N * used_input_pixels(layer)
    words = 0
    for start in range(0, m.a, m.rows):
        terms = min(m.rows, m.a - start)
        words += min(M * terms, min(terms, layer.Cg) * used)
    return layer.groups * words


def layer_stats(layer: ConvLayer, arch, m: Mapping, cycles: int, words) -> LayerStats:
    """The LayerStats of ``layer`` run in ``cycles`` with ``words`` (ifmap, filter, ofmap)
    SRAM accesses; shared by the fast model and the cycle emulator.

    Mapping efficiency is SCALE-Sim's mean over folds of mapped PEs / PEs: every fold
    lasts as long, so the mapped PE-cycles are the mapped PE-folds spread over the
    counted cycles.
    """
    p = arch.params("systolic")
    elem = element_bytes(layer.dtype)
    pes = p.rows * p.cols
    sram = [w * elem for w in words]
    dram = dram_bytes(layer, arch, elem, m)
    return LayerStats(
        name=layer.name, dataflow="systolic", shape=layer.describe(),
        dense_macs=layer.macs, macs=layer.macs, cycles=cycles, pe_cycles=cycles * pes,
        mapped_pe_cycles=m.mapped_pe_folds * cycles / m.folds,
        sram_ifmap_bytes=sram[0], sram_filter_bytes=sram[1], sram_ofmap_bytes=sram[2],
        dram_ifmap_bytes=dram[0], dram_filter_bytes=dram[1], dram_ofmap_bytes=dram[2],
        energy_pj=energy_pj(arch, macs=layer.macs, sram_bytes=sum(sram),
                            dram_bytes=sum(dram), dtype=layer.dtype),
        extra={"folds": m.folds},
    )


@register
class Systolic(Machine):
    name = "systolic"
    Params = Params
    reads_masks = False  # the costs follow the shapes alone

    def supports(self, layer: ConvLayer, arch) -> str | None:
        return None

    def compute(self, layer, x, w, bias, arch):
        """Outputs by the dense engine (float32, or exact int32 for int8)."""
        return engine.conv2d(x, w, bias, layer)

    def estimate(self, layer, x_mask, w_mask, arch):
        """The costs; a dense array's costs depend on shapes only, not on the masks."""
        return self.stats(layer, arch)

    def emulate(self, layer, x, w, bias, arch):
        """Outputs and costs from the cycle-by-cycle array (``npusim.emulate.systolic``)."""
        from ..emulate.systolic import emulate_layer

        m = gemm_mapping(layer, arch.params(self.name))
        run = emulate_layer(layer, x, w, bias, arch.params(self.name))
        return run.output, layer_stats(layer, arch, m, run.busy_cycles - 1, run.words)

    def stats(self, layer: ConvLayer, arch) -> LayerStats:
        """Costs of the layer: cycles, utilisation, SRAM/DRAM bytes, energy (pJ)."""
        m = gemm_mapping(layer, arch.params(self.name))
        return layer_stats(layer, arch, m, m.cycles, sram_words(layer, m))
