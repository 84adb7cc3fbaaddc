"""In-place ops in a traced PyTorch network: what the importer follows and what it refuses.

An in-place op (``nn.ReLU(inplace=True)``, ``F.relu_``, ``y.add_(1)``, ``y += 1``) changes
the tensor it is given, so every other name of that tensor reads the new value:
``skip = y; y += 1; return y * skip`` squares ``y + 1``. The IR's ops make new tensors,
so the importer rewires the graph: a node reading the tensor after the op reads the op's
result instead. Three parts:

- fx's ``Proxy`` has no ``__iadd__``, so ``y += 1`` traced as ``y = y + 1``, which leaves
  ``skip`` the old tensor; ``Proxy`` here records ``+=``, ``-=``, ``*=``, ``/=``, ``//=``
  and ``%=`` as the in-place calls (``operator.iadd``...) they are on a tensor;
- ``Mutations`` watches the recording run (``torch_import._record``): before each node,
  the version counter of every live tensor (torch counts each in-place change of a
  tensor's data, shared by a tensor and its views), so a node that changed one is seen
  whatever its call;
- ``follow`` rewires the readers after each change, and refuses what it cannot follow:
  a change to data that another live tensor views (a slice, a ``view``) and which is read
  again, an op that does not return the tensor it changed, a change to a parameter or
  buffer, or to a constant already read by the network.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from ..errors import ModelError


class Proxy(torch.fx.Proxy):
    """fx's proxy, with ``+=``, ``-=``, ``*=``, ``/=``, ``//=`` and ``%=`` recorded as
    in-place calls."""


def _in_place(op):
    def method(self, other):
        return self.tracer.create_proxy("call_function", op, (self, other), {})
    return method


for _name in ("iadd", "isub", "imul", "itruediv", "ifloordiv", "imod"):
    setattr(Proxy, f"__{_name}__", _in_place(getattr(operator, _name)))


@dataclass(frozen=True)
class Change:
    """Node ``by`` changed the data of node ``of``'s tensor; ``returned``: ``by`` returns
    that very tensor (same data, shape and strides)."""

    of: torch.fx.Node
    by: torch.fx.Node
    returned: bool


class Mutations:
    """The changes a run of a traced graph makes (``before`` each node, ``after`` it)."""

    def __init__(self):
        self.changes: list[Change] = []
        self._seen: list[tuple[torch.fx.Node, torch.Tensor, int, bool]] = []

    def before(self, env: dict) -> None:
        """Note the version of every tensor in ``env`` (an fx Interpreter's live values), and
        whether it is its node's whole value (not one of a tuple's, as ``chunk`` gives)."""
        self._seen = []
        for node, value in env.items():
            torch.fx.node.map_aggregate(
                value, lambda v, node=node, whole=value: self._note(node, v, v is whole))

    def _note(self, node, value, whole: bool) -> None:
        if isinstance(value, torch.Tensor):
            try:
                self._seen.append((node, value, value._version, whole))
            except RuntimeError:  # an inference-mode tensor keeps no version
                pass

    def after(self, n: torch.fx.Node, out) -> None:
        """Record each tensor noted ``before`` whose data node ``n`` (result ``out``) changed."""
        for node, tensor, version, whole in self._seen:
            if node is not n and tensor._version != version and _may_share(tensor, out):
                self.changes.append(Change(node, n, whole and _same(tensor, out)))


def _may_share(tensor: torch.Tensor, out) -> bool:
    """Whether ``tensor``'s data may be the changed ``out``'s: views of one tensor share its
    version counter, so one chunk changed counts the others changed too; their bytes tell
    (an op that returns no tensor: it may have changed any)."""
    if not isinstance(out, torch.Tensor) or tensor.numel() == 0 or out.numel() == 0:
        return not isinstance(out, torch.Tensor)
    return _span(tensor)[0] < _span(out)[1] and _span(out)[0] < _span(tensor)[1]


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The addresses from ``t``'s first byte to past its last."""
    last = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _same(tensor: torch.Tensor, out) -> bool:
    return (isinstance(out, torch.Tensor) and out.data_ptr() == tensor.data_ptr()
            and out.shape == tensor.shape and out.stride() == tensor.stride()
            and out.dtype == tensor.dtype)


def follow(gm: torch.fx.GraphModule, changes: list[Change], computed, name: str) -> None:
    """Rewire ``gm``'s graph so that each node reading a changed tensor after the change
    reads the changing node's result; ``computed(node)``: whether the node's value is
    computed from the input. Raises ``ModelError`` on a change it cannot follow."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for change in changes:
        of, by = change.of, change.by
        later = [u for u in of.users if order[u] > order[by]]
        if of.op == "get_attr":
            _refuse(name, by, f"the module's parameter or buffer {of.target!r}")
        if not computed(of) and any(computed(u) for u in of.users if order[u] < order[by]):
            _refuse(name, by, f"{of.name!r}, a constant the network has read before")
        if not later:
            continue
        if not change.returned:
            readers = ", ".join(repr(u.name) for u in later[:3])
            _refuse(name, by, f"the data of {of.name!r}, which {readers} read after it (a "
                    "view shares that data, or the op does not return the tensor it changed)")
        for user in later:
            user.replace_input_with(of, by)
    gm.graph.lint()


def _refuse(name: str, by: torch.fx.Node, what: str) -> None:
    raise ModelError(f"{name}: node {by.name!r} ({_call(by)}) changes in place {what}; npusim "
                     "follows an in-place op on a whole tensor it returns: write this one out "
                     "of place (inplace=False, or the op without its trailing _)")


def _call(n: torch.fx.Node) -> str:
    target = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", n.target)
    return {"call_module": f"module {target}", "call_method": f".{target}()"}.get(
        n.op, f"{target}()")
