"""Cycle emulator of the sparse-pairs machine (seed 001): the living definition of its datapath.

The controller groups the kernels by their non-zero counts (claims 11-12) and deals work
units (weight group, pixel slice) to the processor groups one after another (claim 13),
all derived here from the weights. Every processor group runs its units one after another;
each unit first loads one kernel per processor into its kernel store (bit vector +
compressed non-zero weights; a kernel larger than the store is streamed through it in
pieces, again for every pixel), then steps through its output pixels. A step broadcasts
the pixel's receptive-field vector (+ compressed features); each processor ANDs it with its
kernel vector (``bitmap.decide``), ``fetch_bits_per_cycle`` bits a cycle, and each cycle the
priority encoder hands the multiplier the lowest decided pair, whose feature and weight are
read at their prefix-count addresses, multiplied and accumulated (claim 5). The step ends
in the cycle in which the last processor has both scanned its vector and issued its last
pair; outputs are then written and the next step starts in the next cycle. Groups run in
parallel; the layer ends when the last group ends.

Every event is counted at its buffer port (values read per pair, vectors broadcast, kernel
loads, outputs written) and the clock records when each step ends; from those the emulator
builds its own ``memory.Steps`` (waves of units side by side, one output row of each unit's
slice a step) and prices them through ``stats.price``.

Deliberately unlike the fast model (``dataflows.sparse_pairs``): no mask convolution, no
array reductions, no shared planning; Python ints as bit vectors, lists, a clock.
"""

from __future__ import annotations

import math

import numpy as np

from ..dataflows import bitmap
from ..dataflows.base import element_bytes
from ..dataflows.sparse_pairs import NAME, Params
from ..ir import ConvLayer
from ..memory import Steps
from ..quant import check_int32
from ..stats import Counts, LayerStats, price
from .apportion import apportion


def group_kernels(nnz: list[int], size: int, policy: str) -> list[list[int]]:
    """Weight groups of ``size`` kernel indices (fewer in the last) by ``policy`` (claim 12):
    in index order; sorted densest first (ties by index) and cut; or densest first, each to
    the group with the smallest total so far (ties: the lowest group) that has room."""
    order = sorted(range(len(nnz)), key=lambda k: (-nnz[k], k))
    n = -(-len(nnz) // size)
    if policy == "in-order":
        return [list(range(i * size, min((i + 1) * size, len(nnz)))) for i in range(n)]
    if policy == "similar-density":
        return [order[i * size:(i + 1) * size] for i in range(n)]
    groups: list[list[int]] = [[] for _ in range(n)]
    load = [0] * n
    for k in order:
        g = min((i for i in range(n) if len(groups[i]) < size), key=lambda i: (load[i], i))
        groups[g].append(k)
        load[g] += nnz[k]
    return groups


def slice_bounds(weight_groups: int, pixels: int, p: Params) -> list[int]:
    """First pixel of every slice and the end: one slice per processor group under
    ``pixel-slices``; under ``weight-groups`` the fewest slices that give every processor
    group as many units; never more slices than pixels."""
    slices = p.processor_groups
    if p.dealing == "weight-groups":
        slices //= math.gcd(weight_groups, p.processor_groups)
    slices = min(slices, pixels)
    return [i * pixels // slices for i in range(slices + 1)]


class Processor:
    """One multiplier with its kernel store (bit vector, compressed weights), its vector
    scan and its accumulator."""

    def __init__(self, kernel: int, wbits: int, wvals: np.ndarray, stored: int, store: int):
        self.kernel, self.wbits, self.wvals = kernel, wbits, wvals
        self.pieces = [min(store, stored - lo) for lo in range(0, stored, store)]
        self.pending = 0  # decided pairs not yet issued (bit vector)
        self.acc = 0
        self.busy = 0  # cycles spent multiplying

    @property
    def streamed(self) -> bool:
        return len(self.pieces) > 1

    def start(self, fbits: int, fvals: np.ndarray, zero) -> None:
        """Take a receptive-field vector: AND, clear the accumulator."""
        self.fbits, self.fvals = fbits, fvals
        self.pending = bitmap.decide(fbits, self.wbits)
        self.acc = zero

    def tick(self) -> int:
        """One cycle: issue the lowest decided pair, if any; 1 if a pair was multiplied."""
        if not self.pending:
            return 0
        i = bitmap.priority_encode(self.pending)
        f = self.fvals[bitmap.prefix_count(self.fbits, i)]
        w = self.wvals[bitmap.prefix_count(self.wbits, i)]
        self.acc = self.acc + f * w
        self.pending = bitmap.clear_lowest(self.pending)
        self.busy += 1
        return 1


class Machine:
    """Feature and weight stores, the controller's plan, the counters, the output buffer."""

    def __init__(self, layer: ConvLayer, x, w, bias, p: Params):
        self.layer, self.x, self.bias, self.p = layer, x, bias, p
        self.integer = np.issubdtype(x.dtype, np.integer)
        self.zero = 0 if self.integer else np.float32(0)
        self.elem = element_bytes(layer.dtype)
        self.width = layer.Cg * layer.R * layer.S
        self.vector_bytes = -(-self.width // 8)
        self.scan = max(1, -(-self.width // p.fetch_bits_per_cycle))
        self.kernels = [bitmap.compress(self._tap_major(self._cast(w[k])))
                        for k in range(layer.K)]
        self.nnz = [bits.bit_count() for bits, _ in self.kernels]
        self.stored = [self.vector_bytes + n * self.elem for n in self.nnz]
        self.npix = layer.N * layer.P * layer.Q
        self.groups = group_kernels(self.nnz, p.processors_per_group, p.grouping)
        self.bounds = slice_bounds(len(self.groups), self.npix, p)
        self.slices = len(self.bounds) - 1
        self.out = np.zeros((layer.N, layer.K, layer.P, layer.Q), object)
        self.skipped = [0, 0, 0]
        self.port = {"feature_reads": 0, "weight_reads": 0, "field_bits": 0, "kernel_bytes": 0,
                     "kernel_vectors": 0, "outputs": 0}
        self.step_capacity = self.mapped_capacity = 0

    def _cast(self, a: np.ndarray) -> np.ndarray:
        return a.astype(object) if self.integer else a.astype(np.float32)

    @staticmethod
    def _tap_major(kernel: np.ndarray) -> np.ndarray:
        """A (Cg, R, S) kernel as its vector: bit (r*S + s)*Cg + c."""
        return kernel.transpose(1, 2, 0).ravel()

    def unit_of(self, u: int) -> tuple[int, list[int], int, int]:
        """(weight group, its kernels, first pixel, end pixel) of work unit ``u``."""
        wg, sl = divmod(u, self.slices)
        return wg, self.groups[wg], self.bounds[sl], self.bounds[sl + 1]

    def receptive_field(self, pix: int, g: int) -> tuple[int, np.ndarray]:
        """Bit vector and compressed features of pixel ``pix`` for conv group ``g``:
        bit (r*S + s)*Cg + c; positions in the padding are zero."""
        L = self.layer
        n, rest = divmod(pix, L.P * L.Q)
        p, q = divmod(rest, L.Q)
        vals = np.zeros(self.width, self.x.dtype)
        for r in range(L.R):
            for s in range(L.S):
                h = p * L.stride[0] + r * L.dilation[0] - L.padding[0]
                v = q * L.stride[1] + s * L.dilation[1] - L.padding[2]
                if 0 <= h < L.H and 0 <= v < L.W:
                    for c in range(L.Cg):
                        vals[(r * L.S + s) * L.Cg + c] = self.x[n, g * L.Cg + c, h, v]
        return bitmap.compress(self._cast(vals))

    def count_skips(self, fbits: int, wbits: int) -> None:
        full = (1 << self.width) - 1
        self.skipped[0] += (fbits & ~wbits & full).bit_count()
        self.skipped[1] += (~fbits & wbits & full).bit_count()
        self.skipped[2] += (~(fbits | wbits) & full).bit_count()

    def load(self, pr: Processor) -> int:
        """Bytes a kernel load moves into ``pr``'s store (all its pieces), counted."""
        moved = sum(pr.pieces)
        self.port["kernel_bytes"] += moved
        self.port["kernel_vectors"] += self.vector_bytes
        return moved


class Group:
    """One processor group: its queue of work units, its processors, its clock, and the
    log of when each of its steps ended."""

    def __init__(self, m: Machine, units: list[int]):
        self.m, self.units = m, units
        self.pixels: list[int] = []
        self.procs: list[Processor] = []
        self.busy = np.zeros(m.p.processors_per_group, np.int64)
        self.cycles = 0
        self.step_cycles = 0
        self.stepping = False
        self.log: list[dict] = []  # per unit: pixels, their end cycles, kernel-load bytes

    @property
    def done(self) -> bool:
        return not (self.stepping or self.pixels or self.units)

    def load_unit(self) -> None:
        """Next unit: one kernel per processor into its store (a kernel that fits is loaded
        here, once; one that does not is streamed with every step)."""
        m = self.m
        unit = self.units.pop(0)
        wg, kernels, lo, hi = m.unit_of(unit)
        self.procs = [Processor(k, *m.kernels[k], m.stored[k], m.p.kernel_store_bytes)
                      for k in kernels]
        first = sum(m.load(pr) for pr in self.procs if not pr.streamed)
        self.pixels = list(range(lo, hi))
        self.log.append({"unit": unit, "wg": wg, "lo": lo, "ends": [], "loads": [first]})

    def load_step(self) -> None:
        """Next pixel: broadcast its receptive-field vector(s), AND in every processor."""
        m = self.m
        if not self.pixels:
            self.load_unit()
        self.pix = self.pixels.pop(0)
        streamed = sum(m.load(pr) for pr in self.procs if pr.streamed)
        log = self.log[-1]["loads"]
        log[-1] += streamed
        fields = {}
        for pr in self.procs:
            g = pr.kernel // m.layer.Kg
            if g not in fields:
                fields[g] = m.receptive_field(self.pix, g)
            pr.start(*fields[g], m.zero)
            m.count_skips(fields[g][0], pr.wbits)
        m.port["field_bits"] += m.width * len(fields)
        self.stepping, self.step_cycles = True, 0

    def tick(self) -> None:
        """One clock cycle of the group."""
        if not self.stepping:
            self.load_step()
        issued = sum(pr.tick() for pr in self.procs)
        self.m.port["feature_reads"] += issued
        self.m.port["weight_reads"] += issued
        self.cycles += 1
        self.step_cycles += 1
        if self.step_cycles >= self.m.scan and not any(pr.pending for pr in self.procs):
            self.finish_step()

    def finish_step(self) -> None:
        """Write the outputs of the step; count its processor-cycles; log its end."""
        m, L = self.m, self.m.layer
        n, rest = divmod(self.pix, L.P * L.Q)
        p, q = divmod(rest, L.Q)
        for j, pr in enumerate(self.procs):
            m.out[n, pr.kernel, p, q] = pr.acc
            self.busy[j] += pr.busy
            pr.busy = 0
        m.port["outputs"] += len(self.procs)
        m.step_capacity += self.step_cycles * m.p.processors_per_group
        m.mapped_capacity += self.step_cycles * len(self.procs)
        unit = self.log[-1]
        unit["ends"].append(self.cycles)
        unit["loads"].append(0)
        self.stepping = False


def _outputs(m: Machine) -> np.ndarray:
    """Accumulators plus bias, in the machine's arithmetic (int32 or float32)."""
    if m.integer:
        out = m.out.astype(np.int64)
        if m.bias is not None:
            out += np.asarray(m.bias, np.int64).reshape(1, -1, 1, 1)
        return check_int32(out, m.layer.name)
    out = m.out.astype(np.float32)
    if m.bias is not None:
        out += np.asarray(m.bias, np.float32).reshape(1, -1, 1, 1)
    return out


def _chunk_features(m: Machine) -> list[list[int]]:
    """DRAM bytes of every conv group's features in every chunk (one output row of each
    slice): the stored features cut by the groups' non-zero values (the bitmap evenly),
    each group's bytes by the chunks' pixels."""
    Q, G = m.layer.Q, m.layer.groups
    chunk_pixels: dict[int, int] = {}
    for sl in range(m.slices):
        for c, lo in enumerate(range(m.bounds[sl], m.bounds[sl + 1], Q)):
            chunk_pixels[c] = chunk_pixels.get(c, 0) + min(Q, m.bounds[sl + 1] - lo)
    stored, values = m.port["features_stored"], m.port["feature_nonzeros"] * m.elem
    per_group = apportion(stored, [nz * m.elem * G + stored - values
                                   for nz in m.port["group_nonzeros"]])
    return [apportion(b, [chunk_pixels[c] for c in sorted(chunk_pixels)]) for b in per_group]


def _steps(m: Machine, groups: list[Group], sram_total: int) -> Steps:
    """The layer as its waves ran: wave i is every processor group's i-th unit; a step is
    one output row (Q pixels from the unit's first) of each unit of the wave, ending when
    the last of them has done it; it names the feature chunk it reads (of the conv groups
    its wave's kernels belong to: a block per chunk and set of groups, the sets numbered as
    the waves meet them; sets that share a group hold its features once, so a block adds
    to the buffer only its groups no set met before had), the weight groups its wave
    loads (at the wave's first step), its outputs and its SRAM bytes (the kernel loads
    where they happened, the other traffic in proportion to cycles)."""
    Q = m.layer.Q
    features = _chunk_features(m)
    chunks = len(features[0])
    sets: dict[frozenset, int] = {}
    new: dict[frozenset, frozenset] = {}  # set -> its groups no set met before had
    rows = []  # per step: compute, ifmap block and bytes and bytes new to the buffer, wave
    #            or -1, weight, output and kernel-load bytes
    edge, waves = 0, max(len(g.log) for g in groups)
    for wave in range(waves):
        units = [g.log[wave] for g in groups if wave < len(g.log)]
        weight_bytes = sum(m.stored[k] for wg in sorted({u["wg"] for u in units})
                           for k in m.groups[wg])
        read = frozenset(k // m.layer.Kg for u in units for k in m.groups[u["wg"]])
        if read not in sets:
            new[read] = read.difference(*sets)
        block = sets.setdefault(read, len(sets)) * chunks
        for c in range(max(-(-len(u["ends"]) // Q) for u in units)):
            taking = [u for u in units if c * Q < len(u["ends"])]
            end = max(u["ends"][min(len(u["ends"]), (c + 1) * Q) - 1] for u in taking)
            outputs = loads = 0
            for u in taking:
                span = range(c * Q, min(len(u["ends"]), (c + 1) * Q))
                outputs += len(span) * len(m.groups[u["wg"]]) * m.elem
                loads += sum(u["loads"][i] for i in span)
            rows.append((max(end, edge) - edge, block + c, sum(features[g][c] for g in read),
                         sum(features[g][c] for g in new[read]),
                         wave if c == 0 else -1, weight_bytes if c == 0 else 0, outputs, loads))
            edge = max(end, edge)
    compute, ifmap, ifmap_bytes, ifmap_held, wave_id, wbytes, obytes, loads = (
        list(col) for col in zip(*rows, strict=True))
    rest = apportion(sram_total - sum(loads), compute)
    return Steps(compute=compute, ifmap=ifmap, ifmap_bytes=ifmap_bytes, ifmap_held=ifmap_held,
                 filter=wave_id, filter_bytes=wbytes, ofmap=list(range(len(rows))),
                 ofmap_bytes=obytes, sram_bytes=[a + b for a, b in zip(loads, rest, strict=True)])


def _counts(m: Machine, groups: list[Group]) -> Counts:
    """The machine's events as ``Counts`` (bytes at the buffer ports; the machine's own
    counters in ``extra``)."""
    L, elem, port = m.layer, m.elem, m.port
    group_cycles = [g.cycles for g in groups]
    busy = np.stack([g.busy for g in groups])
    pairs = int(busy.sum())
    field_bytes = -(-port["field_bits"] // 8)
    weight_nonzeros = sum(m.nnz)
    extra = {
        "skipped_weight_zero": m.skipped[0], "skipped_feature_zero": m.skipped[1],
        "skipped_both_zero": m.skipped[2], "group_cycles_by_unit": tuple(group_cycles),
        "group_cycles_max": max(group_cycles),
        "group_cycles_mean": float(np.mean(group_cycles)),
        "processor_cycles_max": int(busy.max()), "processor_cycles_mean": float(busy.mean()),
        "idle_cycles_within_groups": m.step_capacity - pairs,
        "idle_cycles_between_groups": max(group_cycles) * m.p.processors - m.step_capacity,
        "bitmap_storage_bytes": -(-L.N * L.C * L.H * L.W // 8) + -(-L.K * m.width // 8),
        "bitmap_traffic_bytes": field_bytes + port["kernel_vectors"],
        "value_storage_bytes": (port["feature_nonzeros"] + weight_nonzeros) * elem,
        "kernel_load_bytes": port["kernel_bytes"],
        "streamed_kernels": sum(s > m.p.kernel_store_bytes for s in m.stored),
        "peak_kernel_bytes": max(m.stored),
        "weight_groups": len(m.groups), "work_units": len(m.groups) * m.slices,
    }
    return Counts(NAME, macs=pairs, dense_macs=L.N * L.K * L.P * L.Q * m.width,
                  multipliers=m.p.processors, mapped_pe_cycles=m.mapped_capacity,
                  sram_ifmap_bytes=port["feature_reads"] * elem + field_bytes,
                  sram_filter_bytes=port["weight_reads"] * elem + port["kernel_bytes"],
                  sram_ofmap_bytes=port["outputs"] * elem, extra=extra)


def emulate(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias,
            arch) -> tuple[np.ndarray, LayerStats]:
    """Run the layer cycle by cycle: (outputs, its ``LayerStats`` priced from the counted
    events and the clock's steps)."""
    p = arch.params(Params)
    m = Machine(layer, x, w, bias, p)
    n_units = len(m.groups) * m.slices
    groups = [Group(m, list(range(g, n_units, p.processor_groups)))
              for g in range(p.processor_groups)]
    while not all(g.done for g in groups):  # the clock: every busy group ticks once
        for g in groups:
            if not g.done:
                g.tick()
    nonzero = int(np.count_nonzero(x))
    m.port["feature_nonzeros"] = nonzero
    m.port["group_nonzeros"] = [int(np.count_nonzero(x[:, g * layer.Cg:(g + 1) * layer.Cg]))
                                for g in range(layer.groups)]
    m.port["features_stored"] = nonzero * m.elem + -(-x.size // 8)
    c = _counts(m, groups)
    sram = c.sram_ifmap_bytes + c.sram_filter_bytes + c.sram_ofmap_bytes
    return _outputs(m), price(layer, c, _steps(m, groups, sram), arch)


def work_estimate(layer: ConvLayer, p: Params) -> int:
    """Estimated work of ``emulate`` (emulator steps of about 1 us, docs/cli.md), dense (an
    upper bound): every pixel meets every kernel set once, a conv group's kernels dealt
    ``processors_per_group`` to a set (a depthwise layer: a set of one kernel per group);
    that lasts one cycle per receptive-field position, in which every processor ticks (a
    step each), after the field is gathered one position at a time (a step each;
    measured: 0.7-1.2 us a step). Dealt over the whole layer's kernels, a depthwise
    layer's estimate was short of its sets of one kernel: a 256-channel 112 x 112 layer
    read 3.0e7 steps, passed the limit and took 77 s."""
    sets = layer.groups * -(-layer.Kg // p.processors_per_group)
    field = layer.Cg * layer.R * layer.S
    return layer.N * layer.P * layer.Q * sets * field * (p.processors_per_group + 1)
