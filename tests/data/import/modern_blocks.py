"""The building blocks of post-2018 mobile networks, written as torchvision defines them
(torchvision itself does not import with the CPU torch pinned here). Each factory takes no
arguments and returns a seeded module with non-trivial batch-norm statistics, so that
``npusim run tests/data/import/modern_blocks.py:mbconv --check`` works as it is."""

import torch
import torch.nn.functional as F
from torch import nn


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding (MobileNetV3's squeeze channels)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv_bn(c_in, c_out, k=1, stride=1, groups=1, act=None):
    layers = [nn.Conv2d(c_in, c_out, k, stride, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(c_out)]
    return nn.Sequential(*layers, *([act()] if act else []))


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: pool, 1x1 down, act, 1x1 up, gate, scale."""

    def __init__(self, channels, squeeze, activation=nn.ReLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.activation, self.scale_activation = activation(), scale_activation()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class MobileNetV3Block(nn.Module):
    """MobileNetV3 inverted residual: expand (hardswish), depthwise (hardswish), SE with
    hardsigmoid gate, project; residual at stride 1 with equal channels."""

    def __init__(self, c_in=16, expanded=48, c_out=16, k=5, stride=1):
        super().__init__()
        self.use_res = stride == 1 and c_in == c_out
        self.block = nn.Sequential(
            _conv_bn(c_in, expanded, act=nn.Hardswish),
            _conv_bn(expanded, expanded, k, stride, expanded, act=nn.Hardswish),
            SqueezeExcitation(expanded, _make_divisible(expanded // 4),
                              scale_activation=nn.Hardsigmoid),
            _conv_bn(expanded, c_out))

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class MBConv(nn.Module):
    """EfficientNet MBConv: expand (SiLU), depthwise (SiLU), SE (SiLU, sigmoid gate) with
    c_in // 4 squeeze channels, project; residual (stochastic depth is identity at eval)."""

    def __init__(self, c_in=16, expand_ratio=4, c_out=16, k=3, stride=1):
        super().__init__()
        expanded = c_in * expand_ratio
        self.use_res = stride == 1 and c_in == c_out
        self.block = nn.Sequential(
            _conv_bn(c_in, expanded, act=nn.SiLU),
            _conv_bn(expanded, expanded, k, stride, expanded, act=nn.SiLU),
            SqueezeExcitation(expanded, max(1, c_in // 4), activation=nn.SiLU),
            _conv_bn(expanded, c_out))

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


def channel_shuffle(x, groups: int):
    """torchvision's ShuffleNetV2 channel shuffle: reshape, transpose, reshape."""
    n, c, h, w = x.size()
    x = x.view(n, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(n, -1, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2 unit: stride 1 splits the channels with chunk, runs one half, concats
    and shuffles; stride 2 runs both branches on the whole input."""

    def __init__(self, c_in=16, c_out=16, stride=1):
        super().__init__()
        self.stride, half = stride, c_out // 2
        if stride > 1:
            self.branch1 = nn.Sequential(_conv_bn(c_in, c_in, 3, stride, c_in),
                                         _conv_bn(c_in, half, act=nn.ReLU))
        inp = c_in if stride > 1 else half
        self.branch2 = nn.Sequential(_conv_bn(inp, half, act=nn.ReLU),
                                     _conv_bn(half, half, 3, stride, half),
                                     _conv_bn(half, half, act=nn.ReLU))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class MnasNetHead(nn.Module):
    """MnasNet's end: 1x1 conv to 1280 (here 64) + BN + ReLU, ``x.mean([2, 3])`` as the global
    pool, dropout, linear classifier."""

    def __init__(self, c_in=16, c_mid=64, classes=10):
        super().__init__()
        self.layers = _conv_bn(c_in, c_mid, act=nn.ReLU)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(c_mid, classes))

    def forward(self, x):
        return self.classifier(self.layers(x).mean([2, 3]))


class ConvNeXtBlock(nn.Module):
    """torchvision's CNBlock: 7x7 depthwise, permute to channels-last, LayerNorm (eps 1e-6),
    Linear 4x, GELU, Linear back, permute, per-channel layer scale, residual."""

    def __init__(self, dim=16, layer_scale=0.5):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), layer_scale))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))).permute(0, 3, 1, 2)
        return self.layer_scale * y + x


class DetectHead(nn.Module):
    """A YOLOv5-style detection head as its own code writes it: a 1x1 conv to anchors x
    outputs, the grid of cell offsets built in forward from the map's shape
    (``torch.arange`` of ``x.shape``, ``meshgrid``, ``stack``, ``view``, ``.float()``), the
    anchors a buffer, the sigmoid decode, concatenated boxes, one row per prediction."""

    def __init__(self, channels=16, anchors=3, outputs=7, stride=8):
        super().__init__()
        self.anchors, self.outputs, self.stride = anchors, outputs, stride
        self.m = nn.Conv2d(channels, anchors * outputs, 1)
        self.register_buffer("anchor_grid", torch.rand(1, anchors, 1, 1, 2) * 10)

    def forward(self, x):
        x = self.m(x)
        bs, _, ny, nx = x.shape
        x = x.view(bs, self.anchors, self.outputs, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
        y = x.sigmoid()
        xy = (y[..., 0:2] * 2 - 0.5 + grid) * self.stride
        wh = (y[..., 2:4] * 2) ** 2 * self.anchor_grid
        return torch.cat((xy, wh, y[..., 4:]), -1).view(bs, -1, self.outputs)


def _seeded(module: nn.Module, seed: int = 0) -> nn.Module:
    """``module`` with seeded weights and batch-norm statistics and affine terms that are not
    the identity (a freshly built BN would hide mistakes in folding), in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return module.eval()


def se_block():
    torch.manual_seed(1)
    return _seeded(nn.Sequential(_conv_bn(3, 16, 3, act=nn.ReLU), SqueezeExcitation(16, 4)))


def mobilenet_v3_block():
    torch.manual_seed(2)
    return _seeded(nn.Sequential(_conv_bn(3, 16, 3, 2, act=nn.Hardswish), MobileNetV3Block(),
                                 MobileNetV3Block(16, 64, 24, 3, 2)))


def mbconv():
    torch.manual_seed(3)
    return _seeded(nn.Sequential(_conv_bn(3, 16, 3, act=nn.SiLU), MBConv(),
                                 MBConv(16, 6, 24, 5, 2)))


def shufflenet_unit():
    torch.manual_seed(4)
    return _seeded(nn.Sequential(_conv_bn(3, 16, 3, act=nn.ReLU), ShuffleUnit(16, 32, 2),
                                 ShuffleUnit(32, 32, 1)))


def mnasnet_head():
    torch.manual_seed(5)
    return _seeded(nn.Sequential(_conv_bn(3, 16, 3, 2, act=nn.ReLU), MnasNetHead()))


def convnext_block():
    torch.manual_seed(6)
    return _seeded(nn.Sequential(nn.Conv2d(3, 16, 4, 4), ConvNeXtBlock()))


def deconv_decoder():
    """A segmentation-style decoder: downsample twice, then two stride-2 transposed convs
    (one with output padding, one grouped) back up."""
    torch.manual_seed(7)
    return _seeded(nn.Sequential(
        _conv_bn(3, 16, 3, 2, act=nn.ReLU), _conv_bn(16, 32, 3, 2, act=nn.ReLU),
        nn.ConvTranspose2d(32, 16, 3, 2, 1, output_padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.ConvTranspose2d(16, 8, 4, 2, 1, groups=2)))


def detect_head():
    """A stem and YOLOv5's detection head (its grid a constant of the traced shape)."""
    torch.manual_seed(8)
    return _seeded(nn.Sequential(_conv_bn(3, 16, 3, 2, act=nn.SiLU), DetectHead()))
