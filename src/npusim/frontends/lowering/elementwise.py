"""Elementwise rules: clamps as ReLU/ReLU6/Clip, constants as per-channel affines (foldable
into the conv before them) or broadcasting ``Elementwise`` ops, two computed operands, and the
logical ops of masks (a comparison's bool result, 1.0 and 0.0 in the IR) as arithmetic."""

from __future__ import annotations

import numpy as np

from ... import ops
from .refusal import Refusal


def clip(lo: float | None, hi: float | None) -> ops.Op:
    """A clamp to [lo, hi] (None: unbounded): ReLU for [0, inf), ReLU6 for [0, 6], else Clip."""
    if lo == 0 and hi is None:
        return ops.Relu()
    if lo == 0 and hi == 6:
        return ops.Relu6()
    return ops.Clip(lo, hi)


def per_channel(value, x_shape, what: str) -> np.ndarray | None:
    """A constant that broadcasts over ``x_shape`` as one value per channel (axis 1), flat
    (C,) float32; None if it is not of that form (so it needs a general Elementwise)."""
    value = np.asarray(value, np.float32)
    channels = x_shape[1] if len(x_shape) > 1 else 1
    dims = (1,) * (len(x_shape) - value.ndim) + value.shape
    if len(x_shape) < 2 or len(dims) != len(x_shape) \
            or any(d != 1 for i, d in enumerate(dims) if i != 1) or dims[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)


def channel_values(value, x_shape, what: str) -> np.ndarray:
    """``per_channel``, refusing (naming ``what``) a constant not of that form."""
    flat = per_channel(value, x_shape, what)
    if flat is None:
        raise Refusal(f"{what} of shape {np.shape(value)} on an input of shape "
                      f"{tuple(x_shape)}: only a scalar or one value per channel is supported")
    return flat


# SELU's constants (Klambauer et al., as PyTorch defines them; ONNX's defaults are their
# float32 roundings)
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(x_shape, alpha: float = SELU_ALPHA, scale: float = SELU_SCALE) -> list[ops.Op]:
    """SELU: an ELU of ``alpha``, then ``scale`` (a multiply: a per-channel affine)."""
    return [ops.Elu(float(alpha)), with_constant("mul", x_shape, np.float32(scale))]


def celu(alpha: float) -> ops.Elu:
    """CELU: ``x`` where x > 0, else ``alpha (exp(x / alpha) - 1)``, an ELU of input scale
    1 / alpha (as PyTorch computes it)."""
    if float(alpha) == 0.0:
        raise Refusal("alpha=0: CELU divides by alpha")
    return ops.Elu(float(alpha), 1.0 / float(alpha))


def rounding(mode: str, decimals: int = 0, x_shape=None) -> list[ops.Op]:
    """``floor`` / ``ceil`` / ``round`` / ``trunc`` (``Round`` of that mode); ``round`` to
    ``decimals`` places as PyTorch does it: times 10**decimals, rounded, divided by it
    (float32, and the other way round for negative ``decimals``)."""
    op = ops.Round(mode)
    if decimals == 0:
        return [op]
    if mode != "nearest":
        raise Refusal(f"decimals={decimals} with {mode}: only round takes decimals")
    ten = np.float32(10.0 ** abs(decimals))
    scale, unscale = ("mul", "div") if decimals > 0 else ("div", "mul")
    return [with_constant(scale, x_shape, ten), op, with_constant(unscale, x_shape, ten)]


def with_constant(kind: str, x_shape, const, const_first: bool = False) -> ops.Op:
    """``x <kind> const`` (``const <kind> x`` when ``const_first``): a per-channel affine
    (``BatchNorm``, foldable into the conv before it) for x + c, x - c, x * c, c * x, c + x and
    x / c with a scalar or per-channel c; else an ``Elementwise`` holding the constant."""
    c = np.asarray(const, np.float32)
    flat = per_channel(c, x_shape, "constant")
    ones = None if flat is None else np.ones_like(flat)
    if flat is not None and (kind in ("add", "mul") or kind in ("sub", "div") and not const_first):
        if kind == "add":
            return ops.BatchNorm(ones, flat)
        if kind == "sub":
            return ops.BatchNorm(ones, -flat)
        scale = flat if kind == "mul" else (1 / flat.astype(np.float64)).astype(np.float32)
        return ops.BatchNorm(scale, np.zeros_like(flat))
    return ops.Elementwise(kind, c, const_first)


# the ``Elementwise`` kind of a logical op of two masks: and, or, xor of 1.0 / 0.0 values
LOGICAL = {"and": "mul", "or": "max", "xor": "not_equal"}


def logical_not(x_shape) -> ops.Op:
    """``not`` of a mask: 1 - it."""
    return with_constant("sub", x_shape, np.float32(1), const_first=True)


def nonzero(x_shape) -> ops.Op:
    """``x != 0`` as a mask (a cast to bool; a mask stays itself)."""
    return with_constant("not_equal", x_shape, np.float32(0))


def binary(kind: str, shapes) -> ops.Op:
    """Two computed tensors: ``Add`` for a same-shape sum, else a broadcasting Elementwise."""
    if kind == "add" and shapes[0] == shapes[1]:
        return ops.Add()
    return ops.Elementwise(kind)
