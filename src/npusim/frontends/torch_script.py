"""TorchScript networks: a ``torch.jit.save`` archive (``model.pt``), or a module made by
``torch.jit.script`` or ``torch.jit.trace``, imported through their ONNX export.

A TorchScript module holds its code as TorchScript, not Python: torch.fx cannot trace it
(its methods take tensors, not fx's proxies), but PyTorch's TorchScript-based ONNX exporter
reads that code, and npusim's ONNX importer reads what it writes. So such a network is
exported at its example input's shape, in memory, and imported as an ONNX file is, named by
the file or factory it came from; ``--check`` compares it with the TorchScript module
itself. Deployment pipelines (``torch.jit.save`` of a scripted or traced model) give these
archives, and unlike a ``torch.save`` of weights they hold the code that runs them.

A Python module holding a TorchScript submodule is refused naming it: fx cannot trace into
it and the exporter's tracing cannot call it (it is not part of its trace); a TorchScript
function called from Python (``@torch.jit.script def f(x)``) is traced as the Python it was
compiled from (``torch_qat.Tracer``).
"""

from __future__ import annotations

import contextlib
import io
import warnings
import zipfile
from pathlib import Path

import torch

from ..errors import ModelError
from ..ir import Graph

OPSET = 17  # the TorchScript exporter's newest well-tested opset


def is_archive(path: Path) -> bool:
    """Whether ``path`` is a ``torch.jit.save`` archive: a zip holding TorchScript code
    (``<name>/code/...``), not a ``torch.save`` of tensors or a pickled module."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/code/" in member for member in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def load(path: Path) -> torch.jit.ScriptModule:
    """The TorchScript module saved in archive ``path``, on the CPU, in eval mode."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript's, not the user's
            return torch.jit.load(str(path), map_location="cpu").eval()
    except Exception as e:  # noqa: BLE001  (TorchScript raises RuntimeError with C++ text)
        raise ModelError(f"{path}: cannot load it as TorchScript ({reason(e)})") from None


def is_script(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a TorchScript module (scripted or traced)."""
    return isinstance(module, torch.jit.ScriptModule)


def refuse_script_submodules(module: torch.nn.Module, name: str) -> None:
    """Refuse a Python module holding a TorchScript submodule, naming the first."""
    inner = next((path for path, m in module.named_modules() if path and is_script(m)), None)
    if inner is not None:
        raise ModelError(f"{name}: submodule {inner!r} is a TorchScript module (torch.jit.script "
                         "or trace) inside a Python one; neither torch.fx nor the ONNX exporter "
                         "traces through it: give the Python module it was made from, or the "
                         "whole network scripted (torch.jit.script(net))")


def from_script(module: torch.jit.ScriptModule, x: torch.Tensor, path: Path,
                fallback: bool = False) -> Graph:
    """The ``Graph`` of TorchScript ``module`` at input ``x``'s shape: its ONNX export,
    imported (``onnx_import.from_onnx_model``); ``path`` names it in messages."""
    from .onnx_import import from_onnx_model

    return from_onnx_model(exported(module, x, path), path, tuple(x.shape), fallback=fallback)


def exported(module: torch.jit.ScriptModule, x: torch.Tensor, path: Path):
    """``module``'s ONNX ModelProto, exported by PyTorch's TorchScript exporter at ``x``'s
    shape; an export that fails is refused with its reason."""
    try:
        import onnx
    except ImportError as e:  # onnx is an optional extra
        raise ModelError(f"{path}: importing TorchScript goes through ONNX, which needs the "
                         "onnx package: pip install 'npusim[onnx]'") from e
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notice that it is the older one
            torch.onnx.export(module, (x,), buffer, dynamo=False, opset_version=OPSET,
                              input_names=["input"])
    except Exception as e:  # noqa: BLE001  (the exporter raises many types)
        raise ModelError(f"{path}: PyTorch's ONNX exporter cannot export it "
                         f"({type(e).__name__}: {reason(e)})") from None
    return onnx.load_from_string(buffer.getvalue())


@contextlib.contextmanager
def functions_as_python():
    """While it lasts, a TorchScript function (``@torch.jit.script def f``) called with
    torch.fx's proxies runs as the Python it was compiled from, which ``torch.jit.script``
    keeps for ``torch.compile`` to inline (``_torchdynamo_inline``), so fx traces into it;
    called with tensors, it runs as TorchScript."""
    compiled = torch.jit.ScriptFunction.__call__

    def call(function, *args, **kwargs):
        python = getattr(function, "_torchdynamo_inline", None)
        if python is not None and _holds_proxy((args, kwargs)):
            return python(*args, **kwargs)
        return compiled(function, *args, **kwargs)

    torch.jit.ScriptFunction.__call__ = call
    try:
        yield
    finally:
        torch.jit.ScriptFunction.__call__ = compiled


def _holds_proxy(args) -> bool:
    """Whether a (nested) argument is a torch.fx proxy."""
    found = []
    torch.fx.node.map_aggregate(args, lambda a: found.append(isinstance(a, torch.fx.Proxy)))
    return any(found)


def reason(e: Exception) -> str:
    """The line of ``e``'s message that says what went wrong: TorchScript's interpreter
    ends its message with the exception the code raised, after the code's traceback; its
    compiler and loader begin theirs with it, before the code they point at."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    line = lines[-1] if lines[0].startswith("The following operation failed") else lines[0]
    return line.rstrip(":")
