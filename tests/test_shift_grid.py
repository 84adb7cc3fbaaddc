"""The dilated-grid machine's geometry: serpentine transfer patterns (Eqs. 8-11, Fig. 10),
the hierarchical shifter (Eqs. 12-13) and the cutting of filters into passes."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npusim.dataflows import shift_grid
from npusim.errors import ConfigError


def test_serpentine_is_one_stroke_over_every_tap():
    assert shift_grid.serpentine(3, 3) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0),
                                           (2, 0), (2, 1), (2, 2)]
    assert [shift_grid.NAMES[c] for c in shift_grid.moves(3, 3)] == [
        "right", "right", "down", "left", "left", "down", "right", "right"]


def test_fig10_step2_at_rate2_takes_pixel_3_1_with_coefficient_2_1():
    pixels, coefs = shift_grid.transfer_table(3, 3, rate=2)
    assert (pixels[0].position, coefs[0].position) == ((1, 1), (1, 1))
    p2, c2 = pixels[1], coefs[1]
    assert (p2.m, p2.code, p2.shift, p2.position, p2.direction) == (2, 0, (2, 0), (3, 1), "right")
    assert (c2.m, c2.code, c2.shift, c2.position, c2.direction) == (2, 0, (1, 0), (2, 1), "right")


def test_rate1_step2_takes_the_adjacent_pixel():
    pixels, _ = shift_grid.transfer_table(3, 3, rate=1)
    assert pixels[1].position == (2, 1)


@given(st.integers(1, 7), st.integers(1, 5), st.integers(1, 5))
def test_pixel_step_is_rate_times_coefficient_step(rate, rows, cols):
    pixels, coefs = shift_grid.transfer_table(rows, cols, rate)
    assert len(pixels) == rows * cols
    for p, c in zip(pixels, coefs, strict=True):
        assert p.shift == (rate * c.shift[0], rate * c.shift[1])
        assert p.position[0] - 1 == rate * (c.position[0] - 1)  # Dx - 1 = R (Cx - 1)
        assert p.position[1] - 1 == rate * (c.position[1] - 1)
    assert sorted((c.position[1] - 1, c.position[0] - 1) for c in coefs) == \
        sorted(shift_grid.serpentine(rows, cols))


@pytest.mark.parametrize("levels", [1, 2, 3, 5])
def test_shifter_levels_sum_to_every_rate_up_to_2h_minus_1(levels):
    for rate in range(1, 2 ** levels):
        shifts = shift_grid.level_shifts(rate, levels)
        assert sum(shifts) == rate and len(set(shifts)) == len(shifts)
        assert all(s in [1 << k for k in range(levels)] for s in shifts)
    with pytest.raises(ConfigError, match=rf"levels={levels}: a shift of {2 ** levels} needs "
                                          rf"1 <= shift <= {2 ** levels - 1}"):
        shift_grid.level_shifts(2 ** levels, levels)


def test_shifter_cost_is_h_times_one_level():
    one = shift_grid.shifter_links(6, 6, "hierarchical", 1)
    assert one == 6 * 6 * 4
    assert shift_grid.shifter_links(6, 6, "hierarchical", 3) == 3 * one
    assert shift_grid.shifter_links(6, 6, "flat", 3) == 2 * one  # distance 1 and 2 links
    assert shift_grid.max_rate("flat", 3) == 2 and shift_grid.max_rate("hierarchical", 3) == 7


@given(st.integers(1, 9), st.integers(1, 7), st.integers(2, 16), st.integers(1, 2),
       st.integers(1, 5), st.integers(1, 7))
def test_runs_cover_the_taps_and_fit_grid_and_coefficients(taps, rate, grid, tile, coef, reach):
    runs = shift_grid.axis_chunks(taps, rate, grid, tile, coef, reach)
    assert [i for a, t in runs for i in range(a, a + t)] == list(range(taps))
    for _, t in runs:
        if t > 1:
            assert rate <= reach and rate * (t - 1) + tile <= grid and t <= coef
    if rate <= reach and rate * (taps - 1) + tile <= grid and taps <= coef:
        assert len(runs) == 1
