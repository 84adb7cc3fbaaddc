"""The vector-register multiply-add against numpy's float arithmetic, one rounding at a time."""

import numpy as np
import pytest

from npusim import simd
from npusim.jit import njit


@njit(cache=False)
def _register_sums(weights, x, out):  # pragma: no cover
    """out[0:lanes] = the sum from +0 over i of weights[i * lanes + l] * x[i], in a register."""
    lanes = simd.lanes(out)
    acc = simd.zeros(out)
    for i in range(x.size):
        simd.madd(acc, weights, i * lanes, x[i])
    simd.store(acc, out, 0)


def _special(rng, n, dtype):
    """Normal values with zeros of both signs, infinities, NaN and subnormals mixed in."""
    v = rng.standard_normal(n).astype(dtype) * dtype(rng.choice([1e-3, 1.0, 1e3]))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan,
                         np.finfo(dtype).smallest_subnormal, np.finfo(dtype).max], dtype)
    pick = rng.random(n) < 0.05
    v[pick] = rng.choice(specials, int(pick.sum()))
    return v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_register_sums_equal_numpys_product_then_sum_lane_by_lane(dtype):
    rng = np.random.default_rng(3)
    lanes = simd.width(dtype)
    assert lanes * np.dtype(dtype).itemsize * 8 == simd.vector_bits()
    for _ in range(200):
        taps = int(rng.integers(1, 60))
        weights, x = _special(rng, taps * lanes, dtype), _special(rng, taps, dtype)
        out = np.full(lanes, 7, dtype)
        _register_sums(weights, x, out)
        expected = np.zeros(lanes, dtype)
        with np.errstate(all="ignore"):
            for i in range(taps):  # a product rounded to dtype, then the sum rounded
                expected = expected + weights[i * lanes:(i + 1) * lanes] * x[i]
        np.testing.assert_array_equal(out, expected)  # NaN where numpy has NaN
        assert np.array_equal(np.signbit(out), np.signbit(expected))


def test_register_sums_never_fuse_the_multiply_and_add():
    """-1 + (1 - e)(1 + e), e = 2**-13: the product 1 - 2**-26 rounds to 1 in float32, so
    the sum is 0; a fused multiply-add would leave -2**-26."""
    e = np.float32(2.0 ** -13)
    lanes = simd.width(np.float32)
    weights = np.concatenate([np.full(lanes, -1, np.float32), np.full(lanes, 1 - e, np.float32)])
    out = np.empty(lanes, np.float32)
    _register_sums(weights, np.array([1, 1 + e], np.float32), out)
    assert (out == 0).all()


def test_register_intrinsics_refuse_a_strided_or_2d_array():
    from numba.core.errors import TypingError

    with pytest.raises(TypingError, match="1-D contiguous"):
        _register_sums(np.zeros((4, simd.width(np.float32)), np.float32),
                       np.ones(4, np.float32), np.zeros(simd.width(np.float32), np.float32))


@njit(cache=False)
def _register_counts(words, kernel, out):  # pragma: no cover
    """out[0:lanes] = the sum over i of popcount(words[i * lanes + l] & kernel[i])."""
    lanes = simd.lanes(out)
    acc = simd.zeros(out)
    for i in range(kernel.size):
        simd.count_and(acc, words, i * lanes, kernel[i])
    simd.store(acc, out, 0)


def test_register_counts_equal_numpys_set_bits_of_the_and():
    rng = np.random.default_rng(8)
    lanes = simd.width(np.int64)
    for _ in range(100):
        n = int(rng.integers(1, 40))
        words = rng.integers(0, 2**64, n * lanes, dtype=np.uint64, endpoint=False)
        kernel = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
        words[rng.random(words.size) < 0.1] = np.uint64(2**64 - 1)  # every bit set
        out = np.full(lanes, -1, np.int64)
        _register_counts(words, kernel, out)
        expected = np.bitwise_count(words.reshape(n, lanes) & kernel[:, None]).sum(axis=0)
        np.testing.assert_array_equal(out, expected)
