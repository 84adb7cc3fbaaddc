"""Reports as pure functions of the stats: the terminal table, JSON, CSV, and atomic writing."""

import csv
import io
import json
import math

import numpy as np
import pytest

import npusim
from npusim import quant, reference
from npusim.arch import load_arch
from npusim.ir import Node
from npusim.ops import Conv
from npusim.report import check, export, render, table, to_csv, to_json
from npusim.simulate import SimResult
from npusim.stats import LayerStats

ARCH = load_arch("systolic-32x32-ws")


def stats_fixture() -> list[LayerStats]:
    """Hand-written stats (no simulator involved): two convs with different extras, two
    vector ops between them."""
    conv_a = LayerStats("conv_a", "systolic", "3x8x8->4x8x8 3x3", dense_macs=6912, macs=6912,
                        cycles=100, pe_cycles=102400, mapped_pe_cycles=51200,
                        compute_cycles=90, stall_dram_filter_cycles=10, bound="dram",
                        sram_ifmap_bytes=1000, sram_filter_bytes=200, sram_ofmap_bytes=300,
                        dram_ifmap_bytes=768, dram_filter_bytes=432, dram_ofmap_bytes=1024,
                        energy_pj=2500.0, extra={"folds": 2})
    relu = LayerStats("relu_a", "vector", "Relu", cycles=8, vector_ops=256,
                      sram_ofmap_bytes=2048, energy_pj=230.4)
    pool = LayerStats("pool_a", "vector", "Pool", cycles=16, vector_ops=512,
                      sram_ofmap_bytes=1280, energy_pj=460.8)
    conv_b = LayerStats("conv_b", "systolic", "4x4x4->2x2x2 3x3", dense_macs=288, macs=144,
                        cycles=50, pe_cycles=51200, mapped_pe_cycles=1000,
                        sram_ifmap_bytes=10, dram_ofmap_bytes=32, energy_pj=1000.0,
                        extra={"folds": 1, "skipped": 144})
    return [conv_a, relu, pool, conv_b]


def result_fixture() -> SimResult:
    return SimResult(np.zeros((1, 2)), stats_fixture(), ARCH, "run", "float32", "systolic", 0.5)


# ---- number formatting --------------------------------------------------------------------

@pytest.mark.parametrize("fn, value, text", [
    (table.fmt_count, 512, "512"), (table.fmt_count, 4096, "4.10 k"),
    (table.fmt_count, 118_013_952, "118 M"), (table.fmt_count, 1_814_073_344, "1.81 G"),
    (table.fmt_count, 57_802_752, "57.8 M"),
    (table.fmt_bytes, 0, "0 B"), (table.fmt_bytes, 1536, "1.50 KiB"),
    (table.fmt_bytes, 90_071_992, "85.9 MiB"),
    (table.fmt_energy, 230.4, "230 pJ"), (table.fmt_energy, 2.5e6, "2.50 uJ"),
    (table.fmt_energy, 24.3e9, "24.3 mJ"),
    (table.fmt_seconds, 3.007911e-3, "3.01 ms"), (table.fmt_seconds, 889e-9, "889 ns"),
    (table.fmt_seconds, 2.0, "2 s"),
    # rounded up to the next unit, never '1000 k', '1024 KiB', '1000 nJ' or '1e+03 ms'
    (table.fmt_count, 999_600, "1.00 M"), (table.fmt_count, 9_996, "10.0 k"),
    (table.fmt_count, 99_960, "100 k"), (table.fmt_count, 999, "999"),
    (table.fmt_bytes, 1023.8 * 1024, "1.00 MiB"), (table.fmt_bytes, 1000 * 1024, "1000 KiB"),
    (table.fmt_energy, 999_700, "1.00 uJ"), (table.fmt_energy, 999.7, "1.00 nJ"),
    (table.fmt_seconds, 0.9996, "1 s"), (table.fmt_seconds, 999.6e-6, "1 ms"),
    (table.fmt_seconds, 2_000.0, "2,000 s"),
])
def test_number_formatting(fn, value, text):
    assert fn(value) == text


# ---- terminal table -----------------------------------------------------------------------

def rows_of(text: str) -> dict[str, list[str]]:
    """Table rows by first cell, split on the column rule."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) == 12:
            rows[cells[0]] = cells
    return rows


def test_table_has_each_conv_one_vector_row_and_totals():
    text = render(result_fixture(), "tiny on systolic", width=160)
    assert text.splitlines()[0] == "tiny on systolic"
    rows = rows_of(text)
    assert list(rows) == ["layer", "conv_a", "conv_b", "vector unit", "total"]
    assert rows["conv_a"][1:] == ["3x8x8->4x8x8 3x3", "6.91 k", "6.91 k", "90", "10", "100",
                                  "dram", "6.8", "1.46 KiB", "2.17 KiB", "2.50 nJ"]
    assert rows["conv_b"][3] == "144" and rows["conv_b"][2] == "288"
    # the two vector ops summed: 24 cycles, 768 element ops on 32 lanes = 100 %
    assert rows["vector unit"][1:] == ["2 ops (768 elem.)", "-", "-", "24", "0", "24", "-",
                                       "100.0", "3.25 KiB", "0 B", "691 pJ"]
    # totals: 164 compute + 10 stall = 174 cycles; utilisation 7056 / 153600 MAC slots = 4.6 %
    assert rows["total"][4:9] == ["164", "10", "174", "", "4.6"]
    assert rows["total"][11] == "4.19 nJ"


def test_names_print_as_given_not_as_rich_markup_or_emoji_codes():
    """A layer's name is data: ``[/b]`` made rich raise (a closing tag with no opening one),
    ``:fire:`` printed an emoji."""
    stats = [s.renamed("conv[/b]:fire:") if s.name == "conv_a" else s for s in stats_fixture()]
    result = SimResult(None, stats, ARCH, "run", "float32", "systolic", 0.5)
    assert "conv[/b]:fire:" in rows_of(render(result, width=160))


def test_stall_text_names_every_cause_and_they_add_up():
    import dataclasses

    from npusim.report.table import stall_text

    st = dataclasses.replace(stats_fixture()[0], cycles=115, compute_cycles=100,
                             stall_dram_ifmap_cycles=1, stall_dram_filter_cycles=2,
                             stall_dram_ofmap_cycles=3, stall_sram_cycles=4,
                             stall_reconfig_cycles=5)
    assert stall_text(st) == ("100 compute + 15 stalled (13.0 % of the time: DRAM ifmap 1, "
                              "DRAM filter 2, DRAM ofmap 3, SRAM ports 4, reconfiguration 5)")


def test_totals_block_reads_cycles_time_utilisation_energy_traffic():
    text = render(result_fixture(), width=160)
    assert "cycles            174" in text
    assert "of which          164 compute + 10 stalled (5.7 % of the time: DRAM filter 10)" in text
    assert "time at 1000 MHz  174 ns (stalls included)" in text  # 174 cycles at 1 GHz
    assert "memory            SRAM ifmap 64 KiB, filter 64 KiB, ofmap 64 KiB" in text
    assert "utilisation       4.6 %" in text
    assert "energy            4.19 nJ" in text
    # 768 + 432 + (1024 + 32) = 2256 bytes
    assert "DRAM traffic      2.20 KiB (ifmap 768 B, filter 432 B, ofmap 1.03 KiB)" in text
    assert "simulated in      0.50 s" in text


def test_table_of_a_network_without_vector_ops():
    layers = [s for s in stats_fixture() if s.dataflow != "vector"]
    result = SimResult(None, layers, ARCH, "estimate", "int8", "systolic", 0.0)
    assert list(rows_of(render(result, width=160))) == ["layer", "conv_a", "conv_b", "total"]


# ---- JSON ---------------------------------------------------------------------------------

def test_json_holds_run_arch_every_field_and_totals():
    doc = json.loads(to_json(result_fixture(), model="tiny", version="9.9",
                             run={"input": "chelsea", "batch": 1}))
    assert doc["schema_version"] == export.SCHEMA_VERSION
    assert (doc["npusim_version"], doc["model"], doc["mode"], doc["dtype"], doc["dataflow"]) \
        == ("9.9", "tiny", "run", "float32", "systolic")
    assert doc["input"] == "chelsea" and doc["batch"] == 1
    assert doc["arch"]["name"] == "systolic-32x32-ws"
    assert doc["arch"]["params"] == {"rows": 32, "cols": 32, "stationary": "ws", "stream_tile": 0}
    assert doc["arch"]["memory"]["ifmap_sram_kb"] == 64
    assert doc["arch"]["energy"]["dram_byte_pj"] == ARCH.energy.dram_byte_pj
    assert [layer["name"] for layer in doc["layers"]] == ["conv_a", "relu_a", "pool_a", "conv_b"]
    conv_b = doc["layers"][3]
    assert conv_b["extra"] == {"folds": 1, "skipped": 144}
    assert conv_b["macs"] == 144 and conv_b["dense_macs"] == 288
    assert conv_b["utilisation"] == pytest.approx(144 / 51200)
    assert conv_b["mapping_efficiency"] == pytest.approx(1000 / 51200)
    assert conv_b["sram_bytes"] == 10 and conv_b["dram_bytes"] == 32


def test_json_totals_are_the_sum_of_its_layers():
    doc = json.loads(to_json(result_fixture(), model="tiny", version="0"))
    totals = doc["totals"]
    for key in ("cycles", "macs", "dense_macs", "pe_cycles", "dram_bytes", "sram_bytes",
                "vector_ops"):
        assert totals[key] == sum(layer[key] for layer in doc["layers"]), key
    assert totals["energy_pj"] == pytest.approx(sum(la["energy_pj"] for la in doc["layers"]))
    assert totals["extra"] == {"folds": 3, "skipped": 144}
    assert totals["utilisation"] == pytest.approx(7056 / 153600)
    assert totals["time_s"] == pytest.approx(174 / 1e9)
    assert totals["compute_time_s"] == pytest.approx(164 / 1e9)
    assert totals["stall_cycles"] == 10 and totals["stalled_share"] == pytest.approx(10 / 174)
    assert totals["memory"].startswith("SRAM ifmap 64 KiB")
    assert doc["layers"][0]["bound"] == "dram" and doc["layers"][0]["compute_cycles"] == 90


def test_json_of_a_real_run_carries_the_dataflows_cycle_count():
    """A 3x3 conv, C=8, K=16 on 10x10 on the 32x32 WS array: SCALE-Sim's count is
    ceil(72/32) * ceil(16/32) folds of (2*32 + 32 + 100 - 2) cycles, minus one."""
    rng = np.random.default_rng(1)
    g = npusim.GraphBuilder("one", (1, 8, 10, 10))
    g.relu(g.conv(g.input, rng.standard_normal((16, 8, 3, 3)), padding=1, name="c"))
    free = ARCH.with_memory(dram_bytes_per_cycle="unlimited")
    result = npusim.simulate(g.build(), rng.standard_normal((1, 8, 10, 10)), free)
    doc = json.loads(to_json(result, model="one", version=npusim.__version__))
    conv = doc["layers"][0]
    assert conv["cycles"] == conv["compute_cycles"] == 3 * 1 * (2 * 32 + 32 + 100 - 2) - 1
    assert conv["macs"] == 16 * 100 * 72
    assert doc["layers"][1]["dataflow"] == "vector"
    assert doc["totals"]["cycles"] == conv["cycles"] + math.ceil(1600 / 32)


# ---- CSV ----------------------------------------------------------------------------------

def test_csv_has_one_row_per_layer_and_a_total_row():
    rows = list(csv.DictReader(io.StringIO(to_csv(result_fixture()))))
    assert [r["name"] for r in rows] == ["conv_a", "relu_a", "pool_a", "conv_b", "total"]
    assert int(rows[-1]["cycles"]) == sum(int(r["cycles"]) for r in rows[:-1]) == 174
    assert float(rows[-1]["energy_pj"]) == pytest.approx(4191.2)
    # extras are columns; a layer without one has 0
    assert [r["skipped"] for r in rows] == ["0", "0", "0", "144", "144"]
    assert [r["folds"] for r in rows] == ["2", "0", "0", "1", "3"]
    assert float(rows[0]["utilisation"]) == pytest.approx(6912 / 102400)


def test_csv_header_is_every_stats_field_then_the_extras():
    header = to_csv(result_fixture()).splitlines()[0].split(",")
    assert header[:3] == ["name", "dataflow", "shape"]
    for key in ("dense_macs", "macs", "cycles", "pe_cycles", "mapped_pe_cycles",
                "sram_ifmap_bytes", "dram_ofmap_bytes", "vector_ops", "energy_pj",
                "utilisation", "mapping_efficiency", "sram_bytes", "dram_bytes",
                "compute_cycles", "stall_dram_ifmap_cycles", "stall_dram_filter_cycles",
                "stall_dram_ofmap_cycles", "stall_sram_cycles", "bound", "stall_cycles",
                "stalled_share"):
        assert key in header
    assert header[-2:] == ["folds", "skipped"]


@pytest.mark.parametrize("width", [60, 80, 100])
def test_narrow_terminal_keeps_every_number_whole(width):
    result = result_fixture()
    text = render(result, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    for number in ("6.91 k", "100", "6.8", "1.46 KiB", "2.17 KiB", "2.50 nJ", "4.19 nJ"):
        assert number in text
    assert "…" not in text
    wide = render(result, width=200)
    assert "3x8x8->4x8x8 3x3" in wide and "│" in wide


# ---- --check ------------------------------------------------------------------------------

def test_relative_error_is_scaled_by_the_reference_range():
    ref = np.array([[-4.0, 0.0], [2.0, 1.0]])
    assert check.relative_error(ref + [[0, 0], [0, 0.2]], ref) == pytest.approx(0.05)
    assert check.relative_error(ref, ref) == 0.0
    assert check.relative_error(np.full(3, 0.5), np.zeros(3)) == 0.5  # absolute when ref is 0


def test_int8_bound_holds_for_the_true_int8_result_and_not_for_a_wrong_one():
    """The bound of ``int8_bound`` contains exact int8 conv results (quant + exact integer
    reference), and a result off by two output steps everywhere breaks it."""
    rng = np.random.default_rng(3)
    x = np.maximum(rng.standard_normal((1, 6, 9, 9)), 0).astype(np.float32)
    op = Conv(rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
              rng.standard_normal(4).astype(np.float32), stride=2, padding=1, groups=2)
    node = Node("c", op, ("input",))
    layer = op.layer([x.shape], "c").with_dtype("int8")
    xq, sx = quant.quantize_activations(x)
    wq, sw = quant.quantize_weights(op.weight)
    acc = reference.conv2d(xq, wq, quant.quantize_bias(op.bias, sx, sw), layer)
    y = quant.requantize(acc, sx, sw).dequantize()
    ref = check.torch_conv(node, op, x)
    bound = check.int8_bound(node, x, y)
    assert np.all(np.abs(y - ref) <= bound)
    step = np.abs(y).max() / 127
    assert np.any(np.abs(y + 2 * step - ref) > bound)


def test_check_of_a_dead_int8_conv_passes_and_a_live_one_is_judged():
    """A conv with all-zero weights gives exact zeros in int8 as in float and passes."""
    rng = np.random.default_rng(5)
    g = npusim.GraphBuilder("dead", (1, 3, 6, 6))
    dead = g.conv(g.input, np.zeros((4, 3, 3, 3)), padding=1, name="dead")
    live = g.conv(g.input, rng.standard_normal((4, 3, 1, 1)), name="live")
    g.conv(g.add(dead, g.relu(live)), np.ones((2, 4, 1, 1)), name="after")
    graph = g.build()
    x = rng.standard_normal((1, 3, 6, 6))
    result = npusim.simulate(graph, x, ARCH, dtype="int8", keep_outputs=True)
    outcome = check.check(graph, x, result)
    assert outcome.passed and outcome.nodes == 3 and 0 < outcome.score <= 1
    assert np.all(result.outputs["dead"] == 0)


@pytest.mark.parametrize("preset", ["input-reuse-1024", "sparse-pairs-32x32", "systolic-32x32-ws",
                                    "group-tile-64mac", "dilated-grid-2x2-h3"])
def test_json_layers_carry_every_documented_field_whatever_their_extras(preset):
    """Every field of LayerStats is a key of each layer and of the totals (input-reuse's
    products were dropped: its extra counts held the same key, now gone), and the totals
    are the layers' sums."""
    from dataclasses import fields

    from npusim.stats import LayerStats

    rng = np.random.default_rng(2)
    g = npusim.GraphBuilder("one", (1, 8, 12, 12))
    w = rng.standard_normal((16, 8, 3, 3)) * (rng.random((16, 8, 3, 3)) < 0.5)
    g.relu(g.conv(g.input, w, padding=1, name="c"))
    doc = json.loads(to_json(npusim.simulate(g.build(), rng.standard_normal((1, 8, 12, 12)),
                                             preset), model="one", version=npusim.__version__))
    names = {f.name for f in fields(LayerStats)} - {"extra"}
    for record in [*doc["layers"], doc["totals"]]:
        assert names <= set(record), names - set(record)
    conv = doc["layers"][0]
    assert conv["products"] >= conv["macs"] and "products" not in conv["extra"]
    assert doc["totals"]["products"] == sum(layer["products"] for layer in doc["layers"])
