"""Cycle emulator of the group-tile machine (``dataflows/group_tile``, seed 003 Figs. 6-8).

Each tile is built from its parts and clocked one cycle at a time:

- MAC cells, each with a weight register and a sum register;
- the wide memory, delivering ``wide_words_per_cycle`` 32-bit words of weights a
  cycle into the weight registers of the MACs that need new ones;
- the input bus, ``bus_inputs`` lanes; each lane broadcasts one activation from the
  narrow memory (or a zero for a padding tap) to every MAC of its subset;
- shift registers that take the sum registers at the end of a step and feed the
  output bus, ``output_bus_values`` values a cycle, through the activation unit
  (bias) into the output memory, while the MACs go on with the next step.

The controller deals work units (pixel, partition, output block) to the MAC subsets
in order, in output blocks as wide as the compiler chose (given with the layer, as a
program is: the machine's ``emulate`` passes the width of the fast model's ``compiled``,
narrower than the MACs where a full block's weights would be fetched again for every
step; the tests hold that choice to this emulator's cycles at the other width); a MAC
fires in the cycle its weight register is loaded and its lane carries the input. The
emulator knows nothing of the fast model's formulas: it counts what happens (products,
narrow-memory reads, wide-memory words, values the output bus writes, stalls, each step's
loads), decides what each tile's own narrow and wide memory keep, and prices its counts
through ``stats.price``, and so checks the fast model.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .. import stats
from ..dataflows.base import element_bytes
from ..dataflows.group_tile import NAME, WORD_BYTES, Params
from ..ir import ConvLayer
from ..memory import Steps, traffic, usable_bytes
from ..quant import check_int32


@dataclass(frozen=True)
class Unit:
    """One work unit: image n, output pixel (p, q), partition, first output channel, width."""

    n: int
    p: int
    q: int
    group: int
    k0: int
    width: int


@dataclass
class Counts:
    """Counters one tile fills while it runs (cycles, words, broadcasts, stalls)."""

    cycles: int = 0
    mapped: int = 0
    products: int = 0
    broadcasts: int = 0
    reads: int = 0
    words: int = 0
    written: int = 0
    weight_stalls: int = 0
    drain_stalls: int = 0
    busy: list[int] = field(default_factory=list)
    log: list[dict] = field(default_factory=list)  # per step: clock at its end, what it moved


def work_units(layer: ConvLayer, width: int, capacity: float = math.inf) -> list[Unit]:
    """Every (pixel, partition, output block of up to ``width`` outputs) of the layer, in
    the controller's order: pixel outer, (partition, output block) inner, as long as the
    layer's weights fit ``capacity`` bytes of filter buffer; else the (partition, block)s
    are dealt into chunks that fit (a larger one alone), chunk outer, pixel, block of the
    chunk."""
    size = min(layer.Kg, width)
    blocks = [(g, g * layer.Kg + k0, min(size, layer.Kg - k0))
              for g in range(layer.groups) for k0 in range(0, layer.Kg, size)]
    taps = layer.Cg * layer.R * layer.S * element_bytes(layer.dtype)
    chunks, held = [[]], 0
    for b in blocks:
        if chunks[-1] and held + b[2] * taps > capacity:
            chunks.append([])
            held = 0
        chunks[-1].append(b)
        held += b[2] * taps
    if sum(b[2] for b in blocks) * taps <= capacity:
        chunks = [blocks]
    pixels = [(n, p, q) for n in range(layer.N) for p in range(layer.P) for q in range(layer.Q)]
    return [Unit(n, p, q, g, k0, width) for chunk in chunks for n, p, q in pixels
            for g, k0, width in chunk]


class Tile:
    """One compute tile: MAC registers, bus lanes, wide memory, shift registers, clock."""

    def __init__(self, layer: ConvLayer, x, w, bias, out, p: Params):
        self.layer, self.p, self.out = layer, p, out
        self.integer = np.issubdtype(x.dtype, np.integer)
        self.acc = np.int64 if self.integer else np.float32
        self.x, self.w = x.astype(self.acc), w.astype(self.acc)
        self.bias = None if bias is None else np.asarray(bias).astype(self.acc)
        self.weight_reg = np.zeros(p.macs, self.acc)
        self.sum_reg = np.zeros(p.macs, self.acc)
        self.shift: deque = deque()  # (n, k, p, q, value) awaiting the output bus
        self.elem = element_bytes(layer.dtype)
        self.c = Counts()

    def tick(self, busy: int = 0) -> None:
        """One clock cycle: the output bus moves values out of the shift registers."""
        self.c.cycles += 1
        self.c.busy.append(busy)
        for _ in range(min(self.p.output_bus_values, len(self.shift))):
            n, k, p, q, v = self.shift.popleft()
            self.c.written += 1
            self.out[n, k, p, q] = v + self.bias[k] if self.bias is not None else v

    def lane_value(self, u: Unit, c: int, r: int, s: int):
        """The activation lane ``u`` broadcasts for tap (c, r, s): narrow memory or zero."""
        L = self.layer
        y = u.p * L.stride[0] + r * L.dilation[0] - L.padding[0]
        x = u.q * L.stride[1] + s * L.dilation[1] - L.padding[2]
        if 0 <= y < L.H and 0 <= x < L.W:
            self.c.reads += 1
            return self.x[u.n, u.group * L.Cg + c, y, x]
        return self.acc(0)

    def load_weights(self, step: list[Unit], base: list[int], c, r, s) -> None:
        """Wide memory -> weight registers; the MACs wait until every word is in."""
        need = -(-sum(u.width for u in step) * self.elem // WORD_BYTES)  # packed words
        self.c.words += need
        for u, b in zip(step, base, strict=True):
            self.weight_reg[b:b + u.width] = self.w[u.k0:u.k0 + u.width, c, r, s]
        delivered = self.p.wide_words_per_cycle
        while delivered < need:  # stall cycles: weights still arriving
            self.tick()
            self.c.weight_stalls += 1
            delivered += self.p.wide_words_per_cycle
        self.c.mapped += sum(u.width for u in step) * (-(-need // self.p.wide_words_per_cycle))

    def fire(self, step: list[Unit], base: list[int], c, r, s) -> None:
        """One cycle: each lane broadcasts its input; each mapped MAC multiplies and adds."""
        for u, b in zip(step, base, strict=True):
            lane = self.lane_value(u, c, r, s)
            self.c.broadcasts += 1
            self.c.products += u.width
            self.sum_reg[b:b + u.width] += self.weight_reg[b:b + u.width] * lane
        self.tick(busy=sum(u.width for u in step))

    def hand_off(self, step: list[Unit], base: list[int]) -> None:
        """Sum registers -> shift registers, once the output bus has emptied them."""
        while self.shift:
            self.tick()
            self.c.drain_stalls += 1
        for u, b in zip(step, base, strict=True):
            for j in range(u.width):
                self.shift.append((u.n, u.k0 + j, u.p, u.q, self.sum_reg[b + j]))
        self.sum_reg[:] = 0

    def run(self, units: list[Unit], subsets: int, subset: int) -> Counts:
        """Run the tile's share of work units, ``subsets`` at a time, then drain."""
        L = self.layer
        queue = deque(units)
        while queue:
            step = [queue.popleft() for _ in range(min(subsets, len(queue)))]
            base = [j * subset for j in range(len(step))]
            before = (self.c.reads, self.c.words)
            for c in range(L.Cg):
                for r in range(L.R):
                    for s in range(L.S):
                        self.load_weights(step, base, c, r, s)
                        self.fire(step, base, c, r, s)
            self.hand_off(step, base)
            self.c.log.append({"end": self.c.cycles, "units": step,
                               "reads": self.c.reads - before[0],
                               "words": self.c.words - before[1]})
        while self.shift:
            self.tick()
            self.c.drain_stalls += 1
        if self.c.log:
            self.c.log[-1]["end"] = self.c.cycles
        return self.c


def window(layer: ConvLayer, p: int) -> set[int]:
    """Input rows output row ``p``'s taps read."""
    ys = (p * layer.stride[0] + r * layer.dilation[0] - layer.padding[0] for r in range(layer.R))
    return {y for y in ys if 0 <= y < layer.H}


def used_columns(layer: ConvLayer) -> int:
    """Input columns some output column's taps read."""
    xs = {q * layer.stride[1] + s * layer.dilation[1] - layer.padding[2]
          for q in range(layer.Q) for s in range(layer.S)}
    return sum(1 for x in xs if 0 <= x < layer.W)


def bands(layer: ConvLayer, units: list[Unit]) -> dict:
    """Input rows each output row (n, p) of a tile brings on chip: its window's rows that
    no row of the same image from the tile's first there up to p - 1 had read."""
    first: dict = {}
    for u in units:
        first[u.n] = min(first.get(u.n, u.p), u.p)
    out = {}
    for n, lo in first.items():
        seen: set = set()
        for p in range(lo, layer.P):
            out[(n, p)] = len(window(layer, p) - seen)
            seen |= window(layer, p)
    return out


def tile_log(layer: ConvLayer, c: Counts) -> dict:
    """One tile's steps as it ran them: cycles from the end of the last step to the end of
    this one; the weights it loaded (block: the set of partitions and output blocks its
    units use; bytes: those weights, each once; what the block adds to the wide memory:
    the weights no earlier step loaded, since lanes that pair partitions differently from
    step to step read the same weights); the input band of its last unit's output row
    (whole rows: every used column, all channels) and the activations its taps read; its
    outputs."""
    elem, out = element_bytes(layer.dtype), {k: [] for k in (
        "compute", "ifmap", "ifmap_bytes", "ifmap_size", "filter", "filter_bytes",
        "filter_held", "ofmap_bytes", "sram_bytes")}
    band = bands(layer, [u for step in c.log for u in step["units"]])
    row_bytes = used_columns(layer) * layer.C * elem
    kernel_bytes = layer.Cg * layer.R * layer.S * elem  # one output channel's weights
    blocks: dict = {}
    loaded: set = set()  # (partition, first output channel) of every block loaded so far
    prev = 0
    for step in c.log:
        units = step["units"]
        width = sum(u.width for u in units)
        weights = {(u.group, u.k0): u.width for u in units}  # the step's blocks, each once
        out["compute"].append(step["end"] - prev)
        out["ifmap"].append(units[-1].n * layer.P + units[-1].p)
        out["ifmap_size"].append(band[(units[-1].n, units[-1].p)] * row_bytes)
        out["ifmap_bytes"].append(step["reads"] * elem)
        out["filter"].append(blocks.setdefault(frozenset(weights), len(blocks)))
        out["filter_bytes"].append(sum(weights.values()) * kernel_bytes)
        out["filter_held"].append(sum(v for k, v in weights.items() if k not in loaded)
                                  * kernel_bytes)
        loaded |= weights.keys()
        out["ofmap_bytes"].append(width * elem)
        out["sram_bytes"].append((step["reads"] + width) * elem + step["words"] * WORD_BYTES)
        prev = step["end"]
    return {k: np.array(v, np.int64) for k, v in out.items()}


def own_memory(arch):
    """Each tile's memory: ``narrow_kb`` of narrow (ifmap) and ``wide_kb`` of wide (filter)
    memory, an even share of the arch's SRAM where 0; the rest of ``arch.memory``."""
    p, mem = arch.params(Params), arch.memory
    return dataclasses.replace(mem, ifmap_sram_kb=p.narrow_kb or mem.ifmap_sram_kb / p.tiles,
                               filter_sram_kb=p.wide_kb or mem.filter_sram_kb / p.tiles)


def fetched(log: dict, mem) -> dict[str, np.ndarray]:
    """What one tile's logged steps bring from DRAM into its own memories ``mem``, by the
    memory model's residency rules: a missing input band whole where it fits the narrow
    memory's active half, else the activations the step's taps read; weights per block.
    Holding the bands is worth it only where they move fewer bytes than the steps' own
    taps; else each step fetches its taps (the same bytes, spread over the steps)."""
    whole = log["ifmap_size"] <= usable_bytes(mem.ifmap_sram_kb, mem)
    moved = traffic(Steps(compute=log["compute"], ifmap=log["ifmap"],
                          ifmap_bytes=np.where(whole, log["ifmap_size"], log["ifmap_bytes"]),
                          ifmap_size=log["ifmap_size"], filter=log["filter"],
                          filter_bytes=log["filter_bytes"], filter_held=log["filter_held"]),
                    mem)
    taps = np.asarray(log["ifmap_bytes"], np.int64)
    banded = moved["ifmap"].sum() < taps.sum()
    return {"ifmap": moved["ifmap"] if banded else taps, "filter": moved["filter"]}


def logged_steps(layer: ConvLayer, counts: list[Counts], mem) -> Steps:
    """The tiles' steps side by side (step i = every tile's i-th), timed by the tile that
    finished last; each tile's fetches into its own memories ``mem`` add up into a block of
    the step's own (residency was the tile's); outputs and SRAM bytes add."""
    logs = [tile_log(layer, c) for c in counts if c.log]
    n = max(len(q["compute"]) for q in logs)
    moved = [fetched(q, mem) for q in logs]

    def summed(rows):
        return np.sum([np.pad(r, (0, n - len(r))) for r in rows], axis=0)

    ifmap, filt = (summed([m[k] for m in moved]) for k in ("ifmap", "filter"))
    critical = max(logs, key=lambda q: q["compute"].sum())
    step = np.arange(n)
    return Steps(compute=np.pad(critical["compute"], (0, n - len(critical["compute"]))),
                 ifmap=np.where(ifmap > 0, step, -1), ifmap_bytes=ifmap,
                 filter=np.where(filt > 0, step, -1), filter_bytes=filt, ofmap=step,
                 ofmap_bytes=summed([q["ofmap_bytes"] for q in logs]),
                 sram_bytes=summed([q["sram_bytes"] for q in logs]))


@dataclass
class EmulatorRun:
    """Outputs, each tile's counters, MACs busy per cycle per tile, the memory steps as
    run, and the outputs of an output block."""

    output: np.ndarray
    counts: list[Counts]
    busy: list[np.ndarray]
    steps: Steps | None
    width: int  # outputs of an output block

    def total(self, key: str) -> int:
        """A counter summed over the tiles."""
        return sum(getattr(c, key) for c in self.counts)

    @property
    def cycles(self) -> int:
        """Stall-free layer cycles: the last tile to finish."""
        return max(c.cycles for c in self.counts)


def run_tiles(layer: ConvLayer, x, w, bias, p: Params, mem=None,
              width: int | None = None) -> EmulatorRun:
    """Split the work units across ``p.tiles`` tiles and run each to the end, each tile
    with its own memories ``mem`` (``own_memory``; None: unbounded and nothing timed:
    the steps then carry no DRAM fetches), in output blocks of ``width`` outputs (the
    compiler's choice; None: as many as the MACs hold)."""
    filter_capacity = math.inf if mem is None else usable_bytes(mem.filter_sram_kb, mem)
    integer = np.issubdtype(np.asarray(x).dtype, np.integer)
    out = np.zeros(layer.output_shape, np.int64 if integer else np.float32)
    subset = min(layer.Kg, p.macs if width is None else width)
    units = work_units(layer, subset, filter_capacity)
    subsets = min(p.bus_inputs, p.macs // subset)
    counts = []
    for t in range(p.tiles):
        share = units[t * len(units) // p.tiles:(t + 1) * len(units) // p.tiles]
        counts.append(Tile(layer, x, w, bias, out, p).run(share, subsets, subset))
    output = check_int32(out, layer.name) if integer else out
    steps = None if mem is None else logged_steps(layer, counts, mem)
    return EmulatorRun(output, counts, [np.array(c.busy) for c in counts], steps, subset)


def layer_stats(layer: ConvLayer, arch, run: EmulatorRun) -> stats.LayerStats:
    """The emulated layer's ``LayerStats`` from what the tiles counted, priced by
    ``stats.price``: products fired, activations read from the narrow memory, wide-memory
    words, values the output bus wrote; bus lane slots over the stall-free cycles."""
    p, elem = arch.params(Params), element_bytes(layer.dtype)
    counts = stats.Counts(
        NAME, macs=run.total("products"), dense_macs=layer.macs, multipliers=p.macs * p.tiles,
        mapped_pe_cycles=run.total("mapped"), sram_ifmap_bytes=run.total("reads") * elem,
        sram_filter_bytes=run.total("words") * WORD_BYTES,
        sram_ofmap_bytes=run.total("written") * elem,
        extra={"broadcasts": run.total("broadcasts"),
               "bus_slots": run.cycles * p.bus_inputs * p.tiles,
               "weight_words": run.total("words"),
               "weight_stall_cycles": run.total("weight_stalls"),
               "drain_stall_cycles": run.total("drain_stalls"),
               "narrowed_block_layers": int(run.width < min(layer.Kg, p.macs))})
    return stats.price(layer, counts, run.steps, arch)


def emulate(layer: ConvLayer, x, w, bias, arch,
            width: int | None = None) -> tuple[np.ndarray, stats.LayerStats]:
    """(outputs, LayerStats) of the layer on the emulated tiles of ``arch``'s
    ``[group-tile]`` section, each with its own narrow and wide memory, in output blocks of
    ``width`` outputs (the compiler's choice; None: as many as the MACs hold)."""
    run = run_tiles(layer, x, w, bias, arch.params(Params), own_memory(arch), width)
    return run.output, layer_stats(layer, arch, run)


def work_estimate(layer: ConvLayer, p: Params, width: int | None = None) -> int:
    """Estimated work of ``emulate`` in output blocks of ``width`` outputs (None: as many
    as the MACs hold), in emulator steps of about 1 us (docs/cli.md): every step of
    ``subsets`` work units visits each tap (c, r, s), loading and firing one lane per unit
    and ticking once (an operation each); every output is then shifted out one value at a
    time (one more). An operation is 6 steps (measured: 5.5-6.6 us)."""
    size = min(layer.Kg, p.macs if width is None else width)
    units = layer.N * layer.P * layer.Q * layer.groups * -(-layer.Kg // size)
    subsets = min(p.bus_inputs, p.macs // size)
    taps = layer.Cg * layer.R * layer.S
    outputs = layer.N * layer.K * layer.P * layer.Q
    return 6 * (-(-units // subsets) * taps * (2 * subsets + 1) + outputs)
