"""The group-tile machine (seed 003): outputs against the float64 / exact-integer reference,
fast model against the cycle emulator (outputs and every count), estimate against run,
and the patent's utilisation examples against hand-derived cycle counts."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors

import npusim
from npusim import reference
from npusim.arch.spec import arch_from_toml_text
from npusim.dataflows.group_tile import NAME, Params, schedule
from npusim.emulate.group_tile import run_tiles, work_units
from npusim.errors import ConfigError
from npusim.ir import ConvLayer, GraphBuilder
from npusim.memory import dense_dram_bytes


def arch_with(bandwidth="unlimited", memory=None, **params) -> npusim.Arch:
    """The 64-MAC preset with its [group-tile] section replaced by ``params``, at DRAM
    ``bandwidth`` (bytes/cycle; "unlimited" = stall-free) and the ``memory`` fields given."""
    base = npusim.load_arch("group-tile-64mac")
    mem = dataclasses.replace(base.memory, dram_bytes_per_cycle=bandwidth, **(memory or {}))
    return dataclasses.replace(base, memory=mem, sections={NAME: Params(**params)})


tile_params = st.builds(Params, macs=st.integers(1, 9), tiles=st.integers(1, 3),
                        bus_inputs=st.integers(1, 4), wide_words_per_cycle=st.integers(1, 4),
                        output_bus_values=st.integers(1, 5))


@settings(max_examples=40)
@given(conv_layers(max_hw=5, max_c=4, max_k=4, max_rs=3), tile_params, st.integers(0, 99),
       st.sampled_from(["float32", "int8"]), st.sampled_from(["unlimited", 0.3, 2.0, 40.0]),
       st.integers(1, 2), st.booleans())
def test_run_matches_reference_and_emulator(layer, params, seed, dtype, bandwidth, kib,
                                            double):
    """Outputs and every stat, stalls and DRAM bytes included, on small buffers (1-2 KiB,
    so parameters and inputs overflow) at small and large bandwidths."""
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype)
    arch = arch_with(bandwidth, {"filter_sram_kb": kib, "ifmap_sram_kb": kib,
                                 "ofmap_sram_kb": kib, "double_buffered": double},
                     **dataclasses.asdict(params))
    df = npusim.dataflows.get(NAME)
    out, stats = df.run(layer, x, w, b, arch)
    ref = reference.conv2d(x, w, b, layer)
    if dtype == "int8":
        assert out.dtype == np.int32 and np.array_equal(out, ref)
    else:
        assert rel_err(out, ref) < 1e-5
    emu_out, emu_stats = df.emulate(layer, x, w, b, arch)
    assert np.array_equal(emu_out, out)  # same products in the same order: bit-identical
    assert emu_stats == stats


def test_conv2d_reaches_all_three_levels():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 6, 7, 5)).astype(np.float32)
    w = rng.standard_normal((9, 2, 3, 3)).astype(np.float32)
    kw = dict(stride=2, padding=(1, 0), dilation=(1, 2), groups=3, dataflow=NAME,
              arch="group-tile-32mac")
    out, st_run = npusim.conv2d(x, w, **kw)
    emu, st_emu = npusim.conv2d(x, w, emulate=True, **kw)
    layer = ConvLayer(2, 6, 7, 5, 9, 3, 3, 2, (1, 1, 0, 0), (1, 2), 3)
    assert rel_err(out, reference.conv2d(x, w, None, layer)) < 1e-5
    assert np.array_equal(out, emu) and st_run == st_emu


def test_simulate_estimate_gives_the_run_stats():
    rng = np.random.default_rng(2)
    g = GraphBuilder("tiny", (1, 8, 6, 6))
    y = g.relu(g.conv(g.input, rng.standard_normal((16, 8, 1, 1)), name="expand"))
    y = g.conv(y, rng.standard_normal((16, 4, 3, 3)), padding=1, groups=4, name="grouped")
    g.conv(y, rng.standard_normal((8, 16, 1, 1)), rng.standard_normal(8), name="project")
    graph = g.build()
    x = np.maximum(rng.standard_normal((1, 8, 6, 6)), 0).astype(np.float32)
    for dtype in ("float32", "int8"):
        run = npusim.simulate(graph, x, "group-tile-64mac", mode="run", dtype=dtype)
        est = npusim.simulate(graph, x, "group-tile-64mac", mode="estimate", dtype=dtype)
        emu = npusim.simulate(graph, x, "group-tile-64mac", mode="emulate", dtype=dtype)
        assert run.layers == est.layers == emu.layers
        assert np.array_equal(run.output, emu.output)


def test_group_size_64_on_64_macs_keeps_every_mac_busy():
    """Fig. 8's example: input depth 64 per partition, group size 64 = MACs: each broadcast
    input feeds all 64 MACs, every compute cycle (100% input-bus utilisation)."""
    layer = ConvLayer(1, 128, 3, 3, 128, 1, 1, groups=2, dtype="int8")
    x, w, _ = tensors(layer, 3, "int8")
    run = run_tiles(layer, x, w, None, Params(macs=64, output_bus_values=64))
    busy = run.busy[0]
    compute = 3 * 3 * 2 * 64  # pixels x partitions x taps (one tap a cycle)
    assert np.all(busy[:compute] == 64)  # every MAC, every compute cycle
    assert len(busy) == compute + 1  # then one cycle drains the last 64 sums
    stats = npusim.dataflows.get(NAME).estimate(layer, x != 0, w != 0,
                                                 arch_with("unlimited", macs=64,
                                                           output_bus_values=64))
    assert stats.cycles == compute + 1
    assert stats.extra["broadcasts"] * 64 == stats.macs  # reuse factor 64


@pytest.mark.parametrize("macs", [32, 64])
def test_depthwise_uses_one_mac_per_broadcast(macs):
    """Depthwise (group size 1): each input has one output to feed, so one MAC of the tile
    works per cycle: 1/32 = 3.1% (the patent's 'about 3%') and 1/64 = 1.6%."""
    layer = ConvLayer(1, 96, 8, 8, 96, 3, 3, padding=1, groups=96, dtype="int8")
    stats = npusim.dataflows.get(NAME).estimate(layer, None, None,
                                                 arch_with("unlimited", macs=macs))
    units = 8 * 8 * 96
    assert stats.cycles == units * 9 + 1  # 9 taps a unit; the drain hides behind the next
    assert stats.utilisation == pytest.approx(1 / macs * units * 9 / (units * 9 + 1))


def test_per_mac_bus_mode_feeds_a_depthwise_layer_in_parallel():
    """Fig. 7B's second mode: the bus carries up to 64 inputs, one per MAC."""
    layer = ConvLayer(1, 64, 4, 4, 64, 3, 3, padding=1, groups=64, dtype="int8")
    one = npusim.dataflows.get(NAME).estimate(layer, None, None,
                                               arch_with("unlimited", bus_inputs=1))
    wide = npusim.dataflows.get(NAME).estimate(
        layer, None, None, arch_with("unlimited", bus_inputs=64, output_bus_values=64))
    assert wide.cycles == 16 * 9 + 1  # 16 pixels, all 64 channels at once
    assert one.cycles == 64 * 16 * 9 + 1
    assert wide.extra["broadcasts"] == one.extra["broadcasts"] == 64 * 16 * 9
    x, w, _ = tensors(layer, 5, "int8")
    busy = run_tiles(layer, x, w, None, Params(bus_inputs=64, output_bus_values=64)).busy[0]
    assert np.all(busy[:-1] == 64) and busy[-1] == 0  # 64 lanes, 64 MACs; a drain cycle


def test_cycles_are_the_slower_of_macs_and_weight_bandwidth():
    """A full 3x3 conv, 64 outputs: int8 weights fill 16 words a tap (MAC-bound); float32
    weights are a word each, 64 words a tap on a 16-word wide memory (4 cycles a tap). A
    128 KiB wide memory keeps the float32 block (36 KiB) whole, so no narrower one is
    weighed."""
    base = ConvLayer(1, 16, 4, 4, 64, 3, 3, padding=1)
    df = npusim.dataflows.get(NAME)
    taps, pixels = 16 * 9, 16
    for dtype, per_tap in (("int8", 1), ("float32", 4)):
        st_ = df.estimate(base.with_dtype(dtype), None, None, arch_with(
            "unlimited", wide_words_per_cycle=16, wide_kb=128))
        assert st_.cycles == pixels * taps * per_tap + math.ceil(64 / 16)
        assert st_.extra["weight_stall_cycles"] == pixels * taps * (per_tap - 1)
    narrow = df.estimate(base.with_dtype("int8"), None, None,
                         arch_with("unlimited", wide_words_per_cycle=8))
    assert narrow.cycles == pixels * taps * 2 + 4  # 16 words a tap over an 8-word memory


def test_tiles_split_the_loop_nest():
    layer = ConvLayer(2, 32, 6, 6, 32, 3, 3, padding=1, groups=1, dtype="int8")
    df = npusim.dataflows.get(NAME)
    one = df.estimate(layer, None, None, arch_with("unlimited", macs=32))
    four = df.estimate(layer, None, None, arch_with("unlimited", macs=32, tiles=4))
    assert one.cycles == 72 * 288 + 2 and four.cycles == 18 * 288 + 2
    assert four.macs == one.macs and four.pe_cycles == 4 * 32 * four.cycles


def test_arch_section_errors_name_the_key():
    text = 'dataflow = "group-tile"\n[group-tile]\nmacs = 0\n'
    with pytest.raises(ConfigError, match=r"t\.toml: group-tile\.macs=0: must be >= 1"):
        arch_from_toml_text(text, "t.toml")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) mac_cells; valid keys: bus_inputs"):
        arch_from_toml_text('[group-tile]\nmac_cells = 64\n', "t.toml")
    with pytest.raises(ConfigError, match=r"t\.toml: group-tile\.objective='area': must be one "
                                          r"of cycles, energy, energy-delay"):
        arch_from_toml_text('dataflow = "group-tile"\n[group-tile]\nobjective = "area"\n',
                            "t.toml")


def test_parameter_fetch_that_is_not_hidden_stalls_by_hand():
    """A 1x1 conv 16 -> 64 on two pixels, int8, 64 MACs, DRAM 4 bytes/cycle. Two steps of
    16 taps (one a cycle); the second also waits 4 cycles for the first's 64 sums
    (16 a cycle): compute 16 + 20. Weights 64 x 16 = 1024 bytes, input 2 x 16 = 32 bytes,
    outputs 64 bytes a step. The input row, held whole, would move its 32 bytes as the
    steps' own taps do (16 each): each step fetches its own. Double buffered:
    - weights fit the filter buffer: fetched once before step 0 with its 16 input bytes,
      exposed: 1040 / 4 = 260 cycles (256 weights, 4 input); step 1's 16 bytes load while
      step 0 runs; step 1's write-back of step 0 (16 cycles) hides behind its 20; the last
      64 bytes out: 16 cycles. 36 + 260 + 16 = 312;
    - weights larger than the buffer's active half (1 KiB / 2), in the 64-output block:
      every step fetches them again: step 0 (16 cycles) waits for step 1's 1024 bytes
      (256 cycles): 240 more, 556. The compiler runs two 32-output blocks instead, whose
      512 bytes each fit (330 cycles, test_group_tile_memory.py), so that 64-output
      schedule is run at its width here, on both levels."""
    from npusim.dataflows.group_tile import at_width, compiled
    from npusim.emulate.group_tile import emulate

    layer = ConvLayer(1, 16, 1, 2, 64, 1, 1, dtype="int8")
    df = npusim.dataflows.get(NAME)
    fits = df.estimate(layer, None, None, arch_with(4.0, output_bus_values=16))
    assert (fits.compute_cycles, fits.stall_dram_filter_cycles, fits.stall_dram_ifmap_cycles,
            fits.stall_dram_ofmap_cycles, fits.cycles) == (36, 256, 4, 16, 312)
    assert (fits.dram_filter_bytes, fits.dram_ifmap_bytes, fits.dram_ofmap_bytes) == (1024, 32,
                                                                                      128)
    small = arch_with(4.0, {"filter_sram_kb": 1}, output_bus_values=16)
    over = at_width(layer, small, 64)
    assert (over.stall_dram_filter_cycles, over.cycles, over.dram_filter_bytes) == (496, 556,
                                                                                    2048)
    assert over.bound == "dram"
    x, w, _ = tensors(layer, 1, "int8")
    assert emulate(layer, x, w, None, small, 64)[1] == over
    assert compiled(layer, small)[0] == 32 and df.estimate(layer, None, None, small).cycles == 330
    serial = df.estimate(layer, None, None,
                         arch_with(4.0, {"double_buffered": False}, output_bus_values=16))
    assert serial.cycles == 260 + 16 + 16 + 4 + 20 + 16  # fetch, compute, write-back, each step


def test_weights_fetched_once_equal_the_dense_tensors():
    """Where everything fits, DRAM traffic is each tensor once (the dense sizes)."""
    layer = ConvLayer(2, 32, 9, 7, 64, 3, 3, stride=2, padding=1, groups=4, dtype="int8")
    st_ = npusim.dataflows.get(NAME).estimate(layer, None, None, arch_with(10.0))
    assert (st_.dram_ifmap_bytes, st_.dram_filter_bytes, st_.dram_ofmap_bytes) == \
        dense_dram_bytes(layer, 1)
    assert st_.cycles >= max(st_.compute_cycles, st_.dram_bytes / 10.0)


def test_weights_larger_than_the_buffer_run_in_chunks_each_fetched_once():
    """A 1x1 conv 64 -> 128 on a 4 x 4 map, int8, 64 MACs: two output blocks of 64 x 64 =
    4 KiB. An 8 KiB filter buffer keeps 4 KiB (double buffered): not both blocks, so the
    controller runs block 0 over every pixel, then block 1. Each is fetched once (8 KiB in
    all; pixel-major order would fetch both for each of the 16 pixels: 128 KiB), and the
    1 KiB input, kept in the ifmap buffer, is read once. Stall-free cycles are the same
    32 steps of 64 taps as in pixel-major order."""
    layer = ConvLayer(1, 64, 4, 4, 128, 1, 1, dtype="int8")
    df = npusim.dataflows.get(NAME)
    small = arch_with(17.064, {"filter_sram_kb": 8})
    st_ = df.estimate(layer, None, None, small)
    assert (st_.dram_filter_bytes, st_.dram_ifmap_bytes, st_.dram_ofmap_bytes) == (8192, 1024,
                                                                                   2048)
    assert st_.compute_cycles == schedule(layer, Params()).cycles == 32 * 64 + 4
    x, w, _ = tensors(layer, 2, "int8")
    out, emu = df.emulate(layer, x, w, None, small)
    assert emu == st_
    np.testing.assert_array_equal(out, reference.conv2d(x, w, None, layer))
    order = [(u.p, u.q, u.k0) for u in work_units(layer, 64, 4096)]
    assert order[:16] == [(p, q, 0) for p in range(4) for q in range(4)]
    assert order[16] == (0, 0, 64)
