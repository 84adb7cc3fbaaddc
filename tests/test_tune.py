"""Hardware-aware group sizes (seed 003, claim 5): candidates against the dataflow's costs
and hand counts, the MAC-filling rule, the Pareto front against brute force, and a real
accuracy check on scikit-learn's digits."""

import dataclasses
import itertools

import pytest

from npusim import blocks, load_arch, tune
from npusim.blocks import BlockSpec, ConvPlan
from npusim.dataflows.group_tile import Params
from npusim.errors import NpusimError
from npusim.ir import ConvLayer, GraphBuilder


def stall_free(name: str):
    """A preset at unlimited DRAM bandwidth: cycles are the tile's compute cycles."""
    arch = load_arch(name)
    return dataclasses.replace(arch, memory=dataclasses.replace(
        arch.memory, dram_bytes_per_cycle="unlimited"))


def grouped_graph():
    import numpy as np

    g = GraphBuilder("t", (1, 96, 6, 6))
    y = g.conv(g.input, np.ones((96, 1, 3, 3)), padding=1, groups=96, name="dw")
    g.conv(y, np.ones((128, 24, 3, 3)), padding=1, groups=4, name="g4")
    return g.build()


def test_candidates_cover_every_g_with_the_tiles_costs():
    result = tune.tune_groups(grouped_graph(), stall_free("group-tile-64mac"))
    dw, g4 = result.layers
    assert [c.groups for c in dw.candidates] == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]
    assert dw.groups == 96 and g4.groups == 4
    # depthwise on the broadcast bus: one MAC per cycle, 36 pixels x 96 channels x 9 taps
    assert dw.candidate(96).cycles == 36 * 96 * 9 + 1
    assert dw.candidate(96).utilisation == pytest.approx(1 / 64 * 36 * 96 * 9 / (36 * 96 * 9 + 1))
    # g = 3: 32 outputs per group reuse each broadcast input: same cycles, 32x the MACs
    assert dw.candidate(2).cycles == 36 * 96 * 9 + 3  # 48 sums drain in 3 cycles at the end
    assert dw.candidate(2).params == 96 * 48 * 9
    assert dw.chosen == 2  # 48 outputs per group: the most of 64 MACs one lane can feed


def test_preferred_g_at_equal_latency_has_the_fewest_fetches_and_parameters():
    """Stall-free, every g of 16 or fewer outputs a group takes 36 x 96 x 9 + 1 cycles (its
    sums drain in one cycle at the end); of those equal latencies the preferred is the one
    with the least off-chip traffic and the fewest parameters: depthwise, 96 x 9 = 864
    weights, DRAM = 3,456 input + 864 weight + 3,456 output bytes, against g = 48's 1,728
    weights (8,640 bytes). The MAC-filling g (2) has 48x the parameters at 2 more cycles."""
    dw = tune.tune_groups(grouped_graph(), stall_free("group-tile-64mac")).layers[0]
    tied = [c.groups for c in dw.candidates if c.cycles == 36 * 96 * 9 + 1]
    assert tied == [6, 8, 12, 16, 24, 32, 48, 96]
    assert dw.preferred == 96
    assert (dw.candidate(96).params, dw.candidate(96).dram_bytes) == (864, 3456 + 864 + 3456)
    assert (dw.candidate(48).params, dw.candidate(48).dram_bytes) == (1728, 3456 + 1728 + 3456)
    assert dw.candidate(2).cycles == 36 * 96 * 9 + 3 and dw.candidate(2).params == 48 * 864


def test_stalls_add_to_every_candidate_and_leave_the_choice():
    """At the preset's 17.064 bytes/cycle each candidate keeps its stall-free cycles as
    compute and pays its DRAM traffic on top; the MAC-filling g (from the tile's
    description) is unchanged; with the stalls the fewest cycles go to g = 24 (4 outputs a
    group: the least weights to fetch before the first step), 6% fewer than the MAC-filling
    g = 2. A full conv (g = 1, on either layer) has 64-output blocks of 55 KiB, more than
    the buffer's 32 KiB active half: fetched again for every step they would take over
    twice its compute; the compiler runs 37-output blocks that fit instead (on the first
    layer 3 blocks for 96 outputs where 2 were), fetched once."""
    free = tune.tune_groups(grouped_graph(), stall_free("group-tile-64mac"))
    finite = tune.tune_groups(grouped_graph(), "group-tile-64mac")
    for a, b in zip(free.layers, finite.layers, strict=True):
        assert a.chosen == b.chosen
        for ca, cb in zip(a.candidates, b.candidates, strict=True):
            narrowed = ca.groups == 1  # 64-output blocks of 96 x 9 weights, 55 KiB
            assert ca.cycles == ca.compute_cycles <= cb.compute_cycles <= cb.cycles
            assert (cb.compute_cycles > ca.compute_cycles) == narrowed, ca.groups
    dw, full = finite.layers[0], free.layers[0].candidate(1)
    assert dw.preferred == 24 and dw.candidate(2).cycles < 1.07 * dw.candidate(24).cycles
    # 36 pixels x 864 taps a block, 2 blocks (64 + 32) stall-free, 3 (37 + 37 + 22) here;
    # the last block's sums drain in 2 cycles
    assert (full.compute_cycles, dw.candidate(1).compute_cycles) == (36 * 2 * 864 + 2,
                                                                     36 * 3 * 864 + 2)
    assert dw.candidate(1).dram_bytes == 96 * 96 * 9 + 96 * 36 * 2
    assert ("fills the MACs: g 2, preferred (fewest cycles, then DRAM bytes, then parameters): "
            "g 24") in tune.render(finite)


def test_filling_rule_matches_the_patent_example():
    """64 MACs, input depth 64 per partition: group size 64 = MAC count (Fig. 8)."""
    one_lane, two_lanes = Params(macs=64), Params(macs=64, bus_inputs=2)
    assert tune.filling_groups(128, 128, one_lane) == 2
    assert tune.filling_groups(256, 256, Params(macs=32)) == 8
    assert tune.filling_groups(48, 192, one_lane) == 3
    assert tune.filling_groups(7, 7, one_lane) == 1  # 7 of 64 MACs is the best there is
    assert tune.filling_groups(96, 96, one_lane) == 2  # 48 outputs: 75% of the MACs
    assert tune.filling_groups(96, 96, two_lanes) == 3  # two subsets of 32: all 64
    assert tune.broadcast_cycles(96, one_lane) == 2  # full conv, 96 outputs: two blocks


def test_filling_rule_follows_the_weight_bandwidth():
    """A wide memory of 8 words (32 int8 weights a cycle) under 64 MACs: group size 64 takes
    two cycles a tap, so 32 is as fast as any and the largest such: g = 8 for 256. The
    wide memory (128 KiB) keeps a 64-output block (36 KiB) whole."""
    narrow = Params(macs=64, wide_words_per_cycle=8, wide_kb=128)
    assert tune.filling_groups(256, 256, narrow) == 8
    assert tune.broadcast_cycles(64, narrow) == 2 and tune.broadcast_cycles(32, narrow) == 1
    assert tune.filling_groups(256, 256, Params(macs=64), elem=4) == 16  # float32: 16 a cycle
    arch = dataclasses.replace(stall_free("group-tile-64mac"), sections={"group-tile": narrow})
    layer = ConvLayer(1, 256, 6, 6, 256, 3, 3, padding=1, dtype="int8")
    cycles = {g: tune.layer_cost(dataclasses.replace(layer, groups=g), arch).cycles
              for g in (4, 8, 16)}
    broadcasts = 36 * 256 * 9  # pixels x C x taps, the same for every g
    assert cycles == {4: 2 * broadcasts + 4, 8: broadcasts + 2, 16: broadcasts + 1}


def test_report_text_and_bad_arch():
    text = tune.render(tune.tune_groups(grouped_graph(), "group-tile-32mac"))
    assert "dw  96x6x6->96x6x6 3x3 dw  (g now 96, fills the MACs: g 3," in text  # 32 MACs
    assert "<- fills MACs" in text
    zoo = tune.tune_groups_report("mobilenet_v2", "group-tile-32mac", size=32)
    assert "block1_dw  32x16x16->32x16x16 3x3 dw  (g now 32, fills the MACs: g 1," in zoo
    with pytest.raises(NpusimError, match=r"arch 'systolic-32x32-ws': has no \[group-tile\] "
                                          r"section"):
        tune.tune_groups_report("mobilenet_v2", "systolic-32x32-ws")
    plain = tune.tune_groups_report("mtcnn-rnet", "group-tile-32mac")  # no grouped conv
    assert plain.endswith("no grouped conv layer (groups > 1) to tune: every conv has one "
                          "group (npusim run MODEL --arch group-tile-32mac gives their costs "
                          "on the tile)")


def test_block_cost_is_the_sum_of_its_layers():
    arch = stall_free("group-tile-32mac")
    spec = BlockSpec("grouped-ibn", 16, 16, expand=2, groups=4)
    cycles, params = tune.block_cost(spec, (6, 6), arch, "int8")
    layers = [ConvLayer(1, 16, 6, 6, 32, 1, 1, bias=True, dtype="int8"),
              ConvLayer(1, 32, 6, 6, 32, 3, 3, padding=1, groups=4, bias=True, dtype="int8"),
              ConvLayer(1, 32, 6, 6, 16, 1, 1, bias=True, dtype="int8")]
    assert cycles == sum(tune.layer_cost(lay, arch).cycles for lay in layers)
    assert params == blocks.params(spec)
    # the grouped 3x3: 36 pixels x 4 partitions x 8 inputs x 9 taps, one broadcast a cycle
    assert tune.layer_cost(layers[1], arch).cycles == 36 * 4 * 8 * 9 + 1


def test_pareto_front_equals_brute_force():
    arch = load_arch("group-tile-32mac")
    specs = [BlockSpec("ibn", 16, 16, expand=2), BlockSpec("ibn", 16, 32, expand=2, stride=2)]
    kinds, sizes = ("ibn", "fused-ibn", "grouped-ibn"), (8, 16, 32)
    front = tune.pareto(specs, (8, 8), arch, kinds=kinds, group_sizes=sizes)
    options = [tune.block_options(s, kinds, sizes) for s in specs]
    every = []
    for combo in itertools.product(*options):
        c0, p0 = tune.block_cost(combo[0], (8, 8), arch, "int8")
        c1, p1 = tune.block_cost(combo[1], (8, 8), arch, "int8")
        every.append((c0 + c1, p0 + p1))
    brute = [(c, p) for c, p in every
             if not any(c2 <= c and p2 >= p and (c2, p2) != (c, p) for c2, p2 in every)]
    assert sorted({(p.cycles, p.params) for p in front}) == sorted(set(brute))
    assert all(b.c_in == s.c_in and b.stride == s.stride for p in front
               for b, s in zip(p.blocks, specs, strict=True))


@pytest.mark.slow
def test_trained_front_candidate_learns_the_digits():
    """The accuracy axis, for real: a grouped network from the front, trained on the
    digits, classifies the held-out images far above chance (10%)."""
    pytest.importorskip("torch")
    from npusim.blocks.train import train_digits

    stem = ConvPlan("stem", 1, 16, 3)
    specs = [BlockSpec("ibn", 16, 16, expand=2), BlockSpec("ibn", 16, 32, expand=2, stride=2)]
    front = tune.pareto(specs, (8, 8), "group-tile-32mac", kinds=("fused-grouped-ibn",),
                        group_sizes=(8,))
    assert all(b.groups == 4 for b in front[0].blocks)  # 32 or 64 outputs, 8 a group
    assert train_digits(front[0].blocks, stem, epochs=8) > 0.7
