"""dilated-segnet (seed 002's Fig. 2 stack at R = 1, 2, 4 and an atrous pyramid at R = 6,
12, 18) on a real photograph, on the dilated-grid machine against the zero-inserted filter
(Eq. 4) and against a systolic array of the same 4 MACs, layer by layer.

Columns (cycles stall-free / at the preset's DRAM bandwidth, and the share of the latter
stalled): ``grid`` the dilated-grid machine (real taps only); ``grid-zero`` the same
machine stepping the zero-inserted filter at R = 1; ``systolic`` a 2x2 WS array lowering
the dilated taps by im2col (no zeros); ``sys-zero`` that array on the zero-inserted
filter (the prior art's way, Patent Doc 1). All on the preset's one memory. Steps per
pixel set of a 3x3 filter at each rate close the run, then the Fig. 18 coefficient
counts of the cascades, the two loop orders (tile-major, map-major), and the speed of
``simulate(run)`` on mobilenet_v2 against PyTorch eager (target: within 4x).
Run: python bench/bench_dilated_grid.py [photo]
"""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np
from common import best_time, memory_line, report  # noqa: E402  (bench/ is the script's folder)

import npusim
from npusim import stats
from npusim.arch.sections.dilated_grid import LOOP_ORDERS
from npusim.dataflows import get
from npusim.dataflows.dilated_grid import Params, count, zero_inserted
from npusim.frontends import segnet

PRESETS = ("dilated-grid-2x2", "dilated-grid-2x2-h3")


def costs(layer, arch, dataflow: str):
    """(stall-free cycles, cycles at the preset's DRAM bandwidth, stall cycles) of a layer."""
    df = get(dataflow)
    free = df.estimate(layer, None, None, arch.with_memory(dram_bytes_per_cycle="unlimited"))
    at = df.estimate(layer, None, None, arch)
    assert free.cycles == at.compute_cycles
    return free.cycles, at.cycles, at.stall_cycles


def layer_row(layer, arch) -> list:
    zi = zero_inserted(layer)
    cells = [costs(lay, arch, df) for df in ("dilated-grid", "systolic") for lay in (layer, zi)]
    return [layer.name, layer.describe(), layer.dilation[0], *cells]


COLUMNS = ("grid", "grid-zero", "systolic", "sys-zero")


def table(graph, arch, title: str = "") -> None:
    """Per layer, for each machine: stall-free cycles / cycles at the preset's bandwidth."""
    rows = [layer_row(graph.layers[n.name], arch) for n in graph.conv_nodes]
    bw = arch.memory.dram_bytes_per_cycle
    print(f"\n{title or graph.name} on {arch.name}: {arch.description}; cycles stall-free / "
          f"at {bw:g} B/cycle (share stalled)")
    print(f"{'layer':<12}{'shape':<34}{'R':>3}" + "".join(f"{h:>35}" for h in COLUMNS))

    def cell(c):
        return f"{c[0]:>14,}/{c[1]:>14,} {c[2] / c[1]:>4.1%}"

    for r in rows:
        print(f"{r[0]:<12}{r[1]:<34}{r[2]:>3}" + "".join(f"{cell(c):>35}" for c in r[3:]))
    sums = [tuple(int(v) for v in np.sum([r[3 + i] for r in rows], axis=0)) for i in range(4)]
    print(f"{'total':<49}" + "".join(f"{cell(c):>35}" for c in sums))
    for k, how in ((0, "stall-free"), (1, f"at {bw:g} B/cycle")):
        g, gz, sy, sz = (c[k] for c in sums)
        print(f"speed-up of grid {how}: x{gz / g:.2f} over grid-zero, x{sy / g:.2f} over "
              f"systolic (systolic x{g / sy:.2f} over grid), x{sz / g:.2f} over sys-zero")


def steps_per_set() -> None:
    big = Params(grid_rows=40, grid_cols=40, coef_rows=37, coef_cols=37, levels=5)
    print("\nsteps per pixel set, 3x3 filter (40x40 grid, 5 levels):")
    for rate in (1, 2, 4, 6, 12, 18):
        layer = npusim.ConvLayer(1, 1, 40, 40, 1, 3, 3, dilation=rate, padding=rate)
        zi = zero_inserted(layer)
        per = count(layer, big).steps // count(layer, big).pixel_sets
        per_zero = count(zi, big).steps // count(zi, big).pixel_sets
        print(f"  R={rate:>2}: real taps {per:>3}, zero-inserted {per_zero:>5}")


def machine_costs(graph) -> None:
    """The shifter's wiring and the overlap of pixel sets, per preset."""
    for name in PRESETS:
        arch = npusim.load_arch(name)
        p = arch.params("dilated-grid")
        print(f"\n{name}: {p.macs} MACs, {p.grid_rows}x{p.grid_cols} grid, {p.shifter} shifter "
              f"(reach R <= {p.reach}), {p.links:,} shift links")
        for n in ("ctx_r1", "ctx_r2", "ctx_r4", "aspp_r6", "aspp_r18", "aspp_1x1"):
            layer = graph.layers[n]
            c = count(layer, p)
            reads = c.ifmap_reads / (layer.N * layer.C * layer.K * layer.H * layer.W)
            print(f"  {n:<10} pixel sets {c.pixel_sets:>9,}  steps/set "
                  f"{c.steps / c.pixel_sets:4.2f}  grid writes / SRAM reads "
                  f"{c.pixels_loaded / c.ifmap_reads:5.2f}  SRAM reads per input pixel and "
                  f"output map {reads:5.2f}  load stall "
                  f"{c.cycles - c.steps - c.result_cycles:>10,}  result memory "
                  f"{c.result_cycles:>9,} cycles")


def loop_orders(graph) -> None:
    """Tile-major against map-major (Fig. 15) per preset: cycles at the preset's bandwidth,
    result-memory cycles, partial sums written, DRAM ofmap bytes (spills included)."""
    for name in PRESETS:
        print(f"\nloop orders on {name} (cycles at the preset's bandwidth):")
        for order in LOOP_ORDERS:
            arch = npusim.load_arch(name)
            p = dataclasses.replace(arch.params("dilated-grid"), loop_order=order)
            arch = dataclasses.replace(arch, sections={**arch.sections, "dilated-grid": p})
            layers = [graph.layers[n.name] for n in graph.conv_nodes]
            t = stats.total([get("dilated-grid").estimate(la, None, None, arch)
                             for la in layers])
            print(f"  {order:<11} cycles {t.cycles:>12,}  result memory "
                  f"{t.extra['result_cycles']:>10,}  partial sums written "
                  f"{t.extra['psum_writes']:>11,}  DRAM ofmap {t.dram_ofmap_bytes:>12,} B  "
                  f"energy {t.energy_pj / 1e6:>8.1f} uJ")


def speed() -> None:
    """simulate(run) of mobilenet_v2 on the h3 preset against PyTorch eager (target < 4x)."""
    import torch

    from npusim.frontends import zoo
    from npusim.torch_ref import to_torch

    graph = zoo.mobilenet_v2()
    x = np.random.default_rng(0).standard_normal(graph.input_shape).astype(np.float32)
    module, xt = to_torch(graph).eval(), torch.from_numpy(x)
    t_run = best_time(lambda: npusim.simulate(graph, x, PRESETS[1]))
    with torch.inference_mode():
        t_torch = best_time(lambda: module(xt))
    print()
    report(f"mobilenet_v2 simulate(run) on {PRESETS[1]}", t_run, t_torch, "torch eager", "< 4x")


def cascades(c1: int = 32, c2: int = 32) -> None:
    print(f"\nFig. 18 coefficients, cascade of two 2x2 at R=4 from C1={c1} to C2={c2} maps:")
    for v in ("single", *segnet.FIG18):
        if v == "dw-dw" and c1 != c2:
            continue
        g = segnet.cascade_graph(c1, c2, 4, v)
        print(f"  {v:<12} built {segnet.cascade_coefficients(g, 'cascade'):>6}  "
              f"formula {segnet.fig18_count(v, c1, c2):>6}")


def main() -> None:
    photo = sys.argv[1] if len(sys.argv) > 1 else "astronaut"
    # the grid and the systolic array of each table run on one arch: one memory
    print(memory_line(*(npusim.load_arch(name) for name in PRESETS)))
    graph, x = segnet.build(), segnet.input_for(photo)
    start = time.perf_counter()
    run = npusim.simulate(graph, x, PRESETS[1])
    mid = time.perf_counter()
    est = npusim.simulate(graph, x, PRESETS[1], mode="estimate")
    print(f"dilated-segnet on '{photo}' {x.shape}: simulate(run) {mid - start:.2f} s, "
          f"estimate {time.perf_counter() - mid:.2f} s, same stats: {run.layers == est.layers}; "
          f"classes present: {np.unique(run.output.argmax(1)).tolist()}")
    for name in PRESETS:
        table(graph, npusim.load_arch(name))
    casc = segnet.build(cascade="full-wide")
    table(casc, npusim.load_arch(PRESETS[1]), "dilated-segnet, R = 2 and 4 as 2x2 cascades")
    machine_costs(graph)
    loop_orders(graph)
    steps_per_set()
    cascades()
    speed()


if __name__ == "__main__":
    main()
