"""The inverted-bottleneck (IBN) block family of seed 003, Fig. 4, as plans of conv layers.

Notation: input h x w x c1, expansion to c2 channels, K x K main conv (to c3 channels
where grouped), 1x1 projection (406) to ``c_out``; every variant ends with that
projection, ReLU follows every conv but the projection (a linear bottleneck), and the
residual add (418) is optional when stride is 1 and c1 == c_out. Strides sit on the
K x K conv. ``g`` is the number of groups of the grouped K x K conv.

=========================== =========================================================
kind                        layers (stride on the K x K)
=========================== =========================================================
ibn (402)                   1x1 c1->c2, KxK depthwise c2, 1x1 c2->out
fused-ibn (407)             KxK full c1->c2, 1x1 c2->out
grouped-ibn-proj (414)      1x1 c1->c2, KxK g-group c2->c3 (c3 < c2), 1x1 c3->out
grouped-ibn-expand (416)    1x1 c1->c2, KxK g-group c2->c3 (c3 > c2), 1x1 c3->out
fused-grouped-ibn (422)     KxK g-group c1->c2, 1x1 c2->out
grouped-ibn (432)           1x1 c1->c2, KxK g-group c2->c2, 1x1 c2->out
fused-proj-grouped-ibn      1x1 c1->c2, KxK g-group c2->out (projection fused in the
                            KxK), 1x1 out->out (its unfused part: mixing across groups)
=========================== =========================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LayerError

KINDS = ("ibn", "fused-ibn", "grouped-ibn-proj", "grouped-ibn-expand", "fused-grouped-ibn",
         "grouped-ibn", "fused-proj-grouped-ibn")
GROUPED = KINDS[2:]


@dataclass(frozen=True)
class ConvPlan:
    """One conv of a block: channels in/out, kernel, stride, groups, ReLU after it."""

    name: str
    c_in: int
    c_out: int
    k: int
    stride: int = 1
    groups: int = 1
    relu: bool = True

    @property
    def params(self) -> int:
        """Trainable parameters: weights (c_out x c_in/groups x k x k) and biases."""
        return self.c_out * (self.c_in // self.groups) * self.k * self.k + self.c_out

    def macs(self, h: int, w: int) -> int:
        """Multiply-accumulates on an h x w input ('same' padding)."""
        p, q = -(-h // self.stride), -(-w // self.stride)
        return p * q * self.c_out * (self.c_in // self.groups) * self.k * self.k


@dataclass(frozen=True)
class BlockSpec:
    """One block of ``kind``: c1 -> c_out, expansion c2 = c1 * expand (or ``c2``), K, g,
    stride, the grouped conv's output c3 (defaults per kind), and the residual add
    (``None``: when the shapes allow it)."""

    kind: str
    c_in: int
    c_out: int
    expand: int = 4
    k: int = 3
    groups: int = 1
    stride: int = 1
    c2: int | None = None
    c3: int | None = None
    residual: bool | None = None

    @property
    def mid(self) -> int:
        """c2: the expanded width."""
        return self.c2 if self.c2 is not None else self.c_in * self.expand

    @property
    def main_out(self) -> int:
        """c3: the grouped K x K conv's output width."""
        if self.c3 is not None:
            return self.c3
        return {"grouped-ibn-proj": self.mid // 2, "grouped-ibn-expand": self.mid * 2,
                "fused-proj-grouped-ibn": self.c_out}.get(self.kind, self.mid)

    @property
    def has_residual(self) -> bool:
        fits = self.stride == 1 and self.c_in == self.c_out
        return fits if self.residual is None else self.residual


def _err(spec: BlockSpec, where: str, field: str, value, rule: str) -> LayerError:
    return LayerError(f"{where}.{field}={value!r}: {rule} (block kind {spec.kind!r})")


def validate(spec: BlockSpec, where: str) -> None:
    """Raise ``LayerError`` naming the block and field if the spec cannot be built."""
    if spec.kind not in KINDS:
        raise LayerError(f"{where}.kind={spec.kind!r}: must be one of {', '.join(KINDS)}")
    for field in ("c_in", "c_out", "expand", "k", "groups", "stride"):
        if getattr(spec, field) < 1:
            raise _err(spec, where, field, getattr(spec, field), "must be >= 1")
    c2, c3 = spec.mid, spec.main_out
    if spec.kind == "grouped-ibn-proj" and not c3 < c2:
        raise _err(spec, where, "c3", c3, f"must be < c2={c2} (an initial channel reduction)")
    if spec.kind == "grouped-ibn-expand" and not c3 > c2:
        raise _err(spec, where, "c3", c3, f"must be > c2={c2} (a progressive expansion)")
    if spec.kind in GROUPED:
        g_in = spec.c_in if spec.kind == "fused-grouped-ibn" else c2
        g_out = c2 if spec.kind == "fused-grouped-ibn" else c3
        if g_in % spec.groups or g_out % spec.groups:
            raise _err(spec, where, "groups", spec.groups,
                       f"must divide the grouped conv's {g_in} inputs and {g_out} outputs")
    if spec.residual and not (spec.stride == 1 and spec.c_in == spec.c_out):
        raise _err(spec, where, "residual", True, "needs stride 1 and c_in == c_out "
                   f"(got stride {spec.stride}, {spec.c_in} -> {spec.c_out})")


def plan(spec: BlockSpec, name: str = "block") -> list[ConvPlan]:
    """The block's convs in order (Fig. 4), validated."""
    validate(spec, name)
    c1, c2, c3, co, k, g, s = (spec.c_in, spec.mid, spec.main_out, spec.c_out, spec.k,
                               spec.groups, spec.stride)
    expand = ConvPlan(f"{name}_expand", c1, c2, 1)
    project = ConvPlan(f"{name}_project", c3, co, 1, relu=False)
    layers = {
        "ibn": [expand, ConvPlan(f"{name}_dw", c2, c2, k, s, c2),
                ConvPlan(f"{name}_project", c2, co, 1, relu=False)],
        "fused-ibn": [ConvPlan(f"{name}_fused", c1, c2, k, s),
                      ConvPlan(f"{name}_project", c2, co, 1, relu=False)],
        "fused-grouped-ibn": [ConvPlan(f"{name}_fused_group", c1, c2, k, s, g),
                              ConvPlan(f"{name}_project", c2, co, 1, relu=False)],
    }.get(spec.kind)
    return layers or [expand, ConvPlan(f"{name}_group", c2, c3, k, s, g), project]


def params(spec: BlockSpec) -> int:
    """Trainable parameters of the block (weights and biases)."""
    return sum(c.params for c in plan(spec))


def macs(spec: BlockSpec, h: int, w: int) -> int:
    """Multiply-accumulates of the block on an h x w input (the residual add aside)."""
    total, size = 0, (h, w)
    for c in plan(spec):
        total += c.macs(*size)
        size = (-(-size[0] // c.stride), -(-size[1] // c.stride))
    return total
