"""A real check of the accuracy axis: train block networks on scikit-learn's digits.

``torch_model`` mirrors ``network.build_network`` layer for layer in PyTorch (the same
``ibn.plan`` of each block, 'same' padding, ReLU, residual adds, average pool, linear
classifier); ``train_digits`` trains it on the 8 x 8 digits that scikit-learn ships
(1797 images, a seeded 70/30 split) and returns the held-out accuracy. Seconds on a CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ibn import BlockSpec, ConvPlan, plan


def _conv(torch, c: ConvPlan):
    conv = torch.nn.Conv2d(c.c_in, c.c_out, c.k, c.stride, c.k // 2, groups=c.groups)
    return torch.nn.Sequential(conv, torch.nn.ReLU()) if c.relu else conv


def torch_model(specs: Sequence[BlockSpec], stem: ConvPlan, classes: int = 10):
    """A torch ``nn.Module`` of stem, blocks, average pool and linear classifier."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self, spec: BlockSpec):
            super().__init__()
            self.body = torch.nn.Sequential(*[_conv(torch, c) for c in plan(spec)])
            self.residual = spec.has_residual

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    width = specs[-1].c_out if specs else stem.c_out
    return torch.nn.Sequential(_conv(torch, stem), *[Block(s) for s in specs],
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(width, classes))


def digits_split(seed: int = 0):
    """(x_train, y_train, x_test, y_test): scikit-learn's digits as N x 1 x 8 x 8 in 0..1."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    return train_test_split(x, data.target, test_size=0.3, random_state=seed,
                            stratify=data.target)


def train_digits(specs: Sequence[BlockSpec], stem: ConvPlan, *, epochs: int = 15,
                 seed: int = 0) -> float:
    """Held-out accuracy (0..1) of the network after ``epochs`` of Adam on the digits."""
    import torch

    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest on a shared machine
    try:
        return _fit(torch, torch_model(specs, stem), digits_split(seed), epochs, seed)
    finally:
        torch.set_num_threads(threads)


def _fit(torch, model, split, epochs: int, seed: int) -> float:
    """Adam on the training images, minibatches of 64; accuracy on the held-out images."""
    x_tr, x_te, y_tr, y_te = split
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr).long()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    with torch.no_grad():
        pred = model(torch.from_numpy(x_te)).argmax(dim=1).numpy()
    return float((pred == y_te).mean())
