"""The named fallback: an op npusim does not model is refused by default, and with
``fallback=True`` / ``--fallback`` computed by the framework it came from (a torch call, an
onnxruntime session on the single node), costed as vector work and marked in the reports.
Networks here return several outputs (a dict in torch, two graph outputs in ONNX), so each
output is checked by name, end to end against torch and onnxruntime running the whole model."""

from __future__ import annotations

import json
import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
from strategies import rel_err  # noqa: E402
from torch import nn  # noqa: E402

from npusim import cli, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402


class Upper(nn.Module):
    def forward(self, x):
        return torch.triu(x)


class Triangles(nn.Module):
    """The upper and the strictly lower triangle of each map (neither in npusim's IR) between
    two convs; returns the last conv and the upper triangles."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = Upper()
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.act(self.conv(x))
        return {"logits": self.head(torch.tril(y, -1)), "features": y}


def example(batch=2):
    return torch.randn(batch, 3, 10, 9, generator=torch.Generator().manual_seed(1))


def test_torch_refuses_by_default_naming_each_op_and_the_fallback():
    with pytest.raises(ModelError, match=r"unsupported ops: torch.triu x1 \('triu'\), "
                                         r"torch.tril x1 \('tril'\) \(fallback=True, "
                                         r"--fallback"):
        from_torch(Triangles().eval(), example())


def test_torch_fallback_equals_the_module_output_by_output():
    net, x = Triangles().eval(), example()
    graph = from_torch(net, x, fallback=True)
    assert list(graph.outputs) == ["logits", "features"]
    fallbacks = [n.name for n in graph.nodes if type(n.op).__name__ == "Fallback"]
    assert fallbacks == ["triu", "tril"]
    result = simulate(graph, x.numpy())
    with torch.no_grad():
        want = net(x)
    for label in ("logits", "features"):
        assert rel_err(result.named_outputs[label], want[label].numpy()) < 1e-5, label
    # vector work: every input element and every output element once (8 x 10 x 9 maps, N=2)
    elements = 2 * 8 * 10 * 9
    costs = {s.name: (s.shape, s.vector_ops, s.macs) for s in result.layers}
    assert costs["triu"] == ("Fallback", 2 * elements, 0)
    assert costs["tril"] == ("Fallback", 2 * elements, 0)


def test_torch_fallback_survives_pickling_at_another_batch():
    net = Triangles().eval()
    x = example(batch=3)
    graph = pickle.loads(pickle.dumps(from_torch(net, x, fallback=True)))
    with torch.no_grad():
        want = net(x)["logits"].numpy()
    assert rel_err(simulate(graph, x.numpy()).named_outputs["logits"], want) < 1e-5


def export(tmp_path):
    path = tmp_path / "fallback.onnx"
    net, x = Triangles().eval(), example()

    class Pair(nn.Module):  # torch.onnx exports a tuple as two graph outputs
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            out = self.net(x)
            return out["logits"], out["features"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Pair().eval(), (x,), str(path), input_names=["x"],
                          output_names=["logits", "features"], dynamo=False,
                          dynamic_axes={"x": {0: "N"}})
    return path, x.numpy()


def test_onnx_refuses_by_default_and_falls_back_to_onnxruntime(tmp_path):
    path, x = export(tmp_path)
    with pytest.raises(ModelError, match=r"unsupported ops: Trilu x2 \('/net/act/Trilu', "
                                         r"'/net/Trilu'\) \(fallback=True"):
        from_onnx(path, batch=2)
    graph = from_onnx(path, batch=2, fallback=True)
    assert list(graph.outputs) == ["logits", "features"]
    assert [getattr(n.op, "source", type(n.op).__name__) for n in graph.nodes] == \
        ["Conv", "ONNX Trilu", "ONNX Trilu", "Conv"]
    want = ort.InferenceSession(str(path)).run(None, {"x": x})
    result = simulate(pickle.loads(pickle.dumps(graph)), x)
    for label, ref in zip(("logits", "features"), want, strict=True):
        assert rel_err(result.named_outputs[label], ref) < 1e-5, label


class SortedRows(nn.Module):
    """A conv, then rows sorted: ``torch.sort`` gives values and indices, not one tensor."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.sort(self.conv(x).flatten(1), dim=1).values


def test_torch_fallback_says_why_it_cannot_run_a_node_and_offers_no_fallback():
    """Asked for, the fallback that cannot run a node (a call giving several tensors) is not
    offered again: the refusal names the node and why the fallback cannot take it."""
    with pytest.raises(ModelError) as e:
        from_torch(SortedRows().eval(), example(), fallback=True)
    assert "ops neither npusim nor its fallback can run: torch.sort x1 (node 'sort': the " \
           "fallback cannot run it: its result is not one tensor)" in str(e.value)
    assert "--fallback" not in str(e.value)


class WhereMasked(nn.Module):
    """A mask npusim does not compute (``torch.isclose``) read by torch.where: the fallback
    would run the first, which gives a bool tensor."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return torch.where(torch.isclose(y, 0.1 * y, atol=0.05), y, 0.1 * y)


def test_torch_fallback_refuses_a_node_whose_result_is_not_floating():
    """A mask the fallback computed reached torch.where as float32 and the walk failed inside
    torch (a traceback, exit 1); the fallback now refuses the node that makes it, naming it.
    (A comparison's mask npusim computes itself: tests/test_masks.py.)"""
    with pytest.raises(ModelError) as e:
        from_torch(WhereMasked().eval(), example(), fallback=True)
    assert "node 'isclose': the fallback cannot run it: its result is bool, and the network's " \
           "tensors are float32" in str(e.value)


def test_onnx_fallback_says_why_it_cannot_run_a_node(tmp_path):
    """An ONNX node with no rule whose second output is read (TopK's indices) cannot run
    alone in onnxruntime as one tensor out: refused with that reason, the fallback not
    offered again; without the fallback, offered."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    outs = [helper.make_tensor_value_info("values", TensorProto.FLOAT, [1, 2, 4, 2]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, [1, 2, 4, 2])]
    k = helper.make_tensor("k", TensorProto.INT64, [1], [2])
    graph = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["values", "indices"],
                                                name="top")], "g", [x], outs, [k])
    path = tmp_path / "topk.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                     .SerializeToString())
    with pytest.raises(ModelError) as e:
        from_onnx(path, fallback=True)
    assert "ops neither npusim nor its fallback can run: TopK x1 (node 'top': the fallback " \
           "cannot run it: its extra outputs ['indices'] are used" in str(e.value)
    assert "--fallback" not in str(e.value)
    with pytest.raises(ModelError, match=r"unsupported ops: TopK x1 \('top'\) \(fallback=True, "
                                         r"--fallback"):
        from_onnx(path)


def test_cli_fallback_checks_each_output_and_marks_the_reports(tmp_path, capsys):
    path, _ = export(tmp_path)
    report = tmp_path / "r.json"
    assert cli.main(["run", str(path), "--batch", "1", "-q", "--check", "--json", str(report)]) \
        == 2
    assert "--fallback" in capsys.readouterr().err
    code = cli.main(["run", str(path), "--batch", "1", "--fallback", "--check", "--json",
                     str(report)])
    out, _ = capsys.readouterr()
    assert code == 0, out
    data = json.loads(report.read_text())
    assert data["check"]["passed"]
    errors = data["check"]["output_relative_errors"]
    assert list(errors) == ["logits", "features"] and max(errors.values()) < 1e-5
    marked = [r["shape"] for r in data["layers"] if r["name"] in ("/net/act/Trilu",
                                                                  "/net/Trilu")]
    assert marked == ["Fallback", "Fallback"]
    assert data["fallback"] == {"/net/act/Trilu": "ONNX Trilu",
                                "/net/Trilu": "ONNX Trilu"}
    assert "fallback: 2 ops computed by the source framework, costed as vector work: " \
        "/net/act/Trilu (ONNX Trilu), /net/Trilu (ONNX Trilu)" in out


class GlobalFilter(nn.Module):
    """GFNet's global filter as its authors write it: ``irfft2(rfft2(x) * weight)`` over the
    token grid, the weight a complex view of a float parameter."""

    def __init__(self, dim, side):
        super().__init__()
        self.complex_weight = nn.Parameter(torch.randn(side, side // 2 + 1, dim, 2) * 0.5)

    def forward(self, x):
        b, n, c = x.shape
        a = int(n ** 0.5)
        x = torch.fft.rfft2(x.view(b, a, a, c), dim=(1, 2), norm="ortho")
        x = x * torch.view_as_complex(self.complex_weight)
        return torch.fft.irfft2(x, s=(a, a), dim=(1, 2), norm="ortho").reshape(b, n, c)


class FourierUnit(nn.Module):
    """LaMa's FFC Fourier unit as its authors write it: the spectrum's real and imaginary
    parts stacked into channels, a 1x1 conv, made complex again and transformed back."""

    def __init__(self, channels):
        super().__init__()
        self.conv_layer = nn.Conv2d(channels * 2, channels * 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(channels * 2)

    def forward(self, x):
        batch = x.shape[0]
        ffted = torch.fft.rfftn(x, dim=(-2, -1), norm="ortho")
        ffted = torch.stack((ffted.real, ffted.imag), dim=-1)
        ffted = ffted.permute(0, 1, 4, 2, 3).contiguous()
        ffted = ffted.view((batch, -1) + ffted.size()[3:])
        ffted = torch.relu(self.bn(self.conv_layer(ffted)))
        ffted = ffted.view((batch, -1, 2) + ffted.size()[2:]).permute(0, 1, 3, 4, 2).contiguous()
        ffted = torch.complex(ffted[..., 0], ffted[..., 1])
        return torch.fft.irfftn(ffted, s=x.shape[-2:], dim=(-2, -1), norm="ortho")


class Spectral(nn.Module):
    """A patch embedding, GFNet's global filter, FNet's mixing (``fft(fft(x)).real``), back
    to a map, FFC's Fourier unit, a head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.embed = nn.Conv2d(3, 8, 2, 2)
        self.norm = nn.LayerNorm(8)
        self.filter = GlobalFilter(8, 4)
        self.fourier = FourierUnit(8)
        self.fourier.bn.running_var.data.uniform_(0.5, 2)
        self.head = nn.Conv2d(8, 5, 1)

    def forward(self, x):
        t = self.embed(x).flatten(2).transpose(1, 2)
        t = t + self.filter(self.norm(t))
        t = t + torch.fft.fft(torch.fft.fft(t, dim=-1), dim=-2).real
        y = t.transpose(1, 2).reshape(x.shape[0], 8, 4, 4)
        return self.head(y + self.fourier(y))


@pytest.mark.parametrize("batch", [1, 2])
def test_complex_valued_regions_run_as_one_fallback_each(batch):
    """The complex tensors between float ones are one fallback a region, named and listed
    by the calls it runs; the network equals the module run in float64 (complex128)."""
    from strategies import float64_output, photo

    net = Spectral().eval()
    x = photo((batch, 3, 8, 8))
    graph = from_torch(net, x, fallback=True)
    assert [n.op.source for n in graph.nodes if type(n.op).__name__ == "Fallback"] == [
        "complex-valued rfft2 > mul > irfft2", "complex-valued fft > fft > real",
        "complex-valued rfftn > real > imag > stack", "complex-valued complex > irfftn"]
    assert rel_err(simulate(graph, x).output, float64_output(net, x)) < 1e-5
    assert rel_err(simulate(pickle.loads(pickle.dumps(graph)), x).output,
                   float64_output(net, x)) < 1e-5


class TwoParts(nn.Module):
    """A spectrum whose real and imaginary parts leave as two outputs: no one float result."""

    def forward(self, x):
        z = torch.fft.rfft2(x)
        return z.real, z.imag


class ImaginaryUnit(nn.Module):
    """Complex values from ops the IR has rules for: ``|y + y i|``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(6)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return (y * 1j + y).abs()


def test_complex_values_are_refused_offering_the_fallback_and_without_one_exit_refused():
    from strategies import float64_output, photo

    with pytest.raises(ModelError, match=r"unsupported ops: torch._C._fft.fft_rfft2 x1 "
                                         r"\('fft_rfft2'\), .*fallback=True, --fallback"):
        from_torch(Spectral().eval(), photo((1, 3, 8, 8)))
    with pytest.raises(ModelError, match=r"operator.mul x1 \(node 'mul': its result is "
                                         r"complex64, which the IR's float32 tensors do not "
                                         r"carry\), .*fallback=True, --fallback"):
        from_torch(ImaginaryUnit().eval(), photo((1, 3, 8, 8)))
    net, x = ImaginaryUnit().eval(), photo((2, 3, 8, 8))
    graph = from_torch(net, x, fallback=True)
    assert rel_err(simulate(graph, x).output, float64_output(net, x)) < 1e-5
    with pytest.raises(ModelError, match=r"node 'fft_rfft2': the fallback cannot run it: its "
                                         r"result is complex64"):
        from_torch(TwoParts(), photo((1, 3, 8, 8)), fallback=True)
