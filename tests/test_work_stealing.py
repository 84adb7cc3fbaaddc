"""Input-reuse's work stealing (``region_work._steal``) against a plain play of its rule."""

import numpy as np
from hypothesis import example, given, settings
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


def _played(js):
    """``_steal``'s records of the jobs ``js`` as (job, (victim, runner, part), count)."""
    job, victim, runner, part, count = rw._steal(np.array(js, np.int64))
    return list(zip(job.tolist(), zip(victim.tolist(), runner.tolist(), part.tolist(),
                                      strict=True), count.tolist(), strict=True))


@settings(max_examples=300)
@given(jobs(), st.lists(st.integers(0, 5), min_size=1, max_size=12))
@example([[[3, 1], [0, 0]], [[3, 5], [0, 0]]], [0, 1, 0, 1])  # alike but in a later part
@example([[[9], [2], [0]], [[9], [5], [0]]], [0, 1, 1, 0])  # alike but on a later PU
def test_jobs_of_cycles_seen_before_count_as_the_play(js, picks):
    """Jobs that repeat earlier jobs' cycles, in any order (``_steal`` copies the counts of
    the first), or differ from one in a later PU or part alone: each job's counts are
    still its own play's."""
    js = [js[i % len(js)] for i in picks]
    assert _played(js) == [(j, key, c) for j, one in enumerate(js)
                           for key, c in stolen_by_cycles(one)]


def test_jobs_past_the_kept_cycles_are_played_again():
    """More distinct jobs than ``_steal`` keeps (``SEEN``, in a table of twice as many
    slots, which they fill to half: many look-ups meet another job's cycles first), then
    repeats of kept and of unkept ones, each job's counts those of its own play."""
    rng = np.random.default_rng(5)
    rows = rng.integers(0, 16, (3 * rw.SEEN, 3, 2))
    rows[:, 0, :] = rng.integers(0, 3, (3 * rw.SEEN, 2))  # PU 0 alike in many
    distinct = [r.tolist() for r in np.unique(rows, axis=0)[:2 * rw.SEEN + 100]]
    rng.shuffle(distinct)
    js = distinct + distinct[:60] + distinct[-60:] + distinct[500:560]
    assert len(distinct) > 2 * rw.SEEN
    assert _played(js) == [(j, key, c) for j, one in enumerate(js)
                           for key, c in stolen_by_cycles(one)]
