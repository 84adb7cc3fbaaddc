"""Networks of IBN blocks (seed 003, Fig. 5) and a MobileNet-EdgeTPU-V2-like classifier.

``build_network`` stacks a stem, a sequence of ``BlockSpec`` blocks and a classifier head
into a ``Graph`` with seeded He-initialised weights. ``interleave`` makes a stage that
alternates block kinds (Fig. 5's subset 502: fused IBN 512, fused grouped IBN 514, ...),
so grouped blocks are followed by blocks that mix all channels, without shuffles.

Group sizes are set per layer (a ``BlockSpec``'s ``groups``), per block type
(``group_sizes={kind: outputs per group}``) or by a rule run when the network is built
(``group_sizes=callable(spec) -> outputs per group``): ``with_group_size`` turns an
outputs-per-group size (the broadcast reuse factor the tile's MAC subsets see) into g.

The classifier's table (``EDGETPU_V2_S``) is the default block-group topology of the
open-source MobileNetEdgeTPUV2-S model (stage widths, block types, K, expansion, stride;
see docs/group-tile.md); weights are seeded, not trained.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..errors import LayerError
from ..ir import Graph, GraphBuilder
from .ibn import GROUPED, BlockSpec, ConvPlan, plan

GroupSizes = int | Mapping[str, int] | Callable[[BlockSpec], int] | None


def grouped_channels(spec: BlockSpec) -> tuple[int, int]:
    """(inputs, outputs) of the block's grouped K x K conv."""
    if spec.kind == "fused-grouped-ibn":
        return spec.c_in, spec.mid
    return spec.mid, spec.main_out


def with_group_size(spec: BlockSpec, size: int, where: str = "block") -> BlockSpec:
    """``spec`` with g set so that each group has ``size`` outputs (a grouped kind only)."""
    if spec.kind not in GROUPED:
        return spec
    _, outs = grouped_channels(spec)
    if size < 1 or outs % size:
        raise LayerError(f"{where}.group_size={size!r}: must divide the grouped conv's {outs} "
                         f"outputs (block kind {spec.kind!r})")
    return dataclasses.replace(spec, groups=outs // size)


def apply_group_sizes(specs: Sequence[BlockSpec], sizes: GroupSizes) -> list[BlockSpec]:
    """Set g on every grouped block: one size, a size per block kind, or a rule per block."""
    out = []
    for i, spec in enumerate(specs):
        if sizes is None or spec.kind not in GROUPED:
            out.append(spec)
            continue
        size = (sizes(spec) if callable(sizes) else
                sizes.get(spec.kind) if isinstance(sizes, Mapping) else sizes)
        out.append(spec if size is None else with_group_size(spec, size, f"block{i + 1}"))
    return out


def interleave(kinds: Sequence[str], c_in: int, c_out: int, repeats: int, *, stride: int = 1,
               **spec_args) -> list[BlockSpec]:
    """A stage of ``repeats`` blocks cycling through ``kinds``; the first takes the stride
    and the channel change (Fig. 5)."""
    return [BlockSpec(kinds[i % len(kinds)], c_in if i == 0 else c_out, c_out,
                      stride=stride if i == 0 else 1, **spec_args) for i in range(repeats)]


class _Weights:
    """Seeded He-uniform weights (variance 2 / fan_in) and small biases."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def conv(self, c: ConvPlan) -> tuple[np.ndarray, np.ndarray]:
        fan_in = c.c_in // c.groups * c.k * c.k
        bound = np.sqrt(6.0 / fan_in)
        w = self.rng.uniform(-bound, bound, (c.c_out, c.c_in // c.groups, c.k, c.k))
        return w.astype(np.float32), self.rng.uniform(-0.1, 0.1, c.c_out).astype(np.float32)


def add_conv(g: GraphBuilder, x: str, c: ConvPlan, weights: _Weights) -> str:
    """One planned conv ('same' padding) and its ReLU."""
    w, b = weights.conv(c)
    y = g.conv(x, w, b, stride=c.stride, padding=c.k // 2, groups=c.groups, name=c.name)
    return g.relu(y, name=f"{c.name}_relu") if c.relu else y


def add_block(g: GraphBuilder, x: str, spec: BlockSpec, weights: _Weights, name: str) -> str:
    """The block's convs (``ibn.plan``) and its residual add; returns the output node."""
    y = x
    for c in plan(spec, name):
        y = add_conv(g, y, c, weights)
    return g.add(x, y, name=f"{name}_add") if spec.has_residual else y


def build_network(name: str, input_shape: Sequence[int], blocks: Sequence[BlockSpec], *,
                  stem: ConvPlan | None = None, head: int | None = None, classes: int = 10,
                  seed: int = 0) -> Graph:
    """stem conv, ``blocks`` in order (named block1...), optional 1x1 head conv to ``head``
    channels, global average pool and a ``classes``-way linear classifier."""
    g, weights = GraphBuilder(name, input_shape), _Weights(seed)
    x, channels = g.input, input_shape[1]
    if stem is not None:
        x, channels = add_conv(g, x, stem, weights), stem.c_out
    for i, spec in enumerate(blocks, 1):
        if spec.c_in != channels:
            raise LayerError(f"{name}.block{i}.c_in={spec.c_in}: the previous layer gives "
                             f"{channels} channels")
        x, channels = add_block(g, x, spec, weights, f"block{i}"), spec.c_out
    if head is not None:
        x, channels = add_conv(g, x, ConvPlan("head", channels, head, 1), weights), head
    x = g.flatten(g.globalavgpool(x, name="avgpool"), name="flatten")
    w, b = weights.conv(ConvPlan("fc", channels, classes, 1))
    g.linear(x, w[:, :, 0, 0], b, name="fc")
    return g.build()


# (stage width, [(kind, K, expansion, stride), ...]): MobileNetEdgeTPUV2-S's default
# block-group topology; its grouped blocks use 64 outputs per group.
EDGETPU_V2_S = [
    (24, [("fused-ibn", 3, 1, 1)]),
    (48, [("fused-ibn", 3, 8, 2), ("fused-grouped-ibn", 3, 4, 1)]),
    (64, [("fused-ibn", 3, 8, 2), ("fused-grouped-ibn", 3, 4, 1), ("fused-ibn", 3, 4, 1),
          ("fused-grouped-ibn", 3, 4, 1)]),
    (128, [("fused-ibn", 3, 8, 2)] + [("ibn", 3, 4, 1)] * 3),
    (160, [("ibn", 3, 8, 1)] + [("ibn", 3, 4, 1)] * 3),
    (192, [("ibn", 3, 8, 2)] + [("ibn", 3, 4, 1)] * 3),
    (256, [("ibn", 3, 8, 1)]),
]
STEM_CHANNELS, HEAD_CHANNELS, V2_GROUP_SIZE = 64, 1280, 64


def edgetpu_v2_blocks(table=EDGETPU_V2_S, c_in: int = STEM_CHANNELS) -> list[BlockSpec]:
    """The classifier's blocks from a stage table, before group sizes are applied."""
    specs = []
    for width, rows in table:
        for kind, k, expand, stride in rows:
            specs.append(BlockSpec(kind, c_in, width, expand=expand, k=k, stride=stride))
            c_in = width
    return specs


def replace_kinds(specs: Sequence[BlockSpec], kind: str) -> list[BlockSpec]:
    """Every block turned into ``kind`` (same channels, K, expansion, stride), for
    comparing the variants block by block."""
    return [dataclasses.replace(s, kind=kind, groups=1, c3=None) for s in specs]


def build(batch: int = 1, seed: int = 0, size: int = 224, classes: int = 1000,
          group_sizes: GroupSizes = V2_GROUP_SIZE,
          blocks: Sequence[BlockSpec] | None = None) -> Graph:
    """A MobileNet-EdgeTPU-V2-like classifier: 5x5 stride-2 stem to 64 channels, the
    ``EDGETPU_V2_S`` blocks (or ``blocks``) with ``group_sizes``, a 1x1 head to 1280,
    average pool and a ``classes``-way linear layer; input batch x 3 x size x size."""
    specs = apply_group_sizes(blocks if blocks is not None else edgetpu_v2_blocks(),
                              group_sizes)
    stem = ConvPlan("stem", 3, STEM_CHANNELS, 5, 2)
    return build_network("edgetpu_v2_like", (batch, 3, size, size), specs, stem=stem,
                         head=HEAD_CHANNELS, classes=classes, seed=seed)
