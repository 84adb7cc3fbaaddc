"""The group-tile machine (seed 003) on its own examples and on the EdgeTPU-V2-like network.

Prints (int8, the tile's native width; costs are the dataflow's ``estimate``):
1. the patent's utilisation examples: group size 64 on 64 MACs, depthwise, full conv;
2. per block of ``blocks.build()``'s table at 224 x 224: cycles, utilisation and
   parameters of every Fig. 4 variant on the 32- and 64-MAC tiles (grouped variants at
   the group size that fills each tile's MACs, ``tune.hardware_groups``);
3. ``tune_groups`` on the network: grouped layers as built vs at the MAC-filling g;
4. the Pareto front of the network's blocks (cycles against parameters, 64 MACs);
5. a small digits network: its front's candidates trained on scikit-learn's digits,
   accuracy beside modelled cycles (torch, seconds to a minute each).

Run: python bench/bench_group_tile.py   [--no-train]
"""

import dataclasses
import sys
import time

from npusim import blocks, load_arch, tune
from npusim.blocks import KINDS, BlockSpec, ConvPlan
from npusim.dataflows import get
from npusim.dataflows.group_tile import Params
from npusim.ir import ConvLayer
from npusim.stats import total

TILES = ("group-tile-32mac", "group-tile-64mac")


def util(layer, arch):
    return get("group-tile").estimate(layer.with_dtype("int8"), None, None, load_arch(arch))


def patent_examples():
    print("1. utilisation examples (patent: 100% at group size 64, depthwise 'about 3%', "
          "full conv 'about 73%')")
    g64 = ConvLayer(1, 128, 14, 14, 128, 3, 3, padding=1, groups=2)
    dw = ConvLayer(1, 256, 14, 14, 256, 3, 3, padding=1, groups=256)
    full = [ConvLayer(1, 48, 28, 28, 96, 3, 3, padding=1),
            ConvLayer(1, 64, 28, 28, 256, 3, 3, padding=1),
            ConvLayer(1, 3, 224, 224, 1000, 1, 1)]
    for arch in TILES:
        print(f"  {arch}: group size 64 (g=2, zin 128) {util(g64, arch).utilisation:.1%}, "
              f"depthwise {util(dw, arch).utilisation:.2%}, full conv "
              + ", ".join(f"{lay.C}->{lay.K}: {util(lay, arch).utilisation:.1%}"
                          for lay in full))


def weight_bound():
    print("\n1b. weight bandwidth: 3x3, zin = zout = 256, 14x14 on 64 MACs, wide memory of 16, "
          "8 or 4 words a cycle: cycles (k) / utilisation / weight-stall share")
    base = load_arch("group-tile-64mac")
    print("  " + "".join(f"{'g=' + str(g) + ' (size ' + str(256 // g) + ')':>26}"
                         for g in (1, 4, 8, 16, 256)))
    for words in (16, 8, 4):
        arch = dataclasses.replace(base, sections={"group-tile": Params(
            wide_words_per_cycle=words)})
        cells = []
        for g in (1, 4, 8, 16, 256):
            st = util(ConvLayer(1, 256, 14, 14, 256, 3, 3, padding=1, groups=g), arch)
            stall = st.extra["weight_stall_cycles"] / st.cycles
            cells.append(f"{st.cycles / 1e3:.0f}/{st.utilisation:.0%}/{stall:.0%}")
        print(f"  {words:>2} words " + "".join(f"{c:>26}" for c in cells)[8:])


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
                sums[kind].append((st, params))
                g = f"g{variant.groups}" if variant.groups > 1 else ""
                cells.append(f"{st.cycles / 1e3:>8.0f}/{st.utilisation:>4.0%}/"
                             f"{params / 1e3:>5.1f}{g:>4}")
            print(f"  {i:>5} {spec.c_in:>4}->{spec.c_out:<4} {spec.stride} "
                  + "".join(f"{c:>24}" for c in cells))
            h = (-(-h[0] // spec.stride), -(-h[1] // spec.stride))
        print("  all 20 blocks, every block as one kind:")
        for kind, rows in sums.items():
            st = total([r[0] for r in rows])
            print(f"    {kind:<24} {st.cycles:>12,} cycles  {st.utilisation:>6.1%}  "
                  f"{sum(r[1] for r in rows):>10,} params")


def network_tuning():
    print("\n3. tune_groups on the network (grouped layers at V2's 64 outputs per group vs "
          "the MAC-filling g)")
    graph = blocks.build()
    for arch in TILES:
        r = tune.tune_groups(graph, arch)
        (c0, p0), (c1, p1) = r.totals("given"), r.totals("chosen")
        print(f"  {arch}: as built {c0:,} cycles {p0:,} params; filling {c1:,} cycles "
              f"{p1:,} params ({len(r.layers)} grouped layers)")


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


if __name__ == "__main__":
    patent_examples()
    weight_bound()
    per_block_table()
    network_tuning()
    network_front()
    if "--no-train" not in sys.argv:
        digits_front()
