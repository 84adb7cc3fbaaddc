"""Trigonometric and hyperbolic functions (``Trig``: SIREN's sine activations, a detector's
sine position encoding, ``atan`` of box ratios) and running sums (``CumSum``: the encoding's
row and column counts). Each op against torch in float64; a network of them through
``from_torch`` (against the module in float64) and through the ONNX files of both of torch's
exporters (against onnxruntime); ONNX ``CumSum``'s ``exclusive`` and ``reverse`` against
onnxruntime on a file written here."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from strategies import (  # noqa: E402
    assert_runs_as_module,
    export_onnx,
    float64_output,
    onnxruntime_output,
    photo,
    rel_err,
)

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn = torch.nn
RNG = np.random.default_rng(5)
WIDE = (RNG.standard_normal(300) * 3).astype(np.float32)  # past every inverse's domain
DOMAINS = {"acosh": 1 + np.abs(WIDE), "asin": np.tanh(WIDE), "acos": np.tanh(WIDE),
           "atanh": np.tanh(WIDE) * np.float32(0.999)}


@pytest.mark.parametrize("fn", list(ops.TRIG))
def test_each_function_is_torchs_in_float64_and_nan_where_torchs_is(fn):
    x = DOMAINS.get(fn, WIDE).astype(np.float32)
    got = ops.Trig(fn)(x)
    want = getattr(torch, fn)(torch.from_numpy(x.astype(np.float64))).numpy()
    assert got.dtype == np.float32 and rel_err(got, want) < 1e-6
    assert ops.Trig(fn).vector_ops([x.shape], x.shape) == x.size
    outside = getattr(torch, fn)(torch.from_numpy(WIDE)).numpy()  # NaN outside the domain
    assert np.array_equal(np.isnan(ops.Trig(fn)(WIDE)), np.isnan(outside))


def test_a_function_it_does_not_know_is_refused_naming_the_known():
    with pytest.raises(ops.LayerError, match="Trig function 'sec': one of sin, cos, tan, asin"):
        ops.Trig("sec")


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_cumsum_is_torchs_float32_cumsum_bit_for_bit(axis):
    x = photo((2, 3, 40, 50)) * 100 - 37
    got = ops.CumSum(axis)(x)
    want = torch.cumsum(torch.from_numpy(x), axis).numpy()  # summed in float64 on the CPU
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert ops.CumSum(axis).vector_ops([x.shape], x.shape) == x.size


@pytest.mark.parametrize("exclusive, reverse", [(True, False), (False, True), (True, True)])
def test_exclusive_and_reverse_sums_are_the_running_sums_the_onnx_spec_defines(exclusive,
                                                                              reverse):
    x = photo((1, 2, 5, 7))
    got = ops.CumSum(3, exclusive, reverse)(x)
    want = np.zeros(x.shape)
    for j in range(7):  # the spec's sums, element by element, in float64
        taken = [k for k in range(7) if (k >= j if reverse else k <= j)
                 and not (exclusive and k == j)]
        want[..., j] = x[..., taken].astype(np.float64).sum(axis=-1)
    assert rel_err(got, want) < 1e-7


def test_a_cumsum_axis_out_of_range_is_refused_naming_the_node():
    with pytest.raises(ops.LayerError, match=r"runs: CumSum axes \(4,\) out of range for a "
                                             r"4-D input"):
        ops.CumSum(4).out_shape([(1, 2, 3, 4)], "runs")


class Encoded(nn.Module):
    """A conv, a SIREN sine layer, a sine/cosine encoding of each pixel's normalised running
    row and column sums (a DETR-like position encoding of the map's mass), and the other
    functions on values in their domains (acosh's far from 1, where it is ill-conditioned);
    ``hyperbolic=False`` leaves out the hyperbolic ones, which torch's TorchScript exporter
    does not write."""

    def __init__(self, hyperbolic: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.siren = nn.Conv2d(4, 4, 1)
        self.hyperbolic = hyperbolic

    def forward(self, x):
        t = self.conv(x)
        s = torch.sin(6 * self.siren(torch.sin(3 * t)))
        mass = t.sigmoid()
        rows, cols = mass.cumsum(2), torch.cumsum(mass, dim=3)
        rows = rows / rows[:, :, -1:] * 6.283185307179586
        cols = cols / cols[:, :, :, -1:] * 6.283185307179586
        u = torch.tanh(t)
        parts = [s, rows.sin(), rows.cos(), torch.sin(cols), torch.cos(cols),
                 torch.tan(u), torch.asin(u), torch.arccos(u), u.atan(), torch.arctan(3 * t),
                 u.arcsin(), t.cumsum(1)]
        if self.hyperbolic:
            parts += [torch.sinh(u), u.cosh(), torch.asinh(t), torch.acosh(2 + t * t),
                      torch.atanh(0.99 * u), torch.arctanh(0.5 * u)]
        return torch.cat(parts, 1)


def test_trig_and_cumsum_through_from_torch_equal_the_module_in_float64():
    x = photo((2, 3, 12, 10))
    net = Encoded().eval()
    graph = from_torch(net, x)
    fns = {n.op.fn for n in graph.nodes if isinstance(n.op, ops.Trig)}
    assert fns == set(ops.TRIG)
    assert {n.op.axis for n in graph.nodes if isinstance(n.op, ops.CumSum)} == {1, 2, 3}
    assert_runs_as_module(graph, net, x, "sparse-pairs-32x32", 1e-5)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_trig_and_cumsum_through_onnx_equal_onnxruntime(exporter, tmp_path):
    x = photo((2, 3, 12, 10))
    hyperbolic = exporter == "dynamo"
    path = export_onnx(Encoded(hyperbolic).eval(), x, tmp_path / "encoded.onnx", exporter)
    written = {n.op_type for n in onnx.load(str(path)).graph.node}
    fns = {fn.capitalize() for fn in ops.TRIG if hyperbolic or not fn.endswith("h")}
    assert fns | {"CumSum"} <= written and ("Atanh" in written) == hyperbolic
    want = onnxruntime_output(path, x)
    assert rel_err(simulate(from_onnx(path), x, "input-reuse-1024").output, want) < 1e-5


class InPlace(nn.Module):
    """The in-place forms: each writes its result into the conv's output, read after."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        y.tanh_().arcsin_()
        torch.sin_(y)
        return y.cumsum_(2) * 2


def test_the_in_place_forms_import_as_the_functions():
    x = photo((1, 3, 9, 8))
    net = InPlace().eval()
    graph = from_torch(net, x)
    assert [type(n.op).__name__ for n in graph.nodes][1:5] == ["Tanh", "Trig", "Trig", "CumSum"]
    assert rel_err(simulate(graph, x).output, float64_output(net, x)) < 1e-6


def cumsum_file(tmp_path, axis, **attrs):
    """A conv, then an ONNX CumSum of ``axis`` (an initialiser; None: computed, the conv's
    greatest value as an integer) with ``attrs``."""
    rng = np.random.default_rng(1)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3],
                           rng.standard_normal(108).astype(np.float32))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    inits = [w]
    if axis is None:
        nodes += [helper.make_node("ReduceMax", ["c"], ["top"], name="top", keepdims=0),
                  helper.make_node("Cast", ["top"], ["axis"], name="cast", to=TensorProto.INT64)]
    else:
        inits.append(helper.make_tensor("axis", TensorProto.INT64, [], [axis]))
    nodes.append(helper.make_node("CumSum", ["c", "axis"], ["y"], name="runs", **attrs))
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8, 9])], inits)
    path = tmp_path / "cumsum.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return path


@pytest.mark.parametrize("axis, exclusive, reverse", [(2, 1, 0), (-1, 0, 1), (1, 1, 1)])
def test_an_onnx_cumsum_of_exclusive_and_reverse_equals_onnxruntime(axis, exclusive, reverse,
                                                                   tmp_path):
    path = cumsum_file(tmp_path, axis, exclusive=exclusive, reverse=reverse)
    x = photo((2, 3, 8, 9))
    graph = from_onnx(path)
    assert [n.op for n in graph.nodes][1] == ops.CumSum(axis, bool(exclusive), bool(reverse))
    assert rel_err(simulate(graph, x).output, onnxruntime_output(path, x)) < 1e-6


def test_an_onnx_cumsum_of_a_computed_axis_is_refused_naming_it(tmp_path):
    with pytest.raises(ModelError, match=r"CumSum x1 \(node 'runs': input 'axis' is computed "
                                         r"from the graph input; the IR needs a constant"):
        from_onnx(cumsum_file(tmp_path, None))


def test_a_torch_cumsum_to_integers_is_refused_naming_the_dtype():
    class Counts(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 1, dtype=torch.int64).float()

    with pytest.raises(ModelError, match=r"torch.cumsum x1 \(node 'cumsum': dtype=torch.int64: "
                                         r"the IR computes float32;"):
        from_torch(Counts(), photo((1, 3, 4, 4)))
