"""The fastest dense convolution engine: im2col + BLAS GEMM (tap sums for depthwise); a
layer of large patches and few kernels a band of output rows at a time (``band_rows``).

Shared by every dataflow whose arithmetic is a dense product (``systolic``) and
by ``simulate(mode='estimate')`` for activations. Float32 inputs accumulate in
float32; int8 inputs accumulate exactly and come back as int32: their GEMMs run in
float32 too, whose sums of up to ``EXACT_TERMS`` int8 products are exact (``gemm``),
and depthwise sums in float64 (exact below 2**53, far above any int32 sum).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import simd
from .ir import ConvLayer
from .jit import njit
from .parallel import in_parallel
from .quant import exact_int32
from .reference import pad_input


def im2col(x: np.ndarray, layer: ConvLayer) -> np.ndarray:
    """Patches N x G x (Cg*R*S) x (P*Q) of the padded input (one copy)."""
    n, G, Cg = x.shape[0], layer.groups, layer.Cg
    if _unit_kernel(layer):
        return x.reshape(n, G, Cg, layer.P * layer.Q)
    return patches(x, layer).reshape(n, G, Cg * layer.R * layer.S, layer.P * layer.Q)


def _unit_kernel(layer: ConvLayer) -> bool:
    """Whether the layer's patches are its input as it lies: 1x1, stride 1, no padding."""
    return layer.R == layer.S == 1 and layer.stride == (1, 1) and not any(layer.padding)


def patches(x: np.ndarray, layer: ConvLayer) -> np.ndarray:
    """The padded input's patches as a read-only view N x C x R x S x P x Q (no copy but
    the padding's)."""
    xp = np.ascontiguousarray(pad_input(x, layer))
    sn, sc, sh, sw = xp.strides
    return as_strided(xp, (x.shape[0], x.shape[1], layer.R, layer.S, layer.P, layer.Q),
                      (sn, sc, sh * layer.dilation[0], sw * layer.dilation[1],
                       sh * layer.stride[0], sw * layer.stride[1]), writeable=False)


# ``conv2d`` copies a layer's patches all at once up to BAND_FROM bytes, or when its GEMM has
# more than BAND_KERNELS kernels (rows) a group; past both, a band of output rows at a time
# into one buffer of about BAND_BYTES, which the GEMM then reads from cache: a GEMM of few
# rows reads its patches once per few products, so a copy of them all (115 MB for VGG-16's
# conv1_2) bounds it by memory; with many rows the panels are reused and a band's fewer
# columns only slow it
BAND_FROM = 4 << 20
BAND_KERNELS = 128
BAND_BYTES = 1 << 20


def band_rows(layer: ConvLayer, itemsize: int) -> int:
    """Output rows of ``layer`` that ``conv2d`` computes a band at a time (P: all at once)."""
    row_bytes = layer.Cg * layer.R * layer.S * layer.Q * itemsize
    if (_unit_kernel(layer) or layer.Kg > BAND_KERNELS
            or layer.N * layer.groups * layer.P * row_bytes <= BAND_FROM):
        return layer.P
    return min(layer.P, max(1, BAND_BYTES // (layer.groups * row_bytes)))


def _banded(x: np.ndarray, wm: np.ndarray, layer: ConvLayer, rows: int,
            integer: bool) -> np.ndarray:
    """``conv2d``'s sums (N x K x P x Q) from the patches of ``rows`` output rows at a time
    (``band_rows``), each band's copied into one buffer; ``wm``: G x Kg x (Cg*R*S). Every
    output's sum is the same dot product as from all the patches at once (``gemm``)."""
    G, Cg, R, S, P, Q = layer.groups, layer.Cg, layer.R, layer.S, layer.P, layer.Q
    view = patches(x, layer).reshape(x.shape[0], G, Cg, R, S, P, Q)
    out = np.empty((x.shape[0], G, layer.Kg, P * Q), _sums_dtype(wm.shape[-1], integer))
    band = np.empty((G, Cg, R, S, rows, Q), x.dtype)
    for n in range(x.shape[0]):
        for p0 in range(0, P, rows):
            p1 = min(P, p0 + rows)
            cols = band[:, :, :, :, :p1 - p0]
            cols[...] = view[n, :, :, :, :, p0:p1]
            gemm(wm, cols.reshape(G, Cg * R * S, -1), integer, out[n, :, :, p0 * Q:p1 * Q])
    return out.reshape(layer.output_shape)


# An int8 product is at most 2**14 in magnitude (-128 x -128), so every partial sum of up to
# 2**10 of them is a whole number below 2**24, which float32 holds exactly: a float32 GEMM of
# that many terms is exact in any order of its additions, fused or not, and twice the speed
# of a float64 one. Longer sums are cut into runs of EXACT_TERMS, each a float32 GEMM, added
# in float64 (exact below 2**53)
EXACT_TERMS = 1 << 10


def _sums_dtype(terms: int, integer: bool):
    """The dtype ``gemm`` gives sums of ``terms`` products in: float32, or float64 for int8
    operands past ``EXACT_TERMS``."""
    return np.float64 if integer and terms > EXACT_TERMS else np.float32


def gemm(wm: np.ndarray, cols: np.ndarray, integer: bool,
         out: np.ndarray | None = None) -> np.ndarray:
    """``wm @ cols`` (float32 operands; ``out``, if given, of ``_sums_dtype``): for int8
    values (``integer``) exactly, in float32 GEMMs of ``EXACT_TERMS`` terms at most, added
    in float64 when there are more."""
    terms = wm.shape[-1]
    if not integer or terms <= EXACT_TERMS:
        return np.matmul(wm, cols, out=out)
    sums = np.matmul(wm[..., :EXACT_TERMS], cols[..., :EXACT_TERMS, :]).astype(np.float64)
    for t in range(EXACT_TERMS, terms, EXACT_TERMS):
        sums += np.matmul(wm[..., t:t + EXACT_TERMS], cols[..., t:t + EXACT_TERMS, :])
    if out is None:
        return sums
    out[...] = sums
    return out


def depthwise(x: np.ndarray, w: np.ndarray, layer: ConvLayer, acc,
              taps: list[tuple[int, int]] | None = None,
              bias: np.ndarray | None = None) -> np.ndarray:
    """Conv groups of one input channel (Cg = 1, any Kg): output channel k is the sum of the
    R*S windows of input channel k // Kg scaled by kernel k's taps, added tap by tap in the
    order ``taps`` ((r, s) pairs; default row-major), each product rounded, then added (no
    fused multiply-add), then ``bias[k]`` if given (as ``finish`` adds it: the same sum, one
    pass over the maps fewer). N x K x P x Q of ``acc``; each output map a task of the row
    pool."""
    xs = np.ascontiguousarray(x.astype(acc, copy=False))
    order = np.array(taps if taps is not None else
                     [(r, s) for r in range(layer.R) for s in range(layer.S)], np.int64)
    out = np.empty(layer.output_shape, acc)
    wk = np.ascontiguousarray(w.astype(acc, copy=False).reshape(layer.K, layer.R, layer.S))
    shift = np.zeros(layer.K, acc) if bias is None else np.asarray(bias).astype(acc)
    in_parallel(_depthwise_maps, (xs, padded_plane(layer), wk, order, layer.Kg, *layer.stride,
                                  *layer.dilation, shift, bias is not None, out),
                layer.N * layer.K)
    return out


def padded_plane(layer: ConvLayer) -> np.ndarray:
    """(top, left, padded height, padded width) of ``layer``'s input planes, int64: where
    ``split_phases`` places a plane in its padding."""
    top, bottom, left, right = layer.padding
    return np.array([top, left, layer.H + top + bottom, layer.W + left + right], np.int64)


# elements of a block of wide output rows (``_depthwise_maps``): 8 KiB of float32 sums
BLOCK_SUMS = 2048


@njit(cache=True, nogil=True)
def _depthwise_maps(x, pad, wk, taps, kg, sh, sw, dh, dw, bias, biased, out, first,
                    stop):  # pragma: no cover
    """out[n, k] = the sum over ``taps`` in their order of wk[k, r, s] x the window of tap
    (r, s) of input channel k // kg (padded as ``pad`` says: ``padded_plane``), then plus
    bias[k] where ``biased``, for the maps ``first <= n K + k < stop``.

    The padded input plane is written into its ``sh x sw`` stride phases (phase (a, b): the
    pixels at rows a + i sh, columns b + j sw; at stride 1 one, the plane), so that a tap
    reads one phase at a fixed offset and a row of outputs is a run of it. Outputs are
    summed in *wide* rows, as wide as a phase: a block of them is one contiguous run, summed
    four vector registers at a time over all the taps (``simd``; four independent sums hide
    the add's latency), where a loop per output row (7 to 112 pixels) and tap spent more on
    the row than on its products, and kept its sums in memory. The columns past Q, and the
    lanes past a block's run, are computed and dropped: a kept output reads only its
    window's pixels, and the others' reads stay inside the phases and their margin."""
    K, P, Q = out.shape[1:]
    C = x.shape[1]
    top, left, Hp, Wp = pad[0], pad[1], pad[2], pad[3]
    width, size = phase_shape(Hp, Wp, sh, sw)
    lanes = simd.lanes(out)
    phases = np.zeros(sh * sw * size + 4 * lanes, x.dtype)  # flat, a margin past the last
    block = max(1, BLOCK_SUMS // width)  # output rows a block sums
    sums = np.empty(block * width + 4 * lanes, out.dtype)
    n_taps = taps.shape[0]
    start, weight = np.empty(n_taps, np.int64), np.empty(n_taps, out.dtype)
    for i in range(n_taps):  # where each tap reads: its phase, at its offset there
        r, s = taps[i, 0] * dh, taps[i, 1] * dw
        start[i] = ((r % sh) * sw + s % sw) * size + (r // sh) * width + s // sw
    channel = -1
    for task in range(first, stop):
        n, k = task // K, task % K
        if n * C + k // kg != channel:  # a new input channel: its phases
            channel = n * C + k // kg
            split_phases(x[n, k // kg], top, left, Hp, Wp, sh, sw, width, size, phases)
        for i in range(n_taps):
            weight[i] = wk[k, taps[i, 0], taps[i, 1]]
        for p0 in range(0, P, block):
            lines = min(block, P - p0)
            for j in range(0, (lines - 1) * width + Q, 4 * lanes):
                a0, a1 = simd.zeros(sums), simd.zeros(sums)
                a2, a3 = simd.zeros(sums), simd.zeros(sums)
                at = p0 * width + j
                for i in range(n_taps):
                    simd.madd(a0, phases, start[i] + at, weight[i])
                    simd.madd(a1, phases, start[i] + at + lanes, weight[i])
                    simd.madd(a2, phases, start[i] + at + 2 * lanes, weight[i])
                    simd.madd(a3, phases, start[i] + at + 3 * lanes, weight[i])
                simd.store(a0, sums, j)
                simd.store(a1, sums, j + lanes)
                simd.store(a2, sums, j + 2 * lanes)
                simd.store(a3, sums, j + 3 * lanes)
            if biased:  # after the taps' sum, as ``finish`` adds it
                shift = bias[k]
                for j in range((lines - 1) * width + Q):
                    sums[j] += shift
            store_wide(sums, width, out[n, k], p0, lines)


@njit(cache=True, nogil=True, inline="always")
def phase_shape(Hp, Wp, sh, sw):  # pragma: no cover
    """(width, elements) of each stride phase of an Hp x Wp plane at stride (sh, sw)."""
    width = -(-Wp // sw)
    return width, -(-Hp // sh) * width


@njit(cache=True, nogil=True, inline="always")
def store_wide(sums, width, plane, p0, lines):  # pragma: no cover
    """plane[p0 + p, q] = sums[p width + q] for the ``lines`` wide rows (``width`` sums
    each) of a block and the Q columns of ``plane`` (P x Q)."""
    Q = plane.shape[1]
    for p in range(lines):  # sliced: no index to wrap, the copy vectorises
        dest, row = plane[p0 + p], sums[p * width:p * width + Q]
        for q in range(Q):
            dest[q] = row[q]


@njit(cache=True, nogil=True)
def split_phases(plane, top, left, Hp, Wp, sh, sw, width, size, phases):  # pragma: no cover
    """phases[(a sw + b) size + i width + j] = pixel (a + i sh, b + j sw) of the Hp x Wp
    plane that ``plane`` (H x W) padded with zeros (``top`` rows above it, ``left`` columns
    before it) would be (flat phases of ``size`` elements each). Only the plane's own pixels
    are written: the padding's positions keep the zeros ``phases`` was made with (the same
    positions for every plane of a layer), so a layer's input is never padded first."""
    H, W = plane.shape
    for b in range(sw):  # phase column b: its pixels j of a row, those inside the plane
        n = -(-(Wp - b) // sw)
        lo = min(n, max(0, -(-(left - b) // sw)))  # the first inside the plane's columns
        hi = max(lo, min(n, -(-(left + W - b) // sw)))  # the first past them
        first = lo * sw + b - left  # the plane's column of pixel lo
        for h in range(H):
            y = h + top
            at = ((y % sh) * sw + b) * size + (y // sh) * width + lo
            inside, source = phases[at:at + hi - lo], plane[h, first:]
            if sw == 1:  # constant strides: the copies vectorise
                for j in range(hi - lo):
                    inside[j] = source[j]
            elif sw == 2:
                for j in range(hi - lo):
                    inside[j] = source[2 * j]
            else:
                for j in range(hi - lo):
                    inside[j] = source[j * sw]


@njit(cache=True, nogil=True, inline="always")
def store_row(sums, out, n, k0, p):  # pragma: no cover
    """Write one output row's sums, kept pixel-major (``sums``: Q x Kg, each pixel's kernels
    side by side, as the machines' loops vectorised across kernels keep them), into
    out[n, k0 + k, p, :] of the N x K x P x Q output."""
    Q, Kg = sums.shape
    for k in range(Kg):
        dest = out[n, k0 + k, p]
        for q in range(Q):
            dest[q] = sums[q, k]


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, layer: ConvLayer) -> np.ndarray:
    """Dense convolution of ``layer``: float32 out for float inputs, int32 for int8 inputs."""
    integer = np.issubdtype(x.dtype, np.integer)
    if layer.Cg == 1:
        acc = np.float64 if integer else np.float32
        return finish(depthwise(x, w, layer, acc, bias=bias), None, layer, integer)
    x = x.astype(np.float32, copy=False)  # int8 values too: exact (``gemm``)
    wm = w.astype(np.float32, copy=False).reshape(layer.groups, layer.Kg, -1)
    rows = band_rows(layer, x.itemsize)
    if rows < layer.P:
        out = _banded(x, wm, layer, rows, integer)
    else:
        out = gemm(wm, im2col(x, layer), integer).reshape(layer.output_shape)
    return finish(out, bias, layer, integer)


def finish(out: np.ndarray, bias: np.ndarray | None, layer: ConvLayer,
           integer: bool) -> np.ndarray:
    """Add the bias to accumulated sums; for int8 inputs (``integer``) return exact int32.

    Every fast path sums int8 products exactly, as whole numbers in float64 (exact below
    2**53), in float32 runs (``gemm``) or in int64, and ends here,
    so the int32 range check and rounding are written once (``quant.exact_int32``).
    """
    if integer:
        return exact_int32(out, bias, layer.name)
    if bias is not None:
        out += np.asarray(bias).astype(out.dtype).reshape(1, -1, 1, 1)
    return out
