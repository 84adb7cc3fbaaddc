"""Resampling: the IR's ``Upsample`` by integer factors or to a size, and the check that it
samples as the source does, compared as 1-D sampling weights (n_out x n_in per axis). The
source's weights follow the ONNX operator spec's coordinate transformations and nearest
roundings, which include PyTorch's modes (asymmetric floor; half-pixel; align_corners)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ... import ops
from .refusal import Refusal


def upsample_to(hw, pq, mode: str, align_corners: bool) -> ops.Upsample:
    """Resampling H x W (``hw``) to ``pq``: by integer factors where they divide, else to
    the size itself ('nearest', 'bilinear' or 'bicubic')."""
    if all(o % i == 0 for i, o in zip(hw, pq, strict=True)):
        return ops.Upsample((pq[0] // hw[0], pq[1] // hw[1]), mode, bool(align_corners))
    return ops.Upsample(1, mode, bool(align_corners), tuple(pq))


def ir_weights(op: ops.Upsample, n_in: int, n_out: int, scale: float) -> np.ndarray:
    """The IR's sampling weights along one axis (``scale``: the op's on it, when it resamples
    by scale), n_out x n_in (its own arithmetic on a one-hot)."""
    eye = np.eye(n_in, dtype=np.float32).reshape(1, n_in, n_in, 1)
    axis = (dataclasses.replace(op, size=(n_out, 1)) if op.size is not None or scale is None
            else dataclasses.replace(op, scale=(scale, 1.0)))
    return axis(eye)[0, :, :, 0].T


def exact_upsample(hw, pq, mode: str, want, scales=None) -> ops.Upsample | None:
    """The first IR Upsample from ``hw`` to ``pq`` ('nearest'; 'bilinear' or 'bicubic'
    half-pixel, then align_corners) whose sampling weights are ``want`` (one n_out x n_in
    matrix per axis), or None if none is: by integer factors or to the size
    (``upsample_to``), else by the source's own ``scales`` (per axis; a scale such as 1.5
    samples at 1/1.5 input pixels a step, where the size 16 of 11 samples at 11/16)."""
    by_scale = scales is not None and all(
        s > 0 and int(np.floor(n * s)) == m for n, m, s in zip(hw, pq, scales, strict=True))
    for align in (False,) if mode == "nearest" else (False, True):
        candidates = [(upsample_to(hw, pq, mode, align), (None, None))]
        if by_scale:
            candidates.append((ops.Upsample(tuple(float(s) for s in scales), mode, align),
                               tuple(scales)))
        for op, axis_scales in candidates:
            if all(np.allclose(ir_weights(op, n, m, s), w, rtol=0, atol=1e-6)
                   for n, m, s, w in zip(hw, pq, axis_scales, want, strict=True)):
                return op
    return None


TRANSFORMS = {
    "half_pixel": lambda d, s, n, m: (d + 0.5) / s - 0.5,
    "pytorch_half_pixel": lambda d, s, n, m: (d + 0.5) / s - 0.5 if m > 1 else 0 * d,
    "align_corners": lambda d, s, n, m: d * (n - 1) / (m - 1) if m > 1 else 0 * d,
    "asymmetric": lambda d, s, n, m: d / s,
    "tf_half_pixel_for_nn": lambda d, s, n, m: (d + 0.5) / s,
    "half_pixel_symmetric": lambda d, s, n, m: n / 2 * (1 - m / (s * n)) + (d + 0.5) / s - 0.5,
}

ROUNDINGS = {
    "round_prefer_floor": lambda x, s: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x, s: np.floor(x + 0.5),
    "floor": lambda x, s: np.floor(x),
    "ceil": lambda x, s: np.ceil(x),
    "simple": lambda x, s: np.ceil(x) if s < 1 else np.floor(x),  # Upsample, Resize-10
}


def sampling_weights(n_in: int, n_out: int, scale: float, mode: str, transform: str,
                     rounding: str, cubic_a: float = ops.CUBIC_A) -> np.ndarray:
    """Sampling weights along one axis (n_out x n_in) of ``mode`` 'nearest', 'linear' or
    'cubic' with a coordinate ``transform`` and nearest ``rounding`` of ``TRANSFORMS``,
    ``ROUNDINGS``; 'cubic' is the cubic convolution of ``cubic_a`` over the 4 pixels around
    each source position, a pixel beyond the axis read as its edge (ONNX Resize's
    ``exclude_outside`` 0)."""
    if transform not in TRANSFORMS or rounding not in ROUNDINGS:
        raise Refusal(f"coordinate_transformation_mode={transform!r}, nearest_mode={rounding!r}:"
                      f" supported are {', '.join(TRANSFORMS)} and {', '.join(ROUNDINGS)}")
    src = TRANSFORMS[transform](np.arange(n_out, dtype=np.float64), scale, n_in, n_out)
    rows, weights = np.arange(n_out), np.zeros((n_out, n_in))
    if mode == "nearest":
        weights[rows, np.clip(ROUNDINGS[rounding](src, scale), 0, n_in - 1).astype(int)] = 1
        return weights
    if mode == "cubic":
        left = np.floor(src)
        for k in range(-1, 3):
            np.add.at(weights, (rows, np.clip(left + k, 0, n_in - 1).astype(int)),
                      ops.cubic_kernel(src - (left + k), cubic_a))
        return weights
    src = np.clip(src, 0, n_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    np.add.at(weights, (rows, lo), 1 - (src - lo))
    np.add.at(weights, (rows, hi), src - lo)
    return weights
