"""The sparse-pairs machine: only (non-zero feature, non-zero weight) pairs are multiplied.

Source: seed 001 (Korean claims 1-15, see ``docs/sparse-pairs.md``). Claims 1-4: a
fetch controller takes the non-zero bit vectors of features and weights, ANDs
them and decides the pairs (``bitmap``); claim 5: one decided pair is read and
multiplied per cycle; claims 11-14: a processor array split into processor
groups, weight maps grouped by density and dealt to the processor groups one
after another (``grouping``).

Mapping: every processor of a group holds one kernel (its bit vector and its
compressed non-zero weights); the group steps through output pixels in lockstep,
each step broadcasting a pixel's receptive-field vector; each processor ANDs it
with its kernel vector and issues one pair per cycle; the step ends when the
slowest processor is done (at least one cycle, the empty AND). Loop order::

    for unit u = (weight group, pixel slice), on processor group u mod groups:  # parallel
        for pixel (n, p, q) in the slice:                       # one lockstep step
            for processor j (parallel): v = f(n, p, q) AND w(k_j)
                while v: one pair per cycle (priority encoder)

    cycles = max over processor groups g of
             sum over units u on g, pixels x of u: max(1, max_j pairs(x, k_j))

How many pixel slices there are (so which units a processor group runs) is the
dealing, ``weight-groups`` or ``pixel-slices`` (see ``grouping``).

The fast model gets pairs(x, k) for all pixels and kernels as one convolution of
the 0/1 masks (``npusim.bitconv``: AND and popcount of packed words); the emulator
(``npusim.emulate.sparse_pairs``) runs the datapath cycle by cycle. Both fill the same
``Schedule``; one function turns it into stats: the counts, and the layer as ``Steps``
(waves of units, one output row of each unit's slice a step, with the features, weight
groups and outputs each step moves) priced through the memory model (``stats.price``),
which adds the DRAM and SRAM stalls to these stall-free cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import bitconv, engine
from ..arch.spec import MAX_SIDE, spec
from ..ir import ConvLayer
from ..jit import njit
from ..memory import Steps
from ..parallel import in_parallel
from ..reference import pad_input
from ..stats import Counts, LayerStats, price
from . import bitmap, grouping
from .base import Machine, element_bytes, register
from .grouping import DEALINGS, POLICIES
from .input_reuse import share

NAME = "sparse-pairs"


@dataclass(frozen=True)
class Params:
    """The ``[sparse-pairs]`` section of an arch file. Multipliers = groups x processors."""
    reconfig_units = property(lambda p: p.processor_groups)  # each loads its weight group

    processor_groups: int = spec(32, "processor groups", min=1, max=MAX_SIDE)
    processors_per_group: int = spec(32, "processors (one multiplier each) per group", min=1,
                                      max=MAX_SIDE)
    grouping: str = spec("similar-density", "weight grouping policy", choices=POLICIES)
    dealing: str = spec("weight-groups", "work dealt by", choices=DEALINGS)

    @property
    def processors(self) -> int:
        return self.processor_groups * self.processors_per_group


@dataclass(frozen=True, eq=False)
class Schedule:
    """What one layer did on the array, counted by the fast model or by the emulator.

    Cycles are per processor group (``group_cycles``, G) and per processor
    (``processor_cycles``, G x size: cycles it multiplied); ``step_capacity`` is
    processor-cycles inside lockstep steps, ``mapped_capacity`` those of
    processors holding a kernel; ``skipped`` = (weight-only zero, feature-only
    zero, both zero) multiplies; bitmap traffic in bits. For the memory model:
    ``pixel_cycles`` (weight groups x pixels) the cycles of every lockstep step,
    ``kernels`` (weight groups x size) and ``bounds`` (slices + 1) the plan,
    ``kernel_nonzeros`` (K,) every kernel's non-zero weights.
    """

    pairs: int
    skipped: tuple[int, int, int]
    group_cycles: np.ndarray
    processor_cycles: np.ndarray
    step_capacity: int
    mapped_capacity: int
    bitmap_traffic_bits: int
    feature_nonzeros: int
    weight_nonzeros: int
    weight_groups: int
    units: int
    pixel_cycles: np.ndarray
    kernels: np.ndarray
    bounds: np.ndarray
    kernel_nonzeros: np.ndarray

    @property
    def cycles(self) -> int:
        """Layer cycles: the last processor group to finish."""
        return int(self.group_cycles.max())


def _kernel_pixels(layer: ConvLayer, x_mask, w_words) -> tuple[np.ndarray, np.ndarray]:
    """(pairs per kernel and pixel, (K + 1) x (N*P*Q) int32 with the empty slot as the last
    row; receptive-field set bits per conv group, G)."""
    per = np.empty((layer.K + 1, layer.N * layer.P * layer.Q), np.int32)
    per[-1] = 0
    _, field_ones = bitconv.pair_counts(layer, x_mask, w_words, out=per)
    return per, field_ones


def _traffic_bits(layer: ConvLayer, plan: grouping.Plan) -> int:
    """Bitmap bits moved: each unit loads its kernel vectors once; each step broadcasts one
    receptive-field vector per distinct conv group among the group's kernels."""
    width = layer.Cg * layer.R * layer.S
    bits = 0
    for kernels in plan.groups:
        held = kernels[kernels != grouping.EMPTY]
        conv_groups = len(np.unique(held // layer.Kg))
        bits += width * (len(held) * plan.slices + conv_groups * layer.N * layer.P * layer.Q)
    return bits


def _units(per: np.ndarray, pl: grouping.Plan):
    """Cycles of every work unit (units,), multiply cycles of its processors (units x size)
    and of every lockstep step (weight groups x pixels): a step lasts as long as its
    busiest processor, at least one cycle."""
    slots = per[pl.groups]  # weight groups x size x pixels
    steps = np.maximum(slots.max(axis=1), 1)
    starts = pl.bounds[:-1]
    cycles = np.add.reduceat(steps, starts, axis=1, dtype=np.int64).ravel()
    busy = np.add.reduceat(slots, starts, axis=2, dtype=np.int64)
    return cycles, busy.transpose(0, 2, 1).reshape(pl.units, -1), steps.astype(np.int64)


def _per_group(pl: grouping.Plan, values: np.ndarray) -> np.ndarray:
    """Sum of per-unit ``values`` over the units each processor group runs."""
    out = np.zeros((pl.processor_groups,) + values.shape[1:], np.int64)
    np.add.at(out, np.arange(pl.units) % pl.processor_groups, values)
    return out


def schedule(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray, p: Params) -> Schedule:
    """The fast model: every count of the machine from the masks, by array operations."""
    w_words = bitconv.pack_weights(layer, w_mask)
    nnz = bitconv.kernel_ones(w_words)
    per, field_ones = _kernel_pixels(layer, x_mask, w_words)
    size = p.processors_per_group
    pl = grouping.plan(nnz, per.shape[1], p.processor_groups, size, p.grouping, p.dealing)
    unit_cycles, unit_busy, step_cycles = _units(per, pl)
    occupied = np.repeat(np.count_nonzero(pl.groups != grouping.EMPTY, axis=1), pl.slices)
    pairs = int(per.sum(dtype=np.int64))
    return Schedule(
        pairs=pairs, skipped=bitmap.skipped(layer, field_ones, nnz, pairs),
        group_cycles=_per_group(pl, unit_cycles), processor_cycles=_per_group(pl, unit_busy),
        step_capacity=int(unit_cycles.sum()) * size,
        mapped_capacity=int((unit_cycles * occupied).sum()),
        bitmap_traffic_bits=_traffic_bits(layer, pl),
        feature_nonzeros=int(np.count_nonzero(x_mask)), weight_nonzeros=int(nnz.sum()),
        weight_groups=len(pl.groups), units=pl.units, pixel_cycles=step_cycles,
        kernels=pl.groups, bounds=pl.bounds, kernel_nonzeros=np.asarray(nnz, np.int64))


def _extra(layer: ConvLayer, s: Schedule, pes: int, elem: int) -> dict:
    """The machine's own additive counts (maxima and means summed over layers, so
    network imbalance = sum of maxima / sum of means)."""
    cycles = s.cycles
    return {
        "skipped_weight_zero": s.skipped[0], "skipped_feature_zero": s.skipped[1],
        "skipped_both_zero": s.skipped[2],
        "group_cycles_by_unit": tuple(int(c) for c in s.group_cycles),
        "processor_cycles_by_unit": tuple(int(c) for c in s.processor_cycles.ravel()),
        "group_cycles_max": cycles, "group_cycles_mean": float(s.group_cycles.mean()),
        "processor_cycles_max": int(s.processor_cycles.max()),
        "processor_cycles_mean": float(s.processor_cycles.mean()),
        "idle_cycles_within_groups": s.step_capacity - s.pairs,
        "idle_cycles_between_groups": cycles * pes - s.step_capacity,
        "bitmap_storage_bytes": sum(bitmap.bitmap_bytes(b) for b in bitmap.storage_bits(layer)),
        "bitmap_traffic_bytes": bitmap.bitmap_bytes(s.bitmap_traffic_bits),
        "value_storage_bytes": (s.feature_nonzeros + s.weight_nonzeros) * elem,
        "weight_groups": s.weight_groups, "work_units": s.units,
    }


def counts(layer: ConvLayer, p: Params, s: Schedule) -> Counts:
    """What the machine counted. SRAM: one feature and one weight value read per pair
    (claim 5), one output written per pixel and kernel, the bit vectors moved. Bytes."""
    elem = element_bytes(layer.dtype)
    extra = _extra(layer, s, p.processors, elem)
    ofmap = layer.N * layer.K * layer.P * layer.Q * elem
    return Counts(NAME, macs=s.pairs, dense_macs=layer.macs, multipliers=p.processors,
                  mapped_pe_cycles=s.mapped_capacity, sram_ifmap_bytes=s.pairs * elem,
                  sram_filter_bytes=s.pairs * elem,
                  sram_ofmap_bytes=ofmap + extra["bitmap_traffic_bytes"], extra=extra)


def steps(layer: ConvLayer, p: Params, s: Schedule, sram_total: int) -> Steps:
    """The layer as the memory model sees it. A wave is the ``processor_groups`` work units
    run side by side (unit ``u`` in wave ``u // processor_groups``); a step is one output
    row's worth (``Q`` pixels) of every unit's slice in the wave, lasting from the last
    end of the steps before to its own last end.

    - ifmap: the compressed features (values + bitmap) that chunk of pixels of every
      slice reads, in proportion to its pixels: cycled once per wave, so an input that
      does not fit the ifmap SRAM is read again by every wave;
    - filter: the wave's weight groups (bit vectors + non-zero weights), read when the
      wave starts (each processor holds its kernel for the unit);
    - ofmap: the step's outputs (pixels x the units' kernels), dense, written once.
    """
    elem, groups = element_bytes(layer.dtype), p.processor_groups
    slices = len(s.bounds) - 1
    u = np.arange(len(s.kernels) * slices)
    wg, lo, hi = u // slices, s.bounds[u % slices], s.bounds[u % slices + 1]
    chunks = -(-int((hi - lo).max()) // layer.Q)
    ends = np.minimum(lo[:, None] + layer.Q * np.arange(1, chunks + 1), hi[:, None])
    compute, keep = _step_cycles(s, wg, lo, ends, groups)
    wave, part = np.divmod(np.flatnonzero(keep), chunks)
    pixels = np.diff(np.concatenate([lo[:, None], ends], axis=1), axis=1)  # units x chunks
    return Steps(compute=compute, ifmap=part,
                 ifmap_bytes=_ifmap_bytes(layer, s, pixels[:slices], elem)[part],
                 filter=np.where(part == 0, wave, -1),
                 filter_bytes=_wave_weight_bytes(layer, s, wg, groups, elem)[wave],
                 ofmap=np.arange(len(compute)),
                 ofmap_bytes=_output_bytes(s, wg, pixels, groups, elem)[keep],
                 sram_bytes=share(sram_total, compute))


def _step_cycles(s: Schedule, wg, lo, ends, groups: int):
    """(compute cycles of every kept (wave, chunk) step, which of waves x chunks are kept):
    unit ``u`` (weight group ``wg[u]``, pixels from ``lo[u]``, chunk ends ``ends[u]``)
    starts when its processor group's earlier units end; a step ends when the last of its
    wave's units has done that chunk; a step that no unit has pixels for is dropped."""
    n_units, chunks = ends.shape
    cum = np.zeros((len(s.kernels), s.pixel_cycles.shape[1] + 1), np.int64)
    np.cumsum(s.pixel_cycles, axis=1, out=cum[:, 1:])
    within = cum[wg[:, None], ends] - cum[wg, lo][:, None]  # units x chunks
    waves = -(-n_units // groups)
    totals = np.zeros((waves, groups), np.int64)
    totals.ravel()[:n_units] = within[:, -1]
    start = (np.cumsum(totals, axis=0) - totals).ravel()[:n_units]
    done = np.zeros((waves * groups, chunks), np.int64)
    done[:n_units] = start[:, None] + within
    used = np.zeros((waves * groups, chunks), bool)
    used[:n_units] = ends > np.concatenate([lo[:, None], ends[:, :-1]], axis=1)
    keep = used.reshape(waves, groups, chunks).any(axis=1).ravel()
    edge = np.maximum.accumulate(done.reshape(waves, groups, chunks).max(axis=1).ravel()[keep])
    return np.diff(edge, prepend=0), keep


def _ifmap_bytes(layer: ConvLayer, s: Schedule, pixels: np.ndarray, elem: int) -> np.ndarray:
    """Bytes of each chunk's features (chunks,): the stored input (values + bitmap) in
    proportion to the chunk's pixels over all slices (``pixels``: slices x chunks)."""
    stored = s.feature_nonzeros * elem + bitmap.bitmap_bytes(bitmap.storage_bits(layer)[0])
    return share(stored, pixels.sum(axis=0))


def _wave_weight_bytes(layer: ConvLayer, s: Schedule, wg: np.ndarray, groups: int,
                       elem: int) -> np.ndarray:
    """Bytes of the weight groups each wave loads (waves,): per kernel its bit vector and
    its non-zero weights."""
    per_kernel = bitmap.bitmap_bytes(layer.Cg * layer.R * layer.S) + s.kernel_nonzeros * elem
    held = np.where(s.kernels != grouping.EMPTY, per_kernel[np.maximum(s.kernels, 0)], 0)
    wave = np.arange(len(wg)) // groups
    pairs = np.unique(wave * len(s.kernels) + wg)
    return np.bincount(pairs // len(s.kernels), held.sum(axis=1)[pairs % len(s.kernels)],
                       minlength=wave[-1] + 1).astype(np.int64)


def _output_bytes(s: Schedule, wg: np.ndarray, pixels: np.ndarray, groups: int,
                  elem: int) -> np.ndarray:
    """Bytes of the outputs of every (wave, chunk) step, dense: each unit's chunk pixels
    times the kernels its weight group holds (waves * chunks,)."""
    kernels = np.count_nonzero(s.kernels != grouping.EMPTY, axis=1)[wg]
    waves = -(-len(wg) // groups)
    out = np.zeros((waves * groups, pixels.shape[1]), np.int64)
    out[:len(wg)] = pixels * kernels[:, None] * elem
    return out.reshape(waves, groups, -1).sum(axis=1).ravel()


def layer_stats(layer: ConvLayer, arch, s: Schedule) -> LayerStats:
    """LayerStats of a schedule (the fast model's or the emulator's): its counts priced
    through the memory model."""
    p = arch.params(NAME)
    c = counts(layer, p, s)
    sram = c.sram_ifmap_bytes + c.sram_filter_bytes + c.sram_ofmap_bytes
    return price(layer, c, steps(layer, p, s, sram), arch)


def imbalance(stats: LayerStats, level: str = "group") -> float:
    """Max / mean cycles over processor groups (``group``) or processors (``processor``)."""
    mean = stats.extra[f"{level}_cycles_mean"]
    return stats.extra[f"{level}_cycles_max"] / mean if mean else 1.0


def pair_products(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias) -> np.ndarray:
    """Outputs from the decided pairs only, as the data operation circuit forms them: per
    output pixel and kernel, the AND of the packed receptive-field and kernel vectors, then
    one multiply-add per set bit (lowest first). float32 products and sums in bit order
    (taps, then channels); int8 in, exact int32 out."""
    integer = np.issubdtype(x.dtype, np.integer)
    acc = np.int64 if integer else np.float32
    G, Cg, R, S = layer.groups, layer.Cg, layer.R, layer.S
    xp = pad_input(x.astype(acc, copy=False), layer)
    fields = np.ascontiguousarray(  # channels last: a tap's channels side by side
        xp.reshape(layer.N, G, Cg, *xp.shape[2:]).transpose(0, 1, 3, 4, 2))
    kernels = np.ascontiguousarray(w.astype(acc, copy=False).transpose(0, 2, 3, 1)).reshape(
        layer.K, R * S * Cg)
    out = np.zeros((layer.N, layer.K, layer.P, layer.Q), acc)
    args = (bitconv.pack_input(layer, x != 0), bitconv.pack_weights(layer, w != 0), fields,
            kernels, R, S, *layer.stride, *layer.dilation, out)
    in_parallel(_pair_macs, args, layer.N * G * layer.P)
    return engine.finish(out, bias, layer, integer)


@njit(cache=True, nogil=True)
def _pair_macs(xb, wb, fields, kernels, R, S, sh, sw, dh, dw, out, first, stop):  # pragma: no cover
    """out[n, g Kg + k, p, q] = sum over the set bits of (field AND kernel) of value x
    weight, for the output rows ``first <= (n G + g) P + p < stop``."""
    N, G, _, _, D = xb.shape
    Kg, L = wb.shape[1], wb.shape[2]
    Cg = fields.shape[4]
    P, Q = out.shape[2], out.shape[3]
    words = np.empty(L, np.uint64)
    values = np.empty(R * S * Cg, fields.dtype)
    for row in range(first, stop):
        n, g, p = row // (G * P), row // P % G, row % P
        for q in range(Q):
            for r in range(R):
                for s in range(S):
                    t, h, v = r * S + s, p * sh + r * dh, q * sw + s * dw
                    words[t * D:(t + 1) * D] = xb[n, g, h, v]
                    values[t * Cg:(t + 1) * Cg] = fields[n, g, h, v]
            for k in range(Kg):
                kernel = kernels[g * Kg + k]
                total = out[n, g * Kg + k, p, q]
                for j in range(L):
                    decided = words[j] & wb[g, k, j]
                    base = (j // D) * Cg + (j % D) * 64
                    while decided:
                        i = base + bitconv.lowest_bit(decided)
                        total += values[i] * kernel[i]
                        decided &= decided - np.uint64(1)
                out[n, g * Kg + k, p, q] = total


@register
class SparsePairs(Machine):
    name = NAME
    Params = Params

    def supports(self, layer: ConvLayer, arch) -> str | None:
        return None

    def compute(self, layer, x, w, bias, arch):
        return pair_products(layer, x, w, bias)

    def estimate(self, layer, x_mask, w_mask, arch):
        return layer_stats(layer, arch, schedule(layer, x_mask, w_mask, arch.params(NAME)))

    def emulate(self, layer, x, w, bias, arch):
        from ..emulate.sparse_pairs import emulate

        out, sched = emulate(layer, x, w, bias, arch.params(NAME))
        return out, layer_stats(layer, arch, sched)

    def diagnostics(self, total: LayerStats) -> list[tuple[str, str]]:
        """Imbalance between processor groups (sum over layers of the slowest group's
        cycles / of the mean group's) and the pairs skipped for a zero operand."""
        e = total.extra
        skipped = [int(e.get(f"skipped_{k}_zero", 0)) for k in ("weight", "feature", "both")]
        return [("group imbalance",
                 f"{imbalance(total, 'group'):.2f}x (max / mean processor-group cycles)"),
                ("processor imbalance",
                 f"{imbalance(total, 'processor'):.2f}x (max / mean processor cycles)"),
                ("skipped pairs", f"{sum(skipped):,} (weight zero {skipped[0]:,}, feature "
                                  f"zero {skipped[1]:,}, both {skipped[2]:,})")]

