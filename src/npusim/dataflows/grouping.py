"""Density-based weight grouping and the dealing of work to processor groups (seed 001, cl. 11-13).

The controller of the sparse-pairs device groups a layer's weight maps (kernels)
into weight groups of one processor group's size, by each map's count of
non-zero weights (claim 11), and deals the weight groups to the processor groups
one after another (claim 13). Three policies:

- ``in-order``: kernels 0, 1, 2... in order, ``size`` per group (the naive baseline);
- ``similar-density``: kernels sorted by non-zero count (densest first) and cut
  into consecutive groups, so maps within a group have even ratios (claim 12);
- ``equal-work``: the other reading of claim 12, equal total non-zeros per group:
  densest kernel first, each to the group with the least total so far that still
  has a free slot (longest-processing-time greedy with a capacity).

A work unit is (weight group, contiguous slice of output pixels); unit
``u = weight_group * slices + slice`` goes to processor group ``u mod groups``
(dealt one after another). Two dealings, differing only in the slice count:

- ``weight-groups`` (claim 13 as written): weight groups go to processor groups
  in turn; pixels are cut only as far as needed to give every processor group
  as many units: the fewest slices (at most one per pixel) that make the unit
  count a multiple of the processor-group count;
- ``pixel-slices``: one slice per processor group (at most one per pixel); each
  processor group runs every weight group, one after another, on its own slice.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from ..arch.sections.sparse_pairs import DEALINGS, POLICIES  # the section's words
from ..errors import ConfigError

EMPTY = -1  # a processor slot with no kernel


def weight_groups(nnz: np.ndarray, size: int, policy: str) -> np.ndarray:
    """Kernel indices per weight group: (groups, size) int array, ``EMPTY`` for unused slots.

    ``nnz`` holds each kernel's non-zero weight count (K,); ``size`` is the
    processors per processor group (one kernel per processor).
    """
    if policy not in POLICIES:
        raise ConfigError(f"sparse-pairs.grouping={policy!r}: must be one of {', '.join(POLICIES)}")
    k = len(nnz)
    n = math.ceil(k / size)
    if policy == "equal-work":
        return _equal_work(np.asarray(nnz), n, size)
    order = np.arange(k) if policy == "in-order" else np.argsort(-np.asarray(nnz), kind="stable")
    return _pad(order, n * size).reshape(n, size)


def _pad(order: np.ndarray, length: int) -> np.ndarray:
    """``order`` extended with ``EMPTY`` slots to ``length``."""
    out = np.full(length, EMPTY, np.int64)
    out[: len(order)] = order
    return out


def _equal_work(nnz: np.ndarray, n: int, size: int) -> np.ndarray:
    """Greedy balanced partition: densest first, to the lightest group with room."""
    slots = [[] for _ in range(n)]
    heap = [(0, g) for g in range(n)]
    for k in np.argsort(-nnz, kind="stable"):
        load, g = heapq.heappop(heap)
        slots[g].append(int(k))
        if len(slots[g]) < size:
            heapq.heappush(heap, (load + int(nnz[k]), g))
    return np.stack([_pad(np.array(s, np.int64), size) for s in slots])


@dataclass(frozen=True)
class Plan:
    """Where every piece of a layer's work runs.

    ``groups`` (weight groups x processors per group) holds kernel indices;
    ``bounds`` the first pixel of each slice plus the end (slices + 1,);
    unit ``u`` = (weight group ``u // slices``, slice ``u % slices``) runs on
    processor group ``u % processor_groups``.
    """

    groups: np.ndarray
    bounds: np.ndarray
    processor_groups: int

    @property
    def slices(self) -> int:
        return len(self.bounds) - 1

    @property
    def units(self) -> int:
        return len(self.groups) * self.slices

    def unit(self, u: int) -> tuple[np.ndarray, int, int]:
        """(kernel indices, first pixel, end pixel) of work unit ``u``."""
        g, s = divmod(u, self.slices)
        return self.groups[g], int(self.bounds[s]), int(self.bounds[s + 1])

    def processor_group(self, u: int) -> int:
        return u % self.processor_groups


def plan(nnz: np.ndarray, pixels: int, processor_groups: int, size: int, policy: str,
         dealing: str = "weight-groups") -> Plan:
    """Group the kernels (``nnz`` per kernel), slice ``pixels`` output pixels, deal the units."""
    if dealing not in DEALINGS:
        raise ConfigError(f"sparse-pairs.dealing={dealing!r}: must be one of "
                          f"{', '.join(DEALINGS)}")
    groups = weight_groups(nnz, size, policy)
    slices = processor_groups
    if dealing == "weight-groups":
        slices //= math.gcd(len(groups), processor_groups)
    slices = min(pixels, slices)
    bounds = np.arange(slices + 1, dtype=np.int64) * pixels // slices
    return Plan(groups, bounds, processor_groups)
