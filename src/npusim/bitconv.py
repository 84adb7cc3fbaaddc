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

import functools
import math

import numpy as np

from . import simd
from .derived import derived, frozen
from .engine import padded_plane, phase_shape, split_phases, store_wide
from .ir import ConvLayer
from .jit import intrinsic, njit
from .parallel import in_parallel

WORD_BITS = 64


@intrinsic
def popcount(typingctx, word):
    """Set bits of a uint64 (the CPU's popcount instruction), as int64."""
    from numba import types

    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


def pack_input(layer: ConvLayer, x_mask: np.ndarray) -> np.ndarray:
    """The padded input mask as words: N x G x Hp x Wp x ceil(Cg / 64) uint64."""
    top, bottom, left, right = layer.padding
    words = np.zeros((layer.N, layer.groups, layer.H + top + bottom, layer.W + left + right,
                      math.ceil(layer.Cg / WORD_BITS)), np.uint64)
    mask = np.ascontiguousarray(x_mask, np.bool_).view(np.uint8)
    _pack_channels(mask.reshape(layer.N, layer.groups, layer.Cg, layer.H, layer.W), top, left,
                   words)
    return words


@njit(cache=True, nogil=True)
def _pack_channels(mask, top, left, words):  # pragma: no cover
    """words[n, g, top + h, left + w, c // 64] |= mask[n, g, c, h, w] << (c % 64): a row of
    words at a time, each word of the row built in a buffer from its 64 channels' mask rows
    (read in order), then stored."""
    N, G, Cg, H, W = mask.shape
    row = np.empty(W, np.uint64)
    for n in range(N):
        for g in range(G):
            for h in range(H):
                out = words[n, g, top + h, left:]
                for d in range(words.shape[4]):
                    row[:] = 0
                    for c in range(d * WORD_BITS, min(Cg, d * WORD_BITS + WORD_BITS)):
                        bits, shift = mask[n, g, c, h], np.uint64(c - d * WORD_BITS)
                        for w in range(W):
                            row[w] |= np.uint64(bits[w]) << shift
                    for w in range(W):
                        out[w, d] = row[w]


def pack_weights(layer: ConvLayer, w_mask: np.ndarray) -> np.ndarray:
    """Each kernel's mask as words in receptive-field order: G x Kg x (R * S * ceil(Cg / 64))
    uint64; packed once per read-only mask (``derived``: a network's weight mask), read-only."""
    key = ("packed", layer.K, layer.Cg, layer.R, layer.S, layer.groups)
    return derived(w_mask, key, lambda: frozen(_pack(layer, w_mask)))


def _pack(layer: ConvLayer, w_mask: np.ndarray) -> np.ndarray:
    taps, depth = layer.R * layer.S, math.ceil(layer.Cg / WORD_BITS)
    words = np.zeros((layer.K, taps * depth), np.uint64)
    mask = np.ascontiguousarray(w_mask, np.bool_).view(np.uint8).reshape(layer.K, layer.Cg, taps)
    in_parallel(_pack_kernels, (mask, depth, words), layer.K)
    return words.reshape(layer.groups, layer.Kg, -1)


@njit(cache=True, nogil=True)
def _pack_kernels(mask, depth, words, first, stop):  # pragma: no cover
    """words[k, t * depth + c // 64] = OR of mask[k, c, t] << (c % 64), kernels first..stop-1:
    each word built in a register from its 64 channels."""
    _, Cg, taps = mask.shape
    for k in range(first, stop):
        for t in range(taps):
            for d in range(depth):
                word = np.uint64(0)
                for c in range(d * WORD_BITS, min(Cg, d * WORD_BITS + WORD_BITS)):
                    word |= np.uint64(mask[k, c, t]) << np.uint64(c - d * WORD_BITS)
                words[k, t * depth + d] = word


def kernel_ones(w_words: np.ndarray) -> np.ndarray:
    """Non-zero weights of every kernel (K,) from ``pack_weights``' words (once per read-only
    words)."""
    return derived(w_words, "kernel_ones", lambda: frozen(
        np.bitwise_count(w_words).sum(axis=2, dtype=np.int64).ravel()))


TILE = 8  # output pixels whose fields meet each kernel word together (one 512-bit register)


@njit(cache=True, nogil=True)
def _pair_rows(xb, wb, R, S, P, Q, sh, sw, dh, dw, out, ones, first, stop):  # pragma: no cover
    """out[g Kg + k, (n P + p) Q + q] = pairs of kernel k of conv group g at pixel (n, p, q);
    ones[(n G + g) P + p] = set bits of group g's receptive fields along output row p of
    image n; for the rows ``first <= (n G + g) P + p < stop``. The fields of ``TILE``
    neighbouring pixels are gathered once, each word's ``TILE`` pixels side by side, and
    each kernel word is ANDed with all of them at once and their set bits counted in vector
    registers (``simd.count_and``)."""
    N, G, _, _, D = xb.shape
    Kg, L = wb.shape[1], wb.shape[2]
    fields = np.zeros((L, TILE), np.uint64)  # word j of the tile's pixels side by side
    words, counts = fields.reshape(-1), np.empty(TILE, np.int64)
    lanes = simd.lanes(counts)  # TILE in one register, or two
    if 2 * lanes < TILE:
        raise ValueError("a tile of pixels needs more than two vector registers")
    for row in range(first, stop):
        n, g, p = row // (G * P), row // P % G, row % P
        seen = 0
        for q0 in range(0, Q, TILE):
            width = min(TILE, Q - q0)
            fields[:, width:] = 0
            for t in range(width):
                i = 0
                for r in range(R):
                    for s in range(S):
                        for d in range(D):
                            word = xb[n, g, p * sh + r * dh, (q0 + t) * sw + s * dw, d]
                            fields[i, t] = word
                            seen += popcount(word)
                            i += 1
            pixel = (n * P + p) * Q + q0
            for k in range(Kg):
                low, high = simd.zeros(counts), simd.zeros(counts)  # pixels 0.., lanes..
                kernel = wb[g, k]
                for j in range(L):
                    simd.count_and(low, words, j * TILE, kernel[j])
                    if lanes < TILE:
                        simd.count_and(high, words, j * TILE + lanes, kernel[j])
                simd.store(low, counts, 0)
                if lanes < TILE:
                    simd.store(high, counts, lanes)
                dest = out[g * Kg + k, pixel:pixel + width]
                for t in range(width):
                    dest[t] = counts[t]
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
    if layer.Cg == 1:  # depthwise: one bit a word; summing the set taps beats packing
        return _one_channel_pairs(layer, x_mask, w_words, out)
    if layer.R == layer.S == 1:  # pointwise: a field is one pixel's words
        return _pointwise_pairs(layer, x_mask, w_words, out)
    rows = layer.N * layer.groups * layer.P
    ones = np.empty(rows, np.int64)
    args = (pack_input(layer, x_mask), w_words, layer.R, layer.S, layer.P, layer.Q,
            *layer.stride, *layer.dilation, out, ones)
    in_parallel(_pair_rows, args, rows)
    return out, ones.reshape(layer.N, layer.groups, layer.P).sum(axis=(0, 2))


# output pixels a pointwise block counts at once (``_pointwise_rows``): 4 KiB of words
POINTWISE_BLOCK = 512


def _pointwise_pairs(layer: ConvLayer, x_mask: np.ndarray, w_words: np.ndarray,
                     out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pair_counts`` for 1 x 1 kernels: a pixel's receptive field is the words of the one
    input pixel it reads, so the words of every output pixel's input (padded, strided) are
    laid out word-major, G x D x (N*P*Q), and each kernel word is ANDed with a run of
    pixels at a time (``_pointwise_rows``)."""
    sh, sw = layer.stride
    words = pack_input(layer, x_mask)[:, :, :layer.P * sh:sh, :layer.Q * sw:sw]
    depth = words.shape[4]
    planes = np.ascontiguousarray(words.transpose(1, 4, 0, 2, 3)).reshape(
        layer.groups, depth, -1)
    blocks = -(-planes.shape[2] // POINTWISE_BLOCK)
    ones = np.zeros(layer.groups * blocks, np.int64)
    in_parallel(_pointwise_rows, (planes, w_words, out, ones), layer.groups * blocks)
    return out, ones.reshape(layer.groups, blocks).sum(axis=1)


@njit(cache=True, nogil=True)
def _pointwise_rows(planes, wb, out, ones, first, stop):  # pragma: no cover
    """For the tasks ``first <= g * blocks + b < stop`` (conv group g, block b of
    ``POINTWISE_BLOCK`` pixels): out[g Kg + k, x] = sum over words d of
    popcount(planes[g, d, x] AND wb[g, k, d]) for the block's pixels x, and ones[task] =
    the set bits of the block's words. Each kernel's sums are built in its output row, a
    word at a time across the block's pixels (the loop over pixels vectorises)."""
    G, D, X = planes.shape
    Kg = wb.shape[1]
    blocks = -(-X // POINTWISE_BLOCK)
    for task in range(first, stop):
        g, b = task // blocks, task % blocks
        lo, hi = b * POINTWISE_BLOCK, min(X, (b + 1) * POINTWISE_BLOCK)
        for k in range(Kg):
            dest, kernel = out[g * Kg + k, lo:hi], wb[g, k]
            source, word = planes[g, 0, lo:hi], kernel[0]
            for x in range(hi - lo):
                dest[x] = popcount(source[x] & word)
            for d in range(1, D):
                source, word = planes[g, d, lo:hi], kernel[d]
                for x in range(hi - lo):
                    dest[x] += popcount(source[x] & word)
        seen = 0
        for d in range(D):
            source = planes[g, d, lo:hi]
            for x in range(hi - lo):
                seen += popcount(source[x])
        ones[task] = seen


def _one_channel_pairs(layer: ConvLayer, x_mask: np.ndarray, w_words: np.ndarray,
                       out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pair_counts`` for conv groups of one input channel: the pairs of kernel k at a pixel
    are the input's set bits under the kernel's set taps (``_tap_maps``, over the set taps
    only: a pruned kernel has few); the receptive fields' set bits per group count each
    input pixel as often as windows cover it: on each axis, the (output, tap) pairs that
    read its padded row or column."""
    first_tap, taps = set_taps(layer, w_words)
    mask = np.ascontiguousarray(x_mask, np.bool_).view(np.uint8)
    # a pixel's count is at most R*S: in bytes when it fits one, 64 to a vector register
    count = np.zeros(1, np.uint8 if layer.R * layer.S <= 255 else np.int32)
    in_parallel(_tap_maps, (mask, padded_plane(layer), first_tap, taps, layer.S, layer.Kg,
                            *layer.stride, *layer.dilation, count,
                            out[:layer.K].reshape(layer.K, layer.N, layer.P, layer.Q)),
                layer.K * layer.N)
    top, bottom, left, right = layer.padding
    rows = _cover(layer.P, layer.R, layer.stride[0], layer.dilation[0], top, layer.H)
    cols = _cover(layer.Q, layer.S, layer.stride[1], layer.dilation[1], left, layer.W)
    return out, _covered_ones(mask, rows, cols)


def set_taps(layer: ConvLayer, w_words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The set taps ``r*S + s`` of every kernel of one input channel, ascending, from its
    words (bit 0 of word t: tap t): (kernel k's first entry, K + 1; the taps), int64; once
    per read-only words."""
    def make():
        bits = (w_words.reshape(layer.K, -1) & np.uint64(1)) != 0
        first = np.zeros(layer.K + 1, np.int64)
        np.cumsum(bits.sum(axis=1), out=first[1:])
        return frozen(first), frozen(np.nonzero(bits)[1].astype(np.int64))
    return derived(w_words, "set taps", make)


# the pair counts of a block of wide output rows (``_tap_maps``): 8 KiB of bytes
BLOCK_COUNTS = 8192


@njit(cache=True, nogil=True)
def _tap_maps(mask, pad, first_tap, taps, S, kg, sh, sw, dh, dw, count, out, first,
              stop):  # pragma: no cover
    """out[k, n, p, q] = sum over kernel k's set taps t = r*S + s (``taps[first_tap[k]:
    first_tap[k + 1]]``) of padded[n, k // kg, p*sh + r*dh, q*sw + s*dw], ``padded`` the 0/1
    ``mask`` in its padding (``pad``: ``engine.padded_plane``), for the maps
    ``first <= k N + n < stop``. As the dense engine's depthwise maps:
    the plane cut into its stride phases (``engine.split_phases``), so that a tap reads a
    phase at a fixed offset and a block of wide output rows is one run, each set tap one
    pass of adds over it, in ``count``'s dtype (bytes where R*S < 256); the columns past
    Q are counted and dropped."""
    N, P, Q = out.shape[1:]
    C = mask.shape[1]
    top, left, Hp, Wp = pad[0], pad[1], pad[2], pad[3]
    width, size = phase_shape(Hp, Wp, sh, sw)
    phases = np.zeros(sh * sw * size, mask.dtype)
    block = max(1, BLOCK_COUNTS // width)  # output rows a block counts
    sums = np.empty(block * width, count.dtype)
    channel = -1
    for task in range(first, stop):
        k, n = task // N, task % N
        if n * C + k // kg != channel:  # a new input channel: its phases
            channel = n * C + k // kg
            split_phases(mask[n, k // kg], top, left, Hp, Wp, sh, sw, width, size, phases)
        for p0 in range(0, P, block):
            lines = min(block, P - p0)
            run = (lines - 1) * width + Q
            for j in range(run):
                sums[j] = 0
            for i in range(first_tap[k], first_tap[k + 1]):
                r, s = taps[i] // S * dh, taps[i] % S * dw
                start = (((r % sh) * sw + s % sw) * size + (r // sh + p0) * width + s // sw)
                source = phases[start:start + run]  # sliced: no index to wrap, it vectorises
                for j in range(run):
                    sums[j] += source[j]
            store_wide(sums, width, out[k, n], p0, lines)


@functools.lru_cache(maxsize=256)  # the layer's shape alone: once for every call
def _cover(outputs: int, taps: int, stride: int, dilation: int, pad: int,
           size: int) -> np.ndarray:
    """How many (output, tap) pairs read each of the ``size`` input positions of one axis
    (``pad`` positions of padding before the first), as int64 (read-only)."""
    read = np.arange(outputs)[:, None] * stride + np.arange(taps)[None, :] * dilation - pad
    read = read[(read >= 0) & (read < size)]
    return frozen(np.bincount(read, minlength=size).astype(np.int64))


@njit(cache=True, nogil=True)
def _covered_ones(mask, rows, cols):  # pragma: no cover
    """Per channel c of ``mask`` (N x C x H x W, 0/1 bytes): the sum over images n and
    positions (h, w) of mask[n, c, h, w] x rows[h] x cols[w], in int64 (exact)."""
    N, C, H, W = mask.shape
    out = np.zeros(C, np.int64)
    for n in range(N):
        for c in range(C):
            for h in range(H):
                line, ones = mask[n, c, h], 0
                for w in range(W):
                    ones += line[w] * cols[w]
                out[c] += ones * rows[h]
    return out
