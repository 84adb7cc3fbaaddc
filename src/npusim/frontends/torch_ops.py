"""PyTorch calls -> lowering rules: the values converters pass (``Ref``, ``Parts``, ``Call``),
their argument helpers, and one converter per kind of computing call (conv, linear, norms,
activations, pooling, arithmetic), with the call's own parameters; the shape and layout
calls are ``torch_shape_ops``', the tables naming which modules, functions and tensor methods
each converter handles ``torch_table``'s.

Each converter takes the same arguments as the torch call it handles; an argument
computed from the network input arrives as a ``Ref`` (IR node name and shape), a
constant (a parameter, a python number) as its value. It returns an ``ops.Op``
whose inputs are the ``Ref`` arguments in order, an ``(op, inputs)`` pair (after adding
helper nodes through ``c.build``: a linear layer on a channels-last map, a transposed
conv), a ``Ref`` (a pass-through such as dropout at inference) or ``Parts`` (chunk and
split, whose parts indexing takes). The framework-neutral rules (clip to ReLU, constants as
per-channel affines, reshape, concat...) are ``lowering``'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .. import ops
from ..geometry import pair, same_padding
from . import lowering as rules
from .lowering import Lowering
from .lowering import Refusal as _Refusal
from .lowering.batch_view import Held


@dataclass(frozen=True)
class Ref:
    """A tensor computed from the network input: the IR node holding it and its shape.

    After ``F.pad`` it also carries the pending constant padding (``lowering.Pending``),
    which only a conv or pooling reading it can absorb. After a permute or reshape that moves
    the batch axis (attention's q, k, v cut as ``qkv.permute(2, 0, 3, 1, 4)``, Swin's
    windows), ``held`` is the tensor as a view of an IR tensor that keeps the batch first
    (``lowering.batch_view``, ``torch_held``), ``name`` that IR node and ``shape`` torch's.
    """

    name: str
    shape: tuple[int, ...]
    pad: rules.Pending = rules.NO_PAD
    held: Held | None = None
    parts: tuple = ()  # the shapes of a tuple of tensors (chunk, split), else ()
    dtype: str = "float32"  # torch's element type of the traced tensor ("bool" after x > 0)


@dataclass(frozen=True)
class Parts:
    """A call's several results, read by getitem, each made from ``source``: of chunk /
    split, one Slice op per part; of unbind, a Slice and a Reshape per entry (a tuple of
    ops), or, of a held tensor, the cut taking it (``torch_held.Entry``); of a max along an
    axis, the op of its values; of attention, its output, computed already (a ``Ref``). A
    part the IR does not compute is None, and ``missing`` says what it is."""

    source: Ref
    slices: tuple
    missing: str = "the indices of a max or min along an axis: the IR computes its values only"


@dataclass(frozen=True)
class Call:
    """What a converter knows of the node it converts besides its arguments."""

    name: str
    out_shape: tuple[int, ...]
    build: Lowering | None = None
    parts: tuple = ()


# ---- argument helpers -------------------------------------------------------------------


def computed(x, rank: int | None = None) -> Ref:
    """``x`` as a tensor computed from the network input, optionally of a given rank."""
    if not isinstance(x, Ref):
        raise _Refusal("its input is a constant, not a tensor computed from the network input")
    if x.pad:
        raise rules.not_absorbed("F.pad")
    if x.held:
        raise _Refusal(f"its input ({x.held.view.where}) holds the batch elsewhere than "
                       "first; the IR reads it once a reshape or permute puts it first again")
    rules.expect_rank(x.shape, rank)
    return x


def pending_pad(x) -> rules.Pending:
    """The F.pad padding a 4-D input still owes (for the reader to absorb)."""
    pending = x.pad if isinstance(x, Ref) else rules.NO_PAD
    computed(dataclasses.replace(x, pad=rules.NO_PAD) if pending else x, 4)
    return pending


def constant(value, what: str) -> np.ndarray:
    """A constant tensor (parameter, buffer) as a float32 numpy copy."""
    if isinstance(value, Ref):
        raise _Refusal(f"{what} is computed from the network input; the IR needs a constant")
    return np.array(torch.as_tensor(value).detach().cpu().to(torch.float32).numpy())


def optional_constant(value, what: str) -> np.ndarray | None:
    """An optional constant tensor (a weight or bias that may be None)."""
    return None if value is None else constant(value, what)


def number(value, what: str):
    if isinstance(value, Ref) or isinstance(value, torch.Tensor) and value.numel() != 1:
        raise _Refusal(f"{what} must be a number")
    return None if value is None else float(value)


# ---- converters: one per kind of call, with the torch call's own parameters --------------


def conv2d(c, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    pending = pending_pad(input)
    w = constant(weight, "weight")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise _Refusal(f"padding={padding!r}: must be 'same', 'valid' or integers")
        padding = same_padding(w.shape[2:], pair(dilation, "dilation", c.name)) \
            if padding == "same" else 0
    b = optional_constant(bias, "bias")
    return rules.conv(w, b, pair(stride, "stride", c.name), padding,
                      pair(dilation, "dilation", c.name), groups, pending)


def conv_module(c, m, x, weight=None, bias=None):
    """``nn.Conv2d`` (any padding mode); ``weight`` and ``bias``: what the module convolves
    with when not its own parameters (a QAT conv's fake-quantised, batch-norm-folded ones)."""
    weight = m.weight if weight is None else weight
    bias = m.bias if bias is None else bias
    if m.padding_mode == "zeros":
        return conv2d(c, x, weight, bias, m.stride, m.padding, m.dilation, m.groups)
    if isinstance(m.padding, str):
        raise _Refusal(f"padding_mode={m.padding_mode!r} with padding={m.padding!r}: give the "
                       "padding as integers")
    (ph, pw), x = pair(m.padding, "padding", c.name), computed(x, 4)
    edge_pad = rules.pad((ph, ph, pw, pw), m.padding_mode, 0.0, rules.NO_PAD)
    padded = c.build.add(f"{c.name}pad", edge_pad, (x.name,))
    return conv2d(c, x, weight, bias, m.stride, 0, m.dilation, m.groups), (padded,)


def conv_transpose2d(c, input, weight, bias=None, stride=1, padding=0, output_padding=0,
                      groups=1, dilation=1):
    x = computed(input, 4)
    if pair(dilation, "dilation", c.name) != (1, 1):
        raise _Refusal(f"dilation={dilation}: the IR's transposed convolution has dilation 1")
    b = optional_constant(bias, "bias")
    return c.build.conv_transpose(c.name, x.name, constant(weight, "weight"), b,
                                  pair(stride, "stride", c.name),
                                  pair(padding, "padding", c.name),
                                  pair(output_padding, "output_padding", c.name), int(groups))


def conv_transpose_module(c, m, x, output_size=None):
    if m.padding_mode != "zeros" or output_size is not None:
        raise _Refusal(f"padding_mode={m.padding_mode!r}, output_size={output_size}: only "
                       "zeros padding and the output size of the layer's own parameters")
    return conv_transpose2d(c, x, m.weight, m.bias, m.stride, m.padding, m.output_padding,
                             m.groups, m.dilation)


def linear(c, input, weight, bias=None):
    x = computed(input)
    b = optional_constant(bias, "bias")
    return c.build.linear(c.name, x.name, x.shape, constant(weight, "weight"), b)


def matmul(c, input, other):
    """``x @ y``, ``torch.matmul``, ``torch.bmm`` (and the methods): of two computed tensors
    (attention's products) the IR's ``MatMul``; by a constant matrix a linear layer over
    ``x``'s last axis."""
    x = computed(input)
    if isinstance(other, Ref):
        computed(other)
        return ops.MatMul()
    w = constant(other, "other")
    if w.ndim != 2:
        raise _Refusal(f"multiplies by a constant of shape {w.shape}: the IR multiplies by a "
                       "constant matrix (2-D) or by a computed tensor")
    return c.build.linear(c.name, x.name, x.shape, w.T, None)


def grid_sample(c, input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """``F.grid_sample``: ``GridSample`` of the map at the grid's points, the grid computed
    (a flow field, a spatial transformer's affine grid) or a constant."""
    computed(input, 4)
    if mode not in ops.GRID_ELEMENT_OPS:
        raise _Refusal(f"mode={mode!r}: the IR samples {' or '.join(ops.GRID_ELEMENT_OPS)}")
    if padding_mode not in ops.GRID_PADDING_OPS:
        raise _Refusal(f"padding_mode={padding_mode!r}: one of "
                       f"{', '.join(ops.GRID_PADDING_OPS)}")
    if isinstance(grid, Ref):
        computed(grid)
        return ops.GridSample(mode, padding_mode, bool(align_corners))
    return ops.GridSample(mode, padding_mode, bool(align_corners), constant(grid, "grid"))


def affine_grid(c, theta, size, align_corners=None):
    """``F.affine_grid`` of a computed theta (N x 2 x 3, a spatial transformer's) for an
    N x C x H x W ``size``: each output pixel's point, theta times the pixel's (x, y, 1) on
    PyTorch's own base grid (``F.affine_grid`` of the identity, a constant here): a
    Reshape, a multiply by the base and a sum over its last axis (N x H x W x 2)."""
    t = computed(theta)
    if len(size) != 4 or tuple(t.shape[1:]) != (2, 3):
        raise _Refusal(f"theta of shape {t.shape}, size {tuple(size)}: the IR makes 2-D "
                       "grids, theta N x 2 x 3 for an N x C x H x W size")
    h, w = int(size[2]), int(size[3])
    xy = F.affine_grid(torch.eye(2, 3)[None], [1, 1, h, w], align_corners=bool(align_corners))
    base = np.concatenate([xy[0].numpy(), np.ones((h, w, 1), np.float32)], axis=-1)[:, :, None]
    steps = [ops.Reshape((1, 1, 2, 3)),
             rules.with_constant("mul", (t.shape[0], 1, 1, 2, 3), base),
             ops.Reduce("sum", (4,), keepdims=False)]
    return c.build.steps(c.name, steps, t.name)


def scaled_dot_product_attention(c, query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` of computed queries, keys and values (N x ... x L
    x d, the same leading axes): ``Lowering.attend`` of the keys transposed, at ``scale``
    (default 1 / sqrt(d)), under a constant ``attn_mask`` or the causal one."""
    q, k, v = (computed(t) for t in (query, key, value))
    if dropout_p or enable_gqa:
        raise _Refusal(f"dropout_p={dropout_p}, enable_gqa={enable_gqa}: the IR attends "
                       "without dropout, each query head to its own key head")
    if len(q.shape) < 3 or q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise _Refusal(f"query {q.shape}, key {k.shape}, value {v.shape}: the IR attends "
                       "over ... x L x d, ... x S x d and ... x S x e of the same leading axes")
    if isinstance(attn_mask, Ref):
        raise _Refusal("attn_mask is computed from the network input; the IR needs a constant")
    scores_shape = (*q.shape[:-1], k.shape[-2])
    mask = None if attn_mask is None else torch.as_tensor(attn_mask).detach().cpu().numpy()
    if is_causal:
        mask = np.tril(np.ones(scores_shape[-2:], bool))
    axes = list(range(len(k.shape)))
    kt = c.build.add(f"{c.name}_keys", ops.Transpose((*axes[:-2], axes[-1], axes[-2])),
                     (k.name,))
    return c.build.attend(c.name, q.name, kt, v.name, scores_shape,
                          1 / np.sqrt(q.shape[-1]) if scale is None else float(scale), mask)


def einsum(c, equation, *operands):
    """``torch.einsum`` (operands given one by one or as one list): ``Lowering.einsum`` of
    the computed ones (a constant one given by value)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    refs = [computed(x) for x in operands if isinstance(x, Ref)]
    weights = [None if isinstance(x, Ref) else constant(x, f"operand {i}")
               for i, x in enumerate(operands)]
    shapes = [x.shape if isinstance(x, Ref) else w.shape
              for x, w in zip(operands, weights, strict=True)]
    result = c.build.einsum(c.name, str(equation), [r.name for r in refs], shapes, weights)
    return refs[0] if isinstance(result, str) else result


def batch_norm(c, input, running_mean, running_var, weight=None, bias=None, training=False,
                momentum=0.1, eps=1e-5):
    computed(input)
    if training or running_mean is None or running_var is None:
        raise _Refusal("normalises by batch statistics (training mode or no running stats); "
                       "the IR folds running statistics only")
    return rules.batch_norm(optional_constant(weight, "weight"), optional_constant(bias, "bias"),
                            constant(running_mean, "running_mean"),
                            constant(running_var, "running_var"), eps)


def relu(c, input, inplace=False):
    computed(input)
    return ops.Relu()


def relu6(c, input, inplace=False):
    computed(input)
    return ops.Relu6()


def clamp(c, input, min=None, max=None):
    """``torch.clamp`` / ``clip``: to numbers, ``rules.clip`` (ReLU, ReLU6 or Clip); to
    tensors (computed or constant, broadcasting), ``torch.maximum`` by ``min`` then
    ``torch.minimum`` by ``max``, as torch clamps."""
    x = computed(input)
    if not any(isinstance(b, Ref) or isinstance(b, torch.Tensor) and b.numel() != 1
               for b in (min, max)):
        return rules.clip(number(min, "min"), number(max, "max"))
    if min is None:
        return arith("min")(c, x, max)
    if max is None:
        return arith("max")(c, x, min)
    lower = c.build.add(f"{c.name}_min", *arith("max")(c, x, min))
    shape = np.broadcast_shapes(x.shape, min.shape if isinstance(min, Ref) else np.shape(min))
    return arith("min")(c, Ref(lower, shape), max)


def clamp_min(c, input, min):
    return clamp(c, input, min=min)


def clamp_max(c, input, max):
    return clamp(c, input, max=max)


def negate(c, input):
    """``-x``, ``torch.neg``: a multiply by -1 (a per-channel affine)."""
    return rules.with_constant("mul", computed(input).shape, np.float32(-1))


def where(c, condition, input=None, other=None, *, out=None):
    """``torch.where(condition, input, other)``: the mask (a comparison's bool result, which
    the IR carries as 1.0 and 0.0) selects; a number or constant tensor operand is held in
    the op. ``torch.where(condition)`` alone gives indices: refused."""
    if input is None or other is None:
        raise _Refusal("torch.where(condition) alone gives the mask's indices; the IR selects "
                       "between two values: torch.where(condition, input, other)")
    given = (condition, input, other)
    for value in given:
        if isinstance(value, Ref):
            computed(value)
    op = ops.Where(*(None if isinstance(v, Ref) else constant(v, "a constant operand")
                     for v in given))
    return op, tuple(v.name for v in given if isinstance(v, Ref))


def threshold(c, input, threshold, value, inplace=False):
    """``nn.Threshold``, ``F.threshold``: x where x > threshold, else ``value`` (a comparison,
    then a ``Where``)."""
    x = computed(input)
    above = c.build.add(f"{c.name}_above", rules.with_constant(
        "greater", x.shape, np.float32(number(threshold, "threshold"))), (x.name,), x.shape)
    return ops.Where(b=np.float32(number(value, "value"))), (above, x.name)


def hardshrink(c, input, lambd=0.5):
    """``nn.Hardshrink``, ``F.hardshrink``: x where |x| > lambd, else 0 (a magnitude, a
    comparison, a ``Where``)."""
    x = computed(input)
    size = c.build.add(f"{c.name}_abs", ops.Abs(), (x.name,), x.shape)
    above = c.build.add(f"{c.name}_above", rules.with_constant(
        "greater", x.shape, np.float32(number(lambd, "lambd"))), (size,), x.shape)
    return ops.Where(b=np.float32(0)), (above, x.name)


def softshrink(c, input, lambd=0.5):
    """``nn.Softshrink``, ``F.softshrink``: x - lambd above lambd, x + lambd below -lambd,
    else 0: x less x clamped to [-lambd, lambd]."""
    x, bound = computed(input), float(number(lambd, "lambd"))
    if bound < 0:
        raise _Refusal(f"lambd={bound}: must be >= 0")
    inside = c.build.add(f"{c.name}_clamp", ops.Clip(-bound, bound), (x.name,), x.shape)
    return ops.Elementwise("sub"), (x.name, inside)


def masked_fill(c, input, mask, value):
    """``x.masked_fill(mask, value)``: ``value`` where the mask holds, else x (a ``Where``);
    a mask that is a constant (a buffer, as Swin's attention mask) is held in the op."""
    return where(c, mask, value, input)


def logical(op: str):
    """``torch.logical_and`` / ``_or`` / ``_xor`` and ``&``, ``|``, ``^`` (``op``: and, or,
    xor) of two masks (a comparison's bool results, 1.0 and 0.0 in the IR):
    ``lowering.LOGICAL``."""
    def convert(c, input, other, *, out=None):
        for value in (input, other):
            mask(value)
        return rules.binary(rules.LOGICAL[op], [input.shape, other.shape])
    return convert


def logical_not(c, input, *, out=None):
    """``torch.logical_not``, ``~mask`` of a mask: 1 - it."""
    return rules.logical_not(mask(input).shape)


def mask(x) -> Ref:
    """``x`` as a computed bool tensor (a comparison's result)."""
    computed(x)
    if x.dtype != "bool":
        raise _Refusal(f"its input is {x.dtype}, not a bool mask: npusim reads logical ops of "
                       "comparisons' results (and, on numbers, they would test them against "
                       "zero)")
    return x


def rsqrt(c, input):
    """``torch.rsqrt``: a square root, then one divided by it."""
    x = computed(input)
    return c.build.chain([f"{c.name}_sqrt"], [ops.Sqrt(), rules.with_constant(
        "div", x.shape, np.float32(1), const_first=True)], x.name)


def unary(op_class):
    """The converter of a parameter-free activation (``F.silu``, ``torch.sigmoid``...)."""
    def convert(c, input, *args, inplace=False, **kwargs):
        computed(input)
        return op_class()
    return convert


def gelu(c, input, approximate="none"):
    computed(input)
    return ops.Gelu(approximate)


def layer_norm(c, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    computed(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    return rules.layer_norm(shape, optional_constant(weight, "weight"),
                            optional_constant(bias, "bias"), eps)


def group_norm(c, input, num_groups, weight=None, bias=None, eps=1e-5):
    return rules.group_norm(num_groups, computed(input).shape[1],
                            optional_constant(weight, "weight"),
                            optional_constant(bias, "bias"), eps)


def instance_norm(c, input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """``F.instance_norm`` / ``nn.InstanceNorm2d``: each channel of each image normalised
    over H, W by its own statistics (a group norm of one channel a group), or, with running
    statistics tracked (``use_input_stats`` False in eval), the per-channel affine they
    give."""
    x = computed(input, 4)
    if not use_input_stats:
        return batch_norm(c, input, running_mean, running_var, weight, bias, eps=eps)
    return group_norm(c, x, x.shape[1], weight, bias, eps)


def local_response_norm(c, input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``nn.LocalResponseNorm`` / ``F.local_response_norm`` (AlexNet, GoogLeNet): the window
    of ``size`` channels from ``c - size // 2``, as PyTorch pads it."""
    computed(input)
    return ops.LocalResponseNorm(int(size), float(alpha), float(beta), float(k))


def reciprocal(c, input):
    """``torch.reciprocal``: 1 divided by the tensor."""
    return rules.with_constant("div", computed(input).shape, np.float32(1), const_first=True)


def square(c, input):
    """``torch.square``: the tensor to the power 2 (as ``x ** 2``)."""
    return rules.with_constant("pow", computed(input).shape, np.float32(2))


def hardtanh(c, input, min_val=-1.0, max_val=1.0, inplace=False):
    return clamp(c, input, min_val, max_val)


def leaky_relu(c, input, negative_slope=0.01, inplace=False):
    computed(input)
    return ops.LeakyRelu(number(negative_slope, "negative_slope"))


def softplus(c, input, beta=1.0, threshold=20.0):
    computed(input)
    beta = number(beta, "beta")
    if beta <= 0:
        raise _Refusal(f"beta={beta}: the IR's Softplus takes beta > 0")
    return ops.Softplus(beta, number(threshold, "threshold"))


def elu(c, input, alpha=1.0, inplace=False):
    computed(input)
    return ops.Elu(number(alpha, "alpha"))


def celu(c, input, alpha=1.0, inplace=False):
    """``F.celu`` / ``nn.CELU`` / ``torch.celu``: ``rules.celu``."""
    computed(input)
    return rules.celu(number(alpha, "alpha"))


def rounding(mode: str):
    """The converter of ``torch.floor`` / ``ceil`` / ``trunc`` / ``fix`` / ``round`` (and
    ``round``'s ``decimals``): ``rules.rounding``."""
    def convert(c, input, *, decimals=0):
        x = computed(input)
        steps = rules.rounding(mode, int(number(decimals, "decimals")), x.shape)
        return steps[0] if len(steps) == 1 else c.build.steps(c.name, steps, x.name)
    return convert


# torch's other names of the inverse functions (``torch.arcsin``, ``x.arctanh()``...)
TRIG_ALIASES = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
                "acosh": "arccosh", "atanh": "arctanh"}


def trig(fn: str):
    """The converter of ``torch.sin`` / ``cos`` / ``tan`` / ``asin`` ... ``atanh`` (and
    their ``arc`` names): ``Trig`` of that function."""
    def convert(c, input):
        computed(input)
        return ops.Trig(fn)
    return convert


def cumsum(c, input, dim, *, dtype=None):
    """``torch.cumsum`` / ``x.cumsum``: ``CumSum`` along ``dim``, in float32 (a ``dtype``
    of another type is refused)."""
    computed(input)
    if dtype not in (None, torch.float32):
        raise _Refusal(f"dtype={dtype}: the IR computes float32")
    return ops.CumSum(int(number(dim, "dim")))


def selu(c, input, inplace=False):
    """``F.selu`` / ``nn.SELU``: ``rules.selu`` at PyTorch's constants."""
    x = computed(input)
    return c.build.steps(c.name, rules.selu(x.shape), x.name)


def rrelu(c, input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """``F.rrelu`` / ``nn.RReLU`` at inference: a leaky ReLU of slope (lower + upper) / 2."""
    computed(input)
    if training:
        raise _Refusal("training=True draws a random slope per element; at inference RReLU "
                       "is a leaky ReLU")
    return ops.LeakyRelu((number(lower, "lower") + number(upper, "upper")) / 2)


def prelu(c, input, weight):
    computed(input)
    return ops.PRelu(constant(weight, "weight"))


def max_pool2d(c, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                return_indices=False):
    pending = pending_pad(input)
    if return_indices:
        raise _Refusal("return_indices=True: the IR's pooling returns values only")
    return rules.max_pool(kernel_size, stride or None, padding, ceil_mode, pending,
                          pair(dilation, "dilation", c.name))


def avg_pool2d(c, input, kernel_size, stride=None, padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    """``F.avg_pool2d`` / ``nn.AvgPool2d``: ``rules.avg_pool``; with ``divisor_override`` d
    each window's sum over d, as the average over the whole window (padding counted) times
    its area over d (a ceil-mode window past the input would be divided by its own part)."""
    pending = pending_pad(input)
    pool = rules.avg_pool(kernel_size, stride or None, padding, ceil_mode,
                          count_include_pad or bool(divisor_override), pending)
    if not divisor_override:
        return pool
    if ceil_mode:
        raise _Refusal(f"divisor_override={divisor_override} with ceil_mode: the IR divides a "
                       "window past the input by its part")
    (kh, kw), _, _ = pool.geometry()
    return c.build.steps(c.name, [pool, rules.with_constant(
        "mul", input.shape, np.float32(kh * kw / number(divisor_override,
                                                        "divisor_override")))], input.name)


def lp_pool2d(c, input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """``F.lp_pool2d`` / ``nn.LPPool2d`` as PyTorch defines it: x ** p, the window's average
    (no padding) times the window's area, then ** (1 / p)."""
    x = computed(input, 4)
    p, (kh, kw) = number(norm_type, "norm_type"), pair(kernel_size, "kernel_size", c.name)
    if p == 0:
        raise _Refusal("norm_type=0: the pool takes the p-th root")
    steps = [rules.with_constant("pow", x.shape, np.float32(p)),
             rules.avg_pool((kh, kw), stride or None, 0, ceil_mode, True),
             rules.with_constant("mul", x.shape, np.float32(kh * kw)),
             rules.with_constant("pow", x.shape, np.float32(1.0 / p))]
    return c.build.steps(c.name, steps, x.name)


def adaptive_avg_pool2d(c, input, output_size):
    (h, w), (p, q) = computed(input, 4).shape[2:], c.out_shape[2:]
    if (p, q) == (1, 1):
        return ops.GlobalAvgPool()
    if h % p == 0 and w % q == 0:
        return ops.AvgPool((h // p, w // q))
    return ops.AdaptiveAvgPool((p, q))


def adaptive_max_pool2d(c, input, output_size, return_indices=False):
    if return_indices:
        raise _Refusal("return_indices=True: the IR's pooling returns values only")
    (h, w), (p, q) = computed(input, 4).shape[2:], c.out_shape[2:]
    if h % p == 0 and w % q == 0:
        return ops.MaxPool((h // p, w // q))
    return ops.AdaptiveMaxPool((p, q))


def operands(kind: str, input, other, fold: bool = True):
    """(op, inputs) of ``input <kind> other``, either of them a tensor and the other a
    tensor or a constant: a constant operand held by the op, as a per-channel affine where
    it can be and ``fold`` allows (``lowering.with_constant``)."""
    refs = [a for a in (input, other) if isinstance(a, Ref)]
    for r in refs:
        computed(r)
    if len(refs) == 2:
        return rules.binary(kind, [input.shape, other.shape]), (input.name, other.name)
    const = constant(other if refs[0] is input else input, "the constant operand")
    first = refs[0] is not input
    op = (rules.with_constant(kind, refs[0].shape, const, const_first=first) if fold
          else ops.Elementwise(kind, np.asarray(const, np.float32), first))
    return op, (refs[0].name,)


def arith(kind: str):
    """The converter of ``x + y``, ``x * s``, ``torch.maximum(x, y)``...: broadcasting; a
    division with ``rounding_mode`` (``//``, ``torch.floor_divide``) as PyTorch computes it:
    ``floordiv`` (from fmod, not the floor of the quotient), or the quotient truncated (by
    the constant itself, not its reciprocal: ``lowering.with_constant``'s scale could move
    a quotient across a whole number)."""
    def convert(c, input, other, *, alpha=1, rounding_mode=None, out=None):
        if alpha != 1:
            raise _Refusal(f"alpha={alpha}: only a plain sum or difference (alpha=1)")
        if rounding_mode is None:
            return operands(kind, input, other)
        if kind != "div" or rounding_mode not in ("floor", "trunc"):
            raise _Refusal(f"rounding_mode={rounding_mode!r}: a division rounds 'floor' or "
                           "'trunc'")
        if rounding_mode == "floor":
            return operands("floordiv", input, other)
        quotient = c.build.add(f"{c.name}_quotient", *operands("div", input, other, fold=False))
        return ops.Round("trunc"), (quotient,)
    return convert
