"""What a sweep computes once per model and reuses across arch points, in mode estimate.

In mode estimate the activations come from the dense engine and a conv's costs from
``Dataflow.estimate`` on the non-zero masks of its input and weights; neither the activations
nor the masks depend on the arch (``Dataflow.masks`` takes the tensors alone, and every
machine that reads masks takes the same). The first point of a (model, density, batch, seed,
dtype, machines) in a worker runs the network once through ``simulate``'s own node loop,
keeping each conv's masks; it and every later point then price the kept masks on their arch,
layer by layer, with the calls ``simulate`` makes (a hybrid's members each cost every conv
they can run, and ``simulate``'s own choice places it), so their stats are those ``simulate``
would give.

Each conv's masks come with a ``Memo`` per machine: a machine that can
(``Dataflow.estimate_memo``) keeps there what it counted from the masks (or the shape) that
other archs share (input-reuse: the regions' work per region geometry and processing units,
the loop order per buffer sizes, the counts and steps per machine; sparse-pairs: its pair
counts, and the counts and steps per machine; group-tile: each output-block width's schedule
and steps per machine and tile buffers; dilated-grid: the plans, their counts and steps per
machine; systolic: the counts and fold steps per array), so a point that changes only the
memory prices kept steps, and one that changes the units counts only what the units change.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from .. import ops
from ..dataflows.base import Machine, Memo
from ..ir import ConvLayer

KEEP = 4  # mask sets kept per worker (a ResNet-18's are about 30 MB)
# Memo entries kept per conv and kind (a ResNet-18's region work for one geometry is about
# 15 MB; a sweep of 10 unit counts keeps every one); the blocks of the loop orders are only
# needed by the point that chose its order on them (and later points with other memories).
# Group-tile's widths (one to three a conv and arch) hold steps of every group of work units:
# MobileNetV2's in float32, 166 MiB for one arch; dilated-grid's plan steps 17 MiB for
# ResNet-50's, the systolic array's folds 11 MiB for VGG-16's; sparse-pairs' counts and steps
# (a few steps a conv) are small, its pair counts (one, 4 bytes an output) 9 MiB for ResNet-18
LIMITS = {"counts": 4, "work": 10, "ordered": 10, "queue": 20, "steps": 10, "blocks": 2,
          "counted": 10, "widths": 6, "plans": 10, "plan steps": 6, "folds": 10, "pairs": 1}
_masks: OrderedDict = OrderedDict()


class _MaskRecorder:
    """The one machine of a walk that counts nothing: it keeps each conv's layer and masks
    (``Dataflow.masks``': the input's and the weights' non-zeros, or none when no machine of
    the point reads them), in node order, and accepts every conv (each machine is checked
    when the masks are priced)."""

    name = "masks"

    def __init__(self, reads_masks: bool):
        self.reads_masks, self.kept = reads_masks, []

    def supports(self, layer, arch) -> None:
        return None

    def masks(self, x, w) -> tuple:
        return Machine.masks(self, x, w)

    def estimate(self, layer, x_mask, w_mask, arch) -> None:
        for m in (x_mask, w_mask):
            if isinstance(m, np.ndarray):
                m.setflags(write=False)  # kept for later points: no caller may change them
        self.kept.append((layer, x_mask, w_mask))


@dataclass(frozen=True, eq=False)
class _Conv:
    """A conv of the plan: its layer, masks (None where no machine reads them) and a ``Memo``
    per machine, by name, made as each first prices it: ``memos`` the conv's own, for the
    machines that read masks; ``shared`` one dict for every conv of the plan with the same
    geometry, for the machines whose costs follow the shapes alone (a ResNet's repeated
    blocks are counted once a point)."""

    layer: ConvLayer
    x_mask: np.ndarray | None
    w_mask: np.ndarray | None
    shared: dict
    memos: dict = field(default_factory=dict)

    def memo(self, df) -> Memo:
        """``df``'s memo for this conv (made on its first call)."""
        memos = self.memos if df.reads_masks else self.shared
        if df.name not in memos:
            memos[df.name] = Memo(LIMITS)
        return memos[df.name]


def estimate(key: tuple, graph, x, arch, dtype: str, dataflow: str | None = None):
    """``simulate(graph, x, arch, mode='estimate', dtype=dtype, dataflow=dataflow)``'s
    ``SimResult`` (without outputs), the masks reused from an earlier call with the same
    ``key`` (which must name the model, density, batch, seed and input: everything ``x`` and
    the weights depend on) and machines."""
    from ..simulate import RunConfig, SimResult

    cfg = RunConfig.of(arch, dataflow, mode="estimate", dtype=dtype)
    start = time.perf_counter()
    full = (*key, dtype, tuple(df.name for df in cfg.machines))
    if full in _masks:
        _masks.move_to_end(full)
    else:
        _masks[full] = _plan(graph, _recorded(graph, x, cfg), dtype)
        while len(_masks) > KEEP:
            _masks.popitem(last=False)
    stats, placements = _priced(graph, _masks[full], cfg)
    return SimResult(None, stats, cfg.arch, "estimate", dtype, cfg.name,
                     time.perf_counter() - start, placements=placements)


def _recorded(graph, x, cfg) -> list:
    """One walk of the network in mode estimate (the dense engine's activations): each conv's
    layer and masks, in node order."""
    from ..simulate import RunConfig, walk_stats

    recorder = _MaskRecorder(any(df.reads_masks for df in cfg.machines))
    walk_stats(graph, x, RunConfig(cfg.arch, (recorder,), "estimate", cfg.dtype))
    return recorder.kept


def _plan(graph, kept: list, dtype: str) -> list:
    """Per node, in order: a conv's ``_Conv``, or a vector op's counts
    (``simulate.vector_work``: they follow the shapes alone)."""
    from ..simulate import layer_geometry, vector_work

    convs, shared = iter(kept), {}

    def conv(layer, x_mask, w_mask) -> _Conv:
        return _Conv(layer, x_mask, w_mask, shared.setdefault(layer_geometry(layer), {}))

    return [conv(*next(convs)) if isinstance(node.op, ops.Conv) else
            vector_work(node.name, node.op, [graph.shapes[n] for n in node.inputs],
                        graph.shapes[node.name], dtype) for node in graph.nodes]


def _priced(graph, plan: list, cfg) -> tuple[list, list]:
    """Each node's stats on ``cfg.arch`` from its ``_plan`` entry, and a hybrid's placements:
    a conv's by its machine (``check_supports``: refused, naming it, where it cannot run),
    or on a hybrid by every member that can run it and ``simulate``'s choice among them
    (``decide``: with the moves of inputs between members), each from the kept masks and
    its memo; a vector op's counts priced."""
    from ..simulate import Undecided, check_supports, decide, vector_priced

    single = len(cfg.machines) == 1
    stats = []
    for entry in plan:
        if not isinstance(entry, _Conv):
            stats.append(vector_priced(entry, cfg.arch))
            continue
        layer = entry.layer
        if single:
            check_supports(cfg.machines[0], layer, cfg.arch)
        costs = {df.name: df.estimate_memo(
            layer, *((entry.x_mask, entry.w_mask) if df.reads_masks else (None, None)),
            cfg.arch, entry.memo(df))
            for df in cfg.machines if df.supports(layer, cfg.arch) is None}
        stats.append(costs[cfg.machines[0].name] if single else Undecided(layer, costs))
    if single:
        return stats, []
    return decide(graph, stats, cfg)
