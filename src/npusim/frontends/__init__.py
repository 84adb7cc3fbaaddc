"""Where networks come from: the zoo, PyTorch, ONNX, SCALE-Sim topology CSVs.

``load_model`` turns what a user names on the command line into either a
``Graph`` (real weights, real arithmetic) or, for a topology CSV, a list of
``ConvLayer`` shapes (a shape-only, dense run).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelError
from ..ir import ConvLayer, Graph

# SCALE-Sim's public topology CSVs, shipped with npusim: ``Resnet18.csv`` and the like are
# found here when no such file exists where the user runs npusim.
TOPOLOGIES = Path(__file__).resolve().parent.parent / "data" / "topologies"


def shipped_topologies() -> list[str]:
    """The file names of the SCALE-Sim topology CSVs that npusim ships, sorted."""
    return sorted(p.name for p in TOPOLOGIES.glob("*.csv"))


def model_path(spec: str) -> Path:
    """The file a model ``spec`` names: the path as given, or for a bare ``NAME.csv`` that
    does not exist, the shipped SCALE-Sim topology of that name. A zoo name comes back as is."""
    path = Path(spec.split(":")[0] if ".py:" in spec else spec)
    if path.suffix not in (".csv", ".onnx", ".py") or path.is_file():
        return path
    bare_csv = path.suffix == ".csv" and path.name == spec
    if bare_csv and (TOPOLOGIES / spec).is_file():
        return TOPOLOGIES / spec
    hint = (f" (nor a SCALE-Sim topology shipped with npusim: {', '.join(shipped_topologies())})"
            if bare_csv else "")
    raise ModelError(f"{path}: no such file{hint}")


def load_model(spec: str, *, batch: int = 1, input_shape: tuple[int, ...] | None = None,
               seed: int = 0) -> Graph | list[ConvLayer]:
    """A network from a zoo name, ``file.csv`` (SCALE-Sim topology, or the name of one npusim
    ships), ``file.onnx``, or ``file.py:factory`` (a function returning a torch ``nn.Module``).
    ``input_shape`` sets an imported model's input, or the side of a zoo model's square input
    where it has one."""
    path = model_path(spec)
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
