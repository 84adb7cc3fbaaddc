"""Einsum (attention written as ``bhqd,bhkd->bhqk``, a permute, a sum, a linear layer over
channels last) from ``torch.einsum`` and ONNX ``Einsum``: each equation after a conv on a
photo against the module in float64 and against onnxruntime on both of torch's exporters'
files; what the IR cannot express refused, naming why."""

import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from strategies import export_onnx, float64_output, onnxruntime_output, photo, rel_err  # noqa: E402

from npusim import simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn = torch.nn
X = photo((2, 3, 6, 5))
X[1] = X[1, :, ::-1]

# equation -> what it reads of the conv's output t (2 x 8 x 6 x 5) and the module's weight
# w (8 x 5); each result is flattened after the batch axis
EQUATIONS = {
    "bcn,bcm->bnm": lambda t, w: (t.flatten(2), t.flatten(2)),  # attention's scores
    "bhqd,bhkd->bhqk": lambda t, w: (t, t * 0.5),  # per head: queries by keys
    "bhqk,bhkd->bhqd": lambda t, w: (t.transpose(2, 3).softmax(-1), t),  # weights by values
    "bchw->bhwc": lambda t, w: (t,),
    "bchw->bc": lambda t, w: (t,),
    "bhwc,cd->bhwd": lambda t, w: (t.permute(0, 2, 3, 1), w),
    "bhwc,dc->bhwd": lambda t, w: (t.permute(0, 2, 3, 1), w.T.contiguous() * 2),
    "bchw,bchw->bh": lambda t, w: (t, t.flip(3)),
    "b...w,b...w->b...": lambda t, w: (t, t + 1),
    "...ij,...jk": lambda t, w: (t, t.transpose(2, 3)),  # implicit output: ...ik
    " bcn , bdn -> bcd ": lambda t, w: (t.flatten(2), t.flatten(2).relu()),
}


class Einsum(nn.Module):
    def __init__(self, equation: str, as_list: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.weight = nn.Parameter(torch.randn(8, 5))
        self.equation, self.as_list = equation, as_list

    def forward(self, x):
        operands = EQUATIONS[self.equation](self.conv(x), self.weight)
        if self.as_list:
            return torch.einsum(self.equation, list(operands)).flatten(1)
        return torch.einsum(self.equation, *operands).flatten(1)


@pytest.mark.parametrize("equation", list(EQUATIONS))
def test_einsum_through_from_torch_equals_the_module_in_float64(equation):
    net = Einsum(equation, as_list=equation.startswith(" ")).eval()
    graph = from_torch(net, X)
    result = simulate(graph, X, "systolic-32x32-ws", keep_outputs=True)
    assert rel_err(result.output, float64_output(net, X)) < 1e-6
    kinds = {type(n.op).__name__ for n in graph.nodes}
    two_computed = equation.count(",") == 1 and "c,cd" not in equation \
        and "c,dc" not in equation
    assert ("MatMul" in kinds) == two_computed


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("equation", ["bhqd,bhkd->bhqk", "bchw->bc", "bhwc,cd->bhwd",
                                      "b...w,b...w->b..."])
def test_einsum_through_onnx_equals_onnxruntime(equation, exporter, tmp_path):
    path = export_onnx(Einsum(equation).eval(), X, tmp_path / "e.onnx", exporter)
    assert "Einsum" in {n.op_type for n in onnx.load(str(path)).graph.node}
    want = onnxruntime_output(path, X)
    assert rel_err(simulate(from_onnx(path), X).output, want) < 1e-6


def test_attention_scores_cost_as_the_matmul_they_are():
    """bcn,bcm->bnm: N x N outputs of K = C products and C - 1 sums each."""
    graph = from_torch(Einsum("bcn,bcm->bnm").eval(), X)
    layers = {s.name: s for s in simulate(graph, X).layers}
    (matmul,) = [n.name for n in graph.nodes if type(n.op).__name__ == "MatMul"]
    assert layers[matmul].vector_ops == 2 * 30 * 30 * (2 * 8 - 1)


class Refused(nn.Module):
    def __init__(self, fn):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.fn = fn

    def forward(self, x):
        return self.fn(self.conv(x), self.weight)


@pytest.mark.parametrize("fn, why", [
    (lambda t, w: torch.einsum("bcii->bci", t[..., :5, :]),
     r"a label repeated in one operand \(a diagonal\)"),
    (lambda t, w: torch.einsum("bchw,bchw,bchw->bchw", t, t, t),
     r"einsum of one or two computed tensors"),
    (lambda t, w: torch.einsum("bchw->cbhw", t).flatten(1).sum(0, keepdim=True),
     r"moves the batch axis 'b': the batch axis stays first"),
    (lambda t, w: torch.einsum("bchw,bdhw->hcd", t, t),
     r"do not share their first label: the batch axis stays first"),
    (lambda t, w: torch.einsum("cd,bchw->bdhw", w, t),
     r"by a constant: the IR takes a computed tensor by a constant matrix over its last axis"),
])
def test_einsum_the_ir_cannot_express_is_refused_naming_why(fn, why):
    with pytest.raises(ModelError, match=r"torch\.einsum x1 \(node 'einsum': .*" + why):
        from_torch(Refused(fn).eval(), X)
