"""PyTorch calls -> lowering rules: one converter per kind of torch call, with the call's own
parameters, and the tables naming which modules, functions and tensor methods each handles.

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
import operator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..geometry import pair, same_padding
from . import lowering as rules
from .lowering import Lowering
from .lowering import Refusal as _Refusal


@dataclass(frozen=True)
class Ref:
    """A tensor computed from the network input: the IR node holding it and its shape.

    After ``F.pad`` it also carries the pending constant padding (``lowering.Pending``),
    which only a conv or pooling reading it can absorb.
    """

    name: str
    shape: tuple[int, ...]
    pad: rules.Pending = rules.NO_PAD
    parts: tuple = ()  # the shapes of a tuple of tensors (chunk, split), else ()


@dataclass(frozen=True)
class Parts:
    """The result of chunk / split: its input and one Slice op per part (read by getitem)."""

    source: Ref
    slices: tuple


@dataclass(frozen=True)
class Call:
    """What a converter knows of the node it converts besides its arguments."""

    name: str
    out_shape: tuple[int, ...]
    build: Lowering | None = None
    parts: tuple = ()


# ---- argument helpers -------------------------------------------------------------------


def _data(x, rank: int | None = None) -> Ref:
    """``x`` as a tensor computed from the network input, optionally of a given rank."""
    if not isinstance(x, Ref):
        raise _Refusal("its input is a constant, not a tensor computed from the network input")
    if x.pad:
        raise rules.not_absorbed("F.pad")
    rules.expect_rank(x.shape, rank)
    return x


def _unpad(x) -> rules.Pending:
    """The F.pad padding a 4-D input still owes (for the reader to absorb)."""
    pending = x.pad if isinstance(x, Ref) else rules.NO_PAD
    _data(dataclasses.replace(x, pad=rules.NO_PAD) if pending else x, 4)
    return pending


def _array(value, what: str) -> np.ndarray:
    """A constant tensor (parameter, buffer) as a float32 numpy copy."""
    if isinstance(value, Ref):
        raise _Refusal(f"{what} is computed from the network input; the IR needs a constant")
    return np.array(torch.as_tensor(value).detach().cpu().to(torch.float32).numpy())


def _optional(value, what: str) -> np.ndarray | None:
    """An optional constant tensor (a weight or bias that may be None)."""
    return None if value is None else _array(value, what)


def _number(value, what: str):
    if isinstance(value, Ref) or isinstance(value, torch.Tensor) and value.numel() != 1:
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
    edge_pad = rules.pad((ph, ph, pw, pw), m.padding_mode, 0.0, rules.NO_PAD)
    padded = c.build.add(f"{c.name}_pad", edge_pad, (x.name,))
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
        refs = [a for a in (input, other) if isinstance(a, Ref)]
        for r in refs:
            _data(r)
        if len(refs) == 2:
            return rules.binary(kind, [input.shape, other.shape])
        const = other if refs[0] is input else input
        return rules.with_constant(kind, refs[0].shape, _array(const, "the constant operand"),
                                   const_first=refs[0] is not input)
    return convert


def _cat(c, tensors, dim=0):
    computed = all(isinstance(t, Ref) for t in tensors)
    return rules.concat(dim, len(tensors[0].shape) if computed else 1, computed)


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
    return Parts(x, tuple(rules.split(axis, [p[axis] for p in c.parts], x.shape)))


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
    x = input if isinstance(input, Ref) else _data(input)
    fill = 0.0 if value is None else float(value)
    pad = [int(p) for p in pad]
    if min(pad) < 0 or any(pad[4:]) or len(pad) % 2 or mode not in ("constant", "reflect",
                                                                     "replicate"):
        raise _Refusal(f"pad={tuple(pad)}, mode={mode!r}: only constant, reflect or replicate, "
                       "non-negative padding of H and W is supported")
    left, right, top, bottom = (pad + [0, 0, 0, 0])[:4]
    result = rules.pad((top, bottom, left, right), mode, fill, x.pad)
    if isinstance(result, rules.Pending):
        return Ref(x.name, c.out_shape, result)
    return result, (x.name,)


def _getitem(c, input, index):
    """A part of chunk / split; ``x[...]`` of start:stop:step slices (and one ``...``): a
    Slice per axis it cuts (chained), a pass-through if it keeps the whole tensor."""
    if isinstance(input, Parts):
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


def kind_and_converter(gm, n):
    """How a node is named in messages, and its converter (None if unsupported)."""
    if n.op == "call_module":
        module = gm.get_submodule(n.target)
        conv = _MODULES.get(type(module))
        return _module_name(type(module)), (conv and (lambda c, *a, **k: conv(c, module, *a, **k)))
    if n.op == "call_method":
        return f"Tensor.{n.target}", _METHODS.get(n.target)
    return _function_name(n.target), _FUNCTIONS.get(n.target)
