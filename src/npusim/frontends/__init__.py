"""Where networks come from: the zoo, PyTorch, ONNX, SCALE-Sim topology CSVs.

``load_model`` turns what a user names on the command line into either a
``Graph`` (real weights, real arithmetic) or, for a topology CSV, a list of
``ConvLayer`` shapes (a shape-only, dense run).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import LayerError, ModelError

if TYPE_CHECKING:  # the IR imports numpy, which the zoo's listing does not need
    from ..ir import ConvLayer, Graph

# SCALE-Sim's public topology CSVs, shipped with npusim: ``Resnet18.csv`` and the like are
# found here when no such file exists where the user runs npusim.
TOPOLOGIES = Path(__file__).resolve().parent.parent / "data" / "topologies"


def shipped_topologies() -> list[str]:
    """The file names of the SCALE-Sim topology CSVs that npusim ships, sorted."""
    return sorted(p.name for p in TOPOLOGIES.glob("*.csv"))


def kind(path: str | Path) -> str:
    """What a model file is by its extension, in lower case (``CONV.ONNX`` is ``.onnx``)."""
    return Path(path).suffix.lower()


# other frameworks' model files, by extension: what each is (npusim reads none of them)
PYTORCH_FILES = {".pt": "a PyTorch file", ".pth": "a PyTorch file",
                 ".pt2": "a PyTorch exported program", ".ckpt": "a checkpoint"}
OTHER_FILES = {".tflite": "a TensorFlow Lite model", ".pb": "a TensorFlow graph",
               ".h5": "a Keras model", ".keras": "a Keras model",
               ".caffemodel": "Caffe weights", ".prototxt": "a Caffe network",
               ".mlmodel": "a Core ML model", ".pdmodel": "a PaddlePaddle model"}
READ = "a zoo name, a .onnx, a .csv, a TorchScript .pt, a .pt2 or file.py:factory"
TORCHSCRIPT_FILES = (".pt", ".pth")  # torch.jit.save's archives, told from torch.save's
PROGRAM_FILE = ".pt2"  # torch.export.save's programs


def _program(path: Path) -> bool:
    """Whether ``path`` is a file of a program npusim reads: a ``.pt2``, or a ``.pt`` or
    ``.pth`` that is a TorchScript archive (``torch_programs.is_script_archive``)."""
    if kind(path) == PROGRAM_FILE:
        return path.is_file()
    if kind(path) not in TORCHSCRIPT_FILES or not path.is_file():
        return False
    from .torch_programs import is_script_archive

    return is_script_archive(path)


def model_path(spec: str) -> Path:
    """The file a model ``spec`` names: the path as given, or for a bare ``NAME.csv`` that
    does not exist, the shipped SCALE-Sim topology of that name. A zoo name comes back as is;
    another framework's model file, or a file or folder of no kind npusim reads, is refused
    saying what to give instead."""
    path = Path(spec.split(":")[0] if ".py:" in spec else spec)
    if _program(path):
        return path
    if kind(path) in PYTORCH_FILES and path.is_file():
        raise ModelError(f"{path}: {PYTORCH_FILES[kind(path)]}, which holds weights (or a "
                         "pickled module) but not the code that runs them (npusim reads "
                         "TorchScript archives, torch.jit.save, and torch.export programs, "
                         ".pt2, which do); name a Python factory that builds the module and "
                         "loads them (file.py:build, docs/import.md) or its ONNX export "
                         "(torch.onnx.export)")
    if kind(path) in OTHER_FILES:
        raise ModelError(f"{path}: {OTHER_FILES[kind(path)]}; npusim reads {READ}: convert "
                         "it to ONNX first (tf2onnx for TensorFlow, TFLite and Keras)")
    if kind(path) not in (".csv", ".onnx", ".py", *PYTORCH_FILES) or path.is_file():
        return path
    bare_csv = kind(path) == ".csv" and path.name == spec
    if bare_csv and (TOPOLOGIES / spec).is_file():
        return TOPOLOGIES / spec
    if path.exists():  # a folder, a FIFO: nothing npusim reads a model from
        what = "a folder" if path.is_dir() else "not a regular file"
        raise ModelError(f"{path}: {what}; give a {kind(path)} file")
    hint = (f" (nor a SCALE-Sim topology shipped with npusim: {', '.join(shipped_topologies())})"
            if bare_csv else "")
    raise ModelError(f"{path}: no such file{hint}")


def load_model(spec: str, *, batch: int | None = None,
               input_shape: tuple[int, ...] | None = None,
               seed: int = 0, fallback: bool = False) -> Graph | list[ConvLayer]:
    """A network from a zoo name, ``file.csv`` (SCALE-Sim topology, or the name of one npusim
    ships), ``file.onnx``, or ``file.py:factory`` (a function returning a torch ``nn.Module``).
    ``input_shape`` sets an imported model's input, or the side of a zoo model's square input
    where it has one.

    ``batch`` means the same for every model: the batch it is built for, where the model
    leaves it free (zoo models, topology CSVs, PyTorch factories, an ONNX file's dynamic
    batch); an ONNX file whose batch is fixed to another value is refused. None: the
    model's own (``input_shape``'s N, the ONNX file's fixed batch, else 1). ``fallback``:
    an imported op npusim does not model is computed by its framework, not refused."""
    return load_model_and_module(spec, batch=batch, input_shape=input_shape, seed=seed,
                                 fallback=fallback)[0]


def load_model_and_module(spec: str, *, batch: int | None = None,
                          input_shape: tuple[int, ...] | None = None, seed: int = 0,
                          fallback: bool = False):
    """``load_model``'s network, and the torch module a ``file.py:factory`` made (the one
    imported, which ``--check`` runs), else None."""
    path = model_path(spec)
    if batch is not None and input_shape and input_shape[0] != batch:
        raise ModelError(f"{spec}: batch={batch} contradicts input_shape N={input_shape[0]}")
    if kind(path) == ".csv":
        from .topology import read_topology

        return [layer.with_batch(batch or 1) for layer in read_topology(path)], None
    if kind(path) == ".onnx":
        from .onnx_import import from_onnx

        return from_onnx(path, input_shape=input_shape, batch=batch, fallback=fallback), None
    if kind(path) == ".py":
        from .torch_import import factory_model

        return factory_model(spec, input_shape=input_shape, batch=batch, fallback=fallback)
    if kind(path) in TORCHSCRIPT_FILES:
        from .torch_import import script_model

        return script_model(path, input_shape=input_shape, batch=batch, fallback=fallback)
    if kind(path) == PROGRAM_FILE:
        from .torch_import import program_model

        return program_model(path, input_shape=input_shape, batch=batch, fallback=fallback)
    batch = batch or (input_shape[0] if input_shape else 1)
    return _zoo_model(spec, batch, input_shape, seed), None


def _zoo_model(name: str, batch: int, input_shape, seed: int) -> Graph:
    """A zoo model; ``input_shape`` must be square (N, C, S, S): its side S is the size."""
    from . import zoo

    if name in zoo.MODELS and input_shape and len(input_shape) == 4 \
            and input_shape[2] != input_shape[3]:
        shown = ",".join(map(str, input_shape))
        raise ModelError(f"{name}: input shape {shown} is {input_shape[2]}x{input_shape[3]}; "
                         f"{name} takes square inputs only (N,C,S,S: H = W = S)")
    if name not in zoo.MODELS and Path(name).exists():  # not a zoo name: the path a user meant
        what = "a file" if Path(name).is_file() else "a folder"
        raise ModelError(f"{name}: {what} npusim does not read as a model; give {READ}")
    size = input_shape[-1] if input_shape else None
    try:
        return zoo.build(name, batch=batch, seed=seed, size=size)
    except LayerError as e:
        if size is None:
            raise
        raise ModelError(f"{name}: input shape {','.join(map(str, input_shape))} does not fit "
                         f"it: {e}") from None


def onnx_source(spec: str):
    """The ONNX file a model spec reads (an ``.onnx`` path, or a trained zoo model's file
    in its installed wheel), or None: what ``--check`` runs onnxruntime on."""
    from pathlib import Path

    from . import trained

    if spec in trained.MODELS:
        return trained.MODELS[spec].path()
    return Path(spec) if kind(spec) == ".onnx" else None


DEFAULT_PHOTO = "chelsea"  # the input of an imported model given no image


def input_tensor(model: str, graph: Graph, *, image=None, seed: int = 0):
    """The input of ``graph`` (loaded from ``model``), float32, and a word on where it came
    from. Zoo models preprocess the photo their own way; an imported model of an N x C x H x
    W input gets the photo resized to it and ImageNet-normalised (1 or 3 channels; with no
    ``image``, one photo a sample: the bundled photos in turn, ``DEFAULT_PHOTO`` first), laid
    out N x H x W x C where the input is (``channels_last``), or, for other channel counts
    and inputs of other ranks (a MatMul's N x F), seeded standard-normal values."""
    import numpy as np

    from . import zoo

    if len(graph.input_shape) != 4:
        shown = "x".join(map(str, graph.input_shape))
        if image:
            raise ModelError(f"{model}: its input is {shown}, not N,C,H,W: an image cannot "
                             "feed it; leave out --input for seeded values")
        x = np.random.default_rng(seed).standard_normal(graph.input_shape, np.float32)
        return x, f"seeded standard normal (seed {seed})"
    if model in zoo.names():
        n, _, _, w = graph.input_shape
        x = zoo.input_for(model, image=image, batch=n, size=w)
        entry = zoo.MODELS[model]()
        default = entry.photo if entry.default_input is None else "the model's default"
        return x, image or default
    last = channels_last(graph.input_shape)
    n, c, h, w = (graph.input_shape[i] for i in ((0, 3, 1, 2) if last else (0, 1, 2, 3)))
    if image and c not in (1, 3):
        raise ModelError(f"{model}: its input has {c} channels; an image gives 1 (grey) or 3 "
                         "(RGB): leave out --input for seeded values")
    if c not in (1, 3):
        x = np.random.default_rng(seed).standard_normal(graph.input_shape, np.float32)
        return x, f"seeded standard normal (seed {seed})"
    x, shown = _photos(image, n, c, h, w)
    return (x.transpose(0, 2, 3, 1), f"{shown} (channels last)") if last else (x, shown)


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether a 4-D input of ``shape`` is an image laid out N x H x W x C (a TensorFlow
    network through tf2onnx): its last axis 1 or 3 and its second not."""
    return len(shape) == 4 and shape[1] not in (1, 3) and shape[3] in (1, 3)


def _photos(image, n: int, c: int, h: int, w: int):
    """N x C x H x W photos, each resized to H x W and ImageNet-normalised, and their names:
    ``image`` in every sample, or with none, one bundled photo a sample (``DEFAULT_PHOTO``
    first), so that ``--check`` sees a network that mixes its samples up."""
    import numpy as np

    from . import images

    if image or n == 1:
        photo = image or DEFAULT_PHOTO
        return np.repeat(images.load_image(photo, (h, w), c)[None], n, axis=0), photo
    names = [DEFAULT_PHOTO, *(p for p in images.photo_names() if p != DEFAULT_PHOTO)]
    order = [names[i % len(names)] for i in range(n)]
    loaded = {name: images.load_image(name, (h, w), c) for name in set(order)}
    shown = ", ".join(order) if n <= len(names) else f"{', '.join(names)} in turn"
    return np.stack([loaded[name] for name in order]), shown
