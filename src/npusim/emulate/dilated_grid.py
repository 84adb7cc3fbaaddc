"""Cycle emulator of the dilated-grid machine (seed 002, Figs. 5-7, 15, 16).

Registers, not formulas: a pixel storage grid whose units take their next value from a
neighbour through the shift network (flat links of distance 1 and 2, or H levels of
1, 2, 4, ...), a coefficient storage whose units shift by 1, an M x N MAC unit fed by
the type-A units (the grid's top-left M x N) and the coefficient type-A unit, and a
loader writing ``load_pixels_per_cycle`` pixels per cycle into a shadow grid (or into
the grid itself when single-buffered). Each cycle the loader writes and the MAC unit
takes one step; a pass swaps in when the previous pass has stepped all its taps and its
pixel set is complete. Nothing here uses the fast model's formulas: the counts come out
of the loop, and the tests compare them with ``dataflows.dilated_grid.count``.

``edge`` chooses what a unit on the grid's border takes when its source lies outside:
'wrap' (the opposite border: the grid is a torus, the machine's scheme) or 'zero'
(zero-fill, shown by the tests to lose pixels along the serpentine).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from ..dataflows import shift_grid
from ..dataflows.base import element_bytes
from ..dataflows.dilated_grid import Counts, Params, block_ids, plan
from ..errors import ConfigError
from ..ir import ConvLayer
from ..memory import Steps
from ..quant import check_int32

EDGES = ("wrap", "zero")


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


@dataclass
class Job:
    """One pass: which tile, input map and tap run, and where its pixel set starts."""

    n: int
    k: int
    c: int                           # channel of the kernel
    c_in: int                        # the input map it reads (its group's)
    tile: tuple[int, int]
    run: tuple[int, int, int, int]   # first row tap, row taps, first col tap, col taps
    origin: tuple[int, int]          # pixel set top-left in padded coordinates
    size: tuple[int, int]            # pixel set rows, cols
    first: bool
    last: bool


def jobs(layer: ConvLayer, p: Params) -> list[Job]:
    """Every pass of the layer in machine order: n, k, tile, input map, row run, col run."""
    rows, cols = plan(layer, p)
    (dh, dw) = layer.dilation
    runs = [(a, th, b, tw) for a, th in rows.chunks for b, tw in cols.chunks]
    out = []
    outer = itertools.product(range(layer.N), range(layer.K), range(rows.tiles),
                              range(cols.tiles), range(layer.Cg))
    for n, k, ty, tx, c in outer:
        for i, (a, th, b, tw) in enumerate(runs):
            out.append(Job(n, k, c, k // layer.Kg * layer.Cg + c, (ty, tx), (a, th, b, tw),
                           (ty * p.mac_rows + a * dh, tx * p.mac_cols + b * dw),
                           (dh * (th - 1) + p.mac_rows, dw * (tw - 1) + p.mac_cols),
                           c == 0 and i == 0, c == layer.Cg - 1 and i == len(runs) - 1))
    return out


class Log:
    """What each memory step (image, output map, tile row) moved, as the machine ran:
    real pixels and coefficients read from SRAM, outputs written, the cycle its first
    pass started stepping, and which input pixels and coefficients were read first."""

    def __init__(self, n_steps: int):
        self.pixels, self.coefs, self.outputs = (np.zeros(n_steps, np.int64) for _ in range(3))
        self.starts: list[int] = []
        self.seen: set = set()           # (n, input map, y, x) read so far
        self.first: dict = {}            # (n, input map, tile row) -> pixels first read there
        self.kernel: set = set()         # (k, c, r, s) coefficients read so far

    def tile_rows(self, layer: ConvLayer) -> int:
        return len(self.pixels) // (layer.N * layer.K)


@dataclass
class Loading:
    """A pixel set being written into the (shadow) grid, row by row, a segment a cycle."""

    job: Job
    pixels: np.ndarray
    coefs: np.ndarray
    order: list[tuple[int, int]]
    written: int = 0

    @property
    def done(self) -> bool:
        return self.written == len(self.order)


@dataclass
class Machine:
    """Registers of the machine and its counters."""

    layer: ConvLayer
    p: Params
    x: np.ndarray
    w: np.ndarray
    bias: np.ndarray | None
    edge: str
    acc_type: type
    out: np.ndarray = field(init=False)
    counts: dict = field(default_factory=lambda: dict.fromkeys(
        ("steps", "load_cycles", "pixels_loaded", "ifmap_reads", "coef_reads", "tiles"), 0))

    def __post_init__(self):
        self.out = np.zeros(self.layer.output_shape, self.acc_type)
        self.shifter = Shifter(self.p, self.edge)
        self.acc = np.zeros((self.p.mac_rows, self.p.mac_cols), self.acc_type)
        self.log = Log(self.layer.N * self.layer.K * plan(self.layer, self.p)[0].tiles)

    def step_of(self, job: Job) -> int:
        """The memory step a pass belongs to: (image, output map, tile row), in order."""
        return (job.n * self.layer.K + job.k) * self.log.tile_rows(self.layer) + job.tile[0]

    def start_load(self, job: Job) -> Loading:
        """A fresh shadow grid for ``job``; its coefficients arrive over their own port."""
        a, th, b, tw = job.run
        coefs = np.zeros((self.p.coef_rows, self.p.coef_cols), self.acc_type)
        coefs[:th, :tw] = self.w[job.k, job.c, a:a + th, b:b + tw]
        self.counts["coef_reads"] += th * tw
        self.log.coefs[self.step_of(job)] += th * tw
        self.log.kernel.update((job.k, job.c, a + r, b + s) for r in range(th) for s in range(tw))
        pixels = np.zeros((self.p.grid_rows, self.p.grid_cols), self.acc_type)
        order = [(r, c) for r in range(job.size[0]) for c in range(job.size[1])]
        return Loading(job, pixels, coefs, order)

    def load_cycle(self, ld: Loading) -> None:
        """Write the next pixels of the current set row, ``load_pixels_per_cycle`` at most
        (an SRAM row read); padding and pixels beyond the map are written as zeros."""
        top, left = self.layer.padding[0], self.layer.padding[2]
        row = ld.order[ld.written][0]
        chunk = ld.order[ld.written: ld.written + self.p.load_pixels_per_cycle]
        for r, c in [(r, c) for r, c in chunk if r == row]:
            y, x = ld.job.origin[0] + r - top, ld.job.origin[1] + c - left
            if 0 <= y < self.layer.H and 0 <= x < self.layer.W:
                ld.pixels[r, c] = self.x[ld.job.n, ld.job.c_in, y, x]
                self.counts["ifmap_reads"] += 1
                self.note_read(ld.job, y, x)
            self.counts["pixels_loaded"] += 1
            ld.written += 1
        self.counts["load_cycles"] += 1


    def note_read(self, job: Job, y: int, x: int) -> None:
        """Log one real pixel read by ``job``'s pass, and whether it is read for the first time."""
        self.log.pixels[self.step_of(job)] += 1
        if (job.n, job.c_in, y, x) not in self.log.seen:
            self.log.seen.add((job.n, job.c_in, y, x))
            key = (job.n, job.c_in, job.tile[0])
            self.log.first[key] = self.log.first.get(key, 0) + 1


@dataclass
class Active:
    """The pass on the grid: its registers and the serpentine moves still to make."""

    ld: Loading
    moves: list[int]
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
    if a.step < len(a.moves):
        code = a.moves[a.step]
        rate = m.layer.dilation[1] if code in (0, 2) else m.layer.dilation[0]
        a.ld.pixels = m.shifter.shift(a.ld.pixels, code, rate)
        a.ld.coefs = move(a.ld.coefs, code, 1, "wrap")
    a.step += 1


def begin(m: Machine, ld: Loading) -> Active:
    """Swap a loaded pixel set in; the first pass of a tile starts the MACs at the bias."""
    if ld.job.first:
        m.acc[:] = 0 if m.bias is None else m.bias[ld.job.k]
    _, th, _, tw = ld.job.run
    return Active(ld, shift_grid.moves(th, tw))


def write_tile(m: Machine, job: Job) -> None:
    """Keep the tile's lanes that are real outputs (inside the map, on the stride grid)."""
    (sh, sw), (ty, tx) = m.layer.stride, job.tile
    for i in range(m.p.mac_rows):
        for j in range(m.p.mac_cols):
            y, x = ty * m.p.mac_rows + i, tx * m.p.mac_cols + j
            if y % sh == 0 and x % sw == 0 and y // sh < m.layer.P and x // sw < m.layer.Q:
                m.out[job.n, job.k, y // sh, x // sw] = m.acc[i, j]
                m.log.outputs[m.step_of(job)] += 1
    m.counts["tiles"] += 1


def logged_steps(m: Machine, cycles: int) -> Steps:
    """The memory steps as the machine ran them: each from the cycle its first pass began
    stepping (the first from 0) to the next one's; an input band's DRAM bytes are the
    pixels of the band's group first read in that tile row; a map's filter, the distinct
    coefficients of that map read."""
    L, log, elem = m.layer, m.log, element_bytes(m.layer.dtype)
    tile_rows = log.tile_rows(L)
    bounds = np.array([0, *log.starts[1:], cycles])
    ifmap, filt, ofmap = block_ids(L, tile_rows)
    band = np.zeros(L.N * L.groups * tile_rows, np.int64)
    for (n, c_in, ty), v in log.first.items():
        band[(n * L.groups + c_in // L.Cg) * tile_rows + ty] += v
    kernel = np.zeros(L.K, np.int64)
    for k, *_ in log.kernel:
        kernel[k] += 1
    return Steps(compute=np.diff(bounds), ifmap=ifmap, ifmap_bytes=band[ifmap] * elem,
                 filter=filt, filter_bytes=kernel[filt] * elem, ofmap=ofmap,
                 ofmap_bytes=log.outputs * elem,
                 sram_bytes=(log.pixels + log.coefs + log.outputs) * elem)


def emulate(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias, p: Params,
            edge: str = "wrap") -> tuple[np.ndarray, Counts, Steps]:
    """Run ``layer`` cycle by cycle: (outputs, counts, the memory steps as run). float32
    in/out, int8 in, int32 out."""
    if edge not in EDGES:
        raise ConfigError(f"edge={edge!r}: must be one of {', '.join(EDGES)}")
    integer = np.issubdtype(x.dtype, np.integer)
    m = Machine(layer, p, x, w, bias, edge, np.int64 if integer else np.float32)
    queue, nxt, active, shadow, cycles = jobs(layer, p), 0, None, None, 0
    while active or shadow or nxt < len(queue):
        if shadow is None and nxt < len(queue) and (p.double_buffer or active is None):
            shadow, nxt = m.start_load(queue[nxt]), nxt + 1
        if shadow is not None and not shadow.done:
            m.load_cycle(shadow)
        if active is not None:
            mac_step(m, active)
        cycles += 1
        if active is not None and active.done:
            if active.ld.job.last:
                write_tile(m, active.ld.job)
            active = None
        if active is None and shadow is not None and shadow.done:
            active, shadow = begin(m, shadow), None
            job = active.ld.job
            if job.first and job.tile[1] == 0:  # a new (image, map, tile row) starts
                m.log.starts.append(cycles)
    out = check_int32(m.out, layer.name) if integer else m.out
    return out, Counts(cycles=cycles, pixel_sets=len(queue), pixel_shift_ops=m.shifter.ops,
                       **m.counts), logged_steps(m, cycles)


def work_estimate(layer: ConvLayer, p: Params) -> int:
    """Estimated work of ``emulate`` (emulator steps of about 1 us, docs/cli.md): its clock
    cycles (the fast model's count, exact), each one grid load and one MAC step with its
    shifts: 64 steps (measured: 52-80 us a cycle)."""
    from ..dataflows.dilated_grid import count

    return 64 * count(layer, p).cycles
