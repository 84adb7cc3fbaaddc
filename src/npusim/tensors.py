"""Checks on the tensors a conv is given, written once for ``conv2d`` and ``simulate``.

The rule for non-finite values (docs/architecture.md, "Inputs npusim refuses"): no machine
takes a NaN or an infinity. The zero-skipping machines never multiply by a zero operand, so
IEEE propagation (``NaN * 0 = NaN``) would depend on which products a machine skips, and
int8 quantisation has no code for NaN or inf. Such a value in an input, a weight or a bias is
refused before quantisation and before any layer runs, naming the tensor, the layer, how many
values are non-finite and the first one's index.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import InputError

INT8 = (-128, 127)
INT32 = (int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max))


def check_finite(tensor, name: str, where: str) -> None:
    """Raise ``InputError`` if ``tensor`` (any array-like) holds a NaN or an infinity.

    ``name`` is the tensor ("x", "weight", "bias", "input"), ``where`` the layer or function.
    Integer and boolean arrays are always finite.
    """
    a = np.asarray(tensor)
    if a.dtype.kind not in "fc" or _all_finite(a):  # f: real floats, c: complex
        return
    ok = np.isfinite(a)
    if ok.all():
        return  # a complex array, or extremes beyond a Python float's range
    first = tuple(int(i) for i in np.argwhere(~ok)[0])
    raise InputError(f"{where}: {name} has {int(a.size - ok.sum())} non-finite value(s) "
                     f"(the first, {a[first]}, at index {first}); npusim takes finite "
                     "float32 values only (no NaN or inf, on any machine)")


def values_of(tensor):
    """``tensor`` itself, or for a PyTorch tensor its values, which ``np.asarray`` then
    reads: a tensor that requires grad (a layer's ``nn.Parameter``) or lives on another
    device, which ``np.asarray`` refuses with torch's error, detached and copied to the CPU
    (found by its methods: torch is not imported)."""
    if hasattr(tensor, "requires_grad") and callable(getattr(tensor, "detach", None)):
        return tensor.detach().cpu()
    return tensor


def real_array(tensor, name: str, where: str) -> np.ndarray:
    """``tensor`` (``values_of``) as a NumPy array of real numbers (bool, integer or float),
    refused with an ``InputError`` otherwise: a complex array (a cast would drop the
    imaginary part), strings, objects, ragged nested lists."""
    try:
        a = np.asarray(values_of(tensor))
    except ValueError as e:  # ragged nested sequences
        raise InputError(f"{where}: {name} is not a rectangular array of numbers ({e})") from None
    if a.dtype.kind not in "biuf":
        raise InputError(f"{where}: {name} has dtype {a.dtype}; npusim takes arrays of real "
                         "numbers (float32, or integers in int8's range for an int8 conv)")
    return a


def finite_float32(tensor, name: str, where: str) -> np.ndarray:
    """``tensor`` (``real_array``) as float32, refused (``check_finite``) if a value is NaN or
    inf there, which includes a value beyond float32's range (about 3.4e38) that the cast
    made inf."""
    with np.errstate(over="ignore"):
        a = real_array(tensor, name, where).astype(np.float32, copy=False)
    check_finite(a, name, where)
    return a


def _all_finite(a: np.ndarray) -> bool:
    """Whether a real float array holds finite values only. A contiguous float32 or float64
    array is read once, by BLAS: the dot product of its values with themselves is NaN or
    inf when one value is (NaN x NaN, inf x inf and any sum with them are), so a finite one
    says every value is; an infinite one may also be finite squares that overflow, and
    only then (or for other arrays) are the extremes read (``_extremes_finite``). One BLAS
    pass takes 0.4-0.7 of the two reductions' time on a network's activations. False for a
    complex array (not checked here)."""
    if a.dtype.kind != "f":
        return False
    if a.dtype in _BLAS_FLOATS and (a.flags.c_contiguous or a.flags.f_contiguous):
        flat = a.ravel(order="K")  # a view
        with np.errstate(over="ignore", invalid="ignore"):
            squares = np.dot(flat, flat)
        if math.isfinite(squares):
            return True
    return _extremes_finite(a)


_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _extremes_finite(a: np.ndarray) -> bool:
    """Whether a real float array holds finite values only, by its extremes: a NaN makes
    the maximum NaN, +inf is the maximum and -inf the minimum (two reductions, no mask the
    size of the tensor in memory)."""
    if not a.size:
        return True
    return math.isfinite(np.maximum.reduce(a, axis=None)) and math.isfinite(
        np.minimum.reduce(a, axis=None))


def check_whole(tensor, name: str, where: str, bounds: tuple[int, int]) -> None:
    """Raise ``InputError`` unless every value of ``tensor`` is a whole number in
    ``bounds`` (inclusive): what an integer conv's operands must be before they are
    cast (a cast would wrap 200 to -56, or cut 0.5 to 0)."""
    a = np.asarray(tensor)
    if not a.size:
        return
    lo, hi = bounds
    if np.issubdtype(a.dtype, np.inexact):
        check_finite(a, name, where)
        if not np.array_equal(np.rint(a), a):
            raise InputError(f"{where}: {name} holds fractions (e.g. {a[a != np.rint(a)][0]}); "
                             f"integer inputs take whole numbers in [{lo}, {hi}]")
    if a.min() < lo or a.max() > hi:
        raise InputError(f"{where}: {name} has values in [{a.min()}, {a.max()}]; integer inputs "
                         f"must lie in [{lo}, {hi}] ({'int8' if bounds == INT8 else 'int32'})")


def check_bias(bias, k: int, where: str) -> None:
    """Raise ``InputError`` unless ``bias`` is None or one value per output channel (K,)."""
    if bias is not None and np.shape(bias) != (k,):
        raise InputError(f"{where}: bias has shape {np.shape(bias)}; it must be 1-D with one "
                         f"value per output channel, length K={k}")
