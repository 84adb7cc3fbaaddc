"""Which points of a sweep's space to run: the full grid, random grid points, or NSGA-II.

A point is a dict of one value per dimension (the arch parameters, ``model``, ``density``).
Every strategy is driven the same way: ``run_search(spec, evaluate)`` hands ``evaluate`` a
batch of points and gets back, in the same order, each point's objective values (a tuple,
minimised or maximised as ``spec.sense``) or None for a point without them (infeasible,
failed). The grid and random search are one batch; NSGA-II asks one generation at a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from .spec import SweepSpec, sense

Evaluate = Callable[[list[dict]], list[tuple | None]]


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
    """Run the spec's search strategy, calling ``evaluate`` on batches of points."""
    strategy = spec.search.strategy
    if strategy == "grid":
        evaluate(list(grid(spec)))
    elif strategy == "random":
        evaluate(random_points(spec))
    else:
        nsga2(spec, evaluate)


def nsga2(spec: SweepSpec, evaluate: Evaluate) -> None:
    """Optuna's NSGA-II sampler (seeded) over the grid's values: ``search.budget`` trials, one
    generation (``search.population`` trials) per batch. A point without objective values is
    told to Optuna as failed, so it breeds no children. Trials are told in the order asked, so
    a rerun with the same results (a resumed store) asks the same points."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = ["maximize" if sense(q) == "max" else "minimize" for q in spec.objectives]
    sampler = optuna.samplers.NSGAIISampler(population_size=spec.search.population,
                                            seed=spec.search.seed)
    study = optuna.create_study(directions=directions, sampler=sampler)
    dims = spec.dims()
    left = spec.search.budget
    while left > 0:
        trials = [study.ask() for _ in range(min(left, spec.search.population))]
        points = [{name: t.suggest_categorical(name, list(values))
                   for name, values in dims.items()} for t in trials]
        for trial, values in zip(trials, evaluate(points), strict=True):
            if values is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, list(values))
        left -= len(trials)
