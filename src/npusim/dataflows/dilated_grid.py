"""The dilated-grid machine: dilated convolution through a pixel shift grid, no cycle spent
on an inserted zero.

Source: seed 002 (JP7719617B2, Canon; see ``docs/dilated-grid.md``). Fig. 6: a grid of
pixel storage units (default 6 x 6), each a pixel register and a multiplexer linked to
the units at distance 1 and 2 (flat grid, R = 1, 2) or, in the second embodiment
(Fig. 16, Eqs. 12-13), through H shifter levels of 1, 2, 4, ... (R = 1 .. 2**H - 1).
The type-A units (the top-left M x N, Fig. 6 block 601) feed an M x N MAC unit (Fig. 5)
that multiplies them by one coefficient from the type-A unit of a 3 x 3 coefficient
storage (Fig. 7). One step = one cycle: MAC, then both grids shift along the serpentine
(Eqs. 8-11: the pixel step is R times the coefficient step), so a X x Y filter takes
X * Y steps per pixel set whatever R is (claim 1; the zero-inserted filter of Eq. 4
would take (R(X-1)+1) (R(Y-1)+1)).

Mapping. Outputs are cut into M x N tiles of adjacent stride-1 positions (a stride s
keeps every s-th). A filter axis whose pixel span does not fit the grid, or whose taps
exceed the coefficient storage, is cut into runs (``shift_grid.axis_chunks``); on a
dilated axis the planner (``compiled``) may cut shorter runs than fit, whose pixel sets
span fewer never-multiplied rows, where the layer takes fewer cycles so; each
(row run, column run) is one pass: load its pixel set (``set_h x set_w`` pixels, one
row segment of up to ``load_pixels_per_cycle`` pixels per cycle), then step its taps.
Loop order (outer to inner), ``loop_order = "tile-major"``::

    for image n, output map k (rate R read here, S103), tile (ty, tx):
        acc = bias                                   # S1505
        for input map c of k's group:                # accumulation across maps
            for row run, column run:  load pixel set and coefficients; th * tw steps
        write the M x N MAC registers to the result memory (S1512)

``"map-major"`` is Fig. 15's order: for n, k, input map c, tile: the registers start from
the bias (c = 0) or the partial sums read back from the result memory, and are written
back after the tile's runs. With S_i the steps, L_i the load cycles (pixels and
coefficients over their own ports at once) of pass i and X_i the MAC unit's register
moves between pass i and i + 1 (``Params.result_cycles`` per write or read)::

    start_(i+1) - start_i = max(S_i + X_i, L_(i+1))   (double-buffered grid)
                          = S_i + max(X_i, L_(i+1))    (single buffer)
    cycles = L_1 + sum of those + S_T + the last write

The grid's edges wrap around (a torus), so the serpentine never loses a pixel (see
docs: zero-fill is wrong).
Memory (``steps``, priced by ``stats.price``): one step per (image, output map, tile
row) (and input map, map-major), streaming that tile row's input band, reading the
coefficients and accumulating into its output rows; every output map sweeps its input
again. The cycle emulator ``npusim.emulate.dilated_grid`` derives the same from the
datapath on its own; the tests hold the two equal on every field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .. import engine, stats
from ..arch.sections.dilated_grid import DilatedGrid as Params  # the arch file section
from ..ir import ConvLayer
from ..memory import Steps
from ..reference import pad_input, tap_window
from . import shift_grid
from .base import Machine, Memo, element_bytes, percent, register

NAME = "dilated-grid"
ACC_BYTES = 4  # a partial sum in the result memory: int32 or float32 accumulator (bytes)


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a layer on the grid: tap runs, tiles and what a pass loads."""

    chunks: tuple[tuple[int, int], ...]   # (first tap, taps) per run
    tiles: int                            # output tiles along the axis
    dense: int                            # stride-1 output positions covered
    set_len: tuple[int, ...]              # pixel-set length per run (pixels)
    real: int                             # real input pixels loaded, summed over tiles, runs
    per_tile: tuple[int, ...]             # real pixels loaded per tile, summed over runs
    first: tuple[int, ...]                # real input positions first loaded by each tile
    outputs: tuple[int, ...]              # strided outputs each tile keeps


def axis(size: int, pad: int, taps: int, rate: int, stride: int, out: int, tile: int,
         grid: int, coef: int, reach: int, longest: int | None = None) -> Axis:
    """Plan one axis: ``size`` input pixels after ``pad`` padding, ``out`` strided outputs,
    in tap runs of the most taps a pixel set holds, or ``longest`` where fewer."""
    chunks = shift_grid.axis_chunks(taps, rate, grid, tile, coef, reach, longest)
    dense = (out - 1) * stride + 1
    tiles = math.ceil(dense / tile)
    set_len = tuple(rate * (t - 1) + tile for _, t in chunks)
    starts = np.arange(tiles)[:, None] * tile + np.array([rate * a for a, _ in chunks])
    ends = starts + np.array(set_len)
    loaded = np.maximum(np.minimum(ends, pad + size) - np.maximum(starts, pad), 0).sum(axis=1)
    first = first_loads(size, pad, tile, tiles, [rate * a for a, _ in chunks], set_len)
    lanes = np.arange(tiles)[:, None] * tile + np.arange(tile)
    kept = ((lanes % stride == 0) & (lanes // stride < out)).sum(axis=1)
    return Axis(tuple(chunks), tiles, dense, set_len, int(loaded.sum()),
                tuple(int(v) for v in loaded), tuple(int(v) for v in first),
                tuple(int(v) for v in kept))


def first_loads(size: int, pad: int, tile: int, tiles: int, offsets, lengths) -> np.ndarray:
    """(tiles,) the real input positions (``pad`` to ``pad + size``) each tile loads first:
    tile i's run c loads ``[i x tile + offsets[c], ... + lengths[c])``. Each position's
    first tile is found per run from the bounds of the tiles whose span holds it, in
    memory of the axis's size (a tiles x runs x positions mask of them took 32 GiB on a
    65,536-pixel row)."""
    pos = np.arange(size) + pad
    earliest = np.full(size, tiles)  # none
    for off, length in zip(offsets, lengths, strict=True):
        lo = np.maximum(0, -(-(pos - off - length + 1) // tile))  # first tile reaching it
        hi = np.minimum(tiles - 1, (pos - off) // tile)  # last tile starting at or before it
        earliest = np.where(lo <= hi, np.minimum(earliest, lo), earliest)
    return np.bincount(earliest[earliest < tiles], minlength=tiles)


def plan(layer: ConvLayer, p: Params,
         longest: tuple[int | None, int | None] = (None, None)) -> tuple[Axis, Axis]:
    """Row and column plans of ``layer`` on the grid, in tap runs of at most ``longest``
    (rows, columns; None: the most a pixel set holds)."""
    (dh, dw), (sh, sw) = layer.dilation, layer.stride
    rows = axis(layer.H, layer.padding[0], layer.R, dh, sh, layer.P, p.mac_rows, p.grid_rows,
                p.coef_rows, p.reach, longest[0])
    cols = axis(layer.W, layer.padding[2], layer.S, dw, sw, layer.Q, p.mac_cols, p.grid_cols,
                p.coef_cols, p.reach, longest[1])
    return rows, cols


def run_lengths(layer: ConvLayer, p: Params) -> list[tuple[int, int]]:
    """The (row, column) tap-run lengths the planner weighs for ``layer``, the longest
    first (``shift_grid.run_lengths``: shorter runs only on a dilated axis)."""
    (dh, dw) = layer.dilation
    rows = shift_grid.run_lengths(layer.R, dh, p.grid_rows, p.mac_rows, p.coef_rows, p.reach)
    cols = shift_grid.run_lengths(layer.S, dw, p.grid_cols, p.mac_cols, p.coef_cols, p.reach)
    return [(r, c) for r in rows for c in cols]


@dataclass(frozen=True)
class Pass:
    """One pixel set on the grid: its tap run (th x tw) and what loading it costs."""

    th: int
    tw: int
    pixels: int        # pixels written into the grid (padding and edge zeros included)
    pixel_load: int    # cycles to write them (cycles)
    coef_load: int     # cycles to write the run's th x tw coefficients (cycles)

    @property
    def steps(self) -> int:
        return self.th * self.tw

    @property
    def load(self) -> int:
        """Cycles until the set is ready: pixels and coefficients load over their own
        ports at once (cycles)."""
        return max(self.pixel_load, self.coef_load)


def load_cycles(set_h: int, set_w: int, per_cycle: int) -> int:
    """Cycles to write a set_h x set_w block row by row, at most ``per_cycle`` contiguous
    elements of one row per cycle (cycles)."""
    return set_h * math.ceil(set_w / per_cycle)


def passes(rows: Axis, cols: Axis, p: Params) -> list[Pass]:
    """The passes of one (tile, input map), row run outer, column run inner."""
    out = []
    for (_, th), lh in zip(rows.chunks, rows.set_len, strict=True):
        for (_, tw), lw in zip(cols.chunks, cols.set_len, strict=True):
            out.append(Pass(th, tw, lh * lw, load_cycles(lh, lw, p.load_pixels_per_cycle),
                            load_cycles(th, tw, p.coef_loads_per_cycle)))
    return out


def pass_shift_ops(ps: Pass, rates: tuple[int, int], p: Params) -> int:
    """Level shifts of the pixel grid over one pass: each move along the serpentine
    engages one link per active shifter level (one on the flat grid)."""
    def per_move(rate: int) -> int:
        return 1 if p.shifter == "flat" else bin(rate).count("1")

    return ps.th * (ps.tw - 1) * per_move(rates[1]) + (ps.th - 1) * per_move(rates[0])


@dataclass(frozen=True)
class Counts:
    """What one layer did on the machine, from the fast model or counted by the emulator.
    Cycles and steps in cycles; pixels, coefficients and partial sums in elements."""

    cycles: int
    steps: int
    pixel_sets: int
    load_cycles: int
    coef_load_cycles: int
    result_cycles: int
    pixels_loaded: int
    ifmap_reads: int
    coef_reads: int
    output_writes: int
    psum_writes: int
    psum_reads: int
    pixel_shift_ops: int
    tiles: int


def gap(steps, between, next_load, double_buffer: bool):
    """Cycles from one pass starting to step to the next one starting: the MAC unit steps
    ``steps`` then moves its registers for ``between`` cycles; the next set loads in
    ``next_load`` cycles, from the pass's start when double-buffered, else from the end of
    its steps (the grid is free then). Scalars or numpy arrays (cycles)."""
    if double_buffer:
        return np.maximum(steps + between, next_load)
    return steps + np.maximum(between, next_load)


def visit_cycles(layer: ConvLayer, ps: list[Pass], p: Params) -> int:
    """Cycles from a visit's first pass starting to its last pass starting (cycles)."""
    db = p.double_buffer
    one = sum(int(gap(a.steps, 0, b.load, db)) for a, b in zip(ps[:-1], ps[1:], strict=True))
    if p.loop_order == "map-major":
        return one
    return layer.Cg * one + (layer.Cg - 1) * int(gap(ps[-1].steps, 0, ps[0].load, db))


def step_index(layer: ConvLayer, tile_rows: int, p: Params) -> tuple[np.ndarray, ...]:
    """(image, output map, input map of the group, tile row) of every memory step in loop
    order: one step per (n, k, tile row) in the tile-major order (input map 0 stands for
    all), per (n, k, input map, tile row) in the map-major order."""
    cg = layer.Cg if p.loop_order == "map-major" else 1
    return tuple(np.indices((layer.N, layer.K, cg, tile_rows)).reshape(4, -1))


def step_cycles(layer: ConvLayer, ps: list[Pass], tiles: tuple[int, int],
                p: Params) -> np.ndarray:
    """Cycles of each memory step, from the cycle its first pass starts stepping to the
    cycle the next step's does (the first step from cycle 0, the last to the layer's end
    with its final register write). A step runs a tile row's visits (``tiles[1]``); each
    visit ends with a register write, and a map-major visit of input map c > 0 starts
    with a register read, the previous map's partial sums (cycles)."""
    _, _, c, _ = step_index(layer, tiles[0], p)
    w, db, first, last = p.result_cycles, p.double_buffer, ps[0], ps[-1]
    pre = w * (c > 0)
    pre_next = np.append(pre[1:], 0)
    per_visit = visit_cycles(layer, ps, p)

    def edge(read):  # from the last pass of a visit starting to the next visit's first
        return gap(last.steps, w + read, first.load, db)

    out = tiles[1] * per_visit + (tiles[1] - 1) * edge(pre) + edge(pre_next)
    out[0] += first.load
    out[-1] += last.steps + w - edge(pre_next[-1:])[0]
    return out.astype(np.int64)


def count(layer: ConvLayer, p: Params, axes: tuple[Axis, Axis] | None = None) -> Counts:
    """The fast model: every count of the machine for ``layer``, in closed form (``axes``:
    its ``plan``, if already made)."""
    rows, cols = axes or plan(layer, p)
    ps = passes(rows, cols, p)
    tiles = layer.N * layer.K * rows.tiles * cols.tiles
    repeats = tiles * layer.Cg  # (tile, input map) pairs, each running every pass
    maps = layer.N * layer.K * layer.Cg
    outputs = layer.N * layer.K * layer.P * layer.Q
    map_major = p.loop_order == "map-major"
    visits = repeats if map_major else tiles
    reloads = tiles * (layer.Cg - 1) if map_major else 0
    psums = outputs * (layer.Cg - 1) if map_major else 0
    return Counts(
        cycles=int(step_cycles(layer, ps, (rows.tiles, cols.tiles), p).sum()),
        steps=repeats * layer.R * layer.S, pixel_sets=repeats * len(ps),
        load_cycles=repeats * sum(q.load for q in ps),
        coef_load_cycles=repeats * sum(q.coef_load for q in ps),
        result_cycles=p.result_cycles * (visits + reloads),
        pixels_loaded=repeats * sum(q.pixels for q in ps),
        ifmap_reads=maps * rows.real * cols.real, coef_reads=repeats * layer.R * layer.S,
        output_writes=outputs, psum_writes=psums, psum_reads=psums,
        pixel_shift_ops=repeats * sum(pass_shift_ops(q, layer.dilation, p) for q in ps),
        tiles=tiles)


def zero_inserted(layer: ConvLayer) -> ConvLayer:
    """The same layer with its filter expanded by Eq. 4 (zeros between taps), dilation 1."""
    (dh, dw) = layer.dilation
    return replace(layer, R=dh * (layer.R - 1) + 1, S=dw * (layer.S - 1) + 1, dilation=(1, 1))


def expand_filter(w: np.ndarray, dilation: tuple[int, int]) -> np.ndarray:
    """Eq. 4: C'[x, y] = C[x/R, y/R] where both are multiples of R, else 0."""
    dh, dw = dilation
    k, c, r, s = w.shape
    out = np.zeros((k, c, dh * (r - 1) + 1, dw * (s - 1) + 1), w.dtype)
    out[:, :, ::dh, ::dw] = w
    return out


def extra(c: Counts, zero_steps: int) -> dict:
    """The machine's own counters of ``LayerStats.extra`` from its counts and the steps
    the zero-inserted filter would take (``zero_steps``)."""
    return {"steps": c.steps, "pixel_sets": c.pixel_sets, "load_cycles": c.load_cycles,
            "coef_load_cycles": c.coef_load_cycles, "result_cycles": c.result_cycles,
            "load_stall_cycles": c.cycles - c.steps - c.result_cycles,
            "pixels_loaded": c.pixels_loaded, "psum_writes": c.psum_writes,
            "psum_reads": c.psum_reads, "pixel_shift_ops": c.pixel_shift_ops,
            "output_tiles": c.tiles, "zero_inserted_steps": zero_steps,
            "skipped_zero_taps": zero_steps - c.steps}


def steps(layer: ConvLayer, p: Params, axes: tuple[Axis, Axis] | None = None) -> Steps:
    """The layer as the memory model sees it: one step per (image, output map, tile row)
    in the tile-major order, per (image, output map, input map, tile row) in the
    map-major order. A step streams its tile row's input band (the rows no earlier tile
    row loaded, every used column) of the channels it reads (the group's, or its input
    map), reads those channels' coefficients of its output map, and accumulates into its
    output rows: the final outputs once the group's last input map is in, partial sums
    (``ACC_BYTES`` each) before. Cycles: ``step_cycles``; SRAM bytes: the pixels written
    into the grid, the coefficients, the outputs and partial sums written and read.
    ``axes``: the layer's ``plan``, if already made."""
    rows, cols = axes or plan(layer, p)
    ps, elem = passes(rows, cols, p), element_bytes(layer.dtype)
    n, k, c, ty = step_index(layer, rows.tiles, p)
    cgs = layer.Cg if p.loop_order == "map-major" else 1
    channels = layer.Cg // cgs  # input maps one step reads
    outputs = np.array(rows.outputs)[ty] * layer.Q
    loaded = np.array(rows.per_tile)[ty] * cols.real * channels
    coefs = cols.tiles * channels * layer.R * layer.S
    written = outputs * np.where(c == cgs - 1, elem, ACC_BYTES)
    reread = outputs * ACC_BYTES * (c > 0)
    return Steps(
        compute=step_cycles(layer, ps, (rows.tiles, cols.tiles), p),
        ifmap=((n * layer.groups + k // layer.Kg) * cgs + c) * rows.tiles + ty,
        ifmap_bytes=np.array(rows.first)[ty] * int(np.sum(cols.first)) * channels * elem,
        filter=k * cgs + c, filter_bytes=channels * layer.R * layer.S * elem,
        ofmap=(n * layer.K + k) * rows.tiles + ty, ofmap_bytes=outputs * elem,
        psum_bytes=outputs * ACC_BYTES if cgs > 1 else 0,
        sram_bytes=(loaded + coefs) * elem + written + reread)


def compiled(layer: ConvLayer, arch,
             memo: Memo | None = None) -> tuple[tuple[int, int], stats.LayerStats]:
    """The tap-run lengths the planner keeps for ``layer`` on ``arch`` (rows, columns) and
    the layer's stats in them: of ``run_lengths``, those of fewest cycles with the memory's
    stalls (the longest at equal cycles). The runs are weighed in order of their compute
    cycles (``count``, a floor of their cycles), and a plan whose compute alone exceeds the
    best cycles so far is not priced. The plans, their counts and their steps follow the
    machine alone (``Params``): ``memo`` (the layer's) keeps them for later archs."""
    p = arch.params(Params)
    memo = Memo() if memo is None else memo
    plans = memo.get(("plans", p), lambda: {
        lengths: (axes, count(layer, p, axes))
        for lengths, axes in ((k, plan(layer, p, k)) for k in run_lengths(layer, p))})
    longest = next(iter(plans))
    best = None
    for lengths in sorted(plans, key=lambda k: plans[k][1].cycles):  # longest first if equal
        if best is not None and plans[lengths][1].cycles > best[1].cycles:
            break
        axes, counted = plans[lengths]
        st = layer_stats(layer, arch, axes, lengths != longest, counted,
                         memo.get(("plan steps", p, lengths), lambda a=axes: steps(layer, p, a)))
        if best is None or (st.cycles, -sum(lengths)) < (best[1].cycles, -sum(best[0])):
            best = lengths, st
    return best


def layer_stats(layer: ConvLayer, arch, axes: tuple[Axis, Axis] | None = None,
                shortened: bool = False, counted: Counts | None = None,
                st: Steps | None = None) -> stats.LayerStats:
    """The fast model's LayerStats of ``layer`` in the plan ``axes`` (None: the longest
    runs; ``shortened``: the planner cut shorter ones; ``counted`` and ``st``: its
    ``count`` and ``steps``, if already made), priced by ``stats.price``: useful
    MACs the layer's, every lane of every step a product, mapped multiplier-cycles those on
    stride-1 positions inside the map; SRAM: every real pixel written into the grid, every
    coefficient into the coefficient storage, every output (element bytes) and partial sum
    (``ACC_BYTES``) written or read. DRAM and stalls: the memory model on ``steps``.
    Bytes, cycles, pJ."""
    p = arch.params(Params)
    elem = element_bytes(layer.dtype)
    axes = rows, cols = axes or plan(layer, p)
    c = counted or count(layer, p, axes)
    zi = zero_inserted(layer)  # same outputs, so the same tiles, each stepping every tap
    zero_steps = layer.N * layer.K * layer.Cg * rows.tiles * cols.tiles * zi.R * zi.S
    counts = stats.Counts(
        NAME, macs=layer.macs, dense_macs=layer.macs, multipliers=p.macs,
        mapped_pe_cycles=layer.N * layer.K * layer.Cg * layer.R * layer.S * rows.dense
        * cols.dense, products=c.steps * p.macs, sram_ifmap_bytes=c.ifmap_reads * elem,
        sram_filter_bytes=c.coef_reads * elem,
        sram_ofmap_bytes=c.output_writes * elem + (c.psum_writes + c.psum_reads) * ACC_BYTES,
        extra={**extra(c, zero_steps), "shortened_run_layers": int(shortened)})
    return stats.price(layer, counts, steps(layer, p, axes) if st is None else st, arch)


def dilated_conv(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias) -> np.ndarray:
    """Outputs from the real taps only: one strided window per tap (serpentine order),
    times that tap's coefficients, summed. float32 in/out; int8 in, exact int32 out."""
    integer = np.issubdtype(x.dtype, np.integer)
    acc = np.float64 if integer else np.float32  # int8 sums: exact in float64
    taps = shift_grid.serpentine(layer.R, layer.S)
    if layer.Cg == 1:  # depthwise: one product per output, not G tiny GEMMs
        out = engine.depthwise(x, w, layer, acc, taps, bias)
        return engine.finish(out, None, layer, integer)
    xp = pad_input(x.astype(np.float32, copy=False), layer)  # int8 values too (``gemm``)
    G, Cg, Kg, pq = layer.groups, layer.Cg, layer.Kg, layer.P * layer.Q
    wg = w.astype(np.float32, copy=False).reshape(G, Kg, Cg, layer.R, layer.S)
    out = np.zeros((layer.N, G, Kg, pq), acc)
    for r, s in taps:  # a tap's products: one GEMM over the channels, exact for int8
        win = np.ascontiguousarray(tap_window(xp, layer, r, s)).reshape(layer.N, G, Cg, pq)
        out += engine.gemm(wg[:, :, :, r, s], win, integer)
    return engine.finish(out.reshape(layer.output_shape), bias, layer, integer)


@register
class DilatedGrid(Machine):
    name = NAME
    Params = Params
    reads_masks = False  # the costs follow the shapes alone

    def supports(self, layer: ConvLayer, arch) -> str | None:
        """Every conv runs: a rate beyond the shifter or a span beyond the grid is cut into
        one-tap runs, non-dilated layers run at R = 1."""
        return None

    def compute(self, layer, x, w, bias, arch):
        """Outputs from the real taps (float32, or exact int32 for int8)."""
        return dilated_conv(layer, x, w, bias)

    def estimate(self, layer, x_mask, w_mask, arch):
        """The costs; the grid steps every real tap, so they depend on shapes, not masks."""
        return compiled(layer, arch)[1]

    def estimate_memo(self, layer, x_mask, w_mask, arch, memo: Memo):
        """``estimate``, the plans, their counts and steps kept in ``memo`` (``compiled``)."""
        return compiled(layer, arch, memo)[1]

    def mapping(self, layer, arch) -> tuple[tuple[int, int]]:
        """The tap-run lengths the planner chose (``compiled``)."""
        return (compiled(layer, arch)[0],)

    def emulate(self, layer, x, w, bias, arch):
        """Outputs and costs from the cycle-by-cycle grid (``npusim.emulate.dilated_grid``),
        in the tap runs the planner chose."""
        from ..emulate.dilated_grid import emulate_stats

        return emulate_stats(layer, x, w, bias, arch, *self.mapping(layer, arch))

    def hardware(self, arch, dtype):
        """The pixel storage grid and the coefficient storage (each twice over when
        double-buffered: the shadow grid and coefficients the next set loads into), a MAC
        and an accumulator per type-A unit, the shift network (a 2-input multiplexer per
        link and pixel bit); the three SRAMs."""
        from ..area import Hardware, element_bits, memory_kib

        p, bits = arch.params(Params), element_bits(dtype)
        copies = 2 if p.double_buffer else 1
        storage = (p.grid_rows * p.grid_cols + p.coef_rows * p.coef_cols) * bits * copies
        return Hardware(macs=p.macs, register_bits=storage + p.macs * 32,
                        sram_kib=memory_kib(arch.memory), mux_bits=p.links * bits)

    def diagnostics(self, total: stats.LayerStats) -> list[tuple[str, str]]:
        """Pixel-set load cycles the double buffer did not hide, the MAC unit's cycles moving
        registers to and from the result memory, the pixel sets loaded, the zero taps of
        the zero-inserted kernels the grid skipped, and the layers the planner ran in
        shorter tap runs than fit (``compiled``)."""
        e = total.extra
        shortened = int(e.get("shortened_run_layers", 0))
        skipped, inserted = e.get("skipped_zero_taps", 0), e.get("zero_inserted_steps", 0)
        return [("load cycles not hidden", f"{int(e.get('load_stall_cycles', 0)):,} of "
                                           f"{int(e.get('load_cycles', 0)):,} load cycles"),
                ("result memory cycles", f"{int(e.get('result_cycles', 0)):,} (partial sums "
                                         f"written {int(e.get('psum_writes', 0)):,})"),
                ("pixel sets", f"{int(e.get('pixel_sets', 0)):,}"),
                ("zero taps skipped", f"{int(skipped):,} of {int(inserted):,} "
                                      f"zero-inserted steps ({percent(skipped, inserted)})"),
                ("shortened tap runs",
                 f"{shortened:,} layer{'s' if shortened != 1 else ''}: runs shorter than the "
                 "grid holds, whose smaller pixel sets load sooner")]
