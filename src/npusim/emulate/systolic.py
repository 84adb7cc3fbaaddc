"""Cycle emulator of the rows x cols systolic array (``dataflows/systolic``), OS, WS and IS.

Every PE holds registers and does one multiply-accumulate per cycle; operands enter
at the array's edges skewed by one cycle per row or column and move one PE per cycle.

- OS (output-stationary): pixel rows of the ifmap matrix enter the left edge and move
  right, filter columns enter the top edge and move down; each PE keeps its own
  accumulator (initialised to the bias) over the whole reduction, read out when the
  fold ends (the drain overlaps the next fold's fill). A fold ends in the cycle the
  last operand pair meets at the far corner: Kr + rows + cols - 2 cycles.
- WS / IS (weight- / input-stationary): the stationary tile is shifted in from the top,
  one row per cycle (rows cycles); the streamed vectors enter the left edge, skewed,
  and move right; partial sums enter the top edge (bias, or the previous reduction
  fold's partial sum from the ofmap buffer), move down one PE per cycle gaining one
  product per PE, and leave at the bottom edge. A fold ends when the last partial sum
  leaves: rows + (streamed + rows + cols - 2) cycles.

The controller runs each fold on a fixed schedule for the whole array: lanes with no
work mapped carry zeros (generated, not read from SRAM). The emulator counts the
cycles the array is busy; SCALE-Sim, and so ``LayerStats.cycles``, report that
number minus one (the index, from 0, of the last busy cycle).

Memory events are logged as the walk meets them (``FoldLog``): for each fold, the
tiles of each operand it read or accumulated into (a tile met again is the same
block), the words it moved at the array's edges and the PEs that held work. The
block sizes follow docs/systolic.md's rules, computed here from the data the folds
touch: the used input is counted from the addresses the windows read (padding
excluded) and an ifmap block holds the share of it that its pixels (OS), stationary
words (IS) or streamed pixels (WS, per channel set of its reduction rows) are of
the group's. The memory model (``npusim.memory``) turns that log into time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine import im2col
from ..ir import ConvLayer
from ..memory import Steps
from ..quant import check_int32

PSUM_BYTES = 4  # int32 / float32 accumulators, as spilled


@dataclass
class EmulatorRun:
    """What the emulated array produced: outputs, busy cycles, SRAM words (ifmap, filter,
    ofmap) read or written at the array's edges, folds, and the memory steps logged."""

    output: np.ndarray
    busy_cycles: int
    words: tuple[int, int, int]
    folds: int
    fold_cycles: tuple[int, ...] = ()  # each fold's cycles, in the order run
    mapped_pe_busy_cycles: int = 0     # sum over folds of PEs with work x fold cycles
    steps: Steps | None = None         # the folds as the memory model times them


class FoldLog:
    """Each fold's memory events, in the order the walk runs them (units: words,
    bytes, cycles). ``block(operand, key)`` names the tile ``key`` of an operand:
    the same key, the same block id."""

    FIELDS = ("compute", "ifmap", "ifmap_bytes", "ifmap_size", "ifmap_held", "filter",
              "filter_bytes", "ofmap", "ofmap_bytes", "psum_bytes", "sram_bytes")

    def __init__(self, elem: int):
        self.elem = elem
        self.rows: list[tuple] = []
        self.mapped = 0
        self._ids: dict[str, dict] = {"ifmap": {}, "filter": {}, "ofmap": {}}

    def block(self, operand: str, key) -> int:
        ids = self._ids[operand]
        return ids.setdefault(key, len(ids))

    def fold(self, cycles: int, pes: int, words: int, ifmap: tuple, filt: tuple,
             ofmap: tuple) -> None:
        """One fold: its cycles, PEs holding work, words at its edges; ``ifmap`` (key,
        bytes fetched, block bytes[, bytes it adds to the buffer held: by default the
        block's]), ``filt`` (key, bytes), ``ofmap`` (key, output words)."""
        out_words = ofmap[1]
        self.mapped += pes * cycles
        held = ifmap[3] if len(ifmap) > 3 else ifmap[2]
        self.rows.append((cycles, self.block("ifmap", ifmap[0]), ifmap[1], ifmap[2], held,
                          self.block("filter", filt[0]), filt[1], self.block("ofmap", ofmap[0]),
                          out_words * self.elem, out_words * PSUM_BYTES, words * self.elem))

    def steps(self) -> Steps:
        """The logged folds as ``Steps``; the last counts one cycle less (SCALE-Sim's
        index of the last busy cycle)."""
        columns = zip(*self.rows, strict=True)
        cols = {k: np.array(v, np.int64) for k, v in zip(self.FIELDS, columns, strict=True)}
        cols["compute"][-1] -= 1
        return Steps(**cols)


def used_pixels(layer: ConvLayer) -> int:
    """Input pixels (per image and channel) some window of ``layer`` reads: the distinct
    addresses in the im2col of an image of addresses (padding reads none)."""
    one = ConvLayer(1, 1, layer.H, layer.W, 1, layer.R, layer.S, layer.stride, layer.padding,
                    layer.dilation)
    addresses = np.arange(1, layer.H * layer.W + 1, dtype=np.int64).reshape(1, 1, layer.H,
                                                                            layer.W)
    read = np.unique(im2col(addresses, one))
    return int((read > 0).sum())


def share(total: int, start: int, stop: int, whole: int) -> int:
    """Bytes of ``total`` that units [start, stop) of ``whole`` hold, rounded so that
    consecutive spans add up to ``total``."""
    return total * stop // whole - total * start // whole


def os_fold(a: np.ndarray, b: np.ndarray, init: np.ndarray, rows: int, cols: int):
    """One output-stationary fold: ``a`` (m x T) pixels x reduction, ``b`` (T x f) weights,
    ``init`` (m x f) accumulator start. Returns (m x f outputs, cycles)."""
    m, T = a.shape
    f = b.shape[1]
    left = np.zeros((rows, T), a.dtype)
    top = np.zeros((T, cols), b.dtype)
    left[:m], top[:, :f] = a, b
    h = np.zeros((rows, cols), a.dtype)      # operand moving right
    v = np.zeros((rows, cols), a.dtype)      # operand moving down
    acc = np.zeros((rows, cols), init.dtype)
    acc[:m, :f] = init
    ridx, cidx = np.arange(rows), np.arange(cols)
    cycle, last = 0, T + rows + cols - 3     # the last pair meets PE(rows-1, cols-1) then
    while True:
        h[:, 1:], v[1:, :] = h[:, :-1], v[:-1, :]
        k_row, k_col = cycle - ridx, cycle - cidx  # skew: row i, column j start i, j late
        h[:, 0] = np.where((k_row >= 0) & (k_row < T), left[ridx, np.clip(k_row, 0, T - 1)], 0)
        v[0, :] = np.where((k_col >= 0) & (k_col < T), top[np.clip(k_col, 0, T - 1), cidx], 0)
        acc += h * v
        cycle += 1
        if cycle > last:
            return acc[:m, :f], cycle


def stationary_fold(stat: np.ndarray, stream: np.ndarray, init: np.ndarray, rows: int,
                    cols: int):
    """One WS/IS fold: ``stat`` (k x c) held in the PEs, ``stream`` (k x T) entering the
    left edge, ``init`` (T x c) partial sums entering the top. Returns (T x c, cycles)."""
    k, c = stat.shape
    T = stream.shape[1]
    held = np.zeros((rows, cols), stat.dtype)
    tile = np.zeros((rows, cols), stat.dtype)
    tile[:k, :c] = stat
    cycle = 0
    for r in range(rows):                    # shift in, bottom row first
        held[1:] = held[:-1]
        held[0] = tile[rows - 1 - r]
        cycle += 1
    left = np.zeros((rows, T), stream.dtype)
    left[:k] = stream
    top = np.zeros((T, cols), init.dtype)
    top[:, :c] = init
    out, cycle = _stream(held, left, top, cycle)
    return out[:, :c], cycle


def _stream(held, left, top, cycle):
    """Stream phase of a WS/IS fold: partial sums move down, streamed operands right."""
    rows, cols = held.shape
    T = left.shape[1]
    x = np.zeros((rows, cols), held.dtype)
    ps = np.zeros((rows, cols), held.dtype)
    out = np.zeros((T, cols), held.dtype)
    ridx, cidx = np.arange(rows), np.arange(cols)
    start, done = cycle, 0
    while done < T * cols:
        tau = cycle - start
        x[:, 1:], ps[1:] = x[:, :-1], ps[:-1]
        t_row, t_col = tau - ridx, tau - cidx
        x[:, 0] = np.where((t_row >= 0) & (t_row < T), left[ridx, np.clip(t_row, 0, T - 1)], 0)
        ps[0] = np.where((t_col >= 0) & (t_col < T), top[np.clip(t_col, 0, T - 1), cidx], 0)
        ps += x * held
        t_out = tau - (rows - 1) - cidx      # which streamed vector leaves each column
        leaving = (t_out >= 0) & (t_out < T)
        out[t_out[leaving], cidx[leaving]] = ps[rows - 1, leaving]
        done += int(leaving.sum())
        cycle += 1
    return out, cycle


def _operands(layer: ConvLayer, x, w, acc_dtype):
    """Per group: ifmap matrix (M x Kr) and weight matrix (Kr x F) in ``acc_dtype``, the
    reduction ordered tap-major, channel-fastest (r, s, c), as the fast model counts it."""
    G, Cg, R, S, Kg = layer.groups, layer.Cg, layer.R, layer.S, layer.Kg
    cols = im2col(np.asarray(x).astype(acc_dtype), layer)  # N x G x (Cg R S) x PQ
    cols = cols.reshape(layer.N, G, Cg, R, S, -1).transpose(1, 0, 5, 3, 4, 2)
    ifm = cols.reshape(G, -1, R * S * Cg)
    wm = np.asarray(w).astype(acc_dtype).reshape(G, Kg, Cg, R, S).transpose(0, 3, 4, 2, 1)
    return ifm, wm.reshape(G, R * S * Cg, Kg)


def _tiles(n: int, size: int):
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def emulate_layer(layer: ConvLayer, x, w, bias, params) -> EmulatorRun:
    """Run ``layer`` fold by fold on the emulated array described by ``params``
    (the ``[systolic]`` section): outputs (float32, or int32 for int8) and counts."""
    integer = np.issubdtype(np.asarray(x).dtype, np.integer)
    acc = np.int64 if integer else np.float32
    ifm, wm = _operands(layer, x, w, acc)
    G, F = layer.groups, layer.Kg
    b = np.zeros(layer.K, acc) if bias is None else np.asarray(bias).astype(acc)
    run = {"os": _run_os, "ws": _run_ws, "is": _run_is}[params.stationary]
    tiled = {} if params.stationary == "os" else {"tile": params.stream_tile}
    log = FoldLog(1 if integer else 4)
    used = layer.N * used_pixels(layer) * log.elem  # bytes per channel of the used input
    outs, cycles, words, folds = [], [], np.zeros(3, np.int64), 0
    for g in range(G):
        y, c, wd, nf = run(ifm[g], wm[g], b[g * F:(g + 1) * F], params.rows, params.cols,
                           log=log, group=(g, layer.Cg, used), **tiled)
        outs.append(y)
        cycles, words, folds = cycles + c, words + wd, folds + nf
    out = np.stack(outs)  # G x M x F
    out = out.reshape(G, layer.N, layer.P, layer.Q, F).transpose(1, 0, 4, 2, 3)
    out = out.reshape(layer.output_shape)
    out = check_int32(out, layer.name) if integer else out.astype(np.float32)
    return EmulatorRun(out, sum(cycles), tuple(int(v) for v in words), folds, tuple(cycles),
                       log.mapped, log.steps())


def _run_os(ifm, wm, bias, rows, cols, log, group):
    """OS: pixels on rows, filters on columns, the reduction streamed through. The
    ifmap block of a row fold: its pixels' share of the group's used input (the halo
    with the previous fold is kept); the filter block: the column fold's weights."""
    g, Cg, used = group
    M, F = ifm.shape[0], wm.shape[1]
    out = np.zeros((M, F), ifm.dtype)
    cycles, words, folds = [], np.zeros(3, np.int64), 0
    for fs in _tiles(F, cols):
        for ms in _tiles(M, rows):
            init = np.broadcast_to(bias[fs], (ms.stop - ms.start, fs.stop - fs.start))
            out[ms, fs], c = os_fold(ifm[ms], wm[:, fs], init, rows, cols)
            cycles, folds = cycles + [c], folds + 1
            moved = (ifm[ms].size, wm[:, fs].size, out[ms, fs].size)
            words += moved
            pixels = share(Cg * used, ms.start, ms.stop, M)
            log.fold(c, out[ms, fs].size, sum(moved), ((g, ms.start), pixels, pixels),
                     ((g, fs.start), wm[:, fs].size * log.elem),
                     ((g, fs.start, ms.start), out[ms, fs].size))
    return out, cycles, words, folds


def _run_reduction_folds(stat_of, stream_of, bias_out, Kr, B, T, rows, cols, dtype, tile,
                         log_fold):
    """WS/IS: column folds over B, stream tiles of ``tile`` vectors over T (0: all of
    them), row (reduction) folds over Kr; partial sums of each reduction fold go to the
    ofmap buffer and come back in at the top of the next. ``stat_of(ks, bs)`` is the
    stationary tile, ``stream_of(ks)`` the streamed rows, ``bias_out(bs)`` the T x len(bs)
    starting partial sums; ``log_fold(bs, ts, ks, cycles, words)`` logs each fold's
    memory events. Returns T x B."""
    out = np.zeros((T, B), dtype)
    cycles, folds, psum_words, stat_words, stream_words = [], 0, 0, 0, 0
    for bs in _tiles(B, cols):
        for ts in _tiles(T, tile if 0 < tile < T else T):
            partial = bias_out(bs)[ts]
            for ks in _tiles(Kr, rows):
                stream = stream_of(ks)[:, ts]
                stat = stat_of(ks, bs)
                partial, c = stationary_fold(stat, stream, partial, rows, cols)
                cycles, folds = cycles + [c], folds + 1
                psum_words += partial.size
                stat_words += stat.size
                stream_words += stream.size
                log_fold(bs, ts, ks, c, stat.size + stream.size + partial.size)
            out[ts, bs] = partial
    return out, cycles, (stat_words, stream_words, psum_words), folds


def _run_ws(ifm, wm, bias, rows, cols, log, group, tile=0):
    """WS: reduction on rows, filters on columns, pixels streamed (T = M). The ifmap
    block of a fold: the channels its reduction rows cover (tap-major, channel-fastest:
    taps of the same channels read the same pixels), the stream tile's share of their
    used input, a fold fetching at most the words it streams; what the block adds to the
    buffer is the share of the channels no earlier fold of the stream tile read (sets
    overlap where the rows do not divide the terms, a channel's pixels are held once); the
    filter block: the stationary tile; the ofmap block: the column fold's outputs of the
    stream tile."""
    g, Cg, used = group
    M, Kr, F = ifm.shape[0], ifm.shape[1], wm.shape[1]
    seen: dict[int, set] = {}  # stream tile -> the channels its folds have read

    def log_fold(bs, ts, ks, c, moved):
        channels = frozenset(k % Cg for k in range(ks.start, ks.stop))
        read = seen.setdefault(ts.start, set())
        added = share(len(channels - read) * used, ts.start, ts.stop, M)
        read |= channels
        block = share(len(channels) * used, ts.start, ts.stop, M)
        terms, pixels, filters = ks.stop - ks.start, ts.stop - ts.start, bs.stop - bs.start
        log.fold(c, terms * filters, moved,
                 ((g, channels, ts.start), min(pixels * terms * log.elem, block), block,
                  added),
                 ((g, bs.start, ks.start), terms * filters * log.elem),
                 ((g, bs.start, ts.start), pixels * filters))

    out, cycles, (w_words, x_words, o_words), folds = _run_reduction_folds(
        lambda ks, bs: wm[ks, bs], lambda ks: ifm[:, ks].T,
        lambda bs: np.broadcast_to(bias[bs], (M, bs.stop - bs.start)).copy(),
        Kr, F, M, rows, cols, ifm.dtype, tile, log_fold)
    return out, cycles, np.array([x_words, w_words, o_words]), folds


def _run_is(ifm, wm, bias, rows, cols, log, group, tile=0):
    """IS: reduction on rows, pixels on columns, filters streamed (T = F). The ifmap
    block of a fold: the stationary tile, its words' share of the group's used input
    (in the order first loaded); the filter block: the reduction rows' weights of the
    stream tile's filters; the ofmap block: the column fold's outputs of those filters."""
    g, Cg, used = group
    M, Kr, F = ifm.shape[0], ifm.shape[1], wm.shape[1]
    loaded = {}  # stationary tile -> its words' span [begin, stop) in the order first loaded

    def log_fold(bs, ts, ks, c, moved):
        terms, pixels, filters = ks.stop - ks.start, bs.stop - bs.start, ts.stop - ts.start
        if (bs.start, ks.start) not in loaded:
            start = next(reversed(loaded.values()))[1] if loaded else 0
            loaded[bs.start, ks.start] = (start, start + terms * pixels)
        begin, stop = loaded[bs.start, ks.start]
        block = share(Cg * used, begin, stop, Kr * M)
        log.fold(c, terms * pixels, moved, ((g, bs.start, ks.start), block, block),
                 ((g, ks.start, ts.start), terms * filters * log.elem),
                 ((g, bs.start, ts.start), pixels * filters))

    out, cycles, (x_words, w_words, o_words), folds = _run_reduction_folds(
        lambda ks, bs: ifm[bs, ks].T, lambda ks: wm[ks, :],
        lambda bs: np.broadcast_to(bias[:, None], (F, bs.stop - bs.start)).copy(),
        Kr, M, F, rows, cols, ifm.dtype, tile, log_fold)
    return out.T, cycles, np.array([x_words, w_words, o_words]), folds


def work_estimate(layer: ConvLayer, params) -> int:
    """Estimated work of ``emulate_layer`` (emulator steps of about 1 us, docs/cli.md): its
    clock cycles (the fast model's count, exact), each a dozen array operations over the
    rows x cols PEs: 64 steps, plus one per 16 PEs (measured: 60-90 us a cycle on 2x2
    and 32x32 arrays)."""
    from ..dataflows.systolic import gemm_mapping

    cycles = gemm_mapping(layer, params).cycles + 1
    return cycles * (64 + params.rows * params.cols // 16)
