"""Inputs no machine should take silently: non-finite values, integers outside int8, a bias
that is not one value per output channel. Each is one InputError naming the tensor."""

import numpy as np
import pytest

import npusim
from npusim import GraphBuilder, InputError
from npusim.errors import NpusimError

# One preset per dataflow: every machine refuses the same inputs.
MACHINES = [("systolic", "systolic-2x2-ws"), ("input-reuse", "input-reuse-1024"),
            ("sparse-pairs", "sparse-pairs-32x32"), ("group-tile", "group-tile-32mac"),
            ("dilated-grid", "dilated-grid-2x2")]


def _conv(x, w, machine=MACHINES[0], **kw):
    dataflow, arch = machine
    return npusim.conv2d(x, w, dataflow=dataflow, arch=arch, **kw)


@pytest.mark.parametrize("machine", MACHINES, ids=[m[0] for m in MACHINES])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_x_meeting_a_zero_weight_is_refused_on_every_machine(machine, bad):
    # Today sparse-pairs returns 0.0 here (torch gives NaN): the product with a zero is skipped.
    x = np.ones((1, 2, 3, 3), np.float32)
    x[0, 1, 2, 0] = bad
    w = np.zeros((2, 2, 1, 1), np.float32)
    with pytest.raises(InputError, match=r"conv2d: x has 1 non-finite value\(s\) "
                                         r".*at index \(0, 1, 2, 0\)"):
        _conv(x, w, machine)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_non_finite_weight_and_bias_are_refused_before_quantisation(dtype):
    x = np.ones((1, 1, 2, 2), np.float32)
    w = np.ones((3, 1, 1, 1), np.float32)
    with pytest.raises(InputError, match=r"conv2d: w has 2 non-finite"):
        _conv(x, np.where(np.arange(3).reshape(3, 1, 1, 1) > 0, np.nan, w), dtype=dtype)
    with pytest.raises(InputError, match=r"conv2d: bias has 1 non-finite .*index \(2,\)"):
        _conv(x, w, bias=np.array([0, 1, np.inf]), dtype=dtype)


def test_int8_mode_refuses_a_nan_maximum():
    # Today the NaN maximum becomes scale 1.0 and every output is 0.
    x = np.array([0.5, np.nan, 0.01], np.float32).reshape(1, 1, 1, 3)
    with pytest.raises(InputError, match="x has 1 non-finite"):
        _conv(x, np.ones((1, 1, 1, 1), np.float32), dtype="int8")


@pytest.mark.parametrize("value", [200, -129, 128])
def test_integer_x_outside_int8_is_refused(value):
    # Today int64 200 is cast to int8 -56 and the conv returns -56.
    x = np.full((1, 1, 1, 1), value, np.int64)
    with pytest.raises(InputError, match=rf"conv2d: x has values in \[{value}, {value}\]; "
                                         r"integer inputs must lie in \[-128, 127\]"):
        _conv(x, np.ones((1, 1, 1, 1), np.int64))


def test_integer_w_outside_int8_and_fractional_w_are_refused():
    x = np.ones((1, 1, 1, 1), np.int8)
    with pytest.raises(InputError, match=r"w has values in \[300, 300\].*\[-128, 127\]"):
        _conv(x, np.full((1, 1, 1, 1), 300, np.int32))
    with pytest.raises(InputError, match=r"w holds fractions \(e.g. 0.5\)"):
        _conv(x, np.full((1, 1, 1, 1), 0.5))


def test_integer_bias_outside_int32_is_refused():
    x, w = np.ones((1, 1, 1, 1), np.int8), np.ones((1, 1, 1, 1), np.int8)
    with pytest.raises(InputError, match=r"bias has values .*\[-2147483648, 2147483647\]"):
        _conv(x, w, bias=np.array([2**31], np.int64))


def test_integer_extremes_of_int8_still_run_exactly():
    x = np.array([[-128, 127]], np.int64).reshape(1, 1, 1, 2)
    w = np.full((1, 1, 1, 1), -128, np.int64)
    out, _ = _conv(x, w, bias=np.array([5]))
    assert out.ravel().tolist() == [-128 * -128 + 5, 127 * -128 + 5]


@pytest.mark.parametrize("length", [1, 2, 4])
def test_bias_of_the_wrong_length_is_refused_naming_k(length):
    # Today length 1 is broadcast to all 3 outputs and length 2 raises a raw numpy ValueError.
    x, w = np.ones((1, 1, 2, 2), np.float32), np.ones((3, 1, 1, 1), np.float32)
    with pytest.raises(InputError, match=rf"conv2d: bias has shape \({length},\); .*length K=3"):
        _conv(x, w, bias=np.ones(length))


def test_scalar_and_2d_bias_are_refused():
    x, w = np.ones((1, 1, 2, 2), np.float32), np.ones((3, 1, 1, 1), np.float32)
    for bias in (np.float32(1), np.ones((3, 1))):
        with pytest.raises(InputError, match="length K=3"):
            _conv(x, w, bias=bias)


def _two_convs(w2=None, b1=None, sqrt=False):
    g = GraphBuilder("two", (1, 2, 4, 4))
    h = g.conv(g.input, np.ones((2, 2, 1, 1)), b1, name="c1")
    if sqrt:
        h = g.sqrt(h)
    g.conv(h, np.ones((2, 2, 1, 1)) if w2 is None else w2, name="c2")
    return g.build()


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("mode", ["run", "estimate", "emulate"])
def test_simulate_refuses_non_finite_input_before_any_layer(mode, dtype):
    # Today, in int8, an inf in the input makes every output 0.
    x = np.ones((1, 2, 4, 4), np.float32)
    x[0, 0, 1, 1] = np.inf
    seen = []
    with pytest.raises(InputError, match=r"two: input has 1 non-finite .*\(0, 0, 1, 1\)"):
        npusim.simulate(_two_convs(), x, "sparse-pairs-32x32", mode=mode, dtype=dtype,
                        progress=lambda i, n, name: seen.append(name))
    assert seen == []


def test_simulate_refuses_a_non_finite_weight_of_a_later_layer_before_any_layer_runs():
    w2 = np.ones((2, 2, 1, 1), np.float32)
    w2[1, 0, 0, 0] = np.nan
    seen = []
    with pytest.raises(InputError, match=r"c2: weight has 1 non-finite .*\(1, 0, 0, 0\)"):
        npusim.simulate(_two_convs(w2=w2), np.ones((1, 2, 4, 4)), "input-reuse-1024",
                        progress=lambda i, n, name: seen.append(name))
    assert seen == []
    with pytest.raises(InputError, match=r"c1: bias has 1 non-finite"):
        npusim.simulate(_two_convs(b1=[0, -np.inf]), np.ones((1, 2, 4, 4)), "systolic-2x2-ws")


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")
def test_simulate_refuses_a_non_finite_value_an_earlier_op_produced():
    # sqrt of a negative conv output gives NaN; the next conv refuses it.
    x = -np.ones((1, 2, 4, 4), np.float32)
    with pytest.raises(InputError, match=r"c2: input \(the output of the op before it\) has "
                                         r"32 non-finite"):
        npusim.simulate(_two_convs(sqrt=True), x, "sparse-pairs-32x32")


def test_a_float64_value_beyond_float32_is_refused_as_the_inf_it_would_become():
    x = np.full((1, 1, 1, 2), 1e39)
    with pytest.raises(InputError, match=r"x has 2 non-finite .*finite float32 values only"):
        _conv(x, np.ones((1, 1, 1, 1)))


@pytest.mark.parametrize("bad, words", [
    (np.ones((1, 2, 4, 4), np.complex64) * 1j, "has dtype complex64"),  # a cast drops the 1j
    (np.full((1, 2, 4, 4), "1"), "has dtype <U1"),
    (np.ones((1, 2, 4, 4), object), "has dtype object"),
    ([[1.0, 2.0], [3.0]], "is not a rectangular array of numbers"),
])
def test_anything_but_real_numbers_is_refused_by_simulate_and_conv2d(bad, words):
    with pytest.raises(InputError, match=rf"two: input {words}"):
        npusim.simulate(_two_convs(), bad, "systolic-2x2-ws")
    with pytest.raises(InputError, match=rf"conv2d: x {words}"):
        npusim.conv2d(bad, np.ones((2, 2, 1, 1), np.float32))
    with pytest.raises(InputError, match=rf"conv2d: w {words}"):
        npusim.conv2d(np.ones((1, 2, 4, 4), np.float32), bad)


def test_finite_values_whose_sum_overflows_are_not_refused():
    from npusim.tensors import check_finite

    check_finite(np.array([1e308, 1e308, -1e308]), "x", "here")
    with pytest.raises(InputError, match=r"here: x has 1 non-finite .*index \(3,\)"):
        check_finite(np.array([1e308, 1e308, -1e308, np.nan]), "x", "here")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_check_finite_on_activation_sized_arrays(dtype):
    """One non-finite value anywhere in arrays the size of a network's activations (read
    by BLAS in blocks, on every core) is found, in C and Fortran order; finite arrays whose
    squares overflow the dtype are taken. The reference: ``np.isfinite`` of every value."""
    from npusim.tensors import check_finite

    rng = np.random.default_rng(11)
    a = rng.standard_normal((1, 96, 112, 112)).astype(dtype)
    big = np.full_like(a, np.finfo(dtype).max)
    check_finite(a, "x", "here")
    check_finite(big, "x", "here")
    for bad in (np.nan, np.inf, -np.inf):
        for at in (0, a.size - 1, *rng.integers(1, a.size - 1, 3)):
            for base in (a, big):
                hit = base.copy()
                hit.flat[at] = bad
                for view in (hit, hit.T):
                    assert np.count_nonzero(~np.isfinite(view)) == 1
                    with pytest.raises(InputError, match=r"here: x has 1 non-finite"):
                        check_finite(view, "x", "here")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_finite_finds_a_non_finite_value_anywhere(dtype, bad):
    """``check_finite`` against a plain-Python scan (``math.isfinite`` of every value) on
    arrays with one to three non-finite values at random positions (the first, the last,
    inside), in C order and transposed, and on the same arrays all finite (extremes of the
    dtype included): it raises exactly when the scan finds one, naming the count and the
    first index."""
    import math

    from npusim.tensors import check_finite

    rng = np.random.default_rng(7)
    for shape in [(1,), (5,), (3, 4), (2, 3, 5, 7)]:
        for _ in range(8):
            a = rng.standard_normal(shape).astype(dtype)
            a.flat[0] = np.finfo(dtype).max
            a.flat[-1] = np.finfo(dtype).min
            check_finite(a, "x", "here")
            at = sorted({int(i) for i in rng.integers(0, a.size, rng.integers(1, 4))}
                        | ({0} if rng.random() < 0.3 else set()))
            a.flat[at] = bad
            for view in (a, a.T):
                scan = [i for i, v in enumerate(view.flat) if not math.isfinite(float(v))]
                first = np.unravel_index(scan[0], view.shape)
                index = "\\(" + ", ".join(str(int(i)) for i in first) + ",?\\)"
                with pytest.raises(InputError, match=rf"here: x has {len(scan)} non-finite "
                                                     rf".*at index {index}"):
                    check_finite(view, "x", "here")


def test_a_layers_own_parameters_and_a_grad_input_are_taken_as_their_values():
    """``conv2d(x, conv.weight, conv.bias)`` with an ``nn.Conv2d``'s parameters (they require
    grad), and ``simulate`` on an input that requires grad, raised torch's "Can't call
    numpy() on Tensor that requires grad"; their values are now used, checked against
    PyTorch in float64."""
    import torch

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, padding=1)
    x = torch.randn(1, 4, 8, 8)
    want = torch.nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double(),
                                      padding=1).detach().numpy()
    out, _ = npusim.conv2d(x, conv.weight, conv.bias, padding=1)
    assert np.abs(out - want).max() <= 1e-5 * np.abs(want).max()
    graph = npusim.from_torch(torch.nn.Sequential(conv).eval(), x)
    result = npusim.simulate(graph, x.clone().requires_grad_())
    assert np.abs(result.output - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("call, message", [
    (lambda m, x: npusim.simulate(m, x),
     r"simulate: model is a torch\.nn\.modules\.container\.Sequential, not a network npusim "
     r"has read: give npusim\.from_torch\(module, example_input\)"),
    (lambda m, x: npusim.simulate(npusim.from_torch(m, x), x, mode="emulate",
                                  emulate_limit="1e9"),
     r"emulate_limit='1e9': must be a whole number of emulator steps >= 1, or None"),
    (lambda m, x: npusim.conv2d(x, np.ones((8, 3, 3, 3), np.float32), emulate=True,
                                emulate_limit=-5), r"emulate_limit=-5: must be a whole number"),
])
def test_a_wrong_argument_type_is_one_npusim_error(call, message):
    """A module where a Graph belongs, a string or negative step limit: one npusim error
    naming the argument and what is valid (they were an AttributeError or a TypeError from
    inside npusim, or a limit of -5 taken)."""
    import torch

    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3)).eval()
    with pytest.raises(NpusimError, match=message):
        call(module, torch.zeros(1, 3, 8, 8))
