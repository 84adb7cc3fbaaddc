"""What the dilated-grid machine pays beyond its steps, computed by hand (issue 17, items
13 and 14): coefficient loads and result-memory writes where they are not hidden, and
the patent's map-major loop order (Fig. 15: each input map sweeps every pixel set, the
previous map's partial sums reloaded, S1505) beside the tile-major order that keeps
them in the MAC registers. Fast model and emulator alike."""

import numpy as np
import pytest
from strategies import tensors
from test_dilated_grid import arch_with

from npusim.dataflows import get
from npusim.dataflows.dilated_grid import Params, count
from npusim.emulate import dilated_grid as emu
from npusim.ir import ConvLayer

DF = get("dilated-grid")
# 3 x 3 on a 4 x 4 map: one 2 x 2 output tile, one 4 x 4 pixel set per input map
# (4 rows of 4 pixels: 4 load cycles at 6 pixels a cycle), 9 steps
ONE_TILE = ConvLayer(1, 1, 4, 4, 1, 3, 3)


def both(layer, p):
    """(fast cycles, emulated cycles) of ``layer`` on machine ``p``."""
    x, w, _ = tensors(layer, 7)
    return count(layer, p).cycles, emu.emulate(layer, x, w, None, p)[1].cycles


@pytest.mark.parametrize("per_cycle, cycles", [(3, 4 + 9 + 1), (1, 9 + 9 + 1)])
def test_a_slow_coefficient_port_delays_the_first_step(per_cycle, cycles):
    """Coefficients load one filter row at a time, ``per_cycle`` of it a cycle, beside the
    pixels: 3 a cycle take 3 cycles (hidden by the 4 pixel cycles), 1 a cycle 9 cycles;
    then 9 steps and a 1-cycle register write."""
    p = Params(coef_loads_per_cycle=per_cycle, double_buffer=False)
    assert both(ONE_TILE, p) == (cycles, cycles)


def test_coefficient_loads_hide_behind_steps_when_double_buffered():
    """Two output maps, coefficients 1 a cycle (9 cycles a set): the second set loads
    during the first's 9 steps and 1-cycle write: 9 + max(9 + 1, 9) + 9 + 1 = 29; single
    buffered it waits for the grid: 9 + 9 + max(1, 9) + 9 + 1 = 37."""
    layer = ConvLayer(1, 1, 4, 4, 2, 3, 3)
    assert both(layer, Params(coef_loads_per_cycle=1)) == (29, 29)
    assert both(layer, Params(coef_loads_per_cycle=1, double_buffer=False)) == (37, 37)


@pytest.mark.parametrize("words, write", [(4, 1), (3, 2), (1, 4)])
def test_output_writes_stop_the_mac_unit(words, write):
    """The 4 MAC registers go to the result memory ``words`` a cycle: ceil(4 / words)
    cycles after the last step, during which the MAC unit cannot step."""
    p = Params(result_words_per_cycle=words)
    assert both(ONE_TILE, p) == (4 + 9 + write,) * 2
    assert count(ONE_TILE, p).result_cycles == write


def test_map_major_reloads_the_previous_maps_partial_sums():
    """Two input maps, one tile. Tile-major: 4 (load) + 9 + 9 + 1 (write) = 23 cycles, the
    second map's set loading during the first's steps. Map-major: the first map's 4
    partial sums are written (1 cycle) and read back (1 cycle) before the second map's
    steps: 4 + max(9 + 2, 4) + 9 + 1 = 25; 4 partial sums each way, 4 bytes each."""
    layer = ConvLayer(1, 2, 4, 4, 1, 3, 3)
    arch = arch_with("unlimited")
    fast, run = {}, {}
    for order in ("tile-major", "map-major"):
        a = arch_with("unlimited", **{"loop_order": order})
        fast[order] = DF.estimate(layer, None, None, a)
        x, w, _ = tensors(layer, 5)
        run[order] = DF.emulate(layer, x, w, None, a)[1]
    assert arch.params("dilated-grid").loop_order == "tile-major"  # the default
    assert [fast[o].cycles for o in fast] == [run[o].cycles for o in run] == [23, 25]
    tm, mm = fast["tile-major"], fast["map-major"]
    assert (tm.extra["psum_writes"], mm.extra["psum_writes"], mm.extra["psum_reads"]) == \
        (0, 4, 4)
    assert (tm.extra["result_cycles"], mm.extra["result_cycles"]) == (1, 3)
    assert mm.sram_ofmap_bytes - tm.sram_ofmap_bytes == (4 + 4) * 4
    assert run["map-major"] == mm


def test_map_major_partial_sums_spill_when_the_output_map_overflows():
    """40 x 40 float32 outputs (6,400 bytes) from 2 input maps, 20 tile rows of 80 outputs.
    Map-major holds all 20 rows' partial sums while the first map sweeps: in 1 KiB
    (512 bytes active) each row's 320 bytes spill after the first map and come back
    for the second: 6,400 written + 6,400 spilled + 6,400 read back. Tile-major
    finishes each row before the next: 6,400. In 64 KiB both write 6,400."""
    layer = ConvLayer(1, 2, 42, 42, 1, 3, 3)
    out = 40 * 40 * 4
    for order, spilled in (("tile-major", out), ("map-major", 3 * out)):
        small = arch_with(10.0, {"ofmap_sram_kb": 1}, loop_order=order)
        big = arch_with(10.0, loop_order=order)
        assert DF.estimate(layer, None, None, small).dram_ofmap_bytes == spilled
        assert DF.estimate(layer, None, None, big).dram_ofmap_bytes == out


def test_first_loads_equal_plain_loops():
    """Each tile's real input positions loaded for the first time, against sets built by
    plain loops over random runs (they were counted from a tiles x runs x positions mask:
    32 GiB on a 65,536-pixel row)."""
    from npusim.dataflows.dilated_grid import first_loads

    rng = np.random.default_rng(0)
    for _ in range(300):
        size, pad, tile, tiles = (int(v) for v in (rng.integers(1, 30), rng.integers(0, 4),
                                                   rng.integers(1, 5), rng.integers(1, 12)))
        runs = int(rng.integers(1, 4))
        offsets = sorted(int(v) for v in rng.integers(0, 12, runs))
        lengths = [int(v) for v in rng.integers(1, 8, runs)]
        real, seen, want = set(range(pad, pad + size)), set(), []
        for i in range(tiles):
            loads = {x for off, n in zip(offsets, lengths, strict=True)
                     for x in range(i * tile + off, i * tile + off + n)} & real
            want.append(len(loads - seen))
            seen |= loads
        assert first_loads(size, pad, tile, tiles, offsets, lengths).tolist() == want
