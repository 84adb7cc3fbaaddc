"""Window geometry shared by convolutions and pooling: (h, w) pairs, 4-sided padding,
'same' padding, and how many input pixels a grid of windows reads.

Every op normalises its stride, padding, dilation and kernel through these once, when it
is built; the rest of npusim reads the normalised tuples.
"""

from __future__ import annotations

import numpy as np

from .errors import LayerError

Pair = tuple[int, int]
Padding = tuple[int, int, int, int]  # (top, bottom, left, right) in pixels


def is_int(value) -> bool:
    """Whether ``value`` is a whole number's type (Python's or numpy's), not a bool or a
    float: ``int(1.5)`` would silently be 1."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _ints(value) -> tuple[int, ...] | None:
    """``value`` as a tuple of ints if it is a sequence of whole numbers' types, else None."""
    try:
        items = tuple(value)
    except TypeError:
        return None
    return tuple(int(v) for v in items) if all(map(is_int, items)) else None


def pair(value, name: str, layer: str) -> Pair:
    """``value`` (an int or a pair of ints) as (h, w); ``LayerError`` naming
    ``layer.name`` otherwise (a float, even in a pair, is refused: it is not cut)."""
    if is_int(value):
        return (int(value), int(value))
    values = _ints(value)
    if values is None or len(values) != 2:
        raise LayerError(f"{layer}.{name}={value!r}: must be an int or a pair of ints")
    return values  # type: ignore[return-value]


def padding4(value, layer: str) -> Padding:
    """Padding as (top, bottom, left, right) in pixels from an int, (h, w) or a 4-tuple."""
    if is_int(value):
        return (int(value),) * 4
    values = _ints(value) or ()
    if len(values) == 2:
        return (values[0], values[0], values[1], values[1])
    if len(values) == 4:
        return values  # type: ignore[return-value]
    raise LayerError(f"{layer}.padding={value!r}: must be an int, (h, w) or "
                     "(top, bottom, left, right)")


def add_padding(a, b, layer: str = "pad") -> Padding:
    """The sum of two paddings (each an int, (h, w) or 4-sided), 4-sided."""
    return tuple(x + y for x, y in zip(padding4(a, layer), padding4(b, layer),
                                       strict=True))  # type: ignore[return-value]


def same_padding(kernel: Pair, dilation: Pair) -> Padding:
    """'same' padding for stride 1: total d*(k-1) per axis, the odd pixel at the end."""
    out = []
    for k, d in zip(kernel, dilation, strict=True):
        total = d * (k - 1)
        out += [total // 2, total - total // 2]
    return tuple(out)  # type: ignore[return-value]


def same_auto_padding(size: Pair, kernel: Pair, stride: Pair, dilation: Pair,
                      upper: bool) -> Padding:
    """ONNX's SAME_UPPER / SAME_LOWER padding: the output is ceil(size / stride) per
    axis; the odd pixel at the end (``upper``) or at the start."""
    out = []
    for n, k, s, d in zip(size, kernel, stride, dilation, strict=True):
        total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        out += [small, big] if upper else [big, small]
    return tuple(out)  # type: ignore[return-value]


def used_pixels(out: int, kernel: int, stride: int, dilation: int = 1) -> int:
    """Input pixels (padding included) spanned along one axis by ``out`` windows of
    ``kernel`` taps at ``stride`` and ``dilation``: (out - 1) * stride + (kernel - 1) *
    dilation + 1."""
    return (out - 1) * stride + (kernel - 1) * dilation + 1
