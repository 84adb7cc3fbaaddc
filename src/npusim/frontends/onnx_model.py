"""An ONNX model as conversion sees it: the tensors computed from the graph input, each
tensor's inferred shape, the constants (initialisers, or nodes on constants run by onnx's
reference evaluator), and one node's attributes and inputs (``OnnxNode``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import lowering as rules
from . import onnx_file
from .lowering import Lowering
from .lowering import Refusal as _Refusal
from .onnx_file import SMALL_CONSTANT

WEIGHT_DTYPES = ("float32", "float16", "float64", "int8", "uint8")


@dataclass
class Model:
    """What conversion needs of the inferred model: shapes, constants, producers."""

    path: Path
    opset: int
    shapes: dict
    initializers: dict
    producers: dict
    depends: set
    readers: dict = dataclasses.field(default_factory=dict)  # tensor -> op types reading it
    constants: dict = dataclasses.field(default_factory=dict)
    ir_of: dict = dataclasses.field(default_factory=dict)  # ONNX tensor -> IR node
    pending: dict = dataclasses.field(default_factory=dict)  # tensor -> lowering.Pending
    held: dict = dataclasses.field(default_factory=dict)  # tensor -> onnx_held.Held


@dataclass
class OnnxNode:
    """One ONNX node as a converter sees it."""

    proto: object
    name: str
    model: Model
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
        return constant(self.model, self.proto.input[i]) if self.has_input(i) else None

    def reduced_axes(self) -> list[int]:
        """A reduction's axes, as given (negative ones count from the end): its attribute or,
        from opset 18 (ReduceSum: 13; ReduceLogSumExp: 18), its input 1; every axis when none
        is given, refused where ``noop_with_empty_axes`` asks for none."""
        as_input = self.model.opset >= (13 if self.op_type == "ReduceSum" else 18)
        axes = self.const(1) if as_input else self.attr("axes")
        if axes is None or len(axes) == 0:
            if self.attr("noop_with_empty_axes", 0):
                raise _Refusal("noop_with_empty_axes=1 with no axes: nothing to reduce")
            return list(range(len(self.in_shape(0))))
        return [int(a) for a in axes]

    def weight(self, i: int) -> np.ndarray | None:
        """Constant input ``i`` as float32 (int8/float16/float32 initialisers), or None."""
        value = self.const(i)
        if value is not None and value.dtype.name not in WEIGHT_DTYPES:
            raise _Refusal(f"input {self.proto.input[i]!r} has element type "
                           f"{element_name(value.dtype)}; weights must be one of "
                           f"{', '.join(map(element_name, WEIGHT_DTYPES))}")
        return None if value is None else value.astype(np.float32, copy=False)


def element_name(dtype) -> str:
    """The onnx.TensorProto name of a numpy dtype: int64 -> 'INT64'."""
    from onnx import helper

    return onnx_file.element_type(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


MAX_SHAPE_PASSES = 8  # rounds of folding shape-derived constants and inferring again


# ---- constants --------------------------------------------------------------------------


def constant(model: Model, tensor: str) -> np.ndarray:
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


def _static_shape(model: Model, node) -> np.ndarray:
    """The value of a Shape (its ``start``, ``end``) or Size node from inferred shapes."""
    from onnx import helper

    shape = model.shapes.get(node.input[0])
    if (shape is None or None in shape) and node.input[0] not in model.depends:
        shape = constant(model, node.input[0]).shape  # a constant computed from shapes
    if shape is None or None in shape:
        raise _Refusal(f"the shape of {node.input[0]!r} is not known yet")
    if node.op_type == "Size":
        return np.array(math.prod(shape), np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))], np.int64)


def _evaluate(model: Model, node, tensor: str) -> np.ndarray:
    """The value of ``tensor``, an output of ``node`` whose inputs are all constants, as
    onnx's reference evaluator computes it at the model's opset (given a bare node, the
    evaluator takes every op at its newest version: an opset-11 Unsqueeze's ``axes``
    attribute, which version 13 moved to an input, would fail). An op the evaluator
    implements only from a later version on (DequantizeLinear: 19) is run at that one."""
    feeds = {t: constant(model, t) for t in node.input if t}
    try:
        outputs = _run_node(node, feeds, model.opset)
    except Exception as e:  # the reference evaluator raises many types for ops it lacks
        try:
            outputs = _run_node(node, feeds, None)
        except Exception:  # noqa: BLE001 - the first error is the one that says why
            raise _Refusal(f"cannot evaluate constant {tensor!r} (op {node.op_type}): "
                           f"{type(e).__name__}: {e}") from e
    return np.asarray(outputs[[t for t in node.output if t].index(tensor)])


def _run_node(node, feeds: dict, opset: int | None) -> list:
    """``node``'s outputs on ``feeds`` by onnx's reference evaluator, its op at ``opset``
    (None: the newest version the evaluator has)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    if opset is None:
        return ReferenceEvaluator(node).run(None, feeds)
    inputs = [helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(v.dtype), None)
              for t, v in feeds.items()]
    outputs = [helper.make_empty_tensor_value_info(t) for t in node.output if t]
    alone = helper.make_model(helper.make_graph([node], "constant", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(alone).run(None, feeds)


def analyse(model, path: Path, input_name: str) -> Model:
    """Producers, initialisers and the tensors computed from the input (shapes come later)."""
    g = model.graph
    producers = {out: n for n in g.node for out in n.output}
    depends = {input_name}
    for n in g.node:  # a tensor's Shape is a constant: every shape is static here
        if n.op_type not in ("Shape", "Size") and any(i in depends for i in reads(n)):
            depends.update(n.output)
    readers: dict[str, list[str]] = {}
    for n in g.node:
        for t in reads(n):
            readers.setdefault(t, []).append(n.op_type)
    for out in g.output:
        readers.setdefault(out.name, []).append("the graph's output")
    return Model(path, onnx_file.opset(model), {}, {t.name: t for t in g.initializer}, producers,
                 depends, readers)




def reads(node) -> list[str]:
    """Every tensor ``node`` reads: its inputs, then what its subgraphs (an ``If``'s
    branches, a ``Loop``'s body) read from the graph around them, which no input names."""
    outer: list[str] = []
    for graph in _subgraphs(node):
        outer += [t for t in sorted(_outer_reads(graph)) if t not in outer]
    return [*node.input, *outer]


def _subgraphs(node) -> list:
    from onnx import AttributeProto

    graphs = []
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            graphs.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            graphs.extend(a.graphs)
    return graphs


def _outer_reads(graph) -> set[str]:
    """The tensors ``graph``'s nodes read that neither it nor its nodes make."""
    made = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    outer = set()
    for n in graph.node:
        outer.update(t for t in reads(n) if t and t not in made)
        made.update(n.output)
    return outer


def inline_static_ifs(model, m: Model) -> int:
    """Replace each ``If`` whose condition is a constant with the nodes of the branch it
    takes (TorchScript's export of ``squeeze(dim)`` is an ``If`` on whether that axis has
    size 1, which the static shapes decide): the branch's tensors renamed under the
    ``If``'s name, its outputs passed to the ``If``'s by ``Identity`` nodes. An ``If``
    whose condition is not known, or whose branch holds initialisers or subgraphs of its
    own, stays (and is refused by name). Returns how many were replaced; ``m`` must then
    be analysed again."""
    kept, inlined = [], 0
    for node in model.graph.node:
        branch = _static_branch(m, node) if node.op_type == "If" else None
        if branch is None:
            kept.append(node)
            continue
        kept.extend(_inlined(branch, node))
        inlined += 1
    if inlined:
        del model.graph.node[:]
        model.graph.node.extend(kept)
    return inlined


def _static_branch(m: Model, node):
    """The branch an ``If`` takes when its condition is a constant, else None."""
    from onnx import helper

    try:
        cond = constant(m, node.input[0])
    except _Refusal:
        return None
    if cond.size != 1:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    branch = attrs["then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"]
    if len(branch.initializer) or any(_subgraphs(n) for n in branch.node) \
            or len(branch.output) != len(node.output):
        return None
    return branch


def _inlined(branch, node) -> list:
    """``branch``'s nodes as nodes of the graph around ``node`` (an ``If``), its tensors
    renamed ``<If>/<tensor>``, and one ``Identity`` per output."""
    from onnx import NodeProto, helper

    prefix = f"{node.name or node.output[0]}/"
    rename = {t: prefix + t for n in branch.node for t in n.output if t}
    nodes = []
    for n in branch.node:
        copy = NodeProto()
        copy.CopyFrom(n)
        copy.name = prefix + (n.name or n.op_type)
        copy.input[:] = [rename.get(t, t) for t in n.input]
        copy.output[:] = [rename.get(t, t) for t in n.output]
        nodes.append(copy)
    for k, (inner, out) in enumerate(zip(branch.output, node.output, strict=True)):
        nodes.append(helper.make_node("Identity", [rename.get(inner.name, inner.name)], [out],
                                      name=f"{prefix}output{k}"))
    return nodes


def fold_small_constants(model, m: Model) -> int:
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
            value = constant(m, node.output[0])
        except _Refusal:
            continue  # reported later if the data path really needs it
        if value.size <= SMALL_CONSTANT:
            node.CopyFrom(helper.make_node("Constant", [], list(node.output), name=node.name,
                                           value=numpy_helper.from_array(value)))
            folded += 1
    return folded


def inferred_shapes(model) -> dict:
    g = model.graph
    return {v.name: onnx_file.static_dims(v) for v in [*g.input, *g.value_info, *g.output]}
