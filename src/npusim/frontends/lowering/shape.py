"""Rules that move data without arithmetic: reshape, transpose, concat, split, indexing, and
channels moved into blocks of pixels and back (depth to space, space to depth)."""

from __future__ import annotations

import numpy as np

from ... import ops
from .refusal import Refusal


def reshape(x_shape, out_shape) -> ops.Op:
    """A reshape to ``out_shape`` (from the source framework): Flatten for N x F, else Reshape."""
    if len(out_shape) < 1 or out_shape[0] != x_shape[0]:
        raise Refusal(f"reshapes {x_shape} to {out_shape}: the IR keeps the batch axis first")
    if len(out_shape) == 2:
        return ops.Flatten()
    return ops.Reshape(tuple(out_shape[1:]))


def transpose(perm, ndim: int) -> ops.Transpose:
    """A permutation of the axes (negative ones count from the end)."""
    return ops.Transpose(tuple(int(d) % ndim for d in perm))


def swap_axes(a: int, b: int, ndim: int) -> ops.Transpose:
    """The transpose exchanging axes ``a`` and ``b`` (``torch.transpose``)."""
    perm = list(range(ndim))
    a, b = a % ndim, b % ndim
    perm[a], perm[b] = perm[b], perm[a]
    return ops.Transpose(tuple(perm))


def expect_rank(shape, rank: int | None) -> tuple[int, ...]:
    """``shape``, refused unless it has ``rank`` axes (None: any)."""
    if rank is not None and len(shape) != rank:
        raise Refusal(f"needs a {rank}-D input, got shape {tuple(shape)}")
    return tuple(shape)


def concat(axis: int, ndim: int, constants=()) -> ops.Op:
    """A concatenation along ``axis`` of tensors computed from the input and ``constants``
    ((position among the parts, array) pairs: ViT's class token, of a batch of one or of the
    input's), none of them along the batch axis."""
    axis %= ndim
    if constants and axis == 0:
        raise Refusal("concatenates a constant along the batch axis; the IR joins constants "
                      "to each sample")
    parts = tuple((int(at), np.asarray(c, np.float32)) for at, c in constants)
    for _, c in parts:
        if c.ndim != ndim:
            raise Refusal(f"concatenates a constant of shape {c.shape} to tensors of rank "
                          f"{ndim}; give it a batch axis of size 1")
    return ops.Concat(axis, parts)


def split(axis: int, sizes, x_shape) -> list[ops.Slice]:
    """One Slice per part of ``sizes`` along ``axis`` (Split, torch.split, chunk)."""
    axis %= len(x_shape)
    if sum(sizes) != x_shape[axis]:
        raise Refusal(f"splits axis {axis} of {x_shape} into {list(sizes)}: the parts must sum "
                      f"to {x_shape[axis]}")
    starts = np.cumsum([0, *sizes])
    return [ops.Slice(axis, int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]


def index(x_shape, parts, out_shape) -> list[ops.Op]:
    """``x[parts]`` (one slice an axis; a negative step walks back: a flip), then
    ``out_shape`` (the source's: an integer index drops its axis, a new axis adds one): a
    Slice per axis it cuts and a Reshape when the rank changes (``reshape``: the batch axis
    stays first), none when the tensor is kept as it is (torch's indexing and ``select``,
    ONNX Slice and Gather)."""
    cuts, shape = [], list(x_shape)
    for axis, (part, size) in enumerate(zip(parts, x_shape, strict=True)):
        start, stop, step = part.indices(size)
        if (start, stop, step) == (0, size, 1):
            continue
        shape[axis] = len(range(start, stop, step))
        if shape[axis] == 0:
            raise Refusal(f"takes nothing of axis {axis} of {tuple(x_shape)}")
        cuts.append(ops.Slice(axis, start, None if stop < 0 else stop, step))
    if tuple(shape) != tuple(out_shape):
        cuts.append(reshape(tuple(shape), out_shape))
    return cuts


def run(indices, size: int, axis: int) -> slice:
    """The slice taking ``indices`` (constant, in range, negatives from the end) of an axis
    of ``size``: one index, or a run of them in equal steps >= 1; refused otherwise."""
    taken = np.asarray(indices, np.int64).reshape(-1) % size
    step = int(taken[1] - taken[0]) if taken.size > 1 else 1
    if step < 1 or not np.array_equal(taken, taken[0] + step * np.arange(taken.size)):
        raise Refusal(f"indices {np.asarray(indices).tolist()} on axis {axis}: the IR gathers "
                      "a run of indices in equal steps >= 1")
    return slice(int(taken[0]), int(taken[-1]) + 1, step)


def gather(x_shape, axis: int, indices) -> list[list[ops.Op]]:
    """``x`` gathered along ``axis`` by constant ``indices`` (ONNX ``Gather``, PyTorch's
    ``x[:, i]``): one index (the axis dropped) or a run of them in equal steps (their
    slice), as one list of ops; or rows of such runs (2-D indices: the taps of a sliding
    window over every position, as torch's exporters write ``F.unfold``), one list per row,
    each the row's slice with the row's axis inserted (``x[:axis] + (1, L) + ...``), to be
    concatenated along ``axis`` into ``x[:axis] + indices.shape + x[axis + 1:]``."""
    taken, size = np.asarray(indices, np.int64), x_shape[axis]
    if taken.ndim > 2 or taken.size == 0:
        raise Refusal(f"indices of shape {taken.shape}: the IR gathers one index, a run of "
                      "them, or rows of runs (a sliding window's taps), along an axis")
    if np.any((taken < -size) | (taken >= size)):
        raise Refusal(f"indices {taken.tolist()} on axis {axis} of {tuple(x_shape)}: out of "
                      "range")
    rows = taken.reshape(-1, taken.shape[-1]) if taken.ndim == 2 else taken.reshape(1, -1)
    if taken.ndim == 2:
        row_shape = (*x_shape[:axis], 1, taken.shape[1], *x_shape[axis + 1:])
    else:
        row_shape = (*x_shape[:axis], *taken.shape, *x_shape[axis + 1:])
    parts, steps = [slice(None)] * len(x_shape), []
    for row in rows:
        parts[axis] = run(row, size, axis)
        steps.append(index(x_shape, parts, row_shape))
    return steps


def broadcast_to(x_shape, out_shape) -> ops.Broadcast | None:
    """``expand`` / ONNX ``Expand`` to ``out_shape`` (the source's): a Broadcast, or None
    when nothing repeats (a pass-through); the batch axis stays as it is."""
    if tuple(out_shape) == tuple(x_shape):
        return None
    if out_shape[0] != x_shape[0]:
        raise Refusal(f"expands the batch axis {x_shape[0]} -> {out_shape[0]}: the IR keeps "
                      "the batch axis as it is")
    return ops.Broadcast(tuple(out_shape[1:]))


def tile(x_shape, repeats) -> list[ops.Op]:
    """``x.repeat`` / ONNX ``Tile``: the tensor repeated whole ``repeats[a]`` times along
    each axis ``a`` (not each element in turn) as the three data moves it is: a Reshape
    that puts a size-1 axis before each repeated axis, a Broadcast of those axes to their
    counts, and a Reshape merging each such pair; [] when nothing repeats."""
    repeats = [int(r) for r in repeats]
    if len(repeats) != len(x_shape) or min(repeats) < 1:
        raise Refusal(f"repeats {tuple(repeats)} of a tensor of shape {tuple(x_shape)}: the "
                      "IR repeats each existing axis at least once (no new axes, no empty "
                      "result)")
    if repeats[0] != 1:
        raise Refusal(f"repeats the batch axis {repeats[0]} times: the IR keeps the batch axis "
                      "as it is")
    if all(r == 1 for r in repeats):
        return []
    split, wide, merged = [], [], []
    for size, r in zip(x_shape[1:], repeats[1:], strict=True):
        split += [1, size] if r > 1 else [size]
        wide += [r, size] if r > 1 else [size]
        merged.append(size * r)
    return [ops.Reshape(tuple(split)), ops.Broadcast(tuple(wide)), ops.Reshape(tuple(merged))]


def depth_to_space(x_shape, r: int, order: str = "CRD") -> list[ops.Op]:
    """Channels C r^2 of an N x C r^2 x H x W map into r x r blocks of pixels (N x C x
    Hr x Wr) as the reshape, transpose and reshape it is: ``order`` CRD (PyTorch's
    pixel_shuffle; ONNX DepthToSpace mode CRD) splits each channel's r^2 block off the
    channel axis, DCR (ONNX's default) takes the block position as the outer factor."""
    n, ch, h, w = expect_rank(x_shape, 4)
    if r < 1 or ch % (r * r):
        raise Refusal(f"block size {r}: the {ch} channels must be a multiple of {r * r}")
    k = ch // (r * r)
    if order == "DCR":
        split, perm = (r, r, k, h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (k, r, r, h, w), (0, 1, 4, 2, 5, 3)
    return [ops.Reshape(split), ops.Transpose(perm), ops.Reshape((k, h * r, w * r))]


def channel_shuffle(x_shape, groups: int) -> list[ops.Op]:
    """ShuffleNet's channel shuffle of an N x C x H x W map in ``groups``: channel
    ``g * (C / groups) + i`` to ``i * groups + g``, as the reshape to groups x C/groups,
    the transpose of the two and the reshape back it is."""
    n, ch, h, w = expect_rank(x_shape, 4)
    if groups < 1 or ch % groups:
        raise Refusal(f"groups={groups}: must divide the {ch} channels")
    return [ops.Reshape((groups, ch // groups, h, w)), ops.Transpose((0, 2, 1, 3, 4)),
            ops.Reshape((ch, h, w))]


def space_to_depth(x_shape, r: int, order: str = "CRD") -> list[ops.Op]:
    """Each r x r block of pixels of an N x C x H x W map into channels (N x C r^2 x H/r x
    W/r), the inverse of ``depth_to_space`` in the same ``order`` (CRD: PyTorch's
    pixel_unshuffle; DCR: ONNX SpaceToDepth)."""
    n, ch, h, w = expect_rank(x_shape, 4)
    if r < 1 or h % r or w % r:
        raise Refusal(f"block size {r}: the {h}x{w} map must be a multiple of it")
    perm = (0, 3, 5, 1, 2, 4) if order == "DCR" else (0, 1, 3, 5, 2, 4)
    return [ops.Reshape((ch, h // r, r, w // r, r)), ops.Transpose(perm),
            ops.Reshape((ch * r * r, h // r, w // r))]
