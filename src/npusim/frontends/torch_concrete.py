"""Tracing at the example's shapes: a forward whose Python reads its tensors' shapes as
numbers, which torch.fx's symbolic tracing cannot follow, traced again with each shape the
example input gives.

fx traces with proxies that hold no values, so a shape is a proxy too: ``x.shape[1]`` can
be passed on to ``view``, but not turned into a Python number or branched on. Published
networks do both: Swin's ``window_reverse`` computes its batch as
``int(windows.shape[0] / (H * W / p / p))`` and its blocks ``assert L == H * W``; detectors
and window attention pad a map ``if W % p != 0``; a head loops ``for i in
range(x.shape[1])``. fx stops at each with ``int() argument must be ... not 'Proxy'`` or
"symbolically traced variables cannot be used as inputs to control flow".

The import is made for one input shape, the example's (``from_torch``: a graph runs at the
shape it was imported at), and its shape arithmetic is a constant already (the recording
run gives every view its result shape). So where fx cannot trace a forward, ``trace``
traces it again with a tracer (``Tracer``) that computes every node's value as it records
it, and answers ``x.shape``, ``x.size()``, ``x.dim()``, ``x.ndim``, ``x.numel()`` and
``len(x)`` with the numbers they have on the example: the forward's Python computes with
them, branches on them and loops over them as it does when run, and the graph holds what
that run does. A shape that follows the data stays a proxy: that of a call whose result's
size depends on its values (``x.nonzero()``, a boolean mask's selection, ``unique``) or of
anything computed from one, and, as each node is computed twice, on the example and on
another input of its shape, one the two runs disagree on; so does every value of the data
itself (``x.sum() > 0`` still cannot be branched on: the graph would hold one input's
branch for every input). The values are computed on copies of the input, the parameters
and the buffers, so the trace changes none of them.
"""

from __future__ import annotations

import contextlib
import operator

import torch

from . import torch_inplace, torch_qat

# a tensor's attributes and methods answered with the example's numbers
_QUERIES = ("shape", "ndim", "size", "dim", "numel")
# calls whose result's shape follows the data (so does every node computed from one)
_DATA_SHAPED = frozenset({
    torch.nonzero, torch.argwhere, torch.masked_select, torch.unique,
    torch.unique_consecutive, "nonzero", "argwhere", "masked_select", "unique",
    "unique_consecutive"})
_NONE = object()  # a node's value where it, or a node it reads, raised
# what fx patches on every module while it traces (a call records a node, an attribute
# gives a proxy); a value is computed with the originals
_MODULE = {name: torch.nn.Module.__dict__[name] for name in ("__call__", "__getattr__")}


@contextlib.contextmanager
def _untraced():
    """Modules called and read as they are outside a trace, fx's patches put back after."""
    patched = {name: torch.nn.Module.__dict__[name] for name in _MODULE}
    for name, original in _MODULE.items():
        setattr(torch.nn.Module, name, original)
    try:
        yield
    finally:
        for name, patch in patched.items():
            setattr(torch.nn.Module, name, patch)


class Proxy(torch_inplace.Proxy):
    """The in-place recording proxy (``torch_inplace.Proxy``) whose tensor's shape queries
    are numbers where its shape does not follow the data (``Tracer.static``); anything else
    is traced as fx traces it."""

    def __getattr__(self, name: str):
        if name in _QUERIES and (value := self.tracer.static(self.node)) is not None:
            return getattr(value, name)  # a method bound to the value: its call gives numbers
        return super().__getattr__(name)

    def __len__(self) -> int:
        length = self.tracer.length(self.node)
        return super().__len__() if length is None else length

    def __iter__(self):
        """Each part in turn (``self[i]``) where the example says how many there are: a
        ``split``'s or ``chunk``'s tuple summed or zipped, a tensor's first axis looped."""
        length = self.tracer.length(self.node)
        return super().__iter__() if length is None else (self[i] for i in range(length))


class Tracer(torch_qat.Tracer):
    """``torch_qat.Tracer`` (its leaves, its in-place proxies) that computes every node it
    records on the example and on another input of its shape (``runs``; ``values``: node ->
    its value on each, ``_NONE`` where it could not be computed). A shape is the example's
    (``static``) unless it follows the data: ``data_shaped`` nodes (``nonzero``, a boolean
    mask's selection, what is computed from them), or a shape the two runs disagree on (an
    op of that kind the list does not name); such a shape stays a proxy. ``failed``: the
    first node whose computation on the example raised, and the exception."""

    def __init__(self, example: torch.Tensor):
        super().__init__()
        other = torch.randn(example.shape, generator=torch.Generator().manual_seed(1))
        # copies: a forward may change its input in place
        self.runs = (example.detach().clone(), other.to(example.dtype))
        self.values: dict[torch.fx.Node, tuple] = {}
        self.data_shaped: set[torch.fx.Node] = set()
        self.failed: tuple[str, Exception] | None = None

    def proxy(self, node):
        return Proxy(node, self)

    def static(self, node: torch.fx.Node) -> torch.Tensor | None:
        """``node``'s value on the example where it is a tensor whose shape does not follow
        the data: not computed from a call of ``_DATA_SHAPED`` or a boolean mask's
        selection, and the same on both runs; else None."""
        values = self.values.get(node, (_NONE, _NONE))
        if node not in self.data_shaped and all(isinstance(v, torch.Tensor) for v in values) \
                and values[0].shape == values[1].shape:
            return values[0]
        return None

    def length(self, node: torch.fx.Node) -> int | None:
        """How many parts ``node``'s value has on the example (a tuple's or list's entries,
        a tensor's first axis) where its shape does not follow the data; else None."""
        values = self.values.get(node, (_NONE, _NONE))
        if node in self.data_shaped:
            return None
        if all(isinstance(v, (tuple, list)) for v in values) \
                and len(values[0]) == len(values[1]):
            return len(values[0])
        value = self.static(node)
        return len(value) if value is not None and value.ndim else None

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        if kind != "output":
            self.values[node] = tuple(self._computed(node, run) for run in range(len(self.runs)))
            if self._data_shaped(node):
                self.data_shaped.add(node)
        return node

    def _data_shaped(self, node: torch.fx.Node) -> bool:
        """Whether ``node``'s shape may follow the data: a ``_DATA_SHAPED`` call, a one-input
        ``torch.where``, an index by a boolean mask, or a node computed from one of them."""
        if any(n in self.data_shaped for n in node.all_input_nodes):
            return True
        if node.op not in ("call_function", "call_method"):
            return False
        if node.target in _DATA_SHAPED:
            return True
        if node.target in (torch.where, "where"):
            return len(node.args) + len(node.kwargs) == 1
        if node.target is not operator.getitem:
            return False
        found = []
        torch.fx.node.map_aggregate(torch.fx.node.map_arg(
            node.args[1], lambda n: self.values[n][0]), found.append)
        return any(isinstance(v, torch.Tensor) and v.dtype == torch.bool for v in found)

    def _computed(self, node: torch.fx.Node, run: int):
        """``node``'s value on input ``run`` (``_NONE`` where it or an input of it raised)."""
        if any(self.values[n][run] is _NONE for n in node.all_input_nodes):
            return _NONE
        try:
            with torch.no_grad(), _untraced():
                return self._value(node, run)
        except Exception as e:  # the forward fails on the example: the first failure kept
            if run == 0:
                self.failed = self.failed or (node.name, e)
            return _NONE

    def _value(self, node: torch.fx.Node, run: int):
        """``node``'s value on input ``run``, from its inputs' values there."""
        if node.op == "placeholder":
            return self.runs[run] if not node.args else node.args[0]
        if node.op == "get_attr":
            value = self.root
            for part in node.target.split("."):
                value = getattr(value, part)
            return value.detach().clone() if isinstance(value, torch.Tensor) else value
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                            lambda n: self.values[n][run])
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return self.root.get_submodule(node.target)(*args, **kwargs)  # call_module


class RunFailed(Exception):
    """The forward raised on the example at node ``node`` (``error``), and the trace could
    not go on without that node's value."""

    def __init__(self, node: str, error: Exception):
        super().__init__(f"{node}: {error}")
        self.node, self.error = node, error


def trace(module, example: torch.Tensor) -> torch.fx.GraphModule:
    """``torch_qat.trace`` of ``module`` with every shape query answered with the numbers it
    has on ``example`` (``Tracer``). Raises ``RunFailed`` where the trace failed after the
    forward itself did on the example, else what fx raised."""
    tracer = Tracer(example)
    try:
        return torch_qat.trace(module, tracer)
    except Exception as e:
        if tracer.failed:
            raise RunFailed(*tracer.failed) from e
        raise
