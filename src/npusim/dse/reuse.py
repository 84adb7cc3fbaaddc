"""What a sweep computes once per model and reuses across arch points, in mode estimate.

In mode estimate the activations come from the dense engine and a conv's costs from
``Dataflow.estimate`` on the non-zero masks of its input and weights; neither the activations
nor the masks depend on the arch (``Dataflow.masks`` takes the tensors alone). The first point of
a (model, density, batch, seed, dtype, dataflow) in a worker runs the network once through
``simulate``'s own node loop, keeping each conv's masks; every later point only prices the kept
masks on its arch, layer by layer, with the same calls ``simulate`` makes, so its stats are
those ``simulate`` would give.

Each conv's masks come with a ``Memo``: a machine that can (``Dataflow.estimate_memo``) keeps
there what it counted from the masks (or the shape) that other archs share (input-reuse: the
regions' work per region geometry and processing units, the loop order per buffer sizes, the
counts and steps per machine; sparse-pairs: the counts and steps per machine; group-tile: each
output-block width's schedule and steps per machine and tile buffers; dilated-grid: the plans,
their counts and steps per machine; systolic: the counts and fold steps per array), so a point
that changes only the memory prices kept steps, and one that changes the units counts only
what the units change.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from .. import ops
from ..dataflows.base import Memo

KEEP = 4  # mask sets kept per worker (a ResNet-18's are about 30 MB)
# Memo entries kept per conv and kind (a ResNet-18's region work for one geometry is about
# 15 MB; a sweep of 10 unit counts keeps every one); the blocks of the loop orders are only
# needed by the point that chose its order on them (and later points with other memories).
# Group-tile's widths (one to three a conv and arch) hold steps of every group of work units:
# MobileNetV2's in float32, 166 MiB for one arch; dilated-grid's plan steps 17 MiB for
# ResNet-50's, the systolic array's folds 11 MiB for VGG-16's; sparse-pairs' counts and steps
# (a few steps a conv) are small
LIMITS = {"counts": 4, "work": 10, "ordered": 10, "queue": 20, "steps": 10, "blocks": 2,
          "counted": 10, "widths": 6, "plans": 10, "plan steps": 6, "folds": 10}
_masks: OrderedDict = OrderedDict()


class _Recorder:
    """A dataflow that keeps the masks ``estimate`` is called with, in call order."""

    def __init__(self, df):
        self.df, self.kept = df, []

    def __getattr__(self, name):
        return getattr(self.df, name)

    def estimate(self, layer, x_mask, w_mask, arch):
        for m in (x_mask, w_mask):
            if isinstance(m, np.ndarray):
                m.setflags(write=False)  # kept for later points: no caller may change them
        memo = Memo(LIMITS)
        self.kept.append((layer, x_mask, w_mask, memo))
        return self.df.estimate_memo(layer, x_mask, w_mask, arch, memo)

    count = estimate  # the parts of ``estimate`` (``Dataflow.count``): all in the first

    def to_price(self, layer, arch, counted):
        return counted


def estimate(key: tuple, graph, x, arch, dtype: str, dataflow: str | None = None):
    """``simulate(graph, x, arch, mode='estimate', dtype=dtype)``'s ``SimResult``, the masks
    reused from an earlier call with the same ``key`` (which must name the model, density, batch,
    seed and input: everything ``x`` and the weights depend on)."""
    from ..dataflows import get
    from ..simulate import SimResult

    df = get(dataflow or arch.dataflow)
    start = time.perf_counter()
    full = (*key, dtype, df.name)
    if full in _masks:
        _masks.move_to_end(full)
        stats = _priced(_masks[full], df, arch)
    else:
        stats, kept = _recorded(graph, x, df, arch, dtype)
        _masks[full] = _plan(graph, kept, dtype)
        while len(_masks) > KEEP:
            _masks.popitem(last=False)
    return SimResult(None, stats, arch, "estimate", dtype, df.name, time.perf_counter() - start)


def _recorded(graph, x, df, arch, dtype: str):
    """One whole estimate run: (its stats, each conv's layer, masks and memo in node order)."""
    from ..simulate import RunConfig, _Costs, _run_nodes

    recorder = _Recorder(df)
    with _Costs(background=False) as costs:
        _, stats, _ = _run_nodes(graph, x, RunConfig(arch, (recorder,), "estimate", dtype),
                                 costs)
    return [costs.result(s) for s in stats], recorder.kept


def _plan(graph, kept: list, dtype: str) -> list:
    """Per node, in order: a conv's (layer, masks, memo) as recorded, or a vector op's counts
    (``simulate.vector_work``: they follow the shapes alone)."""
    from ..simulate import vector_work

    convs = iter(kept)
    return [next(convs) if isinstance(node.op, ops.Conv) else
            vector_work(node.name, node.op, [graph.shapes[n] for n in node.inputs],
                        graph.shapes[node.name], dtype) for node in graph.nodes]


def _priced(plan: list, df, arch) -> list:
    """Each node's stats on ``arch`` from its ``_plan`` entry: a conv's by ``df`` from its kept
    masks, a vector op's counts priced."""
    from ..simulate import check_supports, vector_priced

    stats = []
    for entry in plan:
        if isinstance(entry[-1], Memo):  # a conv: (layer, x_mask, w_mask, memo)
            layer, x_mask, w_mask, memo = entry
            check_supports(df, layer, arch)
            stats.append(df.estimate_memo(layer, x_mask, w_mask, arch, memo))
        else:
            stats.append(vector_priced(entry, arch))
    return stats
