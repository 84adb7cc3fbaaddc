"""Quantisation-aware-training models (torch.ao.quantization, eager and FX mode) imported by
``from_torch`` and judged by PyTorch's own run of the QAT model, on real photographs.

Each network is trained for a few QAT steps on photos (its observers set its scales), then
imported with its observers still on; npusim's run of the graph must give PyTorch's output
within one step of the output's grid (a value computed in another order can land on the
other side of a rounding step), the model must be left as it was (scales, observer flags),
and the graph must hold one FakeQuant per activation fake-quantize module PyTorch's own
forward calls (counted by hooks on the torch modules, not from the importer).
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.ao.quantization as tq  # noqa: E402
from strategies import photo  # noqa: E402
from torch import nn  # noqa: E402
from torch.ao.quantization import quantize_fx  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends import images  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

SHAPE = (1, 3, 32, 32)
PHOTOS = ("astronaut", "coffee", "flower", "grace_hopper")  # calibration; tested on chelsea

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::UserWarning", "ignore::FutureWarning")


class Eager(nn.Module):
    """A small eager-mode QAT network: stubs, conv-bn-relu, depthwise conv-relu, a plain
    conv, a residual sum through FloatFunctional, pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.conv, self.bn, self.relu = nn.Conv2d(3, 16, 3, 2, 1, bias=False), \
            nn.BatchNorm2d(16, momentum=None), nn.ReLU()
        self.dw, self.relu2 = nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU()
        self.pw = nn.Conv2d(16, 16, 1)
        self.skip = nn.quantized.FloatFunctional()
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(16, 10)

    def forward(self, x):
        y = self.relu(self.bn(self.conv(self.quant(x))))
        z = self.skip.add(self.pw(self.relu2(self.dw(y))), y)
        return self.dequant(self.fc(torch.flatten(self.pool(z), 1)))


class Plain(nn.Module):
    """The float network FX mode prepares: functional ReLUs, a residual sum by ``+``."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(16, momentum=None)
        self.dw, self.bn2 = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), \
            nn.BatchNorm2d(16, momentum=None)
        self.pw, self.fc = nn.Conv2d(16, 16, 1), nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        z = self.pw(nn.functional.relu6(self.bn2(self.dw(y)))) + y
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(z, 1), 1))


def calibration() -> torch.Tensor:
    return torch.from_numpy(np.concatenate(
        [images.load_image(name, SHAPE[2:])[None] for name in PHOTOS]).astype(np.float32))


def trained(model: nn.Module) -> nn.Module:
    """``model`` after a few QAT steps on photos (observers and batch norms updated)."""
    x = calibration()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return model.eval()


def eager(qat: bool) -> nn.Module:
    """``Eager`` fused and prepared in eager mode: for QAT, or for post-training calibration."""
    torch.manual_seed(0)
    model = Eager().train(qat)
    model.qconfig = (tq.get_default_qat_qconfig if qat else tq.get_default_qconfig)("x86")
    fuse = tq.fuse_modules_qat if qat else tq.fuse_modules
    fuse(model, [["conv", "bn", "relu"], ["dw", "relu2"]], inplace=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (tq.prepare_qat if qat else tq.prepare)(model, inplace=True)
    return model


def eager_qat() -> nn.Module:
    return trained(eager(qat=True))


def fx_qat() -> nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = quantize_fx.prepare_qat_fx(Plain().train(),
                                           tq.get_default_qat_qconfig_mapping("x86"),
                                           (calibration(),))
    return trained(model)


def activation_quantizers_called(model: nn.Module, x: torch.Tensor) -> int:
    """How many times PyTorch's forward calls a fake-quantize module that is not a weight's."""
    calls = []
    handles = [m.register_forward_hook(lambda *_: calls.append(1))
               for name, m in model.named_modules()
               if isinstance(m, tq.FakeQuantizeBase) and "weight_fake_quant" not in name]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return len(calls)


@pytest.mark.parametrize("make", [eager_qat, fx_qat], ids=["eager", "fx"])
def test_qat_network_equals_pytorch_on_a_photo(make):
    model = make()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = photo(SHAPE)
    graph = from_torch(model, x)
    after = model.state_dict()
    assert all(torch.equal(state[k], after[k]) for k in state)  # scales, observers, flags
    assert any(int(m.observer_enabled[0]) for m in model.modules()
               if isinstance(m, tq.FakeQuantizeBase))  # switched back on
    model.apply(tq.disable_observer)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    quantized = [n for n in graph.nodes if isinstance(n.op, ops.FakeQuant)]
    assert len(quantized) == activation_quantizers_called(model, torch.from_numpy(x))
    step = float(quantized[-1].op.scale[0])  # the logits' grid
    for arch in ("systolic-32x32-ws", "group-tile-64mac"):
        out = simulate(graph, x, arch).output
        assert np.abs(out - ref).max() <= step * 1.001, arch


def test_fake_quantisation_off_passes_through():
    model = eager_qat()
    model.apply(tq.disable_fake_quant)
    model.apply(tq.disable_observer)
    x = photo(SHAPE)
    graph = from_torch(model, x)
    assert not any(isinstance(n.op, ops.FakeQuant) for n in graph.nodes)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    out = simulate(graph, x, "systolic-32x32-ws").output
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


def test_post_training_observers_are_refused_by_name():
    model = eager(qat=False)
    with pytest.raises(ModelError, match=r"post-training calibration") as e:
        from_torch(model, photo(SHAPE))
    assert "quant" in str(e.value) and "conv" in str(e.value)


def half_steps(scale: float, zero: float, lo: int, hi: int) -> np.ndarray:
    """The grid's points from ``lo`` to ``hi`` and every float32 within one ulp of half a
    step above each: where a divide by the scale and a multiply by its reciprocal can round
    apart."""
    s = np.float32(scale)
    points = ((np.arange(lo, hi + 1) - zero) * s).astype(np.float32)
    centre = ((np.arange(lo, hi + 1) - zero + 0.5) * s).astype(np.float32)
    return np.concatenate([points, np.nextafter(centre, np.float32(-np.inf)), centre,
                           np.nextafter(centre, np.float32(np.inf))])


@pytest.mark.parametrize(("kind", "per_channel"), [
    ("FakeQuantize", False), ("FakeQuantize", True),
    ("FusedMovingAvgObsFakeQuantize", False)])  # whose per-channel form takes axis 0 only
def test_fake_quant_rounds_as_pytorch_at_half_steps(kind, per_channel):
    """The imported op, and the PyTorch reference ``--check`` runs of it, equal the torch
    module bit for bit where a divide by the scale would round the other way."""
    from npusim.frontends.torch_qat import fake_quant_op
    from npusim.ir import GraphBuilder
    from npusim.torch_ref import to_torch

    observer = tq.MovingAveragePerChannelMinMaxObserver if per_channel \
        else tq.MovingAverageMinMaxObserver
    per = {"ch_axis": 1, "qscheme": torch.per_channel_affine} if per_channel \
        else {"qscheme": torch.per_tensor_affine}
    module = getattr(tq, kind)(observer=observer, quant_min=0, quant_max=255,
                               dtype=torch.quint8, **per)
    module(calibration() * 3.7 - 1.1)  # the observer sets the scales and zero points
    module.apply(tq.disable_observer)
    op = fake_quant_op(module)
    last = op.scale.size - 1  # per tensor: one scale for the three channels
    channels = [half_steps(op.scale[min(c, last)], op.zero_point[min(c, last)], 0, 255)
                for c in range(3)]
    x = np.stack(channels)[None, :, :, None].astype(np.float32)  # 1 x 3 x values x 1
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    scale, zero = op.along(op.scale, 4), op.along(op.zero_point, 4)
    divided = (np.clip(np.rint(x / scale) + zero, 0, 255) - zero) * scale
    assert (divided != want).any()  # the values tell the two roundings apart
    np.testing.assert_array_equal(op(x), want)
    g = GraphBuilder("fq", x.shape)
    g.append(op, g.input)
    with torch.no_grad():
        reference = to_torch(g.build())(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(reference, want)
