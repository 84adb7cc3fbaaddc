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

QMAX = 127


def _scale(max_abs) -> np.ndarray:
    max_abs = np.asarray(max_abs, np.float64)
    return np.where(max_abs > 0, max_abs / QMAX, 1.0)


def quantize_activations(x: np.ndarray) -> tuple[np.ndarray, float]:
    """(int8 tensor, scale) with one scale for the whole tensor."""
    s = float(_scale(np.abs(x).max() if x.size else 0.0))
    return np.clip(np.rint(x / s), -QMAX, QMAX).astype(np.int8), s


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
        raise NpusimError(f"{where}: int32 accumulator overflow (range {acc.min()}..{acc.max()})")
    return acc.astype(np.int32)


@dataclass(frozen=True)
class Requantized:
    """A conv's int8 output: values, their scale, and the float32 the next op sees."""

    q: np.ndarray
    scale: float

    def dequantize(self) -> np.ndarray:
        return (self.q.astype(np.float32) * np.float32(self.scale))


def requantize(acc: np.ndarray, x_scale: float, w_scales: np.ndarray) -> Requantized:
    """int32 accumulators (N, K, P, Q) to int8 with a per-tensor output scale."""
    real = acc.astype(np.float64) * (x_scale * w_scales).reshape(1, -1, 1, 1)
    s = float(_scale(np.abs(real).max() if real.size else 0.0))
    return Requantized(np.clip(np.rint(real / s), -QMAX, QMAX).astype(np.int8), s)
