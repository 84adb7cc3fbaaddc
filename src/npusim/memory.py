"""The one memory model every machine meets: on-chip buffers, DRAM and SRAM bandwidth.

A machine describes a layer as the work its loop order implies (``Steps``): the
passes, tiles or folds it runs in order, each with the cycles it keeps its datapath
busy and the blocks of each operand it reads or accumulates into. ``time_layer``
turns that into time on an ``arch.Memory``:

- **Residency.** An input operand (ifmap, filter) whose blocks, each held from its
  first use to its last, never need more than its SRAM (half of it when double
  buffered: the other half is being refilled) is fetched from DRAM once per block,
  at first use. Otherwise a block is fetched again each time a step uses it after a
  step that used another block (consecutive reuse is free): what LRU gives on the
  machines' cyclic loop orders, where a working set larger than the buffer thrashes.
  A block larger than the buffer cannot stay: it streams through on every use. Blocks
  that share data (overlapping channel sets, weights paired differently) say what each
  adds to the buffer (``ifmap_held``, ``filter_held``): shared data is held once.
- **Outputs.** Each output block is written to DRAM once, after its last step. If the
  blocks open at once overflow the ofmap SRAM, a block left before its last step
  spills its partial sums (``psum_bytes``, written) and reads them back on return;
  a block whose partial sums alone overflow the buffer spills after every step.
  A machine whose steps each accumulate into part of a block gives the whole block's
  partial sums (``psum_size``, what must stay on chip) beside each step's part
  (``psum_bytes``, what that step spills and reads back); one that accumulates in
  buffers of its own rather than the ofmap SRAM names their bytes (``ofmap_capacity``).
- **Overlap.** Double buffered, the fetch of step i+1 and the write-back of step i-1
  run during step i; step 0's fetch and the last write-back are exposed. A step
  lasts ``max(compute, SRAM bytes / SRAM bandwidth, DRAM bytes / DRAM bandwidth
  + latency)``. Single buffered, fetch, compute and write-back follow each other.
- **Channels.** The operands share one DRAM channel (their bytes add up), or, with
  ``dram_channels = "per-operand"`` (SCALE-Sim's memory), each has its own channel of
  the same bandwidth and the slowest sets the time.
- **Unlimited** DRAM bandwidth is the stall-free machine: cycles == compute cycles.
- **Reconfiguration.** When a layer starts, each of the machine's units loads its
  kernels, coefficients and mappings: ``reconfig_cycles`` per unit, exposed (0 by
  default: SCALE-Sim counts none, and neither do the results npusim's docs quote).

All per-step work is numpy over the step arrays (no Python loop per step; the double-buffered
waits ``CHUNK_STEPS`` steps at a time); ``time_layers`` times many layers in one pass over
their steps end to end (each layer still on its own).
Units: cycles, bytes, bytes/cycle.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from .arch.spec import unlimited
from .errors import ConfigError, LayerError

# float noise allowed before a fractional stall counts as a cycle: 1e-9 cycles, or one part
# in 1e12 of the stall (a sum of many steps' stalls is off by more than 1e-9 past 1e6 cycles)
_EPS, _REL_EPS = 1e-9, 1e-12

_ARRAYS = ("compute", "ifmap", "ifmap_bytes", "ifmap_size", "ifmap_held", "filter",
           "filter_bytes", "filter_size", "filter_held", "ofmap", "ofmap_bytes", "psum_bytes",
           "sram_bytes")
_IDS = ("ifmap", "filter", "ofmap")
_DEFAULTS = {"ifmap_size": "ifmap_bytes", "filter_size": "filter_bytes"}
_HELD = {"ifmap_held": "ifmap_size", "filter_held": "filter_size"}  # left None when not given
# every array but compute and the held bytes: (name, the field an unset one falls back to,
# is it ids)
_FIELDS = tuple((name, _DEFAULTS.get(name, name), name in _IDS) for name in _ARRAYS[1:]
                if name not in _HELD)


def _int64(value) -> np.ndarray:
    """``value`` as an int64 array (itself when it is one already)."""
    if type(value) is np.ndarray and value.dtype == np.int64:
        return value
    return np.asarray(value, np.int64)


def _least(arrays: list[np.ndarray]) -> int:
    """The smallest value in any of ``arrays`` (1-D, of one length, not empty): short ones
    joined for one reduction (fewer numpy calls), long ones each reduced alone (a joined
    copy of a layer of millions of steps would be gigabytes)."""
    if len(arrays[0]) < 4096:
        return int(np.concatenate(arrays).min())
    return min(int(a.min()) for a in arrays)


@dataclass(frozen=True, eq=False)
class Steps:
    """A layer as the machine's loop order runs it: n steps (passes/tiles/folds), in order.

    compute:        (n,) cycles step i keeps the datapath busy (stall-free)
    ifmap, filter:  (n,) id of the block of that operand step i reads (-1: none; ids
                    below ``ID_SPAN``); equal ids = the same data (reused if still resident)
    ifmap_bytes, filter_bytes: (n,) DRAM bytes step i fetches for that block when it
                    is not resident, as stored off-chip (the compressed size for a
                    machine that streams compressed data)
    ifmap_size, filter_size: (n,) optional: the whole block's bytes when a step reads
                    only part of it (taps of one channel set read different pixels):
                    held on chip and, when the operand fits, fetched once at first
                    use; by default the same as ``*_bytes``
    ifmap_held, filter_held: (n,) optional: the bytes block i adds to what its buffer
                    holds, where blocks share data (overlapping channel sets; weight
                    partitions that lanes pair differently from step to step): what its
                    first use fetches, and counts towards the buffer, while the operand
                    fits; None (the default) is the same as ``*_size`` (``array``), so a
                    ``dataclasses.replace`` of the size moves it too
    ofmap:          (n,) id of the output block step i accumulates into (-1: none)
    ofmap_bytes:    (n,) bytes of that output block as written to DRAM (final outputs)
    psum_bytes:     (n,) bytes of that block's partial sums if spilled (accumulator
                    width); 0 means the same as ``ofmap_bytes`` (unless ``psum_size``
                    is given: then the bytes of the part step i spills, 0 for none)
    psum_size:      (n,) optional: the whole block's partial sums when a step
                    accumulates into part of it, held on chip from its first step to
                    its last; by default the same as ``psum_bytes``
    ofmap_capacity: optional bytes that hold the output blocks' partial sums when the
                    machine accumulates in buffers of its own (used whole); by default
                    the ofmap SRAM's usable bytes
    sram_bytes:     (n,) bytes step i moves across the on-chip buffer ports
    compute_bound:  "compute", or "bus" when the machine's compute time is set by its
                    interconnect rather than its multipliers

    Scalars broadcast to n; every array is stored as int64.
    """

    compute: np.ndarray
    ifmap: np.ndarray | int = -1
    ifmap_bytes: np.ndarray | int = 0
    ifmap_size: np.ndarray | int | None = None
    filter: np.ndarray | int = -1
    filter_bytes: np.ndarray | int = 0
    filter_size: np.ndarray | int | None = None
    ofmap: np.ndarray | int = -1
    ofmap_bytes: np.ndarray | int = 0
    psum_bytes: np.ndarray | int = 0
    sram_bytes: np.ndarray | int = 0
    compute_bound: str = "compute"
    psum_size: np.ndarray | int | None = None
    ofmap_capacity: int | None = None
    ifmap_held: np.ndarray | int | None = None
    filter_held: np.ndarray | int | None = None

    def __post_init__(self):
        compute = _int64(self.compute)
        if compute.ndim == 0:
            compute = compute.reshape(1)
        n = len(compute)
        if n == 0:
            raise LayerError("Steps: a layer needs at least one step")
        setattr_, shape = object.__setattr__, (n,)
        setattr_(self, "compute", compute)
        counted = [compute]  # the arrays of cycles and bytes, checked for negatives at once
        for name, fallback, is_id in _FIELDS:
            value = getattr(self, name)
            if value is None:  # a block size not given: the bytes fetched
                value = getattr(self, fallback)
            if type(value) is int:  # the common scalar: no array to inspect
                if value < 0 and not is_id:
                    raise LayerError(f"Steps.{name}: negative values; cycles and bytes are >= 0")
                setattr_(self, name, np.full(n, value, np.int64))
                continue
            arr = _int64(value)
            if arr.shape != shape:
                if arr.ndim:
                    raise LayerError(f"Steps.{name}: shape {arr.shape}, must be ({n},) like "
                                     "compute")
                arr = np.full(n, int(arr), np.int64)
            if not is_id:
                counted.append(arr)
            setattr_(self, name, arr)
        for name in _HELD:
            value = getattr(self, name)
            if value is not None:
                arr = _int64(value)
                if arr.shape != shape:
                    raise LayerError(f"Steps.{name}: shape {arr.shape}, must be ({n},) like "
                                     "compute")
                counted.append(arr)
                setattr_(self, name, arr)
        if _least(counted) < 0:
            name = next(k for k in _ARRAYS if k not in _IDS and self.array(k).min() < 0)
            raise LayerError(f"Steps.{name}: negative values; cycles and bytes are >= 0")
        if self.psum_size is not None:
            size = np.asarray(self.psum_size, np.int64)
            size = np.full(n, int(size), np.int64) if size.ndim == 0 else size
            if size.shape != (n,) or size.min() < 0:
                raise LayerError(f"Steps.psum_size: shape {size.shape} or negative values; "
                                 f"must be ({n},) bytes >= 0 like compute")
            object.__setattr__(self, "psum_size", size)
        if self.ofmap_capacity is not None and self.ofmap_capacity < 0:
            raise LayerError(f"Steps.ofmap_capacity={self.ofmap_capacity}: bytes, must be >= 0")
        if self.compute_bound not in ("compute", "bus"):
            raise LayerError(f"Steps.compute_bound={self.compute_bound!r}: must be compute or bus")

    def __len__(self) -> int:
        return len(self.compute)

    def array(self, name: str) -> np.ndarray:
        """The array ``name`` (a field of ``_ARRAYS``), a held-bytes field that was not
        given being its operand's block sizes."""
        value = getattr(self, name)
        return getattr(self, _HELD[name]) if value is None else value


@dataclass(frozen=True)
class Timing:
    """A layer's time on a memory: compute, stalls by cause, total, bound, DRAM traffic.

    Cycles are integers; ``cycles = compute_cycles + the five stall counts`` (the fifth,
    ``stall_reconfig_cycles``: loading the layer's configuration into its units).
    DRAM bytes are what the residency rules move: ifmap and filter reads, ofmap
    writes plus any partial sums spilled and read back.
    """

    compute_cycles: int
    stall_dram_ifmap_cycles: int
    stall_dram_filter_cycles: int
    stall_dram_ofmap_cycles: int
    stall_sram_cycles: int
    bound: str
    dram_ifmap_bytes: int
    dram_filter_bytes: int
    dram_ofmap_bytes: int
    stall_reconfig_cycles: int = 0

    @property
    def stall_cycles(self) -> int:
        return (self.stall_dram_ifmap_cycles + self.stall_dram_filter_cycles
                + self.stall_dram_ofmap_cycles + self.stall_sram_cycles
                + self.stall_reconfig_cycles)

    @property
    def cycles(self) -> int:
        return self.compute_cycles + self.stall_cycles

    @property
    def dram_bytes(self) -> int:
        return self.dram_ifmap_bytes + self.dram_filter_bytes + self.dram_ofmap_bytes


def _first_last(v: np.ndarray, layer: np.ndarray, layers: int):
    """For the used positions' ids ``v`` (``layer``: each one's layer, of ``layers``): each
    unique id's first and last position, where a step's id differs from the previous step's
    (bool per step), a function of the blocks' sizes at their first use giving each layer's
    most bytes held at once (``peak(sizes_at_first)``, (layers,)), and every position's
    index into the unique ids, or None when the blocks come in runs in order (then it is
    ``np.cumsum(change) - 1``, counted only where needed)."""
    change = np.empty(len(v), bool)
    change[0] = True
    np.not_equal(v[1:], v[:-1], out=change[1:])
    if len(v) < 2 or (v[1:] >= v[:-1]).all():  # blocks in runs, in order: no sort needed
        first = np.flatnonzero(change)
        last = np.empty(len(first), np.int64)
        last[:-1] = first[1:] - 1
        last[-1] = len(v) - 1
        # one run per block: lifetimes never overlap, the peak is the largest block
        return (first, last, change,
                lambda sizes: _layer_max(sizes, layer[first] if layers > 1 else None, layers),
                None)
    uniq, first, where = _unique(v)
    last = np.empty(len(uniq), np.int64)
    last[where] = np.arange(len(v))  # later positions overwrite earlier ones
    return (first, last, change,
            lambda sizes: _max_live(first, last, sizes, layer, layers), where)


def _unique(v: np.ndarray):
    """``np.unique(v, return_index=True, return_inverse=True)`` of the ids ``v``: without a
    sort when they span few values for their number (one table over the span; a machine's
    block ids within a layer), by numpy's sort otherwise (several layers' joined ids)."""
    low = int(v.min())
    span = int(v.max()) - low + 1
    if span > 2 * len(v) + 1024:
        return np.unique(v, return_index=True, return_inverse=True)
    at = v - low
    first = np.full(span, len(v), np.int64)
    first[at[::-1]] = np.arange(len(v) - 1, -1, -1)  # the last write, the earliest position
    used = first < len(v)
    return np.flatnonzero(used) + low, first[used], (np.cumsum(used) - 1)[at]


def _layer_max(values: np.ndarray, layer: np.ndarray, layers: int) -> np.ndarray:
    """The largest of ``values`` in each of ``layers`` (``layer``: each value's, unused for
    one layer; 0 for a layer with none)."""
    if layers == 1:
        return np.array([values.max()])
    out = np.zeros(layers, values.dtype)
    np.maximum.at(out, layer, values)
    return out


def _max_live(first: np.ndarray, last: np.ndarray, nbytes: np.ndarray, layer: np.ndarray,
              layers: int) -> np.ndarray:
    """Most bytes held at once in each layer when each block stays from its first to its
    last use (``layer``: each position's; a block never spans layers)."""
    n = len(layer)
    w = nbytes.astype(np.float64)
    diff = np.bincount(first, w, n + 1) - np.bincount(last + 1, w, n + 1)
    return np.round(_layer_max(np.cumsum(diff)[:n], layer, layers)).astype(np.int64)


def _used_positions(ids: np.ndarray):
    """The positions of the steps that use a block (``ids >= 0``), or None when all do."""
    if ids[0] >= 0 and ids.min() >= 0:
        return None
    return np.flatnonzero(ids >= 0)


def _input_fetches(ids: np.ndarray, nbytes: np.ndarray, size: np.ndarray, held: np.ndarray,
                   capacity: float, j: _Joined, out: np.ndarray) -> None:
    """Into ``out`` (zeros), the DRAM bytes of one input operand fetched before each step
    (see the module doc): ``nbytes`` what a step fetches of a block not resident, ``size``
    the whole block, ``held`` what the block adds to the buffer at its first use; each
    layer of ``j`` on its own."""
    pos = _used_positions(ids)
    if pos is None:
        v, b, whole, adds, layer, at = ids, nbytes, size, held, j.layer, out
    elif len(pos) == 0:
        return
    else:
        v, b, whole, adds, layer = ids[pos], nbytes[pos], size[pos], held[pos], j.layer[pos]
        at = np.zeros(len(pos), np.int64)
    first, _, change, peak, _ = _first_last(v, layer, j.layers)
    at_first = adds[first]
    fits = peak(at_first) <= capacity  # per layer: every block held from first to last use
    if fits.all():
        at[first] = at_first
    else:
        held = fits[layer[first]]
        at[first[held]] = at_first[held]
        # else a block is fetched again after another's, and one larger than its buffer
        # streams every use
        again = ~fits[layer] & (change | (whole > capacity))
        at[again] = b[again]
    if pos is not None:
        out[pos] = at


def _ofmap_traffic(j: _Joined, capacity: np.ndarray, reads: np.ndarray,
                   writes: np.ndarray) -> None:
    """Into ``reads`` and ``writes`` (zeros), the partial-sum bytes read back before each
    step and the bytes written after it, each layer of ``j`` on its own (``capacity``: per
    layer, the bytes that hold its partial sums); a layer's ``psum_size``, when given, is
    its whole blocks' partial sums (else a step's ``psum_bytes`` are its block's, 0 meaning
    ``ofmap_bytes``)."""
    ids = j.ofmap
    pos = _used_positions(ids)
    if pos is not None and len(pos) == 0:
        return
    where = slice(None) if pos is None else pos
    v, out_b, psum_b, layer = ids[where], j.ofmap_bytes[where], j.psum_bytes[where], j.layer[where]
    blocks_psum = np.where(psum_b > 0, psum_b, out_b)  # psum_size not given
    if j.psum_size is None:
        psum = held = blocks_psum
    else:
        given, size = j.psum_given[where], j.psum_size[where]
        psum, held = np.where(given, psum_b, blocks_psum), np.where(given, size, blocks_psum)
    first, last, change, peak, inverse = _first_last(v, layer, j.layers)
    w = writes if pos is None else np.zeros(len(v), np.int64)
    w[last] = out_b[last]
    occupancy = np.maximum(held, out_b)[first]
    spills = peak(occupancy) > capacity  # per layer
    if spills.any():
        if inverse is None:  # blocks in runs: the runs so far
            inverse = np.cumsum(change) - 1
        k = np.arange(len(v))
        # cannot stay even between consecutive steps
        huge = occupancy[inverse] > capacity[layer]
        leave = np.zeros(len(v), bool)
        leave[:-1] = change[1:]
        leave = (leave | huge) & (k != last[inverse]) & spills[layer]
        enter = (change | huge) & (k != first[inverse]) & spills[layer]
        w[leave] += psum[leave]
        reads[where] = np.where(enter, psum, 0)
    if pos is not None:
        writes[pos] = w


def usable_bytes(kib: int, memory) -> float:
    """Bytes of a ``kib`` KiB buffer of ``memory`` that can hold resident data: all of it,
    half when double buffered (the other half is being refilled)."""
    return kib * 1024 / (2 if memory.double_buffered else 1)


def residency(memory) -> tuple:
    """What of ``memory`` its residency rules read (``traffic``): the three buffers' sizes
    and whether they are double buffered. Steps' DRAM bytes follow from them and the steps
    alone, so what a machine derives from them holds on any memory of the same residency
    (a sweep's points that change only the DRAM, clock or energy)."""
    return (memory.ifmap_sram_kb, memory.filter_sram_kb, memory.ofmap_sram_kb,
            memory.double_buffered)


def traffic(steps: Steps, memory) -> dict[str, np.ndarray]:
    """Per step, the DRAM bytes the residency rules move: ``ifmap`` and ``filter`` fetched
    before the step, ``psum_in`` read back before it, ``ofmap_out`` written after it."""
    return dict(zip(("ifmap", "filter", "psum_in", "ofmap_out"),
                    _moved(_Joined([steps]), memory), strict=True))


ID_SPAN = 2**40  # block ids of one layer stay below this: each layer's are offset by it


class _Joined:
    """The steps of several layers end to end, for one pass of numpy over all of them
    (``_array_layers``): each ``Steps`` array concatenated (``compute``, ``ifmap``, ...),
    the block ids of layer l offset by ``l * ID_SPAN`` so that no block spans two layers;
    ``layer`` (n,) each step's layer, ``starts`` and ``ends`` (layers,) each layer's first
    and last step; ``psum_size`` the blocks' partial sums where a layer gave them (None if
    none did; ``psum_given`` (n,) which steps' layer did)."""

    def __init__(self, steps: list[Steps]):
        self.steps, self.layers = steps, len(steps)
        if self.layers == 1:
            (s,) = steps
            for name in _ARRAYS:
                setattr(self, name, s.array(name))
            self.layer = np.zeros(len(s), np.int64)
            self.starts, self.ends = np.zeros(1, np.int64), np.array([len(s) - 1])
        else:
            sizes = np.fromiter(map(len, steps), np.int64, self.layers)
            self.ends = np.cumsum(sizes) - 1
            self.starts = self.ends - sizes + 1
            self.layer = np.repeat(np.arange(self.layers), sizes)
            for name in _ARRAYS:
                setattr(self, name, np.concatenate([s.array(name) for s in steps]))
            offset = self.layer * ID_SPAN
            for name in _IDS:
                ids = getattr(self, name)
                if ids.max() >= ID_SPAN:
                    raise LayerError(f"Steps.{name}: block ids must be below {ID_SPAN}")
                setattr(self, name, np.where(ids >= 0, ids + offset, -1))
        given = [s.psum_size is not None for s in steps]
        self.psum_size = self.psum_given = None
        if any(given):
            self.psum_size = np.concatenate([np.zeros(len(s), np.int64) if s.psum_size is None
                                             else s.psum_size for s in steps])
            self.psum_given = np.repeat(given, [len(s) for s in steps])


def _moved(j: _Joined, memory) -> np.ndarray:
    """``traffic`` of the joined layers as one array, 4 x steps (bytes): ifmap, filter,
    psum_in, ofmap_out."""
    moved = np.zeros((4, len(j.compute)), np.int64)
    _input_fetches(j.ifmap, j.ifmap_bytes, j.ifmap_size, j.ifmap_held,
                   usable_bytes(memory.ifmap_sram_kb, memory), j, moved[0])
    _input_fetches(j.filter, j.filter_bytes, j.filter_size, j.filter_held,
                   usable_bytes(memory.filter_sram_kb, memory), j, moved[1])
    sram = usable_bytes(memory.ofmap_sram_kb, memory)
    capacity = np.array([sram if s.ofmap_capacity is None else s.ofmap_capacity
                         for s in j.steps], np.float64)
    _ofmap_traffic(j, capacity, moved[2], moved[3])
    return moved


def _transfer(parts: np.ndarray, memory) -> tuple[np.ndarray, np.ndarray]:
    """For ``parts`` (operands x phases, bytes): (cycles of each phase's transfers, the
    share of each phase's time each operand causes). One shared channel moves the
    operands' bytes one after another; with ``dram_channels = "per-operand"`` each has its
    own channel of the same bandwidth and the slowest sets the time. The latency counts
    once per non-empty transfer."""
    bw, lat = memory.dram_bytes_per_cycle, memory.dram_latency_cycles
    if memory.dram_channels == "per-operand":
        times = parts / bw + lat * (parts > 0) if lat else parts / bw
        worst = times.argmax(axis=0)
        return times.max(axis=0), worst == np.arange(len(parts))[:, None]
    whole = parts.sum(axis=0)
    time = whole / bw + lat * (whole > 0) if lat else whole / bw
    return time, parts / np.where(whole > 0, whole, 1)


def _integers(stalls: list[float]) -> list[int]:
    """Whole stall cycles per cause: their total rounded up (a cycle begun is a cycle
    spent), shared by largest remainder so the causes add up to it."""
    whole = sum(stalls)
    total = max(0, math.ceil(whole - _noise(whole)))
    out = [math.floor(x + _noise(x)) for x in stalls]
    order = sorted(range(len(stalls)), key=lambda k: out[k] - stalls[k])
    for k in order[:max(0, total - sum(out))]:
        out[k] += 1
    return out


def _noise(cycles: float) -> float:
    """The float noise ``_integers`` allows on ``cycles`` (see ``_EPS``)."""
    return max(_EPS, _REL_EPS * abs(cycles))


def reconfig_cycles(units: int, memory) -> int:
    """Cycles a layer waits, before its first step, while ``units`` units load its kernels,
    coefficients and mappings: ``memory.reconfig_cycles`` per unit, the units one after
    another (one configuration port), not overlapped with the first fetch."""
    return units * memory.reconfig_cycles


def time_layer(steps: Steps, memory, units: int = 0) -> Timing:
    """The layer's Timing on ``memory`` (an ``arch.Memory``); see the module doc.
    ``units``: how many units load a configuration when the layer starts
    (``reconfig_cycles``)."""
    return with_reconfig(time_layers([steps], memory)[0], units, memory)


def time_layers(steps: list[Steps], memory) -> list[Timing]:
    """Each layer's Timing on ``memory`` without the reconfiguration (``with_reconfig``):
    what ``time_layer`` gives each, the layers of several steps that touch DRAM timed
    together (one pass of numpy over all their steps, ``_array_layers``: some 60 numpy
    calls on a few steps each cost more than the rule's arithmetic)."""
    out: list[Timing | None] = [None] * len(steps)
    arrays = []
    for i, s in enumerate(steps):
        touches = s.ifmap.max() >= 0 or s.filter.max() >= 0 or s.ofmap.max() >= 0
        if touches and memory.model != "npusim" and not unlimited(memory.dram_bytes_per_cycle):
            raise ConfigError(f'[memory] model = "{memory.model}" replays SCALE-Sim\'s address '
                              'trace of the systolic array; this machine describes its layers '
                              'as steps: use model = "npusim"')
        if len(s) == 1:
            out[i] = _one_step(s, memory)
        elif not touches:
            out[i] = _on_chip(s, memory)
        else:
            arrays.append(i)
    if arrays:
        for i, t in zip(arrays, _array_layers(_Joined([steps[i] for i in arrays]), memory),
                        strict=True):
            out[i] = t
    return out


def with_reconfig(timing: Timing, units: int, memory) -> Timing:
    """``timing`` plus the wait while ``units`` units load the layer's configuration."""
    if units and memory.reconfig_cycles:
        return dataclasses.replace(timing, stall_reconfig_cycles=reconfig_cycles(units, memory))
    return timing


def _array_layers(j: _Joined, memory) -> list[Timing]:
    """The Timing of each joined layer of steps that touch DRAM, by the array rule (any
    number of steps; every sum over a layer's steps in step order)."""
    moved = _moved(j, memory)
    compute = j.compute.astype(np.float64)
    dram = np.add.reduceat(moved, j.starts, axis=1).tolist()
    sram = (None if unlimited(memory.sram_bytes_per_cycle)  # None: the ports never wait
            else j.sram_bytes / memory.sram_bytes_per_cycle)
    if unlimited(memory.dram_bytes_per_cycle):
        stalls = np.zeros((4, j.layers))
        stalls[3] = _port_stall(sram, compute, j.starts)
    else:
        stalls = (_overlapped if memory.double_buffered else _serial)(moved, compute, sram,
                                                                          memory, j)
    cycles = np.add.reduceat(j.compute, j.starts).tolist()
    port = [0.0] * j.layers if sram is None else np.add.reduceat(sram, j.starts).tolist()
    return [_timing(s, cycles[i], stalls[:, i].tolist(),
                    (dram[0][i], dram[1][i], dram[2][i] + dram[3][i]), port[i], memory)
            for i, s in enumerate(j.steps)]


def _timing(steps: Steps, compute: int, stalls: list[float], dram: tuple[int, int, int],
            sram_cycles: float, memory) -> Timing:
    """The Timing of ``compute`` cycles, fractional ``stalls`` (DRAM ifmap, filter, ofmap;
    SRAM), the DRAM bytes moved (ifmap, filter, ofmap) and the cycles the SRAM ports are
    busy: whole stalls, and the bound (the busiest of the datapath, DRAM and SRAM)."""
    busy_dram = 0.0
    if not unlimited(memory.dram_bytes_per_cycle):
        busy_dram = (max(dram) if memory.dram_channels == "per-operand"
                     else sum(dram)) / memory.dram_bytes_per_cycle
    busy = {steps.compute_bound: float(compute), "dram": busy_dram, "sram": sram_cycles}
    bound = max(busy, key=lambda k: (busy[k], k == steps.compute_bound))
    return Timing(compute, *_integers(stalls), bound, *dram)


def _one_step(steps: Steps, memory) -> Timing:
    """The Timing of a single step in Python scalars (most convs of a small network are
    one step; the arrays cost many numpy calls): the array rule with no neighbour step to
    overlap, so double and single buffering agree. The fetch before the step and the
    write-back after it are exposed (each a transfer, ``_one_transfer``), and the step
    waits on the SRAM ports for the cycles they take beyond its compute."""
    ifmap, filt, ofmap = int(steps.ifmap[0]), int(steps.filter[0]), int(steps.ofmap[0])
    compute, moved = int(steps.compute[0]), int(steps.sram_bytes[0])
    if ifmap < 0 and filt < 0 and ofmap < 0:
        return on_chip_timing(compute, moved, memory, steps.compute_bound)
    fetched = [_one_fetch(ifmap, steps.ifmap_bytes, steps.array("ifmap_held"),
                          usable_bytes(memory.ifmap_sram_kb, memory)),
               _one_fetch(filt, steps.filter_bytes, steps.array("filter_held"),
                          usable_bytes(memory.filter_sram_kb, memory)), 0]
    written = int(steps.ofmap_bytes[0]) if ofmap >= 0 else 0  # no spill: a step's block
    sram = (None if unlimited(memory.sram_bytes_per_cycle)  # is never left and entered
            else moved / memory.sram_bytes_per_cycle)
    port = 0.0 if sram is None else max(sram - compute, 0.0)
    if unlimited(memory.dram_bytes_per_cycle):
        stalls = [0.0, 0.0, 0.0, port]
    else:
        stalls = [*_one_transfer(fetched, memory), port]
        stalls[2] += sum(_one_transfer([written], memory))
    return _timing(steps, compute, stalls, (fetched[0], fetched[1], written),
                   0.0 if sram is None else sram, memory)


def _one_fetch(block: int, nbytes: np.ndarray, held: np.ndarray, capacity: float) -> int:
    """DRAM bytes one step fetches of the input ``block`` (-1: none): what the block holds
    when that fits its buffer, else the step's bytes (``_input_fetches`` on one step)."""
    if block < 0:
        return 0
    whole = int(held[0])
    return whole if whole <= capacity else int(nbytes[0])


def _one_transfer(parts: list[int], memory) -> list[float]:
    """``_transfer`` of one phase in scalars: the cycles of the phase's transfer of
    ``parts`` (bytes per operand) that each operand causes."""
    bw, lat = memory.dram_bytes_per_cycle, memory.dram_latency_cycles
    if memory.dram_channels == "per-operand":
        times = [p / bw + (lat if p > 0 else 0) for p in parts]
        worst = times.index(max(times))
        return [times[k] if k == worst else 0.0 for k in range(len(parts))]
    whole = sum(parts)
    time = whole / bw + (lat if whole > 0 else 0)
    return [p / (whole if whole > 0 else 1) * time for p in parts]


def _on_chip(steps: Steps, memory) -> Timing:
    """The Timing of steps that touch no DRAM (a vector-unit op): compute, and the SRAM
    ports if they are slower."""
    if len(steps) == 1:
        return on_chip_timing(int(steps.compute[0]), int(steps.sram_bytes[0]), memory,
                              steps.compute_bound)
    compute = int(steps.compute.sum())
    stall = 0
    if not unlimited(memory.sram_bytes_per_cycle):
        sram = steps.sram_bytes / memory.sram_bytes_per_cycle
        stall = _integers([float(np.maximum(sram - steps.compute, 0).sum())])[0]
    bound = "sram" if stall and steps.sram_bytes.sum() / memory.sram_bytes_per_cycle > compute \
        else steps.compute_bound
    return Timing(compute, 0, 0, 0, stall, bound, 0, 0, 0)


def on_chip_timing(cycles: int, sram_bytes: int, memory, bound: str = "compute") -> Timing:
    """The Timing of one step of ``cycles`` that touches no DRAM and moves ``sram_bytes``
    across the buffer ports (a vector-unit op), in Python scalars: what ``time_layer`` gives
    for ``Steps(compute=[cycles], sram_bytes=sram_bytes)``, without the arrays."""
    if cycles < 0 or sram_bytes < 0:
        raise LayerError(f"on-chip step of {cycles} cycles and {sram_bytes} bytes: "
                         "cycles and bytes are >= 0")
    stall = 0
    if not unlimited(memory.sram_bytes_per_cycle):
        sram = sram_bytes / memory.sram_bytes_per_cycle
        stall = _integers([float(max(sram - cycles, 0))])[0]
        if stall and sram > cycles:
            bound = "sram"
    return Timing(cycles, 0, 0, 0, stall, bound, 0, 0, 0)


# steps whose waits ``_overlapped`` works out at a time: its dozen temporaries stay the size
# of a chunk, however many steps a layer has (a 2x2 systolic array runs VGG-16's fc6 in 25.7
# million folds: the whole layer's took gigabytes)
CHUNK_STEPS = 1 << 16


def _overlapped(moved, compute, sram, memory, j: _Joined) -> np.ndarray:
    """Stall cycles of each joined layer (4 x layers: DRAM ifmap, filter, ofmap; SRAM),
    double buffered (``moved``: the steps' ``_moved`` bytes; ``sram``: cycles each step's
    SRAM traffic takes, None when unlimited): step i overlaps the fetch for step i+1 and
    the write-back of step i-1 of its layer; a layer's first fetch and last write-back are
    exposed. The steps' waits are found ``CHUNK_STEPS`` at a time, then summed per layer."""
    layers, n = j.layers, moved.shape[1]
    waited = np.empty((3, n))  # each operand's share of each step's wait on DRAM
    port = None if sram is None else np.empty(n)  # each step's wait on the SRAM ports
    for lo in range(0, n, CHUNK_STEPS):
        hi = min(n, lo + CHUNK_STEPS)
        _step_waits(moved, compute, sram, memory, j, lo, hi, waited[:, lo:hi],
                    None if port is None else port[lo:hi])
    out = np.empty((4, layers))
    out[:3] = np.add.reduceat(waited, j.starts, axis=1)
    exposed = np.zeros((3, 2 * layers))  # each layer's first fetch, then its last write-back
    exposed[:, :layers] = moved[:3, j.starts]
    exposed[2, layers:] = moved[3, j.ends]
    time, share = _transfer(exposed, memory)
    caused = share * time
    out[:3] += caused[:, :layers]
    out[2] += caused[2, layers:]
    out[3] = 0.0 if port is None else np.add.reduceat(port, j.starts)
    return out


def _step_waits(moved, compute, sram, memory, j: _Joined, lo: int, hi: int,
                waited: np.ndarray, port: np.ndarray | None) -> None:
    """For steps ``lo`` to ``hi - 1`` (``_overlapped``'s arguments), into ``waited`` (3 x
    steps) each operand's share of the cycles a step waits on DRAM, and into ``port`` (if
    not None) the cycles it waits on the SRAM ports instead: during step i move the fetch
    for step i+1 and the write-back of step i-1, of its own layer."""
    n = moved.shape[1]
    parts = np.zeros((3, hi - lo))
    top = min(hi, n - 1)  # the last step fetches nothing for a next
    parts[:, :top - lo] = moved[:3, lo + 1:top + 1]
    start = max(lo, 1)  # the first step writes back nothing of a previous
    before = moved[3, start - 1:hi - 1]
    if j.layers > 1:  # a layer's last step overlaps no fetch of the next layer, nor its first
        ends = j.ends[:-1]
        parts[:, ends[(ends >= lo) & (ends < hi)] - lo] = 0.0
        firsts = j.starts[1:]
        before = before.copy()
        before[firsts[(firsts >= start) & (firsts < hi)] - start] = 0  # the layer before's
    parts[2, start - lo:] += before
    mem, shares = _transfer(parts, memory)
    steps = compute[lo:hi]
    busy = steps if sram is None else np.maximum(steps, sram[lo:hi])
    waits = mem > busy
    np.multiply(shares, np.where(waits, mem - steps, 0.0), out=waited)
    if port is not None:
        np.copyto(port, np.where(waits, 0.0, busy - steps))


def _port_stall(sram, compute, starts) -> np.ndarray | float:
    """Cycles each layer's steps wait on the SRAM ports when nothing overlaps them (``starts``:
    each layer's first step; 0 if unlimited)."""
    return 0.0 if sram is None else np.add.reduceat(np.maximum(sram - compute, 0), starts)


def _serial(moved, compute, sram, memory, j: _Joined) -> np.ndarray:
    """Stall cycles of each joined layer, single buffered: fetch, then compute, then
    write-back, each step."""
    fetch, shares = _transfer(moved[:3], memory)
    write, _ = _transfer(moved[3:], memory)
    out = np.empty((4, j.layers))
    out[:3] = np.add.reduceat(shares * fetch, j.starts, axis=1)
    out[2] += np.add.reduceat(write, j.starts)
    out[3] = _port_stall(sram, compute, j.starts)
    return out


def used_input_pixels(layer) -> int:
    """Input pixels (per image and channel) that some kernel window of ``layer`` reads."""
    rows = _used(layer.H, layer.padding[0], layer.R, layer.dilation[0], layer.stride[0], layer.P)
    cols = _used(layer.W, layer.padding[2], layer.S, layer.dilation[1], layer.stride[1], layer.Q)
    return rows * cols


@functools.lru_cache(maxsize=4096)  # networks repeat their layers' geometry
def _used(size: int, pad: int, k: int, dil: int, stride: int, out: int) -> int:
    """How many of ``size`` input positions a strided, dilated window touches."""
    at = np.arange(out)[:, None] * stride + np.arange(k) * dil - pad
    touched = np.zeros(size, bool)
    touched[at[(at >= 0) & (at < size)]] = True
    return int(touched.sum())


def dense_dram_bytes(layer, elem: int) -> tuple[int, int, int]:
    """Bytes of each dense tensor as stored in DRAM (``elem`` bytes an element): the
    input elements some window reads, every weight, every output."""
    return (layer.N * layer.C * used_input_pixels(layer) * elem,
            layer.K * layer.Cg * layer.R * layer.S * elem,
            layer.N * layer.K * layer.P * layer.Q * elem)
