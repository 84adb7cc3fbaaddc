"""The group-tile's own memories (Fig. 6: each tile has a narrow memory for activations and
a wide memory for weights), by hand: weights and activations that do not fit, and the cost
of spreading a layer over several tiles (a parameter fetch that is not hidden:
tests/test_group_tile.py). Every case is checked in the cycle emulator too."""

import dataclasses

import numpy as np
import pytest
from strategies import tensors

import npusim
from npusim.dataflows import group_tile as gt
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
    """One tile takes 312 cycles (test_group_tile.py: the 1,040 bytes before step 0 are not
    hidden). Two tiles, one pixel each (a step of 16 taps + 4 drain cycles = 20): each tile loads
    all 1,024 weight bytes into its own wide memory and its pixel's 16 input bytes (the
    input row, 32 bytes, held whole would move more): 2,048 + 32 bytes before the only step,
    520 cycles; both tiles' 64 outputs after it, 128 / 4 = 32. Distributing the layer halves
    the compute and doubles the parameter traffic: 572 cycles against one tile's 312."""
    st_ = both(SMALL, arch_with(4.0, output_bus_values=16, tiles=2))
    assert (st_.dram_filter_bytes, st_.dram_ifmap_bytes, st_.dram_ofmap_bytes) == (2048, 32, 128)
    assert (st_.compute_cycles, st_.cycles) == (20, 20 + 520 + 32)
    assert st_.stall_dram_filter_cycles == 512


def test_weights_that_do_not_fit_the_wide_memory_run_in_blocks_that_do():
    """``wide_kb = 1``: 512 bytes of the double-buffered wide memory keep weights; the 1,024
    of the one 64-output block do not. Fetched again for every step they would take 556
    cycles (test_group_tile.py); the compiler runs two 32-output blocks of 512 bytes
    instead, each fetched once, chunk outer: block 0 at both pixels, then block 1. Four
    steps of 16 taps, each 32 sums drained in 2 cycles behind the next: compute
    16 x 4 + 2 = 66. At 4 bytes/cycle: step 0 waits for block 0 and the row's 32 input
    bytes (544 / 4 = 136 cycles); step 1 lasts block 1's 512 bytes and step 0's 32 outputs
    (136); steps 2 and 3 their compute (16, 18); step 3's 32 outputs after it (8):
    330 cycles, 1,024 bytes of weights. The arch's 64 KiB filter SRAM is not the tile's
    wide memory."""
    st_ = both(SMALL, arch_with(4.0, output_bus_values=16, wide_kb=1))
    assert (st_.compute_cycles, st_.cycles, st_.dram_filter_bytes) == (66, 330, 1024)
    assert st_.extra["narrowed_block_layers"] == 1


def test_a_fast_dram_keeps_the_full_block_fetched_every_step():
    """The same layer and wide memory at 64 bytes/cycle: the 64-output block, fetched for
    each of its 2 steps, waits 1,040 / 64 = 16.25 cycles before step 0, step 0 lasts step
    1's 1,040 bytes (16.25), step 1 its 16 taps and 4 drain cycles (20), its 64 outputs
    after (1): 53.5, 54 cycles, where the 32-output blocks would take 8.5 + 66 + 0.5 = 75.
    The compiler keeps the full block."""
    st_ = both(SMALL, arch_with(64.0, output_bus_values=16, wide_kb=1))
    assert (st_.compute_cycles, st_.cycles, st_.dram_filter_bytes) == (36, 54, 2048)
    assert st_.extra["narrowed_block_layers"] == 0


@pytest.mark.parametrize("bandwidth", [2.0, 8.0, 32.0, 128.0])
@pytest.mark.parametrize("layer", [
    SMALL,
    ConvLayer(1, 64, 4, 4, 128, 3, 3, padding=1, dtype="int8"),  # 36 KiB a 64-output block
    ConvLayer(1, 256, 2, 2, 128, 3, 3, padding=1, groups=2, dtype="int8"),  # 32 x 1,152 B
    ConvLayer(1, 24, 4, 4, 64, 3, 3, padding=1, dtype="float32"),  # 54 KiB: 37 fit, or 32
], ids=["1x1", "3x3-64-128", "grouped", "float32"])
def test_the_compilers_block_width_is_the_emulators_faster(layer, bandwidth):
    """Where a full output block's weights exceed the wide memory's active half (32 KiB of
    the preset's 64; 512 bytes for the 1x1 layer), the emulator runs the layer at every
    width the compiler weighs (the float32 layer's 37 outputs that fit, and 32, whole
    deliveries of the 16-word wide memory): the chosen one takes the fewest cycles (the
    wider at equal cycles), and the machine's emulate is the emulator at the chosen width.
    The floors the compiler orders the widths by are under the emulator's cycles at each."""
    from npusim.emulate.group_tile import emulate

    arch = arch_with(bandwidth, output_bus_values=16, wide_kb=1 if layer is SMALL else 64,
                     macs=32 if layer.groups == 2 else 64)
    p, mem = arch.params(Params), gt.tile_buffers(arch)
    widths = gt.block_widths(layer, p, mem)
    assert len(widths) >= 2 and widths[0] == min(layer.Kg, p.macs)
    x, w, _ = tensors(layer, 1, layer.dtype)
    cycles = {width: emulate(layer, x, w, None, arch, width)[1].cycles for width in widths}
    for width in widths:
        assert gt.cycles_floor(layer, p, mem, width) <= cycles[width]
    chosen = both(layer, arch)
    assert chosen.cycles == min(cycles.values())
    assert chosen.extra["narrowed_block_layers"] == int(min(cycles.values()) < cycles[widths[0]])


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


@pytest.mark.parametrize("lanes", [1, 2, 3, 4])
@pytest.mark.parametrize("channels, groups", [(96, 3), (48, 3), (16, 1), (64, 4)])
def test_weights_that_fit_are_fetched_once_however_many_bus_lanes(lanes, channels, groups):
    """C = K = ``channels``, 3x3, ``groups`` partitions, int8 on a 16 x 16 map (96 x 96 / 3:
    27,648 bytes of weights, under the wide memory's 32 KiB active half). Each weight
    crosses DRAM once, by hand K x C/g x 9 bytes, on both levels, with one bus lane or
    several. With several, the lanes pair the partitions differently from step to step,
    and each pairing counted as weights of its own: 3 x 18 KiB for 27 KiB, fetched again
    every step, 256x the weights and 1.9x the cycles of one lane."""
    layer = ConvLayer(1, channels, 16, 16, channels, 3, 3, padding=1, groups=groups,
                      dtype="int8")
    st_ = both(layer, arch_with(17.064, bus_inputs=lanes))
    assert st_.dram_filter_bytes == channels * channels // groups * 9


def _taps_read(size, pad, k, dil, stride, out):
    """Per output position, the set of input positions its taps read (plain loops)."""
    return [{o * stride + t * dil - pad for t in range(k)} & set(range(size))
            for o in range(out)]


def test_windows_counted_without_a_map_of_them_equal_plain_loops():
    """Valid taps per output, the columns read, and each output row's new input rows for a
    tile starting anywhere (``band_rows``), against sets built by plain loops, on random
    axes: they were counted from an outputs x inputs matrix, 32 GiB on a 65,536-pixel row."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        H, R, d, st, pad = (int(v) for v in (rng.integers(1, 20), rng.integers(1, 5),
                                             rng.integers(1, 4), rng.integers(1, 4),
                                             rng.integers(0, 3)))
        P = (H + 2 * pad - d * (R - 1) - 1) // st + 1
        if P < 1:
            continue
        reads = _taps_read(H, pad, R, d, st, P)
        assert gt.valid_taps(H, pad, R, d, st, P).tolist() == [len(r) for r in reads]
        assert gt.used_positions(H, pad, R, d, st, P) == len(set().union(*reads))
        layer = ConvLayer(1, 2, H, 3, 2, R, 1, (st, 1), (pad, pad, 0, 0), (d, 1))
        start = int(rng.integers(0, P))
        seen, want = set(), [0] * start
        for r in reads[start:]:
            want.append(len(r - seen))
            seen |= r
        assert gt.band_rows(layer, np.arange(start, P)).tolist() == want


def test_a_row_of_65536_pixels_runs_in_little_memory():
    """A 1x1 conv over a 1 x 65,536 map, int8: its input crosses DRAM once (65,536 bytes),
    in a process limited to 3 GiB of address space (the outputs x inputs map of the old
    count asked for 32 GiB)."""
    import subprocess
    import sys

    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
            "import npusim\nfrom npusim.ir import ConvLayer\n"
            "layer = ConvLayer(1, 1, 1, 65536, 1, 1, 1, dtype='int8')\n"
            "for arch in ('group-tile-64mac', 'dilated-grid-2x2'):\n"
            "    st = npusim.simulate_shapes([layer], arch, dtype='int8').layers[0]\n"
            "    print(st.dram_ifmap_bytes)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["65536", "65536"]


def test_a_larger_narrow_memory_is_never_slower_where_holding_rows_saves_nothing():
    """A 1x1 conv 96 -> 48 on 14 x 14, int8, at 4 bytes a cycle, the tile's narrow memory the
    arch's ifmap SRAM: a 1x1 conv's taps are its input rows' pixels, once each, so holding a
    row moves the same 18,816 bytes as the steps' own taps. Held whole (4 KiB and up: a row
    of 14 x 96 bytes fits half of it), each row came at its first step and stalled 3,499
    cycles; at 2 KiB, step by step, 24. The rows are now held only where that moves fewer
    bytes: every size gives the streamed schedule, on the emulator too."""
    layer = ConvLayer(1, 96, 14, 14, 48, 1, 1, dtype="int8")
    runs = [both(layer, arch_with(4.0, {"ifmap_sram_kb": kb}, narrow_kb=0, wide_kb=0))
            for kb in (2, 4, 16)]
    assert {(s.cycles, s.stall_dram_ifmap_cycles, s.dram_ifmap_bytes) for s in runs} == \
        {(20007, 24, 96 * 14 * 14)}


def test_the_narrower_widths_by_hand():
    """A 1x1 conv 96 -> 96 in float32 on 64 MACs and a 16-word wide memory (16 float32
    weights a cycle): an output's 384 bytes, so 85 of the 32 KiB active half hold the
    whole 64-output block: one width. With 192 inputs (768 bytes an output) 42 fit, and 32
    are two whole deliveries; in int8 (64 weights a cycle) 56 of a 576-byte 3x3 x 64
    kernel fit and 56 < 64 is the only narrower width."""
    arch = arch_with(17.064)
    p, mem = arch.params(Params), gt.tile_buffers(arch)
    assert gt.block_widths(ConvLayer(1, 96, 2, 2, 96, 1, 1, dtype="float32"), p, mem) == (64,)
    assert gt.block_widths(ConvLayer(1, 192, 2, 2, 96, 1, 1, dtype="float32"), p, mem) == (
        64, 42, 32)
    assert gt.block_widths(ConvLayer(1, 64, 4, 4, 128, 3, 3, padding=1, dtype="int8"), p,
                           mem) == (64, 56)


SCORES = {"energy": lambda st_: st_.energy_pj,  # written out here, not stats.OBJECTIVES
          "energy-delay": lambda st_: st_.cycles * st_.energy_pj}


@pytest.mark.parametrize("objective", list(SCORES))
@pytest.mark.parametrize("bandwidth", [8.0, 64.0])
@pytest.mark.parametrize("layer", [SMALL, ConvLayer(1, 24, 4, 4, 64, 3, 3, padding=1)],
                         ids=["1x1", "float32"])
def test_the_compilers_block_width_minimises_the_objective_it_is_given(layer, bandwidth,
                                                                      objective):
    """With ``objective`` energy or energy-delay the compiler keeps the width whose
    emulated run has the least of it (the wider on a tie), and the machine's emulate is the
    emulator at that width."""
    from npusim.emulate.group_tile import emulate

    arch = arch_with(bandwidth, output_bus_values=16, wide_kb=1 if layer is SMALL else 64,
                     objective=objective)
    widths = gt.block_widths(layer, arch.params(Params), gt.tile_buffers(arch))
    x, w, _ = tensors(layer, 1, layer.dtype)
    runs = {width: emulate(layer, x, w, None, arch, width)[1] for width in widths}
    best = min(widths, key=lambda width: (SCORES[objective](runs[width]), -width))
    chosen = both(layer, arch)
    assert (chosen.cycles, chosen.energy_pj) == (runs[best].cycles, runs[best].energy_pj)


def test_an_energy_objective_fetches_a_dense_layers_weights_once():
    """ResNet-18's layer3 3x3 conv (256 -> 256 on 14 x 14, float32) on the preset: the full
    64-output block's 589,824 bytes of weights exceed the 32 KiB wide memory, so at the
    fewest cycles they are fetched again for every output pixel; for the least energy the
    compiler takes a narrower block that fits, whose weights are fetched once: 2,359,296
    bytes, the layer's weights, and the least energy of the two at more cycles."""
    layer = ConvLayer(1, 256, 14, 14, 256, 3, 3, padding=1)
    base = npusim.load_arch("group-tile-64mac")
    fast = npusim.dataflows.get(NAME).estimate(layer, None, None, base)
    thrifty_arch = dataclasses.replace(base, sections={NAME: dataclasses.replace(
        base.params(Params), objective="energy")})
    thrifty = npusim.dataflows.get(NAME).estimate(layer, None, None, thrifty_arch)
    assert thrifty.dram_filter_bytes == 256 * 256 * 9 * 4 < fast.dram_filter_bytes
    assert thrifty.energy_pj < fast.energy_pj and thrifty.cycles > fast.cycles
    assert thrifty.extra["narrowed_block_layers"] == 1
