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
the non-skipped (channel group, tap) pairs of kernel p on the region: the stall-free
compute cycles. The memory model (``steps``: one step per row of ``U`` jobs, with the
regions, kernel sets and outputs each row reads and writes) adds the DRAM and SRAM
stalls; ``stats.price`` makes the ``LayerStats``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import engine
from ..arch.sections.input_reuse import InputReuse as Params  # the arch file section
from ..derived import derived, frozen
from ..ir import ConvLayer
from ..jit import njit
from ..memory import Steps, traffic, usable_bytes
from ..reference import pad_input
from ..stats import Counted, Counts, LayerStats, price
from . import compressed_ifm
from .base import Machine, Memo, element_bytes, percent, register, share
from .operation_units import Schedule, job_times, queue, reduce_last, schedule
from .phases import plan
from .region_work import Work, count_key, region_counts, region_work, reorder

ACC_BYTES = 4  # a partial-OFM pixel: int32 or float32 accumulator


def tap_conv(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias) -> np.ndarray:
    """Outputs by the device's arithmetic: the sum over non-zero taps of W x input window.

    Per stride phase, the windows of the taps with any non-zero weight are stacked
    and multiplied by their weights in one product per conv group (vectorised over
    taps, channels and kernels; all-zero taps are skipped, as the device skips
    their cycles); conv groups of one input channel add those taps' windows tap by
    tap (``engine.depthwise``). float32 accumulates in float32, int8 exactly (float64
    sums of int8 products are exact).
    """
    integer = np.issubdtype(x.dtype, np.integer)
    acc = np.float64 if integer else np.float32
    G, Kg, Cg, N, P, Q = layer.groups, layer.Kg, layer.Cg, layer.N, layer.P, layer.Q
    wg = w.astype(acc, copy=False).reshape(G, Kg, Cg, layer.R * layer.S)
    if layer.R * layer.S == 1:
        live = np.full((1, 1), wg.any())
    else:  # rows of whole kernels, then channels: reductions over long rows, not taps
        live = wg.reshape(G * Kg, -1).any(axis=0).reshape(Cg, -1).any(axis=0)
        live = live.reshape(layer.R, layer.S)
    if Cg == 1 and live.any():  # one input channel a group: the live taps' windows summed
        # in place, tap by tap, as the dense engine's depthwise maps do (a product per group
        # of one channel's taps would be G tiny matrix products)
        taps = [(int(r), int(s)) for r, s in np.argwhere(live)]
        return engine.finish(engine.depthwise(x, w, layer, acc, taps, bias), None, layer,
                             integer)
    xp = pad_input(x.astype(acc, copy=False), layer)
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


def sram_bytes(layer: ConvLayer, p: Params, work: Work) -> dict:
    """Bytes at the on-chip buffer ports (see docs/input-reuse.md, 'What it counts')."""
    elem = element_bytes(layer.dtype)
    region = (p.region_rows, p.region_cols)
    sets = math.ceil(layer.Kg / p.processing_units)
    return dict(
        sram_ifmap_bytes=sets * (work.sram_ifmap_bitmaps * compressed_ifm.bitmap_bytes(region)
                                 + work.sram_ifmap_words * elem),
        sram_filter_bytes=int(work.slot_cycles.sum()) * p.region_channels * elem,
        sram_ofmap_bytes=2 * ACC_BYTES * int(work.transfers.pixels.sum()),
    )


@dataclass(frozen=True)
class Jobs:
    """What the memory model needs of a layer's jobs, as the fast model counts them (the
    emulator logs its own, ``emulate.input_reuse_memory``): every job's end (cycles,
    global order) and weight cycles (its PUs' sum), the layer's stall-free cycles and
    whether the last transfer ends after the last job, the bytes of the compressed input
    stream as stored and its non-zeros, those of every region in each conv group's
    channels (over the stride phases; regions x G, in job order), the compressed bytes of
    every kernel set (in a region's job order), the compressed OFM's bytes and the bytes
    at the SRAM ports; for the output accumulators: every job's partial-OFM pixels
    (region-major order), the OFM rows the partial OFMs of each row of regions touch, and
    the regions in a row."""

    end: np.ndarray
    busy: np.ndarray
    cycles: int
    bus_bound: bool
    stream_bytes: int
    input_nonzeros: int
    region_nonzeros: np.ndarray
    kernel_set_bytes: np.ndarray
    ofm_bytes: int
    sram_total: int
    pofm_pixels: np.ndarray
    band_rows: np.ndarray
    grid_cols: int
    order: str = "region-major"


ORDERS = ("region-major", "kernel-major")


@lru_cache(maxsize=256)  # a layer's counts ask for it several times, every call (8 B a job)
def run_order(regions: int, per_region: int, order: str) -> np.ndarray:
    """Region-major indices (region, then conv group and kernel set) of the jobs in the
    order ``order`` runs them: ``kernel-major`` takes each kernel set over every region
    (read-only: kept for later calls)."""
    idx = np.arange(regions * per_region, dtype=np.int64).reshape(regions, per_region)
    return frozen((idx if order == "region-major" else idx.T).ravel())


def loop_order(layer: ConvLayer, p: Params, jobs: Jobs, memory, memo: Memo | None = None) -> str:
    """The order whose steps move fewer DRAM bytes on ``memory`` (region-major on a tie).
    The bytes depend on the jobs' blocks and their order only, not on their ends (nor on
    the output's bytes: ``jobs.ofm_bytes`` is 0 here). ``memo`` keeps each order's blocks
    (``order_blocks``) for ``steps``.

    No order moves less than ``least_moved``, and region-major wins a tie: when its blocks
    all stay in their buffers (``held_whole``) nothing is priced; else region-major is
    priced first, and when it moves that little kernel-major is not priced: it can only
    tie."""
    memo = Memo() if memo is None else memo
    first = memo.get(("blocks", p, ORDERS[0]), lambda: order_blocks(layer, p, jobs, ORDERS[0]))
    if held_whole(p, first, memory):
        return ORDERS[0]
    zero = np.zeros(_rows(p, jobs)[0], np.int64)
    least = least_moved(jobs)
    moved = {}
    for order in ORDERS:  # the steps' blocks alone (``steps`` without the times and ports)
        blocks = memo.get(("blocks", p, order), lambda o=order: order_blocks(layer, p, jobs, o))
        t = traffic(Steps(compute=zero, ofmap_bytes=zero, ofmap_capacity=second_buffer_bytes(p),
                          **blocks), memory)
        moved[order] = int(sum(int(v.sum()) for v in t.values()))
        if moved[order] <= least:
            return order
    return min(ORDERS, key=moved.get)


def least_moved(jobs: Jobs) -> int:
    """DRAM bytes the steps of ``jobs`` move at least, in either order, before the output's
    (``loop_order``): the compressed input stream and every kernel set, once. Each order's
    blocks cover them (every region and kernel set is some row's, in some block: the items
    a row starts or continues, or its window of the inner loop's), a block is fetched
    whole at its first use (or a step's part of it at every use), and partial sums spilled
    only add."""
    return jobs.stream_bytes + int(jobs.kernel_set_bytes.sum())


def held_whole(p: Params, blocks: dict, memory) -> bool:
    """Whether region-major's steps (``blocks``: their ``order_blocks``) move no more than
    ``least_moved`` bytes: every row's input block (the stream's slices it starts, kept
    while the next rows continue them, so one is held at a time) fits the ifmap buffer,
    the weights (one block, every kernel set) the filter buffer, and the widest band's
    accumulators the second buffers. The memory model then fetches each block once, at
    its first use, and spills no partial sum."""
    return (int(blocks["ifmap_size"].max()) <= usable_bytes(memory.ifmap_sram_kb, memory)
            and int(blocks["filter_size"].max()) <= usable_bytes(memory.filter_sram_kb, memory)
            and int(blocks["psum_size"].max()) <= second_buffer_bytes(p))


def order_blocks(layer: ConvLayer, p: Params, jobs: Jobs, order: str) -> dict:
    """The blocks of the steps of ``jobs`` run in ``order``, as ``Steps`` fields (ifmap and
    filter ids, bytes and sizes; ofmap ids, the partial-sum bytes a row spills and the
    block's whole partial sums): what ``steps`` knows before the jobs' times, ports and
    output bytes. They follow the masks, ``p`` and the order alone (``jobs``: the blocks
    of ``layer_stats``)."""
    jobs = dataclasses.replace(jobs, order=order)
    rows, first, last = _rows(p, jobs)
    ifmap, filt = _blocks(layer, p, jobs, _slice_bytes(layer, jobs), first, last)
    band, psum, held = _output_blocks(layer, p, jobs, first, last)
    return dict(ifmap=ifmap[0], ifmap_bytes=ifmap[1], ifmap_size=ifmap[2], filter=filt[0],
                filter_bytes=filt[1], filter_size=filt[2], ofmap=band, psum_bytes=psum,
                psum_size=held)


def _rows(p: Params, jobs: Jobs) -> tuple[int, np.ndarray, np.ndarray]:
    """The steps' count, and the first and last job (global order) of each."""
    return _row_bounds(p.operation_units, len(jobs.end))


@lru_cache(maxsize=256)
def _row_bounds(units: int, n_jobs: int) -> tuple[int, np.ndarray, np.ndarray]:
    """``_rows`` of ``n_jobs`` jobs on ``units`` operation units (read-only arrays)."""
    rows = -(-n_jobs // units)
    first = np.arange(rows, dtype=np.int64) * units
    return rows, frozen(first), frozen(np.minimum(first + units, n_jobs) - 1)


def _blocks(layer: ConvLayer, p: Params, jobs: Jobs, slice_bytes: np.ndarray, first, last):
    """((ids, bytes, sizes) of the ifmap, the same of the filter) of the steps from jobs
    ``first`` to ``last`` in ``jobs.order`` (see ``steps``); ``slice_bytes``: every
    region's slice of the stream per conv group (regions x G), the ifmap's items, numbered
    region * G + g."""
    sets = math.ceil(layer.Kg / p.processing_units)
    per_region, units = layer.groups * sets, p.operation_units
    regions, set_bytes = len(slice_bytes), jobs.kernel_set_bytes
    if jobs.order == "region-major":  # a region's jobs: conv group, then kernel set
        return (_outer_blocks(slice_bytes.ravel(), sets, first, last),
                _inner_blocks(set_bytes, per_region, first, last, units))
    filt = _outer_blocks(set_bytes, regions, first, last)
    if layer.groups == 1:
        return _inner_blocks(slice_bytes[:, 0], regions, first, last, units), filt
    if regions <= units:  # each row runs a group's every slice: held per group
        return _outer_blocks(slice_bytes.sum(axis=0), regions * sets, first, last), filt
    return _slice_windows(slice_bytes, sets, first), filt


def _slice_windows(slice_bytes: np.ndarray, sets: int, first: np.ndarray):
    """(id, DRAM bytes, the same) of each row's window of the stream's slices, kernel-major
    on a grouped layer (a kernel set of group g over every region's slice of g): named by
    its first job's slice, the bytes of every job's."""
    regions, groups = slice_bytes.shape
    ids = (np.arange(regions, dtype=np.int64) * groups + np.arange(groups)[:, None])  # G x T
    ids = np.repeat(ids, sets, axis=0).ravel()  # every job's slice, in run order
    window = np.add.reduceat(slice_bytes.ravel()[ids], first)
    return ids[first], window, window


def kernel_set_bytes(layer: ConvLayer, kernel_nonzeros: np.ndarray, pus: int) -> np.ndarray:
    """Compressed bytes (``weight_bytes`` per kernel) of every kernel set, in the order of a
    region's jobs: conv group, then sets of ``pus`` kernels (G * sets,)."""
    elem = element_bytes(layer.dtype)
    per_kernel = math.ceil(layer.Cg * layer.R * layer.S / 8) + kernel_nonzeros * elem
    sets = math.ceil(layer.Kg / pus)
    grid = np.zeros((layer.groups, sets * pus), np.int64)
    grid[:, :layer.Kg] = per_kernel.reshape(layer.groups, layer.Kg)
    return grid.reshape(-1, pus).sum(axis=1)


def steps(layer: ConvLayer, p: Params, jobs: Jobs, blocks: dict | None = None) -> Steps:
    """The layer as the memory model sees it: one step per row of ``U`` jobs in global order
    (the jobs the operation units run side by side), lasting from the last end of the
    rows before to its own last end (the last step also carries the transfers' tail).

    Blocks, in the loop order image -> region -> conv group -> kernel set (kernel-major:
    conv group -> kernel set -> image -> region, the two operands' rules swapped):
    - ifmap: a job reads its region's *slice* of the compressed stream, the channels of
      its conv group (their share of the stream, by their non-zeros); a row fetches the
      slices it starts, and a row inside one reuses it (streamed again if it exceeds the
      ifmap buffer);
    - filter: the kernel sets the row runs; if a region has no more sets than units every
      row runs all of them (one block, streamed again when it exceeds the filter buffer),
      else each row a window of ``U`` sets, a part of one block, all the weights (held
      whole when they fit): cycled once per region, so weights that do not fit are
      fetched again for every region; kernel-major, the slices are cycled likewise: every
      slice of the conv groups a row starts when a group has no more regions than units,
      else a window of ``U`` slices (on a grouped layer a block of its own);
    - ofmap: the output accumulators of the row's band (``bands``), held in the second
      buffers (``second_buffer_bytes``); the band's share of the compressed OFM is
      written once after its last row; if the band's accumulators do not fit, each row
      spills and reads back its own partial OFMs' pixels (4-byte accumulators).
    """
    rows, first, last = _rows(p, jobs)
    compute, busy = _row_times(np.asarray(jobs.end, np.int64),
                               np.asarray(jobs.busy, np.int64), first, last, jobs.cycles)
    blocks = order_blocks(layer, p, jobs, jobs.order) if blocks is None else blocks
    band = blocks["ofmap"]
    out = np.bincount(band, _ofmap_bytes(p, jobs, rows))[band].astype(np.int64)
    return Steps(compute=compute, ofmap_bytes=out, ofmap_capacity=second_buffer_bytes(p),
                 sram_bytes=share(jobs.sram_total, busy),
                 compute_bound="bus" if jobs.bus_bound else "compute", **blocks)


@njit(cache=True, nogil=True)
def _row_times(end, busy, first, last, cycles):  # pragma: no cover
    """(each row's compute cycles: from the latest end of the rows before it to its own
    latest end, the last row's to the layer's ``cycles``; each row's weight cycles) of the
    rows of jobs ``first`` to ``last`` (``end``, ``busy``: every job's, global order)."""
    compute, row_busy = np.empty(first.size, np.int64), np.zeros(first.size, np.int64)
    edge = 0
    for r in range(first.size):
        top = edge
        for j in range(first[r], last[r] + 1):
            top = max(top, end[j])
            row_busy[r] += busy[j]
        compute[r], edge = top - edge, top
    compute[-1] += cycles - edge
    return compute, row_busy


def _output_blocks(layer: ConvLayer, p: Params, jobs: Jobs, first: np.ndarray,
                   last: np.ndarray):
    """(ofmap ids, partial-sum bytes a row spills, the block's whole partial sums) of the
    steps whose jobs are ``first`` to ``last`` (see ``steps``)."""
    regions = len(jobs.region_nonzeros)
    per_region = layer.groups * math.ceil(layer.Kg / p.processing_units)
    band, held = bands(layer, p, jobs, last)
    pixels = _row_sums(jobs.pofm_pixels, run_order(regions, per_region, jobs.order), first,
                       last)
    return band, ACC_BYTES * pixels, held


@njit(cache=True, nogil=True)
def _row_sums(values, order, first, last):  # pragma: no cover
    """For each row, the sum of ``values[order[j]]`` over its jobs j, ``first`` to
    ``last``."""
    out = np.zeros(first.size, np.int64)
    for r in range(first.size):
        for j in range(first[r], last[r] + 1):
            out[r] += values[order[j]]
    return out


def second_buffer_bytes(p: Params) -> int:
    """Bytes of output accumulators on the device: a second buffer per output unit, or, on a
    chain (no output units, Fig. 13), per operation unit."""
    owners = p.operation_units if p.interconnect == "chain" else p.output_units
    return owners * p.second_buffer_kb * 1024


def bands(layer: ConvLayer, p: Params, jobs: Jobs, last: np.ndarray):
    """(output block of each row of jobs, its accumulators' bytes): the *band* of the
    region row (image, region row) of the row's last job, over every kernel
    (region-major), or over the kernels of that job's set (kernel-major: set, then
    band): 4 B for every kernel and every OFM pixel in the rows its partial OFMs touch
    (``jobs.band_rows``) across the map. Rows of jobs run band after band, so a band
    stays while it is accumulated; one that does not fit spills row by row."""
    per_region = layer.groups * math.ceil(layer.Kg / p.processing_units)
    regions = len(jobs.region_nonzeros)
    if jobs.order == "region-major":  # every kernel, a region row's band
        kernels = np.full(1, layer.K, np.int64)
        sets = 0
    else:  # the kernels of the set, the set's bands one after another
        k0 = np.arange(0, layer.Kg, p.processing_units)
        kernels = np.tile(np.minimum(p.processing_units, layer.Kg - k0), layer.groups)
        sets = regions // jobs.grid_cols
    return _bands(run_order(regions, per_region, jobs.order), last, per_region,
                  jobs.grid_cols, jobs.band_rows, kernels, sets, ACC_BYTES * layer.Q)


@njit(cache=True, nogil=True)
def _bands(order, last, per_region, grid_cols, band_rows, kernels, sets,
           row_bytes):  # pragma: no cover
    """``bands`` row by row: the region row of the row's last job (``order[last]``, in
    region-major numbering) is its band; with ``sets`` bands a kernel set (kernel-major;
    0: region-major), the band of the job's kernel set; its bytes, ``row_bytes`` for each
    of the set's ``kernels`` and each OFM row the band touches. A region row's jobs are
    ``span`` consecutive numbers: the row is divided out only when a job leaves the last
    one's (rows of jobs run band after band)."""
    band, nbytes = np.empty(last.size, np.int64), np.empty(last.size, np.int64)
    span = per_region * grid_cols
    row, lo, touched = 0, 0, band_rows[0]
    for r in range(last.size):
        job = order[last[r]]
        if job < lo or job >= lo + span:
            row = job // span
            lo, touched = row * span, band_rows[row % band_rows.size]
        kset = job % per_region if sets else 0
        band[r] = kset * sets + row
        nbytes[r] = row_bytes * kernels[kset] * touched
    return band, nbytes


@lru_cache(maxsize=1024)  # the layer's shape and the datapath alone: once for every call
def band_rows(layer: ConvLayer, p: Params) -> tuple[np.ndarray, int]:
    """(OFM rows the partial OFMs of each region row touch, regions per row): region row
    ``i`` holds phase rows ``origin + i*n`` to ``origin + (i+1)*n``; a tap at row offset
    ``u`` puts them on outputs ``u`` rows up, so the band reaches from ``origin + i*n -
    max u`` to ``origin + (i+1)*n - min u`` (over every part), inside the OFM. The rows
    are read-only (kept for later calls)."""
    layout = p.plan(layer)
    rh, r0 = p.region_rows, layout.origin[0]
    grid = [-(-e // r) for e, r in zip(layout.extent, p.region, strict=True)]
    umax = max(int(part.u.max()) for part in layout.parts)
    umin = min(int(part.u.min()) for part in layout.parts)
    i = np.arange(grid[0], dtype=np.int64)
    lo = np.clip(r0 + i * rh - umax, 0, layer.P)
    hi = np.clip(r0 + (i + 1) * rh - umin, 0, layer.P)
    return frozen(hi - lo), grid[1]


def _slice_bytes(layer, jobs: Jobs) -> np.ndarray:
    """Every region's slice of the compressed stream as stored, per conv group (regions x
    G): its values, by its non-zeros, and the bitmaps spread evenly over the slices."""
    elem, stream = element_bytes(layer.dtype), jobs.stream_bytes
    slices = jobs.region_nonzeros.size
    bitmaps = stream - jobs.input_nonzeros * elem
    return share(stream, jobs.region_nonzeros.ravel() * elem * slices + bitmaps).reshape(
        jobs.region_nonzeros.shape)


def _outer_blocks(item_bytes, per_item, first, last):
    """(id, DRAM bytes, the same) of each row's block of the outer loop's operand
    (``per_item`` jobs each): the items the row starts, or the one it continues (fetched
    again if it did not stay)."""
    ids, nbytes = _outer(np.asarray(item_bytes, np.int64), per_item, first, last)
    return ids, nbytes, nbytes


@njit(cache=True, nogil=True)
def _outer(item_bytes, per_item, first, last):  # pragma: no cover
    """``_outer_blocks``' ids and bytes in one pass over the rows (their jobs ``first`` to
    ``last``): the row's last item, and the bytes of the items from the first it starts
    (``ceil(first / per_item)``) to that one, or that one's if it starts none."""
    cum = np.zeros(item_bytes.size + 1, np.int64)
    for i in range(item_bytes.size):
        cum[i + 1] = cum[i] + item_bytes[i]
    ids, nbytes = np.empty(first.size, np.int64), np.empty(first.size, np.int64)
    for r in range(first.size):
        lo, hi = -(-first[r] // per_item), last[r] // per_item
        ids[r] = hi
        nbytes[r] = cum[hi + 1] - cum[lo] if lo <= hi else item_bytes[hi]
    return ids, nbytes


def _ofmap_bytes(p: Params, jobs: Jobs, rows: int) -> np.ndarray:
    """Each row's share of the compressed OFM, by its jobs (one region against one kernel
    set each): the row's partial OFMs, once accumulated, are its block of the output."""
    per_row = np.full(rows, p.operation_units, np.int64)
    per_row[-1] = len(jobs.end) - (rows - 1) * p.operation_units
    return share(jobs.ofm_bytes, per_row)


def _inner_blocks(item_bytes, count, first, last, units):
    """(id, DRAM bytes, size) of each row's block of the inner loop's operand (``count``
    items, cycled once per outer item): one block, the whole operand (``size``), of which
    a row reads all if it runs every item, else the window of its items: held whole when
    it fits its buffer, else streamed a window a row."""
    return _inner(np.asarray(item_bytes, np.int64), count, first, last, units)


@njit(cache=True, nogil=True)
def _inner(item_bytes, count, first, last, units):  # pragma: no cover
    """``_inner_blocks`` in one pass over the rows (their jobs ``first`` to ``last``): a
    row's window is its items from job ``first mod count`` on, round the cycle."""
    whole = np.full(first.size, item_bytes.sum(), np.int64)
    if count <= units:
        return np.zeros(first.size, np.int64), whole, whole
    cum = np.zeros(2 * count + 1, np.int64)  # over the items twice: a window may wrap
    for i in range(2 * count):
        cum[i + 1] = cum[i] + item_bytes[i % count]
    nbytes = np.empty(first.size, np.int64)
    for r in range(first.size):
        start = first[r] % count
        nbytes[r] = cum[start + last[r] - first[r] + 1] - cum[start]
    return np.zeros(first.size, np.int64), nbytes, whole


def extra_counts(layer, x_mask, w_mask, p: Params, work: Work, sch: Schedule,
                 saved: int, unit: np.ndarray | None = None) -> dict:
    """The machine's own additive counts (``peak_*`` keys: see docs on merging)."""
    elem = element_bytes(layer.dtype)
    pus = p.operation_units * p.processing_units
    return {
        "opunit_busy_cycles_by_unit": tuple(sch.unit_busy.tolist()),
        "pu_dealt_cycles_by_unit": tuple(dealt_cycles(work.slot_cycles, p, unit).tolist()),
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
        "ifm_bytes_dense": x_mask.size * elem,
        "ifm_stream_bytes": compressed_ifm.stream_bytes(
            layer.input_shape, work.input_nonzeros, (p.region_rows, p.region_cols), elem),
        "weight_bytes": weight_bytes(layer, work.weight_nonzeros, elem),
        "transfers": sch.transfers,
        "transfer_cycles": sch.transfer_cycles,
        "contention_cycles": sch.contention,
        "first_buffer_stall_cycles": sch.first_buffer_stalls,
        "chain_hops": sch.hops,
        "stealing_saved_cycles": saved,
        "peak_pofm_pixels": work.pofm_peak[0] * work.pofm_peak[1],
        "peak_pofm_rows": work.pofm_peak[0],
        "peak_pofm_cols": work.pofm_peak[1],
        "peak_kernel_parts": work.kernel_parts,
    }


def dealt_cycles(slot_cycles: np.ndarray, p: Params,
                 unit: np.ndarray | None = None) -> np.ndarray:
    """Weight cycles dealt to every processing unit before work stealing, unit-major
    (operation unit u, slot s at u * P + s): the jobs (J x P) run on unit ``unit[j]``
    (default ``j mod U``)."""
    units = p.operation_units
    if unit is not None:
        out = np.zeros((units, slot_cycles.shape[1]), np.int64)
        np.add.at(out, unit, slot_cycles)
        return out.ravel()
    rows = -(-len(slot_cycles) // units)
    grid = np.zeros((rows * units, slot_cycles.shape[1]), np.int64)
    grid[:len(slot_cycles)] = slot_cycles
    return grid.reshape(rows, units, -1).sum(axis=0).ravel()


def job_units(p: Params, order: np.ndarray, per_region: int) -> np.ndarray | None:
    """The operation unit of every job in run order (``order``: region-major indices):
    None for round robin (``spread``), region mod U for ``own-unit``."""
    if p.mapping == "spread":
        return None
    return (order // per_region) % p.operation_units


def interconnect_ports(p: Params) -> int:
    """Ports that each select ``bus_width`` pixels out of the operation units' (a multiplexer
    of operation_units inputs per bit): one on the shared ``bus``, one per output unit on
    ``full``; a ``chain`` has a 2-input multiplexer per link and bit (own or passed on), as
    many (units - 1) as one port's."""
    return p.output_units if p.interconnect == "full" else 1


def first_buffer_pixels(p: Params) -> int:
    """Partial-OFM pixels (4-byte accumulators) one operation unit's first buffer holds."""
    return p.first_buffer_kb * 1024 // ACC_BYTES


def timing(work: Work, p: Params, unit: np.ndarray | None = None,
           memo: Memo | None = None, key: tuple = ()) -> tuple[Schedule, int]:
    """The layer's schedule on the units (``unit``: see ``job_units``), and the cycles work
    stealing saves (0 if off): without stealing the jobs last longer but move fewer
    partial OFMs. ``memo`` keeps the transfers' queues under ``key`` (what names ``work``: its
    geometry and order) and the interconnect: only a chain's routes depend on the operation
    units (the hops from a job's unit)."""
    memo = Memo() if memo is None else memo
    chain = (p.operation_units, p.mapping) if p.interconnect == "chain" else ()

    def run(t, stealing: bool) -> Schedule:
        q = memo.get(("queue", *key, stealing, p.interconnect, p.output_units, p.bus_width,
                      *chain), lambda: queue(t, units=p.operation_units,
                                             interconnect=p.interconnect,
                                             output_units=p.output_units, width=p.bus_width,
                                             unit=unit))
        return schedule(work.slot_cycles, q, units=p.operation_units, stealing=stealing,
                        unit=unit, capacity=first_buffer_pixels(p))

    sch = run(work.transfers, p.work_stealing)
    if not p.work_stealing or stealing_moves_nothing(work):
        return sch, 0
    return sch, run(work.plain_transfers, False).cycles - sch.cycles


def stealing_moves_nothing(work: Work) -> bool:
    """Whether work stealing leaves the layer as it is: each job's processing units already
    level (the longest ends at their mean, rounded up) and no unit ran another's cycles
    (the same transfers). The schedule without stealing is then the one with it (the same
    job times and queue), and stealing saves 0 cycles: ``timing`` does not play it again.
    So on a dense layer whose kernels fill every unit's processing units."""
    t, plain = work.transfers, work.plain_transfers
    return (t.job.size == plain.job.size
            and np.array_equal(job_times(work.slot_cycles, True),
                               job_times(work.slot_cycles, False))
            and np.array_equal(t.kernel, plain.kernel) and np.array_equal(t.job, plain.job)
            and np.array_equal(t.pixels, plain.pixels))


def counts(layer: ConvLayer, p: Params, work: Work, extra: dict, name: str) -> Counts:
    """What the machine counted for the layer, before pricing."""
    return Counts(name, macs=work.useful_products, products=work.products, dense_macs=layer.macs,
                  multipliers=p.multipliers,
                  mapped_pe_cycles=int(work.slot_cycles.sum()) * p.region_rows * p.region_cols
                  * p.region_channels, **sram_bytes(layer, p, work), extra=extra)


def layer_stats(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray, arch,
                name: str, memo: Memo | None = None) -> LayerStats:
    """Every cost of the layer from the non-zero masks of its input and weights, in the
    loop order that moves fewer DRAM bytes (``loop_order``): its ``counted`` priced."""
    return price(layer, *counted(layer, x_mask, w_mask, arch, name, memo), arch)


def counted(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray, arch, name: str,
            memo: Memo | None = None) -> Counted:
    """The layer's counts and steps (``layer_stats`` before pricing). ``memo`` (``Memo``,
    for these masks) keeps what holds on other archs: the regions' counts per region
    geometry (``count_key``) and their work per ``Geometry``, the loop order per machine and
    buffer sizes, the jobs reordered per ``Geometry`` and order, the counts and steps per
    machine and order; only the pricing on the memory (``price``) is done again for every
    arch."""
    p = arch.params(Params)
    memo = Memo() if memo is None else memo
    geo = p.geometry
    counted = memo.get(("counts", count_key(geo)),
                       lambda: region_counts(layer, x_mask, w_mask, geo))
    work = memo.get(("work", geo), lambda: region_work(layer, x_mask, w_mask, geo, counted))
    kernel_nonzeros = derived(w_mask, ("kernel_nonzeros", layer.K), lambda: frozen(
        np.count_nonzero(w_mask.reshape(layer.K, -1), axis=1)))
    elem = element_bytes(layer.dtype)
    idle = np.zeros(len(work.slot_cycles), np.int64)
    rows, cols = memo.get(("bands", geo), lambda: band_rows(layer, p))
    pofm = memo.get(("pofm_pixels", geo), lambda: np.bincount(
        work.transfers.job, work.transfers.pixels, minlength=len(idle)).astype(np.int64))
    blocks = Jobs(end=idle, busy=idle, cycles=0, bus_bound=False, pofm_pixels=pofm,
                  band_rows=rows, grid_cols=cols,
                  stream_bytes=compressed_ifm.stream_bytes(layer.input_shape,
                                                           work.input_nonzeros, p.region, elem),
                  input_nonzeros=work.input_nonzeros, region_nonzeros=work.region_nonzeros,
                  kernel_set_bytes=kernel_set_bytes(layer, kernel_nonzeros,
                                                    p.processing_units),
                  ofm_bytes=0, sram_total=0)
    mem = arch.memory
    buffers = tuple(usable_bytes(kb, mem) for kb in (mem.ifmap_sram_kb, mem.filter_sram_kb,
                                                     mem.ofmap_sram_kb))
    order = memo.get(("order", p, buffers), lambda: loop_order(layer, p, blocks, mem, memo))
    ofm = memo.get(("ofm_pixels",), lambda: ofm_pixels(layer, x_mask, w_mask))
    per_region = layer.groups * math.ceil(layer.Kg / p.processing_units)
    ordered = memo.get(("ordered", geo, order), lambda: reorder(
        work, run_order(work.regions, per_region, order)))
    return Counted(*memo.get(("steps", p, order), lambda: _counted(
        layer, x_mask, w_mask, p, ordered, blocks, order, ofm, name, memo)))


def _counted(layer: ConvLayer, x_mask, w_mask, p: Params, work: Work, blocks: Jobs, order: str,
             ofm: int, name: str, memo: Memo) -> tuple[Counts, Steps]:
    """The layer's counts and steps with its jobs run in ``order`` (``work`` reordered so,
    ``reorder``; ``ofm``: the output pixels, ``ofm_pixels``): all that ``price`` needs besides
    the arch's memory (``memo``: the layer's, for ``timing``)."""
    elem = element_bytes(layer.dtype)
    per_region = layer.groups * math.ceil(layer.Kg / p.processing_units)
    run = run_order(work.regions, per_region, order)
    unit = job_units(p, run, per_region)
    sch, saved = timing(work, p, unit, memo, (p.geometry, order))
    extra = extra_counts(layer, x_mask, w_mask, p, work, sch, saved, unit)
    extra["kernel_major_layers"] = int(order == "kernel-major")
    c = counts(layer, p, work, extra, name)
    jobs = dataclasses.replace(
        blocks, end=sch.job_end, busy=reduce_last(work.slot_cycles, np.add), cycles=sch.cycles,
        bus_bound=sch.transfer_end > int(sch.unit_busy.max(initial=0))
        or sch.first_buffer_stalls > 0,
        ofm_bytes=compressed_ifm.stream_bytes(layer.output_shape, ofm, p.region, elem),
        sram_total=c.sram_ifmap_bytes + c.sram_filter_bytes + c.sram_ofmap_bytes, order=order)
    return c, steps(layer, p, jobs, memo.get(("blocks", p, order),
                                             lambda: order_blocks(layer, p, blocks, order)))


@lru_cache(maxsize=1024)  # the layer's shape and the datapath alone: once for every call
def buffer_need(layer: ConvLayer, p: Params) -> int:
    """Bytes of first buffer a job needs: one partial OFM per PU and kernel part."""
    pixels = sum(np.prod(part.pofm_shape(p.region)) for part in p.plan(layer).parts)
    return p.processing_units * int(pixels) * ACC_BYTES


def _stealing(saved: int) -> tuple[str, str]:
    """The report's line for ``stealing_saved_cycles``: the cycles work stealing saved, or,
    when its thieves' extra partial OFMs cost the interconnect and the first buffers more
    than the shorter jobs gain (a negative saving), the cycles it cost."""
    if saved >= 0:
        return "work stealing saved", f"{saved:,} cycles"
    return "work stealing cost", (f"{-saved:,} cycles (the thieves' partial OFMs: more "
                                  "transfers to move)")


def _contention(waited: int, transfers: int) -> str:
    """The report's line for ``contention_cycles``: the cycles transfers waited for the
    interconnect, a sum over transfers that may well exceed the network's cycles."""
    each = f" ({waited / transfers:,.1f} a transfer)" if transfers else ""
    return f"{waited:,} cycles transfers waited for the interconnect, summed over transfers{each}"


@register
class InputReuse(Machine):
    name = "input-reuse"
    Params = Params

    def supports(self, layer: ConvLayer, arch) -> str | None:
        p = arch.params(Params)
        if p.region_rows * p.region_cols > p.accumulators:
            return (f"accumulators={p.accumulators} per processing unit cannot hold the "
                    f"{p.region_rows}x{p.region_cols} partial OFM of even one tap; "
                    f"accumulators must be >= region_rows * region_cols")
        need = buffer_need(layer, p)
        if need > p.first_buffer_kb * 1024:
            return (f"partial OFMs need {need} B of first buffer per operation unit, "
                    f"first_buffer_kb={p.first_buffer_kb}; use a larger first buffer, fewer "
                    f"accumulators (more, smaller kernel parts) or a smaller region")
        return None

    def compute(self, layer, x, w, bias, arch):
        return tap_conv(layer, x, w, bias)

    def estimate(self, layer, x_mask, w_mask, arch):
        return layer_stats(layer, np.asarray(x_mask, bool), np.asarray(w_mask, bool), arch,
                           self.name)

    def count(self, layer, x_mask, w_mask, arch) -> Counted:
        return counted(layer, np.asarray(x_mask, bool), np.asarray(w_mask, bool), arch,
                       self.name)

    def estimate_memo(self, layer, x_mask, w_mask, arch, memo):
        return layer_stats(layer, np.asarray(x_mask, bool), np.asarray(w_mask, bool), arch,
                           self.name, memo)

    def emulate(self, layer, x, w, bias, arch):
        from ..emulate.input_reuse import emulate

        return emulate(layer, x, w, bias, arch.params(Params), arch)

    def hardware(self, arch, dtype):
        """Per operation unit: a region register (n x m x l input pixels), its processing
        units' multipliers, each unit's ``accumulators`` (32 bits) and a ``mux_fan_in``-input
        multiplexer per multiplier (Fig. 6), and its first buffer (SRAM); the second buffers
        (SRAM, per output unit, or per operation unit on a chain); the interconnect that
        carries bus_width partial-OFM pixels from the operation units (``interconnect_ports``);
        the three SRAMs."""
        from ..area import Hardware, element_bits, memory_kib

        p, bits = arch.params(Params), element_bits(dtype)
        region = p.region_rows * p.region_cols * p.region_channels
        pus = p.operation_units * p.processing_units
        registers = p.operation_units * region * bits + pus * p.accumulators * 32
        muxes = (p.multipliers * (p.mux_fan_in - 1) * bits
                 + interconnect_ports(p) * (p.operation_units - 1) * p.bus_width * 32)
        return Hardware(macs=p.multipliers, register_bits=registers,
                        sram_kib={**memory_kib(arch.memory),
                                  "first buffers": p.first_buffer_kb * p.operation_units,
                                  "second buffers": second_buffer_bytes(p) // 1024},
                        mux_bits=muxes)

    def diagnostics(self, total: LayerStats) -> list[tuple[str, str]]:
        """Kernel parts of the fixed datapath, cycles lost to contention on the units'
        interconnect and to full first buffers, cycles work stealing saved (or cost), and
        the partial-sum transfers."""
        e = total.extra
        idle = e.get("opunit_idle_cycles", 0)
        return [("kernel parts (most in a layer)", f"{int(e.get('peak_kernel_parts', 1))}"),
                ("loop order", f"{int(e.get('kernel_major_layers', 0)):,} layers kernel-major, "
                               "the others region-major"),
                ("interconnect contention", _contention(int(e.get("contention_cycles", 0)),
                                               int(e.get("transfers", 0)))),
                ("first buffers full", f"{int(e.get('first_buffer_stall_cycles', 0)):,} "
                                       "cycles the operation units stalled, summed over units"),
                _stealing(int(e.get("stealing_saved_cycles", 0))),
                ("transfers", f"{int(e.get('transfers', 0)):,} "
                              f"({int(e.get('transfer_cycles', 0)):,} cycles)"),
                ("operation units idle",
                 f"{percent(idle, idle + e.get('opunit_busy_cycles', 0))} of their cycles")]
