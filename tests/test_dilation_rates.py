"""Dilation rate per output map or per group of maps (seed 002, claim 4, S103)."""

import dataclasses

import numpy as np
import pytest
from strategies import rel_err

from npusim import load_arch, reference
from npusim.dataflows import dilation_rates as dr
from npusim.dataflows.dilated_grid import compiled, count, plan
from npusim.errors import InputError
from npusim.ir import ConvLayer


def per_map_reference(x, w, b, rates):
    outs = []
    for k, rate in enumerate(rates):
        layer = ConvLayer(*x.shape, 1, 3, 3, padding=rate, dilation=rate)
        outs.append(reference.conv2d(x, w[k:k + 1], None if b is None else b[k:k + 1], layer))
    return np.concatenate(outs, axis=1)


@pytest.mark.parametrize("emulate", [False, True])
def test_each_map_gets_its_own_rate(emulate):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 11, 9)).astype(np.float32)
    w = rng.standard_normal((5, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    rates = [1, 4, 2, 4, 7]
    preset = load_arch("dilated-grid-2x2-h3")
    stall_free = dataclasses.replace(preset, memory=dataclasses.replace(
        preset.memory, dram_bytes_per_cycle="unlimited"))
    out, stats = dr.conv_rates(x, w, b, rates, arch=stall_free, emulate=emulate)
    assert rel_err(out, per_map_reference(x, w, b, rates)) < 1e-5
    p = preset.params("dilated-grid")
    groups = [ConvLayer(1, 2, 11, 9, rates.count(r), 3, 3, padding=r, dilation=r)
              for r in sorted(set(rates))]  # the maps of one rate run as one layer
    # each in the tap runs the planner keeps stall-free (shorter ones at R = 4 and 7)
    assert stats.cycles == sum(count(layer, p, plan(layer, p, compiled(layer, stall_free)[0]))
                               .cycles for layer in groups)
    _, finite = dr.conv_rates(x, w, b, rates, arch=preset, emulate=emulate)
    assert stats.cycles <= finite.compute_cycles <= finite.cycles
    assert stats.extra["steps"] == 5 * 2 * 9 * 6 * 5  # 9 taps x 2 maps x 6 x 5 tiles
    assert stats.macs == 5 * 2 * 9 * 11 * 9


def test_int8_per_group_rates_are_exact():
    rng = np.random.default_rng(2)
    x = rng.integers(-127, 128, (2, 3, 10, 10)).astype(np.int8)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    rates = dr.group_rates([2, 3], maps_per_group=2)
    assert rates == [2, 2, 3, 3]
    out, _ = dr.conv_rates(x, w, None, rates, arch="dilated-grid-2x2")
    np.testing.assert_array_equal(out, per_map_reference(x.astype(np.int64),
                                                         w.astype(np.int64), None, rates))


def test_bad_rates_are_named():
    x, w = np.zeros((1, 1, 8, 8), np.float32), np.zeros((2, 1, 3, 3), np.float32)
    with pytest.raises(InputError, match="rates: 3 given for 2 output maps"):
        dr.conv_rates(x, w, None, [1, 2, 3])
    with pytest.raises(InputError, match=r"rates=\[0, 2\]: every rate must be >= 1"):
        dr.conv_rates(x, w, None, [0, 2])
    with pytest.raises(InputError, match="filter 2x2: per-map rates keep the map size"):
        dr.conv_rates(x, np.zeros((2, 1, 2, 2), np.float32), None, [1, 2])
