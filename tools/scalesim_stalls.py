#!/usr/bin/env python3
"""Regenerate tests/data/scalesim_stalls/ from SCALE-Sim 3.0.0 with finite DRAM bandwidth.

Each case is one layer in a topology file of its own, run by SCALE-Sim with
`InterfaceBandwidth: USER` on its default config (32x32 array, 64 KiB per SRAM,
../shared/scalesim/configs/scale.cfg) with only the run name, the dataflow and the
bandwidths changed. SCALE-Sim in USER mode fills the ifmap and filter SRAMs at
`[layout] IfmapSRAMBankBandwidth` / `FilterSRAMBankBandwidth` words per cycle and drains
the ofmap SRAM at `[architecture_presets] Bandwidth` words per cycle (see
single_layer_sim.run); this script sets all three to the same B, and the bank counts to 1
(SCALE-Sim asserts that the bandwidth divides by the bank count; with custom layouts off the
banks change nothing else). Words are 1 byte (fixed in single_layer_sim.run).

Results go to tests/data/scalesim_stalls/stalls.csv (USER mode) and calc_check.csv (the same
layers in CALC mode, against the stall-free fold formula), one row appended per finished run,
so an interrupted regeneration resumes where it stopped. Traces are not written (SCALE-Sim's
own `save_disk_space=True`); each run's output directory is removed when it ends.

Setup (once):
    python3 -m venv /work/scalesim-venv
    /work/scalesim-venv/bin/pip install scalesim==3.0.0 "numpy<2.4"
Usage:
    python3 tools/scalesim_stalls.py [--venv DIR] [--data DIR] [--only NAME ...] [--calc]
    /work/scalesim-venv/bin/python tools/scalesim_stalls.py --replay [--only NAME ...]
`--replay` checks the stall model written up in the memory notes: it takes SCALE-Sim's own
prefetch and demand matrices for each stalls.csv row and replays them through an independent
implementation of the read buffers, the write buffer and the per-row stall rule, printing both
results (it needs the scalesim package, hence the venv python).
Cost: one run at a time under `nice -n 10 timeout 600`; the 96 USER runs took 58 minutes of
wall time on a 2-core machine shared with other work (1 s to 274 s each; per-run wall seconds are
in the CSV), the CALC check 11 s. `--replay` costs about as much again.
"""

from __future__ import annotations

import argparse
import csv
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "tests" / "data" / "scalesim_stalls"
DEFAULT_VENV = Path("/work/scalesim-venv")
DEFAULT_DATA = next((p / "shared" / "scalesim" for p in REPO.parents
                     if (p / "shared" / "scalesim").is_dir()), REPO.parent / "shared" / "scalesim")
TIME_LIMIT_S = 600
WORD_BYTES = 1  # SCALE-Sim 3.0.0 fixes word_size = 1 byte in single_layer_sim.run

# name, ifmap H, ifmap W, filter H, filter W, channels, filters, stride (SCALE-Sim row order)
LAYERS = [
    ("r18_conv4_s", 28, 28, 1, 1, 128, 256, 2),
    ("r18_conv5_s", 14, 14, 1, 1, 256, 512, 2),
    ("r18_conv3_s", 56, 56, 1, 1, 64, 128, 2),
    ("r18_fc", 1, 1, 1, 1, 512, 1000, 1),
    ("r18_conv4_2a", 14, 14, 3, 3, 256, 256, 1),
    ("r18_conv3_1b", 28, 28, 3, 3, 128, 128, 1),
    ("c3x3_64_64_7", 7, 7, 3, 3, 64, 64, 1),
    ("c3x3_128_128_7", 7, 7, 3, 3, 128, 128, 1),
    ("c3x3_256_256_7", 7, 7, 3, 3, 256, 256, 1),
    ("c1x1_512_512_7", 7, 7, 1, 1, 512, 512, 1),
    ("c3x3_64_128_16", 16, 16, 3, 3, 64, 128, 1),
    ("r18_conv5_1a", 14, 14, 3, 3, 256, 512, 2),
    ("r18_conv4_1a", 28, 28, 3, 3, 128, 256, 2),
    ("r18_conv3_1a", 56, 56, 3, 3, 64, 128, 2),
    ("r18_conv2_1a", 56, 56, 3, 3, 64, 64, 1),
    ("r18_conv1", 224, 224, 7, 7, 3, 64, 2),
]
DATAFLOWS = ("os", "ws", "is")
BANDWIDTHS = (8, 64)  # words (= bytes) per cycle
CALC_LAYERS = ("c3x3_128_128_7", "r18_conv4_s")

COLUMNS = [
    "layer", "ifmap_h", "ifmap_w", "filter_h", "filter_w", "channels", "num_filter", "stride",
    "dataflow", "array_rows", "array_cols", "ifmap_sram_kb", "filter_sram_kb", "ofmap_sram_kb",
    "bandwidth_words_per_cycle", "word_bytes", "status", "wall_s",
    "total_cycles_incl_prefetch", "total_cycles", "stall_cycles", "compute_cycles_stall_free",
    "sram_ifmap_reads", "sram_filter_reads", "sram_ofmap_writes",
    "dram_ifmap_reads", "dram_filter_reads", "dram_ofmap_writes",
    "dram_ifmap_start", "dram_ifmap_stop", "dram_filter_start", "dram_filter_stop",
    "dram_ofmap_start", "dram_ofmap_stop",
]

RUNNER = """
import sys
from scalesim.scale_sim import scalesim
cfg, topology, layout, out = sys.argv[1:5]
scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topology,
         layout=layout).run_scale(top_path=out)
"""


def stall_free_cycles(layer: tuple, dataflow: str, rows: int, cols: int) -> int:
    """SCALE-Sim's CALC-mode cycles for one layer: folds * cycles per fold - 1."""
    _, h, w, fh, fw, c, n, s = layer
    pixels = math.ceil((h - fh + s) / s) * math.ceil((w - fw + s) / s)
    window = fh * fw * c
    if dataflow == "os":
        folds = math.ceil(pixels / rows) * math.ceil(n / cols)
        per_fold = window + rows + cols - 2
    elif dataflow == "ws":
        folds = math.ceil(window / rows) * math.ceil(n / cols)
        per_fold = 2 * rows + cols + pixels - 2
    else:
        folds = math.ceil(window / rows) * math.ceil(pixels / cols)
        per_fold = 2 * rows + cols + n - 2
    return folds * per_fold - 1


def topology_text(layer: tuple) -> str:
    """A SCALE-Sim topology CSV of one layer (its parser drops each row's last field)."""
    header = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, " \
             "Channels, Num Filter, Strides,\n"
    return header + ",".join(str(x) for x in layer) + ",\n"


def read_base_cfg(data: Path) -> str:
    """SCALE-Sim's default scale.cfg as text."""
    return (data / "configs" / "scale.cfg").read_text()


def variant_cfg(base: str, run: str, dataflow: str, bandwidth: int | None) -> str:
    """The base cfg with run name, dataflow and (USER mode) every bandwidth set to `bandwidth`."""
    out = []
    for line in base.splitlines():
        key = line.split(":")[0].split("=")[0].strip()
        if key == "run_name":
            line = f"run_name = {run}"
        elif key == "Dataflow":
            line = f"Dataflow : {dataflow}"
        elif key == "InterfaceBandwidth":
            line = "InterfaceBandwidth: " + ("CALC" if bandwidth is None else "USER")
        elif bandwidth is not None and key in ("Bandwidth", "IfmapSRAMBankBandwidth",
                                                "FilterSRAMBankBandwidth"):
            line = f"{key}: {bandwidth}"
        elif bandwidth is not None and key in ("IfmapSRAMBankNum", "FilterSRAMBankNum"):
            line = f"{key}: 1"
        out.append(line)
    return "\n".join(out) + "\n"


def cfg_value(cfg_text: str, key: str) -> int:
    """An integer field of a cfg text (first occurrence)."""
    for line in cfg_text.splitlines():
        if line.split(":")[0].strip().lower() == key.lower():
            return int(line.split(":", 1)[1])
    raise KeyError(key)


def read_report(path: Path) -> list[str]:
    """The one data row of a SCALE-Sim report CSV, without the layer id."""
    rows = [r for r in csv.reader(path.open()) if r]
    return [x.strip() for x in rows[1][1:] if x.strip()]


def run_case(venv: Path, data: Path, layer: tuple, dataflow: str, bandwidth: int | None) -> dict:
    """Run SCALE-Sim once on one layer; return the CSV row."""
    base = read_base_cfg(data)
    run = f"{layer[0]}_{dataflow}_{bandwidth or 'calc'}"
    cfg = variant_cfg(base, run, dataflow, bandwidth)
    rows, cols = cfg_value(cfg, "ArrayHeight"), cfg_value(cfg, "ArrayWidth")
    row = dict(zip(COLUMNS[:8], layer, strict=True))
    row.update(dataflow=dataflow, array_rows=rows, array_cols=cols,
               ifmap_sram_kb=cfg_value(cfg, "IfmapSramSzkB"),
               filter_sram_kb=cfg_value(cfg, "FilterSramSzkB"),
               ofmap_sram_kb=cfg_value(cfg, "OfmapSramSzkB"),
               bandwidth_words_per_cycle=bandwidth if bandwidth else "calc", word_bytes=WORD_BYTES,
               compute_cycles_stall_free=stall_free_cycles(layer, dataflow, rows, cols))
    with tempfile.TemporaryDirectory(prefix="scalesim_stalls_") as tmp:
        tmp = Path(tmp)
        (tmp / "scale.cfg").write_text(cfg)
        (tmp / "topo.csv").write_text(topology_text(layer))
        shutil.copy(data / "configs" / "layout_resnet18.csv", tmp / "layout.csv")
        cmd = ["nice", "-n", "10", "timeout", str(TIME_LIMIT_S), str(venv / "bin" / "python"),
               "-c", RUNNER, str(tmp / "scale.cfg"), str(tmp / "topo.csv"),
               str(tmp / "layout.csv"), str(tmp / "out")]
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        row["wall_s"] = round(time.monotonic() - start, 1)
        report_dir = tmp / "out" / run
        if proc.returncode != 0 or not (report_dir / "COMPUTE_REPORT.csv").exists():
            row["status"] = "timeout" if proc.returncode == 124 else f"error{proc.returncode}"
            sys.stderr.write(proc.stderr[-2000:])
            return row
        comp = read_report(report_dir / "COMPUTE_REPORT.csv")
        det = read_report(report_dir / "DETAILED_ACCESS_REPORT.csv")
    row.update(status="ok", total_cycles_incl_prefetch=comp[0], total_cycles=comp[1],
               stall_cycles=comp[2])
    row.update(sram_ifmap_reads=det[2], sram_filter_reads=det[5], sram_ofmap_writes=det[8],
               dram_ifmap_start=det[9], dram_ifmap_stop=det[10], dram_ifmap_reads=det[11],
               dram_filter_start=det[12], dram_filter_stop=det[13], dram_filter_reads=det[14],
               dram_ofmap_start=det[15], dram_ofmap_stop=det[16], dram_ofmap_writes=det[17])
    return row


def done_keys(path: Path) -> set:
    """(layer, dataflow, bandwidth) of the rows already in a results CSV."""
    if not path.exists():
        return set()
    return {(r["layer"], r["dataflow"], r["bandwidth_words_per_cycle"])
            for r in csv.DictReader(path.open())}


def append_row(path: Path, row: dict) -> None:
    """Append one result row, writing the header first if the file is new."""
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerow(row)


def cases(calc: bool, only: list[str]) -> list[tuple]:
    """(layer, dataflow, bandwidth) to run, in order: layer by layer, cheap layers first."""
    layers = [lay for lay in LAYERS if not only or lay[0] in only]
    if calc:
        return [(lay, df, None) for lay in layers if lay[0] in CALC_LAYERS for df in DATAFLOWS]
    return [(lay, df, bw) for lay in layers for df in DATAFLOWS for bw in BANDWIDTHS]


# ---- independent replay of SCALE-Sim's USER-mode stall model (see module docstring) ----

SETS_PER_BUFFER = 100  # read_buffer.prepare_hashed_buffer: ceil(buffer words / 100) per set
ACTIVE_FRACTION = 0.5  # single_layer_sim.run: half of each SRAM active, half prefetch/drain


class ReplayReader:
    """An ifmap or filter SRAM: a ring of address sets, an active window, chained prefetches."""

    def __init__(self, fetch_order, buffer_words: int, bandwidth: int):
        valid = [a for a in fetch_order.reshape(-1) if a != -1]
        per_set = math.ceil(buffer_words / SETS_PER_BUFFER)
        active = math.ceil(buffer_words * ACTIVE_FRACTION)
        prefetch = buffer_words - active
        self.sets = [set(valid[j:j + per_set]) for j in range(0, len(valid), per_set)]
        if len(valid) % per_set == 0:
            self.sets.append(set())  # SCALE-Sim always closes with the (here empty) open set
        self.window = min(len(self.sets), math.ceil(active / per_set))
        self.slide = min(len(self.sets) - self.window, math.ceil(prefetch / per_set))
        self.lines = math.ceil(prefetch / bandwidth)  # DRAM lines per prefetch
        self.start, self.ready, self.prefetches = 0, -1, 0

    def hit(self, addr) -> bool:
        """Whether addr is in one of the active window's sets."""
        n = len(self.sets)
        return any(addr in self.sets[(self.start + j) % n] for j in range(self.window))

    def row(self, addrs, cycle: int) -> int:
        """Stall of one demand row at `cycle` (may be negative, as in SCALE-Sim)."""
        offset = 1
        for addr in addrs:
            if addr == -1:
                continue
            while not self.hit(addr):
                self.start = (self.start + self.slide) % len(self.sets)
                self.ready += self.lines + 1
                self.prefetches += 1
                late = self.ready - (cycle + offset)
                offset += late + max(late, 0)  # SCALE-Sim adds a late prefetch twice
        return offset - 1


class ReplayWriter:
    """The ofmap SRAM: lines of B words, drained half a buffer at a time at B words/cycle."""

    def __init__(self, buffer_words: int, bandwidth: int):
        self.active = math.ceil(buffer_words * ACTIVE_FRACTION)
        self.drain_lines = math.ceil((buffer_words - self.active) / bandwidth)
        self.bandwidth, self.free, self.drain_end = bandwidth, buffer_words, 0
        self.pending, self.line = [], 0  # undrained full/partial lines (word counts), open line

    def close_line(self) -> None:
        """Move the open line, if any, to the undrained lines."""
        if self.line:
            self.pending.append(self.line)
            self.line = 0

    def drain(self, cycle: int) -> None:
        """Start a drain at `cycle`; words are credited at once (inner partial lines as full)."""
        self.close_line()
        n = min(self.drain_lines, len(self.pending))
        if n:
            self.free += (n - 1) * self.bandwidth + self.pending[n - 1]
        del self.pending[:n]
        self.drain_end = cycle + n - 1

    def row(self, addrs, cycle: int) -> int:
        """Stall of one demand row at `cycle`."""
        offset = 0
        for addr in addrs:
            if addr == -1:
                continue
            self.line += 1
            self.free -= 1
            if self.line == self.bandwidth:
                self.close_line()
            now = cycle + offset
            if now < self.drain_end:
                if self.free <= 0:
                    offset += self.drain_end - now
            elif self.free < self.active:
                self.drain(now)
        return offset


def scalesim_matrices(data: Path, layer: tuple, dataflow: str, bandwidth: int, tmp: Path):
    """SCALE-Sim's (ifmap prefetch, filter prefetch, ifmap/filter/ofmap demand) for one case."""
    from scalesim.compute.operand_matrix import operand_matrix
    from scalesim.compute.systolic_compute_is import systolic_compute_is
    from scalesim.compute.systolic_compute_os import systolic_compute_os
    from scalesim.compute.systolic_compute_ws import systolic_compute_ws
    from scalesim.layout_utils import layouts
    from scalesim.scale_config import scale_config
    from scalesim.topology_utils import topologies

    (tmp / "scale.cfg").write_text(variant_cfg(read_base_cfg(data), "replay", dataflow, bandwidth))
    (tmp / "topo.csv").write_text(topology_text(layer))
    config, topo, layout = scale_config(), topologies(), layouts()
    config.read_conf_file(str(tmp / "scale.cfg"))
    topo.load_arrays(topofile=str(tmp / "topo.csv"))
    layout.load_arrays(layoutfile=str(data / "configs" / "layout_resnet18.csv"))
    ops = operand_matrix()
    ops.set_params(layer_id=0, config_obj=config, topoutil_obj=topo, layoututil_obj=layout)
    compute = {"os": systolic_compute_os, "ws": systolic_compute_ws,
               "is": systolic_compute_is}[dataflow]()
    compute.set_params(config_obj=config, ifmap_op_mat=ops.get_ifmap_matrix()[1],
                       filter_op_mat=ops.get_filter_matrix()[1],
                       ofmap_op_mat=ops.get_ofmap_matrix()[1])
    return (*compute.get_prefetch_matrices(), *compute.get_demand_matrices())


def replay_case(data: Path, row: dict) -> tuple[int, int]:
    """(total cycles, stall cycles) of one stalls.csv row by the independent replay."""
    layer = next(lay for lay in LAYERS if lay[0] == row["layer"])
    bandwidth = int(row["bandwidth_words_per_cycle"])
    with tempfile.TemporaryDirectory(prefix="scalesim_replay_") as tmp:
        ifmap_fetch, filter_fetch, ifmap, filt, ofmap = scalesim_matrices(
            data, layer, row["dataflow"], bandwidth, Path(tmp))
    kb = {k: int(row[k]) * 1024 // WORD_BYTES for k in ("ifmap_sram_kb", "filter_sram_kb",
                                                          "ofmap_sram_kb")}
    reader_i = ReplayReader(ifmap_fetch, kb["ifmap_sram_kb"], bandwidth)
    reader_f = ReplayReader(filter_fetch, kb["filter_sram_kb"], bandwidth)
    writer = ReplayWriter(kb["ofmap_sram_kb"], bandwidth)
    stall = 0
    for i in range(ifmap.shape[0]):
        cycle = i + stall
        stall += int(max(reader_i.row(ifmap[i], cycle), reader_f.row(filt[i], cycle),
                         writer.row(ofmap[i], cycle)))
    return ifmap.shape[0] - 1 + stall, stall


def replay_all(data: Path, only: list[str]) -> int:
    """Replay every finished stalls.csv row (or those of `only`); 1 if any differs."""
    differ = 0
    for row in csv.DictReader((OUT_DIR / "stalls.csv").open()):
        if row["status"] != "ok" or (only and row["layer"] not in only):
            continue
        total, stall = replay_case(data, row)
        same = (total, stall) == (int(row["total_cycles"]), int(row["stall_cycles"]))
        differ |= not same
        print(f"{row['layer']} {row['dataflow']} B={row['bandwidth_words_per_cycle']}: "
              f"SCALE-Sim {row['total_cycles']}/{row['stall_cycles']} replay {total}/{stall} "
              f"{'same' if same else 'DIFFERENT'}", flush=True)
    return int(differ)


def main() -> int:
    """Run every missing case, one at a time, appending each result as it finishes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--only", nargs="*", default=[], help="layer names to run")
    parser.add_argument("--calc", action="store_true", help="CALC-mode check instead of USER")
    parser.add_argument("--replay", action="store_true", help="check the stall model (venv)")
    args = parser.parse_args()
    if args.replay:
        return replay_all(args.data, args.only)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / ("calc_check.csv" if args.calc else "stalls.csv")
    done = done_keys(out)
    for layer, df, bw in cases(args.calc, args.only):
        if (layer[0], df, str(bw or "calc")) in done:
            continue
        row = run_case(args.venv, args.data, layer, df, bw)
        append_row(out, row)
        print(f"{layer[0]} {df} bw={bw}: {row.get('status')} {row['wall_s']}s "
              f"total={row.get('total_cycles')} stall={row.get('stall_cycles')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
