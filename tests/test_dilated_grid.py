"""The dilated-grid dataflow (seed 002): fast path against the float64 / exact-integer
reference and torch, the cycle emulator against the fast model (outputs and every count;
every LayerStats field in test_dilated_grid_levels.py), and the patent's numbers."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors, torch_conv

import npusim
from npusim import reference
from npusim.arch.spec import arch_from_toml_text
from npusim.dataflows import get
from npusim.dataflows.dilated_grid import (
    Params,
    count,
    dilated_conv,
    expand_filter,
    steps,
    zero_inserted,
)
from npusim.emulate import dilated_grid as emu
from npusim.errors import ConfigError
from npusim.ir import ConvLayer
from npusim.memory import dense_dram_bytes

DF = get("dilated-grid")


def arch_with(bandwidth=10.0, memory=None, **params):
    """The flat preset with its [dilated-grid] section replaced by ``params``, at DRAM
    ``bandwidth`` (bytes/cycle or "unlimited") and the ``memory`` fields given."""
    arch = npusim.load_arch("dilated-grid-2x2")
    mem = dataclasses.replace(arch.memory, dram_bytes_per_cycle=bandwidth, **(memory or {}))
    return dataclasses.replace(arch, memory=mem, sections={**arch.sections,
                                                           "dilated-grid": Params(**params)})


@st.composite
def grid_layers(draw):
    """Small layers for the emulator: rate 1..7, kernel 2, 3 or 5, strides, groups, pads, batch."""
    rate, k = draw(st.integers(1, 7)), draw(st.sampled_from([2, 3, 5]))
    groups = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, rate)) for _ in range(4))
    span = rate * (k - 1) + 1
    h = draw(st.integers(max(1, span - pad[0] - pad[1]), span + 4))
    w = draw(st.integers(max(1, span - pad[2] - pad[3]), span + 4))
    n, cg, kg = (draw(st.integers(1, 2)) for _ in range(3))
    return ConvLayer(n, groups * cg, h, w, groups * kg, k, k, draw(st.integers(1, 2)), pad,
                     rate, groups, draw(st.booleans()))


def relabel(ids: np.ndarray) -> np.ndarray:
    """Block ids renumbered by first appearance."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]


@st.composite
def machines(draw):
    """Grid geometries: flat or hierarchical, small or large grids, 1x1 to 2x3 MAC tiles."""
    grid = draw(st.integers(3, 12))
    return Params(grid_rows=grid, grid_cols=draw(st.integers(3, 12)),
                  coef_rows=draw(st.integers(1, 5)), coef_cols=draw(st.integers(1, 5)),
                  mac_rows=draw(st.integers(1, 2)), mac_cols=draw(st.integers(1, 3)),
                  shifter=draw(st.sampled_from(["flat", "hierarchical"])),
                  levels=draw(st.integers(1, 3)), load_pixels_per_cycle=draw(st.integers(1, 8)),
                  double_buffer=draw(st.booleans()),
                  coef_loads_per_cycle=draw(st.integers(1, 4)),
                  result_words_per_cycle=draw(st.integers(1, 6)),
                  loop_order=draw(st.sampled_from(["tile-major", "map-major"])))


@given(conv_layers(), st.integers(0, 2 ** 16))
def test_fast_path_float32_matches_float64_reference(layer, seed):
    x, w, b = tensors(layer, seed)
    assert rel_err(dilated_conv(layer, x, w, b), reference.conv2d(x, w, b, layer)) < 1e-5


@given(conv_layers(), st.integers(0, 2 ** 16))
def test_fast_path_int8_is_bit_identical_to_exact_reference(layer, seed):
    layer = layer.with_dtype("int8")
    x, w, b = tensors(layer, seed, "int8")
    out = dilated_conv(layer, x, w, b)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, reference.conv2d(x, w, b, layer))


@pytest.mark.parametrize("rate", [1, 2, 4, 7])
def test_conv2d_entry_matches_torch_at_large_rates(rate):
    layer = ConvLayer(2, 4, 20, 17, 6, 3, 3, padding=rate, dilation=rate, bias=True)
    x, w, b = tensors(layer, rate)
    out, st_ = npusim.conv2d(x, w, b, padding=rate, dilation=rate, dataflow="dilated-grid",
                             arch="dilated-grid-2x2-h3")
    assert rel_err(out, torch_conv(layer, x, w, b)) < 1e-5
    assert st_.macs == layer.macs and st_.dataflow == "dilated-grid"


@settings(max_examples=40)
@given(grid_layers(), machines(), st.integers(0, 2 ** 16),
       st.sampled_from(["unlimited", 0.2, 1.5, 30.0]), st.booleans())
def test_emulator_equals_fast_model_outputs_and_counts(layer, p, seed, bandwidth, double):
    """Counts, and the memory steps the emulator logged as it ran against the fast model's:
    equal step by step, so equal cycles, stalls and DRAM bytes on 1 KiB buffers (inputs
    overflow) at small and large bandwidths. (Block ids: each level numbers its own.)"""
    x, w, b = tensors(layer, seed)
    out, counts, logged = emu.emulate(layer, x, w, b, p)
    assert counts == count(layer, p)
    assert rel_err(out, reference.conv2d(x, w, b, layer)) < 1e-5
    fast = steps(layer, p)
    for name in ("compute", "ifmap_bytes", "filter_bytes", "ofmap_bytes", "psum_bytes",
                 "sram_bytes"):
        np.testing.assert_array_equal(getattr(logged, name), getattr(fast, name), name)
    for name in ("ifmap", "filter", "ofmap"):  # the same blocks, whatever their numbers
        np.testing.assert_array_equal(relabel(getattr(logged, name)),
                                      relabel(getattr(fast, name)), name)
    arch = dataclasses.replace(arch_with(bandwidth, {"ifmap_sram_kb": 1, "filter_sram_kb": 1,
                                                     "ofmap_sram_kb": 1,
                                                     "double_buffered": double}),
                               sections={"dilated-grid": p})
    assert DF.emulate(layer, x, w, b, arch)[1] == DF.estimate(layer, None, None, arch)


@settings(max_examples=15)
@given(grid_layers(), machines(), st.integers(0, 2 ** 16))
def test_emulator_int8_is_bit_identical_to_fast_path(layer, p, seed):
    layer = layer.with_dtype("int8")
    x, w, b = tensors(layer, seed, "int8")
    out, counts, _ = emu.emulate(layer, x, w, b, p)
    np.testing.assert_array_equal(out, dilated_conv(layer, x, w, b))
    assert counts == count(layer, p)


@pytest.mark.parametrize("rate", range(1, 8))
@pytest.mark.parametrize("k", [2, 3, 5])
def test_emulate_entry_agrees_with_run_for_each_rate_and_kernel(rate, k):
    layer = ConvLayer(1, 2, rate * (k - 1) + 3, rate * (k - 1) + 2, 2, k, k, dilation=rate)
    x, w, _ = tensors(layer, rate * 10 + k)
    arch = "dilated-grid-2x2-h3"
    out_e, st_e = npusim.conv2d(x, w, dilation=rate, dataflow="dilated-grid", arch=arch,
                                emulate=True)
    out_r, st_r = npusim.conv2d(x, w, dilation=rate, dataflow="dilated-grid", arch=arch)
    assert st_e == st_r
    assert rel_err(out_e, out_r) < 1e-5


@given(conv_layers(), st.integers(0, 2 ** 16))
def test_run_stats_are_sane_on_random_layers(layer, seed):
    """run's stats (the fast model's estimate: run does not count on its own, the
    emulator checks it) against the layer's own arithmetic: every MAC done once."""
    arch = npusim.load_arch("dilated-grid-2x2")
    x, w, b = tensors(layer, seed, density=0.5)
    _, ran = DF.run(layer, x, w, b, arch)
    assert ran.macs == ran.dense_macs == layer.N * layer.K * layer.P * layer.Q * layer.Cg \
        * layer.R * layer.S
    assert ran.products >= ran.macs and 0 < ran.utilisation <= 1
    assert ran.compute_cycles >= ran.products / 4
    assert ran.mapped_pe_cycles <= ran.pe_cycles


@pytest.mark.parametrize("rate", range(1, 8))
def test_nine_steps_per_pixel_set_for_3x3_at_any_rate(rate):
    p = Params(grid_rows=16, grid_cols=16, levels=3)
    layer = ConvLayer(1, 1, 24, 24, 1, 3, 3, dilation=rate, padding=rate)
    c = count(layer, p)
    assert c.steps == 9 * c.pixel_sets


@pytest.mark.parametrize("rate, steps", [(1, 9), (2, 25), (4, 81)])
def test_zero_inserted_filter_takes_25_at_rate2_and_81_at_rate4(rate, steps):
    p = Params(grid_rows=16, grid_cols=16, coef_rows=9, coef_cols=9)
    layer = zero_inserted(ConvLayer(1, 1, 24, 24, 1, 3, 3, dilation=rate, padding=rate))
    c = count(layer, p)
    assert (layer.R, layer.S) == (2 * rate + 1, 2 * rate + 1)
    assert c.steps == steps * c.pixel_sets


def test_stats_count_the_skipped_zero_taps():
    arch = npusim.load_arch("dilated-grid-2x2-h3")
    layer = ConvLayer(1, 3, 30, 30, 4, 3, 3, dilation=4, padding=4)
    s = DF.estimate(layer, None, None, arch)
    zi = count(zero_inserted(layer), arch.params("dilated-grid"))
    assert s.extra["zero_inserted_steps"] == zi.steps == 81 / 9 * s.extra["steps"]
    assert s.extra["skipped_zero_taps"] == zi.steps - s.extra["steps"]


@given(conv_layers(), st.integers(0, 2 ** 16))
def test_eq4_zero_inserted_filter_gives_the_dilated_conv(layer, seed):
    x, w, b = tensors(layer, seed)
    zi = zero_inserted(layer)
    assert rel_err(reference.conv2d(x, expand_filter(w, layer.dilation), b, zi),
                   reference.conv2d(x, w, b, layer)) < 1e-12


def test_fig10_grid_state_after_step1_at_rate2():
    """The type-A unit 1-1 holds D(3,1) and the coefficient unit C(2,1) after one step."""
    layer = ConvLayer(1, 1, 6, 6, 1, 3, 3, dilation=2)
    m = emu.Machine(layer, Params(), np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6) + 1,
                    np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3) + 1, None, "wrap",
                    np.float32)
    ld = m.start_load(emu.jobs(layer, Params())[0])
    while not ld.done:
        m.load_cycle(ld)
    active = emu.begin(m, ld, 0)
    emu.mac_step(m, active)
    # D(x, y) = pixel row y - 1, column x - 1 = 6 (y - 1) + x; C(x, y) = 3 (y - 1) + x
    assert ld.pixels[0, 0] == 3 and ld.coefs[0, 0] == 2       # D(3,1), C(2,1)
    assert ld.pixels[1, 1] == 6 * 1 + 4                         # unit 2-2 holds D(4,2)
    assert m.acc[0, 0] == 1 * 1                                 # step 1: D(1,1) C(1,1)


@pytest.mark.parametrize("rate", [1, 2])
def test_zero_fill_edges_lose_pixels_and_wrap_does_not(rate):
    layer = ConvLayer(1, 1, 10, 10, 1, 3, 3, dilation=rate)
    x, w, _ = tensors(layer, 3)
    ref = reference.conv2d(x, w, None, layer)
    wrapped, *_ = emu.emulate(layer, x, w, None, Params(), edge="wrap")
    zeroed, *_ = emu.emulate(layer, x, w, None, Params(), edge="zero")
    assert rel_err(wrapped, ref) < 1e-5
    assert rel_err(zeroed, ref) > 0.1


def test_flat_grid_steps_only_rates_1_and_2():
    flat = Params(shifter="flat")
    for rate, runs in [(1, 1), (2, 1), (3, 9)]:
        layer = ConvLayer(1, 1, 12, 12, 1, 3, 3, dilation=rate)
        assert count(layer, flat).pixel_sets == runs * count(layer, flat).tiles
    with pytest.raises(ConfigError, match="shifter='flat': a shift of 3 needs links at distance"):
        emu.Shifter(flat, "wrap").shift(np.zeros((6, 6)), 0, 3)


def test_double_buffering_hides_loads_behind_steps():
    layer = ConvLayer(1, 2, 14, 14, 2, 3, 3, dilation=2, padding=2)
    single = count(layer, Params(double_buffer=False))
    double = count(layer, Params(double_buffer=True))
    # 98 tiles x 2 input maps, one 6 x 6 set each (6 load cycles, 9 steps); a tile ends
    # with a 1-cycle register write (4 MACs, 4 words a cycle). Single buffer: every load
    # is exposed, each write but the last hides behind the next load (the grid is free).
    assert single.cycles == single.steps + single.load_cycles + 1
    # double: only the first load shows; the 98 writes stop the MAC unit every time
    assert double.cycles == double.steps + 6 + 98 == 1764 + 104


def test_stride_keeps_every_strided_output():
    layer = ConvLayer(1, 1, 9, 9, 1, 3, 3, stride=2, dilation=2)
    x, w, _ = tensors(layer, 5)
    out, counts, _ = emu.emulate(layer, x, w, None, Params())
    assert rel_err(out, reference.conv2d(x, w, None, layer)) < 1e-5
    assert counts.tiles == 3 * 3  # (P - 1) * 2 + 1 = 5 dense rows: 3 tiles of 2


def test_preset_has_four_macs_and_a_four_mac_systolic_baseline():
    for name in ("dilated-grid-2x2", "dilated-grid-2x2-h3"):
        arch = npusim.load_arch(name)
        sys_ = arch.params("systolic")
        assert arch.params("dilated-grid").macs == 4 == sys_.rows * sys_.cols
    base = npusim.load_arch("systolic-2x2-ws").params("systolic")
    assert base.rows * base.cols == 4


def test_params_errors_name_the_file_and_key():
    with pytest.raises(ConfigError, match=r"dilated-grid.mac_rows=7: must be <= grid_rows=6"):
        arch_from_toml_text('[dilated-grid]\nmac_rows = 7\n', "a.toml")
    with pytest.raises(ConfigError, match=r"a.toml: dilated-grid: unknown key\(s\) grid; valid"):
        arch_from_toml_text('[dilated-grid]\ngrid = 7\n', "a.toml")
    with pytest.raises(ConfigError, match=r"a.toml: dilated-grid.shifter='tree': must be one "
                                          r"of flat, hierarchical"):
        arch_from_toml_text('[dilated-grid]\nshifter = "tree"\n', "a.toml")
    with pytest.raises(ConfigError, match="edge='clamp': must be one of wrap, zero"):
        emu.emulate(ConvLayer(1, 1, 4, 4, 1, 2, 2), np.zeros((1, 1, 4, 4), np.float32),
                    np.zeros((1, 1, 2, 2), np.float32), None, Params(), edge="clamp")


def test_simulate_modes_agree_on_a_small_dilated_network():
    rng = np.random.default_rng(0)
    g = npusim.GraphBuilder("tiny", (1, 2, 12, 12))
    x = g.relu(g.conv(g.input, rng.standard_normal((3, 2, 3, 3)), dilation=2, padding=2))
    x = g.conv(x, rng.standard_normal((2, 3, 2, 2)), dilation=3, padding=(1, 2, 1, 2))
    graph = g.build(x)
    img = rng.standard_normal((1, 2, 12, 12)).astype(np.float32)
    arch = arch_with(grid_rows=8, grid_cols=8)
    runs = {m: npusim.simulate(graph, img, arch, mode=m, dataflow="dilated-grid", dtype="int8")
            for m in ("run", "estimate", "emulate")}
    assert runs["run"].layers == runs["estimate"].layers == runs["emulate"].layers
    np.testing.assert_array_equal(runs["run"].output, runs["emulate"].output)


def test_input_larger_than_its_buffer_is_streamed_again_for_each_output_map():
    """3x3 on a 40 x 40 int8 map, 2 output maps, 2 x 2 MACs: each map streams the whole
    input through the grid, 19 tile rows (bands of 4 input rows, then 2 new rows each:
    4 + 18 x 2 = 40 rows of 40 pixels). In a 64 KiB buffer the 1,600 bytes stay for the
    second map; in 1 KiB (512 bytes active, double buffered) they are fetched again."""
    layer = ConvLayer(1, 1, 40, 40, 2, 3, 3, dtype="int8")
    fits = DF.estimate(layer, None, None, arch_with(10.0))
    over = DF.estimate(layer, None, None, arch_with(10.0, {"ifmap_sram_kb": 1}))
    assert (fits.dram_ifmap_bytes, over.dram_ifmap_bytes) == (1600, 2 * 1600)
    assert fits.dram_filter_bytes == over.dram_filter_bytes == 2 * 9
    assert fits.dram_ofmap_bytes == over.dram_ofmap_bytes == 2 * 38 * 38
    assert (fits.dram_ifmap_bytes, fits.dram_filter_bytes, fits.dram_ofmap_bytes) == \
        dense_dram_bytes(layer, 1)
    assert fits.compute_cycles == over.compute_cycles == count(layer, Params(shifter="flat",
                                                                              levels=1)).cycles
    slow = DF.estimate(layer, None, None, arch_with(0.01, {"ifmap_sram_kb": 1}))
    assert slow.bound == "dram" and slow.cycles >= (3200 + 18 + 2888) / 0.01
    x, w, _ = tensors(layer, 4, "int8")
    assert DF.emulate(layer, x.astype(np.int8), w.astype(np.int8), None,
                      arch_with(0.01, {"ifmap_sram_kb": 1}))[1] == slow


def test_stall_free_cycles_are_the_grid_cycles():
    """Compute cycles are the grid's cycles in the tap runs the planner kept. At R = 4 on
    the 6 x 6 grid with 2 x 2 MACs a run of 2 taps fits (6 units); the planner cuts the
    rows into one-tap runs and keeps the columns' 2 + 1: a pixel set loads a row a cycle,
    so its 2-row sets (2 x 6, 2 x 2: 2 cycles each) keep up with the steps (2, 1), where a
    6-row set takes 6. Six passes of 2 cycles per tile and input map, 900 x 3 of them:
    32,402 cycles in all against 43,202 in the longest runs, at every bandwidth."""
    from npusim.dataflows.dilated_grid import compiled, plan

    layer = ConvLayer(1, 3, 30, 30, 4, 3, 3, dilation=4, padding=4)
    for bandwidth in ("unlimited", 0.5, 1000.0):
        lengths, s = compiled(layer, arch_with(bandwidth))
        assert lengths == (1, 2)
        assert s.compute_cycles == count(layer, Params(), plan(layer, Params(), lengths)).cycles
        assert (s.compute_cycles, count(layer, Params()).cycles) == (32402, 43202)
    assert DF.estimate(layer, None, None, arch_with("unlimited")).stall_cycles == 0
