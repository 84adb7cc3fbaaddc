"""Weight grouping by density and the dealing of work units, checked by brute force."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npusim.dataflows import grouping
from npusim.errors import ConfigError


def _partitions(items, size):
    """Every way to cut ``items`` into unordered groups of ``size``."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for mates in itertools.combinations(rest, size - 1):
        left = [i for i in rest if i not in mates]
        for tail in _partitions(left, size):
            yield [(first, *mates)] + tail


def test_in_order_takes_kernels_in_order_and_pads_the_last_group():
    g = grouping.weight_groups(np.array([5, 1, 9, 3, 7]), 2, "in-order")
    assert g.tolist() == [[0, 1], [2, 3], [4, grouping.EMPTY]]


@given(st.lists(st.integers(0, 50), min_size=4, max_size=8).filter(lambda v: len(v) % 2 == 0))
def test_similar_density_minimises_the_sum_of_group_maxima(nnz):
    """Lockstep groups cost their densest member: sorted cuts are optimal (brute force)."""
    nnz = np.array(nnz)
    g = grouping.weight_groups(nnz, 2, "similar-density")
    cost = nnz[g].max(axis=1).sum()
    best = min(sum(max(nnz[list(p)]) for p in part)
               for part in _partitions(list(range(len(nnz))), 2))
    assert cost == best
    assert sorted(g.ravel().tolist()) == list(range(len(nnz)))


@given(st.lists(st.integers(0, 50), min_size=4, max_size=9).filter(lambda v: len(v) % 3 == 0))
def test_equal_work_groups_are_close_to_the_most_even_totals(nnz):
    nnz = np.array(nnz)
    g = grouping.weight_groups(nnz, 3, "equal-work")
    assert sorted(g.ravel().tolist()) == list(range(len(nnz)))
    worst = nnz[g].sum(axis=1).max()
    best = min(max(sum(nnz[list(p)]) for p in part)
               for part in _partitions(list(range(len(nnz))), 3))
    assert worst <= best + max(nnz)  # greedy: within one kernel of the optimum


def test_equal_work_on_a_worked_example():
    nnz = np.array([9, 8, 1, 2, 7, 3])
    g = grouping.weight_groups(nnz, 3, "equal-work")
    # densest first to the lighter group: {9, 3, 2} and {8, 7, 1}; no split does better
    assert sorted(nnz[g].sum(axis=1).tolist()) == [14, 16]


@pytest.mark.parametrize("dealing", grouping.DEALINGS)
@pytest.mark.parametrize("kernels,pixels,groups,size", [(5, 7, 4, 2), (64, 3, 8, 8),
                                                          (3, 100, 16, 4), (1, 1, 32, 32)])
def test_plan_covers_every_kernel_and_pixel_once(kernels, pixels, groups, size, dealing):
    nnz = np.arange(kernels) % 5
    pl = grouping.plan(nnz, pixels, groups, size, "similar-density", dealing)
    seen = np.zeros((kernels, pixels), int)
    for u in range(pl.units):
        ks, lo, hi = pl.unit(u)
        for k in ks[ks != grouping.EMPTY]:
            seen[k, lo:hi] += 1
        assert pl.processor_group(u) == u % groups
    assert (seen == 1).all()
    if pl.slices < pixels:  # enough pixels: every processor group gets as many units
        assert pl.units % groups == 0


def test_unknown_policy_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match=r"sparse-pairs.grouping='by-luck': must be one of "
                                          r"in-order, similar-density, equal-work"):
        grouping.weight_groups(np.array([1, 2]), 2, "by-luck")


def test_pixel_slices_give_each_processor_group_every_weight_group_on_its_own_slice():
    pl = grouping.plan(np.arange(6), 10, 4, 2, "in-order", "pixel-slices")
    assert pl.slices == 4
    for g in range(4):
        units = [pl.unit(u) for u in range(pl.units) if pl.processor_group(u) == g]
        assert [k.tolist() for k, _, _ in units] == [[0, 1], [2, 3], [4, 5]]
        assert len({(lo, hi) for _, lo, hi in units}) == 1


def test_weight_groups_dealing_gives_whole_weight_groups_when_they_fill_the_array():
    pl = grouping.plan(np.arange(16), 50, 4, 2, "in-order", "weight-groups")
    assert (pl.slices, pl.units) == (1, 8)
    assert [pl.processor_group(u) for u in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_unknown_dealing_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match=r"sparse-pairs.dealing='zigzag': must be one of "
                                          r"weight-groups, pixel-slices"):
        grouping.plan(np.array([1, 2]), 4, 2, 2, "in-order", "zigzag")
