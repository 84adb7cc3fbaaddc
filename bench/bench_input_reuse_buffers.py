"""The input-reuse machine's first buffers on a bus-bound layer: 3->64 channels, 3x3 'same'
on 112x112, int8, input and weights at 0.3 density (seeded random masks), on
``input-reuse-1024`` with first buffers of 1, 4, 16 (the preset) and 1024 KiB per
operation unit: cycles stall-free and at the preset's bandwidth, the cycles the units
stalled on full first buffers (summed over the 16 units), the bus waits.

Run: ``python bench/bench_input_reuse_buffers.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from npusim.arch import load_arch
from npusim.dataflows.input_reuse import layer_stats
from npusim.ir import ConvLayer

LAYER = ConvLayer(1, 3, 112, 112, 64, 3, 3, padding=1, dtype="int8", name="3->64 112x112")


def masks(layer: ConvLayer, density: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.random(layer.input_shape) < density, rng.random(layer.weight_shape) < density)


def with_params(arch, **params):
    p = dataclasses.replace(arch.params("input-reuse"), **params)
    return dataclasses.replace(arch, sections={**arch.sections, "input-reuse": p})


def main() -> None:
    x, w = masks(LAYER, 0.3)
    base = load_arch("input-reuse-1024")
    print(f"{LAYER.name}, density 0.3, {base.name}")
    print("first_buffer_kb | cycles stall-free | at preset bandwidth | first-buffer stalls "
          "| bus waits | transfers | busiest unit's compute")
    for kib in (1, 4, 16, 1024):
        arch = with_params(base, first_buffer_kb=kib)
        free = layer_stats(LAYER, x, w, arch.with_memory(dram_bytes_per_cycle="unlimited"),
                           "input-reuse")
        real = layer_stats(LAYER, x, w, arch, "input-reuse")
        e = free.extra
        print(f"{kib} | {free.cycles:,} | {real.cycles:,} | "
              f"{e['first_buffer_stall_cycles']:,} | {e['contention_cycles']:,} | "
              f"{e['transfers']:,} | {e['opunit_busy_max_cycles']:,}")


if __name__ == "__main__":
    main()
