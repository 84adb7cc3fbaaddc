"""Comparisons, ``Where``, ``Sign`` and the logical ops: a framework's bool masks carried as
1.0 and 0.0. Each op against torch in float64; a module of them through ``from_torch``
(against the module in float64) and through ONNX as both of torch's exporters write it
(against onnxruntime); a mask read where torch's bool arithmetic differs from the floats'
is refused, naming it."""


import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
from strategies import assert_runs_as_module, export_onnx, onnxruntime_output, photo, rel_err  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn = torch.nn
X = np.round(np.random.default_rng(5).standard_normal((2, 4, 5, 6)) * 4) / 4  # ties galore
X = X.astype(np.float32)
Y = np.round(np.random.default_rng(6).standard_normal((2, 4, 1, 6)) * 4).astype(np.float32) / 4

COMPARISONS = {"greater": torch.gt, "less": torch.lt, "greater_equal": torch.ge,
               "less_equal": torch.le, "equal": torch.eq, "not_equal": torch.ne}


def t64(a) -> "torch.Tensor":
    return torch.from_numpy(np.asarray(a, np.float64))


@pytest.mark.parametrize("kind", list(COMPARISONS))
def test_a_comparison_is_torchs_bool_result_as_ones_and_zeros(kind):
    want = COMPARISONS[kind](t64(X), t64(Y)).double().numpy()
    assert want.any() and not want.all()
    for got in (ops.Elementwise(kind)(X, Y), ops.Elementwise(kind, Y)(X),
                ops.Elementwise(kind, X, True)(Y)):
        assert got.dtype == np.float32 and np.array_equal(got, want)
    assert ops.Elementwise(kind).vector_ops([X.shape, Y.shape], want.shape) == want.size


@pytest.mark.parametrize("constant", [None, "cond", "a", "b"])
def test_where_selects_as_torch_with_any_operand_constant(constant):
    cond = (X > 0).astype(np.float32)
    a, b = X * 3, Y - 1
    want = torch.where(t64(cond) != 0, t64(a), t64(b)).numpy()
    values = {"cond": cond, "a": a, "b": b}
    op = ops.Where(**({constant: values[constant]} if constant else {}))
    inputs = [v for k, v in values.items() if k != constant]
    assert op.out_shape([v.shape for v in inputs], "w") == want.shape
    got = op(*inputs)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert op.vector_ops([v.shape for v in inputs], want.shape) == want.size


def test_where_refuses_shapes_that_do_not_broadcast():
    with pytest.raises(ops.LayerError, match=r"w: Where of shapes \[\(2, 4, 5, 6\), \(5,\), "
                                             r"\(2, 4, 5, 6\)\] that do not broadcast"):
        ops.Where().out_shape([X.shape, (5,), X.shape], "w")


def test_sign_is_torchs():
    x = np.concatenate([X.ravel(), [0.0, -0.0, np.inf, -np.inf]]).astype(np.float32)
    assert np.array_equal(ops.Sign()(x), torch.sign(t64(x)).numpy())


class Masked(nn.Module):
    """A conv, then what a user writes with masks: a select against a threshold, a masked
    product, a logical and / or / not, a sign, a select with a number, masked fills by a
    computed mask and by a constant one (a buffer, as Swin's attention mask), comparisons
    of masks (with a mask, a flipped mask, a number)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.register_buffer("fixed", torch.arange(8 * 9 * 8).reshape(1, 8, 9, 8) % 3 == 0)

    def forward(self, x):
        t = self.conv(x)
        band = (t > -0.2) & ~(t >= 0.3)
        y = torch.where(band, t, torch.sign(t) * t.abs().sqrt())
        y = y * (t != 0).float() + torch.where(torch.logical_or(t < -0.5, t > 0.5), 0.25, y)
        y = y.masked_fill(y < -0.6, -0.75).masked_fill(self.fixed, 0.125)
        agree = ((t > 0) == (t.flip(3) > 0)) & ((t < 0.2) != band) | ((t > 0.4) > 0.5)
        y = torch.where(agree, y, -y)
        return torch.where(y <= 0.1, y * 0.5, y) - (y == y.amax(1, keepdim=True)).float()


def masked_input():
    return photo((2, 3, 9, 8)) * 2 - 1


def test_masks_through_from_torch_equal_the_module_in_float64():
    x = masked_input()
    net = Masked().eval()
    graph = from_torch(net, x)
    kinds = {type(n.op).__name__ for n in graph.nodes}
    assert {"Where", "Sign", "Elementwise"} <= kinds
    assert_runs_as_module(graph, net, x, "systolic-32x32-ws", 1e-5)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_masks_through_onnx_equal_onnxruntime(exporter, tmp_path):
    x = masked_input()
    path = export_onnx(Masked().eval(), x, tmp_path / "masked.onnx", exporter)
    graph = from_onnx(path)
    assert {"Where", "Sign"} <= {type(n.op).__name__ for n in graph.nodes}
    want = onnxruntime_output(path, x)
    assert rel_err(simulate(graph, x, "sparse-pairs-32x32").output, want) < 1e-5


@pytest.mark.parametrize("module", [nn.Threshold(0.1, 20.0), nn.Hardshrink(0.5),
                                    nn.Softshrink(0.5)], ids=lambda m: type(m).__name__)
def test_shrinks_and_threshold_through_both_importers(module, tmp_path):
    """From torch: a comparison and a Where (Softshrink: x less x clamped); from the file of
    the default exporter: its comparisons, Where and Sign. Both against the module in
    float64."""
    x = masked_input()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), module).eval()
    path = export_onnx(net, x, tmp_path / "m.onnx")
    with torch.no_grad():
        want = net.double()(t64(x)).numpy()
    assert rel_err(simulate(from_onnx(path), x).output, want) < 1e-5
    graph = from_torch(net.float(), x)
    assert type(graph.nodes[-1].op).__name__ == ("Elementwise" if isinstance(module, nn.Softshrink)
                                                 else "Where")
    assert rel_err(simulate(graph, x).output, want) < 1e-5


@pytest.mark.parametrize("forward, refused", [
    (lambda t: (t > 0) + (t > 1), "operator.add x1 (node 'add': it reads gt, gt_1, a bool mask"),
    (lambda t: torch.logical_and(t, t > 0), "torch.logical_and x1 (node 'logical_and': its "
                                            "input is float32, not a bool mask"),
])
def test_a_mask_read_where_torch_differs_is_refused_naming_it(forward, refused):
    """torch adds two bool tensors as their OR, and a logical op of numbers tests them
    against zero: neither is what the floats would give."""
    net = type("Net", (nn.Module,), {"forward": lambda self, t: forward(t)})()
    with pytest.raises(ModelError) as e:
        from_torch(net, masked_input())
    assert refused in str(e.value) and "\n" not in str(e.value)
