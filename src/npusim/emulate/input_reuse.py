"""Cycle-by-cycle emulator of the input-reuse device (seed 000, Figs. 5, 6 and 11-15).

The living definition of the machine that ``dataflows.input_reuse`` counts with
array operations. Per processing unit, the Fig. 6 datapath: one multiplier per region
pixel (times the region depth ``l``, summed by an adder tree), and per partial-OFM
pixel one MUX, one adder and one accumulator register. The MUX of accumulator
``(p, q)`` is wired to the products of pixel ``(p - (umax - u), q - (vmax - v))``
for every tap offset ``(u, v)`` that keeps the pixel inside the region (drawing
610: fan-in 1 at the corner, 9 at (3, 3) for a 4x4 region and a 3x3 kernel); in
the cycle of a tap it selects that tap's input: the point reflection.

Per cycle: every operation unit's processing units each execute one weight cycle
(their own, or, with work stealing, one taken from the unit with most left); a
job that has no weight cycle left hands its partial OFMs to the interconnect;
each server (bus / output unit / chain owner) moves one partial OFM at a time,
``ceil(pixels / bus_width)`` cycles per hop; output units add them onto the OFM at
the region's place (overlap-add) and the output handler adds the bias.
The dispatcher reads each region from the compressed stream (``compressed_ifm``);
with stride, a job takes its region through every phase (``phases``).
The emulator also records every job's end and weight cycles, the non-zero pixels of every
region it decodes and the OFM pixels its accumulators touch: ``emulate`` prices that
schedule through the memory model (``dataflows.input_reuse.steps``, ``stats.price``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..dataflows import compressed_ifm
from ..dataflows.phases import Part, plan
from ..ir import ConvLayer
from ..quant import check_int32
from ..reference import pad_input


@dataclass(frozen=True)
class Datapath:
    """Fig. 6 for one processing unit and one kernel part: MUX wiring and fan-in."""

    region: tuple[int, int]
    depth: int
    pofm: tuple[int, int]
    wiring: tuple[tuple[np.ndarray, np.ndarray], ...]  # per tap: (accumulator, pixel) indices
    fan_in: np.ndarray

    def inventory(self) -> dict:
        """Multipliers, depth adders, MUXes, adders and accumulators of one PU for this part."""
        pixels = self.region[0] * self.region[1]
        cells = self.pofm[0] * self.pofm[1]
        return {"multipliers": pixels * self.depth, "depth_adders": pixels * (self.depth - 1),
                "muxes": cells, "adders": cells, "accumulators": cells,
                "max_fan_in": int(self.fan_in.max())}


def accumulation_position(part: Part, tap: int) -> tuple[int, int]:
    """Partial-OFM position (0-indexed) where region pixel (0, 0) meets the part's ``tap``."""
    return int(part.u.max() - part.u[tap]), int(part.v.max() - part.v[tap])


def datapath(region: tuple[int, int], depth: int, part: Part) -> Datapath:
    """Wire the MUXes of one processing unit for a kernel part (Fig. 6)."""
    rh, rw = region
    pofm = part.pofm_shape(region)
    i, j = np.meshgrid(np.arange(rh), np.arange(rw), indexing="ij")
    wiring, fan_in = [], np.zeros(pofm, np.int64)
    for tap in range(part.r.size):
        dr, dc = accumulation_position(part, tap)
        acc = (i + dr) * pofm[1] + (j + dc)
        wiring.append((acc.ravel(), (i * rw + j).ravel()))
        np.add.at(fan_in.reshape(-1), acc.ravel(), 1)
    return Datapath(region, depth, pofm, tuple(wiring), fan_in)


@dataclass
class Job:
    """One region against one kernel set: per-PU queues of (part, channel group, tap) cycles."""

    seq: int
    n: int
    ti: int
    tj: int
    kernels: list[int]
    queues: list[deque]
    regions: list[np.ndarray]  # per phase: Cg x rh x rw, decoded from the stream
    pofms: dict = field(default_factory=dict)  # (slot, part) -> accumulators
    touched: dict = field(default_factory=dict)  # (slot, part) -> cells some product reached
    start: int = 0


@dataclass
class Counters:
    """What the emulator counted (cycles)."""

    unit_busy: np.ndarray
    pu_dealt: np.ndarray
    pu_busy: int = 0
    transfers: int = 0
    transfer_cycles: int = 0
    contention: int = 0
    hops: int = 0
    last_job_end: int = 0
    last_transfer_end: int = 0
    job_end: dict = field(default_factory=dict)  # job sequence -> cycle it ended
    job_busy: dict = field(default_factory=dict)  # job sequence -> its weight cycles
    region_nonzeros: np.ndarray | None = None  # non-zero pixels read per region


@dataclass
class Result:
    """Outputs (int32 for int8 inputs, float32 otherwise), cycles, counts, inventory."""

    output: np.ndarray
    cycles: int
    counters: Counters
    inventory: dict
    ofm_pixels: int = 0


class Machine:
    """The whole device for one layer: operation units, interconnect servers, output units."""

    def __init__(self, layer: ConvLayer, x, w, params):
        self.layer, self.p = layer, params
        self.integer = np.issubdtype(x.dtype, np.integer)
        self.acc = np.int64 if self.integer else np.float32
        self.w = w.astype(self.acc)
        self.region = (params.region_rows, params.region_cols)
        self.plan = plan(layer, params.kernel_part_rows)
        self.paths = [datapath(self.region, params.region_channels, part)
                      for part in self.plan.parts]
        xp = pad_input(x.astype(self.acc), layer)
        self.streams = [compressed_ifm.encode(ph.input(xp), self.region)
                        for ph in self.plan.phases]
        self.grid = [math.ceil(e / r) for e, r in zip(self.plan.extent, self.region, strict=True)]
        self.ofm = np.zeros(layer.output_shape, self.acc)
        self.touched = np.zeros(layer.output_shape, bool)
        self.counters = Counters(np.zeros(params.operation_units, np.int64),
                                 np.zeros((params.operation_units, params.processing_units),
                                          np.int64),
                                 region_nonzeros=np.zeros(layer.N * math.prod(self.grid),
                                                          np.int64))

    # -- the dispatcher: regions from the compressed stream, weight cycles per PU --------------

    def read_region(self, n: int, phase: int, g: int, ti: int, tj: int) -> np.ndarray:
        """Cg x rh x rw of group ``g`` in one phase, decoded block by block from the stream;
        zeros where the phase input ends before the region grid does."""
        cg, s = self.layer.Cg, self.streams[phase]
        if ti >= s.bitmaps.shape[2] or tj >= s.bitmaps.shape[3]:
            return np.zeros((cg, *self.region), self.acc)
        return np.stack([s.block_at(n, g * cg + c, ti, tj) for c in range(cg)])

    def weight_cycles(self, k: int, regions: list[np.ndarray]) -> deque:
        """The (part, phase, first channel, tap) cycles of kernel k that are not skipped."""
        out, depth = deque(), self.p.region_channels
        for pi, part in enumerate(self.plan.parts):
            for phase, region in enumerate(regions):
                live = region.reshape(region.shape[0], -1).any(axis=1)
                for c0 in range(0, self.layer.Cg, depth):
                    for tap in part.of_phase(phase):
                        wt = self.w[k, c0:c0 + depth, part.r[tap], part.s[tap]]
                        if ((wt != 0) & live[c0:c0 + depth]).any():
                            out.append((pi, phase, c0, tap))
        return out

    def jobs(self) -> list[deque]:
        """Every job, in global order, queued round robin on the operation units."""
        L, p = self.layer, self.p
        units = [deque() for _ in range(p.operation_units)]
        seq = 0
        for n in range(L.N):
            for ti in range(self.grid[0]):
                for tj in range(self.grid[1]):
                    for job in self.region_jobs(n, ti, tj, seq):
                        units[seq % p.operation_units].append(job)
                        seq += 1
        return units

    def region_jobs(self, n, ti, tj, seq):
        """The jobs of one region: per conv group, kernel sets of P kernels."""
        L, P = self.layer, self.p.processing_units
        for g in range(L.groups):
            regions = [self.read_region(n, i, g, ti, tj) for i in range(len(self.streams))]
            here = (n * self.grid[0] + ti) * self.grid[1] + tj
            self.counters.region_nonzeros[here] += sum(np.count_nonzero(r) for r in regions)
            for k0 in range(0, L.Kg, P):
                kernels = [g * L.Kg + k for k in range(k0, min(k0 + P, L.Kg))]
                queues = [self.weight_cycles(k, regions) for k in kernels]
                queues += [deque() for _ in range(P - len(kernels))]
                yield Job(seq, n, ti, tj, kernels, queues, regions)
                seq += 1

    # -- one processing-unit cycle: multipliers, MUXes, accumulators (Fig. 6) ---------------

    def pu_cycle(self, job: Job, slot: int, item) -> None:
        """Execute one weight cycle of kernel slot ``slot`` on the job's region."""
        pi, phase, c0, tap = item
        part, path = self.plan.parts[pi], self.paths[pi]
        k = job.kernels[slot]
        weights = self.w[k, c0:c0 + path.depth, part.r[tap], part.s[tap]]
        region = job.regions[phase][c0:c0 + path.depth]
        products = (region * weights[:, None, None]).sum(axis=0)
        hit = ((region != 0) & (weights != 0)[:, None, None]).any(axis=0)
        acc = job.pofms.setdefault((slot, pi), np.zeros(path.pofm, self.acc))
        seen = job.touched.setdefault((slot, pi), np.zeros(path.pofm, bool))
        cells, pixels = path.wiring[tap]
        acc.reshape(-1)[cells] += products.reshape(-1)[pixels]
        seen.reshape(-1)[cells] |= hit.reshape(-1)[pixels]

    def unit_cycle(self, job: Job) -> None:
        """All processing units of one operation unit for one cycle (with work stealing)."""
        queues = job.queues
        todo = [(slot, q.popleft()) for slot, q in enumerate(queues) if q]
        if self.p.work_stealing:
            for _ in range(len(queues) - len(todo)):
                victim = max(range(len(queues)), key=lambda i: len(queues[i]))
                if not queues[victim]:
                    break
                todo.append((victim, queues[victim].pop()))
        for slot, item in todo:
            self.pu_cycle(job, slot, item)
        self.counters.pu_busy += len(todo)

    # -- output side: servers and output units ---------------------------------------------

    def hand_off(self, job: Job, unit: int, now: int, pending: list) -> None:
        """Queue the job's partial OFMs (slot, part order) for their servers."""
        p = self.p
        for (slot, pi), pofm in sorted(job.pofms.items()):
            k = job.kernels[slot]
            beats = math.ceil(pofm.size / p.bus_width)
            if p.interconnect == "bus":
                server, duration = 0, beats
            elif p.interconnect == "full":
                server, duration = k % p.output_units, beats
            else:
                server = k % p.operation_units
                hops = abs(unit - server)
                duration = beats * hops
                self.counters.hops += hops
            if duration == 0:
                self.accumulate(job, slot, pi, pofm)
                continue
            pending.append(((now, job.seq, slot, pi), server, duration, job, slot, pi, pofm))

    def accumulate(self, job: Job, slot: int, pi: int, pofm: np.ndarray) -> None:
        """Output unit: add a partial OFM onto the OFM at its region's place (overlap-add)."""
        part = self.plan.parts[pi]
        top = job.ti * self.region[0] - int(part.u.max())
        left = job.tj * self.region[1] - int(part.v.max())
        P, Q = self.layer.P, self.layer.Q
        r0, c0 = max(top, 0), max(left, 0)
        r1, c1 = min(top + pofm.shape[0], P), min(left + pofm.shape[1], Q)
        if r1 > r0 and c1 > c0:
            window = (job.n, job.kernels[slot], slice(r0, r1), slice(c0, c1))
            crop = (slice(r0 - top, r1 - top), slice(c0 - left, c1 - left))
            self.ofm[window] += pofm[crop]
            self.touched[window] |= job.touched[slot, pi][crop]

    def serve(self, now: int, pending: list, busy: dict) -> None:
        """Each free server starts the earliest-ready waiting transfer (non-preemptive)."""
        for server in sorted({t[1] for t in pending}):
            if busy.get(server, 0) > now:
                continue
            ready = [t for t in pending if t[1] == server and t[0][0] <= now]
            if not ready:
                continue
            t = min(ready, key=lambda t: t[0])
            pending.remove(t)
            (ready_at, *_), _, duration, job, slot, pi, pofm = t
            busy[server] = now + duration
            c = self.counters
            c.transfers += 1
            c.transfer_cycles += duration
            c.contention += now - ready_at
            c.last_transfer_end = max(c.last_transfer_end, now + duration)
            self.accumulate(job, slot, pi, pofm)

    # -- the clock --------------------------------------------------------------------------

    def start_next(self, queue: deque, unit: int, now: int, pending: list):
        """The unit's next job with work; jobs without any weight cycle end at once."""
        while queue:
            job = queue.popleft()
            job.start = now
            self.counters.pu_dealt[unit] += [len(q) for q in job.queues]
            self.counters.job_busy[job.seq] = sum(len(q) for q in job.queues)
            if any(job.queues):
                return job
            self.counters.job_end[job.seq] = now
            self.hand_off(job, unit, now, pending)
        return None

    def run(self) -> int:
        """Clock the device until every job and transfer is done; returns the cycle count."""
        queues = self.jobs()
        pending: list = []
        current = [self.start_next(q, u, 0, pending) for u, q in enumerate(queues)]
        busy: dict = {}
        now = 0
        while any(j is not None for j in current) or pending:
            self.serve(now, pending, busy)
            for u, job in enumerate(current):
                if job is None:
                    continue
                self.unit_cycle(job)
                self.counters.unit_busy[u] += 1
                if not any(job.queues):
                    self.hand_off(job, u, now + 1, pending)
                    self.counters.last_job_end = now + 1
                    self.counters.job_end[job.seq] = now + 1
                    current[u] = self.start_next(queues[u], u, now + 1, pending)
            now += 1
        return max(self.counters.last_job_end, self.counters.last_transfer_end)

    def output(self, bias) -> np.ndarray:
        """The output handler: bias added, int32 accumulators (int8) or float32."""
        out = self.ofm.copy()
        if bias is not None:
            out += np.asarray(bias).astype(self.acc).reshape(1, -1, 1, 1)
        return check_int32(out, self.layer.name) if self.integer else out

    def inventory(self) -> dict:
        """Hardware of the device for this layer: counts and the MUX fan-in tables."""
        p = self.p
        pus = p.operation_units * p.processing_units
        largest = max(self.paths, key=lambda d: d.pofm[0] * d.pofm[1])
        per_pu = largest.inventory()
        out = {k: v * pus for k, v in per_pu.items() if k != "max_fan_in"}
        out.update(max_fan_in=per_pu["max_fan_in"], per_pu=per_pu,
                   fan_in=[path.fan_in for path in self.paths])
        return out


def emulate_layer(layer: ConvLayer, x, w, bias, params) -> Result:
    """Run one layer on the emulated device: outputs, cycles, counters, inventory."""
    m = Machine(layer, x, w, params)
    cycles = m.run()
    touched = m.touched.size if layer.bias else int(np.count_nonzero(m.touched))
    return Result(m.output(bias), cycles, m.counters, m.inventory(), touched)


def jobs(layer: ConvLayer, x, w, res: Result, sram_total: int):
    """What the memory model needs of the jobs, all counted by the emulator itself."""
    from ..dataflows.input_reuse import Jobs

    c = res.counters
    order = sorted(c.job_end)
    return Jobs(end=np.array([c.job_end[j] for j in order], np.int64),
                busy=np.array([c.job_busy[j] for j in order], np.int64), cycles=res.cycles,
                bus_bound=c.last_transfer_end > c.last_job_end,
                input_nonzeros=int(np.count_nonzero(x)), region_nonzeros=c.region_nonzeros,
                kernel_nonzeros=np.count_nonzero(w.reshape(layer.K, -1), axis=1),
                ofm_pixels=res.ofm_pixels, sram_total=sram_total)


def emulate(layer: ConvLayer, x, w, bias, params, arch):
    """(outputs, LayerStats): the emulator's own schedule priced through the memory model,
    with the fast model's product and SRAM counts and the emulator's own unit counts."""
    from ..dataflows.input_reuse import steps
    from ..stats import Counts, price

    res = emulate_layer(layer, x, w, bias, params)
    st = _fast_stats(layer, x, w, arch)
    c = res.counters
    extra = dict(st.extra, opunit_busy_cycles=int(c.unit_busy.sum()),
                 opunit_busy_cycles_by_unit=tuple(int(b) for b in c.unit_busy),
                 pu_dealt_cycles_by_unit=tuple(int(d) for d in c.pu_dealt.ravel()),
                 opunit_busy_max_cycles=int(c.unit_busy.max()), pu_busy_cycles=c.pu_busy,
                 transfers=c.transfers, transfer_cycles=c.transfer_cycles,
                 contention_cycles=c.contention, chain_hops=c.hops)
    region = params.region_rows * params.region_cols * params.region_channels
    counts = Counts(st.dataflow, macs=st.macs, products=st.products, dense_macs=st.dense_macs,
                    multipliers=params.multipliers, mapped_pe_cycles=c.pu_busy * region,
                    sram_ifmap_bytes=st.sram_ifmap_bytes, sram_filter_bytes=st.sram_filter_bytes,
                    sram_ofmap_bytes=st.sram_ofmap_bytes, extra=extra)
    return res.output, price(layer, counts, steps(layer, params,
                                                  jobs(layer, x, w, res, st.sram_bytes)), arch)


def _fast_stats(layer: ConvLayer, x, w, arch):
    """The fast model's stats: its product, byte and skip counts, which the emulator does
    not recount."""
    from ..dataflows.input_reuse import layer_stats

    return layer_stats(layer, x != 0, w != 0, arch, "input-reuse")


def work_estimate(layer: ConvLayer, params) -> int:
    """Estimated work of ``emulate`` (emulator steps of about 1 us, docs/cli.md), dense (an
    upper bound): for every region of the grid and every kernel, one weight cycle per tap
    and ``region_channels`` channels, planned by the dispatcher and then run by a
    processing unit: 30 steps (measured: 24-34 us a weight cycle)."""
    extent = plan(layer, params.kernel_part_rows).extent
    regions = layer.N * math.ceil(extent[0] / params.region_rows) \
        * math.ceil(extent[1] / params.region_cols)
    cycles = math.ceil(layer.Cg / params.region_channels) * layer.R * layer.S
    return 30 * regions * layer.K * cycles
