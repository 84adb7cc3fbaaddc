"""Hardware-aware group sizes for the group-tile machine (seed 003, claims 5 and 13, Fig. 7A).

Two tools:

- ``tune_groups(graph, arch)``: for every grouped conv of a network (depthwise
  included), every valid g with the modelled cycles, parameters and utilisation on
  the tile, and the group size that fills the tile's MACs: the largest outputs-per-group
  (the reuse factor of a broadcast input) equal to the MAC count or a divisor of it.
  ``tune_groups_report(model, arch)`` is what ``npusim tune-groups MODEL --arch TILE``
  prints.
- ``pareto(specs, (h, w), arch)``: over per-block choices of block kind and group size
  (the patent's search space), the Pareto front of modelled latency (cycles, minimised)
  against trainable parameters (maximised: capacity the tile pays for in latency).
  Both are sums over blocks, so the front is built block by block, exactly, by merging
  each block's options into the front so far and keeping the non-dominated points.

Costs are the dataflow's own (``group-tile`` ``estimate`` on the layer shapes), in the
tile's native int8 unless told otherwise; only conv layers are counted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .arch import Arch, load_arch
from .area import describe_buffers
from .blocks import GROUPED, BlockSpec, plan, with_group_size
from .blocks.network import grouped_channels
from .dataflows import get as get_dataflow
from .dataflows.base import element_bytes
from .dataflows.group_tile import NAME, WORD_BYTES, Params
from .errors import NpusimError
from .ir import ConvLayer, Graph
from .stats import LayerStats, total


def layer_cost(layer: ConvLayer, arch: Arch) -> LayerStats:
    """The tile's modelled costs of ``layer`` (cycles, utilisation...) from its shape."""
    return get_dataflow(NAME).estimate(layer, None, None, arch)


def layer_params(layer: ConvLayer) -> int:
    """Trainable parameters of a conv layer: weights and biases."""
    return layer.K * layer.Cg * layer.R * layer.S + (layer.K if layer.bias else 0)


def valid_groups(c_in: int, c_out: int) -> list[int]:
    """Every g that divides both channel counts, 1 (full) to gcd (depthwise when equal)."""
    return [g for g in range(1, min(c_in, c_out) + 1) if c_in % g == 0 and c_out % g == 0]


def broadcast_cycles(size: int, p: Params, elem: int = 1) -> float:
    """Steady-state cycles per broadcast input of a layer with ``size`` outputs per group:
    its output blocks, times the cycles a tap takes to fetch the step's weights (``elem``
    bytes each) from the wide memory, over the subsets fed at once. Latency is this times
    the layer's broadcasts (pixels x C x R x S), whatever g is."""
    subset = min(size, p.macs)
    subsets = min(p.bus_inputs, p.macs // subset)
    words = math.ceil(subset * subsets * elem / WORD_BYTES)
    tap = max(1, math.ceil(words / p.wide_words_per_cycle))
    return math.ceil(size / subset) * tap / subsets


def filling_groups(c_in: int, c_out: int, p: Params, elem: int = 1) -> int:
    """The g the tile's description calls for (claim 5): the fewest cycles per broadcast
    (group size within the MACs, the bus lanes and the wide memory's weights per cycle),
    then the largest group size. At equal cycles per broadcast the larger group is the one
    that keeps more MACs busy (useful MACs a cycle = group size / cycles per broadcast), so
    this is the utilisation rule of Fig. 8; the latency rule, which at equal cycles takes
    the fewest off-chip bytes and parameters, is ``LayerChoice.preferred``. On a one-lane
    bus with a wide memory that feeds every MAC, S = the MAC count; with several lanes, a
    divisor of it; with a narrower wide memory, the weights it delivers a cycle."""
    return min(valid_groups(c_in, c_out),
               key=lambda g: (broadcast_cycles(c_out // g, p, elem), g))


@dataclass(frozen=True)
class Candidate:
    """One g for one layer: group size (outputs per group), partition S = C/g, costs:
    ``cycles`` at the arch's DRAM bandwidth (stalls included), ``compute_cycles`` those
    cycles without the DRAM's stalls (in the output blocks the compiler chose for that
    bandwidth: more than the stall-free tile's where it narrowed them), utilisation over
    ``cycles``, ``dram_bytes`` moved off chip (parameters, inputs, outputs, spills)."""

    groups: int
    group_size: int
    partition: int
    cycles: int
    params: int
    utilisation: float
    compute_cycles: int = 0
    dram_bytes: int = 0


@dataclass(frozen=True)
class LayerChoice:
    """A grouped layer: its shape, g now, the g that fills the MACs, and every candidate."""

    name: str
    shape: str
    groups: int
    chosen: int
    candidates: tuple[Candidate, ...]

    def candidate(self, groups: int) -> Candidate:
        return next(c for c in self.candidates if c.groups == groups)

    @property
    def preferred(self) -> int:
        """The patent's aim (latency, then the off-chip fetch of parameters): the g of
        fewest cycles with the stalls; among equals the fewest DRAM bytes, then the fewest
        parameters."""
        return min(self.candidates, key=lambda c: (c.cycles, c.dram_bytes, c.params)).groups


@dataclass(frozen=True)
class TuneResult:
    """Per grouped layer the candidates, and the network's conv cycles and parameters as
    given and with every grouped layer at its MAC-filling g."""

    arch: str
    macs: int
    layers: tuple[LayerChoice, ...]
    memory: str = ""
    dtype: str = "int8"

    def totals(self, which: str) -> tuple[int, int]:
        """(cycles, parameters) over the grouped layers with g ``'given'``, ``'chosen'``
        (MAC-filling) or ``'preferred'`` (``LayerChoice.preferred``)."""
        pick = {"given": lambda lc: lc.groups, "chosen": lambda lc: lc.chosen,
                "preferred": lambda lc: lc.preferred}[which]
        picks = [lc.candidate(pick(lc)) for lc in self.layers]
        return sum(c.cycles for c in picks), sum(c.params for c in picks)


def _candidates(layer: ConvLayer, arch: Arch) -> tuple[Candidate, ...]:
    out = []
    for g in valid_groups(layer.C, layer.K):
        trial = dataclasses.replace(layer, groups=g)
        st = layer_cost(trial, arch)
        out.append(Candidate(g, layer.K // g, layer.C // g, st.cycles, layer_params(trial),
                             st.utilisation, st.compute_cycles, st.dram_bytes))
    return tuple(out)


def tune_groups(graph: Graph, arch: Arch | str, dtype: str = "int8") -> TuneResult:
    """Candidates and the MAC-filling g for every grouped conv of ``graph`` on ``arch``'s
    group tile (costs in ``dtype``)."""
    arch = load_arch(arch)
    p = arch.params(NAME)
    choices = []
    for name, layer in graph.layers.items():
        if layer.groups == 1:
            continue
        layer = layer.with_dtype(dtype)
        choices.append(LayerChoice(name, layer.describe(), layer.groups,
                                   filling_groups(layer.C, layer.K, p,
                                                  element_bytes(dtype)),
                                   _candidates(layer, arch)))
    return TuneResult(arch.name, p.macs, tuple(choices), describe_buffers(arch, NAME), dtype)


def render(result: TuneResult) -> str:
    """The tune result as text: one block per layer, one line per candidate g."""
    lines = [f"group sizes for {result.arch} ({result.macs} {result.dtype} MACs per tile, "
             f"{result.memory}); "
             "group size = outputs per group = reuse of each broadcast input; cycles at the "
             "DRAM bandwidth, their compute cycles (without the DRAM's stalls) beside them"]
    for lc in result.layers:
        lines.append(f"\n{lc.name}  {lc.shape}  (g now {lc.groups}, fills the MACs: "
                     f"g {lc.chosen}, preferred (fewest cycles, then DRAM bytes, then "
                     f"parameters): g {lc.preferred})")
        lines.append(f"  {'g':>5} {'size':>5} {'S=C/g':>6} {'cycles':>12} {'compute':>12} "
                     f"{'DRAM bytes':>12} {'params':>10} {'util':>7}")
        for c in lc.candidates:
            mark = "".join(m for m, g in ((" <- preferred", lc.preferred),
                                          (" <- fills MACs", lc.chosen)) if c.groups == g)
            lines.append(f"  {c.groups:>5} {c.group_size:>5} {c.partition:>6} {c.cycles:>12,} "
                         f"{c.compute_cycles:>12,} {c.dram_bytes:>12,} {c.params:>10,} "
                         f"{c.utilisation:>6.1%}{mark}")
    if not result.layers:
        lines.append(f"\nno grouped conv layer (groups > 1) to tune: every conv has one group "
                     f"(npusim run MODEL --arch {result.arch} gives their costs on the tile)")
        return "\n".join(lines)
    (gc, gp), (cc, cp), (pc, pp) = (result.totals(w) for w in ("given", "chosen", "preferred"))
    lines.append(f"\ngrouped layers as given: {gc:,} cycles, {gp:,} parameters; "
                 f"at the MAC-filling g: {cc:,} cycles, {cp:,} parameters; "
                 f"at the preferred g: {pc:,} cycles, {pp:,} parameters")
    return "\n".join(lines)


def tune_groups_report(model: str, arch: str | None = None, *, batch: int | None = None,
                       size: int | None = None, dtype: str = "int8") -> str:
    """``npusim tune-groups MODEL --arch TILE``: load the model (zoo name or file), tune its
    grouped layers on the arch's group tile, and return the text to print."""
    from .frontends import load_model

    arch = load_arch(arch or "group-tile-64mac")
    if NAME not in arch.sections and arch.dataflow != NAME:
        raise NpusimError(f"arch {arch.name!r}: has no [{NAME}] section; use a group-tile "
                          "preset (group-tile-32mac, group-tile-64mac) or add the section")
    graph = load_model(model, batch=batch,
                       input_shape=(batch or 1, 3, size, size) if size else None)
    if not isinstance(graph, Graph):
        raise NpusimError(f"{model}: a topology CSV has no weights to regroup; give a network")
    return render(tune_groups(graph, arch, dtype))


@dataclass(frozen=True)
class Point:
    """One network on the front: modelled conv cycles, trainable parameters, its blocks."""

    cycles: int
    params: int
    blocks: tuple[BlockSpec, ...]


def block_stats(spec: BlockSpec, hw: tuple[int, int], arch: Arch,
                dtype: str = "int8") -> tuple[LayerStats, int]:
    """(summed LayerStats of the block's convs on the tile, parameters) on an h x w input."""
    stats, params, (h, w) = [], 0, hw
    for c in plan(spec):
        layer = ConvLayer(1, c.c_in, h, w, c.c_out, c.k, c.k, c.stride, c.k // 2,
                          groups=c.groups, bias=True, dtype=dtype, name=c.name)
        stats.append(layer_cost(layer, arch))
        params += c.params
        h, w = layer.P, layer.Q
    return total(stats, spec.kind), params


def block_cost(spec: BlockSpec, hw: tuple[int, int], arch: Arch, dtype: str) -> tuple[int, int]:
    """(conv cycles on the tile, parameters) of one block on an h x w input."""
    st, params = block_stats(spec, hw, arch, dtype)
    return st.cycles, params


def hardware_groups(spec: BlockSpec, arch: Arch) -> BlockSpec:
    """A grouped block with g set by ``filling_groups`` for its grouped conv on ``arch``."""
    if spec.kind not in GROUPED:
        return spec
    base = dataclasses.replace(spec, groups=1)
    c_in, c_out = grouped_channels(base)
    return with_group_size(base, c_out // filling_groups(c_in, c_out, arch.params(NAME)))


def block_options(spec: BlockSpec, kinds: Sequence[str], group_sizes: Sequence[int]):
    """Every (kind, group size) variant of a block position that can be built."""
    out = []
    for kind in kinds:
        base = dataclasses.replace(spec, kind=kind, groups=1, c3=None)
        sizes = group_sizes if kind in GROUPED else [None]
        for size in sizes:
            if size is None:
                out.append(base)
            elif grouped_channels(base)[1] % size == 0 and _buildable(base, size):
                out.append(with_group_size(base, size))
    return out


def _buildable(spec: BlockSpec, size: int) -> bool:
    try:
        plan(with_group_size(spec, size))
        return True
    except NpusimError:
        return False


def _prune(points: list[Point]) -> list[Point]:
    """The non-dominated points: no other is as fast with at least as many parameters."""
    front, best = [], -1
    for p in sorted(points, key=lambda p: (p.cycles, -p.params)):
        if p.params > best:
            front.append(p)
            best = p.params
    return front


def pareto(specs: Sequence[BlockSpec], hw: tuple[int, int], arch: Arch | str, *,
           kinds: Sequence[str] = ("ibn", "fused-ibn", "fused-grouped-ibn", "grouped-ibn"),
           group_sizes: Sequence[int] = (8, 16, 32, 64), dtype: str = "int8") -> list[Point]:
    """Pareto front of (cycles, parameters) over a kind and group size per block position
    of ``specs`` (channels, K, expansion, stride kept), on an h x w input to the first."""
    arch = load_arch(arch)
    front = [Point(0, 0, ())]
    for spec in specs:
        options = [(o, *block_cost(o, hw, arch, dtype)) for o in block_options(spec, kinds,
                                                                               group_sizes)]
        front = _prune([Point(p.cycles + c, p.params + n, p.blocks + (o,))
                        for p in front for o, c, n in options])
        hw = (-(-hw[0] // spec.stride), -(-hw[1] // spec.stride))
    return front
