"""PyTorch -> ``ir.Graph``: trace with torch.fx, map each call to one IR op, fold batch norm.

Why ``torch.fx.symbolic_trace`` and not ``torch.export``: fx keeps the user's own
vocabulary (one node per ``nn.Conv2d`` call holding the module and its parameters,
``F.relu``, ``x.view``), so each node maps to one IR op and every refusal names the
user's module path and call. ``torch.export`` lowers to ATen (``aten.convolution``
with transposed/output-padding flags, decomposed batch norm, functionalised views),
which would need a second, lower-level table for no gain on the feed-forward CNNs the
IR holds, and it fails on the same data-dependent control flow fx does.

The traced module is run once on the example input by an ``fx.Interpreter`` that
records every node's output shape. Shape arithmetic (``x.size(0)``, ``x.shape[2]``)
is thereby a constant, ``view``/``reshape``/``flatten`` take their result shape from
the run, and after the graph is built each IR node's inferred shape is checked
against PyTorch's: an op the IR would compute differently is refused, not imported.

Each converter takes the same arguments as the torch call it handles; an argument
computed from the network input arrives as a ``_Ref`` (IR node name and shape), a
constant (a parameter, a python number) as its value. It returns an ``ops.Op``
whose inputs are the ``_Ref`` arguments in order, an ``(op, inputs)`` pair (after adding
helper nodes through ``c.build``: a linear layer on a channels-last map, a transposed
conv), a ``_Ref`` (a pass-through such as dropout at inference) or ``_Parts`` (chunk and
split, whose parts indexing takes). The framework-neutral rules (clip to ReLU, constants as
per-channel affines, reshape, concat...) are ``lowering``'s.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import operator
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import ops
from ..errors import LayerError, ModelError
from ..geometry import pair, same_padding
from ..ir import Graph
from . import lowering as rules
from .lowering import Lowering
from .lowering import Refusal as _Refusal

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:  # pragma: no cover - torch is an optional extra
    raise ModelError("PyTorch import needs torch: pip install 'npusim[torch]'") from e

DEFAULT_INPUT_SHAPE = (1, 3, 224, 224)


@dataclass(frozen=True)
class _Ref:
    """A tensor computed from the network input: the IR node holding it and its shape.

    After ``F.pad`` it also carries the pending constant padding (``lowering.Pending``),
    which only a conv or pooling reading it can absorb.
    """

    name: str
    shape: tuple[int, ...]
    pad: rules.Pending = rules.NO_PAD
    parts: tuple = ()  # the shapes of a tuple of tensors (chunk, split), else ()


@dataclass(frozen=True)
class _Parts:
    """The result of chunk / split: its input and one Slice op per part (read by getitem)."""

    source: _Ref
    slices: tuple


@dataclass(frozen=True)
class _Call:
    """What a converter knows of the node it converts besides its arguments."""

    name: str
    out_shape: tuple[int, ...]
    build: Lowering | None = None
    parts: tuple = ()


@dataclass(frozen=True)
class _Slot:
    """Where input ``index`` of a fallback node goes among its call's arguments."""

    index: int


@dataclass(frozen=True, eq=False)
class _TorchCall:
    """A node's own torch call (module, function, or Tensor method by name) with the
    network tensors as ``_Slot`` placeholders: numpy inputs in, float32 numpy out."""

    fn: object
    method: bool
    args: tuple
    kwargs: dict

    def __call__(self, *arrays):
        tensors = [torch.from_numpy(np.require(a, np.float32, ["C", "W"])) for a in arrays]
        args, kwargs = torch.fx.node.map_aggregate(
            (self.args, self.kwargs), lambda v: tensors[v.index] if isinstance(v, _Slot) else v)
        with torch.no_grad():
            out = getattr(args[0], self.fn)(*args[1:], **kwargs) if self.method \
                else self.fn(*args, **kwargs)
        return out.detach().cpu().to(torch.float32).numpy()


def _fallback(gm, n, kind: str, args, kwargs, shape) -> tuple[ops.Fallback, tuple] | None:
    """Node ``n`` as a ``Fallback`` running its own torch call, or None where it cannot
    (an input from F.pad or chunk, a result that is not one tensor)."""
    refs: list[_Ref] = []

    def slot(v):
        if isinstance(v, _Parts) or isinstance(v, _Ref) and v.pad:
            raise _Refusal("an input torch alone cannot take")
        if isinstance(v, _Ref):
            refs.append(v)
            return _Slot(len(refs) - 1)
        return v

    try:
        args, kwargs = torch.fx.node.map_aggregate((args, kwargs), slot)
    except _Refusal:
        return None
    if not shape or not refs:
        return None
    fn = gm.get_submodule(n.target) if n.op == "call_module" else n.target
    call = _TorchCall(fn, n.op == "call_method", tuple(args), dict(kwargs))
    op = ops.Fallback(kind, call, tuple(r.shape for r in refs), tuple(shape))
    return op, tuple(r.name for r in refs)


# ---- argument helpers -------------------------------------------------------------------


def _data(x, rank: int | None = None) -> _Ref:
    """``x`` as a tensor computed from the network input, optionally of a given rank."""
    if not isinstance(x, _Ref):
        raise _Refusal("its input is a constant, not a tensor computed from the network input")
    if x.pad:
        raise rules.not_absorbed("F.pad")
    if rank is not None and len(x.shape) != rank:
        raise _Refusal(f"needs a {rank}-D input, got shape {x.shape}")
    return x


def _unpad(x) -> rules.Pending:
    """The F.pad padding a 4-D input still owes (for the reader to absorb)."""
    pending = x.pad if isinstance(x, _Ref) else rules.NO_PAD
    _data(dataclasses.replace(x, pad=rules.NO_PAD) if pending else x, 4)
    return pending


def _array(value, what: str) -> np.ndarray:
    """A constant tensor (parameter, buffer) as a float32 numpy copy."""
    if isinstance(value, _Ref):
        raise _Refusal(f"{what} is computed from the network input; the IR needs a constant")
    return np.array(torch.as_tensor(value).detach().cpu().to(torch.float32).numpy())


def _optional(value, what: str) -> np.ndarray | None:
    """An optional constant tensor (a weight or bias that may be None)."""
    return None if value is None else _array(value, what)


def _number(value, what: str):
    if isinstance(value, _Ref) or isinstance(value, torch.Tensor) and value.numel() != 1:
        raise _Refusal(f"{what} must be a number")
    return None if value is None else float(value)


# ---- converters: one per kind of call, with the torch call's own parameters --------------


def _conv2d(c, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    pending = _unpad(input)
    w = _array(weight, "weight")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise _Refusal(f"padding={padding!r}: must be 'same', 'valid' or integers")
        padding = same_padding(w.shape[2:], pair(dilation, "dilation", c.name)) \
            if padding == "same" else 0
    b = _optional(bias, "bias")
    return rules.conv(w, b, pair(stride, "stride", c.name), padding,
                      pair(dilation, "dilation", c.name), groups, pending)


def _conv_module(c, m, x):
    if m.padding_mode == "zeros":
        return _conv2d(c, x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)
    if m.padding_mode not in ("reflect", "replicate") or isinstance(m.padding, str):
        raise _Refusal(f"padding_mode={m.padding_mode!r} with padding={m.padding!r}: the modes "
                       "are 'zeros', 'reflect' and 'replicate' with integer padding")
    (ph, pw), x = pair(m.padding, "padding", c.name), _data(x, 4)
    padded = c.build.add(f"{c.name}_pad", ops.Pad((ph, ph, pw, pw), m.padding_mode), (x.name,))
    return _conv2d(c, x, m.weight, m.bias, m.stride, 0, m.dilation, m.groups), (padded,)


def _conv_transpose2d(c, input, weight, bias=None, stride=1, padding=0, output_padding=0,
                      groups=1, dilation=1):
    x = _data(input, 4)
    if pair(dilation, "dilation", c.name) != (1, 1):
        raise _Refusal(f"dilation={dilation}: the IR's transposed convolution has dilation 1")
    b = _optional(bias, "bias")
    return c.build.conv_transpose(c.name, x.name, _array(weight, "weight"), b,
                                  pair(stride, "stride", c.name),
                                  pair(padding, "padding", c.name),
                                  pair(output_padding, "output_padding", c.name), int(groups))


def _conv_transpose_module(c, m, x, output_size=None):
    if m.padding_mode != "zeros" or output_size is not None:
        raise _Refusal(f"padding_mode={m.padding_mode!r}, output_size={output_size}: only "
                       "zeros padding and the output size of the layer's own parameters")
    return _conv_transpose2d(c, x, m.weight, m.bias, m.stride, m.padding, m.output_padding,
                             m.groups, m.dilation)


def _linear(c, input, weight, bias=None):
    x = _data(input)
    b = _optional(bias, "bias")
    return c.build.linear(c.name, x.name, x.shape, _array(weight, "weight"), b)


def _batch_norm(c, input, running_mean, running_var, weight=None, bias=None, training=False,
                momentum=0.1, eps=1e-5):
    _data(input)
    if training or running_mean is None or running_var is None:
        raise _Refusal("normalises by batch statistics (training mode or no running stats); "
                       "the IR folds running statistics only")
    return rules.batch_norm(_optional(weight, "weight"), _optional(bias, "bias"),
                            _array(running_mean, "running_mean"),
                            _array(running_var, "running_var"), eps)


def _relu(c, input, inplace=False):
    _data(input)
    return ops.Relu()


def _relu6(c, input, inplace=False):
    _data(input)
    return ops.Relu6()


def _clamp(c, input, min=None, max=None):
    _data(input)
    return rules.clip(_number(min, "min"), _number(max, "max"))


def _unary(op_class):
    """The converter of a parameter-free activation (``F.silu``, ``torch.sigmoid``...)."""
    def convert(c, input, *args, inplace=False, **kwargs):
        _data(input)
        return op_class()
    return convert


def _gelu(c, input, approximate="none"):
    _data(input)
    return ops.Gelu(approximate)


def _layer_norm(c, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    _data(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    return rules.layer_norm(shape, _optional(weight, "weight"), _optional(bias, "bias"), eps)


def _group_norm(c, input, num_groups, weight=None, bias=None, eps=1e-5):
    return rules.group_norm(num_groups, _data(input).shape[1], _optional(weight, "weight"),
                            _optional(bias, "bias"), eps)


def _hardtanh(c, input, min_val=-1.0, max_val=1.0, inplace=False):
    return _clamp(c, input, min_val, max_val)


def _leaky_relu(c, input, negative_slope=0.01, inplace=False):
    _data(input)
    return ops.LeakyRelu(_number(negative_slope, "negative_slope"))


def _prelu(c, input, weight):
    _data(input)
    return ops.PRelu(_array(weight, "weight"))


def _max_pool2d(c, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                return_indices=False):
    pending = _unpad(input)
    if pair(dilation, "dilation", c.name) != (1, 1):
        raise _Refusal(f"dilation={dilation}: the IR's pooling has no dilation")
    if return_indices:
        raise _Refusal("return_indices=True: the IR's pooling returns values only")
    return rules.max_pool(kernel_size, stride or None, padding, ceil_mode, pending)


def _avg_pool2d(c, input, kernel_size, stride=None, padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    pending = _unpad(input)
    if divisor_override:
        raise _Refusal(f"divisor_override={divisor_override}: the IR divides by the window")
    return rules.avg_pool(kernel_size, stride or None, padding, ceil_mode, count_include_pad,
                          pending)


def _adaptive_avg_pool2d(c, input, output_size):
    (h, w), (p, q) = _data(input, 4).shape[2:], c.out_shape[2:]
    if (p, q) == (1, 1):
        return ops.GlobalAvgPool()
    if h % p == 0 and w % q == 0:
        return ops.AvgPool((h // p, w // q))
    raise _Refusal(f"output {p}x{q} from {h}x{w}: unequal windows; the IR needs an output of "
                   "1x1 or one that divides the input")


def _arith(kind: str):
    """The converter of ``x + y``, ``x * s``, ``torch.maximum(x, y)``...: broadcasting."""
    def convert(c, input, other, *, alpha=1, rounding_mode=None, out=None):
        if alpha != 1:
            raise _Refusal(f"alpha={alpha}: only a plain sum or difference (alpha=1)")
        if rounding_mode is not None:
            raise _Refusal(f"rounding_mode={rounding_mode!r}: only true division")
        refs = [a for a in (input, other) if isinstance(a, _Ref)]
        for r in refs:
            _data(r)
        if len(refs) == 2:
            return rules.binary(kind, [input.shape, other.shape])
        const = other if refs[0] is input else input
        return rules.with_constant(kind, refs[0].shape, _array(const, "the constant operand"),
                                   const_first=refs[0] is not input)
    return convert


def _cat(c, tensors, dim=0):
    if not all(isinstance(t, _Ref) for t in tensors):
        raise _Refusal("concatenates a constant; the IR concatenates computed tensors only")
    return rules.concat(dim, len(tensors[0].shape))


def _mean(c, input, dim=None, keepdim=False, *, dtype=None):
    x = _data(input)
    if dtype is not None:
        raise _Refusal(f"dtype={dtype}: the IR reduces in float32")
    return rules.reduce("mean", range(len(x.shape)) if dim is None else dim, keepdim, x.shape)


def _amax(c, input, dim=(), keepdim=False):
    x = _data(input)
    return rules.reduce("max", dim if dim != () else range(len(x.shape)), keepdim, x.shape)


def _permute(c, input, *dims):
    x = _data(input)
    dims = tuple(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else dims
    return rules.transpose(dims, len(x.shape))


def _transpose(c, input, dim0, dim1):
    return rules.swap_axes(dim0, dim1, len(_data(input).shape))


def _split(c, input, split_size_or_sections=None, dim=0, *, chunks=None):
    """chunk / split: one Slice per part, the part sizes as PyTorch made them."""
    x = _data(input)
    axis = dim % len(x.shape)
    return _Parts(x, tuple(rules.split(axis, [p[axis] for p in c.parts], x.shape)))


def _chunk(c, input, chunks, dim=0):
    return _split(c, input, dim=dim)


def _concatenate(c, tensors, axis=0):
    return _cat(c, tensors, axis)


def _reshape_to(c, input, *args, **kwargs):
    """flatten / view / reshape / squeeze / unsqueeze: the result shape PyTorch produced."""
    return rules.reshape(_data(input).shape, c.out_shape)


def _interpolate(c, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None, antialias=False):
    (_, _, h, w), (_, _, p, q) = _data(input, 4).shape, c.out_shape
    if mode not in ("nearest", "bilinear") or antialias:
        raise _Refusal(f"mode={mode!r}{', antialias' if antialias else ''}: the IR resamples "
                       "'nearest' or 'bilinear' (no antialias)")
    if scale_factor is not None and not recompute_scale_factor:
        op = ops.Upsample(scale_factor, mode, bool(align_corners))  # samples at 1/scale
    else:
        op = rules.upsample_to((h, w), (p, q), mode, bool(align_corners))
    _check_resampling(op, (h, w), lambda t: F.interpolate(
        t, size, scale_factor, mode, align_corners, recompute_scale_factor))
    return op


def _check_resampling(op: ops.Upsample, hw, torch_fn) -> None:
    """Refuse unless the IR's Upsample samples exactly as PyTorch does at this size."""
    x = np.random.default_rng(0).standard_normal((1, 1, *hw)).astype(np.float32)
    want = torch_fn(torch.from_numpy(x)).numpy()
    if not np.allclose(op(x), want, rtol=0, atol=1e-5):
        raise _Refusal("the IR's Upsample (nearest: floor(dst * step); bilinear: half-pixel or "
                       "align_corners; step = 1/scale, or in/out for a size) samples this size "
                       "and scale differently")


def _softmax(c, input, dim=None, _stacklevel=3, dtype=None):
    _data(input)
    if dim is None or dtype is not None:
        raise _Refusal(f"dim={dim}, dtype={dtype}: give dim explicitly and no dtype")
    return rules.softmax(dim, len(input.shape))


def _pad(c, input, pad, mode="constant", value=None):
    """F.pad: held on the tensor until a conv or pooling absorbs it (see ``_unpad``)."""
    x = input if isinstance(input, _Ref) else _data(input)
    fill = 0.0 if value is None else float(value)
    pad = [int(p) for p in pad]
    if min(pad) < 0 or any(pad[4:]) or len(pad) % 2 or mode not in ("constant", "reflect",
                                                                     "replicate"):
        raise _Refusal(f"pad={tuple(pad)}, mode={mode!r}: only constant, reflect or replicate, "
                       "non-negative padding of H and W is supported")
    left, right, top, bottom = (pad + [0, 0, 0, 0])[:4]
    result = rules.pad((top, bottom, left, right), mode, fill, x.pad)
    if isinstance(result, rules.Pending):
        return _Ref(x.name, c.out_shape, result)
    return result, (x.name,)


def _getitem(c, input, index):
    """A part of chunk / split; ``x[...]`` of start:stop:step slices (and one ``...``): a
    Slice per axis it cuts (chained), a pass-through if it keeps the whole tensor."""
    if isinstance(input, _Parts):
        if not isinstance(index, int):
            raise _Refusal(f"indexes the parts of chunk / split with {index!r}; take each part "
                           "by an integer index")
        return input.slices[index], (input.source.name,)
    x = _data(input)
    cuts = [(axis, p) for axis, p in enumerate(_index_slices(index, x.shape))
            if p.indices(x.shape[axis]) != (0, x.shape[axis], 1)]
    if not cuts:
        return x
    return c.build.chain([f"{c.name}_axis{axis}" for axis, _ in cuts[:-1]],
                         [ops.Slice(axis, p.start or 0, p.stop, p.step or 1) for axis, p in cuts],
                         x.name)


def _index_slices(index, shape) -> list[slice]:
    """An index of slices and at most one ``...`` as one slice per axis of ``shape``."""
    parts = list(index) if isinstance(index, tuple) else [index]
    if parts.count(Ellipsis) > 1 or not all(p is Ellipsis or isinstance(p, slice)
                                            and (p.step or 1) >= 1 for p in parts):
        raise _Refusal(f"indexing {shape} with {index}: the IR slices with start:stop:step "
                       "(step >= 1) per axis and one '...' (no integers, None, tensors)")
    if Ellipsis in parts:
        i = parts.index(Ellipsis)
        parts[i:i + 1] = [slice(None)] * (len(shape) - len(parts) + 1)
    if len(parts) > len(shape):
        raise _Refusal(f"indexing {shape} with {index}: more indices than axes")
    return parts + [slice(None)] * (len(shape) - len(parts))


def _dropout(c, input, p=0.5, training=True, inplace=False):
    if training:
        raise _Refusal("training=True drops at random; pass training=self.training")
    return _data(input)


def _identity(c, input, *args, **kwargs):
    return _data(input)


_MODULES = {
    nn.Conv2d: _conv_module,
    nn.ConvTranspose2d: _conv_transpose_module,
    nn.Linear: lambda c, m, x: _linear(c, x, m.weight, m.bias),
    nn.Sigmoid: lambda c, m, x: _unary(ops.Sigmoid)(c, x),
    nn.Hardsigmoid: lambda c, m, x: _unary(ops.HardSigmoid)(c, x),
    nn.Hardswish: lambda c, m, x: _unary(ops.HardSwish)(c, x),
    nn.SiLU: lambda c, m, x: _unary(ops.Silu)(c, x),
    nn.Tanh: lambda c, m, x: _unary(ops.Tanh)(c, x),
    nn.GELU: lambda c, m, x: _gelu(c, x, m.approximate),
    nn.LayerNorm: lambda c, m, x: _layer_norm(c, x, m.normalized_shape, m.weight, m.bias, m.eps),
    nn.GroupNorm: lambda c, m, x: _group_norm(c, x, m.num_groups, m.weight, m.bias, m.eps),
    nn.BatchNorm2d: lambda c, m, x: _batch_norm(
        c, x, m.running_mean, m.running_var, m.weight, m.bias, m.training, eps=m.eps),
    nn.ReLU: lambda c, m, x: _relu(c, x),
    nn.ReLU6: lambda c, m, x: _relu6(c, x),
    nn.Hardtanh: lambda c, m, x: _clamp(c, x, m.min_val, m.max_val),
    nn.LeakyReLU: lambda c, m, x: _leaky_relu(c, x, m.negative_slope),
    nn.PReLU: lambda c, m, x: _prelu(c, x, m.weight),
    nn.MaxPool2d: lambda c, m, x: _max_pool2d(c, x, m.kernel_size, m.stride, m.padding,
                                              m.dilation, m.ceil_mode, m.return_indices),
    nn.AvgPool2d: lambda c, m, x: _avg_pool2d(c, x, m.kernel_size, m.stride, m.padding,
                                              m.ceil_mode, m.count_include_pad,
                                              m.divisor_override),
    nn.AdaptiveAvgPool2d: lambda c, m, x: _adaptive_avg_pool2d(c, x, m.output_size),
    nn.Flatten: lambda c, m, x: _reshape_to(c, x),
    nn.Softmax: lambda c, m, x: _softmax(c, x, m.dim),
    nn.Identity: lambda c, m, x: _data(x),
    nn.ConstantPad2d: lambda c, m, x: _pad(c, x, m.padding, "constant", m.value),
    nn.ZeroPad2d: lambda c, m, x: _pad(c, x, m.padding, "constant", 0.0),
    nn.ReflectionPad2d: lambda c, m, x: _pad(c, x, m.padding, "reflect"),
    nn.ReplicationPad2d: lambda c, m, x: _pad(c, x, m.padding, "replicate"),
    **{cls: lambda c, m, x: _interpolate(c, x, m.size, m.scale_factor, m.mode, m.align_corners,
                                         m.recompute_scale_factor)
       for cls in (nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d)},
    # at inference (the module is put in eval mode) dropout passes its input through
    **{cls: lambda c, m, x: _data(x)
       for cls in (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)},
}


def _table(*rows) -> dict:
    return {target: row[0] for row in rows for target in row[1:]}


_FUNCTIONS = _table(
    (_conv2d, torch.conv2d),
    (_conv_transpose2d, F.conv_transpose2d, torch.conv_transpose2d),
    (_linear, F.linear),
    (_batch_norm, F.batch_norm),
    (_relu, F.relu, F.relu_, torch.relu, torch.relu_),
    (_relu6, F.relu6),
    (_clamp, torch.clamp, torch.clip),
    (_hardtanh, F.hardtanh, F.hardtanh_),
    (_leaky_relu, F.leaky_relu, F.leaky_relu_),
    (_prelu, torch.prelu),
    (_max_pool2d, F.max_pool2d, torch.max_pool2d),
    (_avg_pool2d, F.avg_pool2d),
    (_adaptive_avg_pool2d, F.adaptive_avg_pool2d),
    (_arith("add"), operator.add, operator.iadd, torch.add),
    (_arith("sub"), operator.sub, operator.isub, torch.sub, torch.subtract),
    (_arith("mul"), operator.mul, operator.imul, torch.mul, torch.multiply),
    (_arith("div"), operator.truediv, operator.itruediv, torch.div, torch.divide),
    (_arith("max"), torch.maximum),
    (_arith("min"), torch.minimum),
    (_unary(ops.Sigmoid), torch.sigmoid, F.sigmoid),
    (_unary(ops.HardSigmoid), F.hardsigmoid),
    (_unary(ops.HardSwish), F.hardswish),
    (_unary(ops.Silu), F.silu),
    (_unary(ops.Tanh), torch.tanh, F.tanh),
    (_gelu, F.gelu),
    (_layer_norm, F.layer_norm),
    (_group_norm, F.group_norm),
    (_mean, torch.mean),
    (_amax, torch.amax),
    (_permute, torch.permute),
    (_transpose, torch.transpose),
    (_split, torch.split),
    (_chunk, torch.chunk),
    (_cat, torch.cat, torch.concat),
    (_concatenate, torch.concatenate),
    (_reshape_to, torch.flatten, torch.reshape),
    (_pad, F.pad),
    (_getitem, operator.getitem),
    (_interpolate, F.interpolate, F.upsample),
    (_softmax, F.softmax, torch.softmax),
    (_dropout, F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout),
)

_METHODS = {
    "relu": _relu, "relu_": _relu, "clamp": _clamp, "clamp_": _clamp, "clip": _clamp,
    "add": _arith("add"), "add_": _arith("add"), "sub": _arith("sub"), "sub_": _arith("sub"),
    "mul": _arith("mul"), "mul_": _arith("mul"), "div": _arith("div"), "div_": _arith("div"),
    "sigmoid": _unary(ops.Sigmoid), "sigmoid_": _unary(ops.Sigmoid), "tanh": _unary(ops.Tanh),
    "mean": _mean, "amax": _amax, "permute": _permute, "transpose": _transpose,
    "split": _split, "chunk": _chunk, "flatten": _reshape_to, "view": _reshape_to,
    "reshape": _reshape_to, "squeeze": _reshape_to, "unsqueeze": _reshape_to,
    "softmax": _softmax, "contiguous": _identity,
}


def _function_name(fn) -> str:
    """``F.relu``, ``torch.cat``, ``operator.add``: how a user would write the call."""
    name = getattr(fn, "__name__", repr(fn))
    for prefix, namespace in (("F", F), ("torch", torch), ("operator", operator)):
        if getattr(namespace, name, None) is fn:
            return f"{prefix}.{name}"
    return f"{getattr(fn, '__module__', None) or '?'}.{name}"


def _module_name(cls: type) -> str:
    return f"nn.{cls.__name__}" if cls.__module__.startswith("torch.nn") \
        else f"{cls.__module__}.{cls.__qualname__}"


def supported_ops() -> list[str]:
    """Every module class, function and tensor method the importer maps to the IR."""
    return sorted({_module_name(cls) for cls in _MODULES}
                  | {_function_name(fn) for fn in _FUNCTIONS}
                  | {f"Tensor.{m}" for m in _METHODS})


# ---- tracing and recording --------------------------------------------------------------


def _trace(module, name: str):
    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as e:  # fx raises many types on untraceable Python
        raise ModelError(f"{name}: torch.fx cannot trace it ({type(e).__name__}: {e}); npusim "
                         "imports what symbolic_trace can follow (no control flow on tensor "
                         "values)") from e
    gm.graph.eliminate_dead_code()
    gm.recompile()
    inputs = [n.name for n in gm.graph.nodes if n.op == "placeholder" and not n.args]
    if len(inputs) != 1:
        raise ModelError(f"{name}: forward takes {len(inputs)} tensor inputs {inputs}; "
                         "npusim networks take one")
    return gm


def _record(gm, x, name: str) -> dict:
    """Per fx node: a ``_Ref`` if it is a tensor computed from the input, else its value."""
    info: dict = {}
    dynamic: set = set()

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            try:
                out = super().run_node(n)
            except Exception as e:  # the user's own forward failed at this node
                raise ModelError(f"{name}: running it on an input of shape {tuple(x.shape)} "
                                 f"failed at node {n.name!r} ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else ''})") from e
            if n.op == "placeholder" or any(a in dynamic for a in n.all_input_nodes):
                dynamic.add(n)
            info[n] = _Ref("input" if n.op == "placeholder" else n.name, _shape(out),
                           parts=_part_shapes(out)) \
                if n in dynamic and _holds_tensor(out) else out
            return out

    recorder = Recorder(gm)
    recorder.extra_traceback = False  # torch's own error decoration imports dynamo: seconds
    with torch.no_grad():
        recorder.run(x)
    return info


def _holds_tensor(value) -> bool:
    found = []
    torch.fx.node.map_aggregate(value, lambda v: found.append(isinstance(v, torch.Tensor)))
    return any(found)


def _part_shapes(value) -> tuple:
    """The shapes of a tuple or list of tensors (chunk, split), else ()."""
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(tuple(v.shape) for v in value)
    return ()


def _shape(value) -> tuple[int, ...]:
    """A tensor's shape; () for a tuple of tensors (which no converter accepts)."""
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def _needs_op(n, info: dict) -> bool:
    """A node the IR must compute: a call whose result holds tensors computed from the input."""
    return n.op in ("call_module", "call_function", "call_method") and isinstance(info[n], _Ref)


def _kind_and_converter(gm, n):
    """How a node is named in messages, and its converter (None if unsupported)."""
    if n.op == "call_module":
        module = gm.get_submodule(n.target)
        conv = _MODULES.get(type(module))
        return _module_name(type(module)), (conv and (lambda c, *a, **k: conv(c, module, *a, **k)))
    if n.op == "call_method":
        return f"Tensor.{n.target}", _METHODS.get(n.target)
    return _function_name(n.target), _FUNCTIONS.get(n.target)


# ---- graph building ---------------------------------------------------------------------


def _convert(gm, info: dict, fallback: bool) -> Lowering:
    """Each node the IR must compute as IR nodes; with ``fallback``, a node the IR cannot
    express as a ``Fallback`` running its own torch call."""
    build = Lowering()
    for n in gm.graph.nodes:
        if not _needs_op(n, info):
            continue
        kind, conv = _kind_and_converter(gm, n)
        args = torch.fx.node.map_arg(n.args, info.__getitem__)
        kwargs = torch.fx.node.map_arg(n.kwargs, info.__getitem__)
        shape = info[n].shape
        result, why = None, None
        try:
            if conv is not None:
                result = conv(_Call(n.name, shape, build, info[n].parts), *args, **kwargs)
        except (_Refusal, TypeError, LayerError) as e:
            why = str(e)
        if conv is None or why is not None:
            instead = _fallback(gm, n, kind, args, kwargs, shape) if fallback else None
            if instead is not None:
                build.add(n.name, *instead, shape)
            elif conv is None:
                build.unsupported.append((kind, n.name))
            else:
                build.problems.append((kind, n.name, why))
            continue
        if isinstance(result, (_Ref, _Parts)):  # a pass-through, or parts read by getitem
            info[n] = result
            continue
        op, inputs = result if isinstance(result, tuple) else \
            (result, tuple(r.name for r in _refs(args, kwargs)))
        build.add(n.name, op, inputs, shape)
    return build


def _refs(args, kwargs) -> list[_Ref]:
    """The ``_Ref`` arguments of a call, in order (lists such as ``torch.cat``'s included)."""
    found: list[_Ref] = []
    torch.fx.node.map_aggregate((args, kwargs),
                                lambda v: found.append(v) if isinstance(v, _Ref) else None)
    return found


def _output(gm, info: dict, name: str) -> dict[str, str]:
    """What forward returns, as label -> IR node in order: one tensor (labelled by its
    node), a tuple or list (labels 'output0', 'output1'...) or a dict (its keys)."""
    (value,) = [n.args[0] for n in gm.graph.nodes if n.op == "output"]
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, (tuple, list)):
        items = [(f"output{i}", v) for i, v in enumerate(value)]
    else:
        ref = _output_ref(value, info, name, "forward returns")
        return {ref.name: ref.name}
    if not items:
        raise ModelError(f"{name}: forward returns an empty {type(value).__name__}; npusim "
                         "networks return tensors computed from the input")
    return {label: _output_ref(v, info, name, f"output {label!r} of forward is").name
            for label, v in items}


def _output_ref(value, info: dict, name: str, what: str) -> _Ref:
    """The ``_Ref`` of one returned value, which must be a tensor computed from the input."""
    ref = info.get(value) if isinstance(value, torch.fx.Node) else None
    if not isinstance(ref, _Ref) or ref.pad or not ref.shape:
        kind = "a constant, F.pad's output or a nested container" \
            if isinstance(value, torch.fx.Node) else type(value).__name__
        raise ModelError(f"{name}: {what} {kind}; npusim networks return tensors computed "
                         "from the input (one, or a flat tuple, list or dict of them)")
    return ref


def _example(example_input, name: str):
    x = torch.as_tensor(np.require(example_input, requirements="W")  # torch warns on read-only
                        if not isinstance(example_input, torch.Tensor)
                        else example_input).to(torch.float32)
    if x.ndim < 2:
        raise ModelError(f"{name}: example input of shape {tuple(x.shape)}: must be N x C x ...")
    return x


def from_torch(module, example_input, *, name: str | None = None,
               fallback: bool = False) -> Graph:
    """The ``Graph`` of a torch ``nn.Module`` traced with torch.fx on ``example_input``.

    Weights are copied (float32), batch norm is folded into the conv before it, and
    the module is run in eval mode (afterwards every submodule's ``training`` flag is
    as it was). The graph's input shape is ``example_input``'s (N x C x H x W). A
    forward returning a tuple, list or dict of tensors gives a graph with several
    outputs, in order (``Graph.outputs``: labels 'output0', 'output1'... or the dict's
    keys). Raises ``ModelError`` naming every unsupported call and parameter, with the
    list of supported ones; with ``fallback``, each such call is instead computed by
    torch itself (an ``ops.Fallback`` node, costed as vector work).
    """
    if not isinstance(module, nn.Module):
        raise ModelError(f"from_torch: expected a torch nn.Module, got {type(module).__name__}")
    name = name or type(module).__name__
    x = _example(example_input, name)
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        gm = _trace(module, name)
        info = _record(gm, x, name)
        build = _convert(gm, info, fallback)
        if build.unsupported or build.problems:
            raise build.refusal(name, supported_ops())
        return build.graph(tuple(x.shape), _output(gm, info, name), name, "PyTorch gives")
    finally:
        for m, training in modes:  # each submodule as it was: eval() set them all
            m.training = training


# ---- file.py:factory --------------------------------------------------------------------


def _load_file(path: Path):
    """Execute a user's python file as a module (its folder importable while it runs)."""
    unique = f"npusim_user_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(unique, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path}: not a python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file failed to import
        sys.modules.pop(unique, None)
        raise ModelError(f"{path}: importing it failed ({type(e).__name__}: {e})") from e
    finally:
        sys.path.remove(str(path.parent.resolve()))
    return module


def _input_shape(input_shape: Sequence[int] | None, spec: str) -> tuple[int, ...]:
    shape = tuple(DEFAULT_INPUT_SHAPE if input_shape is None else input_shape)
    if len(shape) < 2 or not all(isinstance(d, (int, np.integer)) and d >= 1 for d in shape):
        raise ModelError(f"{spec}: input_shape={shape}: must be positive integers N x C x H x W, "
                         "e.g. (1, 3, 224, 224)")
    return tuple(int(d) for d in shape)


def from_factory(spec: str, input_shape: Sequence[int] | None = None, *,
                 fallback: bool = False) -> Graph:
    """The ``Graph`` of ``path/to/file.py:factory``: a function returning an ``nn.Module``.

    The file is imported, ``factory()`` is called with no arguments, the module is
    put in eval mode and traced on a seeded random input of ``input_shape``
    (default 1 x 3 x 224 x 224). The graph is named after the factory; ``fallback`` as
    for ``from_torch``.
    """
    file_part, sep, func = spec.rpartition(":")
    if not sep or not file_part.endswith(".py") or not func:
        raise ModelError(f"{spec!r}: expected path/to/file.py:factory")
    path = Path(file_part)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    shape = _input_shape(input_shape, spec)
    net = _call_factory(_load_file(path), func, path, spec).eval()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    return from_torch(net, x, name=func, fallback=fallback)


def _call_factory(module, func: str, path: Path, spec: str):
    """``module.func()``, which must exist and return an ``nn.Module``."""
    factory = getattr(module, func, None)
    if not callable(factory):
        names = sorted(k for k, v in vars(module).items()
                       if callable(v) and getattr(v, "__module__", None) == module.__name__)
        raise ModelError(f"{path}: no function {func!r}; functions defined there: "
                         f"{', '.join(names) or 'none'}")
    try:
        net = factory()
    except Exception as e:  # the user's factory failed
        raise ModelError(f"{spec}: calling {func}() failed ({type(e).__name__}: {e})") from e
    if not isinstance(net, nn.Module):
        raise ModelError(f"{spec}: {func}() returned {type(net).__name__}, not a torch nn.Module")
    return net
