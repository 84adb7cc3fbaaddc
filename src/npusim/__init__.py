"""npusim: run convolutional networks on a modelled neural processing unit.

Computes the real outputs with the accelerator's own arithmetic and reports what
the hardware would spend (cycles, utilisation, SRAM and DRAM bytes, energy).
"""

from .arch import Arch, load_arch, presets
from .errors import ConfigError, InputError, LayerError, ModelError, NpusimError
from .ir import ConvLayer, Graph, GraphBuilder
from .simulate import SimResult, conv2d, simulate, simulate_shapes
from .stats import LayerStats

__version__ = "0.1.0"

__all__ = ["Arch", "ConfigError", "ConvLayer", "Graph", "GraphBuilder", "InputError",
           "LayerError", "LayerStats", "ModelError", "NpusimError", "SimResult", "conv2d",
           "from_factory", "from_onnx", "from_torch", "load_arch", "presets", "simulate",
           "simulate_shapes"]

_IMPORTERS = {"from_torch": "torch_import", "from_factory": "torch_import",
              "from_onnx": "onnx_import"}


def __getattr__(name: str):
    """``npusim.from_torch`` / ``from_factory`` / ``from_onnx``, imported on first use (torch
    and onnx are optional extras, not loaded with npusim)."""
    if name not in _IMPORTERS:
        raise AttributeError(f"module 'npusim' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".frontends.{_IMPORTERS[name]}", __name__), name)
