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
from numba import njit


@dataclass(frozen=True)
class Transfers:
    """Partial OFMs to move, in sequence order: producing job, kernel, pixels."""

    job: np.ndarray
    kernel: np.ndarray
    pixels: np.ndarray


@dataclass(frozen=True)
class Schedule:
    """Timing of one layer on the units (all counts in cycles unless named otherwise)."""

    cycles: int
    unit_busy: np.ndarray
    pu_busy: int
    transfers: int
    transfer_cycles: int
    contention: int
    hops: int


@dataclass(frozen=True)
class Queue:
    """A layer's moving transfers, routed and batched once for every timing of its jobs:
    one item per run of consecutive transfers of one job to one server (``batches``)."""

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


def job_ends(times: np.ndarray, units: int) -> tuple[np.ndarray, np.ndarray]:
    """(end cycle of every job, busy cycles of every unit): job ``j`` runs on unit
    ``j mod units``, each unit's jobs back to back in global order.

    The jobs laid out as rows of ``units`` are each unit's queue down a column, so
    one running sum down the columns gives every end, without sorting by unit.
    """
    rows = -(-times.size // units)
    grid = np.zeros(rows * units, times.dtype)
    grid[:times.size] = times
    ends = np.cumsum(grid.reshape(rows, units), axis=0)
    busy = ends[-1] if rows else np.zeros(units, times.dtype)
    return ends.ravel()[:times.size], busy


def fifo(server: np.ndarray, ready: np.ndarray, duration: np.ndarray,
         count: np.ndarray | int = 1) -> tuple[int, int]:
    """(last finish, total wait) of transfers on FIFO servers, in cycles; an item standing
    for ``count`` transfers served back to back counts its start wait ``count`` times."""
    if server.size == 0:
        return 0, 0
    counts = np.broadcast_to(np.asarray(count, np.int64), server.shape)
    last, wait = _serve(server.astype(np.int64), ready.astype(np.int64),
                        duration.astype(np.int64), np.ascontiguousarray(counts))
    return int(last), int(wait)


@njit(cache=True, nogil=True)
def _serve(server, ready, duration, count):  # pragma: no cover
    """``fifo`` on non-empty int64 arrays: serve by (server, ready, sequence)."""
    order = np.argsort(server * (ready.max() + 1) + ready, kind="mergesort")  # stable
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


def batches(job: np.ndarray, server: np.ndarray,
            duration: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(first transfer, transfers, total duration cycles) of each run of consecutive
    transfers (in sequence order, ``job`` non-decreasing) of one job to one server, and the
    cycles those transfers wait for earlier ones of their own run.

    A run is contiguous in its server's queue (same ready time, consecutive sequence), so
    ``fifo`` serves it as one item (on the bus: one per job, not one per partial OFM);
    transfer ``i`` of a run also waits ``sum`` of the durations before it in the run.
    """
    if not job.size:
        return job, job, duration, 0
    first = np.flatnonzero(np.r_[True, (job[1:] != job[:-1]) | (server[1:] != server[:-1])])
    count = np.diff(np.r_[first, job.size])
    last_of_run = np.repeat(first + count - 1, count)
    inner = int((duration * (last_of_run - np.arange(job.size))).sum())
    return first, count, np.add.reduceat(duration, first), inner


def route(t: Transfers, unit: np.ndarray, interconnect: str, units: int,
          output_units: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(server, duration cycles, hops) of each transfer over the interconnect."""
    beats = -(-t.pixels // width)
    src = unit[t.job]
    if interconnect == "bus":
        return np.zeros_like(t.job), beats, np.zeros_like(t.job)
    if interconnect == "full":
        return t.kernel % output_units, beats, np.zeros_like(t.job)
    owner = t.kernel % units
    hops = np.abs(src - owner)
    return owner, beats * hops, hops


def queue(t: Transfers, *, units: int, interconnect: str, output_units: int,
          width: int) -> Queue:
    """Route the transfers over the interconnect and batch the moving ones (``batches``)."""
    unit = np.arange(int(t.job.max(initial=-1)) + 1) % units
    server, duration, hops = route(t, unit, interconnect, units, output_units, width)
    moving = duration > 0
    job, server, moved = t.job[moving], server[moving], duration[moving]
    first, count, total, inner = batches(job, server, moved)
    return Queue(job[first], server[first], total, count, inner, transfers=int(moving.sum()),
                 transfer_cycles=int(duration.sum()), hops=int(hops.sum()))


def schedule(slot_cycles: np.ndarray, q: Queue, *, units: int, stealing: bool) -> Schedule:
    """Time the jobs (J x P weight cycles, in global order) and their queued transfers."""
    times = job_times(slot_cycles, stealing)
    ends, busy = job_ends(times, units)
    last, wait = fifo(q.server, ends[q.job], q.duration, q.count)
    return Schedule(cycles=max(int(busy.max(initial=0)), last), unit_busy=busy,
                    pu_busy=int(slot_cycles.sum()), transfers=q.transfers,
                    transfer_cycles=q.transfer_cycles, contention=wait + q.inner_wait,
                    hops=q.hops)
