"""Vector registers for the machines' multiply-add loops (numba intrinsics).

A machine that adds each output's products one at a time, in its datapath's order, over
many outputs at once (a conv group's kernels, side by side in memory) is vectorised by
numba across those outputs, but numba keeps their sums in an array: every product then
loads a sum, adds, and stores it back, and the loads and stores, not the arithmetic, set
the speed. Held in vector registers across the whole loop over a pixel's products, the
sums cost two vector instructions a product (multiply, then add), as the datapath itself:

    acc = simd.zeros(sums)            # LANES sums of sums' dtype, all +0
    for each product in order:
        simd.madd(acc, weights, i, x)  # acc[l] += weights[i + l] * x, l < LANES
    simd.store(acc, sums, j)           # sums[j + l] = acc[l]

``madd`` rounds each lane's product, then its sum (a multiply and an add, never fused),
so a lane's sum is bit for bit the scalar loop's ``acc += w * x``; integer lanes (int64
for exact int8 sums) multiply and add as numba's integers do. ``madd_nonzero`` skips the
lanes of zero weights (a non-finite ``x`` meets only the non-zero ones), and
``count_and`` adds the set bits of words ANDed with one word (the sparse machine's pair
counts). ``LANES`` (``lanes``)
fills the host's widest vector register: 512 bits with AVX-512, else 256. A register is
a stack slot that the compiler keeps in a register (it is only ever loaded and stored
whole); the arrays are flat (1-D, contiguous) and not bounds-checked: the caller's
blocks lie inside them.
"""

from __future__ import annotations

import functools

from .jit import intrinsic


@functools.cache  # asking the CPU takes 0.4 ms
def vector_bits() -> int:
    """Bits of the widest vector register of the CPU numba compiles for (its
    ``NUMBA_CPU_FEATURES`` if set, else the host's): 512 with AVX-512, else 256."""
    import llvmlite.binding as ll
    from numba.core import config

    features = config.CPU_FEATURES or ll.get_host_cpu_features().flatten()
    return 512 if "+avx512f" in features.split(",") else 256


def width(dtype) -> int:
    """Lanes of a vector register of the numpy ``dtype`` (``lanes`` outside compiled code)."""
    import numpy as np

    return vector_bits() // (8 * np.dtype(dtype).itemsize)


def _vector(context, dtype):
    """(LLVM element type, LLVM vector type) of ``dtype``'s lanes."""
    from llvmlite import ir

    element = context.get_data_type(dtype)
    return element, ir.VectorType(element, vector_bits() // dtype.bitwidth)


def _flat(array_type) -> None:
    """Refuse at compile time an array these intrinsics cannot address as one run."""
    from numba.core.errors import TypingError

    if array_type.ndim != 1 or array_type.layout != "C":
        raise TypingError(f"simd: needs a 1-D contiguous array, got {array_type}")


@intrinsic
def lanes(typingctx, like):
    """Lanes of a vector register of ``like``'s dtype (an array), as an int64 constant."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        _, vector = _vector(context, like.dtype)
        return ir.Constant(ir.IntType(64), vector.count)

    return types.int64(like), codegen


@intrinsic
def zeros(typingctx, like):
    """A vector register of ``like``'s dtype (an array), every lane +0."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils

    def codegen(context, builder, signature, args):
        element, vector = _vector(context, like.dtype)
        slot = cgutils.alloca_once(builder, vector)
        builder.store(ir.Constant(vector, None), slot)
        return builder.bitcast(slot, element.as_pointer())

    return types.CPointer(like.dtype)(like), codegen


@intrinsic
def madd(typingctx, acc, array, offset, x):
    """acc[l] += array[offset + l] * x for every lane l: the product rounded, then the sum
    (no fused multiply-add). ``array``: flat, of ``acc``'s dtype; ``x`` is cast to it."""
    from numba import types

    _flat(array)

    def codegen(context, builder, signature, args):
        register, before, _, product = _operands(context, builder, signature, args)
        builder.store(_add(builder, array.dtype, before, product), register)
        return context.get_dummy_value()

    return types.void(acc, array, offset, x), codegen


@intrinsic
def madd_nonzero(typingctx, acc, array, offset, x):
    """``madd`` in the lanes l whose array[offset + l] is not 0; the others keep their sum
    as it is (a product skipped, not an exact 0 added: an infinite or NaN ``x`` times 0
    would be NaN)."""
    from llvmlite import ir
    from numba import types

    _flat(array)

    def codegen(context, builder, signature, args):
        register, before, weights, product = _operands(context, builder, signature, args)
        zero = ir.Constant(weights.type, None)
        nonzero = (builder.fcmp_unordered("!=", weights, zero) if _floating(array.dtype)
                   else builder.icmp_signed("!=", weights, zero))
        total = _add(builder, array.dtype, before, product)
        builder.store(builder.select(nonzero, total, before), register)
        return context.get_dummy_value()

    return types.void(acc, array, offset, x), codegen


@intrinsic
def count_and(typingctx, acc, array, offset, word):
    """acc[l] += the set bits of (array[offset + l] AND word) for every lane l: ``array``
    flat uint64 words, ``acc`` int64 counts (one vector population count: AVX-512's
    VPOPCNTQ, else the compiler's lane-by-lane sequence)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils

    _flat(array)

    def codegen(context, builder, signature, args):
        slot, data, at, value = args
        _, vector = _vector(context, array.dtype)
        words = builder.load(_address(context, builder, array, data, at, vector), align=1)
        spread = _spread(builder, vector, context.cast(builder, value, word, array.dtype))
        register = builder.bitcast(slot, vector.as_pointer())
        name = f"llvm.ctpop.v{vector.count}i{vector.element.width}"
        ctpop = cgutils.get_or_insert_function(builder.module,
                                               ir.FunctionType(vector, [vector]), name)
        ones = builder.call(ctpop, [builder.and_(words, spread)])
        builder.store(builder.add(builder.load(register), ones), register)
        return context.get_dummy_value()

    return types.void(acc, array, offset, word), codegen


@intrinsic
def store(typingctx, acc, array, offset):
    """array[offset + l] = acc[l] for every lane l (``array``: flat, of ``acc``'s dtype)."""
    from numba import types

    _flat(array)

    def codegen(context, builder, signature, args):
        slot, data, at = args
        _, vector = _vector(context, array.dtype)
        value = builder.load(builder.bitcast(slot, vector.as_pointer()))
        builder.store(value, _address(context, builder, array, data, at, vector), align=1)
        return context.get_dummy_value()

    return types.void(acc, array, offset), codegen


def _operands(context, builder, signature, args):
    """For (acc, array, offset, x): (acc's register, its lanes, array's lanes from offset,
    their products with x)."""
    slot, data, at, value = args
    array, x = signature.args[1], signature.args[3]
    _, vector = _vector(context, array.dtype)
    weights = builder.load(_address(context, builder, array, data, at, vector), align=1)
    spread = _spread(builder, vector, context.cast(builder, value, x, array.dtype))
    register = builder.bitcast(slot, vector.as_pointer())
    product = (builder.fmul(weights, spread) if _floating(array.dtype)
               else builder.mul(weights, spread))
    return register, builder.load(register), weights, product


def _spread(builder, vector, scalar):
    """``scalar`` in every lane of ``vector``'s type."""
    from llvmlite import ir

    first = builder.insert_element(ir.Constant(vector, ir.Undefined), scalar,
                                   ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(
        first, ir.Constant(vector, ir.Undefined),
        ir.Constant(ir.VectorType(ir.IntType(32), vector.count), [0] * vector.count))


def _floating(dtype) -> bool:
    """Whether numba's ``dtype`` is a float (else an integer)."""
    from numba import types

    return isinstance(dtype, types.Float)


def _add(builder, dtype, a, b):
    """a + b lane by lane: rounded for floats, wrapping for integers."""
    return builder.fadd(a, b) if _floating(dtype) else builder.add(a, b)


def _address(context, builder, array_type, data, offset, vector):
    """Pointer to ``vector``'s lanes from element ``offset`` of the flat array ``data``."""
    array = context.make_array(array_type)(context, builder, data)
    return builder.bitcast(builder.gep(array.data, [offset]), vector.as_pointer())
