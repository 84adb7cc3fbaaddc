"""The input-reuse cycle emulator: Fig. 4/6 datapath, and agreement with the fast model
(outputs bit-identical in int8, same cycles and unit/bus counts) over random layers."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors
from test_input_reuse import arch_with

from npusim import reference
from npusim.arch import load_arch
from npusim.dataflows.input_reuse import Params, layer_stats
from npusim.emulate.input_reuse import (
    accumulation_position,
    datapath,
    emulate,
    emulate_layer,
    kernel_taps,
)
from npusim.ir import ConvLayer


def whole_kernel(R=3, S=3):
    return kernel_taps(ConvLayer(1, 1, R, S, 1, R, S))


def test_fig4_accumulation_positions_are_the_point_reflection():
    path = datapath((1, 1), 1, whole_kernel())
    # taps in row-major order: (1,1) -> (3,3), (1,2) -> (3,2), (1,3) -> (3,1), (2,1) -> (2,3)
    got = [accumulation_position(path, t) for t in range(4)]
    assert got == [(2, 2), (2, 1), (2, 0), (1, 2)]
    assert all(accumulation_position(path, t) == (2 - t // 3, 2 - t % 3) for t in range(9))


def test_fig6_inventory_and_mux_fan_in():
    path = datapath((4, 4), 1, whole_kernel())
    inv = path.inventory()
    assert inv["multipliers"] == 16
    assert inv["muxes"] == inv["adders"] == inv["accumulators"] == 36
    assert path.pofm == (6, 6)
    assert path.fan_in[0, 0] == 1 and path.fan_in[2, 2] == 9  # drawing 610: (1,1) and (3,3)
    edge = np.array([1, 2, 3, 3, 2, 1])
    np.testing.assert_array_equal(path.fan_in, np.outer(edge, edge))
    assert path.fan_in.sum() == 16 * 9


def test_device_inventory_scales_with_units():
    layer = ConvLayer(1, 1, 4, 4, 1, 3, 3, dtype="int8")
    x, w, b = tensors(layer, 0, "int8")
    p = load_arch("input-reuse-1024").params("input-reuse")
    inv = emulate_layer(layer, x, w, b, p).inventory
    assert inv["multipliers"] == 1024 == p.multipliers
    assert inv["accumulators"] == 64 * 36 and inv["max_fan_in"] == 9


def test_fig5_cycle_by_cycle_gives_the_partial_ofm_of_the_region():
    layer = ConvLayer(1, 1, 4, 4, 1, 3, 3, padding=2, dtype="int8")  # full conv: whole 6x6
    x = np.arange(1, 17, dtype=np.int8).reshape(1, 1, 4, 4)
    w = np.arange(-4, 5, dtype=np.int8).reshape(1, 1, 3, 3)
    p = Params(region_rows=8, region_cols=8, operation_units=1, processing_units=1,
               accumulators=100)
    res = emulate_layer(layer, x, w, None, p)
    np.testing.assert_array_equal(res.output, reference.conv2d(x, w, None, layer))
    assert res.counters.unit_busy[0] == 8  # nine taps, the zero weight skipped


def small_params(draw_units, pus, rows, cols, depth, part, link, width, outs, steal, mapping,
                 first_kb):
    return Params(region_rows=rows, region_cols=cols, region_channels=depth,
                  operation_units=draw_units, processing_units=pus, accumulators=part,
                  interconnect=link, bus_width=width, output_units=outs, work_stealing=steal,
                  mapping=mapping, first_buffer_kb=first_kb)


# a 1 KiB first buffer holds 256 accumulators: a few partial OFMs of these small layers, so
# the units of the bus-bound ones (narrow buses) stall on it
params = st.builds(small_params, st.integers(1, 4), st.integers(1, 3), st.integers(1, 4),
                   st.integers(1, 4), st.integers(1, 2), st.sampled_from([16, 20, 36, 400]),
                   st.sampled_from(["full", "bus", "chain"]), st.integers(1, 9),
                   st.integers(1, 3), st.booleans(), st.sampled_from(["spread", "own-unit"]),
                   st.sampled_from([1, 1, 16]))


@given(conv_layers(max_hw=7, max_c=4, max_k=4, max_rs=3), params, st.integers(0, 2**31),
       st.sampled_from([1.0, 0.6, 0.3]))
def test_emulator_agrees_with_fast_model(layer, p, seed, density):
    layer = layer.with_dtype("int8")
    x, w, b = tensors(layer, seed, "int8", density)
    arch = arch_with(**{f: getattr(p, f) for f in p.__dataclass_fields__})
    fast = layer_stats(layer, x != 0, w != 0, arch, "input-reuse")
    order = "kernel-major" if fast.extra["kernel_major_layers"] else "region-major"
    res = emulate_layer(layer, x, w, b, p, order=order)
    np.testing.assert_array_equal(res.output, reference.conv2d(x, w, b, layer))
    c, e = res.counters, fast.extra
    assert res.cycles == fast.compute_cycles
    assert tuple(c.unit_busy) == e["opunit_busy_cycles_by_unit"]
    assert tuple(c.pu_dealt.ravel()) == e["pu_dealt_cycles_by_unit"]
    assert int(c.unit_busy.sum()) == e["opunit_busy_cycles"]
    assert int(c.unit_busy.max()) == e["opunit_busy_max_cycles"]
    assert c.pu_busy == e["pu_busy_cycles"]
    assert (c.transfers, c.transfer_cycles, c.contention, c.hops) == (
        e["transfers"], e["transfer_cycles"], e["contention_cycles"], e["chain_hops"])
    assert c.first_buffer_stalls == e["first_buffer_stall_cycles"]
    # the cycles work stealing saved: the emulator runs the layer again without it (the
    # fast model does not where stealing leaves every job as it is, ``stealing_moves_nothing``)
    plain = emulate_layer(layer, x, w, b, p, stealing=False, order=order).cycles \
        if p.work_stealing else res.cycles
    assert plain - res.cycles == e["stealing_saved_cycles"]


def test_random_layers_do_stall_on_a_1_kib_first_buffer():
    """The agreement above covers back-pressure: a bus-bound small layer (1-pixel bus, 16
    units of 1x1 regions) stalls its units on a 1 KiB first buffer, in both models alike."""
    layer = ConvLayer(1, 1, 7, 7, 4, 3, 3, padding=1, dtype="int8")
    p = Params(region_rows=1, region_cols=1, operation_units=4, processing_units=2,
               bus_width=1, first_buffer_kb=1, work_stealing=False)
    x, w, b = tensors(layer, 1, "int8", 1.0)
    arch = arch_with(**{f: getattr(p, f) for f in p.__dataclass_fields__})
    fast = layer_stats(layer, x != 0, w != 0, arch, "input-reuse")
    res = emulate_layer(layer, x, w, b, p)
    assert res.counters.first_buffer_stalls == fast.extra["first_buffer_stall_cycles"] > 0
    assert res.cycles == fast.compute_cycles


@pytest.mark.parametrize("link", ["full", "bus", "chain"])
def test_float32_emulation_is_close_to_float64(link):
    layer = ConvLayer(2, 3, 7, 6, 4, 3, 2, stride=(2, 1), padding=(1, 0, 1, 1), dilation=(1, 2))
    x, w, b = tensors(layer, 5, density=0.5)
    res = emulate_layer(layer, x, w, b, Params(interconnect=link, operation_units=3))
    assert res.output.dtype == np.float32
    assert rel_err(res.output, reference.conv2d(x, w, b, layer)) < 1e-5


def _priced_pair(layer, p, seed, density, **memory):
    """(emulator's stats, fast model's stats) of a layer on ``p`` with a memory."""
    x, w, b = tensors(layer, seed, layer.dtype, density)
    arch = arch_with(**{f: getattr(p, f) for f in p.__dataclass_fields__}).with_memory(**memory)
    return emulate(layer, x, w, b, p, arch)[1], layer_stats(layer, x != 0, w != 0, arch,
                                                             "input-reuse")


@given(conv_layers(max_hw=7, max_c=4, max_k=4, max_rs=3), params, st.integers(0, 2**31),
       st.sampled_from([1.0, 0.3]), st.sampled_from([0.25, 4.0, "unlimited"]),
       st.sampled_from([1, 64]), st.sampled_from(["int8", "float32"]),
       st.sampled_from(["unlimited", 3.0]))
def test_emulator_priced_through_the_memory_model_equals_the_fast_model(
        layer, p, seed, density, bandwidth, kib, dtype, ports):
    """The emulator's own job ends, regions and kernels, priced by the same function: same
    cycles, stalls by cause and DRAM bytes (and every other field), with 1- and 4-byte
    values; with SRAM ports of 3 B/cycle, each step's share of the SRAM bytes (by its
    jobs' weight cycles) sets its port stalls."""
    emu, fast = _priced_pair(layer.with_dtype(dtype), p, seed, density,
                             dram_bytes_per_cycle=bandwidth, filter_sram_kb=kib,
                             ifmap_sram_kb=kib, sram_bytes_per_cycle=ports)
    assert (emu.cycles, emu.compute_cycles, emu.stall_cycles, emu.dram_bytes) == (
        fast.cycles, fast.compute_cycles, fast.stall_cycles, fast.dram_bytes)
    assert emu == fast


def test_emulator_equals_fast_model_when_weights_overflow_the_filter_sram():
    """2,304 B of int8 weights (16 x 16 x 3 x 3, dense) against 512 usable bytes (1 KiB
    double buffered) at 0.5 B/cycle, and the 1,152 B stream against 512 too: region-major
    streams the weights again for every row of jobs, kernel-major the regions; either way
    the emulator's own schedule prices to the fast model's."""
    layer = ConvLayer(1, 16, 8, 8, 16, 3, 3, padding=1, dtype="int8")
    p = Params(operation_units=4, processing_units=4)
    emu, fast = _priced_pair(layer, p, 7, 1.0, dram_bytes_per_cycle=0.5, filter_sram_kb=1,
                             ifmap_sram_kb=1)
    assert (fast.dram_filter_bytes > fast.extra["weight_bytes"]
            or fast.dram_ifmap_bytes > fast.extra["ifm_stream_bytes"])
    assert fast.stall_cycles > 0
    assert emu == fast


@given(conv_layers(max_hw=7, max_c=4, max_k=4, max_rs=3), params, st.integers(0, 2**31),
       st.sampled_from([0.6, 0.2]), st.sampled_from(["x", "w", "kernel"]))
def test_emulator_equals_fast_model_on_every_field_with_zero_inputs_or_kernels(
        layer, p, seed, density, zero):
    """All-zero inputs, all-zero weights, or one all-zero kernel, on a memory whose
    buffers overflow (1 KiB SRAMs at 0.25 B/cycle): every LayerStats field equal."""
    layer = layer.with_dtype("int8")
    x, w, b = tensors(layer, seed, "int8", density)
    if zero == "x":
        x[:] = 0
    elif zero == "w":
        w[:] = 0
    else:
        w[0] = 0
    arch = arch_with(**{f: getattr(p, f) for f in p.__dataclass_fields__}).with_memory(
        dram_bytes_per_cycle=0.25, ifmap_sram_kb=1, filter_sram_kb=1, ofmap_sram_kb=1)
    out, emu = emulate(layer, x, w, b, p, arch)
    np.testing.assert_array_equal(out, reference.conv2d(x, w, b, layer))
    assert emu == layer_stats(layer, x != 0, w != 0, arch, "input-reuse")


@pytest.mark.parametrize("layer", [
    ConvLayer(2, 37, 1, 1, 19, 1, 1, dtype="int8"),  # fully connected, batch 2
    ConvLayer(1, 45, 3, 3, 11, 2, 2, dtype="int8"),  # one region, four taps a part
    ConvLayer(2, 40, 2, 2, 12, 2, 2, groups=4, dtype="int8"),
    ConvLayer(1, 70, 4, 4, 9, 1, 1, stride=2, dtype="int8"),  # four stride phases
], ids=["fc", "taps", "grouped", "strided"])
@pytest.mark.parametrize("depth", [1, 2])
def test_emulator_equals_fast_model_on_few_regions_of_many_channels(layer, depth):
    """Layers of one or two regions (a fully connected layer has one) against many channels,
    which the fast model counts as AND-ed channel bits (``region_work.FEW_COLUMNS``): more
    channels than a byte of bits, not a multiple of eight, over 4x4 regions; every
    LayerStats field equal."""
    p = Params(region_rows=4, region_cols=4, region_channels=depth, operation_units=3,
               processing_units=2)
    x, w, b = tensors(layer, 11, "int8", 0.5)
    arch = arch_with(**{f: getattr(p, f) for f in p.__dataclass_fields__})
    out, emu = emulate(layer, x, w, b, p, arch)
    np.testing.assert_array_equal(out, reference.conv2d(x, w, b, layer))
    assert emu == layer_stats(layer, x != 0, w != 0, arch, "input-reuse")


# one output unit (or, on a chain, one or two operation units) with 1 KiB second buffers
# and one set of 8 kernels: the bands of these layers (8 kernels x 4-6 rows x 10-12 columns
# x 4 B) overflow them (but some chains' 2 KiB) in either loop order
spilling = st.builds(small_params, st.integers(1, 2), st.just(8), st.just(4),
                     st.integers(1, 4), st.just(1), st.sampled_from([16, 36]),
                     st.sampled_from(["full", "bus", "chain"]), st.integers(4, 64),
                     st.just(1), st.booleans(), st.sampled_from(["spread", "own-unit"]),
                     st.sampled_from([1, 16]))
# two to four units of 1x1-2x2 regions on a one- or two-pixel bus, 1 KiB first buffers (64
# partial OFMs of 2x2 regions under a 1x1 kernel, 7 of 4x4 pixels): the units stall
stalling = st.builds(small_params, st.integers(2, 4), st.integers(1, 3), st.integers(1, 2),
                     st.integers(1, 2), st.just(1), st.just(36),
                     st.sampled_from(["full", "bus", "chain"]), st.integers(1, 2),
                     st.just(1), st.booleans(), st.sampled_from(["spread", "own-unit"]),
                     st.just(1))


@st.composite
def busy_layers(draw, stride=2, sides=(8, 12), kernels=(4, 8)):
    """int8 layers of 1-2 channels and ``kernels`` kernels on ``sides`` pixel maps, 1-3
    pixel kernels, 'same' padding, stride 1 to ``stride``: enough jobs and partial OFMs to
    fill the buffers above."""
    r, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return ConvLayer(1, draw(st.integers(1, 2)), draw(st.integers(*sides)),
                     draw(st.integers(*sides)), draw(st.integers(*kernels)), r, s,
                     stride=draw(st.integers(1, stride)),
                     padding=(r // 2, r // 2, s // 2, s // 2), dtype="int8")


@settings(max_examples=25, deadline=None)
@given(busy_layers(), stalling,
       st.integers(0, 2**31), st.sampled_from([1.0, 0.5]), st.sampled_from([0.5, "unlimited"]))
def test_emulator_equals_fast_model_when_the_first_buffers_fill(layer, p, seed, density,
                                                                 bandwidth):
    """Every LayerStats field equal (cycles, first-buffer stalls, bus waits, stalls by
    cause) on bus-bound layers whose units stall on their 1 KiB first buffers, or not."""
    emu, fast = _priced_pair(layer.with_dtype("int8"), p, seed, density,
                             dram_bytes_per_cycle=bandwidth)
    assert emu == fast


@settings(max_examples=15, deadline=None)
@given(busy_layers(stride=1, sides=(10, 12), kernels=(8, 8)), spilling,
       st.integers(0, 2**31), st.sampled_from([1.0, 0.5]), st.sampled_from([0.5, "unlimited"]))
def test_emulator_equals_fast_model_when_the_output_bands_overflow_the_second_buffers(
        layer, p, seed, density, bandwidth):
    """Every LayerStats field equal, on second buffers of 1 KiB that the output bands of
    these layers overflow (their partial sums spill and are read back) or not."""
    p = dataclasses.replace(p, second_buffer_kb=1)
    emu, fast = _priced_pair(layer.with_dtype("int8"), p, seed, density,
                             dram_bytes_per_cycle=bandwidth)
    assert emu == fast


def test_the_spill_of_a_random_layer_is_counted_alike_by_both_models():
    """The agreement above covers spills: 2 -> 8 channels, 3x3 'same' on 12x12, 2x2
    regions, one output unit of 1 KiB (a band: 8 kernels x 4 rows x 12 x 4 B = 1,536 B)."""
    layer = ConvLayer(1, 2, 12, 12, 8, 3, 3, padding=1, dtype="int8")
    p = Params(region_rows=2, region_cols=2, operation_units=2, processing_units=8,
               output_units=1, second_buffer_kb=1)
    emu, fast = _priced_pair(layer, p, 4, 0.5, dram_bytes_per_cycle="unlimited")
    assert fast.dram_ofmap_bytes > 2 * 8 * 12 * 12  # the OFM is at most 1,152 B + bitmaps
    assert emu == fast


def test_a_taller_partial_ofm_in_the_fast_planner_is_caught_by_the_emulator(monkeypatch):
    """The emulator wires its own datapath: a fast planner whose partial OFMs are 3x
    taller disagrees with it (transfers, first-buffer bytes, peak partial OFM)."""
    from npusim.dataflows.phases import Part

    layer = ConvLayer(1, 2, 8, 8, 4, 3, 3, padding=1, dtype="int8")
    p = Params(operation_units=2, processing_units=2)
    x, w, b = tensors(layer, 3, "int8", 0.5)
    arch = arch_with(**{f: getattr(p, f) for f in p.__dataclass_fields__})
    assert emulate(layer, x, w, b, p, arch)[1] == layer_stats(layer, x != 0, w != 0, arch,
                                                              "input-reuse")
    shape = Part.pofm_shape
    monkeypatch.setattr(Part, "pofm_shape", lambda self, region: (
        3 * shape(self, region)[0], shape(self, region)[1]))
    emu, fast = emulate(layer, x, w, b, p, arch)[1], layer_stats(layer, x != 0, w != 0, arch,
                                                                 "input-reuse")
    assert emu.sram_ofmap_bytes != fast.sram_ofmap_bytes
    assert emu.extra["peak_pofm_rows"] == 6 != fast.extra["peak_pofm_rows"]


def test_a_kernel_split_into_parts_runs_each_part_as_its_own_partial_ofm():
    """5x5 kernel, 4x4 region, 36 accumulators, fan-in 9: four 3x3 tiles (6x6, 6x5, 5x6,
    5x5 partial OFMs, fan-in 9, 6, 6, 4); one unit and PU, dense: 25 cycles, 4 partial
    OFMs written and read once each (4 B a pixel), the output exact."""
    layer = ConvLayer(1, 1, 4, 4, 1, 5, 5, padding=2, dtype="int8")
    p = Params(operation_units=1, processing_units=1, interconnect="chain")
    x, w, _ = tensors(layer, 9, "int8")
    w[w == 0] = 1
    x[x == 0] = 1
    res = emulate_layer(layer, x, w, None, p)
    np.testing.assert_array_equal(res.output, reference.conv2d(x, w, None, layer))
    assert res.inventory["kernel_parts"] == 4 and res.cycles == 25
    assert [f.shape for f in res.inventory["fan_in"]] == [(6, 6), (6, 5), (5, 6), (5, 5)]
    assert [int(f.max()) for f in res.inventory["fan_in"]] == [9, 6, 6, 4]
    assert res.counters.sram_ofmap_bytes == 2 * 4 * (36 + 30 + 30 + 25)


def _doubled_ifmap_steps(steps):
    """A patch of ``steps``: every step fetches its region block twice over."""
    def patched(*a, **k):
        s = steps(*a, **k)
        return dataclasses.replace(s, ifmap_bytes=2 * s.ifmap_bytes, ifmap_size=2 * s.ifmap_size)
    return patched


def _doubled(*parts):
    """A patch of a helper that returns a tuple: its items ``parts`` doubled."""
    def patch(helper):
        def patched(*a, **k):
            out = list(helper(*a, **k))
            for part in parts:
                out[part] = 2 * out[part]
            return tuple(out)
        return patched
    return patch


def _own_blocks(helper):
    """A patch of ``_inner_blocks``: each row's window a block of its own."""
    def patched(*a, **k):
        ids, nbytes, _ = helper(*a, **k)
        return np.arange(len(ids)), nbytes, nbytes
    return patched


def _other_order(loop_order):
    """A patch of ``loop_order``: the order it would not take."""
    return lambda *a, **k: {"region-major": "kernel-major",
                            "kernel-major": "region-major"}[loop_order(*a, **k)]


def _first_region_holds_the_stream(slice_bytes):
    """A patch of ``_slice_bytes``: the whole stream charged to the first region."""
    def patched(layer, jobs):
        out = np.zeros_like(slice_bytes(layer, jobs))
        out.flat[0] = jobs.stream_bytes
        return out
    return patched


# 2 -> 8 channels, 3x3 'same' on 12x12, 2x2 regions on two units of 8 PUs, one output unit:
# a band is 8 kernels x 4 rows x 12 x 4 B = 1,536 B: it overflows a 1 KiB second buffer
# (its partial sums spill), fits a 2 KiB one; DRAM at 0.5 B/cycle, so the steps stall
BANDS = (ConvLayer(1, 2, 12, 12, 8, 3, 3, padding=1, dtype="int8"),
         Params(region_rows=2, region_cols=2, operation_units=2, processing_units=8,
                output_units=1), {"dram_bytes_per_cycle": 0.5})
# 16 -> 16 channels, 3x3 on 8x8, dense int8: 2,304 B of weights and a 1,152 B stream
# against 512 usable bytes of 1 KiB SRAMs at 0.5 B/cycle (weights or regions refetched)
WEIGHTS = (ConvLayer(1, 16, 8, 8, 16, 3, 3, padding=1, dtype="int8"),
           Params(operation_units=4, processing_units=4),
           {"dram_bytes_per_cycle": 0.5, "filter_sram_kb": 1, "ifmap_sram_kb": 1})

# 16 depthwise 3x3 'same' on 16x16, dense int8: 16 regions of 4x4 on four units, a conv
# group's slice of a region 16 B of values; the 2,568 B stream against 512 usable bytes of
# ifmap SRAM. A 1 KiB second buffer holds a kernel set's band (1 kernel x 6 rows x 16 x 4 B)
# but not a region row's (16 kernels): kernel-major, each kernel set cycling through its
# group's slices; on 2 KiB region-major, each region cycling through 16 kernel sets
DEPTHWISE = (ConvLayer(1, 16, 16, 16, 16, 3, 3, padding=1, groups=16, dtype="int8"),
             Params(operation_units=4, processing_units=4),
             {"dram_bytes_per_cycle": 0.5, "ifmap_sram_kb": 1})

# 20 int8 kernels of 2 x 3 x 3 in 5 sets of 4 on two units: windows of two sets that never
# repeat, over weights (about 400 B) that fit the 512 usable bytes of a 1 KiB filter SRAM
WINDOWS = (ConvLayer(1, 2, 8, 8, 20, 3, 3, padding=1, dtype="int8"),
           Params(operation_units=2, processing_units=4),
           {"dram_bytes_per_cycle": 0.5, "filter_sram_kb": 1})


@pytest.mark.parametrize("helper, patch, case, second_kb, field", [
    ("steps", _doubled_ifmap_steps, BANDS, 1, "dram_ifmap_bytes"),
    ("_output_blocks", _doubled(1), BANDS, 1, "dram_ofmap_bytes"),
    ("bands", _doubled(1), BANDS, 2, "dram_ofmap_bytes"),
    ("second_buffer_bytes", lambda f: lambda p: f(p) // 2, BANDS, 2, "dram_ofmap_bytes"),
    ("_slice_bytes", _first_region_holds_the_stream, BANDS, 1, "stall_dram_ifmap_cycles"),
    ("_outer_blocks", _doubled(1, 2), WEIGHTS, 32, "dram_bytes"),
    ("_inner_blocks", _doubled(1, 2), DEPTHWISE, 2, "dram_filter_bytes"),
    ("_slice_windows", _doubled(1, 2), DEPTHWISE, 1, "dram_ifmap_bytes"),
    ("_inner_blocks", _own_blocks, WINDOWS, 32, "dram_filter_bytes"),
    ("loop_order", _other_order, WEIGHTS, 32, "kernel_major_layers"),
])
def test_a_fault_in_the_fast_models_memory_steps_is_caught_by_the_emulator(
        monkeypatch, helper, patch, case, second_kb, field):
    """The emulator derives its memory steps and loop order from its own log of the jobs it
    ran: a fast model that fetches its regions twice, spills twice the partial sums, holds
    bands twice as large, halves the second buffers, charges the whole stream to the first
    region, fetches its held blocks, its weight windows or its windows of slices twice,
    makes each window a block of its own or takes the other loop order disagrees with it,
    and the emulator's stats do not move."""
    from npusim.dataflows import input_reuse

    layer, p, memory = case
    p = dataclasses.replace(p, second_buffer_kb=second_kb)
    emu, fast = _priced_pair(layer, p, 4, 0.5, **memory)
    assert emu == fast

    monkeypatch.setattr(input_reuse, helper, patch(getattr(input_reuse, helper)))
    emu_patched, fast_patched = _priced_pair(layer, p, 4, 0.5, **memory)

    def value(stats):
        return stats.extra[field] if field in stats.extra else getattr(stats, field)
    assert value(fast_patched) != value(emu_patched)
    assert emu_patched == emu


def test_memory_steps_by_hand_hold_one_operand_and_cycle_the_other():
    """Three regions (10, 20, 30 B) x three kernel sets of 2 kernels (1, 2, 4 B) on two
    units, one band of 5 pixels per region, 3 partial-OFM pixels a job. Region-major: a
    row fetches the regions it begins (row 2 continues region 1: fetched again, the memory
    model decides if it stayed) and the window of its jobs' kernel sets, a part of one
    block, all the weights (7 B); kernel-major swaps them (the stream, 60 B, one block),
    a band per kernel set."""
    from npusim.emulate.input_reuse import in_run_order
    from npusim.emulate.input_reuse_memory import Ran, Stored, memory_steps

    jobs = [[Ran(ifmap=r, kernel_set=k, kernels=2, band=r, end=10 * (3 * r + k + 1),
                 weight_cycles=1, pofm_pixels=3) for k in range(3)] for r in range(3)]
    stored = Stored(slice_bytes=[10, 20, 30], set_bytes=[1, 2, 4], band_pixels=[5, 5, 5],
                    kernels=6, second_buffers=1024, ofm_bytes=50, sram_bytes=9)
    s = memory_steps(in_run_order(jobs, "region-major"), stored, "region-major", 2, 95)
    assert s.compute.tolist() == [20, 20, 20, 20, 15]
    assert s.ifmap.tolist() == [0, 1, 1, 2, 2]
    assert s.ifmap_bytes.tolist() == [10, 20, 20, 30, 30]
    assert s.filter.tolist() == [0] * 5 and s.filter_size.tolist() == [7] * 5
    assert s.filter_bytes.tolist() == [3, 5, 6, 3, 4]
    assert s.ofmap.tolist() == [0, 1, 1, 2, 2] and s.psum_size.tolist() == [4 * 6 * 5] * 5
    assert s.psum_bytes.tolist() == [24, 24, 24, 24, 12]
    assert s.ofmap_bytes.tolist() == [11, 22, 22, 17, 17]  # 50 B over 9 jobs, per band
    assert s.sram_bytes.tolist() == [2, 2, 2, 2, 1]
    s = memory_steps(in_run_order(jobs, "kernel-major"), stored, "kernel-major", 2, 95)
    assert s.filter.tolist() == [0, 1, 1, 2, 2] and s.filter_bytes.tolist() == [1, 2, 2, 4, 4]
    assert s.ifmap.tolist() == [0] * 5 and s.ifmap_size.tolist() == [60] * 5
    assert s.ifmap_bytes.tolist() == [30, 40, 50, 30, 30]
    assert s.ofmap.tolist() == [1, 3, 5, 7, 8] and s.psum_size.tolist() == [4 * 2 * 5] * 5



def test_weights_that_fit_are_fetched_once_though_the_windows_do_not_tile_them():
    """20 int8 kernels of 2 x 3 x 3 (3 B of bitmap and up to 18 values each: about 420 B)
    in 5 sets of 4, against 512 usable filter bytes, on two units: each region's row
    windows of two sets start at 0, 2, 4, 1, 3, so no two windows hold the same sets and
    together they would be twice the weights; the weights fit, so they are fetched once,
    region-major, in both models."""
    layer, p, memory = WINDOWS
    emu, fast = _priced_pair(layer, p, 3, 1.0, **memory)
    w = tensors(layer, 3, "int8")[1]
    assert fast.extra["kernel_major_layers"] == 0
    assert fast.dram_filter_bytes == 20 * 3 + np.count_nonzero(w)
    assert emu == fast


def test_memory_steps_by_hand_read_a_conv_groups_slice_of_each_region():
    """Three regions x two conv groups of one kernel set each, slices numbered region * 2 +
    group (10, 11, 20, 21, 30, 31 B), kernel-major: on two units a row reads the window of
    its jobs' slices (group 0 over regions 0-2, then group 1), named by its first; on four
    units a group's regions fit in a row, which fetches every slice of the groups it
    begins (group 0: 60 B, group 1: 63 B), or the one it continues."""
    from npusim.emulate.input_reuse import in_run_order
    from npusim.emulate.input_reuse_memory import Ran, Stored, memory_steps

    jobs = [[Ran(ifmap=2 * r + g, kernel_set=g, kernels=1, band=r, end=10 * (2 * r + g + 1))
             for g in range(2)] for r in range(3)]
    stored = Stored(slice_bytes=[10, 11, 20, 21, 30, 31], set_bytes=[1, 2],
                    band_pixels=[5, 5, 5], kernels=2, second_buffers=1024, groups=2)
    run = in_run_order(jobs, "kernel-major")
    assert [job.ifmap for job in run] == [0, 2, 4, 1, 3, 5]
    s = memory_steps(run, stored, "kernel-major", 2, 60)
    assert s.ifmap.tolist() == [0, 4, 3] and s.ifmap_bytes.tolist() == [30, 41, 52]
    assert s.ifmap_size.tolist() == [30, 41, 52]
    assert s.filter.tolist() == [0, 1, 1] and s.filter_bytes.tolist() == [1, 2, 2]
    s = memory_steps(run, stored, "kernel-major", 4, 60)
    assert s.ifmap.tolist() == [1, 1] and s.ifmap_bytes.tolist() == [60 + 63, 63]


def test_a_depthwise_layer_kernel_major_streams_its_input_once():
    """DEPTHWISE on a 1 KiB second buffer runs kernel-major: each kernel set, one conv group,
    reads its group's slice of every region, so even with the stream four times the ifmap
    SRAM the input crosses DRAM once: 256 blocks (16 channels x 16 regions of 4x4 pixels) of
    a 2-byte bitmap each, and the non-zero int8 values; the emulator's log prices the
    same."""
    layer, p, memory = DEPTHWISE
    p = dataclasses.replace(p, second_buffer_kb=1)
    emu, fast = _priced_pair(layer, p, 4, 0.5, **memory)
    x = tensors(layer, 4, layer.dtype, 0.5)[0]
    assert fast.extra["kernel_major_layers"] == 1
    assert fast.dram_ifmap_bytes == 16 * 16 * 2 + np.count_nonzero(x)
    assert emu == fast


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_emulator_equals_fast_model_on_long_work_stealing_tails(dtype):
    """In each kernel set of 4 (a kernel a PU), one dense kernel, one half dense and two
    sparse: when the sparse kernels' PUs go idle, the others have hundreds of cycles left,
    so the fast model counts runs of their tail at once (``region_work._steal``: the
    thieves take from the dense kernel's PU alone until the half-dense one's level, then
    from both), across the kernel parts of a 5x5 kernel on 36 accumulators, where the
    emulator plays every cycle: every field equal, the transfers the thieves fill
    included."""
    from npusim.dataflows import region_work

    layer = ConvLayer(1, 24, 6, 6, 8, 5, 5, padding=(2, 2, 2, 2), dtype=dtype)
    rng = np.random.default_rng(7)
    keep = rng.random(layer.weight_shape) < np.array([1, 0.5, 0.03, 0.03] * 2)[:, None, None,
                                                                              None]
    w, x = rng.standard_normal(layer.weight_shape) * keep, rng.standard_normal(layer.input_shape)
    if dtype == "int8":
        x, w = np.rint(x * 40).astype(np.int8), np.rint(w * 40).astype(np.int8)
    else:
        x, w = x.astype(np.float32), w.astype(np.float32)
    p = dataclasses.replace(load_arch("input-reuse-1024").params(Params), operation_units=2,
                            first_buffer_kb=64)
    arch = arch_with(**{f: getattr(p, f) for f in p.__dataclass_fields__})
    # a kernel's weight cycles on a dense region: its non-zero weights (one channel a cycle)
    cycles = np.sort((w != 0).reshape(2, 4, -1).sum(axis=-1), axis=1)
    assert (cycles[:, -2] - cycles[:, 1] > 20 * region_work.RUN_LEVELS).all()
    emu, fast = emulate(layer, x, w, None, p, arch)[1], layer_stats(layer, x != 0, w != 0, arch,
                                                                    "input-reuse")
    assert fast.extra["stealing_saved_cycles"] > 0 and fast.extra["peak_kernel_parts"] > 1
    assert emu == fast


@pytest.mark.parametrize(("dtype", "link"), [("int8", "chain"), ("float32", "full")])
def test_emulator_equals_fast_model_when_regions_repeat_their_jobs(dtype, link):
    """A 1x1 layer on a dense input: every region is active in every channel, so a kernel
    set's job has the same weight cycles in each of the 16 regions, and the fast model
    copies the counts of its first (``region_work._steal``, ``_seen``) where the emulator
    plays every job's cycles: every field equal. The kernels of a set are uneven (dense,
    half, a tenth), so the idle PUs steal; a stolen cycle's partial OFM goes to its
    kernel's owner (a chain's unit, an output unit), so a copied count's kernel counts."""
    layer = ConvLayer(1, 24, 16, 16, 12, 1, 1, dtype=dtype)
    rng = np.random.default_rng(11)
    keep = rng.random(layer.weight_shape) < np.array([1, 0.5, 0.1, 0.1] * 3)[:, None, None,
                                                                             None]
    w = rng.standard_normal(layer.weight_shape) * keep
    x = rng.standard_normal(layer.input_shape) + 5.0  # no zero
    if dtype == "int8":
        x, w = np.rint(x * 10).astype(np.int8), np.rint(w * 40).astype(np.int8)
    else:
        x, w = x.astype(np.float32), w.astype(np.float32)
    assert (x != 0).all()
    p = dataclasses.replace(load_arch("input-reuse-1024").params(Params), operation_units=2,
                            first_buffer_kb=64, interconnect=link)
    arch = arch_with(**{f: getattr(p, f) for f in p.__dataclass_fields__})
    # a set's job: each kernel's non-zero weights (one channel a cycle), in every region
    sets = (w != 0).reshape(3, 4, -1).sum(axis=-1)
    assert len({tuple(s) for s in sets}) == 3 and (sets.max(axis=1) > sets.min(axis=1)).all()
    emu, fast = emulate(layer, x, w, None, p, arch)[1], layer_stats(layer, x != 0, w != 0, arch,
                                                                    "input-reuse")
    assert fast.extra["stealing_saved_cycles"] > 0
    assert emu == fast
