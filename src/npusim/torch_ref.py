"""A PyTorch mirror of a ``Graph``: the independent judge of npusim's outputs, layer by layer.

``to_torch(graph)`` gives an ``nn.Module`` that computes the same network with
``torch.nn.functional`` ops, one small module per node, weights as parameters
(shared memory with the graph's numpy arrays, no copy). It is traceable by
``torch.fx`` and exportable with ``torch.onnx``. ``torch_outputs(graph, x)``
returns every node's output, which ``--check`` compares with npusim's.

Where torch has the op natively it is used with its own arguments (symmetric
padding, ``count_include_pad``); geometry it cannot express directly (asymmetric
padding, and ceil mode, whose rule ONNX does not share with torch) goes through
``F.pad`` first: zeros for convs, -inf for max pooling, and for average pooling a
ratio of two pooled sums whose divisor counts the pixels npusim's op counts.
"""

from __future__ import annotations

import numpy as np

from . import ops
from .errors import ModelError
from .geometry import used_pixels
from .ir import Graph

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # torch is an optional extra
    torch = None


def _require_torch() -> None:
    if torch is None:
        raise ModelError("PyTorch is not installed: pip install 'npusim[torch]' "
                         "(torch==2.13.0) to compare against it")


def _tensor(a) -> torch.Tensor:
    """``a`` as a float32 torch tensor, copied where it is read-only (weights onnx read
    straight from the file's buffer are: torch warns on a non-writable array)."""
    return torch.from_numpy(np.require(a, np.float32, ["C_CONTIGUOUS", "WRITEABLE"]))


if torch is not None:

    class Conv(nn.Module):
        """conv2d (or linear on an N x F input), asymmetric padding through F.pad."""

        def __init__(self, op: ops.Conv, flat_input: bool):
            super().__init__()
            self.weight = nn.Parameter(_tensor(op.weight))
            self.bias = None if op.bias is None else nn.Parameter(_tensor(op.bias))
            self.flat = flat_input
            t, b, l, r = op.padding
            self.symmetric = t == b and l == r
            self.pad, self.pad4 = (t, l), (l, r, t, b)
            self.stride, self.dilation = op.stride, op.dilation
            self.groups = op.groups

        def forward(self, x):
            if self.flat:
                return F.linear(x, self.weight.flatten(1), self.bias)
            pad = self.pad
            if not self.symmetric:
                x, pad = F.pad(x, self.pad4), 0
            return F.conv2d(x, self.weight, self.bias, self.stride, pad, self.dilation,
                            self.groups)

    class Pool(nn.Module):
        """max / average pooling with npusim's geometry (see the module docstring)."""

        def __init__(self, op: ops.Pool, in_hw: tuple[int, int], out_hw: tuple[int, int]):
            super().__init__()
            (self.k, self.s, pad4), self.d = op.geometry(), op.dilation
            self.kind, self.cip = op.kind, op.count_include_pad
            t, b, l, r = pad4
            self.pad, self.pad4 = (t, l), (l, r, t, b)
            # extra bottom/right so the last ceil-mode window exists: explicit, because
            # ONNX's ceil-mode rule differs from torch's (an exported model must agree)
            (h, w), (sh, sw) = in_hw, op.span()
            self.extra = (0, max(0, used_pixels(out_hw[1], sw, self.s[1]) - (w + l + r)),
                          0, max(0, used_pixels(out_hw[0], sh, self.s[0]) - (h + t + b)))
            self.out_hw = tuple(out_hw)  # npusim's ceil rule may drop a floor-mode window too
            self.native = (t == b and l == r and 2 * t <= self.k[0] and 2 * l <= self.k[1]
                           and not any(self.extra))
            self.register_buffer("count", self._count(in_hw), persistent=False)

        def _count(self, in_hw):
            """Pixels each window divides by (average pooling off the native path)."""
            if self.native or self.kind == "max":
                return torch.ones(0)
            # real pixels count; padding only with count_include_pad; the ceil extension never
            ones = F.pad(torch.ones(1, 1, *in_hw), self.pad4, value=float(self.cip))
            return F.avg_pool2d(F.pad(ones, self.extra), self.k, self.s)

        def forward(self, x):
            if self.native and self.kind == "max":
                return F.max_pool2d(x, self.k, self.s, self.pad, self.d)
            if self.native:
                return F.avg_pool2d(x, self.k, self.s, self.pad, count_include_pad=self.cip)
            fill = float("-inf") if self.kind == "max" else 0.0
            x = F.pad(F.pad(x, self.pad4, value=fill), self.extra, value=fill)
            if self.kind == "max":
                y = F.max_pool2d(x, self.k, self.s, dilation=self.d)
            else:
                y = F.avg_pool2d(x, self.k, self.s) / self.count
            return y[:, :, : self.out_hw[0], : self.out_hw[1]]

    class Affine(nn.Module):
        """npusim's BatchNorm: x * scale + shift per channel."""

        def __init__(self, op: ops.BatchNorm, ndim: int):
            super().__init__()
            shape = (1, -1) + (1,) * (ndim - 2)
            self.scale = nn.Parameter(_tensor(op.scale).reshape(shape))
            self.shift = nn.Parameter(_tensor(op.shift).reshape(shape))

        def forward(self, x):
            return x * self.scale + self.shift

    class PRelu(nn.Module):
        def __init__(self, op: ops.PRelu):
            super().__init__()
            self.weight = nn.Parameter(_tensor(np.reshape(op.slope, -1)))

        def forward(self, x):
            return F.prelu(x, self.weight)

    class Fn(nn.Module):
        """A parameter-free op: ``fn(*inputs)``."""

        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, *xs):
            return self.fn(*xs)


def _adaptive_pool(op: ops.AdaptivePool, in_shape):
    """F.adaptive_avg_pool2d or F.adaptive_max_pool2d; exported to ONNX (which has no
    adaptive pool of unequal windows) as the same means by two constant averaging
    matrices, rows then columns, or the same maxima window by window."""
    def windows(n: int, m: int) -> list[tuple[int, int]]:
        return list(zip(*(e.tolist() for e in ops.adaptive_edges(n, m)), strict=True))

    def averaging(n: int, edges) -> torch.Tensor:
        a = np.zeros((len(edges), n), np.float32)
        for i, (first, end) in enumerate(edges):
            a[i, first:end] = 1.0 / (end - first)
        return torch.from_numpy(a)

    (h, w), (p, q) = in_shape[2:], op.size
    row_edges, col_edges = windows(h, p), windows(w, q)
    rows, cols = averaging(h, row_edges), averaging(w, col_edges)

    def exported(x):
        if op.kind == "avg":
            return rows @ x @ cols.T
        x = torch.stack([x[:, :, a:b].amax(dim=2) for a, b in row_edges], dim=2)
        return torch.stack([x[:, :, :, a:b].amax(dim=3) for a, b in col_edges], dim=3)

    def pool(x):
        if torch.onnx.is_in_onnx_export():
            return exported(x)
        if op.kind == "max":
            return F.adaptive_max_pool2d(x, op.size)
        return F.adaptive_avg_pool2d(x, op.size)
    return pool


def _upsample(op: ops.Upsample, out_shape):
    """F.interpolate to the op's size, or by its scale factor (torch's default sampling)."""
    how = ({"size": tuple(int(v) for v in out_shape[2:])} if op.size is not None
           else {"scale_factor": op.scale})
    if op.mode == "nearest":
        return lambda x: F.interpolate(x, mode="nearest", **how)
    return lambda x: F.interpolate(x, mode=op.mode, align_corners=op.align_corners, **how)


def _reshape(op: ops.Reshape):
    shape = tuple(op.shape)
    return lambda x: x.reshape((x.shape[0],) + shape)


_TORCH_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                 "max": torch.maximum, "min": torch.minimum, "pow": torch.pow,
                 "floordiv": torch.floor_divide, "remainder": torch.remainder,
                 "fmod": torch.fmod,
                 **{kind: lambda a, b, fn=fn: fn(a, b).float() for kind, fn in (
                     ("greater", torch.gt), ("less", torch.lt), ("greater_equal", torch.ge),
                     ("less_equal", torch.le), ("equal", torch.eq), ("not_equal", torch.ne))}} \
    if torch is not None else {}


def _gather_nd(op: ops.GatherND):
    """The input at each index tuple over its first axes (advanced indexing)."""
    idx = torch.from_numpy(np.asarray(op.indices, np.int64))
    return lambda x: x[tuple(idx[..., i] for i in range(idx.shape[-1]))]


def _where(op: ops.Where):
    """torch.where on the mask's non-zeros, constants in their places."""
    given = [None if c is None else _tensor(c) for c in (op.cond, op.a, op.b)]

    def where(*xs):
        rest = iter(xs)
        cond, a, b = (next(rest) if c is None else c for c in given)
        return torch.where(cond != 0, a, b)
    return where


def _elementwise(op: ops.Elementwise):
    """torch's broadcasting arithmetic, the constant (if any) on its side."""
    fn = _TORCH_BINARY[op.kind]
    if op.const is None:
        return fn
    c = _tensor(op.const)
    return (lambda x: fn(c, x)) if op.const_first else (lambda x: fn(x, c))


def _reduce(op: ops.Reduce):
    dims = tuple(op.axes) if not isinstance(op.axes, int) else (op.axes,)
    if op.kind in ("l1", "l2"):
        order = 1 if op.kind == "l1" else 2
        return lambda x: torch.linalg.vector_norm(x, order, dim=dims, keepdim=op.keepdims)
    reduce = {"max": torch.amax, "min": torch.amin, "sum": torch.sum, "mean": torch.mean}
    return lambda x: reduce[op.kind](x, dim=dims, keepdim=op.keepdims)


def _grid_sample(op: ops.GridSample, batch: int):
    """``F.grid_sample`` at the op's grid: its second input, or its constant (of one image
    or ``batch``, expanded to ``batch``)."""
    fixed = None if op.grid is None else _tensor(op.grid).expand(batch, *op.grid.shape[1:])

    def sample(x, grid=None):
        return F.grid_sample(x, fixed.to(x.dtype) if grid is None else grid, mode=op.mode,
                             padding_mode=op.padding, align_corners=op.align_corners)
    return sample


def _cumsum(op: ops.CumSum):
    """``torch.cumsum`` along the op's axis, the axis reversed around it (``reverse``) and
    the sums shifted one along it, 0 first (``exclusive``)."""
    def running(x):
        y = x.flip(op.axis) if op.reverse else x
        sums = torch.cumsum(y, op.axis)
        if op.exclusive:
            sums = torch.cat([torch.zeros_like(sums.narrow(op.axis, 0, 1)),
                              sums.narrow(op.axis, 0, sums.shape[op.axis] - 1)], op.axis)
        return sums.flip(op.axis) if op.reverse else sums
    return running


def _fake_quant(op: ops.FakeQuant, ndim: int):
    """Round to the grid and back in float32 torch ops (round half to even) on an
    ``ndim``-axis tensor: a divide by the scale (ONNX's rule), or with ``by_reciprocal`` a
    multiply by its float32 reciprocal (``torch.fake_quantize_per_tensor_affine``'s)."""
    scale = _tensor(op.along(op.scale, ndim))
    zero = _tensor(op.along(op.zero_point, ndim))
    inverse = 1 / scale

    def fn(x):
        steps = x * inverse if op.by_reciprocal else x / scale
        return (torch.clamp(torch.round(steps) + zero, op.lo, op.hi) - zero) * scale
    return fn


def _local_response_norm(op: ops.LocalResponseNorm):
    """PyTorch's own formula (the squares' average over a window of channels, zero-padded,
    by ``avg_pool3d``), the window placed at ``op.before``: ``F.local_response_norm`` when
    that is ``size // 2``."""
    after = op.size - 1 - op.before

    def fn(x):
        squares = F.pad((x * x).unsqueeze(1), (0, 0, 0, 0, op.before, after))
        mean = F.avg_pool3d(squares, (op.size, 1, 1), stride=1).squeeze(1)
        return x / (mean * op.alpha + op.k) ** op.beta
    return fn


def _slice(op: ops.Slice, in_shape):
    """torch indexes with positive steps only: a negative step selects its indices."""
    axis = op.axis % len(in_shape)
    if op.step > 0:
        return lambda x: x[(slice(None),) * axis + (slice(op.start, op.stop, op.step),)]
    taken = torch.tensor(range(in_shape[axis])[op.start:op.stop:op.step], dtype=torch.long)
    return lambda x: x.index_select(axis, taken)


def _layer_norm(op: ops.LayerNorm):
    weight, bias = _tensor(op.weight), _tensor(op.bias)
    return lambda x: F.layer_norm(x, tuple(weight.shape), weight, bias, op.eps)


def _zero_insert(op: ops.ZeroInsert, channels: int):
    """torch's own transposed convolution with a 1x1 kernel of ones per channel: the input
    spread ``stride`` apart with zeros between (traceable, unlike an indexed assignment)."""
    ones = torch.ones(channels, 1, 1, 1)
    return lambda x: F.conv_transpose2d(x, ones, stride=tuple(op.stride), groups=channels)


def _pad(op: ops.Pad):
    t, b, l, r = op.padding
    if op.mode == "constant":
        return lambda x: F.pad(x, (l, r, t, b), value=op.value)
    return lambda x: F.pad(x, (l, r, t, b), mode=op.mode)


def _group_norm(op: ops.GroupNorm):
    weight, bias = _tensor(op.weight), _tensor(op.bias)
    return lambda x: F.group_norm(x, op.groups, weight, bias, op.eps)


def _fallback(op: ops.Fallback):
    """The framework's own computation of an op the IR does not model (numpy in, out)."""
    return lambda *xs: torch.from_numpy(op(*[x.detach().numpy() for x in xs]))


def _concat(op: ops.Concat):
    """torch.cat of the inputs, each constant in its place given the inputs' batch."""
    constants = [(at, _tensor(c)) for at, c in op.constants]

    def cat(*xs):
        parts = list(xs)
        for at, c in constants:
            parts.insert(at, c.expand(xs[0].shape[0], *c.shape[1:]))
        return torch.cat(parts, dim=op.axis)
    return cat


def _sum(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


def _module(op, in_shapes, out_shape) -> nn.Module:
    """The torch module of one op, given its input and output shapes."""
    if isinstance(op, ops.Conv):
        return Conv(op, len(in_shapes[0]) == 2)
    if isinstance(op, ops.Pool):
        return Pool(op, in_shapes[0][2:], out_shape[2:])
    if isinstance(op, ops.BatchNorm):
        return Affine(op, len(in_shapes[0]))
    if isinstance(op, ops.PRelu):
        return PRelu(op)
    if isinstance(op, ops.AdaptivePool):
        return Fn(_adaptive_pool(op, in_shapes[0]))
    if isinstance(op, ops.Slice):
        return Fn(_slice(op, in_shapes[0]))
    return Fn(_function(op, out_shape))


def _function(op, out_shape):
    """The torch function of a parameter-free op."""
    table = {
        ops.Relu: lambda: F.relu,
        ops.Relu6: lambda: F.relu6,
        ops.LeakyRelu: lambda: (lambda x: F.leaky_relu(x, op.alpha)),
        ops.GlobalAvgPool: lambda: (lambda x: F.adaptive_avg_pool2d(x, 1)),
        ops.Add: lambda: _sum,
        ops.Concat: lambda: _concat(op),
        ops.Flatten: lambda: (lambda x: torch.flatten(x, 1)),
        ops.Reshape: lambda: _reshape(op),
        ops.Softmax: lambda: (lambda x: (F.log_softmax if op.log else F.softmax)(x, dim=op.axis)),
        ops.Upsample: lambda: _upsample(op, out_shape),
        ops.Identity: lambda: (lambda x: x),
        ops.Sigmoid: lambda: torch.sigmoid,
        ops.HardSigmoid: lambda: (lambda x: torch.clamp(x * op.alpha + op.beta, 0, 1)),
        ops.HardSwish: lambda: F.hardswish,
        ops.Silu: lambda: F.silu,
        ops.Softplus: lambda: (lambda x: F.softplus(x, op.beta, op.threshold)),
        ops.Mish: lambda: F.mish,
        ops.Exp: lambda: torch.exp,
        ops.Log: lambda: torch.log,
        ops.Abs: lambda: torch.abs,
        ops.Elu: lambda: (lambda x: torch.ops.aten.elu(x, op.alpha, 1.0, op.input_scale)),
        ops.Round: lambda: {"floor": torch.floor, "ceil": torch.ceil, "nearest": torch.round,
                            "trunc": torch.trunc}[op.mode],
        ops.Tanh: lambda: torch.tanh,
        ops.Trig: lambda: getattr(torch, op.fn),
        ops.Erf: lambda: torch.erf,
        ops.Sqrt: lambda: torch.sqrt,
        ops.Gelu: lambda: (lambda x: F.gelu(x, approximate=op.approximate)),
        ops.Clip: lambda: (lambda x: torch.clamp(x, op.lo, op.hi)),
        ops.FakeQuant: lambda: _fake_quant(op, len(out_shape)),
        ops.LocalResponseNorm: lambda: _local_response_norm(op),
        ops.Elementwise: lambda: _elementwise(op),
        ops.Where: lambda: _where(op),
        ops.Sign: lambda: torch.sign,
        ops.MatMul: lambda: torch.matmul,
        ops.Reduce: lambda: _reduce(op),
        ops.CumSum: lambda: _cumsum(op),
        ops.GridSample: lambda: _grid_sample(op, out_shape[0]),
        ops.CumExtreme: lambda: (lambda x: (torch.cummax if op.kind == "max" else torch.cummin)(
            x, op.axis).values),
        ops.Broadcast: lambda: (lambda x: x.expand(x.shape[0], *op.shape)),
        ops.Transpose: lambda: (lambda x: x.permute(*op.perm)),
        ops.GatherND: lambda: _gather_nd(op),
        ops.LayerNorm: lambda: _layer_norm(op),
        ops.GroupNorm: lambda: _group_norm(op),
        ops.Pad: lambda: _pad(op),
        ops.ZeroInsert: lambda: _zero_insert(op, out_shape[1]),
        ops.Fallback: lambda: _fallback(op),
    }
    make = table.get(type(op))
    if make is None:
        raise ModelError(f"op {type(op).__name__}: no PyTorch mirror; ops with one: "
                         f"{', '.join(sorted(t.__name__ for t in table))}, Conv, Pool, "
                         "BatchNorm, PRelu")
    return make()


if torch is not None:

    class GraphModule(nn.Module):
        """The graph's nodes as torch modules, run in topological order."""

        def __init__(self, graph: Graph):
            super().__init__()
            self.graph_name = graph.name
            self.names = [n.name for n in graph.nodes]
            self.inputs = [n.inputs for n in graph.nodes]
            self.input_name, self.output_name = graph.input_name, graph.output_name
            self.layers = nn.ModuleList(
                _module(n.op, [graph.shapes[i] for i in n.inputs], graph.shapes[n.name])
                for n in graph.nodes)

        def forward_all(self, x) -> dict:
            """Every node's output, by node name."""
            values = {self.input_name: x}
            for name, inputs, layer in zip(self.names, self.inputs, self.layers,
                                           strict=True):
                values[name] = layer(*[values[i] for i in inputs])
            return values

        def forward_each(self, values: dict) -> dict:
            """Every node's output computed from ``values`` (node name -> tensor) of its
            inputs, each node on its own: no node reads another's output here."""
            return {name: layer(*[values[i] for i in inputs])
                    for name, inputs, layer in zip(self.names, self.inputs, self.layers,
                                                   strict=True)}

        def forward(self, x):
            return self.forward_all(x)[self.output_name]


def to_torch(graph: Graph) -> nn.Module:
    """An ``nn.Module`` computing ``graph`` with torch ops (float32, eval mode).

    Parameters share memory with the graph's writeable arrays; a conv's weights are
    read-only (``npusim.derived``: what the machines derive from them is kept), so they are
    copied, and training the module leaves them unchanged.
    """
    _require_torch()
    return GraphModule(graph).eval()


def torch_node_outputs(graph: Graph, values: dict) -> dict[str, np.ndarray]:
    """Every node's output computed by PyTorch from ``values`` (every node's inputs, e.g.
    ``simulate(..., keep_outputs=True).outputs``), each node on the inputs given, float32."""
    _require_torch()
    module = to_torch(graph)
    with torch.no_grad():
        out = module.forward_each({name: _tensor(v) for name, v in values.items()})
    return {name: v.numpy() for name, v in out.items()}


def torch_outputs(graph: Graph, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every node's output (and the input) of ``graph`` on ``x`` computed by PyTorch, float32."""
    _require_torch()
    module = to_torch(graph)
    with torch.no_grad():
        values = module.forward_all(_tensor(x))
    return {name: v.numpy() for name, v in values.items()}
