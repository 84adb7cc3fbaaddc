"""Networks with the cases importers get wrong, as factories for ``from_factory``.

``awkward()`` uses module classes, ``functional()`` the same kinds of op as
``torch.nn.functional`` calls and tensor methods on bare parameters. Both take a
1 x 3 x H x W image (odd H and W exercise ceil-mode pooling and 'same' padding)
and return logits and their softmax side by side, so that an error anywhere shows
in the logits. Weights are seeded; batch-norm statistics are not the identity.
"""

import torch
import torch.nn.functional as F
from torch import nn

INPUT_SHAPE = (1, 3, 37, 41)


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g) * scale


def _set_batchnorm(bn: nn.BatchNorm2d, g) -> None:
    n = bn.num_features
    with torch.no_grad():
        bn.weight.copy_(1 + 0.2 * _randn(g, n))
        bn.bias.copy_(0.1 * _randn(g, n))
        bn.running_mean.copy_(0.1 * _randn(g, n))
        bn.running_var.copy_(0.5 + torch.rand(n, generator=g))


class Awkward(nn.Module):
    """Grouped + dilated + strided conv after asymmetric padding, depthwise, 1x1 stride 2,
    'same' with even kernels, concat, three upsamplings, ceil-mode pools."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.pad = nn.ZeroPad2d((1, 2, 0, 1))  # left, right, top, bottom
        self.grouped = nn.Conv2d(3, 9, 3, stride=2, dilation=2, groups=3)
        self.bn = nn.BatchNorm2d(9)
        self.depthwise = nn.Conv2d(9, 9, 3, padding=1, groups=9, bias=False)
        self.act6 = nn.ReLU6()
        self.point = nn.Conv2d(9, 12, 1, stride=2)
        self.same_even = nn.Conv2d(12, 12, 4, padding="same")
        self.same_dilated = nn.Conv2d(12, 6, 2, padding="same", dilation=3, bias=False)
        self.valid = nn.Conv2d(6, 6, 1, padding="valid")
        self.prelu = nn.PReLU(6, init=0.1)
        self.leaky = nn.LeakyReLU(0.2)
        self.clip = nn.Hardtanh(0.0, 6.0)
        self.relu = nn.ReLU()
        self.up_nearest = nn.Upsample(scale_factor=2)
        self.up_bilinear = nn.Upsample(scale_factor=2, mode="bilinear")
        self.up_corners = nn.UpsamplingBilinear2d(scale_factor=2)
        self.max_ceil = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.avg_ceil = nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False)
        self.avg_pad = nn.AvgPool2d(2, 1, padding=1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.drop = nn.Dropout(0.3)
        self.keep = nn.Identity()
        self.fc = nn.Linear(54, 10)
        self.soft = nn.Softmax(dim=1)
        _set_batchnorm(self.bn, _seeded(1))

    def forward(self, x):
        y = self.bn(self.grouped(self.pad(x)))
        y = self.point(self.act6(self.depthwise(y)))
        a = self.prelu(self.valid(self.same_dilated(self.same_even(y))))
        cat = torch.cat([self.leaky(a), self.clip(a), self.relu(a)], 1)
        up = torch.cat([self.up_nearest(cat), self.up_bilinear(cat), self.up_corners(cat)], 1)
        p = self.avg_pad(self.avg_ceil(self.max_ceil(up)))
        logits = self.fc(self.drop(self.flat(self.keep(self.gap(p)))))
        return torch.cat([logits, self.soft(logits)], 1)


class Functional(nn.Module):
    """The same kinds of op as functions and tensor methods on bare parameters and buffers."""

    def __init__(self):
        super().__init__()
        g = _seeded(2)
        self.w1 = nn.Parameter(_randn(g, 8, 3, 3, 3, scale=0.3))
        self.b1 = nn.Parameter(_randn(g, 8, scale=0.1))
        self.register_buffer("mean", _randn(g, 8, scale=0.1))
        self.register_buffer("var", 0.5 + torch.rand(8, generator=g))
        self.gamma = nn.Parameter(1 + _randn(g, 8, scale=0.2))
        self.beta = nn.Parameter(_randn(g, 8, scale=0.1))
        self.w2 = nn.Parameter(_randn(g, 8, 4, 2, 2, scale=0.3))
        self.shift = nn.Parameter(_randn(g, 1, 8, 1, 1, scale=0.2))
        self.slope = nn.Parameter(torch.rand(8, generator=g) * 0.3)
        self.w3 = nn.Parameter(_randn(g, 8, 1, 3, 3, scale=0.3))
        self.fc_w = nn.Parameter(_randn(g, 7, 24, scale=0.2))
        self.fc_b = nn.Parameter(_randn(g, 7, scale=0.1))

    def forward(self, x):
        y = F.conv2d(F.pad(x, (2, 1, 1, 0)), self.w1, self.b1, stride=(2, 1), padding=(1, 0))
        y = F.batch_norm(y, self.mean, self.var, self.gamma, self.beta, training=False, eps=1e-3)
        y = torch.relu(y)
        y = F.conv2d(y, self.w2, None, 1, "same", 2, 2)  # groups 2, dilation 2, even kernel
        y = F.prelu(y + self.shift, self.slope)
        z = F.leaky_relu(y, 0.1).add(torch.clamp(y, 0, 6))
        z = torch.add(z, F.hardtanh(y, 0.0, 6.0)).relu()
        z = F.max_pool2d(F.pad(z, (0, 1, 0, 1), value=float("-inf")), 3, 2)
        z = F.conv2d(z, self.w3, stride=2, padding=1, groups=8)
        z = F.avg_pool2d(z, 2, ceil_mode=True, count_include_pad=True)
        a = F.adaptive_avg_pool2d(z, 1)
        u = torch.cat([F.interpolate(z, size=(7, 12), mode="nearest"),  # 3 x 6 -> 7 x 12
                       F.interpolate(z, size=(7, 12), mode="bilinear", align_corners=True)], 1)
        u = F.adaptive_avg_pool2d(F.relu6(u).clamp(min=0), 1)
        v = torch.cat([a.view(a.size(0), -1), torch.flatten(u, 1)], 1)
        v = F.dropout(v, 0.5, training=self.training).contiguous()
        out = F.linear(v, self.fc_w, self.fc_b)
        return torch.cat([out, torch.softmax(out, -1),
                          F.softmax(torch.flatten(out.reshape(out.shape[0], 7, 1), 1), dim=1)], 1)


def awkward() -> nn.Module:
    return Awkward()


def functional() -> nn.Module:
    return Functional()
