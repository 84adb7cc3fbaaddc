"""The hybrid NPU (docs/hybrid.md) against each of its machines alone, on five zoo networks.

``hybrid-3x1024``: sparse-pairs (32 x 32 processors), dilated-grid (32 x 32 MACs) and
group-tile (16 tiles x 64 MACs) behind one memory (64 KiB buffers, 17.064 B/cycle DRAM); its
compiler places each conv on the member with the fewest cycles (then, in a second run, the
least energy), moving the input through DRAM when the machine changes. Each machine alone runs
the same layers on the same memory: its figures are those of the hybrid's own per-layer
options (every member is costed on every layer, ``Placement.options``; tests/test_hybrid.py
checks them against each machine run by itself), plus the same vector-unit ops. Networks:
ResNet-18, MobileNetV2, dilated-segnet and edgetpu_v2_like dense, AlexNet pruned to Han et
al.'s deep-compression densities; the model's own photo as input; mode estimate, float32.

Printed per network and objective: total cycles and energy of the hybrid and of each machine
alone, the hybrid's speed-up and energy ratio against the best single machine (by that
objective), how many convs each member ran, and the moves (count, cycles, energy).

Run: python bench/bench_hybrid.py   (about a minute on 2 cores)
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import npusim
from npusim.frontends import input_tensor, load_model
from npusim.frontends.prune import prune

sys.path.insert(0, str(Path(__file__).parent))
from common import memory_line  # noqa: E402

NETWORKS = [("resnet18", None), ("mobilenet_v2", None), ("dilated-segnet", None),
            ("edgetpu_v2_like", None), ("alexnet", "deep-compression")]
PRESET = npusim.load_arch("hybrid-3x1024")
OBJECTIVES = ("cycles", "energy")


def with_objective(objective: str):
    """The preset with its compiler minimising ``objective``."""
    params = dataclasses.replace(PRESET.params("hybrid"), objective=objective)
    return dataclasses.replace(PRESET, sections={**PRESET.sections, "hybrid": params})


def alone(result) -> dict[str, tuple[int, float]]:
    """(cycles, pJ) of each member running every conv itself, plus the vector-unit ops."""
    vector = [s for s in result.layers if s.dataflow == "vector"]
    base = (sum(s.cycles for s in vector), sum(s.energy_pj for s in vector))
    figures = {o.machine: list(base) for o in result.placements[0].options}
    for placed in result.placements:
        for o in placed.options:
            figures[o.machine][0] += o.stats.cycles
            figures[o.machine][1] += o.stats.energy_pj
    return {m: (c, e) for m, (c, e) in figures.items()}


def line(result, objective: str) -> str:
    """One network under one objective, as a markdown table row."""
    tot = result.total
    singles = alone(result)
    key = 0 if objective == "cycles" else 1
    best = min(singles, key=lambda m: singles[m][key])
    runs = {m: sum(p.machine.name == m for p in result.placements) for m in singles}
    moves = [s for s in result.layers if s.dataflow == "transfer"]
    cells = [f"{tot.cycles:,}", f"{tot.energy_pj / 1e9:.2f}"]
    cells += [f"{singles[m][0]:,} / {singles[m][1] / 1e9:.2f}" for m in singles]
    cells += [best, f"{singles[best][0] / tot.cycles:.3f}x",
              f"{tot.energy_pj / singles[best][1]:.3f}",
              " ".join(f"{m.split('-')[0]} {n}" for m, n in runs.items()),
              f"{len(moves)}: {sum(s.cycles for s in moves):,} cyc, "
              f"{sum(s.energy_pj for s in moves) / 1e9:.3f} mJ"]
    return " | ".join(cells)


def main() -> None:
    print(memory_line(PRESET))
    members = PRESET.params("hybrid").machines
    print("| network | objective | hybrid cycles | hybrid mJ | "
          + " | ".join(f"{m} alone (cycles / mJ)" for m in members)
          + " | best single | speed-up vs best | energy vs best | convs run on | moves |")
    print("|" + " --- |" * (9 + len(members)))
    start = time.perf_counter()
    for name, density in NETWORKS:
        graph = load_model(name, batch=1, input_shape=None, seed=0)
        if density is not None:
            graph = prune(graph, density)
        x, _ = input_tensor(name, graph, image=None, seed=0)
        label = name if density is None else f"{name} ({density})"
        for objective in OBJECTIVES:
            result = npusim.simulate(graph, x, with_objective(objective), mode="estimate")
            print(f"| {label} | {objective} | {line(result, objective)} |")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
