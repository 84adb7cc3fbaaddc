"""Quantisation-aware-training models (``torch.ao.quantization``): what the importer traces as
one call, and each QAT module as IR ops.

A model prepared for QAT (``prepare_qat`` in eager mode, ``prepare_qat_fx`` in FX mode)
holds fake-quantize modules (``FakeQuantize`` and its kin): one per weight, inside the
QAT convs and linears (``weight_fake_quant``), and one per quantised activation, called
in FX mode as a module of the graph (``activation_post_process_0``) and in eager mode by a
forward hook that ``prepare_qat`` put on the module whose output it quantises. fx does not
trace hooks, nor can it trace into a fake-quantize module, so the tracer (``Tracer``)
keeps each of them, and every module with such a hook, as one call, and:

- a fake-quantize module of an activation becomes the IR's ``FakeQuant`` (its scale, zero
  point, integer range and channel axis), or passes its input through when its fake
  quantisation is switched off;
- a QAT conv or linear becomes the float conv or linear of its fake-quantised weight (as
  its own ``weight_fake_quant`` computes it); a conv fused with batch norm
  (``ConvBn2d``, ``ConvBnReLU2d``) convolves with the fake-quantised weight scaled by
  ``gamma / sqrt(running_var + eps)``, as the module does, and its bias folds the rest of
  the normalisation in; a fused ReLU follows as its own node;
- an eager module's hooked fake-quantize follows the module's own ops as a ``FakeQuant``
  node; ``QuantStub`` and ``DeQuantStub`` pass their input through.

The model is run and read with its observers switched off (``observers_off``), so that the
scales it holds are the ones imported, and it is left as it was.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import OrderedDict

import torch
from torch.ao.nn import qat as nnqat
from torch.ao.nn.intrinsic import qat as nniqat
from torch.ao.quantization import DeQuantStub, FakeQuantizeBase, QuantStub
from torch.ao.quantization.fake_quantize import (
    FakeQuantize,
    FixedQParamsFakeQuantize,
    FusedMovingAvgObsFakeQuantize,
)
from torch.ao.quantization.observer import ObserverBase

from .. import ops
from . import torch_inplace, torch_programs
from .lowering import Refusal as _Refusal
from .torch_ops import Ref, computed, conv_module, linear

_PER_CHANNEL = (torch.per_channel_symmetric, torch.per_channel_affine)
HOOK = "_observer_forward_hook"  # what eager prepare_qat registers to quantise an output


def output_quantizer(module) -> FakeQuantizeBase | None:
    """The fake-quantize module an eager QAT hook applies to ``module``'s output, if any."""
    if not any(getattr(h, "__name__", "") == HOOK for h in module._forward_hooks.values()):
        return None
    return getattr(module, "activation_post_process", None)


class Tracer(torch.fx.Tracer):
    """fx's tracer that also keeps as one call each module of ``MODULES`` (fx would trace
    into a fake-quantize module, which it cannot, and into the fused QAT convs, which are
    ``nn.Sequential``), each observer (refused by name: a model prepared for post-training
    calibration) and each module an eager QAT hook quantises (traced through, its hook
    would be lost). ``trace`` traces TorchScript functions as their Python
    (``torch_programs.functions_as_python``)."""

    def proxy(self, node):  # ``y += 1`` recorded as the in-place call it is
        return torch_inplace.Proxy(node, self)

    def is_leaf_module(self, m, module_qualified_name: str) -> bool:
        return (super().is_leaf_module(m, module_qualified_name) or type(m) in MODULES
                or isinstance(m, ObserverBase) or output_quantizer(m) is not None)


def trace(module, tracer: Tracer | None = None) -> torch.fx.GraphModule:
    """``torch.fx.symbolic_trace`` with ``Tracer``'s leaves (or ``tracer``'s, a ``Tracer``
    of its own). A module that is itself a leaf (a bare ``nn.BatchNorm2d`` or
    ``nn.ConvTranspose2d``), which fx would trace into as the root, down to its Python's
    branches, is traced as the one layer of a container, named as its class is
    (``batchnorm2d``). A TorchScript function it calls is traced as the Python it was
    compiled from. Forward's arguments after the input that have defaults
    (``mask=None``, ``return_loss=False``) are traced at their defaults (``defaults``)."""
    tracer = tracer or Tracer()
    if tracer.is_leaf_module(module, ""):
        module = torch.nn.Sequential(OrderedDict([(type(module).__name__.lower(), module)]))
    with torch_programs.functions_as_python():
        graph = tracer.trace(module, concrete_args=defaults(module) or None)
    return torch.fx.GraphModule(tracer.root, graph, type(module).__name__)


def defaults(module) -> dict:
    """``module.forward``'s arguments after its first that have a default of a plain kind
    (None, a bool, number or string), by name: the network is imported as it runs given
    its input alone. fx would trace ``if mask is not None:`` with a proxy for ``mask`` (a
    proxy is not None) and take a branch the module never takes."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):  # a builtin forward: no signature to read
        return {}
    return {p.name: p.default for p in parameters[1:]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and (p.default is None or isinstance(p.default, (bool, int, float, str)))}


@contextlib.contextmanager
def observers_off(module):
    """``module`` with every fake-quantize module's observer switched off (running the model
    then leaves its scales as they are), each switched back as it was afterwards."""
    quantizers = [m for m in module.modules() if isinstance(m, FakeQuantizeBase)]
    states = [int(m.observer_enabled[0]) for m in quantizers]
    for m in quantizers:
        m.disable_observer()
    try:
        yield
    finally:
        for m, on in zip(quantizers, states, strict=True):
            m.observer_enabled[0] = on


def fake_quant_op(m: FakeQuantizeBase) -> ops.FakeQuant | None:
    """The IR op of fake-quantize module ``m`` (None when its fake quantisation is off):
    scale and zero point per tensor, or per index of its ``ch_axis``; rounded by the
    reciprocal of the scale, as PyTorch's kernels round."""
    if not int(m.fake_quant_enabled[0]):
        return None
    if m.qscheme not in (torch.per_tensor_affine, torch.per_tensor_symmetric, *_PER_CHANNEL):
        raise _Refusal(f"qscheme={m.qscheme}: the IR's FakeQuant has integer zero points, "
                       "per tensor or per channel")
    return ops.FakeQuant(m.scale.detach().cpu().numpy(), m.zero_point.detach().cpu().numpy(),
                         int(m.quant_min), int(m.quant_max),
                         int(m.ch_axis) if m.qscheme in _PER_CHANNEL else 1, by_reciprocal=True)


def fake_quantized(quantizer, weight: torch.Tensor) -> torch.Tensor:
    """``weight`` through a QAT module's ``weight_fake_quant``, as its forward computes it."""
    with torch.no_grad():
        return quantizer(weight.detach())


def then(c, x: Ref, result, *after: ops.Op):
    """``result`` (a converter's, reading ``x``) as a node of its own, then each op of
    ``after`` reading the one before: the last is the node's own."""
    name = c.build.place(_fresh(c), result, [x.name])
    for op in after[:-1]:
        name = c.build.add(_fresh(c), op, (name,))
    return after[-1], (name,)


def _fresh(c) -> str:
    """The first of ``<node>.1``, ``<node>.2``... that names no IR node yet (a node's
    helper nodes: fx names never hold a dot). The helpers made while converting the node
    are the last nodes, each named from it: only those are looked at."""
    taken = set()
    for node in reversed(c.build.nodes):
        if not node.name.startswith(f"{c.name}."):
            break
        taken.add(node.name)
    return next(f"{c.name}.{i}" for i in range(1, len(taken) + 2)
                if f"{c.name}.{i}" not in taken)


def fake_quantize(c, m, x):
    """A fake-quantize module of an activation (computed from the network input)."""
    computed(x)
    op = fake_quant_op(m)
    return x if op is None else op


def qat_conv(c, m, x):
    """``nnqat.Conv2d`` and ``nniqat.ConvReLU2d``: the conv of the fake-quantised weight."""
    result = conv_module(c, m, computed(x, 4), fake_quantized(m.weight_fake_quant, m.weight))
    return then(c, x, result, ops.Relu()) if type(m) is nniqat.ConvReLU2d else result


def qat_conv_bn(c, m, x):
    """``nniqat.ConvBn2d`` and ``ConvBnReLU2d`` at inference (batch norm on its running
    statistics): the fake-quantised weight scaled by ``gamma / std`` and a bias holding the
    rest of the normalisation, ``(bias - mean) * gamma / std + beta``."""
    bn = m.bn
    if bn.running_var is None or bn.weight is None:
        raise _Refusal("its batch norm has no running statistics or no affine weight; the "
                       "module itself needs both")
    scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
    weight = fake_quantized(m.weight_fake_quant, m.weight.detach() * scale.reshape(-1, 1, 1, 1))
    bias = 0 if m.bias is None else m.bias.detach()
    bias = (bias - bn.running_mean) * scale + bn.bias.detach()
    result = conv_module(c, m, computed(x, 4), weight, bias)
    return then(c, x, result, ops.Relu()) if type(m) is nniqat.ConvBnReLU2d else result


def qat_linear(c, m, x):
    """``nnqat.Linear`` and ``nniqat.LinearReLU``: the linear of the fake-quantised weight."""
    result = linear(c, x, fake_quantized(m.weight_fake_quant, m.weight), m.bias)
    return then(c, x, result, ops.Relu()) if type(m) is nniqat.LinearReLU else result


def with_output_quantizer(convert, module):
    """``convert`` (a module's converter) followed by the fake-quantize module an eager QAT
    hook applies to the module's output (``convert`` itself when there is none)."""
    quantizer = output_quantizer(module)
    if quantizer is None or convert is None:  # no hook, or a module the IR has no rule for
        return convert
    if not isinstance(quantizer, FakeQuantizeBase):
        def refuse(c, *args, **kwargs):
            raise _Refusal(f"its output goes to a {type(quantizer).__name__} (a model "
                           "prepared for post-training calibration); npusim imports QAT "
                           "fake-quantize modules, or the float model")
        return refuse

    def converted(c, x, *args, **kwargs):
        result = convert(c, x, *args, **kwargs)
        op = fake_quant_op(quantizer)
        if op is None:
            return result
        if isinstance(result, Ref):  # a pass-through (a stub): the quantiser reads its input
            return op, (result.name,)
        return then(c, x, result, op)
    return converted


MODULES = {
    **{cls: fake_quantize
       for cls in (FakeQuantize, FusedMovingAvgObsFakeQuantize, FixedQParamsFakeQuantize)},
    **{cls: lambda c, m, x: computed(x) for cls in (QuantStub, DeQuantStub)},
    nnqat.Conv2d: qat_conv, nniqat.ConvReLU2d: qat_conv,
    nniqat.ConvBn2d: qat_conv_bn, nniqat.ConvBnReLU2d: qat_conv_bn,
    nnqat.Linear: qat_linear, nniqat.LinearReLU: qat_linear,
}
