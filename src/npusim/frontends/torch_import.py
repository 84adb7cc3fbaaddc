"""PyTorch -> ``ir.Graph``: trace with torch.fx, map each call to one IR op, fold batch norm.

Why ``torch.fx.symbolic_trace`` and not ``torch.export``: fx keeps the user's own
vocabulary (one node per ``nn.Conv2d`` call holding the module and its parameters,
``F.relu``, ``x.view``), so each node maps to one IR op and every refusal names the
user's module path and call. ``torch.export`` lowers to ATen (``aten.convolution``
with transposed/output-padding flags, decomposed batch norm, functionalised views),
which would need a second, lower-level table for no gain on the feed-forward CNNs the
IR holds, and it fails on the same data-dependent control flow fx does.

The traced module is run once on the example input by an ``fx.Interpreter`` that
records every node's output shape. Shape arithmetic (``x.size(0)``, ``x.shape[2]``)
is thereby a constant, ``view``/``reshape``/``flatten`` take their result shape from
the run, and after the graph is built each IR node's inferred shape is checked
against PyTorch's: an op the IR would compute differently is refused, not imported.

This module walks the traced graph (recording, converting node by node, the outputs;
the torch fallback is ``torch_fallback``'s) and loads ``file.py:factory`` networks; how
each torch call becomes lowering rules is ``torch_ops``'s, and the rules themselves are
``lowering``'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import LayerError, ModelError
from ..ir import Graph
from .lowering import Lowering
from .lowering import Refusal as _Refusal

try:
    import torch
    from torch import nn
except ImportError as e:  # pragma: no cover - torch is an optional extra
    raise ModelError("PyTorch import needs torch: pip install 'npusim[torch]'") from e

from . import (  # noqa: E402
    torch_concrete,
    torch_fallback,
    torch_held,
    torch_inplace,
    torch_programs,
    torch_qat,
)
from .torch_ops import Call, Parts, Ref  # noqa: E402
from .torch_table import (  # noqa: E402
    MASK_READERS,
    kind_and_converter,
    supported_ops,
)

DEFAULT_INPUT_SHAPE = (1, 3, 224, 224)


# ---- tracing and recording --------------------------------------------------------------


def _trace(module, x, name: str):
    """``module`` traced by fx; where fx cannot follow its Python, traced again with every
    shape the number it has on the example input ``x`` (``_traced_at_shapes``)."""
    state = _versions(module)
    try:
        gm = torch_qat.trace(module)
    except Exception as e:  # fx raises many types on untraceable Python
        gm = _traced_at_shapes(module, x, name, e, state)
    inputs = [n.name for n in gm.graph.nodes if n.op == "placeholder" and not n.args]
    if len(inputs) != 1:
        raise ModelError(f"{name}: forward takes {len(inputs)} tensor inputs {inputs}; "
                         "npusim networks take one")
    return gm


def _traced_at_shapes(module, x, name: str, error: Exception, state: list[int]):
    """``module`` traced with its shapes the numbers they have on ``x`` (``torch_concrete``),
    after fx alone failed with ``error``; not where that failed trace changed the module's
    own parameters or buffers (``state``: their ``_versions`` before it), as a forward that
    changes them outside what fx records would change them again."""
    if _versions(module) != state:
        raise ModelError(f"{name}: torch.fx cannot trace it ({type(error).__name__}: {error}); "
                         "npusim imports what torch.fx can follow (no control flow on tensor "
                         "values), and a forward that changes its own parameters or buffers "
                         "as it is traced is not traced twice") from error
    try:
        return torch_concrete.trace(module, x)
    except torch_concrete.RunFailed as e:
        raise _forward_failed(name, x, e.node, e.error) from e.error
    except Exception as e:
        raise ModelError(f"{name}: torch.fx cannot trace it ({type(e).__name__}: {e}), even "
                         "with its shapes taken as numbers; npusim imports what torch.fx can "
                         "follow (no control flow on tensor values)") from e


def _versions(module) -> list[int]:
    """How many times each parameter and buffer of ``module`` has been changed in place."""
    return [t._version for t in (*module.parameters(), *module.buffers())]


class ForwardFailed(ModelError):
    """The network's own forward raised on the input it was traced with."""


def _forward_failed(name: str, x, node: str, e: Exception) -> ForwardFailed:
    """That the forward of network ``name`` raised ``e`` at ``node`` on ``x``."""
    return ForwardFailed(f"{name}: running it on an input of shape {tuple(x.shape)} failed at "
                         f"node {node!r} ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})")


_SHAPE_ATTRIBUTES = ("shape", "ndim", "dtype", "device")
_SHAPE_METHODS = ("size", "dim", "numel", "new_zeros", "new_ones", "new_full", "new_tensor")
_SHAPE_FUNCTIONS = (torch.zeros_like, torch.ones_like, torch.full_like)


def _shape_query(n) -> bool:
    """A node whose value follows the shape (and type) of its tensor input, not its values
    (``x.shape``, ``x.size()``, ``x.dtype``, ``torch.zeros_like(x)``, ``x.new_ones(...)``):
    static, as every shape is once traced, so what is computed from it alone
    (``torch.arange(x.shape[2])``, a detector's grid of cell offsets) is a constant."""
    if n.op == "call_function":
        return (n.target is getattr and n.args[1] in _SHAPE_ATTRIBUTES
                or n.target in _SHAPE_FUNCTIONS)
    return n.op == "call_method" and n.target in _SHAPE_METHODS


@dataclass(frozen=True)
class _ValueNumber:
    """A number (or other non-tensor) taken from the input's values (``x.max().item()``,
    ``bool(x.sum())``): what reads it would differ on another input."""

    value: object


def _record(gm, x, name: str) -> dict:
    """Per fx node: a ``Ref`` if it is a tensor computed from the input's values, a
    ``_ValueNumber`` for anything else so computed, else its value (a constant:
    parameters, buffers, shapes and what is made from them alone). The graph's readers of a
    tensor an in-place op changed then read the op's result (``torch_inplace``)."""
    info: dict = {}
    dynamic: set = set()
    mutations = torch_inplace.Mutations()

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            mutations.before(self.env)
            try:
                out = super().run_node(n)
            except Exception as e:  # the user's own forward failed at this node
                raise _forward_failed(name, x, n.name, e) from e
            if n.op == "placeholder" or not _shape_query(n) and any(
                    a in dynamic for a in n.all_input_nodes):
                dynamic.add(n)
            if n not in dynamic:
                info[n] = out
            elif _holds_tensor(out):
                info[n] = Ref("input" if n.op == "placeholder" else n.name, _shape(out),
                              parts=_part_shapes(out), dtype=_dtype(out))
            else:
                info[n] = _ValueNumber(out)
            mutations.after(n, out)
            return out

    recorder = Recorder(gm)
    recorder.extra_traceback = False  # torch's own error decoration imports dynamo: seconds
    with torch.no_grad():
        recorder.run(x.clone())  # an in-place op on the input leaves the caller's as it is
    torch_inplace.follow(gm, mutations.changes, lambda n: n in dynamic, name)
    gm.graph.eliminate_dead_code()  # after: an in-place op no node reads may change one that is
    gm.recompile()
    return info


def _holds_tensor(value) -> bool:
    found = []
    torch.fx.node.map_aggregate(value, lambda v: found.append(isinstance(v, torch.Tensor)))
    return any(found)


def _part_shapes(value) -> tuple:
    """The shapes of a tuple or list of tensors (chunk, split), else ()."""
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(tuple(v.shape) for v in value)
    return ()


def _shape(value) -> tuple[int, ...]:
    """A tensor's shape; () for a tuple of tensors (which no converter accepts)."""
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def _dtype(value) -> str:
    """A tensor's element type by name ('float32', 'bool'); 'float32' for a tuple."""
    return str(value.dtype).removeprefix("torch.") if isinstance(value, torch.Tensor) \
        else "float32"


def _needs_op(n, info: dict) -> bool:
    """A node the IR must compute: a call whose result holds tensors computed from the input."""
    return n.op in ("call_module", "call_function", "call_method") and isinstance(info[n], Ref)


# ---- graph building ---------------------------------------------------------------------


def _convert(gm, info: dict, fallback: bool) -> Lowering:
    """Each node the IR must compute as IR nodes; with ``fallback``, a node the IR cannot
    express as a ``Fallback`` running its own torch call. Every refusal is listed, each
    node's of its own (a node reading a refused one reads the tensor the recording run gave
    it), but for a node taking a part of a refused call's several results (``unbind``'s,
    ``split``'s), which no converter can read: the call's refusal says it."""
    build = Lowering()
    computed = {n for n in gm.graph.nodes if _needs_op(n, info)}
    regions = torch_fallback.complex_regions(gm, info, computed)
    for n in gm.graph.nodes:
        if n not in computed or _returned_record(n):
            continue
        if n in regions:  # complex-valued: one fallback at the region's end
            if fallback and n is regions[n][-1]:
                _complex_region(build, gm, regions[n], info)
            elif not fallback:
                _refuse_in_region(build, gm, n, info)
            continue
        refused = build.refused_nodes
        if any(a.name in refused and info[a].parts for a in n.all_input_nodes):
            continue
        kind, conv = kind_and_converter(gm, n)
        numbers = [a.name for a in n.all_input_nodes if isinstance(info[a], _ValueNumber)]
        if numbers:  # the fallback would bake the number in as well
            build.refuse_fallback(kind, n.name, f"it reads {', '.join(numbers)}, a number "
                                  "taken from the input's values (.item(), int(tensor))",
                                  "the number would stay the traced input's")
            continue
        args = torch.fx.node.map_arg(n.args, info.__getitem__)
        kwargs = torch.fx.node.map_arg(n.kwargs, info.__getitem__)
        held = any(r.held for r in _refs(args, kwargs)) and kind not in torch_held.READERS
        if held and conv is None:  # unsupported, and the fallback takes the batch first
            if fallback:
                build.refuse_fallback(kind, n.name, None, "it reads a tensor whose batch axis a "
                                      "permute or reshape moved, and the fallback's call takes "
                                      "the batch first")
            else:
                build.refuse(kind, n.name)
            continue
        if held:
            module = gm.get_submodule(n.target) if n.op == "call_module" else None
            result, why = torch_held.convert(conv, Call(n.name, info[n].shape, build,
                                                        info[n].parts), kind, module, args,
                                             kwargs)
            if why is not None:
                build.refuse_fallback(kind, n.name, why, "npusim holds the tensor as a view")
            else:
                info[n] = result if isinstance(result, Parts) else \
                    dataclasses.replace(result, dtype=info[n].dtype)
            continue
        masks = [r.name for r in _refs(args, kwargs) if r.dtype == "bool"]
        if masks and kind not in MASK_READERS:
            build.refuse_fallback(kind, n.name, f"it reads {', '.join(masks)}, a bool mask (a "
                                  "comparison's result), which npusim carries as 1.0 and 0.0: "
                                  "torch.where, the logical ops, a comparison, a product, "
                                  ".float() and layout calls read one",
                                  "the mask would reach it as numbers")
            continue
        shape = info[n].shape
        result, why = _converted(conv, Call(n.name, shape, build, info[n].parts), args, kwargs)
        if why is not None and _pending(args, kwargs):  # a pad its reader cannot absorb: its
            args, kwargs = _padded(build, n.name, args, kwargs)  # own Pad node, and again
            result, why = _converted(conv, Call(n.name, shape, build, info[n].parts), args,
                                     kwargs)
        if conv is None or why is not None:
            if not fallback and (cannot := torch_fallback.cannot(
                    args, kwargs, shape, info[n].dtype)) is not None:
                build.refuse_fallback(kind, n.name, why, cannot)  # not offered the fallback
            elif not fallback:
                build.refuse(kind, n.name, why)
            elif (cannot := torch_fallback.node(build, gm, n, kind, args, kwargs, shape,
                                                info[n].dtype)) is not None:
                build.refuse_fallback(kind, n.name, why, cannot)
            continue
        if isinstance(result, Ref):  # a pass-through: its element type is the call's
            info[n] = dataclasses.replace(result, dtype=info[n].dtype)  # (mask.float())
            continue
        if isinstance(result, Parts):  # parts read by getitem
            info[n] = result
            continue
        build.place(n.name, result, [r.name for r in _refs(args, kwargs)], shape)
    return build


def _converted(conv, call: Call, args, kwargs):
    """(the converter's result, None), or (None, why it refused); (None, None) when there is
    no converter."""
    if conv is None:
        return None, None
    try:
        return conv(call, *args, **kwargs), None
    except (_Refusal, TypeError, LayerError) as e:
        return None, str(e)


def _pending(args, kwargs) -> bool:
    """Whether an argument is a tensor with a constant pad still pending (``F.pad``)."""
    return any(r.pad for r in _refs(args, kwargs))


def _padded(build: Lowering, reader: str, args, kwargs):
    """``args`` and ``kwargs`` with each pending pad made an IR ``Pad`` node of its own
    (named after its ``reader``): where the reader cannot absorb it (a zero pad before a
    max pool, YOLOv3-tiny's), the pad is a data move of its own."""
    count = iter(range(1, 1 << 30))

    def place(v):
        if not (isinstance(v, Ref) and v.pad):
            return v
        name = build.add(f"{reader}.pad{next(count)}", v.pad.op(), (v.name,), v.shape)
        return Ref(name, v.shape)

    return torch.fx.node.map_aggregate((args, kwargs), place)


def _returned_record(n) -> bool:
    """Whether fx node ``n`` makes the namedtuple or dataclass forward returns (its fields
    are the outputs: ``_output``), and nothing else reads it."""
    return n.op == "call_function" and _is_record(n.target) and all(
        u.op == "output" for u in n.users)


def _refuse_in_region(build: Lowering, gm, n, info: dict) -> None:
    """Without the fallback, refuse node ``n`` of a complex-valued region, offering the
    fallback, where the IR has no rule for it or its result is complex (``x * 1j``)."""
    kind, conv = kind_and_converter(gm, n)
    if conv is None:
        build.refuse(kind, n.name)
    elif info[n].dtype.startswith("complex"):
        build.refuse(kind, n.name, f"its result is {info[n].dtype}, which the IR's float32 "
                     "tensors do not carry")


def _complex_region(build: Lowering, gm, nodes: tuple, info: dict) -> None:
    """A complex-valued region (``torch_fallback.complex_regions``) as one fallback, or
    each of its nodes refused saying why it cannot be."""
    numbers = [a.name for n in nodes for a in n.all_input_nodes
               if isinstance(info[a], _ValueNumber)]
    cannot = (f"it reads {', '.join(numbers)}, a number taken from the input's values"
              if numbers else torch_fallback.region(build, gm, nodes, info, info[nodes[-1]].shape))
    if cannot is not None:
        for n in nodes:
            build.refuse_fallback(kind_and_converter(gm, n)[0], n.name, None,
                                  f"part of a complex-valued region: {cannot}")


def _refs(args, kwargs) -> list[Ref]:
    """The ``Ref`` arguments of a call, in order (lists such as ``torch.cat``'s included)."""
    found: list[Ref] = []
    torch.fx.node.map_aggregate((args, kwargs),
                                lambda v: found.append(v) if isinstance(v, Ref) else None)
    return found


def _output(gm, info: dict, name: str, build: Lowering) -> dict[str, str]:
    """What forward returns, as label -> IR node in order: one tensor (labelled by its
    node), a tuple or list (labels 'output0', 'output1'...) or a dict (its keys)."""
    (value,) = [n.args[0] for n in gm.graph.nodes if n.op == "output"]
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    value = _record_fields(value) or value
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, (tuple, list)):
        items = [(f"output{i}", v) for i, v in enumerate(value)]
    else:
        ref = _output_ref(value, info, name, "forward returns", build)
        return {ref.name: ref.name}
    if not items:
        raise ModelError(f"{name}: forward returns an empty {type(value).__name__}; npusim "
                         "networks return tensors computed from the input")
    return {label: _output_ref(v, info, name, f"output {label!r} of forward is", build).name
            for label, v in items}


def _record_fields(value) -> dict | None:
    """The fields, by name in order, of the namedtuple or dataclass that fx node ``value``
    makes (forward's ``return Output(logits=y, loss=None)``), those left None dropped (an
    output the module does not give, as a Hugging Face ``ModelOutput`` drops it); else None."""
    if not (isinstance(value, torch.fx.Node) and value.op == "call_function"
            and _is_record(value.target)):
        return None
    bound = inspect.signature(value.target).bind(*value.args, **value.kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if v is not None}


def _is_record(target) -> bool:
    """Whether ``target`` is a namedtuple or dataclass type."""
    return isinstance(target, type) and (dataclasses.is_dataclass(target) or (
        issubclass(target, tuple) and hasattr(target, "_fields")))


def _output_ref(value, info: dict, name: str, what: str, build: Lowering) -> Ref:
    """The ``Ref`` of one returned value, which must be a tensor computed from the input (a
    constant pad no reader absorbed made an IR ``Pad`` node)."""
    ref = info.get(value) if isinstance(value, torch.fx.Node) else None
    if isinstance(ref, Ref) and ref.pad:  # no reader absorbs it: a Pad node of its own
        ref = Ref(build.add(value.name, ref.pad.op(), (ref.name,), ref.shape), ref.shape)
    if isinstance(ref, Ref) and ref.held:
        node = ref.held.as_is(build, f"{value.name}_as_is")
        if node is None:
            raise ModelError(f"{name}: {what} a tensor of {ref.held.view.where}: an output's "
                             "first axis must be the batch or one other axis, not several "
                             "joined")
        ref = Ref(node, ref.shape)
    if isinstance(ref, Ref) and not ref.shape:
        raise ModelError(f"{name}: {what} a 0-d tensor (or a tuple of them); npusim imports "
                         "PyTorch outputs that keep the batch axis: keep a dimension "
                         "(y.mean((1, 2, 3)), keepdim=True)")
    if not isinstance(ref, Ref):
        kind = "a constant" if isinstance(value, torch.fx.Node) else type(value).__name__
        raise ModelError(f"{name}: {what} {kind}; npusim networks return tensors computed "
                         "from the input (one, or a flat tuple, list, dict, namedtuple or "
                         "dataclass of them)")
    return ref


def _example(example_input, name: str):
    x = torch.as_tensor(np.require(example_input, requirements="W")  # torch warns on read-only
                        if not isinstance(example_input, torch.Tensor)
                        else example_input).to(torch.float32)
    if x.ndim < 2:
        raise ModelError(f"{name}: example input of shape {tuple(x.shape)}: must be N x C x ...")
    return x


def from_torch(module, example_input, *, name: str | None = None,
               fallback: bool = False) -> Graph:
    """The ``Graph`` of a torch ``nn.Module`` traced with torch.fx on ``example_input``.

    Weights are copied (float32), batch norm is folded into the conv before it, and
    the module is run in eval mode (afterwards every submodule's ``training`` flag is
    as it was); a quantisation-aware-training model with its observers off (its scales
    stay as they are: ``torch_qat``). The graph's input shape is ``example_input``'s
    (N x C x H x W). A forward returning a tuple, list or dict of tensors gives a graph
    with several outputs, in order (``Graph.outputs``: labels 'output0', 'output1'..., the
    dict's keys, or a namedtuple's or dataclass's fields). Raises ``ModelError`` naming
    every unsupported call and parameter, with the list of supported ones; with
    ``fallback``, each such call is instead computed by torch itself (an ``ops.Fallback``
    node, costed as vector work). A TorchScript module (``torch.jit.script``, ``trace``) is
    imported through its ONNX export (``torch_programs``); a Python module holding one is
    refused. A ``torch.compile`` or data-parallel wrapper is the network it wraps
    (``unwrapped``).
    """
    if not isinstance(module, nn.Module):
        raise ModelError(f"from_torch: expected a torch nn.Module, got {type(module).__name__}")
    module = unwrapped(module)
    name = name or getattr(module, "original_name", type(module).__name__)
    x = _example(example_input, name)
    _check_float32(module, name)
    _check_hooks(module, name)
    if torch_programs.is_script(module):  # TorchScript: no Python for fx to trace
        with inference(module):
            _script_runs(module, x, name)
            return torch_programs.from_script(module, x, Path(name), fallback)
    torch_programs.refuse_script_submodules(module, name)
    with inference(module):
        return _imported(module, x, name, fallback)


_PARALLEL = (nn.DataParallel, nn.parallel.DistributedDataParallel)


def unwrapped(module):
    """The network a wrapper of it runs, with the same parameters: ``torch.compile``'s
    module (its ``_orig_mod``, the Python it compiles), ``nn.DataParallel``'s and
    ``DistributedDataParallel``'s ``module``; any other module as it is."""
    while True:
        dynamo = sys.modules.get("torch._dynamo.eval_frame")  # not loaded: nothing compiled
        if dynamo is not None and isinstance(module, dynamo.OptimizedModule):
            module = module._orig_mod
        elif isinstance(module, _PARALLEL):
            module = module.module
        else:
            return module


def _script_runs(module, x, name: str) -> None:
    """Refuse TorchScript ``module`` where its forward raises on ``x``."""
    try:
        with torch.no_grad():
            module(x)
    except Exception as e:  # noqa: BLE001  (the TorchScript interpreter's errors)
        raise ForwardFailed(f"{name}: running it on an input of shape {tuple(x.shape)} failed "
                            f"({torch_programs.reason(e)})") from None


@contextlib.contextmanager
def inference(module):
    """``module`` in eval mode with its fake-quantize observers off (a QAT model keeps its
    scales); afterwards each submodule's mode and observer as they were."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch_qat.observers_off(module):
            yield module
    finally:
        for m, training in modes:  # each submodule as it was: eval() set them all
            m.training = training


def _check_float32(module, name: str) -> None:
    """Refuse a module of floating parameters or buffers other than float32 (``.half()``,
    ``.double()``): it is traced on a float32 input, where it failed with a type mismatch
    that read as a wrong input shape."""
    for what, tensors in (("parameter", module.named_parameters()),
                          ("buffer", module.named_buffers())):
        for key, t in tensors:
            if t.is_floating_point() and t.dtype != torch.float32:
                raise ModelError(f"{name}: {what} {key!r} is {t.dtype}; npusim imports "
                                 "float32 modules: convert it with .float() first")


def _check_hooks(module, name: str) -> None:
    """Refuse a module whose forward hooks or pre-hooks (its own, or torch's global ones)
    would be lost: fx traces ``forward`` alone, so what a hook returns in place of an input
    or output would not reach the graph. An eager QAT model's output quantisers are
    ``torch_qat``'s, which follows them."""
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        raise ModelError(f"{name}: a global forward hook is registered "
                         "(register_module_forward_hook); npusim traces forward alone and "
                         "would lose what it returns: remove it (handle.remove()) to import")
    for key, m in module.named_modules():
        hooks = [h for h in m._forward_hooks.values()
                 if getattr(h, "__name__", "") != torch_qat.HOOK]
        for kind, found in (("forward pre-hook", m._forward_pre_hooks.values()),
                            ("forward hook", hooks)):
            for h in found:
                raise ModelError(
                    f"{name}: module {key or '(the network)'!r} ({type(m).__name__}) has a "
                    f"{kind} ({getattr(h, '__name__', type(h).__name__)}); npusim traces "
                    "forward alone and would lose what the hook returns: remove it "
                    "(handle.remove()) to import")


def _imported(module, x, name: str, fallback: bool) -> Graph:
    """``from_torch``'s graph of ``module`` (in eval mode) traced on ``x``."""
    gm = _trace(module, x, name)
    info = _record(gm, x, name)
    build = _convert(gm, info, fallback)
    if build.refused:
        raise build.refusal(name, supported_ops())
    return build.graph(tuple(x.shape), _output(gm, info, name, build), name, "PyTorch gives")


# ---- file.py:factory --------------------------------------------------------------------


def _load_file(path: Path):
    """Execute a user's python file as a module (its folder importable while it runs)."""
    unique = f"npusim_user_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(unique, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path}: not a python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # the user's file failed to import, or exited
        sys.modules.pop(unique, None)
        raise ModelError(f"{path}: importing it failed ({type(e).__name__}: {e})") from e
    finally:
        sys.path.remove(str(path.parent.resolve()))
    return module


def _input_shape(input_shape: Sequence[int] | None, spec: str) -> tuple[int, ...]:
    shape = tuple(DEFAULT_INPUT_SHAPE if input_shape is None else input_shape)
    if len(shape) < 2 or not all(isinstance(d, (int, np.integer)) and d >= 1 for d in shape):
        raise ModelError(f"{spec}: input_shape={shape}: must be positive integers N x C x H x W, "
                         "e.g. (1, 3, 224, 224)")
    return tuple(int(d) for d in shape)


def from_factory(spec: str, input_shape: Sequence[int] | None = None, *,
                 batch: int | None = None, fallback: bool = False) -> Graph:
    """The ``Graph`` of ``path/to/file.py:factory``: a function returning an ``nn.Module``.

    The file is imported, ``factory()`` is called with no arguments, the module is
    put in eval mode and traced on a seeded random input of ``input_shape``
    (default 1 x 3 x 224 x 224), its N replaced by ``batch`` if given. The graph is named
    after the factory; ``fallback`` as for ``from_torch``. A forward that fails on the
    default shape is refused with the advice to give the network's own.
    """
    return factory_model(spec, input_shape, batch=batch, fallback=fallback)[0]


def factory_model(spec: str, input_shape: Sequence[int] | None = None, *,
                  batch: int | None = None, fallback: bool = False) -> tuple[Graph, nn.Module]:
    """``from_factory``'s graph and the module it was imported from (what ``--check``
    runs: another call of the factory may make other weights)."""
    file_part, sep, func = spec.rpartition(":")
    if not sep or not file_part.endswith(".py") or not func:
        raise ModelError(f"{spec!r}: expected path/to/file.py:factory")
    path = Path(file_part)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    shape = _input_shape(input_shape, spec)
    net = unwrapped(_call_factory(_load_file(path), func, path, spec)).eval()
    return _at_shape(net, func, shape, input_shape is None, batch, fallback), net


def script_model(path: Path, input_shape: Sequence[int] | None = None, *,
                 batch: int | None = None, fallback: bool = False) -> tuple[Graph, nn.Module]:
    """The ``Graph`` of the TorchScript archive ``path`` (``torch.jit.save``), imported as
    ``from_factory`` imports a factory's module, and the module (what ``--check`` runs)."""
    shape = _input_shape(input_shape, str(path))
    module = torch_programs.load_script(path)
    return _at_shape(module, str(path), shape, input_shape is None, batch, fallback), module


def program_model(path: Path, input_shape: Sequence[int] | None = None, *,
                  batch: int | None = None, fallback: bool = False) -> tuple[Graph, nn.Module]:
    """The ``Graph`` of the torch.export program ``path`` (``torch.export.save``), at its
    own input shape (``input_shape``, ``batch``: what it leaves dynamic, as for an ONNX
    file), and the program as a module (what ``--check`` runs)."""
    program = torch_programs.load_program(path)
    graph = torch_programs.from_program(program, path, input_shape, batch=batch,
                                        fallback=fallback)
    return graph, torch_programs.ProgramModule(program)


def _at_shape(net, name: str, shape: tuple[int, ...], default: bool, batch: int | None,
              fallback: bool) -> Graph:
    """``from_torch`` of ``net`` on a seeded random input of ``shape`` (its N replaced by
    ``batch`` if given); where the forward fails at the ``default`` shape, the advice to
    give the network's own."""
    if batch is not None:
        shape = (batch, *shape[1:])
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    try:
        return from_torch(net, x, name=name, fallback=fallback)
    except ForwardFailed as e:
        if not default:
            raise
        raise ForwardFailed(f"{e}; that is the default input shape: give the network's own "
                            "(input_shape=, --input-shape N,C,H,W)") from e


def module_outputs(module: nn.Module, x: np.ndarray) -> list[np.ndarray]:
    """``module``'s own outputs on ``x`` (eval mode, no observer updating a QAT model's
    scales; each submodule's mode restored after), in the order of the graph's outputs
    (``_output``: one tensor, a tuple or list in order, a dict's values in order)."""
    with inference(module), torch.no_grad():
        out = module(torch.from_numpy(np.array(x, np.float32)))
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        out = {f.name: getattr(out, f.name) for f in dataclasses.fields(out) if f.init}
    elif isinstance(out, tuple) and hasattr(out, "_fields"):
        out = out._asdict()
    if isinstance(out, dict):  # a record's fields left None are no outputs (_record_fields)
        out = [v for v in out.values() if v is not None]
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    return [t.detach().cpu().to(torch.float64).numpy() for t in out]


def _call_factory(module, func: str, path: Path, spec: str):
    """``module.func()``, which must exist and return an ``nn.Module``."""
    factory = getattr(module, func, None)
    if not callable(factory):
        names = sorted(k for k, v in vars(module).items()
                       if callable(v) and getattr(v, "__module__", None) == module.__name__)
        raise ModelError(f"{path}: no function {func!r}; functions defined there: "
                         f"{', '.join(names) or 'none'}")
    try:
        net = factory()
    except (Exception, SystemExit) as e:  # the user's factory failed, or exited
        raise ModelError(f"{spec}: calling {func}() failed ({type(e).__name__}: {e})") from e
    if not isinstance(net, nn.Module):
        raise ModelError(f"{spec}: {func}() returned {type(net).__name__}, not a torch nn.Module")
    return net
