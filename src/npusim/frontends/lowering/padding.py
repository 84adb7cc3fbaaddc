"""Padding: a constant pad held until the conv or pool reading it absorbs it into its own
padding; reflect, replicate and circular pads as their own op; negative pads as the crops
they are; the readers that absorb one."""

from __future__ import annotations

from dataclasses import dataclass

from ... import ops
from ...geometry import Padding, add_padding
from .refusal import Refusal
from .shape import index


@dataclass(frozen=True)
class Pending:
    """A constant pad not applied yet (``F.pad``, ONNX ``Pad``): (top, bottom, left, right)
    pixels and the fill value. Only a conv (fill 0), max pooling (-inf) or average
    pooling (0, counted) reading the padded tensor absorbs it into its own padding."""

    pads: Padding = (0, 0, 0, 0)
    fill: float = 0.0

    def __bool__(self) -> bool:
        return any(self.pads)

    def then(self, pads, fill: float) -> Pending:
        """This padding followed by another constant one of ``fill``."""
        if self and self.fill != fill:
            raise Refusal(f"pads with {fill} what is already padded with {self.fill}")
        return Pending(add_padding(self.pads, pads), fill)

    def op(self) -> ops.Pad:
        """This pad as a ``Pad`` op of its own, where no reader absorbs it."""
        return ops.Pad(tuple(self.pads), "constant", self.fill)

    def absorb(self, padding, fill: float) -> Padding:
        """A reader's own ``padding`` plus this one, which must be padded with ``fill``."""
        if self and self.fill != fill:
            raise Refusal(f"its input is padded with {self.fill}; only {fill} can be absorbed "
                          "here")
        return add_padding(padding, self.pads)


NO_PAD = Pending()


def not_absorbed(source: str) -> Refusal:
    """The refusal of a reader that cannot absorb the pending pad ``source`` ('F.pad', 'Pad')."""
    return Refusal(f"its input comes from {source}; the IR takes explicit padding only into "
                   "a conv (zeros), max pooling (-inf) or average pooling (zeros, counted)")


def crop(pads: Padding, x_shape, pending: Pending) -> list[ops.Op]:
    """A pad of (top, bottom, left, right) pixels none of which is positive: the map cropped
    by that many (``F.pad`` and ONNX ``Pad`` with negative pads; a U-Net's skip cropped to
    the upsampled map), as Slices (``shape.index``)."""
    if pending:
        raise not_absorbed("a pad")
    t, b, left, r = (-int(p) for p in pads)
    h, w = x_shape[-2:]
    parts = [slice(None)] * (len(x_shape) - 2) + [slice(t, h - b), slice(left, w - r)]
    return index(x_shape, parts, (*x_shape[:-2], h - t - b, w - left - r))


def pad(pads: Padding, mode: str, fill: float, pending: Pending) -> Pending | ops.Pad:
    """A pad of (top, bottom, left, right) pixels: constant, held (``Pending``) for the
    reader to absorb; reflect, replicate or circular, its own ``Pad`` op."""
    if mode == "constant":
        return pending.then(pads, fill)
    if pending:
        raise Refusal(f"{mode} padding of a constant-padded tensor")
    return ops.Pad(tuple(pads), mode)


def transposed_padding(begin, end, output_padding) -> tuple[tuple, tuple]:
    """A transposed conv's (h, w) ``begin`` and ``end`` pads as the symmetric padding and
    the output padding the IR takes: end pads below the begin pads crop less at the end,
    which is output padding; end pads above them are refused."""
    (t, left), (b, r), (oh, ow) = begin, end, output_padding
    if (t, left) != (b, r):
        if b > t or r > left:
            raise Refusal(f"pads {[t, left, b, r]}: end pads above begin pads")
        oh, ow = oh + t - b, ow + left - r
    return (t, left), (oh, ow)


def conv(weight, bias, stride, padding, dilation, groups, pending: Pending = NO_PAD) -> ops.Conv:
    """A convolution, absorbing a pending zero pad of its input."""
    return ops.Conv(weight, bias, stride, pending.absorb(padding, 0.0), dilation, int(groups))


def max_pool(kernel, stride, padding, ceil_mode: bool, pending: Pending = NO_PAD,
             dilation=1) -> ops.Pool:
    """Max pooling (taps ``dilation`` apart), absorbing a pending -inf pad of its input."""
    return ops.MaxPool(kernel, stride, pending.absorb(padding, float("-inf")), bool(ceil_mode),
                       dilation)


def avg_pool(kernel, stride, padding, ceil_mode: bool, count_include_pad: bool,
             pending: Pending = NO_PAD) -> ops.Pool:
    """Average pooling, absorbing a pending zero pad (counted: only where the padded
    zeros count the same as the pool's own padding)."""
    if pending and (ceil_mode or not count_include_pad):
        raise Refusal("averages a constant pad's output with ceil_mode or without "
                      "count_include_pad: the padded zeros would be counted differently")
    return ops.AvgPool(kernel, stride, pending.absorb(padding, 0.0), bool(ceil_mode),
                       bool(count_include_pad))
