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
exceed the coefficient storage, is cut into runs (``shift_grid.axis_chunks``); each
(row run, column run) is one pass: load its pixel set (``set_h x set_w`` pixels, one
row segment of up to ``load_pixels_per_cycle`` pixels per cycle), then step its taps.
Loop order (outer to inner)::

    for image n, output map k (rate R read here, S103), tile (ty, tx):
        acc = bias                                   # S1505
        for input map c of k's group:                # accumulation across maps
            for row run, column run:  load pixel set; th * tw steps (serpentine)
        write the M x N outputs

    cycles = L_1 + sum_i max(S_i, L_(i+1))  (double-buffered grid, L_(T+1) = 0)
           = sum_i (L_i + S_i)                (single buffer)

with S_i the steps and L_i the load cycles of pass i. The grid's edges wrap around
(a torus), so the serpentine never loses a pixel (see docs: zero-fill is wrong).
Memory (``steps``, priced by ``stats.price``): one step per (image, output map, tile
row), streaming that tile row's input band of the map's group, reading the map's
coefficients and writing its outputs; every output map sweeps its group's input again.
The cycle emulator ``npusim.emulate.dilated_grid`` is the living definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .. import engine, stats
from ..arch.spec import MAX_LEVELS, MAX_SIDE, spec
from ..errors import ConfigError
from ..ir import ConvLayer
from ..memory import Steps
from ..reference import pad_input, tap_window
from . import shift_grid
from .base import Machine, element_bytes, percent, register

NAME = "dilated-grid"


@dataclass(frozen=True)
class Params:
    """The ``[dilated-grid]`` section of an arch file. MACs = mac_rows x mac_cols."""
    reconfig_units = 1  # one grid loads its coefficients

    grid_rows: int = spec(6, "pixel storage units (vertical)", min=1, max=MAX_SIDE)
    grid_cols: int = spec(6, "pixel storage units (horizontal)", min=1,
                          max=MAX_SIDE)
    coef_rows: int = spec(3, "coefficient storage units (vertical)", min=1,
                          max=MAX_SIDE)
    coef_cols: int = spec(3, "coefficient storage units (horizontal)", min=1,
                          max=MAX_SIDE)
    mac_rows: int = spec(2, "MACs = type-A pixel units (vertical)", min=1,
                         max=MAX_SIDE)
    mac_cols: int = spec(2, "MACs = type-A pixel units (horizontal)", min=1,
                         max=MAX_SIDE)
    shifter: str = spec("hierarchical", "pixel shift network", choices=("flat", "hierarchical"))
    levels: int = spec(3, "hierarchical shifter levels H (R up to 2**H - 1)", min=1,
                       max=MAX_LEVELS)
    load_pixels_per_cycle: int = spec(6, "contiguous pixels of one row written per cycle",
                                      min=1, max=MAX_SIDE)
    double_buffer: bool = spec(True, "load the next pixel set while stepping")

    def __post_init__(self):
        for mac, grid in (("mac_rows", "grid_rows"), ("mac_cols", "grid_cols")):
            if getattr(self, mac) > getattr(self, grid):
                raise ConfigError(f"dilated-grid.{mac}={getattr(self, mac)}: must be <= "
                                  f"{grid}={getattr(self, grid)} (type-A units lie in the grid)")

    @property
    def macs(self) -> int:
        return self.mac_rows * self.mac_cols

    @property
    def reach(self) -> int:
        """Largest pixel step of one cycle (pixels)."""
        return shift_grid.max_rate(self.shifter, self.levels)

    @property
    def links(self) -> int:
        """Wires of the pixel shift network (links), H x one level's for the hierarchy."""
        return shift_grid.shifter_links(self.grid_rows, self.grid_cols, self.shifter,
                                        self.levels)


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
         grid: int, coef: int, reach: int) -> Axis:
    """Plan one axis: ``size`` input pixels after ``pad`` padding, ``out`` strided outputs."""
    chunks = shift_grid.axis_chunks(taps, rate, grid, tile, coef, reach)
    dense = (out - 1) * stride + 1
    tiles = math.ceil(dense / tile)
    set_len = tuple(rate * (t - 1) + tile for _, t in chunks)
    starts = np.arange(tiles)[:, None] * tile + np.array([rate * a for a, _ in chunks])
    ends = starts + np.array(set_len)
    loaded = np.maximum(np.minimum(ends, pad + size) - np.maximum(starts, pad), 0).sum(axis=1)
    pos = np.arange(size) + pad
    touched = ((pos >= starts[..., None]) & (pos < ends[..., None])).any(axis=1)
    seen = np.cumsum(touched, axis=0) > 0
    first = seen.sum(axis=1) - np.concatenate([[0], seen[:-1].sum(axis=1)])
    lanes = np.arange(tiles)[:, None] * tile + np.arange(tile)
    kept = ((lanes % stride == 0) & (lanes // stride < out)).sum(axis=1)
    return Axis(tuple(chunks), tiles, dense, set_len, int(loaded.sum()),
                tuple(int(v) for v in loaded), tuple(int(v) for v in first),
                tuple(int(v) for v in kept))


def plan(layer: ConvLayer, p: Params) -> tuple[Axis, Axis]:
    """Row and column plans of ``layer`` on the grid."""
    (dh, dw), (sh, sw) = layer.dilation, layer.stride
    rows = axis(layer.H, layer.padding[0], layer.R, dh, sh, layer.P, p.mac_rows, p.grid_rows,
                p.coef_rows, p.reach)
    cols = axis(layer.W, layer.padding[2], layer.S, dw, sw, layer.Q, p.mac_cols, p.grid_cols,
                p.coef_cols, p.reach)
    return rows, cols


@dataclass(frozen=True)
class Pass:
    """One pixel set on the grid: its tap run (th x tw) and what loading it costs."""

    th: int
    tw: int
    pixels: int        # pixels written into the grid (padding and edge zeros included)
    load: int          # cycles to write them (cycles)

    @property
    def steps(self) -> int:
        return self.th * self.tw


def load_cycles(set_h: int, set_w: int, p: Params) -> int:
    """Cycles to write a set_h x set_w pixel set: one input row at a time, at most
    ``load_pixels_per_cycle`` contiguous pixels of it per cycle (cycles)."""
    return set_h * math.ceil(set_w / p.load_pixels_per_cycle)


def passes(rows: Axis, cols: Axis, p: Params) -> list[Pass]:
    """The passes of one (tile, input map), row run outer, column run inner."""
    out = []
    for (_, th), lh in zip(rows.chunks, rows.set_len, strict=True):
        for (_, tw), lw in zip(cols.chunks, cols.set_len, strict=True):
            out.append(Pass(th, tw, lh * lw, load_cycles(lh, lw, p)))
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
    Cycles and steps in cycles; pixels and coefficients in elements."""

    cycles: int
    steps: int
    pixel_sets: int
    load_cycles: int
    pixels_loaded: int
    ifmap_reads: int
    coef_reads: int
    pixel_shift_ops: int
    tiles: int


def buffered_cycles(ps: list[Pass], repeats: int, double_buffer: bool) -> int:
    """Cycles of ``ps`` run ``repeats`` times in a row (the formula of the module doc)."""
    if not double_buffer:
        return repeats * sum(q.load + q.steps for q in ps)
    nxt = [q.load for q in ps[1:]] + [ps[0].load]
    inner = sum(max(q.steps, n) for q, n in zip(ps[:-1], nxt[:-1], strict=True))
    return ps[0].load + repeats * inner + (repeats - 1) * max(ps[-1].steps, nxt[-1]) \
        + ps[-1].steps


def count(layer: ConvLayer, p: Params) -> Counts:
    """The fast model: every count of the machine for ``layer``, in closed form."""
    rows, cols = plan(layer, p)
    ps = passes(rows, cols, p)
    tiles = rows.tiles * cols.tiles
    repeats = layer.N * layer.K * tiles * layer.Cg
    maps = layer.N * layer.K * layer.Cg
    return Counts(
        cycles=buffered_cycles(ps, repeats, p.double_buffer),
        steps=repeats * layer.R * layer.S, pixel_sets=repeats * len(ps),
        load_cycles=repeats * sum(q.load for q in ps),
        pixels_loaded=repeats * sum(q.pixels for q in ps),
        ifmap_reads=maps * rows.real * cols.real, coef_reads=repeats * layer.R * layer.S,
        pixel_shift_ops=repeats * sum(pass_shift_ops(q, layer.dilation, p) for q in ps),
        tiles=layer.N * layer.K * tiles)


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


def _extra(layer: ConvLayer, c: Counts, p: Params) -> dict:
    zi = zero_inserted(layer)
    rows, cols = plan(zi, p)
    zero_steps = layer.N * layer.K * layer.Cg * rows.tiles * cols.tiles * zi.R * zi.S
    return {"steps": c.steps, "pixel_sets": c.pixel_sets, "load_cycles": c.load_cycles,
            "load_stall_cycles": c.cycles - c.steps, "pixels_loaded": c.pixels_loaded,
            "pixel_shift_ops": c.pixel_shift_ops, "output_tiles": c.tiles,
            "zero_inserted_steps": zero_steps, "skipped_zero_taps": zero_steps - c.steps}


def step_cycles(ps: list[Pass], repeats: int, n_steps: int, double_buffer: bool) -> np.ndarray:
    """Cycles of each of ``n_steps`` steps that run ``ps`` ``repeats`` times each, from the
    cycle the step's first pass starts stepping to the cycle the next step's does (the
    first step from cycle 0, the last to the layer's end): their sum is
    ``buffered_cycles(ps, repeats * n_steps, double_buffer)`` (cycles)."""
    first, last = ps[0].load, ps[-1].steps
    if double_buffer:
        nxt = [q.load for q in ps[1:]] + [first]
        period = sum(max(q.steps, n) for q, n in zip(ps, nxt, strict=True))
        tail = last - max(last, first)
    else:
        period, tail = sum(q.load + q.steps for q in ps), -first
    out = np.full(n_steps, repeats * period, np.int64)
    out[0] += first
    out[-1] += tail
    return out


def step_index(layer: ConvLayer, tile_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image, output map, tile row) of every step in loop order: n, k, tile row."""
    n, k, ty = np.indices((layer.N, layer.K, tile_rows)).reshape(3, -1)
    return n, k, ty


def block_ids(layer: ConvLayer, tile_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Block ids of every step: the ifmap band (image, group, tile row) the step streams,
    the filter of its output map, and its own output rows."""
    n, k, ty = step_index(layer, tile_rows)
    return ((n * layer.groups + k // layer.Kg) * tile_rows + ty, k, np.arange(len(n)))


def steps(layer: ConvLayer, p: Params) -> Steps:
    """The layer as the memory model sees it: one step per (image, output map, tile row),
    in loop order. A step streams its tile row's input band of the map's group (the rows
    no earlier tile row loaded, every used column; DRAM bytes of the band), reads the
    map's coefficients, and writes its outputs; its cycles are those of its passes
    (``step_cycles``); SRAM bytes are the pixels, coefficients and outputs it moves."""
    rows, cols = plan(layer, p)
    ps, elem, cg = passes(rows, cols, p), element_bytes(layer.dtype), layer.Cg
    _, _, ty = step_index(layer, rows.tiles)
    ifmap, filt, ofmap = block_ids(layer, rows.tiles)
    used_cols = int(np.sum(np.array(cols.first)))
    outputs = np.array(rows.outputs)[ty] * layer.Q
    loaded = np.array(rows.per_tile)[ty] * cols.real * cg
    coefs = cols.tiles * cg * layer.R * layer.S
    return Steps(
        compute=step_cycles(ps, cols.tiles * cg, len(ty), p.double_buffer),
        ifmap=ifmap, ifmap_bytes=np.array(rows.first)[ty] * used_cols * cg * elem,
        filter=filt, filter_bytes=cg * layer.R * layer.S * elem,
        ofmap=ofmap, ofmap_bytes=outputs * elem,
        sram_bytes=(loaded + coefs + outputs) * elem)


def layer_stats(layer: ConvLayer, arch, c: Counts, st: Steps) -> stats.LayerStats:
    """LayerStats of ``layer`` from its counts and steps, priced by ``stats.price``. SRAM:
    every real pixel written into the grid and every coefficient into the coefficient
    storage is one read; each output written once. DRAM and stalls: the memory model on
    ``st``. Bytes, cycles, pJ."""
    p = arch.params(NAME)
    elem = element_bytes(layer.dtype)
    rows, cols = plan(layer, p)
    mapped = layer.N * layer.K * layer.Cg * layer.R * layer.S * rows.dense * cols.dense
    counts = stats.Counts(
        NAME, macs=layer.macs, dense_macs=layer.macs, multipliers=p.macs,
        mapped_pe_cycles=mapped, sram_ifmap_bytes=c.ifmap_reads * elem,
        sram_filter_bytes=c.coef_reads * elem,
        sram_ofmap_bytes=layer.N * layer.K * layer.P * layer.Q * elem, extra=_extra(layer, c, p))
    return stats.price(layer, counts, st, arch)


def dilated_conv(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias) -> np.ndarray:
    """Outputs from the real taps only: one strided window per tap (serpentine order),
    times that tap's coefficients, summed. float32 in/out; int8 in, exact int32 out."""
    integer = np.issubdtype(x.dtype, np.integer)
    acc = np.float64 if integer else np.float32  # float64 GEMM is exact for int8 sums
    xp = pad_input(x.astype(acc, copy=False), layer)
    G, Cg, Kg, pq = layer.groups, layer.Cg, layer.Kg, layer.P * layer.Q
    wg = w.astype(acc, copy=False).reshape(G, Kg, Cg, layer.R, layer.S)
    out = np.zeros((layer.N, G, Kg, pq), acc)
    for r, s in shift_grid.serpentine(layer.R, layer.S):
        win = np.ascontiguousarray(tap_window(xp, layer, r, s)).reshape(layer.N, G, Cg, pq)
        out += np.matmul(wg[:, :, :, r, s], win)
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
        p = arch.params(NAME)
        return layer_stats(layer, arch, count(layer, p), steps(layer, p))

    def emulate(self, layer, x, w, bias, arch):
        """Outputs and costs from the cycle-by-cycle grid (``npusim.emulate.dilated_grid``)."""
        from ..emulate.dilated_grid import emulate

        out, counts, st = emulate(layer, x, w, bias, arch.params(NAME))
        return out, layer_stats(layer, arch, counts, st)

    def diagnostics(self, total: stats.LayerStats) -> list[tuple[str, str]]:
        """Pixel-set load cycles the double buffer did not hide, the pixel sets loaded, and
        the zero taps of the zero-inserted kernels the grid skipped."""
        e = total.extra
        skipped, inserted = e.get("skipped_zero_taps", 0), e.get("zero_inserted_steps", 0)
        return [("load cycles not hidden", f"{int(e.get('load_stall_cycles', 0)):,} of "
                                           f"{int(e.get('load_cycles', 0)):,} load cycles"),
                ("pixel sets", f"{int(e.get('pixel_sets', 0)):,}"),
                ("zero taps skipped", f"{int(skipped):,} of {int(inserted):,} "
                                      f"zero-inserted steps ({percent(skipped, inserted)})")]
