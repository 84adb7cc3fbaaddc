"""Log-sum-exp (``torch.logsumexp``, ONNX ``ReduceLogSumExp``: a detector's or segmenter's
smooth max pooling) as PyTorch computes it, the maximum taken out first: through
``from_torch`` against the module in float64, and through both of torch's exporters' files
against onnxruntime, on values whose exponentials overflow float32."""

import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from strategies import assert_runs_as_module, export_onnx, onnxruntime_output, photo, rel_err  # noqa: E402

from npusim import simulate  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn = torch.nn
X = photo((2, 3, 9, 10))
X[1] = X[1, :, ::-1]


class SmoothMax(nn.Module):
    """Log-sum-exp over channels (kept), over H and W (kept) and over W (dropped), of a
    conv's output scaled so that exp of it overflows float32."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        t = self.conv(x) * 200
        h, w = t.shape[2:]
        return torch.cat([torch.logsumexp(t, 1, keepdim=True),
                          t.logsumexp((2, 3), keepdim=True).expand(-1, -1, h, w),
                          torch.logsumexp(t, 3).unsqueeze(3).expand(-1, -1, -1, w)], 1)


def test_logsumexp_through_from_torch_equals_the_module_in_float64():
    net = SmoothMax().eval()
    graph = from_torch(net, X)
    with torch.no_grad():
        assert torch.isinf(torch.exp(net.conv(torch.from_numpy(X)) * 200)).any()
    assert_runs_as_module(graph, net, X, "systolic-32x32-ws", 1e-6)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_reduce_log_sum_exp_through_onnx_equals_onnxruntime(exporter, tmp_path):
    path = export_onnx(SmoothMax().eval(), X, tmp_path / "lse.onnx", exporter)
    assert "ReduceLogSumExp" in {n.op_type for n in onnx.load(str(path)).graph.node}
    want = onnxruntime_output(path, X)
    assert rel_err(simulate(from_onnx(path), X).output, want) < 1e-6
