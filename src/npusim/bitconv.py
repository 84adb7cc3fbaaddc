"""Convolution of 0/1 masks by AND and popcount of packed bit vectors (compiled with numba).

The number of (non-zero input, non-zero weight) pairs that meet at an output pixel is
a convolution of the two masks. Done in float32 by BLAS it costs as much as the real
convolution; here each pixel's receptive field is held as 64-bit words (channels of
a conv group packed 64 to a word, ``pack_input``), each kernel as words in the same
order (``pack_weights``), and a kernel's pairs at a pixel are
``sum_i popcount(field[i] AND kernel[i])``: one word operation per 64 multiply-adds.

Bit ``c % 64`` of word ``c // 64`` of a pixel (and tap) is channel ``c`` of the conv
group. The word order of a receptive field is (tap row r, tap column s, word);
padding positions are zero words.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from .ir import ConvLayer
from .parallel import in_parallel
from .reference import pad_input

WORD_BITS = 64


@intrinsic
def _popcount(typingctx, word):
    """Set bits of a uint64 (the CPU's popcount instruction), as int64."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


def _pack_last(mask: np.ndarray) -> np.ndarray:
    """Bool ``mask`` (..., B) as uint64 words (..., ceil(B / 64)), bit i of word j = element
    64 j + i."""
    words = math.ceil(mask.shape[-1] / WORD_BITS)
    if mask.shape[-1] != words * WORD_BITS:
        padded = np.zeros(mask.shape[:-1] + (words * WORD_BITS,), np.bool_)
        padded[..., :mask.shape[-1]] = mask
        mask = padded
    return np.packbits(mask, axis=-1, bitorder="little").view("<u8")


def pack_input(layer: ConvLayer, x_mask: np.ndarray) -> np.ndarray:
    """The padded input mask as words: N x G x Hp x Wp x ceil(Cg / 64) uint64."""
    xp = pad_input(np.asarray(x_mask, np.bool_), layer)
    n, _, hp, wp = xp.shape
    grouped = xp.reshape(n, layer.groups, layer.Cg, hp, wp).transpose(0, 1, 3, 4, 2)
    return _pack_last(grouped)


def pack_weights(layer: ConvLayer, w_mask: np.ndarray) -> np.ndarray:
    """Each kernel's mask as words in receptive-field order: G x Kg x (R * S * ceil(Cg / 64))
    uint64."""
    wm = np.asarray(w_mask, np.bool_).transpose(0, 2, 3, 1)  # K x R x S x Cg
    return _pack_last(wm).reshape(layer.groups, layer.Kg, -1)


def kernel_ones(w_words: np.ndarray) -> np.ndarray:
    """Non-zero weights of every kernel (K,) from ``pack_weights``' words."""
    return np.bitwise_count(w_words).sum(axis=2, dtype=np.int64).ravel()


TILE = 4  # output pixels whose fields meet each kernel word together (four accumulators)


@njit(cache=True, nogil=True)
def _pair_rows(xb, wb, R, S, P, Q, sh, sw, dh, dw, out, ones, first, stop):  # pragma: no cover
    """out[g Kg + k, (n P + p) Q + q] = pairs of kernel k of conv group g at pixel (n, p, q);
    ones[(n G + g) P + p] = set bits of group g's receptive fields along output row p of
    image n; for the rows ``first <= (n G + g) P + p < stop``. The fields of ``TILE``
    neighbouring pixels are gathered once and each kernel word is ANDed with all of them."""
    N, G, _, _, D = xb.shape
    Kg, L = wb.shape[1], wb.shape[2]
    fields = np.zeros((TILE, L), np.uint64)
    for row in range(first, stop):
        n, g, p = row // (G * P), row // P % G, row % P
        seen = 0
        for q0 in range(0, Q, TILE):
            width = min(TILE, Q - q0)
            fields[width:] = 0
            for t in range(width):
                i = 0
                for r in range(R):
                    for s in range(S):
                        for d in range(D):
                            word = xb[n, g, p * sh + r * dh, (q0 + t) * sw + s * dw, d]
                            fields[t, i] = word
                            seen += _popcount(word)
                            i += 1
            pixel = (n * P + p) * Q + q0
            for k in range(Kg):
                a0 = a1 = a2 = a3 = 0
                kernel = wb[g, k]
                for j in range(L):
                    w = kernel[j]
                    a0 += _popcount(fields[0, j] & w)
                    a1 += _popcount(fields[1, j] & w)
                    a2 += _popcount(fields[2, j] & w)
                    a3 += _popcount(fields[3, j] & w)
                dest = out[g * Kg + k]
                dest[pixel] = a0
                if width > 1:
                    dest[pixel + 1] = a1
                if width > 2:
                    dest[pixel + 2] = a2
                if width > 3:
                    dest[pixel + 3] = a3
        ones[row] = seen


def pair_counts(layer: ConvLayer, x_mask: np.ndarray, w_words: np.ndarray,
                out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pairs K x (N*P*Q) int32, receptive-field set bits per conv group G int64), from the
    input's mask and the kernels' words (``pack_weights``).

    ``pairs[k, (n*P + p)*Q + q]`` counts the (non-zero input, non-zero weight) pairs of
    kernel k at output pixel (n, p, q); the second array sums, over all output pixels
    and receptive-field bits, the non-zero inputs each conv group's kernels meet
    (padding counts as zero). ``out``, if given, receives the pairs (int32, C-contiguous,
    at least K rows, N*P*Q columns; rows past K are left alone).
    """
    if out is None:
        out = np.empty((layer.K, layer.N * layer.P * layer.Q), np.int32)
    rows = layer.N * layer.groups * layer.P
    ones = np.empty(rows, np.int64)
    args = (pack_input(layer, x_mask), w_words, layer.R, layer.S, layer.P, layer.Q,
            *layer.stride, *layer.dilation, out, ones)
    in_parallel(_pair_rows, args, rows)
    return out, ones.reshape(layer.N, layer.groups, layer.P).sum(axis=(0, 2))
