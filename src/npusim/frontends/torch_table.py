"""Which torch modules, functions and tensor methods each converter handles
(``torch_ops``, ``torch_shape_ops``), how a user would write each, and the look-up the
importer does per graph node."""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from . import torch_qat
from .torch_composites import (
    addcmul,
    diff,
    exp_log,
    frac,
    glu,
    lerp,
    logsigmoid,
    roll,
    rot90,
    softmin,
    softsign,
    tanhshrink,
)
from .torch_ops import (
    TRIG_ALIASES,
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    affine_grid,
    arith,
    avg_pool2d,
    batch_norm,
    celu,
    clamp,
    clamp_max,
    clamp_min,
    computed,
    conv2d,
    conv_module,
    conv_transpose2d,
    conv_transpose_module,
    cumsum,
    einsum,
    elu,
    gelu,
    grid_sample,
    group_norm,
    hardshrink,
    hardtanh,
    instance_norm,
    layer_norm,
    leaky_relu,
    linear,
    local_response_norm,
    logical,
    logical_not,
    lp_pool2d,
    masked_fill,
    matmul,
    max_pool2d,
    negate,
    prelu,
    reciprocal,
    relu,
    relu6,
    rounding,
    rrelu,
    rsqrt,
    scaled_dot_product_attention,
    selu,
    softplus,
    softshrink,
    square,
    threshold,
    trig,
    unary,
    where,
)
from .torch_shape_ops import (
    attribute,
    cat,
    channel_shuffle,
    chunk,
    concatenate,
    dropout,
    expand,
    extreme,
    extremes,
    flip,
    flip_axis,
    getitem,
    interpolate,
    linalg_norm,
    logsumexp,
    narrow,
    norm,
    normalize,
    pad,
    permute,
    pixel_shuffle,
    pixel_unshuffle,
    reduction,
    repeat,
    reshape_as,
    reshape_to,
    running_extreme,
    same_tensor,
    select,
    softmax,
    split,
    spread,
    stack,
    tile,
    transpose,
    unbind,
    unfold,
    vector_norm,
    windows,
)
from .torch_transformer import (
    multihead_attention,
    transformer,
    transformer_decoder,
    transformer_decoder_layer,
    transformer_encoder,
    transformer_encoder_layer,
)

_MODULES = {
    nn.Conv2d: conv_module,
    nn.ConvTranspose2d: conv_transpose_module,
    nn.Linear: lambda c, m, x: linear(c, x, m.weight, m.bias),
    nn.MultiheadAttention: multihead_attention,
    nn.TransformerEncoderLayer: transformer_encoder_layer,
    nn.TransformerDecoderLayer: transformer_decoder_layer,
    nn.TransformerEncoder: transformer_encoder,
    nn.TransformerDecoder: transformer_decoder,
    nn.Transformer: transformer,
    nn.Sigmoid: lambda c, m, x: unary(ops.Sigmoid)(c, x),
    nn.Hardsigmoid: lambda c, m, x: unary(ops.HardSigmoid)(c, x),
    nn.Hardswish: lambda c, m, x: unary(ops.HardSwish)(c, x),
    nn.SiLU: lambda c, m, x: unary(ops.Silu)(c, x),
    nn.Mish: lambda c, m, x: unary(ops.Mish)(c, x),
    nn.Softplus: lambda c, m, x: softplus(c, x, m.beta, m.threshold),
    nn.LPPool2d: lambda c, m, x: lp_pool2d(c, x, m.norm_type, m.kernel_size, m.stride,
                                           m.ceil_mode),
    nn.ELU: lambda c, m, x: elu(c, x, m.alpha),
    nn.Softsign: lambda c, m, x: softsign(c, x),
    nn.Tanhshrink: lambda c, m, x: tanhshrink(c, x),
    nn.LogSigmoid: lambda c, m, x: logsigmoid(c, x),
    nn.Softmin: lambda c, m, x: softmin(c, x, m.dim),
    nn.GLU: lambda c, m, x: glu(c, x, m.dim),
    nn.CELU: lambda c, m, x: celu(c, x, m.alpha),
    nn.SELU: lambda c, m, x: selu(c, x),
    nn.RReLU: lambda c, m, x: rrelu(c, x, m.lower, m.upper, m.training),
    nn.Tanh: lambda c, m, x: unary(ops.Tanh)(c, x),
    nn.GELU: lambda c, m, x: gelu(c, x, m.approximate),
    nn.LayerNorm: lambda c, m, x: layer_norm(c, x, m.normalized_shape, m.weight, m.bias, m.eps),
    nn.GroupNorm: lambda c, m, x: group_norm(c, x, m.num_groups, m.weight, m.bias, m.eps),
    # SyncBatchNorm is BatchNorm2d at inference (its statistics are synchronised in
    # training only); BatchNorm1d normalises the channels of N x C (after a Linear) alike
    **{cls: lambda c, m, x: batch_norm(
        c, x, m.running_mean, m.running_var, m.weight, m.bias, m.training, eps=m.eps)
       for cls in (nn.BatchNorm2d, nn.SyncBatchNorm, nn.BatchNorm1d)},
    nn.ReLU: lambda c, m, x: relu(c, x),
    nn.ReLU6: lambda c, m, x: relu6(c, x),
    nn.Hardtanh: lambda c, m, x: clamp(c, x, m.min_val, m.max_val),
    nn.Threshold: lambda c, m, x: threshold(c, x, m.threshold, m.value),
    nn.Hardshrink: lambda c, m, x: hardshrink(c, x, m.lambd),
    nn.Softshrink: lambda c, m, x: softshrink(c, x, m.lambd),
    nn.LeakyReLU: lambda c, m, x: leaky_relu(c, x, m.negative_slope),
    nn.PReLU: lambda c, m, x: prelu(c, x, m.weight),
    nn.MaxPool2d: lambda c, m, x: max_pool2d(c, x, m.kernel_size, m.stride, m.padding,
                                              m.dilation, m.ceil_mode, m.return_indices),
    nn.AvgPool2d: lambda c, m, x: avg_pool2d(c, x, m.kernel_size, m.stride, m.padding,
                                              m.ceil_mode, m.count_include_pad,
                                              m.divisor_override),
    nn.AdaptiveAvgPool2d: lambda c, m, x: adaptive_avg_pool2d(c, x, m.output_size),
    nn.AdaptiveMaxPool2d: lambda c, m, x: adaptive_max_pool2d(c, x, m.output_size,
                                                              m.return_indices),
    nn.Flatten: lambda c, m, x: reshape_to(c, x),
    nn.Unflatten: lambda c, m, x: reshape_to(c, x),
    nn.PixelShuffle: lambda c, m, x: pixel_shuffle(c, x, m.upscale_factor),
    nn.Unfold: lambda c, m, x: unfold(c, x, m.kernel_size, m.dilation, m.padding, m.stride),
    nn.PixelUnshuffle: lambda c, m, x: pixel_unshuffle(c, x, m.downscale_factor),
    nn.Softmax: lambda c, m, x: softmax()(c, x, m.dim),
    nn.Softmax2d: lambda c, m, x: softmax()(c, x, -3),  # over the channels of C x H x W
    nn.LogSoftmax: lambda c, m, x: softmax(log=True)(c, x, m.dim),
    nn.ChannelShuffle: lambda c, m, x: channel_shuffle(c, x, m.groups),
    nn.LocalResponseNorm: lambda c, m, x: local_response_norm(c, x, m.size, m.alpha, m.beta,
                                                              m.k),
    nn.InstanceNorm2d: lambda c, m, x: instance_norm(
        c, x, m.running_mean, m.running_var, m.weight, m.bias,
        m.training or not m.track_running_stats, m.momentum, m.eps),
    nn.Identity: lambda c, m, x: computed(x),
    nn.ConstantPad2d: lambda c, m, x: pad(c, x, m.padding, "constant", m.value),
    nn.ZeroPad2d: lambda c, m, x: pad(c, x, m.padding, "constant", 0.0),
    nn.ReflectionPad2d: lambda c, m, x: pad(c, x, m.padding, "reflect"),
    nn.ReplicationPad2d: lambda c, m, x: pad(c, x, m.padding, "replicate"),
    nn.CircularPad2d: lambda c, m, x: pad(c, x, m.padding, "circular"),
    **{cls: lambda c, m, x: interpolate(c, x, m.size, m.scale_factor, m.mode, m.align_corners,
                                         m.recompute_scale_factor)
       for cls in (nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d)},
    # at inference (the module is put in eval mode) dropout passes its input through
    **{cls: lambda c, m, x: computed(x)
       for cls in (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)},
    **torch_qat.MODULES,  # quantisation-aware training: fake-quantize modules, QAT convs
}


def _table(*rows) -> dict:
    return {target: row[0] for row in rows for target in row[1:]}


_FUNCTIONS = _table(
    (conv2d, torch.conv2d),
    (conv_transpose2d, F.conv_transpose2d, torch.conv_transpose2d),
    (linear, F.linear),
    (matmul, torch.matmul, operator.matmul, torch.bmm),
    (batch_norm, F.batch_norm),
    (relu, F.relu, torch.relu),
    (relu6, F.relu6),
    (clamp, torch.clamp, torch.clip),
    (clamp_min, torch.clamp_min),
    (clamp_max, torch.clamp_max),
    (negate, operator.neg, torch.neg),
    (unary(ops.Sqrt), torch.sqrt),
    (unary(ops.Exp), torch.exp),
    (unary(ops.Log), torch.log),
    (unary(ops.Abs), torch.abs),
    (rsqrt, torch.rsqrt),
    (hardtanh, F.hardtanh),
    (threshold, F.threshold, torch.threshold),
    (hardshrink, F.hardshrink, torch.hardshrink),
    (softshrink, F.softshrink),
    (leaky_relu, F.leaky_relu),
    (softplus, F.softplus),
    (elu, F.elu),
    (selu, F.selu, torch.selu),
    (rrelu, F.rrelu),
    (unary(ops.Mish), F.mish),
    (prelu, torch.prelu),
    (max_pool2d, F.max_pool2d, torch.max_pool2d),
    (avg_pool2d, F.avg_pool2d),
    (adaptive_avg_pool2d, F.adaptive_avg_pool2d),
    (adaptive_max_pool2d, F.adaptive_max_pool2d),
    (arith("add"), operator.add, operator.iadd, torch.add),
    (arith("pow"), operator.pow, torch.pow),
    (arith("sub"), operator.sub, operator.isub, torch.sub, torch.subtract),
    (arith("mul"), operator.mul, operator.imul, torch.mul, torch.multiply),
    (arith("div"), operator.truediv, operator.itruediv, torch.div, torch.divide),
    (arith("floordiv"), operator.floordiv, operator.ifloordiv, torch.floor_divide),
    (arith("remainder"), operator.mod, operator.imod, torch.remainder),
    (arith("fmod"), torch.fmod),
    (arith("max"), torch.maximum),
    (arith("greater"), operator.gt, torch.gt, torch.greater),
    (arith("less"), operator.lt, torch.lt, torch.less),
    (arith("greater_equal"), operator.ge, torch.ge, torch.greater_equal),
    (arith("less_equal"), operator.le, torch.le, torch.less_equal),
    (arith("equal"), operator.eq, torch.eq),
    (arith("not_equal"), operator.ne, torch.ne, torch.not_equal),
    (where, torch.where),
    (masked_fill, torch.masked_fill),
    (logical("and"), torch.logical_and, operator.and_),
    (logical("or"), torch.logical_or, operator.or_),
    (logical("xor"), torch.logical_xor, operator.xor),
    (logical_not, torch.logical_not, operator.invert),
    (unary(ops.Sign), torch.sign),
    (rounding("floor"), torch.floor),
    (rounding("ceil"), torch.ceil),
    (rounding("nearest"), torch.round),
    (rounding("trunc"), torch.trunc, torch.fix),
    (celu, F.celu, torch.celu),
    (lp_pool2d, F.lp_pool2d),
    (einsum, torch.einsum),
    (grid_sample, F.grid_sample, torch.grid_sampler),
    (affine_grid, F.affine_grid),
    (scaled_dot_product_attention, F.scaled_dot_product_attention),
    (softsign, F.softsign),
    (tanhshrink, F.tanhshrink),
    (logsigmoid, F.logsigmoid),
    (softmin, F.softmin),
    (glu, F.glu),
    *((exp_log(name), getattr(torch, name)) for name in ("expm1", "log1p", "log2", "log10",
                                                          "exp2")),
    (roll, torch.roll),
    (frac, torch.frac),
    (lerp, torch.lerp),
    (addcmul, torch.addcmul),
    (diff, torch.diff),
    (logsumexp, torch.logsumexp),
    *((trig(fn), getattr(torch, fn), *[getattr(torch, a) for a in [TRIG_ALIASES.get(fn)] if a])
      for fn in ops.TRIG),
    (cumsum, torch.cumsum),
    (rot90, torch.rot90),
    (flip, torch.flip),
    (flip_axis(1), torch.fliplr),
    (flip_axis(0), torch.flipud),
    (arith("min"), torch.minimum),
    (unary(ops.Sigmoid), torch.sigmoid, F.sigmoid),
    (unary(ops.HardSigmoid), F.hardsigmoid),
    (unary(ops.HardSwish), F.hardswish),
    (unary(ops.Silu), F.silu),
    (unary(ops.Tanh), torch.tanh, F.tanh),
    (gelu, F.gelu),
    (layer_norm, F.layer_norm),
    (group_norm, F.group_norm),
    (reduction("mean"), torch.mean),
    (reduction("sum"), torch.sum),
    (spread(root=False), torch.var),
    (spread(root=True), torch.std),
    (extremes("max"), torch.amax),
    (extremes("min"), torch.amin),
    (running_extreme("max"), torch.cummax),
    (running_extreme("min"), torch.cummin),
    (extreme("max"), torch.max),
    (extreme("min"), torch.min),
    (norm, torch.norm),
    (vector_norm, torch.linalg.vector_norm),
    (linalg_norm, torch.linalg.norm),
    (normalize, F.normalize),
    (attribute, getattr),
    (permute, torch.permute),
    (transpose, torch.transpose),
    (split, torch.split),
    (chunk, torch.chunk),
    (cat, torch.cat, torch.concat),
    (stack, torch.stack),
    (concatenate, torch.concatenate),
    (reshape_to, torch.flatten, torch.reshape, torch.unflatten),
    (narrow, torch.narrow),
    (select, torch.select),
    (unbind, torch.unbind),
    (tile, torch.tile),
    (pad, F.pad),
    (getitem, operator.getitem),
    (interpolate, F.interpolate, F.upsample),
    (pixel_shuffle, F.pixel_shuffle, torch.pixel_shuffle),
    (channel_shuffle, F.channel_shuffle, torch.channel_shuffle),
    (pixel_unshuffle, F.pixel_unshuffle, torch.pixel_unshuffle),
    (unfold, F.unfold),
    (softmax(), F.softmax, torch.softmax),
    (softmax(log=True), F.log_softmax, torch.log_softmax),
    (instance_norm, F.instance_norm),
    (local_response_norm, F.local_response_norm),
    (unary(ops.Erf), torch.erf),
    (square, torch.square),
    (reciprocal, torch.reciprocal),
    (same_tensor, torch.clone, torch.detach),
    (dropout, F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout),
)

_METHODS = {
    "relu": relu, "clamp": clamp, "clip": clamp,
    "clamp_min": clamp_min, "clamp_max": clamp_max, "neg": negate, "pow": arith("pow"),
    "sqrt": unary(ops.Sqrt), "rsqrt": rsqrt, "exp": unary(ops.Exp), "log": unary(ops.Log),
    "abs": unary(ops.Abs), "sign": unary(ops.Sign), "floor": rounding("floor"),
    "ceil": rounding("ceil"), "round": rounding("nearest"), "trunc": rounding("trunc"),
    "expm1": exp_log("expm1"), "log1p": exp_log("log1p"), "log2": exp_log("log2"),
    "log10": exp_log("log10"), "exp2": exp_log("exp2"), "roll": roll, "rot90": rot90,
    "logsumexp": logsumexp, "cumsum": cumsum, "frac": frac, "lerp": lerp,
    "addcmul": addcmul, "diff": diff, "floor_divide": arith("floordiv"),
    "remainder": arith("remainder"), "fmod": arith("fmod"),
    "fix": rounding("trunc"), "flip": flip, "fliplr": flip_axis(1), "flipud": flip_axis(0),
    "gt": arith("greater"), "lt": arith("less"), "ge": arith("greater_equal"),
    "le": arith("less_equal"), "eq": arith("equal"), "ne": arith("not_equal"),
    "logical_not": logical_not, "logical_and": logical("and"), "logical_or": logical("or"),
    "logical_xor": logical("xor"), "masked_fill": masked_fill,
    "add": arith("add"), "sub": arith("sub"),
    "mul": arith("mul"), "div": arith("div"),
    "sigmoid": unary(ops.Sigmoid), "tanh": unary(ops.Tanh),
    **{name: trig(fn) for fn in ops.TRIG for name in (fn, TRIG_ALIASES.get(fn)) if name},
    "mean": reduction("mean"), "sum": reduction("sum"), "max": extreme("max"),
    "amax": extremes("max"),
    "min": extreme("min"), "amin": extremes("min"), "cummax": running_extreme("max"),
    "cummin": running_extreme("min"), "norm": norm, "permute": permute,
    "transpose": transpose, "expand": expand, "expand_as": expand,
    "split": split, "chunk": chunk, "flatten": reshape_to, "view": reshape_to,
    "unfold": windows,
    "reshape": reshape_to, "squeeze": reshape_to, "unsqueeze": reshape_to,
    "softmax": softmax(), "log_softmax": softmax(log=True), "contiguous": same_tensor,
    "erf": unary(ops.Erf), "square": square, "reciprocal": reciprocal,
    "var": spread(root=False), "std": spread(root=True),
    "view_as": reshape_as, "reshape_as": reshape_as, "unflatten": reshape_to,
    "matmul": matmul, "bmm": matmul, "narrow": narrow, "select": select, "repeat": repeat,
    "unbind": unbind,
    "tile": tile,
    "float": same_tensor, "to": same_tensor, "type_as": same_tensor, "type": same_tensor,
    "clone": same_tensor, "detach": same_tensor, "cpu": same_tensor,
}


# elementwise calls whose in-place form (a trailing _) writes the result into its input: the
# same converter, added to the tables here for every one of them (``torch_inplace`` rewires
# the readers); not the in-place forms of layout
# calls (``transpose_``, ``squeeze_``), which change a tensor's shape without its data
IN_PLACE = ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "erf",
            "square", "reciprocal", "clamp", "clip", "clamp_min", "clamp_max", "pow", "selu",
            "add", "sub", "mul", "div", "hardtanh", "leaky_relu", "elu", "celu", "floor",
            "ceil", "round", "trunc", "fix", "floor_divide", "remainder", "fmod", *ops.TRIG,
            *TRIG_ALIASES.values(), "cumsum")


def _add_in_place_forms() -> None:
    for name in IN_PLACE:
        for space in (torch, F):
            plain, in_place = getattr(space, name, None), getattr(space, name + "_", None)
            if in_place is not None and plain in _FUNCTIONS:
                _FUNCTIONS.setdefault(in_place, _FUNCTIONS[plain])
        if name in _METHODS and hasattr(torch.Tensor, name + "_"):
            _METHODS.setdefault(name + "_", _METHODS[name])


_add_in_place_forms()


def _function_name(fn) -> str:
    """``F.relu``, ``torch.cat``, ``operator.add``: how a user would write the call."""
    name = getattr(fn, "__name__", repr(fn))
    for prefix, namespace in (("F", F), ("torch", torch), ("operator", operator)):
        if getattr(namespace, name, None) is fn:
            return f"{prefix}.{name}"
    linalg = name.removeprefix("linalg_")  # torch.linalg's functions are named linalg_*
    if getattr(torch.linalg, linalg, None) is fn:
        return f"torch.linalg.{linalg}"
    return f"{getattr(fn, '__module__', None) or '?'}.{name}"


def _module_name(cls: type) -> str:
    return f"nn.{cls.__name__}" if cls.__module__.startswith("torch.nn") \
        else f"{cls.__module__}.{cls.__qualname__}"


# the calls that may read a bool mask (a comparison's result, 1.0 and 0.0 in the IR) and give
# what torch gives on the bool tensor: the select, the logical ops, a product, a conversion to
# float32, and layout; any other reader (a sum of two masks is their OR in torch) is refused
MASK_READERS = frozenset({
    "torch.where", "torch.masked_fill", "Tensor.masked_fill", "torch.logical_and",
    "torch.logical_or", "torch.logical_xor", "torch.logical_not", "operator.and_",
    "operator.or_", "operator.xor", "operator.invert",
    "Tensor.logical_and", "Tensor.logical_or", "Tensor.logical_xor", "Tensor.logical_not",
    "operator.mul", "torch.mul", "Tensor.mul", "Tensor.float", "Tensor.to", "Tensor.type_as",
    "Tensor.type", "operator.getitem", "Tensor.view", "Tensor.reshape", "Tensor.flatten",
    "Tensor.unsqueeze", "Tensor.squeeze", "Tensor.permute", "Tensor.expand",
    "Tensor.expand_as", "torch.flatten", "torch.reshape", "torch.unsqueeze", "torch.squeeze",
    "torch.permute", "torch.flip", "Tensor.flip",
    # a comparison promotes a bool to the other operand's type: True as 1, False as 0
    *(f"{space}.{name}" for space in ("operator", "torch", "Tensor")
      for name in ("eq", "ne", "gt", "lt", "ge", "le")),
    "torch.greater", "torch.less", "torch.greater_equal", "torch.less_equal", "torch.not_equal"})


def supported_ops() -> list[str]:
    """Every module class, function and tensor method the importer maps to the IR."""
    return sorted({_module_name(cls) for cls in _MODULES}
                  | {_function_name(fn) for fn in _FUNCTIONS}
                  | {f"Tensor.{m}" for m in _METHODS})


def kind_and_converter(gm, n):
    """How a node is named in messages, and its converter (None if unsupported)."""
    if n.op == "call_module":
        module = gm.get_submodule(n.target)
        of_class = _MODULES.get(type(module))
        conv = of_class and (lambda c, *a, **k: of_class(c, module, *a, **k))
        return _module_name(type(module)), torch_qat.with_output_quantizer(conv, module)
    if n.op == "call_method":
        return f"Tensor.{n.target}", _METHODS.get(n.target)
    return _function_name(n.target), _FUNCTIONS.get(n.target)
