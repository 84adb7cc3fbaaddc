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
whose inputs are the ``_Ref`` arguments in order, or a ``_Ref`` (a pass-through
such as dropout at inference).
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
from ..ir import Graph, Node, _padding4, _pair
from ..simulate import same_padding
from .lowering import Lowering

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:  # pragma: no cover - torch is an optional extra
    raise ModelError("PyTorch import needs torch: pip install 'npusim[torch]'") from e

DEFAULT_INPUT_SHAPE = (1, 3, 224, 224)


class _Refusal(Exception):
    """A supported op called with parameters the IR cannot express (the text says which)."""


@dataclass(frozen=True)
class _Ref:
    """A tensor computed from the network input: the IR node holding it and its shape.

    After ``F.pad`` it also carries the pending (top, bottom, left, right) padding and
    its fill value, which only a conv or pooling reading it can absorb.
    """

    name: str
    shape: tuple[int, ...]
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    fill: float = 0.0


@dataclass(frozen=True)
class _Call:
    """What a converter knows of the node it converts besides its arguments."""

    name: str
    out_shape: tuple[int, ...]


# ---- argument helpers -------------------------------------------------------------------


def _data(x, rank: int | None = None) -> _Ref:
    """``x`` as a tensor computed from the network input, optionally of a given rank."""
    if not isinstance(x, _Ref):
        raise _Refusal("its input is a constant, not a tensor computed from the network input")
    if any(x.pad):
        raise _Refusal("its input comes from F.pad; the IR takes explicit padding only into a "
                       "conv (zeros), max pooling (-inf) or average pooling (zeros)")
    if rank is not None and len(x.shape) != rank:
        raise _Refusal(f"needs a {rank}-D input, got shape {x.shape}")
    return x


def _unpad(x, fill: float) -> tuple[_Ref, tuple[int, int, int, int]]:
    """A 4-D input and the F.pad padding it still owes (to be added to the reader's padding)."""
    if isinstance(x, _Ref) and any(x.pad):
        if x.fill != fill:
            raise _Refusal(f"its input is padded with {x.fill}; only {fill} can be absorbed here")
        x, pad = dataclasses.replace(x, pad=(0, 0, 0, 0)), x.pad
    else:
        pad = (0, 0, 0, 0)
    _data(x, 4)
    return x, pad


def _plus(padding, extra) -> tuple[int, int, int, int]:
    """Own padding (int, (h, w) or 4-tuple) plus absorbed F.pad padding: (top, bottom, left,
    right) in pixels."""
    return tuple(a + b for a, b in zip(_padding4(padding, "padding"), extra, strict=True))


def _array(value, what: str) -> np.ndarray:
    """A constant tensor (parameter, buffer) as a float32 numpy copy."""
    if isinstance(value, _Ref):
        raise _Refusal(f"{what} is computed from the network input; the IR needs a constant")
    return np.array(torch.as_tensor(value).detach().cpu().to(torch.float32).numpy())


def _number(value, what: str):
    if isinstance(value, _Ref) or isinstance(value, torch.Tensor) and value.numel() != 1:
        raise _Refusal(f"{what} must be a number")
    return None if value is None else float(value)


# ---- converters: one per kind of call, with the torch call's own parameters --------------


def _conv2d(c, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    _, extra = _unpad(input, 0.0)
    w = _array(weight, "weight")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise _Refusal(f"padding={padding!r}: must be 'same', 'valid' or integers")
        padding = same_padding(w.shape[2:], _pair(dilation, "dilation", c.name)) \
            if padding == "same" else 0
    b = None if bias is None else _array(bias, "bias")
    return ops.Conv(w, b, tuple(_pair(stride, "stride", c.name)), _plus(padding, extra),
                    tuple(_pair(dilation, "dilation", c.name)), int(groups))


def _conv_module(c, m, x):
    if m.padding_mode != "zeros":
        raise _Refusal(f"padding_mode={m.padding_mode!r}: only 'zeros' is supported")
    return _conv2d(c, x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)


def _linear(c, input, weight, bias=None):
    if len(_data(input).shape) != 2:
        raise _Refusal(f"input shape {input.shape}: the IR's fully connected layer takes "
                       "N x features (flatten first)")
    w = _array(weight, "weight")
    return ops.Conv(w[:, :, None, None], None if bias is None else _array(bias, "bias"))


def _batch_norm(c, input, running_mean, running_var, weight=None, bias=None, training=False,
                momentum=0.1, eps=1e-5):
    _data(input)
    if training or running_mean is None or running_var is None:
        raise _Refusal("normalises by batch statistics (training mode or no running stats); "
                       "the IR folds running statistics only")
    mean, var = _array(running_mean, "running_mean"), _array(running_var, "running_var")
    gamma = np.ones_like(mean) if weight is None else _array(weight, "weight")
    beta = np.zeros_like(mean) if bias is None else _array(bias, "bias")
    return ops.BatchNorm.from_stats(gamma, beta, mean, var, float(eps))


def _relu(c, input, inplace=False):
    _data(input)
    return ops.Relu()


def _relu6(c, input, inplace=False):
    _data(input)
    return ops.Relu6()


def _clamp(c, input, min=None, max=None):
    _data(input)
    lo, hi = _number(min, "min"), _number(max, "max")
    if lo == 0 and hi is None:
        return ops.Relu()
    if lo == 0 and hi == 6:
        return ops.Relu6()
    raise _Refusal(f"clamps to [{lo}, {hi}]; the IR has ReLU [0, inf) and ReLU6 [0, 6] only")


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
    _, extra = _unpad(input, float("-inf"))
    if _pair(dilation, "dilation", c.name) != (1, 1):
        raise _Refusal(f"dilation={dilation}: the IR's pooling has no dilation")
    if return_indices:
        raise _Refusal("return_indices=True: the IR's pooling returns values only")
    return ops.MaxPool(kernel_size, stride or None, _plus(padding, extra), bool(ceil_mode))


def _avg_pool2d(c, input, kernel_size, stride=None, padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    _, extra = _unpad(input, 0.0)
    if divisor_override:
        raise _Refusal(f"divisor_override={divisor_override}: the IR divides by the window")
    if any(extra) and (ceil_mode or not count_include_pad):
        raise _Refusal("averages an F.pad output with ceil_mode or count_include_pad=False: the "
                       "padded zeros would be counted differently")
    return ops.AvgPool(kernel_size, stride or None, _plus(padding, extra), bool(ceil_mode),
                       bool(count_include_pad))


def _adaptive_avg_pool2d(c, input, output_size):
    (h, w), (p, q) = _data(input, 4).shape[2:], c.out_shape[2:]
    if (p, q) == (1, 1):
        return ops.GlobalAvgPool()
    if h % p == 0 and w % q == 0:
        return ops.AvgPool((h // p, w // q))
    raise _Refusal(f"output {p}x{q} from {h}x{w}: unequal windows; the IR needs an output of "
                   "1x1 or one that divides the input")


def _add(c, input, other, alpha=1):
    if alpha != 1:
        raise _Refusal(f"alpha={alpha}: only a plain sum is supported")
    refs = [a for a in (input, other) if isinstance(a, _Ref)]
    if len(refs) == 1:
        return _channel_shift(refs[0], other if refs[0] is input else input)
    if input.shape != other.shape:
        raise _Refusal(f"adds shapes {input.shape} and {other.shape}: the IR's Add does not "
                       "broadcast")
    return ops.Add()


def _channel_shift(x: _Ref, const) -> ops.Op:
    """``x + const`` for a scalar or per-channel constant: a batch-norm-like shift (foldable)."""
    value = _array(const, "the added constant")
    channels = x.shape[1]
    dims = (1,) * (len(x.shape) - value.ndim) + value.shape
    if len(dims) != len(x.shape) or any(d != 1 for i, d in enumerate(dims) if i != 1) \
            or dims[1] not in (1, channels):
        raise _Refusal(f"adds a constant of shape {value.shape} to {x.shape}: only a scalar or "
                       "one value per channel is supported")
    shift = np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)
    return ops.BatchNorm(np.ones(channels, np.float32), shift)


def _cat(c, tensors, dim=0):
    if not all(isinstance(t, _Ref) for t in tensors):
        raise _Refusal("concatenates a constant; the IR concatenates computed tensors only")
    axis = dim % len(tensors[0].shape)
    if axis == 0:
        raise _Refusal("concatenates along the batch axis")
    return ops.Concat(axis)


def _concatenate(c, tensors, axis=0):
    return _cat(c, tensors, axis)


def _reshape_to(c, input, *args, **kwargs):
    """flatten / view / reshape: the result shape is the one PyTorch produced."""
    x, out = _data(input), c.out_shape
    if len(out) < 2 or out[0] != x.shape[0]:
        raise _Refusal(f"reshapes {x.shape} to {out}: the IR keeps the batch axis first")
    return ops.Flatten() if len(out) == 2 else ops.Reshape(tuple(out[1:]))


def _interpolate(c, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None, antialias=False):
    (_, _, h, w), (_, _, p, q) = _data(input, 4).shape, c.out_shape
    if mode not in ("nearest", "bilinear") or antialias:
        raise _Refusal(f"mode={mode!r}{', antialias' if antialias else ''}: the IR resamples "
                       "'nearest' or 'bilinear' (no antialias)")
    if scale_factor is not None and not recompute_scale_factor:
        op = ops.Upsample(scale_factor, mode, bool(align_corners))  # samples at 1/scale
    elif p % h == 0 and q % w == 0:
        op = ops.Upsample((p // h, q // w), mode, bool(align_corners))
    else:
        op = ops.Upsample(1, mode, bool(align_corners), (p, q))
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
    axis = dim % len(input.shape)
    if axis == 0:
        raise _Refusal("softmax over the batch axis")
    return ops.Softmax(axis)


def _pad(c, input, pad, mode="constant", value=None):
    """F.pad: held on the tensor until a conv or pooling absorbs it (see ``_unpad``)."""
    x = input if isinstance(input, _Ref) else _data(input)
    fill = 0.0 if value is None else float(value)
    pad = [int(p) for p in pad]
    if mode != "constant" or min(pad) < 0 or any(pad[4:]) or len(pad) % 2:
        raise _Refusal(f"pad={tuple(pad)}, mode={mode!r}: only constant, non-negative padding of "
                       "H and W is supported")
    if any(x.pad) and x.fill != fill:
        raise _Refusal(f"pads with {fill} what is already padded with {x.fill}")
    left, right, top, bottom = (pad + [0, 0, 0, 0])[:4]
    return _Ref(x.name, c.out_shape, _plus(x.pad, (top, bottom, left, right)), fill)


def _getitem(c, input, index):
    """``x[...]`` that keeps the whole tensor (a crop to the size it already has) passes
    through; any real slicing is refused."""
    x = _data(input)
    parts = index if isinstance(index, tuple) else (index,)
    whole = all(p is Ellipsis or isinstance(p, slice) and p.start in (None, 0)
                and p.step in (None, 1) for p in parts)
    if not whole or c.out_shape != x.shape:
        raise _Refusal(f"indexing {x.shape} to {c.out_shape}: the IR has no slicing")
    return x


def _dropout(c, input, p=0.5, training=True, inplace=False):
    if training:
        raise _Refusal("training=True drops at random; pass training=self.training")
    return _data(input)


def _identity(c, input, *args, **kwargs):
    return _data(input)


_MODULES = {
    nn.Conv2d: _conv_module,
    nn.Linear: lambda c, m, x: _linear(c, x, m.weight, m.bias),
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
    (_add, operator.add, operator.iadd, torch.add),
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
    "add": _add, "add_": _add, "flatten": _reshape_to, "view": _reshape_to,
    "reshape": _reshape_to, "softmax": _softmax, "contiguous": _identity,
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
            info[n] = _Ref("input" if n.op == "placeholder" else n.name, _shape(out)) \
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


def _convert(gm, info: dict) -> Lowering:
    build = Lowering()
    for n in gm.graph.nodes:
        if not _needs_op(n, info):
            continue
        kind, conv = _kind_and_converter(gm, n)
        if conv is None:
            build.unsupported.append((kind, n.name))
            continue
        args = torch.fx.node.map_arg(n.args, info.__getitem__)
        kwargs = torch.fx.node.map_arg(n.kwargs, info.__getitem__)
        shape = info[n].shape
        try:
            result = conv(_Call(n.name, shape), *args, **kwargs)
        except (_Refusal, TypeError, LayerError) as e:
            build.problems.append((kind, n.name, str(e)))
            continue
        if isinstance(result, _Ref):  # a pass-through: readers read its input
            info[n] = result
            continue
        build.nodes.append(Node(n.name, result, tuple(r.name for r in _refs(args, kwargs))))
        build.expected[n.name] = shape
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
    if not isinstance(ref, _Ref) or any(ref.pad) or not ref.shape:
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


def from_torch(module, example_input, *, name: str | None = None) -> Graph:
    """The ``Graph`` of a torch ``nn.Module`` traced with torch.fx on ``example_input``.

    Weights are copied (float32), batch norm is folded into the conv before it, and
    the module is run in eval mode (afterwards every submodule's ``training`` flag is
    as it was). The graph's input shape is ``example_input``'s (N x C x H x W). A
    forward returning a tuple, list or dict of tensors gives a graph with several
    outputs, in order (``Graph.outputs``: labels 'output0', 'output1'... or the dict's
    keys). Raises ``ModelError`` naming every unsupported call and parameter, with the
    list of supported ones.
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
        build = _convert(gm, info)
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


def from_factory(spec: str, input_shape: Sequence[int] | None = None) -> Graph:
    """The ``Graph`` of ``path/to/file.py:factory``: a function returning an ``nn.Module``.

    The file is imported, ``factory()`` is called with no arguments, the module is
    put in eval mode and traced on a seeded random input of ``input_shape``
    (default 1 x 3 x 224 x 224). The graph is named after the factory.
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
    return from_torch(net, x, name=func)


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
