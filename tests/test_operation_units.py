"""The units' schedule (one compiled pass over the hand-offs) against plain plays and loops."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npusim.dataflows import operation_units as ou


@given(st.lists(st.lists(st.integers(0, 20), min_size=3, max_size=3), min_size=1, max_size=10))
def test_job_times_with_and_without_stealing(jobs):
    c = np.array(jobs, np.int64)
    np.testing.assert_array_equal(ou.job_times(c, False), [max(j) for j in jobs])
    np.testing.assert_array_equal(ou.job_times(c, True), [-(-sum(j) // 3) for j in jobs])


def test_chain_routes_to_the_kernels_owner_counting_hops():
    t = ou.Transfers(job=np.array([0, 2]), kernel=np.array([3, 0]), pixels=np.array([36, 36]))
    q = ou.queue(t, units=4, interconnect="chain", output_units=4, width=16)
    assert q.server.tolist() == [3, 0] and q.hops == 3 + 2
    assert q.duration.tolist() == [9, 6]  # 3 beats of 16 pixels per hop
    assert q.transfer_cycles == 15 and q.transfers == 2


def test_chain_transfer_to_its_own_unit_does_not_move():
    t = ou.Transfers(job=np.array([1, 1]), kernel=np.array([1, 2]), pixels=np.array([36, 36]))
    q = ou.queue(t, units=4, interconnect="chain", output_units=4, width=16)
    assert q.transfers == 1 and q.server.tolist() == [2] and q.hops == 1


def queued(jobs, units: int, link: str, unit=None):
    """(weight cycles J x 1, queue) of ``jobs`` (weight cycles, partial OFMs (kernel,
    pixels)) on ``unit`` (None: job mod units), a pixel a beat, 3 output units."""
    rows = [(j, k, px) for j, (_, ts) in enumerate(jobs) for k, px in ts]
    job, kernel, pixels = (np.array(rows, np.int64).reshape(-1, 3).T if rows
                           else (np.zeros(0, np.int64),) * 3)
    slots = np.array([[c] for c, _ in jobs], np.int64)
    q = ou.queue(ou.Transfers(job, kernel, pixels), units=units, interconnect=link,
                 output_units=3, width=1, unit=unit)
    return slots, q


def routed(jobs, units: int, link: str, unit):
    """Every job's moving transfers (server, cycles, pixels), routed as the module notes
    say, a pixel a beat: the bus is server 0; full, output unit kernel mod 3; chain, the
    kernel's owner (kernel mod units), a beat a hop, not moving when the job's unit owns it."""
    out = []
    for j, (_, ts) in enumerate(jobs):
        row = []
        for k, px in ts:
            if link == "bus":
                row.append((0, px, px))
            elif link == "full":
                row.append((k % 3, px, px))
            elif abs(unit[j] - k % units):
                row.append((k % units, px * abs(unit[j] - k % units), px))
        out.append(row)
    return out


def back_pressure_by_cycles(times, transfers, unit, units, capacity):
    """Jobs ``times[j]`` cycles long (job j on unit ``unit[j]``, each unit's back to back in
    job order) and their moving transfers (per job, in sequence: server, duration, pixels),
    played one cycle at a time: at each cycle transfers that end free their unit's pixels;
    then, in job order, a finished job hands off if its unit's first buffer is empty or has
    room for all its pixels (its transfers join their servers' queues and its unit starts
    its next job); then each idle server starts its oldest waiting transfer. (hand-off of
    every job, stalled cycles, last transfer end, summed waits)."""
    own = [[j for j in range(len(times)) if unit[j] == u] for u in range(units)]
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


def fifo_by_loop(server, ready, duration):
    """(last end, summed waits) of transfers on FIFO servers: a server takes, whenever
    free, the earliest-ready waiting transfer (ties: sequence)."""
    free, last, wait = {}, 0, 0
    for i in sorted(range(len(server)), key=lambda i: (server[i], ready[i], i)):
        start = max(ready[i], free.get(server[i], 0))
        free[server[i]] = start + duration[i]
        last, wait = max(last, start + duration[i]), wait + start - ready[i]
    return last, wait


# jobs: (weight cycles, partial OFMs (kernel, pixels))
jobs_with_transfers = st.lists(st.tuples(st.integers(0, 6), st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, 6)), max_size=4)), min_size=1, max_size=14)


@st.composite
def placed_jobs(draw):
    """(jobs, units, link, unit of every job or None for round robin)."""
    jobs = draw(jobs_with_transfers)
    units = draw(st.integers(1, 3))
    unit = draw(st.none() | st.lists(st.integers(0, units - 1), min_size=len(jobs),
                                     max_size=len(jobs)))
    return jobs, units, draw(st.sampled_from(["full", "bus", "chain"])), unit


@settings(max_examples=1000)
@given(placed_jobs(), st.none() | st.integers(1, 24))
def test_schedule_equals_cycle_by_cycle_play(placed, capacity):
    """Any first-buffer capacity (some units stalling or none; None: unbounded), any
    interconnect and any placement of jobs on units: ``schedule``'s hand-offs, stalls,
    last transfer, waits and cycles are those of a cycle-by-cycle play."""
    jobs, units, link, unit = placed
    slots, q = queued(jobs, units, link, unit)
    got = ou.schedule(slots, q, units=units, stealing=False, unit=unit, capacity=capacity)
    on = [j % units for j in range(len(jobs))] if unit is None else unit
    ends, stalls, last, wait = back_pressure_by_cycles(
        [c for c, _ in jobs], routed(jobs, units, link, on), on, units,
        float("inf") if capacity is None else capacity)
    assert (got.job_end.tolist(), got.first_buffer_stalls, got.transfer_end,
            got.contention) == (ends, stalls, last, wait)
    assert got.cycles == max(max(ends), last)
    assert got.unit_busy.tolist() == [sum(c for (c, _), v in zip(jobs, on, strict=True) if v == u)
                                      for u in range(units)]


@settings(max_examples=1000)
@given(placed_jobs())
def test_unbounded_first_buffers_give_running_sums_and_fifo_servers(placed):
    """With no bound on the first buffers no unit stalls: every job hands off at its end
    (its unit's running sum of job times) and the servers are FIFO queues of the transfers
    ready at their jobs' ends."""
    jobs, units, link, unit = placed
    slots, q = queued(jobs, units, link, unit)
    got = ou.schedule(slots, q, units=units, stealing=False, unit=unit)
    on = [j % units for j in range(len(jobs))] if unit is None else unit
    clock, ends = [0] * units, []
    for (c, _), u in zip(jobs, on, strict=True):
        clock[u] += c
        ends.append(clock[u])
    moving = [(j, s, d) for j, ts in enumerate(routed(jobs, units, link, on)) for s, d, _ in ts]
    last, wait = fifo_by_loop([s for _, s, _ in moving], [ends[j] for j, _, _ in moving],
                              [d for _, _, d in moving])
    assert got.job_end.tolist() == ends and got.first_buffer_stalls == 0
    assert (got.transfer_end, got.contention) == (last, wait)
    assert got.cycles == max(max(clock), last)


def test_a_layer_too_long_for_the_hand_off_keys_is_refused():
    """A layer whose cycles could pass the hand-off keys' range is refused, not wrapped."""
    slots = np.array([[1 << 60], [1 << 60]], np.int64)
    q = ou.queue(ou.Transfers(np.zeros(0, np.int64), np.zeros(0, np.int64),
                              np.zeros(0, np.int64)), units=1, interconnect="bus",
                 output_units=1, width=1)
    with pytest.raises(ValueError, match="fewer than 2\\*\\*60 cycles"):
        ou.schedule(slots, q, units=1, stealing=False)


@given(st.lists(st.lists(st.integers(0, 50), min_size=3, max_size=3), min_size=1, max_size=12),
       st.booleans(), st.integers(1, 3))
def test_a_job_lasts_its_busiest_pu_or_with_stealing_their_mean_rounded_up(rows, stealing,
                                                                            units):
    """Jobs of three PUs' weight cycles, no transfers, round robin: each lasts its busiest
    PU's cycles (with work stealing, their sum over three, rounded up), so each unit's jobs
    end at the running sums of their times; every unit's busy cycles are its jobs' times
    and the PUs' busy cycles all the weight cycles."""
    slots = np.array(rows, np.int64)
    none = ou.Transfers(*(np.zeros(0, np.int64),) * 3)
    q = ou.queue(none, units=units, interconnect="bus", output_units=1, width=1)
    got = ou.schedule(slots, q, units=units, stealing=stealing)
    clock, ends = [0] * units, []
    for j, row in enumerate(rows):
        clock[j % units] += -(-sum(row) // 3) if stealing else max(row)
        ends.append(clock[j % units])
    assert got.job_end.tolist() == ends and got.cycles == max(clock)
    assert got.unit_busy.tolist() == clock and got.pu_busy == sum(map(sum, rows))
