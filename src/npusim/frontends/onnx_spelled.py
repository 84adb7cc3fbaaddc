"""Ops that torch's exporters spell out as several ONNX nodes, which the IR would take one by
one (costed as their parts) or not at all (a 5-D view, a gather of pixels), found on the ONNX
graph and imported as the one IR op they compute.

- ``nn.Softplus(beta, threshold)``, as the dynamo exporter writes it:
  ``Where(Greater(t, threshold), x, s)``, with ``t = x`` and ``s = Softplus(x)`` for beta
  1, else ``t = Mul(x, beta)`` and ``s = Div(Softplus(t), beta)``: PyTorch's rule, x
  itself where beta x passes the threshold. As ``ops.Softplus(beta, threshold)``.
- ``nn.LocalResponseNorm(size, alpha, beta, k)``, as both exporters write it (PyTorch's
  ``local_response_norm`` on a 4-D input): ``Mul(x, x)``, a ``Reshape`` to N x 1 x C x H x
  W, a ``Pad`` of that view's channel axis (``size // 2`` before, ``(size - 1) // 2``
  after), an ``AveragePool`` of ``size x 1 x 1``, then nodes that change only the shape
  back to x's (``Squeeze``, ``Reshape``, ``Identity``: TorchScript's squeeze is an ``If``
  that ``onnx_model.inline_static_ifs`` has replaced by its branch), then
  ``Div(x, Pow(Add(Mul(., alpha), k), beta))``. As ``ops.LocalResponseNorm`` with the
  pad's window (front = the pad before).

- ``nn.AdaptiveAvgPool2d((P, Q))`` whose windows along each axis are of one length but do
  not tile it, as the dynamo exporter writes it (the TorchScript one refuses):
  ``ReduceMean(Transpose(GatherND(Transpose(x, (2, 3, 0, 1)), idx), (4, 5, 0, 1, 2, 3)),
  axes (3, 5))``, ``idx`` (P x kh x Q x kw x 2) the rows and columns of each window. Taken
  when ``idx`` holds exactly PyTorch's adaptive windows of x; as ``ops.AdaptivePool``.

A pattern is taken only whole and only when the nodes inside it are read by nothing else
(a ``Shape`` of one of them reads no value: shapes are static here), so that nothing
needs a value the IR does not compute; its last node's output may be read by anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import ops
from .lowering import Refusal
from .onnx_model import Model, constant, reads

SHAPE_ONLY = ("Squeeze", "Unsqueeze", "Reshape", "Identity", "Flatten")


@dataclass(frozen=True)
class Spelled:
    """One found pattern: the IR op it computes, the ONNX tensor that op reads, and the
    indices of the pattern's nodes before its last."""

    op: ops.Op
    source: str
    inside: frozenset


class _Graph:
    """The ONNX graph as the patterns read it: each tensor's producer and readers."""

    def __init__(self, model, m: Model):
        self.nodes, self.m = list(model.graph.node), m
        self.made_by = {t: i for i, n in enumerate(self.nodes) for t in n.output if t}
        self.readers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for t in reads(n):
                self.readers.setdefault(t, []).append(i)
        self.outputs = {o.name for o in model.graph.output}

    def made(self, tensor: str, op_type: str) -> int | None:
        """The index of the node of ``op_type`` that makes ``tensor``, else None."""
        i = self.made_by.get(tensor)
        return i if i is not None and self.nodes[i].op_type == op_type else None

    def value(self, tensor: str) -> np.ndarray | None:
        """``tensor``'s value if it is a constant, else None."""
        if not tensor or tensor in self.m.depends:
            return None
        try:
            return constant(self.m, tensor)
        except Refusal:
            return None

    def scalar(self, tensor: str) -> float | None:
        """A one-element float constant's value, else None."""
        v = self.value(tensor)
        if v is None or v.size != 1 or not np.issubdtype(v.dtype, np.floating):
            return None
        return float(v.reshape(-1)[0])

    def scaled(self, i: int | None) -> tuple[str, float] | None:
        """(the tensor, the scalar) of node ``i`` (a binary op) of one tensor and one
        scalar constant, in either order, else None."""
        if i is None or len(self.nodes[i].input) != 2:
            return None
        a, b = self.nodes[i].input
        for t, c in ((a, b), (b, a)):
            if t in self.m.depends and (v := self.scalar(c)) is not None:
                return t, v
        return None

    def shape(self, tensor: str) -> tuple | None:
        return self.m.shapes.get(tensor)

    def attrs(self, i: int) -> dict:
        from onnx import helper

        return {a.name: helper.get_attribute_value(a) for a in self.nodes[i].attribute}

    def read_only_inside(self, inside: set, last: int) -> bool:
        """Whether the outputs of the nodes ``inside`` are read by those nodes and
        ``last`` alone (a ``Shape`` or ``Size`` of them aside), and none is a graph
        output."""
        for i in inside:
            for t in self.nodes[i].output:
                if t in self.outputs:
                    return False
                for r in self.readers.get(t, []):
                    if r not in inside and r != last \
                            and self.nodes[r].op_type not in ("Shape", "Size"):
                        return False
        return True


def find(model, m: Model) -> dict[int, Spelled]:
    """Every pattern of the module notes in the graph, by the index of its last node."""
    g, found = _Graph(model, m), {}
    for i, node in enumerate(g.nodes):
        match = {"Where": _softplus, "Div": _local_response_norm,
                 "ReduceMean": _adaptive_mean}.get(node.op_type)
        spelled = match(g, i) if match else None
        if spelled is not None and g.read_only_inside(set(spelled.inside), i):
            found[i] = spelled
    taken = [j for s in found.values() for j in s.inside]
    if len(taken) != len(set(taken)) or set(taken) & set(found):
        return {}  # patterns that overlap: none is taken (not written by any exporter)
    return found


def _softplus(g: _Graph, i: int) -> Spelled | None:
    """``Where(Greater(t, threshold), x, s)`` (see the module notes), else None."""
    if len(g.nodes[i].input) != 3:
        return None
    cond, x, soft = g.nodes[i].input
    greater = g.made(cond, "Greater")
    if greater is None or x not in g.m.depends:
        return None
    t, limit = g.nodes[greater].input
    threshold = g.scalar(limit)
    if threshold is None:
        return None
    plain = g.made(soft, "Softplus")
    if plain is not None:  # beta 1: t is x itself
        if t != x or g.nodes[plain].input[0] != x:
            return None
        return Spelled(ops.Softplus(1.0, threshold), x, frozenset((greater, plain)))
    div = g.made(soft, "Div")
    if div is None:
        return None
    beta = g.scalar(g.nodes[div].input[1])
    plain = g.made(g.nodes[div].input[0], "Softplus")
    mul = g.made(t, "Mul")
    if beta is None or beta <= 0 or plain is None or g.nodes[plain].input[0] != t \
            or g.scaled(mul) != (x, beta):
        return None
    return Spelled(ops.Softplus(beta, threshold), x, frozenset((greater, plain, div, mul)))


def _local_response_norm(g: _Graph, i: int) -> Spelled | None:
    """``Div(x, Pow(Add(Mul(y, alpha), k), beta))`` with y the window's mean of x squared
    (see the module notes), else None."""
    x, den = g.nodes[i].input
    power = g.made(den, "Pow")
    if power is None or x not in g.m.depends or len(g.shape(x) or ()) != 4 \
            or g.nodes[power].input[0] not in g.m.depends:
        return None
    beta = g.scalar(g.nodes[power].input[1])
    add = g.made(g.nodes[power].input[0], "Add")
    scaled, k = g.scaled(add) or (None, None)
    mul = None if scaled is None else g.made(scaled, "Mul")
    y, alpha = g.scaled(mul) or (None, None)
    if beta is None or y is None or g.shape(y) != g.shape(x):
        return None
    reshaped, pool = _shape_only_chain(g, y)
    window = None if pool is None else _channel_window(g, pool, x)
    if window is None:
        return None
    size, front, before = window
    inside = {power, add, mul, pool, *reshaped, *before}
    return Spelled(ops.LocalResponseNorm(size, alpha, beta, k, front), x, frozenset(inside))


def _shape_only_chain(g: _Graph, tensor: str) -> tuple[list[int], int | None]:
    """The nodes that change only the shape from an ``AveragePool``'s output to
    ``tensor``, and that pool's index (None if the chain does not start at one)."""
    chain = []
    while (i := g.made_by.get(tensor)) is not None:
        if g.nodes[i].op_type == "AveragePool":
            return chain, i
        if g.nodes[i].op_type not in SHAPE_ONLY:
            break
        chain.append(i)
        tensor = g.nodes[i].input[0]
    return chain, None


def _channel_window(g: _Graph, pool: int, x: str) -> tuple[int, int, list[int]] | None:
    """(size, front, the Mul, Reshape and Pad before the pool) when ``pool`` averages a
    window of ``size`` channels of x squared, viewed as N x 1 x C x H x W and padded with
    zeros by ``front`` channels before and ``size - 1 - front`` after, else None."""
    a = g.attrs(pool)
    kernel = list(a.get("kernel_shape", ()))
    if len(kernel) != 3 or kernel[1:] != [1, 1] or any(s != 1 for s in a.get("strides", [1])) \
            or any(a.get("pads", [0])) or any(d != 1 for d in a.get("dilations", [1])) \
            or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    pad = g.made(g.nodes[pool].input[0], "Pad")
    view = None if pad is None else g.made(g.nodes[pad].input[0], "Reshape")
    square = None if view is None else g.made(g.nodes[view].input[0], "Mul")
    if square is None or list(g.nodes[square].input) != [x, x]:
        return None
    n, c, h, w = g.shape(x)
    if g.shape(g.nodes[view].output[0]) != (n, 1, c, h, w):
        return None
    pads = _zero_pads(g, pad)
    size = kernel[0]
    if pads is None or pads[:2] + pads[3:7] + pads[8:] != [0] * 8 \
            or pads[2] + pads[7] != size - 1 or min(pads) < 0:
        return None
    return size, pads[2], [square, view, pad]


def _zero_pads(g: _Graph, pad: int) -> list[int] | None:
    """A constant-mode, zero-valued ``Pad``'s pads over all axes (before opset 11 an
    attribute), else None."""
    a, inputs = g.attrs(pad), list(g.nodes[pad].input) + ["", "", ""]
    if a.get("mode", b"constant") not in (b"constant", "constant") or inputs[3]:
        return None
    fill = g.value(inputs[2]) if inputs[2] else np.zeros(1)
    pads = g.value(inputs[1]) if inputs[1] else np.asarray(a.get("pads", []))
    if fill is None or pads is None or fill.size != 1 or float(fill.reshape(-1)[0]) != 0:
        return None
    return [int(p) for p in pads.reshape(-1)] if pads.size == 10 else None


def _adaptive_mean(g: _Graph, i: int) -> Spelled | None:
    """``ReduceMean`` over the windows a ``GatherND`` of constant indices gathered from x
    (see the module notes), else None."""
    a = g.attrs(i)
    axes = g.value(g.nodes[i].input[1]) if len(g.nodes[i].input) > 1 else a.get("axes")
    back = g.made(g.nodes[i].input[0], "Transpose")
    gather = None if back is None else g.made(g.nodes[back].input[0], "GatherND")
    there = None if gather is None else g.made(g.nodes[gather].input[0], "Transpose")
    if there is None or axes is None or a.get("keepdims", 1) != 0 \
            or sorted(int(x) % 6 for x in np.reshape(axes, -1)) != [3, 5] \
            or list(g.attrs(back).get("perm", ())) != [4, 5, 0, 1, 2, 3] \
            or list(g.attrs(there).get("perm", ())) != [2, 3, 0, 1] \
            or g.attrs(gather).get("batch_dims", 0) != 0:
        return None
    x, idx = g.nodes[there].input[0], g.value(g.nodes[gather].input[1])
    shape = g.shape(x)
    if x not in g.m.depends or shape is None or len(shape) != 4 or idx is None \
            or idx.ndim != 5 or idx.shape[-1] != 2:
        return None
    p, kh, q, kw, _ = idx.shape
    rows, cols = _windows(shape[2], p, kh), _windows(shape[3], q, kw)
    if rows is None or cols is None or not (idx[..., 0] == rows[:, :, None, None]).all() \
            or not (idx[..., 1] == cols[None, None]).all():
        return None
    return Spelled(ops.AdaptivePool((p, q), "avg"), x, frozenset((there, gather, back)))


def _windows(size: int, out: int, length: int) -> np.ndarray | None:
    """The pixels of PyTorch's ``out`` adaptive windows over ``size`` (out x length), when
    every window is ``length`` long, else None."""
    o = np.arange(out)
    start, end = o * size // out, -(-(o + 1) * size // out)
    if not np.all(end - start == length):
        return None
    return start[:, None] + np.arange(length)
