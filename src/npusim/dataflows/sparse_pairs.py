"""The sparse-pairs machine: only (non-zero feature, non-zero weight) pairs are multiplied.

Source: seed 001 (Korean claims 1-15, see ``docs/sparse-pairs.md``). Claims 1-4: a
fetch controller takes the non-zero bit vectors of features and weights, ANDs
them and decides the pairs (``bitmap``); claim 5: one decided pair is read and
multiplied per cycle; claims 11-14: a processor array split into processor
groups, weight maps grouped by density and dealt to the processor groups one
after another (``grouping``).

Mapping: every processor of a group holds one kernel (its bit vector and its
compressed non-zero weights) in a kernel store of ``kernel_store_bytes`` (a larger
kernel is streamed through it with every pixel); the group steps through output
pixels in lockstep, each step broadcasting a pixel's receptive-field vector; each
processor ANDs it with its kernel vector, ``fetch_bits_per_cycle`` bits a cycle, and
issues one pair per cycle; the step ends when the last processor has scanned its
vector and issued its pairs. Loop order::

    for unit u = (weight group, pixel slice), on processor group u mod groups:  # parallel
        for pixel (n, p, q) in the slice:                       # one lockstep step
            for processor j (parallel): v = f(n, p, q) AND w(k_j)
                while v: one pair per cycle (priority encoder)

    cycles = max over processor groups g of
             sum over units u on g, pixels x of u: max(scan, max_j pairs(x, k_j))
    scan = max(1, ceil(Cg*R*S / fetch_bits_per_cycle))

How many pixel slices there are (so which units a processor group runs) is the
dealing, ``weight-groups`` or ``pixel-slices`` (see ``grouping``).

The fast model gets pairs(x, k) for all pixels and kernels as one convolution of
the 0/1 masks (``npusim.bitconv``: AND and popcount of packed words) and fills a
``Schedule``, which becomes the counts and the layer as ``Steps`` (waves of units, one
output row of each unit's slice a step, with the features, weight groups, outputs and
kernel loads each step moves) priced through the memory model (``stats.price``), which
adds the DRAM and SRAM stalls to these stall-free cycles. The emulator
(``npusim.emulate.sparse_pairs``) runs the datapath cycle by cycle, plans, counts and
builds its own steps, and prices them through the same ``stats.price``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import bitconv, engine, simd
from ..arch.sections.sparse_pairs import SparsePairs as Params  # the arch file section
from ..derived import kernel_blocks
from ..ir import ConvLayer
from ..jit import njit
from ..memory import Steps
from ..parallel import in_parallel
from ..reference import pad_input
from ..stats import Counted, Counts, LayerStats, price
from . import bitmap
from .base import Machine, Memo, element_bytes, register, share
from .sparse_layout import Layout, layout

NAME = "sparse-pairs"


@dataclass(frozen=True, eq=False)
class Schedule:
    """What one layer did on the array, counted by the fast model.

    Cycles are per processor group (``group_cycles``, G) and per processor
    (``processor_cycles``, G x size: cycles it multiplied); ``step_capacity`` is
    processor-cycles inside lockstep steps, ``mapped_capacity`` those of
    processors holding a kernel; ``skipped`` = (weight-only zero, feature-only
    zero, both zero) multiplies; ``group_nonzeros`` the input's non-zero values in each
    conv group's channels (G,), ``feature_nonzeros`` their sum. For the
    memory model: ``chunk_cycles`` (units x chunks) the cycles of each unit's lockstep steps
    over each chunk of ``Q`` pixels of its slice; ``layout`` what the weights fix (the plan,
    the kernel loads, the steps but their cycles: ``sparse_layout``).
    """

    pairs: int
    skipped: tuple[int, int, int]
    group_cycles: np.ndarray
    processor_cycles: np.ndarray
    step_capacity: int
    mapped_capacity: int
    group_nonzeros: np.ndarray
    chunk_cycles: np.ndarray
    layout: Layout

    @property
    def feature_nonzeros(self) -> int:
        return int(self.group_nonzeros.sum())

    @property
    def cycles(self) -> int:
        """Layer cycles: the last processor group to finish."""
        return int(self.group_cycles.max())


def scan_cycles(layer: ConvLayer, p: Params) -> int:
    """Cycles the AND and the priority encoder take over one ``Cg*R*S``-bit vector,
    ``fetch_bits_per_cycle`` bits a cycle: the shortest lockstep step."""
    return max(1, -(-layer.Cg * layer.R * layer.S // p.fetch_bits_per_cycle))


def _units(layer: ConvLayer, per: np.ndarray, lay: Layout, scan: int):
    """(cycles of every work unit's lockstep steps over each chunk of ``Q`` pixels of its
    slice, units x chunks; cycles each processor of a unit multiplied, units x size) from
    the pairs of every kernel at every pixel (``per``, K x pixels): a step lasts as long as
    its busiest processor, and at least the ``scan`` cycles of the AND and encoder."""
    pl = lay.plan
    chunks = np.empty((len(pl.groups), pl.slices, lay.chunks), np.int64)
    busy = np.empty((len(pl.groups), pl.slices, pl.groups.shape[1]), np.int64)
    in_parallel(_lockstep, (per, pl.groups, pl.bounds, layer.Q, scan, chunks, busy),
                len(pl.groups))
    return chunks.reshape(pl.units, -1), busy.reshape(pl.units, -1)


@njit(cache=True, nogil=True)
def _lockstep(per, kernels, bounds, Q, scan, chunks, busy, first, stop):  # pragma: no cover
    """For the weight groups ``first <= g < stop`` (``kernels[g]``: a kernel per processor,
    ``EMPTY`` for none) stepping through every slice's pixels (``bounds``) in lockstep:
    chunks[g, s, c] = sum over pixels x of chunk c (``Q`` pixels) of slice s of the step's
    cycles, max(scan, max_j per[kernels[g, j], x]); busy[g, s, j] = sum over the pixels x
    of slice s of per[kernels[g, j], x] (0 for an empty slot)."""
    slices = len(bounds) - 1
    step = np.empty(per.shape[1], np.int64)
    for g in range(first, stop):
        step[:] = scan
        for j in range(kernels.shape[1]):
            k = kernels[g, j]
            for s in range(slices):
                total = 0
                if k >= 0:  # sliced: no index to wrap, the loop vectorises
                    pairs, steps = per[k, bounds[s]:bounds[s + 1]], step[bounds[s]:bounds[s + 1]]
                    for x in range(len(pairs)):
                        total += pairs[x]
                        steps[x] = max(steps[x], pairs[x])
                busy[g, s, j] = total
        for s in range(slices):
            for c in range(chunks.shape[2]):
                lo = min(bounds[s] + c * Q, bounds[s + 1])
                chunks[g, s, c] = step[lo:min(lo + Q, bounds[s + 1])].sum()


@njit(cache=True, nogil=True)
def _totals(chunk_cycles, busy, occupied, groups):  # pragma: no cover
    """From each unit's cycles per chunk (units x chunks) and each of its processors' busy
    cycles (units x size), unit ``u`` on processor group ``u mod groups`` and holding
    ``occupied[u]`` kernels: (each processor group's cycles, G; each of its processors'
    busy cycles, G x size; all units' cycles; those times their units' kernels; all
    pairs)."""
    units, size = busy.shape
    group_cycles = np.zeros(groups, np.int64)
    processor_cycles = np.zeros((groups, size), np.int64)
    cycles = mapped = pairs = 0
    for u in range(units):
        g, unit = u % groups, 0
        for c in range(chunk_cycles.shape[1]):
            unit += chunk_cycles[u, c]
        group_cycles[g] += unit
        cycles += unit
        mapped += unit * occupied[u]
        for j in range(size):
            processor_cycles[g, j] += busy[u, j]
            pairs += busy[u, j]
    return group_cycles, processor_cycles, cycles, mapped, pairs


def schedule(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray, p: Params,
             counted_pairs: tuple[np.ndarray, np.ndarray] | None = None) -> Schedule:
    """The fast model: every count of the machine from the masks, by array operations;
    ``counted_pairs``: the masks' ``bitconv.pair_counts``, if counted already (they follow
    the masks alone, not the machine)."""
    w_words = bitconv.pack_weights(layer, w_mask)
    nnz = bitconv.kernel_ones(w_words)
    lay = layout(layer, nnz, p)
    per, field_ones = counted_pairs or bitconv.pair_counts(layer, x_mask, w_words)
    chunk_cycles, unit_busy = _units(layer, per, lay, scan_cycles(layer, p))
    group_cycles, processor_cycles, cycles, mapped, pairs = _totals(
        chunk_cycles, unit_busy, lay.occupied, p.processor_groups)
    return Schedule(
        pairs=pairs, skipped=bitmap.skipped(layer, field_ones, nnz, pairs),
        group_cycles=group_cycles, processor_cycles=processor_cycles,
        step_capacity=cycles * p.processors_per_group, mapped_capacity=mapped,
        group_nonzeros=group_nonzeros(layer, x_mask), chunk_cycles=chunk_cycles, layout=lay)


def group_nonzeros(layer: ConvLayer, x_mask: np.ndarray) -> np.ndarray:
    """Non-zero input values in each conv group's channels (G,): bits counted in packed
    bytes, which is quicker than numpy's count along an axis."""
    if layer.groups == 1:
        return np.array([np.count_nonzero(x_mask)], np.int64)
    packed = np.packbits(x_mask.reshape(layer.N, layer.groups, -1), axis=2)
    return np.bitwise_count(packed).sum(axis=(0, 2), dtype=np.int64)


def _extra(layer: ConvLayer, p: Params, s: Schedule) -> dict:
    """The machine's own additive counts (maxima and means summed over layers, so
    network imbalance = sum of maxima / sum of means)."""
    cycles, elem, lay = s.cycles, element_bytes(layer.dtype), s.layout
    loads = lay.loads
    return {
        "skipped_weight_zero": s.skipped[0], "skipped_feature_zero": s.skipped[1],
        "skipped_both_zero": s.skipped[2],
        "group_cycles_by_unit": tuple(s.group_cycles.tolist()),
        "group_cycles_max": cycles, "group_cycles_mean": _mean(s.group_cycles),
        "processor_cycles_max": int(s.processor_cycles.max()),
        "processor_cycles_mean": _mean(s.processor_cycles),
        "idle_cycles_within_groups": s.step_capacity - s.pairs,
        "idle_cycles_between_groups": cycles * p.processors - s.step_capacity,
        "bitmap_storage_bytes": sum(bitmap.bitmap_bytes(b) for b in bitmap.storage_bits(layer)),
        "bitmap_traffic_bytes": bitmap.bitmap_bytes(lay.field_bits)
        + loads["kernel_bitmap_bytes"],
        "value_storage_bytes": (s.feature_nonzeros + int(lay.kernel_nonzeros.sum())) * elem,
        "kernel_load_bytes": loads["kernel_load_bytes"],
        "streamed_kernels": loads["streamed_kernels"],
        "peak_kernel_bytes": loads["peak_kernel_bytes"],
        "weight_groups": len(lay.plan.groups), "work_units": lay.plan.units,
    }


def _mean(cycles: np.ndarray) -> float:
    """The mean of integer ``cycles``: ``np.mean``'s value (a float64 sum of integers is exact
    below 2**53), without its overhead."""
    return int(cycles.sum()) / cycles.size


def counts(layer: ConvLayer, p: Params, s: Schedule) -> Counts:
    """What the machine counted, bytes at each buffer's ports. ifmap: one feature value read
    per pair (claim 5) and the receptive-field vectors broadcast; filter: one weight value
    read per pair from the processor's store, and every kernel load into the stores (bit
    vectors and values); ofmap: one output written per pixel and kernel."""
    elem = element_bytes(layer.dtype)
    ofmap = layer.N * layer.K * layer.P * layer.Q * elem
    return Counts(NAME, macs=s.pairs, dense_macs=layer.macs, multipliers=p.processors,
                  mapped_pe_cycles=s.mapped_capacity,
                  sram_ifmap_bytes=s.pairs * elem + bitmap.bitmap_bytes(s.layout.field_bits),
                  sram_filter_bytes=s.pairs * elem + s.layout.loads["kernel_load_bytes"],
                  sram_ofmap_bytes=ofmap, extra=_extra(layer, p, s))


def steps(layer: ConvLayer, p: Params, s: Schedule, sram_total: int) -> Steps:
    """The layer as the memory model sees it (steps: ``sparse_layout``), each step lasting
    from the last end of the steps before to its own last end.

    - ifmap: the compressed features (values + bitmap) that chunk of pixels of every
      slice reads, in proportion to its pixels, of the conv groups the wave's kernels
      belong to (every channel on an ungrouped layer; each group's part of the stored
      features by its non-zeros, the bitmap evenly): cycled once per wave, so an input
      that does not fit the ifmap SRAM is read again by every wave that reads it;
    - filter: the wave's weight groups (bit vectors + non-zero weights), read from DRAM
      when the wave starts;
    - ofmap: the step's outputs (pixels x the units' kernels), dense, written once;
    - SRAM: the kernel loads where they happen (a kernel that fits its processor's store
      at its unit's first step, one that does not with every pixel), the rest of
      ``sram_total`` in proportion to the steps' cycles.
    """
    lay = s.layout
    compute = _step_cycles(s.chunk_cycles, lay.keep, p.processor_groups,
                           np.empty(len(lay.part), np.int64))
    read, held = _chunk_features(layer, s)
    return Steps(compute=compute, ifmap=lay.ifmap, ifmap_bytes=read.ravel()[lay.ifmap],
                 ifmap_held=held.ravel()[lay.ifmap],
                 filter=lay.filter, filter_bytes=lay.filter_bytes,
                 ofmap=lay.ofmap, ofmap_bytes=lay.ofmap_bytes,
                 sram_bytes=lay.load_bytes + share(sram_total - lay.load_total, compute))


def _chunk_features(layer: ConvLayer, s: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """DRAM bytes of the stored features each set of conv groups reads in each chunk (sets
    x chunks): the stored features cut by the groups' non-zero values (the bitmap evenly),
    each group's bytes by the chunks' pixels (one set of one group when ungrouped); and of
    them, those of the groups no set numbered before it has: sets that share a group (work
    units that straddle conv groups) hold its features once, and counted once per set an
    input that fits was read 1.6-4.3x."""
    elem, lay = element_bytes(layer.dtype), s.layout
    values = s.feature_nonzeros * elem
    stored = values + bitmap.bitmap_bytes(bitmap.storage_bits(layer)[0])
    if layer.groups == 1:
        read = share(stored, lay.chunk_pixels)[None]
        return read, read
    groups = share(share(stored, s.group_nonzeros * elem * layer.groups + (stored - values)),
                   lay.chunk_pixels)
    sets = lay.set_groups
    earlier = np.logical_or.accumulate(sets, axis=0)
    new = sets & ~np.vstack([np.zeros((1, sets.shape[1]), bool), earlier[:-1]])
    return sets.astype(np.int64) @ groups, new.astype(np.int64) @ groups


@njit(cache=True, nogil=True)
def _step_cycles(chunk_cycles, keep, groups, out):  # pragma: no cover
    """out[i] = compute cycles of the i-th kept (wave, chunk) step (``keep``: waves x chunks,
    flattened): unit u (row u of ``chunk_cycles``: wave u // groups, processor group
    u % groups) starts when its processor group's earlier units end; a step ends when the
    last of its wave's units has done that chunk and lasts from the last end before it."""
    units, chunks = chunk_cycles.shape
    free = np.zeros(groups, np.int64)  # when each processor group's last unit ended
    ends = np.empty(chunks, np.int64)
    edge = i = 0
    for wave in range(-(-units // groups)):
        ends[:] = 0
        for g in range(min(groups, units - wave * groups)):
            done = free[g]
            for c in range(chunks):
                done += chunk_cycles[wave * groups + g, c]
                ends[c] = max(ends[c], done)
            free[g] = done
        for c in range(chunks):
            if keep[wave * chunks + c]:
                out[i] = max(edge, ends[c]) - edge
                edge = max(edge, ends[c])
                i += 1
    return out


def layer_stats(layer: ConvLayer, arch, s: Schedule) -> LayerStats:
    """LayerStats of the fast model's schedule: its counts priced through the memory
    model."""
    return price(layer, *counted(layer, arch, s), arch)


def counted(layer: ConvLayer, arch, s: Schedule) -> Counted:
    """The counts and steps of the fast model's schedule (``layer_stats`` before pricing)."""
    p = arch.params(Params)
    c = counts(layer, p, s)
    sram = c.sram_ifmap_bytes + c.sram_filter_bytes + c.sram_ofmap_bytes
    return Counted(c, steps(layer, p, s, sram))


def imbalance(stats: LayerStats, level: str = "group") -> float:
    """Max / mean cycles over processor groups (``group``) or processors (``processor``)."""
    mean = stats.extra[f"{level}_cycles_mean"]
    return stats.extra[f"{level}_cycles_max"] / mean if mean else 1.0


def pair_products(layer: ConvLayer, x: np.ndarray, w: np.ndarray, bias) -> np.ndarray:
    """Outputs from the decided pairs only, as the data operation circuit forms them: per
    output pixel, each non-zero feature of the receptive field, in bit order (taps, then
    channels), is multiplied by the weights of that bit of every kernel of its conv group
    that are non-zero, and added to their outputs. Per output that is one multiply-add per
    decided pair in bit order, lowest first, as the priority encoder issues them: float32
    products and sums, or int8 in and exact int32 out. The zero inputs are skipped; over the
    weights the loop runs dense and vectorised across a conv group's kernels, adding a
    product with a zero weight (an exact +0, which leaves any sum unchanged) except for a
    non-finite feature, whose zero-weight products are skipped as the machine skips them."""
    integer = np.issubdtype(x.dtype, np.integer)
    acc = np.int64 if integer else np.float32
    if layer.Cg == 1 and np.isfinite(x).all():
        # One input channel: an output's decided pairs are its non-zero inputs' taps, in bit
        # (row-major tap) order, so the depthwise tap sum adds the same products in the same
        # order; a zero input's skipped product is a +-0, which leaves the sum (never -0) as
        # it is.
        return engine.finish(engine.depthwise(x, w, layer, acc, bias=bias), None, layer,
                             integer)
    G, R, S = layer.groups, layer.R, layer.S
    xp = np.ascontiguousarray(pad_input(x.astype(acc, copy=False), layer))
    # per conv group, blocks of two registers of kernels, each bit's (tap, channel) weights
    # side by side
    blocks = kernel_blocks(w, acc, G, 2 * simd.width(acc), taps="rsc")
    out = np.empty(layer.output_shape, acc)
    args = (xp, blocks, layer.Kg, R, S, *layer.stride, *layer.dilation, out)
    in_parallel(_pair_macs, args, layer.N * G * layer.P)
    return engine.finish(out, bias, layer, integer)


@njit(cache=True, nogil=True)
def _pair_macs(xp, blocks, Kg, R, S, sh, sw, dh, dw, out, first, stop):  # pragma: no cover
    """out[n, g Kg + k, p, q] = the sum of x x w over the receptive field's non-zero features
    x in bit order and kernel k's weight w of that bit (from 0, in that order), for the output
    rows ``first <= (n G + g) P + p < stop``; a non-finite x only meets the non-zero weights.
    ``xp``: the padded input, N x C x Hp x Wp; ``blocks``: ``derived.kernel_blocks`` in bit
    order, two vector registers wide. Per output row, the R input rows it reads are first
    gathered channels last (``field``: a tap's channels side by side, as the bit order reads
    them); per pixel, two blocks of kernels at a time keep their sums in vector registers
    (``simd``) over all the bits, the zero features skipped; a row's sums are kept
    pixel-major (``sums``; a last block's missing kernels thrown away), then written to the
    output's rows."""
    G, n_blocks, width = blocks.shape[0], blocks.shape[1], blocks.shape[5]
    Cg, Wp = xp.shape[1] // G, xp.shape[3]
    P, Q = out.shape[2], out.shape[3]
    field = np.empty((R, Wp, Cg), xp.dtype)
    sums = np.empty((Q, n_blocks * width), out.dtype)
    weights, flat = blocks.reshape(-1), sums.reshape(-1)
    lanes, span = simd.lanes(flat), R * S * Cg * width  # span: one block's weights
    if 2 * lanes != width:
        raise ValueError("kernel blocks are not two vector registers wide")
    for row in range(first, stop):
        n, g, p = row // (G * P), row // P % G, row % P
        for r in range(R):
            h = p * sh + r * dh
            for c in range(Cg):
                line = xp[n, g * Cg + c, h]
                for v in range(Wp):
                    field[r, v, c] = line[v]
        for b in range(0, n_blocks, 2):  # the blocks' weights are read again from the cache
            pair = b + 1 < n_blocks  # a second block of kernels
            for q in range(Q):  # for each pixel of the row
                a0, a1 = simd.zeros(flat), simd.zeros(flat)  # block b's sums
                b0, b1 = simd.zeros(flat), simd.zeros(flat)  # block b + 1's
                first_bit = (g * n_blocks + b) * span  # block b's weights of bit 0
                for r in range(R):
                    for s in range(S):
                        features = field[r, q * sw + s * dw]
                        for c in range(Cg):
                            value = features[c]
                            if value != 0:
                                at = first_bit + ((r * S + s) * Cg + c) * width
                                if value - value == 0:  # finite: a 0 weight's product is +-0
                                    simd.madd(a0, weights, at, value)
                                    simd.madd(a1, weights, at + lanes, value)
                                    if pair:
                                        simd.madd(b0, weights, at + span, value)
                                        simd.madd(b1, weights, at + span + lanes, value)
                                else:
                                    simd.madd_nonzero(a0, weights, at, value)
                                    simd.madd_nonzero(a1, weights, at + lanes, value)
                                    if pair:
                                        simd.madd_nonzero(b0, weights, at + span, value)
                                        simd.madd_nonzero(b1, weights, at + span + lanes,
                                                          value)
                to = q * sums.shape[1] + b * width
                simd.store(a0, flat, to)
                simd.store(a1, flat, to + lanes)
                if pair:
                    simd.store(b0, flat, to + width)
                    simd.store(b1, flat, to + width + lanes)
        engine.store_row(sums[:, :Kg], out, n, g * Kg, p)


@register
class SparsePairs(Machine):
    name = NAME
    Params = Params
    compute_on_every_core = True  # its pair kernel runs rows on the thread pool

    def supports(self, layer: ConvLayer, arch) -> str | None:
        return None

    def compute(self, layer, x, w, bias, arch):
        return pair_products(layer, x, w, bias)

    def estimate(self, layer, x_mask, w_mask, arch):
        return layer_stats(layer, arch, self.count(layer, x_mask, w_mask, arch))

    def estimate_memo(self, layer, x_mask, w_mask, arch, memo: Memo):
        """``estimate``, the counts and steps kept in ``memo`` per machine (``Params``): they
        follow the masks and the machine alone, so a point that changes only the memory,
        clock or energy prices kept steps; and the pair counts, which follow the masks
        alone (K x N*P*Q int32, the size of the layer's output), kept for every machine."""
        p = arch.params(Params)

        def pairs():
            return memo.get(("pairs",), lambda: bitconv.pair_counts(
                layer, x_mask, bitconv.pack_weights(layer, w_mask)))

        kept = memo.get(("counted", p), lambda: counted(
            layer, arch, schedule(layer, x_mask, w_mask, p, pairs())))
        return price(layer, *kept, arch)

    def count(self, layer, x_mask, w_mask, arch) -> Schedule:
        return schedule(layer, x_mask, w_mask, arch.params(Params))

    def to_price(self, layer, arch, s: Schedule) -> Counted:
        return counted(layer, arch, s)

    def emulate(self, layer, x, w, bias, arch):
        from ..emulate.sparse_pairs import emulate

        return emulate(layer, x, w, bias, arch)

    def hardware(self, arch, dtype):
        """Per processor: a multiplier, its feature and weight operand registers, an
        accumulator and its kernel store (``kernel_store_bytes`` of SRAM); the three SRAMs.
        The bitmap AND and priority encoders are not counted (docs/area.md)."""
        from ..area import Hardware, element_bits, memory_kib

        p = arch.params(Params)
        return Hardware(macs=p.processors,
                        register_bits=p.processors * (2 * element_bits(dtype) + 32),
                        sram_kib={**memory_kib(arch.memory),
                                  "kernel stores": p.processors * p.kernel_store_bytes / 1024})

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

