"""A tensor whose batch axis a reshape or transpose moved, held as a view of one that keeps it
first.

The IR keeps the batch axis first. Exporters of attention write tensors where it is not:
the heads merged into it ((N h) x L x d), the sequence before it (L x N x E, the inner
layout of ``nn.MultiheadAttention``), q, k and v put before it (timm's 3 x N x h x L x d).
Such a tensor is a ``View`` of an IR tensor whose batch axis is first: that tensor read as
elementary axes (atoms, in its own order, the batch atom first), the atoms taken in another
order and consecutive runs of them making the source's axes. Reshapes and transposes
change the view only; taking entries of an axis that is one atom slices the IR tensor
(``View.select``). A reader that computes (a product, a sum, a softmax) takes the view's
``canonical`` form: the batch atom first, then each of the source's axes as one IR axis (its
size without the batch's factor, 1 for the axis that was the batch alone), so the source's
axis ``j`` is the IR's ``j + 1`` and its result is again a view (``View.computed``). Any
other reader takes the tensor once the view puts the batch first again (``plain_steps``).
A batch of one has no place: its atom is kept first, where every view can take it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import ops
from .refusal import Refusal
from .shape import reshape


@dataclass(frozen=True)
class View:
    """The source's tensor as an IR tensor read as ``atoms`` (sizes in the IR tensor's order;
    atom 0 is the batch), taken in ``order`` and cut into the source's axes by ``groups``
    (how many consecutive atoms of ``order`` make each axis; 0 for an axis of size 1)."""

    atoms: tuple[int, ...]
    order: tuple[int, ...]
    groups: tuple[int, ...]

    @classmethod
    def of(cls, shape) -> View:
        """The view of an IR tensor of ``shape`` (batch first) as itself."""
        atoms = (int(shape[0]), *(int(d) for d in shape[1:] if d != 1))
        return cls(atoms, tuple(range(len(atoms))),
                   (1, *(int(d != 1) for d in shape[1:])))._settled()

    @property
    def axes(self) -> list[tuple[int, ...]]:
        """The atoms of each of the source's axes, in order."""
        ends = [sum(self.groups[:j + 1]) for j in range(len(self.groups))]
        return [self.order[e - g:e] for e, g in zip(ends, self.groups, strict=True)]

    @property
    def shape(self) -> tuple[int, ...]:
        """The source's shape."""
        return tuple(math.prod(self.atoms[a] for a in axis) for axis in self.axes)

    @property
    def batch_axis(self) -> int:
        """The source's axis that holds the batch."""
        return next(j for j, axis in enumerate(self.axes) if 0 in axis)

    @property
    def where(self) -> str:
        """Where the view holds the batch, in words (for a refusal)."""
        if self.atoms[0] == 1:
            return f"shape {self.shape}, a batch of one"
        axis = self.axes[self.batch_axis]
        merged = " with other axes" if sum(self.atoms[a] > 1 for a in axis if a) else ""
        return f"shape {self.shape}, the batch in axis {self.batch_axis}{merged}"

    @property
    def batch_first(self) -> bool:
        """Whether the source's tensor keeps the batch alone in its first axis."""
        return self.axes[0] == (0,)

    def transposed(self, perm) -> View:
        """The view after a permutation of the source's axes."""
        axes = self.axes
        moved = [axes[int(p) % len(axes)] for p in perm]
        return View(self.atoms, tuple(a for axis in moved for a in axis),
                    tuple(len(axis) for axis in moved))._settled()

    def reshaped(self, shape) -> View:
        """The view after a reshape of the source's tensor to ``shape`` (row-major): its atoms
        regrouped, an atom cut in two where an axis ends inside it; refused where an axis
        would end inside the batch."""
        view = self._coalesced()
        sizes, ir, seq = dict(enumerate(view.atoms)), list(range(len(view.atoms))), \
            list(view.order)
        groups, pos = [], 0
        for d in shape:
            group, need = [], int(d)
            if pos < len(seq) and seq[pos] == 0 and sizes[0] == 1:
                group, pos = [0], pos + 1
            while need > 1:
                a = seq[pos]
                if need % sizes[a] == 0:
                    group, need, pos = [*group, a], need // sizes[a], pos + 1
                elif sizes[a] % need == 0 and a != 0:
                    outer, inner = len(sizes), len(sizes) + 1
                    sizes[outer], sizes[inner] = need, sizes[a] // need
                    at = ir.index(a)
                    ir[at:at + 1] = [outer, inner]
                    seq[pos] = inner
                    group, need = [*group, outer], 1
                else:
                    raise Refusal(f"reshapes {self.shape} to {tuple(shape)}, which cuts "
                                  f"{'the batch axis' if a == 0 else 'across axes'} where the "
                                  "IR cannot follow it")
            groups.append(group)
        if pos < len(seq):  # a batch of one, last
            groups[-1].extend(seq[pos:])
        number = {a: k for k, a in enumerate(ir)}
        return View(tuple(sizes[a] for a in ir), tuple(number[a] for g in groups for a in g),
                    tuple(len(g) for g in groups))._settled()

    def select(self, axis: int, part: slice, keep: bool) -> tuple[tuple[int, ...], int, View]:
        """Entries ``part`` of the source's ``axis`` (one atom, not the batch), the axis kept
        (``keep``: a slice) or dropped (an index): the atoms to read the IR tensor as, the IR
        axis of those to slice, and the view after it."""
        view = self._coalesced()
        axes = [list(atoms) for atoms in view.axes]
        own = [a for a in axes[axis] if a != 0 or view.atoms[0] > 1]  # a batch of one: nowhere
        if len(own) != 1 or own[0] == 0:
            raise Refusal(f"takes entries of axis {axis} of {self.shape}, which holds "
                          f"{'the batch' if 0 in own else 'several axes joined'}: the IR takes "
                          "entries of one axis, not the batch")
        a = own[0]
        size = len(range(*part.indices(view.atoms[a])))
        if size > 1:
            sizes = tuple(size if k == a else n for k, n in enumerate(view.atoms))
            return view.atoms, a, View(sizes, view.order, view.groups)
        axes[axis].remove(a)
        if not keep and axes.pop(axis):  # the batch of one it held goes first
            axes[0].insert(0, 0)
        number = {k: k - (k > a) for k in range(len(view.atoms)) if k != a}
        return view.atoms, a, View(tuple(n for k, n in enumerate(view.atoms) if k != a),
                                   tuple(number[k] for atoms in axes for k in atoms),
                                   tuple(len(atoms) for atoms in axes))._settled()

    def canonical(self) -> tuple[tuple[int, ...], View]:
        """The canonical IR shape (the batch, then each source axis without it) and the view
        of the tensor in that form."""
        rest = [a for a in self.order if a != 0]
        number = {0: 0, **{a: k + 1 for k, a in enumerate(rest)}}
        shape = (self.atoms[0], *(math.prod(self.atoms[a] for a in axis if a != 0)
                                  for axis in self.axes))
        view = View((self.atoms[0], *(self.atoms[a] for a in rest)),
                    tuple(number[a] for a in self.order), self.groups)
        return shape, view

    def computed(self, out_shape) -> View:
        """The view of an op's canonical result of the source's ``out_shape``, the op having
        read this (canonical) view and kept the batch's axis as it was: the batch's axis
        with its atoms, every other axis one atom of its new size."""
        j0, axes = self.batch_axis, self.axes
        if len(out_shape) != len(axes) or out_shape[j0] != self.shape[j0]:
            raise Refusal(f"gives shape {tuple(out_shape)} from {self.shape}, whose axis {j0} "
                          "holds the batch: the IR computes on such a tensor keeping that axis")
        atoms, order, groups = [self.atoms[0]], [], []
        for j, d in enumerate(out_shape):
            if j == j0:
                own = [a for a in axes[j] if a != 0]
                numbers = iter(range(len(atoms), len(atoms) + len(own)))
                atoms += [self.atoms[a] for a in own]
                order += [0 if a == 0 else next(numbers) for a in axes[j]]
                groups.append(len(axes[j]))
            elif d != 1:
                order.append(len(atoms))
                atoms.append(int(d))
                groups.append(1)
            else:
                groups.append(0)
        return View(tuple(atoms), tuple(order), tuple(groups))

    def batch_part(self) -> tuple[int, int]:
        """What the batch's axis holds before and after the batch (the products of its atoms
        there)."""
        axis = self.axes[self.batch_axis]
        at = axis.index(0)
        return (math.prod(self.atoms[a] for a in axis[:at]),
                math.prod(self.atoms[a] for a in axis[at + 1:]))

    def _coalesced(self) -> View:
        """The same view with atoms that follow each other both in the IR tensor and in one
        of the source's axes read as one (the batch kept apart)."""
        runs = []  # per source axis, its runs of atoms consecutive in the IR tensor
        for axis in self.axes:
            own = []
            for a in axis:
                if own and own[-1][-1] == a - 1 and a > 1:
                    own[-1].append(a)
                else:
                    own.append([a])
            runs.append(own)
        first = sorted(r[0] for own in runs for r in own)
        number = {f: k for k, f in enumerate(first)}
        size = {r[0]: math.prod(self.atoms[a] for a in r) for own in runs for r in own}
        return View(tuple(size[f] for f in first),
                    tuple(number[r[0]] for own in runs for r in own),
                    tuple(len(own) for own in runs))

    def _settled(self) -> View:
        """The same view with a batch of one first in the source's first axis (where it is
        has no effect on the data)."""
        if self.atoms[0] != 1 or self.order[0] == 0 and self.groups[0] > 0:
            return self
        axes = [[a for a in axis if a != 0] for axis in self.axes]
        axes[0].insert(0, 0)
        return View(self.atoms, tuple(a for axis in axes for a in axis),
                    tuple(len(axis) for axis in axes))


def plain_steps(view: View, base_shape) -> list[ops.Op]:
    """IR ops taking the IR tensor of ``base_shape`` that ``view`` reads to the source's
    tensor (its batch first): a reshape to the atoms, their permutation, a reshape to the
    source's axes (each only where it changes something)."""
    if not view.batch_first:
        raise Refusal(f"{view.where}: the IR keeps the batch axis first")
    return _arranged(view.atoms, view.order, tuple(base_shape), view.shape)


def as_is_steps(view: View, base_shape) -> list[ops.Op] | None:
    """IR ops taking the IR tensor of ``base_shape`` that ``view`` reads to the source's tensor
    itself, its batch where the view has it (an IR ``Transpose`` may move the batch axis; ops
    that do not care where it is read such a tensor as the source computes it), where the
    source's first axis is one axis of the IR tensor, or of size 1 (a unit axis put first; a
    batch of one aside: the IR's reshapes keep the first axis); None where it is not."""
    view = view._coalesced()
    one = view.atoms[0] == 1
    first = [a for a in view.axes[0] if a != 0 or not one]
    atoms, order = view.atoms, [a for a in view.order if a != 0 or not one]
    if not first:
        atoms = (*atoms, 1)
        order.insert(0, len(atoms) - 1)
    elif len(first) != 1:
        return None
    if one:  # a batch of one next to the first axis, where the reshapes can drop it
        order.insert(1, 0)
    return _arranged(atoms, order, tuple(base_shape), view.shape)


def canonical_steps(view: View, base_shape) -> tuple[list[ops.Op], tuple[int, ...], View]:
    """IR ops taking the IR tensor of ``base_shape`` that ``view`` reads to its canonical
    form, with that form's shape and view."""
    shape, canon = view.canonical()
    order = (0, *(a for a in view.order if a != 0))
    return _arranged(view.atoms, order, tuple(base_shape), shape), shape, canon


def _arranged(atoms, order, base_shape, shape) -> list[ops.Op]:
    """Reshape ``base_shape`` to ``atoms``, permute them by ``order``, reshape to ``shape``."""
    steps, now = [], base_shape
    moved = tuple(order) != tuple(range(len(atoms)))
    if moved and now != tuple(atoms):
        steps.append(reshape(now, atoms))
        now = tuple(atoms)
    if moved:
        steps.append(ops.Transpose(tuple(order)))
        now = tuple(atoms[a] for a in order)
    if now != tuple(shape):
        steps.append(reshape(now, shape))
    return steps


@dataclass(frozen=True)
class Held:
    """A source tensor held as ``view`` of IR node ``base`` (of IR shape ``shape``); ``perm``
    where it is that node transposed (by transposes alone), else None."""

    base: str
    shape: tuple[int, ...]
    view: View
    perm: tuple[int, ...] | None = None

    @classmethod
    def of(cls, base: str, shape) -> Held:
        """An ordinary IR tensor (batch first) as a view of itself."""
        return cls(base, tuple(shape), View.of(shape), tuple(range(len(shape))))

    def transposed(self, build, name: str, perm) -> tuple[str, Held | None]:
        """The source's transpose by ``perm`` (``placed``)."""
        perm = tuple(int(p) % len(self.view.shape) for p in perm)
        return self.placed(build, name, [], self.view.transposed(perm),
                           None if self.perm is None else tuple(self.perm[p] for p in perm))

    def reshaped(self, build, name: str, shape) -> tuple[str, Held | None]:
        """The source's reshape to ``shape`` (``placed``)."""
        return self.placed(build, name, [], self.view.reshaped(shape))

    def cut(self, build, name: str, cuts, shape=None) -> tuple[str, Held | None]:
        """The source tensor cut by ``cuts`` ((axis, slice, whether the axis stays) each),
        each along an axis that is one atom of the view, then reshaped to ``shape`` if given
        (new axes of size 1: ``x[0, None]``) (``placed``)."""
        source, (steps, shape, view) = shape, ([], self.shape, self.view)
        for axis, part, keep in cuts:
            start, stop, step = part.indices(view.shape[axis])
            if (start, stop, step) == (0, view.shape[axis], 1) and keep:
                continue
            atoms, a, view = view.select(axis, part, keep)
            if tuple(shape) != atoms:
                steps.append(reshape(shape, atoms))
            steps.append(ops.Slice(a, start, None if stop < 0 else stop, step))
            shape = tuple(len(range(start, stop, step)) if k == a else n
                          for k, n in enumerate(atoms))
        return self.placed(build, name, steps,
                           view if source is None else view.reshaped(tuple(source)))

    def placed(self, build, name: str, steps, view: View,
               perm: tuple[int, ...] | None = None) -> tuple[str, Held | None]:
        """``steps`` on the IR tensor (node ``name``, if any), read as ``view``: if that puts
        the batch alone first, (the ordinary IR node, after the ops making it so, None);
        else (the IR node, the held tensor, transposed by ``perm`` if no step ran)."""
        shape = self.shape
        for op in steps:
            shape = op.out_shape([shape], name)
        if view.batch_first:
            steps = [*steps, *plain_steps(view, shape)]
            shape = view.shape
        base = build.add(name, *build.steps(name, steps, self.base), shape) if steps \
            else self.base
        if view.batch_first:
            return base, None
        return base, Held(base, tuple(shape), view, None if steps else perm)

    def canonical(self, build, name: str) -> Held:
        """The tensor in its canonical form (nodes ``<name>0``...: none if it is already)."""
        steps, shape, view = canonical_steps(self.view, self.shape)
        if not steps:
            return self
        return Held(build.sequence(name, steps, self.base), shape, view)

    def as_is(self, build, name: str) -> str | None:
        """The IR node of the source tensor as it is (nodes ``<name>0``...: its transpose,
        else ``as_is_steps``), or None where the IR cannot give it."""
        steps = [ops.Transpose(self.perm)] if self.perm else as_is_steps(self.view, self.shape)
        if steps is None:
            return None
        return build.sequence(name, steps, self.base) if steps else self.base


def computable(views, rank: int, across) -> int:
    """The axis holding the batch of an op's rank-``rank`` result, for an op reading held
    tensors of ``views`` (canonical or not) and working across its axes ``across``; refused
    where they hold the batch differently or the op works across the batch's axis."""
    j0 = views[0].batch_axis
    for v in views:
        if len(v.shape) != rank or v.batch_axis != j0 or v.batch_part() != views[0].batch_part():
            raise Refusal("reads tensors that hold the batch differently: the IR computes on "
                          "tensors that hold it alike")
    if j0 in across:
        raise Refusal(f"works across axis {j0}, which holds the batch: that would mix the "
                      "samples of a batch")
    return j0


def with_batch_axis(value, rank: int, j0: int) -> np.ndarray:
    """A constant operand of a rank-``rank`` result whose axis ``j0`` holds the batch, with the
    canonical form's leading batch axis; refused if it varies along axis ``j0``."""
    value = np.asarray(value)
    if value.ndim == 0:
        return value
    full = value.reshape((1,) * (rank - value.ndim) + value.shape)
    if full.shape[j0] != 1:
        raise Refusal(f"a constant of shape {value.shape} varies along axis {j0}, which holds "
                      "the batch")
    return full[None]
