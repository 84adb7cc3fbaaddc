"""Einsum (``torch.einsum``, ONNX ``Einsum``) as the IR's ops: one operand is a sum over the
labels it drops and a transpose; two computed operands are the ``MatMul`` they contract
(attention written as ``bhqd,bhkd->bhqk``), each arranged as batch x rows x shared axis by a
transpose and a reshape, the product put back in the output's order; a computed operand by
a constant matrix over its last axis is a linear layer. The batch axis is every tensor's
first label and stays first."""

from __future__ import annotations

import string

import numpy as np

from ... import ops
from .norms import reduce
from .refusal import Refusal
from .shape import reshape, transpose


def parse(equation: str, shapes) -> tuple[list[str], str]:
    """Each operand's labels and the output's, one letter an axis (``...`` expanded to
    letters the equation does not use; an implicit output: the labels used once, in
    alphabetical order, after the ellipsis)."""
    text = equation.replace(" ", "")
    left, arrow, right = text.partition("->")
    terms = left.split(",")
    if len(terms) != len(shapes):
        raise Refusal(f"equation {equation!r} has {len(terms)} operands for {len(shapes)} "
                      "tensors")
    spare = iter(c for c in string.ascii_letters if c not in text)
    ellipsis = ""
    labels = []
    for term, shape in zip(terms, shapes, strict=True):
        if term.count("...") > 1 or not term.replace("...", "").isalpha():
            raise Refusal(f"equation {equation!r}: each operand is letters and at most one "
                          "'...'")
        free = len(shape) - len(term.replace("...", ""))
        if "..." in term:
            ellipsis = ellipsis or "".join(next(spare) for _ in range(free))
            if len(ellipsis) != free:
                raise Refusal(f"equation {equation!r}: '...' spans {len(ellipsis)} and {free} "
                              "axes; the IR does not broadcast them")
            term = term.replace("...", ellipsis)
        if len(term) != len(shape):
            raise Refusal(f"equation {equation!r}: {term!r} labels {len(term)} axes of a "
                          f"{len(shape)}-D tensor")
        if len(set(term)) != len(term):
            raise Refusal(f"equation {equation!r}: a label repeated in one operand (a "
                          "diagonal)")
        labels.append(term)
    if arrow:
        out = right.replace("...", ellipsis)
    else:
        used = "".join(labels)
        out = ellipsis + "".join(sorted(c for c in set(used) if used.count(c) == 1
                                        and c not in ellipsis))
    if not set(out) <= set("".join(labels)) or len(set(out)) != len(out):
        raise Refusal(f"equation {equation!r}: the output names a label no operand has, or "
                      "one twice")
    return labels, out


def sizes(labels: list[str], shapes) -> dict[str, int]:
    """Each label's size, the same wherever it is used (the IR does not broadcast them)."""
    found: dict[str, int] = {}
    for term, shape in zip(labels, shapes, strict=True):
        for c, n in zip(term, shape, strict=True):
            if found.setdefault(c, int(n)) != int(n):
                raise Refusal(f"label {c!r} is {found[c]} and {n} long: the IR does not "
                              "broadcast einsum's axes")
    return found


def arrange(term: str, keep: str, order: str, shape) -> tuple[list[ops.Op], str, tuple]:
    """The ops that sum ``term`` (of ``shape``) over its labels not in ``keep`` and
    transpose it to ``order``; with the labels and shape they leave."""
    steps = []
    dropped = [i for i, c in enumerate(term) if c not in keep]
    if dropped:
        if 0 in dropped:
            raise Refusal(f"sums over the batch axis {term[0]!r}: the batch axis stays first")
        steps.append(reduce("sum", dropped, False, shape))
        shape = tuple(n for i, n in enumerate(shape) if i not in dropped)
        term = "".join(c for c in term if c in keep)
    target = [c for c in order if c in term]
    if target[0] != term[0]:
        raise Refusal(f"moves the batch axis {term[0]!r}: the batch axis stays first")
    if target != list(term):
        steps.append(transpose([term.index(c) for c in target], len(term)))
        shape = tuple(shape[term.index(c)] for c in target)
    return steps, "".join(target), shape


def then_reshape(steps: list, shape, new_shape) -> list:
    """``steps`` with a Reshape to ``new_shape`` after them unless it is ``shape``."""
    return steps if tuple(shape) == tuple(new_shape) else steps + [reshape(shape, new_shape)]


def product_plan(labels: list[str], out: str, shapes):
    """For two computed operands: the steps of each (to batch x M x K and batch x K x N),
    and the steps after their MatMul (to the output), as ``(left, right, after)``."""
    a, b = labels
    size = sizes(labels, shapes)
    if not a[0] == b[0] == out[0]:
        raise Refusal(f"operands {a!r}, {b!r} and output {out!r} do not share their first "
                      "label: the batch axis stays first")
    batch = [c for c in out if c in a and c in b]
    rows = [c for c in out if c in a and c not in b]
    cols = [c for c in out if c in b and c not in a]
    shared = [c for c in a if c in b and c not in out]
    dims = [size[c] for c in batch]
    m, k, n = (int(np.prod([size[c] for c in group])) for group in (rows, shared, cols))
    left, _, shape_a = arrange(a, out + b, "".join(batch + rows + shared), shapes[0])
    right, _, shape_b = arrange(b, out + a, "".join(batch + shared + cols), shapes[1])
    left = then_reshape(left, shape_a, (*dims, m, k))
    right = then_reshape(right, shape_b, (*dims, k, n))
    natural = "".join(batch + rows + cols)
    after = then_reshape([], (*dims, m, n), tuple(size[c] for c in natural))
    if natural != out:
        after.append(transpose([natural.index(c) for c in out], len(out)))
    return left, right, after


def linear_plan(x: str, w: str, out: str):
    """A computed operand by a constant matrix over its last axis (``...c,cd->...d`` or
    ``...c,dc->...d``): whether the weight is given as in x out (to be transposed), or
    None when the equation is not such a product."""
    if len(w) != 2 or x[-1] not in w or out != x[:-1] + (set(w) - {x[-1]}).pop() \
            or (set(w) - {x[-1]}).pop() in x:
        return None
    return w[0] == x[-1]
