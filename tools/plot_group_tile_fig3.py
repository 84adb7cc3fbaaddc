"""Fig. 3 of seed 003 redrawn from npusim's own counts: parameters and MACs of a 3x3 conv
with zin = zout = 256 on a 14 x 14 map against the number of groups g, and beside it the
group-tile model's cycles and utilisation for the same layer on the 32- and 64-MAC tiles,
stall-free (solid) and at the presets' DRAM bandwidth (dashed).

Run: python tools/plot_group_tile_fig3.py   (writes docs/img/group-tile-fig3.png)
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from npusim import load_arch, tune  # noqa: E402
from npusim.blocks import ConvPlan  # noqa: E402
from npusim.ir import ConvLayer  # noqa: E402

ZIN, HW = 256, 14
OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "group-tile-fig3.png"


def main() -> None:
    gs = [g for g in range(1, ZIN + 1) if ZIN % g == 0]
    convs = [ConvPlan("c", ZIN, ZIN, 3, groups=g) for g in gs]
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    left.loglog(gs, [c.params - ZIN for c in convs], "o-", label="trainable parameters")
    left.loglog(gs, [c.macs(HW, HW) for c in convs], "s-", label=f"MACs ({HW}x{HW} map)")
    left.set(xlabel="groups g (1 = full, 256 = depthwise)", title="zin = 256, 3x3: cost vs g")
    for arch in ("group-tile-32mac", "group-tile-64mac"):
        preset = load_arch(arch)
        bw = preset.memory.dram_bytes_per_cycle
        for a, style, how in ((preset.with_memory(dram_bytes_per_cycle="unlimited"), "o-",
                               "stall-free"), (preset, "x--", f"{bw:g} B/cycle")):
            stats = [tune.layer_cost(ConvLayer(1, ZIN, HW, HW, ZIN, 3, 3, padding=1, groups=g,
                                               dtype="int8"), a) for g in gs]
            mid.loglog(gs, [s.cycles for s in stats], style, label=f"{arch}, {how}")
            right.semilogx(gs, [100 * s.utilisation for s in stats], style,
                           label=f"{arch}, {how}")
    mid.set(xlabel="groups g", ylabel="cycles", title="group-tile model: latency vs g")
    right.set(xlabel="groups g", ylabel="MAC utilisation (%)",
              title="group-tile model: utilisation vs g")
    for ax in (left, mid, right):
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
