"""The systolic machine at finite DRAM bandwidth against SCALE-Sim 3.0.0's own USER-mode runs
(tests/data/scalesim_stalls/stalls.csv, made by tools/scalesim_stalls.py): one layer per run,
32x32 array, 64 KiB per SRAM, B words (= bytes) per cycle on each operand's interface.

The two memory models differ by design (docs/systolic.md, "Finite bandwidth against
SCALE-Sim", lists every layer and why); what must agree is checked here:

- the stall-free part: npusim's compute cycles == SCALE-Sim's Total - Stall Cycles, always;
- where SCALE-Sim finds the layer compute-bound (no stall) and npusim's machine moves no
  traffic SCALE-Sim's does not (no exposed first fetch, no spilled partial sums), npusim's
  total is within 3 % of SCALE-Sim's;
- a layer bound by one operand streamed once through DRAM (FC, IS: every weight once) takes
  the stream's time in both.
"""

import csv
import os
from pathlib import Path

import numpy as np
import pytest

from npusim.arch import load_arch
from npusim.dataflows.systolic import Systolic
from npusim.frontends.topology import read_topology

DATA = Path(__file__).parent / "data" / "scalesim_stalls" / "stalls.csv"
HEADER = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, " \
         "Num Filter, Strides,\n"

# SCALE-Sim compute-bound layers where npusim adds a cost SCALE-Sim does not count:
# "first fetch": npusim exposes the first fold's fetch (SCALE-Sim fills its buffers before
# cycle 0 and leaves that out of Total Cycles); "one fold ahead": npusim's double buffer
# fetches one fold ahead, SCALE-Sim's read buffer up to half the SRAM ahead;
# "psum spill" (every layer where ``spills`` holds): the column fold's 4-byte partial sums
# overflow the ofmap SRAM and go out and back each reduction fold (SCALE-Sim writes 1-byte
# partial sums once, never reads them back).
EXTRA_COST = {("c3x3_64_64_7", "os", 64): "first fetch",
              ("c3x3_128_128_7", "os", 64): "first fetch",
              ("r18_conv4_s", "os", 8): "one fold ahead"}


def spills(layer, row) -> bool:
    """A WS/IS column fold's partial sums (up to 32 columns of filters (WS) or pixels (IS)
    x the streamed pixels or filters x 4 bytes) exceed the active half of the ofmap SRAM,
    while more than one reduction fold accumulates into them."""
    if row["dataflow"] == "os" or layer.Cg * layer.R * layer.S <= 32:
        return False
    pixels = layer.P * layer.Q
    block = pixels * min(32, layer.K) if row["dataflow"] == "ws" else layer.K * min(32, pixels)
    return block * 4 > int(row["ofmap_sram_kb"]) * 512


def extra_cost(layer, row) -> str | None:
    return "psum spill" if spills(layer, row) else EXTRA_COST.get(key(row))


def cases() -> list[dict]:
    with open(DATA, newline="") as f:
        return [r for r in csv.DictReader(f) if r["status"] == "ok"]


def npusim_stats(row: dict, tmp_path, model: str = "npusim"):
    """npusim's systolic on the row's layer and config: SCALE-Sim's shape rules (the topology
    reader), int8 (1-byte words), one DRAM channel of B bytes/cycle per operand; ``model``
    the ``[memory] model``."""
    path = tmp_path / "layer.csv"
    path.write_text(HEADER + ", ".join(row[k] for k in (
        "layer", "ifmap_h", "ifmap_w", "filter_h", "filter_w", "channels", "num_filter",
        "stride")) + ",\n")
    layer = read_topology(path)[0].with_dtype("int8")
    assert (row["array_rows"], row["array_cols"]) == ("32", "32")
    arch = load_arch(f"systolic-32x32-{row['dataflow']}").with_memory(
        ifmap_sram_kb=int(row["ifmap_sram_kb"]), filter_sram_kb=int(row["filter_sram_kb"]),
        ofmap_sram_kb=int(row["ofmap_sram_kb"]),
        dram_bytes_per_cycle=float(row["bandwidth_words_per_cycle"]),
        dram_channels="per-operand", model=model)
    return layer, Systolic().stats(layer, arch)


def key(row: dict):
    return row["layer"], row["dataflow"], int(row["bandwidth_words_per_cycle"])


def test_the_data_covers_three_dataflows_two_bandwidths_and_eight_layers():
    rows = cases()
    assert {r["dataflow"] for r in rows} == {"os", "ws", "is"}
    assert {r["bandwidth_words_per_cycle"] for r in rows} == {"8", "64"}
    assert len({r["layer"] for r in rows}) >= 8
    assert any(r["stall_cycles"] == "0" for r in rows) and any(
        r["stall_cycles"] != "0" for r in rows)


@pytest.mark.parametrize("row", cases(), ids=lambda r: "-".join(map(str, key(r))))
def test_compute_cycles_equal_scalesim(row, tmp_path):
    _, s = npusim_stats(row, tmp_path)
    assert s.compute_cycles == int(row["total_cycles"]) - int(row["stall_cycles"])
    assert s.cycles >= s.compute_cycles


def test_compute_bound_layers_agree_within_3_percent(tmp_path):
    checked = 0
    for row in cases():
        layer, s = npusim_stats(row, tmp_path)
        if row["stall_cycles"] != "0" or extra_cost(layer, row):
            continue
        assert s.cycles == pytest.approx(int(row["total_cycles"]), rel=0.03), key(row)
        checked += 1
    assert checked >= 9


def test_the_extra_costs_are_npusims_own_traffic(tmp_path):
    """The exceptions where SCALE-Sim is compute-bound: npusim slower for the named
    reason, never faster; a spilling layer moves more ofmap bytes than its outputs."""
    for row in cases():
        layer, s = npusim_stats(row, tmp_path)
        cause = extra_cost(layer, row)
        if cause == "psum spill":
            assert s.dram_ofmap_bytes > layer.K * layer.P * layer.Q, key(row)
        if cause and row["stall_cycles"] == "0":
            assert s.cycles > int(row["total_cycles"]), key(row)
        if cause == "psum spill":  # and no slower than the spilled bytes' own transfer time
            floor = max(int(row["total_cycles"]), s.dram_ofmap_bytes / bandwidth(row))
            assert s.cycles <= 1.03 * floor, key(row)


def bandwidth(row: dict) -> float:
    return float(row["bandwidth_words_per_cycle"])


def test_inputs_never_cross_dram_more_than_in_scalesim(tmp_path):
    """npusim's ifmap and filter DRAM bytes are at most SCALE-Sim's reads (1-byte words),
    give or take one transfer of B words; SCALE-Sim re-reads what npusim keeps on chip,
    never the other way round. Outside partial-sum spills, ofmap bytes too."""
    for row in cases():
        layer, s = npusim_stats(row, tmp_path)
        slack = bandwidth(row)
        assert s.dram_ifmap_bytes <= int(row["dram_ifmap_reads"]) + slack, key(row)
        assert s.dram_filter_bytes <= int(row["dram_filter_reads"]) + slack, key(row)
        if not spills(layer, row):
            assert s.dram_ofmap_bytes <= int(row["dram_ofmap_writes"]) + slack, key(row)


def test_a_weight_stream_takes_the_same_time_in_both(tmp_path):
    """ResNet-18's FC on IS at 8 B/cycle: 512,000 weights streamed once at 8 per cycle."""
    row = next(r for r in cases() if key(r) == ("r18_fc", "is", 8))
    _, s = npusim_stats(row, tmp_path)
    assert s.dram_filter_bytes == 512_000 and s.bound == "dram"
    assert s.cycles == pytest.approx(int(row["total_cycles"]), rel=0.01)


# The replay of SCALE-Sim's trace runs row by row in Python like SCALE-Sim itself; these
# runs are checked in the default suite (the larger ones by NPUSIM_SCALESIM_ALL=1).
QUICK_ROWS = 30_000


def replayed_cases() -> list[dict]:
    every = os.environ.get("NPUSIM_SCALESIM_ALL") == "1"
    return [r for r in cases() if every or int(r["compute_cycles_stall_free"]) < QUICK_ROWS]


@pytest.mark.parametrize("row", replayed_cases(), ids=lambda r: "-".join(map(str, key(r))))
def test_scalesim_memory_model_equals_scalesim_per_layer(row, tmp_path):
    """``[memory] model = "scalesim"``: SCALE-Sim's own trace and buffers, rebuilt in
    npusim (npusim.memory_scalesim), give its total and stall cycles exactly."""
    _, s = npusim_stats(row, tmp_path, model="scalesim")
    assert (s.cycles, s.stall_cycles) == (int(row["total_cycles"]), int(row["stall_cycles"]))
    assert s.compute_cycles == int(row["compute_cycles_stall_free"])


def test_scalesim_memory_model_refuses_what_scalesim_cannot_describe():
    """Groups, a fractional bandwidth or another machine: a ConfigError naming what."""
    from npusim.dataflows import get
    from npusim.errors import ConfigError
    from npusim.ir import ConvLayer

    arch = load_arch("systolic-32x32-os").with_memory(model="scalesim", dram_bytes_per_cycle=8)
    grouped = ConvLayer(1, 4, 6, 6, 4, 3, 3, groups=2, name="g").with_dtype("int8")
    with pytest.raises(ConfigError, match="'g'.*groups = 2"):
        Systolic().stats(grouped, arch)
    plain = ConvLayer(1, 4, 6, 6, 4, 3, 3, name="c").with_dtype("int8")
    with pytest.raises(ConfigError, match="'c'.*dtype float32: SCALE-Sim counts words"):
        Systolic().stats(plain.with_dtype("float32"), arch)  # its words are bytes: int8
    with pytest.raises(ConfigError, match="whole number"):
        Systolic().stats(plain, arch.with_memory(dram_bytes_per_cycle=17.064))
    other = load_arch("input-reuse-1024").with_memory(model="scalesim")
    with pytest.raises(ConfigError, match='model = "npusim"'):
        get("input-reuse").estimate(plain, np.ones((1, 4, 6, 6), bool),
                                    np.ones((4, 4, 3, 3), bool), other)
    free = arch.with_memory(dram_bytes_per_cycle="unlimited")
    assert Systolic().stats(plain, free) == Systolic().stats(
        plain, free.with_memory(model="npusim"))
