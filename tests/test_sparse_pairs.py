"""The sparse-pairs machine: outputs against the reference maths, the fast model against the
cycle emulator, run against estimate, a worked cycle example, stats and config errors."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors
from test_input_reuse import assert_stalls

import npusim
from npusim import reference
from npusim.arch.spec import arch_from_toml_text
from npusim.dataflows import get, grouping, sparse_layout, sparse_pairs
from npusim.dataflows.sparse_pairs import Params, imbalance, schedule
from npusim.derived import frozen
from npusim.errors import ConfigError
from npusim.ir import ConvLayer, GraphBuilder
from npusim.stats import total

DF = get("sparse-pairs")
BASE = npusim.load_arch("sparse-pairs-32x32")


FREE = "unlimited"


def arch_with(groups=32, size=32, policy="similar-density", dealing="weight-groups",
              bandwidth=10.0, **keys):
    """The preset with another array, at a DRAM bandwidth (bytes/cycle, or "unlimited":
    the stall-free machine, for the tests that pin compute cycles), other keys as given."""
    p = Params(groups, size, policy, dealing, **keys)
    return dataclasses.replace(BASE.with_memory(dram_bytes_per_cycle=bandwidth),
                               sections={**BASE.sections, "sparse-pairs": p})


def arch_of(p: Params, bandwidth=10.0):
    return arch_with(p.processor_groups, p.processors_per_group, p.grouping, p.dealing,
                     bandwidth, kernel_store_bytes=p.kernel_store_bytes,
                     fetch_bits_per_cycle=p.fetch_bits_per_cycle)


params = st.builds(Params, st.integers(1, 3), st.integers(1, 4), st.sampled_from(grouping.POLICIES),
                   st.sampled_from(grouping.DEALINGS), st.sampled_from([8, 40, 2048]),
                   st.sampled_from([1, 7, 256]))
densities = st.sampled_from([1.0, 0.6, 0.3, 0.0])


@given(conv_layers(), st.integers(0, 2**16), densities)
def test_float32_outputs_match_the_float64_reference(layer, seed, density):
    x, w, b = tensors(layer, seed, density=density)
    out, _ = DF.run(layer, x, w, b, BASE)
    assert out.dtype == np.float32
    assert rel_err(out, reference.conv2d(x, w, b, layer)) <= 1e-5


@given(conv_layers(), st.integers(0, 2**16), densities)
def test_int8_outputs_are_bit_identical_to_the_exact_integer_reference(layer, seed, density):
    layer = layer.with_dtype("int8")
    x, w, b = tensors(layer, seed, "int8", density)
    out, _ = DF.run(layer, x, w, b, BASE)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, reference.conv2d(x, w, b, layer))


@given(conv_layers(), st.integers(0, 2**16), densities, params)
def test_run_and_estimate_give_identical_stats(layer, seed, density, p):
    arch = arch_of(p)
    x, w, b = tensors(layer, seed, density=density)
    _, ran = DF.run(layer, x, w, b, arch)
    assert ran == DF.estimate(layer, x != 0, w != 0, arch)
    assert ran.macs + sum(ran.extra[k] for k in ("skipped_weight_zero", "skipped_feature_zero",
                                                 "skipped_both_zero")) == layer.macs


@given(conv_layers(max_hw=6, max_c=4, max_k=5, max_rs=3), st.integers(0, 2**16),
       st.sampled_from([1.0, 0.5, 0.2]), params, st.sampled_from(["float32", "int8"]))
def test_emulator_equals_the_fast_model_in_outputs_and_stats(layer, seed, density, p, dtype):
    """Bit-identical outputs in both dtypes (the same products summed in the same bit order),
    and equal stats on every field."""
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype, density)
    arch = arch_of(p)
    out, emu_stats = DF.emulate(layer, x, w, b, arch)
    fast, fast_stats = DF.run(layer, x, w, b, arch)
    assert out.dtype == fast.dtype
    np.testing.assert_array_equal(out.view(np.int32), fast.view(np.int32))
    assert emu_stats == fast_stats


@st.composite
def wide_groups(draw):
    """A layer of 1-2 conv groups of 2-6 input channels and 1-70 kernels each: one to three
    blocks of kernels in vector registers, the last one part full, one or two at a time."""
    base = draw(conv_layers(max_hw=6, max_c=6, max_k=1, max_rs=3))
    cg, kg = draw(st.integers(2, 6)), draw(st.integers(1, 70))
    return ConvLayer(base.N, cg * base.groups, base.H, base.W, kg * base.groups, base.R,
                     base.S, base.stride, base.padding, base.dilation, base.groups, base.bias)


@given(wide_groups(), st.integers(0, 2**16), st.sampled_from([1.0, 0.5, 0.2]),
       st.sampled_from(["float32", "int8", "non-finite"]))
def test_emulator_equals_the_fast_models_outputs_on_many_kernels(layer, seed, density, kind):
    """Bit-identical outputs to the emulator with every kernel count up to three register
    blocks, and with NaN, infinite and -0 inputs (which meet only the non-zero weights) in
    every lane; a NaN's sign is not compared (two NaNs added keep either's)."""
    dtype = "int8" if kind == "int8" else "float32"
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype, density)
    if kind == "non-finite":
        rng = np.random.default_rng(seed)
        special = np.array([np.nan, np.inf, -np.inf, -0.0], np.float32)
        pick = rng.random(x.shape) < 0.1
        x = np.where(pick, rng.choice(special, x.shape), x)
    with np.errstate(invalid="ignore"):  # inf - inf in a sum
        out, _ = DF.emulate(layer, x, w, b, arch_with())
    fast, _ = DF.run(layer, x, w, b, arch_with())
    assert out.dtype == fast.dtype
    nan = np.isnan(out) if dtype == "float32" else np.zeros(out.shape, bool)
    np.testing.assert_array_equal(nan, np.isnan(fast) if dtype == "float32" else nan)
    np.testing.assert_array_equal(out[~nan].view(np.int32), fast[~nan].view(np.int32))


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("layer", [
    ConvLayer(2, 6, 9, 23, 6, 3, 3, 1, 1, groups=6, name="depthwise"),
    ConvLayer(1, 4, 11, 13, 12, 3, 2, (2, 1), (1, 2, 0, 1), (2, 1), groups=4,
              name="channel multiplier 3"),
])
def test_one_channel_groups_equal_the_emulator_with_negative_zeros_and_zero_weights(layer,
                                                                                    dtype):
    """Conv groups of one input channel (their own row kernel): bit-identical outputs to the
    emulator, which multiplies only the decided pairs, on inputs holding -0.0 and +0.0 and
    kernels with zero weights."""
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, 5, dtype, 0.5)
    if dtype == "float32":
        x = np.where(np.arange(x.size).reshape(x.shape) % 3 == 0, np.float32(-0.0), x)
    out, emu_stats = DF.emulate(layer, x, w, b, arch_with())
    fast, fast_stats = DF.run(layer, x, w, b, arch_with())
    np.testing.assert_array_equal(out.view(np.int32), fast.view(np.int32))
    assert emu_stats == fast_stats


def _worked_example():
    """1x1 conv, 4 channels, 2 pixels, 2 kernels; pairs per (pixel, kernel) by hand:
    pixel 0 = [1, 1, 0, 1], pixel 1 = [0, 0, 0, 1]; k0 = [1, 1, 1, 1], k1 = [1, 0, 0, 0]
    -> pixel 0: k0 3 pairs, k1 1; pixel 1: k0 1, k1 0."""
    layer = ConvLayer(1, 4, 1, 2, 2, 1, 1)
    x = np.array([[1, 0], [2, 0], [0, 0], [3, 4]], np.float32).reshape(1, 4, 1, 2)
    w = np.array([[1, 1, 1, 1], [5, 0, 0, 0]], np.float32).reshape(2, 4, 1, 1)
    return layer, x, w


def test_worked_example_one_group_of_two_processors_in_lockstep():
    layer, x, w = _worked_example()
    out, st_ = DF.run(layer, x, w, None, arch_with(1, 2, "in-order", bandwidth=FREE))
    np.testing.assert_array_equal(out.ravel(), [6, 4, 5, 0])
    # steps last max(3, 1) + max(1, 1 empty cycle) = 4 cycles; 5 pairs on 2 x 4 slots
    assert (st_.cycles, st_.macs, st_.extra["idle_cycles_within_groups"]) == (4, 5, 3)
    s = schedule(layer, x != 0, w != 0, Params(1, 2, "in-order"))
    assert s.processor_cycles.tolist() == [[4, 1]]


def test_worked_example_two_groups_of_one_processor_each():
    layer, x, w = _worked_example()
    _, st_ = DF.run(layer, x, w, None, arch_with(2, 1, "in-order", bandwidth=FREE))
    # group 0 runs k0: 3 + 1 cycles; group 1 runs k1: 1 + 1 (empty step) cycles
    assert st_.cycles == 4
    assert st_.extra["group_cycles_mean"] == 3.0
    assert st_.extra["group_cycles_by_unit"] == (4, 2)
    assert st_.extra["processor_cycles_max"] == 4  # k0: 3 + 1 pairs, k1: 1 pair
    assert st_.extra["processor_cycles_mean"] == 2.5
    assert imbalance(st_) == pytest.approx(4 / 3)
    assert st_.extra["idle_cycles_between_groups"] == 2 * 4 - 6


def test_dense_tensors_decide_every_pair_and_zero_weights_none():
    layer = ConvLayer(1, 3, 5, 5, 4, 3, 3, padding=0)
    x, w, _ = tensors(layer, 1)
    dense = DF.estimate(layer, x != 0, w != 0, BASE)
    assert dense.macs == layer.macs
    empty = DF.estimate(layer, x != 0, np.zeros_like(w, bool), arch_with(bandwidth=FREE))
    # 9 pixels, one weight group: sliced one pixel per processor group, one empty cycle each
    assert empty.macs == 0 and empty.cycles == 1
    assert empty.extra["work_units"] == layer.P * layer.Q
    assert empty.extra["skipped_feature_zero"] == 0
    assert empty.extra["skipped_weight_zero"] == layer.macs


def _alternating_densities():
    layer = ConvLayer(1, 16, 6, 6, 8, 3, 3, padding=1)
    rng = np.random.default_rng(3)
    x = np.abs(rng.standard_normal(layer.input_shape)).astype(np.float32)
    w = rng.standard_normal(layer.weight_shape).astype(np.float32)
    w[1::2] *= rng.random(w[1::2].shape) < 0.1  # odd kernels 10 % dense, even ones dense
    return layer, x != 0, w != 0


@pytest.mark.parametrize("groups,dealing", [(1, "weight-groups"), (2, "pixel-slices")])
def test_similar_density_wins_when_a_group_runs_several_weight_groups(groups, dealing):
    """Lockstep steps cost the densest member: sorted groups pay for the dense kernels once."""
    layer, xm, wm = _alternating_densities()
    cycles = {pol: DF.estimate(layer, xm, wm, arch_with(groups, 2, pol, dealing, FREE)).cycles
              for pol in grouping.POLICIES}
    assert cycles["similar-density"] < cycles["in-order"]
    assert cycles["similar-density"] < cycles["equal-work"]


def test_one_unit_per_group_is_bound_by_the_densest_kernel_whatever_the_grouping():
    """4 weight groups on 4 processor groups, dense features: every policy puts the densest
    kernel in some unit, and that unit (all pixels, 9 x 16 pairs a step at most) ends last."""
    layer, xm, wm = _alternating_densities()
    xm = np.ones_like(xm)
    cycles = {DF.estimate(layer, xm, wm, arch_with(4, 2, pol, bandwidth=FREE)).cycles
              for pol in grouping.POLICIES}
    pc = schedule(layer, xm, wm, Params(4, 2, "in-order")).processor_cycles
    assert cycles == {int(pc.max())}


def _tiny_graph():
    rng = np.random.default_rng(0)
    g = GraphBuilder("tiny", (1, 3, 10, 10))
    a = g.relu(g.conv(g.input, rng.standard_normal((6, 3, 3, 3)), rng.standard_normal(6),
                      padding=1))
    w2 = rng.standard_normal((6, 1, 3, 3)) * (rng.random((6, 1, 3, 3)) < 0.5)
    a = g.relu(g.conv(a, w2, stride=2, padding=1, groups=6))
    return g.build(g.conv(a, rng.standard_normal((4, 6, 1, 1))))


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_simulate_run_estimate_and_emulate_agree_on_a_network(dtype):
    graph = _tiny_graph()
    x = np.random.default_rng(1).standard_normal(graph.input_shape).astype(np.float32)
    arch = arch_with(2, 4)
    res = {m: npusim.simulate(graph, x, arch, mode=m, dtype=dtype) for m in
           ("run", "estimate", "emulate")}
    assert res["run"].layers == res["estimate"].layers == res["emulate"].layers
    if dtype == "int8":
        np.testing.assert_array_equal(res["run"].output, res["emulate"].output)
    net = total(res["run"].conv_layers)
    assert net.extra["group_cycles_max"] == net.compute_cycles
    by_group = [s.extra["group_cycles_by_unit"] for s in res["run"].conv_layers]
    assert net.extra["group_cycles_by_unit"] == tuple(map(sum, zip(*by_group, strict=True)))
    assert imbalance(net) >= 1.0 and imbalance(net, "processor") >= 1.0


def test_preset_has_as_many_multipliers_as_the_systolic_preset():
    p, s = BASE.params("sparse-pairs"), npusim.load_arch("systolic-32x32-ws").params("systolic")
    assert p.processors == s.rows * s.cols == 1024


@pytest.mark.parametrize("body,message", [
    ('grouping = "random"', r"x.toml: sparse-pairs.grouping='random': must be one of "
                            r"in-order, similar-density, equal-work"),
    ("processors_per_group = 0", r"x.toml: sparse-pairs.processors_per_group=0: must be >= 1"),
    ("lanes = 4", r"x.toml: sparse-pairs: unknown key\(s\) lanes; valid keys: dealing, "
                  r"fetch_bits_per_cycle, grouping, kernel_store_bytes, processor_groups, "
                  r"processors_per_group"),
    ("kernel_store_bytes = 0", r"x.toml: sparse-pairs.kernel_store_bytes=0: must be >= 1"),
    ('dealing = "any"', r"x.toml: sparse-pairs.dealing='any': must be one of weight-groups, "
                        r"pixel-slices"),
])
def test_bad_sparse_pairs_section_names_the_file_key_value_and_rule(body, message):
    with pytest.raises(ConfigError, match=message):
        arch_from_toml_text(f'dataflow = "sparse-pairs"\n[sparse-pairs]\n{body}\n', "x.toml")


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_conv2d_entry_point_fast_and_emulated_agree(dtype):
    rng = np.random.default_rng(5)
    x = np.maximum(rng.standard_normal((2, 4, 7, 6)), 0).astype(np.float32)
    w = (rng.standard_normal((6, 2, 3, 3)) * (rng.random((6, 2, 3, 3)) < 0.5)).astype(np.float32)
    kw = dict(stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2,
              dataflow="sparse-pairs", arch=arch_with(2, 2, "equal-work"), dtype=dtype)
    fast, fast_stats = npusim.conv2d(x, w, **kw)
    emu, emu_stats = npusim.conv2d(x, w, emulate=True, **kw)
    assert fast_stats == emu_stats
    assert fast_stats.macs < fast_stats.dense_macs
    if dtype == "int8":
        np.testing.assert_array_equal(fast, emu)
    else:
        np.testing.assert_allclose(fast, emu, rtol=1e-5, atol=1e-5 * np.abs(fast).max())


def _refetch_case(ifmap_kb, bandwidth, dealing="weight-groups"):
    """1x1 conv, 64 -> 2 channels on a 2x4 float32 map, dense, on one processor group of one
    processor: two weight groups of one kernel, each a wave of one unit over all 8 pixels;
    a step is one output row (4 pixels, 64 pairs each: 256 cycles)."""
    layer = ConvLayer(1, 64, 2, 4, 2, 1, 1)
    x = np.ones(layer.input_shape, np.float32)
    w = np.ones(layer.weight_shape, np.float32)
    arch = arch_with(1, 1, "in-order", dealing, bandwidth).with_memory(ifmap_sram_kb=ifmap_kb)
    return DF.run(layer, x, w, None, arch)[1]


@pytest.mark.parametrize("dealing", grouping.DEALINGS)
def test_features_that_overflow_the_ifmap_sram_are_read_again_by_every_wave(dealing):
    """Features: 512 values x 4 B + a 64-bit bitmap = 2112 B, 1056 per output row; they do
    not fit 512 usable bytes (1 KiB double buffered), so wave 1 reads them again: 4224 B.
    Weights: 8 B bitmap + 256 B per kernel, loaded when its wave starts. Outputs: 4 pixels
    x 4 B per step. At 2 B/cycle each 256-cycle step hides the next step's fetch and the
    last step's write-back when they take less, the excess stalls, shared by bytes:
    prologue 1056 + 264 B; step 0: 1056 B; step 1: 1056 + 264 + 16 B; step 2: 1056 + 16 B;
    step 3: 16 B (hidden); epilogue 16 B."""
    s = _refetch_case(1, 2.0, dealing)
    assert s.compute_cycles == 4 * 256
    assert (s.dram_ifmap_bytes, s.dram_filter_bytes, s.dram_ofmap_bytes) == (4224, 528, 64)
    step1, step2 = 1336 / 2 - 256, 1072 / 2 - 256
    assert_stalls(s, ifmap=1056 / 2 + (1056 / 2 - 256) + step1 * 1056 / 1336
                  + step2 * 1056 / 1072, filter=264 / 2 + step1 * 264 / 1336,
                  ofmap=step1 * 16 / 1336 + step2 * 16 / 1072 + 8)
    assert s.bound == "dram"
    # a 64 KiB ifmap SRAM holds the features across both waves
    assert _refetch_case(64, 2.0, dealing).dram_ifmap_bytes == 2112
    free = _refetch_case(1, FREE, dealing)
    assert (free.cycles, free.stall_cycles) == (4 * 256, 0)


@given(conv_layers(max_hw=6, max_c=4, max_k=5, max_rs=3), st.integers(0, 2**16),
       st.sampled_from([1.0, 0.5]), params, st.sampled_from([0.25, 3.0, FREE]))
def test_emulator_priced_through_the_memory_model_equals_the_fast_model(
        layer, seed, density, p, bandwidth):
    """Small buffers (1 KiB each) so that weights and features overflow at small bandwidth:
    the emulator's own steps give the same cycles, stalls and DRAM bytes."""
    x, w, b = tensors(layer, seed, density=density)
    arch = arch_of(p, bandwidth).with_memory(ifmap_sram_kb=1, filter_sram_kb=1,
                                             ofmap_sram_kb=1)
    emu = DF.emulate(layer, x, w, b, arch)[1]
    fast = DF.estimate(layer, x != 0, w != 0, arch)
    assert (emu.cycles, emu.compute_cycles, emu.stall_cycles, emu.dram_bytes) == (
        fast.cycles, fast.compute_cycles, fast.stall_cycles, fast.dram_bytes)
    assert emu == fast


def test_emulator_equals_the_fast_model_when_weights_overflow_the_filter_sram():
    """6 kernels x 72 float32 weights (1728 B, dense) against 512 usable bytes, 0.5 B/cycle."""
    layer = ConvLayer(1, 8, 5, 5, 6, 3, 3, padding=1)
    x, w, b = tensors(layer, 3, density=1.0)
    arch = arch_with(2, 2, "equal-work", "pixel-slices", 0.5).with_memory(filter_sram_kb=1)
    fast = DF.estimate(layer, x != 0, w != 0, arch)
    assert fast.dram_filter_bytes >= 6 * (9 + 72 * 4) and fast.stall_dram_filter_cycles > 0
    assert DF.emulate(layer, x, w, b, arch)[1] == fast


def test_bandwidth_sweep_on_real_networks_is_monotone_and_above_the_floors():
    from test_input_reuse import bandwidth_sweep

    bandwidth_sweep("sparse-pairs-32x32")


@pytest.mark.parametrize("dealing, waves", [("weight-groups", 3), ("pixel-slices", 6)])
def test_weights_read_once_and_features_once_per_wave(dealing, waves):
    """12 dense 3x3 kernels over 8 channels on 2 groups of 2 processors: 6 weight groups.
    weight-groups: gcd(6, 2) = 2 -> one slice, 6 units, 3 waves; pixel-slices: 2 slices,
    12 units, 6 waves. Each weight group runs in one wave, so the weights (per kernel a
    72-bit vector in 9 B + 72 x 4 B) are read once, 12 x 297 B, though they overflow a 1 KiB
    filter buffer; the features (288 values x 4 B + a 288-bit bitmap = 1188 B) do not fit
    512 usable bytes and are read again by every wave."""
    layer = ConvLayer(1, 8, 6, 6, 12, 3, 3, padding=1)
    x, w = np.ones(layer.input_shape, np.float32), np.ones(layer.weight_shape, np.float32)
    arch = arch_with(2, 2, "in-order", dealing).with_memory(ifmap_sram_kb=1, filter_sram_kb=1)
    s = DF.estimate(layer, x != 0, w != 0, arch)
    assert s.extra["work_units"] == 2 * waves
    assert s.dram_filter_bytes == 12 * (9 + 72 * 4)
    assert s.dram_ifmap_bytes == waves * (288 * 4 + 36)
    assert s.dram_ofmap_bytes == 12 * 36 * 4


@pytest.mark.parametrize("dealing", grouping.DEALINGS)
def test_a_depthwise_wave_reads_only_its_own_channels(dealing):
    """8 depthwise 3x3 kernels on 2 groups of 2 processors, in order: 4 weight groups of 2
    kernels (weight-groups: one slice, 2 waves of 4 channels; pixel-slices: 2 slices, 4
    waves of one weight group, 2 channels). The features (288 values x 4 B + a 288-bit
    bitmap = 1188 B) do not fit 512 usable bytes, but each wave reads only its own
    channels, so the input crosses DRAM once (before, every wave read all 8: 2,376 and
    4,752 B); the emulator prices the same."""
    layer = ConvLayer(1, 8, 6, 6, 8, 3, 3, padding=1, groups=8)
    x, w = np.ones(layer.input_shape, np.float32), np.ones(layer.weight_shape, np.float32)
    arch = arch_with(2, 2, "in-order", dealing).with_memory(ifmap_sram_kb=1, filter_sram_kb=1)
    s = DF.estimate(layer, x != 0, w != 0, arch)
    assert s.dram_ifmap_bytes == 288 * 4 + 36
    assert DF.emulate(layer, x, w, None, arch)[1] == s


def test_a_fast_model_whose_waves_read_every_channel_is_caught_by_the_emulator(monkeypatch):
    """The case above with the fast model's waves patched to read every conv group (one
    set, as before the waves read their own): it reads the input twice, and disagrees
    with the emulator, which reads per wave the groups of the kernels it loaded."""
    from npusim.dataflows import sparse_layout

    layer = ConvLayer(1, 8, 6, 6, 8, 3, 3, padding=1, groups=8)
    x, w = np.ones(layer.input_shape, np.float32), np.ones(layer.weight_shape, np.float32)
    arch = arch_with(2, 2, "in-order", "weight-groups").with_memory(ifmap_sram_kb=1)
    monkeypatch.setattr(sparse_layout, "wave_sets", lambda layer, pl, processor_groups: (
        np.ones((1, layer.groups), bool), np.zeros(-(-pl.units // processor_groups), np.int64)))
    s = DF.estimate(layer, x != 0, w != 0, arch)
    assert s.dram_ifmap_bytes == 2 * (288 * 4 + 36)
    assert DF.emulate(layer, x, w, None, arch)[1] != s


@given(conv_layers(max_hw=9, max_c=4, max_k=9, max_rs=3), st.integers(0, 2**16), params)
def test_lockstep_steps_last_as_long_as_their_busiest_processor(layer, seed, p):
    """The units' cycles per chunk of Q pixels and their processors' pairs, written plainly
    per unit from random pair counts: a step is max(scan, the most pairs among the unit's
    kernels at that pixel); an empty slot multiplies nothing."""
    rng = np.random.default_rng(seed)
    per = rng.integers(0, 30, (layer.K, layer.N * layer.P * layer.Q)).astype(np.int32)
    lay = sparse_layout.layout(layer, rng.integers(0, 9, layer.K), p)
    scan = sparse_pairs.scan_cycles(layer, p)
    chunk_cycles, busy = sparse_pairs._units(layer, per, lay, scan)
    for u in range(lay.plan.units):
        kernels, lo, hi = lay.plan.unit(u)
        held = kernels[kernels != grouping.EMPTY]
        step = np.maximum(per[held, lo:hi].max(axis=0, initial=0), scan)
        want = [int(step[c:c + layer.Q].sum()) for c in range(0, hi - lo, layer.Q)]
        assert chunk_cycles[u].tolist() == want + [0] * (lay.chunks - len(want))
        assert busy[u].tolist() == [int(per[k, lo:hi].sum()) if k != grouping.EMPTY else 0
                                    for k in kernels]


def test_layouts_are_made_once_per_weight_mask_and_machine():
    """A read-only weight count keeps the layouts of its last KEPT machines; a writable one
    gets a fresh layout every call (it could change under a kept one)."""
    layer = ConvLayer(1, 8, 6, 6, 12, 3, 3, padding=1)
    nnz = frozen(np.arange(12))
    first = sparse_layout.layout(layer, nnz, Params())
    assert sparse_layout.layout(layer.with_dtype("float32"), nnz, Params()) is first
    assert sparse_layout.layout(layer, nnz, Params(4, 2)) is not first
    for groups in range(1, sparse_layout.KEPT + 1):
        sparse_layout.layout(layer, nnz, Params(groups, 3))
    assert sparse_layout.layout(layer, nnz, Params()) is not first
    writable = np.arange(12)
    assert sparse_layout.layout(layer, writable, Params()) is not sparse_layout.layout(
        layer, writable, Params())


@given(st.integers(1, 40), st.integers(1, 5), st.integers(1, 6), st.integers(0, 2**16))
def test_steps_end_when_the_last_unit_of_their_wave_has_done_the_chunk(units, chunks, groups,
                                                                       seed):
    """Step cycles by whole-array operations: unit u ends its chunk c at the sum of its
    processor group's (u mod groups) earlier units and its own chunks up to c; a step (wave,
    chunk) ends at the latest of its wave's units, and lasts from the latest end before it."""
    rng = np.random.default_rng(seed)
    chunk_cycles = rng.integers(0, 9, (units, chunks))
    waves = -(-units // groups)
    keep = rng.random(waves * chunks) < 0.8
    done = np.zeros((waves * groups, chunks), np.int64)
    done[:units] = np.cumsum(chunk_cycles, axis=1)
    earlier = np.cumsum(done[:, -1].reshape(waves, groups), axis=0) - done[:, -1].reshape(
        waves, groups)
    done[:units] += earlier.ravel()[:units, None]
    ends = np.maximum.accumulate(done.reshape(waves, groups, chunks).max(axis=1).ravel()[keep])
    want = np.diff(ends, prepend=0)
    got = sparse_pairs._step_cycles(chunk_cycles, keep, groups, np.empty(len(want), np.int64))
    assert got.tolist() == want.tolist()
