"""A segmentation network for the dilated-grid machine (seed 002, Figs. 2, 17-20), with its
2x2 pre-dilation filters and cascades.

``build`` gives ``dilated-segnet``: a stride-4 stem, the Fig. 2 context stack of 3x3
convolutions at R = 1, 2, 4, a DeepLab-style atrous pyramid (1x1 and 3x3 at R = 6, 12,
18, concatenated, fused by a 1x1), a per-pixel classifier and a bilinear upsampling to
the input size. With ``cascade=VARIANT`` the R = 2 and R = 4 convs are each replaced by
two cascaded 2x2 convs at that rate (Fig. 19, Eq. 14): their taps at -R/2 and +R/2
compose to the 3x3-at-R pattern {-R, 0, R}. Weights are seeded He-initialised.

Fig. 18's variants for a cascade from C1 to C2 maps (``FIG18``): the middle set has
C1 or C2 maps and either conv may be depthwise; ``cascade_coefficients`` counts the
weights of a built network, ``fig18_count`` is the patent's formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LayerError, ModelError
from ..ir import Graph, GraphBuilder
from . import images

CONTEXT_RATES = (1, 2, 4)
PYRAMID_RATES = (6, 12, 18)


@dataclass(frozen=True)
class Cascade:
    """One Fig. 18 variant: the middle set's maps (C1 or C2) and which conv is depthwise."""

    middle: str          # "c1" or "c2"
    first_dw: bool
    second_dw: bool
    formula: str         # the patent's coefficient count, as text

    def count(self, c1: int, c2: int) -> int:
        """The patent's coefficient count for this variant (coefficients)."""
        return {"8C1": 8 * c1, "4C1(C2+1)": 4 * c1 * (c2 + 1), "4(C1+1)C2": 4 * (c1 + 1) * c2,
                "4(C1+C2)C2": 4 * (c1 + c2) * c2, "4(C1+C2)C1": 4 * (c1 + c2) * c1}[self.formula]


FIG18 = {
    "dw-dw": Cascade("c1", True, True, "8C1"),
    "dw-full": Cascade("c1", True, False, "4C1(C2+1)"),
    "full-dw": Cascade("c2", False, True, "4(C1+1)C2"),
    "full-wide": Cascade("c2", False, False, "4(C1+C2)C2"),
    "full-narrow": Cascade("c1", False, False, "4(C1+C2)C1"),
}


def fig18_count(variant: str, c1: int, c2: int) -> int:
    """Coefficients of a cascade from C1 to C2 maps by Fig. 18 (9 C1 C2 for 'single')."""
    if variant == "single":
        return 9 * c1 * c2
    return _variant(variant).count(c1, c2)


def _variant(name: str) -> Cascade:
    if name not in FIG18:
        raise ModelError(f"cascade={name!r}: must be one of {', '.join(FIG18)}")
    return FIG18[name]


class Builder:
    """A GraphBuilder with seeded He-initialised convs (uniform, variance 2 / fan_in)."""

    def __init__(self, name: str, input_shape, seed: int):
        self.g = GraphBuilder(name, input_shape)
        self.rng = np.random.default_rng(seed)

    def conv(self, x: str, cin: int, cout: int, k: int, *, name: str, stride=1, pad=0,
             dilation=1, groups=1, relu=True) -> str:
        fan_in = cin // groups * k * k
        bound = np.sqrt(6.0 / fan_in)
        w = self.rng.uniform(-bound, bound, (cout, cin // groups, k, k)).astype(np.float32)
        b = self.rng.uniform(-0.1, 0.1, cout).astype(np.float32)
        x = self.g.conv(x, w, b, stride=stride, padding=pad, dilation=dilation, groups=groups,
                        name=name)
        return self.g.relu(x, name=f"{name}_relu") if relu else x

    def dilated3(self, x: str, cin: int, cout: int, rate: int, name: str) -> str:
        """A 3x3 conv at ``rate``, 'same' size (padding = rate)."""
        return self.conv(x, cin, cout, 3, pad=rate, dilation=rate, name=name)

    def pre_dilated2(self, x: str, cin: int, cout: int, rate: int, name: str, *, dw: bool,
                     relu: bool) -> str:
        """Eq. 14: a 2x2 filter at even ``rate``, taps centred at -R/2 and +R/2 ('same' size)."""
        if rate % 2:
            raise LayerError(f"{name}: a 2x2 pre-dilation filter needs an even rate (Eq. 14), "
                             f"got R={rate}")
        if dw and cin != cout:
            raise LayerError(f"{name}: depthwise needs as many output maps as inputs, "
                             f"got {cin} -> {cout}")
        return self.conv(x, cin, cout, 2, pad=rate // 2, dilation=rate, groups=cin if dw else 1,
                         name=name, relu=relu)

    def cascade(self, x: str, c1: int, c2: int, rate: int, name: str, variant: str) -> str:
        """Two cascaded 2x2 convs at ``rate`` standing in for a 3x3 at ``rate`` (Fig. 19)."""
        v = _variant(variant)
        mid = c1 if v.middle == "c1" else c2
        if variant == "dw-dw" and c1 != c2:
            raise LayerError(f"{name}: cascade 'dw-dw' keeps the map count, got {c1} -> {c2}")
        x = self.pre_dilated2(x, c1, mid, rate, f"{name}a", dw=v.first_dw, relu=False)
        return self.pre_dilated2(x, mid, c2, rate, f"{name}b", dw=v.second_dw, relu=True)


def _context(b: Builder, x: str, width: int, cascade: str | None) -> str:
    """Fig. 2's stack: 3x3 at R = 1, 2, 4 (R = 2, 4 as 2x2 cascades if asked)."""
    for rate in CONTEXT_RATES:
        if cascade and rate % 2 == 0:
            x = b.cascade(x, width, width, rate, f"ctx_r{rate}", cascade)
        else:
            x = b.dilated3(x, width, width, rate, f"ctx_r{rate}")
    return x


def _pyramid(b: Builder, x: str, width: int) -> str:
    """The atrous pyramid: a 1x1 and 3x3 at R = 6, 12, 18 on one input, concatenated, fused."""
    branches = [b.conv(x, width, width, 1, name="aspp_1x1")]
    branches += [b.dilated3(x, width, width, r, f"aspp_r{r}") for r in PYRAMID_RATES]
    cat = b.g.concat(*branches, name="aspp_cat")
    return b.conv(cat, width * len(branches), width, 1, name="aspp_fuse")


def build(batch: int = 1, seed: int = 0, size: int = 224, *, classes: int = 8, width: int = 32,
          cascade: str | None = None) -> Graph:
    """``dilated-segnet`` for ``batch`` RGB inputs of ``size`` x ``size`` pixels: per-pixel
    scores for ``classes`` classes at the input size."""
    if size < 16 or size % 4:
        raise ModelError(f"dilated-segnet: size={size}: must be a multiple of 4, >= 16 pixels")
    if cascade is not None:
        _variant(cascade)
    b = Builder("dilated-segnet", (batch, 3, size, size), seed)
    x = b.conv(b.g.input, 3, width // 2, 3, stride=2, pad=1, name="stem1")
    x = b.conv(x, width // 2, width, 3, stride=2, pad=1, name="stem2")
    x = _pyramid(b, _context(b, x, width, cascade), width)
    x = b.conv(x, width, classes, 1, relu=False, name="classifier")
    x = b.g.upsample(x, size=(size, size), mode="bilinear", name="upsample")
    return b.g.build(x)


def input_for(image: str = "astronaut", batch: int = 1, size: int = 224) -> np.ndarray:
    """A real photo as the network's input: float32 N x 3 x size x size, ImageNet-normalised."""
    x = images.load_image(image, (size, size), 3, "imagenet")
    return np.repeat(x[None], batch, axis=0)


def cascade_coefficients(graph: Graph, name: str) -> int:
    """Weights (coefficients, no biases) of the cascade ``name`` (convs ``name``a, ``name``b)
    or of the single conv ``name`` in a built graph."""
    convs = {n.name: n.op for n in graph.conv_nodes}
    parts = [convs[k] for k in (name, f"{name}a", f"{name}b") if k in convs]
    if not parts:
        raise ModelError(f"{graph.name}: no conv or cascade named {name!r}")
    return sum(int(op.weight.size) for op in parts)


def cascade_graph(c1: int, c2: int, rate: int, variant: str, size: int = 16,
                  seed: int = 0) -> Graph:
    """One cascade (or, for variant 'single', one 3x3 conv) from C1 to C2 maps at ``rate``."""
    b = Builder(f"cascade-{variant}", (1, c1, size, size), seed)
    if variant == "single":
        x = b.dilated3(b.g.input, c1, c2, rate, "cascade")
    else:
        x = b.cascade(b.g.input, c1, c2, rate, "cascade", variant)
    return b.g.build(x)
