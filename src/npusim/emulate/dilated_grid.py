"""Cycle emulator of the dilated-grid machine (seed 002, Figs. 5-7, 15, 16).

Registers, not formulas: a pixel storage grid whose units take their next value from a
neighbour through the shift network (flat links of distance 1 and 2, or H levels of
1, 2, 4, ...), a coefficient storage whose units shift by 1, an M x N MAC unit fed by
the type-A units (the grid's top-left M x N) and the coefficient type-A unit, a result
memory the MAC registers are written to (S1512) and, in the map-major order, read back
from (S1505), and a loader writing ``load_pixels_per_cycle`` pixels and
``coef_loads_per_cycle`` coefficients per cycle into a shadow grid (or into the grid
itself when single-buffered).

Each cycle the loader writes, and the MAC unit either takes one step or moves its
registers to or from the result memory (``result_words_per_cycle`` a cycle). A pass
swaps in when the MAC unit is free and its pixel set and coefficients are complete.

Independent of the fast model: the schedule (tap runs that fit the grid and the
coefficient storage, tiles, pixel sets, the loop order, memory steps and their blocks)
is derived here from the datapath rules, every event is counted as it happens (SRAM
reads and writes per operand, MACs, products, stalls), and the ``LayerStats`` are built
from those counts through ``stats.price``. It shares with ``dataflows.dilated_grid``
only the problem (``ConvLayer``), the ``Params`` and the plain ``Counts`` record; the
tests compare the two on every field. The planner's one choice, how many taps at most a
run takes on each axis (shorter runs load smaller pixel sets at a large dilation), comes
with the layer as a program would: the machine's ``emulate`` passes the fast model's
``compiled`` lengths, and the tests hold that choice to this emulator's cycles at the
other lengths.

``edge`` chooses what a unit on the grid's border takes when its source lies outside:
'wrap' (the opposite border: the grid is a torus, the machine's scheme) or 'zero'
(zero-fill, shown by the tests to lose pixels along the serpentine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import stats
from ..dataflows import shift_grid
from ..dataflows.dilated_grid import NAME, Counts, Params
from ..errors import ConfigError
from ..ir import ConvLayer
from ..memory import Steps
from ..quant import check_int32

EDGES = ("wrap", "zero")
PSUM_BYTES = 4  # a partial sum as the result memory holds it (int32 / float32)


def move(values: np.ndarray, code: int, distance: int, edge: str) -> np.ndarray:
    """Every unit takes the value of the unit ``distance`` away in direction ``code``
    (the window moves that way); border units take the far border's value or zero."""
    dr, dc = shift_grid.DIRECTIONS[code]
    if edge == "wrap":
        return np.roll(values, (-dr * distance, -dc * distance), axis=(0, 1))
    out = np.zeros_like(values)
    h, w = values.shape
    rs, cs = slice(max(0, -dr * distance), h - max(0, dr * distance)), \
        slice(max(0, -dc * distance), w - max(0, dc * distance))
    rd, cd = slice(max(0, dr * distance), h - max(0, -dr * distance)), \
        slice(max(0, dc * distance), w - max(0, -dc * distance))
    out[rs, cs] = values[rd, cd]
    return out


@dataclass
class Shifter:
    """The pixel grid's shift network; counts link activations (one per level engaged)."""

    p: Params
    edge: str
    ops: int = 0

    def shift(self, values: np.ndarray, code: int, distance: int) -> np.ndarray:
        if self.p.shifter == "flat":
            if distance not in (1, 2):
                raise ConfigError(f"dilated-grid.shifter='flat': a shift of {distance} needs "
                                  "links at distance 1 or 2; use 'hierarchical'")
            stages = [distance]
        else:
            stages = shift_grid.level_shifts(distance, self.p.levels)
        for d in stages:  # level by level: shift 2**k or pass through (Fig. 16)
            values = move(values, code, d, self.edge)
            self.ops += 1
        return values


def reach(p: Params) -> int:
    """The largest pixel step the shifter makes in one cycle: 2 on the flat grid (links at
    distance 1 and 2), 1 + 2 + ... + 2**(H-1) through H levels."""
    return 2 if p.shifter == "flat" else sum(1 << k for k in range(p.levels))


def tap_runs(taps: int, rate: int, grid: int, lanes: int, coef: int, longest: int,
             most: int | None = None) -> list[tuple[int, int]]:
    """(first tap, taps) of the runs one filter axis is stepped in: a run grows while its
    next tap still fits: its pixel set (``lanes`` outputs plus ``rate`` per further tap)
    in the grid, its coefficients in the coefficient storage, and it has fewer than
    ``most`` taps (the planner's cap, None: none); a rate the shifter cannot step (beyond
    ``longest``) makes every tap a run of its own."""
    runs, start = [], 0
    while start < taps:
        n = 1
        while (rate <= longest and start + n < taps and n < coef
               and rate * n + lanes <= grid and (most is None or n < most)):
            n += 1
        runs.append((start, n))
        start += n
    return runs


@dataclass(frozen=True)
class Job:
    """One pass: which tile, input map and tap run, where its pixel set starts, and where
    it stands in its visit (the passes of one tile between two register writes)."""

    n: int
    k: int
    c: int                           # channel of the kernel
    c_in: int                        # the input map it reads (its group's)
    tile: tuple[int, int]
    run: tuple[int, int, int, int]   # first row tap, row taps, first col tap, col taps
    origin: tuple[int, int]          # pixel set top-left in padded coordinates
    size: tuple[int, int]            # pixel set rows, cols
    first: bool                      # first pass of its visit
    last: bool                       # last pass of its visit
    reload: bool                     # its visit starts from the partial sums in memory
    final: bool                      # its visit ends the tile: the outputs are written
    step: tuple                      # the memory step it belongs to


def axis_runs(layer: ConvLayer, p: Params,
              most: tuple[int | None, int | None] = (None, None)) -> tuple[list, list]:
    """The row and column tap runs of ``layer``, each at most ``most`` taps long."""
    (dh, dw), (m, nn) = layer.dilation, (p.mac_rows, p.mac_cols)
    return (tap_runs(layer.R, dh, p.grid_rows, m, p.coef_rows, reach(p), most[0]),
            tap_runs(layer.S, dw, p.grid_cols, nn, p.coef_cols, reach(p), most[1]))


def jobs(layer: ConvLayer, p: Params,
         most: tuple[int | None, int | None] = (None, None)) -> list[Job]:
    """Every pass of the layer in machine order, in tap runs of at most ``most`` taps
    (rows, columns). Tile-major: n, k, tile, input map, row run, column run (a tile's MAC
    registers accumulate every input map). Map-major (Fig. 15): n, k, input map, tile,
    runs (each input map sweeps every tile, starting from the previous map's partial
    sums)."""
    (dh, dw), (sh, sw), (m, nn) = layer.dilation, layer.stride, (p.mac_rows, p.mac_cols)
    tiles_y = math.ceil(((layer.P - 1) * sh + 1) / m)
    tiles_x = math.ceil(((layer.Q - 1) * sw + 1) / nn)
    rows, cols = axis_runs(layer, p, most)
    runs = [(a, th, b, tw) for a, th in rows for b, tw in cols]
    cg = layer.C // layer.groups
    map_major = p.loop_order == "map-major"
    out = []

    def add(n, k, c, ty, tx, first_map, last_map):
        for i, (a, th, b, tw) in enumerate(runs):
            out.append(Job(n, k, c, k // (layer.K // layer.groups) * cg + c, (ty, tx),
                           (a, th, b, tw), (ty * m + a * dh, tx * nn + b * dw),
                           (dh * (th - 1) + m, dw * (tw - 1) + nn),
                           first_map and i == 0, last_map and i == len(runs) - 1,
                           map_major and c > 0, c == cg - 1,
                           (n, k, c, ty) if map_major else (n, k, ty)))

    for n in range(layer.N):
        for k in range(layer.K):
            if map_major:
                for c in range(cg):
                    for ty in range(tiles_y):
                        for tx in range(tiles_x):
                            add(n, k, c, ty, tx, True, True)
            else:
                for ty in range(tiles_y):
                    for tx in range(tiles_x):
                        for c in range(cg):
                            add(n, k, c, ty, tx, c == 0, c == cg - 1)
    return out


class Ids:
    """Block ids in order of first appearance: equal keys, equal ids."""

    def __init__(self):
        self.ids: dict = {}

    def __call__(self, key) -> int:
        return self.ids.setdefault(key, len(self.ids))


class Log:
    """What each memory step moved as the machine ran, and the blocks it touched: real
    pixels and coefficients read from SRAM, outputs and partial sums written and read
    (bytes), the cycle its first pass started stepping, the input pixels first read and
    the distinct coefficients read per block."""

    def __init__(self):
        self.order: dict = {}            # step key -> index
        self.sram: list[int] = []        # bytes per step
        self.starts: list[int] = []
        self.blocks: list[tuple] = []    # (ifmap key, filter key, ofmap key) per step
        self.seen: set = set()           # (n, input map, y, x) read so far
        self.band: dict = {}             # ifmap key -> pixels first read there
        self.coefs: dict = {}            # filter key -> distinct coefficients read
        self.outputs: dict = {}          # ofmap key -> outputs finally written
        self.psums: set = set()          # ofmap keys that held partial sums

    def step(self, job: Job, layer: ConvLayer, map_major: bool) -> int:
        if job.step not in self.order:
            self.order[job.step] = len(self.sram)
            self.sram.append(0)
            g = job.c_in // (layer.C // layer.groups)
            ifmap = (job.n, job.c_in, job.tile[0]) if map_major else (job.n, g, job.tile[0])
            self.blocks.append((ifmap, (job.k, job.c) if map_major else job.k,
                                (job.n, job.k, job.tile[0])))
        return self.order[job.step]


@dataclass
class Loading:
    """A pixel set and its coefficients being written into the (shadow) grid and the
    coefficient storage, row by row, a segment a cycle on each port."""

    job: Job
    pixels: np.ndarray
    coefs: np.ndarray
    order: list[tuple[int, int]]
    coef_order: list[tuple[int, int]]
    written: int = 0
    coefs_written: int = 0

    @property
    def done(self) -> bool:
        return self.written == len(self.order) and self.coefs_written == len(self.coef_order)


COUNTERS = ("steps", "load_cycles", "coef_load_cycles", "result_cycles", "stall_cycles",
            "pixels_loaded", "ifmap_reads", "coef_reads", "output_writes", "psum_writes",
            "psum_reads", "tiles", "macs", "mapped", "products", "pixel_sets")


@dataclass
class Machine:
    """Registers of the machine, its result memory and its counters."""

    layer: ConvLayer
    p: Params
    x: np.ndarray
    w: np.ndarray
    bias: np.ndarray | None
    edge: str
    acc_type: type
    out: np.ndarray = field(init=False)
    counts: dict = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    def __post_init__(self):
        self.out = np.zeros(self.layer.output_shape, self.acc_type)
        self.shifter = Shifter(self.p, self.edge)
        self.acc = np.zeros((self.p.mac_rows, self.p.mac_cols), self.acc_type)
        self.result: dict = {}  # (n, k, tile) -> partial sums of the MAC registers
        self.log = Log()
        self.elem = 1 if self.layer.dtype == "int8" else 4
        self.map_major = self.p.loop_order == "map-major"

    def sram(self, job: Job, nbytes: int) -> None:
        self.log.sram[self.log.step(job, self.layer, self.map_major)] += nbytes

    def start_load(self, job: Job) -> Loading:
        """A fresh shadow grid and coefficient storage for ``job``."""
        a, th, b, tw = job.run
        coefs = np.zeros((self.p.coef_rows, self.p.coef_cols), self.acc_type)
        pixels = np.zeros((self.p.grid_rows, self.p.grid_cols), self.acc_type)
        order = [(r, c) for r in range(job.size[0]) for c in range(job.size[1])]
        return Loading(job, pixels, coefs, order, [(r, c) for r in range(th) for c in range(tw)])

    def load_cycle(self, ld: Loading) -> None:
        """Write the next pixels of the current set row (``load_pixels_per_cycle`` at most,
        an SRAM row read; padding and pixels beyond the map are written as zeros) and the
        next coefficients of the current filter row (``coef_loads_per_cycle`` at most)."""
        top, left = self.layer.padding[0], self.layer.padding[2]
        job = ld.job
        if ld.written < len(ld.order):
            row = ld.order[ld.written][0]
            for r, c in ld.order[ld.written: ld.written + self.p.load_pixels_per_cycle]:
                if r != row:
                    break
                y, x = job.origin[0] + r - top, job.origin[1] + c - left
                if 0 <= y < self.layer.H and 0 <= x < self.layer.W:
                    ld.pixels[r, c] = self.x[job.n, job.c_in, y, x]
                    self.counts["ifmap_reads"] += 1
                    self.sram(job, self.elem)
                    self.note_read(job, y, x)
                self.counts["pixels_loaded"] += 1
                ld.written += 1
        if ld.coefs_written < len(ld.coef_order):
            a, _, b, _ = job.run
            row = ld.coef_order[ld.coefs_written][0]
            for r, c in ld.coef_order[ld.coefs_written: ld.coefs_written
                                      + self.p.coef_loads_per_cycle]:
                if r != row:
                    break
                ld.coefs[r, c] = self.w[job.k, job.c, a + r, b + c]
                key = self.log.blocks[self.log.step(job, self.layer, self.map_major)][1]
                self.log.coefs.setdefault(key, set()).add((job.k, job.c, a + r, b + c))
                self.counts["coef_reads"] += 1
                self.sram(job, self.elem)
                ld.coefs_written += 1
            self.counts["coef_load_cycles"] += 1
        self.counts["load_cycles"] += 1

    def note_read(self, job: Job, y: int, x: int) -> None:
        """Log whether a real pixel is read for the first time, in its block."""
        if (job.n, job.c_in, y, x) not in self.log.seen:
            self.log.seen.add((job.n, job.c_in, y, x))
            key = self.log.blocks[self.log.step(job, self.layer, self.map_major)][0]
            self.log.band[key] = self.log.band.get(key, 0) + 1

    def lanes(self, job: Job):
        """(lane, output position) of the tile's lanes that are real outputs (inside the
        map, on the stride grid), and how many lanes lie on stride-1 positions inside it."""
        (sh, sw), (ty, tx) = self.layer.stride, job.tile
        kept, dense = [], 0
        for i in range(self.p.mac_rows):
            for j in range(self.p.mac_cols):
                y, x = ty * self.p.mac_rows + i, tx * self.p.mac_cols + j
                if y <= (self.layer.P - 1) * sh and x <= (self.layer.Q - 1) * sw:
                    dense += 1
                    if y % sh == 0 and x % sw == 0:
                        kept.append(((i, j), (y // sh, x // sw)))
        return kept, dense


@dataclass
class Active:
    """The pass on the grid: its registers and the serpentine moves still to make."""

    ld: Loading
    moves: list[int]
    kept: int
    dense: int
    step: int = 0

    @property
    def done(self) -> bool:
        return self.step == len(self.moves) + 1


def mac_step(m: Machine, a: Active) -> None:
    """One cycle: the type-A units times the coefficient type-A unit into the MAC registers,
    then the pixel grid shifts by the rate and the coefficients by one (Eqs. 8-11)."""
    mr, mc = m.p.mac_rows, m.p.mac_cols
    m.acc += a.ld.pixels[:mr, :mc] * a.ld.coefs[0, 0]
    m.counts["steps"] += 1
    m.counts["products"] += mr * mc
    m.counts["macs"] += a.kept
    m.counts["mapped"] += a.dense
    if a.step < len(a.moves):
        code = a.moves[a.step]
        rate = m.layer.dilation[1] if code in (0, 2) else m.layer.dilation[0]
        a.ld.pixels = m.shifter.shift(a.ld.pixels, code, rate)
        a.ld.coefs = move(a.ld.coefs, code, 1, "wrap")
    a.step += 1


def begin(m: Machine, ld: Loading, cycle: int) -> Active:
    """Swap a loaded pixel set in. A visit's first pass starts the MAC registers at the
    bias or, reloading, at the partial sums the result memory holds for its tile."""
    job = ld.job
    step = m.log.step(job, m.layer, m.map_major)
    if len(m.log.starts) == step:
        m.log.starts.append(cycle)
    kept, dense = m.lanes(job)
    if job.first and job.reload:
        m.acc[:] = m.result.pop((job.n, job.k, job.tile))
        m.counts["psum_reads"] += len(kept)
        m.sram(job, len(kept) * PSUM_BYTES)
    elif job.first:
        m.acc[:] = 0 if m.bias is None else m.bias[job.k]
    m.counts["pixel_sets"] += 1
    _, th, _, tw = job.run
    return Active(ld, shift_grid.moves(th, tw), len(kept), dense)


def write_tile(m: Machine, job: Job) -> None:
    """End of a visit: the real output lanes go to the output map (the tile's last input
    map) or, as partial sums, to the result memory."""
    kept, _ = m.lanes(job)
    ofmap = m.log.blocks[m.log.step(job, m.layer, m.map_major)][2]
    if job.final:
        for (i, j), (y, x) in kept:
            m.out[job.n, job.k, y, x] = m.acc[i, j]
        m.counts["output_writes"] += len(kept)
        m.counts["tiles"] += 1
        m.log.outputs[ofmap] = m.log.outputs.get(ofmap, 0) + len(kept)
        m.sram(job, len(kept) * m.elem)
    else:
        m.result[(job.n, job.k, job.tile)] = m.acc.copy()
        m.counts["psum_writes"] += len(kept)
        m.log.psums.add(ofmap)
        m.sram(job, len(kept) * PSUM_BYTES)


def run(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias, p: Params,
        edge: str = "wrap", most: tuple[int | None, int | None] = (None, None)
        ) -> tuple[Machine, int]:
    """Run ``layer`` cycle by cycle in tap runs of at most ``most`` taps (rows, columns;
    the planner's): (the machine after its last cycle, cycles)."""
    if edge not in EDGES:
        raise ConfigError(f"edge={edge!r}: must be one of {', '.join(EDGES)}")
    integer = np.issubdtype(x.dtype, np.integer)
    m = Machine(layer, p, x, w, bias, edge, np.int64 if integer else np.float32)
    moving = math.ceil(p.mac_rows * p.mac_cols / p.result_words_per_cycle)
    queue, nxt, active, shadow, cycles, busy = jobs(layer, p, most), 0, None, None, 0, 0
    for job in queue[:1]:
        m.log.step(job, layer, m.map_major)
    while active or shadow or nxt < len(queue) or busy:
        if shadow is None and nxt < len(queue) and (p.double_buffer or active is None):
            shadow, nxt = m.start_load(queue[nxt]), nxt + 1
        if shadow is not None and not shadow.done:
            m.load_cycle(shadow)
        if active is not None:
            mac_step(m, active)
        elif busy:
            busy -= 1
            m.counts["result_cycles"] += 1
        else:
            m.counts["stall_cycles"] += 1
        cycles += 1
        if active is not None and active.done:
            job = active.ld.job
            if job.last:
                write_tile(m, job)
                busy += moving
                upcoming = queue[nxt - 1] if shadow is not None else \
                    (queue[nxt] if nxt < len(queue) else None)
                if upcoming is not None and upcoming.reload:
                    busy += moving  # the next visit's partial sums come back first
            active = None
        if active is None and not busy and shadow is not None and shadow.done:
            active, shadow = begin(m, shadow, cycles), None
    return m, cycles


def counts(m: Machine, cycles: int) -> Counts:
    """The machine's counters as the fast model's ``Counts`` record."""
    c = m.counts
    return Counts(cycles=cycles, steps=c["steps"], pixel_sets=c["pixel_sets"],
                  load_cycles=c["load_cycles"], coef_load_cycles=c["coef_load_cycles"],
                  result_cycles=c["result_cycles"], pixels_loaded=c["pixels_loaded"],
                  ifmap_reads=c["ifmap_reads"], coef_reads=c["coef_reads"],
                  output_writes=c["output_writes"], psum_writes=c["psum_writes"],
                  psum_reads=c["psum_reads"], pixel_shift_ops=m.shifter.ops, tiles=c["tiles"])


def logged_steps(m: Machine, cycles: int) -> Steps:
    """The memory steps as the machine ran them: each from the cycle its first pass began
    stepping (the first from 0) to the next one's; an input block's DRAM bytes are the
    pixels first read while it streamed; a filter block's, the distinct coefficients read
    of it; an output block's, the outputs finally written into it (and its partial sums,
    at ``PSUM_BYTES``, if it held any)."""
    log, elem = m.log, m.elem
    ids = [Ids(), Ids(), Ids()]
    blocks = np.array([[ids[i](key) for i, key in enumerate(b)] for b in log.blocks])
    ifmap, filt, ofmap = zip(*log.blocks, strict=True)
    out = [log.outputs.get(o, 0) for o in ofmap]
    return Steps(compute=np.diff([0, *log.starts[1:], cycles]), ifmap=blocks[:, 0],
                 ifmap_bytes=[log.band.get(i, 0) * elem for i in ifmap], filter=blocks[:, 1],
                 filter_bytes=[len(log.coefs.get(f, ())) * elem for f in filt],
                 ofmap=blocks[:, 2], ofmap_bytes=[v * elem for v in out],
                 psum_bytes=[v * PSUM_BYTES if o in log.psums else 0
                             for v, o in zip(out, ofmap, strict=True)],
                 sram_bytes=log.sram)


def layer_stats(m: Machine, cycles: int, arch, shortened: bool = False) -> stats.LayerStats:
    """LayerStats from the machine's own counters and logged steps, via ``stats.price``
    (``shortened``: its tap runs were cut shorter than its pixel sets hold)."""
    c, L, elem = m.counts, m.layer, m.elem
    dh, dw = L.dilation
    zero_steps = c["steps"] // (L.R * L.S) * (dh * (L.R - 1) + 1) * (dw * (L.S - 1) + 1)
    extra = {"steps": c["steps"], "pixel_sets": c["pixel_sets"],
             "load_cycles": c["load_cycles"], "coef_load_cycles": c["coef_load_cycles"],
             "result_cycles": c["result_cycles"], "load_stall_cycles": c["stall_cycles"],
             "pixels_loaded": c["pixels_loaded"], "psum_writes": c["psum_writes"],
             "psum_reads": c["psum_reads"], "pixel_shift_ops": m.shifter.ops,
             "output_tiles": c["tiles"], "zero_inserted_steps": zero_steps,
             "skipped_zero_taps": zero_steps - c["steps"],
             "shortened_run_layers": int(shortened)}
    priced = stats.Counts(
        NAME, macs=c["macs"], dense_macs=L.N * L.K * L.P * L.Q * (L.C // L.groups) * L.R * L.S,
        multipliers=m.p.mac_rows * m.p.mac_cols, mapped_pe_cycles=c["mapped"],
        products=c["products"], sram_ifmap_bytes=c["ifmap_reads"] * elem,
        sram_filter_bytes=c["coef_reads"] * elem,
        sram_ofmap_bytes=c["output_writes"] * elem
        + (c["psum_writes"] + c["psum_reads"]) * PSUM_BYTES, extra=extra)
    return stats.price(L, priced, logged_steps(m, cycles), arch)


def outputs(m: Machine) -> np.ndarray:
    integer = np.issubdtype(m.x.dtype, np.integer)
    return check_int32(m.out, m.layer.name) if integer else m.out


def emulate(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias, p: Params,
            edge: str = "wrap", most: tuple[int | None, int | None] = (None, None)
            ) -> tuple[np.ndarray, Counts, Steps]:
    """Run ``layer`` cycle by cycle in tap runs of at most ``most`` taps: (outputs, counts,
    the memory steps as run). float32 in/out, int8 in, int32 out."""
    m, cycles = run(layer, x, w, bias, p, edge, most)
    return outputs(m), counts(m, cycles), logged_steps(m, cycles)


def emulate_stats(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias, arch,
                  most: tuple[int | None, int | None] = (None, None)
                  ) -> tuple[np.ndarray, stats.LayerStats]:
    """(outputs, LayerStats) of ``layer`` on ``arch`` from the emulator alone, in tap runs
    of at most ``most`` taps (rows, columns: the planner's choice, given with the layer)."""
    p = arch.params(Params)
    m, cycles = run(layer, x, w, bias, p, most=most)
    shortened = axis_runs(layer, p, most) != axis_runs(layer, p)
    return outputs(m), layer_stats(m, cycles, arch, shortened)


def work_estimate(layer: ConvLayer, p: Params,
                  most: tuple[int | None, int | None] = (None, None)) -> int:
    """Estimated work of ``emulate`` in tap runs of at most ``most`` taps (emulator steps of
    about 1 us, docs/cli.md): its clock cycles (the fast model's count, exact), each one
    grid load and one MAC step with its shifts: 64 steps (measured: 52-80 us a cycle)."""
    from ..dataflows.dilated_grid import count, plan

    return 64 * count(layer, p, plan(layer, p, most)).cycles
