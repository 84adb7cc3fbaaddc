"""Operation units, processing units and the output interconnect (seed 000, Figs. 11-15).

Closed forms, vectorised over jobs, of what the cycle emulator
(``npusim.emulate.input_reuse``) plays cycle by cycle:

- A *job* is one IFM region against one *kernel set* (the ``P`` kernels in
  flight, one per processing unit, Fig. 14). Jobs are dealt round robin: job
  ``j`` (global order, region-major) runs on operation unit ``j mod U``. When a
  region has one kernel set this is the patent's one region per unit (Fig. 11);
  when a layer has few regions (a fully connected layer has one) its kernel sets
  spread over the units instead of queueing on one. A unit runs its jobs back to
  back, in the global order.
- A job lasts ``max_p c_p`` cycles, ``c_p`` being processing unit p's non-skipped
  weight cycles; with work stealing (Fig. 15, claim 11) a unit that finishes takes
  single weight cycles of the busiest one, so the job lasts ``ceil(sum_p c_p / P)``.
- When a job ends, each of its partial OFMs (per kernel and kernel part, if any
  product was made) is a *transfer* to the unit that accumulates that kernel's OFM
  region: ``bus`` one shared server; ``full`` one server per output unit
  (kernel mod output units); ``chain`` the owning operation unit (kernel mod U),
  ``hops`` links away, store-and-forward. A transfer lasts
  ``ceil(pixels / bus_width) * (hops if chain else 1)`` cycles; a server takes
  waiting transfers in order of (ready time, sequence), one at a time.

The FIFO servers are one compiled pass over the transfers sorted by (server, ready,
sequence): each starts at ``max(ready, previous finish on its server)``.
Layer cycles = max(last job end, last transfer finish).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..jit import njit


@dataclass(frozen=True)
class Transfers:
    """Partial OFMs to move, in sequence order: producing job, kernel, pixels."""

    job: np.ndarray
    kernel: np.ndarray
    pixels: np.ndarray


@dataclass(frozen=True)
class Schedule:
    """Timing of one layer on the units (all counts in cycles unless named otherwise):
    ``job_end`` is every job's end (J,), ``transfer_end`` the last transfer's finish."""

    cycles: int
    unit_busy: np.ndarray
    pu_busy: int
    transfers: int
    transfer_cycles: int
    contention: int
    hops: int
    job_end: np.ndarray
    transfer_end: int


@dataclass(frozen=True)
class Queue:
    """A layer's moving transfers, routed and batched once for every timing of its jobs:
    one item per run of consecutive transfers of one job to one server (``queue``)."""

    job: np.ndarray
    server: np.ndarray
    duration: np.ndarray
    count: np.ndarray
    inner_wait: int
    transfers: int
    transfer_cycles: int
    hops: int


def reduce_last(a: np.ndarray, op: np.ufunc, dtype=None) -> np.ndarray:
    """``op`` (np.add, np.maximum) over the last axis of ``a`` (at least one long), column
    by column, in ``dtype`` (default ``a``'s): numpy reduces a short innermost axis several
    times slower."""
    out = a[..., 0].astype(dtype or a.dtype)
    for i in range(1, a.shape[-1]):
        op(out, a[..., i], out=out)
    return out


def job_times(slot_cycles: np.ndarray, stealing: bool) -> np.ndarray:
    """Cycles of each job (J,) from its processing units' weight cycles (J x P, >= 0)."""
    if stealing:
        p = slot_cycles.shape[1]
        return -(-reduce_last(slot_cycles, np.add) // p)
    return reduce_last(slot_cycles, np.maximum)


def job_ends(times: np.ndarray, units: int,
             unit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(end cycle of every job, busy cycles of every unit): job ``j`` runs on unit
    ``unit[j]`` (default ``j mod units``), each unit's jobs back to back in global order.

    Round robin, the jobs laid out as rows of ``units`` are each unit's queue down a
    column, so one running sum down the columns gives every end, without sorting by unit.
    """
    if unit is not None:
        return _ends_by_unit(times, unit, units)
    rows = -(-times.size // units)
    grid = np.zeros(rows * units, times.dtype)
    grid[:times.size] = times
    ends = np.cumsum(grid.reshape(rows, units), axis=0)
    busy = ends[-1] if rows else np.zeros(units, times.dtype)
    return ends.ravel()[:times.size], busy


def _ends_by_unit(times: np.ndarray, unit: np.ndarray, units: int):
    """``job_ends`` for any unit of every job: a running sum over the jobs sorted by unit
    (stably: each unit's in global order), restarted at every unit."""
    order = np.argsort(unit, kind="stable")
    t = times[order]
    cum = np.cumsum(t)
    head = np.ones(len(t), bool)
    head[1:] = unit[order][1:] != unit[order][:-1]
    base = (cum - t)[head]
    ends = np.empty_like(times)
    ends[order] = cum - np.repeat(base, np.diff(np.append(np.flatnonzero(head), len(t))))
    return ends, np.bincount(unit, times, minlength=units).astype(times.dtype)


def fifo(server: np.ndarray, ready: np.ndarray, duration: np.ndarray,
         count: np.ndarray | int = 1) -> tuple[int, int]:
    """(last finish, total wait) of transfers on FIFO servers, in cycles; an item standing
    for ``count`` transfers served back to back counts its start wait ``count`` times."""
    if server.size == 0:
        return 0, 0
    server, ready = server.astype(np.int64, copy=False), ready.astype(np.int64, copy=False)
    counts = np.broadcast_to(np.asarray(count, np.int64), server.shape)
    # numpy's stable sort (timsort) is quick on the nearly sorted ready times of a layer
    order = np.argsort(server * (int(ready.max()) + 1) + ready, kind="stable")
    last, wait = _serve(order, server, ready, duration.astype(np.int64, copy=False),
                        np.ascontiguousarray(counts))
    return int(last), int(wait)


@njit(cache=True, nogil=True)
def _serve(order, server, ready, duration, count):  # pragma: no cover
    """``fifo`` on non-empty int64 arrays, in service ``order`` (server, ready, sequence)."""
    last = wait = free = 0
    current = -1
    for i in order:
        if server[i] != current:
            current, free = server[i], 0
        start = max(ready[i], free)
        free = start + duration[i]
        wait += (start - ready[i]) * count[i]
        last = max(last, free)
    return last, wait


LINKS = ("bus", "full", "chain")


def queue(t: Transfers, *, units: int, interconnect: str, output_units: int,
          width: int, unit: np.ndarray | None = None) -> Queue:
    """Route the transfers over the interconnect (see the module notes) and batch the
    moving ones: a run of consecutive moving transfers of one job to one server is
    contiguous in its server's queue (same ready time, consecutive sequence), so ``fifo``
    serves it as one item (on the bus: one per job, not one per partial OFM); each
    transfer of a run also waits for the durations of the run's earlier ones. ``unit``:
    the operation unit of every job (default: job mod units)."""
    job = t.job.astype(np.int64)
    source = job % units if unit is None else np.asarray(unit, np.int64)[job]
    job, server, duration, count, totals = _route_and_batch(
        job, source, t.kernel.astype(np.int64), t.pixels.astype(np.int64),
        LINKS.index(interconnect), units, output_units, width)
    inner, moving, cycles, hops = (int(v) for v in totals)
    return Queue(job, server, duration, count, inner, transfers=moving,
                 transfer_cycles=cycles, hops=hops)


@njit(cache=True, nogil=True)
def _route_and_batch(job, source, kernel, pixels, link, units, output_units,
                     width):  # pragma: no cover
    """``queue`` in one pass: items (job, server, duration, count) and the totals (inner
    wait, moving transfers, transfer cycles, hops); ``link`` indexes ``LINKS``."""
    n = job.size
    item_job, item_server = np.empty(n, np.int64), np.empty(n, np.int64)
    item_duration, item_count = np.empty(n, np.int64), np.empty(n, np.int64)
    items = inner = moving = cycles = hops_total = 0
    for i in range(n):
        beats = (pixels[i] + width - 1) // width
        server, hops, duration = 0, 0, beats  # bus: one shared server
        if link == 1:  # full: one server per output unit
            server = kernel[i] % output_units
        elif link == 2:  # chain: the owning operation unit, store and forward
            server = kernel[i] % units
            hops = abs(source[i] - server)
            duration = beats * hops
        cycles += duration
        hops_total += hops
        if duration == 0:
            continue
        moving += 1
        last = items - 1
        if items and item_job[last] == job[i] and item_server[last] == server:
            inner += item_duration[last]
            item_duration[last] += duration
            item_count[last] += 1
        else:
            item_job[items], item_server[items] = job[i], server
            item_duration[items], item_count[items] = duration, 1
            items += 1
    totals = np.array([inner, moving, cycles, hops_total], np.int64)
    return (item_job[:items], item_server[:items], item_duration[:items], item_count[:items],
            totals)


def schedule(slot_cycles: np.ndarray, q: Queue, *, units: int, stealing: bool,
             unit: np.ndarray | None = None) -> Schedule:
    """Time the jobs (J x P weight cycles, in global order, on ``unit``: default round
    robin) and their queued transfers."""
    times = job_times(slot_cycles, stealing)
    ends, busy = job_ends(times, units, unit)
    last, wait = fifo(q.server, ends[q.job], q.duration, q.count)
    return Schedule(cycles=max(int(busy.max(initial=0)), last), unit_busy=busy,
                    pu_busy=int(slot_cycles.sum()), transfers=q.transfers,
                    transfer_cycles=q.transfer_cycles, contention=wait + q.inner_wait,
                    hops=q.hops, job_end=ends, transfer_end=last)
