"""ONNX tensors whose batch axis a node moved, held as views (``lowering.batch_view``).

Exports of attention write reshapes and transposes that take the batch axis from the
front: the heads merged into it, the sequence before it, q, k and v before it. Such a node
makes its output a held tensor (``Model.held``): the IR tensor it reads, that tensor's
shape and the view. Which nodes read one:

- reshapes and transposes (``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``,
  ``Transpose``) change the view;
- ``Gather`` (a constant index or a run of them), ``Slice`` and ``Split`` along an axis that
  is one atom of the view slice the IR tensor; a ``Gather`` of the one entry of an axis of
  size one drops it as a reshape does (so ``x[0]`` of a batch of one, exported as a
  ``Gather`` of the batch axis, holds the image without its batch axis);
- ``COMPUTE`` ops run on the view's canonical form (the batch first, each ONNX axis one IR
  axis after it) by their usual converter, which sees the canonical shapes (``HeldNode``),
  where they do not work across the axis that holds the batch (that would mix the samples of
  a batch): a product's rows and columns, a softmax's or a layer norm's axes, the axes a
  reduction keeping them reduces or an Expand repeats along (``F.normalize`` exported), a
  constant that varies along it;

and a node that puts the batch alone in the first axis again makes its output an ordinary
IR tensor (a reshape, a transpose and a reshape of the held one). Where a view cannot be
followed (any other reader, a compute op across the batch's axis, a graph output), a held
tensor whose first axis is one axis of its IR tensor is given as it is, the batch where the
file has it (``release``: an IR transpose, which may move the batch axis), to a reader that
takes it where it is; one whose first axis joins several is refused, naming where it holds
the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .lowering import Refusal
from .lowering.batch_view import Held, computable, with_batch_axis
from .lowering.shape import run
from .onnx_model import OnnxNode

LAYOUT = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose")
SELECT = ("Gather", "Slice", "Split")
REDUCE = ("ReduceL2", "ReduceL1", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")


def _reduced(c: OnnxNode, k: int) -> tuple[int, ...]:
    """The axes a reduction keeping them (``keepdims``: F.normalize's norm) reduces."""
    if not c.attr("keepdims", 1):
        raise Refusal("drops the axes it reduces; the IR follows a reduction of such a tensor "
                      "that keeps them (keepdims=1)")
    return tuple(a % k for a in c.reduced_axes())


def _expanded(c: OnnxNode, k: int) -> tuple[int, ...]:
    """The axes an Expand keeping the rank repeats its input along (F.normalize's norm
    expanded to its input's shape)."""
    if len(c.in_shape(0)) != k:
        raise Refusal(f"expands {c.in_shape(0)} to {c.out_shape}; the IR follows an Expand of "
                      "such a tensor that keeps its axes")
    return tuple(a for a in range(k) if c.in_shape(0)[a] != c.out_shape[a])


# op type -> the ONNX axes (of a rank-k output) it works across, which must not hold the batch
ACROSS = {"MatMul": lambda c, k: (k - 2, k - 1) if _computed(c, 1) else (k - 1,),
          "Gemm": lambda c, k: (1,),
          "Softmax": lambda c, k: (c.attr("axis", -1) % k,),
          "LogSoftmax": lambda c, k: (c.attr("axis", -1) % k,),
          "LayerNormalization": lambda c, k: tuple(range(c.attr("axis", -1) % k, k)),
          **dict.fromkeys(REDUCE, _reduced), "Expand": _expanded}
ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Where", "Relu", "Gelu",
               "Erf", "Sigmoid", "Tanh", "Exp", "Sqrt", "Neg", "Reciprocal", "Identity",
               "Dropout", "Cast", "IsNaN", "Clip")
COMPUTE = (*ACROSS, *ELEMENTWISE)


@dataclass
class HeldNode(OnnxNode):
    """A node as its converter sees it on canonical forms: ``seen`` the IR shapes of its
    held inputs and output, ``given`` its constants with an axis for the batch (a
    reduction's axes input, one further on), and a non-negative ``axis`` or ``axes`` one
    further on."""

    seen: dict = field(default_factory=dict)
    given: dict = field(default_factory=dict)

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.seen[tensor] if tensor in self.seen else super().shape(tensor)

    def const(self, i: int) -> np.ndarray | None:
        if self.has_input(i) and self.proto.input[i] in self.given:
            return self.given[self.proto.input[i]]
        return super().const(i)

    def attr(self, key: str, default=None):
        value = super().attr(key, default)
        if key == "axes" and value is not None:
            return [a + 1 if a >= 0 else a for a in value]
        return value + 1 if key == "axis" and isinstance(value, int) and value >= 0 else value


def involved(c: OnnxNode) -> bool:
    """Whether node ``c`` reads a held tensor or moves the batch axis of an ordinary one (a
    layout node, or a Gather of the batch axis: ``x[0]`` of a batch of one)."""
    m = c.model
    if any(t in m.held for t in c.proto.input):
        return True
    if c.op_type not in (*LAYOUT, "Gather") or c.proto.input[0] not in m.depends:
        return False
    shape = c.in_shape(0)
    if c.op_type == "Transpose":
        return _perm(c, len(shape))[0] != 0
    return c.out_shape[:1] != shape[:1]


def convert(c: OnnxNode, convert_plain) -> None:
    """Node ``c`` on held tensors (``involved``); ``convert_plain(node)`` converts a node by its
    usual converter. Where the view cannot be followed, what was built for it is taken back,
    each held input is given as it is (``release``) and ``c`` converted by its usual
    converter: a transposed tensor read by an op that takes the batch where it is."""
    m, built = c.model, len(c.build.nodes)
    held, ir_of = dict(m.held), dict(m.ir_of)
    try:
        _follow(c, convert_plain)
    except Refusal as why:
        c.build.take_back(built)
        for now, before in ((m.held, held), (m.ir_of, ir_of)):  # in place: callers keep them
            now.clear()
            now.update(before)
        inputs = [t for t in dict.fromkeys(c.proto.input) if t in m.held]
        if not all(release(m, c.build, t, f"{c.name}_{_short(t)}_as_is") for t in inputs):
            raise
        try:
            convert_plain(c)
        except Refusal:
            raise why from None


def _follow(c: OnnxNode, convert_plain) -> None:
    """Node ``c`` on held tensors, its output held or made ordinary (``convert``)."""
    if c.op_type == "Transpose":
        x = _held(c, c.proto.input[0])
        _place(c, c.proto.output[0], x.transposed(c.build, c.name, _perm(c, len(x.view.shape))))
    elif c.op_type in LAYOUT:
        x = _held(c, c.proto.input[0])
        _place(c, c.proto.output[0], x.reshaped(c.build, c.name, c.out_shape))
    elif c.op_type in SELECT:
        _select(c)
    elif c.op_type in COMPUTE:
        _compute(c, convert_plain)
    else:
        raise Refusal(f"reads {_which(c)}; the IR reads it as {c.op_type}'s input once a "
                      "Reshape or Transpose puts the batch axis first again")


def release(m, build, tensor: str, name: str) -> bool:
    """Make held ``tensor`` an ordinary IR node (``name``) of its own shape, the batch where
    the view has it, if ``as_is_steps`` can; whether it could (or it was not held)."""
    if tensor not in m.held:
        return True
    node = m.held[tensor].as_is(build, f"{name}_")
    if node is None:
        return False
    m.ir_of[tensor] = node
    del m.held[tensor]
    return True


def given_as_is(c: OnnxNode, tensors, what: str) -> None:
    """Give ``what``, which reads ``tensors``, each held one as it is (``release``), or
    refuse."""
    for t in tensors:
        if not release(c.model, c.build, t, f"{c.name}_{_short(t)}_as_is"):
            raise Refusal(f"{what} reads {t!r} ({c.model.held[t].view.where}); the IR reads it "
                          "once a Reshape or Transpose puts the batch axis first again")


def _which(c: OnnxNode) -> str:
    """The held inputs of ``c``, named with the axis that holds the batch."""
    return ", ".join(f"{t!r} ({c.model.held[t].view.where})"
                     for t in c.proto.input if t in c.model.held)


def _perm(c: OnnxNode, ndim: int) -> tuple[int, ...]:
    return tuple(int(p) % ndim for p in c.attr("perm", range(ndim - 1, -1, -1)))


def _computed(c: OnnxNode, i: int) -> bool:
    return c.has_input(i) and c.proto.input[i] in c.model.depends


def _held(c: OnnxNode, tensor: str) -> Held:
    """Input ``tensor``: its held form, or an ordinary IR tensor as a view of itself."""
    m = c.model
    if tensor in m.held:
        return m.held[tensor]
    return Held.of(m.ir_of.get(tensor, tensor), c.shape(tensor))


def _place(c: OnnxNode, out: str, result: tuple[str, Held | None]) -> None:
    """Output ``out`` as ``Held.placed`` left it: an ordinary IR node, or held."""
    node, held = result
    c.model.ir_of[out] = node
    if held is None:
        c.model.held.pop(out, None)
    else:
        c.model.held[out] = held


def _select(c: OnnxNode) -> None:
    """Gather, Slice or Split of a held tensor along axes that are one atom of its view; a
    Gather of the one entry of an axis of size one (the batch of one, ``x[0]``) drops it, as
    a Reshape does."""
    x = _held(c, c.proto.input[0])
    rank = len(x.view.shape)
    if c.op_type == "Split":
        axis = c.attr("axis", 0) % rank
        start = 0
        for k, out in enumerate(c.proto.output):
            size = c.shape(out)[axis]
            _place(c, out, x.cut(c.build, f"{c.name}_{k}", [(axis, slice(start, start + size),
                                                             True)]))
            start += size
        return
    if c.op_type == "Gather":
        axis, index = c.attr("axis", 0) % rank, np.asarray(c.const(1))
        if index.ndim == 0 and x.view.shape[axis] == 1:  # the one entry of an axis of one
            _place(c, c.proto.output[0], x.reshaped(c.build, c.name, c.out_shape))
            return
        part = run(index, x.view.shape[axis], axis)
        _place(c, c.proto.output[0], x.cut(c.build, c.name, [(axis, part, index.ndim > 0)]))
        return
    starts, ends, axes, steps = (c.const(i) for i in range(1, 5))
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    cuts = [(int(a) % rank, slice(int(b), int(e), int(s)), True)
            for a, b, e, s in zip(axes, starts, ends, steps, strict=True)]
    _place(c, c.proto.output[0], x.cut(c.build, c.name, cuts))


def _compute(c: OnnxNode, convert_plain) -> None:
    """A ``COMPUTE`` node of held inputs by its converter on their canonical forms (each
    check made before any IR node is)."""
    m = c.model
    data = [t for t in c.proto.input if t and t in m.depends]
    if any(t not in m.held for t in data):
        plain = next(t for t in data if t not in m.held)
        raise Refusal(f"combines {_which(c)} with {plain!r}, whose batch axis is first: the "
                      "IR does not mix tensors that hold the batch in different axes")
    k = len(c.out_shape)
    try:
        j0 = computable([m.held[t].view for t in data], k,
                        ACROSS.get(c.op_type, lambda c, k: ())(c, k))
    except Refusal as e:
        raise Refusal(f"reads {_which(c)} and {e}") from None
    given = {} if c.op_type in ACROSS else {
        t: with_batch_axis(c.const(i), k, j0) for i, t in enumerate(c.proto.input)
        if t and t not in m.depends and c.const(i) is not None}
    if c.op_type in REDUCE and c.has_input(1):  # axes as input: one further on, as ``axes``
        given[c.proto.input[1]] = np.array([a + 1 if a >= 0 else a for a in c.const(1)],
                                           np.int64)
    for t in dict.fromkeys(data):
        m.held[t] = m.held[t].canonical(c.build, f"{c.name}_{_short(t)}_canonical")
        m.ir_of[t] = m.held[t].base
    out_view = m.held[data[0]].view.computed(c.out_shape)
    out_shape = out_view.canonical()[0]
    convert_plain(HeldNode(c.proto, c.name, m, c.build, given=given, seen={
        **{t: m.held[t].shape for t in data}, c.proto.output[0]: out_shape}))
    out = c.proto.output[0]
    _place(c, out, Held(m.ir_of[out], out_shape, out_view).placed(
        c.build, f"{c.name}_plain", [], out_view))


def _short(tensor: str) -> str:
    return tensor.replace("/", "_").strip("_")
