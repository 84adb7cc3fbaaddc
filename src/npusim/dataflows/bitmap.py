"""The fetch controller of the sparse-pairs machine (seed 001, claims 1-4 and 14): bit vectors.

A feature or weight is one bit: 1 if non-zero, 0 if zero (claim 4). The
alignment to a convolution: for output pixel (n, p, q) of a kernel in conv group
g, the *receptive-field vector* holds the features x[n, g*Cg + c, p*sh + r*dh - top,
q*sw + s*dw - left] at bit ``i = (c*R + r)*S + s`` (c < Cg), and the *kernel
vector* holds w[k, c, r, s] at the same bit, so bit i of both belong to the same
multiply. Padding positions are features the address unit generates as zero bits.

The controller ANDs the two vectors (claim 3: both non-zero) and a priority
encoder yields the index of the lowest set bit, one per cycle (claim 5). Values
are stored compressed (non-zeros only, in bit order); the value of bit i sits at
address ``prefix_count(bits, i)``, the number of ones below bit i.

The scalar functions here are the emulator's datapath; the array functions are
the same counts for whole tensors at once, done as convolutions of the 0/1 masks
(BLAS), for the fast model.
"""

from __future__ import annotations

import math

import numpy as np

from .. import engine
from ..ir import ConvLayer
from ..reference import pad_input, tap_window


def pack(mask) -> int:
    """A bit vector (Python int) from a 1-D 0/1 sequence: element i is bit i."""
    bits = 0
    for i, nonzero in enumerate(mask):
        if nonzero:
            bits |= 1 << i
    return bits


def compress(values: np.ndarray) -> tuple[int, np.ndarray]:
    """(bit vector of the non-zeros, the non-zero values in bit order) of a 1-D array."""
    flat = np.asarray(values).ravel()
    return pack(flat != 0), flat[flat != 0]


def decide(feature_bits: int, weight_bits: int) -> int:
    """The decided pairs: bits where both feature and weight are non-zero (AND)."""
    return feature_bits & weight_bits


def priority_encode(bits: int) -> int:
    """Index of the lowest set bit of a non-zero vector (the next pair to compute)."""
    return (bits & -bits).bit_length() - 1


def clear_lowest(bits: int) -> int:
    """``bits`` without its lowest set bit (the pair just issued)."""
    return bits & (bits - 1)


def prefix_count(bits: int, i: int) -> int:
    """Ones of ``bits`` below bit ``i``: the address of bit i's value in compressed storage."""
    return (bits & ((1 << i) - 1)).bit_count()


def pair_counts(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray,
                method: str | None = None) -> np.ndarray:
    """Decided pairs of every output pixel and kernel, N x K x P x Q (float32, exact integers).

    popcount(receptive-field vector AND kernel vector) summed over bits is the
    convolution of the 0/1 masks, done by the dense engine (im2col + BLAS GEMM,
    tap sums for depthwise); counts stay below 2**24, exact in float32. With few
    output pixels (fully connected layers) the vectors are packed 8 bits a byte
    and ANDed and popcounted directly, which beats a GEMV over float masks.
    ``method``: one of ``METHODS`` (default: ``packed`` for at most 4 pixels).
    """
    method = method or ("packed" if layer.N * layer.P * layer.Q <= 4 else "gemm")
    if method == "packed":
        return _packed(layer, np.asarray(x_mask, np.bool_), np.asarray(w_mask, np.bool_))
    xm, wm = np.asarray(x_mask, np.float32), np.asarray(w_mask, np.float32)
    return engine.conv2d(xm, wm, None, layer.with_dtype("float32"))


METHODS = ("gemm", "packed")


def _packed(layer: ConvLayer, xm: np.ndarray, wm: np.ndarray) -> np.ndarray:
    """Per output pixel: AND of packed receptive-field and kernel vectors, popcount per kernel."""
    cols = np.packbits(engine.im2col(xm, layer), axis=2)  # N x G x bytes x (P*Q)
    wbits = np.packbits(wm.reshape(layer.groups, layer.Kg, -1), axis=2)  # G x Kg x bytes
    out = np.zeros((layer.N, layer.groups, layer.Kg, layer.P * layer.Q), np.float32)
    for n, j in np.ndindex(layer.N, layer.P * layer.Q):
        anded = wbits & cols[n, :, None, :, j]
        out[n, :, :, j] = np.bitwise_count(anded).sum(axis=2, dtype=np.int64)
    return out.reshape(layer.output_shape)


def receptive_ones(layer: ConvLayer, x_mask: np.ndarray) -> np.ndarray:
    """Set bits of all receptive-field vectors of each conv group, summed over pixels (G,).

    Each tap (r, s) meets the strided, dilated window of the padded mask; no im2col.
    """
    xp = pad_input(np.asarray(x_mask, np.bool_), layer)
    ones = np.zeros(layer.C, np.int64)
    for r in range(layer.R):
        for s in range(layer.S):
            ones += np.count_nonzero(tap_window(xp, layer, r, s), axis=(0, 2, 3))
    return ones.reshape(layer.groups, layer.Cg).sum(axis=1)


def skipped(layer: ConvLayer, x_mask: np.ndarray, kernel_nnz: np.ndarray,
            pairs: int) -> tuple[int, int, int]:
    """Multiplies skipped because (only the weight, only the feature, both) are zero.

    Dense MACs split four ways by which operand is zero; the ``pairs`` are the
    ones with neither. ``kernel_nnz``: non-zero weights per kernel (K,). Padding
    bits count as zero features.
    """
    weight_ones = int(kernel_nnz.sum()) * layer.N * layer.P * layer.Q
    feature_ones = int((receptive_ones(layer, x_mask) * layer.Kg).sum())
    weight_only_zero = feature_ones - pairs
    feature_only_zero = weight_ones - pairs
    both = layer.macs - weight_ones - feature_ones + pairs
    return weight_only_zero, feature_only_zero, both


def bitmap_bytes(bits: int) -> int:
    """Bytes that hold ``bits`` bits."""
    return math.ceil(bits / 8)


def storage_bits(layer: ConvLayer) -> tuple[int, int]:
    """Bits of the feature-map bitmap and of the weight bitmaps (one bit per element)."""
    return layer.N * layer.C * layer.H * layer.W, layer.K * layer.Cg * layer.R * layer.S
