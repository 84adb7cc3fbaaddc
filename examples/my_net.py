"""A small CNN of one's own, for ``npusim run examples/my_net.py:build`` (docs/import.md).

``build()`` takes no argument and returns an ``nn.Module``; npusim traces it on its input
shape (``--input-shape``, default 1 x 3 x 224 x 224), copies its weights and runs it.
"""

import torch
from torch import nn


def build() -> nn.Module:
    """Conv-BN-ReLU stem, a depthwise-separable block, a residual add, global pool, classifier;
    seeded weights, eval mode."""
    torch.manual_seed(0)
    return Net().eval()


class Net(nn.Module):
    """Channels 3 -> 16 -> 32, ten classes; any input of at least 8 x 8 pixels."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 16, 1)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.pw(torch.relu(self.dw(x))))
        x = torch.relu(self.down(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
