"""from_torch / from_factory judged by PyTorch itself, on real photographs.

Every imported network is run by ``npusim.simulate`` and its output compared with
the module's own output (max error under 1e-4 of max |reference|). Refusals are
pinned by message.
"""

import collections
import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from strategies import float64_output, photo, rel_err  # noqa: E402
from torch import nn  # noqa: E402

from npusim import ops, simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends import load_model, load_model_and_module, zoo  # noqa: E402
from npusim.frontends.torch_import import from_factory, from_torch  # noqa: E402

NETS = Path(__file__).parent / "data" / "import" / "nets.py"
BLOCKS = Path(__file__).parent / "data" / "import" / "modern_blocks.py"
HEAVY = {"vgg16", "resnet50"}


def load_nets():
    spec = importlib.util.spec_from_file_location("import_nets", NETS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_output(module, x) -> np.ndarray:
    with torch.no_grad():
        return module.eval()(torch.from_numpy(x)).numpy()


def check(module, x, graph=None):
    """Import (unless given), simulate, compare with PyTorch; returns the graph."""
    graph = graph or from_torch(module, x)
    out = simulate(graph, x).output
    ref = torch_output(module, x)
    assert out.shape == ref.shape
    assert rel_err(out, ref) < 1e-4
    return graph


def op_kinds(graph) -> list[str]:
    return [type(n.op).__name__ for n in graph.nodes]


# ---- networks with the awkward cases ----------------------------------------------------


@pytest.mark.parametrize("factory", ["awkward", "functional"])
def test_awkward_networks_equal_pytorch_on_a_photo(factory):
    nets = load_nets()
    x = photo(nets.INPUT_SHAPE)
    graph = from_factory(f"{NETS}:{factory}", input_shape=x.shape)
    check(getattr(nets, factory)(), x, graph)
    assert "BatchNorm" not in op_kinds(graph)  # folded into the conv before it
    assert graph.name == factory


def test_awkward_layers_keep_their_geometry():
    nets = load_nets()
    graph = from_torch(nets.awkward(), photo(nets.INPUT_SHAPE))
    grouped = graph.layers["grouped"]
    assert (grouped.stride, grouped.dilation, grouped.groups) == ((2, 2), (2, 2), 3)
    assert grouped.padding == (0, 1, 1, 2)  # ZeroPad2d((1, 2, 0, 1)) absorbed: t, b, l, r
    assert graph.layers["depthwise"].is_depthwise
    assert graph.layers["same_even"].padding == (1, 2, 1, 2)
    assert graph.layers["same_dilated"].padding == (1, 2, 1, 2)
    assert graph.layers["point"].stride == (2, 2) and graph.layers["point"].R == 1


CONV_CASES = [
    dict(stride=2, padding=1),
    dict(stride=(2, 1), padding=(0, 2), dilation=(1, 3)),
    dict(padding="same", dilation=2),
    dict(padding="valid", bias=False),
    dict(groups=4, stride=3, padding=2, dilation=2),
    dict(groups=8, padding=1),
]


@pytest.mark.parametrize("as_module", [True, False], ids=["module", "functional"])
@pytest.mark.parametrize("kernel", [1, 2, 3, (4, 3)])
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv2d_parameters_equal_pytorch(kernel, case, as_module):
    torch.manual_seed(0)
    conv = nn.Conv2d(8, 16 if case.get("groups", 1) != 8 else 8, kernel, **case)
    # a root module is traced through (its forward calls F.conv2d); inside a Sequential
    # it stays one nn.Conv2d call
    graph = check(nn.Sequential(conv) if as_module else conv, photo((2, 8, 15, 14)))
    assert graph.input_shape == (2, 8, 15, 14)


@pytest.mark.parametrize("pool", [
    nn.MaxPool2d(3, 2, ceil_mode=True),
    nn.MaxPool2d((3, 2), (2, 1), padding=1, ceil_mode=True),
    nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=True),
    nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
    nn.AvgPool2d(2),
    nn.AdaptiveAvgPool2d((5, 2)),
    nn.AdaptiveAvgPool2d(1),
    nn.MaxPool2d(3, 2, 1, dilation=2),
    nn.MaxPool2d((2, 3), (2, 1), (1, 0), dilation=(3, 2), ceil_mode=True),
    nn.MaxPool2d(2, 2, dilation=2, ceil_mode=True),
], ids=repr)
def test_pools_equal_pytorch(pool):
    check(pool, photo((1, 3, 15, 14)))


@pytest.mark.parametrize("make", [
    lambda x: F.interpolate(x, scale_factor=3, mode="nearest"),
    lambda x: F.interpolate(x, size=(11, 9), mode="nearest"),
    lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
    lambda x: F.interpolate(x, size=(11, 9), mode="bilinear", align_corners=False),
    lambda x: F.interpolate(x, size=(11, 9), mode="bilinear", align_corners=True),
    lambda x: F.interpolate(x, scale_factor=(2, 3), mode="bilinear", align_corners=True),
])
def test_interpolate_equals_pytorch(make):
    graph = check(Lambda(make), photo((1, 3, 5, 4)))
    assert op_kinds(graph) == ["Upsample"]


class Lambda(nn.Module):
    """A module whose forward is a given function (traced by fx like any forward)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class ConvPlusConstants(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.shift = nn.Parameter(torch.randn(1, 4, 1, 1))

    def forward(self, x):
        return 1.5 + self.conv(x) + self.shift


def test_indexing_that_keeps_the_whole_tensor_passes_through():
    graph = check(Lambda(lambda x: F.relu(x)[:, :, :9, ...][..., 0:]), photo((1, 3, 9, 9)))
    assert op_kinds(graph) == ["Relu"]


def test_constants_added_per_channel_fold_into_the_conv():
    graph = check(ConvPlusConstants(), photo((1, 3, 9, 9)))
    assert op_kinds(graph) == ["Conv"]


def test_train_mode_is_restored_and_batchnorm_uses_running_stats():
    nets = load_nets()
    net = nets.awkward().train()
    x = photo(nets.INPUT_SHAPE)
    graph = from_torch(net, x)
    assert net.training
    check(net, x, graph)  # check() compares in eval mode, as imported


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in zoo.built_names()])
def test_zoo_model_through_pytorch_equals_pytorch(name):
    from npusim.torch_ref import to_torch

    graph = zoo.build(name)
    x = zoo.input_for(name)
    imported = check(to_torch(graph), x)
    assert [layer.describe() for layer in imported.layers.values()] == \
        [layer.describe() for layer in graph.layers.values()]


# ---- refusals ---------------------------------------------------------------------------


class Unsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.act = nn.CrossMapLRN2d(3)

    def forward(self, x):
        return torch.triu(self.act(self.conv(x)))[:, [0, 2]]


def test_every_unsupported_op_is_listed_with_its_node_and_the_supported_ones():
    with pytest.raises(ModelError) as err:
        from_torch(Unsupported(), photo((1, 3, 8, 8)))
    text = str(err.value)
    assert text.startswith("Unsupported: cannot import: unsupported ops: nn.CrossMapLRN2d x1 "
                           "('act'), torch.triu x1 ('triu'); unsupported parameters: "
                           "operator.getitem x1 (node 'getitem': indexing (1, 4, 6, 6) with "
                           "(slice(None, None, None), [0, 2]): the IR indexes with "
                           "start:stop:step slices")
    assert "Supported: " in text and "nn.Conv2d" in text and "F.interpolate" in text


def refusal_cases():
    x4 = photo((1, 3, 9, 9))
    return [
        (nn.Sequential(nn.Conv2d(3, 4, 3, padding="same", padding_mode="circular")), x4,
         r"nn.Conv2d x1 \(node '_0': padding_mode='circular' with padding='same': give the "
         "padding as integers"),
        (Lambda(lambda x: F.dropout(x, 0.2)), x4, r"training=True drops at random"),
        (Lambda(lambda x: x.permute(2, 0, 1, 3).reshape(-1)), x4,
         r"returns a tensor of shape \(243,\), a batch of one: an output's first axis must be "
         r"the batch or one other axis, not several joined"),
        (nn.MaxPool2d(2, return_indices=True), x4, r"return_indices=True: the IR's pooling "
                                                   r"returns values only"),
        (Lambda(lambda x: x[:, :, 10:]), x4, r"operator.getitem x1 \(node 'getitem': takes "
                                             r"nothing of axis 2 of \(1, 3, 9, 9\)"),
        (Lambda(lambda x: F.pad(x, (-1, 1, 0, 0))), x4, r"pad=\(-1, 1, 0, 0\), mode='constant': "
                                                     r"only constant, reflect, replicate or "
                                                     r"circular, non-negative padding"),
        (Lambda(lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True)),
         x4, r"mode='bilinear', antialias: the IR resamples 'nearest', 'bilinear', 'bicubic' "
             r"\(no antialias\) or 'area'"),
        (Lambda(lambda x: torch.softmax(x, 0)), x4, r"softmax over the batch axis"),
        (Lambda(lambda x: torch.add(x, x, alpha=2)), x4, r"alpha=2: only a plain sum"),
        (nn.Sequential(nn.BatchNorm2d(3, track_running_stats=False)), x4,
         r"normalises by batch statistics"),
    ]


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("scale, recompute", [(1.7, None), ((2.5, 0.6), None), (1.7, True)])
def test_fractional_interpolate_scales_import_and_agree(mode, scale, recompute):
    module = Lambda(lambda x: F.interpolate(x, scale_factor=scale, mode=mode,
                                            recompute_scale_factor=recompute))
    x = photo((1, 3, 9, 11))
    graph = from_torch(module, x)
    assert rel_err(simulate(graph, x).output, torch_output(module, x)) < 1e-5


@pytest.mark.parametrize("size, shape, op", [
    (4, (1, 3, 9, 9), "AdaptivePool"),  # windows of 3 and 4 pixels, overlapping
    ((7, 7), (2, 3, 10, 13), "AdaptivePool"),  # a classifier's pool off its usual input
    ((12, 5), (1, 3, 8, 9), "AdaptivePool"),  # more rows out than in: rows repeated
    (3, (1, 3, 9, 12), "Pool"),  # equal windows
])
@pytest.mark.parametrize("module", [nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d])
def test_adaptive_pools_import_with_any_output_size(module, size, shape, op):
    """PyTorch's adaptive windows (floor(i H / P) to ceil((i + 1) H / P)) whatever the
    sizes, mean or max; equal windows stay the plain pools."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), module(size))
    graph = check(net, photo(shape))
    assert op_kinds(graph)[-1] == op


@pytest.mark.parametrize("act, kind", [
    (nn.Mish(), "Mish"), (nn.Softplus(), "Softplus"), (nn.Softplus(0.5, 3.0), "Softplus"),
    (nn.ELU(0.4), "Elu"), (Lambda(F.mish), "Mish"), (Lambda(lambda x: F.elu(x, 2.0)), "Elu"),
    (Lambda(lambda x: F.softplus(x, beta=3.0)), "Softplus"),
])
def test_softplus_mish_and_elu_import(act, kind):
    """YOLOv4's Mish and its softplus, and ELU, as modules and functions, parameters kept:
    equal to PyTorch on a photo."""
    torch.manual_seed(0)
    graph = check(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), act), photo((1, 3, 12, 10)))
    assert op_kinds(graph)[-1] == kind


@pytest.mark.parametrize("shuffle, before, after", [
    (nn.PixelShuffle(2), 12, 3), (nn.PixelShuffle(3), 18, 2),
    (Lambda(lambda x: F.pixel_shuffle(x, 2)), 8, 2),
    (nn.PixelUnshuffle(2), 4, 16), (Lambda(lambda x: torch.pixel_unshuffle(x, 2)), 3, 12),
])
def test_pixel_shuffle_and_unshuffle_import(shuffle, before, after):
    """Sub-pixel upsampling (ESPCN's head) and its inverse, modules and functions: a reshape,
    a transpose and a reshape between two convs, equal to PyTorch on a photo."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, before, 3, padding=1), shuffle, nn.Conv2d(after, 2, 1))
    graph = check(net, photo((2, 3, 8, 10)))
    assert op_kinds(graph)[1:4] == ["Reshape", "Transpose", "Reshape"]


class SqueezeExcite(nn.Module):
    """The classic SE block: pooled, viewed as N x C, two linears, viewed back and
    ``expand_as`` the map before the multiply."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Sequential(nn.Linear(8, 2), nn.ReLU(), nn.Linear(2, 8), nn.Sigmoid())

    def forward(self, x):
        x = self.conv(x)
        b, c = x.shape[:2]
        y = self.fc(F.adaptive_avg_pool2d(x, 1).view(b, c)).view(b, c, 1, 1)
        return x * y.expand_as(x) + y.expand(b, c, x.shape[2], x.shape[3])


class SelectiveKernel(nn.Module):
    """SKNet / ResNeSt's attention over branches: ``torch.stack`` of two convs on a new
    axis, ``torch.sum`` over it, a softmax across the branches, a weighted ``x.sum``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(3, 8, 3, padding=2, dilation=2)
        self.fc = nn.Conv2d(8, 4, 1)
        self.fcs = nn.ModuleList([nn.Conv2d(4, 8, 1) for _ in range(2)])

    def forward(self, x):
        feats = torch.stack([self.a(x), self.b(x)], dim=1)
        z = self.fc(torch.sum(feats, dim=1).mean((2, 3), keepdim=True))
        att = torch.softmax(torch.stack([f(z) for f in self.fcs], dim=1), dim=1)
        return (feats * att).sum(dim=1) + feats.sum(1).sum((2, 3), keepdim=True)


@pytest.mark.parametrize("net, kinds", [(SqueezeExcite, {"Broadcast"}),
                                        (SelectiveKernel, {"Reshape", "Concat", "Reduce"})])
def test_attention_blocks_with_expand_stack_and_sum_import(net, kinds):
    """The blocks of SENet's, SKNet's and ResNeSt's own code: equal to PyTorch, batch 2."""
    graph = check(net().eval(), photo((2, 3, 12, 10)))
    assert kinds <= set(op_kinds(graph))


class SpatialAttention(nn.Module):
    """CBAM's spatial attention: the max over channels (``torch.max(x, 1, keepdim=True)[0]``)
    beside their mean, a 7x7 conv, a sigmoid gate; and the other forms of max: ``.values``,
    of two tensors, over everything."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.other = nn.Conv2d(3, 8, 3, padding=1)
        self.spatial = nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x):
        y = self.conv(x)
        top, _ = torch.max(y, dim=1, keepdim=True)
        gate = torch.sigmoid(self.spatial(torch.cat([y.mean(1, keepdim=True), top], dim=1)))
        z = torch.max(y * gate, self.other(x))
        return z + y.max(1).values.unsqueeze(1) + y.max()


def test_max_along_an_axis_gives_its_values_and_refuses_its_indices():
    graph = check(SpatialAttention().eval(), photo((2, 3, 12, 10)))
    assert "Reduce" in op_kinds(graph) and "Elementwise" in op_kinds(graph)
    with pytest.raises(ModelError, match=r"reads the indices of a max or min along an axis: the IR "
                                         r"computes its values only"):
        from_torch(Lambda(lambda x: x + x.max(1, keepdim=True)[1]), photo((1, 3, 6, 5)))


@pytest.mark.parametrize("fn, kinds", [
    (lambda x: F.normalize(x), ["Reduce", "Clip", "Elementwise"]),
    (lambda x: F.normalize(x, p=1, dim=2, eps=1e-3), ["Reduce", "Clip", "Elementwise"]),
    (lambda x: x / x.norm(dim=1, keepdim=True) + torch.norm(x, p=1, dim=(2, 3), keepdim=True),
     ["Reduce", "Elementwise", "Reduce", "Elementwise"]),
    (lambda x: torch.linalg.vector_norm(x, 1, dim=1, keepdim=True)
     + torch.linalg.norm(x, dim=(2, 3), keepdim=True), ["Reduce", "Reduce", "Elementwise"]),
    (lambda x: x + torch.norm(x) + torch.linalg.vector_norm(x), None),
    (lambda x: torch.norm(x, p=3, dim=1, keepdim=True) + x.norm(0.5, dim=(2, 3), keepdim=True),
     ["Abs", "Elementwise", "Reduce", "Elementwise"] * 2 + ["Elementwise"]),
    (lambda x: torch.linalg.vector_norm(x, float("inf"), dim=1, keepdim=True)
     + torch.linalg.norm(x, -float("inf"), dim=2, keepdim=True),
     ["Abs", "Reduce", "Abs", "Reduce", "Elementwise"]),
    (lambda x: F.normalize(x, p=3) + F.normalize(x, p=float("inf"), dim=3), None),
    (lambda x: torch.amin(x, (2, 3), keepdim=True) + x.amin(1, keepdim=True) + x, None),
    (lambda x: torch.min(x, 1, keepdim=True)[0] + x.min(dim=3, keepdim=True).values
     + torch.min(x, x * 0.5) + x.min(), None),
])
def test_norms_normalize_and_min_import(fn, kinds):
    """An embedding head's ``F.normalize`` (the norm, at least eps, divided by), the norms of
    ``torch.norm``, ``x.norm`` and ``torch.linalg`` (L1, L2, any other order p as
    (sum |x|^p)^(1/p), the largest and least magnitude), and every form of min, on a conv's
    signed map: equal to PyTorch."""
    torch.manual_seed(0)
    graph = check(nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), Lambda(fn)),
                  photo((2, 3, 9, 8)))
    if kinds:
        assert op_kinds(graph)[1:] == kinds


@pytest.mark.parametrize("fn, why", [
    (lambda x: torch.norm(x, p=0, dim=1), r"p=0: the IR takes vector norms of order p > 0, "
                                          r"inf, -inf or 'fro'"),
    (lambda x: F.normalize(x, p=-2.0), r"p=-2.0: the IR takes vector norms of order p > 0"),
    (lambda x: torch.linalg.norm(x, 2, dim=(2, 3)), r"ord=2 over \(2, 3\): a matrix norm"),
    (lambda x: x + x.min(1, keepdim=True)[1], r"reads the indices of a max or min"),
])
def test_other_norms_and_min_indices_are_refused_by_name(fn, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Lambda(fn), photo((1, 3, 6, 5)))


@pytest.mark.parametrize("shape", [(1, 3, 32, 32), (2, 3, 24, 40)])
def test_a_detection_heads_grid_from_shapes_is_a_constant(shape):
    """What forward computes from shapes alone (the grid of cell offsets of
    ``modern_blocks.DetectHead``) is a constant of the traced shape; the head equals PyTorch
    at each shape it is traced at (tests/test_modern_ops.py runs it through ONNX too)."""
    spec = importlib.util.spec_from_file_location("modern_blocks", BLOCKS)
    blocks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(blocks)
    check(blocks.detect_head(), photo(shape))


def test_tensors_made_like_the_input_are_constants():
    """``zeros_like``, ``ones_like``, ``full_like`` and ``x.new_*`` follow the input's shape,
    not its values."""
    check(Lambda(lambda x: x + torch.zeros_like(x) + x.new_ones(x.shape) * 0.5
                 + torch.full_like(x, 2.0) * x.new_full((1, 3, 1, 1), 0.25)),
          photo((1, 3, 6, 5)))


def test_a_number_taken_from_the_inputs_values_is_refused():
    """``x / x.max().item()`` would divide every input by the traced input's maximum: refused,
    and not offered to the fallback, which would fix it too."""
    with pytest.raises(ModelError, match=r"ops neither npusim nor its fallback can run: "
                                         r"operator.truediv x1 \(node 'truediv': it reads "
                                         r"item, a number taken from the input's values"):
        from_torch(Lambda(lambda x: x / x.abs().max().item()), photo((1, 3, 6, 5)))


@pytest.mark.parametrize("fn", [
    lambda x: x.float() + x.to(torch.float32) + x.to("cpu") + x.to(x) + x.cpu(),
    lambda x: x.clone() + torch.clone(x) + x.detach() + torch.detach(x),
    lambda x: x.type_as(x) + x.type(torch.float32) + x.to(dtype=torch.float32)
    + x.type("torch.FloatTensor"),
])
def test_float32_conversions_and_copies_pass_through(fn):
    """``.float()``, ``.to(...)``, ``.clone()``, ``.detach()``, ``.type_as`` of a float32
    tensor are the tensor: nothing is computed."""
    graph = check(nn.Sequential(nn.Conv2d(3, 4, 3), Lambda(fn)), photo((1, 3, 7, 6)))
    assert set(op_kinds(graph)[1:]) == {"Add"}


@pytest.mark.parametrize("fn, why", [
    (lambda x: x.to(torch.float16), r"converts to torch.float16: the IR computes in float32"),
    (lambda x: x.type(torch.float64), r"converts to torch.float64"),
    (lambda x: x.type("torch.HalfTensor"), r"converts to torch.HalfTensor"),
    (lambda x: x.half(), r"unsupported ops: Tensor.half x1"),
])
def test_conversions_to_another_type_are_refused(fn, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Lambda(fn), photo((1, 3, 6, 5)))


@pytest.mark.parametrize("fn, kind", [
    (Lambda(lambda x: F.log_softmax(x, 1) + torch.log_softmax(x, 2) + x.log_softmax(-1)),
     "Softmax"),
    (nn.LogSoftmax(dim=1), "Softmax"),
    (Lambda(lambda x: torch.erf(x) + x.erf()), "Erf"),
    (Lambda(lambda x: torch.square(x) + x.square() + torch.reciprocal(x.abs() + 1)
            + (x * x + 2).reciprocal()), "Elementwise"),
    (Lambda(lambda x: F.instance_norm(x)), "GroupNorm"),
    (nn.InstanceNorm2d(4, affine=True), "GroupNorm"),
])
def test_log_softmax_erf_square_reciprocal_and_instance_norm_import(fn, kind):
    """A classifier's log-probabilities, the error function, square and reciprocal, and a
    style-transfer network's instance norm (each image's channel by its own statistics):
    equal to PyTorch."""
    torch.manual_seed(0)
    if isinstance(fn, nn.InstanceNorm2d):
        with torch.no_grad():
            fn.weight.uniform_(0.5, 1.5)
            fn.bias.uniform_(-0.5, 0.5)
    graph = check(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), fn), photo((2, 3, 9, 8)))
    assert kind in op_kinds(graph)


@pytest.mark.parametrize("module", [
    nn.LocalResponseNorm(5, 1e-3, 0.75, 2.0), nn.LocalResponseNorm(4),
    Lambda(lambda x: F.local_response_norm(x, 3, alpha=0.01)),
    nn.ChannelShuffle(3), Lambda(lambda x: F.channel_shuffle(x, 2) + x)])
def test_local_response_norm_and_channel_shuffle_import(module):
    """AlexNet's and GoogLeNet's LRN (odd and even windows) and ShuffleNet's channel
    shuffle as a module and a function: equal to PyTorch."""
    torch.manual_seed(0)
    graph = check(nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), module), photo((2, 3, 9, 8)))
    assert "LocalResponseNorm" in op_kinds(graph) or "Transpose" in op_kinds(graph)


@pytest.mark.parametrize("pool", [
    nn.AvgPool2d(3, 2, 1, divisor_override=4),
    Lambda(lambda x: F.avg_pool2d(F.pad(x, (1, 1, 1, 1)), 2, divisor_override=3)),
    Lambda(lambda x: F.avg_pool2d(x, (2, 3), padding=1, count_include_pad=False,
                                  divisor_override=5))], ids=str)
def test_average_pools_of_a_divisor_override_divide_each_sum_by_it(pool):
    """``divisor_override`` d: each window's sum over d (padding counted, whatever
    ``count_include_pad`` says, as torch does it), against the module in float64."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), pool).eval()
    x = photo((2, 3, 12, 11))
    graph = from_torch(net, x)
    assert op_kinds(graph)[1:] == ["Pool", "BatchNorm"]
    assert rel_err(simulate(graph, x).output, float64_output(net, x)) < 1e-6


def test_a_divisor_override_with_ceil_mode_is_refused_naming_it():
    with pytest.raises(ModelError, match=r"divisor_override=2 with ceil_mode: the IR divides a "
                                         r"window past the input by its part"):
        from_torch(nn.AvgPool2d(2, ceil_mode=True, divisor_override=2), photo((1, 3, 5, 5)))


@pytest.mark.parametrize("pool", [
    nn.LPPool2d(2, 3, stride=2), nn.LPPool2d(1, (2, 3)), nn.LPPool2d(3.0, 2, ceil_mode=True),
    Lambda(lambda x: F.lp_pool2d(x, 2.5, (3, 2), stride=(1, 2)))], ids=str)
def test_power_average_pools_import_as_the_steps_pytorch_takes(pool):
    """``nn.LPPool2d`` / ``F.lp_pool2d``: x ** p, the window's average times its area, then
    ** (1 / p) (PyTorch's own definition), against the module in float64."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), pool).eval()
    x = photo((2, 3, 11, 9))
    graph = from_torch(net, x)
    assert "Pool" in op_kinds(graph)
    with torch.no_grad():
        want = net.double()(torch.from_numpy(x).double()).numpy()
    assert rel_err(simulate(graph, x).output, want) < 1e-5


@pytest.mark.parametrize("fn", [
    lambda x: x.var(1, keepdim=True) + torch.var(x, 1, True, True),
    lambda x: torch.std(x, (2, 3), keepdim=True, unbiased=False) + x.var(dim=1, correction=0)
    .unsqueeze(1),
    lambda x: x + x.std() + x.var(3).unsqueeze(3),
    # AdaIN (style transfer): each channel standardised by its own statistics
    lambda x: (x - x.mean((2, 3), keepdim=True)) / (x.var((2, 3), keepdim=True) + 1e-5).sqrt(),
])
def test_variance_and_standard_deviation_import(fn):
    """``var`` and ``std`` over any axes, unbiased or not (``unbiased``, ``correction``),
    kept or not: the mean, the squared difference, its sum over the count less the
    correction, the root for std; equal to PyTorch."""
    torch.manual_seed(0)
    check(nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), Lambda(fn)), photo((2, 3, 8, 7)))


def test_a_variance_of_one_value_is_refused():
    """(PyTorch itself warns as the traced run takes it, and returns NaN.)"""
    with pytest.raises(ModelError, match=r"the variance of 1 value\(s\) with correction 1: no "
                                         r"degrees of freedom left"), \
            pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        from_torch(Lambda(lambda x: x + x.var(1, keepdim=True)), photo((1, 1, 4, 4)))


def test_instance_norm_with_running_statistics_is_the_affine_they_give():
    """``nn.InstanceNorm2d(track_running_stats=True)`` in eval mode normalises by its running
    statistics: a per-channel affine, folded into the conv before it."""
    norm = nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
        norm.weight.uniform_(0.5, 1.5)
    graph = check(nn.Sequential(nn.Conv2d(3, 4, 3), norm), photo((1, 3, 8, 8)))
    assert op_kinds(graph) == ["Conv"]


@pytest.mark.parametrize("fn, kinds", [
    (Lambda(lambda x: x.mean(1, keepdim=True).repeat(1, 6, 1, 1) * x),
     ["Reduce", "Reshape", "Broadcast", "Reshape", "Elementwise"]),
    (Lambda(lambda x: x.repeat((1, 2, 3, 1))), ["Reshape", "Broadcast", "Reshape"]),
    (Lambda(lambda x: torch.tile(x, (2, 1))[:, :, 1:10] + x.tile((1, 1, 1, 2))[..., 3:10]),
     ["Reshape", "Broadcast", "Reshape", "Slice", "Reshape", "Broadcast", "Reshape", "Slice",
      "Add"]),
    (Lambda(lambda x: x.repeat(1, 1, 1, 1)), []),
    (Lambda(lambda x: x.narrow(1, 2, 3) + torch.narrow(x, 1, -3, 3) + x.narrow(1, 0, 3)
            .narrow(3, 1, 5).narrow(3, 0, 1)),
     ["Slice", "Slice", "Add", "Slice", "Slice", "Slice", "Elementwise"]),
    (Lambda(lambda x: x.flatten(1).view_as(x) + x.flatten(2).reshape_as(x)
            + x.flatten(2).unflatten(2, (x.shape[2], x.shape[3]))),
     ["Flatten", "Reshape", "Reshape", "Reshape", "Add", "Reshape", "Reshape", "Add"]),
    (nn.Sequential(nn.Flatten(2), nn.Unflatten(2, (9, 7))), ["Reshape", "Reshape"]),
    (nn.Softmax2d(), ["Softmax"]),
    (Lambda(lambda x: F.selu(x) + torch.selu(x)),
     ["Elu", "BatchNorm", "Elu", "BatchNorm", "Add"]),
    (nn.SELU(), ["Elu", "BatchNorm"]),
    (nn.RReLU(0.1, 0.3), ["LeakyRelu"]),
    (Lambda(lambda x: F.rrelu(x, 0.05, 0.25)), ["LeakyRelu"]),
])
def test_repeat_narrow_view_as_softmax2d_selu_and_rrelu_import(fn, kinds):
    """Tiling (``repeat``, ``tile``: the whole map again along an axis), ``narrow``,
    ``view_as`` / ``reshape_as`` / ``unflatten``, ``nn.Softmax2d`` (over the channels), SELU
    and RReLU at inference (the mean slope): equal to PyTorch, as the ops listed."""
    graph = check(nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), fn), photo((2, 3, 9, 7)))
    assert op_kinds(graph) == ["Conv", *kinds]


class TokenHead(nn.Module):
    """A conv's map as tokens (N x HW x C) read by integer indexing: the first token (a
    class token's place), the last one through a new axis, a row and a column of the map by
    index and ``select``, and a new axis between slices."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 4)

    def forward(self, x):
        y = self.conv(x)
        tokens = y.flatten(2).transpose(1, 2)
        head = self.fc(tokens[:, 0]) + self.fc(tokens[:, -1, None][:, 0])
        rows = y[:, :, 2] + torch.select(y, 2, -1)  # N x C x W
        column = y.select(3, 1)  # N x C x H
        return (head.sum(1, keepdim=True) + rows[:, :, None, 1:3].flatten(1).mean(1, True)
                * column.mean(2)[:, :4])


def test_integer_indexing_and_select_import():
    """Integers drop their axis, None adds one (``rules.index``: a Slice, then a Reshape
    to PyTorch's shape); equal to PyTorch."""
    graph = check(TokenHead(), photo((2, 3, 6, 7)))
    assert op_kinds(graph).count("Slice") == 7


class FirstImage(nn.Module):
    """At a batch of one, its one image taken by an integer index (of the batch axis, and of
    the axis a permute moved it to), ``select`` and ``unbind``, worked on without its batch
    axis and given one again by None and ``unsqueeze``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.mix = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(4, 5, 1)

    def forward(self, x):
        f = self.conv(x)
        kept = torch.relu(f[0][2:6]).unsqueeze(0)  # 1 x 4 x H x W
        last = f.select(0, -1)[None, :4]
        rest = f.unbind(0)[0][4:, None].transpose(0, 1)  # (4, 1, H, W) -> 1 x 4 x H x W
        moved = f.permute(1, 0, 2, 3)[2:6, 0][None]  # the batch of one in axis 1, taken
        return self.mix(kept + last * rest - moved) + f[0, 1]


def test_the_one_image_of_a_batch_of_one_taken_by_index_select_or_unbind_imports():
    """``x[0]`` of a batch of one is ``x`` without its batch axis (held, the batch joined to
    its first axis, as ``x.reshape(x.shape[1:])`` is); equal to PyTorch. At a batch of two it
    takes one image of two: refused."""
    check(FirstImage(), photo((1, 3, 6, 7)))
    with pytest.raises(ModelError) as refused:
        from_torch(FirstImage(), photo((2, 3, 6, 7)))
    text = str(refused.value)
    assert ("(node 'getitem': reshapes (1, 8, 6, 7) to (8, 6, 7): the IR keeps the batch axis "
            "first;") in text
    assert "Tensor.unbind x1 (node 'unbind': unbinds the batch axis" in text
    assert "node 'getitem_3'" not in text  # it reads the refused unbind: nothing more to say


@pytest.mark.parametrize("fn, why", [
    (lambda x: x[:, [0, 2]], r"no tensors, lists or booleans"),
    (lambda x: x.repeat(2, 1, 1, 1), r"repeats the batch axis 2 times"),
    (lambda x: x.repeat(1, 1, 1, 1, 2), r"repeats \(1, 1, 1, 1, 2\) of a tensor of shape"),
    (lambda x: F.rrelu(x, training=True), r"training=True draws a random slope"),
])
def test_a_list_index_a_repeat_of_the_batch_and_a_training_rrelu_are_refused(fn, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Lambda(fn), photo((1, 3, 6, 5)))


@pytest.mark.parametrize("fn, kind", [
    (lambda x: F.interpolate(x, scale_factor=0.5, mode="area"), "AdaptivePool"),
    (lambda x: F.interpolate(x, size=(5, 3), mode="area"), "AdaptivePool"),
    (lambda x: F.interpolate(x, size=(13, 20), mode="area"), "AdaptivePool"),
    (lambda x: F.interpolate(x, size=(1, 1), mode="area"), "GlobalAvgPool"),
    (nn.Upsample(size=(3, 7), mode="area"), "Pool"),  # 9 x 14 in 3 x 2 windows
])
def test_area_resampling_is_the_adaptive_average_pool(fn, kind):
    """``mode='area'`` (down, up, to odd sizes): PyTorch computes it as its adaptive average
    pool, and so does the IR; equal to PyTorch."""
    module = fn if isinstance(fn, nn.Module) else Lambda(fn)
    graph = check(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), module), photo((2, 3, 9, 14)))
    assert op_kinds(graph) == ["Conv", kind]


class TokenAttention(nn.Module):
    """A conv stem, then self-attention over its pixels as tokens, written as vision
    transformers write it: linear layers on N x T x C, ``q @ k.transpose(-2, -1)``, softmax,
    ``torch.matmul`` by the values; and ``x.matmul`` by a constant, ``torch.bmm``."""

    def __init__(self, channels=16, heads=4):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.qkv, self.proj = nn.Linear(channels, 3 * channels), nn.Linear(channels, channels)
        self.mix = nn.Parameter(torch.randn(channels, channels) * 0.1)
        self.heads = heads

    def forward(self, x):
        y = self.conv(x)
        n, c, h, w = y.shape
        tokens = y.flatten(2).transpose(1, 2)
        parts = self.qkv(tokens).chunk(3, -1)
        q, k, v = (parts[i].reshape(n, h * w, self.heads, c // self.heads).transpose(1, 2)
                   for i in range(3))
        scores = ((q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5).softmax(-1)
        out = torch.matmul(scores, v).transpose(1, 2).reshape(n, h * w, c)
        gram = torch.bmm(tokens, tokens.transpose(1, 2)).mean(-1, keepdim=True)
        return self.proj(out) + tokens.matmul(self.mix) + gram


def test_attention_s_products_of_two_activations_are_matmuls_and_its_linears_convs():
    """Equal to PyTorch on every machine: the three products of two activations (scores,
    weighted values, the Gram matrix) are the IR's MatMul, the linear layers over the tokens
    and the product by a constant matrix 1x1 convs."""
    net, x = TokenAttention().eval(), photo((2, 3, 16, 12))
    graph = check(net, x)
    kinds = op_kinds(graph)
    assert kinds.count("MatMul") == 3 and kinds.count("Conv") == 4
    want = torch_output(net, x)
    for preset in ("sparse-pairs-32x32", "input-reuse-1024", "group-tile-64mac",
                   "dilated-grid-2x2-h3"):
        assert rel_err(simulate(graph, x, preset, mode="run").output, want) < 1e-4, preset


@pytest.mark.parametrize("fn", [
    lambda x: F.linear(x.flatten(2), torch.linspace(-1, 1, 162).reshape(2, 81)),  # N x T x F
    lambda x: F.linear(x.unsqueeze(1), torch.linspace(-1, 1, 18).reshape(2, 9), torch.ones(2)),
])
def test_a_linear_layer_over_the_last_axis_of_any_rank(fn):
    """Over N x T x F (a sequence) or N x 1 x C x H x W: the rows as an N x L x 1 x F map
    through the 1x1 conv, reshaped there and back; equal to PyTorch."""
    graph = check(Lambda(fn), photo((2, 3, 9, 9)))
    assert "Conv" in op_kinds(graph)


@pytest.mark.parametrize("fn, why", [
    (lambda x: torch.matmul(torch.ones(1, 4, 3), x.flatten(2)),
     r"its input is a constant, not a tensor computed from the network input"),
    (lambda x: x.flatten(2).transpose(1, 2) @ torch.ones(2, 3, 4),
     r"multiplies by a constant of shape \(2, 3, 4\): the IR multiplies by a constant matrix"),
])
def test_a_product_by_a_constant_that_is_no_matrix_is_refused(fn, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Lambda(fn), photo((1, 3, 2, 3)))


class FlatNorm(nn.Module):
    """A conv's maps flattened to N x C x L and normalised by ``BatchNorm1d``."""

    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 4, 3), nn.BatchNorm1d(4)

    def forward(self, x):
        return self.norm(self.conv(x).flatten(2))


@pytest.mark.parametrize("make, kinds", [
    (lambda: nn.Sequential(nn.Conv2d(3, 6, 3), nn.SyncBatchNorm(6), nn.ReLU(), nn.Flatten(),
                           nn.Linear(6 * 6 * 5, 10), nn.BatchNorm1d(10)),
     ["Conv", "Relu", "Flatten", "Conv"]),
    (FlatNorm, ["Conv", "Reshape", "BatchNorm"]),
])
def test_sync_batch_norm_and_batch_norm_1d_use_their_running_statistics(make, kinds):
    """A model trained on several GPUs keeps ``nn.SyncBatchNorm`` (BatchNorm2d at
    inference), a classifier head ``nn.BatchNorm1d`` after its Linear (folded into it) or
    on flattened maps: equal to PyTorch on trained-looking statistics."""
    torch.manual_seed(0)
    module = make()
    with torch.no_grad():
        for norm in module.modules():
            if isinstance(norm, nn.modules.batchnorm._BatchNorm):
                norm.running_mean.uniform_(-1, 1)
                norm.running_var.uniform_(0.5, 2)
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)
    graph = check(module, photo((2, 3, 8, 7)))
    assert op_kinds(graph) == kinds


class ChannelsFirstLayerNorm(nn.Module):
    """ConvNeXt's own LayerNorm for N x C x H x W maps (its stem and downsampling layers):
    written out with ``.pow(2)``, ``torch.sqrt`` and the affine's parameters indexed with
    None."""

    def __init__(self, channels, eps=1e-6):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, channels, 4, stride=4)
        self.weight = nn.Parameter(torch.rand(channels) + 0.5)
        self.bias = nn.Parameter(torch.rand(channels) - 0.5)
        self.eps = eps

    def forward(self, x):
        x = self.conv(x)
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


def test_a_layer_norm_written_out_as_convnext_writes_it_imports():
    check(ChannelsFirstLayerNorm(16).eval(), photo((2, 3, 32, 24)))


@pytest.mark.parametrize("fn", [
    lambda x: -x + torch.neg(x) * 0.5,
    lambda x: torch.rsqrt(x * x + 1.0),
    lambda x: (x + 1.0).rsqrt().clamp_min(0.2) + torch.clamp_max(x, 0.1),
    lambda x: torch.pow(x, 3) + x ** 2 + x.pow(0.5),
    lambda x: torch.sqrt(torch.clamp_min(x, 0.0)) + x.sqrt(),
    lambda x: torch.log(torch.exp(-x) + 1.0) + (x - 0.5).abs() + x.exp().log(),
])
def test_neg_pow_sqrt_rsqrt_exp_log_abs_and_one_sided_clamps_import(fn):
    """The arithmetic of hand-written norms and activations, on a ReLU's non-negative map:
    equal to PyTorch."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), Lambda(fn))
    check(net, photo((1, 3, 9, 8)))


class ClampedToTensors(nn.Module):
    """Clamps to tensors: a constant per-channel floor (a buffer), the map's own mean (a
    computed bound, broadcast), both at once, a one-sided clip by a negated mean, and the
    mean clamped to the map (bounds that broadcast the clamped tensor to their shape)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.register_buffer("floor", torch.randn(1, 4, 1, 1) * 0.1)

    def forward(self, x):
        t = self.conv(x)
        m = t.mean((2, 3), keepdim=True)
        wide = torch.clamp(m, t, t.amax(1, keepdim=True))  # computed bounds wider than m
        return torch.cat([t.clamp(min=self.floor), torch.clamp(t, max=m),
                          t.clamp(self.floor, m), torch.clip(t, -m, None), wide], 1)


def test_clamps_to_tensors_import_as_maximum_then_minimum():
    graph = check(ClampedToTensors().eval(), photo((2, 3, 9, 8)))
    kinds = [n.op.kind for n in graph.nodes if isinstance(n.op, ops.Elementwise)]
    assert sorted(kinds) == ["max"] * 4 + ["min"] * 3


def test_two_pixel_shuffles_and_two_stacks_keep_their_nodes_apart():
    """fx names a second call ``pixel_shuffle_1``; the first call's inner nodes must not take
    that name."""
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = nn.Conv2d(3, 16, 3, padding=1)

        def forward(self, x):
            y = F.pixel_shuffle(F.pixel_shuffle(self.conv(x), 2), 2)
            s = torch.stack([x, x], 1)
            return y, torch.stack([s.sum(1), x], 1)

    graph = from_torch(Twice().eval(), photo((1, 3, 6, 5)))
    assert len({n.name for n in graph.nodes}) == len(graph.nodes)


def test_channel_attention_of_both_global_pools_imports():
    """CBAM's channel attention: the global mean and the global max (to 1x1) through one
    shared MLP, summed, a sigmoid gate."""
    class ChannelAttention(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.mlp = nn.Sequential(nn.Conv2d(8, 2, 1), nn.ReLU(), nn.Conv2d(2, 8, 1))

        def forward(self, x):
            y = self.conv(x)
            gate = torch.sigmoid(self.mlp(F.adaptive_avg_pool2d(y, 1))
                                 + self.mlp(F.adaptive_max_pool2d(y, 1)))
            return y * gate

    graph = check(ChannelAttention().eval(), photo((2, 3, 11, 9)))
    assert {"GlobalAvgPool", "Pool"} <= set(op_kinds(graph))


def test_adaptive_max_pool_indices_are_refused():
    with pytest.raises(ModelError, match=r"return_indices=True: the IR's pooling returns "
                                         r"values only"):
        from_torch(nn.Sequential(nn.AdaptiveMaxPool2d(3, return_indices=True)),
                   photo((1, 3, 9, 9)))


@pytest.mark.parametrize("module, x, message", refusal_cases(), ids=lambda v: "")
def test_unsupported_parameters_are_refused_by_name(module, x, message):
    with pytest.raises(ModelError, match=message):
        from_torch(module, x)


def test_refusals_are_collected_into_one_message():
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding_mode="circular", padding="same"),
                        nn.Softmax(dim=0), nn.CrossMapLRN2d(3))
    with pytest.raises(ModelError) as err:
        from_torch(net, photo((1, 3, 8, 8)))
    text = str(err.value)
    assert "unsupported ops: nn.CrossMapLRN2d x1 ('_2')" in text
    assert "nn.Conv2d x1 (node '_0': padding_mode='circular'" in text
    assert "nn.Softmax x1 (node '_1': softmax over the batch axis" in text


class DataDependent(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


class TwoInputs(nn.Module):
    def forward(self, x, y):
        return x + y


@pytest.mark.parametrize("module, message", [
    (DataDependent(), r"DataDependent: torch.fx cannot trace it \(TraceError"),
    (TwoInputs(), r"TwoInputs: forward takes 2 tensor inputs \['x', 'y'\]"),
])
def test_networks_outside_the_ir_are_refused(module, message):
    with pytest.raises(ModelError, match=message):
        from_torch(module, photo((1, 3, 8, 8)))


def test_bad_arguments_are_refused():
    with pytest.raises(ModelError, match="expected a torch nn.Module, got function"):
        from_torch(lambda x: x, photo((1, 3, 8, 8)))
    with pytest.raises(ModelError, match=r"Conv2d: example input of shape \(3,\)"):
        from_torch(nn.Conv2d(3, 3, 1), np.zeros(3, np.float32))
    with pytest.raises(ModelError, match=r"Conv2d: running it on an input of shape "
                                         r"\(1, 4, 8, 8\) failed at node 'conv2d' \(RuntimeError"):
        from_torch(nn.Conv2d(3, 3, 1), np.zeros((1, 4, 8, 8), np.float32))


def test_top_level_names_are_the_importers():
    import npusim

    assert npusim.from_torch is from_torch and npusim.from_factory is from_factory


# ---- file.py:factory --------------------------------------------------------------------


FACTORY_FILE = '''
import torch
from torch import nn


def small():
    torch.manual_seed(3)
    return nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.BatchNorm2d(4), nn.ReLU())


def broken():
    raise ValueError("boom")


def not_a_module():
    return 42
'''


@pytest.fixture
def factory_file(tmp_path):
    path = tmp_path / "user_net.py"
    path.write_text(FACTORY_FILE)
    return path


def test_factory_defaults_to_a_224_input_and_equals_pytorch(factory_file):
    graph = from_factory(f"{factory_file}:small")
    assert graph.input_shape == (1, 3, 224, 224) and graph.name == "small"
    spec = importlib.util.spec_from_file_location("user_net_ref", factory_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    check(module.small(), photo((1, 3, 224, 224)), graph)


def test_load_model_dispatches_a_factory_with_input_shape_and_batch(factory_file):
    graph = load_model(f"{factory_file}:small", input_shape=(2, 3, 32, 30), batch=2)
    assert graph.input_shape == (2, 3, 32, 30)
    assert graph.output_shape == (2, 4, 15, 14)
    assert isinstance(graph.nodes[0].op, ops.Conv)
    with pytest.raises(ModelError, match=r"small: batch=2 contradicts input_shape N=1"):
        load_model(f"{factory_file}:small", input_shape=(1, 3, 32, 30), batch=2)


@pytest.mark.parametrize("spec, message", [
    ("{f}", r"expected path/to/file.py:factory"),
    ("{f}:", r"expected path/to/file.py:factory"),
    ("{d}/missing.py:small", r"missing.py: no such file"),
    ("{f}:nope", r"user_net.py: no function 'nope'; functions defined there: broken, "
                 r"not_a_module, small"),
    ("{f}:broken", r"calling broken\(\) failed \(ValueError: boom\)"),
    ("{f}:not_a_module", r"not_a_module\(\) returned int, not a torch nn.Module"),
])
def test_factory_errors_name_the_file_and_function(factory_file, spec, message):
    with pytest.raises(ModelError, match=message):
        from_factory(spec.format(f=factory_file, d=factory_file.parent))


def test_a_factory_failing_on_the_default_shape_is_told_to_give_its_own(tmp_path):
    """A network whose forward needs another input than the default 1 x 3 x 224 x 224 (a
    layer norm over a fixed map) fails there; the refusal says that shape was the default
    and how to give the network's own, and the given shape then imports."""
    path = tmp_path / "normed.py"
    path.write_text("import torch.nn as nn\n\ndef normed():\n"
                    "    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), "
                    "nn.LayerNorm([4, 16, 16]))\n")
    with pytest.raises(ModelError, match=r"normed: running it on an input of shape "
                                         r"\(1, 3, 224, 224\) failed at node '_1' .*; that is "
                                         r"the default input shape: give the network's own "
                                         r"\(input_shape=, --input-shape N,C,H,W\)"):
        load_model(f"{path}:normed")
    with pytest.raises(ModelError, match=r"shape \(1, 3, 20, 20\) failed at node '_1' "
                                         r"\(RuntimeError: [^;]*\)$"):
        load_model(f"{path}:normed", input_shape=(1, 3, 20, 20))
    assert load_model(f"{path}:normed", input_shape=(2, 3, 16, 16)).output_shape == \
        (2, 4, 16, 16)


def test_factory_file_that_fails_to_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n")
    with pytest.raises(ModelError, match=r"bad.py: importing it failed \(SyntaxError"):
        from_factory(f"{bad}:broken")


def test_a_factory_or_its_file_that_exits_is_a_failure_named_so(tmp_path):
    """sys.exit() in the user's file or factory once ended npusim itself, silently."""
    quits = tmp_path / "quits.py"
    quits.write_text("import sys\n\ndef build():\n    sys.exit(3)\n")
    with pytest.raises(ModelError, match=r"quits.py:build: calling build\(\) failed "
                                         r"\(SystemExit: 3\)"):
        from_factory(f"{quits}:build")
    leaves = tmp_path / "leaves.py"
    leaves.write_text("import sys\nsys.exit('not here')\n")
    with pytest.raises(ModelError, match=r"leaves.py: importing it failed \(SystemExit: not "
                                         r"here\)"):
        from_factory(f"{leaves}:build")


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (8,), (1, 3, 8.5, 8)])
def test_factory_input_shape_must_be_positive_integers(factory_file, shape):
    with pytest.raises(ModelError, match=r"input_shape=.*: must be positive integers N x C x H"):
        from_factory(f"{factory_file}:small", input_shape=shape)


# ---- the user's model is left as it was; several outputs ---------------------------------


class TwoHeads(nn.Module):
    """A trunk and two heads: features (a conv read by a batch norm) and pooled scores."""

    def __init__(self, as_dict: bool = True):
        super().__init__()
        self.as_dict = as_dict
        self.trunk = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU())
        self.features = nn.Conv2d(6, 4, 1)
        self.norm = nn.BatchNorm2d(4)
        self.scores = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))
        for bn in (self.trunk[1], self.norm):  # trained-looking statistics
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        f = self.features(self.trunk(x))
        scores = self.scores(self.norm(f))
        return {"features": f, "scores": scores} if self.as_dict else (scores, f)


def test_every_submodules_training_flag_is_left_as_it_was():
    net = TwoHeads()
    net.train()
    net.trunk.eval()  # e.g. a frozen backbone inside a module being trained
    net.trunk[1].train()
    before = {name: m.training for name, m in net.named_modules()}
    from_torch(net, photo((1, 3, 8, 8)))
    assert {name: m.training for name, m in net.named_modules()} == before
    assert before[""] and not before["trunk"] and before["trunk.1"]


@pytest.mark.parametrize("as_dict, labels", [(True, ["features", "scores"]),
                                             (False, ["output0", "output1"])])
def test_a_forward_returning_a_dict_or_tuple_gives_every_output_in_order(as_dict, labels):
    net = TwoHeads(as_dict).eval()
    x = photo((2, 3, 10, 9))
    graph = from_torch(net, x)
    assert list(graph.outputs) == labels
    with torch.no_grad():
        ref = net(torch.from_numpy(x))
    ref = list(ref.values()) if as_dict else list(ref)
    result = simulate(graph, x)
    assert list(result.named_outputs) == labels
    for out, want in zip(result.named_outputs.values(), ref, strict=True):
        assert out.shape == tuple(want.shape) and rel_err(out, want.numpy()) < 1e-4
    assert result.output is result.named_outputs[labels[0]]


def test_check_compares_every_output_with_torch(tmp_path, capsys):
    import inspect
    import json

    from npusim import cli

    net_file = tmp_path / "heads.py"
    net_file.write_text("from torch import nn\n\n\n" + inspect.getsource(TwoHeads)
                        + "\n\ndef build():\n    return TwoHeads()\n")
    report = tmp_path / "r.json"
    code = cli.main(["run", f"{net_file}:build", "--input-shape", "1,3,16,16", "--check",
                     "--quiet", "--json", str(report)])
    assert code == 0, capsys.readouterr().err
    check = json.loads(report.read_text())["check"]
    assert list(check["output_relative_errors"]) == ["features", "scores"]
    assert max(check["output_relative_errors"].values()) < 1e-4 and check["passed"]


def test_a_tuple_may_return_the_input_itself():
    x = photo((1, 3, 5, 4))
    graph = from_torch(Lambda(lambda x: (F.relu(x), x)), x)
    relu, same = simulate(graph, x).named_outputs.values()
    assert np.array_equal(relu, np.maximum(x, 0)) and np.array_equal(same, x)


def test_a_nested_or_constant_output_is_refused():
    with pytest.raises(ModelError, match=r"output 'output1' of forward is tuple; npusim "
                                         r"networks return tensors computed from the input"):
        from_torch(Lambda(lambda x: (F.relu(x), (x, x))), photo((1, 3, 4, 4)))


def test_batch_sets_the_batch_a_factory_is_traced_at():
    nets = load_nets()
    shape = (2,) + tuple(nets.INPUT_SHAPE[1:])
    graph = load_model(f"{NETS}:functional", input_shape=shape, batch=2)
    assert graph.input_shape == shape
    x = np.concatenate([photo((1,) + shape[1:]), photo((1,) + shape[1:])[:, :, ::-1].copy()])
    check(nets.functional(), x, graph)
    assert load_model(f"{NETS}:functional", batch=3).input_shape == (3, 3, 224, 224)


@pytest.mark.parametrize("cast", ["half", "double"])
def test_a_module_not_in_float32_is_refused_naming_the_parameter(cast):
    """A float16 or float64 module traced on a float32 input once failed with a type
    mismatch, hinted as a wrong input shape."""
    net = getattr(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), cast)()
    dtype = {"half": "torch.float16", "double": "torch.float64"}[cast]
    with pytest.raises(ModelError, match=rf"^Sequential: parameter '0.weight' is {dtype}; "
                                         r"npusim imports float32 modules: convert it with "
                                         r"\.float\(\) first$"):
        from_torch(net, torch.zeros(1, 3, 8, 8))
    assert from_torch(net.float(), torch.zeros(1, 3, 8, 8)).conv_nodes


@pytest.mark.parametrize("make", [lambda: torch.nn.BatchNorm2d(4),
                                  lambda: torch.nn.ConvTranspose2d(4, 3, 3, stride=2),
                                  lambda: torch.nn.Conv2d(4, 5, 3, padding=1)])
def test_a_bare_layer_module_imports_as_the_layer_it_is(make):
    """``from_torch(nn.BatchNorm2d(4), x)`` was refused for "control flow on tensor values":
    fx traced into the layer's own forward, the root, where it is a leaf anywhere else.
    Each now imports, compared with PyTorch in float64."""
    torch.manual_seed(0)
    layer = make().eval()
    if isinstance(layer, torch.nn.BatchNorm2d):  # statistics of its own, not 0 and 1
        layer.running_mean.uniform_(-1, 1)
        layer.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 4, 6, 6)
    graph = from_torch(layer, x)
    with torch.no_grad():
        want = layer.double()(x.double()).numpy()
    got = simulate(graph, x.numpy()).output
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("wrap", ["compile", "data parallel", "compiled data parallel"])
def test_a_compiled_or_data_parallel_module_imports_as_the_network_it_wraps(wrap, tmp_path):
    """``torch.compile(net)`` (fx found no ``forward`` on it) and ``nn.DataParallel(net)``
    (kept as one unsupported call) are the network they run, with its parameters; a factory
    returning one is checked against the network, not the wrapper (no compilation)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 4, 1)).eval()
    net[1].running_var.uniform_(0.5, 2)
    wrapped = {"compile": lambda: torch.compile(net),
               "data parallel": lambda: nn.DataParallel(net),
               "compiled data parallel": lambda: torch.compile(nn.DataParallel(net))}[wrap]()
    x = photo((2, 3, 9, 7))
    graph = from_torch(wrapped, x)
    assert graph.name == "Sequential" and len(graph.conv_nodes) == 2
    assert rel_err(simulate(graph, x, keep_outputs=True).output, float64_output(net, x)) < 1e-5
    factory = tmp_path / "wrapped.py"
    factory.write_text("import torch\nfrom torch import nn\n\ndef build():\n"
                       "    return torch.compile(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))\n")
    graph, module = load_model_and_module(f"{factory}:build", input_shape=(1, 3, 8, 8))
    assert type(module) is nn.Sequential and len(graph.conv_nodes) == 1


@dataclasses.dataclass
class HeadOutput:
    """A head's outputs as detection and Hugging Face code return them."""

    logits: torch.Tensor
    boxes: torch.Tensor | None = None
    loss: torch.Tensor | None = None


Pair = collections.namedtuple("Pair", "scores features")


class Optional(nn.Module):
    """A forward with arguments after the input that have defaults, a branch on one being
    None, and its outputs as a dataclass (``boxes`` given, ``loss`` left None) or a
    namedtuple."""

    def __init__(self, record: str):
        super().__init__()
        torch.manual_seed(7)
        self.conv, self.box, self.record = nn.Conv2d(3, 6, 3), nn.Conv2d(6, 4, 1), record

    def forward(self, x, mask=None, targets=None, scale: float = 2.0, with_boxes: bool = True):
        f = self.conv(x)
        if mask is not None:
            f = f * mask
        logits = f.mean((2, 3)) * scale
        if self.record == "namedtuple":
            return Pair(logits, f)
        loss = None if targets is None else (logits - targets).square().mean()
        return HeadOutput(logits, self.box(f) if with_boxes else None, loss)


@pytest.mark.parametrize("record, labels", [("dataclass", ["logits", "boxes"]),
                                            ("namedtuple", ["scores", "features"])])
def test_default_arguments_are_traced_at_their_defaults_and_records_are_outputs(record, labels):
    """fx traced ``if mask is not None`` into the branch (a proxy is not None) and the
    recording run failed at ``f * mask``; a dataclass returned was "a constant", a
    namedtuple an unsupported call."""
    from npusim.report.check import check

    net = Optional(record).eval()
    x = photo((2, 3, 7, 9))
    graph = from_torch(net, x)
    assert list(graph.outputs) == labels
    result = simulate(graph, x, keep_outputs=True)
    outcome = check(graph, x, result, own=net)  # --check: the module's record, its fields
    assert outcome.passed and outcome.module_error < 1e-5
    with torch.no_grad():
        out = net.double()(torch.from_numpy(x.astype(np.float64)))
    want = [out.logits, out.boxes] if record == "dataclass" else list(out)
    for label, ref in zip(labels, want, strict=True):
        assert rel_err(result.named_outputs[label], ref.numpy()) < 1e-5, label
