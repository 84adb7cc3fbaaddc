"""The fastest dense convolution engine: im2col + BLAS GEMM (tap sums for depthwise).

Shared by every dataflow whose arithmetic is a dense product (``systolic``) and
by ``simulate(mode='estimate')`` for activations. Float32 inputs accumulate in
float32; int8 inputs accumulate exactly (float64 GEMM is exact below 2**53,
far above any int32 sum) and come back as int32.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .ir import ConvLayer
from .jit import njit
from .parallel import in_parallel
from .quant import check_int32
from .reference import pad_input


def im2col(x: np.ndarray, layer: ConvLayer) -> np.ndarray:
    """Patches N x G x (Cg*R*S) x (P*Q) of the padded input (one copy)."""
    n, c, _, _ = x.shape
    G, Cg, R, S, P, Q = layer.groups, layer.Cg, layer.R, layer.S, layer.P, layer.Q
    if R == S == 1 and layer.stride == (1, 1) and not any(layer.padding):
        return x.reshape(n, G, Cg, P * Q)
    xp = np.ascontiguousarray(pad_input(x, layer))
    sn, sc, sh, sw = xp.strides
    view = as_strided(xp, (n, c, R, S, P, Q),
                      (sn, sc, sh * layer.dilation[0], sw * layer.dilation[1],
                       sh * layer.stride[0], sw * layer.stride[1]), writeable=False)
    return view.reshape(n, G, Cg * R * S, P * Q)


def depthwise(x: np.ndarray, w: np.ndarray, layer: ConvLayer, acc,
              taps: list[tuple[int, int]] | None = None) -> np.ndarray:
    """Conv groups of one input channel (Cg = 1, any Kg): output channel k is the sum of the
    R*S windows of input channel k // Kg scaled by kernel k's taps, added tap by tap in the
    order ``taps`` ((r, s) pairs; default row-major), each product rounded, then added (no
    fused multiply-add). N x K x P x Q of ``acc``; each output row on the row pool."""
    xp = np.ascontiguousarray(pad_input(x.astype(acc, copy=False), layer))
    order = np.array(taps if taps is not None else
                     [(r, s) for r in range(layer.R) for s in range(layer.S)], np.int64)
    out = np.zeros(layer.output_shape, acc)
    wk = np.ascontiguousarray(w.astype(acc, copy=False).reshape(layer.K, layer.R, layer.S))
    in_parallel(_depthwise_rows, (xp, wk, order, layer.Kg, *layer.stride, *layer.dilation, out),
                layer.N * layer.K * layer.P)
    return out


@njit(cache=True, nogil=True)
def _depthwise_rows(xp, wk, taps, kg, sh, sw, dh, dw, out, first, stop):  # pragma: no cover
    """out[n, k, p] += wk[k, r, s] x the window of tap (r, s) of input channel k // kg, taps
    in the order of ``taps``, for the output rows ``first <= (n K + k) P + p < stop``;
    vectorised along the row where its window is contiguous (stride 1)."""
    K, P, Q = out.shape[1:]
    for row in range(first, stop):
        n, k, p = row // (K * P), row // P % K, row % P
        dest, plane = out[n, k, p], xp[n, k // kg]
        for i in range(taps.shape[0]):
            r, s = taps[i, 0], taps[i, 1]
            line, weight = plane[p * sh + r * dh], wk[k, r, s]
            if sw == 1:
                window = line[s * dw: s * dw + Q]
                for q in range(Q):
                    dest[q] += window[q] * weight
            else:
                for q in range(Q):
                    dest[q] += line[q * sw + s * dw] * weight


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
    acc = np.float64 if integer else np.float32
    if layer.Cg == 1:
        out = depthwise(x, w, layer, acc)
    else:
        cols = im2col(x.astype(acc, copy=False), layer)
        wm = w.astype(acc, copy=False).reshape(layer.groups, layer.Kg, -1)
        out = np.matmul(wm, cols).reshape(layer.output_shape)
    return finish(out, bias, layer, integer)


def finish(out: np.ndarray, bias: np.ndarray | None, layer: ConvLayer,
           integer: bool) -> np.ndarray:
    """Add the bias to accumulated sums; for int8 inputs (``integer``) return exact int32.

    Every fast path accumulates int8 products in float64 (exact below 2**53) and
    ends here, so the int32 range check and rounding are written once.
    """
    if bias is not None:
        out += np.asarray(bias).astype(out.dtype).reshape(1, -1, 1, 1)
    if integer:
        return check_int32(np.rint(out).astype(np.int64), layer.name)
    return out
