"""PyTorch networks saved as programs rather than as Python, imported through their ONNX
export: TorchScript (a module ``torch.jit.script`` or ``torch.jit.trace`` made, a
``torch.jit.save`` archive ``model.pt``) and torch.export's programs (``torch.export.save``,
``model.pt2``).

Neither holds its code as Python: torch.fx cannot trace TorchScript (its methods take
tensors, not fx's proxies), and an exported program is a graph of ATen ops, not of the
torch calls the importer converts. PyTorch's own ONNX exporters read both (the TorchScript
exporter the first, the dynamo exporter the second), and npusim's ONNX importer reads what
they write. So such a network is exported in memory and imported as an ONNX file is, named
by the file or factory it came from; ``--check`` compares it with the program itself.
Deployment pipelines hand out these files, and unlike a ``torch.save`` of weights they hold
the code that runs them.

A TorchScript module is exported at its example input's shape. An exported program holds
its input's shape (a dimension exported as dynamic stays so until the ONNX importer fixes
it: ``input_shape``, ``batch``, as for an ONNX file).

A Python module holding a TorchScript submodule is refused naming it: fx cannot trace into
it and the exporter's tracing cannot call it (it is not part of its trace); a TorchScript
function called from Python (``@torch.jit.script def f(x)``) is traced as the Python it was
compiled from (``functions_as_python``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path

import torch

from ..errors import ModelError
from ..ir import Graph

SCRIPT_OPSET = 17  # the TorchScript exporter's newest well-tested opset


def is_script_archive(path: Path) -> bool:
    """Whether ``path`` is a ``torch.jit.save`` archive: a zip holding TorchScript code
    (``<name>/code/...``), not a ``torch.save`` of tensors or a pickled module."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/code/" in member for member in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def load_script(path: Path) -> torch.jit.ScriptModule:
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

    buffer = io.BytesIO()
    with _exporting(path, "onnx"):
        torch.onnx.export(module, (x,), buffer, dynamo=False, opset_version=SCRIPT_OPSET,
                          input_names=["input"])
    import onnx

    return from_onnx_model(onnx.load_from_string(buffer.getvalue()), path, tuple(x.shape),
                           fallback=fallback)


def load_program(path: Path) -> torch.export.ExportedProgram:
    """The program ``torch.export.save`` saved in ``path``."""
    try:
        with warnings.catch_warnings(), _quiet("torch.export"):
            warnings.simplefilter("ignore")
            return torch.export.load(str(path))
    except Exception as e:  # noqa: BLE001  (torch raises many types on a bad archive)
        raise ModelError(f"{path}: cannot load it as a torch.export program "
                         f"({type(e).__name__}: {reason(e)})") from None


def from_program(program: torch.export.ExportedProgram, path: Path,
                 input_shape: Sequence[int] | None = None, *, batch: int | None = None,
                 fallback: bool = False) -> Graph:
    """The ``Graph`` of exported ``program``: its export by PyTorch's dynamo ONNX exporter,
    imported (``onnx_import.from_onnx_model``, where ``input_shape`` and ``batch`` fix what
    the program leaves dynamic); ``path`` names it in messages."""
    from .onnx_import import from_onnx_model

    fixed = _fixed_batch(program)
    if batch is not None and fixed is not None and fixed != batch:
        raise ModelError(f"{path}: the program fixes its batch to {fixed}, so batch (--batch) "
                         f"{batch} cannot be run; export it with a dynamic batch "
                         "(torch.export.export(..., dynamic_shapes=({0: "
                         "torch.export.Dim('batch')},)))")
    with _exporting(path, "onnxscript"):
        model = torch.onnx.export(program, dynamo=True, verbose=False).model_proto
    return from_onnx_model(model, path, input_shape, batch=batch, fallback=fallback)


def _fixed_batch(program: torch.export.ExportedProgram) -> int | None:
    """The batch ``program``'s first input is exported with where it is fixed; None where
    it was exported as dynamic (a symbol) or the program has no tensor input (which the
    ONNX importer refuses)."""
    users = {spec.arg.name for spec in program.graph_signature.input_specs
             if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT}
    shapes = [n.meta["val"].shape for n in program.graph.nodes
              if n.op == "placeholder" and n.name in users
              and isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].ndim]
    return shapes[0][0] if shapes and isinstance(shapes[0][0], int) else None


class ProgramModule(torch.nn.Module):
    """An exported program run as a module (what ``--check`` compares with). The program
    is fixed in the mode it was exported in; its module (``program.module()``) refuses
    ``eval()``, so it is kept out of this module's children and ``train`` leaves it be."""

    def __init__(self, program: torch.export.ExportedProgram):
        super().__init__()
        object.__setattr__(self, "run", program.module())

    def forward(self, x):
        return self.run(x)


@contextlib.contextmanager
def _exporting(path: Path, package: str):
    """A PyTorch ONNX export of ``path`` that needs ``package`` (``onnx``, or ``onnxscript``
    for the dynamo exporter): quiet (its progress lines, its notices of being the older
    exporter or of torchvision's ops it cannot register), and refused with its reason if it
    fails or ``package`` is missing."""
    try:
        __import__(package)
    except ImportError as e:  # an optional extra
        raise ModelError(f"{path}: importing it goes through PyTorch's ONNX export, which "
                         f"needs the {package} package: pip install 'npusim[onnx]'") from e
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                _quiet("torch.onnx"):
            warnings.simplefilter("ignore")
            yield
    except Exception as e:  # noqa: BLE001  (the exporters raise many types)
        raise ModelError(f"{path}: PyTorch's ONNX exporter cannot export it "
                         f"({type(e).__name__}: {reason(e)})") from None


@contextlib.contextmanager
def _quiet(logger: str):
    """Logger ``logger`` (torch's) shows errors alone while it lasts: what torch logs as
    warnings on the way to an exception npusim reports in one line (a traceback), or of
    no concern to the user (torchvision's ops the exporter cannot register)."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


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
