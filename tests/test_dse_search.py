"""NSGA-II against the full grid's true front, reproducibility, and Pareto fronts by brute force."""

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from dse_helpers import npusim, write_spec

from npusim.arch.spec import PRESET_DIR
from npusim.dse import Store, load_spec, non_dominated, pareto, sweep
from npusim.dse.pareto import axis_label, plot
from npusim.dse.search import grid, run_search
from npusim.dse.spec import point_key, sense

# 16 x 16 x 2 = 512 points of one 3x3 conv (192 -> 384 channels, 7x7): cycles against
# utilisation, a front of 13 distinct value pairs. The base has DRAM at 1 MiB a cycle, so no
# point waits for memory: the front is the arrays' own.
SPACE = """
base = "fast-dram.toml"
models = ["test.csv"]
objectives = ["cycles", "utilisation"]
[parameters]
"systolic.rows" = {start = 4, stop = 64, step = 4}
"systolic.cols" = {start = 4, stop = 64, step = 4}
"systolic.stationary" = ["ws", "os"]
"""


@pytest.fixture(autouse=True)
def fast_dram(tmp_path):
    """``fast-dram.toml`` in the test's folder: systolic-32x32-ws with 2**20 DRAM bytes/cycle."""
    text = (PRESET_DIR / "systolic-32x32-ws.toml").read_text()
    text = re.sub(r"(?m)^dram_bytes_per_cycle = .*$", "dram_bytes_per_cycle = 1048576.0", text)
    (tmp_path / "fast-dram.toml").write_text(text)


def brute_front(values, senses) -> set[int]:
    """Indices of rows no other row beats on every objective: the definition, pair by pair."""
    sign = [1 if s == "min" else -1 for s in senses]
    out = set()
    for i, a in enumerate(values):
        beaten = False
        for j, b in enumerate(values):
            no_worse = all(sg * y <= sg * x for x, y, sg in zip(a, b, sign, strict=True))
            better = any(sg * y < sg * x for x, y, sg in zip(a, b, sign, strict=True))
            beaten |= i != j and no_worse and better
        if not beaten:
            out.add(i)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_non_dominated_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 6, size=(40, 3)).astype(float)  # many ties
    senses = [["min", "max", "min"], ["max", "max", "min"]][seed % 2]
    assert set(non_dominated(values, senses)) == brute_front(values.tolist(), senses)


class Evaluations:
    """A cached evaluator: each point's objective tuple, counted by distinct point run."""

    def __init__(self, spec):
        from npusim.dse.runner import _task, finish, run_task

        self.spec, self.cache = spec, {}
        self.one = lambda p: finish(spec, run_task(_task(spec, p)))

    def __call__(self, points):
        out = []
        for p in points:
            key = tuple(p.values())
            if key not in self.cache:
                r = self.one(p)
                self.cache[key] = (tuple(r["objectives"][q] for q in self.spec.objectives)
                                   if r["status"] == "ok" else None)
            out.append(self.cache[key])
        return out


def test_nsga2_finds_nine_tenths_of_the_grid_front_in_a_quarter_of_its_points(tmp_path):
    full = load_spec(write_spec(tmp_path, SPACE))
    every = Evaluations(full)
    values = [v for v in every(list(grid(full))) if v is not None]
    senses = [sense(q) for q in full.objectives]
    true_front = {values[i] for i in brute_front(values, senses)}
    assert len(true_front) >= 10
    budget = full.grid_size // 4
    text = SPACE + f'[search]\nstrategy = "nsga2"\nbudget = {budget}\nseed = 0\n'
    spec = load_spec(write_spec(tmp_path, text, "nsga.toml"))
    search = Evaluations(spec)
    run_search(spec, search)
    assert len(search.cache) == budget  # distinct points run
    found = {v for v in search.cache.values() if v is not None}
    assert len(true_front & found) >= 0.9 * len(true_front)


def test_nsga2_is_reproducible_and_resumes_to_the_same_points(tmp_path):
    text = SPACE + '[search]\nstrategy = "nsga2"\nbudget = 24\npopulation = 6\nseed = 5\n'
    spec_file = write_spec(tmp_path, text)
    sweep(spec_file, tmp_path / "a.db", workers=1)
    sweep(spec_file, tmp_path / "b.db", workers=1)
    keys = [r["key"] for r in Store.read(tmp_path / "a.db").rows()]
    assert len(keys) == 24 and keys == [r["key"] for r in Store.read(tmp_path / "b.db").rows()]
    again = sweep(spec_file, tmp_path / "a.db", workers=1)  # all stored: the same asks, no run
    assert (again.ran, again.skipped) == (0, 24)


def test_pareto_of_a_store_and_its_plot(tmp_path):
    spec = load_spec(write_spec(tmp_path, SPACE.replace("step = 4", "step = 20")))
    sweep(spec, tmp_path / "s.db", workers=1)
    front = pareto(tmp_path / "s.db", "cycles", "utilisation")
    values = front.values.tolist()
    assert set(front.front) == brute_front(values, ["min", "max"])
    xs = [values[i][0] for i in front.front]
    assert xs == sorted(xs)
    r = npusim("pareto", tmp_path / "s.db", "--x", "cycles", "--y", "utilisation")
    assert r.returncode == 0, r.stderr
    png = tmp_path / "s-pareto-cycles-utilisation.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"{len(front.front)} non-dominated of {len(values)} ok points" in r.stdout
    header = next(line for line in r.stdout.splitlines() if "density" in line)
    assert header.split()[-3:] == ["cycles", "utilisation", "(0..1)"]  # the units, once
    r = npusim("pareto", tmp_path / "s.db", "--x", "speed", "--y", "cycles")
    assert r.returncode == 2 and "'speed': not a quantity" in r.stderr


def test_a_store_of_two_networks_has_a_front_for_each(tmp_path):
    header = ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
              "Num Filter, Strides,\n")
    (tmp_path / "small.csv").write_text(header + "c1, 10, 10, 3, 3, 4, 8, 1,\n")
    (tmp_path / "large.csv").write_text(header + "c1, 30, 30, 3, 3, 32, 64, 1,\n"
                                        "c2, 28, 28, 3, 3, 64, 64, 1,\n")
    text = (SPACE.replace('models = ["test.csv"]', 'models = ["small.csv", "large.csv"]')
            .replace("step = 4", "step = 20").replace('"utilisation"', '"area"'))
    sweep(load_spec(write_spec(tmp_path, text)), tmp_path / "s.db", workers=1)
    front = pareto(tmp_path / "s.db", "cycles", "area")
    assert [(Path(m).name, d) for m, d in front.workloads] == [("small.csv", "1.0"),
                                                               ("large.csv", "1.0")]
    expected = set()
    for model, _ in front.workloads:
        mine = [i for i, p in enumerate(front.points) if p["model"] == model]
        expected |= {mine[k] for k in brute_front(front.values[mine].tolist(), ["min", "min"])}
    assert set(front.front) == expected
    globally = {i for i in brute_front(front.values.tolist(), ["min", "min"])}
    assert globally != expected  # one front over both would drop the large network's designs
    assert {Path(front.points[i]["model"]).name for i in front.front} == {"small.csv",
                                                                          "large.csv"}
    r = npusim("pareto", tmp_path / "s.db", "--x", "cycles", "--y", "area")
    assert r.returncode == 0, r.stderr
    assert (f"{len(front.front)} non-dominated of {len(front.points)} ok points; a front per "
            "model and density, 2 of them") in r.stdout


def test_front_of_two_objectives_by_hand():
    # (cycles, energy): (1, 9) (2, 5) (3, 5) (4, 1) (5, 7) -> (3, 5) and (5, 7) are beaten
    values = [(1, 9), (2, 5), (3, 5), (4, 1), (5, 7)]
    assert non_dominated(values, ["min", "min"]) == [0, 1, 3]
    assert list(itertools.chain(non_dominated([(1, 1), (1, 1)], ["min", "min"]))) == [0, 1]


def test_nsga2_budget_above_the_grid_runs_the_grid_once(tmp_path):
    text = SPACE.replace("step = 4", "step = 30") + (
        '[search]\nstrategy = "nsga2"\nbudget = 100\npopulation = 4\n')
    spec = load_spec(write_spec(tmp_path, text))
    assert spec.grid_size == 18 and spec.points_planned == 18
    out = sweep(spec, tmp_path / "s.db", workers=1)
    assert out.ran == 18
    assert sorted(r["key"] for r in Store.read(tmp_path / "s.db").rows()) == sorted(
        point_key(p) for p in grid(spec))


def test_pareto_plot_axes_name_their_units(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    spec = load_spec(write_spec(tmp_path, SPACE.replace("step = 4", "step = 20")))
    sweep(spec, tmp_path / "s.db", workers=1)
    closed = []
    monkeypatch.setattr(plt, "close", closed.append)
    plot(pareto(tmp_path / "s.db", "area", "energy"), tmp_path / "f.png")
    ax = closed[0].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("area (mm^2; minimise)", "energy (pJ; minimise)")
    assert axis_label("utilisation") == "utilisation (0..1; maximise)"
    assert axis_label("dram_ifmap_bytes") == "dram_ifmap_bytes (bytes; minimise)"


@pytest.mark.parametrize("strategy", ["grid", "random"])
def test_grid_and_random_points_come_in_batches(strategy, tmp_path, monkeypatch):
    """A large grid is handed to the runner a batch at a time (its points and tasks were all
    built at once: a 1,000,000-point grid held them all in the driver); every point is
    asked once, in the strategy's order, and the sweep stores each."""
    from dse_helpers import SMALL

    import npusim.dse.search as search

    monkeypatch.setattr(search, "BATCH", 4)
    text = SMALL + ('[search]\nstrategy = "random"\nbudget = 7\n' if strategy == "random"
                    else "")
    spec = load_spec(write_spec(tmp_path, text))
    asked: list[list[dict]] = []
    run_search(spec, lambda points: asked.append(points) or [None] * len(points))
    want = list(grid(spec)) if strategy == "grid" else search.random_points(spec)
    assert [len(b) for b in asked] == ([4, 4, 1] if strategy == "grid" else [4, 3])
    assert [p for b in asked for p in b] == want
    out = sweep(spec, tmp_path / "s.db", workers=1)
    assert out.ran == len(want) == len(Store.read(tmp_path / "s.db").rows())
