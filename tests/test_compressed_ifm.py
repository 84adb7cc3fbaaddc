"""The compressed feature-map format: exact byte counts, lossless round trip, block decoding."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npusim.dataflows import compressed_ifm as cif


def sparse(shape, density, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.integers(-127, 128, shape).astype(dtype)
    return x * (rng.random(shape) < density)


@given(st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 11), st.integers(1, 11)),
       st.tuples(st.integers(1, 5), st.integers(1, 5)), st.floats(0, 1), st.integers(0, 99),
       st.sampled_from([np.float32, np.int8]))
def test_round_trip_and_exact_bytes(shape, block, density, seed, dtype):
    x = sparse(shape, density, seed, dtype)
    c = cif.encode(x, block)
    np.testing.assert_array_equal(cif.decode(c), x)
    itemsize = np.dtype(dtype).itemsize
    assert c.nbytes == cif.stream_bytes(x.shape, np.count_nonzero(x), block, itemsize)


def test_bytes_by_hand_for_a_5x5_map_in_4x4_blocks():
    x = np.zeros((1, 1, 5, 5), np.float32)
    x[0, 0, 0, 0], x[0, 0, 4, 4] = 1.0, 2.0
    # four blocks (edge blocks padded), 16-bit bitmaps, two float32 values
    assert cif.stream_bytes(x.shape, 2, (4, 4), 4) == 4 * 2 + 2 * 4
    c = cif.encode(x, (4, 4))
    assert c.bitmaps[0, 0, 0, 0].tolist() == [1, 0]  # bit 0 = pixel (0, 0)
    assert c.bitmaps[0, 0, 1, 1].tolist() == [1, 0]  # pixel (4, 4) is (0, 0) of its block
    assert c.bitmaps[0, 0, 0, 1].tolist() == [0, 0]  # an all-zero block: bitmap only


def test_block_at_decodes_one_region():
    x = sparse((1, 2, 9, 7), 0.5, 3)
    c = cif.encode(x, (4, 3))
    padded = np.zeros((1, 2, 12, 9), np.float32)
    padded[:, :, :9, :7] = x
    np.testing.assert_array_equal(c.block_at(0, 1, 2, 1), padded[0, 1, 8:12, 3:6])


@pytest.mark.parametrize("block, expected", [((4, 4), 2), ((1, 10), 2), ((3, 3), 2), ((2, 2), 1)])
def test_bitmap_bytes(block, expected):
    assert cif.bitmap_bytes(block) == expected
