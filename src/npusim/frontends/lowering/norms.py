"""Normalisations and reductions over axes: batch norm from running statistics (folded into
the conv before it later), layer norm, group and instance norm, softmax, mean and max."""

from __future__ import annotations

import numpy as np

from ... import ops
from .refusal import Refusal


def batch_norm(gamma, beta, mean, var, eps: float) -> ops.BatchNorm:
    """Inference batch norm from running statistics (no gamma: ones; no beta: zeros)."""
    gamma = np.ones_like(mean) if gamma is None else gamma
    beta = np.zeros_like(mean) if beta is None else beta
    return ops.BatchNorm.from_stats(gamma, beta, mean, var, float(eps))


def layer_norm(shape, weight, bias, eps: float) -> ops.LayerNorm:
    """Layer norm over the trailing axes ``shape``; weight and bias broadcast to it (None:
    ones and zeros)."""
    shape = tuple(shape)
    weight = np.ones(shape, np.float32) if weight is None else weight
    bias = np.zeros(shape, np.float32) if bias is None else bias
    return ops.LayerNorm(np.broadcast_to(weight, shape).astype(np.float32),
                         np.broadcast_to(bias, shape).astype(np.float32), float(eps))


def group_norm(groups: int, channels: int, weight, bias, eps: float) -> ops.GroupNorm:
    """Group norm of ``channels`` in ``groups`` (as many groups as channels: instance norm);
    per-channel weight and bias (None: ones and zeros)."""
    weight = np.ones(channels, np.float32) if weight is None else weight
    bias = np.zeros(channels, np.float32) if bias is None else bias
    return ops.GroupNorm(int(groups), weight, bias, float(eps))


def softmax(axis: int, ndim: int, log: bool = False) -> ops.Op:
    """Softmax (``log``: log-softmax) over one ``axis`` (negative counts from the end), not
    the batch axis."""
    if axis % ndim == 0:
        raise Refusal(f"{'log-' if log else ''}softmax over the batch axis")
    return ops.Softmax(axis % ndim, log)


def reduce(kind: str, axes, keepdims: bool, x_shape) -> ops.Op:
    """A Reduce of ``kind`` (``ops.REDUCE_KINDS``: mean, sum, max, min, L1 or L2 norm) over
    ``axes`` (None: all axes but the batch)."""
    axes = tuple(range(1, len(x_shape))) if axes is None else axes
    return ops.Reduce(kind, ops._axes(axes, len(x_shape), "reduce", "Reduce"), bool(keepdims))
