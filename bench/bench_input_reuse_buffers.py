"""The input-reuse machine's first and second buffers.

1. A bus-bound layer: 3->64 channels, 3x3 'same' on 112x112, int8, input and weights at 0.3
   density (seeded random masks), on ``input-reuse-1024`` with first buffers of 1, 4, 16
   (the preset) and 1024 KiB per operation unit: cycles stall-free and at the preset's
   bandwidth, the cycles the units stalled on full first buffers (summed over the 16
   units), the bus waits, the loop order.
2. The same layer with second buffers of 8, 32 (the preset) and 1024 KiB per output unit:
   the loop order taken, the OFM's DRAM bytes (outputs written plus partial sums spilled
   and read back) and the cycles at the preset's bandwidth.
3. ResNet-18 at 0.3 on its zoo photograph (``simulate(mode="estimate")``, conv and fully
   connected layers) with second buffers of 8, 32 and 1024 KiB: cycles at the preset's
   bandwidth, OFM DRAM bytes, kernel-major layers, first-buffer stalls.

Run: ``python bench/bench_input_reuse_buffers.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import npusim
from npusim.arch import load_arch
from npusim.dataflows.input_reuse import layer_stats
from npusim.frontends import zoo
from npusim.frontends.prune import prune
from npusim.ir import ConvLayer

LAYER = ConvLayer(1, 3, 112, 112, 64, 3, 3, padding=1, dtype="int8", name="3->64 112x112")


def masks(layer: ConvLayer, density: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.random(layer.input_shape) < density, rng.random(layer.weight_shape) < density)


def with_params(arch, **params):
    p = dataclasses.replace(arch.params("input-reuse"), **params)
    return dataclasses.replace(arch, sections={**arch.sections, "input-reuse": p})


def order(s) -> str:
    return "kernel-major" if s.extra["kernel_major_layers"] else "region-major"


def first_buffers(base, x, w) -> None:
    print("first_buffer_kb | cycles stall-free | at preset bandwidth | first-buffer stalls "
          "| bus waits | transfers | busiest unit's compute | loop order")
    for kib in (1, 4, 16, 1024):
        arch = with_params(base, first_buffer_kb=kib)
        free = layer_stats(LAYER, x, w, arch.with_memory(dram_bytes_per_cycle="unlimited"),
                           "input-reuse")
        real = layer_stats(LAYER, x, w, arch, "input-reuse")
        e = free.extra
        print(f"{kib} | {free.cycles:,} | {real.cycles:,} | "
              f"{e['first_buffer_stall_cycles']:,} | {e['contention_cycles']:,} | "
              f"{e['transfers']:,} | {e['opunit_busy_max_cycles']:,} | {order(real)}")


def second_buffers(base, x, w) -> None:
    print("\nsecond_buffer_kb | loop order | OFM DRAM bytes | at preset bandwidth")
    for kib in (8, 32, 1024):
        s = layer_stats(LAYER, x, w, with_params(base, second_buffer_kb=kib), "input-reuse")
        print(f"{kib} | {order(s)} | {s.dram_ofmap_bytes:,} | {s.cycles:,}")


def resnet18(base) -> None:
    graph, image = prune(zoo.build("resnet18"), 0.3), zoo.input_for("resnet18")
    print("\nResNet-18 at 0.3: second_buffer_kb | cycles at preset bandwidth | OFM DRAM bytes "
          "| kernel-major layers | first-buffer stalls")
    for kib in (8, 32, 1024):
        layers = [s for s in npusim.simulate(graph, image, with_params(base, second_buffer_kb=kib),
                                             mode="estimate").layers
                  if s.dataflow != "vector"]
        print(f"{kib} | {sum(s.cycles for s in layers):,} | "
              f"{sum(s.dram_ofmap_bytes for s in layers):,} | "
              f"{sum(s.extra['kernel_major_layers'] for s in layers)} of {len(layers)} | "
              f"{sum(s.extra['first_buffer_stall_cycles'] for s in layers):,}")


def main() -> None:
    x, w = masks(LAYER, 0.3)
    base = load_arch("input-reuse-1024")
    print(f"{LAYER.name}, density 0.3, {base.name}")
    first_buffers(base, x, w)
    second_buffers(base, x, w)
    resnet18(base)


if __name__ == "__main__":
    main()
