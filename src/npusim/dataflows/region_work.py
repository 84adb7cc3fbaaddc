"""What every region of the input-reuse device has to do, counted from 0/1 masks.

Every stride phase input (``phases``) is cut into regions of ``rh x rw`` pixels
on one grid (Fig. 5/7); region ``t`` of every phase feeds the same outputs, so a
job takes it through all phases. For region ``t``, kernel ``k`` and a
group of ``l`` channels (the region's depth), a weight cycle ``(group, tap)``
runs unless it is skipped: all ``l`` weights of that tap are zero (claims 6/15),
or all ``l`` channel slices of the region are zero (the compressed stream says so:
claim 7, input-side skipping). With ``l = 1`` the count is a matrix product,

    cycles[n, k, t] = sum_c any(x[n, c, region t]) * nonzero_taps[k, c],

done with BLAS. Jobs are laid out in the order the device runs them: region-major
(image, region row, region column), then conv group, then kernel set of
``P`` kernels (one per processing unit), so the arrays feed ``operation_units``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..bitconv import popcount
from ..derived import derived, frozen
from ..ir import ConvLayer
from ..jit import njit
from ..reference import pad_input
from .operation_units import Transfers, reduce_last
from .phases import Part, Phase, Plan, plan


@dataclass(frozen=True)
class Geometry:
    """The device's shape as the counts need it."""

    region: tuple[int, int]
    depth: int
    pus: int
    accumulators: int
    fan_in: int
    stealing: bool


@dataclass
class Work:
    """Jobs, transfers and skip counts of one layer; ``region_nonzeros``: non-zero input
    pixels of every region in every conv group's channels, over the stride phases (N * T
    x G), regions in job order;
    ``transfers`` as the device runs (with its work stealing), ``plain_transfers`` those
    without stealing (None when it is off)."""

    slot_cycles: np.ndarray
    transfers: Transfers
    plain_transfers: Transfers | None
    dense_cycles: int
    weight_only_cycles: int
    products: int
    useful_products: int
    input_nonzeros: int
    weight_nonzeros: int
    sram_ifmap_words: int
    sram_ifmap_bitmaps: int
    regions: int
    pofm_peak: tuple[int, int]
    region_nonzeros: np.ndarray
    kernel_parts: int


def tap_weights(layer: ConvLayer, w_mask: np.ndarray) -> np.ndarray:
    """Non-zero weights at each (conv group, channel, kernel row, kernel column), summed over
    the group's kernels: G x Cg x R x S int64 (added as bytes: several times faster than a
    sum in int64 over the kernel axis); once per read-only mask (``derived``), read-only."""
    key = ("tap_weights", layer.K, layer.Cg, layer.R, layer.S, layer.groups)
    return derived(w_mask, key, lambda: frozen(_tap_weights(layer, w_mask)))


def _tap_weights(layer: ConvLayer, w_mask: np.ndarray) -> np.ndarray:
    rows = np.asarray(w_mask, np.bool_).reshape(layer.groups, layer.Kg, -1).view(np.uint8)
    acc = np.uint16 if layer.Kg < 2**16 else np.int64
    counts = np.add.reduce(rows, axis=1, dtype=acc).astype(np.int64)
    return counts.reshape(layer.groups, layer.Cg, layer.R, layer.S)


def useful_products(layer: ConvLayer, xp_mask: np.ndarray, per_tap: np.ndarray) -> int:
    """Products of a non-zero weight and a non-zero pixel that reach a valid output (MACs):
    sum over channels and taps of (non-zero weights there, ``tap_weights``) x (non-zero
    pixels of the padded input mask ``xp_mask`` the tap meets)."""
    seen = _tap_ones(xp_mask.view(np.uint8), layer.R, layer.S, layer.P, layer.Q,
                     *layer.stride, *layer.dilation)
    return int((seen.reshape(per_tap.shape) * per_tap).sum())


@njit(cache=True, nogil=True)
def _tap_ones(xp, R, S, P, Q, sh, sw, dh, dw):  # pragma: no cover
    """seen[c, r, s]: non-zero pixels of channel c that tap (r, s) meets over all outputs and
    images of the padded mask ``xp`` (N x C x Hp x Wp, 0/1). Tap (r, s) reads the window
    P x Q at (r dh // sh, s dw // sw) of stride phase (r dh % sh, s dw % sw), so one
    summed-area table per phase gives every tap's count in four look-ups."""
    N, C, Hp, Wp = xp.shape
    seen = np.zeros((C, R, S), np.int64)
    table = np.zeros((Hp + 1, Wp + 1), np.int64)
    read = np.zeros((sh, sw), np.bool_)  # phases some tap reads
    for r in range(R):
        for s in range(S):
            read[r * dh % sh, s * dw % sw] = True
    for n in range(N):
        for c in range(C):
            for a in range(sh):
                for b in range(sw):
                    if not read[a, b]:
                        continue
                    rows, cols = (Hp - a + sh - 1) // sh, (Wp - b + sw - 1) // sw
                    for i in range(rows):
                        run = 0
                        for j in range(cols):
                            run += xp[n, c, a + i * sh, b + j * sw]
                            table[i + 1, j + 1] = table[i, j + 1] + run
                    for r in range(R):
                        u = r * dh // sh
                        for s in range(S):
                            v = s * dw // sw
                            if r * dh % sh == a and s * dw % sw == b:
                                seen[c, r, s] += (table[u + P, v + Q] - table[u, v + Q]
                                                  - table[u + P, v] + table[u, v])
    return seen


def part_weights(w_mask: np.ndarray, layer: ConvLayer, part: Part, taps) -> np.ndarray:
    """Non-zero flags of the part's taps ``taps`` (indices), G x Kg x Cg x taps."""
    # fancy indexing lays the taps axis outermost in memory, so each tap's slice that the
    # tap-by-tap reductions read is contiguous (a reshaped view would stride by R*S)
    wp = w_mask[:, :, part.r[taps], part.s[taps]]
    return wp.reshape(layer.groups, layer.Kg, layer.Cg, -1)


def part_taps(w_mask: np.ndarray, layer: ConvLayer, part: Part, taps: np.ndarray, depth: int):
    """What ``active_cycles`` takes of the weights for the part's taps ``taps``
    (``TapWeights``) and their ``weight_only_cycles``; once per read-only mask
    (``derived``)."""
    r, s = part.r[taps], part.s[taps]
    key = ("part_taps", layer.groups, depth, r.tobytes(), s.tobytes())

    def make():
        wp = frozen(part_weights(w_mask, layer, part, taps))
        return TapWeights(wp), weight_only_cycles(wp, depth)
    return derived(w_mask, key, make)


class TapWeights:
    """One part's weight flags ``wp`` (G x Kg x Cg x taps, read-only) and, made on first use
    and kept, the two forms ``active_cycles`` counts with: ``live``, the non-zero taps per
    kernel and channel (G x Kg x Cg float32, exact), for matrix products over many regions;
    ``words``, each kernel's and tap's flags packed 64 channels a word (G x Kg x taps x
    ceil(Cg / 64) uint64, ``channel_words``), for a few regions against many weights (a
    fully connected layer: one region, a 25088 x 4096 mask, whose ``live`` would be 411 MB
    read for 4096 sums)."""

    def __init__(self, wp: np.ndarray):
        self.wp = wp
        self._live = self._words = None

    @property
    def live(self) -> np.ndarray:
        if self._live is None:
            self._live = frozen(reduce_last(self.wp, np.add, np.float32))
        return self._live

    @property
    def words(self) -> np.ndarray:
        if self._words is None:
            self._words = frozen(channel_words(self.wp.transpose(0, 1, 3, 2)))
        return self._words


def channel_words(flags: np.ndarray) -> np.ndarray:
    """``flags`` (... x C bool) packed 64 channels a word, ... x ceil(C / 64) uint64 (the
    last word's spare bits 0). Only AND and popcount read them: which bit holds which
    channel is the same on every operand and not otherwise defined."""
    packed = np.packbits(flags, axis=-1)
    words = np.zeros((*packed.shape[:-1], -(-packed.shape[-1] // 8) * 8), np.uint8)
    words[..., :packed.shape[-1]] = packed
    return words.view(np.uint64)


def grid_counts(xp_mask: np.ndarray, ph: Phase, layout: Plan,
                region: tuple[int, int]) -> np.ndarray:
    """Non-zero pixels per region and channel of one phase, N x C x Th x Tw, on the common
    region grid (from ``layout.origin``, ``layout.extent`` pixels, rounded up to regions)."""
    shape = tuple(-(-e // r) for e, r in zip(layout.extent, region, strict=True))
    return _block_counts(xp_mask.view(np.uint8), ph.a, ph.b, *ph.stride, ph.rows, ph.cols,
                         *layout.origin, *region, *shape)


@njit(cache=True, nogil=True)
def _block_counts(xp, a, b, sh, sw, rows, cols, i0, j0, rh, rw, th, tw):  # pragma: no cover
    """counts[n, c, (i - i0) // rh, (j - j0) // rw] += xp[n, c, a + i sh, b + j sw] for the
    phase's pixels from ``(i0, j0)`` on (at most ``rows`` x ``cols``); ``th`` x ``tw``
    blocks."""
    N, C = xp.shape[:2]
    counts = np.zeros((N, C, th, tw), np.int64)
    j1 = min(cols, j0 + tw * rw)
    band = np.empty(max(j1 - j0, 0), np.int32)  # one block row's pixel rows, column by column
    for n in range(N):
        for c in range(C):
            for t in range(th):
                band[:] = 0
                for i in range(i0 + t * rh, min(i0 + t * rh + rh, rows)):
                    for j in range(j0, j1):
                        band[j - j0] += xp[n, c, a + i * sh, b + j * sw]
                for u in range(tw):  # each block's columns of the band: no division a pixel
                    total = 0
                    for j in range(u * rw, min(u * rw + rw, band.size)):
                        total += band[j]
                    counts[n, c, t, u] += total
    return counts


def active_cycles(active: np.ndarray, weights: TapWeights, depth: int) -> np.ndarray:
    """Non-skipped weight cycles N x G x Kg x T of one part.

    ``active`` is N x G x Cg x T (region channel slice has a non-zero), ``weights`` the
    part's flags (``TapWeights``: G x Kg x Cg x taps); channels go ``depth`` at a time (one
    cycle per group and tap).
    """
    wp = weights.wp
    if depth == 1 and active.shape[0] * active.shape[3] * wp.shape[3] <= FEW_COLUMNS:
        return _popcount_cycles(active, weights.words)
    a = active.astype(np.float32)
    if depth == 1:  # sums of small integers below 2**24: exact in float32
        return np.matmul(weights.live, a).astype(np.int64)
    g, kg, cg, taps = wp.shape
    out = 0
    for c0 in range(0, cg, depth):
        wj = wp[:, :, c0:c0 + depth].transpose(0, 1, 3, 2).reshape(g, kg * taps, -1)
        hit = np.matmul(wj.astype(np.float32), a[:, :, c0:c0 + depth]) > 0
        out = out + hit.reshape(a.shape[0], g, kg, taps, -1).sum(axis=3)
    return np.asarray(out, np.int64)


# regions x taps up to which ``active_cycles`` counts AND-ed words (a bit per weight flag,
# read once per region and tap) rather than a float32 matrix product (four bytes per kernel
# and channel, read once whatever the regions, then 2 flops a channel and region); on random
# flags, one core: 2048 kernels x 512 channels over 16 regions 0.09 against 0.41 ms, 256 x
# 64 over 196 regions 0.11 against 0.07 ms
FEW_COLUMNS = 64


def _popcount_cycles(active: np.ndarray, words: np.ndarray) -> np.ndarray:
    """``active_cycles`` for depth 1 as set bits of (weight flags AND active channels),
    summed over the channel words and taps: ``words`` is ``TapWeights.words`` (G x Kg x
    taps x D), ``active`` N x G x Cg x T."""
    n, g, _, t = active.shape
    regions = channel_words(active.transpose(0, 1, 3, 2))  # N x G x T x D
    return _and_counts(words, regions, np.empty((n, g, words.shape[1], t), np.int64))


@njit(cache=True, nogil=True)
def _and_counts(words, regions, out):  # pragma: no cover
    """out[n, g, k, j] = the sum over taps and words d of popcount(words[g, k, tap, d] AND
    regions[n, g, j, d]); ``out`` returned."""
    N, G, T, D = regions.shape
    Kg, taps = words.shape[1], words.shape[2]
    for n in range(N):
        for g in range(G):
            for k in range(Kg):
                for j in range(T):
                    region, total = regions[n, g, j], 0
                    for tap in range(taps):
                        kernel = words[g, k, tap]
                        for d in range(D):
                            total += popcount(kernel[d] & region[d])
                    out[n, g, k, j] = total
    return out


def channel_groups(wp: np.ndarray, depth: int) -> np.ndarray:
    """``wp`` (G x Kg x Cg x taps) with channels in groups of ``depth``: any non-zero per group,
    G x Kg x ceil(Cg / depth) x taps."""
    g, kg, cg, taps = wp.shape
    groups = math.ceil(cg / depth)
    padded = np.zeros((g, kg, groups * depth, taps), bool)
    padded[:, :, :cg] = wp
    return padded.reshape(g, kg, groups, depth, taps).any(axis=3)


def weight_only_cycles(wp: np.ndarray, depth: int) -> int:
    """Weight cycles per region summed over kernels, skipping zero weights only."""
    return int(np.count_nonzero(wp if depth == 1 else channel_groups(wp, depth)))


def kernel_sets(per_kernel: np.ndarray, pus: int) -> np.ndarray:
    """N x G x Kg x T x ... -> N x T x (G * sets) x P x ... (zero-padded kernel slots)."""
    n, g, kg, t, *rest = per_kernel.shape
    sets = math.ceil(kg / pus)
    out = np.zeros((n, t, g, sets * pus, *rest), per_kernel.dtype)  # laid out as returned
    out[:, :, :, :kg] = np.moveaxis(per_kernel, 3, 1)
    return out.reshape(n, t, g * sets, pus, *rest)


def part_cycles(layer, counts: list, w_mask, per_tap, layout: Plan, geo: Geometry):
    """Weight cycles N x G x Kg x T x parts, and the dense, weight-only and product counts."""
    n, T = counts[0].shape[0], counts[0].shape[2] * counts[0].shape[3]
    cnt = [c.reshape(n, layer.groups, layer.Cg, T) for c in counts]
    cyc = np.zeros((n, layer.groups, layer.Kg, T, len(layout.parts)), np.int64)
    dense = wonly = products = 0
    for pi, part in enumerate(layout.parts):
        for i in range(len(layout.phases)):
            taps = part.of_phase(i)
            if not taps.size:
                continue
            weights, cycles = part_taps(w_mask, layer, part, taps, geo.depth)
            cyc[..., pi] += active_cycles(cnt[i] > 0, weights, geo.depth)
            dense += math.ceil(layer.Cg / geo.depth) * taps.size * layer.K * n * T
            wonly += cycles * n * T
            per_channel = cnt[i].sum(axis=(0, 3)).astype(np.int64)  # G x Cg
            kernels = per_tap[:, :, part.r[taps], part.s[taps]].sum(axis=2)  # G x Cg
            products += int((kernels * per_channel).sum())
    return cyc, dense, wonly, products


def transfers(sets: np.ndarray, pixels: np.ndarray, layer: ConvLayer, pus: int,
              stealing: bool) -> Transfers:
    """Sequence of transfers from the jobs' per-part cycles (N x T x J x P x parts): one per
    partial OFM with any weight cycle, carrying its kernel and its part's partial-OFM
    pixels. Without stealing a PU fills one partial OFM per part of its kernel (order: job,
    slot, part); with stealing a thief fills one of its own for each part of each victim
    it took cycles of (order: job, victim slot, computing slot, part; see ``_steal``)."""
    flat = np.ascontiguousarray(sets).reshape(-1, pus, sets.shape[-1])
    args = (sets.shape[2], sets.shape[2] // layer.groups, layer.Kg)
    if stealing:  # the kernel is the victim slot's; the job copied, not the records' buffer
        job, slot, _, part, _ = _steal(flat)
        job = job.copy()
    else:
        job, slot, part = _nonzero_slots(flat)
    return Transfers(job, _kernel_of(job, slot, pus, *args), pixels[part])


# the levels above the fronts from which ``_steal`` looks for a run of cycles to count at
# once (nearer, the cycles are played one by one: a run would be short)
RUN_LEVELS = 6
# the distinct cycles of jobs ``_steal`` keeps the counts of, to copy for a later job of the
# same: a layer that repeats its jobs' cycles has few (a kernel set's, in every region);
# past them, a layer of mostly distinct jobs looks up no more (a table of 2 x SEEN slots,
# 48 KiB, stays in cache: one of two slots a job made VGG-16's ``_steal`` 1.3x slower)
SEEN = 1024


@njit(cache=True, nogil=True)
def _steal(cycles):  # pragma: no cover
    """(job, victim slot v, running slot t, part p, weight cycles) of every non-zero count
    of v's part-p cycles that t ran in a job, in order of (job, v, t, p) (rows of one
    buffer with spare room: copy what is kept, not a trimmed copy of all five), under the
    device's work stealing: each cycle every PU with cycles left runs the next of its own
    (front of its queue, parts in order); then each PU that had none at the cycle's start,
    in slot order, takes the last cycle of the PU with most left (the first of equals).

    Counted by queue positions, not cycles. The busy PUs' fronts all stand at the cycles
    run, so the PU with most left is the one whose back is highest, and the thieves take
    positions in one order whatever the cycle: level by level from the highest down, at a
    level the PUs whose queues reach it in slot order, until the level is the fronts' (then
    every PU is done). A PU runs its own positions, those below its final back (``_own``),
    so only the thieves' are played: one at a time, or, while nothing else changes (no PU
    goes idle, none joins the level's PUs, no part ends: ``x`` cycles), all at once: the k
    thieves take k x positions round the level's g PUs, thief s mod k from PU
    (first + s) mod g, a pattern of period lcm(g, k). The cycle loop is written out in one
    function: its steps (the idle PUs, the level's PUs, a run) as numba helpers writing its
    arrays made it 1.2-2x slower.

    A job's counts follow from its own cycles alone, so a job whose cycles equal one of the
    first ``SEEN`` distinct ones played copies that job's counts (``_seen``: a 1x1 layer on
    a narrow dense input repeats each kernel set's cycles in every region)."""
    jobs, pus, parts = cycles.shape
    done = np.zeros((pus, pus, parts), np.int64)  # the job's counts
    # the non-zero counts so far: room for each job's own cycles twice, doubled when a
    # job's counts might not fit (a job's are at most P x P x parts)
    found = np.empty((5, max(2 * jobs * pus * parts, pus * pus * parts)), np.int64)
    n = 0
    bounds = np.zeros((pus, parts + 1), np.int64)  # each PU's parts' starts, then its end
    back = np.zeros(pus, np.int64)  # each PU's queue end: the positions below are left
    part = np.zeros(pus, np.int64)  # a part at or above each PU's back
    idle = np.zeros(pus, np.bool_)
    thieves = np.empty(pus, np.int64)  # the idle PUs, in slot order
    at = np.empty(pus, np.int64)  # the PUs whose queues reach the level, in slot order
    reach = np.zeros(pus, np.bool_)
    # the first job of each of the first SEEN cycles played, in an open-addressing table
    # (-1: a free slot), where its counts start in ``found`` and how many; ``kept`` of them
    seen, seen_at = np.full(2 * SEEN, -1, np.int64), np.empty(2 * SEEN, np.int64)
    seen_n = np.empty(2 * SEEN, np.int64)
    kept = 0
    for j in range(jobs):
        busy, low, top = 0, 1 << 62, 0
        for v in range(pus):
            for p in range(parts):
                bounds[v, p + 1] = bounds[v, p] + cycles[j, v, p]
            back[v] = bounds[v, parts]
            busy += back[v] > 0
            low, top = min(low, back[v]), max(top, back[v])
        if busy == 0:
            continue
        # cleared before the lone PU's branch, which does not read it: cleared after it,
        # the compiled loop ran 2-3 % slower on jobs of several busy PUs
        done[:] = 0
        if busy == 1 and parts == 1:  # one kernel's cycles, spread over every PU at once
            found = _room(found, n, pus)
            n = _alone(found, n, j, back, top)
            continue
        slot = _seen(cycles, j, seen) if kept < SEEN else -1
        if slot >= 0 and seen[slot] >= 0:  # a job of the same cycles: its counts, copied
            found = _room(found, n, seen_n[slot])
            for i in range(seen_at[slot], seen_at[slot] + seen_n[slot]):
                found[0, n], found[1, n], found[2, n] = j, found[1, i], found[2, i]
                found[3, n], found[4, n] = found[3, i], found[4, i]
                n += 1
            continue
        if slot >= 0:
            seen[slot], seen_at[slot] = j, n
            kept += 1
        t = low  # cycles run: until a PU is idle, each runs its own
        k = 0
        for v in range(pus):
            part[v], reach[v] = parts - 1, False
            idle[v] = back[v] <= t
            if idle[v]:
                thieves[k] = v
                k += 1
        # the level taken from and the first ``taken`` of its ``g`` PUs taken there; the
        # highest back of the other PUs (below it, they reach the level too)
        level, taken, g, join = top, 0, 0, top
        while k < pus:
            if g and level - t > RUN_LEVELS and (taken < g or level > join):
                if taken == g:  # the level below: the same PUs
                    level, taken = level - 1, 0
                floor = join  # the lowest level a run may take from
                for i in range(g):
                    v = at[i]
                    floor = max(floor, bounds[v, _part_down(bounds, v, part[v], level)])
                x = min(((level - floor + 1) * g - taken) // k,  # ... and above the fronts:
                        ((level - t) * g - taken) // (k + g))
                for v in range(pus):  # nor may a PU below the level go idle
                    if not idle[v] and not reach[v]:
                        x = min(x, back[v] - t - 1)
                if x >= 2:
                    steals, period = k * x, g * k // math.gcd(g, k)
                    for s in range(min(steals, period)):
                        v = at[(taken + s) % g]
                        p = _part_down(bounds, v, part[v], level)
                        done[v, thieves[s % k], p] += (steals - s + period - 1) // period
                    for i in range(g):
                        part[at[i]] = _part_down(bounds, at[i], part[at[i]], level)
                    total = taken + steals
                    level, taken = level - (total - 1) // g, (total - 1) % g + 1
                    for i in range(g):
                        back[at[i]] = level if i < taken else level + 1
                    t += x
                    continue
            end = False
            for i in range(k):  # one cycle: its thieves, in slot order
                if taken == g:
                    level, taken = level - 1, 0
                    if level < join:  # other PUs reach it: the level's PUs anew
                        g, join = 0, -1
                        for v in range(pus):
                            reach[v] = back[v] > level
                            if reach[v]:
                                at[g] = v
                                g += 1
                            else:
                                join = max(join, back[v])
                if level <= t:
                    end = True  # nothing left but the fronts': every PU is done
                    break
                v = at[taken]
                taken += 1
                back[v] = level
                part[v] = _part_down(bounds, v, part[v], level)
                done[v, thieves[i], part[v]] += 1
            if end:
                break
            t += 1
            grew = False  # PUs whose front met their back go idle
            for v in range(pus):
                if not idle[v] and back[v] <= t:
                    idle[v] = grew = True
            if grew:
                k = 0
                for v in range(pus):
                    if idle[v]:
                        thieves[k] = v
                        k += 1
        _own(done, bounds, back)
        found, n = _found(done, j, found, n)
        if slot >= 0:
            seen_n[slot] = n - seen_at[slot]
    return found[0, :n], found[1, :n], found[2, :n], found[3, :n], found[4, :n]


@njit(cache=True, nogil=True, inline="always")
def _seen(cycles, job, seen):  # pragma: no cover
    """The slot of ``seen`` (a power of two long) holding the first job whose cycles equal
    ``job``'s (``cycles``: jobs x P x parts), or the free slot where ``job`` goes: a hash of
    its cycles, then the slots after it in turn."""
    key = 0
    for v in range(cycles.shape[1]):
        for p in range(cycles.shape[2]):
            key = (key * 31 + cycles[job, v, p]) & 0xFFFFFFFFFF  # below 2**40: no overflow
    slot = (key ^ (key >> 20)) & (seen.size - 1)
    while seen[slot] >= 0:
        other, same = seen[slot], True
        for v in range(cycles.shape[1]):
            for p in range(cycles.shape[2]):
                same = same and cycles[other, v, p] == cycles[job, v, p]
        if same:
            return slot
        slot = (slot + 1) & (seen.size - 1)
    return slot


@njit(cache=True, nogil=True, inline="always")
def _part_down(bounds, v, p, position):  # pragma: no cover
    """The part of PU ``v``'s queue that holds ``position``, looked for from part ``p``
    down (``bounds``: each PU's parts' starts, then its end)."""
    while bounds[v, p] > position:
        p -= 1
    return p


@njit(cache=True, nogil=True, inline="always")
def _own(done, bounds, back):  # pragma: no cover
    """Write each PU's own cycles into ``done`` (P x P x parts): its positions below its
    final ``back``, per part."""
    for v in range(back.size):
        for p in range(bounds.shape[1] - 1):
            done[v, v, p] = max(0, min(back[v], bounds[v, p + 1]) - bounds[v, p])


@njit(cache=True, nogil=True, inline="always")
def _alone(found, n, job, back, c):  # pragma: no cover
    """Write ``_steal``'s counts of a job whose only busy PU has all its ``c`` cycles
    (``back``: every PU's, the others' 0) in one part into ``found`` from column ``n``, in
    order; the new ``n``. Each cycle the busy PU runs one and every other PU (idle from the
    start) takes one, in slot order, while any are left: of c cycles the busy PU runs
    ceil(c / P), and the others c // P each, the first (c mod P) - 1 of them one more."""
    pus = back.size
    whole, rest = c // pus, c % pus
    i = v = 0
    while back[v] == 0:
        v += 1
    for t in range(pus):
        if t == v:
            k = whole + (rest > 0)
        else:
            k = whole + (i < rest - 1)
            i += 1
        if k:
            found[0, n], found[1, n], found[2, n] = job, v, t
            found[3, n], found[4, n] = 0, k
            n += 1
    return n


@njit(cache=True, nogil=True, inline="always")
def _room(found, n, more):  # pragma: no cover
    """``found`` (5 x room), or a copy of twice the room when ``more`` counts from column
    ``n`` might not fit."""
    if n + more <= found.shape[1]:
        return found
    grown = np.empty((5, 2 * found.shape[1]), np.int64)
    grown[:, :n] = found[:, :n]
    return grown


@njit(cache=True, nogil=True, inline="always")
def _found(done, job, found, n):  # pragma: no cover
    """Write (job, victim, runner, part, count) of every non-zero count of ``done`` (one
    job's, P x P x parts) into ``found`` (5 x room) from column ``n``, in a copy of twice
    the room when they might not fit; (``found``, the new ``n``)."""
    pus, _, parts = done.shape
    found = _room(found, n, pus * pus * parts)
    for v in range(pus):
        for t in range(pus):
            for p in range(parts):
                if done[v, t, p] != 0:
                    found[0, n], found[1, n], found[2, n] = job, v, t
                    found[3, n], found[4, n] = p, done[v, t, p]
                    n += 1
    return found, n


@njit(cache=True, nogil=True)
def _kernel_of(job, slot, pus, jobs_per_region, sets_per_group, kg):  # pragma: no cover
    """The kernel that slot ``slot`` of job ``job`` runs: job ``j`` runs kernel set
    ``j mod jobs_per_region`` (conv group major), ``pus`` kernels a set."""
    kernel = np.empty(job.size, np.int64)
    last = first = -1  # the job before, and its set's first kernel
    for i in range(job.size):
        if job[i] != last:  # a job's slots are consecutive: one division a job
            last = job[i]
            group, kset = divmod(last % jobs_per_region, sets_per_group)
            first = group * kg + kset * pus
        kernel[i] = first + slot[i]
    return kernel


@njit(cache=True, nogil=True)
def _nonzero_slots(cycles):  # pragma: no cover
    """(job, slot, part) of every non-zero entry of ``cycles`` (jobs x P x parts), in order
    (``np.nonzero``'s, 1.1-2.4x quicker on jobs x 4 x 1-3)."""
    jobs, pus, parts = cycles.shape
    job, slot, part = (np.empty(cycles.size, np.int64), np.empty(cycles.size, np.int64),
                       np.empty(cycles.size, np.int64))
    n = 0
    for j in range(jobs):
        for s in range(pus):
            for p in range(parts):
                if cycles[j, s, p] != 0:
                    job[n], slot[n], part[n] = j, s, p
                    n += 1
    return job[:n], slot[:n], part[:n]


def reorder(work: Work, order: np.ndarray) -> Work:
    """``work`` with its jobs run in ``order`` (the region-major index of each job in run
    order): weight cycles permuted, transfers renumbered and kept in run order (stable
    within a job)."""
    if np.array_equal(order, np.arange(len(order))):
        return work

    def moved(t: Transfers | None) -> Transfers | None:
        if t is None:
            return None
        return Transfers(*_moved_blocks(t.job, t.kernel, t.pixels, order))

    return dataclasses.replace(work, slot_cycles=work.slot_cycles[order],
                               transfers=moved(work.transfers),
                               plain_transfers=moved(work.plain_transfers))


@njit(cache=True, nogil=True)
def _moved_blocks(job, kernel, pixels, order):  # pragma: no cover
    """``reorder``'s transfers: a job's transfers are one block (they are made in job
    order), so job ``order[i]``'s block is copied, in its own order, as job i's."""
    jobs = order.size
    start = np.zeros(jobs + 1, np.int64)
    for i in range(job.size):
        start[job[i] + 1] += 1
    for j in range(jobs):
        start[j + 1] += start[j]
    out_job, out_kernel = np.empty(job.size, job.dtype), np.empty(job.size, kernel.dtype)
    out_pixels = np.empty(job.size, pixels.dtype)
    n = 0
    for i in range(jobs):
        j = order[i]
        for k in range(start[j], start[j + 1]):
            out_job[n], out_kernel[n], out_pixels[n] = i, kernel[k], pixels[k]
            n += 1
    return out_job, out_kernel, out_pixels


@dataclass(frozen=True)
class RegionCounts:
    """What ``region_work`` counts before the kernels are dealt to processing units (so the
    same for every count of them): the weight cycles N x G x Kg x T x parts, the dense,
    weight-only, product and useful-product counts, and the regions' non-zero pixels per
    conv group."""

    cycles: np.ndarray
    dense: int
    weight_only: int
    products: int
    useful_products: int
    input_nonzeros: int
    weight_nonzeros: int
    sram_ifmap_words: int
    region_nonzeros: np.ndarray
    phases: int
    pixels: np.ndarray
    pofm_peak: tuple[int, int]
    kernel_parts: int


def region_counts(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray,
                  geo: Geometry) -> RegionCounts:
    """The counts of ``region_work`` that do not depend on ``geo.pus`` or ``geo.stealing``."""
    layout = plan(layer, geo.region, geo.accumulators, geo.fan_in)
    xp = pad_input(np.asarray(x_mask, np.bool_), layer, False)
    per_tap = tap_weights(layer, w_mask)
    counts = [grid_counts(xp, ph, layout, geo.region) for ph in layout.phases]
    cyc, dense, wonly, products = part_cycles(layer, counts, w_mask, per_tap, layout, geo)
    shapes = [part.pofm_shape(geo.region) for part in layout.parts]
    return RegionCounts(cycles=cyc, dense=dense, weight_only=wonly, products=products,
                        useful_products=useful_products(layer, xp, per_tap),
                        input_nonzeros=int(np.count_nonzero(x_mask)),
                        weight_nonzeros=int(per_tap.sum()),
                        sram_ifmap_words=int(sum(c.sum() for c in counts)),
                        region_nonzeros=group_nonzeros(layer, counts),
                        phases=len(layout.phases),
                        pixels=np.array([h * w for h, w in shapes], np.int64),
                        pofm_peak=max(shapes, key=lambda s: s[0] * s[1]),
                        kernel_parts=len(layout.parts))


def group_nonzeros(layer: ConvLayer, counts: list) -> np.ndarray:
    """Non-zero pixels of every region (image, region row, region column) in each conv
    group's channels, summed over the phases' counts (``grid_counts``): N * T x G."""
    n, _, th, tw = counts[0].shape
    per_group = sum(c.reshape(n, layer.groups, layer.Cg, th, tw).sum(axis=2) for c in counts)
    return per_group.transpose(0, 2, 3, 1).reshape(-1, layer.groups)


def count_key(geo: Geometry) -> tuple:
    """The part of ``geo`` that ``region_counts`` depends on."""
    return geo.region, geo.depth, geo.accumulators, geo.fan_in


def region_work(layer: ConvLayer, x_mask: np.ndarray, w_mask: np.ndarray,
                geo: Geometry, counted: RegionCounts | None = None) -> Work:
    """Jobs, transfers and skip counts of ``layer`` from the non-zero masks of x and w;
    ``counted``: their ``region_counts`` on a geometry of the same ``count_key``, if made
    already."""
    c = region_counts(layer, x_mask, w_mask, geo) if counted is None else counted
    sets = kernel_sets(c.cycles, geo.pus)  # N x T x J x P x parts
    n, T = sets.shape[:2]
    return Work(slot_cycles=reduce_last(sets, np.add).reshape(-1, geo.pus),
                transfers=transfers(sets, c.pixels, layer, geo.pus, geo.stealing),
                plain_transfers=(transfers(sets, c.pixels, layer, geo.pus, False)
                                 if geo.stealing else None),
                dense_cycles=c.dense, weight_only_cycles=c.weight_only, products=c.products,
                useful_products=c.useful_products, input_nonzeros=c.input_nonzeros,
                weight_nonzeros=c.weight_nonzeros, sram_ifmap_words=c.sram_ifmap_words,
                sram_ifmap_bitmaps=n * layer.C * T * c.phases, regions=n * T,
                pofm_peak=c.pofm_peak, region_nonzeros=c.region_nonzeros,
                kernel_parts=c.kernel_parts)
