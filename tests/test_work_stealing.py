"""Input-reuse's work stealing (``region_work._steal``) against a plain play of its rule."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from npusim.dataflows import region_work as rw


def stolen_by_cycles(job):
    """(victim, runner, part, cycles) of one job (P x parts weight cycles), played a cycle
    at a time: each cycle every PU with cycles left runs the front one of its own queue
    (its parts in order); then each PU that had none when the cycle began, in slot order,
    runs the last cycle of the PU with most left (the first of equals). Non-zero counts,
    in (victim, runner, part) order."""
    pus, parts = len(job), len(job[0])
    queue = [[p for p in range(parts) for _ in range(job[v][p])] for v in range(pus)]
    front, back = [0] * pus, [len(q) for q in queue]
    counts = {}
    while any(back[v] > front[v] for v in range(pus)):
        idle = [v for v in range(pus) if back[v] == front[v]]
        for v in range(pus):
            if back[v] > front[v]:
                key = (v, v, queue[v][front[v]])
                counts[key] = counts.get(key, 0) + 1
                front[v] += 1
        for t in idle:
            left = [back[v] - front[v] for v in range(pus)]
            if max(left) == 0:
                break
            v = left.index(max(left))
            back[v] -= 1
            key = (v, t, queue[v][back[v]])
            counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items())


@st.composite
def jobs(draw):
    """Jobs of P processing units' weight cycles per kernel part: many with a single busy
    PU (a depthwise layer's), some with long queues (the runs counted at once)."""
    pus, parts = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    cycles = st.integers(0, 12) | st.integers(0, 60)
    row = st.lists(st.lists(cycles, min_size=parts, max_size=parts), min_size=pus,
                   max_size=pus)
    one = st.tuples(st.integers(0, pus - 1), st.lists(cycles, min_size=parts,
                                                      max_size=parts)).map(
        lambda vc: [vc[1] if v == vc[0] else [0] * parts for v in range(pus)])
    return draw(st.lists(row | one, min_size=1, max_size=6))


@settings(max_examples=500)
@given(jobs())
def test_stealing_counts_equal_a_cycle_by_cycle_play(js):
    """Every job's (victim, runner, part, cycles), in order, are those of the play."""
    job, victim, runner, part, count = rw._steal(np.array(js, np.int64))
    got = list(zip(job.tolist(), zip(victim.tolist(), runner.tolist(), part.tolist(),
                                     strict=True), count.tolist(), strict=True))
    want = [(j, key, c) for j, one in enumerate(js) for key, c in stolen_by_cycles(one)]
    assert got == want
