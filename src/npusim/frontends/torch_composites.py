"""PyTorch functions that are several of the IR's ops, each as PyTorch defines it: the
activations ``softsign``, ``tanhshrink``, ``logsigmoid``, ``softmin`` and ``glu``; ``expm1``,
``log1p``, ``log2``, ``log10`` and ``exp2``; and the data moves ``roll`` (Swin's shifted
windows) and ``rot90``. Torch's exporters write each as those ops in an ONNX file, which
imports already; these are the same graphs from ``from_torch``. Inner nodes are named
``<node>_<part><k>``."""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from . import lowering as rules
from .lowering import Refusal as _Refusal
from .torch_ops import computed, number


def _const(kind: str, x, value: float) -> ops.Op:
    return rules.with_constant(kind, x.shape, np.float32(value))


def softsign(c, input):
    """``F.softsign``: x / (1 + |x|)."""
    x = computed(input)
    denominator = c.build.sequence(f"{c.name}_den", [ops.Abs(), _const("add", x, 1)], x.name)
    return ops.Elementwise("div"), (x.name, denominator)


def tanhshrink(c, input):
    """``F.tanhshrink``: x - tanh(x)."""
    x = computed(input)
    return ops.Elementwise("sub"), (x.name, c.build.sequence(f"{c.name}_tanh", [ops.Tanh()],
                                                            x.name))


def logsigmoid(c, input):
    """``F.logsigmoid``: -softplus(-x), finite where log(sigmoid(x)) underflows."""
    x = computed(input)
    return c.build.steps(c.name, [_const("mul", x, -1), ops.Softplus(), _const("mul", x, -1)],
                         x.name)


def softmin(c, input, dim=None, _stacklevel=3, dtype=None):
    """``F.softmin`` / ``nn.Softmin``: the softmax of -x over ``dim``."""
    x = computed(input)
    if dim is None or dtype is not None:
        raise _Refusal(f"dim={dim}, dtype={dtype}: give dim explicitly and no dtype")
    return c.build.steps(c.name, [_const("mul", x, -1), rules.softmax(dim, len(x.shape))],
                         x.name)


def glu(c, input, dim=-1):
    """``F.glu`` / ``nn.GLU``: the first half of ``dim`` times the sigmoid of the second."""
    x = computed(input)
    size = x.shape[dim]  # even: torch's own forward refuses an odd one
    first, second = rules.split(dim, [size // 2, size // 2], x.shape)
    gate = c.build.sequence(f"{c.name}_gate", [second, ops.Sigmoid()], x.name)
    return ops.Elementwise("mul"), (c.build.add(f"{c.name}_half0", first, (x.name,)), gate)


def exp_log(which: str):
    """The converter of ``torch.expm1`` (exp, then - 1), ``log1p`` (+ 1, then log),
    ``log2`` / ``log10`` (log, then over log 2 / log 10), ``exp2`` (times log 2, then exp)."""
    def convert(c, input):
        x = computed(input)
        steps = {"expm1": lambda: [ops.Exp(), _const("add", x, -1)],
                 "log1p": lambda: [_const("add", x, 1), ops.Log()],
                 "log2": lambda: [ops.Log(), _const("mul", x, 1 / math.log(2))],
                 "log10": lambda: [ops.Log(), _const("mul", x, 1 / math.log(10))],
                 "exp2": lambda: [_const("mul", x, math.log(2)), ops.Exp()]}[which]()
        return c.build.steps(c.name, steps, x.name)
    return convert


def roll(c, input, shifts, dims=None):
    """``torch.roll`` along given ``dims``: each a Concat of the axis's last ``shift``
    entries and the rest (two Slices); a pass-through when nothing moves."""
    x = computed(input)
    if dims is None:
        raise _Refusal("rolls the flattened tensor: give dims")
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    name, result = x.name, x
    moves = [(int(number(s, "shifts")), int(d) % len(x.shape)) for s, d in zip(shifts, dims,
                                                                                strict=True)]
    moves = [(s % x.shape[d], d) for s, d in moves if s % x.shape[d]]
    for k, (shift, axis) in enumerate(moves):
        cut = x.shape[axis] - shift
        tail = c.build.add(f"{c.name}_tail{k}", ops.Slice(axis, cut, None), (name,))
        head = c.build.add(f"{c.name}_head{k}", ops.Slice(axis, 0, cut), (name,))
        result = rules.concat(axis, len(x.shape)), (tail, head)
        if k < len(moves) - 1:
            name = c.build.add(f"{c.name}_roll{k}", *result)
    return result


def rot90(c, input, k=1, dims=(0, 1)):
    """``torch.rot90`` as PyTorch computes it: k = 1, a flip of ``dims[1]`` then the two
    axes swapped; 2, a flip of both; 3, a flip of ``dims[0]`` then swapped."""
    x = computed(input)
    ndim = len(x.shape)
    a, b = (int(d) % ndim for d in dims)
    turns = int(number(k, "k")) % 4
    if turns == 0:
        return x
    if turns != 2 and 0 in (a, b):
        raise _Refusal(f"rotates in axes {a} and {b}: it would move the batch axis, which "
                       "stays first")
    flipped = {1: [b], 2: [a, b], 3: [a]}[turns]
    parts = [slice(None, None, -1) if i in flipped else slice(None) for i in range(ndim)]
    steps = rules.index(x.shape, parts, x.shape)
    if turns != 2:
        steps.append(rules.swap_axes(a, b, ndim))
    return c.build.steps(c.name, steps, x.name)
