"""``total`` equals the layers' stats added one after another with ``LayerStats.__add__``."""

import functools
import operator

from npusim.dse.runner import prepared
from npusim.simulate import simulate
from npusim.stats import LayerStats, total


def folded(stats):
    return functools.reduce(operator.add, stats).renamed("total")


def test_total_of_a_network_is_its_layers_added_in_order():
    _, graph, x = prepared("mtcnn-pnet", 0.5, 1, 0)
    for preset in ("input-reuse-1024", "sparse-pairs-32x32"):
        layers = simulate(graph, x, preset, mode="estimate").layers
        assert total(layers) == folded(layers)
        assert total(layers[1:]) == folded(layers[1:])  # a vector op first: no extra keys


def test_total_folds_extra_keys_strings_and_unit_tuples_like_addition():
    stats = [
        LayerStats("a", "m", bound="dram", cycles=3, energy_pj=0.1, extra={"x": 1}),
        LayerStats("b", "m", bound="dram", cycles=4, energy_pj=0.2,
                   extra={"peak_p": -2, "u_by_unit": (1, 2)}),
        LayerStats("c", "m", bound="compute", cycles=5, energy_pj=0.3,
                   extra={"x": 2.5, "u_by_unit": (3, 4, 5)}),
        LayerStats("d", "n", cycles=1, extra={"u_by_unit": (1, 1, 1), "late": 7}),
    ]
    for n in range(1, len(stats) + 1):
        assert total(stats[:n]) == folded(stats[:n])
    # (1, 2) + (3, 4, 5) has no common breakdown, (); () + (1, 1, 1) counts () as zeros
    assert total(stats).extra == {"x": 3.5, "peak_p": 0, "u_by_unit": (1, 1, 1), "late": 7}
    assert total([stats[0]]) == stats[0].renamed("total")
    assert total([]) == LayerStats("total", "")


def test_compute_cycles_left_out_are_the_cycles_less_the_stalls():
    """The documented default: 100 cycles of which 30 + 5 + 2 + 1 + 4 wait on memory leave
    58 computing; given, compute_cycles is kept as it is."""
    stalls = dict(stall_dram_ifmap_cycles=30, stall_dram_filter_cycles=5,
                  stall_dram_ofmap_cycles=2, stall_sram_cycles=1, stall_reconfig_cycles=4)
    assert LayerStats("c", "systolic", cycles=100, **stalls).compute_cycles == 58
    assert LayerStats("c", "systolic", cycles=100, compute_cycles=60, **stalls).compute_cycles == 60
