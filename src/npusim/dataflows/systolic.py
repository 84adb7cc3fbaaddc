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

import numpy as np

from .. import engine
from ..arch.sections.systolic import Systolic as Params  # the arch file section
from ..ir import ConvLayer
from ..memory import Steps, used_input_pixels
from ..stats import Counts, LayerStats, price
from .base import Machine, Memo, element_bytes, floor_products, percent, register


@dataclass(frozen=True)
class Mapping:
    """A layer's GEMM as laid on the array: spatial dims (a on rows, b on cols), streamed dim t,
    streamed ``tile`` vectors per fold (``t``: all of them, SCALE-Sim's loop order)."""

    a: int
    b: int
    t: int
    groups: int
    rows: int
    cols: int
    stationary: str
    tile: int = 0

    @property
    def stream_tile(self) -> int:
        """Streamed vectors per fold (all of them unless the array tiles the stream)."""
        return self.tile if 0 < self.tile < self.t else self.t

    @property
    def stream_tiles(self) -> int:
        return math.ceil(self.t / self.stream_tile)

    @property
    def tile_cycles(self) -> list[int]:
        """Cycles of a fold over each stream tile, in order (cycles)."""
        full, last = self.stream_tiles - 1, self.t - (self.stream_tiles - 1) * self.stream_tile
        return [fold_cycles(self.stationary, self.rows, self.cols, self.stream_tile)] * full \
            + [fold_cycles(self.stationary, self.rows, self.cols, last)]

    @property
    def row_folds(self) -> int:
        return math.ceil(self.a / self.rows)

    @property
    def col_folds(self) -> int:
        return math.ceil(self.b / self.cols)

    @property
    def folds(self) -> int:
        """Array-sized tiles, all groups (times the stream tiles)."""
        return self.groups * self.row_folds * self.col_folds * self.stream_tiles

    @property
    def fold_cycles(self) -> int:
        """Cycles of one fold over a whole stream tile: fill, stream, drain (cycles)."""
        return fold_cycles(self.stationary, self.rows, self.cols, self.stream_tile)

    @property
    def busy_cycles(self) -> int:
        """Cycles the array is busy with the layer (cycles)."""
        return self.groups * self.row_folds * self.col_folds * sum(self.tile_cycles)

    @property
    def cycles(self) -> int:
        """SCALE-Sim's count: the index of the last busy cycle (cycles)."""
        return self.busy_cycles - 1

    @property
    def mapped_pe_busy_cycles(self) -> int:
        """Sum over folds of the PEs that hold work times the fold's cycles."""
        return self.groups * self.a * self.b * sum(self.tile_cycles)


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
    tile = 0 if p.stationary == "os" else p.stream_tile
    return Mapping(a, b, t, layer.groups, p.rows, p.cols, p.stationary, tile)


def sram_words(layer: ConvLayer, m: Mapping) -> tuple[int, int, int]:
    """Words read from the ifmap and filter SRAMs and written to the ofmap SRAM.

    The stationary operand is read once (once per stream tile when the array tiles the
    stream); a streamed operand once per fold of the other spatial dim; outputs are
    written once per reduction fold (partial sums) unless the reduction stays in the PEs
    (OS). These are SCALE-Sim's counts, except that its OS ofmap count adds rows + cols
    per fold (see docs/systolic.md).
    """
    M, Kr, F = layer.N * layer.P * layer.Q, layer.Cg * layer.R * layer.S, layer.Kg
    fa, fb, nt = m.row_folds, m.col_folds, m.stream_tiles
    words = {"os": (M * Kr * fb, F * Kr * fa, M * F),
             "ws": (M * Kr * fb, Kr * F * nt, M * F * fa),
             "is": (Kr * M * nt, F * Kr * fb, M * F * fa)}[m.stationary]
    return tuple(layer.groups * w for w in words)  # type: ignore[return-value]


def fold_steps(layer: ConvLayer, m: Mapping, elem: int) -> Steps:
    """The layer as the array runs it, one step per fold in loop order (group, column
    fold, stream tile, row fold; one stream tile unless ``stream_tile`` is set), for the
    memory model (the emulator logs its own, ``emulate.systolic.FoldLog``). The last
    fold counts one cycle less: SCALE-Sim's count is the index of the last busy cycle.

    Blocks (equal ids = the same data):

    - OS: ifmap = a row fold of output pixels (its share of the used input, the halo
      shared with the previous fold kept), filters = a column fold's Kr x cols weights,
      ofmap = the fold's own outputs.
    - WS: filters = the fold's stationary tile (loaded again for every stream tile);
      ifmap = the channels the row fold's reduction terms cover (terms are tap-major,
      channel-fastest: taps of the same channels read the same pixels), the stream
      tile's share of those no earlier row fold read held (``_channel_blocks``), a fold
      fetching at most its streamed words; ofmap = the column fold's outputs of the
      stream tile, accumulated over its row folds.
    - IS: ifmap = the fold's stationary tile (its share of the used input, loaded again
      for every stream tile); filters = the row fold's reduction terms of the stream
      tile's filters; ofmap = the column fold's outputs of those filters.

    Partial sums are 4 bytes (int32 or float32 accumulators). Bytes at the SRAM ports
    per fold are the words ``sram_words`` sums, times ``elem``.
    """
    M, Kr = layer.N * layer.P * layer.Q, layer.Cg * layer.R * layer.S
    R, C, G, NT = m.row_folds, m.col_folds, m.groups, m.stream_tiles
    # each fold's group, column fold, stream tile and row fold, as axes that broadcast: a
    # quantity is computed over the axes it depends on, then laid out once per fold
    g, c, tt, r = np.ogrid[:G, :C, :NT, :R]
    a_in = np.minimum(m.rows, m.a - r * m.rows)   # rows of the fold that hold work
    b_in = np.minimum(m.cols, m.b - c * m.cols)   # columns likewise
    t0 = tt * m.stream_tile
    t_in = np.minimum(m.stream_tile, m.t - t0)    # streamed vectors of the fold
    ifmap_size = ifmap_held = None
    ifmap_group = layer.N * layer.Cg * used_input_pixels(layer) * elem
    if m.stationary == "os":
        ifmap, ifmap_b = g * R + r, _share(ifmap_group, r * m.rows, r * m.rows + a_in, M)
        filt, filt_b = g * C + c, Kr * b_in * elem
        ofmap, out_words = ((g * C + c) * NT + tt) * R + r, a_in * b_in
        words = (a_in * Kr, Kr * b_in, a_in * b_in)
    elif m.stationary == "ws":
        ifmap, ifmap_b, ifmap_size, ifmap_held = _channel_blocks(layer, m, g, r, t0, t_in,
                                                                 elem)
        filt, filt_b = (g * C + c) * R + r, a_in * b_in * elem
        ofmap, out_words = (g * C + c) * NT + tt, t_in * b_in
        words = (t_in * a_in, a_in * b_in, t_in * b_in)
    else:
        stop = c * m.cols * m.a + b_in * np.minimum((r + 1) * m.rows, m.a)  # within a group
        ifmap = (g * C + c) * R + r
        ifmap_b = _share(ifmap_group, stop - a_in * b_in, stop, Kr * M)
        filt, filt_b = (g * R + r) * NT + tt, a_in * t_in * elem
        ofmap, out_words = (g * C + c) * NT + tt, b_in * t_in
        words = (a_in * b_in, t_in * a_in, t_in * b_in)
    shape = (G, C, NT, R)
    compute = _per_fold(np.asarray(m.tile_cycles, np.int64)[tt], shape)
    compute[-1] -= 1
    return Steps(compute=compute, ifmap=_per_fold(ifmap, shape),
                 ifmap_bytes=_per_fold(ifmap_b, shape),
                 ifmap_size=None if ifmap_size is None else _per_fold(ifmap_size, shape),
                 ifmap_held=None if ifmap_held is None else _per_fold(ifmap_held, shape),
                 filter=_per_fold(filt, shape), filter_bytes=_per_fold(filt_b, shape),
                 ofmap=_per_fold(ofmap, shape), ofmap_bytes=_per_fold(out_words * elem, shape),
                 psum_bytes=_per_fold(out_words * 4, shape),
                 sram_bytes=_per_fold(sum(words) * elem, shape))


def _per_fold(value, shape: tuple[int, ...]) -> np.ndarray:
    """``value``, computed over some of the fold axes (group, column fold, stream tile, row
    fold), as one int64 per fold in loop order (a new array)."""
    out = np.empty(shape, np.int64)
    out[...] = value
    return out.ravel()


def _share(total, start, stop, whole: int):
    """Bytes of ``total`` that the span [start, stop) of ``whole`` units holds, rounded
    so that consecutive spans add up to exactly ``total``."""
    return floor_products(total, stop, whole) - floor_products(total, start, whole)


def _channel_blocks(layer: ConvLayer, m: Mapping, g, r, t0, t_in, elem: int):
    """WS ifmap blocks: (ids, bytes a fold fetches, block size, bytes the block adds to
    what is held) of the channel set each row fold's reduction terms cover, for the fold's
    stream tile (pixels ``t0`` on, ``t_in`` of them). The block is the tile's share of
    the used pixels of those channels; a fold that must fetch it streams at most its own
    words (``t_in`` per term, fewer than the used pixels when the taps are sparse). Where
    the array's rows do not divide the terms the folds' channel sets overlap, and a
    channel's pixels are held once whatever sets read them: a block adds only the share
    of the channels no earlier row fold read (the terms are tap-major, channel-fastest, so
    the row folds before ``r`` read the first ``r x rows`` channels, all of them from the
    first full pass on). Counted whole, a shared channel counted once per set: an input
    that fits read 2-200x."""
    Cg, M = layer.Cg, layer.N * layer.P * layer.Q
    start = r * m.rows
    terms = np.minimum(m.rows, m.a - start)
    lo, hi = start % Cg, (start + terms - 1) % Cg
    whole = terms >= Cg
    lo, hi = np.where(whole, 0, lo), np.where(whole, Cg - 1, hi)
    ids = ((g * Cg + lo) * Cg + hi) * m.stream_tiles + t0 // m.stream_tile
    used = layer.N * used_input_pixels(layer)
    size = _share(np.minimum(terms, Cg) * used * elem, t0, t0 + t_in, M)
    new = np.maximum(0, np.minimum(start + terms, Cg) - start)
    held = _share(new * used * elem, t0, t0 + t_in, M)
    return ids, np.minimum(t_in * terms * elem, size), size, held


def counts(layer: ConvLayer, arch, folds: int, busy_cycles: int, mapped_pe_busy_cycles: int,
           words) -> Counts:
    """What the array counted, as ``price`` takes it: every MAC (a dense machine skips
    nothing), SRAM bytes per operand from ``words`` (ifmap, filter, ofmap), the folds,
    and the mapped PE-cycles from the sum over folds of mapped PEs x fold cycles
    (``mapped_pe_busy_cycles``) over the ``busy_cycles``.

    Mapping efficiency is SCALE-Sim's mean over folds of mapped PEs / PEs: each fold's
    mapped PEs times its cycles, scaled to the stall-free cycles (``busy_cycles - 1``;
    without stream tiles every fold lasts as long: the mapped PE-folds spread over them).
    """
    p = arch.params(Params)
    elem = element_bytes(layer.dtype)
    sram = [w * elem for w in words]
    return Counts("systolic", macs=layer.macs, dense_macs=layer.macs,
                  multipliers=p.rows * p.cols,
                  mapped_pe_cycles=mapped_pe_busy_cycles * (busy_cycles - 1) / busy_cycles,
                  sram_ifmap_bytes=sram[0], sram_filter_bytes=sram[1],
                  sram_ofmap_bytes=sram[2], extra={"folds": folds})


def scalesim_timing(layer: ConvLayer, arch):
    """The layer's Timing through SCALE-Sim's buffers when ``[memory] model = "scalesim"``
    (``npusim.memory_scalesim``), else None (npusim's memory model times the folds)."""
    if arch.memory.model != "scalesim":
        return None
    from .. import memory_scalesim  # imported by the runs on that memory model alone

    p = arch.params(Params)
    return memory_scalesim.time_layer(layer, p.rows, p.cols, p.stationary, arch.memory)


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
        """Outputs and costs from the cycle-by-cycle array (``npusim.emulate.systolic``):
        its folds, cycles, words and memory steps, as it counted them."""
        from ..emulate.systolic import emulate_layer

        run = emulate_layer(layer, x, w, bias, arch.params(Params))
        emulated = counts(layer, arch, run.folds, run.busy_cycles, run.mapped_pe_busy_cycles,
                          run.words)
        return run.output, price(layer, emulated, run.steps, arch, scalesim_timing(layer, arch))

    def estimate_memo(self, layer, x_mask, w_mask, arch, memo: Memo):
        """``estimate``, the counts and fold steps kept in ``memo`` per array (``Params``)."""
        return self.stats(layer, arch, memo)

    def stats(self, layer: ConvLayer, arch, memo: Memo | None = None) -> LayerStats:
        """Costs of the layer: cycles (through the memory model), utilisation, SRAM/DRAM
        bytes, energy (pJ). What follows the array alone, its counts and fold steps, ``memo``
        (the layer's) keeps for later archs."""
        p = arch.params(Params)
        memo = Memo() if memo is None else memo
        counted, steps = memo.get(("folds", p), lambda: self.folds(layer, arch))
        return price(layer, counted, steps, arch, scalesim_timing(layer, arch))

    def folds(self, layer: ConvLayer, arch) -> tuple[Counts, Steps]:
        """What the array counts of the layer, and its fold steps for the memory model."""
        m = gemm_mapping(layer, arch.params(Params))
        return (counts(layer, arch, m.folds, m.busy_cycles, m.mapped_pe_busy_cycles,
                       sram_words(layer, m)), fold_steps(layer, m, element_bytes(layer.dtype)))

    def hardware(self, arch, dtype):
        """rows x cols PEs, each a MAC with an input, a weight and an accumulator register
        (the operands move to the neighbour PE: wires, no multiplexers); the three SRAMs."""
        from ..area import Hardware, element_bits, memory_kib

        p = arch.params(Params)
        pes = p.rows * p.cols
        return Hardware(macs=pes, register_bits=pes * (2 * element_bits(dtype) + 32),
                        sram_kib=memory_kib(arch.memory))

    def diagnostics(self, total: LayerStats) -> list[tuple[str, str]]:
        """Mapping efficiency (mapped PE-cycles / PE-cycles) and the folds the layers
        took: a layer that fills few PEs, or many folds, is what costs the array time."""
        return [("mapping efficiency", f"{percent(total.mapped_pe_cycles, total.pe_cycles)} "
                                       "of PE-cycles had work mapped"),
                ("folds", f"{int(total.extra.get('folds', 0)):,}")]
