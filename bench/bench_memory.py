"""Each machine preset stall-free and at its preset's DRAM bandwidth, and the systolic
baselines beside it: ResNet-18 at 0.3 density, AlexNet and VGG-16 at deep-compression.

Cycles are the conv and fully connected layers' (the machines' own work), from
``simulate(mode="estimate")``; speed-ups are over ``systolic-32x32-ws`` both ways. The
dilated-grid and group-tile presets have 4 and 64 MACs, not 1024: theirs are not
equal-multiplier ratios. Run: ``python bench/bench_memory.py [resnet18 alexnet vgg16]``.
"""

from __future__ import annotations

import dataclasses
import sys

from common import memory_line

import npusim
from npusim.arch import load_arch
from npusim.frontends import zoo
from npusim.frontends.prune import prune

MACHINES = ("systolic-32x32-ws", "input-reuse-1024", "sparse-pairs-32x32",
            "dilated-grid-2x2-h3", "group-tile-64mac")
NETWORKS = (("resnet18", 0.3), ("alexnet", "deep-compression"), ("vgg16", "deep-compression"))


def baselines() -> dict:
    """The systolic alternatives to the WS preset: OS, IS, and WS tiled 256 vectors a fold."""
    ws = load_arch("systolic-32x32-ws")
    tiled = dataclasses.replace(ws.params("systolic"), stream_tile=256)
    return {"systolic-32x32-os": load_arch("systolic-32x32-os"),
            "systolic-32x32-is": load_arch("systolic-32x32-is"),
            "systolic ws stream_tile=256": dataclasses.replace(
                ws, sections={**ws.sections, "systolic": tiled})}


def machine_cycles(graph, x, arch) -> tuple[int, int, int]:
    """(stall-free cycles, cycles at the arch's bandwidth, stall cycles) of the machine layers."""
    out = []
    for a in (arch.with_memory(dram_bytes_per_cycle="unlimited"), arch):
        layers = [s for s in npusim.simulate(graph, x, a, mode="estimate").layers
                  if s.dataflow != "vector"]
        out.append((sum(s.cycles for s in layers), sum(s.compute_cycles for s in layers)))
    (free, _), (timed, compute) = out
    return free, timed, timed - compute


def table(name: str, density) -> None:
    graph, x = prune(zoo.build(name), density), zoo.input_for(name)
    archs = {p: load_arch(p) for p in MACHINES} | baselines()
    rows = {label: machine_cycles(graph, x, a) for label, a in archs.items()}
    base = rows[MACHINES[0]]
    print(f"\n{name} ({density}); {memory_line(*archs.values())}")
    print(f"{'machine':<30}{'stall-free':>15}{'at bandwidth':>16}{'stalled':>9}"
          f"{'speed-up free':>15}{'at bandwidth':>14}")
    for label, (free, timed, stall) in rows.items():
        print(f"{label:<30}{free:>15,}{timed:>16,}{100 * stall / timed:>8.1f}%"
              f"{base[0] / free:>14.2f}x{base[1] / timed:>13.2f}x")


def main() -> None:
    wanted = sys.argv[1:] or [n for n, _ in NETWORKS]
    for name, density in NETWORKS:
        if name in wanted:
            table(name, density)


if __name__ == "__main__":
    main()
