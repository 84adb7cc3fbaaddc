"""The unit/bus schedule's array forms against plain step-by-step loops."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from npusim.dataflows import operation_units as ou


def fifo_by_loop(server, ready, duration):
    """A server takes, whenever free, the earliest-ready waiting transfer (ties: sequence)."""
    free, last, wait = {}, 0, 0
    for i in sorted(range(len(server)), key=lambda i: (server[i], ready[i], i)):
        start = max(ready[i], free.get(server[i], 0))
        free[server[i]] = start + duration[i]
        last, wait = max(last, start + duration[i]), wait + start - ready[i]
    return last, wait


transfers = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(1, 6)),
                     max_size=40)


@given(transfers)
def test_fifo_closed_form_equals_loop(ts):
    cols = np.array(ts, np.int64).reshape(-1, 3)
    server, ready, duration = cols[:, 0], cols[:, 1], cols[:, 2]
    assert ou.fifo(server, ready, duration) == fifo_by_loop(server, ready, duration)


@given(st.lists(st.tuples(st.integers(0, 30), st.lists(st.tuples(st.integers(0, 2),
                                                                  st.integers(1, 6)),
                                                        min_size=1, max_size=5)),
                max_size=12))
def test_batched_transfers_on_fifo_equal_loop_over_single_transfers(jobs):
    """Jobs in sequence (ready = the job's end), each with transfers (server, duration):
    on the full interconnect kernel k goes to output unit k, a pixel is one beat."""
    rows = [(j, srv, ready, d) for j, (ready, ts) in enumerate(jobs) for srv, d in ts]
    job, server, ready, duration = np.array(rows, np.int64).reshape(-1, 4).T
    ends = np.zeros(len(jobs), np.int64)
    ends[job] = ready
    q = ou.queue(ou.Transfers(job, server, duration), units=2, interconnect="full",
                 output_units=3, width=1)
    last, wait = ou.fifo(q.server, ends[q.job], q.duration, q.count)
    assert (last, wait + q.inner_wait) == fifo_by_loop(server, ready, duration)
    assert (q.transfers, q.transfer_cycles, q.hops) == (len(rows), duration.sum(), 0)


@given(st.lists(st.lists(st.integers(0, 20), min_size=3, max_size=3), min_size=1, max_size=10))
def test_job_times_with_and_without_stealing(jobs):
    c = np.array(jobs, np.int64)
    np.testing.assert_array_equal(ou.job_times(c, False), [max(j) for j in jobs])
    np.testing.assert_array_equal(ou.job_times(c, True), [-(-sum(j) // 3) for j in jobs])


@given(st.lists(st.integers(0, 9), max_size=30), st.integers(1, 5))
def test_job_ends_run_each_units_jobs_back_to_back(times, units):
    clock, expected = [0] * units, []
    for j, t in enumerate(times):
        clock[j % units] += t
        expected.append(clock[j % units])
    ends, busy = ou.job_ends(np.array(times, np.int64), units)
    np.testing.assert_array_equal(ends, expected)
    np.testing.assert_array_equal(busy, clock)
    assert ends.dtype == busy.dtype == np.int64


def test_chain_routes_to_the_kernels_owner_counting_hops():
    t = ou.Transfers(job=np.array([0, 2]), kernel=np.array([3, 0]), pixels=np.array([36, 36]))
    q = ou.queue(t, units=4, interconnect="chain", output_units=4, width=16)
    assert q.server.tolist() == [3, 0] and q.hops == 3 + 2
    assert q.duration.tolist() == [9, 6]  # 3 beats of 16 pixels per hop
    assert q.transfer_cycles == 15 and q.transfers == 2 and q.inner_wait == 0


def test_chain_transfer_to_its_own_unit_does_not_move():
    t = ou.Transfers(job=np.array([1, 1]), kernel=np.array([1, 2]), pixels=np.array([36, 36]))
    q = ou.queue(t, units=4, interconnect="chain", output_units=4, width=16)
    assert q.transfers == 1 and q.server.tolist() == [2] and q.hops == 1


def queued(jobs, units: int, link: str):
    """(weight cycles J x 1, queue, pixels of every partial OFM) of ``jobs`` (weight cycles,
    partial OFMs (kernel, pixels)), a pixel a beat, 3 output units."""
    rows = [(j, k, px) for j, (_, ts) in enumerate(jobs) for k, px in ts]
    job, kernel, pixels = (np.array(rows, np.int64).reshape(-1, 3).T if rows
                           else (np.zeros(0, np.int64),) * 3)
    slots = np.array([[c] for c, _ in jobs], np.int64)
    q = ou.queue(ou.Transfers(job, kernel, pixels), units=units, interconnect=link,
                 output_units=3, width=1)
    return slots, q, pixels


# jobs: (weight cycles, partial OFMs (kernel, pixels))
jobs_with_transfers = st.lists(st.tuples(st.integers(0, 6), st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, 6)), max_size=4)), min_size=1, max_size=14)


@given(jobs_with_transfers,
       st.integers(1, 3), st.sampled_from(["full", "bus"]))
def test_back_pressure_events_with_room_to_spare_equal_the_closed_form(jobs, units, link):
    """Jobs (weight cycles, transfers (kernel, pixels)) on ``units`` units: played as events
    with first buffers that hold every partial OFM (capacity = all the pixels), the
    schedule is the closed form's (running sums per unit, FIFO servers): same hand-offs,
    last transfer and waits, and no stall; with one pixel less some unit may stall, never
    earlier than the closed form's job ends."""
    slots, q, pixels = queued(jobs, units, link)
    free = ou.schedule(slots, q, units=units, stealing=False)
    whole = int(pixels.sum())
    roomy = ou.schedule(slots, q, units=units, stealing=False, capacity=max(whole, 1))
    source = np.arange(len(jobs)) % units
    ends, stalls, last, wait = ou._backpressure(
        slots[:, 0].copy(), source, units, q.job, q.server, q.first, q.count,
        q.moving_duration, q.moving_pixels, q.servers, max(whole, 1))
    assert (ends.tolist(), last, wait, stalls) == (
        free.job_end.tolist(), free.transfer_end, free.contention, 0)
    assert (roomy.cycles, roomy.contention) == (free.cycles, free.contention)
    if whole > 1:
        tight = ou.schedule(slots, q, units=units, stealing=False, capacity=whole - 1)
        assert (tight.job_end >= free.job_end).all() and tight.cycles >= free.cycles


def back_pressure_by_cycles(times, transfers, units, capacity):
    """Jobs ``times[j]`` cycles long (job j on unit j mod units, each unit's back to back)
    and their moving transfers (per job, in sequence: server, duration, pixels), played one
    cycle at a time: at each cycle transfers that end free their unit's pixels; then, in job
    order, a finished job hands off if its unit's first buffer is empty or has room for all
    its pixels (its transfers join their servers' queues and its unit starts its next job);
    then each idle server starts its oldest waiting transfer. (hand-off of every job, stalled
    cycles, last transfer end, summed waits)."""
    own = [list(range(u, len(times), units)) for u in range(units)]
    running = {}  # unit: (its job, the cycle that job ends)
    for u in range(units):
        if own[u]:
            j = own[u].pop(0)
            running[u] = (j, times[j])
    held, queues, serving = [0] * units, {}, {}
    ends, stalls, last, wait, t = {}, 0, 0, 0, 0
    while running or any(queues.values()) or serving:
        for s, (end, u, px) in list(serving.items()):
            if end == t:
                held[u] -= px
                last = max(last, t)
                del serving[s]
        while True:
            fits = [(j, u) for u, (j, done) in running.items() if done <= t
                    and (held[u] == 0 or held[u] + sum(p for _, _, p in transfers[j])
                         <= capacity)]
            if not fits:
                break
            j, u = min(fits)
            ends[j], stalls = t, stalls + t - running[u][1]
            for s, d, px in transfers[j]:
                held[u] += px
                queues.setdefault(s, []).append((t, d, u, px))
            if own[u]:
                nxt = own[u].pop(0)
                running[u] = (nxt, t + times[nxt])
            else:
                del running[u]
        for s, waiting in queues.items():
            if s not in serving and waiting:
                ready, d, u, px = waiting.pop(0)
                wait += t - ready
                serving[s] = (t + d, u, px)
        t += 1
    return [ends[j] for j in range(len(times))], stalls, last, wait


@given(jobs_with_transfers,
       st.integers(1, 3), st.sampled_from(["full", "bus"]), st.integers(1, 24))
def test_first_buffer_schedule_equals_cycle_by_cycle_play(jobs, units, link, capacity):
    """Any first-buffer capacity (some units stalling or none): ``schedule``'s hand-offs,
    stalls, last transfer, waits and cycles are those of a cycle-by-cycle play (each
    partial OFM of k pixels, kernel k', a transfer of k beats to server k' mod 3 on full,
    0 on the bus)."""
    slots, q, pixels = queued(jobs, units, link)
    got = ou.schedule(slots, q, units=units, stealing=False, capacity=capacity)
    moving = [[(k % 3 if link == "full" else 0, px, px) for k, px in ts] for _, ts in jobs]
    ends, stalls, last, wait = back_pressure_by_cycles([c for c, _ in jobs], moving, units,
                                                       capacity)
    assert (got.job_end.tolist(), got.first_buffer_stalls, got.transfer_end,
            got.contention) == (ends, stalls, last, wait)
    assert got.cycles == max(max(ends), last)
