"""PyTorch tensors whose batch axis a call moved, held as views (``lowering.batch_view``), as
``onnx_held`` holds ONNX's.

A permute, transpose or reshape that moves the batch axis from first place (timm's
``qkv.permute(2, 0, 3, 1, 4)``, Swin's windows ``x.view(-1, p, p, c)``, MobileViT's patches)
gives a ``Ref`` whose ``held`` is the tensor as a view of an IR tensor that keeps the batch
first. Which calls read one:

- layout calls (``READERS``: permutes, reshapes, indexing, ``select``, ``unbind``, the
  float32 no-ops) change the view, each in its converter (``transposed``, ``reshaped``,
  ``cut``);
- computing calls (``ACROSS``, ``ELEMENTWISE``: linear layers, products, softmax,
  ``F.normalize``, reductions that keep their axes, layer norms, arithmetic, activations)
  run on the view's canonical form by their converter, which sees canonical ``Ref``s, a
  ``dim`` counted from the end and constants with an axis for the batch, where they do not
  work across the axis that holds the batch;

and a result that puts the batch alone first again is an ordinary tensor. Any other reader
(or a computing call that cannot be followed) takes a held tensor as it is, the batch where
torch has it (``Held.as_is``: an IR transpose), where its first axis is one of the IR
tensor's; else it is refused, naming where the tensor holds the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import ops
from ..errors import LayerError
from .lowering import Refusal
from .lowering.batch_view import Held, computable, with_batch_axis
from .torch_ops import Call, Parts, Ref

# the calls whose converters take a held tensor themselves (a sequence-first transformer
# module: its L x N x E tokens, ``torch_transformer.tokens``)
READERS = frozenset({
    "operator.getitem", "torch.unbind", "Tensor.unbind", "torch.select", "Tensor.select",
    "torch.permute", "Tensor.permute", "torch.transpose", "Tensor.transpose", "torch.flatten",
    "Tensor.flatten", "torch.reshape", "Tensor.reshape", "Tensor.view", "torch.unflatten",
    "Tensor.unflatten", "Tensor.squeeze", "Tensor.unsqueeze", "Tensor.view_as",
    "Tensor.reshape_as", "nn.Flatten", "nn.Unflatten", "Tensor.contiguous", "Tensor.clone",
    "Tensor.detach", "torch.clone", "torch.detach", "Tensor.float", "Tensor.to",
    "Tensor.type_as", "Tensor.type", "Tensor.cpu", "nn.MultiheadAttention",
    "nn.TransformerEncoderLayer", "nn.TransformerDecoderLayer", "nn.TransformerEncoder",
    "nn.TransformerDecoder", "nn.Transformer"})
_PRODUCTS = ("operator.matmul", "torch.matmul", "Tensor.matmul", "torch.bmm", "Tensor.bmm")
_SOFTMAX = ("F.softmax", "torch.softmax", "Tensor.softmax", "F.log_softmax",
            "torch.log_softmax", "Tensor.log_softmax")
_REDUCTIONS = ("torch.mean", "Tensor.mean", "torch.sum", "Tensor.sum", "torch.amax",
               "Tensor.amax", "torch.amin", "Tensor.amin")
# calls that work along ``dim`` (one axis, or several for a reduction): its position among
# the arguments and its default (None, (): every axis)
_ALONG = {**dict.fromkeys(_SOFTMAX, (1, -1)), "F.normalize": (2, 1),
          **dict.fromkeys(_REDUCTIONS[:4], (1, None)), **dict.fromkeys(_REDUCTIONS[4:], (1, ()))}


def _products(args, kwargs, module, k):
    return (k - 2, k - 1) if sum(isinstance(a, Ref) for a in args[:2]) == 2 else (k - 1,)


def _layer_norm(args, kwargs, module, k):
    shape = module.normalized_shape if module is not None else \
        (args[1] if len(args) > 1 else kwargs["normalized_shape"])
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return tuple(range(k - len(shape), k))


# call -> the axes of its rank-k result it works across (from its arguments and module)
ACROSS = {
    **dict.fromkeys(_PRODUCTS, _products),
    **dict.fromkeys(("nn.Linear", "F.linear"), lambda args, kwargs, module, k: (k - 1,)),
    **{kind: lambda args, kwargs, module, k, kind=kind: _axes(args, kwargs, kind, k)
       for kind in _ALONG},
    **dict.fromkeys(("nn.LayerNorm", "F.layer_norm"), _layer_norm),
    "F.scaled_dot_product_attention": lambda args, kwargs, module, k: (k - 2, k - 1),
}
ELEMENTWISE = frozenset({
    "operator.add", "operator.sub", "operator.mul", "operator.truediv", "operator.neg",
    "torch.add", "torch.sub", "torch.mul", "torch.div", "Tensor.add", "Tensor.sub",
    "Tensor.mul", "Tensor.div", "nn.GELU", "nn.SiLU", "nn.ReLU", "nn.Sigmoid", "nn.Tanh",
    "nn.Dropout", "nn.Identity", "F.gelu", "F.silu", "F.relu", "F.dropout", "torch.sigmoid",
    "Tensor.sigmoid", "torch.tanh", "Tensor.tanh", "torch.relu", "Tensor.relu", "torch.exp",
    "Tensor.exp", "operator.pow", "torch.abs", "Tensor.abs", "torch.neg", "Tensor.neg",
    "torch.sqrt", "Tensor.sqrt", "torch.rsqrt", "Tensor.rsqrt", "torch.square",
    "Tensor.square", "torch.pow", "Tensor.pow", "torch.reciprocal", "Tensor.reciprocal",
    "torch.log", "Tensor.log", "torch.erf", "Tensor.erf", "torch.clamp", "Tensor.clamp",
    "torch.clip", "Tensor.clip", "nn.ReLU6", "F.relu6", "nn.Hardswish", "F.hardswish",
    "nn.LeakyReLU", "F.leaky_relu"})


@dataclass(frozen=True)
class Entry:
    """A part of ``unbind`` of a held tensor: entry ``index`` of ``axis``, cut when getitem
    reads it."""

    axis: int
    index: int


def of(x: Ref) -> Held:
    """``x`` as a held tensor (an ordinary one as a view of itself)."""
    return x.held or Held.of(x.name, x.shape)


def ref(c: Call, placed: tuple[str, Held | None]) -> Ref:
    """The ``Ref`` of a result ``Held.placed`` left: ordinary, or held."""
    node, held = placed
    return Ref(node, tuple(c.out_shape), held=held)


def transposed(c: Call, x: Ref, perm):
    """``x`` permuted by ``perm``: an IR ``Transpose`` where the batch stays first, else
    held."""
    if x.held is None and perm[0] == 0:
        return ops.Transpose(tuple(perm))
    return ref(c, of(x).transposed(c.build, c.name, perm))


def reshaped(c: Call, x: Ref):
    """``x`` reshaped to torch's result shape: held where it moves the batch axis (or ``x`` is
    held), else None (an IR reshape)."""
    if x.held is None and c.out_shape[:1] == x.shape[:1]:
        return None
    return ref(c, of(x).reshaped(c.build, c.name, c.out_shape))


def without_batch(c: Call, x: Ref) -> Ref:
    """Ordinary ``x`` of a batch of one without its batch axis (``x[0]``, ``x.select(0, 0)``,
    ``x.unbind(0)[0]``): the same data, held with the batch joined to its first axis, as
    ``x.reshape(x.shape[1:])`` is."""
    node, held = of(x).reshaped(c.build, c.name, x.shape[1:])
    return Ref(node, tuple(x.shape[1:]), held=held)


def cut(c: Call, x: Ref, index) -> Ref:
    """``x[index]`` of a held ``x`` (or an ordinary one whose batch of one it takes):
    slices, integers, new axes (None) and one ``...``, each slice or integer along an axis
    that is one atom of its view; an integer of an axis of size one drops it as a reshape
    does (``x[0]`` of a batch of one: the image, the batch joined to its first axis)."""
    held, where = of(x), x.held.view.where if x.held else "a batch of one"
    given = list(index) if isinstance(index, tuple) else [index]
    if given.count(Ellipsis) > 1 or not all(
            p is Ellipsis or p is None or isinstance(p, slice) or isinstance(p, int)
            and not isinstance(p, bool) for p in given):
        raise Refusal(f"indexes a tensor of {where} with {index!r}: the IR takes entries of "
                      "such a tensor by slices, integers, None and one '...'")
    parts = [p for p in given if p is not None]
    if Ellipsis in parts:
        at = parts.index(Ellipsis)
        parts[at:at + 1] = [slice(None)] * (len(x.shape) - len(parts) + 1)
    parts += [slice(None)] * (len(x.shape) - len(parts))
    reshaped = None in given or any(isinstance(p, int) and x.shape[axis] == 1
                                    for axis, p in enumerate(parts))
    cuts = [(axis, p, True) if isinstance(p, slice) else
            (axis, slice(None), True) if x.shape[axis] == 1 else
            (axis, slice(p % x.shape[axis], p % x.shape[axis] + 1), False)
            for axis, p in enumerate(parts)]
    new_shape = c.out_shape if reshaped else None  # the cuts last first: axes stay put
    return ref(c, held.cut(c.build, c.name, cuts[::-1], new_shape))


def entry(c: Call, x: Ref, part: Entry) -> Ref:
    """Entry ``part`` of ``unbind`` of held ``x``."""
    return ref(c, x.held.cut(c.build, c.name,
                             [(part.axis, slice(part.index, part.index + 1), False)]))


def unbound(x: Ref, dim: int) -> Parts:
    """``unbind(dim)`` of held ``x``: its entries, cut when read."""
    axis = int(dim) % len(x.shape)
    return Parts(x, tuple(Entry(axis, i) for i in range(x.shape[axis])))


def convert(conv, call: Call, kind: str, module, args, kwargs):
    """A call of ``kind`` reading held tensors that its converter does not take itself: on
    their canonical forms where it computes (``ACROSS``, ``ELEMENTWISE``) and can; else
    (what it built taken back) on each given as it is. (the result, a ``Ref`` or ``Parts``,
    None) or (None, why it is refused)."""
    build, built, where = call.build, len(call.build.nodes), _where(args, kwargs)
    why = (f"it reads {where}; the IR reads it once a reshape or permute puts the batch axis "
           "first again")
    if kind in ACROSS or kind in ELEMENTWISE:
        try:
            return _computed(conv, call, kind, module, args, kwargs), None
        except (Refusal, TypeError, LayerError) as e:
            why = str(e)
            build.take_back(built)
    given = _given_as_is(call, args, kwargs)
    if _cannot(given):
        return None, why
    args, kwargs = given
    try:
        result = conv(call, *args, **kwargs)
    except (Refusal, TypeError, LayerError) as e:
        return None, f"it reads {where}, and given it as it is: {e}"
    return _placed(call, result, args, kwargs, call.out_shape), None


def _given_as_is(call: Call, args, kwargs):
    """``args`` and ``kwargs`` with each held tensor given as it is (``Held.as_is``: nodes
    ``<call>_as_is<k>_<j>``), or a ``_Cannot`` in its place where the IR cannot give it."""
    count = iter(range(1 << 30))
    return torch.fx.node.map_aggregate((args, kwargs), lambda v: _as_is(call, v, count))


class _Cannot:
    """A held argument that cannot be given as it is."""


def _cannot(given) -> bool:
    """Whether ``_given_as_is`` could not give some argument."""
    return any(isinstance(v, _Cannot) for v in _flat(given))


def _as_is(call: Call, v, count):
    """Argument ``v``, given as it is if it is held (``Held.as_is``: nodes
    ``<call>_as_is<k>_<j>``)."""
    if not (isinstance(v, Ref) and v.held):
        return v
    node = v.held.as_is(call.build, f"{call.name}_as_is{next(count)}_")
    return _Cannot() if node is None else Ref(node, v.shape, dtype=v.dtype)


def _computed(conv, call: Call, kind: str, module, args, kwargs) -> Ref:
    """A computing call on the canonical forms of its held arguments."""
    refs = [v for v in _flat((args, kwargs)) if isinstance(v, Ref)]
    if any(not r.held for r in refs):
        raise Refusal(f"it combines {_where(args, kwargs)} with a tensor whose batch axis is "
                      "first: the IR does not mix tensors that hold the batch in different "
                      "axes")
    k = len(call.out_shape)
    try:
        j0 = computable([r.held.view for r in refs], k,
                        ACROSS.get(kind, lambda *a: ())(args, kwargs, module, k))
    except Refusal as e:
        raise Refusal(f"it reads {_where(args, kwargs)} and {e}") from None
    canon = {}

    def canonical(v):
        if isinstance(v, Ref):
            if v.name not in canon:
                canon[v.name] = v.held.canonical(call.build, f"{call.name}_{v.name}_canonical")
            held = canon[v.name]
            return Ref(held.base, held.shape, dtype=v.dtype)
        if kind in ELEMENTWISE and isinstance(v, torch.Tensor) and v.ndim:
            value = with_batch_axis(v.detach().cpu().numpy(), k, j0)  # a parameter too
            return torch.from_numpy(np.ascontiguousarray(value))
        return v

    args2, kwargs2 = torch.fx.node.map_aggregate((args, kwargs), canonical)
    if kind in _ALONG:
        args2, kwargs2 = _from_the_end(args2, kwargs2, k, kind)
    out_view = next(iter(canon.values())).view.computed(call.out_shape)
    out_shape = out_view.canonical()[0]
    inner = Call(call.name, out_shape, call.build, call.parts)
    node = _placed(inner, conv(inner, *args2, **kwargs2), args2, kwargs2, out_shape).name
    return ref(call, Held(node, out_shape, out_view).placed(
        call.build, f"{call.name}_plain", [], out_view))


def _placed(call: Call, result, args, kwargs, shape):
    """A converter's result as a ``Ref`` (or ``Parts``): an op or (op, inputs) placed as node
    ``call.name``."""
    if isinstance(result, (Ref, Parts)):
        return result
    refs = [v.name for v in _flat((args, kwargs)) if isinstance(v, Ref)]
    return Ref(call.build.place(call.name, result, refs, shape), tuple(shape))


def _axes(args, kwargs, kind: str, k: int) -> tuple[int, ...]:
    """The axes (of a rank-``k`` result) a call of ``_ALONG`` works along: its ``dim``, one
    or several, every axis when None or empty; a reduction must keep them (``keepdim``)."""
    at, default = _ALONG[kind]
    dim = args[at] if len(args) > at else kwargs.get("dim", default)
    if kind in _REDUCTIONS and not (args[at + 1] if len(args) > at + 1 else kwargs.get(
            "keepdim", False)):
        raise Refusal("drops the axes it reduces; the IR follows a reduction of such a tensor "
                      "that keeps them (keepdim=True)")
    dims = range(k) if dim is None or dim == () else [dim] if isinstance(dim, int) else dim
    return tuple(int(d) % k for d in dims)


def _from_the_end(args, kwargs, k: int, kind: str):
    """The arguments of a call of ``_ALONG`` with its ``dim`` counted from the end (the
    canonical form has one axis more, in front): one axis, or a reduction's tuple."""
    at, axes = _ALONG[kind][0], tuple(d - k for d in _axes(args, kwargs, kind, k))
    dim = axes if kind in _REDUCTIONS else axes[0]
    if len(args) > at:
        return (*args[:at], dim, *args[at + 1:]), kwargs
    return args, {**kwargs, "dim": dim}


def _where(args, kwargs) -> str:
    """Each held argument, once, by where it holds the batch."""
    held = {v.name: v.held for v in _flat((args, kwargs)) if isinstance(v, Ref) and v.held}
    return ", ".join(f"a tensor of {h.view.where}" for h in held.values())


def _flat(value) -> list:
    found = []
    torch.fx.node.map_aggregate(value, found.append)
    return found
