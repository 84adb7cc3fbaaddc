"""The group-tile fast model and cycle emulator check each other on every LayerStats field:
the emulator plans and counts in its own code, so a fault put into one of the fast model's
planning or counting helpers must show up as a disagreement."""

import ast
import dataclasses
import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import conv_layers, tensors

import npusim
from npusim.dataflows import group_tile
from npusim.dataflows.group_tile import NAME, Params
from npusim.emulate import group_tile as emulator
from npusim.ir import ConvLayer


def arch_with(bandwidth, memory, params: Params) -> npusim.Arch:
    base = npusim.load_arch("group-tile-64mac")
    mem = dataclasses.replace(base.memory, dram_bytes_per_cycle=bandwidth, **memory)
    return dataclasses.replace(base, memory=mem, sections={NAME: params})


def differing_fields(a, b) -> list[str]:
    """Names of the LayerStats fields (extra counters by key) where ``a`` and ``b`` differ."""
    da, db = a.as_dict(), b.as_dict()
    return sorted(k for k in da.keys() | db.keys() if da.get(k) != db.get(k))


tile_params = st.builds(Params, macs=st.integers(1, 9), tiles=st.integers(1, 3),
                        bus_inputs=st.integers(1, 4), wide_words_per_cycle=st.integers(1, 4),
                        output_bus_values=st.integers(1, 5), narrow_kb=st.integers(0, 2),
                        wide_kb=st.integers(0, 2))


@settings(max_examples=40, deadline=None)
@given(conv_layers(max_hw=5, max_c=4, max_k=5, max_rs=3), tile_params, st.integers(0, 99),
       st.sampled_from(["float32", "int8"]), st.sampled_from([0.0, 0.5, 1.0]),
       st.sampled_from(["unlimited", 0.5, 3.0]), st.integers(1, 2), st.booleans())
def test_emulator_equals_fast_model_on_every_field(layer, params, seed, dtype, density,
                                                    bandwidth, kib, double):
    """Random layers and tiles, all-zero or half-zero tensors, 1-2 KiB buffers (weights and
    inputs overflow them), single or double buffered: cycles, MACs, bytes per operand and
    level, stalls by cause, energy and every counter agree."""
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype, density)
    arch = arch_with(bandwidth, {"filter_sram_kb": kib, "ifmap_sram_kb": kib,
                                 "ofmap_sram_kb": kib, "double_buffered": double}, params)
    df = npusim.dataflows.get(NAME)
    fast = df.estimate(layer, None, None, arch)
    out, emulated = df.emulate(layer, x, w, b, arch)
    assert differing_fields(fast, emulated) == []
    assert np.array_equal(out, df.compute(layer, x, w, b, arch))


def test_emulator_takes_no_plan_from_the_fast_model():
    """It imports the machine's name, word size and Params from the fast model, nothing
    that plans or counts."""
    tree = ast.parse(inspect.getsource(emulator))
    imported = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module and node.module.endswith("dataflows.group_tile")
                for a in node.names}
    assert imported == {"NAME", "WORD_BYTES", "Params"}


# A layer whose weights (2 output blocks of 64 x 64 = 4 KiB) overflow the 4 KiB active half
# of an 8 KiB double-buffered filter buffer, at a finite DRAM bandwidth.
OVERFLOW = ConvLayer(1, 64, 3, 3, 128, 1, 1, dtype="int8")
OVERFLOW_ARCH = arch_with(8.0, {"filter_sram_kb": 8}, Params())


def disagreement(monkeypatch, name, fault) -> list[str]:
    """Fields where estimate and emulate differ on OVERFLOW with the fast model's helper
    ``name`` replaced by ``fault(original)``."""
    df = npusim.dataflows.get(NAME)
    x, w, _ = tensors(OVERFLOW, 4, "int8")
    assert differing_fields(df.estimate(OVERFLOW, None, None, OVERFLOW_ARCH),
                            df.emulate(OVERFLOW, x, w, None, OVERFLOW_ARCH)[1]) == []
    monkeypatch.setattr(group_tile, name, fault(getattr(group_tile, name)))
    return differing_fields(df.estimate(OVERFLOW, None, None, OVERFLOW_ARCH),
                            df.emulate(OVERFLOW, x, w, None, OVERFLOW_ARCH)[1])


def test_a_fast_model_loop_order_that_ignores_the_buffer_is_caught(monkeypatch):
    """unit_order always pixel-major: every pixel refetches both weight blocks."""
    fields = disagreement(monkeypatch, "unit_order",
                          lambda f: lambda ctl, elem, capacity=None: f(ctl, elem))
    assert "dram_filter_bytes" in fields and "cycles" in fields


def test_unpacked_weight_words_are_caught(monkeypatch):
    """tile_steps reading a word per weight instead of four int8 weights per word."""
    def unpacked(f):
        def steps(ctl, units, elem):
            st_ = f(ctl, units, elem)
            return dataclasses.replace(st_, words=st_.outputs)
        return steps
    assert {"weight_words", "sram_filter_bytes"} <= set(
        disagreement(monkeypatch, "tile_steps", unpacked))


def test_one_more_parameter_load_cycle_is_caught(monkeypatch):
    """The parameter fetch's time one cycle longer in the fast model (a step's compute,
    while its weights come in, + 1)."""
    def longer(f):
        def steps(*args):
            st_ = f(*args)
            compute = st_.compute.copy()
            compute[0] += 1
            return dataclasses.replace(st_, compute=compute)
        return steps
    assert "cycles" in disagreement(monkeypatch, "memory_steps", longer)


def test_one_more_parameter_byte_is_caught(monkeypatch):
    """The parameter fetch one byte larger in the fast model's memory steps."""
    def heavier(f):
        def steps(*args):
            st_ = f(*args)
            return dataclasses.replace(st_, filter_bytes=st_.filter_bytes + 1,
                                       filter_size=st_.filter_size + 1)
        return steps
    assert "dram_filter_bytes" in disagreement(monkeypatch, "memory_steps", heavier)


@pytest.mark.parametrize("helper", ["narrow_reads", "schedule"])
def test_faulty_counts_are_caught(monkeypatch, helper):
    """One activation read more, or one broadcast more, in the fast model's counts."""
    def more(f):
        if helper == "narrow_reads":
            return lambda layer, ctl: f(layer, ctl) + 1
        return lambda *args: dataclasses.replace(f(*args), broadcasts=f(*args).broadcasts + 1)
    expected = {"narrow_reads": "sram_ifmap_bytes", "schedule": "broadcasts"}[helper]
    assert expected in disagreement(monkeypatch, helper, more)


def test_levels_agree_in_float32_when_the_input_band_overflows_the_narrow_memory():
    """A float32 layer whose input rows (3 x 16 x 32 x 4 B = 6 KiB) overflow a 1 KiB
    narrow memory: every step fetches the activations its taps read again, in 4-byte
    words; the two levels agree on every field and the input is read more than once."""
    layer = ConvLayer(1, 32, 16, 16, 8, 3, 3, padding=(1, 1, 1, 1))
    x, w, b = tensors(layer, 5, "float32", 0.5)
    arch = arch_with(4.0, {}, Params(narrow_kb=1, wide_kb=8))
    df = npusim.dataflows.get(NAME)
    fast = df.estimate(layer, None, None, arch)
    _, emulated = df.emulate(layer, x, w, b, arch)
    assert differing_fields(fast, emulated) == []
    assert emulated.dram_ifmap_bytes > x.size * 4
