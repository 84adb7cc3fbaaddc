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


def main() -> None:
    arch = f"systolic-32x32-{DATAFLOW}"
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


if __name__ == "__main__":
    main()
