"""The torch fallback (``from_torch(..., fallback=True)``, ``--fallback``): what the IR does not
model, computed by torch's own calls as an ``ops.Fallback`` node (costed as vector work).

A node the IR cannot express runs its own call (``node``). A node whose result is not a
float tensor cannot: the IR carries float32 arrays, so a mask or indices would reach their
reader as numbers (``cannot``). A complex-valued part of the network, though, as spectral
networks write it (GFNet's global filter ``irfft2(rfft2(x) * weight)``, FFC's Fourier unit,
FNet's ``fft2(x).real``), starts and ends in float tensors: such a region (``complex_regions``:
the nodes of complex results, the nodes reading them, up to the one float result read
outside) runs as one ``Fallback`` whose calls are the region's nodes in order (``region``),
its inputs the float tensors it reads; where it leaves as several float results (the real
and imaginary parts), it takes in the nodes that join them into one (a ``stack``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .lowering import Lowering
from .torch_ops import Parts, Ref

JOINS = 4  # nodes a complex-valued region takes in to join the float results it leaves as


@dataclass(frozen=True)
class Slot:
    """Input ``index`` of a fallback node, among its calls' arguments."""

    index: int


@dataclass(frozen=True)
class Step:
    """The result of call ``index`` of the same fallback (an earlier node of its region)."""

    index: int


@dataclass(frozen=True, eq=False)
class Call:
    """One torch call: a module or function, or a Tensor method by name (``method``), its
    arguments holding ``Slot``s and ``Step``s where the tensors go."""

    fn: object
    method: bool
    args: tuple
    kwargs: dict


@dataclass(frozen=True, eq=False)
class TorchCalls:
    """A fallback's torch calls, run in order on its numpy inputs (as float32 tensors); the
    last call's result is its output, as float32 numpy."""

    calls: tuple[Call, ...]

    def __call__(self, *arrays):
        # copies: an in-place call must not change the array other nodes read
        tensors = [torch.from_numpy(np.array(a, np.float32, order="C")) for a in arrays]
        results: list = []

        def value(v):
            if isinstance(v, Slot):
                return tensors[v.index]
            return results[v.index] if isinstance(v, Step) else v

        with torch.no_grad():
            for call in self.calls:
                args, kwargs = torch.fx.node.map_aggregate((call.args, call.kwargs), value)
                results.append(getattr(args[0], call.fn)(*args[1:], **kwargs) if call.method
                               else call.fn(*args, **kwargs))
        return results[-1].detach().cpu().to(torch.float32).numpy()


def node(build: Lowering, gm, n, kind: str, args, kwargs, shape, dtype: str) -> str | None:
    """Add fx node ``n`` (its ``args``, ``kwargs`` as the converter reads them: ``Ref``s for
    the network's tensors) as a ``Fallback`` running its own torch call; where it cannot
    be, why not (``cannot``)."""
    why = cannot(args, kwargs, shape, dtype)
    if why is not None:
        return why
    refs: list[Ref] = []

    def slot(v):
        if isinstance(v, Ref):
            refs.append(v)
            return Slot(len(refs) - 1)
        return v

    args, kwargs = torch.fx.node.map_aggregate((args, kwargs), slot)
    call = TorchCalls((_call(gm, n, args, kwargs),))
    build.fallback(n.name, kind, call, [r.name for r in refs], [r.shape for r in refs], shape)
    return None


def cannot(args, kwargs, shape, dtype: str) -> str | None:
    """Why a node's own torch call cannot run it as a ``Fallback``, or None: it reads the
    parts of a chunk or split, or a constant pad npusim holds for the conv or pool reading
    it, or its result is not one tensor, or not a floating one (``dtype``: a mask from a
    comparison, indices), or it reads no tensor of the network."""
    found = [_unreadable(v) for v in _tensors(args, kwargs)]
    blocked = [f for f in found if f]
    if blocked:
        return blocked[0]
    if not shape:
        return "its result is not one tensor"
    if not dtype.startswith(("float", "bfloat")):
        return (f"its result is {dtype}, and the network's tensors are float32 (a mask or "
                "indices would reach their reader as numbers)")
    if not found:
        return "it reads no tensor of the network"
    return None


def _tensors(args, kwargs) -> list:
    """The ``Ref`` and ``Parts`` arguments of a call, in order."""
    found: list = []
    torch.fx.node.map_aggregate(
        (args, kwargs), lambda v: found.append(v) if isinstance(v, (Ref, Parts)) else None)
    return found


def _unreadable(v) -> str:
    """Why a torch call alone cannot take argument ``v``, or "" where it can."""
    if isinstance(v, Parts):
        return "it reads the parts of a chunk or split, which a torch call alone cannot take"
    if v.pad:
        return ("it reads a constant pad (F.pad, nn.ZeroPad2d...), which npusim holds for a "
                "conv or pool to absorb and a torch call alone cannot take")
    if v.held:
        return ("it reads a tensor whose batch axis a permute or reshape moved, and the "
                "fallback's call takes the batch first")
    return ""


def _call(gm, n, args, kwargs) -> Call:
    """fx node ``n``'s own torch call with ``args`` and ``kwargs``."""
    fn = gm.get_submodule(n.target) if n.op == "call_module" else n.target
    return Call(fn, n.op == "call_method", tuple(args), dict(kwargs))


def complex_regions(gm, info: dict, computed: set) -> dict:
    """Per node of a complex-valued region of traced ``gm`` (``info``: what the recording
    run gave each node, ``Ref``s for the ``computed`` ones): its region, the nodes in graph
    order, the last the one float result read outside it. A region of no such result, or
    of several, is left out (its nodes are refused one by one)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    is_complex = {n for n in computed if info[n].dtype.startswith("complex")}
    regions: dict = {}
    for start in sorted(is_complex, key=order.get):
        if start in regions:
            continue
        members, todo = {start}, [start]
        while todo:  # a complex node's computed inputs of complex value, and all its readers
            n = todo.pop()
            if n not in is_complex:
                continue
            near = [a for a in n.all_input_nodes if a in is_complex] + \
                [u for u in n.users if u in computed]
            todo.extend(m for m in near if m not in members)
            members.update(near)
        leaving = _joined(members, computed, order)
        region = sorted(members, key=order.get)
        if len(leaving) == 1 and leaving[0] is region[-1] and leaving[0] not in is_complex:
            regions.update(dict.fromkeys(region, tuple(region)))
    return regions


def _joined(members: set, computed: set, order: dict) -> list:
    """The nodes of region ``members`` read outside it (by a node computed from the input, or
    as an output), after taking in, where there are several, the first node that reads one
    of them, up to ``JOINS`` times: FFC's Fourier unit leaves its region as the ``real`` and
    ``imag`` parts that one ``stack`` joins."""
    for _ in range(JOINS + 1):
        leaving = sorted((n for n in members if any(
            u not in members and (u in computed or u.op == "output") for u in n.users)),
            key=order.get)
        readers = [u for n in leaving for u in n.users if u in computed and u not in members]
        if len(leaving) <= 1 or not readers:
            return leaving
        members.add(min(readers, key=order.get))
    return leaving


def region(build: Lowering, gm, nodes: tuple, info: dict, shape) -> str | None:
    """Add the complex-valued region ``nodes`` (``complex_regions``) as one ``Fallback``
    named as its last node, whose result it gives; where it cannot be, why not."""
    steps = {n: i for i, n in enumerate(nodes)}
    refs: list[Ref] = []
    problems: list[str] = []

    def arg(a):
        if a in steps:
            return Step(steps[a])
        value = info[a]
        if not isinstance(value, (Ref, Parts)):
            return value  # a constant: a parameter, a complex weight made from one
        why = _unreadable(value)
        if why:
            problems.append(why)
        refs.append(value)
        return Slot(len(refs) - 1)

    calls = tuple(_call(gm, n, *torch.fx.node.map_arg((n.args, n.kwargs), arg))
                  for n in nodes)
    if problems:
        return problems[0]
    kinds = " > ".join(_kind(n) for n in nodes)
    build.fallback(nodes[-1].name, f"complex-valued {kinds}", TorchCalls(calls),
                   [r.name for r in refs], [r.shape for r in refs], shape)
    return None


def _kind(n) -> str:
    """A region node's call as a short name: ``rfft2``, ``mul``, ``abs``, ``real``."""
    if n.target is getattr:
        return str(n.args[1])
    target = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
    return target.removeprefix("fft_") or n.name
