"""Rules that move data without arithmetic: reshape, transpose, concat, split."""

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


def concat(axis: int, ndim: int, all_computed: bool = True) -> ops.Op:
    """A concatenation along ``axis`` of tensors computed from the input (not constants)."""
    if not all_computed:
        raise Refusal("concatenates a constant; the IR concatenates computed tensors only")
    return ops.Concat(axis % ndim)


def split(axis: int, sizes, x_shape) -> list[ops.Slice]:
    """One Slice per part of ``sizes`` along ``axis`` (Split, torch.split, chunk)."""
    axis %= len(x_shape)
    if sum(sizes) != x_shape[axis]:
        raise Refusal(f"splits axis {axis} of {x_shape} into {list(sizes)}: the parts must sum "
                      f"to {x_shape[axis]}")
    starts = np.cumsum([0, *sizes])
    return [ops.Slice(axis, int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]
