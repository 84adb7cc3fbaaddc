"""Bicubic resampling (a super-resolution network's skip, an image pipeline's resize): the
IR's ``Upsample`` of mode ``bicubic`` against PyTorch's ``F.interpolate`` in float64; a
network of it through ``from_torch`` (against the module in float64) and through ONNX as both
of torch's exporters write it and as ``Resize`` nodes written by hand (against
onnxruntime); a cubic resize that samples otherwise is refused, naming why."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from strategies import export_onnx, float64_output, onnxruntime_output, photo, rel_err  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402
from npusim.report.check import check  # noqa: E402

nn, F = torch.nn, torch.nn.functional
X = photo((2, 3, 11, 9))
X[1] = X[1, :, ::-1]


@pytest.mark.parametrize("how", [dict(scale=2), dict(scale=1.5), dict(scale=(0.6, 2.5)),
                                 dict(size=(17, 5)), dict(size=(4, 4))], ids=str)
@pytest.mark.parametrize("align_corners", [False, True])
def test_bicubic_upsample_is_pytorchs_in_float64(how, align_corners):
    op = ops.Upsample(mode="bicubic", align_corners=align_corners, **how)
    torch_how = {"size": how["size"]} if "size" in how else {"scale_factor": how["scale"]}
    want = F.interpolate(torch.from_numpy(X).double(), mode="bicubic",
                         align_corners=align_corners, **torch_how).numpy()
    assert op.out_shape([X.shape], "up") == want.shape
    got = op(X)
    assert got.dtype == np.float32 and rel_err(got, want) < 1e-6
    assert op.vector_ops([X.shape], want.shape) == 31 * want.size  # 16 taps a pixel


class Skip(nn.Module):
    """A super-resolution network's shape: the image upsampled bicubically, plus a conv's
    correction of it; and a second, aligned-corners bicubic upsample of the result."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.up = nn.Upsample(size=(30, 20), mode="bicubic", align_corners=True)

    def forward(self, x):
        big = F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)
        return self.up(big + self.conv(big))


def test_a_bicubic_network_through_from_torch_equals_the_module_in_float64():
    net = Skip().eval()
    graph = from_torch(net, X)
    ups = [n.op for n in graph.nodes if isinstance(n.op, ops.Upsample)]
    assert [(u.mode, u.align_corners) for u in ups] == [("bicubic", False), ("bicubic", True)]
    result = simulate(graph, X, "systolic-32x32-ws", keep_outputs=True)
    want = float64_output(net, X)
    assert rel_err(result.output, want) < 1e-6
    assert check(graph, X, result).passed


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_bicubic_network_through_onnx_equals_onnxruntime(exporter, tmp_path):
    path = export_onnx(Skip().eval(), X, tmp_path / "skip.onnx", exporter)
    modes = [helper.get_attribute_value(a) for n in onnx.load(str(path)).graph.node
             if n.op_type == "Resize" for a in n.attribute if a.name == "mode"]
    assert modes == [b"cubic", b"cubic"]
    graph = from_onnx(path)
    want = onnxruntime_output(path, X)
    assert rel_err(simulate(graph, X, "group-tile-32mac").output, want) < 1e-6


def resize(tmp_path, transform: str, out_hw, **attrs) -> str:
    """One cubic ``Resize`` of a 2 x 3 x 11 x 9 input to ``out_hw``, by its sizes."""
    sizes = np.array([2, 3, *out_hw], np.int64)
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="resize",
                          mode="cubic", coordinate_transformation_mode=transform, **attrs)],
        "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, *out_hw])],
        [numpy_helper.from_array(sizes, "sizes")])
    path = tmp_path / f"{transform}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return str(path)


@pytest.mark.parametrize("transform", ["half_pixel", "pytorch_half_pixel", "align_corners"])
@pytest.mark.parametrize("out_hw", [(22, 18), (16, 5), (7, 4)], ids=str)
def test_a_cubic_resize_written_by_hand_equals_onnxruntime(tmp_path, transform, out_hw):
    path = resize(tmp_path, transform, out_hw)
    graph = from_onnx(path)
    assert [type(n.op).__name__ for n in graph.nodes] == ["Upsample"]
    assert rel_err(simulate(graph, X).output, onnxruntime_output(path, X)) < 1e-6


@pytest.mark.parametrize("transform, attrs, reason", [
    ("half_pixel", {"cubic_coeff_a": -0.5}, r"cubic_coeff_a=-0\.5 from \(11, 9\)"),
    ("asymmetric", {}, r"coordinate_transformation_mode='asymmetric' and cubic_coeff_a=-0\.75"),
    ("half_pixel", {"exclude_outside": 1}, r"exclude_outside=1: only 0 is supported"),
])
def test_a_cubic_resize_that_samples_otherwise_is_refused_naming_why(tmp_path, transform,
                                                                     attrs, reason):
    with pytest.raises(ModelError, match=r"node 'resize': .*" + reason):
        from_onnx(resize(tmp_path, transform, (22, 18), **attrs))


def test_an_antialiased_bicubic_is_refused_naming_it():
    class Shrink(nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=0.5, mode="bicubic", antialias=True)

    with pytest.raises(ModelError, match=r"mode='bicubic', antialias: the IR resamples"):
        from_torch(Shrink().eval(), X)
