"""The dilated-grid cycle emulator against the fast model on every LayerStats field
(cycles, MACs, products, bytes per operand at SRAM and DRAM, stalls by cause, energy,
the machine's own counters), on random layers and machines, with buffers that overflow
and all-zero tensors; and proof that the two levels are independent: a fault planted in
one of them (the fast model's tap runs, its DRAM ifmap bytes) makes them disagree."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import conv_layers, tensors
from test_dilated_grid import arch_with, machines

import npusim
from npusim.dataflows import dilated_grid, get, shift_grid
from npusim.emulate import dilated_grid as emu
from npusim.ir import ConvLayer
from npusim.memory import Steps

DF = get("dilated-grid")


def differing_fields(a, b) -> dict:
    """{field: (a's, b's)} of the LayerStats fields (extra key by key) that differ."""
    out = {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
           if f.name != "extra" and getattr(a, f.name) != getattr(b, f.name)}
    keys = set(a.extra) | set(b.extra)
    out.update({k: (a.extra.get(k), b.extra.get(k)) for k in keys
                if a.extra.get(k) != b.extra.get(k)})
    return out


def levels_agree(layer, x, w, b, arch) -> None:
    """Emulator == fast model on every field; the assertion names the fields that differ."""
    _, emulated = DF.emulate(layer, x, w, b, arch)
    estimated = DF.estimate(layer, None, None, arch)
    assert emulated == estimated, differing_fields(emulated, estimated)


def small_memory(p, bandwidth, kib: int, double: bool):
    """The flat preset with machine ``p``, ``kib`` KiB buffers and DRAM ``bandwidth``."""
    arch = arch_with(bandwidth, {"ifmap_sram_kb": kib, "filter_sram_kb": kib,
                                 "ofmap_sram_kb": kib, "double_buffered": double})
    return dataclasses.replace(arch, sections={"dilated-grid": p})


@settings(max_examples=150, deadline=None)
@given(conv_layers(max_hw=7, max_c=4, max_k=4, max_rs=3), machines(), st.integers(0, 2 ** 16),
       st.sampled_from(["unlimited", 0.3, 4.0]), st.sampled_from([1, 64]), st.booleans(),
       st.sampled_from([1.0, 0.5, 0.0]), st.sampled_from(["float32", "int8"]))
def test_emulator_equals_fast_model_on_every_field(layer, p, seed, bandwidth, kib, double,
                                                   density, dtype):
    """Random strides, dilations, pads, groups, channel counts; 1 KiB buffers overflow
    (inputs refetched, map-major partial sums spilled), 64 KiB hold them; density 0 gives
    all-zero tensors."""
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype, density)
    levels_agree(layer, x, w, b, small_memory(p, bandwidth, kib, double))


def test_all_zero_tensors_cost_what_dense_ones_do():
    """The grid steps every real tap whatever its value: zeros change no count."""
    layer = ConvLayer(1, 2, 9, 9, 3, 3, 3, padding=2, dilation=2)
    arch = small_memory(dilated_grid.Params(loop_order="map-major"), 0.5, 1, True)
    zeros = np.zeros(layer.input_shape, np.float32), np.zeros(layer.weight_shape, np.float32)
    out, zero_stats = DF.emulate(layer, *zeros, None, arch)
    x, w, _ = tensors(layer, 1)
    _, dense_stats = DF.emulate(layer, x, w, None, arch)
    assert not out.any() and zero_stats == dense_stats
    levels_agree(layer, *zeros, None, arch)


def test_a_fast_model_cutting_every_tap_into_its_own_run_is_caught(monkeypatch):
    """The emulator cuts its tap runs itself: forcing the fast model's ``axis_chunks`` to
    one tap per run moves the fast model alone (3 x 3 at R = 1: 1 pass per tile, not 9)."""
    layer = ConvLayer(1, 2, 8, 8, 2, 3, 3)
    arch = small_memory(dilated_grid.Params(), "unlimited", 64, True)
    x, w, _ = tensors(layer, 2)
    levels_agree(layer, x, w, None, arch)
    monkeypatch.setattr(shift_grid, "axis_chunks",
                        lambda taps, *_: [(t, 1) for t in range(taps)])
    with pytest.raises(AssertionError, match="cycles"):
        levels_agree(layer, x, w, None, arch)
    _, emulated = DF.emulate(layer, x, w, None, arch)
    assert emulated.extra["pixel_sets"] == 2 * 2 * 9  # 2 maps x 2 input maps x 9 tiles


def test_a_fast_model_fetching_its_input_twice_is_caught(monkeypatch):
    """The emulator logs its own DRAM blocks: doubling the fast model's DRAM ifmap bytes
    moves the fast model alone."""
    layer = ConvLayer(1, 2, 8, 8, 2, 3, 3, dtype="int8")
    arch = small_memory(dilated_grid.Params(), 2.0, 64, True)
    x, w, _ = tensors(layer, 3, "int8")
    levels_agree(layer, x, w, None, arch)
    fast_steps = dilated_grid.steps

    def doubled(layer, p, axes=None) -> Steps:
        s = fast_steps(layer, p, axes)
        return dataclasses.replace(s, ifmap_bytes=2 * s.ifmap_bytes,
                                   ifmap_size=2 * s.ifmap_size)

    monkeypatch.setattr(dilated_grid, "steps", doubled)
    with pytest.raises(AssertionError, match="dram_ifmap_bytes"):
        levels_agree(layer, x, w, None, arch)


def test_the_emulator_cuts_tap_runs_by_the_grid_and_the_coefficient_storage():
    """By hand: 5 taps at R = 2 with 2 lanes on a 6-unit grid: a run of t taps needs
    2 (t - 1) + 2 units, so 3 fit (6 units); a 2-unit coefficient storage holds 2; a rate
    beyond the shifter's reach makes one-tap runs."""
    assert emu.tap_runs(5, 2, 6, 2, 3, 2) == [(0, 3), (3, 2)]
    assert emu.tap_runs(5, 2, 6, 2, 2, 2) == [(0, 2), (2, 2), (4, 1)]
    assert emu.tap_runs(3, 3, 16, 2, 3, 2) == [(0, 1), (1, 1), (2, 1)]
    assert emu.reach(dilated_grid.Params(shifter="hierarchical", levels=3)) == 7


def test_the_emulator_accumulates_int8_exactly_past_float32s_integers():
    """int8 products summed over 1,152 taps (128 channels x 3x3) of 127 x 127 and
    126 x 127 reach 18.4 M, past 2**24 where float32 stops holding every integer: the
    emulator's int64 accumulators give the exact integer sum (float64 reference)."""
    layer = ConvLayer(1, 128, 3, 3, 1, 3, 3, dtype="int8")
    x = np.full(layer.input_shape, 127, np.int8)
    x[0, ::2, 0, 0] = 126  # odd partial sums, which float32 rounds past 2**24
    w = np.full(layer.weight_shape, 127, np.int8)
    out, _ = DF.emulate(layer, x, w, None, arch_with("unlimited"))
    exact = float(np.sum(x.astype(np.float64) * w.astype(np.float64)))
    assert exact > 2 ** 24
    assert float(np.asarray(out).ravel()[0]) == exact


def test_run_lengths_by_hand():
    """A 3-tap axis at R = 6 with 2 lanes on a 16-unit grid: a run of t taps needs
    6 (t - 1) + 2 units, so 3 fit (14 units); the planner weighs 3, 2 (runs of 2 + 1) and
    1. At R = 1 only the longest. The emulator's runs capped at ``most`` taps."""
    assert shift_grid.run_lengths(3, 6, 16, 2, 3, 7) == (3, 2, 1)
    assert shift_grid.run_lengths(3, 1, 16, 2, 3, 7) == (3,)
    assert shift_grid.run_lengths(7, 2, 16, 2, 7, 7) == (7, 4, 3, 2, 1)  # ceil(7 / runs)
    assert shift_grid.run_lengths(3, 8, 16, 2, 3, 7) == (1,)  # beyond the shifter's reach
    # 5 taps at R = 2 on an 8-unit grid with a 4-unit coefficient storage: the longest run
    # is 4 (4 + 1), which no even cut gives (5, 3 + 2, 2 + 2 + 1, ...): it is weighed first
    assert shift_grid.run_lengths(5, 2, 8, 2, 4, 2) == (4, 3, 2, 1)
    assert emu.tap_runs(3, 6, 16, 2, 3, 7) == [(0, 3)]
    assert emu.tap_runs(3, 6, 16, 2, 3, 7, most=2) == [(0, 2), (2, 1)]
    assert emu.tap_runs(3, 6, 16, 2, 3, 7, most=1) == [(0, 1), (1, 1), (2, 1)]


@pytest.mark.parametrize("bandwidth", ["unlimited", 0.5])
@pytest.mark.parametrize("preset, layer", [
    ("dilated-grid-2x2-h3", ConvLayer(1, 1, 14, 14, 1, 3, 3, padding=6, dilation=6)),
    ("dilated-grid-2x2-h3", ConvLayer(1, 2, 12, 12, 1, 3, 3, padding=(3, 3, 1, 1),
                                      dilation=(3, 1))),
    ("dilated-grid-2x2", ConvLayer(1, 1, 12, 12, 2, 3, 3, padding=2, dilation=2)),
], ids=["h3-d6", "h3-d3x1", "flat-d2"])
def test_the_planners_tap_runs_are_the_emulators_fastest(preset, layer, bandwidth):
    """On a dilated layer the planner weighs every run length of ``run_lengths``; the
    emulator runs the layer in each, and the planner's choice takes its fewest cycles
    (the longest runs among equals); the machine's emulate is the emulator in it, and the
    compute floors the planner orders them by are under the emulator's cycles."""
    arch = npusim.load_arch(preset).with_memory(dram_bytes_per_cycle=bandwidth)
    p = arch.params(dilated_grid.Params)
    x, w, _ = tensors(layer, 4)
    cycles = {}
    for lengths in dilated_grid.run_lengths(layer, p):
        cycles[lengths] = emu.emulate_stats(layer, x, w, None, arch, lengths)[1].cycles
        axes = dilated_grid.plan(layer, p, lengths)
        assert dilated_grid.count(layer, p, axes).cycles <= cycles[lengths]
    assert len(cycles) > 1
    chosen, stats = dilated_grid.compiled(layer, arch)
    fastest = min(cycles.values())
    assert stats.cycles == cycles[chosen] == fastest
    assert chosen == next(k for k in cycles if cycles[k] == fastest)  # longest first
    levels_agree(layer, x, w, None, arch)
    assert stats.extra["shortened_run_layers"] == int(chosen != next(iter(cycles)))


def test_a_plan_whose_longest_run_is_no_even_cut_agrees_on_both_levels():
    """5 x 5 at R = 2 on an 8 x 3 grid, 4 x 1 coefficients (a case hypothesis found): the
    longest rows run 4 + 1, the planner's shorter cut 3 + 2; both levels say whether the
    kept runs are shorter than the longest by their own runs."""
    layer = ConvLayer(1, 1, 9, 9, 1, 5, 5, dilation=2)
    p = dilated_grid.Params(grid_rows=8, grid_cols=3, coef_rows=4, coef_cols=1, mac_rows=2,
                            mac_cols=1, shifter="flat", levels=1, load_pixels_per_cycle=1,
                            double_buffer=False, coef_loads_per_cycle=1,
                            result_words_per_cycle=1)
    x, w, _ = tensors(layer, 5)
    for bandwidth in ("unlimited", 0.3):
        levels_agree(layer, x, w, None, small_memory(p, bandwidth, 64, True))
