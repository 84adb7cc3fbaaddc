"""Where networks come from: the zoo, PyTorch, ONNX, SCALE-Sim topology CSVs.

``load_model`` turns what a user names on the command line into either a
``Graph`` (real weights, real arithmetic) or, for a topology CSV, a list of
``ConvLayer`` shapes (a shape-only, dense run).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelError
from ..ir import ConvLayer, Graph


def load_model(spec: str, *, batch: int = 1, input_shape: tuple[int, ...] | None = None,
               seed: int = 0) -> Graph | list[ConvLayer]:
    """A network from a zoo name, ``file.csv`` (SCALE-Sim topology), ``file.onnx``, or
    ``file.py:factory`` (a function returning a torch ``nn.Module``). ``input_shape`` sets an
    imported model's input, or the side of a zoo model's square input where it has one."""
    path = Path(spec.split(":")[0] if ".py:" in spec else spec)
    if path.suffix in (".csv", ".onnx", ".py") and not path.is_file():
        raise ModelError(f"{path}: no such file")
    if path.suffix == ".csv":
        from .topology import read_topology

        return [layer.with_batch(batch) for layer in read_topology(path)]
    if path.suffix == ".onnx":
        from .onnx_import import from_onnx

        return from_onnx(path, input_shape=input_shape).with_batch(batch)
    if path.suffix == ".py":
        from .torch_import import from_factory

        return from_factory(spec, input_shape=input_shape).with_batch(batch)
    from . import zoo

    size = input_shape[-1] if input_shape else None  # zoo inputs are square: N, C, S, S
    return zoo.build(spec, batch=batch, seed=seed, size=size)
