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

How each op becomes lowering rules is ``onnx_ops``'s; what a tensor's shape or constant
value is, ``onnx_model``'s; this module walks the graph (the data path, node by node,
the onnxruntime fallback, the outputs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ..errors import LayerError, ModelError
from ..ir import Graph
from . import lowering as rules
from . import onnx_file, onnx_held, onnx_spelled
from .lowering import Lowering
from .lowering import Refusal as _Refusal
from .onnx_model import (
    MAX_SHAPE_PASSES,
    Model,
    OnnxNode,
    analyse,
    constant,
    fold_small_constants,
    inferred_shapes,
    inline_static_ifs,
)
from .onnx_ops import CONVERTERS, supported_ops


def _data_inputs(proto) -> list[str]:
    """The inputs an op reads as data (the rest are weights, shapes, scales...)."""
    count = CONVERTERS[proto.op_type][1] if proto.op_type in CONVERTERS else None
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


def _convert(model, m: Model, input_name: str, fallback: bool) -> tuple[Lowering, dict]:
    """Each node on the data path as IR nodes; with ``fallback``, a node the IR cannot
    express as a ``Fallback`` running it alone in onnxruntime."""
    build, ir_of = Lowering(), m.ir_of
    ir_of[input_name] = "input"
    needed, names = _needed(model, _output_names(model), fallback), _names(model)
    spelled = onnx_spelled.find(model, m)
    inside = {j for s in spelled.values() for j in s.inside}
    for i, proto in enumerate(model.graph.node):
        if i not in needed or i in inside or not m.depends.intersection(proto.output):
            continue
        c = OnnxNode(proto, names[i], m, build)
        if i in spelled:
            _convert_spelled(c, spelled[i], model, needed, fallback)
            continue
        if proto.op_type not in CONVERTERS:
            _refuse(c, model, needed, fallback, None)
            continue
        if proto.domain not in ("", "ai.onnx"):  # an ONNX op's name in another domain
            _refuse(c, model, needed, fallback, f"its domain is {proto.domain}; npusim reads "
                    "the ONNX standard domain's ops of that name")
            continue
        try:
            _convert_node(c, model, needed)
        except (_Refusal, LayerError) as e:
            if not _place_pads(c):
                _refuse(c, model, needed, fallback, str(e))
                continue
            c = OnnxNode(proto, names[i], m, build)  # again, reading its pads' own nodes
            try:
                _convert_node(c, model, needed)
            except (_Refusal, LayerError) as again:
                _refuse(c, model, needed, fallback, str(again))
    return build, ir_of


def _convert_node(c: OnnxNode, model, needed: set) -> None:
    """Node ``c`` as IR nodes, or a pass-through (Identity, Dropout, a constant Pad held for
    its reader); raises ``Refusal`` or ``LayerError`` where the IR cannot express it. A node
    that reads a tensor whose batch axis was moved, or moves it, is ``onnx_held``'s."""
    if onnx_held.involved(c):
        onnx_held.convert(c, lambda node: _converted(node, model, needed))
    else:
        _converted(c, model, needed)


def _converted(c: OnnxNode, model, needed: set) -> None:
    """Node ``c`` by its converter (``_convert_node``)."""
    proto, m = c.proto, c.model
    result = CONVERTERS[proto.op_type][0](c)
    if proto.op_type != "Split":
        _check_extra_outputs(proto, model, needed)
    _check_pads_absorbed(c, m)
    if isinstance(result, (str, rules.Pending)):  # a pass-through (Identity, Dropout, Pad)
        source = proto.input[0]
        m.ir_of[proto.output[0]] = m.ir_of.get(source, source)
        _carry_pad(m, proto, result)
        return
    _add_nodes(c, result)


def _convert_spelled(c: OnnxNode, spelled: onnx_spelled.Spelled, model, needed: set,
                     fallback: bool) -> None:
    """The one IR op of a spelled-out pattern (``onnx_spelled``) whose last node is ``c``,
    reading the pattern's source."""
    m = c.model
    _place_pads(c)  # a pad still owed on the source (its readers here cannot absorb it)
    try:
        onnx_held.given_as_is(c, [spelled.source], f"its pattern of {c.op_type}")
        m.ir_of[c.proto.output[0]] = c.build.add(c.name, spelled.op,
                                                 (m.ir_of.get(spelled.source, spelled.source),),
                                                 c.out_shape)
    except (_Refusal, LayerError) as e:
        _refuse(c, model, needed, fallback, str(e))


def _place_pads(c: OnnxNode) -> bool:
    """Make each constant pad still pending on an input of ``c`` an IR ``Pad`` node of its
    own, which every later reader reads (where a reader cannot absorb it: a zero pad before
    a max pool, YOLOv3-tiny's); whether there was one."""
    m, placed = c.model, False
    for k, t in enumerate(c.proto.input):
        pending = m.pending.pop(t, None)
        if pending:
            m.ir_of[t] = c.build.add(f"{c.name}.pad{k}", pending.op(),
                                     (m.ir_of.get(t, t),), m.shapes.get(t))
            placed = True
    return placed


def _refuse(c: OnnxNode, model, needed: set, fallback: bool, why: str | None) -> None:
    """Node ``c``, which the IR cannot express (``why``: its parameters; None: no rule for
    its op), run by the fallback when it is on and can, else noted as refused."""
    if not fallback:
        c.build.refuse(c.proto.op_type, c.name, why)
        return
    cannot = _fall_back(c, model, needed)
    if cannot is not None:
        c.build.refuse_fallback(c.proto.op_type, c.name, why, cannot)


def _fall_back(c: OnnxNode, model, needed: set) -> str | None:
    """Add node ``c`` as a ``Fallback`` that onnxruntime computes alone (its constant
    inputs as initialisers); where it cannot be, why not (an input from Pad, several
    outputs read, a constant input not evaluable)."""
    from onnx import TensorProto, helper, numpy_helper

    m, proto = c.model, c.proto
    data = [t for t in proto.input if t and t in m.depends]
    try:
        _check_extra_outputs(proto, model, needed)
        constants = [numpy_helper.from_array(constant(m, t), t) for t in proto.input
                     if t and t not in m.depends]
        shapes = [c.shape(t) for t in data]
        out_shape = c.out_shape
    except (_Refusal, LayerError) as e:
        return str(e)
    if not data:
        return "it reads no tensor of the network"
    if any(t in m.held for t in data):
        return "it reads a tensor whose batch axis was moved, which onnxruntime alone cannot take"
    if any(t in m.pending for t in data):
        return ("it reads a Pad that npusim folds into the next node, which onnxruntime "
                "alone cannot take")
    if any(t not in m.ir_of for t in data):
        return "it reads the output of a node that was not imported"
    graph = helper.make_graph(
        [proto], proto.op_type,
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, ["N", *s[1:]])
         for t, s in zip(data, shapes, strict=True)],
        [helper.make_tensor_value_info(proto.output[0], TensorProto.FLOAT, None)], constants)
    single = helper.make_model(graph, opset_imports=list(model.opset_import),
                               ir_version=model.ir_version)
    call = onnx_file.NodeSession(single.SerializeToString(), tuple(data))
    if (why := call.refusal()) is not None:
        return why
    m.ir_of[proto.output[0]] = c.build.fallback(c.name, f"ONNX {proto.op_type}", call,
                                                [m.ir_of[t] for t in data], shapes, out_shape)
    return None


def _add_nodes(c: OnnxNode, result) -> None:
    """The IR node(s) of one converted ONNX node: an op reading its data inputs, an
    (op, inputs) pair, or (Split) one op per output, named ``<node>_<k>``."""
    m, proto = c.model, c.proto
    if isinstance(result, list):
        for k, (op, out) in enumerate(zip(result, proto.output, strict=True)):
            m.ir_of[out] = c.build.add(f"{c.name}_{k}", op, (m.ir_of[proto.input[0]],),
                                       c.shape(out))
        return
    data = [m.ir_of.get(t, t) for t in _data_inputs(proto) if t in m.depends]
    m.ir_of[proto.output[0]] = c.build.place(c.name, result, data, c.out_shape)


def _check_pads_absorbed(c: OnnxNode, m: Model) -> None:
    pending = [t for t in c.proto.input if t in m.pending]
    if pending and not (c.absorbed or c.op_type in ("Pad", "Identity", "Dropout", "Slice")):
        raise rules.not_absorbed("Pad")


def _carry_pad(m: Model, proto, result) -> None:
    """Identity/Dropout pass a pending Pad on; a Pad sets (or accumulates) it. A pad of no
    pixels is none: its output is its input, whoever reads it (a torch export writes such
    pads before a UNet's concat where the sizes already match)."""
    if isinstance(result, rules.Pending):
        if result:
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
    return from_onnx_model(onnx_file.load(path), path, input_shape, batch=batch,
                           fallback=fallback)


def from_onnx_model(model, path: Path, input_shape: Sequence[int] | None = None, *,
                    batch: int | None = None, fallback: bool = False) -> Graph:
    """``from_onnx`` of a loaded ModelProto ``model``; ``path``: the file it is named by in
    messages and in the graph (the model's own, or the file it was exported from)."""
    onnx_file.check_float_ops(model, path)
    value_info = onnx_file.graph_input(model, path)
    shape = onnx_file.set_input_shape(value_info, input_shape, path, batch)
    m = analyse(model, path, value_info.name)
    fold_small_constants(model, m)
    skeleton = onnx_file.skeleton(model)
    onnx_file.check(skeleton, path)
    m.shapes = inferred_shapes(onnx_file.infer(skeleton, path))
    for _ in range(MAX_SHAPE_PASSES):  # constants computed from shapes (chunk's Slice ends,
        # a Reshape's target from Shape and Concat, an If's condition) make more shapes
        # known, which may make more such constants foldable
        if inline_static_ifs(model, m):
            m = dataclasses.replace(analyse(model, path, value_info.name), shapes=m.shapes)
        elif not fold_small_constants(model, m):
            break
        m.shapes = inferred_shapes(onnx_file.infer(onnx_file.skeleton(model), path))
    build, ir_of = _convert(model, m, value_info.name, fallback)
    if build.refused:
        raise build.refusal(str(path), supported_ops())
    producer = {t: n.name or t for n in model.graph.node for t in n.output}
    for out in _output_names(model):
        pending = m.pending.pop(out, None)
        if pending:  # no reader absorbs it: a Pad node of its own, named as its ONNX node
            ir_of[out] = build.add(producer[out], pending.op(), (ir_of.get(out, out),),
                                   m.shapes.get(out))
        if not onnx_held.release(m, build, out, f"{producer[out]}_as_is"):
            raise ModelError(f"{path}: output {out!r} ({m.held[out].view.where}): an output's "
                             "first axis must be the batch or one other axis, not several "
                             "joined")
        if out not in ir_of:
            raise ModelError(f"{path}: output {out!r} is not computed from input "
                             f"{value_info.name!r}")
    outputs = {out: ir_of[out] for out in _output_names(model)}
    return build.graph(shape, outputs, str(path), "onnx infers", name=path.stem)
