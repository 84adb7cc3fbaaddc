"""A hybrid NPU: several machines behind one shared memory, and the compiler that places each
conv on one of them.

An arch with ``dataflow = "hybrid"`` names its members in ``[hybrid] machines`` (each member
keeps its own section) and the ``objective`` its compiler minimises per layer: ``cycles``,
``energy`` (pJ) or ``energy-delay`` (cycles x pJ). For each conv, in network order, every member
that can run it is costed on the layer alone (its ``estimate``); a member other than the one
whose buffers hold the layer's input also pays the input's move (``transfer``); the member with
the lowest objective of the two together runs the layer (ties go to the first listed).

The move goes through DRAM: every machine's own model already fetches its input from DRAM and
writes its output back (``memory.py``), but each stores activations in its own layout (bitmaps
and packed non-zeros on sparse-pairs, pixel grids on dilated-grid, tile rows on group-tile), so a
change of machine adds one pass over the input tensor: read back in the producer's layout and
written in the consumer's, at the shared memory's DRAM bandwidth and energy, not overlapped with
compute. A non-conv op runs on the shared vector unit and leaves its output where its first input
was; the network's input starts in DRAM, in no machine's layout (no move for the first conv).

The choice is greedy, layer by layer: it sees the move into a layer, not the moves its choice
causes later. Units: cycles, bytes, pJ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .dataflows import Dataflow
from .dataflows.base import element_bytes
from .errors import NpusimError
from .ir import ConvLayer
from .memory import Steps
from .stats import OBJECTIVES, TRANSFER, Counts, LayerStats, Op, price


@dataclass(frozen=True)
class Option:
    """One member's figures on one layer: its stats on the layer alone, the move its input
    would need (None: none), the objective of both (None, with ``why_not``, if it cannot
    run the layer)."""

    machine: str
    stats: LayerStats | None = None
    transfer: LayerStats | None = None
    score: float | None = None
    why_not: str | None = None


@dataclass(frozen=True)
class Placement:
    """Where the compiler put one conv, and why: the chosen machine, its stats, the move of
    the input into it (None: none), the machine that held the input (None: DRAM) and every
    member's figures (``options``, in member order)."""

    layer: str
    machine: Dataflow
    stats: LayerStats
    transfer: LayerStats | None
    source: str | None
    objective: str
    options: tuple[Option, ...]

    def why(self) -> str:
        """One line: each member's objective on the layer (move included), the chosen first."""
        chosen = [o for o in self.options if o.machine == self.machine.name]
        others = [o for o in self.options if o.machine != self.machine.name]
        return f"{self.objective}: " + "; ".join(_figure(o) for o in chosen + others)


def _figure(option: Option) -> str:
    """``sparse-pairs 12,345 (move 512 cycles)`` (a whole score in full, a fractional one to
    four significant digits), or ``group-tile cannot: why``."""
    if option.score is None:
        return f"{option.machine} cannot: {option.why_not}"
    move = f" (move {option.transfer.cycles:,} cycles)" if option.transfer else ""
    score = option.score
    text = f"{int(score):,}" if float(score).is_integer() else f"{score:.4g}"
    return f"{option.machine} {text}{move}"


def input_bytes(layer: ConvLayer) -> int:
    """Bytes of ``layer``'s input tensor as stored (1 per int8 element, 4 per float32)."""
    return int(np.prod(layer.input_shape)) * element_bytes(layer.dtype)


def transfer(layer: ConvLayer, arch) -> LayerStats:
    """The move of ``layer``'s input between two machines' layouts, priced through the memory
    model: one step of no compute that reads the tensor from DRAM and writes it back, so its
    time is both transfers at the DRAM bandwidth (plus latency), its energy both at the DRAM
    energy per byte. Named ``<layer>.move``, dataflow ``transfer``; priced once per input
    shape and dtype on ``arch`` (``kept_costs``)."""
    from .simulate import kept_costs

    key = ("move", layer.input_shape, layer.dtype)
    return kept_costs(arch, key, lambda: _priced_move(layer, arch)).renamed(f"{layer.name}.move")


def _priced_move(layer: ConvLayer, arch) -> LayerStats:
    """``transfer`` priced afresh."""
    size = input_bytes(layer)
    op = Op(f"{layer.name}.move", f"{size:,} B", layer.dtype)
    counts = Counts(TRANSFER, macs=0, dense_macs=0, multipliers=0)
    steps = Steps(compute=np.zeros(1, np.int64), ifmap=0, ifmap_bytes=size, ofmap=0,
                  ofmap_bytes=size)
    return price(op, counts, steps, arch)


def place(layer: ConvLayer, members: tuple[Dataflow, ...],
          cost: Callable[[Dataflow], LayerStats], source: str | None, arch,
          objective: str) -> Placement:
    """Cost ``layer`` on every member that can run it (``cost(df)``: its stats of the layer
    alone, ``df.estimate`` on the layer's masks or, for a machine whose costs follow the
    shapes, those kept for the layer's geometry), add the move of its input if ``source``
    (the machine holding it; None: DRAM) is another, and take the lowest ``objective``; the
    first listed wins a tie."""
    score = OBJECTIVES[objective]
    options = []
    moved = None  # the input's move, priced for the first member that needs it
    for df in members:
        why = df.supports(layer, arch)
        if why:
            options.append(Option(df.name, why_not=why))
            continue
        stats = cost(df)
        cycles, energy = stats.cycles, stats.energy_pj
        move = None
        if source not in (None, df.name):
            if moved is None:
                moved = transfer(layer, arch)
            move = moved
            cycles, energy = cycles + move.cycles, energy + move.energy_pj  # as ``total``'s
        options.append(Option(df.name, stats, move, score(cycles, energy)))
    able = [o for o in options if o.score is not None]
    if not able:
        reasons = "; ".join(f"{o.machine}: {o.why_not}" for o in options)
        raise NpusimError(f"{layer.name}: no machine of the hybrid can run it ({reasons})")
    best = min(able, key=lambda o: o.score)
    chosen = next(df for df in members if df.name == best.machine)
    return Placement(layer.name, chosen, best.stats, best.transfer, source,
                     objective, tuple(options))
