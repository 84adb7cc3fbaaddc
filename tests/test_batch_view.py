"""``lowering.batch_view``: a tensor whose batch axis reshapes and transposes moved, held as a
view of one that keeps it first, against NumPy doing the same to the tensor itself. Random
chains of transposes, merges and splits of axes, new and dropped axes of one and entries
taken of an axis, on batches of 1 to 3: after each step the IR tensor read through the view
is NumPy's tensor, the IR's own ops give it back where the view puts the batch first and as
it is (the batch where it lies) wherever its first axis is one axis, and its canonical form
is NumPy's tensor with the batch taken out of its axis and put first."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npusim.frontends.lowering import Refusal
from npusim.frontends.lowering.batch_view import View, as_is_steps, canonical_steps, plain_steps


def read(base: np.ndarray, view: View) -> np.ndarray:
    """The source's tensor by the view's definition: the atoms, in order, grouped."""
    return base.reshape(view.atoms).transpose(view.order).reshape(view.shape)


def applied(steps, x: np.ndarray) -> np.ndarray:
    for op in steps:
        x = op(x)
    return x


def batch_taken_first(y: np.ndarray, view: View) -> np.ndarray:
    """``y`` with the batch cut out of the axis that holds it and put first, that axis's
    other parts (before and after the batch) joined: the canonical form, by NumPy."""
    j0, (before, after) = view.batch_axis, view.batch_part()
    n = view.atoms[0]
    split = y.reshape(y.shape[:j0] + (before, n, after) + y.shape[j0 + 1:])
    moved = np.moveaxis(split, j0 + 1, 0)
    return moved.reshape((n,) + y.shape[:j0] + (before * after,) + y.shape[j0 + 1:])


def check(base: np.ndarray, view: View, y: np.ndarray) -> None:
    assert base.shape[0] == view.atoms[0]  # the IR tensor keeps its batch first
    np.testing.assert_array_equal(read(base, view), y)
    if view.batch_first:
        np.testing.assert_array_equal(applied(plain_steps(view, base.shape), base), y)
    as_is = as_is_steps(view, base.shape)
    if as_is is not None:  # the tensor itself, its batch where the view has it
        np.testing.assert_array_equal(applied(as_is, base), y)
    else:
        assert len([a for a in view._coalesced().axes[0] if view.atoms[0] > 1 or a]) > 1
    steps, shape, canon = canonical_steps(view, base.shape)
    c = applied(steps, base)
    assert c.shape == shape
    np.testing.assert_array_equal(c, batch_taken_first(y, view))
    np.testing.assert_array_equal(read(c, canon), y)


def step(draw, y: np.ndarray):
    """One random layout step on ``y``: (kind, argument, NumPy's result)."""
    kinds = ["transpose", "unsqueeze"]
    if y.ndim > 1:
        kinds.append("merge")
    if any(d > 1 and any(d % k == 0 for k in range(2, d)) for d in y.shape):
        kinds.append("split")
    if 1 in y.shape and y.ndim > 1:
        kinds.append("squeeze")
    if y.ndim > 1:
        kinds.append("select")
    kind = draw(st.sampled_from(kinds))
    if kind == "transpose":
        perm = draw(st.permutations(range(y.ndim)))
        return kind, perm, np.transpose(y, perm)
    if kind == "unsqueeze":
        at = draw(st.integers(0, y.ndim))
        return "reshape", None, np.expand_dims(y, at)
    if kind == "squeeze":
        at = draw(st.sampled_from([i for i, d in enumerate(y.shape) if d == 1]))
        return "reshape", None, np.squeeze(y, at)
    if kind == "merge":
        at = draw(st.integers(0, y.ndim - 2))
        shape = y.shape[:at] + (y.shape[at] * y.shape[at + 1],) + y.shape[at + 2:]
        return "reshape", None, y.reshape(shape)
    if kind == "split":
        at = draw(st.sampled_from([i for i, d in enumerate(y.shape)
                                   if any(d % k == 0 for k in range(2, d))]))
        d = y.shape[at]
        k = draw(st.sampled_from([k for k in range(2, d) if d % k == 0]))
        return "reshape", None, y.reshape(y.shape[:at] + (k, d // k) + y.shape[at + 1:])
    axis = draw(st.integers(0, y.ndim - 1))
    index = draw(st.integers(0, y.shape[axis] - 1))
    return kind, (axis, index), np.take(y, index, axis=axis)


@given(st.data())
def test_a_chain_of_reshapes_transposes_and_selections_reads_as_numpy(data):
    n = data.draw(st.integers(1, 3), label="batch")
    rest = data.draw(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1, max_size=3))
    base = np.arange(n * math.prod(rest), dtype=np.float32).reshape((n, *rest))
    y, view = base, View.of(base.shape)
    check(base, view, y)
    for _ in range(data.draw(st.integers(1, 6), label="steps")):
        kind, arg, after = step(data.draw, y)
        try:
            if kind == "transpose":
                view = view.transposed(arg)
            elif kind == "reshape":
                view = view.reshaped(after.shape)
            else:
                axis, index = arg
                atoms, a, view = view.select(axis, slice(index, index + 1), keep=False)
                base = np.take(base.reshape(atoms), [index], axis=a)
        except Refusal:
            return  # what the IR cannot follow is refused, and named (test_onnx_attention)
        y = after
        check(base, view, y)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_attentions_layouts_are_followed_not_refused(n):
    """The layouts exporters of attention write: heads merged into the batch and back,
    sequence first, q, k and v before the batch and taken apart."""
    length, heads, size = 6, 2, 4
    base = np.arange(n * length * 3 * heads * size, dtype=np.float32).reshape(
        n, length, 3 * heads * size)
    y = base.reshape(n, length, 3, heads, size).transpose(2, 0, 3, 1, 4)  # timm: 3 N h L d
    view = View.of(base.shape).reshaped((n, length, 3, heads, size)).transposed((2, 0, 3, 1, 4))
    check(base, view, y)
    atoms, a, q = view.select(0, slice(1, 2), keep=False)
    k = np.take(base.reshape(atoms), [1], axis=a)
    assert q.batch_first
    check(k, q, y[1])
    merged = q.reshaped((n * heads, length, size)).transposed((1, 0, 2))  # L x (N h) x d
    check(k, merged, y[1].reshape(n * heads, length, size).transpose(1, 0, 2))
    back = merged.transposed((1, 0, 2)).reshaped((n, heads, length, size))
    assert back.batch_first
    check(k, back, y[1])


def test_a_reshape_that_cuts_the_batch_is_refused():
    view = View.of((4, 6)).transposed((1, 0))  # 6 x 4, the batch last
    with pytest.raises(Refusal, match="cuts the batch axis"):
        view.reshaped((12, 2))
