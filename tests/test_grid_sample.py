"""Sampling a map at a grid of points (``ops.GridSample``, ``F.grid_sample``, ONNX
``GridSample``): the op against PyTorch's float32 kernel on every mode, padding and corner
alignment, with points outside the map; an optical-flow warp (features sampled at each
pixel moved by a flow the network computes), a fixed warp (a constant grid) and a spatial
transformer (``F.affine_grid`` of a theta the network computes) through ``from_torch``
against the module in float64 and through torch's ONNX exporters against onnxruntime;
what the IR does not sample refused by name."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from strategies import (  # noqa: E402
    assert_runs_as_module,
    export_onnx,
    onnxruntime_output,
    photo,
    rel_err,
)

from npusim import ops, simulate  # noqa: E402
from npusim.errors import LayerError, ModelError  # noqa: E402
from npusim.frontends.onnx_import import from_onnx  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional
MODES, PADDINGS = ["bilinear", "nearest"], ["zeros", "border", "reflection"]
# PyTorch's vectorised CPU kernel fuses its multiply-adds where the CPU has FMA; the op
# rounds as it does there
FUSED = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def grid(n, ho, wo, seed, reach=1.3) -> np.ndarray:
    """Random points, some past the map's edges (|x| > 1), the corners and centre among
    them."""
    g = np.random.default_rng(seed).uniform(-reach, reach, (n, ho, wo, 2)).astype(np.float32)
    g[0, 0, 0], g[0, 0, 1], g[0, 1, 0] = (-1, -1), (1, 1), (0, 0)
    return g


# docs/ops.md's cost rule, written out: per output pixel its point (coordinates, rounded or
# floored, and bilinear's 4 weights) and its padding; per output element its taps
POINT_OPS, PADDING_OPS = {"bilinear": 14, "nearest": 6}, {"zeros": 0, "border": 4,
                                                           "reflection": 16}
TAP_OPS = {"bilinear": 7, "nearest": 1}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("shape, out", [((2, 5, 7, 9), (6, 8)), ((1, 3, 16, 16), (16, 16)),
                                        ((2, 4, 1, 1), (3, 3))])
def test_grid_sample_is_pytorchs(mode, padding, align, shape, out):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    g = grid(shape[0], *out, seed=2)
    got = ops.GridSample(mode, padding, align)(x, g)
    want = F.grid_sample(torch.from_numpy(x), torch.from_numpy(g), mode=mode,
                         padding_mode=padding, align_corners=align).numpy()
    assert got.dtype == np.float32 and got.shape == want.shape
    if FUSED or mode == "nearest":
        assert np.array_equal(got, want)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(x).max()
    op = ops.GridSample(mode, padding, align)
    assert op.out_shape([shape, g.shape], "s") == want.shape
    pixels = shape[0] * out[0] * out[1]
    assert op.vector_ops([shape, g.shape], want.shape) == (
        pixels * (POINT_OPS[mode] + PADDING_OPS[padding]) + want.size * TAP_OPS[mode])


def test_a_constant_grid_of_one_image_samples_every_image():
    x = photo((3, 2, 6, 7))
    g = grid(1, 4, 5, seed=3)
    got = ops.GridSample("bilinear", "border", False, g)(x)
    want = F.grid_sample(torch.from_numpy(x), torch.from_numpy(g).expand(3, -1, -1, -1),
                         padding_mode="border", align_corners=False).numpy()
    assert np.abs(got - want).max() <= 1e-6


@pytest.mark.parametrize("op, shapes, why", [
    (ops.GridSample("bicubic"), [(1, 2, 5, 5), (1, 3, 3, 2)], "GridSample mode 'bicubic', "),
    (ops.GridSample(padding="wrap"), [(1, 2, 5, 5), (1, 3, 3, 2)],
     "GridSample mode 'bilinear', padding 'wrap': modes bilinear, nearest; paddings zeros, "
     "border, reflection"),
    (ops.GridSample(), [(1, 2, 5, 5), (1, 3, 3, 3)], r"GridSample grid of shape \(1, 3, 3, 3\) "
                                                     r"for an input of shape \(1, 2, 5, 5\): "
                                                     r"must be N x Ho x Wo x 2"),
    (ops.GridSample(), [(2, 2, 5, 5), (1, 3, 3, 2)], r"GridSample grid of shape \(1, 3, 3, 2\)"),
])
def test_a_grid_sample_it_cannot_take_is_refused_naming_the_node(op, shapes, why):
    with pytest.raises(LayerError, match=f"warp: {why}"):
        op.out_shape(shapes, "warp")


class FlowWarp(nn.Module):
    """A flow estimated from the image moves each pixel of the features, which are sampled
    there (bilinear, zeros outside), as optical-flow networks warp one frame's features
    toward the other's."""

    def __init__(self, mode="bilinear", padding="zeros", align=False):
        super().__init__()
        torch.manual_seed(4)
        self.features, self.flow = nn.Conv2d(3, 6, 3, padding=1), nn.Conv2d(3, 2, 5, padding=2)
        self.head = nn.Conv2d(6, 4, 3, padding=1)
        self.sampling = dict(mode=mode, padding_mode=padding, align_corners=align)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, 12), torch.linspace(-1, 1, 16),
                                indexing="ij")
        self.register_buffer("base", torch.stack([xs, ys], -1)[None])

    def forward(self, x):
        moved = self.base + torch.tanh(self.flow(x)).permute(0, 2, 3, 1) * 0.3
        return self.head(F.grid_sample(self.features(x), moved, **self.sampling))


class FixedWarp(nn.Module):
    """A constant grid (a lens undistortion map): the same sampling for both images."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.conv, self.head = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 2, 1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, 10), torch.linspace(-1, 1, 14),
                                indexing="ij")
        radius = xs**2 + ys**2
        undistort = torch.stack([xs, ys], -1) * (1 + 0.2 * radius[..., None])
        self.register_buffer("grid", undistort.expand(2, -1, -1, -1).contiguous())

    def forward(self, x):
        return self.head(F.grid_sample(self.conv(x), self.grid, padding_mode="reflection",
                                       align_corners=True))


class SpatialTransformer(nn.Module):
    """A localisation net's theta (near the identity) turns the image's sampling grid
    (``F.affine_grid``) before the classifier's conv."""

    def __init__(self, align=False):
        super().__init__()
        torch.manual_seed(6)
        self.align = align
        self.loc, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 6)
        self.head = nn.Conv2d(3, 4, 3)
        with torch.no_grad():
            self.fc.weight.mul_(0.3)
            self.fc.bias.copy_(torch.tensor([0.9, 0.2, 0.1, -0.1, 1.1, 0.0]))

    def forward(self, x):
        theta = self.fc(F.adaptive_avg_pool2d(torch.relu(self.loc(x)), 1).flatten(1))
        grid = F.affine_grid(theta.view(-1, 2, 3), x.size(), align_corners=self.align)
        return self.head(F.grid_sample(x, grid, align_corners=self.align))


X = photo((2, 3, 12, 16))
NETS = {"flow bilinear": lambda: FlowWarp(), "flow nearest border": lambda: FlowWarp(
    "nearest", "border", True), "fixed reflection": FixedWarp,
    "spatial transformer": SpatialTransformer,
    "spatial transformer aligned": lambda: SpatialTransformer(True)}


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("arch", ["systolic-32x32-ws", "sparse-pairs-32x32", "input-reuse-1024"])
def test_a_warp_through_from_torch_equals_the_module_in_float64(name, arch):
    net = NETS[name]().eval()
    graph = from_torch(net, X)
    samples = [n.op for n in graph.nodes if isinstance(n.op, ops.GridSample)]
    assert len(samples) == 1 and (samples[0].grid is not None) == name.startswith("fixed")
    if "nearest" in name:  # a point rounds to another pixel where float noise moves it
        result = simulate(graph, X, arch)
        assert rel_err(result.output, net(torch.from_numpy(X)).detach().numpy()) < 1e-5
    else:
        assert_runs_as_module(graph, net, X, arch, 1e-5)


@pytest.mark.parametrize("name, exporter", [
    ("flow bilinear", "dynamo"), ("flow bilinear", "torchscript"),
    ("fixed reflection", "dynamo"), ("fixed reflection", "torchscript"),
    ("spatial transformer", "dynamo"),  # TorchScript's opset 17 has no affine grid
])
def test_a_warp_through_onnx_equals_onnxruntime(name, exporter, tmp_path):
    net = NETS[name]().eval()
    path = export_onnx(net, X, tmp_path / "warp.onnx", exporter)
    graph = from_onnx(path)
    assert sum(isinstance(n.op, ops.GridSample) for n in graph.nodes) == 1
    assert rel_err(simulate(graph, X, "systolic-32x32-ws").output,
                   onnxruntime_output(path, X)) < 1e-5


class Bicubic(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 3, padding=1)

    def forward(self, x):
        return self.conv(F.grid_sample(x, self.conv(x).permute(0, 2, 3, 1).tanh(),
                                       mode="bicubic", align_corners=False))


def test_a_volume_affine_grid_is_refused_naming_its_shapes():
    class Volume(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 12, 1)

        def forward(self, x):
            theta = self.conv(x).mean((2, 3)).view(-1, 3, 4)
            return F.affine_grid(theta, [2, 1, 4, 5, 6], align_corners=False).flatten(2)

    with pytest.raises(ModelError, match=r"affine_grid x1 \(node 'affine_grid': theta of shape "
                                         r"\(2, 3, 4\), size \(2, 1, 4, 5, 6\): the IR makes "
                                         r"2-D grids"):
        from_torch(Volume().eval(), X)


def test_bicubic_sampling_is_refused_naming_the_modes(tmp_path):
    with pytest.raises(ModelError, match=r"grid_sample x1 \(node 'grid_sample': "
                                         r"mode='bicubic': the IR samples bilinear or nearest"):
        from_torch(Bicubic().eval(), X)
    path = export_onnx(Bicubic().eval(), X, tmp_path / "bicubic.onnx", "torchscript")
    with pytest.raises(ModelError, match=r"GridSample.*mode='bicubic': the IR samples "
                                         r"bilinear \(linear\) or nearest"):
        from_onnx(path)
