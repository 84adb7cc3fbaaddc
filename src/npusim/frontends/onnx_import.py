"""ONNX -> ``ir.Graph``: onnx's shape inference, one converter per op type, batch norm folded.

The file is read, checked (``onnx.checker``) and shape-inferred with data
propagation, so every tensor's shape is known before conversion: ``Reshape`` and
``Flatten`` take their result shape from inference (the ``Shape -> Gather ->
Concat`` chains exporters emit for ``x.view(x.size(0), -1)`` need not be
evaluated), and after the graph is built each IR node's shape is checked against
onnx's. Checker and inference see a skeleton of the model whose large
initialisers are typed inputs (no weight is serialised again), and in which small
constants that inference cannot propagate itself (the pads exporters compute
with Slice/Transpose chains) have been evaluated into ``Constant`` nodes.
Which nodes become IR ops:

- a node on the data path (reached backwards from the graph output through the
  inputs each op reads as data: input 0 of ``Conv``, ``Reshape``, ``Resize``...,
  every input of ``Add``, ``Mul``... and ``Concat``) and computed from the graph input;
- nodes off the data path (shape arithmetic) are skipped; constant inputs
  (weights, Clip bounds, Resize scales) are initialisers or are computed from
  them (``Constant``, ``DequantizeLinear`` of int8 weights, a weight's
  ``Flatten``...) by onnx's own reference evaluator.

A ``Pad`` (constant mode) is held on its tensor and added to the padding of the
``Conv`` (zeros), ``MaxPool`` (-inf) or ``AveragePool`` (zeros, counted) that
reads it; any other reader is refused.

Resampling is mapped only where it is exact: the 1-D sampling weights of the ONNX
``Resize`` (its coordinate transformation and nearest rounding, per the ONNX
operator spec) are compared with those of the IR's ``Upsample`` at the actual
sizes, and the first IR variant (nearest; bilinear half-pixel; bilinear
align_corners) that matches is used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import ops
from ..errors import LayerError, ModelError
from ..geometry import same_auto_padding
from ..ir import Graph
from . import lowering as rules
from . import onnx_file
from .lowering import Lowering
from .lowering import Refusal as _Refusal
from .onnx_file import SMALL_CONSTANT

WEIGHT_DTYPES = ("float32", "float16", "float64", "int8", "uint8")


@dataclass
class _Model:
    """What conversion needs of the inferred model: shapes, constants, producers."""

    path: Path
    opset: int
    shapes: dict
    initializers: dict
    producers: dict
    depends: set
    constants: dict = dataclasses.field(default_factory=dict)
    ir_of: dict = dataclasses.field(default_factory=dict)  # ONNX tensor -> IR node
    pending: dict = dataclasses.field(default_factory=dict)  # tensor -> lowering.Pending


@dataclass
class _Node:
    """One ONNX node as a converter sees it."""

    proto: object
    name: str
    model: _Model
    build: Lowering | None = None
    absorbed: bool = False  # a Pad before input 0 was folded into this node's padding

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    def attr(self, key: str, default=None):
        from onnx import helper

        for a in self.proto.attribute:
            if a.name == key:
                value = helper.get_attribute_value(a)
                return value.decode() if isinstance(value, bytes) else value
        return default

    def has_input(self, i: int) -> bool:
        return i < len(self.proto.input) and self.proto.input[i] != ""

    def shape(self, tensor: str) -> tuple[int, ...]:
        shape = self.model.shapes.get(tensor)
        if shape is None or None in shape:
            raise _Refusal(f"the shape of tensor {tensor!r} is unknown after shape inference")
        return shape

    def in_shape(self, i: int = 0) -> tuple[int, ...]:
        return self.shape(self.proto.input[i])

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.shape(self.proto.output[0])

    def take_pad(self) -> rules.Pending:
        """The constant padding a Pad before input 0 still owes, absorbed here."""
        self.absorbed = True
        return self.model.pending.get(self.proto.input[0], rules.NO_PAD)

    def const(self, i: int) -> np.ndarray | None:
        """Constant input ``i`` as a numpy array, or None if the input is absent."""
        return _constant(self.model, self.proto.input[i]) if self.has_input(i) else None

    def weight(self, i: int) -> np.ndarray | None:
        """Constant input ``i`` as float32 (int8/float16/float32 initialisers), or None."""
        value = self.const(i)
        if value is not None and value.dtype.name not in WEIGHT_DTYPES:
            raise _Refusal(f"input {self.proto.input[i]!r} has element type "
                           f"{_element_name(value.dtype)}; weights must be one of "
                           f"{', '.join(map(_element_name, WEIGHT_DTYPES))}")
        return None if value is None else value.astype(np.float32, copy=False)


def _element_name(dtype) -> str:
    """The onnx.TensorProto name of a numpy dtype: int64 -> 'INT64'."""
    from onnx import helper

    return onnx_file.element_type(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


MAX_SHAPE_PASSES = 8  # rounds of folding shape-derived constants and inferring again


# ---- constants --------------------------------------------------------------------------


def _constant(model: _Model, tensor: str) -> np.ndarray:
    """A tensor that does not depend on the graph input: an initialiser, or the output of
    nodes on constants (``Constant``, ``DequantizeLinear``, a weight's ``Flatten``...) run
    by onnx's reference evaluator. Cached per tensor."""
    from onnx import numpy_helper

    if tensor in model.constants:
        return model.constants[tensor]
    if tensor in model.initializers:
        value = numpy_helper.to_array(model.initializers[tensor])
    elif tensor in model.producers and model.producers[tensor].op_type in ("Shape", "Size"):
        value = _static_shape(model, model.producers[tensor])
    elif tensor in model.depends or tensor not in model.producers:
        how = "is computed from the graph input" if tensor in model.depends else "is not defined"
        raise _Refusal(f"input {tensor!r} {how}; the IR needs a constant here")
    else:
        value = _evaluate(model, model.producers[tensor], tensor)
    model.constants[tensor] = value
    return value


def _static_shape(model: _Model, node) -> np.ndarray:
    """The value of a Shape (its ``start``, ``end``) or Size node from inferred shapes."""
    from onnx import helper

    shape = model.shapes.get(node.input[0])
    if (shape is None or None in shape) and node.input[0] not in model.depends:
        shape = _constant(model, node.input[0]).shape  # a constant computed from shapes
    if shape is None or None in shape:
        raise _Refusal(f"the shape of {node.input[0]!r} is not known yet")
    if node.op_type == "Size":
        return np.array(math.prod(shape), np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))], np.int64)


def _evaluate(model: _Model, node, tensor: str) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    feeds = {t: _constant(model, t) for t in node.input if t}
    try:
        outputs = ReferenceEvaluator(node, opsets={"": model.opset}).run(None, feeds)
    except Exception as e:  # the reference evaluator raises many types for ops it lacks
        raise _Refusal(f"cannot evaluate constant {tensor!r} (op {node.op_type}): "
                       f"{type(e).__name__}: {e}") from e
    return np.asarray(outputs[list(node.output).index(tensor)])


# ---- shared geometry --------------------------------------------------------------------


def _pads(c: _Node, kernel, strides, dilations) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) from ``pads`` or ``auto_pad`` (SAME_UPPER/SAME_LOWER/VALID)."""
    auto = c.attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        t, left, b, r = c.attr("pads", [0, 0, 0, 0])
        return (t, b, left, r)
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise _Refusal(f"auto_pad={auto!r}: must be NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    return same_auto_padding(c.in_shape(0)[2:], kernel, strides, dilations,
                             auto == "SAME_UPPER")


def _pair_attr(c: _Node, key: str, default=(1, 1)) -> tuple[int, int]:
    value = tuple(c.attr(key, default))
    if len(value) != 2:
        raise _Refusal(f"{key}={list(value)}: only 2-D (H, W) operations are supported")
    return value  # type: ignore[return-value]


def _data_input(c: _Node, rank: int | None = None) -> tuple[int, ...]:
    shape = c.in_shape(0)
    if rank is not None and len(shape) != rank:
        raise _Refusal(f"needs a {rank}-D input, got shape {shape}")
    return shape


# ---- converters: one per op type --------------------------------------------------------


def _conv(c: _Node) -> ops.Op:
    _data_input(c, 4)
    w, b = c.weight(1), c.weight(2)
    strides, dilations = _pair_attr(c, "strides"), _pair_attr(c, "dilations")
    if w is None or w.ndim != 4:
        raise _Refusal("only 2-D convolution with a constant K x C x R x S weight is supported")
    return rules.conv(w, b, strides, _pads(c, w.shape[2:], strides, dilations), dilations,
                      c.attr("group", 1), c.take_pad())


def _conv_transpose(c: _Node):
    _data_input(c, 4)
    w = c.weight(1)
    if w is None or w.ndim != 4:
        raise _Refusal("only 2-D transposed convolution with a constant weight is supported")
    if _pair_attr(c, "dilations") != (1, 1) or c.attr("output_shape") is not None \
            or c.attr("auto_pad", "NOTSET") != "NOTSET":
        raise _Refusal("dilations, output_shape and auto_pad: only dilation 1 and explicit pads")
    t, left, b, r = c.attr("pads", [0, 0, 0, 0])
    oh, ow = _pair_attr(c, "output_padding", (0, 0))
    if (t, left) != (b, r):  # asymmetric pads are symmetric pads and less output padding
        if b > t or r > left:
            raise _Refusal(f"pads {[t, left, b, r]}: end pads above begin pads")
        oh, ow = oh + t - b, ow + left - r
    x = c.proto.input[0]
    return c.build.conv_transpose(c.name, c.model.ir_of.get(x, x), w, c.weight(2),
                                  _pair_attr(c, "strides"), (t, left), (oh, ow),
                                  int(c.attr("group", 1)))


def _gemm(c: _Node) -> ops.Op:
    if c.attr("transA", 0):
        raise _Refusal("transA=1: the IR keeps the batch on axis 0 of A")
    _data_input(c, 2)
    b = c.weight(1)
    if b is None or b.ndim != 2:
        raise _Refusal("B must be a constant matrix")
    w = b if c.attr("transB", 0) else b.T
    if c.attr("alpha", 1.0) != 1.0:
        w = w * np.float32(c.attr("alpha"))
    bias = c.weight(2)
    if bias is not None:
        bias = rules.channel_values(bias * np.float32(c.attr("beta", 1.0)), c.out_shape, "C")
    return rules.fully_connected(w, bias)


def _matmul(c: _Node):
    b = c.weight(1)
    if b is None or b.ndim != 2:
        raise _Refusal("the second operand must be a constant matrix")
    x = c.proto.input[0]
    return c.build.linear(c.name, c.model.ir_of.get(x, x), c.in_shape(0), b.T, None)


def _clip(c: _Node) -> ops.Op:
    if c.model.opset < 11:
        lo, hi = c.attr("min"), c.attr("max")
    else:
        lo, hi = (None if v is None else float(v) for v in (c.const(1), c.const(2)))
    return rules.clip(lo, hi)


def _pool(c: _Node) -> ops.Op:
    _data_input(c, 4)
    kernel, strides = _pair_attr(c, "kernel_shape"), _pair_attr(c, "strides")
    if _pair_attr(c, "dilations") != (1, 1):
        raise _Refusal(f"dilations={c.attr('dilations')}: the IR's pooling has no dilation")
    pads = _pads(c, kernel, strides, (1, 1))
    ceil = bool(c.attr("ceil_mode", 0))
    if c.op_type == "MaxPool":
        return rules.max_pool(kernel, strides, pads, ceil, c.take_pad())
    return rules.avg_pool(kernel, strides, pads, ceil, bool(c.attr("count_include_pad", 0)),
                          c.take_pad())


def _global_avg_pool(c: _Node) -> ops.Op:
    _data_input(c, 4)
    return ops.GlobalAvgPool()


_ARITH = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min",
          "Pow": "pow"}


def _arith(c: _Node) -> ops.Op:
    """Add, Sub, Mul, Div, Max, Min of two inputs with broadcasting; a constant operand is a
    per-channel affine where it can be (``lowering.with_constant``)."""
    if len(c.proto.input) != 2:
        raise _Refusal(f"{len(c.proto.input)} inputs: the IR computes {c.op_type} of two")
    kind = _ARITH[c.op_type]
    data = [t for t in c.proto.input if t in c.model.depends]
    if len(data) == 2:
        return rules.binary(kind, [c.shape(t) for t in data])
    first = c.proto.input[0] in c.model.depends
    const = c.const(1 if first else 0)
    if not np.issubdtype(const.dtype, np.floating):
        raise _Refusal(f"constant operand of element type {_element_name(const.dtype)}: must "
                       "be float")
    return rules.with_constant(kind, c.shape(data[0]), const, const_first=not first)


def _concat(c: _Node) -> ops.Op:
    if any(t not in c.model.depends for t in c.proto.input):
        raise _Refusal("concatenates a constant; the IR concatenates computed tensors only")
    return rules.concat(c.attr("axis"), len(c.out_shape))


def _reshape(c: _Node) -> ops.Op:
    """Flatten / Reshape / Squeeze / Unsqueeze: the result shape shape inference gives."""
    return rules.reshape(c.in_shape(0), c.out_shape)


def _reduce(c: _Node) -> ops.Op:
    """ReduceMean / ReduceMax: axes as attribute (before opset 18) or input 1."""
    axes = c.attr("axes") if c.model.opset < 18 else c.const(1)
    if axes is None or len(axes) == 0:
        if c.attr("noop_with_empty_axes", 0):
            raise _Refusal("noop_with_empty_axes=1 with no axes: nothing to reduce")
        axes = range(len(c.in_shape(0)))
    kind = "mean" if c.op_type == "ReduceMean" else "max"
    return rules.reduce(kind, [int(a) for a in axes], bool(c.attr("keepdims", 1)), c.in_shape(0))


def _transpose(c: _Node) -> ops.Op:
    ndim = len(c.in_shape(0))
    return rules.transpose(c.attr("perm", range(ndim - 1, -1, -1)), ndim)


def _split(c: _Node) -> list:
    """Split: one Slice per output, sized as shape inference gives them."""
    x = c.in_shape(0)
    axis = c.attr("axis", 0) % len(x)
    return rules.split(axis, [c.shape(t)[axis] for t in c.proto.output], x)


def _slice(c: _Node):
    """Slice: a chain of single-axis Slices (step >= 1); a pass-through if it keeps all."""
    x = c.in_shape(0)
    if c.model.opset < 10:
        starts, ends, axes, steps = c.attr("starts"), c.attr("ends"), c.attr("axes"), None
    else:
        starts, ends, axes, steps = (c.const(i) for i in range(1, 5))
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    cuts = []
    for a, b, e, s in zip(axes, starts, ends, steps, strict=True):
        a, s = int(a) % len(x), int(s)
        if s < 1:
            raise _Refusal(f"step {s} on axis {a}: the IR slices with step >= 1")
        part = slice(*slice(int(b), int(e), s).indices(x[a]))
        if part.indices(x[a]) != (0, x[a], 1):
            cuts.append(ops.Slice(a, part.start, part.stop, part.step))
    if not cuts:
        return c.proto.input[0]
    if c.proto.input[0] in c.model.pending:
        raise _Refusal("slices a Pad output: the IR takes padding only into a conv or pool")
    x = c.proto.input[0]
    return c.build.chain([f"{c.name}_part{k}" for k in range(len(cuts) - 1)], cuts,
                         c.model.ir_of.get(x, x))


def _instance_norm(c: _Node) -> ops.Op:
    """InstanceNormalization (torch's export of GroupNorm, between two Reshapes): each
    channel over the remaining axes, a GroupNorm of one channel per group."""
    channels = c.in_shape(0)[1]
    return rules.group_norm(channels, channels, c.weight(1), c.weight(2),
                            c.attr("epsilon", 1e-5))


def _layer_norm(c: _Node) -> ops.Op:
    x = c.in_shape(0)
    axis = c.attr("axis", -1) % len(x)
    scale = c.weight(1)
    if c.attr("stash_type", 1) != 1:
        raise _Refusal("stash_type other than 1 (float32 statistics)")
    return rules.layer_norm(x[axis:], scale, c.weight(2), c.attr("epsilon", 1e-5))


def _batch_norm(c: _Node) -> ops.Op:
    if c.attr("training_mode", 0):
        raise _Refusal("training_mode=1: the IR folds running statistics only")
    gamma, beta, mean, var = (c.weight(i) for i in range(1, 5))
    return rules.batch_norm(gamma, beta, mean, var, c.attr("epsilon", 1e-5))


def _prelu(c: _Node) -> ops.Op:
    return ops.PRelu(rules.channel_values(c.weight(1), c.in_shape(0), "slope"))


def _softmax(c: _Node) -> ops.Op:
    shape = c.in_shape(0)
    axis = c.attr("axis", 1 if c.model.opset < 13 else -1) % len(shape)
    if c.model.opset < 13 and math.prod(shape[axis + 1:]) > 1:
        raise _Refusal(f"opset {c.model.opset} Softmax over axes {axis}.. of {shape} (flattened); "
                       "the IR normalises one axis")
    return rules.softmax(axis, len(shape))


def _pad(c: _Node) -> rules.Pending | ops.Op:
    if c.model.opset < 11:
        pads, fill = c.attr("pads"), c.attr("value", 0.0)
    else:
        pads = c.const(1)
        fill = 0.0 if c.const(2) is None else float(c.const(2))
        if c.has_input(3):
            raise _Refusal("Pad with axes: give pads for all 4 axes")
    pads = [int(p) for p in pads]
    mode = c.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge") or len(pads) != 8 or min(pads) < 0 \
            or any(pads[i] for i in (0, 1, 4, 5)):
        raise _Refusal(f"pads={pads}, mode={mode!r}: only constant, reflect or edge, "
                       "non-negative padding of H and W of a 4-D tensor is supported")
    pending = c.model.pending.get(c.proto.input[0], rules.NO_PAD)
    return rules.pad((pads[2], pads[6], pads[3], pads[7]),
                     {"edge": "replicate"}.get(mode, mode), float(fill), pending)


def _dropout(c: _Node):
    training = c.const(2) if c.model.opset >= 12 else None
    if training is not None and bool(training):
        raise _Refusal("training_mode=True drops at random")
    return c.proto.input[0]


def _resize(c: _Node) -> ops.Op:
    mode = c.attr("mode", "nearest")
    old = c.op_type == "Upsample" or c.model.opset < 11
    if old:  # Upsample-7/9 and Resize-10: asymmetric coordinates, scales as attr or input 1
        scales = c.attr("scales") if c.model.opset < 9 else c.const(1)
        transform, rounding = "asymmetric", "simple"
    else:
        scales = c.const(2)
        transform = c.attr("coordinate_transformation_mode", "half_pixel")
        rounding = c.attr("nearest_mode", "round_prefer_floor")
        _refuse_resize_extras(c)
    mode = {"bilinear": "linear"}.get(mode, mode)
    if mode not in ("nearest", "linear"):
        raise _Refusal(f"mode={mode!r}: the IR resamples 'nearest' or 'linear' only")
    return _resample(c, mode, transform, rounding, scales)


def _refuse_resize_extras(c: _Node) -> None:
    for key, default in (("antialias", 0), ("exclude_outside", 0),
                         ("keep_aspect_ratio_policy", "stretch")):
        if c.attr(key, default) != default:
            raise _Refusal(f"{key}={c.attr(key)!r}: only {default!r} is supported")
    if c.attr("axes") is not None:
        raise _Refusal(f"axes={c.attr('axes')}: give scales or sizes for all 4 axes")


def _resample(c: _Node, mode: str, transform: str, rounding: str, scales) -> ops.Op:
    x, out = _data_input(c, 4), c.out_shape
    if x[:2] != out[:2]:
        raise _Refusal(f"resizes {x} to {out}: the IR resizes H and W only")
    scales = (out[2] / x[2], out[3] / x[3]) if scales is None or len(scales) == 0 \
        else tuple(float(s) for s in scales[2:])
    want = [rules.sampling_weights(n, m, s, mode, transform, rounding)
            for n, m, s in zip(x[2:], out[2:], scales, strict=True)]
    op = rules.exact_upsample(x[2:], out[2:], "nearest" if mode == "nearest" else "bilinear",
                              want)
    if op is not None:
        return op
    raise _Refusal(f"mode={mode!r} with coordinate_transformation_mode={transform!r} and "
                   f"nearest_mode={rounding!r} from {x[2:]} to {out[2:]} samples differently "
                   "from the IR's Upsample (nearest: floor(dst * in/out); linear: half-pixel "
                   "or align_corners)")


# op type -> (converter, how many leading inputs are data; None = all)
_CONVERTERS = {
    "Conv": (_conv, 1), "ConvTranspose": (_conv_transpose, 1), "Gemm": (_gemm, 1),
    "MatMul": (_matmul, 1),
    "Relu": (lambda c: ops.Relu(), 1), "PRelu": (_prelu, 1),
    "LeakyRelu": (lambda c: ops.LeakyRelu(c.attr("alpha", 0.01)), 1), "Clip": (_clip, 1),
    "Sigmoid": (lambda c: ops.Sigmoid(), 1), "Tanh": (lambda c: ops.Tanh(), 1),
    "HardSigmoid": (lambda c: ops.HardSigmoid(c.attr("alpha", 0.2), c.attr("beta", 0.5)), 1),
    "HardSwish": (lambda c: ops.HardSwish(), 1), "Erf": (lambda c: ops.Erf(), 1),
    "Sqrt": (lambda c: ops.Sqrt(), 1),
    "Gelu": (lambda c: ops.Gelu(c.attr("approximate", "none")), 1),
    "MaxPool": (_pool, 1), "AveragePool": (_pool, 1), "GlobalAveragePool": (_global_avg_pool, 1),
    **{op: (_arith, None) for op in _ARITH}, "Concat": (_concat, None),
    "ReduceMean": (_reduce, 1), "ReduceMax": (_reduce, 1), "Transpose": (_transpose, 1),
    "Split": (_split, 1), "Flatten": (_reshape, 1), "Reshape": (_reshape, 1),
    "Squeeze": (_reshape, 1), "Unsqueeze": (_reshape, 1), "LayerNormalization": (_layer_norm, 1),
    "InstanceNormalization": (_instance_norm, 1),
    "BatchNormalization": (_batch_norm, 1), "Resize": (_resize, 1),
    "Upsample": (_resize, 1), "Softmax": (_softmax, 1), "Identity": (lambda c: c.proto.input[0], 1),
    "Dropout": (_dropout, 1), "Pad": (_pad, 1), "Slice": (_slice, 1),
}


def supported_ops() -> list[str]:
    """The ONNX op types the importer maps to the IR."""
    return sorted(_CONVERTERS)


# ---- conversion -------------------------------------------------------------------------


def _analyse(model, path: Path, input_name: str) -> _Model:
    """Producers, initialisers and the tensors computed from the input (shapes come later)."""
    g = model.graph
    producers = {out: n for n in g.node for out in n.output}
    depends = {input_name}
    for n in g.node:  # a tensor's Shape is a constant: every shape is static here
        if n.op_type not in ("Shape", "Size") and any(i in depends for i in n.input):
            depends.update(n.output)
    return _Model(path, onnx_file.opset(model), {}, {t.name: t for t in g.initializer}, producers,
                  depends)




def _fold_small_constants(model, m: _Model) -> int:
    """Replace each node that computes a small constant read by the data path (the pads a
    Pad reads from a Slice/Transpose chain...) with a ``Constant`` holding its value, so
    that shape inference sees values it cannot propagate itself."""
    from onnx import helper, numpy_helper

    folded = 0
    frontier = {t for n in model.graph.node if m.depends.intersection(n.output)
                for t in n.input if t and t not in m.depends and t not in m.initializers}
    for node in model.graph.node:
        if len(node.output) != 1 or node.output[0] not in frontier or node.op_type == "Constant":
            continue
        try:
            value = _constant(m, node.output[0])
        except _Refusal:
            continue  # reported later if the data path really needs it
        if value.size <= SMALL_CONSTANT:
            node.CopyFrom(helper.make_node("Constant", [], list(node.output), name=node.name,
                                           value=numpy_helper.from_array(value)))
            folded += 1
    return folded


def _shapes(model) -> dict:
    g = model.graph
    return {v.name: onnx_file.static_dims(v) for v in [*g.input, *g.value_info, *g.output]}


def _data_inputs(proto) -> list[str]:
    """The inputs an op reads as data (the rest are weights, shapes, scales...)."""
    count = _CONVERTERS[proto.op_type][1] if proto.op_type in _CONVERTERS else None
    return list(proto.input if count is None else proto.input[:count])


def _needed(model, outputs: list[str], fallback: bool = False) -> set:
    """Nodes (by index) on the data path from the graph outputs back to the input; with
    ``fallback``, through every input (a node that falls back may read as data an input its
    converter takes as a weight, as attention's MatMul of two activations does)."""
    wanted, needed = set(outputs), set()
    for i in reversed(range(len(model.graph.node))):
        n = model.graph.node[i]
        if not wanted.intersection(n.output):
            continue
        needed.add(i)
        wanted.update(n.input if fallback else _data_inputs(n))
    return needed


def _names(model) -> list[str]:
    """A unique IR name per node: its ONNX name, else op type and index."""
    used, names = {"input"}, []
    for i, n in enumerate(model.graph.node):
        base = n.name or f"{n.op_type}_{i}"
        name, k = base, 1
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        names.append(name)
    return names


def _output_names(model) -> list[str]:
    return [o.name for o in model.graph.output]


def _convert(model, m: _Model, input_name: str, fallback: bool) -> tuple[Lowering, dict]:
    """Each node on the data path as IR nodes; with ``fallback``, a node the IR cannot
    express as a ``Fallback`` running it alone in onnxruntime."""
    build, ir_of = Lowering(), m.ir_of
    ir_of[input_name] = "input"
    needed, names = _needed(model, _output_names(model), fallback), _names(model)
    for i, proto in enumerate(model.graph.node):
        if i not in needed or not m.depends.intersection(proto.output):
            continue
        c = _Node(proto, names[i], m, build)
        if proto.op_type not in _CONVERTERS or proto.domain not in ("", "ai.onnx"):
            if not (fallback and _fall_back(c, model, needed)):
                build.unsupported.append((proto.op_type, names[i]))
            continue
        try:
            result = _CONVERTERS[proto.op_type][0](c)
            if proto.op_type != "Split":
                _check_extra_outputs(proto, model, needed)
            _check_pads_absorbed(c, m)
            if isinstance(result, (str, rules.Pending)):  # a pass-through (Identity, Dropout, Pad)
                source = proto.input[0]
                ir_of[proto.output[0]] = ir_of.get(source, source)
                _carry_pad(m, proto, result)
                continue
            _add_nodes(c, result)
        except (_Refusal, LayerError) as e:
            if not (fallback and _fall_back(c, model, needed)):
                build.problems.append((proto.op_type, names[i], str(e)))
    return build, ir_of


def _fall_back(c: _Node, model, needed: set) -> bool:
    """Add node ``c`` as a ``Fallback`` that onnxruntime computes alone (its constant
    inputs as initialisers); False where it cannot be (an input from Pad, several
    outputs read, a constant input not evaluable)."""
    from onnx import TensorProto, helper, numpy_helper

    m, proto = c.model, c.proto
    data = [t for t in proto.input if t and t in m.depends]
    try:
        _check_extra_outputs(proto, model, needed)
        constants = [numpy_helper.from_array(_constant(m, t), t) for t in proto.input
                     if t and t not in m.depends]
        shapes = [c.shape(t) for t in data]
        out_shape = c.out_shape
    except (_Refusal, LayerError):
        return False
    if not data or any(t in m.pending or t not in m.ir_of for t in data):
        return False
    graph = helper.make_graph(
        [proto], proto.op_type,
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, ["N", *s[1:]])
         for t, s in zip(data, shapes, strict=True)],
        [helper.make_tensor_value_info(proto.output[0], TensorProto.FLOAT, None)], constants)
    single = helper.make_model(graph, opset_imports=list(model.opset_import),
                               ir_version=model.ir_version)
    call = onnx_file.NodeSession(single.SerializeToString(), tuple(data))
    op = ops.Fallback(f"ONNX {proto.op_type}", call, tuple(shapes), out_shape)
    m.ir_of[proto.output[0]] = c.build.add(c.name, op, tuple(m.ir_of[t] for t in data),
                                           out_shape)
    return True


def _add_nodes(c: _Node, result) -> None:
    """The IR node(s) of one converted ONNX node: an op reading its data inputs, an
    (op, inputs) pair, or (Split) one op per output, named ``<node>_<k>``."""
    m, proto = c.model, c.proto
    if isinstance(result, list):
        for k, (op, out) in enumerate(zip(result, proto.output, strict=True)):
            m.ir_of[out] = c.build.add(f"{c.name}_{k}", op, (m.ir_of[proto.input[0]],),
                                       c.shape(out))
        return
    op, inputs = result if isinstance(result, tuple) else \
        (result, tuple(m.ir_of.get(t, t) for t in _data_inputs(proto) if t in m.depends))
    m.ir_of[proto.output[0]] = c.build.add(c.name, op, inputs, c.out_shape)


def _check_pads_absorbed(c: _Node, m: _Model) -> None:
    pending = [t for t in c.proto.input if t in m.pending]
    if pending and not (c.absorbed or c.op_type in ("Pad", "Identity", "Dropout", "Slice")):
        raise rules.not_absorbed("Pad")


def _carry_pad(m: _Model, proto, result) -> None:
    """Identity/Dropout pass a pending Pad on; a Pad sets (or accumulates) it."""
    if isinstance(result, rules.Pending):
        m.pending[proto.output[0]] = result
    elif proto.input[0] in m.pending:
        m.pending[proto.output[0]] = m.pending[proto.input[0]]


def _check_extra_outputs(proto, model, needed: set) -> None:
    """Refuse if a second output (MaxPool indices, Dropout mask, BN statistics) is read."""
    read = {t for i, n in enumerate(model.graph.node) if i in needed for t in n.input}
    read.update(_output_names(model))
    extra = [t for t in proto.output[1:] if t and t in read]
    if extra:
        raise _Refusal(f"its extra outputs {extra} are used; the IR computes output 0 only")


def from_onnx(path: str | Path, input_shape: Sequence[int] | None = None, *,
              batch: int | None = None, fallback: bool = False) -> Graph:
    """The ``Graph`` of an ONNX file, weights as float32, batch norm folded.

    ``input_shape`` (N x C x H x W) fixes a dynamic input shape and must agree with
    every fixed dimension of the file's; ``batch`` fixes a dynamic batch dimension
    (and is refused where the file fixes the batch to another value). Raises
    ``ModelError`` for a file that is not ONNX or is truncated, a dynamic shape left
    unfixed, and (one message) every unsupported op, grouped by op type with its node
    names, and the supported list; with ``fallback``, each such node is instead run
    alone by onnxruntime (an ``ops.Fallback`` node, costed as vector work). Every graph
    output is a ``Graph`` output, in the file's order, labelled by its ONNX name.
    """
    path = Path(path)
    model = onnx_file.load(path)
    value_info = onnx_file.graph_input(model, path)
    shape = onnx_file.set_input_shape(value_info, input_shape, path, batch)
    m = _analyse(model, path, value_info.name)
    _fold_small_constants(model, m)
    skeleton = onnx_file.skeleton(model)
    onnx_file.check(skeleton, path)
    m.shapes = _shapes(onnx_file.infer(skeleton, path))
    for _ in range(MAX_SHAPE_PASSES):  # constants computed from shapes (chunk's Slice ends,
        if not _fold_small_constants(model, m):  # a Reshape's target from Shape and Concat)
            break  # make more shapes known, which may make more such constants foldable
        m.shapes = _shapes(onnx_file.infer(onnx_file.skeleton(model), path))
    build, ir_of = _convert(model, m, value_info.name, fallback)
    if build.unsupported or build.problems:
        raise build.refusal(str(path), supported_ops())
    for out in _output_names(model):
        if out not in ir_of or out in m.pending:
            raise ModelError(f"{path}: output {out!r} is not computed from input "
                             f"{value_info.name!r}")
    outputs = {out: ir_of[out] for out in _output_names(model)}
    return build.graph(shape, outputs, str(path), "onnx infers", name=path.stem)
