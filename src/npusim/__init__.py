"""npusim: run convolutional networks on a modelled neural processing unit.

Computes the real outputs with the accelerator's own arithmetic and reports what
the hardware would spend (cycles, utilisation, SRAM and DRAM bytes, energy).

Every name below is imported on first use (``npusim.lazy``): ``import npusim`` loads
neither numpy nor the machines, so commands that need neither start fast.
"""

from .lazy import lazy_exports

__version__ = "0.1.0"

__all__ = lazy_exports(__name__, {
    ".arch": ("Arch", "load_arch", "presets"),
    ".errors": ("ConfigError", "InputError", "LayerError", "ModelError", "NpusimError"),
    ".ir": ("ConvLayer", "Graph", "GraphBuilder"),
    ".simulate": ("SimResult", "conv2d", "simulate", "simulate_shapes"),
    ".stats": ("LayerStats",),
    ".frontends.torch_import": ("from_factory", "from_torch"),  # torch: an optional extra
    ".frontends.onnx_import": ("from_onnx",),  # onnx: an optional extra
})
