"""Cycle-by-cycle emulator of the input-reuse device (seed 000, Figs. 5, 6, 8, 9 and 11-15).

The living definition of the machine that ``dataflows.input_reuse`` counts with
array operations; it derives its own schedule here, from the datapath rules, and its
own memory steps (``input_reuse_memory``: from its log of the jobs it ran, the regions
and kernel sets they read and the partial OFMs they handed off); it shares with the
fast model only the problem (``ConvLayer``), the arch parameters and the pricing
(``stats.price``, the memory model's ``Steps`` and, to choose the loop order, its
residency rules, ``memory.traffic``).

- **Taps and phases.** Tap ``(r, s)`` of a strided, dilated kernel reads padded input
  row ``p*sh + r*dh``: phase ``r*dh mod sh`` at offset ``r*dh div sh`` (columns alike);
  a phase is read up to row ``P - 1 + `` its largest offset.
- **The Fig. 6 datapath**, built from the arch once: per processing unit one multiplier
  per region pixel (times the depth ``l``, summed by an adder tree) and, per partial-OFM
  pixel, one MUX, adder and accumulator register, ``accumulators`` of them. The MUX of
  cell ``(p, q)`` is wired to the multiplier of pixel ``(p - (umax - u), q - (vmax - v))``
  for every offset ``(u, v)`` of the kernel part; in the cycle of a tap it selects that
  tap's wire (the point reflection). Taps of different phases at one offset share a wire.
- **Kernel parts** (Figs. 8/9): the kernel is cut into tiles of taps, the shape giving
  the fewest tiles whose wiring fits ``accumulators`` cells and ``mux_fan_in`` wires per
  cell (ties: more rows, then more columns).
- **Region grid** over the real input map: phase rows and columns that hold a real
  pixel in some phase, from the first such one.

Per cycle: every operation unit's processing units each execute one weight cycle
(their own, or, with work stealing, one taken from the unit with most left); a
job that has no weight cycle left hands its partial OFMs to the interconnect when
the travelling ones fit its unit's first buffer (``first_buffer_kb``, 4 B a pixel)
beside those whose transfer has not ended, or the buffer is empty; until then the unit
stalls (``first_buffer_stalls``) and starts no job; each server (bus / output unit /
chain owner) moves one partial OFM at a time, ``ceil(pixels / bus_width)`` cycles per
hop; output units add them onto the OFM at the region's place (overlap-add) and the
output handler adds the bias.
The dispatcher reads each region as the compressed stream holds it (a bitmap per
channel block and its non-zero values) and the emulator counts the bytes at every
port: region blocks read per kernel set, one weight word per PU and weight cycle, the
partial OFMs written and read, the stream, weights and compressed OFM in DRAM.
The loop order is the one whose steps, planned from the dispatcher's reading of the
regions and kernels before any cycle runs, move fewer DRAM bytes (``choose_order``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..ir import ConvLayer
from ..quant import check_int32
from .input_reuse_memory import ORDERS, Ran, Stored, dram_bytes, memory_steps, slice_blocks

ACC_BYTES = 4  # one accumulator register: int32 or float32


@dataclass(frozen=True)
class Tap:
    """One kernel tap: kernel row/column, phase residues, offsets in the phase."""

    r: int
    s: int
    a: int
    b: int
    u: int
    v: int


def kernel_taps(layer: ConvLayer) -> list[Tap]:
    """Every tap of the kernel, row-major, with its phase and offset."""
    (sh, sw), (dh, dw) = layer.stride, layer.dilation
    return [Tap(r, s, r * dh % sh, s * dw % sw, r * dh // sh, s * dw // sw)
            for r in range(layer.R) for s in range(layer.S)]


@dataclass(frozen=True)
class Datapath:
    """Fig. 6 for one processing unit and one kernel part: MUX wiring and fan-in."""

    region: tuple[int, int]
    depth: int
    taps: tuple[Tap, ...]
    top: tuple[int, int]  # largest offsets (umax, vmax): where pixel (0, 0) of tap 0-offset lands
    pofm: tuple[int, int]
    wiring: tuple[tuple[np.ndarray, np.ndarray], ...]  # per tap: (accumulator, pixel) indices
    fan_in: np.ndarray  # distinct multiplier wires per accumulator

    def inventory(self) -> dict:
        """Multipliers, depth adders, MUXes, adders and accumulators of one PU for this part."""
        pixels = self.region[0] * self.region[1]
        cells = self.pofm[0] * self.pofm[1]
        return {"multipliers": pixels * self.depth, "depth_adders": pixels * (self.depth - 1),
                "muxes": cells, "adders": cells, "accumulators": cells,
                "max_fan_in": int(self.fan_in.max())}


def accumulation_position(path: Datapath, tap: int) -> tuple[int, int]:
    """Partial-OFM position (0-indexed) where region pixel (0, 0) meets the part's ``tap``."""
    t = path.taps[tap]
    return path.top[0] - t.u, path.top[1] - t.v


def datapath(region: tuple[int, int], depth: int, taps) -> Datapath:
    """Wire the MUXes of one processing unit for a kernel part (Fig. 6)."""
    rh, rw = region
    us, vs = [t.u for t in taps], [t.v for t in taps]
    top = (max(us), max(vs))
    pofm = (rh + top[0] - min(us), rw + top[1] - min(vs))
    i, j = np.meshgrid(np.arange(rh), np.arange(rw), indexing="ij")
    wiring, wires = [], set()
    for t in taps:
        acc = ((i + top[0] - t.u) * pofm[1] + (j + top[1] - t.v)).ravel()
        pix = (i * rw + j).ravel()
        wiring.append((acc, pix))
        wires.update(zip(acc.tolist(), pix.tolist(), strict=True))
    fan_in = np.zeros(pofm[0] * pofm[1], np.int64)
    for acc, _ in wires:
        fan_in[acc] += 1
    return Datapath(tuple(region), depth, tuple(taps), top, pofm, tuple(wiring),
                    fan_in.reshape(pofm))


def tiles(taps: list[Tap], rows: int, cols: int) -> list[list[Tap]]:
    """The taps cut into tiles of ``rows x cols`` kernel positions, tile row-major."""
    out: dict = {}
    for t in taps:
        out.setdefault((t.r // rows, t.s // cols), []).append(t)
    return [out[k] for k in sorted(out)]


def kernel_parts(layer: ConvLayer, params) -> list[Datapath]:
    """The fewest kernel parts whose datapaths fit the arch's accumulators and fan-in."""
    taps, region = kernel_taps(layer), (params.region_rows, params.region_cols)
    best = None
    for rows in range(1, layer.R + 1):
        for cols in range(1, layer.S + 1):
            paths = [datapath(region, params.region_channels, part)
                     for part in tiles(taps, rows, cols)]
            if all(p.pofm[0] * p.pofm[1] <= params.accumulators
                   and p.fan_in.max() <= params.mux_fan_in for p in paths):
                key = (len(paths), -rows, -cols)
                if best is None or key < best[0]:
                    best = key, paths
    if best is None:
        raise ConfigError(f"{layer.name}: input-reuse.accumulators={params.accumulators} "
                          f"cannot hold even one tap's {region[0]}x{region[1]} partial OFM")
    return best[1]


def real_span(layer: ConvLayer, taps: list[Tap], axis: int) -> tuple[int, int]:
    """(first, count) of phase rows (axis 0) or columns (1) holding a real input pixel in
    some phase, among those the phase's taps read."""
    if axis == 0:
        pad, size, step, out = layer.padding[0], layer.H, layer.stride[0], layer.P
        reach = {}
        for t in taps:
            reach[t.a] = max(reach.get(t.a, 0), t.u)
    else:
        pad, size, step, out = layer.padding[2], layer.W, layer.stride[1], layer.Q
        reach = {}
        for t in taps:
            reach[t.b] = max(reach.get(t.b, 0), t.v)
    real = [i for a, top in reach.items() for i in range(out + top)
            if pad <= a + i * step < pad + size]
    if not real:
        return 0, 1
    return min(real), max(real) - min(real) + 1


@dataclass
class Job:
    """One region against one kernel set: per-PU queues of (part, first channel, tap) cycles."""

    seq: int
    n: int
    ti: int
    tj: int
    kernels: list[int]
    queues: list[deque]
    regions: dict  # (a, b) phase -> Cg x rh x rw read by the dispatcher
    pofms: dict = field(default_factory=dict)  # (kernel slot, PU, part) -> accumulators
    hits: dict = field(default_factory=dict)  # (kernel slot, PU, part) -> products per cell
    rm: int = -1  # index in region-major order (region, then conv group and kernel set)
    region: int = -1  # index of its region (image, region row, region column)
    kernel_set: int = -1  # index of its kernel set in the region's jobs (conv group, set)
    weight_cycles: int = 0  # its processing units' weight cycles, summed


@dataclass
class Counters:
    """What the emulator counted: cycles, events and bytes at the ports."""

    unit_busy: np.ndarray
    pu_dealt: np.ndarray
    pu_busy: int = 0
    transfers: int = 0
    transfer_cycles: int = 0
    contention: int = 0
    first_buffer_stalls: int = 0
    hops: int = 0
    last_job_end: int = 0
    last_transfer_end: int = 0
    products: int = 0
    macs: int = 0
    dense_cycles: int = 0
    weight_only_cycles: int = 0
    sram_ifmap_bytes: int = 0
    sram_ofmap_bytes: int = 0
    ran: dict = field(default_factory=dict)  # job sequence -> the job as it ran (``Ran``)
    region_nonzeros: np.ndarray | None = None  # non-zero pixels read per region x conv group


@dataclass
class Result:
    """Outputs (int32 for int8 inputs, float32 otherwise), cycles, counts, inventory."""

    output: np.ndarray
    cycles: int
    counters: Counters
    inventory: dict
    machine: Machine | None = None


def block_bytes(block: np.ndarray, elem: int) -> int:
    """Bytes of one block as the compressed stream stores it: a bitmap of one bit per
    pixel, whole bytes, then its non-zero values."""
    return math.ceil(block.size / 8) + int(np.count_nonzero(block)) * elem


def map_stream_bytes(m: np.ndarray, block: tuple[int, int], elem: int) -> int:
    """Bytes of an N x C x H x W map stored compressed in blocks of ``block`` pixels (edge
    blocks padded with zeros)."""
    n, c, h, w = m.shape
    blocks = n * c * math.ceil(h / block[0]) * math.ceil(w / block[1])
    return blocks * math.ceil(block[0] * block[1] / 8) + int(np.count_nonzero(m)) * elem


class Machine:
    """The whole device for one layer: operation units, interconnect servers, output units."""

    def __init__(self, layer: ConvLayer, x, w, params, stealing: bool | None = None,
                 order: str = "region-major"):
        self.layer, self.p, self.order = layer, params, order
        self.stealing = params.work_stealing if stealing is None else stealing
        self.integer = np.issubdtype(x.dtype, np.integer)
        self.acc = np.int64 if self.integer else np.float32
        self.elem = x.dtype.itemsize if self.integer else 4
        self.w = w.astype(self.acc)
        self.region = (params.region_rows, params.region_cols)
        self.taps = kernel_taps(layer)
        self.paths = kernel_parts(layer, params)
        self.phases = sorted({(t.a, t.b) for t in self.taps})
        self.reach = {}  # phase residue -> phase rows / columns its taps read
        for t in self.taps:
            self.reach[0, t.a] = max(self.reach.get((0, t.a), 0), layer.P + t.u)
            self.reach[1, t.b] = max(self.reach.get((1, t.b), 0), layer.Q + t.v)
        (r0, rows), (c0, cols) = real_span(layer, self.taps, 0), real_span(layer, self.taps, 1)
        self.origin = (r0, c0)
        self.grid = (math.ceil(rows / self.region[0]), math.ceil(cols / self.region[1]))
        pt, pb, pl, pr = layer.padding
        self.xp = np.pad(x.astype(self.acc), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        self.ofm = np.zeros(layer.output_shape, self.acc)
        self.touched = np.zeros(layer.output_shape, bool)
        self.counters = Counters(np.zeros(params.operation_units, np.int64),
                                 np.zeros((params.operation_units, params.processing_units),
                                          np.int64),
                                 region_nonzeros=np.zeros((layer.N * math.prod(self.grid),
                                                           layer.groups), np.int64))

    # -- the dispatcher: regions from the compressed stream, weight cycles per PU --------------

    def read_region(self, n: int, phase: tuple[int, int], g: int, ti: int, tj: int):
        """Cg x rh x rw of group ``g`` in one phase: the phase's pixels the taps read, zeros
        past them; counts the stream bytes the dispatcher reads (bitmap and values)."""
        L, (rh, rw) = self.layer, self.region
        (a, b), (sh, sw) = phase, L.stride
        out = np.zeros((L.Cg, rh, rw), self.acc)
        for i in range(rh):
            row = self.origin[0] + ti * rh + i
            if row >= self.reach[0, a]:
                break
            for j in range(rw):
                col = self.origin[1] + tj * rw + j
                if col >= self.reach[1, b]:
                    break
                out[:, i, j] = self.xp[n, g * L.Cg:(g + 1) * L.Cg, a + row * sh, b + col * sw]
        return out

    def weight_cycles(self, k: int, regions: dict) -> deque:
        """The (part, first channel, tap) cycles of kernel k that are not skipped; counts the
        dense and weight-only cycles on the way."""
        out, depth, c = deque(), self.p.region_channels, self.counters
        for pi, path in enumerate(self.paths):
            for phase in self.phases:
                region = regions[phase]
                live = region.reshape(region.shape[0], -1).any(axis=1)
                for c0 in range(0, self.layer.Cg, depth):
                    for ti, t in enumerate(path.taps):
                        if (t.a, t.b) != phase:
                            continue
                        nonzero = self.w[k, c0:c0 + depth, t.r, t.s] != 0
                        c.dense_cycles += 1
                        c.weight_only_cycles += bool(nonzero.any())
                        if (nonzero & live[c0:c0 + depth]).any():
                            out.append((pi, c0, ti))
        return out

    def region_major(self) -> list[list[Job]]:
        """Every region's jobs (image, region row, region column), each region's in its
        order (conv group, kernel set)."""
        L = self.layer
        out = [list(self.region_jobs(n, ti, tj)) for n in range(L.N)
               for ti in range(self.grid[0]) for tj in range(self.grid[1])]
        for rm, job in enumerate(job for region in out for job in region):
            job.rm = rm
        return out

    def jobs(self) -> list[deque]:
        """Every job in the run order (``region-major``: a region's kernel sets one after
        another; ``kernel-major``: a kernel set over every region), queued on the operation
        units: round robin (``spread``) or region ``t`` on unit ``t mod U`` (``own-unit``,
        Fig. 11: each dispatcher serves its own unit)."""
        units = [deque() for _ in range(self.p.operation_units)]
        for seq, job in enumerate(in_run_order(self.region_major(), self.order)):
            job.seq = seq
            own = job.region if self.p.mapping == "own-unit" else seq
            units[own % self.p.operation_units].append(job)
        return units

    def region_jobs(self, n, ti, tj):
        """The jobs of one region: per conv group, kernel sets of P kernels; the dispatcher
        reads the region's blocks again for every kernel set."""
        L, P, c = self.layer, self.p.processing_units, self.counters
        for g in range(L.groups):
            regions = {ph: self.read_region(n, ph, g, ti, tj) for ph in self.phases}
            here = (n * self.grid[0] + ti) * self.grid[1] + tj
            c.region_nonzeros[here, g] += sum(np.count_nonzero(r) for r in regions.values())
            read = sum(block_bytes(ch, self.elem) for r in regions.values() for ch in r)
            for k0 in range(0, L.Kg, P):
                c.sram_ifmap_bytes += read
                kernels = [g * L.Kg + k for k in range(k0, min(k0 + P, L.Kg))]
                queues = [self.weight_cycles(k, regions) for k in kernels]
                queues += [deque() for _ in range(P - len(kernels))]
                yield Job(-1, n, ti, tj, kernels, queues, regions, region=here,
                          kernel_set=g * -(-L.Kg // P) + k0 // P,
                          weight_cycles=sum(len(q) for q in queues))

    # -- one processing-unit cycle: multipliers, MUXes, accumulators (Fig. 6) ---------------

    def pu_cycle(self, job: Job, slot: int, pu: int, item) -> None:
        """Processing unit ``pu`` executes one weight cycle of kernel slot ``slot`` on the
        job's region, into a partial OFM of its own for that kernel and part."""
        pi, c0, ti = item
        path = self.paths[pi]
        t = path.taps[ti]
        k = job.kernels[slot]
        weights = self.w[k, c0:c0 + path.depth, t.r, t.s]
        region = job.regions[t.a, t.b][c0:c0 + path.depth]
        products = (region * weights[:, None, None]).sum(axis=0)
        hit = ((region != 0) & (weights != 0)[:, None, None]).sum(axis=0)
        self.counters.products += int(hit.sum())
        acc = job.pofms.setdefault((slot, pu, pi), np.zeros(path.pofm, self.acc))
        seen = job.hits.setdefault((slot, pu, pi), np.zeros(path.pofm, np.int64))
        cells, pixels = path.wiring[ti]
        acc.reshape(-1)[cells] += products.reshape(-1)[pixels]
        seen.reshape(-1)[cells] += hit.reshape(-1)[pixels]

    def deal(self, queues: list) -> list:
        """One cycle's (kernel slot, PU, weight cycle) of an operation unit, taken off its
        PUs' queues: each with work left runs its next; with work stealing each idle one
        (in slot order) takes the last cycle of the one with most left."""
        idle = [slot for slot, q in enumerate(queues) if not q]
        todo = [(slot, slot, q.popleft()) for slot, q in enumerate(queues) if q]
        if self.stealing:
            for thief in idle:
                victim = max(range(len(queues)), key=lambda i: len(queues[i]))
                if not queues[victim]:
                    break
                todo.append((victim, thief, queues[victim].pop()))
        return todo

    def unit_cycle(self, job: Job) -> None:
        """All processing units of one operation unit for one cycle (``deal``)."""
        todo = self.deal(job.queues)
        for slot, pu, item in todo:
            self.pu_cycle(job, slot, pu, item)
        self.counters.pu_busy += len(todo)

    def planned_pofm_pixels(self, job: Job) -> int:
        """Pixels of the partial OFMs the job will fill (one per kernel slot, PU and part
        that runs a cycle), by dealing its cycles on copies of its queues."""
        queues, keys = [deque(q) for q in job.queues], set()
        while any(queues):
            keys.update((slot, pu, item[0]) for slot, pu, item in self.deal(queues))
        return sum(math.prod(self.paths[part].pofm) for _, _, part in keys)

    def band_rows(self) -> np.ndarray:
        """OFM rows the partial OFMs of each region row reach (the union over kernel parts
        of where ``accumulate`` puts them), inside the OFM."""
        out = []
        for ti in range(self.grid[0]):
            tops = [self.origin[0] + ti * self.region[0] - d.top[0] for d in self.paths]
            lo = max(min(tops), 0)
            hi = min(max(t + d.pofm[0] for t, d in zip(tops, self.paths, strict=True)),
                     self.layer.P)
            out.append(max(hi - lo, 0))
        return np.array(out, np.int64)

    # -- output side: servers and output units ---------------------------------------------

    def route(self, job: Job, key: tuple, unit: int) -> tuple[int, int]:
        """(server, cycles) of one partial OFM of ``job`` on ``unit``: ``ceil(pixels /
        bus_width)`` per hop to the bus, kernel k's output unit (full) or its owning
        operation unit (chain: 0 cycles when that is the unit itself)."""
        p, k = self.p, job.kernels[key[0]]
        beats = math.ceil(job.pofms[key].size / p.bus_width)
        if p.interconnect == "bus":
            return 0, beats
        if p.interconnect == "full":
            return k % p.output_units, beats
        server = k % p.operation_units
        return server, beats * abs(unit - server)

    def moving_pixels(self, job: Job, unit: int) -> int:
        """Pixels of the job's partial OFMs that must wait in the first buffer (those that
        travel; a chain owner's own ones are accumulated at once)."""
        return sum(pofm.size for key, pofm in job.pofms.items() if self.route(job, key, unit)[1])

    def fits(self, job: Job, unit: int, now: int) -> bool:
        """Whether the job's travelling partial OFMs fit the unit's first buffer at ``now``
        beside those whose transfer has not ended (or the buffer is empty)."""
        done = [t for t in self.in_flight if t[0] <= now]
        for t in done:
            self.in_flight.remove(t)
            self.held[t[1]] -= t[2]
        need = self.moving_pixels(job, unit)
        held = self.held[unit]
        return held == 0 or held + need <= self.p.first_buffer_kb * 1024 // ACC_BYTES

    def hand_off(self, job: Job, unit: int, now: int, pending: list) -> int:
        """Queue the job's partial OFMs (kernel slot, PU, part order) for their servers; each
        is written to and read from the first buffer once (4-byte accumulators); the ones
        that travel stay in the unit's first buffer until their transfer ends. Returns
        their pixels."""
        for key, pofm in sorted(job.pofms.items()):
            self.counters.sram_ofmap_bytes += 2 * ACC_BYTES * pofm.size
            server, duration = self.route(job, key, unit)
            if self.p.interconnect == "chain":
                self.counters.hops += abs(unit - server)
            self.counters.transfer_cycles += duration
            if duration == 0:
                self.accumulate(job, key, pofm)
                continue
            self.held[unit] += pofm.size
            pending.append(((now, job.seq, key), server, duration, job, key, pofm, unit))
        return sum(pofm.size for pofm in job.pofms.values())

    def accumulate(self, job: Job, key: tuple, pofm: np.ndarray) -> None:
        """Output unit: add a partial OFM onto the OFM at its region's place (overlap-add);
        the products that land inside the OFM are its MACs."""
        slot, _, pi = key
        path = self.paths[pi]
        top = self.origin[0] + job.ti * self.region[0] - path.top[0]
        left = self.origin[1] + job.tj * self.region[1] - path.top[1]
        P, Q = self.layer.P, self.layer.Q
        r0, c0 = max(top, 0), max(left, 0)
        r1, c1 = min(top + pofm.shape[0], P), min(left + pofm.shape[1], Q)
        if r1 > r0 and c1 > c0:
            window = (job.n, job.kernels[slot], slice(r0, r1), slice(c0, c1))
            crop = (slice(r0 - top, r1 - top), slice(c0 - left, c1 - left))
            hits = job.hits[key][crop]
            self.ofm[window] += pofm[crop]
            self.touched[window] |= hits > 0
            self.counters.macs += int(hits.sum())

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
            (ready_at, *_), _, duration, job, key, pofm, unit = t
            busy[server] = now + duration
            self.in_flight.append((now + duration, unit, pofm.size))
            c = self.counters
            c.transfers += 1
            c.contention += now - ready_at
            c.last_transfer_end = max(c.last_transfer_end, now + duration)
            self.accumulate(job, key, pofm)

    # -- the clock --------------------------------------------------------------------------

    def start_next(self, queue: deque, unit: int):
        """The unit's next job (None when it has none left)."""
        if not queue:
            return None
        job = queue.popleft()
        self.counters.pu_dealt[unit] += [len(q) for q in job.queues]
        return job

    def settle(self, unit: int, now: int, current: list, waiting: list, queues, pending):
        """Hand off the unit's finished job at ``now`` if its partial OFMs fit the first
        buffer (else it keeps waiting: the unit stalls), then start its next jobs; a job
        without any weight cycle ends at once."""
        c = self.counters
        while waiting[unit] is not None:
            job, since = waiting[unit]
            if not self.fits(job, unit, now):
                return
            c.ran[job.seq] = self.ran(job, now, self.hand_off(job, unit, now, pending))
            c.last_job_end = max(c.last_job_end, now)
            c.first_buffer_stalls += now - since
            waiting[unit] = None
            nxt = self.start_next(queues[unit], unit)
            if nxt is not None and not any(nxt.queues):
                waiting[unit] = (nxt, now)
            else:
                current[unit] = nxt

    def run(self) -> int:
        """Clock the device until every job and transfer is done; returns the cycle count."""
        queues = self.jobs()
        units = len(queues)
        pending: list = []
        self.held, self.in_flight = [0] * units, []
        current, waiting = [None] * units, [None] * units
        for u in range(units):
            job = self.start_next(queues[u], u)
            if job is not None and not any(job.queues):
                waiting[u] = (job, 0)
                self.settle(u, 0, current, waiting, queues, pending)
            else:
                current[u] = job
        busy: dict = {}
        now = 0
        while (any(j is not None for j in current) or pending
               or any(w is not None for w in waiting)):
            self.serve(now, pending, busy)
            for u, job in enumerate(current):
                if job is None:
                    continue
                self.unit_cycle(job)
                self.counters.unit_busy[u] += 1
                if not any(job.queues):
                    current[u], waiting[u] = None, (job, now + 1)
            for u in range(units):
                self.settle(u, now + 1, current, waiting, queues, pending)
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
        largest = self.largest_path()
        per_pu = largest.inventory()
        out = {k: v * pus for k, v in per_pu.items() if k != "max_fan_in"}
        out.update(max_fan_in=max(int(d.fan_in.max()) for d in self.paths), per_pu=per_pu,
                   fan_in=[path.fan_in for path in self.paths], kernel_parts=len(self.paths))
        return out

    def largest_path(self) -> Datapath:
        """The kernel part with the largest partial OFM (the first of equals)."""
        return max(self.paths, key=lambda d: d.pofm[0] * d.pofm[1])

    def ran(self, job: Job, end: int, pixels: int) -> Ran:
        """The log entry of ``job``, ended at cycle ``end`` with partial OFMs of ``pixels``."""
        return Ran(ifmap=job.region * self.layer.groups + job.kernels[0] // self.layer.Kg,
                   kernel_set=job.kernel_set, kernels=len(job.kernels),
                   band=job.region // self.grid[1], end=end, weight_cycles=job.weight_cycles,
                   pofm_pixels=pixels)

    def second_buffers(self) -> int:
        """Bytes of the second buffers that hold the output accumulators: one per output
        unit, or, on a chain (Fig. 13: no output units), one per operation unit."""
        p = self.p
        return (p.operation_units if p.interconnect == "chain" else p.output_units) \
            * p.second_buffer_kb * 1024

    def stored(self, x, ofm_bytes: int = 0, sram_bytes: int = 0) -> Stored:
        """What memory and the second buffers hold for the layer (input ``x``), as the
        dispatcher read it; ``ofm_bytes`` the compressed OFM written back, ``sram_bytes``
        those at the SRAM ports (0 when planning)."""
        stream = map_stream_bytes(x, self.region, self.elem)
        values = int(np.count_nonzero(x)) * self.elem
        band = self.band_rows() * self.layer.Q
        return Stored(slice_blocks(stream, values, self.counters.region_nonzeros.ravel(),
                                   self.elem),
                      [int(b) for b in self.kernel_set_bytes()],
                      [int(pixels) for _ in range(self.layer.N) for pixels in band],
                      self.layer.K, self.second_buffers(), ofm_bytes, sram_bytes,
                      groups=self.layer.groups)

    def kernel_set_bytes(self) -> np.ndarray:
        """DRAM bytes of every kernel set in a region's job order (conv group, then sets of
        P kernels), each kernel a bitmap of Cg*R*S bits plus its non-zero weights."""
        L, P = self.layer, self.p.processing_units
        out = []
        for g in range(L.groups):
            for k0 in range(0, L.Kg, P):
                out.append(sum(block_bytes(self.w[g * L.Kg + k], self.elem)
                               for k in range(k0, min(k0 + P, L.Kg))))
        return np.array(out, np.int64)


def in_run_order(by_region: list[list[Job]], order: str) -> list[Job]:
    """The jobs (each region's, region-major) in the order ``order`` runs them
    (``region-major``: a region's kernel sets one after another; ``kernel-major``: a
    kernel set over every region)."""
    if order == "region-major":
        return [job for region in by_region for job in region]
    return [region[k] for k in range(len(by_region[0])) for region in by_region]


def emulate_layer(layer: ConvLayer, x, w, bias, params, stealing: bool | None = None,
                  order: str = "region-major") -> Result:
    """Run one layer on the emulated device: outputs, cycles, counters, inventory."""
    m = Machine(layer, x, w, params, stealing, order)
    cycles = m.run()
    return Result(m.output(bias), cycles, m.counters, m.inventory(), m)


def emulate(layer: ConvLayer, x, w, bias, params, arch):
    """(outputs, LayerStats): the emulator's own schedule and counts, and its memory steps
    from its log of the jobs it ran (``memory_steps``), priced by ``stats.price``."""
    from ..stats import Counts, price

    order = choose_order(layer, x, w, params, arch)
    res = emulate_layer(layer, x, w, bias, params, order=order)
    m, c = res.machine, res.counters
    saved = 0
    if params.work_stealing:
        saved = emulate_layer(layer, x, w, bias, params, stealing=False,
                              order=order).cycles - res.cycles
    region, elem = m.region, m.elem
    pus = params.operation_units * params.processing_units
    largest = m.largest_path()
    w_nonzeros, x_nonzeros = int(np.count_nonzero(w)), int(np.count_nonzero(x))
    stream = map_stream_bytes(x, region, elem)
    extra = {
        "opunit_busy_cycles_by_unit": tuple(int(b) for b in c.unit_busy),
        "pu_dealt_cycles_by_unit": tuple(int(d) for d in c.pu_dealt.ravel()),
        "opunit_busy_cycles": int(c.unit_busy.sum()),
        "opunit_busy_max_cycles": int(c.unit_busy.max()),
        "opunit_idle_cycles": params.operation_units * res.cycles - int(c.unit_busy.sum()),
        "pu_busy_cycles": c.pu_busy,
        "pu_idle_cycles": pus * res.cycles - c.pu_busy,
        "dense_weight_cycles": c.dense_cycles,
        "zero_weight_cycles_skipped": c.dense_cycles - c.weight_only_cycles,
        "zero_pixel_cycles_skipped": c.weight_only_cycles - c.pu_busy,
        "zero_weights": w.size - w_nonzeros,
        "ifm_zero_pixels": x.size - x_nonzeros,
        "ifm_bytes_dense": x.size * elem,
        "ifm_stream_bytes": stream,
        "weight_bytes": int(m.kernel_set_bytes().sum()),
        "transfers": c.transfers,
        "transfer_cycles": c.transfer_cycles,
        "contention_cycles": c.contention,
        "first_buffer_stall_cycles": c.first_buffer_stalls,
        "chain_hops": c.hops,
        "stealing_saved_cycles": saved,
        "peak_pofm_pixels": largest.pofm[0] * largest.pofm[1],
        "peak_pofm_rows": largest.pofm[0],
        "peak_pofm_cols": largest.pofm[1],
        "peak_kernel_parts": len(m.paths),
        "kernel_major_layers": int(order == "kernel-major"),
    }
    counts = Counts("input-reuse", macs=c.macs, products=c.products, dense_macs=layer.macs,
                    multipliers=params.multipliers,
                    mapped_pe_cycles=c.pu_busy * region[0] * region[1] * params.region_channels,
                    sram_ifmap_bytes=c.sram_ifmap_bytes,
                    sram_filter_bytes=c.pu_busy * params.region_channels * elem,
                    sram_ofmap_bytes=c.sram_ofmap_bytes, extra=extra)
    touched = m.touched if not layer.bias else np.ones(layer.output_shape, bool)
    stored = m.stored(x, ofm_bytes=map_stream_bytes(touched, region, elem),
                      sram_bytes=counts.sram_ifmap_bytes + counts.sram_filter_bytes
                      + counts.sram_ofmap_bytes)
    log = [c.ran[seq] for seq in sorted(c.ran)]
    bus_bound = c.last_transfer_end > int(c.unit_busy.max()) or c.first_buffer_stalls > 0
    return res.output, price(layer, counts, memory_steps(
        log, stored, order, params.operation_units, res.cycles, bus_bound), arch)


def choose_order(layer: ConvLayer, x, w, params, arch) -> str:
    """The loop order whose memory steps move fewer DRAM bytes on ``arch.memory``
    (region-major on a tie), planned from the dispatcher's own reading of the regions and
    kernels and the partial OFMs their jobs will fill: a pass that runs no cycle, so the
    steps know no job end and no output yet."""
    m = Machine(layer, x, w, params)
    by_region = m.region_major()
    pixels = {job.rm: m.planned_pofm_pixels(job) for region in by_region for job in region}
    stored = m.stored(x)
    moved = {}
    for order in ORDERS:
        log = [m.ran(job, 0, pixels[job.rm]) for job in in_run_order(by_region, order)]
        moved[order] = dram_bytes(memory_steps(log, stored, order, params.operation_units),
                                  arch.memory)
    return min(ORDERS, key=moved.get)


def work_estimate(layer: ConvLayer, params) -> int:
    """Estimated work of ``emulate`` (emulator steps of about 1 us, docs/cli.md), dense (an
    upper bound): for every region of the grid and every kernel, one weight cycle per tap
    and ``region_channels`` channels, planned by the dispatcher and then run by a
    processing unit: 30 steps (measured: 24-34 us a weight cycle); twice with work
    stealing, as the layer is clocked again without it to count the cycles it saves (the
    dispatcher's pass that picks the loop order, which plans but runs no cycle, is not
    counted)."""
    taps = kernel_taps(layer)
    rows, cols = real_span(layer, taps, 0)[1], real_span(layer, taps, 1)[1]
    regions = layer.N * math.ceil(rows / params.region_rows) \
        * math.ceil(cols / params.region_cols)
    cycles = math.ceil(layer.Cg / params.region_channels) * layer.R * layer.S
    runs = 2 if params.work_stealing else 1
    return 30 * runs * regions * layer.K * cycles
