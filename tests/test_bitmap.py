"""The fetch controller's bit vectors: scalar datapath ops and whole-tensor pair counts."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers, tensors

from npusim.dataflows import bitmap
from npusim.ir import ConvLayer


def test_pack_and_compress_put_element_i_at_bit_i():
    assert bitmap.pack([0, 1, 1, 0, 1]) == 0b10110
    bits, vals = bitmap.compress(np.array([0.0, 2.5, -1.0, 0.0, 4.0]))
    assert bits == 0b10110
    assert vals.tolist() == [2.5, -1.0, 4.0]


def test_and_priority_encoder_and_prefix_count_walk_the_pairs_in_bit_order():
    f, w = 0b1011_0110, 0b1110_0011
    v = bitmap.decide(f, w)
    assert v == 0b1010_0010
    issued = []
    while v:
        i = bitmap.priority_encode(v)
        issued.append((i, bitmap.prefix_count(f, i), bitmap.prefix_count(w, i)))
        v = bitmap.clear_lowest(v)
    # (bit, address of its feature among f's ones, address of its weight among w's ones)
    assert issued == [(1, 0, 1), (5, 3, 2), (7, 4, 4)]


def _receptive(layer, xm, n, g, p, q):
    """Brute-force receptive-field mask of one pixel in (c, r, s) order."""
    out = []
    for c in range(layer.Cg):
        for r in range(layer.R):
            for s in range(layer.S):
                h = p * layer.stride[0] + r * layer.dilation[0] - layer.padding[0]
                v = q * layer.stride[1] + s * layer.dilation[1] - layer.padding[2]
                inside = 0 <= h < layer.H and 0 <= v < layer.W
                out.append(bool(inside and xm[n, g * layer.Cg + c, h, v]))
    return np.array(out)


def _brute_counts(layer, xm, wm):
    pc = np.zeros(layer.output_shape, np.int64)
    for n in range(layer.N):
        for k in range(layer.K):
            g = k // layer.Kg
            for p in range(layer.P):
                for q in range(layer.Q):
                    pc[n, k, p, q] = (_receptive(layer, xm, n, g, p, q) & wm[k].ravel()).sum()
    return pc


@given(conv_layers(max_hw=7, max_c=4, max_k=4, max_rs=3), st.integers(0, 2**16),
       st.sampled_from(bitmap.METHODS))
def test_pair_counts_equal_popcounts_of_anded_vectors(layer, seed, method):
    x, w, _ = tensors(layer, seed, density=0.5)
    pc = bitmap.pair_counts(layer, x != 0, w != 0, method)
    np.testing.assert_array_equal(pc, _brute_counts(layer, x != 0, w != 0))


@given(conv_layers(max_hw=7, max_c=4, max_k=4, max_rs=3), st.integers(0, 2**16))
def test_skips_split_the_dense_macs_by_zero_operand(layer, seed):
    x, w, _ = tensors(layer, seed, density=0.6)
    xm, wm = x != 0, w != 0
    counts = [0, 0, 0]
    for n in range(layer.N):
        for k in range(layer.K):
            for p in range(layer.P):
                for q in range(layer.Q):
                    f, wk = _receptive(layer, xm, n, k // layer.Kg, p, q), wm[k].ravel()
                    counts[0] += (f & ~wk).sum()
                    counts[1] += (~f & wk).sum()
                    counts[2] += (~f & ~wk).sum()
    pairs = int(bitmap.pair_counts(layer, xm, wm).sum())
    nnz = np.count_nonzero(wm.reshape(layer.K, -1), axis=1)
    assert bitmap.skipped(layer, xm, nnz, pairs) == tuple(counts)
    assert pairs + sum(counts) == layer.macs


def test_storage_bits_one_per_element():
    layer = ConvLayer(2, 6, 5, 5, 4, 3, 3, groups=2)
    assert bitmap.storage_bits(layer) == (2 * 6 * 25, 4 * 3 * 9)
    assert bitmap.bitmap_bytes(9) == 2


@pytest.mark.parametrize("value", [0.0, -0.0])
def test_negative_zero_is_a_zero_bit(value):
    assert bitmap.compress(np.array([value, 1.0]))[0] == 0b10
