"""The input-reuse dataflow: outputs against float64 / exact-int references and torch,
run == estimate, the patent's own numbers (seed 000), and its errors."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors, torch_conv

import npusim
from npusim import reference
from npusim.arch import load_arch
from npusim.arch.spec import arch_from_toml_text
from npusim.dataflows import get, input_reuse, region_work
from npusim.dataflows.input_reuse import Params
from npusim.dataflows.operation_units import Transfers
from npusim.errors import ConfigError, NpusimError
from npusim.ir import ConvLayer, GraphBuilder
from npusim.memory import Steps, traffic
from npusim.report.export import to_csv

DF = get("input-reuse")
FIG2A_KERNEL = np.array([[-1, -3, 4], [7, -2, -1], [-5, 3, 1]], np.int8)


def arch_with(bandwidth=10.0, **params):
    """The 1024-multiplier preset with some ``[input-reuse]`` parameters changed, at a DRAM
    bandwidth (bytes/cycle, or "unlimited": the stall-free machine)."""
    base = load_arch("input-reuse-1024").with_memory(dram_bytes_per_cycle=bandwidth)
    p = dataclasses.replace(base.params("input-reuse"), **params)
    return dataclasses.replace(base, sections={**base.sections, "input-reuse": p})


FREE = "unlimited"


def run(layer, x, w, b, arch):
    return DF.run(layer, x, w, b, arch)


@given(conv_layers(), st.integers(0, 2**31), st.sampled_from([1.0, 0.5, 0.2]))
def test_float32_matches_float64_reference_and_torch(layer, seed, density):
    x, w, b = tensors(layer, seed, density=density)
    out, _ = run(layer, x, w, b, load_arch("input-reuse-1024"))
    assert out.dtype == np.float32
    assert rel_err(out, reference.conv2d(x, w, b, layer)) < 1e-5
    assert rel_err(out, torch_conv(layer, x, w, b)) < 1e-5


@given(conv_layers(), st.integers(0, 2**31), st.sampled_from([1.0, 0.4]))
def test_int8_bit_identical_to_exact_integer_reference(layer, seed, density):
    layer = layer.with_dtype("int8")
    x, w, b = tensors(layer, seed, "int8", density)
    out, _ = run(layer, x, w, b, load_arch("input-reuse-1024"))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, reference.conv2d(x, w, b, layer))


@given(conv_layers(max_hw=12), st.integers(0, 2**31), st.sampled_from([1.0, 0.5, 0.1]),
       st.sampled_from(["full", "bus", "chain"]), st.sampled_from([16, 24, 36, 400]),
       st.integers(1, 3), st.booleans(), st.sampled_from(["spread", "own-unit"]))
def test_estimate_from_masks_equals_run(layer, seed, density, link, accumulators, depth, steal,
                                        mapping):
    arch = arch_with(interconnect=link, accumulators=accumulators, region_channels=depth,
                     mapping=mapping,
                     work_stealing=steal, operation_units=3, processing_units=2, bus_width=5)
    x, w, b = tensors(layer, seed, density=density)
    _, ran = run(layer, x, w, b, arch)
    assert DF.estimate(layer, x != 0, w != 0, arch) == ran


def test_fig2a_region_1_to_9_gives_15():
    x = np.arange(1, 10, dtype=np.int8).reshape(1, 1, 3, 3)
    out, _ = npusim.conv2d(x, FIG2A_KERNEL[None, None], dataflow="input-reuse",
                           arch="input-reuse-1024")
    assert out.item() == 15


@pytest.mark.parametrize("emulate", [False, True])
def test_fig2b_one_pixel_ifm_of_9(emulate):
    x = np.full((1, 1, 1, 1), 9, np.int8)
    out, _ = npusim.conv2d(x, FIG2A_KERNEL[None, None], padding=2, dataflow="input-reuse",
                           arch="input-reuse-1024", emulate=emulate)
    # 1-indexed (1,1), (1,2), (3,3) of the 3x3 OFM
    assert (out[0, 0, 0, 0], out[0, 0, 0, 1], out[0, 0, 2, 2]) == (9, 27, -9)


def fig5_layer(weights):
    """Fig. 5: one 4x4 region, one 3x3 kernel, one unit and one PU (no transfer needed)."""
    layer = ConvLayer(1, 1, 4, 4, 1, 3, 3, dtype="int8")
    arch = arch_with(FREE, operation_units=1, processing_units=1, interconnect="chain")
    x = np.arange(1, 17, dtype=np.int8).reshape(1, 1, 4, 4)
    return layer, x, weights.reshape(1, 1, 3, 3).astype(np.int8), arch


def test_fig5_nine_cycles_for_a_4x4_region_and_3x3_kernel():
    layer, x, w, arch = fig5_layer(FIG2A_KERNEL)
    _, s = run(layer, x, w, None, arch)
    assert s.cycles == 9
    assert s.extra["peak_pofm_rows"] == 6 and s.extra["peak_pofm_cols"] == 6
    assert s.products == 16 * 9


def test_energy_charges_every_product_the_regions_perform():
    """Fig. 5: the 4x4 region times the 9 weights is 144 products; only the 2x2 output's 36
    are useful MACs, but the multipliers spend energy on all 144 (Horowitz, 45 nm: 0.23 pJ an
    int8 MAC, 4.6 pJ fp32; 2.5 pJ an SRAM byte; 162.5 pJ a DRAM byte)."""
    layer, x, w, arch = fig5_layer(FIG2A_KERNEL)
    _, s = run(layer, x, w, None, arch)
    assert (s.macs, s.products) == (36, 144)
    mac_pj = 0.23 if layer.dtype == "int8" else 4.6
    assert s.energy_pj == pytest.approx(144 * mac_pj + 2.5 * s.sram_bytes + 162.5 * s.dram_bytes)


@pytest.mark.parametrize("zeros", [1, 4, 8])
def test_one_cycle_saved_per_zero_weight(zeros):
    w = FIG2A_KERNEL.copy().ravel()
    w[np.random.default_rng(zeros).choice(9, zeros, replace=False)] = 0
    layer, x, w, arch = fig5_layer(w)
    for emulate in (False, True):
        _, s = (DF.emulate if emulate else DF.run)(layer, x, w, None, arch)
        assert s.cycles == 9 - zeros
        assert s.extra["zero_weight_cycles_skipped"] == zeros


@pytest.mark.parametrize("accumulators, shape, parts", [(36, (3, 12), 1), (12, (1, 12), 3)])
def test_fig8_fig9_partial_ofm_of_a_1x10_region(accumulators, shape, parts):
    """Fig. 8: a 1x10 region and a 3x3 kernel fill a 3x12 partial OFM (36 accumulators);
    on a datapath of 12 accumulators the kernel runs as three 1x3 parts (Fig. 9: 1x12)."""
    layer = ConvLayer(1, 1, 3, 12, 1, 3, 3)
    arch = arch_with(region_rows=1, region_cols=10, accumulators=accumulators)
    x, w, _ = tensors(layer, 0)
    _, s = run(layer, x, w, None, arch)
    assert (s.extra["peak_pofm_rows"], s.extra["peak_pofm_cols"]) == shape
    assert s.extra["peak_kernel_parts"] == parts


def test_zero_pixels_cost_no_products_and_no_stream_bytes():
    layer = ConvLayer(1, 2, 8, 8, 4, 3, 3, padding=1)
    x, w, _ = tensors(layer, 1)
    x[:, 0] = 0  # a whole channel of zeros
    _, s = run(layer, x, w, None, load_arch("input-reuse-1024"))
    assert s.products == 4 * 9 * 64  # only channel 1: 64 pixels, 9 taps, 4 kernels
    # 8x8 per channel = 4 blocks of 4x4: bitmaps (2 bytes each) for both, values for one
    assert s.dram_ifmap_bytes == 2 * 4 * 2 + 64 * 4
    # the region grid tiles the real 8x8 map (2x2 regions), not the padded 10x10 (3x3)
    assert s.extra["zero_pixel_cycles_skipped"] == 4 * 9 * 4  # 4 regions x 9 taps x 4 kernels


def test_work_stealing_saves_time_on_uneven_kernels():
    layer = ConvLayer(1, 4, 8, 8, 4, 3, 3, padding=1)
    x, w, _ = tensors(layer, 2)
    w[:3, :, :, :] = 0
    w[:3, 0, 1, 1] = 1.0  # three kernels with one weight, one dense kernel
    _, on = run(layer, x, w, None, arch_with(FREE, work_stealing=True))
    _, off = run(layer, x, w, None, arch_with(FREE, work_stealing=False))
    assert on.cycles < off.cycles
    assert on.extra["stealing_saved_cycles"] == off.cycles - on.cycles


def test_multiplier_utilisation_counts_useful_products():
    layer = ConvLayer(1, 3, 16, 16, 8, 3, 3, padding=1)
    x, w, _ = tensors(layer, 3, density=0.5)
    _, s = run(layer, x, w, None, load_arch("input-reuse-1024"))
    assert s.macs == int(reference.conv2d((x != 0) * 1, (w != 0) * 1, None, layer).sum())
    assert s.pe_cycles == 1024 * s.cycles
    assert 0 < s.utilisation <= 1


def _two_convs(shape, first, second, seed):
    """simulate() of conv (weights ``first``) -> ReLU -> conv (``second``), 'same' padding,
    on seeded inputs and weights, on input-reuse-1024."""
    g = GraphBuilder("two", shape)
    rng = np.random.default_rng(seed)
    y = g.relu(g.conv(g.input, rng.standard_normal(first).astype(np.float32),
                      padding=first[2] // 2))
    g.conv(y, rng.standard_normal(second).astype(np.float32), padding=second[2] // 2)
    return npusim.simulate(g.build(), rng.standard_normal(shape), "input-reuse-1024")


def test_peak_pofm_is_a_maximum_in_network_totals():
    """A 3x3 layer (one 6x6 part) and a 5x5 layer: 8x8 = 64 cells do not fit 36
    accumulators; 3x3 tiles (4 parts, 6x6 each) are the fewest that fit (5x1: 5 parts of
    8x4; 2x4: 6 parts of 5x7). Totals: the maxima, not sums."""
    res = _two_convs((1, 2, 8, 8), (3, 2, 3, 3), (2, 3, 5, 5), 0)
    assert [s.extra["peak_kernel_parts"] for s in res.conv_layers] == [1, 4]
    assert res.total.extra["peak_pofm_rows"] == 6 and res.total.extra["peak_kernel_parts"] == 4
    assert res.total.extra["transfers"] == sum(s.extra.get("transfers", 0) for s in res.layers)


def test_simulate_modes_agree_on_a_small_network():
    g = GraphBuilder("tiny", (2, 3, 9, 9))
    rng = np.random.default_rng(1)
    y = g.relu(g.conv(g.input, rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                      stride=2, padding=1))
    g.conv(y, rng.standard_normal((4, 1, 3, 3)).astype(np.float32), padding=1, groups=4)
    graph, x = g.build(), rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    runs = {m: npusim.simulate(graph, x, "input-reuse-1024", mode=m, dtype="int8")
            for m in ("run", "estimate", "emulate")}
    np.testing.assert_array_equal(runs["run"].output, runs["emulate"].output)
    assert [s.cycles for s in runs["run"].layers] == [s.cycles for s in runs["emulate"].layers]
    assert runs["run"].layers == runs["estimate"].layers


def test_first_buffer_too_small_is_refused_with_the_reason():
    """A 7x7 kernel on the 36-accumulator datapath (4x4 regions): 4x2 tiles are the fewest
    parts that fit (8: rows 0-3 and 4-6, columns 0-1, 2-3, 4-5, 6), partial OFMs of
    (7 or 6) x (5, 5, 5 or 4): 13 x 19 = 247 pixels per PU, 4 PUs x 4 B = 3,952 B."""
    with pytest.raises(NpusimError, match=r"need 3952 B of first buffer.*first_buffer_kb=1"):
        npusim.conv2d(np.ones((1, 1, 8, 8)), np.ones((1, 1, 7, 7)), dataflow="input-reuse",
                      arch=arch_with(first_buffer_kb=1, processing_units=4))


@pytest.mark.parametrize("text, message", [
    ('[input-reuse]\ninterconnect = "ring"', r"x.toml: input-reuse.interconnect.*full, bus, chain"),
    ("[input-reuse]\nregion_rows = 0", r"x.toml: input-reuse.region_rows=0.*>= 1"),
    ("[input-reuse]\nwarp = 2", r"unknown key.*warp.*valid keys.*bus_width"),
    ("[input-reuse]\nsecond_buffer_kb = 0", r"x.toml: input-reuse.second_buffer_kb=0.*>= 1"),
])
def test_bad_input_reuse_section_names_the_key(text, message):
    with pytest.raises(ConfigError, match=message):
        arch_from_toml_text(text, "x.toml")


def test_preset_has_as_many_multipliers_as_the_systolic_preset():
    ir = load_arch("input-reuse-1024").params("input-reuse")
    sy = load_arch("systolic-32x32-os").params("systolic")
    assert isinstance(ir, Params) and ir.multipliers == sy.rows * sy.cols == 1024


def test_work_stealing_spreads_a_depthwise_kernel_over_the_idle_units():
    layer = ConvLayer(1, 8, 8, 8, 8, 3, 3, padding=1, groups=8)
    x, w, _ = tensors(layer, 4)
    one_unit = {"operation_units": 1, "interconnect": "chain"}  # no transfers: compute only
    _, on = run(layer, x, w, None, arch_with(FREE, work_stealing=True, **one_unit))
    _, off = run(layer, x, w, None, arch_with(FREE, work_stealing=False, **one_unit))
    assert off.cycles == 8 * 4 * 9  # 8 kernel sets of one kernel, 4 regions, 9 taps
    assert on.cycles == 8 * 4 * 3  # ceil(9 / 4) per region and kernel


def test_memory_bytes_by_hand_for_fig5():
    layer, x, w, arch = fig5_layer(FIG2A_KERNEL)
    _, s = run(layer, x, w, None, arch)
    assert s.sram_ifmap_bytes == 2 + 16  # one 4x4 block: bitmap + 16 int8 values
    assert s.sram_filter_bytes == 9  # one int8 weight per cycle
    assert s.sram_ofmap_bytes == 2 * 4 * 36  # the 6x6 partial OFM read and written, 4 B each
    assert s.dram_filter_bytes == 2 + 9  # 9-bit bitmap in 2 bytes + 9 values
    assert s.dram_ofmap_bytes == 2 + 4  # the 2x2 OFM: one block bitmap + 4 touched values


def test_ofm_written_compressed_stores_only_touched_pixels():
    layer = ConvLayer(1, 1, 8, 8, 1, 1, 1)
    x = np.zeros((1, 1, 8, 8), np.float32)
    x[0, 0, :3, :5] = 1.0
    _, s = run(layer, x, np.ones((1, 1, 1, 1), np.float32), None, load_arch("input-reuse-1024"))
    assert s.dram_ofmap_bytes == 4 * 2 + 15 * 4


def assert_stalls(s, ifmap: float, filter: float, ofmap: float) -> None:
    """The layer's stalls against the hand-computed cycles by cause: the total rounded up
    once, each cause within a cycle of its exact share."""
    assert s.stall_cycles == math.ceil(ifmap + filter + ofmap - 1e-9)
    for got, want in ((s.stall_dram_ifmap_cycles, ifmap), (s.stall_dram_filter_cycles, filter),
                      (s.stall_dram_ofmap_cycles, ofmap)):
        assert abs(got - want) < 1


def _refetch_case(units, filter_kb, bandwidth, ifmap_kb=3):
    """1x1 conv, 64 -> 8 channels on a 4x8 int8 map, dense: two 4x4 regions of 1,152 B of
    stream each; 4 kernels per processing unit set -> 2 kernel sets of 4 x (8 B bitmap +
    64 values) = 288 B. A 3 KiB ifmap SRAM (1,536 usable bytes) holds one region, not two:
    kernel-major would fetch the regions again for each kernel set (4 x 1,152 B), more than
    region-major's weight refetch, so these cases run region-major."""
    layer = ConvLayer(1, 64, 4, 8, 8, 1, 1, dtype="int8")
    x = np.ones(layer.input_shape, np.int8)
    w = np.ones(layer.weight_shape, np.int8)
    arch = arch_with(bandwidth, operation_units=units, processing_units=4,
                     interconnect="chain", work_stealing=False).with_memory(
        filter_sram_kb=filter_kb, ifmap_sram_kb=ifmap_kb)
    return run(layer, x, w, None, arch)[1]


def test_weights_that_overflow_the_filter_sram_are_fetched_again_for_every_region():
    """One operation unit: jobs (region 0, set 0), (0, 1), (1, 0), (1, 1), 64 weight cycles
    each, no transfers (chain, one unit): 4 steps of 64 cycles. Filter: blocks of 288 B
    cycled per region; 576 B do not fit 512 usable bytes (1 KiB double buffered): 4
    fetches. IFM stream: 64 x 2 blocks x 2 B bitmaps + 2048 values = 2304 B, 1152 per
    region, fetched when the region starts. OFM: 8 x 2 blocks x 2 B + 256 values = 288 B,
    one band (the map is one row of regions; its accumulators, 8 x 4 x 8 x 4 B = 1 KiB,
    fit the second buffers), written after its last step. At 2 B/cycle, each step hides
    the next step's fetch if it takes under 64 cycles, the excess stalls, shared by
    bytes: prologue (1152 + 288) / 2; step 0: 288 B; step 1: 1152 + 288 B; step 2: 288 B;
    step 3: nothing; epilogue: the 288 B of OFM, exposed."""
    s = _refetch_case(1, 1, 2.0)
    assert s.compute_cycles == 4 * 64
    assert (s.dram_ifmap_bytes, s.dram_filter_bytes, s.dram_ofmap_bytes) == (2304, 4 * 288, 288)
    step1, step2 = 1440 / 2 - 64, 288 / 2 - 64
    assert_stalls(s, ifmap=1152 / 2 + step1 * 1152 / 1440,
                  filter=288 / 2 + (288 / 2 - 64) + step1 * 288 / 1440 + step2,
                  ofmap=288 / 2)
    assert s.cycles == s.compute_cycles + s.stall_cycles and s.bound == "dram"
    # a 64 KiB filter SRAM holds both sets: each fetched once
    assert _refetch_case(1, 64, 2.0).dram_filter_bytes == 2 * 288
    # stall-free: the compute cycles alone, whatever the bytes
    free = _refetch_case(1, 1, FREE)
    assert (free.cycles, free.stall_cycles) == (4 * 64, 0)


def test_all_weights_streamed_again_by_every_row_when_they_exceed_the_buffer():
    """Two operation units: each row of jobs is one region against both kernel sets, so it
    reads all 576 B of weights; more than the 512 usable bytes, they cannot stay."""
    assert _refetch_case(2, 1, 2.0).dram_filter_bytes == 2 * 576
    assert _refetch_case(2, 64, 2.0).dram_filter_bytes == 576


@pytest.mark.slow
def test_pruned_resnet18_on_a_photo_matches_torch_and_estimate_equals_run():
    import torch

    from npusim.frontends import zoo
    from npusim.frontends.prune import prune
    from npusim.torch_ref import to_torch

    graph = prune(zoo.build("resnet18", size=64), 0.3)
    x = zoo.input_for("resnet18", size=64)
    ran = npusim.simulate(graph, x, "input-reuse-1024")
    est = npusim.simulate(graph, x, "input-reuse-1024", mode="estimate")
    assert ran.layers == est.layers
    with torch.inference_mode():
        ref = to_torch(graph).eval()(torch.from_numpy(x)).numpy()
    assert rel_err(ran.output, ref) < 1e-4
    assert ran.total.extra["zero_pixel_cycles_skipped"] > 0  # ReLU zeros of a real photo


@pytest.mark.parametrize("layer", [
    ConvLayer(2, 6, 13, 11, 4, 3, 3, (2, 3), (1, 2, 0, 1), (2, 1), groups=2),
    ConvLayer(1, 8, 12, 12, 8, 3, 3, 2, 1, groups=8),
    ConvLayer(1, 5, 9, 9, 7, 5, 1, 1, (2, 2, 0, 0), (1, 1)),
    ConvLayer(1, 64, 1, 1, 10, 1, 1),
])
def test_useful_products_are_the_convolution_of_the_masks(layer):
    """Stride, dilation, asymmetric padding, groups, depthwise, 1x1 maps: float64 judge."""
    rng = np.random.default_rng(3)
    xm, wm = rng.random(layer.input_shape) < 0.4, rng.random(layer.weight_shape) < 0.5
    want = reference.conv2d(xm.astype(np.float64), wm.astype(np.float64), None, layer).sum()
    xp = reference.pad_input(xm, layer)
    per_tap = region_work.tap_weights(layer, wm)
    assert region_work.useful_products(layer, xp, per_tap) == int(want)


def test_per_unit_cycles_add_up_and_sum_unit_by_unit_over_layers():
    res = _two_convs((1, 3, 12, 12), (8, 3, 3, 3), (6, 8, 3, 3), 1)
    p = res.arch.params("input-reuse")
    convs = res.conv_layers
    for s in convs + [res.total]:
        busy, dealt = s.extra["opunit_busy_cycles_by_unit"], s.extra["pu_dealt_cycles_by_unit"]
        assert len(busy) == p.operation_units
        assert len(dealt) == p.operation_units * p.processing_units
        assert sum(busy) == s.extra["opunit_busy_cycles"]
        assert sum(dealt) == s.extra["pu_busy_cycles"]
    first, second = (c.extra["pu_dealt_cycles_by_unit"] for c in convs)
    assert res.total.extra["pu_dealt_cycles_by_unit"] == tuple(
        a + b for a, b in zip(first, second, strict=True))
    csv_row = to_csv(res).splitlines()[1]
    assert " ".join(str(v) for v in convs[0].extra["opunit_busy_cycles_by_unit"]) in csv_row


SWEEP = (0.5, 2.0, 10.0, 64.0, 1000.0)


def bandwidth_sweep(preset: str):
    """Every layer of two real pruned networks on a small photo (ResNet-18 at 0.3, AlexNet at
    the deep-compression densities), at 0.5 to 1000 B/cycle: cycles never rise with the
    bandwidth, never fall below max(compute cycles, DRAM bytes / bandwidth), and the
    stall-free machine takes its compute cycles."""
    from npusim.frontends import zoo
    from npusim.frontends.prune import prune

    for name, size, density in (("resnet18", 32, 0.3), ("alexnet", 64, "deep-compression")):
        graph, x = prune(zoo.build(name, size=size), density), zoo.input_for(name, size=size)
        arch = load_arch(preset)
        runs = [npusim.simulate(graph, x, arch.with_memory(dram_bytes_per_cycle=bw),
                                mode="estimate").conv_layers for bw in (*SWEEP, "unlimited")]
        for layer_runs in zip(*runs, strict=True):
            *finite, free = layer_runs
            assert free.cycles == free.compute_cycles == finite[0].compute_cycles
            for bw, s in zip(SWEEP, finite, strict=True):
                assert s.cycles >= max(s.compute_cycles, math.ceil(s.dram_bytes / bw))
            assert [s.cycles for s in finite] == sorted((s.cycles for s in finite), reverse=True)


def test_bandwidth_sweep_on_real_networks_is_monotone_and_above_the_floors():
    bandwidth_sweep("input-reuse-1024")


@pytest.mark.parametrize("emulate", [False, True])
def test_a_thief_fills_a_partial_ofm_of_its_own_that_the_output_side_collects(emulate):
    """One unit, two PUs, a 4x4 region, 1x1 kernels over 4 channels: kernel 0 has 4 weight
    cycles, kernel 1 none. Without stealing PU 0 runs 4 cycles and moves one 16-pixel
    partial OFM over the bus (1 beat): 4 + 1 = 5 cycles. With stealing PU 1 takes kernel 0's
    last two cycles (cycle 1: PU 0 runs channel 0, PU 1 channel 3; cycle 2: 1 and 2) into a
    partial OFM of its own: 2 cycles, then two transfers one after the other: 2 + 2 = 4
    cycles, one extra transfer, twice the first-buffer bytes (written and read, 4 B)."""
    layer = ConvLayer(1, 4, 4, 4, 2, 1, 1, dtype="int8")
    x = np.arange(1, 65, dtype=np.int8).reshape(layer.input_shape)
    w = np.zeros(layer.weight_shape, np.int8)
    w[0] = 1
    got = {}
    for steal in (False, True):
        arch = arch_with(FREE, operation_units=1, processing_units=2, work_stealing=steal,
                         interconnect="bus", bus_width=64)
        out, s = (DF.emulate if emulate else DF.run)(layer, x, w, None, arch)
        np.testing.assert_array_equal(out, reference.conv2d(x, w, None, layer))
        got[steal] = s
    off, on = got[False], got[True]
    assert (off.cycles, off.extra["transfers"], off.sram_ofmap_bytes) == (5, 1, 2 * 4 * 16)
    assert (on.cycles, on.extra["transfers"], on.sram_ofmap_bytes) == (4, 2, 2 * 4 * 32)
    assert on.extra["stealing_saved_cycles"] == 1


@pytest.mark.parametrize("emulate", [False, True])
def test_kernel_major_order_is_taken_when_it_moves_fewer_bytes(emulate):
    """The case above with a 64 KiB ifmap SRAM, one unit: region-major moves 2,304 B of
    stream + 4 x 288 B of weights (they do not fit 512 usable bytes); kernel-major runs
    (set 0, region 0), (0, 1), (1, 0), (1, 1): each set fetched once (576 B), the two
    regions stay (2,304 B < 32 KiB): 2,304 + 576 + the 288 B OFM. Same 4 x 64 cycles."""
    layer = ConvLayer(1, 64, 4, 8, 8, 1, 1, dtype="int8")
    x, w = np.ones(layer.input_shape, np.int8), np.ones(layer.weight_shape, np.int8)
    arch = arch_with(2.0, operation_units=1, processing_units=4, interconnect="chain",
                     work_stealing=False).with_memory(filter_sram_kb=1)
    _, s = (DF.emulate if emulate else DF.run)(layer, x, w, None, arch)
    assert s.extra["kernel_major_layers"] == 1
    assert (s.dram_ifmap_bytes, s.dram_filter_bytes, s.dram_ofmap_bytes) == (2304, 576, 288)
    assert s.compute_cycles == 4 * 64


def _moved_in_order(layer, p, jobs, memory, order) -> int:
    """DRAM bytes of the steps of ``jobs`` run in ``order`` before the output's, priced in
    full: the sum ``loop_order`` compares."""
    blocks = input_reuse.order_blocks(layer, p, jobs, order)
    zero = np.zeros(len(blocks["ifmap"]), np.int64)
    t = traffic(Steps(compute=zero, ofmap_bytes=zero,
                      ofmap_capacity=input_reuse.second_buffer_bytes(p), **blocks), memory)
    return sum(int(v.sum()) for v in t.values())


@given(conv_layers(max_hw=12, max_c=8, max_k=8), st.integers(0, 2**31),
       st.sampled_from([1.0, 0.5, 0.1]), st.integers(1, 4), st.integers(1, 3),
       st.sampled_from([1, 2, 64]), st.sampled_from([1, 2, 64]), st.sampled_from([1, 64]),
       st.sampled_from([1, 32]), st.sampled_from(["spread", "own-unit"]))
def test_no_order_moves_fewer_bytes_than_the_least_so_region_major_at_it_wins(
        layer, seed, density, units, pus, ifmap_kb, filter_kb, ofmap_kb, second_kb, mapping):
    """Each order's steps, priced in full, move at least ``least_moved`` DRAM bytes (the
    input stream and every kernel set, once), whatever fits the buffers, and region-major
    moves just that when ``held_whole`` says its blocks all stay; so ``loop_order``, which
    prices neither order then, and not kernel-major when region-major moves that little,
    picks the order a full comparison picks (region-major on a tie)."""
    x, w, b = tensors(layer, seed, density=density)
    arch = arch_with(operation_units=units, processing_units=pus, mapping=mapping,
                     second_buffer_kb=second_kb).with_memory(
        ifmap_sram_kb=ifmap_kb, filter_sram_kb=filter_kb, ofmap_sram_kb=ofmap_kb)
    asked, real = [], input_reuse.loop_order

    def spy(layer, p, jobs, memory, memo=None):
        asked.append((layer, p, jobs, memory, real(layer, p, jobs, memory, memo)))
        return asked[-1][-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(input_reuse, "loop_order", spy)
        input_reuse.layer_stats(layer, x != 0, w != 0, arch, "input-reuse")
    (layer, p, jobs, memory, chosen), = asked
    moved = {order: _moved_in_order(layer, p, jobs, memory, order)
             for order in input_reuse.ORDERS}
    assert min(moved.values()) >= input_reuse.least_moved(jobs)
    if input_reuse.held_whole(p, input_reuse.order_blocks(layer, p, jobs, "region-major"),
                              memory):
        assert moved["region-major"] == input_reuse.least_moved(jobs)
    assert chosen == min(input_reuse.ORDERS, key=moved.get)


@pytest.mark.parametrize("ifmap_kb, filter_kb, second_kb, held", [
    (64, 64, 32, True), (1, 64, 32, False), (64, 1, 32, False), (64, 64, 1, False)])
def test_region_major_is_taken_unpriced_only_when_its_blocks_all_stay(
        ifmap_kb, filter_kb, second_kb, held):
    """A 3x3 conv of 16 to 32 channels on 16x16 pixels, half dense, on 16 units: each of
    its four rows of jobs starts a quarter of the stream (1,260-1,279 B), its kernel sets
    take 2,867 B and its bands' accumulators 5,120-6,144 B; they fit the usable halves of
    64 KiB double-buffered ifmap and filter SRAMs and four 32 KiB second buffers, and not
    1 KiB ones. ``held_whole`` says so, and when it does, the memory model prices
    region-major's steps at ``least_moved`` and ``loop_order`` prices nothing (no
    ``traffic`` call)."""
    layer = ConvLayer(1, 32, 16, 16, 16, 3, 3, padding=(1, 1, 1, 1), dtype="int8")
    x, w, _ = tensors(layer, 3, density=0.5)
    arch = arch_with(second_buffer_kb=second_kb).with_memory(
        ifmap_sram_kb=ifmap_kb, filter_sram_kb=filter_kb, ofmap_sram_kb=64)
    asked, priced = [], []
    real_order, real_traffic = input_reuse.loop_order, input_reuse.traffic

    def spy(layer, p, jobs, memory, memo=None):
        asked.append((p, jobs, memory))
        return real_order(layer, p, jobs, memory, memo)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(input_reuse, "loop_order", spy)
        patch.setattr(input_reuse, "traffic", lambda *a: priced.append(1) or real_traffic(*a))
        input_reuse.layer_stats(layer, x != 0, w != 0, arch, "input-reuse")
    (p, jobs, memory), = asked
    blocks = input_reuse.order_blocks(layer, p, jobs, "region-major")
    assert input_reuse.held_whole(p, blocks, memory) == held
    assert bool(priced) != held
    if held:
        assert _moved_in_order(layer, p, jobs, memory, "region-major") == \
            input_reuse.least_moved(jobs)


@pytest.mark.parametrize("emulate", [False, True])
@pytest.mark.parametrize("mapping, cycles, busy", [("spread", 8, (4, 4)),
                                                   ("own-unit", 10, (8, 0))])
def test_fig11_mapping_runs_a_region_on_its_own_unit(emulate, mapping, cycles, busy):
    """One 4x4 region, 1x1 kernels over 4 channels, 4 kernels in 2 sets of 2, two units,
    dense: 4 weight cycles a job. Spread, the two sets run side by side (ends 4, 4) and the
    bus moves the 4 partial OFMs (16 pixels, one beat each) at 4..8; own-unit (Fig. 11),
    unit 0's dispatcher serves both (ends 4, 8): transfers at 4..6 and 8..10."""
    layer = ConvLayer(1, 4, 4, 4, 4, 1, 1, dtype="int8")
    x, w = np.ones(layer.input_shape, np.int8), np.ones(layer.weight_shape, np.int8)
    arch = arch_with(FREE, operation_units=2, processing_units=2, work_stealing=False,
                     interconnect="bus", bus_width=64, mapping=mapping)
    _, s = (DF.emulate if emulate else DF.run)(layer, x, w, None, arch)
    assert s.cycles == cycles and s.extra["opunit_busy_cycles_by_unit"] == busy


@pytest.mark.parametrize("emulate", [False, True])
def test_a_full_first_buffer_stalls_its_unit_until_the_bus_drains_one(emulate):
    """One unit, one PU, one 8x8 region (64 accumulators), six 1x1 kernels, dense: six jobs
    of one weight cycle, ending at 1, 2, ..., each with one 64-pixel partial OFM (256 B) that
    takes 64 / 8 = 8 bus cycles. A 1 KiB first buffer holds four. Jobs 0-3 hand off at
    1, 2, 3, 4 (the bus moves them at 1-9, 9-17, 17-25, 25-33); job 4 ends at 5 with the
    buffer full and waits for the first transfer to end at 9 (4 cycles stalled), moved at
    33-41; job 5 starts at 9, ends at 10 and waits for the second to end at 17 (7 cycles),
    moved at 41-49. Stalled 4 + 7 = 11 cycles; 49 cycles (the bus never idles); the bus
    waits are counted from the hand-offs (1, 2, 3, 4, 9, 17 against starts 1, 9, 17, 25,
    33, 41): 0 + 7 + 14 + 21 + 24 + 24 = 90, not the 105 of an unbounded buffer."""
    layer = ConvLayer(1, 1, 8, 8, 6, 1, 1, dtype="int8")
    x, w = np.ones(layer.input_shape, np.int8), np.ones(layer.weight_shape, np.int8)
    got = {}
    for kib in (1, 16):
        arch = arch_with(FREE, operation_units=1, processing_units=1, region_rows=8,
                         region_cols=8, accumulators=64, interconnect="bus", bus_width=8,
                         work_stealing=False, first_buffer_kb=kib)
        out, got[kib] = (DF.emulate if emulate else DF.run)(layer, x, w, None, arch)
        np.testing.assert_array_equal(out, reference.conv2d(x, w, None, layer))
    small, big = got[1], got[16]
    assert small.extra["first_buffer_stall_cycles"] == 11
    assert (small.cycles, small.extra["contention_cycles"]) == (49, 90)
    assert big.extra["first_buffer_stall_cycles"] == 0
    assert (big.cycles, big.extra["contention_cycles"]) == (49, 105)


@pytest.mark.parametrize("emulate", [False, True])
def test_an_output_band_that_overflows_the_second_buffer_spills_its_partial_sums(emulate):
    """1 -> 8 channels, 1x1 kernels on a 4x24 map, dense, 4x4 regions: six regions in one
    region row (one band: OFM rows 0-3, no halo), one kernel set of 8 PUs, two units: rows
    of jobs (regions 0, 1), (2, 3), (4, 5), each job 8 partial OFMs of 16 pixels, a row
    128 x 2 x 4 B = 1,024 B of partial sums. The band's accumulators are 8 kernels x 4 rows
    x 24 columns x 4 B = 3,072 B; one output unit's 1 KiB second buffer cannot hold them,
    so rows 0 and 1 spill theirs after them (2 x 1,024 B written) and rows 1 and 2 read
    them back (2 x 1,024 B): 4,096 B, beside the OFM written once, compressed: 8 channels x
    6 blocks x 2 B of bitmap + 768 int8 values = 864 B. A 3 KiB second buffer holds the
    band: 864 B only."""
    layer = ConvLayer(1, 1, 4, 24, 8, 1, 1, dtype="int8")
    x, w = np.ones(layer.input_shape, np.int8), np.ones(layer.weight_shape, np.int8)
    got = {}
    for kib in (1, 3):
        arch = arch_with(FREE, operation_units=2, processing_units=8, output_units=1,
                         interconnect="bus", second_buffer_kb=kib)
        out, got[kib] = (DF.emulate if emulate else DF.run)(layer, x, w, None, arch)
        np.testing.assert_array_equal(out, reference.conv2d(x, w, None, layer))
    assert got[1].dram_ofmap_bytes == 864 + 4096
    assert got[3].dram_ofmap_bytes == 864
    assert got[1].compute_cycles == got[3].compute_cycles


@pytest.mark.parametrize("emulate", [False, True])
def test_kernel_major_is_taken_when_the_band_of_every_kernel_would_spill(emulate):
    """The layer above with two kernel sets of 4 (4 PUs) and a 1 KiB second buffer:
    region-major holds all 8 kernels' band (3,072 B: spills), kernel-major one set's
    (4 x 4 x 24 x 4 B = 1,536 B: spills too; rows of 2 jobs of 4 x 16 pixels = 512 B, three
    rows per set, 2 written and 2 read back per set: 4 x 512 x 2 sets = 4,096 B) against
    region-major's six rows of 512 B in one band, 5 written + 5 read: 5,120 B; with the
    regions and weights fetched once either way, kernel-major moves fewer bytes and is
    taken: 864 + 4,096 B of OFM traffic."""
    layer = ConvLayer(1, 1, 4, 24, 8, 1, 1, dtype="int8")
    x, w = np.ones(layer.input_shape, np.int8), np.ones(layer.weight_shape, np.int8)
    arch = arch_with(FREE, operation_units=2, processing_units=4, output_units=1,
                     interconnect="bus", second_buffer_kb=1)
    _, s = (DF.emulate if emulate else DF.run)(layer, x, w, None, arch)
    assert s.extra["kernel_major_layers"] == 1
    assert s.dram_ofmap_bytes == 864 + 4096


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_a_layer_of_zero_weights_outputs_its_bias(dtype):
    """Every weight zero: no tap runs, and the output is the bias on every pixel (in the
    output's shape), as float64 maths gives it."""
    layer = ConvLayer(2, 3, 6, 5, 4, 3, 3, stride=(2, 1), padding=(1, 1, 1, 1), dtype=dtype)
    x, _, _ = tensors(layer, 8, dtype)
    w = np.zeros(layer.weight_shape, x.dtype)
    bias = np.arange(1, 5, dtype=np.float32)
    out = DF.compute(layer, x, w, bias, load_arch("input-reuse-1024"))
    want = np.broadcast_to(bias.astype(np.float64)[None, :, None, None], layer.output_shape)
    assert out.shape == layer.output_shape
    assert np.array_equal(np.asarray(out, np.float64), want)


def steal_cycle_by_cycle(cycles):
    """The device's work stealing played one cycle at a time, in plain Python: each cycle
    every PU with cycles left runs the front one of its own queue; then each PU that had
    none at the cycle's start, in slot order, takes the back cycle of the PU with most
    left (the first of equals). done[j, victim, runner, part] counts the cycles run."""
    jobs, pus, parts = cycles.shape
    done = np.zeros((jobs, pus, pus, parts), np.int64)
    for j in range(jobs):
        queues = [[p for p in range(parts) for _ in range(cycles[j, v, p])] for v in range(pus)]
        while any(queues):
            idle = [not q for q in queues]
            for v in range(pus):
                if queues[v]:
                    done[j, v, v, queues[v].pop(0)] += 1
            for thief in (t for t in range(pus) if idle[t]):
                victim = max(range(pus), key=lambda v: (len(queues[v]), -v))
                if not queues[victim]:
                    break
                done[j, victim, thief, queues[victim].pop()] += 1
    return done


@given(st.integers(1, 6), st.integers(1, 3), st.integers(0, 2**31),
       st.sampled_from(["even", "one heavy", "two heavy", "staggered", "spread",
                        "one busy"]))
def test_work_stealing_counted_by_positions_equals_playing_every_cycle(pus, parts, seed,
                                                                       shape):
    """The model counts the thieves' queue positions, runs of an idle tail at once, and a
    job of one busy PU in closed form; the counts of who ran which victim's cycles of which
    part must equal the cycle-by-cycle play, on tails of a few cycles to hundreds (one or
    two PUs far behind the others, PUs at several heights, all spread, or one alone)."""
    rng = np.random.default_rng(seed)
    size = (8, pus, parts)
    if shape == "even":
        cycles = rng.integers(20, 24, size)
    elif shape in ("one heavy", "two heavy"):
        cycles = rng.integers(0, 12, size)
        for v in rng.permutation(pus)[:1 if shape == "one heavy" else 2]:
            cycles[:, v] += rng.integers(100, 600, (8, parts))
    elif shape == "staggered":
        cycles = rng.integers(0, 200, size) * rng.integers(1, 4, (8, pus, 1))
    elif shape == "spread":
        cycles = rng.integers(0, 3, size) * rng.integers(0, 300, (8, pus, 1))
    else:  # a depthwise layer's jobs: one kernel a set, the other slots empty
        cycles = np.zeros(size, np.int64)
        cycles[:, rng.integers(pus)] = rng.integers(0, 300, (8, parts))
    cycles = cycles.astype(np.int64)
    done = steal_cycle_by_cycle(cycles)
    found = region_work._steal(cycles)  # the non-zero counts, in order of (job, v, t, p)
    for got, want in zip(found, (*np.nonzero(done), done[np.nonzero(done)]), strict=True):
        np.testing.assert_array_equal(got, want)


@given(st.integers(1, 30), st.integers(0, 2**31))
def test_jobs_run_in_another_order_take_their_transfers_along(jobs, seed):
    """``reorder`` against a stable sort of the renumbered transfers: job ``order[i]``
    becomes job i, and its transfers keep their order."""
    rng = np.random.default_rng(seed)
    job = np.sort(rng.integers(0, jobs, rng.integers(0, 80)))
    t = Transfers(job, rng.integers(0, 99, job.size), rng.integers(1, 40, job.size))
    work = region_work.Work(
        slot_cycles=rng.integers(0, 9, (jobs, 2)), transfers=t, plain_transfers=None,
        dense_cycles=0, weight_only_cycles=0, products=0, useful_products=0, input_nonzeros=0,
        weight_nonzeros=0, sram_ifmap_words=0, sram_ifmap_bitmaps=0, regions=jobs,
        pofm_peak=(1, 1), region_nonzeros=np.zeros((jobs, 1), np.int64), kernel_parts=1)
    order = rng.permutation(jobs)
    got = region_work.reorder(work, order)
    rank = np.argsort(order)
    seq = np.argsort(rank[job], kind="stable")
    np.testing.assert_array_equal(got.transfers.job, rank[job][seq])
    np.testing.assert_array_equal(got.transfers.kernel, t.kernel[seq])
    np.testing.assert_array_equal(got.transfers.pixels, t.pixels[seq])
    np.testing.assert_array_equal(got.slot_cycles, work.slot_cycles[order])


@given(st.integers(0, 10**12), st.lists(st.one_of(st.integers(0, 50), st.integers(0, 10**12)),
                                        min_size=1, max_size=40))
@example(10**12, [10**12, 10**12, 5])
@example(42_240_000, [10**11, 3 * 10**11, 22_400_000_000])
def test_a_total_shared_by_weights_keeps_every_unit_and_follows_the_running_sums(total, weights):
    """``share`` against plain integers: part i is floor(total x (running weight to i) / all)
    less the same to i - 1, equal weights when they are all zero; an array of totals is
    shared row by row alike. Weights of up to 10**12 make products past int64 (a layer's
    stream of 4e7 bytes, shared by weights summing to 4e11, once came out negative)."""
    from npusim.dataflows.base import share

    def parts(t):
        w = weights if sum(weights) else [1] * len(weights)
        running = [sum(w[:i + 1]) for i in range(len(w))]
        floors = [0] + [t * r // running[-1] for r in running]
        return [b - a for a, b in zip(floors[:-1], floors[1:], strict=True)]

    got = share(total, np.array(weights))
    assert got.tolist() == parts(total)
    assert got.dtype == np.int64 and int(got.sum()) == total
    totals = [total, total // 3, 0]
    assert share(np.array(totals), np.array(weights)).tolist() == [parts(t) for t in totals]


@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 9), st.integers(1, 150),
       st.integers(1, 5), st.integers(1, 40), st.sampled_from([1, 2, 3]), st.integers(0, 2**31))
def test_active_cycles_equal_flags_anded_channel_by_channel(n, g, kg, cg, taps, regions, depth,
                                                            seed):
    """``region_work.active_cycles`` on either side of ``FEW_COLUMNS`` (AND-ed words for
    few regions x taps, a float32 product for many: up to 400 here) against the flags
    AND-ed and counted one by one: a cycle for every kernel, tap, region and group of
    ``depth`` channels in which some channel has a non-zero weight and a non-zero pixel
    (channels not a multiple of 64 or of the depth among them)."""
    rng = np.random.default_rng(seed)
    wp = rng.random((g, kg, cg, taps)) < rng.uniform(0.05, 0.9)
    active = rng.random((n, g, cg, regions)) < rng.uniform(0.05, 0.9)
    both = wp[None, :, :, :, :, None] & active[:, :, None, :, None, :]  # N G Kg Cg taps T
    groups = -(-cg // depth)
    padded = np.zeros((n, g, kg, groups * depth, taps, regions), bool)
    padded[:, :, :, :cg] = both
    expected = padded.reshape(n, g, kg, groups, depth, taps, regions).any(axis=4).sum(
        axis=(3, 4), dtype=np.int64)
    got = region_work.active_cycles(active, region_work.TapWeights(wp), depth)
    np.testing.assert_array_equal(got, expected)
