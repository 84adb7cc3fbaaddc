"""Patterns fused after lowering: ONNX's spelled-out exact GELU as one Gelu node, a
spelled-out hard swish as one HardSwish node; pairs of Transposes that undo each other
dropped."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...ir import Node


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


def _readers(nodes: list) -> dict[str, list]:
    """Node name -> the nodes reading it, in order (a node reading it twice: twice)."""
    readers: dict[str, list] = {}
    for n in nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    return readers


def _only_reader(nodes: list, outputs: set):
    """``only_reader(name)``: the one node reading node ``name``, None if none, several, or
    ``name`` is an output (its value is kept: it cannot be fused away)."""
    readers = _readers(nodes)

    def only_reader(name):
        r = readers.get(name, [])
        return r[0] if len(r) == 1 and name not in outputs else None
    return only_reader


def _times(m, a: str, b: str) -> bool:
    """Whether node ``m`` multiplies the values of nodes ``a`` and ``b`` (either order)."""
    return (m is not None and isinstance(m.op, ops.Elementwise) and m.op.kind == "mul"
            and m.op.const is None and sorted(m.inputs) == sorted((a, b)))


def fuse_gelu(nodes: list, outputs: set) -> list:
    """Each exact GELU that ONNX spells as ``Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x ->
    Mul 0.5`` (torch's export before opset 20; the 0.5 may also scale x first) as one Gelu
    node named after the last node of the pattern, reading x. Intermediate nodes must be
    read only inside the pattern."""
    by, only_reader = {n.name: n for n in nodes}, _only_reader(nodes, outputs)
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


def fuse_hardswish(nodes: list, outputs: set) -> list:
    """Each hard swish spelled ``x * relu6(x + 3) / 6`` (``Add 3 -> Clip [0, 6] -> Mul x ->
    Div 6``, or the Div before the Mul: Paddle's export, and torch's of one written out)
    as one HardSwish node named after the last node of the pattern, reading x: the ops
    of ``HardSwish`` on the vector unit (5 an element, not the four ops' 7), as a network
    that names its hard swish is counted. Intermediate nodes must be read only inside the
    pattern."""
    by, only_reader = {n.name: n for n in nodes}, _only_reader(nodes, outputs)
    drop, replace = set(), {}
    for r in nodes:
        a = by.get(r.inputs[0]) if isinstance(r.op, ops.Relu6) else None
        if a is None or not _is_affine(a.op, 1, 3) or only_reader(a.name) is not r:
            continue
        x, n = a.inputs[0], only_reader(r.name)
        if _times(n, x, r.name) and _is_affine(getattr(only_reader(n.name), "op", None),
                                               1 / 6, 0):
            parts, last = (a, r, n), only_reader(n.name)
        elif (n is not None and _is_affine(n.op, 1 / 6, 0)
              and _times(only_reader(n.name), x, n.name)):
            parts, last = (a, r, n), only_reader(n.name)
        else:
            continue
        drop.update(p.name for p in parts)
        replace[last.name] = Node(last.name, ops.HardSwish(), (x,))
    return [replace.get(n.name, n) for n in nodes if n.name not in drop]


def cancel_transposes(nodes: list, outputs: set) -> list:
    """Drop each pair of Transposes that undo each other (a linear layer's way back to
    channels-last followed by the network's own permute to channels-first): the second's
    readers read the first's input. The first must be read by the second alone."""
    by, readers = {n.name: n for n in nodes}, _readers(nodes)
    renamed: dict[str, str] = {}
    for n in nodes:
        first = by.get(n.inputs[0]) if n.inputs else None
        if (isinstance(n.op, ops.Transpose) and first is not None and n.name not in outputs
                and isinstance(first.op, ops.Transpose) and len(readers[first.name]) == 1
                and first.name not in renamed and first.name not in outputs
                and tuple(first.op.perm[p] for p in n.op.perm) == tuple(range(len(n.op.perm)))):
            source = first.inputs[0]  # a pair's input may be an earlier pair's output
            renamed[first.name] = renamed[n.name] = renamed.get(source, source)
    return [Node(n.name, n.op, tuple(renamed.get(i, i) for i in n.inputs))
            for n in nodes if n.name not in renamed]
