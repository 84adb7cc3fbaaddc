"""Which points of a sweep's space to run: the full grid, random grid points, or NSGA-II.

A point is a dict of one value per dimension (the arch parameters, ``model``, ``density``).
Every strategy is driven the same way: ``run_search(spec, evaluate)`` hands ``evaluate`` a
batch of points and gets back, in the same order, each point's objective values (a tuple,
minimised or maximised as ``spec.sense``) or None for a point without them (infeasible,
failed). The grid and random search come in batches of ``BATCH`` points, so that a large
grid's points and tasks are never all held at once; NSGA-II asks one generation at a time.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator

from .spec import SweepSpec, point_key, sense

MAX_TRIALS_PER_POINT = 20  # NSGA-II trials per budgeted point before it stops asking
# Chance that a child takes a dimension afresh rather than from a parent: above Optuna's
# default (1 / dimensions) keeps a small population from settling early.
MUTATION_PROB = 0.2

Evaluate = Callable[[list[dict]], list[tuple | None]]
BATCH = 4096  # grid or random points handed to ``evaluate`` at once


def point_at(spec: SweepSpec, index: int) -> dict:
    """The grid point number ``index`` (0 <= index < grid_size), last dimension fastest."""
    dims = spec.dims()
    point = {}
    for name, values in reversed(dims.items()):
        index, i = divmod(index, len(values))
        point[name] = values[i]
    return {name: point[name] for name in dims}


def grid(spec: SweepSpec) -> Iterator[dict]:
    """Every point of the grid, in order."""
    for i in range(spec.grid_size):
        yield point_at(spec, i)


def random_points(spec: SweepSpec) -> list[dict]:
    """``search.budget`` distinct grid points drawn with ``search.seed`` (all if fewer)."""
    n = spec.grid_size
    picks = random.Random(spec.search.seed).sample(range(n), min(spec.search.budget, n))
    return [point_at(spec, i) for i in picks]


def run_search(spec: SweepSpec, evaluate: Evaluate) -> None:
    """Run the spec's search strategy, calling ``evaluate`` on batches of points; a random or
    NSGA-II budget of the whole grid (or more) runs the grid."""
    strategy = spec.search.strategy
    if strategy == "grid" or spec.points_planned == spec.grid_size:  # a budget of the whole grid
        points = grid(spec)
    elif strategy == "random":
        points = iter(random_points(spec))
    else:
        nsga2(spec, evaluate)
        return
    while batch := list(itertools.islice(points, BATCH)):
        evaluate(batch)


def nsga2(spec: SweepSpec, evaluate: Evaluate) -> None:
    """Optuna's NSGA-II sampler (seeded) over the grid's values until ``search.budget``
    distinct points have run (a trial that asks a point already run costs no simulation and
    is not counted; at most ``MAX_TRIALS_PER_POINT`` x budget trials), one generation
    (``search.population`` trials) per batch. Each dimension is searched by the index of its
    value; children take each dimension from one parent (uniform crossover) or, with
    ``MUTATION_PROB``, afresh. A point without
    objective values is told to Optuna as failed, so it breeds no children. Trials are told in
    the order asked, so a rerun with the same results (a resumed store) asks the same points."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = ["maximize" if sense(q) == "max" else "minimize" for q in spec.objectives]
    sampler = optuna.samplers.NSGAIISampler(population_size=spec.search.population,
                                            seed=spec.search.seed,
                                            mutation_prob=MUTATION_PROB)
    study = optuna.create_study(directions=directions, sampler=sampler)
    dims = spec.dims()
    seen: set[str] = set()
    budget = spec.points_planned
    trials_left = MAX_TRIALS_PER_POINT * budget
    while len(seen) < budget and trials_left > 0:
        trials = [study.ask() for _ in range(spec.search.population)]
        points = [{name: values[t.suggest_int(name, 0, len(values) - 1)]
                   for name, values in dims.items()} for t in trials]
        new = list(dict.fromkeys(k for p in points if (k := point_key(p)) not in seen))
        room = budget - len(seen)
        allowed = set(new[:room])  # the budget's last generation runs only what fits
        keep = [i for i, p in enumerate(points) if point_key(p) in seen | allowed]
        results = evaluate([points[i] for i in keep])
        told = dict(zip(keep, results, strict=True))
        for i, trial in enumerate(trials):
            values = told.get(i)
            if values is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, list(values))
        seen |= allowed
        trials_left -= len(trials)
