"""PyTorch functions that are several of the IR's ops, each as PyTorch defines it: the
activations ``softsign``, ``tanhshrink``, ``logsigmoid``, ``softmin`` and ``glu``;
``expm1``, ``log1p``, ``log2``, ``log10`` and ``exp2``; ``frac``, ``lerp``, ``addcmul`` and
``diff``; and the data moves ``roll`` (Swin's shifted windows) and ``rot90``. Torch's
exporters write each as those ops in an ONNX file, which imports already; these are the
same graphs from ``from_torch``. Inner nodes are named ``<node>_<part><k>``."""

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


def frac(c, input):
    """``torch.frac``: x - trunc(x)."""
    x = computed(input)
    return ops.Elementwise("sub"), (x.name, c.build.sequence(f"{c.name}_trunc",
                                                            [ops.Round("trunc")], x.name))


def lerp(c, input, end, weight):
    """``torch.lerp`` by a number w, as PyTorch computes it: start + w (end - start) for
    w < 0.5, else end - (1 - w) (end - start)."""
    start, end, w = computed(input), computed(end), number(weight, "weight")
    delta = c.build.add(f"{c.name}_delta", rules.binary("sub", [end.shape, start.shape]),
                        (end.name, start.name))
    shape = tuple(np.broadcast_shapes(end.shape, start.shape))
    near, scale = (start, w) if w < 0.5 else (end, 1 - w)
    step = c.build.sequence(f"{c.name}_step", [rules.with_constant(
        "mul", shape, np.float32(scale))], delta)
    return rules.binary("add" if w < 0.5 else "sub", [near.shape, shape]), (near.name, step)


def addcmul(c, input, tensor1, tensor2, *, value=1):
    """``torch.addcmul``: input + value * tensor1 * tensor2."""
    x, a, b = computed(input), computed(tensor1), computed(tensor2)
    shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    product = c.build.add(f"{c.name}_product", rules.binary("mul", [a.shape, b.shape]),
                          (a.name, b.name))
    if value != 1:
        product = c.build.sequence(f"{c.name}_scaled", [rules.with_constant(
            "mul", shape, np.float32(number(value, "value")))], product)
    return rules.binary("add", [x.shape, shape]), (x.name, product)


def diff(c, input, n=1, dim=-1, prepend=None, append=None):
    """``torch.diff``: x[1:] - x[:-1] along ``dim``, ``n`` times (two Slices and a subtract
    each)."""
    x = computed(input)
    if prepend is not None or append is not None:
        raise _Refusal("prepend / append: the IR takes the differences of the tensor alone")
    axis, name, size = int(dim) % len(x.shape), x.name, x.shape[int(dim)]
    result = x  # n = 0: the tensor itself
    for k in range(int(n)):
        later = c.build.add(f"{c.name}_later{k}", ops.Slice(axis, 1, None), (name,))
        earlier = c.build.add(f"{c.name}_earlier{k}", ops.Slice(axis, 0, size - 1 - k), (name,))
        result = ops.Elementwise("sub"), (later, earlier)
        if k < int(n) - 1:
            name = c.build.add(f"{c.name}_diff{k}", *result)
    return result
