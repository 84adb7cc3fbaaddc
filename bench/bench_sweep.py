"""Two 50-point sweeps of ResNet-18 (density 0.3, mode estimate, on input-reuse-1024) on the
default local pool (one worker process per core, as `npusim sweep` runs): wall time per point
over the time of one simulate() of the same network on the base arch (which itself uses every
core), both timed in this run on this machine. Each sweep runs in a fresh Python process that
has imported npusim and nothing else (no numba, no model): it pays loading, pruning and
feeding the network, numba's kernels and the first point's masks, which the driver builds
before it forks the pool's workers (npusim.dse.runner.PoolRunner); the process's start and
npusim's import are printed beside it, not counted. One sweep varies the memories (5 SRAM
sizes x 10 DRAM bandwidths), the other the machine's own units (5 operation-unit x 10
processing-unit counts).

A sweep point reuses the model, its pruning, input and (in mode estimate) every conv's masks from
the first point (npusim.dse.reuse), with what input-reuse counted from them that other points
share (the region counts per region geometry, the jobs per processing-unit count, the loop order
per buffer sizes, the counts and steps per machine): a memory point prices kept steps on its
memory; a units point counts its schedule, loop order and steps again (they follow its units).
Target (issue 13): <= 0.3.

Then, for one preset of every machine and the hybrid (``--machines``), the same memories grid
point by point in this process, after its first point: each later point's time
(reuse.estimate: the kept masks priced on the point's arch, with what each machine kept in
each conv's memo; on the hybrid, every member's costs and the choice among them) over one
simulate of the same network on the preset, median over the 49 later points, the simulate's
best of 3 (issue 15: no fixed costs a sweep pays again); and the same for a units grid of
the preset's own (``UNITS``: two of its machine's parameters, 3 x 3 points, 8 later).
Run: python bench/bench_sweep.py [--rounds N] [--machines PRESET ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import npusim
from npusim.dse.runner import prepared

sys.path.insert(0, str(Path(__file__).parent))
from common import best_time, report  # noqa: E402

SPEC = """
base = "input-reuse-1024"
models = ["resnet18"]
densities = [0.3]
mode = "estimate"
[parameters]
"""
SRAM_KB = (64, 128, 256, 512, 1024)  # the memories grid, here and in ``memories_grid``
DRAM_BYTES_PER_CYCLE = tuple(range(8, 81, 8))
SWEEPS = {
    "memories": f'"memory.ifmap_sram_kb" = {list(SRAM_KB)}\n'
                f'"memory.dram_bytes_per_cycle" = {list(DRAM_BYTES_PER_CYCLE)}\n',
    "units": '"input-reuse.operation_units" = [4, 8, 16, 32, 64]\n'
             '"input-reuse.processing_units" = {start = 1, stop = 10, step = 1}\n',
}


# run in a fresh process: times sweep() alone, prints "points failed sweep_s start_s"
CHILD = """
import sys, tempfile, time
from pathlib import Path
start = time.perf_counter()
from npusim.dse import spec_from_toml_text, sweep
imported = time.perf_counter()
spec = spec_from_toml_text(sys.argv[1], "bench_sweep")
with tempfile.TemporaryDirectory() as tmp:
    begin = time.perf_counter()
    outcome = sweep(spec, Path(tmp) / "bench.db")
    end = time.perf_counter()
print(outcome.ran, outcome.failed, end - begin, imported - start)
"""


def timed_sweep(text: str) -> tuple[int, int, float, float, float]:
    """(points run, failed, sweep() seconds, npusim import seconds, whole process seconds)
    of ``text`` swept in a fresh process."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, text], capture_output=True, text=True,
                         check=True).stdout.split()
    whole = time.perf_counter() - start
    return int(out[0]), int(out[1]), float(out[2]), float(out[3]), whole


MACHINE_PRESETS = ("systolic-32x32-ws", "dilated-grid-2x2-h3", "group-tile-64mac",
                   "input-reuse-1024", "sparse-pairs-32x32", "hybrid-3x1024")
# each preset's units grid: two of its machine's parameters (the hybrid: of two members), 3 x 3
UNITS = {
    "systolic-32x32-ws": {"systolic": {"rows": (16, 32, 64), "cols": (16, 32, 64)}},
    "dilated-grid-2x2-h3": {"dilated-grid": {"grid_rows": (6, 8, 12), "grid_cols": (6, 8, 12)}},
    "group-tile-64mac": {"group-tile": {"macs": (16, 32, 64), "tiles": (1, 2, 4)}},
    "input-reuse-1024": {"input-reuse": {"operation_units": (4, 8, 16),
                                         "processing_units": (2, 4, 8)}},
    "sparse-pairs-32x32": {"sparse-pairs": {"processor_groups": (8, 16, 32),
                                            "processors_per_group": (8, 16, 32)}},
    "hybrid-3x1024": {"sparse-pairs": {"processor_groups": (8, 16, 32)},
                      "group-tile": {"macs": (16, 32, 64)}},
}


def memories_grid(base) -> list:
    """``base`` at every ifmap SRAM size and DRAM bandwidth of the memories grid."""
    import dataclasses

    return [dataclasses.replace(base, memory=dataclasses.replace(
        base.memory, ifmap_sram_kb=kb, dram_bytes_per_cycle=float(bw)))
        for kb in SRAM_KB for bw in DRAM_BYTES_PER_CYCLE]


def units_grid(base) -> list:
    """``base`` at every combination of its preset's ``UNITS`` values."""
    import dataclasses
    import itertools

    fields = [(section, name, values) for section, params in UNITS[base.name].items()
              for name, values in params.items()]
    archs = []
    for combo in itertools.product(*(values for _, _, values in fields)):
        sections = dict(base.sections)
        for (section, name, _), value in zip(fields, combo, strict=True):
            sections[section] = dataclasses.replace(base.params(section)
                                                    if section not in sections
                                                    else sections[section], **{name: value})
        archs.append(dataclasses.replace(base, sections=sections))
    return archs


def later_points(preset: str, graph, x, grid) -> tuple[float, float]:
    """(median seconds of a later point of ``grid(base)`` on ``preset``'s arch, in this
    process, the masks and the machines' memos kept from the grid's first point; best seconds
    of one simulate of the same network on ``preset``)."""
    import statistics

    from npusim.arch import load_arch
    from npusim.dse import reuse

    base = load_arch(preset)
    reuse._masks.clear()
    times = []
    for arch in grid(base):
        start = time.perf_counter()
        reuse.estimate(("resnet18", 0.3, 1, 0), graph, x, arch, "float32")
        times.append(time.perf_counter() - start)
    one = best_time(lambda: npusim.simulate(graph, x, base, mode="estimate"))
    return statistics.median(times[1:]), one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1, help="sweeps of each kind, each paired "
                    "with a fresh one-simulate time (default 1)")
    ap.add_argument("--machines", nargs="*", default=MACHINE_PRESETS, metavar="PRESET",
                    help="presets whose later memories and units points are timed in this "
                         "process (default: one of every machine and the hybrid; none: skip)")
    args = ap.parse_args()
    _, graph, x = prepared("resnet18", 0.3, 1, 0)
    for preset in args.machines:
        for name, grid in (("memories", memories_grid), ("units", units_grid)):
            point, one = later_points(preset, graph, x, grid)
            print(f"resnet18 {name} grid on {preset}, a later point in one process: npusim "
                  f"{point * 1e3:.1f} ms, one simulate(estimate) {one * 1e3:.1f} ms, ratio "
                  f"{point / one:.2f}x (target: <= 0.3)")
    for _ in range(args.rounds):
        for name, params in SWEEPS.items():
            t_one = best_time(lambda: npusim.simulate(graph, x, "input-reuse-1024",
                                                      mode="estimate"))
            ran, failed, t_sweep, t_import, t_whole = timed_sweep(SPEC + params)
            print(f"{name}: {ran} points, {failed} infeasible or failed, sweep {t_sweep:.1f} s "
                  f"(process {t_whole:.1f} s, of which npusim's import {t_import:.2f} s)")
            report(f"resnet18 sweep over {name}, time per point", t_sweep / ran, t_one,
                   "one simulate(estimate)", "<= 0.3")


if __name__ == "__main__":
    main()
