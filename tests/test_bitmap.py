"""The fetch controller's bit vectors: scalar datapath ops and whole-tensor pair counts."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers, tensors

from npusim import bitconv, reference
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


def _pairs(layer, xm, wm):
    """bitconv's pair counts as N x K x P x Q, and its receptive-field ones per group."""
    pc, ones = bitconv.pair_counts(layer, xm, bitconv.pack_weights(layer, wm))
    return pc.reshape(layer.K, layer.N, layer.P, layer.Q).transpose(1, 0, 2, 3), ones


@given(conv_layers(max_hw=7, max_c=4, max_k=4, max_rs=3), st.integers(0, 2**16))
def test_pair_counts_equal_popcounts_of_anded_vectors(layer, seed):
    x, w, _ = tensors(layer, seed, density=0.5)
    xm, wm = x != 0, w != 0
    pc, ones = _pairs(layer, xm, wm)
    np.testing.assert_array_equal(pc, _brute_counts(layer, xm, wm))
    fields = [_receptive(layer, xm, n, k // layer.Kg, p, q).sum()
              for n, k, p, q in np.ndindex(layer.N, layer.K, layer.P, layer.Q)
              if k % layer.Kg == 0]
    assert ones.sum() == sum(fields)


@pytest.mark.parametrize("layer", [
    ConvLayer(2, 130, 9, 11, 6, 3, 2, (2, 1), (1, 0, 2, 1), (1, 2), name="words-3"),
    ConvLayer(1, 256, 14, 14, 96, 3, 3, 1, 1, groups=2, name="two-groups"),
    ConvLayer(1, 32, 12, 12, 64, 3, 3, 2, 1, groups=32, name="depthwise-x2"),
    ConvLayer(2, 16, 13, 10, 16, 3, 5, (1, 2), (2, 1, 3, 0), (2, 1), groups=16,
              name="depthwise-dilated"),
    ConvLayer(1, 24, 57, 57, 24, 3, 3, 1, 1, groups=24, name="depthwise-wide"),
    ConvLayer(2, 12, 10, 9, 24, 5, 3, (3, 2), (3, 0, 1, 2), (1, 2), groups=12,
              name="depthwise-stride-3-x2"),
    ConvLayer(1, 3, 300, 40, 3, 3, 3, 1, 1, groups=3, name="depthwise-tall"),
    ConvLayer(1, 512, 1, 1, 100, 1, 1, name="fully-connected"),
    ConvLayer(2, 200, 23, 29, 40, 1, 1, (2, 1), (1, 0, 2, 1), name="pointwise-strided-padded"),
    ConvLayer(2, 96, 23, 29, 24, 1, 1, groups=4, name="pointwise-grouped-many-blocks"),
    ConvLayer(1, 16, 112, 112, 96, 1, 1, name="pointwise-one-word"),
    ConvLayer(1, 3, 224, 224, 64, 3, 3, 1, 1, name="rgb"),
])
def test_pair_counts_are_the_float64_convolution_of_the_masks(layer):
    """Many-word vectors, groups, depthwise, stride, dilation, padding, big maps: the
    independent judge is the float64 tap-wise convolution of the 0/1 masks."""
    rng = np.random.default_rng(7)
    xm = rng.random(layer.input_shape) < 0.55
    wm = rng.random(layer.weight_shape) < 0.35
    pc, ones = _pairs(layer, xm, wm)
    want = reference.conv2d(xm.astype(np.float64), wm.astype(np.float64), None, layer)
    np.testing.assert_array_equal(pc, want)
    ones_per_kernel = reference.conv2d(xm.astype(np.float64), np.ones(layer.weight_shape),
                                       None, layer).sum(axis=(0, 2, 3))
    np.testing.assert_array_equal(ones, ones_per_kernel[::layer.Kg])
    np.testing.assert_array_equal(bitconv.kernel_ones(bitconv.pack_weights(layer, wm)),
                                  wm.reshape(layer.K, -1).sum(axis=1))


@pytest.mark.parametrize("layer", [
    ConvLayer(1, 2, 20, 21, 4, 15, 15, 1, 7, groups=2, name="225 taps"),
    ConvLayer(2, 2, 19, 23, 2, 17, 17, (1, 2), 8, groups=2, name="289 taps"),
])
def test_depthwise_pair_counts_past_a_byte(layer):
    """Every tap of every kernel set on an all-ones input: a pixel's count reaches R*S, 225
    (the most a byte holds below 256) and 289 (past it)."""
    xm, wm = np.ones(layer.input_shape, bool), np.ones(layer.weight_shape, bool)
    pc, _ = _pairs(layer, xm, wm)
    want = reference.conv2d(xm.astype(np.float64), wm.astype(np.float64), None, layer)
    assert want.max() == layer.R * layer.S
    np.testing.assert_array_equal(pc, want)


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
    pc, ones = _pairs(layer, xm, wm)
    pairs = int(pc.sum())
    nnz = np.count_nonzero(wm.reshape(layer.K, -1), axis=1)
    assert bitmap.skipped(layer, ones, nnz, pairs) == tuple(counts)
    assert pairs + sum(counts) == layer.macs


def test_storage_bits_one_per_element():
    layer = ConvLayer(2, 6, 5, 5, 4, 3, 3, groups=2)
    assert bitmap.storage_bits(layer) == (2 * 6 * 25, 4 * 3 * 9)
    assert bitmap.bitmap_bytes(9) == 2


@pytest.mark.parametrize("value", [0.0, -0.0])
def test_negative_zero_is_a_zero_bit(value):
    assert bitmap.compress(np.array([value, 1.0]))[0] == 0b10
