"""ONNX nodes -> lowering rules: one converter per op type, reading the node's attributes
and constant inputs (with their opset's defaults), and the table of supported op types.

Resampling is mapped only where it is exact: the 1-D sampling weights of the ONNX
``Resize`` (its coordinate transformation and nearest rounding, per the ONNX
operator spec) are compared with those of the IR's ``Upsample`` at the actual
sizes, and the first IR variant (nearest; bilinear half-pixel; bilinear
align_corners) that matches is used.
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..geometry import same_auto_padding
from . import lowering as rules
from . import onnx_file
from .lowering import Refusal as _Refusal
from .onnx_model import OnnxNode, constant, element_name

# ---- shared geometry --------------------------------------------------------------------


def _pads(c: OnnxNode, kernel, strides, dilations) -> tuple[int, int, int, int]:
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


def _pair_attr(c: OnnxNode, key: str, default=(1, 1)) -> tuple[int, int]:
    value = tuple(c.attr(key, default))
    if len(value) != 2:
        raise _Refusal(f"{key}={list(value)}: only 2-D (H, W) operations are supported")
    return value  # type: ignore[return-value]


def _data_input(c: OnnxNode, rank: int | None = None) -> tuple[int, ...]:
    return rules.expect_rank(c.in_shape(0), rank)


# ---- converters: one per op type --------------------------------------------------------


def _conv(c: OnnxNode) -> ops.Op:
    _data_input(c, 4)
    w, b = c.weight(1), c.weight(2)
    strides, dilations = _pair_attr(c, "strides"), _pair_attr(c, "dilations")
    if w is None or w.ndim != 4:
        raise _Refusal("only 2-D convolution with a constant K x C x R x S weight is supported")
    return rules.conv(w, b, strides, _pads(c, w.shape[2:], strides, dilations), dilations,
                      c.attr("group", 1), c.take_pad())


def _conv_transpose(c: OnnxNode):
    _data_input(c, 4)
    w = c.weight(1)
    if w is None or w.ndim != 4:
        raise _Refusal("only 2-D transposed convolution with a constant weight is supported")
    if _pair_attr(c, "dilations") != (1, 1) or c.attr("output_shape") is not None \
            or c.attr("auto_pad", "NOTSET") != "NOTSET":
        raise _Refusal("dilations, output_shape and auto_pad: only dilation 1 and explicit pads")
    t, left, b, r = c.attr("pads", [0, 0, 0, 0])
    padding, output_padding = rules.transposed_padding(
        (t, left), (b, r), _pair_attr(c, "output_padding", (0, 0)))
    x = c.proto.input[0]
    return c.build.conv_transpose(c.name, c.model.ir_of.get(x, x), w, c.weight(2),
                                  _pair_attr(c, "strides"), padding, output_padding,
                                  int(c.attr("group", 1)))


def _gemm(c: OnnxNode):
    """Gemm, alpha A B' + beta C with B constant: a linear layer over A's last axis
    (``Lowering.linear``: the 1x1-conv FC of an N x F input), C one value per output column."""
    if c.attr("transA", 0):
        raise _Refusal("transA=1: the IR keeps the batch on axis 0 of A")
    b = c.weight(1)
    if b is None or b.ndim != 2:
        raise _Refusal("B must be a constant matrix")
    w = b if c.attr("transB", 0) else b.T
    if c.attr("alpha", 1.0) != 1.0:
        w = w * np.float32(c.attr("alpha"))
    bias = c.weight(2)
    if bias is not None:
        bias = _columns(bias * np.float32(c.attr("beta", 1.0)), w.shape[0])
    x = c.proto.input[0]
    return c.build.linear(c.name, c.model.ir_of.get(x, x), c.in_shape(0), w, bias)


def _columns(value: np.ndarray, columns: int) -> np.ndarray:
    """Gemm's C as one value per output column (``columns``): a scalar, (columns,) or
    (1, columns)."""
    flat = value.reshape(-1)
    if value.ndim > 2 or value.ndim == 2 and value.shape[0] != 1 or flat.size not in (1, columns):
        raise _Refusal(f"C of shape {value.shape}: only a scalar or one value per output column "
                       f"({columns}) is supported")
    return np.broadcast_to(flat, (columns,)).astype(np.float32)


def _matmul(c: OnnxNode):
    """MatMul by a constant matrix: a fully connected layer (``Lowering.linear``); of two
    computed tensors (attention's products): the IR's ``MatMul``."""
    a, b = c.proto.input[:2]
    if a in c.model.depends and b in c.model.depends:
        return ops.MatMul()
    if a not in c.model.depends:
        raise _Refusal("the first operand is a constant: the IR multiplies a computed tensor "
                       "by a constant matrix, or two computed tensors")
    w = c.weight(1)
    if w is None or w.ndim != 2:
        raise _Refusal("the second operand must be a constant matrix or a computed tensor")
    return c.build.linear(c.name, c.model.ir_of.get(a, a), c.in_shape(0), w.T, None)


def _einsum(c: OnnxNode):
    """Einsum: ``Lowering.einsum`` of its computed inputs (a constant one given by value)."""
    names = list(c.proto.input)
    weights = [None if t in c.model.depends else c.weight(i) for i, t in enumerate(names)]
    return c.build.einsum(c.name, c.attr("equation"),
                          [c.model.ir_of.get(t, t) for t in names if t in c.model.depends],
                          [c.shape(t) if w is None else w.shape
                           for t, w in zip(names, weights, strict=True)], weights)


def _clip(c: OnnxNode) -> ops.Op:
    if c.model.opset < 11:
        lo, hi = c.attr("min"), c.attr("max")
    else:
        lo, hi = (None if v is None else float(v) for v in (c.const(1), c.const(2)))
    return rules.clip(lo, hi)


def _pool(c: OnnxNode) -> ops.Op:
    _data_input(c, 4)
    kernel, strides = _pair_attr(c, "kernel_shape"), _pair_attr(c, "strides")
    dilations = _pair_attr(c, "dilations")
    if dilations != (1, 1) and c.op_type != "MaxPool":
        raise _Refusal(f"dilations={c.attr('dilations')}: the IR dilates max pooling only")
    pads = _pads(c, kernel, strides, dilations)
    ceil, pending = bool(c.attr("ceil_mode", 0)), c.take_pad()
    if c.op_type == "MaxPool":
        op = rules.max_pool(kernel, strides, pads, ceil, pending, dilations)
    else:
        op = rules.avg_pool(kernel, strides, pads, ceil, bool(c.attr("count_include_pad", 0)),
                            pending)
    if ceil and not pending:  # (an absorbed pad reads another input than the node's)
        _check_ceil_shape(c, op)
    return op


def _check_ceil_shape(c: OnnxNode, op: ops.Op) -> None:
    """Refuse, saying why, a ceil_mode pool whose shape onnx's inference gives otherwise than
    PyTorch and onnxruntime compute it: they drop a last window that would start in the
    padding, onnx's shape inference keeps it, and the importer reads every later shape from
    that inference."""
    ours = op.out_shape([c.in_shape(0)], c.proto.name)
    if tuple(ours) != tuple(c.out_shape):
        raise _Refusal(f"ceil_mode=1: onnx's shape inference gives {tuple(c.out_shape[2:])} "
                       f"where PyTorch and onnxruntime compute {tuple(ours[2:])} (they drop a "
                       "last window that would start in the padding); npusim reads the file's "
                       "shapes from that inference and cannot import this pool: export it "
                       "with ceil_mode=False and the padding that gives the size wanted")


def _global_avg_pool(c: OnnxNode) -> ops.Op:
    _data_input(c, 4)
    return ops.GlobalAvgPool()


def _global_max_pool(c: OnnxNode) -> ops.Op:
    _data_input(c, 4)
    return ops.Reduce("max", (2, 3), keepdims=True)


_ARITH = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min",
          "Pow": "pow", "Greater": "greater", "Less": "less", "GreaterOrEqual": "greater_equal",
          "LessOrEqual": "less_equal", "Equal": "equal",
          **{op: rules.LOGICAL[op.lower()] for op in ("And", "Or", "Xor")}}


def _arith(c: OnnxNode) -> ops.Op:
    """Add, Sub, Mul, Div, Max, Min, Pow, a comparison (its bool result a mask of 1.0 and
    0.0) or And / Or / Xor of masks, of two inputs with broadcasting; a constant operand is a
    per-channel affine where it can be (``lowering.with_constant``)."""
    return _binary(c, _ARITH[c.op_type])


def _mod(c: OnnxNode) -> ops.Op:
    """Mod of float tensors, whose ``fmod`` must be 1 (the remainder of the dividend's sign,
    C's fmod); fmod = 0, the remainder of the divisor's sign, is the integer tensors' mode."""
    if c.attr("fmod", 0) != 1:
        raise _Refusal("fmod=0: the remainder of integer tensors; the IR's tensors are "
                       "float32, whose Mod takes fmod=1")
    return _binary(c, "fmod")


def _binary(c: OnnxNode, kind: str) -> ops.Op:
    """``Elementwise`` ``kind`` of the node's two inputs (``_arith``)."""
    if len(c.proto.input) != 2:
        raise _Refusal(f"{len(c.proto.input)} inputs: the IR computes {c.op_type} of two")
    data = [t for t in c.proto.input if t in c.model.depends]
    if len(data) == 2:
        return rules.binary(kind, [c.shape(t) for t in data])
    first = c.proto.input[0] in c.model.depends
    const = c.const(1 if first else 0)
    if kind == "pow" and first and np.issubdtype(const.dtype, np.integer) \
            and np.all(np.abs(const) < 2**24):  # an integer exponent (its own type: T1)
        const = const.astype(np.float32)  # exact in float32
    if not np.issubdtype(const.dtype, np.floating):
        raise _Refusal(f"constant operand of element type {element_name(const.dtype)}: must "
                       "be float")
    return rules.with_constant(kind, c.shape(data[0]), const, const_first=not first)


def _sum(c: OnnxNode):
    """Sum / Mean of any number of computed tensors (Caffe2's residual adds in the ONNX model
    zoo's ResNet-50 and ShuffleNet): one passes on, tensors of one shape are an ``Add`` (a
    Mean then scaled by 1 / k), two of different shapes a broadcasting ``Elementwise``."""
    data = [t for t in c.proto.input if t]
    if any(t not in c.model.depends for t in data):
        raise _Refusal("a constant operand: the IR sums tensors computed from the input")
    shapes = [c.shape(t) for t in data]
    if len(data) == 1:
        return c.proto.input[0]
    if all(s == shapes[0] for s in shapes):
        total = ops.Add()
    elif len(data) == 2:
        total = rules.binary("add", shapes)
    else:
        raise _Refusal(f"{len(data)} inputs of shapes {shapes}: the IR adds several tensors of "
                       "one shape, or two that broadcast")
    if c.op_type == "Sum":
        return total
    summed = c.build.add(f"{c.name}_sum", total, tuple(c.model.ir_of.get(t, t) for t in data),
                         c.out_shape)
    return rules.with_constant("mul", c.out_shape, np.float32(1 / len(data))), (summed,)


def _is_nan(c: OnnxNode):
    """IsNaN: a mask, 1.0 where x is NaN (``x != x``; torch's export of attention under a
    boolean mask zeroes the weights of a query that may attend to no key so)."""
    x = c.model.ir_of.get(c.proto.input[0], c.proto.input[0])
    return ops.Elementwise("not_equal"), (x, x)


def _where(c: OnnxNode) -> ops.Op:
    """Where(cond, a, b): a constant operand (a masked fill's value, a fixed mask) held in
    the op as float32 (a bool mask as 1.0 and 0.0)."""
    given = [None if t in c.model.depends else c.const(i) for i, t in enumerate(c.proto.input)]
    for name, value in zip(("condition", "X", "Y"), given, strict=True):
        if value is not None and not (np.issubdtype(value.dtype, np.floating)
                                      or value.dtype == np.bool_):
            raise _Refusal(f"constant {name} of element type {element_name(value.dtype)}: "
                           "must be bool or float")
    return ops.Where(*(None if v is None else v.astype(np.float32) for v in given))


def _concat(c: OnnxNode) -> ops.Op:
    """Concat of computed tensors and constants in their places (a ViT's class token:
    ``Expand`` of an initialiser to the batch, folded)."""
    constants = [(at, c.weight(at)) for at, t in enumerate(c.proto.input)
                 if t not in c.model.depends]
    return rules.concat(c.attr("axis"), len(c.out_shape), constants)


def _reshape(c: OnnxNode) -> ops.Op:
    """Flatten / Reshape / Squeeze / Unsqueeze: the result shape shape inference gives."""
    return rules.reshape(c.in_shape(0), c.out_shape)


_REDUCE_KINDS = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max",
                 "ReduceMin": "min", "ReduceL1": "l1", "ReduceL2": "l2"}


def _reduce(c: OnnxNode) -> ops.Op:
    """ReduceMean / Sum / Max / Min / L1 / L2 over ``OnnxNode.reduced_axes``."""
    return rules.reduce(_REDUCE_KINDS[c.op_type], c.reduced_axes(),
                        bool(c.attr("keepdims", 1)), c.in_shape(0))


def _log_sum_exp(c: OnnxNode):
    """ReduceLogSumExp over ``OnnxNode.reduced_axes``: ``Lowering.log_sum_exp``."""
    return c.build.log_sum_exp(c.name, _steps_input(c), c.in_shape(0), c.reduced_axes(),
                               bool(c.attr("keepdims", 1)))


def _cumsum(c: OnnxNode) -> ops.CumSum:
    """CumSum along the constant axis of input 1 (``exclusive``, ``reverse``)."""
    axis = np.asarray(c.const(1)).reshape(-1)
    if axis.size != 1:
        raise _Refusal(f"axis {axis.tolist()}: CumSum takes one axis")
    return ops.CumSum(int(axis[0]), bool(c.attr("exclusive", 0)), bool(c.attr("reverse", 0)))


def _expand(c: OnnxNode) -> ops.Op | str:
    """Expand to a constant shape: a Broadcast to the shape inference gives (the input
    itself when nothing repeats)."""
    op = rules.broadcast_to(c.in_shape(0), c.out_shape)
    return c.proto.input[0] if op is None else op


def _steps_input(c: OnnxNode) -> str:
    """The IR tensor a node built as several IR nodes (``Lowering.steps``) reads: its input
    0, refused if it is a Pad output still owed (the IR takes padding only into a conv or
    pool; the steps would read the unpadded tensor before the general check refuses)."""
    x = c.proto.input[0]
    if x in c.model.pending:
        raise _Refusal("reads a Pad output: the IR takes padding only into a conv or pool")
    return c.model.ir_of.get(x, x)


def _tile(c: OnnxNode):
    """Tile by constant repeats (PyTorch's ``repeat``): ``rules.tile``'s three data moves,
    the input itself when nothing repeats."""
    steps = rules.tile(c.in_shape(0), constant(c.model, c.proto.input[1]).ravel())
    return c.build.steps(c.name, steps, _steps_input(c)) if steps else c.proto.input[0]


def _selu(c: OnnxNode):
    """Selu: ``rules.selu`` at the node's alpha and gamma (the spec's defaults: SELU's
    constants in float32)."""
    return c.build.steps(c.name, rules.selu(c.in_shape(0), c.attr("alpha", rules.SELU_ALPHA),
                                            c.attr("gamma", rules.SELU_SCALE)), _steps_input(c))


def _transpose(c: OnnxNode) -> ops.Op:
    ndim = len(c.in_shape(0))
    return rules.transpose(c.attr("perm", range(ndim - 1, -1, -1)), ndim)


def _blocks(rule):
    """DepthToSpace / SpaceToDepth (``rule``: ``depth_to_space`` or ``space_to_depth``) as
    the reshape, transpose and reshape it is, in the node's mode (DCR by default)."""
    def convert(c: OnnxNode):
        return c.build.steps(c.name, rule(c.in_shape(0), int(c.attr("blocksize")),
                                          c.attr("mode", "DCR")), _steps_input(c))
    return convert


def _split(c: OnnxNode) -> list:
    """Split: one Slice per output, sized as shape inference gives them."""
    x = c.in_shape(0)
    axis = c.attr("axis", 0) % len(x)
    return rules.split(axis, [c.shape(t)[axis] for t in c.proto.output], x)


def _slice(c: OnnxNode):
    """Slice: a chain of single-axis Slices (a negative step: back along the axis, as
    PyTorch's exporters write ``flip``); a pass-through if it keeps all."""
    x = c.in_shape(0)
    if c.model.opset < 10:
        starts, ends, axes, steps = c.attr("starts"), c.attr("ends"), c.attr("axes"), None
    else:
        starts, ends, axes, steps = (c.const(i) for i in range(1, 5))
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    parts = [slice(None)] * len(x)
    for a, b, e, s in zip(axes, starts, ends, steps, strict=True):
        parts[int(a) % len(x)] = slice(int(b), int(e), int(s))
    return _indexed(c, rules.index(x, parts, c.out_shape))


def _gather(c: OnnxNode):
    """Gather by constant indices (PyTorch's ``x[:, i]`` and ``select``: a scalar, the axis
    dropped; a run of indices in equal steps, its slice; rows of runs, the taps of
    ``F.unfold``'s windows): ``Lowering.gather``."""
    x, axis = c.in_shape(0), c.attr("axis", 0) % len(c.in_shape(0))
    return c.build.gather(c.name, _steps_input(c), x, axis, c.const(1))


def _gather_nd(c: OnnxNode) -> ops.Op:
    """GatherND by constant indices (``batch_dims`` 0; negative indices counted from the
    end): ``ops.GatherND``."""
    if c.attr("batch_dims", 0) != 0:
        raise _Refusal(f"batch_dims={c.attr('batch_dims')}: the IR gathers with batch_dims 0")
    x, idx = c.in_shape(0), np.asarray(c.const(1))
    if not np.issubdtype(idx.dtype, np.integer) or idx.ndim < 1 or not 1 <= idx.shape[-1] \
            <= len(x):
        raise _Refusal(f"indices of shape {idx.shape} and type {element_name(idx.dtype)}")
    k = idx.shape[-1]
    bound = np.asarray(x[:k], np.int64)
    if np.any((idx < -bound) | (idx >= bound)):
        raise _Refusal(f"indices out of range for the axes {x[:k]}")
    return ops.GatherND((idx % bound).astype(np.int64))


def _indexed(c: OnnxNode, steps: list):
    """A node built as ``steps`` on its first input (a pass-through when there are none)."""
    if not steps:
        return c.proto.input[0]
    return c.build.steps(c.name, steps, _steps_input(c))


def _instance_norm(c: OnnxNode) -> ops.Op:
    """InstanceNormalization (torch's export of GroupNorm, between two Reshapes): each
    channel over the remaining axes, a GroupNorm of one channel per group."""
    channels = c.in_shape(0)[1]
    return rules.group_norm(channels, channels, c.weight(1), c.weight(2),
                            c.attr("epsilon", 1e-5))


def _layer_norm(c: OnnxNode) -> ops.Op:
    x = c.in_shape(0)
    axis = c.attr("axis", -1) % len(x)
    scale = c.weight(1)
    if c.attr("stash_type", 1) != 1:
        raise _Refusal("stash_type other than 1 (float32 statistics)")
    return rules.layer_norm(x[axis:], scale, c.weight(2), c.attr("epsilon", 1e-5))


def _lrn(c: OnnxNode) -> ops.Op:
    """LRN: the window of ``size`` channels from ``c - (size - 1) // 2``, as the operator
    spec places it (PyTorch's starts at ``c - size // 2``: they differ for an even size)."""
    size = int(c.attr("size"))
    return ops.LocalResponseNorm(size, float(c.attr("alpha", 1e-4)), float(c.attr("beta", 0.75)),
                                 float(c.attr("bias", 1.0)), (size - 1) // 2)


def _batch_norm(c: OnnxNode) -> ops.Op:
    if c.attr("training_mode", 0):
        raise _Refusal("training_mode=1: the IR folds running statistics only")
    gamma, beta, mean, var = (c.weight(i) for i in range(1, 5))
    return rules.batch_norm(gamma, beta, mean, var, c.attr("epsilon", 1e-5))


def _prelu(c: OnnxNode) -> ops.Op:
    return ops.PRelu(rules.channel_values(c.weight(1), c.in_shape(0), "slope"))


def _softmax(c: OnnxNode) -> ops.Op:
    """Softmax / LogSoftmax over one axis (before opset 13, over the flattened axes from
    ``axis`` on: accepted when they are one)."""
    shape = c.in_shape(0)
    axis = c.attr("axis", 1 if c.model.opset < 13 else -1) % len(shape)
    if c.model.opset < 13 and math.prod(shape[axis + 1:]) > 1:
        raise _Refusal(f"opset {c.model.opset} {c.op_type} over axes {axis}.. of {shape} "
                       "(flattened); the IR normalises one axis")
    return rules.softmax(axis, len(shape), log=c.op_type == "LogSoftmax")


def _pad(c: OnnxNode) -> rules.Pending | ops.Op:
    if c.model.opset < 11:
        pads, fill = c.attr("pads"), c.attr("value", 0.0)
    else:
        pads = c.const(1)
        fill = 0.0 if c.const(2) is None else float(c.const(2))
        if c.has_input(3):
            raise _Refusal("Pad with axes: give pads for all 4 axes")
    pads = [int(p) for p in pads]
    mode = c.attr("mode", "constant")
    pending = c.model.pending.get(c.proto.input[0], rules.NO_PAD)
    if mode == "constant" and len(pads) == 8 and min(pads) < 0 <= -max(pads) \
            and not any(pads[i] for i in (0, 1, 4, 5)):
        return c.build.steps(c.name, rules.crop((pads[2], pads[6], pads[3], pads[7]),
                                                c.in_shape(0), pending),
                             c.model.ir_of.get(c.proto.input[0], c.proto.input[0]))
    if mode not in ("constant", "reflect", "edge", "wrap") or len(pads) != 8 \
            or min(pads) < 0 or any(pads[i] for i in (0, 1, 4, 5)):
        raise _Refusal(f"pads={pads}, mode={mode!r}: only constant, reflect, edge or wrap, "
                       "non-negative padding of H and W of a 4-D tensor, or a crop (no "
                       "positive pad), is supported")
    return rules.pad((pads[2], pads[6], pads[3], pads[7]),
                     {"edge": "replicate", "wrap": "circular"}.get(mode, mode), float(fill),
                     pending)


def _dropout(c: OnnxNode):
    training = c.const(2) if c.model.opset >= 12 else None
    if training is not None and bool(training):
        raise _Refusal("training_mode=True drops at random")
    return c.proto.input[0]


FLOAT_TYPES = (1, 11)  # onnx.TensorProto FLOAT, DOUBLE: hold a float32 value exactly
BOOL = 9  # onnx.TensorProto BOOL


def _cast(c: OnnxNode):
    """A Cast of a computed tensor to FLOAT or DOUBLE passes its float32 values on unchanged
    (a torch export writes one for ``x.float()``, ``x.to(torch.float32)``, and of a mask,
    whose 1.0 and 0.0 are its bools' values); to BOOL it is ``x != 0`` (a mask stays itself);
    to any other type it would round or truncate them."""
    to = c.attr("to")
    if to == BOOL:
        return rules.nonzero(c.in_shape(0))
    if to not in FLOAT_TYPES:
        raise _Refusal(f"to={onnx_file.element_type(to)}: the IR computes in float32; a cast "
                       "of a computed tensor to FLOAT or DOUBLE passes on its values, to BOOL "
                       "tests them against 0")
    return c.proto.input[0]


# ---- quantised models (QDQ) -------------------------------------------------------------

GRID_TYPES = ("int8", "uint8", "int16", "uint16")  # the integer grids a FakeQuant rounds to


def _grid(c: OnnxNode, proto=None) -> tuple[np.ndarray, np.ndarray, str, int]:
    """(scale, zero point, integer type, axis) of a QuantizeLinear or DequantizeLinear
    (``proto``; default ``c``'s): the zero point's type, else ``output_dtype`` (opset 21),
    else uint8, as the operator spec defaults."""
    from onnx import helper

    proto = proto or c.proto
    attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
    if attrs.get("block_size", 0):
        raise _Refusal(f"block_size={attrs['block_size']}: blocked quantisation; the IR "
                       "takes one scale, or one per index of an axis")
    scale = constant(c.model, proto.input[1]).astype(np.float32)
    has_zero = len(proto.input) > 2 and proto.input[2] != ""
    zero = constant(c.model, proto.input[2]) if has_zero else None
    if zero is not None:
        kind = zero.dtype.name
    elif attrs.get("output_dtype"):
        kind = np.dtype(helper.tensor_dtype_to_np_dtype(attrs["output_dtype"])).name
    else:
        kind = "uint8"
    if kind not in GRID_TYPES:
        raise _Refusal(f"quantises to {kind}; the IR rounds to a grid of "
                       f"{', '.join(GRID_TYPES)}")
    return scale, np.zeros(1, kind) if zero is None else zero, kind, int(attrs.get("axis", 1))


def _quantize(c: OnnxNode) -> ops.Op:
    """QuantizeLinear read only by DequantizeLinear (a QDQ model's activation): one
    FakeQuant, the DequantizeLinear after it a pass-through (``_dequantize``)."""
    others = [r for r in c.model.readers.get(c.proto.output[0], []) if r != "DequantizeLinear"]
    if others:
        raise _Refusal(f"its integers are read by {', '.join(sorted(set(others)))}, not by a "
                       "DequantizeLinear; the IR carries float tensors (QDQ models import; "
                       "QLinearConv / QOperator models do not)")
    scale, zero, kind, axis = _grid(c)
    info = np.iinfo(kind)
    return ops.FakeQuant(scale, zero, int(info.min), int(info.max), axis)


def _dequantize(c: OnnxNode) -> str:
    """DequantizeLinear of a computed tensor: a pass-through, the tensor being a
    QuantizeLinear's of the same scale, zero point and axis (its FakeQuant)."""
    source = c.model.producers.get(c.proto.input[0])  # the graph's input is float
    if source is None or source.op_type != "QuantizeLinear":
        made = "the graph's input" if source is None else f"a {source.op_type}'s output"
        raise _Refusal(f"dequantises {made}, not a QuantizeLinear's; the IR carries float "
                       "tensors")
    (scale, zero, kind, axis), (s, z, k, a) = _grid(c), _grid(c, source)
    if kind != k or not (np.array_equal(scale, s) and np.array_equal(zero, z)) or (
            scale.size > 1 and axis != a):
        raise _Refusal("its scale, zero point or axis differ from the QuantizeLinear's before "
                       "it; a QDQ pair rounds to one grid")
    return c.proto.input[0]


# GridSample's modes: opset 16's names and opset 20's for the same two
_GRID_MODES = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest"}


def _grid_sample(c: OnnxNode) -> ops.Op:
    """GridSample of a 4-D input at a grid computed or constant (input 1): ``GridSample``."""
    mode = c.attr("mode", "bilinear")
    if mode not in _GRID_MODES:
        raise _Refusal(f"mode={mode!r}: the IR samples bilinear (linear) or nearest")
    _data_input(c, 4)
    padding, align = c.attr("padding_mode", "zeros"), bool(c.attr("align_corners", 0))
    if c.proto.input[1] in c.model.depends:
        return ops.GridSample(_GRID_MODES[mode], padding, align)
    return ops.GridSample(_GRID_MODES[mode], padding, align, c.weight(1))


def _resize(c: OnnxNode) -> ops.Op:
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
    if mode not in ("nearest", "linear", "cubic"):
        raise _Refusal(f"mode={mode!r}: the IR resamples 'nearest', 'linear' or 'cubic'")
    return _resample(c, mode, transform, rounding, scales)


def _refuse_resize_extras(c: OnnxNode) -> None:
    for key, default in (("antialias", 0), ("exclude_outside", 0),
                         ("keep_aspect_ratio_policy", "stretch")):
        if c.attr(key, default) != default:
            raise _Refusal(f"{key}={c.attr(key)!r}: only {default!r} is supported")
    if c.attr("axes") is not None:
        raise _Refusal(f"axes={c.attr('axes')}: give scales or sizes for all 4 axes")


IR_RESAMPLING = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}


def _resample(c: OnnxNode, mode: str, transform: str, rounding: str, scales) -> ops.Op:
    x, out = _data_input(c, 4), c.out_shape
    if x[:2] != out[:2]:
        raise _Refusal(f"resizes {x} to {out}: the IR resizes H and W only")
    scales = (out[2] / x[2], out[3] / x[3]) if scales is None or len(scales) == 0 \
        else tuple(float(s) for s in scales[2:])
    cubic_a = c.attr("cubic_coeff_a", ops.CUBIC_A)
    want = [rules.sampling_weights(n, m, s, mode, transform, rounding, cubic_a)
            for n, m, s in zip(x[2:], out[2:], scales, strict=True)]
    op = rules.exact_upsample(x[2:], out[2:], IR_RESAMPLING[mode], want, scales)
    if op is not None:
        return op
    detail = f"cubic_coeff_a={cubic_a:g}" if mode == "cubic" else f"nearest_mode={rounding!r}"
    raise _Refusal(f"mode={mode!r} with coordinate_transformation_mode={transform!r} and "
                   f"{detail} from {x[2:]} to {out[2:]} samples differently "
                   "from the IR's Upsample (nearest: floor(dst * in/out); linear, cubic "
                   f"({ops.CUBIC_A:g}): half-pixel "
                   "or align_corners)")


# op type -> (converter, how many leading inputs are data; None = all)
CONVERTERS = {
    "Conv": (_conv, 1), "ConvTranspose": (_conv_transpose, 1), "Gemm": (_gemm, 1),
    "MatMul": (_matmul, None), "Einsum": (_einsum, None),
    "Relu": (lambda c: ops.Relu(), 1), "PRelu": (_prelu, 1),
    "LeakyRelu": (lambda c: ops.LeakyRelu(c.attr("alpha", 0.01)), 1), "Clip": (_clip, 1),
    "Elu": (lambda c: ops.Elu(c.attr("alpha", 1.0)), 1), "Softplus": (lambda c: ops.Softplus(), 1),
    "Mish": (lambda c: ops.Mish(), 1), "Exp": (lambda c: ops.Exp(), 1),
    "Log": (lambda c: ops.Log(), 1), "Abs": (lambda c: ops.Abs(), 1),
    "Sigmoid": (lambda c: ops.Sigmoid(), 1), "Tanh": (lambda c: ops.Tanh(), 1),
    "HardSigmoid": (lambda c: ops.HardSigmoid(c.attr("alpha", 0.2), c.attr("beta", 0.5)), 1),
    "HardSwish": (lambda c: ops.HardSwish(), 1), "Erf": (lambda c: ops.Erf(), 1),
    "Sqrt": (lambda c: ops.Sqrt(), 1), "Sign": (lambda c: ops.Sign(), 1),
    "Floor": (lambda c: ops.Round("floor"), 1), "Ceil": (lambda c: ops.Round("ceil"), 1),
    "Round": (lambda c: ops.Round("nearest"), 1),
    **{fn.capitalize(): (lambda c, fn=fn: ops.Trig(fn), 1) for fn in ops.TRIG},
    "CumSum": (_cumsum, 1),
    "Celu": (lambda c: rules.celu(c.attr("alpha", 1.0)), 1),
    "Not": (lambda c: rules.logical_not(c.in_shape(0)), 1),
    "Where": (_where, None), "IsNaN": (_is_nan, 1),
    "Reciprocal": (lambda c: rules.with_constant("div", c.in_shape(0), np.float32(1),
                                                 const_first=True), 1),
    "Neg": (lambda c: rules.with_constant("mul", c.in_shape(0), np.float32(-1)), 1),
    "Gelu": (lambda c: ops.Gelu(c.attr("approximate", "none")), 1),
    "MaxPool": (_pool, 1), "AveragePool": (_pool, 1), "GlobalAveragePool": (_global_avg_pool, 1),
    "GlobalMaxPool": (_global_max_pool, 1),
    **{op: (_arith, None) for op in _ARITH}, "Mod": (_mod, None), "Concat": (_concat, None),
    "Sum": (_sum, None), "Mean": (_sum, None),
    **{kind: (_reduce, 1) for kind in _REDUCE_KINDS}, "ReduceLogSumExp": (_log_sum_exp, 1),
    "Expand": (_expand, 1), "Tile": (_tile, 1), "Transpose": (_transpose, 1), "Selu": (_selu, 1),
    "Split": (_split, 1), "DepthToSpace": (_blocks(rules.depth_to_space), 1),
    "SpaceToDepth": (_blocks(rules.space_to_depth), 1), "Flatten": (_reshape, 1),
    "Reshape": (_reshape, 1),
    "Squeeze": (_reshape, 1), "Unsqueeze": (_reshape, 1), "LayerNormalization": (_layer_norm, 1),
    "InstanceNormalization": (_instance_norm, 1), "LRN": (_lrn, 1),
    "BatchNormalization": (_batch_norm, 1), "Resize": (_resize, 1),
    "Upsample": (_resize, 1), "GridSample": (_grid_sample, None), "Softmax": (_softmax, 1),
    "LogSoftmax": (_softmax, 1), "Identity": (lambda c: c.proto.input[0], 1),
    "Dropout": (_dropout, 1), "Cast": (_cast, 1), "Pad": (_pad, 1), "Slice": (_slice, 1),
    "Gather": (_gather, 1), "GatherND": (_gather_nd, 1),
    "QuantizeLinear": (_quantize, 1), "DequantizeLinear": (_dequantize, 1),
}


def supported_ops() -> list[str]:
    """The ONNX op types the importer maps to the IR."""
    return sorted(CONVERTERS)
