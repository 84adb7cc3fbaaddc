"""``lenet-digits``: a LeNet-style CNN trained at first use on scikit-learn's bundled digits.

The data: the 1797 8 x 8 handwritten digits of ``sklearn.datasets.load_digits``
(values 0..16, scaled to [0, 1]), split 75 / 25 stratified with a fixed seed. The
network (1 x 8 x 8 input): conv 3x3 16 + ReLU + 2x2 max pool, conv 3x3 32 + ReLU +
2x2 max pool, fc 128 -> 64 + ReLU, fc 64 -> 10 (logits). It is built as an npusim
``Graph`` (seeded He initialisation), mirrored to PyTorch by ``torch_ref.to_torch``,
trained with Adam (seeded, deterministic), and its weights are cached as .npz under
``$NPUSIM_CACHE`` (default ``~/.cache/npusim``) with the held-out accuracy.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np

from .. import outfile
from ..errors import ModelError
from ..ir import Graph
from .catalogue import digits_cache as cache_path  # its DIGITS_CACHE's version: see below

SEED, EPOCHS, BATCH, LR = 0, 25, 64, 5e-3  # bump catalogue.DIGITS_CACHE's version on a change


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): N x 1 x 8 x 8 float32 in [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=0.25, random_state=SEED,
                                          stratify=d.target)
    return xtr, ytr.astype(np.int64), xte, yte.astype(np.int64)


def architecture(batch: int = 1, seed: int = SEED) -> Graph:
    """The untrained network with seeded He-initialised weights."""
    from .zoo import Net

    n = Net("lenet-digits", (batch, 1, 8, 8), seed)
    g = n.g
    x = g.maxpool(g.relu(n.conv(g.input, 1, 16, 3, pad=1, name="conv1"), name="relu1"), 2,
                  name="pool1")
    x = g.maxpool(g.relu(n.conv(x, 16, 32, 3, pad=1, name="conv2"), name="relu2"), 2,
                  name="pool2")
    x = g.relu(n.linear(g.flatten(x, name="flatten"), 128, 64, name="fc1"), name="relu3")
    n.linear(x, 64, 10, name="fc2")
    return n.build()


def _train(graph: Graph) -> dict[str, np.ndarray]:
    """Adam on the training split through the PyTorch mirror; returns trained arrays by
    ``"<layer>.weight"`` / ``"<layer>.bias"``."""
    try:
        import torch
    except ImportError:
        raise ModelError("lenet-digits: training it at first use needs PyTorch; "
                         "pip install 'npusim[torch]'") from None
    from ..torch_ref import to_torch

    xtr, ytr, _, _ = split()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: one thread is fastest and its sums' order is fixed
    try:
        return _fit(to_torch(graph).train(), graph, xtr, ytr)
    finally:
        torch.set_num_threads(threads)


def _fit(module, graph: Graph, xtr: np.ndarray, ytr: np.ndarray) -> dict[str, np.ndarray]:
    import torch

    torch.manual_seed(SEED)
    opt = torch.optim.Adam(module.parameters(), lr=LR)
    xs, ys = torch.from_numpy(xtr), torch.from_numpy(ytr)
    order = torch.Generator().manual_seed(SEED)
    for _ in range(EPOCHS):
        for idx in torch.randperm(len(xs), generator=order).split(BATCH):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(module(xs[idx]), ys[idx]).backward()
            opt.step()
    layers = dict(zip(module.names, module.layers, strict=True))
    return {f"{name}.{p}": getattr(layers[name], p).detach().numpy().copy()
            for name in graph.layers for p in ("weight", "bias")}


def with_params(graph: Graph, params: dict[str, np.ndarray]) -> Graph:
    """``graph`` with its convs' weights and biases taken from ``params["<layer>.weight"]``..."""

    return graph.map_convs(lambda name, conv: dataclasses.replace(
        conv, weight=np.asarray(params[f"{name}.weight"], np.float32).reshape(conv.weight.shape),
        bias=np.asarray(params[f"{name}.bias"], np.float32)))


def accuracy_of(graph: Graph, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of ``x`` that ``graph``, run by npusim, classifies as ``y``."""
    from ..simulate import simulate

    logits = simulate(graph, x, "systolic-32x32-ws", mode="estimate").output
    return float((logits.argmax(axis=1) == y).mean())


def _trained() -> tuple[Graph, float]:
    """The trained network and its held-out accuracy: from the cache, else trained now."""
    path = cache_path()
    graph = architecture()
    if path.is_file():
        try:
            with np.load(path) as z:
                return with_params(graph, dict(z)), float(z["accuracy"])
        except (OSError, ValueError, KeyError) as e:
            raise ModelError(f"{path}: unreadable lenet-digits cache ({e}); delete it to "
                             "retrain") from None
    params = _train(graph)
    trained = with_params(graph, params)
    _, _, xte, yte = split()
    acc = accuracy_of(trained, xte, yte)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = io.BytesIO()
    np.savez(data, accuracy=np.float64(acc), **params)
    outfile.write_bytes(path, data.getvalue(), "lenet-digits cache", "cache")  # atomic
    return trained, acc


def build(batch: int = 1) -> Graph:
    """The trained LeNet for ``batch`` inputs of 1 x 8 x 8."""
    return _trained()[0].with_batch(batch)


def accuracy() -> float:
    """Held-out accuracy (fraction of 450 test digits) recorded when the model was trained."""
    return _trained()[1]


def test_input(batch: int = 1) -> np.ndarray:
    """The first ``batch`` held-out test digits, N x 1 x 8 x 8 in [0, 1]."""
    xte = split()[2]
    return np.ascontiguousarray(np.resize(xte, (batch,) + xte.shape[1:]))
