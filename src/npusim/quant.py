"""The int8 scheme: symmetric per-tensor activations, symmetric per-output-channel weights,
int32 accumulators, requantisation of each conv output to int8.

Scales are chosen from the real tensors (max |value| / 127, the range [-127, 127]).
A conv in int8 mode computes ``acc = sum(x_q * w_q) + bias_q`` exactly in int32,
then ``y_q = clip(round_half_even(acc * s_x * s_w[k] / s_y), -127, 127)`` with
``s_y = max|acc * s_x * s_w| / 127``; the next op sees ``y_q * s_y`` (float32).
Every dataflow's int8 path and the exact integer reference share these functions,
so outputs can be compared bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import NpusimError
from .jit import njit

QMAX = 127


def _scale(max_abs) -> np.ndarray:
    max_abs = np.asarray(max_abs, np.float64)
    return np.where(max_abs > 0, max_abs / QMAX, 1.0)


def quantize_activations(x: np.ndarray) -> tuple[np.ndarray, float]:
    """(int8 tensor, scale) with one scale for the whole tensor: ``clip(rint(x / s))``, the
    division in x's float32 (a float32 tensor's in one compiled pass, ``_rounded``; its max
    |x| from its max and min, no array of the absolute values)."""
    if x.dtype != np.float32 or not x.size:
        s = float(_scale(np.abs(x).max() if x.size else 0.0))
        return np.clip(np.rint(x / s), -QMAX, QMAX).astype(np.int8), s
    flat = np.ascontiguousarray(x).reshape(-1)
    s = float(_scale(max(flat.max(), -flat.min())))
    return _rounded(flat, np.float32(s), np.empty(flat.size, np.int8)).reshape(x.shape), s


@njit(cache=True, nogil=True)
def _rounded(x, s, out):  # pragma: no cover
    """out = clip(rint(x / s), -QMAX, QMAX) as int8, element by element in x's dtype (``s``
    of the same), as ``quantize_activations``' numpy expression computes it."""
    for i in range(x.size):
        out[i] = min(max(np.rint(x[i] / s), -QMAX), QMAX)
    return out


def quantize_weights(w: np.ndarray, scales: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, per-output-channel scales (K,)) for weights K x C x R x S; ``scales``:
    the scales to use (default: max |w| / 127 per output channel)."""
    s = _scale(np.abs(w).reshape(w.shape[0], -1).max(axis=1)) if scales is None else scales
    q = np.clip(np.rint(w / s.reshape(-1, 1, 1, 1)), -QMAX, QMAX).astype(np.int8)
    return q, s


BIAS_LIMIT = 2**30  # accumulator units a quantised bias may take: half of int32's range


def bias_fitted_scales(w_scales: np.ndarray, bias: np.ndarray | None,
                       x_scale: float) -> np.ndarray:
    """``w_scales``, raised for the output channels whose bias would pass ``BIAS_LIMIT`` in
    accumulator units (bias / (s_x s_w)), as TFLite's converter does: a trained network's
    dead kernels (weights of 1e-34 beside a bias of 1e-28) would otherwise overflow int32.
    Their weights round to a coarser step, of the bias's order: nothing a channel that small
    shows. ``w_scales`` itself when every bias fits."""
    if bias is None:
        return w_scales
    need = np.abs(np.asarray(bias, np.float64)) / (x_scale * BIAS_LIMIT)
    return np.maximum(w_scales, need) if (need > w_scales).any() else w_scales


def quantize_bias(bias: np.ndarray | None, x_scale: float, w_scales: np.ndarray):
    """Bias in accumulator units (int32), or None; within ``BIAS_LIMIT`` on scales from
    ``bias_fitted_scales``."""
    if bias is None:
        return None
    return np.rint(np.asarray(bias, np.float64) / (x_scale * w_scales)).astype(np.int32)


def check_int32(acc: np.ndarray, where: str) -> np.ndarray:
    """``acc`` as int32, raising if an accumulator would overflow 32 bits."""
    if acc.size and (acc.max() > np.iinfo(np.int32).max or acc.min() < np.iinfo(np.int32).min):
        _overflow(where, acc.min(), acc.max())
    return acc.astype(np.int32)


def _overflow(where: str, low, high):
    raise NpusimError(f"{where}: int32 accumulator overflow (range {low}..{high})")


def exact_int32(sums: np.ndarray, bias: np.ndarray | None, where: str) -> np.ndarray:
    """int8 convolution sums (N x K x ..., whole numbers: float32 or float64, or int64) plus
    ``bias`` (K,), added in float64 (int64 for integer sums), rounded to the nearest whole
    number, as int32 (``check_int32``'s error if one does not fit): one compiled pass
    (``_int32_sums``)."""
    n, k = sums.shape[:2]
    flat = np.ascontiguousarray(sums).reshape(n, k, -1)
    wide = np.int64 if np.issubdtype(flat.dtype, np.integer) else np.float64
    shift = np.zeros(k, wide) if bias is None else np.asarray(bias).astype(wide)
    out = np.empty(flat.shape, np.int32)
    low, high = _int32_sums(flat, shift, out)
    if low < np.iinfo(np.int32).min or high > np.iinfo(np.int32).max:
        _overflow(where, low, high)
    return out.reshape(sums.shape)


@njit(cache=True, nogil=True)
def _int32_sums(sums, shift, out):  # pragma: no cover
    """out[n, k, i] = rint(sums[n, k, i] + shift[k]) (the add in shift's dtype), stored as
    int32 where it fits; (least, greatest) of the rounded values as int64, out unusable if
    they pass int32's range."""
    low, high = np.int64(0), np.int64(0)
    first = True
    for n in range(sums.shape[0]):
        for k in range(sums.shape[1]):
            row, dest, b = sums[n, k], out[n, k], shift[k]
            for i in range(row.size):
                v = np.int64(np.rint(row[i] + b))
                if first or v < low:
                    low = v
                if first or v > high:
                    high = v
                first = False
                dest[i] = v
    return low, high


@dataclass(frozen=True)
class Requantized:
    """A conv's int8 output: values, their scale, and the float32 the next op sees."""

    q: np.ndarray
    scale: float

    def dequantize(self) -> np.ndarray:
        return (self.q.astype(np.float32) * np.float32(self.scale))


def requantize(acc: np.ndarray, x_scale: float, w_scales: np.ndarray) -> Requantized:
    """int32 accumulators (N, K, P, Q) to int8 with a per-tensor output scale: real =
    acc * (x_scale * w_scales[k]) in float64, s = max |real| / QMAX, q = clip(rint(real /
    s)), with no array of the real values: max |real| is each channel's largest |acc| times
    its scale (a float64 product rounds monotonically: the largest |acc| gives the largest
    |real|), q one compiled pass (``_requantized``)."""
    scales = np.asarray(x_scale * np.asarray(w_scales, np.float64), np.float64).reshape(-1)
    flat = np.ascontiguousarray(acc).reshape(acc.shape[0], acc.shape[1], -1)
    if not flat.size:
        return Requantized(np.zeros(acc.shape, np.int8), 1.0)
    most = np.maximum(flat.max(axis=2).astype(np.int64), -flat.min(axis=2).astype(np.int64))
    s = float(_scale((most * np.abs(scales)).max()))
    q = _requantized(flat, scales, s, np.empty(flat.shape, np.int8))
    return Requantized(q.reshape(acc.shape), s)


@njit(cache=True, nogil=True)
def _requantized(acc, scales, s, out):  # pragma: no cover
    """out[n, k, i] = clip(rint(acc[n, k, i] * scales[k] / s), -QMAX, QMAX) as int8."""
    for n in range(acc.shape[0]):
        for k in range(acc.shape[1]):
            row, dest, m = acc[n, k], out[n, k], scales[k]
            for i in range(row.size):
                dest[i] = min(max(np.rint(row[i] * m / s), -QMAX), QMAX)
    return out
