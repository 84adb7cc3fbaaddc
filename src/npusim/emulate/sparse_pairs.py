"""Cycle emulator of the sparse-pairs machine (seed 001): the living definition of its datapath.

Every processor group runs its work units one after another; each unit first
loads one kernel per processor (bit vector + compressed non-zero weights), then
steps through its output pixels. A step broadcasts the pixel's receptive-field
vector (+ compressed features); each processor ANDs it with its kernel vector
(``bitmap.decide``) and then, each cycle, takes the lowest set bit (priority
encoder), reads the feature and the weight at their prefix-count addresses,
multiplies and accumulates (claim 5). The step ends in the cycle in which the
slowest processor issues its last pair (one cycle if no processor has a pair);
outputs are then written and the next step starts in the next cycle. Groups
run in parallel; the layer ends when the last group ends.

The clock records the cycles of every lockstep step (by weight group and pixel), which the
memory model turns into time with stalls (``dataflows.sparse_pairs.steps``).

Deliberately unlike the fast model (``dataflows.sparse_pairs.schedule``): no
mask convolution, no array reductions; Python ints as bit vectors, a clock.
"""

from __future__ import annotations

import numpy as np

from ..dataflows import bitmap, grouping
from ..dataflows.sparse_pairs import Params, Schedule
from ..ir import ConvLayer
from ..quant import check_int32


class Processor:
    """One multiplier with its kernel (bit vector, compressed weights) and accumulator."""

    def __init__(self, kernel: int, wbits: int, wvals: np.ndarray):
        self.kernel, self.wbits, self.wvals = kernel, wbits, wvals
        self.pending = 0  # decided pairs not yet issued (bit vector)
        self.acc = 0
        self.busy = 0  # cycles spent multiplying

    def start(self, fbits: int, fvals: np.ndarray, zero) -> None:
        """Load a receptive-field vector: AND, clear the accumulator."""
        self.fbits, self.fvals = fbits, fvals
        self.pending = bitmap.decide(fbits, self.wbits)
        self.acc = zero

    def tick(self) -> None:
        """One cycle: issue the lowest decided pair, if any."""
        if not self.pending:
            return
        i = bitmap.priority_encode(self.pending)
        f = self.fvals[bitmap.prefix_count(self.fbits, i)]
        w = self.wvals[bitmap.prefix_count(self.wbits, i)]
        self.acc = self.acc + f * w
        self.pending = bitmap.clear_lowest(self.pending)
        self.busy += 1


class Machine:
    """Feature and weight stores, the controller's plan, the counters, the output buffer."""

    def __init__(self, layer: ConvLayer, x, w, bias, p: Params):
        self.layer, self.x, self.bias, self.p = layer, x, bias, p
        self.integer = np.issubdtype(x.dtype, np.integer)
        self.zero = 0 if self.integer else np.float32(0)
        self.width = layer.Cg * layer.R * layer.S
        self.kernels = [bitmap.compress(self._cast(w[k])) for k in range(layer.K)]
        nnz = np.array([bits.bit_count() for bits, _ in self.kernels])
        self.npix = layer.N * layer.P * layer.Q
        self.plan = grouping.plan(nnz, self.npix, p.processor_groups,
                                  p.processors_per_group, p.grouping, p.dealing)
        self.out = np.zeros((layer.N, layer.K, layer.P, layer.Q), object)
        self.step_cycles = np.zeros((len(self.plan.groups), self.npix), np.int64)
        self.skipped = [0, 0, 0]
        self.traffic = 0
        self.step_capacity = self.mapped_capacity = 0

    def _cast(self, a: np.ndarray) -> np.ndarray:
        return a.astype(object) if self.integer else a.astype(np.float32)

    def receptive_field(self, pix: int, g: int) -> tuple[int, np.ndarray]:
        """Bit vector and compressed features of pixel ``pix`` for conv group ``g``:
        bit (c*R + r)*S + s; positions in the padding are zero."""
        L = self.layer
        n, rest = divmod(pix, L.P * L.Q)
        p, q = divmod(rest, L.Q)
        vals = np.zeros(self.width, self.x.dtype)
        for c in range(L.Cg):
            for r in range(L.R):
                for s in range(L.S):
                    h = p * L.stride[0] + r * L.dilation[0] - L.padding[0]
                    v = q * L.stride[1] + s * L.dilation[1] - L.padding[2]
                    if 0 <= h < L.H and 0 <= v < L.W:
                        vals[(c * L.R + r) * L.S + s] = self.x[n, g * L.Cg + c, h, v]
        return bitmap.compress(self._cast(vals))

    def count_skips(self, fbits: int, wbits: int) -> None:
        full = (1 << self.width) - 1
        self.skipped[0] += (fbits & ~wbits & full).bit_count()
        self.skipped[1] += (~fbits & wbits & full).bit_count()
        self.skipped[2] += (~(fbits | wbits) & full).bit_count()


class Group:
    """One processor group: its queue of work units, its processors, its clock."""

    def __init__(self, m: Machine, units: list[int]):
        self.m, self.units = m, units
        self.pixels: list[int] = []
        self.procs: list[Processor | None] = []
        self.busy = np.zeros(m.p.processors_per_group, np.int64)
        self.cycles = 0
        self.step_cycles = 0
        self.stepping = False

    @property
    def done(self) -> bool:
        return not (self.stepping or self.pixels or self.units)

    def load_unit(self) -> None:
        """Next unit: one kernel per processor (weight vectors counted as traffic)."""
        m = self.m
        unit = self.units.pop(0)
        self.weight_group = unit // m.plan.slices
        kernels, lo, hi = m.plan.unit(unit)
        self.procs = [None if k == grouping.EMPTY else Processor(int(k), *m.kernels[k])
                      for k in kernels]
        self.pixels = list(range(lo, hi))
        m.traffic += m.width * sum(pr is not None for pr in self.procs)

    def load_step(self) -> None:
        """Next pixel: broadcast its receptive-field vector(s), AND in every processor."""
        m = self.m
        if not self.pixels:
            self.load_unit()
        self.pix = self.pixels.pop(0)
        fields = {}
        for pr in filter(None, self.procs):
            g = pr.kernel // m.layer.Kg
            if g not in fields:
                fields[g] = m.receptive_field(self.pix, g)
            pr.start(*fields[g], m.zero)
            m.count_skips(fields[g][0], pr.wbits)
        m.traffic += m.width * len(fields)
        self.stepping, self.step_cycles = True, 0

    def tick(self) -> None:
        """One clock cycle of the group."""
        if not self.stepping:
            self.load_step()
        for pr in filter(None, self.procs):
            pr.tick()
        self.cycles += 1
        self.step_cycles += 1
        if not any(pr.pending for pr in self.procs if pr):
            self.finish_step()

    def finish_step(self) -> None:
        """Write the outputs of the step; count its processor-cycles."""
        m, L = self.m, self.m.layer
        n, rest = divmod(self.pix, L.P * L.Q)
        p, q = divmod(rest, L.Q)
        held = [(j, pr) for j, pr in enumerate(self.procs) if pr]
        for j, pr in held:
            m.out[n, pr.kernel, p, q] = pr.acc
            self.busy[j] += pr.busy
            pr.busy = 0
        m.step_cycles[self.weight_group, self.pix] = self.step_cycles
        m.step_capacity += self.step_cycles * len(self.procs)
        m.mapped_capacity += self.step_cycles * len(held)
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


def emulate(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias,
            p: Params) -> tuple[np.ndarray, Schedule]:
    """Run the layer cycle by cycle: (outputs, the counted ``Schedule``)."""
    m = Machine(layer, x, w, bias, p)
    units = [[u for u in range(m.plan.units) if m.plan.processor_group(u) == g]
             for g in range(p.processor_groups)]
    groups = [Group(m, us) for us in units]
    while not all(g.done for g in groups):  # the clock: every busy group ticks once
        for g in groups:
            if not g.done:
                g.tick()
    group_cycles = np.array([g.cycles for g in groups], np.int64)
    return _outputs(m), Schedule(
        pairs=int(sum(g.busy.sum() for g in groups)), skipped=tuple(m.skipped),
        group_cycles=group_cycles, processor_cycles=np.stack([g.busy for g in groups]),
        step_capacity=m.step_capacity, mapped_capacity=m.mapped_capacity,
        bitmap_traffic_bits=m.traffic,
        feature_nonzeros=sum(bitmap.compress(x[n, c])[0].bit_count()
                             for n in range(layer.N) for c in range(layer.C)),
        weight_nonzeros=sum(bits.bit_count() for bits, _ in m.kernels),
        weight_groups=len(m.plan.groups), units=m.plan.units, pixel_cycles=m.step_cycles,
        kernels=m.plan.groups, bounds=m.plan.bounds,
        kernel_nonzeros=np.array([bits.bit_count() for bits, _ in m.kernels], np.int64))


def work_estimate(layer: ConvLayer, p: Params) -> int:
    """Estimated work of ``emulate`` (emulator steps of about 1 us, docs/cli.md), dense (an
    upper bound): every pixel meets every kernel set of ``processors_per_group`` kernels
    once; that lasts one cycle per receptive-field position, in which every processor
    ticks (a step each), after the field is gathered one position at a time (a step each;
    measured: 0.7-1.2 us a step)."""
    sets = -(-layer.K // p.processors_per_group)
    field = layer.Cg * layer.R * layer.S
    return layer.N * layer.P * layer.Q * sets * field * (p.processors_per_group + 1)
