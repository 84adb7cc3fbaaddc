"""What the PyTorch and ONNX importers share: the IR nodes being built, the shapes the source
framework gave them, what could not be mapped, and the step that makes the checked Graph."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import ops
from ..errors import LayerError, ModelError
from ..geometry import Padding, add_padding
from ..ir import Graph, Node, fold_batchnorm

SHOWN_PER_KIND = 3  # nodes named per refused op type; the rest are counted


class Refusal(Exception):
    """A supported op called with parameters the IR cannot express (the text says which)."""


# ---- framework-neutral rules: each importer translates its arguments into these ---------


def clip(lo: float | None, hi: float | None) -> ops.Op:
    """A clamp to [lo, hi] (None: unbounded): ReLU for [0, inf), ReLU6 for [0, 6], else Clip."""
    if lo == 0 and hi is None:
        return ops.Relu()
    if lo == 0 and hi == 6:
        return ops.Relu6()
    return ops.Clip(lo, hi)


@dataclass(frozen=True)
class Pending:
    """A constant pad not applied yet (``F.pad``, ONNX ``Pad``): (top, bottom, left, right)
    pixels and the fill value. Only a conv (fill 0), max pooling (-inf) or average
    pooling (0, counted) reading the padded tensor absorbs it into its own padding."""

    pads: Padding = (0, 0, 0, 0)
    fill: float = 0.0

    def __bool__(self) -> bool:
        return any(self.pads)

    def then(self, pads, fill: float) -> Pending:
        """This padding followed by another constant one of ``fill``."""
        if self and self.fill != fill:
            raise Refusal(f"pads with {fill} what is already padded with {self.fill}")
        return Pending(add_padding(self.pads, pads), fill)

    def absorb(self, padding, fill: float) -> Padding:
        """A reader's own ``padding`` plus this one, which must be padded with ``fill``."""
        if self and self.fill != fill:
            raise Refusal(f"its input is padded with {self.fill}; only {fill} can be absorbed "
                          "here")
        return add_padding(padding, self.pads)


NO_PAD = Pending()


def not_absorbed(source: str) -> Refusal:
    """The refusal of a reader that cannot absorb the pending pad ``source`` ('F.pad', 'Pad')."""
    return Refusal(f"its input comes from {source}; the IR takes explicit padding only into "
                   "a conv (zeros), max pooling (-inf) or average pooling (zeros, counted)")


def pad(pads: Padding, mode: str, fill: float, pending: Pending) -> Pending | ops.Pad:
    """A pad of (top, bottom, left, right) pixels: constant, held (``Pending``) for the
    reader to absorb; reflect or replicate, its own ``Pad`` op."""
    if mode == "constant":
        return pending.then(pads, fill)
    if pending:
        raise Refusal(f"{mode} padding of a constant-padded tensor")
    return ops.Pad(tuple(pads), mode)


def conv(weight, bias, stride, padding, dilation, groups, pending: Pending = NO_PAD) -> ops.Conv:
    """A convolution, absorbing a pending zero pad of its input."""
    return ops.Conv(weight, bias, stride, pending.absorb(padding, 0.0), dilation, int(groups))


def max_pool(kernel, stride, padding, ceil_mode: bool, pending: Pending = NO_PAD) -> ops.Pool:
    """Max pooling, absorbing a pending -inf pad of its input."""
    return ops.MaxPool(kernel, stride, pending.absorb(padding, float("-inf")), bool(ceil_mode))


def avg_pool(kernel, stride, padding, ceil_mode: bool, count_include_pad: bool,
             pending: Pending = NO_PAD) -> ops.Pool:
    """Average pooling, absorbing a pending zero pad (counted: only where the padded
    zeros count the same as the pool's own padding)."""
    if pending and (ceil_mode or not count_include_pad):
        raise Refusal("averages a constant pad's output with ceil_mode or without "
                      "count_include_pad: the padded zeros would be counted differently")
    return ops.AvgPool(kernel, stride, pending.absorb(padding, 0.0), bool(ceil_mode),
                       bool(count_include_pad))


def per_channel(value, x_shape, what: str) -> np.ndarray | None:
    """A constant that broadcasts over ``x_shape`` as one value per channel (axis 1), flat
    (C,) float32; None if it is not of that form (so it needs a general Elementwise)."""
    value = np.asarray(value, np.float32)
    channels = x_shape[1] if len(x_shape) > 1 else 1
    dims = (1,) * (len(x_shape) - value.ndim) + value.shape
    if len(x_shape) < 2 or len(dims) != len(x_shape) \
            or any(d != 1 for i, d in enumerate(dims) if i != 1) or dims[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)


def channel_values(value, x_shape, what: str) -> np.ndarray:
    """``per_channel``, refusing (naming ``what``) a constant not of that form."""
    flat = per_channel(value, x_shape, what)
    if flat is None:
        raise Refusal(f"{what} of shape {np.shape(value)} on an input of shape "
                      f"{tuple(x_shape)}: only a scalar or one value per channel is supported")
    return flat


def with_constant(kind: str, x_shape, const, const_first: bool = False) -> ops.Op:
    """``x <kind> const`` (``const <kind> x`` when ``const_first``): a per-channel affine
    (``BatchNorm``, foldable into the conv before it) for x + c, x - c, x * c, c * x, c + x and
    x / c with a scalar or per-channel c; else an ``Elementwise`` holding the constant."""
    c = np.asarray(const, np.float32)
    flat = per_channel(c, x_shape, "constant")
    ones = None if flat is None else np.ones_like(flat)
    if flat is not None and (kind in ("add", "mul") or kind in ("sub", "div") and not const_first):
        if kind == "add":
            return ops.BatchNorm(ones, flat)
        if kind == "sub":
            return ops.BatchNorm(ones, -flat)
        scale = flat if kind == "mul" else (1 / flat.astype(np.float64)).astype(np.float32)
        return ops.BatchNorm(scale, np.zeros_like(flat))
    return ops.Elementwise(kind, c, const_first)


def binary(kind: str, shapes) -> ops.Op:
    """Two computed tensors: ``Add`` for a same-shape sum, else a broadcasting Elementwise."""
    if kind == "add" and shapes[0] == shapes[1]:
        return ops.Add()
    return ops.Elementwise(kind)


def reshape(x_shape, out_shape) -> ops.Op:
    """A reshape to ``out_shape`` (from the source framework): Flatten for N x F, else Reshape."""
    if len(out_shape) < 1 or out_shape[0] != x_shape[0]:
        raise Refusal(f"reshapes {x_shape} to {out_shape}: the IR keeps the batch axis first")
    if len(out_shape) == 2:
        return ops.Flatten()
    return ops.Reshape(tuple(out_shape[1:]))


def concat(axis: int, ndim: int) -> ops.Op:
    return ops.Concat(axis % ndim)


def softmax(axis: int, ndim: int) -> ops.Op:
    """Softmax over one ``axis`` (negative counts from the end), not the batch axis."""
    if axis % ndim == 0:
        raise Refusal("softmax over the batch axis")
    return ops.Softmax(axis % ndim)


def upsample_to(hw, pq, mode: str, align_corners: bool) -> ops.Upsample:
    """Resampling H x W (``hw``) to ``pq``: by integer factors where they divide, else to
    the size itself ('nearest' or 'bilinear')."""
    if all(o % i == 0 for i, o in zip(hw, pq, strict=True)):
        return ops.Upsample((pq[0] // hw[0], pq[1] // hw[1]), mode, bool(align_corners))
    return ops.Upsample(1, mode, bool(align_corners), tuple(pq))


def reduce(kind: str, axes, keepdims: bool, x_shape) -> ops.Op:
    """Mean or max over ``axes`` (None: all axes but the batch)."""
    axes = tuple(range(1, len(x_shape))) if axes is None else axes
    return ops.Reduce(kind, ops._axes(axes, len(x_shape), "reduce", "Reduce"), bool(keepdims))


def split(axis: int, sizes, x_shape) -> list[ops.Slice]:
    """One Slice per part of ``sizes`` along ``axis`` (Split, torch.split, chunk)."""
    axis %= len(x_shape)
    if sum(sizes) != x_shape[axis]:
        raise Refusal(f"splits axis {axis} of {x_shape} into {list(sizes)}: the parts must sum "
                      f"to {x_shape[axis]}")
    starts = np.cumsum([0, *sizes])
    return [ops.Slice(axis, int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]


@dataclass
class Lowering:
    """The IR nodes made so far, the shapes the source gave them, and what was refused:
    ``unsupported`` holds (op type, node) pairs, ``problems`` (op type, node, reason)."""

    nodes: list = field(default_factory=list)
    expected: dict = field(default_factory=dict)
    unsupported: list = field(default_factory=list)
    problems: list = field(default_factory=list)

    def add(self, name: str, op: ops.Op, inputs: tuple[str, ...], shape=None) -> str:
        """Append node ``name``; ``shape`` (if given) is the source's, checked later."""
        self.nodes.append(Node(name, op, tuple(inputs)))
        if shape is not None:
            self.expected[name] = tuple(shape)
        return name

    def linear(self, name: str, x: str, x_shape, weight, bias) -> tuple[ops.Op, tuple[str, ...]]:
        """A linear layer (weight (out, in)) over the last axis of ``x``: on N x F the
        1x1-conv FC; on N x H x W x F (channels last, as after a permute) the conv between
        two Transposes, the last of which is returned (op, inputs) for node ``name``."""
        w = np.asarray(weight, np.float32)
        conv = ops.Conv(np.ascontiguousarray(w)[:, :, None, None],
                        None if bias is None else np.asarray(bias, np.float32).reshape(-1))
        if len(x_shape) == 2:
            return conv, (x,)
        if len(x_shape) != 4:
            raise Refusal(f"input shape {tuple(x_shape)}: a linear layer takes N x features or "
                          "N x H x W x features")
        first = self.add(f"{name}_to_nchw", ops.Transpose((0, 3, 1, 2)), (x,))
        mid = self.add(f"{name}_conv", conv, (first,))
        return ops.Transpose((0, 2, 3, 1)), (mid,)

    def conv_transpose(self, name: str, x: str, weight, bias, stride, padding,
                       output_padding, groups: int) -> tuple[ops.Op, tuple[str, ...]]:
        """A transposed convolution (weight C_in x K/groups x R x S; stride, padding,
        output_padding as (h, w) pairs; dilation 1) as the convolution it is: the input with
        stride - 1 zeros inserted (a ``ZeroInsert`` node, none at stride 1), padded by
        R - 1 - padding (plus output_padding at the bottom and right), convolved at stride 1
        with the kernels flipped and their in/out channels swapped per group."""
        w = np.asarray(weight, np.float32)
        c_in, kg, r, s = w.shape
        (ph, pw), (oh, ow) = padding, output_padding
        if min(r - 1 - ph, s - 1 - pw) < 0:
            raise Refusal(f"padding {padding} larger than kernel - 1 ({r - 1}, {s - 1}): it "
                          "would crop the output")
        flipped = w.reshape(groups, c_in // groups, kg, r, s).transpose(0, 2, 1, 3, 4)
        flipped = np.ascontiguousarray(flipped.reshape(groups * kg, c_in // groups, r, s)
                                       [:, :, ::-1, ::-1])
        if tuple(stride) != (1, 1):
            x = self.add(f"{name}_zeros", ops.ZeroInsert(tuple(stride)), (x,))
        pads = (r - 1 - ph, r - 1 - ph + oh, s - 1 - pw, s - 1 - pw + ow)
        return ops.Conv(flipped, None if bias is None else np.asarray(bias, np.float32),
                        1, pads, 1, int(groups)), (x,)

    def refusal(self, where: str, supported: list[str]) -> ModelError:
        """One line grouping what was refused by op type, with counts and the first
        ``SHOWN_PER_KIND`` node names of each, then the supported list."""
        parts = []
        if self.unsupported:
            parts.append("unsupported ops: " + _grouped([(k, f"{n!r}") for k, n in
                                                          self.unsupported], ", "))
        if self.problems:
            parts.append("unsupported parameters: " + _grouped(
                [(k, f"node {n!r}: {why}") for k, n, why in self.problems], "; "))
        return ModelError(f"{where}: cannot import: {'; '.join(parts)} (fallback=True, "
                          f"--fallback: compute them in the source framework). Supported: "
                          f"{', '.join(supported)}")

    def graph(self, input_shape, outputs: str | dict[str, str], where: str, source: str,
              name: str | None = None) -> Graph:
        """The Graph whose output is node ``outputs`` (or, for several, label -> node in
        order), its shapes checked against the source's (``source`` says who gave them,
        e.g. 'PyTorch gives'), batch norms folded."""
        nodes = self.nodes
        if isinstance(outputs, str):
            outputs = {outputs: outputs}
        if "input" in outputs.values():  # a network that returns its input
            nodes = nodes + [Node("output", ops.Identity(), ("input",))]
            outputs = {("output" if k == "input" else k): ("output" if v == "input" else v)
                       for k, v in outputs.items()}
        nodes = cancel_transposes(fuse_gelu(nodes, set(outputs.values())),
                                  set(outputs.values()))
        try:
            graph = Graph(nodes, input_shape, name or where, outputs=outputs)
        except LayerError as e:
            raise ModelError(f"{where}: {e}") from e
        for node, shape in self.expected.items():
            if node in graph.shapes and graph.shapes[node] != shape:  # (not fused away)
                raise ModelError(f"{where}: node {node!r}: the IR computes shape "
                                 f"{graph.shapes[node]} where {source} {shape}")
        return fold_batchnorm(graph)


def _scalar_affine(op) -> tuple[float, float] | None:
    """(scale, shift) of an op computing ``x * scale + shift`` with scalars, else None."""
    if isinstance(op, ops.BatchNorm) and np.ptp(op.scale) == 0 and np.ptp(op.shift) == 0:
        return float(op.scale[0]), float(op.shift[0])
    if isinstance(op, ops.Elementwise) and op.const is not None and np.size(op.const) == 1 \
            and not op.const_first and op.kind in ("mul", "div", "add"):
        c = float(np.reshape(op.const, -1)[0])
        return {"mul": (c, 0.0), "div": (1 / c, 0.0), "add": (1.0, c)}[op.kind]
    return None


def _is_affine(op, scale: float, shift: float) -> bool:
    got = _scalar_affine(op)
    return got is not None and np.allclose(got, (scale, shift), rtol=1e-6, atol=1e-7)


def fuse_gelu(nodes: list, outputs: set) -> list:
    """Each exact GELU that ONNX spells as ``Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x ->
    Mul 0.5`` (torch's export before opset 20; the 0.5 may also scale x first) as one Gelu
    node named after the last node of the pattern, reading x. Intermediate nodes must be
    read only inside the pattern."""
    by = {n.name: n for n in nodes}
    readers: dict[str, list] = {}
    for n in nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)

    def only_reader(name):
        r = readers.get(name, [])
        return r[0] if len(r) == 1 and name not in outputs else None

    drop, replace = set(), {}
    for e in nodes:
        d = by.get(e.inputs[0]) if isinstance(e.op, ops.Erf) else None
        if d is None or not _is_affine(d.op, 1 / np.sqrt(2), 0) or only_reader(d.name) is not e:
            continue
        x, a = d.inputs[0], only_reader(e.name)
        m = a and _is_affine(a.op, 1, 1) and only_reader(a.name)
        if not (m and isinstance(m.op, ops.Elementwise) and m.op.kind == "mul"
                and m.op.const is None and a.name in m.inputs):
            continue
        other = by.get(m.inputs[1 - m.inputs.index(a.name)])
        h = only_reader(m.name)
        if m.inputs.count(x) == 1 and h is not None and _is_affine(h.op, 0.5, 0):
            parts, last = (d, e, a, m), h
        elif other is not None and _is_affine(other.op, 0.5, 0) and other.inputs[0] == x \
                and only_reader(other.name) is m:
            parts, last = (other, d, e, a), m
        else:
            continue
        drop.update(p.name for p in parts)
        replace[last.name] = Node(last.name, ops.Gelu(), (x,))
    return [replace.get(n.name, n) for n in nodes if n.name not in drop]


def cancel_transposes(nodes: list, outputs: set) -> list:
    """Drop each pair of Transposes that undo each other (a linear layer's way back to
    channels-last followed by the network's own permute to channels-first): the second's
    readers read the first's input. The first must be read by the second alone."""
    by = {n.name: n for n in nodes}
    readers: dict[str, int] = {}
    for n in nodes:
        for i in n.inputs:
            readers[i] = readers.get(i, 0) + 1
    renamed: dict[str, str] = {}
    for n in nodes:
        first = by.get(n.inputs[0]) if n.inputs else None
        if (isinstance(n.op, ops.Transpose) and first is not None and n.name not in outputs
                and isinstance(first.op, ops.Transpose) and readers[first.name] == 1
                and first.name not in renamed and first.name not in outputs
                and tuple(first.op.perm[p] for p in n.op.perm) == tuple(range(len(n.op.perm)))):
            renamed[first.name] = renamed[n.name] = first.inputs[0]
    return [Node(n.name, n.op, tuple(renamed.get(i, i) for i in n.inputs))
            for n in nodes if n.name not in renamed]


def _grouped(items: list[tuple[str, str]], sep: str) -> str:
    """"Erf x12 ('a', 'b', 'c', ...), Mul x1 ('m')": ``items`` of (op type, text) grouped
    by op type in order of first appearance, the first ``SHOWN_PER_KIND`` texts of each."""
    groups: dict[str, list[str]] = {}
    for kind, text in items:
        groups.setdefault(kind, []).append(text)
    return ", ".join(f"{kind} x{len(texts)} ({sep.join(texts[:SHOWN_PER_KIND])}"
                     f"{sep + '...' if len(texts) > SHOWN_PER_KIND else ''})"
                     for kind, texts in groups.items())
