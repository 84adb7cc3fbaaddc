"""The MTCNN face detector's three networks with their real trained weights, no TensorFlow.

The ``mtcnn`` wheel (PyPI, 1.0.0) ships its weights as joblib + lz4 pickles of Keras
weight lists in ``mtcnn/assets/weights/{pnet,rnet,onet}.lz4``. Importing the package
would import TensorFlow, so the folder is located with ``importlib.util.find_spec``
(which does not execute the package) and the files are read with ``joblib.load``.

The Keras layouts are turned into npusim's NCHW ones:

- Conv2D kernels (R, S, C, K) -> (K, C, R, S); biases as they are;
- PReLU slopes (1, 1, C) shared over H and W -> one slope per channel;
- Dense (in, out) after ``Permute((2, 1, 3))`` + ``Flatten`` of an NHWC map: the input
  index is (w * H + h) * C + c, so the rows are reordered to npusim's NCHW flatten
  index c * H * W + h * W + w and transposed to (out, in);
- 'same' max pooling pads like TensorFlow: the odd pixel at the bottom/right (with -inf);
- the softmax over the two classes (not face, face) runs over channels.

Each network's heads are concatenated along channels into one output:
P-Net N x 6 x h x w, R-Net N x 6, O-Net N x 16, in the order
(p_not_face, p_face, box dx1, dy1, dx2, dy2[, 10 landmark coordinates]).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np

from ..errors import ModelError
from ..ir import Graph, GraphBuilder
from . import images

# per conv stage: (Keras layer name, kernel, max pool after it: (size, stride, 'same'|'valid'))
LAYOUT = {
    "pnet": [("conv1", 3, (2, 2, "same")), ("conv2", 3, None), ("conv3", 3, None)],
    "rnet": [("conv1", 3, (3, 2, "same")), ("conv2", 3, (3, 2, "valid")), ("conv3", 2, None)],
    "onet": [("conv1", 3, (3, 2, "same")), ("conv2", 3, (3, 2, "valid")),
             ("conv3", 3, (2, 2, "same")), ("conv4", 2, None)],
}
DENSE = {"rnet": "fc4", "onet": "fc5"}           # the hidden Dense + PReLU layer
HEADS = {"pnet": ("conv4-1",), "rnet": ("fc5-1",), "onet": ("fc6-1", "fc6-2")}  # linear heads
NATIVE_SIZE = {"pnet": 12, "rnet": 24, "onet": 48}
DEFAULT_SIZE = {"pnet": 96, "rnet": 24, "onet": 48}
# The astronaut's face in skimage.data.astronaut(), (top, left, height, width) pixels, checked
# by eye (brows to chin, ear to ear); the tests check that scikit-image's LBP frontal-face
# cascade finds a box overlapping it (IoU >= 0.7), not the exact pixels, which move by release.
ASTRONAUT_FACE = (66, 174, 96, 96)


def weights_dir() -> Path:
    """The folder of the ``mtcnn`` wheel's weight files, found without importing the package."""
    spec = importlib.util.find_spec("mtcnn")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("MTCNN weights: the 'mtcnn' package is not installed; "
                         "pip install mtcnn==1.0.0 (TensorFlow is not needed)")
    return Path(list(spec.submodule_search_locations)[0]) / "assets" / "weights"


def load_weights(net: str) -> list[np.ndarray]:
    """The Keras weight list of ``net`` ('pnet', 'rnet' or 'onet') as float32 arrays."""
    import joblib

    path = weights_dir() / f"{net}.lz4"
    if not path.is_file():
        raise ModelError(f"{path}: MTCNN weight file missing; reinstall mtcnn==1.0.0")
    try:
        return [np.asarray(a, np.float32) for a in joblib.load(path)]
    except Exception as e:  # a corrupt pickle can raise anything
        raise ModelError(f"{path}: cannot read MTCNN weights ({e})") from None


def tf_same_pool_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow 'same' padding of one axis: (before, after), the odd pixel after."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def dense_rows_to_nchw(w: np.ndarray, h: int, wd: int, c: int) -> np.ndarray:
    """Keras Dense (in, out) fed by Permute((2,1,3)) + Flatten of H x W x C -> (out, in) NCHW."""
    return w.reshape(wd, h, c, -1).transpose(2, 1, 0, 3).reshape(c * h * wd, -1).T


def input_shape(net: str, batch: int = 1, size: int | None = None) -> tuple[int, int, int, int]:
    """N x 3 x H x W: R-Net and O-Net take fixed crops; P-Net any size >= 12 (default 96)."""
    if net not in LAYOUT:
        raise ModelError(f"MTCNN network {net!r}: must be one of {', '.join(LAYOUT)}")
    side = size or DEFAULT_SIZE[net]
    if side < NATIVE_SIZE[net] or (net != "pnet" and side != NATIVE_SIZE[net]):
        allowed = ">= 12" if net == "pnet" else f"{NATIVE_SIZE[net]}"
        raise ModelError(f"mtcnn-{net}: size={side}: must be {allowed} pixels")
    return (batch, 3, side, side)


def _conv_stages(g: GraphBuilder, net: str, ws: list[np.ndarray]) -> tuple[str, int]:
    """conv + PReLU (+ max pool) stages; returns the last node and how many arrays were used."""
    x, i = g.input, 0
    for name, _, pool in LAYOUT[net]:
        x = g.conv(x, ws[i].transpose(3, 2, 0, 1), ws[i + 1], name=name)
        x = g.prelu(x, ws[i + 2].reshape(-1), name=f"prelu{name[4:]}")
        i += 3
        if pool:
            x = _pool(g, x, *pool, name=f"pool{name[4:]}")
    return x, i


def _pool(g: GraphBuilder, x: str, k: int, s: int, padding: str, name: str) -> str:
    _, _, h, w = g.build(x).shapes[x]
    pad = (0, 0, 0, 0)
    if padding == "same":
        pad = tf_same_pool_padding(h, k, s) + tf_same_pool_padding(w, k, s)
    return g.maxpool(x, k, s, pad, name=name)


def _heads(g: GraphBuilder, net: str, x: str, ws: list[np.ndarray], i: int) -> None:
    """Linear heads and the softmax classifier, concatenated (probabilities first)."""
    is_conv = net == "pnet"

    def layer(src, w, b, name):
        return g.conv(src, w.transpose(3, 2, 0, 1), b, name=name) if is_conv else \
            g.linear(src, w.T, b, name=name)

    heads = [layer(x, ws[i + 2 * j], ws[i + 2 * j + 1], nm) for j, nm in enumerate(HEADS[net])]
    j = i + 2 * len(heads)
    cls = "conv4-2" if is_conv else {"rnet": "fc5-2", "onet": "fc6-3"}[net]
    prob = g.softmax(layer(x, ws[j], ws[j + 1], cls), axis=1, name="prob")
    g.concat(prob, *heads, axis=1, name="output")


def build(net: str, batch: int = 1, size: int | None = None) -> Graph:
    """P-Net, R-Net or O-Net with the wheel's trained weights, NCHW, output as described above."""
    ws = load_weights(net)
    g = GraphBuilder(f"mtcnn-{net}", input_shape(net, batch, size))
    x, i = _conv_stages(g, net, ws)
    if net in DENSE:
        _, c, h, w = g.build(x).shapes[x]
        x = g.flatten(x, name="flatten")
        x = g.linear(x, dense_rows_to_nchw(ws[i], h, w, c), ws[i + 1], name=DENSE[net])
        x = g.prelu(x, ws[i + 2], name=f"prelu{DENSE[net][2:]}")
        i += 3
    _heads(g, net, x, ws, i)
    return g.build("output")


def face_crop(rgb: np.ndarray, box: tuple[int, int, int, int], size: int) -> np.ndarray:
    """The ``box`` (top, left, height, width) of an RGB image as MTCNN input 3 x size x size."""
    top, left, h, w = box
    return images.to_array(rgb[top:top + h, left:left + w], (size, size), 3, "mtcnn")


def default_input(net: str, batch: int = 1, size: int | None = None) -> np.ndarray:
    """The astronaut photo: whole (P-Net) or her face crop (R-Net, O-Net), MTCNN-normalised."""
    shape = input_shape(net, batch, size)
    rgb = images.read_rgb("astronaut")
    if net == "pnet":
        x = images.to_array(rgb, shape[2:], 3, "mtcnn")
    else:
        x = face_crop(rgb, ASTRONAUT_FACE, shape[2])
    return np.repeat(x[None], batch, axis=0)
