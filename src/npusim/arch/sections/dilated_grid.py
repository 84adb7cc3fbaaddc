"""The ``[dilated-grid]`` section of an arch file: ``DilatedGrid``, the parameters
``dataflows.dilated_grid`` reads."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import ConfigError
from ..spec import MAX_LEVELS, MAX_SIDE, declare_section, spec

LOOP_ORDERS = ("tile-major", "map-major")
"""Where partial sums accumulate across input maps."""


@dataclass(frozen=True)
class DilatedGrid:
    """The ``[dilated-grid]`` section of an arch file. MACs = mac_rows x mac_cols."""
    reconfig_units = 1  # one grid loads its coefficients

    grid_rows: int = spec(6, "pixel storage units (vertical)", min=1, max=MAX_SIDE)
    grid_cols: int = spec(6, "pixel storage units (horizontal)", min=1,
                          max=MAX_SIDE)
    coef_rows: int = spec(3, "coefficient storage units (vertical)", min=1,
                          max=MAX_SIDE)
    coef_cols: int = spec(3, "coefficient storage units (horizontal)", min=1,
                          max=MAX_SIDE)
    mac_rows: int = spec(2, "MACs = type-A pixel units (vertical)", min=1,
                         max=MAX_SIDE)
    mac_cols: int = spec(2, "MACs = type-A pixel units (horizontal)", min=1,
                         max=MAX_SIDE)
    shifter: str = spec("hierarchical", "pixel shift network", choices=("flat", "hierarchical"))
    levels: int = spec(3, "hierarchical shifter levels H (R up to 2**H - 1)", min=1,
                       max=MAX_LEVELS)
    load_pixels_per_cycle: int = spec(6, "contiguous pixels of one row written per cycle",
                                      min=1, max=MAX_SIDE)
    double_buffer: bool = spec(True, "load the next pixel set while stepping")
    coef_loads_per_cycle: int = spec(3, "coefficients of one filter row written into the "
                                        "coefficient storage per cycle", min=1, max=MAX_SIDE)
    result_words_per_cycle: int = spec(4, "MAC registers written to (or read from) the "
                                          "result memory per cycle", min=1, max=MAX_SIDE)
    loop_order: str = spec("tile-major", "where partial sums accumulate across input maps",
                           choices=LOOP_ORDERS)

    def __post_init__(self):
        for mac, grid in (("mac_rows", "grid_rows"), ("mac_cols", "grid_cols")):
            if getattr(self, mac) > getattr(self, grid):
                raise ConfigError(f"dilated-grid.{mac}={getattr(self, mac)}: must be <= "
                                  f"{grid}={getattr(self, grid)} (type-A units lie in the grid)")

    @property
    def macs(self) -> int:
        return self.mac_rows * self.mac_cols

    @property
    def result_cycles(self) -> int:
        """Cycles the MAC unit spends moving its M x N registers to or from the result
        memory (S1512 writes them; the map-major order reads them back, S1505)."""
        return math.ceil(self.macs / self.result_words_per_cycle)

    @property
    def reach(self) -> int:
        """Largest pixel step of one cycle (pixels)."""
        from ...dataflows import shift_grid

        return shift_grid.max_rate(self.shifter, self.levels)

    @property
    def links(self) -> int:
        """Wires of the pixel shift network (links), H x one level's for the hierarchy."""
        from ...dataflows import shift_grid

        return shift_grid.shifter_links(self.grid_rows, self.grid_cols, self.shifter,
                                        self.levels)


declare_section("dilated-grid", DilatedGrid)
