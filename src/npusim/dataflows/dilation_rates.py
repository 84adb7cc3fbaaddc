"""Dilation rate set per output map or per group of output maps (seed 002, claim 4, S103).

The dilated-grid machine reads R once per output map (step S103), before it steps that
map's pixel sets, so the output maps of one layer may each have their own rate. A layer
with per-map rates runs as the maps of each rate in turn; every map keeps the input's
size ('same' padding, R (X - 1) / 2 each side for an odd X x Y filter), so the results
stack into one N x K x H x W output. Costs add: the stats are the sum over the rates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InputError
from ..stats import LayerStats, total


def _check(w: np.ndarray, rates: Sequence[int]) -> list[int]:
    rates = [int(r) for r in rates]
    if len(rates) != w.shape[0]:
        raise InputError(f"rates: {len(rates)} given for {w.shape[0]} output maps; "
                         "give one rate per output map")
    if min(rates) < 1:
        raise InputError(f"rates={rates}: every rate must be >= 1")
    if w.shape[2] % 2 == 0 or w.shape[3] % 2 == 0:
        raise InputError(f"rates: filter {w.shape[2]}x{w.shape[3]}: per-map rates keep the "
                         "map size, which needs an odd filter size")
    return rates


def group_rates(rates: Sequence[int], maps_per_group: int) -> list[int]:
    """Per-map rates from one rate per group of ``maps_per_group`` consecutive output maps."""
    return [int(r) for r in rates for _ in range(maps_per_group)]


def conv_rates(x: np.ndarray, w: np.ndarray, bias, rates: Sequence[int], *, arch=None,
               dtype: str = "float32", emulate: bool = False,
               dataflow: str = "dilated-grid") -> tuple[np.ndarray, LayerStats]:
    """Convolution whose output map k has dilation ``rates[k]``: (N x K x H x W output,
    the summed LayerStats). Stride 1, 'same' padding; ``dtype`` as in ``npusim.conv2d``."""
    from ..simulate import conv2d

    w = np.asarray(w)
    rates = _check(w, rates)
    out, stats = None, []
    for rate in sorted(set(rates)):
        maps = np.flatnonzero(np.asarray(rates) == rate)
        b = None if bias is None else np.asarray(bias)[maps]
        y, st = conv2d(x, w[maps], b, padding="same", dilation=rate, dataflow=dataflow,
                       arch=arch, dtype=dtype, emulate=emulate)
        if out is None:
            out = np.zeros((y.shape[0], w.shape[0]) + y.shape[2:], y.dtype)
        out[:, maps] = y
        stats.append(st.renamed(f"rate{rate}"))
    return out, total(stats, "conv_rates")
