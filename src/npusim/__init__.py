"""npusim: run convolutional networks on a modelled neural processing unit.

Computes the real outputs with the accelerator's own arithmetic and reports what
the hardware would spend (cycles, utilisation, SRAM and DRAM bytes, energy).
"""

from .arch import Arch, load_arch, presets
from .errors import ConfigError, InputError, LayerError, ModelError, NpusimError
from .ir import ConvLayer, Graph, GraphBuilder
from .simulate import SimResult, conv2d, simulate
from .stats import LayerStats

__version__ = "0.1.0"

__all__ = ["Arch", "ConfigError", "ConvLayer", "Graph", "GraphBuilder", "InputError",
           "LayerError", "LayerStats", "ModelError", "NpusimError", "SimResult", "conv2d",
           "load_arch", "presets", "simulate"]
