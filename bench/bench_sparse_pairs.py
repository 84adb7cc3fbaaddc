"""The sparse-pairs machine (seed 001) on real networks with a real photograph as input.

For AlexNet and VGG-16 pruned to Han et al.'s deep-compression densities, ResNet-18
pruned to 0.3 and 0.1 weight density, MobileNetV2 dense, and MTCNN's O-Net (trained
weights, shipped by the mtcnn wheel) pruned to 0.3: conv-layer cycles of
``sparse-pairs-32x32`` (1024 multipliers) under each weight-grouping policy against
the 32x32 weight-stationary ``systolic`` array (1024 multipliers) on the same
layers; the ideal speed-up dense MACs / decided pairs and the fraction of it the
machine reaches; which grouping policy wins how many layers; all stall-free (DRAM
bandwidth unlimited), then each machine at the preset's own bandwidth (10 B/cycle, the
same 64 KiB buffers for both machines): cycles, the share stalled, the speed-up. Then
the estimate path's time on VGG-16 against PyTorch's inference time (target: under 2x)
and `run` on ResNet-18 at 0.3 (target: under 4x).

Run: python bench/bench_sparse_pairs.py   (a few minutes on 2 cores; run it once)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

import npusim
from npusim import ops
from npusim.dataflows import get, grouping
from npusim.dataflows.sparse_pairs import Params, imbalance
from npusim.frontends import zoo
from npusim.frontends.prune import prune
from npusim.stats import total

sys.path.insert(0, str(Path(__file__).parent))
from common import best_time, memory_line  # noqa: E402

CASES = [("alexnet", "deep-compression"), ("vgg16", "deep-compression"), ("resnet18", 0.3),
         ("resnet18", 0.1), ("mobilenet_v2", None),
         ("mtcnn-onet", 0.3)]  # trained weights: kernel densities vary as in real pruned nets
PRESET = npusim.load_arch("sparse-pairs-32x32")
ARCH = PRESET.with_memory(dram_bytes_per_cycle="unlimited")  # stall-free
BANDWIDTH = PRESET.memory.dram_bytes_per_cycle
SP, SYS = get("sparse-pairs"), get("systolic")


def arch_for(policy: str, dealing: str, base=ARCH):
    p = dataclasses.replace(base.params("sparse-pairs"), grouping=policy, dealing=dealing)
    return dataclasses.replace(base, sections={**base.sections, "sparse-pairs": p})


MACHINES = [(d, pol) for d in grouping.DEALINGS for pol in grouping.POLICIES]
ARCHS = {m: arch_for(m[1], m[0]) for m in MACHINES}
FINITE = {m: arch_for(m[1], m[0], PRESET) for m in MACHINES}  # at the preset's bandwidth
DEFAULT = ("weight-groups", "similar-density")  # the preset's choice


def network(name: str, density):
    graph = zoo.build(name)
    return (prune(graph, density) if density is not None else graph), zoo.input_for(name)


def conv_inputs(graph, x):
    """(layer, input mask, weight mask) of every conv, activations from the dense engine."""
    res = npusim.simulate(graph, x, ARCH, mode="estimate", dataflow="systolic",
                          keep_outputs=True)
    for node in graph.conv_nodes:
        layer = graph.layers[node.name]
        xin = res.outputs[node.inputs[0]].reshape(layer.input_shape)
        yield layer, xin != 0, node.op.weight != 0


def layer_rows(graph, x) -> list[dict]:
    """Per conv layer: systolic stats and sparse-pairs stats under each policy, stall-free
    (keys ``systolic`` and the machines) and at the preset's bandwidth (``bw``, the same
    keys)."""
    rows = []
    for layer, xm, wm in conv_inputs(graph, x):
        row = {"layer": layer, "systolic": SYS.estimate(layer, xm, wm, ARCH)}
        row.update({m: SP.estimate(layer, xm, wm, ARCHS[m]) for m in MACHINES})
        row["bw"] = {"systolic": SYS.estimate(layer, xm, wm, PRESET)}
        row["bw"].update({m: SP.estimate(layer, xm, wm, FINITE[m]) for m in MACHINES})
        rows.append(row)
    return rows


def wins(rows) -> dict[tuple[str, str], int]:
    """Per dealing: layers on which each policy has the fewest cycles (strictly fewer than
    both others: a clear win), and layers where all three tie (key (dealing, 'tie'))."""
    out = {}
    for d in grouping.DEALINGS:
        for row in rows:
            cyc = {pol: row[(d, pol)].cycles for pol in grouping.POLICIES}
            best = min(cyc.values())
            winners = [pol for pol in grouping.POLICIES if cyc[pol] == best]
            key = (d, winners[0]) if len(winners) == 1 else (d, "tie")
            out[key] = out.get(key, 0) + 1
    return out


def summarise(label: str, rows) -> None:
    """Network totals per dealing and policy. ``speed-up``: over the systolic array;
    ``vs dense``: over a dense machine with as many multipliers, all busy every cycle (dense
    MACs / multipliers); ``ideal``: dense MACs / pairs; ``util`` (pairs / multiplier-cycles)
    = vs dense / ideal, the fraction of the ideal reached."""
    sys_total = total([r["systolic"] for r in rows])
    sys_bw = total([r["bw"]["systolic"] for r in rows])
    print(f"\n{label}: {len(rows)} conv/fc layers, systolic-32x32-ws {sys_total.cycles:,} cycles "
          f"stall-free (utilisation {sys_total.utilisation:.2f}), {sys_bw.cycles:,} at "
          f"{BANDWIDTH:g} B/cycle (stalled {sys_bw.stalled_share:.2f})")
    print(f"  {'dealing':14s} {'policy':16s} {'cycles':>11s} {'speed-up':>8s} {'vs dense':>8s} "
          f"{'ideal':>6s} {'util':>5s} {'idle in':>7s} {'idle btw':>8s} {'grp imb':>7s} "
          f"{'proc imb':>8s} {'bitmap/val':>10s} {'wins':>4s} | {'at bw':>11s} {'stalled':>7s} "
          f"{'speed-up':>8s}")
    won = wins(rows)
    for m in MACHINES:
        t = total([r[m] for r in rows])
        b = total([r["bw"][m] for r in rows])
        bitmap_ratio = t.extra["bitmap_traffic_bytes"] / (2 * t.macs * 4)  # float32 values
        idle_in, idle_between = (t.extra[k] / t.pe_cycles for k in
                                 ("idle_cycles_within_groups", "idle_cycles_between_groups"))
        vs_dense = t.dense_macs / (t.pe_cycles / t.cycles) / t.cycles
        print(f"  {m[0]:14s} {m[1]:16s} {t.cycles:11,d} {sys_total.cycles / t.cycles:8.2f} "
              f"{vs_dense:8.2f} {t.dense_macs / t.macs:6.2f} {t.utilisation:5.2f} {idle_in:7.2f} "
              f"{idle_between:8.2f} {imbalance(t):7.2f} {imbalance(t, 'processor'):8.2f} "
              f"{bitmap_ratio:10.3f} {won.get(m, 0):4d} | {b.cycles:11,d} "
              f"{b.stalled_share:7.2f} {sys_bw.cycles / b.cycles:8.2f}")
    print("  all three policies tie on " + ", ".join(
        f"{won.get((d, 'tie'), 0)} layers ({d})" for d in grouping.DEALINGS))
    t = total([r[DEFAULT] for r in rows])
    skips = [t.extra[k] / t.dense_macs for k in
             ("skipped_weight_zero", "skipped_feature_zero", "skipped_both_zero")]
    print(f"  pairs {t.macs / t.dense_macs:.3f} of dense MACs; skipped: weight-only zero "
          f"{skips[0]:.3f}, feature-only zero {skips[1]:.3f}, both {skips[2]:.3f}; energy "
          f"{t.energy_pj / 1e6:.1f} uJ vs systolic {sys_total.energy_pj / 1e6:.1f} uJ; kernel "
          f"loads {t.extra['kernel_load_bytes'] / 1e6:.1f} MB, {t.extra['streamed_kernels']:,} "
          f"kernels streamed (largest {t.extra['peak_kernel_bytes']:,} B)")
    subset("conv layers only (no fully connected; SCNN's scope)", rows,
           lambda L: L.P * L.Q > 1 or L.R * L.S > 1)
    subset("without depthwise layers", rows, lambda L: not L.is_depthwise)


def subset(label: str, rows, keep) -> None:
    """Speed-ups of the preset's machine on the layers ``keep(layer)`` selects, if not all."""
    chosen = [r for r in rows if keep(r["layer"])]
    if 0 < len(chosen) < len(rows):
        s, t = (total([r[k] for r in chosen]) for k in ("systolic", DEFAULT))
        s_bw, t_bw = (total([r["bw"][k] for r in chosen]) for k in ("systolic", DEFAULT))
        best = max(MACHINES, key=lambda m: -total([r[m] for r in chosen]).cycles)
        b = total([r[best] for r in chosen])
        dense = t.dense_macs / (t.pe_cycles / t.cycles)
        print(f"  {label}: speed-up {s.cycles / t.cycles:.2f} over systolic "
              f"(utilisation {s.utilisation:.2f}), {dense / t.cycles:.2f} over a fully used "
              f"dense array, ideal {t.dense_macs / t.macs:.2f}; best machine {best[0]} + "
              f"{best[1]}: {s.cycles / b.cycles:.2f} / {dense / b.cycles:.2f}; at "
              f"{BANDWIDTH:g} B/cycle: speed-up {s_bw.cycles / t_bw.cycles:.2f} over systolic, "
              f"{dense / t_bw.cycles:.2f} over the fully used dense array, stalled "
              f"{t_bw.stalled_share:.2f}")


def timing() -> None:
    """The estimate path on VGG-16 (deep-compression) against PyTorch eager inference."""
    import torch

    from npusim.torch_ref import to_torch

    graph, x = network("vgg16", "deep-compression")
    module = to_torch(graph).eval()
    xt = torch.from_numpy(x)
    with torch.inference_mode():
        t_torch = best_time(lambda: module(xt), repeat=2)
    convs = list(conv_inputs(graph, x))

    def costs() -> None:
        for layer, xm, wm in convs:
            SP.estimate(layer, xm, wm, PRESET)

    t_est = best_time(costs, repeat=2)
    t_sim = best_time(lambda: npusim.simulate(graph, x, PRESET, mode="estimate"), repeat=2)
    run_timing()
    print(f"\nVGG-16 timing (torch threads {torch.get_num_threads()}): torch eager "
          f"{t_torch:.2f} s; "
          f"sparse-pairs estimate path (all conv/fc layers, from masks) {t_est:.2f} s = "
          f"{t_est / t_torch:.2f}x (target < 2x); whole simulate(mode='estimate') incl. dense "
          f"activations {t_sim:.2f} s = {t_sim / t_torch:.2f}x")


def run_timing() -> None:
    """``simulate(mode='run')`` (the machine's own arithmetic) on ResNet-18 at 0.3 against
    PyTorch eager inference."""
    import torch

    from npusim.torch_ref import to_torch

    graph, x = network("resnet18", 0.3)
    module = to_torch(graph).eval()
    xt = torch.from_numpy(x)
    with torch.inference_mode():
        t_torch = best_time(lambda: module(xt), repeat=3)
    t_run = best_time(lambda: npusim.simulate(graph, x, PRESET, mode="run"), repeat=3)
    print(f"\nResNet-18 (0.3) simulate(mode='run') {t_run:.2f} s, torch eager {t_torch:.2f} s "
          f"= {t_run / t_torch:.2f}x (target < 4x)")


def main() -> None:
    p: Params = ARCH.params("sparse-pairs")
    print(f"sparse-pairs-32x32: {p.processor_groups} groups x {p.processors_per_group} "
          f"processors = {p.processors} multipliers; baseline systolic 32x32 ws = 1024")
    print(memory_line(PRESET, npusim.load_arch("systolic-32x32-ws")))
    for name, density in CASES:
        graph, x = network(name, density)
        dens = [float(np.count_nonzero(n.op.weight)) / n.op.weight.size
                for n in graph.conv_nodes if isinstance(n.op, ops.Conv)]
        label = f"{name} ({density or 'dense'} weights, mean layer density {np.mean(dens):.2f})"
        summarise(label, layer_rows(graph, x))
    timing()


if __name__ == "__main__":
    main()
