"""The group-tile's own memories (Fig. 6: each tile has a narrow memory for activations and
a wide memory for weights), by hand: weights and activations that do not fit, and the cost
of spreading a layer over several tiles (a parameter fetch that is not hidden:
tests/test_group_tile.py). Every case is checked in the cycle emulator too."""

import dataclasses

from strategies import tensors

import npusim
from npusim.dataflows.group_tile import NAME, Params
from npusim.ir import ConvLayer


def arch_with(bandwidth, memory=None, **params) -> npusim.Arch:
    base = npusim.load_arch("group-tile-64mac")
    mem = dataclasses.replace(base.memory, dram_bytes_per_cycle=bandwidth, **(memory or {}))
    return dataclasses.replace(base, memory=mem, sections={NAME: Params(**params)})


def both(layer, arch):
    """The fast model's stats, after checking the emulator's equal them."""
    df = npusim.dataflows.get(NAME)
    x, w, _ = tensors(layer, 0, layer.dtype)
    fast = df.estimate(layer, None, None, arch)
    assert df.emulate(layer, x, w, None, arch)[1] == fast
    return fast


# A 1x1 conv 16 -> 64 on a 1 x 2 map, int8, 64 MACs, output bus 16 values a cycle: a step
# per pixel of 16 taps, its 64 sums drain in 4 cycles; 1,024 bytes of weights.
SMALL = ConvLayer(1, 16, 1, 2, 64, 1, 1, dtype="int8")


def test_two_tiles_each_fetch_their_own_weights_and_inputs():
    """One tile takes 316 cycles (test_group_tile.py: the 1,056 bytes before step 0 are not
    hidden). Two tiles, one pixel each (a step of 16 taps + 4 drain cycles = 20): each tile loads
    all 1,024 weight bytes into its own wide memory and the input row into its narrow
    memory (32 bytes each): 2,048 + 64 bytes before the only step, 528 cycles; both
    tiles' 64 outputs after it, 128 / 4 = 32. Distributing the layer halves the compute
    and doubles the parameter traffic: 580 cycles against one tile's 316."""
    st_ = both(SMALL, arch_with(4.0, output_bus_values=16, tiles=2))
    assert (st_.dram_filter_bytes, st_.dram_ifmap_bytes, st_.dram_ofmap_bytes) == (2048, 64, 128)
    assert (st_.compute_cycles, st_.cycles) == (20, 20 + 528 + 32)
    assert st_.stall_dram_filter_cycles == 512


def test_weights_that_do_not_fit_the_wide_memory_are_fetched_every_step():
    """``wide_kb = 1``: 512 bytes of the double-buffered wide memory keep weights, the 1,024
    of the one 64-output block do not stay: each of the 2 steps fetches them (2,048 bytes).
    Step 0 (16 cycles) waits for step 1's 1,024 bytes (256 cycles): 240 more than the 316
    above; the arch's 64 KiB filter SRAM is not the tile's wide memory."""
    st_ = both(SMALL, arch_with(4.0, output_bus_values=16, wide_kb=1))
    assert (st_.dram_filter_bytes, st_.cycles, st_.bound) == (2048, 556, "dram")


def test_activations_that_do_not_fit_the_narrow_memory_are_read_per_step():
    """A 1x3 conv (left and right pad 1) 128 -> 8 on a 1 x 8 map, int8: one input row of
    8 x 128 = 1,024 bytes. A 4 KiB narrow memory keeps it (fetched once: 1,024 bytes); a
    1 KiB one (512 bytes active) cannot, so each pixel's step fetches its own taps:
    (2 + 3 x 6 + 2) valid taps x 128 channels = 2,816 bytes. Compute both ways 8 pixels x
    3 taps x 128 + 1 drain = 3,073 cycles; with the row kept, its 1,024 bytes and the
    3,072 of weights come first (1,024 cycles), the last 8 outputs after (2)."""
    layer = ConvLayer(1, 128, 1, 8, 8, 1, 3, padding=(0, 0, 1, 1), dtype="int8")
    kept = both(layer, arch_with(4.0, narrow_kb=4))
    per_step = both(layer, arch_with(4.0, narrow_kb=1))
    assert (kept.dram_ifmap_bytes, per_step.dram_ifmap_bytes) == (1024, 2816)
    assert kept.compute_cycles == per_step.compute_cycles == 8 * 3 * 128 + 1
    assert kept.cycles == 3073 + 1024 + 2
