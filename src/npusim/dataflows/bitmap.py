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

The scalar functions here are the emulator's datapath; the fast model gets the
same counts for whole tensors at once from ``npusim.bitconv`` (the vectors packed
in 64-bit words, ANDed and popcounted, compiled).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import ConvLayer


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


def skipped(layer: ConvLayer, field_ones: np.ndarray, kernel_nnz: np.ndarray,
            pairs: int) -> tuple[int, int, int]:
    """Multiplies skipped because (only the weight, only the feature, both) are zero.

    Dense MACs split four ways by which operand is zero; the ``pairs`` are the
    ones with neither. ``field_ones``: set bits of all receptive-field vectors of
    each conv group, summed over pixels (G,; padding bits are zero features);
    ``kernel_nnz``: non-zero weights per kernel (K,).
    """
    weight_ones = int(kernel_nnz.sum()) * layer.N * layer.P * layer.Q
    feature_ones = int((field_ones * layer.Kg).sum())
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
