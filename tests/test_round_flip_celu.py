"""Rounding (floor, ceil, round half to even, trunc, round to decimals), CELU and flips
(Slices of negative step). Each op against torch in float64; a network of them through
``from_torch`` (against the module in float64) and through ONNX as both of torch's exporters
write it (against onnxruntime). The network's conv is exact in float32 (a photo in steps of
1/8, integer weights), so its roundings meet their ties and not float noise."""


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

nn, F = torch.nn, torch.nn.functional
TIES = np.array([k + 0.5 for k in range(-4, 4)] + [0.0, -0.0, 0.49999997, -2.5000002,
                                                   1e8 + 1, np.inf, -np.inf], np.float32)
VALUES = np.concatenate([TIES, np.random.default_rng(3).standard_normal(200) * 6])
VALUES = VALUES.astype(np.float32)
TORCH_ROUNDING = {"floor": torch.floor, "ceil": torch.ceil, "nearest": torch.round,
                  "trunc": torch.trunc}


def t64(a) -> "torch.Tensor":
    return torch.from_numpy(np.asarray(a, np.float64))


@pytest.mark.parametrize("mode", list(TORCH_ROUNDING))
def test_round_is_torchs_ties_to_even_included(mode):
    got = ops.Round(mode)(VALUES)
    want = TORCH_ROUNDING[mode](t64(VALUES)).numpy()
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # -0.5 rounds to -0.0
    assert ops.Round(mode).vector_ops([VALUES.shape], VALUES.shape) == VALUES.size


def test_round_refuses_a_mode_it_does_not_know():
    with pytest.raises(ops.LayerError, match="Round mode 'up': one of floor, ceil, nearest, "
                                             "trunc"):
        ops.Round("up")


@pytest.mark.parametrize("alpha", [0.3, 1.0, 2.5])
def test_an_elu_of_input_scale_one_over_alpha_is_torchs_celu(alpha):
    got = ops.Elu(alpha, 1 / alpha)(VALUES[np.isfinite(VALUES)])
    want = F.celu(t64(VALUES[np.isfinite(VALUES)]), alpha).numpy()
    assert rel_err(got, want) < 1e-6
    positive = VALUES[np.isfinite(VALUES)] > 0
    assert np.array_equal(got[positive], VALUES[np.isfinite(VALUES)][positive])
    ops_each = 4 if alpha == 1.0 else 5  # the input's scaling: one multiply more
    assert ops.Elu(alpha, 1 / alpha).vector_ops([(3,)], (3,)) == 3 * ops_each


@pytest.mark.parametrize("start, stop, step", [(-1, None, -1), (5, 1, -2), (6, None, -3),
                                               (2, -9, -1), (-2, 0, -1), (0, None, -1)])
def test_a_negative_step_slice_takes_what_a_python_list_would(start, stop, step):
    x = photo((2, 3, 7, 9))
    op = ops.Slice(2, start, stop, step)
    taken = list(range(7))[start:stop:step]
    assert op.out_shape([x.shape], "s") == (2, 3, len(taken), 9)
    assert np.array_equal(op(x), x[:, :, taken])


def test_a_slice_of_step_zero_is_refused():
    with pytest.raises(ops.LayerError, match="s: Slice step 0: must be non-zero"):
        ops.Slice(2, 0, None, 0).out_shape([(1, 3, 5, 5)], "s")


def exact_input() -> np.ndarray:
    """A photo in steps of 1/8, its two images different (a flip of the batch shows)."""
    x = photo((2, 3, 12, 10))
    x[1] = x[1, :, ::-1]
    return np.round(x * 8) / 8


class Rounded(nn.Module):
    """An exact conv, then the roundings, CELU and flips a user writes; ``exportable``
    leaves out what torch's ONNX exporters refuse (trunc, fliplr, flipud)."""

    def __init__(self, exportable: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randint(-2, 3, self.conv.weight.shape))
            self.conv.bias.copy_(torch.randint(-8, 9, (4,)) / 8)
        self.celu = nn.CELU(0.7)
        self.exportable = exportable

    def forward(self, x):
        t = self.conv(x) * 0.5  # multiples of 1/16: ties for round, integers for floor/ceil
        parts = [t.floor(), torch.ceil(t), torch.round(t), torch.round(t, decimals=1),
                 torch.round(t * 40, decimals=-1), self.celu(t), F.celu(t, 2.0),
                 t.flip(2, 3), torch.flip(t, [1]), t.flip(-1)[:, :, 1::2].repeat(1, 1, 2, 1)]
        if not self.exportable:
            parts += [t.trunc(), torch.fix(t - 0.25), torch.fliplr(t), torch.flipud(t)]
        return torch.cat(parts, 1)


def test_rounding_celu_and_flips_through_from_torch_equal_the_module_in_float64():
    x = exact_input()
    net = Rounded().eval()
    graph = from_torch(net, x)
    rounds = {n.op.mode for n in graph.nodes if isinstance(n.op, ops.Round)}
    assert rounds == {"floor", "ceil", "nearest", "trunc"}
    assert any(isinstance(n.op, ops.Elu) and n.op.input_scale == pytest.approx(1 / 0.7)
               for n in graph.nodes)
    assert any(isinstance(n.op, ops.Slice) and n.op.step < 0 and n.op.axis == 0
               for n in graph.nodes)
    pre = float64_output(nn.Sequential(net.conv), x) * 0.5
    assert (pre == np.round(pre)).any() and (pre - np.floor(pre) == 0.5).any()  # ties met
    assert_runs_as_module(graph, net, x, "sparse-pairs-32x32", 1e-6)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_rounding_celu_and_flips_through_onnx_equal_onnxruntime(exporter, tmp_path):
    x = exact_input()
    path = export_onnx(Rounded(exportable=True).eval(), x, tmp_path / "rounded.onnx", exporter)
    written = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"Floor", "Ceil", "Round", "Celu", "Slice"} <= written
    graph = from_onnx(path)
    assert any(isinstance(n.op, ops.Slice) and n.op.step < 0 for n in graph.nodes)
    want = onnxruntime_output(path, x)
    assert rel_err(simulate(graph, x, "input-reuse-1024").output, want) < 1e-6


def test_an_onnx_celu_of_alpha_zero_is_refused_naming_it(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Celu", ["x"], ["y"], name="celu0", alpha=0.0)], "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])])
    path = tmp_path / "celu0.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    with pytest.raises(ModelError, match=r"celu0.*alpha=0: CELU divides by alpha"):
        from_onnx(path)
