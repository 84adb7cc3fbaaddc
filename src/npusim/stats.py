"""What the hardware spends: ``LayerStats`` per layer, summed into network totals.

Every dataflow fills the same ``LayerStats``; its own counts go in ``extra``
(additive counts only, so totals are plain sums; two exceptions: keys starting
with ``peak_`` hold a size the hardware must provide, merged by maximum, and keys
ending in ``_by_unit`` hold a tuple of one count per hardware unit, summed unit by unit). Ratios
(utilisation, mapping efficiency) are derived from additive fields, never stored, so a sum of layers
gives the right network ratio. Energy comes from one function, ``energy_pj``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import NamedTuple

from .memory import Steps, Timing, time_layer, time_layers, with_reconfig

TENSORS = ("ifmap", "filter", "ofmap")
TRANSFER = "transfer"  # the ``dataflow`` of a hybrid's move of a layer's input (``hybrid``)
# what a compiler's choice for a layer minimises (a hybrid's machine, group-tile's output-block
# width): each objective of the choice's cycles and energy (pJ)
OBJECTIVES: dict[str, Callable[[int, float], float]] = {
    "cycles": lambda cycles, energy: float(cycles),
    "energy": lambda cycles, energy: energy,
    "energy-delay": lambda cycles, energy: float(cycles) * energy,
}


@dataclass(frozen=True)
class LayerStats:
    """Costs of one layer (or, summed, of a network).

    Units: MACs and cycles are counts; bytes are bytes; energy is pJ.
    ``macs`` = useful multiply-accumulates; ``products`` = every multiply performed
    (>= ``macs``; the energy of the multipliers is charged on it).
    ``cycles`` = ``compute_cycles`` (the datapath busy, stall-free) + the stall cycles
    by cause (waiting on DRAM for the ifmap, the filters, the ofmap write-back, on
    the SRAM ports, or on loading the layer's configuration into the units); ``bound``
    names the resource busiest over the layer: ``compute``, ``bus`` (the interconnect sets
    the compute time), ``dram`` or ``sram`` ("" in a sum of layers with different bounds).
    Without ``compute_cycles`` it is ``cycles`` minus the stalls.
    ``pe_cycles`` = multipliers x cycles (the work the machine could have done).
    ``mapped_pe_cycles`` = multiplier-cycles of PEs that had work mapped to them.
    """

    name: str
    dataflow: str
    shape: str = ""
    dense_macs: int = 0
    macs: int = 0
    products: int = 0
    cycles: int = 0
    pe_cycles: int = 0
    mapped_pe_cycles: int = 0
    sram_ifmap_bytes: int = 0
    sram_filter_bytes: int = 0
    sram_ofmap_bytes: int = 0
    dram_ifmap_bytes: int = 0
    dram_filter_bytes: int = 0
    dram_ofmap_bytes: int = 0
    vector_ops: int = 0
    energy_pj: float = 0.0
    compute_cycles: int | None = None
    stall_dram_ifmap_cycles: int = 0
    stall_dram_filter_cycles: int = 0
    stall_dram_ofmap_cycles: int = 0
    stall_sram_cycles: int = 0
    bound: str = ""
    stall_reconfig_cycles: int = 0
    extra: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if self.compute_cycles is None:
            object.__setattr__(self, "compute_cycles", self.cycles - self.stall_cycles)

    @property
    def stall_cycles(self) -> int:
        """Cycles the datapath waits on memory (DRAM or SRAM ports)."""
        return (self.stall_dram_ifmap_cycles + self.stall_dram_filter_cycles
                + self.stall_dram_ofmap_cycles + self.stall_sram_cycles
                + self.stall_reconfig_cycles)

    @property
    def stalled_share(self) -> float:
        """Stall cycles / cycles, 0..1."""
        return self.stall_cycles / self.cycles if self.cycles else 0.0

    @property
    def utilisation(self) -> float:
        """Useful MACs / (multipliers x cycles), 0..1. At most 1: a 1x1 output-stationary
        array does a MAC every cycle, but its cycles (SCALE-Sim's count, the index of the
        last busy cycle) are one fewer than its MACs."""
        return min(1.0, self.macs / self.pe_cycles) if self.pe_cycles else 0.0

    @property
    def mapping_efficiency(self) -> float:
        """Fraction of multiplier-cycles with work mapped to them, 0..1."""
        return self.mapped_pe_cycles / self.pe_cycles if self.pe_cycles else 0.0

    @property
    def sram_bytes(self) -> int:
        return self.sram_ifmap_bytes + self.sram_filter_bytes + self.sram_ofmap_bytes

    @property
    def dram_bytes(self) -> int:
        return self.dram_ifmap_bytes + self.dram_filter_bytes + self.dram_ofmap_bytes

    def __add__(self, other: LayerStats) -> LayerStats:
        values = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name == "extra":
                values["extra"] = {k: _merge(k, a.get(k, 0), b.get(k, 0)) for k in {**a, **b}}
            elif isinstance(a, str):
                values[f.name] = a if a == b else ""
            else:
                values[f.name] = a + b
        return LayerStats(**values)

    def renamed(self, name: str) -> LayerStats:
        """These stats under another layer's ``name`` (itself when the name is the same):
        a copy of the fields, without ``dataclasses.replace``'s checks (about 10 us)."""
        if name == self.name:
            return self
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__, name=name)
        return copy

    def as_dict(self, extras: bool = True) -> dict:
        """Flat dict for JSON/CSV: every field, the derived ratios and totals, and (``extras``)
        the dataflow's own counts inlined, after them."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out.update(utilisation=self.utilisation, mapping_efficiency=self.mapping_efficiency,
                   sram_bytes=self.sram_bytes, dram_bytes=self.dram_bytes,
                   stall_cycles=self.stall_cycles, stalled_share=self.stalled_share)
        if extras:  # a field of the same name as an extra count stays the field
            out.update({k: v for k, v in self.extra.items() if k not in out})
        return out


def _merge(key: str, a, b):
    """Two layers' values of an ``extra`` key: ``peak_*`` by maximum, ``*_by_unit`` tuples
    unit by unit (a missing key counts as zeros), the rest summed."""
    if key.startswith("peak_"):
        return max(a, b)
    if key.endswith("_by_unit"):
        a, b = a or (0,) * len(b), b or (0,) * len(a)
        if len(a) != len(b):
            return ()  # layers on machines with different unit counts: no common breakdown
        return tuple(x + y for x, y in zip(a, b, strict=True))
    return a + b


def total(stats: list[LayerStats], name: str = "total") -> LayerStats:
    """Network totals: the sum of the layers' stats, ``stats[0] + stats[1] + ...`` (each field
    and ``extra`` key folded in that order, as ``__add__`` does, without the sums between)."""
    if not stats:
        return LayerStats(name, "")
    values = {}
    for f in fields(LayerStats):
        if f.name == "extra":
            continue
        a = getattr(stats[0], f.name)
        if isinstance(a, str):
            values[f.name] = a if all(getattr(s, f.name) == a for s in stats) else ""
            continue
        for s in stats[1:]:
            a = a + getattr(s, f.name)
        values[f.name] = a
    keys = dict.fromkeys(k for s in stats for k in s.extra)  # in order of first appearance
    extra = {k: _folded(k, [s.extra[k] for s in stats if k in s.extra], len(stats))
             for k in keys}
    return LayerStats(**values, extra=extra).renamed(name)


def _folded(key: str, present: list, layers: int):
    """``_merge`` of an ``extra`` key's values over ``layers`` layers, in order, ``present``
    being those of the layers that have it (a layer without it counts as 0): a sum, a
    maximum (with 0 if a layer lacks it) or unit tuples added in turn."""
    if key.startswith("peak_"):
        return max(present) if len(present) == layers else max(0, *present)
    if key.endswith("_by_unit"):
        return functools.reduce(functools.partial(_merge, key), present)
    return sum(present)


def energy_pj(arch, *, macs: int, sram_bytes: int, dram_bytes: int, dtype: str,
              vector_ops: int = 0) -> float:
    """Energy in pJ: MACs at the arch's per-MAC energy for ``dtype``, plus bytes moved."""
    e = arch.energy
    mac = e.mac_int8_pj if dtype == "int8" else e.mac_fp32_pj
    return (macs * mac + sram_bytes * e.sram_byte_pj + dram_bytes * e.dram_byte_pj
            + vector_ops * e.vector_op_pj)


@dataclass(frozen=True)
class Counts:
    """What a machine counted for one layer, before pricing (``price``).

    macs: useful multiplies (both operands non-zero where the machine skips zeros, every
    multiply of the layer where it does not); products: every multiply the datapath performs,
    when that is more than ``macs`` (input-reuse's products that land outside the output map);
    None = ``macs``; energy charges ``products``; dense_macs: the layer's dense MACs;
    multipliers: the machine's multipliers (``pe_cycles`` = multipliers x cycles);
    mapped_pe_cycles: multiplier-cycles with work mapped, over the stall-free compute
    cycles (``price`` stretches it over the stalls, so mapping efficiency is a property
    of the mapping and utilisation falls with the stalls); sram_*_bytes: bytes at each
    buffer's ports; vector_ops: vector-unit element ops; extra: the machine's own
    additive counters (see ``LayerStats``).
    """

    dataflow: str
    macs: int
    dense_macs: int
    multipliers: int
    mapped_pe_cycles: float = 0
    sram_ifmap_bytes: int = 0
    sram_filter_bytes: int = 0
    sram_ofmap_bytes: int = 0
    vector_ops: int = 0
    extra: Mapping[str, float] = field(default_factory=dict)
    products: int | None = None


@dataclass(frozen=True)
class Op:
    """What ``price`` needs of a layer that is no ``ConvLayer`` (a vector-unit op)."""

    name: str
    shape: str
    dtype: str

    def describe(self) -> str:
        return self.shape


def price(layer, counts: Counts, steps: Steps | None, arch,
          timing: Timing | None = None) -> LayerStats:
    """The ``LayerStats`` of what a machine counted: time through the memory model
    (``memory.time_layer`` on ``arch.memory``), energy through ``energy_pj``.

    ``layer`` (a ``ConvLayer``, or an ``Op``) supplies the name, the shape text
    (``describe()``) and the dtype; ``timing``, when given, is the layer's time from
    another memory discipline (``memory_scalesim``), or worked out already
    (``memory.on_chip_timing``), used instead of the steps' (``steps`` may then be None).
    Units: cycles, bytes, pJ.
    """
    units = reconfig_units(layer, counts, arch)
    t = (time_layer(steps, arch.memory, units=units) if timing is None
         else with_reconfig(timing, units, arch.memory))
    cycles = t.cycles
    stretch = cycles / t.compute_cycles if t.compute_cycles else 1.0
    sram = counts.sram_ifmap_bytes + counts.sram_filter_bytes + counts.sram_ofmap_bytes
    products = counts.macs if counts.products is None else counts.products
    return LayerStats(
        name=layer.name, dataflow=counts.dataflow, shape=layer.describe(),
        dense_macs=counts.dense_macs, macs=counts.macs, products=products, cycles=cycles,
        pe_cycles=counts.multipliers * cycles,
        mapped_pe_cycles=counts.mapped_pe_cycles * stretch,
        sram_ifmap_bytes=counts.sram_ifmap_bytes, sram_filter_bytes=counts.sram_filter_bytes,
        sram_ofmap_bytes=counts.sram_ofmap_bytes, dram_ifmap_bytes=t.dram_ifmap_bytes,
        dram_filter_bytes=t.dram_filter_bytes, dram_ofmap_bytes=t.dram_ofmap_bytes,
        vector_ops=counts.vector_ops,
        energy_pj=energy_pj(arch, macs=products, sram_bytes=sram, dram_bytes=t.dram_bytes,
                            dtype=layer.dtype, vector_ops=counts.vector_ops),
        compute_cycles=t.compute_cycles, stall_dram_ifmap_cycles=t.stall_dram_ifmap_cycles,
        stall_dram_filter_cycles=t.stall_dram_filter_cycles,
        stall_dram_ofmap_cycles=t.stall_dram_ofmap_cycles,
        stall_sram_cycles=t.stall_sram_cycles, bound=t.bound,
        stall_reconfig_cycles=t.stall_reconfig_cycles, extra=dict(counts.extra))


class Counted(NamedTuple):
    """What a machine counted for a layer and the layer as the memory model sees it: what
    ``price`` turns into the layer's stats."""

    counts: Counts
    steps: Steps


def price_all(layers: Sequence, counted: Sequence[Counted | LayerStats],
              arch) -> list[LayerStats]:
    """``price`` of each layer's ``Counted`` (a ``LayerStats`` passes as it is), the steps
    of all timed together on ``arch.memory`` (``memory.time_layers``: one pass over the
    layers' steps, not one per layer): the stats ``price`` gives each."""
    todo = [i for i, c in enumerate(counted) if isinstance(c, Counted)]
    timings = time_layers([counted[i].steps for i in todo], arch.memory)
    out = list(counted)
    for i, t in zip(todo, timings, strict=True):
        out[i] = price(layers[i], counted[i].counts, None, arch, timing=t)
    return out


def reconfig_units(layer, counts: Counts, arch) -> int:
    """How many units load a configuration when ``layer`` starts: the machine's
    ``Params.reconfig_units`` (each machine says what its units are); none for a
    vector-unit op (``Op``), which loads no kernels."""
    if not arch.memory.reconfig_cycles or isinstance(layer, Op):
        return 0
    return arch.params(counts.dataflow).reconfig_units
