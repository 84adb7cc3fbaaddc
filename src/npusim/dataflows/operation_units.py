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
- **First buffer** (back-pressure): a finished job's moving partial OFMs wait in its
  unit's first buffer of ``capacity`` accumulator pixels until their transfer ends. A job
  hands them off when they fit beside those still there (or the buffer is empty); until
  then its unit stalls and starts no job. Handing off is what makes them ready, so a
  stalled job's transfers queue from its hand-off.

The FIFO servers are one compiled pass over the transfers sorted by (server, ready,
sequence): each starts at ``max(ready, previous finish on its server)``. When that
schedule would overfill some unit's first buffer (``_overflows``, compiled: each unit's
jobs in order against a heap of its held partial OFMs) the units and servers are instead
played as events in time order (``_backpressure``, compiled: a heap of the next events,
and at each time only the units and servers an event touched; a server's transfers that
end one after another with nothing else happening between, the common case on a busy bus,
are played in a row without the heap, ``_drain``).
Layer cycles = max(last hand-off, last transfer finish).
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
    """A layer's moving transfers, routed and batched once for every timing of its jobs:
    one item per run of consecutive transfers of one job to one server (``queue``), the
    moving transfers' own durations and pixels (in sequence order; item i's are
    ``first[i]`` to ``first[i] + count[i]``), the number of servers and every item's
    pixels (the sum of its transfers')."""

    job: np.ndarray
    server: np.ndarray
    duration: np.ndarray
    count: np.ndarray
    inner_wait: int
    transfers: int
    transfer_cycles: int
    hops: int
    first: np.ndarray
    moving_duration: np.ndarray
    moving_pixels: np.ndarray
    servers: int
    pixels: np.ndarray


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
    last, wait, _ = served(server, ready, duration, count)
    return last, wait


def served(server: np.ndarray, ready: np.ndarray, duration: np.ndarray,
           count: np.ndarray | int = 1) -> tuple[int, int, np.ndarray]:
    """``fifo``'s (last finish, total wait) and every item's finish."""
    if server.size == 0:
        return 0, 0, np.zeros(0, np.int64)
    server, ready = server.astype(np.int64, copy=False), ready.astype(np.int64, copy=False)
    counts = np.broadcast_to(np.asarray(count, np.int64), server.shape)
    # numpy's stable sort (timsort) is quick on the nearly sorted ready times of a layer;
    # one server (a bus) takes them in (ready, sequence) order alone
    key = ready if not server.any() else (
        server * (int(ready.max()) + 1) + ready)
    order = np.argsort(key, kind="stable")
    finish = np.empty(server.size, np.int64)
    last, wait = _serve(order, server, ready, duration.astype(np.int64, copy=False),
                        np.ascontiguousarray(counts), finish)
    return int(last), int(wait), finish


@njit(cache=True, nogil=True)
def _serve(order, server, ready, duration, count, finish):  # pragma: no cover
    """``fifo`` on non-empty int64 arrays, in service ``order`` (server, ready, sequence);
    writes every item's finish into ``finish``."""
    last = wait = free = 0
    current = -1
    for i in order:
        if server[i] != current:
            current, free = server[i], 0
        start = max(ready[i], free)
        free = finish[i] = start + duration[i]
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
    job = t.job.astype(np.int64, copy=False)
    unit = np.zeros(0, np.int64) if unit is None else np.asarray(unit, np.int64)
    (job, server, duration, count, first, mv_duration, mv_pixels, item_pixels,
     totals) = _route_and_batch(job, unit, t.kernel.astype(np.int64, copy=False),
                                t.pixels.astype(np.int64, copy=False),
                                LINKS.index(interconnect), units, output_units, width)
    inner, moving, cycles, hops = (int(v) for v in totals)
    servers = {"bus": 1, "full": output_units, "chain": units}[interconnect]
    return Queue(job, server, duration, count, inner, transfers=moving,
                 transfer_cycles=cycles, hops=hops, first=first,
                 moving_duration=mv_duration, moving_pixels=mv_pixels, servers=servers,
                 pixels=item_pixels)


@njit(cache=True, nogil=True)
def _route_and_batch(job, unit, kernel, pixels, link, units, output_units,
                     width):  # pragma: no cover
    """``queue`` in one pass: items (job, server, duration, count, first moving transfer),
    the moving transfers' durations and pixels, the items' pixels and the totals (inner
    wait, moving transfers, transfer cycles, hops); ``link`` indexes ``LINKS``; ``unit``:
    every job's operation unit (empty: job mod units), read on a chain only."""
    n = job.size
    item_job, item_server = np.empty(n, np.int64), np.empty(n, np.int64)
    item_duration, item_count = np.empty(n, np.int64), np.empty(n, np.int64)
    item_first, item_pixels = np.empty(n, np.int64), np.empty(n, np.int64)
    mv_duration, mv_pixels = np.empty(n, np.int64), np.empty(n, np.int64)
    items = inner = moving = cycles = hops_total = 0
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
        mv_duration[moving], mv_pixels[moving] = duration, pixels[i]
        moving += 1
        last = items - 1
        if items and item_job[last] == job[i] and item_server[last] == server:
            inner += item_duration[last]
            item_duration[last] += duration
            item_count[last] += 1
            item_pixels[last] += pixels[i]
        else:
            item_job[items], item_server[items] = job[i], server
            item_duration[items], item_count[items] = duration, 1
            item_first[items], item_pixels[items] = moving - 1, pixels[i]
            items += 1
    totals = np.array([inner, moving, cycles, hops_total], np.int64)
    return (item_job[:items], item_server[:items], item_duration[:items], item_count[:items],
            item_first[:items], mv_duration[:moving], mv_pixels[:moving], item_pixels[:items],
            totals)


def schedule(slot_cycles: np.ndarray, q: Queue, *, units: int, stealing: bool,
             unit: np.ndarray | None = None, capacity: int | None = None) -> Schedule:
    """Time the jobs (J x P weight cycles, in global order, on ``unit``: default round
    robin) and their queued transfers; ``capacity``: accumulator pixels of each unit's
    first buffer (None: unbounded). The events (``_backpressure``) are played only when
    the closed form would overfill a first buffer (``_overflows``): otherwise no unit
    stalls and the events give the closed form's times."""
    times = job_times(slot_cycles, stealing)
    ends, busy = job_ends(times, units, unit)
    last, wait, finish = served(q.server, ends[q.job], q.duration, q.count)
    if capacity is not None and q.job.size:
        source = (np.arange(len(times)) % units if unit is None
                  else np.asarray(unit, np.int64))
        if (np.bincount(source[q.job], q.pixels, minlength=units).max() > capacity
                and _overflows(ends.astype(np.int64, copy=False), source.astype(np.int64),
                               units, q.job, q.pixels, finish, capacity)):
            ends, stalls, last, wait = _backpressure(
                times.astype(np.int64), source.astype(np.int64), units, q.job, q.server,
                q.first, q.count, q.moving_duration, q.moving_pixels, q.servers, capacity)
            return Schedule(cycles=max(int(ends.max(initial=0)), int(last)), unit_busy=busy,
                            pu_busy=int(slot_cycles.sum()), transfers=q.transfers,
                            transfer_cycles=q.transfer_cycles, contention=int(wait),
                            hops=q.hops, job_end=ends, transfer_end=int(last),
                            first_buffer_stalls=int(stalls))
    return Schedule(cycles=max(int(busy.max(initial=0)), last), unit_busy=busy,
                    pu_busy=int(slot_cycles.sum()), transfers=q.transfers,
                    transfer_cycles=q.transfer_cycles, contention=wait + q.inner_wait,
                    hops=q.hops, job_end=ends, transfer_end=last)


@njit(cache=True, nogil=True)
def _overflows(ends, source, units, item_job, item_pixels, item_finish,
               capacity):  # pragma: no cover
    """Whether some job of the closed form (hand-off at its ``ends``, on unit ``source``)
    would find its unit's first buffer too full: holding pixels, and not room for the job's
    (``item_pixels`` of its items, in job order). An item is counted as held until its
    last transfer ends (``item_finish``), at or after its transfers' own ends, so False
    means no unit stalls: every hand-off is at its job's end, as in the closed form.
    Per unit, jobs in order: items that have ended by a job's end free their pixels
    before it hands off (a heap of the held items by finish)."""
    jobs, items = ends.size, item_job.size
    lo, hi = _items_of_jobs(item_job, jobs)
    need = np.zeros(jobs, np.int64)
    for i in range(items):
        need[item_job[i]] += item_pixels[i]
    start, own = _jobs_of_units(source, units)
    heap_t, heap_px = np.empty(items, np.int64), np.empty(items, np.int64)
    for u in range(units):
        size = held = 0
        for n in range(start[u], start[u + 1]):
            j = own[n]
            while size and heap_t[0] <= ends[j]:
                held -= heap_px[0]
                size = _pop(heap_t, heap_px, size)
            if held > 0 and held + need[j] > capacity:
                return True
            held += need[j]
            if lo[j] >= 0:
                for i in range(lo[j], hi[j]):
                    size = _push(heap_t, heap_px, size, item_finish[i], item_pixels[i])
    return False


@njit(cache=True, nogil=True)
def _backpressure(times, source, units, item_job, item_server, item_first, item_count,
                  duration, pixels, servers, capacity):  # pragma: no cover
    """(hand-off of every job, stalled cycles, last transfer finish, total wait) of jobs
    (``times`` cycles each, on unit ``source[j]``, each unit's in global order) whose
    moving partial OFMs (items as in ``Queue``) wait in first buffers of ``capacity``
    pixels, played as events in time order. At each time: transfers that finish free
    their pixels; waiting jobs that fit hand off, in job order (their transfers join their
    servers' queues, ready now) and their units start their next jobs; idle servers start
    the head of their queues (ready order, then sequence).

    The next time is the earliest pending event (a running unit's job end or a server's
    transfer end, at most one each: a heap), and at a time only the units and servers an
    event touched are looked at: a waiting unit that did not fit stays so until its own
    transfers free pixels (another unit's hand-off leaves its buffer as it is), and a
    server can start only when it has just become idle or its queue has just grown."""
    jobs, n_items, n_moving = times.size, item_job.size, duration.size
    lo, hi = _items_of_jobs(item_job, jobs)
    need = np.zeros(jobs, np.int64)
    for i in range(n_items):
        for k in range(item_first[i], item_first[i] + item_count[i]):
            need[item_job[i]] += pixels[k]
    start, own = _jobs_of_units(source, units)
    qstart = np.zeros(servers + 1, np.int64)  # each server's queue, in arrival order
    for i in range(n_items):
        qstart[item_server[i] + 1] += item_count[i]
    for s in range(servers):
        qstart[s + 1] += qstart[s]
    line = np.empty(n_moving, np.int64)
    head, tail = qstart[:-1].copy(), qstart[:-1].copy()
    ready, owner = np.zeros(n_moving, np.int64), np.zeros(n_moving, np.int64)
    busy_until = np.zeros(servers, np.int64)
    serving = np.full(servers, -1, np.int64)
    held = np.zeros(units, np.int64)
    nxt = start[:-1].copy()
    state = np.zeros(units, np.int64)  # 0 no job, 1 running, 2 waiting to hand off
    job = np.full(units, -1, np.int64)
    since = np.zeros(units, np.int64)
    ends = np.zeros(jobs, np.int64)
    # pending events (time, id: a unit's job end, or units + s for server s's transfer end)
    heap_t, heap_id = np.empty(units + servers, np.int64), np.empty(units + servers, np.int64)
    size = 0
    cand = np.empty(units, np.int64)  # waiting units that may fit now
    is_cand = np.zeros(units, np.bool_)
    n_cand = 0
    touched = np.empty(servers, np.int64)  # servers that may start a transfer now
    is_touched = np.zeros(servers, np.bool_)
    n_touched = 0
    stalls = wait = last = 0
    t = 0
    for u in range(units):  # every unit starts its first job at 0
        if nxt[u] < start[u + 1]:
            job[u] = own[nxt[u]]
            nxt[u] += 1
            if times[job[u]] == 0:
                state[u] = 2
                cand[n_cand], is_cand[u] = u, True
                n_cand += 1
            else:
                state[u] = 1
                size = _push(heap_t, heap_id, size, times[job[u]], u)
    while True:
        while n_cand:  # hand-offs at t, in job order
            best = -1
            for c in range(n_cand):
                u = cand[c]
                if held[u] == 0 or held[u] + need[job[u]] <= capacity:
                    if best < 0 or job[u] < job[cand[best]]:
                        best = c
            if best < 0:
                break
            u = cand[best]
            n_cand -= 1
            cand[best] = cand[n_cand]
            is_cand[u] = False
            j = job[u]
            ends[j] = t
            stalls += t - since[u]
            held[u] += need[j]
            if lo[j] >= 0:
                for i in range(lo[j], hi[j]):
                    s = item_server[i]
                    if not is_touched[s]:
                        touched[n_touched], is_touched[s] = s, True
                        n_touched += 1
                    for k in range(item_first[i], item_first[i] + item_count[i]):
                        line[tail[s]] = k
                        tail[s] += 1
                        ready[k], owner[k] = t, u
            if nxt[u] < start[u + 1]:
                job[u] = own[nxt[u]]
                nxt[u] += 1
                if times[job[u]] == 0:
                    state[u], since[u] = 2, t
                    cand[n_cand], is_cand[u] = u, True
                    n_cand += 1
                else:
                    state[u] = 1
                    size = _push(heap_t, heap_id, size, t + times[job[u]], u)
            else:
                state[u] = 0
        for c in range(n_cand):  # those left do not fit until their own transfers end
            is_cand[cand[c]] = False
        n_cand = 0
        for c in range(n_touched):  # idle servers start their next transfer
            s = touched[c]
            is_touched[s] = False
            if serving[s] < 0 and head[s] < tail[s]:
                k = line[head[s]]
                head[s] += 1
                wait += t - ready[k]
                serving[s], busy_until[s] = k, t + duration[k]
                size = _push(heap_t, heap_id, size, busy_until[s], units + s)
        n_touched = 0
        if size == 0:
            break
        t = heap_t[0]
        while size and heap_t[0] == t:
            e = heap_id[0]
            size = _pop(heap_t, heap_id, size)
            if e >= units:  # a transfer ends: its pixels leave its unit's first buffer
                s = e - units
                k = serving[s]
                u = owner[k]
                held[u] -= pixels[k]
                last = max(last, t)
                serving[s] = -1
                if n_touched == n_cand == 0 and (size == 0 or heap_t[0] > t):  # t's only event
                    t, u, last, wait = _drain(s, t, u, last, wait, heap_t[0] if size else -1,
                                              line, head, tail, ready, owner, duration,
                                              pixels, held, state, job, need, capacity)
                touched[n_touched], is_touched[s] = s, True
                n_touched += 1
                if state[u] == 2 and not is_cand[u]:
                    cand[n_cand], is_cand[u] = u, True
                    n_cand += 1
            else:  # a job ends: its unit waits to hand it off
                state[e], since[e] = 2, t
                if not is_cand[e]:
                    cand[n_cand], is_cand[e] = e, True
                    n_cand += 1
    return ends, stalls, last, wait


@njit(cache=True, nogil=True, _nrt=False)
def _drain(s, t, u, last, wait, next_event, line, head, tail, ready, owner, duration, pixels,
           held, state, job, need, capacity):  # pragma: no cover
    """``_backpressure`` after server ``s``'s transfer of unit ``u``'s pixels ends at ``t``,
    the only event then, played on while nothing else can happen: if ``u`` is not waiting
    to hand off or still does not fit, and ``s`` has a transfer queued that would end
    before ``next_event`` (the next pending event's time; -1: none), that transfer starts
    at ``t`` and ends alone, and so on, without the event heap. (time, unit, last transfer
    end, summed waits) at the last end played: there ``s`` is idle, as after any end.

    Compiled without the runtime's reference counts (``_nrt=False``: it allocates nothing
    and keeps no array): numba counts the references of a called or inlined function's
    arrays, eleven here, with atomic operations at every call, which took 40 % of the
    play. ``_push`` and ``_pop`` are inlined instead: called, they counted the heap's."""
    while head[s] < tail[s]:
        if state[u] == 2 and (held[u] == 0 or held[u] + need[job[u]] <= capacity):
            break  # ``u`` hands off at ``t``: before ``s`` starts its next
        k = line[head[s]]
        end = t + duration[k]
        if 0 <= next_event <= end:
            break
        head[s] += 1
        wait += t - ready[k]
        t, u = end, owner[k]
        held[u] -= pixels[k]
        last = max(last, t)
    return t, u, last, wait


@njit(cache=True, nogil=True)
def _items_of_jobs(item_job, jobs):  # pragma: no cover
    """(first item, one past the last) of every job's items (items in job order; a job with
    none: -1, 0)."""
    lo = np.full(jobs, -1, np.int64)
    hi = np.zeros(jobs, np.int64)
    for i in range(item_job.size):
        j = item_job[i]
        if lo[j] < 0:
            lo[j] = i
        hi[j] = i + 1
    return lo, hi


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


@njit(cache=True, nogil=True, inline="always")
def _push(heap_t, heap_id, size, t, e):  # pragma: no cover
    """Add event (t, e) to the binary min-heap (by time) of ``size`` entries; the new size."""
    i = size
    while i > 0:
        parent = (i - 1) // 2
        if heap_t[parent] <= t:
            break
        heap_t[i], heap_id[i] = heap_t[parent], heap_id[parent]
        i = parent
    heap_t[i], heap_id[i] = t, e
    return size + 1


@njit(cache=True, nogil=True, inline="always")
def _pop(heap_t, heap_id, size):  # pragma: no cover
    """Remove the heap's earliest event (entry 0); the new size."""
    size -= 1
    t, e = heap_t[size], heap_id[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap_t[child + 1] < heap_t[child]:
            child += 1
        if heap_t[child] >= t:
            break
        heap_t[i], heap_id[i] = heap_t[child], heap_id[child]
        i = child
    heap_t[i], heap_id[i] = t, e
    return size
