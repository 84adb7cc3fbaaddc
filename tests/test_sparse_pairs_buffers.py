"""The sparse-pairs machine's own buffers and fixed datapath: kernel stores with a capacity,
the fetch controller's width, kernel loads under every dealing (hand-computed cases); the
emulator against the fast model on every stats field, with buffers that overflow and
all-zero operands; a planning patch the emulator must catch; the bound on cycles when
weights are zeroed."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import conv_layers, tensors
from test_sparse_pairs import FREE, arch_with, params

from npusim.dataflows import get, grouping, sparse_layout
from npusim.ir import ConvLayer

DF = get("sparse-pairs")


def _dense_row_case(store: int, sram_bandwidth):
    """1x1 conv, 64 -> 1 channels on a 2x4 float32 map, dense, one processor: one unit of 8
    pixels, 64 pairs a pixel; the kernel is a 64-bit vector (8 B) + 64 x 4 B = 264 B."""
    layer = ConvLayer(1, 64, 2, 4, 1, 1, 1)
    x = np.ones(layer.input_shape, np.float32)
    w = np.ones(layer.weight_shape, np.float32)
    arch = arch_with(1, 1, "in-order", bandwidth=FREE, kernel_store_bytes=store)
    arch = arch.with_memory(sram_bytes_per_cycle=sram_bandwidth)
    return layer, x, w, arch


@pytest.mark.parametrize("store, loads, streamed", [(264, 264, 0), (100, 8 * 264, 1)])
def test_a_kernel_that_overflows_its_store_is_streamed_for_every_pixel(store, loads, streamed):
    """Fits (264 B store): loaded once for the unit. 100 B: streamed in pieces of 100, 100
    and 64 B with each of the 8 pixels. Filter port: 512 weight reads x 4 B + the loads;
    ifmap port: 512 feature reads x 4 B + 8 receptive-field vectors of 64 bits."""
    layer, x, w, arch = _dense_row_case(store, "unlimited")
    s = DF.run(layer, x, w, None, arch)[1]
    assert (s.extra["kernel_load_bytes"], s.extra["streamed_kernels"]) == (loads, streamed)
    assert s.extra["peak_kernel_bytes"] == 264
    assert s.sram_filter_bytes == 512 * 4 + loads
    assert s.sram_ifmap_bytes == 512 * 4 + 8 * 8
    assert s.sram_ofmap_bytes == 8 * 4
    loaded_vectors = 8 * (1 if streamed == 0 else 8)
    assert s.extra["bitmap_traffic_bytes"] == 64 + loaded_vectors
    assert (s.cycles, s.stall_cycles) == (512, 0)  # unlimited SRAM ports hide every load


@pytest.mark.parametrize("store, stall", [
    # 2 steps of 256 cycles (4 pixels x 64 pairs); the 4192 B of reads and writes other than
    # the loads are shared by cycles, 2096 B a step; at 4 B/cycle a step of B bytes lasts B / 4
    (264, (264 + 2096) / 4 - 256 + 2096 / 4 - 256),  # the one load at the first step
    (100, 2 * ((4 * 264 + 2096) / 4 - 256)),          # 4 streamed loads in every step
])
def test_kernel_loads_cost_cycles_where_the_sram_ports_do_not_hide_them(store, stall):
    layer, x, w, arch = _dense_row_case(store, 4.0)
    s = DF.run(layer, x, w, None, arch)[1]
    assert s.compute_cycles == 512
    assert s.stall_sram_cycles == math.ceil(stall)
    assert DF.emulate(layer, x, w, None, arch)[1] == s
    wide = DF.run(layer, x, w, None, _dense_row_case(store, 64.0)[3])[1]
    assert wide.stall_cycles == 0  # 3152 / 64 < 256: hidden


def test_a_streamed_kernel_is_loaded_in_the_first_step_too():
    """The 100 B store of the case above at 12 B/cycle: each step's 4 streamed loads
    (1056 B) + its 2096 B of other traffic last 3152 / 12 = 262.7 cycles, 6.7 over its 256
    of compute. Leaving the first step's streamed loads to the shared remainder would make
    it compute-bound (2624 / 12 < 256) and the second stall 50.7 cycles."""
    layer, x, w, arch = _dense_row_case(100, 12.0)
    s = DF.run(layer, x, w, None, arch)[1]
    assert (s.compute_cycles, s.stall_sram_cycles) == (512, math.ceil(2 * (3152 / 12 - 256)))
    assert DF.emulate(layer, x, w, None, arch)[1] == s


@pytest.mark.parametrize("fetch_bits, cycles", [(4, 3 + 1), (2, 3 + 2), (1, 4 + 4)])
def test_the_fetch_controller_takes_its_width_of_bits_a_cycle(fetch_bits, cycles):
    """The worked example (4-bit vectors; pixel 0: 3 and 1 pairs, pixel 1: 1 and 0) on one
    group of two processors: a step lasts max(ceil(4 / width), its most pairs)."""
    layer = ConvLayer(1, 4, 1, 2, 2, 1, 1)
    x = np.array([[1, 0], [2, 0], [0, 0], [3, 4]], np.float32).reshape(1, 4, 1, 2)
    w = np.array([[1, 1, 1, 1], [5, 0, 0, 0]], np.float32).reshape(2, 4, 1, 1)
    arch = arch_with(1, 2, "in-order", bandwidth=FREE, fetch_bits_per_cycle=fetch_bits)
    s = DF.run(layer, x, w, None, arch)[1]
    assert s.cycles == cycles
    assert s.extra["idle_cycles_within_groups"] == 2 * cycles - 5
    assert DF.emulate(layer, x, w, None, arch)[1] == s


def test_a_long_vector_takes_several_cycles_even_with_no_pair():
    """9216-bit vectors (AlexNet fc6's 256 x 6 x 6) at 256 bits a cycle: 36 cycles a step,
    though every weight is zero."""
    layer = ConvLayer(1, 256, 6, 6, 2, 6, 6)
    x = np.ones(layer.input_shape, np.float32)
    w = np.zeros(layer.weight_shape, np.float32)
    s = DF.estimate(layer, x != 0, w != 0, arch_with(1, 2, bandwidth=FREE))
    assert (s.macs, s.cycles) == (0, 36)


@pytest.mark.parametrize("dealing, loads", [("weight-groups", 1), ("pixel-slices", 2)])
def test_every_processor_group_loads_the_weight_groups_it_runs(dealing, loads):
    """12 dense 3x3x8 kernels (9 B vector + 72 x 4 B = 297 B each) on 2 groups of 2
    processors. weight-groups: one slice, each kernel loaded once; pixel-slices: 2 slices,
    both processor groups load every weight group. DRAM reads the weights once either way
    (each weight group is in one wave)."""
    layer = ConvLayer(1, 8, 6, 6, 12, 3, 3, padding=1)
    x, w = np.ones(layer.input_shape, np.float32), np.ones(layer.weight_shape, np.float32)
    arch = arch_with(2, 2, "in-order", dealing)
    s = DF.estimate(layer, x != 0, w != 0, arch)
    assert s.extra["kernel_load_bytes"] == loads * 12 * 297
    assert s.sram_filter_bytes == s.macs * 4 + loads * 12 * 297
    assert s.dram_filter_bytes == 12 * 297


zeroing = st.sampled_from(["none", "x", "w", "both"])


@settings(max_examples=60, deadline=None)
@given(conv_layers(max_hw=6, max_c=4, max_k=5, max_rs=3), st.integers(0, 2**16),
       st.sampled_from([1.0, 0.5, 0.2]), params, st.sampled_from(["float32", "int8"]),
       st.sampled_from([0.25, 3.0, FREE]), st.sampled_from([1.0, 8.0, "unlimited"]), zeroing)
def test_emulator_equals_the_fast_model_on_every_field(layer, seed, density, p, dtype,
                                                       dram, sram, zero):
    """1 KiB buffers (features, weights and outputs overflow at these sizes), kernel stores
    of 8-2048 B (kernels streamed or held), finite SRAM ports, all-zero inputs or kernels:
    outputs bit-identical, and the LayerStats equal on every field (cycles, stalls by cause,
    MACs, products, bytes per operand and level, energy, the machine's counters)."""
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype, density)
    if zero in ("x", "both"):
        x = np.zeros_like(x)
    if zero in ("w", "both"):
        w = np.zeros_like(w)
    arch = arch_with(p.processor_groups, p.processors_per_group, p.grouping, p.dealing, dram,
                     kernel_store_bytes=p.kernel_store_bytes,
                     fetch_bits_per_cycle=p.fetch_bits_per_cycle)
    arch = arch.with_memory(ifmap_sram_kb=1, filter_sram_kb=1, ofmap_sram_kb=1,
                            sram_bytes_per_cycle=sram)
    out, emu = DF.emulate(layer, x, w, b, arch)
    fast, est = DF.run(layer, x, w, b, arch)
    np.testing.assert_array_equal(out.view(np.int32), fast.view(np.int32))
    for field in emu.__dataclass_fields__:
        assert getattr(emu, field) == getattr(est, field), field


def test_a_grouping_that_ignores_densities_is_caught_by_the_emulator(monkeypatch):
    """Patch the fast model's grouping to see every kernel as equally dense (so it keeps
    index order): the emulator, which groups by its own count of the weights, disagrees."""
    layer = ConvLayer(1, 16, 6, 6, 8, 3, 3, padding=1)
    rng = np.random.default_rng(3)
    x = np.abs(rng.standard_normal(layer.input_shape)).astype(np.float32)
    w = rng.standard_normal(layer.weight_shape).astype(np.float32)
    w[1::2] *= rng.random(w[1::2].shape) < 0.1  # odd kernels sparse, even ones dense
    arch = arch_with(1, 2, "similar-density", "pixel-slices", FREE)
    emu = DF.emulate(layer, x, w, None, arch)[1]
    assert emu == DF.estimate(layer, x != 0, w != 0, arch)
    real = grouping.weight_groups
    monkeypatch.setattr(grouping, "weight_groups",
                        lambda nnz, size, policy: real(np.zeros_like(nnz), size, policy))
    patched = DF.estimate(layer, x != 0, w != 0, arch)
    assert patched.cycles > emu.cycles
    assert patched != emu


def _dense_feature_bound(layer: ConvLayer, w_mask: np.ndarray, p) -> int:
    """U(w): the cycles if every receptive-field position held a non-zero feature, with the
    grouping of ``w``: per processor group, its units' pixels times their weight group's
    largest non-zero count (at least the vector scan). Written from the docs' rules."""
    nnz = w_mask.reshape(layer.K, -1).sum(axis=1)
    size, groups = p.processors_per_group, p.processor_groups
    if p.grouping == "similar-density":
        nnz = np.sort(nnz)[::-1]  # the i-th weight group holds ranks i*size.. of the sort
    n_wg = -(-layer.K // size)
    heaviest = [int(nnz[i * size:(i + 1) * size].max()) for i in range(n_wg)]
    pixels = layer.N * layer.P * layer.Q
    slices = groups // (math.gcd(n_wg, groups) if p.dealing == "weight-groups" else 1)
    slices = min(slices, pixels)
    cuts = [i * pixels // slices for i in range(slices + 1)]
    scan = max(1, -(-layer.Cg * layer.R * layer.S // p.fetch_bits_per_cycle))
    per_group = [0] * groups
    for u in range(n_wg * slices):
        wg, sl = divmod(u, slices)
        per_group[u % groups] += (cuts[sl + 1] - cuts[sl]) * max(scan, heaviest[wg])
    return max(per_group)


@settings(max_examples=80, deadline=None)
@given(conv_layers(max_hw=6, max_c=4, max_k=9, max_rs=3), st.integers(0, 2**16),
       st.sampled_from([1.0, 0.6, 0.3]), params.filter(lambda p: p.grouping != "equal-work"),
       st.floats(0.0, 0.9))
def test_zeroing_weights_stays_under_the_denser_weights_dense_feature_bound(
        layer, seed, density, p, extra_zeros):
    """Zeroing weights can raise the cycles (the re-sort moves kernels between groups), but
    never above U of the denser weights: cycles(x, w') <= U(w') <= U(w) for w' <= w, under
    the in-order and similar-density groupings (docs/sparse-pairs.md)."""
    x, w, _ = tensors(layer, seed, density=density)
    fewer = w * (np.random.default_rng(seed + 1).random(w.shape) >= extra_zeros)
    arch = arch_with(p.processor_groups, p.processors_per_group, p.grouping, p.dealing, FREE,
                     fetch_bits_per_cycle=p.fetch_bits_per_cycle)
    cycles = DF.estimate(layer, x != 0, fewer != 0, arch).cycles
    assert cycles <= _dense_feature_bound(layer, fewer != 0, p)
    assert _dense_feature_bound(layer, fewer != 0, p) <= _dense_feature_bound(layer, w != 0, p)
    assert DF.estimate(layer, x != 0, w != 0, arch).cycles <= _dense_feature_bound(
        layer, w != 0, p)


def test_kernel_bytes_are_the_vector_and_the_values():
    layer = ConvLayer(1, 3, 4, 4, 2, 3, 3).with_dtype("int8")
    assert sparse_layout.kernel_bytes(layer, np.array([0, 27])).tolist() == [4, 4 + 27]


def test_a_non_finite_feature_meets_only_the_non_zero_weights_as_on_the_machine():
    """x = [NaN, inf, 2] over kernels [0, 0, 1] and [1, 0, 0]: kernel 0 decides only the
    finite pair (2), kernel 1 the NaN; the vectorised run path adds no NaN x 0 or inf x 0."""
    layer = ConvLayer(1, 3, 1, 1, 2, 1, 1)
    x = np.array([np.nan, np.inf, 2], np.float32).reshape(layer.input_shape)
    w = np.array([[0, 0, 1], [1, 0, 0]], np.float32).reshape(layer.weight_shape)
    arch = arch_with(1, 2, bandwidth=FREE)
    out = DF.run(layer, x, w, None, arch)[0].ravel()
    assert out[0] == 2 and np.isnan(out[1])
    np.testing.assert_array_equal(DF.emulate(layer, x, w, None, arch)[0].ravel(), out)


@pytest.mark.parametrize("channels, kernels, groups, side, array", [
    (64, 80, 2, 7, (32, 32)), (48, 96, 3, 6, (32, 32)), (64, 64, 2, 7, (32, 32)),
    (56, 112, 4, 6, (2, 8)), (40, 40, 5, 5, (4, 4))])
def test_a_grouped_input_that_fits_is_read_once(channels, kernels, groups, side, array):
    """A grouped int8 conv whose stored features fit the ifmap buffer: they cross DRAM once,
    by hand the non-zero values (one byte each) and one bitmap bit per element, on both
    levels. Where work units straddle conv groups, their waves' sets of groups overlap,
    and each set held its groups' features as its own: 1.6x on the preset, 4.3x on 2 x 8
    processors."""
    import npusim

    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, channels, side, side)).astype(np.int8)
    x[rng.random(x.shape) < 0.5] = 0
    w = rng.integers(-128, 128, (kernels, channels // groups, 3, 3)).astype(np.int8)
    stored = int(np.count_nonzero(x)) + math.ceil(x.size / 8)
    arch = arch_with(*array)
    for emulate in (False, True):
        _, st = npusim.conv2d(x, w, padding=1, groups=groups, arch=arch, emulate=emulate)
        assert st.dram_ifmap_bytes == stored, emulate
