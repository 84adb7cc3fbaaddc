"""What the hardware spends: ``LayerStats`` per layer, summed into network totals.

Every dataflow fills the same ``LayerStats``; its own counts go in ``extra``
(additive counts only, so totals are plain sums; two exceptions: keys starting
with ``peak_`` hold a size the hardware must provide, merged by maximum, and keys
ending in ``_by_unit`` hold a tuple of one count per hardware unit, summed unit by unit). Ratios
(utilisation, mapping efficiency) are derived from additive fields, never stored, so a sum of layers
gives the right network ratio. Energy comes from one function, ``energy_pj``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

TENSORS = ("ifmap", "filter", "ofmap")


@dataclass(frozen=True)
class LayerStats:
    """Costs of one layer (or, summed, of a network).

    Units: MACs and cycles are counts; bytes are bytes; energy is pJ.
    ``pe_cycles`` = multipliers x cycles (the work the machine could have done).
    ``mapped_pe_cycles`` = multiplier-cycles of PEs that had work mapped to them.
    """

    name: str
    dataflow: str
    shape: str = ""
    dense_macs: int = 0
    macs: int = 0
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
    extra: Mapping[str, float] = field(default_factory=dict)

    @property
    def utilisation(self) -> float:
        """Useful MACs / (multipliers x cycles), 0..1."""
        return self.macs / self.pe_cycles if self.pe_cycles else 0.0

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
        return replace(self, name=name)

    def as_dict(self) -> dict:
        """Flat dict for JSON/CSV: every field, the derived ratios and totals, extras inlined."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out.update(utilisation=self.utilisation, mapping_efficiency=self.mapping_efficiency,
                   sram_bytes=self.sram_bytes, dram_bytes=self.dram_bytes)
        out.update({k: v for k, v in self.extra.items()})
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
    """Network totals: the sum of the layers' stats."""
    if not stats:
        return LayerStats(name, "")
    out = stats[0]
    for s in stats[1:]:
        out = out + s
    return out.renamed(name)


def energy_pj(arch, *, macs: int, sram_bytes: int, dram_bytes: int, dtype: str,
              vector_ops: int = 0) -> float:
    """Energy in pJ: MACs at the arch's per-MAC energy for ``dtype``, plus bytes moved."""
    e = arch.energy
    mac = e.mac_int8_pj if dtype == "int8" else e.mac_fp32_pj
    return (macs * mac + sram_bytes * e.sram_byte_pj + dram_bytes * e.dram_byte_pj
            + vector_ops * e.vector_op_pj)
