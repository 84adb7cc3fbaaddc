"""Two 50-point sweeps of ResNet-18 (density 0.3, mode estimate, on input-reuse-1024) on the
default local pool (one worker process per core, as `npusim sweep` runs): wall time per point
over the time of one simulate() of the same network on the base arch (which itself uses every
core), both timed in this run on this machine; each worker's first point loads, prunes and
records the network, and is counted. One sweep varies the memories (5 SRAM sizes x 10 DRAM
bandwidths), the other the machine's own units (5 operation-unit x 10 processing-unit counts).

A sweep point reuses the model, its pruning, input and (in mode estimate) every conv's masks from
the first point (npusim.dse.reuse), with what input-reuse counted from them that other points
share (the region counts per region geometry, the jobs per processing-unit count, the loop order
per buffer sizes, the counts and steps per machine): a memory point prices kept steps on its
memory; a units point counts its schedule, loop order and steps again (they follow its units).
Target (issue 13): <= 0.3.
Run: python bench/bench_sweep.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import npusim
from npusim.dse import spec_from_toml_text, sweep
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
SWEEPS = {
    "memories": '"memory.ifmap_sram_kb" = [64, 128, 256, 512, 1024]\n'
                '"memory.dram_bytes_per_cycle" = {start = 8, stop = 80, step = 8}\n',
    "units": '"input-reuse.operation_units" = [4, 8, 16, 32, 64]\n'
             '"input-reuse.processing_units" = {start = 1, stop = 10, step = 1}\n',
}


def main() -> None:
    _, graph, x = prepared("resnet18", 0.3, 1, 0)
    t_one = best_time(lambda: npusim.simulate(graph, x, "input-reuse-1024", mode="estimate"))
    for name, params in SWEEPS.items():
        spec = spec_from_toml_text(SPEC + params, f"bench_sweep {name}")
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            outcome = sweep(spec, Path(tmp) / "bench.db")
            t_sweep = time.perf_counter() - start
        print(f"{name}: {outcome.ran} points, {outcome.failed} infeasible or failed, "
              f"{t_sweep:.1f} s")
        report(f"resnet18 sweep over {name}, time per point", t_sweep / outcome.ran, t_one,
               "one simulate(estimate)", "<= 0.3")


if __name__ == "__main__":
    main()
