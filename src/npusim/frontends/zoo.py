"""The model zoo: networks by name, each with its own preprocessing of a real photo.

Real trained weights: ``mtcnn-pnet``, ``mtcnn-rnet``, ``mtcnn-onet`` (the MTCNN face
detector, weights shipped by the ``mtcnn`` wheel, see ``mtcnn_nets``) and
``lenet-digits`` (trained at first use on scikit-learn's digits, see ``digits``).
Seeded He-initialised weights: ``alexnet``, ``vgg16``, ``resnet18``, ``resnet50``,
``mobilenet_v2`` at ImageNet shapes (3 x 224 x 224), with batch-norm folded into the
convs. Layer names follow the papers (AlexNet conv1..conv5, fc6..fc8; VGG-16
conv1_1..conv5_3, fc6..fc8) so ``prune``'s per-layer tables map onto them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ModelError
from ..ir import Graph, GraphBuilder, fold_batchnorm
from . import catalogue, images


class Net:
    """A ``GraphBuilder`` with seeded He-initialised layers (variance 2 / fan_in).

    Weights are drawn uniform on +-sqrt(6 / fan_in) (He et al.'s variance, in the uniform
    form PyTorch's ``kaiming_uniform_`` uses): four times faster to draw than normals, which
    keeps building ResNet-50 (25.5M weights) to a fraction of a second.
    """

    def __init__(self, name: str, input_shape, seed: int):
        self.g = GraphBuilder(name, input_shape)
        self.rng = np.random.default_rng(seed)

    @classmethod
    def imagenet(cls, name: str, batch: int, size: int, seed: int) -> Net:
        return cls(name, _imagenet_input(batch, size, name), seed)

    def he(self, shape, fan_in: int) -> np.ndarray:
        w = self.rng.random(shape, dtype=np.float32)
        w -= np.float32(0.5)
        w *= np.float32(2 * np.sqrt(6.0 / fan_in))
        return w

    def conv(self, x, cin, cout, k, *, stride=1, pad=0, groups=1, name, bias=True) -> str:
        w = self.he((cout, cin // groups, k, k), cin // groups * k * k)
        b = self.rng.uniform(-0.1, 0.1, cout).astype(np.float32) if bias else None
        return self.g.conv(x, w, b, stride=stride, padding=pad, groups=groups, name=name)

    def bn(self, x, channels, *, name, gamma=1.0) -> str:
        """Batch-norm with plausible trained statistics: near-identity, so activations stay O(1)."""
        r = self.rng
        return self.g.batchnorm(x, gamma * r.uniform(0.8, 1.2, channels),
                                r.normal(0.0, 0.1, channels), r.normal(0.0, 0.1, channels),
                                r.uniform(0.8, 1.2, channels), name=name)

    def conv_bn(self, x, cin, cout, k, *, stride=1, groups=1, name, act="relu", gamma=1.0):
        """conv (no bias, 'same'-style padding k//2) + batch-norm + activation (or none)."""
        x = self.conv(x, cin, cout, k, stride=stride, pad=k // 2, groups=groups, name=name,
                      bias=False)
        x = self.bn(x, cout, name=f"{name}_bn", gamma=gamma)
        return getattr(self.g, act)(x, name=f"{name}_{act}") if act else x

    def linear(self, x, fin, fout, *, name) -> str:
        b = self.rng.uniform(-0.1, 0.1, fout).astype(np.float32)
        return self.g.linear(x, self.he((fout, fin), fin), b, name=name)

    def build(self) -> Graph:
        return fold_batchnorm(self.g.build())


def _imagenet_input(batch: int, size: int, name: str = "ImageNet model"):
    """N x 3 x size x size; five stride-2 stages need 32 pixels at least."""
    if size < 32:
        raise ModelError(f"{name}: size={size}: must be at least 32 pixels (224 for ImageNet)")
    return (batch, 3, size, size)


def alexnet(batch=1, seed=0, size=224) -> Graph:
    """AlexNet as Caffe's reference model (grouped conv2/4/5, 61M weights), no LRN, 224 input
    with conv1 padding 2 (55 x 55 after conv1, 6 x 6 x 256 into fc6)."""
    n = Net.imagenet("alexnet", batch, size, seed)
    g, x = n.g, n.g.input
    plan = [(3, 96, 11, 4, 2, 1, True), (96, 256, 5, 1, 2, 2, True), (256, 384, 3, 1, 1, 1, False),
            (384, 384, 3, 1, 1, 2, False), (384, 256, 3, 1, 1, 2, True)]
    for i, (cin, cout, k, s, p, groups, pool) in enumerate(plan, 1):
        x = g.relu(n.conv(x, cin, cout, k, stride=s, pad=p, groups=groups, name=f"conv{i}"),
                   name=f"relu{i}")
        x = g.maxpool(x, 3, 2, name=f"pool{i}") if pool else x
    return _classifier(n, x)


def _classifier(n: Net, x: str, hidden: int = 4096) -> Graph:
    """flatten -> fc6 -> relu -> fc7 -> relu -> fc8 (1000 classes); dropout is identity here."""
    features = int(np.prod(n.g.build(x).shapes[x][1:]))
    x = n.g.flatten(x, name="flatten")
    x = n.g.relu(n.linear(x, features, hidden, name="fc6"), name="relu6")
    x = n.g.relu(n.linear(x, hidden, hidden, name="fc7"), name="relu7")
    n.linear(x, hidden, 1000, name="fc8")
    return n.build()


def vgg16(batch=1, seed=0, size=224) -> Graph:
    """VGG-16 (configuration D): 13 3x3 convs in five stages, each closed by a 2x2 max pool."""
    n = Net.imagenet("vgg16", batch, size, seed)
    x, cin = n.g.input, 3
    for stage, (cout, convs) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], 1):
        for j in range(1, convs + 1):
            x = n.g.relu(n.conv(x, cin, cout, 3, pad=1, name=f"conv{stage}_{j}"),
                         name=f"relu{stage}_{j}")
            cin = cout
        x = n.g.maxpool(x, 2, 2, name=f"pool{stage}")
    return _classifier(n, x)


def _stem(n: Net) -> str:
    """ResNet stem: 7x7/2 conv + BN + ReLU, 3x3/2 max pool (64 x 56 x 56 at 224)."""
    x = n.conv_bn(n.g.input, 3, 64, 7, stride=2, name="conv1")
    return n.g.maxpool(x, 3, 2, 1, name="pool1")


def _residual(n: Net, x: str, branch: str, cin: int, cout: int, stride: int, name: str) -> str:
    """branch + shortcut (1x1 projection + BN where the shape changes), then ReLU."""
    short = x
    if stride != 1 or cin != cout:
        short = n.conv_bn(x, cin, cout, 1, stride=stride, name=f"{name}_down", act=None)
    return n.g.relu(n.g.add(branch, short, name=f"{name}_add"), name=f"{name}_relu")


def _basic(n: Net, x, cin, cout, stride, name) -> str:
    y = n.conv_bn(x, cin, cout, 3, stride=stride, name=f"{name}_conv1")
    # a small last gamma keeps the residual sum from doubling its variance block after block
    y = n.conv_bn(y, cout, cout, 3, name=f"{name}_conv2", act=None, gamma=0.5)
    return _residual(n, x, y, cin, cout, stride, name)


def _bottleneck(n: Net, x, cin, cout, stride, name) -> str:
    mid = cout // 4
    y = n.conv_bn(x, cin, mid, 1, name=f"{name}_conv1")
    y = n.conv_bn(y, mid, mid, 3, stride=stride, name=f"{name}_conv2")
    y = n.conv_bn(y, mid, cout, 1, name=f"{name}_conv3", act=None, gamma=0.5)
    return _residual(n, x, y, cin, cout, stride, name)


def _resnet(name: str, block, blocks, widths, batch, seed, size) -> Graph:
    n = Net.imagenet(name, batch, size, seed)
    x, cin = _stem(n), 64
    for stage, (count, cout) in enumerate(zip(blocks, widths, strict=True), 1):
        for j in range(count):
            stride = 2 if j == 0 and stage > 1 else 1
            x = block(n, x, cin, cout, stride, f"layer{stage}_{j}")
            cin = cout
    x = n.g.flatten(n.g.globalavgpool(x, name="avgpool"), name="flatten")
    n.linear(x, cin, 1000, name="fc")
    return n.build()


def resnet18(batch=1, seed=0, size=224) -> Graph:
    """ResNet-18: basic blocks [2, 2, 2, 2], widths 64..512."""
    return _resnet("resnet18", _basic, [2, 2, 2, 2], [64, 128, 256, 512], batch, seed, size)


def resnet50(batch=1, seed=0, size=224) -> Graph:
    """ResNet-50 (v1.5: stride on the 3x3): bottlenecks [3, 4, 6, 3], widths 256..2048."""
    return _resnet("resnet50", _bottleneck, [3, 4, 6, 3], [256, 512, 1024, 2048], batch, seed,
                   size)


def _inverted(n: Net, x, cin, cout, stride, expand, name) -> str:
    """MobileNetV2 block: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 linear projection."""
    mid = cin * expand
    y = n.conv_bn(x, cin, mid, 1, name=f"{name}_expand", act="relu6") if expand != 1 else x
    y = n.conv_bn(y, mid, mid, 3, stride=stride, groups=mid, name=f"{name}_dw", act="relu6")
    y = n.conv_bn(y, mid, cout, 1, name=f"{name}_project", act=None, gamma=0.5)
    return n.g.add(x, y, name=f"{name}_add") if stride == 1 and cin == cout else y


MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]  # (expansion t, channels c, repeats n, stride s)


def mobilenet_v2(batch=1, seed=0, size=224) -> Graph:
    """MobileNetV2 (width 1.0): 17 inverted residual blocks, 1280-channel head, 1000 classes."""
    n = Net.imagenet("mobilenet_v2", batch, size, seed)
    x, cin, k = n.conv_bn(n.g.input, 3, 32, 3, stride=2, name="conv1", act="relu6"), 32, 0
    for t, c, reps, s in MOBILENET_V2:
        for j in range(reps):
            k += 1
            x = _inverted(n, x, cin, c, s if j == 0 else 1, t, f"block{k}")
            cin = c
    x = n.conv_bn(x, cin, 1280, 1, name="conv_last", act="relu6")
    x = n.g.flatten(n.g.globalavgpool(x, name="avgpool"), name="flatten")
    n.linear(x, 1280, 1000, name="fc")
    return n.build()


@dataclass(frozen=True)
class Entry:
    """A zoo model: how to build it, its input and preprocessing (what it is: ``catalogue``)."""

    build: Callable[..., Graph]            # (batch, seed, size) -> Graph
    input_shape: Callable[..., tuple]      # (size) -> (1, C, H, W)
    photo: str = "chelsea"                 # default photo (images.photo_names())
    norm: str = "imagenet"                 # images.NORMS key
    channels: int = 3
    default_input: Callable | None = None  # (batch, size) -> N x C x H x W, if not the photo


def _imagenet(fn, photo: str = "chelsea") -> Entry:
    return Entry(lambda batch, seed, size=None: fn(batch, seed, size or 224),
                 lambda size=None: _imagenet_input(1, size or 224, fn.__name__), photo)


def _segnet() -> Entry:
    from . import segnet

    return _imagenet(segnet.build, "astronaut")


def _edgetpu() -> Entry:
    from .. import blocks

    return _imagenet(blocks.build)


def _mtcnn(net: str) -> Entry:
    from . import mtcnn_nets

    return Entry(lambda batch, seed, size=None: mtcnn_nets.build(net, batch, size),
                 lambda size=None: mtcnn_nets.input_shape(net, 1, size), "astronaut", "mtcnn",
                 default_input=lambda batch, size=None: mtcnn_nets.default_input(net, batch, size))


def _digits_shape(size=None) -> tuple[int, int, int, int]:
    if size not in (None, 8):
        raise ModelError(f"lenet-digits: size={size}: the digits are 8 x 8 pixels")
    return (1, 1, 8, 8)


def _digits_build(batch, seed, size=None) -> Graph:
    from . import digits

    _digits_shape(size)
    return digits.build(batch)


def _digits_input(batch, size=None) -> np.ndarray:
    from . import digits

    _digits_shape(size)
    return digits.test_input(batch)


def _digits() -> Entry:
    return Entry(_digits_build, _digits_shape, norm="unit", channels=1, default_input=_digits_input)


def _trained(name: str) -> Entry:
    """A real trained network read from an installed wheel (``trained``), its input fixed."""
    from . import trained

    model = trained.MODELS[name]

    def fixed(size):
        if size not in (None, model.shape[-1]):
            raise ModelError(f"{name}: its input is fixed at {model.shape[1]}x{model.shape[2]} "
                             f"pixels (H x W); size={size} cannot change it")

    def build(batch, seed, size=None):
        fixed(size)
        return trained.build(name, batch)

    def shape(size=None):
        fixed(size)
        return (1, *model.shape)

    return Entry(build, shape, model.photo or "astronaut", model.norm, model.shape[0],
                 default_input=lambda batch, size=None: trained.default_input(name, batch))


MODELS: dict[str, Callable[[], Entry]] = {
    "alexnet": lambda: _imagenet(alexnet),
    "vgg16": lambda: _imagenet(vgg16),
    "resnet18": lambda: _imagenet(resnet18),
    "resnet50": lambda: _imagenet(resnet50),
    "mobilenet_v2": lambda: _imagenet(mobilenet_v2),
    "mtcnn-pnet": lambda: _mtcnn("pnet"),
    "mtcnn-rnet": lambda: _mtcnn("rnet"),
    "mtcnn-onet": lambda: _mtcnn("onet"),
    "lenet-digits": _digits,
    "dilated-segnet": _segnet,
    "edgetpu_v2_like": _edgetpu,
    "ppocr-v4-det": lambda: _trained("ppocr-v4-det"),
    "ppocr-v4-rec": lambda: _trained("ppocr-v4-rec"),
    "ppocr-cls": lambda: _trained("ppocr-cls"),
    "nudenet-320n": lambda: _trained("nudenet-320n"),
}


def names() -> list[str]:
    """The zoo's model names."""
    return list(MODELS)


def built_names() -> list[str]:
    """The zoo models npusim builds itself (seeded or trained here), not read from a wheel."""
    from . import trained

    return [n for n in MODELS if n not in trained.MODELS]


def _entry(name: str) -> Entry:
    if name not in MODELS:
        raise ModelError(f"model {name!r}: not in the zoo; choose one of {', '.join(MODELS)} "
                         "(or a .onnx, .csv, TorchScript .pt, .pt2 or file.py:factory)")
    return MODELS[name]()


def build(name: str, *, batch: int = 1, seed: int = 0, size: int | None = None) -> Graph:
    """The zoo model ``name`` as a Graph for ``batch`` inputs. ``size``: the side of the square
    input in pixels (ImageNet models, default 224; P-Net, default 96); ``seed`` picks the
    He-initialised weights of the ImageNet models (trained models ignore it)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ModelError(f"{name}: batch={batch!r}: must be an integer >= 1")
    if size is not None and (not isinstance(size, int) or size < 1):
        raise ModelError(f"{name}: size={size!r}: must be an integer >= 1 (pixels)")
    return _entry(name).build(batch=batch, seed=seed, size=size)


def input_shape(name: str, size: int | None = None) -> tuple[int, ...]:
    """The input shape (1, C, H, W) of zoo model ``name``, without building its weights."""
    return _entry(name).input_shape(size)


def input_for(name: str, image=None, batch: int = 1, size: int | None = None) -> np.ndarray:
    """float32 N x C x H x W for model ``name``: ``image`` (a photo name or an image file;
    default the model's own input) through the model's preprocessing, ``batch`` copies."""
    entry = _entry(name)
    if image is None and entry.default_input is not None:
        return entry.default_input(batch, size)
    shape = entry.input_shape(size)
    x = images.load_image(image or entry.photo, shape[2:], entry.channels, entry.norm)
    return np.repeat(x[None], batch, axis=0)


def describe(name: str) -> str:
    """One line: what the model is, where its weights come from, its default input (the
    catalogue's, which ``npusim models`` lists)."""
    _entry(name)  # an unknown name: the zoo's error
    return catalogue.describe(name)
