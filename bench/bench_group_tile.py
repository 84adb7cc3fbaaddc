"""The group-tile machine (seed 003) on its own examples and on the EdgeTPU-V2-like network.

Prints (int8, the tile's native width; costs are the dataflow's ``estimate``; cycles
stall-free and at the preset's DRAM bandwidth, on the preset's one memory):
0. the zoo networks (EdgeTPU-V2-like, MobileNetV2) on each tile against a weight-stationary
   systolic array of the same MAC count on the same memory;
1. the patent's utilisation examples: group size 64 on 64 MACs, depthwise, full conv;
2. per block of ``blocks.build()``'s table at 224 x 224: cycles, utilisation and
   parameters of every Fig. 4 variant on the 32- and 64-MAC tiles (grouped variants at
   the group size that fills each tile's MACs, ``tune.hardware_groups``);
3. ``tune_groups`` on the network: grouped layers as built vs at the MAC-filling g;
4. the Pareto front of the network's blocks (cycles against parameters, 64 MACs);
5. a small digits network: its front's candidates trained on scikit-learn's digits,
   accuracy beside modelled cycles (torch, seconds to a minute each);
6. one layer spread over 1, 2 and 4 tiles, each with its own narrow and wide memory:
   compute halves, each tile fetches its own copy of the weights;
7. run speed: seconds of ``simulate(mode="run")`` on ResNet-18 (float32, int8) and the
   MACs a second of the broadcast arithmetic (pin it: ``taskset -c 1``).

Run: python bench/bench_group_tile.py   [--no-train]   (``speed`` or ``tiles``: that section only)
"""

import dataclasses
import sys
import time

from npusim import blocks, load_arch, tune
from npusim.blocks import KINDS, BlockSpec, ConvPlan
from npusim.dataflows import get
from npusim.dataflows.group_tile import Params
from npusim.dataflows.systolic import Params as SystolicParams
from npusim.frontends import load_model
from npusim.ir import ConvLayer
from npusim.stats import total

TILES = ("group-tile-32mac", "group-tile-64mac")


SAME_MACS = {"group-tile-32mac": (4, 8), "group-tile-64mac": (8, 8)}  # systolic rows x cols


def util(layer, arch):
    return get("group-tile").estimate(layer.with_dtype("int8"), None, None, load_arch(arch))


def free(arch):
    """The arch at unlimited DRAM bandwidth (stall-free)."""
    return load_arch(arch).with_memory(dram_bytes_per_cycle="unlimited")


def lost(free_cycles: int, cycles: int) -> float:
    """The share of ``cycles`` (at a DRAM bandwidth) the memory costs over the stall-free
    tile's ``free_cycles``: its stalls, and on the tile the compute of output blocks the
    compiler narrowed so that their weights stay (docs/group-tile.md)."""
    return 1 - free_cycles / cycles if cycles else 0.0


def network_cost(graph, arch, dataflow: str):
    """Summed conv LayerStats of ``graph`` (int8) on ``arch``, by ``dataflow``'s estimate."""
    df = get(dataflow)
    return total([df.estimate(graph.layers[n.name].with_dtype("int8"), None, None, arch)
                  for n in graph.conv_nodes])


def zoo_vs_systolic():
    print("0. zoo networks, conv layers, int8, 224x224: cycles stall-free / at the preset's "
          "bandwidth (share of the latter over the former); a WS systolic array of the same "
          "MACs on the same memory")
    for model in ("edgetpu_v2_like", "mobilenet_v2"):
        graph = load_model(model)
        for name in TILES:
            arch = load_arch(name)
            rows, cols = SAME_MACS[name]
            sys_arch = dataclasses.replace(arch, sections={
                **arch.sections, "systolic": SystolicParams(rows, cols, "ws")})
            tile = (network_cost(graph, free(name), "group-tile"),
                    network_cost(graph, arch, "group-tile"))
            base = (network_cost(graph, sys_arch.with_memory(dram_bytes_per_cycle="unlimited"),
                                 "systolic"), network_cost(graph, sys_arch, "systolic"))
            print(f"  {model:<16} {name}: tile {tile[0].cycles:>12,} / {tile[1].cycles:>12,} "
                  f"({lost(tile[0].cycles, tile[1].cycles):.1%}); systolic {rows}x{cols} "
                  f"{base[0].cycles:>12,} / {base[1].cycles:>12,} "
                  f"({lost(base[0].cycles, base[1].cycles):.1%}); tile over systolic "
                  f"x{base[0].cycles / tile[0].cycles:.2f} stall-free, "
                  f"x{base[1].cycles / tile[1].cycles:.2f} at "
                  f"{arch.memory.dram_bytes_per_cycle:g} B/cycle (systolic over tile "
                  f"x{tile[0].cycles / base[0].cycles:.2f}, "
                  f"x{tile[1].cycles / base[1].cycles:.2f})")


def patent_examples():
    print("1. utilisation examples (patent: 100% at group size 64, depthwise 'about 3%', "
          "full conv 'about 73%')")
    g64 = ConvLayer(1, 128, 14, 14, 128, 3, 3, padding=1, groups=2)
    dw = ConvLayer(1, 256, 14, 14, 256, 3, 3, padding=1, groups=256)
    full = [ConvLayer(1, 48, 28, 28, 96, 3, 3, padding=1),
            ConvLayer(1, 64, 28, 28, 256, 3, 3, padding=1),
            ConvLayer(1, 3, 224, 224, 1000, 1, 1)]
    for arch in TILES:
        for label, a in (("stall-free", free(arch)), ("at preset bandwidth", arch)):
            print(f"  {arch} {label}: group size 64 (g=2, zin 128) "
                  f"{util(g64, a).utilisation:.1%}, depthwise {util(dw, a).utilisation:.2%}, "
                  "full conv " + ", ".join(f"{lay.C}->{lay.K}: {util(lay, a).utilisation:.1%}"
                                           for lay in full))


def weight_bound():
    print("\n1b. weight bandwidth: 3x3, zin = zout = 256, 14x14 on 64 MACs, wide memory of 16, "
          "8 or 4 words a cycle: cycles (k) / utilisation / weight-stall share, stall-free; "
          "then cycles (k) / share over the stall-free cycles at the preset's bandwidth")
    print("  " + "".join(f"{'g=' + str(g) + ' (size ' + str(256 // g) + ')':>26}"
                         for g in (1, 4, 8, 16, 256)))
    for words in (16, 8, 4):
        section = {"group-tile": Params(wide_words_per_cycle=words)}
        arch = {label: dataclasses.replace(base, sections=section) for label, base in
                (("free", free("group-tile-64mac")), ("dram", load_arch("group-tile-64mac")))}
        layers = [ConvLayer(1, 256, 14, 14, 256, 3, 3, padding=1, groups=g)
                  for g in (1, 4, 8, 16, 256)]
        stall_free = [util(layer, arch["free"]) for layer in layers]
        at_dram = [util(layer, arch["dram"]) for layer in layers]
        weight_stalls = [st.extra["weight_stall_cycles"] / st.cycles for st in stall_free]
        rows = {"free": [f"{st.cycles / 1e3:.0f}/{st.utilisation:.0%}/{w:.0%}"
                         for st, w in zip(stall_free, weight_stalls, strict=True)],
                "dram": [f"{st.cycles / 1e3:.0f}/{lost(fr.cycles, st.cycles):.0%}"
                         for fr, st in zip(stall_free, at_dram, strict=True)]}
        for label, cells in rows.items():
            print(f"  {words:>2} w {label}" + "".join(f"{c:>26}" for c in cells)[9:])


def per_block_table():
    print("\n2. per block, EdgeTPU-V2-like network at 224x224: cycles (k) / utilisation / "
          "params (k)")
    specs = blocks.edgetpu_v2_blocks()
    hw = (112, 112)
    header = "  block  c_in->out s " + "".join(f"{k[:22]:>24}" for k in KINDS)
    for arch_name in TILES:
        arch = load_arch(arch_name)
        print(f"  {arch_name}\n{header}")
        h, sums = hw, {kind: [] for kind in KINDS}
        for i, spec in enumerate(specs, 1):
            cells = []
            for kind in KINDS:
                variant = tune.hardware_groups(blocks.replace_kinds([spec], kind)[0], arch)
                st, params = tune.block_stats(variant, h, arch)
                sums[kind].append((st, params, tune.block_stats(variant, h, free(arch_name))[0]))
                g = f"g{variant.groups}" if variant.groups > 1 else ""
                cells.append(f"{st.cycles / 1e3:>8.0f}/{st.utilisation:>4.0%}/"
                             f"{params / 1e3:>5.1f}{g:>4}")
            print(f"  {i:>5} {spec.c_in:>4}->{spec.c_out:<4} {spec.stride} "
                  + "".join(f"{c:>24}" for c in cells))
            h = (-(-h[0] // spec.stride), -(-h[1] // spec.stride))
        print("  all 20 blocks, every block as one kind (cycles stall-free, at the preset's "
              "bandwidth, share of the latter over the former, utilisation stall-free):")
        for kind, rows in sums.items():
            st, fr = total([r[0] for r in rows]), total([r[2] for r in rows])
            print(f"    {kind:<24} {fr.cycles:>12,} {st.cycles:>12,} cycles "
                  f"{lost(fr.cycles, st.cycles):>6.1%} {fr.utilisation:>6.1%}  "
                  f"{sum(r[1] for r in rows):>10,} params")


def network_tuning():
    print("\n3. tune_groups on the network (grouped layers at V2's 64 outputs per group vs "
          "the MAC-filling g)")
    graph = blocks.build()
    for arch in TILES:
        for label, a in (("stall-free", free(arch)), ("at preset bandwidth", arch)):
            r = tune.tune_groups(graph, a)
            (c0, p0), (c1, p1), (c2, p2) = (r.totals(w) for w in ("given", "chosen",
                                                                  "preferred"))
            moved = sum(lc.candidate(lc.chosen).cycles > 1.01 * lc.candidate(lc.preferred).cycles
                        for lc in r.layers)
            print(f"  {arch} {label}: as built {c0:,} cycles {p0:,} params; filling {c1:,} "
                  f"cycles {p1:,} params; preferred {c2:,} cycles {p2:,} params "
                  f"({len(r.layers)} grouped layers; {moved} where another g has over 1% "
                  "fewer cycles)")


def network_front():
    print("\n4. Pareto front of the network's 20 blocks on 64 MACs (cycles vs parameters)")
    start = time.perf_counter()
    front = tune.pareto(blocks.edgetpu_v2_blocks(), (112, 112), "group-tile-64mac",
                        group_sizes=(16, 32, 64))
    print(f"  {len(front)} points in {time.perf_counter() - start:.1f} s; every 10th:")
    for p in front[::max(1, len(front) // 10)]:
        kinds = "".join({"ibn": "I", "fused-ibn": "F", "fused-grouped-ibn": "f",
                         "grouped-ibn": "g"}[b.kind] for b in p.blocks)
        print(f"  {p.cycles:>12,} cycles {p.params:>10,} params  {kinds}")
    print("  (I ibn, F fused-ibn, f fused-grouped-ibn, g grouped-ibn; block 1 first)")


def digits_front():
    print("\n5. digits network (stem 16, blocks 16->16, 16->32 s2, 32->32): front on 32 MACs, "
          "trained 10 epochs")
    from npusim.blocks.train import train_digits

    stem = ConvPlan("stem", 1, 16, 3)
    specs = [BlockSpec("ibn", 16, 16, expand=2), BlockSpec("ibn", 16, 32, expand=2, stride=2),
             BlockSpec("ibn", 32, 32, expand=2)]
    front = tune.pareto(specs, (8, 8), "group-tile-32mac", group_sizes=(4, 16, 32))
    picks = front[::max(1, len(front) // 4)][:4] + [front[-1]]
    for p in picks:
        start = time.perf_counter()
        acc = train_digits(p.blocks, stem, epochs=10)
        kinds = ", ".join(f"{b.kind} g{b.groups}" for b in p.blocks)
        print(f"  {p.cycles:>8,} cycles {p.params:>7,} params  accuracy {acc:.3f} "
              f"({time.perf_counter() - start:.0f} s)  [{kinds}]")


def tile_spread():
    print("\n6. 1x1 128 -> 128, 28 x 28, int8 (16 KiB of weights), 64 MACs a tile, 64 KiB "
          "narrow and wide memory a tile, 17.064 B/cycle")
    layer = ConvLayer(1, 128, 28, 28, 128, 1, 1, dtype="int8")
    base = load_arch("group-tile-64mac")
    for tiles in (1, 2, 4):
        arch = dataclasses.replace(base, sections={"group-tile": dataclasses.replace(
            base.params("group-tile"), tiles=tiles)})
        st = get("group-tile").estimate(layer, None, None, arch)
        print(f"  {tiles} tile(s): {st.compute_cycles:>8,} compute {st.cycles:>8,} cycles "
              f"({st.stalled_share:.1%} stalled), DRAM weights {st.dram_filter_bytes:>8,} B, "
              f"inputs {st.dram_ifmap_bytes:>7,} B")


def run_speed():
    import numpy as np

    import npusim
    from npusim.frontends import zoo

    print("\n7. simulate(mode='run') of ResNet-18 on group-tile-64mac (best of 3, after a "
          "warm-up run)")
    graph, x = zoo.build("resnet18"), zoo.input_for("resnet18")
    macs = sum(graph.layers[n.name].macs for n in graph.conv_nodes)
    for dtype in ("float32", "int8"):
        npusim.simulate(graph, x, "group-tile-64mac", mode="run", dtype=dtype)
        best = np.inf
        for _ in range(3):
            start = time.perf_counter()
            npusim.simulate(graph, x, "group-tile-64mac", mode="run", dtype=dtype)
            best = min(best, time.perf_counter() - start)
        print(f"  {dtype:<8} {best:.2f} s  ({macs / best / 1e9:.2f} GMAC/s of conv MACs)")


if __name__ == "__main__":
    if "speed" in sys.argv or "tiles" in sys.argv:
        if "tiles" in sys.argv:
            tile_spread()
        if "speed" in sys.argv:
            run_speed()
        sys.exit()
    zoo_vs_systolic()
    patent_examples()
    weight_bound()
    per_block_table()
    network_tuning()
    network_front()
    if "--no-train" not in sys.argv:
        digits_front()
    tile_spread()
    run_speed()
