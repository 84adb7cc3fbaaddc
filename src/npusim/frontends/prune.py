"""Magnitude pruning: keep the largest-|w| fraction of each conv / linear layer's weights.

``prune(graph, 0.3)`` keeps 30 % of every layer's weights (per layer, not
globally); ``prune(graph, "deep-compression")`` keeps, layer by layer, the
fractions Han et al. report after pruning AlexNet and VGG-16 (Han, Pool, Tran,
Dally, "Learning both Weights and Connections for Efficient Neural Networks",
NIPS 2015, Tables 4 and 5; the same densities are the "Weights% (P)" column of
Deep Compression, Han, Mao, Dally, ICLR 2016). docs/zoo.md prints the table.
Pruned weights are stored as exact zeros, so every zero a dataflow skips is real.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ModelError
from ..ir import Graph

# Fraction of weights kept per layer after pruning (Han et al. 2015, Tables 4 and 5).
DEEP_COMPRESSION: dict[str, dict[str, float]] = {
    "alexnet": {"conv1": 0.84, "conv2": 0.38, "conv3": 0.35, "conv4": 0.37, "conv5": 0.37,
                "fc6": 0.09, "fc7": 0.09, "fc8": 0.25},
    "vgg16": {"conv1_1": 0.58, "conv1_2": 0.22, "conv2_1": 0.34, "conv2_2": 0.36,
              "conv3_1": 0.53, "conv3_2": 0.24, "conv3_3": 0.42, "conv4_1": 0.32,
              "conv4_2": 0.27, "conv4_3": 0.34, "conv5_1": 0.35, "conv5_2": 0.29,
              "conv5_3": 0.36, "fc6": 0.04, "fc7": 0.04, "fc8": 0.23},
}
PRESETS = ("deep-compression",)


def magnitude_prune(w: np.ndarray, density: float) -> np.ndarray:
    """``w`` with all but its ``round(density * size)`` largest-|w| entries set to 0.0.

    Exactly that many survive: of the weights tied at the threshold magnitude, the first
    ones in memory order are kept.
    """
    keep = int(round(density * w.size))
    if keep >= w.size:
        return w.copy()
    mag = np.abs(w).reshape(-1)
    threshold = np.partition(mag, w.size - keep)[w.size - keep] if keep else np.inf
    mask = mag > threshold
    ties = np.flatnonzero(mag == threshold)[: keep - int(mask.sum())]
    mask[ties] = True
    return np.where(mask.reshape(w.shape), w, np.zeros((), w.dtype))


def _check_density(density, where: str) -> float:
    if isinstance(density, bool) or not isinstance(density, (int, float, np.floating)) \
            or not 0.0 < float(density) <= 1.0:
        raise ModelError(f"{where}: density={density!r}: must be a number in (0, 1] "
                         f"(fraction of weights kept) or one of {', '.join(PRESETS)}")
    return float(density)


def densities(graph: Graph, density) -> dict[str, float]:
    """Per-layer kept fraction of ``graph``'s convs for a number (or its text) or a preset."""
    if density in PRESETS:
        return _preset(graph)
    if isinstance(density, str):
        try:
            density = float(density)
        except ValueError:
            pass  # _check_density names the bad value
    d = _check_density(density, graph.name)
    return {name: d for name in graph.layers}


def _preset(graph: Graph) -> dict[str, float]:
    table = DEEP_COMPRESSION.get(graph.name)
    if table is None:
        raise ModelError(f"{graph.name}: the deep-compression preset has per-layer densities "
                         f"only for {', '.join(DEEP_COMPRESSION)}; use --density D instead")
    missing = sorted(set(graph.layers) ^ set(table))
    if missing:
        raise ModelError(f"{graph.name}: deep-compression table and network layers differ "
                         f"at {missing}")
    return dict(table)


def prune(graph: Graph, density) -> Graph:
    """A copy of ``graph`` whose conv / linear weights are magnitude-pruned per layer.

    ``density`` is the fraction kept in each layer, in (0, 1], or 'deep-compression'
    (per-layer densities of Han et al. 2015, for alexnet and vgg16). Biases are kept.
    """
    keep = densities(graph, density)
    return graph.map_convs(lambda name, conv: dataclasses.replace(
        conv, weight=_pruned(name, conv.weight, keep[name])))


def _pruned(name: str, w: np.ndarray, density: float) -> np.ndarray:
    """``magnitude_prune``, refusing a density that leaves a layer with non-zero weights
    none (its outputs would be the bias alone, and every cost of it zero)."""
    out = magnitude_prune(w, density)
    if not np.any(out) and np.any(w):
        raise ModelError(f"{name}: density={density:g} keeps round({density:g} x {w.size}) = 0 "
                         f"of its {w.size} weights; a layer needs at least one non-zero weight: "
                         f"use a density >= {1 / w.size:.3g} (1/{w.size})")
    return out
