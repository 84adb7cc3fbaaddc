"""The reference maths that judges every dataflow: direct convolution, tap by tap.

Deliberately unlike the fast paths (no im2col, no GEMM): for each kernel tap
(r, s) the strided, dilated input window is multiplied into the output, in
float64 for float inputs and in int64 for integer inputs (exact integer
arithmetic, the judge of the int8 mode).
"""

from __future__ import annotations

import numpy as np

from .ir import ConvLayer


def pad_input(x: np.ndarray, layer: ConvLayer, value=0, wider: int = 0) -> np.ndarray:
    """``x`` (N x C x H x W) with the layer's (top, bottom, left, right) padding of ``value``
    applied, and ``wider`` more columns of it on the right (``x`` itself when there is
    none). A new array with ``x`` copied in: ``np.pad``'s generality cost 25 us a call, most
    of a small layer's padding."""
    t, b, l, r = layer.padding
    r += wider
    if not (t or b or l or r):
        return x
    n, c, h, w = x.shape
    shape = (n, c, h + t + b, w + l + r)
    out = np.zeros(shape, x.dtype) if value == 0 else np.full(shape, value, x.dtype)
    out[:, :, t:t + h, l:l + w] = x
    return out


def tap_window(xp: np.ndarray, layer: ConvLayer, r: int, s: int) -> np.ndarray:
    """The input pixels that kernel tap (r, s) meets at every output position: N x C x P x Q."""
    (sh, sw), (dh, dw) = layer.stride, layer.dilation
    return xp[:, :, r * dh: r * dh + (layer.P - 1) * sh + 1: sh,
              s * dw: s * dw + (layer.Q - 1) * sw + 1: sw]


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, layer: ConvLayer) -> np.ndarray:
    """Direct convolution: float64 result for float inputs, exact int64 for integer inputs."""
    acc = np.int64 if np.issubdtype(np.asarray(x).dtype, np.integer) else np.float64
    xp = pad_input(np.asarray(x, acc), layer)
    G, Cg, Kg = layer.groups, layer.Cg, layer.Kg
    wg = np.asarray(w, acc).reshape(G, Kg, Cg, layer.R, layer.S)
    out = np.zeros((layer.N, G, Kg, layer.P, layer.Q), acc)
    for r in range(layer.R):
        for s in range(layer.S):
            win = tap_window(xp, layer, r, s).reshape(layer.N, G, Cg, layer.P, layer.Q)
            out += np.einsum("ngchw,gkc->ngkhw", win, wg[:, :, :, r, s])
    out = out.reshape(layer.output_shape)
    if bias is not None:
        out += np.asarray(bias, acc).reshape(1, -1, 1, 1)
    return out
