"""Division with rounding as PyTorch computes it: floor division (``//``,
``torch.floor_divide``, ``rounding_mode="floor"``), ``remainder`` / ``%`` (of the divisor's
sign), ``fmod`` (of the dividend's) and truncated division, by numbers and by tensors, as
modules' calls, methods and in-place forms, and ONNX's ``Mod``. Each against PyTorch's own
float32 result bit for bit, on values where the quotient meets a whole number (k / 10 by
0.1, whose float32 quotient rounds up to k where PyTorch's floor division gives k - 1), and
on random values; the ONNX file against onnxruntime."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from strategies import export_onnx, onnxruntime_output  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402
from npusim.report.check import check  # noqa: E402

nn = torch.nn
# tenths, whose float32 quotients by 0.1 round to whole numbers either side of PyTorch's
TENTHS = (np.arange(-300, 300) / 10).astype(np.float32)
RANDOM = (np.random.default_rng(5).standard_normal(600) * 7).astype(np.float32)
X = np.concatenate([TENTHS, RANDOM]).reshape(2, 3, 10, 20)
TORCH_KIND = {"floordiv": torch.floor_divide, "remainder": torch.remainder, "fmod": torch.fmod}


def divisors() -> np.ndarray:
    """A tensor of X's shape, of both signs, none near 0."""
    d = np.random.default_rng(6).uniform(0.1, 3, X.shape).astype(np.float32)
    return np.where(np.arange(X.size).reshape(X.shape) % 2 == 0, d, -d)


@pytest.mark.parametrize("kind", list(TORCH_KIND))
@pytest.mark.parametrize("by", [0.1, -0.1, 0.3, -0.7, "tensor"])
def test_elementwise_division_modes_are_pytorchs_bit_for_bit(kind, by):
    y = divisors() if by == "tensor" else np.float32(by)
    got = ops.Elementwise(kind)(X, y) if by == "tensor" else ops.Elementwise(kind, y)(X)
    want = TORCH_KIND[kind](torch.from_numpy(X), torch.as_tensor(y)).numpy()
    assert got.dtype == np.float32 and np.array_equal(got, want)


@pytest.mark.parametrize("kind", list(TORCH_KIND))
def test_a_constant_dividend_divides_the_tensor(kind):
    y = divisors()
    got = ops.Elementwise(kind, np.float32(2.5), const_first=True)(y)
    assert np.array_equal(got, TORCH_KIND[kind](torch.tensor(2.5), torch.from_numpy(y)).numpy())


def test_floor_of_the_quotient_is_not_floor_division():
    """The case the IR's floordiv exists for: 1 // 0.1 is 9 in PyTorch (float32 and
    float64), floor(1 / 0.1) is 10."""
    one = np.float32([1.0])
    assert ops.Elementwise("floordiv", np.float32(0.1))(one)[0] == 9
    assert np.floor(one / np.float32(0.1))[0] == 10
    assert ops.Elementwise("floordiv", np.float32(0.1))(TENTHS).tolist() != \
        np.floor(TENTHS / np.float32(0.1)).tolist()


def test_a_division_by_zero_is_torchs_inf_or_nan_without_a_warning():
    x = np.float32([1.0, -1.0, 0.0])
    with np.errstate(all="raise"):
        for kind, fn in TORCH_KIND.items():
            got = ops.Elementwise(kind, np.float32(0))(x)
            want = fn(torch.from_numpy(x), 0.0).numpy()
            assert np.array_equal(got, want, equal_nan=True)


def in_place_floor(t):
    t = t + 0  # a tensor of the network's own, changed in place
    t //= 0.1
    return t


def in_place_mod(t):
    t = t * 1
    t %= -0.7
    return t


CALLS = {
    "//": lambda t, d: t // 0.1, "torch.floor_divide": lambda t, d: torch.floor_divide(t, -0.1),
    "div floor by a tensor": lambda t, d: torch.div(t, d, rounding_mode="floor"),
    "Tensor.floor_divide": lambda t, d: t.floor_divide(d),
    "//=": lambda t, d: in_place_floor(t),
    "%": lambda t, d: t % 0.1, "number % tensor": lambda t, d: 2.5 % (t.abs() + 0.25),
    "torch.remainder by a tensor": lambda t, d: torch.remainder(t, d),
    "Tensor.remainder_": lambda t, d: (t * 1).remainder_(0.3),
    "%=": lambda t, d: in_place_mod(t),
    "torch.fmod": lambda t, d: torch.fmod(t, 0.1),
    "Tensor.fmod by a tensor": lambda t, d: t.fmod(d),
    "Tensor.fmod_": lambda t, d: (t * 1).fmod_(-0.7),
    "div trunc": lambda t, d: torch.div(t, 0.1, rounding_mode="trunc"),
    "div trunc by a tensor": lambda t, d: torch.div(t, d, rounding_mode="trunc"),
}


class Divides(nn.Module):
    """``fn(x, d)`` of the input and a buffer of divisors, then a conv."""

    def __init__(self, fn):
        super().__init__()
        torch.manual_seed(0)
        self.fn = fn
        self.register_buffer("d", torch.from_numpy(divisors()))
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(self.fn(x, self.d))


def divided(graph, result) -> np.ndarray:
    """The input to the network's conv, as npusim computed it."""
    conv = next(n for n in graph.nodes if isinstance(n.op, ops.Conv))
    return result.outputs[conv.inputs[0]]


@pytest.mark.parametrize("name", list(CALLS))
def test_a_division_call_through_from_torch_is_pytorchs_bit_for_bit(name):
    net = Divides(CALLS[name]).eval()
    graph = from_torch(net, X)
    result = simulate(graph, X, "systolic-32x32-ws", keep_outputs=True)
    with torch.no_grad():
        want = CALLS[name](torch.from_numpy(X), net.d).expand(X.shape).numpy()
    assert np.array_equal(divided(graph, result), want)
    assert check(graph, X, result).passed


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_onnx_mod_of_torch_fmod_is_onnxruntimes(exporter, tmp_path):
    net = Divides(lambda t, d: torch.fmod(t, d) + torch.fmod(t, 0.3)).eval()
    path = export_onnx(net, X, tmp_path / "fmod.onnx", exporter)
    graph = from_onnx(path)
    assert sum(isinstance(n.op, ops.Elementwise) and n.op.kind == "fmod"
               for n in graph.nodes) == 2
    result = simulate(graph, X, "systolic-32x32-ws")
    want = onnxruntime_output(path, X)
    assert np.abs(result.output - want).max() < 1e-4 * np.abs(want).max()


def test_an_integer_mod_is_refused_naming_fmod(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Mod", ["x", "d"], ["m"], fmod=0),
             helper.make_node("Conv", ["m", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "mod", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])],
        [helper.make_tensor("d", TensorProto.FLOAT, [], [0.5]),
         helper.make_tensor("w", TensorProto.FLOAT, [2, 3, 1, 1], [1.0] * 6)])
    path = tmp_path / "mod.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelError, match=r"Mod.*fmod=0: the remainder of integer tensors; "
                                         r"the IR's tensors are float32, whose Mod takes fmod=1"):
        from_onnx(path)
