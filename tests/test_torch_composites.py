"""PyTorch functions that are several IR ops (``frontends.torch_composites``): softsign,
tanhshrink, logsigmoid, softmin, GLU, expm1 / log1p / log2 / log10 / exp2, frac, lerp,
addcmul, diff, roll and rot90, as modules, functions and methods, each after a conv on a
photo through ``from_torch`` against the module in float64 (and the torch mirror's
node-by-node check); what they cannot express refused, naming why."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from strategies import float64_output, photo, rel_err  # noqa: E402

from npusim import simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402
from npusim.report.check import check  # noqa: E402

nn, F = torch.nn, torch.nn.functional
X = photo((2, 3, 9, 9))
X[1] = X[1, :, ::-1]

COMPOSITES = {
    "nn.Softsign": nn.Softsign(), "F.softsign": F.softsign,
    "nn.Tanhshrink": nn.Tanhshrink(), "F.tanhshrink": F.tanhshrink,
    "nn.LogSigmoid": nn.LogSigmoid(),
    "F.logsigmoid far out": lambda t: F.logsigmoid(t * 200),  # where log(sigmoid) underflows
    "nn.Softmin": nn.Softmin(1), "F.softmin": lambda t: F.softmin(t, dim=2),
    "nn.GLU": nn.GLU(1), "F.glu": lambda t: F.glu(t, -3),
    "torch.expm1": torch.expm1, "Tensor.expm1": lambda t: t.expm1(),
    "torch.log1p": lambda t: torch.log1p(t.abs()), "torch.log2": lambda t: (t.abs() + 1).log2(),
    "torch.log10": lambda t: torch.log10(t.abs() + 1), "torch.exp2": torch.exp2,
    "torch.roll": lambda t: torch.roll(t, 2, 3), "Tensor.roll": lambda t: t.roll((1, -2), (2, 3)),
    "roll of the batch": lambda t: torch.roll(t, 1, 0),
    "rot90 k=1": lambda t: torch.rot90(t, 1, (2, 3)), "rot90 k=2": lambda t: t.rot90(2, [2, 3]),
    "rot90 k=-1": lambda t: torch.rot90(t[..., :7], -1, (2, 3)),
    "rot90 k=4": lambda t: torch.rot90(t, 4, (3, 2)),
    "torch.frac": lambda t: torch.frac(t * 3), "Tensor.frac": lambda t: (t * 3).frac(),
    "torch.lerp near": lambda t: torch.lerp(t, t.flip(3), 0.25),
    "Tensor.lerp far": lambda t: t.lerp(t.relu(), 0.75),
    "torch.addcmul": lambda t: torch.addcmul(t, t.flip(2), t.sigmoid(), value=0.5),
    "Tensor.addcmul": lambda t: t.addcmul(t, t),
    "torch.diff": lambda t: torch.diff(t, dim=3), "Tensor.diff n=2": lambda t: t.diff(2, 2),
}


class After(nn.Module):
    def __init__(self, fn):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.conv(x))


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_a_composite_through_from_torch_equals_the_module_in_float64(name):
    net = After(COMPOSITES[name]).eval()
    graph = from_torch(net, X)
    result = simulate(graph, X, "systolic-32x32-ws", keep_outputs=True)
    want = float64_output(net, X)
    assert np.isfinite(want).all()
    assert rel_err(result.output, want) < 1e-6
    assert check(graph, X, result).passed


@pytest.mark.parametrize("fn, why", [
    (lambda t: torch.rot90(t, 1, (0, 2)), r"rotates in axes 0 and 2: it would move the batch "
                                          r"axis"),
    (lambda t: torch.roll(t, 3), r"rolls the flattened tensor: give dims"),
    (lambda t: torch.diff(t, dim=3, prepend=t), r"prepend / append"),
])
def test_what_a_composite_cannot_express_is_refused_naming_why(fn, why):
    with pytest.raises(ModelError, match=why):
        from_torch(After(fn).eval(), X)
