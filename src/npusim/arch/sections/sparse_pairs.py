"""The ``[sparse-pairs]`` section of an arch file: ``SparsePairs``, the parameters
``dataflows.sparse_pairs`` reads."""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import MAX_KIB, MAX_SIDE, MAX_UNITS, declare_section, spec

POLICIES = ("in-order", "similar-density", "equal-work")
"""How kernels are grouped (``dataflows.grouping``)."""
DEALINGS = ("weight-groups", "pixel-slices")
"""What the groups are dealt (``dataflows.grouping``)."""


@dataclass(frozen=True)
class SparsePairs:
    """The ``[sparse-pairs]`` section of an arch file. Multipliers = groups x processors."""
    reconfig_units = property(lambda p: p.processor_groups)  # each loads its weight group

    processor_groups: int = spec(32, "processor groups", min=1, max=MAX_SIDE)
    processors_per_group: int = spec(32, "processors (one multiplier each) per group", min=1,
                                      max=MAX_SIDE)
    grouping: str = spec("similar-density", "weight grouping policy", choices=POLICIES)
    dealing: str = spec("weight-groups", "work dealt by", choices=DEALINGS)
    kernel_store_bytes: int = spec(2048, "bytes of kernel storage per processor (bit vector "
                                   "+ non-zero weights)", min=1, max=MAX_KIB * 1024)
    fetch_bits_per_cycle: int = spec(256, "bits the AND and priority encoder take per cycle",
                                     min=1, max=MAX_UNITS)

    @property
    def processors(self) -> int:
        return self.processor_groups * self.processors_per_group


declare_section("sparse-pairs", SparsePairs)
