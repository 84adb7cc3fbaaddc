"""The cycle emulator of the systolic array against the reference maths and the fast model:
same outputs (bit-identical in int8), same cycles, same SRAM counts, on random layers."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors

import npusim
from npusim import reference
from npusim.arch import load_arch
from npusim.dataflows.systolic import Params, Systolic
from npusim.emulate.systolic import emulate_layer, os_fold, stationary_fold
from npusim.ir import ConvLayer, GraphBuilder

STATIONARY = ("os", "ws", "is")
ARRAYS = [(2, 3), (4, 4), (3, 2), (1, 5), (1, 1)]


def small_arch(rows, cols, stationary):
    arch = load_arch("systolic-32x32-os")
    return dataclasses.replace(arch, sections={"systolic": Params(rows, cols, stationary)})


@settings(max_examples=150)
@given(conv_layers(max_hw=6, max_c=4, max_k=4, max_rs=3), st.sampled_from(ARRAYS),
       st.sampled_from(STATIONARY), st.sampled_from(["float32", "int8"]), st.integers(0, 99))
def test_emulator_equals_reference_and_fast_model(layer, shape, stationary, dtype, seed):
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype)
    arch = small_arch(*shape, stationary)
    out, stats = Systolic().emulate(layer, x, w, b, arch)
    ref = reference.conv2d(x, w, b, layer)
    if dtype == "int8":
        assert out.dtype == np.int32 and np.array_equal(out, ref)
    else:
        assert out.dtype == np.float32 and rel_err(out, ref) < 1e-5
    assert stats == Systolic().stats(layer, arch)


@pytest.mark.parametrize("stationary, cycles", [
    # one PE: OS does T MACs in T cycles; WS/IS load the PE (1 cycle) then stream T values
    ("os", 5), ("ws", 1 + 4), ("is", 1 + 3)])
def test_one_pe_machine_cycle_counts_by_hand(stationary, cycles):
    # 1x1 conv, C=5 (T=5 for OS), 2x2 map (M=4 for WS), K=3 (F=3 for IS): one output per fold
    layer = ConvLayer(1, 5, 2, 2, 3, 1, 1)
    x, w, _ = tensors(layer, 0)
    run = emulate_layer(layer, x, w, None, Params(1, 1, stationary))
    folds = {"os": 4 * 3, "ws": 5 * 3, "is": 5 * 4}[stationary]
    assert run.folds == folds and run.busy_cycles == folds * cycles


def test_os_fold_skew_fill_and_drain():
    """A 2x3 array, T=4: the last pair meets PE(1, 2) in cycle 4 + 1 + 2 - 1 (from 0)."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(-9, 9, (2, 4)), rng.integers(-9, 9, (4, 3))
    out, cycles = os_fold(a, b, np.zeros((2, 3), np.int64), 2, 3)
    assert cycles == 4 + 2 + 3 - 2 and np.array_equal(out, a @ b)
    out, cycles = os_fold(a[:1], b[:, :2], np.ones((1, 2), np.int64), 2, 3)
    assert cycles == 4 + 2 + 3 - 2 and np.array_equal(out, a[:1] @ b[:, :2] + 1)


def test_stationary_fold_partial_sums_enter_at_the_top():
    rng = np.random.default_rng(1)
    stat, stream = rng.integers(-9, 9, (3, 2)), rng.integers(-9, 9, (3, 5))
    init = rng.integers(-9, 9, (5, 2))
    out, cycles = stationary_fold(stat, stream, init, 4, 3)
    assert cycles == 2 * 4 + 3 + 5 - 2
    assert np.array_equal(out, stream.T @ stat + init)


def test_conv2d_emulate_true_reaches_the_emulator():
    layer = ConvLayer(2, 4, 5, 6, 6, 3, 2, (2, 1), (1, 0, 0, 1), (1, 2), 2, True)
    x, w, b = tensors(layer, 3, "int8")
    arch = small_arch(3, 4, "ws")
    out, st_emu = npusim.conv2d(x, w, b, (2, 1), (1, 0, 0, 1), (1, 2), 2, arch=arch,
                                emulate=True)
    ref = reference.conv2d(x, w, b, layer)
    assert np.array_equal(out, ref)
    _, st_fast = npusim.conv2d(x, w, b, (2, 1), (1, 0, 0, 1), (1, 2), 2, arch=arch)
    assert st_emu == st_fast


def test_simulate_mode_emulate_equals_run_on_a_small_net():
    rng = np.random.default_rng(2)
    g = GraphBuilder("tiny", (1, 3, 6, 6))
    a = g.relu(g.conv(g.input, rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4),
                      padding=1))
    g.conv(a, rng.standard_normal((4, 1, 3, 3)), groups=4, stride=2)
    graph = g.build()
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    arch = small_arch(4, 4, "is")
    for dtype in ("float32", "int8"):
        emu = npusim.simulate(graph, x, arch, mode="emulate", dtype=dtype)
        run = npusim.simulate(graph, x, arch, mode="run", dtype=dtype)
        assert emu.layers == run.layers
        assert rel_err(emu.output, run.output) < 1e-5


@settings(max_examples=60)
@given(conv_layers(max_hw=6, max_c=4, max_k=4, max_rs=3), st.sampled_from(ARRAYS),
       st.sampled_from(("ws", "is")), st.integers(1, 5), st.integers(0, 99))
def test_stream_tiles_emulated_equal_reference_and_fast_model(layer, shape, stationary, tile,
                                                              seed):
    """WS/IS with the stream cut into tiles of ``tile`` vectors: same outputs, and the
    emulator's fold cycles, SRAM words and memory traffic equal the fast model's."""
    layer = layer.with_dtype("int8")
    x, w, b = tensors(layer, seed, "int8")
    arch = dataclasses.replace(load_arch("systolic-32x32-os"),
                               sections={"systolic": Params(*shape, stationary, tile)})
    out, stats = Systolic().emulate(layer, x, w, b, arch)
    assert np.array_equal(out, reference.conv2d(x, w, b, layer))
    assert stats == Systolic().stats(layer, arch)


def test_stream_tiles_cycles_by_hand():
    """WS on a 4x4 array, 1x1 conv C=4 K=4 on a 10x10 map (M = 100 pixels streamed):
    untiled one fold of 2*4 + 4 + 100 - 2 = 110 cycles; tiles of 32: three folds of
    2*4 + 4 + 32 - 2 = 42 and one of 2*4 + 4 + 4 - 2 = 14 (the stationary tile is
    loaded again for each: 4 x 16 filter words)."""
    layer = ConvLayer(1, 4, 10, 10, 4, 1, 1)
    free = load_arch("systolic-32x32-ws").with_memory(dram_bytes_per_cycle="unlimited")
    for tile, cycles, filter_words in ((0, 110, 16), (32, 3 * 42 + 14, 64)):
        arch = dataclasses.replace(free, sections={"systolic": Params(4, 4, "ws", tile)})
        s = Systolic().stats(layer.with_dtype("int8"), arch)
        assert s.cycles == cycles - 1 and s.sram_filter_bytes == filter_words


def test_stream_tiles_keep_partial_sums_on_chip():
    """ResNet-18's Conv2 (64x56x56, 3x3, WS): untiled, a column fold's 54 x 54 x 32 4-byte
    partial sums (373 KB) overflow the ofmap SRAM's 32 KiB active half and cross DRAM every
    reduction fold; in tiles of 256 pixels (32 KiB) each output is written once."""
    layer = ConvLayer(1, 64, 56, 56, 64, 3, 3, name="conv2").with_dtype("int8")
    arch = load_arch("systolic-32x32-ws")
    untiled = Systolic().stats(layer, arch)
    tiled = Systolic().stats(layer, dataclasses.replace(
        arch, sections={"systolic": Params(32, 32, "ws", 256)}))
    outputs = 64 * 54 * 54
    assert untiled.dram_ofmap_bytes > 10 * outputs
    assert tiled.dram_ofmap_bytes == outputs
    assert tiled.compute_cycles > untiled.compute_cycles  # more fills and drains
    assert tiled.cycles < untiled.cycles


MEMORIES = [  # 1 KiB buffers (512 B active when double buffered): small float32 layers overflow
    dict(ifmap_sram_kb=1, filter_sram_kb=1, ofmap_sram_kb=1, dram_bytes_per_cycle=0.5),
    dict(ifmap_sram_kb=1, filter_sram_kb=1, ofmap_sram_kb=1, dram_bytes_per_cycle=3.0,
         double_buffered=False, dram_latency_cycles=7),
    dict(ifmap_sram_kb=1, filter_sram_kb=2, ofmap_sram_kb=1, dram_bytes_per_cycle=1.5,
         dram_channels="per-operand", sram_bytes_per_cycle=2.0),
    dict(dram_bytes_per_cycle=17.064),
]


@settings(max_examples=60, deadline=None)
@given(conv_layers(max_hw=6, max_c=4, max_k=4, max_rs=3), st.sampled_from(ARRAYS),
       st.sampled_from(STATIONARY), st.integers(0, 2), st.sampled_from(MEMORIES),
       st.sampled_from(["float32", "int8"]), st.integers(0, 99))
def test_emulator_memory_events_equal_the_fast_model_with_sram_overflow(
        layer, shape, stationary, tile, memory, dtype, seed):
    """The emulator's own fold log (blocks met, bytes fetched, partial sums) timed by the
    memory model equals the fast model's ``fold_steps`` on every field: DRAM bytes per
    operand, each stall, energy, on buffers the layers overflow."""
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype)
    arch = dataclasses.replace(load_arch("systolic-32x32-os"),
                               sections={"systolic": Params(*shape, stationary, tile)})
    arch = arch.with_memory(**memory)
    _, emulated = Systolic().emulate(layer, x, w, b, arch)
    assert emulated == Systolic().stats(layer, arch)


def overflowing_case(stationary):
    """A float32 layer whose three operands overflow 1 KiB buffers at 2 bytes/cycle."""
    layer = ConvLayer(1, 4, 6, 6, 4, 3, 3, 1, 1, name="c").with_dtype("float32")
    arch = dataclasses.replace(load_arch("systolic-32x32-os"),
                               sections={"systolic": Params(2, 3, stationary)})
    arch = arch.with_memory(ifmap_sram_kb=1, filter_sram_kb=1, ofmap_sram_kb=1,
                            dram_bytes_per_cycle=2.0)
    return (layer, *tensors(layer, 5)), arch


@pytest.mark.parametrize("stationary", STATIONARY)
@pytest.mark.parametrize("breakage", ["one block", "filter bytes x2", "ofmap bytes x2"])
def test_a_broken_fold_steps_is_caught_by_the_emulator(monkeypatch, stationary, breakage):
    """The emulator does not use ``fold_steps``: break it and the two levels disagree."""
    from npusim.dataflows import systolic

    (layer, x, w, b), arch = overflowing_case(stationary)
    assert Systolic().emulate(layer, x, w, b, arch)[1] == Systolic().stats(layer, arch)
    honest = systolic.fold_steps

    def broken(*args):
        s = honest(*args)
        change = {"one block": dict(ifmap=0, filter=0),
                  "filter bytes x2": dict(filter_bytes=2 * s.filter_bytes,
                                          filter_size=2 * s.filter_size),
                  "ofmap bytes x2": dict(ofmap_bytes=2 * s.ofmap_bytes)}[breakage]
        return dataclasses.replace(s, **change)

    monkeypatch.setattr(systolic, "fold_steps", broken)
    fast = Systolic().stats(layer, arch)
    emulated = Systolic().emulate(layer, x, w, b, arch)[1]
    assert (fast.dram_bytes, fast.cycles) != (emulated.dram_bytes, emulated.cycles)


@pytest.mark.parametrize("stationary", STATIONARY)
def test_emulator_is_timed_by_scalesims_buffers_when_the_arch_says_so(stationary):
    """``[memory] model = "scalesim"`` at 1 byte a cycle on 1 KiB SRAMs: the emulator's
    layer is timed through SCALE-Sim's trace and buffers, as the fast model's is (its
    own memory steps would give other cycles), and stalls."""
    layer = ConvLayer(1, 8, 10, 10, 8, 3, 3, name="c").with_dtype("int8")
    x, w, b = tensors(layer, 5, "int8")
    arch = small_arch(4, 4, stationary).with_memory(
        model="scalesim", dram_bytes_per_cycle=1, ifmap_sram_kb=1, filter_sram_kb=1,
        ofmap_sram_kb=1)
    emulated = Systolic().emulate(layer, x, w, b, arch)[1]
    assert emulated == Systolic().stats(layer, arch)
    own = Systolic().emulate(layer, x, w, b, arch.with_memory(model="npusim"))[1]
    assert emulated.stall_cycles > 0 and emulated.cycles != own.cycles
