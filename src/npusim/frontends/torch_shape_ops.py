"""PyTorch calls -> lowering rules for the calls that move, cut, join, resample, reduce or
pass data through (cat, permute, split, reshape, pad, indexing, interpolate, mean, softmax,
dropout): one converter per kind of call, with the torch call's own parameters (see
``torch_ops`` for what a converter takes and returns)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .. import ops
from ..geometry import pair
from . import lowering as rules
from . import torch_held
from .lowering import Refusal as _Refusal
from .torch_ops import Parts, Ref, adaptive_avg_pool2d, computed, constant, number


def cat(c, tensors, dim=0):
    """``torch.cat``: one Concat along ``dim`` of computed tensors, each with no F.pad
    pending (``computed``: a pending pad is placed as a Pad of its own first), and
    constants in their places (ViT's ``torch.cat((cls_token.expand(B, -1, -1), x), 1)``)."""
    if not isinstance(tensors, (list, tuple)):
        raise _Refusal("joins the parts of a chunk or split as one; list them "
                       "(torch.cat([p[0], p[1]], dim))")
    joined = [computed(t) for t in tensors if isinstance(t, Ref)]
    constants = [(at, constant(t, "a part")) for at, t in enumerate(tensors)
                 if not isinstance(t, Ref)]
    return rules.concat(dim, len(joined[0].shape), constants)


def reduction(kind: str):
    """The converter of ``torch.mean`` / ``x.mean`` (``kind`` "mean") or ``torch.sum`` /
    ``x.sum`` ("sum"): a Reduce over ``dim`` (every axis when None)."""
    def convert(c, input, dim=None, keepdim=False, *, dtype=None):
        x = computed(input)
        if dtype is not None:
            raise _Refusal(f"dtype={dtype}: the IR reduces in float32")
        return rules.reduce(kind, _dims(dim, x), keepdim, x.shape)
    return convert


def stack(c, tensors, dim=0):
    """``torch.stack``: each tensor given a new axis ``dim`` (a Reshape), then one Concat
    along it."""
    if not all(isinstance(t, Ref) for t in tensors):
        raise _Refusal("stacks a constant; the IR joins computed tensors only")
    shape = computed(tensors[0]).shape
    axis = dim % (len(shape) + 1)
    if axis == 0:
        raise _Refusal("stacks along the batch axis: the IR keeps the batch axis first")
    grown = ops.Reshape((*shape[1:axis], 1, *shape[axis:]))
    parts = tuple(c.build.add(f"{c.name}_unsqueeze{k}", grown, (computed(t).name,))
                  for k, t in enumerate(tensors))
    return ops.Concat(axis), parts


def expand(c, input, *sizes):
    """``x.expand(...)`` / ``x.expand_as(y)``: a Broadcast to the shape PyTorch gives (a
    pass-through when nothing repeats)."""
    x = computed(input)
    op = rules.broadcast_to(x.shape, c.out_shape)
    return x if op is None else (op, (x.name,))


def extreme(kind: str):
    """The converter of ``torch.max`` / ``x.max`` (``kind`` "max") or ``torch.min`` /
    ``x.min`` ("min"): of two tensors, ``torch.maximum`` / ``minimum``; over all axes, one
    Reduce; along ``dim``, values and indices, of which the IR gives the values (read by
    ``[0]`` or ``.values``; ``attribute``)."""
    def convert(c, input, dim=None, keepdim=False):
        if isinstance(dim, Ref):
            return rules.binary(kind, [computed(input).shape, computed(dim).shape])
        x = computed(input)
        if dim is None:
            return rules.reduce(kind, range(len(x.shape)), False, x.shape)
        return Parts(x, (rules.reduce(kind, [dim], keepdim, x.shape), None))
    return convert


def running_extreme(kind: str):
    """The converter of ``torch.cummax`` / ``x.cummax`` (``kind`` "max") or ``torch.cummin``
    / ``x.cummin`` ("min"): values and indices, of which the IR gives the values
    (``CumExtreme``, read by ``[0]`` or ``.values``)."""
    def convert(c, input, dim):
        x = computed(input)
        return Parts(x, (ops.CumExtreme(kind, int(number(dim, "dim"))), None))
    return convert


def attribute(c, obj, name):
    """``result.values`` / ``result.indices`` of a max or min along an axis, or of a running
    one (as ``[0]``, ``[1]``)."""
    if isinstance(obj, Parts) and name in ("values", "indices"):
        return getitem(c, obj, 0 if name == "values" else 1)
    raise _Refusal(f"reads attribute {name!r}: the IR reads .values of a max or min only")


def extremes(kind: str):
    """The converter of ``torch.amax`` / ``torch.amin`` (``kind`` "max" or "min")."""
    def convert(c, input, dim=(), keepdim=False):
        x = computed(input)
        return rules.reduce(kind, dim if dim != () else range(len(x.shape)), keepdim, x.shape)
    return convert


def _dims(dim, x: Ref) -> list[int] | range:
    """A reduction's ``dim`` (None: every axis; one axis; several) as a list of axes."""
    return range(len(x.shape)) if dim is None else [dim] if isinstance(dim, int) else dim


def logsumexp(c, input, dim, keepdim=False):
    """``torch.logsumexp`` / ``x.logsumexp``: ``Lowering.log_sum_exp`` over ``dim``."""
    x = computed(input)
    return c.build.log_sum_exp(c.name, x.name, x.shape, list(_dims(dim, x)), bool(keepdim))


_NORM_KINDS = {1: "l1", 2: "l2", "fro": "l2"}


def _norm_steps(p, axes, keepdim: bool, shape) -> list[ops.Op]:
    """A vector norm of order ``p`` over ``axes``: a Reduce l1 or l2 (p 1, 2 or 'fro'); the
    largest or least magnitude (p inf or -inf); else (sum |x|^p)^(1/p), as torch computes
    it (and as its exporters write it: Abs, Pow, ReduceSum, Pow)."""
    kind = _NORM_KINDS.get(p if isinstance(p, str) else float(p))
    if kind is not None:
        return [rules.reduce(kind, axes, keepdim, shape)]
    if isinstance(p, str) or not (p > 0 or p == -math.inf):
        raise _Refusal(f"p={p!r}: the IR takes vector norms of order p > 0, inf, -inf or "
                       "'fro'")
    if math.isinf(p):
        return [ops.Abs(), rules.reduce("max" if p > 0 else "min", axes, keepdim, shape)]
    total = rules.reduce("sum", axes, keepdim, shape)
    return [ops.Abs(), rules.with_constant("pow", shape, np.float32(p)), total,
            rules.with_constant("pow", total.out_shape([tuple(shape)], "norm"),
                                np.float32(1 / p))]


def norm(c, input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """``torch.norm`` / ``x.norm`` of order ``p`` over ``dim`` (Frobenius: the L2 norm of
    all the elements over it): ``_norm_steps``."""
    x = computed(input)
    if dtype is not None:
        raise _Refusal(f"dtype={dtype}: the IR reduces in float32")
    steps = _norm_steps(p, _dims(dim, x), keepdim, x.shape)
    return steps[0] if len(steps) == 1 else c.build.steps(c.name, steps, x.name)


def vector_norm(c, input, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.vector_norm``: ``norm`` of order ``ord`` over ``dim``."""
    return norm(c, input, ord, dim, keepdim, dtype=dtype)


def linalg_norm(c, input, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.norm``: without ``ord``, the L2 norm of all the elements over ``dim``
    (a vector's 2-norm, a matrix's Frobenius norm); ``ord`` 1 or 2 over one axis; a matrix
    norm of another order is refused."""
    if ord is not None and (dim is None or not isinstance(dim, int)) and ord != "fro":
        raise _Refusal(f"ord={ord!r} over {dim if dim is not None else 'all axes'}: a matrix "
                       "norm; the IR takes vector norms (ord 1 or 2 over one axis) and the "
                       "Frobenius norm")
    return norm(c, input, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)


def spread(root: bool):
    """The converter of ``torch.var`` / ``x.var`` (``root`` False) and ``torch.std`` /
    ``x.std`` (True): the mean over ``dim`` (kept), the difference from it squared, its
    sum over ``dim`` divided by the count less ``correction`` (1 unless ``unbiased=False``
    or ``correction`` says otherwise), and for std the square root."""
    def convert(c, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        x = computed(input)
        kept = rules.reduce("mean", _dims(dim, x), True, x.shape)
        count = math.prod(x.shape[a] for a in kept.axes)
        correction = (1 if unbiased is None else int(unbiased)) if correction is None \
            else float(correction)
        if count - correction <= 0:
            raise _Refusal(f"the variance of {count} value(s) with correction {correction}: "
                           "no degrees of freedom left")
        mean = c.build.add(f"{c.name}_step0", kept, (x.name,))
        total = rules.reduce("sum", kept.axes, keepdim, x.shape)
        steps = [ops.Elementwise("sub"), rules.with_constant("pow", x.shape, np.float32(2)),
                 total, rules.with_constant("div", total.out_shape([x.shape], c.name),
                                            np.float32(count - correction))]
        if root:
            steps.append(ops.Sqrt())
        diff = c.build.add(f"{c.name}_step1", steps[0], (x.name, mean))
        names = [f"{c.name}_step{k}" for k in range(2, len(steps))]
        return c.build.chain(names, steps[1:], diff)
    return convert


def normalize(c, input, p=2.0, dim=1, eps=1e-12, out=None):
    """``F.normalize``: ``x`` divided by its norm of order ``p`` along ``dim`` (kept as size
    1, ``_norm_steps``), at least ``eps`` (a Clip), a broadcasting divide."""
    x = computed(input)
    steps = [*_norm_steps(p, [dim], True, x.shape), rules.clip(float(eps), None)]
    bounded = c.build.add(f"{c.name}_norm", *c.build.steps(c.name, steps, x.name))
    return ops.Elementwise("div"), (x.name, bounded)


def permute(c, input, *dims):
    x = _layout_input(input)
    dims = tuple(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else dims
    return torch_held.transposed(c, x, rules.transpose(dims, len(x.shape)).perm)


def transpose(c, input, dim0, dim1):
    x = _layout_input(input)
    return torch_held.transposed(c, x, rules.swap_axes(dim0, dim1, len(x.shape)).perm)


def _layout_input(x) -> Ref:
    """The tensor a layout call reads: a held one too (``torch_held``)."""
    return x if isinstance(x, Ref) and x.held and not x.pad else computed(x)


def unbind(c, input, dim=0):
    """``torch.unbind`` / ``x.unbind``: every entry along ``dim`` (read by getitem): a Slice
    and a Reshape each; of a held tensor, its cuts (``torch_held.unbound``). Unbinding the
    batch axis itself is refused, but for a batch of one (its entry held:
    ``torch_held.without_batch``)."""
    if isinstance(input, Ref) and input.held:
        return torch_held.unbound(input, dim)
    x = computed(input)
    axis = int(dim) % len(x.shape)
    if axis == 0 and x.shape[0] == 1:  # a batch of one: its one entry, held
        return Parts(x, (torch_held.without_batch(c, x),))
    if axis == 0:
        raise _Refusal("unbinds the batch axis; the IR keeps it")
    kept = tuple(d for i, d in enumerate(x.shape) if i != axis)
    return Parts(x, tuple((ops.Slice(axis, i, i + 1), ops.Reshape(kept[1:]))
                          for i in range(x.shape[axis])))


def split(c, input, split_size_or_sections=None, dim=0, *, chunks=None):
    """chunk / split: one Slice per part, the part sizes as PyTorch made them."""
    x = computed(input)
    axis = dim % len(x.shape)
    return Parts(x, tuple(rules.split(axis, [p[axis] for p in c.parts], x.shape)))


def chunk(c, input, chunks, dim=0):
    return split(c, input, dim=dim)


def concatenate(c, tensors, axis=0):
    return cat(c, tensors, axis)


def reshape_to(c, input, *args, **kwargs):
    """flatten / view / reshape / squeeze / unsqueeze / unflatten: the result shape PyTorch
    produced; held where it moves the batch axis (``torch_held``)."""
    x = _layout_input(input)
    return torch_held.reshaped(c, x) or rules.reshape(x.shape, c.out_shape)


def reshape_as(c, input, other):
    """``x.view_as(y)`` / ``x.reshape_as(y)``: ``x`` to ``y``'s shape (``y`` only lends it)."""
    x = _layout_input(input)
    return torch_held.reshaped(c, x) or (rules.reshape(x.shape, c.out_shape), (x.name,))


def interpolate(c, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None, antialias=False):
    (_, _, h, w), (_, _, p, q) = computed(input, 4).shape, c.out_shape
    if mode == "area":  # PyTorch's area resampling is its adaptive average pool
        return adaptive_avg_pool2d(c, input, (p, q))
    if mode not in ("nearest", "bilinear", "bicubic") or antialias:
        raise _Refusal(f"mode={mode!r}{', antialias' if antialias else ''}: the IR resamples "
                       "'nearest', 'bilinear', 'bicubic' (no antialias) or 'area'")
    if scale_factor is not None and not recompute_scale_factor:
        op = ops.Upsample(scale_factor, mode, bool(align_corners))  # samples at 1/scale
    else:
        op = rules.upsample_to((h, w), (p, q), mode, bool(align_corners))
    check_resampling(op, (h, w), lambda t: F.interpolate(
        t, size, scale_factor, mode, align_corners, recompute_scale_factor))
    return op


def check_resampling(op: ops.Upsample, hw, torch_fn) -> None:
    """Refuse unless the IR's Upsample samples exactly as PyTorch does at this size."""
    x = np.random.default_rng(0).standard_normal((1, 1, *hw)).astype(np.float32)
    want = torch_fn(torch.from_numpy(x)).numpy()
    if not np.allclose(op(x), want, rtol=0, atol=1e-5):
        raise _Refusal("the IR's Upsample (nearest: floor(dst * step); bilinear, bicubic: "
                       "half-pixel or align_corners; step = 1/scale, or in/out for a size) "
                       "samples this size and scale differently")


def softmax(log: bool = False):
    """The converter of ``F.softmax`` / ``x.softmax`` (``log``: ``F.log_softmax``)."""
    def convert(c, input, dim=None, _stacklevel=3, dtype=None):
        computed(input)
        if dim is None or dtype is not None:
            raise _Refusal(f"dim={dim}, dtype={dtype}: give dim explicitly and no dtype")
        return rules.softmax(dim, len(input.shape), log)
    return convert


def pad(c, input, pad, mode="constant", value=None):
    """F.pad: held on the tensor until a conv or pooling absorbs it (see ``pending_pad``);
    negative pads alone, a crop (``rules.crop``)."""
    x = input if isinstance(input, Ref) else computed(input)
    fill = 0.0 if value is None else float(value)
    pad = [int(p) for p in pad]
    left, right, top, bottom = (pad + [0, 0, 0, 0])[:4]
    if mode == "constant" and min(pad) < 0 <= -max(pad) and not any(pad[4:]) \
            and len(pad) % 2 == 0:
        return c.build.steps(c.name, rules.crop((top, bottom, left, right), x.shape, x.pad),
                             x.name)
    if min(pad) < 0 or any(pad[4:]) or len(pad) % 2 or mode not in ("constant", "reflect",
                                                                     "replicate", "circular"):
        raise _Refusal(f"pad={tuple(pad)}, mode={mode!r}: only constant, reflect, replicate or "
                       "circular, non-negative padding of H and W, or a crop (no positive "
                       "pad) is supported")
    result = rules.pad((top, bottom, left, right), mode, fill, x.pad)
    if isinstance(result, rules.Pending):
        return Ref(x.name, c.out_shape, result)
    return result, (x.name,)


def getitem(c, input, index):
    """A part of chunk / split; ``x[...]`` of start:stop:step slices, integers
    (their axis dropped), None (a new axis) and one ``...``: ``rules.index``, a Slice per
    axis it cuts (chained) and a Reshape when the rank changes; a pass-through if it keeps
    the whole tensor. ``x[0, ...]`` of a batch of one is ``x`` without its batch axis
    (held: ``torch_held.cut``), cut by the rest of the index."""
    if isinstance(input, Parts):
        if not isinstance(index, int):
            raise _Refusal(f"indexes the parts of chunk / split with {index!r}; take each part "
                           "by an integer index")
        part = input.slices[index]
        if part is None:
            raise _Refusal(f"reads {input.missing}")
        if isinstance(part, Ref):
            return part
        if isinstance(part, torch_held.Entry):
            return torch_held.entry(c, input.source, part)
        if isinstance(part, tuple):  # a chain of ops
            return c.build.steps(c.name, list(part), input.source.name)
        return part, (input.source.name,)
    if isinstance(input, Ref) and input.held:
        return torch_held.cut(c, input, index)
    x = computed(input)
    first = index[0] if isinstance(index, tuple) and index else index
    if x.shape[:1] == (1,) and isinstance(first, int) and not isinstance(first, bool):
        return torch_held.cut(c, x, index)  # x[0] of a batch of one: held
    steps = rules.index(x.shape, index_slices(index, x.shape), c.out_shape)
    return c.build.steps(c.name, steps, x.name) if steps else x


def flip(c, input, *dims):
    """``torch.flip(x, dims)`` / ``x.flip(*dims)``: ``x[..., ::-1, ...]`` on each axis of
    ``dims`` (``getitem``: a Slice of step -1 an axis)."""
    x = computed(input)
    axes = dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims
    parts = [slice(None)] * len(x.shape)
    for d in axes:
        parts[int(d) % len(x.shape)] = slice(None, None, -1)
    return getitem(c, x, tuple(parts))


def flip_axis(axis: int):
    """The converter of ``torch.fliplr`` (axis 1) and ``torch.flipud`` (axis 0)."""
    return lambda c, input: flip(c, input, [axis])


def select(c, input, dim, index):
    """``x.select(dim, i)`` / ``torch.select``: ``x[..., i, ...]`` on axis ``dim``."""
    if isinstance(input, Ref) and input.held:
        return torch_held.cut(c, input, (slice(None),) * (int(dim) % len(input.shape))
                              + (int(index),))
    x = computed(input)
    return getitem(c, x, (slice(None),) * (int(dim) % len(x.shape)) + (int(index),))


def narrow(c, input, dim, start, length):
    """``x.narrow(dim, start, length)``: ``length`` entries of axis ``dim`` from ``start``
    (counted from the end when negative), as the slice it is (``getitem``)."""
    x = computed(input)
    axis = int(dim) % len(x.shape)
    first, length = int(number(start, "start")), int(number(length, "length"))
    first = first % x.shape[axis] if first < 0 else first
    return getitem(c, x, (slice(None),) * axis + (slice(first, first + length),))


def repeat(c, input, *sizes):
    """``x.repeat(...)``: the whole tensor repeated along each axis (``rules.tile``; a
    pass-through when nothing repeats)."""
    x = computed(input)
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) \
        else sizes
    steps = rules.tile(x.shape, sizes)
    return c.build.steps(c.name, steps, x.name) if steps else x


def tile(c, input, dims):
    """``torch.tile`` / ``x.tile``: ``repeat`` with fewer counts than axes taken for the last
    axes (the others once)."""
    x = computed(input)
    dims = tuple(dims)
    return repeat(c, x, (1,) * (len(x.shape) - len(dims)) + dims)


def pixel_shuffle(c, input, upscale_factor):
    """``F.pixel_shuffle`` (sub-pixel upsampling): a reshape, a transpose, a reshape."""
    x = computed(input, 4)
    return c.build.steps(c.name, rules.depth_to_space(x.shape, int(upscale_factor)), x.name)


def pixel_unshuffle(c, input, downscale_factor):
    """``F.pixel_unshuffle``: each block of pixels into channels, the same three ops."""
    x = computed(input, 4)
    return c.build.steps(c.name, rules.space_to_depth(x.shape, int(downscale_factor)), x.name)


def unfold(c, input, kernel_size, dilation=1, padding=0, stride=1):
    """``F.unfold`` / ``nn.Unfold`` (im2col: each sliding window's pixels as a column):
    ``Lowering.unfold``."""
    x = computed(input, 4)
    args = (pair(v, what, c.name) for v, what in ((kernel_size, "kernel_size"),
                                                   (dilation, "dilation"),
                                                   (padding, "padding"), (stride, "stride")))
    return c.build.unfold(c.name, x.name, x.shape, *args)


def windows(c, input, dimension, size, step):
    """``x.unfold(dimension, size, step)``: the windows of ``size`` along ``dimension``,
    ``step`` apart, in its place, each window's elements on a new last axis: the rows of
    taps gathered (``Lowering.gather``), that axis then moved last."""
    x = computed(input)
    axis, size, step = int(dimension) % len(x.shape), int(size), int(step)
    count = (x.shape[axis] - size) // step + 1  # >= 1: torch's forward checked
    taps = np.arange(count)[:, None] * step + np.arange(size)
    rows = c.build.add(f"{c.name}_windows", *c.build.gather(f"{c.name}_windows", x.name,
                                                            x.shape, axis, taps))
    perm = [*range(axis + 1), *range(axis + 2, len(x.shape) + 1), axis + 1]
    return ops.Transpose(tuple(perm)), (rows,)


def channel_shuffle(c, input, groups):
    """``F.channel_shuffle`` / ``nn.ChannelShuffle`` (ShuffleNet): a reshape, a transpose,
    a reshape."""
    x = computed(input, 4)
    return c.build.steps(c.name, rules.channel_shuffle(x.shape, int(groups)), x.name)


def index_slices(index, shape) -> list[slice]:
    """An index of slices, integers, None and at most one ``...`` as one slice per axis of
    ``shape`` (an integer ``i`` as ``i:i+1``; None adds an axis, which the result's shape
    holds)."""
    parts = list(index) if isinstance(index, tuple) else [index]
    if parts.count(Ellipsis) > 1 or not all(
            p is Ellipsis or p is None or isinstance(p, slice)
            or (isinstance(p, int) and not isinstance(p, bool)) for p in parts):
        raise _Refusal(f"indexing {shape} with {index}: the IR indexes with start:stop:step "
                       "slices, integers, None and one '...' (no tensors, lists or booleans)")
    parts = [p for p in parts if p is not None]
    if Ellipsis in parts:
        i = parts.index(Ellipsis)
        parts[i:i + 1] = [slice(None)] * (len(shape) - len(parts) + 1)
    if len(parts) > len(shape):
        raise _Refusal(f"indexing {shape} with {index}: more indices than axes")
    for axis, p in enumerate(parts):
        if isinstance(p, int):
            parts[axis] = slice(p % shape[axis], p % shape[axis] + 1)
    return parts + [slice(None)] * (len(shape) - len(parts))


def dropout(c, input, p=0.5, training=True, inplace=False):
    if training:
        raise _Refusal("training=True drops at random; pass training=self.training")
    return computed(input)


def _float32(value, what: str) -> None:
    """Refuse a dtype, a tensor type name (``"torch.HalfTensor"``) or a tensor whose dtype
    is not float32, which the IR computes in (a device, given as a string or not, is
    nothing the IR holds)."""
    dtype = value.dtype if isinstance(value, torch.Tensor) else value
    if isinstance(dtype, str) and not dtype.startswith("torch."):
        return  # a device: "cpu", "cuda:0"
    if isinstance(dtype, (torch.dtype, str)) and dtype not in (torch.float32,
                                                               "torch.FloatTensor"):
        raise _Refusal(f"{what} {dtype}: the IR computes in float32; only a conversion to "
                       "float32 (a no-op) is imported")


def same_tensor(c, input, *args, **kwargs):
    """``x.contiguous()``, ``x.float()``, ``x.clone()``, ``x.detach()``, ``x.cpu()``,
    ``x.to(...)``, ``x.type_as(y)``, ``x.type(...)`` of a float32 tensor: the tensor itself,
    where the result stays float32 (a device, ``non_blocking``, ``copy`` and
    ``memory_format`` change nothing the IR holds); a held tensor stays held."""
    x = _layout_input(input)
    for value in (*args, kwargs.get("dtype")):
        if not isinstance(value, Ref):  # a Ref is a network tensor: float32
            _float32(value, "converts to")
    return x
