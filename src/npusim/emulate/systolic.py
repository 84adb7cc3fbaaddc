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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine import im2col
from ..ir import ConvLayer
from ..quant import check_int32


@dataclass
class EmulatorRun:
    """What the emulated array produced: outputs, busy cycles, SRAM words (ifmap, filter,
    ofmap) read or written at the array's edges, and folds."""

    output: np.ndarray
    busy_cycles: int
    words: tuple[int, int, int]
    folds: int
    fold_cycles: tuple[int, ...] = ()  # each fold's cycles, in the order run


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
    outs, cycles, words, folds = [], [], np.zeros(3, np.int64), 0
    for g in range(G):
        y, c, wd, nf = run(ifm[g], wm[g], b[g * F:(g + 1) * F], params.rows, params.cols,
                           **tiled)
        outs.append(y)
        cycles, words, folds = cycles + c, words + wd, folds + nf
    out = np.stack(outs)  # G x M x F
    out = out.reshape(G, layer.N, layer.P, layer.Q, F).transpose(1, 0, 4, 2, 3)
    out = out.reshape(layer.output_shape)
    out = check_int32(out, layer.name) if integer else out.astype(np.float32)
    return EmulatorRun(out, sum(cycles), tuple(int(v) for v in words), folds, tuple(cycles))


def _run_os(ifm, wm, bias, rows, cols):
    """OS: pixels on rows, filters on columns, the reduction streamed through."""
    M, F = ifm.shape[0], wm.shape[1]
    out = np.zeros((M, F), ifm.dtype)
    cycles, words, folds = [], np.zeros(3, np.int64), 0
    for fs in _tiles(F, cols):
        for ms in _tiles(M, rows):
            init = np.broadcast_to(bias[fs], (ms.stop - ms.start, fs.stop - fs.start))
            out[ms, fs], c = os_fold(ifm[ms], wm[:, fs], init, rows, cols)
            cycles, folds = cycles + [c], folds + 1
            words += (ifm[ms].size, wm[:, fs].size, out[ms, fs].size)
    return out, cycles, words, folds


def _run_reduction_folds(stat_of, stream_of, bias_out, Kr, B, T, rows, cols, dtype, tile):
    """WS/IS: column folds over B, stream tiles of ``tile`` vectors over T (0: all of
    them), row (reduction) folds over Kr; partial sums of each reduction fold go to the
    ofmap buffer and come back in at the top of the next. ``stat_of(ks, bs)`` is the
    stationary tile, ``stream_of(ks)`` the streamed rows, ``bias_out(bs)`` the T x len(bs)
    starting partial sums. Returns T x B."""
    out = np.zeros((T, B), dtype)
    cycles, folds, psum_words, stat_words, stream_words = [], 0, 0, 0, 0
    for bs in _tiles(B, cols):
        for ts in _tiles(T, tile if 0 < tile < T else T):
            partial = bias_out(bs)[ts]
            for ks in _tiles(Kr, rows):
                stream = stream_of(ks)[:, ts]
                partial, c = stationary_fold(stat_of(ks, bs), stream, partial, rows, cols)
                cycles, folds = cycles + [c], folds + 1
                psum_words += partial.size
                stat_words += (ks.stop - ks.start) * (bs.stop - bs.start)
                stream_words += stream.size
            out[ts, bs] = partial
    return out, cycles, (stat_words, stream_words, psum_words), folds


def _run_ws(ifm, wm, bias, rows, cols, tile=0):
    """WS: reduction on rows, filters on columns, pixels streamed (T = M)."""
    M, Kr, F = ifm.shape[0], ifm.shape[1], wm.shape[1]
    out, cycles, (w_words, x_words, o_words), folds = _run_reduction_folds(
        lambda ks, bs: wm[ks, bs], lambda ks: ifm[:, ks].T,
        lambda bs: np.broadcast_to(bias[bs], (M, bs.stop - bs.start)).copy(),
        Kr, F, M, rows, cols, ifm.dtype, tile)
    return out, cycles, np.array([x_words, w_words, o_words]), folds


def _run_is(ifm, wm, bias, rows, cols, tile=0):
    """IS: reduction on rows, pixels on columns, filters streamed (T = F)."""
    M, Kr, F = ifm.shape[0], ifm.shape[1], wm.shape[1]
    out, cycles, (x_words, w_words, o_words), folds = _run_reduction_folds(
        lambda ks, bs: ifm[bs, ks].T, lambda ks: wm[ks, :],
        lambda bs: np.broadcast_to(bias[:, None], (F, bs.stop - bs.start)).copy(),
        Kr, M, F, rows, cols, ifm.dtype, tile)
    return out.T, cycles, np.array([x_words, w_words, o_words]), folds


def work_estimate(layer: ConvLayer, params) -> int:
    """Estimated work of ``emulate_layer`` (emulator steps of about 1 us, docs/cli.md): its
    clock cycles (the fast model's count, exact), each a dozen array operations over the
    rows x cols PEs: 64 steps, plus one per 16 PEs (measured: 60-90 us a cycle on 2x2
    and 32x32 arrays)."""
    from ..dataflows.systolic import gemm_mapping

    cycles = gemm_mapping(layer, params).cycles + 1
    return cycles * (64 + params.rows * params.cols // 16)
