"""The memory model against hand-computed cases: residency, refetch in loop order, ofmap
spill, double-buffer overlap, bandwidth sweeps and the stall-free limit; and ``price``."""

import dataclasses
import math

import numpy as np
import pytest

from npusim import load_arch
from npusim import memory as memory_model
from npusim.arch import Memory
from npusim.errors import LayerError
from npusim.ir import ConvLayer
from npusim.memory import (
    Steps,
    dense_dram_bytes,
    on_chip_timing,
    time_layer,
    traffic,
    used_input_pixels,
)
from npusim.stats import Counts, LayerStats, Op, price, total


def mem(kib=(64, 64, 64), bw=10.0, **kw) -> Memory:
    return Memory(*kib, bw, **kw)


def test_a_layer_that_fits_is_fetched_once_and_overlaps():
    """Two steps of 200 cycles, one ifmap block (1000 B) and one filter block per step
    (500 B each), one output block of 200 B, at 10 B/cycle, double buffered:
    prologue = (1000 + 500) / 10 = 150; step 0 overlaps the fetch of filter block 1
    (50 < 200, hidden); step 1 overlaps nothing; epilogue = 200 / 10 = 20. DRAM is busy
    220 cycles of 570, the datapath 400: compute-bound."""
    steps = Steps(compute=[200, 200], ifmap=0, ifmap_bytes=1000, filter=[0, 1],
                  filter_bytes=500, ofmap=0, ofmap_bytes=200)
    t = time_layer(steps, mem())
    assert (t.compute_cycles, t.stall_dram_ifmap_cycles, t.stall_dram_filter_cycles,
            t.stall_dram_ofmap_cycles, t.stall_sram_cycles) == (400, 100, 50, 20, 0)
    assert t.cycles == 570
    assert (t.dram_ifmap_bytes, t.dram_filter_bytes, t.dram_ofmap_bytes) == (1000, 1000, 200)
    assert t.bound == "compute"


def test_an_overflowing_operand_is_refetched_as_the_loop_order_says():
    """Filters: 3 blocks of 20 KiB cycled twice (outer loop of 2 over an inner loop of 3).
    32 KiB usable (64 KiB double buffered) < 60 KiB live: each use after another block
    fetches again: 6 fetches. With 128 KiB (64 usable) they stay: 3 fetches. Consecutive
    reuse (0, 0, 1, 1) is free either way."""
    kib = 20 * 1024
    cyclic = Steps(compute=[10] * 6, filter=[0, 1, 2, 0, 1, 2], filter_bytes=kib)
    assert traffic(cyclic, mem())["filter"].tolist() == [kib] * 6
    assert traffic(cyclic, mem((64, 128, 64)))["filter"].tolist() == [kib, kib, kib, 0, 0, 0]
    runs = Steps(compute=[10] * 6, filter=[0, 0, 1, 1, 0, 0], filter_bytes=kib)
    assert traffic(runs, mem())["filter"].tolist() == [kib, 0, kib, 0, kib, 0]
    # a 40 KiB block cannot stay in 32 KiB: even consecutive uses stream it again
    big = Steps(compute=[10] * 3, filter=[0, 0, 0], filter_bytes=40 * 1024)
    assert traffic(big, mem())["filter"].tolist() == [40 * 1024] * 3
    # single buffered, the whole 64 KiB holds the 60 KiB
    single = mem(double_buffered=False)
    assert traffic(cyclic, single)["filter"].tolist() == [kib, kib, kib, 0, 0, 0]


def test_blocks_held_only_over_their_lifetime():
    """Two groups each reusing its own 20 KiB blocks: at most 40 KiB live at once, which
    fits 64 KiB single buffered although all blocks together are 80 KiB."""
    kib = 20 * 1024
    steps = Steps(compute=[1] * 8, ifmap=[0, 1, 0, 1, 2, 3, 2, 3], ifmap_bytes=kib)
    fetched = traffic(steps, mem(double_buffered=False))["ifmap"]
    assert fetched.tolist() == [kib, kib, 0, 0, kib, kib, 0, 0]


def test_ofmap_spill_and_read_back():
    """Outputs accumulated in an interleaved order (blocks 0, 1, 0, 1) of 24 KiB partial
    sums each: 48 KiB open at once > 32 KiB usable. Step 0 leaves block 0 before its last
    step: spills 24 KiB; step 2 reads it back; same for block 1. The final outputs
    (8 KiB each, int8) are written once after each block's last step."""
    psum, out = 24 * 1024, 8 * 1024
    steps = Steps(compute=[100] * 4, ofmap=[0, 1, 0, 1], ofmap_bytes=out, psum_bytes=psum)
    t = traffic(steps, mem())
    assert t["ofmap_out"].tolist() == [psum, psum, out, out]
    assert t["psum_in"].tolist() == [0, 0, psum, psum]
    timing = time_layer(steps, mem(bw="unlimited"))
    assert timing.dram_ofmap_bytes == 4 * psum + 2 * out
    # consecutive accumulation never spills: 0, 0, 1, 1
    runs = Steps(compute=[100] * 4, ofmap=[0, 0, 1, 1], ofmap_bytes=out, psum_bytes=psum)
    assert traffic(runs, mem())["ofmap_out"].tolist() == [0, out, 0, out]
    # partial sums larger than the buffer (40 KiB > 32) go out and back between steps
    huge = Steps(compute=[100] * 3, ofmap=[0, 0, 0], ofmap_bytes=out, psum_bytes=40 * 1024)
    t = traffic(huge, mem())
    assert t["ofmap_out"].tolist() == [40 * 1024, 40 * 1024, out]
    assert t["psum_in"].tolist() == [0, 40 * 1024, 40 * 1024]
    # a big enough ofmap SRAM (128 KiB, 64 usable) holds both: no spill
    big = traffic(steps, mem((64, 64, 128)))
    assert big["ofmap_out"].tolist() == [0, 0, out, out] and not big["psum_in"].any()


def test_double_buffering_overlaps_and_single_buffering_serialises():
    """Four steps of 100 cycles, each a new 2000 B filter block, 10 B/cycle: 200 cycles
    of fetch per step. Double: 200 exposed + 3 x max(100, 200) + 100 = 900.
    Single: 4 x (200 + 100) = 1200."""
    steps = Steps(compute=[100] * 4, filter=[0, 1, 2, 3], filter_bytes=2000)
    double = time_layer(steps, mem())
    single = time_layer(steps, mem(double_buffered=False))
    assert (double.cycles, double.stall_dram_filter_cycles, double.bound) == (900, 500, "dram")
    assert (single.cycles, single.stall_dram_filter_cycles) == (1200, 800)


@pytest.mark.parametrize("chunk", [1, 3])
def test_steps_worked_out_in_chunks_take_the_hand_computed_times(monkeypatch, chunk):
    """The double-buffered waits found a few steps at a time (``CHUNK_STEPS``): each
    chunk's first step still overlaps the write-back of the step before it and its last
    the fetch for the step after, within a layer and not across one. The cases of
    ``test_double_buffering_overlaps_and_single_buffering_serialises`` (900 cycles, 500 of
    them filter stalls), with 7 cycles of latency (207 + 3 x 207 + 100) and on a channel
    per operand, and two such layers joined: each still 900."""
    monkeypatch.setattr(memory_model, "CHUNK_STEPS", chunk)
    steps = Steps(compute=[100] * 4, filter=[0, 1, 2, 3], filter_bytes=2000)
    t = time_layer(steps, mem())
    assert (t.cycles, t.stall_dram_filter_cycles, t.bound) == (900, 500, "dram")
    assert time_layer(steps, mem(dram_latency_cycles=7)).cycles == 207 + 3 * 207 + 100
    both = Steps(compute=[100] * 3, ifmap=[0, 1, 2], ifmap_bytes=1000, filter=[0, 1, 2],
                 filter_bytes=2000)
    apart = time_layer(both, mem(dram_channels="per-operand"))
    assert (apart.cycles, apart.stall_dram_ifmap_cycles, apart.stall_dram_filter_cycles) == (
        200 + 2 * 200 + 100, 0, 400)
    written = Steps(compute=[100] * 3, ofmap=[0, 1, 2], ofmap_bytes=2000)  # 200 cycles each
    assert time_layer(written, mem()).cycles == 100 + 2 * 200 + 200
    joined = memory_model.time_layers([steps, written, steps], mem())
    assert [x.cycles for x in joined] == [900, 700, 900]


def test_per_operand_channels_take_the_slowest():
    """Each step fetches 1000 B of ifmap and 2000 B of filters, 10 B/cycle: one shared
    channel needs 300 cycles a step, one channel each 200 (the filters')."""
    steps = Steps(compute=[100] * 3, ifmap=[0, 1, 2], ifmap_bytes=1000, filter=[0, 1, 2],
                  filter_bytes=2000)
    shared = time_layer(steps, mem())
    apart = time_layer(steps, mem(dram_channels="per-operand"))
    assert shared.cycles == 300 + 2 * 300 + 100
    assert apart.cycles == 200 + 2 * 200 + 100
    assert (apart.stall_dram_ifmap_cycles, apart.stall_dram_filter_cycles) == (0, 400)
    assert apart.bound == "dram"


def test_latency_counts_once_per_transfer():
    steps = Steps(compute=[100] * 4, filter=[0, 1, 2, 3], filter_bytes=2000)
    t = time_layer(steps, mem(dram_latency_cycles=7))
    assert t.cycles == 207 + 3 * 207 + 100


def test_sram_port_bandwidth_bounds_a_hungry_machine():
    """A step that moves 3000 SRAM bytes in 100 compute cycles through 10 B/cycle ports
    lasts 300 cycles: 200 SRAM stall cycles each."""
    steps = Steps(compute=[100, 100], sram_bytes=3000)
    t = time_layer(steps, mem(bw="unlimited", sram_bytes_per_cycle=10.0))
    assert (t.cycles, t.stall_sram_cycles, t.bound) == (600, 400, "sram")


def test_steps_without_dram_take_their_compute_or_their_sram_ports():
    steps = Steps(compute=[10, 20], sram_bytes=[100, 1000])
    free = time_layer(steps, mem())
    assert (free.cycles, free.stall_cycles, free.bound, free.dram_bytes) == (30, 0, "compute", 0)
    ported = time_layer(steps, mem(sram_bytes_per_cycle=20.0))  # 5 and 50 cycles of ports
    assert (ported.cycles, ported.stall_sram_cycles, ported.bound) == (10 + 50, 30, "sram")


def test_one_on_chip_step_in_scalars():
    """A vector op's one step: 10 cycles, 300 B at 20 B/cycle = 15 cycles of ports (5 of
    stall, SRAM-bound); 205 B = 10.25 cycles: a cycle begun is spent (1 of stall, and the
    ports still outlast the compute); unlimited ports: the compute."""
    t = on_chip_timing(10, 300, mem(sram_bytes_per_cycle=20.0))
    assert (t.cycles, t.stall_sram_cycles, t.bound, t.dram_bytes) == (15, 5, "sram", 0)
    t = on_chip_timing(10, 205, mem(sram_bytes_per_cycle=20.0))
    assert (t.cycles, t.stall_sram_cycles, t.bound) == (11, 1, "sram")
    t = on_chip_timing(10, 100, mem(sram_bytes_per_cycle=20.0))
    assert (t.cycles, t.stall_cycles, t.bound) == (10, 0, "compute")
    assert on_chip_timing(7, 10**6, mem()).cycles == 7
    with pytest.raises(LayerError, match="cycles and bytes are >= 0"):
        on_chip_timing(-1, 0, mem())


@pytest.mark.parametrize("seed", range(3))
def test_one_on_chip_step_equals_the_array_rule(seed):
    """``on_chip_timing`` against the steps' array rule on the same step followed by an
    empty one (which adds nothing: no cycles, no bytes)."""
    rng = np.random.default_rng(seed)
    for _ in range(50):
        cycles, moved = int(rng.integers(0, 5000)), int(rng.integers(0, 90_000))
        memory = mem(sram_bytes_per_cycle=float(rng.choice([1.0, 3.0, 16.0, 64.0, 7.3])))
        steps = Steps(compute=[cycles, 0], sram_bytes=[moved, 0])
        assert on_chip_timing(cycles, moved, memory) == time_layer(steps, memory)


@pytest.mark.parametrize("seed", range(4))
def test_one_step_in_scalars_equals_the_array_rule(seed):
    """``_one_step`` (a single step in Python scalars) against the array rule on the same
    step, on random blocks, sizes and memories: small and large buffers (blocks that fit
    or stream), latency, shared or per-operand channels, single or double buffering,
    limited or unlimited DRAM and SRAM ports, both compute bounds."""
    rng = np.random.default_rng(seed)
    for _ in range(300):
        memory = mem(kib=tuple(int(k) for k in rng.choice([1, 8, 64], 3)),
                     bw=[0.7, 3.0, 16, 17.064, "unlimited"][rng.integers(5)],
                     dram_latency_cycles=int(rng.choice([0, 0, 40])),
                     sram_bytes_per_cycle=[5.0, 64, 13.7, "unlimited"][rng.integers(4)],
                     double_buffered=bool(rng.integers(2)),
                     dram_channels=str(rng.choice(["shared", "per-operand"])))
        ids = rng.integers(-1, 2, 3)
        ids[rng.integers(3)] = 0  # at least one operand in DRAM: the array rule's case
        nbytes = rng.integers(0, 90_000, 6)
        steps = Steps(compute=[int(rng.integers(0, 20_000))], ifmap=int(ids[0]),
                      ifmap_bytes=int(nbytes[0]), ifmap_size=int(nbytes[0] + nbytes[1]),
                      filter=int(ids[1]), filter_bytes=int(nbytes[2]),
                      ofmap=int(ids[2]), ofmap_bytes=int(nbytes[3]),
                      psum_bytes=int(nbytes[4]), sram_bytes=int(nbytes[5]),
                      compute_bound=str(rng.choice(["compute", "bus"])))
        array_rule = memory_model._array_layers(memory_model._Joined([steps]), memory)[0]
        assert memory_model._one_step(steps, memory) == array_rule


@pytest.mark.parametrize("seed", range(3))
def test_layers_timed_together_as_each_alone(seed):
    """``time_layers`` over many layers at once (their steps end to end, block ids kept
    apart per layer) gives each layer the Timing ``time_layer`` gives it alone: random
    layers of one to twelve steps, with unused, repeated, unsorted and oversized blocks,
    whole-block partial sums and buffers of their own on some layers, on-chip layers and
    single steps among them, on memories that fit or thrash, shared or per-operand,
    single or double buffered, with latency and limited SRAM ports."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        memory = mem(kib=tuple(int(k) for k in rng.choice([1, 8, 64], 3)),
                     bw=[0.7, 3.0, 17.064, "unlimited"][rng.integers(4)],
                     dram_latency_cycles=int(rng.choice([0, 40])),
                     sram_bytes_per_cycle=[13.7, "unlimited"][rng.integers(2)],
                     double_buffered=bool(rng.integers(2)),
                     dram_channels=str(rng.choice(["shared", "per-operand"])))
        layers = [_random_layer(rng) for _ in range(int(rng.integers(1, 9)))]
        alone = [time_layer(s, memory) for s in layers]
        assert memory_model.time_layers(layers, memory) == alone


@pytest.mark.parametrize("seed", range(2))
def test_layers_joined_and_cut_in_chunks_as_each_alone(monkeypatch, seed):
    """Joined layers whose waits are found two steps at a time (``CHUNK_STEPS``, so a
    chunk starts inside a layer and at a layer's first step): each layer's Timing as it
    is alone, its steps in one chunk."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(20):
        memory = mem(kib=tuple(int(k) for k in rng.choice([1, 8, 64], 3)),
                     bw=[0.7, 3.0, 17.064][rng.integers(3)],
                     dram_latency_cycles=int(rng.choice([0, 40])),
                     sram_bytes_per_cycle=[13.7, "unlimited"][rng.integers(2)],
                     dram_channels=str(rng.choice(["shared", "per-operand"])))
        layers = [_random_layer(rng) for _ in range(int(rng.integers(1, 9)))]
        alone = [time_layer(s, memory) for s in layers]
        monkeypatch.setattr(memory_model, "CHUNK_STEPS", 2)
        assert memory_model.time_layers(layers, memory) == alone
        monkeypatch.undo()


def _random_layer(rng) -> Steps:
    """A layer of random steps for ``test_layers_timed_together_as_each_alone``."""
    n = int(rng.integers(1, 13))
    ids = {}
    for op in ("ifmap", "filter", "ofmap"):
        kind = rng.integers(4)  # none, runs in order, any order, every step its own
        ids[op] = (-1 if kind == 0 else np.sort(rng.integers(-1, 4, n)) if kind == 1
                   else rng.integers(-1, 4, n) if kind == 2 else np.arange(n))
    whole = rng.random() < 0.3
    return Steps(compute=rng.integers(0, 3000, n), ifmap=ids["ifmap"],
                 ifmap_bytes=rng.integers(0, 20_000, n),
                 ifmap_size=rng.integers(20_000, 40_000, n) if rng.random() < 0.4 else None,
                 filter=ids["filter"], filter_bytes=rng.integers(0, 20_000, n),
                 ofmap=ids["ofmap"], ofmap_bytes=rng.integers(0, 9000, n),
                 psum_bytes=rng.integers(0, 40_000, n) * (rng.random() < 0.7),
                 psum_size=int(rng.integers(30_000, 60_000)) if whole else None,
                 ofmap_capacity=int(rng.integers(0, 50_000)) if rng.random() < 0.3 else None,
                 sram_bytes=rng.integers(0, 5000, n))


def _random_steps(rng, n=40):
    return Steps(compute=rng.integers(1, 500, n), ifmap=rng.integers(-1, 6, n),
                 ifmap_bytes=rng.integers(0, 30_000, n), filter=rng.integers(-1, 9, n),
                 filter_bytes=rng.integers(0, 30_000, n), ofmap=rng.integers(-1, 4, n),
                 ofmap_bytes=rng.integers(0, 9000, n), psum_bytes=rng.integers(0, 40_000, n),
                 sram_bytes=rng.integers(0, 5000, n))


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_bandwidth_sweep_is_monotone_and_above_the_floors(seed, double):
    """0.5 to 1000 B/cycle: cycles never rise with bandwidth and are never below
    max(compute cycles, DRAM bytes / bandwidth); unlimited == compute."""
    steps = _random_steps(np.random.default_rng(seed))
    last = math.inf
    for bw in (0.5, 1, 2, 4, 10, 17, 25.6, 64, 256, 1000):
        t = time_layer(steps, mem(bw=bw, double_buffered=double))
        assert t.cycles <= last
        assert t.cycles >= max(t.compute_cycles, math.ceil(t.dram_bytes / bw))
        last = t.cycles
    free = time_layer(steps, mem(bw="unlimited", double_buffered=double))
    assert free.cycles == free.compute_cycles == int(steps.compute.sum()) <= last
    assert free.stall_cycles == 0 and free.bound == "compute"


def test_a_block_held_whole_spills_only_the_part_each_step_touches():
    """One output block (ofmap 0) over three steps, each accumulating into 3 KiB of it, the
    block's partial sums 40 KiB in all (``psum_size``), in a machine's own 36 KiB buffer
    (``ofmap_capacity``, used whole; the 64 KiB ofmap SRAM is not): 40 > 36, so steps 0 and
    1 spill their 3 KiB after them, steps 1 and 2 read theirs back before; the 8 KiB of
    outputs are written once, after step 2. With 40 KiB of buffer the block stays; a step
    that touches nothing (0 B) spills nothing, not the block's outputs."""
    part, out = 3 * 1024, 8 * 1024
    steps = Steps(compute=[100] * 3, ofmap=0, ofmap_bytes=out, psum_bytes=[part, part, 0],
                  psum_size=40 * 1024, ofmap_capacity=36 * 1024)
    t = traffic(steps, mem())
    assert t["ofmap_out"].tolist() == [part, part, out]
    assert t["psum_in"].tolist() == [0, part, 0]
    fits = dataclasses.replace(steps, ofmap_capacity=40 * 1024)
    t = traffic(fits, mem())
    assert t["ofmap_out"].tolist() == [0, 0, out] and not t["psum_in"].any()
    # without psum_size and capacity the 3 KiB parts are the block: it fits the ofmap SRAM
    plain = traffic(Steps(compute=[100] * 3, ofmap=0, ofmap_bytes=out, psum_bytes=part),
                    mem())
    assert not plain["psum_in"].any()


def test_stall_cycles_of_a_whole_total_split_in_floats_add_up_to_it():
    """Stalls of a whole number of cycles (1e5 to 1e9), split into 2-50 float parts as a
    layer's steps sum them, give that whole back in any order of the parts, where float
    noise past 1e-9 of a cycle made 19 % of such totals one cycle more; a real fraction
    (a thousandth of a cycle) still costs a whole cycle."""
    import random

    rng = np.random.default_rng(3)
    for _ in range(500):
        whole = int(rng.integers(10**5, 10**9))
        cuts = np.sort(rng.random(int(rng.integers(1, 50)))) * whole
        parts = np.diff(np.concatenate([[0.0], cuts, [float(whole)]])).tolist()
        assert sum(memory_model._integers(parts)) == whole
        random.Random(int(rng.integers(1 << 30))).shuffle(parts)
        assert sum(memory_model._integers(parts)) == whole
        assert sum(memory_model._integers([*parts[:-1], parts[-1] + 1e-3])) == whole + 1


def test_steps_reject_bad_arrays():
    with pytest.raises(LayerError, match=r"Steps\.psum_size"):
        Steps(compute=[1, 2], psum_size=[1, 2, 3])
    with pytest.raises(LayerError, match=r"ofmap_capacity=-1"):
        Steps(compute=[1, 2], ofmap_capacity=-1)
    with pytest.raises(LayerError, match=r"Steps\.filter_bytes: shape \(3,\), must be \(2,\)"):
        Steps(compute=[1, 2], filter_bytes=[1, 2, 3])
    with pytest.raises(LayerError, match="negative"):
        Steps(compute=[1, -2])
    with pytest.raises(LayerError, match=r"Steps\.ifmap_bytes: negative"):
        Steps(compute=[1, 2], ifmap_bytes=-1)
    with pytest.raises(LayerError, match=r"Steps\.sram_bytes: negative"):
        Steps(compute=[1, 2], sram_bytes=np.array([3, -1]))
    assert Steps(compute=5, ifmap=-1, ofmap=np.int64(-1)).ifmap.tolist() == [-1]  # no block
    with pytest.raises(LayerError, match="at least one step"):
        Steps(compute=[])
    many = np.arange(5000)  # a layer of many steps: its arrays checked one at a time
    with pytest.raises(LayerError, match=r"Steps\.psum_bytes: negative"):
        Steps(compute=many, psum_bytes=np.where(many == 4321, -1, 8))
    assert Steps(compute=many, psum_bytes=8).psum_bytes.min() == 8


@pytest.mark.parametrize("seed", range(3))
def test_block_ids_numbered_as_numpys_unique_numbers_them(seed):
    """The blocks' first uses and each step's block, as ``np.unique`` gives them, for ids
    that span few values (counted in one table) and many (sorted): runs, any order,
    unused values between, ids far from zero."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(rng.integers(1, 3000))
        span = int(rng.choice([1, 3, 50, n, 4 * n + 3000, 10**12]))
        ids = rng.integers(0, span, n) + int(rng.integers(0, 2**40))
        ids = np.sort(ids) if rng.random() < 0.3 else ids
        for got, want in zip(memory_model._unique(ids),
                             np.unique(ids, return_index=True, return_inverse=True), strict=True):
            assert got.dtype == want.dtype and np.array_equal(got, want)


def test_dense_dram_bytes_counts_the_used_input():
    """3x3 stride 2 on 8x8, no padding: rows/cols 0..6 read (7x7), the 8th never."""
    layer = ConvLayer(1, 2, 8, 8, 4, 3, 3, 2, 0)
    assert dense_dram_bytes(layer, 4) == (2 * 49 * 4, 4 * 2 * 9 * 4, 4 * 3 * 3 * 4)


def test_price_fills_layer_stats_from_the_timing():
    """price: cycles and stalls from the memory model, pe_cycles = multipliers x cycles,
    mapped PE-cycles stretched over the stalls, energy from the DRAM bytes it moved."""
    arch = dataclasses.replace(load_arch("systolic-32x32-ws"), memory=mem(bw=10.0))
    layer = ConvLayer(1, 2, 8, 8, 4, 3, 3, 1, 1, name="c1")
    steps = Steps(compute=[100] * 4, filter=[0, 1, 2, 3], filter_bytes=2000)
    counts = Counts("systolic", macs=1000, dense_macs=1200, multipliers=16,
                    mapped_pe_cycles=800, sram_filter_bytes=50, extra={"folds": 4})
    s = price(layer, counts, steps, arch)
    assert (s.cycles, s.compute_cycles, s.stall_cycles, s.bound) == (900, 400, 500, "dram")
    assert s.pe_cycles == 16 * 900 and s.mapped_pe_cycles == pytest.approx(800 * 900 / 400)
    assert s.mapping_efficiency == pytest.approx(800 / (16 * 400))
    assert s.dram_filter_bytes == 8000 and s.extra == {"folds": 4}
    e = arch.energy
    assert s.energy_pj == pytest.approx(1000 * e.mac_fp32_pj + 50 * e.sram_byte_pj
                                        + 8000 * e.dram_byte_pj)
    assert s.stalled_share == pytest.approx(500 / 900)
    vec = price(Op("relu", "Relu", "int8"), Counts("vector", 0, 0, 0, vector_ops=64),
                Steps(compute=[2]), arch)
    assert (vec.name, vec.shape, vec.cycles, vec.vector_ops) == ("relu", "Relu", 2, 64)


def test_old_style_layer_stats_keep_working_and_sum():
    a = LayerStats("a", "x", cycles=10)
    b = LayerStats("b", "x", cycles=30, compute_cycles=20, stall_dram_filter_cycles=10,
                   bound="dram")
    assert (a.compute_cycles, a.stall_cycles) == (10, 0)
    t = total([a, b])
    assert (t.cycles, t.compute_cycles, t.stall_cycles, t.bound) == (40, 30, 10, "")
    assert t.as_dict()["stalled_share"] == pytest.approx(0.25)


def test_default_dram_bandwidth_is_one_lpddr4x_channel():
    """No [memory] given: one LPDDR4X-4266 x32 channel at 1000 MHz, 4266 MT/s x 4 bytes."""
    assert Memory().dram_bytes_per_cycle == pytest.approx(4266e6 * 4 / 1e9)


@pytest.mark.parametrize("preset, dataflow, units", [
    ("systolic-32x32-ws", "systolic", 1),           # one array
    ("input-reuse-1024", "input-reuse", 16),        # operation_units = 16
    ("sparse-pairs-32x32", "sparse-pairs", 32),     # processor_groups = 32
    ("group-tile-32mac", "group-tile", 1),          # tiles = 1
    ("dilated-grid-2x2", "dilated-grid", 1),        # one grid
])
def test_reconfiguration_costs_cycles_per_unit_at_each_layer(preset, dataflow, units):
    """reconfig_cycles = 37: a conv layer waits 37 x units cycles more, counted as
    stall_reconfig_cycles; everything else is unchanged, and a vector op pays nothing."""
    from npusim.dataflows import get

    base = load_arch(preset)
    slow = base.with_memory(reconfig_cycles=37)
    layer = ConvLayer(1, 4, 6, 6, 4, 3, 3, 1, 1, name="c")
    rng = np.random.default_rng(3)
    masks = (rng.random((1, 4, 6, 6)) < 0.7, rng.random((4, 4, 3, 3)) < 0.7)
    machine = get(dataflow)
    masks = masks if machine.reads_masks else (None, None)
    fast, loaded = (machine.estimate(layer, *masks, a) for a in (base, slow))
    assert loaded.stall_reconfig_cycles == 37 * units
    assert loaded.cycles == fast.cycles + 37 * units
    assert dataclasses.replace(loaded, cycles=fast.cycles, pe_cycles=fast.pe_cycles,
                               mapped_pe_cycles=fast.mapped_pe_cycles,
                               stall_reconfig_cycles=0) == fast
    vec = price(Op("relu", "Relu", "int8"), Counts("vector", 0, 0, 0, vector_ops=64),
                Steps(compute=[2]), slow)
    assert (vec.cycles, vec.stall_reconfig_cycles) == (2, 0)


@pytest.mark.parametrize("H, W, R, S, stride, dilation, padding", [
    (9, 7, 3, 3, 2, 1, 1), (11, 11, 3, 2, 4, 3, 0), (5, 6, 1, 1, 3, 1, 0), (8, 8, 5, 3, 1, 2, 4),
    (224, 224, 7, 7, 2, 1, 3), (4, 4, 3, 3, 5, 1, 2)])
def test_used_input_pixels_are_the_pixels_some_window_reads(H, W, R, S, stride, dilation,
                                                            padding):
    layer = ConvLayer(N=1, C=2, H=H, W=W, K=2, R=R, S=S, stride=stride, dilation=dilation,
                      padding=padding)
    read = {(p * stride + r * dilation - padding, q * stride + s * dilation - padding)
            for p in range(layer.P) for q in range(layer.Q) for r in range(R) for s in range(S)}
    assert used_input_pixels(layer) == sum(0 <= y < H and 0 <= x < W for y, x in read)
