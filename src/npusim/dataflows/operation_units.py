"""Operation units, processing units and the output interconnect (seed 000, Figs. 11-15).

What the cycle emulator (``npusim.emulate.input_reuse``) plays cycle by cycle, timed
without a clock:

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
- **First buffer** (back-pressure): a finished job's moving partial OFMs wait in its
  unit's first buffer of ``capacity`` accumulator pixels until their transfer ends. A job
  hands them off when they fit beside those still there (or the buffer is empty); until
  then its unit stalls and starts no job. Handing off is what makes them ready, so a
  stalled job's transfers queue from its hand-off.

All of it is one compiled pass over the hand-offs in time order (``_handoffs``): a FIFO
server's later arrivals never delay its earlier ones, so when a job hands off, its
transfers' starts and ends follow from their servers' last ends; its unit's held pixels
are its own transfers' that have not ended, so the unit's next hand-off follows too (its
job's end, or the first end of a held transfer after which the job's pixels fit). The
next hand-off over all units is the earliest of theirs (ties: job order).
Layer cycles = max(last hand-off, last transfer end).
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
    ``job_end`` is every job's hand-off (J,: its end, or later when its unit stalled on a
    full first buffer), ``transfer_end`` the last transfer's finish, ``first_buffer_stalls``
    the units' cycles stalled on their full first buffers (summed over units)."""

    cycles: int
    unit_busy: np.ndarray
    pu_busy: int
    transfers: int
    transfer_cycles: int
    contention: int
    hops: int
    job_end: np.ndarray
    transfer_end: int
    first_buffer_stalls: int = 0


@dataclass(frozen=True)
class Queue:
    """A layer's moving transfers (those of at least one cycle), routed once for every
    timing of its jobs, in sequence order: producing job, server, duration (cycles) and
    pixels; with the number of servers and, over all the transfers (moving or not), their
    count of moving ones, their cycles and their chain hops."""

    job: np.ndarray
    server: np.ndarray
    duration: np.ndarray
    pixels: np.ndarray
    transfers: int
    transfer_cycles: int
    hops: int
    servers: int


def reduce_last(a: np.ndarray, op: np.ufunc, dtype=None) -> np.ndarray:
    """``op`` (np.add, np.maximum) over the last axis of ``a`` (at least one long), column
    by column, in ``dtype`` (default ``a``'s): numpy reduces a short innermost axis several
    times slower."""
    out = a[..., 0].astype(dtype or a.dtype)
    for i in range(1, a.shape[-1]):
        op(out, a[..., i], out=out)
    return out


def job_times(slot_cycles: np.ndarray, stealing: bool) -> np.ndarray:
    """Cycles of each job (J,) from its processing units' weight cycles (J x P, >= 0): its
    busiest PU's, or with work stealing their sum over P rounded up (``_jobs``)."""
    return _jobs(np.asarray(slot_cycles, np.int64), stealing, NO_UNIT, 1)[0]


LINKS = ("bus", "full", "chain")
NO_UNIT = np.zeros(0, np.int64)  # every job's operation unit when jobs go round robin


def queue(t: Transfers, *, units: int, interconnect: str, output_units: int,
          width: int, unit: np.ndarray | None = None) -> Queue:
    """Route the transfers over the interconnect (see the module notes) and keep the moving
    ones (those of at least one cycle), in sequence order. ``unit``: the operation unit of
    every job (default: job mod units), read on a chain only."""
    unit = NO_UNIT if unit is None else np.asarray(unit, np.int64)
    job, server, duration, pixels, totals = _route(
        t.job.astype(np.int64, copy=False), unit, t.kernel.astype(np.int64, copy=False),
        t.pixels.astype(np.int64, copy=False), LINKS.index(interconnect), units,
        output_units, width)
    moving, cycles, hops = (int(v) for v in totals)
    servers = {"bus": 1, "full": output_units, "chain": units}[interconnect]
    return Queue(job, server, duration, pixels, transfers=moving, transfer_cycles=cycles,
                 hops=hops, servers=servers)


@njit(cache=True, nogil=True)
def _route(job, unit, kernel, pixels, link, units, output_units, width):  # pragma: no cover
    """``queue`` in one pass: the moving transfers' (job, server, duration, pixels) and the
    totals (moving transfers, transfer cycles, hops); ``link`` indexes ``LINKS``; ``unit``:
    every job's operation unit (empty: job mod units), read on a chain only."""
    n = job.size
    out_job, out_server = np.empty(n, np.int64), np.empty(n, np.int64)
    out_duration, out_pixels = np.empty(n, np.int64), np.empty(n, np.int64)
    moving = cycles = hops_total = 0
    for i in range(n):
        beats = (pixels[i] + width - 1) // width
        server, hops, duration = 0, 0, beats  # bus: one shared server
        if link == 1:  # full: one server per output unit
            server = kernel[i] % output_units
        elif link == 2:  # chain: the owning operation unit, store and forward
            server = kernel[i] % units
            hops = abs((job[i] % units if unit.size == 0 else unit[job[i]]) - server)
            duration = beats * hops
        cycles += duration
        hops_total += hops
        if duration == 0:
            continue
        out_job[moving], out_server[moving] = job[i], server
        out_duration[moving], out_pixels[moving] = duration, pixels[i]
        moving += 1
    totals = np.array([moving, cycles, hops_total], np.int64)
    return (out_job[:moving], out_server[:moving], out_duration[:moving], out_pixels[:moving],
            totals)


# a unit's next hand-off is kept as one key, (cycle << bits) | job, so that the earliest
# (ties: the lower job) is the least key; cycles must stay below 2 ** (KEY_BITS - bits)
KEY_BITS = 62


def schedule(slot_cycles: np.ndarray, q: Queue, *, units: int, stealing: bool,
             unit: np.ndarray | None = None, capacity: int | None = None) -> Schedule:
    """Time the jobs (J x P weight cycles, in global order, on ``unit``: default round
    robin) and their queued transfers; ``capacity``: accumulator pixels of each unit's
    first buffer (None: unbounded, no unit ever stalls)."""
    times, source, unit_busy, pu_busy = _jobs(
        np.asarray(slot_cycles, np.int64), stealing,
        NO_UNIT if unit is None else np.asarray(unit, np.int64), units)
    bits = max(len(times), 1).bit_length()
    if int(unit_busy.sum()) + q.transfer_cycles >= 1 << (KEY_BITS - bits):
        raise ValueError(f"a layer of {len(times):,} jobs must take fewer than "
                         f"2**{KEY_BITS - bits} cycles to be timed")
    ends, stalls, last, wait, latest = _handoffs(
        times, source, units, q.job, q.server, q.duration, q.pixels, q.servers,
        (1 << KEY_BITS) if capacity is None else capacity, bits)
    return Schedule(cycles=max(int(latest), int(last)), unit_busy=unit_busy,
                    pu_busy=int(pu_busy), transfers=q.transfers,
                    transfer_cycles=q.transfer_cycles, contention=int(wait), hops=q.hops,
                    job_end=ends, transfer_end=int(last), first_buffer_stalls=int(stalls))


@njit(cache=True, nogil=True)
def _jobs(slot_cycles, stealing, unit, units):  # pragma: no cover
    """(cycles of every job: its busiest PU's, or with work stealing (``stealing``) their
    sum over P rounded up; its operation unit; each unit's busy cycles; all the weight
    cycles) of jobs of J x P weight cycles on ``unit`` (empty: job mod ``units``), in one
    pass."""
    jobs, pus = slot_cycles.shape
    times, source = np.empty(jobs, np.int64), np.empty(jobs, np.int64)
    busy = np.zeros(units, np.int64)
    total = 0
    for j in range(jobs):
        whole = most = 0
        for p in range(pus):
            whole += slot_cycles[j, p]
            most = max(most, slot_cycles[j, p])
        times[j] = (whole + pus - 1) // pus if stealing else most
        source[j] = j % units if unit.size == 0 else unit[j]
        busy[source[j]] += times[j]
        total += whole
    return times, source, busy, total


@njit(cache=True, nogil=True)
def _handoffs(times, source, units, job, server, duration, pixels, servers, capacity,
              bits):  # pragma: no cover
    """(hand-off of every job, stalled cycles, last transfer end, summed waits, last
    hand-off) of jobs (``times`` cycles each, on unit ``source[j]``, each unit's in global
    order) whose moving transfers (``job``, ``server``, ``duration``, ``pixels``, in
    sequence order) wait in first buffers of ``capacity`` pixels, in one pass over the
    hand-offs in time order (ties: job order).

    A FIFO server's later arrivals never delay its earlier ones, so a transfer's start and
    end are known when its job hands off: ``max(hand-off, its server's last end)``. A unit's
    held pixels are its own transfers' that have not ended, so its next job's hand-off is
    known then too: the job's end, or, while the buffer holds pixels and has no room for
    the job's, the next end of a held transfer. Each unit keeps its held transfers per
    server, in the order they end (one server's end in the order they queued), as runs (a
    job's consecutive transfers to one server: the next to end and its end, the run's last
    end and the pixels it still holds), and its next hand-off as a key
    ``(cycle << bits) | job``: the least key over the units is the next hand-off."""
    jobs = times.size
    lo, hi, need, room = _runs(job, server, pixels, source, jobs, units, servers)
    most = np.zeros(units, np.int64)  # a unit's pixels, all held at once
    for j in range(jobs):
        most[source[j]] += need[j]
    bounded = most.max() > capacity  # else no unit ever stalls: no run need be kept
    run_next, run_end = np.empty(room[-1], np.int64), np.empty(room[-1], np.int64)
    run_last, run_pixels = np.empty(room[-1], np.int64), np.empty(room[-1], np.int64)
    head, tail = room[:-1].copy(), room[:-1].copy()
    held = np.zeros(units, np.int64)
    free = np.zeros(servers, np.int64)  # each server's last end so far
    start, own = _jobs_of_units(source, units)
    nxt = start[:-1].copy()
    never = np.int64(1) << 62
    due = np.full(units, never, np.int64)  # each unit's next hand-off, as a key
    for u in range(units):
        if nxt[u] < start[u + 1]:
            j = own[nxt[u]]
            nxt[u] += 1
            due[u] = (times[j] << bits) | j
    ends = np.zeros(jobs, np.int64)
    mask = (np.int64(1) << bits) - 1
    stalls = wait = last = latest = 0
    while True:
        key = never
        for u in range(units):
            key = min(key, due[u])
        if key == never:
            break
        h, j = key >> bits, key & mask
        u = source[j]
        ends[j] = latest = h  # hand-offs come in time order
        held[u] += need[j]
        k = lo[j]
        while k < hi[j]:  # the job's transfers join their servers' queues, a run a server
            s = server[k]
            begin = t = max(h, free[s])
            first, px = k, 0
            while k < hi[j] and server[k] == s:
                wait += t - h
                t += duration[k]
                px += pixels[k]
                k += 1
            free[s] = t
            last = max(last, t)
            if bounded:
                g = u * servers + s
                b = tail[g]
                run_next[b], run_end[b] = first, begin + duration[first]
                run_last[b], run_pixels[b] = t, px
                tail[g] = b + 1
        due[u] = never
        if nxt[u] == start[u + 1]:
            continue
        j = own[nxt[u]]  # the unit's next job: it hands off when its pixels fit
        nxt[u] += 1
        t = h + times[j]
        # a job of no moving transfers, its unit's buffer not overfull (a job may fill an
        # empty one past its capacity), hands off at its end and queues nothing
        while need[j] == 0 and held[u] <= capacity and nxt[u] < start[u + 1]:
            ends[j] = t
            j = own[nxt[u]]
            nxt[u] += 1
            t += times[j]
        end = t
        if held[u] + need[j] > capacity:  # ``held``: at least the pixels held at t
            held[u] = _release(u, t, servers, run_next, run_end, run_last, run_pixels, head,
                               tail, duration, pixels, held[u])
        while held[u] > 0 and held[u] + need[j] > capacity:
            t = never
            for g in range(u * servers, (u + 1) * servers):
                if head[g] < tail[g]:
                    t = min(t, run_end[head[g]])
            held[u] = _release(u, t, servers, run_next, run_end, run_last, run_pixels, head,
                               tail, duration, pixels, held[u])
        stalls += t - end
        due[u] = (t << bits) | j
    return ends, stalls, last, wait, latest


@njit(cache=True, nogil=True)
def _runs(job, server, pixels, source, jobs, units, servers):  # pragma: no cover
    """(first transfer, one past the last, pixels) of every job (transfers in job order;
    a job with none: 0, 0, 0) and where each unit's runs on each server start in one array
    (g = unit * servers + server: ``room[g]`` to ``room[g + 1]``)."""
    lo, hi = np.zeros(jobs, np.int64), np.zeros(jobs, np.int64)
    need = np.zeros(jobs, np.int64)
    room = np.zeros(units * servers + 1, np.int64)
    for k in range(job.size):
        j = job[k]
        if k == 0 or j != job[k - 1]:
            lo[j] = k
        if k == 0 or j != job[k - 1] or server[k] != server[k - 1]:
            room[source[j] * servers + server[k] + 1] += 1
        hi[j] = k + 1
        need[j] += pixels[k]
    for g in range(units * servers):
        room[g + 1] += room[g]
    return lo, hi, need, room


@njit(cache=True, nogil=True, inline="always")
def _release(u, t, servers, run_next, run_end, run_last, run_pixels, head, tail, duration,
             pixels, held):  # pragma: no cover
    """Unit ``u``'s ``held`` pixels once its transfers that end by ``t`` have left: on each
    server s, its runs ``head[g]`` to ``tail[g]`` (g = u * servers + s), each from its next
    transfer (``run_next``, ending at ``run_end``) to its last (ending at ``run_last``),
    ``run_pixels`` in all; a run that has ended leaves whole."""
    for g in range(u * servers, (u + 1) * servers):
        a = head[g]
        while a < tail[g] and run_end[a] <= t:
            if run_last[a] <= t:
                held -= run_pixels[a]
                a += 1
                continue
            k, end = run_next[a], run_end[a]
            while end <= t:  # a run partly ended: it stays, from its next transfer
                held -= pixels[k]
                run_pixels[a] -= pixels[k]
                k += 1
                end += duration[k]
            run_next[a], run_end[a] = k, end
            break
        head[g] = a
    return held


@njit(cache=True, nogil=True)
def _jobs_of_units(source, units):  # pragma: no cover
    """(start, own): unit u's jobs (those with ``source[j] == u``, in order) are
    ``own[start[u]:start[u + 1]]``."""
    start = np.zeros(units + 1, np.int64)
    for j in range(source.size):
        start[source[j] + 1] += 1
    for u in range(units):
        start[u + 1] += start[u]
    fill = start[:-1].copy()
    own = np.empty(source.size, np.int64)
    for j in range(source.size):
        own[fill[source[j]]] = j
        fill[source[j]] += 1
    return start, own
