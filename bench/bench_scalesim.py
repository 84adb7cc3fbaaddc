"""A shape-only systolic run of SCALE-Sim's ResNet-18 topology: npusim against SCALE-Sim
3.0.0 on the same layers and the same 32x32 config, both timed in this run.

SCALE-Sim needs 10 to 30 minutes per dataflow for all 21 layers on 2 shared cores, so
by default it runs the four 1x1 layers (Conv3_s, Conv4_s, Conv5_s, FC: its quickest, about
a minute together); NPUSIM_BENCH_LAYERS=all runs every layer, =N the last N, =A,B named
ones. npusim is timed on the same subset and on the whole topology. The cycles of both
are compared layer by layer.

SCALE-Sim runs in its own venv (it needs numpy < 2.4): SCALESIM_VENV=DIR names one;
otherwise .scalesim-venv in the repository is created with scalesim==3.0.0 and
numpy<2.4 on first use (needs PyPI).

Target (issue 2): npusim at least 100x faster than SCALE-Sim.

Finite bandwidth (issue 12): SCALE-Sim's stall replay (InterfaceBandwidth: USER) is far
slower than its stall-free run, so it is not rerun here: its per-layer results and wall
times are in tests/data/scalesim_stalls/stalls.csv (tools/scalesim_stalls.py made them).
npusim is timed on the same layers and configs (B bytes/cycle on each operand's channel)
and both totals are printed side by side (docs/systolic.md explains every difference); so is
npusim's whole topology at the preset's own bandwidth beside stall-free.
Run: python bench/bench_scalesim.py
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import best_time  # noqa: E402

from npusim.arch import load_arch  # noqa: E402
from npusim.frontends.topology import read_topology, write_topology  # noqa: E402
from npusim.simulate import simulate_shapes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "scalesim"
DATAFLOW = os.environ.get("NPUSIM_BENCH_DATAFLOW", "ws")

SCALESIM_RUN = """
import sys, time
from scalesim.scale_sim import scalesim
cfg, topo, layout, out = sys.argv[1:5]
sim = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout)
start = time.perf_counter()
sim.run_scale(top_path=out)
print(time.perf_counter() - start)
"""


def scalesim_python() -> Path:
    """The python of a venv holding scalesim 3.0.0 (created on first use)."""
    venv = Path(os.environ.get("SCALESIM_VENV", REPO / ".scalesim-venv"))
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} (scalesim==3.0.0, numpy<2.4)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "scalesim==3.0.0",
                        "numpy<2.4"], check=True)
    return python


def subset(layers):
    """The layers SCALE-Sim is timed on. NPUSIM_BENCH_LAYERS: 'all', a count from the end,
    or comma-separated names (default: the four 1x1 layers, the quickest for SCALE-Sim)."""
    choice = os.environ.get("NPUSIM_BENCH_LAYERS", "Conv3_s,Conv4_s,Conv5_s,FC")
    if choice == "all":
        return layers
    if choice.isdigit():
        return layers[-int(choice):]
    names = choice.split(",")
    return [layer for layer in layers if layer.name in names]


def run_scalesim(layers, work: Path) -> tuple[float, list[int]]:
    """SCALE-Sim on ``layers``: (seconds of its run, Total Cycles per layer)."""
    topo = work / "topology.csv"
    write_topology(layers, topo)
    cfg = (DATA / "scale.cfg").read_text().replace("Dataflow : ws", f"Dataflow : {DATAFLOW}")
    cfg = cfg.replace("run_name = scale_example_run_32x32_ws", "run_name = bench")
    (work / "scale.cfg").write_text(cfg)
    done = subprocess.run([str(scalesim_python()), "-c", SCALESIM_RUN, str(work / "scale.cfg"),
                           str(topo), str(DATA / "layout_resnet18.csv"), str(work / "out")],
                          check=True, capture_output=True, text=True, cwd=work)
    seconds = float(done.stdout.strip().splitlines()[-1])
    with open(work / "out" / "bench" / "COMPUTE_REPORT.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    return seconds, [int(row[2]) for row in rows if row]


STALLS = REPO / "tests" / "data" / "scalesim_stalls" / "stalls.csv"
HEADER = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, " \
         "Num Filter, Strides,\n"


def stall_cases(work: Path):
    """(row, layer, arch) of every finished USER-mode SCALE-Sim run in stalls.csv."""
    with open(STALLS, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    out = []
    for i, row in enumerate(rows):
        path = work / f"l{i}.csv"
        path.write_text(HEADER + ", ".join(row[k] for k in (
            "layer", "ifmap_h", "ifmap_w", "filter_h", "filter_w", "channels", "num_filter",
            "stride")) + ",\n")
        arch = load_arch(f"systolic-32x32-{row['dataflow']}").with_memory(
            dram_bytes_per_cycle=float(row["bandwidth_words_per_cycle"]),
            dram_channels="per-operand")
        out.append((row, read_topology(path)[0], arch))
    return out


def finite_bandwidth() -> None:
    """npusim against SCALE-Sim's stored USER-mode runs: totals per layer, and the time."""
    with tempfile.TemporaryDirectory() as d:
        cases = stall_cases(Path(d))
    results = [simulate_shapes([layer], arch, dtype="int8").layers[0]
               for _, layer, arch in cases]
    t_ours = best_time(lambda: [simulate_shapes([layer], arch, dtype="int8")
                                for _, layer, arch in cases], repeat=3)
    t_theirs = sum(float(row["wall_s"]) for row, _, _ in cases)
    print(f"\nfinite bandwidth: {len(cases)} SCALE-Sim USER runs (stalls.csv)")
    print(f"{'layer':16s} {'df':3s} {'B':>3s} {'SCALE-Sim total':>16s} {'stall':>10s} "
          f"{'npusim total':>13s} {'stall':>10s} {'ratio':>6s}")
    within = 0
    for (row, _, _), s in zip(cases, results, strict=True):
        total = int(row["total_cycles"])
        within += abs(s.cycles / total - 1) <= 0.03
        print(f"{row['layer']:16s} {row['dataflow']:3s} {row['bandwidth_words_per_cycle']:>3s} "
              f"{total:16,d} {int(row['stall_cycles']):10,d} {s.cycles:13,d} "
              f"{s.stall_cycles:10,d} {s.cycles / total:6.3f}")
    print(f"within 3 % of SCALE-Sim: {within} of {len(cases)} (differences: docs/systolic.md)")
    print(f"npusim {t_ours * 1e3:.1f} ms on all of them, SCALE-Sim {t_theirs:.0f} s "
          f"(its recorded wall times): {t_theirs / t_ours:.0f}x")


def main() -> None:
    preset = load_arch(f"systolic-32x32-{DATAFLOW}")
    arch = preset.with_memory(dram_bytes_per_cycle="unlimited")  # SCALE-Sim's CALC mode
    layers = read_topology(DATA / "Resnet18.csv")
    part = subset(layers)
    t_all = best_time(lambda: simulate_shapes(layers, arch), repeat=5)
    t_part = best_time(lambda: simulate_shapes(part, arch), repeat=5)
    ours = [s.cycles for s in simulate_shapes(part, arch).layers]
    with tempfile.TemporaryDirectory() as d:
        t_scalesim, theirs = run_scalesim(part, Path(d))
    names = ", ".join(layer.name for layer in part)
    print(f"ResNet-18 topology, {DATAFLOW}, 32x32: SCALE-Sim on {len(part)} of {len(layers)} "
          f"layers ({names})")
    print(f"cycles equal on every layer: {ours == theirs} (total {sum(ours)})")
    print(f"npusim {t_part * 1e3:.2f} ms on those layers ({t_all * 1e3:.2f} ms on all "
          f"{len(layers)}), SCALE-Sim {t_scalesim:.1f} s")
    print(f"speed-up over SCALE-Sim: {t_scalesim / t_part:.0f}x (target: >= 100x)")
    free = simulate_shapes(layers, arch, dtype="int8").total
    real = simulate_shapes(layers, preset, dtype="int8").total
    print(f"npusim, all {len(layers)} layers, int8: {free.cycles:,} cycles stall-free, "
          f"{real.cycles:,} at the preset's {preset.memory.dram_bytes_per_cycle:g} B/cycle "
          f"({100 * real.stalled_share:.1f} % stalled)")
    finite_bandwidth()


if __name__ == "__main__":
    main()
