"""The input-reuse machine: one weight times a whole IFM region per cycle.

Source: JP7475855B2 / CN111382859A (seeds 000 and 004), Figs. 4-15, claims 1-17.
Each non-zero weight ``W[k, c, r, s]`` multiplies every pixel of a stationary IFM
region in one cycle (Fig. 4/6: one multiplier per region pixel); its products
accumulate at partial-OFM positions fixed by the weight's kernel position, the
point reflection ``(R-1-r, S-1-s)`` (claims 2/13), so that
``O[i - r, j - s] += W[r, s] * I[i, j]``. A region's partial OFM (region + R-1
rows, + S-1 columns) is added onto the OFM at the region's place (overlap-add,
claims 3-5). Zero weights cost no cycle (claims 6/15); the IFM is streamed once,
compressed (``compressed_ifm``, claim 7); operation units work on different
regions in parallel, processing units on different kernels, output units gather
partial OFMs over a full, bus or chain interconnect (``operation_units``, Figs.
11-14); work stealing balances the processing units (Fig. 15, claim 11).
Stride and dilation run as stride-1 phases (``phases``), a job taking its region
through every phase into one partial OFM; groups as independent problems; batch
images as more regions.

Loop order (per layer): image -> region -> conv group -> kernel set (``P`` kernels
at once, one per processing unit; job ``j`` on unit ``j mod U``) -> kernel part ->
stride phase -> channel group of ``l`` -> non-zero tap (one cycle each).

Cycles: ``max(max_u sum_{jobs on u} job_cycles, last transfer finish)`` with
``job_cycles = max_p c_p`` (``ceil(sum_p c_p / P)`` with work stealing) and ``c_p``
the non-skipped (channel group, tap) pairs of kernel p on the region.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import engine
from ..arch.spec import MAX_DIM, MAX_KIB, MAX_REGION, MAX_SIDE, MAX_UNITS, spec
from ..ir import ConvLayer
from ..reference import pad_input
from ..stats import LayerStats, energy_pj
from . import compressed_ifm
from .base import Machine, element_bytes, register
from .operation_units import Schedule, queue, schedule
from .phases import plan
from .region_work import Geometry, Work, region_work

ACC_BYTES = 4  # a partial-OFM pixel: int32 or float32 accumulator


@dataclass(frozen=True)
class Params:
    """The ``[input-reuse]`` section of an arch file."""

    region_rows: int = spec(4, "pixels (n of an n x m region)", min=1, max=MAX_REGION)
    region_cols: int = spec(4, "pixels (m of an n x m region)", min=1, max=MAX_REGION)
    region_channels: int = spec(1, "channels (l of an n x m x l region)", min=1,
                                  max=MAX_SIDE)
    operation_units: int = spec(16, "operation units (dispatcher + PUs + first buffer)", min=1,
                                  max=MAX_SIDE)
    processing_units: int = spec(4, "processing units per operation unit (kernels)",
                                   min=1, max=MAX_SIDE)
    kernel_part_rows: int = spec(0, "kernel rows per pass, 0 = whole kernel (Fig. 9)", min=0,
                                  max=MAX_DIM)
    interconnect: str = spec("bus", "partial-OFM links", choices=("full", "bus", "chain"))
    bus_width: int = spec(64, "partial-OFM pixels per transfer cycle", min=1,
                           max=MAX_UNITS)
    output_units: int = spec(4, "output units (full: one receiving port each)", min=1,
                              max=MAX_SIDE)
    work_stealing: bool = spec(True, "idle processing units take weight cycles")
    first_buffer_kb: int = spec(16, "KiB per operation unit for partial OFMs", min=1,
                                 max=MAX_KIB)

    @property
    def multipliers(self) -> int:
        """Multipliers of the device: one per region pixel, per PU, per operation unit."""
        return (self.operation_units * self.processing_units * self.region_rows
                * self.region_cols * self.region_channels)

    @property
    def geometry(self) -> Geometry:
        return Geometry((self.region_rows, self.region_cols), self.region_channels,
                        self.processing_units, self.kernel_part_rows)


def tap_conv(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias) -> np.ndarray:
    """Outputs by the device's arithmetic: the sum over non-zero taps of W x input window.

    Per stride phase, the windows of the taps with any non-zero weight are stacked
    and multiplied by their weights in one product per conv group (vectorised over
    taps, channels and kernels; all-zero taps are skipped, as the device skips
    their cycles). float32 accumulates in float32, int8 exactly (float64 sums of
    int8 products are exact).
    """
    integer = np.issubdtype(x.dtype, np.integer)
    acc = np.float64 if integer else np.float32
    xp = pad_input(x.astype(acc, copy=False), layer)
    G, Kg, Cg, N, P, Q = layer.groups, layer.Kg, layer.Cg, layer.N, layer.P, layer.Q
    wg = w.astype(acc, copy=False).reshape(G, Kg, Cg, layer.R * layer.S)
    if layer.R * layer.S == 1:
        live = np.full((1, 1), wg.any())
    else:  # rows of whole kernels, then channels: reductions over long rows, not taps
        live = wg.reshape(G * Kg, -1).any(axis=0).reshape(Cg, -1).any(axis=0)
        live = live.reshape(layer.R, layer.S)
    out = None
    layout = plan(layer)
    part = layout.parts[0]
    for i, ph in enumerate(layout.phases):
        taps = part.of_phase(i)
        keep = taps[live[part.r[taps], part.s[taps]]]
        if keep.size:
            phase_sum = _window_product(ph.input(xp), wg, part, keep, layer)
            out = phase_sum if out is None else np.add(out, phase_sum, out=out)
    if out is None:  # every weight zero
        out = np.zeros((N, G, Kg, P * Q), acc)
    return engine.finish(out.reshape(layer.output_shape), bias, layer, integer)


def _window_product(xa, wg, part, keep, layer: ConvLayer) -> np.ndarray:
    """sum over the taps ``keep`` (indices into ``part``) of W[:, :, t] x window_t:
    N x G x Kg x (P*Q); ``wg`` is G x Kg x Cg x (R*S)."""
    G, Kg, Cg, N, P, Q = layer.groups, layer.Kg, layer.Cg, layer.N, layer.P, layer.Q
    r, s, u, v = part.r[keep], part.s[keep], part.u[keep], part.v[keep]
    if r.size == 1 and xa.shape[2:] == (P, Q):  # one tap reading the whole phase: no copy
        windows = np.ascontiguousarray(xa)
    else:
        windows = np.empty((N, G, Cg, r.size, P, Q), xa.dtype)
        for t in range(r.size):
            windows[:, :, :, t] = xa[:, :, u[t]:u[t] + P, v[t]:v[t] + Q].reshape(N, G, Cg, P, Q)
    flat = r * layer.S + s
    if np.array_equal(flat, np.arange(wg.shape[3])):  # every tap, in kernel order: a view
        wt = wg.reshape(G, Kg, Cg * r.size)
    else:
        wt = np.take(wg, flat, axis=3).reshape(G, Kg, Cg * r.size)
    return np.matmul(wt, windows.reshape(N, G, Cg * r.size, P * Q))


def ofm_pixels(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray) -> int:
    """Output pixels the compressor stores: those any product reached, or all with a bias."""
    if layer.bias:
        return math.prod(layer.output_shape)
    hits = engine.conv2d(x_mask.astype(np.float32), w_mask.astype(np.float32), None, layer)
    return int(np.count_nonzero(hits))


def weight_bytes(layer: ConvLayer, nonzeros: int, elem: int) -> int:
    """Compressed weights: a bitmap of Cg*R*S bits per kernel plus the non-zero values."""
    return layer.K * math.ceil(layer.Cg * layer.R * layer.S / 8) + nonzeros * elem


def memory_bytes(layer, x_mask, w_mask, p: Params, work: Work, arch) -> dict:
    """SRAM and DRAM bytes per tensor (see docs/input-reuse.md, 'What it counts')."""
    elem = element_bytes(layer.dtype)
    region = (p.region_rows, p.region_cols)
    sets = math.ceil(layer.Kg / p.processing_units)
    wbytes = weight_bytes(layer, work.weight_nonzeros, elem)
    waves = math.ceil(work.regions / p.operation_units)
    fits = wbytes <= arch.memory.filter_sram_kb * 1024
    pofm_pixels = int(work.transfers.pixels.sum())
    return dict(
        sram_ifmap_bytes=sets * (work.sram_ifmap_bitmaps * compressed_ifm.bitmap_bytes(region)
                                 + work.sram_ifmap_words * elem),
        sram_filter_bytes=int(work.slot_cycles.sum()) * p.region_channels * elem,
        sram_ofmap_bytes=2 * ACC_BYTES * pofm_pixels,
        dram_ifmap_bytes=compressed_ifm.stream_bytes(layer.input_shape, work.input_nonzeros,
                                                     region, elem),
        dram_filter_bytes=wbytes * (1 if fits else waves),
        dram_ofmap_bytes=compressed_ifm.stream_bytes(layer.output_shape,
                                                     ofm_pixels(layer, x_mask, w_mask),
                                                     region, elem),
    )


def extra_counts(layer, x_mask, w_mask, p: Params, work: Work, sch: Schedule,
                 saved: int) -> dict:
    """The machine's own additive counts (``peak_*`` keys: see docs on merging)."""
    elem = element_bytes(layer.dtype)
    pus = p.operation_units * p.processing_units
    return {
        "opunit_busy_cycles_by_unit": tuple(int(c) for c in sch.unit_busy),
        "pu_dealt_cycles_by_unit": tuple(int(c) for c in dealt_cycles(work.slot_cycles, p)),
        "opunit_busy_cycles": int(sch.unit_busy.sum()),
        "opunit_busy_max_cycles": int(sch.unit_busy.max(initial=0)),
        "opunit_idle_cycles": p.operation_units * sch.cycles - int(sch.unit_busy.sum()),
        "pu_busy_cycles": sch.pu_busy,
        "pu_idle_cycles": pus * sch.cycles - sch.pu_busy,
        "dense_weight_cycles": work.dense_cycles,
        "zero_weight_cycles_skipped": work.dense_cycles - work.weight_only_cycles,
        "zero_pixel_cycles_skipped": work.weight_only_cycles - int(work.slot_cycles.sum()),
        "zero_weights": w_mask.size - work.weight_nonzeros,
        "ifm_zero_pixels": x_mask.size - work.input_nonzeros,
        "products": work.products,
        "ifm_bytes_dense": x_mask.size * elem,
        "weight_bytes": weight_bytes(layer, work.weight_nonzeros, elem),
        "transfers": sch.transfers,
        "transfer_cycles": sch.transfer_cycles,
        "contention_cycles": sch.contention,
        "chain_hops": sch.hops,
        "stealing_saved_cycles": saved,
        "peak_pofm_pixels": work.pofm_peak[0] * work.pofm_peak[1],
        "peak_pofm_rows": work.pofm_peak[0],
        "peak_pofm_cols": work.pofm_peak[1],
    }


def dealt_cycles(slot_cycles: np.ndarray, p: Params) -> np.ndarray:
    """Weight cycles dealt to every processing unit before work stealing, unit-major
    (operation unit u, slot s at u * P + s): the jobs (J x P) run on unit ``j mod U``."""
    units = p.operation_units
    rows = -(-len(slot_cycles) // units)
    grid = np.zeros((rows * units, slot_cycles.shape[1]), np.int64)
    grid[:len(slot_cycles)] = slot_cycles
    return grid.reshape(rows, units, -1).sum(axis=0).ravel()


def timing(work: Work, p: Params) -> tuple[Schedule, int]:
    """The layer's schedule on the units, and the cycles work stealing saves (0 if off)."""
    q = queue(work.transfers, units=p.operation_units, interconnect=p.interconnect,
              output_units=p.output_units, width=p.bus_width)
    sch = schedule(work.slot_cycles, q, units=p.operation_units, stealing=p.work_stealing)
    if not p.work_stealing:
        return sch, 0
    return sch, schedule(work.slot_cycles, q, units=p.operation_units,
                         stealing=False).cycles - sch.cycles


def layer_stats(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray, arch,
                name: str) -> LayerStats:
    """Every cost of the layer from the non-zero masks of its input and weights."""
    p = arch.params(name)
    work = region_work(layer, x_mask, w_mask, p.geometry)
    sch, saved = timing(work, p)
    mem = memory_bytes(layer, x_mask, w_mask, p, work, arch)
    region_pixels = p.region_rows * p.region_cols * p.region_channels
    return LayerStats(
        name=layer.name, dataflow=name, shape=layer.describe(), dense_macs=layer.macs,
        macs=work.useful_products, cycles=sch.cycles,
        pe_cycles=sch.cycles * p.multipliers, mapped_pe_cycles=sch.pu_busy * region_pixels,
        energy_pj=energy_pj(arch, macs=work.products, dtype=layer.dtype,
                            sram_bytes=sum(v for k, v in mem.items() if k.startswith("sram")),
                            dram_bytes=sum(v for k, v in mem.items() if k.startswith("dram"))),
        extra=extra_counts(layer, x_mask, w_mask, p, work, sch, saved), **mem)


def buffer_need(layer: ConvLayer, p: Params) -> int:
    """Bytes of first buffer a job needs: one partial OFM per PU and kernel part."""
    region = (p.region_rows, p.region_cols)
    pixels = sum(np.prod(part.pofm_shape(region)) for part in plan(layer, p.kernel_part_rows).parts)
    return p.processing_units * int(pixels) * ACC_BYTES


@register
class InputReuse(Machine):
    name = "input-reuse"
    Params = Params

    def supports(self, layer: ConvLayer, arch) -> str | None:
        p = arch.params(self.name)
        need = buffer_need(layer, p)
        if need > p.first_buffer_kb * 1024:
            return (f"partial OFMs need {need} B of first buffer per operation unit, "
                    f"first_buffer_kb={p.first_buffer_kb}; use kernel_part_rows or a "
                    f"smaller region")
        return None

    def compute(self, layer, x, w, bias, arch):
        return tap_conv(layer, x, w, bias)

    def estimate(self, layer, x_mask, w_mask, arch):
        return layer_stats(layer, np.asarray(x_mask, bool), np.asarray(w_mask, bool), arch,
                           self.name)

    def emulate_steps(self, layer, arch) -> int:
        """The cycle emulator's estimated work on ``layer`` (its ``work_estimate``)."""
        from ..emulate.input_reuse import work_estimate

        return work_estimate(layer, arch.params(self.name))

    def emulate(self, layer, x, w, bias, arch):
        from ..emulate.input_reuse import emulate

        return emulate(layer, x, w, bias, arch.params(self.name), arch)
