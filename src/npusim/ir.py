"""The network IR: a ``ConvLayer`` is one convolution problem, a ``Graph`` a network of ops.

A ``ConvLayer`` knows nothing of hardware (that is ``arch``) and nothing of how it
is mapped (that is a dataflow). Linear layers are 1x1 convolutions on a 1x1 map.
Tensors are NCHW. Shapes are inferred once, when the ``Graph`` is built, so a
shape error names the node that caused it. The ops (``npusim.ops``, a dataclass each)
are imported by the methods that make or inspect them: a run of bare ``ConvLayer`` shapes (a
topology CSV) defines none.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .choices import DTYPES
from .errors import LayerError
from .geometry import Padding, Pair, padding4, pair, used_pixels

if TYPE_CHECKING:
    from . import ops

Shape = tuple[int, ...]


# simulate.py still reads these two under their old private names


@dataclass(frozen=True)
class ConvLayer:
    """One convolution: input N x C x H x W, K kernels of C/groups x R x S.

    ``padding`` is (top, bottom, left, right) in pixels; ``stride`` and
    ``dilation`` are (h, w). Output is N x K x P x Q.
    """

    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: Pair = (1, 1)
    padding: Padding = (0, 0, 0, 0)
    dilation: Pair = (1, 1)
    groups: int = 1
    bias: bool = False
    name: str = "conv"
    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise LayerError(f"{self.name}.dtype={self.dtype!r}: must be one of "
                             f"{', '.join(DTYPES)}")
        object.__setattr__(self, "stride", pair(self.stride, "stride", self.name))
        object.__setattr__(self, "dilation", pair(self.dilation, "dilation", self.name))
        object.__setattr__(self, "padding", padding4(self.padding, self.name))
        for f in ("N", "C", "H", "W", "K", "R", "S", "groups"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise LayerError(f"{self.name}.{f}={v!r}: must be an integer >= 1")
            object.__setattr__(self, f, int(v))
        for f in ("stride", "dilation"):
            if min(getattr(self, f)) < 1:
                raise LayerError(f"{self.name}.{f}={getattr(self, f)}: must be >= 1")
        if min(self.padding) < 0:
            raise LayerError(f"{self.name}.padding={self.padding}: must be >= 0")
        if self.C % self.groups or self.K % self.groups:
            raise LayerError(
                f"{self.name}.groups={self.groups}: must divide both C={self.C} and K={self.K}"
            )
        if self.P < 1 or self.Q < 1:
            raise LayerError(
                f"{self.name}: kernel {self.R}x{self.S} (dilation {self.dilation}) does not fit "
                f"the "
                f"padded input {self.H + self.padding[0] + self.padding[1]}x"
                f"{self.W + self.padding[2] + self.padding[3]}; output would be {self.P}x{self.Q}"
            )

    @functools.cached_property  # read many times a layer; the fields never change
    def P(self) -> int:
        """Output height in pixels."""
        top, bottom, _, _ = self.padding
        return (self.H + top + bottom - used_pixels(1, self.R, 1, self.dilation[0])) \
            // self.stride[0] + 1

    @functools.cached_property
    def Q(self) -> int:
        """Output width in pixels."""
        _, _, left, right = self.padding
        return (self.W + left + right - used_pixels(1, self.S, 1, self.dilation[1])) \
            // self.stride[1] + 1

    @property
    def Cg(self) -> int:
        """Input channels seen by one kernel (C / groups)."""
        return self.C // self.groups

    @property
    def Kg(self) -> int:
        """Kernels per group (K / groups)."""
        return self.K // self.groups

    @property
    def input_shape(self) -> Shape:
        return (self.N, self.C, self.H, self.W)

    @property
    def weight_shape(self) -> Shape:
        return (self.K, self.Cg, self.R, self.S)

    @property
    def output_shape(self) -> Shape:
        return (self.N, self.K, self.P, self.Q)

    @property
    def macs(self) -> int:
        """Dense multiply-accumulates of the layer (zeros included)."""
        return self.N * self.K * self.P * self.Q * self.Cg * self.R * self.S

    @property
    def is_depthwise(self) -> bool:
        return self.groups == self.C and self.groups > 1

    def with_batch(self, n: int) -> ConvLayer:
        return dataclasses.replace(self, N=n)

    def with_dtype(self, dtype: str) -> ConvLayer:
        return self if dtype == self.dtype else dataclasses.replace(self, dtype=dtype)

    def describe(self) -> str:
        """Short text of the shape, for tables: C x H x W -> K x P x Q, R x S, then stride
        and dilation (``s2``; ``s(2, 1)`` where the two axes differ) and groups."""
        extra = []
        for tag, axes in (("s", self.stride), ("d", self.dilation)):
            if axes != (1, 1):
                extra.append(f"{tag}{axes[0]}" if axes[0] == axes[1] else f"{tag}{axes}")
        if self.groups > 1:
            extra.append("dw" if self.is_depthwise else f"g{self.groups}")
        tail = (" " + " ".join(extra)) if extra else ""
        return f"{self.C}x{self.H}x{self.W}->{self.K}x{self.P}x{self.Q} {self.R}x{self.S}{tail}"


@dataclass(frozen=True)
class Node:
    """One op of a graph: a unique ``name``, the op, and the names of its input nodes."""

    name: str
    op: ops.Op
    inputs: tuple[str, ...] = ()


@dataclass
class Graph:
    """A network: nodes in topological order, one input node, one or more output nodes.

    ``outputs`` names the outputs in order, label -> node (a PyTorch model's dict keys);
    without it the one output is ``output_name`` (default: the last node), labelled by
    its node name. ``output_name`` is always the first output's node. Shapes are inferred
    at construction (``shapes[name]``); every conv node has its ``ConvLayer`` in
    ``layers[name]``. ``batch_free``: whether the ops hold for any batch (npusim's own
    networks); an imported graph holds for the batch it was imported at, which its ops may
    depend on (``x[:1]`` and ``x.view(1, -1)`` traced at batch 1 keep the batch whole), so
    ``with_batch`` refuses another.
    """

    nodes: list[Node]
    input_shape: Shape
    name: str = "network"
    input_name: str = "input"
    output_name: str | None = None
    outputs: dict[str, str] | None = None
    batch_free: bool = True
    shapes: dict[str, Shape] = field(init=False)
    layers: dict[str, ConvLayer] = field(init=False)

    def __post_init__(self):
        self.input_shape = tuple(int(d) for d in self.input_shape)
        if self.outputs:
            self.outputs = dict(self.outputs)
            self.output_name = next(iter(self.outputs.values()))
        else:
            if self.output_name is None:
                self.output_name = self.nodes[-1].name if self.nodes else self.input_name
            self.outputs = {self.output_name: self.output_name}
        self._infer()

    def _infer(self) -> None:
        from . import ops

        shapes: dict[str, Shape] = {self.input_name: self.input_shape}
        layers: dict[str, ConvLayer] = {}
        for node in self.nodes:
            if node.name in shapes:
                raise LayerError(f"{node.name}: node name used twice")
            missing = [i for i in node.inputs if i not in shapes]
            if missing:
                raise LayerError(f"{node.name}: inputs {missing} are not defined before it")
            in_shapes = [shapes[i] for i in node.inputs]
            if isinstance(node.op, ops.Conv):
                layers[node.name] = node.op.layer(in_shapes, node.name)
            shapes[node.name] = node.op.out_shape(in_shapes, node.name)
        for label, out in self.outputs.items():
            if out not in shapes:
                raise LayerError(f"output {label!r} ({out!r}) is not a node of {self.name}")
        self.shapes, self.layers = shapes, layers

    def __repr__(self) -> str:
        """One line: the name, input and output shapes, node and conv counts and the weights'
        parameter count (not the weights themselves: ``nodes`` holds them)."""
        params = sum(n.op.weight.size + (0 if n.op.bias is None else n.op.bias.size)
                     for n in self.conv_nodes)
        outputs = ", ".join(f"{label} {self.shapes[out]}" for label, out in self.outputs.items())
        nodes, convs = len(self.nodes), len(self.layers)
        return (f"Graph({self.name!r}: input {self.input_shape} -> {outputs}; "
                f"{nodes} node{'s' * (nodes != 1)}, {convs} conv{'s' * (convs != 1)}, "
                f"{params:,} conv parameters)")

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def with_batch(self, n: int) -> Graph:
        """The same network for a batch of ``n`` inputs (``ModelError`` for another batch
        than an imported graph's: see ``batch_free``)."""
        if n == self.input_shape[0]:
            return self
        if not self.batch_free:
            from .errors import ModelError

            raise ModelError(
                f"{self.name}: imported at batch {self.input_shape[0]}, which its ops may "
                "depend on (an x[:1] or x.view(1, -1) keeps the batch whole there), so npusim "
                "does not "
                f"re-batch it: import it at batch {n} (from_torch on an input of batch {n}, "
                f"from_onnx(..., batch={n}), --batch {n})")
        return Graph(list(self.nodes), (n,) + self.input_shape[1:], self.name,
                     self.input_name, outputs=self.outputs)

    def map_convs(self, fn) -> Graph:
        """A copy whose conv ops are replaced by ``fn(name, conv) -> Conv`` (e.g. pruning)."""
        from . import ops

        nodes = [Node(n.name, fn(n.name, n.op), n.inputs) if isinstance(n.op, ops.Conv) else n
                 for n in self.nodes]
        return Graph(nodes, self.input_shape, self.name, self.input_name, outputs=self.outputs,
                     batch_free=self.batch_free)

    @property
    def output_nodes(self) -> set[str]:
        """The nodes whose values are outputs."""
        return set(self.outputs.values())

    @property
    def conv_nodes(self) -> list[Node]:
        from . import ops

        return [n for n in self.nodes if isinstance(n.op, ops.Conv)]

    @property
    def output_shape(self) -> Shape:
        return self.shapes[self.output_name]


class GraphBuilder:
    """Builds a ``Graph`` op by op; each method returns the new node's name.

    >>> g = GraphBuilder("tiny", (1, 3, 8, 8))
    >>> x = g.relu(g.conv(g.input, weight, stride=2, padding=1))
    >>> graph = g.build()
    """

    def __init__(self, name: str, input_shape: Sequence[int]):
        self.name = name
        self.input_shape = tuple(input_shape)
        self.input = "input"
        self.nodes: list[Node] = []
        self._count: dict[str, int] = {}

    def append(self, op: ops.Op, *inputs: str, name: str | None = None) -> str:
        """Add ``op`` reading ``inputs``; returns its node name (auto-named if ``name`` is None)."""
        kind = type(op).__name__.lower()
        if name is None:
            self._count[kind] = self._count.get(kind, 0) + 1
            name = f"{kind}{self._count[kind]}"
        self.nodes.append(Node(name, op, tuple(inputs)))
        return name

    def conv(self, x: str, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
             name: str | None = None) -> str:
        from . import ops

        return self.append(ops.Conv(np.asarray(weight, np.float32),
                                  None if bias is None else np.asarray(bias, np.float32),
                                  stride, padding, dilation, groups), x, name=name)

    def linear(self, x: str, weight, bias=None, *, name: str | None = None) -> str:
        """Fully connected layer, weight (out, in), on a flattened (N, in) input."""
        from . import ops

        w = np.asarray(weight, np.float32)
        return self.append(ops.Conv(w[:, :, None, None], None if bias is None else
                                  np.asarray(bias, np.float32)), x, name=name)

    def batchnorm(self, x: str, gamma, beta, mean, var, eps=1e-5, *, name=None) -> str:
        from . import ops

        return self.append(ops.BatchNorm.from_stats(gamma, beta, mean, var, eps), x, name=name)

    def __getattr__(self, kind: str):
        """``g.relu(x)``, ``g.maxpool(x, 3, 2, 1)``...: any op in ``ops.OPS`` by lower-case name."""
        from . import ops

        cls = ops.OPS.get(kind)
        if cls is None:
            raise AttributeError(kind)

        def make(*inputs_and_args, name: str | None = None, **kwargs):
            inputs = [a for a in inputs_and_args if isinstance(a, str)]
            args = [a for a in inputs_and_args if not isinstance(a, str)]
            return self.append(cls(*args, **kwargs), *inputs, name=name)

        return make

    def build(self, output: str | None = None) -> Graph:
        return Graph(self.nodes, self.input_shape, self.name, self.input, output)


def fold_batchnorm(graph: Graph) -> Graph:
    """Merge every BatchNorm that directly follows a conv (read by nothing else) into it.

    ``w' = w * scale[k]``, ``b' = b * scale[k] + shift[k]``: the same function with one op fewer.
    A chain conv -> BatchNorm -> BatchNorm (an imported bias add after a batch norm) folds whole.
    """
    while True:
        folded = _fold_batchnorm_once(graph)
        if len(folded.nodes) == len(graph.nodes):
            return folded
        graph = folded


def _fold_batchnorm_once(graph: Graph) -> Graph:
    from . import ops

    readers: dict[str, int] = {}
    for n in graph.nodes:
        for i in n.inputs:
            readers[i] = readers.get(i, 0) + 1
    by_name = {n.name: n for n in graph.nodes}
    folded: dict[str, Node] = {}
    renamed: dict[str, str] = {}
    for n in graph.nodes:
        src = by_name.get(n.inputs[0]) if len(n.inputs) == 1 else None
        if (isinstance(n.op, ops.BatchNorm) and src is not None and isinstance(src.op, ops.Conv)
                and readers.get(src.name) == 1 and src.name not in graph.output_nodes):
            conv = src.op
            scale = n.op.scale.astype(np.float64)
            w = (conv.weight * scale.reshape(-1, 1, 1, 1)).astype(np.float32)
            b0 = conv.bias if conv.bias is not None else np.zeros(len(scale), np.float32)
            b = (b0 * scale + n.op.shift).astype(np.float32)
            folded[src.name] = Node(src.name, dataclasses.replace(conv, weight=w, bias=b),
                                    src.inputs)
            renamed[n.name] = src.name
    nodes = []
    for n in graph.nodes:
        if n.name in renamed:
            continue
        n = folded.get(n.name, n)
        nodes.append(Node(n.name, n.op, tuple(renamed.get(i, i) for i in n.inputs)))
    outputs = {label: renamed.get(out, out) for label, out in graph.outputs.items()}
    return Graph(nodes, graph.input_shape, graph.name, graph.input_name, outputs=outputs,
                 batch_free=graph.batch_free)
